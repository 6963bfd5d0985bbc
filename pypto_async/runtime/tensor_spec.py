"""PyPTO's ``pypto.runtime.tensor_spec`` name (``from pypto_async.runtime.tensor_spec import TensorSpec``).

The spec is the runtime's own :class:`~pypto_async.runtime.TensorSpec`.
"""

from __future__ import annotations

from ._tensor_spec import TensorSpec

__all__ = ["TensorSpec"]
