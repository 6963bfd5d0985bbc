"""The asyncio pump (uvloop included): ``loop.add_reader`` on the completion fd.

One backend of :mod:`._pump`; the method set it implements is described there.
"""

from __future__ import annotations

import asyncio
from asyncio import _get_running_loop  # None outside a loop: no exception to catch per await

from .._driver import lib
from ..errors import PtoInvalidStateError
from ._complete import on_readable, reset_kept_fd, serve_ready
from ._pump import _LoopPump, _prune

__all__ = ["AsyncioPump"]

_cq_ready = lib.pto_cq_ready


def _at_once(value):
    """The iterator of an await answered at once: it returns `value` without suspending."""
    return value
    yield  # (a generator)


class AsyncioPump(_LoopPump):
    """The pump of a worker opened under asyncio (uvloop included): ``loop.add_reader``."""

    flavour = "asyncio"
    waits_for_outcomes = True  # Launch.__await__ uses wait_outcome

    def __init__(self, worker, loop: asyncio.AbstractEventLoop):
        super().__init__(worker)
        self._dev = worker._dev
        self._loop = loop
        loop.add_reader(self._fd, on_readable, worker._queue)

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
        (``_dispatch.launch_kernel``); outside the running loop draining is left
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
        q = self._worker._queue
        if _cq_ready(self._dev):
            # Records wait already (a host thread ran short work itself, RunConfig.host_first):
            # resolve them now rather than after a turn of the loop through the fd (whose
            # reset is left to that turn: serve_ready).
            serve_ready(q)
            if launch._done:
                if launch._exc is None:
                    # _until(False) written out for its commonest answer, a launch that succeeded:
                    # counted in the streak, and unless this await is the streak's look at the
                    # clock, its outputs at once.
                    n = self.streak + 1
                    if n & 15:  # (not every _pump._CHECK_EVERY-th)
                        self.streak = n
                        return _at_once(launch._out)
                return launch._until(False)
        # About to suspend: reset the fd if in-line drains left it signalled, so the loop wakes
        # for this launch's record, not at once for nothing.
        if q.fd_kept:  # (reset_kept_fd's test, without its call when no drain kept the fd)
            reset_kept_fd(q)
            if launch._done:
                return launch._until(False)
        self.streak = 0
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
        self.streak = 0
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

    @staticmethod
    def _yield_once():
        yield  # a bare yield: the task runs again after one turn of the loop

    def _loop_runs(self) -> bool:
        return not self._closed and self._loop.is_running()

    def _run_soon_threadsafe(self, fn) -> None:
        self._loop.call_soon_threadsafe(fn)

    def _start(self, handoff) -> None:
        if handoff.claim():
            handoff.task = self._loop.create_task(handoff.run())

    async def wait_idle(self, timeout) -> bool:
        worker = self._worker
        if worker._queue.idle():
            return True
        fut = self._loop.create_future()
        worker._queue.idle_waiters.append(fut)
        try:
            await (fut if timeout is None else asyncio.wait_for(fut, timeout))
            return True
        except (asyncio.TimeoutError, TimeoutError):
            return False
        finally:
            try:
                worker._queue.idle_waiters.remove(fut)
            except ValueError:
                pass

    def _unwatch(self) -> None:
        loop = self._loop
        if not loop.is_closed():
            loop.remove_reader(self._fd)

    _unwatch_from_loop = _unwatch
