"""A ``@pl.program`` whose ``pl.dynamic`` leading dimensions are left unbound: compiled once, run at any extent.

``ir.compile(Prog)`` traces the orchestration with each such extent a run-time scalar (``pl.tensor.dim``
gives it, loops and windows follow it), as PyPTO's dynamic paged-attention example leaves its batch to run
time; each call takes every tensor's extent from its own argument.  Static dimensions are still checked
before anything runs, a window past an extent fails the launch, and a trace that needs the extent as a
number asks for the tensors.  Random data against torch, outputs poisoned first.
"""

from __future__ import annotations

import pytest
import torch

import pypto_async.language as pl
from pypto_async import ir
from pypto_async.errors import PtoArgumentError, PtoNotSupported

B = pl.dynamic("B")
R = pl.dynamic("R")


def _nan(*shape):
    return torch.full(shape, float("nan"))


@pl.program
class RowChunks:
    @pl.function(type=pl.FunctionType.InCore)
    def twice_plus(self, x: pl.Tensor[[R, 64], pl.FP32], y: pl.Out[pl.Tensor[[R, 64], pl.FP32]]):
        t = pl.load(x, [0, 0], [16, 64])
        y = pl.store(pl.add(pl.mul(t, 2.0), 1.0), [0, 0], y)
        return y

    @pl.function(type=pl.FunctionType.Orchestration)
    def rows_main(self, x: pl.Tensor[[B, 64], pl.FP32], y: pl.Out[pl.Tensor[[B, 64], pl.FP32]]):
        for i in pl.range(pl.tensor.dim(x, 0) // 16):
            self.twice_plus(pl.slice(x, [16, 64], [i * 16, 0]), pl.slice(y, [16, 64], [i * 16, 0]))
        return y


@pytest.fixture(scope="module")
def row_chunks():
    return ir.compile(RowChunks)


def test_one_artifact_runs_every_batch(row_chunks):
    for n in (32, 48, 16, 32):
        x, y = torch.randn(n, 64), _nan(n, 64)
        row_chunks(x, y)
        torch.testing.assert_close(y, x * 2.0 + 1.0, rtol=1e-6, atol=1e-6)
    assert ir.compile(RowChunks).lib_path == row_chunks.lib_path  # the same artifact, whatever the extents


def test_the_program_prints_the_dimensions_name(row_chunks):
    text = str(row_chunks.program)
    assert "x: in FP32[B, 64]" in text and "B: scalar INT64" in text
    assert "2147483647" not in text and "2147483647" not in repr(row_chunks.program.params)


def test_a_static_dimension_and_the_call_shape_are_checked_before_it_runs(row_chunks):
    x, y = torch.randn(32, 64), _nan(32, 32)
    with pytest.raises(PtoArgumentError, match=r"argument 'y' is declared \[B, 64\], got shape \[32, 32\]: "
                                               r"dimension 1 is 32, not 64"):
        row_chunks(x, y)
    with pytest.raises(PtoArgumentError, match=r"RowChunks takes 2 arguments \(x, y\), got 1: .*in place"):
        row_chunks(x)
    assert torch.isnan(y).all()


@pl.program
class FixedChunks:
    @pl.function(type=pl.FunctionType.InCore)
    def double(self, x: pl.Tensor[[R, 64], pl.FP32], y: pl.Out[pl.Tensor[[R, 64], pl.FP32]]):
        y = pl.store(pl.mul(pl.load(x, [0, 0], [16, 64]), 2.0), [0, 0], y)
        return y

    @pl.function(type=pl.FunctionType.Orchestration)
    def main(self, x: pl.Tensor[[B, 64], pl.FP32], y: pl.Out[pl.Tensor[[B, 64], pl.FP32]]):
        for i in pl.range(2):
            self.double(x[i * 16:(i + 1) * 16, :], y[i * 16:(i + 1) * 16, :])
        return y


def test_each_tensor_takes_its_own_extent_and_a_window_past_it_fails_the_launch():
    compiled = ir.compile(FixedChunks)
    x, y = torch.randn(32, 64), _nan(48, 64)  # as PyPTO's orchestration: B is 32 for x, 48 for y
    compiled(x, y)
    torch.testing.assert_close(y[:32], x * 2.0, rtol=0, atol=0)  # y's last rows are an Out's: undefined
    x, y = torch.randn(24, 64), _nan(24, 64)  # the second window, rows 16..32, runs past the 24 rows
    with pytest.raises(PtoArgumentError, match=r"pl.load: dim 0 of 'x' past its run-time extent"):
        compiled(x, y)
    assert torch.isnan(y).all()


@pl.program
class WholeTile:
    @pl.function(type=pl.FunctionType.InCore)
    def neg(self, x: pl.Tensor[[B, 64], pl.FP32], y: pl.Out[pl.Tensor[[B, 64], pl.FP32]]):
        y = pl.store(pl.neg(pl.load(x, [0, 0], [16, 64])), [0, 0], y)
        return y

    @pl.function(type=pl.FunctionType.Orchestration)
    def main(self, x: pl.Tensor[[B, 64], pl.FP32], y: pl.Out[pl.Tensor[[B, 64], pl.FP32]]):
        tmp = pl.create_tensor([pl.tensor.dim(x, 0), 64], dtype=pl.FP32)  # sized by the extent: a number
        self.neg(x, tmp)
        self.neg(tmp, y)
        return y


@pl.program
class InnerDynamic:
    @pl.function(type=pl.FunctionType.Opaque)
    def main(self, a: pl.Tensor[[B, R], pl.FP32], out: pl.Out[pl.Tensor[[B, R], pl.FP32]]):
        return out


def test_an_unbound_inner_dimension_asks_for_the_tensors():
    with pytest.raises(PtoNotSupported, match=r"parameter 'a' is \[B, R\]: unbound, a pl.dynamic dimension is read "
                                              r"at run time only when .* leading extents .* bind B, R to the tensors"):
        ir.compile(InnerDynamic)


def test_a_trace_that_needs_the_extent_as_a_number_asks_for_the_tensors():
    with pytest.raises(PtoNotSupported, match=r"main: the trace needs the extent of B as a number .*"
                                              r"ir.compile\(WholeTile.bind\(\*tensors\)\)") as info:
        ir.compile(WholeTile)
    assert "2147483647" not in str(info.value)  # the run-time extent is named, never its placeholder
    x, y = torch.randn(16, 64), _nan(16, 64)
    compiled = ir.compile(WholeTile.bind(x, y))  # bound: compiled for these extents
    compiled(x, y)
    torch.testing.assert_close(y, x, rtol=0, atol=0)
