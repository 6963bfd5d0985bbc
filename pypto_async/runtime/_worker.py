"""ChipWorker: one open device, its streams, registrations and modes.

The worker is three pieces: this module (opening and closing, modes, streams,
registration and launches, events, statistics), :mod:`._queue` (the token
map, stream backlogs, completion drain and blocking waits, with the essay on
how work flows) and :mod:`._memory` (DeviceTensors, frees and copies).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
import warnings
import weakref
from collections import deque

from .._driver import PTO_ENOMEM, check, device_config, error_for_status, ffi, lib
from ..errors import (
    PtoArgumentError,
    PtoCanceledError,
    PtoClosedError,
    PtoError,
    PtoInvalidStateError,
    PtoPlatformMismatch,
)
from . import _context
from ._checks import check_timeout
from ._config import as_run_config, normalize_platform
from ._event import Event
from ._kernel import KernelHandle
from ._launch import Launch, _Marker, mark_turn
from ._memory import DeviceMemory
from ._memwait import group_flags, retry, rounded, wait_for_memory
from ._pump import SyncPump, make_pump
from ._queue import _BATCH, _F_DATA, _F_LAST, _F_RECORD, _QUEUED, CommandQueue, cq_view
from ._state import CLOSED, FORKED, OPEN
from ._stats import BacklogClock, WorkerStats, worker_stats
from ._stream import Stream
from ._tensor import DeviceTensor
from ._tracing import TraceWindow, WorkerTracing

__all__ = ["ChipWorker", "WorkerStats"]

_stream_launch = lib.pto_stream_launch  # the launch hot path calls it once per launch
_make_launch = Launch._make  # ... and this: bound once, a classmethod lookup costs a bound method
_ENOMEM = -PTO_ENOMEM
_SERVICE_MASK = 63  # the launch hot path drains completions itself every 64 tokens

_live_workers: weakref.WeakSet = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for worker in list(_live_workers):
        if worker._state == OPEN:
            worker._state = FORKED


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


@atexit.register
def _close_live_workers() -> None:
    # Driver threads write into host arrays until their commands complete: finish (or
    # cancel) every worker's work before the interpreter frees those arrays.
    for worker in list(_live_workers):
        if worker._state == OPEN:
            try:
                worker.close(timeout=5.0)
            except Exception:
                pass


class ChipWorker(CommandQueue, DeviceMemory):
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
        self._state = CLOSED
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
        self._cq_view = cq_view(self._cq)  # the same memory, read column-wise by _drain
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
        self._sync_points: deque = deque()  # (token, Launch): see CommandQueue._sync_point
        self._pump = SyncPump(self)
        self._async = False
        self._loop_warned: set[str] = set()  # kinds of blocked-event-loop warning given (see _block_until)
        self._pid = os.getpid()
        self._ctx_tokens: list = []
        self._completions = 0
        self._wakeups = 0
        self._fifo_waits = 0
        self._mem_waiters: deque = deque()  # MemoryWait gates, oldest first (see _memwait)
        self._memory_waits = 0
        self._state = OPEN
        try:
            self._default_stream = self._new_stream(0, True)
            self._tracing = WorkerTracing(self)  # swimlane and scope-stats outputs
        except BaseException:
            self._state = CLOSED
            dev, self._dev = self._dev, None
            lib.pto_device_close(dev)
            raise
        _live_workers.add(self)

    # -- state --------------------------------------------------------------------------

    def _check_open(self) -> None:
        state = self._state
        if state == OPEN:
            return
        if state == FORKED:
            raise PtoInvalidStateError(
                f"this ChipWorker was opened in process {self._pid} and cannot be used in the "
                f"forked child {os.getpid()}: open a new ChipWorker in the child"
            )
        raise PtoClosedError("the ChipWorker is closed")

    def _alive(self) -> bool:
        return self._state == OPEN

    @property
    def is_closed(self) -> bool:
        """True once :meth:`close` (or :meth:`aclose`) ran."""
        return self._state != OPEN

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
        state = self._pump.flavour if self._alive() else "closed"
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
        2. Queued work runs to completion, for at most `timeout` seconds
           (``None`` or ``float("inf")``: no limit); past that, work not yet
           started is cancelled (its launches fail with
           :class:`~pypto_async.errors.PtoCanceledError`) and a
           ``RuntimeWarning`` says how many commands were dropped.
        3. Registrations, streams and events are released with the device.

        Whatever ends the wait early (Ctrl-C, an error), commands already on
        an engine finish before their host arrays are let go.

        In async mode this blocks the event loop; prefer :meth:`aclose`.
        Called from another thread than the event loop's, it hands the
        closing to the loop (as ``await worker.aclose()`` there) and blocks
        until it finished, so tasks awaiting the worker's launches wake.

        Raises
        ------
        PtoArgumentError
            For a timeout that is not None or a number of seconds >= 0.
        """
        timeout = check_timeout(timeout, "ChipWorker.close")
        if self._state == CLOSED:
            return
        if self._state == FORKED:
            self._state = CLOSED
            self._dev = None
            return
        if self._async and not self._pump.on_own_thread() and self._pump.close_on_loop(timeout):
            return
        try:
            forgotten = self._free_forgotten()
            if not self._drive(self._idle, timeout):
                self._drop_queued(f"ChipWorker.close(): queued work did not finish within {timeout} s")
            self._tracing.close()
        finally:
            self._teardown()
        self._warn_forgotten(forgotten)

    async def aclose(self, *, timeout: float | None = 30.0) -> None:
        """Close the worker without blocking the event loop (see :meth:`close`).

        Suspends until queued work finished (or `timeout` passed).  If the
        close itself is cancelled (``asyncio.wait_for``, a trio cancel scope),
        it does at once what :meth:`close` does when its timeout passes
        (work not yet started is cancelled, what runs on an engine finishes,
        the device is closed), then lets the cancellation go on.

        Raises
        ------
        PtoArgumentError
            For a timeout that is not None or a number of seconds >= 0.
        """
        timeout = check_timeout(timeout, "ChipWorker.aclose")
        if self._state != OPEN or not self._async or not self._pump.is_current():
            self.close(timeout=timeout)
            return
        forgotten = self._free_forgotten()
        try:
            try:
                finished = await self._pump.wait_idle(timeout)
            except BaseException:
                # Cancelled while draining: the caller wants out now, but host arrays in
                # flight must outlive the device's use of them.  Cancel, settle, re-raise.
                self._drop_queued("ChipWorker.aclose() was cancelled", quiet_if_none=True)
                raise
            if not finished:
                self._drop_queued(f"ChipWorker.aclose(): queued work did not finish within {timeout} s")
            self._tracing.close()
        finally:
            self._teardown()
        self._warn_forgotten(forgotten)

    def __del__(self):
        # The last reference went without close(), or close() was interrupted before the
        # device closed: close the device before the launches (and their host arrays) go.
        try:
            if getattr(self, "_dev", None) is None or self._state == FORKED:
                return
            if self._state == OPEN:
                warnings.warn(f"unclosed {self!r}; close it or use `with`", ResourceWarning, stacklevel=2)
            self._state = CLOSED
            self._pump.close()
            dev, self._dev = self._dev, None
            lib.pto_device_close(dev)
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

    def _drop_queued(self, why: str, quiet_if_none: bool = False) -> None:
        """Cancel every command not yet started, then drain what the engines finish.

        Warns (``RuntimeWarning``) with `why` and how many commands were
        dropped; with `quiet_if_none`, only if there were any.
        """
        canceled = PtoCanceledError("dropped: the worker closed before it ran")
        dropped = 0
        with self._lock:
            for stream in list(self._streams.values()):
                fifo = stream._fifo
                while fifo:
                    entry = fifo.popleft()
                    self._pending.pop(entry.token, None)
                    if entry.owner is not None:
                        entry.owner._fail(canceled)
                    dropped += 1
                stream._unentered.clear()  # the driver cancels its backlog below
            self._backlog.clear()
            dropped += max(lib.pto_device_cancel(self._dev), 0)
        # Canceled commands complete at once; running ones finish on their engine.
        self._drive(self._idle, 5.0)
        if dropped or not quiet_if_none:
            warnings.warn(f"{why}; dropped {dropped} command(s)",
                          RuntimeWarning, stacklevel=3)

    def _teardown(self) -> None:
        """Close the device, then settle whatever was still in flight (idempotent).

        The order is the point: closing the device cancels what has not
        started and waits for what runs on an engine.  Only then may the
        launches let go of their host arrays; a copy still reading an array
        whose last reference went with its launch would read freed memory.
        """
        if self._state == CLOSED:
            return
        self._state = CLOSED
        _live_workers.discard(self)
        try:
            self._pump.close()
        finally:
            try:
                self._tracing.close()  # done already unless the close was cut short
            except Exception:  # noqa: BLE001 - a diagnostic must not keep the device open
                pass
            with self._lock:
                dev, self._dev = self._dev, None
                lib.pto_device_close(dev)
                canceled = PtoCanceledError("the worker closed before this completed")
                owners = {id(o): o for o in self._pending.values() if o is not None}
                self._pending.clear()
                for owner in owners.values():
                    if not owner._done:
                        if owner._exc is None:
                            owner._exc = canceled
                        owner._finish()
                # Nothing is in flight any more: end every worker-wide wait (its waiter then
                # finds the worker closed).  The last drain normally settled them already.
                points = self._sync_points
                while points:
                    points.popleft()[1]._ok(0, 0)
                for t in list(self._tensors):
                    t._freed = True
                self._wake_idle()
                self._handles.clear()
                self._kernels.clear()

    # -- streams ----------------------------------------------------------------------------

    def _new_stream(self, priority: int, is_default: bool) -> Stream:
        out = ffi.new("pto_stream **")
        check(lib.pto_stream_create(self._dev, priority, out), "pto_stream_create")
        check(lib.pto_stream_set_overflow(out[0], 1), "pto_stream_set_overflow")  # see _queue.py, step 3
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
        if not -(1 << 31) <= priority < (1 << 31):
            raise PtoArgumentError(f"priority must fit in 32 bits, not {priority}")
        with self._lock:
            return self._new_stream(priority, False)

    @contextlib.contextmanager
    def use_stream(self, stream: Stream):
        """Make `stream` this task's default stream on this worker, inside the block.

        The default is task-local (a ``contextvars`` variable): other asyncio
        tasks and threads keep theirs.  If `stream` is closed inside the
        block, work queued there without ``stream=`` raises
        :class:`~pypto_async.errors.PtoClosedError`, as with ``stream=stream``.
        """
        self._check_open()
        self._own_stream(stream)
        token = _context.push_stream(stream)
        try:
            yield stream
        finally:
            _context.pop_stream(stream, token)

    # -- waiting for everything ------------------------------------------------------------------

    def sync(self, timeout: float | None = None) -> None:
        """Block until every command queued so far, on every stream, has completed.

        The worker-wide :meth:`Stream.sync` (CUDA's device synchronize): it
        covers all streams, closed ones included, and the frees queued for
        collected tensors.  Work queued after the call, by other threads or
        tasks, is not waited for.  It does not raise for a failed command:
        each launch reports its own.

        Parameters
        ----------
        timeout : float, optional
            Seconds to wait at most (``None``: no limit).

        Raises
        ------
        PtoTimeout
            If the work did not complete in time (it goes on).
        PtoDeviceLost
            If the device was lost.
        PtoClosedError
            If the worker is closed.
        """
        check_timeout(timeout, "ChipWorker.sync")
        self._sync_point().sync(timeout)
        self._check_device()

    async def wait(self) -> None:
        """Suspend until every command queued so far, on every stream, has completed.

        The awaitable form of :meth:`sync` (async mode), with the same reach:
        work queued after the call is not waited for, and a failed command
        does not raise here.  Cancelling the wait cancels no device work.

        Raises
        ------
        PtoDeviceLost
            If the device was lost.
        PtoClosedError
            If the worker is closed.
        """
        point = self._sync_point()
        await point.wait()
        self._check_device()

    def _check_device(self) -> None:
        """Raise PtoDeviceLost if the device was lost (the check after a worker-wide wait)."""
        self._check_open()
        status = lib.pto_device_status(self._dev)
        if status:
            raise error_for_status(status, "the device was lost; its work did not complete")

    def _current_stream(self) -> Stream:
        """The task-local default stream: the innermost of this worker's ``use_stream`` streams."""
        stack = _context.stream_stack()
        if stack:
            for stream in reversed(stack):
                if stream._worker is self:
                    if stream._closed:  # closed inside the block: refused, as with stream=s
                        raise PtoClosedError(f"stream {stream._id} is closed (it is this task's "
                                             "default stream, set with use_stream)")
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
            # The last points anyone can join: one that carries the stream's failures (for
            # waits on its work) and one that only orders (for frees of tensors it used).
            stream._final = self._record_locked(stream)
            stream._final_ordering = self._record_locked(stream, ordering=True)
            stream._closed = True
            if stream not in self._backlog:  # else the flush that empties it destroys it
                self._destroy_stream(stream)

    def _destroy_stream(self, stream: Stream) -> None:
        self._streams.pop(stream._id, None)
        lib.pto_stream_destroy(stream._ptr)

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
        if self._state != OPEN:
            self._check_open()
        if h._unfit is not None:
            raise PtoArgumentError(f"{h._label}: the program {h._unfit}")
        if stream is None:
            stream = self._current_stream() if _context.stream_stack() else self._default_stream
        else:
            self._own_stream(stream)
        values, hosts, joins = h._binder.bind(self, stream, args)
        out1 = h._out1
        # Nothing to keep alive for DeviceTensor and scalar arguments: a tensor collected
        # while the launch runs is freed in stream order behind it.  Host arrays are kept
        # by _launch_group.
        launch = _make_launch(self, stream, h._label, 1, None, args[out1] if out1 >= 0 else h._result(args),
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
                # the arguments (into the ring heap, or its overflow).  (_stream_launch is
                # lib.pto_stream_launch bound once: a cffi lib attribute costs a lookup.)
                if not stream._fifo:
                    rc = _stream_launch(stream._ptr, h._kptr, h._blocks, values, h._nargs, token)
                    if not rc:
                        launch._entered = True
                    elif rc == _QUEUED:  # the driver keeps it until the ring has room
                        self._overflowed(stream, 1)
                        self._track(stream, launch, token, token)
                    else:
                        del self._pending[token]
                        check(rc, h._label)
                else:
                    # Behind a host condition: wait in the stream's FIFO.  tuple(values): a
                    # tuple of ints (and cdata) drops out of the cyclic GC's tracking at its
                    # first collection, a list never does.
                    self._hold(stream, _stream_launch,
                               (stream._ptr, h._kptr, h._blocks, tuple(values), h._nargs, token),
                               launch, _F_DATA | _F_LAST, None)
                if not token & _SERVICE_MASK and self._pump.can_serve_inline():
                    # A coroutine that submits without ever suspending never lets the pump
                    # run: drain here now and then, so finished launches die young (cheap
                    # for the cyclic GC) and the completion queue stays short.
                    self._service_locked()
                    if submit and self._pump.turn_due(_SERVICE_MASK + 1):
                        mark_turn(launch)  # nor the rest of the loop: its await yields once
            else:
                self._launch_group(h, stream, values, hosts, launch)
                if submit and self._pump.can_serve_inline() and self._pump.turn_due(1):
                    mark_turn(launch)
        if self._async:
            return launch
        if submit:
            if not launch._entered:
                self._block_until(launch, True, None)
            return launch
        return self._finish_sync(launch)

    def _launch_group(self, h: KernelHandle, stream: Stream, values: list, hosts: list,
                      launch: Launch) -> None:
        """Queue a launch with host arrays: temporaries, copies in, kernel, copies out, frees.

        If the temporaries do not fit, or other launches wait for memory
        already, the launch waits in its stream's FIFO (see :mod:`._memwait`).
        """
        launch._keep = hosts
        temps = None if self._mem_waiters else self._alloc_temps(hosts, stream, h._label)
        if temps is None:
            temps = wait_for_memory(self, h, stream, values, launch)
            if temps is None:
                return
        token = self._token
        tokens = [token(launch) for _ in group_flags(hosts)]
        cmds = self._group_commands(h, stream, values, hosts, temps, tokens)
        launch._remaining = len(cmds)
        if self._submit_group(stream, cmds, launch):
            launch._entered = True

    def _group_commands(self, h: KernelHandle, stream: Stream, values: list, hosts: list, temps: list,
                        tokens: list) -> list:
        """The commands ``(fn, args, flags)`` of a launch group, in stream order (see group_flags)."""
        sp = stream._ptr
        tokens = iter(tokens)
        for (i, ha, p), ptr in zip(hosts, temps):
            values[i] = ptr
        cmds = []
        for (i, ha, p), ptr in zip(hosts, temps):
            if p.copies_in:
                cmds.append((lib.pto_stream_copy_h2d, (sp, ptr, ha.ptr, ha.nbytes, next(tokens)), _F_DATA))
        cmds.append((lib.pto_stream_launch, (sp, h._kptr, h._blocks, values, h._nargs, next(tokens)), _F_DATA))
        for (i, ha, p), ptr in zip(hosts, temps):
            if p.copies_out:
                cmds.append((lib.pto_stream_copy_d2h, (sp, ha.ptr, ptr, ha.nbytes, next(tokens)), _F_DATA))
        cmds.append((lib.pto_stream_free, (sp, temps[0], next(tokens)), _F_LAST))  # the one block
        return cmds

    def _alloc_temps(self, hosts: list, stream: Stream, label: str) -> list | None:
        """Allocate the temporaries of a launch's host arrays (lock held); None if they do not fit.

        One block for all of them, carved per array at the allocator's
        alignment, so the allocation succeeds or fails whole: a partial set
        could not be handed back at once, as the driver may carve a block
        from a free still queued on `stream`, which the work before that free
        still uses.

        Raises
        ------
        PtoError
            For a failure other than a shortage (a lost device).
        """
        sizes = [rounded(ha.nbytes) for _, ha, _ in hosts]
        nbytes = sum(sizes)
        out = self._devptr_out
        rc = lib.pto_mem_alloc(self._dev, nbytes, stream._ptr, out)
        if rc:
            if rc == _ENOMEM:
                return None
            check(rc, f"{label}: allocating {nbytes} bytes of device temporaries for its host arrays")
        ptr = int(out[0])
        temps = []
        for size in sizes:
            temps.append(ptr)
            ptr += size
        return temps

    def _alloc_locked(self, nbytes: int, stream: Stream | None, what: str) -> int:
        if nbytes >= 1 << 64:
            raise PtoArgumentError(f"{what}: {nbytes} bytes is more than a device address can span")
        out = self._devptr_out
        rc = lib.pto_mem_alloc(self._dev, max(nbytes, 1), stream._ptr if stream is not None else ffi.NULL, out)
        if rc:
            check(rc, f"{what}: allocating {nbytes} bytes of device memory")
        return int(out[0])

    def _retry_memory_locked(self) -> None:
        """Serve the launches waiting for device memory, flushing what they let through (lock held)."""
        while retry(self):
            if self._backlog:
                self._flush()
            if not self._mem_waiters:
                break

    def _queue_one(self, stream: Stream, fn, args_without_token: tuple, name: str, keep, out) -> Launch:
        """Queue one data command owned by a new Launch (lock held)."""
        launch = _make_launch(self, stream, name, 1, keep, out)
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
                launch._mark_retrieved()
                raise launch._exc
        return launch

    # -- events and ordering (lock held unless said) ------------------------------------------------

    def _record_locked(self, stream: Stream, ordering: bool = False) -> Event:
        """Record an Event on `stream` (lock held).

        ``ordering=True`` records a point that stands for no result: the event
        completes healthy even if `stream` failed before it, so waiting on it
        orders without inheriting that failure.
        """
        event = Event._make(self, stream, True)
        token = self._token(event)
        fn = lib.pto_stream_record_ordering if ordering else lib.pto_stream_record
        if self._submit(stream, fn, (stream._ptr, event._ptr, token), event, _F_LAST | _F_RECORD):
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
                return Event._of_finished(self, launch)
            if stream._closed:
                return stream._final
            return self._record_locked(stream)

    def _marker(self, stream: Stream) -> Launch:
        """Queue a notify on `stream`: a Launch that completes after everything before it."""
        self._check_open()
        with self._lock:
            if self._deferred:  # frees of collected tensors count as work queued so far
                self._process_deferred_locked()
            marker = _Marker._make(self, stream, f"stream {stream._id} sync point")
            if stream._closed:
                raise PtoClosedError(f"stream {stream._id} is closed")
            token = self._token(marker)
            if self._submit(stream, lib.pto_stream_notify, (stream._ptr, token), marker, _F_LAST):
                marker._entered = True
        return marker

    def _join_first_use(self, t: DeviceTensor, stream: Stream) -> None:
        """First use of `t` on `stream`: wait for its allocation and initial copy (lock held).

        The event was recorded right after them, so later, unrelated work on the
        allocation stream (and its failures) is not waited for.
        """
        event = t._ready
        if event is None:
            birth = t._stream
            event = birth._final if birth._closed else self._record_locked(birth)
        if event is not None:
            self._wait_event_locked(stream, event)
        t._streams.add(stream)

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
        return worker_stats(self)
