"""Shape, dtype, memory-space and valid-region rules of every IR expression; window checks.

The tracer calls these as each op is recorded (so a mistake is reported at the
user's line), and the ``infer_and_check`` pass calls them again over a whole
program (so a hand-built program is checked too).  Every failure is a
:class:`~pypto_async.errors.PtoCompileError` whose message starts with the
source location.
"""

from __future__ import annotations

from .._scalars import is_int
from .._dtypes import BF16, BOOL, FP8E4M3FN, FP8E8M0, FP16, FP32, FP64, INT8, INT16, INT32, UINT8, DataType
from .._signature import IN, SCALAR
from ._nodes import (
    BINARY_OPS,
    CAST_MODES,
    ACC_PHASES,
    CMP_TYPES,
    INT_BINARY_OPS,
    PART_OPS,
    Compare,
    Select,
    REDUCE_OPS,
    UNARY_OPS,
    Binary,
    Cast,
    Const,
    Full,
    IBin,
    IConst,
    Load,
    Loc,
    Matmul,
    Move,
    Param,
    Reduce,
    ScalarBits,
    ScalarIndex,
    ScalarRef,
    TileType,
    Unary,
    Var,
    Gather,
    Scatter,
)
from ._bounds import check_window, index_range
from ._gather import infer_gather, infer_scatter
from ._diag import compile_error
from ._layout import infer_layout
from ._nodes import Generate, Order
from ._infer_order import infer_generate, infer_order
from ._spaces import CREATE_TARGETS, CUBE_ONLY, LOAD_TARGETS, check_matmul_operand, check_move, check_space, check_vector_operand
from ._valid import agree, check_extents, extents, normalize, require_full

__all__ = [
    "compile_error",
    "broadcast_shapes",
    "infer_expr",
    "check_load",
    "check_store",
    "check_matmul_acc",
    "index_range",
    "check_window",
    "compute_dtype",
    "MATMUL_DTYPES",
    "mask_columns",
    "check_acc_phase",
]

_FLOAT_ONLY = ("exp", "log", "sqrt", "rsqrt", "recip")
MATMUL_DTYPES = (FP32, FP64, FP16, BF16, INT8)  # INT8 accumulates in INT32 (the cube's int path)
ATOMIC_DTYPES = (FP32, FP16, BF16, INT32, INT16, INT8)


def compute_dtype(dtype: DataType) -> DataType:
    """Return the dtype arithmetic on ``dtype`` is carried out in (FP16/BF16/FP8 → FP32)."""
    return FP32 if dtype in (FP16, BF16) or (dtype.is_float and dtype.itemsize == 1) else dtype


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
    if isinstance(x, (Const, ScalarRef, ScalarBits, ScalarIndex)):
        return None
    raise compile_error(f"not a tile or scalar operand: {x!r}", loc)


def infer_expr(expr, params: dict[str, Param], loc: Loc | None) -> TileType:
    """Return the tile type of ``expr`` or raise PtoCompileError."""
    if isinstance(expr, Load):
        p = _tensor_param(expr.param, params, loc, "load from")
        check_space(expr.memory, LOAD_TARGETS, "pl.load", loc)
        shape = tuple(expr.shape)
        if expr.valid is not None:
            check_extents(shape, expr.valid, "pl.load", loc)
        return TileType(shape, p.dtype, expr.memory, normalize(shape, expr.valid))
    if isinstance(expr, Unary):
        if expr.op not in UNARY_OPS:
            raise compile_error(f"unknown unary op {expr.op!r}", loc)
        t = expr.x.type
        check_vector_operand(expr.x, f"pl.{expr.op}", loc)
        if t.dtype == BOOL or (expr.op in _FLOAT_ONLY and not t.dtype.is_float):
            raise compile_error(f"unsupported dtype {t.dtype.name} for {expr.op}", loc)
        if expr.op == "not_" and t.dtype.is_float:
            raise compile_error(f"pl.not_ needs an integer tile, got {t.dtype.name}", loc)
        if expr.op in ("sin", "cos") and t.dtype != FP32:
            raise compile_error(f"pl.{expr.op} takes FP32 tiles only, got {t.dtype.name} "
                                "(pl.cast it to pl.FP32 first)", loc)
        return TileType(t.shape, t.dtype, "Vec", t.valid)
    if isinstance(expr, Binary):
        return _binary_type(expr, loc)
    if isinstance(expr, Cast):
        check_vector_operand(expr.x, "pl.cast", loc)
        if expr.mode not in CAST_MODES:
            raise compile_error(f"pl.cast: unknown rounding mode {expr.mode!r} (one of {', '.join(CAST_MODES)})", loc)
        if expr.mode == "odd" and not (expr.x.type.dtype.is_float and expr.dtype.is_float):
            raise compile_error("pl.cast: mode 'odd' (round to odd) narrows floats only", loc)
        return TileType(expr.x.type.shape, expr.dtype, "Vec", expr.x.type.valid)
    if isinstance(expr, Full):
        shape = tuple(expr.shape)
        _check_shape(shape, loc)
        check_space(expr.memory, CREATE_TARGETS, "pl.create_tile", loc)
        if expr.valid is not None:
            check_extents(shape, expr.valid, "pl.create_tile", loc)
        return TileType(shape, expr.dtype, expr.memory, normalize(shape, expr.valid))
    if isinstance(expr, Reduce):
        if expr.op not in REDUCE_OPS:
            raise compile_error(f"unknown reduction {expr.op!r}", loc)
        t = expr.x.type
        check_vector_operand(expr.x, f"pl.{expr.op}", loc)
        if len(t.shape) != 2:
            raise compile_error(f"{expr.op} needs a 2-D tile, got shape {list(t.shape)}", loc)
        if t.dtype == BOOL:
            raise compile_error(f"unsupported dtype BOOL for {expr.op}", loc)
        r, c = t.shape
        vr, vc = extents(t)
        if expr.op.startswith("row"):
            return TileType((r, 1), t.dtype, "Vec", normalize((r, 1), (vr, IConst(1))))
        return TileType((1, c), t.dtype, "Vec", normalize((1, c), (IConst(1), vc)))
    if isinstance(expr, Matmul):
        if expr.a_scale is not None or expr.b_scale is not None:
            op = "pl.matmul_mx" if expr.bias is None else "pl.matmul_mx_bias"
            t = matmul_mx_type(expr.a, expr.a_scale, expr.b, expr.b_scale, loc, op)
        else:
            t = _matmul_type(expr.a, expr.b, loc)
        check_acc_phase(expr.acc_phase, expr.a, loc)
        if expr.bias is not None:
            _check_bias(expr.bias, t, loc)
        return t
    if isinstance(expr, Compare):
        return _compare_type(expr, loc)
    if isinstance(expr, Select):
        return _select_type(expr, loc)
    if isinstance(expr, Move):
        check_move(expr.x, expr.memory, loc)
        t = expr.x.type
        return TileType(t.shape, t.dtype, expr.memory, t.valid)
    if isinstance(expr, (Generate, Order)):  # pl.arange / pl.tri / pl.random; argmax and the sorts
        return infer_generate(expr, loc) if isinstance(expr, Generate) else infer_order(expr, loc)
    if isinstance(expr, (Gather, Scatter)):
        return infer_gather(expr, loc) if isinstance(expr, Gather) else infer_scatter(expr, loc)
    return infer_layout(expr, loc)


def _check_shape(shape, loc: Loc | None) -> None:
    if not shape or any(not is_int(d) or d <= 0 for d in shape):
        raise compile_error(f"tile shape must be positive ints, got {list(shape)}", loc)


def _binary_type(expr: Binary, loc: Loc | None) -> TileType:
    if expr.op not in BINARY_OPS:
        raise compile_error(f"unknown binary op {expr.op!r}", loc)
    ta, tb = _operand_type(expr.a, loc), _operand_type(expr.b, loc)
    if ta is None and tb is None:
        raise compile_error(f"{expr.op} needs at least one tile operand", loc)
    for x in (expr.a, expr.b):
        if isinstance(x, Var):
            check_vector_operand(x, f"pl.{expr.op}", loc)
    if expr.op in PART_OPS:
        return _part_type(expr, ta, tb, loc)
    if ta is not None and tb is not None:
        if ta.dtype != tb.dtype:
            raise compile_error(
                f"dtype mismatch in {expr.op}: {ta.dtype.name} and {tb.dtype.name} "
                "(cast one operand with pl.cast)",
                loc,
            )
        shape = broadcast_shapes(ta.shape, tb.shape, loc, expr.op)
        dtype = ta.dtype
        valid = agree([ta, tb], shape, f"pl.{expr.op}", loc)
    else:
        t = ta or tb
        shape, dtype, valid = t.shape, t.dtype, t.valid
    if dtype == BOOL and expr.op not in ("maximum", "minimum"):
        raise compile_error(f"unsupported dtype BOOL for {expr.op}", loc)
    if expr.op in INT_BINARY_OPS and dtype.is_float:
        raise compile_error(f"pl.{expr.op} needs integer tiles, got {dtype.name}", loc)
    if expr.op == "prelu" and not dtype.is_float:
        raise compile_error(f"pl.prelu needs float tiles, got {dtype.name}", loc)
    return TileType(shape, dtype, "Vec", valid)


def _part_type(expr: Binary, ta, tb, loc: Loc | None) -> TileType:
    """``part_*``: two tiles of one shape and dtype; the result is valid where the first one is."""
    if ta is None or tb is None:
        raise compile_error(f"pl.{expr.op} takes two tiles (no scalar form)", loc)
    if ta.shape != tb.shape or ta.dtype != tb.dtype:
        raise compile_error(f"pl.{expr.op}: both sources must have one shape and dtype, got {TileType(ta.shape, ta.dtype)} "
                            f"and {TileType(tb.shape, tb.dtype)}", loc)
    if ta.dtype == BOOL:
        raise compile_error(f"unsupported dtype BOOL for {expr.op}", loc)
    return TileType(ta.shape, ta.dtype, "Vec", ta.valid)


def mask_columns(n: int) -> int:
    """Bytes per row of a packed predicate mask over ``n`` elements: ``ceil(n / 8)`` rounded up to 32."""
    nbytes = (n + 7) // 8
    return (nbytes + 31) // 32 * 32


def _packed_extent(e):
    if isinstance(e, IConst):
        return IConst(-(-e.value // 8))
    return IBin("//", IBin("+", e, IConst(7)), IConst(8))


def _elementwise_pair(a: Var, b, op: str, loc: Loc | None):
    """Shape, dtype and valid region of ``a`` with ``b`` (a tile or a scalar), as a binary op has them."""
    check_vector_operand(a, op, loc)
    ta = a.type
    if isinstance(b, Var):
        check_vector_operand(b, op, loc)
        tb = b.type
        if ta.dtype != tb.dtype:
            raise compile_error(f"dtype mismatch in {op}: {ta.dtype.name} and {tb.dtype.name} "
                                "(cast one operand with pl.cast)", loc)
        shape = broadcast_shapes(ta.shape, tb.shape, loc, op)
        return shape, ta.dtype, agree([ta, tb], shape, op, loc)
    _operand_type(b, loc)
    return ta.shape, ta.dtype, ta.valid


def _compare_type(expr: Compare, loc: Loc | None) -> TileType:
    if expr.cmp not in CMP_TYPES:
        raise compile_error(f"pl.cmp: unknown comparison {expr.cmp!r} (one of {', '.join(CMP_TYPES)})", loc)
    if not isinstance(expr.a, Var):
        raise compile_error("pl.cmp: the left operand must be a tile", loc)
    shape, _, valid = _elementwise_pair(expr.a, expr.b, "pl.cmp", loc)
    out = tuple(shape[:-1]) + (mask_columns(shape[-1]),)
    ext = extents(TileType(tuple(shape), UINT8, "Vec", valid))
    return TileType(out, UINT8, "Vec", normalize(out, tuple(ext[:-1]) + (_packed_extent(ext[-1]),)))


def _select_type(expr: Select, loc: Loc | None) -> TileType:
    m = expr.mask
    if not isinstance(m, Var) or not isinstance(expr.a, Var):
        raise compile_error("pl.sel: the mask and the first source must be tiles", loc)
    check_vector_operand(m, "pl.sel (mask)", loc)
    shape, dtype, valid = _elementwise_pair(expr.a, expr.b, "pl.sel", loc)
    mt = m.type
    if mt.dtype.is_float or mt.dtype == BOOL:
        raise compile_error(f"pl.sel: the mask must be an integer tile (a pl.cmp result), got {mt.dtype.name}", loc)
    need = -(-shape[-1] // 8)
    if (len(mt.shape) != len(shape) or any(x < y for x, y in zip(mt.shape[:-1], shape[:-1]))
            or mt.shape[-1] * mt.dtype.itemsize < need):
        raise compile_error(
            f"pl.sel: mask {mt} does not cover a {list(shape)} selection (it needs a row per row and "
            f"ceil({shape[-1]} / 8) = {need} bytes per row)",
            loc,
        )
    return TileType(tuple(shape), dtype, "Vec", valid)


def _matmul_type(a: Var, b: Var, loc: Loc | None, op: str = "pl.matmul") -> TileType:
    ta, tb = a.type, b.type
    if len(ta.shape) != 2 or len(tb.shape) != 2:
        raise compile_error(f"matmul needs 2-D tiles, got {list(ta.shape)} and {list(tb.shape)}", loc)
    check_matmul_operand(a, "Left", op, loc)
    check_matmul_operand(b, "Right", op, loc)
    if ta.shape[1] != tb.shape[0]:
        raise compile_error(
            f"shape mismatch in matmul: {list(ta.shape)} @ {list(tb.shape)} "
            f"(inner dimensions {ta.shape[1]} and {tb.shape[0]} differ)",
            loc,
        )
    if ta.dtype != tb.dtype:
        raise compile_error(f"dtype mismatch in matmul: {ta.dtype.name} and {tb.dtype.name}", loc)
    if ta.dtype not in MATMUL_DTYPES:
        raise compile_error(f"unsupported dtype {ta.dtype.name} for matmul (use FP32, FP64, FP16, BF16 or INT8)", loc)
    require_full(a, op, loc, dims=(1,))
    require_full(b, op, loc, dims=(0,))
    shape = (ta.shape[0], tb.shape[1])
    valid = normalize(shape, (extents(ta)[0], extents(tb)[1]))
    acc = {FP64: FP64, INT8: INT32}.get(ta.dtype, FP32)
    return TileType(shape, acc, "Acc", valid)


#: matmul_mx: the K elements one FP8E8M0 scale covers (the OCP MX block), and the cube's alignment of M, N, K.
MX_BLOCK = 32
_MX_ALIGN = {"M": 16, "N": 32, "K": 64}


def matmul_mx_type(a: Var, a_scale: Var | None, b: Var, b_scale: Var | None, loc: Loc | None,
                   op: str = "pl.matmul_mx") -> TileType:
    """The product of an MX block-scaled matmul: FP8E4M3FN data, FP8E8M0 scales, FP32 in Acc."""
    if a_scale is None or b_scale is None:
        raise compile_error(f"{op} needs both lhs_scale and rhs_scale", loc)
    for side, v in (("lhs", a), ("rhs", b)):
        dt = v.type.dtype
        if dt != FP8E4M3FN:
            hint = (" (native FP4 x FP4 is not supported: pl.cast the FP4 lhs to pl.FP8E4M3FN first)"
                    if dt.name == "FP4" else " (pl.cast it to pl.FP8E4M3FN first)")
            raise compile_error(f"{op}: {side} must be FP8E4M3FN, got {dt.name}{hint}", loc)
        if len(v.type.shape) != 2:
            raise compile_error(f"{op}: {side} must be a 2-D tile, got shape {list(v.type.shape)}", loc)
    check_matmul_operand(a, "Left", op, loc)
    check_matmul_operand(b, "Right", op, loc)
    (m, k), (kb, n) = a.type.shape, b.type.shape
    if k != kb:
        raise compile_error(f"{op}: shape mismatch {list(a.type.shape)} @ {list(b.type.shape)} "
                            f"(inner dimensions {k} and {kb} differ)", loc)
    for dim, value in (("M", m), ("N", n), ("K", k)):
        if value % _MX_ALIGN[dim]:
            raise compile_error(f"{op}: {dim}={value} must be a multiple of {_MX_ALIGN[dim]} (the cube's MX tile)", loc)
    groups = k // MX_BLOCK
    for side, s, want, slot in (("lhs_scale", a_scale, (m, groups), "LeftScale"),
                                ("rhs_scale", b_scale, (groups, n), "RightScale")):
        st = s.type
        if st.dtype != FP8E8M0:
            raise compile_error(f"{op}: {side} must be FP8E8M0, got {st.dtype.name}", loc)
        if tuple(st.shape) != want:
            raise compile_error(f"{op}: {side} must be {list(want)} (one scale per {MX_BLOCK} elements of K), "
                                f"got {list(st.shape)}", loc)
        if st.memory in CUBE_ONLY and st.memory != slot:
            raise compile_error(f"{op}: {side} %{s.id} is in {st.memory}, but the cube reads it from {slot} "
                                f"(pl.move it to pl.Mem.{slot})", loc)
        require_full(s, op, loc)
    require_full(a, op, loc, dims=(1,))
    require_full(b, op, loc, dims=(0,))
    shape = (m, n)
    return TileType(shape, FP32, "Acc", normalize(shape, (extents(a.type)[0], extents(b.type)[1])))


def check_acc_phase(acc_phase, a: Var, loc: Loc | None) -> None:
    """A gemv's ``acc_phase`` (None for a matmul) is one of PyPTO's values, and its lhs a ``[1, K]`` row."""
    if acc_phase is None:
        return
    if acc_phase not in ACC_PHASES:
        raise compile_error(f"pl.gemv: acc_phase must be one of {', '.join(ACC_PHASES)}, got {acc_phase!r}", loc)
    if len(a.type.shape) != 2 or a.type.shape[0] != 1:
        raise compile_error(f"pl.gemv: lhs must be a [1, K] row vector, got {list(a.type.shape)}", loc)


def _check_bias(bias: Var, t: TileType, loc: Loc | None) -> None:
    """A matmul bias: ``[1, n]`` in the product's dtype, fully valid, in Bias, Vec or Mat (not Left/Right/Acc)."""
    bt = bias.type
    if bt.memory in ("Left", "Right", "Acc"):
        raise compile_error(f"pl.matmul_bias: the bias %{bias.id} is in {bt.memory}; the cube reads it from Bias "
                            "(pl.move it to pl.Mem.Bias, or keep it in Vec or Mat)", loc)
    want = (1, t.shape[1])
    if tuple(bt.shape) != want or bt.dtype != t.dtype:
        raise compile_error(f"pl.matmul_bias: the bias must be {TileType(want, t.dtype)} (the product's row, in the "
                            f"accumulator dtype), got {TileType(bt.shape, bt.dtype)}", loc)
    require_full(bias, "pl.matmul_bias", loc)


def check_matmul_acc(acc: Var, a: Var, b: Var, loc: Loc | None, a_scale: Var | None = None,
                     b_scale: Var | None = None) -> None:
    """Check ``acc += a @ b``: acc must have the product's shape and dtype.

    The accumulator may live in Acc (a matmul result), Vec or Mat (moved to
    Acc implicitly); all three operands must be fully valid.  With scales it
    is ``pl.matmul_mx_acc``.
    """
    mx = a_scale is not None or b_scale is not None
    op = "pl.matmul_mx_acc" if mx else "pl.matmul_acc"
    t = matmul_mx_type(a, a_scale, b, b_scale, loc, op) if mx else _matmul_type(a, b, loc, "pl.matmul_acc")
    check_vector_operand(acc, f"{op} (accumulator)", loc)
    for v in (acc, a, b):
        require_full(v, op, loc)
    if (acc.type.shape, acc.type.dtype) != (t.shape, t.dtype):
        want = TileType(t.shape, t.dtype)
        raise compile_error(f"matmul accumulator is {TileType(acc.type.shape, acc.type.dtype)}, but the product is "
                            f"{want}", loc)


def _tensor_param(name: str, params: dict[str, Param], loc: Loc | None, what: str) -> Param:
    p = params.get(name)
    if p is None:
        raise compile_error(f"unknown tensor parameter {name!r}", loc)
    if p.direction == SCALAR:
        raise compile_error(f"cannot {what} scalar parameter {name!r}", loc)
    return p


def _check_window(p: Param, offsets, shape, valid, ranges, loc: Loc | None, what: str) -> None:
    check_window("tensor", p.name, p.shape, offsets, shape, valid, ranges, loc, what)


def check_load(expr: Load, params: dict[str, Param], ranges, loc: Loc | None) -> None:
    """Check that a load's window (its valid box, if given) lies inside its tensor."""
    p = _tensor_param(expr.param, params, loc, "load from")
    _check_window(p, expr.offsets, expr.shape, expr.valid, ranges, loc, "load")


def check_store(value: Var, param: str, offsets, params: dict[str, Param], ranges, loc: Loc | None,
                atomic: str | None = None) -> None:
    """Check a store: writable parameter, matching dtype and rank, valid box inside.

    ``atomic="add"`` needs a dtype the device adds atomically (FP32, FP16,
    BF16, INT32, INT16, INT8).
    """
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
    check_vector_operand(value, "pl.store", loc)
    if atomic not in (None, "add"):
        raise compile_error(f"pl.store: unknown atomic mode {atomic!r}", loc)
    if atomic == "add" and value.type.dtype not in ATOMIC_DTYPES:
        raise compile_error(
            f"atomic add of {value.type.dtype.name}: the device adds FP32, FP16, BF16, INT32, INT16 and INT8 only", loc
        )
    _check_window(p, offsets, value.type.shape, value.type.valid, ranges, loc, "store")
