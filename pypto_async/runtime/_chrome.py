"""A :class:`~._trace.Trace` as Chrome/Perfetto JSON, and back.

:func:`layout` places a trace's records on tracks (its lanes, slices and
arrows); :func:`to_chrome` writes that layout in the Chrome trace event
format, which Perfetto (https://ui.perfetto.dev) and ``chrome://tracing`` both
load; :func:`read_chrome` reads such a document back into a trace's fields
(``Trace.from_chrome`` makes the trace of them), so that a saved file and a
live capture are the same model (the PNG view in ``pypto_async._plot`` draws
the same layout).

This module works on any object with a trace's fields (``records``,
``device``, ``stream_names``, ``inferred_waits``, ``dropped``) and does not
import :mod:`._trace`: the trace model sits above it and calls it
(``Trace.to_chrome``, ``from_chrome``, ``save``).  Both build on
:mod:`._trace_record`.

Some facts about the format that the conversion rests on:

* A trace is a JSON object ``{"traceEvents": [...], "displayTimeUnit": ...}``;
  times (``ts``, ``dur``) are microseconds, floats allowed.
* ``"X"`` (complete) events are slices on a track ``(pid, tid)``.  Slices on
  one track must nest or be disjoint.  That holds here: commands on a stream
  run one after another, and an engine runs one command at a time.
* ``"M"`` (metadata) events name the process and the tracks
  (``process_name``, ``thread_name``) and order the tracks
  (``thread_sort_index``).
* Flow arrows are an ``"s"`` event and an ``"f"`` event with the same ``id``
  and ``cat``; each binds to the slice that encloses its timestamp on its own
  track (``"bp": "e"`` asks for that on the ``"f"`` side too), and the ``"s"``
  must not come after the ``"f"``.  So the ``"s"`` sits at the start of the
  event record's slice (or, when the driver stamped the record a hair after
  the wait ended, in the middle of the work the record covers) and the ``"f"``
  inside the wait's slice, no earlier than the ``"s"``; each flow event
  follows its slice in the file.

The layout: one process, ``device``; one track per stream with every command
queued on it (kernels by name, copies by direction, event records and waits,
frees, latches); one track per compute core with the blocks it ran; one track
per copy engine with the copies it ran.  A track's kind follows from its
``tid`` alone (:func:`track_kind`).  An arrow joins each event record on one
stream to every wait for that recording on another stream; the arrow of a
wait the runtime inferred (automatic ordering of DeviceTensors) has the
category ``"inferred"`` and a name that says so, the others ``"event"``, and
the wait's slice says ``"inferred": true`` in its args (which is how
:func:`read_chrome` gets them back).
"""

from __future__ import annotations

import bisect
import json
import os
import pathlib
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .. import _driver
from ._trace_record import TraceRecord, kind_code

if TYPE_CHECKING:  # for the annotations only: any object with a Trace's fields will do
    from ._trace import Trace

__all__ = [
    "to_chrome",
    "read_chrome",
    "layout",
    "Layout",
    "Track",
    "Slice",
    "Flow",
    "track_kind",
    "write_json",
    "STREAM_TID_BASE",
    "ENGINE_TID_BASE",
    "HOST_TID_BASE",
]

#: ``tid`` of the track of stream ``n`` is ``STREAM_TID_BASE + n``.
STREAM_TID_BASE = 1
#: ``tid`` of the track of engine ``e`` is ``ENGINE_TID_BASE + e``.
ENGINE_TID_BASE = 100_000
#: With modeled device time, ``tid`` of the host thread ``e``'s track (wall time) is ``HOST_TID_BASE + e``.
HOST_TID_BASE = 200_000
#: Kinds drawn on their engine's lane only (a launch's blocks, a program's tasks) ...
_ENGINE_ONLY = frozenset({"block", "task"})
#: ... and on their stream's lane only (a launch and a program as a whole).
_STREAM_ONLY = frozenset({"launch", "program"})
_PID = 1
# otherData keys that are not the device's shape.
_OWN_KEYS = frozenset({"producer", "origin_ns", "dropped", "records"})


def track_kind(tid: int, cores: int) -> str:
    """Return ``"stream"``, ``"core"``, ``"copy"`` or ``"other"`` for a track of the layout.

    Parameters
    ----------
    tid : int
        The track's ``tid``.
    cores : int
        The device's core count: engines below it are cores, the rest copy engines.
    """
    if tid >= HOST_TID_BASE:
        return "host"
    if tid >= ENGINE_TID_BASE:
        return "core" if tid - ENGINE_TID_BASE < cores else "copy"
    if tid >= STREAM_TID_BASE:
        return "stream"
    return "other"


def _stream_label(sid: int, name: str | None) -> str:
    return f"stream {sid}" + (f" ({name})" if name else "")


def _stream_name(sid: int, label: str) -> str | None:
    """The inverse of :func:`_stream_label`: the name a stream track's label carries."""
    prefix = f"stream {sid} ("
    return label[len(prefix):-1] if label.startswith(prefix) and label.endswith(")") else None


@dataclass(frozen=True, slots=True)
class Track:
    """A lane: a stream, a compute core or a copy engine (``kind``: see :func:`track_kind`)."""

    tid: int
    name: str
    sort_index: int
    kind: str


@dataclass(frozen=True, slots=True)
class Slice:
    """A record drawn on a track; ``ts`` and ``dur`` are µs from the layout's origin."""

    tid: int
    ts: float
    dur: float
    record: TraceRecord


@dataclass(frozen=True, slots=True)
class Flow:
    """An arrow from an event record (``src``) to a wait on it (``dst``), times in µs."""

    event_id: int
    src_tid: int
    src_ts: float
    dst_tid: int
    dst_ts: float
    inferred: bool = False


@dataclass(frozen=True)
class Layout:
    """A trace placed on tracks.

    Attributes
    ----------
    origin_ns : int
        The time ``ts == 0`` stands for: the first record's submission.
    tracks : tuple of Track
        By ``tid``.
    slices : tuple of Slice
        In record order; a copy's slice on its stream precedes the one on its engine.
    flows : tuple of Flow
        In the order of the waits they end at.
    """

    origin_ns: int
    tracks: tuple[Track, ...]
    slices: tuple[Slice, ...]
    flows: tuple[Flow, ...]


def _core_count(trace: Trace) -> int:
    # The device's shape when known; else the first copy engine's id, since
    # copy engines are numbered after the cores; else one past the last core seen.
    cores = trace.device.get("cores")
    if isinstance(cores, int):
        return cores
    copy_engines = [r.engine for r in trace.records if r.engine >= 0 and r.is_copy]
    if copy_engines:
        return min(copy_engines)
    return 1 + max((r.engine for r in trace.records if r.kind_name in _ENGINE_ONLY), default=-1)


def layout(trace: Trace) -> Layout:
    """Place `trace` on tracks: one per stream, core and copy engine, and the arrows between them."""
    records = trace.records
    origin = min((r.submit_ns or r.begin_ns for r in records), default=0)
    cores = _core_count(trace)
    tracks: dict[int, Track] = {}

    def us(ns: int) -> float:
        return round((ns - origin) / 1000.0, 3)

    def stream_track(sid: int) -> int:
        tid = STREAM_TID_BASE + sid
        if tid not in tracks:
            tracks[tid] = Track(tid, _stream_label(sid, trace.stream_names.get(sid)), sid, "stream")
        return tid

    aic = trace.device.get("aic_cores")

    def engine_track(engine: int) -> int:
        tid = ENGINE_TID_BASE + engine
        if tid not in tracks:
            kind = track_kind(tid, cores)
            if kind == "copy":
                label = f"copy engine {engine - cores}"
            elif isinstance(aic, int):  # modeled cores: AIC first, then AIV
                label = f"AIC {engine}" if engine < aic else f"AIV {engine - aic}"
            else:
                label = f"core {engine}"
            tracks[tid] = Track(tid, label, ENGINE_TID_BASE + engine, kind)
        return tid

    # Modeled device time: the host threads that ran the work get lanes of their own, in wall time.
    modeled = trace.device.get("timing") == "model"
    host_cores = trace.device.get("host_cores")

    def host_track(engine: int) -> int:
        tid = HOST_TID_BASE + engine
        if tid not in tracks:
            copy = isinstance(host_cores, int) and engine >= host_cores
            label = (f"host copy thread {engine - host_cores}" if copy else f"host core thread {engine}")
            tracks[tid] = Track(tid, label + " (wall time)", tid, "host")
        return tid

    # Idle engines still get a lane when the device's shape is known.
    copy_engines = trace.device.get("copy_engines")
    if isinstance(trace.device.get("cores"), int):
        for e in range(cores):
            engine_track(e)
        if isinstance(copy_engines, int):
            for e in range(cores, cores + copy_engines):
                engine_track(e)

    slices: list[Slice] = []
    by_event: dict[int, list[tuple[int, Slice]]] = {}  # event id -> (submit time, record's slice)
    waits: list[Slice] = []
    stream_slices: dict[int, list[Slice]] = {}
    for r in records:
        k = r.kind_name
        ts = us(r.begin_ns)
        dur = round(r.duration_ns / 1000.0, 3)
        if k not in _ENGINE_ONLY:
            sl = Slice(stream_track(r.stream_id), ts, dur, r)
            slices.append(sl)
            stream_slices.setdefault(sl.tid, []).append(sl)
            if r.event_id and k == "record":
                by_event.setdefault(r.event_id, []).append((r.submit_ns, sl))
            elif r.event_id and k == "wait":
                waits.append(sl)
        if r.engine >= 0 and k not in _STREAM_ONLY:
            slices.append(Slice(engine_track(r.engine), ts, dur, r))
        if modeled and r.host_engine >= 0 and r.host_start_ns and k not in _STREAM_ONLY:
            slices.append(Slice(host_track(r.host_engine), us(r.host_start_ns),
                                round(max(0, r.host_end_ns - r.host_start_ns) / 1000.0, 3), r))
    flows = _flows(by_event, waits, stream_slices, trace.inferred_waits)
    return Layout(origin, tuple(tracks[t] for t in sorted(tracks)), tuple(slices), tuple(flows))


def _flows(by_event: dict[int, list[tuple[int, Slice]]], waits: list[Slice],
           stream_slices: dict[int, list[Slice]], inferred=frozenset()) -> list[Flow]:
    flows: list[Flow] = []
    by_end: dict[int, tuple[list[float], list[Slice]]] = {}
    submits: dict[int, list[int]] = {}
    for eid, recorded in by_event.items():
        recorded.sort(key=lambda item: item[0])
        submits[eid] = [item[0] for item in recorded]
    for wait in waits:
        w = wait.record
        recorded = by_event.get(w.event_id)
        if not recorded:
            continue
        # The wait is for the event as recorded when the wait was submitted.
        i = bisect.bisect_right(submits[w.event_id], w.submit_ns) - 1
        if i < 0:
            continue
        src = recorded[i][1]
        if src.record.stream_id == w.stream_id:
            continue
        if src.tid not in by_end:
            work = sorted((s for s in stream_slices.get(src.tid, []) if s.record.kind_name != "record"),
                          key=lambda s: s.ts + s.dur)
            by_end[src.tid] = ([s.ts + s.dur for s in work], work)
        points = _flow_points(src, wait, by_end[src.tid])
        if points is not None:
            s_slice, s_ts, f_ts = points
            flows.append(Flow(w.event_id, s_slice.tid, s_ts, wait.tid, f_ts, w.token in inferred))
    return flows


def _flow_points(src: Slice, wait: Slice, track: tuple[list[float], list[Slice]]) -> tuple[Slice, float, float] | None:
    """Return (source slice, "s" time, "f" time) for an arrow from a record to a wait.

    Perfetto binds a flow event to the slice enclosing its time on its track
    and needs the "s" no later than the "f".  The record's own time can come
    out a hair after the wait's end (the driver stamps the record after it
    wakes the waiter); then the arrow starts from the work the record covers,
    the slice before it on its stream.
    """
    w0, w1 = wait.ts, wait.ts + wait.dur

    def fits(t: float) -> bool:
        return t < w1 if w1 > w0 else t <= w0

    s_ts = src.ts
    if not fits(s_ts):
        ends, work = track  # the track's non-record slices, by end time
        i = bisect.bisect_right(ends, src.ts) - 1
        if i < 0:
            return None
        src = work[i]
        s_ts = round(src.ts + src.dur / 2.0, 3)
        if not fits(s_ts):
            return None
    return src, s_ts, max(s_ts, w0)


def _status_text(status: int) -> str:
    if status == 0:
        return "ok"
    return _driver.status_name(status)


_status_codes: dict[str, int] | None = None


def _status_code(text: str) -> int:
    # The inverse of _status_text: the driver's names for -1, -2, ... up to
    # the first code it has no name for, which stands for every unknown name.
    global _status_codes
    if _status_codes is None:
        codes: dict[str, int] = {}
        code = 0
        while True:
            name = _status_text(-code)
            codes.setdefault(name, -code)
            if name == "PTO_E?":
                break
            code += 1
        _status_codes = codes
    return _status_codes.get(text, _status_codes["PTO_E?"])


def _slice_event(sl: Slice, inferred=frozenset(), origin: int = 0) -> dict:
    r = sl.record
    k = r.kind_name
    args: dict[str, object] = {
        "token": r.token,
        "seq": r.seq,
        "stream": r.stream_id,
        "status": _status_text(r.status),
    }
    if r.bytes:
        args["bytes"] = r.bytes
    if r.start_ns and r.submit_ns:
        args["queued_us"] = round((r.start_ns - r.submit_ns) / 1000.0, 3)
    if r.event_id:
        args["event"] = r.event_id
        if k == "wait" and r.token in inferred:
            args["inferred"] = True
    if k in _ENGINE_ONLY:
        args["block"] = r.block
    if r.engine >= 0:
        args["engine"] = r.engine
    if r.graph:
        args["graph"] = r.graph
    if r.host_start_ns:
        # What the host did (with modeled device time, not the slice's times): read_chrome reads it back.
        args["host_start_us"] = round((r.host_start_ns - origin) / 1000.0, 3)
        args["host_end_us"] = round((r.host_end_ns - origin) / 1000.0, 3)
        args["host_engine"] = r.host_engine
    if r.dispatch_ns:
        args["dispatch_us"] = round((r.dispatch_ns - origin) / 1000.0, 3)
    # A host thread's lane repeats the slice in wall time, under a category of its own.
    return {"name": r.name or k, "cat": "host" if sl.tid >= HOST_TID_BASE else k, "ph": "X", "ts": sl.ts, "dur": sl.dur,
            "pid": _PID, "tid": sl.tid, "args": args}


def to_chrome(trace: Trace) -> dict:
    """Return `trace` in the Chrome trace event format (a JSON-ready dict).

    Returns
    -------
    dict
        ``{"traceEvents": [...], "displayTimeUnit": "ns", "otherData": {...}}``
        with one ``"X"`` slice per command on its stream's track, one per
        block on its core's track and one per copy on its copy engine's
        track; ``"M"`` events naming and ordering the tracks; and an
        ``"s"``/``"f"`` flow pair from each event record to each wait on it
        from another stream.  ``ts`` and ``dur`` are microseconds from the
        first record's submission (``otherData["origin_ns"]``).
    """
    lay = layout(trace)
    inferred = trace.inferred_waits
    events: list[tuple[float, int, dict]] = [(sl.ts, 0, _slice_event(sl, inferred, lay.origin_ns))
                                             for sl in lay.slices]
    for n, fl in enumerate(lay.flows, 1):
        if fl.inferred:
            common = {"name": f"inferred wait, event {fl.event_id}", "cat": "inferred", "id": n, "pid": _PID}
        else:
            common = {"name": f"event {fl.event_id}", "cat": "event", "id": n, "pid": _PID}
        events.append((fl.src_ts, 1, {**common, "ph": "s", "ts": fl.src_ts, "tid": fl.src_tid}))
        events.append((fl.dst_ts, 1, {**common, "ph": "f", "bp": "e", "ts": fl.dst_ts, "tid": fl.dst_tid}))
    events.sort(key=lambda item: (item[0], item[1]))
    platform = trace.device.get("platform", "sim")
    meta: list[dict] = [
        {"name": "process_name", "ph": "M", "pid": _PID, "tid": 0, "args": {"name": f"device ({platform})"}},
    ]
    for t in lay.tracks:
        meta.append({"name": "thread_name", "ph": "M", "pid": _PID, "tid": t.tid, "args": {"name": t.name}})
        meta.append({"name": "thread_sort_index", "ph": "M", "pid": _PID, "tid": t.tid,
                     "args": {"sort_index": t.sort_index}})
    return {
        "traceEvents": meta + [ev for _, _, ev in events],
        "displayTimeUnit": "ns",
        "otherData": {
            "producer": "pypto_async",
            "origin_ns": lay.origin_ns,
            "dropped": trace.dropped,
            "records": len(trace.records),
            **{k: v for k, v in trace.device.items() if isinstance(v, (int, str))},
        },
    }


def _record_from(ev: Mapping, tid: int, origin: int) -> TraceRecord | None:
    kind = kind_code(str(ev.get("cat", "")))
    if kind is None or "ts" not in ev:
        return None
    args = ev.get("args") or {}
    on_stream = tid < ENGINE_TID_BASE
    at = origin + round(float(ev["ts"]) * 1000)
    queued = args.get("queued_us")
    if queued is not None:  # it started: the slice spans start..end
        start, end, submit = at, at + round(float(ev.get("dur", 0)) * 1000), at - round(float(queued) * 1000)
    elif ev.get("dur"):  # it started, with no submission time
        start, end, submit = at, at + round(float(ev["dur"]) * 1000), 0
    else:  # it never started: an instant at its end (its submission time is not in the JSON)
        start, end, submit = 0, at, 0
    def ns(key: str, default: int) -> int:
        value = args.get(key)
        return origin + round(float(value) * 1000) if value is not None else default

    return TraceRecord(
        host_start_ns=ns("host_start_us", 0), host_end_ns=ns("host_end_us", 0),
        host_engine=int(args.get("host_engine", -1)), dispatch_ns=ns("dispatch_us", 0),
        token=int(args.get("token", 0)), seq=int(args.get("seq", 0)), bytes=int(args.get("bytes", 0)),
        submit_ns=submit, start_ns=start, end_ns=end,
        event_id=int(args.get("event", 0)),
        stream_id=int(args.get("stream", tid - STREAM_TID_BASE if on_stream else 0)),
        engine=int(args.get("engine", -1 if on_stream else tid - ENGINE_TID_BASE)), kind=kind, block=int(args.get("block", 0)),
        status=_status_code(str(args.get("status", "ok"))), name=str(ev.get("name", "")),
        graph=str(args.get("graph", "")),
    )


def read_chrome(doc: Mapping | list) -> dict:
    """Read back the fields of a trace that :func:`to_chrome` wrote (``Trace.from_chrome`` makes the Trace).

    Returns the keyword arguments of :class:`~._trace.Trace`: ``records``,
    ``dropped``, ``device``, ``stream_names`` and ``inferred_waits``.  Every field the JSON carries comes back: the records (a copy's slice on
    its stream, a block's on its core), the device's shape, the dropped
    count and the streams' names.  So the trace read back has the same
    summary, and ``to_chrome`` of it gives ``doc`` again, but for the
    numbers of the arrows: the records come back in time order, not in the
    order the driver finished them.  A command that never started comes back
    without its submission time, which the JSON does not hold.  Slices on
    tracks outside the layout, or of kinds the driver does not have, are
    left out.

    Parameters
    ----------
    doc : dict or list
        The ``{"traceEvents": [...], ...}`` object, or the bare event list.

    Raises
    ------
    ValueError
        If `doc` is neither.
    """
    if isinstance(doc, list):
        doc = {"traceEvents": doc}
    events = doc.get("traceEvents") if isinstance(doc, Mapping) else None
    if not isinstance(events, list):
        raise ValueError("not a Chrome trace (no 'traceEvents' list)")
    other = doc.get("otherData")
    other = other if isinstance(other, Mapping) else {}
    # A record's time 0 means "never started", so a document without its
    # origin (a bare event list) counts from 1 ns.
    origin = int(other.get("origin_ns", 0)) or 1
    records: list[TraceRecord] = []
    names: dict[int, str] = {}
    inferred: set[int] = set()
    for ev in events:
        if not isinstance(ev, Mapping):
            continue
        tid = ev.get("tid")
        if not isinstance(tid, int) or tid < STREAM_TID_BASE or tid >= HOST_TID_BASE:
            continue  # host lanes repeat slices of the device's
        if ev.get("ph") == "M" and ev.get("name") == "thread_name" and tid < ENGINE_TID_BASE:
            sid = tid - STREAM_TID_BASE
            name = _stream_name(sid, str((ev.get("args") or {}).get("name", "")))
            if name:
                names[sid] = name
        elif ev.get("ph") == "X" and (tid < ENGINE_TID_BASE or ev.get("cat") in _ENGINE_ONLY):
            # An engine's copies repeat the slices on their streams; its blocks are only there.
            r = _record_from(ev, tid, origin)
            if r is not None:
                records.append(r)
                if (ev.get("args") or {}).get("inferred") and r.kind_name == "wait":
                    inferred.add(r.token)
    device = {k: v for k, v in other.items() if k not in _OWN_KEYS}
    return {"records": tuple(records), "dropped": int(other.get("dropped", 0)), "device": device,
            "stream_names": names, "inferred_waits": frozenset(inferred)}


def write_json(path: str | os.PathLike, obj: object) -> pathlib.Path:
    """Write ``obj`` as JSON to ``path`` through a temporary file and a rename."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(obj, f, separators=(",", ":"))
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path
