"""Collectives: rings over the shards of a stacked tensor, and a mesh of box copies between ranks.

:class:`~._distributed.DistributedWorker` checks a collective's arguments and
calls the function here of the same name, which queues the ring's work on
every rank and returns the markers that end it (one per rank); the worker
makes them a :class:`~._distributed.DistributedLaunch`.

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

The collectives of a multi-chip program (``pld.tensor.allgather``,
``broadcast``, ``reduce_scatter``, ``all_to_all``:
:mod:`pypto_async.runtime.distributed_runner`) move boxes (rows) of each
rank's windows rather than whole shards; they are a :class:`_Mesh`, one
step: every rank pulls what it needs straight from every peer that holds it
(peer copies on its own stream, each after the peer's start point, so after
everything queued on the peer before the collective), reduces it in where
the collective reduces, and ends, as a ring does, with one point that waits
for every rank that read its buffers.  To the ordering of each worker the
collective is again one access per rank: a read of its source window and a
write of its target window.
"""

from __future__ import annotations

from .._driver import check, ffi, lib
from ._dispatch import queue_one
from ._event import enter
from ._hazards import order
from ._stacked import StackedDeviceTensor
from ._stream import task_default
from ._tensor import DeviceTensor

__all__ = ["REDUCE_OPS", "REDUCE_DTYPES", "all_reduce", "all_gather", "broadcast", "gather_rows",
           "all_to_all_rows", "broadcast_from", "reduce_scatter_rows"]

#: all_reduce's ops, as the built-in "reduce" kernel's codes.
REDUCE_OPS = {"sum": 0, "max": 1, "min": 2, "prod": 3}
#: The dtypes all_reduce takes, as the built-in "reduce" kernel's codes.
REDUCE_DTYPES = {"float32": 0, "float64": 1, "int32": 2, "int64": 3, "float16": 4}


def all_reduce(t: StackedDeviceTensor, dst: StackedDeviceTensor, op: str, kernels: dict, copy_in: bool) -> list:
    """Queue the ring that reduces `t`'s shards with `op` into every shard of `dst`; return its markers.

    The arguments are checked (:meth:`DistributedWorker.all_reduce`): `op`
    is a key of :data:`REDUCE_OPS`, `t`'s dtype one of
    :data:`REDUCE_DTYPES`; `copy_in` when `dst` is not `t`.  `kernels` is
    the caller's cache of the built-in "reduce" kernel, by worker index.
    """
    code = REDUCE_DTYPES[t.dtype.np_name]
    ring = _Ring(t, dst, "all_reduce")
    ring.start(copy_in=copy_in)
    n = ring.n
    if n > 1:
        bounds = _chunks(ring.elems, n)
        tmps = ring.temporaries(max(hi - lo for lo, hi in bounds))
        for k in range(n - 1):  # reduce-scatter: rank r adds chunk r-1-k of its left neighbour
            ring.step(lambda r, k=k: _reduce_step(ring, r, bounds[(r - 1 - k) % n], tmps[r],
                                                  REDUCE_OPS[op], code, kernels), both=True)
        for k in range(n - 1):  # all-gather: rank r takes the reduced chunk r-k of its left one
            ring.step(lambda r, k=k: ring.pull(r, bounds[(r - k) % n]), both=True)
        ring.free(tmps)
    return ring.finish()


def all_gather(t: StackedDeviceTensor) -> tuple[StackedDeviceTensor, list]:
    """Queue the ring that gathers every shard of `t` onto every worker of `t`; return the result and its markers."""
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
    ring = _Ring(t, result, "all_gather")
    ring.start(copy_in=False, slots=True)
    per = t.shards[0]._nbytes
    for k in range(b - 1):  # rank r takes slot r-1-k from its left neighbour's gathered copy
        ring.step(lambda r, k=k: ring.pull_bytes(r, ((r - 1 - k) % b) * per, per), both=False)
    return result, ring.finish()


def broadcast(t: StackedDeviceTensor, root: int) -> list:
    """Queue the ring that gives every shard of `t` the contents of shard `root` (checked); return its markers."""
    n = len(t.shards)
    ring = _Ring(t, t, "broadcast")
    ring.start(copy_in=False)
    for h in range(1, n):  # along the ring from root: each takes the whole shard of its left neighbour
        r = (root + h) % n
        ring.hop(r, lambda r=r: ring.pull(r, (0, ring.elems)))
    return ring.finish()


def _reduce_step(ring, r: int, bound, tmp: DeviceTensor, op: int, dtype: int, kernels: dict) -> None:
    lo, hi = bound
    if hi <= lo:
        return
    item = ring.itemsize
    ring.pull_into(r, tmp._ptr, lo * item, (hi - lo) * item)
    w, s = ring.workers[r], ring.streams[r]
    kernel = _reduce_kernel(kernels, ring.ids[r], w)
    argv = ffi.new("uint64_t[5]", [ring.dst[r]._ptr + lo * item, tmp._ptr, hi - lo, op, dtype])
    blocks = max(1, min(w._info.cores, (hi - lo) // 4096 or 1))
    _step(w, s, lib.pto_stream_launch, (s._ptr, kernel, blocks, argv, 5),
          "all_reduce step (reduce)", (argv, tmp))


def _reduce_kernel(kernels: dict, index: int, w):
    k = kernels.get(index)
    if k is None:
        out = ffi.new("pto_kernel **")
        check(lib.pto_kernel_builtin(w._dev, b"reduce", out), "pto_kernel_builtin('reduce')")
        k = kernels[index] = out[0]
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

    def __init__(self, src: StackedDeviceTensor, dst: StackedDeviceTensor, label: str):
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

    def finish(self) -> list:
        """End each rank's part with one access to its buffers; return the markers that end it, one per rank.

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
        return markers


# -- the mesh: box copies between ranks' windows -----------------------------------------------


def gather_rows(srcs: list, dsts: list) -> list:
    """Row ``j`` of every rank's ``dsts[r]`` becomes rank ``j``'s whole ``srcs[j]``; return the markers.

    ``dsts[r]`` holds ``len(srcs)`` rows of ``srcs[j]``'s size (checked by
    the caller); the source and target of a rank are distinct tensors.
    """
    n = len(dsts)
    per = srcs[0]._nbytes
    mesh = _Mesh(srcs, dsts, "allgather")
    mesh.start()
    for r in range(n):
        mesh.pull(r, [(j, 0, j * per, per) for j in range(n)])
    return mesh.finish()


def all_to_all_rows(srcs: list, dsts: list) -> list:
    """Row ``j`` of rank ``r``'s ``dsts[r]`` becomes row ``r`` of rank ``j``'s ``srcs[j]``; return the markers."""
    n = len(dsts)
    per = dsts[0]._nbytes // n
    mesh = _Mesh(srcs, dsts, "all_to_all")
    mesh.start()
    for r in range(n):
        mesh.pull(r, [(j, r * per, j * per, per) for j in range(n)])
    return mesh.finish()


def broadcast_from(dsts: list, root: int) -> list:
    """Every rank's ``dsts[r]`` becomes ``dsts[root]``, in place; return the markers."""
    n = len(dsts)
    mesh = _Mesh(dsts, dsts, "broadcast")
    mesh.start()
    nbytes = dsts[root]._nbytes
    for r in range(n):
        if r != root:
            mesh.pull(r, [(root, 0, 0, nbytes)])
    return mesh.finish()


def reduce_scatter_rows(dsts: list, op: str, kernels: dict, ids) -> list:
    """Row ``r`` of rank ``r``'s ``dsts[r]`` becomes `op` over every rank's row ``r``, in place; return the markers.

    The other rows are left as they are.  `op` is a key of
    :data:`REDUCE_OPS` and the dtype one of :data:`REDUCE_DTYPES` (checked by
    the caller); `kernels` caches the built-in "reduce" kernel by worker
    index, ``ids[r]`` being rank ``r``'s.
    """
    n = len(dsts)
    per = dsts[0]._nbytes // n
    code = REDUCE_DTYPES[dsts[0]._dtype.np_name]
    mesh = _Mesh(dsts, dsts, "reduce_scatter")
    mesh.start()
    for r in range(n):
        others = [j for j in range(n) if j != r]
        if others:
            mesh.pull(r, [(j, r * per, r * per, per) for j in others],
                      reduce=(REDUCE_OPS[op], code, _reduce_kernel(kernels, ids[r], mesh.workers[r])))
    return mesh.finish()


class _Mesh:
    """One step of box copies between ranks: ``dsts[r]`` is written from the ranks' ``srcs``.

    As :class:`_Ring`: rank ``r`` is ``dsts[r]`` (and ``srcs[r]``), on its
    worker's task-local default stream; every method that queues work on
    rank ``r`` takes that worker's lock, and only that one.
    """

    def __init__(self, srcs: list, dsts: list, label: str):
        self.label = label
        self.src = list(srcs)
        self.dst = list(dsts)
        self.workers = [t._worker for t in self.dst]
        self.streams = [task_default(w) for w in self.workers]
        self.n = len(self.dst)
        self.ready = [None] * self.n  # each rank's start point
        self.done = [None] * self.n  # each rank's point after its pulls
        self.readers: list[set] = [set() for _ in range(self.n)]  # ranks that read rank r's source

    def accesses(self, r: int) -> list:
        src, dst = self.src[r], self.dst[r]
        if src is dst:
            return [(dst, "target", True, True)]
        return [(src, "source", True, False), (dst, "target", False, True)]

    def start(self) -> None:
        """Order each rank's stream after the earlier accesses to its buffers (all before any copy); record."""
        for r in range(self.n):
            w = self.workers[r]
            with w._lock:
                order(w, self.streams[r], self.accesses(r), self.label, 0)
        for r in range(self.n):
            with self.workers[r]._lock:
                self.ready[r] = self.done[r] = _record(self.streams[r])

    def pull(self, r: int, moves, reduce=None) -> None:
        """Queue rank `r`'s copies: each ``(peer, src_offset, dst_offset, nbytes)`` of ``srcs[peer]`` into ``dsts[r]``.

        A copy from rank `r` itself is a local one; one from a peer waits
        (on the device) for that peer's start point.  With ``reduce=(op,
        dtype, kernel)`` each box goes into a temporary first and is reduced
        into place with the built-in kernel.
        """
        w, s = self.workers[r], self.streams[r]
        dst = self.dst[r]
        item = dst._dtype.itemsize
        tmp = None
        if reduce is not None:
            tmp = w.alloc_tensor(max(1, max(m[3] for m in moves) // item), dst._dtype.np_storage, stream=s)
        with w._lock:
            for peer in sorted({m[0] for m in moves} - {r}):
                s._wait_locked(self.ready[peer])
        for peer, src_off, dst_off, nbytes in moves:
            if nbytes <= 0:
                continue
            src = self.src[peer]
            into = tmp._ptr if tmp is not None else dst._ptr + dst_off
            with w._lock:
                if peer == r:
                    _step(w, s, lib.pto_stream_copy_d2d, (s._ptr, into, src._ptr + src_off, nbytes),
                          f"{self.label}: local copy ({nbytes} bytes)", (src, dst))
                else:
                    self.readers[peer].add(r)
                    _step(w, s, lib.pto_stream_copy_peer,
                          (s._ptr, w._dev, into, self.workers[peer]._dev, src._ptr + src_off, nbytes),
                          f"{self.label}: peer copy ({nbytes} bytes)", (src, dst))
            if tmp is not None:
                op, dtype, kernel = reduce
                elems = nbytes // item
                argv = ffi.new("uint64_t[5]", [dst._ptr + dst_off, tmp._ptr, elems, op, dtype])
                blocks = max(1, min(w._info.cores, elems // 4096 or 1))
                with w._lock:
                    _step(w, s, lib.pto_stream_launch, (s._ptr, kernel, blocks, argv, 5),
                          f"{self.label} (reduce)", (argv, tmp))
        if tmp is not None:
            tmp.free(stream=s)
        with w._lock:
            self.done[r] = _record(s)

    def finish(self) -> list:
        """End each rank's part with one point after every rank that read its source; return the markers."""
        last = list(self.done)
        markers = []
        for r in range(self.n):
            s, w = self.streams[r], self.workers[r]
            with w._lock:
                for reader in sorted(self.readers[r] - {r}):
                    s._wait_locked(last[reader])
                order(w, s, self.accesses(r), self.label, 0)  # noted at the record that comes next
                _record(s)
            markers.append(s._marker())
        return markers


def _record(stream):
    event = stream._record_locked()
    enter(event)
    return event
