"""``pl.submit``, ``pl.no_dep`` and ``pl.system.task_dummy``: naming a program's tasks, and untracking one argument.

* ``result, tid = pl.submit(self.kernel, *args, deps=[...])`` calls a
  kernel of the enclosing ``@pl.program`` as one task, as ``self.kernel(...)``
  does, and returns what the kernel returns followed by the task's id, one
  flat tuple (``a, b, tid`` for a kernel returning two tensors) for a later
  ``deps=``.  ``deps=`` takes task ids and ``pl.array`` task-id arrays;
  ``allow_early_resolve=`` is a scheduling hint and ``dumps=`` marks tensors
  for PyPTO's selective dump: both are checked and recorded on the task
  (``Scope.hints``) and change no result.  ``predicate=(gate[i, j] > v)``
  skips the task's work where the element of an integer tensor fails the
  comparison, read as the task starts (:class:`DispatchPredicate`); the
  skipped task still completes, so its dependents run.
* ``pl.spmd_submit(self.kernel, *args, core_num=n)`` is ``pl.submit`` of a
  kernel that ``n`` blocks run, each reading its index with
  ``pl.tile.get_block_idx()``: one task (one task id), whose blocks the sim
  runs one after another; ``sync_start=`` is recorded.
* ``pl.no_dep(t)`` wraps a kernel-call argument: the call's access to ``t``
  is not tracked (no edge into or out of the task from ``t``; ``deps=``
  still orders it).  Anywhere else it is ``t`` (outside a traced body, any
  value, unchanged).
* ``pl.system.task_dummy(deps=[...])`` joins task ids into one: waiting
  for it is waiting for each of them.  It runs nothing.
"""

from __future__ import annotations

import copy

from .._scalars import is_int
from ..errors import PtoCompileError, PtoNotSupported
from ..ir._diag import compile_error
from ._control import TaskId, task_deps
from ._tracer import Index, TensorArg, current, user_loc

__all__ = ["submit", "spmd_submit", "get_block_idx", "get_block_num", "no_dep", "task_dummy", "TaskJoin", "dump_tag", "task_dumps",
           "program_dump_tags", "dumps_names"]


def _in_kernel(op: str):
    try:
        return current(op)
    except PtoCompileError:
        raise PtoCompileError(f"{op} is a DSL parser construct and cannot be called directly (call it inside "
                              f"the orchestration of a @pl.program)") from None


def _tracing() -> bool:
    try:
        current("pl.no_dep")
    except PtoCompileError:
        return False
    return True


def submit(kernel, *args, deps=None, dumps=None, allow_early_resolve: bool = False, predicate=None,
           name_hint: str | None = None):
    """Call ``self.kernel`` as one task and return ``(*its results, task id)`` (see the module)."""
    return _submit("pl.submit", kernel, args, deps, dumps, allow_early_resolve, predicate, name_hint, None, [])


def spmd_submit(kernel, *args, core_num=None, sync_start: bool = False, deps=None, dumps=None,
                allow_early_resolve: bool = False, predicate=None, name_hint: str | None = None):
    """``pl.submit`` of a kernel run by ``core_num`` blocks, one task (see the module)."""
    loc = user_loc()
    _in_kernel("pl.spmd_submit")
    if core_num is None:
        raise compile_error("pl.spmd_submit requires core_num= (a keyword: the positional slots are the "
                            "kernel's arguments)", loc)
    if not is_int(core_num) or isinstance(core_num, bool) or core_num < 1:
        raise compile_error(f"pl.spmd_submit(core_num=...) takes a positive int, got {core_num!r}", loc)
    if not isinstance(sync_start, bool):
        raise compile_error(f"pl.spmd_submit(sync_start=...) takes a bool, got {sync_start!r}", loc)
    hints = [("core_num", int(core_num))] + ([("sync_start", True)] if sync_start else [])
    return _submit("pl.spmd_submit", kernel, args, deps, dumps, allow_early_resolve, predicate, name_hint,
                   int(core_num), hints)


def _submit(op, kernel, args, deps, dumps, allow_early_resolve, predicate, name_hint, core_num, hints):
    from ._program import _Kernel

    _in_kernel(op)  # only inside the orchestration of a @pl.program
    loc = user_loc()
    if not isinstance(kernel, _Kernel):
        raise compile_error(f"{op}(...) first argument must be a self.<kernel> method reference (a kernel of "
                            f"the enclosing @pl.program), got {kernel!r}; in a @pl.jit function use 'with "
                            f"pl.at(..., deps=[...]) as tid:'", loc)
    check_predicate(op, predicate, loc)
    if not isinstance(allow_early_resolve, bool):
        raise compile_error(f"{op}() allow_early_resolve must be a boolean (True/False), got "
                            f"{allow_early_resolve!r}", loc)
    if allow_early_resolve:
        hints.append(("allow_early_resolve", True))
    explicit = dumps_names(op, dumps, loc)
    if explicit:
        hints.append(("dumps", explicit))
    result, tid = kernel.call(args, deps=deps, hints=tuple(hints), with_task=True, loc=loc, name_hint=name_hint,
                              core_num=core_num, predicate=predicate)
    items = result if isinstance(result, tuple) else (() if result is None else (result,))
    return (*items, tid)


class DispatchPredicate:
    """PyPTO's dispatch predicate, ``gate[i, j] > v`` (``<``, ``<=``, ``>``, ``>=``): ``predicate=`` of a task.

    The task runs only where it holds, read when the task is dispatched (its deps met); a task it skips
    does nothing and still completes, so its dependents run.  Here the task reads the element as it
    starts and runs its body only where the comparison holds (one element of an integer tensor of the
    orchestration, against an int or an index; the task reads the tensor, so it is ordered after the
    element's writers too).
    """

    def __init__(self, tensor, op: str, other, loc):
        self.tensor, self.op, self.other, self.loc = tensor, op, other, loc

    def __repr__(self) -> str:
        return f"<dispatch predicate {self.tensor.name!r} {self.op} {self.other!r}>"

    def __bool__(self):
        raise compile_error(f"comparing the tensor {self.tensor.name!r} with {self.other!r} is a "
                            f"dispatch predicate (pl.submit(..., predicate=...)), not a truth value: read the "
                            f"element with pl.read to branch on it", self.loc)

    def wrap(self, t, body: tuple, loc) -> tuple[tuple, tuple]:
        """``body`` run only where the predicate holds, and the read access it adds to the task."""
        from ..ir._bounds import RUNTIME
        from ._runtime_scalars import INTEGER_DTYPES
        from ..ir._nodes import DynFor, IBin, IConst, IRead, SetIndex
        from ._tracer import to_index

        tensor = self.tensor
        p = t.params[tensor.name]
        shape = tuple(tensor.shape)
        if p.dtype.name not in INTEGER_DTYPES:
            raise PtoNotSupported(f"{self.loc}: predicate=: {tensor.name!r} is {p.dtype.name}; a dispatch "
                                  f"predicate reads an integer tensor here")
        if any(n != 1 for n in shape):
            raise compile_error(f"predicate= compares one element (gate[i, j] > v), got the {list(shape)} "
                                f"window of {tensor.name!r}", self.loc)
        if isinstance(self.other, bool) or not isinstance(self.other, (int, Index)):
            raise compile_error(f"predicate= compares {tensor.name!r} with an int or an index, got "
                                f"{self.other!r}", self.loc)
        origin = getattr(tensor, "origin", (IConst(0),) * len(p.shape))
        value = t.new_index("p")
        t.ranges[value.name] = RUNTIME
        cond = IBin(self.op, value, to_index(self.other, "predicate= value"))
        wrapped = (SetIndex(value, IRead(p.name, tuple(origin), tuple(p.shape)), loc),
                   DynFor(t.new_index("c"), IConst(0), cond, 1, body, loc, "if"))
        return wrapped, ((p.name, "r", tuple(origin), shape),)


def check_predicate(op: str, predicate, loc) -> None:
    if predicate is not None and not isinstance(predicate, DispatchPredicate):
        hint = (" (== and != compare tensors as objects here: write the gate with <, <=, > or >=)"
                if isinstance(predicate, bool) else "")
        raise compile_error(f"{op}(predicate=...) takes a comparison of one element of a tensor with a value "
                            f"(gate[0, 0] > 0), got {predicate!r}{hint}", loc)


def get_block_idx():
    """The index of the block running the body: of a ``pl.spmd_submit`` task, or of ``pl.spmd`` (an index)."""
    t = current("pl.tile.get_block_idx")
    index = getattr(t, "block_index", None)
    if index is None and getattr(t, "spmd_index", None) is not None and t.in_spmd:
        index = t.spmd_index
    if index is not None:
        t.block_index_read = True  # a `with pl.spmd(n):` body must read it
    if index is None:
        raise compile_error("pl.tile.get_block_idx() is the block index of a pl.spmd_submit kernel or a pl.spmd "
                            "body; there is none here", user_loc())
    return index


def get_block_num() -> int:
    """The number of blocks running the body (PyPTO's ``pl.tile.get_block_num()``): its ``core_num``, an int.

    Where :func:`get_block_idx` is defined: a ``pl.spmd_submit`` kernel or a
    ``pl.spmd`` body (``0 <= get_block_idx() < get_block_num()``).
    """
    t = current("pl.tile.get_block_num")
    index = getattr(t, "block_index", None)
    if index is None and getattr(t, "spmd_index", None) is not None and t.in_spmd:
        index = t.spmd_index
    bounds = t.ranges.get(index.expr.name) if index is not None else None
    if bounds is None:
        raise compile_error("pl.tile.get_block_num() is the block count of a pl.spmd_submit kernel or a pl.spmd "
                            "body; there is none here", user_loc())
    return bounds[1] + 1


def no_dep(tensor):
    """Mark a kernel-call argument untracked (``self.k(pl.no_dep(t), ...)``); elsewhere it is ``tensor``."""
    loc = user_loc()
    if not isinstance(tensor, TensorArg) and not _tracing():
        return tensor  # outside a traced body it is the tensor, unchanged
    if not isinstance(tensor, TensorArg):
        raise compile_error(f"pl.no_dep takes a tensor (a kernel-call argument), got {tensor!r}", loc)
    out = copy.copy(tensor)
    out.no_dep = True
    return out


class TaskJoin(TaskId):
    """A task id that stands for several (``pl.system.task_dummy``): ``deps=[join]`` waits for each."""

    def __init__(self, tracer, ids: tuple[int, ...]):
        super().__init__(tracer, ids[0] if ids else -1, None)
        self.ids = ids

    def __repr__(self) -> str:
        return f"<task join of {list(self.ids)}>"


def task_dummy(*, deps=None):
    """A dependency join with no work: one task id for all of ``deps`` (PyPTO's ``pl.system.task_dummy``)."""
    t = _in_kernel("pl.system.task_dummy")
    loc = user_loc()
    if not isinstance(deps, (list, tuple)) or not deps:
        raise compile_error(f"pl.system.task_dummy(deps=[...]) takes a non-empty list of task ids, got {deps!r}",
                            loc)
    from .array import TaskIdArray, TaskSlot

    if any(isinstance(d, (TaskIdArray, TaskSlot)) for d in deps):
        # Waiting on an array waits on what it holds now: a task of no work of its own (PyPTO's dummy task),
        # whose deps= are the array's slots at this point of the orchestration.
        from ._control import at
        from ._types import Level

        region = at(Level.CORE_GROUP, name_hint="task_dummy", deps=list(deps))
        tid = region.__enter__()
        region.__exit__(None, None, None)
        return tid
    return TaskJoin(t, task_deps(t, deps, loc))


def dump_tag(tensor) -> None:
    """Mark ``tensor`` for PyPTO's selective dump: each later task that consumes it dumps it.

    A statement of the orchestration (a ``@pl.program``'s, or a ``@pl.jit``
    body outside its regions) or of an inline helper.  Under
    ``RunConfig(enable_dump_args=1)`` the program's marked parameters that a
    task consumes are written to ``dfx_outputs/args_dump/`` (before and after
    the launch); the mark is recorded on each consuming task
    (``Scope.hints``: ``("dumps", names)``) and changes no result.  Inside a
    region or a kernel's body it is a compile error, as in PyPTO (the dump is
    attached where the orchestration dispatches a task).
    """
    t = current("pl.dump_tag")
    loc = user_loc()
    if "at" in t.frames or getattr(t, "func_attrs", None) is not None:
        raise compile_error("pl.dump_tag belongs to the orchestration (or an inline helper): place it before the "
                            "region or kernel call that consumes the tensor, not inside a region or a kernel's "
                            "body", loc)
    if not isinstance(tensor, TensorArg) or hasattr(tensor, "origin"):
        raise compile_error(f"pl.dump_tag takes a whole tensor (a parameter or a pl.create_tensor tensor), got "
                            f"{tensor!r}", loc)
    tags = getattr(t, "dump_tags", None)
    if tags is None:
        tags = t.dump_tags = []
    if tensor.name not in tags:
        tags.append(tensor.name)


def dumps_names(op: str, dumps, loc) -> tuple[str, ...]:
    """Check a ``dumps=[...]`` list (whole tensors) and return their names."""
    if dumps is None:
        return ()
    if not isinstance(dumps, (list, tuple)) or not all(isinstance(d, TensorArg) for d in dumps):
        raise compile_error(f"{op}(dumps=...) takes a list of tensors, got {dumps!r}", loc)
    out: list[str] = []
    for d in dumps:
        if d.name not in out:
            out.append(d.name)
    return tuple(out)


def task_dumps(t, touched, explicit: tuple[str, ...] = ()) -> tuple:
    """The ``("dumps", names)`` hint of a task touching ``touched``: its ``dumps=`` and the tagged tensors."""
    tags = getattr(t, "dump_tags", None) or ()
    names = list(explicit) + [n for n in tags if n in touched and n not in explicit]
    return (("dumps", tuple(names)),) if names else ()


def program_dump_tags(t, body) -> tuple[str, ...]:
    """The tensors a traced program dumps at level 1: every task's ``dumps``; a program with no task, its tags."""
    from ..ir._nodes import Scope

    found: list[str] = []
    seen_task = False

    def walk(stmts):
        nonlocal seen_task
        for s in stmts:
            if isinstance(s, Scope):
                seen_task = True
                for name, value in s.hints:
                    if name == "dumps":
                        found.extend(n for n in value if n not in found)
            inner = getattr(s, "body", None)
            if isinstance(inner, tuple):
                walk(inner)

    walk(body)
    if not seen_task:  # one kernel: it consumes every tensor the tags name
        found.extend(n for n in (getattr(t, "dump_tags", None) or ()) if n not in found)
    return tuple(found)
