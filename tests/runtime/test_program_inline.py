"""A small program is orchestrated by the thread that starts it; one that could wait is handed off.

The driver runs a program's orchestration inside the scheduler pass that
starts it (no orchestration thread woken) only when it can never wait: a
compiled table of at most 64 instances that fits the task window, every
predecessor entry in the dependency pool, every intermediate in the heap at
once (``pto_program_stats.inline_runs`` counts those runs).  Either way the
results are the same.
"""

from __future__ import annotations

import numpy as np
import pytest

import pypto_async.language as pl
from pypto_async import ir
from pypto_async.runtime import ChipWorker, RunConfig

from test_programs import poison, rand

F = pl.FP32


@pl.program
class FanIn:
    """Eight parts into an intermediate, then one task that reads all of it (8 predecessor entries)."""

    @pl.function(type=pl.FunctionType.InCore)
    def part(self, x: pl.Tensor[[8, 32], F], y: pl.Out[pl.Tensor[[8, 32], F]]):
        pl.store(pl.load(x, [0, 0], [8, 32]) * 3.0, [0, 0], y)
        return y

    @pl.function(type=pl.FunctionType.InCore)
    def whole(self, y: pl.Tensor[[64, 32], F], out: pl.Out[pl.Tensor[[64, 32], F]]):
        pl.store(pl.load(y, [0, 0], [64, 32]) - 1.0, [0, 0], out)
        return out

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, x: pl.Tensor[[64, 32], F], out: pl.Out[pl.Tensor[[64, 32], F]]):
        y = pl.create_tensor([64, 32], F)
        for i in range(8):
            self.part(x[i * 8:(i + 1) * 8], y[i * 8:(i + 1) * 8])
        self.whole(y, out)
        return out


@pl.program
class Pipeline:
    """A chain through four intermediates (at most two live at once)."""

    @pl.function(type=pl.FunctionType.InCore)
    def step(self, a: pl.Tensor[[128, 128], F], b: pl.Out[pl.Tensor[[128, 128], F]]):
        pl.store(pl.load(a, [0, 0], [128, 128]) + 1.0, [0, 0], b)
        return b

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, x: pl.Tensor[[128, 128], F], out: pl.Out[pl.Tensor[[128, 128], F]]):
        t = x
        for _ in range(4):
            t = self.step(t, pl.create_tensor([128, 128], F))
        self.step(t, out)
        return out


@pl.program
class Wide:
    """65 independent tasks: one more than a program orchestrated inline may have."""

    @pl.function(type=pl.FunctionType.InCore)
    def inc(self, x: pl.Tensor[[1, 32], F], y: pl.Out[pl.Tensor[[1, 32], F]]):
        pl.store(pl.load(x, [0, 0], [1, 32]) + 1.0, [0, 0], y)
        return y

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, x: pl.Tensor[[65, 32], F], y: pl.Out[pl.Tensor[[65, 32], F]]):
        for i in pl.range(65):
            self.inc(x[i:i + 1], y[i:i + 1])
        return y


def _runs(c, x, rounds: int, **cfg) -> tuple[list[np.ndarray], dict]:
    outs = []
    with ChipWorker(RunConfig(cores=2, **cfg)) as w:
        h = w.register(c)
        for _ in range(rounds):
            out = poison(x.shape)
            h(x, out)
            outs.append(out)
        return outs, h.program_stats()


@pytest.mark.slow
def test_a_small_program_that_cannot_wait_is_orchestrated_inline_with_its_intermediates():
    c = ir.compile(FanIn)
    x = rand((64, 32), 41)
    outs, st = _runs(c, x, 3)
    for out in outs:
        np.testing.assert_allclose(out, x * 3 - 1, rtol=1e-6)
    assert st["runs"] == 3 and st["inline_runs"] == 3
    assert st["heap_hwm"] >= 64 * 32 * 4  # the intermediate was placed


@pytest.mark.slow
def test_inline_intermediates_each_have_their_own_bytes():
    """Four intermediates of a chain, placed one after another (a ring_heap that must reuse: not inline)."""
    c = ir.compile(Pipeline)
    x = rand((128, 128), 44)
    outs, st = _runs(c, x, 2)
    want = x
    for _ in range(5):
        want = want + np.float32(1)
    for out in outs:
        np.testing.assert_array_equal(out, want)
    assert st["inline_runs"] == 2 and st["heap_hwm"] == 4 * 128 * 128 * 4 and st["heap_waits"] == 0
    # Heap room for two at a time: the orchestration may wait, so it runs on an orchestration thread.
    outs, st = _runs(c, x, 1, ring_heap=2 * 128 * 128 * 4)
    np.testing.assert_array_equal(outs[0], want)
    assert st["inline_runs"] == 0


@pytest.mark.parametrize("cfg", [{"ring_dep_pool": 4}, {"ring_task_window": 8}],
                         ids=["dep pool too small", "window too small"])
def test_a_program_that_could_wait_for_a_ring_goes_to_an_orchestration_thread(cfg):
    c = ir.compile(FanIn)
    x = rand((64, 32), 42)
    outs, st = _runs(c, x, 2, **cfg)
    for out in outs:
        np.testing.assert_allclose(out, x * 3 - 1, rtol=1e-6)
    assert st["runs"] == 2 and st["inline_runs"] == 0


def test_a_program_of_more_than_64_tasks_goes_to_an_orchestration_thread():
    c = ir.compile(Wide)
    x = rand((65, 32), 43)
    outs, st = _runs(c, x, 2)
    for out in outs:
        np.testing.assert_array_equal(out, x + 1)
    assert st["runs"] == 2 and st["tasks"] == 130 and st["inline_runs"] == 0
