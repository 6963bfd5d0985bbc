"""The async runtime: workers, streams, events, launches and resident tensors.

``from pypto_async.runtime import ChipWorker, RunConfig, DeviceTensor, Stream,
Event, Launch, benchmark``.  See :class:`ChipWorker` for the two modes (sync
under ``with``, async under ``async with``).
"""

from ._benchmark import *  # noqa: F401,F403
from ._benchmark import __all__ as _benchmark_all
from ._config import RunConfig
from ._profile import DeviceProfile
from ._context import current_worker
from ._entry import dispatch
from ._capture import CapturedEvent, CapturedNode, Capture, GraphInput
from ._distributed import DistributedLaunch, DistributedWorker, StackedDeviceTensor
from ._peer import device_count
from ._event import *  # noqa: F401,F403
from ._event import __all__ as _event_all
from ._graph import Graph
from ._harness import RunResult, run
from ._tensor_spec import TensorSpec
from ._kernel import *  # noqa: F401,F403
from ._kernel import __all__ as _kernel_all
from ._launch import *  # noqa: F401,F403
from ._launch import __all__ as _launch_all
from ._stream import *  # noqa: F401,F403
from ._stream import __all__ as _stream_all
from ._tensor import *  # noqa: F401,F403
from ._tensor import __all__ as _tensor_all
from ._worker import *  # noqa: F401,F403
from ._worker import __all__ as _worker_all
from ._worker_base import Worker
from ._pto_isa import ensure_pto_isa_root, pto_isa_include_dir
from ._log_config import configure_log, log_level
from ._log_config import _apply_environment as _apply_log_environment
from . import runner, tensor_spec  # noqa: E402,F401 - PyPTO's module names (pypto.runtime.runner, .tensor_spec)

__all__ = [
    "RunConfig",
    "TensorSpec",
    "DeviceProfile",
    "dispatch",
    "device_count",
    "DistributedWorker",
    "DistributedLaunch",
    "StackedDeviceTensor",
    "current_worker",
    "ensure_pto_isa_root",
    "pto_isa_include_dir",
    *_worker_all,
    *_stream_all,
    *_event_all,
    *_launch_all,
    *_tensor_all,
    *_kernel_all,
    *_benchmark_all,
    "Capture",
    "CapturedNode",
    "CapturedEvent",
    "Graph",
    "GraphInput",
    "run",
    "RunResult",
    "Worker",
    "configure_log",
    "log_level",
]

_apply_log_environment()
