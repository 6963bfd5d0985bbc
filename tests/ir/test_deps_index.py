"""The indexed edge computation (ir/_deps.py) against the quadratic one it replaced.

``quadratic_edges`` is the previous implementation, kept here as the
reference: for each access it scanned every live earlier access of the
tensor.  The indexed one must give the same edges (same pairs, same hazard
and tensor for each) on any program, and look at a bounded number of
earlier accesses per task when the tasks touch disjoint tiles.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pypto_async._hazard_rule import covers, hazard, overlaps
from pypto_async.ir import _deps
from pypto_async.ir._deps import Access, Edge, Task, edges


def quadratic_edges(tasks):
    found: dict[tuple[int, int], Edge] = {}
    history: dict[str, list[tuple[int, Access]]] = {}
    for t in tasks:
        for d in t.deps:
            found.setdefault((d, t.id), Edge(d, t.id, "declared"))
        if not t.manual:
            for a in t.accesses:
                for u, b in history.get(a.tensor, ()):
                    hz = hazard(a.read, a.write, b.read, b.write)
                    if hz is not None and u != t.id and overlaps(a.box, b.box):
                        found.setdefault((u, t.id), Edge(u, t.id, "inferred", hz, a.tensor))
        for a in t.accesses:
            past = history.setdefault(a.tensor, [])
            if a.write and not t.manual:
                past[:] = [(u, b) for u, b in past if u == t.id or not covers(a.box, b.box)]
            past.append((t.id, a))
    return sorted(found.values(), key=lambda e: (e.dst, e.src))


def _box(ndim):
    lo = st.integers(-2, 12)
    span = st.integers(0, 6)
    return st.one_of(
        st.none(),
        st.lists(st.tuples(lo, span).map(lambda p: (p[0], p[0] + p[1])), min_size=ndim, max_size=ndim).map(tuple),
    )


_access = st.builds(
    lambda tensor, mode, box: Access(tensor, mode in ("r", "rw"), mode in ("w", "rw"), box),
    st.sampled_from("xyz"),
    st.sampled_from(["r", "w", "rw", "r", "w"]),
    st.integers(1, 2).flatmap(_box),
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


@pytest.mark.slow  # over half a second each on two CPUs (the fast tier's budget)
@settings(max_examples=40, deadline=None)
@given(programs())
def test_indexed_edges_equal_the_quadratic_reference(tasks):
    assert edges(tasks) == quadratic_edges(tasks)


def test_tiled_tasks_equal_the_reference_and_look_at_few_earlier_accesses(monkeypatch):
    """8,192 tasks over disjoint tiles of three tensors: each looks at its own tile's history only."""
    looked = []
    near = _deps._RegionIndex.near

    def counting(self, box):
        out = near(self, box)
        looked.append(len(out))
        return out

    monkeypatch.setattr(_deps._RegionIndex, "near", counting)
    n, tile = 8192, 16
    tasks = []
    for i in range(n):
        r = ((i % 512) * tile, (i % 512 + 1) * tile)
        box = (r, (0, 64))
        tasks.append(Task(i, "t", (Access("x", True, False, box), Access("w", True, False, None),
                                   Access("y", i % 3 == 0, True, box)), ()))
    got = edges(tasks)
    assert max(looked) <= 4 and sum(looked) <= 4 * n  # bounded per task: linear in the tasks
    monkeypatch.setattr(_deps._RegionIndex, "near", near)
    assert [e for e in got if e.dst < 600] == quadratic_edges(tasks[:600])
