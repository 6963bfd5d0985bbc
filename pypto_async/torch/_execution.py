"""``init()``: the process's execution target, fixed once, and the worker kernels run on.

Kernel calls from torch (registered operators, direct ``@pl.jit`` calls,
graph replays) run on the worker opened around the call (``with
ChipWorker(...)``), else on the runtime's process-wide default worker
(:func:`pypto_async.runtime._entry.default_worker`).  :func:`init` creates
that default worker with the target it names, so that no call, capture or
trace carries a device or platform of its own.
"""

from __future__ import annotations

from .._signature import normalize_platform
from ..errors import PtoArgumentError, PtoCaptureError, PtoNotSupported

__all__ = ["init", "worker"]

#: The device index ``torch_npu.npu.set_device`` chose (see :mod:`.torch_npu`); ``init(device=None)`` takes it.
_current_device = [0]


def init(*, device: int | None = None, platform: str = "sim", runtime: str | None = None,
         aicpu_thread_num: int = 0) -> None:
    """Fix this process's kernel execution target and open its default worker.

    Call once, before the first kernel call, outside a graph capture.
    Repeating it with the same target does nothing.  Registration, fake
    (meta) calls and ``torch.compile`` tracing do not need it; a kernel
    called without it runs on the default worker's default target.

    Parameters
    ----------
    device : int, optional
        The device index; ``None``: the one :func:`.torch_npu.npu.set_device`
        chose (0 unless set).
    platform : str
        The platform to run on: the simulator (``"sim"``, also
        ``"a2a3sim"`` / ``"a5sim"``).
    runtime : str, optional
        PyPTO's runtime name; only the simulator's
        (``"tensormap_and_ringbuffer"``) exists here.
    aicpu_thread_num : int
        0 for the runtime's default, else the scheduler threads (PyPTO: 2..5).

    Raises
    ------
    PtoArgumentError
        For an argument of the wrong type or value.
    PtoNotSupported
        For a platform or runtime other than the simulator's.
    PtoCaptureError
        Inside a graph capture.
    PtoInvalidStateError
        If the default worker is open already with another target.
    """
    from ..runtime import _entry
    from ..runtime._config import RunConfig
    from ..runtime._context import capture_of, current_worker
    from ..runtime._worker import DEFAULT_RUNTIME

    if device is not None and (isinstance(device, bool) or not isinstance(device, int)):
        raise PtoArgumentError(f"pypto_async.torch.init: device must be an int or None, not {device!r}")
    if not isinstance(platform, str) or normalize_platform(platform) != "sim":
        raise PtoNotSupported(f"pypto_async.torch.init: platform {platform!r} is not available here; kernels "
                              "run on the simulator (platform='sim')")
    if runtime is not None and runtime != DEFAULT_RUNTIME:
        raise PtoNotSupported(f"pypto_async.torch.init: runtime {runtime!r} is not available; the simulator "
                              f"runs {DEFAULT_RUNTIME!r}")
    if isinstance(aicpu_thread_num, bool) or not isinstance(aicpu_thread_num, int) or aicpu_thread_num < 0:
        raise PtoArgumentError(f"pypto_async.torch.init: aicpu_thread_num must be an int >= 0, "
                               f"not {aicpu_thread_num!r}")
    for w in (current_worker(), _entry._default):  # the runtime knows whether this task is capturing
        if w is not None and w._alive() and capture_of(w) is not None:
            raise PtoCaptureError("pypto_async.torch.init must be called outside a graph capture")
    index = _current_device[0] if device is None else device
    _entry.default_worker(RunConfig(platform="sim", device_id=index, aicpu_thread_num=aicpu_thread_num or None))


def worker():
    """The worker a kernel call from here runs on: the one opened around it, else the default worker."""
    from ..runtime._context import current_worker
    from ..runtime._entry import default_worker

    w = current_worker()
    return w if w is not None else default_worker()
