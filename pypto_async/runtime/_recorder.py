"""Recorder: move the driver's trace records of one device into open trace windows.

:func:`read_records` drains the driver's buffer, :func:`device_shape` reads
the device's shape for the trace's lanes, and a :class:`TraceRecorder` hands
every record it drains to each open :class:`TraceWindowRecords`, so that windows
that overlap in time (a worker-long one and a ``w.trace()`` window) see the
same records.  What a window becomes is a :class:`~._trace.Trace`.
"""

from __future__ import annotations

import threading

from .._driver import check, ffi, lib
from ..errors import PtoClosedError
from ._trace import Trace, TraceRecord

__all__ = ["read_records", "device_shape", "TraceWindowRecords", "TraceRecorder"]

_READ_BATCH = 4096
_KEEP_TAGS = 65536  # graph replays remembered for naming their records (the driver keeps 65536 records)


def read_records(dev) -> list[TraceRecord]:
    """Drain every trace record the driver holds for ``dev``, oldest first.

    The records are moved out of the driver: a second call returns only what
    finished in between.

    Parameters
    ----------
    dev : cdata ``pto_device *``
        An open device.
    """
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
    info = ffi.new("pto_device_info *")
    check(lib.pto_device_get_info(dev, info), "pto_device_get_info")
    shape = {
        "platform": ffi.string(info.platform).decode("ascii", "replace"),
        "cores": int(info.cores),
        "copy_engines": int(info.copy_engines),
        "aicpu_thread_num": int(info.aicpu_thread_num),
        "ring_task_window": int(info.ring_task_window),
        "ring_heap": int(info.ring_heap),
        "ring_dep_pool": int(info.ring_dep_pool),
        "device_memory": int(info.device_memory),
        "timing": "host",
    }
    if info.timing_model:
        # Device lanes are the modeled engines; the host threads' stay in host_cores / host_copy_engines.
        shape.update(timing="model", cores=int(info.model_cores), copy_engines=int(info.model_copy_engines),
                     aic_cores=int(info.model_aic), host_cores=int(info.cores),
                     host_copy_engines=int(info.copy_engines))
    return shape


def _tag_graphs(records: list, tags: list) -> tuple[list, list]:
    """Name the graph on the records of replayed commands (their tokens lie in a replay's range).

    Returns the records and the tokens of those that are waits the
    graph capture inferred (a tag's fourth item: their offsets from its first token).
    """
    import bisect
    import dataclasses

    firsts = [t[0] for t in tags]
    out = []
    inferred = []
    for r in records:
        i = bisect.bisect_right(firsts, r.token) - 1
        if i >= 0 and r.token <= tags[i][1]:
            first, _, name, edges = tags[i]
            r = dataclasses.replace(r, graph=name)
            if edges and r.token - first in edges and r.kind_name == "wait":
                inferred.append(r.token)
        out.append(r)
    return out, inferred


class TraceWindowRecords:
    """An open trace window: the records finished while it is open.

    Made by :meth:`TraceRecorder.start`; :meth:`TraceRecorder.finish` closes it
    and returns the :class:`Trace`.
    """

    __slots__ = ("_records", "_inferred", "since_ns", "until_ns", "closed", "_dropped_before", "_dropped_after")

    def __init__(self, since_ns: int, dropped_before: int):
        self._records: list[TraceRecord] = []
        self._inferred: set[int] = set()  # tokens of replayed waits a graph capture inferred
        self.since_ns = since_ns
        self.until_ns: int | None = None
        self.closed = False
        self._dropped_before = dropped_before
        self._dropped_after = dropped_before


class TraceRecorder:
    """Move the driver's trace records of one device into the open trace windows.

    A worker owns one recorder.  The driver traces while at least one trace window
    is open (or always, when the device was opened with ``trace=1``); every
    :meth:`poll` moves the driver's records into each open trace window, so a
    worker-long window and a ``w.trace()`` window can be open at once and
    both see the same records.  Poll often enough that the driver's buffer
    (``trace_capacity`` records) does not overflow; :attr:`Trace.dropped`
    reports it when it does.

    Parameters
    ----------
    dev : cdata ``pto_device *``
        The device; it must stay open until :meth:`close`.
    always_on : bool
        The device was opened with tracing on: leave it on when no trace window is open.
    stream_names : callable, optional
        Returns ``{stream_id: label}`` for the streams to name in the trace.
    inferred : callable, optional
        Returns the tokens of the waits the runtime inferred (a container).
    on_tags : callable, optional
        Called after :attr:`graph_tags` was set or cleared (the launch path
        queues launches whose inferred waits a trace would not mark while it
        is None only).
    """

    def __init__(self, dev, *, always_on: bool = False, stream_names=None, inferred=None, on_tags=None):
        self._dev = dev
        self._always_on = always_on
        self._stream_names = stream_names
        self._inferred = inferred
        self._on_tags = on_tags
        self._windows: list[TraceWindowRecords] = []
        self._lock = threading.Lock()
        self._device = device_shape(dev)
        #: While tracing: ``(first token, last token, graph name, offsets of its inferred waits)`` of
        #: each graph replay, in token order (``Graph.replay`` appends), so records of replayed
        #: commands name their graph, and the waits its graph capture inferred are marked as such.
        self.graph_tags: list | None = [] if always_on else None

    def start(self) -> TraceWindowRecords:
        """Open a trace window on the commands submitted from now on."""
        with self._lock:
            if self._dev is None:
                raise PtoClosedError("cannot start a trace: the device is closed")
            if not self._windows:
                self._drain_locked()  # records from before the window are not its business
                if not self._always_on:
                    lib.pto_trace_enable(self._dev, 1)
                    self.graph_tags = []
                    if self._on_tags is not None:
                        self._on_tags()
            win = TraceWindowRecords(int(lib.pto_now_ns()), int(lib.pto_trace_dropped(self._dev)))
            self._windows.append(win)
            return win

    def poll(self) -> int:
        """Move the driver's records into every open trace window; return how many moved."""
        with self._lock:
            return self._drain_locked()

    def _drain_locked(self) -> int:
        records = read_records(self._dev)
        tags = self.graph_tags
        inferred = None
        if tags:
            records, inferred = _tag_graphs(records, tags)
            if len(tags) > _KEEP_TAGS:  # a worker-long trace: what is this old was read or dropped
                del tags[:len(tags) - _KEEP_TAGS]
        for win in self._windows:
            win._records.extend(records)
            if inferred:
                win._inferred.update(inferred)
        return len(records)

    def finish(self, win: TraceWindowRecords) -> Trace:
        """Close ``win`` and return its trace.

        Call it once the work submitted during the window has completed (the
        records of unfinished commands are not there yet).  Records of
        commands submitted before the window started are left out.
        """
        with self._lock:
            if win.closed:
                raise ValueError("this trace window is already finished")
            if self._dev is not None:
                self._drain_locked()
                win._dropped_after = int(lib.pto_trace_dropped(self._dev))
                if len(self._windows) == 1 and not self._always_on:
                    lib.pto_trace_enable(self._dev, 0)
                    self.graph_tags = None
                    if self._on_tags is not None:
                        self._on_tags()
            win.closed = True
            win.until_ns = int(lib.pto_now_ns())
            self._windows.remove(win)
            dropped = win._dropped_after - win._dropped_before
        names = dict(self._stream_names()) if self._stream_names is not None else {}
        records = tuple(r for r in win._records if (r.submit_ns or r.begin_ns) >= win.since_ns)
        kept = self._inferred() if self._inferred is not None else ()
        edges = win._inferred
        inferred = frozenset(r.token for r in records
                             if r.kind_name == "wait" and (r.token in kept or r.token in edges))
        return Trace(records, dropped=dropped, device=self._device, stream_names=names,
                     inferred_waits=inferred)

    def close(self) -> None:
        """Collect what the driver holds for the open trace windows and let go of the device.

        Call it before the device closes.  Open windows can still be
        finished afterwards, with the records collected up to now.
        Idempotent.
        """
        with self._lock:
            if self._dev is None:
                return
            self._drain_locked()
            dropped = int(lib.pto_trace_dropped(self._dev))
            for win in self._windows:
                win._dropped_after = dropped
            self._dev = None
