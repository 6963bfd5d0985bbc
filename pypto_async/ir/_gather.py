"""Gather and scatter: their type rules (the C they compute is in :mod:`._gather_c`).

A :class:`~pypto_async.ir._nodes.Gather` is element-wise over its result
(it fuses): each element reads its index, then the source tile at the
position the mode derives from it.  Indices are read as unsigned integers
of their width (PyPTO's), so ``-1`` is past every extent; the ``oob``
policy then clamps (``"undefined"``, ``"clamp"``), wraps, or gives zero.
No element is read outside the source tile.

A :class:`~pypto_async.ir._nodes.Scatter` is a statement of its own: the
result starts as a copy of the target, then each source element is written
where its index says, in row-major order of the source (a later write to a
position wins).  An index outside the target fails the launch with
``PTO_EINVAL`` and a message naming the op; nothing is written outside it.
"""

from __future__ import annotations

from .._dtypes import BOOL, DataType
from .._signature import IN, SCALAR
from ._diag import compile_error
from ._nodes import GATHER_MODES, GATHER_OOB, SCATTER_MODES, Gather, IBin, IConst, Loc, Scatter, TileType
from ._spaces import check_vector_operand
from ._valid import normalize, require_full

__all__ = ["infer_gather", "infer_scatter", "block_elems", "check_scatter_store"]


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def block_elems(dtype: DataType) -> int:
    """Elements of ``dtype`` in one 32-byte block (``pl.gatherb``)."""
    return max(1, 32 // dtype.itemsize)


def _check_index(index, op: str, loc: Loc | None) -> None:
    dt = index.type.dtype
    if dt.is_float or dt == BOOL:
        raise compile_error(f"{op}: the index tile must be an integer tile (INT32, INT16, UINT32), got {dt.name}", loc)
    check_vector_operand(index, op, loc)


def infer_gather(e: Gather, loc: Loc | None) -> TileType:
    """Return the tile type of a gather or raise PtoCompileError."""
    op = "gather"
    if e.mode not in GATHER_MODES:
        raise compile_error(f"{op}: unknown mode {e.mode!r} (one of {', '.join(GATHER_MODES)})", loc)
    if e.oob not in GATHER_OOB:
        raise compile_error(f"{op}: gather_oob must be one of {', '.join(GATHER_OOB)}, got {e.oob!r}", loc)
    src, idx = e.src.type, e.index.type
    _check_index(e.index, op, loc)
    check_vector_operand(e.src, op, loc)
    require_full(e.src, op, loc)
    if e.mode == "axis":
        if len(idx.shape) != len(src.shape):
            raise compile_error(f"{op}: index rank {len(idx.shape)} must equal the source's {len(src.shape)}", loc)
        if not 0 <= e.dim < len(src.shape):
            raise compile_error(f"{op}: dim {e.dim} out of range for a {len(src.shape)}-d source", loc)
        for d, (a, b) in enumerate(zip(idx.shape, src.shape)):
            if d != e.dim and a > b:
                raise compile_error(f"{op}: index extent {a} of dimension {d} exceeds the source's {b} "
                                    f"(index {list(idx.shape)}, source {list(src.shape)})", loc)
        return TileType(idx.shape, src.dtype, "Vec", idx.valid)
    if e.mode == "flat":
        return TileType(idx.shape, src.dtype, "Vec", idx.valid)
    if e.mode == "rows":
        n = _numel(idx.shape)
        if len(idx.shape) > 2 or (len(idx.shape) == 2 and 1 not in idx.shape):
            raise compile_error(f"{op}: a row gather takes a [1, n] or [n, 1] index tile, got {list(idx.shape)}", loc)
        shape = (n, *src.shape[1:]) if len(src.shape) > 1 else (n,)
        valid = None
        if idx.valid is not None:
            k = 0 if len(idx.shape) == 1 or idx.shape[1] == 1 else 1
            valid = normalize(shape, (idx.valid[k], *(IConst(d) for d in shape[1:])))
        return TileType(shape, src.dtype, "Vec", valid)
    # block: one 32-byte block of src per offset column
    if len(idx.shape) != 2 or len(src.shape) != 2:
        raise compile_error(f"{op}: gatherb takes 2-D source and offset tiles, got {list(src.shape)} and "
                            f"{list(idx.shape)}", loc)
    if (src.shape[1] * src.dtype.itemsize) % 32:
        raise compile_error(f"{op}: gatherb's source rows must be whole 32-byte blocks, got {src.shape[1]} "
                            f"{src.dtype.name} elements", loc)
    out = e.dtype or src.dtype
    if e.dtype is not None and e.dtype != src.dtype:
        if _held_as_float(src.dtype) or out == BOOL or (out.is_float and out.itemsize == 1):
            raise compile_error(f"{op}: gatherb reads {src.dtype.name} bytes as {out.name}: not supported here "
                                f"(a {src.dtype.name} source is held as float by the sim, or the output is "
                                f"{out.name}); reinterpret integer or FP32 sources as integer, FP32, FP16 or BF16",
                                loc)
    epb = block_elems(out)
    shape = (idx.shape[0], idx.shape[1] * epb)
    valid = None
    if idx.valid is not None:
        valid = normalize(shape, (idx.valid[0], IBin("*", idx.valid[1], IConst(epb))))
    return TileType(shape, out, "Vec", valid)


def _held_as_float(dtype: DataType) -> bool:
    """Tiles of FP16, BF16 and FP8 hold float values in the sim's buffers, not their bytes."""
    return dtype.is_float and dtype.itemsize < 4


def infer_scatter(e: Scatter, loc: Loc | None) -> TileType:
    """Return the tile type of a scatter (the target's) or raise PtoCompileError."""
    op = "scatter"
    if e.mode not in SCATTER_MODES:
        raise compile_error(f"{op}: unknown mode {e.mode!r} (one of {', '.join(SCATTER_MODES)})", loc)
    t, s = e.target.type, e.src.type
    for v in (e.target, e.src):
        check_vector_operand(v, op, loc)
    if s.dtype != t.dtype:
        raise compile_error(f"{op}: src is {s.dtype.name} but the target is {t.dtype.name}", loc)
    if e.mode == "box":
        if e.index is not None or len(e.offsets) != len(t.shape) or len(s.shape) != len(t.shape) != 2:
            raise compile_error(f"{op}: a box write takes 2-D target and src tiles and one offset per dimension", loc)
        return TileType(t.shape, t.dtype, t.memory, t.valid)
    if e.index is None:
        raise compile_error(f"{op}: mode {e.mode!r} needs an index tile", loc)
    i = e.index.type
    _check_index(e.index, op, loc)
    require_full(e.src, op, loc)
    require_full(e.index, op, loc)
    if s.dtype != t.dtype:
        raise compile_error(f"{op}: src is {s.dtype.name} but the target is {t.dtype.name}", loc)
    if e.mode == "axis":
        if len(t.shape) != 2 or s.shape != i.shape or len(s.shape) != 2 or s.shape[0] > t.shape[0]:
            raise compile_error(f"{op}: a row-wise scatter takes a [rows, S] target and [r, K] src and index "
                                f"(r <= rows), got {list(t.shape)}, {list(s.shape)}, {list(i.shape)}", loc)
    elif e.mode == "flat":
        if s.shape != i.shape:
            raise compile_error(f"{op}: the index {list(i.shape)} must have src's shape {list(s.shape)}", loc)
    else:
        if len(t.shape) != 2 or len(s.shape) != 2 or s.shape[1] != t.shape[1] or _numel(i.shape) != s.shape[0]:
            raise compile_error(f"{op}: a row update takes a [rows, d] target, [n, d] src and an index of n "
                                f"elements, got {list(t.shape)}, {list(s.shape)}, {list(i.shape)}", loc)
    return TileType(t.shape, t.dtype, "Vec", t.valid)


def check_scatter_store(s, params, loc: Loc | None) -> None:
    """Check ``pl.mscatter``'s store (a :class:`~._nodes.Store` with an index): writable tensor, dtypes, shapes."""
    op = "pl.mscatter"
    p = params.get(s.param)
    if p is None or p.direction == SCALAR:
        raise compile_error(f"{op}: {s.param!r} is not a tensor parameter", loc)
    if p.direction == IN:
        raise compile_error(f"{op}: store to In parameter {p.name!r}: annotate it pl.Out[pl.Tensor] or "
                            f"pl.InOut[pl.Tensor]", loc)
    v, i = s.value.type, s.index.type
    if v.dtype != p.dtype:
        raise compile_error(f"{op}: src is {v.dtype.name} but tensor {p.name!r} is {p.dtype.name}", loc)
    _check_index(s.index, op, loc)
    check_vector_operand(s.value, op, loc)
    require_full(s.value, op, loc)
    require_full(s.index, op, loc)
    if v.shape != i.shape:
        raise compile_error(f"{op}: idx {list(i.shape)} must have src's shape {list(v.shape)}", loc)
    if s.atomic is not None:
        raise compile_error(f"{op}: an atomic scatter is not supported", loc)
