"""The driver's task-edge rule (``pto_task_deps_*``, through ir/_deps.py) against its reference model.

``reliability/task_rule_model.py`` is the rule in plain Python: for each
access it scans every live earlier access of the tensor.  The driver must
give the same edges (same pairs, same hazard and tensor for each) on any
program, however its tasks are cut into batches, and look at a bounded
number of earlier accesses per task when the tasks touch disjoint tiles.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reliability.task_rule_model import covers, hazard, model_edges, overlaps

from pypto_async.ir import _deps
from pypto_async.ir._deps import Access, Edge, Task, edges


def _box(ndim):
    lo = st.integers(-2, 12)
    span = st.integers(0, 6)
    return st.one_of(
        st.none(),
        st.lists(st.tuples(lo, span).map(lambda p: (p[0], p[0] + p[1])), min_size=ndim, max_size=ndim).map(tuple),
    )


# Ranks 0 to 2 for one tensor (of a hand-built program: a traced one keeps its rank), empty windows,
# whole tensors, untracked accesses, and an access that neither reads nor writes.
_access = st.builds(
    lambda tensor, mode, box, tracked: Access(tensor, "r" in mode, "w" in mode, box, tracked),
    st.sampled_from("xyz"),
    st.sampled_from(["r", "w", "rw", "r", "w", ""]),
    st.integers(0, 2).flatmap(_box),
    st.sampled_from([True, True, True, False]),
)


@st.composite
def programs(draw):
    n = draw(st.integers(1, 40))
    out = []
    for i in range(n):
        acc = tuple(draw(st.lists(_access, max_size=3)))
        deps = tuple(sorted(set(draw(st.lists(st.integers(0, i - 1), max_size=2))))) if i else ()
        out.append(Task(i, f"t{i}", acc, deps, draw(st.booleans()) and draw(st.booleans())))
    return out


@pytest.mark.slow  # hypothesis draws each program slowly (over a second in all on two CPUs)
@settings(max_examples=150, deadline=None)
@given(programs())
def test_the_drivers_edges_are_the_reference_models(tasks):
    assert edges(tasks) == model_edges(tasks)


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(programs(), st.integers(1, 9))
def test_batches_do_not_change_the_edges(tasks, batch):
    old = _deps._BATCH
    _deps._BATCH = batch
    try:
        got = edges(tasks)
    finally:
        _deps._BATCH = old
    assert got == model_edges(tasks)


def _random_program(rng: random.Random, n: int) -> list[Task]:
    def box():
        if rng.random() < 0.2:
            return None
        return tuple((lo, lo + rng.randint(0, 6)) for lo in (rng.randint(-2, 12) for _ in range(rng.randint(0, 2))))

    out = []
    for i in range(n):
        modes = [(True, False), (False, True), (True, True), (True, False), (False, True), (False, False)]
        acc = tuple(Access(rng.choice("xyz"), *rng.choice(modes), box(), rng.random() < 0.8)
                    for _ in range(rng.randint(0, 3)))
        deps = tuple(sorted({rng.randrange(i) for _ in range(rng.randint(0, 2))})) if i else ()
        out.append(Task(i, f"t{i}", acc, deps, rng.random() < 0.25))
    return out


@pytest.mark.slow
def test_random_programs_against_the_model():
    """The fast tier's share of the comparison: seeded random programs, some cut into small batches."""
    rng = random.Random(27)
    old = _deps._BATCH
    try:
        for k in range(300):
            tasks = _random_program(rng, rng.randint(1, 40))
            _deps._BATCH = rng.choice([old, 1, 3, 7])
            assert edges(tasks) == model_edges(tasks), k
    finally:
        _deps._BATCH = old


def test_the_models_pairs_and_windows():
    assert hazard(True, False, False, True) == "RAW" and hazard(False, True, False, True) == "WAW"
    assert hazard(False, True, True, False) == "WAR" and hazard(True, False, True, False) is None
    top, bottom = ((0, 4), (0, 8)), ((4, 8), (0, 8))
    assert overlaps(None, top) and not overlaps(top, bottom) and overlaps(top, ((0, 4),))
    assert covers(None, top) and covers(((0, 8), (0, 8)), top) and not covers(top, None)
    assert not covers(((0, 8),), ((0, 4), (0, 4)))  # another rank: neither covers


def test_each_hazard_kind_and_tensor_come_back_from_the_driver():
    es = edges([Task(0, "a", (Access("x", False, True),)), Task(1, "b", (Access("x", True, False),)),
                Task(2, "c", (Access("y", True, False), Access("x", False, True))),
                Task(3, "d", (Access("x", False, True),), deps=(1,))])
    assert es == [Edge(0, 1, "inferred", "RAW", "x"), Edge(0, 2, "inferred", "WAW", "x"),
                  Edge(1, 2, "inferred", "WAR", "x"), Edge(1, 3, "declared"), Edge(2, 3, "inferred", "WAW", "x")]


def test_what_the_driver_refuses_is_a_clear_error():
    with pytest.raises(ValueError, match="not valid"):
        edges([Task(0, "deep", (Access("x", True, False, tuple((0, 1) for _ in range(65))),))])
    with pytest.raises(ValueError, match="64 bits"):
        edges([Task(0, "far", (Access("x", True, False, ((0, 1 << 70),)),))])


@pytest.mark.slow
def test_tiled_tasks_equal_the_reference_and_look_at_few_earlier_accesses():
    """8,192 tasks over disjoint tiles of three tensors: each looks at its own tile's history only."""
    n, tile = 8192, 16
    tasks = []
    for i in range(n):
        r = ((i % 512) * tile, (i % 512 + 1) * tile)
        box = (r, (0, 64))
        tasks.append(Task(i, "t", (Access("x", True, False, box), Access("w", True, False, None),
                                   Access("y", i % 3 == 0, True, box)), ()))
    got, (added, looked, most) = _deps._edges_counted(tasks)
    assert added == n and most <= 4 and looked <= 4 * n  # bounded per task: linear in the tasks
    assert [e for e in got if e.dst < 600] == model_edges(tasks[:600])
