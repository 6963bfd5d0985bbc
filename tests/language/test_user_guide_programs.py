"""New programs written from PyPTO's user guide, one group per page, run on the sim.

Each is what a user following the page would write (the import and the platform changed only):
the constructs, keywords and defaults the page describes, completed into programs, on random data
against a torch reference with outputs poisoned first.  Where a page documents an error, the error
is a PtoError with a message that names the construct.  (No ``from __future__ import annotations``
here: the kernels below annotate with local ``pl.dynamic`` dimensions, which string annotations
could not resolve.)
"""

import pytest
import torch

import pypto_async.language as pl
from pypto_async import ir
from pypto_async.errors import PtoCompileError, PtoError

# The slow tier (CI runs both): whole programs from the guide's pages, a kernel build or more each,
# and the fast tier's budget is mostly the C compiler's.
pytestmark = pytest.mark.slow


def _nan(*shape, dtype=torch.float32):
    return torch.full(shape, float("nan"), dtype=dtype)


# --- 02-quickstart.md: loops, sub-functions, compile() / lower() ------------------------------------


@pytest.mark.slow
def test_quickstart_loop_forms_and_bare_tensor_compile():
    @pl.jit
    def accumulate(a: pl.Tensor[[64, 64], pl.FP32], out: pl.Out[pl.Tensor[[64, 64], pl.FP32]],
                   even: pl.Out[pl.Tensor[[64, 64], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            t = pl.add(a, a)
            for i in pl.range(3):
                t = pl.add(t, a)  # carried across iterations
            out[:] = pl.mul(t, t)
            s = pl.mul(a, 0.0)
            for i in pl.range(0, 100, 2):
                s = pl.add(s, a)
            even[:] = s
        return out, even

    a = torch.randn(64, 64)
    out, even = _nan(64, 64), _nan(64, 64)
    accumulate(a, out, even)
    torch.testing.assert_close(out, (5 * a) ** 2)
    torch.testing.assert_close(even, 50 * a, rtol=1e-5, atol=1e-5)

    @pl.jit
    def add(a: pl.Tensor, b: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            out[:] = pl.add(a, b)
        return out

    compiled = add.compile(torch.empty(32, 64), torch.empty(32, 64), torch.empty(32, 64))
    assert compiled is add.compile(torch.empty(32, 64), torch.empty(32, 64), torch.empty(32, 64))
    for shape in ((32, 64), (16, 128)):
        x, y, o = torch.randn(*shape), torch.randn(*shape), _nan(*shape)
        add(x, y, o)
        torch.testing.assert_close(o, x + y)
    assert "pl.add" in add.lower(x, y, o).as_python() or "add" in add.lower(x, y, o).as_python()
    assert not hasattr(add, "as_python")



def test_quickstart_scalar_parameter_takes_its_python_default():
    @pl.jit
    def k(x: pl.Tensor[[32, 64], pl.FP32], out: pl.Out[pl.Tensor[[32, 64], pl.FP32]],
          alpha: pl.Scalar[pl.FP32] = 0.5):
        with pl.at(level=pl.Level.CORE_GROUP):
            out[:] = pl.add(pl.mul(x, alpha), 1.0)
        return out

    x = torch.randn(32, 64)
    for kwargs, alpha in (({}, 0.5), ({"alpha": 2.0}, 2.0)):
        out = _nan(32, 64)
        k(x, out, **kwargs)
        torch.testing.assert_close(out, x * alpha + 1)
    out = _nan(32, 64)
    k(x, out=out)
    torch.testing.assert_close(out, x * 0.5 + 1)
    with pytest.raises(PtoError, match=r"k: missing argument .out. \(its parameters: x, out, alpha\)"):
        k(x)

# --- 03-programming-model.md: the three levels, the matmul path -------------------------------------


def test_programming_model_levels_and_matmul_path():
    @pl.jit.incore
    def square_tensor(x: pl.Tensor[[64, 64], pl.FP32], out: pl.Out[pl.Tensor[[64, 64], pl.FP32]]):
        out[:] = pl.mul(x, x)
        return out

    @pl.jit.incore
    def mm(a: pl.Tensor[[32, 32], pl.FP16], b: pl.Tensor[[32, 32], pl.FP16],
           out: pl.Out[pl.Tensor[[32, 32], pl.FP32]]):
        a_l1 = pl.load(a, [0, 0], [32, 32], target_memory=pl.Mem.Mat)
        b_l1 = pl.load(b, [0, 0], [32, 32], target_memory=pl.MemorySpace.Mat)
        c_acc = pl.matmul(pl.move(a_l1, target_memory=pl.Mem.Left), pl.move(b_l1, target_memory=pl.Mem.Right))
        pl.store(c_acc, [0, 0], out)
        return out

    @pl.jit
    def levels(x: pl.Tensor[[64, 64], pl.FP32], a: pl.Tensor[[32, 32], pl.FP16], b: pl.Tensor[[32, 32], pl.FP16],
               out_t: pl.Out[pl.Tensor[[64, 64], pl.FP32]], out_m: pl.Out[pl.Tensor[[32, 32], pl.FP32]]):
        out_t = square_tensor(x, out_t)
        out_m = mm(a, b, out_m)
        return out_t, out_m

    x = torch.randn(64, 64)
    a, b = torch.randn(32, 32, dtype=torch.float16), torch.randn(32, 32, dtype=torch.float16)
    out_t, out_m = _nan(64, 64), _nan(32, 32)
    levels(x, a, b, out_t, out_m)
    torch.testing.assert_close(out_t, x * x)
    torch.testing.assert_close(out_m, a.float() @ b.float(), rtol=1e-3, atol=1e-3)


# --- language/00-types.md: directions, dynamic dims, scalars, arrays ---------------------------------


def test_types_dynamic_rows_inout_out_scalar_at_two_extents():
    M = pl.dynamic("M")

    @pl.jit.incore
    def scale_rows(x: pl.Tensor[[M, 128], pl.FP16], acc: pl.InOut[pl.Tensor[[M, 128], pl.FP32]],
                   out: pl.Out[pl.Tensor[[M, 128], pl.FP32]], factor: pl.Scalar[pl.FP32]):
        scaled = pl.mul(pl.cast(pl.load(x, [0, 0], [64, 128]), pl.FP32), factor)
        acc = pl.store(pl.add(pl.load(acc, [0, 0], [64, 128]), scaled), [0, 0], acc)
        out = pl.store(scaled, [0, 0], out)
        return acc, out

    @pl.jit
    def apply(x: pl.Tensor[[M, 128], pl.FP16], acc: pl.InOut[pl.Tensor[[M, 128], pl.FP32]],
              out: pl.Out[pl.Tensor[[M, 128], pl.FP32]], f: pl.Scalar[pl.FP32]):
        acc, out = scale_rows(x, acc, out, f)
        return acc, out

    for n in (64, 128):
        x, acc, out = torch.randn(n, 128, dtype=torch.float16), torch.randn(n, 128), _nan(n, 128)
        before = acc.clone()
        apply(x, acc, out, 1.5)
        torch.testing.assert_close(out[:64], x[:64].float() * 1.5)
        torch.testing.assert_close(acc[:64], before[:64] + x[:64].float() * 1.5)
        torch.testing.assert_close(acc[64:], before[64:], rtol=0, atol=0)  # InOut rows the kernel never wrote
    assert (pl.FP32.get_byte(), pl.BF16.get_byte(), pl.INT8.get_byte(), pl.INDEX.get_byte()) == (4, 2, 1, 8)
    assert pl.ND is pl.TensorLayout.ND


def test_types_array_is_a_functional_carried_value():
    @pl.jit.incore
    def gather(x: pl.Tensor[[8, 64], pl.FP32], out: pl.Out[pl.Tensor[[8, 64], pl.FP32]]):
        arr = pl.array.create(8, pl.INT32)
        for i in pl.range(8):
            arr[i] = (i * 3) % 8
        for i in pl.range(8):
            out = pl.store(pl.load(x, [arr[i], 0], [1, 64]), [i, 0], out)
        return out

    @pl.jit
    def entry(x: pl.Tensor[[8, 64], pl.FP32], out: pl.Out[pl.Tensor[[8, 64], pl.FP32]]):
        return gather(x, out)

    x, out = torch.randn(8, 64), _nan(8, 64)
    entry(x, out)
    torch.testing.assert_close(out, x[[(i * 3) % 8 for i in range(8)]], rtol=0, atol=0)


# --- language/01-functions.md: @pl.program, pl.func_attr, inline / opaque helpers -------------------


@pytest.mark.slow
def test_functions_program_func_attr_inline_and_opaque():
    @pl.program
    class Kernels:
        @pl.function(type=pl.FunctionType.InCore)
        def kernel(self, x: pl.Tensor[[64, 64], pl.FP32], w: pl.Tensor[[64, 64], pl.FP32],
                   out: pl.Out[pl.Tensor[[64, 64], pl.FP32]]):
            pl.func_attr({"stationary": w, "split": pl.SplitMode.UP_DOWN})
            out = pl.store(pl.sub(pl.load(x, [0, 0], [64, 64]), pl.load(w, [0, 0], [64, 64])), [0, 0], out)
            return out

        @pl.function(type=pl.FunctionType.Orchestration)
        def entry(self, x: pl.Tensor[[64, 64], pl.FP32], w: pl.Tensor[[64, 64], pl.FP32],
                  out: pl.Out[pl.Tensor[[64, 64], pl.FP32]]):
            out = self.kernel(x, w, out)
            return out

    x, w, out = torch.randn(64, 64), torch.randn(64, 64), _nan(64, 64)
    ir.compile(Kernels, platform="sim")(x, w, out)
    torch.testing.assert_close(out, x - w)

    @pl.jit.inline
    def twice(t):
        return pl.add(t, t)

    @pl.jit.opaque
    def body(x: pl.Tensor[[128, 64], pl.FP32], out: pl.Out[pl.Tensor[[128, 64], pl.FP32]]):
        for i in pl.range(4):
            with pl.at(level=pl.Level.CORE_GROUP):
                out = pl.store(pl.mul(twice(pl.load(x, [i * 32, 0], [32, 64])), 0.5), [i * 32, 0], out)
        return out

    @pl.jit
    def entry(x: pl.Tensor[[128, 64], pl.FP32], out: pl.Out[pl.Tensor[[128, 64], pl.FP32]]):
        return body(x, out)

    x, out = torch.randn(128, 64), _nan(128, 64)
    entry(x, out)
    torch.testing.assert_close(out, x)


# --- language/02-control-flow.md: the four loop forms, init_values / yield_, while_, branches --------


@pytest.mark.slow
def test_control_flow_parallel_unroll_and_runtime_if_over_a_dynamic_extent():
    N = pl.dynamic("N")

    @pl.jit
    def k(x: pl.Tensor[[N, 64], pl.FP32], out: pl.Out[pl.Tensor[[N, 64], pl.FP32]], nb: pl.Scalar[pl.INDEX]):
        for b in pl.parallel(0, nb):
            with pl.at(level=pl.Level.CORE_GROUP):
                t = pl.load(x, [b * 16, 0], [16, 64])
                if b % 2 == 0:
                    y = pl.mul(t, 2.0)
                else:
                    y = pl.add(t, 1.0)
                for u in pl.unroll(2):
                    y = pl.add(y, 0.5)
                out = pl.store(y, [b * 16, 0], out)
        return out

    for n in (32, 80):
        x, out = torch.randn(n, 64), _nan(n, 64)
        k(x, out, n // 16)
        ref = torch.cat([(x[b * 16:b * 16 + 16] * 2 if b % 2 == 0 else x[b * 16:b * 16 + 16] + 1) + 1.0
                         for b in range(n // 16)])
        torch.testing.assert_close(out, ref)


@pytest.mark.slow
def test_control_flow_init_values_while_and_branch_yields():
    @pl.jit.incore
    def k(x: pl.Tensor[[4, 8, 64], pl.FP32], d: pl.Tensor[[8, 64], pl.FP32],
          omax: pl.Out[pl.Tensor[[8, 64], pl.FP32]], osum: pl.Out[pl.Tensor[[8, 64], pl.FP32]],
          ow: pl.Out[pl.Tensor[[8, 64], pl.FP32]], ob: pl.Out[pl.Tensor[[8, 64], pl.FP32]],
          lim: pl.Scalar[pl.INT32]):
        init_max = pl.reshape(pl.load(x, [0, 0, 0], [1, 8, 64]), [8, 64])
        init_sum = pl.mul(init_max, 0.0)
        for i, (acc_max, acc_sum) in pl.range(4, init_values=(init_max, init_sum)):
            row_i = pl.reshape(pl.load(x, [i, 0, 0], [1, 8, 64]), [8, 64])
            out_max, out_sum = pl.yield_(pl.maximum(acc_max, row_i), pl.add(acc_sum, row_i))
        omax = pl.store(out_max, [0, 0], omax)
        osum = pl.store(out_sum, [0, 0], osum)
        for (n, acc) in pl.while_(init_values=(0, init_max)):
            pl.cond(n < lim)
            n2, acc2 = pl.yield_(n + 1, pl.add(acc, init_max))
        ow = pl.store(acc2, [0, 0], ow)
        td = pl.load(d, [0, 0], [8, 64])
        for i, (prev,) in pl.range(4, init_values=(init_sum,)):
            if i == 0:
                result = pl.yield_(init_max)
            else:
                result = pl.yield_(pl.add(prev, td))
            o = pl.yield_(result)
        ob = pl.store(o, [0, 0], ob)
        return omax, osum, ow, ob

    @pl.jit
    def e(x: pl.Tensor[[4, 8, 64], pl.FP32], d: pl.Tensor[[8, 64], pl.FP32],
          omax: pl.Out[pl.Tensor[[8, 64], pl.FP32]], osum: pl.Out[pl.Tensor[[8, 64], pl.FP32]],
          ow: pl.Out[pl.Tensor[[8, 64], pl.FP32]], ob: pl.Out[pl.Tensor[[8, 64], pl.FP32]],
          lim: pl.Scalar[pl.INT32]):
        omax, osum, ow, ob = k(x, d, omax, osum, ow, ob, lim)
        return omax, osum, ow, ob

    x, d = torch.randn(4, 8, 64), torch.randn(8, 64)
    for lim in (0, 3):
        outs = [_nan(8, 64) for _ in range(4)]
        e(x, d, *outs, lim)
        torch.testing.assert_close(outs[0], x.max(0).values)
        torch.testing.assert_close(outs[1], x.sum(0), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(outs[2], x[0] * (lim + 1), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(outs[3], x[0] + 3 * d, rtol=1e-5, atol=1e-5)


def test_control_flow_pipeline_with_tail_and_scalar_bounds():
    @pl.jit.incore
    def k(a: pl.Tensor[[112, 64], pl.FP32], out: pl.Out[pl.Tensor[[112, 64], pl.FP32]],
          s: pl.Out[pl.Tensor[[16, 64], pl.FP32]], n: pl.Scalar[pl.INDEX]):
        for i in pl.pipeline(7, stage=3):  # 7 = 2 * 3 + a tail of 1
            out = pl.store(pl.exp(pl.load(a, [i * 16, 0], [16, 64])), [i * 16, 0], out)
        acc = pl.full([16, 64], dtype=pl.FP32, value=0.0)
        for i in pl.pipeline(1, n, 2, stage=2):
            acc = pl.add(acc, pl.load(a, [i * 16, 0], [16, 64]))
        s = pl.store(acc, [0, 0], s)
        return out, s

    @pl.jit
    def e(a: pl.Tensor[[112, 64], pl.FP32], out: pl.Out[pl.Tensor[[112, 64], pl.FP32]],
          s: pl.Out[pl.Tensor[[16, 64], pl.FP32]], n: pl.Scalar[pl.INDEX]):
        out, s = k(a, out, s, n)
        return out, s

    a = torch.randn(112, 64)
    for n in (7, 6):
        out, s = _nan(112, 64), _nan(16, 64)
        e(a, out, s, n)
        torch.testing.assert_close(out, a.exp())
        torch.testing.assert_close(s, sum(a[i * 16:(i + 1) * 16] for i in range(1, n, 2)), rtol=1e-5, atol=1e-5)


def _one_tile_kernel(body):
    """A kernel whose body is `body(x_tile, n)` (n an INDEX scalar read at run time), compiled from its entry."""

    @pl.jit.incore
    def k(x: pl.Tensor[[64, 64], pl.FP32], out: pl.Out[pl.Tensor[[64, 64], pl.FP32]], n: pl.Scalar[pl.INDEX]):
        out = pl.store(body(pl.load(x, [0, 0], [64, 64]), n), [0, 0], out)
        return out

    @pl.jit
    def e(x: pl.Tensor[[64, 64], pl.FP32], out: pl.Out[pl.Tensor[[64, 64], pl.FP32]], n: pl.Scalar[pl.INDEX]):
        return k(x, out, n)

    x = torch.randn(64, 64)
    e.compile(x, _nan(64, 64), pl.RUNTIME)  # a number for n would specialise it (pl.unroll(3) is fine)


def _unroll_scalar_bound(t, n):
    for i in pl.unroll(n):
        t = pl.add(t, 1.0)
    return t


def _unroll_init_values(t, n):
    for i, (a,) in pl.unroll(3, init_values=(t,)):
        a2 = pl.yield_(pl.add(a, t))
    return a2


def _while_without_init(t, n):
    for (c,) in pl.while_():
        pl.cond(c < 3)
        c2 = pl.yield_(c + 1)  # noqa: F841
    return t


def _pipeline_without_stage(t, n):
    for i in pl.pipeline(4):
        t = pl.add(t, 1.0)
    return t


def _pipeline_stage_zero(t, n):
    for i in pl.pipeline(4, stage=0):
        t = pl.add(t, 1.0)
    return t


@pytest.mark.parametrize("body, words", [
    (_unroll_scalar_bound, "pl.unroll() stop must be a compile-time int"),
    (_unroll_init_values, "pl.unroll() cannot be combined with init_values"),
    (_while_without_init, "while_() requires init_values"),
    (_pipeline_without_stage, "pl.pipeline() requires stage="),
    (_pipeline_stage_zero, "stage must be >= 1"),
])
def test_control_flow_documented_errors(body, words):
    with pytest.raises(PtoCompileError, match=words.replace("(", r"\(").replace(")", r"\)")):
        _one_tile_kernel(body)


# --- language/03-memory.md: valid shape and padding, Bias, Left only through pl.move -----------------


def test_memory_valid_rows_padded_for_max_and_sum():
    @pl.jit.incore
    def k(x: pl.Tensor[[100, 64], pl.FP32], mx: pl.Out[pl.Tensor[[128, 1], pl.FP32]],
          sm: pl.Out[pl.Tensor[[128, 1], pl.FP32]], rows_left: pl.Scalar[pl.INDEX]):
        t = pl.load(x, [0, 0], [128, 64], valid_shapes=[rows_left, 64])
        mx = pl.store(pl.row_max(pl.fillpad(t, pad_value=pl.PadValue.min)), [0, 0], mx)
        u = pl.set_validshape(pl.load(x, [0, 0], [128, 64], valid_shapes=[rows_left, 64]), rows_left, 64)
        sm = pl.store(pl.row_sum(pl.fillpad(u, pad_value=pl.PadValue.zero)), [0, 0], sm)
        return mx, sm

    @pl.jit
    def e(x: pl.Tensor[[100, 64], pl.FP32], mx: pl.Out[pl.Tensor[[128, 1], pl.FP32]],
          sm: pl.Out[pl.Tensor[[128, 1], pl.FP32]], r: pl.Scalar[pl.INDEX]):
        mx, sm = k(x, mx, sm, r)
        return mx, sm

    x = -torch.rand(100, 64) - 0.1  # every real element negative: a zero pad would win the max
    mx, sm = _nan(128, 1), _nan(128, 1)
    e(x, mx, sm, 100)
    torch.testing.assert_close(mx[:100, 0], x.max(1).values)
    torch.testing.assert_close(sm[:100, 0], x.sum(1), rtol=1e-5, atol=1e-5)
    assert torch.isneginf(mx[100:, 0]).all() and (sm[100:, 0] == 0).all()


def test_memory_bias_path_and_left_load_rejected():
    @pl.jit.incore
    def k(a: pl.Tensor[[32, 32], pl.FP16], b: pl.Tensor[[32, 32], pl.FP16], bias: pl.Tensor[[1, 32], pl.FP32],
          out: pl.Out[pl.Tensor[[32, 32], pl.FP32]]):
        left = pl.move(pl.load(a, [0, 0], [32, 32], target_memory=pl.Mem.Mat), target_memory=pl.Mem.Left)
        right = pl.move(pl.load(b, [0, 0], [32, 32], target_memory=pl.Mem.Mat), target_memory=pl.Mem.Right)
        bb = pl.move(pl.load(bias, [0, 0], [1, 32], target_memory=pl.Mem.Mat), target_memory=pl.Mem.Bias)
        out = pl.store(pl.matmul_bias(left, right, bb), [0, 0], out)
        return out

    @pl.jit
    def e(a: pl.Tensor[[32, 32], pl.FP16], b: pl.Tensor[[32, 32], pl.FP16], bias: pl.Tensor[[1, 32], pl.FP32],
          out: pl.Out[pl.Tensor[[32, 32], pl.FP32]]):
        return k(a, b, bias, out)

    a, b = torch.randn(32, 32, dtype=torch.float16), torch.randn(32, 32, dtype=torch.float16)
    bias, out = torch.randn(1, 32), _nan(32, 32)
    e(a, b, bias, out)
    torch.testing.assert_close(out, a.float() @ b.float() + bias, rtol=1e-3, atol=1e-3)

    @pl.jit
    def bad(a: pl.Tensor[[32, 32], pl.FP16], out: pl.Out[pl.Tensor[[32, 32], pl.FP16]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            out = pl.store(pl.load(a, [0, 0], [32, 32], target_memory=pl.Mem.Left), [0, 0], out)
        return out

    with pytest.raises(PtoCompileError, match="pl.load cannot target Left"):
        bad.compile()


# --- language/04-scopes.md: pl.at keywords inside a loop, SPMD forms ---------------------------------


@pytest.mark.slow
def test_scopes_at_keywords_in_a_loop_and_spmd_forms():
    @pl.jit
    def k(x: pl.Tensor[[128, 64], pl.FP32], out: pl.Out[pl.Tensor[[128, 64], pl.FP32]],
          o2: pl.Out[pl.Tensor[[128, 64], pl.FP32]]):
        for i in pl.range(4):
            with pl.at(level=pl.Level.CORE_GROUP, name_hint="blk",
                       optimizations=[pl.split(pl.SplitMode.UP_DOWN), pl.cross_core_slot(slot_num=4)]):
                t = pl.load(x, [i * 32, 0], [32, 64])
                out = pl.store(pl.sub(pl.mul(t, t), t), [i * 32, 0], out)
        with pl.spmd(4):
            b = pl.tile.get_block_idx()
            o2 = pl.store(pl.exp(pl.load(x, [b * 32, 0], [32, 64])), [b * 32, 0], o2)
        return out, o2

    x, out, o2 = torch.randn(128, 64), _nan(128, 64), _nan(128, 64)
    k(x, out, o2)
    torch.testing.assert_close(out, x * x - x)
    torch.testing.assert_close(o2, x.exp())

    @pl.program
    class P:
        @pl.function(type=pl.FunctionType.InCore)
        def kernel(self, a: pl.Tensor[[128, 64], pl.FP32], b: pl.Tensor[[128, 64], pl.FP32],
                   out: pl.Out[pl.Tensor[[128, 64], pl.FP32]]):
            rows = 128 // pl.tile.get_block_num()
            i = pl.tile.get_block_idx()
            ta, tb = pl.load(a, [i * rows, 0], [32, 64]), pl.load(b, [i * rows, 0], [32, 64])
            out = pl.store(pl.maximum(ta, tb), [i * rows, 0], out)
            return out

        @pl.function(type=pl.FunctionType.Orchestration)
        def entry(self, a: pl.Tensor[[128, 64], pl.FP32], b: pl.Tensor[[128, 64], pl.FP32],
                  out: pl.Out[pl.Tensor[[128, 64], pl.FP32]]):
            with pl.spmd(4):
                out = self.kernel(a, b, out)
            return out

    a, b, out = torch.randn(128, 64), torch.randn(128, 64), _nan(128, 64)
    ir.compile(P, platform="sim")(a, b, out)
    torch.testing.assert_close(out, torch.maximum(a, b), rtol=0, atol=0)


# --- language/05-directives.md: static_print, static_assert, pl.const --------------------------------


def test_directives_run_at_trace_time(capsys):
    @pl.jit.incore
    def probe(x: pl.Tensor[[16, 128], pl.INT32], out: pl.Out[pl.Tensor[[16, 128], pl.INT32]]):
        pl.static_print("x =", x)
        pl.static_assert(x.shape[1] == 128, "expected 128 columns")
        out = pl.store(pl.add(pl.load(x, [0, 0], [16, 128]), pl.const(3, pl.INT32)), [0, 0], out)
        return out

    @pl.jit
    def e(x: pl.Tensor[[16, 128], pl.INT32], out: pl.Out[pl.Tensor[[16, 128], pl.INT32]]):
        return probe(x, out)

    x, out = torch.randint(-100, 100, (16, 128), dtype=torch.int32), torch.full((16, 128), -7, dtype=torch.int32)
    e(x, out)
    assert "x =" in capsys.readouterr().out
    torch.testing.assert_close(out, x + 3, rtol=0, atol=0)

    @pl.jit
    def narrow(x: pl.Tensor[[16, 64], pl.FP32], out: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
        pl.static_assert(x.shape[1] == 128, "expected 128 columns")
        with pl.at(level=pl.Level.CORE_GROUP):
            out[:] = pl.mul(x, 2.0)
        return out

    with pytest.raises(PtoError, match="expected 128 columns"):
        narrow.compile()


# --- language/06-syntax.md: subscript sugar on tiles (writes and element reads), operators ------------


@pytest.mark.slow
def test_syntax_tile_subscript_write_is_assemble():
    @pl.jit.incore
    def k(a: pl.Tensor[[32, 64], pl.FP32], b: pl.Tensor[[32, 64], pl.FP32],
          out: pl.Out[pl.Tensor[[32, 128], pl.FP32]]):
        ta, tb = pl.load(a, [0, 0], [32, 64]), pl.load(b, [0, 0], [32, 64])
        dst = pl.full([32, 128], dtype=pl.FP32, value=0.0)
        dst[0:32, 0:64] = (ta + tb) * ta - tb / 2.0  # dst = pl.assemble(dst, ..., [0, 0])
        dst[:, 64:128] = 1.0 + ta * 2.0
        out = pl.store(dst, [0, 0], out)
        return out

    @pl.jit.incore
    def in_loop(x: pl.Tensor[[4, 16, 32], pl.FP32], out: pl.Out[pl.Tensor[[16, 128], pl.FP32]]):
        dst = pl.full([16, 128], dtype=pl.FP32, value=0.0)
        for i in pl.range(4):  # the rebound tile is carried by the loop
            dst[:, i * 32:i * 32 + 32] = pl.exp(pl.reshape(pl.load(x, [i, 0, 0], [1, 16, 32]), [16, 32]))
        out = pl.store(dst, [0, 0], out)
        return out

    @pl.jit
    def e(a: pl.Tensor[[32, 64], pl.FP32], b: pl.Tensor[[32, 64], pl.FP32], x: pl.Tensor[[4, 16, 32], pl.FP32],
          out: pl.Out[pl.Tensor[[32, 128], pl.FP32]], o2: pl.Out[pl.Tensor[[16, 128], pl.FP32]]):
        out = k(a, b, out)
        o2 = in_loop(x, o2)
        return out, o2

    a, b, x = torch.randn(32, 64), torch.randn(32, 64), torch.randn(4, 16, 32)
    out, o2 = _nan(32, 128), _nan(16, 128)
    e(a, b, x, out, o2)
    torch.testing.assert_close(out, torch.cat([(a + b) * a - b / 2, 1 + a * 2], 1))
    torch.testing.assert_close(o2, torch.cat(list(x.exp()), 1))


def test_syntax_tile_subscript_write_errors():
    def kernel(write):
        @pl.jit
        def k(a: pl.Tensor[[16, 64], pl.FP32], out: pl.Out[pl.Tensor[[16, 128], pl.FP32]]):
            with pl.at(level=pl.Level.CORE_GROUP):
                t = pl.load(a, [0, 0], [16, 64])
                dst = pl.full([16, 128], dtype=pl.FP32, value=0.0)
                dst = write(dst, t)
                out = pl.store(dst, [0, 0], out)
            return out

        k.compile()

    def aliased(dst, t):
        alias = dst
        alias[:, 0:64] = t
        return dst

    def wrong_shape(dst, t):
        dst[:, 0:32] = t
        return dst

    def wrong_dtype(dst, t):
        dst[:, 0:64] = pl.cast(t, pl.FP16)
        return dst

    with pytest.raises(PtoCompileError, match="no one name to rebind; write dst = pl.assemble"):
        kernel(aliased)
    with pytest.raises(PtoCompileError, match=r"shape \[16, 64\] is not the window's \[16, 32\]"):
        kernel(wrong_shape)
    with pytest.raises(PtoCompileError, match="dtype FP16 is not the tile's FP32"):
        kernel(wrong_dtype)


def test_syntax_element_read_of_a_tile_and_a_tensor():
    @pl.jit.incore
    def k(idx: pl.Tensor[[4, 8], pl.INT32], x: pl.Tensor[[64, 32], pl.FP32],
          out: pl.Out[pl.Tensor[[16, 32], pl.FP32]]):
        ti = pl.load(idx, [0, 0], [4, 8])
        for j in pl.range(4):
            r = ti[j, 3]  # pl.tile.read(ti, [j, 3])
            c = idx[j, 5]  # pl.tensor.read(idx, [j, 5])
            out = pl.store(pl.add(pl.load(x, [r, 0], [4, 32]), pl.cast(c, pl.FP32)), [j * 4, 0], out)
        return out

    @pl.jit
    def e(idx: pl.Tensor[[4, 8], pl.INT32], x: pl.Tensor[[64, 32], pl.FP32],
          out: pl.Out[pl.Tensor[[16, 32], pl.FP32]]):
        return k(idx, x, out)

    idx, x, out = torch.randint(0, 60, (4, 8), dtype=torch.int32), torch.randn(64, 32), _nan(16, 32)
    e(idx, x, out)
    ref = torch.cat([x[int(idx[j, 3]):int(idx[j, 3]) + 4] + float(idx[j, 5]) for j in range(4)])
    torch.testing.assert_close(out, ref)


# --- ops/00-dispatch.md: pl.* dispatches, pl.tensor.* / pl.tile.* by name, path-specific keywords ----


def test_dispatch_namespaces_and_scalar_forms():
    @pl.jit
    def k(a: pl.Tensor[[32, 64], pl.FP32], b: pl.Tensor[[32, 64], pl.FP32],
          o1: pl.Out[pl.Tensor[[32, 64], pl.FP32]], o2: pl.Out[pl.Tensor[[32, 64], pl.FP32]],
          o3: pl.Out[pl.Tensor[[32, 128], pl.FP32]]):
        tmp = pl.create_tensor([32, 64], dtype=pl.FP32)
        with pl.at(level=pl.Level.CORE_GROUP):
            o1[:] = pl.tensor.add(pl.tensor.mul(a, 2.0), b)
            t = pl.tile.maximums(pl.tile.muls(pl.tile.adds(pl.tile.load(b, [0, 0], [32, 64]), 1.0), 3.0), 0.5)
            o2 = pl.tile.store(t, [0, 0], o2)
            tmp[:] = pl.exp(a)
        with pl.at(level=pl.Level.CORE_GROUP):
            o3 = pl.assemble(o3, pl.load(tmp, [0, 0], [32, 64]), [0, 0])
            o3 = pl.assemble(o3, pl.load(a, [0, 0], [32, 64]), [0, 64])
        return o1, o2, o3

    a, b = torch.randn(32, 64), torch.randn(32, 64)
    o1, o2, o3 = _nan(32, 64), _nan(32, 64), _nan(32, 128)
    k(a, b, o1, o2, o3)
    torch.testing.assert_close(o1, 2 * a + b)
    torch.testing.assert_close(o2, torch.clamp((b + 1) * 3, min=0.5))
    torch.testing.assert_close(o3, torch.cat([a.exp(), a], 1))
    assert pl.load is pl.tile.load and pl.store is pl.tile.store and pl.move is pl.tile.move


def test_dispatch_tensor_keyword_on_tiles_is_a_type_error():
    @pl.jit
    def k(a: pl.Tensor[[32, 32], pl.FP16], b: pl.Tensor[[48, 32], pl.FP16],
          out: pl.Out[pl.Tensor[[32, 48], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            out[:] = pl.matmul(a, b, a_trans=False, b_trans=True, out_dtype=pl.FP32)  # tensors: honoured
        return out

    a, b, out = torch.randn(32, 32, dtype=torch.float16), torch.randn(48, 32, dtype=torch.float16), _nan(32, 48)
    k(a, b, out)
    torch.testing.assert_close(out, a.float() @ b.float().T, rtol=1e-3, atol=1e-3)

    @pl.jit
    def tiles(a: pl.Tensor[[32, 32], pl.FP16], out: pl.Out[pl.Tensor[[32, 32], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            ta = pl.load(a, [0, 0], [32, 32], target_memory=pl.Mem.Mat)
            left, right = pl.move(ta, target_memory=pl.Mem.Left), pl.move(ta, target_memory=pl.Mem.Right)
            out = pl.store(pl.matmul(left, right, b_trans=True), [0, 0], out)
        return out

    with pytest.raises(TypeError, match="b_trans=True takes tensor operands .*pl.tile.transpose_view") as ei:
        tiles.compile()
    assert isinstance(ei.value, PtoCompileError)


# --- execution/00-compile.md, 01-run.md: the CompiledProgram contract, ChipWorker, DeviceTensor -------


def test_execution_compiled_program_and_chip_worker(tmp_path):
    from pypto_async.runtime import ChipWorker, RunConfig

    @pl.jit
    def add(a: pl.Tensor, b: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.store(pl.add(pl.load(a, [0, 0], [64, 64]), pl.load(b, [0, 0], [64, 64])), [0, 0], out)
        return out

    cfg = RunConfig(platform="sim")
    A, B = torch.randn(64, 64), torch.randn(64, 64)
    compiled = add.compile(A, B, torch.zeros(64, 64), config=cfg)
    assert compiled.platform == cfg.platform and compiled.param_names == ["a", "b", "out"]
    assert compiled.output_indices == [2] and compiled.has_return
    saved = ir.compile(add.lower(A, B, torch.zeros(64, 64)), platform="sim", output_dir=tmp_path, dump_passes=True)
    assert (tmp_path / "passes_dump").is_dir()
    rebuilt = type(saved).from_dir(tmp_path)
    assert rebuilt.program is None
    with ChipWorker(config=cfg) as w:
        resident = w.alloc_tensor((64, 64), torch.float32, init=B)  # stays on the device
        result = w.alloc_tensor((64, 64), torch.float32)
        for _ in range(2):
            out = _nan(64, 64)
            w.run(rebuilt, A, resident, out)
            torch.testing.assert_close(out, A + B)
        w.run(saved, A, resident, result)
        host = _nan(64, 64)
        w.copy_from(host.data_ptr(), result.data_ptr, result.nbytes)  # a DeviceTensor is not copied back
        torch.testing.assert_close(host, A + B)
        handle = w.register(saved)
        out = _nan(64, 64)
        handle(A, B, out)
        torch.testing.assert_close(out, A + B)
        w.free_tensor(resident)
        w.free_tensor(result)


# --- tasks/*.md: inferred edges, deps= on regions and SPMD, manual scopes, TaskId arrays ---------------


@pytest.mark.slow
def test_tasks_jit_regions_with_deps_and_opt_outs():
    @pl.jit
    def staged(x: pl.Tensor[[256, 128], pl.FP32], scratch: pl.Out[pl.Tensor[[256, 128], pl.FP32]],
               out: pl.Out[pl.Tensor[[256, 128], pl.FP32]], o3: pl.Out[pl.Tensor[[256, 128], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP) as first:
            scratch[:] = pl.add(x, x)
        with pl.at(level=pl.Level.CORE_GROUP, deps=[first]) as second:
            out[:] = pl.add(scratch, scratch)
        with pl.spmd(4, name_hint="third", deps=[second]) as third:  # noqa: F841 (deps= needs the as form)
            i = pl.tile.get_block_idx()
            o3 = pl.store(pl.sub(pl.load(out, [i * 64, 0], [64, 128]), pl.load(x, [i * 64, 0], [64, 128])),
                          [i * 64, 0], o3)
        return scratch, out, o3

    x = torch.randn(256, 128)
    scratch, out, o3 = _nan(256, 128), _nan(256, 128), _nan(256, 128)
    staged(x, scratch, out, o3)
    torch.testing.assert_close(out, 4 * x)
    torch.testing.assert_close(o3, 3 * x)

    @pl.jit
    def narrow(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        for i in pl.range(4):
            with pl.at(level=pl.Level.CORE_GROUP, no_dep_args=[out]):
                pl.store(pl.mul(pl.load(a, [i * 32, 0], [32, 64]), 2.0), [i * 32, 0], out)
        return out

    @pl.jit
    def manual(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        t = pl.create_tensor([128, 64], dtype=pl.FP32, manual_dep=True)
        with pl.manual_scope():
            with pl.at(level=pl.Level.CORE_GROUP) as p:
                t[:] = pl.mul(a, 2.0)
            with pl.at(level=pl.Level.CORE_GROUP, deps=[p]):
                out[:] = pl.load(t, [0, 0], [128, 64])
        return out

    a = torch.randn(128, 64)
    for kernel in (narrow, manual):
        out = _nan(128, 64)
        kernel(a, out)
        torch.testing.assert_close(out, 2 * a)


@pytest.mark.slow
def test_tasks_program_fan_in_spmd_submit_and_task_dummy():
    @pl.program
    class P:
        @pl.function(type=pl.FunctionType.InCore)
        def producer(self, data: pl.Tensor[[128, 64], pl.FP32], branch: pl.Scalar[pl.INDEX],
                     out: pl.InOut[pl.Tensor[[128, 64], pl.FP32]]):
            out = pl.store(pl.exp(pl.load(data, [branch * 32, 0], [32, 64])), [branch * 32, 0], out)
            return out

        @pl.function(type=pl.FunctionType.InCore)
        def consumer(self, src: pl.Tensor[[128, 64], pl.FP32], out: pl.Out[pl.Tensor[[128, 64], pl.FP32]]):
            out = pl.store(pl.mul(pl.load(src, [0, 0], [128, 64]), 2.0), [0, 0], out)
            return out

        @pl.function(type=pl.FunctionType.InCore)
        def blockwise(self, src: pl.Tensor[[128, 64], pl.FP32], out: pl.Out[pl.Tensor[[128, 64], pl.FP32]]):
            i = pl.tile.get_block_idx()
            out = pl.store(pl.add(pl.load(src, [i * 16, 0], [16, 64]), 1.0), [i * 16, 0], out)
            return out

        @pl.function(type=pl.FunctionType.Orchestration)
        def entry(self, data: pl.Tensor[[128, 64], pl.FP32], mid: pl.InOut[pl.Tensor[[128, 64], pl.FP32]],
                  out: pl.Out[pl.Tensor[[128, 64], pl.FP32]], o2: pl.Out[pl.Tensor[[128, 64], pl.FP32]],
                  o3: pl.Out[pl.Tensor[[128, 64], pl.FP32]]):
            with pl.manual_scope():
                tids = pl.array.create(4, pl.TASK_ID)
                for branch in pl.parallel(4):
                    mid, tid = pl.submit(self.producer, data, branch, mid)
                    tids[branch] = tid
                out, t2 = pl.submit(self.consumer, mid, out, deps=[tids])
                o2, t3 = pl.spmd_submit(self.blockwise, out, o2, core_num=8, deps=[t2])
                gate = pl.system.task_dummy(deps=[t2, t3])
                o3, _ = pl.submit(self.consumer, o2, o3, deps=[gate])
            return mid, out, o2, o3

    data, mid = torch.randn(128, 64), torch.zeros(128, 64)
    out, o2, o3 = _nan(128, 64), _nan(128, 64), _nan(128, 64)
    ir.compile(P, platform="sim")(data, mid, out, o2, o3)
    torch.testing.assert_close(out, 2 * data.exp())
    torch.testing.assert_close(o2, 2 * data.exp() + 1)
    torch.testing.assert_close(o3, 2 * (2 * data.exp() + 1))


# --- tutorials/*.md: softmax over a partial tile, K-blocked and mixed matmul ---------------------------


def test_tutorial_softmax_over_a_runtime_valid_width():
    @pl.jit
    def softmax(a: pl.Tensor[[64, 64], pl.FP32], out: pl.Out[pl.Tensor[[64, 64], pl.FP32]],
                vlen: pl.Scalar[pl.INDEX]):
        with pl.at(level=pl.Level.CORE_GROUP):
            tile_a = pl.fillpad(pl.load(a, [0, 0], [64, 64], valid_shape=[64, vlen]), pad_value=pl.PadValue.min)
            max_tmp = pl.create_tile([64, 64], dtype=pl.FP32, target_memory=pl.MemorySpace.Vec)
            row_max: pl.Tile[[64, 1], pl.FP32] = pl.row_max(tile_a, max_tmp)
            exp_shifted = pl.exp(pl.row_expand_sub(tile_a, row_max))
            sum_tmp = pl.create_tile([64, 64], dtype=pl.FP32, target_memory=pl.MemorySpace.Vec)
            row_sum: pl.Tile[[64, 1], pl.FP32] = pl.row_sum(exp_shifted, sum_tmp)
            pl.store(pl.row_expand_div(exp_shifted, row_sum), [0, 0], out)
        return out

    for vlen in (64, 40):
        a, out = torch.randn(64, 64), _nan(64, 64)
        softmax(a, out, vlen)
        torch.testing.assert_close(out[:, :vlen], torch.softmax(a[:, :vlen], dim=1))


@pytest.mark.slow
def test_tutorial_k_blocked_and_mixed_matmul():
    @pl.jit
    def k_blocked(a: pl.Tensor[[64, 256], pl.FP16], b: pl.Tensor[[256, 64], pl.FP16],
                  bias: pl.Tensor[[64, 64], pl.FP32], c: pl.Out[pl.Tensor[[64, 64], pl.FP32]],
                  d: pl.Out[pl.Tensor[[64, 64], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP, name_hint="k_blocked"):
            acc = pl.matmul(a[:, 0:64], b[0:64, :], out_dtype=pl.FP32)
            for k in pl.range(1, 4):
                acc = pl.matmul_acc(acc, a[:, k * 64:k * 64 + 64], b[k * 64:k * 64 + 64, :])
            c[:] = acc
        with pl.at(level=pl.Level.CORE_GROUP, name_hint="mixed",
                   optimizations=[pl.split(pl.SplitMode.UP_DOWN), pl.cross_core_slot(slot_num=4)]):
            d[:] = pl.add(pl.matmul(a, b, out_dtype=pl.FP32), bias)
        return c, d

    a, b = torch.randn(64, 256, dtype=torch.float16), torch.randn(256, 64, dtype=torch.float16)
    bias, c, d = torch.randn(64, 64), _nan(64, 64), _nan(64, 64)
    k_blocked(a, b, bias, c, d)
    ref = a.float() @ b.float()
    torch.testing.assert_close(c, ref, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(d, ref + bias, rtol=1e-3, atol=1e-3)


# --- precision/*.md: casts bit for bit, rounding modes, torch_codegen, a probe output ------------------


def test_precision_casts_and_modes():
    @pl.jit
    def casts(v: pl.Tensor[[16, 128], pl.INT32], x: pl.Tensor[[16, 64], pl.FP32],
              h: pl.Out[pl.Tensor[[16, 128], pl.FP16]], fl: pl.Out[pl.Tensor[[16, 64], pl.INT32]],
              ce: pl.Out[pl.Tensor[[16, 64], pl.INT32]], tr: pl.Out[pl.Tensor[[16, 64], pl.INT32]],
              bf: pl.Out[pl.Tensor[[16, 64], pl.BF16]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            h[:] = pl.cast(v, pl.FP16)
            t = pl.load(x, [0, 0], [16, 64])
            fl = pl.store(pl.cast(t, pl.INT32, mode="floor"), [0, 0], fl)
            ce = pl.store(pl.cast(t, pl.INT32, mode="ceil"), [0, 0], ce)
            tr = pl.store(pl.cast(t, pl.INT32, mode="trunc"), [0, 0], tr)
            bf = pl.store(pl.cast(t, pl.BF16), [0, 0], bf)
        return h, fl, ce, tr, bf

    v = torch.randint(-70000, 70000, (16, 128), dtype=torch.int32)
    v[0, :8] = torch.tensor([65505, 65519, 65520, 70000, 1 << 24, (1 << 24) + 1, -65519, -65520])
    x = torch.randn(16, 64) * 10
    h = torch.zeros(16, 128, dtype=torch.float16)
    ints = [torch.full((16, 64), -999, dtype=torch.int32) for _ in range(3)]
    bf = torch.zeros(16, 64, dtype=torch.bfloat16)
    casts(v, x, h, *ints, bf)
    assert torch.equal(h.view(torch.int16), v.to(torch.float16).view(torch.int16))
    for got, f in zip(ints, (torch.floor, torch.ceil, torch.trunc)):
        torch.testing.assert_close(got, f(x).int(), rtol=0, atol=0)
    torch.testing.assert_close(bf, x.to(torch.bfloat16), rtol=0, atol=0)


def test_precision_torch_codegen_and_probe_output():
    from pypto_async.debug import torch_codegen

    @pl.jit
    def fused(a: pl.Tensor[[64, 128], pl.FP32], b: pl.Tensor[[64, 128], pl.FP32],
              out: pl.Out[pl.Tensor[[64, 128], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            out[:] = pl.mul(pl.add(a, b), 2.0)
        return out

    a, b = torch.randn(64, 128), torch.randn(64, 128)
    src = torch_codegen(fused.lower(a, b, torch.zeros(64, 128)), check_shapes=True)
    assert "def " in src and "torch" in src

    @pl.jit.incore
    def probed(x: pl.Tensor, out: pl.Out[pl.Tensor], probe: pl.Out[pl.Tensor]):
        acc = pl.add(pl.load(x, [0, 0], [64, 128]), 1.0)
        probe = pl.store(acc, [0, 0], probe)  # the intermediate, now inspectable
        out = pl.store(pl.exp(acc), [0, 0], out)
        return out, probe

    @pl.jit
    def entry(x: pl.Tensor, out: pl.Out[pl.Tensor], probe: pl.Out[pl.Tensor]):
        out, probe = probed(x, out, probe)
        return out, probe

    out, probe = _nan(64, 128), _nan(64, 128)
    entry(a, out, probe)
    torch.testing.assert_close(probe, a + 1)
    torch.testing.assert_close(out, (a + 1).exp())
