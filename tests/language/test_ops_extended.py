"""PyPTO's extended op set against numpy/torch on random data, run on the sim device.

The ops of PyPTO's catalog beyond the basic arithmetic: ``rem(s)``,
``addc subc addsc subsc``, ``expands``, ``prelu``, the bitwise and shift ops
(integer tiles, random integers), ``cmp(s)`` with its packed predicate mask
and ``sel(s)``, ``matmul_bias`` and the ``gemv`` family.  Outputs are poisoned
(NaN, or 0xAB bytes) before each launch; kernels loop over row tiles with
``pl.range`` so offsets are symbolic.  Compile errors are checked for their
message and file:line.
"""

from __future__ import annotations


import numpy as np
import pytest
import torch

from helpers.located import assert_at, next_line
import pypto_async.language as pl
from helpers.ir_fixtures import poison
from helpers.tiers import tiered, tiered_product
from pypto_async import ir
from pypto_async.errors import PtoCompileError

R, C, TR = 32, 40, 8

INT_DTYPES = {"int32": np.int32, "int8": np.int8, "uint8": np.uint8, "int64": np.int64}



def ints(rng, shape, dtype):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dtype)


def _binary_kernel(fn):
    @pl.jit
    def k(a: pl.Tensor, b: pl.Tensor, y: pl.Out[pl.Tensor]):
        for i in pl.range(0, R, TR):
            pl.store(fn(pl.load(a, [i, 0], [TR, C]), pl.load(b, [i, 0], [TR, C])), [i, 0], y)

    return k


def _scalar_kernel(fn, s):
    @pl.jit
    def k(a: pl.Tensor, y: pl.Out[pl.Tensor]):
        for i in pl.range(0, R, TR):
            pl.store(fn(pl.load(a, [i, 0], [TR, C]), s), [i, 0], y)

    return k


# ---- bitwise and shifts ---------------------------------------------------------------------------

BITWISE = {"and_": (pl.and_, np.bitwise_and), "or_": (pl.or_, np.bitwise_or), "xor": (pl.xor, np.bitwise_xor)}


@tiered_product("op,dt", sorted(BITWISE), sorted(INT_DTYPES))
def test_bitwise_tiles(launcher, rng, op, dt):
    fn, ref = BITWISE[op]
    dtype = INT_DTYPES[dt]
    a, b = ints(rng, (R, C), dtype), ints(rng, (R, C), dtype)
    y = poison((R, C), dtype)
    launcher.run(_binary_kernel(fn).compile(a, b, y), a, b, y)
    np.testing.assert_array_equal(y, ref(a, b))


BITWISE_SCALAR = {"ands": (pl.ands, np.bitwise_and), "ors": (pl.ors, np.bitwise_or), "xors": (pl.xors, np.bitwise_xor)}


@tiered_product("op,dt", sorted(BITWISE_SCALAR), sorted(INT_DTYPES))
def test_bitwise_scalar(launcher, rng, op, dt):
    fn, ref = BITWISE_SCALAR[op]
    dtype = INT_DTYPES[dt]
    a = ints(rng, (R, C), dtype)
    s = 0x5A
    y = poison((R, C), dtype)
    launcher.run(_scalar_kernel(fn, s).compile(a, y), a, y)
    np.testing.assert_array_equal(y, ref(a, dtype(s)))


@tiered("dt", sorted(INT_DTYPES), fast=["int8", "uint8"])
def test_not(launcher, rng, dt):
    dtype = INT_DTYPES[dt]
    a = ints(rng, (R, C), dtype)
    y = poison((R, C), dtype)

    @pl.jit
    def k(a: pl.Tensor, y: pl.Out[pl.Tensor]):
        for i in pl.range(0, R, TR):
            pl.store(pl.not_(pl.load(a, [i, 0], [TR, C])), [i, 0], y)

    launcher.run(k.compile(a, y), a, y)
    np.testing.assert_array_equal(y, np.invert(a))


def _shift_ref(a, n, left: bool):
    """Per-element shift in Python integers, wrapped to the dtype; amounts are in [0, bits)."""
    bits = a.dtype.itemsize * 8
    out = [(int(x) << int(s)) if left else (int(x) >> int(s)) for x, s in zip(a.ravel(), n.ravel())]
    mask = (1 << bits) - 1
    wrapped = np.array([v & mask for v in out], dtype=np.uint64)
    return wrapped.astype(a.dtype.str.replace("i", "u")).view(a.dtype).reshape(a.shape)


@tiered("dt", sorted(INT_DTYPES), fast=["int8", "uint8"])
@pytest.mark.parametrize("left", [True, False], ids=["shl", "shr"])
def test_shift_tiles(launcher, rng, dt, left):
    dtype = INT_DTYPES[dt]
    bits = np.dtype(dtype).itemsize * 8
    a = ints(rng, (R, C), dtype)
    n = rng.integers(0, bits, size=(R, C)).astype(dtype)
    y = poison((R, C), dtype)
    launcher.run(_binary_kernel(pl.shl if left else pl.shr).compile(a, n, y), a, n, y)
    np.testing.assert_array_equal(y, _shift_ref(a, n, left))


@tiered_product("op,dt", ["shls", "shrs", "shl", "shr"], sorted(INT_DTYPES))
def test_shift_scalar(launcher, rng, dt, op):
    dtype = INT_DTYPES[dt]
    a = ints(rng, (R, C), dtype)
    y = poison((R, C), dtype)
    launcher.run(_scalar_kernel(getattr(pl, op), 3).compile(a, y), a, y)
    np.testing.assert_array_equal(y, _shift_ref(a, np.full(a.shape, 3), op.startswith("shl")))


def test_shift_by_width_or_more_is_defined(launcher):
    """A shift amount outside [0, bits) gives 0 (or -1 for shr of a negative signed value)."""
    a = np.array([[5, -5, 7, -1]], np.int32)
    n = np.array([[32, 40, -1, 33]], np.int32)
    left, right = poison((1, 4), np.int32), poison((1, 4), np.int32)

    @pl.jit
    def k(a: pl.Tensor, n: pl.Tensor, left: pl.Out[pl.Tensor], right: pl.Out[pl.Tensor]):
        ta, tn = pl.load(a, [0, 0], [1, 4]), pl.load(n, [0, 0], [1, 4])
        pl.store(pl.shl(ta, tn), [0, 0], left)
        pl.store(pl.shr(ta, tn), [0, 0], right)

    launcher.run(k.compile(a, n, left, right), a, n, left, right)
    np.testing.assert_array_equal(left, [[0, 0, 0, 0]])
    np.testing.assert_array_equal(right, [[0, -1, 0, -1]])


# ---- remainder ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dt", ["int32", "fp32"])
def test_rem_tiles_python_semantics(launcher, rng, dt):
    if dt == "int32":
        a = rng.integers(-1000, 1000, size=(R, C)).astype(np.int32)
        b = rng.integers(1, 50, size=(R, C)).astype(np.int32) * rng.choice([-1, 1], size=(R, C)).astype(np.int32)
        y = poison((R, C), np.int32)
    else:
        a = (rng.standard_normal((R, C)) * 10).astype(np.float32)
        b = (rng.uniform(0.5, 3, size=(R, C)) * rng.choice([-1, 1], size=(R, C))).astype(np.float32)
        y = poison((R, C))

    def fn(x, z):
        return pl.rem(x, z, pl.create_tile([TR, C], x.dtype))  # PyPTO's tmp tile is accepted

    launcher.run(_binary_kernel(fn).compile(a, b, y), a, b, y)
    want = torch.remainder(torch.from_numpy(a), torch.from_numpy(b)).numpy()
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-5)


def test_rems_scalar(launcher, rng):
    a = rng.integers(-1000, 1000, size=(R, C)).astype(np.int32)
    y = poison((R, C), np.int32)

    def fn(x, s):
        return pl.rems(x, s, pl.create_tile([TR, C], pl.INT32))

    launcher.run(_scalar_kernel(fn, -7).compile(a, y), a, y)
    np.testing.assert_array_equal(y, np.remainder(a, -7))


# ---- three-operand add/sub, expands, prelu -------------------------------------------------------


def test_addc_subc_addsc_subsc(launcher, rng):
    a, b = rng.standard_normal((R, C)).astype(np.float32), rng.standard_normal((R, C)).astype(np.float32)
    c = rng.standard_normal((R, 1)).astype(np.float32)  # broadcast along each row
    outs = [poison((R, C)) for _ in range(4)]

    @pl.jit
    def k(a: pl.Tensor, b: pl.Tensor, c: pl.Tensor, o0: pl.Out[pl.Tensor], o1: pl.Out[pl.Tensor],
          o2: pl.Out[pl.Tensor], o3: pl.Out[pl.Tensor]):
        for i in pl.range(0, R, TR):
            ta, tb, tc = pl.load(a, [i, 0], [TR, C]), pl.load(b, [i, 0], [TR, C]), pl.load(c, [i, 0], [TR, 1])
            pl.store(pl.addc(ta, tb, tc), [i, 0], o0)
            pl.store(pl.subc(ta, tb, tc), [i, 0], o1)
            pl.store(pl.addsc(ta, 1.5, tb), [i, 0], o2)
            pl.store(pl.subsc(ta, 1.5, tb), [i, 0], o3)

    launcher.run(k.compile(a, b, c, *outs), a, b, c, *outs)
    np.testing.assert_allclose(outs[0], a + b + c, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(outs[1], a - b - c, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(outs[2], a + np.float32(1.5) + b, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(outs[3], a - np.float32(1.5) - b, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dt", ["fp32", "int32"])
def test_expands(launcher, rng, dt):
    dtype = np.float32 if dt == "fp32" else np.int32
    x = rng.standard_normal((R, C)).astype(dtype)
    y = poison((R, C), dtype)
    value = 2.5 if dt == "fp32" else -3

    @pl.jit
    def k(x: pl.Tensor, y: pl.Out[pl.Tensor]):
        for i in pl.range(0, R, TR):
            pl.store(pl.expands(pl.load(x, [i, 0], [TR, C]), value), [i, 0], y)

    launcher.run(k.compile(x, y), x, y)
    np.testing.assert_array_equal(y, np.full((R, C), value, dtype))


@pytest.mark.parametrize("dt", ["fp32", "fp16"])
def test_prelu(launcher, rng, dt):
    dtype = np.float32 if dt == "fp32" else np.float16
    x = rng.standard_normal((R, C)).astype(dtype)
    x[0, 0] = np.nan
    slope = rng.uniform(0.01, 0.5, size=(R, C)).astype(dtype)
    y = poison((R, C), dtype)

    @pl.jit
    def k(x: pl.Tensor, s: pl.Tensor, y: pl.Out[pl.Tensor]):
        for i in pl.range(0, R, TR):
            tx, ts = pl.load(x, [i, 0], [TR, C]), pl.load(s, [i, 0], [TR, C])
            pl.store(pl.prelu(tx, ts, pl.create_tile([TR, C], tx.dtype)), [i, 0], y)

    launcher.run(k.compile(x, slope, y), x, slope, y)
    tx, ts = torch.from_numpy(x).float(), torch.from_numpy(slope).float()
    want = torch.where(tx > 0, tx, tx * ts).to(torch.from_numpy(x).dtype).numpy()
    np.testing.assert_array_equal(y, want)  # one multiply, rounded once: exact


# ---- compare and select -------------------------------------------------------------------------

CMP_REF = [np.equal, np.not_equal, np.less, np.less_equal, np.greater, np.greater_equal]


def _packed(bits: np.ndarray) -> np.ndarray:
    """PyPTO's packed mask of a boolean [rows, n] array: LSB-first bytes, rows padded to a multiple of 32."""
    packed = np.packbits(bits, axis=-1, bitorder="little")
    cols = -(-packed.shape[-1] // 32) * 32
    return np.pad(packed, ((0, 0), (0, cols - packed.shape[-1])))


@tiered("cmp_type", range(6), fast=[1, 3], ids=["eq", "ne", "lt", "le", "gt", "ge"])
def test_cmp_sel_every_mode(launcher, rng, cmp_type):
    # Small integers in float, so eq/le/ge see ties; a NaN compares unequal to everything.
    a = rng.integers(-3, 4, size=(R, C)).astype(np.float32)
    b = rng.integers(-3, 4, size=(R, C)).astype(np.float32)
    a[1, 2] = np.nan
    y, ys, mask = poison((R, C)), poison((R, C)), poison((R, 32), np.uint8)

    @pl.jit
    def k(a: pl.Tensor, b: pl.Tensor, y: pl.Out[pl.Tensor], ys: pl.Out[pl.Tensor], mask: pl.Out[pl.Tensor]):
        for i in pl.range(0, R, TR):
            ta, tb = pl.load(a, [i, 0], [TR, C]), pl.load(b, [i, 0], [TR, C])
            tmp = pl.create_tile([1, 32], dtype=pl.UINT8)
            m = pl.tile.cmp(ta, tb, cmp_type=cmp_type)
            pl.store(pl.fillpad(m), [i, 0], mask)  # the padding bytes as zeros
            pl.store(pl.tile.sel(m, ta, tb, tmp), [i, 0], y)
            ms = pl.cmps(ta, 0.0, cmp_type=cmp_type)
            pl.store(pl.tile.sels(ms, ta, tmp, -9.0), [i, 0], ys)

    launcher.run(k.compile(a, b, y, ys, mask), a, b, y, ys, mask)
    bits = CMP_REF[cmp_type](a, b)
    np.testing.assert_array_equal(mask, _packed(bits))
    np.testing.assert_array_equal(y, np.where(bits, a, b))
    np.testing.assert_array_equal(ys, np.where(CMP_REF[cmp_type](a, 0.0), a, np.float32(-9.0)))


@tiered("dt", ["int32", "int8", "uint8"], fast=["int8"])
def test_cmp_integer_tiles(launcher, rng, dt):
    dtype = INT_DTYPES[dt]
    a, b = ints(rng, (R, C), dtype), ints(rng, (R, C), dtype)
    b[::2] = a[::2]
    y = poison((R, C), dtype)

    def fn(x, z):
        return pl.sel(pl.cmp(x, z, cmp_type=5), x, z)

    launcher.run(_binary_kernel(fn).compile(a, b, y), a, b, y)
    np.testing.assert_array_equal(y, np.where(a >= b, a, b))


def test_cmp_sel_broadcast_and_1d(launcher, rng):
    """A [rows, 1] operand broadcasts along each row (in cmp and in sel); 1-D tiles pack their one dimension."""
    a = rng.standard_normal((R, C)).astype(np.float32)
    col = rng.standard_normal((R, 1)).astype(np.float32)
    v, w = rng.standard_normal(70).astype(np.float32), rng.standard_normal(70).astype(np.float32)
    y, y1 = poison((R, C)), poison((70,))

    @pl.jit
    def k(a: pl.Tensor, col: pl.Tensor, v: pl.Tensor, w: pl.Tensor, y: pl.Out[pl.Tensor], y1: pl.Out[pl.Tensor]):
        for i in pl.range(0, R, TR):
            ta, tc = pl.load(a, [i, 0], [TR, C]), pl.load(col, [i, 0], [TR, 1])
            pl.store(pl.sel(pl.cmp(ta, tc, cmp_type=4), ta, tc), [i, 0], y)
        with pl.at(level=pl.Level.CORE_GROUP):
            tv, tw = pl.load(v, [0], [70]), pl.load(w, [0], [70])
            m = pl.cmp(tv, tw, cmp_type=3)
            assert m.shape == (32,)
            pl.store(pl.sel(m, tv, tw), [0], y1)

    launcher.run(k.compile(a, col, v, w, y, y1), a, col, v, w, y, y1)
    np.testing.assert_array_equal(y, np.maximum(a, col))
    np.testing.assert_array_equal(y1, np.minimum(v, w))


@pytest.mark.parametrize("carrier", ["uint8", "int32"])
def test_sels_with_a_loaded_mask(launcher, rng, carrier):
    """A mask carrier loaded from memory: bytes in memory order, bit j % 8 of byte j // 8."""
    dtype = INT_DTYPES[carrier]
    cols = 32 // np.dtype(dtype).itemsize
    raw = rng.integers(0, 256, size=(2, 32), dtype=np.uint8)
    mask = raw.view(dtype).reshape(2, cols).copy()
    src = rng.standard_normal((2, 16)).astype(np.float32)
    out = poison((2, 16))

    @pl.jit
    def k(src: pl.Tensor, mask: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            m = pl.load(mask, [0, 0], [2, cols])
            pl.store(pl.sels(m, pl.load(src, [0, 0], [2, 16]), None, -3.0), [0, 0], out)

    launcher.run(k.compile(src, mask, out), src, mask, out)
    bits = np.unpackbits(raw, axis=1, bitorder="little")[:, :16].astype(bool)
    np.testing.assert_array_equal(out, np.where(bits, src, np.float32(-3.0)))


@pytest.mark.slow
def test_tensor_level_cmp_is_zero_one(launcher, rng):
    """``pl.cmp`` of tensors (PyPTO's tensor level) gives 1/0 in the operand's dtype."""
    a = rng.integers(-2, 3, size=(16, 16)).astype(np.float32)
    b = rng.integers(-2, 3, size=(16, 16)).astype(np.float32)
    outs = [poison((16, 16)) for _ in range(6)]

    @pl.jit
    def k(a: pl.Tensor, b: pl.Tensor, o0: pl.Out[pl.Tensor], o1: pl.Out[pl.Tensor], o2: pl.Out[pl.Tensor],
          o3: pl.Out[pl.Tensor], o4: pl.Out[pl.Tensor], o5: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            for code, o in enumerate((o0, o1, o2, o3, o4, o5)):
                pl.assemble(o, pl.cmp(a, b, cmp_type=code), [0, 0])

    launcher.run(k.compile(a, b, *outs), a, b, *outs)
    for code, o in enumerate(outs):
        np.testing.assert_array_equal(o, CMP_REF[code](a, b).astype(np.float32))


# ---- matmul with bias, gemv -----------------------------------------------------------------------


def test_matmul_bias_and_gemv_family(launcher, rng):
    M, K, N = 16, 32, 24
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    bias = rng.standard_normal((1, N)).astype(np.float32)
    v = rng.standard_normal((1, K)).astype(np.float32)
    o_mb, o_gv, o_ga, o_gb = poison((M, N)), poison((1, N)), poison((1, N)), poison((1, N))

    @pl.jit
    def k(a: pl.Tensor, b: pl.Tensor, bias: pl.Tensor, v: pl.Tensor, o_mb: pl.Out[pl.Tensor],
          o_gv: pl.Out[pl.Tensor], o_ga: pl.Out[pl.Tensor], o_gb: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            ta = pl.move(pl.load(a, [0, 0], [M, K], target_memory=pl.Mem.Mat), target_memory=pl.Mem.Left)
            tb = pl.move(pl.load(b, [0, 0], [K, N], target_memory=pl.Mem.Mat), target_memory=pl.Mem.Right)
            tbias = pl.move(pl.load(bias, [0, 0], [1, N], target_memory=pl.Mem.Mat), target_memory=pl.Mem.Bias)
            tv = pl.move(pl.load(v, [0, 0], [1, K], target_memory=pl.Mem.Mat), target_memory=pl.Mem.Left)
            pl.store(pl.matmul_bias(ta, tb, tbias), [0, 0], o_mb)
            g = pl.gemv(tv, tb)
            pl.store(g, [0, 0], o_gv)
            acc = pl.gemv(tv, tb, acc_phase="partial")
            acc = pl.gemv_acc(acc, tv, tb, acc_phase="final")
            pl.store(acc, [0, 0], o_ga)
            pl.store(pl.gemv_bias(tv, tb, tbias), [0, 0], o_gb)

    launcher.run(k.compile(a, b, bias, v, o_mb, o_gv, o_ga, o_gb), a, b, bias, v, o_mb, o_gv, o_ga, o_gb)
    ta, tb, tbias, tv = (torch.from_numpy(x).double() for x in (a, b, bias, v))
    np.testing.assert_allclose(o_mb, (ta @ tb + tbias).numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(o_gv, (tv @ tb).numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(o_ga, (2 * (tv @ tb)).numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(o_gb, (tv @ tb + tbias).numpy(), rtol=1e-5, atol=1e-5)


# ---- the IR shows the ops, and prints back as a program that traces the same ------------------------


def test_printed_ir_and_python_round_trip(rng):
    a = rng.standard_normal((16, 40)).astype(np.float32)
    i = rng.integers(0, 100, size=(16, 40)).astype(np.int32)

    @pl.jit
    def k(a: pl.Tensor, i: pl.Tensor, out: pl.Out[pl.Tensor], iout: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            ta, ti = pl.load(a, [0, 0], [16, 40]), pl.load(i, [0, 0], [16, 40])
            m = pl.cmps(ta, 0.5, cmp_type=4)
            pl.store(pl.sels(m, ta, None, 0.0), [0, 0], out)
            pl.store(pl.shrs(pl.xor(ti, pl.not_(ti)), 2), [0, 0], iout)

    program = k.lower(a, i, poison((16, 40)), poison((16, 40), np.int32))
    text = str(program)
    assert "cmp.gt" in text and "sel %" in text and "xor" in text and "not_" in text and "shr" in text
    source = program.as_python(form="jit")
    assert "pl.cmp(" in source and "cmp_type=4" in source and "pl.sel(" in source
    namespace: dict = {}
    exec(compile(source, "<as_python>", "exec"), namespace)
    again = namespace["k"].lower(a, i, poison((16, 40)), poison((16, 40), np.int32))
    assert str(again) == text


def test_gemv_records_acc_phase_and_round_trips(rng):
    """acc_phase changes no number on the sim, so it is recorded: printed in the IR and by as_python."""
    K, N = 16, 8
    v, b = rng.standard_normal((1, K)).astype(np.float32), rng.standard_normal((K, N)).astype(np.float32)
    bias = rng.standard_normal((1, N)).astype(np.float32)

    @pl.jit
    def k(v: pl.Tensor, b: pl.Tensor, bias: pl.Tensor, o: pl.Out[pl.Tensor], o2: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            tv = pl.move(pl.load(v, [0, 0], [1, K], target_memory=pl.Mem.Mat), target_memory=pl.Mem.Left)
            tb = pl.move(pl.load(b, [0, 0], [K, N], target_memory=pl.Mem.Mat), target_memory=pl.Mem.Right)
            acc = pl.gemv(tv, tb, acc_phase="partial")
            acc = pl.gemv_acc(acc, tv, tb, acc_phase="final")
            pl.store(acc, [0, 0], o)
            pl.store(pl.add(pl.gemv_bias(tv, tb, pl.load(bias, [0, 0], [1, N])),
                            pl.matmul_bias(tv, tb, pl.load(bias, [0, 0], [1, N]))), [0, 0], o2)

    args = (v, b, bias, poison((1, N)), poison((1, N)))
    program = k.lower(*args)
    text = str(program)
    assert "gemv %" in text and "acc_phase partial" in text and "+= gemv" in text and "acc_phase final" in text
    assert "matmul %" in text and "+ bias %" in text
    namespace: dict = {}
    exec(compile(program.as_python(form="jit"), "<as_python>", "exec"), namespace)
    assert str(namespace["k"].lower(*args)) == text


def test_tensor_level_bitwise(launcher, rng):
    """PyPTO's tensor-level spellings: tensors inside a region are loaded whole."""
    a, b = ints(rng, (16, 16), np.int32), ints(rng, (16, 16), np.int32)
    o1, o2 = poison((16, 16), np.int32), poison((16, 16), np.int32)

    @pl.jit
    def k(a: pl.Tensor, b: pl.Tensor, o1: pl.Out[pl.Tensor], o2: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.assemble(o1, pl.xor(a, b), [0, 0])
            pl.assemble(o2, pl.shrs(pl.ands(a, 0xFFFF), 4), [0, 0])

    launcher.run(k.compile(a, b, o1, o2), a, b, o1, o2)
    np.testing.assert_array_equal(o1, a ^ b)
    np.testing.assert_array_equal(o2, (a & 0xFFFF) >> 4)


# ---- PyPTO's documented program form: an InCore kernel comparing and selecting ---------------------------

M, N = 16, 16


@pl.program
class CompareSelectProgram:
    @pl.function(type=pl.FunctionType.InCore)
    def kernel(self, lhs: pl.Tensor[[M, N], pl.FP32], rhs: pl.Tensor[[M, N], pl.FP32],
               lt: pl.Out[pl.Tensor[[M, N], pl.FP32]], ge0: pl.Out[pl.Tensor[[M, N], pl.FP32]]
               ) -> tuple[pl.Tensor[[M, N], pl.FP32], pl.Tensor[[M, N], pl.FP32]]:
        a: pl.Tile[[M, N], pl.FP32] = pl.load(lhs, [0, 0], [M, N])
        b: pl.Tile[[M, N], pl.FP32] = pl.load(rhs, [0, 0], [M, N])
        one = pl.tile.full([M, N], dtype=pl.FP32, value=1.0)
        zero = pl.tile.full([M, N], dtype=pl.FP32, value=0.0)
        tmp = pl.tile.create([1, 32], dtype=pl.UINT8)
        lt_mask: pl.Tile[[M, 32], pl.UINT8] = pl.tile.cmp(a, b, cmp_type=2)
        lt = pl.store(pl.tile.sel(lt_mask, one, zero, tmp), [0, 0], lt)
        ge_mask = pl.tile.cmps(a, 0.0, cmp_type=5)
        ge0 = pl.store(pl.tile.sels(ge_mask, a, tmp, -1.0), [0, 0], ge0)
        return lt, ge0

    @pl.function(type=pl.FunctionType.Orchestration)
    def orchestrator(self, lhs: pl.Tensor[[M, N], pl.FP32], rhs: pl.Tensor[[M, N], pl.FP32],
                     lt: pl.Out[pl.Tensor[[M, N], pl.FP32]], ge0: pl.Out[pl.Tensor[[M, N], pl.FP32]]
                     ) -> tuple[pl.Tensor[[M, N], pl.FP32], pl.Tensor[[M, N], pl.FP32]]:
        lt, ge0 = self.kernel(lhs, rhs, lt, ge0)
        return lt, ge0


@pytest.mark.slow
def test_program_form_compare_select(launcher, rng):
    lhs = torch.from_numpy(rng.integers(-4, 5, size=(M, N)).astype(np.float32))
    rhs = torch.from_numpy(rng.integers(-3, 4, size=(M, N)).astype(np.float32))
    lt, ge0 = torch.full((M, N), float("nan")), torch.full((M, N), float("nan"))
    launcher.run(ir.compile(CompareSelectProgram), lhs, rhs, lt, ge0)
    torch.testing.assert_close(lt, (lhs < rhs).float())
    torch.testing.assert_close(ge0, torch.where(lhs >= 0, lhs, torch.tensor(-1.0)))


# ---- PyPTO's earlier tensor-level spellings: pl.sum, pl.view ----------------------------------------


def test_sum_and_view(launcher, rng):
    x = rng.standard_normal((R, C)).astype(np.float32)
    rows, cols, flat, win = poison((R, 1)), poison((1, C)), poison((R,)), poison((TR, C))
    full = poison((R, C))

    @pl.jit
    def k(x: pl.Tensor, rows: pl.Out[pl.Tensor], cols: pl.Out[pl.Tensor], flat: pl.Out[pl.Tensor],
          win: pl.Out[pl.Tensor], full: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.assemble(rows, pl.sum(x), [0, 0])
            pl.assemble(cols, pl.sum(x, axis=0), [0, 0])
            pl.assemble(flat, pl.sum(x, axis=1, keep_dim=False), [0])
        for i in pl.range(0, R, TR):
            v = pl.view(x, [TR, C], [i, 0])  # a window of x, read where it lies
            pl.store(pl.mul(pl.load(v, [0, 0], [TR, C]), 2.0), [0, 0], win)
            pl.assemble(pl.view(full, [TR, C], [i, 0]), pl.mul(v, 3.0), [0, 0])  # written through a window

    args = (x, rows, cols, flat, win, full)
    launcher.run(k.compile(*args), *args)
    np.testing.assert_array_equal(full, x * 3)
    xd = torch.from_numpy(x).double()
    np.testing.assert_allclose(rows, xd.sum(-1, keepdim=True).numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(cols, xd.sum(0, keepdim=True).numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(flat, xd.sum(-1).numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(win, x[R - TR:] * 2)  # the last iteration's window


def test_view_outside_its_tensor_is_an_error():
    where = []

    @pl.jit
    def k(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            where.append(next_line())
            pl.assemble(out, pl.view(a, [16, 16], [8, 0]), [0, 0])

    with pytest.raises(PtoCompileError) as ei:
        k.lower(XF, XF)
    assert_at(ei, where[0], "dimension 0 window [8..8] + 16 is outside [0, 16]")


# ---- pl.tensor.view: PyPTO's reinterpreting view (shape=, valid_shape=, layout=) ------------------------


def _strided(x, shape, strides):
    """What PyPTO's view reads: `x`'s memory at element strides `strides` (torch's as_strided, as a numpy array)."""
    return torch.from_numpy(np.ascontiguousarray(x)).flatten().as_strided(shape, strides).numpy()


def test_tensor_view_reads_the_memory_as_its_shape_and_layout(launcher, rng):
    x = rng.standard_normal((8, 12)).astype(np.float32)
    flat, dn, dn_shaped, part = poison((4, 24)), poison((12, 8)), poison((6, 16)), poison((4, 24))
    DN = pl.TensorLayout.DN

    @pl.jit
    def k(x: pl.Tensor[[8, 12], pl.FP32], flat: pl.Out[pl.Tensor[[4, 24], pl.FP32]],
          dn: pl.Out[pl.Tensor[[12, 8], pl.FP32]], dn_shaped: pl.Out[pl.Tensor[[6, 16], pl.FP32]],
          part: pl.Out[pl.Tensor[[4, 24], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.store(pl.tensor.view(x, [4, 24]), [0, 0], flat)                     # shape: row-major
            pl.store(pl.tensor.view(x, layout=DN), [0, 0], dn)                     # layout only: [12, 8]
            pl.store(pl.tensor.view(x, [6, 16], layout=DN), [0, 0], dn_shaped)     # both
            pl.store(pl.tensor.view(x, [4, 24], [2, 24], layout=pl.TensorLayout.ND), [0, 0], part)

    args = (x, flat, dn, dn_shaped, part)
    launcher.run(k.compile(*args), *args)
    np.testing.assert_array_equal(flat, _strided(x, (4, 24), (24, 1)))
    np.testing.assert_array_equal(dn, _strided(x, (12, 8), (1, 12)))  # PyPTO's DN strides: [1, rows]
    np.testing.assert_array_equal(dn, x.T)
    np.testing.assert_array_equal(dn_shaped, _strided(x, (6, 16), (1, 6)))
    np.testing.assert_array_equal(part[:2], x.reshape(4, 24)[:2])  # valid_shape: only the leading box is data
    assert np.isnan(part[2:]).all()


@pytest.mark.slow
def test_tensor_view_is_loaded_as_pypto_loads_it_in_a_jit_body_and_in_a_region(launcher, rng):
    x = rng.standard_normal((8, 12)).astype(np.float32)
    dn, rows = poison((12, 8)), poison((24, 4))

    @pl.jit
    def k(x: pl.Tensor[[8, 12], pl.FP32], dn: pl.Out[pl.Tensor[[12, 8], pl.FP32]],
          rows: pl.Out[pl.Tensor[[24, 4], pl.FP32]]):
        t = pl.tensor.view(x, layout=pl.TensorLayout.DN)  # the jit body: a tensor, loaded by the regions below
        for i in pl.range(0, 12, 4):
            with pl.at(level=pl.Level.CORE_GROUP):
                pl.store(pl.load(t, [i, 0], [4, 8]), [i, 0], dn)
                v = pl.tensor.view(x, [24, 4])  # in a region: pl.load reads a window of it
                pl.store(pl.load(v, [2 * i, 0], [8, 4]), [2 * i, 0], rows)

    args = (x, dn, rows)
    c = k.compile(*args)
    assert [t.name for t in c.task_graph.tasks][0] == "view_x"  # the jit body's view: a task of its own
    launcher.run(c, *args)
    np.testing.assert_array_equal(dn, x.T)
    np.testing.assert_array_equal(rows, x.reshape(24, 4))


def test_a_store_into_a_tensor_view_is_refused():
    from pypto_async.errors import PtoNotSupported

    @pl.jit
    def in_region(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.store(pl.load(a, [0, 0], [16, 16]), [0, 0], pl.tensor.view(out, [16, 16]))

    @pl.jit
    def outside(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        v = pl.tensor.view(out, layout=pl.TensorLayout.DN)
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.store(pl.load(a, [0, 0], [16, 16]), [0, 0], v)

    @pl.jit
    def valid_outside(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        v = pl.tensor.view(a, [16, 16], [8, 16])
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.store(pl.load(v, [0, 0], [16, 16]), [0, 0], out)

    with pytest.raises(PtoNotSupported, match="pl.store into a pl.tensor.view of 'out' in a region"):
        in_region.lower(XF, XF)
    with pytest.raises(PtoNotSupported, match="is out, but|pl.store into"):
        outside.lower(XF, XF)
    with pytest.raises(PtoCompileError, match="valid_shape= outside a region is not supported"):
        valid_outside.lower(XF, XF)


@pl.program
class _ViewsInTheOrchestration:
    @pl.function(type=pl.FunctionType.InCore)
    def add(self, a: pl.Tensor[[12, 8], pl.FP32], b: pl.Tensor[[12, 8], pl.FP32],
            c: pl.Out[pl.Tensor[[12, 8], pl.FP32]]) -> pl.Tensor[[12, 8], pl.FP32]:
        return pl.store(pl.add(pl.load(a, [0, 0], [12, 8]), pl.load(b, [0, 0], [12, 8])), [0, 0], c)

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, flat: pl.Tensor[[96], pl.FP32], m: pl.Tensor[[8, 12], pl.FP32],
             c: pl.Out[pl.Tensor[[12, 8], pl.FP32]]):
        a = pl.tensor.view(flat, [12, 8])
        b = pl.tensor.view(m, layout=pl.TensorLayout.DN)
        c = self.add(a, b, c)
        return c


def test_tensor_view_in_the_orchestration_feeds_a_kernel(launcher, rng):
    c = ir.compile(_ViewsInTheOrchestration)
    assert [t.name for t in c.task_graph.tasks] == ["view_flat", "view_m", "add"]
    flat, m, out = (rng.standard_normal((96,)).astype(np.float32), rng.standard_normal((8, 12)).astype(np.float32),
                    poison((12, 8)))
    launcher.run(c, flat, m, out)
    np.testing.assert_array_equal(out, flat.reshape(12, 8) + m.T)


@pytest.mark.parametrize(("call", "message"), [
    (lambda a: pl.tensor.view(a), "needs shape= or layout="),
    (lambda a: pl.tensor.view(a, valid_shape=[8, 16], layout=pl.TensorLayout.ND), "valid_shape= needs shape="),
    (lambda a: pl.tensor.view(a, layout=pl.TensorLayout.NZ), "layout must be ND or DN, not NZ"),
    (lambda a: pl.tensor.view(a, layout="DN"), "layout must be a pl.TensorLayout"),
    (lambda a: pl.tensor.view(a, [8, 16]), "shape [8, 16] holds 128 elements, the tensor [16, 16] 256"),
    (lambda a: pl.tensor.view(a, [256], layout=pl.TensorLayout.DN), "needs a shape of rank 2 or more"),
    (lambda a: pl.tensor.view(a, [0, 16]), "shape must be positive ints"),
    (lambda a: pl.tensor.view(pl.load(a, [0, 0], [16, 16]), [256]), "expected a tensor"),
])
def test_tensor_view_errors_name_the_call(call, message):
    @pl.jit
    def k(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.store(call(a), [0, 0], out)

    with pytest.raises(PtoCompileError) as ei:
        k.lower(XF, XF)
    assert_at(ei, call.__code__.co_firstlineno, "pl.tensor.view", message)  # the line of the call


# ---- PyPTO's coverage-smoke style: one kernel using every op ------------------------------------------


@pytest.mark.slow
def test_coverage_smoke_kernel(launcher, rng):
    M, N, K = 16, 32, 16
    x = rng.standard_normal((M, N)).astype(np.float32)
    z = rng.standard_normal((M, N)).astype(np.float32)
    xi = rng.integers(-1000, 1000, size=(M, N)).astype(np.int32)
    zi = rng.integers(1, 30, size=(M, N)).astype(np.int32)
    w = rng.standard_normal((N, K)).astype(np.float32)
    bias = rng.standard_normal((1, K)).astype(np.float32)
    out_f = poison((M, N))
    out_i = poison((M, N), np.int32)
    out_mm = poison((M, K))
    out_gv = poison((1, K))

    @pl.jit
    def smoke(x: pl.Tensor, z: pl.Tensor, xi: pl.Tensor, zi: pl.Tensor, w: pl.Tensor, bias: pl.Tensor,
              out_f: pl.Out[pl.Tensor], out_i: pl.Out[pl.Tensor], out_mm: pl.Out[pl.Tensor],
              out_gv: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            tx, tz = pl.load(x, [0, 0], [M, N]), pl.load(z, [0, 0], [M, N])
            tmp = pl.create_tile([M, N], dtype=pl.FP32)
            f = pl.addc(tx, tz, pl.expands(tx, 0.25))
            f = pl.subc(f, tz, tx)  # tx + tz + 0.25 - tz - tx
            f = pl.addsc(f, 1.0, tx)
            f = pl.subsc(f, 0.5, tz)
            f = pl.prelu(f, pl.expands(tx, 0.1), tmp)
            f = pl.rems(f, 0.75, tmp)
            mask = pl.cmp(f, tz, cmp_type=2)
            f = pl.sel(mask, f, tz, pl.create_tile([1, 32], dtype=pl.UINT8))
            f = pl.sels(pl.cmps(tx, 0.0, cmp_type=4), f, None, -1.0)
            pl.store(f, [0, 0], out_f)
            ti, tzi = pl.load(xi, [0, 0], [M, N]), pl.load(zi, [0, 0], [M, N])
            itmp = pl.create_tile([M, N], dtype=pl.INT32)
            g = pl.and_(ti, pl.ors(tzi, 0x30))
            g = pl.or_(g, pl.ands(ti, 0x0F))
            g = pl.xor(g, pl.xors(ti, 0x55, itmp), itmp)
            g = pl.shl(g, pl.rems(tzi, 5, itmp))
            g = pl.shr(g, pl.shrs(tzi, 3))
            g = pl.shls(pl.not_(g), 1)
            pl.store(g, [0, 0], out_i)
            tw = pl.move(pl.load(w, [0, 0], [N, K], target_memory=pl.Mem.Mat), target_memory=pl.Mem.Right)
            tb = pl.move(pl.load(bias, [0, 0], [1, K], target_memory=pl.Mem.Mat), target_memory=pl.Mem.Bias)
            tl = pl.move(pl.load(x, [0, 0], [M, N], target_memory=pl.Mem.Mat), target_memory=pl.Mem.Left)
            pl.store(pl.matmul_bias(tl, tw, tb), [0, 0], out_mm)
            row = pl.move(pl.load(x, [0, 0], [1, N], target_memory=pl.Mem.Mat), target_memory=pl.Mem.Left)
            acc = pl.gemv(row, tw)
            acc = pl.gemv_acc(acc, row, tw)
            acc = pl.add(acc, pl.gemv_bias(row, tw, tb))
            pl.store(acc, [0, 0], out_gv)

    args = (x, z, xi, zi, w, bias, out_f, out_i, out_mm, out_gv)
    launcher.run(smoke.compile(*args), *args)

    tx, tz = torch.from_numpy(x), torch.from_numpy(z)
    f = tx + tz + 0.25
    f = f - tz - tx
    f = f + 1.0 + tx
    f = f - 0.5 - tz
    f = torch.where(f > 0, f, f * torch.full_like(f, 0.1))
    f = torch.remainder(f, 0.75)
    f = torch.where(f < tz, f, tz)
    f = torch.where(tx > 0, f, torch.full_like(f, -1.0))
    np.testing.assert_allclose(out_f, f.numpy(), rtol=1e-5, atol=1e-5)

    ti, tzi = torch.from_numpy(xi).long(), torch.from_numpy(zi).long()
    g = ti & (tzi | 0x30)
    g = g | (ti & 0x0F)
    g = g ^ (ti ^ 0x55)
    g = ((g << torch.remainder(tzi, 5)) & 0xFFFFFFFF)
    g = torch.where(g >= 2**31, g - 2**32, g)  # back to int32
    g = g >> (tzi >> 3)
    g = ((~g) << 1) & 0xFFFFFFFF
    g = torch.where(g >= 2**31, g - 2**32, g)
    np.testing.assert_array_equal(out_i, g.numpy().astype(np.int32))

    tw, tbias = torch.from_numpy(w).double(), torch.from_numpy(bias).double()
    np.testing.assert_allclose(out_mm, (tx.double() @ tw + tbias).numpy(), rtol=1e-5, atol=1e-5)
    row = tx[:1].double()
    np.testing.assert_allclose(out_gv, (3 * (row @ tw) + tbias).numpy(), rtol=1e-5, atol=1e-5)


# ---- compile errors, at the user's line ----------------------------------------------------------------

XF = np.ones((16, 16), np.float32)
XI = np.ones((16, 16), np.int32)


def _error_case(body, *arrays):
    @pl.jit
    def k(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            body(pl.load(a, [0, 0], [16, 16]), out)

    with pytest.raises(PtoCompileError) as ei:
        k.lower(*arrays)
    return ei


def test_bitwise_on_float_tile_is_an_error():
    where = []

    def body(t, out):
        where.append(next_line())
        pl.store(pl.and_(t, t), [0, 0], out)

    assert_at(_error_case(body, XF, XF), where[0], "pl.and_ needs integer tiles", "FP32")


def test_not_on_float_tile_is_an_error():
    where = []

    def body(t, out):
        where.append(next_line())
        pl.store(pl.not_(t), [0, 0], out)

    assert_at(_error_case(body, XF, XF), where[0], "pl.not_ needs an integer tile")


def test_negative_constant_shift_is_an_error():
    where = []

    def body(t, out):
        where.append(next_line())
        pl.store(pl.shls(t, -1), [0, 0], out)

    assert_at(_error_case(body, XI, XI), where[0], "shift amount must be zero or positive")


def test_float_scalar_for_bitwise_is_an_error():
    where = []

    def body(t, out):
        where.append(next_line())
        pl.store(pl.ors(t, 1.5), [0, 0], out)

    assert_at(_error_case(body, XI, XI), where[0], "pl.ors: the scalar must be an integer")


def test_prelu_on_int_tile_and_slope_shape_are_errors():
    where = []

    def body(t, out):
        where.append(next_line())
        pl.store(pl.prelu(t, t), [0, 0], out)

    assert_at(_error_case(body, XI, XI), where[0], "pl.prelu needs float tiles")

    def body2(t, out):
        where.append(next_line())
        pl.store(pl.prelu(t, pl.slice(t, [8, 16], [0, 0])), [0, 0], out)

    assert_at(_error_case(body2, XF, XF), where[1], "pl.prelu: slope [8, 16] must have the tile's shape")


def test_cmp_type_out_of_range_is_an_error():
    where = []

    def body(t, out):
        where.append(next_line())
        pl.store(pl.sel(pl.cmp(t, t, cmp_type=6), t, t), [0, 0], out)

    assert_at(_error_case(body, XF, XF), where[0], "cmp_type must be 0-5")


def test_sel_mask_too_small_or_float_is_an_error():
    where = []

    def body(t, out):
        small = pl.create_tile([16, 1], dtype=pl.UINT8)
        where.append(next_line())
        pl.store(pl.sel(small, t, t), [0, 0], out)

    assert_at(_error_case(body, XF, XF), where[0], "pl.sel: mask", "ceil(16 / 8) = 2 bytes")

    def body2(t, out):
        where.append(next_line())
        pl.store(pl.sel(t, t, t), [0, 0], out)

    assert_at(_error_case(body2, XF, XF), where[1], "the mask must be an integer tile")


def test_cmp_dtype_mismatch_is_an_error():
    where = []

    def body(t, out):
        where.append(next_line())
        pl.store(pl.cmp(t, pl.cast(t, pl.INT32), cmp_type=0), [0, 0], out)

    assert_at(_error_case(body, XF, np.zeros((16, 32), np.uint8)), where[0], "dtype mismatch in pl.cmp")


def test_gemv_and_matmul_bias_shape_errors():
    where = []

    def body(t, out):
        left = pl.move(pl.move(t, target_memory=pl.Mem.Mat), target_memory=pl.Mem.Left)
        right = pl.move(pl.move(t, target_memory=pl.Mem.Mat), target_memory=pl.Mem.Right)
        where.append(next_line())
        pl.store(pl.gemv(left, right), [0, 0], out)

    assert_at(_error_case(body, XF, XF), where[0], "pl.gemv: lhs must be a [1, K] row vector", "[16, 16]")

    def body2(t, out):
        left = pl.move(pl.move(t, target_memory=pl.Mem.Mat), target_memory=pl.Mem.Left)
        right = pl.move(pl.move(t, target_memory=pl.Mem.Mat), target_memory=pl.Mem.Right)
        where.append(next_line())
        pl.store(pl.matmul_bias(left, right, pl.slice(t, [2, 16], [0, 0])), [0, 0], out)

    assert_at(_error_case(body2, XF, XF), where[1], "pl.matmul_bias: the bias must be FP32[1, 16]")

    def body3(t, out):
        left = pl.move(pl.move(t, target_memory=pl.Mem.Mat), target_memory=pl.Mem.Left)
        where.append(next_line())
        pl.store(pl.gemv(left, left, acc_phase="early"), [0, 0], out)

    assert_at(_error_case(body3, XF, XF), where[2], "acc_phase must be one of unspecified, partial, final")
