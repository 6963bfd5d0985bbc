"""The task graph: which task of a program waits for which.

The edge rule is the driver's (``native/src/taskdeps.c``, ``pto_task_deps_*``): the
same code resolves the edges of a program without a table as its tasks are submitted,
and the runtime's streams are ordered by pairs that agree
(:mod:`pypto_async.runtime._hazards`).  :func:`edges` is a pure
function over tasks in submission order, each with the accesses it makes
(a tensor, read and/or write, and the window touched):

* a task that reads a window waits for every earlier task that wrote an
  overlapping window (read-after-write);
* a task that writes a window waits for every earlier task that read or
  wrote an overlapping one (write-after-read, write-after-write);
* read-read never orders; disjoint windows of one tensor never order;
* declared dependencies (``deps=``) are added to the inferred ones, and a
  task marked ``manual`` (inside ``pl.manual_scope()``) gets declared edges
  only;
* an access that is not ``tracked`` (its tensor is in the region's
  ``no_dep_args=``, or was created ``manual_dep=True``) gives no edge either
  way: it is neither looked up nor recorded.

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
from array import array as _array
from collections.abc import Sequence
from dataclasses import dataclass, replace

from .._driver import check, ffi, last_error, lib
from ..errors import PtoCompileError
from ._nodes import Assign, DynFor, For, Fused, IBin, IConst, IScalar, IVar, Load, Scope, SetIndex, Spmd, Store
from ._program import Program

__all__ = ["Access", "Task", "Edge", "TaskGraph", "edges", "program_tasks", "task_graph", "instances",
           "RuntimeGraph", "MAX_TASKS"]

#: The most task instances a program's graph is expanded to at compile time.  Computing the
#: edges is linear in the tasks (:func:`edges`), so the bound is the size of the tables the
#: generated C carries (and its compile time), not the edge computation.
MAX_TASKS = 1 << 20


@dataclass(frozen=True)
class Access:
    """One access of a task: ``box`` is ``((lo, hi), ...)`` per dimension, or ``None`` for the whole tensor."""

    tensor: str
    read: bool
    write: bool
    box: tuple[tuple[int, int], ...] | None = None
    #: ``False`` for an access the program opted out of tracking (``no_dep_args=``, ``manual_dep=True``):
    #: it neither waits for earlier accesses nor is waited for by later ones.
    tracked: bool = True


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


_HAZARDS = (None, "RAW", "WAW", "WAR")  # pto_task_edge.hazard: PTO_TASK_DECLARED, _RAW, _WAW, _WAR
#: Task instances packed into one call of the driver's rule.
_BATCH = 8192


def _add(d, task_words, dep_words, acc_words, bounds) -> int:
    """Hand the driver one batch of packed tasks; returns the edges it found and holds."""
    try:
        words = _array("q", bounds or (0,))
    except OverflowError:
        raise ValueError("a task's window has a bound that does not fit in 64 bits") from None
    n = lib.pto_task_deps_add(d, len(task_words) // 3, ffi.from_buffer("uint32_t[]", _array("I", task_words)),
                              ffi.from_buffer("uint32_t[]", _array("I", dep_words or (0,))),
                              ffi.from_buffer("uint32_t[]", _array("I", acc_words or (0,))),
                              ffi.from_buffer("int64_t[]", words))
    if n < 0:
        raise ValueError(f"the task-edge rule refused the tasks: {last_error()}")
    return n


def _take(d, n: int, names: list[str], out: list[Edge]) -> None:
    """Move the ``n`` edges the driver holds into ``out`` as :class:`Edge`."""
    if n <= 0:
        return
    buf = ffi.new("pto_task_edge[]", n)
    got = lib.pto_task_deps_take(d, buf, n)
    words = memoryview(ffi.buffer(buf, got * ffi.sizeof("pto_task_edge"))).cast("I").tolist()
    for i in builtins.range(0, 4 * got, 4):
        src, dst, hz = words[i], words[i + 1], words[i + 2]
        if hz:
            out.append(Edge(src, dst, "inferred", _HAZARDS[hz], names[words[i + 3]]))
        else:
            out.append(Edge(src, dst, "declared"))


def edges(tasks: Sequence[Task]) -> list[Edge]:
    """The edges among ``tasks`` (in submission order), sorted by (dst, src).

    The rule is the driver's (``pto_task_deps_*``, ``native/src/taskdeps.c``):
    this packs the tasks' tracked accesses for it in batches and unpacks the
    edges it finds.  Each tensor's live accesses are indexed by region there,
    so the cost is linear in the tasks and the edges found, not quadratic in
    the accesses of a tensor.  A pair's hazard and tensor are those of the
    first conflict found: the task's accesses in order, each against the
    earlier live accesses in history order; a declared pair stays declared.
    """
    return _edges_counted(tasks)[0]


def _edges_counted(tasks: Sequence[Task]) -> tuple[list[Edge], tuple[int, int, int]]:
    """:func:`edges`, and the rule's counts: tasks added, earlier accesses looked at, the most by one lookup."""
    ids: dict[str, int] = {}
    names: list[str] = []
    out: list[Edge] = []
    pd = ffi.new("pto_task_deps **")
    check(lib.pto_task_deps_create(pd))
    d = ffi.gc(pd[0], lib.pto_task_deps_destroy)
    task_words: list[int] = []
    dep_words: list[int] = []
    acc_words: list[int] = []
    bounds: list[int] = []
    for pos, t in enumerate(tasks):
        if t.id != pos:
            raise ValueError(f"task ids must be their positions: task {t.name!r} at {pos} has id {t.id}")
        for dep in t.deps:
            if not 0 <= dep < t.id:
                raise ValueError(f"task {t.name!r} ({t.id}) declares a dependency on {dep}, not an earlier task")
        nacc = 0
        for a in t.accesses:
            if not a.tracked or not (a.read or a.write):
                continue  # neither waits nor is waited for
            tid = ids.get(a.tensor)
            if tid is None:
                tid = ids[a.tensor] = len(names)
                names.append(a.tensor)
            box = a.box
            if box is None:
                acc_words += (tid, a.read | a.write << 1 | 4, 0)  # PTO_TASK_READ | _WRITE | _WHOLE
            else:
                acc_words += (tid, a.read | a.write << 1, len(box))
                bounds += [lo for lo, _ in box]
                bounds += [hi for _, hi in box]
            nacc += 1
        task_words += (nacc, len(t.deps), 1 if t.manual else 0)  # PTO_TASK_MANUAL
        dep_words += t.deps
        if len(task_words) >= 3 * _BATCH:
            _take(d, _add(d, task_words, dep_words, acc_words, bounds), names, out)
            task_words, dep_words, acc_words, bounds = [], [], [], []
    if task_words:
        _take(d, _add(d, task_words, dep_words, acc_words, bounds), names, out)
    counts = ffi.new("uint64_t[3]")
    lib.pto_task_deps_counts(d, counts)
    return out, (counts[0], counts[1], counts[2])


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
               "%": lambda: a % b if b else None, "==": lambda: int(a == b), "!=": lambda: int(a != b),
               "<": lambda: int(a < b), "<=": lambda: int(a <= b), ">": lambda: int(a > b),
               ">=": lambda: int(a >= b)}
        op = ops.get(e.op)
        return None if op is None else op()
    return None


def _span(e, env: dict, spans: dict) -> tuple[int, int] | None:
    """The least and greatest value of index expression `e` while the loops of `spans` run (None: unknown)."""
    if isinstance(e, IVar) and e.name in spans:
        return spans[e.name]
    if not isinstance(e, IBin):
        v = _eval(e, env)
        return None if v is None else (v, v)
    a, b = _span(e.a, env, spans), _span(e.b, env, spans)
    if a is None or b is None:
        return None
    if e.op == "+":
        return a[0] + b[0], a[1] + b[1]
    if e.op == "-":
        return a[0] - b[1], a[1] - b[0]
    if e.op == "*":
        c = [x * y for x in a for y in b]
        return builtins.min(c), builtins.max(c)
    if e.op in ("min", "max"):
        f = builtins.min if e.op == "min" else builtins.max
        return f(a[0], b[0]), f(a[1], b[1])
    if e.op in ("//", "%") and b[0] == b[1] and b[0] > 0:
        if e.op == "//":
            return a[0] // b[0], a[1] // b[0]
        return (a[0] % b[0], a[1] % b[0]) if a[0] // b[0] == a[1] // b[0] else (0, b[0] - 1)
    return None


def _box(offsets, shape, env, spans=None) -> tuple[tuple[int, int], ...] | None:
    """The window at `offsets`; under loops inside the task (`spans`), the hull of its windows."""
    if not all(isinstance(d, int) for d in shape):
        return None  # an extent read at run time (a pl.dynamic dimension): the whole tensor, conservatively
    if spans:
        los = [_span(o, env, spans) for o in offsets]
        if any(lo is None for lo in los):
            return None  # a window that moves in a way not bounded here: the whole tensor, conservatively
        return tuple((lo, hi + d) for (lo, hi), d in zip(los, shape))
    los = [_eval(o, env) for o in offsets]
    if any(lo is None for lo in los):
        return None  # a window known only at run time: the whole tensor, conservatively
    return tuple((lo, lo + d) for lo, d in zip(los, shape))


def _region_accesses(body, env, spans=None) -> list[Access]:
    """The loads and stores of a region's body.

    A window that moves with a loop inside the task (a ``pl.range`` or
    ``pl.spmd`` of known bounds) counts as the hull of its windows over the
    loop's range; under a loop of runtime bounds, as the whole tensor.
    """
    out = []
    for s in body:
        if isinstance(s, Assign) and isinstance(s.expr, Load):
            out.append(Access(s.expr.param, True, False, _box(s.expr.offsets, s.expr.shape, env, spans)))
        elif isinstance(s, Store) and s.index is not None:  # pl.mscatter: anywhere in the tensor
            out.append(Access(s.param, False, True, None))
        elif isinstance(s, Store):
            out.append(Access(s.param, False, True, _box(s.offsets, s.value.type.shape, env, spans)))
        elif isinstance(s, Fused):
            out.extend(_region_accesses(s.members, env, spans))
        elif isinstance(s, SetIndex):  # a pl.read in the region (of any tensor it is given): the whole tensor
            out.extend(Access(r.param, True, False, None) for r in _region_reads(s.value))
        elif isinstance(s, For) and s.trip_count:
            last = s.start + (s.trip_count - 1) * s.step
            inner = {**(spans or {}), s.var.name: (builtins.min(s.start, last), builtins.max(s.start, last))}
            out.extend(_region_accesses(s.body, env, inner))
        elif isinstance(s, Spmd) and s.count > 0:
            out.extend(_region_accesses(s.body, env, {**(spans or {}), s.var.name: (0, s.count - 1)}))
        elif isinstance(s, (For, Spmd, Scope, DynFor)):
            out.extend(_region_accesses(s.body, env, spans))  # a DynFor's index is in neither: whole tensor
    return out


def _region_reads(e) -> list:
    """The ``pl.read`` elements (``IRead``) an index expression reads."""
    from ._nodes import ICheck, IRead  # the index nodes this module's other walks do not need

    if isinstance(e, ICheck):
        return _region_reads(e.expr)
    if isinstance(e, IRead):
        return [e, *(r for o in e.offsets for r in _region_reads(o))]
    if isinstance(e, IBin):
        return _region_reads(e.a) + _region_reads(e.b)
    return []


class RuntimeGraph(PtoCompileError):
    """The program's task instances depend on values it reads when it runs (a ``pl.range`` or ``if``
    of its orchestration over a ``pl.read`` scalar): there is no graph to derive at compile time."""


def instances(program: Program, arrays: dict | None = None):
    """Yield ``(scope, env)`` for each task instance in submission order.

    ``arrays`` (task-id array -> slot -> instance, kept by the caller): where
    given, the walk empties the arrays a loop body makes at each iteration and
    copies the arrays loops carry (``For.task_fresh``, ``For.task_carries``).

    ``env`` maps each loop index and orchestration scalar (``SetIndex``) to
    its value in that instance (one dict, updated as the walk goes on: use it
    before the next instance is yielded), or None where it is known only at run time
    (a ``pl.read``); a loop or ``if`` of the orchestration whose bounds are
    known (over loop indices) is expanded like a ``pl.range``.

    Raises
    ------
    RuntimeGraph
        At a loop or ``if`` whose bounds are known only at run time.
    """

    def walk(body, env):
        # One env for the whole walk: a scalar assigned in one iteration is seen by the next (a carried one).
        for s in body:
            if isinstance(s, Scope):
                yield s, env
            elif isinstance(s, For):
                if arrays is not None:
                    for carry, init, _ in s.task_carries:
                        arrays[carry] = dict(arrays.get(init, {}))
                for i in builtins.range(s.start, s.stop, s.step):
                    env[s.var.name] = i
                    if arrays is not None:
                        for name, _ in s.task_fresh:
                            arrays[name] = {}
                    yield from walk(s.body, env)
                    if arrays is not None:
                        for carry, _, yielded in s.task_carries:
                            arrays[carry] = dict(arrays.get(yielded, {}))
            elif isinstance(s, Spmd):
                yield from walk(s.body, env)
            elif isinstance(s, SetIndex):
                env[s.var.name] = _eval(s.value, env)
            elif isinstance(s, DynFor):
                lo, hi = _eval(s.start, env), _eval(s.stop, env)
                if lo is None or hi is None or s.kind == "while":
                    raise RuntimeGraph(f"program {program.name}: a {'pl.range' if s.kind == 'range' else s.kind} "
                                       f"of its orchestration depends on a value read when it runs")
                for i in builtins.range(lo, hi, s.step):
                    env[s.var.name] = i
                    yield from walk(s.body, env)

    yield from walk(program.body, {})


def program_tasks(program: Program, limit: int = MAX_TASKS) -> list[Task]:
    """The program's task instances in submission order.

    Raises
    ------
    PtoCompileError
        If the program submits more than ``limit`` task instances
        (:class:`RuntimeGraph` if they are known only when it runs).
    """
    tasks: list[Task] = []
    latest: dict[int, int] = {}  # static task id -> its latest instance
    arrays: dict[str, dict] = {}  # task-id array -> slot -> the instance stored there

    def add(s: Scope, env) -> None:
        if len(tasks) >= limit:
            raise PtoCompileError(f"program {program.name} submits more than {limit} tasks")
        if s.accesses:
            acc = [Access(tensor, "r" in mode, "w" in mode, _box(offs, shape, env))
                   for tensor, mode, offs, shape in s.accesses]
        else:
            acc = _region_accesses(s.body, env)
        untracked = set(s.no_dep) | set(program.manual_dep)
        if untracked:
            acc = [replace(a, tracked=False) if a.tensor in untracked else a for a in acc]
        deps = [latest[d] for d in s.deps if d in latest]
        for array, _ in s.dep_arrays:
            deps.extend(arrays.get(array, {}).values())
        for array, _, index in s.dep_slots:
            held = arrays.get(array, {})
            slot = _eval(index, env)
            if slot is None:  # known only at run time: any slot it may be (more edges, never fewer)
                deps.extend(held.values())
            elif slot in held:
                deps.append(held[slot])
            deps.extend(v for k, v in held.items() if isinstance(k, tuple))  # stores at runtime slots
        deps = tuple(sorted(set(deps)))
        name = s.name if s.name is not None else f"task{s.task if s.task is not None else len(tasks)}"
        t = Task(len(tasks), name, tuple(acc), deps, s.manual)
        if s.task is not None:
            latest[s.task] = t.id
        for array, size, index in s.assigns:
            slot = _eval(index, env)
            if slot is None:  # an index known only at run time: keep every such store (more edges, never fewer)
                slot = ("runtime", t.id)
            elif not 0 <= slot < size:  # the tracer bounds the index; a hand-built program may not
                raise ValueError(f"program {program.name}: task {name!r} stores its id at {array}[{slot}], "
                                 f"outside the array's {size} slots")
            arrays.setdefault(array, {})[slot] = t.id
        tasks.append(t)

    for scope, env in instances(program, arrays):
        add(scope, env)
    return tasks


def task_graph(program: Program, limit: int = MAX_TASKS) -> TaskGraph:
    """The program's task instances and the edges among them."""
    tasks = program_tasks(program, limit)
    return TaskGraph(tuple(tasks), tuple(edges(tasks)))
