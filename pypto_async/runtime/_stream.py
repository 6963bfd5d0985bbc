"""Stream: an in-order queue of device work.

Each stream is a ring of ``ring_task_window`` slots in the driver.  When the
ring is full, submissions do not block: the driver accepts the commands into
the stream's backlog (its overflow), in order, and moves them into the ring
as commands complete, without waiting for the host.  A group of commands (a
launch with its copies) may be split across that boundary; order is
preserved either way.  Only work held back by a host condition waits in the
stream's FIFO here (see :mod:`._queue`).
"""

from __future__ import annotations

from collections import deque

from .._driver import lib
from ..errors import PtoArgumentError, PtoClosedError
from ._checks import check_timeout
from ._event import Event
from ._launch import Launch

__all__ = ["Stream"]


class Stream:
    """An in-order queue of device work.

    Commands queued on one stream start in order, each after the previous one
    completed; commands on different streams overlap.  The constructor
    refuses; use :meth:`ChipWorker.stream` (or ``worker.default_stream``).
    ``await stream`` suspends until everything queued on it so far has
    completed, and :meth:`query` asks without waiting; neither raises for a
    failed command (each launch reports its own failure).  :meth:`close` it
    when you are done; a stream nothing references any more (no tensor,
    launch, event or queued command) is released by the garbage collector,
    its queued work still running.
    """

    __slots__ = ("_worker", "_ptr", "_id", "_priority", "_fifo", "_unentered", "_closed", "_final",
                 "_final_ordering", "_is_default", "__weakref__")

    def __init__(self, *args, **kwargs):
        raise TypeError("Stream cannot be constructed directly; use ChipWorker.stream()")

    @classmethod
    def _make(cls, worker, ptr, priority: int, is_default: bool) -> Stream:
        stream = cls.__new__(cls)
        stream._worker = worker
        stream._ptr = ptr
        stream._id = int(lib.pto_stream_id(ptr))
        stream._priority = priority
        stream._fifo = deque()  # _queue._Entry: work held back by a host condition
        stream._unentered = deque()  # (seq, Launch) in the driver's backlog, oldest first
        stream._closed = False
        stream._final = None  # Events recorded at close: everything queued, with its failures...
        stream._final_ordering = None  # ... and the same point as an ordering only
        stream._is_default = is_default
        return stream

    # -- properties ---------------------------------------------------------------

    @property
    def id(self) -> int:
        """The driver's id of the stream (as in completion and trace records)."""
        return self._id

    @property
    def priority(self) -> int:
        """The stream's priority (larger is scheduled first)."""
        return self._priority

    @property
    def worker(self):
        """The :class:`ChipWorker` the stream belongs to."""
        return self._worker

    @property
    def is_closed(self) -> bool:
        """True once :meth:`close` was called (or the worker closed)."""
        return self._closed or not self._worker._alive()

    @property
    def backlog(self) -> int:
        """Commands queued on this stream that wait for room in its ring."""
        n = len(self._fifo)
        if not self.is_closed:
            n += lib.pto_stream_accepted(self._ptr) - lib.pto_stream_submitted(self._ptr)
        return n

    def _check(self) -> None:
        self._worker._check_open()
        if self._closed:
            raise PtoClosedError(f"stream {self._id} is closed")

    # -- ordering -----------------------------------------------------------------

    def record(self) -> Event:
        """Record an event on this stream and return it.

        The event completes once everything queued on this stream so far has
        completed.  Never waits.

        Raises
        ------
        PtoClosedError
            If the stream or its worker is closed.
        """
        self._check()
        return self._worker._record(self)

    def wait(self, what) -> None:
        """Make this stream wait, on the device, for an event, a launch or a stream.

        Work queued on this stream after this call starts only once `what`
        has completed; the host does not wait.

        Parameters
        ----------
        what : Event, Launch or Stream
            An event; a launch (waits for it to complete: see
            :attr:`Launch.event`); or a stream (waits for everything queued
            on it so far).

        Raises
        ------
        PtoArgumentError
            If `what` is of another worker or type.
        PtoClosedError
            If this stream or its worker is closed.
        """
        self._check()
        worker = self._worker
        if isinstance(what, Launch):
            if what._worker is not worker:
                raise PtoArgumentError("Stream.wait(): the launch belongs to another worker")
            if what._done:
                return
            what = what.event
        elif isinstance(what, Stream):
            if what._worker is not worker:
                raise PtoArgumentError("Stream.wait(): the stream belongs to another worker")
            if what is self:
                return
            what = what.record() if not what._closed else what._final
            if what is None:
                return
        elif not isinstance(what, Event):
            raise PtoArgumentError(
                f"Stream.wait() takes an Event, a Launch or a Stream, not {type(what).__name__}"
            )
        elif what._worker is not worker:
            raise PtoArgumentError("Stream.wait(): the event belongs to another worker")
        worker._wait_event(self, what)

    def __await__(self):
        """Suspend until everything queued on this stream so far has completed."""
        return self._worker._marker(self).__await__()

    def sync(self, timeout: float | None = None) -> None:
        """Block this thread until everything queued on this stream so far has completed.

        Parameters
        ----------
        timeout : float, optional
            Seconds to wait at most (``None``: no limit).

        Raises
        ------
        PtoTimeout
            If the work did not complete in time (it goes on).
        PtoDeviceLost
            If the device was lost.
        """
        check_timeout(timeout, "Stream.sync")  # before the marker is queued
        self._worker._marker(self).sync(timeout)

    def query(self) -> bool:
        """Return True if everything queued on this stream so far has completed.

        Never waits, and never raises for a failed command (each launch
        reports its own).  Like :meth:`Event.query`, this is the device's
        view: a launch that completed there is ``done()`` only once the pump
        has drained its record.

        Raises
        ------
        PtoClosedError
            If the worker is closed.
        """
        worker = self._worker
        worker._check_open()
        with worker._lock:
            if worker._deferred:  # frees of collected tensors count as work queued so far
                worker._process_deferred_locked()
            if self._closed:
                final = self._final
                return final is None or final.query()
            if self._fifo:
                return False
            # The lock keeps submissions out: read how far the stream was filled (the ring
            # and the driver's backlog), then how far it was drained.
            accepted = lib.pto_stream_accepted(self._ptr)
            return lib.pto_stream_completed(self._ptr) >= accepted

    def close(self) -> None:
        """Close the stream (idempotent).

        Work already queued still runs and completes; new work is refused
        with :class:`~pypto_async.errors.PtoClosedError`.  The default stream
        is closed with its worker.

        Raises
        ------
        PtoArgumentError
            For the worker's default stream.
        """
        if self._closed or not self._worker._alive():
            return
        if self._is_default:
            raise PtoArgumentError("the default stream is closed with its worker")
        self._worker._close_stream(self)

    def __del__(self):
        # Nothing references the stream any more (tensors, launches, events and queued
        # commands all hold it), so nothing more can be queued on it: release the driver's
        # stream.  Work already queued still runs.  Never raise from a finalizer.
        try:
            if not self._closed and self._worker._alive():
                self._closed = True
                lib.pto_stream_destroy(self._ptr)
        except Exception:
            pass

    def __repr__(self) -> str:
        state = " closed" if self.is_closed else ""
        return f"<Stream {self._id} priority={self._priority}{state}>"

