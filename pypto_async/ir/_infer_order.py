"""Type rules of the index, sort and generator expressions (:class:`Generate`, :class:`Order`).

Called from :func:`pypto_async.ir._infer.infer_expr`; every failure is a
:class:`~pypto_async.errors.PtoCompileError` at the statement's location.
"""

from __future__ import annotations

from .._dtypes import FP16, FP32, INT16, INT32, UINT16, UINT32
from ._diag import compile_error
from ._nodes import GENERATE_KINDS, ORDER_OPS, Generate, IConst, Loc, Order, TileType
from ._spaces import check_vector_operand
from ._valid import check_extents, extents, normalize, require_full

__all__ = ["infer_generate", "infer_order", "CI_DTYPES", "RANDOM_DTYPES", "SORT_DTYPES", "ARG_DTYPES"]

CI_DTYPES = (INT16, INT32, UINT16, UINT32)
RANDOM_DTYPES = (INT32, UINT32)
SORT_DTYPES = (FP16, FP32)
ARG_DTYPES = (FP16, FP32)


def infer_generate(e: Generate, loc: Loc | None) -> TileType:
    if e.kind not in GENERATE_KINDS:
        raise compile_error(f"unknown generator {e.kind!r}", loc)
    shape = tuple(e.shape)
    op = {"ci": "pl.arange"}.get(e.kind, f"pl.{e.kind}")
    if not shape or any(not isinstance(d, int) or isinstance(d, bool) or d <= 0 for d in shape):
        raise compile_error(f"{op}: shape must be positive ints, got {list(shape)}", loc)
    want = {"ci": 1, "tri": 1, "random": 6}[e.kind]
    if len(e.args) != want:
        raise compile_error(f"{op} takes {want} integer argument(s), got {len(e.args)}", loc)
    if e.kind == "ci" and e.dtype not in CI_DTYPES:
        raise compile_error(f"{op}: dtype must be INT16, INT32, UINT16 or UINT32, got {e.dtype.name}", loc)
    if e.kind == "random":
        if e.dtype not in RANDOM_DTYPES:
            raise compile_error(f"{op}: dtype must be INT32 or UINT32, got {e.dtype.name}", loc)
        if e.option not in (7, 10):
            raise compile_error(f"{op}: rounds must be 7 or 10, got {e.option!r}", loc)
    if e.kind == "tri" and len(shape) != 2:
        raise compile_error(f"{op} needs a 2-D shape, got {list(shape)}", loc)
    if e.valid is not None:
        check_extents(shape, e.valid, op, loc)
    return TileType(shape, e.dtype, "Vec", normalize(shape, e.valid))


def _pairs(v, op: str, loc: Loc | None) -> None:
    t = v.type
    if t.dtype not in SORT_DTYPES:
        raise compile_error(f"{op}: the tile must be FP16 or FP32, got {t.dtype.name}", loc)
    check_vector_operand(v, op, loc)
    require_full(v, op, loc)


def infer_order(e: Order, loc: Loc | None) -> TileType:
    if e.op not in ORDER_OPS:
        raise compile_error(f"unknown sort op {e.op!r}", loc)
    op = f"pl.{e.op}" if e.op != "mrgsort_merge" else "pl.mrgsort"
    if e.op.startswith(("row_arg", "col_arg")):
        (x,) = e.xs
        t = x.type
        check_vector_operand(x, op, loc)
        if len(t.shape) != 2:
            raise compile_error(f"{op} needs a 2-D tile, got shape {list(t.shape)}", loc)
        if t.dtype not in ARG_DTYPES:
            raise compile_error(f"{op}: the tile must be FP16 or FP32 (PyPTO's), got {t.dtype.name}", loc)
        r, c = t.shape
        vr, vc = extents(t)
        if e.op.startswith("row"):
            return TileType((r, 1), INT32, "Vec", normalize((r, 1), (vr, IConst(1))))
        return TileType((1, c), INT32, "Vec", normalize((1, c), (IConst(1), vc)))
    if e.op == "sort32":
        src, idx = e.xs
        _pairs(src, op, loc)
        check_vector_operand(idx, op, loc)
        require_full(idx, op, loc)
        if idx.type.dtype not in (UINT32, INT32):
            raise compile_error(f"{op}: idx must be a UINT32 (or INT32) tile, got {idx.type.dtype.name}", loc)
        if tuple(idx.type.shape) != tuple(src.type.shape):
            raise compile_error(f"{op}: idx {list(idx.type.shape)} must have src's shape {list(src.type.shape)}", loc)
        if src.type.shape[-1] % 32:
            raise compile_error(f"{op}: the last dimension ({src.type.shape[-1]}) must be a multiple of 32", loc)
        shape = tuple(src.type.shape[:-1]) + (2 * src.type.shape[-1],)
        return TileType(shape, src.type.dtype, "Vec", None)
    if e.op == "mrgsort":
        (src,) = e.xs
        _pairs(src, op, loc)
        b = e.block_len
        if b is None:
            raise compile_error(f"{op}: block_len is required", loc)
        if isinstance(b, IConst) and (b.value <= 0 or b.value % 64):
            raise compile_error(f"{op}: block_len must be a positive multiple of 64, got {b.value}", loc)
        return TileType(tuple(src.type.shape), src.type.dtype, "Vec", None)
    if not 2 <= len(e.xs) <= 4:
        raise compile_error(f"{op} merges 2 to 4 tiles, got {len(e.xs)}", loc)
    first = e.xs[0].type
    for v in e.xs:
        _pairs(v, op, loc)
        if v.type.dtype != first.dtype or tuple(v.type.shape[:-1]) != tuple(first.shape[:-1]):
            raise compile_error(f"{op}: the sorted tiles must share dtype and all but the last dimension, got "
                                f"{', '.join(str(x.type) for x in e.xs)}", loc)
        if v.type.shape[-1] % 2:
            raise compile_error(f"{op}: {v.type} does not hold (value, index) pairs (odd last dimension)", loc)
    cols = sum(v.type.shape[-1] for v in e.xs)
    return TileType(tuple(first.shape[:-1]) + (cols,), first.dtype, "Vec", None)
