"""Copies: between DeviceTensors and host arrays, and PyPTO's blocking copies by address.

The worker's ``copy``, ``copy_from`` and ``copy_to`` delegate here.  A copy
is one data command owned by a new :class:`Launch`, queued in stream order
like a kernel launch (:func:`~._dispatch.queue_one`).  The host side stays
alive until the copy completed (the Launch keeps it).  A DeviceTensor used
for the first time on the copy's stream joins it first
(``DeviceTensor._join``).
"""

from __future__ import annotations

import numpy as np

from .._driver import ffi, lib
from .._dtypes import holds
from ..errors import PtoArgumentError, PtoForeignTensorError
from ._args import _is_torch_tensor, check_init, host_array
from ._checks import check_same
from ._context import capture_of, refuse
from ._dispatch import finish_sync, queue_one
from ._hazards import order
from ._launch import Launch
from ._peer import copy as peer_copy, is_peer_copy
from ._stream import stream_for
from ._tensor import DeviceTensor, freed_error
from ._wait import block_until

__all__ = ["copy", "copy_from", "copy_to"]


class _Side:
    """The host side of a copy, as the sanitizer reads a kernel parameter (name and direction)."""

    __slots__ = ("name", "copies_in", "copies_out")

    def __init__(self, name: str, copies_in: bool, copies_out: bool):
        self.name = name
        self.copies_in = copies_in
        self.copies_out = copies_out


_SIDE = {"h2d": _Side("src", True, False), "d2h": _Side("dst", False, True)}


def copy(worker, dst, src, stream) -> Launch:
    """Copy between a DeviceTensor and a host array, or two DeviceTensors.

    The direction follows the argument types.  Both sides must have the
    same dtype and number of bytes.

    Two DeviceTensors of different workers (devices of one platform) make a
    peer copy: one command on one stream, no host round trip.  It is ordered
    like any copy: a write of `dst` and a read of `src`, after their earlier
    uses and before their later ones on every stream of either worker (the
    sanitizer checks it where ordering is yours; see :mod:`._peer`).

    Parameters
    ----------
    dst, src : DeviceTensor or host array
        At least one must be a DeviceTensor.  A host destination must be
        writeable.
    stream : Stream, optional
        ``None`` means the task-local default stream (of the source's worker
        for a peer copy, which may also run on a stream of either worker).

    Returns
    -------
    Launch
        Its result is `dst`.  In sync mode it has completed; in async mode
        await it.  The host array stays alive until the copy completed.
    """
    worker._check_open()
    if worker._captures and (cap := capture_of(worker)) is not None:
        return cap.copy(dst, src, stream)  # recorded, not queued (_capture.py)
    if is_peer_copy(worker, dst, src):
        return peer_copy(worker, dst, src, stream)
    stream = stream_for(worker, stream)
    dst_dev = isinstance(dst, DeviceTensor)
    src_dev = isinstance(src, DeviceTensor)
    for side, t in (("dst", dst), ("src", src)):
        if isinstance(t, DeviceTensor):
            if t._worker is not worker:
                raise PtoForeignTensorError(f"copy({side}=...): the DeviceTensor belongs to another ChipWorker; "
                                            "copy it from the worker that owns it")
            if t._freed:
                raise freed_error(t, f"copy({side}=...)")
            if t._init is not None and side == "src":
                check_init(t, f"copy({side}=...)")
    host = None
    if dst_dev and src_dev:
        kind, nbytes = "d2d", dst._nbytes
        check_same(dst._dtype, dst._nbytes, src._dtype, src._nbytes)
    elif dst_dev:
        host = host_array(src, "copy(src=...)", writeable=False)
        kind, nbytes = "h2d", dst._nbytes
        check_same(dst._dtype, dst._nbytes, dst._dtype if holds(host.dtype, dst._dtype) else host.dtype, host.nbytes)
    elif src_dev:
        host = host_array(dst, "copy(dst=...)", writeable=True)
        kind, nbytes = "d2h", src._nbytes
        check_same(src._dtype if holds(host.dtype, src._dtype) else host.dtype, host.nbytes, src._dtype, src._nbytes)
    else:
        raise PtoArgumentError("copy(): dst or src must be a DeviceTensor (host-to-host is numpy's job)")
    sp = stream._ptr
    name = f"copy {kind} ({nbytes} bytes)"
    accesses = []  # what the copy touches, for ordering across streams (_hazards.py)
    if dst_dev:
        accesses.append((dst, "dst", False, True))
    if src_dev:
        accesses.append((src, "src", True, False))
    hz = worker._hazards
    with worker._lock:
        if hz is not None and hz.mode != "off" and host is not None:
            hz.sanitizer.check_hosts(stream, [(0, host, _SIDE[kind])], name)
        order(worker, stream, accesses, name, 0)
        if kind == "d2d":
            launch = queue_one(worker, stream, lib.pto_stream_copy_d2d, (sp, dst._ptr, src._ptr, nbytes),
                               name, (dst, src), dst)
            dst._initialising(launch)  # a full overwrite: the tensor is as good as this copy
        elif kind == "h2d":
            launch = queue_one(worker, stream, lib.pto_stream_copy_h2d, (sp, dst._ptr, host.ptr, nbytes),
                               name, (dst, src, host), dst)
            dst._initialising(launch)
        else:
            launch = queue_one(worker, stream, lib.pto_stream_copy_d2h, (sp, host.ptr, src._ptr, nbytes),
                               name, (dst, src, host), dst)
        if hz is not None and hz.mode != "off" and kind == "h2d":
            hz.sanitizer.note_hosts(stream, [(0, host, _SIDE[kind])], name, stream._last)
    return finish_sync(worker, launch)


def copy_from(worker, host_ptr, dev_ptr, nbytes, stream) -> None:
    """Copy `nbytes` from device address `dev_ptr` to the host, and wait for it.

    PyPTO's blocking device-to-host copy by address:
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
    _blocking_copy(worker, True, host_ptr, dev_ptr, nbytes, stream, "copy_from")


def copy_to(worker, dev_ptr, host_ptr, nbytes, stream) -> None:
    """Copy `nbytes` from the host to device address `dev_ptr`, and wait for it.

    Parameters are as for :meth:`copy_from`, the other way round.
    """
    _blocking_copy(worker, False, host_ptr, dev_ptr, nbytes, stream, "copy_to")


def _blocking_copy(worker, to_host: bool, host_ptr, dev_ptr, nbytes, stream, what: str) -> None:
    worker._check_open()
    refuse(worker, f"the blocking {what}()")
    stream = stream_for(worker, stream)
    if isinstance(nbytes, bool) or not isinstance(nbytes, (int, np.integer)) or nbytes <= 0:
        raise PtoArgumentError(f"{what}(): nbytes must be an int > 0, not {nbytes!r}")
    if isinstance(dev_ptr, bool) or not isinstance(dev_ptr, (int, np.integer)) or dev_ptr <= 0:
        raise PtoArgumentError(f"{what}(): dev_ptr must be a device address (an int > 0), not {dev_ptr!r}")
    nbytes = int(nbytes)
    ptr, keep = _host_pointer(host_ptr, nbytes, to_host, f"{what}(host_ptr=...)")
    sp = stream._ptr
    if to_host:
        fn, args = lib.pto_stream_copy_d2h, (sp, ptr, int(dev_ptr), nbytes)
    else:
        fn, args = lib.pto_stream_copy_h2d, (sp, int(dev_ptr), ptr, nbytes)
    name = f"{what} ({nbytes} bytes)"
    hz = worker._hazards
    with worker._lock:
        if hz is not None:  # a raw address: ordered (and checked) as the tensor it lies in
            hz.raw_access(stream, int(dev_ptr), nbytes, to_host, name)
        launch = queue_one(worker, stream, fn, args, name, keep, None)
    if not launch._done:
        block_until(worker._queue, launch, False, None)
    launch.result()


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
