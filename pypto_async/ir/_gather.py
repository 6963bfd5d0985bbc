"""Gather and scatter: type rules, the element expression of a gather, the C of a scatter.

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

from pathlib import Path

from .._dtypes import BOOL, DataType
from ._diag import compile_error
from ._nodes import GATHER_MODES, GATHER_OOB, SCATTER_MODES, Gather, IConst, Loc, Scatter, TileType
from ._spaces import check_vector_operand
from ._valid import normalize, require_full

__all__ = ["infer_gather", "infer_scatter", "gather_element", "emit_scatter", "block_elems"]


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
    epb = block_elems(src.dtype)
    shape = (idx.shape[0], idx.shape[1] * epb)
    valid = None
    if idx.valid is not None:
        from ._nodes import IBin

        valid = normalize(shape, (idx.valid[0], IBin("*", idx.valid[1], IConst(epb))))
    return TileType(shape, src.dtype, "Vec", valid)


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


def _unsigned(value: str, dtype: DataType) -> str:
    """C of an index element as an unsigned 64-bit integer of its width (``-1`` is past every extent)."""
    bits = dtype.itemsize * 8
    return f"((uint64_t)(uint{bits}_t)({value}))"


def _policy(v: str, n: int, oob: str) -> tuple[str, str | None]:
    """(C of the in-range position, C of the in-range test or None) for unsigned index ``v`` of extent ``n``."""
    if oob == "wrap":
        return f"(int64_t)({v} % {n}u)", None
    clamped = f"(int64_t)({v} < {n}u ? {v} : {n - 1}u)"
    if oob == "zero":
        return clamped, f"({v} < {n}u)"
    return clamped, None


def _unravel(shape, k: str) -> list[str]:
    out, stride = [], 1
    dims = []
    for d in reversed(shape):
        dims.append((stride, d))
        stride *= d
    for stride, d in reversed(dims):
        out.append(f"(({k}) / {stride}) % {d}" if stride != 1 else f"({k}) % {d}")
    return out


def gather_element(e: Gather, dtype: DataType, el) -> str:
    """The C expression of one element of a gather (``el`` is the fused loop's :class:`~._cexpr.Element`)."""
    from ._cexpr import literal

    idx = el.idx
    src = e.src.type.shape
    ity = e.index.type.dtype
    if e.mode == "block":
        epb = block_elems(e.src.type.dtype)
        raw = el.at(e.index, [idx[0], f"{idx[1]} / {epb}"])
        n = _numel(src) // epb  # blocks in the source
        size = e.src.type.dtype.itemsize
        v = f"({_unsigned(raw, ity)} / {32 // size * size}u)"
        pos, ok = _policy(v, n, e.oob)
        k = f"{pos} * {epb} + {idx[1]} % {epb}"
        value = el.at(e.src, _unravel(src, k))
    else:
        v = _unsigned(el.operand(e.index) if e.mode != "rows" else el.at(e.index, _index_of_row(e, idx[0])), ity)
        if e.mode == "axis":
            pos, ok = _policy(v, src[e.dim], e.oob)
            dims = [pos if d == e.dim else idx[d] for d in range(len(src))]
            value = el.at(e.src, dims)
        elif e.mode == "flat":
            pos, ok = _policy(v, _numel(src), e.oob)
            value = el.at(e.src, _unravel(src, pos))
        else:
            pos, ok = _policy(v, src[0], e.oob)
            value = el.at(e.src, [pos, *idx[1:]])
    if ok is None:
        return value
    return f"({ok} ? {value} : {literal(0, dtype)})"


def _index_of_row(e: Gather, row: str) -> list[str]:
    shape = e.index.type.shape
    if len(shape) == 1:
        return [row]
    return [row, "0"] if shape[1] == 1 else ["0", row]


def emit_scatter(gen, out, e: Scatter, loc) -> None:
    """Emit the C of ``out = scatter(...)`` through the code generator ``gen`` (``_codegen._Gen``)."""
    from ._cexpr import ctype
    from ._codegen import _c_string

    t, s = e.target.type, e.src.type
    dst = gen.buffer(out)
    tgt, _, _ = gen.operand_src(e.target)
    src, _, _ = gen.operand_src(e.src)
    if e.mode == "box":
        _emit_box(gen, dst, tgt, src, e, loc)
        return
    i = e.index.type
    ind, _, _ = gen.operand_src(e.index)
    ct = ctype(t.dtype)
    n_out = _numel(t.shape)
    gen.uses_blk = gen.uses_fail = True
    where = f"{Path(loc.file).name}:{loc.line}: " if loc is not None else ""
    if gen.task is not None:
        where += f"task {gen.task}: "
    name = {"axis": "pl.scatter", "flat": "pl.tile.scatter", "rows": "pl.scatter_update"}[e.mode]
    gen.emit("{ /* scatter */")
    gen.depth += 1
    gen.emit(f"memcpy({dst}, {tgt}, {n_out} * sizeof(*{dst}));")
    if e.mode == "axis":
        rows, k = s.shape
        width = t.shape[1]
        limit = width
        gen.emit(f"for (int64_t r = 0; r < {rows}; r++) for (int64_t c = 0; c < {k}; c++) {{")
        gen.emit(f"    const uint64_t v = {_unsigned(f'{ind}[r * {k} + c]', i.dtype)};")
        target, value = f"{dst}[r * {width} + (int64_t)v]", f"{src}[r * {k} + c]"
    elif e.mode == "flat":
        n = _numel(s.shape)
        limit = n_out
        gen.emit(f"for (int64_t c = 0; c < {n}; c++) {{")
        gen.emit(f"    const uint64_t v = {_unsigned(f'{ind}[c]', i.dtype)};")
        target, value = f"{dst}[(int64_t)v]", f"{src}[c]"
    else:
        n, d = s.shape
        limit = t.shape[0]
        gen.emit(f"for (int64_t c = 0; c < {n}; c++) {{")
        gen.emit(f"    const uint64_t v = {_unsigned(f'{ind}[c]', i.dtype)};")
        target = None
    msg = _c_string(f"{where}{name}: an index is outside the destination (extent {limit})")
    gen.emit(f"    if (v >= {limit}u) {{ blk->fail(blk, PTO_EINVAL, {msg}); goto done; }}")
    if target is None:
        gen.emit(f"    memcpy({dst} + (int64_t)v * {d}, {src} + c * {d}, {d} * sizeof(*{dst}));")
    else:
        gen.emit(f"    {target} = ({ct}){value};")
    gen.emit("}")
    gen.depth -= 1
    gen.emit("}")


def _emit_box(gen, dst: str, tgt: str, src: str, e: Scatter, loc) -> None:
    """``dst = tgt`` with ``src``'s valid box written at ``e.offsets`` (extents and offsets may be runtime)."""
    from ._cexpr import index as c_index
    from ._codegen import _c_string
    from ._valid import extents

    t, s = e.target.type, e.src.type
    gen.uses_blk = gen.uses_fail = True
    where = f"{Path(loc.file).name}:{loc.line}: " if loc is not None else ""
    if gen.task is not None:
        where += f"task {gen.task}: "
    (r, c), (sr, sc) = t.shape, s.shape
    vr, vc = (c_index(x) for x in extents(s))
    r0, c0 = (c_index(x) for x in e.offsets)
    msg = _c_string(f"{where}pl.gather_row: the valid box (offset and extent) is outside the destination "
                    f"[{r}, {c}] or the window [{sr}, {sc}]")
    gen.emit("{ /* box write */")
    gen.depth += 1
    gen.emit(f"memcpy({dst}, {tgt}, {r * c} * sizeof(*{dst}));")
    gen.emit(f"const int64_t br = {r0}, bc = {c0}, nr = {vr}, nc = {vc};")
    gen.emit(f"if (nr < 0 || nc < 0 || nr > {sr} || nc > {sc} || br < 0 || bc < 0 || br + nr > {r} || "
             f"bc + nc > {c}) {{ blk->fail(blk, PTO_EINVAL, {msg}); goto done; }}")
    gen.emit(f"for (int64_t i = 0; i < nr; i++) memcpy({dst} + (br + i) * {c} + bc, {src} + i * {sc}, "
             f"(size_t)nc * sizeof(*{dst}));")
    gen.depth -= 1
    gen.emit("}")
