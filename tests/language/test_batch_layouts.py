"""Batched matmul accumulation (``pl.matmul_acc`` of rank-3 operands, ``pl.tile.batch_matmul_acc``) and
``pl.transpose`` of any two axes, as PyPTO documents them; against torch on random data, outputs poisoned.
"""

import numpy as np
import pytest
import torch

import pypto_async.language as pl
from pypto_async import ir
from pypto_async.errors import PtoCompileError


def _nan(*shape):
    return torch.full(shape, float("nan"))


@pytest.mark.slow
def test_matmul_acc_of_a_2d_and_a_3d_tensor_splits_k(launcher):
    """PyPTO's DeepSeek-V4 MoE W2 form: [M, K] @ [1, N, K]^T in two K halves."""
    M, K, N = 16, 64, 32
    H = K // 2

    @pl.program
    class SplitK:
        @pl.function(type=pl.FunctionType.InCore)
        def k(self, a: pl.Tensor[[M, K], pl.FP32], b: pl.Tensor[[1, N, K], pl.FP32],
              c: pl.Out[pl.Tensor[[1, M, N], pl.FP32]]) -> pl.Tensor[[1, M, N], pl.FP32]:
            a0, a1 = pl.slice(a, [M, H], [0, 0]), pl.slice(a, [M, H], [0, H])
            b0, b1 = pl.slice(b, [1, N, H], [0, 0, 0]), pl.slice(b, [1, N, H], [0, 0, H])
            acc = pl.matmul(a0, b0, b_trans=True, out_dtype=pl.FP32)
            acc = pl.matmul_acc(acc, a1, b1, b_trans=True)
            return pl.assemble(c, acc, [0, 0, 0])

        @pl.function(type=pl.FunctionType.Orchestration)
        def orch(self, a: pl.Tensor[[M, K], pl.FP32], b: pl.Tensor[[1, N, K], pl.FP32],
                 c: pl.Out[pl.Tensor[[1, M, N], pl.FP32]]):
            c = self.k(a, b, c)
            return c

    a, b, c = torch.randn(M, K), torch.randn(1, N, K), _nan(1, M, N)
    launcher.run(ir.compile(SplitK), a, b, c)
    torch.testing.assert_close(c, torch.matmul(a.unsqueeze(0), b.transpose(-2, -1)), rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_tile_batch_matmul_acc_adds_each_batch_product():
    @pl.jit
    def k(a: pl.Tensor[[2, 16, 32], pl.FP32], b: pl.Tensor[[2, 32, 8], pl.FP32], b2: pl.Tensor[[1, 32, 8], pl.FP32],
          out: pl.Out[pl.Tensor[[2, 16, 8], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            ta = pl.load(a, [0, 0, 0], [2, 16, 32])
            acc = pl.batch_matmul(ta, pl.load(b, [0, 0, 0], [2, 32, 8]))
            pl.tile.batch_matmul_acc(acc, ta, pl.load(b2, [0, 0, 0], [1, 32, 8]))  # in place, rhs broadcast
            out[:] = acc
        return out

    a, b, b2, out = torch.randn(2, 16, 32), torch.randn(2, 32, 8), torch.randn(1, 32, 8), _nan(2, 16, 8)
    k(a, b, b2, out)
    torch.testing.assert_close(out, a @ b + a @ b2, rtol=1e-4, atol=1e-4)

    @pl.jit
    def bad(a: pl.Tensor[[2, 16, 32], pl.FP32], out: pl.Out[pl.Tensor[[1, 16, 16], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            ta = pl.load(a, [0, 0, 0], [2, 16, 32])
            acc = pl.load(a, [0, 0, 0], [1, 16, 16])
            pl.tile.batch_matmul_acc(acc, ta, pl.tile.transpose_view(ta))
            out[:] = acc
        return out

    with pytest.raises(PtoCompileError, match=r"batch_matmul_acc: the product is \[2, 16, 16\] but acc is "
                                              r"\[1, 16, 16\]"):
        bad.lower(torch.randn(2, 16, 32), _nan(1, 16, 16))


@pytest.mark.slow
def test_a_pipelined_int8_batch_matmul_carries_its_accumulator():
    """PyPTO's batch_matmul_pipeline form: a 3-D accumulator, matmul at kb == 0, matmul_acc after."""
    T, K, N, KC = 16, 256, 32, 64

    @pl.jit
    def k(x: pl.Tensor[[1, T, K], pl.INT8], w: pl.Tensor[[1, N, K], pl.INT8],
          out: pl.Out[pl.Tensor[[1, T, N], pl.INT32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            acc = pl.create_tensor([1, T, N], dtype=pl.INT32)
            for kb in pl.pipeline(0, K // KC, stage=2):
                x_k = x[:, :, kb * KC:kb * KC + KC]
                w_k = w[:, :, kb * KC:kb * KC + KC]
                if kb == 0:
                    acc = pl.matmul(x_k, w_k, b_trans=True, out_dtype=pl.INT32)
                else:
                    acc = pl.matmul_acc(acc, x_k, w_k, b_trans=True)
        out[:, :, :] = acc
        return out

    g = torch.Generator().manual_seed(3)
    x = torch.randint(-100, 100, (1, T, K), dtype=torch.int8, generator=g)
    w = torch.randint(-100, 100, (1, N, K), dtype=torch.int8, generator=g)
    out = torch.full((1, T, N), -12345, dtype=torch.int32)
    k(x, w, out)
    np.testing.assert_array_equal(out.numpy(), torch.matmul(x.int(), w.int().transpose(-2, -1)).numpy())


# ---- pl.transpose of any two axes, of a partially valid tile ------------------------------------------------


@pytest.mark.slow
def test_transpose_swaps_any_two_axes():
    @pl.jit
    def k(x: pl.Tensor[[2, 24, 8], pl.FP32], y: pl.Tensor[[2, 3, 4, 8], pl.FP32],
          a: pl.Out[pl.Tensor[[2, 8, 24], pl.FP32]], b: pl.Out[pl.Tensor[[8, 24, 2], pl.FP32]],
          c: pl.Out[pl.Tensor[[2, 8, 4, 3], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            tx = pl.load(x, [0, 0, 0], [2, 24, 8])
            a[:] = pl.transpose(tx, axis1=1, axis2=2)  # PyPTO's nd3d case: each matrix transposed
            b[:] = pl.transpose(tx, -1, 0)  # negative axes count from the end
            c[:] = pl.transpose(pl.load(y, [0, 0, 0, 0], [2, 3, 4, 8]), 3, 1)
        return a, b, c

    x, y = torch.randn(2, 24, 8), torch.randn(2, 3, 4, 8)
    a, b, c = _nan(2, 8, 24), _nan(8, 24, 2), _nan(2, 8, 4, 3)
    k(x, y, a, b, c)
    assert torch.equal(a, x.transpose(1, 2)) and torch.equal(b, x.transpose(0, 2))
    assert torch.equal(c, y.transpose(1, 3))


def test_transpose_of_a_partially_valid_tile_transposes_its_valid_box():
    """PyPTO's gh#1649 form: a b_trans matmul of a window with valid_shape=[24, K] (of 32 rows)."""
    M, K, N = 16, 64, 32

    @pl.jit
    def k(x: pl.Tensor[[M, K], pl.FP32], w: pl.Tensor[[N, K], pl.FP32], t: pl.InOut[pl.Tensor[[K, N], pl.FP32]],
          out: pl.Out[pl.Tensor[[M, 8], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            w_s = pl.slice(w, [N, K], [0, 0], valid_shape=[24, K])
            t[:] = pl.transpose(w_s)  # only the valid [K, 24] box is stored (InOut: the rest stays NaN)
            acc = pl.matmul(x, w_s, b_trans=True, out_dtype=pl.FP32)
            out[0:M, 0:8] = pl.mul(pl.mul(acc, 1.0)[0:M, 0:8], 2.0)
        return t, out

    x, w = torch.randn(M, K), torch.randn(N, K)
    t, out = _nan(K, N), _nan(M, 8)
    k(x, w, t, out)
    assert torch.equal(t[:, :24], w[:24].T) and torch.isnan(t[:, 24:]).all()
    torch.testing.assert_close(out, 2.0 * (x @ w.T)[:, :8], rtol=1e-4, atol=1e-4)


def test_transpose_refuses_bad_axes():
    def lower(a1, a2):
        @pl.jit
        def k(x: pl.Tensor[[2, 8, 8], pl.FP32], out: pl.Out[pl.Tensor[[2, 8, 8], pl.FP32]]):
            with pl.at(level=pl.Level.CORE_GROUP):
                out[:] = pl.transpose(pl.load(x, [0, 0, 0], [2, 8, 8]), a1, a2)
            return out

        return k.lower(torch.randn(2, 8, 8), _nan(2, 8, 8))

    with pytest.raises(PtoCompileError, match=r"pl.transpose swaps two axes .* got axis1=3, axis2=0 for the 3-D"):
        lower(3, 0)
    with pytest.raises(PtoCompileError, match="pl.transpose: axis1 and axis2 are both axis 2"):
        lower(2, -1)
