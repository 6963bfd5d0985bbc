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

PyPTO's arrays of numbers, ``pl.array.create(16, pl.INT32)`` (an integer or
BOOL element type), are :class:`NumArray`: ``arr[i] = v`` (also
``pl.array.update_element(arr, i, v)``) and ``x = arr[i]`` (also
``pl.array.get_element(arr, i)``).  Inside a region (an on-core array, a
C-stack local on the device) each slot is a runtime scalar of the kernel,
so the index and the value may be loop indices and ``pl.read`` values; in
the orchestration the array holds what the trace knows (ints and index
expressions), written and read at compile-time indices.  A value is
converted to the element type as the device stores it (wrapping; BOOL is
``v != 0``); a slot not yet written reads 0.
"""

from __future__ import annotations

from dataclasses import replace

from .._dtypes import INTEGER_DTYPES
from .._scalars import is_int
from ..ir._bounds import RUNTIME, index_range
from ..ir._diag import compile_error
from ..ir._printer import format_index
from ..ir._nodes import IBin, IConst, IVar, Scope, SetIndex
from ._control import TaskId
from ._tracer import Index, ScalarArg, current, to_index, user_loc

__all__ = ["create", "get_element", "update_element", "TaskIdArray", "TaskSlot", "NumArray", "TASK_ID"]


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
        self.stores = 0  # the stores traced into it so far (a slot read is good until the next one)

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
        if getattr(tid, "branches", False):  # the task of whichever branch of a runtime if ran
            stored = _store_in_branches(block, set(tid.ids), (self.name, self.size, expr))
            if stored:
                self.stores += 1
                return
        for k in range(len(block) - 1, -1, -1):
            s = block[k]
            if isinstance(s, Scope) and s.task == tid.id:
                block[k] = replace(s, assigns=(*s.assigns, (self.name, self.size, expr)))
                self.stores += 1
                return
        raise compile_error(f"{self.name}[...] = {tid!r}: store a task id in the loop body that binds it, after "
                            f"its 'with pl.at(...) as tid:' block", loc)

    def __getitem__(self, index) -> "TaskSlot":
        """``arr[i]``: the task slot ``i`` holds, for a later ``deps=[arr[i]]`` (PyPTO's element read)."""
        t = self._tracer
        loc = user_loc()
        expr = to_index(index, f"{self.name}[...] index")
        lo, hi = index_range(expr, t.ranges, loc)
        if lo < 0 or hi >= self.size:
            raise compile_error(f"{self.name}[{format_index(expr)}] reads slots {lo}..{hi}, outside the array's "
                                f"{self.size} slots", loc)
        return TaskSlot(self, expr, loc)


def _store_in_branches(block: list, ids: set, assign) -> bool:
    """Record ``assign`` on each task of ``ids`` in ``block`` or its runtime ``if`` branches (in place)."""
    from ..ir._nodes import DynFor

    found = False

    def fix(stmts):
        nonlocal found
        out = []
        for s in stmts:
            if isinstance(s, Scope) and s.task in ids:
                s = replace(s, assigns=(*s.assigns, assign))
                found = True
            elif isinstance(s, DynFor) and s.kind in ("if", "else"):
                s = replace(s, body=tuple(fix(s.body)))
            out.append(s)
        return out

    block[:] = fix(block)
    return found


class TaskSlot:
    """One slot of a task-id array, read by ``arr[i]`` (or ``pl.array.get_element``): pass it to ``deps=``.

    The consumer waits for the task the slot holds when the consumer is submitted, which is the task it
    held when read as long as no store into the array was traced in between (checked at the ``deps=``).
    """

    def __init__(self, array: TaskIdArray, index, loc):
        self.array = array
        self.index = index
        self.loc = loc
        self.stores = array.stores

    def __repr__(self) -> str:
        return f"<pl.array slot {self.array.name}[{format_index(self.index)}]>"


#: Integer element types an array holds: every one but UINT64, whose values int64 index arithmetic cannot hold.
_ELEMENT_TYPES = tuple(d.name for d in INTEGER_DTYPES if d.name != "UINT64")


class NumArray:
    """``pl.array.create(n, pl.INT32)``: ``n`` integer slots, ``arr[i] = v`` and ``arr[i]`` (see the module)."""

    def __init__(self, tracer, name: str, size: int, dtype, loc):
        self._tracer = tracer
        self.name = name
        self.size = size
        self.dtype = dtype
        self._region = _region_of(tracer)
        if self._region is None:
            self._values: list = [0] * size  # the orchestration's: what the trace knows
        else:
            self._slots = [tracer.new_index(f"{name}_") for _ in range(size)]
            for v in self._slots:
                tracer.ranges[v.name] = RUNTIME
                tracer.append(SetIndex(v, IConst(0), loc))

    def __repr__(self) -> str:
        return f"<pl.array {self.name}[{self.size}] of pl.{self.dtype.name}>"

    def _check(self, what: str):
        t = current(f"pl.array {what}")
        loc = user_loc()
        if t is not self._tracer:
            raise compile_error(f"{self.name} belongs to another kernel", loc)
        if _region_of(t) != self._region and not (self._region is None and what == "element read"):
            # An orchestration array's values are known to the trace: a region may read them (as captured scalars).
            raise compile_error(f"{self.name} was created {self._where()}; an array does not cross a function "
                                f"boundary (use it where it was created)", loc)
        return t, loc

    def _where(self) -> str:
        return "in the orchestration" if self._region is None else "inside a region"

    def _index(self, t, index, loc):
        """The index expression and the slots it may name (checked against the array's size)."""
        if isinstance(index, bool):
            raise compile_error(f"{self.name}[...] takes an integer index, got {index!r}", loc)
        expr = to_index(index, f"{self.name}[...] index")
        bounds = index_range(expr, t.ranges, loc, runtime_ok=True)
        if bounds is None:  # a runtime scalar: any slot (an index outside the array names none)
            return expr, range(self.size)
        lo, hi = bounds
        if lo < 0 or hi >= self.size:
            raise compile_error(f"{self.name}[{format_index(expr)}] takes slots {lo}..{hi}, outside the array's "
                                f"{self.size} slots", loc)
        return expr, range(lo, hi + 1)

    def __setitem__(self, index, value) -> None:
        t, loc = self._check("element assignment")
        if not isinstance(value, (int, Index, ScalarArg)) or isinstance(value, float):
            raise compile_error(f"{self.name}[...] = takes an int, an index or a scalar (the element type is "
                                f"pl.{self.dtype.name}), got {value!r}", loc)
        expr, slots = self._index(t, index, loc)
        if self._region is None:
            self._store_orch(t, expr, slots, value, loc)
            return
        v = _wrap(to_index(value, f"{self.name}[...] value"), self.dtype)
        if len(slots) == 1:
            t.append(SetIndex(self._slots[slots[0]], v, loc))
            return
        tmp = t.new_index("s")  # the value first: it may read the slots it is about to change
        t.ranges[tmp.name] = RUNTIME
        t.append(SetIndex(tmp, v, loc))
        for k in slots:  # slot k takes the value where the index is k (exact in wrapping arithmetic)
            slot = self._slots[k]
            t.append(SetIndex(slot, IBin("+", slot, IBin("*", IBin("==", expr, IConst(k)), IBin("-", tmp, slot))),
                              loc))

    def _store_orch(self, t, expr, slots, value, loc) -> None:
        from ..errors import PtoNotSupported

        if len(slots) != 1 or _loop_vars(expr):
            raise PtoNotSupported(f"{loc}: {self.name}[{format_index(expr)}] = ...: an orchestration array is "
                                      f"written at indices known when it is compiled here (the orchestration's "
                                      f"scalar state is fixed then); write it inside a region, where it is an "
                                      f"on-core array")
        if isinstance(value, int):
            self._values[slots[0]] = _wrap_int(int(value), self.dtype)
            return
        e = to_index(value, f"{self.name}[...] value")
        self._values[slots[0]] = (e if self.dtype.name == "INT64" else _wrap(e, self.dtype), frozenset(_loop_vars(e)))

    def __getitem__(self, index):
        t, loc = self._check("element read")
        expr, slots = self._index(t, index, loc)
        if self._region is None:
            from ..errors import PtoNotSupported

            if len(slots) != 1:
                raise PtoNotSupported(f"{loc}: {self.name}[{format_index(expr)}]: an orchestration array is read "
                                      f"at indices known when it is compiled here")
            v = self._values[slots[0]]
            if isinstance(v, int):
                return v
            e, names = v
            gone = sorted(n for n in names if n not in t.ranges)
            if gone:
                raise PtoNotSupported(f"{loc}: {self.name}[{slots[0]}] holds a value of the loop index "
                                      f"{', '.join(gone)}, read after its loop: the orchestration's loops make the "
                                      f"task graph, which is fixed when it is compiled here")
            return Index(e)
        if len(slots) == 1:
            value = self._slots[slots[0]]
        else:
            value = IConst(0)
            for k in slots:
                value = IBin("+", value, IBin("*", IBin("==", expr, IConst(k)), self._slots[k]))
        from ._runtime_scalars import _bind

        return _bind(t, value, loc)  # a snapshot: a later write to the slot does not change it


def _region_of(t):
    """The region being traced (its task id, or the kernel call's), or None in the orchestration."""
    return t.next_task - 1 if "at" in t.frames else None


def _loop_vars(e) -> set[str]:
    if isinstance(e, IVar):
        return {e.name}
    if isinstance(e, IBin):
        return _loop_vars(e.a) | _loop_vars(e.b)
    return set()


def _wrap_int(v: int, dtype) -> int:
    if dtype.name == "BOOL":
        return int(v != 0)
    bits = 8 * dtype.itemsize
    if dtype.is_unsigned:
        return v % (1 << bits)
    half = 1 << (bits - 1)
    return (v + half) % (1 << bits) - half


def _wrap(e, dtype):
    """The index expression ``e`` as a ``dtype`` element holds it (two's-complement wrap; BOOL: ``e != 0``)."""
    name = dtype.name
    if isinstance(e, IConst):
        return IConst(_wrap_int(e.value, dtype))
    if name == "INT64":
        return e
    if name == "BOOL":
        return IBin("!=", e, IConst(0))
    if dtype.is_unsigned:
        return IBin("%", e, IConst(1 << (8 * dtype.itemsize)))
    half = 1 << (8 * dtype.itemsize - 1)
    return IBin("-", IBin("%", IBin("+", e, IConst(half)), IConst(2 * half)), IConst(half))


def get_element(array, index):
    """``pl.array.get_element(arr, i)``: ``arr[i]``."""
    if not isinstance(array, (NumArray, TaskIdArray)):
        raise compile_error(f"pl.array.get_element takes a pl.array, got {array!r}", user_loc())
    return array[index]


def update_element(array, index, value):
    """``pl.array.update_element(arr, i, v)``: ``arr[i] = v``; returns the array (PyPTO's functional form rebinds it)."""
    if not isinstance(array, (NumArray, TaskIdArray)):
        raise compile_error(f"pl.array.update_element takes a pl.array, got {array!r}", user_loc())
    array[index] = value
    return array


def create(size, dtype):
    """An array of ``size`` task ids (``pl.TASK_ID``, for ``deps=[array]``) or integers (:class:`NumArray`)."""
    from .._dtypes import DataType

    t = current("pl.array.create")
    loc = user_loc()
    if not is_int(size) or isinstance(size, bool) or size <= 0:
        raise compile_error(f"pl.array.create: the size must be a positive int, got {size!r}", loc)
    if dtype is not TASK_ID:
        if not isinstance(dtype, DataType) or dtype.name not in _ELEMENT_TYPES:
            raise compile_error(f"pl.array.create: the element type must be pl.TASK_ID or an integer or BOOL "
                                f"dtype ({', '.join('pl.' + n for n in _ELEMENT_TYPES)}), got {dtype!r}", loc)
        count = getattr(t, "num_arrays", 0)
        t.num_arrays = count + 1
        return NumArray(t, f"arr{count}", int(size), dtype, loc)
    count = getattr(t, "task_arrays", 0)
    t.task_arrays = count + 1
    fresh = getattr(t, "task_fresh", None)
    if fresh:  # made in a loop body: a new, empty array at each iteration
        fresh[-1].append((f"tids{count}", int(size)))
    return TaskIdArray(t, f"tids{count}", int(size))


def split_deps(deps, loc=None) -> tuple[object, tuple[tuple[str, int], ...], tuple]:
    """Take the task-id arrays and slots out of a ``deps=`` list.

    Returns ``(the rest, ((name, size), ...), ((name, size, index), ...))``.
    """
    from ..errors import PtoNotSupported

    if not isinstance(deps, (list, tuple)):
        return deps, (), ()
    arrays = tuple((d.name, d.size) for d in deps if isinstance(d, TaskIdArray))
    slots = []
    for d in deps:
        if not isinstance(d, TaskSlot):
            continue
        if d.stores != d.array.stores:
            raise PtoNotSupported(f"{loc or d.loc}: deps=[{d!r}]: the slot was read before a later store into "
                                  f"{d.array.name}; read it (arr[i]) just before the deps= that uses it")
        slots.append((d.array.name, d.array.size, d.index))
    return [d for d in deps if not isinstance(d, (TaskIdArray, TaskSlot))], arrays, tuple(slots)
