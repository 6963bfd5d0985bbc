"""The worker's device memory: DeviceTensor allocation, stream-ordered frees, copies.

:class:`DeviceMemory` is a mixin of :class:`~pypto_async.runtime.ChipWorker`.
Allocation is immediate (the driver's allocator is stream-aware); frees and
copies are commands queued in stream order like any other.
"""

from __future__ import annotations

import numpy as np

from .._driver import ffi, lib
from .._dtypes import as_dtype
from ..errors import PtoArgumentError, PtoError, PtoForeignTensorError, PtoTensorFreedError
from ._args import _is_torch_tensor, check_init, host_array
from ._launch import Launch
from ._stream import Stream
from ._tensor import DeviceTensor

__all__ = ["DeviceMemory"]


class DeviceMemory:
    """DeviceTensors and copies for a worker (a mixin; see the module doc)."""

    # -- device memory --------------------------------------------------------------------------------

    def alloc_tensor(self, shape, dtype, *, init=None, stream=None) -> DeviceTensor:
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

        Raises
        ------
        PtoArgumentError
            For a bad shape, dtype or init.
        PtoOutOfMemory
            If no free extent fits.
        """
        self._check_open()
        shape = _as_shape(shape)
        try:
            dt = as_dtype(dtype)
        except PtoArgumentError as exc:
            raise PtoArgumentError(f"alloc_tensor(dtype=...): {exc}") from None
        nbytes = dt.itemsize
        for d in shape:
            nbytes *= d
        stream = self._current_stream() if stream is None else self._own_stream(stream)
        host = None
        if init is not None:
            host = host_array(init, "alloc_tensor(init=...)", writeable=False)
            if tuple(host.shape) != shape:
                raise PtoArgumentError(f"alloc_tensor(init=...): shape {tuple(host.shape)} does not "
                                       f"match the tensor's shape {shape}")
            if host.dtype != dt:
                raise PtoArgumentError(f"alloc_tensor(init=...): dtype {host.dtype.np_name} does not "
                                       f"match the tensor's dtype {dt.np_name}")
            if self._async:
                init = init.clone() if not isinstance(init, np.ndarray) else np.array(init, copy=True)
                host = host_array(init, "alloc_tensor(init=...)", writeable=False)
        with self._lock:
            ptr = self._alloc_locked(nbytes, stream, "alloc_tensor()")
            launch = None
            try:
                if host is not None and nbytes:
                    launch = self._queue_one(stream, lib.pto_stream_copy_h2d,
                                             (stream._ptr, ptr, host.ptr, nbytes),
                                             "alloc_tensor(init=...) copy", (init, host), None)
                # The point other streams join on their first use of t (see _join_first_use).
                # Without an initial copy it stands for no result: an earlier, unrelated
                # failure of the stream must not fail t's first use elsewhere.
                ready = self._record_locked(stream, ordering=launch is None)
            except BaseException:
                if launch is None:
                    lib.pto_mem_free(self._dev, ptr)  # nothing was queued that uses it
                else:
                    try:
                        self._free_locked(ptr, stream, ())
                    except PtoError:  # a lost device: its memory goes with it
                        pass
                raise
            t = DeviceTensor._make(self, ptr, shape, dt, nbytes, stream)
            t._init = launch
            t._ready = ready
            self._tensors.add(t)
        if launch is not None and not self._async:
            try:
                self._finish_sync(launch)
            except PtoError:
                self.free_tensor(t)
                raise
        return t

    def free_tensor(self, t: DeviceTensor, *, stream=None) -> None:
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
        self._check_open()
        if not isinstance(t, DeviceTensor):
            raise PtoArgumentError(f"free_tensor() takes a DeviceTensor, not {type(t).__name__}")
        if t._worker is not self:
            raise PtoForeignTensorError("free_tensor(): the DeviceTensor belongs to another ChipWorker")
        if t._freed:
            raise PtoTensorFreedError("free_tensor(): the DeviceTensor was freed already")
        stream = self._dealloc_stream(t._stream) if stream is None else self._own_stream(stream)
        with self._lock:
            self._free_locked(t._ptr, stream, t._streams)
            t._freed = True
            self._tensors.discard(t)

    def _free_locked(self, ptr: int, stream: Stream, used) -> None:
        # The block must outlive every other user's work queued so far, but a free stands
        # for no result: join each user through an ordering-only point, so that a failure
        # of that user (not yet observed) does not fail the freeing stream's later work.
        for other in used:
            if other is stream:
                continue
            event = other._final_ordering if other._closed else self._record_locked(other, ordering=True)
            if event is not None:
                self._wait_event_locked(stream, event)
        token = self._token(None)
        self._submit(stream, lib.pto_stream_free, (stream._ptr, ptr, token), None, 0)

    def _defer_free(self, ptr: int, stream: Stream, used) -> None:
        """Free a collected DeviceTensor later, on the owning thread (any thread may call)."""
        if not self._alive():
            return
        self._deferred.append((ptr, stream, tuple(used)))
        if self._async and not self._deferred_scheduled:
            self._deferred_scheduled = True
            self._pump.call_soon_threadsafe(self._process_deferred)

    def _process_deferred(self) -> None:
        with self._lock:
            if self._alive():
                self._process_deferred_locked()

    def _process_deferred_locked(self) -> None:
        self._deferred_scheduled = False
        deferred = self._deferred
        while deferred:
            ptr, stream, used = deferred.popleft()
            self._free_locked(ptr, self._dealloc_stream(stream), used)

    # -- copies -------------------------------------------------------------------------------------------

    def copy(self, dst, src, *, stream=None) -> Launch:
        """Copy between a DeviceTensor and a host array, or two DeviceTensors.

        The direction follows the argument types.  Both sides must have the
        same dtype and number of bytes.

        Parameters
        ----------
        dst, src : DeviceTensor or host array
            At least one must be a DeviceTensor.  A host destination must be
            writeable.
        stream : Stream, optional
            ``None`` means the task-local default stream.

        Returns
        -------
        Launch
            Its result is `dst`.  In sync mode it has completed; in async mode
            await it.  The host array stays alive until the copy completed.
        """
        self._check_open()
        stream = self._current_stream() if stream is None else self._own_stream(stream)
        dst_dev = isinstance(dst, DeviceTensor)
        src_dev = isinstance(src, DeviceTensor)
        for side, t in (("dst", dst), ("src", src)):
            if isinstance(t, DeviceTensor):
                if t._worker is not self:
                    raise PtoForeignTensorError(f"copy({side}=...): the DeviceTensor belongs to another ChipWorker")
                if t._freed:
                    raise PtoTensorFreedError(f"copy({side}=...): the DeviceTensor was freed")
                if t._init is not None and side == "src":
                    check_init(t, f"copy({side}=...)")
        host = None
        if dst_dev and src_dev:
            kind, nbytes = "d2d", dst._nbytes
            _check_same(dst._dtype, dst._nbytes, src._dtype, src._nbytes)
        elif dst_dev:
            host = host_array(src, "copy(src=...)", writeable=False)
            kind, nbytes = "h2d", dst._nbytes
            _check_same(dst._dtype, dst._nbytes, host.dtype, host.nbytes)
        elif src_dev:
            host = host_array(dst, "copy(dst=...)", writeable=True)
            kind, nbytes = "d2h", src._nbytes
            _check_same(host.dtype, host.nbytes, src._dtype, src._nbytes)
        else:
            raise PtoArgumentError("copy(): dst or src must be a DeviceTensor (host-to-host is numpy's job)")
        sp = stream._ptr
        name = f"copy {kind} ({nbytes} bytes)"
        with self._lock:
            for t in (dst, src):
                if isinstance(t, DeviceTensor) and stream not in t._streams:
                    self._join_first_use(t, stream)
            if kind == "d2d":
                launch = self._queue_one(stream, lib.pto_stream_copy_d2d, (sp, dst._ptr, src._ptr, nbytes),
                                         name, (dst, src), dst)
                dst._init = launch  # a full overwrite: the tensor is as good as this copy
            elif kind == "h2d":
                launch = self._queue_one(stream, lib.pto_stream_copy_h2d, (sp, dst._ptr, host.ptr, nbytes),
                                         name, (dst, src, host), dst)
                dst._init = launch
            else:
                launch = self._queue_one(stream, lib.pto_stream_copy_d2h, (sp, host.ptr, src._ptr, nbytes),
                                         name, (dst, src, host), dst)
        return self._finish_sync(launch)

    def copy_from(self, host_ptr, dev_ptr: int, nbytes: int, *, stream=None) -> None:
        """Copy `nbytes` from device address `dev_ptr` to the host, and wait for it.

        The seed's blocking device-to-host copy:
        ``w.copy_from(host_ptr, t.data_ptr, t.nbytes)``.

        Parameters
        ----------
        host_ptr : int or writable buffer
            A host address, or an object exposing a writable buffer (a numpy
            array, a torch CPU tensor, a ``bytearray``) of at least `nbytes`.
        dev_ptr : int
            A device address inside a live allocation.
        nbytes : int
            Bytes to copy.
        stream : Stream, optional
            ``None`` means the task-local default stream.

        Raises
        ------
        PtoCopyFault
            If the device range is invalid.
        """
        self._blocking_copy(lib.pto_stream_copy_d2h, host_ptr, dev_ptr, nbytes, stream, "copy_from", True)

    def copy_to(self, dev_ptr: int, host_ptr, nbytes: int, *, stream=None) -> None:
        """Copy `nbytes` from the host to device address `dev_ptr`, and wait for it.

        Parameters are as for :meth:`copy_from`, the other way round.
        """
        self._blocking_copy(lib.pto_stream_copy_h2d, host_ptr, dev_ptr, nbytes, stream, "copy_to", False)

    def _blocking_copy(self, fn, host_ptr, dev_ptr, nbytes, stream, what: str, to_host: bool) -> None:
        self._check_open()
        stream = self._current_stream() if stream is None else self._own_stream(stream)
        if isinstance(nbytes, bool) or not isinstance(nbytes, (int, np.integer)) or nbytes <= 0:
            raise PtoArgumentError(f"{what}(): nbytes must be an int > 0, not {nbytes!r}")
        if isinstance(dev_ptr, bool) or not isinstance(dev_ptr, (int, np.integer)) or dev_ptr <= 0:
            raise PtoArgumentError(f"{what}(): dev_ptr must be a device address (an int > 0), not {dev_ptr!r}")
        nbytes = int(nbytes)
        ptr, keep = _host_pointer(host_ptr, nbytes, to_host, f"{what}(host_ptr=...)")
        sp = stream._ptr
        args = (sp, ptr, int(dev_ptr), nbytes) if to_host else (sp, int(dev_ptr), ptr, nbytes)
        with self._lock:
            launch = self._queue_one(stream, fn, args, f"{what} ({nbytes} bytes)", keep, None)
        if not launch._done:
            self._block_until(launch, False, None)
        launch.result()


def _as_shape(shape) -> tuple[int, ...]:
    """A non-empty tuple of ints > 0, as PyPTO's DeviceTensor takes (an int n means ``(n,)``)."""
    dims = (shape,) if isinstance(shape, (int, np.integer)) else shape
    try:
        dims = tuple(dims)
    except TypeError:
        raise PtoArgumentError(f"alloc_tensor(): shape must be an int or a tuple of ints, "
                               f"not {shape!r}") from None
    if not dims or any(isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d <= 0
                       for d in dims):
        raise PtoArgumentError(f"alloc_tensor(): shape must be a non-empty tuple of ints > 0, "
                               f"not {shape!r}")
    return tuple(int(d) for d in dims)


def _check_same(dst_dtype, dst_nbytes, src_dtype, src_nbytes) -> None:
    if dst_dtype != src_dtype:
        raise PtoArgumentError(f"copy(): dtypes differ (dst {dst_dtype.np_name}, src {src_dtype.np_name})")
    if dst_nbytes != src_nbytes:
        raise PtoArgumentError(f"copy(): sizes differ (dst {dst_nbytes} bytes, src {src_nbytes} bytes)")


def _host_pointer(obj, nbytes: int, writeable: bool, what: str):
    """Return (cdata pointer, keep-alive) for an int address or a buffer of >= nbytes."""
    if isinstance(obj, (int, np.integer)) and not isinstance(obj, bool):
        if obj <= 0:
            raise PtoArgumentError(f"{what}: not a host address: {obj!r}")
        return ffi.cast("void *", int(obj)), None
    if isinstance(obj, np.ndarray) or _is_torch_tensor(obj):
        h = host_array(obj, what, writeable=writeable)
        if h.nbytes < nbytes:
            raise PtoArgumentError(f"{what}: the buffer has {h.nbytes} bytes, fewer than nbytes={nbytes}")
        return h.ptr, (obj, h)
    try:
        ptr = ffi.from_buffer(obj, require_writable=writeable)
    except TypeError:
        raise PtoArgumentError(f"{what}: expected an int address or a buffer, not {type(obj).__name__}") from None
    except BufferError:  # read-only when it must be written, or not contiguous
        raise PtoArgumentError(f"{what}: {_buffer_problem(obj, writeable)}") from None
    if len(ptr) < nbytes:
        raise PtoArgumentError(f"{what}: the buffer has {len(ptr)} bytes, fewer than nbytes={nbytes}")
    return ptr, (obj, ptr)


def _buffer_problem(obj, writeable: bool) -> str:
    view = memoryview(obj)
    if writeable and view.readonly:
        return f"the {type(obj).__name__} is read-only but the device writes it"
    if not view.c_contiguous:
        return f"the {type(obj).__name__} is not C-contiguous"
    return f"the {type(obj).__name__} cannot be used as a host buffer"
