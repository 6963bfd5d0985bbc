"""Type rules of the layout ops: broadcast, reshape, slice, concat, assemble, fillpad.

Each is computed element by element over its result (so it fuses), reading
its tile operands at shifted or re-linearised positions.  Reshape, slice,
fillpad and assemble keep their (first) operand's memory space, as PyPTO's
view ops do; broadcast and concat compute in Vec.
"""

from __future__ import annotations

from .._dtypes import BOOL
from .._scalars import is_int
from ._bounds import check_window
from ._diag import compile_error
from ._nodes import (
    PAD_VALUES,
    Assemble,
    Bitcast,
    Broadcast,
    Concat,
    FillPad,
    IBin,
    IConst,
    Loc,
    Reshape,
    Slice,
    TileType,
    Transpose,
)
from ._spaces import check_vector_operand
from ._valid import check_extents, normalize, require_full

__all__ = ["infer_layout", "check_tile_window", "slice_valid"]


def _error(message: str, loc: Loc | None):
    return compile_error(message, loc)


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _check_shape(shape, op: str, loc: Loc | None) -> None:
    if not shape or any(not is_int(d) or d <= 0 for d in shape):
        raise _error(f"{op}: tile shape must be positive ints, got {list(shape)}", loc)


def infer_layout(expr, loc: Loc | None) -> TileType:
    """Return the tile type of a layout expression or raise PtoCompileError."""
    if isinstance(expr, Broadcast):
        t = expr.x.type
        check_vector_operand(expr.x, "pl.row_expand/col_expand", loc)
        _check_shape(expr.shape, "broadcast", loc)
        if len(t.shape) != len(expr.shape) or any(s not in (1, d) for s, d in zip(t.shape, expr.shape)):
            raise _error(f"cannot broadcast a {list(t.shape)} tile to {list(expr.shape)}", loc)
        broadcast_dims = tuple(d for d, s in enumerate(t.shape) if s != expr.shape[d])
        require_full(expr.x, "broadcast", loc, dims=broadcast_dims)
        valid = None
        if t.valid is not None:
            valid = normalize(expr.shape, tuple(
                IConst(expr.shape[d]) if d in broadcast_dims else t.valid[d] for d in range(len(t.shape))
            ))
        return TileType(tuple(expr.shape), t.dtype, "Vec", valid)
    if isinstance(expr, Reshape):
        t = expr.x.type
        check_vector_operand(expr.x, "pl.reshape", loc)
        _check_shape(expr.shape, "pl.reshape", loc)
        if _numel(expr.shape) != _numel(t.shape):
            raise _error(
                f"pl.reshape: {list(t.shape)} has {_numel(t.shape)} elements, {list(expr.shape)} has "
                f"{_numel(expr.shape)}",
                loc,
            )
        lift = len(expr.shape) - len(t.shape)
        if lift > 0 and tuple(expr.shape) == (1,) * lift + tuple(t.shape):
            # Leading unit dimensions only (a lower-rank tile stored into a higher-rank tensor): the same rows,
            # so a valid box stays the tile's.
            valid = None if t.valid is None else normalize(expr.shape, (IConst(1),) * lift + tuple(t.valid))
            return TileType(tuple(expr.shape), t.dtype, t.memory, valid)
        require_full(expr.x, "pl.reshape", loc)
        return TileType(tuple(expr.shape), t.dtype, t.memory)
    if isinstance(expr, Bitcast):
        return _bitcast_type(expr, loc)
    if isinstance(expr, Transpose):
        t = expr.x.type
        check_vector_operand(expr.x, "pl.transpose", loc)
        a, b = expr.axes
        if len(t.shape) < 2 or not (0 <= a < len(t.shape) and 0 <= b < len(t.shape)) or a == b:
            raise _error(f"pl.transpose swaps two different axes of a tile of rank 2 or more, got axes {a} and "
                         f"{b} of {list(t.shape)}", loc)
        shape = list(t.shape)
        shape[a], shape[b] = shape[b], shape[a]
        valid = None
        if t.valid is not None:  # a partially valid tile: its valid box, transposed (the rest holds no data)
            valid = list(t.valid)
            valid[a], valid[b] = valid[b], valid[a]
            valid = normalize(tuple(shape), tuple(valid))
        return TileType(tuple(shape), t.dtype, t.memory, valid)
    if isinstance(expr, Slice):
        t = expr.x.type
        check_vector_operand(expr.x, "pl.slice", loc)
        _check_shape(expr.shape, "pl.slice", loc)
        if len(expr.shape) != len(t.shape) or len(expr.offsets) != len(t.shape):
            raise _error(
                f"pl.slice: a {len(t.shape)}-D tile needs {len(t.shape)} sizes and offsets, got "
                f"{list(expr.shape)} and {len(expr.offsets)} offsets",
                loc,
            )
        shape = tuple(expr.shape)
        if expr.valid is not None:
            check_extents(shape, expr.valid, "pl.slice", loc)
        return TileType(shape, t.dtype, t.memory, normalize(shape, slice_valid(t, expr, shape)))
    if isinstance(expr, Concat):
        ta, tb = expr.a.type, expr.b.type
        for v in (expr.a, expr.b):
            check_vector_operand(v, "pl.concat", loc)
            require_full(v, "pl.concat", loc)
        if len(ta.shape) != 2 or len(tb.shape) != 2 or ta.shape[0] != tb.shape[0]:
            raise _error(
                f"pl.concat joins 2-D tiles with equal row counts, got {list(ta.shape)} and {list(tb.shape)}", loc
            )
        if ta.dtype != tb.dtype:
            raise _error(f"dtype mismatch in concat: {ta.dtype.name} and {tb.dtype.name}", loc)
        return TileType((ta.shape[0], ta.shape[1] + tb.shape[1]), ta.dtype, "Vec")
    if isinstance(expr, Assemble):
        tt, ts = expr.target.type, expr.source.type
        for v in (expr.target, expr.source):
            check_vector_operand(v, "pl.tile.assemble", loc)
            require_full(v, "pl.tile.assemble", loc)
        if tt.dtype != ts.dtype:
            raise _error(f"dtype mismatch in assemble: target {tt.dtype.name}, source {ts.dtype.name}", loc)
        if len(ts.shape) != len(tt.shape) or len(expr.offsets) != len(tt.shape):
            raise _error(
                f"pl.tile.assemble: a {list(ts.shape)} source and {len(expr.offsets)} offsets do not fit a "
                f"{len(tt.shape)}-D target",
                loc,
            )
        return TileType(tt.shape, tt.dtype, tt.memory)
    if isinstance(expr, FillPad):
        t = expr.x.type
        check_vector_operand(expr.x, "pl.fillpad", loc)
        if expr.pad not in PAD_VALUES:
            raise _error(f"pl.fillpad: pad value must be one of {', '.join(PAD_VALUES)}, got {expr.pad!r}", loc)
        return TileType(t.shape, t.dtype, t.memory)
    raise _error(f"unknown expression {type(expr).__name__}", loc)


def _clip(e, lo: int, hi: int):
    """``min(max(e, lo), hi)`` of an index expression, folded when it is constant."""
    if isinstance(e, IConst):
        return IConst(min(max(e.value, lo), hi))
    return IBin("min", IBin("max", e, IConst(lo)), IConst(hi))


def slice_valid(t: TileType, expr: Slice, shape) -> tuple | None:
    """A slice is valid where its source is (shifted by the offset, cut to the window) and it says so."""
    if t.valid is None:
        return expr.valid
    out = []
    for d, size in enumerate(shape):
        e = t.valid[d]
        if isinstance(e, IConst) and e.value == t.shape[d]:
            inherited = IConst(size)
        elif isinstance(e, IConst) and isinstance(expr.offsets[d], IConst):
            inherited = _clip(IConst(e.value - expr.offsets[d].value), 0, size)
        else:
            inherited = _clip(IBin("-", e, expr.offsets[d]), 0, size)
        asked = expr.valid[d] if expr.valid is not None else IConst(size)
        if isinstance(asked, IConst) and isinstance(inherited, IConst):
            out.append(IConst(min(asked.value, inherited.value)))
        elif isinstance(asked, IConst) and asked.value == size:
            out.append(inherited)
        else:
            out.append(IBin("min", asked, inherited))
    return tuple(out)


def check_tile_window(expr, ranges, loc: Loc | None) -> None:
    """Check that a slice reads, or an assemble writes, inside its tile for every index value."""
    if isinstance(expr, Slice):
        check_window("tile", f"%{expr.x.id}", expr.x.type.shape, expr.offsets, expr.shape, None, ranges, loc,
                     "pl.slice")
    elif isinstance(expr, Assemble):
        check_window("tile", f"%{expr.target.id}", expr.target.type.shape, expr.offsets, expr.source.type.shape,
                     None, ranges, loc, "pl.tile.assemble", runtime_ok=True)  # a runtime offset: checked as it runs


def _bitcast_type(expr: Bitcast, loc: Loc | None) -> TileType:
    """``pl.reinterpret_view``: a fully valid source, the same number of bytes, no BOOL on either side."""
    t = expr.x.type
    check_vector_operand(expr.x, "pl.reinterpret_view", loc)
    _check_shape(expr.shape, "pl.reinterpret_view", loc)
    if BOOL in (t.dtype, expr.dtype):
        raise _error("pl.reinterpret_view: BOOL tiles have no byte layout here (use an integer dtype)", loc)
    if expr.dtype == t.dtype:
        raise _error(f"pl.reinterpret_view: dtype must differ from the source's ({t.dtype.name})", loc)
    have, want = _numel(t.shape) * t.dtype.itemsize, _numel(expr.shape) * expr.dtype.itemsize
    if have != want:
        raise _error(f"pl.reinterpret_view: {t} holds {have} bytes, {list(expr.shape)} x {expr.dtype.name} "
                     f"{want}", loc)
    require_full(expr.x, "pl.reinterpret_view", loc)
    return TileType(tuple(expr.shape), expr.dtype, t.memory)
