"""Shape and dtype rules of every IR expression, and window checks.

The tracer calls these as each op is recorded (so a mistake is reported at the
user's line), and the ``infer_and_check`` pass calls them again over a whole
program (so a hand-built program is checked too).  Every failure is a
:class:`~pypto_async.errors.PtoCompileError` whose message starts with the
source location.
"""

from __future__ import annotations

from .._checks import is_int
from .._dtypes import BF16, BOOL, FP16, FP32, FP64, DataType
from .._signature import IN, SCALAR
from ..errors import PtoCompileError
from ._nodes import (
    BINARY_OPS,
    REDUCE_OPS,
    UNARY_OPS,
    Binary,
    Cast,
    Const,
    Full,
    IBin,
    IConst,
    IVar,
    Load,
    Loc,
    Matmul,
    Param,
    Reduce,
    ScalarRef,
    TileType,
    Unary,
    Var,
)

__all__ = [
    "compile_error",
    "broadcast_shapes",
    "infer_expr",
    "check_load",
    "check_store",
    "check_matmul_acc",
    "index_range",
    "compute_dtype",
    "MATMUL_DTYPES",
]

_FLOAT_ONLY = ("exp", "log", "sqrt", "rsqrt")
MATMUL_DTYPES = (FP32, FP64, FP16, BF16)


def compile_error(message: str, loc: Loc | None) -> PtoCompileError:
    """Return a PtoCompileError whose message starts with ``file:line:``.

    The error also carries ``file`` and ``line`` attributes (``None`` when
    the location is unknown).
    """
    text = f"{loc}: {message}" if loc is not None else message
    err = PtoCompileError(text)
    err.file = loc.file if loc is not None else None
    err.line = loc.line if loc is not None else None
    return err


def compute_dtype(dtype: DataType) -> DataType:
    """Return the dtype arithmetic on ``dtype`` is carried out in (FP16/BF16 → FP32)."""
    return FP32 if dtype in (FP16, BF16) else dtype


def broadcast_shapes(a: tuple[int, ...], b: tuple[int, ...], loc: Loc | None, what: str) -> tuple[int, ...]:
    """Return the numpy broadcast of two shapes, or raise a shape-mismatch error."""
    n = max(len(a), len(b))
    pa = (1,) * (n - len(a)) + tuple(a)
    pb = (1,) * (n - len(b)) + tuple(b)
    out = []
    for x, y in zip(pa, pb):
        if x != y and x != 1 and y != 1:
            raise compile_error(
                f"shape mismatch in {what}: {list(a)} and {list(b)} do not broadcast "
                "(dimensions must be equal or 1)",
                loc,
            )
        out.append(max(x, y))
    return tuple(out)


def _operand_type(x, loc: Loc | None):
    if isinstance(x, Var):
        return x.type
    if isinstance(x, (Const, ScalarRef)):
        return None
    raise compile_error(f"not a tile or scalar operand: {x!r}", loc)


def infer_expr(expr, params: dict[str, Param], loc: Loc | None) -> TileType:
    """Return the tile type of ``expr`` or raise PtoCompileError."""
    if isinstance(expr, Load):
        p = _tensor_param(expr.param, params, loc, "load from")
        return TileType(tuple(expr.shape), p.dtype)
    if isinstance(expr, Unary):
        if expr.op not in UNARY_OPS:
            raise compile_error(f"unknown unary op {expr.op!r}", loc)
        t = expr.x.type
        if t.dtype == BOOL or (expr.op in _FLOAT_ONLY and not t.dtype.is_float):
            raise compile_error(f"unsupported dtype {t.dtype.name} for {expr.op}", loc)
        return t
    if isinstance(expr, Binary):
        if expr.op not in BINARY_OPS:
            raise compile_error(f"unknown binary op {expr.op!r}", loc)
        ta, tb = _operand_type(expr.a, loc), _operand_type(expr.b, loc)
        if ta is None and tb is None:
            raise compile_error(f"{expr.op} needs at least one tile operand", loc)
        if ta is not None and tb is not None:
            if ta.dtype != tb.dtype:
                raise compile_error(
                    f"dtype mismatch in {expr.op}: {ta.dtype.name} and {tb.dtype.name} "
                    "(cast one operand with pl.cast)",
                    loc,
                )
            shape = broadcast_shapes(ta.shape, tb.shape, loc, expr.op)
            dtype = ta.dtype
        else:
            t = ta or tb
            shape, dtype = t.shape, t.dtype
        if dtype == BOOL and expr.op not in ("maximum", "minimum"):
            raise compile_error(f"unsupported dtype BOOL for {expr.op}", loc)
        return TileType(shape, dtype)
    if isinstance(expr, Cast):
        return TileType(expr.x.type.shape, expr.dtype)
    if isinstance(expr, Full):
        if not expr.shape or any(not is_int(d) or d <= 0 for d in expr.shape):
            raise compile_error(f"tile shape must be positive ints, got {list(expr.shape)}", loc)
        return TileType(tuple(expr.shape), expr.dtype)
    if isinstance(expr, Reduce):
        if expr.op not in REDUCE_OPS:
            raise compile_error(f"unknown reduction {expr.op!r}", loc)
        t = expr.x.type
        if len(t.shape) != 2:
            raise compile_error(f"{expr.op} needs a 2-D tile, got shape {list(t.shape)}", loc)
        if t.dtype == BOOL:
            raise compile_error(f"unsupported dtype BOOL for {expr.op}", loc)
        r, c = t.shape
        return TileType((r, 1) if expr.op.startswith("row") else (1, c), t.dtype)
    if isinstance(expr, Matmul):
        return _matmul_type(expr.a, expr.b, loc)
    raise compile_error(f"unknown expression {type(expr).__name__}", loc)


def _matmul_type(a: Var, b: Var, loc: Loc | None) -> TileType:
    ta, tb = a.type, b.type
    if len(ta.shape) != 2 or len(tb.shape) != 2:
        raise compile_error(f"matmul needs 2-D tiles, got {list(ta.shape)} and {list(tb.shape)}", loc)
    if ta.shape[1] != tb.shape[0]:
        raise compile_error(
            f"shape mismatch in matmul: {list(ta.shape)} @ {list(tb.shape)} "
            f"(inner dimensions {ta.shape[1]} and {tb.shape[0]} differ)",
            loc,
        )
    if ta.dtype != tb.dtype:
        raise compile_error(f"dtype mismatch in matmul: {ta.dtype.name} and {tb.dtype.name}", loc)
    if ta.dtype not in MATMUL_DTYPES:
        raise compile_error(f"unsupported dtype {ta.dtype.name} for matmul (use FP32, FP64, FP16 or BF16)", loc)
    return TileType((ta.shape[0], tb.shape[1]), FP64 if ta.dtype == FP64 else FP32)


def check_matmul_acc(acc: Var, a: Var, b: Var, loc: Loc | None) -> None:
    """Check ``acc += a @ b``: acc must have exactly the product's type."""
    t = _matmul_type(a, b, loc)
    if acc.type != t:
        raise compile_error(f"matmul accumulator is {acc.type}, but the product is {t}", loc)


def _tensor_param(name: str, params: dict[str, Param], loc: Loc | None, what: str) -> Param:
    p = params.get(name)
    if p is None:
        raise compile_error(f"unknown tensor parameter {name!r}", loc)
    if p.direction == SCALAR:
        raise compile_error(f"cannot {what} scalar parameter {name!r}", loc)
    return p


def index_range(e, ranges: dict[str, tuple[int, int]], loc: Loc | None) -> tuple[int, int]:
    """Return the inclusive (min, max) an index expression takes.

    ``ranges`` maps each loop / block index name to its inclusive range.
    """
    if isinstance(e, IConst):
        return e.value, e.value
    if isinstance(e, IVar):
        if e.name not in ranges:
            raise compile_error(f"index {e.name} used outside its loop", loc)
        return ranges[e.name]
    if isinstance(e, IBin):
        alo, ahi = index_range(e.a, ranges, loc)
        blo, bhi = index_range(e.b, ranges, loc)
        if e.op == "+":
            return alo + blo, ahi + bhi
        if e.op == "-":
            return alo - bhi, ahi - blo
        if e.op == "*":
            c = (alo * blo, alo * bhi, ahi * blo, ahi * bhi)
            return min(c), max(c)
        if e.op in ("//", "%") and blo == bhi and blo > 0:
            if e.op == "//":
                return alo // blo, ahi // blo
            if alo >= 0:
                return (alo % blo, ahi % blo) if ahi - alo < blo and alo % blo <= ahi % blo else (0, blo - 1)
        raise compile_error(f"cannot bound index expression with {e.op!r} (divide by a positive constant only)", loc)
    raise compile_error(f"offsets must be ints or loop indices, got {e!r}", loc)


def _check_window(p: Param, offsets, shape, ranges, loc: Loc | None, what: str) -> None:
    if len(offsets) != len(p.shape) or len(shape) != len(p.shape):
        raise compile_error(
            f"{what} {p.name!r}: tensor has rank {len(p.shape)}, but got {len(offsets)} offsets "
            f"and a {len(shape)}-D tile",
            loc,
        )
    for d, (off, size, dim) in enumerate(zip(offsets, shape, p.shape)):
        if not is_int(size) or size <= 0:
            raise compile_error(f"tile shape must be positive ints, got {list(shape)}", loc)
        lo, hi = index_range(off, ranges, loc)
        if lo < 0 or hi + size > dim:
            raise compile_error(
                f"{what} window outside tensor {p.name!r}: dimension {d} spans "
                f"[{lo}, {hi + size}) but the tensor has {dim} (shape {list(p.shape)})",
                loc,
            )


def check_load(expr: Load, params: dict[str, Param], ranges, loc: Loc | None) -> None:
    """Check that a load's window lies inside its tensor for every index value."""
    p = _tensor_param(expr.param, params, loc, "load from")
    _check_window(p, expr.offsets, expr.shape, ranges, loc, "load")


def check_store(value: Var, param: str, offsets, params: dict[str, Param], ranges, loc: Loc | None) -> None:
    """Check a store: writable parameter, matching dtype and rank, window inside."""
    p = _tensor_param(param, params, loc, "store to")
    if p.direction == IN:
        raise compile_error(
            f"store to In parameter {p.name!r}: annotate it pl.Out[pl.Tensor] or pl.InOut[pl.Tensor]",
            loc,
        )
    if value.type.dtype != p.dtype:
        raise compile_error(
            f"dtype mismatch in store: tile is {value.type.dtype.name}, tensor {p.name!r} is "
            f"{p.dtype.name} (cast the tile with pl.cast)",
            loc,
        )
    _check_window(p, offsets, value.type.shape, ranges, loc, "store")
