"""Many machines through Ray: an async actor owns a ChipWorker; callers hold handles.

This module is the optional ``ray`` extra (``python3 -m pip install '.[ray]'`` in the source checkout)
and the only one in the package that imports Ray.

* :class:`ChipActor` is a Ray actor class (``ChipActor.remote(config)``,
  ``ChipActor.options(...)`` as for any actor).  Each actor owns one
  :class:`~pypto_async.runtime.ChipWorker` in async mode, opened in the
  actor's event loop on its first call.  Its methods are coroutines, so Ray
  runs several calls at once, and each ``run`` goes on the next of the
  worker's streams: calls overlap on the device.
* :class:`TensorRef` names a device tensor that stays on the actor that made
  it (``put``, ``alloc``).  It is four small fields and pickles as such; any
  other actor refuses it.
* :func:`call` and :func:`pipeline` are the caller's helpers.  An error raised
  inside an actor reaches the caller with its
  :class:`~pypto_async.errors.PtoError` type (Ray re-raises it as an instance
  of that class); a dead actor reaches the helpers as
  :class:`~pypto_async.errors.PtoDeviceLost`.

Work travels as whole programs and batches: a Ray actor round trip costs
far more than a launch, so never ship single small kernels one by one.
Programs travel by pickle (a :class:`~pypto_async.ir.CompiledProgram` pickles
as its artifact and is rebuilt through the receiving machine's kernel
cache); device tensors never do.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import itertools
import sys
from dataclasses import dataclass

import numpy as np
import ray
from ray.exceptions import RayActorError, RayTaskError

from ._signature import IN, INOUT, OUT
from .errors import (
    PtoArgumentError,
    PtoClosedError,
    PtoDeviceLost,
    PtoForeignTensorError,
    PtoTensorFreedError,
)
from .runtime import ChipWorker, DeviceTensor

__all__ = ["ChipActor", "ChipWorkerActor", "TensorRef", "call", "pipeline", "run_program"]

#: Streams a ChipActor spreads its ``run`` calls over (round robin).
DEFAULT_STREAMS = 4


@dataclass(frozen=True)
class TensorRef:
    """A device tensor resident on one :class:`ChipActor`: the handle callers hold.

    Returned by ``put``, ``alloc`` and by ``run`` for an output bound to a
    TensorRef.  Pass it back to the same actor's ``run``, ``get`` and
    ``free``; another actor refuses it
    (:class:`~pypto_async.errors.PtoForeignTensorError`).

    Attributes
    ----------
    actor_id : str
        The owning actor's Ray actor id (hex).
    key : str
        The tensor's name on that actor.
    shape : tuple of int
    dtype : str
        numpy's name of the element type (``"float32"``; ``"bfloat16"``).
    """

    actor_id: str
    key: str
    shape: tuple[int, ...]
    dtype: str

    def __repr__(self) -> str:
        return f"<TensorRef {self.key} {self.dtype}{list(self.shape)} on actor {self.actor_id[:8]}>"


class ChipWorkerActor:
    """The body of :class:`ChipActor`: one ChipWorker in async mode, tensors by key.

    Use ``ChipActor.remote(config)``; this plain class is what
    ``ray.remote`` wraps (subclass it and wrap the subclass to add methods).

    Parameters
    ----------
    config : RunConfig or dict, optional
        The worker's device (``None``: the defaults).  A bad config (or
        `streams`) raises its :class:`~pypto_async.errors.PtoArgumentError`
        at every call; the actor stays alive.
    streams : int, optional
        How many streams ``run`` calls are spread over (round robin):
        calls in flight at once overlap on the device up to this many.
    """

    def __init__(self, config=None, *, streams: int = DEFAULT_STREAMS):
        # Nothing is checked here: an error in an actor's constructor kills the actor, and its
        # callers would see only that (PtoDeviceLost); checked on the first call, it keeps its type.
        self._config = config
        self._nstreams = streams
        self._worker: ChipWorker | None = None
        self._opening: asyncio.Lock | None = None
        self._streams: list = []
        self._turn = 0  # run calls so far: the next one goes on stream _turn % streams
        self._programs: dict[str, object] = {}
        self._tensors: dict[str, DeviceTensor] = {}
        self._keys = itertools.count(1)
        # Outside an actor (the class used directly, in tests) there is no actor id, and asking the
        # runtime context would start Ray.
        self._id = (ray.get_runtime_context().get_actor_id() if ray.is_initialized() else None) or "local"

    # -- the worker, opened in the actor's event loop -------------------------------------

    async def _open(self) -> ChipWorker:
        # Ray runs an async actor's methods in one event loop, but not __init__: the worker
        # opens (and its completion pump starts) in that loop, on the first call.
        if self._worker is not None:
            return self._worker
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if self._worker is None:
                n = self._nstreams
                if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                    raise PtoArgumentError(f"ChipActor: streams must be an int >= 1, not {n!r}")
                worker = ChipWorker(self._config)
                await worker.open()
                self._streams = [worker.stream() for _ in range(self._nstreams)]
                self._worker = worker
        return self._worker

    def _next_stream(self):
        stream = self._streams[self._turn % len(self._streams)]
        self._turn += 1
        return stream

    def _ref(self, t: DeviceTensor) -> TensorRef:
        key = f"t{next(self._keys)}"
        self._tensors[key] = t
        return TensorRef(self._id, key, tuple(t.shape), t.dtype.np_name)

    def _tensor(self, ref: TensorRef, what: str) -> DeviceTensor:
        if ref.actor_id != self._id:
            raise PtoForeignTensorError(
                f"{what}: {ref!r} belongs to another ChipActor ({ref.actor_id}), not to this one "
                f"({self._id}); a tensor stays on the actor that made it: get() it there and put() "
                "the array here"
            )
        t = self._tensors.get(ref.key)
        if t is None:
            raise PtoTensorFreedError(f"{what}: {ref!r} was freed (or its actor closed)")
        return t

    # -- programs ----------------------------------------------------------------------

    async def register(self, compiled) -> str:
        """Register a compiled program (it arrives pickled as its artifact); return its key.

        The same program registered again gets the same key.

        Raises
        ------
        PtoPlatformMismatch, PtoArgumentError, PtoLoadError
            As :meth:`ChipWorker.register` raises them.
        """
        worker = await self._open()
        # Each arrival is a new object (unpickled here): the key names the loaded code instead.
        lib, symbol = getattr(compiled, "lib_path", None), getattr(compiled, "symbol", None)
        digest = hashlib.sha256(f"{lib}\0{symbol}".encode()).hexdigest()[:16]
        key = f"{getattr(compiled, 'name', None) or symbol}-{digest}"
        if key not in self._programs:
            self._programs[key] = worker.register(compiled)
        return key

    async def run(self, key: str, *args):
        """Launch a registered program and return its outputs, once it completed.

        Arguments bind as ``handle(*args)`` binds them, with three changes
        for arguments that crossed a process boundary: a :class:`TensorRef`
        binds this actor's resident tensor (and comes back as itself); a
        host array for an ``Out``/``InOut`` parameter is copied, so the
        output is a new numpy array in the return value (Ray's arrays are
        read-only, and the caller's are never written); and ``None`` for an
        ``Out`` parameter means a new array of the parameter's shape and
        dtype.

        Returns
        -------
        What the kernel returns; for a kernel that returns nothing, what is
        bound to its ``Out``/``InOut`` parameters (one, or a tuple in
        parameter order; ``None`` if it has none), as the outputs made or
        copied here would be lost otherwise.

        Raises
        ------
        PtoClosedError
            After :meth:`close`.
        PtoArgumentError
            For an unknown key or a wrong argument, before anything is queued.
        PtoForeignTensorError, PtoTensorFreedError
            For a TensorRef of another actor, or one freed.
        PtoError
            The launch's own failure.
        """
        worker = await self._open()
        if worker.is_closed:
            raise PtoClosedError(f"run({key!r}): this ChipActor is closed")
        handle = self._programs.get(key)
        if handle is None:
            raise PtoArgumentError(f"no program registered under {key!r} on this actor: register() it first")
        refs: dict[int, TensorRef] = {}
        bound = [self._bind(handle.params, i, arg, refs) for i, arg in enumerate(args)]
        result = await handle(*bound, stream=self._next_stream())
        if result is None:  # the kernel returns nothing: its outputs are what it was bound to
            outs = [a for p, a in zip(handle.params, bound) if p.direction in (OUT, INOUT)]
            result = outs[0] if len(outs) == 1 else tuple(outs) if outs else None
        if isinstance(result, tuple):
            return tuple(refs.get(id(r), r) for r in result)
        return refs.get(id(result), result)

    def _bind(self, params, i: int, arg, refs: dict):
        param = params[i] if i < len(params) else None
        if isinstance(arg, TensorRef):
            t = self._tensor(arg, f"argument {param.name if param else i}")
            refs[id(t)] = arg
            return t
        if param is None or param.direction not in (OUT, INOUT):
            return arg  # an input, or an extra argument the binder will name
        if arg is None and param.direction == OUT:
            return np.empty(param.shape, dtype=param.dtype.np_storage)
        host = _as_numpy(arg)
        if host is None:
            return arg  # not a host array: the binder says what it expected
        if param.direction == OUT:
            return np.empty(host.shape, dtype=host.dtype)
        return np.array(host, copy=True)

    # -- device tensors -------------------------------------------------------------------

    async def put(self, array) -> TensorRef:
        """Copy a host array (numpy, torch CPU) into a new resident tensor; return its ref."""
        worker = await self._open()
        if _as_numpy(array) is None:
            raise PtoArgumentError(f"put: expected a numpy array or a torch CPU tensor, not {type(array).__name__}")
        return self._ref(worker.alloc_tensor(tuple(array.shape), array.dtype, init=array))

    async def alloc(self, shape, dtype, init=None) -> TensorRef:
        """Allocate a resident tensor (as ``ChipWorker.alloc_tensor``); return its ref."""
        worker = await self._open()
        return self._ref(worker.alloc_tensor(shape, dtype, init=init))

    async def get(self, ref: TensorRef) -> np.ndarray:
        """Copy a resident tensor to a new numpy array (``bfloat16`` as ``uint16`` storage)."""
        await self._open()
        return await self._tensor(ref, "get").to_host()

    async def free(self, ref: TensorRef) -> None:
        """Free a resident tensor in stream order; the ref is dead afterwards."""
        await self._open()
        t = self._tensor(ref, "free")
        del self._tensors[ref.key]
        t.free()

    # -- boxes of resident tensors (a multi-chip program's cross-rank operations) -------------------

    async def read(self, ref: TensorRef, offsets=None, shape=None) -> np.ndarray:
        """A box of a resident tensor as a new numpy array (all of it without `offsets` and `shape`).

        Read after everything queued on the tensor so far (the worker's
        ordering), as :meth:`get`.
        """
        await self._open()
        host = await self._tensor(ref, "read").to_host()
        if offsets is None:
            return host
        return np.ascontiguousarray(host[tuple(slice(o, o + n) for o, n in zip(offsets, shape))])

    async def update(self, ref: TensorRef, array, offsets=None, add: bool = False) -> None:
        """Write (``add``: add) a host array into a resident tensor at `offsets`; return once it is there.

        A whole overwrite is one copy; a box, or an add, is a copy into a
        temporary and a small kernel on the device, ordered after what was
        queued on the tensor before (so a box never clobbers the rest of the
        tensor, whatever the device runs meanwhile).
        """
        from ._dtypes import as_dtype
        from .runtime.distributed_runner import box_kernel

        worker = await self._open()
        t = self._tensor(ref, "update")
        host = _as_numpy(array)
        if host is None:
            raise PtoArgumentError(f"update: expected a numpy array or a torch CPU tensor, not {type(array).__name__}")
        host = np.ascontiguousarray(host, dtype=t.dtype.np_storage)
        offs = tuple(int(o) for o in offsets) if offsets is not None else (0,) * len(t.shape)
        if host.shape == tuple(t.shape) and not add:
            await worker.copy(t, host).wait()
            return
        handle = worker.register(box_kernel(tuple(t.shape), host.shape, offs, as_dtype(t.dtype), bool(add)))
        inbox = worker.alloc_tensor(host.shape, host.dtype, init=host)
        try:
            await handle(inbox, t)
        finally:
            inbox.free()

    async def combine(self, ref: TensorRef, kind: str, mode: str, root: int, rank: int, *arrays) -> None:
        """Write into `ref` this rank's part of collective `kind` over every rank's array (in rank order).

        `arrays` arrive as Ray objects, store to store.  ``allreduce``: `mode`
        (``"sum"``, ``"max"``, ``"min"``, ``"prod"``) over all of them;
        ``broadcast``: the root's; ``allgather``: row ``j`` is rank ``j``'s
        array; ``all_to_all``: row ``j`` is row `rank` of rank ``j``'s;
        ``reduce_scatter``: row `rank` reduced with `mode`, the other rows
        this rank's own.
        """
        t = self._tensor(ref, "combine")
        out = _combine(kind, mode, root, rank, [np.asarray(a) for a in arrays], tuple(t.shape))
        await self.update(ref, out.astype(t.dtype.np_storage, copy=False))

    # -- the worker ---------------------------------------------------------------------------

    async def stats(self):
        """The worker's :class:`~pypto_async.runtime.WorkerStats`."""
        worker = await self._open()
        return worker.stats()

    async def close(self) -> None:
        """Free every resident tensor and close the worker (idempotent); later calls fail closed."""
        worker = await self._open()
        tensors, self._tensors = self._tensors, {}
        for t in tensors.values():
            t.close()
        self._programs.clear()
        await worker.aclose()


_REDUCE = {"sum": np.sum, "max": np.max, "min": np.min, "prod": np.prod}


def _combine(kind: str, mode: str, root: int, rank: int, arrays: list, shape) -> np.ndarray:
    """Rank `rank`'s result of collective `kind` over every rank's array (see ChipWorkerActor.combine)."""
    if kind == "allreduce":
        return _REDUCE[mode](np.stack(arrays), axis=0)
    if kind == "broadcast":
        return arrays[root]
    if kind == "allgather":
        return np.stack([a.reshape(-1) for a in arrays]).reshape(shape)
    if kind == "all_to_all":
        return np.stack([a[rank] for a in arrays]).reshape(shape)
    if kind == "reduce_scatter":
        out = np.array(arrays[rank], copy=True)
        out[rank] = _REDUCE[mode](np.stack([a[rank] for a in arrays]), axis=0)
        return out
    raise PtoArgumentError(f"combine: unknown collective {kind!r}")


#: The Ray actor class: ``ChipActor.remote(RunConfig(platform="sim"))``.
ChipActor = ray.remote(ChipWorkerActor)


def _as_numpy(obj) -> np.ndarray | None:
    """A numpy view of a host array (torch CPU tensors too; ``bfloat16`` as uint16), or None."""
    if isinstance(obj, np.ndarray):
        return obj
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor) and obj.device.type == "cpu":
        t = obj.detach()
        return (t.view(torch.uint16) if t.dtype == torch.bfloat16 else t).numpy()
    return None


# -- the caller's side ---------------------------------------------------------------------------


async def _settle(ref, what: str):
    """Await an ObjectRef, turning a dead actor into PtoDeviceLost."""
    try:
        return await ref
    except (RayActorError, RayTaskError) as exc:
        # A task whose argument was a dead actor's result fails as a RayTaskError caused by the death.
        upstream = isinstance(exc, RayTaskError)
        death = exc.cause if upstream else exc
        if not isinstance(death, RayActorError):
            raise
        whose = "a ChipActor it depended on" if upstream else "the ChipActor"
        raise PtoDeviceLost(f"{what}: {whose} died ({type(death).__name__}): {death}") from exc


async def call(method, *args):
    """Call an actor method and await its result: ``await call(actor.run, key, x, w)``.

    Errors raised in the actor keep their :class:`~pypto_async.errors.PtoError`
    type; a dead actor raises :class:`~pypto_async.errors.PtoDeviceLost`.  ``ray.kill``
    returns before the actor is dead: a call sent right after it can still run and return.
    """
    return await _settle(method.remote(*args), "call")


def _stage(spec, n: int) -> tuple:
    if not isinstance(spec, tuple) or len(spec) not in (2, 3):
        raise PtoArgumentError(f"pipeline stage {n}: expected (actor, key) or (actor, key, extra args), got {spec!r}")
    actor, key, *rest = spec
    extra = tuple(rest[0]) if rest else ()
    if not hasattr(actor, "run") or not isinstance(key, str):
        raise PtoArgumentError(f"pipeline stage {n}: expected a ChipActor handle and a program key, got {spec!r}")
    return actor.run, key, extra


async def pipeline(stages, inputs, depth: int = 4) -> list:
    """Run each input through `stages`, at most `depth` inputs in flight; results in input order.

    Stage k calls ``actor.run(key, value, *extra)`` where `value` is the
    input (k = 0) or what stage k-1 returned.  A stage's result goes to the
    next actor as a Ray object reference, from store to store, without
    passing through the caller.  Run it in an asyncio event loop.

    Parameters
    ----------
    stages : sequence of tuple
        ``(actor, key)`` or ``(actor, key, extra_args)`` per stage.
    inputs : iterable
        The first stage's values (consumed as the window moves).
    depth : int, optional
        Inputs in flight at most.

    Raises
    ------
    PtoArgumentError
        For a bad stage or depth, before anything is sent.
    PtoDeviceLost
        If an actor died.
    PtoError
        The first failing input's error, with its type.
    """
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise PtoArgumentError(f"pipeline: depth must be an int >= 1, not {depth!r}")
    plan = [_stage(s, n) for n, s in enumerate(stages)]
    if not plan:
        raise PtoArgumentError("pipeline: no stages")
    window: collections.deque = collections.deque()
    results = []
    for value in inputs:
        if len(window) >= depth:
            results.append(await _settle(window.popleft(), "pipeline"))
        for run, key, extra in plan:
            value = run.remote(key, value, *extra)
        window.append(value)
    while window:
        results.append(await _settle(window.popleft(), "pipeline"))
    return results


# -- a multi-chip program with its ranks on actors ---------------------------------------------------


async def run_program(compiled, actors, *args, callbacks=None):
    """Run a multi-chip program (a DistributedCompiledProgram) with rank ``r`` on ``actors[r]``.

    The actors (:class:`ChipActor` handles, one per rank, on any machines of
    the Ray cluster) each run their rank's segments on their own device;
    every cross-rank operation moves its data between actors as Ray objects,
    store to store (a remote load is ``read`` on the peer passed straight to
    ``update`` here; a collective hands every rank's window to every rank's
    ``combine``), and each rank's steps run in program order, each after the
    last has completed.  Barriers and collectives meet every rank; a wait
    reads its cell again whenever another rank made progress, and when no
    rank can move the plan deadlocked
    (:class:`~pypto_async.errors.PtoInvalidStateError`).  Outputs land in
    the caller's host arrays (numpy or torch) once the run completed; a
    failed run writes none of them.  Run it in an asyncio event loop.

    Parameters
    ----------
    compiled : DistributedCompiledProgram
    actors : sequence of ChipActor handles
        One per rank (``len(actors) == compiled.world_size``).
    *args
        The host function's arguments: host arrays and scalars (a
        DeviceTensor lives in one process and cannot travel).
    callbacks : dict, optional
        ``{name: fn}`` for the SubWorkers whose body is ``...``; they run in
        a thread of this process with the host arrays, as in
        ``compiled.prepare(callbacks=...)``.

    Returns
    -------
    What the host function returned (a host array argument, or None).

    Raises
    ------
    PtoArgumentError
        For arguments or actors that do not fit, before anything is sent.
    PtoDeviceLost
        If an actor died.
    """
    from .runtime.distributed_runner import check_args

    if type(compiled).__name__ != "DistributedCompiledProgram":
        raise PtoArgumentError(f"run_program: expected a DistributedCompiledProgram, got {type(compiled).__name__}")
    actors = list(actors)
    if len(actors) != compiled.world_size or not all(hasattr(a, "run") for a in actors):
        raise PtoArgumentError(f"run_program: {compiled.name} has {compiled.world_size} ranks; pass one ChipActor "
                               f"handle per rank, got {len(actors)}")
    check_args(compiled, args)
    if any(isinstance(a, DeviceTensor) for a in args):
        raise PtoArgumentError("run_program: a DeviceTensor lives in one process; pass host arrays to a program "
                               "whose ranks run on Ray actors")
    callbacks = dict(callbacks or {})
    missing = [n for n in compiled.callback_names if n not in callbacks]
    if missing:
        raise PtoArgumentError(f"run_program: callback(s) {', '.join(missing)} have a `...` body and must be bound: "
                               f"callbacks={{{missing[0]!r}: fn}}")
    run = _RayRun(compiled, actors, args, callbacks)
    try:
        return await run.main()
    finally:
        await run.free()


class _RayRun:
    """One run of a plan on actors: the resident tensors it made, and the ranks' progress."""

    def __init__(self, dcp, actors, args, callbacks):
        self.dcp = dcp
        self.actors = actors
        self.args = dict(zip(dcp.param_names, args))
        self.callbacks = callbacks
        self.keys: dict = {}  # (rank, id(segment)) -> registration key
        self.windows: dict = {}  # (buffer index, rank) -> TensorRef
        self.uploads: dict = {}  # (rank, param, index) -> TensorRef
        self.downloads: list = []  # (rank, TensorRef, host view)
        self.temps: list = []  # (rank, TensorRef)
        self.failed = False

    # -- resident tensors -------------------------------------------------------------------

    async def alloc(self, rank: int, shape, dtype) -> TensorRef:
        ref = await _settle(self.actors[rank].alloc.remote(tuple(shape), dtype.np_storage,
                                                           np.zeros(tuple(shape), dtype.np_storage)), "alloc")
        self.temps.append((rank, ref))
        return ref

    async def window(self, buf, rank: int) -> TensorRef:
        key = (buf.index, rank)
        if key not in self.windows:
            self.windows[key] = await self.alloc(rank, buf.shape, buf.dtype)
        return self.windows[key]

    async def tensor(self, rank: int, ht, direction: str) -> TensorRef:
        from .runtime.distributed_runner import _view

        key = (rank, ht.param, ht.index)
        view = _view(self.args[ht.param], ht.index)
        ref = self.uploads.get(key)
        if ref is None:
            part = view.contiguous() if hasattr(view, "contiguous") else np.ascontiguousarray(view)
            ref = self.uploads[key] = await _settle(self.actors[rank].put.remote(part), "put")
            self.temps.append((rank, ref))
        if direction != IN and all(r is not ref for _, r, _ in self.downloads):
            self.downloads.append((rank, ref, view))
        return ref

    async def bind(self, d) -> dict:
        from .language.distributed_host import HostTensor, WindowView

        params = {p.name: p for p in d.params}
        bound = {}
        for name, arg in d.args.items():
            if isinstance(arg, WindowView):
                bound[name] = await self.window(arg.buffer, d.rank)
            elif isinstance(arg, HostTensor):
                bound[name] = await self.tensor(d.rank, arg, params[name].direction)
            else:
                bound[name] = arg
        for p in d.params:
            if p.name not in bound:  # a staging, mirror or spill tensor of a cut
                bound[p.name] = await self.alloc(d.rank, p.shape, p.dtype)
        return bound

    async def key(self, rank: int, segment) -> str:
        k = (rank, id(segment))
        if k not in self.keys:
            self.keys[k] = await _settle(self.actors[rank].register.remote(segment), "register")
        return self.keys[k]

    # -- the plan ----------------------------------------------------------------------------

    async def main(self):
        from .language.distributed_host import Callback, HostCollective, HostTensor
        from .runtime.distributed_runner import ContinuousTensor, _tensor_from_continuous, _view

        group: list = []
        try:
            for s in self.dcp.steps:
                if isinstance(s, (Callback, HostCollective)):
                    if group:
                        await _Group(self, group).run()
                        group = []
                    if isinstance(s, HostCollective):
                        await self.host_collective(s)
                        continue
                    await self.download()
                    host = [ContinuousTensor(_view(self.args[a.param], a.index)) for a in s.args]
                    if s.fn is None:
                        await asyncio.to_thread(self.callbacks[s.name], host)
                    else:
                        await asyncio.to_thread(s.fn, *(_tensor_from_continuous(h) for h in host))
                else:
                    group.append(s)
            if group:
                await _Group(self, group).run()
            await self.download()
        except BaseException:
            self.failed = True
            raise
        ret = self.dcp.returned
        if isinstance(ret, HostTensor):
            return _view(self.args[ret.param], ret.index)
        return None

    async def host_collective(self, c) -> None:
        world = self.dcp.world_size
        if c.kind == "barrier":
            return  # every rank's steps before it have completed: the group ended
        dsts = [await self.window(c.target.buffer, r) for r in range(world)]
        srcs = [await self.window(c.source.buffer, r) for r in range(world)] if c.source is not None else dsts
        await self.collective(c.kind, c.mode, c.root, dsts, srcs)

    async def collective(self, kind, mode, root, dsts, srcs) -> None:
        """Every rank's window as a Ray object, handed to every rank's ``combine``."""
        arrays = [a.read.remote(ref) for a, ref in zip(self.actors, srcs)]
        await asyncio.gather(*(_settle(a.combine.remote(dst, kind, mode, root, r, *arrays), f"pld {kind}")
                               for r, (a, dst) in enumerate(zip(self.actors, dsts))))

    async def download(self) -> None:
        for rank, ref, view in self.downloads:
            host = await _settle(self.actors[rank].get.remote(ref), "get")
            _write_host(view, host)
        self.downloads.clear()

    async def free(self) -> None:
        for rank, ref in self.temps:
            try:
                await self.actors[rank].free.remote(ref)
            except Exception:  # noqa: BLE001 - a dead actor's tensors went with it
                pass
        self.temps.clear()


def _write_host(view, host: np.ndarray) -> None:
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(view, torch.Tensor):
        view.copy_(torch.from_numpy(np.array(host)))
    else:
        np.copyto(view, host)


class _Group:
    """The dispatches between two host steps, one asyncio task per rank, meeting at barriers and waits."""

    def __init__(self, run: _RayRun, dispatches):
        self.plan = run
        self.per_rank: dict[int, list] = {}
        for d in dispatches:
            self.per_rank.setdefault(d.rank, []).append(d)
        self.cond = asyncio.Condition()
        self.version = 0  # bumped at every step a rank completes
        self.alive = len(self.per_rank)
        self.blocked = 0
        self.stuck: dict[int, str] = {}  # rank -> where it is blocked
        self.dead = False
        self.meeting: dict[int, tuple] = {}  # rank -> (op, bound) of the ranks at the current meeting
        self.released = 0  # meetings held so far

    async def run(self) -> None:
        tasks = [asyncio.ensure_future(self.rank(r, ds)) for r, ds in sorted(self.per_rank.items())]
        try:
            await asyncio.gather(*tasks)
        except BaseException:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

    async def progress(self) -> None:
        async with self.cond:
            self.version += 1
            self.cond.notify_all()

    async def block(self, rank: int, where: str, seen: int) -> None:
        """Wait until another rank moved on since `seen`; raise if no rank can move."""
        from .errors import PtoInvalidStateError

        async with self.cond:
            if self.version == seen and not self.dead:
                self.blocked += 1
                self.stuck[rank] = where
                if self.blocked >= self.alive:
                    self.dead = True
                    self.cond.notify_all()
                else:
                    await self.cond.wait_for(lambda: self.version != seen or self.dead)
                self.blocked -= 1
                if not self.dead:
                    self.stuck.pop(rank, None)
            if self.dead and self.version == seen:
                stuck = ", ".join(f"rank {r} at {w}" for r, w in sorted(self.stuck.items()))
                raise PtoInvalidStateError(f"{self.plan.dcp.name}: the ranks deadlocked: {stuck}; no rank can move "
                                           f"(a wait no notify satisfies, or a barrier not every rank reaches)")

    async def rank(self, r: int, dispatches) -> None:
        try:
            for d in dispatches:
                bound = await self.plan.bind(d)
                for step in d.compiled:
                    await self.step(r, d, bound, step)
                    await self.progress()
        finally:
            async with self.cond:
                self.alive -= 1
                if self.alive and self.blocked >= self.alive:
                    self.dead = True
                self.cond.notify_all()

    async def step(self, r: int, d, bound: dict, step) -> None:
        from .language.distributed_trace import CommOp

        run, actors = self.plan, self.plan.actors
        if not isinstance(step, CommOp):
            key = await run.key(r, step)
            await _settle(actors[r].run.remote(key, *(bound[p.name] for p in d.params)), d.name)
            return
        op = step
        me = actors[r]
        if op.kind == "remote_load":
            peer_win = await run.window(d.args[op.tensor].buffer, op.peer)
            await _settle(me.update.remote(bound[op.mirror], actors[op.peer].read.remote(peer_win)), "remote_load")
        elif op.kind == "remote_store":
            peer_win = await run.window(d.args[op.tensor].buffer, op.peer)
            await _settle(actors[op.peer].update.remote(peer_win, me.read.remote(bound[op.staging]), op.offsets),
                          "remote_store")
        elif op.kind == "put":
            peer_win = await run.window(d.args[op.tensor].buffer, op.peer)
            box = me.read.remote(bound[op.src], op.src_offsets, op.shape)
            await _settle(actors[op.peer].update.remote(peer_win, box, op.offsets, op.mode == "add"), "put")
        elif op.kind == "get":
            peer_src = await run.window(d.args[op.src].buffer, op.peer)
            box = actors[op.peer].read.remote(peer_src, op.src_offsets, op.shape)
            await _settle(me.update.remote(bound[op.tensor], box, op.offsets), "get")
        elif op.kind == "notify":
            sig = await run.window(d.args[op.tensor].buffer, op.peer)
            dtype = next(p.dtype for p in d.params if p.name == op.tensor)
            value = np.full(op.shape, op.value, dtype.np_storage)
            await _settle(actors[op.peer].update.remote(sig, value, op.offsets, op.mode == "add"), "notify")
        elif op.kind == "wait":
            while True:
                seen = self.version
                cell = await _settle(me.read.remote(bound[op.tensor], op.offsets, op.shape), "wait")
                v = cell.reshape(-1)[0].item()
                if (v == op.value) if op.mode == "eq" else (v >= op.value):
                    return
                await self.block(r, f"wait ({op.loc})", seen)
        else:
            await self.meet(r, op, bound)

    async def meet(self, r: int, op, bound: dict) -> None:
        """A barrier or collective: every rank of the program arrives; the last one runs the collective."""
        from .errors import PtoInvalidStateError

        world = self.plan.dcp.world_size
        gen = self.released
        self.meeting[r] = (op, bound)
        if len(self.meeting) == world:
            ops = {(o.kind, o.mode, o.peer) for o, _ in self.meeting.values()}
            if len(ops) != 1:
                raise PtoInvalidStateError(f"{self.plan.dcp.name}: the ranks met at different operations: "
                                           f"{sorted(ops)}")
            if op.kind != "barrier":
                ranks = sorted(self.meeting)
                dsts = [self.meeting[k][1][op.tensor] for k in ranks]
                srcs = [self.meeting[k][1][op.src] for k in ranks] if op.src else dsts
                await self.plan.collective(op.kind, op.mode, op.peer or 0, dsts, srcs)
            self.meeting.clear()
            self.released += 1
            return
        while self.released == gen:
            await self.block(r, f"{op.kind} ({op.loc})", self.version)
