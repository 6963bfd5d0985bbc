"""A worker's life: its live registry, the switch to async mode, and closing.

``ChipWorker.open``, ``close``, ``aclose`` and its finalizer come here.  Some
facts the order of closing rests on:

* Driver threads write into host arrays until their commands complete, and
  the arrays live as long as the Launch that holds them.  So a worker must
  not let its launches go before its device is closed, and every worker
  still open at interpreter exit is closed first (:func:`_close_live_workers`).
* Closing the device cancels what has not started and waits for what runs
  on an engine; it cannot fail.  Only after it may the queue fail what is
  left in its token map (:func:`~._complete.fail_pending`) and the launches
  let go of their host arrays: a copy still reading an array whose last
  reference went with its launch would read freed memory.  So whatever
  cuts a close short (Ctrl-C, an error, a cancelled ``aclose``), the
  teardown still runs, in that order.
* Completions resolve an event loop's futures and wake its tasks, which only
  the loop's thread may do: a ``close()`` from another thread hands the
  closing to the loop (``close_on_loop``, :mod:`._pump`).
* A forked child has none of the driver's threads: a worker it inherited is
  marked ``FORKED`` (:mod:`._state`) and is never closed there; its memory
  belongs to the parent's device.

The functions take the worker; they use its parts (queue, memory, pump,
tracing) through their own interfaces.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import sys
import warnings
import weakref

from .._driver import lib
from ..errors import PtoCanceledError, PtoInvalidStateError
from ._checks import check_timeout
from ._complete import drain, drop_queued, fail_pending
from ._pump_asyncio import AsyncioPump
from ._pump_trio import TrioPump
from ._state import CLOSED, FORKED, OPEN
from ._submit import flush
from ._wait import drive

__all__ = ["make_pump", "live", "switch_to_async", "close", "aclose", "finalize"]

_live_workers: weakref.WeakSet = weakref.WeakSet()


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


def _after_fork_in_child() -> None:
    for worker in list(_live_workers):
        if worker._state == OPEN:
            worker._state = FORKED


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


@atexit.register
def _close_live_workers() -> None:
    # Driver threads write into host arrays until their commands complete: finish (or
    # cancel) every worker's work before the interpreter frees those arrays.
    for worker in list(_live_workers):
        if worker._state == OPEN:
            try:
                worker.close(timeout=5.0)
            except Exception:
                pass


def live(worker) -> None:
    """Note `worker` as open in this process (for fork and exit)."""
    _live_workers.add(worker)


def switch_to_async(worker) -> None:
    """Give `worker` a pump in the running event loop (``ChipWorker.open``)."""
    worker._check_open()
    pump = worker._pump
    if worker._async:
        if pump.is_current():
            return
        if pump.usable() and getattr(pump, "loop", None) is not None and pump.loop.is_running():
            raise PtoInvalidStateError("this ChipWorker's completion pump runs in another live event loop")
    q = worker._queue
    with q.lock:
        new = make_pump(worker)
        pump.close()
        worker._pump = q.pump = new
        worker._async = True
        drain(q)
        if q.backlog:
            flush(q)


def close(worker, timeout) -> None:
    """``ChipWorker.close``: finish (or past `timeout`, drop) queued work, then close the device."""
    timeout = check_timeout(timeout, "ChipWorker.close")
    if worker._state == CLOSED:
        return
    if worker._state == FORKED:
        worker._state = CLOSED
        worker._dev = worker._queue.dev = None
        return
    if worker._async and not worker._pump.on_own_thread() and worker._pump.close_on_loop(timeout):
        return
    q = worker._queue
    try:
        close_graphs(worker)
        forgotten = worker._memory.free_forgotten()
        if not drive(q, q.idle, timeout):
            _drop_queued(worker, f"ChipWorker.close(): queued work did not finish within {timeout} s")
        worker._tracing.close()
    finally:
        _teardown(worker)
    _warn_forgotten(forgotten)


async def aclose(worker, timeout) -> None:
    """``ChipWorker.aclose``: :func:`close`, suspending while queued work finishes."""
    timeout = check_timeout(timeout, "ChipWorker.aclose")
    if worker._state != OPEN or not worker._async or not worker._pump.is_current():
        close(worker, timeout)
        return
    close_graphs(worker)
    forgotten = worker._memory.free_forgotten()
    try:
        try:
            finished = await worker._pump.wait_idle(timeout)
        except BaseException:
            # Cancelled while draining: the caller wants out now, but host arrays in
            # flight must outlive the device's use of them.  Cancel, settle, re-raise.
            _drop_queued(worker, "ChipWorker.aclose() was cancelled", quiet_if_none=True)
            raise
        if not finished:
            _drop_queued(worker, f"ChipWorker.aclose(): queued work did not finish within {timeout} s")
        worker._tracing.close()
    finally:
        _teardown(worker)
    _warn_forgotten(forgotten)


def finalize(worker) -> None:
    """The worker's ``__del__``: close the device before the launches (and their host arrays) go.

    The last reference went without ``close()`` (a ``ResourceWarning`` says
    so), or ``close()`` was interrupted before the device closed.
    """
    try:
        if getattr(worker, "_dev", None) is None or worker._state == FORKED:
            return
        if worker._state == OPEN:
            warnings.warn(f"unclosed {worker!r}; close it or use `with`", ResourceWarning, stacklevel=3)
        worker._state = CLOSED
        worker._pump.close()
        for g in list(worker._graphs):
            g._release_native()
        if worker._hazards is not None:
            worker._hazards.close()  # its driver events: before the device goes
        dev, worker._dev = worker._dev, None
        worker._queue.dev = None
        lib.pto_device_close(dev)
    except Exception:
        pass


def close_graphs(worker) -> None:
    """Close the worker's graphs (their tensors are freed in stream order, not forgotten)."""
    for g in list(worker._graphs):
        try:
            g.close()
        except Exception:  # noqa: BLE001 - a lost device: closing it releases everything
            g._release_native()


def _warn_forgotten(names: list[str]) -> None:
    for name in names:
        warnings.warn(f"ChipWorker.close() freed {name}, which was never freed",
                      ResourceWarning, stacklevel=4)


def _drop_queued(worker, why: str, quiet_if_none: bool = False) -> None:
    """Cancel every command not yet started, then drain what the engines finish.

    Warns (``RuntimeWarning``) with `why` and how many commands were
    dropped; with `quiet_if_none`, only if there were any.
    """
    q = worker._queue
    with q.lock:
        dropped = drop_queued(q, list(worker._streams.values()),
                              PtoCanceledError("dropped: the worker closed before it ran"))
    # Canceled commands complete at once; running ones finish on their engine.
    drive(q, q.idle, 5.0)
    if dropped or not quiet_if_none:
        warnings.warn(f"{why}; dropped {dropped} command(s)", RuntimeWarning, stacklevel=4)


def _teardown(worker) -> None:
    """Close the device, then settle whatever was still in flight (idempotent; see the module doc)."""
    if worker._state == CLOSED:
        return
    worker._state = CLOSED
    _live_workers.discard(worker)
    try:
        worker._pump.close()
    finally:
        try:
            worker._tracing.close()  # done already unless the close was cut short
        except Exception:  # noqa: BLE001 - a diagnostic must not keep the device open
            pass
        writer = getattr(worker, "_deps_writer", None)
        if writer is not None:  # deps.json of table-less programs' runs: read from the programs, before they go
            writer.flush()
        q = worker._queue
        with q.lock:
            for g in list(worker._graphs):
                g._release_native()  # graphs hold driver events: before the device goes
            if worker._hazards is not None:
                worker._hazards.close()  # so does the driver's hazard table
            dev, worker._dev = worker._dev, None
            q.dev = None
            lib.pto_device_close(dev)
            for t in list(worker._memory.tensors):
                t._freed = True
            fail_pending(q, PtoCanceledError("the worker closed before this completed"))
            worker._handles.clear()
            worker._kernels.clear()
