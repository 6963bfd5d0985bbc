"""Parameter annotations (``pl.Tensor``, ``pl.Out``, ``pl.InOut``, ``pl.Scalar``), levels and enums.

``pl.MemorySpace`` (also ``pl.Mem``), ``pl.PadValue`` and ``pl.AtomicType``
are PyPTO's enums, under PyPTO's member names.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from .._scalars import is_int
from .._dtypes import DataType, StorageDType, as_dtype
from .._signature import IN, INOUT, OUT
from ..errors import PtoCompileError

__all__ = [
    "Tensor",
    "Out",
    "InOut",
    "Scalar",
    "Level",
    "MemorySpace",
    "Mem",
    "PadValue",
    "AtomicType",
    "TensorAnnotation",
    "ScalarAnnotation",
]


@dataclass(frozen=True)
class TensorAnnotation:
    """A tensor parameter: direction, and shape/dtype when given statically."""

    direction: str = IN
    shape: tuple[int, ...] | None = None
    dtype: DataType | None = None
    view: object = None  # a pl.TensorView (third item of pl.Tensor[...]), see _view


@dataclass(frozen=True)
class ScalarAnnotation:
    """A scalar parameter of a given dtype (``None``: inferred from the argument)."""

    dtype: DataType | None = None


class Tensor:
    """Annotate a tensor parameter: ``pl.Tensor`` or ``pl.Tensor[[d0, d1], pl.FP32]``."""

    def __init__(self):
        raise TypeError("pl.Tensor is an annotation, not a constructor; pass numpy arrays or torch tensors")

    def __class_getitem__(cls, item) -> TensorAnnotation:
        from ._view import TensorView

        from ._ops_mx import MxLayout

        view = None
        if isinstance(item, tuple) and len(item) == 3 and isinstance(item[2], (TensorView, MxLayout)):
            item, view = item[:2], item[2]
        if not isinstance(item, tuple) or len(item) != 2:
            raise PtoCompileError("pl.Tensor[...] takes [shape, dtype] (and a pl.TensorView), e.g. "
                                  "pl.Tensor[[128, 128], pl.FP32]")
        shape, dtype = item
        from ._placement import is_dynamic_dim

        if not isinstance(shape, (list, tuple)) or not all(
                is_dynamic_dim(d) or (is_int(d) and d > 0) for d in shape):
            raise PtoCompileError(f"pl.Tensor shape must be a list of positive ints (or pl.dynamic dims), "
                                  f"got {shape!r}")
        if view is not None:
            view.check(shape)
        if isinstance(dtype, StorageDType):  # kept, and refused when a kernel's annotations are read
            return TensorAnnotation(IN, tuple(shape), dtype, view)
        return TensorAnnotation(IN, tuple(shape), as_dtype(dtype), view)


class _Direction:
    def __init__(self, direction: str, name: str):
        self._direction = direction
        self._name = name

    def __getitem__(self, item) -> TensorAnnotation:
        if item is Tensor:
            return TensorAnnotation(self._direction)
        if isinstance(item, TensorAnnotation):
            return TensorAnnotation(self._direction, item.shape, item.dtype, item.view)
        raise PtoCompileError(f"pl.{self._name}[...] wraps a pl.Tensor annotation, got {item!r}")

    def __repr__(self) -> str:
        return f"pl.{self._name}"


Out = _Direction(OUT, "Out")
InOut = _Direction(INOUT, "InOut")


class Scalar:
    """Annotate a scalar parameter: ``pl.Scalar[pl.FP32]``."""

    def __init__(self):
        raise TypeError("pl.Scalar is an annotation, not a constructor; pass a Python number")

    def __class_getitem__(cls, item) -> ScalarAnnotation:
        if isinstance(item, StorageDType):  # kept, and refused when a kernel's annotations are read
            return ScalarAnnotation(item)
        return ScalarAnnotation(as_dtype(item))


class Level(enum.Enum):
    """Where a ``pl.at`` scope runs."""

    HOST = "HOST"
    CHIP = "CHIP"
    CORE_GROUP = "CORE_GROUP"
    CORE = "CORE"


class MemorySpace(enum.Enum):
    """Where a tile lives (``pl.Mem`` is the same enum).

    ``DDR`` holds tensors; ``Vec`` (the unified buffer, where vector ops
    compute), ``Mat`` (L1), ``Left`` / ``Right`` (the matmul operand buffers),
    ``Acc`` (the matmul accumulator), ``Bias`` and ``LeftScale`` /
    ``RightScale`` (the MX block scales ``pl.matmul_mx`` reads) are on-chip.  See
    :mod:`pypto_async.ir._spaces` for which op may read or produce which.
    """

    DDR = "DDR"
    Vec = "Vec"
    Mat = "Mat"
    Left = "Left"
    Right = "Right"
    Acc = "Acc"
    Bias = "Bias"
    LeftScale = "LeftScale"
    RightScale = "RightScale"


Mem = MemorySpace


class PadValue(enum.Enum):
    """What ``pl.fillpad`` writes outside a tile's valid region.

    ``zero``; ``max`` (+inf for floats, the largest value for ints); ``min``
    (-inf, or the smallest value).  ``null`` (no padding) is accepted where
    PyPTO accepts it, as "leave the padding unspecified".
    """

    null = "null"
    zero = "zero"
    max = "max"
    min = "min"


class AtomicType(enum.Enum):
    """How ``pl.store`` / ``pl.assemble`` combine with the tensor: overwrite, or add."""

    None_ = "none"
    Add = "add"
