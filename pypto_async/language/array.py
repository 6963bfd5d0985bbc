"""``pl.array``: arrays of task ids, to make one task wait on a loop's worth of producers.

PyPTO's fan-in idiom::

    writers = pl.array.create(N, pl.TASK_ID)
    for i in pl.range(N):
        with pl.at(level=pl.Level.CORE_GROUP) as tid:
            ...
        writers[i] = tid
    with pl.at(level=pl.Level.CORE_GROUP, deps=[writers]):   # waits for every writer
        ...

``writers[i] = tid`` stores the task the enclosing loop's iteration submits
(it must sit in the loop body that binds ``tid``); ``deps=[writers]`` makes a
task wait for the tasks the array holds when it is submitted.  The store is
recorded on the producing region (``Scope.assigns``) and the use on the
consumer (``Scope.dep_arrays``); :func:`pypto_async.ir._deps.program_tasks`
replays the stores, instance by instance, to find the edges.

Only ``pl.TASK_ID`` arrays are here: PyPTO's on-core arrays of numbers
(``pl.array.create(16, pl.INT32)``, ``get_element``, ``update_element``)
are not.
"""

from __future__ import annotations

from dataclasses import replace

from .._scalars import is_int
from ..ir._bounds import index_range
from ..ir._diag import compile_error
from ..ir._printer import format_index
from ..ir._nodes import Scope
from ._control import TaskId
from ._tracer import current, to_index, user_loc

__all__ = ["create", "TaskIdArray", "TASK_ID"]


class _TaskIdType:
    """``pl.TASK_ID``: the element type of an array of task ids."""

    def __repr__(self) -> str:
        return "pl.TASK_ID"


TASK_ID = _TaskIdType()


class TaskIdArray:
    """``pl.array.create(n, pl.TASK_ID)``: ``n`` task-id slots; pass the array to ``deps=``."""

    def __init__(self, tracer, name: str, size: int):
        self._tracer = tracer
        self.name = name
        self.size = size

    def __repr__(self) -> str:
        return f"<pl.array {self.name}[{self.size}] of pl.TASK_ID>"

    def __setitem__(self, index, tid) -> None:
        t = self._tracer
        loc = user_loc()
        if current("pl.array element assignment") is not t:
            raise compile_error(f"{self.name} belongs to another kernel", loc)
        if not isinstance(tid, TaskId) or tid._tracer is not t:
            raise compile_error(f"{self.name}[...] = takes a task id bound by 'with pl.at(...) as tid' in this "
                                f"kernel, got {tid!r}", loc)
        expr = to_index(index, f"{self.name}[...] index")
        lo, hi = index_range(expr, t.ranges, loc)
        if lo < 0 or hi >= self.size:
            raise compile_error(f"{self.name}[{format_index(expr)}] takes slots {lo}..{hi}, outside the array's "
                                f"{self.size} slots", loc)
        block = t.blocks[-1]
        for k in range(len(block) - 1, -1, -1):
            s = block[k]
            if isinstance(s, Scope) and s.task == tid.id:
                block[k] = replace(s, assigns=(*s.assigns, (self.name, self.size, expr)))
                return
        raise compile_error(f"{self.name}[...] = {tid!r}: store a task id in the loop body that binds it, after "
                            f"its 'with pl.at(...) as tid:' block", loc)

    def __getitem__(self, index):
        raise compile_error(f"pass the whole array to deps= (deps=[{self.name}]); one element of a task-id "
                            f"array is not readable here", user_loc())


def create(size, dtype) -> TaskIdArray:
    """An array of ``size`` task ids (``pl.array.create(n, pl.TASK_ID)``), for ``deps=[array]``."""
    t = current("pl.array.create")
    loc = user_loc()
    if dtype is not TASK_ID:
        raise compile_error(f"pl.array.create: only pl.TASK_ID arrays are supported here, got {dtype!r}", loc)
    if not is_int(size) or isinstance(size, bool) or size <= 0:
        raise compile_error(f"pl.array.create: the size must be a positive int, got {size!r}", loc)
    count = getattr(t, "task_arrays", 0)
    t.task_arrays = count + 1
    return TaskIdArray(t, f"tids{count}", int(size))


def split_deps(deps) -> tuple[object, tuple[tuple[str, int], ...]]:
    """Take the task-id arrays out of a ``deps=`` list: ``(the rest, ((name, size), ...))``."""
    if not isinstance(deps, (list, tuple)):
        return deps, ()
    arrays = tuple((d.name, d.size) for d in deps if isinstance(d, TaskIdArray))
    return [d for d in deps if not isinstance(d, TaskIdArray)], arrays
