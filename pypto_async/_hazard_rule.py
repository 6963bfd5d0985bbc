"""The hazard of two accesses to a program's tensors, and the windows they touch: the compile-time task rule.

Two accesses to overlapping data conflict unless both only read:

* a read after a write waits for the write (read-after-write, ``"RAW"``);
* a write after a write waits for it (write-after-write, ``"WAW"``);
* a write after a read waits for the read (write-after-read, ``"WAR"``);
* a read after a read never waits.

The tasks inside one program are ordered by :func:`hazard` on the windows
they touch (:mod:`pypto_async.ir._deps`, at compile time: an edge between
two tasks, named by its hazard, when their windows overlap as
:func:`overlaps` says, and a write that :func:`covers` an earlier one ends
its history).  That is a different rule from the runtime's, though the
pairs agree: launches and copies on streams (eager ones, a graph capture's
and a replay's) are ordered by the driver (``native/src/hazard.c``), per
whole allocation and per stream, with clocks that skip implied edges; its
reference model is ``tests/reliability/hazard_model.py``.
"""

from __future__ import annotations

__all__ = ["hazard", "overlaps", "covers"]


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
    """Whether two boxes (``((lo, hi), ...)`` per dimension; ``None``: the whole tensor) share an element."""
    if a is None or b is None:
        return True
    return all(alo < bhi and blo < ahi for (alo, ahi), (blo, bhi) in zip(a, b))


def covers(a, b) -> bool:
    """Whether box ``a`` holds every element of box ``b`` (``None``: the whole tensor)."""
    if a is None:
        return True
    if b is None:
        return False
    return all(alo <= blo and bhi <= ahi for (alo, ahi), (blo, bhi) in zip(a, b))
