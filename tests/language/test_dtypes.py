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
from pypto_async._dtypes import as_dtype, holds
from pypto_async.errors import PtoArgumentError

R, C, TR = 16, 32, 8

NEW_INTS = {"INT16": (pl.INT16, np.int16), "UINT16": (pl.UINT16, np.uint16), "UINT32": (pl.UINT32, np.uint32),
            "UINT64": (pl.UINT64, np.uint64)}


def ints(rng, shape, dtype):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dtype)


def _floordiv(a, b):
    """numpy's // with PyPTO's zero divisor (0), without numpy's divide-by-zero warning."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(b == 0, 0, a // np.where(b == 0, 1, b)).astype(a.dtype)


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


@pytest.mark.parametrize("name", sorted(NEW_INTS))
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
    np.testing.assert_array_equal(div, _floordiv(a, b))
    np.testing.assert_array_equal(rem, _mod(a, b))
    np.testing.assert_array_equal(mx, np.maximum(a, b))
    np.testing.assert_array_equal(bits, (a >> np_dt(3)) ^ b)
    np.testing.assert_array_equal(f, a.astype(np.float32))


@pytest.mark.parametrize("name", sorted(NEW_INTS))
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
