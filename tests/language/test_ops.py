"""Every tile op against numpy/torch on random data, run on the sim device.

Outputs are poisoned (NaN, or 0xAB bytes) before each launch, so a passing
test proves the kernel wrote every element.  Kernels loop over row tiles with
``pl.range`` so each op also runs with symbolic offsets.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import pypto_async.language as pl
from pypto_async.errors import PtoCompileError
from helpers.ir_fixtures import poison
from helpers.tiers import tiered, tiered_product

R, C, TR = 64, 48, 16


def rel_err(got, want) -> float:
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    return float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30))


def _unary_kernel(fn):
    @pl.jit
    def k(x: pl.Tensor, y: pl.Out[pl.Tensor]):
        for i in pl.range(0, R, TR):
            pl.store(fn(pl.load(x, [i, 0], [TR, C])), [i, 0], y)

    return k


UNARY = {
    "neg": (pl.neg, np.negative, False),
    "abs": (pl.abs, np.abs, False),
    "exp": (pl.exp, np.exp, False),
    "log": (pl.log, np.log, True),
    "sqrt": (pl.sqrt, np.sqrt, True),
    "rsqrt": (pl.rsqrt, lambda x: 1.0 / np.sqrt(x), True),
    "relu": (pl.relu, lambda x: np.maximum(x, 0), False),
}


@tiered("op", sorted(UNARY), fast=["exp", "rsqrt"])
def test_unary(launcher, rng, op):
    fn, ref, positive = UNARY[op]
    x = rng.standard_normal((R, C)).astype(np.float32)
    if positive:
        x = np.abs(x) + 0.05
    y = poison((R, C))
    launcher.run(_unary_kernel(fn).compile(x, y), x, y)
    assert rel_err(y, ref(x.astype(np.float64))) < 1e-5


BINARY = {
    "add": (pl.add, np.add),
    "sub": (pl.sub, np.subtract),
    "mul": (pl.mul, np.multiply),
    "div": (pl.div, np.divide),
    "maximum": (pl.maximum, np.maximum),
    "minimum": (pl.minimum, np.minimum),
}

# (a window shape, b window shape): same shape, a column tile and a row tile
SHAPES = {"same": ((TR, C), (TR, C)), "row": ((TR, C), (TR, 1)), "col": ((TR, C), (1, C)), "col_lhs": ((1, C), (TR, C)),
          "outer": ((TR, 1), (1, C))}


def _binary_kernel(fn, sa, sb):
    @pl.jit
    def k(a: pl.Tensor, b: pl.Tensor, y: pl.Out[pl.Tensor]):
        for i in pl.range(0, R, TR):
            ta = pl.load(a, [i if sa[0] > 1 else 0, 0], list(sa))
            tb = pl.load(b, [i if sb[0] > 1 else 0, 0], list(sb))
            pl.store(fn(ta, tb), [i, 0], y)

    return k


def _full(shape_window):
    return (R if shape_window[0] > 1 else 1, shape_window[1])


@tiered_product("op,layout", sorted(BINARY), sorted(SHAPES))
def test_binary_tiles_and_broadcast(launcher, rng, op, layout):
    fn, ref = BINARY[op]
    sa, sb = SHAPES[layout]
    a = rng.standard_normal(_full(sa)).astype(np.float32)
    b = rng.standard_normal(_full(sb)).astype(np.float32)
    if op == "div":
        b = np.sign(b) * (np.abs(b) + 0.5)
    y = poison((R, C))
    launcher.run(_binary_kernel(fn, sa, sb).compile(a, b, y), a, b, y)
    want = ref(a.astype(np.float64), b.astype(np.float64))  # numpy broadcasts the same way
    assert rel_err(y, want) < 1e-5


@tiered("op", sorted(BINARY), fast=["sub", "div"])
def test_binary_scalar_operands(launcher, rng, op):
    """A Python number on either side, and a pl.Scalar parameter."""
    fn, ref = BINARY[op]

    @pl.jit
    def k(x: pl.Tensor, s: pl.Scalar[pl.FP32], y1: pl.Out[pl.Tensor], y2: pl.Out[pl.Tensor], y3: pl.Out[pl.Tensor]):
        for i in pl.range(0, R, TR):
            t = pl.load(x, [i, 0], [TR, C])
            pl.store(fn(t, 1.5), [i, 0], y1)
            pl.store(fn(-2.25, t), [i, 0], y2)
            pl.store(fn(t, s), [i, 0], y3)

    x = rng.standard_normal((R, C)).astype(np.float32)
    if op == "div":
        x = np.sign(x) * (np.abs(x) + 0.5)
    ys = [poison((R, C)) for _ in range(3)]
    s = 0.625
    launcher.run(k.compile(x, s, *ys), x, s, *ys)
    xd = x.astype(np.float64)
    assert rel_err(ys[0], ref(xd, 1.5)) < 1e-5
    assert rel_err(ys[1], ref(-2.25, xd)) < 1e-5
    assert rel_err(ys[2], ref(xd, s)) < 1e-5


def test_operators_on_tiles(launcher, rng):
    @pl.jit
    def k(a: pl.Tensor, b: pl.Tensor, y: pl.Out[pl.Tensor]):
        ta = pl.load(a, [0, 0], [R, C])
        tb = pl.load(b, [0, 0], [R, C])
        pl.store(abs(-(ta + tb) * 3.0 - tb / 2.0), [0, 0], y)

    a = rng.standard_normal((R, C)).astype(np.float32)
    b = rng.standard_normal((R, C)).astype(np.float32)
    y = poison((R, C))
    launcher.run(k.compile(a, b, y), a, b, y)
    ad, bd = a.astype(np.float64), b.astype(np.float64)
    assert rel_err(y, np.abs(-(ad + bd) * 3.0 - bd / 2.0)) < 1e-5


REDUCE = {
    "row_sum": (pl.row_sum, lambda x: x.sum(axis=1, keepdims=True)),
    "row_max": (pl.row_max, lambda x: x.max(axis=1, keepdims=True)),
    "row_min": (pl.row_min, lambda x: x.min(axis=1, keepdims=True)),
    "col_sum": (pl.col_sum, lambda x: x.sum(axis=0, keepdims=True)),
    "col_max": (pl.col_max, lambda x: x.max(axis=0, keepdims=True)),
    "col_min": (pl.col_min, lambda x: x.min(axis=0, keepdims=True)),
}


@tiered("op", sorted(REDUCE), fast=["row_sum", "col_max"])
def test_reductions(launcher, rng, op):
    fn, ref = REDUCE[op]
    out_shape = (R, 1) if op.startswith("row") else (1, C)

    @pl.jit
    def k(x: pl.Tensor, y: pl.Out[pl.Tensor]):
        t = pl.load(x, [0, 0], [R, C])
        pl.store(fn(t * 1.0), [0, 0], y)  # reduce a computed tile (a buffer)

    @pl.jit
    def k_view(x: pl.Tensor, y: pl.Out[pl.Tensor]):
        pl.store(fn(pl.load(x, [0, 0], [R, C])), [0, 0], y)  # reduce a load read in place

    x = rng.standard_normal((R, C)).astype(np.float32) + 0.25
    want = ref(x.astype(np.float64))
    for kern in (k, k_view):
        y = poison(out_shape)
        launcher.run(kern.compile(x, y), x, y)
        assert np.max(np.abs(y - want)) <= 1e-5 * np.max(np.abs(x)) * (C if op.endswith("sum") else 1)


def test_row_sum_broadcast_back(launcher, rng):
    """x / row_sum(x): a [R, 1] result broadcast against its own [R, C] input."""

    @pl.jit
    def k(x: pl.Tensor, y: pl.Out[pl.Tensor]):
        t = pl.load(x, [0, 0], [R, C])
        pl.store(t / pl.row_sum(t) + pl.col_max(t), [0, 0], y)

    x = rng.uniform(0.5, 1.5, (R, C)).astype(np.float32)
    y = poison((R, C))
    launcher.run(k.compile(x, y), x, y)
    xd = x.astype(np.float64)
    assert rel_err(y, xd / xd.sum(1, keepdims=True) + xd.max(0, keepdims=True)) < 1e-5


@pytest.mark.parametrize("accumulate", [False, True])
def test_matmul(launcher, rng, accumulate):
    M, K, N = 40, 72, 56  # not multiples of the micro-kernel: edges included

    @pl.jit
    def k(a: pl.Tensor, b: pl.Tensor, c0: pl.Tensor, c: pl.Out[pl.Tensor]):
        ta = pl.load(a, [0, 0], [M, K]) * 1.0  # a buffer operand
        tb = pl.load(b, [0, 0], [K, N])  # a view operand
        if accumulate:
            acc = pl.load(c0, [0, 0], [M, N]) + 0.0
            out = pl.matmul_acc(acc, ta, tb)
        else:
            out = ta @ tb
        pl.store(out, [0, 0], c)

    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    c0 = rng.standard_normal((M, N)).astype(np.float32)
    c = poison((M, N))
    launcher.run(k.compile(a, b, c0, c), a, b, c0, c)
    want = a.astype(np.float64) @ b.astype(np.float64) + (c0 if accumulate else 0)
    assert rel_err(c, want) < 1e-5


@pytest.mark.parametrize("form", ["tmp", "high_precision"])
def test_rsqrt_high_precision_forms(launcher, rng, form):
    """PyPTO's pl.tile.rsqrt(x, tmp=scratch) and pl.rsqrt(x, high_precision=True): the same 1/sqrt(x)."""

    @pl.jit
    def k(x: pl.Tensor, y: pl.Out[pl.Tensor]):
        for i in pl.range(0, R, TR):
            t = pl.load(x, [i, 0], [TR, C])
            if form == "tmp":
                r = pl.tile.rsqrt(t, tmp=pl.tile.create([TR, C], pl.FP32))
            else:
                r = pl.rsqrt(t, high_precision=True)
            pl.store(r, [i, 0], y)

    x = rng.uniform(0.1, 4.0, (R, C)).astype(np.float32)
    y = poison((R, C))
    launcher.run(k.compile(x, y), x, y)
    assert rel_err(y, 1 / np.sqrt(x.astype(np.float64))) < 1e-6


def test_rsqrt_tmp_must_match():
    @pl.jit
    def k(x: pl.Tensor, y: pl.Out[pl.Tensor]):
        t = pl.load(x, [0, 0], [TR, C])
        pl.store(pl.tile.rsqrt(t, tmp=pl.tile.create([TR, 16], pl.FP32)), [0, 0], y)

    x = np.ones((TR, C), np.float32)
    with pytest.raises(PtoCompileError, match="scratch tile must match"):
        k.compile(x, x)


@pytest.mark.parametrize("form", ["runtime", "first", "never"])
def test_matmul_acc_init_cond(launcher, rng, form):
    """PyPTO's split-K ``init_cond``: where it holds the accumulator is overwritten, its old value
    (here a NaN-poisoned tensor's) never read; ``k0 == 0`` is a runtime index condition, a bool picks at trace."""
    M, K, N, KT = 16, 96, 24, 32

    @pl.jit
    def k(a: pl.Tensor, b: pl.Tensor, c0: pl.Tensor, c: pl.Out[pl.Tensor]):
        acc = pl.load(c0, [0, 0], [M, N]) + 0.0
        for k0 in pl.range(0, K, KT):
            ta = pl.load(a, [0, k0], [M, KT])
            tb = pl.load(b, [k0, 0], [KT, N])
            cond = (k0 == 0) if form == "runtime" else form == "first"
            acc = pl.matmul_acc(acc, ta, tb, init_cond=cond)
        pl.store(acc, [0, 0], c)

    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    c0 = rng.standard_normal((M, N)).astype(np.float32)
    if form != "never":
        c0[3, 5] = np.nan  # the overwritten start must not leak
    c = poison((M, N))
    launcher.run(k.compile(a, b, c0, c), a, b, c0, c)
    ad, bd = a.astype(np.float64), b.astype(np.float64)
    if form == "runtime":
        want = ad @ bd
    elif form == "first":  # every step overwrites: the last K block's product
        want = ad[:, K - KT:] @ bd[K - KT:]
    else:
        want = c0 + ad @ bd
    assert rel_err(c, want) < 1e-5


def test_matmul_acc_init_cond_bad():
    @pl.jit
    def k(a: pl.Tensor, c: pl.Out[pl.Tensor]):
        t = pl.load(a, [0, 0], [16, 16])
        pl.store(pl.matmul_acc(t @ t, t, t, init_cond="yes"), [0, 0], c)

    x = np.zeros((16, 16), np.float32)
    with pytest.raises(PtoCompileError, match="init_cond must be a bool"):
        k.compile(x, x)


def test_matmul_int8_accumulates_in_int32(launcher, rng):
    """INT8 x INT8 matmul (PyPTO's integer cube path): an INT32 product, exact, and matmul_acc adds into it."""
    M, K, N = 24, 80, 40

    @pl.jit
    def k(a: pl.Tensor, b: pl.Tensor, c: pl.Out[pl.Tensor], d: pl.Out[pl.Tensor]):
        ta = pl.load(a, [0, 0], [M, K])
        tb = pl.load(b, [0, 0], [K, N])
        pl.store(pl.matmul(ta, tb), [0, 0], c)
        acc = pl.matmul(ta, tb)
        acc = pl.matmul_acc(acc, ta, tb)
        pl.store(acc, [0, 0], d)

    a = rng.integers(-128, 128, (M, K), dtype=np.int8)
    b = rng.integers(-128, 128, (K, N), dtype=np.int8)
    c, d = poison((M, N), np.int32), poison((M, N), np.int32)
    launcher.run(k.compile(a, b, c, d), a, b, c, d)
    want = a.astype(np.int64) @ b.astype(np.int64)
    np.testing.assert_array_equal(c, want)
    np.testing.assert_array_equal(d, 2 * want)


def test_matmul_int16_is_refused():
    @pl.jit
    def k(a: pl.Tensor, c: pl.Out[pl.Tensor]):
        t = pl.load(a, [0, 0], [16, 16])
        pl.store(pl.matmul(t, t), [0, 0], c)

    x = np.zeros((16, 16), np.int16)
    with pytest.raises(PtoCompileError, match="unsupported dtype INT16 for matmul"):
        k.compile(x, np.zeros((16, 16), np.int32))


@pytest.mark.slow
def test_matmul_fp64_and_bf16(launcher, rng):
    M, K, N = 16, 32, 24

    @pl.jit
    def k(a: pl.Tensor, b: pl.Tensor, c: pl.Out[pl.Tensor]):
        pl.store(pl.matmul(pl.load(a, [0, 0], [M, K]), pl.load(b, [0, 0], [K, N])), [0, 0], c)

    a = rng.standard_normal((M, K))
    b = rng.standard_normal((K, N))
    c = poison((M, N), np.float64)
    launcher.run(k.compile(a, b, c), a, b, c)
    assert rel_err(c, a @ b) < 1e-12

    ta = torch.from_numpy(a).to(torch.bfloat16)
    tb = torch.from_numpy(b).to(torch.bfloat16)
    tc = torch.full((M, N), float("nan"), dtype=torch.float32)
    launcher.run(k.compile(ta, tb, tc), ta, tb, tc)
    assert rel_err(tc.numpy(), ta.double().numpy() @ tb.double().numpy()) < 1e-5


def test_full_and_zeros(launcher):
    @pl.jit
    def k(v: pl.Scalar[pl.FP32], y1: pl.Out[pl.Tensor], y2: pl.Out[pl.Tensor], y3: pl.Out[pl.Tensor]):
        pl.store(pl.full([R, C], v, pl.FP32), [0, 0], y1)
        pl.store(pl.zeros([R, C], pl.INT32), [0, 0], y2)
        pl.store(pl.full([R, C], -7, pl.INT32), [0, 0], y3)

    y1, y2, y3 = poison((R, C)), poison((R, C), np.int32), poison((R, C), np.int32)
    launcher.run(k.compile(3.5, y1, y2, y3), 3.5, y1, y2, y3)
    assert (y1 == 3.5).all() and (y2 == 0).all() and (y3 == -7).all()


CASTS = [
    ("FP32", "INT32", lambda x: x.astype(np.int32)),
    ("INT32", "FP32", lambda x: x.astype(np.float32)),
    ("FP32", "FP64", lambda x: x.astype(np.float64)),
    ("FP64", "FP32", lambda x: x.astype(np.float32)),
    ("FP32", "FP16", lambda x: x.astype(np.float16)),
    ("FP16", "FP32", lambda x: x.astype(np.float32)),
    ("INT32", "INT8", lambda x: x.astype(np.int8)),
    ("FP32", "BOOL", lambda x: x.astype(bool)),
    ("UINT8", "INT64", lambda x: x.astype(np.int64)),
]


@tiered("src,dst,ref", CASTS, fast=lambda s, d, _: (s, d) in {("FP32", "INT32"), ("FP32", "FP16"), ("UINT8", "INT64")},
        ids=[f"{s}-{d}" for s, d, _ in CASTS])
def test_cast(launcher, rng, src, dst, ref):
    dsrc, ddst = getattr(pl, src), getattr(pl, dst)

    @pl.jit
    def k(x: pl.Tensor, y: pl.Out[pl.Tensor]):
        pl.store(pl.cast(pl.load(x, [0, 0], [R, C]), ddst, mode="none"), [0, 0], y)  # C's (numpy's) conversion

    raw = rng.standard_normal((R, C)) * 100
    if dsrc.is_float:
        raw[0, :4] = 0.0  # exact zeros for the BOOL cast
        x = raw.astype(dsrc.np_storage)
    else:
        x = np.clip(raw, 0 if src == "UINT8" else -1e9, 255 if src == "UINT8" else 1e9).astype(dsrc.np_storage)
    y = poison((R, C), ddst.np_storage)
    launcher.run(k.compile(x, y), x, y)
    np.testing.assert_array_equal(y, ref(x))


def test_cast_to_bf16_rint_rounds_like_torch(launcher, rng):
    @pl.jit
    def k(x: pl.Tensor, y: pl.Out[pl.Tensor]):
        pl.store(pl.cast(pl.load(x, [0, 0], [R, C]), pl.BF16, mode="rint"), [0, 0], y)

    x = torch.from_numpy(rng.standard_normal((R, C)).astype(np.float32))
    y = torch.full((R, C), float("nan"), dtype=torch.bfloat16)
    launcher.run(k.compile(x, y), x, y)
    assert torch.equal(y.view(torch.uint16), x.to(torch.bfloat16).view(torch.uint16))


def _truncdiv(a, b):
    """Integer a / b rounded toward zero, exactly (numpy's // floors; b has no zeros here)."""
    wide = np.uint64 if a.dtype.kind == "u" else np.int64
    a64, b64 = a.astype(wide), b.astype(wide)
    with np.errstate(over="ignore"):
        q = a64 // b64
        if wide is np.int64:
            q = q + ((a64 % b64 != 0) & ((a64 < 0) != (b64 < 0)))
    return q.astype(a.dtype)


INT_REFS = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": lambda a, b: _truncdiv(a, b),  # toward zero, as PyPTO's
    "maximum": np.maximum,
    "minimum": np.minimum,
}


@tiered("dtype", ["INT8", "INT32", "INT64", "UINT8"], fast=["INT8", "INT64"])
def test_integer_binary_ops_wrap_and_truncate(launcher, rng, dtype):
    d = getattr(pl, dtype)

    @pl.jit
    def k(a: pl.Tensor, b: pl.Tensor, y0: pl.Out[pl.Tensor], y1: pl.Out[pl.Tensor], y2: pl.Out[pl.Tensor],
          y3: pl.Out[pl.Tensor], y4: pl.Out[pl.Tensor], y5: pl.Out[pl.Tensor]):
        ta = pl.load(a, [0, 0], [R, C])
        tb = pl.load(b, [0, 0], [R, C])
        for name, y in zip(sorted(INT_REFS), (y0, y1, y2, y3, y4, y5)):  # unrolled at trace time
            pl.store(getattr(pl, name)(ta, tb), [0, 0], y)

    info = np.iinfo(d.np_storage)
    a = rng.integers(info.min, info.max, (R, C), endpoint=True, dtype=d.np_storage)
    b = rng.integers(max(info.min, -100), min(info.max, 100), (R, C), endpoint=True, dtype=d.np_storage)
    b[b == 0] = 3
    ys = [poison((R, C), d.np_storage) for _ in range(6)]
    launcher.run(k.compile(a, b, *ys), a, b, *ys)
    with np.errstate(over="ignore"):
        for name, y in zip(sorted(INT_REFS), ys):
            np.testing.assert_array_equal(y, INT_REFS[name](a, b), err_msg=name)
