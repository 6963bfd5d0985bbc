"""PyPTO's catalog ops built from others: row/col_expand_expdif, fillpad_expand, set_validshape.

Checked against torch on random data, outputs poisoned (NaN) first; a store
of a tile with a smaller valid region must leave the rest of an InOut output
as it was.
"""

import math

import pytest
import torch

import pypto_async.language as pl
from pypto_async.errors import PtoCompileError
from helpers.tiers import tiered

R, C = 16, 64


def _nan(*shape):
    return torch.full(shape, float("nan"))


@pl.jit
def softmax_steps(x: pl.Tensor[[R, C], pl.FP32], rows: pl.Out[pl.Tensor[[R, C], pl.FP32]],
                  cols: pl.Out[pl.Tensor[[R, C], pl.FP32]]):
    with pl.at(level=pl.Level.CORE_GROUP):
        t = pl.load(x, [0, 0], [R, C])
        rows[:] = pl.row_expand_expdif(t, pl.row_max(t))
        cols[:] = pl.tile.col_expand_expdif(t, pl.col_max(t))
    return rows, cols


def test_row_and_col_expand_expdif_are_exp_of_the_broadcast_difference():
    x = torch.randn(R, C) * 4
    rows, cols = _nan(R, C), _nan(R, C)
    softmax_steps(x, rows, cols)
    torch.testing.assert_close(rows, torch.exp(x - x.amax(dim=1, keepdim=True)), rtol=1e-6, atol=0)
    torch.testing.assert_close(cols, torch.exp(x - x.amax(dim=0, keepdim=True)), rtol=1e-6, atol=0)


@tiered("pad", [pl.PadValue.zero, pl.PadValue.max, -math.inf], fast=[-math.inf])
def test_fillpad_expand_copies_the_valid_region_into_a_larger_padded_tile(pad):
    @pl.jit
    def expand(x: pl.Tensor[[8, 16], pl.FP32], out: pl.Out[pl.Tensor[[16, 32], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            t = pl.load(x, [0, 0], [8, 16], valid_shapes=[5, 12])
            out[:] = pl.fillpad_expand(t, [16, 32], pad_value=pad)
        return out

    x = torch.randn(8, 16)
    out = _nan(16, 32)
    expand(x, out)
    value = {pl.PadValue.zero: 0.0, pl.PadValue.max: math.inf}.get(pad, -math.inf)
    want = torch.full((16, 32), value)
    want[:5, :12] = x[:5, :12]
    torch.testing.assert_close(out, want, rtol=0, atol=0)


@tiered("pad", [pl.PadValue.zero, pl.PadValue.max, pl.PadValue.min], fast=[pl.PadValue.min])
def test_fillpad_inplace_is_fillpad(pad):
    """PyPTO's pl.tile.fillpad_inplace: the padding outside the valid region filled (the buffer reuse is a board's)."""
    @pl.jit
    def fill(x: pl.Tensor[[16, 32], pl.FP32], out: pl.Out[pl.Tensor[[16, 32], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            t = pl.load(x, [0, 0], [16, 32], valid_shapes=[11, 32])
            out[:] = pl.tile.fillpad_inplace(t, pad_value=pad)
        return out

    x = torch.randn(16, 32)
    out = _nan(16, 32)
    fill(x, out)
    want = torch.full((16, 32), {pl.PadValue.zero: 0.0, pl.PadValue.max: math.inf}.get(pad, -math.inf))
    want[:11] = x[:11]
    torch.testing.assert_close(out, want, rtol=0, atol=0)


def test_fillpad_inplace_refuses_null():
    @pl.jit
    def fill(x: pl.Tensor[[16, 32], pl.FP32], out: pl.Out[pl.Tensor[[16, 32], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            out[:] = pl.tile.fillpad_inplace(pl.load(x, [0, 0], [16, 32]), pad_value=pl.PadValue.null)
        return out

    with pytest.raises(PtoCompileError, match="fillpad_inplace: PadValue.null"):
        fill(torch.zeros(16, 32), torch.zeros(16, 32))


def test_fillpad_expand_integer_max_is_the_dtype_largest():
    @pl.jit
    def expand(x: pl.Tensor[[4, 8], pl.INT16], out: pl.Out[pl.Tensor[[8, 8], pl.INT16]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            out[:] = pl.tile.fillpad_expand(pl.load(x, [0, 0], [4, 8]), [8, 8], pl.PadValue.max)
        return out

    x = torch.randint(-1000, 1000, (4, 8), dtype=torch.int16)
    out = torch.zeros(8, 8, dtype=torch.int16)
    expand(x, out)
    want = torch.full((8, 8), 32767, dtype=torch.int16)
    want[:4] = x
    assert torch.equal(out, want)


@pl.jit
def windows(x: pl.Tensor[[R, C], pl.FP32], n: pl.Tensor[[1], pl.INT32], part: pl.InOut[pl.Tensor[[R, C], pl.FP32]],
            padded: pl.Out[pl.Tensor[[R, C], pl.FP32]]):
    with pl.at(level=pl.Level.CORE_GROUP):
        t = pl.load(x, [0, 0], [R, C])
        cols = pl.read(n, [0])
        part[:] = pl.set_validshape(t, 5, cols)          # stores write the valid box only
        padded[:] = pl.fillpad(pl.tile.set_validshape(t, 7, 20), pl.PadValue.min)
    return part, padded


def test_set_validshape_narrows_what_stores_write_and_fillpad_fills():
    x = torch.randn(R, C)
    part, padded = _nan(R, C), _nan(R, C)
    windows(x, torch.tensor([23], dtype=torch.int32), part, padded)
    assert torch.isnan(part[5:]).all() and torch.isnan(part[:, 23:]).all()
    torch.testing.assert_close(part[:5, :23], x[:5, :23], rtol=0, atol=0)
    want = torch.full((R, C), -math.inf)
    want[:7, :20] = x[:7, :20]
    torch.testing.assert_close(padded, want, rtol=0, atol=0)


def test_checks():
    @pl.jit
    def small(x: pl.Tensor[[8, 16], pl.FP32], out: pl.Out[pl.Tensor[[8, 16], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            out[:] = pl.fillpad_expand(pl.load(x, [0, 0], [8, 16]), [4, 16])
        return out

    @pl.jit
    def too_big(x: pl.Tensor[[8, 16], pl.FP32], out: pl.Out[pl.Tensor[[8, 16], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            out[:] = pl.set_validshape(pl.load(x, [0, 0], [8, 16]), 9, 16)
        return out

    x = torch.randn(8, 16)
    with pytest.raises(PtoCompileError, match="must be at least the source's"):
        small(x, _nan(8, 16))
    with pytest.raises(PtoCompileError, match=r"pl.set_validshape: valid_rows=9 is outside \[0, 8\]"):
        too_big(x, _nan(8, 16))


@tiered("shapes", [([2, 16, 32], [2, 32, 8]), ([2, 1, 8, 16], [1, 16, 8]), ([16, 32], [32, 8]),
                   ([2, 1, 8, 16], [3, 16, 8])], fast=[([2, 1, 8, 16], [1, 16, 8])])
def test_batch_matmul_broadcasts_the_batch_dimensions(shapes):
    sa, sb = shapes
    out_shape = list(torch.broadcast_shapes(tuple(sa[:-2]), tuple(sb[:-2]))) + [sa[-2], sb[-1]]

    @pl.jit
    def bmm(a: pl.Tensor[sa, pl.FP32], b: pl.Tensor[sb, pl.FP32], out: pl.Out[pl.Tensor[out_shape, pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            ta = pl.load(a, [0] * len(sa), sa)
            tb = pl.load(b, [0] * len(sb), sb)
            out[:] = pl.batch_matmul(ta, tb)
        return out

    a, b = torch.randn(*sa), torch.randn(*sb)
    out = _nan(*out_shape)
    bmm(a, b, out)
    torch.testing.assert_close(out, torch.matmul(a, b), rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_transpose_view_of_a_batch_tile_transposes_each_matrix():
    """PyPTO's pl.tile.transpose_view on a [B, N, K] tile: a batch_matmul's b_trans operand."""
    @pl.jit
    def bmm_bt(a: pl.Tensor[[2, 16, 32], pl.FP32], b: pl.Tensor[[2, 8, 32], pl.FP32],
               out: pl.Out[pl.Tensor[[2, 16, 8], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            ta = pl.load(a, [0, 0, 0], [2, 16, 32], target_memory=pl.MemorySpace.Mat)
            tb = pl.load(b, [0, 0, 0], [2, 8, 32], target_memory=pl.MemorySpace.Mat)
            out[:] = pl.batch_matmul(ta, pl.tile.transpose_view(tb))
        return out

    a, b = torch.randn(2, 16, 32), torch.randn(2, 8, 32)
    out = _nan(2, 16, 8)
    bmm_bt(a, b, out)
    torch.testing.assert_close(out, a @ b.transpose(1, 2), rtol=1e-5, atol=1e-5)


def test_transpose_view_refuses_a_1d_tile():
    @pl.jit
    def bad(x: pl.Tensor[[16], pl.FP32], out: pl.Out[pl.Tensor[[16], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            out[:] = pl.tile.transpose_view(pl.load(x, [0], [16]))
        return out

    with pytest.raises(PtoCompileError, match="two trailing dimensions"):
        bad(torch.zeros(16), torch.zeros(16))


@pytest.mark.slow
def test_tensor_matmul_b_trans_of_a_value_computed_in_the_region():
    """PyPTO's tensor-level pl.matmul(a, add(b0, b1), b_trans=True): the transposed operand need not be a parameter."""
    @pl.jit
    def mm(a: pl.Tensor[[2, 16, 32], pl.FP32], b0: pl.Tensor[[2, 8, 32], pl.FP32], b1: pl.Tensor[[2, 8, 32], pl.FP32],
           out: pl.Out[pl.Tensor[[2, 16, 8], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            out[:] = pl.matmul(a, pl.add(b0, b1), b_trans=True, out_dtype=pl.FP32)
        return out

    a, b0, b1 = torch.randn(2, 16, 32), torch.randn(2, 8, 32), torch.randn(2, 8, 32)
    out = _nan(2, 16, 8)
    mm(a, b0, b1, out)
    torch.testing.assert_close(out, a @ (b0 + b1).transpose(1, 2), rtol=1e-5, atol=1e-5)


def test_tile_extract_is_the_window_placed_in_the_target_memory():
    """PyPTO's pl.tile.extract(src, row, col, shape, target_memory=...): TEXTRACT's window."""
    @pl.jit
    def ex(x: pl.Tensor[[16, 32], pl.FP32], out: pl.Out[pl.Tensor[[8, 16], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            t = pl.load(x, [0, 0], [16, 32])
            out[:] = pl.tile.extract(t, 4, 8, [8, 16], target_memory=pl.MemorySpace.Vec)
        return out

    x = torch.randn(16, 32)
    out = _nan(8, 16)
    ex(x, out)
    torch.testing.assert_close(out, x[4:12, 8:24], rtol=0, atol=0)

    @pl.jit
    def bad(x: pl.Tensor[[16, 32], pl.FP32], out: pl.Out[pl.Tensor[[8, 16], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            out[:] = pl.tile.extract(pl.load(x, [0, 0], [16, 32]), 0, 0, [8], target_memory=pl.MemorySpace.Vec)
        return out

    with pytest.raises(PtoCompileError, match="shape must be"):
        bad(x, out)


def test_batch_matmul_refuses_tensors_and_mismatched_batches():
    @pl.jit
    def bad(a: pl.Tensor[[2, 8, 8], pl.FP32], b: pl.Tensor[[3, 8, 8], pl.FP32],
            out: pl.Out[pl.Tensor[[2, 8, 8], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            out[:] = pl.batch_matmul(pl.load(a, [0, 0, 0], [2, 8, 8]), pl.load(b, [0, 0, 0], [3, 8, 8]))
        return out

    with pytest.raises(PtoCompileError, match="do not broadcast"):
        bad(torch.randn(2, 8, 8), torch.randn(3, 8, 8), _nan(2, 8, 8))


def test_tile_view_in_a_tile_annotation_is_checked_for_form():
    assert pl.Tile[[16, 64], pl.FP32, pl.TileView(valid_shape=[16, 32])] == ((16, 64), pl.FP32)
    assert pl.Tile[[16, 64], pl.FP32, pl.TileView(stride=[64, 1], fractal=512)] == ((16, 64), pl.FP32)
    with pytest.raises(PtoCompileError, match="one entry per dimension"):
        pl.Tile[[16, 64], pl.FP32, pl.TileView(valid_shape=[16])]
    with pytest.raises(PtoCompileError, match="outside"):
        pl.Tile[[16, 64], pl.FP32, pl.TileView(valid_shape=[17, 64])]
    with pytest.raises(PtoCompileError, match="fractal"):
        pl.TileView(fractal=0)


@pytest.mark.slow
def test_matmul_of_rank_3_tensors_is_a_batch_matmul():
    @pl.jit
    def bmm(a: pl.Tensor[[2, 16, 32], pl.FP32], b: pl.Tensor[[1, 32, 8], pl.FP32],
            out: pl.Out[pl.Tensor[[2, 16, 8], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            out[:] = pl.matmul(a, b)
        return out

    a, b = torch.randn(2, 16, 32), torch.randn(1, 32, 8)
    out = _nan(2, 16, 8)
    bmm(a, b, out)
    torch.testing.assert_close(out, torch.matmul(a, b), rtol=1e-5, atol=1e-5)
