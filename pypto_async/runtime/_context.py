"""Which worker and which stream a call dispatches on, per task.

Three ``contextvars`` variables, so every asyncio task (and trio task, and
thread) sees its own values:

* the stack of workers opened with ``with`` / ``async with`` around the code:
  ``compiled(*args)`` and ``kernel(*args)`` on a ``@pl.jit`` function
  dispatch on the innermost one (:func:`current_worker`; with none open,
  :func:`~pypto_async.runtime._entry.dispatch` uses the process-wide
  default worker);
* the stack of streams set with ``worker.use_stream(s)``: a worker's
  task-local default stream is the innermost of its own streams there, else
  its ``default_stream``;
* the graph capture the task has open (``w.capture()``, :mod:`._capture`):
  the capture belongs to the task, not the thread.
"""

from __future__ import annotations

from contextvars import ContextVar

__all__ = ["current_worker", "open_workers", "push_worker", "pop_worker", "push_stream", "pop_stream",
           "stream_stack", "capture_of", "set_capture", "reset_capture", "refuse"]

_workers: ContextVar[tuple] = ContextVar("pypto_async_workers", default=())
_streams: ContextVar[tuple] = ContextVar("pypto_async_streams", default=())
_capture: ContextVar = ContextVar("pypto_async_capture", default=None)


def push_worker(worker):
    """Push `worker` on this context's stack; return the token for :func:`pop_worker`."""
    return _workers.set(_workers.get() + (worker,))


def pop_worker(worker, token) -> None:
    """Undo :func:`push_worker` (tolerates being called from another context)."""
    try:
        _workers.reset(token)
    except ValueError:  # entered in another context (an async fixture, say)
        _workers.set(tuple(w for w in _workers.get() if w is not worker))


def push_stream(stream):
    """Push `stream` on this context's stream stack (``use_stream``); return the token."""
    return _streams.set(_streams.get() + (stream,))


def pop_stream(stream, token) -> None:
    """Undo :func:`push_stream` (tolerates being called from another context)."""
    try:
        _streams.reset(token)
    except ValueError:
        _streams.set(tuple(s for s in _streams.get() if s is not stream))


#: This context's stream stack, innermost last: a C call, which the launch hot path makes per launch.
stream_stack = _streams.get


def open_workers() -> tuple:
    """This context's worker stack, innermost last (closed ones included)."""
    return _workers.get()


def current_worker():
    """Return the innermost open worker opened around this code, or None."""
    for worker in reversed(_workers.get()):
        if worker._alive():
            return worker
    return None


def capture_of(worker):
    """The graph capture this task has open on `worker` (``w.capture()``), or None."""
    cap = _capture.get()
    if cap is not None and cap._worker is worker and cap._open:
        return cap
    return None


def set_capture(cap):
    """Make `cap` this context's capture; return the token for :func:`reset_capture`."""
    return _capture.set(cap)


def reset_capture(token) -> None:
    """Undo :func:`set_capture` (tolerates being called from another context)."""
    try:
        _capture.reset(token)
    except ValueError:
        _capture.set(None)


def refuse(worker, what: str) -> None:
    """Raise PtoCaptureError if this task is capturing on `worker`: `what` would wait for captured work."""
    if worker._captures:
        cap = capture_of(worker)
        if cap is not None:
            cap.refuse(what)
