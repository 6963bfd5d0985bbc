"""What a kernel returns and writes, as PyPTO documents it: a returned tile becomes a new tensor of the
caller, ``pl.expand_clone`` writes its target, ``pl.read`` of a tensor the kernel writes, ``pl.write``
into a tensor (returned) or a tile (in place).

Each on random data against numpy, outputs poisoned (NaN) before the launch.
"""

import numpy as np
import pytest

import pypto_async.language as pl
from helpers.ir_fixtures import poison
from pypto_async import ir
from pypto_async.errors import PtoCompileError

R, C = 16, 32


def _f32(rng, shape):
    return rng.uniform(-3.0, 3.0, size=shape).astype(np.float32)


# ---- a returned tile: a new tensor of the caller ---------------------------------------------------------


@pl.program
class ReturnsTiles:
    @pl.function(type=pl.FunctionType.InCore)
    def plus_one(self, x: pl.Tensor[[R, C], pl.FP32]) -> pl.Tensor[[R, C], pl.FP32]:
        return pl.add(pl.load(x, [0, 0], [R, C]), 1.0)  # a computed value, not a parameter

    @pl.function(type=pl.FunctionType.InCore)
    def both(self, x: pl.Tensor[[R, C], pl.FP32], y: pl.Out[pl.Tensor[[R, C], pl.FP32]]):
        t = pl.load(x, [0, 0], [R, C])
        y = pl.store(pl.neg(t), [0, 0], y)
        return pl.exp(t), y  # a tile and a parameter

    @pl.function(type=pl.FunctionType.InCore)
    def twice(self, t: pl.Tensor[[R, C], pl.FP32], e: pl.Tensor[[R, C], pl.FP32],
              out: pl.Out[pl.Tensor[[R, C], pl.FP32]]) -> pl.Tensor[[R, C], pl.FP32]:
        s = pl.add(pl.mul(pl.load(t, [0, 0], [R, C]), 2.0), pl.load(e, [0, 0], [R, C]))
        return pl.store(s, [0, 0], out)

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, x: pl.Tensor[[R, C], pl.FP32], y: pl.Out[pl.Tensor[[R, C], pl.FP32]],
             out: pl.Out[pl.Tensor[[R, C], pl.FP32]]):
        t = self.plus_one(x)
        e, y = self.both(x, y)
        out = self.twice(t, e, out)
        return y, out


def test_a_returned_tile_is_a_new_tensor_the_call_returns(launcher, rng):
    c = ir.compile(ReturnsTiles)
    assert [t.name for t in c.task_graph.tasks] == ["plus_one", "both", "twice"]
    assert sorted((e.src, e.dst) for e in c.task_graph.edges) == [(0, 2), (1, 2)]  # through the new tensors
    x = _f32(rng, (R, C))
    y, out = poison((R, C)), poison((R, C))
    launcher.run(c, x, y, out)
    np.testing.assert_array_equal(y, -x)
    np.testing.assert_allclose(out, (x + 1) * 2 + np.exp(x), rtol=1e-5)


def test_a_returned_tile_the_orchestration_returns_is_an_output_of_the_program(launcher, rng):
    @pl.program
    class Out:
        @pl.function(type=pl.FunctionType.InCore)
        def k(self, x: pl.Tensor[[R, C], pl.FP32]) -> pl.Tensor[[R, C], pl.FP32]:
            return pl.mul(pl.load(x, [0, 0], [R, C]), 3.0)

        @pl.function(type=pl.FunctionType.Orchestration)
        def orch(self, x: pl.Tensor[[R, C], pl.FP32]):
            return self.k(x)

    c = ir.compile(Out)
    assert list(c.param_names) == ["x", "k_ret0"]
    x, got = _f32(rng, (R, C)), poison((R, C))
    launcher.run(c, x, got)
    np.testing.assert_allclose(got, x * 3.0, rtol=1e-6)


def test_a_kernel_returning_something_else_is_refused():
    @pl.program
    class Bad:
        @pl.function(type=pl.FunctionType.InCore)
        def k(self, x: pl.Tensor[[R, C], pl.FP32]):
            return 3

        @pl.function(type=pl.FunctionType.Orchestration)
        def orch(self, x: pl.Tensor[[R, C], pl.FP32]):
            self.k(x)

    with pytest.raises(PtoCompileError, match="k must return its tensor parameters, tiles .* got 3"):
        ir.compile(Bad)


# ---- pl.expand_clone writes a target the kernel writes -----------------------------------------------------


@pytest.mark.parametrize("dim", [None, 0, 1, 2])
def test_expand_clone_into_an_output_parameter(launcher, rng, dim):
    B, N, K = 4, 8, 16
    shape = [B, N, K]
    if dim is not None:
        shape[dim] = 1

    @pl.program
    class Clone:
        @pl.function(type=pl.FunctionType.InCore)
        def k(self, x: pl.Tensor[shape, pl.FP32],
              y: pl.Out[pl.Tensor[[B, N, K], pl.FP32]]) -> pl.Tensor[[B, N, K], pl.FP32]:
            out = pl.expand_clone(x, y)
            return out

        @pl.function(type=pl.FunctionType.Orchestration)
        def orch(self, x: pl.Tensor[shape, pl.FP32], y: pl.Out[pl.Tensor[[B, N, K], pl.FP32]]):
            y = self.k(x, y)
            return y

    x, y = _f32(rng, tuple(shape)), poison((B, N, K))
    launcher.run(ir.compile(Clone), x, y)
    np.testing.assert_array_equal(y, np.broadcast_to(x, (B, N, K)))


# ---- pl.read of a tensor the kernel writes -----------------------------------------------------------------


def test_a_read_of_an_inout_tensor_sees_the_regions_earlier_store(launcher, rng):
    @pl.jit
    def k(x: pl.Tensor[[1, 8], pl.INT32], data: pl.Tensor[[R, C], pl.FP32], n: pl.InOut[pl.Tensor[[1, 8], pl.INT32]],
          out: pl.Out[pl.Tensor[[1, C], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.store(pl.add(pl.load(x, [0, 0], [1, 8]), 1), [0, 0], n)
            r = pl.read(n, [0, 2])  # x[0, 2] + 1, as stored just before
            pl.store(pl.mul(pl.load(data, [r, 0], [1, C]), 2.0), [0, 0], out)

    x = rng.integers(0, R - 2, size=(1, 8)).astype(np.int32)
    data = _f32(rng, (R, C))
    n, out = np.full((1, 8), -1, np.int32), poison((1, C))
    launcher.run(k.compile(x, data, n, out), x, data, n, out)
    np.testing.assert_array_equal(n, x + 1)
    np.testing.assert_array_equal(out, data[x[0, 2] + 1:x[0, 2] + 2] * 2)


@pl.program
class ReadsWhatAnEarlierTaskWrote:
    @pl.function(type=pl.FunctionType.Opaque)
    def main(self, x: pl.Tensor[[1, 8], pl.INT32], data: pl.Tensor[[R, C], pl.FP32],
             out: pl.Out[pl.Tensor[[1, C], pl.FP32]]):
        n = pl.create_tensor([1, 8], dtype=pl.INT32)
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.store(pl.mul(pl.load(x, [0, 0], [1, 8]), 2), [0, 0], n)
        with pl.at(level=pl.Level.CORE_GROUP):
            r = pl.read(n, [0, 5])  # an intermediate the first region wrote: this task waits for it
            pl.store(pl.load(data, [r, 0], [1, C]), [0, 0], out)
        return out


def test_a_region_reading_an_intermediate_waits_for_its_writer(launcher, rng):
    c = ir.compile(ReadsWhatAnEarlierTaskWrote)
    assert [(e.src, e.dst, e.hazard) for e in c.task_graph.edges] == [(0, 1, "RAW")]
    assert [p.direction for p in c.program.params] == ["in", "in", "out"]  # x: a pl.Tensor nothing stores to
    x = rng.integers(0, R // 2, size=(1, 8)).astype(np.int32)
    data, out = _f32(rng, (R, C)), poison((1, C))
    launcher.run(c, x, data, out)
    np.testing.assert_array_equal(out, data[2 * x[0, 5]:2 * x[0, 5] + 1])
