"""The windows a task's loads and stores cover when they move with a loop inside the task.

``ir._deps`` bounds such a window by the loop's range (the hull of its
windows), so tasks writing disjoint slices with a loop inside need no claim
(``no_dep_args=``) to run side by side, while windows it cannot bound, or
whose hulls meet, still order the tasks (never fewer edges than the accesses
need).
"""

from __future__ import annotations

import numpy as np

import pypto_async.language as pl
from pypto_async.ir._deps import edges, program_tasks

N, K, R, C = 4, 3, 8, 32


def out_boxes(kernel, rows):
    x = np.zeros((rows, C), np.float32)
    tasks = program_tasks(kernel.lower(x, x))
    return [[a.box for a in t.accesses if a.tensor == "out"] for t in tasks], edges(tasks)


@pl.jit
def blocked(a: pl.Tensor, out: pl.Out[pl.Tensor]):
    for i in pl.parallel(N):
        with pl.at(level=pl.Level.CORE_GROUP):
            for h in pl.range(K):
                for q in pl.range(2):
                    t = pl.load(a, [(i * K + h) * 2 * R + q * R, 0], [R, C])
                    pl.store(t, [(i * K + h) * 2 * R + q * R, 0], out)
    return out


@pl.jit
def wrapped(a: pl.Tensor, out: pl.Out[pl.Tensor]):
    for i in pl.parallel(N):
        with pl.at(level=pl.Level.CORE_GROUP):
            for h in pl.range(K):
                t = pl.load(a, [((i + h) % N) * R, 0], [R, C])
                pl.store(t, [((i + h) % N) * R, 0], out)
    return out


def test_nested_loops_inside_a_task_bound_its_window_by_their_ranges():
    boxes, es = out_boxes(blocked, N * K * 2 * R)
    span = K * 2 * R
    assert boxes == [[((i * span, (i + 1) * span), (0, C))] for i in range(N)]
    assert es == []  # disjoint slices: no edge


def test_a_window_that_wraps_covers_every_row_it_may_reach_and_orders_the_tasks():
    boxes, es = out_boxes(wrapped, N * R)
    # (i + h) % N over h in [0, K): bands i .. i + K - 1 while they do not wrap, every band once they may.
    assert boxes == [[((0, 3 * R), (0, C))], [((R, 4 * R), (0, C))], [((0, N * R), (0, C))], [((0, N * R), (0, C))]]
    assert {(e.src, e.dst) for e in es} == {(0, 1), (0, 2), (1, 2), (2, 3)}
    assert all(e.hazard == "WAW" for e in es)
