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

The collectives are rings.  Rank ``i`` is shard ``i`` of the stacked tensor,
on worker ``worker_ids[i]``; each rank works on its worker's task-local
default stream.  To the ordering of its worker (:mod:`._hazards`), a
collective is one access per rank on that stream: a read of its shard of the
source and a write of its shard of the result, ordered after the earlier
accesses to them as a copy is (or checked by the sanitizer) before the first
step, and noted at the rank's last point, which waits for the neighbour that
read the rank's buffer last, so a later use anywhere waits for all of it.
A step of a ring is, on every rank at once:
wait (on the device) for the previous step of its neighbours, pull a chunk
from the left neighbour with one peer copy (into a temporary, or straight
into place), reduce it in (a built-in kernel of the device), and record an
event.  Waiting for the left neighbour orders the data; waiting for the
right one too means a rank never overwrites a chunk its right neighbour is
still reading.  ``all_reduce`` is the bandwidth-optimal one (reduce-scatter
then all-gather of ``1/n`` chunks: each rank moves ``2 (n - 1) / n`` of the
shard); ``all_gather`` and ``broadcast`` pass whole shards along the ring.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque

import numpy as np

from .._driver import check, ffi, lib
from ..errors import PtoArgumentError, PtoError, PtoNotSupported, PtoTimeout
from ._args import _is_torch_tensor
from ._checks import check_timeout
from ._config import as_run_config
from ._dispatch import queue_one
from ._hazards import order
from ._peer import enter
from ._stream import task_default
from ._tensor import DeviceTensor
from ._worker import ChipWorker

__all__ = ["StackedDeviceTensor", "DistributedWorker", "DistributedLaunch"]

_REDUCE_OPS = {"sum": 0, "max": 1, "min": 2}
_REDUCE_DTYPES = {"float32": 0, "float64": 1, "int32": 2, "int64": 3}  # the built-in "reduce" kernel's codes


class StackedDeviceTensor:
    """A ``[B, *tail]`` tensor stacked along its leading dimension, one shard per worker.

    Shard ``i`` (``x[i]``) is a :class:`~pypto_async.runtime.DeviceTensor`
    of shape ``full_shape[1:]`` resident on worker ``worker_ids[i]`` of a
    :class:`DistributedWorker` (an index into its ``workers``).  Pass it to
    :meth:`DistributedWorker.run` where the program takes one shard per
    device; :meth:`DistributedWorker.alloc_stacked_tensor` makes one from a
    host array.

    Parameters
    ----------
    shards : sequence of DeviceTensor
        ``full_shape[0]`` shards of one dtype, each of shape ``full_shape[1:]``.
    full_shape : sequence of int
        The stacked shape ``(B, *tail)``, rank 2 or more, ``B >= 1``.
    worker_ids : sequence of int
        One distinct worker index per shard.

    Raises
    ------
    PtoArgumentError
        If any of those rules is broken; the message names it.
    """

    __slots__ = ("shards", "full_shape", "worker_ids")

    def __init__(self, shards, full_shape, worker_ids):
        shards = tuple(shards)
        full_shape = _int_tuple(full_shape, "full_shape")
        worker_ids = _int_tuple(worker_ids, "worker_ids")
        if len(full_shape) < 2:
            raise PtoArgumentError(f"StackedDeviceTensor.full_shape must have rank >= 2, got {full_shape}")
        b = full_shape[0]
        if b < 1:
            raise PtoArgumentError(f"StackedDeviceTensor needs at least one shard in the leading dim, "
                                   f"got full_shape {full_shape}")
        tail = full_shape[1:]
        if len(shards) != b:
            raise PtoArgumentError(f"StackedDeviceTensor expects {b} shards (leading dim of {full_shape}); "
                                   f"got {len(shards)}")
        if len(worker_ids) != b:
            raise PtoArgumentError(f"StackedDeviceTensor expects {b} worker_ids (one per shard); "
                                   f"got {len(worker_ids)}")
        if len(set(worker_ids)) != b:
            raise PtoArgumentError(f"StackedDeviceTensor.worker_ids must be distinct, got {worker_ids}")
        for i, shard in enumerate(shards):
            if not isinstance(shard, DeviceTensor):
                raise PtoArgumentError(f"shard {i} must be a DeviceTensor, got {type(shard).__name__}")
            if shard.shape != tail:
                raise PtoArgumentError(f"shard {i} has shape {shard.shape}; expected per-shard shape {tail} "
                                       f"(leading dim dropped from {full_shape})")
            if shard.dtype != shards[0].dtype:
                raise PtoArgumentError(f"shard {i} dtype {shard.dtype.np_name} differs from shard 0 dtype "
                                       f"{shards[0].dtype.np_name}")
        self.shards = shards
        self.full_shape = full_shape
        self.worker_ids = worker_ids

    @property
    def dtype(self):
        """The element type shared by every shard (a pl :class:`~pypto_async.DataType`)."""
        return self.shards[0].dtype

    @property
    def shape(self) -> tuple[int, ...]:
        """``full_shape``."""
        return self.full_shape

    def __len__(self) -> int:
        return len(self.shards)

    def __getitem__(self, idx) -> DeviceTensor:
        """Shard ``i``, for ``x[i]`` (and ``x[i, ...]`` or whole-shard slices after the index).

        Raises
        ------
        IndexError
            For an index out of range, or too many indices.
        PtoArgumentError
            For a leading index that is not an int, or a partial slice of a shard.
        """
        rank, rest = (idx[0], idx[1:]) if isinstance(idx, tuple) and idx else (idx, ())
        if isinstance(idx, tuple) and not idx:
            raise IndexError("StackedDeviceTensor requires a leading-dim index")
        if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)):
            raise PtoArgumentError(f"StackedDeviceTensor leading index must be int, got {type(rank).__name__}")
        if not 0 <= rank < len(self.shards):
            raise IndexError(f"shard index {rank} out of range [0, {len(self.shards)})")
        tail = self.full_shape[1:]
        if rest.count(Ellipsis) > 1:
            raise IndexError("StackedDeviceTensor index accepts at most one Ellipsis")
        if Ellipsis in rest:
            e = rest.index(Ellipsis)
            fill = len(tail) - (len(rest) - 1)
            if fill < 0:
                raise IndexError(f"too many indices for StackedDeviceTensor of shape {self.full_shape}")
            rest = rest[:e] + (slice(None),) * fill + rest[e + 1:]
        if len(rest) > len(tail):
            raise IndexError(f"too many indices for StackedDeviceTensor of shape {self.full_shape}")
        for axis, s in enumerate(rest):
            if s != slice(None) and s != slice(0, tail[axis]):
                raise PtoArgumentError(f"StackedDeviceTensor only supports whole-shard slicing on the leading "
                                       f"dim; got {s!r} on axis {axis + 1} (shard shape {tail})")
        return self.shards[int(rank)]

    def __repr__(self) -> str:
        return (f"StackedDeviceTensor(full_shape={self.full_shape}, worker_ids={self.worker_ids}, "
                f"dtype={self.dtype.np_name})")


def _int_tuple(values, what: str) -> tuple[int, ...]:
    try:
        out = tuple(values)
    except TypeError:
        raise PtoArgumentError(f"{what} must be a sequence of ints, not {type(values).__name__}") from None
    for v in out:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise PtoArgumentError(f"{what} must contain ints, got {out!r}")
    return tuple(int(v) for v in out)


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

    def __init__(self, device_ids, config=None, *, depth: int = 2):
        ids = _int_tuple(device_ids, "device_ids")
        if not ids:
            raise PtoArgumentError("DistributedWorker needs at least one device id")
        if len(set(ids)) != len(ids):
            raise PtoArgumentError(f"DistributedWorker device_ids must be distinct, got {list(ids)}")
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise PtoArgumentError(f"DistributedWorker depth must be an int >= 1, not {depth!r}")
        cfg = as_run_config(config)
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
        done = self._dispatch(compiled, args)
        if not self._async:
            done.sync()
        return done

    def submit(self, compiled, *args):
        """Dispatch `compiled` on every device, keeping at most :attr:`depth` dispatches in flight.

        In sync mode this blocks while `depth` dispatches are in flight, then
        returns the new :class:`DistributedLaunch` without waiting for it.
        In async mode it returns a coroutine: ``await dw.submit(...)``
        suspends while `depth` are in flight (back-pressure, the event loop
        runs on), then dispatches and returns the DistributedLaunch.
        """
        if self._async:
            return self._asubmit(compiled, args)
        inflight = self._inflight
        while inflight and (inflight[0].done() or len(inflight) >= self._depth):
            with contextlib.suppress(PtoError):  # its own caller sees its failure
                inflight.popleft().sync()
        done = self._dispatch(compiled, args)
        inflight.append(done)
        return done

    async def _asubmit(self, compiled, args) -> DistributedLaunch:
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
        ids = tuple(range(b)) if worker_ids is None else _int_tuple(worker_ids, "worker_ids")
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

    # -- collectives ------------------------------------------------------------------------

    def all_reduce(self, t: StackedDeviceTensor, op: str = "sum", *, out: StackedDeviceTensor | None = None):
        """Reduce the shards of `t` elementwise with `op` and give every shard the result.

        Parameters
        ----------
        t : StackedDeviceTensor
            Shards of float32, float64, int32 or int64.
        op : {"sum", "max", "min"}
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
        if op not in _REDUCE_OPS:
            raise PtoArgumentError(f"all_reduce(op=...) is one of 'sum', 'max', 'min', not {op!r}")
        code = _REDUCE_DTYPES.get(t.dtype.np_name)
        if code is None:
            raise PtoNotSupported(f"all_reduce(): dtype {t.dtype.np_name} is not supported "
                                  f"({', '.join(_REDUCE_DTYPES)})")
        dst = t
        if out is not None:
            self._check_stacked(out, "all_reduce(out=...)")
            if out.full_shape != t.full_shape or out.dtype != t.dtype or out.worker_ids != t.worker_ids:
                raise PtoArgumentError("all_reduce(out=...): out must have t's full_shape, dtype and worker_ids")
            dst = out
        ring = _Ring(self, t, dst, "all_reduce")
        ring.start(copy_in=out is not None)
        n = ring.n
        if n > 1:
            bounds = _chunks(ring.elems, n)
            tmps = ring.temporaries(max(hi - lo for lo, hi in bounds))
            for k in range(n - 1):  # reduce-scatter: rank r adds chunk r-1-k of its left neighbour
                ring.step(lambda r, k=k: self._reduce_step(ring, r, bounds[(r - 1 - k) % n], tmps[r],
                                                           _REDUCE_OPS[op], code), both=True)
            for k in range(n - 1):  # all-gather: rank r takes the reduced chunk r-k of its left one
                ring.step(lambda r, k=k: ring.pull(r, bounds[(r - k) % n]), both=True)
            ring.free(tmps)
        return ring.finish(dst)

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
        b = len(t.shards)
        shape = (b,) + t.full_shape[1:]
        gathered = []
        try:
            for shard in t.shards:
                w = shard._worker
                gathered.append(w.alloc_tensor(shape, shard._dtype.np_storage, stream=task_default(w)))
        except BaseException:
            for g in gathered:
                g.free()
            raise
        result = StackedDeviceTensor(gathered, (b,) + shape, t.worker_ids)
        ring = _Ring(self, t, result, "all_gather")
        ring.start(copy_in=False, slots=True)
        per = t.shards[0]._nbytes
        for k in range(b - 1):  # rank r takes slot r-1-k from its left neighbour's gathered copy
            ring.step(lambda r, k=k: ring.pull_bytes(r, ((r - 1 - k) % b) * per, per), both=False)
        return ring.finish(result)

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
        ring = _Ring(self, t, t, "broadcast")
        ring.start(copy_in=False)
        for h in range(1, n):  # along the ring from root: each takes the whole shard of its left neighbour
            r = (root + h) % n
            ring.hop(r, lambda r=r: ring.pull(r, (0, ring.elems)))
        return ring.finish(t)

    def _reduce_step(self, ring, r: int, bound, tmp: DeviceTensor, op: int, dtype: int) -> None:
        lo, hi = bound
        if hi <= lo:
            return
        item = ring.itemsize
        ring.pull_into(r, tmp._ptr, lo * item, (hi - lo) * item)
        w, s = ring.workers[r], ring.streams[r]
        kernel = self._reduce_kernel(ring.ids[r], w)
        argv = ffi.new("uint64_t[5]", [ring.dst[r]._ptr + lo * item, tmp._ptr, hi - lo, op, dtype])
        blocks = max(1, min(w._info.cores, (hi - lo) // 4096 or 1))
        _step(w, s, lib.pto_stream_launch, (s._ptr, kernel, blocks, argv, 5),
                  "all_reduce step (reduce)", (argv, tmp))

    def _reduce_kernel(self, index: int, w):
        k = self._reduce.get(index)
        if k is None:
            out = ffi.new("pto_kernel **")
            check(lib.pto_kernel_builtin(w._dev, b"reduce", out), "pto_kernel_builtin('reduce')")
            k = self._reduce[index] = out[0]
        return k


def _step(w, s, fn, args, name: str, keep) -> None:
    """Queue one command of a collective on `w`'s stream `s` (lock held).

    Its Launch is the collective's own: a failure reaches the caller through
    the markers that end the collective (dependents of it), so it does not
    also warn as an error nobody retrieved.
    """
    queue_one(w, s, fn, args, name, keep, None)._mark_retrieved()


def _chunks(n: int, parts: int) -> list[tuple[int, int]]:
    """[lo, hi) of `parts` nearly equal chunks of n elements (trailing ones may be empty)."""
    per = -(-n // parts)
    return [(min(i * per, n), min((i + 1) * per, n)) for i in range(parts)]


class _Ring:
    """The per-rank state of one collective: workers, streams, the buffers moved, the last events.

    Rank ``r`` is shard ``r`` of the source tensor; ``dst[r]`` the buffer the
    collective writes on that rank.  Every method that queues work on rank
    ``r`` takes that worker's lock, and only that one.
    """

    def __init__(self, dw: DistributedWorker, src: StackedDeviceTensor, dst: StackedDeviceTensor, label: str):
        self.dw = dw
        self.label = label
        self.src = src.shards
        self.dst = dst.shards
        self.ids = src.worker_ids
        self.workers = [s._worker for s in self.src]
        self.streams = [task_default(w) for w in self.workers]
        self.n = len(self.src)
        self.itemsize = src.dtype.itemsize
        self.elems = self.src[0]._nbytes // self.itemsize if self.itemsize else 0
        self.events = [None] * self.n

    def accesses(self, r: int) -> list:
        """What the collective does to rank `r`'s buffers, as ordering reads a copy's: reads src, writes dst."""
        src, dst = self.src[r], self.dst[r]
        if src is dst:
            return [(dst, "t", True, True)]
        return [(src, "t", True, False), (dst, "out", False, True)]

    def start(self, copy_in: bool, slots: bool = False) -> None:
        """Order each rank's stream after the earlier accesses to its buffers; copy src into dst (or its slot).

        Every rank's accesses are ordered (and checked by the sanitizer)
        before any rank queues a command of the collective, so a race raises
        with at most some inferred waits queued.
        """
        for r in range(self.n):
            w = self.workers[r]
            with w._lock:
                order(w, self.streams[r], self.accesses(r), self.label, 0)
        for r in range(self.n):
            src, dst = self.src[r], self.dst[r]
            s, w = self.streams[r], self.workers[r]
            with w._lock:
                if copy_in or slots:
                    offset = r * src._nbytes if slots else 0
                    _step(w, s, lib.pto_stream_copy_d2d, (s._ptr, dst._ptr + offset, src._ptr, src._nbytes),
                              "collective: local copy", (src, dst))
                self.events[r] = self._record(r)

    def _record(self, r: int):
        event = self.streams[r]._record_locked()
        enter(event)
        return event

    def step(self, work, both: bool) -> None:
        """One step on every rank: wait for the neighbours' previous step, `work(r)`, record."""
        n = self.n
        last = list(self.events)
        for r in range(n):
            s, w = self.streams[r], self.workers[r]
            with w._lock:
                s._wait_locked(last[(r - 1) % n])
                if both and n > 2:
                    s._wait_locked(last[(r + 1) % n])
            work(r)
            with w._lock:
                self.events[r] = self._record(r)

    def hop(self, r: int, work) -> None:
        """Rank `r` waits for its left neighbour's last event, then `work()`, then records."""
        s, w = self.streams[r], self.workers[r]
        with w._lock:
            s._wait_locked(self.events[(r - 1) % self.n])
        work()
        with w._lock:
            self.events[r] = self._record(r)

    def pull(self, r: int, bound) -> None:
        """Copy elements [lo, hi) of the left neighbour's dst into the same place of rank r's."""
        lo, hi = bound
        if hi > lo:
            self.pull_bytes(r, lo * self.itemsize, (hi - lo) * self.itemsize)

    def pull_bytes(self, r: int, offset: int, nbytes: int) -> None:
        self.pull_into(r, self.dst[r]._ptr + offset, offset, nbytes)

    def pull_into(self, r: int, dst_ptr: int, src_offset: int, nbytes: int) -> None:
        """One peer copy on rank r's stream: nbytes at src_offset of the left neighbour's dst to dst_ptr."""
        left = (r - 1) % self.n
        w, s = self.workers[r], self.streams[r]
        src = self.dst[left]
        with w._lock:
            _step(w, s, lib.pto_stream_copy_peer,
                      (s._ptr, w._dev, dst_ptr, self.workers[left]._dev, src._ptr + src_offset, nbytes),
                      f"collective: peer copy ({nbytes} bytes)", (src, self.dst[r]))

    def temporaries(self, elems: int) -> list[DeviceTensor]:
        """A buffer of `elems` elements per rank, on its stream (freed by :meth:`free`)."""
        dtype = self.src[0]._dtype.np_storage
        return [w.alloc_tensor(max(elems, 1), dtype, stream=s) for w, s in zip(self.workers, self.streams)]

    def free(self, tmps) -> None:
        for t, s in zip(tmps, self.streams):
            t.free(stream=s)

    def finish(self, result: StackedDeviceTensor):
        """End each rank's part with one access to its buffers; the markers that end it, awaited or not.

        A rank's last point first waits for its right neighbour's last step
        (the one that read its buffer last), so the point covers every
        access to the rank's buffers, its own and its neighbours' reads.
        The accesses are noted at that point (:func:`._hazards.order`, a
        second time after :meth:`start`): a later use of a buffer on another
        stream is ordered after the whole collective, or, with ordering off,
        the sanitizer sees it as a race until the collective completed.
        """
        n = self.n
        last = list(self.events)
        markers = []
        for r in range(n):
            s, w = self.streams[r], self.workers[r]
            with w._lock:
                if n > 1:
                    s._wait_locked(last[(r + 1) % n])
                order(w, s, self.accesses(r), self.label, 0)  # noted at the record that comes next
                self.events[r] = self._record(r)
            markers.append(s._marker())
        launch = DistributedLaunch(markers, result)
        if self.dw._async:
            return launch
        return launch.sync()
