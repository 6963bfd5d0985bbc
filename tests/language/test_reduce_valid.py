"""Reductions as the device's: over a tile's valid region only, and a float column sum in the tile's dtype.

A tile loaded with ``valid_shape`` holds data in a leading box; row and column
reductions read that box only (the source tensor holds -1000 / +1000 beyond it,
which would win a max / min or swamp a sum that read it), and after
``pl.fillpad`` the padding is data they read too.  ``col_sum`` adds in the
tile's dtype, rounding each step: rows one after another, or pairwise with a
``tmp_tile`` (PyPTO's binary tree).  Random data against numpy; outputs
poisoned.
"""

from __future__ import annotations

import numpy as np
import pytest

import pypto_async.language as pl

R, C = 16, 48
VR, VC = 11, 37  # the valid box
OPS = ["row_sum", "row_max", "row_min", "col_sum", "col_max", "col_min"]


def _source(seed, pad):
    x = np.random.default_rng(seed).standard_normal((R, C)).astype(np.float32)
    x[VR:, :] = pad
    x[:, VC:] = pad
    return x


def _ref(op, x):
    fn = {"sum": np.sum, "max": np.max, "min": np.min}[op.split("_")[1]]
    return fn(x.astype(np.float64), axis=1 if op.startswith("row") else 0, keepdims=True)


@pl.jit
def valid_reductions(x: pl.Tensor[[R, C], pl.FP32], rs: pl.Out[pl.Tensor[[R, 1], pl.FP32]],
                     rmax: pl.Out[pl.Tensor[[R, 1], pl.FP32]], rmin: pl.Out[pl.Tensor[[R, 1], pl.FP32]],
                     cs: pl.Out[pl.Tensor[[1, C], pl.FP32]], cmax: pl.Out[pl.Tensor[[1, C], pl.FP32]],
                     cmin: pl.Out[pl.Tensor[[1, C], pl.FP32]]):
    t = pl.load(x, [0, 0], [R, C], valid_shape=[VR, VC])
    tmp = pl.create_tile([R, C], dtype=pl.FP32, target_memory=pl.MemorySpace.Vec)
    pl.store(pl.row_sum(t, tmp), [0, 0], rs)
    pl.store(pl.tile.row_max(t, tmp), [0, 0], rmax)
    pl.store(pl.row_min(t), [0, 0], rmin)
    pl.store(pl.col_sum(t), [0, 0], cs)
    pl.store(pl.col_max(t), [0, 0], cmax)
    pl.store(pl.tile.col_min(t), [0, 0], cmin)
    return rs, rmax, rmin, cs, cmax, cmin


@pl.jit
def padded_reductions(x: pl.Tensor[[R, C], pl.FP32], rmax: pl.Out[pl.Tensor[[R, 1], pl.FP32]],
                      cs: pl.Out[pl.Tensor[[1, C], pl.FP32]]):
    t = pl.load(x, [0, 0], [R, C], valid_shape=[VR, VC])
    pl.store(pl.row_max(pl.fillpad(t, pad_value=pl.PadValue.max)), [0, 0], rmax)  # the padding is data now
    pl.store(pl.col_sum(pl.fillpad(t, pad_value=pl.PadValue.zero)), [0, 0], cs)
    return rmax, cs


@pytest.mark.parametrize("pad", [-1000.0, 1000.0])
def test_reductions_read_the_valid_region_only(pad):
    x = _source(1, pad)
    outs = [np.full((R, 1) if op.startswith("row") else (1, C), np.nan, np.float32) for op in OPS]
    valid_reductions(x, *outs)
    box = x[:VR, :VC]
    for op, out in zip(OPS, outs):
        want = _ref(op, box)
        got = out[:VR] if op.startswith("row") else out[:, :VC]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=op)


def test_after_fillpad_a_reduction_reads_the_padding():
    x = _source(2, -1000.0)
    rmax, cs = np.full((R, 1), np.nan, np.float32), np.full((1, C), np.nan, np.float32)
    padded_reductions(x, rmax, cs)
    np.testing.assert_array_equal(rmax[:, 0], np.full(R, np.inf, np.float32))
    np.testing.assert_allclose(cs[0, :VC], x[:VR, :VC].astype(np.float64).sum(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(cs[0, VC:], np.zeros(C - VC, np.float32))


# ---- col_sum's order and rounding ------------------------------------------------------------------------

H = 32  # rows summed


@pl.jit
def col_sums(x: pl.Tensor[[H, C], pl.FP16], seq: pl.Out[pl.Tensor[[1, C], pl.FP16]],
             tree: pl.Out[pl.Tensor[[1, C], pl.FP16]], odd: pl.Out[pl.Tensor[[1, C], pl.FP16]]):
    t = pl.load(x, [0, 0], [H, C])
    pl.store(pl.col_sum(t), [0, 0], seq)
    pl.store(pl.tile.col_sum(t, pl.create_tile([H, C], dtype=pl.FP16, target_memory=pl.MemorySpace.Vec)), [0, 0], tree)
    t7 = pl.load(x, [0, 0], [H, C], valid_shape=[7, C])  # an odd row count: the last row folds into row 0
    pl.store(pl.col_sum(t7, pl.create_tile([H, C], dtype=pl.FP16, target_memory=pl.MemorySpace.Vec)), [0, 0], odd)
    return seq, tree, odd


def _sequential(x):
    acc = x[0].copy()
    for row in x[1:]:
        acc = (acc + row).astype(np.float16)
    return acc


def _pairwise(x):
    buf = x.copy()
    n = len(buf)
    while n > 1:
        half = n // 2
        buf[:half] = (buf[0:2 * half:2] + buf[1:2 * half:2]).astype(np.float16)
        if n % 2:
            buf[0] = (buf[0] + buf[n - 1]).astype(np.float16)
        n = half
    return buf[0]


def test_an_fp16_col_sum_rounds_each_step_in_its_order():
    x = (np.random.default_rng(3).standard_normal((H, C)) * 4).astype(np.float16)
    seq, tree, odd = (np.full((1, C), np.nan, np.float16) for _ in range(3))
    col_sums(x, seq, tree, odd)
    np.testing.assert_array_equal(seq[0], _sequential(x))
    np.testing.assert_array_equal(tree[0], _pairwise(x))
    np.testing.assert_array_equal(odd[0], _pairwise(x[:7]))
    assert not np.array_equal(_sequential(x), _pairwise(x))  # the data tells the two orders apart


def test_the_torch_reference_reduces_as_the_kernel_does():
    torch = pytest.importorskip("torch")
    from pypto_async.debug import torch_codegen

    def reference(kernel, args):
        ns: dict = {}
        exec(compile(torch_codegen(kernel.trace(*args), check_shapes=True), "<ref>", "exec"), ns)  # noqa: S102
        targs = [torch.from_numpy(a) for a in args]
        ns[kernel.__name__](*targs)
        return [t.numpy() for t in targs]

    x = _source(4, 1000.0)
    args = [x] + [np.full((R, 1) if op.startswith("row") else (1, C), np.nan, np.float32) for op in OPS]
    ref = reference(valid_reductions, [a.copy() for a in args])
    valid_reductions(*args)
    for op, got, want in zip(OPS, args[1:], ref[1:]):
        box = (slice(0, VR), slice(None)) if op.startswith("row") else (slice(None), slice(0, VC))
        np.testing.assert_allclose(got[box], want[box], rtol=1e-6, atol=1e-5, err_msg=op)
    h = (np.random.default_rng(5).standard_normal((H, C)) * 4).astype(np.float16)
    args = [h] + [np.full((1, C), np.nan, np.float16) for _ in range(3)]
    ref = reference(col_sums, [a.copy() for a in args])
    col_sums(*args)
    for got, want in zip(args[1:], ref[1:]):
        np.testing.assert_array_equal(got, want)  # the same order, the same roundings
