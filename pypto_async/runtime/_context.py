"""Which worker and which stream a call dispatches on, per task.

Two ``contextvars`` variables, so every asyncio task (and trio task, and
thread) sees its own values:

* the stack of workers opened with ``with`` / ``async with`` around the code:
  ``compiled(*args)`` and ``kernel(*args)`` on a ``@pl.jit`` function
  dispatch on the innermost one (:func:`dispatch`); with none open, on one
  process-wide default worker created on first use and closed at exit;
* the stack of streams set with ``worker.use_stream(s)``: a worker's
  task-local default stream is the innermost of its own streams there, else
  its ``default_stream``.
"""

from __future__ import annotations

import atexit
import threading
from contextvars import ContextVar

__all__ = ["dispatch", "current_worker", "default_worker"]

_workers: ContextVar[tuple] = ContextVar("pypto_async_workers", default=())
_streams: ContextVar[tuple] = ContextVar("pypto_async_streams", default=())

_default = None
_default_lock = threading.Lock()


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
    return _streams.set(_streams.get() + (stream,))


def pop_stream(stream, token) -> None:
    try:
        _streams.reset(token)
    except ValueError:
        _streams.set(tuple(s for s in _streams.get() if s is not stream))


def stream_stack() -> tuple:
    return _streams.get()


def current_worker():
    """Return the innermost open worker opened around this code, or None."""
    for worker in reversed(_workers.get()):
        if worker._alive():
            return worker
    return None


def default_worker():
    """Return the process-wide default worker (sync mode), creating it once."""
    global _default
    worker = _default
    if worker is not None and worker._alive():
        return worker
    with _default_lock:
        if _default is None or not _default._alive():
            from ._worker import ChipWorker

            _default = ChipWorker()
        return _default


@atexit.register
def _close_default() -> None:
    worker = _default
    if worker is not None:
        worker.close(timeout=5.0)


def dispatch(compiled, args, *, stream=None):
    """Launch `compiled` with `args` on the worker opened around this code.

    This is what ``CompiledProgram.__call__`` and ``@pl.jit`` kernels call.
    The worker is the innermost one opened with ``with`` / ``async with``
    in this task; with none, the process-wide default worker (created once,
    in sync mode, closed at interpreter exit).

    Parameters
    ----------
    compiled
        A compiled program (see :mod:`pypto_async._signature`).
    args : sequence
        Its arguments.
    stream : Stream, optional
        The stream to launch on; ``None`` means the task-local default
        stream.  It must belong to the chosen worker.

    Returns
    -------
    object or Launch
        In sync mode, the launch's result (its ``Out``/``InOut`` arguments,
        see :meth:`Launch.result`), once it has completed.  In async mode,
        the pending :class:`Launch`: ``await`` it for the same result.
    """
    worker = current_worker()
    if worker is None:
        worker = stream._worker if stream is not None else default_worker()
    launch = worker.register(compiled)(*args, stream=stream)
    if worker._async:
        return launch
    return launch.result()
