"""PyPTO's collectives of a multi-chip program: pld.tensor.allgather, broadcast, reduce_scatter, all_to_all, allreduce.

Each one runs in a per-device function (every rank meets at it, as at a
barrier) and in a host orchestrator (on ``pld.window`` views, between two
rounds of dispatches), on 2 and 4 ranks, and is compared against numpy on
random data with the outputs poisoned first.  Underneath they are the
driver's peer copies (:mod:`pypto_async.runtime._collectives`), whose bytes
``WorkerStats.bytes_peer`` counts.
"""

# no ``from __future__ import annotations``: the programs' annotations name the factories' locals (n)
import numpy as np
import pytest

import pypto_async.language as pl
import pypto_async.language.distributed as pld
from pypto_async.errors import PtoCompileError, PtoNotSupported
from pypto_async.ir.distributed_compiled_program import DistributedConfig
from pypto_async.runtime import DistributedWorker, RunConfig

C = 16
REF = {"sum": np.sum, "max": np.max, "min": np.min, "prod": np.prod}
OPS = {"sum": pld.ReduceOp.Sum, "max": pld.ReduceOp.Max, "min": pld.ReduceOp.Min, "prod": pld.ReduceOp.Prod}

rng = np.random.default_rng(3030)
#: 2 ranks in the fast tier, 4 in the slow one (the fast tier's time budget)
RANKS = [2, pytest.param(4, marks=pytest.mark.slow)]


def _cfg(n: int) -> RunConfig:
    return RunConfig(platform="sim", distributed_config=DistributedConfig(device_ids=list(range(n))))


def _data(n: int) -> np.ndarray:
    """Rank r's rows x[r] ([n, C]): random, and none of them zero."""
    return (rng.standard_normal((n, n, C)) + 0.5).astype(np.float32)


def _poisoned(shape):
    return np.full(shape, np.nan, np.float32)


def _want(kind: str, x: np.ndarray, op: str = "sum", root: int = 0) -> np.ndarray:
    """What every rank's target window holds after `kind`, from every rank's staged rows ``x[r]``."""
    n = x.shape[0]
    if kind == "allgather":  # rank j's source is its row 0
        return np.broadcast_to(x[:, 0, :], (n, n, C))
    if kind == "all_to_all":  # target[r][j] = x[j][r]
        return x.transpose(1, 0, 2)
    if kind == "broadcast":
        return np.broadcast_to(x[root], x.shape)
    if kind == "allreduce":
        return np.broadcast_to(REF[op](x, axis=0), x.shape)
    if kind == "reduce_scatter":  # row r of rank r reduced; the other rows as staged
        out = x.copy()
        red = REF[op](x, axis=0)
        for r in range(n):
            out[r, r] = red[r]
        return out
    raise AssertionError(kind)


# -- in a per-device function ---------------------------------------------------------------------


def _chip_program(kind: str, n: int, op: str = "sum", root: int = 0):
    """A host program whose per-device function stages its rows into a window and runs `kind` on it."""
    red = OPS[op]

    @pl.jit.incore
    def step(x: pl.Tensor[[n, C], pl.FP32], row: pl.Tensor[[1, C], pl.FP32], y: pl.Out[pl.Tensor[[n, C], pl.FP32]],
             win: pld.DistributedTensor[[n, C], pl.FP32], sig: pld.DistributedTensor[[n], pl.INT32]):
        if kind != "all_to_all" and kind != "allgather":
            win = pl.store(pl.load(x, [0, 0], [n, C]), [0, 0], win)
        if kind == "allgather":
            win = pld.tensor.allgather(row, win, sig)  # a plain tensor as the source
        elif kind == "all_to_all":
            win = pld.tensor.all_to_all(x, win, sig)
        elif kind == "broadcast":
            win = pld.tensor.broadcast(win, sig, root=root)
        elif kind == "reduce_scatter":
            win = pld.tensor.reduce_scatter(win, sig, op=red)
        else:
            win = pld.tensor.allreduce(win, sig, op=red)
        y = pl.store(pl.load(win, [0, 0], [n, C]), [0, 0], y)
        return y

    @pl.jit
    def chip(x: pl.Tensor[[n, C], pl.FP32], row: pl.Tensor[[1, C], pl.FP32], y: pl.Out[pl.Tensor[[n, C], pl.FP32]],
             win: pld.DistributedTensor[[n, C], pl.FP32], sig: pld.DistributedTensor[[n], pl.INT32]):
        return step(x, row, y, win, sig)

    @pl.jit.host
    def host(x: pl.Tensor[[n, n, C], pl.FP32], rows: pl.Tensor[[n, 1, C], pl.FP32],
             y: pl.Out[pl.Tensor[[n, n, C], pl.FP32]]):
        wb = pld.alloc_window_buffer([n, C], dtype=pl.FP32)
        sb = pld.alloc_window_buffer([n], dtype=pl.INT32)
        for r in pl.range(pld.world_size()):
            chip(x[r], rows[r], y[r], pld.window(wb, [n, C]), pld.window(sb, [n]), device=r)

    return host


def _run_chip(kind: str, n: int, **kw):
    x = _data(n)
    y = _poisoned(x.shape)
    _chip_program(kind, n, **kw)(x, np.ascontiguousarray(x[:, :1, :]), y, config=_cfg(n))
    return x, y


@pytest.mark.parametrize("n", RANKS)
@pytest.mark.parametrize("kind", ["allgather", "all_to_all"])
def test_allgather_and_all_to_all_in_a_per_device_function_equal_numpy(kind, n):
    x, y = _run_chip(kind, n)
    np.testing.assert_array_equal(y, _want(kind, x))


@pytest.mark.parametrize("n", RANKS)
def test_broadcast_in_a_per_device_function_gives_every_rank_the_roots_window(n):
    for root in (0, n - 1):
        x, y = _run_chip("broadcast", n, root=root)
        np.testing.assert_array_equal(y, _want("broadcast", x, root=root))


@pytest.mark.parametrize("n", RANKS)
@pytest.mark.parametrize("op", ["sum", "max", "min", "prod"])
def test_reduce_scatter_in_a_per_device_function_equals_numpy(op, n):
    x, y = _run_chip("reduce_scatter", n, op=op)
    np.testing.assert_allclose(y, _want("reduce_scatter", x, op), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n", RANKS)
def test_allreduce_prod_in_a_per_device_function_equals_numpy(n):
    x, y = _run_chip("allreduce", n, op="prod")
    np.testing.assert_allclose(y, _want("allreduce", x, "prod"), rtol=1e-5, atol=1e-6)


# -- in a host orchestrator ------------------------------------------------------------------------


def _host_program(kind: str, n: int, op: str = "sum", root: int = 0, signal: bool = True):
    """Dispatches stage each rank's rows into windows; `kind` runs in the host orchestrator; dispatches read back."""
    red = OPS[op]

    @pl.jit.incore
    def stage(x: pl.Tensor[[n, C], pl.FP32], src: pld.DistributedTensor[[n, C], pl.FP32],
              win: pld.DistributedTensor[[n, C], pl.FP32], row: pld.DistributedTensor[[1, C], pl.FP32]):
        t = pl.load(x, [0, 0], [n, C])
        src = pl.store(t, [0, 0], src)
        win = pl.store(t, [0, 0], win)
        row = pl.store(pl.load(x, [0, 0], [1, C]), [0, 0], row)
        return win

    @pl.jit
    def stage_chip(x: pl.Tensor[[n, C], pl.FP32], src: pld.DistributedTensor[[n, C], pl.FP32],
                   win: pld.DistributedTensor[[n, C], pl.FP32], row: pld.DistributedTensor[[1, C], pl.FP32]):
        return stage(x, src, win, row)

    @pl.jit.incore
    def back(win: pld.DistributedTensor[[n, C], pl.FP32], y: pl.Out[pl.Tensor[[n, C], pl.FP32]]):
        y = pl.store(pl.load(win, [0, 0], [n, C]), [0, 0], y)
        return y

    @pl.jit
    def back_chip(win: pld.DistributedTensor[[n, C], pl.FP32], y: pl.Out[pl.Tensor[[n, C], pl.FP32]]):
        return back(win, y)

    @pl.jit.host
    def host(x: pl.Tensor[[n, n, C], pl.FP32], y: pl.Out[pl.Tensor[[n, n, C], pl.FP32]]):
        sb = pld.alloc_window_buffer([n, C], dtype=pl.FP32)
        wb = pld.alloc_window_buffer([n, C], dtype=pl.FP32)
        rb = pld.alloc_window_buffer([1, C], dtype=pl.FP32)
        gb = pld.alloc_window_buffer([n], dtype=pl.INT32)
        for r in pl.range(pld.world_size()):
            stage_chip(x[r], pld.window(sb, [n, C]), pld.window(wb, [n, C]), pld.window(rb, [1, C]), device=r)
        win, sig = pld.window(wb, [n, C], dtype=pl.FP32), pld.window(gb, [n], dtype=pl.INT32)
        if kind == "allgather":
            win = pld.tensor.allgather(pld.window(rb, [1, C]), win, sig)
        elif kind == "all_to_all":
            win = pld.tensor.all_to_all(pld.window(sb, [n, C]), win, sig)
        elif kind == "broadcast":
            win = pld.tensor.broadcast(win, sig, root=root)
        elif kind == "reduce_scatter":
            win = pld.tensor.reduce_scatter(win, sig, op=red)
        elif kind == "barrier":
            pld.tensor.barrier(sig)
        elif signal:
            win = pld.tensor.allreduce(win, sig, op=red)
        else:
            win = pld.tensor.allreduce(win, op=red)  # PyPTO's host form: no signal
        for r in pl.range(pld.world_size()):
            back_chip(win, y[r], device=r)

    return host


def _run_host(kind: str, n: int, **kw):
    x = _data(n)
    y = _poisoned(x.shape)
    compiled = _host_program(kind, n, **kw).compile(x, y, config=_cfg(n))
    with DistributedWorker(list(range(n))) as dw:
        before = [w.stats().bytes_peer for w in dw.workers]
        dw.run(compiled, x, y)
        moved = [w.stats().bytes_peer - b for w, b in zip(dw.workers, before)]
    return x, y, moved, compiled


@pytest.mark.parametrize("n", RANKS)
@pytest.mark.parametrize("kind", ["allgather", "all_to_all"])
def test_allgather_and_all_to_all_in_a_host_orchestrator_equal_numpy(kind, n):
    x, y, moved, compiled = _run_host(kind, n)
    np.testing.assert_array_equal(y, _want(kind, x))
    # each rank pulled one row from each of its n - 1 peers: one peer copy each, nothing else crossed
    assert moved == [(n - 1) * C * 4] * n
    assert [s.get("collective") for s in compiled.plan()["steps"] if "collective" in s] == [kind]


@pytest.mark.parametrize("n", RANKS)
def test_broadcast_in_a_host_orchestrator_gives_every_rank_the_roots_window(n):
    root = n - 1
    x, y, moved, _ = _run_host("broadcast", n, root=root)
    np.testing.assert_array_equal(y, _want("broadcast", x, root=root))
    assert moved == [n * C * 4 if r != root else 0 for r in range(n)]


@pytest.mark.parametrize("n", RANKS)
@pytest.mark.parametrize("op", ["sum", "prod"])
def test_reduce_scatter_in_a_host_orchestrator_equals_numpy(op, n):
    x, y, moved, _ = _run_host("reduce_scatter", n, op=op)
    np.testing.assert_allclose(y, _want("reduce_scatter", x, op), rtol=1e-5, atol=1e-6)
    assert moved == [(n - 1) * C * 4] * n


@pytest.mark.parametrize("n", RANKS)
@pytest.mark.parametrize("op", ["sum", "max", "min", "prod"])
def test_allreduce_in_a_host_orchestrator_with_and_without_a_signal_equals_numpy(op, n):
    for signal in (False, True):
        x, y, moved, _ = _run_host("allreduce", n, op=op, signal=signal)
        np.testing.assert_allclose(y, _want("allreduce", x, op), rtol=1e-5, atol=1e-6)
        assert sum(moved) == 2 * (n - 1) * n * C * 4  # the ring: 2 (n - 1) / n of a window per rank


def test_a_host_barrier_orders_the_dispatches_after_it_and_moves_nothing():
    x, y, moved, _ = _run_host("barrier", 2)
    np.testing.assert_array_equal(y, x)
    assert moved == [0, 0]


# -- refused before anything runs ------------------------------------------------------------------


def test_collective_arguments_are_checked_at_compile_time():
    n = 2
    x = _data(n)

    def compile_host(body):
        @pl.jit.host
        def host(x: pl.Tensor[[n, n, C], pl.FP32], y: pl.Out[pl.Tensor[[n, n, C], pl.FP32]]):
            body(pld.alloc_window_buffer([n, C], dtype=pl.FP32), pld.alloc_window_buffer([n], dtype=pl.INT32),
                 pld.alloc_window_buffer([1, 2 * C], dtype=pl.FP32))

        return host.compile(x, _poisoned(x.shape), config=_cfg(n))

    with pytest.raises(PtoCompileError, match="different window buffers"):
        compile_host(lambda w, s, wide: pld.tensor.allgather(pld.window(w, [n, C]), pld.window(w, [n, C]),
                                                       pld.window(s, [n])))
    with pytest.raises(PtoCompileError, match="one row of the target"):
        compile_host(lambda w, s, wide: pld.tensor.allgather(pld.window(wide, [1, 2 * C]), pld.window(w, [n, C]),
                                                       pld.window(s, [n])))
    with pytest.raises(PtoCompileError, match="root must be a rank"):
        compile_host(lambda w, s, wide: pld.tensor.broadcast(pld.window(w, [n, C]), pld.window(s, [n]), root=n))
    with pytest.raises(PtoCompileError, match="takes a signal window"):
        compile_host(lambda w, s, wide: pld.tensor.broadcast(pld.window(w, [n, C]), root=0))
    with pytest.raises(PtoCompileError, match="explicit signal"):
        compile_host(lambda w, s, wide: pld.tensor.allreduce(pld.window(w, [n, C]), mode="ring"))
    with pytest.raises(PtoCompileError, match="pld.window"):
        compile_host(lambda w, s, wide: pld.tensor.allreduce(w))  # the buffer, not a view of it


def test_a_dtype_the_reduce_kernel_lacks_is_not_supported():
    n = 2

    @pl.jit.host
    def host(x: pl.Tensor[[n, n, C], pl.FP32], y: pl.Out[pl.Tensor[[n, n, C], pl.FP32]]):
        w = pld.alloc_window_buffer([n, C], dtype=pl.BF16)
        pld.tensor.reduce_scatter(pld.window(w, [n, C]), pld.window(pld.alloc_window_buffer([n], dtype=pl.INT32),
                                                                     [n]))

    x = _data(n)
    with pytest.raises(PtoNotSupported, match="BF16"):
        host.compile(x, _poisoned(x.shape), config=_cfg(n))


def _fp16_allreduce_host(n: int, ring: bool):
    @pl.jit.incore
    def stage(x: pl.Tensor[[1, C], pl.FP16], win: pld.DistributedTensor[[1, C], pl.FP16]):
        win = pl.store(pl.load(x, [0, 0], [1, C]), [0, 0], win)
        return win

    @pl.jit
    def stage_chip(x: pl.Tensor[[1, C], pl.FP16], win: pld.DistributedTensor[[1, C], pl.FP16]):
        return stage(x, win)

    @pl.jit.incore
    def back(win: pld.DistributedTensor[[1, C], pl.FP16], y: pl.Out[pl.Tensor[[1, C], pl.FP16]]):
        y = pl.store(pl.load(win, [0, 0], [1, C]), [0, 0], y)
        return y

    @pl.jit
    def back_chip(win: pld.DistributedTensor[[1, C], pl.FP16], y: pl.Out[pl.Tensor[[1, C], pl.FP16]]):
        return back(win, y)

    @pl.jit.host
    def host(x: pl.Tensor[[n, 1, C], pl.FP16], y: pl.Out[pl.Tensor[[n, 1, C], pl.FP16]]):
        wb = pld.alloc_window_buffer([1, C], dtype=pl.FP16)
        sig = pld.window(pld.alloc_window_buffer([n], dtype=pl.INT32), [n], dtype=pl.INT32)
        for r in pl.range(pld.world_size()):
            stage_chip(x[r], pld.window(wb, [1, C]), device=r)
        win = pld.window(wb, [1, C], dtype=pl.FP16)
        win = pld.tensor.allreduce(win, sig, op=pld.ReduceOp.Max, mode="ring" if ring else "mesh")
        win = pld.tensor.allreduce(win, sig, op=pld.ReduceOp.Sum)
        win = pld.tensor.broadcast(win, sig, root=n - 1)
        for r in pl.range(pld.world_size()):
            back_chip(win, y[r], device=r)

    return host


@pytest.mark.parametrize("ring", [False, True])
def test_an_fp16_host_allreduce_rounds_each_step_to_half_and_names_its_builds(ring):
    n = 2
    x = (rng.standard_normal((n, 1, C)) * 4).astype(np.float16)
    y = np.full(x.shape, np.nan, np.float16)
    compiled = _fp16_allreduce_host(n, ring).compile(x, y, config=_cfg(n))
    with DistributedWorker(list(range(n))) as dw:
        dw.run(compiled, x, y)
    mx = np.maximum(x[0], x[1])  # every rank now holds the max; their sum, rounded to half once
    np.testing.assert_array_equal(y, np.broadcast_to(mx + mx, x.shape))
    # PyPTO's layout: one next_levels/<variant>/kernel_config.py per distinct host collective
    first = "builtin.tensor.allreduce_ring__max__fp16" if ring else "builtin.tensor.allreduce__max__fp16"
    variants = {first, "builtin.tensor.allreduce__sum__fp16", "builtin.tensor.broadcast__root1__fp16"}
    builds = compiled.output_dir / "next_levels"
    assert {p.name for p in builds.iterdir()} == variants
    config = {}
    exec((builds / first / "kernel_config.py").read_text(), config)  # noqa: S102 (our own output)
    assert (config["VARIANT"], config["REDUCE_OP"], config["DTYPE"], config["WORLD_SIZE"]) == \
        (first, "max", "FP16", n)
    assert config["MODE"] == ("ring" if ring else "mesh")


def test_a_rank_count_the_window_does_not_have_is_refused_in_a_per_device_function():
    n = 2

    @pl.jit.incore
    def step(y: pl.Out[pl.Tensor[[3, C], pl.FP32]], win: pld.DistributedTensor[[3, C], pl.FP32],
             sig: pld.DistributedTensor[[n], pl.INT32]):
        win = pld.tensor.reduce_scatter(win, sig)
        return pl.store(pl.load(win, [0, 0], [3, C]), [0, 0], y)

    @pl.jit
    def chip(y: pl.Out[pl.Tensor[[3, C], pl.FP32]], win: pld.DistributedTensor[[3, C], pl.FP32],
             sig: pld.DistributedTensor[[n], pl.INT32]):
        return step(y, win, sig)

    @pl.jit.host
    def host(y: pl.Out[pl.Tensor[[n, 3, C], pl.FP32]]):
        wb = pld.alloc_window_buffer([3, C], dtype=pl.FP32)
        sb = pld.alloc_window_buffer([n], dtype=pl.INT32)
        for r in pl.range(pld.world_size()):
            chip(y[r], pld.window(wb, [3, C]), pld.window(sb, [n]), device=r)

    with pytest.raises(PtoCompileError, match="first dimension must be the rank count, 2"):
        host.compile(_poisoned((n, 3, C)), config=_cfg(n))


# -- PyPTO's own forms: byte-count window buffers, pl.dynamic rank dimensions ---------------------


def test_a_window_buffer_allocated_by_byte_count_takes_its_first_views_shape():
    n = 2

    @pl.jit.incore
    def back(win: pld.DistributedTensor[[n, C], pl.FP32], y: pl.Out[pl.Tensor[[n, C], pl.FP32]]):
        return pl.store(pl.load(win, [0, 0], [n, C]), [0, 0], y)

    @pl.jit
    def back_chip(win: pld.DistributedTensor[[n, C], pl.FP32], y: pl.Out[pl.Tensor[[n, C], pl.FP32]]):
        return back(win, y)

    @pl.jit.incore
    def stage(row: pl.Tensor[[1, C], pl.FP32], s: pld.DistributedTensor[[1, C], pl.FP32]):
        return pl.store(pl.load(row, [0, 0], [1, C]), [0, 0], s)

    @pl.jit
    def stage_chip(row: pl.Tensor[[1, C], pl.FP32], s: pld.DistributedTensor[[1, C], pl.FP32]):
        return stage(row, s)

    @pl.jit.host
    def host(x: pl.Tensor[[n, 1, C], pl.FP32], y: pl.Out[pl.Tensor[[n, n, C], pl.FP32]]):
        sb = pld.alloc_window_buffer(C * 4)  # PyPTO's canonical form: bytes
        wb = pld.alloc_window_buffer(pld.world_size() * C * 4)
        gb = pld.alloc_window_buffer(pld.world_size() * 4)
        for r in pl.range(pld.world_size()):
            stage_chip(x[r], pld.window(sb, [1, C], dtype=pl.FP32), device=r)
        win = pld.tensor.allgather(pld.window(sb, [1, C], dtype=pl.FP32),
                                   pld.window(wb, [pld.world_size(), C], dtype=pl.FP32),
                                   pld.window(gb, [pld.world_size()], dtype=pl.INT32))
        for r in pl.range(pld.world_size()):
            back_chip(win, y[r], device=r)

    x = rng.standard_normal((n, 1, C)).astype(np.float32)
    y = _poisoned((n, n, C))
    host(x, y, config=_cfg(n))
    np.testing.assert_array_equal(y, np.broadcast_to(x[:, 0, :], (n, n, C)))

    def compile_host(body):
        @pl.jit.host
        def h(x: pl.Tensor[[n, 1, C], pl.FP32]):
            body(pld.alloc_window_buffer(C * 4))

        return h.compile(x, config=_cfg(n))

    with pytest.raises(PtoCompileError, match=r"does not fit the buffer's 64 bytes"):
        compile_host(lambda b: pld.window(b, [2, C], dtype=pl.FP32))
    with pytest.raises(PtoCompileError, match=r"must be its first view, FP32\[1, 16\]"):
        compile_host(lambda b: (pld.window(b, [1, C], dtype=pl.FP32), pld.window(b, [C], dtype=pl.INT32)))
    with pytest.raises(PtoCompileError, match="dtype= goes with a shape"):
        compile_host(lambda b: pld.alloc_window_buffer(64, dtype=pl.FP32))


PYPTO_HOST_ST = "/tmp/pypto/tests/st/distributed/test_l3_host_tensor_allreduce.py"


@pytest.mark.slow
@pytest.mark.parametrize("n", [2, 4])
def test_pyptos_host_allreduce_program_runs_unchanged_but_for_imports(n):
    """PyPTO's HOST-builtin allreduce system test program (pl.dynamic ranks, byte-count windows), its own check."""
    import importlib.util
    import os
    import sys
    import types

    if not os.path.exists(PYPTO_HOST_ST):
        pytest.skip("needs a PyPTO checkout at /tmp/pypto")
    torch = pytest.importorskip("torch")
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("_pypto_examples", root / "benchmarks" / "pypto_examples.py")
    ex = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("_pypto_examples", ex)
    spec.loader.exec_module(ex)
    mod = types.ModuleType("pypto_host_allreduce")
    exec(compile(ex.adapt(Path(PYPTO_HOST_ST).read_text()), PYPTO_HOST_ST, "exec"), mod.__dict__)  # noqa: S102
    from pypto_async import ir

    compiled = ir.compile(mod.HostTensorAllReduce, platform="sim",
                          distributed_config=DistributedConfig(device_ids=list(range(n)), num_sub_workers=0))
    inputs = mod._make_rank_inputs(n)
    outputs = torch.full((n, 1, mod.SIZE), float("nan"))
    compiled(inputs, outputs)
    assert torch.allclose(outputs, mod._expected_allreduce(inputs))
