"""Where PyPTO's guide and the sim could part: literal scalars, the inline predicated ``pl.spmd``, a scalar
left out of a call, tensor ops outside ``pl.at``, and registering one program twice.

What PyPTO documents, and what it does here:

* 00-getting_started.md ("compiling from the signature"): a number given for a scalar parameter
  specialises the artifact on it (``kernel.compile(n=128)`` "only ever sees 128"; ``kernel(x, out, 128)``
  compiles a separate artifact per value); ``pl.RUNTIME`` leaves it a value read at dispatch.  Same here,
  and a launch of a specialised artifact with another value there is a ``PtoArgumentError``.
* tasks/02-submit.md, 03-tuning.md, tutorials/04-task-graph.md: ``with pl.spmd(n, deps=[...],
  predicate=(gate[e] > 0)) as tid:`` is the inline form that carries a dispatch predicate: the task
  runs only where it holds, read once its deps are met.  Same here.
* A scalar left out of a call: a ``PtoArgumentError`` naming the parameter.
* 02-quickstart.md, language/01-functions.md: tensor ops in a ``@pl.jit`` body outside ``pl.at`` fail
  with "Misplaced tensor op".  Here they run (docs/pypto_compat.md, ``pl.jit``: extended).
* 00-getting_started.md: several ``register`` calls of one program alias one cid.  Here they return one
  handle (docs/pypto_compat.md, ``runtime.ChipWorker.register``: differs).

Random data against torch, outputs poisoned first.
"""

import pytest
import torch

import pypto_async.language as pl
from pypto_async.errors import PtoArgumentError, PtoClosedError, PtoCompileError, PtoNotSupported
from pypto_async.runtime import ChipWorker, RunConfig

CFG = RunConfig(platform="sim")


def _nan(*shape, dtype=torch.float32):
    return torch.full(shape, float("nan"), dtype=dtype)


# --- a literal scalar specialises the artifact ----------------------------------------------------------


@pl.jit
def chunked(x: pl.Tensor[[64, 32], pl.FP32], out: pl.Out[pl.Tensor[[64, 32], pl.FP32]],
            rows: pl.Scalar[pl.INT32], alpha: pl.Scalar[pl.FP32]):
    with pl.at(level=pl.Level.CORE_GROUP):
        for i in range(64 // rows):  # a Python loop over the number: one load and store per chunk
            t = pl.load(x, [i * rows, 0], [rows, 32])  # a tile shape: needs the number
            if rows > 16:  # decided while tracing
                t = pl.add(t, 1.0)
            pl.store(pl.mul(t, alpha), [i * rows, 0], out)
    return out


def _chunked_want(x, rows, alpha):
    return (x + 1.0) * alpha if rows > 16 else x * alpha


@pytest.mark.slow  # a kernel build per value
def test_a_literal_scalar_is_a_number_in_the_body_and_an_artifact_per_value():
    x = torch.randn(64, 32)
    for rows, alpha in ((16, 2.0), (32, 2.0), (8, -0.5)):
        out = _nan(64, 32)
        chunked(x, out, rows, alpha, config=CFG)
        torch.testing.assert_close(out, _chunked_want(x, rows, alpha))
    c16 = chunked.compile(x, out, 16, 2.0)
    assert chunked.compile(x, out, 16, 2.0) is c16  # the same value: the cached artifact
    assert chunked.compile(x, out, 32, 2.0) is not c16 and chunked.compile(x, out, 16, 3.0) is not c16
    assert chunked.compile(rows=16, alpha=2.0) is c16  # from the signature, the same specialisation
    assert c16.param_names == ["x", "out", "rows", "alpha"]  # the parameters stay in the signature
    out = _nan(64, 32)
    c16(x, out, 16, 2.0)
    torch.testing.assert_close(out, x * 2.0)
    # "A kernel that only ever sees" its value: another number passed to that artifact is refused.
    out = _nan(64, 32)
    with pytest.raises(PtoArgumentError, match=r"argument 'alpha': the artifact was compiled for alpha=2\.0 .* got 5\.0"):
        c16(x, out, 16, 5.0)
    assert torch.isnan(out).all()  # refused before anything ran


def test_pl_runtime_leaves_the_scalar_to_dispatch_one_artifact_for_every_value():
    @pl.jit
    def scale(x: pl.Tensor[[64, 32], pl.FP32], out: pl.InOut[pl.Tensor[[64, 32], pl.FP32]],
              n: pl.Scalar[pl.INT32] = pl.RUNTIME, alpha: pl.Scalar[pl.FP32] = pl.RUNTIME):
        with pl.at(level=pl.Level.CORE_GROUP):
            for i in pl.range(n):
                pl.store(pl.mul(pl.load(x, [i * 16, 0], [16, 32]), alpha), [i * 16, 0], out)
        return out

    compiled = scale.compile()
    assert scale.compile(n=pl.RUNTIME, alpha=pl.RUNTIME) is compiled
    x = torch.randn(64, 32)
    with ChipWorker(config=CFG) as w:
        handle = w.register(compiled)
        for n, alpha in ((4, 0.5), (2, -3.0)):
            out = torch.randn(64, 32)
            before = out.clone()
            handle(x, out, n, alpha)
            torch.testing.assert_close(out[:n * 16], x[:n * 16] * alpha)
            torch.testing.assert_close(out[n * 16:], before[n * 16:])  # rows past n: not written
    # A Python loop over it (or a shape) needs the number: pl.RUNTIME there is refused at the line.
    with pytest.raises(PtoCompileError, match=r"scalar parameter 'rows' has no value at trace time .* Python range"):
        chunked.compile(rows=pl.RUNTIME, alpha=1.0)


@pytest.mark.slow  # a kernel build per value
def test_a_literal_scalar_casts_as_a_number():
    @pl.jit
    def shift(x: pl.Tensor[[16, 32], pl.FP32], out: pl.Out[pl.Tensor[[16, 32], pl.FP32]], k: pl.Scalar[pl.INT32]):
        with pl.at(level=pl.Level.CORE_GROUP):
            out[:] = pl.add(x, pl.cast(k, pl.FP32))
        return out

    x = torch.randn(16, 32)
    for k in (3, -7):
        out = _nan(16, 32)
        shift(x, out, k, config=CFG)
        torch.testing.assert_close(out, x + k)

    @pl.jit
    def narrow(x: pl.Tensor[[16, 32], pl.INT32], out: pl.Out[pl.Tensor[[16, 32], pl.INT32]], s: pl.Scalar[pl.FP32]):
        with pl.at(level=pl.Level.CORE_GROUP):
            out[:] = pl.add(x, pl.cast(s, pl.INT32))  # PyPTO's default mode, "round": ties away from zero
        return out

    x = torch.randint(-100, 100, (16, 32), dtype=torch.int32)
    for s, rounded in ((2.5, 3), (-2.5, -3), (1.4, 1), (-0.6, -1)):
        out = torch.full((16, 32), -1234, dtype=torch.int32)
        narrow(x, out, s, config=CFG)
        torch.testing.assert_close(out, x + rounded)


# --- the inline predicated pl.spmd -------------------------------------------------------------------


@pl.jit
def gated(x: pl.Tensor[[32, 32], pl.FP32], counts: pl.Out[pl.Tensor[[1, 8], pl.INT32]],
          out: pl.Out[pl.Tensor[[32, 32], pl.FP32]], e: pl.Scalar[pl.INT32] = pl.RUNTIME):
    with pl.at(level=pl.Level.CORE_GROUP, name_hint="count") as counted:
        out[:] = pl.add(x, 1.0)
        pl.write(counts, [0, 3], e)  # the gate the next task reads: its producer is in deps=
    with pl.spmd(2, name_hint="scale", deps=[counted], predicate=(counts[0, 3] > 0)) as tid:
        r = pl.get_block_idx() * 16
        pl.store(pl.mul(pl.load(out, [r, 0], [16, 32]), 3.0), [r, 0], out)
    with pl.at(level=pl.Level.CORE_GROUP, deps=[tid]):  # runs whether the predicated task ran or not
        pl.store(pl.sub(pl.load(out, [0, 0], [16, 32]), 2.0), [0, 0], out)
    return counts, out


@pytest.mark.parametrize("e", [5, 0, -3])
def test_an_inline_spmd_predicate_runs_its_blocks_only_where_it_holds(e):
    x = torch.randn(32, 32)
    compiled = gated.compile(x, torch.zeros(1, 8, dtype=torch.int32), x)
    counts, out = torch.full((1, 8), -99, dtype=torch.int32), _nan(32, 32)
    with ChipWorker(config=CFG) as w:
        w.run(compiled, x, counts, out, e)
    want = (x + 1.0) * (3.0 if e > 0 else 1.0)
    want[:16] -= 2.0
    torch.testing.assert_close(out, want)
    assert counts[0, 3] == e
    graph = compiled.task_graph
    assert {(x.src, x.dst) for x in graph.edges} >= {(0, 1), (1, 2)}


def test_a_bare_spmd_predicate_on_an_input_gate():
    @pl.jit
    def k(x: pl.Tensor[[32, 32], pl.FP32], gate: pl.Tensor[[4], pl.INT32], out: pl.InOut[pl.Tensor[[32, 32], pl.FP32]]):
        with pl.spmd(2, predicate=(gate[2] >= 7)):
            r = pl.get_block_idx() * 16
            pl.store(pl.load(x, [r, 0], [16, 32]), [r, 0], out)
        return out

    x = torch.randn(32, 32)
    for g in (7, 6, 8):
        gate, out = torch.randint(-9, 9, (4,), dtype=torch.int32), torch.randn(32, 32)
        gate[2] = g
        before = out.clone()
        k(x, gate, out, config=CFG)
        torch.testing.assert_close(out, x if g >= 7 else before)


def test_a_spmd_predicate_is_one_integer_element_and_not_on_the_loop_form():
    def kernel(form):
        @pl.jit
        def k(x: pl.Tensor[[32, 32], pl.FP32], g: pl.Tensor[[4], pl.FP32], n: pl.Tensor[[4], pl.INT32],
              out: pl.Out[pl.Tensor[[32, 32], pl.FP32]]):
            if form == "float":
                with pl.spmd(2, predicate=(g[0] > 0)):
                    pl.store(pl.load(x, [pl.get_block_idx() * 16, 0], [16, 32]), [pl.get_block_idx() * 16, 0], out)
            elif form == "window":
                with pl.spmd(2, predicate=(n[0:2] > 0)):
                    pl.store(pl.load(x, [pl.get_block_idx() * 16, 0], [16, 32]), [pl.get_block_idx() * 16, 0], out)
            else:
                for b in pl.spmd(2, predicate=(n[0] > 0)):
                    pl.store(pl.load(x, [b * 16, 0], [16, 32]), [b * 16, 0], out)
            return out
        return k

    for form, exc, message in (("float", PtoNotSupported, "integer tensor"),
                               ("window", PtoCompileError, "compares one element"),
                               ("loop", PtoNotSupported, r"for \.\.\. in pl.spmd")):
        with pytest.raises(exc, match=message):
            kernel(form).compile()


# --- a scalar argument left out -------------------------------------------------------------------------


@pl.jit
def scaled(x: pl.Tensor[[16, 16], pl.FP32], out: pl.Out[pl.Tensor[[16, 16], pl.FP32]], n: pl.Scalar[pl.INT32]):
    with pl.at(level=pl.Level.CORE_GROUP):
        out[:] = pl.mul(x, n)
    return out


def test_a_scalar_left_out_is_named():
    x, out = torch.randn(16, 16), _nan(16, 16)
    for call in (lambda: scaled(x, out), lambda: scaled.compile(x, out), lambda: scaled.lower(x, out)):
        with pytest.raises(PtoArgumentError, match=r"scaled: missing argument 'n' \(a pl.Scalar\[INT32\] parameter\)"):
            call()
    compiled = scaled.compile(x, out, 3)
    with ChipWorker(config=CFG) as w:
        handle = w.register(compiled)
        # Two arguments bind as a return-style call (x, n): the array lands in n's slot, and the message says so.
        for call in (lambda: w.run(compiled, x, out), lambda: handle(x, out), lambda: compiled(x, out)):
            with pytest.raises(PtoArgumentError, match=r"argument 'n'.*scalar argument left out"):
                call()
        assert out.isnan().all()  # nothing ran
        handle(x, out, 3)
    torch.testing.assert_close(out, x * 3)


# --- tensor ops outside pl.at (PyPTO: "Misplaced tensor op") --------------------------------------------


def test_tensor_ops_outside_pl_at_run_here_in_program_order():
    @pl.jit
    def bare(x: pl.Tensor[[64, 64], pl.FP32], out: pl.Out[pl.Tensor[[64, 64], pl.FP32]]):
        out[:] = pl.add(x, x)  # PyPTO: "Misplaced tensor op 'tensor.add' in Orchestration function"
        return out

    @pl.jit
    def mixed(x: pl.Tensor[[64, 64], pl.FP32], mid: pl.Out[pl.Tensor[[64, 64], pl.FP32]],
              out: pl.Out[pl.Tensor[[64, 64], pl.FP32]]):
        mid[:] = pl.exp(x)
        with pl.at(level=pl.Level.CORE_GROUP):
            out[:] = pl.mul(mid, 3.0)
        mid[:] = pl.add(out, x)  # after the region: reads what it wrote
        return mid, out

    x = torch.randn(64, 64)
    out = _nan(64, 64)
    bare(x, out, config=CFG)
    torch.testing.assert_close(out, 2 * x)
    mid, out = _nan(64, 64), _nan(64, 64)
    mixed(x, mid, out, config=CFG)
    torch.testing.assert_close(out, 3 * torch.exp(x))
    torch.testing.assert_close(mid, 3 * torch.exp(x) + x)


# --- registering one program twice ----------------------------------------------------------------------


def test_registering_a_program_again_returns_its_one_handle():
    x = torch.randn(16, 16)
    compiled = scaled.compile(x, x, 2)
    with ChipWorker(config=CFG) as w:
        h1 = w.register(compiled)
        h2 = w.register(compiled)
        assert h1 is h2 and h1.cid == h2.cid  # PyPTO: two handles aliasing one cid
        loaded = w.aicpu_dlopen_count
        h1.unregister()
        with pytest.raises(PtoClosedError):
            h2(x, _nan(16, 16), 2)  # one handle: closed for every caller (PyPTO's h2 stays open)
        h3 = w.register(compiled)
        assert h3 is not h1 and not h3.closed and w.aicpu_dlopen_count == loaded + 1
        out = _nan(16, 16)
        h3(x, out, 2)
        torch.testing.assert_close(out, 2 * x)


def test_an_equality_predicate_is_refused_naming_the_comparisons_taken():
    with pytest.raises(PtoCompileError, match=r"== and != compare tensors as objects here.*<, <=, > or >="):
        @pl.jit
        def k(x: pl.Tensor[[32, 32], pl.FP32], gate: pl.Tensor[[4], pl.INT32], out: pl.Out[pl.Tensor[[32, 32], pl.FP32]]):
            with pl.spmd(2, predicate=(gate[2] == 7)):
                pl.store(pl.load(x, [pl.get_block_idx() * 16, 0], [16, 32]), [pl.get_block_idx() * 16, 0], out)
            return out

        k.compile()
