"""Capture kernel calls on CPU tensors once, replay them with the tensors' current contents.

PyPTO's NPU half of its torch example captures kernel calls into a
``torch_npu.npu.NPUGraph`` and replays it after refilling the captured
tensors in place.  Here the same step is recorded by the runtime's graph
capture (``ChipWorker.capture``) on the worker kernels run on, and each CPU
tensor a captured launch takes becomes an input of the graph, bound to that
same tensor at every replay: the replay copies it in before the step (if
the step reads it) and out after it (if the step writes it), so a replay
sees what the tensor holds then, as a replay of a captured address does.
Scalars keep the value they had when captured.  One tensor used by several
calls is one input (the calls share its device buffer inside the step).

The graph keeps the tensors, not their addresses: a tensor reallocated by
``resize_`` is bound as it is at the replay (its shape and dtype must not
change).  Views of one storage at different offsets or of different shapes
inside one capture are refused (their device buffers would not alias).
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch

from .._signature import SCALAR
from ..errors import PtoArgumentError, PtoCaptureError, PtoInvalidStateError
from ..runtime._args import host_array
from ..runtime._capture import Capture
from ..runtime._graph import Graph as RuntimeGraph
from ._execution import worker

__all__ = ["Graph", "graph"]


def _address(obj) -> int:
    return obj.data_ptr() if isinstance(obj, torch.Tensor) else obj.__array_interface__["data"][0]


class Graph:
    """A captured step of kernel calls on CPU tensors (``torch_npu.npu.NPUGraph``'s place).

    Fill it with ``with pypto_async.torch.graph(g): ...``; then
    :meth:`replay` runs the step again, to completion.
    """

    def __init__(self):
        self._graph = None  # the runtime Graph
        self._bindings: dict[str, object] = {}

    def replay(self) -> None:
        """Run the captured step once more, reading and writing the captured tensors; return once it ran.

        Raises
        ------
        PtoInvalidStateError
            If nothing was captured (or the graph was reset).
        PtoArgumentError
            If a captured tensor changed shape or dtype since.
        """
        if self._graph is None:
            raise PtoInvalidStateError("this Graph holds no capture: fill it with `with pypto_async.torch.graph(g):`")
        launch = self._graph.replay(**self._bindings)
        if not launch.done():
            launch.sync()  # an async-mode worker: CPU tensors are read right after, so it runs to the end

    def reset(self) -> None:
        """Release the captured step (idempotent); the graph can capture again."""
        g, self._graph = self._graph, None
        self._bindings = {}
        if g is not None:
            g.close()

    @property
    def inputs(self) -> tuple[str, ...]:
        """The names of the captured tensors (the graph's inputs), in first-use order."""
        return tuple(self._bindings)

    def __len__(self) -> int:
        return 0 if self._graph is None else len(self._graph)

    def __repr__(self) -> str:
        state = "empty" if self._graph is None else f"{len(self._graph)} commands, inputs {list(self._bindings)}"
        return f"<pypto_async.torch.Graph {state}>"


class _TorchCapture(Capture):
    """A capture whose launches take host arrays: each becomes an input bound to it at replay."""

    def __init__(self, worker, name: str):
        super().__init__(worker, name, None, RuntimeGraph._build)
        self.held: dict = {}  # (address, nbytes, shape, dtype) -> (placeholder, input name, array)
        self.spans: list = []  # (start, end, key)

    def launch(self, h, args: tuple, stream, submit_only: bool):
        params = h._binder.params
        if len(args) == len(params):
            args = tuple(self._placeholder(a, p, label) if isinstance(a, (torch.Tensor, np.ndarray)) else a
                         for a, p, label in zip(args, params, h._binder.labels))
        return super().launch(h, args, stream, submit_only)

    def _placeholder(self, obj, p, label: str):
        if p.direction == SCALAR:
            return obj  # a 0-d tensor as a scalar: its value now, as for any scalar
        ha = host_array(obj, label, writeable=p.copies_out)  # the eager path's checks
        start = _address(obj)
        key = (start, ha.nbytes, tuple(ha.shape), ha.dtype)
        found = self.held.get(key)
        if found is not None:
            return found[0]
        for lo, hi, other in self.spans:
            if start < hi and lo < start + ha.nbytes:
                raise PtoCaptureError(
                    f"{label} overlaps the memory of captured tensor {self.held[other][1]!r} with another "
                    f"offset, shape or dtype, inside capture {self.name!r}; capture one view of it")
        taken = {v[1] for v in self.held.values()}
        name, k = p.name, 1
        while name in taken or name == "stream":
            name, k = f"{p.name}_{k}", k + 1
        placeholder = self.input(name, ha.shape, ha.dtype)
        self.held[key] = (placeholder, name, obj)
        self.spans.append((start, start + ha.nbytes, key))
        return placeholder


@contextlib.contextmanager
def graph(g: Graph, *, name: str = "torch_graph"):
    """Capture the kernel calls of the block into `g` instead of running them.

    Registered operators and direct ``@pl.jit`` calls inside the block, on
    CPU tensors, are recorded on the worker kernels run on (the one opened
    around the block, else the default worker).  Their tensors become the
    graph's inputs, bound to the same tensors at each :meth:`Graph.replay`.
    Nothing runs until then; waiting for captured work inside the block
    raises :class:`~pypto_async.errors.PtoCaptureError`.

    Raises
    ------
    PtoArgumentError
        If `g` is not a :class:`Graph`.
    PtoInvalidStateError
        If `g` holds a capture already (``g.reset()`` first).
    PtoCaptureError
        Inside another capture of this task, or for overlapping views.
    """
    if not isinstance(g, Graph):
        raise PtoArgumentError(f"pypto_async.torch.graph takes a pypto_async.torch.Graph, not {type(g).__name__}")
    if g._graph is not None:
        raise PtoInvalidStateError("this Graph holds a capture already; call reset() to capture again")
    cap = _TorchCapture(worker(), name)
    with cap:
        yield g
    g._graph = cap.graph
    g._bindings = {n: obj for _, n, obj in cap.held.values()}
