"""Completion pumps: how a worker learns that device work finished.

Some facts the pumps rest on (see ``native/include/pto_driver.h``):

* Every command carries a token; when it finishes, the driver pushes a record
  (token, status, times) into the device's completion queue and makes an
  eventfd readable.  No driver thread ever runs Python.
* ``pto_cq_drain`` moves ready records out, oldest first, and resets the fd
  only once the queue is empty, so one wake-up can drain everything and no
  record is ever stranded behind a reset fd.

A pump's only job is to call ``worker._on_readable()`` (which drains records
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
``close()``
    Stop watching the fd.  Idempotent.

:class:`SyncPump` is the flavour of a worker in sync mode: it has no loop, so
awaiting raises, and blocking waits drive the queue themselves
(``ChipWorker._block_until``, with ``pto_cq_wait`` in short slices so Ctrl-C
stays prompt).
"""

from __future__ import annotations

import asyncio
import sys
import threading
from asyncio import _get_running_loop  # None outside a loop: no exception to catch per await

from .._driver import lib
from ..errors import PtoInvalidStateError

__all__ = ["SyncPump", "AsyncioPump", "TrioPump", "make_pump"]


class SyncPump:
    """The pump of a worker in sync mode: nothing runs in the background."""

    flavour = "sync"
    waits_for_outcomes = False

    def __init__(self, worker):
        self._worker = worker

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


class AsyncioPump:
    """The pump of a worker opened under asyncio (uvloop included): ``loop.add_reader``."""

    flavour = "asyncio"
    waits_for_outcomes = True  # Launch.__await__ uses wait_outcome

    def __init__(self, worker, loop: asyncio.AbstractEventLoop):
        self._worker = worker
        self._loop = loop
        self._fd = lib.pto_cq_fd(worker._dev)
        self._thread = threading.get_ident()
        self._closed = False
        loop.add_reader(self._fd, worker._on_readable)

    @property
    def loop(self):
        return self._loop

    def is_current(self) -> bool:
        """True if the running loop is this pump's loop (and it is open)."""
        try:
            return asyncio.get_running_loop() is self._loop and not self._closed
        except RuntimeError:
            return False

    def usable(self) -> bool:
        return not self._closed and not self._loop.is_closed()

    def can_serve_inline(self) -> bool:
        """Whether the caller may drain completions now (it runs inside the pump's loop).

        The launch path drains now and then for a coroutine that never suspends
        (``ChipWorker._launch_kernel``); outside the running loop draining is left
        to the loop and to blocking waits, as before.
        """
        return _get_running_loop() is self._loop and not self._closed

    def _wrong_loop(self):
        return PtoInvalidStateError(
            "this ChipWorker's completion pump runs on another event loop; "
            "open it in this one with `await worker.open()` or `async with`"
        )

    def wait_outcome(self, launch):
        """``await launch``: return the iterator of a future that Launch._finish resolves
        to the launch's result (or error).  Its waiters are kept in ``launch._owaiters``."""
        loop = self._loop
        if _get_running_loop() is not loop or self._closed:
            raise self._wrong_loop()
        fut = loop.create_future()
        waiters = launch._owaiters
        if waiters is None:
            launch._owaiters = fut
        elif type(waiters) is list:
            _prune(waiters)  # the futures of cancelled tasks, as in wait()
            waiters.append(fut)
        else:
            launch._owaiters = [waiters, fut]
        return fut.__await__()

    def wait(self, waiters):
        loop = self._loop
        if _get_running_loop() is not loop or self._closed:
            raise self._wrong_loop()
        _prune(waiters)
        fut = loop.create_future()
        waiters.append(fut)
        # The future's own iterator, not a generator of ours wrapping it: one object and
        # one frame less per waiting task (thousands of tasks may wait at once).  A
        # cancelled task cancels this future, which drops the waiter: wake() skips done
        # futures, and cancelled ones are pruned from long lists above.
        return fut.__await__()

    @staticmethod
    def wake(fut) -> None:
        if not fut.done():
            fut.set_result(None)

    async def wait_idle(self, timeout) -> bool:
        worker = self._worker
        if worker._idle():
            return True
        fut = self._loop.create_future()
        worker._idle_waiters.append(fut)
        try:
            await asyncio.wait_for(fut, timeout)
            return True
        except (asyncio.TimeoutError, TimeoutError):
            return False
        finally:
            try:
                worker._idle_waiters.remove(fut)
            except ValueError:
                pass

    def call_soon_threadsafe(self, fn) -> None:
        try:
            self._loop.call_soon_threadsafe(fn)
        except RuntimeError:  # loop closed: the owner picks it up later
            pass

    def on_own_thread(self) -> bool:
        return threading.get_ident() == self._thread

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        loop = self._loop
        if loop.is_closed():
            return
        if threading.get_ident() != self._thread:
            try:
                loop.call_soon_threadsafe(loop.remove_reader, self._fd)
            except RuntimeError:
                pass
            return
        loop.remove_reader(self._fd)


class TrioPump:
    """The pump of a worker opened under trio: a system task waiting on the fd."""

    flavour = "trio"
    waits_for_outcomes = False

    def __init__(self, worker):
        import trio

        self._trio = trio
        self._worker = worker
        self._fd = lib.pto_cq_fd(worker._dev)
        self._thread = threading.get_ident()
        self._token = trio.lowlevel.current_trio_token()
        self._closed = False
        self._cancel = trio.CancelScope()
        self._finished = trio.Event()
        trio.lowlevel.spawn_system_task(self._run, name=f"pypto_async pump (worker {id(worker):#x})")

    def is_current(self) -> bool:
        try:
            return self._trio.lowlevel.current_trio_token() is self._token and not self._closed
        except RuntimeError:
            return False

    def can_serve_inline(self) -> bool:
        """Whether the caller may drain completions now (it runs inside this trio run)."""
        return self.is_current()

    def usable(self) -> bool:
        return not self._closed and not self._finished.is_set()

    async def _run(self) -> None:
        trio = self._trio
        try:
            with self._cancel:
                while True:
                    try:
                        await trio.lowlevel.wait_readable(self._fd)
                    except trio.ClosedResourceError:
                        return
                    self._worker._on_readable()
        finally:
            self._finished.set()

    def wait(self, waiters):
        return (yield from self._wait(waiters).__await__())

    async def _wait(self, waiters) -> None:
        trio = self._trio
        try:
            task = trio.lowlevel.current_task()
            ok = self._trio.lowlevel.current_trio_token() is self._token
        except RuntimeError:
            ok = False
        if not ok or self._closed:
            raise PtoInvalidStateError(
                "this ChipWorker's completion pump runs in another trio run (or event loop); "
                "open it in this one with `await worker.open()` or `async with`"
            )
        waiters.append(task)

        def abort(_raise_cancel):
            # Work already on the device cannot be withdrawn; only our waiter goes.
            try:
                waiters.remove(task)
            except ValueError:
                pass
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)

    def wake(self, task) -> None:
        self._trio.lowlevel.reschedule(task)

    async def wait_idle(self, timeout) -> bool:
        worker = self._worker
        if worker._idle():
            return True
        waiters = worker._idle_waiters
        with self._trio.move_on_after(timeout if timeout is not None else float("inf")):
            await self._wait(waiters)
            return True
        return worker._idle()

    def call_soon_threadsafe(self, fn) -> None:
        try:
            self._token.run_sync_soon(fn)
        except self._trio.RunFinishedError:
            pass

    def on_own_thread(self) -> bool:
        return threading.get_ident() == self._thread

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if threading.get_ident() == self._thread:
            try:
                self._trio.lowlevel.notify_closing(self._fd)
            except RuntimeError:  # not inside this trio run any more
                pass
            self._cancel.cancel()
        else:
            try:
                self._token.run_sync_soon(self._cancel.cancel)
            except self._trio.RunFinishedError:
                pass


def make_pump(worker):
    """Return the pump for the async library running in this task.

    asyncio (uvloop included) is recognised by its running loop, trio by its
    current task; no third-party detection library is needed.

    Raises
    ------
    PtoInvalidStateError
        If no supported async library is running.
    """
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    if loop is not None:
        return AsyncioPump(worker, loop)
    trio = sys.modules.get("trio")
    if trio is not None:
        try:
            trio.lowlevel.current_task()
        except RuntimeError:
            pass
        else:
            return TrioPump(worker)
    raise PtoInvalidStateError(
        "no supported event loop is running (asyncio, uvloop or trio); "
        "open the worker with `with` for sync mode instead"
    )
