"""The ``torch_npu.npu`` names PyPTO's torch example uses, over the simulator.

A program written against an NPU imports ``torch_npu`` and calls
``torch_npu.npu.set_device``, ``synchronize``, ``NPUGraph`` and ``graph``.
Importing this module in its place (an import change, as ``pypto`` becomes
``pypto_async``) runs it here, with its tensors on the CPU (``device="cpu"``
for ``"npu:0"``, the platform change):

* ``npu.set_device(i)`` / ``npu.current_device()``: the device index
  :func:`pypto_async.torch.init` takes by default;
* ``npu.synchronize()``: wait for all work queued on the worker kernels run on;
* ``npu.NPUGraph`` / ``npu.graph(g)``: :class:`pypto_async.torch.Graph` and
  :func:`pypto_async.torch.graph`.

This is not a torch device backend: tensors stay CPU tensors.
"""

from __future__ import annotations

from types import SimpleNamespace

from ..errors import PtoArgumentError
from . import _execution
from ._graph import Graph, graph

__all__ = ["npu"]


def _set_device(device) -> None:
    """Choose the device index :func:`pypto_async.torch.init` uses by default."""
    if isinstance(device, str):
        device = int(device.rpartition(":")[2] or 0)
    if isinstance(device, bool) or not isinstance(device, int) or device < 0:
        raise PtoArgumentError(f"npu.set_device takes a device index, not {device!r}")
    _execution._current_device[0] = device


def _current_device() -> int:
    return _execution._current_device[0]


def _synchronize() -> None:
    """Wait for every command queued so far on the worker kernels run on."""
    _execution.worker().sync()


npu = SimpleNamespace(set_device=_set_device, current_device=_current_device, synchronize=_synchronize,
                      NPUGraph=Graph, graph=graph)
