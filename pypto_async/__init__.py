"""pypto_async: an asynchronous, stream-based device runtime for PyPTO tile kernels.

``import pypto_async.language as pl`` to write kernels, ``pypto_async.ir`` to
compile them, ``pypto_async.runtime`` to dispatch them.  Every error is a
:class:`PtoError`.

The runtime's main names are also available here (``pypto_async.ChipWorker``);
they are imported on first use, so ``import pypto_async`` stays light and does
not need the native driver.

``set_log_level(LogLevel.WARN)`` and ``get_log_level()`` set and read the
threshold of pypto_async's own log messages, as PyPTO's do for its compiler;
``log_info(message)`` and the other ``log_*`` calls write one at their level.
"""

from ._dtypes import DataType
from ._log_level import LogLevel, get_log_level, log_debug, log_error, log_event, log_fatal, log_info, log_warn, set_log_level
from ._log_level import _apply_environment as _apply_log_environment
from .errors import *  # noqa: F401,F403
from .errors import __all__ as _errors_all

__version__ = "0.1.0"

#: Names re-exported from :mod:`pypto_async.runtime`, resolved lazily.
_RUNTIME_NAMES = (
    "ChipWorker",
    "RunConfig",
    "DeviceTensor",
    "Stream",
    "Event",
    "Launch",
    "KernelHandle",
    "WorkerStats",
    "benchmark",
)

__all__ = ["DataType", "LogLevel", "set_log_level", "get_log_level", "log_debug", "log_info", "log_warn", "log_error",
           "log_fatal", "log_event", "__version__", *_RUNTIME_NAMES, *_errors_all]

_apply_log_environment()


def __getattr__(name: str):
    if name in _RUNTIME_NAMES:
        from . import runtime

        value = getattr(runtime, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'pypto_async' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_RUNTIME_NAMES))
