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


@pytest.mark.parametrize("mode", ["round", "rint", "floor", "ceil", "trunc", "none"])
def test_narrowing_casts_round_as_the_kernel_does(launcher, rng, mode):
    @pl.jit
    def narrow(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        pl.store(pl.cast(pl.load(a, [0, 0], [16, 64]), pl.FP16, mode=mode), [0, 0], out)
        return out

    a = (rng.standard_normal((16, 64)) * 4).astype(np.float32)
    a[0, :4] = [0.5 + 2.0**-12, -(0.5 + 2.0**-12), 1.0 + 2.0**-11, 2048.0 + 1.0]  # ties of FP16
    args = (a, poison((16, 64), np.float16))
    _check(narrow.lower(*args), launcher, narrow.compile(*args), args, rtol=0, atol=0)
