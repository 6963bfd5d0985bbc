"""A third pass of programs written from PyPTO's user guide, run on the sim.

The pages the first two passes (test_user_guide_programs.py, test_user_guide_programs2.py) do
not cite: the running-on-device page (00-getting_started.md: compiling from the signature,
``pl.RUNTIME``, registration handles, a resident tensor a kernel writes), the first-operator and
task-graph tutorials (tutorials/00-elementwise.md, 04-task-graph.md), the FAQ
(appendix/01-faq.md) and the ops catalog (ops/01-catalog.md: ``tri``, ``concat``, scalar
``min``).  Each is what a user following the page would write (the import and the platform
changed only), on random data against a torch reference, outputs poisoned first; where the page
documents a refusal, the refusal is a PtoError naming the construct.
"""

import pytest
import torch

import pypto_async.language as pl
from pypto_async import ir
from pypto_async.errors import PtoClosedError, PtoCompileError, PtoError
from pypto_async.runtime import ChipWorker, RunConfig

CFG = RunConfig(platform="sim")


def _nan(*shape, dtype=torch.float32):
    return torch.full(shape, float("nan"), dtype=dtype)


# --- 00-getting_started.md: compile() from the signature, pl.RUNTIME, handles -------------------------


def test_a_signature_compiled_dynamic_kernel_through_a_registration_handle():
    """compile() with no samples, a pl.dynamic leading dim and a pl.RUNTIME default, then register().

    The page's ergonomic path: one artifact for every extent, dispatched through
    ``worker.register(compiled)`` (and ``worker.run``), the scalar given at dispatch.
    """
    M = pl.dynamic("M")

    @pl.jit
    def scale(x: pl.Tensor[[M, 64], pl.FP32], out: pl.InOut[pl.Tensor[[M, 64], pl.FP32]],
              n: pl.Scalar[pl.INT32] = pl.RUNTIME):
        with pl.at(level=pl.Level.CORE_GROUP):
            for i in pl.range(n):
                pl.store(pl.mul(pl.load(x, [i * 16, 0], [16, 64]), 2.0), [i * 16, 0], out)
        return out

    compiled = scale.compile()
    with ChipWorker(config=CFG) as w:
        with w.register(compiled) as handle:
            assert w.register(compiled) is handle and handle.cid == w.register(compiled).cid
            for m, n in ((32, 2), (64, 3), (48, 1)):
                x, out = torch.randn(m, 64), torch.randn(m, 64)
                before = out.clone()
                handle(x, out, n)
                torch.testing.assert_close(out[:n * 16], 2 * x[:n * 16])
                torch.testing.assert_close(out[n * 16:], before[n * 16:])  # rows past n: not written
            with pytest.raises(PtoError, match="declared"):
                handle(torch.randn(32, 32), torch.randn(32, 64), 1)  # the static dimension is checked
        assert handle.closed
        with pytest.raises(PtoClosedError):
            handle(torch.randn(32, 64), torch.randn(32, 64), 1)
        x, out = torch.randn(80, 64), _nan(80, 64)
        w.run(compiled, x, out, 5)
        torch.testing.assert_close(out, 2 * x)
        # The handle of one extent (a sample-tensor compile) takes the same call.
        view = scale.compile(torch.empty(16, 64), torch.empty(16, 64))
        x, out = torch.randn(16, 64), _nan(16, 64)
        w.register(view)(x, out, 1)
        torch.testing.assert_close(out, 2 * x)


def test_a_resident_accumulator_written_by_a_kernel_is_copied_back_on_request():
    """A DeviceTensor a kernel adds into stays on the device; copy_from reads it; unregister closes."""

    @pl.jit
    def accumulate(a: pl.Tensor, acc: pl.InOut[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            acc[:] = pl.add(acc, a)
        return acc

    A = torch.randn(32, 32)
    compiled = ir.compile(accumulate.lower(A, torch.zeros(32, 32)), platform="sim")
    with ChipWorker(config=CFG) as w:
        acc = w.alloc_tensor((32, 32), torch.float32, init=torch.zeros(32, 32))
        handle = w.register(compiled)
        for _ in range(3):
            handle(A, acc)
        host = _nan(32, 32)
        w.copy_from(host.data_ptr(), acc.data_ptr, acc.nbytes)
        torch.testing.assert_close(host, 3 * A)
        handle.unregister()
        with pytest.raises(PtoClosedError):
            handle(A, acc)
        w.register(compiled)(A, acc)  # registering again: a new, open handle
        w.copy_from(host.data_ptr(), acc.data_ptr, acc.nbytes)
        torch.testing.assert_close(host, 4 * A)
        w.free_tensor(acc)


def test_compile_with_no_samples_names_a_bare_tensor_parameter():
    @pl.jit
    def add(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            out[:] = pl.add(a, a)
        return out

    with pytest.raises(PtoCompileError, match="parameter 'a' has no shape"):
        add.compile()


# --- appendix/01-faq.md: a DeviceTensor passed to @pl.jit -------------------------------------------


def test_a_device_tensor_passed_to_a_jit_kernel_is_refused_by_name():
    @pl.jit
    def double(x: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            out[:] = pl.add(x, x)
        return out

    with ChipWorker(config=CFG) as w:
        d = w.alloc_tensor((16, 16), torch.float32, init=torch.randn(16, 16))
        with pytest.raises(PtoError, match="DeviceTensor carries no shape"):
            double(d, _nan(16, 16))
        w.free_tensor(d)


# --- tutorials/04-task-graph.md: predicates, joins, TaskId arrays -------------------------------------


def test_pl_at_refuses_predicate_and_names_the_forms_that_take_it():
    @pl.jit
    def gated(x: pl.Tensor[[16, 16], pl.FP32], gate: pl.Tensor[[4], pl.INT32],
              out: pl.Out[pl.Tensor[[16, 16], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP, predicate=(gate[0] > 0)):
            out[:] = pl.add(x, x)
        return out

    with pytest.raises(PtoCompileError, match=r"pl.at\(\) takes no predicate=.*pl.spmd"):
        gated(torch.randn(16, 16), torch.ones(4, dtype=torch.int32), _nan(16, 16), config=CFG)


@pytest.mark.parametrize("count", [1, 0])
def test_an_inline_spmd_predicate_skips_the_region_where_it_fails(count):
    """The page's inline ``with pl.spmd(n, deps=..., predicate=...) as tid:`` region: its blocks run where it holds."""

    @pl.jit
    def gated(x: pl.Tensor[[32, 32], pl.FP32], counts: pl.Tensor[[4], pl.INT32],
              out: pl.InOut[pl.Tensor[[32, 32], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP) as first:
            out[:] = pl.add(x, 0.0)
        with pl.spmd(2, deps=[first], predicate=(counts[0] > 0)) as tid:
            r = pl.get_block_idx() * 16
            pl.store(pl.mul(pl.load(out, [r, 0], [16, 32]), 3.0), [r, 0], out)
        del tid
        return out

    x, counts, out = torch.randn(32, 32), torch.randint(-5, 5, (4,), dtype=torch.int32), _nan(32, 32)
    counts[0] = count
    gated(x, counts, out, config=CFG)
    torch.testing.assert_close(out, x * (3.0 if count > 0 else 1.0))


@pytest.mark.slow
def test_named_stages_an_explicit_edge_a_join_and_a_task_id_array():
    @pl.jit
    def graph(x: pl.Tensor[[64, 32], pl.FP32], scratch: pl.Out[pl.Tensor[[64, 32], pl.FP32]],
              parts: pl.Out[pl.Tensor[[64, 32], pl.FP32]], total: pl.Out[pl.Tensor[[16, 32], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP, name_hint="stage1") as first:
            scratch[:] = pl.add(x, x)
        tids = pl.array.create(4, pl.TASK_ID)
        for i in pl.parallel(4):
            with pl.at(level=pl.Level.CORE_GROUP, name_hint="stage2", deps=[first]) as t:
                parts[i * 16:i * 16 + 16, :] = pl.add(scratch[i * 16:i * 16 + 16, :], x[i * 16:i * 16 + 16, :])
            tids[i] = t
        joined = pl.system.task_dummy(deps=[tids])
        with pl.at(level=pl.Level.CORE_GROUP, name_hint="reduce", deps=[joined]):
            acc = pl.load(parts, [0, 0], [16, 32])
            for j in pl.range(1, 4):
                acc = pl.add(acc, pl.load(parts, [j * 16, 0], [16, 32]))
            pl.store(acc, [0, 0], total)
        return scratch, parts, total

    x = torch.randn(64, 32)
    scratch, parts, total = _nan(64, 32), _nan(64, 32), _nan(16, 32)
    graph(x, scratch, parts, total, config=CFG)
    torch.testing.assert_close(scratch, 2 * x)
    torch.testing.assert_close(parts, 3 * x)
    torch.testing.assert_close(total, 3 * x.reshape(4, 16, 32).sum(0), rtol=1e-5, atol=1e-5)


# --- tutorials/00-elementwise.md: chunks at computed offsets, the three ways to write -----------------


@pytest.mark.slow
def test_chunked_add_and_the_three_write_forms():
    ROWS, COLS, TILE_ROWS = 256, 64, 64

    @pl.jit
    def add_chunked(a: pl.Tensor[[256, 64], pl.FP32], b: pl.Tensor[[256, 64], pl.FP32],
                    out: pl.Out[pl.Tensor[[256, 64], pl.FP32]], halves: pl.Out[pl.Tensor[[256, 64], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            for i in pl.range(ROWS // TILE_ROWS):
                ta = pl.load(a, [i * TILE_ROWS, 0], [TILE_ROWS, COLS])
                tb = pl.load(b, [i * TILE_ROWS, 0], [TILE_ROWS, COLS])
                pl.store(pl.add(ta, tb), [i * TILE_ROWS, 0], out)
            for r in pl.range(2):
                r0 = r * 128
                halves[r0:r0 + 128, 0:32] = pl.mul(a[r0:r0 + 128, 0:32], 2.0)
                halves = pl.assemble(halves, pl.sub(a[r0:r0 + 128, 32:64], b[r0:r0 + 128, 32:64]), [r0, 32])
        return out, halves

    a, b = torch.randn(256, 64), torch.randn(256, 64)
    out, halves = _nan(256, 64), _nan(256, 64)
    add_chunked(a, b, out, halves, config=CFG)
    torch.testing.assert_close(out, a + b)
    torch.testing.assert_close(halves, torch.cat([2 * a[:, :32], a[:, 32:] - b[:, 32:]], 1))


# --- ops/01-catalog.md: tri (runtime diagonal), concat, scalar min --------------------------------------


@pytest.mark.slow
def test_tri_masks_with_a_runtime_diagonal_and_both_sides():
    @pl.jit
    def masks(x: pl.Tensor[[32, 32], pl.FP32], lo: pl.Out[pl.Tensor[[32, 32], pl.FP32]],
              up: pl.Out[pl.Tensor[[32, 32], pl.FP32]], d: pl.Scalar[pl.INT32]):
        with pl.at(level=pl.Level.CORE_GROUP):
            t = pl.load(x, [0, 0], [32, 32])
            lower = pl.cast(pl.tri(0, [32, 32]), pl.FP32)  # INT32 by default
            upper = pl.tri(d, [32, 32], dtype=pl.FP32, upper=True)
            pl.store(pl.mul(t, lower), [0, 0], lo)
            pl.store(pl.mul(t, upper), [0, 0], up)
        return lo, up

    x = torch.randn(32, 32)
    for d in (2, -3):
        lo, up = _nan(32, 32), _nan(32, 32)
        masks(x, lo, up, d, config=CFG)
        torch.testing.assert_close(lo, torch.tril(x))
        torch.testing.assert_close(up, torch.triu(x, d))


@pytest.mark.slow
def test_concat_of_two_tiles_and_a_scalar_min_clamping_an_offset():
    @pl.jit
    def k(a: pl.Tensor[[64, 32], pl.FP32], b: pl.Tensor[[64, 32], pl.FP32],
          joined: pl.Out[pl.Tensor[[16, 64], pl.FP32]], clamped: pl.Out[pl.Tensor[[64, 32], pl.FP32]],
          last: pl.Scalar[pl.INT32]):
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.store(pl.concat(pl.load(a, [0, 0], [16, 32]), pl.load(b, [0, 0], [16, 32])), [0, 0], joined)
            for i in pl.range(4):
                r = pl.min(i * 16, last)  # a scalar min of two values, not a reduction
                pl.store(pl.add(pl.load(a, [r, 0], [16, 32]), 1.0), [i * 16, 0], clamped)
        return joined, clamped

    a, b = torch.randn(64, 32), torch.randn(64, 32)
    joined, clamped = _nan(16, 64), _nan(64, 32)
    k(a, b, joined, clamped, 16, config=CFG)
    torch.testing.assert_close(joined, torch.cat([a[:16], b[:16]], 1))
    torch.testing.assert_close(clamped, torch.cat([a[0:16], a[16:32], a[16:32], a[16:32]]) + 1)
