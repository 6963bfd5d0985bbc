"""``TensorSpec``: a named tensor's shape, dtype and initial value (PyPTO's ``pypto.runtime.TensorSpec``).

PyPTO's examples describe a program's arguments as a list of specs and make
the host tensors from them (``spec.create_tensor()``); ``is_output`` marks
the ones a golden reference is compared on.  The spec is plain data here
too: it makes a ``torch.Tensor`` on the host, which the program then takes
as any other argument.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from ..errors import PtoArgumentError

__all__ = ["TensorSpec"]


def _torch():
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - torch is an optional dependency
        raise PtoArgumentError("TensorSpec makes torch tensors: install torch") from exc
    return torch


@dataclass
class TensorSpec:
    """A tensor argument: ``name``, ``shape``, torch ``dtype``, ``init_value`` and whether it ``is_output``.

    Parameters
    ----------
    name : str
        The parameter it is passed as.
    shape : list of int
    dtype : torch.dtype
    init_value : None, int, float, torch.Tensor or callable, optional
        ``None``: zeros.  A number: every element.  A tensor: its values
        (converted to ``dtype``; the shape must match).  One of the torch
        factories ``torch.randn``, ``torch.rand``, ``torch.zeros`` and
        ``torch.ones``: called with the shape and dtype.  Any other callable:
        called with no arguments, its result converted to ``dtype`` (and
        checked against the shape).
    is_output : bool, optional
        An output, compared with a golden reference by a harness.
    """

    name: str
    shape: list[int]
    dtype: Any
    init_value: int | float | Any | Callable | None = field(default=None)
    is_output: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise PtoArgumentError(f"TensorSpec: name must be a non-empty str, not {self.name!r}")
        shape = list(self.shape)
        if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise PtoArgumentError(f"TensorSpec {self.name!r}: shape must be a list of non-negative ints, "
                                   f"not {self.shape!r}")
        self.shape = shape
        if not isinstance(self.dtype, _torch().dtype):
            raise PtoArgumentError(f"TensorSpec {self.name!r}: dtype must be a torch.dtype, not {self.dtype!r}")

    def create_tensor(self):
        """Return a new host ``torch.Tensor`` of the spec's shape and dtype holding ``init_value``."""
        torch = _torch()
        value = self.init_value
        if value is None:
            return torch.zeros(self.shape, dtype=self.dtype)
        if isinstance(value, bool) or not isinstance(value, (int, float, torch.Tensor)) and not callable(value):
            raise PtoArgumentError(f"TensorSpec {self.name!r}: init_value {value!r} is not None, a number, a "
                                   f"tensor or a callable")
        if isinstance(value, (int, float)):
            return torch.full(self.shape, value, dtype=self.dtype)
        if value in (torch.randn, torch.rand, torch.zeros, torch.ones):
            return value(self.shape, dtype=self.dtype)
        made = value if isinstance(value, torch.Tensor) else value()
        out = torch.as_tensor(made).to(dtype=self.dtype)
        if list(out.shape) != self.shape:
            raise PtoArgumentError(f"TensorSpec {self.name!r}: init_value gives shape {list(out.shape)}, "
                                   f"the spec's is {self.shape}")
        return out
