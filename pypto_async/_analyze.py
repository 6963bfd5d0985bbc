"""``pypto-async analyze``: scheduler overhead of a swimlane record file, as PyPTO's ``sched_overhead_analysis``.

Input: an ``l2_swimlane_records.json`` in PyPTO's format and, optionally,
the ``deps.json`` of the same program (the task graph the timing is joined
against; the records carry no edges).  Both forms of the record file are
read:

* the joined form, ``{"tasks": [{"task_id", "core_id", "core_type",
  "dispatch_time_us", "start_time_us", "end_time_us", "finish_time_us",
  ...}]}`` (what PyPTO's converter hands its analyses; ``func_name`` or
  ``name`` and ``submit_time_us`` are used when present, and
  ``metadata.core_types`` for the cores of each kind);
* the raw form PyPTO's runtime writes, ``{"l2_swimlane_level",
  "metadata": {"clock_freq_hz", "core_types"}, "aicore_tasks": [[core_id,
  task_id, reg_task_id, start_cycles, end_cycles, ...]], "aicpu_tasks":
  [[core_id, reg_task_id, dispatch_cycles, finish_cycles]]}``, joined here
  the way PyPTO's converter joins it.

``deps.json`` edges are PyPTO's ``{"pred", "succ"}`` or pypto_async's own
``{"src", "dst"}`` (:mod:`pypto_async.runtime._deps_json`), by task id.

The definitions (PyPTO's ``docs/en/user/performance/00-swimlane.md``):

* A task is **ready** when every predecessor has finished (and it was
  submitted, where the records say when); a task without predecessors is
  ready when it was submitted, else when it was dispatched.  A ready time
  after the dispatch (a consumer dispatched early) counts as the dispatch.
* A core is **occupied** from a task's dispatch to its finish, else idle.
* **Idle with ready work**, per engine kind (``aic``, ``aiv``): the wall
  time during which a core of that kind was idle while a task of that kind
  was ready and not yet dispatched -- the scheduler not keeping up.  An
  idle core with *no* ready work is not overhead (that is the graph).  The
  ``system`` row is the time during which any kind was so.  ``lost core-us``
  integrates ``min(idle cores, waiting tasks)``: the core time the
  scheduler left unused.
* **Pickup**: ``start - dispatch`` of each task, its distribution.
* **Critical path**: from the last task to finish, back through the
  predecessor that finished last, to a task without predecessors; its span
  (the first dispatch to the last finish) splits into compute (``start ->
  end``), scheduler time (pickup ``dispatch -> start``, completion ``end
  -> finish``, and waiting for dispatch while a core of the kind was idle)
  and core wait (waiting for dispatch while every core of the kind was
  busy).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

__all__ = ["Record", "KindOverhead", "Distribution", "CriticalPath", "Analysis", "load_records", "load_deps",
           "analyze", "analyze_files", "format_analysis"]

_FIELDS = ("dispatch_time_us", "start_time_us", "end_time_us", "finish_time_us")


@dataclass(frozen=True)
class Record:
    """One task (one block of it) on one core, times in microseconds."""

    task_id: int
    core_id: int
    core_type: str
    name: str
    dispatch_us: float
    start_us: float
    end_us: float
    finish_us: float
    submit_us: float | None = None


@dataclass(frozen=True)
class KindOverhead:
    """Idle-with-ready-work figures of one engine kind (or ``"system"``)."""

    kind: str
    cores: int
    tasks: int
    busy_us: float  #: sum of start -> end
    idle_ready_us: float  #: wall time with an idle core and ready, undispatched work
    share: float  #: idle_ready_us / makespan
    lost_core_us: float  #: integral of min(idle cores, waiting tasks)


@dataclass(frozen=True)
class Distribution:
    """A distribution in microseconds (nearest-rank percentiles)."""

    n: int
    mean: float
    min: float
    p50: float
    p90: float
    p99: float
    max: float


@dataclass(frozen=True)
class CriticalPath:
    """The critical path and how its span splits."""

    tasks: list  #: task ids, first to last
    names: list
    span_us: float
    compute_us: float
    pickup_us: float
    completion_us: float
    wait_idle_us: float  #: waiting for dispatch while a core of the kind was idle
    wait_busy_us: float  #: waiting for dispatch while every core of the kind was busy

    @property
    def scheduler_us(self) -> float:
        """Pickup, completion, and dispatch waits with an idle core: the scheduler's share."""
        return self.pickup_us + self.completion_us + self.wait_idle_us


@dataclass(frozen=True)
class Analysis:
    """What ``pypto-async analyze`` reports."""

    tasks: int
    records: int
    edges: int
    makespan_us: float
    overhead: dict  #: kind -> KindOverhead, kinds sorted, then "system"
    pickup: dict  #: kind -> Distribution, then "all"
    critical_path: CriticalPath | None
    notes: list = field(default_factory=list)

    def to_json(self) -> dict:
        doc = asdict(self)
        if self.critical_path is not None:
            doc["critical_path"]["scheduler_us"] = self.critical_path.scheduler_us
        return doc


# ---- reading ------------------------------------------------------------------------------------


def _int(v, what: str) -> int:
    try:
        n = int(v)
    except (TypeError, ValueError):
        raise ValueError(f"{what} is not an integer: {v!r}") from None
    return n & ((1 << 64) - 1) if n < 0 else n


def _num(task: dict, key: str, where: str) -> float:
    v = task.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ValueError(f"{where}: {key} must be a number, got {v!r}")
    return float(v)


def _joined(doc: dict, core_types: list) -> list[Record]:
    tasks = doc.get("tasks")
    if not isinstance(tasks, list):
        raise ValueError("the record file has no 'tasks' list (nor PyPTO's raw 'aicore_tasks')")
    out = []
    for i, t in enumerate(tasks):
        if not isinstance(t, dict):
            raise ValueError(f"tasks[{i}] is not an object")
        missing = [k for k in (*_FIELDS, "task_id", "core_id") if k not in t]
        if missing:
            raise ValueError(f"tasks[{i}] lacks {', '.join(missing)}: the records need dispatch, start, end and "
                             "finish per task (a swimlane level >= 2 capture)")
        where = f"tasks[{i}]"
        core = _int(t["core_id"], f"{where}.core_id")
        kind = t.get("core_type") or (core_types[core] if core < len(core_types) else "aiv")
        name = t.get("func_name") or t.get("name")
        if name is None and t.get("func_id") not in (None, -1):
            name = f"func_{t['func_id']}"
        submit = t.get("submit_time_us")
        out.append(Record(_int(t["task_id"], f"{where}.task_id"), core, str(kind), "" if name is None else str(name),
                          *(_num(t, k, where) for k in _FIELDS),
                          None if submit is None else _num(t, "submit_time_us", where)))
    return out


def _raw(doc: dict, core_types: list) -> list[Record]:
    """PyPTO's raw record file, joined as its swimlane converter joins it."""
    meta = doc.get("metadata") or {}
    hz = meta.get("clock_freq_hz")
    if not isinstance(hz, (int, float)) or hz <= 0:
        raise ValueError(f"metadata.clock_freq_hz must be a positive number, got {hz!r}")
    aicore = doc.get("aicore_tasks") or []
    aicpu = doc.get("aicpu_tasks") or []
    if not aicpu:
        raise ValueError("the record file has no 'aicpu_tasks': dispatch and finish times need a swimlane "
                         "level >= 2 capture")
    stamps = [int(r[3]) for r in aicore] + [int(r[4]) for r in aicore]
    stamps += [int(r[2]) for r in aicpu] + [int(r[3]) for r in aicpu]
    base = min((s for s in stamps if s > 0), default=0)
    scale = 1e6 / float(hz)

    def us(c) -> float:
        c = int(c)
        return (c - base) * scale if c > 0 else 0.0

    by_reg = {}
    for r in aicore:
        by_reg[(int(r[0]), int(r[2]))] = (int(r[1]), r[3], r[4])
    out = []
    for r in aicpu:
        core, reg = int(r[0]), int(r[1])
        hit = by_reg.get((core, reg))
        if hit is None:
            continue  # PyPTO's converter drops these too (a rotated-out AICore buffer)
        tid, start, end = hit
        kind = core_types[core] if core < len(core_types) else "aiv"
        out.append(Record(tid, core, kind, "", us(r[2]), us(start), us(end), us(r[3])))
    return out


def load_records(path) -> tuple[list[Record], dict]:
    """Read a record file; return its records and its metadata (``core_types``, ...)."""
    doc = json.loads(Path(path).read_text())
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: not a swimlane record file (a JSON object)")
    meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    core_types = list(meta.get("core_types") or doc.get("core_types") or [])
    records = _raw(doc, core_types) if "aicore_tasks" in doc else _joined(doc, core_types)
    if not records:
        raise ValueError(f"{path}: no task records")
    return records, {"core_types": core_types}


def load_deps(path) -> tuple[dict, dict]:
    """Read a deps.json; return ``{succ: {preds}}`` and ``{task id: name}``."""
    doc = json.loads(Path(path).read_text())
    edges = doc.get("edges") if isinstance(doc, dict) else None
    if not isinstance(edges, list):
        raise ValueError(f"{path}: no 'edges' list")
    preds: dict = defaultdict(set)
    for i, e in enumerate(edges):
        if not isinstance(e, dict):
            raise ValueError(f"{path}: edges[{i}] is not an object")
        a = e.get("pred", e.get("src"))
        b = e.get("succ", e.get("dst"))
        if a is None or b is None:
            raise ValueError(f"{path}: edges[{i}] has neither pred/succ nor src/dst")
        preds[_int(b, f"edges[{i}] succ")].add(_int(a, f"edges[{i}] pred"))
    names = {}
    for t in doc.get("tasks") or []:
        if isinstance(t, dict) and t.get("name") is not None:
            tid = t.get("task_id", t.get("id"))
            if tid is not None:
                names[_int(tid, "task id")] = str(t["name"])
    return dict(preds), names


# ---- analysis -------------------------------------------------------------------------------------


def _dist(values: list[float]) -> Distribution:
    v = sorted(values)
    n = len(v)

    def rank(p: float) -> float:
        return v[max(0, math.ceil(p / 100 * n) - 1)]

    return Distribution(n, sum(v) / n, v[0], rank(50), rank(90), rank(99), v[-1])


def _measure(intervals) -> float:
    total, end = 0.0, -math.inf
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def _overlap(a: float, b: float, intervals) -> float:
    return sum(max(0.0, min(b, y) - max(a, x)) for x, y in intervals)


def _sweep(recs: list[Record], ready: dict, cores: int, t0: float, t_end: float):
    """One kind's (idle-with-ready intervals, lost core-us, idle-core intervals) over [t0, t_end]."""
    events = defaultdict(lambda: [0, 0])  # time -> [occupied delta, waiting delta]
    events[t0], events[t_end] = [0, 0], [0, 0]
    for r in recs:
        events[r.dispatch_us][0] += 1
        events[r.finish_us][0] -= 1
        t = ready[r.task_id]
        if t < r.dispatch_us:
            events[t][1] += 1
            events[r.dispatch_us][1] -= 1
    times = sorted(events)
    occupied = waiting = 0
    overhead, idle, lost = [], [], 0.0
    for t0, t1 in zip(times, times[1:]):
        occupied += events[t0][0]
        waiting += events[t0][1]
        free = max(0, cores - occupied)
        if free:
            idle.append((t0, t1))
            if waiting:
                overhead.append((t0, t1))
                lost += (t1 - t0) * min(free, waiting)
    return overhead, lost, idle


def analyze(records: list[Record], preds: dict | None = None, names: dict | None = None,
            core_types: list | None = None) -> Analysis:
    """Analyze `records` against the task graph `preds` (``{succ: {preds}}``); see the module doc."""
    preds = {k: set(v) for k, v in (preds or {}).items()}
    names = dict(names or {})
    notes = []
    by_task: dict = defaultdict(list)
    for r in records:
        by_task[r.task_id].append(r)
    known = set(by_task)
    dropped = sum(1 for s, ps in preds.items() if s not in known or not ps <= known)
    if dropped:
        notes.append(f"{dropped} task(s) of deps.json have edges to or from tasks not in the records; "
                     "those edges are ignored")
    preds = {s: {p for p in ps if p in known} for s, ps in preds.items() if s in known}
    finish = {t: max(r.finish_us for r in rs) for t, rs in by_task.items()}
    t0 = min(r.dispatch_us for r in records)
    t_end = max(r.finish_us for r in records)
    makespan = t_end - t0
    ready = {}
    for t, rs in by_task.items():
        submit = [r.submit_us for r in rs if r.submit_us is not None]
        dispatch = min(r.dispatch_us for r in rs)
        ps = preds.get(t)
        if ps:
            at = max(finish[p] for p in ps)
            if submit:
                at = max(at, min(submit))
        else:
            at = min(submit) if submit else dispatch
        ready[t] = min(at, dispatch)
    kinds = sorted({r.core_type for r in records})
    cores_of = {}
    for k in kinds:
        declared = sum(1 for c in (core_types or []) if c == k)
        seen = len({r.core_id for r in records if r.core_type == k})
        cores_of[k] = max(declared, seen)
    overhead, idle_of, all_intervals = {}, {}, []
    total_lost = 0.0
    for k in kinds:
        recs = [r for r in records if r.core_type == k]
        iv, lost, idle = _sweep(recs, ready, cores_of[k], t0, t_end)
        idle_of[k] = idle
        all_intervals += iv
        total_lost += lost
        busy = sum(r.end_us - r.start_us for r in recs)
        m = _measure(iv)
        overhead[k] = KindOverhead(k, cores_of[k], len({r.task_id for r in recs}), busy, m,
                                   m / makespan if makespan > 0 else 0.0, lost)
    m = _measure(all_intervals)
    overhead["system"] = KindOverhead("system", sum(cores_of.values()), len(by_task),
                                      sum(o.busy_us for o in overhead.values()), m,
                                      m / makespan if makespan > 0 else 0.0, total_lost)
    pickup = {k: _dist([r.start_us - r.dispatch_us for r in records if r.core_type == k]) for k in kinds}
    pickup["all"] = _dist([r.start_us - r.dispatch_us for r in records])
    return Analysis(len(by_task), len(records), sum(len(v) for v in preds.values()), makespan, overhead, pickup,
                    _critical(by_task, preds, finish, t0, idle_of, names), notes)


def _critical(by_task, preds, finish, t0, idle_of, names) -> CriticalPath:
    last = min(by_task, key=lambda t: (-finish[t], t))
    path = [last]
    while preds.get(path[-1]):
        ps = preds[path[-1]]
        path.append(min(ps, key=lambda p: (-finish[p], p)))
    path.reverse()
    cur = t0
    compute = pickup = completion = wait_idle = wait_busy = 0.0
    for t in path:
        rs = by_task[t]
        dispatch = min(r.dispatch_us for r in rs)
        start = min(r.start_us for r in rs)
        end = max(r.end_us for r in rs)
        kind = rs[0].core_type
        if dispatch > cur:
            idle = _overlap(cur, dispatch, idle_of[kind])
            wait_idle += idle
            wait_busy += dispatch - cur - idle
            cur = dispatch
        if start > cur:
            pickup += start - cur
            cur = start
        if end > cur:
            compute += end - cur
            cur = end
        if finish[t] > cur:
            completion += finish[t] - cur
            cur = finish[t]
    label = [names.get(t) or next((r.name for r in by_task[t] if r.name), "") for t in path]
    return CriticalPath(path, label, cur - t0, compute, pickup, completion, wait_idle, wait_busy)


def analyze_files(records_path, deps_path=None) -> Analysis:
    """Read and analyze a record file; `deps_path` None: a ``deps.json`` beside it if there is one."""
    records_path = Path(records_path)
    records, meta = load_records(records_path)
    if deps_path is None:
        sibling = records_path.parent / "deps.json"
        deps_path = sibling if sibling.is_file() else None
    preds, names = load_deps(deps_path) if deps_path is not None else ({}, {})
    a = analyze(records, preds, names, meta["core_types"])
    if deps_path is None:
        a.notes.append("no deps.json: every task is taken as ready when it was dispatched, so only "
                       "pickup shows as overhead")
    return a


# ---- the report -----------------------------------------------------------------------------------


def _task_label(tid: int) -> str:
    """PyPTO's display of a task id, ``(ring << 32) | local``: ``t7``, or ``r2t7`` off ring 0."""
    ring, local = (tid >> 32) & 0xFF, tid & 0xFFFFFFFF
    return f"r{ring}t{local}" if ring else f"t{local}"


def _pct(x: float, whole: float) -> str:
    return f"{100 * x / whole:5.1f}%" if whole > 0 else "    -"


def format_analysis(a: Analysis) -> str:
    """The text report of :func:`analyze`."""
    out = [f"{a.tasks} tasks ({a.records} records, {a.edges} edges), makespan {a.makespan_us:.3f} us "
           "(first dispatch to last finish)", ""]
    out.append("Idle with ready work: an idle core while a task of its kind was ready and not yet dispatched")
    out.append(f"  {'engine':<8} {'cores':>5} {'tasks':>6} {'busy (us)':>12} {'idle+ready (us)':>16} "
               f"{'of makespan':>11} {'lost core-us':>13}")
    for o in a.overhead.values():
        out.append(f"  {o.kind:<8} {o.cores:>5} {o.tasks:>6} {o.busy_us:>12.3f} {o.idle_ready_us:>16.3f} "
                   f"{100 * o.share:>10.1f}% {o.lost_core_us:>13.3f}")
    out += ["", "Pickup (dispatch -> start), us"]
    out.append(f"  {'engine':<8} {'n':>6} {'mean':>9} {'min':>9} {'p50':>9} {'p90':>9} {'p99':>9} {'max':>9}")
    for k, d in a.pickup.items():
        out.append(f"  {k:<8} {d.n:>6} {d.mean:>9.3f} {d.min:>9.3f} {d.p50:>9.3f} {d.p90:>9.3f} {d.p99:>9.3f} "
                   f"{d.max:>9.3f}")
    c = a.critical_path
    if c is not None:
        out += ["", f"Critical path: {len(c.tasks)} tasks, {c.span_us:.3f} us"]
        out.append(f"  compute    {c.compute_us:>12.3f} us {_pct(c.compute_us, c.span_us)}")
        out.append(f"  scheduler  {c.scheduler_us:>12.3f} us {_pct(c.scheduler_us, c.span_us)}   (pickup "
                   f"{c.pickup_us:.3f}, completion {c.completion_us:.3f}, dispatch wait with an idle core "
                   f"{c.wait_idle_us:.3f})")
        out.append(f"  core wait  {c.wait_busy_us:>12.3f} us {_pct(c.wait_busy_us, c.span_us)}   (every core of "
                   "the kind busy)")
        shown = [_task_label(t) + (f" {n}" if n else "") for t, n in zip(c.tasks, c.names)]
        if len(shown) > 12:
            shown = shown[:5] + [f"... {len(shown) - 10} more ..."] + shown[-5:]
        out.append("  path: " + " -> ".join(shown))
    for n in a.notes:
        out.append(f"note: {n}")
    return "\n".join(out)
