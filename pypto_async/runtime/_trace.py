"""Swimlane traces: the driver's per-command records as a Chrome/Perfetto trace.

When tracing is on, the driver writes one ``pto_trace_record`` per command it
finishes (and one per block of a launch): stream, engine, kind, name, bytes and
the submit/start/end times of ``pto_now_ns()``.  This module reads those
records and turns them into the Chrome trace event format, which Perfetto
(https://ui.perfetto.dev) and ``chrome://tracing`` both load.

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
per copy engine with the copies it ran.  An arrow joins each event record on
one stream to every wait for that recording on another stream.
"""

from __future__ import annotations

import bisect
import json
import os
import pathlib
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = [
    "TraceRecord",
    "Trace",
    "TraceSummary",
    "TraceRecorder",
    "TraceCapture",
    "TraceWindow",
    "WorkerTracing",
    "read_records",
    "device_shape",
    "kind_name",
    "STREAM_TID_BASE",
    "ENGINE_TID_BASE",
    "write_json",
]

#: ``tid`` of the track of stream ``n`` is ``STREAM_TID_BASE + n``.
STREAM_TID_BASE = 1
#: ``tid`` of the track of engine ``e`` is ``ENGINE_TID_BASE + e``.
ENGINE_TID_BASE = 100_000
_PID = 1
_READ_BATCH = 4096

_kinds: dict[int, str] | None = None


def _kind_table() -> dict[int, str]:
    # Built from the header's constants the first time it is needed, so that
    # importing this module does not load the native driver.
    global _kinds
    if _kinds is None:
        from .. import _driver

        _kinds = {
            getattr(_driver, name): name[len("PTO_CMD_"):].lower()
            for name in _driver.__all__
            if name.startswith("PTO_CMD_")
        }
    return _kinds


def kind_name(kind: int) -> str:
    """Return the short name of a ``PTO_CMD_*`` kind (``"h2d"``, ``"launch"``).

    Parameters
    ----------
    kind : int
        A trace record's ``kind``.  Unknown values give ``"kind<N>"``.
    """
    return _kind_table().get(kind, f"kind{kind}")


def _status_text(status: int) -> str:
    if status == 0:
        return "ok"
    from .. import _driver

    return _driver.status_name(status)


_COPY_KINDS = frozenset({"h2d", "d2h", "d2d", "memset"})


@dataclass(frozen=True, slots=True)
class TraceRecord:
    """One command (or one block of a launch) as the driver traced it.

    The fields are those of ``pto_trace_record`` in ``pto_driver.h``; times
    are ``pto_now_ns()`` nanoseconds.  ``engine`` is a core for
    ``0 <= engine < cores``, a copy engine above that, and ``-1`` for work the
    scheduler did itself (event records and waits, latches, delays).
    """

    token: int
    seq: int
    bytes: int
    submit_ns: int
    start_ns: int
    end_ns: int
    event_id: int
    stream_id: int
    engine: int
    kind: int
    block: int
    status: int
    name: str

    @classmethod
    def from_cdata(cls, rec, string=None) -> "TraceRecord":
        """Copy a ``pto_trace_record`` cdata into a record."""
        if string is None:
            from .._driver import ffi

            string = ffi.string
        return cls(
            int(rec.token), int(rec.seq), int(rec.bytes),
            int(rec.submit_ns), int(rec.start_ns), int(rec.end_ns),
            int(rec.event_id), int(rec.stream_id), int(rec.engine),
            int(rec.kind), int(rec.block), int(rec.status),
            string(rec.name).decode("utf-8", "replace"),
        )

    @property
    def kind_name(self) -> str:
        """The kind's short name: ``"h2d"``, ``"launch"``, ``"block"``, ..."""
        return kind_name(self.kind)

    @property
    def begin_ns(self) -> int:
        """When the command started, or when it ended if it never started."""
        return self.start_ns or self.end_ns or self.submit_ns

    @property
    def duration_ns(self) -> int:
        """How long it ran (0 if it never started)."""
        return max(0, self.end_ns - self.start_ns) if self.start_ns else 0


def read_records(dev) -> list[TraceRecord]:
    """Drain every trace record the driver holds for ``dev``, oldest first.

    The records are moved out of the driver: a second call returns only what
    finished in between.

    Parameters
    ----------
    dev : cdata ``pto_device *``
        An open device.
    """
    from .._driver import check, ffi, lib

    buf = ffi.new("pto_trace_record[]", _READ_BATCH)
    string = ffi.string
    out: list[TraceRecord] = []
    while True:
        n = check(lib.pto_trace_read(dev, buf, _READ_BATCH), "pto_trace_read")
        out.extend(TraceRecord.from_cdata(buf[i], string) for i in range(n))
        if n < _READ_BATCH:
            return out


def device_shape(dev) -> dict:
    """Return ``{"platform", "cores", "copy_engines", ...}`` from ``pto_device_get_info``."""
    from .._driver import check, ffi, lib

    info = ffi.new("pto_device_info *")
    check(lib.pto_device_get_info(dev, info), "pto_device_get_info")
    return {
        "platform": ffi.string(info.platform).decode("ascii", "replace"),
        "cores": int(info.cores),
        "copy_engines": int(info.copy_engines),
        "aicpu_thread_num": int(info.aicpu_thread_num),
        "ring_task_window": int(info.ring_task_window),
        "ring_heap": int(info.ring_heap),
        "ring_dep_pool": int(info.ring_dep_pool),
        "device_memory": int(info.device_memory),
    }


def _union_ns(intervals: list[tuple[int, int]]) -> tuple[int, list[tuple[int, int]]]:
    """Return the total length of the union of [start, end) intervals, and the union."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(intervals):
        if end <= start:
            continue
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return sum(e - s for s, e in merged), merged


@dataclass(frozen=True)
class TraceSummary:
    """What ran when, reduced to a few numbers.

    Attributes
    ----------
    wall_ns : int
        From the first command's start to the last command's end.
    compute_ns : int
        Time at least one core was running a block.
    copy_ns : int
        Time at least one copy engine was moving bytes.
    overlapped_ns : int
        Time a core and a copy engine were both busy.
    engine_busy_ns : dict
        Busy time per engine id.
    """

    wall_ns: int
    compute_ns: int
    copy_ns: int
    overlapped_ns: int
    engine_busy_ns: Mapping[int, int] = field(default_factory=dict)

    @property
    def overlap(self) -> float:
        """Fraction of the shorter of compute and copy time hidden under the other.

        1.0 means the shorter activity ran entirely alongside the other one;
        0.0 means they never ran at the same time (or one is absent).
        """
        shorter = min(self.compute_ns, self.copy_ns)
        return self.overlapped_ns / shorter if shorter else 0.0

    @property
    def concurrency(self) -> float:
        """Sum of the engines' busy time over the wall time (1.0: one engine at a time)."""
        return sum(self.engine_busy_ns.values()) / self.wall_ns if self.wall_ns else 0.0


@dataclass(frozen=True)
class Trace:
    """A captured swimlane trace: the driver's records and the device's shape.

    Get one from :meth:`ChipWorker.trace` (a window) or from a worker opened
    with ``RunConfig(enable_chip_swimlane=True)`` (its whole life).
    :meth:`to_chrome` gives the Chrome trace event format, :meth:`save`
    writes it, :meth:`summary` measures overlap.

    Attributes
    ----------
    records : tuple of TraceRecord
        Oldest first, as the driver finished them.
    dropped : int
        Records the driver dropped because its buffer was full.
    device : dict
        ``platform``, ``cores``, ``copy_engines`` (see :func:`device_shape`).
    stream_names : dict
        Track names by stream id, for streams you want named (``"default"``).
    """

    records: tuple[TraceRecord, ...]
    dropped: int = 0
    device: Mapping[str, object] = field(default_factory=dict)
    stream_names: Mapping[int, str] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.records)

    def _cores(self) -> int:
        cores = self.device.get("cores")
        if isinstance(cores, int):
            return cores
        copy_engines = [r.engine for r in self.records if r.engine >= 0 and r.kind_name in _COPY_KINDS]
        if copy_engines:
            return min(copy_engines)
        return 1 + max((r.engine for r in self.records if r.kind_name == "block"), default=-1)

    def summary(self) -> TraceSummary:
        """Measure busy, copy, compute and overlapped time from the records."""
        compute: list[tuple[int, int]] = []
        copies: list[tuple[int, int]] = []
        busy: dict[int, list[tuple[int, int]]] = {}
        first, last = None, None
        for r in self.records:
            if not r.start_ns:
                continue
            first = r.start_ns if first is None else min(first, r.start_ns)
            last = r.end_ns if last is None else max(last, r.end_ns)
            if r.engine < 0:
                continue
            k = r.kind_name
            if k == "block":
                compute.append((r.start_ns, r.end_ns))
            elif k in _COPY_KINDS:
                copies.append((r.start_ns, r.end_ns))
            else:
                continue
            busy.setdefault(r.engine, []).append((r.start_ns, r.end_ns))
        compute_ns, compute_u = _union_ns(compute)
        copy_ns, copy_u = _union_ns(copies)
        both_ns, _ = _union_ns(compute_u + copy_u)
        return TraceSummary(
            wall_ns=(last - first) if first is not None else 0,
            compute_ns=compute_ns,
            copy_ns=copy_ns,
            overlapped_ns=compute_ns + copy_ns - both_ns,
            engine_busy_ns={e: _union_ns(iv)[0] for e, iv in sorted(busy.items())},
        )

    def to_chrome(self) -> dict:
        """Return the trace in the Chrome trace event format (a JSON-ready dict).

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
        records = self.records
        origin = min((r.submit_ns or r.begin_ns for r in records), default=0)
        cores = self._cores()
        copy_engines = self.device.get("copy_engines")

        def us(ns: int) -> float:
            return round((ns - origin) / 1000.0, 3)

        tracks: dict[int, tuple[str, int]] = {}  # tid -> (name, sort index)

        def stream_track(sid: int) -> int:
            tid = STREAM_TID_BASE + sid
            if tid not in tracks:
                label = self.stream_names.get(sid)
                tracks[tid] = (f"stream {sid}" + (f" ({label})" if label else ""), sid)
            return tid

        def engine_track(engine: int) -> int:
            tid = ENGINE_TID_BASE + engine
            if tid not in tracks:
                if engine < cores:
                    label = f"core {engine}"
                else:
                    label = f"copy engine {engine - cores}"
                tracks[tid] = (label, ENGINE_TID_BASE + engine)
            return tid

        # Idle engines still get a lane when the device's shape is known.
        if isinstance(self.device.get("cores"), int):
            for e in range(cores):
                engine_track(e)
            if isinstance(copy_engines, int):
                for e in range(cores, cores + copy_engines):
                    engine_track(e)

        slices: list[tuple[float, int, dict]] = []
        by_event: dict[int, list[tuple[int, TraceRecord, dict]]] = {}
        waits: list[tuple[TraceRecord, dict]] = []
        stream_slices: dict[int, list[dict]] = {}

        for r in records:
            k = r.kind_name
            name = r.name or k
            ts = us(r.begin_ns)
            dur = round(r.duration_ns / 1000.0, 3)
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
            if k == "block":
                args["block"] = r.block
            if r.engine >= 0:
                args["engine"] = r.engine
            if k != "block":
                ev = {"name": name, "cat": k, "ph": "X", "ts": ts, "dur": dur,
                      "pid": _PID, "tid": stream_track(r.stream_id), "args": args}
                slices.append((ts, 0, ev))
                stream_slices.setdefault(ev["tid"], []).append(ev)
                if r.event_id and k == "record":
                    by_event.setdefault(r.event_id, []).append((r.submit_ns, r, ev))
                elif r.event_id and k == "wait":
                    waits.append((r, ev))
            if r.engine >= 0 and k != "launch":
                ev = {"name": name, "cat": k, "ph": "X", "ts": ts, "dur": dur,
                      "pid": _PID, "tid": engine_track(r.engine), "args": args}
                slices.append((ts, 0, ev))

        flows = 0
        by_end: dict[int, tuple[list[float], list[dict]]] = {}
        submits: dict[int, list[int]] = {}
        for eid, rec_list in by_event.items():
            rec_list.sort(key=lambda item: item[0])
            submits[eid] = [item[0] for item in rec_list]
        for w, wait_ev in waits:
            recorded = by_event.get(w.event_id)
            if not recorded:
                continue
            # The wait is for the event as recorded when the wait was submitted.
            i = bisect.bisect_right(submits[w.event_id], w.submit_ns) - 1
            if i < 0:
                continue
            _, src, src_ev = recorded[i]
            if src.stream_id == w.stream_id:
                continue
            tid = src_ev["tid"]
            if tid not in by_end:
                evs = sorted((e for e in stream_slices.get(tid, []) if e["cat"] != "record"),
                             key=lambda e: e["ts"] + e["dur"])
                by_end[tid] = ([e["ts"] + e["dur"] for e in evs], evs)
            points = _flow_points(src_ev, wait_ev, by_end[tid])
            if points is None:
                continue
            s_ev, s_ts, f_ts = points
            flows += 1
            common = {"name": f"event {w.event_id}", "cat": "event", "id": flows, "pid": _PID}
            slices.append((s_ts, 1, {**common, "ph": "s", "ts": s_ts, "tid": s_ev["tid"]}))
            slices.append((f_ts, 1, {**common, "ph": "f", "bp": "e", "ts": f_ts, "tid": wait_ev["tid"]}))

        slices.sort(key=lambda item: (item[0], item[1]))
        platform = self.device.get("platform", "sim")
        meta: list[dict] = [
            {"name": "process_name", "ph": "M", "pid": _PID, "tid": 0, "args": {"name": f"device ({platform})"}},
        ]
        for tid, (label, sort_index) in sorted(tracks.items()):
            meta.append({"name": "thread_name", "ph": "M", "pid": _PID, "tid": tid, "args": {"name": label}})
            meta.append({"name": "thread_sort_index", "ph": "M", "pid": _PID, "tid": tid,
                         "args": {"sort_index": sort_index}})
        return {
            "traceEvents": meta + [ev for _, _, ev in slices],
            "displayTimeUnit": "ns",
            "otherData": {
                "producer": "pypto_async",
                "origin_ns": origin,
                "dropped": self.dropped,
                "records": len(records),
                **{k: v for k, v in self.device.items() if isinstance(v, (int, str))},
            },
        }

    def save(self, path: str | os.PathLike) -> pathlib.Path:
        """Write :meth:`to_chrome` as JSON to ``path`` (atomically) and return the path.

        Parent directories are created.  Open the file in https://ui.perfetto.dev
        or render it with ``pypto-async trace PATH -o PATH.png``.
        """
        return write_json(path, self.to_chrome())


def _flow_points(src: dict, wait: dict, track: tuple[list[float], list[dict]]) -> tuple[dict, float, float] | None:
    """Return (source slice, "s" time, "f" time) for an arrow from a record to a wait.

    Perfetto binds a flow event to the slice enclosing its time on its track
    and needs the "s" no later than the "f".  The record's own time can come
    out a hair after the wait's end (the driver stamps the record after it
    wakes the waiter); then the arrow starts from the work the record covers,
    the slice before it on its stream.
    """
    w0, w1 = wait["ts"], wait["ts"] + wait["dur"]

    def fits(t: float) -> bool:
        return t < w1 if w1 > w0 else t <= w0

    s_ts = src["ts"]
    if not fits(s_ts):
        ends, evs = track  # the track's non-record slices, by end time
        i = bisect.bisect_right(ends, src["ts"]) - 1
        if i < 0:
            return None
        src = evs[i]
        s_ts = round(src["ts"] + src["dur"] / 2.0, 3)
        if not fits(s_ts):
            return None
    return src, s_ts, max(s_ts, w0)


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


class TraceCapture:
    """An open capture: the records finished while it is open.

    Made by :meth:`TraceRecorder.start`; :meth:`TraceRecorder.finish` closes it
    and returns the :class:`Trace`.
    """

    __slots__ = ("_records", "since_ns", "until_ns", "closed", "_dropped_before", "_dropped_after")

    def __init__(self, since_ns: int, dropped_before: int):
        self._records: list[TraceRecord] = []
        self.since_ns = since_ns
        self.until_ns: int | None = None
        self.closed = False
        self._dropped_before = dropped_before
        self._dropped_after = dropped_before


class TraceRecorder:
    """Move the driver's trace records of one device into the open captures.

    A worker owns one recorder.  The driver traces while at least one capture
    is open (or always, when the device was opened with ``trace=1``); every
    :meth:`poll` moves the driver's records into each open capture, so a
    worker-long capture and a ``w.trace()`` window can be open at once and
    both see the same records.  Poll often enough that the driver's buffer
    (``trace_capacity`` records) does not overflow; :attr:`Trace.dropped`
    reports it when it does.

    Parameters
    ----------
    dev : cdata ``pto_device *``
        The device; it must stay open until :meth:`close`.
    always_on : bool
        The device was opened with tracing on: leave it on when no capture is open.
    stream_names : callable, optional
        Returns ``{stream_id: label}`` for the streams to name in the trace.
    """

    def __init__(self, dev, *, always_on: bool = False, stream_names=None):
        self._dev = dev
        self._always_on = always_on
        self._stream_names = stream_names
        self._captures: list[TraceCapture] = []
        self._lock = threading.Lock()
        self._device = device_shape(dev)

    def start(self) -> TraceCapture:
        """Open a capture of the commands submitted from now on."""
        from .._driver import lib

        with self._lock:
            if self._dev is None:
                from ..errors import PtoClosedError

                raise PtoClosedError("cannot start a trace: the device is closed")
            if not self._captures:
                self._drain_locked()  # records from before the capture are not its business
                if not self._always_on:
                    lib.pto_trace_enable(self._dev, 1)
            cap = TraceCapture(int(lib.pto_now_ns()), int(lib.pto_trace_dropped(self._dev)))
            self._captures.append(cap)
            return cap

    def poll(self) -> int:
        """Move the driver's records into every open capture; return how many moved."""
        with self._lock:
            return self._drain_locked()

    def _drain_locked(self) -> int:
        records = read_records(self._dev)
        for cap in self._captures:
            cap._records.extend(records)
        return len(records)

    def finish(self, cap: TraceCapture) -> Trace:
        """Close ``cap`` and return its trace.

        Call it once the work submitted during the capture has completed (the
        records of unfinished commands are not there yet).  Records of
        commands submitted before the capture started are left out.
        """
        from .._driver import lib

        with self._lock:
            if cap.closed:
                raise ValueError("this trace capture is already finished")
            if self._dev is not None:
                self._drain_locked()
                cap._dropped_after = int(lib.pto_trace_dropped(self._dev))
                if len(self._captures) == 1 and not self._always_on:
                    lib.pto_trace_enable(self._dev, 0)
            cap.closed = True
            cap.until_ns = int(lib.pto_now_ns())
            self._captures.remove(cap)
            dropped = cap._dropped_after - cap._dropped_before
        names = dict(self._stream_names()) if self._stream_names is not None else {}
        records = tuple(r for r in cap._records if (r.submit_ns or r.begin_ns) >= cap.since_ns)
        return Trace(records, dropped=dropped, device=self._device, stream_names=names)

    def close(self) -> None:
        """Collect what the driver holds for the open captures and let go of the device.

        Call it before the device closes.  Open captures can still be
        finished afterwards, with the records collected up to now.
        Idempotent.
        """
        from .._driver import lib

        with self._lock:
            if self._dev is None:
                return
            self._drain_locked()
            dropped = int(lib.pto_trace_dropped(self._dev))
            for cap in self._captures:
                cap._dropped_after = dropped
            self._dev = None



class TraceWindow:
    """A trace of the work submitted inside a ``with`` / ``async with`` block.

    Made by :meth:`ChipWorker.trace`.  On entry, tracing starts; on exit, the
    window waits until the worker has nothing in flight (everything submitted
    in the block has completed), collects the driver's records, and writes the
    Chrome/Perfetto JSON to ``path`` when you gave one.  Under ``async with``
    that wait suspends; under plain ``with`` it blocks the thread, so use
    ``async with`` in async code.

    Attributes
    ----------
    path : pathlib.Path or None
        Where the JSON is written on exit.
    trace : Trace or None
        The captured trace, once the block has exited.
    stats_path : pathlib.Path or None
        Where the scope statistics went (``enable_scope_stats``), next to
        the trace: ``<path stem>.stats.json``.
    """

    __slots__ = ("_tracing", "_cap", "path", "trace", "stats_path")

    def __init__(self, tracing: "WorkerTracing", path):
        self._tracing = tracing
        self._cap: TraceCapture | None = None
        self.path = pathlib.Path(path) if path is not None else None
        self.trace: Trace | None = None
        self.stats_path: pathlib.Path | None = None

    def __enter__(self) -> "TraceWindow":
        if self._cap is not None:
            raise RuntimeError("a TraceWindow can be entered only once; call w.trace() again")
        self._tracing._worker._check_open()
        self._cap = self._tracing.recorder.start()
        return self

    def __exit__(self, *exc_info) -> None:
        worker = self._tracing._worker
        if worker._alive():
            worker._drive(worker._idle, None)
        self._finish()

    async def __aenter__(self) -> "TraceWindow":
        return self.__enter__()

    async def __aexit__(self, *exc_info) -> None:
        worker = self._tracing._worker
        if worker._alive():
            if worker._async and worker._pump.is_current():
                await worker._pump.wait_idle(None)
            else:
                worker._drive(worker._idle, None)
        self._finish()

    def _finish(self) -> None:
        tracing = self._tracing
        tracing.settle()
        self.trace = tracing.recorder.finish(self._cap)
        if self.path is not None:
            self.trace.save(self.path)
            self.stats_path = tracing.write_scope_stats(self.path)

    def __repr__(self) -> str:
        state = "open" if self.trace is None else f"{len(self.trace)} records"
        return f"<TraceWindow {state} -> {self.path}>"


class WorkerTracing:
    """A worker's swimlane and scope-statistics outputs (``enable_chip_swimlane``, ``enable_scope_stats``).

    The worker makes one when it opens.  With ``enable_chip_swimlane`` it
    captures the worker's whole life and writes it when the worker closes, to
    :attr:`life_path`: ``pto_swimlane_<pid>_<n>.json`` in
    ``RunConfig.save_kernels_dir`` when that is set, else in the current
    directory.  With ``enable_scope_stats`` the per-stream and per-engine
    statistics go next to each trace written (``<trace stem>.stats.json``),
    or, with no swimlane, to ``pto_scope_stats_<pid>_<n>.json`` there.

    The driver keeps the newest ``trace_capacity`` records (65536 by default)
    between collections; a window collects on exit, the worker-long trace
    when the worker closes.  Records pushed out before that are counted in
    the trace's ``dropped`` (``otherData.dropped`` in the JSON).
    """

    _serial = 0
    _serial_lock = threading.Lock()

    def __init__(self, worker):
        cfg = worker._config
        self._worker = worker
        self._swimlane = bool(cfg.enable_chip_swimlane)
        self._scope_stats = bool(cfg.enable_scope_stats)
        self.recorder = TraceRecorder(worker._dev, always_on=self._swimlane, stream_names=self._names)
        with WorkerTracing._serial_lock:
            WorkerTracing._serial += 1
            serial = WorkerTracing._serial
        base = pathlib.Path(cfg.save_kernels_dir) if cfg.save_kernels_dir else pathlib.Path.cwd()
        self.life_path: pathlib.Path | None = (
            base / f"pto_swimlane_{os.getpid()}_{serial}.json" if self._swimlane else None)
        self.life_stats_path: pathlib.Path | None = None
        if self._scope_stats:
            self.life_stats_path = (_stats_path_for(self.life_path) if self.life_path is not None
                                    else base / f"pto_scope_stats_{os.getpid()}_{serial}.json")
        self._life = self.recorder.start() if self._swimlane else None
        self._closed = False

    def _names(self) -> dict[int, str]:
        default = getattr(self._worker, "_default_stream", None)
        return {default.id: "default"} if default is not None else {}

    def window(self, path=None) -> TraceWindow:
        """Return a :class:`TraceWindow` writing to `path` (None: keep it in memory)."""
        return TraceWindow(self, path)

    def settle(self) -> None:
        """Make sure the trace records of completed commands are in the driver's buffer.

        The driver pushes a command's completion record a moment before its
        trace record; once the worker saw every completion, a device-wide
        synchronize (immediate: nothing is left to run) orders the two.
        """
        dev = self._worker._dev
        if dev is not None:
            from .._driver import lib

            lib.pto_device_synchronize(dev, 1_000_000)

    def write_scope_stats(self, trace_path) -> pathlib.Path | None:
        """Write the scope statistics next to `trace_path` if enabled; return where."""
        if not self._scope_stats or not self._worker._alive():
            return None
        from ._stats import scope_stats

        return write_json(_stats_path_for(pathlib.Path(trace_path)), scope_stats(self._worker.stats()))

    def close(self) -> None:
        """Write the worker-long outputs, then let go of the device.  Idempotent.

        The worker calls it once its queued work has finished and before its
        device closes.
        """
        if self._closed:
            return
        self._closed = True
        try:
            if self._worker._alive():
                self.settle()
                if self.life_stats_path is not None:
                    from ._stats import scope_stats

                    _write_or_warn(self.life_stats_path, scope_stats(self._worker.stats()))
            if self._life is not None:
                trace = self.recorder.finish(self._life)
                self._life = None
                _write_or_warn(self.life_path, trace.to_chrome())
        finally:
            self.recorder.close()


def _write_or_warn(path: pathlib.Path, doc: dict) -> None:
    # Closing a worker must not fail because a diagnostic file cannot be written.
    try:
        write_json(path, doc)
    except OSError as exc:
        import warnings

        warnings.warn(f"pypto_async: could not write {path}: {exc}", RuntimeWarning, stacklevel=4)


def _stats_path_for(trace_path: pathlib.Path) -> pathlib.Path:
    return trace_path.with_name(trace_path.stem + ".stats.json")
