"""ChipWorker: one open device, its streams, registrations, tensors and token map.

How work flows (the timeline of one launch):

1. A call validates its arguments (nothing is queued on error), takes
   temporaries for host arrays, and builds its command group: H2D copies for
   ``In``/``InOut`` host arrays, the kernel launch, D2H copies for
   ``Out``/``InOut``, stream-ordered frees of the temporaries.
2. Every command gets its own completion token from the worker's counter, and
   the token map (``_pending``) points each token at the group's
   :class:`Launch`.  Every command carries one because the driver treats a
   failing token-less command as observed at once, which would let the rest
   of the group run on bad data.
3. Commands go straight into the stream's ring while it has room and the
   stream's FIFO is empty; otherwise they wait in that FIFO, in order.
4. The completion pump drains records in batches (256 per driver call),
   resolves owners, then flushes FIFOs into the rings as room frees up.
5. A Launch resolves when its last record arrived; its error is the first
   failure among its records.

A failure record for a stream whose FIFO still holds work "poisons" the data
commands (copies, launches) waiting there: once the driver has reported the
failure it heals the stream for later submissions, but those commands were
queued before the failure was observed, so they fail with a dependency error
here, as they would have in the ring.  Frees, records and waits still go in.

Threading: a worker belongs to the thread (and event loop) that opened it.
In sync mode several threads may share it (the process-wide default worker):
one lock guards the token map, the FIFOs and the driver queue, and blocking
waits never hold it.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import warnings
import weakref
from collections import deque
from dataclasses import dataclass

import numpy as np

from .._driver import (
    PTO_EAGAIN,
    PTO_ECANCELED,
    PTO_EDEP,
    check,
    device_config,
    error_for_status,
    ffi,
    lib,
)
from .._dtypes import as_dtype
from ..errors import (
    PtoArgumentError,
    PtoCanceledError,
    PtoClosedError,
    PtoDependencyError,
    PtoError,
    PtoForeignTensorError,
    PtoInvalidStateError,
    PtoPlatformMismatch,
    PtoTensorFreedError,
    PtoTimeout,
)
from . import _context
from ._args import _is_torch_tensor, check_init, host_array
from ._config import as_run_config, normalize_platform
from ._event import Event
from ._kernel import KernelHandle
from ._launch import Launch, _new_launch
from ._pump import SyncPump, make_pump
from ._stream import Stream
from ._stats import BacklogClock, EngineStats, StreamStats, engine_stats, stream_stats
from ._tensor import DeviceTensor
from ._trace import TraceWindow, WorkerTracing

__all__ = ["ChipWorker", "WorkerStats"]

_OPEN, _CLOSED, _FORKED = 0, 1, 2
_F_LAST = 1  # the last command of its owner's group: entering the ring completes submission
_F_DATA = 2  # a copy or launch: skipped (fails) if queued behind an observed failure
_F_RECORD = 4  # an event record: made to fail on the device if queued behind an observed failure
_EAGAIN = -PTO_EAGAIN
_ECANCELED = -PTO_ECANCELED
_EDEP = -PTO_EDEP
_BATCH = 256
_MAX_BATCHES = 16  # per pump wake-up: 4096 records, then the event loop gets a turn
_SLICE_US = 50_000  # blocking waits wake this often, so Ctrl-C stays prompt
_KEEP_FAILURES = 256  # first failures remembered for cause_token look-ups

_live_workers: weakref.WeakSet = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for worker in list(_live_workers):
        if worker._state == _OPEN:
            worker._state = _FORKED


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


@dataclass(frozen=True)
class WorkerStats:
    """Counters of a worker, from :meth:`ChipWorker.stats`.

    Attributes
    ----------
    launches, copies : int
        Kernel launches and copies the device ran (driver counters).
    bytes_h2d, bytes_d2h, bytes_d2d : int
        Bytes copied per direction.
    commands_submitted, commands_completed : int
        Commands accepted by the device and finished.
    completions : int
        Completion records the pump drained.
    wakeups : int
        Drains that found records (one per pump wake-up with work).
    backpressure_waits : int
        Commands that waited in a stream FIFO because the ring was full.
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

    @property
    def completions_per_wakeup(self) -> float:
        """Average records handled per pump wake-up (batching at work)."""
        return self.completions / self.wakeups if self.wakeups else 0.0


class ChipWorker:
    """An open device: where compiled programs are registered and launched.

    ``ChipWorker(config)`` opens the device.  How you then use it sets its
    mode:

    * **sync mode** — under ``with`` (or with no context manager at all, then
      :meth:`close` it): a launch call returns once the launch completed, as
      in the seed.
    * **async mode** — under ``async with`` (or after ``await worker.open()``
      for a long-lived worker): a launch call returns a :class:`Launch` at
      once and you ``await`` it.  Works under asyncio, uvloop and trio; the
      worker's completion pump runs in that event loop.

    Inside ``with`` / ``async with``, ``compiled(*args)`` and ``@pl.jit``
    kernels dispatch on this worker.

    Parameters
    ----------
    config : RunConfig or dict, optional
        Device settings (``None``: the defaults).

    Raises
    ------
    PtoArgumentError
        For a bad config.
    PtoNotSupported
        For an unknown platform.
    PtoOutOfMemory
        If the device memory cannot be mapped.
    """

    def __init__(self, config=None):
        self._state = _CLOSED
        cfg = as_run_config(config)
        self._config = cfg
        self._platform = cfg.device_platform
        out = ffi.new("pto_device **")
        check(lib.pto_device_open(self._platform.encode(), device_config(**cfg._device_fields()), out),
              f"opening a {cfg.platform!r} device")
        self._dev = out[0]
        info = ffi.new("pto_device_info *")
        check(lib.pto_device_get_info(self._dev, info), "pto_device_get_info")
        self._info = info
        self._lock = threading.Lock()
        self._pending: dict[int, object] = {}
        self._next_token = 1
        self._cq = ffi.new("pto_completion[]", _BATCH)
        self._devptr_out = ffi.new("pto_devptr *")
        # Weak: a stream nobody references (no tensor, launch, event or FIFO entry) is
        # destroyed by its finalizer; the backlog holds streams with queued commands.
        self._streams: weakref.WeakValueDictionary[int, Stream] = weakref.WeakValueDictionary()
        self._backlog: dict[Stream, None] = BacklogClock()  # also times back-pressure waits
        self._failures: dict[int, PtoError] = {}
        self._deferred: deque = deque()
        self._deferred_scheduled = False
        self._tensors: weakref.WeakSet = weakref.WeakSet()
        self._handles: dict[int, tuple] = {}
        self._kernels: dict[tuple[str, str], object] = {}
        self._idle_waiters: list = []
        self._pump = SyncPump(self)
        self._async = False
        self._pid = os.getpid()
        self._ctx_tokens: list = []
        self._completions = 0
        self._wakeups = 0
        self._fifo_waits = 0
        self._refill = max(1, info.ring_task_window // 4)
        self._state = _OPEN
        try:
            self._default_stream = self._new_stream(0, True)
            self._tracing = WorkerTracing(self)  # swimlane and scope-stats outputs
        except BaseException:
            self._state = _CLOSED
            lib.pto_device_close(self._dev)
            raise
        _live_workers.add(self)

    # -- state --------------------------------------------------------------------------

    def _check_open(self) -> None:
        state = self._state
        if state == _OPEN:
            return
        if state == _FORKED:
            raise PtoInvalidStateError(
                f"this ChipWorker was opened in process {self._pid} and cannot be used in the "
                f"forked child {os.getpid()}: open a new ChipWorker in the child"
            )
        raise PtoClosedError("the ChipWorker is closed")

    def _alive(self) -> bool:
        return self._state == _OPEN

    @property
    def is_closed(self) -> bool:
        """True once :meth:`close` (or :meth:`aclose`) ran."""
        return self._state != _OPEN

    @property
    def config(self):
        """The :class:`RunConfig` the worker was opened with."""
        return self._config

    @property
    def platform(self) -> str:
        """The canonical platform name (``"sim"``)."""
        return self._platform

    @property
    def mode(self) -> str:
        """``"sync"``, ``"asyncio"`` or ``"trio"``: how launches complete."""
        return self._pump.flavour

    @property
    def default_stream(self) -> Stream:
        """The worker's default stream (used when no ``use_stream`` is active)."""
        self._check_open()
        return self._default_stream

    def __repr__(self) -> str:
        state = "closed" if self._state else self._pump.flavour
        return f"<ChipWorker {self._config.platform} {state}>"

    # -- opening and closing ------------------------------------------------------------------

    def __enter__(self) -> ChipWorker:
        self._check_open()
        self._ctx_tokens.append(_context.push_worker(self))
        return self

    def __exit__(self, *exc_info) -> None:
        if self._ctx_tokens:
            _context.pop_worker(self, self._ctx_tokens.pop())
        self.close()

    async def open(self) -> ChipWorker:
        """Switch the worker to async mode in the running event loop; return it.

        Use it for a long-lived worker you do not scope with ``async with``
        (then ``await worker.aclose()`` it).  Calling it again in the same
        loop does nothing; in a new loop (after the old one ended) it moves
        the completion pump there.

        Raises
        ------
        PtoInvalidStateError
            If no supported async library runs, or the worker's pump still
            runs in another live event loop.
        """
        self._check_open()
        pump = self._pump
        if self._async:
            if pump.is_current():
                return self
            if pump.usable() and getattr(pump, "loop", None) is not None and pump.loop.is_running():
                raise PtoInvalidStateError("this ChipWorker's completion pump runs in another live event loop")
        with self._lock:
            new = make_pump(self)
            pump.close()
            self._pump = new
            self._async = True
            self._drain()
            if self._backlog:
                self._flush()
        return self

    async def __aenter__(self) -> ChipWorker:
        await self.open()
        self._ctx_tokens.append(_context.push_worker(self))
        return self

    async def __aexit__(self, *exc_info) -> None:
        if self._ctx_tokens:
            _context.pop_worker(self, self._ctx_tokens.pop())
        await self.aclose()

    def close(self, *, timeout: float | None = 30.0) -> None:
        """Finish queued work, release everything, and close the device (idempotent).

        1. DeviceTensors you never freed are freed (a ``ResourceWarning``
           names each).
        2. Queued work runs to completion, for at most `timeout` seconds;
           past that, work not yet started is cancelled (its launches fail
           with :class:`~pypto_async.errors.PtoCanceledError`) and a
           ``RuntimeWarning`` says how many commands were dropped.
        3. Registrations, streams and events are released with the device.

        In async mode this blocks the event loop; prefer :meth:`aclose`.
        """
        if self._state == _CLOSED:
            return
        if self._state == _FORKED:
            self._state = _CLOSED
            self._dev = None
            return
        try:
            forgotten = self._free_forgotten()
            if not self._drive(self._idle, timeout):
                self._drop_queued(timeout)
            self._tracing.close()
        finally:
            self._teardown()
        self._warn_forgotten(forgotten)

    async def aclose(self, *, timeout: float | None = 30.0) -> None:
        """Close the worker without blocking the event loop (see :meth:`close`).

        Suspends until queued work finished (or `timeout` passed).
        """
        if self._state != _OPEN or not self._async or not self._pump.is_current():
            self.close(timeout=timeout)
            return
        forgotten = self._free_forgotten()
        try:
            finished = await self._pump.wait_idle(timeout)
            if not finished:
                self._drop_queued(timeout)
            self._tracing.close()
        finally:
            self._teardown()
        self._warn_forgotten(forgotten)

    def __del__(self):
        try:
            if self._state == _OPEN:
                warnings.warn(f"unclosed {self!r}; close it or use `with`", ResourceWarning, stacklevel=2)
                self._state = _CLOSED
                self._pump.close()
                lib.pto_device_close(self._dev)
                self._dev = None
        except Exception:
            pass

    def _idle(self) -> bool:
        return not self._pending and not self._backlog

    def _free_forgotten(self) -> list[str]:
        names = []
        with self._lock:
            try:
                self._process_deferred_locked()
            except PtoError:  # a lost device
                self._deferred.clear()
            for t in list(self._tensors):
                if not t._freed:
                    names.append(repr(t))
                    t._freed = True
                    try:
                        self._free_locked(t._ptr, self._dealloc_stream(t._stream), t._streams)
                    except PtoError:  # a lost device: closing it releases the memory anyway
                        pass
            self._tensors.clear()
        return names

    def _warn_forgotten(self, names: list[str]) -> None:
        for name in names:
            warnings.warn(f"ChipWorker.close() freed {name}, which was never freed",
                          ResourceWarning, stacklevel=3)

    def _drop_queued(self, timeout) -> None:
        canceled = PtoCanceledError("dropped: the worker closed before it ran")
        dropped = 0
        with self._lock:
            for stream in list(self._streams.values()):
                fifo = stream._fifo
                while fifo:
                    fn, args, owner, flags, gate = fifo.popleft()
                    self._pending.pop(args[-1], None)
                    if owner is not None:
                        owner._fail(canceled)
                    dropped += 1
            self._backlog.clear()
            dropped += max(lib.pto_device_cancel(self._dev), 0)
        # Canceled commands complete at once; running ones finish on their engine.
        self._drive(self._idle, 5.0)
        warnings.warn(f"ChipWorker.close(): queued work did not finish within {timeout} s; "
                      f"dropped {dropped} command(s)", RuntimeWarning, stacklevel=3)

    def _teardown(self) -> None:
        if self._state == _CLOSED:
            return
        self._state = _CLOSED
        _live_workers.discard(self)
        try:
            self._pump.close()
        finally:
            with self._lock:
                canceled = PtoCanceledError("the worker closed before this completed")
                owners = {id(o): o for o in self._pending.values() if o is not None}
                self._pending.clear()
                for owner in owners.values():
                    if not owner._done:
                        if owner._exc is None:
                            owner._exc = canceled
                        owner._finish()
                for t in list(self._tensors):
                    t._freed = True
                self._wake_idle()
                lib.pto_device_close(self._dev)
                self._dev = None
                self._handles.clear()
                self._kernels.clear()

    # -- streams ----------------------------------------------------------------------------

    def _new_stream(self, priority: int, is_default: bool) -> Stream:
        out = ffi.new("pto_stream **")
        check(lib.pto_stream_create(self._dev, priority, out), "pto_stream_create")
        stream = Stream._make(self, out[0], priority, is_default)
        self._streams[stream._id] = stream
        return stream

    def stream(self, priority: int = 0) -> Stream:
        """Create a stream.

        Parameters
        ----------
        priority : int, optional
            Larger is scheduled first when several streams have work ready.

        Raises
        ------
        PtoClosedError
            If the worker is closed.
        """
        self._check_open()
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise PtoArgumentError(f"priority must be an int, not {type(priority).__name__}")
        with self._lock:
            return self._new_stream(priority, False)

    @contextlib.contextmanager
    def use_stream(self, stream: Stream):
        """Make `stream` this task's default stream on this worker, inside the block.

        The default is task-local (a ``contextvars`` variable): other asyncio
        tasks and threads keep theirs.
        """
        self._check_open()
        self._own_stream(stream)
        token = _context.push_stream(stream)
        try:
            yield stream
        finally:
            _context.pop_stream(stream, token)

    def _current_stream(self) -> Stream:
        stack = _context._streams.get()
        if stack:
            for stream in reversed(stack):
                if stream._worker is self and not stream._closed:
                    return stream
        return self._default_stream

    def _own_stream(self, stream) -> Stream:
        if type(stream) is not Stream:
            raise PtoArgumentError(f"stream must be a Stream or None, not {type(stream).__name__}")
        if stream._worker is not self:
            raise PtoArgumentError("the stream belongs to another ChipWorker")
        if stream._closed:
            raise PtoClosedError(f"stream {stream._id} is closed")
        return stream

    def _dealloc_stream(self, stream: Stream) -> Stream:
        return self._default_stream if stream._closed else stream

    def _close_stream(self, stream: Stream) -> None:
        with self._lock:
            stream._final = self._record_locked(stream)
            stream._closed = True
            if not stream._fifo:
                self._destroy_stream(stream)

    def _destroy_stream(self, stream: Stream) -> None:
        self._streams.pop(stream._id, None)
        lib.pto_stream_destroy(stream._ptr)

    # -- submission (lock held) -------------------------------------------------------------------

    def _token(self, owner) -> int:
        token = self._next_token
        self._next_token = token + 1
        self._pending[token] = owner
        return token

    def _submit(self, stream: Stream, fn, args: tuple, owner, flags: int, gate=None) -> bool:
        """Queue one command; True if it entered the ring now.  args[-1] is its token."""
        fifo = stream._fifo
        if not fifo and (gate is None or gate._entered):
            rc = fn(*args)
            if not rc:
                return True
            if rc != _EAGAIN:
                self._pending.pop(args[-1], None)
                check(rc, owner._name if owner is not None else "queueing a command")
        fifo.append((fn, args, owner, flags, gate))
        if stream not in self._backlog:  # entering it starts the stream's back-pressure clock
            self._backlog[stream] = None
        self._fifo_waits += 1
        return False

    def _submit_group(self, stream: Stream, cmds: list, owner: Launch) -> bool:
        """Queue a group of (fn, args, flags); True if all of it entered the ring."""
        fifo = stream._fifo
        i = 0
        n = len(cmds)
        if not fifo:
            while i < n:
                fn, args, flags = cmds[i]
                rc = fn(*args)
                if rc:
                    if rc != _EAGAIN:
                        self._group_error(cmds, i, rc, owner)
                    break
                i += 1
            else:
                return True
        for fn, args, flags in cmds[i:]:
            fifo.append((fn, args, owner, flags, None))
        if stream not in self._backlog:
            self._backlog[stream] = None
        self._fifo_waits += n - i
        return False

    def _group_error(self, cmds: list, i: int, rc: int, owner: Launch) -> None:
        # Commands [0, i) are queued and will report; [i, n) never will.
        for fn, args, flags in cmds[i:]:
            self._pending.pop(args[-1], None)
            if i == 0 and fn is lib.pto_stream_free:
                lib.pto_mem_free(self._dev, args[1])  # nothing queued uses the temporary
        owner._remaining -= len(cmds) - i
        owner._retrieved = True
        try:
            check(rc, owner._name)
        except PtoError as exc:
            if owner._exc is None:
                owner._exc = exc
            if not owner._remaining:
                owner._finish()
            raise

    def _mark_entered(self, owner) -> None:
        owner._entered = True
        waiters = owner._entry_waiters
        if waiters:
            owner._entry_waiters = None
            self._wake_all(waiters)

    def _flush(self) -> None:
        """Move FIFO commands into rings while there is room (lock held)."""
        backlog = self._backlog
        pending = self._pending
        progress = True
        while progress and backlog:
            progress = False
            for stream in list(backlog):
                fifo = stream._fifo
                # Refill a ring in batches, not one slot at a time: one producer
                # wake-up then admits many launches (hysteresis).
                if lib.pto_stream_space_left(stream._ptr) < self._refill:
                    continue
                while fifo:
                    fn, args, owner, flags, gate = fifo[0]
                    if gate is not None and not gate._entered:
                        break
                    if flags & _F_DATA and owner._poison is not None:
                        fifo.popleft()
                        pending.pop(args[-1], None)
                        owner._fail(owner._poison)
                    else:
                        if flags & _F_RECORD and owner._poison is not None:
                            # The driver healed the stream when the failure was drained, but this
                            # record was queued before that: make it fail on the device, so streams
                            # waiting on the event fail as dependents too (the driver's own rule).
                            if owner._exc is None:
                                owner._exc = owner._poison
                            owner._poison = None
                            # Armed once, even if the record then meets a full ring.  The injected
                            # failure breaks the stream again until its record is drained, so work
                            # queued right behind may fail as a dependent too: the safe side.
                            lib.pto_debug_fail_next(stream._ptr, PTO_EDEP, 1)
                        rc = fn(*args)
                        if rc == _EAGAIN:
                            break
                        fifo.popleft()
                        if rc:
                            pending.pop(args[-1], None)
                            try:
                                check(rc, owner._name if owner is not None else "queueing a command")
                            except PtoError as exc:
                                if owner is not None:
                                    owner._fail(exc)
                    progress = True
                    if flags & _F_LAST and owner is not None and not owner._entered:
                        self._mark_entered(owner)
                if not fifo:
                    del backlog[stream]
                    if stream._closed:
                        self._destroy_stream(stream)

    # -- completion (lock held) -------------------------------------------------------------------

    def _drain(self) -> int:
        """Drain ready completion records and resolve their owners (lock held).

        At most ``_MAX_BATCHES`` batches per call, so a device that keeps
        producing records cannot hold the event loop: records left over keep
        the fd readable, and the loop comes back to them after other work.
        """
        buf = self._cq
        pending = self._pending
        dev = self._dev
        drain = lib.pto_cq_drain
        total = 0
        for _ in range(_MAX_BATCHES):
            n = drain(dev, buf, _BATCH)
            if n <= 0:
                break
            total += n
            for i in range(n):
                rec = buf[i]
                owner = pending.pop(rec.token, None)
                status = rec.status
                if status:
                    self._on_failure(rec, status, owner)
                elif owner is not None:
                    owner._ok(rec)
            if n < _BATCH:
                break
        if total:
            self._completions += total
            self._wakeups += 1
        return total

    def _on_failure(self, rec, status: int, owner) -> None:
        cause_token = rec.cause_token
        cause = self._failures.get(cause_token) if cause_token else None
        what = owner._name if owner is not None else "a queued command"
        message = ffi.string(rec.message).decode("utf-8", "replace")
        text = f"{what}: {message}" if message else what
        if cause is not None:
            text = f"{text} (first failure: {cause})"
        exc = error_for_status(status, text, cause=cause, cause_token=cause_token)
        if status != _EDEP and status != _ECANCELED:
            failures = self._failures
            failures[rec.token] = exc
            if len(failures) > _KEEP_FAILURES:
                del failures[next(iter(failures))]
        if status != _ECANCELED:
            stream = self._streams.get(rec.stream_id)
            if stream is not None and stream._fifo:
                self._poison_fifo(stream, cause if cause is not None else exc)
        if owner is not None:
            owner._fail(exc)

    def _poison_fifo(self, stream: Stream, first: BaseException) -> None:
        for fn, args, owner, flags, gate in stream._fifo:
            if flags & (_F_DATA | _F_RECORD) and owner._poison is None and not owner._done:
                exc = PtoDependencyError(
                    f"{owner._name}: queued on stream {stream._id} behind a failed command "
                    f"(first failure: {first})",
                    status="PTO_EDEP",
                )
                exc.__cause__ = first
                owner._poison = exc

    def _wake_all(self, waiters: list) -> None:
        wake = self._pump.wake
        for waiter in waiters:
            if type(waiter) is threading.Event:
                waiter.set()
            else:
                try:
                    wake(waiter)
                except RuntimeError:  # its event loop is gone
                    pass

    def _wake_idle(self) -> None:
        waiters = self._idle_waiters
        if waiters:
            self._idle_waiters = []
            self._wake_all(waiters)

    def _on_readable(self) -> None:
        """The pump's callback: the completion fd is readable."""
        with self._lock:
            if self._state != _OPEN:
                return
            self._drain()
            if self._backlog:
                self._flush()
            if self._deferred:
                self._process_deferred_locked()
            if self._idle_waiters and not self._pending and not self._backlog:
                self._wake_idle()

    def _pump_wait(self, waiters: list):
        return self._pump.wait(waiters)

    # -- blocking waits -------------------------------------------------------------------------------

    def _drive(self, predicate, timeout: float | None) -> bool:
        """Drain and flush on this thread until `predicate()`; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        lock = self._lock
        while True:
            with lock:
                if self._state != _OPEN:
                    return predicate()
                self._drain()
                if self._backlog:
                    self._flush()
                if self._deferred:
                    self._process_deferred_locked()
                if self._idle_waiters and not self._pending and not self._backlog:
                    self._wake_idle()
                dev = self._dev
            if predicate():
                return True
            wait_us = _SLICE_US
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                wait_us = min(wait_us, int(left * 1e6) + 1)
            lib.pto_cq_wait(dev, wait_us)

    def _block_until(self, obj, entry: bool, timeout: float | None) -> None:
        """Block until `obj` entered the ring (entry) or completed; PtoTimeout past `timeout`."""
        self._check_open()
        if entry:
            def predicate():
                return obj._entered
        else:
            def predicate():
                return obj._done
        if self._pump.on_own_thread():
            finished = self._drive(predicate, timeout)
        else:
            finished = self._block_foreign(obj, entry, predicate, timeout)
        if not finished:
            what = "enter its stream's ring" if entry else "complete"
            raise PtoTimeout(f"{obj._name} did not {what} within {timeout} s "
                             f"({len(self._pending)} command(s) in flight on the worker)")
        if self._state == _FORKED:
            self._check_open()

    def _block_foreign(self, obj, entry: bool, predicate, timeout) -> bool:
        # Another thread than the event loop's: the pump resolves obj; wait on an Event.
        event = threading.Event()
        with self._lock:
            if entry:
                if obj._entry_waiters is None:
                    obj._entry_waiters = []
                obj._entry_waiters.append(event)
            else:
                if obj._waiters is None:
                    obj._waiters = []
                obj._waiters.append(event)
        deadline = None if timeout is None else time.monotonic() + timeout
        while not predicate():
            if self._state != _OPEN:
                return predicate()
            wait_s = _SLICE_US / 1e6
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                wait_s = min(wait_s, left)
            event.wait(wait_s)
        return True

    # -- launches ------------------------------------------------------------------------------------

    def register(self, compiled) -> KernelHandle:
        """Load a compiled program once and return the handle you launch it with.

        Registering the same program again returns the same handle.

        Raises
        ------
        PtoPlatformMismatch
            If it was compiled for another platform (checked before anything
            is loaded or dispatched).
        PtoArgumentError
            If it is not a compiled program.
        PtoLoadError
            If its shared object or symbol cannot be loaded.
        """
        self._check_open()
        entry = self._handles.get(id(compiled))
        if entry is not None and entry[0] is compiled:
            return entry[1]
        for attr in ("platform", "params", "lib_path", "symbol"):
            if not hasattr(compiled, attr):
                raise PtoArgumentError(
                    f"{type(compiled).__name__} is not a compiled program: it has no {attr!r} "
                    "(compile it with pypto_async.ir.compile)"
                )
        symbol = str(compiled.symbol)
        name = str(getattr(compiled, "name", None) or symbol)
        if normalize_platform(str(compiled.platform)) != self._platform:
            raise PtoPlatformMismatch(
                f"{name!r} was compiled for platform {compiled.platform!r}, but this worker runs "
                f"{self._config.platform!r}: compile it for the platform you dispatch on"
            )
        path = os.fspath(compiled.lib_path)
        with self._lock:
            kptr = self._kernels.get((path, symbol))
            if kptr is None:
                out = ffi.new("pto_kernel **")
                check(lib.pto_kernel_load(self._dev, path.encode(), symbol.encode(), out),
                      f"loading {symbol!r} from {path}")
                kptr = out[0]
                self._kernels[(path, symbol)] = kptr
            handle = KernelHandle._make(self, compiled, kptr, name)
            self._handles[id(compiled)] = (compiled, handle)
        return handle

    def run(self, compiled, *args, stream=None):
        """Register `compiled` (once) and launch it with `args`: the one-shot form.

        Returns the :class:`Launch` (completed in sync mode; await it in
        async mode).  ``stream=None`` means the task-local default stream.
        """
        return self.register(compiled)(*args, stream=stream)

    def _launch_kernel(self, h: KernelHandle, args: tuple, stream, submit: bool) -> Launch:
        # The hot path: keep it flat.
        if self._state:
            self._check_open()
        if stream is None:
            stream = self._current_stream() if _context._streams.get() else self._default_stream
        else:
            self._own_stream(stream)
        values, hosts, joins = h._binder.bind(self, stream, args)
        out1 = h._out1
        launch = _new_launch(self, stream, h._label, 1, args, args[out1] if out1 >= 0 else h._result(args),
                             submit)
        with self._lock:
            if self._deferred:
                self._process_deferred_locked()
            if joins is not None:
                for t in joins:
                    self._join_first_use(t, stream)
            if hosts is None:
                token = self._next_token
                self._next_token = token + 1
                self._pending[token] = launch
                # cffi passes the list as a temporary uint64_t array; the driver copies
                # the arguments into the ring heap at submit.
                if not stream._fifo:
                    rc = lib.pto_stream_launch(stream._ptr, h._kptr, h._blocks, values, h._nargs, token)
                    if not rc:
                        launch._entered = True
                    elif rc != _EAGAIN:
                        del self._pending[token]
                        check(rc, h._label)
                if not launch._entered:
                    stream._fifo.append((lib.pto_stream_launch,
                                         (stream._ptr, h._kptr, h._blocks, values, h._nargs, token),
                                         launch, _F_DATA | _F_LAST, None))
                    if stream not in self._backlog:
                        self._backlog[stream] = None
                    self._fifo_waits += 1
            else:
                self._launch_group(h, stream, values, hosts, launch)
        if not self._async:
            if submit:
                if not launch._entered:
                    self._block_until(launch, True, None)
            else:
                if not launch._done:
                    self._block_until(launch, False, None)
                if launch._exc is not None:
                    launch._retrieved = True
                    raise launch._exc
        return launch

    def _launch_group(self, h: KernelHandle, stream: Stream, values: list, hosts: list,
                      launch: Launch) -> None:
        temps = []
        try:
            for i, ha, p in hosts:
                ptr = self._alloc_locked(ha.nbytes, stream, f"{h._label}: argument {p.name!r}")
                temps.append(ptr)
                values[i] = ptr
        except BaseException:
            for ptr in temps:
                lib.pto_mem_free(self._dev, ptr)
            raise
        sp = stream._ptr
        launch._keep = (launch._keep, hosts)
        cmds = []
        for (i, ha, p), ptr in zip(hosts, temps):
            if p.copies_in:
                cmds.append((lib.pto_stream_copy_h2d, (sp, ptr, ha.ptr, ha.nbytes, self._token(launch)),
                             _F_DATA))
        cmds.append((lib.pto_stream_launch, (sp, h._kptr, h._blocks, values, h._nargs, self._token(launch)),
                     _F_DATA))
        for (i, ha, p), ptr in zip(hosts, temps):
            if p.copies_out:
                cmds.append((lib.pto_stream_copy_d2h, (sp, ha.ptr, ptr, ha.nbytes, self._token(launch)),
                             _F_DATA))
        for ptr in temps:
            cmds.append((lib.pto_stream_free, (sp, ptr, self._token(launch)), 0))
        fn, a, flags = cmds[-1]
        cmds[-1] = (fn, a, flags | _F_LAST)
        launch._remaining = len(cmds)
        if self._submit_group(stream, cmds, launch):
            launch._entered = True

    def _alloc_locked(self, nbytes: int, stream: Stream | None, what: str) -> int:
        out = self._devptr_out
        rc = lib.pto_mem_alloc(self._dev, max(nbytes, 1), stream._ptr if stream is not None else ffi.NULL, out)
        if rc:
            check(rc, f"{what}: allocating {nbytes} bytes of device memory")
        return int(out[0])

    def _queue_one(self, stream: Stream, fn, args_without_token: tuple, name: str, keep, out) -> Launch:
        """Queue one data command owned by a new Launch (lock held)."""
        launch = _new_launch(self, stream, name, 1, keep, out)
        token = self._token(launch)
        if self._submit(stream, fn, (*args_without_token, token), launch, _F_DATA | _F_LAST):
            launch._entered = True
        return launch

    def _finish_sync(self, launch: Launch) -> Launch:
        """In sync mode, wait for `launch` and raise its error."""
        if not self._async:
            if not launch._done:
                self._block_until(launch, False, None)
            if launch._exc is not None:
                launch._retrieved = True
                raise launch._exc
        return launch

    # -- events and ordering (lock held unless said) ------------------------------------------------

    def _record_locked(self, stream: Stream) -> Event:
        event = Event._make(self, stream, True)
        token = self._token(event)
        if self._submit(stream, lib.pto_stream_record, (stream._ptr, event._ptr, token), event,
                        _F_LAST | _F_RECORD):
            event._entered = True
        return event

    def _record(self, stream: Stream) -> Event:
        with self._lock:
            return self._record_locked(stream)

    def _wait_event_locked(self, stream: Stream, event: Event) -> None:
        token = self._token(None)
        self._submit(stream, lib.pto_stream_wait_event, (stream._ptr, event._ptr, token), None, 0, gate=event)

    def _wait_event(self, stream: Stream, event: Event) -> None:
        with self._lock:
            self._wait_event_locked(stream, event)

    def _event_after(self, launch: Launch) -> Event:
        self._check_open()
        with self._lock:
            stream = launch._stream
            if launch._done:
                return Event._make(self, stream, False)
            if stream._closed:
                return stream._final
            return self._record_locked(stream)

    def _marker(self, stream: Stream) -> Launch:
        """Queue a notify on `stream`: a Launch that completes after everything before it."""
        self._check_open()
        with self._lock:
            if self._deferred:  # frees of collected tensors count as work queued so far
                self._process_deferred_locked()
            marker = _new_launch(self, stream, f"stream {stream._id} sync point", 1, None, None)
            marker._retrieved = True
            if stream._closed:
                raise PtoClosedError(f"stream {stream._id} is closed")
            token = self._token(marker)
            if self._submit(stream, lib.pto_stream_notify, (stream._ptr, token), marker, _F_LAST):
                marker._entered = True
        return marker

    def _join_first_use(self, t: DeviceTensor, stream: Stream) -> None:
        """First use of `t` on `stream`: wait for its allocation stream (lock held)."""
        birth = t._stream
        event = birth._final if birth._closed else self._record_locked(birth)
        if event is not None:
            self._wait_event_locked(stream, event)
        t._streams.add(stream)

    # -- device memory --------------------------------------------------------------------------------

    def alloc_tensor(self, shape, dtype, *, init=None, stream=None) -> DeviceTensor:
        """Allocate a tensor in device memory, optionally filled from a host array.

        Parameters
        ----------
        shape : int or tuple of int
            The tensor's shape.
        dtype
            A torch, numpy or pl dtype (``torch.float32``, ``np.float32``,
            ``pl.FP32``).
        init : numpy array or torch CPU tensor, optional
            Copied into the tensor, in order on `stream`; its shape and
            dtype must match.  In sync mode the call returns once the copy
            completed; in async mode the runtime copies `init` first, so you
            may reuse your array at once.
        stream : Stream, optional
            The allocation (and default deallocation) stream; ``None`` means
            the task-local default stream.

        Raises
        ------
        PtoArgumentError
            For a bad shape, dtype or init.
        PtoOutOfMemory
            If no free extent fits.
        """
        self._check_open()
        shape = _as_shape(shape)
        dt = as_dtype(dtype)
        nbytes = dt.itemsize
        for d in shape:
            nbytes *= d
        stream = self._current_stream() if stream is None else self._own_stream(stream)
        host = None
        if init is not None:
            host = host_array(init, "alloc_tensor(init=...)", writeable=False)
            if tuple(host.shape) != shape:
                raise PtoArgumentError(f"alloc_tensor(init=...): shape {tuple(host.shape)} does not "
                                       f"match the tensor's shape {shape}")
            if host.dtype != dt:
                raise PtoArgumentError(f"alloc_tensor(init=...): dtype {host.dtype.np_name} does not "
                                       f"match the tensor's dtype {dt.np_name}")
            if self._async:
                init = init.clone() if not isinstance(init, np.ndarray) else np.array(init, copy=True)
                host = host_array(init, "alloc_tensor(init=...)", writeable=False)
        with self._lock:
            ptr = self._alloc_locked(nbytes, stream, "alloc_tensor()")
            launch = None
            if host is not None and nbytes:
                try:
                    launch = self._queue_one(stream, lib.pto_stream_copy_h2d,
                                             (stream._ptr, ptr, host.ptr, nbytes),
                                             "alloc_tensor(init=...) copy", (init, host), None)
                except BaseException:
                    lib.pto_mem_free(self._dev, ptr)  # nothing was queued that uses it
                    raise
            t = DeviceTensor._make(self, ptr, shape, dt, nbytes, stream)
            t._init = launch
            self._tensors.add(t)
        if launch is not None and not self._async:
            try:
                self._finish_sync(launch)
            except PtoError:
                self.free_tensor(t)
                raise
        return t

    def free_tensor(self, t: DeviceTensor, *, stream=None) -> None:
        """Free a DeviceTensor in stream order.

        Parameters
        ----------
        t : DeviceTensor
            The tensor.
        stream : Stream, optional
            Where to free it; ``None`` means the tensor's deallocation stream
            (the one it was allocated on).  Every other stream that used it
            is joined first, so the block is reused only after their work
            queued so far.

        Raises
        ------
        PtoForeignTensorError
            If it belongs to another worker.
        PtoTensorFreedError
            If it was freed already.
        """
        self._check_open()
        if not isinstance(t, DeviceTensor):
            raise PtoArgumentError(f"free_tensor() takes a DeviceTensor, not {type(t).__name__}")
        if t._worker is not self:
            raise PtoForeignTensorError("free_tensor(): the DeviceTensor belongs to another ChipWorker")
        if t._freed:
            raise PtoTensorFreedError("free_tensor(): the DeviceTensor was freed already")
        stream = self._dealloc_stream(t._stream) if stream is None else self._own_stream(stream)
        with self._lock:
            self._free_locked(t._ptr, stream, t._streams)
            t._freed = True
            self._tensors.discard(t)

    def _free_locked(self, ptr: int, stream: Stream, used) -> None:
        for other in used:
            if other is stream:
                continue
            event = other._final if other._closed else self._record_locked(other)
            if event is not None:
                self._wait_event_locked(stream, event)
        token = self._token(None)
        self._submit(stream, lib.pto_stream_free, (stream._ptr, ptr, token), None, 0)

    def _defer_free(self, ptr: int, stream: Stream, used) -> None:
        """Free a collected DeviceTensor later, on the owning thread (any thread may call)."""
        if self._state != _OPEN:
            return
        self._deferred.append((ptr, stream, tuple(used)))
        if self._async and not self._deferred_scheduled:
            self._deferred_scheduled = True
            self._pump.call_soon_threadsafe(self._process_deferred)

    def _process_deferred(self) -> None:
        with self._lock:
            if self._state == _OPEN:
                self._process_deferred_locked()

    def _process_deferred_locked(self) -> None:
        self._deferred_scheduled = False
        deferred = self._deferred
        while deferred:
            ptr, stream, used = deferred.popleft()
            self._free_locked(ptr, self._dealloc_stream(stream), used)

    # -- copies -------------------------------------------------------------------------------------------

    def copy(self, dst, src, *, stream=None) -> Launch:
        """Copy between a DeviceTensor and a host array, or two DeviceTensors.

        The direction follows the argument types.  Both sides must have the
        same dtype and number of bytes.

        Parameters
        ----------
        dst, src : DeviceTensor or host array
            At least one must be a DeviceTensor.  A host destination must be
            writeable.
        stream : Stream, optional
            ``None`` means the task-local default stream.

        Returns
        -------
        Launch
            Its result is `dst`.  In sync mode it has completed; in async mode
            await it.  The host array stays alive until the copy completed.
        """
        self._check_open()
        stream = self._current_stream() if stream is None else self._own_stream(stream)
        dst_dev = isinstance(dst, DeviceTensor)
        src_dev = isinstance(src, DeviceTensor)
        for side, t in (("dst", dst), ("src", src)):
            if isinstance(t, DeviceTensor):
                if t._worker is not self:
                    raise PtoForeignTensorError(f"copy({side}=...): the DeviceTensor belongs to another ChipWorker")
                if t._freed:
                    raise PtoTensorFreedError(f"copy({side}=...): the DeviceTensor was freed")
                if t._init is not None and side == "src":
                    check_init(t, f"copy({side}=...)")
        host = None
        if dst_dev and src_dev:
            kind, nbytes = "d2d", dst._nbytes
            _check_same(dst._dtype, dst._nbytes, src._dtype, src._nbytes)
        elif dst_dev:
            host = host_array(src, "copy(src=...)", writeable=False)
            kind, nbytes = "h2d", dst._nbytes
            _check_same(dst._dtype, dst._nbytes, host.dtype, host.nbytes)
        elif src_dev:
            host = host_array(dst, "copy(dst=...)", writeable=True)
            kind, nbytes = "d2h", src._nbytes
            _check_same(host.dtype, host.nbytes, src._dtype, src._nbytes)
        else:
            raise PtoArgumentError("copy(): dst or src must be a DeviceTensor (host-to-host is numpy's job)")
        sp = stream._ptr
        name = f"copy {kind} ({nbytes} bytes)"
        with self._lock:
            for t in (dst, src):
                if isinstance(t, DeviceTensor) and stream not in t._streams:
                    self._join_first_use(t, stream)
            if kind == "d2d":
                launch = self._queue_one(stream, lib.pto_stream_copy_d2d, (sp, dst._ptr, src._ptr, nbytes),
                                         name, (dst, src), dst)
                dst._init = launch  # a full overwrite: the tensor is as good as this copy
            elif kind == "h2d":
                launch = self._queue_one(stream, lib.pto_stream_copy_h2d, (sp, dst._ptr, host.ptr, nbytes),
                                         name, (dst, src, host), dst)
                dst._init = launch
            else:
                launch = self._queue_one(stream, lib.pto_stream_copy_d2h, (sp, host.ptr, src._ptr, nbytes),
                                         name, (dst, src, host), dst)
        return self._finish_sync(launch)

    def copy_from(self, host_ptr, dev_ptr: int, nbytes: int, *, stream=None) -> None:
        """Copy `nbytes` from device address `dev_ptr` to the host, and wait for it.

        The seed's blocking device-to-host copy:
        ``w.copy_from(host_ptr, t.data_ptr, t.nbytes)``.

        Parameters
        ----------
        host_ptr : int or writable buffer
            A host address, or an object exposing a writable buffer (a numpy
            array, a torch CPU tensor, a ``bytearray``) of at least `nbytes`.
        dev_ptr : int
            A device address inside a live allocation.
        nbytes : int
            Bytes to copy.
        stream : Stream, optional
            ``None`` means the task-local default stream.

        Raises
        ------
        PtoCopyFault
            If the device range is invalid.
        """
        self._blocking_copy(lib.pto_stream_copy_d2h, host_ptr, dev_ptr, nbytes, stream, "copy_from", True)

    def copy_to(self, dev_ptr: int, host_ptr, nbytes: int, *, stream=None) -> None:
        """Copy `nbytes` from the host to device address `dev_ptr`, and wait for it.

        Parameters are as for :meth:`copy_from`, the other way round.
        """
        self._blocking_copy(lib.pto_stream_copy_h2d, host_ptr, dev_ptr, nbytes, stream, "copy_to", False)

    def _blocking_copy(self, fn, host_ptr, dev_ptr, nbytes, stream, what: str, to_host: bool) -> None:
        self._check_open()
        stream = self._current_stream() if stream is None else self._own_stream(stream)
        if isinstance(nbytes, bool) or not isinstance(nbytes, (int, np.integer)) or nbytes <= 0:
            raise PtoArgumentError(f"{what}(): nbytes must be an int > 0, not {nbytes!r}")
        if isinstance(dev_ptr, bool) or not isinstance(dev_ptr, (int, np.integer)) or dev_ptr <= 0:
            raise PtoArgumentError(f"{what}(): dev_ptr must be a device address (an int > 0), not {dev_ptr!r}")
        nbytes = int(nbytes)
        ptr, keep = _host_pointer(host_ptr, nbytes, to_host, f"{what}(host_ptr=...)")
        sp = stream._ptr
        args = (sp, ptr, int(dev_ptr), nbytes) if to_host else (sp, int(dev_ptr), ptr, nbytes)
        with self._lock:
            launch = self._queue_one(stream, fn, args, f"{what} ({nbytes} bytes)", keep, None)
        if not launch._done:
            self._block_until(launch, False, None)
        launch.result()

    # -- statistics and traces ---------------------------------------------------------------------------------

    def trace(self, path=None) -> TraceWindow:
        """Capture a swimlane trace of the work submitted inside a ``with`` block.

        ``with w.trace("run.json") as tr:`` (``async with`` in async code)
        records every command the device runs from entry on; on exit it waits
        until the worker has nothing in flight, then writes the Chrome/Perfetto
        trace JSON to `path` (if given) and keeps it as ``tr.trace``.  Render
        it with ``pypto-async trace run.json -o run.png``.  With
        ``RunConfig(enable_chip_swimlane=True)`` the worker also writes a trace
        of its whole life when it closes (see :class:`WorkerTracing`).
        """
        self._check_open()
        return self._tracing.window(path)


    def stats(self) -> WorkerStats:
        """Return a snapshot of the worker's counters (see :class:`WorkerStats`)."""
        self._check_open()
        dev_stats = ffi.new("pto_device_stats *")
        mem = ffi.new("pto_mem_stats *")
        check(lib.pto_device_get_stats(self._dev, dev_stats), "pto_device_get_stats")
        check(lib.pto_mem_get_stats(self._dev, mem), "pto_mem_get_stats")
        return WorkerStats(
            launches=dev_stats.launches,
            copies=dev_stats.copies,
            bytes_h2d=dev_stats.copy_bytes_h2d,
            bytes_d2h=dev_stats.copy_bytes_d2h,
            bytes_d2d=dev_stats.copy_bytes_d2d,
            commands_submitted=dev_stats.submitted,
            commands_completed=dev_stats.completed,
            completions=self._completions,
            wakeups=self._wakeups,
            backpressure_waits=self._fifo_waits,
            in_flight=len(self._pending),
            streams=sum(1 for s in self._streams.values() if not s._closed),
            memory_in_use=mem.in_use,
            memory_reserved=mem.reserved,
            memory_peak=mem.peak,
            memory_capacity=mem.capacity,
            memory_allocations=mem.count,
            engines=engine_stats(self._dev, self._info.engines, self._info.cores),
            stream_stats=stream_stats(self._streams.values(), self._backlog),
            backpressure_wait_ns=self._backlog.total_ns(),
        )


def _as_shape(shape) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        shape = (int(shape),)
    try:
        dims = tuple(shape)
    except TypeError:
        raise PtoArgumentError(f"shape must be an int or a tuple of ints, not {shape!r}") from None
    out = []
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 0:
            raise PtoArgumentError(f"shape must hold ints >= 0, not {shape!r}")
        out.append(int(d))
    return tuple(out)


def _check_same(dst_dtype, dst_nbytes, src_dtype, src_nbytes) -> None:
    if dst_dtype != src_dtype:
        raise PtoArgumentError(f"copy(): dtypes differ (dst {dst_dtype.np_name}, src {src_dtype.np_name})")
    if dst_nbytes != src_nbytes:
        raise PtoArgumentError(f"copy(): sizes differ (dst {dst_nbytes} bytes, src {src_nbytes} bytes)")


def _host_pointer(obj, nbytes: int, writeable: bool, what: str):
    """Return (cdata pointer, keep-alive) for an int address or a buffer of >= nbytes."""
    if isinstance(obj, (int, np.integer)) and not isinstance(obj, bool):
        if obj <= 0:
            raise PtoArgumentError(f"{what}: not a host address: {obj!r}")
        return ffi.cast("void *", int(obj)), None
    if isinstance(obj, np.ndarray) or _is_torch_tensor(obj):
        h = host_array(obj, what, writeable=writeable)
        if h.nbytes < nbytes:
            raise PtoArgumentError(f"{what}: the buffer has {h.nbytes} bytes, fewer than nbytes={nbytes}")
        return h.ptr, (obj, h)
    try:
        ptr = ffi.from_buffer(obj, require_writable=writeable)
    except TypeError:
        raise PtoArgumentError(f"{what}: expected an int address or a buffer, not {type(obj).__name__}") from None
    if len(ptr) < nbytes:
        raise PtoArgumentError(f"{what}: the buffer has {len(ptr)} bytes, fewer than nbytes={nbytes}")
    return ptr, (obj, ptr)
