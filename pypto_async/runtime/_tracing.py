"""A worker's tracing: its ``w.trace()`` windows and the files it writes.

The worker's file policy lives here: where the worker-long swimlane goes
(``pto_swimlane_<pid>_<n>.json``), where scope statistics go (next to each
trace, or ``pto_scope_stats_<pid>_<n>.json``), and that closing a worker
warns rather than fails when a file cannot be written.
"""

from __future__ import annotations

import os
import pathlib
import threading

from .._driver import lib
from ._chrome import write_json
from ._recorder import TraceWindowRecords, TraceRecorder
from ._stats import scope_stats
from ._swimlane_records import write_last_runs
from ._trace import Trace
from ._wait import drive

__all__ = ["TraceWindow", "WorkerTracing"]


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
        The recorded trace, once the block has exited.
    stats_path : pathlib.Path or None
        Where the scope statistics went (``enable_scope_stats``), next to
        the trace: ``<path stem>.stats.json``.
    """

    __slots__ = ("_tracing", "_cap", "path", "trace", "stats_path")

    def __init__(self, tracing: "WorkerTracing", path):
        self._tracing = tracing
        self._cap: TraceWindowRecords | None = None
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
            drive(worker._queue, worker._queue.idle, None)
        self._finish()

    async def __aenter__(self) -> "TraceWindow":
        return self.__enter__()

    async def __aexit__(self, *exc_info) -> None:
        worker = self._tracing._worker
        if worker._alive():
            if worker._async and worker._pump.is_current():
                await worker._pump.wait_idle(None)
            else:
                drive(worker._queue, worker._queue.idle, None)
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
    records the worker's whole life and writes it when the worker closes, to
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
        self.recorder = TraceRecorder(worker._dev, always_on=self._swimlane, stream_names=self._names,
                                      inferred=self._inferred, on_tags=self._tags_changed)
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

    def _tags_changed(self) -> None:
        """The recorder began or stopped tagging graph replays: the fused launch path closes or opens."""
        hz = self._worker._hazards
        if hz is not None:
            hz.tags_changed()

    def _inferred(self):
        hz = getattr(self._worker, "_hazards", None)
        return hz.inferred_tokens if hz is not None else ()

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
            lib.pto_device_synchronize(dev, 1_000_000)

    def write_scope_stats(self, trace_path) -> pathlib.Path | None:
        """Write the scope statistics next to `trace_path` if enabled; return where."""
        if not self._scope_stats or not self._worker._alive():
            return None
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
                    _write_or_warn(self.life_stats_path, scope_stats(self._worker.stats()))
            if self._life is not None:
                trace = self.recorder.finish(self._life)
                self._life = None
                _write_or_warn(self.life_path, trace.to_chrome())
                _records_or_warn(self._worker, trace)
        finally:
            self.recorder.close()


def _write_or_warn(path: pathlib.Path, doc: dict) -> None:
    # Closing a worker must not fail because a diagnostic file cannot be written.
    try:
        write_json(path, doc)
    except OSError as exc:
        import warnings

        warnings.warn(f"pypto_async: could not write {path}: {exc}", RuntimeWarning, stacklevel=4)


def _records_or_warn(worker, trace) -> None:
    # Each program's last run as PyPTO's l2_swimlane_records.json, beside its deps.json.
    try:
        write_last_runs(worker, trace)
    except OSError as exc:
        import warnings

        warnings.warn(f"pypto_async: could not write the swimlane records: {exc}", RuntimeWarning, stacklevel=4)


def _stats_path_for(trace_path: pathlib.Path) -> pathlib.Path:
    return trace_path.with_name(trace_path.stem + ".stats.json")
