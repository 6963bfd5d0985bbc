"""DeviceTensor: a buffer that stays resident in device memory across launches.

Allocation and frees are the worker's device memory (:mod:`._memory`); a
tensor itself knows its streams, and joins a new one on first use
(``_join``).

A failed initial copy.  The host learns how ``alloc_tensor(init=...)``'s copy
ended when its completion record is drained (the tensor's ``_init``, until
then).  A use queued before that mostly needs nothing: it runs after the
copy on the device (in stream order, or through the first use's join on
``_ready``, which carries the copy's failure) and fails as its dependent.
Except when the copy failed as the dependent of an earlier failure of its
stream whose record was drained first: draining the first failure heals the
stream (the driver runs work accepted from then on normally), and the copy,
accepted before, still fails, but later, and a use queued in between would
run on memory the copy never wrote.  The host sees that case exactly
through the stream's failure epoch (``pto_stream_epoch``, the count of its
failures observed): if the epoch moved since the copy was accepted
(``_init_epoch``) and the copy's record has still not been drained, a
failure queued before the copy was observed, so the copy fails.  (Had that
failure come after the copy on the stream, the copy's record would have come
out of the completion queue before its record.)  :func:`~._args.check_init`
refuses such a use.  Reading the epoch and the copy's state under the lock
keeps a drain from falling between the two reads.  (A drain by another
thread, one blocked in a wait, between that check and the queueing of the
use is not seen: the usual caveat of sharing a tensor between threads.)
"""

from __future__ import annotations

import numpy as np

from .._driver import lib
from .._dtypes import BF16, DataType, bf16_to_float32
from ..errors import PtoArgumentError, PtoInvalidStateError, PtoNotSupported, PtoTensorFreedError

__all__ = ["DeviceTensor", "freed_error"]


def freed_error(t, where: str) -> Exception:
    """The error for using `t` (a DeviceTensor whose ``_freed`` is set) at `where`.

    A freed tensor's mark is ``True``; a capture's input placeholder, never
    allocated, carries its :class:`~._capture.Placeholder` instead, which
    names the placeholder and its capture.
    """
    mark = t._freed
    if mark is True:
        return PtoTensorFreedError(f"{where}: the DeviceTensor was freed")
    return mark.error(where)

_FOLD_FROM = 4  # streams a tensor notes before it folds the closed ones among them


class DeviceTensor:
    """A tensor resident in a worker's device memory.

    A compiled program accepts a DeviceTensor anywhere it accepts a host
    array; the runtime then skips both copies for that argument, which is what
    keeps a weight or a KV cache resident.  The constructor refuses; use
    :meth:`ChipWorker.alloc_tensor`.

    Lifetime rules:

    1. It is bound to its worker; another worker refuses it
       (:class:`~pypto_async.errors.PtoForeignTensorError`).
    2. Its deallocation stream is the stream it was allocated on
       (:attr:`stream`); ``free(stream=...)`` overrides it.
    3. It remembers the streams that used it (closed ones folded into one
       point that waits for all their work).  Freeing it first makes the
       freeing stream wait (on the device) for each other stream's work queued
       so far, so the block is never reused while another stream still reads
       it.  That wait orders only: a failure on another stream does not fail
       the freeing stream's later work.  Work you queue on other streams
       *after* the free is not ordered for you: do not use a tensor after
       freeing it.
    4. The first time a stream other than its allocation stream uses it, that
       stream waits (on the device) for the point right after its allocation
       and initial copy on the allocation stream: the copy, and any earlier
       user of a recycled block, but nothing queued there later.
    5. If its initial copy (``alloc_tensor(init=...)``) failed, every later
       use raises :class:`~pypto_async.errors.PtoDependencyError` naming that
       failure, rather than computing on uninitialised memory.  While the
       copy's outcome is still unknown to the host, a use fails on the device
       as its dependent, or raises the same error once the host has seen a
       failure the copy was queued behind.
    6. A DeviceTensor you drop without freeing is freed in stream order when
       it is garbage-collected; one still alive when the worker closes is
       freed then, with a ``ResourceWarning`` naming it.
    """

    __slots__ = ("_worker", "_ptr", "_shape", "_dtype", "_nbytes", "_stream", "_streams", "_freed",
                 "_init", "_init_epoch", "_ready", "_manual", "_writer", "_readers",
                 "__weakref__")

    def __init__(self, *args, **kwargs):
        raise TypeError("DeviceTensor cannot be constructed directly; use ChipWorker.alloc_tensor()")

    @classmethod
    def _make(cls, worker, ptr: int, shape: tuple[int, ...], dtype: DataType, nbytes: int,
              stream) -> DeviceTensor:
        t = cls.__new__(cls)
        t._worker = worker
        t._ptr = ptr
        t._shape = shape
        t._dtype = dtype
        t._nbytes = nbytes
        t._stream = stream
        t._streams = {stream}
        t._freed = False
        t._init = None  # the Launch of its initial copy, until known to have succeeded
        t._init_epoch = 0  # its stream's failure epoch when that copy was queued
        t._ready = None  # an Event on its allocation stream: allocation (and initial copy) done
        # Hazard tracking (_hazards.py): the driver keeps the accesses; the sanitizer keeps its
        # own, with their call sites: the last write (stream, token, what, exact) and the reads
        # since, one per stream.
        t._manual = False
        t._writer = None
        t._readers = None
        return t

    # -- description ----------------------------------------------------------------

    @property
    def shape(self) -> tuple[int, ...]:
        """The tensor's shape."""
        return self._shape

    @property
    def dtype(self) -> DataType:
        """The element type, as a pl :class:`~pypto_async.DataType` (``pl.FP32``)."""
        return self._dtype

    @property
    def nbytes(self) -> int:
        """Bytes of data (elements times item size)."""
        return self._nbytes

    @property
    def size(self) -> int:
        """Number of elements."""
        return self._nbytes // self._dtype.itemsize if self._dtype.itemsize else 0

    @property
    def data_ptr(self) -> int:
        """The device address, an int (as ``w.copy_from(host, t.data_ptr, t.nbytes)`` uses it)."""
        return self._ptr

    @property
    def worker(self):
        """The :class:`ChipWorker` that owns the tensor."""
        return self._worker

    @property
    def stream(self):
        """The deallocation stream: the stream the tensor was allocated on."""
        return self._stream

    @property
    def freed(self) -> bool:
        """True once the tensor was freed (explicitly, or by its worker's close).

        A capture's input placeholder (``cap.input(...)``) is never allocated:
        it counts as freed, and any use outside its capture's recording is
        refused with :class:`~pypto_async.errors.PtoCaptureError`.
        """
        return bool(self._freed)

    is_closed = freed

    # -- data -----------------------------------------------------------------------

    async def to_host(self, *, stream=None) -> np.ndarray:
        """Copy the tensor to a new host array and return it once the copy completed.

        Parameters
        ----------
        stream : Stream, optional
            The stream to copy on; ``None`` means the task-local default
            stream.

        Returns
        -------
        numpy.ndarray
            A new array of the tensor's shape and dtype.  ``bfloat16``, which
            numpy lacks, comes back as ``uint16`` storage (the raw bits; with
            torch, ``torch.from_numpy(a).view(torch.bfloat16)``), the form
            :meth:`ChipWorker.copy` and ``alloc_tensor(init=...)`` take back.
        """
        out = np.empty(self._shape, dtype=self._dtype.np_storage)
        await self._worker.copy(out, self, stream=stream).wait()
        return out

    def numpy(self, *, stream=None) -> np.ndarray:
        """Copy the tensor to a new host array, blocking this thread until done.

        Parameters
        ----------
        stream : Stream, optional
            The stream to copy on; ``None`` means the task-local default
            stream.

        Returns
        -------
        numpy.ndarray
            As :meth:`to_host` returns it (``bfloat16`` as ``uint16`` storage).
        """
        out = np.empty(self._shape, dtype=self._dtype.np_storage)
        self._worker.copy(out, self, stream=stream).sync()
        return out

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        """``np.asarray(t)``: :meth:`numpy` on a sync-mode worker, then `dtype` if given.

        A ``bfloat16`` tensor comes as ``uint16`` storage, as from
        :meth:`numpy`; asked for another dtype (``np.asarray(t, np.float32)``)
        it converts the values.

        Raises
        ------
        PtoInvalidStateError
            On an async-mode worker, where the blocking copy would stall the
            event loop: ``await t.to_host()`` instead.
        PtoArgumentError
            For ``copy=False``: the data lives in device memory, so a copy
            is always made (numpy's contract asks for a ValueError).
        """
        if copy is False:
            raise PtoArgumentError("np.asarray(DeviceTensor, copy=False): the data lives in device "
                                   "memory, so reading it always copies")
        if self._worker._async:
            raise PtoInvalidStateError("np.asarray(DeviceTensor) would block the event loop until the "
                                       "copy completes; use `await t.to_host()`")
        out = self.numpy()
        if dtype is None:
            return out
        if self._dtype is BF16 and np.dtype(dtype) != out.dtype:
            out = bf16_to_float32(out)  # the values, not the integers their bits spell
        return out.astype(dtype, copy=False)

    # -- lifetime -------------------------------------------------------------------

    def free(self, stream=None) -> None:
        """Free the tensor in stream order.

        Parameters
        ----------
        stream : Stream, optional
            The stream to free on; ``None`` means the tensor's deallocation
            stream (:attr:`stream`).  Other streams that used the tensor are
            joined first (see the class docstring).

        Raises
        ------
        PtoTensorFreedError
            If it was freed already.
        """
        self._worker.free_tensor(self, stream=stream)

    def close(self, stream=None) -> None:
        """Free the tensor unless it is freed already (idempotent :meth:`free`)."""
        if not self._freed and self._worker._alive():
            self._worker.free_tensor(self, stream=stream)

    def __enter__(self) -> DeviceTensor:
        return self

    def __reduce__(self):
        """Refuse: the data lives in one process's device memory, which a pickle cannot carry."""
        raise PtoNotSupported(
            "a DeviceTensor cannot be pickled: it lives in the device memory of one ChipWorker, in this "
            "process. To keep a tensor on a Ray actor and pass it around, hold the actor's handle instead "
            "(pypto_async.ray: ChipActor.put / alloc return a TensorRef); to send the data, pickle "
            "`await t.to_host()` (or t.numpy())"
        )

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __del__(self):
        try:
            if not self._freed:
                self._freed = True
                self._worker._memory.defer_free(self._ptr, self._stream, self._streams)
        except Exception:  # never raise from a finalizer
            pass

    def _initialising(self, launch) -> None:
        """`launch`, just queued (lock held), fills the whole tensor: uses check it until it is known good."""
        self._init = launch
        self._init_epoch = lib.pto_stream_epoch(launch._stream._ptr)

    def _init_doomed(self) -> bool:
        """Whether its initial copy, not drained yet, fails for a failure observed since (takes the lock).

        See the module doc.  False once the copy's record was drained: the
        caller then reads its outcome.
        """
        launch = self._init
        stream = launch._stream
        with launch._worker._lock:
            # (A closed stream's driver side goes once it has run dry: its epoch is not read.)
            return not launch._done and not stream._closed and \
                lib.pto_stream_epoch(stream._ptr) != self._init_epoch

    def _join(self, stream) -> None:
        """First use on `stream`: wait for the allocation and initial copy (lock held).

        The event was recorded right after them (rule 4 above), so later,
        unrelated work on the allocation stream (and its failures) is not
        waited for.
        """
        event = self._ready
        if event is None:
            birth = self._stream
            event = birth._final if birth._closed else birth._record_locked()
        if event is not None:
            stream._wait_locked(event)
        self._add_stream(stream)

    def _add_stream(self, stream) -> None:
        """Note `stream` among the streams that used the tensor (lock held).

        Closed streams among them are folded into the worker's fold point
        (:func:`~._stream.fold_point`), which waits for all their work: a
        free waits for it instead (rule 3 holds, over-waiting), and however
        many short-lived streams used a long-lived tensor, it keeps the open
        ones and one more.
        """
        streams = self._streams
        streams.add(stream)
        if len(streams) > _FOLD_FROM:
            closed = [s for s in streams if s._closed and s._folded]
            if closed:
                streams.difference_update(closed)
                streams.add(self._worker._fold)

    def __repr__(self) -> str:
        state = " freed" if self._freed else ""
        return (f"<DeviceTensor shape={self._shape} dtype={self._dtype!r} "
                f"at 0x{self._ptr:x}{state}>")
