"""``@pl.jit`` kernels as PyTorch operators (PyPTO's ``pypto.torch``).

This is the optional torch integration; importing :mod:`pypto_async` never
imports torch, and importing this module without torch installed raises
:class:`~pypto_async.errors.PtoNotSupported`.

* :func:`init` fixes the process's execution target once (the simulator, a
  device index) and opens the runtime's process-wide default worker with it.
  Calls made without it run on the default worker as ``kernel(*args)`` does.
* :func:`register` makes a fully annotated ``@pl.jit`` kernel a torch custom
  operator (``torch.ops.<namespace>.<name>``) with a fake (meta)
  implementation, so eager code calls it on CPU tensors and
  ``torch.compile(fullgraph=True)`` traces through it.  ``Out`` and
  ``InOut`` tensors are written in place and returned (as aliases).
* :class:`Graph` and :func:`graph` capture a step of kernel calls on CPU
  tensors once and replay it with the tensors' current contents: PyPTO's
  NPU-graph half (``torch_npu.npu.NPUGraph``), mapped onto the runtime's
  graph capture (``ChipWorker.capture``).
* :mod:`pypto_async.torch.torch_npu` holds the few ``torch_npu.npu`` names
  PyPTO's torch example uses, for programs written against an NPU.

See ``docs/torch.md``.
"""

from __future__ import annotations

from ..errors import PtoNotSupported

try:
    import torch as _torch  # noqa: F401 - the dependency this module needs
except ImportError as exc:  # pragma: no cover - exercised in a subprocess without torch
    raise PtoNotSupported(
        "pypto_async.torch needs PyTorch, which is not installed here (python3 -m pip install torch); "
        "the rest of pypto_async works without it"
    ) from exc

from ._execution import init
from ._graph import Graph, graph
from ._register import register

__all__ = ["init", "register", "Graph", "graph"]
