"""Between workers: device counts, peer copies, and waits on another worker's work.

Several :class:`~pypto_async.runtime.ChipWorker` objects of one process each
own a device of their platform (``RunConfig(device_id=k)``; the simulator
offers :func:`device_count` of them).  This module is the one place where two
workers meet:

* :func:`copy` is ``w.copy(dst, src)`` for DeviceTensors of two workers: one
  peer copy command (``pto_stream_copy_peer``) on one stream, the source
  worker's default stream unless you pass one of either worker.
* ``stream.wait(x)`` for an Event, Launch or Stream of another worker
  (``_stream._wait_other_worker``): a device-side wait (``pto_stream_wait_event`` takes another
  device's event), no host round trip.

How a peer copy is ordered
--------------------------
The copy runs on a stream of one of the two workers (the source's default
stream unless you pass one).  To that worker, it is an access like a local
copy's: a write of the destination, or a read of the source, ordered after
the earlier accesses to the tensor by the worker's hazard tracking, noted
there for the later ones, and checked by the sanitizer where ordering is
manual (:func:`._hazards.order`, as :mod:`._copy` calls it).  The tensor of
the other worker is ordered at stream level, since the copy's stream is not
one of that worker's: the copy waits (on the device) for everything queued
so far on every stream of that worker that used the tensor, through events
that carry failures for the source (a failed writer fails the copy as its
dependent) and ordering-only ones for the destination (what it waits for
there is earlier readers and writers that the copy overwrites anyway).
After the copy, one event is recorded on the copy's stream; every stream of
the other worker that used the tensor waits for it, and one that uses the
tensor for the first time later joins on it (the tensor's ``_ready``).  So
a later use of the destination, on any stream of either worker, reads the
copied bytes, and a later write of the source does not overwrite what the
copy still reads.

The collectives of :mod:`._distributed` use the same two parts: each rank's
own buffers go through :func:`._hazards.order`, and the peer copies between
ranks are ordered by the ring's events.

Two workers' locks are never held at once: each step takes the lock of the
worker whose stream it queues on, one after the other.  An event that has
not reached the driver yet (its record waits in its stream's host FIFO) is
reserved there first (``pto_event_reserve``), so a wait of another device
queued meanwhile waits for that very record; that is what makes it safe to
treat it as entered.
"""

from __future__ import annotations

from .._driver import check, lib
from ..errors import PtoArgumentError, PtoForeignTensorError, PtoNotSupported
from ._args import check_init
from ._dispatch import finish_sync, queue_one
from ._event import Event, enter
from ._hazards import order
from ._launch import Launch
from ._stream import Stream, task_default
from ._tensor import DeviceTensor, freed_error

__all__ = ["device_count", "is_peer_copy", "copy", "copy_parts", "order_after"]


def device_count(platform: str = "sim") -> int:
    """Return how many devices `platform` offers in this process.

    The simulator offers 8, or what the environment variable
    ``PYPTO_ASYNC_SIM_DEVICES`` says (1 to 1024).  Open device ``k`` with
    ``ChipWorker(RunConfig(device_id=k))``.

    Parameters
    ----------
    platform : str
        A platform name (``"sim"``, or an alias such as ``"a2a3sim"``).

    Raises
    ------
    PtoNotSupported
        For an unknown platform.
    PtoArgumentError
        If ``PYPTO_ASYNC_SIM_DEVICES`` is not a count.
    """
    if not isinstance(platform, str):
        raise PtoArgumentError(f"device_count(platform=...) takes a str, not {type(platform).__name__}")
    return check(lib.pto_device_count(platform.encode()), f"device_count({platform!r})")


def is_peer_copy(worker, dst, src) -> bool:
    """True if ``worker.copy(dst, src)`` copies between two workers' DeviceTensors."""
    return (isinstance(dst, DeviceTensor) and isinstance(src, DeviceTensor)
            and dst._worker is not src._worker)


# -- peer copies ---------------------------------------------------------------------


def copy(worker, dst: DeviceTensor, src: DeviceTensor, stream) -> Launch:
    """Copy `src` of one worker into `dst` of another; see :meth:`ChipWorker.copy`."""
    _check_copy(worker, dst, src)
    return _queue(dst, src, _copy_stream(dst, src, stream), None)


def copy_parts(dst: DeviceTensor, src: DeviceTensor, parts, stream=None) -> Launch:
    """Copy byte ranges of `src` into `dst`: one peer copy per part (a local copy on one worker).

    Each part is ``(dst_offset, src_offset, nbytes)``, inside both tensors
    (checked).  The copies are ordered as one access of each tensor, as
    :func:`copy` orders its one (a write of `dst`, a read of `src`), in
    `parts` order on one stream (the source's default unless given).
    Returns the Launch of the last copy.

    Raises
    ------
    PtoArgumentError
        For no parts, a part outside a tensor, or dtypes that differ.
    """
    parts = [(int(d), int(s), int(n)) for d, s, n in parts]
    if not parts:
        raise PtoArgumentError("copy_parts(): no parts to copy")
    for d, s, n in parts:
        if n <= 0 or d < 0 or s < 0 or d + n > dst._nbytes or s + n > src._nbytes:
            raise PtoArgumentError(f"copy_parts(): the part ({d}, {s}, {n}) lies outside dst ({dst._nbytes} "
                                   f"bytes) or src ({src._nbytes} bytes)")
    _check_copy(dst._worker, dst, src, sizes=False)
    return _queue(dst, src, _copy_stream(dst, src, stream), parts)


def _queue(dst: DeviceTensor, src: DeviceTensor, stream, parts) -> Launch:
    """Queue the copy (`parts`: byte ranges, None: all of it) on `stream`, ordered (see the module doc)."""
    owner = stream._worker
    nbytes = dst._nbytes if parts is None else sum(p[2] for p in parts)
    pieces = "" if parts is None or len(parts) == 1 else f" in {len(parts)} parts"
    name = (f"copy peer ({nbytes} bytes{pieces}, device {src._worker.device_id} -> "
            f"device {dst._worker.device_id})")
    # The tensor of the stream's worker is accessed as by a local copy (ordered, noted and
    # sanitized: _hazards.py); the other worker's, through its streams' tails (see the module doc).
    if dst._worker is src._worker:  # copy_parts within one worker: both are local
        accesses, points, fn = [(dst, "dst", False, True), (src, "src", True, False)], [], None
    else:
        local, foreign = (dst, src) if dst._worker is owner else (src, dst)
        accesses = [(dst, "dst", False, True)] if local is dst else [(src, "src", True, False)]
        points = _tails(foreign, stream, ordering=foreign is dst)
        fn = lib.pto_stream_copy_peer
    sp = stream._ptr
    runs = [(0, 0, nbytes)] if parts is None else parts
    with owner._lock:
        # the waits below come before the copies; the accesses end with the last copy
        order(owner, stream, accesses, name, len(points) + len(runs) - 1)
        for event in points:
            stream._wait_locked(event)
        for d, s, n in runs:
            if fn is None:
                launch = queue_one(owner, stream, lib.pto_stream_copy_d2d, (sp, dst._ptr + d, src._ptr + s, n),
                                   name, (dst, src), dst)
            else:
                args = (sp, dst._worker._dev, dst._ptr + d, src._worker._dev, src._ptr + s, n)
                launch = queue_one(owner, stream, fn, args, name, (dst, src), dst)
        if parts is None:
            dst._initialising(launch)  # a full overwrite: the tensor is as good as this copy
        done = stream._record_locked()
        enter(done)
    if fn is not None:
        order_after(stream, done, (foreign,))
    return finish_sync(owner, launch)


def _check_copy(worker, dst: DeviceTensor, src: DeviceTensor, sizes: bool = True) -> None:
    for side, t in (("dst", dst), ("src", src)):
        if t._freed:
            raise freed_error(t, f"copy({side}=...)")
        t._worker._check_open()
    if worker is not dst._worker and worker is not src._worker:
        raise PtoForeignTensorError("copy(): neither DeviceTensor belongs to this ChipWorker")
    a, b = src._worker, dst._worker
    if a.platform != b.platform:
        raise PtoNotSupported(f"copy(): the tensors live on devices of platforms {a.platform!r} and "
                              f"{b.platform!r}, which cannot copy to each other; stage the data "
                              "through the host (src.numpy(), then w.copy(dst, host))")
    if dst._dtype != src._dtype:
        raise PtoArgumentError(f"copy(): dtypes differ (dst {dst._dtype.np_name}, src {src._dtype.np_name})")
    if sizes and dst._nbytes != src._nbytes:
        raise PtoArgumentError(f"copy(): sizes differ (dst {dst._nbytes} bytes, src {src._nbytes} bytes)")
    if src._init is not None:
        check_init(src, "copy(src=...)")


def _copy_stream(dst: DeviceTensor, src: DeviceTensor, stream) -> Stream:
    if stream is None:
        return task_default(src._worker)
    if type(stream) is not Stream:
        raise PtoArgumentError(f"stream must be a Stream or None, not {type(stream).__name__}")
    if stream._worker is not src._worker and stream._worker is not dst._worker:
        raise PtoArgumentError("copy(): a peer copy runs on a stream of the source's or the "
                               "destination's ChipWorker; this stream belongs to neither")
    stream._check()
    return stream


def _users(t: DeviceTensor, skip: Stream) -> list[Stream]:
    return [s for s in list(t._streams) if s is not skip]


def _tails(t: DeviceTensor, stream: Stream, ordering: bool) -> list:
    """Events after the work queued so far on every stream but `stream` that used `t` (entered).

    Those of a read carry their failures (a failed writer fails the copy,
    as its dependent); those of a write (``ordering``) only order.
    """
    users = _users(t, stream)
    points = []
    if not users:
        return points
    with t._worker._lock:
        for user in users:
            if user._closed:
                event = user._final_ordering if ordering else user._final
            else:
                event = user._record_locked(ordering=ordering)
            if event is not None:
                enter(event)
                points.append(event)
    return points


def order_after(stream: Stream, done: Event, tensors) -> None:
    """Order the later uses of `tensors`, on every stream of theirs but `stream`, after `done`."""
    for t in tensors:
        users = [s for s in _users(t, stream) if not s._closed]
        with t._worker._lock:
            for user in users:
                user._wait_locked(done)
            if t._worker is not stream._worker:
                t._ready = done  # a stream of t's worker that uses t first joins here
