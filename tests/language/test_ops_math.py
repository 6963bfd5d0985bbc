"""PyPTO's math ops (sin, cos, fmod, maximums, part_*, row/col_prod, *_expand_max/min, expand_clone,
reinterpret_view, get_block_num) against numpy/torch on random data, run on the sim device.

Each op runs at every layer PyPTO spells it (``pl.X``, ``pl.tile.X``,
``pl.tensor.X``), several ops to a kernel; outputs are poisoned (NaN, or
0xAB bytes) before each launch.  Bad input raises a compile error naming the
op at the caller's line.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import pypto_async.language as pl
from helpers.ir_fixtures import poison
from helpers.located import assert_at, next_line
from helpers.tiers import tiered
from helpers.work import run_kernel
from pypto_async.debug import torch_codegen
from pypto_async.errors import PtoCompileError

R, C = 16, 32


def _f32(rng, shape, lo=-3.0, hi=3.0):
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


def _divisors(rng, shape):
    """Nonzero divisors of both signs, away from 0."""
    d = rng.uniform(0.5, 2.5, size=shape).astype(np.float32)
    return np.where(rng.random(shape) < 0.5, -d, d).astype(np.float32)


def _fmod(a, b):
    return torch.fmod(torch.from_numpy(a), torch.from_numpy(np.asarray(b, dtype=a.dtype))).numpy()


# ---- element-wise ops and reductions, FP32, at each layer ------------------------------------------------

ELEMENTWISE_OUT = ("sin", "cos", "fmod", "fmods", "maxs", "mins", "rmax", "rmin", "cmax", "cmin")


def _outputs():
    outs = {k: poison((R, C)) for k in ELEMENTWISE_OUT}
    outs["rprod"] = poison((R, 1))
    outs["cprod"] = poison((1, C))
    return outs


def _expected(a, b, v, w):
    return {
        "sin": np.sin(a), "cos": np.cos(a), "fmod": _fmod(a, b), "fmods": _fmod(a, np.float32(1.25)),
        "maxs": np.maximum(a, np.float32(0.5)), "mins": np.minimum(a, np.float32(-0.5)),
        "rmax": np.maximum(a, v), "rmin": np.minimum(a, v), "cmax": np.maximum(a, w), "cmin": np.minimum(a, w),
        "rprod": np.prod(a.astype(np.float64), axis=1, keepdims=True),
        "cprod": np.prod(a.astype(np.float64), axis=0, keepdims=True),
    }


@pl.jit
def _unified(a: pl.Tensor, b: pl.Tensor, v: pl.Tensor, w: pl.Tensor, sin: pl.Out[pl.Tensor], cos: pl.Out[pl.Tensor],
             fmod: pl.Out[pl.Tensor], fmods: pl.Out[pl.Tensor], maxs: pl.Out[pl.Tensor], mins: pl.Out[pl.Tensor],
             rmax: pl.Out[pl.Tensor], rmin: pl.Out[pl.Tensor], cmax: pl.Out[pl.Tensor], cmin: pl.Out[pl.Tensor],
             rprod: pl.Out[pl.Tensor], cprod: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        ta, tb = pl.load(a, [0, 0], [R, C]), pl.load(b, [0, 0], [R, C])
        tv, tw = pl.load(v, [0, 0], [R, 1]), pl.load(w, [0, 0], [1, C])
        pl.store(pl.sin(ta), [0, 0], sin)
        pl.store(pl.cos(ta), [0, 0], cos)
        pl.store(pl.fmod(ta, tb), [0, 0], fmod)
        pl.store(pl.fmods(ta, 1.25), [0, 0], fmods)
        pl.store(pl.maximums(ta, 0.5), [0, 0], maxs)
        pl.store(pl.minimums(ta, -0.5), [0, 0], mins)
        pl.store(pl.row_expand_max(ta, tv), [0, 0], rmax)
        pl.store(pl.row_expand_min(ta, tv), [0, 0], rmin)
        pl.store(pl.col_expand_max(ta, tw), [0, 0], cmax)
        pl.store(pl.col_expand_min(ta, tw), [0, 0], cmin)
        pl.store(pl.row_prod(ta, pl.create_tile([R, C], pl.FP32)), [0, 0], rprod)
        pl.store(pl.col_prod(ta), [0, 0], cprod)


@pl.jit
def _tile_level(a: pl.Tensor, b: pl.Tensor, v: pl.Tensor, w: pl.Tensor, sin: pl.Out[pl.Tensor],
                cos: pl.Out[pl.Tensor], fmod: pl.Out[pl.Tensor], fmods: pl.Out[pl.Tensor], maxs: pl.Out[pl.Tensor],
                mins: pl.Out[pl.Tensor], rmax: pl.Out[pl.Tensor], rmin: pl.Out[pl.Tensor], cmax: pl.Out[pl.Tensor],
                cmin: pl.Out[pl.Tensor], rprod: pl.Out[pl.Tensor], cprod: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        ta, tb = pl.load(a, [0, 0], [R, C]), pl.load(b, [0, 0], [R, C])
        tv, tw = pl.load(v, [0, 0], [R, 1]), pl.load(w, [0, 0], [1, C])
        pl.store(pl.tile.sin(ta), [0, 0], sin)
        pl.store(pl.tile.cos(ta), [0, 0], cos)
        pl.store(pl.tile.fmod(ta, tb), [0, 0], fmod)
        pl.store(pl.tile.fmods(ta, 1.25), [0, 0], fmods)
        pl.store(pl.tile.maximums(ta, 0.5), [0, 0], maxs)
        pl.store(pl.tile.minimums(ta, -0.5), [0, 0], mins)
        pl.store(pl.tile.row_expand_max(ta, row_vec=tv), [0, 0], rmax)
        pl.store(pl.tile.row_expand_min(ta, tv), [0, 0], rmin)
        pl.store(pl.tile.col_expand_max(ta, col_vec=tw), [0, 0], cmax)
        pl.store(pl.tile.col_expand_min(ta, tw), [0, 0], cmin)
        pl.store(pl.tile.row_prod(ta, tmp_tile=pl.tile.create([R, C], dtype=pl.FP32)), [0, 0], rprod)
        pl.store(pl.tile.col_prod(ta), [0, 0], cprod)


@pl.jit
def _tensor_level(a: pl.Tensor, b: pl.Tensor, v: pl.Tensor, w: pl.Tensor, sin: pl.Out[pl.Tensor],
                  cos: pl.Out[pl.Tensor], fmod: pl.Out[pl.Tensor], fmods: pl.Out[pl.Tensor], maxs: pl.Out[pl.Tensor],
                  mins: pl.Out[pl.Tensor], rmax: pl.Out[pl.Tensor], rmin: pl.Out[pl.Tensor], cmax: pl.Out[pl.Tensor],
                  cmin: pl.Out[pl.Tensor], rprod: pl.Out[pl.Tensor], cprod: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        sin = pl.assemble(sin, pl.tensor.sin(a), [0, 0])
        cos = pl.assemble(cos, pl.tensor.cos(a), [0, 0])
        fmod = pl.assemble(fmod, pl.tensor.fmod(a, b), [0, 0])
        fmods = pl.assemble(fmods, pl.tensor.fmods(a, 1.25), [0, 0])
        maxs = pl.assemble(maxs, pl.maximums(a, 0.5), [0, 0])  # PyPTO's tensor level has no maximums: pl.'s
        mins = pl.assemble(mins, pl.minimums(a, -0.5), [0, 0])
        rmax = pl.assemble(rmax, pl.tensor.row_expand_max(a, row_vec=v), [0, 0])
        rmin = pl.assemble(rmin, pl.tensor.row_expand_min(a, v), [0, 0])
        cmax = pl.assemble(cmax, pl.tensor.col_expand_max(a, col_vec=w), [0, 0])
        cmin = pl.assemble(cmin, pl.tensor.col_expand_min(a, w), [0, 0])
        rprod = pl.assemble(rprod, pl.tensor.row_prod(a), [0, 0])
        cprod = pl.assemble(cprod, pl.tensor.col_prod(a), [0, 0])


@pytest.mark.parametrize("kernel", [_unified, _tile_level, _tensor_level], ids=["pl", "tile", "tensor"])
def test_fp32_ops_at_each_layer_match_numpy(launcher, rng, kernel):
    a = _f32(rng, (R, C), -1.6, 1.6)  # |a| < 1.6: a row's product of 32 stays in range
    a = np.where(np.abs(a) < 0.2, np.float32(0.7), a).astype(np.float32)
    b = _divisors(rng, (R, C))
    v, w = _f32(rng, (R, 1)), _f32(rng, (1, C))
    outs = _outputs()
    args = [a, b, v, w, *outs.values()]
    launcher.run(kernel.compile(*args), *args)
    for name, want in _expected(a, b, v, w).items():
        np.testing.assert_allclose(outs[name], want, rtol=2e-5, atol=1e-6, err_msg=name)


def test_fmod_takes_the_dividends_sign_where_rem_takes_the_divisors(launcher):
    a = np.array([[5.5, -5.5, 5.5, -5.5, 7.0, -7.0, 0.25, -0.25]], dtype=np.float32)
    b = np.array([[2.0, 2.0, -2.0, -2.0, 7.0, 3.5, 1.0, 1.0]], dtype=np.float32)
    y, r = poison(a.shape), poison(a.shape)

    @pl.jit
    def k(a: pl.Tensor, b: pl.Tensor, y: pl.Out[pl.Tensor], r: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            ta, tb = pl.load(a, [0, 0], [1, 8]), pl.load(b, [0, 0], [1, 8])
            pl.store(pl.fmod(ta, tb), [0, 0], y)
            pl.store(pl.rem(ta, tb), [0, 0], r)

    launcher.run(k.compile(a, b, y, r), a, b, y, r)
    np.testing.assert_array_equal(y, [[1.5, -1.5, 1.5, -1.5, 0.0, -0.0, 0.25, -0.25]])
    np.testing.assert_array_equal(r, [[1.5, 0.5, -0.5, -1.5, 0.0, 0.0, 0.25, 0.75]])
    assert np.signbit(y[0, 5])


# ---- integer and half dtypes ------------------------------------------------------------------------------


@pytest.mark.slow
def test_int32_fmod_maximums_and_products_match_numpy(launcher, rng):
    a = rng.integers(-1000, 1000, size=(R, C), dtype=np.int32)
    b = rng.integers(1, 50, size=(R, C), dtype=np.int32) * np.where(rng.random((R, C)) < 0.5, -1, 1).astype(np.int32)
    b[0, :4] = [0, -1, 0, -1]  # 0 where the divisor is 0 or -1
    p = rng.integers(-3, 4, size=(R, C), dtype=np.int32)
    outs = {k: poison((R, C), np.int32) for k in ("fmod", "fmods", "maxs", "mins")}
    rp, cp = poison((R, 1), np.int32), poison((1, C), np.int32)

    @pl.jit
    def k(a: pl.Tensor, b: pl.Tensor, p: pl.Tensor, fmod: pl.Out[pl.Tensor], fmods: pl.Out[pl.Tensor],
          maxs: pl.Out[pl.Tensor], mins: pl.Out[pl.Tensor], rp: pl.Out[pl.Tensor], cp: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            ta, tb, tp = pl.load(a, [0, 0], [R, C]), pl.load(b, [0, 0], [R, C]), pl.load(p, [0, 0], [R, C])
            pl.store(pl.fmod(ta, tb), [0, 0], fmod)
            pl.store(pl.fmods(ta, -7), [0, 0], fmods)
            pl.store(pl.maximums(ta, 3), [0, 0], maxs)
            pl.store(pl.tile.minimums(ta, -3), [0, 0], mins)
            pl.store(pl.row_prod(tp), [0, 0], rp)
            pl.store(pl.col_prod(tp), [0, 0], cp)

    args = [a, b, p, *outs.values(), rp, cp]
    launcher.run(k.compile(*args), *args)
    safe = np.where((b == 0) | (b == -1), 1, b)
    want = np.where((b == 0) | (b == -1), 0, np.fmod(a, safe))
    np.testing.assert_array_equal(outs["fmod"], want)
    np.testing.assert_array_equal(outs["fmods"], np.fmod(a, -7))
    np.testing.assert_array_equal(outs["maxs"], np.maximum(a, 3))
    np.testing.assert_array_equal(outs["mins"], np.minimum(a, -3))
    # Products wrap as INT32 does (the low 32 bits of the exact product).
    def wrapped(values):
        x = 1
        for v in values:
            x *= int(v)
        return ((x + 2**31) % 2**32) - 2**31

    np.testing.assert_array_equal(rp[:, 0], [wrapped(row) for row in p])
    np.testing.assert_array_equal(cp[0], [wrapped(col) for col in p.T])


def test_fp16_products_and_expand_max_match_torch(launcher, rng):
    a = rng.uniform(0.8, 1.2, size=(R, C)).astype(np.float16)
    v = rng.uniform(0.8, 1.2, size=(R, 1)).astype(np.float16)
    rp, cp, mx = poison((R, 1), np.float16), poison((1, C), np.float16), poison((R, C), np.float16)

    @pl.jit
    def k(a: pl.Tensor, v: pl.Tensor, rp: pl.Out[pl.Tensor], cp: pl.Out[pl.Tensor], mx: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            ta = pl.load(a, [0, 0], [R, C])
            pl.store(pl.tile.row_prod(ta, pl.tile.create([R, C], dtype=pl.FP16)), [0, 0], rp)
            pl.store(pl.tile.col_prod(ta), [0, 0], cp)
            pl.store(pl.row_expand_max(ta, pl.load(v, [0, 0], [R, 1])), [0, 0], mx)

    launcher.run(k.compile(a, v, rp, cp, mx), a, v, rp, cp, mx)
    ta = torch.from_numpy(a).float()
    np.testing.assert_allclose(rp.astype(np.float32), ta.prod(dim=1, keepdim=True).numpy(), rtol=1e-2)
    np.testing.assert_allclose(cp.astype(np.float32), ta.prod(dim=0, keepdim=True).numpy(), rtol=1e-2)
    np.testing.assert_array_equal(mx, np.maximum(a, v))


def test_products_reduce_the_valid_region_only(launcher, rng):
    a = rng.uniform(0.5, 1.5, size=(R, C)).astype(np.float32)
    rp, cp = poison((R, 1)), poison((1, C))

    @pl.jit
    def k(a: pl.Tensor, rp: pl.Out[pl.Tensor], cp: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.store(pl.row_prod(pl.load(a, [0, 0], [R, C], valid_shapes=[R, 20])), [0, 0], rp)
            pl.store(pl.col_prod(pl.load(a, [0, 0], [R, C], valid_shapes=[9, C])), [0, 0], cp)

    launcher.run(k.compile(a, rp, cp), a, rp, cp)
    np.testing.assert_allclose(rp, np.prod(a[:, :20].astype(np.float64), axis=1, keepdims=True), rtol=1e-6)
    np.testing.assert_allclose(cp, np.prod(a[:9].astype(np.float64), axis=0, keepdims=True), rtol=1e-6)


def test_tile_level_broadcast_arithmetic_is_spelled_under_pl_tile(launcher, rng):
    a, v, w = _f32(rng, (R, C)), _f32(rng, (R, 1)), _divisors(rng, (1, C))
    y1, y2, y3 = poison((R, C)), poison((R, C)), poison((R, C))

    @pl.jit
    def k(a: pl.Tensor, v: pl.Tensor, w: pl.Tensor, y1: pl.Out[pl.Tensor], y2: pl.Out[pl.Tensor],
          y3: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            ta, tv, tw = pl.load(a, [0, 0], [R, C]), pl.load(v, [0, 0], [R, 1]), pl.load(w, [0, 0], [1, C])
            pl.store(pl.tile.row_expand_add(ta, tv, tmp=pl.tile.create([R, C], dtype=pl.FP32)), [0, 0], y1)
            pl.store(pl.tile.col_expand_div(ta, tw), [0, 0], y2)
            pl.store(pl.tile.col_expand_sub(ta, tw), [0, 0], y3)

    launcher.run(k.compile(a, v, w, y1, y2, y3), a, v, w, y1, y2, y3)
    np.testing.assert_allclose(y1, a + v, rtol=1e-6)
    np.testing.assert_allclose(y2, a / w, rtol=1e-6)
    np.testing.assert_allclose(y3, a - w, rtol=1e-6)


def test_tile_row_expand_add_repeats_a_packed_32_byte_row_carrier(launcher, rng):
    a = _f32(rng, (R, C))
    v = _f32(rng, (R, 8))  # one 32-byte block of FP32 lanes per row
    y = poison((R, C))

    @pl.jit
    def k(a: pl.Tensor, v: pl.Tensor, y: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            ta = pl.load(a, [0, 0], [R, C], valid_shapes=[12, 20])
            pl.store(pl.tile.row_expand_add(ta, pl.load(v, [0, 0], [R, 8], valid_shapes=[12, 8])), [0, 0], y)

    launcher.run(k.compile(a, v, y), a, v, y)
    np.testing.assert_allclose(y[:12, :20], a[:12, :20] + np.tile(v, (1, C // 8))[:12, :20], rtol=1e-6)
    assert np.isnan(y[12:]).all() and np.isnan(y[:, 20:]).all()  # outside the valid box: not stored


# ---- partial ops -----------------------------------------------------------------------------------------

PART = {"part_add": np.add, "part_mul": np.multiply, "part_max": np.maximum, "part_min": np.minimum}


def _part_expected(op, a, b, vr, vc):
    out = PART[op](a, b)
    out[vr:, :] = a[vr:, :]
    out[:, vc:] = a[:, vc:]
    return out


def _part_kernel(vr, vc, level):
    @pl.jit
    def k(a: pl.Tensor, b: pl.Tensor, add: pl.Out[pl.Tensor], mul: pl.Out[pl.Tensor], mx: pl.Out[pl.Tensor],
          mn: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            ta = pl.load(a, [0, 0], [R, C])
            tb = pl.load(b, [0, 0], [R, C], valid_shapes=[vr, vc])
            ns = pl.tile if level == "tile" else pl
            pl.store(ns.part_add(ta, tb), [0, 0], add)
            pl.store(ns.part_mul(ta, tb), [0, 0], mul)
            pl.store(ns.part_max(ta, tb), [0, 0], mx)
            pl.store(ns.part_min(ta, tb), [0, 0], mn)

    return k


@tiered("vr,vc,level", [(8, C, "tile"), (R, 12, "pl"), (R, C, "tile"), (5, 7, "pl")], fast=2)
def test_part_ops_combine_where_both_are_valid_and_copy_the_first_elsewhere(launcher, rng, vr, vc, level):
    a, b = _f32(rng, (R, C)), _f32(rng, (R, C))
    outs = [poison((R, C)) for _ in PART]
    launcher.run(_part_kernel(vr, vc, level).compile(a, b, *outs), a, b, *outs)
    for op, y in zip(PART, outs):
        np.testing.assert_allclose(y, _part_expected(op, a, b, vr, vc), rtol=1e-6, err_msg=op)


def test_tensor_level_part_ops_and_int32_tiles(launcher, rng):
    a = rng.integers(-100, 100, size=(R, C), dtype=np.int32)
    b = rng.integers(-100, 100, size=(R, C), dtype=np.int32)
    outs = [poison((R, C), np.int32) for _ in PART]

    @pl.jit
    def k(a: pl.Tensor, b: pl.Tensor, add: pl.Out[pl.Tensor], mul: pl.Out[pl.Tensor], mx: pl.Out[pl.Tensor],
          mn: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            add = pl.assemble(add, pl.tensor.part_add(a, b), [0, 0])
            mul = pl.assemble(mul, pl.tensor.part_mul(a, b), [0, 0])
            mx = pl.assemble(mx, pl.tensor.part_max(a, b), [0, 0])
            mn = pl.assemble(mn, pl.tensor.part_min(a, b), [0, 0])

    launcher.run(k.compile(a, b, *outs), a, b, *outs)
    for op, y in zip(PART, outs):
        np.testing.assert_array_equal(y, PART[op](a, b), err_msg=op)


# ---- expand_clone, reinterpret_view, get_block_num ----------------------------------------------------------


def test_expand_clone_repeats_a_source_to_the_targets_shape(launcher, rng):
    s2, s3 = _f32(rng, (1, C)), _f32(rng, (2, 1, 8))
    t2, t3 = poison((R, C)), poison((2, 4, 8))
    y2, y3 = poison((R, C)), poison((2, 4, 8))

    @pl.jit
    def k(s2: pl.Tensor, s3: pl.Tensor, t2: pl.Tensor, t3: pl.Tensor, y2: pl.Out[pl.Tensor], y3: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            y2 = pl.assemble(y2, pl.expand_clone(s2, t2), [0, 0])
            y3 = pl.assemble(y3, pl.tensor.expand_clone(s3, t3), [0, 0, 0])

    launcher.run(k.compile(s2, s3, t2, t3, y2, y3), s2, s3, t2, t3, y2, y3)
    np.testing.assert_array_equal(y2, np.broadcast_to(s2, (R, C)))
    np.testing.assert_array_equal(y3, np.broadcast_to(s3, (2, 4, 8)))


def _reinterpret_source(rows, cols):
    values = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols) + 0.25
    return (values * np.where(np.arange(cols) % 2 == 0, 1.0, -1.0)).astype(np.float32)


def test_reinterpret_view_reads_the_same_bytes_at_each_layer(launcher, rng):
    x = _reinterpret_source(8, 16)
    h = rng.integers(-30000, 30000, size=(8, 32), dtype=np.int16)
    same, narrow = poison((8, 16), np.int32), poison((8, 32), np.int16)
    wide, shaped, half = poison((8, 16), np.float32), poison((4, 64), np.int16), poison((8, 32), np.float16)

    @pl.jit
    def k(x: pl.Tensor, h: pl.Tensor, same: pl.Out[pl.Tensor], narrow: pl.Out[pl.Tensor], wide: pl.Out[pl.Tensor],
          shaped: pl.Out[pl.Tensor], half: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            tx = pl.load(x, [0, 0], [8, 16])
            pl.store(pl.reinterpret_view(tx, pl.INT32), [0, 0], same)
            pl.store(pl.tile.reinterpret_view(tx, pl.INT16), [0, 0], narrow)
            pl.store(pl.tensor.reinterpret_view(h, pl.FP32), [0, 0], wide)
            pl.store(pl.reinterpret_view(tx, pl.INT16, shape=[4, 64]), [0, 0], shaped)
            pl.store(pl.reinterpret_view(pl.load(h, [0, 0], [8, 32]), pl.FP16), [0, 0], half)

    args = [x, h, same, narrow, wide, shaped, half]
    launcher.run(k.compile(*args), *args)
    np.testing.assert_array_equal(same, x.view(np.int32))
    np.testing.assert_array_equal(narrow, x.view(np.int16))
    np.testing.assert_array_equal(wide.view(np.int32), h.view(np.int32))
    np.testing.assert_array_equal(shaped, x.view(np.int16).reshape(4, 64))
    finite = np.isfinite(h.view(np.float16))  # a NaN's payload need not survive the FP16 round trip
    np.testing.assert_array_equal(half.view(np.int16)[finite], h[finite])


def test_get_block_num_is_the_block_count_at_top_and_tensor_level(launcher, rng):
    x = _f32(rng, (4 * R, C))
    y = poison((4 * R, C))

    @pl.jit
    def k(x: pl.Tensor, y: pl.Out[pl.Tensor]):
        for b in pl.spmd(4):
            n = pl.get_block_num() * 10 + pl.tensor.get_block_num()
            pl.store(pl.adds(pl.load(x, [b * R, 0], [R, C]), float(n)), [b * R, 0], y)

    launcher.run(k.compile(x, y), x, y)
    np.testing.assert_allclose(y, x + 44.0, rtol=1e-6)


# ---- the device model and the torch reference -------------------------------------------------------------


def test_the_model_counts_vector_work_for_the_new_ops(rng):
    a, b = _f32(rng, (R, C)), _divisors(rng, (R, C))
    y, rp = poison((R, C)), poison((R, 1))

    @pl.jit
    def k(a: pl.Tensor, b: pl.Tensor, y: pl.Out[pl.Tensor], rp: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            ta = pl.load(a, [0, 0], [R, C])
            pl.store(pl.fmod(pl.sin(ta), pl.load(b, [0, 0], [R, C])), [0, 0], y)
            pl.store(pl.row_prod(ta), [0, 0], rp)

    w = run_kernel(k.compile(a, b, y, rp), a, b, y, rp)
    np.testing.assert_allclose(y, _fmod(np.sin(a), b), rtol=1e-5, atol=1e-6)
    assert w["vec_bytes"][1] == 2 * R * C * 4  # sin and fmod: the special (transcendental / division) class
    assert w["vec_bytes"][2] == R * C * 4  # the product reduction


def test_the_torch_reference_computes_the_new_ops(rng):
    a, b = _f32(rng, (R, C), -1.5, 1.5), _divisors(rng, (R, C))
    y, p, q, rp = poison((R, C)), poison((R, C)), poison((8, 32), np.int16), poison((R, 1))

    @pl.jit
    def k(a: pl.Tensor, b: pl.Tensor, y: pl.Out[pl.Tensor], p: pl.Out[pl.Tensor], q: pl.Out[pl.Tensor],
          rp: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            ta = pl.load(a, [0, 0], [R, C])
            pl.store(pl.fmod(pl.cos(ta), pl.load(b, [0, 0], [R, C])), [0, 0], y)
            pl.store(pl.part_max(ta, pl.load(b, [0, 0], [R, C], valid_shapes=[8, 8])), [0, 0], p)
            pl.store(pl.reinterpret_view(pl.load(a, [0, 0], [8, 16]), pl.INT16), [0, 0], q)
            pl.store(pl.row_prod(ta), [0, 0], rp)

    program = k.lower(a, b, y, p, q, rp)
    ns: dict = {}
    exec(compile(torch_codegen(program, check_shapes=True), "<torch_codegen>", "exec"), ns)  # noqa: S102
    ty, tp, tq, trp = (torch.from_numpy(t.copy()) for t in (y, p, q, rp))
    ns[program.name](torch.from_numpy(a), torch.from_numpy(b), ty, tp, tq, trp)
    np.testing.assert_allclose(ty.numpy(), _fmod(np.cos(a), b), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(tp.numpy(), _part_expected("part_max", a, b, 8, 8))
    np.testing.assert_array_equal(tq.numpy(), a[:8, :16].copy().view(np.int16))
    np.testing.assert_allclose(trp.numpy(), np.prod(a.astype(np.float64), axis=1, keepdims=True), rtol=1e-5)


# ---- bad input -------------------------------------------------------------------------------------------


def _trace_error(body, *arrays):
    @pl.jit
    def k(a: pl.Tensor, y: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            body(a, y)

    with pytest.raises(PtoCompileError) as e:
        k.compile(*arrays)
    return e


def test_sin_of_fp16_is_refused_at_the_callers_line():
    a, y = np.ones((R, C), np.float16), poison((R, C), np.float16)

    line = next_line() + 2

    def body(a, y):
        pl.store(pl.sin(pl.load(a, [0, 0], [R, C])), [0, 0], y)

    e = _trace_error(body, a, y)
    assert_at(e, line, "pl.sin takes FP32 tiles only, got FP16")


@pytest.mark.parametrize("case,message", [
    ("fmods_tile", "pl.fmods takes a tile and a scalar"),
    ("tile_fmod_scalar", "pl.tile.fmod takes two tiles"),
    ("maximums_tile", "pl.maximums takes a tile and a scalar"),
    ("part_scalar", "pl.part_add"),
    ("part_shape", "pl.part_mul: both sources must have one shape and dtype"),
    ("prod_rank", "row_prod needs a 2-D tile"),
    ("expand_max_vec", "pl.row_expand_max: expected a [rows, 1] row vector"),
    ("expand_clone_shape", "pl.expand_clone: src [1, 32] does not expand to the target's [16, 16]"),
    ("view_same", "pl.reinterpret_view: dtype must differ"),
    ("view_bytes", "pl.reinterpret_view: FP32[16, 32] holds 2048 bytes"),
    ("view_partial", "pl.reinterpret_view"),
])
def test_bad_input_raises_a_compile_error_naming_the_op(case, message):
    def body(a, y):
        t = pl.load(a, [0, 0], [R, C])
        if case == "fmods_tile":
            pl.fmods(t, t)
        elif case == "tile_fmod_scalar":
            pl.tile.fmod(t, 2.0)
        elif case == "maximums_tile":
            pl.maximums(t, t)
        elif case == "part_scalar":
            pl.part_add(t, 1.0)
        elif case == "part_shape":
            pl.part_mul(t, pl.load(a, [0, 0], [R, 16]))
        elif case == "prod_rank":
            pl.row_prod(pl.reshape(t, [R * C]))
        elif case == "expand_max_vec":
            pl.row_expand_max(t, pl.load(a, [0, 0], [1, C]))
        elif case == "expand_clone_shape":
            pl.expand_clone(pl.load(a, [0, 0], [1, C]), pl.load(a, [0, 0], [R, 16]))
        elif case == "view_same":
            pl.reinterpret_view(t, pl.FP32)
        elif case == "view_bytes":
            pl.reinterpret_view(t, pl.INT16, shape=[R, C])
        elif case == "view_partial":
            pl.reinterpret_view(pl.load(a, [0, 0], [R, C], valid_shapes=[4, C]), pl.INT32)

    e = _trace_error(body, np.ones((R, C), np.float32), poison((R, C)))
    assert message in str(e.value)


def test_a_bad_call_is_reported_at_the_users_line():
    line = next_line() + 5

    @pl.jit
    def k(a: pl.Tensor, y: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            t = pl.load(a, [0, 0], [R, C])
            pl.store(pl.part_add(t, pl.load(a, [0, 0], [R, 16])), [0, 0], y)

    with pytest.raises(PtoCompileError) as e:
        k.compile(np.ones((R, C), np.float32), poison((R, C)))
    assert_at(e, line, "pl.part_add")
