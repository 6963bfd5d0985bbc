"""``pl.slice`` of a tensor in the orchestration is a tensor view (PyPTO's performance guide 03).

"Slice the output in the orchestration and pass each slice to its InCore
function, so the tasks no longer share a buffer": each task writes its own
window, and the runtime derives that the tasks are independent.  Inside a
region ``pl.slice`` of a tensor is still a tile.  Outputs are poisoned first
and compared with numpy.
"""

from __future__ import annotations

import numpy as np
import pytest

import pypto_async.language as pl
from helpers.ir_fixtures import poison
from helpers.located import assert_at, next_line
from pypto_async import ir
from pypto_async.errors import PtoCompileError

N, TILE, COLS = 4, 16, 64


@pl.jit
def disjoint(a: pl.Tensor, out: pl.Out[pl.Tensor]):
    for i in pl.range(N):
        part = pl.slice(out, [TILE, COLS], [i * TILE, 0])  # a distinct region per iteration
        with pl.at(level=pl.Level.CORE_GROUP):
            t = pl.load(a, [i * TILE, 0], [TILE, COLS])
            pl.store(pl.mul(t, 2.0), [0, 0], part)  # writes `part`, not `out`
    return out


def test_slices_of_the_output_are_the_guide_s_disjoint_windows(launcher, rng):
    a = rng.standard_normal((N * TILE, COLS)).astype(np.float32)
    out = poison((N * TILE, COLS))
    compiled = disjoint.compile(a, out)
    assert len(compiled.task_graph.tasks) == N
    assert list(compiled.task_graph.edges) == []  # disjoint by construction: no task waits for another
    launcher.run(compiled, a, out)
    np.testing.assert_array_equal(out, a * 2)


@pl.program
class Bands:
    @pl.function(type=pl.FunctionType.InCore)
    def band(self, x: pl.Tensor[[TILE, COLS], pl.FP32],
             y: pl.Out[pl.Tensor[[TILE, COLS], pl.FP32]]) -> pl.Tensor[[TILE, COLS], pl.FP32]:
        return pl.store(pl.add(pl.load(x, [0, 0], [TILE, COLS]), 1.0), [0, 0], y)

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, x: pl.Tensor[[N * TILE, COLS], pl.FP32],
             y: pl.Out[pl.Tensor[[N * TILE, COLS], pl.FP32]]) -> pl.Tensor[[N * TILE, COLS], pl.FP32]:
        for i in pl.range(N):
            # band i reads the rows of band N-1-i: the views need not line up
            src = pl.slice(x, [TILE, COLS], [(N - 1 - i) * TILE, 0])
            self.band(src, pl.slice(y, [TILE, COLS], [i * TILE, 0]))
        return y


def test_a_program_passes_slices_of_its_tensors_to_its_kernels(launcher, rng):
    x = rng.standard_normal((N * TILE, COLS)).astype(np.float32)
    y = poison((N * TILE, COLS))
    launcher.run(ir.compile(Bands), x, y)
    want = (x.reshape(N, TILE, COLS)[::-1] + 1).reshape(N * TILE, COLS)
    np.testing.assert_array_equal(y, want)


def test_inside_a_region_a_slice_of_a_tensor_is_still_a_tile(launcher, rng):
    @pl.jit
    def k(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            t = pl.slice(a, [TILE, COLS], [TILE, 0])
            pl.store(pl.neg(t), [0, 0], out)
        return out

    a = rng.standard_normal((2 * TILE, COLS)).astype(np.float32)
    out = poison((TILE, COLS))
    launcher.run(k.compile(a, out), a, out)
    np.testing.assert_array_equal(out, -a[TILE:])


def test_a_pad_value_on_an_orchestration_slice_is_a_compile_error():
    where = []

    @pl.jit
    def k(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        where.append(next_line())
        part = pl.slice(out, [TILE, COLS], [0, 0], valid_shape=[TILE, 8], pad_value=pl.PadValue.zero)
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.store(pl.load(a, [0, 0], [TILE, COLS]), [0, 0], part)
        return out

    a = np.ones((TILE, COLS), np.float32)
    with pytest.raises(PtoCompileError) as ei:
        k.lower(a, a.copy())
    assert_at(ei, where[0], "pad_value= fills a tile")


ROWS = 8  # a tile padded to 8 rows whose valid box is the one row a [1, 1] window holds


@pl.program
class OneCell:
    @pl.function(type=pl.FunctionType.InCore)
    def cell(self, x: pl.Tensor[[1, 1], pl.FP32],
             y: pl.Out[pl.Tensor[[1, 1], pl.FP32]]) -> pl.Tensor[[1, 1], pl.FP32]:
        t = pl.load(x, [0, 0], [ROWS, 1], valid_shape=[1, 1])
        return pl.store(pl.mul(t, 3.0), [0, 0], y)  # writes the valid box only: inside the [1, 1] window

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, x: pl.Tensor[[N, 1], pl.FP32],
             y: pl.Out[pl.Tensor[[N, 1], pl.FP32]]) -> pl.Tensor[[N, 1], pl.FP32]:
        for i in pl.range(N):
            self.cell(pl.slice(x, [1, 1], [i, 0]), pl.slice(y, [1, 1], [N - 1 - i, 0]))
        return y


def test_a_padded_tile_stores_its_valid_box_into_a_smaller_window(launcher, rng):
    x = rng.standard_normal((N, 1)).astype(np.float32)
    y = poison((N, 1))
    launcher.run(ir.compile(OneCell), x, y)
    np.testing.assert_array_equal(y, x[::-1] * 3)


def test_a_store_whose_valid_box_overhangs_a_window_is_a_compile_error():
    where = []

    @pl.program
    class Overhang:
        @pl.function(type=pl.FunctionType.InCore)
        def cell(self, x: pl.Tensor[[2, 1], pl.FP32],
                 y: pl.Out[pl.Tensor[[1, 1], pl.FP32]]) -> pl.Tensor[[1, 1], pl.FP32]:
            t = pl.load(x, [0, 0], [ROWS, 1], valid_shape=[2, 1])
            where.append(next_line())
            return pl.store(t, [0, 0], y)  # two valid rows into a one-row window

        @pl.function(type=pl.FunctionType.Orchestration)
        def orch(self, x: pl.Tensor[[N, 1], pl.FP32],
                 y: pl.Out[pl.Tensor[[N, 1], pl.FP32]]) -> pl.Tensor[[N, 1], pl.FP32]:
            self.cell(pl.slice(x, [2, 1], [0, 0]), pl.slice(y, [1, 1], [0, 0]))
            return y

    with pytest.raises(PtoCompileError) as ei:
        ir.compile(Overhang)
    assert_at(ei, where[0], "window 0:2 of dimension 0 is outside the [1, 1] window")
