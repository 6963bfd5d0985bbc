"""PyPTO's multi-chip language, ``import pypto_async.language.distributed as pld``.

A multi-chip (L3) program has three levels: a ``@pl.jit.host`` orchestrator
(host Python) that dispatches a ``@pl.jit`` function to each rank
(``per_rank(..., device=r)``), which calls ``@pl.jit.incore`` kernels on that
rank's device.  The names here are PyPTO's:

* On the host: :func:`world_size` (the ranks the program was compiled for,
  ``DistributedConfig(device_ids=...)``), :func:`alloc_window_buffer` (a
  buffer every rank owns a copy of, zeroed for each run, that the other
  ranks can reach) and :func:`window` (this rank's view of it, passed to a
  ``pld.DistributedTensor`` parameter).
* In a per-device function or kernel: :func:`get_comm_ctx`, :func:`rank`,
  :func:`nranks`; the cross-rank operations ``pld.tile.remote_load`` /
  ``remote_store`` (a box of a peer's window, to or from a tile),
  ``pld.tensor.put`` / ``get`` (a whole window to or from a peer),
  ``pld.tensor.barrier`` (every rank waits for every other) and
  ``pld.system.notify`` / ``wait`` (signals in a window).

How they run here: each dispatch is traced for its rank (rank and rank count
are Python ints then, and ``pl.range`` loops with int bounds are unrolled),
and cut at its cross-rank operations into single-chip launches
(:mod:`.distributed_trace`).  Between two launches the runner
(:mod:`pypto_async.runtime.distributed_runner`) moves the data with the
driver's peer copies, which the driver orders as hazard-tracked accesses
of both devices' tensors: a remote load is a copy of the peer's window into
a local mirror the next launch loads from; a remote store, a put, a notify
are a peer copy into a staging tensor of the peer and a small kernel there
that writes (or adds) it into the window; a get is one peer copy.  A
barrier is a rendezvous of every rank followed by device-side waits of each
rank's stream on every other's; a wait holds its rank back until the cell,
read after everything queued before it, satisfies the comparison (no rank
can move: :class:`~pypto_async.errors.PtoInvalidStateError`, a deadlock).
"""

from __future__ import annotations

import enum

from .._dtypes import as_dtype
from .._scalars import is_int
from ..errors import PtoCompileError, PtoNotSupported
from ..ir._diag import compile_error
from ._memory import load, store
from ._tracer import Index, ScalarArg, Tile, current, user_loc
from ._types import AtomicType, TensorAnnotation
from .distributed_trace import IN, INOUT, OUT, CommOp, cut, require_rank, window_param
from .distributed_host import WindowBuffer, WindowView, alloc_window_buffer, window, world_size

__all__ = [
    "AtomicType",
    "CommCtx",
    "DistributedTensor",
    "NotifyOp",
    "ReduceOp",
    "WaitCmp",
    "WindowBuffer",
    "WindowView",
    "alloc_window_buffer",
    "get_comm_ctx",
    "nranks",
    "rank",
    "remote_load",
    "remote_store",
    "system",
    "tensor",
    "tile",
    "window",
    "world_size",
]


class NotifyOp(enum.IntEnum):
    """How ``pld.system.notify`` changes the peer's signal cell: add to it, or set it."""

    AtomicAdd = 0
    Set = 1


class WaitCmp(enum.IntEnum):
    """The predicate ``pld.system.wait`` holds its rank back on: ``cell == expected`` or ``cell >= expected``."""

    Eq = 0
    Ge = 1


class DistributedTensor:
    """Annotate a window parameter: ``pld.DistributedTensor[[rows, cols], pl.FP32]``.

    The argument is a :func:`window` view the host passes; inside the
    per-device function and its kernels it is a tensor of this rank (read
    and written: ``pl.InOut``) that the cross-rank operations name.
    """

    def __init__(self):
        raise TypeError("pld.DistributedTensor is an annotation; pass pld.window(...) views from the host")

    def __class_getitem__(cls, item) -> TensorAnnotation:
        if not isinstance(item, tuple) or len(item) != 2 or not isinstance(item[0], (list, tuple)):
            raise PtoCompileError("pld.DistributedTensor[...] takes [shape, dtype], e.g. "
                                  "pld.DistributedTensor[[1, 256], pl.FP32]")
        shape, dtype = item
        if not all(is_int(d) and d > 0 for d in shape):
            raise PtoCompileError(f"pld.DistributedTensor shape must be positive ints, got {list(shape)!r}")
        return TensorAnnotation(INOUT, tuple(int(d) for d in shape), as_dtype(dtype))


class ReduceOp(enum.IntEnum):
    """The reduction of ``pld.tensor.allreduce``: ``Sum``, ``Max``, ``Min`` (``Prod`` is PyPTO's too, not here)."""

    Sum = 0
    Max = 1
    Min = 2
    Prod = 3


class CommCtx:
    """The communication context of a window: this rank and the rank count (ints at trace time)."""

    __slots__ = ("rank", "nranks", "window")

    def __init__(self, rank: int, nranks: int, window: str):
        self.rank = rank
        self.nranks = nranks
        self.window = window

    def __repr__(self) -> str:
        return f"<pld.CommCtx rank {self.rank} of {self.nranks} ({self.window})>"


def get_comm_ctx(dist_tensor) -> CommCtx:
    """The communication context of a ``pld.DistributedTensor`` parameter."""
    t = current("pld.get_comm_ctx")
    p = window_param(t, dist_tensor, "pld.get_comm_ctx", user_loc())
    r = require_rank("pld.get_comm_ctx")
    return CommCtx(r.rank, r.world, p.name)


def _ctx(ctx, op: str) -> CommCtx:
    if not isinstance(ctx, CommCtx):
        raise compile_error(f"{op} takes the context of pld.get_comm_ctx(window), got {ctx!r}", user_loc())
    return ctx


def rank(ctx) -> int:
    """This rank's index in ``[0, nranks)`` (an int: each rank is traced on its own)."""
    return _ctx(ctx, "pld.rank").rank


def nranks(ctx) -> int:
    """The number of ranks (an int)."""
    return _ctx(ctx, "pld.nranks").nranks


# -- the checks every cross-rank operation shares ------------------------------------------


def _peer(peer, r, op: str, loc) -> int:
    if isinstance(peer, (Index, ScalarArg)) or not is_int(peer):
        raise compile_error(f"{op}: peer must be an int rank (derived from pld.rank / pld.nranks, and Python "
                            f"ints), got {peer!r}", loc)
    peer = int(peer)
    if not 0 <= peer < r.world:
        raise compile_error(f"{op}: peer {peer} is not a rank of this program (0..{r.world - 1})", loc)
    return peer


def _box(offsets, shape, full: tuple, op: str, loc) -> tuple[tuple[int, ...], tuple[int, ...]]:
    if not isinstance(offsets, (list, tuple)) or len(offsets) != len(full):
        raise compile_error(f"{op}: offsets must be {len(full)} ints, got {offsets!r}", loc)
    if not all(is_int(o) for o in offsets):
        raise compile_error(f"{op}: offsets must be ints here (a cross-rank box is fixed at trace time), "
                            f"got {list(offsets)!r}", loc)
    shape = tuple(shape)
    if len(shape) != len(full) or not all(is_int(d) and d > 0 for d in shape):
        raise compile_error(f"{op}: shape must be {len(full)} positive ints, got {list(shape)!r}", loc)
    offs = tuple(int(o) for o in offsets)
    for d, (o, n, m) in enumerate(zip(offs, shape, full)):
        if o < 0 or o + n > m:
            raise compile_error(f"{op}: the box [{o}, {o + n}) of dimension {d} is outside [0, {m}) of the "
                                f"window", loc)
    return offs, shape


def _value(value, op: str, loc):
    if isinstance(value, (Index, ScalarArg, Tile)) or not isinstance(value, (int, float)) or isinstance(value, bool):
        raise compile_error(f"{op}: value must be a Python number here, got {value!r}", loc)
    return value


# -- pld.tile ----------------------------------------------------------------------------


def remote_load(target, peer, offsets, shape) -> Tile:
    """Load the box ``[offsets, offsets + shape)`` of rank `peer`'s copy of window `target` as a tile.

    The box is read after everything queued before this point on every rank
    (order your writes with a barrier or a signal, as on a device).
    """
    t = current("pld.tile.remote_load")
    loc = user_loc()
    r = require_rank("pld.tile.remote_load")
    p = window_param(t, target, "pld.tile.remote_load", loc)
    peer = _peer(peer, r, "pld.tile.remote_load", loc)
    offs, shape = _box(offsets, shape, p.shape, "pld.tile.remote_load", loc)
    mirror = r.new_param(t, "mirror", p.shape, p.dtype, IN)
    cut(CommOp("remote_load", p.name, peer, mirror=mirror.name, offsets=offs, shape=shape, loc=loc))
    return load(mirror, list(offs), list(shape))


def remote_store(tile, target, peer, offsets):
    """Write `tile` into rank `peer`'s copy of window `target` at `offsets`; return `target`."""
    t = current("pld.tile.remote_store")
    loc = user_loc()
    r = require_rank("pld.tile.remote_store")
    if not isinstance(tile, Tile):
        raise compile_error(f"pld.tile.remote_store: expected a tile to store, got {tile!r}", loc)
    p = window_param(t, target, "pld.tile.remote_store", loc)
    if tile.dtype != p.dtype:
        raise compile_error(f"pld.tile.remote_store: the tile is {tile.dtype.name}, the window "
                            f"{p.dtype.name}", loc)
    peer = _peer(peer, r, "pld.tile.remote_store", loc)
    offs, shape = _box(offsets, tile.shape, p.shape, "pld.tile.remote_store", loc)
    staging = r.new_param(t, "staging", shape, p.dtype, OUT)
    store(tile, [0] * len(shape), staging)
    cut(CommOp("remote_store", p.name, peer, staging=staging.name, offsets=offs, shape=shape, loc=loc))
    return target


# -- pld.tensor --------------------------------------------------------------------------


def _pair(dst, src, op: str, loc):
    t = current(op)
    pd = window_param(t, dst, op, loc)
    ps = window_param(t, src, op, loc)
    if pd.shape != ps.shape or pd.dtype != ps.dtype:
        raise compile_error(f"{op}: dst is {pd.dtype.name}{list(pd.shape)}, src {ps.dtype.name}{list(ps.shape)}; "
                            f"they must match", loc)
    return pd, ps


def put(dst, peer, src, atomic=AtomicType.None_, **_chunking):
    """Write this rank's window `src` into rank `peer`'s window `dst` (``atomic=Add``: add into it).

    PyPTO's chunking options (``chunk_rows=``, ``pipeline=``) shape the
    transfer on a device; here the whole window moves in one peer copy.
    """
    loc = user_loc()
    r = require_rank("pld.tensor.put")
    pd, ps = _pair(dst, src, "pld.tensor.put", loc)
    peer = _peer(peer, r, "pld.tensor.put", loc)
    if atomic not in (AtomicType.None_, AtomicType.Add):
        raise compile_error(f"pld.tensor.put: atomic must be pld.AtomicType.None_ or Add, got {atomic!r}", loc)
    mode = "add" if atomic is AtomicType.Add else "set"
    cut(CommOp("put", pd.name, peer, src=ps.name, offsets=(0,) * len(pd.shape), shape=pd.shape, mode=mode,
               loc=loc))
    return dst


def get(dst, peer, src, **_chunking):
    """Copy rank `peer`'s window `src` into this rank's window `dst`."""
    loc = user_loc()
    r = require_rank("pld.tensor.get")
    pd, ps = _pair(dst, src, "pld.tensor.get", loc)
    peer = _peer(peer, r, "pld.tensor.get", loc)
    cut(CommOp("get", pd.name, peer, src=ps.name, shape=pd.shape, loc=loc))
    return dst


def allreduce(target, signal=None, *, op=ReduceOp.Sum, mode: str = "mesh", core_num: int = 1):
    """Reduce every rank's copy of window `target` with `op`, in place on every rank; return `target`.

    All ranks meet here (as at a barrier); the reduction is the driver's
    ring all-reduce over the ranks' windows (``DistributedWorker.all_reduce``:
    peer copies and a reduce kernel per step), whatever ``mode`` names
    (``"mesh"`` or ``"ring"``: the same numbers).  `signal` is accepted and
    left unchanged.
    """
    t = current("pld.tensor.allreduce")
    loc = user_loc()
    p = window_param(t, target, "pld.tensor.allreduce", loc)
    if signal is not None:
        window_param(t, signal, "pld.tensor.allreduce", loc)
    if mode not in ("mesh", "ring"):
        raise compile_error(f"pld.tensor.allreduce: mode is 'mesh' or 'ring', got {mode!r}", loc)
    if op not in (ReduceOp.Sum, ReduceOp.Max, ReduceOp.Min):
        if op == ReduceOp.Prod:
            raise PtoNotSupported(f"{loc}: pld.tensor.allreduce(op=pld.ReduceOp.Prod) is not supported here "
                                  f"(Sum, Max, Min)")
        raise compile_error(f"pld.tensor.allreduce: op must be a pld.ReduceOp, got {op!r}", loc)
    if p.dtype.name not in ("FP32", "FP64", "INT32", "INT64"):
        raise PtoNotSupported(f"{loc}: pld.tensor.allreduce of {p.dtype.name} is not supported here "
                              f"(FP32, FP64, INT32, INT64)")
    cut(CommOp("allreduce", p.name, shape=p.shape, mode=ReduceOp(op).name.lower(), loc=loc))
    return target


def barrier(signal):
    """Hold every rank here until all of them arrived; return `signal` (left unchanged)."""
    t = current("pld.tensor.barrier")
    loc = user_loc()
    p = window_param(t, signal, "pld.tensor.barrier", loc)
    cut(CommOp("barrier", p.name, loc=loc))
    return signal


# -- pld.system --------------------------------------------------------------------------


def notify(signal, peer, offsets, value=1, op=NotifyOp.AtomicAdd):
    """Add `value` to (``op=Set``: store it in) the cell `offsets` of rank `peer`'s window `signal`."""
    t = current("pld.system.notify")
    loc = user_loc()
    r = require_rank("pld.system.notify")
    p = window_param(t, signal, "pld.system.notify", loc)
    if p.dtype.is_float:
        raise compile_error(f"pld.system.notify: a signal window holds integers, {p.name!r} is {p.dtype.name}", loc)
    peer = _peer(peer, r, "pld.system.notify", loc)
    offs, _ = _box(offsets, (1,) * len(p.shape), p.shape, "pld.system.notify", loc)
    if op not in (NotifyOp.AtomicAdd, NotifyOp.Set):
        raise compile_error(f"pld.system.notify: op must be a pld.NotifyOp, got {op!r}", loc)
    cut(CommOp("notify", p.name, peer, offsets=offs, shape=(1,) * len(p.shape), value=_value(value, "pld.system.notify", loc),
               mode="add" if op == NotifyOp.AtomicAdd else "set", loc=loc))


def wait(signal, offsets, expected=1, cmp=WaitCmp.Ge):
    """Hold this rank until the cell `offsets` of its window `signal` compares true with `expected`."""
    t = current("pld.system.wait")
    loc = user_loc()
    require_rank("pld.system.wait")
    p = window_param(t, signal, "pld.system.wait", loc)
    offs, _ = _box(offsets, (1,) * len(p.shape), p.shape, "pld.system.wait", loc)
    if cmp not in (WaitCmp.Eq, WaitCmp.Ge):
        raise compile_error(f"pld.system.wait: cmp must be a pld.WaitCmp, got {cmp!r}", loc)
    cut(CommOp("wait", p.name, offsets=offs, shape=(1,) * len(p.shape),
               value=_value(expected, "pld.system.wait", loc), mode="eq" if cmp == WaitCmp.Eq else "ge", loc=loc))


class _Namespace:
    def __init__(self, name: str, **fns):
        self._name = name
        self.__dict__.update(fns)

    def __repr__(self) -> str:
        return f"<namespace pld.{self._name}>"


#: ``pld.tile``: tile-level cross-rank operations.
tile = _Namespace("tile", remote_load=remote_load, remote_store=remote_store)
#: ``pld.tensor``: tensor-level cross-rank operations.
tensor = _Namespace("tensor", put=put, get=get, barrier=barrier, allreduce=allreduce)
#: ``pld.system``: signals.
system = _Namespace("system", notify=notify, wait=wait, world_size=world_size, get_comm_ctx=get_comm_ctx,
                    rank=rank, nranks=nranks)
