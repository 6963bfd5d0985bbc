"""pl.system.sync_src / sync_dst / bar_v / bar_m / bar_all order nothing the sim does not; task_invalid is None."""

import numpy as np
import pytest
import torch

import pypto_async.language as pl
from pypto_async import ir
from pypto_async.errors import PtoCompileError
from helpers.ir_fixtures import poison

R, C = 16, 32


@pl.jit
def staged(a: pl.Tensor[[R, C], pl.FP32], b: pl.Tensor[[R, C], pl.FP32], out: pl.Out[pl.Tensor[[R, C], pl.FP32]]):
    with pl.incore():
        ta = pl.load(a, [0, 0], [R, C])
        tb = pl.load(b, [0, 0], [R, C])
        pl.system.sync_src(set_pipe=pl.PipeType.MTE2, wait_pipe=pl.PipeType.V, event_id=0)
        pl.system.sync_dst(set_pipe=pl.PipeType.MTE2, wait_pipe=pl.PipeType.V, event_id=0)
        s = pl.mul(pl.add(ta, tb), tb)
        pl.system.bar_v()
        pl.system.bar_m()
        pl.system.sync_src(set_pipe=pl.PipeType.V, wait_pipe=pl.PipeType.MTE3, event_id=1)
        pl.system.sync_dst(set_pipe=pl.PipeType.V, wait_pipe=pl.PipeType.MTE3, event_id=1)
        pl.store(s, [0, 0], out)
        pl.system.bar_all()
    return out


def test_a_kernel_with_flags_and_barriers_computes_its_ops(rng):
    a, b = rng.standard_normal((R, C), dtype=np.float32), rng.standard_normal((R, C), dtype=np.float32)
    out = poison((R, C))
    staged(a, b, out)
    np.testing.assert_allclose(out, (a + b) * b, rtol=1e-6)


def _trace(body):
    @pl.jit
    def k(x: pl.Tensor[[8, 8], pl.FP32], y: pl.Out[pl.Tensor[[8, 8], pl.FP32]]):
        with pl.incore():
            body()
            pl.store(pl.load(x, [0, 0], [8, 8]), [0, 0], y)

    k.lower(np.zeros((8, 8), np.float32), poison((8, 8)))


@pytest.mark.parametrize(("body", "message"), [
    (lambda: pl.system.sync_src(set_pipe="V", wait_pipe=pl.PipeType.M, event_id=0), "sync_src: set_pipe must be a pl.PipeType"),
    (lambda: pl.system.sync_dst(set_pipe=pl.PipeType.V, wait_pipe=4, event_id=0), "sync_dst: wait_pipe must be a pl.PipeType"),
    (lambda: pl.system.sync_src(set_pipe=pl.PipeType.V, wait_pipe=pl.PipeType.M, event_id=-1),
     "sync_src: event_id must be a non-negative int, got -1"),
    (lambda: pl.system.sync_dst(set_pipe=pl.PipeType.V, wait_pipe=pl.PipeType.M, event_id=True),
     "sync_dst: event_id must be a non-negative int"),
])
def test_bad_flag_arguments_are_compile_errors(body, message):
    with pytest.raises(PtoCompileError, match=message):
        _trace(body)


@pytest.mark.parametrize("op", ["bar_v", "bar_m", "bar_all", "task_invalid"])
def test_outside_a_kernel_they_are_compile_errors(op):
    with pytest.raises(PtoCompileError, match=f"pl.system.{op} can only be called inside"):
        getattr(pl.system, op)()
    with pytest.raises(PtoCompileError, match="pl.system.sync_src can only be called inside"):
        pl.system.sync_src(set_pipe=pl.PipeType.V, wait_pipe=pl.PipeType.M, event_id=0)


N, STEPS, ROWS = 2, 3, 8


@pl.program
class SeededChains:
    """PyPTO's carried task id seeded with pl.system.task_invalid() (its printer's spelling of None)."""

    @pl.function(type=pl.FunctionType.InCore)
    def stripe(self, a: pl.Tensor[[N * STEPS * ROWS, C], pl.FP32], row: pl.Scalar[pl.INDEX],
               out: pl.Out[pl.Tensor[[N * STEPS * ROWS, C], pl.FP32]]):
        t = pl.load(a, [row, 0], [ROWS, C])
        return pl.store(pl.mul(t, 2.0), [row, 0], out)

    @pl.function(type=pl.FunctionType.Orchestration)
    def main(self, a: pl.Tensor[[N * STEPS * ROWS, C], pl.FP32], out: pl.Out[pl.Tensor[[N * STEPS * ROWS, C], pl.FP32]]):
        with pl.manual_scope():
            for b in pl.parallel(N):
                prev = pl.system.task_invalid()
                for step in pl.range(STEPS):
                    out, prev = pl.submit(self.stripe, a, (step * N + b) * ROWS, out, deps=[prev])
        return out


def test_task_invalid_seeds_a_carried_task_id_as_none_does(launcher):
    compiled = ir.compile(SeededChains)
    want = {(b * STEPS + s, b * STEPS + s + 1) for b in range(N) for s in range(STEPS - 1)}
    assert {(e.src, e.dst) for e in compiled.task_graph.edges if e.kind == "declared"} == want
    a = torch.randn(N * STEPS * ROWS, C)
    out = torch.full_like(a, float("nan"))
    launcher.run(compiled, a, out)
    torch.testing.assert_close(out, a * 2.0, rtol=1e-6, atol=0)
