"""Early ``return`` inside an ``if`` of a kernel, and ``if`` on an integer scalar parameter.

PyPTO's HOST broadcast test publishes with ``if my_rank == ROOT: return
pl.store(...)`` followed by ``return data``: the branch's store is the
kernel's work when the condition holds, the fall-through when it does not.
Each case runs both ways on random data, its output poisoned first, against
numpy.
"""

from __future__ import annotations

import numpy as np
import pytest

import pypto_async.language as pl
from helpers.ir_fixtures import poison
from helpers.located import assert_at, next_line
from pypto_async import ir
from pypto_async.errors import PtoCompileError

R, C = 4, 64


@pl.program
class Publish:
    """PyPTO's publish_step, single chip: only rank 0 writes ``data``."""

    @pl.function(type=pl.FunctionType.InCore)
    def publish_step(self, inp: pl.Tensor[[1, C], pl.FP32], data: pl.InOut[pl.Tensor[[1, C], pl.FP32]],
                     my_rank: pl.Scalar[pl.INT32]) -> pl.Tensor[[1, C], pl.FP32]:
        if my_rank == 0:
            local = pl.load(inp, [0, 0], [1, C])
            return pl.store(local, [0, 0], data)
        return data

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, inp: pl.Tensor[[1, C], pl.FP32], data: pl.InOut[pl.Tensor[[1, C], pl.FP32]],
             my_rank: pl.Scalar[pl.INT32]) -> pl.Tensor[[1, C], pl.FP32]:
        return self.publish_step(inp, data, my_rank)


@pytest.mark.parametrize("rank", [0, 1, 3])
def test_an_early_return_of_a_store_is_the_kernel_s_work_when_taken(launcher, rng, rank):
    x = rng.standard_normal((1, C)).astype(np.float32)
    before = rng.standard_normal((1, C)).astype(np.float32)
    data = before.copy()
    launcher.run(ir.compile(Publish), x, data, rank)
    np.testing.assert_array_equal(data, x if rank == 0 else before)


@pl.program
class TwoWays:
    """The branch and the fall-through each store a different value; nested ifs fall through to one tail."""

    @pl.function(type=pl.FunctionType.InCore)
    def k(self, x: pl.Tensor[[R, C], pl.FP32], flag: pl.Scalar[pl.INT32], extra: pl.Scalar[pl.INT64],
          out: pl.Out[pl.Tensor[[R, C], pl.FP32]]) -> pl.Tensor[[R, C], pl.FP32]:
        t = pl.load(x, [0, 0], [R, C])
        if flag == 0:
            return pl.store(pl.add(t, 1.0), [0, 0], out)
        elif flag > 2:
            if extra + 1 == 2:  # integer scalar arithmetic is an index expression
                return pl.store(pl.mul(t, 3.0), [0, 0], out)
            t = pl.exp(t)  # flag > 2 and extra != 1 falls through to the tail with this tile
        return pl.store(pl.mul(t, 2.0), [0, 0], out)

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, x: pl.Tensor[[R, C], pl.FP32], flag: pl.Scalar[pl.INT32], extra: pl.Scalar[pl.INT64],
             out: pl.Out[pl.Tensor[[R, C], pl.FP32]]) -> pl.Tensor[[R, C], pl.FP32]:
        return self.k(x, flag, extra, out)


@pytest.mark.parametrize("flag, extra", [(0, 0), (1, 1), (3, 1), (3, 0)])
def test_both_branches_and_nested_fall_through_of_early_returns(launcher, rng, flag, extra):
    x = rng.standard_normal((R, C)).astype(np.float32)
    out = poison((R, C))
    launcher.run(ir.compile(TwoWays), x, flag, extra, out)
    if flag == 0:
        want = x + 1
    elif flag > 2 and extra == 1:
        want = x * 3
    elif flag > 2:
        want = np.exp(x) * 2
    else:
        want = x * 2
    np.testing.assert_allclose(out, want, rtol=1e-6)


@pytest.mark.parametrize("double", [True, False])
def test_an_early_return_on_a_python_value_is_python_s(launcher, rng, double):
    @pl.jit
    def k(x: pl.Tensor, out: pl.Out[pl.Tensor]):
        if double:
            with pl.at(level=pl.Level.CORE_GROUP):
                out[:] = pl.add(x, x)
            return out
        with pl.at(level=pl.Level.CORE_GROUP):
            out[:] = pl.neg(x)
        return out

    x = rng.standard_normal((R, C)).astype(np.float32)
    out = poison((R, C))
    launcher.run(k.compile(x, out), x, out)
    np.testing.assert_array_equal(out, x + x if double else -x)


def _compile_error(program):
    with pytest.raises(PtoCompileError) as ei:
        ir.compile(program)
    return ei


def test_branches_returning_different_tensors_are_refused():
    where = []

    @pl.program
    class Different:
        @pl.function(type=pl.FunctionType.InCore)
        def k(self, x: pl.Tensor[[R, C], pl.FP32], flag: pl.Scalar[pl.INT32],
              a: pl.Out[pl.Tensor[[R, C], pl.FP32]], b: pl.Out[pl.Tensor[[R, C], pl.FP32]]) -> pl.Tensor[[R, C], pl.FP32]:
            where.append(next_line())
            if flag == 0:
                return pl.store(pl.load(x, [0, 0], [R, C]), [0, 0], a)
            return pl.store(pl.load(x, [0, 0], [R, C]), [0, 0], b)

        @pl.function(type=pl.FunctionType.Orchestration)
        def orch(self, x: pl.Tensor[[R, C], pl.FP32], flag: pl.Scalar[pl.INT32],
                 a: pl.Out[pl.Tensor[[R, C], pl.FP32]], b: pl.Out[pl.Tensor[[R, C], pl.FP32]]) -> pl.Tensor[[R, C], pl.FP32]:
            return self.k(x, flag, a, b)

    assert_at(_compile_error(Different), where[0], "both branches must return the same tensor")


def test_an_if_on_a_float_scalar_is_an_error_not_false():
    where = []

    @pl.program
    class Floaty:
        @pl.function(type=pl.FunctionType.InCore)
        def k(self, x: pl.Tensor[[R, C], pl.FP32], s: pl.Scalar[pl.FP32],
              out: pl.Out[pl.Tensor[[R, C], pl.FP32]]) -> pl.Tensor[[R, C], pl.FP32]:
            t = pl.load(x, [0, 0], [R, C])
            where.append(next_line())
            if s > 0.0:
                t = pl.mul(t, s)
            return pl.store(t, [0, 0], out)

        @pl.function(type=pl.FunctionType.Orchestration)
        def orch(self, x: pl.Tensor[[R, C], pl.FP32], s: pl.Scalar[pl.FP32],
                 out: pl.Out[pl.Tensor[[R, C], pl.FP32]]) -> pl.Tensor[[R, C], pl.FP32]:
            return self.k(x, s, out)

    assert_at(_compile_error(Floaty), where[0], "float scalar parameter has no value at trace time")


@pl.program
class OrchIf:
    """An early return on a scalar parameter in the orchestration: the task is submitted only when taken."""

    @pl.function(type=pl.FunctionType.InCore)
    def k(self, x: pl.Tensor[[R, C], pl.FP32],
          out: pl.InOut[pl.Tensor[[R, C], pl.FP32]]) -> pl.Tensor[[R, C], pl.FP32]:
        return pl.store(pl.exp(pl.load(x, [0, 0], [R, C])), [0, 0], out)

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, x: pl.Tensor[[R, C], pl.FP32], my_rank: pl.Scalar[pl.INT32],
             out: pl.InOut[pl.Tensor[[R, C], pl.FP32]]) -> pl.Tensor[[R, C], pl.FP32]:
        if my_rank == 0:
            return self.k(x, out)
        return out


@pytest.mark.parametrize("rank", [0, 1, 3])
def test_an_if_on_a_scalar_in_the_orchestration_submits_the_task_only_when_taken(launcher, rng, rank):
    x = rng.standard_normal((R, C)).astype(np.float32)
    before = rng.standard_normal((R, C)).astype(np.float32)
    out = before.copy()
    launcher.run(ir.compile(OrchIf), x, rank, out)
    np.testing.assert_allclose(out, np.exp(x) if rank == 0 else before, rtol=1e-6)


@pl.inline
def _pick(t, flag):
    if flag == 0:
        return pl.add(t, 1.0)
    return pl.mul(t, 2.0)


@pl.program
class InlinePick:
    """An inline helper's early returns of two tiles: the call's value is the taken branch's tile."""

    @pl.function(type=pl.FunctionType.InCore)
    def k(self, x: pl.Tensor[[R, C], pl.FP32], flag: pl.Scalar[pl.INT32],
          out: pl.Out[pl.Tensor[[R, C], pl.FP32]]) -> pl.Tensor[[R, C], pl.FP32]:
        return pl.store(_pick(pl.load(x, [0, 0], [R, C]), flag), [0, 0], out)

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, x: pl.Tensor[[R, C], pl.FP32], flag: pl.Scalar[pl.INT32],
             out: pl.Out[pl.Tensor[[R, C], pl.FP32]]) -> pl.Tensor[[R, C], pl.FP32]:
        return self.k(x, flag, out)


@pytest.mark.parametrize("flag", [0, 1])
def test_an_inline_helper_returns_the_taken_branch_s_tile(launcher, rng, flag):
    x = rng.standard_normal((R, C)).astype(np.float32)
    out = poison((R, C))
    launcher.run(ir.compile(InlinePick), x, flag, out)
    np.testing.assert_allclose(out, x + 1 if flag == 0 else x * 2, rtol=1e-6)


@pl.program
class Truthy:
    """``if flag:`` on an integer scalar parameter is a runtime condition, as ``if flag != 0:``."""

    @pl.function(type=pl.FunctionType.InCore)
    def k(self, x: pl.Tensor[[R, C], pl.FP32], flag: pl.Scalar[pl.BOOL],
          out: pl.Out[pl.Tensor[[R, C], pl.FP32]]) -> pl.Tensor[[R, C], pl.FP32]:
        t = pl.load(x, [0, 0], [R, C])
        if flag:
            return pl.store(pl.neg(t), [0, 0], out)
        return pl.store(t, [0, 0], out)

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, x: pl.Tensor[[R, C], pl.FP32], flag: pl.Scalar[pl.BOOL],
             out: pl.Out[pl.Tensor[[R, C], pl.FP32]]) -> pl.Tensor[[R, C], pl.FP32]:
        return self.k(x, flag, out)


@pytest.mark.parametrize("flag", [True, False])
def test_the_truth_of_a_bool_scalar_parameter_is_a_runtime_condition(launcher, rng, flag):
    x = rng.standard_normal((R, C)).astype(np.float32)
    out = poison((R, C))
    launcher.run(ir.compile(Truthy), x, flag, out)
    np.testing.assert_array_equal(out, -x if flag else x)


@pl.program
class Pair:
    """An inline helper's early returns of two values: the same tensor, and a tile each branch computes."""

    @pl.function(type=pl.FunctionType.InCore)
    def k(self, x: pl.Tensor[[R, C], pl.FP32], flag: pl.Scalar[pl.INT32],
          out: pl.Out[pl.Tensor[[R, C], pl.FP32]], other: pl.Out[pl.Tensor[[R, C], pl.FP32]]):
        stored, tile = _pair(x, flag, out)
        pl.store(tile, [0, 0], other)
        return stored, other

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, x: pl.Tensor[[R, C], pl.FP32], flag: pl.Scalar[pl.INT32],
             out: pl.Out[pl.Tensor[[R, C], pl.FP32]], other: pl.Out[pl.Tensor[[R, C], pl.FP32]]):
        self.k(x, flag, out, other)
        return out, other


@pl.inline
def _pair(x, flag, out):
    t = pl.load(x, [0, 0], [R, C])
    if flag == 0:
        return pl.store(t, [0, 0], out), pl.add(t, 1.0)
    return pl.store(pl.neg(t), [0, 0], out), pl.mul(t, 2.0)


@pytest.mark.parametrize("flag", [0, 1])
def test_early_returns_of_a_tensor_and_a_tile_merge_element_by_element(launcher, rng, flag):
    x = rng.standard_normal((R, C)).astype(np.float32)
    out, other = poison((R, C)), poison((R, C))
    launcher.run(ir.compile(Pair), x, flag, out, other)
    np.testing.assert_array_equal(out, x if flag == 0 else -x)
    np.testing.assert_allclose(other, x + 1 if flag == 0 else x * 2, rtol=1e-6)
