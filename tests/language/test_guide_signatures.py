"""PyPTO's user guide, signatures: ``kernel.compile()`` from the signature, and ``pl.dynamic`` dimensions.

Programs written in the guide's style (quickstart, language/00-types, getting started's
"compiling from the signature"), each checked against torch on random data with the outputs
poisoned first.  A ``pl.dynamic`` dimension is bound where its kernel is called: per call of a
``@pl.jit`` entry, per task call of a ``@pl.jit.incore`` helper or a program's InCore function,
and from the tensors a ``@pl.program`` is run on.
"""

from __future__ import annotations

import pytest
import torch

import pypto_async.language as pl
from pypto_async import ir
from pypto_async.errors import PtoCompileError, PtoNotSupported
from pypto_async.runtime import run

M = pl.dynamic("M")
N = pl.dynamic("N")


def _nan(*shape):
    return torch.full(shape, float("nan"))


# ---- kernel.compile() from the signature -----------------------------------------------------


@pl.jit
def add_static(
    a: pl.Tensor[[64, 128], pl.FP32],
    b: pl.Tensor[[64, 128], pl.FP32],
    out: pl.Out[pl.Tensor[[64, 128], pl.FP32]],
):
    with pl.at(level=pl.Level.CORE_GROUP):
        out[:] = pl.add(a, b)
    return out


def test_compile_with_no_arguments_reads_a_static_signature(launcher):
    compiled = add_static.compile()
    assert [(p.name, p.direction, p.shape) for p in compiled.params] == [
        ("a", "in", (64, 128)), ("b", "in", (64, 128)), ("out", "out", (64, 128))]
    assert compiled.output_dir.is_dir()
    a, b, out = torch.randn(64, 128), torch.randn(64, 128), _nan(64, 128)
    assert add_static.compile(a, b, out) is compiled  # one cache entry with the sample-tensor form
    add_static(a, b, out)
    torch.testing.assert_close(out, a + b, rtol=0, atol=0)


@pl.jit
def scale_by(x: pl.Tensor[[32, 64], pl.FP32], out: pl.Out[pl.Tensor[[32, 64], pl.FP32]], k: pl.Scalar[pl.FP32]):
    with pl.at(level=pl.Level.CORE_GROUP):
        out[:] = pl.mul(x, k)
    return out


@pytest.mark.slow
def test_compile_with_no_arguments_takes_scalars_by_keyword(launcher):
    """A literal specialises the artifact on it (it only ever sees 3.0); pl.RUNTIME leaves the value to dispatch."""
    compiled = scale_by.compile(k=3.0)
    assert [p.name for p in compiled.params] == ["x", "out", "k"]  # the parameter stays in the signature
    x, out = torch.randn(32, 64), _nan(32, 64)
    launcher.run(compiled, x, out, 3.0)
    torch.testing.assert_close(out, x * 3.0, rtol=0, atol=0)
    assert scale_by.compile(k=3.0) is compiled and scale_by.compile(k=1.5) is not compiled
    runtime = scale_by.compile(k=pl.RUNTIME)
    for k in (1.5, -2.0):
        out = _nan(32, 64)
        launcher.run(runtime, x, out, k)
        torch.testing.assert_close(out, x * k, rtol=0, atol=0)


def test_compile_with_no_arguments_needs_a_value_for_each_scalar():
    with pytest.raises(PtoCompileError, match=r"scalar parameter 'k'.*scale_by.compile\(k=\.\.\.\)"):
        scale_by.compile()


@pl.jit
def bare(x: pl.Tensor, out: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        out[:] = pl.add(x, 1.0)
    return out


@pl.jit
def dyn_entry(x: pl.Tensor[[M, 64], pl.FP32], out: pl.Out[pl.Tensor[[M, 64], pl.FP32]]):
    with pl.at(level=pl.Level.CORE_GROUP):
        out[:] = pl.add(x, 1.0)
    return out


def test_compile_with_no_arguments_needs_every_shape():
    with pytest.raises(PtoCompileError, match=r"parameter 'x' has no shape.*bare.compile\(\*tensors\)"):
        bare.compile()
    with pytest.raises(PtoNotSupported, match=r"dyn_entry.compile\(\) with no arguments leaves M to run time, but "
                                              r"the trace needs its extent as a number.*dyn_entry.compile\(\*tensors\)"):
        dyn_entry.compile()  # out[:] is a tile of the tensor's size (a read-at-run-time M is in test_jit_dynamic_*)


def test_a_dynamic_entry_binds_each_extent_per_call(launcher):
    for rows in (16, 48):
        x, out = torch.randn(rows, 64), _nan(rows, 64)
        dyn_entry(x, out)
        torch.testing.assert_close(out, x + 1.0, rtol=0, atol=0)


def test_one_dynamic_dimension_is_one_extent_in_a_signature():
    with pytest.raises(PtoCompileError, match=r"parameter 'out' is declared \[M, 64\].*M is bound to 16"):
        dyn_entry.compile(torch.randn(16, 64), _nan(32, 64))


# ---- pl.dynamic on @pl.jit.incore helpers ------------------------------------------------------


@pl.jit.incore
def scale_rows(
    x: pl.Tensor[[M, 128], pl.FP16],
    acc: pl.InOut[pl.Tensor[[M, 128], pl.FP32]],
    out: pl.Out[pl.Tensor[[M, 128], pl.FP32]],
    factor: pl.Scalar[pl.FP32],
):
    tx = pl.load(x, [0, 0], [32, 128])
    scaled = pl.mul(pl.cast(tx, pl.FP32), factor)
    acc = pl.store(pl.add(pl.load(acc, [0, 0], [32, 128]), scaled), [0, 0], acc)
    out = pl.store(scaled, [0, 0], out)
    return acc, out


@pl.jit
def apply_scale(
    x: pl.Tensor[[32, 128], pl.FP16],
    acc: pl.InOut[pl.Tensor[[32, 128], pl.FP32]],
    out: pl.Out[pl.Tensor[[32, 128], pl.FP32]],
):
    acc, out = scale_rows(x, acc, out, 0.5)
    return acc, out


def test_an_incore_helpers_dynamic_dimension_binds_at_the_call(launcher):
    x = torch.randn(32, 128, dtype=torch.float16)
    acc = torch.randn(32, 128)
    before = acc.clone()
    out = _nan(32, 128)
    apply_scale(x, acc, out)
    torch.testing.assert_close(out, x.float() * 0.5, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(acc, before + x.float() * 0.5, rtol=1e-3, atol=1e-3)


@pl.jit.incore
def first_rows(x: pl.Tensor[[N, 64], pl.FP32], out: pl.Out[pl.Tensor[[N, 64], pl.FP32]]):
    out = pl.store(pl.mul(pl.load(x, [0, 0], [16, 64]), 2.0), [0, 0], out)
    return out


@pl.jit
def drive(x: pl.Tensor[[N, 64], pl.FP32], out: pl.Out[pl.Tensor[[N, 64], pl.FP32]]):
    return first_rows(x, out)


def test_a_dynamic_entry_and_helper_share_the_extent(launcher):
    for rows in (16, 48):
        x, out = torch.randn(rows, 64), _nan(rows, 64)
        drive(x, out)
        torch.testing.assert_close(out[:16], x[:16] * 2.0, rtol=0, atol=0)


@pl.jit.incore
def pair(x: pl.Tensor[[M, 64], pl.FP32], out: pl.Out[pl.Tensor[[M, 64], pl.FP32]]):
    out = pl.store(pl.load(x, [0, 0], [16, 64]), [0, 0], out)
    return out


@pl.jit
def mismatched(x: pl.Tensor[[32, 64], pl.FP32], out: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
    return pair(x, out)


def test_a_helpers_dynamic_dimension_is_one_extent_per_call():
    with pytest.raises(PtoCompileError, match=r"pair: parameter 'out' is FP32\[M, 64\].*M is bound to 32"):
        mismatched.compile(torch.randn(32, 64), _nan(16, 64))


# ---- pl.dynamic in a @pl.program --------------------------------------------------------------


@pl.program
class DynamicRows:
    @pl.function(type=pl.FunctionType.InCore)
    def double(self, x: pl.Tensor[[M, 64], pl.FP32], y: pl.Out[pl.Tensor[[M, 64], pl.FP32]]):
        t = pl.load(x, [0, 0], [16, 64])
        y = pl.store(pl.mul(t, 2.0), [0, 0], y)
        return y

    @pl.function(type=pl.FunctionType.Orchestration)
    def main(self, x: pl.Tensor[[N, 64], pl.FP32], y: pl.Out[pl.Tensor[[N, 64], pl.FP32]]):
        for i in pl.range(N_CHUNKS):
            self.double(x[i * 16:(i + 1) * 16, :], y[i * 16:(i + 1) * 16, :])
        return y


N_CHUNKS = 2


@pl.program
class StaticOrchestration:
    @pl.function(type=pl.FunctionType.InCore)
    def double(self, x: pl.Tensor[[M, 64], pl.FP32], y: pl.Out[pl.Tensor[[M, 64], pl.FP32]]):
        t = pl.load(x, [0, 0], [16, 64])
        y = pl.store(pl.mul(t, 2.0), [0, 0], y)
        return y

    @pl.function(type=pl.FunctionType.Orchestration)
    def main(self, x: pl.Tensor[[32, 64], pl.FP32], y: pl.Out[pl.Tensor[[32, 64], pl.FP32]]):
        for i in pl.range(2):
            self.double(x[i * 16:(i + 1) * 16, :], y[i * 16:(i + 1) * 16, :])
        return y


def test_a_programs_incore_function_binds_dynamic_dims_per_call(launcher):
    compiled = ir.compile(StaticOrchestration)
    x, y = torch.randn(32, 64), _nan(32, 64)
    launcher.run(compiled, x, y)
    torch.testing.assert_close(y, x * 2.0, rtol=0, atol=0)


def test_a_dynamic_orchestration_binds_the_tensors_it_runs_on(launcher):
    x, y = torch.randn(32, 64), _nan(32, 64)
    result = run(DynamicRows, x, y)
    assert result.passed, result.error
    torch.testing.assert_close(y, x * 2.0, rtol=0, atol=0)
    compiled = ir.compile(DynamicRows.bind(x, y))
    assert [p.shape for p in compiled.params] == [(32, 64), (32, 64)]


def test_an_unbound_dynamic_orchestration_compiles_once_for_every_extent():
    compiled = ir.compile(DynamicRows)  # N is read at run time (see test_program_dynamic_extent.py)
    for rows in (32, 48):
        x, y = torch.randn(rows, 64), _nan(rows, 64)
        compiled(x, y)
        torch.testing.assert_close(y[:32], x[:32] * 2.0, rtol=0, atol=0)


def test_a_programs_tensors_each_bind_their_own_dynamic_extents(launcher):
    """PyPTO's orchestration reads each tensor's extents from its own argument: N is 32 for x and 48 for y."""
    x, y = torch.randn(32, 64), _nan(48, 64)
    compiled = ir.compile(DynamicRows.bind(x, y))
    assert [p.shape for p in compiled.params] == [(32, 64), (48, 64)]
    launcher.run(compiled, x, y)
    torch.testing.assert_close(y[:32], x * 2.0, rtol=0, atol=0)
    assert torch.isnan(y[32:]).all()
    with pytest.raises(PtoCompileError, match=r"parameter 'y' is declared \[N, 64\].*got an argument of shape \[48\]"):
        ir.compile(DynamicRows.bind(x, _nan(48)))


B_DYN = pl.dynamic("B_DYN")


@pl.jit
def bound_rows(x: pl.Tensor, out: pl.Out[pl.Tensor]):
    x.bind_dynamic(0, B_DYN)
    out.bind_dynamic(0, B_DYN)
    for b in pl.spmd(pl.tensor.dim(x, 0) // 2):
        out = pl.store(pl.exp(pl.load(x, [b * 2, 0], [2, 64])), [b * 2, 0], out)
    return out


def test_bind_dynamic_is_checked_and_traces_at_the_calls_extents(launcher):
    for rows in (8, 16):
        x, out = torch.randn(rows, 64), _nan(rows, 64)
        bound_rows(x, out)
        torch.testing.assert_close(out, torch.exp(x), rtol=1e-5, atol=1e-6)

    @pl.jit
    def bad(x: pl.Tensor[[8, 64], pl.FP32], out: pl.Out[pl.Tensor[[8, 64], pl.FP32]]):
        x.bind_dynamic(2, B_DYN)
        out = pl.store(pl.load(x, [0, 0], [8, 64]), [0, 0], out)
        return out

    with pytest.raises(PtoCompileError, match=r"x.bind_dynamic: dim must be a dimension of the 2-d tensor"):
        bad.compile(torch.randn(8, 64), _nan(8, 64))
