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
from .._signature import normalize_platform
from ..errors import PtoArgumentError, PtoClosedError, PtoInvalidStateError, PtoNotSupported
from . import _context, _copy, _lifecycle
from ._context import capture_of, refuse
from ._checks import check_timeout
from ._capture import Capture
from ._config import as_run_config
from ._graph import Graph
from ._kernel import KernelHandle, register
from ._launch import Launch
from ._hazards import Hazards, manual_region, sanitize_mode
from ._memory import DeviceMemory
from ._pump import SyncPump
from ._queue import CommandQueue
from ._state import CLOSED, FORKED, OPEN
from ._stats import WorkerStats, worker_stats
from ._stream import Stream, accept, sync_point
from ._tensor import DeviceTensor
from ._tracing import TraceWindow, WorkerTracing
from ._wait import add_sync_point

__all__ = ["ChipWorker", "WorkerStats"]

#: The runtime name PyPTO binds workers and programs to by default; the sim's program runtime
#: (a task ring with tensor-map dependencies, run by the scheduler threads) is that model.
DEFAULT_RUNTIME = "tensormap_and_ringbuffer"


def _check_worker_id(worker_id, what: str) -> None:
    if isinstance(worker_id, bool) or worker_id != 0:
        raise PtoArgumentError(f"{what}(): worker_id must be 0 on a ChipWorker (one chip), not {worker_id!r}")


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
      in PyPTO.
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
    level : int, optional
        PyPTO's hierarchy level; only 2 (one chip) is supported.
    runtime : str, optional
        PyPTO's runtime name; only ``"tensormap_and_ringbuffer"`` (the
        default, the runtime the simulator's programs follow).
    enable_sdma : bool, optional
        Kept (``ChipWorker.current(require_sdma=True)`` reads it); the
        simulator needs no SDMA workspace.
    auto_init : bool or None, optional
        ``False`` defers opening the device to :meth:`init` (or ``with``);
        ``None`` or ``True`` opens it now.

    Raises
    ------
    PtoArgumentError
        For a bad config or keyword.
    PtoNotSupported
        For an unknown platform, a level other than 2 or another runtime.
    PtoOutOfMemory
        If the device memory cannot be mapped.
    """

    def __init__(self, config=None, *, level: int = 2, runtime: str = DEFAULT_RUNTIME,
                 enable_sdma: bool = False, auto_init: bool | None = None):
        self._state = CLOSED
        self._opened = False
        cfg = as_run_config(config)
        if isinstance(level, bool) or not isinstance(level, int):
            raise PtoArgumentError(f"ChipWorker: level must be an int, not {level!r}")
        if level != 2:
            raise PtoNotSupported(f"ChipWorker: level={level} is not supported; only level=2 (one chip) "
                                  "is, as in PyPTO (L3 and up go through a distributed worker)")
        if runtime != DEFAULT_RUNTIME:
            raise PtoNotSupported(f"ChipWorker: runtime={runtime!r} is not supported; the simulator runs "
                                  f"{DEFAULT_RUNTIME!r}")
        for name, value in (("enable_sdma", enable_sdma), ("auto_init", auto_init)):
            if value is not None and not isinstance(value, bool):
                raise PtoArgumentError(f"ChipWorker: {name} must be a bool, not {value!r}")
        self._config = cfg
        self._platform = cfg.device_platform
        self._level = level
        self._runtime = runtime
        self._enable_sdma = bool(enable_sdma)
        self._ctx_tokens: list = []
        self._sanitize = sanitize_mode(cfg.sanitize)  # before the device opens: a bad environment raises
        if auto_init is None or auto_init:
            self._open_device()

    def init(self) -> None:
        """Open the device if the worker was made with ``auto_init=False``; idempotent.

        Raises
        ------
        PtoClosedError
            If the worker was closed: a closed worker is not reopened (PyPTO
            reopens it); create a new ChipWorker.
        """
        if self._state == OPEN:
            return
        if self._opened:
            self._check_open()
        self._open_device()

    def _open_device(self) -> None:
        cfg = self._config
        mode = self._sanitize
        out = ffi.new("pto_device **")
        check(lib.pto_device_open(self._platform.encode(), device_config(**cfg._device_fields()), out),
              f"opening a {cfg.platform!r} device")
        self._dev = out[0]
        self._profile = cfg.profile
        if cfg.timing == "model":
            rc = lib.pto_device_set_profile(self._dev, self._profile._to_c())
            if rc < 0:
                lib.pto_device_close(self._dev)
                self._dev = None
                check(rc, "pto_device_set_profile")
        info = ffi.new("pto_device_info *")
        check(lib.pto_device_get_info(self._dev, info), "pto_device_get_info")
        self._info = info
        self._lock = threading.Lock()  # the queue's lock (see _queue.py, "Threading")
        self._pump = SyncPump(self)
        self._queue = CommandQueue(self._dev, self._lock, self._pump, self._alive, self._check_open)
        self._memory = DeviceMemory(self, self._queue, info.device_memory)
        self._queue.on_service = self._memory.on_service
        # None when there is nothing to track: the bind step then only joins first uses.
        self._hazards = (Hazards(self, cfg.auto_deps, mode, cfg.sanitize_stacks)
                         if cfg.auto_deps or mode != "off" else None)
        # Weak: a stream nobody references (no tensor, launch, event or FIFO entry) is
        # destroyed by its finalizer; the queue's backlog holds streams with queued commands.
        self._streams: weakref.WeakValueDictionary[int, Stream] = weakref.WeakValueDictionary()
        self._handles: dict[int, tuple] = {}
        self._kernels: dict[tuple[str, str], object] = {}
        self._cids: dict[tuple[str, str], int] = {}  # registration ids (a handle's cid)
        self._prepared = 0  # handles made by register(): aicpu_dlopen_count
        self._raw: dict[int, DeviceTensor] = {}  # malloc'd blocks by base address
        self._async = False
        self._pid = os.getpid()
        self._captures = 0  # graph captures open on this worker, any task (_capture.py)
        self._graphs: weakref.WeakSet = weakref.WeakSet()  # graphs not closed (_graph.py)
        self._opened = True
        self._state = OPEN
        self._fold = None  # the fold point of closed streams, made at the first close (_stream.fold_point)
        try:
            self._default_stream = Stream._create(self, 0, True)
            self._tracing = WorkerTracing(self)  # swimlane and scope-stats outputs
            if self._hazards is not None:
                self._hazards.recorder = self._tracing.recorder  # its inferred waits' trace marks
                self._hazards.refresh()  # (a worker-long trace tags graph replays from the start)
        except BaseException:
            self._state = CLOSED
            if self._hazards is not None:
                self._hazards.close()
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
        if not self._opened:
            raise PtoClosedError("the ChipWorker is not initialized: it was made with auto_init=False; "
                                 "call init() or use `with`")
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
    def device_profile(self):
        """The :class:`~pypto_async.runtime.DeviceProfile` of the modeled device (``RunConfig.device_profile``).

        With ``RunConfig(timing="host")`` it is what the model would use;
        device times are then the host's.
        """
        return self._profile

    @property
    def timing(self) -> str:
        """``"model"`` (device times from :attr:`device_profile`) or ``"host"`` (the host's clock)."""
        return self._config.timing

    @property
    def platform(self) -> str:
        """The canonical platform name (``"sim"``)."""
        return self._platform

    @property
    def device_id(self) -> int:
        """Which device of its platform the worker opened (``RunConfig.device_id``)."""
        return self._info.device_id if self._opened else self._config.device_id

    @property
    def level(self) -> int:
        """PyPTO's hierarchy level: 2, one chip."""
        return self._level

    @property
    def runtime(self) -> str:
        """The runtime name programs are bound to (``"tensormap_and_ringbuffer"``)."""
        return self._runtime

    @property
    def initialized(self) -> bool:
        """True while the device is open (after construction or :meth:`init`, before :meth:`close`)."""
        return self._state == OPEN

    @classmethod
    def current(cls, *, level: int = 2, platform: str | None = None, device_id: int | None = None,
                runtime: str = DEFAULT_RUNTIME, require_sdma: bool = False) -> ChipWorker | None:
        """Return the innermost open worker around this code with this binding, or None.

        The workers are those entered with ``with`` / ``async with`` in this
        task (as PyPTO's).  ``platform`` and ``device_id`` left None match
        any; platform aliases match (``"a2a3sim"`` is ``"sim"``).

        Raises
        ------
        PtoInvalidStateError
            If the matching worker was made without ``enable_sdma=True`` and
            `require_sdma` is set.
        """
        want = None if platform is None else normalize_platform(str(platform))
        for w in reversed(_context.open_workers()):
            if not w._alive() or w._level != level or w._runtime != runtime:
                continue
            if (want is not None and w._platform != want) or (device_id is not None and w.device_id != device_id):
                continue
            if require_sdma and not w._enable_sdma:
                raise PtoInvalidStateError("the open ChipWorker was made without enable_sdma=True")
            return w
        return None

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
        state = self._pump.flavour if self._alive() else ("closed" if self._opened else "not initialized")
        return f"<ChipWorker {self._config.platform} {state}>"

    # -- opening and closing ------------------------------------------------------------------

    def __enter__(self) -> ChipWorker:
        if not self._opened:
            self.init()
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
        if not self._opened:
            self.init()
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
        :meth:`~Graph.replay` queues the whole step in one driver call.  A
        capture that recorded nothing is a graph too (as a CUDA graph with
        no nodes): its replay is a no-op on the capture's stream, a
        :class:`Launch` that completes once the work queued before it on
        that stream has.

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
        return Capture(self, name, stream, Graph._build)  # the capture records; the worker makes the Graph

    # -- waiting for everything ------------------------------------------------------------------

    def sync(self, timeout: float | None = None) -> None:
        """Block until every command queued so far, on every stream, has completed.

        The worker-wide :meth:`Stream.sync` (CUDA's device synchronize): it
        covers all streams, closed ones included, and the frees queued for
        collected tensors.  Work queued after the call, by other threads or
        tasks, is not waited for.  It raises what :meth:`Stream.sync` of
        each open stream would, at that point: the first failure an open
        stream carries, in stream order, delivered (that stream runs new
        work again); a failure another stream carries stays for that
        stream's sync, or the next worker sync.

        Parameters
        ----------
        timeout : float, optional
            Seconds to wait at most (``None``: no limit).

        Raises
        ------
        PtoDependencyError
            If an open stream carries a failure (see :meth:`Stream.sync`).
        PtoTimeout
            If the work did not complete in time (it goes on, and nothing is
            delivered).
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

        The awaitable form of :meth:`sync` (async mode), with the same reach
        and the same failures: work queued after the call is not waited for,
        and the first failure an open stream carries is raised (delivered).
        Cancelling the wait cancels no device work, and delivers nothing.

        Raises
        ------
        PtoDependencyError
            If an open stream carries a failure (see :meth:`Stream.sync`).
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
            point = sync_point(self)  # behind a marker on each open stream that may carry a failure (_stream.py)
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

        Registering the same program again returns the same handle.  Loading
        dlopens its ``kernel.so`` and runs its code in this process: never
        register a program (from ``CompiledProgram.from_dir``, or unpickled)
        that came from a source you do not trust.

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

    @property
    def host_dlopen_count(self) -> int:
        """Libraries loaded for orchestration on the host: always 0 here, as in PyPTO's device-orchestrated
        runtime (``tensormap_and_ringbuffer``), where every registration is loaded by the device."""
        self._check_open()
        return 0

    @property
    def aicpu_dlopen_count(self) -> int:
        """Callables prepared for the device, as PyPTO counts them: one per :meth:`register` that made
        a handle (a compiled program registered for the first time, or again after ``unregister()``);
        registering the same object again or launching prepares nothing.  Never decreases.

        Programs compiled to the same artifact share one copy of its code on the device (the count
        is of callables, not of copies).
        """
        self._check_open()
        return self._prepared

    def run(self, compiled, *args, stream=None, config=None):
        """Register `compiled` (once) and launch it with `args`: the one-shot form.

        Returns what the handle returns (:meth:`KernelHandle.__call__`): in
        sync mode the outputs once it completed, as PyPTO's; in async mode
        the :class:`Launch` (await it for the same value).  ``stream=None``
        means the task-local default stream; `config` is a per-call
        :class:`RunConfig`.
        """
        return self.register(compiled)(*args, stream=stream, config=config)

    # -- device memory and copies: the parts' methods, with their docstrings ---------------------------

    @_doc_of(DeviceMemory.alloc_tensor)
    def alloc_tensor(self, shape, dtype, *, init=None, stream=None, manual_deps: bool = False) -> DeviceTensor:
        t = self._memory.alloc_tensor(shape, dtype, init, stream, manual_deps)
        if self._captures and (cap := capture_of(self)) is not None:
            cap.own(t)  # allocated inside a capture: the graph owns it
        return t

    def manual_deps(self):
        """``with w.manual_deps():`` leaves the ordering of DeviceTensors across streams to you in the block.

        Launches and copies queued on this worker inside the block, by this
        task (or thread) only, get no inferred waits; order them with
        ``stream.wait(...)``.  The sanitizer, when on, checks them.  Works
        in sync and async code alike (a plain ``with``).
        """
        return manual_region(self)

    @_doc_of(DeviceMemory.free_tensor)
    def free_tensor(self, t: DeviceTensor, *, stream=None) -> None:
        self._memory.free_tensor(t, stream)

    @_doc_of(_copy.copy)
    def copy(self, dst, src, *, stream=None) -> Launch:
        return _copy.copy(self, dst, src, stream)

    @_doc_of(_copy.copy_from)
    def copy_from(self, host_ptr, dev_ptr: int, nbytes: int, *, stream=None, worker_id: int = 0) -> None:
        _check_worker_id(worker_id, "copy_from")
        _copy.copy_from(self, host_ptr, dev_ptr, nbytes, stream)

    @_doc_of(_copy.copy_to)
    def copy_to(self, dev_ptr: int, host_ptr, nbytes: int, *, stream=None, worker_id: int = 0) -> None:
        _check_worker_id(worker_id, "copy_to")
        _copy.copy_to(self, dev_ptr, host_ptr, nbytes, stream)

    def malloc(self, nbytes: int, *, worker_id: int = 0) -> int:
        """Allocate `nbytes` of device memory; return its address (PyPTO's raw ``malloc``).

        Pair it with :meth:`free`; :meth:`close` frees what is left (with a
        ``ResourceWarning``).  The address works with :meth:`copy_to` and
        :meth:`copy_from`.

        Raises
        ------
        PtoArgumentError
            For `nbytes` not an int > 0, or `worker_id` not 0.
        PtoOutOfMemory
            If the device has no room.
        """
        _check_worker_id(worker_id, "malloc")
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes <= 0:
            raise PtoArgumentError(f"malloc(): nbytes must be an int > 0, not {nbytes!r}")
        block = self._memory.alloc_tensor((nbytes,), "uint8", None, None)
        self._raw[block.data_ptr] = block
        return block.data_ptr

    def free(self, ptr: int, *, worker_id: int = 0) -> None:
        """Free an address :meth:`malloc` returned (in stream order, as ``free_tensor``).

        Raises
        ------
        PtoArgumentError
            For an address that is not a live :meth:`malloc` base of this
            worker (an interior pointer, a freed block, a tensor's address).
        """
        _check_worker_id(worker_id, "free")
        self._check_open()
        block = self._raw.pop(ptr, None) if isinstance(ptr, int) and not isinstance(ptr, bool) else None
        if block is None:
            raise PtoArgumentError(f"free(): {ptr!r} is not an address this worker's malloc() returned "
                                   "(or it was freed already)")
        self._memory.free_tensor(block, None)

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
