"""A second pass of programs written from PyPTO's reference pages, run on the sim.

Each is what a user reading the language reference, the ops pages and the
running page would write (the import and the platform changed only), in
combinations the first pass (test_user_guide_programs.py) does not cover:
FP16 / BF16 / INT8 / INT16 / INT32 / UINT8 data, 1-row and 1x1 tiles,
non-multiple tails, nested loops with carries, conditions on scalars,
several kernels per program, PyPTO's positional and keyword spellings, and
runtime.run / compile / benchmark.  Random data against a torch reference,
outputs poisoned first.

The whole module is under ``from __future__ import annotations``: every
kernel's annotations are strings, so those naming a test's local
``pl.dynamic`` dimension or dtype are resolved in the scope the kernel is
defined in, as PyPTO's decorators do.
"""

from __future__ import annotations

import pytest
import torch

import pypto_async.language as pl
import pypto_async.runtime as rt
from pypto_async import ir
from pypto_async.errors import PtoCompileError, PtoNotSupported
from pypto_async.runtime import ChipWorker, RunConfig

# The slow tier (CI runs both): whole programs from the guide's pages, a kernel build or more each,
# and the fast tier's budget is mostly the C compiler's.
pytestmark = pytest.mark.slow

CFG = RunConfig(platform="sim")


def _nan(*shape, dtype=torch.float32):
    return torch.full(shape, float("nan"), dtype=dtype)


# --- language/00-types.md: string annotations, dtypes, storage-only dtypes ---------------------------


def test_a_local_dynamic_dimension_in_string_annotations():
    N = pl.dynamic("N")
    ROWS = 32

    @pl.jit.incore
    def rows(x: pl.Tensor[[N, 64], pl.FP32], out: pl.Out[pl.Tensor[[N, 64], pl.FP32]]):
        out = pl.store(pl.mul(pl.load(x, [0, 0], [ROWS, 64]), 2.0), [0, 0], out)
        return out

    @pl.jit
    def drive(x: pl.Tensor[[N, 64], pl.FP32], out: pl.Out[pl.Tensor[[N, 64], pl.FP32]]):
        return rows(x, out)

    for n in (32, 96):
        x, out = torch.randn(n, 64), _nan(n, 64)
        drive(x, out, config=CFG)
        torch.testing.assert_close(out[:ROWS], x[:ROWS] * 2)

    M = pl.dynamic("M")

    @pl.program
    class P:
        @pl.function(type=pl.FunctionType.InCore)
        def k(self, x: pl.Tensor[[M, 32], pl.FP16], out: pl.Out[pl.Tensor[[M, 32], pl.FP16]]):
            out = pl.store(pl.add(pl.load(x, [0, 0], [16, 32]), 1.0), [0, 0], out)
            return out

        @pl.function(type=pl.FunctionType.Orchestration)
        def entry(self, x: pl.Tensor[[M, 32], pl.FP16], out: pl.Out[pl.Tensor[[M, 32], pl.FP16]]):
            out = self.k(x, out)
            return out

    x, out = torch.randn(16, 32, dtype=torch.float16), _nan(16, 32, dtype=torch.float16)
    ir.compile(P.bind(x, out), platform="sim")(x, out)
    torch.testing.assert_close(out, x + 1)


@pytest.mark.parametrize("name", ["INT4", "UINT4", "FP4", "HF4", "HF8"])
def test_storage_only_dtypes_are_named_and_refused_when_used(name):
    dt = getattr(pl, name)
    assert dt.get_byte() == 1 and repr(dt) == f"pl.{name}"

    @pl.jit  # the annotation itself is accepted: the kernel is refused when compiled
    def k(x: pl.Tensor[[16, 64], dt], out: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            out = pl.store(pl.cast(pl.load(x, [0, 0], [16, 64]), pl.FP32), [0, 0], out)
        return out

    with pytest.raises(PtoNotSupported, match=rf"parameter 'x': dtype pl\.{name} .* not supported on the sim"):
        k(torch.zeros(16, 64, dtype=torch.int8), torch.zeros(16, 64))

    @pl.jit
    def c(x: pl.Tensor[[16, 64], pl.FP32], out: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            out = pl.store(pl.cast(pl.cast(pl.load(x, [0, 0], [16, 64]), dt), pl.FP32), [0, 0], out)
        return out

    with pytest.raises(PtoNotSupported, match=rf"pl\.{name}"):
        c(torch.zeros(16, 64), torch.zeros(16, 64))


def test_a_torch_fp4_tensor_is_refused_by_name():
    @pl.jit
    def k(x: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            out = pl.store(pl.load(x, [0, 0], [16, 32]), [0, 0], out)
        return out

    x = torch.zeros(16, 32, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    with pytest.raises(PtoNotSupported, match=r"pl\.FP4"):
        k(x, x.clone())


def test_narrow_integer_and_float_dtypes_in_one_kernel():
    @pl.jit
    def k(a: pl.Tensor[[16, 64], pl.INT16], b: pl.Tensor[[16, 64], pl.UINT8], q: pl.Tensor[[16, 64], pl.INT8],
          o16: pl.Out[pl.Tensor[[16, 64], pl.INT16]], o8: pl.Out[pl.Tensor[[16, 64], pl.UINT8]],
          wide: pl.Out[pl.Tensor[[16, 64], pl.FP16]], oq: pl.Out[pl.Tensor[[16, 64], pl.INT8]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            o16 = pl.store(pl.sub(pl.load(a, [0, 0], [16, 64]), 5), [0, 0], o16)
            tb = pl.load(b, [0, 0], [16, 64])
            o8 = pl.store(pl.and_(tb, tb), [0, 0], o8)
            h = pl.mul(pl.cast(pl.load(q, [0, 0], [16, 64]), pl.FP16), 0.5)
            wide = pl.store(h, [0, 0], wide)
            oq = pl.store(pl.cast(h, pl.INT8, mode="round"), [0, 0], oq)
        return o16, o8, wide, oq

    a = torch.randint(-1000, 1000, (16, 64), dtype=torch.int16)
    b = torch.randint(0, 255, (16, 64), dtype=torch.uint8)
    q = torch.randint(-128, 127, (16, 64), dtype=torch.int8)
    o16, o8 = torch.zeros(16, 64, dtype=torch.int16), torch.zeros(16, 64, dtype=torch.uint8)
    wide, oq = _nan(16, 64, dtype=torch.float16), torch.full((16, 64), 99, dtype=torch.int8)
    k(a, b, q, o16, o8, wide, oq)
    torch.testing.assert_close(o16, a - 5)
    torch.testing.assert_close(o8, b)
    torch.testing.assert_close(wide, q.half() * 0.5)
    half = q.float() * 0.5  # "round": half away from zero
    torch.testing.assert_close(oq, (torch.sign(half) * torch.floor(half.abs() + 0.5)).to(torch.int8))


# --- language/02-control-flow.md: tails, nested loops and carries, conditions -----------------------


def test_fp16_chunks_with_a_non_multiple_tail_by_valid_shape_and_by_clamp():
    @pl.jit
    def chunked(a: pl.Tensor[[100, 64], pl.FP16], b: pl.Tensor[[100, 64], pl.FP16],
                out: pl.Out[pl.Tensor[[100, 64], pl.FP16]], o2: pl.Out[pl.Tensor[[100, 64], pl.FP16]]):
        for i in pl.range(0, 100, 32):
            with pl.at(level=pl.Level.CORE_GROUP):
                rows = pl.min(32, 100 - i)
                ta = pl.load(a, [i, 0], [32, 64], valid_shapes=[rows, 64])
                tb = pl.load(b, [i, 0], [32, 64], valid_shape=[rows, 64])
                out = pl.store(pl.add(ta, tb), [i, 0], out)
                o2 = pl.store(pl.mul(pl.load(a, [i, 0], [32, 64], clamp=True), 3.0), [i, 0], o2)
        return out, o2

    a, b = torch.randn(100, 64, dtype=torch.float16), torch.randn(100, 64, dtype=torch.float16)
    out, o2 = _nan(100, 64, dtype=torch.float16), _nan(100, 64, dtype=torch.float16)
    chunked(a, b, out, o2)
    torch.testing.assert_close(out, a + b)
    torch.testing.assert_close(o2, a * 3)


def test_one_row_and_one_element_tiles():
    @pl.jit.incore
    def colsum(x: pl.Tensor[[24, 96], pl.FP32], out: pl.Out[pl.Tensor[[1, 96], pl.FP32]],
               o1: pl.Out[pl.Tensor[[1, 1], pl.FP32]], o2: pl.Out[pl.Tensor[[1, 1], pl.FP32]]):
        acc = pl.load(x, [0, 0], [1, 96])
        for r in pl.range(1, 24):
            acc = pl.add(acc, pl.load(x, [r, 0], [1, 96]))
        out = pl.store(acc, [0, 0], out)
        o1 = pl.store(pl.col_sum(pl.load(x, [0, 3], [24, 1])), [0, 0], o1)
        one = pl.load(x, [2, 5], [1, 1])
        o2 = pl.store(pl.row_sum(pl.mul(one, one)), [0, 0], o2)
        return out, o1, o2

    @pl.jit
    def e(x: pl.Tensor[[24, 96], pl.FP32], out: pl.Out[pl.Tensor[[1, 96], pl.FP32]],
          o1: pl.Out[pl.Tensor[[1, 1], pl.FP32]], o2: pl.Out[pl.Tensor[[1, 1], pl.FP32]]):
        out, o1, o2 = colsum(x, out, o1, o2)
        return out, o1, o2

    x, out, o1, o2 = torch.randn(24, 96), _nan(1, 96), _nan(1, 1), _nan(1, 1)
    e(x, out, o1, o2)
    torch.testing.assert_close(out, x.sum(0, keepdim=True), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(o1, x[:, 3].sum().reshape(1, 1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(o2, (x[2, 5] ** 2).reshape(1, 1))


def test_loop_indices_as_scalar_operands_in_nested_parallel_and_range():
    @pl.jit
    def k(x: pl.Tensor[[64, 128], pl.FP32], out: pl.Out[pl.Tensor[[64, 128], pl.FP32]]):
        for i in pl.parallel(2):
            for j in pl.range(4):
                with pl.at(level=pl.Level.CORE_GROUP):
                    t = pl.load(x, [i * 32, j * 32], [32, 32])
                    out = pl.store(pl.mul(pl.add(t, i * 10 + j), i + 1), [i * 32, j * 32], out)
        return out

    x, out = torch.randn(64, 128), _nan(64, 128)
    k(x, out)
    ref = x.clone()
    for i in range(2):
        for j in range(4):
            ref[i * 32:(i + 1) * 32, j * 32:(j + 1) * 32] = (ref[i * 32:(i + 1) * 32, j * 32:(j + 1) * 32]
                                                             + i * 10 + j) * (i + 1)
    torch.testing.assert_close(out, ref)
    assert "pl.add(t0, ((i0 * 10) + i1))" in k.lower(x, out).as_python()


def test_negative_steps_and_carries_at_two_levels():
    @pl.jit.incore
    def k(x: pl.Tensor[[4, 16, 64], pl.FP32], out: pl.Out[pl.Tensor[[16, 64], pl.FP32]],
          tot: pl.Out[pl.Tensor[[16, 64], pl.FP32]], base: pl.Scalar[pl.INT32]):
        acc = pl.full([16, 64], dtype=pl.FP32, value=0.0)
        for b in pl.range(3, -1, -1):  # Horner over the batch, last first
            acc = pl.add(pl.mul(acc, 0.5), pl.reshape(pl.load(x, [b, 0, 0], [1, 16, 64]), [16, 64]))
        out = pl.store(acc, [0, 0], out)
        total = pl.full([16, 64], dtype=pl.FP32, value=0.0)
        for b in pl.range(4):
            m = pl.reshape(pl.load(x, [b, 0, 0], [1, 16, 64]), [16, 64])
            for u in pl.unroll(2):
                m = pl.add(pl.mul(m, 0.5), u + base)
            total = pl.add(total, m)
        tot = pl.store(total, [0, 0], tot)
        return out, tot

    @pl.jit
    def e(x: pl.Tensor[[4, 16, 64], pl.FP32], out: pl.Out[pl.Tensor[[16, 64], pl.FP32]],
          tot: pl.Out[pl.Tensor[[16, 64], pl.FP32]], base: pl.Scalar[pl.INT32]):
        out, tot = k(x, out, tot, base)
        return out, tot

    x, out, tot = torch.randn(4, 16, 64), _nan(16, 64), _nan(16, 64)
    e(x, out, tot, 2)
    ref = torch.zeros(16, 64)
    for b in (3, 2, 1, 0):
        ref = ref * 0.5 + x[b]
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    m = (x * 0.5 + 2) * 0.5 + 3
    torch.testing.assert_close(tot, m.sum(0), rtol=1e-5, atol=1e-5)


def test_and_or_not_conditions_on_a_loop_index():
    scale = None

    @pl.jit.incore
    def k(x: pl.Tensor[[64, 64], pl.FP32], out: pl.Out[pl.Tensor[[64, 64], pl.FP32]],
          o2: pl.Out[pl.Tensor[[64, 64], pl.FP32]], lim: pl.Scalar[pl.INT32]):
        for i in pl.range(4):
            t = pl.load(x, [i * 16, 0], [16, 64])
            if i == 0 or i == 3:
                y = pl.mul(t, 2.0)
            elif i > 0 and not i < lim:
                y = pl.neg(t)
            else:
                y = t
            out = pl.store(y, [i * 16, 0], out)
            if scale is not None and scale > 1:  # Python values keep Python's short-circuit
                t = pl.mul(t, 3.0)
            o2 = pl.store(t, [i * 16, 0], o2)
        return out, o2

    @pl.jit
    def e(x: pl.Tensor[[64, 64], pl.FP32], out: pl.Out[pl.Tensor[[64, 64], pl.FP32]],
          o2: pl.Out[pl.Tensor[[64, 64], pl.FP32]], lim: pl.Scalar[pl.INT32]):
        out, o2 = k(x, out, o2, lim)
        return out, o2

    x = torch.randn(64, 64)
    for lim in (2, 5):
        out, o2 = _nan(64, 64), _nan(64, 64)
        e(x, out, o2, lim)
        ref = x.clone()
        ref[:16] *= 2
        ref[48:] *= 2
        for i in (1, 2):
            if not i < lim:
                ref[i * 16:(i + 1) * 16] *= -1
        torch.testing.assert_close(out, ref)
        torch.testing.assert_close(o2, x)


def test_a_float_scalar_expression_is_refused_by_name():
    @pl.jit
    def k(x: pl.Tensor[[16, 64], pl.FP32], out: pl.Out[pl.Tensor[[16, 64], pl.FP32]], alpha: pl.Scalar[pl.FP32]):
        with pl.at(level=pl.Level.CORE_GROUP):
            out = pl.store(pl.mul(pl.load(x, [0, 0], [16, 64]), alpha * 2.0), [0, 0], out)
        return out

    x = torch.randn(16, 64)
    with pytest.raises(PtoNotSupported, match="arithmetic on a float scalar parameter"):
        k.compile(x, torch.zeros(16, 64), pl.RUNTIME)  # read at dispatch: no arithmetic on it here
    out = _nan(16, 64)
    k(x, out, 1.5)  # a number specialises the kernel on it: alpha * 2.0 is 3.0
    torch.testing.assert_close(out, x * 3.0)


# --- ops pages: dtypes and PyPTO's positional / keyword forms ---------------------------------------


def test_bf16_softmax_and_expand_family():
    @pl.jit
    def k(x: pl.Tensor[[16, 64], pl.BF16], r: pl.Tensor[[16, 1], pl.BF16], c: pl.Tensor[[1, 64], pl.BF16],
          sm: pl.Out[pl.Tensor[[16, 64], pl.BF16]], o1: pl.Out[pl.Tensor[[16, 64], pl.BF16]],
          o2: pl.Out[pl.Tensor[[16, 64], pl.BF16]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            t = pl.load(x, [0, 0], [16, 64])
            f = pl.cast(t, pl.FP32)
            e = pl.exp(pl.row_expand_sub(f, pl.row_max(f)))
            sm = pl.store(pl.cast(pl.row_expand_div(e, pl.row_sum(e)), pl.BF16), [0, 0], sm)
            o1 = pl.store(pl.row_expand_mul(t, pl.load(r, [0, 0], [16, 1])), [0, 0], o1)
            o2 = pl.store(pl.col_expand_add(t, pl.load(c, [0, 0], [1, 64])), [0, 0], o2)
        return sm, o1, o2

    x = torch.randn(16, 64, dtype=torch.bfloat16)
    r, c = torch.randn(16, 1, dtype=torch.bfloat16), torch.randn(1, 64, dtype=torch.bfloat16)
    sm, o1, o2 = (_nan(16, 64, dtype=torch.bfloat16) for _ in range(3))
    k(x, r, c, sm, o1, o2)
    torch.testing.assert_close(sm.float(), torch.softmax(x.float(), -1), rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(o1, x * r)
    torch.testing.assert_close(o2, x + c)


def test_int32_bitwise_remainder_and_fp16_reductions():
    @pl.jit
    def k(a: pl.Tensor[[8, 64], pl.INT32], b: pl.Tensor[[8, 64], pl.INT32], h: pl.Tensor[[32, 64], pl.FP16],
          o1: pl.Out[pl.Tensor[[8, 64], pl.INT32]], o2: pl.Out[pl.Tensor[[8, 64], pl.INT32]],
          o3: pl.Out[pl.Tensor[[8, 64], pl.INT32]], cm: pl.Out[pl.Tensor[[1, 64], pl.FP16]],
          rm: pl.Out[pl.Tensor[[32, 1], pl.FP16]], am: pl.Out[pl.Tensor[[32, 1], pl.INT32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            ta, tb = pl.load(a, [0, 0], [8, 64]), pl.load(b, [0, 0], [8, 64])
            o1 = pl.store(pl.xor(pl.and_(ta, tb), pl.or_(ta, 7)), [0, 0], o1)
            o2 = pl.store(pl.shrs(pl.shls(ta, 3), 1), [0, 0], o2)
            o3 = pl.store(pl.maximum(pl.rems(pl.abs(ta), 7), pl.not_(pl.xors(tb, 0x55))), [0, 0], o3)
            t = pl.load(h, [0, 0], [32, 64])
            cm = pl.store(pl.col_max(t), [0, 0], cm)
            rm = pl.store(pl.row_min(t), [0, 0], rm)
            am = pl.store(pl.row_argmax(t), [0, 0], am)
        return o1, o2, o3, cm, rm, am

    a = torch.randint(-(1 << 20), 1 << 20, (8, 64), dtype=torch.int32)
    b = torch.randint(0, 1 << 20, (8, 64), dtype=torch.int32)
    h = torch.randn(32, 64, dtype=torch.float16)
    o = [torch.full((8, 64), -7, dtype=torch.int32) for _ in range(3)]
    cm, rm = _nan(1, 64, dtype=torch.float16), _nan(32, 1, dtype=torch.float16)
    am = torch.full((32, 1), -1, dtype=torch.int32)
    k(a, b, h, *o, cm, rm, am)
    torch.testing.assert_close(o[0], (a & b) ^ (a | 7))
    torch.testing.assert_close(o[1], (a << 3) >> 1)
    torch.testing.assert_close(o[2], torch.maximum(a.abs() % 7, ~(b ^ 0x55)))
    torch.testing.assert_close(cm, h.max(0, keepdim=True).values)
    torch.testing.assert_close(rm, h.min(1, keepdim=True).values)
    torch.testing.assert_close(am, h.float().argmax(1, keepdim=True).int())


def test_positional_forms_of_full_matmul_and_rsqrt():
    @pl.jit
    def k(a: pl.Tensor[[32, 32], pl.FP16], b: pl.Tensor[[32, 32], pl.FP16], x: pl.Tensor[[16, 64], pl.FP32],
          c: pl.Out[pl.Tensor[[32, 32], pl.FP32]], ct: pl.Out[pl.Tensor[[32, 32], pl.FP32]],
          r: pl.Out[pl.Tensor[[16, 64], pl.FP32]], f: pl.Out[pl.Tensor[[16, 64], pl.FP32]],
          fi: pl.Out[pl.Tensor[[16, 64], pl.INT32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            c[:] = pl.matmul(a, b, pl.FP32)  # matmul(lhs, rhs, out_dtype, a_trans, b_trans)
            ct[:] = pl.matmul(a, b, pl.FP32, False, True)
            r[:] = pl.rsqrt(x, True)  # rsqrt(input, high_precision)
            f = pl.store(pl.full([16, 64], pl.FP32, 2.5), [0, 0], f)  # full(shape, dtype, value)
            fi = pl.store(pl.tile.full([16, 64], pl.INT32, 3), [0, 0], fi)
        return c, ct, r, f, fi

    a, b = torch.randn(32, 32, dtype=torch.float16), torch.randn(32, 32, dtype=torch.float16)
    x = torch.rand(16, 64) + 0.1
    c, ct, r, f = _nan(32, 32), _nan(32, 32), _nan(16, 64), _nan(16, 64)
    fi = torch.zeros(16, 64, dtype=torch.int32)
    k(a, b, x, c, ct, r, f, fi)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(ct, a.float() @ b.float().T, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(r, x.rsqrt())
    assert (f == 2.5).all() and (fi == 3).all()


def test_slice_clamp_and_drop_dims():
    @pl.jit
    def k(x: pl.Tensor[[40, 64], pl.FP32], y: pl.Tensor[[4, 16, 64], pl.FP32],
          out: pl.Out[pl.Tensor[[40, 64], pl.FP32]], o2: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
        for i in pl.range(0, 40, 16):
            with pl.at(level=pl.Level.CORE_GROUP):
                t = pl.slice(x, [16, 64], [i, 0], clamp=True)  # in a region: the window's tile
                out = pl.store(pl.add(t, 1.0), [i, 0], out)
        with pl.at(level=pl.Level.CORE_GROUP):
            whole = pl.load(y, [0, 0, 0], [4, 16, 64])
            o2 = pl.store(pl.slice(whole, [1, 16, 64], [2, 0, 0], drop_dims=[0]), [0, 0], o2)
        return out, o2

    x, y, out, o2 = torch.randn(40, 64), torch.randn(4, 16, 64), _nan(40, 64), _nan(16, 64)
    k(x, y, out, o2)
    torch.testing.assert_close(out, x + 1)
    torch.testing.assert_close(o2, y[2])

    @pl.jit
    def on_tile(x: pl.Tensor[[16, 64], pl.FP32], out: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            out = pl.store(pl.slice(pl.load(x, [0, 0], [16, 64]), [16, 64], [0, 0], clamp=True), [0, 0], out)
        return out

    with pytest.raises(TypeError, match="clamp=True is not supported for a Tile"):
        on_tile(x[:16], out[:16].clone())

    @pl.jit
    def wide(x: pl.Tensor[[16, 64], pl.FP32], out: pl.Out[pl.Tensor[[8, 64], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            out = pl.store(pl.slice(pl.load(x, [0, 0], [16, 64]), [2, 64], [0, 0], drop_dims=[0]), [0, 0], out)
        return out

    with pytest.raises(PtoCompileError, match="drop_dims names axis 0, of extent 2"):
        wide(x[:16], torch.zeros(8, 64))


# --- language/01-functions.md, tasks: several kernels, if/else in the orchestration, atomic add -------


def test_program_of_several_kernels_run_compile_and_benchmark():
    @pl.program
    class P:
        @pl.function(type=pl.FunctionType.InCore)
        def k_exp(self, x: pl.Tensor[[64, 64], pl.FP32], y: pl.Out[pl.Tensor[[64, 64], pl.FP32]]):
            y = pl.store(pl.exp(pl.load(x, [0, 0], [64, 64])), [0, 0], y)
            return y

        @pl.function(type=pl.FunctionType.InCore)
        def k_add(self, a: pl.Tensor[[64, 64], pl.FP32], b: pl.Tensor[[64, 64], pl.FP32],
                  y: pl.Out[pl.Tensor[[64, 64], pl.FP32]]):
            y = pl.store(pl.add(pl.load(a, [0, 0], [64, 64]), pl.load(b, [0, 0], [64, 64])), [0, 0], y)
            return y

        @pl.function(type=pl.FunctionType.InCore)
        def k_rowsum(self, a: pl.Tensor[[64, 64], pl.FP32], y: pl.Out[pl.Tensor[[64, 1], pl.FP32]]):
            y = pl.store(pl.row_sum(pl.load(a, [0, 0], [64, 64])), [0, 0], y)
            return y

        @pl.function(type=pl.FunctionType.Orchestration)
        def entry(self, x: pl.Tensor[[64, 64], pl.FP32], w: pl.Tensor[[64, 64], pl.FP32],
                  out: pl.Out[pl.Tensor[[64, 1], pl.FP32]], flag: pl.Scalar[pl.INT32]):
            t1 = pl.create_tensor([64, 64], dtype=pl.FP32)
            t1 = self.k_exp(x, t1)
            t2 = pl.create_tensor([64, 64], dtype=pl.FP32)
            if flag > 0:
                t2 = self.k_add(t1, w, t2)
            else:
                t2 = self.k_add(t1, t1, t2)
            out = self.k_rowsum(t2, out)
            return out

    x, w = torch.randn(64, 64), torch.randn(64, 64)
    res = rt.run(P, x, w, _nan(64, 1), 1, config=CFG,
                 golden=lambda t: t["out"].copy_((t["x"].exp() + t["w"]).sum(1, keepdim=True)))
    assert res.passed, res.error
    compiled = rt.run(P, config=CFG)  # no tensors: the compiled program
    for flag, ref in ((1, (x.exp() + w).sum(1, keepdim=True)), (0, (2 * x.exp()).sum(1, keepdim=True))):
        out = _nan(64, 1)
        compiled(x, w, out, flag)
        torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    stats = rt.benchmark(compiled, [x, w, _nan(64, 1), 1], rounds=3, warmup=1, config=CFG)
    assert stats is not None


def test_an_atomic_add_into_a_programs_out_reads_its_baseline():
    @pl.program
    class P:
        @pl.function(type=pl.FunctionType.InCore)
        def init(self, x: pl.Tensor[[16, 32], pl.FP32], acc: pl.Out[pl.Tensor[[16, 32], pl.FP32]]):
            acc = pl.store(pl.load(x, [0, 0], [16, 32]), [0, 0], acc)
            return acc

        @pl.function(type=pl.FunctionType.InCore)
        def add_into(self, x: pl.Tensor[[16, 32], pl.FP32], acc: pl.Out[pl.Tensor[[16, 32], pl.FP32]]):
            acc = pl.store(pl.load(x, [0, 0], [16, 32]), [0, 0], acc, atomic=pl.AtomicType.Add)
            return acc

        @pl.function(type=pl.FunctionType.InCore)
        def finish(self, acc: pl.Tensor[[16, 32], pl.FP32], out: pl.Out[pl.Tensor[[16, 32], pl.FP32]]):
            out = pl.store(pl.mul(pl.load(acc, [0, 0], [16, 32]), 2.0), [0, 0], out)
            return out

        @pl.function(type=pl.FunctionType.Orchestration)
        def entry(self, x0: pl.Tensor[[16, 32], pl.FP32], x: pl.Tensor[[16, 32], pl.FP32],
                  acc: pl.Out[pl.Tensor[[16, 32], pl.FP32]], out: pl.Out[pl.Tensor[[16, 32], pl.FP32]]):
            acc = self.add_into(x, acc)  # onto what the caller's tensor holds
            acc = self.add_into(x, acc)
            mid = pl.create_tensor([16, 32], dtype=pl.FP32)
            mid = self.init(x0, mid)
            mid = self.add_into(x, mid)
            out = self.finish(mid, out)
            return acc, out

    compiled = ir.compile(P, platform="sim")
    assert [p.direction for p in compiled.params] == ["in", "in", "inout", "out"]
    x0, x, acc, out = torch.randn(16, 32), torch.randn(16, 32), torch.randn(16, 32), _nan(16, 32)
    base = acc.clone()
    compiled(x0, x, acc, out)
    torch.testing.assert_close(acc, base + 2 * x, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out, 2 * (x0 + x), rtol=1e-5, atol=1e-5)


# --- execution/01-run.md (running.md): resident weights, registration, copies back -----------------


def test_worker_registration_and_a_resident_fp16_weight():
    @pl.jit
    def k(a: pl.Tensor, w: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.store(pl.mul(pl.load(a, [0, 0], [32, 64]), pl.load(w, [0, 0], [32, 64])), [0, 0], out)
        return out

    A, W = torch.randn(32, 64, dtype=torch.float16), torch.randn(32, 64, dtype=torch.float16)
    compiled = ir.compile(k.lower(A, W, torch.zeros(32, 64, dtype=torch.float16)), platform="sim")
    with ChipWorker(config=CFG) as w:
        resident = w.alloc_tensor((32, 64), torch.float16, init=W)
        handle = w.register(compiled)
        for _ in range(2):
            out = _nan(32, 64, dtype=torch.float16)
            handle(A, resident, out)
            torch.testing.assert_close(out, A * W)
        host = torch.empty(32, 64, dtype=torch.float16)
        w.copy_from(host.data_ptr(), resident.data_ptr, resident.nbytes)
        torch.testing.assert_close(host, W)
        w.free_tensor(resident)
