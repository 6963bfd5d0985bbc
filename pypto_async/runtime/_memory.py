"""Device memory: DeviceTensor allocation, stream-ordered frees, deferred frees, temporaries.

:class:`DeviceMemory` is a component of its
:class:`~pypto_async.runtime.ChipWorker`, which delegates ``alloc_tensor``
and ``free_tensor`` here.  Allocation is immediate (the driver's allocator is
stream-aware: a block freed on a stream may be handed to that stream again
while its free is still queued); frees are commands queued in stream order
like any other (copies are in :mod:`._copy`).

Three kinds of free:

* ``free_tensor``: now, on the tensor's deallocation stream (or the one
  given), after joining every other stream that used the tensor;
* a tensor the garbage collector takes, on any thread: :meth:`defer_free`
  only notes it, and the owning thread queues the free at its next call
  (or, in async mode, soon, through the pump);
* a tensor still alive when the worker closes (:meth:`free_forgotten`).

It also keeps the line of launches waiting for device memory for their
temporaries (:mod:`._memwait`), served after each completion service
(:meth:`on_service`).
"""

from __future__ import annotations

import weakref
from collections import deque

import numpy as np

from .._driver import PTO_ENOMEM, check, ffi, lib
from .._dtypes import as_dtype, holds
from ..errors import PtoArgumentError, PtoError, PtoForeignTensorError, PtoInvalidStateError, PtoTensorFreedError
from ._args import host_array
from ._checks import as_shape
from ._dispatch import finish_sync, queue_one
from ._group import rounded
from ._memwait import retry
from ._stream import accept, stream_for
from ._submit import flush, submit, token
from ._tensor import DeviceTensor

__all__ = ["DeviceMemory"]

_ENOMEM = -PTO_ENOMEM


class DeviceMemory:
    """A worker's device memory (see the module doc).

    Attributes
    ----------
    queue : CommandQueue
        The worker's command queue, where frees go.
    capacity : int
        The arena's bytes.
    tensors : WeakSet
        Live DeviceTensors, for :meth:`free_forgotten`.
    by_ptr : WeakValueDictionary
        Start address -> the DeviceTensor allocated there (a freed one until
        its block is allocated again): with the driver's ordered index
        (:meth:`tensor_at`), a raw address finds its tensor in O(log n).
    deferred : deque
        ``(ptr, stream, used)`` of collected tensors whose free is not queued yet.
    mem_waiters : deque
        Launches waiting for their temporaries (``MemoryWait`` gates), oldest first.
    memory_waits : int
        Launches that ever waited for memory.
    """

    __slots__ = ("_worker", "queue", "capacity", "tensors", "by_ptr", "deferred", "_deferred_scheduled",
                 "mem_waiters", "memory_waits", "_devptr_out", "_lookup_out", "pinned", "freed_blocks")

    def __init__(self, worker, queue, capacity: int):
        self._worker = worker
        self.queue = queue
        self.capacity = capacity
        self.tensors: weakref.WeakSet = weakref.WeakSet()
        self.by_ptr: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
        self._lookup_out = (ffi.new("pto_devptr *"), ffi.new("uint64_t *"))
        self.deferred: deque = deque()
        self._deferred_scheduled = False
        self.mem_waiters: deque = deque()
        self.memory_waits = 0
        self._devptr_out = ffi.new("pto_devptr *")
        # The sanitizer's: start -> (end, stream id, token of the free, what) of freed tensors'
        # blocks, until an allocation takes them again (_hazards.Hazards.freed).
        self.freed_blocks: dict[int, tuple] = {}
        self.pinned: dict[int, int] = {}  # id(tensor) -> graphs that use it (_graph.py): not freeable

    # -- tensors (ChipWorker.alloc_tensor / free_tensor) -------------------------------------

    def alloc_tensor(self, shape, dtype, init, stream, manual_deps: bool = False) -> DeviceTensor:
        """Allocate a tensor in device memory, optionally filled from a host array.

        Parameters
        ----------
        shape : int or tuple of int
            The tensor's shape.
        dtype
            A torch, numpy or pl dtype (``torch.float32``, ``np.float32``,
            ``pl.FP32``).
        init : numpy array or torch CPU tensor, optional
            Copied into the tensor, in order on `stream`; its shape and
            dtype must match.  In sync mode the call returns once the copy
            completed; in async mode the runtime copies `init` first, so you
            may reuse your array at once.
        stream : Stream, optional
            The allocation (and default deallocation) stream; ``None`` means
            the task-local default stream.
        manual_deps : bool
            Leave the ordering of this tensor's accesses across streams to
            you (``stream.wait``), as ``RunConfig(auto_deps=False)`` does for
            every tensor; the sanitizer, when on, checks it.

        Raises
        ------
        PtoArgumentError
            For a bad shape, dtype or init.
        PtoOutOfMemory
            If no free extent fits.
        """
        worker = self._worker
        worker._check_open()
        shape = as_shape(shape)
        try:
            dt = as_dtype(dtype)
        except PtoArgumentError as exc:
            raise PtoArgumentError(f"alloc_tensor(dtype=...): {exc}") from None
        nbytes = dt.itemsize
        for d in shape:
            nbytes *= d
        if not isinstance(manual_deps, bool):
            raise PtoArgumentError(f"alloc_tensor(manual_deps=...) must be a bool, not {manual_deps!r}")
        stream = stream_for(worker, stream)
        host = None
        if init is not None:
            host = host_array(init, "alloc_tensor(init=...)", writeable=False)
            if tuple(host.shape) != shape:
                raise PtoArgumentError(f"alloc_tensor(init=...): shape {tuple(host.shape)} does not "
                                       f"match the tensor's shape {shape}")
            if not holds(host.dtype, dt):
                raise PtoArgumentError(f"alloc_tensor(init=...): dtype {host.dtype.np_name} does not "
                                       f"match the tensor's dtype {dt.np_name}")
            if worker._async:
                init = init.clone() if not isinstance(init, np.ndarray) else np.array(init, copy=True)
                host = host_array(init, "alloc_tensor(init=...)", writeable=False)
        with self.queue.lock:
            ptr = self._alloc_locked(nbytes, stream, "alloc_tensor()")
            launch = None
            init_token = self.queue.next_token
            try:
                if host is not None and nbytes:
                    launch = queue_one(worker, stream, lib.pto_stream_copy_h2d,
                                       (stream._ptr, ptr, host.ptr, nbytes),
                                       "alloc_tensor(init=...) copy", (init, host), None)
                # The point other streams join on their first use of t (DeviceTensor._join).
                # Without an initial copy it stands for no result: an earlier, unrelated
                # failure of the stream must not fail t's first use elsewhere.
                ready = stream._record_locked(ordering=launch is None)
            except BaseException:
                if launch is None:
                    lib.pto_mem_free(self.queue.dev, ptr)  # nothing was queued that uses it
                else:
                    try:
                        self.free_locked(ptr, stream, ())
                    except PtoError:  # a lost device: its memory goes with it
                        pass
                raise
            t = DeviceTensor._make(worker, ptr, shape, dt, nbytes, stream)
            if launch is not None:
                t._initialising(launch)
            t._ready = ready
            t._manual = manual_deps
            hz = worker._hazards
            if hz is not None and launch is not None:
                hz.written(t, stream, init_token, "alloc_tensor() copy", ready)
            self.tensors.add(t)
            self.by_ptr[ptr] = t
        if launch is not None and not worker._async:
            try:
                finish_sync(worker, launch)
            except PtoError:
                self.free_tensor(t, None)
                raise
        return t

    def tensor_at(self, addr: int):
        """The live DeviceTensor whose block holds device address `addr`, or None (lock held).

        The driver's ordered index of live allocations (``pto_mem_lookup``)
        gives the block's start; the tensor allocated there is looked up by it.
        """
        base, _ = self._lookup_out
        if lib.pto_mem_lookup(self.queue.dev, addr, base, ffi.NULL) != 0:
            return None
        t = self.by_ptr.get(int(base[0]))
        return None if t is None or t._freed or t not in self.tensors else t

    def free_tensor(self, t: DeviceTensor, stream) -> None:
        """Free a DeviceTensor in stream order.

        Parameters
        ----------
        t : DeviceTensor
            The tensor.
        stream : Stream, optional
            Where to free it; ``None`` means the tensor's deallocation stream
            (the one it was allocated on).  Every other stream that used it
            is joined first, so the block is reused only after their work
            queued so far.  The join orders only: a failure of another
            stream does not fail work queued on `stream`.

        Raises
        ------
        PtoForeignTensorError
            If it belongs to another worker.
        PtoTensorFreedError
            If it was freed already.
        """
        worker = self._worker
        worker._check_open()
        if not isinstance(t, DeviceTensor):
            raise PtoArgumentError(f"free_tensor() takes a DeviceTensor, not {type(t).__name__}")
        if t._worker is not worker:
            raise PtoForeignTensorError("free_tensor(): the DeviceTensor belongs to another ChipWorker")
        if t._freed:
            raise PtoTensorFreedError("free_tensor(): the DeviceTensor was freed already")
        if self.pinned and id(t) in self.pinned:
            raise PtoInvalidStateError(f"free_tensor(): {t!r} is used by a graph that is not closed; "
                                       "close the graph first (graph.close())")
        stream = _dealloc_stream(worker, t._stream) if stream is None else accept(worker, stream)
        with self.queue.lock:
            self.free_locked(t._ptr, stream, t._streams)
            t._freed = True
            self.tensors.discard(t)
            hz = worker._hazards
            if hz is not None and hz.mode != "off":
                hz.freed(t, stream, self.queue.next_token - 1)  # the free is the last command queued

    # -- allocation (lock held) ------------------------------------------------------------------

    def _alloc_locked(self, nbytes: int, stream, what: str) -> int:
        if nbytes >= 1 << 64:
            raise PtoArgumentError(f"{what}: {nbytes} bytes is more than a device address can span")
        out = self._devptr_out
        rc = lib.pto_mem_alloc(self.queue.dev, max(nbytes, 1), stream._ptr, out)
        if rc:
            check(rc, f"{what}: allocating {nbytes} bytes of device memory")
        if self.freed_blocks:
            self._reused(int(out[0]), max(nbytes, 1))
        return int(out[0])

    def _reused(self, ptr: int, nbytes: int) -> None:
        """An allocation took `ptr`: the freed blocks it overlaps are memory in use again."""
        end = ptr + nbytes
        for start in [s for s, entry in self.freed_blocks.items() if s < end and ptr < entry[0]]:
            del self.freed_blocks[start]

    def alloc_temps(self, hosts: list, stream, label: str) -> list | None:
        """Allocate the temporaries of a launch's host arrays (lock held); None if they do not fit.

        One block for all of them, carved per array at the allocator's
        alignment, so the allocation succeeds or fails whole: a partial set
        could not be handed back at once, as the driver may carve a block
        from a free still queued on `stream`, which the work before that free
        still uses.

        Raises
        ------
        PtoError
            For a failure other than a shortage (a lost device).
        """
        sizes = [rounded(ha.nbytes) for _, ha, _ in hosts]
        nbytes = sum(sizes)
        out = self._devptr_out
        rc = lib.pto_mem_alloc(self.queue.dev, nbytes, stream._ptr, out)
        if rc:
            if rc == _ENOMEM:
                return None
            check(rc, f"{label}: allocating {nbytes} bytes of device temporaries for its host arrays")
        ptr = int(out[0])
        if self.freed_blocks:
            self._reused(ptr, nbytes)
        temps = []
        for size in sizes:
            temps.append(ptr)
            ptr += size
        return temps

    # -- frees (lock held unless said) ---------------------------------------------------------------

    def free_locked(self, ptr: int, stream, used) -> None:
        """Queue the free of `ptr` on `stream`, after the work of every other stream in `used`."""
        # The block must outlive every other user's work queued so far, but a free stands
        # for no result: join each user through an ordering-only point, so that a failure
        # of that user (not yet observed) does not fail the freeing stream's later work.
        for other in used:
            if other is stream:
                continue
            event = other._final_ordering if other._closed else other._record_locked(ordering=True)
            if event is not None:
                stream._wait_locked(event)
        q = self.queue
        submit(q, stream, lib.pto_stream_free, (stream._ptr, ptr, token(q, None)), None, 0)
        hz = self._worker._hazards
        if hz is not None:
            hz.forget(ptr)  # a tensor allocated there later starts with no accesses

    def defer_free(self, ptr: int, stream, used) -> None:
        """Free a collected DeviceTensor later, on the owning thread (any thread, no lock)."""
        worker = self._worker
        if not worker._alive():
            return
        self.deferred.append((ptr, stream, tuple(used)))
        if worker._async and not self._deferred_scheduled:
            self._deferred_scheduled = True
            self.queue.pump.call_soon_threadsafe(self._free_deferred)

    def _free_deferred(self) -> None:
        with self.queue.lock:
            if self._worker._alive():
                self.free_deferred_locked()

    def free_deferred_locked(self) -> None:
        """Queue the frees :meth:`defer_free` noted (before work that must come after them)."""
        self._deferred_scheduled = False
        deferred = self.deferred
        worker = self._worker
        while deferred:
            ptr, stream, used = deferred.popleft()
            self.free_locked(ptr, _dealloc_stream(worker, stream), used)

    def on_service(self) -> None:
        """The queue's ``on_service``: deferred frees, then the launches waiting for memory."""
        if self.deferred:  # (after every drain: no call when there is nothing to free)
            self.free_deferred_locked()
        if self.mem_waiters:  # frees may have made room for launches waiting for memory
            q = self.queue
            while retry(self):
                if q.backlog:
                    flush(q)
                if not self.mem_waiters:
                    break

    def free_forgotten(self) -> list[str]:
        """Free every tensor still alive (the worker closes); return their names (takes the lock)."""
        names = []
        worker = self._worker
        with self.queue.lock:
            try:
                self.free_deferred_locked()
            except PtoError:  # a lost device
                self.deferred.clear()
            for t in list(self.tensors):
                if not t._freed:
                    names.append(repr(t))
                    t._freed = True
                    try:
                        self.free_locked(t._ptr, _dealloc_stream(worker, t._stream), t._streams)
                    except PtoError:  # a lost device: closing it releases the memory anyway
                        pass
            self.tensors.clear()
        return names


def _dealloc_stream(worker, stream):
    """Where a tensor allocated on `stream` is freed: there, or on the default stream once it closed."""
    return worker._default_stream if stream._closed else stream

