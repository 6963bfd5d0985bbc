"""C for the argmax/argmin reductions and the sorts (:class:`~pypto_async.ir._nodes.Order`).

Each is one statement of its own (not fused): plain loops over the source
tiles' buffers.  ``sort32`` and ``mrgsort`` work on ``(value, index)`` pairs
held in a float buffer: the value at even columns, the index's bits at odd
ones (an FP32 tile holds the index's 32 bits, an FP16 tile its low 16 bits,
each as that dtype's bit pattern); a merge compares the values and moves
the pairs whole, so the index bits pass through untouched.

:data:`PHILOX_C` is the counter-based generator ``pl.random`` calls
(:class:`~pypto_async.ir._nodes.Generate`), added to a kernel that uses it.
"""

from __future__ import annotations


from .._dtypes import FP16
from ._cexpr import ctype, index
from ._nodes import IConst, Order, Var
from ._valid import extents
from ._work import VEC_REDUCE, fixpipe_work

__all__ = ["emit_order", "PHILOX_C", "order_work"]

#: Philox4x32 (Salmon et al., Random123): word ``p % 4`` of the block at counter ``c + p / 4`` (a 128-bit add).
PHILOX_C = """\
static inline uint32_t pto_philox4x32(uint32_t k0, uint32_t k1, uint32_t c0, uint32_t c1, uint32_t c2,
                                      uint32_t c3, int rounds, uint64_t p)
{
    const uint64_t q = p >> 2;
    const uint64_t lo = (((uint64_t)c1 << 32) | c0) + q;
    const uint64_t hi = (((uint64_t)c3 << 32) | c2) + (lo < q);
    uint32_t x0 = (uint32_t)lo, x1 = (uint32_t)(lo >> 32), x2 = (uint32_t)hi, x3 = (uint32_t)(hi >> 32);
    for (int r = 0; r < rounds; r++) {
        const uint64_t m0 = (uint64_t)0xD2511F53u * x0, m1 = (uint64_t)0xCD9E8D57u * x2;
        const uint32_t y0 = (uint32_t)(m1 >> 32) ^ x1 ^ k0, y2 = (uint32_t)(m0 >> 32) ^ x3 ^ k1;
        x1 = (uint32_t)m1;
        x3 = (uint32_t)m0;
        x0 = y0;
        x2 = y2;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    switch (p & 3u) {
    case 0: return x0;
    case 1: return x1;
    case 2: return x2;
    default: return x3;
    }
}
"""


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def order_work(e: Order) -> list[tuple[str, str]]:
    """Vector work of an argmax or a sort: the bytes of the tiles it reads, as a reduction."""
    n = sum(_numel(x.type.shape) * x.type.dtype.itemsize for x in e.xs)
    return [(f"vec_bytes{VEC_REDUCE}", str(n))]


def emit_order(gen, s) -> None:
    """Emit the C of ``Assign(out, Order(...))`` through the code generator ``gen``."""
    out, e = s.var, s.expr
    gen.emit("{")
    gen.depth += 1
    if e.op.startswith(("row_arg", "col_arg")):
        _argreduce(gen, out, e)
    elif e.op == "sort32":
        _sort32(gen, out, e)
    elif e.op == "mrgsort":
        _mrgsort(gen, s, out, e)
    else:
        _merge(gen, out, e)
    gen.depth -= 1
    gen.emit("}")
    gen.add_work(fixpipe_work([x for x in e.xs if x.id in gen.acc]))
    gen.add_work(order_work(e))


def _argreduce(gen, out: Var, e: Order) -> None:
    (x,) = e.xs
    src, _, ld = gen.operand_src(x)
    dst = gen.buffer(out)
    ct = ctype(x.type.dtype)
    vr, vc = (index(v) for v in extents(x.type))
    better = ">" if e.op.endswith("max") else "<"
    # The first extremum wins; a NaN counts as the extremum (as torch.argmax / argmin).
    pick = f"(v {better} best || (v != v && best == best))"
    if e.op.startswith("row"):
        gen.emit(f"for (int64_t r = 0; r < {vr}; r++) {{")
        gen.emit(f"    const {ct} *restrict row = {src} + r * {ld};")
        gen.emit(f"    int64_t at = 0; {ct} best = {vc} > 0 ? row[0] : 0;")
        gen.emit(f"    for (int64_t c = 1; c < {vc}; c++) {{ const {ct} v = row[c]; if {pick} {{ best = v; at = c; }} }}")
        gen.emit(f"    {dst}[r] = (int32_t)at;")
        gen.emit("}")
    else:
        gen.emit(f"for (int64_t c = 0; c < {vc}; c++) {{")
        gen.emit(f"    int64_t at = 0; {ct} best = {vr} > 0 ? {src}[c] : 0;")
        gen.emit(f"    for (int64_t r = 1; r < {vr}; r++) {{ const {ct} v = {src}[r * {ld} + c]; "
                 f"if {pick} {{ best = v; at = r; }} }}")
        gen.emit(f"    {dst}[c] = (int32_t)at;")
        gen.emit("}")


def _index_bits(dtype, value: str) -> str:
    """C of the float a pair's index slot holds for index ``value`` (uint32)."""
    if dtype == FP16:
        return f"(float)((union {{ uint16_t u; _Float16 h; }}){{ .u = (uint16_t)({value}) }}).h"
    return f"((union {{ uint32_t u; float f; }}){{ .u = (uint32_t)({value}) }}).f"


def _sort32(gen, out: Var, e: Order) -> None:
    src, idx = e.xs
    ps, pi, dst = gen.buffer(src), gen.buffer(idx), gen.buffer(out)
    cols = src.type.shape[-1]
    rows = _numel(src.type.shape) // cols
    gen.emit(f"for (int64_t r = 0; r < {rows}; r++) {{")
    gen.emit(f"    for (int64_t g = 0; g < {cols}; g += 32) {{")
    gen.emit("        float v[32]; uint32_t ix[32];")
    gen.emit(f"        for (int k = 0; k < 32; k++) {{ v[k] = {ps}[r * {cols} + g + k]; "
             f"ix[k] = (uint32_t){pi}[r * {cols} + g + k]; }}")
    gen.emit("        for (int k = 1; k < 32; k++) {  /* stable insertion sort, descending */")
    gen.emit("            const float x = v[k]; const uint32_t y = ix[k]; int m = k;")
    gen.emit("            while (m > 0 && v[m - 1] < x) { v[m] = v[m - 1]; ix[m] = ix[m - 1]; m--; }")
    gen.emit("            v[m] = x; ix[m] = y;")
    gen.emit("        }")
    gen.emit(f"        float *restrict o = {dst} + r * {2 * cols} + 2 * g;")
    gen.emit(f"        for (int k = 0; k < 32; k++) {{ o[2 * k] = v[k]; o[2 * k + 1] = {_index_bits(src.type.dtype, 'ix[k]')}; }}")
    gen.emit("    }")
    gen.emit("}")


def _merge_loop(gen, heads: list[tuple[str, str]], dst: str) -> None:
    """Emit a stable k-way merge of pair runs ``(pointer, end)`` into ``dst`` (descending by value)."""
    n = len(heads)
    gen.emit(f"const float *h[{n}] = {{{', '.join(p for p, _ in heads)}}};")
    gen.emit(f"const float *end[{n}] = {{{', '.join(q for _, q in heads)}}};")
    gen.emit(f"float *restrict o = {dst};")
    gen.emit("for (;;) {")
    gen.emit("    int best = -1;")
    gen.emit(f"    for (int k = 0; k < {n}; k++)")
    gen.emit("        if (h[k] < end[k] && (best < 0 || h[k][0] > h[best][0])) best = k;")
    gen.emit("    if (best < 0) break;")
    gen.emit("    o[0] = h[best][0]; o[1] = h[best][1]; o += 2; h[best] += 2;")
    gen.emit("}")


def _mrgsort(gen, s, out: Var, e: Order) -> None:
    (src,) = e.xs
    ps, dst = gen.buffer(src), gen.buffer(out)
    cols = src.type.shape[-1]
    rows = _numel(src.type.shape) // cols
    gen.emit(f"const int64_t bl = {index(e.block_len)};")
    if not isinstance(e.block_len, IConst):  # a runtime block_len: checked before it is used
        gen.fail_if("bl <= 0 || bl % 64 != 0", f"{gen.where(s.loc)}pl.mrgsort: block_len must be a positive multiple of 64")
    gen.emit(f"for (int64_t r = 0; r < {rows}; r++) {{")
    gen.depth += 1
    gen.emit(f"const float *row = {ps} + r * {cols};")
    gen.emit(f"for (int64_t g = 0; g < {cols}; g += 4 * bl) {{")
    gen.depth += 1
    heads = []
    for k in range(4):
        gen.emit(f"const int64_t s{k} = pto_min64(g + {k} * bl, {cols}), e{k} = pto_min64(g + {k + 1} * bl, {cols});")
        heads.append((f"row + s{k}", f"row + e{k}"))
    _merge_loop(gen, heads, f"{dst} + r * {cols} + g")
    gen.depth -= 1
    gen.emit("}")
    gen.depth -= 1
    gen.emit("}")


def _merge(gen, out: Var, e: Order) -> None:
    dst = gen.buffer(out)
    cols = out.type.shape[-1]
    rows = _numel(out.type.shape) // cols
    gen.emit(f"for (int64_t r = 0; r < {rows}; r++) {{")
    gen.depth += 1
    heads = []
    for x in e.xs:
        n = x.type.shape[-1]
        p = gen.buffer(x)
        heads.append((f"{p} + r * {n}", f"{p} + r * {n} + {n}"))
    _merge_loop(gen, heads, f"{dst} + r * {cols}")
    gen.depth -= 1
    gen.emit("}")
