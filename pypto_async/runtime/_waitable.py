"""The one way to block: what launches, events, stream markers and sync points share.

Every wait here, awaited or blocking, follows one pattern (trio's
``wait_task_rescheduled``): register a waiter in a list of the object, then
suspend; whoever finishes the object (``_finish``, on the pump's thread, the
worker's lock held) hands the lists to ``worker._release_waiters``, which
wakes every waiter in one pass.  An object has two lists: ``_waiters`` for
its completion (``_done``) and ``_entry_waiters`` for its entry into the
stream's ring (``_entered``; what ``await handle.submit(...)`` waits for).

Some facts the base rests on:

* :meth:`_Waitable._waiter_list` is the one place a waiter is registered
  (a task's future or trio task by ``_until``, a ``threading.Event`` by the
  worker's blocking wait on a foreign thread).
* :meth:`_Waitable._until` is the one loop every ``await`` here runs.  The
  registration is undone where the pump suspends (``pump.wait``): a cancelled
  asyncio task cancels its future, which the wake skips and long lists prune;
  trio's abort removes the task.  Cancelling withdraws the waiter and nothing
  else: work on the device cannot be withdrawn.
* :meth:`_Waitable.sync` is the one blocking wait: ``worker._block_until``
  drives the queue on the pump's thread and waits on a ``threading.Event``
  on any other.
* Every outcome that hands a command's error to the caller (``_outcome``,
  ``Launch.result`` / ``exception``, the asyncio fast path's futures) tells
  the driver through :func:`._complete.observe`: delivering a failure is what
  lets its stream run new work (the driver's rule, exec.c), never the drain
  that resolved the object.
* An await answered without suspending counts towards the pump's streak, so a
  loop of such awaits still gives the event loop a turn about every
  millisecond (the pump module's essay on producers).

The one exception is ``await launch`` under asyncio (``Launch.__await__``):
the task awaits a future that finishing the launch resolves to its outcome
(``Launch._owaiters``), with no generator of ours in between.  It is the
hottest wait there is, and thousands of tasks may wait so at once: one object
and one frame less each.
"""

from __future__ import annotations

__all__: list[str] = []


class _Waitable:
    """The base of everything a task or thread waits for: its state, its waiters, its waits.

    A subclass defines ``_outcome()`` (what waiting returns once done, or the
    error it raises) and a private constructor ``_make`` that sets every
    slot; the worker calls ``_finish()`` (lock held) when the object is done.
    """

    __slots__ = ("_worker", "_stream", "_name", "_done", "_exc", "_entered", "_waiters",
                 "_entry_waiters", "_retrieved", "__weakref__")

    def _outcome(self):  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    def __await__(self):
        """Suspend until done (not at all if it is); return the outcome."""
        return self._until(False)

    def _until(self, entry: bool):
        """The one await loop: suspend until done (with `entry`: until entered).

        Returns the outcome (with `entry`: the object itself).  Suspends only
        while the condition does not hold; an await answered at once is
        counted, and a long streak of them yields to the loop once.
        """
        pump = self._worker._pump
        if self._entered if entry else self._done:
            n = pump.streak + 1
            pump.streak = n
            if not n & 15:  # every _pump._CHECK_EVERY-th
                yield from pump.pause()
        else:
            while not (self._entered if entry else self._done):
                yield from pump.wait(self._waiter_list(entry))
        return self if entry else self._outcome()

    def _waiter_list(self, entry: bool) -> list:
        """The list a waiter for completion (`entry`: for entry) registers in; made on first use."""
        if entry:
            waiters = self._entry_waiters
            if waiters is None:
                waiters = self._entry_waiters = []
        else:
            waiters = self._waiters
            if waiters is None:
                waiters = self._waiters = []
        return waiters

    def sync(self, timeout: float | None = None):
        """Block this thread until it completed; return its outcome.

        The outcome is what waiting for completion returns: a launch's
        :meth:`~Launch.result`, None for an event.

        Parameters
        ----------
        timeout : float, optional
            Seconds to wait at most (``None`` or ``math.inf``: no limit).
            Waiting happens in short slices, so Ctrl-C stays prompt.

        Raises
        ------
        PtoTimeout
            If it did not complete in time (the work goes on: nothing is
            cancelled).
        PtoError
            A launch's error if it failed; for an event, the failure of the
            recorded work.
        """
        if not self._done:
            self._worker._block_until(self, False, timeout)
        return self._outcome()

    # -- called by the worker (lock held) -----------------------------------------

    def _finish(self) -> None:
        self._done = True
        self._entered = True
        if self._waiters or self._entry_waiters:
            self._worker._release_waiters(self)


class _Until:
    """``await _Until(obj, entry)`` inside a coroutine: ``obj._until(entry)``.

    (A generator flagged with ``types.coroutine`` could be awaited directly,
    but ``__await__`` may not return one.)
    """

    __slots__ = ("_obj", "_entry")

    def __init__(self, obj: _Waitable, entry: bool):
        self._obj = obj
        self._entry = entry

    def __await__(self):
        return self._obj._until(self._entry)
