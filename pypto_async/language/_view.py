"""``pl.TensorView`` and ``pl.TensorLayout``: how a kernel parameter views the tensor it is given.

``pl.Tensor[[16, 128], pl.FP32, pl.TensorView(valid_shape=[16, n], layout=pl.TensorLayout.ND)]``
declares that only the leading ``[16, n]`` box of the parameter is data: a
whole load of it is partial there (as ``pl.load(..., valid_shape=)``), so a
``pl.fillpad`` after it pads the rest.  A ``valid_shape`` entry is an int, a
``pl.dynamic`` dimension (it takes the argument's own valid extent: the
``valid_shape=`` of the ``pl.tensor.slice`` passed there, or its full
extent) or an index the caller has.

Layouts: a tensor here is stored row-major (``ND``), the only layout a
parameter may declare; ``DN`` and ``NZ`` (column-major and fractal
storage) would change which element an offset names, and raise
:class:`~pypto_async.errors.PtoNotSupported`.  ``stride=`` (PyPTO's
explicit strides) is refused likewise unless it is the row-major one.
"""

from __future__ import annotations

import enum

from ..errors import PtoCompileError, PtoNotSupported

__all__ = ["TensorView", "TensorLayout", "TileView"]


class TensorLayout(enum.Enum):
    """How a tensor's elements are laid out in memory: ``ND`` (row-major), ``DN`` (column-major), ``NZ`` (fractal)."""

    ND = "ND"
    DN = "DN"
    NZ = "NZ"


class TensorView:
    """A parameter's view of its tensor: ``valid_shape``, ``layout`` (``ND`` only here), ``stride``, ``pad``."""

    def __init__(self, stride=None, layout: TensorLayout = TensorLayout.ND, valid_shape=None, pad=None):
        if not isinstance(layout, TensorLayout):
            raise PtoCompileError(f"pl.TensorView: layout must be a pl.TensorLayout, got {layout!r}")
        if layout is not TensorLayout.ND:
            raise PtoNotSupported(f"pl.TensorView(layout=pl.TensorLayout.{layout.name}): tensors are row-major "
                                  f"(ND) here; a {layout.name} view would read other elements")
        self.layout = layout
        self.stride = None if stride is None else list(stride)
        self.valid_shape = None if valid_shape is None else list(valid_shape)
        self.pad = pad

    def check(self, shape) -> None:
        """Check the view against the annotated ``shape`` (one valid extent per dimension; row-major strides)."""
        if self.valid_shape is not None and len(self.valid_shape) != len(shape):
            raise PtoCompileError(f"pl.TensorView: valid_shape {self.valid_shape} needs one extent per dimension "
                                  f"of {list(shape)}")
        if self.stride is not None:
            dims = list(shape)
            want = [1] * len(dims)
            for d in range(len(dims) - 2, -1, -1):
                want[d] = want[d + 1] * dims[d + 1] if isinstance(dims[d + 1], int) else None
            if len(self.stride) != len(dims) or any(w is not None and s != w for s, w in zip(self.stride, want)):
                raise PtoNotSupported(f"pl.TensorView(stride={self.stride}): only the row-major strides of "
                                      f"{dims} are supported here")

    def __repr__(self) -> str:
        return f"pl.TensorView(valid_shape={self.valid_shape}, layout=pl.TensorLayout.{self.layout.name})"


class TileView:
    """``pl.TileView(valid_shape=, stride=, start_offset=, blayout=, slayout=, fractal=, pad=, compact=)``.

    PyPTO's view of a tile, the third item of a ``pl.Tile[[shape], dtype,
    pl.TileView(...)]`` annotation (the form its IR printer writes).  A tile
    annotation is checked for form here (the tile's value says its type), so
    the view is checked for form too: ``valid_shape`` and ``stride`` need one
    entry per dimension of the annotated shape, ``valid_shape`` entries an
    int within the shape, a ``pl.dynamic`` dimension or an index; ``fractal``
    a positive int.  The layouts, ``pad`` and ``compact`` are the device's
    placement of the tile, which the sim's results do not depend on.
    """

    def __init__(self, valid_shape=None, stride=None, start_offset=None, blayout=None, slayout=None,
                 fractal: int = 512, pad=None, compact=None):
        for name, v in (("valid_shape", valid_shape), ("stride", stride)):
            if v is not None and not isinstance(v, (list, tuple)):
                raise PtoCompileError(f"pl.TileView: {name} must be a list, got {v!r}")
        if not isinstance(fractal, int) or isinstance(fractal, bool) or fractal <= 0:
            raise PtoCompileError(f"pl.TileView: fractal must be a positive int, got {fractal!r}")
        self.valid_shape = None if valid_shape is None else list(valid_shape)
        self.stride = None if stride is None else list(stride)
        self.start_offset = start_offset
        self.blayout, self.slayout, self.fractal, self.pad, self.compact = blayout, slayout, fractal, pad, compact

    def check(self, shape) -> None:
        """Check the view against the annotated tile ``shape``."""
        for name, v in (("valid_shape", self.valid_shape), ("stride", self.stride)):
            if v is not None and len(v) != len(shape):
                raise PtoCompileError(f"pl.TileView: {name} {v} needs one entry per dimension of {list(shape)}")
        for v, d in zip(self.valid_shape or (), shape):
            if isinstance(v, int) and not isinstance(v, bool) and isinstance(d, int) and not 0 <= v <= d:
                raise PtoCompileError(f"pl.TileView: valid extent {v} is outside [0, {d}] of {list(shape)}")

    def __repr__(self) -> str:
        return f"pl.TileView(valid_shape={self.valid_shape}, stride={self.stride})"
