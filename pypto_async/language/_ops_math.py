"""PyPTO's math ops beyond the basic arithmetic: trigonometry, fmod, scalar max/min, partial ops, products,
broadcast max/min, ``expand_clone``, ``reinterpret_view`` and ``get_block_num``.

Each records IR at the caller's line and is checked there, as the ops of
``_ops`` are:

* ``sin`` / ``cos``: ``Unary`` ops (FP32 only, as in PyPTO).
* ``fmod`` / ``fmods``: a ``Binary`` op, C's ``fmod`` (the remainder takes the
  dividend's sign, as ``torch.fmod``; ``pl.rem`` takes the divisor's).
* ``maximums`` / ``minimums``: ``maximum`` / ``minimum`` against a scalar.
* ``part_add`` / ``part_mul`` / ``part_max`` / ``part_min``: ``Binary`` ops over
  two tiles of one shape; the result is valid where the first source is, holds
  the op where both sources are valid and the valid source's element where
  only one is.
* ``row_prod`` / ``col_prod``: reductions (``Reduce``).
* ``row_expand_max`` / ``row_expand_min`` / ``col_expand_max`` /
  ``col_expand_min``: ``maximum`` / ``minimum`` with a broadcast vector.
* ``expand_clone(src, target)``: ``src`` broadcast (``Broadcast``) to the shape
  of ``target``, stored into ``target`` when it is a tensor the kernel writes.
* ``reinterpret_view(data, dtype, shape=)``: the same bytes read as another
  dtype (``Bitcast``).

The tile-level spellings (``pl.tile.*``) and the tensor-level ones
(``pl.tensor.*``, a tensor operand loaded whole inside a region) take
PyPTO's parameter names; :data:`TILE_ALL` and :data:`TENSOR_ALL` list them.
"""

from __future__ import annotations

from .._dtypes import as_dtype
from ..errors import PtoArgumentError
from ..ir._diag import compile_error
from ..ir._nodes import Binary, Bitcast, Broadcast, IConst, Slice
from ._layout import _expand
from ._memory import _tile as tile_operand
from ._memory import as_tile, record
from ._ops import _binary, _reduce, _unary, _with_scalar, cast
from ._ops_extended import _no_tile
from ._submit import get_block_num
from ._tracer import TensorArg, Tile, current, user_loc

__all__ = [
    "sin",
    "cos",
    "fmod",
    "fmods",
    "maximums",
    "minimums",
    "part_add",
    "part_mul",
    "part_max",
    "part_min",
    "row_prod",
    "col_prod",
    "row_expand_max",
    "row_expand_min",
    "col_expand_max",
    "col_expand_min",
    "expand_clone",
    "reinterpret_view",
    "get_block_num",
]


# ---- trigonometry ------------------------------------------------------------------------------------


def sin(input) -> Tile:  # noqa: A002 - PyPTO's name
    """Return the element-wise sine (radians) of an FP32 tile or tensor (``pl.cast`` other dtypes first)."""
    return _unary("sin", input)


def cos(input) -> Tile:  # noqa: A002 - PyPTO's name
    """Return the element-wise cosine (radians) of an FP32 tile or tensor."""
    return _unary("cos", input)


# ---- fmod --------------------------------------------------------------------------------------------


def fmod(lhs, rhs) -> Tile:
    """Return C's ``fmod(lhs, rhs)``: the remainder takes the dividend's sign (as ``torch.fmod``).

    ``rhs`` is a tile or a scalar.  Float tiles give NaN for a zero divisor;
    integer tiles truncate (C's ``%``) and give 0 for a zero divisor.
    ``pl.rem`` is the remainder with the divisor's sign (Python's ``%``).
    """
    current("pl.fmod")
    return _binary("fmod", lhs, rhs)


def fmods(lhs, rhs) -> Tile:
    """Return ``fmod(lhs, rhs)`` for a scalar ``rhs`` (as :func:`fmod`)."""
    current("pl.fmods")
    _no_tile(rhs, "fmods", "fmod")
    return _binary("fmod", lhs, rhs)


def _tile_fmod(lhs, rhs) -> Tile:
    """Return ``fmod(lhs, rhs)`` of two tiles (as :func:`fmod`); ``pl.tile.fmods`` takes a scalar."""
    current("pl.tile.fmod")
    if not isinstance(as_tile(rhs), Tile):
        raise compile_error(f"pl.tile.fmod takes two tiles, got {rhs!r} as rhs; use pl.tile.fmods for a scalar",
                            user_loc())
    return _binary("fmod", lhs, rhs)


# ---- max / min against a scalar ------------------------------------------------------------------------


def maximums(lhs, rhs) -> Tile:
    """Return the element-wise maximum of a tile and a scalar (NaN propagates)."""
    return _with_scalar("maximums", "maximum", lhs, rhs)


def minimums(lhs, rhs) -> Tile:
    """Return the element-wise minimum of a tile and a scalar (NaN propagates)."""
    return _with_scalar("minimums", "minimum", lhs, rhs)


# ---- partial ops -------------------------------------------------------------------------------------


def _part(op: str, src0, src1) -> Tile:
    current(f"pl.{op}")
    a = tile_operand(src0, f"pl.{op}", "the first source")
    b = tile_operand(src1, f"pl.{op}", "the second source")
    return record(Binary(op, a.var, b.var), f"pl.{op}")


def part_add(lhs, rhs) -> Tile:
    """Return ``lhs + rhs`` where both are valid, the valid one's element where only one is.

    The sources are two tiles (or tensors) of one shape and dtype; the result
    is valid where ``lhs`` is (PyPTO's ``TPARTADD``: a partially valid
    ``rhs`` leaves ``lhs`` outside its valid box).
    """
    return _part("part_add", lhs, rhs)


def part_mul(lhs, rhs) -> Tile:
    """Return ``lhs * rhs`` where both are valid, the valid one's element where only one is (as ``part_add``)."""
    return _part("part_mul", lhs, rhs)


def part_max(lhs, rhs) -> Tile:
    """Return ``maximum(lhs, rhs)`` where both are valid, the valid one's element where only one is."""
    return _part("part_max", lhs, rhs)


def part_min(lhs, rhs) -> Tile:
    """Return ``minimum(lhs, rhs)`` where both are valid, the valid one's element where only one is."""
    return _part("part_min", lhs, rhs)


def _tile_part_add(src0, src1) -> Tile:
    """``pl.tile.part_add(src0, src1)``: :func:`part_add` of two tiles."""
    return _part("part_add", src0, src1)


def _tile_part_mul(src0, src1) -> Tile:
    """``pl.tile.part_mul(src0, src1)``: :func:`part_mul` of two tiles."""
    return _part("part_mul", src0, src1)


def _tile_part_max(src0, src1) -> Tile:
    """``pl.tile.part_max(src0, src1)``: :func:`part_max` of two tiles."""
    return _part("part_max", src0, src1)


def _tile_part_min(src0, src1) -> Tile:
    """``pl.tile.part_min(src0, src1)``: :func:`part_min` of two tiles."""
    return _part("part_min", src0, src1)


# ---- product reductions --------------------------------------------------------------------------------


def row_prod(input, tmp_tile=None) -> Tile:  # noqa: A002 - PyPTO's name
    """Return the product of each row of a 2-D tile, shape ``[rows, 1]``.

    Floats multiply in double and round once; integers wrap as the dtype
    does.  ``tmp_tile`` is PyPTO's scratch tile for a tile operand (the
    input's dtype and rank; the sim needs none); a tensor takes none.  The
    product is over the valid region (a partial tile's padding is not read).
    """
    current("pl.row_prod")
    if isinstance(input, TensorArg) and tmp_tile is not None:
        raise compile_error("pl.row_prod of a tensor takes no tmp_tile (PyPTO allocates it when it lowers the "
                            "tensor op)", user_loc())
    return _reduce("row_prod", input, tmp_tile)


def col_prod(input) -> Tile:  # noqa: A002 - PyPTO's name
    """Return the product of each column of a 2-D tile, shape ``[1, cols]`` (as :func:`row_prod`)."""
    return _reduce("col_prod", input)


def _tile_row_prod(tile, tmp_tile=None) -> Tile:
    """``pl.tile.row_prod(tile, tmp_tile)``: :func:`row_prod` of a tile (``tmp_tile`` optional here)."""
    return _reduce("row_prod", tile, tmp_tile)


def _tile_col_prod(tile) -> Tile:
    """``pl.tile.col_prod(tile)``: :func:`col_prod` of a tile."""
    return _reduce("col_prod", tile)


# ---- broadcast max / min -------------------------------------------------------------------------------


def row_expand_max(lhs, rhs) -> Tile:
    """Return ``maximum(lhs[i, :], rhs[i, 0])`` for every row ``i``: ``rhs`` is a ``[rows, 1]`` vector."""
    return _expand("row_expand_max", "maximum", "row", lhs, rhs)


def row_expand_min(lhs, rhs) -> Tile:
    """Return ``minimum(lhs[i, :], rhs[i, 0])`` for every row ``i``."""
    return _expand("row_expand_min", "minimum", "row", lhs, rhs)


def col_expand_max(lhs, rhs) -> Tile:
    """Return ``maximum(lhs[:, j], rhs[0, j])`` for every column ``j``: ``rhs`` is a ``[1, cols]`` vector."""
    return _expand("col_expand_max", "maximum", "col", lhs, rhs)


def col_expand_min(lhs, rhs) -> Tile:
    """Return ``minimum(lhs[:, j], rhs[0, j])`` for every column ``j``."""
    return _expand("col_expand_min", "minimum", "col", lhs, rhs)


def _tile_row_expand_max(tile, row_vec) -> Tile:
    """``pl.tile.row_expand_max(tile, row_vec)``: :func:`row_expand_max`."""
    return _expand("row_expand_max", "maximum", "row", tile, row_vec)


def _tile_row_expand_min(tile, row_vec) -> Tile:
    """``pl.tile.row_expand_min(tile, row_vec)``: :func:`row_expand_min`."""
    return _expand("row_expand_min", "minimum", "row", tile, row_vec)


def _tile_col_expand_max(tile, col_vec) -> Tile:
    """``pl.tile.col_expand_max(tile, col_vec)``: :func:`col_expand_max`."""
    return _expand("col_expand_max", "maximum", "col", tile, col_vec)


def _tile_col_expand_min(tile, col_vec) -> Tile:
    """``pl.tile.col_expand_min(tile, col_vec)``: :func:`col_expand_min`."""
    return _expand("col_expand_min", "minimum", "col", tile, col_vec)


def _tensor_row_expand_max(tensor, row_vec) -> Tile:
    """``pl.tensor.row_expand_max(tensor, row_vec)``: :func:`row_expand_max`."""
    return _expand("row_expand_max", "maximum", "row", tensor, row_vec)


def _tensor_row_expand_min(tensor, row_vec) -> Tile:
    """``pl.tensor.row_expand_min(tensor, row_vec)``: :func:`row_expand_min`."""
    return _expand("row_expand_min", "minimum", "row", tensor, row_vec)


def _tensor_col_expand_max(tensor, col_vec) -> Tile:
    """``pl.tensor.col_expand_max(tensor, col_vec)``: :func:`col_expand_max`."""
    return _expand("col_expand_max", "maximum", "col", tensor, col_vec)


def _tensor_col_expand_min(tensor, col_vec) -> Tile:
    """``pl.tensor.col_expand_min(tensor, col_vec)``: :func:`col_expand_min`."""
    return _expand("col_expand_min", "minimum", "col", tensor, col_vec)


# ---- expand_clone ----------------------------------------------------------------------------------------


def expand_clone(src, target):
    """``src`` repeated to the shape of ``target`` (each dimension of ``src`` is 1 or ``target``'s).

    As in PyPTO, a ``target`` tensor the kernel writes (``pl.Out`` /
    ``pl.InOut``) receives the result, and is returned
    (``out = pl.expand_clone(x, out)``).  Any other ``target`` (an input
    tensor, or a tile) only gives the shape: the result is returned as a
    tile, to store or ``pl.assemble`` where it goes.  The result has
    ``src``'s dtype, or the wider float of the two (PyPTO's promotion).
    """
    current("pl.expand_clone")
    loc = user_loc()
    s = tile_operand(src, "pl.expand_clone", "src")
    if isinstance(target, TensorArg):
        shape, tdtype = tuple(target.shape), target.dtype
    else:
        t = tile_operand(target, "pl.expand_clone", "target")
        shape, tdtype = tuple(t.shape), t.dtype
    if len(s.shape) != len(shape) or any(a not in (1, b) for a, b in zip(s.shape, shape)):
        raise compile_error(f"pl.expand_clone: src {list(s.shape)} does not expand to the target's {list(shape)} "
                            "(same rank; each dimension 1 or equal)", loc)
    if s.dtype != tdtype:
        if not (s.dtype.is_float and tdtype.is_float):
            raise compile_error(f"pl.expand_clone: src is {s.dtype.name} and target {tdtype.name}; cast one of them",
                                loc)
        if tdtype.itemsize > s.dtype.itemsize:
            s = cast(s, tdtype)
    out = record(Broadcast(s.var, shape), "pl.expand_clone")
    if isinstance(target, TensorArg) and target.param.direction != "in":
        from ._memory import store

        if out.dtype != tdtype:
            out = cast(out, tdtype)
        return store(out, [0] * len(shape), target)
    return out


# ---- reinterpret_view ----------------------------------------------------------------------------------


def reinterpret_view(data, dtype, *, shape=None) -> Tile:
    """Return the same bytes read as ``dtype`` (a tile, or a tensor loaded whole); no value is converted.

    ``dtype`` must differ from the source's.  Without ``shape`` the last
    dimension scales by the ratio of the element sizes (an FP32 ``[8, 16]``
    tile read as INT16 is ``[8, 32]``); a ``shape`` given must hold the same
    number of bytes.  Bytes are little-endian, as on the device: element
    ``2k`` of an INT16 view of FP32 data is the low half of element ``k``.
    The source must be fully valid.
    """
    current("pl.reinterpret_view")
    loc = user_loc()
    x = tile_operand(data, "pl.reinterpret_view", "data")
    try:
        d = as_dtype(dtype)
    except PtoArgumentError as exc:
        raise compile_error(f"pl.reinterpret_view: {exc}", loc) from None
    if d == x.dtype:
        raise compile_error(f"pl.reinterpret_view: dtype must differ from the source's ({d.name})", loc)
    if shape is None:
        last = x.shape[-1] * x.dtype.itemsize
        if last % d.itemsize:
            raise compile_error(f"pl.reinterpret_view: the last dimension, {x.shape[-1]} x {x.dtype.name} = {last} "
                                f"bytes, does not divide into {d.name} elements; give shape=", loc)
        shape = (*x.shape[:-1], last // d.itemsize)
    elif not isinstance(shape, (list, tuple)) or not all(isinstance(s, int) and not isinstance(s, bool)
                                                          for s in shape):
        raise compile_error(f"pl.reinterpret_view: shape must be a list of ints, got {shape!r}", loc)
    return record(Bitcast(x.var, d, tuple(shape)), "pl.reinterpret_view")


def _tile_row_expand_add(tile, row_vec, tmp=None) -> Tile:
    """``pl.tile.row_expand_add(tile, row_vec, tmp=None)``: ``pl.row_expand_add`` (``tmp``, PyPTO's scratch, optional).

    ``row_vec`` is a ``[rows, 1]`` vector, or PyPTO's packed carrier: one
    32-byte block per row (``[rows, 32 // itemsize]``), whose lanes repeat
    along the row (``tile[i, j] + row_vec[i, j % lanes]``).
    """
    from ._layout import row_expand_add

    current("pl.tile.row_expand_add")
    if tmp is not None:
        tile_operand(tmp, "pl.tile.row_expand_add", "tmp")
    tl, v = tile_operand(tile, "pl.tile.row_expand_add", "tile"), tile_operand(row_vec, "pl.tile.row_expand_add",
                                                                              "row_vec")
    lanes = 32 // v.dtype.itemsize
    if (len(tl.shape) == 2 and len(v.shape) == 2 and v.shape == (tl.shape[0], lanes) and lanes > 1
            and v.dtype == tl.dtype):
        return _binary("add", tl, _repeat_lanes(v, tl))
    return row_expand_add(tl, v)


def _repeat_lanes(v: Tile, like: Tile) -> Tile:
    """``v``'s columns repeated along each row to ``like``'s width, valid where ``like`` is."""
    from ._layout import concat
    from ._memory import fillpad

    x = fillpad(v) if v.var.type.valid is not None else v  # the rows past its valid ones: zeros, unread
    while x.shape[1] < like.shape[1]:
        x = concat(x, x)
    return record(Slice(x.var, tuple(like.shape), (IConst(0), IConst(0)), like.var.type.valid),
                  "pl.tile.row_expand_add")


def _layout_tile_ops() -> dict:
    """The broadcast ops of ``_layout`` under their ``pl.tile`` names (PyPTO spells them there too)."""
    from . import _layout

    names = ("row_expand", "row_expand_sub", "row_expand_mul", "row_expand_div", "col_expand", "col_expand_add",
             "col_expand_sub", "col_expand_mul", "col_expand_div")
    return {n: getattr(_layout, n) for n in names}


#: ``pl.tile``'s spellings (PyPTO's tile-level parameter names).
TILE_OPS = {
    **_layout_tile_ops(),
    "row_expand_add": _tile_row_expand_add,
    "sin": sin,
    "cos": cos,
    "fmod": _tile_fmod,
    "fmods": fmods,
    "maximums": maximums,
    "minimums": minimums,
    "part_add": _tile_part_add,
    "part_mul": _tile_part_mul,
    "part_max": _tile_part_max,
    "part_min": _tile_part_min,
    "row_prod": _tile_row_prod,
    "col_prod": _tile_col_prod,
    "row_expand_max": _tile_row_expand_max,
    "row_expand_min": _tile_row_expand_min,
    "col_expand_max": _tile_col_expand_max,
    "col_expand_min": _tile_col_expand_min,
    "reinterpret_view": reinterpret_view,
}

#: ``pl.tensor``'s spellings.
TENSOR_OPS = {
    "sin": sin,
    "cos": cos,
    "fmod": fmod,
    "fmods": fmods,
    "part_add": part_add,
    "part_mul": part_mul,
    "part_max": part_max,
    "part_min": part_min,
    "row_prod": row_prod,
    "col_prod": col_prod,
    "row_expand_max": _tensor_row_expand_max,
    "row_expand_min": _tensor_row_expand_min,
    "col_expand_max": _tensor_col_expand_max,
    "col_expand_min": _tensor_col_expand_min,
    "expand_clone": expand_clone,
    "reinterpret_view": reinterpret_view,
    "get_block_num": get_block_num,
}
