"""The C of a scatter statement (a gather's element expression is in :mod:`._cexpr`: it fuses).

A scatter copies its
target, then writes each source element where its index says, in row-major
order of the source; an index (or a box) outside the target fails the
launch with ``PTO_EINVAL`` and a message naming the op.
"""

from __future__ import annotations


from ._cexpr import ctype, unsigned_index
from ._cexpr import index as c_index
from ._nodes import Scatter
from ._valid import extents

__all__ = ["emit_scatter", "emit_scatter_store"]


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _c_string(text: str) -> str:
    """A C string literal of ``text`` (printable ASCII kept, anything else as '?'), as the code generator's."""
    safe = "".join(ch if 32 <= ord(ch) < 127 and ch not in '"\\?' else "?" for ch in text)
    return f'"{safe}"'


def emit_scatter(gen, out, e: Scatter, loc) -> None:
    """Emit the C of ``out = scatter(...)`` through the code generator ``gen`` (``_codegen._Gen``)."""
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
    where = gen.where(loc)
    name = {"axis": "pl.scatter", "flat": "pl.tile.scatter", "rows": "pl.scatter_update"}[e.mode]
    gen.emit("{ /* scatter */")
    gen.depth += 1
    gen.emit(f"memcpy({dst}, {tgt}, {n_out} * sizeof(*{dst}));")
    if e.mode == "axis":
        rows, k = s.shape
        width = t.shape[1]
        limit = width
        gen.emit(f"for (int64_t r = 0; r < {rows}; r++) for (int64_t c = 0; c < {k}; c++) {{")
        gen.emit(f"    const uint64_t v = {unsigned_index(f'{ind}[r * {k} + c]', i.dtype)};")
        target, value = f"{dst}[r * {width} + (int64_t)v]", f"{src}[r * {k} + c]"
    elif e.mode == "flat":
        n = _numel(s.shape)
        limit = n_out
        gen.emit(f"for (int64_t c = 0; c < {n}; c++) {{")
        gen.emit(f"    const uint64_t v = {unsigned_index(f'{ind}[c]', i.dtype)};")
        target, value = f"{dst}[(int64_t)v]", f"{src}[c]"
    else:
        n, d = s.shape
        limit = t.shape[0]
        gen.emit(f"for (int64_t c = 0; c < {n}; c++) {{")
        gen.emit(f"    const uint64_t v = {unsigned_index(f'{ind}[c]', i.dtype)};")
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
    t, s = e.target.type, e.src.type
    gen.uses_blk = gen.uses_fail = True
    where = gen.where(loc)
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


def emit_scatter_store(gen, s) -> None:
    """Emit ``pl.mscatter``: ``tensor.flat[index.flat[k]] = value.flat[k]`` in order, failing past the tensor."""
    q = gen.params[s.param]
    n_out = _numel(q.shape)
    n = _numel(s.value.type.shape)
    val, _, _ = gen.operand_src(s.value)
    ind, _, _ = gen.operand_src(s.index)
    gen.uses_blk = gen.uses_fail = True
    where = gen.where(s.loc)
    msg = _c_string(f"{where}pl.mscatter: an index is outside tensor {s.param!r} ({n_out} elements)")
    gen.emit("{ /* mscatter */")
    gen.depth += 1
    gen.emit(f"for (int64_t c = 0; c < {n}; c++) {{")
    gen.emit(f"    const uint64_t v = {unsigned_index(f'{ind}[c]', s.index.type.dtype)};")
    gen.emit(f"    if (v >= {n_out}u) {{ blk->fail(blk, PTO_EINVAL, {msg}); goto done; }}")
    gen.depth += 1
    gen.fused_store(s, f"{val}[c]", f"{gen.tensor_ptr(s.param)}[(int64_t)v]", "")
    gen.depth -= 1
    gen.emit("}")
    gen.depth -= 1
    gen.emit("}")
