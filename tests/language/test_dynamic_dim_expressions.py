"""Shape expressions of ``pl.dynamic`` dimensions in annotations (``M * 2``, ``NR * 64``), as PyPTO allows.

A dimension written ``M * 2`` is the value of that expression where ``M`` is
bound, and binds ``M`` itself when it is the only dim it holds (PyPTO's
HOST orchestrators recover ``NR`` from a ``[1, NR * 64]`` tensor so).  Each
program runs at two extents on random data, outputs poisoned, against torch.
"""

from __future__ import annotations

import pytest
import torch

import pypto_async.language as pl
from pypto_async.errors import PtoCompileError
from pypto_async.runtime import run
from helpers.tiers import tiered

M = pl.dynamic("M")
NR = pl.dynamic("NR")


def _nan(*shape):
    return torch.full(shape, float("nan"))


@pl.program
class Composite:
    """PyPTO's AddKernelCompositeDim: the factor appears only in the parameter shapes."""

    @pl.function(type=pl.FunctionType.InCore)
    def add_kernel(self, a: pl.Tensor[[M * 2, 64], pl.FP32], b: pl.Tensor[[M, 64], pl.FP32],
                   out: pl.Out[pl.Tensor[[M * 2, 64], pl.FP32]]) -> pl.Tensor[[M * 2, 64], pl.FP32]:
        top = pl.add(pl.load(a, [0, 0], [8, 64]), pl.load(b, [0, 0], [8, 64]))
        return pl.store(top, [0, 0], out)

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, a: pl.Tensor[[M * 2, 64], pl.FP32], b: pl.Tensor[[M, 64], pl.FP32],
             out: pl.Out[pl.Tensor[[M * 2, 64], pl.FP32]]) -> pl.Tensor[[M * 2, 64], pl.FP32]:
        return self.add_kernel(a, b, out)


@tiered("m", [8, 24], fast=[24])
def test_a_composite_dimension_of_a_program_binds_with_its_dim(m):
    a, b, out = torch.randn(2 * m, 64), torch.randn(m, 64), _nan(2 * m, 64)
    result = run(Composite, a, b, out)
    assert result.passed, result.error
    torch.testing.assert_close(out[:8], a[:8] + b[:8], rtol=0, atol=0)  # the kernel stores its first 8 rows


@pl.jit
def flat_rows(x: pl.Tensor[[1, NR * 64], pl.FP32], out: pl.Out[pl.Tensor[[NR + 1, 64], pl.FP32]]):
    with pl.at(level=pl.Level.CORE_GROUP):
        for r in pl.range(2):
            pl.store(pl.mul(pl.load(x, [0, r * 64], [1, 64]), 3.0), [r, 0], out)
    return out


@tiered("nr", [2, 5], fast=[5])
def test_a_dim_only_an_expression_holds_is_solved_from_the_extent(launcher, nr):
    x, out = torch.randn(1, nr * 64), _nan(nr + 1, 64)
    flat_rows(x, out)
    torch.testing.assert_close(out[:2], x.reshape(nr, 64)[:2] * 3.0, rtol=0, atol=0)


def test_an_extent_the_expression_cannot_take_is_a_compile_error():
    with pytest.raises(PtoCompileError, match=r"parameter 'x' is declared \[1, \(NR \* 64\)\].*"
                                              r"100, which \(NR \* 64\) is for no positive NR"):
        flat_rows.compile(torch.randn(1, 100), _nan(3, 64))


def test_an_expression_disagreeing_with_its_bound_dim_is_a_compile_error():
    with pytest.raises(PtoCompileError, match=r"parameter 'out' is declared \[\(NR \+ 1\), 64\].*"
                                              r"dimension 0 is 4, but \(NR \+ 1\) is 3"):
        flat_rows.compile(torch.randn(1, 128), _nan(4, 64))


@pl.program
class RowsOfM:
    """A kernel loops over a pl.dynamic dim (``pl.range(M)``, ``pl.range(0, M * 2, 2)``): its bound extent."""

    @pl.function(type=pl.FunctionType.InCore)
    def rows(self, x: pl.Tensor[[M, 64], pl.FP32], out: pl.Out[pl.Tensor[[M, 64], pl.FP32]],
             half: pl.Out[pl.Tensor[[M, 32], pl.FP32]]) -> pl.Tensor[[M, 64], pl.FP32]:
        for r in pl.range(M):
            out = pl.store(pl.add(pl.load(x, [r, 0], [1, 64]), 1.0), [r, 0], out)
        for h in pl.range(0, M * 2, 2):  # an expression of it too: rows 0, 2, 4, ... below M * 2
            half = pl.store(pl.load(x, [h // 2, 0], [1, 32]), [h // 2, 0], half)
        return out

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, x: pl.Tensor[[M, 64], pl.FP32], out: pl.Out[pl.Tensor[[M, 64], pl.FP32]],
             half: pl.Out[pl.Tensor[[M, 32], pl.FP32]]) -> pl.Tensor[[M, 64], pl.FP32]:
        return self.rows(x, out, half)


@tiered("m", [3, 8], fast=[3])
def test_a_loop_over_a_dynamic_dim_runs_its_bound_extent(m):
    x, out, half = torch.randn(m, 64), _nan(m, 64), _nan(m, 32)
    result = run(RowsOfM, x, out, half)
    assert result.passed, result.error
    torch.testing.assert_close(out, x + 1, rtol=0, atol=0)  # every one of the m rows: the loop ran m times
    torch.testing.assert_close(half, x[:, :32], rtol=0, atol=0)
