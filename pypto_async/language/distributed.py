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
  ``pld.tensor.put`` / ``get`` (a window, or a box of it, to or from a
  peer, in PyPTO's chunks), ``pld.tensor.barrier`` (every rank waits for
  every other), ``pld.system.notify`` / ``wait`` (signals in a window) and
  the collectives ``pld.tensor.allreduce``, ``broadcast``, ``allgather``,
  ``reduce_scatter`` and ``all_to_all``.
* The collectives in the host orchestrator too, on ``pld.window`` views
  (``pld.tensor.allreduce(view, op=...)`` needs no signal, as in PyPTO): they
  run over every rank's window between the dispatches before and after them.

How they run here: each dispatch is traced for its rank (rank and rank count
are Python ints then, and ``pl.range`` loops with int bounds are unrolled),
and cut at its cross-rank operations into single-chip launches
(:mod:`.distributed_trace`).  Between two launches the runner
(:mod:`pypto_async.runtime.distributed_runner`) moves the data with the
driver's peer copies, which the driver orders as hazard-tracked accesses
of both devices' tensors: a remote load is a copy of the peer's window into
a local mirror the next launch loads from; a remote store, an atomic put, a notify
are a peer copy into a staging tensor of the peer and a small kernel there
that writes (or adds) it into the window; a put or get is a peer copy per
contiguous run of each chunk of its box; a collective is the driver's ring
(allreduce) or one step of box copies between the ranks (the others).  A
barrier is a rendezvous of every rank followed by device-side waits of each
rank's stream on every other's; a wait holds its rank back until the cell,
read after everything queued before it, satisfies the comparison (no rank
can move: :class:`~pypto_async.errors.PtoInvalidStateError`, a deadlock).
"""

from __future__ import annotations

import enum

import numpy as np

from .._dtypes import as_dtype
from .._scalars import is_int
from ..errors import PtoCompileError, PtoNotSupported
from ..ir._diag import compile_error
from ..ir._nodes import IBin, IConst, IScalar, Param
from ._memory import load, store
from ._tracer import Index, ScalarArg, TensorArg, Tile, current, user_loc
from ._types import AtomicType, TensorAnnotation
from .distributed_trace import IN, INOUT, OUT, CommOp, active_rank, cut, require_rank, window_param
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
        from ._placement import is_dynamic_dim

        if not all(is_dynamic_dim(d) or (is_int(d) and d > 0) for d in shape):
            raise PtoCompileError(f"pld.DistributedTensor shape must be positive ints (or pl.dynamic dims, bound "
                                  f"by the window passed), got {list(shape)!r}")
        return TensorAnnotation(INOUT, tuple(d if is_dynamic_dim(d) else int(d) for d in shape),
                                as_dtype(dtype))


class ReduceOp(enum.IntEnum):
    """The reduction of ``pld.tensor.allreduce`` and ``reduce_scatter``: ``Sum``, ``Max``, ``Min``, ``Prod``."""

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


_FIXED_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
              "//": lambda a, b: a // b, "%": lambda a, b: a % b, "min": min, "max": max}


def _fixed(x, r):
    """`x` as an int where this rank's dispatch fixes it, else `x` unchanged.

    A scalar parameter the host's dispatch gave an int (PyPTO's ``my_rank``,
    ``chunk_elems``) is that int for this rank's trace, and so is an index
    expression over such scalars and ints (``left * chunk_elems``).
    """

    def ev(e):
        if isinstance(e, IConst):
            return e.value
        if isinstance(e, IScalar) and e.param in r.scalars:
            return r.scalars[e.param]
        if isinstance(e, IBin) and e.op in _FIXED_OPS:
            a, b = ev(e.a), ev(e.b)
            if a is not None and b is not None and not (e.op in ("//", "%") and b == 0):
                return _FIXED_OPS[e.op](a, b)
        return None

    if r is None:
        return x
    if isinstance(x, ScalarArg):
        return r.scalars.get(x.name, x)
    if isinstance(x, Index):
        v = ev(x.expr)
        return x if v is None else v
    return x


def _peer(peer, r, op: str, loc) -> int:
    peer = _fixed(peer, r)  # a scalar parameter the host's dispatch gave an int: fixed for this rank
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
    offsets = [_fixed(o, active_rank()) for o in offsets]
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


def _value(value, op: str, loc, r=None):
    value = _fixed(value, r)  # a scalar parameter the host's dispatch gave an int
    if isinstance(value, np.integer):
        value = int(value)
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


def tensor_remote_store(src, target, peer, offsets, *, atomic=AtomicType.None_):
    """``pld.tensor.remote_store``: :func:`remote_store` of a tensor-level value (a tile, or a tensor loaded whole).

    A window is refused (a window-to-window transfer is :func:`put`'s, as in
    PyPTO); ``atomic=pld.AtomicType.Add`` is not supported here.
    """
    loc = user_loc()
    what = "pld.tensor.remote_store"
    require_rank(what)
    if atomic is AtomicType.Add:
        raise PtoNotSupported(f"{loc}: {what}(atomic=pld.AtomicType.Add) is not supported here; pld.tensor.put "
                              f"takes atomic=Add")
    if atomic is not AtomicType.None_:
        raise compile_error(f"{what}: atomic must be a pld.AtomicType, got {atomic!r}", loc)
    if isinstance(src, TensorArg):
        if src.name in require_rank(what).windows:
            raise compile_error(f"{what}: the source {src.name!r} is a window; pld.tensor.put moves a window", loc)
        src = load(src, [0] * len(src.shape), list(src.shape))
    return remote_store(src, target, peer, offsets)



def _chunking(chunk_rows, chunk_cols, pipeline, what: str, loc) -> tuple[int, int]:
    """PyPTO's chunk options of put / get, checked: ``(rows, cols)`` of one chunk, 0 for the full extent."""
    for name, v in (("chunk_rows", chunk_rows), ("chunk_cols", chunk_cols)):
        if isinstance(v, bool) or not is_int(v) or v < 0:
            raise compile_error(f"{what}: {name} must be an int >= 0 (0: the full extent), got {v!r}", loc)
    if pipeline not in (True, False):
        raise compile_error(f"{what}: pipeline must be True or False, got {pipeline!r}", loc)
    if pipeline and not (chunk_rows > 0 and chunk_cols > 0):
        raise compile_error(f"{what}: pipeline=True needs both chunk_rows > 0 and chunk_cols > 0 (got chunk_rows="
                            f"{chunk_rows}, chunk_cols={chunk_cols})", loc)
    return int(chunk_rows), int(chunk_cols)


def _transfer(what: str, pd: Param, ps: Param, dst_offsets, src_offsets, shape, loc):
    """The boxes of a put / get: ``(dst offsets, src offsets, shape)``, the whole tensors without a region."""
    if pd.dtype != ps.dtype:
        raise compile_error(f"{what}: dst is {pd.dtype.name}, src {ps.dtype.name}; they must match", loc)
    region = (dst_offsets, src_offsets, shape)
    if all(x is None for x in region):
        if pd.shape != ps.shape:
            raise compile_error(f"{what}: dst is {pd.dtype.name}{list(pd.shape)}, src {ps.dtype.name}"
                                f"{list(ps.shape)}; they must match (or give dst_offsets, src_offsets and shape)",
                                loc)
        return (0,) * len(pd.shape), (0,) * len(ps.shape), pd.shape
    if any(x is None for x in region):
        raise compile_error(f"{what}: dst_offsets, src_offsets and shape are given together", loc)
    doffs, box = _box(dst_offsets, shape, pd.shape, f"{what} (dst)", loc)
    soffs, _ = _box(src_offsets, box, ps.shape, f"{what} (src)", loc)
    return doffs, soffs, box


def put(dst, peer, src, dst_offsets=None, src_offsets=None, shape=None, *, atomic=AtomicType.None_,
        chunk_rows: int = 0, chunk_cols: int = 0, pipeline: bool = False):
    """Write this rank's `src` into rank `peer`'s window `dst` (``atomic=Add``: add into it); return `dst`.

    `src` is a window or a plain tensor parameter.  With `dst_offsets`,
    `src_offsets` and `shape` (all three) only that box moves.  PyPTO's
    chunking: the transfer, viewed as ``[rows, cols]`` (``cols`` its last
    dimension), moves in chunks of ``[chunk_rows, chunk_cols]`` (0: the full
    extent; larger values are clamped), one peer copy per contiguous run of
    a chunk (a chunk of whole rows is one copy); ``pipeline=True`` (PyPTO's
    double buffering) is accepted and moves the same chunks.
    """
    loc = user_loc()
    what = "pld.tensor.put"
    r = require_rank(what)
    t = current(what)
    pd = window_param(t, dst, what, loc)
    ps = _tensor_param(t, src, what, loc)
    peer = _peer(peer, r, what, loc)
    if atomic not in (AtomicType.None_, AtomicType.Add):
        raise compile_error(f"{what}: atomic must be pld.AtomicType.None_ or Add, got {atomic!r}", loc)
    chunks = _chunking(chunk_rows, chunk_cols, pipeline, what, loc)
    doffs, soffs, box = _transfer(what, pd, ps, dst_offsets, src_offsets, shape, loc)
    mode = "add" if atomic is AtomicType.Add else "set"
    cut(CommOp("put", pd.name, peer, src=ps.name, offsets=doffs, shape=box, mode=mode, loc=loc,
               src_offsets=soffs, chunks=chunks))
    return dst


def get(dst, peer, src, dst_offsets=None, src_offsets=None, shape=None, *, chunk_rows: int = 0,
        chunk_cols: int = 0, pipeline: bool = False):
    """Copy rank `peer`'s window `src` into this rank's `dst` (a window or a plain tensor); return `dst`.

    The region and chunk options are :func:`put`'s.
    """
    loc = user_loc()
    what = "pld.tensor.get"
    r = require_rank(what)
    t = current(what)
    pd = _tensor_param(t, dst, what, loc)
    ps = window_param(t, src, what, loc)
    peer = _peer(peer, r, what, loc)
    chunks = _chunking(chunk_rows, chunk_cols, pipeline, what, loc)
    doffs, soffs, box = _transfer(what, pd, ps, dst_offsets, src_offsets, shape, loc)
    cut(CommOp("get", pd.name, peer, src=ps.name, offsets=doffs, shape=box, loc=loc, src_offsets=soffs,
               chunks=chunks))
    return dst


_MISSING = object()
_REDUCE_DTYPES = ("FP32", "FP64", "INT32", "INT64", "FP16")


def _reduce_op(op, what: str, loc) -> str:
    if not isinstance(op, ReduceOp):
        raise compile_error(f"{what}: op must be a pld.ReduceOp, got {op!r}", loc)
    return ReduceOp(op).name.lower()


def _reducible(dtype, what: str, loc) -> None:
    if dtype.name not in _REDUCE_DTYPES:
        raise PtoNotSupported(f"{loc}: {what} of {dtype.name} is not supported here ({', '.join(_REDUCE_DTYPES)})")


def _signal(t, signal, what: str, loc) -> None:
    """Check a collective's `signal` (a window, accepted and left unchanged here)."""
    if signal is _MISSING or signal is None:
        raise compile_error(f"{what} takes a signal window (pld.DistributedTensor[[nranks], pl.INT32]) as its "
                            f"signal argument", loc)
    window_param(t, signal, what, loc)


def _tensor_param(t, x, what: str, loc) -> Param:
    """A whole tensor parameter of the traced function (a window or a plain pl.Tensor), or a located error."""
    if not isinstance(x, TensorArg) or x.name not in t.params:
        raise compile_error(f"{what}: expected a tensor parameter of the function (a pld.DistributedTensor or a "
                            f"pl.Tensor), got {x!r}", loc)
    if getattr(x, "origin", None) is not None and any(getattr(o, "value", 0) != 0 for o in x.origin):
        raise compile_error(f"{what}: pass the whole tensor, not a window of it", loc)
    return t.params[x.name]


def _rows(p: Param, world: int, what: str, loc) -> int:
    """The bytes of one row of window `p`, which must have one row per rank."""
    if p.shape[0] != world:
        raise compile_error(f"{what}: {p.name!r} is {p.dtype.name}{list(p.shape)}; its first dimension must be "
                            f"the rank count, {world}", loc)
    return int(np.prod(p.shape[1:], dtype=np.int64)) * p.dtype.itemsize


def _host_level(what: str):
    """The host trace when `what` is called in a host orchestrator (not inside a per-device function)."""
    from .distributed_host import host_active

    return host_active() if active_rank() is None else None


def allreduce(target, signal=_MISSING, *, op=ReduceOp.Sum, mode: str = "mesh", core_num: int = 1):
    """Reduce every rank's copy of window `target` with `op`, in place on every rank; return `target`.

    All ranks meet here (as at a barrier); the reduction is the driver's
    ring all-reduce over the ranks' windows (``DistributedWorker.all_reduce``:
    peer copies and a reduce kernel per step), whatever ``mode`` names
    (``"mesh"`` or ``"ring"``: the same numbers).  `signal` is accepted and
    left unchanged; in a host orchestrator (``@pl.jit.host``) it may be left
    out, as in PyPTO, and `target` is a ``pld.window`` view: the reduction
    runs between the dispatches before it and those after it.
    """
    loc = user_loc()
    what = "pld.tensor.allreduce"
    if mode not in ("mesh", "ring"):
        raise compile_error(f"{what}: mode is 'mesh' or 'ring', got {mode!r}", loc)
    if not is_int(core_num) or core_num < 1:
        raise compile_error(f"{what}: core_num must be a positive int, got {core_num!r}", loc)
    if mode == "ring" and signal is _MISSING:
        raise compile_error(f'{what}: mode="ring" needs an explicit signal window, as in PyPTO', loc)
    if signal is None:
        raise compile_error(f"{what}: signal cannot be None; leave it out in a host orchestrator", loc)
    name = _reduce_op(op, what, loc)
    h = _host_level(what)
    if h is not None:
        from .distributed_host import record_collective

        view = record_collective(h, "allreduce", target, None, signal, mode=name, loc=loc, ring=mode == "ring")
        _reducible(view.dtype, what, loc)
        return target
    t = current(what)
    p = window_param(t, target, what, loc)
    if signal is not _MISSING:
        window_param(t, signal, what, loc)
    _reducible(p.dtype, what, loc)
    cut(CommOp("allreduce", p.name, shape=p.shape, mode=name, loc=loc))
    return target


def broadcast(target, signal=_MISSING, *, root):
    """Give every rank's copy of window `target` the contents of rank `root`'s, in place; return `target`.

    All ranks meet here; each rank other than `root` pulls the root's window
    with one peer copy.  In a host orchestrator `target` is a ``pld.window``
    view.
    """
    loc = user_loc()
    what = "pld.tensor.broadcast"
    h = _host_level(what)
    world = h.world if h is not None else require_rank(what).world
    if isinstance(root, bool) or not is_int(root) or not 0 <= int(root) < world:
        raise compile_error(f"{what}: root must be a rank of this program (0..{world - 1}), got {root!r}", loc)
    if h is not None:
        from .distributed_host import record_collective

        record_collective(h, "broadcast", target, None, signal, root=int(root), loc=loc)
        return target
    t = current(what)
    p = window_param(t, target, what, loc)
    _signal(t, signal, what, loc)
    cut(CommOp("broadcast", p.name, int(root), shape=p.shape, loc=loc))
    return target


def allgather(local_data, target, signal=_MISSING):
    """Row ``j`` of every rank's window `target` becomes rank ``j``'s `local_data`; return `target`.

    `target` has one row per rank (``[nranks, *row]``), `local_data` the
    size of one row and `target`'s dtype, and is a different tensor (a
    window, or in a per-device function a plain ``pl.Tensor`` too).  All
    ranks meet here; each rank pulls every peer's `local_data` with one peer
    copy.
    """
    return _exchange("allgather", "pld.tensor.allgather", local_data, target, signal)


def all_to_all(input, target, signal=_MISSING):  # noqa: A002 - PyPTO's name
    """Row ``j`` of rank ``r``'s window `target` becomes row ``r`` of rank ``j``'s `input`; return `target`.

    `input` and `target` are different tensors of one shape and dtype, one
    row per rank (``[nranks, *row]``): ``input[dest]`` is this rank's chunk
    for rank ``dest``, ``target[src]`` the chunk rank ``src`` sent here.
    """
    return _exchange("all_to_all", "pld.tensor.all_to_all", input, target, signal)


def _exchange(kind: str, what: str, source, target, signal):
    loc = user_loc()
    h = _host_level(what)
    if h is not None:
        from .distributed_host import record_collective

        record_collective(h, kind, target, source, signal, loc=loc)
        return target
    r = require_rank(what)
    t = current(what)
    pt = window_param(t, target, what, loc)
    ps = _tensor_param(t, source, what, loc)
    _signal(t, signal, what, loc)
    check_exchange(kind, what, ps.name, ps.shape, ps.dtype, pt.name, pt.shape, pt.dtype, r.world, loc)
    cut(CommOp(kind, pt.name, src=ps.name, shape=pt.shape, loc=loc))
    return target


def all_to_all_v(input, target, signal, send_counts, recv_counts):  # noqa: A002 - PyPTO's names
    """PyPTO's variable-size all-to-all (MPI_Alltoallv); return `target`.

    `input` and `target` are ``[nranks * max_recv, ...]``: block ``dest``
    (rows ``dest * max_recv`` on, ``max_recv = target.shape[0] // nranks``)
    of this rank's `input` is its chunk for rank ``dest``, and block ``src``
    of `target` the chunk rank ``src`` sent here.  Whole blocks move,
    whatever the counts (rows past a sender's count are not meaningful).
    `send_counts` (INT32, one per rank: ``[nranks]`` or ``[nranks, 1]``)
    holds how many rows of each block are valid; each rank's ``recv_counts``
    window (INT32 ``[nranks, 1]``) receives ``min(send_counts[me],
    max_recv)`` from every sender, at the sender's row.  Here it is two
    all-to-alls: the blocks, then the counts (each rank's clamped first).
    """
    loc = user_loc()
    what = "pld.tensor.all_to_all_v"
    h = _host_level(what)
    if h is not None:
        from .distributed_host import record_all_to_all_v

        record_all_to_all_v(h, input, target, signal, send_counts, recv_counts, loc)
        return target
    r = require_rank(what)
    t = current(what)
    pt = window_param(t, target, what, loc)
    ps = _tensor_param(t, input, what, loc)
    _signal(t, signal, what, loc)
    pr = window_param(t, recv_counts, what, loc)
    pc = _tensor_param(t, send_counts, what, loc)
    names = [ps.name, pt.name, pc.name, pr.name]
    check_all_to_all_v(what, ps.name, ps.shape, ps.dtype, pt.name, pt.shape, pt.dtype, pc.name, pc.shape, pc.dtype,
                       pr.name, pr.shape, pr.dtype, r.world, loc, distinct=len(set(names)) == len(names))
    from ._ops import mins

    # The counts sent are clamped first (at most max_recv valid rows a block), into a staging tensor of this rank.
    clamped = r.new_param(t, "staging", pc.shape, pc.dtype, OUT)
    zeros = [0] * len(pc.shape)
    store(mins(load(send_counts, zeros, list(pc.shape)), pt.shape[0] // r.world), zeros, clamped)
    cut(CommOp("all_to_all", pt.name, src=ps.name, shape=pt.shape, loc=loc))
    cut(CommOp("all_to_all", pr.name, src=clamped.name, shape=pr.shape, loc=loc))
    return target


def check_all_to_all_v(what, sname, sshape, sdtype, tname, tshape, tdtype, cname, cshape, cdtype, rname, rshape,
                       rdtype, world: int, loc, *, distinct: bool) -> int:
    """Check the operands of an all_to_all_v (located errors); return its ``max_recv``."""
    if not distinct:
        raise compile_error(f"{what}: input, target, send_counts and recv_counts must be four different tensors "
                            f"({sname!r}, {tname!r}, {cname!r}, {rname!r})", loc)
    if sdtype != tdtype:
        raise compile_error(f"{what}: the input is {sdtype.name}, the target {tdtype.name}", loc)
    if tuple(sshape) != tuple(tshape):
        raise compile_error(f"{what}: the input {sname!r} is {list(sshape)}, the target {tname!r} {list(tshape)}; "
                            f"they must match", loc)
    if not tshape or tshape[0] % world or tshape[0] < world:
        raise compile_error(f"{what}: the target {tname!r} is {list(tshape)}; its first dimension must be the rank "
                            f"count ({world}) times max_recv", loc)
    if cdtype.name != "INT32" or tuple(cshape) not in ((world,), (world, 1)):
        raise compile_error(f"{what}: send_counts {cname!r} is {cdtype.name}{list(cshape)}; it must be "
                            f"INT32[{world}] or INT32[{world}, 1]", loc)
    if rdtype.name != "INT32" or tuple(rshape) != (world, 1):
        raise compile_error(f"{what}: recv_counts {rname!r} is {rdtype.name}{list(rshape)}; it must be "
                            f"INT32[{world}, 1]", loc)
    return tshape[0] // world


def check_exchange(kind, what, sname, sshape, sdtype, tname, tshape, tdtype, world: int, loc) -> None:
    """Check the source and target of an allgather or all_to_all (located errors)."""
    if sname == tname:
        raise compile_error(f"{what}: the source and the target must be different tensors, both are {tname!r}",
                            loc)
    if sdtype != tdtype:
        raise compile_error(f"{what}: the source is {sdtype.name}, the target {tdtype.name}", loc)
    if not tshape or tshape[0] != world:
        raise compile_error(f"{what}: the target {tname!r} is {list(tshape)}; its first dimension must be the rank "
                            f"count, {world}", loc)
    row = int(np.prod(tshape[1:], dtype=np.int64))
    src = int(np.prod(sshape, dtype=np.int64))
    if kind == "allgather" and src != row:
        raise compile_error(f"{what}: the source {sname!r} has {src} elements, one row of the target {tname!r} "
                            f"{row}", loc)
    if kind == "all_to_all" and tuple(sshape) != tuple(tshape):
        raise compile_error(f"{what}: the input {sname!r} is {list(sshape)}, the target {tname!r} {list(tshape)}; "
                            f"they must match", loc)


def reduce_scatter(target, signal=_MISSING, *, op=ReduceOp.Sum):
    """Row ``r`` of rank ``r``'s window `target` becomes `op` over every rank's row ``r``; return `target`.

    `target` has one row per rank (``[nranks, *row]``), each rank staging
    all of them; the other rows are left as they are.  All ranks meet here;
    each rank pulls its row from every peer (one peer copy each) and reduces
    it in with a reduce kernel.
    """
    loc = user_loc()
    what = "pld.tensor.reduce_scatter"
    name = _reduce_op(op, what, loc)
    h = _host_level(what)
    if h is not None:
        from .distributed_host import record_collective

        view = record_collective(h, "reduce_scatter", target, None, signal, mode=name, loc=loc)
        _reducible(view.dtype, what, loc)
        if not view.shape or view.shape[0] != h.world:
            raise compile_error(f"{what}: the target is {list(view.shape)}; its first dimension must be the rank "
                                f"count, {h.world}", loc)
        return target
    r = require_rank(what)
    t = current(what)
    p = window_param(t, target, what, loc)
    _signal(t, signal, what, loc)
    _reducible(p.dtype, what, loc)
    _rows(p, r.world, what, loc)
    cut(CommOp("reduce_scatter", p.name, shape=p.shape, mode=name, loc=loc))
    return target


def barrier(signal):
    """Hold every rank here until all of them arrived; return `signal` (left unchanged).

    In a host orchestrator, every rank's work after the barrier waits (on
    the device) for every rank's work before it.
    """
    loc = user_loc()
    h = _host_level("pld.tensor.barrier")
    if h is not None:
        from .distributed_host import record_collective

        record_collective(h, "barrier", None, None, signal, loc=loc)
        return signal
    t = current("pld.tensor.barrier")
    p = window_param(t, signal, "pld.tensor.barrier", loc)
    cut(CommOp("barrier", p.name, loc=loc))
    return signal


# -- pld.system --------------------------------------------------------------------------


def notify(target, peer, offsets, value=1, op=NotifyOp.AtomicAdd):
    """Add `value` to (``op=Set``: store it in) the cell `offsets` of rank `peer`'s signal window `target`.

    The window is named ``target`` here and ``signal`` in :func:`wait`, as in PyPTO.
    """
    t = current("pld.system.notify")
    loc = user_loc()
    r = require_rank("pld.system.notify")
    p = window_param(t, target, "pld.system.notify", loc)
    if p.dtype.is_float:
        raise compile_error(f"pld.system.notify: a signal window holds integers, {p.name!r} is {p.dtype.name}", loc)
    peer = _peer(peer, r, "pld.system.notify", loc)
    offs, _ = _box(offsets, (1,) * len(p.shape), p.shape, "pld.system.notify", loc)
    if op not in (NotifyOp.AtomicAdd, NotifyOp.Set):
        raise compile_error(f"pld.system.notify: op must be a pld.NotifyOp, got {op!r}", loc)
    cut(CommOp("notify", p.name, peer, offsets=offs, shape=(1,) * len(p.shape), value=_value(value, "pld.system.notify", loc, r),
               mode="add" if op == NotifyOp.AtomicAdd else "set", loc=loc))


def wait(signal, offsets, expected=1, cmp=WaitCmp.Ge):
    """Hold this rank until the cell `offsets` of its window `signal` compares true with `expected`."""
    t = current("pld.system.wait")
    loc = user_loc()
    r = require_rank("pld.system.wait")
    p = window_param(t, signal, "pld.system.wait", loc)
    offs, _ = _box(offsets, (1,) * len(p.shape), p.shape, "pld.system.wait", loc)
    if cmp not in (WaitCmp.Eq, WaitCmp.Ge):
        raise compile_error(f"pld.system.wait: cmp must be a pld.WaitCmp, got {cmp!r}", loc)
    cut(CommOp("wait", p.name, offsets=offs, shape=(1,) * len(p.shape),
               value=_value(expected, "pld.system.wait", loc, r), mode="eq" if cmp == WaitCmp.Eq else "ge", loc=loc))


class _Namespace:
    def __init__(self, name: str, **fns):
        self._name = name
        self.__dict__.update(fns)

    def __repr__(self) -> str:
        return f"<namespace pld.{self._name}>"


#: ``pld.tile``: tile-level cross-rank operations.
tile = _Namespace("tile", remote_load=remote_load, remote_store=remote_store)
#: ``pld.tensor``: tensor-level cross-rank operations.
tensor = _Namespace("tensor", put=put, get=get, remote_store=tensor_remote_store, barrier=barrier, allreduce=allreduce, broadcast=broadcast,
                    allgather=allgather, reduce_scatter=reduce_scatter, all_to_all=all_to_all,
                    all_to_all_v=all_to_all_v,
                    alloc_window_buffer=alloc_window_buffer, window=window)
#: ``pld.system``: signals.
system = _Namespace("system", notify=notify, wait=wait, world_size=world_size, get_comm_ctx=get_comm_ctx,
                    rank=rank, nranks=nranks)
