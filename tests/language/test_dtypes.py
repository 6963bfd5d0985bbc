"""PyPTO's integer element types end to end: INT16, UINT16, UINT32, UINT64.

PyPTO's type table (``docs/en/user/language/00-types.md``) lists ``pl.INT16`` /
``pl.UINT16`` / ``pl.UINT32`` / ``pl.UINT64`` beside the 8/32/64-bit ones.  Each
runs here through the whole path: the annotation, the kernel's C element type,
the host array (numpy and torch), a scalar argument, and back; arithmetic wraps
as numpy's does (``-fwrapv``; a UINT16 product is computed by C in ``int``),
integer division floors (unsigned: truncates) and a zero divisor gives 0.
Outputs are poisoned first; inputs are random over the whole range.
"""

import numpy as np
import pytest
import torch

import pypto_async.language as pl
from helpers.ir_fixtures import poison
from helpers.tiers import tiered
from pypto_async._dtypes import as_dtype, holds
from pypto_async.errors import PtoArgumentError

R, C, TR = 16, 32, 8

NEW_INTS = {"INT16": (pl.INT16, np.int16), "UINT16": (pl.UINT16, np.uint16), "UINT32": (pl.UINT32, np.uint32),
            "UINT64": (pl.UINT64, np.uint64)}


def ints(rng, shape, dtype):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dtype)


def _truncdiv(a, b):
    """PyPTO's integer division (toward zero) with its zero divisor (0), in int64/uint64 exactly."""
    wide = np.uint64 if a.dtype.kind == "u" else np.int64
    a64, b64 = a.astype(wide), np.where(b == 0, 1, b).astype(wide)
    with np.errstate(over="ignore"):
        q = np.abs(a64) // np.abs(b64) if wide is np.uint64 else a64 // b64
        if wide is np.int64:  # floor -> trunc where the signs differ and there is a remainder
            q = q + ((a64 % b64 != 0) & ((a64 < 0) != (b64 < 0)))
    return np.where(b == 0, 0, q).astype(a.dtype)


def _mod(a, b):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(b == 0, 0, a % np.where(b == 0, 1, b)).astype(a.dtype)


def _arith(dt):
    @pl.jit
    def arith(a: pl.Tensor[[R, C], dt], b: pl.Tensor[[R, C], dt], s: pl.Scalar[dt],
              add: pl.Out[pl.Tensor[[R, C], dt]], sub: pl.Out[pl.Tensor[[R, C], dt]],
              mul: pl.Out[pl.Tensor[[R, C], dt]], div: pl.Out[pl.Tensor[[R, C], dt]],
              rem: pl.Out[pl.Tensor[[R, C], dt]], mx: pl.Out[pl.Tensor[[R, C], dt]],
              bits: pl.Out[pl.Tensor[[R, C], dt]], adds: pl.Out[pl.Tensor[[R, C], dt]],
              f: pl.Out[pl.Tensor[[R, C], pl.FP32]]):
        for i in pl.range(0, R, TR):
            x = pl.load(a, [i, 0], [TR, C])
            y = pl.load(b, [i, 0], [TR, C])
            pl.store(pl.add(x, y), [i, 0], add)
            pl.store(pl.sub(x, y), [i, 0], sub)
            pl.store(pl.mul(x, y), [i, 0], mul)
            pl.store(pl.div(x, y), [i, 0], div)
            pl.store(pl.rem(x, y), [i, 0], rem)
            pl.store(pl.maximum(x, y), [i, 0], mx)
            pl.store(pl.xor(pl.shrs(x, 3), y), [i, 0], bits)
            pl.store(pl.adds(x, s), [i, 0], adds)
            pl.store(pl.cast(x, pl.FP32), [i, 0], f)

    return arith


@tiered("name", sorted(NEW_INTS), fast=["INT16", "UINT64"])
def test_integer_dtype_arithmetic(rng, name):
    dt, np_dt = NEW_INTS[name]
    assert dt.get_byte() == np.dtype(np_dt).itemsize and as_dtype(np_dt) is dt
    a, b = ints(rng, (R, C), np_dt), ints(rng, (R, C), np_dt)
    b[0, :4] = 0  # a zero divisor gives 0
    b[1, :4] = 1
    s = int(ints(rng, (), np_dt))
    outs = [poison((R, C), np_dt) for _ in range(8)] + [poison((R, C), np.float32)]
    _arith(dt)(a, b, s, *outs)
    add, sub, mul, div, rem, mx, bits, adds, f = outs
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(add, a + b)
        np.testing.assert_array_equal(sub, a - b)
        np.testing.assert_array_equal(mul, a * b)
        np.testing.assert_array_equal(adds, a + np_dt(s))
    np.testing.assert_array_equal(div, _truncdiv(a, b))
    np.testing.assert_array_equal(rem, _mod(a, b))
    np.testing.assert_array_equal(mx, np.maximum(a, b))
    np.testing.assert_array_equal(bits, (a >> np_dt(3)) ^ b)
    np.testing.assert_array_equal(f, a.astype(np.float32))


@tiered("name", sorted(NEW_INTS), fast=["UINT16", "UINT32"])
def test_integer_dtype_torch_and_row_sum(name):
    """torch tensors of the type go in and come back; a row sum wraps in the type."""
    dt, np_dt = NEW_INTS[name]
    torch_dt = getattr(torch, np.dtype(np_dt).name)

    @pl.jit
    def rsum(a: pl.Tensor[[R, C], dt], out: pl.Out[pl.Tensor[[R, 1], dt]]):
        for i in pl.range(0, R, TR):
            pl.store(pl.row_sum(pl.load(a, [i, 0], [TR, C])), [i, 0], out)

    rng = np.random.default_rng(7)
    a_np = ints(rng, (R, C), np_dt)
    a = torch.from_numpy(a_np)
    out = torch.from_numpy(poison((R, 1), np_dt))
    assert a.dtype == torch_dt
    rsum(a, out)
    with np.errstate(over="ignore"):
        want = a_np.sum(axis=1, keepdims=True, dtype=np_dt)
    np.testing.assert_array_equal(out.numpy(), want)


def test_uint16_array_is_uint16_but_still_holds_bf16():
    """A uint16 array is a UINT16 tensor; where BF16 is wanted it is bfloat16 storage, as before."""
    assert holds(pl.UINT16, pl.UINT16) and holds(pl.UINT16, pl.BF16)
    assert not holds(pl.BF16, pl.UINT16) and not holds(pl.INT16, pl.BF16)

    @pl.jit
    def copy(a: pl.Tensor[[R, C], pl.BF16], out: pl.Out[pl.Tensor[[R, C], pl.BF16]]):
        pl.store(pl.load(a, [0, 0], [R, C]), [0, 0], out)

    bits = np.random.default_rng(3).integers(0x3F00, 0x4100, size=(R, C), dtype=np.uint16)
    out = poison((R, C), np.uint16)
    copy(bits, out)
    np.testing.assert_array_equal(out, bits)


@pytest.mark.slow
def test_integer_dtype_scalar_range_checked():
    @pl.jit
    def k(a: pl.Tensor[[R, C], pl.UINT16], s: pl.Scalar[pl.UINT16], out: pl.Out[pl.Tensor[[R, C], pl.UINT16]]):
        pl.store(pl.adds(pl.load(a, [0, 0], [R, C]), s), [0, 0], out)

    a = np.zeros((R, C), np.uint16)
    out = poison((R, C), np.uint16)
    k(a, 65535, out)
    np.testing.assert_array_equal(out, np.full((R, C), 65535, np.uint16))
    for bad in (65536, -1):
        with pytest.raises(PtoArgumentError, match="does not fit a UINT16"):
            k(a, bad, out)


# ---- FP8 ------------------------------------------------------------------------------------------

FP8 = {"FP8E4M3FN": (pl.FP8E4M3FN, torch.float8_e4m3fn), "FP8E5M2": (pl.FP8E5M2, torch.float8_e5m2)}


def _fp8_grid(tdt):
    """Every finite value of the format, ascending (as float32)."""
    v = torch.arange(256, dtype=torch.uint8).view(tdt).float().numpy()
    return np.unique(v[np.isfinite(v)])


def _fp8_inputs(rng, tdt, shape):
    """Random floats over the format's range, with its midpoints, overflow, inf and NaN among them."""
    grid = _fp8_grid(tdt)
    mids = ((grid[1:].astype(np.float64) + grid[:-1]) / 2).astype(np.float32)
    n = int(np.prod(shape))
    x = (rng.standard_normal(n) * rng.choice([1e-3, 0.1, 1.0, 30.0, grid[-1] / 4], n)).astype(np.float32)
    picks = rng.choice(mids, n // 4)
    x[: n // 4] = picks
    x[n // 4: n // 4 + 4] = [grid[-1] * 1.2, -grid[-1] * 3, np.inf, np.nan]
    return x.reshape(shape)


@tiered("name", sorted(FP8), fast=["FP8E4M3FN"])
def test_fp8_load_compute_store_and_cast(name):
    """FP8 tiles hold FP8 values: each op computes in FP32 and its result rounds to nearest even, as torch's .to()."""
    dt, tdt = FP8[name]

    @pl.jit
    def fp8(q: pl.Tensor[[R, C], dt], x: pl.Tensor[[R, C], pl.FP32],
            y8: pl.Out[pl.Tensor[[R, C], dt]], y32: pl.Out[pl.Tensor[[R, C], pl.FP32]],
            c8: pl.Out[pl.Tensor[[R, C], dt]], away: pl.Out[pl.Tensor[[R, C], pl.FP32]]):
        for i in pl.range(0, R, TR):
            t = pl.load(q, [i, 0], [TR, C])
            pl.store(pl.adds(pl.muls(t, 3.0), 1.0), [i, 0], y8)
            pl.store(pl.cast(t, pl.FP32), [i, 0], y32)
            v = pl.load(x, [i, 0], [TR, C])
            pl.store(pl.cast(v, dt, mode="rint"), [i, 0], c8)
            pl.store(pl.cast(pl.cast(v, dt, mode="round"), pl.FP32), [i, 0], away)

    rng = np.random.default_rng(11)
    x = torch.from_numpy(_fp8_inputs(rng, tdt, (R, C)))
    q = torch.from_numpy(_fp8_inputs(rng, tdt, (R, C))).to(tdt)
    y8 = torch.from_numpy(poison((R, C), np.uint8)).view(tdt)
    c8 = torch.from_numpy(poison((R, C), np.uint8)).view(tdt)
    y32, away = torch.full((R, C), float("nan")), torch.full((R, C), float("nan"))
    fp8(q, x, y8, y32, c8, away)
    bits = lambda t: t.view(torch.uint8).numpy()  # noqa: E731
    np.testing.assert_array_equal(y32.numpy(), q.float().numpy())
    want = ((q.float() * 3.0).to(tdt).float() + 1.0).to(tdt)  # each FP8 tile op's result is an FP8 value
    nan = np.isnan(want.float().numpy())
    np.testing.assert_array_equal(bits(y8)[~nan], bits(want)[~nan])
    assert np.isnan(y8.float().numpy()[nan]).all()
    want = x.to(tdt)
    nan = np.isnan(want.float().numpy())
    np.testing.assert_array_equal(bits(c8)[~nan], bits(want)[~nan])
    assert np.isnan(c8.float().numpy()[nan]).all()
    # "round": a midpoint goes away from zero, everything else as "rint".
    grid = _fp8_grid(tdt)
    xs, got = x.numpy().ravel(), away.numpy().ravel()
    finite = np.isfinite(xs) & (np.abs(xs) <= grid[-1])
    k = np.searchsorted(grid, np.abs(xs[finite]))
    lo, hi = grid[np.maximum(k - 1, 0)], grid[np.minimum(k, len(grid) - 1)]
    mid = (lo.astype(np.float64) + hi) / 2 == np.abs(xs[finite])
    rne = x.to(tdt).float().numpy().ravel()[finite]
    want = np.where(mid, np.copysign(hi, xs[finite]), rne)
    assert mid.sum() > 50
    np.testing.assert_array_equal(got[finite], want)


def test_fp8_numpy_bits_and_device_tensor(worker):
    """A uint8 numpy array is FP8 storage where FP8 is wanted; DeviceTensor.numpy gives the bits back."""
    @pl.jit
    def double(q: pl.Tensor[[R, C], pl.FP8E4M3FN], out: pl.Out[pl.Tensor[[R, C], pl.FP8E4M3FN]]):
        pl.store(pl.muls(pl.load(q, [0, 0], [R, C]), 2.0), [0, 0], out)

    x = torch.from_numpy(np.random.default_rng(5).uniform(-100, 100, (R, C)).astype(np.float32))
    bits = x.to(torch.float8_e4m3fn).view(torch.uint8).numpy()
    out = poison((R, C), np.uint8)
    double(bits, out)
    want = (torch.from_numpy(bits).view(torch.float8_e4m3fn).float() * 2.0).to(torch.float8_e4m3fn)
    np.testing.assert_array_equal(out, want.view(torch.uint8).numpy())
    t = worker.alloc_tensor((R, C), pl.FP8E4M3FN, init=bits)
    back = t.numpy()
    assert back.dtype == np.uint8
    np.testing.assert_array_equal(back, bits)
    dev_out = worker.alloc_tensor((R, C), pl.FP8E4M3FN, init=poison((R, C), np.uint8))
    worker.run(double.compile(bits, out), t, dev_out)
    np.testing.assert_array_equal(dev_out.numpy(), out)
    t.free()
    dev_out.free()


def test_fp8_scalar_and_directed_cast_are_refused():
    from pypto_async.errors import PtoCompileError

    @pl.jit
    def scalar(a: pl.Tensor[[R, C], pl.FP32], s: pl.Scalar[pl.FP8E5M2], out: pl.Out[pl.Tensor[[R, C], pl.FP32]]):
        pl.store(pl.adds(pl.load(a, [0, 0], [R, C]), s), [0, 0], out)

    @pl.jit
    def floor(a: pl.Tensor[[R, C], pl.FP32], out: pl.Out[pl.Tensor[[R, C], pl.FP8E5M2]]):
        pl.store(pl.cast(pl.load(a, [0, 0], [R, C]), pl.FP8E5M2, mode="floor"), [0, 0], out)

    a = np.ones((R, C), np.float32)
    with pytest.raises(PtoCompileError, match="FP8E5M2 scalar is not supported"):
        scalar(a, 1.0, np.zeros((R, C), np.float32))
    with pytest.raises(PtoCompileError, match="mode 'floor' is not supported"):
        floor(a, np.zeros((R, C), np.uint8))


# ---- the torch reference (debug.torch_codegen) of kernels over these types -----------------------

def _torch_reference(kernel, args):
    from pypto_async.debug import torch_codegen

    program = kernel.lower(*args)
    ns: dict = {}
    exec(compile(torch_codegen(program), f"<torch_codegen {program.name}>", "exec"), ns)  # noqa: S102
    targs = [torch.from_numpy(a.copy()) if isinstance(a, np.ndarray) else a for a in args]
    ns[program.name](*targs)
    return targs


@pytest.mark.parametrize("name", ["INT16", "UINT16", "UINT32"])
def test_torch_codegen_integer_dtypes(name):
    dt, np_dt = NEW_INTS[name]
    rng = np.random.default_rng(2)
    a, b = ints(rng, (R, C), np_dt), ints(rng, (R, C), np_dt)
    s = int(ints(rng, (), np_dt))
    args = [a, b, s] + [poison((R, C), np_dt) for _ in range(8)] + [poison((R, C), np.float32)]
    ref = _torch_reference(_arith(dt), args)
    _arith(dt)(*args)
    for got, want in zip(args[3:], ref[3:]):
        np.testing.assert_array_equal(got, want.numpy())


def test_torch_codegen_refuses_uint64():
    from pypto_async.errors import PtoNotSupported

    a = np.zeros((R, C), np.uint64)
    args = [a, a, 0] + [poison((R, C), np.uint64) for _ in range(8)] + [poison((R, C), np.float32)]
    with pytest.raises(PtoNotSupported, match="UINT64"):
        _torch_reference(_arith(pl.UINT64), args)


@tiered("name", sorted(FP8), fast=["FP8E5M2"])
def test_torch_codegen_fp8(name):
    dt, tdt = FP8[name]

    @pl.jit
    def fp8(q: pl.Tensor[[R, C], dt], x: pl.Tensor[[R, C], pl.FP32], y8: pl.Out[pl.Tensor[[R, C], dt]],
            c8: pl.Out[pl.Tensor[[R, C], dt]], away: pl.Out[pl.Tensor[[R, C], dt]]):
        t = pl.load(q, [0, 0], [R, C])
        pl.store(pl.adds(pl.muls(t, 3.0), 1.0), [0, 0], y8)
        v = pl.load(x, [0, 0], [R, C])
        pl.store(pl.cast(v, dt, mode="rint"), [0, 0], c8)
        pl.store(pl.cast(v, dt, mode="round"), [0, 0], away)

    rng = np.random.default_rng(4)
    q = torch.from_numpy(_fp8_inputs(rng, tdt, (R, C))).to(tdt).view(torch.uint8).numpy()
    x = _fp8_inputs(rng, tdt, (R, C))
    args = [q, x] + [poison((R, C), np.uint8) for _ in range(3)]
    from pypto_async.debug import torch_codegen

    program = fp8.lower(*args)
    ns: dict = {}
    exec(compile(torch_codegen(program), "<torch_codegen fp8>", "exec"), ns)  # noqa: S102
    touts = [torch.from_numpy(poison((R, C), np.uint8)).view(tdt) for _ in range(3)]
    ns[program.name](torch.from_numpy(q).view(tdt), torch.from_numpy(x), *touts)
    fp8(*args)
    for got, want in zip(args[2:], touts):
        w = want.view(torch.uint8).numpy()
        nan = np.isnan(want.float().numpy())
        np.testing.assert_array_equal(got[~nan], w[~nan])
        assert np.isnan(torch.from_numpy(got).view(tdt).float().numpy()[nan]).all()


@tiered("name", sorted(FP8), fast=["FP8E4M3FN"])
def test_fp8_row_sum_rounds_once(name):
    dt, tdt = FP8[name]

    @pl.jit
    def rsum(q: pl.Tensor[[R, C], dt], out: pl.Out[pl.Tensor[[R, 1], dt]]):
        pl.store(pl.row_sum(pl.load(q, [0, 0], [R, C])), [0, 0], out)

    vals = torch.from_numpy(np.random.default_rng(9).uniform(-8, 8, (R, C)).astype(np.float32)).to(tdt)
    out = torch.from_numpy(poison((R, 1), np.uint8)).view(tdt)
    rsum(vals, out)
    want = torch.from_numpy(vals.float().numpy().astype(np.float64).sum(axis=1, keepdims=True)).float().to(tdt)
    np.testing.assert_array_equal(out.view(torch.uint8).numpy(), want.view(torch.uint8).numpy())


def test_arrays_of_the_new_integer_types_wrap():
    """pl.array.create takes INT16, UINT16 and UINT32: a stored value wraps as the element type holds it."""

    @pl.jit
    def wraps(v: pl.Tensor[[3], pl.INT64], marks: pl.InOut[pl.Tensor[[3, 512], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            a = pl.array.create(1, pl.INT16)
            a[0] = pl.read(v, [0])
            b = pl.array.create(1, pl.UINT16)
            b[0] = pl.read(v, [1])
            c = pl.array.create(1, pl.UINT32)
            c[0] = pl.read(v, [2])
            one = pl.full([1, 1], 1.0, pl.FP32)
            for row, value in enumerate((a[0], b[0], c[0])):
                marks = pl.store(one, [row, value + 128], marks)
        return marks

    v = torch.tensor([65536 - 100, 65536 + 300, (1 << 32) + 200], dtype=torch.int64)
    marks = torch.zeros(3, 512)
    wraps(v, marks)
    assert marks.sum().item() == 3
    assert [int(c) - 128 for c in marks.argmax(dim=1)] == [-100, 300, 200]
