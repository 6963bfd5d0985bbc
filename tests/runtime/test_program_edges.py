"""A program too large for a compile-time table still runs as a graph: the device resolves its edges.

Past ``MAX_TASKS`` instances the compiler emits no table; each task site
carries its accesses (``pto_access_fn``) instead, and the driver resolves
every instance's edges as it is submitted, by the one edge rule, against the
instances still in the task window.  No program falls back to running its
tasks one after another.  The table limit is lowered here (as in
test_programs_device.py) so a small program takes that path; concurrency and
order are proved from the trace with delays long enough that an overlap is
no accident.
"""

from __future__ import annotations

import numpy as np
import pytest

import pypto_async.language as pl
from pypto_async.runtime import ChipWorker, RunConfig
from pypto_async.testing import delay_task

from test_programs import poison, rand

LIMIT = 16


@pytest.fixture
def no_table(monkeypatch):
    """Programs of more than LIMIT instances compile without a table."""
    from pypto_async.ir import _deps, _program_codegen

    monkeypatch.setattr(_deps, "MAX_TASKS", LIMIT)
    monkeypatch.setattr(_program_codegen, "MAX_TASKS", LIMIT)
    monkeypatch.setattr(_deps.program_tasks, "__defaults__", (LIMIT,))
    monkeypatch.setattr(_deps.task_graph, "__defaults__", (LIMIT,))


def _compile(fn, *args):
    with pytest.warns(RuntimeWarning, match="without a task graph"):
        c = fn.compile(*args)
    assert c.kind == "program" and c.task_graph is None
    return c


def _tasks(trace, name=None):
    return sorted((r for r in trace.records if r.kind_name == "task" and (name is None or r.name == name)),
                  key=lambda r: r.block)


@pytest.mark.slow
def test_independent_tasks_past_the_table_run_at_the_same_time(no_table):
    n = LIMIT + 4

    @pl.jit
    def rows(x: pl.Tensor, y: pl.Out[pl.Tensor]):
        for i in pl.range(n):
            with pl.incore(name_hint="row"):
                pl.store(pl.load(x, [i, 0], [1, 8]) * 3.0, [i, 0], y)

    x = rand((n, 8), 51)
    c = _compile(rows, x, poison((n, 8)))
    with ChipWorker(RunConfig(cores=2, timing="host")) as w:
        h = w.register(c)
        delay_task(h, "row", 0.02)
        y = poison((n, 8))
        with w.trace() as tr:
            h(x, y)
        st = h.program_stats()
    np.testing.assert_array_equal(y, x * 3)
    assert st["instances"] == 0 and st["tasks"] == n
    t = _tasks(tr.trace)
    assert len(t) == n
    # Not a chain (host threads; the device model keeps a chain past the table): a task starts before
    # the one submitted before it has ended, on the other core.
    assert any(b.start_ns < a.end_ns and a.engine != b.engine for a, b in zip(t, t[1:]))


@pytest.mark.slow
def test_loop_carried_hazards_past_the_table_stay_ordered(no_table):
    """produce(i) writes y, consume(i) reads it, produce(i + 1) overwrites it: RAW and WAR, resolved on the device."""
    n = LIMIT  # 2n instances

    @pl.jit
    def carried(x: pl.Tensor, y: pl.Out[pl.Tensor], z: pl.Out[pl.Tensor]):
        for i in pl.range(n):
            with pl.incore(name_hint="produce"):
                pl.store(pl.load(x, [i * 4, 0], [4, 32]) + 1.0, [0, 0], y)
            with pl.incore(name_hint="consume"):
                pl.store(pl.load(y, [0, 0], [4, 32]) * 2.0, [i * 4, 0], z)

    x = rand((4 * n, 32), 52)
    c = _compile(carried, x, poison((4, 32)), poison((4 * n, 32)))
    with ChipWorker(RunConfig(cores=2)) as w:
        h = w.register(c)
        delay_task(h, "consume", 0.004)  # a slow reader: an unordered overwrite would corrupt z
        y, z = poison((4, 32)), poison((4 * n, 32))
        with w.trace() as tr:
            h(x, y, z)
    np.testing.assert_allclose(z, (x + 1) * 2, rtol=1e-6)
    prod, cons = _tasks(tr.trace, "produce"), _tasks(tr.trace, "consume")
    for i in range(n):
        assert cons[i].start_ns >= prod[i].end_ns  # RAW
        if i:
            assert prod[i].start_ns >= cons[i - 1].end_ns  # WAR


def test_a_window_smaller_than_the_program_and_a_small_pool_drop_no_edge(no_table):
    """Instances leave the window as they complete; every conflict still in it is an edge."""
    n = 3 * LIMIT

    @pl.jit
    def stencil(x: pl.Tensor, acc: pl.Out[pl.Tensor]):
        for i in pl.range(n):
            with pl.incore(name_hint="add"):
                # Each task reads the whole accumulator row and adds its own row: a chain through acc.
                pl.store(pl.load(acc, [0, 0], [1, 8]) + pl.load(x, [i, 0], [1, 8]), [0, 0], acc)

    x = rand((n, 8), 53)
    c = _compile(stencil, x, poison((1, 8)))
    with ChipWorker(RunConfig(cores=2, ring_task_window=8, ring_dep_pool=2)) as w:
        h = w.register(c)
        acc = np.zeros((1, 8), np.float32)
        h(x, acc)
    want = np.zeros((1, 8), np.float32)
    for i in range(n):
        want = want + x[i:i + 1]
    np.testing.assert_array_equal(acc, want)


@pytest.mark.slow
def test_declared_dependencies_past_the_table_order_conservatively(no_table):
    """A task with deps= (or in a manual scope) waits for every earlier task still running: never less order."""
    n = LIMIT + 2

    @pl.jit
    def staged(x: pl.Tensor, s: pl.Out[pl.Tensor], out: pl.Out[pl.Tensor]):
        for i in pl.range(n):
            with pl.incore(name_hint="stage1") as t1:
                pl.store(pl.load(x, [i, 0], [1, 8]) + 1.0, [i, 0], s)
            with pl.incore(name_hint="stage2", deps=[t1]):
                pl.store(pl.load(s, [i, 0], [1, 8]) * 3.0, [i, 0], out)

    x = rand((n, 8), 54)
    c = _compile(staged, x, poison((n, 8)), poison((n, 8)))
    with ChipWorker(RunConfig(cores=2)) as w:
        h = w.register(c)
        delay_task(h, "stage1", 0.002)
        s, out = poison((n, 8)), poison((n, 8))
        with w.trace() as tr:
            h(x, s, out)
    np.testing.assert_allclose(out, (x + 1) * 3, rtol=1e-6)
    first, second = _tasks(tr.trace, "stage1"), _tasks(tr.trace, "stage2")
    for a, b in zip(first, second):
        assert b.start_ns >= a.end_ns
