"""Scopes and loops: ``pl.at``, ``pl.range``, ``pl.parallel``, ``pl.spmd``.

``pl.range`` and ``pl.spmd`` are iterators that yield exactly once: the body
of your ``for`` is traced one time, with a symbolic :class:`Index`, and
becomes a loop (or a per-block body) in the IR.  A plain Python ``range``
unrolls instead.  ``break`` and ``continue`` have no meaning in a traced loop.
Tiles carried from one iteration to the next are in ``_carry``.
"""

from __future__ import annotations

import builtins
import sys

from .._scalars import is_int
from ..ir._diag import compile_error
from ..ir._bounds import RUNTIME
from ..ir._nodes import DynFor, For, Scope, Spmd
from ._hints import no_dep_names, region_hints, scope_hints
from ._escape import region_closed, region_opened
from ._carry import carry_rebound, open_carries, scratch_locals, tile_locals
from ._tracer import Index, ScalarArg, TensorArg, Tile, current, to_index, user_loc
from ._types import Level

__all__ = ["at", "incore", "auto_incore", "manual_scope", "TaskId", "range", "parallel", "spmd"]


class TaskId:
    """The id of a region's task, bound by ``with pl.at(...) as tid:``; pass it to a later ``deps=``."""

    def __init__(self, tracer, id_: int, name: str | None):
        self._tracer = tracer
        self.id = id_
        self.name = name

    def __repr__(self) -> str:
        return f"<task {self.id}{'' if self.name is None else ' ' + repr(self.name)}>"


def task_deps(tracer, deps, loc, task: int | None = None) -> tuple[int, ...]:
    """Check ``deps=`` (task ids of this kernel's earlier regions) and return their ids.

    ``None`` is PyPTO's empty slot (no producer yet, as a carried task id's seed) and adds no edge; the
    ``task`` about to be made with such a ``deps=`` is noted (``tracer.none_dep_tasks``): a loop whose body
    rebinds a name from ``None`` to a task id makes that name's task a dep of it (see :func:`carry_task_ids`).
    """
    if deps is None:
        return ()
    if not isinstance(deps, (list, tuple)):
        raise compile_error(f"deps= takes a list of task ids (with pl.at(...) as tid), got {deps!r}", loc)
    out = []
    for d in deps:
        if d is None:
            if task is not None:
                if not hasattr(tracer, "none_dep_tasks"):
                    tracer.none_dep_tasks = set()
                tracer.none_dep_tasks.add(task)
            continue
        if not isinstance(d, TaskId) or d._tracer is not tracer:
            raise compile_error(f"deps= takes task ids bound by 'with pl.at(...) as tid' in this kernel, got {d!r}",
                                loc)
        out.extend(getattr(d, "ids", (d.id,)))  # a pl.system.task_dummy join stands for several
    return tuple(out)


class at:
    """Mark the body of a ``with`` as running on a core of ``level``: one task of the kernel.

    ``with pl.at(level=pl.Level.CORE_GROUP, name_hint="stage1", deps=[t0]) as t1: ...``
    binds the task id ``t1``; ``deps=`` adds edges from earlier tasks to the
    ones inferred from the tensors each task touches.  ``no_dep_args=[t]``
    takes the region's accesses to tensor ``t`` out of that inference (no
    edge into or out of this task from ``t``); ``optimizations=[pl.split(...),
    pl.cross_core_slot(...)]`` and ``allow_early_resolve=`` are scheduling
    hints, checked and recorded (see :mod:`._hints`).
    """

    def __init__(self, level: Level = Level.CORE_GROUP, *, name_hint: str | None = None, deps=None,
                 optimizations=None, no_dep_args=None, allow_early_resolve: bool = False, dumps=None,
                 **unknown):
        if "predicate" in unknown:  # PyPTO's pl.at has none either: a predicate belongs to a dispatch
            raise compile_error("pl.at() takes no predicate=: a task that runs only when a value says so is "
                                "a dispatch form's (pl.spmd(n, predicate=...) or pl.submit(..., predicate=...) "
                                "around a kernel call); in a region, branch on the value (pl.read and if)",
                                user_loc())
        if unknown:
            raise compile_error(f"pl.at() got an unexpected keyword argument {next(iter(unknown))!r}", user_loc())
        if not isinstance(level, Level):
            raise compile_error(f"pl.at(level=...) takes a pl.Level, got {level!r}", user_loc())
        if name_hint is not None and not (isinstance(name_hint, str) and name_hint):
            raise compile_error(f"pl.at(name_hint=...) takes a non-empty str, got {name_hint!r}", user_loc())
        self.level = level
        self.name_hint = name_hint
        self.deps = deps
        self._hints = region_hints(optimizations, allow_early_resolve, user_loc())
        self._no_dep = no_dep_names(no_dep_args, user_loc())
        from ._submit import dumps_names

        self._dumps = dumps_names("pl.at", dumps, user_loc())

    def __enter__(self) -> TaskId:
        self._tracer = current("pl.at")
        self._loc = user_loc()
        from .array import split_deps

        deps, self._dep_arrays, self._dep_slots = split_deps(self.deps, self._loc)
        self._check_arrays()
        self._deps = task_deps(self._tracer, deps, self._loc, self._tracer.next_task)
        if any(frame == "at" for frame in self._tracer.frames):
            raise compile_error("pl.at regions cannot be nested (each region is one task)", self._loc)
        self._task = TaskId(self._tracer, self._tracer.next_task, self.name_hint)
        self._tracer.next_task += 1
        self._tracer.open_block("at")
        self._tracer.region_extra = []  # hints the body adds (a pl.split_aiv region's mode)
        self._tracer.region_hints_now = self._hints
        region_opened(self._tracer, self._task.id)
        return self._task

    def _check_arrays(self) -> None:
        from .array import TaskIdArray, TaskSlot

        for d in self.deps if isinstance(self.deps, (list, tuple)) else ():
            if isinstance(d, TaskSlot):
                d = d.array
            if isinstance(d, TaskIdArray) and d._tracer is not self._tracer:
                raise compile_error(f"deps= takes task-id arrays created in this kernel, got {d!r}", self._loc)

    def __exit__(self, exc_type, *_):
        if exc_type is None:
            from ._ops_crosscore import function_closed

            function_closed(self._tracer, self._loc)  # every cross-core push popped, every pop released
        body = self._tracer.close_block()
        extra = tuple(getattr(self._tracer, "region_extra", None) or ())
        self._tracer.region_extra = self._tracer.region_hints_now = None
        from ._submit import task_dumps

        extra += task_dumps(self._tracer, _touched(body), self._dumps)
        if exc_type is None:
            self._tracer.append(Scope(self.level.value, body, self._loc, name=self.name_hint, deps=self._deps,
                                      manual=self._tracer.manual > 0, task=self._task.id, no_dep=self._no_dep,
                                      hints=self._hints + extra + scope_hints(self._tracer),
                                      dep_arrays=self._dep_arrays, dep_slots=self._dep_slots))
            region_closed(self._tracer, self._task.id)
        return False


def _touched(body) -> set[str]:
    """The tensors a region's statements load or store, at any depth."""
    out: set[str] = set()
    for s in body:
        name = getattr(s, "param", None)
        if isinstance(name, str):
            out.add(name)
        expr = getattr(s, "expr", None)
        if isinstance(getattr(expr, "param", None), str):
            out.add(expr.param)
        inner = getattr(s, "body", None)
        if isinstance(inner, tuple):
            out |= _touched(inner)
    return out


def incore(*, name_hint: str | None = None, deps=None) -> at:
    """The short form of ``pl.at(level=pl.Level.CORE_GROUP, ...)``."""
    return at(Level.CORE_GROUP, name_hint=name_hint, deps=deps)


def auto_incore(*, name_hint: str | None = None, deps=None) -> at:
    """PyPTO's compiler-outlined core scope: here the same as :func:`incore`, one region (a task)."""
    return at(Level.CORE_GROUP, name_hint=name_hint, deps=deps)


class manual_scope:
    """``with pl.manual_scope():`` no edge is inferred into the tasks inside; only ``deps=`` order them."""

    def __enter__(self):
        self._tracer = current("pl.manual_scope")
        self._tracer.manual += 1
        return self

    def __exit__(self, *_):
        self._tracer.manual -= 1
        return False


def _int(x, what: str) -> int:
    if not is_int(x):
        raise compile_error(f"{what} must be a Python int, got {x!r}", user_loc())
    return x


def _has_region(s) -> bool:
    """Whether statement `s` is, or holds, a region (a ``pl.at`` / task scope)."""
    if isinstance(s, Scope):
        return True
    return any(_has_region(x) for x in getattr(s, "body", ()) or ())


def _names_tensor(x, name: str, depth: int = 0) -> bool:
    """Whether an IR statement or expression `x` refers to tensor `name` (any string field but a location)."""
    import dataclasses

    if isinstance(x, str):
        return x == name
    if isinstance(x, (tuple, list)):
        return any(_names_tensor(v, name, depth + 1) for v in x)
    if dataclasses.is_dataclass(x) and not isinstance(x, type) and depth < 64:
        return any(_names_tensor(getattr(x, f.name), name, depth + 1) for f in dataclasses.fields(x)
                   if f.name != "loc")
    return False


def _whole_tensors(frame) -> dict:
    return {n: v for n, v in frame.f_locals.items() if isinstance(v, TensorArg) and not hasattr(v, "origin")}


def _contains(e, part) -> bool:
    """Whether index expression `part` occurs in `e` (a value computed from it)."""
    if e == part:
        return True
    return any(_contains(getattr(e, f), part) for f in ("a", "b") if hasattr(e, f))


class range:  # noqa: A001
    """Loop over ``range(start, stop, step)`` in the generated code, not at trace time.

    ``for i in pl.range(0, n, 64):`` traces its body once; ``i`` is an
    :class:`Index` you can use (with ``+ - * // %`` and ints) in load and
    store offsets.  Bounds are Python ints, or runtime scalars (``pl.read``
    values, scalar parameters, expressions of them and loop indices): in a
    region the kernel loops over them, in an orchestration the device's
    orchestration does (its tasks' edges are then resolved as they are
    submitted).  The step is a nonzero int (a negative one over int bounds).

    A tile name rebound in the body is carried from one iteration to the
    next, as in Python (``acc = pl.add(acc, t)`` accumulates).  With
    ``init_values=(t0, ...)`` the carried tiles are explicit:
    ``for i, (acc,) in pl.range(n, init_values=(t0,)):`` ... ``out = pl.yield_(new)``.
    """

    _kind = "pl.range"
    _form = "range"  # the For node's kind (see _loops)
    _stage = 1

    def __init__(self, start, stop=None, step=1, *, init_values=None):
        if stop is None:
            start, stop = 0, start
        from ._placement import resolve_dim

        start, stop = resolve_dim(start), resolve_dim(stop)  # a pl.dynamic dim the trace binds: its extent
        # A bound that is a runtime scalar (pl.read) or an index makes a loop with runtime bounds.
        self._dynamic = any(isinstance(b, (Index, ScalarArg)) for b in (start, stop))
        self._raw = (start, stop)
        if self._dynamic:
            self.start = to_index(start, f"{self._kind} start")
            self.stop = to_index(stop, f"{self._kind} stop")
        else:
            self.start = _int(start, f"{self._kind} start")
            self.stop = _int(stop, f"{self._kind} stop")
        self.step = _int(step, f"{self._kind} step")
        self._loc = user_loc()
        #: A negative step over int bounds (``pl.range(7, -1, -1)``): the loop counts k = 0, 1, ... up, and its
        #: index is ``start + k * step`` (``_descending``).
        self._descending = None
        if self.step < 0 and not self._dynamic:
            n = len(builtins.range(self.start, self.stop, self.step))
            self._descending = (self.start, self.step)
            self.start, self.stop, self.step = 0, n, 1
        if self.step == 0:
            raise compile_error(f"{self._kind} step must be positive (or a negative int over int bounds), got 0",
                                self._loc)
        if self.step < 0:
            raise compile_error(f"{self._kind} step {self.step} is negative, which takes int bounds here (the loop's "
                                f"bounds are read at run time); count up and compute the index", self._loc)
        if init_values is not None and not isinstance(init_values, (list, tuple)):
            raise compile_error(f"{self._kind} init_values must be a tuple of tiles, got {init_values!r}", self._loc)
        self._init = None if init_values is None else tuple(init_values)
        self._state = 0

    def __iter__(self):
        from .distributed_trace import unrolls_ranges

        if not self._dynamic and self._init is None and unrolls_ranges():  # a host or per-rank trace
            if self._descending is not None:
                first, step = self._descending
                return iter(builtins.range(first, first + self.stop * step, step))
            return iter(builtins.range(self.start, self.stop, self.step))
        return self

    def __next__(self):
        t = current(self._kind)
        if self._state == 0:
            self._state = 1
            return self._begin(t, sys._getframe(1))
        if self._state == 1:
            self._state = 2
            self._end(t, sys._getframe(1))
        raise StopIteration

    def _begin(self, t, frame):
        self._tracer = t
        carries = None
        if self._init is not None:
            inits, carries = open_carries(t, self._init, self._loc)
            for s in inits:
                t.append(s)
        self._var = t.new_index("i")
        if self._dynamic:
            t.ranges[self._var.name] = RUNTIME
        else:
            n = len(builtins.range(self.start, self.stop, self.step))
            last = self.start + (n - 1) * self.step if n else self.start
            t.ranges[self._var.name] = (self.start, last)
        t.open_block("range")
        self._fresh: list[tuple[str, int]] = []  # task-id arrays the body makes (pl.array.create): empty at each iteration
        if not hasattr(t, "task_fresh"):
            t.task_fresh = []
        t.task_fresh.append(self._fresh)
        self.task_yields: dict[str, str] = {}  # carried task-id array -> the array pl.yield_ gave it
        self._before = tile_locals(frame)
        self._task_names = {} if "at" in t.frames else {
            n: v for n, v in frame.f_locals.items() if v is None or isinstance(v, TaskId) and v._tracer is t}
        # The orchestration's scalars (ints, indices) by name: one the body rebinds would be carried (see _end).
        self._scalars = {} if "at" in t.frames else {
            n: v for n, v in frame.f_locals.items() if isinstance(v, Index) or is_int(v) and not isinstance(v, bool)}
        # A kernel's intermediate tensor rebound to a tile in the loop is carried as a tile: in a region, and in
        # a @pl.jit body outside regions (the kernel itself, e.g. in a ``for b in pl.spmd(n)`` loop; see _end).
        kernel = "at" in t.frames or not getattr(t, "is_program", False)
        self._scratch = scratch_locals(t, frame) if kernel else {}
        self._tensors = {} if "at" in t.frames else _whole_tensors(frame)
        index = Index(self._var)
        if self._descending is not None:
            first, step = self._descending
            index = first + index * step
        if carries is None:
            return index
        self.carries, self.depth, self.yielded = carries, len(t.blocks), None
        t.carry_loops.append(self)
        from .array import TaskIdArray

        return index, tuple(c if isinstance(c, (TensorArg, TaskIdArray)) else Tile(c) for c in carries)

    def _end(self, t, frame) -> None:
        if t.task_fresh and t.task_fresh[-1] is self._fresh:
            t.task_fresh.pop()
        if self._init is not None:
            t.carry_loops.pop()
            if self.yielded is None:
                raise compile_error(f"a {self._kind}(..., init_values=...) body must end with pl.yield_", self._loc)
            if self.yielded != len(t.blocks[-1]):
                raise compile_error("pl.yield_ must be the last statement of the loop body", self._loc)
        self._carry_tensors(t, frame)
        body = t.close_block()
        del t.ranges[self._var.name]
        for name, old in self._scalars.items():
            new = frame.f_locals.get(name)
            if isinstance(new, Index) and new is not old and _contains(new.expr, to_index(old, name)):
                raise compile_error(f"{name!r} is rebound in a {self._kind} loop of the orchestration (to {new!r}): "
                                    f"a scalar carried from one iteration to the next is not supported in an "
                                    f"orchestration here (compute it in a task, or pass it in a tensor and "
                                    f"pl.read it)", self._loc)
        before = self._before
        if self._init is not None:  # a name bound to what pl.yield_ returned holds an explicit carry already
            explicit = {getattr(c, "id", None) for c in self.carries}
            now = tile_locals(frame)
            before = {n: v for n, v in before.items() if not (n in now and now[n].var.id in explicit)}
        body, id_carries = carry_task_ids(t, self._task_names, frame, body)
        scratch = self._scratch
        if scratch and "at" not in t.frames and any(_has_region(s) for s in body):
            scratch = {}  # an orchestration loop (its body opens regions): the tensor passes between tasks
        inits, body = carry_rebound(t, before, frame, body, self._loc, scratch)
        for s in inits:
            t.append(s)
        from .array import TaskIdArray

        task_carries = tuple((c.name, c.carried_from, self.task_yields[c.name])
                             for c in (self.carries if self._init is not None else ()) if isinstance(c, TaskIdArray))
        task_carries += id_carries
        if self._dynamic:
            if task_carries or self._fresh:
                raise compile_error(f"a {self._kind} over a value read at run time cannot carry or make a task-id "
                                    f"array here", self._loc)
            t.append(DynFor(self._var, self.start, self.stop, self.step, body, self._loc))
        else:
            t.append(For(self._var, self.start, self.stop, self.step, body, self._loc, kind=self._form,
                         stage=self._stage, task_fresh=tuple(self._fresh), task_carries=task_carries))


    def _carry_tensors(self, t, frame) -> None:
        """Orchestration names rebound to another tensor that the next iteration reads: carried by a copy.

        ``cur = nxt`` at the end of a body that reads ``cur`` (PyPTO's carry-rebind): the body, traced once,
        reads the tensor ``cur`` held before the loop, so each iteration ends by copying ``nxt`` into it
        (a task of its own, ``<name>_carry``); after the loop the name holds ``nxt``, which the last
        iteration wrote.  The tensor from before the loop must be an intermediate or an output (an input
        is not written), of ``nxt``'s shape and dtype, and the loop must run (a static trip count >= 1).
        """
        if not self._tensors or self._init is not None:
            return
        block = t.blocks[-1]
        scratch = {p.name for p in t.scratch}
        for name, old in self._tensors.items():
            new = frame.f_locals.get(name)
            if (not isinstance(new, TensorArg) or hasattr(new, "origin") or new.name == old.name
                    or not any(_names_tensor(st, old.name) for st in block)):
                continue
            why = None
            if self._dynamic or not len(builtins.range(self.start, self.stop, self.step)):
                why = "the loop's trip count is not a static count of at least one"
            elif old.name not in scratch and old.param.direction == "in":
                why = f"{old.name!r} is an input, which the program does not write"
            elif tuple(old.shape) != tuple(new.shape) or old.dtype != new.dtype:
                why = f"{old.name!r} and {new.name!r} differ in shape or dtype"
            if why is not None:
                raise compile_error(
                    f"tensor {name!r} is rebound in a {self._kind} loop of the orchestration (from {old.name!r} to "
                    f"{new.name!r}) and the body reads it, so each iteration must end by copying {new.name!r} into "
                    f"{old.name!r}, but {why}. Write each iteration's result into one tensor (a kernel taking it "
                    f"as an InOut)", self._loc)
            from ._memory import load, store  # the copy task's ops, needed only when a tensor is carried

            zeros = [0] * len(old.shape)
            with at(level=Level.CORE_GROUP, name_hint=f"{name}_carry"):
                store(load(new, zeros, list(new.shape)), zeros, old)


class parallel(range):
    """``pl.range`` whose iterations you declare independent (PyPTO's ``pl.parallel``).

    The sim runs them in order, so a loop that is not in fact independent
    computes what ``pl.range`` would.
    """

    _kind = "pl.parallel"
    _form = "parallel"


class spmd:
    """Run a body as ``n`` blocks spread over the device's cores (PyPTO's three forms).

    * ``for b in pl.spmd(4):`` traces the body once; ``b`` is the block index
      (an :class:`Index`, ``0 <= b < n``, also ``pl.tile.get_block_idx()``) to
      use in offsets, and the launch has ``n`` blocks (one block count per
      kernel; statements outside the spmd body run in every block).
    * ``with pl.spmd(4):`` / ``with pl.spmd(4, deps=[t0]) as tid:`` in a
      ``@pl.jit`` body is one task (a region, as ``pl.at``) that ``n`` blocks
      run, the body reading its block with ``pl.tile.get_block_idx()``; the
      ``as`` target is the task's id, for a later ``deps=`` or a
      ``pl.array.create(n, pl.TASK_ID)`` slot.  A body that never reads the
      block index is refused (every block would do the same work).  The sim
      runs the blocks one after another inside the task; ``sync_start=``,
      ``allow_early_resolve=`` and ``optimizations=`` are checked and
      recorded on the task (``Scope.hints``) and change no result.
    * In a ``@pl.program``'s orchestration, ``with pl.spmd(n) [as tid]:`` is
      the dispatch form: each kernel call inside is one task run by ``n``
      blocks (as ``pl.spmd_submit(..., core_num=n)``), the kernel reading its
      block with ``pl.tile.get_block_idx()``; ``tid`` is the first call's task.

    ``deps=`` is taken only by the ``with ... as tid`` form (PyPTO rejects it
    on the others); ``predicate=(gate[i, j] > v)`` is taken by the
    program's dispatch form (as ``pl.submit``'s); on the other forms it
    raises :class:`~pypto_async.errors.PtoNotSupported`, never ignored.
    """

    def __init__(self, n=None, *, core_num=None, sync_start: bool = False, name_hint: str | None = None,
                 optimizations=None, deps=None, allow_early_resolve: bool = False, predicate=None):

        self._loc = user_loc()
        if (n is None) == (core_num is None):  # PyPTO's parameter is core_num, positional or by keyword
            raise compile_error("pl.spmd takes one block count: pl.spmd(n) or pl.spmd(core_num=n)", self._loc)
        self.n = _int(n if core_num is None else core_num, "pl.spmd block count")
        if self.n <= 0:
            raise compile_error(f"pl.spmd needs a positive block count, got {self.n}", self._loc)
        from ._submit import check_predicate

        check_predicate("pl.spmd", predicate, self._loc)
        self.predicate = predicate
        if not isinstance(sync_start, bool):
            raise compile_error(f"pl.spmd(sync_start=...) takes a bool, got {sync_start!r}", self._loc)
        if name_hint is not None and not isinstance(name_hint, str):
            raise compile_error(f"pl.spmd(name_hint=...) takes a str, got {name_hint!r}", self._loc)
        self.name_hint = name_hint or None
        self.deps = deps
        self._hints = (("core_num", self.n),) + ((("sync_start", True),) if sync_start else ()) \
            + region_hints(optimizations, allow_early_resolve, self._loc)
        self._state = 0

    # ---- for i in pl.spmd(n): the launch's blocks -----------------------------------------------------

    def _begin(self) -> Index:
        t = current("pl.spmd")
        if self.deps is not None:
            raise compile_error("pl.spmd() does not accept 'deps=' here: bind the region with "
                                "'with pl.spmd(n, deps=[...]) as tid:' (only that form takes deps=)", self._loc)
        if getattr(t, "is_program", False) and "at" not in t.frames:
            # A program's loop form: the body is outlined into one InCore task of n blocks, the loop
            # variable its block index (PyPTO's form 2; the with-form's inline body, index bound).
            self._dispatch = False
            self._loop_region = True
            return self._begin_region(t)
        self._dispatch = False
        self._loop_region = False
        self._refuse_predicate()
        if t.in_spmd:
            raise compile_error("pl.spmd cannot be nested", self._loc)
        if t.block_num is not None and t.block_num != self.n and "at" in t.frames:
            raise compile_error(
                f"pl.spmd({self.n}) disagrees with an earlier pl.spmd({t.block_num}) (one block count per kernel)",
                self._loc,
            )
        if t.block_num is not None and t.block_num != self.n:  # each a task, or refused at the end (_jit)
            t.spmd_counts_differ = (self._loc, self.n, t.block_num)
        t.block_num = self.n
        t.in_spmd = True
        t.spmd_index = None
        self._tracer = t
        self._var = t.new_index("b")
        if "at" not in t.frames:  # a task of its own if the kernel has others (see spmd_as_tasks)
            meta = getattr(t, "spmd_meta", None)
            if meta is None:
                meta = t.spmd_meta = {}
            meta[self._var.name] = (t.next_task, t.manual > 0, self._hints + scope_hints(t), self.name_hint)
            t.next_task += 1
        t.ranges[self._var.name] = (0, self.n - 1)
        t.open_block("spmd")
        t.spmd_index = Index(self._var)  # pl.tile.get_block_idx()
        return t.spmd_index

    def _refuse_predicate(self) -> None:
        from ..errors import PtoNotSupported

        if self.predicate is not None:
            raise PtoNotSupported(f"{self._loc}: pl.spmd(predicate=...) is taken by the 'with pl.spmd(n, "
                                  f"predicate=...):' forms (a region, or a program's dispatch around a kernel "
                                  f"call); in a 'for ... in pl.spmd(n)' launch branch on the value in the body "
                                  f"(pl.read and if)")

    def _end(self, ok: bool) -> None:
        t = self._tracer
        if self._loop_region:
            self._end_region(None if ok else RuntimeError)
            return
        body = t.close_block()
        del t.ranges[self._var.name]
        t.in_spmd = False
        if ok:
            t.append(Spmd(self._var, self.n, body, self._loc))

    def __iter__(self):
        return self

    def __next__(self) -> Index:
        if self._state == 0:
            self._state = 1
            return self._begin()
        if self._state == 1:
            self._state = 2
            self._end(True)
        raise StopIteration

    # ---- with pl.spmd(n) [as tid]: one task of n blocks --------------------------------------------

    def _begin_dispatch(self, t) -> TaskId:
        """A program's dispatch form: each kernel call inside is a task of n blocks."""
        if getattr(t, "spmd_dispatch", None) is not None:
            raise compile_error("pl.spmd cannot be nested", self._loc)
        if getattr(t, "cluster", None) is not None:  # PyPTO unwraps it into the Group: it is no Submit of its own
            if ("allow_early_resolve", True) in self._hints:
                raise compile_error("`pl.spmd(..., allow_early_resolve=True)` cannot be nested inside "
                                    "`pl.cluster()`: a cluster-nested pl.spmd never produces a Submit, so the "
                                    "early-dispatch hint would be lost", self._loc)
            if getattr(self, "_with", False) and _binds_target(self._loc):
                raise compile_error("`with pl.spmd(...) as tid:` cannot capture a TaskId when nested inside "
                                    "`pl.cluster()`: a cluster-nested pl.spmd never produces a Submit", self._loc)
        t.spmd_dispatch = self.n
        t.spmd_call = {"deps": self.deps, "hints": self._hints, "name_hint": self.name_hint,
                       "predicate": self.predicate}
        self._tracer = t
        self._first = t.next_task
        return TaskId(t, self._first, self.name_hint)

    def __enter__(self) -> TaskId:
        t = current("pl.spmd")
        self._with = True
        self._dispatch = getattr(t, "is_program", False) and "at" not in t.frames
        if self.deps is not None and not _binds_target(self._loc):
            raise compile_error("pl.spmd() does not accept 'deps=' here: bind the region with "
                                "'with pl.spmd(n, deps=[...]) as tid:' (only that form takes deps=)", self._loc)
        if self._dispatch:
            return self._begin_dispatch(t)
        return self._begin_region(t)

    def _begin_region(self, t):
        """The inline body: one CORE_GROUP region whose body runs once per block; the region's TaskId.

        With ``predicate=`` the region's blocks run only where it holds, read as the task starts
        (its deps met), as a program's predicated dispatch (:class:`._submit.DispatchPredicate`).
        """
        if t.in_spmd or getattr(t, "block_index", None) is not None:
            raise compile_error("pl.spmd cannot be nested", self._loc)
        self._region = at(Level.CORE_GROUP, name_hint=self.name_hint, deps=self.deps)
        self._region._hints = self._hints
        tid = self._region.__enter__()
        self._tracer = t
        self._var = t.new_index("b")
        t.ranges[self._var.name] = (0, self.n - 1)
        t.open_block("range")
        t.block_index = Index(self._var)
        t.block_index_read = False
        if getattr(self, "_loop_region", False):
            t.block_index_read = True  # the loop variable is the index
            return t.block_index
        return tid

    def __exit__(self, exc_type, *exc):
        t = self._tracer
        if self._dispatch:
            t.spmd_dispatch = None
            t.spmd_call = None
            if exc_type is None and t.next_task == self._first:
                raise compile_error(f"the body of 'with pl.spmd({self.n})' in the orchestration dispatches no "
                                    f"kernel (call self.<kernel>(...) inside it)", self._loc)
            return False
        return self._end_region(exc_type, *exc)

    def _end_region(self, exc_type, *exc):
        t = self._tracer
        inner = t.close_block()
        del t.ranges[self._var.name]
        t.block_index = None
        read = t.block_index_read
        if exc_type is None:
            if not read:
                self._region.__exit__(None, None, None)
                raise compile_error(f"the body of 'with pl.spmd({self.n})' neither reads the block index "
                                    f"(pl.tile.get_block_idx()) nor dispatches a kernel: every block would do "
                                    f"the same work", self._loc)
            t.append(For(self._var, 0, self.n, 1, inner, self._loc))  # the blocks, in order (hint core_num)
            if self.predicate is not None:  # the region's whole body only where the predicate holds
                wrapped, _ = self.predicate.wrap(t, tuple(t.blocks[-1]), self._loc)
                t.blocks[-1][:] = wrapped
        return self._region.__exit__(exc_type, *exc)


def carry_task_ids(t, before: dict, frame, body: tuple) -> tuple[tuple, tuple]:
    """Task ids a loop body rebinds a name to (``prev = None`` then ``out, prev = pl.submit(..., deps=[prev])``).

    The body, traced once, saw the name's value from before the loop: ``None`` (PyPTO's empty slot) or a
    task id.  Each iteration after the first should see the task the previous one bound.  From ``None``:
    the name is carried as a one-slot task-id array (empty before the loop, the task the body binds
    stored in it each iteration) that the body's tasks with a ``None`` in ``deps=`` wait on.  From a task
    id: the body's tasks waiting on it also wait for the rebound task's latest instance (the previous
    iteration's; none in the first).  Returns the body and the loop's extra ``For.task_carries``.
    """
    from dataclasses import replace

    from ..ir._nodes import IConst
    from .array import TASK_ID, create

    pending = getattr(t, "none_dep_tasks", set())
    latest: dict[int, set[int]] = {}  # the seed's task id -> the tasks the body rebinds it to
    slots: dict[int, str] = {}  # a task the body rebinds a None-seeded name to -> its one-slot array
    carries, waits = [], []
    for name, old in before.items():
        new = frame.f_locals.get(name, old)
        if not isinstance(new, TaskId) or new is old or new._tracer is not t:
            continue
        if old is not None:
            latest.setdefault(old.id, set()).update(getattr(new, "ids", (new.id,)))
        elif not hasattr(new, "ids") and pending:
            init, carry = create(1, TASK_ID), create(1, TASK_ID)
            slot = slots.setdefault(new.id, create(1, TASK_ID).name)
            carries.append((carry.name, init.name, slot))
            waits.append((carry.name, 1))
    if not latest and not carries:
        return body, ()

    def fix(stmts):
        out = []
        for s in stmts:
            if isinstance(s, Scope) and s.task is not None:
                add = set()
                for d in s.deps:
                    add |= latest.get(d, set())
                if add - set(s.deps):
                    s = replace(s, deps=tuple(sorted(set(s.deps) | add)))
                if s.task in pending and waits:
                    s = replace(s, dep_arrays=(*s.dep_arrays, *waits))
                if s.task in slots:
                    s = replace(s, assigns=(*s.assigns, (slots[s.task], 1, IConst(0))))
            elif isinstance(s, (For, DynFor)):
                s = replace(s, body=tuple(fix(s.body)))
            out.append(s)
        return out

    return tuple(fix(body)), tuple(carries)


def spmd_as_tasks(t, body: tuple) -> tuple[tuple, bool]:
    """A ``@pl.jit`` body whose ``for i in pl.spmd(n)`` loops sit beside other tasks: each loop made a task.

    PyPTO outlines the loop's body into one InCore task of ``n`` blocks; a
    kernel that is that loop alone runs here as one launch of ``n`` blocks
    (the same), but beside regions the launch's blocks would run those
    regions too.  So there each loop becomes a region of its own (the task id
    reserved where it was traced) whose body runs once per block, and the
    launch has one block.  Returns the body and whether it changed.
    """
    meta = getattr(t, "spmd_meta", None)
    if not meta or not _has_task(body):
        return body, False

    def convert(stmts):
        out = []
        for s in stmts:
            if isinstance(s, Spmd) and s.var.name in meta:
                task, manual, hints, name = meta[s.var.name]
                out.append(Scope(Level.CORE_GROUP.value, (For(s.var, 0, s.count, 1, s.body, s.loc),), s.loc,
                                 name=name, manual=manual, task=task, hints=hints))
            elif isinstance(s, For):
                out.append(For(s.var, s.start, s.stop, s.step, tuple(convert(s.body)), s.loc, kind=s.kind,
                               stage=s.stage))
            else:
                out.append(s)
        return out

    return tuple(convert(body)), True


def _has_task(body) -> bool:
    for s in body:
        if isinstance(s, Scope) or isinstance(s, For) and _has_task(s.body):
            return True
    return False


def _binds_target(loc) -> bool:
    """Whether the ``with`` statement at `loc` binds an ``as`` target (True when the source is not readable)."""
    import ast
    import linecache

    if loc is None:
        return True
    lines = linecache.getlines(loc.file)
    if not lines or loc.line > len(lines):
        return True
    first = loc.line - 1
    for end in builtins.range(first + 1, min(first + 40, len(lines)) + 1):
        text = "".join(lines[first:end]).strip()
        if not text.endswith(":"):
            continue
        try:
            tree = ast.parse(text + "\n    pass\n")
        except SyntaxError:
            continue
        stmt = tree.body[0] if tree.body else None
        if isinstance(stmt, (ast.With, ast.AsyncWith)):
            return any(item.optional_vars is not None for item in stmt.items)
        return True
    return True
