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

import importlib

from . import _dtypes as _dt
from ._dtypes import DataType
from ._log_level import LogLevel, get_log_level, log_debug, log_error, log_event, log_fatal, log_info, log_warn, set_log_level
from ._log_level import _apply_environment as _apply_log_environment
from .errors import *  # noqa: F401,F403
from .errors import __all__ as _errors_all

__version__ = "0.1.0"

#: PyPTO's dtype constants: ``pypto.DT_FP32`` is ``pl.FP32``; ``DT_INDEX`` is ``pl.INDEX`` (a 64-bit integer here).
DT_BOOL, DT_INT4, DT_INT8, DT_INT16, DT_INT32, DT_INT64 = _dt.BOOL, _dt.INT4, _dt.INT8, _dt.INT16, _dt.INT32, _dt.INT64
DT_UINT4, DT_UINT8, DT_UINT16, DT_UINT32, DT_UINT64 = _dt.UINT4, _dt.UINT8, _dt.UINT16, _dt.UINT32, _dt.UINT64
DT_FP4, DT_FP8E4M3FN, DT_FP8E5M2, DT_FP8E8M0 = _dt.FP4, _dt.FP8E4M3FN, _dt.FP8E5M2, _dt.FP8E8M0
DT_FP16, DT_FP32, DT_BF16, DT_HF4, DT_HF8, DT_INDEX = _dt.FP16, _dt.FP32, _dt.BF16, _dt.HF4, _dt.HF8, _dt.INT64
_DT_NAMES = ("DT_BOOL", "DT_INT4", "DT_INT8", "DT_INT16", "DT_INT32", "DT_INT64", "DT_UINT4", "DT_UINT8", "DT_UINT16",
             "DT_UINT32", "DT_UINT64", "DT_FP4", "DT_FP8E4M3FN", "DT_FP8E5M2", "DT_FP8E8M0", "DT_FP16", "DT_FP32",
             "DT_BF16", "DT_HF4", "DT_HF8", "DT_INDEX")
#: The submodules PyPTO's top-level package imports (``pypto.ir``): imported here on first use.
_SUBMODULES = ("ir", "language", "runtime")

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
           "log_fatal", "log_event", "__version__", *_RUNTIME_NAMES, *_errors_all, *_DT_NAMES, *_SUBMODULES]

_apply_log_environment()


def __getattr__(name: str):
    if name in _RUNTIME_NAMES:
        from . import runtime

        value = getattr(runtime, name)
        globals()[name] = value
        return value
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'pypto_async' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_RUNTIME_NAMES) | set(_SUBMODULES))
