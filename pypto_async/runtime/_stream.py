"""Stream: an in-order queue of device work, and how work is ordered on it.

Each stream is a ring of ``ring_task_window`` slots in the driver.  When the
ring is full, submissions do not block: the driver accepts the commands into
the stream's backlog (its overflow), in order, and moves them into the ring
as commands complete, without waiting for the host.  A group of commands (a
launch with its copies) may be split across that boundary; order is
preserved either way.  Only work held back by a host condition waits in the
stream's FIFO here (see :mod:`._queue`).

A stream records events and waits for them (``_record_locked``,
``_wait_locked``: the commands every ordering in the runtime is made of),
queues markers (``_marker``: what ``await stream`` and ``stream.sync()``
wait for; they raise what an event recorded there would,
``_complete.raise_carried``), and releases its driver stream
(``_destroy``).  :func:`accept` and :func:`stream_for` are how every call
that takes ``stream=`` checks it, or picks the task-local default.
"""

from __future__ import annotations

from collections import deque

from .._driver import check, ffi, lib
from ..errors import PtoArgumentError, PtoClosedError, PtoNotSupported
from ._checks import check_timeout
from ._context import capture_of, stream_stack
from ._event import Event, enter
from ._hazards import _merge, closed, gone, mark, merge_clock, prune_clocks
from ._launch import Launch, _Marker, _SyncMarker, _SyncPoint
from ._queue import F_LAST, F_RECORD, QUEUED
from ._submit import note_used, overflowed, submit, token

__all__ = ["Stream", "fold_point", "sync_point"]


class Stream:
    """An in-order queue of device work.

    Commands queued on one stream start in order, each after the previous one
    completed; commands on different streams overlap.  The constructor
    refuses; use :meth:`ChipWorker.stream` (or ``worker.default_stream``).
    ``await stream`` (and :meth:`sync`) suspends until everything queued on
    it so far has completed, and raises the failure the stream carries at
    that point, as awaiting an event recorded there would; :meth:`query`
    asks without waiting, and never raises for a failed command.

    A command that fails makes every later command on the stream fail with
    :class:`~pypto_async.errors.PtoDependencyError` until the failure has been
    delivered to you: until awaiting (or ``sync()``, ``result()``,
    ``exception()``) a Launch, or awaiting (or ``sync()``) an Event or the
    stream itself, raises that failure or a dependency error behind it
    (whose ``__cause__`` is the failure).  Work queued after that runs
    normally; work queued before still fails.  When the runtime happens to
    process completions never matters.  So a fire-and-forget stream
    reports its failures where it is synced: ``await stream`` after a
    failed launch raises a dependency error of it, and the stream runs new
    work again.  :meth:`close` it
    when you are done; a stream nothing references any more (no tensor,
    launch, event or queued command) is released by the garbage collector,
    its queued work still running.
    """

    __slots__ = ("_worker", "_queue", "_ptr", "_id", "_priority", "_fifo", "_unentered", "_closed",
                 "_final", "_final_ordering", "_folded", "_is_default", "_last", "_oclock", "_used", "_wait_ev",
                 "__weakref__")

    def __init__(self, *args, **kwargs):
        raise TypeError("Stream cannot be constructed directly; use ChipWorker.stream()")

    @classmethod
    def _create(cls, worker, priority: int, is_default: bool) -> Stream:
        """Create a driver stream on `worker` and register it there (lock held)."""
        out = ffi.new("pto_stream **")
        check(lib.pto_stream_create(worker._dev, priority, out), "pto_stream_create")
        check(lib.pto_stream_set_overflow(out[0], 1), "pto_stream_set_overflow")  # see _queue.py, step 3
        stream = cls._make(worker, out[0], priority, is_default)
        worker._streams[stream._id] = stream
        if worker._hazards is not None:
            worker._hazards.register(stream)  # the driver's ordering knows it from now on
        prune_clocks(worker)
        return stream

    @classmethod
    def _make(cls, worker, ptr, priority: int, is_default: bool) -> Stream:
        stream = cls.__new__(cls)
        stream._worker = worker
        stream._queue = worker._queue
        stream._ptr = ptr
        stream._id = int(lib.pto_stream_id(ptr))
        stream._priority = priority
        stream._fifo = deque()  # _queue.Entry: work held back by a host condition
        stream._unentered = deque()  # (seq, Launch) in the driver's backlog, oldest first
        stream._closed = False
        stream._final = None  # Events recorded at close: everything queued, with its failures...
        stream._final_ordering = None  # ... and the same point as an ordering only
        stream._folded = 0  # once closed: the token of the fold point's wait for it (fold_point)
        stream._is_default = is_default
        stream._last = 0  # the token of its last data command (a launch or copy)
        stream._oclock = {}  # the sanitizer: other stream -> the largest token of its events this one waits for
        stream._used = False  # work queued since a worker sync last looked (in q.used; _submit.note_used)
        stream._wait_ev = None  # with no hazard table: the driver event naming fences of it in traces
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

    def _refuse_captured(self, what: str) -> None:
        """Raise PtoCaptureError if this task captures on this stream: it would wait for captured work."""
        if self._worker._captures and (cap := capture_of(self._worker)) is not None and self in cap._slots:
            cap.refuse(f"{what} (stream {self._id})")

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
        if self._worker._captures and (cap := capture_of(self._worker)) is not None:
            return cap.record(self)  # recorded in the graph (_capture.py)
        with self._worker._lock:
            return self._record_locked()

    def wait(self, what) -> None:
        """Make this stream wait, on the device, for an event, a launch or a stream.

        Work queued on this stream after this call starts only once `what`
        has completed; the host does not wait.

        Parameters
        ----------
        what : Event, Launch or Stream
            An event; a launch (waits for it to complete: see
            :attr:`Launch.event`); or a stream (waits for everything queued
            on it so far).  It may belong to another worker of the same
            platform (another device): the wait is still on the device.  A
            failure of that work fails this stream's later work as a
            dependent, and closing that worker first fails it with
            :class:`~pypto_async.errors.PtoClosedError`.

        Notes
        -----
        On one device a wait is one command on this stream and no
        completion record unless it fails: a wait for a stream, or for a
        launch whose :attr:`~Launch.event` was not read, waits for a fence
        of that stream's last command (nothing is queued there), and a wait
        for an event is quiet.  Where that stream or this one holds work on
        the host, or that stream is closed, an event is recorded there
        behind that work and waited for.  ``testing.fail_next`` passes a
        fence wait by (as an inferred wait), and hits a wait for an event.

        Raises
        ------
        PtoArgumentError
            If `what` is of another type.
        PtoNotSupported
            If `what` is of a worker of another platform.
        PtoClosedError
            If this stream or its worker is closed.
        """
        self._check()
        worker = self._worker
        if worker._captures and (cap := capture_of(worker)) is not None:
            cap.wait(self, what)  # recorded in the graph (_capture.py)
            return
        if isinstance(what, (Launch, Event, Stream)) and what._worker is not worker:
            _wait_other_worker(self, what)  # a device-side wait across devices of one platform
            return
        if isinstance(what, Launch):
            if what._done:
                return
            if what._event is None and what._stream is not self:
                with worker._lock:  # a fence of its stream's tail is what recording its event now waits for
                    if what._done or self._wait_fence_locked(what._stream):
                        return
            what = what.event
        elif isinstance(what, Stream):
            if what is self:
                return
            with worker._lock:
                if self._wait_fence_locked(what):
                    return
            what = what.record() if not what._closed else what._final
            if what is None:
                return
        elif not isinstance(what, Event):
            raise PtoArgumentError(
                f"Stream.wait() takes an Event, a Launch or a Stream, not {type(what).__name__}"
            )
        with worker._lock:
            if not self._wait_quiet_locked(what):
                self._wait_locked(what)

    def __await__(self):
        """Suspend until everything queued on this stream so far has completed.

        Raises what :meth:`sync` raises (a timeout aside).
        """
        self._refuse_captured("await stream")
        return self._marker().__await__()

    def sync(self, timeout: float | None = None) -> None:
        """Block this thread until everything queued on this stream so far has completed.

        Parameters
        ----------
        timeout : float, optional
            Seconds to wait at most (``None``: no limit).

        Raises
        ------
        PtoDependencyError
            If the stream carries a failure at this point: a command queued
            before this call failed (the error's ``__cause__``, when still
            known), and the failure had not been delivered when the call
            was made.  The same error an Event recorded here raises when
            awaited; raising it delivers the failure, so work queued on the
            stream from now on runs.
        PtoTimeout
            If the work did not complete in time (it goes on, and nothing is
            delivered).
        PtoDeviceLost
            If the device was lost.
        PtoClosedError
            If the stream or its worker is closed.
        """
        check_timeout(timeout, "Stream.sync")  # before the marker is queued
        self._refuse_captured("Stream.sync()")
        self._marker().sync(timeout)

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
            worker._memory.free_deferred_locked()  # frees of collected tensors count as work queued so far
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
        worker = self._worker
        if self._closed or not worker._alive():
            return
        if self._is_default:
            raise PtoArgumentError("the default stream is closed with its worker")
        with worker._lock:
            # The last points anyone can join: one that carries the stream's failures (for
            # waits on its work) and one that only orders (for frees of tensors it used).
            self._final = self._record_locked()
            self._final_ordering = self._record_locked(ordering=True)
            # The worker's fold point waits for it: a record that still names this stream
            # can be folded into that one point (see fold_point).
            fold = fold_point(worker)
            self._folded = self._queue.next_token
            fold._wait_locked(self._final_ordering)
            self._closed = True
            # A worker sync gives closed streams no marker: it need not look at this one (a
            # service that opens a stream per request and never syncs would grow q.used forever).
            self._queue.used.pop(self._id, None)
            if self not in self._queue.backlog:  # else the flush that empties it destroys it
                self._destroy()
            closed(self)

    def __del__(self):
        # Nothing references the stream any more (tensors, launches, events and queued
        # commands all hold it), so nothing more can be queued on it: release the driver's
        # stream.  Work already queued still runs.  Never raise from a finalizer.
        try:
            if not self._closed and self._worker._alive():
                self._closed = True
                gone(self, later=True)  # (no lock here: the driver's table hears of it under the lock)
                self._queue.used.pop(self._id, None)  # (atomic; a sync skips it anyway, as a closed one)
                lib.pto_stream_destroy(self._ptr)
                self._drop_wait_ev()
        except Exception:
            pass

    def __repr__(self) -> str:
        state = " closed" if self.is_closed else ""
        return f"<Stream {self._id} priority={self._priority}{state}>"

    # -- ordering commands (lock held unless said) ----------------------------------

    def _record_locked(self, ordering: bool = False, edge: bool = False) -> Event:
        """Record an Event on this stream.

        ``ordering=True`` records a point that stands for no result: the event
        completes healthy even if the stream failed before it, so waiting on
        it orders without inheriting that failure.  ``edge=True``: the record
        of an inferred edge (:mod:`._hazards`), which injected failures pass by.
        """
        q = self._queue
        event = Event._make(self._worker, self, True)
        t = token(q, event)
        fn = (lib.pto_stream_record_ordering if ordering else
              lib.pto_stream_record_edge if edge else lib.pto_stream_record)
        event._clock = mark(self, t, ordering)  # what a stream that waits for it is ordered after (_hazards.py)
        if submit(q, self, fn, (self._ptr, event._ptr, t), event, F_LAST | F_RECORD):
            event._entered = True
        return event

    def _wait_locked(self, event: Event, edge: bool = False) -> None:
        """Make this stream wait, on the device, for `event` (held on the host until it is recorded).

        ``edge=True``: the wait of an inferred edge (:mod:`._hazards`), which
        injected failures pass by.
        """
        q = self._queue
        t = token(q, None)
        if event._worker is not self._worker:
            _wait_foreign(q, self, event, t)
            return
        fn = lib.pto_stream_wait_edge if edge else lib.pto_stream_wait_event
        submit(q, self, fn, (self._ptr, event._ptr, t), None, 0, gate=event)
        if event._clock is not None:
            merge_clock(self, event)

    def _wait_fence_locked(self, src: Stream) -> bool:
        """Make this stream wait for everything queued on `src` so far, as a fence; False if it cannot be one.

        What waiting for an event recorded on `src` now would do, in one
        command and no record on `src` (``pto_stream_wait_stream``): the
        point is `src`'s last command in the driver, and the wait is quiet
        (a completion record only if it fails: a failure of `src`'s work
        before the point, which fails this stream's later work as a
        dependent, exactly as the event's wait would).  It can be one when
        `src` is another open stream of this worker and neither stream holds
        work on the host (else the point, or the wait's place, is still in a
        FIFO here).  The hazard table and the sanitizer's clock take the
        edge as they take an event's; it is not counted as inferred, and
        injected failures pass it by, as they pass an inferred wait.
        """
        if src is self or src._closed or src._fifo or self._fifo or self._closed:
            return False
        q = self._queue
        hz = self._worker._hazards
        if hz is not None and hz.table is None:
            return False
        if not self._used:
            note_used(q, self)  # the wait may fail: a worker sync looks at this stream
        tok = q.next_token
        q.next_token = tok + 1  # not in the token map: a quiet wait has no record to deliver
        if hz is not None:
            rc = lib.pto_hazards_queue_wait(hz.table, self._id, src._id, tok)
        else:
            ev = src._wait_ev
            if ev is None:
                out = ffi.new("pto_event **")
                check(lib.pto_event_create(self._worker._dev, out), "pto_event_create")
                ev = src._wait_ev = out[0]
            rc = lib.pto_stream_wait_stream(self._ptr, src._ptr, ev, tok)
        if rc:
            if rc < 0:
                check(rc, "Stream.wait")
            if rc & QUEUED:
                overflowed(q, self, 1)
        if hz is not None and hz.sanitizing:  # ordered after every event src's clock names, and src's tail
            _merge(self._oclock, src._oclock, self._id, src._id, tok)
        return True

    def _wait_quiet_locked(self, event: Event) -> bool:
        """``self.wait(event)`` as a quiet wait (``pto_stream_wait_event_quiet``); False if it cannot be one.

        The same wait as :meth:`_wait_locked`'s, with a completion record
        only if it fails.  It can be one for an event of this worker that is
        in the driver already, on a stream that holds no work on the host
        (else the wait waits in this stream's FIFO, where its token must be
        in the token map).
        """
        if not event._entered or event._worker is not self._worker or self._fifo or self._closed:
            return False
        q = self._queue
        if not self._used:
            note_used(q, self)
        tok = q.next_token
        q.next_token = tok + 1  # not in the token map: a quiet wait has no record to deliver
        rc = lib.pto_stream_wait_event_quiet(self._ptr, event._ptr, tok)
        if rc:
            if rc < 0:
                check(rc, "Stream.wait")
            if rc & QUEUED:
                overflowed(q, self, 1)
        if event._clock is not None:
            merge_clock(self, event)
        return True

    def _marker(self) -> Launch:
        """Queue a notify: a Launch that completes after everything queued before it (takes the lock)."""
        worker = self._worker
        worker._check_open()
        with worker._lock:
            worker._memory.free_deferred_locked()  # frees of collected tensors count as work queued so far
            if self._closed:
                raise PtoClosedError(f"stream {self._id} is closed")
            return self._marker_locked()

    def _marker_locked(self) -> Launch:
        marker = _Marker._make(self._worker, self, f"stream {self._id} sync point")
        q = self._queue
        t = token(q, marker)
        if submit(q, self, lib.pto_stream_notify, (self._ptr, t), marker, F_LAST):
            marker._entered = True
        return marker

    def _event_after(self, launch: Launch) -> Event:
        """An Event that completes once `launch`, queued on this stream, has (takes the lock)."""
        worker = self._worker
        worker._check_open()
        with worker._lock:
            if launch._done:
                return Event._of_finished(worker, launch)
            if self._closed:
                return self._final
            return self._record_locked()

    def _destroy(self) -> None:
        """Release the driver's stream, once nothing of this stream is left on the host."""
        self._worker._streams.pop(self._id, None)
        gone(self)
        lib.pto_stream_destroy(self._ptr)
        self._drop_wait_ev()

    def _drop_wait_ev(self) -> None:
        """Destroy the event that named fences of this stream (fences queued hold only its id)."""
        ev, self._wait_ev = self._wait_ev, None
        if ev is not None:
            lib.pto_event_destroy(ev)


def fold_point(worker) -> Stream:
    """The worker's fold point: an internal stream that waits for every closed stream's last work (lock held).

    ``Stream.close`` queues a wait there, ordering only, for the stream's
    ``_final_ordering``, so everything queued on the fold point after that
    wait is ordered after all the closed stream's work (its failures are not
    carried).  A long-lived tensor's records of closed streams (the streams
    it joined, for its stream-ordered free; the reads since its last write)
    are folded into one record of the fold point (``DeviceTensor._add_stream``,
    ``_hazards.fold_readers``): however many short-lived streams used it, it
    keeps a bounded number.  Waiting for the fold point's tail over-waits
    (for every stream closed so far), never under-waits.  Nothing else is
    ever queued on it.
    """
    fold = worker._fold
    if fold is None:
        fold = worker._fold = Stream._create(worker, 0, False)
        if worker._hazards is not None:
            worker._hazards.set_fold(fold)
    return fold


def sync_point(worker) -> _SyncPoint:
    """A worker sync point, behind a marker on each open stream of `worker` that may carry a failure (lock held).

    The markers carry the failures ``w.sync()`` reports (:class:`_SyncPoint`):
    each open stream's, as its own sync would raise it.  Only streams given
    work since the last worker sync (``q.used``) or whose marker of an earlier
    one has not completed healthy (``q.syncing``) get one: any other open
    stream carries no failure, so a sync costs the streams used since, not
    every open stream.  Closed streams get
    none (nothing can be queued there to fail any more; waits on their last
    event carry their failure), nor does the fold point (it orders only),
    nor any stream of a lost device (the point reports the loss).  The
    caller adds the point (``_wait.add_sync_point``) once they are queued,
    so it covers them.
    """
    point = _SyncPoint._make(worker, worker._default_stream, "a worker sync point")
    point._markers = []
    if lib.pto_device_status(worker._dev):
        return point
    fold = worker._fold
    q = worker._queue
    # Only the streams that can carry a failure this sync has not seen: those given work since the
    # last one, and those whose marker of an earlier one has not completed healthy (failed, so
    # maybe still carried; or not done).  An open stream of neither carries none.
    look = q.used
    q.used = {}
    look.update(q.syncing)
    streams = worker._streams
    syncing = q.syncing
    for sid in sorted(look):
        s = streams.get(sid)
        if s is None or s._closed or s is fold:
            syncing.pop(sid, None)
        else:
            marker = _SyncMarker._make(worker, s, f"stream {sid} sync point")
            t = marker._token = token(q, marker)
            if submit(q, s, lib.pto_stream_notify, (s._ptr, t), marker, F_LAST):
                marker._entered = True
            syncing[sid] = t
            point._markers.append(marker)
        if s is not None:
            s._used = False
    q.used.clear()  # what the markers just queued noted: no work of the user's
    return point


def _wait_foreign(q, stream: Stream, event: Event, t: int) -> None:
    """Queue a wait on another device's `event` (see :mod:`._peer`; lock held).

    Such an event is in its driver already (recorded or reserved), so no
    gate holds the wait; it still keeps its place behind work held in this
    stream's FIFO.  If the event's worker has closed by the time the wait
    reaches the driver, its work is over and its driver objects are gone:
    the wait becomes a plain marker.
    """
    def wait(sp, ev, tok):  # runs when the stream gets to it: at once, or in its FIFO turn
        if event._worker._alive():
            return lib.pto_stream_wait_event(sp, ev, tok)
        return lib.pto_stream_notify(sp, tok)

    submit(q, stream, wait, (stream._ptr, event._ptr, t), None, 0)


def accept(worker, stream) -> Stream:
    """Return `stream` if work for `worker` may be queued on it, else raise.

    Raises
    ------
    PtoArgumentError
        If it is not a Stream, or belongs to another worker.
    PtoClosedError
        If it is closed.
    """
    if type(stream) is not Stream:
        raise PtoArgumentError(f"stream must be a Stream or None, not {type(stream).__name__}")
    if stream._worker is not worker:
        raise PtoArgumentError("the stream belongs to another ChipWorker")
    if stream._closed:
        raise PtoClosedError(f"stream {stream._id} is closed")
    return stream


def task_default(worker) -> Stream:
    """`worker`'s task-local default stream: the innermost of its ``use_stream`` streams, else its own."""
    stack = stream_stack()
    if stack:
        for stream in reversed(stack):
            if stream._worker is worker:
                if stream._closed:  # closed inside the block: refused, as with stream=s
                    raise PtoClosedError(f"stream {stream._id} is closed (it is this task's "
                                         "default stream, set with use_stream)")
                return stream
    return worker._default_stream


def stream_for(worker, stream) -> Stream:
    """The stream a call on `worker` queues on: `stream` checked (:func:`accept`), or the task-local default."""
    return task_default(worker) if stream is None else accept(worker, stream)


def _wait_other_worker(stream: Stream, what) -> None:
    """``stream.wait(what)`` for an Event, Launch or Stream of another worker (see Stream.wait)."""
    other = what._worker
    other._check_open()
    if other.platform != stream._worker.platform:
        raise PtoNotSupported(f"Stream.wait(): the {type(what).__name__.lower()} is of a "
                              f"{other.platform!r} device and the stream of a "
                              f"{stream._worker.platform!r} one; a wait crosses devices of one "
                              "platform only")
    if isinstance(what, Launch):
        if what._done:
            return
        event = what.event  # recorded behind it, under its worker's lock
    elif isinstance(what, Stream):
        with other._lock:
            event = what._final if what._closed else what._record_locked()
        if event is None:
            return
    else:
        event = what
    with other._lock:
        enter(event)
    with stream._worker._lock:
        stream._wait_locked(event)
