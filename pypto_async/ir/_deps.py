"""The task graph: which task of a program waits for which.

The edge rule itself is :func:`pypto_async._hazard_rule.hazard`, which the runtime's
streams share (:mod:`pypto_async.runtime._hazards`).  :func:`edges` is a pure
function over tasks in submission order, each with the accesses it makes
(a tensor, read and/or write, and the window touched):

* a task that reads a window waits for every earlier task that wrote an
  overlapping window (read-after-write);
* a task that writes a window waits for every earlier task that read or
  wrote an overlapping one (write-after-read, write-after-write);
* read-read never orders; disjoint windows of one tensor never order;
* declared dependencies (``deps=``) are added to the inferred ones, and a
  task marked ``manual`` (inside ``pl.manual_scope()``) gets declared edges
  only.

No edge is dropped: an earlier access leaves the bookkeeping only once a
later write that covers its window has been ordered after it, so any edge it
would still give is implied through that writer (a reader waits for the last
writer of its window, not for the ones before).  Where windows overlap only
partly, a task may wait on a redundant predecessor; never the reverse.
Every edge goes from an earlier task to a later one, so submission
order is always a valid schedule.

:func:`program_tasks` turns a Program into task instances: each region
(``Scope``) in the body is a task, and a ``pl.range`` loop around regions
submits one instance per iteration, its windows evaluated for that
iteration; a loop-carried write-after-read (iteration ``i + 1`` writing what
iteration ``i`` read) is an edge like any other.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from dataclasses import dataclass

from .._hazard_rule import covers, hazard, overlaps
from ..errors import PtoCompileError
from ._nodes import Assign, For, Fused, IBin, IConst, IScalar, IVar, Load, Scope, Spmd, Store
from ._program import Program

__all__ = ["Access", "Task", "Edge", "TaskGraph", "edges", "program_tasks", "task_graph", "MAX_TASKS"]

#: The most task instances a program's graph is expanded to at compile time.
MAX_TASKS = 4096


@dataclass(frozen=True)
class Access:
    """One access of a task: ``box`` is ``((lo, hi), ...)`` per dimension, or ``None`` for the whole tensor."""

    tensor: str
    read: bool
    write: bool
    box: tuple[tuple[int, int], ...] | None = None


@dataclass(frozen=True)
class Task:
    """A task instance: ``id`` is its position in submission order; ``deps`` are declared earlier ids."""

    id: int
    name: str
    accesses: tuple[Access, ...]
    deps: tuple[int, ...] = ()
    manual: bool = False


@dataclass(frozen=True)
class Edge:
    """``dst`` waits for ``src``: ``kind`` is ``"inferred"`` or ``"declared"``; ``hazard`` RAW, WAR, WAW or None."""

    src: int
    dst: int
    kind: str
    hazard: str | None = None
    tensor: str | None = None


@dataclass(frozen=True)
class TaskGraph:
    tasks: tuple[Task, ...]
    edges: tuple[Edge, ...]

    def preds(self, task: int) -> list[int]:
        """The ids ``task`` waits for, ascending."""
        return sorted({e.src for e in self.edges if e.dst == task})


def _hazard(later: Access, earlier: Access) -> str | None:
    return hazard(later.read, later.write, earlier.read, earlier.write)


def edges(tasks: Sequence[Task]) -> list[Edge]:
    """The edges among ``tasks`` (in submission order), sorted by (dst, src)."""
    found: dict[tuple[int, int], Edge] = {}
    history: dict[str, list[tuple[int, Access]]] = {}
    for pos, t in enumerate(tasks):
        if t.id != pos:
            raise ValueError(f"task ids must be their positions: task {t.name!r} at {pos} has id {t.id}")
        for d in t.deps:
            if not 0 <= d < t.id:
                raise ValueError(f"task {t.name!r} ({t.id}) declares a dependency on {d}, not an earlier task")
            found.setdefault((d, t.id), Edge(d, t.id, "declared"))
        if not t.manual:
            for a in t.accesses:
                for u, b in history.get(a.tensor, ()):
                    hazard = _hazard(a, b)
                    if hazard is not None and u != t.id and overlaps(a.box, b.box):
                        found.setdefault((u, t.id), Edge(u, t.id, "inferred", hazard, a.tensor))
        for a in t.accesses:
            past = history.setdefault(a.tensor, [])
            if a.write and not t.manual:
                # t now waits for every earlier access its write covers; a later task that conflicts
                # with one of those conflicts with t's write too, so waiting for t implies it.
                past[:] = [(u, b) for u, b in past if u == t.id or not covers(a.box, b.box)]
            past.append((t.id, a))
    return sorted(found.values(), key=lambda e: (e.dst, e.src))


# ---- from a Program -------------------------------------------------------------------


def _eval(e, env: dict) -> int | None:
    if isinstance(e, IConst):
        return e.value
    if isinstance(e, IVar):
        return env.get(e.name)
    if isinstance(e, IScalar):
        return None
    if isinstance(e, IBin):
        a, b = _eval(e.a, env), _eval(e.b, env)
        if a is None or b is None:
            return None
        ops = {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "min": lambda: builtins.min(a, b),
               "max": lambda: builtins.max(a, b), "//": lambda: a // b if b else None,
               "%": lambda: a % b if b else None}
        return ops[e.op]()
    return None


def _box(offsets, shape, env) -> tuple[tuple[int, int], ...] | None:
    los = [_eval(o, env) for o in offsets]
    if any(lo is None for lo in los):
        return None  # a window that moves inside the task: the whole tensor, conservatively
    return tuple((lo, lo + d) for lo, d in zip(los, shape))


def _region_accesses(body, env) -> list[Access]:
    """The loads and stores of a region's body (loops inside a task count as the whole tensor)."""
    out = []
    for s in body:
        if isinstance(s, Assign) and isinstance(s.expr, Load):
            out.append(Access(s.expr.param, True, False, _box(s.expr.offsets, s.expr.shape, env)))
        elif isinstance(s, Store):
            out.append(Access(s.param, False, True, _box(s.offsets, s.value.type.shape, env)))
        elif isinstance(s, Fused):
            out.extend(_region_accesses(s.members, env))
        elif isinstance(s, (For, Spmd, Scope)):
            out.extend(_region_accesses(s.body, env))  # the inner index is not in env: whole tensor
    return out


def program_tasks(program: Program, limit: int = MAX_TASKS) -> list[Task]:
    """The program's task instances in submission order.

    Raises
    ------
    PtoCompileError
        If the program submits more than ``limit`` task instances.
    """
    tasks: list[Task] = []
    latest: dict[int, int] = {}  # static task id -> its latest instance

    def walk(body, env) -> None:
        for s in body:
            if isinstance(s, Scope):
                add(s, env)
            elif isinstance(s, For):
                for i in builtins.range(s.start, s.stop, s.step):
                    walk(s.body, {**env, s.var.name: i})
            elif isinstance(s, Spmd):
                walk(s.body, env)

    def add(s: Scope, env) -> None:
        if len(tasks) >= limit:
            raise PtoCompileError(f"program {program.name} submits more than {limit} tasks")
        if s.accesses:
            acc = [Access(tensor, "r" in mode, "w" in mode, _box(offs, shape, env))
                   for tensor, mode, offs, shape in s.accesses]
        else:
            acc = _region_accesses(s.body, env)
        deps = tuple(latest[d] for d in s.deps if d in latest)
        name = s.name if s.name is not None else f"task{s.task if s.task is not None else len(tasks)}"
        t = Task(len(tasks), name, tuple(acc), deps, s.manual)
        if s.task is not None:
            latest[s.task] = t.id
        tasks.append(t)

    walk(program.body, {})
    return tasks


def task_graph(program: Program, limit: int = MAX_TASKS) -> TaskGraph:
    """The program's task instances and the edges among them."""
    tasks = program_tasks(program, limit)
    return TaskGraph(tuple(tasks), tuple(edges(tasks)))
