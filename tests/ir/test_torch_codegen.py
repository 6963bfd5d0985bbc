"""pypto_async.debug.torch_codegen: a PyTorch reference generated from a kernel's IR computes what the kernel does.

Each kernel runs on the sim and its generated torch function runs on the same
random inputs (outputs poisoned with NaN in both); the results agree.
"""

from __future__ import annotations

import numpy as np
import pytest

import pypto_async.language as pl
from pypto_async import ir
from pypto_async.debug import torch_codegen
from pypto_async.errors import PtoArgumentError, PtoNotSupported

from helpers.ir_fixtures import poison
from helpers.tiers import tiered
from .test_python import KERNELS, _args

torch = pytest.importorskip("torch")


@pl.jit
def regions(a: pl.Tensor, b: pl.Tensor, n: pl.Scalar[pl.FP32], out: pl.Out[pl.Tensor], s: pl.Out[pl.Tensor]):
    for i in pl.range(2):
        with pl.at(level=pl.Level.CORE_GROUP):
            t = pl.load(a, [i * 32, 0], [32, 64])
            u = pl.load(b, [i * 32, 0], [32, 64])
            m = pl.maximum(pl.add(pl.mul(t, n), u), 0.0)
            pl.store(pl.exp(m), [i * 32, 0], out)
            pl.store(pl.row_sum(m), [i * 32, 0], s)
    return out, s


@pl.jit
def half(a: pl.Tensor, out: pl.Out[pl.Tensor]):
    t = pl.load(a, [0, 0], [16, 32])
    pl.store(pl.cast(pl.sqrt(pl.abs(pl.cast(t, pl.FP32))), pl.FP16), [0, 0], out)
    return out


@pl.program
class Chain:
    @pl.function(type=pl.FunctionType.InCore)
    def double(self, x: pl.Tensor[[32, 32], pl.FP32], y: pl.Out[pl.Tensor[[32, 32], pl.FP32]]):
        pl.store(pl.mul(pl.load(x, [0, 0], [32, 32]), 2.0), [0, 0], y)
        return y

    @pl.function(type=pl.FunctionType.InCore)
    def shift(self, y: pl.Tensor[[32, 32], pl.FP32], z: pl.Out[pl.Tensor[[32, 32], pl.FP32]]):
        pl.store(pl.add(pl.load(y, [0, 0], [32, 32]), 1.0), [0, 0], z)
        return z

    @pl.function(type=pl.FunctionType.Orchestration)
    def main(self, x: pl.Tensor[[32, 32], pl.FP32], z: pl.Out[pl.Tensor[[32, 32], pl.FP32]]):
        y = pl.create_tensor([32, 32], dtype=pl.FP32)
        y = self.double(x, y)
        z = self.shift(y, z)
        return z


def _copy(args):
    return [np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in args]


def _reference(program, args):
    code = torch_codegen(program, check_shapes=True)
    ns: dict = {}
    exec(compile(code, f"<torch_codegen {program.name}>", "exec"), ns)  # noqa: S102 - the generated reference
    targs = [torch.from_numpy(a) if isinstance(a, np.ndarray) else a for a in args]
    ns[program.name](*targs)
    return code


def _check(program, launcher, compiled, args, rtol=1e-5, atol=1e-4):
    sim, ref = _copy(args), _copy(args)
    launcher.run(compiled, *sim)
    _reference(program, ref)
    outs = [i for i, p in enumerate(program.params) if p.direction in ("out", "inout")]
    for i in outs:
        assert not np.isnan(np.asarray(sim[i], dtype=np.float64)).all()
        np.testing.assert_allclose(np.asarray(ref[i], np.float64), np.asarray(sim[i], np.float64), rtol=rtol,
                                   atol=atol, equal_nan=True)


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_the_reference_computes_what_the_kernel_does(launcher, rng, name):
    kernel, args = KERNELS[name], _args(rng)[name]
    _check(kernel.lower(*args), launcher, kernel.compile(*args), args)


def test_regions_scalars_and_reductions(launcher, rng):
    a = rng.standard_normal((64, 64)).astype(np.float32)
    b = rng.standard_normal((64, 64)).astype(np.float32)
    args = (a, b, 0.5, poison((64, 64)), poison((64, 1)))
    program = regions.lower(*args)
    _check(program, launcher, regions.compile(*args), args)
    # The traced program (before the passes) generates the same computation.
    _check(regions.trace(*args), launcher, regions.compile(*args), args)


def test_half_precision_rounds_as_the_kernel_does(launcher, rng):
    a = rng.standard_normal((16, 32)).astype(np.float16)
    args = (a, poison((16, 32), np.float16))
    _check(half.lower(*args), launcher, half.compile(*args), args, rtol=0, atol=0)  # the same roundings


def test_a_program_class_and_its_intermediates(launcher, rng):
    x = rng.standard_normal((32, 32)).astype(np.float32)
    z = poison((32, 32))
    ref = [x.copy(), poison((32, 32))]
    code = _reference(Chain.trace(), ref)
    assert "def Chain(x, z):" in code
    ir.compile(Chain)(x, z)
    np.testing.assert_allclose(ref[1], z, rtol=1e-6)
    np.testing.assert_allclose(z, 2 * x + 1, rtol=1e-6)


@pytest.mark.slow
def test_a_program_class_generates_its_orchestration_by_name(rng):
    code = torch_codegen(Chain, check_shapes=True)  # PyPTO's code calls ns["<orchestration name>"]
    ns: dict = {}
    exec(compile(code, "<torch_codegen Chain>", "exec"), ns)  # noqa: S102 - the generated reference
    assert ns["main"] is ns["Chain"]
    x = torch.from_numpy(rng.standard_normal((32, 32)).astype(np.float32))
    z = torch.full((32, 32), float("nan"))
    ns["main"](x, z)
    torch.testing.assert_close(z, 2 * x + 1)
    # A program traced or lowered from the class keeps its entry's name (PyPTO generates from the pass output).
    from pypto_async.ir.pass_manager import OptimizationStrategy, PassManager

    lowered = PassManager.get_strategy(OptimizationStrategy.Default).run_passes(Chain)
    ns = {}
    exec(compile(torch_codegen(lowered, check_shapes=True), "<torch_codegen lowered>", "exec"), ns)  # noqa: S102
    z = torch.full((32, 32), float("nan"))
    ns["main"](x, z)
    torch.testing.assert_close(z, 2 * x + 1)


@pl.program
class ReadSized:
    """A float read by the orchestration (ScalarBits) and an extent read at run time, unified (ICheck)."""

    @pl.function(type=pl.FunctionType.InCore)
    def scaled(self, x: pl.Tensor[[8, 32], pl.FP32], y: pl.Out[pl.Tensor[[8, 32], pl.FP32]],
               a: pl.Scalar[pl.FP32]):
        return pl.store(pl.mul(pl.load(x, [0, 0], [8, 32]), a), [0, 0], y)

    @pl.function(type=pl.FunctionType.Orchestration)
    def main(self, cfg: pl.Tensor[[1], pl.INT32], scale: pl.Tensor[[1], pl.FP32], x: pl.Tensor[[8, 32], pl.FP32],
             z: pl.Out[pl.Tensor[[8, 32], pl.FP32]]):
        cols = pl.read(cfg, [0])
        return self.scaled(pl.slice(x, [8, cols], [0, 0]), z, pl.read(scale, [0]))


@pytest.mark.slow
def test_a_float_read_and_an_extent_unified_at_run_time(rng):
    x = rng.standard_normal((8, 32)).astype(np.float32)
    scale = np.array([-1.75], np.float32)
    ref = [np.array([32], np.int32), scale, x.copy(), poison((8, 32))]
    code = _reference(ReadSized.trace(), ref)
    assert "_fbits(scale[0])" in code and "_icheck(" in code
    z = poison((8, 32))
    ir.compile(ReadSized)(np.array([32], np.int32), scale, x, z)
    np.testing.assert_allclose(ref[3], z, rtol=1e-6)
    np.testing.assert_allclose(z, x * scale[0], rtol=1e-6)
    with pytest.raises(ValueError, match="'x' of scaled: extent 1 read at run time is not 32"):
        _reference(ReadSized.trace(), [np.array([16], np.int32), scale, x.copy(), poison((8, 32))])


def test_check_shapes_rejects_a_wrong_argument(rng):
    a = rng.standard_normal((64, 64)).astype(np.float32)
    program = regions.lower(a, a, 0.5, poison((64, 64)), poison((64, 1)))
    ns: dict = {}
    exec(torch_codegen(program, check_shapes=True), ns)  # noqa: S102 - the generated reference
    with pytest.raises(ValueError, match=r"out: expected \[64, 64\] torch.float32"):
        ns["regions"](torch.zeros(64, 64), torch.zeros(64, 64), 0.5, torch.zeros(64, 32), torch.zeros(64, 1))
    assert "_check('out'" not in torch_codegen(program)


def test_an_ir_function_generates_its_program_and_bad_input_is_refused(rng):
    a = rng.standard_normal((64, 64)).astype(np.float32)
    program = regions.lower(a, a, 0.5, poison((64, 64)), poison((64, 1)))
    assert torch_codegen(program.functions["regions_incore_0"]) == torch_codegen(program)
    with pytest.raises(PtoArgumentError, match="torch_codegen takes"):
        torch_codegen("not a program")
    odd = ir.Program("odd", program.params, (object(),))
    with pytest.raises(PtoNotSupported, match="statement object"):
        torch_codegen(odd)


@tiered("mode", ["round", "rint", "floor", "ceil", "trunc", "none"], fast=["rint", "trunc"])
def test_narrowing_casts_round_as_the_kernel_does(launcher, rng, mode):
    @pl.jit
    def narrow(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        pl.store(pl.cast(pl.load(a, [0, 0], [16, 64]), pl.FP16, mode=mode), [0, 0], out)
        return out

    a = (rng.standard_normal((16, 64)) * 4).astype(np.float32)
    a[0, :4] = [0.5 + 2.0**-12, -(0.5 + 2.0**-12), 1.0 + 2.0**-11, 2048.0 + 1.0]  # ties of FP16
    args = (a, poison((16, 64), np.float16))
    _check(narrow.lower(*args), launcher, narrow.compile(*args), args, rtol=0, atol=0)


# ---- every node kind of the IR (issue 29): the newer ones, each against the sim ------------------------

R, C = 16, 64


@pl.jit
def int_ops(a: pl.Tensor, b: pl.Tensor, n: pl.Tensor, q: pl.Out[pl.Tensor], r: pl.Out[pl.Tensor],
            bits: pl.Out[pl.Tensor], sh: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        ta, tb, tn = pl.load(a, [0, 0], [R, C]), pl.load(b, [0, 0], [R, C]), pl.load(n, [0, 0], [R, C])
        pl.store(pl.div(ta, tb), [0, 0], q)
        pl.store(pl.rem(ta, tb), [0, 0], r)
        pl.store(pl.xor(pl.or_(pl.and_(ta, tb), pl.ands(tn, 6)), pl.not_(tb)), [0, 0], bits)
        pl.store(pl.add(pl.shl(ta, tn), pl.shr(ta, tn)), [0, 0], sh)
    return q, r, bits, sh


@pl.jit
def float_ops(a: pl.Tensor, b: pl.Tensor, w: pl.Tensor, bias: pl.Tensor, r: pl.Out[pl.Tensor],
              p: pl.Out[pl.Tensor], t: pl.Out[pl.Tensor], mb: pl.Out[pl.Tensor], gv: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        ta, tb = pl.load(a, [0, 0], [R, C]), pl.load(b, [0, 0], [R, C])
        pl.store(pl.rem(ta, tb), [0, 0], r)
        pl.store(pl.prelu(ta, tb), [0, 0], p)
        pl.store(pl.transpose(ta), [0, 0], t)
    with pl.at(level=pl.Level.CORE_GROUP):
        x = pl.load(a, [0, 0], [R, C], target_memory=pl.Mem.Mat)
        y = pl.load(w, [0, 0], [C, 32], target_memory=pl.Mem.Mat)
        tbias = pl.load(bias, [0, 0], [1, 32])
        pl.store(pl.matmul_bias(pl.move(x, target_memory=pl.Mem.Left), pl.move(y, target_memory=pl.Mem.Right),
                                tbias), [0, 0], mb)
        row = pl.load(a, [0, 0], [1, C], target_memory=pl.Mem.Mat)
        pl.store(pl.gemv_bias(pl.move(row, target_memory=pl.Mem.Left), pl.move(y, target_memory=pl.Mem.Right),
                              tbias, acc_phase="final"), [0, 0], gv)
    return r, p, t, mb, gv


def _cmp_sel_kernel(cmp_type):
    @pl.jit
    def cmp_sel(a: pl.Tensor, b: pl.Tensor, mask: pl.Out[pl.Tensor], y: pl.Out[pl.Tensor], ys: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            ta, tb = pl.load(a, [0, 0], [R, C]), pl.load(b, [0, 0], [R, C])
            m = pl.cmp(ta, tb, cmp_type=cmp_type)
            pl.store(pl.fillpad(m), [0, 0], mask)
            pl.store(pl.sel(m, ta, tb), [0, 0], y)
            pl.store(pl.sels(pl.cmps(ta, 0.25, cmp_type=cmp_type), ta, None, -9.0), [0, 0], ys)
        return mask, y, ys

    return cmp_sel


@pl.jit
def runtime_scalars(data: pl.Tensor, cfg: pl.Tensor, out: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        n = pl.read(cfg, [0])
        flag = pl.read(cfg, [1])
        acc = pl.full([R, C], dtype=pl.FP32, value=0.0)
        for i in pl.range(n):
            acc = pl.add(acc, pl.load(data, [i * R, 0], [R, C]))
        if flag > 2:
            pl.store(pl.mul(acc, 2.0), [0, 0], out)
        else:
            pl.store(pl.neg(acc), [0, 0], out)
    return out


def _ints(rng, shape, lo=-1000, hi=1000):
    return rng.integers(lo, hi, size=shape).astype(np.int32)


def test_integer_div_rem_bitwise_and_shifts(launcher, rng):
    a, b = _ints(rng, (R, C)), _ints(rng, (R, C), -40, 40)
    b[0, :8] = [0, -1, 0, -1, 1, 7, -7, 3]  # by zero and by -1: 0, as the kernel's
    n = _ints(rng, (R, C), -3, 40)  # shifts out of range (negative, the width or more) included
    args = (a, b, n, *(poison((R, C), np.int32) for _ in range(4)))
    _check(int_ops.lower(*args), launcher, int_ops.compile(*args), args, rtol=0, atol=0)


@pytest.mark.slow
def test_float_rem_prelu_transpose_matmul_bias_and_gemv(launcher, rng):
    a = (rng.standard_normal((R, C)) * 10).astype(np.float32)
    b = (rng.uniform(0.5, 3, size=(R, C)) * rng.choice([-1, 1], size=(R, C))).astype(np.float32)
    w = rng.standard_normal((C, 32)).astype(np.float32)
    bias = rng.standard_normal((1, 32)).astype(np.float32)
    args = (a, b, w, bias, poison((R, C)), poison((R, C)), poison((C, R)), poison((R, 32)), poison((1, 32)))
    _check(float_ops.lower(*args), launcher, float_ops.compile(*args), args)


@tiered("cmp_type", range(6), fast=[0, 3])
def test_compare_masks_and_select(launcher, rng, cmp_type):
    a = rng.standard_normal((R, C)).astype(np.float32)
    b = rng.standard_normal((R, C)).astype(np.float32)
    b[::3] = a[::3]  # equal elements
    a[1, :5] = np.nan  # NaN compares unequal to everything
    kernel = _cmp_sel_kernel(cmp_type)
    args = (a, b, poison((R, 32), np.uint8), poison((R, C)), poison((R, C)))
    _check(kernel.lower(*args), launcher, kernel.compile(*args), args, rtol=0, atol=0)


@pytest.mark.parametrize("cfg", [(3, 5), (2, 0), (0, 9)])
def test_read_values_bound_loops_and_branches(launcher, rng, cfg):
    data = rng.standard_normal((4 * R, C)).astype(np.float32)
    args = (data, np.array(cfg, np.int32), poison((R, C)))
    program = runtime_scalars.lower(*args)
    code = _reference(program, _copy(args))
    assert "int(cfg[0])" in code and "# if branch" in code and "# else branch" in code
    _check(program, launcher, runtime_scalars.compile(*args), args)


def test_odd_rounding_narrows_as_the_kernel_does(launcher, rng):
    @pl.jit
    def narrow(a: pl.Tensor, h: pl.Out[pl.Tensor], bf: pl.Out[pl.Tensor[[R, C], pl.BF16]]):
        t = pl.load(a, [0, 0], [R, C])
        pl.store(pl.cast(t, pl.FP16, mode="odd"), [0, 0], h)
        pl.store(pl.cast(t, pl.BF16, mode="odd"), [0, 0], bf)
        return h, bf

    a = (rng.standard_normal((R, C)) * 4).astype(np.float32)
    a[0, :3] = [1.0, 0.5 + 2.0**-12, 2048.0 + 1.0]  # exact, and ties of FP16
    args = (a, poison((R, C), np.float16), poison((R, C), np.uint16))
    code = torch_codegen(narrow.lower(*args))
    sim = _copy(args)
    launcher.run(narrow.compile(*args), *sim)
    ref = [torch.from_numpy(a), torch.from_numpy(poison((R, C), np.float16)), torch.zeros(R, C, dtype=torch.bfloat16)]
    ns: dict = {}
    exec(code, ns)  # noqa: S102 - the generated reference
    ns["narrow"](*ref)
    np.testing.assert_array_equal(ref[1].numpy(), sim[1])
    np.testing.assert_array_equal(ref[2].view(torch.uint16).numpy(), sim[2])


def _kinds(node, out: set) -> set:
    """Every IR node class reachable from `node` (dataclass fields, tuples)."""
    import dataclasses

    if isinstance(node, (tuple, list)):
        for x in node:
            _kinds(x, out)
    elif dataclasses.is_dataclass(node) and not isinstance(node, type):
        out.add(type(node))
        for f in dataclasses.fields(node):
            _kinds(getattr(node, f.name), out)
    return out


@pl.jit
def _reinterpret(x: pl.Tensor, y: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        pl.store(pl.reinterpret_view(pl.load(x, [0, 0], [8, 16]), pl.INT16), [0, 0], y)


def test_reinterpret_view_has_a_torch_form(launcher, rng):
    x = rng.standard_normal((8, 16)).astype(np.float32)
    _check(_reinterpret.lower(x, poison((8, 32), np.int16)), launcher,
           _reinterpret.compile(x, poison((8, 32), np.int16)), [x, poison((8, 32), np.int16)], rtol=0, atol=0)


@pl.jit
def index_ops(a: pl.Tensor, ix: pl.Tensor, pairs: pl.Out[pl.Tensor], arg: pl.Out[pl.Tensor], gen: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):  # Order (argmax, sorts) and Generate (arange, tri, random)
        s = pl.sort32(pl.load(a, [0, 0], [2, 64]), pl.load(ix, [0, 0], [2, 64]))
        m = pl.mrgsort(s, block_len=64)
        pl.store(pl.mrgsort(m, m), [0, 0], pairs)
        pl.store(pl.row_argmax(pl.load(a, [0, 0], [2, 64])), [0, 0], arg)
        pl.store(pl.add(pl.add(pl.arange(3, [2, 64]), pl.tri(1, [2, 64])), pl.random(1, 2, 3, 4, 5, 6, [2, 64],
                                                                                     dtype=pl.INT32)), [0, 0], gen)


@pytest.mark.slow
def test_index_ops_reference_computes_what_the_kernel_does(launcher, rng):
    a = rng.permutation(128).reshape(2, 64).astype(np.float32)
    args = (a, np.tile(np.arange(64, dtype=np.uint32), (2, 1)), poison((2, 256)), poison((2, 1), np.int32),
            poison((2, 64), np.int32))
    sim, ref = _copy(args), _copy(args)
    launcher.run(index_ops.compile(*args), *sim)
    _reference(index_ops.lower(*args), ref)
    for i in (2, 3, 4):
        np.testing.assert_array_equal(np.asarray(ref[i]).view(np.uint32), sim[i].view(np.uint32))


def test_the_kernels_here_cover_every_node_kind_of_the_ir(rng):
    """A node kind added to the IR without a test here (and a torch form) fails this."""
    import typing

    from pypto_async.ir import _nodes

    wanted = {*typing.get_args(_nodes.Expr), *typing.get_args(_nodes.Stmt), *typing.get_args(_nodes.IndexExpr),
              _nodes.Const, _nodes.ScalarRef, _nodes.Var}
    a = rng.standard_normal((64, 64)).astype(np.float32)
    i = _ints(rng, (R, C))
    f = rng.standard_normal((R, C)).astype(np.float32)
    programs = [
        regions.lower(a, a, pl.RUNTIME, poison((64, 64)), poison((64, 1))),  # scalars read at run time
        int_ops.lower(i, i, i, i, i, i, i),
        float_ops.lower(f, f, rng.standard_normal((C, 32)).astype(np.float32), f[:1, :32].copy(), f, f,
                        poison((C, R)), poison((R, 32)), poison((1, 32))),
        _cmp_sel_kernel(0).lower(f, f, poison((R, 32), np.uint8), f, f),
        runtime_scalars.lower(np.zeros((4 * R, C), np.float32), np.array([1, 1], np.int32), f),
        *(KERNELS[k].lower(*(pl.RUNTIME if isinstance(x, (int, float)) else x for x in _args(rng)[k]))
          for k in sorted(KERNELS)),
        ReadSized.trace(),
        _reinterpret.lower(f[:8, :16].copy(), poison((8, 32), np.int16)),
        index_ops.lower(a[:2], np.zeros((2, 64), np.uint32), poison((2, 256)), poison((2, 1), np.int32),
                        poison((2, 64), np.int32)),
        gathers.lower(*_gather_args(rng)),
    ]
    seen: set = set()
    for p in programs:
        _kinds(p.body, seen)
        torch_codegen(p)  # each generates
    # Index expressions appear inside tile types and loads, which _kinds walks; the rest must show.
    missing = {k.__name__ for k in wanted - seen}
    assert not missing, f"node kinds no test kernel here reaches: {sorted(missing)}"


@pl.jit
def gathers(x: pl.Tensor, i: pl.Tensor, r: pl.Tensor, o: pl.Tensor, n: pl.Tensor, y: pl.Out[pl.Tensor],
            w: pl.Out[pl.Tensor], b: pl.Out[pl.Tensor], z: pl.Out[pl.Tensor], u: pl.Out[pl.Tensor],
            m: pl.InOut[pl.Tensor]):
    xt, it = pl.load(x, [0, 0], [8, 16]), pl.load(i, [0, 0], [8, 8])
    pl.store(pl.add(pl.gather(xt, dim=1, index=it), pl.tile.gather(xt, it)), [0, 0], y)
    pl.store(pl.mgather(x, pl.load(r, [0, 0], [1, 4]), gather_oob="zero"), [0, 0], w)
    pl.store(pl.gatherb(xt, pl.load(o, [0, 0], [8, 2])), [0, 0], b)
    v = pl.load(x, [0, 0], [8, 8])
    pl.store(pl.tile.scatter(pl.scatter(xt, dim=-1, index=it, src=v), v, it), [0, 0], z)
    pl.mscatter(pl.load(x, [0, 0], [8, 2]), pl.cast(pl.load(o, [0, 0], [8, 2]), pl.INT32), m)
    with pl.at(level=pl.Level.CORE_GROUP):
        k = pl.cast(pl.read(n, [0]), pl.INDEX)
        acc = pl.scatter_update(pl.load(x, [0, 0], [8, 16]), -2, pl.load(r, [0, 0], [1, 4]),
                                pl.load(x, [4, 0], [4, 16]))
        pl.assemble(u, pl.gather_row(acc, x, [k, 0], [0, 0], [8, 16], valid_shape=[2, k + 1]), [0, 0])


def _gather_args(rng):
    x = rng.standard_normal((8, 16)).astype(np.float32)
    i = np.stack([rng.permutation(16)[:8] for _ in range(8)]).astype(np.int32)
    i[0, 0] = 40  # past the row: the gathers clamp it, the scatters fail the launch (kept in range below)
    r = np.array([[5, 1, 7, 2]], np.int32)
    o = (rng.permutation(16)[:16].reshape(8, 2) * 32).astype(np.uint32)
    return x, i, r, o, np.array([3], np.int32), poison((8, 8)), poison((4, 16)), poison((8, 16)), poison((8, 16)), \
        poison((8, 16)), rng.standard_normal(600).astype(np.float32)


@pytest.mark.slow
def test_gathers_and_scatters_reference(launcher, rng):
    args = _gather_args(rng)
    args[1][0, 0] = 3  # the scatters fail past the row: in range for the run
    _check(gathers.lower(*args), launcher, gathers.compile(*args), args)


def test_int8_matmul_and_truncating_div_match_the_kernel():
    """INT8 matmul (an INT32 product, matmul_acc adding into it) and integer pl.div (toward zero, as PyPTO's)."""
    import torch

    M, K, N = 24, 80, 40

    @pl.jit
    def k(a: pl.Tensor, b: pl.Tensor, x: pl.Tensor, y: pl.Tensor, c: pl.Out[pl.Tensor], d: pl.Out[pl.Tensor],
          q: pl.Out[pl.Tensor]):
        ta, tb = pl.load(a, [0, 0], [M, K]), pl.load(b, [0, 0], [K, N])
        pl.store(pl.matmul(ta, tb), [0, 0], c)
        acc = pl.matmul(ta, tb)
        acc = pl.matmul_acc(acc, ta, tb)
        pl.store(acc, [0, 0], d)
        pl.store(pl.div(pl.load(x, [0, 0], [M, N]), pl.load(y, [0, 0], [M, N])), [0, 0], q)

    rng = np.random.default_rng(7)
    a = torch.from_numpy(rng.integers(-128, 128, (M, K), dtype=np.int8))
    b = torch.from_numpy(rng.integers(-128, 128, (K, N), dtype=np.int8))
    x = torch.from_numpy(rng.integers(-1000, 1000, (M, N), dtype=np.int32))
    y = torch.from_numpy(rng.integers(-9, 10, (M, N), dtype=np.int32))
    c, d, q = (torch.from_numpy(poison((M, N), np.int32)) for _ in range(3))
    prog = k.compile(a, b, x, y, c, d, q).program
    ns: dict = {}
    exec(torch_codegen(prog, check_shapes=True), ns)  # noqa: S102
    ns[prog.name](a, b, x, y, c, d, q)
    want = a.long() @ b.long()
    assert torch.equal(c.long(), want) and torch.equal(d.long(), 2 * want)
    yd = torch.where(y == 0, torch.ones_like(y), y)
    assert torch.equal(q, torch.where(y == 0, 0, torch.div(x, yd, rounding_mode="trunc")).to(torch.int32))
