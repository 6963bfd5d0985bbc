"""Layout and broadcast ops on tiles: reshape, slice, concat, assemble, row/col expand.

``pl.row_expand_sub(t, v)`` is ``t - v`` with ``v`` a ``[rows, 1]`` tile
broadcast along each row, and so on for the other ``*_expand_*`` ops (the
column forms take a ``[1, cols]`` tile); they record the same IR as the
broadcasting binary ops, after checking that the vector has the shape its
name promises.
"""

from __future__ import annotations

from .._scalars import is_int
from ..ir._diag import compile_error
from ..ir._nodes import Assemble, Binary, Broadcast, Concat, Reshape, Slice, Transpose
from ..errors import PtoKeywordError, PtoNotSupported
from ._memory import _tile, pad_name, record, valid_extents
from ._tracer import TensorArg, Tile, current, to_index, user_loc
from ._types import PadValue

__all__ = [
    "reshape",
    "transpose",
    "slice",
    "concat",
    "row_expand",
    "row_expand_add",
    "row_expand_sub",
    "row_expand_mul",
    "row_expand_div",
    "col_expand",
    "col_expand_add",
    "col_expand_sub",
    "col_expand_mul",
    "col_expand_div",
]


def _shape(shape, op: str) -> tuple[int, ...]:
    if not isinstance(shape, (list, tuple)) or not all(is_int(d) for d in shape):
        raise compile_error(f"{op}: shape must be a list of ints, got {shape!r}", user_loc())
    return tuple(shape)


def reshape(tile, shape) -> Tile:
    """Return the tile's elements, in row-major order, as a tile of ``shape`` (same count).

    A tensor reshaped in a program's orchestration gives a tensor to pass to
    kernels (see :func:`~pypto_async.language._program.orchestration_view`).
    """
    current("pl.reshape")
    from ._program import in_orchestration, orchestration_view

    if in_orchestration(tile):
        size = _shape(shape, "pl.reshape")
        return orchestration_view("reshape", tile, size, lambda x: reshape(x, size))
    return record(Reshape(_tile(tile, "pl.reshape").var, _shape(shape, "pl.reshape")), "pl.reshape")


def transpose(tile, axis1=0, axis2=1) -> Tile:
    """Return the tile with its dimensions ``axis1`` and ``axis2`` swapped (negative ones count from the end).

    A tile of any rank from 2 (PyPTO lowers an N-D one to 2-D transposes of each matrix).
    """
    current("pl.transpose")
    loc = user_loc()
    from ._program import in_orchestration, orchestration_view

    if in_orchestration(tile):  # a tensor in a program's orchestration: a tensor to pass to kernels
        rank = len(tile.shape)
        if not all(is_int(a) and -rank <= a < rank for a in (axis1, axis2)) or axis1 % rank == axis2 % rank:
            raise compile_error(f"pl.transpose swaps two different axes of the {rank}-D tensor {tile.name!r}, got "
                                f"axis1={axis1!r}, axis2={axis2!r}", loc)
        shape = list(tile.shape)
        shape[axis1 % rank], shape[axis2 % rank] = shape[axis2 % rank], shape[axis1 % rank]
        return orchestration_view("transpose", tile, shape, lambda x: transpose(x, axis1, axis2))
    tl = _tile(tile, "pl.transpose")
    rank = len(tl.shape)
    if not all(is_int(a) and -rank <= a < rank for a in (axis1, axis2)) or rank < 2:
        raise compile_error(f"pl.transpose swaps two axes of a tile of rank 2 or more, got axis1={axis1!r}, "
                            f"axis2={axis2!r} for the {rank}-D tile {list(tl.shape)}", loc)
    a, b = axis1 % rank, axis2 % rank
    if a == b:
        raise compile_error(f"pl.transpose: axis1 and axis2 are both axis {a} of {list(tl.shape)}", loc)
    return record(Transpose(tl.var, (min(a, b), max(a, b))), "pl.transpose")


def slice(tile, shape, offset, valid_shape=None, drop_dims=None, pad_value=None, clamp: bool = False) -> Tile:  # noqa: A001
    """Return the ``shape`` window of a tile at ``offset`` (ints or loop indices).

    PyPTO's ``drop_dims`` removes unit axes of ``shape`` from the result
    (``pl.slice(t, [1, 16, 64], [b, 0, 0], drop_dims=[0])`` is a 16 x 64
    tile); ``clamp=True`` (a tensor only) lets the window run off the
    tensor's end, its valid box cut back to the edge.

    ``valid_shape`` marks only a leading box of the result as data; with a
    ``pad_value`` (PyPTO's shorthand) the rest is filled right away.  A
    tensor sliced in the orchestration (outside every region) is PyPTO's
    tensor view, ``pl.tensor.slice``: a window that kernel calls and regions
    read or write, no data moved.  Inside a region a plain slice of a tensor
    (no ``valid_shape`` or ``pad_value``) is that window too, as PyPTO types
    it (a tensor): each op that reads it loads it, and ``pl.matmul`` takes
    ``a_trans`` / ``b_trans`` on it.
    """
    t = current("pl.slice")
    loc = user_loc()
    if isinstance(drop_dims, PadValue) or (pad_value is None and isinstance(drop_dims, (int, float))
                                           and not isinstance(drop_dims, bool)):
        drop_dims, pad_value = None, drop_dims  # the older order, slice(tile, shape, offset, valid_shape, pad_value)
    if not isinstance(clamp, bool):
        raise compile_error(f"pl.slice: clamp must be a bool, got {clamp!r}", loc)
    if clamp:
        if not isinstance(tile, TensorArg):
            raise compile_error("pl.slice: clamp=True is not supported for a Tile (an on-chip window has nothing to "
                                "clamp it to); clamp the read at the tensor: pl.load(..., clamp=True)", loc,
                                PtoKeywordError)
        if "at" not in t.frames:
            raise PtoNotSupported(f"{loc}: pl.slice(clamp=True) of a tensor in the orchestration: a window passed to "
                                  f"kernels keeps its extents here; clamp the tiles a kernel loads "
                                  f"(pl.load(..., clamp=True))")
        from ._memory import clamped_extents

        valid_shape = clamped_extents(tile, offset, valid_shape if valid_shape is not None else shape, "pl.slice")
    if drop_dims is not None and list(drop_dims):
        kept = _kept_dims(_shape(shape, "pl.slice"), drop_dims, loc)
        out = slice(tile, shape, offset, valid_shape, None, pad_value)
        if isinstance(out, TensorArg) and "at" in t.frames:  # a window in a region: the tile loaded from it
            from ._memory import load

            out = load(out, [0] * len(out.shape), list(out.shape))
        if isinstance(out, TensorArg):
            raise PtoNotSupported(f"{loc}: pl.slice(drop_dims=) of a tensor outside a region: a window keeps its "
                                  f"rank here; drop the axis of the tiles loaded from it")
        if out.var.type.valid is not None and any(v != out.shape[d] for d, v in enumerate(out.var.type.valid)
                                                  if d not in kept):
            raise compile_error(f"pl.slice: drop_dims {list(drop_dims)} names an axis that is not wholly valid", loc)
        return reshape(out, [out.shape[d] for d in kept])
    from ._unify import is_pending

    # A window (pl.tensor.slice): a tensor sliced in the orchestration, or a plain slice of one inside a
    # region, which PyPTO types as a tensor too (its reads load it; pl.matmul takes its b_trans=).
    if (isinstance(tile, TensorArg) and ("at" not in t.frames or (valid_shape is None and pad_value is None))
            or is_pending(tile)):
        if pad_value is not None:
            raise compile_error("pl.slice: pad_value= fills a tile; a tensor sliced in the orchestration is a "
                                "view of it (mark its data with valid_shape=, pad the tiles loaded from it)", loc)
        from .tensor import slice as tensor_slice

        return tensor_slice(tile, shape, offset, valid_shape)
    if isinstance(tile, TensorArg):  # in a region: a load of the window (of its valid box, with valid_shape)
        if valid_shape is not None:
            return _tensor_window_tile(tile, shape, offset, valid_shape, pad_value)
        from ._memory import load

        return load(tile, list(offset), list(_shape(shape, "pl.slice")))
    tl = _tile(tile, "pl.slice")
    offs = tuple(to_index(o) for o in offset)
    expr = Slice(tl.var, _shape(shape, "pl.slice"), offs, valid_extents(valid_shape, "pl.slice"))
    from ..ir._layout import check_tile_window

    check_tile_window(expr, t.ranges, loc)
    out = record(expr, "pl.slice")
    if expr.valid is None:  # a window of the tile: pl.matmul_acc into it writes the tile there (PyPTO's subview)
        out.view_of = (tl.var, offs)
    else:  # a partially valid window: accumulating into it is refused (it would not reach the tile)
        out.partial_view = True
    pad = None if pad_value is None else pad_name(pad_value, "pl.slice")
    if pad is not None and out.var.type.valid is not None:
        from ._memory import fillpad

        return fillpad(out, pad_value)
    return out


def _kept_dims(shape, drop_dims, loc) -> list[int]:
    """The axes ``pl.slice(drop_dims=)`` keeps: each dropped one a unit axis of ``shape``, one kept at least."""
    rank = len(shape)
    drop = set()
    for d in drop_dims:
        if isinstance(d, bool) or not is_int(d) or not -rank <= d < rank:
            raise compile_error(f"pl.slice: drop_dims entry {d!r} is not an axis of the {rank}-d window", loc)
        d = int(d) % rank
        if shape[d] != 1:
            raise compile_error(f"pl.slice: drop_dims names axis {d}, of extent {shape[d]} (only a unit axis is "
                                f"dropped)", loc)
        drop.add(d)
    kept = [d for d in range(rank) if d not in drop]
    if not kept:
        raise compile_error("pl.slice: drop_dims would drop every axis (a rank-0 tile is not supported)", loc)
    return kept


def _tensor_window_tile(tensor, shape, offset, valid_shape, pad_value) -> Tile:
    """``pl.slice(tensor, shape, offset, valid_shape=...)`` inside a region: the window loaded as a tile.

    As PyPTO's ``tensor.slice``, only the valid box is read, so it is what must lie inside the tensor
    (``offset + valid_shape``); the window may overhang the tensor's end, the rest being padding.  The
    result is never valid where the source is not (a window with a valid box of its own narrows it).
    """
    from ._memory import fillpad, load

    loc = user_loc()
    shape = _shape(shape, "pl.slice")
    if not isinstance(valid_shape, (list, tuple)) or len(valid_shape) != len(shape) or len(offset) != len(shape):
        raise compile_error(f"pl.slice: a {len(shape)}-D window needs {len(shape)} offsets and valid extents, got "
                            f"offset={list(offset)!r}, valid_shape={valid_shape!r}", loc)
    valid = list(valid_shape)
    source_valid = getattr(tensor, "valid", None)
    for d, v in enumerate(valid):
        if is_int(v) and not 0 <= v <= shape[d]:
            raise compile_error(f"pl.slice: valid_shape {d} is {v}, outside the window extent {shape[d]}", loc)
        src = source_valid[d] if source_valid is not None else None
        if is_int(v) and is_int(src) and is_int(offset[d]):
            valid[d] = min(v, max(src - offset[d], 0))
    tile = load(tensor, list(offset), list(shape), valid_shape=valid)
    if pad_value is not None and tile.var.type.valid is not None:
        return fillpad(tile, pad_value)
    return tile


def concat(src0, src1) -> Tile:
    """Return two tiles with equal row counts side by side: ``[rows, c0 + c1]``."""
    current("pl.concat")
    a, b = _tile(src0, "pl.concat", "src0"), _tile(src1, "pl.concat", "src1")
    return record(Concat(a.var, b.var), "pl.concat")


def tile_assemble(target, source, offset) -> Tile:
    """Return ``target`` with the window at ``offset`` replaced by ``source`` (``pl.tile.assemble``)."""
    t = current("pl.tile.assemble")
    loc = user_loc()
    tt = _tile(target, "pl.tile.assemble", "target")
    ts = _tile(source, "pl.tile.assemble", "source")
    expr = Assemble(tt.var, ts.var, tuple(to_index(o) for o in offset))
    out = record(expr, "pl.tile.assemble")
    from ..ir._layout import check_tile_window

    check_tile_window(expr, t.ranges, loc)
    return out


def _vector(tile, vec, op: str, along: str) -> tuple[Tile, Tile]:
    tl, v = _tile(tile, op, "the tile"), _tile(vec, op, "the vector")
    if len(tl.shape) != 2 or len(v.shape) != 2:
        raise compile_error(f"{op} needs 2-D tiles, got {list(tl.shape)} and {list(v.shape)}", user_loc())
    rows, cols = tl.shape
    want = (rows, 1) if along == "row" else (1, cols)
    if v.shape != want:
        kind = "a [rows, 1] row vector" if along == "row" else "a [1, cols] column vector"
        raise compile_error(f"{op}: expected {kind} {list(want)} for a {list(tl.shape)} tile, got {list(v.shape)}",
                            user_loc())
    return tl, v


def _expand(name: str, op: str, along: str, tile, vec) -> Tile:
    current(f"pl.{name}")
    tl, v = _vector(tile, vec, f"pl.{name}", along)
    return record(Binary(op, tl.var, v.var), f"pl.{name}")


def _broadcast(name: str, along: str, target, vec) -> Tile:
    current(f"pl.{name}")
    tl, v = _vector(target, vec, f"pl.{name}", along)
    return record(Broadcast(v.var, tl.shape), f"pl.{name}")


def row_expand(target, row_vec) -> Tile:
    """Return ``row_vec`` (``[rows, 1]``) broadcast to the shape of ``target``."""
    return _broadcast("row_expand", "row", target, row_vec)


def row_expand_add(tile, row_vec) -> Tile:
    """Return ``tile + row_vec``, the ``[rows, 1]`` vector broadcast along each row."""
    return _expand("row_expand_add", "add", "row", tile, row_vec)


def row_expand_sub(tile, row_vec) -> Tile:
    """Return ``tile - row_vec`` (a ``[rows, 1]`` vector)."""
    return _expand("row_expand_sub", "sub", "row", tile, row_vec)


def row_expand_mul(tile, row_vec) -> Tile:
    """Return ``tile * row_vec`` (a ``[rows, 1]`` vector)."""
    return _expand("row_expand_mul", "mul", "row", tile, row_vec)


def row_expand_div(tile, row_vec) -> Tile:
    """Return ``tile / row_vec`` (a ``[rows, 1]`` vector)."""
    return _expand("row_expand_div", "div", "row", tile, row_vec)


def col_expand(target, col_vec) -> Tile:
    """Return ``col_vec`` (``[1, cols]``) broadcast to the shape of ``target``."""
    return _broadcast("col_expand", "col", target, col_vec)


def col_expand_add(tile, col_vec) -> Tile:
    """Return ``tile + col_vec``, the ``[1, cols]`` vector broadcast down each column."""
    return _expand("col_expand_add", "add", "col", tile, col_vec)


def col_expand_sub(tile, col_vec) -> Tile:
    """Return ``tile - col_vec`` (a ``[1, cols]`` vector)."""
    return _expand("col_expand_sub", "sub", "col", tile, col_vec)


def col_expand_mul(tile, col_vec) -> Tile:
    """Return ``tile * col_vec`` (a ``[1, cols]`` vector)."""
    return _expand("col_expand_mul", "mul", "col", tile, col_vec)


def col_expand_div(tile, col_vec) -> Tile:
    """Return ``tile / col_vec`` (a ``[1, cols]`` vector)."""
    return _expand("col_expand_div", "div", "col", tile, col_vec)


def extract(src, index_row, index_col, shape, *, target_memory) -> Tile:
    """PyPTO's ``pl.tile.extract`` (TEXTRACT): the ``shape`` window of a 2-D tile at ``(index_row, index_col)``,
    placed in ``target_memory`` (as :func:`slice` then ``pl.move``)."""
    from ._memory import move

    current("pl.tile.extract")
    if isinstance(src, Tile) and len(src.shape) != 2:
        raise compile_error(f"pl.tile.extract takes a 2-D tile, got {list(src.shape)}", user_loc())
    if not isinstance(shape, (list, tuple)) or len(shape) != 2:
        raise compile_error(f"pl.tile.extract: shape must be [rows, cols], got {shape!r}", user_loc())
    return move(slice(src, list(shape), [index_row, index_col]), target_memory)
