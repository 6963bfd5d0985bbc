"""A PyPTO-style program: two InCore kernels and an orchestration that calls them on tiles.

``scale`` writes each tile of ``x`` times two into an intermediate; ``add``
adds ``y`` to it.  Each call is one task; the task graph (printed) has an
edge from each ``scale`` tile to the ``add`` of the same tile, and none
between tiles.  The whole program is one launch: on the device the
orchestration submits the tasks, and each runs on a free core as soon as the
tasks it waits for are done, so the tiles' chains run side by side.
"""

import numpy as np

import pypto_async.language as pl
from pypto_async import ir
from pypto_async.runtime import ChipWorker

ROWS, COLS, TILE = 128, 128, 64
FP32 = pl.FP32


@pl.program
class ScaleAdd:
    @pl.function(type=pl.FunctionType.InCore)
    def scale(self, x: pl.Tensor[[TILE, TILE], FP32], s: pl.Out[pl.Tensor[[TILE, TILE], FP32]]):
        tx: pl.Tile[[TILE, TILE], FP32] = pl.load(x, offsets=[0, 0], shapes=[TILE, TILE])
        return pl.store(pl.mul(tx, 2.0), offsets=[0, 0], output_tensor=s)

    @pl.function(type=pl.FunctionType.InCore)
    def add(self, s: pl.Tensor[[TILE, TILE], FP32], y: pl.Tensor[[TILE, TILE], FP32],
            out: pl.Out[pl.Tensor[[TILE, TILE], FP32]]):
        ts = pl.load(s, offsets=[0, 0], shapes=[TILE, TILE])
        ty = pl.load(y, offsets=[0, 0], shapes=[TILE, TILE])
        return pl.store(pl.add(ts, ty), offsets=[0, 0], output_tensor=out)

    @pl.function(type=pl.FunctionType.Orchestration)
    def orchestrator(self, x: pl.Tensor[[ROWS, COLS], FP32], y: pl.Tensor[[ROWS, COLS], FP32]):
        scratch = pl.create_tensor([ROWS, COLS], dtype=FP32)
        out = pl.create_tensor([ROWS, COLS], dtype=FP32, name="out")
        for r in range(0, ROWS, TILE):
            for c in range(0, COLS, TILE):
                win = (slice(r, r + TILE), slice(c, c + TILE))
                self.scale(x[win], scratch[win])
                self.add(scratch[win], y[win], out[win])
        return out


def main() -> None:
    compiled = ir.compile(ScaleAdd, platform="sim")
    graph = compiled.task_graph
    for e in graph.edges:
        src, dst = graph.tasks[e.src], graph.tasks[e.dst]
        print(f"{src.name}#{src.id} -> {dst.name}#{dst.id} ({e.kind} {e.hazard} on {e.tensor})")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((ROWS, COLS)).astype(np.float32)
    y = rng.standard_normal((ROWS, COLS)).astype(np.float32)
    with ChipWorker() as w:
        out = np.full((ROWS, COLS), np.nan, np.float32)
        w.run(compiled, x, y, out)
    np.testing.assert_array_equal(out, x * 2 + y)
    print(f"{len(graph.tasks)} tasks, {len(graph.edges)} edges, one launch: OK")


if __name__ == "__main__":
    main()
