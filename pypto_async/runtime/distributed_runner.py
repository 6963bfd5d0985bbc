"""Running a multi-chip (L3) plan on a :class:`~pypto_async.runtime.DistributedWorker` (PyPTO's module name).

A :class:`~pypto_async.ir.distributed_compiled_program.DistributedCompiledProgram`
is a list of steps: dispatches (one rank's segments and the cross-rank
operations between them), SubWorker callbacks and the host orchestrator's
collectives.  :func:`run_plan` runs the dispatches between two callbacks
(or host collectives) together, rank by rank in lockstep:

1. Every tensor argument gets a DeviceTensor on its rank's device (a host
   view ``x[r]`` is uploaded; a DeviceTensor of that device is used as it
   is), every window buffer one zeroed DeviceTensor per rank, every staging
   and mirror tensor of a cut one per dispatch.
2. Each rank's steps are queued in order on its device's default stream:
   a segment is a launch (``handle.submit``); an operation is queued with
   the driver's peer copies (``_peer.copy``), which order it, as a hazard
   tracked access of both devices' tensors, after what was queued before it
   and before what comes after (see :mod:`pypto_async.language.distributed`
   for each operation).  A rank stops at a barrier until every rank is
   there (then each rank's stream waits, on the device, for an event of
   every other's; at a collective the collective is queued first, over the
   ranks' windows, :mod:`._collectives`), and at a wait until its signal
   cell, copied to the host after everything queued before it, satisfies
   the comparison.  When no rank can move, the plan deadlocked:
   :class:`PtoInvalidStateError`.  A host collective runs between the
   groups of dispatches before and after it, queued on every rank's stream.
3. When every rank finished, the outputs are copied into the host arrays
   (``Out`` and ``InOut`` views), temporaries are freed, and a callback
   after the group runs on this thread with the host arrays it names
   (wrapped as :class:`ContinuousTensor`).

The plan is a generator (:func:`_plan`) that yields wherever it waits;
:func:`run_plan` drives it on the calling thread (a sync-mode worker),
:func:`arun_plan` awaits it (an async-mode worker: asyncio, or trio through
anyio), so the same plan never blocks an event loop.  Nothing here runs on a
driver thread.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np

from .._dtypes import as_dtype, holds
from .._signature import IN, SCALAR
from ..errors import PtoArgumentError, PtoError, PtoInvalidStateError, PtoNotSupported
from . import _collectives, _peer
from ._args import _is_torch_tensor
from ._deps_json import DEPS_FILE, DFX_DIR, deps_document
from ._dfx import _calls, _write_json, _write_scope_stats, run_id
from ._stacked import StackedDeviceTensor
from ._stream import task_default
from ._tensor import DeviceTensor

__all__ = ["ContinuousTensor", "run_plan", "arun_plan", "check_args", "transfer_runs", "box_kernel", "prepare_kernels",
           "_tensor_from_continuous"]


@dataclass(frozen=True)
class ContinuousTensor:
    """A tensor argument of a SubWorker callback: a host array (``array``) and its shape and dtype."""

    array: object  # numpy array or torch tensor (the caller's, not a copy)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.array.shape)

    @property
    def dtype(self):
        return as_dtype(self.array.dtype)


def _tensor_from_continuous(ct):
    """The torch tensor a callback argument stands for (the caller's array, not a copy)."""
    import torch

    a = ct.array if isinstance(ct, ContinuousTensor) else ct
    if _is_torch_tensor(a):
        return a
    return torch.from_numpy(np.asarray(a))


# -- arguments -------------------------------------------------------------------------------


def _shape_dtype(arg):
    if isinstance(arg, (DeviceTensor, StackedDeviceTensor)):
        return tuple(arg.shape), as_dtype(arg.dtype)
    return tuple(int(d) for d in arg.shape), as_dtype(arg.dtype)


def check_args(dcp, args) -> None:
    """Raise PtoArgumentError unless `args` fit `dcp`'s compiled signature."""
    if len(args) != len(dcp.params):
        raise PtoArgumentError(f"{dcp.name} takes {len(dcp.params)} arguments ({', '.join(dcp.param_names)}), "
                               f"got {len(args)}")
    for p, a in zip(dcp.params, args):
        if p.direction == SCALAR:
            if not isinstance(a, (int, float, np.generic)) or isinstance(a, bool):
                raise PtoArgumentError(f"{dcp.name}: argument {p.name!r} is a scalar, got {type(a).__name__}")
            continue
        if not (isinstance(a, (np.ndarray, DeviceTensor, StackedDeviceTensor)) or _is_torch_tensor(a)):
            raise PtoArgumentError(f"{dcp.name}: argument {p.name!r} must be a numpy array, a torch CPU tensor, "
                                   f"a DeviceTensor or a StackedDeviceTensor, got {type(a).__name__}")
        shape, dtype = _shape_dtype(a)
        if shape != p.shape or not holds(dtype, p.dtype):  # BF16 may come as its uint16 bits (numpy has none)
            raise PtoArgumentError(f"{dcp.name}: argument {p.name!r} is {dtype.name}{list(shape)}; the program "
                                   f"was compiled for {p.dtype.name}{list(p.shape)} (compile it again for these)")
        if isinstance(a, DeviceTensor):
            if a._freed:
                raise PtoArgumentError(f"{dcp.name}: argument {p.name!r} was freed")
        elif isinstance(a, StackedDeviceTensor):
            for i, shard in enumerate(a.shards):
                if shard._freed:
                    raise PtoArgumentError(f"{dcp.name}: argument {p.name!r}: shard {i} was freed")
        elif p.direction != IN and not (a.flags.writeable if isinstance(a, np.ndarray) else True):
            raise PtoArgumentError(f"{dcp.name}: argument {p.name!r} is an output; pass a writable array")


def _view(host, index):
    v = host
    for i in index:
        v = v[i]
    return v


class _Run:
    """One run of a plan's group of dispatches: the tensors it made and what it queued."""

    def __init__(self, dw, dcp, args):
        self.dw = dw
        self.dcp = dcp
        self.args = dict(zip(dcp.param_names, args))
        self.temps: list[DeviceTensor] = []
        self.launches: list = []
        self.uploads: dict = {}  # (rank, param, index) -> DeviceTensor
        self.downloads: list = []  # (DeviceTensor, host view)
        self.windows: dict = {}  # (buffer index, rank) -> DeviceTensor
        #: prepare(persistent=True): the windows outlive the run (the worker keeps them for the program's next)
        self.retained = bool(getattr(dw, "_persistent", False))
        self.reset = bool(getattr(dw, "_reset_windows", True))
        if self.retained:
            self.windows = dw._retained.setdefault(id(dcp), {})
            self.fresh: set = set()  # kept windows this run has zeroed (or made)

    def worker(self, rank: int):
        return self.dw.workers[rank]

    def temp(self, rank: int, shape, dtype, init=None) -> DeviceTensor:
        t = self.worker(rank).alloc_tensor(tuple(shape), as_dtype(dtype), init=init)
        self.temps.append(t)
        return t

    def window(self, buf, rank: int) -> DeviceTensor:
        key = (buf.index, rank)
        t = self.windows.get(key)
        if t is None:  # kept for the whole run (across callbacks), freed at its end (persistent: kept longer)
            t = self.windows[key] = self.worker(rank).alloc_tensor(buf.shape, buf.dtype,
                                                                   init=np.zeros(buf.shape, buf.dtype.np_storage))
            if self.retained:
                self.fresh.add(key)
        elif self.retained and self.reset and key not in self.fresh:  # a kept window, zeroed before its reuse
            self.fresh.add(key)
            self.launches.append(self.worker(rank).copy(t, np.zeros(buf.shape, buf.dtype.np_storage)))
        return t

    def tensor(self, rank: int, ht, direction: str) -> DeviceTensor:
        # the language imports the runtime; this one is imported when used
        from ..language.distributed_host import HostTensor

        assert isinstance(ht, HostTensor)
        host = self.args[ht.param]
        if isinstance(host, StackedDeviceTensor):  # x[i] is shard i, resident where it runs (_check_resident)
            return host.shards[ht.index[0]]
        if isinstance(host, DeviceTensor):
            if ht.index:
                raise PtoNotSupported(f"{self.dcp.name}: a view {ht!r} of a DeviceTensor argument; pass the "
                                      f"DeviceTensor whole")
            if host._worker is not self.worker(rank):
                raise PtoArgumentError(f"{self.dcp.name}: argument {ht.param!r} lives on device "
                                       f"{host._worker.device_id}; this dispatch runs on rank {rank} (device "
                                       f"{self.dcp.device_ids[rank]})")
            return host
        key = (rank, ht.param, ht.index)
        t = self.uploads.get(key)
        view = _view(host, ht.index)
        if t is None:
            part = view.contiguous() if _is_torch_tensor(view) else np.ascontiguousarray(view)
            t = self.uploads[key] = self.temp(rank, ht.shape, ht.dtype, init=part)
        if direction != IN and all(d is not t for d, _ in self.downloads):
            self.downloads.append((t, view))
        return t


class _Rank:
    """One dispatch being queued: its bound tensors and where it is in its steps."""

    def __init__(self, run: _Run, d):
        self.run = run
        self.d = d
        self.pc = 0
        self.barriers = 0  # barriers passed
        w = run.worker(d.rank)
        self.worker = w
        self.bound: dict = {}
        params = {p.name: p for p in d.params}
        # the language imports the runtime; this one is imported when used
        from ..language.distributed_host import HostTensor, WindowView

        for name, arg in d.args.items():
            p = params[name]
            if isinstance(arg, WindowView):
                self.bound[name] = run.window(arg.buffer, d.rank)
            elif isinstance(arg, HostTensor):
                self.bound[name] = run.tensor(d.rank, arg, p.direction)
            else:
                self.bound[name] = arg
        for p in d.params:
            if p.name not in self.bound:  # a staging or mirror tensor of a cut
                self.bound[p.name] = run.temp(d.rank, p.shape, p.dtype)

    @property
    def done(self) -> bool:
        return self.pc >= len(self.d.compiled)

    def current(self):
        return self.d.compiled[self.pc]


def _is_op(step) -> bool:
    # the language imports the runtime; this one is imported when used
    from ..language.distributed_trace import CommOp

    return isinstance(step, CommOp)


# -- the operations ------------------------------------------------------------------------

_BOX_KERNELS: dict = {}


def box_kernel(shape, box, offsets, dtype, add: bool):
    """The compiled kernel that writes (``add``: adds) a ``box`` tensor into a ``shape`` one at ``offsets``."""
    key = (tuple(shape), tuple(box), tuple(offsets), dtype.name, add)
    hit = _BOX_KERNELS.get(key)
    if hit is not None:
        return hit
    # the language sits above the runtime; imported when used
    from .. import language as pl

    offs = list(offsets)
    zeros = [0] * len(box)

    def box_update(inbox, win):
        with pl.incore():
            t = pl.load(inbox, zeros, list(box))
            if add:
                t = pl.add(pl.load(win, offs, list(box)), t)
            pl.store(t, offs, win)
        return win

    # typed: a BF16 (FP8) window is compiled as BF16, its raw-bit numpy samples below notwithstanding
    box_update.__annotations__ = {"inbox": pl.Tensor[list(box), dtype],
                                  "win": pl.InOut[pl.Tensor[list(shape), dtype]]}
    fn = pl.jit(box_update)
    compiled = fn.compile(np.zeros(box, dtype.np_storage), np.zeros(shape, dtype.np_storage))
    _BOX_KERNELS[key] = compiled
    return compiled


def clamp_kernel(shape, dtype, hi: int):
    """The compiled kernel that clamps an integer tensor to at most `hi`, in place (an all_to_all_v's counts)."""
    key = ("clamp", tuple(shape), dtype.name, hi)
    hit = _BOX_KERNELS.get(key)
    if hit is not None:
        return hit
    # the language sits above the runtime; imported when used
    from .. import language as pl

    def clamp_counts(counts):
        with pl.incore():
            pl.store(pl.mins(pl.load(counts, [0] * len(shape), list(shape)), hi), [0] * len(shape), counts)
        return counts

    clamp_counts.__annotations__ = {"counts": pl.InOut[pl.Tensor[list(shape), dtype]]}
    compiled = pl.jit(clamp_counts).compile(np.zeros(shape, dtype.np_storage))
    _BOX_KERNELS[key] = compiled
    return compiled


def transfer_runs(dst_shape, dst_offsets, src_shape, src_offsets, box, itemsize: int, chunks=(0, 0)) -> list:
    """The byte runs of copying box `box` of a `src_shape` tensor into one of a `dst_shape` tensor, per chunk.

    The transfer is viewed as ``[rows, cols]`` (``cols`` the box's last
    dimension, ``rows`` the product of the others) and cut into chunks of
    ``chunks = (chunk_rows, chunk_cols)`` (0: the full extent; clamped to
    it), row-major over the chunks.  Each chunk is a list of ``(dst_offset,
    src_offset, nbytes)`` runs, contiguous rows of it merged where both
    tensors hold them back to back (a chunk of whole rows is one run).
    """
    box = tuple(int(d) for d in box)
    cols = box[-1] if box else 1
    lead = box[:-1]
    rows = int(np.prod(lead, dtype=np.int64)) if lead else 1
    cr = min(chunks[0] or rows, rows)
    cc = min(chunks[1] or cols, cols)

    def strides(shape):
        out, acc = [], 1
        for d in reversed(shape):
            out.append(acc)
            acc *= int(d)
        return out[::-1]

    ds, ss = strides(dst_shape), strides(src_shape)
    idx = list(np.ndindex(*lead)) if lead else [()]

    def start(offsets, st, i, c):
        return sum((o + k) * s for o, k, s in zip(offsets[:-1], idx[i], st[:-1])) + offsets[-1] + c

    out = []
    for r0 in range(0, rows, cr):
        for c0 in range(0, cols, cc):
            n = min(cc, cols - c0) * itemsize
            runs: list = []
            for i in range(r0, min(r0 + cr, rows)):
                d = start(dst_offsets, ds, i, c0) * itemsize
                s = start(src_offsets, ss, i, c0) * itemsize
                if runs and runs[-1][0] + runs[-1][2] == d and runs[-1][1] + runs[-1][2] == s:
                    runs[-1] = (runs[-1][0], runs[-1][1], runs[-1][2] + n)
                else:
                    runs.append((d, s, n))
            out.append(runs)
    return out


def _copy_box(run: _Run, src: DeviceTensor, dst: DeviceTensor, op, stream=None) -> None:
    """Copy op's box of `src` (at ``op.src_offsets``) into `dst` (at ``op.offsets``), chunk by chunk."""
    item = as_dtype(dst.dtype).itemsize
    chunks = transfer_runs(dst.shape, op.offsets, src.shape, op.src_offsets, op.shape, item, op.chunks)
    run.launches.append(_peer.copy_parts(dst, src, [r for chunk in chunks for r in chunk], stream))


def prepare_kernels(dcp) -> None:
    """Compile the box kernels `dcp`'s operations will launch (cached), so that running it compiles nothing.

    A remote store, an atomic put and a notify end in a small kernel on the
    peer (:func:`box_kernel`); compiling it when the plan is compiled keeps
    compilation off the run (and off an event loop that awaits it).
    """
    # the language imports the runtime; this one is imported when used
    from ..language.distributed_trace import CommOp

    for d in dcp.dispatches:
        params = {p.name: p for p in d.params}
        for op in d.compiled:
            if not isinstance(op, CommOp) or op.kind not in ("remote_store", "put", "notify"):
                continue
            if op.kind == "put" and op.mode != "add":
                continue
            win = params[op.tensor]
            box_kernel(win.shape, op.shape, op.offsets, win.dtype, op.mode == "add")


def _into_peer(run: _Run, st: _Rank, src: DeviceTensor, peer: int, win: DeviceTensor, offsets, mode: str,
               op=None) -> None:
    """Move `src` (this rank's) into rank `peer`'s `win` at `offsets`: a peer copy, then a box kernel there.

    With `op` (a put), only its box of `src` moves, chunk by chunk.
    """
    box = tuple(op.shape) if op is not None else tuple(src.shape)
    inbox = run.temp(peer, box, src.dtype)
    if op is None:
        run.launches.append(st.worker.copy(inbox, src))  # a peer copy on this rank's stream, after its work
    else:
        item = as_dtype(src.dtype).itemsize
        chunks = transfer_runs(box, (0,) * len(box), src.shape, op.src_offsets, box, item, op.chunks)
        run.launches.append(_peer.copy_parts(inbox, src, [r for c in chunks for r in c]))
    k = box_kernel(win.shape, box, offsets, as_dtype(win.dtype), mode == "add")
    run.launches.append(run.worker(peer).register(k).submit(inbox, win))


def _cell(run: _Run, rank: int, t: DeviceTensor, offsets):
    """Read one cell of `t` after every write queued so far (a generator: it yields the copy to wait for)."""
    host = np.empty(t.shape, as_dtype(t.dtype).np_storage)
    yield run.worker(rank).copy(host, t)
    return host[tuple(offsets)].item()


def _step_op(run: _Run, st: _Rank, op, ranks: list):
    """Queue `op` of rank `st`; return "ok", or "blocked" (a wait not yet satisfied, a barrier not full).

    A generator (see :func:`run_plan`): a wait yields the read of its cell.
    """
    d = st.d
    b = st.bound
    if op.kind == "remote_load":
        peer_win = _peer_tensor(run, st, op.tensor, op.peer)
        run.launches.append(st.worker.copy(b[op.mirror], peer_win))
    elif op.kind == "remote_store":
        _into_peer(run, st, b[op.staging], op.peer, _peer_tensor(run, st, op.tensor, op.peer), op.offsets, "set")
    elif op.kind == "put":
        dst = _peer_tensor(run, st, op.tensor, op.peer)
        if op.mode == "add":
            _into_peer(run, st, b[op.src], op.peer, dst, op.offsets, "add", op)
        else:
            _copy_box(run, b[op.src], dst, op, task_default(st.worker))  # on this rank's stream
    elif op.kind == "get":
        _copy_box(run, _peer_tensor(run, st, op.src, op.peer), b[op.tensor], op, task_default(st.worker))
    elif op.kind == "notify":
        sig = b[op.tensor]
        value = run.temp(d.rank, op.shape, as_dtype(sig.dtype), init=np.full(op.shape, op.value, as_dtype(sig.dtype).np_storage))
        _into_peer(run, st, value, op.peer, _peer_tensor(run, st, op.tensor, op.peer), op.offsets, op.mode)
    elif op.kind == "wait":
        v = yield from _cell(run, d.rank, b[op.tensor], op.offsets)
        ok = v == op.value if op.mode == "eq" else v >= op.value
        if not ok:
            return "blocked"
    elif op.kind in _COLLECTIVES:
        return "barrier"
    else:  # pragma: no cover - the tracer makes only the kinds above
        raise PtoNotSupported(f"unknown cross-rank operation {op.kind!r}")
    return "ok"


def _peer_tensor(run: _Run, st: _Rank, name: str, peer: int) -> DeviceTensor:
    """Rank `peer`'s copy of the window that parameter `name` of `st`'s dispatch is bound to."""
    # the language imports the runtime; this one is imported when used
    from ..language.distributed_host import WindowView

    arg = st.d.args[name]
    if not isinstance(arg, WindowView):  # the tracer checks this; a plan built by hand might not
        raise PtoArgumentError(f"{st.d.name}: parameter {name!r} is not a window")
    return run.window(arg.buffer, peer)


#: The operations every rank meets at (in the same order on every rank).
_COLLECTIVES = ("barrier", "allreduce", "broadcast", "allgather", "reduce_scatter", "all_to_all")


def _queue_collective(run: _Run, kind: str, mode: str, root: int, dsts: list, srcs: list | None) -> None:
    """Queue collective `kind` over the ranks' tensors (``dsts[r]`` and ``srcs[r]`` on rank ``r``).

    Nothing waits here: the collective's markers join the run's launches,
    and each rank's later work is queued behind it on the same stream (the
    collectives of :mod:`._collectives` order each rank's own buffers as
    hazard-tracked accesses and the peers' through device-side waits).
    """
    ids = tuple(range(len(dsts)))  # rank r runs on worker r
    kernels = run.dw._reduce
    if kind == "allreduce":
        stacked = StackedDeviceTensor(dsts, (len(dsts), *dsts[0].shape), ids)
        markers = _collectives.all_reduce(stacked, stacked, mode, kernels, False)
    elif kind == "broadcast":
        markers = _collectives.broadcast_from(dsts, root)
    elif kind == "allgather":
        markers = _collectives.gather_rows(srcs, dsts)
    elif kind == "all_to_all":
        markers = _collectives.all_to_all_rows(srcs, dsts)
    elif kind == "reduce_scatter":
        markers = _collectives.reduce_scatter_rows(dsts, mode, kernels, ids)
    else:
        markers = []
    run.launches.extend(markers)


def _cross_wait(workers) -> None:
    """Every worker's default stream waits (on the device) for everything queued so far on every other's."""
    events = [(w, task_default(w).record()) for w in workers]
    for w in workers:
        stream = task_default(w)
        for other, ev in events:
            if other is not w:
                stream.wait(ev)


def _release_barrier(run: _Run, group: list) -> None:
    """Run the collective every rank of `group` is at, then release them as a barrier does.

    A barrier: every rank's stream waits (on the device) for everything
    queued so far on every other's.  A collective (``allreduce``,
    ``broadcast``, ``allgather``, ``reduce_scatter``, ``all_to_all``) is
    queued first over the ranks' windows (:func:`_queue_collective`).
    """
    op = group[0].current()
    if op.kind != "barrier":
        group = sorted(group, key=lambda st: st.d.rank)
        dsts = [st.bound[op.tensor] for st in group]
        srcs = [st.bound[op.src] for st in group] if op.src else None
        _queue_collective(run, op.kind, op.mode, op.peer or 0, dsts, srcs)
    _cross_wait([st.worker for st in group])
    for st in group:
        st.barriers += 1
        st.pc += 1


def _host_collective(run: _Run, c) -> None:
    """Run a host orchestrator's collective (a HostCollective) over every rank's window."""
    world = run.dcp.world_size
    if c.kind == "barrier":
        _cross_wait([run.worker(r) for r in range(world)])
        return
    dsts = [run.window(c.target.buffer, r) for r in range(world)]
    srcs = [run.window(c.source.buffer, r) for r in range(world)] if c.source is not None else None
    if c.kind == "all_to_all_v":  # the blocks, the counts, then each rank clamps what it received
        _queue_collective(run, "all_to_all", "", 0, dsts, srcs)
        recv = [run.window(c.recv.buffer, r) for r in range(world)]
        _queue_collective(run, "all_to_all", "", 0, recv, [run.window(c.counts.buffer, r) for r in range(world)])
        k = clamp_kernel(recv[0].shape, as_dtype(recv[0].dtype), c.target.shape[0] // world)
        for r in range(world):
            run.launches.append(run.worker(r).register(k).submit(recv[r]))
        return
    _queue_collective(run, c.kind, c.mode, c.root, dsts, srcs)


def _run_group(run: _Run, dispatches: list):
    """Queue `dispatches` rank by rank in lockstep (a generator: it yields what a wait reads)."""
    per_rank: dict[int, list] = {}
    for d in dispatches:
        per_rank.setdefault(d.rank, []).append(d)
    order = sorted(per_rank)
    fronts = {r: _Rank(run, per_rank[r].pop(0)) for r in order}
    world = run.dcp.world_size
    while fronts:
        moved = False
        for r in list(order):
            st = fronts.get(r)
            while st is not None and not st.done:
                step = st.current()
                if not _is_op(step):
                    args = [st.bound[p.name] for p in st.d.params]
                    run.launches.append(st.worker.register(step).submit(*args))
                    st.pc += 1
                    moved = True
                    continue
                res = yield from _step_op(run, st, step, order)
                if res == "ok":
                    st.pc += 1
                    moved = True
                    continue
                break  # blocked or at a barrier
            if st is not None and st.done:
                nxt = per_rank[r]
                fronts[r] = _Rank(run, nxt.pop(0)) if nxt else None
                if fronts[r] is None:
                    del fronts[r]
                    order.remove(r)
                moved = True
        at_barrier = [st for st in fronts.values() if not st.done and _is_op(st.current())
                      and st.current().kind in _COLLECTIVES]
        if at_barrier and len(at_barrier) == len(fronts) == world \
                and len({st.barriers for st in at_barrier}) == 1 \
                and len({(st.current().kind, st.current().mode, st.current().peer) for st in at_barrier}) == 1:
            _release_barrier(run, at_barrier)
            continue
        if not moved and fronts:
            stuck = ", ".join(f"rank {st.d.rank} at {st.current().kind} ({_where(st.current())})"
                              for st in fronts.values())
            raise PtoInvalidStateError(f"{run.dcp.name}: the ranks deadlocked: {stuck}; no rank can move "
                                       f"(a wait no notify satisfies, or a barrier not every rank reaches)")


def _where(op) -> str:
    loc = getattr(op, "loc", None)
    return f"{loc.file}:{loc.line}" if loc is not None and hasattr(loc, "file") else str(loc)


def _finish(run: _Run, *, download: bool = True, final: bool = False):
    """Wait for what the group queued; copy its outputs to the host (unless it failed); free its temporaries.

    A generator (see :func:`run_plan`): it yields each launch to wait for.
    The temporaries are freed (in stream order) however the waits end, a
    cancelled await included.
    """
    first = None
    try:
        for launch in run.launches:
            try:
                yield launch
            except PtoError as exc:
                first = first or exc
        if first is None and download:
            for t, view in run.downloads:
                try:
                    yield t._worker.copy(view, t)
                except PtoError as exc:
                    first = first or exc
    finally:
        _release(run, final)
    if first is not None:
        raise first


def _release(run: _Run, final: bool) -> None:
    """Free the group's temporaries (and at the end the windows) in stream order; forget what it queued."""
    for launch in run.launches:  # their failures are the run's, raised by it (or moot: it was cancelled)
        launch._mark_retrieved()
    done = run.temps + (list(run.windows.values()) if final and not run.retained else [])
    for t in done:
        if t._init is not None:  # an upload of the run's own: its failure is the run's
            t._init._mark_retrieved()
        with contextlib.suppress(PtoError):
            if not t._freed and not t._worker.is_closed:
                t.free()
    run.temps.clear()
    run.launches.clear()
    run.downloads.clear()
    run.uploads.clear()
    if final and not run.retained:
        run.windows.clear()


def _check_resident(dw, dcp, args) -> None:
    """A DeviceTensor argument must live on the device of every rank it is dispatched to (checked up front)."""
    # the language imports the runtime; this one is imported when used
    from ..language.distributed_host import Callback, HostTensor

    bound = dict(zip(dcp.param_names, args))
    for name, t in bound.items():
        if isinstance(t, StackedDeviceTensor):
            for i, (shard, w) in enumerate(zip(t.shards, t.worker_ids)):
                if not 0 <= w < len(dw.workers) or shard._worker is not dw.workers[w]:
                    raise PtoArgumentError(f"{dcp.name}: argument {name!r}: shard {i} does not live on worker "
                                           f"{w} of this DistributedWorker (alloc_stacked_tensor makes one)")
    for s in dcp.steps:  # the host sees host arrays only: a callback's or the return's view of a stacked one
        for v in s.args if isinstance(s, Callback) else ():
            if isinstance(v, HostTensor) and isinstance(bound.get(v.param), StackedDeviceTensor):
                raise PtoNotSupported(f"{dcp.name}: callback {s.name!r} takes {v!r} of a StackedDeviceTensor "
                                      f"argument; its shards live on the devices, a callback sees host arrays")
    ret = dcp.returned
    if isinstance(ret, HostTensor) and isinstance(bound.get(ret.param), StackedDeviceTensor):
        raise PtoNotSupported(f"{dcp.name}: the host function returns {ret!r} of a StackedDeviceTensor argument; "
                              f"return a host array")
    for d in dcp.dispatches:
        for arg in d.args.values():
            t = bound.get(arg.param) if isinstance(arg, HostTensor) else None
            if isinstance(t, StackedDeviceTensor):
                if len(arg.index) != 1:
                    raise PtoNotSupported(f"{dcp.name}: {arg!r} of a StackedDeviceTensor argument; a dispatch "
                                          f"takes one whole shard, x[i]")
                i = arg.index[0]
                if t.worker_ids[i] != d.rank:
                    raise PtoArgumentError(f"{dcp.name}: shard {i} of argument {arg.param!r} lives on worker "
                                           f"{t.worker_ids[i]}; {d.name} runs on rank {d.rank}: upload it with "
                                           f"alloc_stacked_tensor(..., worker_ids=) placing shard {i} on {d.rank}")
                continue
            if isinstance(t, DeviceTensor):
                if arg.index:
                    raise PtoNotSupported(f"{dcp.name}: a view {arg!r} of a DeviceTensor argument; pass the "
                                          f"DeviceTensor whole")
                if t._worker is not dw.workers[d.rank]:
                    raise PtoArgumentError(f"{dcp.name}: argument {arg.param!r} lives on device "
                                           f"{t._worker.device_id} of another worker, or another device; "
                                           f"{d.name} runs on rank {d.rank} (device {dcp.device_ids[d.rank]}) "
                                           f"of this one")


class _HostCall:
    """What the plan asks its driver to run on the host: a SubWorker callback."""

    __slots__ = ("fn", "args")

    def __init__(self, fn, args):
        self.fn = fn
        self.args = args


def _plan(dw, dcp, args, callbacks):
    """Run the plan of `dcp` on `dw` (a generator; see :func:`run_plan`); return what the host function returned."""
    # the language imports the runtime; this one is imported when used
    from ..language.distributed_host import Callback, HostCollective, HostTensor

    check_args(dcp, args)
    if len(dw.workers) < dcp.world_size:
        raise PtoArgumentError(f"{dcp.name} has {dcp.world_size} ranks; the worker has {len(dw.workers)} devices")
    callbacks = callbacks or {}
    for s in dcp.steps:
        if isinstance(s, Callback) and s.fn is None and s.name not in callbacks:
            raise PtoArgumentError(f"{dcp.name}: callback {s.name!r} is not bound; pass prepare(callbacks="
                                   f"{{{s.name!r}: fn}})")
    _check_resident(dw, dcp, args)
    run = _Run(dw, dcp, args)
    group: list = []
    try:
        for s in dcp.steps:
            if isinstance(s, Callback):
                if group:
                    yield from _run_group(run, group)
                    yield from _finish(run)
                    group = []
                host = [ContinuousTensor(_view(run.args[a.param], a.index)) for a in s.args]
                if s.fn is None or s.name in callbacks:  # bound at prepare(callbacks=): it replaces a body
                    yield _HostCall(callbacks[s.name], (host,))
                else:
                    yield _HostCall(s.fn, tuple(_tensor_from_continuous(h) for h in host))
            elif isinstance(s, HostCollective):
                if group:  # the dispatches before it are queued first, those after it behind it
                    yield from _run_group(run, group)
                    group = []
                _host_collective(run, s)
            else:
                group.append(s)
        if group:
            yield from _run_group(run, group)
        yield from _finish(run, final=True)
        _write_dfx(dw, dcp)
    except BaseException:
        with contextlib.suppress(BaseException):
            yield from _finish(run, download=False, final=True)  # nothing of a failed run reaches the host arrays
        raise
    ret = dcp.returned
    if isinstance(ret, HostTensor):
        return _view(run.args[ret.param], ret.index)
    return None


def _write_dfx(dw, dcp) -> None:
    """PyPTO's per-dispatch DFX outputs of a finished run: ``<output_dir>/dfx_outputs/rank{r}/d{k}/``.

    ``d{k}`` is rank ``r``'s ``k``-th dispatch.  With ``enable_dep_gen``,
    ``deps.json``: the tasks and edges of the dispatch's segments (one
    document; a segment's task ids follow the previous segment's, and no
    edge crosses a cut: the cross-rank operation between them orders
    them).  With ``enable_scope_stats``, ``scope_stats/scope_stats.jsonl``:
    the rank's streams at the end of the run, as a single chip writes it.
    (PyPTO's per-rank swimlane records are not written here.)
    """
    cfg = getattr(dw, "_config", None)
    if cfg is None or not (cfg.enable_dep_gen or cfg.enable_scope_stats):
        return
    # the language imports the runtime; this one is imported when used
    from ..language.distributed_host import Dispatch

    seen: dict[int, int] = {}
    for d in dcp.steps:
        if not isinstance(d, Dispatch):
            continue
        k = seen.get(d.rank, 0)
        seen[d.rank] = k + 1
        out = dcp.output_dir / DFX_DIR / f"rank{d.rank}" / f"d{k}"
        out.mkdir(parents=True, exist_ok=True)
        if cfg.enable_dep_gen:
            doc = {"program": d.name, "tasks": [], "edges": []}
            for c in d.compiled:
                graph = getattr(c, "task_graph", None)
                if graph is None:
                    continue
                part, base = deps_document(graph, d.name), len(doc["tasks"])
                doc["tasks"] += [{**t, "id": t["id"] + base} for t in part["tasks"]]
                doc["edges"] += [{**e, "src": e["src"] + base, "dst": e["dst"] + base} for e in part["edges"]]
            _write_json(out / DEPS_FILE, doc)
        if cfg.enable_scope_stats:
            (out / "scope_stats").mkdir(exist_ok=True)
            _write_scope_stats(dw.workers[d.rank], out, run_id(), next(_calls), d.name)


def run_plan(dw, dcp, args, callbacks=None):
    """Run the plan of `dcp` on `dw` (a sync-mode worker) with `args` (checked); return what the host returned.

    The plan itself (:func:`_plan`) is a generator that queues the work and
    yields where it must wait: a Launch (a wait's cell read, what a group
    queued, an output's copy to the host) or a SubWorker callback to run.
    This driver waits on this thread; :func:`arun_plan` awaits.
    """
    gen = _plan(dw, dcp, args, callbacks)
    value, exc = None, None
    while True:
        try:
            item = gen.throw(exc) if exc is not None else gen.send(value)
        except StopIteration as stop:
            return stop.value
        value = exc = None
        try:
            value = item.fn(*item.args) if isinstance(item, _HostCall) else item.sync()
        except BaseException as e:  # into the plan, which frees what it made and raises it
            exc = e


async def arun_plan(dw, dcp, args, callbacks=None):
    """:func:`run_plan` for an async-mode worker: the same plan, awaited (asyncio, or trio through anyio).

    Nothing blocks the event loop: each wait is an ``await`` of its Launch,
    and a SubWorker callback runs in a worker thread
    (``anyio.to_thread.run_sync``), since it is the user's host code.
    """
    import anyio

    gen = _plan(dw, dcp, args, callbacks)
    value, exc = None, None
    while True:
        try:
            item = gen.throw(exc) if exc is not None else gen.send(value)
        except StopIteration as stop:
            return stop.value
        value = exc = None
        try:
            if isinstance(item, _HostCall):
                value = await anyio.to_thread.run_sync(lambda item=item: item.fn(*item.args))
            else:
                value = await item.wait()
        except BaseException as e:
            exc = e
