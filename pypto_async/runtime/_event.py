"""Event: a point on a stream's timeline that other streams and the host can wait for."""

from __future__ import annotations

from .._driver import check, ffi, lib
from ..errors import PtoArgumentError, PtoInvalidStateError, PtoTryAgain
from ._complete import raise_carried
from ._waitable import _Waitable

__all__ = ["Event", "enter"]


class Event(_Waitable):
    """A snapshot of the work queued on a stream, recorded by :meth:`Stream.record`.

    The event completes once everything queued on its stream before it has
    completed.  Other streams wait for it on the device
    (:meth:`Stream.wait`), the host waits with ``await event`` or
    :meth:`sync`, and two completed events give the device time between them
    (:meth:`elapsed_ms`).  The constructor refuses; use ``stream.record()``.

    If the recorded work failed, waiting for the event raises that failure
    (a :class:`~pypto_async.errors.PtoDependencyError` whose ``__cause__`` is
    the first failure, when known), and raising it delivers the failure:
    work queued on the stream from then on runs.  ``await stream`` and
    :meth:`Stream.sync` raise the same as an event recorded at that point.
    """

    __slots__ = ("_ptr", "_time_ns", "_clock")

    def __init__(self, *args, **kwargs):
        raise TypeError("Event cannot be constructed directly; use Stream.record()")

    @classmethod
    def _make(cls, worker, stream, recorded: bool) -> Event:
        out = ffi.new("pto_event **")
        check(lib.pto_event_create(worker._dev, out), "pto_event_create")
        event = cls.__new__(cls)
        event._worker = worker
        event._stream = stream
        event._ptr = out[0]
        event._name = f"event on stream {stream.id}"
        event._done = not recorded  # an event never recorded is complete
        event._exc = None
        event._entered = not recorded
        event._waiters = None
        event._entry_waiters = None
        event._retrieved = False
        event._time_ns = None  # None: the driver knows its completion time (see _completed_ns)
        event._clock = None  # what waiting for its record orders after (_hazards.mark)
        return event

    @classmethod
    def _of_finished(cls, worker, launch) -> Event:
        """The complete Event of a launch that has finished: timed by the launch's own record."""
        event = cls._make(worker, launch._stream, False)
        # A failed launch has no end time here (0): its failure record carries none.
        event._time_ns = launch._t1 if launch._exc is None else 0
        return event

    # -- waiting (``await event`` and sync() are _Waitable's) ----------------------

    _outcome = raise_carried  # the failure its stream carries at the record, observed (as ``await stream``)

    def query(self) -> bool:
        """Return True if the recorded work has completed, successfully or not.

        Never blocks and never raises for a failure of the recorded work;
        await the event or call :meth:`sync` to see it.
        """
        if self._done:
            return True
        if not self._entered:
            return False
        self._worker._check_open()
        return lib.pto_event_query(self._ptr) != 0

    def elapsed_ms(self, other: Event) -> float:
        """Return the device time in milliseconds from this event's completion to `other`'s.

        The event of a launch that had finished when you read
        :attr:`Launch.event` completed when the launch did: its time is the
        launch's end on the device.  Device time is the device model's
        (``RunConfig(timing="model")``, the default: what the profile's chip
        would take, docs/device_model.md), or the host's wall clock with
        ``timing="host"``.

        Raises
        ------
        PtoArgumentError
            If `other` is not an Event.
        PtoTryAgain
            If either event has not completed yet.
        PtoInvalidStateError
            If the events belong to different workers, or one is the event of
            a launch that failed before you read :attr:`Launch.event` (it
            has no device time).
        """
        if not isinstance(other, Event):
            raise PtoArgumentError(f"elapsed_ms(other): other must be an Event, not {type(other).__name__}")
        if other._worker is not self._worker:
            raise PtoInvalidStateError("the events belong to different workers")
        self._worker._check_open()
        start = self._completed_ns()
        return (other._completed_ns() - start) / 1e6

    def _completed_ns(self) -> int:
        """The device clock at the event's completion, in ns, for elapsed_ms."""
        t = self._time_ns
        if t is None:
            if not self._entered:
                raise PtoTryAgain("elapsed_ms(): an event has not been recorded on the device yet")
            t = lib.pto_event_timestamp_ns(self._ptr)  # the same clock as completion records
            if not t:
                raise PtoTryAgain("elapsed_ms(): an event has not completed yet")
        elif not t:
            raise PtoInvalidStateError("elapsed_ms(): the event of a launch that failed has no device time")
        return t

    @property
    def stream(self):
        """The :class:`Stream` the event was recorded on."""
        return self._stream

    def __del__(self):
        # Nothing references the event any more: no queued record or wait of
        # ours (the token map and stream FIFOs hold it until the driver has
        # them), so its driver object can go.  Never raise from a finalizer.
        try:
            ptr = self._ptr
            self._ptr = None
            if ptr is not None and self._worker._alive():
                lib.pto_event_destroy(ptr)
        except Exception:
            pass

    def __repr__(self) -> str:
        state = "done" if self._done else ("recorded" if self._entered else "waiting to be recorded")
        return f"<Event on stream {self._stream.id} {state}>"

    # -- called by the worker (lock held) -----------------------------------------

    def _ok(self, start_ns: int, end_ns: int) -> None:
        self._finish()

    def _fail(self, exc) -> None:
        if self._exc is None:
            self._exc = exc
        self._finish()


def enter(event: Event) -> None:
    """Make `event` count as entered for waits of any device (its worker's lock held).

    An event whose record still waits in its stream's host FIFO is reserved
    in the driver: waits queued from now on wait for that record.
    """
    if not event._entered:
        check(lib.pto_event_reserve(event._ptr), "pto_event_reserve")
        event._entered = True
