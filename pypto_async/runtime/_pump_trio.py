"""The trio pump: a system task that waits on the completion fd.

One backend of :mod:`._pump`; the method set it implements is described there.
"""

from __future__ import annotations

import math

from ..errors import PtoInvalidStateError
from ._pump import _LoopPump

__all__ = ["TrioPump"]


class TrioPump(_LoopPump):
    """The pump of a worker opened under trio: a system task waiting on the fd."""

    flavour = "trio"
    waits_for_outcomes = False

    def __init__(self, worker):
        import trio

        super().__init__(worker)
        self._trio = trio
        self._token = trio.lowlevel.current_trio_token()
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
                # Look before each wait: a worker closed before this task first ran (or
                # while it ran _on_readable) has closed its fd, and trio registers the fd
                # with epoll before it checks for cancellation.
                while not self._closed:
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
        self.streak = 0
        waiters.append(task)
        task.custom_sleep_data = object()  # this wait, for a wake from another thread (wake)

        def abort(_raise_cancel):
            # Work already on the device cannot be withdrawn; only our waiter goes.
            task.custom_sleep_data = None
            try:
                waiters.remove(task)
            except ValueError:
                pass
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)

    def wake(self, task) -> None:
        if self.on_own_thread():
            task.custom_sleep_data = None
            self._trio.lowlevel.reschedule(task)
        else:  # a close or a blocking drive on another thread: only trio's thread may reschedule
            self._token.run_sync_soon(self._wake_later, task, task.custom_sleep_data)

    def _wake_later(self, task, wait) -> None:
        # On trio's thread, later: the task may have been cancelled meanwhile (its abort
        # ended that wait, and it may be in another one by now): wake only the same wait.
        if wait is not None and task.custom_sleep_data is wait:
            task.custom_sleep_data = None
            self._trio.lowlevel.reschedule(task)

    def _yield_once(self):
        if self.is_current():
            yield from self._trio.lowlevel.cancel_shielded_checkpoint().__await__()

    def _loop_runs(self) -> bool:
        return self.usable()

    def _run_soon_threadsafe(self, fn) -> None:
        self._token.run_sync_soon(fn)

    def _start(self, handoff) -> None:
        if handoff.claim():
            self._trio.lowlevel.spawn_system_task(handoff.run, name="pypto_async close() from a thread")

    async def wait_idle(self, timeout) -> bool:
        worker = self._worker
        if worker._idle():
            return True
        waiters = worker._idle_waiters
        with self._trio.move_on_after(timeout if timeout is not None else math.inf):
            await self._wait(waiters)
            return True
        return worker._idle()

    def _unwatch(self) -> None:
        try:
            # Wakes wait_readable with ClosedResourceError: trio must learn of it before
            # the fd is closed (the device closes right after).
            self._trio.lowlevel.notify_closing(self._fd)
        except RuntimeError:  # not inside this trio run any more
            pass
        self._cancel.cancel()

    def _unwatch_from_loop(self) -> None:
        # The fd may be closed by now: cancelling the pump task's wait is enough.
        self._cancel.cancel()
