"""The dispatch path: from a call to commands on a stream.

``dispatch(compiled, args)`` (what ``compiled(*args)`` and ``@pl.jit``
kernels call) picks the worker: the innermost one opened around the code
(:mod:`._context`), else a process-wide default worker in sync mode, created
on first use and closed at interpreter exit.
"""

from __future__ import annotations

import atexit
import threading

from ._context import current_worker

__all__ = ["dispatch", "default_worker"]

_default = None
_default_lock = threading.Lock()


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
