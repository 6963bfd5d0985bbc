"""Waiting: worker-wide sync points and the blocking waits of threads.

An awaiting task never comes here: it registers a waiter and suspends in
its pump (:mod:`._pump`), and the completion service wakes it.  A thread
that blocks instead (sync mode, or a ``.sync()`` call) comes here:

* on the thread that owns the queue's waiters (sync mode's only thread, or
  an event loop's, which then blocks), :func:`drive` runs the completion
  service itself, sleeping in ``pto_cq_wait`` between rounds;
* on any other thread, :func:`block_until` registers a ``threading.Event``
  as a waiter, and the owner's pump wakes it like a task.

Either way it waits in slices of ``_SLICE_US``, so Ctrl-C stays prompt.
A Ctrl-C is not lost to a finalizer either: the main thread runs the SIGINT
handler at its next check, which may be the start of a ``__del__`` or a
weakref callback that a reference drop runs inside the wait, and CPython
reports an exception raised there through ``sys.unraisablehook`` and drops
it.  While a wait blocks the main thread, :class:`_KeptInterrupt` is that hook:
it keeps such a KeyboardInterrupt, and the wait's next step raises it.
Every blocking wait ends in :func:`block_until`, so that is where a wait
that blocks an event loop running on the same thread is noticed and warned
about (once per worker and kind).
A sync point (:func:`add_sync_point`) is a Launch with no command: it
completes once every token handed out before it has left the token map.
"""

from __future__ import annotations

import sys
import threading
import time
import warnings

from .._driver import lib
from .._user_frame import user_stacklevel
from ..errors import PtoClosedError, PtoTimeout
from ._checks import check_timeout
from ._complete import service
from ._pump import running_loop_flavour
from ._queue import CommandQueue

__all__ = ["add_sync_point", "drive", "block_until"]

_SLICE_US = 50_000  # blocking waits wake this often, so Ctrl-C stays prompt


def add_sync_point(q: CommandQueue, point) -> None:
    """Make the Launch `point` complete once every command queued so far has (lock held).

    It has no command of its own: it waits for the token map to drain up to
    the next token, on every stream at once, closed and collected streams
    included.
    """
    if q.next_token <= q.oldest_in_flight():
        point._ok(0, 0)  # nothing in flight: done (no waiter to wake yet, on any thread)
    else:
        q.sync_points.append((q.next_token, point))


def drive(q: CommandQueue, predicate, timeout: float | None) -> bool:
    """Run the completion service on this thread until `predicate()`; False on timeout."""
    return _keeping_interrupts(_drive, q, predicate, timeout)


def _drive(q: CommandQueue, predicate, timeout: float | None, hook) -> bool:
    deadline = None if timeout is None else time.monotonic() + timeout
    lock = q.lock
    while True:
        with lock:
            if not q.alive():
                return predicate()
            service(q)
            dev = q.dev
        if predicate():
            return True
        if hook.dropped is not None:
            hook.raise_dropped()
        wait_us = _SLICE_US
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            wait_us = min(wait_us, int(left * 1e6) + 1)
        lib.pto_cq_wait(dev, wait_us)


def _keeping_interrupts(wait, *args) -> bool:
    """``wait(*args, hook)`` with :class:`_KeptInterrupt` as the hook: a KeyboardInterrupt a finalizer dropped ends it."""
    hook = _KeptInterrupt.install()
    try:
        finished = wait(*args, hook)
    finally:
        hook.uninstall()
    if hook.dropped is not None:  # (dropped in the step that ended the wait)
        hook.raise_dropped()
    return finished


class _KeptInterrupt:
    """``sys.unraisablehook`` while a wait blocks the main thread: it keeps a KeyboardInterrupt a finalizer dropped.

    The wait raises it (:meth:`raise_dropped`) at its next step; any other
    report goes to the hook this one replaced.  Waits inside a wait share
    one; the last to end puts the previous hook back, unless someone
    replaced this one meanwhile.  On another thread :meth:`install` returns
    :data:`_OFF`, which keeps nothing (no signal handler runs there).
    """

    __slots__ = ("prev", "depth", "dropped")

    def __init__(self, prev):
        self.prev = prev
        self.depth = 1
        self.dropped = None

    @classmethod
    def install(cls):
        if threading.get_ident() != threading.main_thread().ident:  # (the one thread that runs signal handlers)
            return _OFF
        prev = sys.unraisablehook
        if type(prev) is cls:
            prev.depth += 1
            return prev
        hook = sys.unraisablehook = cls(prev)
        return hook

    def uninstall(self) -> None:
        self.depth -= 1
        if not self.depth and sys.unraisablehook is self:
            sys.unraisablehook = self.prev

    def raise_dropped(self) -> None:
        exc, self.dropped = self.dropped, None
        raise exc

    def __call__(self, unraisable) -> None:
        exc = unraisable.exc_value
        if isinstance(exc, KeyboardInterrupt) and threading.get_ident() == threading.main_thread().ident:
            self.dropped = exc
            return
        self.prev(unraisable)


class _Off:
    __slots__ = ()
    dropped = None

    def uninstall(self) -> None:
        pass


_OFF = _Off()


def block_until(q: CommandQueue, obj, entry: bool, timeout: float | None) -> None:
    """Block until `obj` entered the ring (entry) or completed; PtoTimeout past `timeout`.

    Every blocking wait ends here (sync-mode launches and copies, and the
    ``sync()`` methods), so this is where a wait that blocks an event loop
    running on this thread is noticed and warned about.
    """
    timeout = check_timeout(timeout, f"waiting for {obj._name}")
    q.check_open()
    if len(q.loop_warned) < 2 and running_loop_flavour() is not None:
        _warn_loop_blocked(q)
    if entry:
        def predicate():
            return obj._entered
    else:
        def predicate():
            return obj._done
    if q.pump.on_own_thread():
        finished = drive(q, predicate, timeout)
    else:
        finished = _block_foreign(q, obj, entry, predicate, timeout)
    if not finished:
        what = "enter its stream's ring" if entry else "complete"
        raise PtoTimeout(f"{obj._name} did not {what} within {timeout} s "
                         f"({len(q.pending)} command(s) in flight on the worker)")
    if not q.alive():
        try:
            q.check_open()  # a worker seen in a forked child refuses what it finished
        except PtoClosedError:  # closed meanwhile: its teardown settled `obj`
            pass


def _warn_loop_blocked(q: CommandQueue) -> None:
    """Warn, once per worker and kind, that a blocking wait holds this thread's event loop."""
    async_mode = q.pump.flavour != "sync"
    kind = "wait" if async_mode else "sync mode"
    if kind in q.loop_warned:
        return
    q.loop_warned.add(kind)
    loop = running_loop_flavour()
    if async_mode:
        text = (f"a blocking wait (.sync()) blocks the {loop} event loop running on this thread "
                "until the device finished: await the launch, stream or event instead "
                "(or `await worker.wait()`)")
    else:
        text = (f"this ChipWorker is in sync mode, so its launches and waits block the {loop} "
                "event loop running on this thread: open it with `async with ChipWorker(...)` "
                "or `await worker.open()`, then await its launches")
    warnings.warn(text, RuntimeWarning, stacklevel=user_stacklevel())


def _block_foreign(q: CommandQueue, obj, entry: bool, predicate, timeout) -> bool:
    # Another thread than the event loop's: the pump resolves obj; wait on an Event.
    return _keeping_interrupts(_wait_event, q, obj, entry, predicate, timeout)


def _wait_event(q: CommandQueue, obj, entry: bool, predicate, timeout, hook) -> bool:
    event = threading.Event()
    with q.lock:
        obj._waiter_list(entry).append(event)
    deadline = None if timeout is None else time.monotonic() + timeout
    while not predicate():
        if hook.dropped is not None:
            hook.raise_dropped()
        if not q.alive():
            return predicate()
        wait_s = _SLICE_US / 1e6
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            wait_s = min(wait_s, left)
        event.wait(wait_s)
    return True
