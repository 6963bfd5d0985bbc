"""``pl.store`` of a lower-rank tile into a higher-rank tensor (PyPTO's HOST allgather consume step).

A ``[1, S]`` row stored at ``[0, j, 0]`` of a ``[1, N, S]`` tensor fills the
tensor's trailing dimensions: it writes ``out[0, j, :]``.  Outputs are
poisoned first and compared with numpy.
"""

from __future__ import annotations

import numpy as np
import pytest

import pypto_async.language as pl
from helpers.ir_fixtures import poison
from helpers.located import assert_at, next_line
from pypto_async import ir
from pypto_async.errors import PtoCompileError

NR, S = 4, 64


@pl.program
class Gather:
    @pl.function(type=pl.FunctionType.InCore)
    def consume_step(self, data: pl.Tensor[[NR, S], pl.FP32],
                     out: pl.Out[pl.Tensor[[1, NR, S], pl.FP32]]) -> pl.Tensor[[1, NR, S], pl.FP32]:
        for j in pl.range(NR):
            row = pl.load(data, [j, 0], [1, S])
            out = pl.store(row, [0, j, 0], out)
        return out

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, data: pl.Tensor[[NR, S], pl.FP32],
             out: pl.Out[pl.Tensor[[1, 2 * NR, S], pl.FP32]]) -> pl.Tensor[[1, 2 * NR, S], pl.FP32]:
        for r in pl.range(2):
            self.consume_step(data, out[:, r * NR:(r + 1) * NR, :])  # a window: offsets shift by its origin
        return out


def test_rows_stored_into_a_window_of_a_higher_rank_tensor(launcher, rng):
    data = rng.standard_normal((NR, S)).astype(np.float32)
    out = poison((1, 2 * NR, S))
    launcher.run(ir.compile(Gather), data, out)
    np.testing.assert_array_equal(out[0], np.concatenate([data, data]))


def test_a_partly_valid_row_stores_its_valid_part_into_a_3d_tensor(launcher, rng):
    @pl.jit
    def k(x: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            for j in pl.range(NR):
                row = pl.load(x, [j, 0], [1, S], valid_shape=[1, S // 2])
                pl.store(pl.mul(row, 2.0), [1, j, 0], out)

    x = rng.standard_normal((NR, S)).astype(np.float32)
    out = poison((2, NR, S))
    launcher.run(k.compile(x, out), x, out)
    want = poison((2, NR, S))
    want[1, :, :S // 2] = x[:, :S // 2] * 2
    np.testing.assert_array_equal(out, want)


def test_offsets_of_the_wrong_rank_are_a_compile_error():
    where = []

    @pl.program
    class Wrong:
        @pl.function(type=pl.FunctionType.InCore)
        def k(self, data: pl.Tensor[[NR, S], pl.FP32],
              out: pl.Out[pl.Tensor[[1, NR, S], pl.FP32]]) -> pl.Tensor[[1, NR, S], pl.FP32]:
            row = pl.load(data, [0, 0], [1, S])
            where.append(next_line())
            return pl.store(row, [0, 0], out)

        @pl.function(type=pl.FunctionType.Orchestration)
        def orch(self, data: pl.Tensor[[NR, S], pl.FP32],
                 out: pl.Out[pl.Tensor[[1, NR, S], pl.FP32]]) -> pl.Tensor[[1, NR, S], pl.FP32]:
            return self.k(data, out)

    with pytest.raises(PtoCompileError) as ei:
        ir.compile(Wrong)
    assert_at(ei, where[0], "has rank 3, but got 2 offsets")


def test_more_offsets_than_a_window_has_dimensions_are_a_compile_error():
    where = []

    @pl.program
    class Wrong:
        @pl.function(type=pl.FunctionType.InCore)
        def k(self, data: pl.Tensor[[NR, S], pl.FP32],
              out: pl.Out[pl.Tensor[[NR, S], pl.FP32]]) -> pl.Tensor[[NR, S], pl.FP32]:
            row = pl.load(data, [0, 0], [1, S])
            where.append(next_line())
            return pl.store(row, [0, 1, 0], out)

        @pl.function(type=pl.FunctionType.Orchestration)
        def orch(self, data: pl.Tensor[[NR, S], pl.FP32],
                 out: pl.Out[pl.Tensor[[2 * NR, S], pl.FP32]]) -> pl.Tensor[[2 * NR, S], pl.FP32]:
            return self.k(data, out[NR:, :])

    with pytest.raises(PtoCompileError) as ei:
        ir.compile(Wrong)
    assert_at(ei, where[0], "has rank 2, but got 3 offsets")
