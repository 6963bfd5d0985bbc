"""recip, reshape, concat, slice, assemble, store's spellings, atomic adds, cast rounding modes.

Each against numpy or torch on random data, outputs poisoned before the
launch; the assemble kernels are PyPTO's examples/kernels/08_assemble.py
patterns (a loop-carried target tile, pl.slice rows, nested loops).
"""

from __future__ import annotations

import numpy as np
import torch

import pypto_async.language as pl
from helpers.ir_fixtures import poison
from helpers.tiers import tiered


def test_recip_builds_a_sigmoid(launcher, rng):
    @pl.jit
    def silu(x: pl.Tensor, output: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            tile_x = pl.load(x, [0, 0], [32, 128])
            sigmoid = pl.recip(pl.add(pl.exp(pl.mul(tile_x, -1.0)), 1.0))
            pl.store(pl.mul(tile_x, sigmoid), [0, 0], output)
        return output

    x = torch.from_numpy(rng.standard_normal((32, 128)).astype(np.float32))
    out = torch.full((32, 128), float("nan"))
    launcher.run(silu.compile(x, out), x, out)
    torch.testing.assert_close(out, x * torch.sigmoid(x), rtol=1e-5, atol=1e-5)


def test_reshape_keeps_row_major_order(launcher, rng):
    @pl.jit
    def k(x: pl.Tensor, y: pl.Out[pl.Tensor], z: pl.Out[pl.Tensor]):
        t = pl.load(x, [0, 0], [8, 12]) * 2.0
        pl.store(pl.reshape(t, [4, 24]), [0, 0], y)
        pl.store(pl.reshape(pl.load(x, [0, 0], [8, 12]), [96]), [0], z)

    x = rng.standard_normal((8, 12)).astype(np.float32)
    y, z = poison((4, 24)), poison(96)
    launcher.run(k.compile(x, y, z), x, y, z)
    np.testing.assert_array_equal(y, (x * np.float32(2)).reshape(4, 24))
    np.testing.assert_array_equal(z, x.reshape(96))


def test_concat_columns(launcher, rng):
    @pl.jit
    def k(a: pl.Tensor, b: pl.Tensor, c: pl.Out[pl.Tensor]):
        pl.store(pl.concat(pl.load(a, [0, 0], [32, 16]), pl.load(b, [0, 0], [32, 8]) + 1.0), [0, 0], c)

    a = rng.standard_normal((32, 16)).astype(np.float32)
    b = rng.standard_normal((32, 8)).astype(np.float32)
    c = poison((32, 24))
    launcher.run(k.compile(a, b, c), a, b, c)
    np.testing.assert_array_equal(c, np.concatenate([a, b + np.float32(1)], axis=1))


def test_slice_with_loop_offsets(launcher, rng):
    @pl.jit
    def k(x: pl.Tensor, y: pl.Out[pl.Tensor]):
        t = pl.load(x, [0, 0], [16, 32])
        for i in pl.range(0, 16, 4):
            pl.store(pl.slice(t, [4, 8], [i, i + 2]), [i, 0], y)

    x = rng.standard_normal((16, 32)).astype(np.float32)
    y = poison((16, 8))
    launcher.run(k.compile(x, y), x, y)
    want = np.concatenate([x[i:i + 4, i + 2:i + 10] for i in range(0, 16, 4)])
    np.testing.assert_array_equal(y, want)


def _assemble_ref(x, placements):
    out = x.copy()
    for src, (r, c) in placements:
        out[r:r + src.shape[0], c:c + src.shape[1]] = src
    return out


def test_tile_assemble_once(launcher, rng):
    @pl.jit
    def k(x: pl.Tensor, src: pl.Tensor, y: pl.Out[pl.Tensor]):
        tile_x = pl.load(x, [0, 0], [32, 32], target_memory=pl.MemorySpace.Vec)
        tile_src = pl.load(src, [0, 0], [32, 16], target_memory=pl.MemorySpace.Vec)
        pl.store(pl.tile.assemble(tile_x, tile_src, [0, 16]), [0, 0], y)
        return y

    x = rng.standard_normal((32, 32)).astype(np.float32)
    src = rng.standard_normal((32, 16)).astype(np.float32)
    y = poison((32, 32))
    launcher.run(k.compile(x, src, y), x, src, y)
    np.testing.assert_array_equal(y, _assemble_ref(x, [(src, (0, 16))]))


def test_tile_assemble_row_by_row_in_a_loop(launcher, rng):
    @pl.jit
    def k(x: pl.Tensor, src: pl.Tensor, y: pl.Out[pl.Tensor]):
        tile_x = pl.load(x, [0, 0], [32, 32])
        tile_src = pl.load(src, [0, 0], [32, 16])
        for b in pl.range(4):
            for i in pl.range(8):
                row = b * 8 + i
                tile_x = pl.tile.assemble(tile_x, pl.slice(tile_src, [1, 16], [row, 0]), [row, 0])
        pl.store(tile_x, [0, 0], y)
        return y

    x = rng.standard_normal((32, 32)).astype(np.float32)
    src = rng.standard_normal((32, 16)).astype(np.float32)
    y = poison((32, 32))
    launcher.run(k.compile(x, src, y), x, src, y)
    np.testing.assert_array_equal(y, _assemble_ref(x, [(src, (0, 0))]))


def test_tile_assemble_quadrants(launcher, rng):
    @pl.jit
    def k(x: pl.Tensor, src: pl.Tensor, y: pl.Out[pl.Tensor]):
        tile_x = pl.load(x, [0, 0], [32, 32])
        tile_src = pl.load(src, [0, 0], [16, 16])
        for b in pl.range(2):
            for c in pl.range(2):
                tile_x = pl.tile.assemble(tile_x, tile_src, [b * 16, c * 16])
        pl.store(tile_x, [0, 0], y)
        return y

    x = rng.standard_normal((32, 32)).astype(np.float32)
    src = rng.standard_normal((16, 16)).astype(np.float32)
    y = poison((32, 32))
    launcher.run(k.compile(x, src, y), x, src, y)
    np.testing.assert_array_equal(y, np.tile(src, (2, 2)))


def test_store_spellings(launcher, rng):
    @pl.jit
    def k(x: pl.Tensor, y1: pl.Out[pl.Tensor], y2: pl.Out[pl.Tensor], y3: pl.Out[pl.Tensor]):
        t = pl.load(x, offsets=[0, 0], shapes=[16, 16])
        pl.store(t, offsets=[0, 0], output_tensor=y1)
        pl.store(t, [0, 0], [16, 16], y2)  # PyPTO's older (tile, offsets, shapes, tensor)
        pl.assemble(y3, t, [0, 0])

    x = rng.standard_normal((16, 16)).astype(np.float32)
    ys = [poison((16, 16)) for _ in range(3)]
    launcher.run(k.compile(x, *ys), x, *ys)
    for y in ys:
        np.testing.assert_array_equal(y, x)


@tiered("dtype", ["FP32", "INT32", "FP16", "BF16", "INT8"], fast=["FP32", "BF16", "INT8"])
def test_atomic_add_from_concurrent_blocks(launcher, rng, dtype):
    """Eight blocks on two cores add their tiles into one window of an InOut tensor."""
    d = getattr(pl, dtype)

    @pl.jit
    def k(x: pl.Tensor, out: pl.InOut[pl.Tensor]):
        for b in pl.spmd(8):
            pl.assemble(out, pl.load(x, [b * 16, 0], [16, 64]), [0, 0], atomic=pl.AtomicType.Add)
        return out

    if dtype == "BF16":
        xs = torch.from_numpy(rng.integers(-4, 5, (128, 64)).astype(np.float32)).to(torch.bfloat16)
        out = torch.from_numpy(rng.integers(-4, 5, (16, 64)).astype(np.float32)).to(torch.bfloat16)
        want = out.double() + xs.double().reshape(8, 16, 64).sum(0)
        launcher.run(k.compile(xs, out), xs, out)
        assert torch.equal(out.double(), want)  # small integers: every partial sum is exact
        return
    if d.is_float:
        xs = rng.integers(-4, 5, (128, 64)).astype(d.np_storage)
        out = rng.integers(-4, 5, (16, 64)).astype(d.np_storage)
    else:
        xs = rng.integers(-10, 10, (128, 64)).astype(d.np_storage)
        out = rng.integers(-10, 10, (16, 64)).astype(d.np_storage)
    want = (out.astype(np.int64) + xs.astype(np.int64).reshape(8, 16, 64).sum(0)).astype(d.np_storage)
    launcher.run(k.compile(xs, out), xs, out)
    np.testing.assert_array_equal(out, want)


def test_atomic_add_in_store(launcher, rng):
    @pl.jit
    def k(x: pl.Tensor, out: pl.InOut[pl.Tensor]):
        for i in pl.range(0, 64, 16):
            pl.store(pl.load(x, [i, 0], [16, 32]), [0, 0], out, atomic=pl.AtomicType.Add)
        return out

    x = rng.standard_normal((64, 32)).astype(np.float32)
    out = rng.standard_normal((16, 32)).astype(np.float32)
    want = out.copy()
    for i in range(4):  # the loop's order
        want += x[i * 16:(i + 1) * 16]
    launcher.run(k.compile(x, out), x, out)
    np.testing.assert_array_equal(out, want)


# ---- cast rounding modes -----------------------------------------------------------------


def _to_int_ref(x: np.ndarray, mode: str) -> np.ndarray:
    x = x.astype(np.float64)
    if mode in ("none", "trunc"):
        return np.trunc(x)
    if mode == "rint":
        return np.rint(x)
    if mode == "round":
        return np.sign(x) * np.floor(np.abs(x) + 0.5)  # half away from zero
    return {"floor": np.floor, "ceil": np.ceil}[mode](x)


@tiered("mode", ["none", "rint", "round", "floor", "ceil", "trunc"], fast=["rint", "floor"])
def test_cast_float_to_int_modes(launcher, rng, mode):
    @pl.jit
    def k(x: pl.Tensor, y: pl.Out[pl.Tensor]):
        pl.store(pl.cast(pl.load(x, [0, 0], [16, 32]), pl.INT32, mode=mode), [0, 0], y)

    x = (rng.standard_normal((16, 32)) * 20).astype(np.float32)
    x[0, :8] = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.0, -3.0]  # ties and exact values
    y = poison((16, 32), np.int32)
    launcher.run(k.compile(x, y), x, y)
    np.testing.assert_array_equal(y, _to_int_ref(x, mode).astype(np.int32))


def test_cast_mode_by_number_is_pyptos_numbering(launcher, rng):
    @pl.jit
    def k(x: pl.Tensor, y: pl.Out[pl.Tensor]):
        pl.store(pl.cast(pl.load(x, [0, 0], [8, 8]), pl.INT32, 3), [0, 0], y)  # 3 = "floor"

    x = (rng.standard_normal((8, 8)) * 5).astype(np.float32)
    y = poison((8, 8), np.int32)
    launcher.run(k.compile(x, y), x, y)
    np.testing.assert_array_equal(y, np.floor(x).astype(np.int32))


def _fp16_ref(x: np.ndarray, mode: str) -> np.ndarray:
    """Round float64 ``x`` to float16 with ``mode``, from numpy's nearest-even conversion and nextafter."""
    near = x.astype(np.float16)
    exact = near.astype(np.float64) == x
    up = np.nextafter(near, np.copysign(np.inf, x).astype(np.float16))  # one step away from zero
    down = np.nextafter(near, np.copysign(0.0, x).astype(np.float16))  # one step toward zero
    above = np.abs(near.astype(np.float64)) > np.abs(x)
    inner = np.where(above, down, near)  # the neighbour toward zero
    outer = np.where(above, near, up)  # and away from it
    if mode == "rint":
        out = near
    elif mode == "trunc":
        out = inner
    elif mode == "floor":
        out = np.where(x > 0, inner, outer)
    elif mode == "ceil":
        out = np.where(x > 0, outer, inner)
    elif mode == "round":
        tie = np.abs(x) == (np.abs(inner.astype(np.float64)) + np.abs(outer.astype(np.float64))) / 2
        out = np.where(tie, outer, near)
    else:  # odd: the neighbour whose last significand bit is 1
        out = np.where(inner.view(np.uint16) & 1, inner, outer)
    return np.where(exact, near, out)


def test_cast_default_mode_is_pyptos_round(launcher, rng):
    """Without mode=, pl.cast rounds half away from zero, as PyPTO's default "round" does."""
    @pl.jit
    def k(x: pl.Tensor, yi: pl.Out[pl.Tensor], yh: pl.Out[pl.Tensor]):
        t = pl.load(x, [0, 0], [16, 64])
        pl.store(pl.cast(t, pl.INT32), [0, 0], yi)
        pl.store(pl.cast(t, pl.FP16), [0, 0], yh)

    x = (rng.standard_normal((16, 64)) * 30).astype(np.float32)
    x[0, :8] = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.7, -2.7]  # ties to integers, and non-ties
    halves = np.float16(rng.standard_normal(32) * 30).astype(np.float32)
    ulp = np.spacing(np.abs(halves).astype(np.float16)).astype(np.float32)
    x[1, :32] = halves + np.sign(halves) * ulp / 2  # exact ties between two FP16 values
    yi, yh = poison((16, 64), np.int32), poison((16, 64), np.float16)
    launcher.run(k.compile(x, yi, yh), x, yi, yh)
    np.testing.assert_array_equal(yi, _to_int_ref(x, "round").astype(np.int32))
    assert list(yi[0, :8]) == [1, 2, 3, -1, -2, -3, 3, -3]
    np.testing.assert_array_equal(yh.view(np.uint16), _fp16_ref(x.astype(np.float64), "round").view(np.uint16))


@tiered("mode", ["rint", "round", "floor", "ceil", "trunc", "odd"], fast=["round", "odd"])
def test_cast_to_fp16_modes(launcher, rng, mode):
    @pl.jit
    def k(x: pl.Tensor, y: pl.Out[pl.Tensor]):
        pl.store(pl.cast(pl.load(x, [0, 0], [16, 64]), pl.FP16, mode=mode), [0, 0], y)

    x = rng.standard_normal((16, 64)) * 30
    halves = np.float16(rng.standard_normal(32) * 30).astype(np.float64)
    ulp = np.spacing(np.abs(halves).astype(np.float16)).astype(np.float64)
    x[0, :32] = halves + np.sign(halves) * ulp / 2  # exact ties between two FP16 values
    x[1, :32] = halves  # exactly representable
    y = poison((16, 64), np.float16)
    launcher.run(k.compile(x, y), x, y)
    np.testing.assert_array_equal(y.view(np.uint16), _fp16_ref(x, mode).view(np.uint16))


@tiered("mode", ["floor", "ceil", "trunc"], fast=["ceil"])
def test_cast_to_bf16_directed_modes(launcher, rng, mode):
    @pl.jit
    def k(x: pl.Tensor, y: pl.Out[pl.Tensor]):
        pl.store(pl.cast(pl.load(x, [0, 0], [16, 64]), pl.BF16, mode=mode), [0, 0], y)

    x = torch.from_numpy((rng.standard_normal((16, 64)) * 7).astype(np.float32))
    y = torch.full((16, 64), float("nan"), dtype=torch.bfloat16)
    launcher.run(k.compile(x, y), x, y)
    bits = x.view(torch.int32).numpy().astype(np.int64)
    low = (bits >> 16) & 0xFFFF  # BF16 toward zero: drop the low half of the float
    inner = low.astype(np.uint16)
    outer = np.where((bits & 0xFFFF) != 0, low + 1, low).astype(np.uint16)
    positive = x.numpy() > 0
    want = {"trunc": inner, "floor": np.where(positive, inner, outer),
            "ceil": np.where(positive, outer, inner)}[mode]
    np.testing.assert_array_equal(y.view(torch.uint16).numpy(), want)
