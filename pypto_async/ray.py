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

from ._signature import INOUT, OUT
from .errors import (
    PtoArgumentError,
    PtoClosedError,
    PtoDeviceLost,
    PtoForeignTensorError,
    PtoTensorFreedError,
)
from .runtime import ChipWorker, DeviceTensor

__all__ = ["ChipActor", "ChipWorkerActor", "TensorRef", "call", "pipeline"]

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
