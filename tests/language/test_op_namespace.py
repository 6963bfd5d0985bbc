"""``pl.op``: PyPTO's op package (``pl.op.tensor.*``, ``pl.op.tile.*``, ``pl.op.<name>``).

Kernels written against the namespaced ops run on random data against torch, outputs poisoned
with NaN first; bad input raises the compile error the plain spelling raises.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import pypto_async.language as pl
from pypto_async import ir
from pypto_async.errors import PtoCompileError


def _nan(*shape):
    return torch.full(shape, float("nan"))


def test_the_namespaces_are_the_language_s_modules_and_ops():
    assert pl.op.tensor is pl.tensor and pl.op.tile is pl.tile
    assert pl.op.system is pl.system and pl.op.array is pl.array
    ops = [name for name in pl.op.__all__ if name not in ("tensor", "tile", "system", "array")]
    assert len(ops) > 100
    assert [name for name in ops if getattr(pl.op, name) is not getattr(pl, name)] == []
    assert all(callable(getattr(pl.op, name)) for name in ops)
    for not_an_op in ("range", "at", "jit", "Tensor", "FP32", "AUTO"):
        assert not hasattr(pl.op, not_an_op), not_an_op


def test_a_jit_kernel_written_with_the_namespaced_ops():
    @pl.jit
    def k(a: pl.Tensor[[32, 64], pl.FP32], b: pl.Tensor[[32, 64], pl.FP32],
          o1: pl.Out[pl.Tensor[[32, 64], pl.FP32]], o2: pl.Out[pl.Tensor[[32, 64], pl.FP32]],
          o3: pl.Out[pl.Tensor[[32, 1], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            o1[:] = pl.op.tensor.add(pl.op.tensor.mul(a, b), pl.op.tensor.exp(a))
            ta = pl.op.tile.load(a, [0, 0], [32, 64])
            tb = pl.op.tile.load(b, [0, 0], [32, 64])
            t = pl.op.tile.maximum(pl.op.tile.muls(ta, 3.0), pl.op.tile.sub(tb, ta))
            o2 = pl.op.tile.store(t, [0, 0], o2)
            o3 = pl.op.store(pl.op.row_sum(pl.op.sqrt(pl.op.abs(tb))), [0, 0], o3)
        return o1, o2, o3

    gen = torch.Generator().manual_seed(7)
    a, b = torch.randn(32, 64, generator=gen), torch.randn(32, 64, generator=gen)
    o1, o2, o3 = _nan(32, 64), _nan(32, 64), _nan(32, 1)
    k(a, b, o1, o2, o3)
    torch.testing.assert_close(o1, a * b + a.exp())
    torch.testing.assert_close(o2, torch.maximum(a * 3, b - a))
    torch.testing.assert_close(o3, b.abs().sqrt().sum(1, keepdim=True), rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_a_program_written_with_the_namespaced_ops():
    @pl.program
    class Scaled:
        @pl.function(type=pl.FunctionType.InCore)
        def kernel(self, x: pl.Tensor[[16, 32], pl.FP32], y: pl.Tensor[[32, 16], pl.FP32],
                   out: pl.Out[pl.Tensor[[16, 16], pl.FP32]]) -> pl.Tensor[[16, 16], pl.FP32]:
            tx = pl.op.load(x, [0, 0], [16, 32], target_memory=pl.Mem.Mat)
            ty = pl.op.tile.load(y, [0, 0], [32, 16], target_memory=pl.Mem.Mat)
            acc = pl.op.matmul(pl.op.move(tx, target_memory=pl.Mem.Left),
                               pl.op.tile.move(ty, target_memory=pl.Mem.Right))
            return pl.op.tile.store(acc, [0, 0], out)

        @pl.function(type=pl.FunctionType.Orchestration)
        def main(self, x: pl.Tensor[[16, 32], pl.FP32], y: pl.Tensor[[32, 16], pl.FP32],
                 out: pl.Out[pl.Tensor[[16, 16], pl.FP32]]) -> pl.Tensor[[16, 16], pl.FP32]:
            return self.kernel(x, y, out)

    rng = np.random.default_rng(11)
    x = rng.standard_normal((16, 32)).astype(np.float32)
    y = rng.standard_normal((32, 16)).astype(np.float32)
    out = np.full((16, 16), np.nan, np.float32)
    ir.compile(Scaled, platform="sim")(x, y, out)
    np.testing.assert_allclose(out, x @ y, rtol=1e-4, atol=1e-4)


def test_bad_input_is_the_compile_error_of_the_plain_spelling():
    @pl.jit
    def k(a: pl.Tensor[[32, 64], pl.FP32], b: pl.Tensor[[16, 64], pl.FP32],
          out: pl.Out[pl.Tensor[[32, 64], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            out[:] = pl.op.tensor.add(a, b)
        return out

    with pytest.raises(PtoCompileError, match="add"):
        k.trace(np.zeros((32, 64), np.float32), np.zeros((16, 64), np.float32), np.zeros((32, 64), np.float32))
    with pytest.raises(AttributeError, match="no_such_op"):
        pl.op.no_such_op  # noqa: B018
