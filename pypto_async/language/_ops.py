"""Tile ops.  Each records one IR statement and checks it at the caller's line."""

from __future__ import annotations

import math
import numbers

from .._checks import is_int
from .._dtypes import BOOL, FP32, as_dtype
from ..errors import PtoArgumentError
from ..ir._infer import check_load, check_matmul_acc, check_store, compile_error, infer_expr
from ..ir._nodes import (
    Assign,
    Binary,
    Cast,
    Const,
    Full,
    Load,
    Matmul,
    MatmulAcc,
    Reduce,
    ScalarRef,
    Store,
    Unary,
)
from ._tracer import ScalarArg, TensorArg, Tile, current, to_index, user_loc

__all__ = [
    "load",
    "store",
    "add",
    "sub",
    "mul",
    "div",
    "maximum",
    "minimum",
    "neg",
    "abs",
    "exp",
    "log",
    "sqrt",
    "rsqrt",
    "relu",
    "cast",
    "full",
    "zeros",
    "row_sum",
    "row_max",
    "row_min",
    "col_sum",
    "col_max",
    "col_min",
    "matmul",
    "matmul_acc",
]


def _record(op: str, expr) -> Tile:
    t = current(f"pl.{op}")
    loc = user_loc()
    type_ = infer_expr(expr, t.params, loc)
    v = t.new_var(type_)
    t.append(Assign(v, expr, loc))
    return Tile(v)


def _tile(x, op: str, what: str = "operand") -> "Tile":
    if not isinstance(x, Tile):
        raise compile_error(f"pl.{op}: {what} must be a tile, got {x!r}", user_loc())
    return x


def _tensor(x, op: str) -> TensorArg:
    if not isinstance(x, TensorArg):
        raise compile_error(f"pl.{op}: expected a tensor parameter of the kernel, got {x!r}", user_loc())
    return x


def _scalar(x, dtype, op: str):
    """Convert a Python number or a scalar parameter to an operand of ``dtype``."""
    if isinstance(x, ScalarArg):
        return ScalarRef(x.name, dtype)
    if isinstance(x, numbers.Real) and hasattr(x, "item"):
        x = x.item()  # a numpy scalar
    if not isinstance(x, (bool, int, float)):
        raise compile_error(f"pl.{op}: operand must be a tile, a scalar parameter or a number, got {x!r}", user_loc())
    if dtype == BOOL:
        return Const(bool(x), dtype)
    if dtype.is_float:
        return Const(float(x), dtype)
    if isinstance(x, float) and (not math.isfinite(x) or x != int(x)):
        raise compile_error(f"pl.{op}: scalar {x!r} is not an integer, but the tile is {dtype.name}", user_loc())
    return Const(int(x), dtype)


def _binary(op: str, a, b) -> Tile:
    current(f"pl.{op}")
    if isinstance(a, Tile) and isinstance(b, Tile):
        return _record(op, Binary(op, a.var, b.var))
    if isinstance(a, Tile):
        return _record(op, Binary(op, a.var, _scalar(b, a.dtype, op)))
    if isinstance(b, Tile):
        return _record(op, Binary(op, _scalar(a, b.dtype, op), b.var))
    raise compile_error(f"pl.{op} needs at least one tile operand, got {a!r} and {b!r}", user_loc())


def load(tensor, offsets, shapes) -> Tile:
    """Load the window ``[offsets, offsets + shapes)`` of a tensor parameter as a tile.

    Offsets may be ints or loop/block indices; shapes are ints.  The window
    must lie inside the tensor for every index value.
    """
    t = current("pl.load")
    loc = user_loc()
    ten = _tensor(tensor, "load")
    offs = tuple(to_index(o) for o in offsets)
    shape = tuple(shapes)
    if not all(is_int(d) for d in shape):
        raise compile_error(f"pl.load: shapes must be ints, got {list(shape)}", loc)
    expr = Load(ten.name, offs, shape)
    check_load(expr, t.params, t.ranges, loc)
    type_ = infer_expr(expr, t.params, loc)
    v = t.new_var(type_)
    t.append(Assign(v, expr, loc))
    return Tile(v)


def store(tile, offsets, tensor):
    """Store a tile into ``tensor`` at ``offsets``; return the tensor.

    The tensor must be ``pl.Out`` or ``pl.InOut`` and have the tile's dtype.
    """
    t = current("pl.store")
    loc = user_loc()
    tl = _tile(tile, "store", "the value")
    ten = _tensor(tensor, "store")
    offs = tuple(to_index(o) for o in offsets)
    check_store(tl.var, ten.name, offs, t.params, t.ranges, loc)
    t.append(Store(tl.var, ten.name, offs, loc))
    return tensor


def add(a, b) -> Tile:
    """Return ``a + b`` (tiles broadcast; either side may be a scalar)."""
    return _binary("add", a, b)


def sub(a, b) -> Tile:
    """Return ``a - b``."""
    return _binary("sub", a, b)


def mul(a, b) -> Tile:
    """Return ``a * b``."""
    return _binary("mul", a, b)


def div(a, b) -> Tile:
    """Return ``a / b`` (floor division, 0 for a zero divisor, on integer tiles)."""
    return _binary("div", a, b)


def maximum(a, b) -> Tile:
    """Return the element-wise maximum (NaN propagates)."""
    return _binary("maximum", a, b)


def minimum(a, b) -> Tile:
    """Return the element-wise minimum (NaN propagates)."""
    return _binary("minimum", a, b)


def _unary(op: str, x) -> Tile:
    current(f"pl.{op}")
    return _record(op, Unary(op, _tile(x, op).var))


def neg(x) -> Tile:
    """Return ``-x``."""
    return _unary("neg", x)


def abs(x) -> Tile:  # noqa: A001
    """Return ``|x|``."""
    return _unary("abs", x)


def exp(x) -> Tile:
    """Return ``e**x`` (float tiles)."""
    return _unary("exp", x)


def log(x) -> Tile:
    """Return the natural logarithm (float tiles)."""
    return _unary("log", x)


def sqrt(x) -> Tile:
    """Return the square root (float tiles)."""
    return _unary("sqrt", x)


def rsqrt(x) -> Tile:
    """Return ``1 / sqrt(x)`` (float tiles)."""
    return _unary("rsqrt", x)


def relu(x) -> Tile:
    """Return ``max(x, 0)``."""
    return _unary("relu", x)


def cast(x, dtype) -> Tile:
    """Return the tile converted to ``dtype`` (floats to ints truncate toward zero)."""
    current("pl.cast")
    try:
        d = as_dtype(dtype)
    except PtoArgumentError as exc:
        raise compile_error(f"pl.cast: {exc}", user_loc()) from None
    return _record("cast", Cast(_tile(x, "cast").var, d))


def full(shape, value, dtype=FP32) -> Tile:
    """Return a tile of ``shape`` filled with ``value`` (a number or scalar parameter)."""
    current("pl.full")
    try:
        d = as_dtype(dtype)
    except PtoArgumentError as exc:
        raise compile_error(f"pl.full: {exc}", user_loc()) from None
    shape = tuple(shape)
    return _record("full", Full(shape, _scalar(value, d, "full"), d))


def zeros(shape, dtype=FP32) -> Tile:
    """Return a tile of ``shape`` filled with zeros."""
    return full(shape, 0, dtype)


def _reduce(op: str, x) -> Tile:
    current(f"pl.{op}")
    return _record(op, Reduce(op, _tile(x, op).var))


def row_sum(x) -> Tile:
    """Return the sum of each row of a 2-D tile, shape ``[rows, 1]``."""
    return _reduce("row_sum", x)


def row_max(x) -> Tile:
    """Return the maximum of each row, shape ``[rows, 1]``."""
    return _reduce("row_max", x)


def row_min(x) -> Tile:
    """Return the minimum of each row, shape ``[rows, 1]``."""
    return _reduce("row_min", x)


def col_sum(x) -> Tile:
    """Return the sum of each column of a 2-D tile, shape ``[1, cols]``."""
    return _reduce("col_sum", x)


def col_max(x) -> Tile:
    """Return the maximum of each column, shape ``[1, cols]``."""
    return _reduce("col_max", x)


def col_min(x) -> Tile:
    """Return the minimum of each column, shape ``[1, cols]``."""
    return _reduce("col_min", x)


def matmul(a, b, acc=None) -> Tile:
    """Return ``a @ b``; with ``acc``, add the product into ``acc`` in place and return it.

    FP32/FP16/BF16 operands give an FP32 result, FP64 gives FP64.  The
    accumulating form updates ``acc`` in place, so ``acc`` carries its value
    across iterations of a ``pl.range`` loop.
    """
    current("pl.matmul")
    ta, tb = _tile(a, "matmul", "a"), _tile(b, "matmul", "b")
    if acc is None:
        return _record("matmul", Matmul(ta.var, tb.var))
    return matmul_acc(acc, a, b)


def matmul_acc(acc, a, b) -> Tile:
    """Add ``a @ b`` into ``acc`` in place and return ``acc``."""
    t = current("pl.matmul_acc")
    loc = user_loc()
    tacc = _tile(acc, "matmul_acc", "acc")
    ta, tb = _tile(a, "matmul_acc", "a"), _tile(b, "matmul_acc", "b")
    check_matmul_acc(tacc.var, ta.var, tb.var, loc)
    t.append(MatmulAcc(tacc.var, ta.var, tb.var, loc))
    return tacc

