"""Completion pumps: how a worker learns that device work finished.

Some facts the pumps rest on (see ``native/include/pto_driver.h``):

* Every command carries a token; when it finishes, the driver pushes a record
  (token, status, times) into the device's completion queue and makes an
  eventfd readable.  No driver thread ever runs Python.
* ``pto_cq_drain`` moves ready records out, oldest first, and resets the fd
  only once the queue is empty, so one wake-up can drain everything and no
  record is ever stranded behind a reset fd.
* A drain in line on the pump's thread (``await launch`` finding its record
  ready: :func:`._complete.serve_ready`) uses ``pto_cq_drain_keep``, which
  never resets the fd: it stays readable, the records pushed meanwhile write
  nothing to it, and the pump's callback, at the loop's next look, drains and
  resets it.  A task awaiting launch after launch so costs no eventfd write
  and read per record, for at most one wake-up of the loop that finds nothing.
  ``q.fd_kept`` records that the fd was left so; only ``_complete._take``
  writes it, and a task about to suspend runs ``_complete.reset_kept_fd``
  first.  Either pump's callback (``on_readable``) drains with the reset, so
  the fd ends reset by the loop's next look under asyncio and trio alike;
  only the asyncio pump drains in line (trio's awaits suspend in ``wait``).

A pump's only job is to call ``_complete.on_readable(worker._queue)`` (which drains records
in batches, resolves their futures, and moves stream backlogs on) on the thread
that owns the worker's waiters, whenever the fd is readable, and to suspend
awaiting tasks until they are woken.  Every flavour has the same methods:

``wait(waiters)``
    A generator for ``__await__``: register the current task in the list
    `waiters`, suspend until woken; on cancellation remove the waiter (the
    device work is not withdrawn) and re-raise.
``wake(waiter)``
    Wake one waiter registered by ``wait``.  Called on the pump's thread.
``wait_idle(timeout)``
    Coroutine: suspend until the worker has nothing in flight; False on timeout.
``call_soon_threadsafe(fn)``
    Run `fn` soon on the pump's thread (used for frees requested by the
    garbage collector on another thread).
``on_own_thread()``
    Whether the caller runs on the pump's thread.
``turn_due(weight)``
    Count `weight` more awaits (or launches) answered without suspending;
    True, once the task has gone ``_SLICE_NS`` or ``_YIELD_EVERY`` of them
    without suspending, when the caller is to yield (the count starts over).
    ``wait`` and ``wait_outcome`` reset the count.
``pause()``
    A generator: yield to the event loop if ``turn_due(_CHECK_EVERY)``; what
    every ``_CHECK_EVERY``-th await of a finished launch runs.
``give_turn()``
    A generator that yields to the event loop once.
``close_on_loop(timeout)``
    Called by ``close()`` on another thread: run ``aclose(timeout)`` on the
    pump's thread and block until it finished; False if the loop no longer
    runs (the caller then closes on its own thread).
``close()``
    Stop watching the fd.  Idempotent.

Some facts about producers that never suspend: a coroutine whose every
``await`` is answered at once (``await handle.submit(...)`` while the ring has
room, ``await launch`` of finished launches) never gives the event loop a
turn, however long it runs; neither asyncio nor trio preempts it.  So such
awaits are counted, and past a millisecond (or 1024 of them) without a
suspension one await yields: a bare ``yield`` under asyncio (what
``asyncio.sleep(0)`` does), ``cancel_shielded_checkpoint`` under trio (a
schedule point that adds no cancellation point).  The count costs the
hottest path nothing: a launch from ``submit()`` is counted by the launch
path where it already drains completions every 64 tokens, which marks the
launch whose ``await`` is to yield; awaits of finished launches count one by
one and look at the clock every 16th.  A task that suspends pays one store.

:class:`SyncPump` is the flavour of a worker in sync mode: it has no loop, so
awaiting raises, and blocking waits drive the queue themselves
(``ChipWorker._block_until``, with ``pto_cq_wait`` in short slices so Ctrl-C
stays prompt).
The loop flavours share :class:`_LoopPump` (below) and differ in a few
methods, one backend per file, as trio keeps one I/O backend per file:
:mod:`._pump_asyncio` (asyncio and uvloop) and :mod:`._pump_trio`.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from asyncio import _get_running_loop  # None outside a loop: no exception to catch per await

from .._driver import lib
from ..errors import PtoInvalidStateError

__all__ = ["SyncPump", "running_loop_flavour"]

_CHECK_EVERY = 16  # awaits of finished launches between two looks at the clock (a power of 2)
_SLICE_NS = 1_000_000  # at most this long without suspending, then one await yields
_YIELD_EVERY = 1024  # ... or after this many, whatever the clock says (a bound tests can count on)
_HANDOFF_SLICE_S = 0.05  # close_on_loop looks this often whether the loop still runs
_clock = time.perf_counter_ns


def running_loop_flavour() -> str | None:
    """``"asyncio"`` or ``"trio"`` if an event loop runs on this thread, else None.

    Cheap for asyncio (one C call); trio is asked only once it is imported.
    """
    if _get_running_loop() is not None:
        return "asyncio"
    trio = sys.modules.get("trio")
    if trio is not None and trio.lowlevel.in_trio_run():
        return "trio"
    return None


class SyncPump:
    """The pump of a worker in sync mode: nothing runs in the background."""

    flavour = "sync"
    waits_for_outcomes = False

    def __init__(self, worker):
        self._worker = worker
        self.streak = 0

    def turn_due(self, weight: int) -> bool:
        return False  # nothing to yield to: a sync-mode worker's launches blocked already

    def pause(self):
        return iter(())

    give_turn = pause

    def close_on_loop(self, timeout) -> bool:
        return False

    def can_serve_inline(self) -> bool:
        # Sync mode drains in blocking waits only: failures are observed where the host waits.
        return False

    def wait(self, waiters):
        raise PtoInvalidStateError(
            "this ChipWorker is in sync mode (opened with `with` or without a context manager): "
            "use .sync(), or open it with `async with` / `await worker.open()` to await"
        )

    def wake(self, waiter) -> None:  # pragma: no cover - sync mode registers no waiters
        pass

    async def wait_idle(self, timeout):  # pragma: no cover - never awaited in sync mode
        raise PtoInvalidStateError("a sync-mode worker has no event loop")

    def call_soon_threadsafe(self, fn) -> None:
        # Sync mode: the owning thread picks deferred work up at its next call.
        pass

    def on_own_thread(self) -> bool:
        return True

    def close(self) -> None:
        pass


_PRUNE_FROM = 64


def _prune(waiters: list) -> None:
    """Drop the cancelled futures from `waiters` when its length reaches 64, 128, 256, ...

    Called before each append: a list that only ever grows by cancelled waits
    is swept at each doubling, so the sweeps cost O(1) per append.
    """
    n = len(waiters)
    if n >= _PRUNE_FROM and not n & (n - 1):
        waiters[:] = [w for w in waiters if type(w) is not asyncio.Future or not w.cancelled()]


class _LoopPump:
    """What the asyncio and trio pumps share: their state, the thread hand-offs, the close.

    One method set over two loops, as trio's epoll and kqueue backends share
    theirs: the fd watched, the thread that owns the waiters, the
    no-suspension streak, running work on that thread from another, and the
    close choreography (on the pump's thread, stop watching at once; from
    another, ask the loop to).  A subclass calls ``__init__`` and defines
    what differs between the loops:

    ``_yield_once()``
        A generator that yields to the loop once.
    ``_loop_runs()``
        Whether the loop still runs this pump (it may take a hand-off).
    ``_run_soon_threadsafe(fn)``
        Ask the loop to run `fn` on its thread; raises RuntimeError (trio's
        RunFinishedError is one) if the loop is gone.
    ``_unwatch()``, ``_unwatch_from_loop()``
        Stop watching the fd: on the pump's thread (the fd may be closed
        right after), and as run by the loop for a close on another thread.
    ``_start(handoff)``
        On the loop's thread: start a close handed over by ``close_on_loop``.
    """

    streak = 0  # awaits answered without suspending since the last suspension
    _streak_t0 = 0

    def __init__(self, worker):
        self._worker = worker
        self._fd = lib.pto_cq_fd(worker._dev)
        self._thread = threading.get_ident()  # the thread that owns the waiters
        self._closed = False

    def on_own_thread(self) -> bool:
        return threading.get_ident() == self._thread

    def call_soon_threadsafe(self, fn) -> None:
        try:
            self._run_soon_threadsafe(fn)
        except RuntimeError:  # the loop is gone: the owner picks the work up later
            pass

    def close(self) -> None:
        """Stop watching the fd (idempotent); from another thread, ask the loop to."""
        if self._closed:
            return
        self._closed = True
        if self.on_own_thread():
            self._unwatch()
        else:
            self.call_soon_threadsafe(self._unwatch_from_loop)

    def turn_due(self, weight: int) -> bool:
        """Count `weight` awaits answered without suspending; True if one is to yield now."""
        n = self.streak
        if not n:
            self._streak_t0 = _clock()  # the streak's first look at the clock
        n += weight
        if n >= _YIELD_EVERY or (n > weight and _clock() - self._streak_t0 >= _SLICE_NS):
            self.streak = 0
            return True
        self.streak = n
        return False

    def pause(self):
        """Yield to the loop if the task went too long without suspending (see the module doc).

        What every ``_CHECK_EVERY``-th await answered at once runs, the streak
        counted already (``_Waitable._until``).  A streak such awaits began
        starts its clock at its first look; one the launch path began started
        it in ``turn_due``.  (Through ``turn_due`` the clock of an await's
        streak was never started: past the first slice every look yielded,
        one turn of the loop per 16 awaits.)
        """
        n = self.streak
        if n == _CHECK_EVERY:
            self._streak_t0 = _clock()  # the streak's first look at the clock
        elif n >= _YIELD_EVERY or _clock() - self._streak_t0 >= _SLICE_NS:
            self.streak = 0
            yield from self._yield_once()

    def give_turn(self):
        """Yield to the loop once."""
        return self._yield_once()

    def close_on_loop(self, timeout) -> bool:
        """Run ``worker.aclose(timeout)`` on this pump's thread; block until it finished.

        Completions resolve the loop's futures and wake its tasks, which only
        the loop's thread may do.  Returns False, having done nothing, if the
        loop no longer runs, or does not start the close within `timeout`
        (it is busy or blocked); the caller then closes on its own thread.
        Raises what ``aclose`` raised, cancellation aside.
        """
        if not self._loop_runs():
            return False
        handoff = _CloseHandoff(self._worker, timeout)
        try:
            self._run_soon_threadsafe(lambda: self._start(handoff))
        except RuntimeError:  # the loop closed or the run finished (trio's error is one)
            return False
        return handoff.wait(self._loop_runs)


class _CloseHandoff:
    """A close() handed from a foreign thread to the pump's thread (see close_on_loop)."""

    def __init__(self, worker, timeout):
        self._worker = worker
        self._timeout = timeout
        self._lock = threading.Lock()
        self._state = "queued"  # -> "started" on the loop's thread, or "abandoned" by the caller
        self._done = threading.Event()
        self._error: BaseException | None = None
        self.task = None  # asyncio keeps only weak references to tasks

    def claim(self) -> bool:
        """On the loop's thread: True if the close is to start now (the caller still waits)."""
        with self._lock:
            if self._state != "queued":
                return False
            self._state = "started"
            return True

    async def run(self) -> None:
        try:
            await self._worker.aclose(timeout=self._timeout)
        except Exception as exc:  # noqa: BLE001 - handed to the thread that called close()
            self._error = exc
        finally:
            self._done.set()

    def wait(self, loop_runs) -> bool:
        deadline = None if self._timeout is None else time.monotonic() + self._timeout
        while not self._done.wait(_HANDOFF_SLICE_S):
            with self._lock:
                if self._state == "queued" and (
                        not loop_runs() or (deadline is not None and time.monotonic() > deadline)):
                    self._state = "abandoned"
                    return False
                if self._state == "started" and not loop_runs():
                    return False  # the loop stopped under the close: finish it here
        if self._error is not None:
            raise self._error
        return True
