"""Statistics: the worker's counters, per engine and per stream, and the back-pressure clock.

:meth:`ChipWorker.stats` returns a :class:`WorkerStats`, assembled here
(:func:`worker_stats`) from the driver's device and memory counters, the
command queue's own (completions, wake-ups, commands that waited), per engine
(``pto_engine_get_stats``: busy time, commands, bytes) and per stream
(``pto_stream_get_stats``: ring occupancy high-water marks, refusals), and
from how long streams waited for room in their rings (back-pressure).

Back-pressure time is measured per stream as the time it held commands that
did not fit the ring (in the driver's backlog, or in its FIFO on the host):
from the moment the first command had to wait until the pump found none
waiting any more.  :class:`BacklogClock` is the
worker's set of such streams (it replaces a plain ``dict``) and keeps that
clock as streams enter and leave it, so measuring costs nothing while rings
have room.

With ``RunConfig(enable_scope_stats=True)``, :func:`scope_stats` is written as
JSON next to the swimlane trace (``<trace>.stats.json``) when the worker
closes, or alone when no trace is captured.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

from .._driver import check, ffi, lib

__all__ = [
    "WorkerStats",
    "worker_stats",
    "EngineStats",
    "StreamStats",
    "BacklogClock",
    "engine_stats",
    "stream_stats",
    "scope_stats",
]


@dataclass(frozen=True)
class EngineStats:
    """What one engine of the device did, from ``pto_engine_get_stats``.

    Attributes
    ----------
    engine : int
        Its id: cores first (``0 .. cores-1``), then copy engines.  With
        ``RunConfig(timing="model")`` (the default) these are the modeled
        device's engines (the profile's AIC cores, then its AIV cores, then
        its copy engines), else the host threads.
    kind : str
        ``"core"`` or ``"copy"``.
    busy_ns : int
        Time it spent running blocks (a core) or copies (a copy engine), in
        device time (modeled, or the host's with ``timing="host"``).
    commands : int
        Blocks (cores) or copies (copy engines) it ran.
    bytes : int
        Bytes it moved (copy engines; 0 for cores).
    """

    engine: int
    kind: str
    busy_ns: int
    commands: int
    bytes: int


@dataclass(frozen=True)
class StreamStats:
    """Ring occupancy and back-pressure of one stream.

    Attributes
    ----------
    stream : int
        The stream's id (as in traces and completion records).
    window, window_hwm : int
        Ring slots (``ring_task_window``), and the most ever in flight at once.
    heap_bytes, heap_hwm : int
        Argument heap bytes (``ring_heap``), and the most ever in use.
    dep_entries, dep_hwm : int
        Event-wait entries (``ring_dep_pool``), and the most ever in use.
    in_flight : int
        Commands in the ring now, not yet completed.
    backlog : int
        Commands queued on the stream that wait for room in the ring now (in
        the driver's backlog, or in the stream's FIFO behind a host condition).
    submitted, completed : int
        Commands the stream accepted, and completed.
    refused : int
        Submissions the ring had no room for (each one sent a command into
        the stream's backlog).
    backpressure_wait_ns : int
        Time the stream held commands waiting for room.
    """

    stream: int
    window: int
    window_hwm: int
    heap_bytes: int
    heap_hwm: int
    dep_entries: int
    dep_hwm: int
    in_flight: int
    backlog: int
    submitted: int
    completed: int
    refused: int
    backpressure_wait_ns: int


@dataclass(frozen=True)
class WorkerStats:
    """Counters of a worker, from :meth:`ChipWorker.stats`.

    Attributes
    ----------
    launches, copies : int
        Kernel launches and copies the device ran (driver counters).
    bytes_h2d, bytes_d2h, bytes_d2d : int
        Bytes copied per direction.
    bytes_peer : int
        Bytes moved by peer copies (``w.copy`` between two workers'
        DeviceTensors, the collectives of a DistributedWorker, the cross-rank
        operations of a multi-chip program) that ran on this device's copy
        engines: a peer copy counts on the device whose stream queued it,
        whichever way it moves the bytes.
    commands_submitted, commands_completed : int
        Commands accepted by the device and finished.
    completions : int
        Completion records the pump drained.
    wakeups : int
        Drains that found records (one per pump wake-up with work).
    backpressure_waits : int
        Commands that had to wait for room in their stream's ring (in the
        driver's backlog, or in the stream's FIFO behind a host condition).
    in_flight : int
        Commands queued whose record has not arrived yet.
    streams : int
        Open streams, the default one included.
    memory_in_use, memory_reserved, memory_peak, memory_capacity : int
        Device memory bytes: in live allocations; plus frees still queued;
        the high-water mark of reserved; the arena size.
    memory_allocations : int
        Live device allocations.
    engines : tuple of EngineStats
        Per engine (cores first, then copy engines): busy time, commands, bytes.
    stream_stats : tuple of StreamStats
        Per open stream: ring occupancy high-water marks (task window, heap,
        dep pool), backlog, and time spent waiting for room in the ring.
    backpressure_wait_ns : int
        Time streams spent with commands waiting for room, summed over streams.
    memory_waits : int
        Launches that waited for device memory for their host arrays'
        temporaries (memory back-pressure).
    inferred_waits, skipped_waits : int
        Waits the runtime inserted to order DeviceTensors across streams
        (``auto_deps``), and ones it left out because earlier waits (or the
        earlier access's completion) already imply them.
    races : int
        Races the sanitizer reported (``sanitize="warn"`` or ``"raise"``).
    inline_runs : int
        Commands (and program tasks) a host thread ran itself instead of
        waking a device thread (``RunConfig.host_first``): short work on a
        host with no CPU to spare.
    engine_wakes, engine_helps : int
        Sleeping engines (cores, copy engines) signalled for queued work, and
        runs a device thread already awake ran in a sleeping engine's stead
        (no wake-up).
    idle_spins, idle_sleeps : int
        Device threads that, about to sleep with nothing to do, spun for up
        to ``RunConfig.spin_us`` first; and ones that slept at once because
        no CPU was spare for the host (``host_first="always"`` never spins).
        Together with ``inline_runs``
        they say how a worker traded idle CPU for latency.
    """

    launches: int
    copies: int
    bytes_h2d: int
    bytes_d2h: int
    bytes_d2d: int
    commands_submitted: int
    commands_completed: int
    completions: int
    wakeups: int
    backpressure_waits: int
    in_flight: int
    streams: int
    memory_in_use: int
    memory_reserved: int
    memory_peak: int
    memory_capacity: int
    memory_allocations: int
    engines: tuple[EngineStats, ...] = ()
    stream_stats: tuple[StreamStats, ...] = ()
    backpressure_wait_ns: int = 0
    memory_waits: int = 0
    inferred_waits: int = 0
    skipped_waits: int = 0
    races: int = 0
    bytes_peer: int = 0
    inline_runs: int = 0
    engine_wakes: int = 0
    engine_helps: int = 0
    idle_spins: int = 0
    idle_sleeps: int = 0

    @property
    def completions_per_wakeup(self) -> float:
        """Average records handled per pump wake-up (batching at work)."""
        return self.completions / self.wakeups if self.wakeups else 0.0


class BacklogClock(dict):
    """The streams whose FIFO holds commands, with how long each has waited.

    A ``dict`` used as an ordered set (``backlog[stream] = None`` when a
    command goes into a stream's FIFO, ``del backlog[stream]`` when the FIFO
    is empty again), which also accumulates, per stream id, the nanoseconds
    between the two: the stream's back-pressure wait.
    """

    __slots__ = ("_since", "_waited")

    def __init__(self):
        super().__init__()
        self._since: dict[int, int] = {}
        self._waited: dict[int, int] = {}

    def __setitem__(self, stream, value) -> None:
        if stream not in self:
            self._since[stream.id] = time.monotonic_ns()
        super().__setitem__(stream, value)

    def __delitem__(self, stream) -> None:
        super().__delitem__(stream)
        self._stop(stream.id)

    def clear(self) -> None:
        for stream in list(self):
            self._stop(stream.id)
        super().clear()

    def _stop(self, sid: int) -> None:
        since = self._since.pop(sid, None)
        if since is not None:
            self._waited[sid] = self._waited.get(sid, 0) + time.monotonic_ns() - since

    def waited_ns(self, sid: int) -> int:
        """Back-pressure wait of stream `sid` so far (a wait in progress counts up to now)."""
        total = self._waited.get(sid, 0)
        since = self._since.get(sid)
        if since is not None:
            total += time.monotonic_ns() - since
        return total

    def total_ns(self) -> int:
        """Back-pressure wait summed over every stream, ever."""
        return sum(self.waited_ns(sid) for sid in {*self._waited, *self._since})


def engine_stats(dev, engines: int, cores: int) -> tuple[EngineStats, ...]:
    """Read ``pto_engine_get_stats`` for engines ``0 .. engines-1`` of an open device."""
    out = []
    st = ffi.new("pto_engine_stats *")
    for e in range(engines):
        check(lib.pto_engine_get_stats(dev, e, st), "pto_engine_get_stats")
        out.append(EngineStats(int(st.engine), "copy" if st.is_copy else "core",
                               int(st.busy_ns), int(st.commands), int(st.bytes)))
    if any((s.kind == "core") != (s.engine < cores) for s in out):
        raise AssertionError("pto_engine_get_stats: engine kinds out of step with the device's shape")
    return tuple(out)


def _engines(worker) -> tuple[EngineStats, ...]:
    # Device time: with timing="model" the driver reports its modeled engines (AIC, AIV, copy).
    info = worker._info
    if info.timing_model:
        return engine_stats(worker._dev, info.model_cores + info.model_copy_engines, info.model_cores)
    return engine_stats(worker._dev, info.engines, info.cores)


def stream_stats(streams, backlog: BacklogClock | None = None) -> tuple[StreamStats, ...]:
    """Read ``pto_stream_get_stats`` for each open runtime stream, by id.

    Parameters
    ----------
    streams : iterable of Stream
        Open streams (closed ones are skipped: their ring may be gone).
    backlog : BacklogClock, optional
        The worker's backlog, for the back-pressure wait times.
    """
    st = ffi.new("pto_stream_stats *")
    out = []
    for s in sorted(streams, key=lambda s: s.id):
        if s._closed:
            continue
        check(lib.pto_stream_get_stats(s._ptr, st), "pto_stream_get_stats")
        out.append(StreamStats(
            stream=int(st.id), window=int(st.window), window_hwm=int(st.window_hwm),
            heap_bytes=int(st.heap_bytes), heap_hwm=int(st.heap_hwm),
            dep_entries=int(st.dep_entries), dep_hwm=int(st.dep_hwm),
            in_flight=int(st.in_flight), backlog=int(st.overflow) + len(s._fifo),
            submitted=int(st.submitted), completed=int(st.completed), refused=int(st.refused),
            backpressure_wait_ns=backlog.waited_ns(s.id) if backlog is not None else 0,
        ))
    return tuple(out)


def scope_stats(stats) -> dict:
    """Return the JSON document ``enable_scope_stats`` writes, from a :class:`WorkerStats`."""
    doc = {
        "producer": "pypto_async",
        "streams": [asdict(s) for s in getattr(stats, "stream_stats", ())],
        "engines": [asdict(e) for e in getattr(stats, "engines", ())],
    }
    for name in ("launches", "copies", "bytes_h2d", "bytes_d2h", "bytes_d2d", "bytes_peer", "completions", "wakeups",
                 "backpressure_waits", "backpressure_wait_ns", "memory_in_use", "memory_reserved",
                 "memory_peak", "memory_capacity"):
        if hasattr(stats, name):
            doc[name] = getattr(stats, name)
    return doc


def worker_stats(worker) -> WorkerStats:
    """Assemble :meth:`ChipWorker.stats`: the driver's counters, the queue's, per engine and stream."""
    q = worker._queue
    hz = worker._hazards
    dev_stats = ffi.new("pto_device_stats *")
    mem = ffi.new("pto_mem_stats *")
    check(lib.pto_device_get_stats(worker._dev, dev_stats), "pto_device_get_stats")
    check(lib.pto_mem_get_stats(worker._dev, mem), "pto_mem_get_stats")
    return WorkerStats(
        launches=dev_stats.launches,
        copies=dev_stats.copies,
        bytes_h2d=dev_stats.bytes_h2d,
        bytes_d2h=dev_stats.bytes_d2h,
        bytes_d2d=dev_stats.bytes_d2d,
        bytes_peer=dev_stats.bytes_peer,
        commands_submitted=dev_stats.commands_submitted,
        commands_completed=dev_stats.commands_completed,
        completions=q.completions,
        wakeups=q.wakeups,
        backpressure_waits=q.fifo_waits,
        in_flight=len(q.pending),
        streams=sum(1 for s in worker._streams.values() if not s._closed),
        memory_in_use=mem.in_use,
        memory_reserved=mem.reserved,
        memory_peak=mem.peak,
        memory_capacity=mem.capacity,
        memory_allocations=mem.allocations,
        engines=_engines(worker),
        stream_stats=stream_stats(worker._streams.values(), q.backlog),
        backpressure_wait_ns=q.backlog.total_ns(),
        memory_waits=worker._memory.memory_waits,
        inferred_waits=hz.inferred if hz is not None else 0,
        skipped_waits=hz.skipped if hz is not None else 0,
        races=hz.races if hz is not None else 0,
        inline_runs=dev_stats.inline_runs,
        engine_wakes=dev_stats.engine_wakes,
        engine_helps=dev_stats.engine_helps,
        idle_spins=dev_stats.idle_spins,
        idle_sleeps=dev_stats.idle_no_spin,
    )
