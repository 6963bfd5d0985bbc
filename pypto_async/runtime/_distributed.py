"""Several devices as one: PyPTO's L3 names, and collectives built from peer copies.

A :class:`DistributedWorker` opens one :class:`~pypto_async.runtime.ChipWorker`
per device id and drives them together: a program runs on every device at
once (``run``, ``submit``), a :class:`StackedDeviceTensor` stands for one
shard per device, and the collectives (``all_reduce``, ``all_gather``,
``broadcast``) move shards between devices with peer copies
(``pto_stream_copy_peer``) ordered by device-side waits on each other's
events (:mod:`._peer`).  Nothing of it runs Python on a driver thread, and
nothing blocks an event loop: in async mode every call queues its work and
returns something to await.

The parts: this module holds the worker, its handles and
:class:`DistributedLaunch`; :mod:`._stacked` the stacked tensor;
:mod:`._collectives` the rings the collectives queue, which
:class:`DistributedWorker` checks the arguments of and turns into a
:class:`DistributedLaunch`.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque

import numpy as np

from ..errors import PtoArgumentError, PtoError, PtoNotSupported, PtoTimeout
from . import _collectives
from ._args import _is_torch_tensor
from ._checks import check_timeout, int_tuple
from ._collectives import REDUCE_DTYPES, REDUCE_OPS
from ._config import as_run_config
from ._stacked import StackedDeviceTensor
from ._tensor import DeviceTensor
from ._worker import ChipWorker

__all__ = ["StackedDeviceTensor", "DistributedWorker", "DistributedLaunch"]


def _is_l3(x) -> bool:
    return type(x).__name__ == "DistributedCompiledProgram"


def _programs(device_ids) -> tuple:
    """The DistributedCompiledPrograms `device_ids` lists instead of ids (PyPTO's form), else ()."""
    if isinstance(device_ids, (list, tuple)) and device_ids and all(_is_l3(x) for x in device_ids):
        return tuple(device_ids)
    if _is_l3(device_ids):
        return (device_ids,)
    return ()


def _program_devices(programs) -> tuple:
    ids = max((p.device_ids for p in programs), key=len)
    for p in programs:
        if tuple(ids[:len(p.device_ids)]) != p.device_ids:
            raise PtoArgumentError(f"the programs run on different devices ({list(p.device_ids)} and "
                                   f"{list(ids)}); prepare them on one worker only if they share devices")
    return ids


def _check_callbacks(programs, callbacks: dict) -> None:
    if not isinstance(callbacks, dict):
        raise PtoArgumentError(f"callbacks must be a dict of name -> function, got {type(callbacks).__name__}")
    known = {n for p in programs for n in (*p.callback_names, *getattr(p, "sub_worker_names", ()))}
    for name, fn in callbacks.items():
        if name not in known:
            raise PtoArgumentError(f"callbacks names [{name!r}] are not sub-workers of "
                                   f"{', '.join(p.name for p in programs) or 'the programs'} "
                                   f"(its SubWorkers: {', '.join(sorted(known)) or 'none'})")
        if not callable(fn):
            raise PtoArgumentError(f"callbacks[{name!r}] must be callable, got {fn!r}")
    missing = sorted({n for p in programs for n in p.callback_names} - set(callbacks))
    if missing:
        raise PtoArgumentError(f"SubWorker callback(s) {', '.join(map(repr, missing))} have a `...` body and must "
                               f"be bound: prepare(callbacks={{{missing[0]!r}: fn, ...}})")


class DistributedLaunch:
    """The work one call queued on several devices: one :class:`Launch` per device.

    ``await it`` (async mode) or :meth:`sync` waits for all of them and
    returns :meth:`result`, raising the first failure (in device order).
    """

    __slots__ = ("launches", "_result")

    def __init__(self, launches, result=None):
        self.launches = tuple(launches)
        self._result = result

    def done(self) -> bool:
        """True once every device's part has completed (or failed)."""
        return all(launch.done() for launch in self.launches)

    def result(self):
        """The call's result (a stacked tensor for a collective, else None), or its first error.

        The error stands for every part's: raising it delivers (observes) the
        failures of all of them, so each device runs new work again.
        """
        if not self.done():
            for launch in self.launches:
                launch.result()  # the first failure, or PtoInvalidStateError for a part in flight
        errors = [launch.exception() for launch in self.launches]
        for exc in errors:
            if exc is not None:
                raise exc
        return self._result

    def sync(self, timeout: float | None = None):
        """Block this thread until every part completed; return :meth:`result`.

        Parameters
        ----------
        timeout : float, optional
            Seconds to wait at most, for all the parts together: one
            deadline shared by every device, not one wait per device
            (``None`` or ``math.inf``: no limit; ``0``: do not wait).

        Raises
        ------
        PtoTimeout
            If some part did not complete in time (the work goes on: nothing
            is cancelled; sync or await it again).
        PtoArgumentError
            For a timeout that is not a number of seconds >= 0.
        PtoError
            The first failure, in device order.
        """
        limit = check_timeout(timeout, "DistributedLaunch.sync()")
        deadline = None if limit is None else time.monotonic() + limit
        for launch in self.launches:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                launch.sync(left)
            except PtoTimeout:
                if not launch.done():  # the wait ran out (not a part that failed with a timeout)
                    raise PtoTimeout(
                        f"DistributedLaunch.sync(timeout={timeout!r}): not every device completed in "
                        f"time (device {launch._worker.device_id} has not); the work goes on, nothing "
                        "is cancelled") from None
            except PtoError:
                pass  # raised below, in device order
        return self.result()

    async def wait(self):
        """Wait for every part (async mode); return :meth:`result`."""
        for launch in self.launches:
            with contextlib.suppress(PtoError):
                await launch.wait()  # completion, also for a launch from submit()
        return self.result()

    def __await__(self):
        return self.wait().__await__()

    def __repr__(self) -> str:
        state = "done" if self.done() else "in flight"
        return f"<DistributedLaunch on {len(self.launches)} devices {state}>"


class _PlanRun(DistributedLaunch):
    """A multi-chip plan :meth:`DistributedWorker.submit` ran: completed; :meth:`result` is what the host
    function returned, or raises the run's failure (PyPTO's handle keeps its dispatch error for result())."""

    __slots__ = ("_error",)

    def __init__(self, result=None, error=None):
        super().__init__((), result)
        self._error = error

    def result(self):
        if self._error is not None:
            raise self._error
        return self._result


class DistributedHandle:
    """A program registered on every worker of a :class:`DistributedWorker`.

    Calling it is :meth:`DistributedWorker.run`; :meth:`submit` is
    :meth:`DistributedWorker.submit`.
    """

    __slots__ = ("_dw", "_compiled")

    def __init__(self, dw, compiled):
        self._dw = dw
        self._compiled = compiled

    def __call__(self, *args):
        return self._dw.run(self._compiled, *args)

    def submit(self, *args):
        return self._dw.submit(self._compiled, *args)

    def __repr__(self) -> str:
        return f"<DistributedHandle {self._compiled!r} on {len(self._dw.workers)} devices>"


class DistributedWorker:
    """Several devices of one platform driven as one, with PyPTO's L3 names.

    Opens one :class:`~pypto_async.runtime.ChipWorker` per device id, each
    with `config` (its ``device_id`` replaced).  Modes follow the
    ChipWorker's: under ``with`` (or none) calls return once their work
    completed; under ``async with`` they return at once and you await what
    they return.  :meth:`close` closes every device.

    Parameters
    ----------
    device_ids : sequence of int
        Distinct device ids of the platform (see :func:`device_count`).
    config : RunConfig or dict, optional
        Settings for every device.
    depth : int
        How many dispatches :meth:`submit` keeps in flight (default 2).

    Raises
    ------
    PtoArgumentError
        For empty or repeated device ids, an id out of range, a bad depth
        or config.
    """

    def __init__(self, device_ids, config=None, *, depth: int = 2, callbacks=None, persistent: bool = False,
                 reset_persistent_windows: bool | None = None):
        programs = _programs(device_ids)
        if programs:
            device_ids = _program_devices(programs)
        ids = int_tuple(device_ids, "device_ids")
        if not ids:
            raise PtoArgumentError("DistributedWorker needs at least one device id")
        if len(set(ids)) != len(ids):
            raise PtoArgumentError(f"DistributedWorker device_ids must be distinct, got {list(ids)}")
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise PtoArgumentError(f"DistributedWorker depth must be an int >= 1, not {depth!r}")
        cfg = as_run_config(config)
        self._config = cfg.replace(device_id=0)
        workers = []
        try:
            for d in ids:
                workers.append(ChipWorker(cfg.replace(device_id=d)))
        except BaseException:
            for w in workers:
                w.close()
            raise
        self._workers = tuple(workers)
        self._device_ids = ids
        self._depth = depth
        self._handles: dict[int, tuple] = {}  # id(compiled) -> (compiled, per-worker handles)
        self._inflight: deque[DistributedLaunch] = deque()
        self._reduce: dict[int, object] = {}  # worker index -> the built-in "reduce" kernel
        #: The multi-chip programs prepared on this worker (PyPTO's ``DistributedWorker([c1, c2])``).
        self._programs = programs
        self._callbacks = dict(callbacks or {})
        #: prepare(persistent=True): each program's window buffers, kept across its runs (id(program) -> windows)
        self._persistent = bool(persistent)
        self._reset_windows = self._persistent if reset_persistent_windows is None else bool(reset_persistent_windows)
        self._retained: dict[int, dict] = {}
        try:
            _check_callbacks(programs, self._callbacks)
        except BaseException:
            self.close()
            raise

    # -- state and lifecycle ------------------------------------------------------------

    @property
    def workers(self) -> tuple:
        """The ChipWorkers, one per device id, in order (worker index ``i`` is ``device_ids[i]``)."""
        return self._workers

    @property
    def device_ids(self) -> tuple[int, ...]:
        """The device ids, in worker order."""
        return self._device_ids

    @property
    def depth(self) -> int:
        """How many dispatches :meth:`submit` keeps in flight."""
        return self._depth

    @property
    def is_closed(self) -> bool:
        return all(w.is_closed for w in self._workers)

    @property
    def _async(self) -> bool:
        return self._workers[0]._async

    def __enter__(self) -> DistributedWorker:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    async def open(self) -> DistributedWorker:
        """Switch every device to async mode in the running event loop (as ``ChipWorker.open``)."""
        for w in self._workers:
            await w.open()
        return self

    async def __aenter__(self) -> DistributedWorker:
        return await self.open()

    async def __aexit__(self, *exc_info) -> None:
        await self.aclose()

    def close(self, *, timeout: float | None = 30.0) -> None:
        """Close every device (idempotent); each finishes its queued work first, as ``ChipWorker.close``."""
        first = None
        self._retained.clear()  # kept windows: freed with their devices
        for w in self._workers:
            try:
                w.close(timeout=timeout)
            except BaseException as exc:  # close the others anyway
                first = first or exc
        self._inflight.clear()
        if first is not None:
            raise first

    async def aclose(self, *, timeout: float | None = 30.0) -> None:
        """:meth:`close`, suspending while queued work finishes."""
        first = None
        for w in self._workers:
            try:
                await w.aclose(timeout=timeout)
            except BaseException as exc:
                first = first or exc
        self._inflight.clear()
        if first is not None:
            raise first

    def _check_open(self) -> None:
        for w in self._workers:
            w._check_open()

    def __repr__(self) -> str:
        state = " closed" if self.is_closed else ""
        return f"<DistributedWorker devices {list(self._device_ids)}{state}>"

    # -- programs -----------------------------------------------------------------------

    def register(self, compiled) -> DistributedHandle:
        """Register `compiled` on every device; the handle runs it on all of them."""
        self._handles_for(compiled)
        return DistributedHandle(self, compiled)

    def _handles_for(self, compiled) -> list:
        self._check_open()
        entry = self._handles.get(id(compiled))
        if entry is None or entry[0] is not compiled:
            entry = (compiled, [w.register(compiled) for w in self._workers])
            self._handles[id(compiled)] = entry
        return entry[1]

    def run(self, compiled, *args) -> DistributedLaunch:
        """Run `compiled` on every device at once.

        Each argument is, per device: a :class:`StackedDeviceTensor` stands
        for that device's shard; a host array (input parameters only) for
        the same array on every device; a scalar is passed as it is.

        A multi-chip program (a ``DistributedCompiledProgram``) runs its plan
        instead (:mod:`.distributed_runner`), with the host function's
        arguments: in sync mode this returns what the host function returned
        once the plan ran; in async mode a coroutine to await (asyncio, or
        trio through anyio), which never blocks the event loop.

        Returns
        -------
        DistributedLaunch
            Completed in sync mode (its first failure raised); await it in
            async mode.

        Raises
        ------
        PtoArgumentError
            For an argument that does not fit, before anything is queued.
        """
        if _is_l3(compiled):
            return self._run_l3(compiled, args)
        done = self._dispatch(compiled, args)
        if not self._async:
            done.sync()
        return done

    # -- multi-chip programs (PyPTO's L3 runtime) --------------------------------------

    def _run_l3(self, compiled, args):
        """Run a DistributedCompiledProgram's plan (see :mod:`.distributed_runner`).

        In sync mode it returns once the plan ran (what the host function
        returned); in async mode it returns a coroutine to await, which runs
        the same plan without blocking the event loop.  Its arguments are
        checked before either queues anything.
        """
        # the runner uses this module's worker; imported when used
        from .distributed_runner import arun_plan, check_args, run_plan

        self._check_open()
        if self._programs and not any(compiled is p for p in self._programs):
            raise PtoArgumentError(f"{compiled.name} is not one of the programs prepared on this worker")
        if tuple(self._device_ids[:compiled.world_size]) != compiled.device_ids:
            raise PtoArgumentError(f"{compiled.name} runs on devices {list(compiled.device_ids)}; this worker "
                                   f"has {list(self._device_ids)}")
        if self._async:
            check_args(compiled, args)  # before the coroutine exists: a bad call raises where it is made
            return arun_plan(self, compiled, args, self._callbacks)
        return run_plan(self, compiled, args, self._callbacks)

    def __call__(self, *args, config=None):
        """Run the one program prepared on this worker (``rt(*args)``, PyPTO's single-program form).

        ``config=`` (PyPTO passes each dispatch its RunConfig) must be the
        settings the worker was prepared with: the devices keep those, so a
        different one is refused (PtoNotSupported) rather than ignored.
        """
        if len(self._programs) != 1:
            raise PtoArgumentError(f"rt(*args) runs the one prepared program; this worker has "
                                   f"{len(self._programs)}: call rt.run(compiled, *args)")
        if config is not None:
            self._check_dispatch_config(self._programs[0], config)
        return self._run_l3(self._programs[0], args)

    def _check_dispatch_config(self, compiled, config) -> None:
        compiled._check_config(config)  # the platform it was compiled for
        want = compiled._run_config(config).replace(device_id=0)  # the ranks are the devices, whatever it says
        have = self._config.replace(distributed_config=None, platform=want.platform)
        if want != have:
            raise PtoNotSupported(f"{compiled.name}: this dispatch's config= differs from the one the worker was "
                                  f"prepared with ({want} vs {have}); the devices keep their prepared settings: "
                                  f"pass the same RunConfig to prepare() and to each dispatch")

    def alloc_tensor(self, shape, dtype, *, init=None) -> DeviceTensor:
        """A DeviceTensor resident on the first device (rank 0), kept across runs until :meth:`free_tensor`."""
        return self._workers[0].alloc_tensor(shape, dtype, init=init)

    def free_tensor(self, t: DeviceTensor) -> None:
        """Free a tensor of :meth:`alloc_tensor` (in stream order)."""
        if not isinstance(t, DeviceTensor) or all(t._worker is not w for w in self._workers):
            raise PtoArgumentError("free_tensor() takes a DeviceTensor of this DistributedWorker")
        t._worker.free_tensor(t)

    # -- raw device memory, by worker index (PyPTO's worker_id) ---------------------------

    def _worker_at(self, worker_id, what: str) -> ChipWorker:
        if isinstance(worker_id, bool) or not isinstance(worker_id, int) or not 0 <= worker_id < len(self._workers):
            raise PtoArgumentError(f"DistributedWorker.{what}(): worker_id must be a worker index, 0 to "
                                   f"{len(self._workers) - 1}, not {worker_id!r}")
        return self._workers[worker_id]

    def malloc(self, nbytes: int, *, worker_id: int = 0) -> int:
        """Allocate `nbytes` on device ``workers[worker_id]``; return its address (``ChipWorker.malloc`` there).

        Pair it with :meth:`free` of the same `worker_id`; :meth:`close` frees what is left.
        """
        return self._worker_at(worker_id, "malloc").malloc(nbytes)

    def free(self, ptr: int, *, worker_id: int = 0) -> None:
        """Free an address :meth:`malloc` returned for the same `worker_id`."""
        self._worker_at(worker_id, "free").free(ptr)

    def copy_to(self, dst_dev_ptr: int, src_host_ptr, nbytes: int, *, worker_id: int = 0) -> None:
        """Copy `nbytes` from the host to an address on ``workers[worker_id]`` (``ChipWorker.copy_to`` there)."""
        self._worker_at(worker_id, "copy_to").copy_to(dst_dev_ptr, src_host_ptr, nbytes)

    def copy_from(self, dst_host_ptr, src_dev_ptr: int, nbytes: int, *, worker_id: int = 0) -> None:
        """Copy `nbytes` from an address on ``workers[worker_id]`` to the host (``ChipWorker.copy_from`` there)."""
        self._worker_at(worker_id, "copy_from").copy_from(dst_host_ptr, src_dev_ptr, nbytes)

    def submit(self, compiled, *args):
        """Dispatch `compiled` on every device, keeping at most :attr:`depth` dispatches in flight.

        In sync mode this blocks while `depth` dispatches are in flight, then
        returns the new :class:`DistributedLaunch` without waiting for it.
        A multi-chip program (a ``DistributedCompiledProgram``) runs its
        plan to its end instead: the handle comes back completed, its
        ``result()`` what the host function returned or the run's failure.
        In async mode it returns a coroutine: ``await dw.submit(...)``
        suspends while `depth` are in flight (back-pressure, the event loop
        runs on), then dispatches and returns the DistributedLaunch.
        """
        if self._async:
            return self._asubmit(compiled, args)
        if _is_l3(compiled):
            return self._submit_l3(compiled, args)
        inflight = self._inflight
        while inflight and (inflight[0].done() or len(inflight) >= self._depth):
            with contextlib.suppress(PtoError):  # its own caller sees its failure
                inflight.popleft().sync()
        done = self._dispatch(compiled, args)
        inflight.append(done)
        return done

    def _submit_l3(self, compiled, args) -> _PlanRun:
        """A multi-chip plan runs to its end here (its group waits are on this thread): the handle comes back
        completed; a bad argument raises now, before anything is queued, a failed run from its result()."""
        # the runner uses this module's worker; imported when used
        from .distributed_runner import check_args

        check_args(compiled, args)
        try:
            return _PlanRun(self._run_l3(compiled, args))
        except PtoArgumentError:
            raise
        except PtoError as e:
            return _PlanRun(error=e)

    async def _asubmit(self, compiled, args) -> DistributedLaunch:
        if _is_l3(compiled):  # awaited to its end, the loop running on (see _submit_l3)
            # the runner uses this module's worker; imported when used
            from .distributed_runner import check_args

            check_args(compiled, args)
            try:
                return _PlanRun(await self._run_l3(compiled, args))
            except PtoArgumentError:
                raise
            except PtoError as e:
                return _PlanRun(error=e)
        inflight = self._inflight
        while inflight and (inflight[0].done() or len(inflight) >= self._depth):
            oldest = inflight[0]
            with contextlib.suppress(PtoError):
                await oldest.wait()
            if inflight and inflight[0] is oldest:
                inflight.popleft()
        done = self._dispatch(compiled, args)
        inflight.append(done)
        return done

    def _dispatch(self, compiled, args) -> DistributedLaunch:
        handles = self._handles_for(compiled)
        per_worker = [self._args_for(handles[0], r, args) for r in range(len(self._workers))]
        launches = [handles[r].submit(*per_worker[r]) for r in range(len(self._workers))]
        return DistributedLaunch(launches)

    def _args_for(self, handle, r: int, args) -> list:
        params = handle.params
        out = []
        for i, arg in enumerate(args):
            p = params[i] if i < len(params) else None
            name = p.name if p is not None else f"#{i}"
            if isinstance(arg, StackedDeviceTensor):
                out.append(self._shard_on(arg, r, f"argument {name!r}"))
            elif isinstance(arg, DeviceTensor):
                raise PtoArgumentError(f"argument {name!r}: a DeviceTensor lives on one device; pass a "
                                       "StackedDeviceTensor (one shard per device) to a DistributedWorker")
            elif p is not None and p.copies_out and (isinstance(arg, np.ndarray) or _is_torch_tensor(arg)):
                raise PtoArgumentError(f"argument {name!r}: an output of a program run on every device must "
                                       "be a StackedDeviceTensor (one shard per device), not a host array "
                                       "every device would write")
            else:
                out.append(arg)
        return out

    def _shard_on(self, t: StackedDeviceTensor, r: int, what: str) -> DeviceTensor:
        self._check_stacked(t, what)
        try:
            i = t.worker_ids.index(r)
        except ValueError:
            raise PtoArgumentError(f"{what}: the StackedDeviceTensor has no shard on worker {r} "
                                   f"(worker_ids {t.worker_ids}); a program runs on every device") from None
        return t.shards[i]

    def _check_stacked(self, t, what: str) -> None:
        if not isinstance(t, StackedDeviceTensor):
            raise PtoArgumentError(f"{what}: expected a StackedDeviceTensor, not {type(t).__name__}")
        for i, (shard, w) in enumerate(zip(t.shards, t.worker_ids)):
            if not 0 <= w < len(self._workers) or shard._worker is not self._workers[w]:
                raise PtoArgumentError(f"{what}: shard {i} does not live on worker {w} of this DistributedWorker")
            if shard._freed:
                raise PtoArgumentError(f"{what}: shard {i} was freed")

    # -- stacked tensors ------------------------------------------------------------------

    def alloc_stacked_tensor(self, host, *, worker_ids=None) -> StackedDeviceTensor:
        """Upload each leading-dim shard of `host` to a worker: shard ``i`` goes to ``worker_ids[i]``.

        Parameters
        ----------
        host : numpy array or torch CPU tensor
            A ``[B, *tail]`` array, rank 2 or more.
        worker_ids : sequence of int, optional
            Distinct worker indices in ``[0, len(workers))``, one per shard
            (default ``range(B)``).

        Returns
        -------
        StackedDeviceTensor
            In sync mode its uploads have completed; in async mode they are
            queued (later work on the shards is ordered after them).
        """
        self._check_open()
        if not (isinstance(host, np.ndarray) or _is_torch_tensor(host)):
            raise PtoArgumentError(f"alloc_stacked_tensor(host=...) expects a numpy array or torch tensor, "
                                   f"got {type(host).__name__}")
        shape = tuple(int(d) for d in host.shape)
        if len(shape) < 2:
            raise PtoArgumentError(f"alloc_stacked_tensor needs a [B, *tail] array (rank >= 2), got shape {shape}")
        b = shape[0]
        if b < 1:
            raise PtoArgumentError(f"alloc_stacked_tensor needs at least one shard in the leading dim, "
                                   f"got shape {shape}")
        world = len(self._workers)
        ids = tuple(range(b)) if worker_ids is None else int_tuple(worker_ids, "worker_ids")
        if len(ids) != b:
            raise PtoArgumentError(f"worker_ids has {len(ids)} entries; host leading dim is {b}")
        if len(set(ids)) != b:
            raise PtoArgumentError(f"worker_ids must be distinct (one shard per worker), got {list(ids)}")
        for w in ids:
            if not 0 <= w < world:
                raise PtoArgumentError(f"worker id {w} out of range [0, {world})")
        shards = []
        try:
            for i, w in enumerate(ids):
                part = host[i].contiguous() if _is_torch_tensor(host) else np.ascontiguousarray(host[i])
                shards.append(self._workers[w].alloc_tensor(shape[1:], host.dtype, init=part))
        except BaseException:
            for shard in shards:
                with contextlib.suppress(PtoError):
                    shard.free()
            raise
        return StackedDeviceTensor(shards, shape, ids)

    def free_stacked_tensor(self, t: StackedDeviceTensor) -> None:
        """Free every shard of `t` on its worker, in stream order.  Idempotent."""
        if not isinstance(t, StackedDeviceTensor):
            raise PtoArgumentError(f"free_stacked_tensor() takes a StackedDeviceTensor, not {type(t).__name__}")
        for shard in t.shards:
            if not shard._freed and not shard._worker.is_closed:
                shard.free()

    def copy_stacked_from(self, t: StackedDeviceTensor, host_out):
        """Copy every shard of `t` into ``host_out[i]``.

        Parameters
        ----------
        host_out : numpy array or torch CPU tensor
            Writable and C-contiguous, of shape ``t.full_shape`` and `t`'s dtype.

        Returns
        -------
        DistributedLaunch
            Completed in sync mode; await it in async mode (`host_out` holds
            the shards once it completed).
        """
        self._check_open()
        self._check_stacked(t, "copy_stacked_from(t=...)")
        if not (isinstance(host_out, np.ndarray) or _is_torch_tensor(host_out)):
            raise PtoArgumentError(f"copy_stacked_from(host=...) expects a numpy array or torch tensor, "
                                   f"got {type(host_out).__name__}")
        if tuple(host_out.shape) != t.full_shape:
            raise PtoArgumentError(f"host shape {tuple(host_out.shape)} does not match the stacked full_shape "
                                   f"{t.full_shape}")
        launches = [shard._worker.copy(host_out[i], shard) for i, shard in enumerate(t.shards)]
        return DistributedLaunch(launches, host_out)

    # -- collectives (the rings are in _collectives.py) -----------------------------------------

    def all_reduce(self, t: StackedDeviceTensor, op: str = "sum", *, out: StackedDeviceTensor | None = None):
        """Reduce the shards of `t` elementwise with `op` and give every shard the result.

        Parameters
        ----------
        t : StackedDeviceTensor
            Shards of float32, float64, int32 or int64.
        op : {"sum", "max", "min", "prod"}
            ``"max"`` and ``"min"`` propagate NaN, as ``pl.maximum`` /
            ``pl.minimum`` and ``np.maximum`` / ``np.minimum`` do: an element
            that is NaN in any shard is NaN in the result, whatever the order
            of the shards on the ring.  ``"sum"`` of a NaN is NaN too.
        out : StackedDeviceTensor, optional
            Where the result goes (shards on the same workers, same shape and
            dtype); ``None``: in place, into `t`.

        Returns
        -------
        StackedDeviceTensor or DistributedLaunch
            In sync mode, `out` (or `t`) once done.  In async mode a
            DistributedLaunch; awaiting it returns that tensor.
        """
        self._check_open()
        self._check_stacked(t, "all_reduce(t=...)")
        if op not in REDUCE_OPS:
            raise PtoArgumentError(f"all_reduce(op=...) is one of 'sum', 'max', 'min', 'prod', not {op!r}")
        if t.dtype.np_name not in REDUCE_DTYPES:
            raise PtoNotSupported(f"all_reduce(): dtype {t.dtype.np_name} is not supported "
                                  f"({', '.join(REDUCE_DTYPES)})")
        dst = t
        if out is not None:
            self._check_stacked(out, "all_reduce(out=...)")
            if out.full_shape != t.full_shape or out.dtype != t.dtype or out.worker_ids != t.worker_ids:
                raise PtoArgumentError("all_reduce(out=...): out must have t's full_shape, dtype and worker_ids")
            dst = out
        return self._finish(_collectives.all_reduce(t, dst, op, self._reduce, out is not None), dst)

    def all_gather(self, t: StackedDeviceTensor):
        """Gather every shard of `t` onto every worker of `t`.

        Returns
        -------
        StackedDeviceTensor or DistributedLaunch
            A new stacked tensor of full_shape ``(B, B, *tail)`` on `t`'s
            workers: shard ``i`` holds all of `t` (``out[i][j]`` is ``t[j]``).
            Awaitable in async mode, as for :meth:`all_reduce`.
        """
        self._check_open()
        self._check_stacked(t, "all_gather(t=...)")
        result, markers = _collectives.all_gather(t)
        return self._finish(markers, result)

    def broadcast(self, t: StackedDeviceTensor, root: int = 0):
        """Give every shard of `t` the contents of shard `root`, in place.

        Returns
        -------
        StackedDeviceTensor or DistributedLaunch
            `t` in sync mode once done; awaitable in async mode, as for
            :meth:`all_reduce`.
        """
        self._check_open()
        self._check_stacked(t, "broadcast(t=...)")
        n = len(t.shards)
        if isinstance(root, bool) or not isinstance(root, (int, np.integer)) or not 0 <= root < n:
            raise PtoArgumentError(f"broadcast(root=...) must be a shard index in [0, {n}), not {root!r}")
        return self._finish(_collectives.broadcast(t, root), t)

    def _finish(self, markers: list, result):
        """The DistributedLaunch of a collective's markers: returned in async mode, else synced (its result)."""
        launch = DistributedLaunch(markers, result)
        if self._async:
            return launch
        return launch.sync()
