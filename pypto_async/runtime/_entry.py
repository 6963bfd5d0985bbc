"""Entry points: ``dispatch()`` and the process-wide default worker.

``dispatch(compiled, args)`` is what ``compiled(*args)`` and ``@pl.jit``
kernels call.  It picks the worker first: the innermost one opened around
the code (:mod:`._context`), else, for a per-call config, the innermost open
worker of the config's platform and device or one opened for the call, else
a process-wide default worker in sync mode, created on first use and closed
at interpreter exit.  Then it calls the worker's handle for the program,
which goes down the dispatch path (:mod:`._dispatch`).

These sit above :class:`~._worker.ChipWorker`, which they create, and so
above everything the worker is made of; nothing in the runtime below the
worker imports this module.
"""

from __future__ import annotations

import atexit
import threading

from ..errors import PtoInvalidStateError
from ._config import as_run_config
from ._context import current_worker
from ._worker import ChipWorker

__all__ = ["dispatch", "default_worker"]

_default = None
_default_lock = threading.Lock()


def default_worker(config=None):
    """Return the process-wide default worker (sync mode), creating it once.

    With `config` (a :class:`RunConfig`), the worker is created with it if
    there is none yet, as ``pypto_async.torch.init(...)`` does; one already
    open with another config raises :class:`PtoInvalidStateError`.
    """
    global _default
    worker = _default
    if worker is not None and worker._alive() and config is None:
        return worker
    with _default_lock:
        if _default is None or not _default._alive():
            _default = ChipWorker(config)
        elif config is not None and _default._config != as_run_config(config):
            cfg = _default._config
            raise PtoInvalidStateError(
                f"the process's default worker is open already with another config (platform {cfg.platform!r}, "
                f"device {cfg.device_id}, aicpu_thread_num {cfg.aicpu_thread_num}); it is fixed once per process")
        return _default


@atexit.register
def _close_default() -> None:
    worker = _default
    if worker is not None:
        worker.close(timeout=5.0)


def dispatch(compiled, args, *, stream=None, config=None):
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
    config : RunConfig, optional
        PyPTO's per-call config.  The call runs on the innermost open worker
        of the config's platform and device (``ChipWorker.current``), else
        on a worker opened with `config` for this call alone (sync mode);
        its DFX switches apply to the call.

    Returns
    -------
    object or Launch
        In sync mode, the call's outputs once it has completed (see
        :mod:`._call`).  In async mode, the pending :class:`Launch`:
        ``await`` it for the same value.
    """
    if config is not None and stream is None:
        return _dispatch_with_config(compiled, args, config)
    worker = current_worker()
    if worker is None:
        worker = stream._worker if stream is not None else default_worker()
    return worker.register(compiled)(*args, stream=stream, config=config)


def _dispatch_with_config(compiled, args, config):
    cfg = as_run_config(config)
    worker = ChipWorker.current(platform=cfg.platform, device_id=cfg.device_id)
    if worker is not None:
        return worker.register(compiled)(*args, config=cfg)
    with ChipWorker(config=_sized(cfg, args)) as worker:
        return worker.register(compiled)(*args, config=cfg)


_GIB = 1 << 30


def _sized(cfg, args):
    """`cfg` for a worker opened for one call: device memory (left unset: 1 GiB) that holds the call's arrays.

    The worker exists for this call alone, so what the call passes (copied to
    the device for the launch) sizes it, with room beside them for the
    program's intermediates, rounded up to whole GiB.
    """
    if cfg.device_memory is not None:
        return cfg
    need = sum(int(getattr(a, "nbytes", 0) or 0) for a in args if not isinstance(a, (int, float, bool)))
    if need * 5 // 4 + (256 << 20) <= _GIB:
        return cfg
    return cfg.replace(device_memory=-(-(need * 5 // 4 + (256 << 20)) // _GIB) * _GIB)
