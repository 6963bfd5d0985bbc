"""ChipWorker: one open device, as a facade over the parts that do the work.

The worker owns its parts and holds little logic of its own:

* the command queue (:class:`~._queue.CommandQueue`: tokens, the stream
  FIFOs, completions), with its behaviour split by phase into
  :mod:`._submit`, :mod:`._complete` and :mod:`._wait`;
* device memory (:class:`~._memory.DeviceMemory`: tensors, stream-ordered and
  deferred frees, temporaries), with copies in :mod:`._copy`;
* the completion pump of its mode (:mod:`._pump`);
* its streams (:mod:`._stream`), which record and wait for events;
* tracing (:mod:`._tracing`) and statistics (:mod:`._stats`).

A launch goes from ``handle(...)`` down the dispatch path
(:mod:`._dispatch`, where its files are listed).  What is here: opening and
closing, modes, streams, registration, worker-wide waits, and the public
methods of the parts.
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref

from .._driver import check, device_config, error_for_status, ffi, lib
from ..errors import PtoArgumentError, PtoClosedError, PtoInvalidStateError
from . import _context, _copy, _lifecycle
from ._context import capture_of
from ._checks import check_timeout
from ._capture import Capture, refuse
from ._complete import cancel, on_readable
from ._config import as_run_config
from ._event import Event
from ._kernel import KernelHandle, register
from ._launch import Launch, _Marker
from ._memory import DeviceMemory
from ._pump import SyncPump
from ._queue import CommandQueue, release_waiters
from ._state import CLOSED, FORKED, OPEN
from ._stats import WorkerStats, worker_stats
from ._stream import Stream, accept
from ._tensor import DeviceTensor
from ._tracing import TraceWindow, WorkerTracing
from ._wait import add_sync_point, block_until, drive

__all__ = ["ChipWorker", "WorkerStats"]


def _doc_of(impl):
    """Give a method that forwards to a part the docstring of the part's function."""
    def document(method):
        method.__doc__ = impl.__doc__
        return method
    return document


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
        self._lock = threading.Lock()  # the queue's lock (see _queue.py, "Threading")
        self._pump = SyncPump(self)
        self._queue = CommandQueue(self._dev, self._lock, self._pump, self._alive, self._check_open)
        self._memory = DeviceMemory(self, self._queue, info.device_memory)
        self._queue.on_service = self._memory.on_service
        # Weak: a stream nobody references (no tensor, launch, event or FIFO entry) is
        # destroyed by its finalizer; the queue's backlog holds streams with queued commands.
        self._streams: weakref.WeakValueDictionary[int, Stream] = weakref.WeakValueDictionary()
        self._handles: dict[int, tuple] = {}
        self._kernels: dict[tuple[str, str], object] = {}
        self._async = False
        self._pid = os.getpid()
        self._ctx_tokens: list = []
        self._captures = 0  # graph captures open on this worker, any task (_capture.py)
        self._graphs: weakref.WeakSet = weakref.WeakSet()  # graphs not closed (_graph.py)
        self._state = OPEN
        try:
            self._default_stream = Stream._create(self, 0, True)
            self._tracing = WorkerTracing(self)  # swimlane and scope-stats outputs
        except BaseException:
            self._state = CLOSED
            dev, self._dev = self._dev, None
            self._queue.dev = None
            lib.pto_device_close(dev)
            raise
        _lifecycle.live(self)

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
    def device_id(self) -> int:
        """Which device of its platform the worker opened (``RunConfig.device_id``)."""
        return self._info.device_id

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
        _lifecycle.switch_to_async(self)
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
        _lifecycle.close(self, timeout)

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
        await _lifecycle.aclose(self, timeout)

    def __del__(self):
        _lifecycle.finalize(self)

    # -- streams ----------------------------------------------------------------------------

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
            return Stream._create(self, priority, False)

    @contextlib.contextmanager
    def use_stream(self, stream: Stream):
        """Make `stream` this task's default stream on this worker, inside the block.

        The default is task-local (a ``contextvars`` variable): other asyncio
        tasks and threads keep theirs.  If `stream` is closed inside the
        block, work queued there without ``stream=`` raises
        :class:`~pypto_async.errors.PtoClosedError`, as with ``stream=stream``.
        """
        self._check_open()
        accept(self, stream)
        token = _context.push_stream(stream)
        try:
            yield stream
        finally:
            _context.pop_stream(stream, token)

    # -- graphs ---------------------------------------------------------------------------------------

    def capture(self, name: str = "graph", *, stream=None) -> Capture:
        """Record a step once, to replay it with new arguments: ``with`` / ``async with w.capture():``.

        Inside the block, this task's launches, copies, event records and
        waits on the capture's streams are recorded instead of queued, and
        return captured nodes (:class:`CapturedNode`); ``cap.input(name,
        shape, dtype)`` declares the placeholders a replay binds.  Once the
        block has exited, ``cap.graph`` is the :class:`Graph`; its
        :meth:`~Graph.replay` queues the whole step in one driver call.

        Parameters
        ----------
        name : str
            Names the graph in errors, traces and ``repr``.
        stream : Stream, optional
            The capture's stream (``None``: the task-local default stream).
            Other streams join by waiting on captured work, and must be
            joined back (``cap.stream.wait(s)``) before the block ends.

        Raises
        ------
        PtoCaptureError
            Inside the block, for a call that would wait for captured work
            (see :class:`~pypto_async.errors.PtoCaptureError`); at its end,
            for a stream not joined back.
        """
        return Capture(self, name, stream)

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
        refuse(self, "ChipWorker.sync()")
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
        refuse(self, "ChipWorker.wait()")
        point = self._sync_point()
        await point.wait()
        self._check_device()

    def _sync_point(self) -> Launch:
        """A Launch that completes once every command queued so far has completed (no command of its own)."""
        self._check_open()
        with self._lock:
            self._memory.free_deferred_locked()  # frees of collected tensors count as work queued so far
            point = _Marker._make(self, self._default_stream, "a worker sync point")
            point._entered = True
            add_sync_point(self._queue, point)
        return point

    def _check_device(self) -> None:
        """Raise PtoDeviceLost if the device was lost (the check after a worker-wide wait)."""
        self._check_open()
        status = lib.pto_device_status(self._dev)
        if status:
            raise error_for_status(status, "the device was lost; its work did not complete")

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
        return register(self, compiled)

    def run(self, compiled, *args, stream=None):
        """Register `compiled` (once) and launch it with `args`: the one-shot form.

        Returns the :class:`Launch` (completed in sync mode; await it in
        async mode).  ``stream=None`` means the task-local default stream.
        """
        return self.register(compiled)(*args, stream=stream)

    # -- device memory and copies: the parts' methods, with their docstrings ---------------------------

    @_doc_of(DeviceMemory.alloc_tensor)
    def alloc_tensor(self, shape, dtype, *, init=None, stream=None) -> DeviceTensor:
        t = self._memory.alloc_tensor(shape, dtype, init, stream)
        if self._captures and (cap := capture_of(self)) is not None:
            cap.own(t)  # allocated inside a capture: the graph owns it
        return t

    @_doc_of(DeviceMemory.free_tensor)
    def free_tensor(self, t: DeviceTensor, *, stream=None) -> None:
        self._memory.free_tensor(t, stream)

    @_doc_of(_copy.copy)
    def copy(self, dst, src, *, stream=None) -> Launch:
        return _copy.copy(self, dst, src, stream)

    @_doc_of(_copy.copy_from)
    def copy_from(self, host_ptr, dev_ptr: int, nbytes: int, *, stream=None) -> None:
        _copy.copy_from(self, host_ptr, dev_ptr, nbytes, stream)

    @_doc_of(_copy.copy_to)
    def copy_to(self, dev_ptr: int, host_ptr, nbytes: int, *, stream=None) -> None:
        _copy.copy_to(self, dev_ptr, host_ptr, nbytes, stream)

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

    # -- what the worker's objects ask of it -------------------------------------------------
    # Launch, Event, Stream's waits, the pumps and tracing reach the parts through these
    # names: each is a one-line forward to the part that does the work.

    def _idle(self) -> bool:
        return self._queue.idle()

    @property
    def _idle_waiters(self) -> list:
        return self._queue.idle_waiters

    def _on_readable(self) -> None:
        on_readable(self._queue)

    def _drive(self, predicate, timeout: float | None) -> bool:
        return drive(self._queue, predicate, timeout)

    def _block_until(self, obj, entry: bool, timeout: float | None) -> None:
        block_until(self._queue, obj, entry, timeout)

    def _release_waiters(self, owner) -> None:
        release_waiters(self._queue, owner)

    def _cancel(self, launch: Launch) -> bool:
        return cancel(self._queue, launch)

    def _marker(self, stream: Stream) -> Launch:
        return stream._marker()

    def _event_after(self, launch: Launch) -> Event:
        return launch._stream._event_after(launch)
