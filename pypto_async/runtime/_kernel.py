"""KernelHandle: a compiled program registered on a worker, ready to launch.

:func:`register` loads a program on a worker (``ChipWorker.register``);
calling the handle goes down the dispatch path (:mod:`._dispatch`).
``RegistrationHandle`` (PyPTO's name for the class) is the same class.
"""

from __future__ import annotations

import os

from .._driver import check, ffi, lib
from .._signature import SCALAR
from ..errors import PtoArgumentError, PtoClosedError, PtoPlatformMismatch
from . import _call
from ._args import Binder
from ._config import normalize_platform
from ._deps_json import DepsWriter, write_deps
from ._hazards import launch_access
from ._dispatch import launch_kernel
from ._launch import Launch

__all__ = ["KernelHandle", "RegistrationHandle"]

_ARG_BYTES = 8  # one 64-bit slot per parameter: a device address or a scalar's bits


def fit_error(nargs: int, blocks, ring_heap: int) -> str | None:
    """Why a program's launches can never be queued on this device, or None if they can.

    The driver copies a launch's arguments into its stream's ring heap
    (``RunConfig.ring_heap`` bytes, in 8-byte slots) and takes a block count
    of 32 bits.  A program past either limit would be refused at submission,
    after its input copies were queued; checked here, it is refused before.
    """
    heap = ring_heap & ~(_ARG_BYTES - 1)
    if nargs * _ARG_BYTES > heap:
        return (f"takes {nargs} arguments ({nargs * _ARG_BYTES} bytes), more than a stream's "
                f"{heap}-byte ring heap holds: open the worker with "
                f"RunConfig(ring_heap={nargs * _ARG_BYTES}) or more")
    if isinstance(blocks, bool) or not isinstance(blocks, int) or not 1 <= blocks < 1 << 32:
        return f"has block_num={blocks!r}; the driver takes an int in [1, 2**32)"
    return None


def scope_error(largest: int, window: int) -> str | None:
    """Why a program's scope can never end on this device, or None.

    A scope's tasks stay in the task window until it ends (PyPTO's
    scopes): one that holds more tasks than ``ring_task_window`` slots
    would deadlock on the device, which reports it too; refused here, the
    launch fails before anything is queued.
    """
    if largest <= window:
        return None
    need = 1 << (largest - 1).bit_length()
    return (f"holds {largest} tasks in one pl.manual_scope(), more than ring_task_window={window} task slots "
            f"(a deadlock: a scope's tasks retire only when it ends): open the worker with "
            f"RunConfig(ring_task_window={need}) or more")


class KernelHandle:
    """A compiled program loaded on one worker; call it to launch.

    ``handle(*args, stream=None)`` queues a launch and returns its
    :class:`Launch`: in sync mode once it has completed (raising its error if
    it failed), in async mode at once (``await`` it).  ``handle.submit(...)``
    never waits for completion: ``await handle.submit(...)`` waits only for
    room in the stream's window, and in sync mode ``submit`` blocks only while
    the window is full.  The constructor refuses; use
    :meth:`ChipWorker.register`.

    Host arrays (numpy arrays, torch CPU tensors) are copied to the device
    for ``In``/``InOut`` parameters and back for ``Out``/``InOut``, in stream
    order with the launch; a :class:`DeviceTensor` skips both copies.
    ``stream=None`` means the task-local default stream.

    What a call returns (see :mod:`._call`): in sync mode the outputs, as
    PyPTO's ``RegistrationHandle`` (the allocated ``Out`` arrays of a
    return-style call, the ``Out``/``InOut`` arguments of an in-place one,
    None for a program that returns nothing); in async mode the
    :class:`Launch`, which awaits to the same value.

    As PyPTO's handle: ``handle.cid`` names the loaded kernel (handles of one
    program on one worker share it), ``handle.unregister()`` closes this
    handle (idempotent; the kernel stays loaded until the worker closes),
    ``with worker.register(compiled) as handle:`` unregisters on exit, and
    ``handle.closed`` is True after either or once the worker closed.  A
    closed handle refuses launches with :class:`~pypto_async.errors.PtoClosedError`.
    """

    __slots__ = ("_worker", "_compiled", "_kptr", "_binder", "_blocks", "_label", "_launch",
                 "_access", "_ordered", "_nargs", "_out_idx", "_has_return", "_name", "_out1", "_rs", "_unfit", "_cid", "_closed",
                 "__weakref__")

    def __init__(self, *args, **kwargs):
        raise TypeError("KernelHandle cannot be constructed directly; use ChipWorker.register(compiled)")

    @classmethod
    def _make(cls, worker, compiled, kptr, name: str, cid: int = 0, launch=lib.pto_stream_launch) -> KernelHandle:
        h = cls.__new__(cls)
        h._worker = worker
        h._compiled = compiled
        h._kptr = kptr
        # The driver call that queues one launch: (stream, kernel, blocks, args, nargs, token).
        h._launch = launch
        h._name = name
        h._binder = Binder(compiled.params, name, getattr(compiled, "specialised", None))
        # How the launch uses each argument, for the driver's ordering of a kernel launch
        # (pto_stream_launch_ordered, which queues the edges it needs with it); None for a program.
        h._access = launch_access(h._binder.params) if launch is lib.pto_stream_launch else None
        # Whether the driver knows those accesses (pto_kernel_set_arg_access, at registration): a
        # launch may then go as pto_stream_launch_ordered, in pto_stream_launch's shape.
        h._ordered = False
        h._blocks = int(getattr(compiled, "block_num", 1) or 1)
        h._label = f"launch of {name!r}"
        h._nargs = len(h._binder.params)
        h._out_idx = _call.result_indices(h._binder.params)
        h._has_return = bool(getattr(compiled, "has_return", bool(h._out_idx)))
        # The usual call shape, one output: its index, so a launch need not call _result().
        h._out1 = h._out_idx[0] if h._has_return and len(h._out_idx) == 1 else -1
        # How a return-style call (the inputs only) makes its outputs; None if the program takes none.
        h._rs = _call.return_style(h._binder.params, h._has_return)
        h._unfit = fit_error(h._nargs, h._blocks, worker._info.ring_heap) or scope_error(
            getattr(compiled, "largest_scope", 0), worker._info.ring_task_window)
        h._cid = cid
        h._closed = False
        return h

    def __call__(self, *args, stream=None, config=None):
        """Launch the program with `args` on `stream` (``None``: the task-local default).

        `args` are every parameter (in place) or, for a program that returns
        something, every parameter but the ``Out`` ones (return style: the
        outputs are allocated and returned).  `config` is a per-call
        :class:`RunConfig` (its DFX switches apply to this call; see
        :mod:`._call`).

        Returns
        -------
        object or Launch
            In sync mode, once the launch completed, its outputs (see the
            class doc); in async mode the pending :class:`Launch`
            (``await`` it for the same value).

        Raises
        ------
        PtoArgumentError
            Before anything is queued, for a wrong argument (its message
            names the parameter), or a program whose arguments cannot fit
            a stream's ring heap (the message names the limit).
        PtoOutOfMemory
            If the temporaries for host arrays can never fit (larger than the
            device, or nothing in flight would free room); nothing is queued.
            While in-flight work will free room, the launch waits for it
            instead, as for ring room.
        PtoClosedError
            If the handle was unregistered or its worker closed.
        PtoError
            In sync mode, the launch's own failure.
        """
        if config is not None or len(args) != self._nargs:
            rs = self._rs
            if config is None and rs is not None and len(args) == rs.nin:
                return _call.call_returning(self, rs, args, stream)
            return _call.call(self, args, stream, config)
        launch = launch_kernel(self._worker, self, args, stream, False)
        # A Launch in sync mode has completed: its outputs.  Inside a graph capture, the node.
        return launch if self._worker._async or type(launch) is not Launch else launch._out

    def submit(self, *args, stream=None):
        """Queue a launch without waiting for it to complete.

        Returns
        -------
        Launch
            Awaiting it waits only until its commands entered the stream's
            ring, and returns it; use :meth:`Launch.wait` (or ``sync()``)
            for completion.  In sync mode this call returns once the
            commands entered the ring.
        """
        return launch_kernel(self._worker, self, args, stream, True)

    @property
    def compiled(self):
        """The compiled program this handle launches."""
        return self._compiled

    @property
    def cid(self) -> int:
        """The registration id of the loaded kernel (PyPTO's ``cid``; informational)."""
        return self._cid

    @property
    def closed(self) -> bool:
        """True once :meth:`unregister` ran or the worker closed."""
        return self._closed or not self._worker._alive()

    def unregister(self) -> None:
        """Close this handle (idempotent), as PyPTO's.

        Later calls raise :class:`~pypto_async.errors.PtoClosedError`; the
        kernel stays loaded until the worker closes, and registering the
        program again returns a new, open handle.
        """
        if self._closed:
            return
        self._closed = True
        self._unfit = _CLOSED
        handles = self._worker._handles
        entry = handles.get(id(self._compiled))
        if entry is not None and entry[1] is self:
            del handles[id(self._compiled)]

    def __enter__(self) -> KernelHandle:
        return self

    def __exit__(self, *exc_info) -> None:
        self.unregister()

    def _refusal(self) -> Exception:
        """The error a launch of this handle raises when ``_unfit`` is set."""
        if self._unfit is _CLOSED:
            return PtoClosedError(f"{self._label}: the handle was unregistered; register the program again "
                                  "(worker.register(compiled)) for a new one")
        return PtoArgumentError(f"{self._label}: the program {self._unfit}")

    @property
    def name(self) -> str:
        """The program's name (its kernel symbol)."""
        return self._name

    @property
    def params(self):
        """The program's parameters (:class:`~pypto_async._signature.ParamSpec` tuple)."""
        return self._binder.params

    @property
    def worker(self):
        """The :class:`ChipWorker` it is registered on."""
        return self._worker

    def program_stats(self) -> dict:
        """The ring statistics of a program, over every run so far (see ``pto_program_stats``).

        ``runs`` and ``tasks`` (task instances submitted); ``window_hwm``,
        ``dep_hwm``, ``heap_hwm``: the most task slots, dependency entries
        and intermediate bytes in use at once; ``window_waits``,
        ``dep_waits``, ``heap_waits``: how often the orchestration waited
        for each ring (back-pressure inside the device).

        Raises
        ------
        PtoArgumentError
            If this handle launches a kernel, not a program.
        """
        if self._launch is lib.pto_stream_launch:
            raise PtoArgumentError(f"{self._name!r} is a kernel, not a program: it has no program statistics")
        st = ffi.new("pto_program_stats *")
        check(lib.pto_program_get_stats(self._kptr, st), "pto_program_get_stats")
        return {name: int(getattr(st, name)) for name, _ in ffi.typeof("pto_program_stats").fields}

    def resolved_graph(self):
        """The task graph the driver resolved in this program's last recorded run, or None.

        A program without a compile-time table (its orchestration loops over
        values it reads when it runs, or it submits more tasks than the table
        holds) has its edges resolved by the driver as each task is
        submitted; a run records them once recording is on (a worker or a
        call with ``enable_dep_gen``, or :meth:`record_edges`).  Returns a
        :class:`~pypto_async.ir._deps.TaskGraph`: its tasks by instance with
        their site's name, its edges ``"inferred"`` with the hazard and the
        parameter (or ``"intermediate N"``) of the first conflict found, or
        ``"declared"`` with no hazard where the task orders after every one
        before it (a site without accesses, declared dependencies, a manual
        scope) or waits for the task a ``ring_task_window`` back.  None when
        no run was recorded.

        Raises
        ------
        PtoArgumentError
            If this handle launches a kernel, not a program.
        """
        if self._launch is lib.pto_stream_launch:
            raise PtoArgumentError(f"{self._name!r} is a kernel, not a program: it has no task graph")
        return resolved_graph(self._kptr, [p.name for p in self._binder.params])

    def record_edges(self, on: bool = True) -> None:
        """Record (or stop recording) the edges the driver resolves in this program's runs (:meth:`resolved_graph`)."""
        if self._launch is lib.pto_stream_launch:
            raise PtoArgumentError(f"{self._name!r} is a kernel, not a program: it has no task graph")
        check(lib.pto_program_record_edges(self._kptr, 1 if on else 0), "pto_program_record_edges")

    def _result(self, args):
        if not self._has_return:
            return None
        idx = self._out_idx
        if len(idx) == 1:
            return args[idx[0]]
        if not idx:
            return None
        return tuple(args[i] for i in idx)

    def __repr__(self) -> str:
        state = " closed" if self.closed else ""
        return f"<KernelHandle {self._name!r} cid={self._cid}{state} on {self._worker!r}>"


class _DepsLaunch(Launch):
    """A launch of a table-less program on a worker with ``enable_dep_gen``: its run's graph goes to deps.json.

    The same object as a :class:`Launch` (its class is switched while the
    launch has not finished); completing healthy hands its handle to the
    worker's :class:`~._deps_json.DepsWriter`, on whatever thread delivers
    the completion, without waiting for the file.
    """

    __slots__ = ()

    def _finish(self) -> None:
        super()._finish()
        writer = self._worker._deps_writer
        handle = writer.launches.pop(self, None)
        if handle is not None and self._exc is None:
            writer.note(handle)


class _DepsHandle(KernelHandle):
    """The handle of a program without a compile-time table on a worker opened with ``enable_dep_gen``.

    Each completed run writes ``<output dir>/dfx_outputs/deps.json`` with the
    graph the driver resolved in it: in sync mode before the call returns, in
    async mode once the completion is delivered (every one on disk when the
    worker has closed).
    """

    __slots__ = ()

    def __call__(self, *args, stream=None, config=None):
        out = KernelHandle.__call__(self, *args, stream=stream, config=config)
        self._after(out)
        return out

    def submit(self, *args, stream=None):
        launch = KernelHandle.submit(self, *args, stream=stream)
        self._after(launch)
        return launch

    def _after(self, launch) -> None:
        worker = self._worker
        writer = worker._deps_writer
        if not isinstance(launch, Launch):  # sync mode's outputs: the run has completed
            if not worker._async and worker._captures == 0:
                writer.write_now(self)  # no event loop here: written before the call returns
            return
        q = worker._queue
        with q.lock:  # completions are delivered under it: the launch finishes before or after the switch
            if not launch._plain:  # (a Launch, or a submit()'s: its await is Launch's too once switched)
                return
            if not launch._done:
                writer.launches[launch] = self
                launch.__class__ = _DepsLaunch
                return
        if launch._exc is None:
            if worker._async:
                writer.note(self)
            else:
                writer.write_now(self)


def _deps_writer(worker) -> DepsWriter:
    writer = getattr(worker, "_deps_writer", None)
    if writer is None:
        writer = worker._deps_writer = DepsWriter()
    return writer


#: PyPTO's name for the handle class.
RegistrationHandle = KernelHandle

_CLOSED = "is unregistered"  # the _unfit mark of an unregistered handle


def _run_program(sp, pp, blocks, values, nargs, tok) -> int:
    """Queue one run of a program: ``pto_stream_launch``'s shape, for :attr:`KernelHandle._launch`."""
    return _stream_run_program(sp, pp, values, nargs, tok)


_stream_run_program = lib.pto_stream_run_program


def register(worker, compiled) -> KernelHandle:
    """Load `compiled` on `worker` once and return its handle (see :meth:`ChipWorker.register`).

    The worker keeps the handle by program (a program registered again gets
    the same handle) and the loaded kernel by shared object and symbol.

    Loading dlopens the program's ``kernel.so`` and runs its code in this
    process: never register a program (one from ``from_dir``, or unpickled)
    that came from a source you do not trust.
    """
    entry = worker._handles.get(id(compiled))
    if entry is not None and entry[0] is compiled:
        return entry[1]
    if getattr(compiled, "extent_of", None) or hasattr(compiled, "for_args"):
        # pl.dynamic leading extents read at run time: the loaded artifact takes them as hidden
        # trailing scalars, which the caller never passes (pypto_async.language._dynamic).
        handle = ExtentsHandle(worker, compiled)
        worker._handles[id(compiled)] = (compiled, handle)
        return handle
    return _register(worker, compiled, id(compiled))


def _artifact(compiled) -> tuple[str, str, bool]:
    """The library `compiled` loads and its entry symbol (a program's task graph, not the one-kernel
    form beside it), and whether it is a program: the key of the worker's loaded kernels and cids."""
    program = getattr(compiled, "kind", "kernel") == "program"
    symbol = str(compiled.program_symbol if program else compiled.symbol)
    return os.fspath(compiled.lib_path), symbol, program


def _cid(worker, key: tuple[str, str]) -> int:
    """The registration id of the loaded artifact `key` (worker._lock held): numbered as first registered."""
    return worker._cids.setdefault(key, len(worker._cids) + 1)


def _register(worker, compiled, key) -> KernelHandle:
    """Load `compiled` (a program taking every parameter it declares) and make its handle, kept by `key`."""
    entry = worker._handles.get(key)
    if entry is not None and entry[0] is compiled and not entry[1]._closed:
        return entry[1]
    for attr in ("platform", "params", "lib_path", "symbol"):
        if not hasattr(compiled, attr):
            raise PtoArgumentError(
                f"{type(compiled).__name__} is not a compiled program: it has no {attr!r} "
                "(compile it with pypto_async.ir.compile)"
            )
    name = str(getattr(compiled, "name", None) or compiled.symbol)
    if normalize_platform(str(compiled.platform)) != worker._platform:
        raise PtoPlatformMismatch(
            f"{name!r} was compiled for platform {compiled.platform!r}, but this worker runs "
            f"{worker._config.platform!r}: compile it for the platform you dispatch on"
        )
    path, symbol, program = _artifact(compiled)
    with worker._lock:
        kptr = worker._kernels.get((path, symbol))
        if kptr is None:
            if program:  # the orchestration and its tasks, loaded for the device's schedulers
                out = ffi.new("pto_program **")
                check(lib.pto_program_load(worker._dev, path.encode(), symbol.encode(), out),
                      f"loading program {symbol!r} from {path}")
            else:
                out = ffi.new("pto_kernel **")
                check(lib.pto_kernel_load(worker._dev, path.encode(), symbol.encode(), out),
                      f"loading {symbol!r} from {path}")
            kptr = out[0]
            worker._kernels[(path, symbol)] = kptr
        cid = _cid(worker, (path, symbol))
        # A program without a table on a worker with dep gen: each run's resolved graph is its deps.json.
        deps_each_run = (worker._config.enable_dep_gen and program
                         and getattr(compiled, "task_graph", None) is None)
        if deps_each_run:
            _deps_writer(worker)
        handle = (_DepsHandle if deps_each_run else KernelHandle)._make(
            worker, compiled, kptr, name, cid, _run_program if program else lib.pto_stream_launch)
        # Which arguments are device addresses: the driver checks each launch's against device memory.
        kinds = [lib.PTO_ARG_SCALAR if p.direction == SCALAR else lib.PTO_ARG_TENSOR for p in handle.params]
        declare = lib.pto_program_set_arg_kinds if program else lib.pto_kernel_set_arg_kinds
        check(declare(kptr, ffi.new("uint8_t[]", kinds) if kinds else ffi.NULL, len(kinds)),
              f"declaring the arguments of {symbol!r}")
        if handle._access is not None:
            # Declared once per kernel: another handle of it that uses its arguments differently
            # (the driver refuses the second declaration) orders its launches the general way.
            handle._ordered = lib.pto_kernel_set_arg_access(kptr, handle._access, handle._nargs) == 0
        worker._handles[key] = (compiled, handle)
        worker._prepared += 1
    graph = getattr(compiled, "task_graph", None)
    if worker._config.enable_dep_gen and graph is not None:
        write_deps(graph, compiled.output_dir, name)
    elif worker._config.enable_dep_gen and program:
        handle.record_edges()  # no table: each run's resolved edges are the graph (_DepsHandle)
    return handle


class ExtentsHandle:
    """The handle of a program whose ``pl.dynamic`` leading extents are read at run time.

    Called with the program's own parameters, in place, as its ``compiled(...)`` is: each call
    takes the extents from its tensor arguments (the program's ``for_args`` checks them and gives
    the artifact's view for them, loaded once per set of extents) and passes them as the hidden
    scalars the artifact declares after the parameters (a call that gives them too, as the view's
    own ``__call__`` does, passes its arguments as they are).  ``unregister()``, ``with``, ``closed``
    and ``compiled`` are :class:`KernelHandle`'s.
    """

    def __init__(self, worker, compiled):
        self._worker = worker
        self._compiled = compiled
        self._views: dict = {}  # id(view) -> (view, its KernelHandle)
        self._closed = False
        self._name = str(getattr(compiled, "name", None) or compiled.symbol)

    def _bind(self, args):
        if self.closed:
            raise PtoClosedError(f"launch of {self._name!r}: the handle was "
                                 "unregistered; register the program again (worker.register(compiled)) for a new one")
        resolve = getattr(self._compiled, "for_args", None)
        view = self._compiled if resolve is None else resolve(*args)  # checks the arguments' count and shapes
        entry = self._views.get(id(view))
        if entry is None or entry[0] is not view:
            entry = self._views[id(view)] = (view, _register(self._worker, view, ("extents", id(view))))
        if len(args) != view.user_arity:  # the extents given too (the view's own __call__ passes them)
            return entry[1], args
        return entry[1], (*args, *(int(args[i].shape[a]) for i, a in view.extent_of))

    def __call__(self, *args, stream=None, config=None):
        handle, full = self._bind(args)
        return handle(*full, stream=stream, config=config)

    def submit(self, *args, stream=None):
        handle, full = self._bind(args)
        return handle.submit(*full, stream=stream)

    @property
    def compiled(self):
        """The compiled program this handle launches."""
        return self._compiled

    @property
    def name(self) -> str:
        """The program's name (its kernel symbol)."""
        return self._name

    @property
    def cid(self) -> int:
        """The registration id of the loaded artifact (every extent's view loads the same one)."""
        path, symbol, _ = _artifact(self._compiled)
        with self._worker._lock:
            return _cid(self._worker, (path, symbol))

    @property
    def closed(self) -> bool:
        """True once :meth:`unregister` ran or the worker closed."""
        return self._closed or not self._worker._alive()

    def unregister(self) -> None:
        """Close this handle and the views it loaded (idempotent), as :meth:`KernelHandle.unregister`."""
        if self._closed:
            return
        self._closed = True
        for _, handle in self._views.values():
            handle.unregister()
        entry = self._worker._handles.get(id(self._compiled))
        if entry is not None and entry[1] is self:
            del self._worker._handles[id(self._compiled)]

    def __enter__(self) -> ExtentsHandle:
        return self

    def __exit__(self, *exc_info) -> None:
        self.unregister()


_HAZARDS = {lib.PTO_TASK_RAW: "RAW", lib.PTO_TASK_WAW: "WAW", lib.PTO_TASK_WAR: "WAR"}


def resolved_graph(kptr, params: list[str]):
    """The last recorded run's resolved graph of program `kptr` (see :meth:`KernelHandle.resolved_graph`)."""
    from ..ir._deps import Edge, Task, TaskGraph  # here: the compiler's graph types, loaded only when a graph is asked for

    nt, ne = ffi.new("uint32_t *"), ffi.new("uint32_t *")
    sites, edges, cap_t, cap_e = ffi.NULL, ffi.NULL, 0, 0
    while True:
        check(lib.pto_program_last_edges(kptr, sites, cap_t, edges, cap_e, nt, ne), "pto_program_last_edges")
        if not nt[0]:
            return None
        if nt[0] <= cap_t and ne[0] <= cap_e:
            break
        cap_t, cap_e = nt[0], ne[0]  # a later run may be larger still: ask again
        sites, edges = ffi.new("uint32_t[]", cap_t), ffi.new("uint32_t[]", 4 * cap_e + 4)
    n, m = nt[0], ne[0]
    names: dict[int, str] = {}
    tasks = []
    for i in range(n):
        s = sites[i]
        if s not in names:
            names[s] = ffi.string(lib.pto_program_site_name(kptr, s)).decode()
        tasks.append(Task(i, names[s], ()))
    raw = ffi.unpack(edges, 4 * m) if m else []
    out = []
    for k in range(m):
        src, dst, hz, slot = raw[4 * k:4 * k + 4]
        if hz == lib.PTO_TASK_DECLARED:
            out.append(Edge(src, dst, "declared"))
            continue
        tensor = params[slot] if slot < len(params) else f"intermediate {slot - len(params)}"
        out.append(Edge(src, dst, "inferred", _HAZARDS[hz], tensor))
    return TaskGraph(tuple(tasks), tuple(out))
