"""Arithmetic tile ops, reductions and matmul.  Each records one IR statement, checked at the caller's line.

Data movement is in ``_memory``, layout and broadcast ops in ``_layout``.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from .._scalars import is_int
from .._dtypes import BOOL, FP32, as_dtype
from ..errors import PtoArgumentError, PtoKeywordError, PtoNotSupported
from ..ir._infer import check_matmul_acc, compile_error
from ..ir._nodes import Param
from ..ir._nodes import (
    CAST_MODES,
    Assemble,
    Binary,
    Cast,
    Const,
    Full,
    Matmul,
    MatmulAcc,
    Reduce,
    ScalarBits,
    ScalarIndex,
    ScalarRef,
    Unary,
    Update,
)
from ._memory import _tile as tile_operand
from ._memory import as_tile
from ._memory import record
from ._tracer import Index, ScalarArg, TensorArg, Tile, current, user_loc

__all__ = [
    "add",
    "sub",
    "mul",
    "div",
    "maximum",
    "minimum",
    "adds",
    "subs",
    "muls",
    "divs",
    "maxs",
    "mins",
    "lrelu",
    "neg",
    "abs",
    "exp",
    "log",
    "sqrt",
    "rsqrt",
    "recip",
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
    return record(expr, f"pl.{op}")


def _tile(x, op: str, what: str = "operand") -> Tile:
    return tile_operand(x, f"pl.{op}", what)


def _scalar(x, dtype, op: str):
    """Convert a Python number or a scalar parameter to an operand of ``dtype``."""
    if isinstance(x, ScalarArg):
        return ScalarRef(x.name, dtype)
    from ._runtime_scalars import FloatScalar

    if isinstance(x, FloatScalar):  # a float the orchestration read: its task captured the bits
        return ScalarBits(x.index.expr, dtype)
    if isinstance(x, Index):  # a loop index or an integer expression of one: PyPTO's scalar operand, converted
        return ScalarIndex(x.expr, dtype)
    if isinstance(x, numbers.Real) and hasattr(x, "item"):
        x = x.item()  # a numpy scalar
    if not isinstance(x, (bool, int, float)):
        raise compile_error(f"pl.{op}: operand must be a tile, a scalar parameter, a loop index or a number, got {x!r}", user_loc())
    if dtype == BOOL:
        return Const(bool(x), dtype)
    if dtype.is_float:
        return Const(float(x), dtype)
    if isinstance(x, float) and (not math.isfinite(x) or x != int(x)):
        raise compile_error(f"pl.{op}: scalar {x!r} is not an integer, but the tile is {dtype.name}", user_loc())
    return Const(int(x), dtype)


def _promoted(t, a: Tile, b: Tile) -> tuple[Tile, Tile]:
    """Inside a ``pl.at`` region (PyPTO's tensor-level code), float operands of different widths promote.

    PyPTO's type deduction gives ``FP16 op FP32`` the wider dtype (its
    ``PromoteDataTypes``); the narrower operand is converted (exactly) first.
    A kernel body's tile ops keep refusing a mismatch (cast with ``pl.cast``).
    """
    da, db = a.dtype, b.dtype
    if (da == db or not (da.is_float and db.is_float) or da.itemsize == db.itemsize
            or getattr(t, "region_hints_now", None) is None):  # set while a pl.at region is traced
        return a, b
    return (cast(a, db), b) if da.itemsize < db.itemsize else (a, cast(b, da))


def _binary(op: str, a, b) -> Tile:
    t = current(f"pl.{op}")
    a, b = as_tile(a), as_tile(b)
    if isinstance(a, Tile) and isinstance(b, Tile):
        a, b = _promoted(t, a, b)
        return _record(op, Binary(op, a.var, b.var))
    if isinstance(a, Tile):
        return _record(op, Binary(op, a.var, _scalar(b, a.dtype, op)))
    if isinstance(b, Tile):
        return _record(op, Binary(op, _scalar(a, b.dtype, op), b.var))
    raise compile_error(f"pl.{op} needs at least one tile operand, got {a!r} and {b!r}", user_loc())


def add(a, b) -> Tile:
    """Return ``a + b`` (tiles broadcast; either side may be a scalar)."""
    return _binary("add", a, b)


def sub(a, b) -> Tile:
    """Return ``a - b``."""
    return _binary("sub", a, b)


def mul(a, b) -> Tile:
    """Return ``a * b``."""
    return _binary("mul", a, b)


def div(a, b, high_precision: bool = False) -> Tile:
    """Return ``a / b`` (on integer tiles rounded toward zero, as PyPTO's; 0 for a zero divisor).

    ``high_precision`` (PyPTO's choice of ptoas's high-precision division) is checked and changes
    nothing: the sim has one division, the correctly rounded one.
    """
    _precision("pl.div", high_precision)
    return _binary("div", a, b)


def _precision(op: str, high_precision) -> None:
    if not isinstance(high_precision, bool):
        raise compile_error(f"{op}: high_precision must be a bool, got {high_precision!r}", user_loc())


def maximum(a, b) -> Tile:
    """Return the element-wise maximum (NaN propagates)."""
    return _binary("maximum", a, b)


def minimum(a, b) -> Tile:
    """Return the element-wise minimum (NaN propagates)."""
    return _binary("minimum", a, b)


def _with_scalar(op: str, base: str, tile, scalar) -> Tile:
    """PyPTO's tile-and-scalar forms (``pl.adds(t, 2.0)``): the binary op with a scalar right operand."""
    current(f"pl.{op}")
    if isinstance(as_tile(scalar), Tile):
        raise compile_error(f"pl.{op} takes a tile and a scalar (a number or a pl.Scalar parameter), got "
                            f"{scalar!r} as the scalar; use pl.{base} for two tiles", user_loc())
    return _binary(base, tile, scalar)


def adds(tile, scalar) -> Tile:
    """Return ``tile + scalar``."""
    return _with_scalar("adds", "add", tile, scalar)


def subs(tile, scalar) -> Tile:
    """Return ``tile - scalar``."""
    return _with_scalar("subs", "sub", tile, scalar)


def muls(tile, scalar) -> Tile:
    """Return ``tile * scalar``."""
    return _with_scalar("muls", "mul", tile, scalar)


def divs(tile, scalar) -> Tile:
    """Return ``tile / scalar`` (rounded toward zero for integer tiles, as ``pl.div``)."""
    return _with_scalar("divs", "div", tile, scalar)


def maxs(tile, scalar) -> Tile:
    """Return the element-wise maximum of the tile and a scalar."""
    return _with_scalar("maxs", "maximum", tile, scalar)


def mins(tile, scalar) -> Tile:
    """Return the element-wise minimum of the tile and a scalar."""
    return _with_scalar("mins", "minimum", tile, scalar)


def lrelu(tile, slope) -> Tile:
    """Leaky ReLU: ``x`` where ``x > 0``, else ``slope * x`` (any slope: ``relu(x) - slope * relu(-x)``)."""
    current("pl.lrelu")
    if isinstance(as_tile(slope), Tile):
        raise compile_error(f"pl.lrelu takes a scalar slope, got {slope!r}", user_loc())
    return sub(relu(tile), mul(relu(neg(tile)), slope))


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


def log(x, high_precision: bool = False) -> Tile:
    """Return the natural logarithm (float tiles); ``high_precision`` as for :func:`div` (no effect)."""
    _precision("pl.log", high_precision)
    return _unary("log", x)


def sqrt(x) -> Tile:
    """Return the square root (float tiles)."""
    return _unary("sqrt", x)


def rsqrt(x, tmp=None, high_precision: bool = False) -> Tile:
    """Return ``1 / sqrt(x)`` (float tiles).

    PyPTO's high-precision forms (``pl.tile.rsqrt(x, tmp=scratch)``, ``pl.rsqrt(x, high_precision=True)``)
    are checked and compute the same value here: ``tmp`` must be a tile of ``x``'s shape and dtype.
    """
    if isinstance(tmp, bool):  # PyPTO's pl.rsqrt(input, high_precision): the flag second
        tmp, high_precision = None, tmp or high_precision
    _precision("pl.rsqrt", high_precision)
    if tmp is not None:
        if high_precision:
            raise compile_error("pl.rsqrt: pass the scratch tile tmp= or high_precision=True, not both", user_loc())
        if not isinstance(tmp, Tile):
            raise compile_error(f"pl.tile.rsqrt: tmp must be a scratch tile, got {tmp!r}", user_loc())
        tx = _tile(x, "rsqrt", "x")
        if (tuple(tmp.shape), tmp.dtype) != (tuple(tx.shape), tx.dtype):
            raise compile_error(f"pl.tile.rsqrt: tmp is {tmp.dtype.name} {list(tmp.shape)}, but the input is "
                                f"{tx.dtype.name} {list(tx.shape)} (the scratch tile must match it)", user_loc())
    return _unary("rsqrt", x)


def recip(x, high_precision=False) -> Tile:
    """Return ``1 / x`` (float tiles; ``high_precision`` changes nothing on the sim)."""
    return _unary("recip", x)


def relu(x) -> Tile:
    """Return ``max(x, 0)``."""
    return _unary("relu", x)


_CAST_MODE_NUMBERS = dict(enumerate(CAST_MODES))


def cast(x, target_type, mode="round") -> Tile:
    """Return the tile converted to ``target_type``, rounding as ``mode`` says.

    ``mode`` is one of PyPTO's names, ``"none" "rint" "round" "floor"
    "ceil" "trunc" "odd"`` (or its number 0-6): ``rint`` rounds to nearest
    even, ``round`` to nearest with ties away from zero, ``odd`` to the
    neighbour with an odd last bit (narrowing floats only).  It applies to
    float sources (to ints, or to a narrower float).  The default is
    PyPTO's, ``"round"``: ``pl.cast(t, pl.INT32)`` of 2.5 is 3, of -2.7 is -3.
    ``"none"`` converts as C does: floats to ints toward zero, narrowing
    floats to nearest even.
    """
    current("pl.cast")
    loc = user_loc()
    try:
        d = as_dtype(target_type)
    except PtoArgumentError as exc:
        raise compile_error(f"pl.cast: {exc}", loc) from None
    if (is_int(x) or isinstance(x, float)) and d.is_float:  # a number (a scalar parameter specialised on it)
        return float(np.array(x).astype(d.np_name)) if d.np_name in ("float16", "float32", "float64") else float(x)
    if isinstance(x, float) and d.name in _INT_RANGES:  # a float number to an integer dtype: rounded as `mode` says
        return _cast_number(x, d, _CAST_MODE_NUMBERS.get(mode, mode) if is_int(mode) else mode, loc)
    if isinstance(x, Index) or is_int(x):  # a runtime scalar or an int to an index type: the value itself
        if d.name not in ("INT64", "INT32", "UINT32"):  # UINT32: PyPTO's pl.arange start of an index
            raise compile_error(f"pl.cast of an index or a pl.read scalar gives pl.INDEX (INT64), INT32 or UINT32, "
                                f"not {d.name}", loc)
        return x
    if isinstance(x, ScalarArg):  # a scalar parameter as an operand of another dtype (int to float: exact)
        if x.dtype != d and (x.dtype.is_float or not d.is_float):
            raise compile_error(f"pl.cast of scalar {x.name!r} ({x.dtype.name}) to {d.name}: only an integer "
                                f"scalar to a float type converts exactly here; cast the tile instead", loc)
        return ScalarArg(Param(x.name, x.param.direction, (), d))
    if is_int(mode) and mode in _CAST_MODE_NUMBERS:
        mode = _CAST_MODE_NUMBERS[mode]
    elif mode not in CAST_MODES:
        raise compile_error(f"pl.cast: mode must be one of {', '.join(CAST_MODES)} (or 0-6), got {mode!r}", loc)
    return _record("cast", Cast(_tile(x, "cast").var, d, mode))


_INT_RANGES = {"INT8": (-2**7, 2**7 - 1), "INT16": (-2**15, 2**15 - 1), "INT32": (-2**31, 2**31 - 1),
               "INT64": (-2**63, 2**63 - 1), "UINT8": (0, 2**8 - 1), "UINT16": (0, 2**16 - 1),
               "UINT32": (0, 2**32 - 1), "UINT64": (0, 2**64 - 1)}


def _cast_number(x: float, d, mode, loc) -> int:
    """``pl.cast`` of a float number to an integer dtype: rounded by `mode`, as a tile's element is."""
    if not math.isfinite(x):
        raise compile_error(f"pl.cast of {x!r} to {d.name}: not a finite number", loc)
    rounders = {"none": math.trunc, "trunc": math.trunc, "floor": math.floor, "ceil": math.ceil,
                "rint": round, "round": lambda v: math.copysign(math.floor(math.fabs(v) + 0.5), v)}
    if mode not in rounders:
        raise compile_error(f"pl.cast of a number to {d.name} takes mode none, rint, round, floor, ceil or "
                            f"trunc, got {mode!r}", loc)
    v = int(rounders[mode](x))
    lo, hi = _INT_RANGES[d.name]
    if not lo <= v <= hi:
        raise compile_error(f"pl.cast of {x!r} to {d.name}: {v} is outside [{lo}, {hi}]", loc)
    return v


def full(shape, value=None, dtype=None) -> Tile:
    """Return a tile of ``shape`` filled with ``value`` (a number or scalar parameter).

    PyPTO's order, ``pl.full(shape, dtype, value)``, is taken too (a dtype
    second); ``dtype`` defaults to FP32.
    """
    current("pl.full")
    from .._dtypes import DataType, StorageDType

    if isinstance(value, (DataType, StorageDType)):  # PyPTO's positional order: full(shape, dtype, value)
        value, dtype = dtype, value
    if value is None:
        raise compile_error("pl.full: value is required (pl.full(shape, dtype=..., value=...))", user_loc())
    dtype = FP32 if dtype is None else dtype
    try:
        d = as_dtype(dtype)
    except PtoArgumentError as exc:
        raise compile_error(f"pl.full: {exc}", user_loc()) from None
    shape = tuple(shape)
    return _record("full", Full(shape, _scalar(value, d, "full"), d))


def zeros(shape, dtype=FP32) -> Tile:
    """Return a tile of ``shape`` filled with zeros."""
    return full(shape, 0, dtype)


def _reduce(op: str, x, tmp_tile=None) -> Tile:
    current(f"pl.{op}")
    tl = _tile(x, op)
    if tmp_tile is not None:
        # PyPTO's scratch tile for the device's reduction: the sim needs none, but checks it.
        tmp = _tile(tmp_tile, op, "tmp_tile")
        if tmp.dtype != tl.dtype or len(tmp.shape) != len(tl.shape):
            raise compile_error(
                f"pl.{op}: tmp_tile must have the input's dtype and rank: got {tmp.var.type}, input {tl.var.type}",
                user_loc(),
            )
    return _record(op, Reduce(op, tl.var, tree=op == "col_sum" and tmp_tile is not None))


def row_sum(x, tmp_tile=None) -> Tile:
    """Return the sum of each row of a 2-D tile, shape ``[rows, 1]``.

    ``tmp_tile`` is PyPTO's scratch tile (``pl.create_tile``, the input's
    dtype and rank); the sim does not need it, and the one-argument form
    works too.  A reduction reads the tile's valid region only (the rows and
    columns a ``valid_shape`` marks as data); ``pl.fillpad`` first makes the
    padding data that it reads too.
    """
    return _reduce("row_sum", x, tmp_tile)


def row_max(x, tmp_tile=None) -> Tile:
    """Return the maximum of each row, shape ``[rows, 1]`` (``tmp_tile`` as for ``row_sum``)."""
    return _reduce("row_max", x, tmp_tile)


def row_min(x, tmp_tile=None) -> Tile:
    """Return the minimum of each row, shape ``[rows, 1]`` (``tmp_tile`` as for ``row_sum``)."""
    return _reduce("row_min", x, tmp_tile)


def col_sum(x, tmp_tile=None) -> Tile:
    """Return the sum of each column of a 2-D tile, shape ``[1, cols]``.

    As the device's, the sum is in the tile's dtype, rounded at each step: the
    rows one after another, or, with ``tmp_tile``, pairwise (a binary tree).
    """
    return _reduce("col_sum", x, tmp_tile)


def col_max(x) -> Tile:
    """Return the maximum of each column, shape ``[1, cols]``."""
    return _reduce("col_max", x)


def col_min(x) -> Tile:
    """Return the minimum of each column, shape ``[1, cols]``."""
    return _reduce("col_min", x)


def matmul(a, b, acc=None, out_dtype=None, a_trans: bool = False, b_trans: bool = False,
           c_matrix_nz: bool = False, *, init_cond=None) -> Tile:
    """Return ``a @ b`` (in Acc); with ``acc``, add the product into ``acc`` in place and return it.

    FP32/FP16/BF16 operands accumulate in FP32, FP64 in FP64.  On tile
    operands an ``out_dtype`` must name that dtype (cast the result for
    another).  With a tensor operand (PyPTO's tensor-level matmul, each tensor
    loaded whole; the other operand may be a value computed in the region)
    ``out_dtype`` may be another dtype, which the accumulated result is
    converted to, and ``a_trans`` / ``b_trans`` on a tensor operand multiply
    by its transpose (``pl.matmul(q, k, b_trans=True)`` is ``q @ k.T``);
    tensors of rank 3 or more multiply as ``pl.batch_matmul`` (batch
    dimensions broadcast);
    ``c_matrix_nz`` names the result's fractal layout on the device, which
    holds the same values (the sim has no layouts).  As in PyPTO, those flags
    on a tile operand raise (a tile's transpose is ``pl.transpose``).
    Operands in Left/Right are read as they are; in Vec, Mat or Acc they are
    moved there implicitly.  The accumulating form updates ``acc`` in place,
    so ``acc`` carries its value across iterations of a ``pl.range`` loop.
    """
    current("pl.matmul")
    from .._dtypes import DataType

    if isinstance(acc, DataType):  # PyPTO's positional order: matmul(lhs, rhs, out_dtype, a_trans, b_trans, c_matrix_nz)
        if out_dtype is not None and not isinstance(out_dtype, bool):
            raise compile_error(f"pl.matmul: out_dtype given twice ({acc!r} and {out_dtype!r})", user_loc())
        if out_dtype is not None:  # the positions after it hold the flags
            a_trans, b_trans, c_matrix_nz = out_dtype, a_trans, b_trans
        acc, out_dtype = None, acc
    tensors = isinstance(a, TensorArg) or isinstance(b, TensorArg)  # a tensor-level matmul (a tile operand loaded)
    for flag, value in (("a_trans", a_trans), ("b_trans", b_trans), ("c_matrix_nz", c_matrix_nz)):
        if not isinstance(value, bool):
            raise compile_error(f"pl.matmul: {flag} must be a bool, got {value!r}", user_loc())
        if value and not tensors:  # PyPTO's tensor-level flags: a value computed in the region may be the operand
            raise compile_error(f"pl.matmul: {flag}=True takes tensor operands (a tile's transpose is "
                                f"pl.transpose / pl.tile.transpose_view)", user_loc(), PtoKeywordError)
    ta, tb = _tile(a, "matmul", "a"), _tile(b, "matmul", "b")
    if a_trans or b_trans:
        from ._ops_compose import transpose_trailing

        for flag, value, t in (("a_trans", a_trans, ta), ("b_trans", b_trans, tb)):
            if value and len(t.shape) < 2:
                raise compile_error(f"pl.matmul: {flag}=True swaps its operand's two trailing axes, but it is "
                                    f"{len(t.shape)}-D {list(t.shape)}", user_loc())
        ta = transpose_trailing(ta) if a_trans else ta
        tb = transpose_trailing(tb) if b_trans else tb
    if acc is not None:
        out = matmul_acc(acc, ta, tb, init_cond=init_cond)
    elif tensors and (len(ta.shape) > 2 or len(tb.shape) > 2):  # PyPTO: rank > 2 tensors are a batch_matmul
        from ._ops_compose import batch_matmul

        out = batch_matmul(ta, tb)
    else:
        out = _record("matmul", Matmul(ta.var, tb.var))
    if out_dtype is not None:
        try:
            want = as_dtype(out_dtype)
        except PtoArgumentError as exc:
            raise compile_error(f"pl.matmul: {exc}", user_loc()) from None
        if want != out.dtype and tensors and acc is None:
            out = cast(out, want)
        elif want != out.dtype:
            raise compile_error(
                f"pl.matmul: out_dtype={want.name}, but the accumulator of these operands is {out.dtype.name} "
                "(pl.cast the result)",
                user_loc(),
            )
    return out


def matmul_acc(acc, a, b, a_trans: bool = False, b_trans: bool = False, init_cond=None) -> Tile:
    """Add ``a @ b`` into ``acc`` in place and return ``acc``.

    ``a_trans`` / ``b_trans`` take tensor operands, as for :func:`matmul`.

    ``init_cond`` (PyPTO's split-K predicate): where it holds, ``acc`` is
    overwritten with ``a @ b`` instead (its old value, poison included, is
    not read). A Python bool picks one form at trace time; a runtime index
    condition (``k0 == 0``) traces both, as an ``if`` on it does.
    """
    if a_trans or b_trans:
        return matmul(a, b, acc=acc, a_trans=a_trans, b_trans=b_trans, init_cond=init_cond)
    t = current("pl.matmul_acc")
    loc = user_loc()
    tacc = _tile(acc, "matmul_acc", "acc")
    ta, tb = _tile(a, "matmul_acc", "a"), _tile(b, "matmul_acc", "b")
    if getattr(tacc, "partial_view", False):
        raise PtoNotSupported(f"{loc}: pl.matmul_acc into a pl.slice window taken with valid_shape=: the sim would "
                              "accumulate into a copy, not into the tile the window was cut from; slice without "
                              "valid_shape= (and pl.fillpad the result) or accumulate into a tile of its own and "
                              "pl.assemble it")
    if init_cond is None and max(len(tacc.shape), len(ta.shape), len(tb.shape)) > 2:  # PyPTO's batch_matmul_acc
        from ._ops_compose import batch_matmul_acc

        return batch_matmul_acc(tacc, ta, tb)
    check_matmul_acc(tacc.var, ta.var, tb.var, loc)
    if init_cond is None:
        t.append(MatmulAcc(tacc.var, ta.var, tb.var, loc))
        _write_view(t, tacc, loc)
        return tacc
    if len(tacc.shape) != 2:
        raise compile_error(f"pl.matmul_acc: init_cond takes 2-D operands (acc is {len(tacc.shape)}-D "
                            f"{list(tacc.shape)}); loop over the batch axis instead", loc)
    if not isinstance(init_cond, (bool, Index, ScalarArg)):
        raise compile_error(f"pl.matmul_acc: init_cond must be a bool or a scalar condition such as (k0 == 0), "
                            f"got {init_cond!r}", loc)
    from ._runtime_scalars import runtime_if

    branch = runtime_if(init_cond, {})

    def overwrite():
        prod = record(Matmul(ta.var, tb.var), "pl.matmul_acc")
        t.append(Update(tacc.var, prod.var, loc))

    if branch.static:
        overwrite() if branch.value else t.append(MatmulAcc(tacc.var, ta.var, tb.var, loc))
        _write_view(t, tacc, loc)
        return tacc
    branch.then()
    overwrite()
    branch.otherwise((), {})
    t.append(MatmulAcc(tacc.var, ta.var, tb.var, loc))
    branch.merge((), {})
    _write_view(t, tacc, loc)
    return tacc


def _write_view(t, acc: Tile, loc) -> None:
    """After ``pl.matmul_acc`` into a window of a tile (``pl.tile.slice`` of it), that tile's window holds it.

    PyPTO's slice of a tile is a view of its buffer (a subview), and the
    accumulating matmul writes its accumulator in place, so accumulating into
    a window accumulates into the tile the window was cut from.
    """
    view = getattr(acc, "view_of", None)
    if view is None:
        return
    parent, offsets = view
    whole = record(Assemble(parent, acc.var, offsets), "pl.matmul_acc")
    t.append(Update(parent, whole.var, loc))

