"""The reference model of the task-edge rule: which task instance of a program waits for which.

Plain Python, written for reading, not speed: the rule the driver's
``pto_task_deps_*`` (``native/src/taskdeps.c``) applies for a program's
compile-time table (``pypto_async/ir/_deps.py`` packs the accesses and
unpacks the edges) and whose pairs ``orch.c`` applies at submission for a
program without a table.  ``tests/ir/test_deps_index.py`` compares the
driver's edges with :func:`model_edges` on random programs.

Two accesses to overlapping data conflict unless both only read:

* a read after a write waits for the write (read-after-write, ``"RAW"``);
* a write after a write waits for it (write-after-write, ``"WAW"``);
* a write after a read waits for the read (write-after-read, ``"WAR"``);
* a read after a read never waits.

A window is a box (``((lo, hi), ...)`` per dimension) or ``None`` (the whole
tensor); boxes of different ranks overlap and neither covers the other.  A
write that covers an earlier access ends that access's history (a later
conflict with it is implied through the writer); a manual task gets its
declared edges only, and its writes end no history.  The streams' rule
(``native/src/hazard.c``, modelled by ``hazard_model.py``) pairs accesses the
same way.
"""

from __future__ import annotations

from pypto_async.ir._deps import Edge

__all__ = ["hazard", "overlaps", "covers", "model_edges"]


def hazard(later_read: bool, later_write: bool, earlier_read: bool, earlier_write: bool) -> str | None:
    """The hazard that orders a later access after an earlier one: ``"RAW"``, ``"WAW"``, ``"WAR"`` or None."""
    if later_read and earlier_write:
        return "RAW"
    if later_write and earlier_write:
        return "WAW"
    if later_write and earlier_read:
        return "WAR"
    return None


def overlaps(a, b) -> bool:
    """Whether two windows share an element (``None``: the whole tensor; another rank: assumed to)."""
    if a is None or b is None or len(a) != len(b):
        return True
    return all(alo < bhi and blo < ahi for (alo, ahi), (blo, bhi) in zip(a, b))


def covers(a, b) -> bool:
    """Whether window ``a`` holds every element of window ``b`` (``None``: the whole tensor)."""
    if a is None:
        return True
    if b is None or len(a) != len(b):
        return False
    return all(alo <= blo and bhi <= ahi for (alo, ahi), (blo, bhi) in zip(a, b))


def model_edges(tasks) -> list[Edge]:
    """The edges among ``tasks`` (``ir._deps.Task``, in submission order), sorted by (dst, src).

    Each tensor's history is a list of its live accesses; every access of a
    task is checked against every one of them (quadratic: the driver indexes
    them by region and must find the same edges).  A pair's edge is the
    first found: declared dependencies, then each access in order against
    the history in order.
    """
    found: dict[tuple[int, int], Edge] = {}
    history: dict[str, list] = {}
    for t in tasks:
        for d in t.deps:
            found.setdefault((d, t.id), Edge(d, t.id, "declared"))
        if not t.manual:
            for a in t.accesses:
                if not a.tracked:
                    continue
                for u, b in history.get(a.tensor, ()):
                    hz = hazard(a.read, a.write, b.read, b.write)
                    if hz is not None and overlaps(a.box, b.box):
                        found.setdefault((u, t.id), Edge(u, t.id, "inferred", hz, a.tensor))
        for a in t.accesses:
            if not a.tracked:
                continue
            past = history.setdefault(a.tensor, [])
            if a.write and not t.manual:
                past[:] = [(u, b) for u, b in past if u == t.id or not covers(a.box, b.box)]
            past.append((t.id, a))
    return sorted(found.values(), key=lambda e: (e.dst, e.src))
