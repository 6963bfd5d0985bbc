"""The C expression of one element of an element-wise IR expression.

A fused loop nest (``_codegen``) runs over its chain's shape with loop indices
``e0, e1, ...``; each member becomes ``const T vN = <expression>;`` built
here.  :class:`Element` is what an expression needs from that loop: the
value of an operand at the current element (broadcast as numpy does), a tile
buffer read at other indices (slice, concat, assemble, reshape), the tensor
element a load reads, and the valid-region test of a tile.

FP16 and BF16 tiles compute in ``float`` (``compute_dtype``); casts and
stores round.  A cast with a rounding mode calls ``pto_cvt_*`` of
``pto_kernel_rt.h`` (float to narrower float) or libm (float to int); without
one (``"none"``) it converts as C does.
"""

from __future__ import annotations

import math

from .._dtypes import BF16, BOOL, FP8E4M3FN, FP8E5M2, FP8E8M0, FP16, FP32, FP64, DataType
from ..errors import PtoCompileError
from ._gather import block_elems
from ._infer import compute_dtype
from ._nodes import (
    Assemble,
    Binary,
    Bitcast,
    Broadcast,
    Cast,
    Compare,
    Concat,
    FillPad,
    Full,
    Generate,
    IBin,
    IConst,
    COMPARE_OPS,
    IScalar,
    ICheck,
    IRead,
    IVar,
    PART_OPS,
    Load,
    Move,
    Reshape,
    Select,
    Slice,
    Transpose,
    Unary,
    Gather,
)

__all__ = ["ctype", "literal", "index", "strides", "linear_at", "valid_cond", "Element", "element", "unsigned_index"]

#: ``pl.cast`` modes as ``pto_cvt_*`` take them (see pto_kernel_rt.h).
CAST_MODE_CODES = {"none": 0, "rint": 0, "round": 1, "floor": 2, "ceil": 3, "trunc": 4, "odd": 5}
_INT_ROUNDING = {"rint": "rint", "round": "round", "floor": "floor", "ceil": "ceil", "trunc": "trunc"}


def ctype(dtype: DataType) -> str:
    """C type of a tile element while computing (FP16/BF16 compute in float)."""
    return compute_dtype(dtype).c_type


def literal(value, dtype: DataType) -> str:
    ct = ctype(dtype)
    if dtype == BOOL:
        return "1" if value else "0"
    if dtype.is_float:
        v = float(value)
        if math.isnan(v):
            return "__builtin_nanf(\"\")" if ct == "float" else "__builtin_nan(\"\")"
        if math.isinf(v):
            inf = "__builtin_inff()" if ct == "float" else "__builtin_inf()"
            return inf if v > 0 else f"(-{inf})"
        return f"{float.hex(v)}" + ("f" if ct == "float" else "")
    v = int(value)
    if dtype.c_type == "int64_t" and v == -(2**63):
        return "INT64_MIN"
    return f"(({ct}){v}LL)" if v < 0 else f"(({ct}){v}ULL)"


def index(e) -> str:
    """C of an index expression (int64 arithmetic, Python's // and %)."""
    if isinstance(e, IConst):
        return f"INT64_C({e.value})"
    if isinstance(e, IVar):
        return f"ix_{e.name}"
    if isinstance(e, IScalar):
        return f"((int64_t)s_{e.param})"
    if isinstance(e, ICheck):  # its check is emitted where the value is computed (a statement)
        return index(e.expr)
    if isinstance(e, IRead):
        lin = " + ".join(f"{index(o)} * INT64_C({s})" for o, s in zip(e.offsets, strides(e.shape)))
        if e.bits:  # an FP32 element as its bit pattern (a ScalarBits operand reads it back)
            return f"((int64_t)((union {{ float f; uint32_t u; }}){{ .f = p_{e.param}[{lin}] }}).u)"
        return f"((int64_t)p_{e.param}[{lin}])"
    if isinstance(e, IBin) and e.op in COMPARE_OPS:
        return f"((int64_t)({index(e.a)} {e.op} {index(e.b)}))"
    if isinstance(e, IBin):
        a, b = index(e.a), index(e.b)
        if e.op == "//":
            return f"pto_floordiv({a}, {b})"
        if e.op == "%":
            return f"pto_mod({a}, {b})"
        if e.op in ("min", "max"):
            return f"pto_{e.op}64({a}, {b})"
        return f"({a} {e.op} {b})"
    raise PtoCompileError(f"bad index expression {e!r}")


def bits_float(e) -> str:
    """C of the FP32 value whose bit pattern index expression ``e`` holds (a :class:`ScalarBits` operand)."""
    return f"(((union {{ uint32_t u; float f; }}){{ .u = (uint32_t){index(e)} }}).f)"


def strides(shape) -> list[int]:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return out[::-1]


def linear_at(shape, dims: list[str]) -> str:
    """Row-major linear index of the element at per-dimension indices ``dims``."""
    terms = [d if s == 1 else f"({d}) * {s}" for d, s in zip(dims, strides(shape))]
    return " + ".join(terms) if terms else "0"


def _pad(pad: str, dtype: DataType) -> str:
    if pad == "zero":
        return literal(0, dtype)
    if dtype.is_float:
        return literal(math.inf if pad == "max" else -math.inf, dtype)
    if dtype == BOOL:
        return "1" if pad == "max" else "0"
    bits = dtype.itemsize * 8
    unsigned = dtype.c_type.startswith("uint")
    hi = (1 << bits) - 1 if unsigned else (1 << (bits - 1)) - 1
    lo = 0 if unsigned else -(1 << (bits - 1))
    return literal(hi if pad == "max" else lo, dtype)


class Element:
    """What an element expression reads, for one fused loop nest (see ``_codegen``)."""

    def __init__(self, idx: list[str], operand, at, tensor_ref):
        self.idx = idx  # loop index names, one per dimension of the chain's shape
        self.operand = operand  # operand(x) -> its value at the current element (broadcast)
        self.at = at  # at(var, dims) -> buffer element of var at per-dimension indices (None: same position)
        self.tensor_ref = tensor_ref  # tensor_ref() -> the tensor element a Load member reads


def element(e, dtype: DataType, el: Element) -> str:
    """Return the C expression computing one element of ``e`` (result dtype ``dtype``)."""
    ct = ctype(dtype)
    f = "f" if ct == "float" else ""
    if isinstance(e, Load):
        return _load(e, dtype, el)
    if isinstance(e, Full):
        return el.operand(e.value)
    if isinstance(e, (Move, Broadcast)):
        return el.operand(e.x)
    if isinstance(e, Cast):
        return _cast(e, el.operand(e.x), ct)
    if isinstance(e, Unary):
        x = el.operand(e.x)
        if e.op == "neg":
            return f"({ct})(-{x})"
        if e.op == "abs":
            return f"fabs{f}({x})" if dtype.is_float else f"({ct})({x} < 0 ? -{x} : {x})"
        if e.op == "relu":
            return f"({x} > 0 ? {x} : ({ct})0)"
        if e.op == "rsqrt":
            return f"(({ct})1 / sqrt{f}({x}))"
        if e.op == "recip":
            return f"(({ct})1 / {x})"
        if e.op == "not_":
            return f"({ct})(~{x})"
        return f"{e.op}{f}({x})"
    if isinstance(e, Binary):
        a, b = el.operand(e.a), el.operand(e.b)
        if e.op in ("add", "sub", "mul"):
            sym = {"add": "+", "sub": "-", "mul": "*"}[e.op]
            return f"({ct})({a} {sym} {b})"
        if e.op == "div":
            if dtype.is_float:
                return f"({a} / {b})"
            if dtype.is_unsigned:  # UINT64 does not fit int64
                return f"({ct})({b} ? {a} / {b} : 0)"
            # PyPTO's integer division (its board's, and its tests' torch.div(rounding_mode="trunc")) rounds
            # toward zero; 0 for a zero divisor, and a / -1 wraps (-INT64_MIN) instead of trapping.
            x, y = f"(int64_t)({a})", f"(int64_t)({b})"
            return f"({ct})({y} == -1 ? (int64_t)(0u - (uint64_t){x}) : {y} ? {x} / {y} : 0)"
        if e.op in _EXTENDED_BINARY:
            return _extended_binary(e.op, a, b, dtype)
        if e.op == "fmod" or e.op in PART_OPS:
            return _math_binary(e, a, b, dtype, el)
        cmp = ">" if e.op == "maximum" else "<"
        if dtype.is_float:
            return f"(({a} {cmp} {b} || {a} != {a}) ? {a} : {b})"
        return f"({a} {cmp} {b} ? {a} : {b})"
    if isinstance(e, Bitcast):
        return _bitcast(e, el)
    if isinstance(e, Compare):
        return _compare(e, el)
    if isinstance(e, Select):
        return _select(e, el)
    if isinstance(e, Generate):
        return _generate(e, ct, el)
    if isinstance(e, Gather):
        return _gather(e, dtype, el)
    return _layout(e, dtype, el)


def _generate(e: Generate, ct: str, el: Element) -> str:
    """pl.arange (ci), pl.tri and pl.random: a function of the element's position."""
    idx = el.idx
    args = [index(a) for a in e.args]
    if e.kind == "ci":
        return f"({ct})({args[0]} {'-' if e.option else '+'} {idx[-1]})"
    if e.kind == "tri":
        return f"({ct})({idx[-1]} {'>=' if e.option else '<='} {idx[-2]} + {args[0]})"
    words = ", ".join(f"(uint32_t)({a})" for a in args)
    return f"({ct})pto_philox4x32({words}, {e.option}, (uint64_t)({linear_at(e.shape, idx)}))"


_EXTENDED_BINARY = ("rem", "prelu", "and_", "or_", "xor", "shl", "shr")
_BITWISE = {"and_": "&", "or_": "|", "xor": "^"}
_COMPARE = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def _extended_binary(op: str, a: str, b: str, dtype: DataType) -> str:
    """rem, prelu, the bitwise and the shift ops (integer wrap-around; no shift is undefined)."""
    ct = ctype(dtype)
    if op == "rem":
        if dtype.is_float:
            return f"pto_remf({a}, {b})" if ct == "float" else f"pto_rem({a}, {b})"
        if dtype.is_unsigned:
            return f"({ct})({b} ? {a} % {b} : 0)"
        return f"({ct})pto_mod((int64_t)({a}), (int64_t)({b}))"
    if op == "prelu":
        return f"({a} > 0 ? {a} : ({ct})({a} * {b}))"
    if op in _BITWISE:
        return f"({ct})({a} {_BITWISE[op]} {b})"
    # A shift by a negative amount or by the width or more: shl gives 0, shr 0 or (signed, negative) -1.
    bits = dtype.itemsize * 8
    out_of_range = f"(uint64_t)(int64_t)({b}) >= {bits}"
    if op == "shl":
        return f"({out_of_range} ? ({ct})0 : ({ct})((uint64_t)({a}) << ({b})))"
    if dtype.c_type.startswith("uint"):
        return f"({out_of_range} ? ({ct})0 : ({ct})({a} >> ({b})))"
    return f"({out_of_range} ? ({ct})({a} < 0 ? -1 : 0) : ({ct})({a} >> ({b})))"


def _math_binary(e: Binary, a: str, b: str, dtype: DataType, el: Element) -> str:
    """fmod (C's: the dividend's sign) and the part_* ops (the op where both sources are valid, else the valid one)."""
    ct = ctype(dtype)
    if e.op == "fmod":
        if dtype.is_float:
            return f"fmodf({a}, {b})" if ct == "float" else f"fmod({a}, {b})"
        if dtype.is_unsigned:
            return f"({ct})({b} ? {a} % {b} : 0)"
        return f"({ct})(({b}) == 0 || ({b}) == -1 ? 0 : {a} % {b})"
    kind = e.op[len("part_"):]
    if kind in ("add", "mul"):
        both = f"({ct})({a} {'+' if kind == 'add' else '*'} {b})"
    else:
        cmp = ">" if kind == "max" else "<"
        both = (f"(({a} {cmp} {b} || {a} != {a}) ? {a} : {b})" if dtype.is_float
                else f"({a} {cmp} {b} ? {a} : {b})")
    va = valid_cond(el.idx, e.a.type.shape, e.a.type.valid)
    vb = valid_cond(el.idx, e.b.type.shape, e.b.type.valid)
    out = f"(({va}) ? {both} : {b})" if va else both
    return f"(({vb}) ? {out} : {a})" if vb else out


def _to_bits(v: str, dtype: DataType) -> str:
    """The storage bits of a tile element (``v`` in its compute type), as an unsigned integer of its width."""
    n = dtype.itemsize * 8
    if dtype == FP32:
        return f"((union {{ float f; uint32_t u; }}){{ .f = {v} }}).u"
    if dtype == FP64:
        return f"((union {{ double f; uint64_t u; }}){{ .f = {v} }}).u"
    if dtype == FP16:
        return f"((union {{ _Float16 h; uint16_t u; }}){{ .h = (_Float16)({v}) }}).u"
    if dtype == BF16:
        return f"pto_f2bf({v})"
    if dtype in _FP8:
        return f"pto_f2{_FP8[dtype]}({v})"
    return f"(uint{n}_t)({v})"


def _from_bits(b: str, dtype: DataType) -> str:
    """The element of ``dtype`` (in its compute type) whose storage bits are ``b``."""
    n = dtype.itemsize * 8
    u = f"(uint{n}_t)({b})"
    if dtype == FP32:
        return f"((union {{ uint32_t u; float f; }}){{ .u = {u} }}).f"
    if dtype == FP64:
        return f"((union {{ uint64_t u; double f; }}){{ .u = {u} }}).f"
    if dtype == FP16:
        return f"(float)((union {{ uint16_t u; _Float16 h; }}){{ .u = {u} }}).h"
    if dtype == BF16:
        return f"pto_bf2f({u})"
    if dtype in _FP8:
        return f"pto_{_FP8[dtype]}_2f({u})"
    return f"({ctype(dtype)}){u}"


def _bitcast(e: Bitcast, el: Element) -> str:
    """``pl.reinterpret_view``: the result element's bytes, taken from one source element or assembled from several."""
    src, dst = e.x.type.dtype, e.dtype
    si, so = src.itemsize, dst.itemsize
    lin = f"({linear_at(e.shape, el.idx)})"
    rank = len(e.x.type.shape)

    def source(k: str) -> str:
        return _to_bits(el.at(e.x, ["0"] * (rank - 1) + [k]), src)

    if so <= si:
        k = si // so
        if k == 1:
            return _from_bits(source(lin), dst)
        mask = (1 << (8 * so)) - 1
        bits = f"(({source(f'{lin} / {k}')} >> (8 * {so} * ({lin} % {k}))) & {mask}ULL)"
        return _from_bits(bits, dst)
    k = so // si
    parts = [f"((uint64_t){source(f'{lin} * {k} + {j}')} << {8 * si * j})" for j in range(k)]
    return _from_bits("(" + " | ".join(parts) + ")", dst)


def _dims(x, idx: list[str], last: str) -> list[str]:
    """Per-dimension indices of tile ``x`` at element ``idx[:-1] + [last]``, broadcast as numpy does."""
    off = len(idx) - len(x.type.shape)
    out = []
    for d, size in enumerate(x.type.shape):
        i = last if d + off == len(idx) - 1 else idx[d + off]
        out.append("0" if size == 1 else i)
    return out


def _compare(e: Compare, el: Element) -> str:
    """One mask byte: bit k compares element 8 * byte + k of its row (0 past the row's end)."""
    n = e.a.type.shape[-1]
    if hasattr(e.b, "type"):
        n = max(n, e.b.type.shape[-1])
    byte = el.idx[-1]
    sym = _COMPARE[e.cmp]
    bits = []
    for k in range(8):
        j = f"({byte} * 8 + {k})"
        a = el.at(e.a, _dims(e.a, el.idx, j))
        b = el.at(e.b, _dims(e.b, el.idx, j)) if hasattr(e.b, "type") else el.operand(e.b)
        bits.append(f"(({j} < {n} && {a} {sym} {b}) << {k})")
    return "(uint8_t)(" + " | ".join(bits) + ")"


def _select(e: Select, el: Element) -> str:
    m = e.mask
    size = m.type.dtype.itemsize
    j = el.idx[-1]
    byte = f"(({j}) >> 3)"
    word = byte if size == 1 else f"({byte} / {size})"
    shift = f"(({j}) & 7)" if size == 1 else f"(({byte} % {size}) * 8 + (({j}) & 7))"
    value = el.at(m, [*el.idx[:-1], word])
    bit = f"((((uint{size * 8}_t){value}) >> {shift}) & 1)"
    return f"({bit} ? {el.operand(e.a)} : {el.operand(e.b)})"


def valid_cond(idx: list[str], shape, valid) -> str:
    """C condition that the element at ``idx`` lies in the valid box (``""``: always)."""
    if valid is None:
        return ""
    terms = [f"{i} < {index(v)}" for i, v, d in zip(idx, valid, shape) if not (isinstance(v, IConst) and v.value == d)]
    return " && ".join(terms)


def _load(e: Load, dtype: DataType, el: Element) -> str:
    ref = el.tensor_ref()
    if dtype == BF16:
        ref = f"pto_bf2f({ref})"
    elif dtype in _FP8:
        ref = f"pto_{_FP8[dtype]}_2f({ref})"
    elif dtype == FP16:
        ref = f"(float){ref}"
    cond = valid_cond(el.idx, e.shape, e.valid)
    if not cond:
        return ref
    # Outside the valid box nothing is read: the padding is unspecified, and reads as NaN (or 0) here.
    pad = literal(math.nan, dtype) if dtype.is_float else literal(0, dtype)
    return f"(({cond}) ? {ref} : {pad})"


_PRECISION = {FP64: 53, FP32: 24, FP16: 11, BF16: 8, FP8E4M3FN: 4, FP8E5M2: 3, FP8E8M0: 1}
#: The FP8 types, by their pto_kernel_rt.h name (pto_e4m3_2f, pto_f2e4m3, pto_e4m3_round).
_FP8 = {FP8E4M3FN: "e4m3", FP8E5M2: "e5m2", FP8E8M0: "e8m0"}


def _cast(e: Cast, x: str, ct: str) -> str:
    src, dst, mode = e.x.type.dtype, e.dtype, e.mode
    if dst == BOOL:
        return f"({ct})({x} != 0)"
    if src.is_float and not dst.is_float and mode != "none":
        fn = _INT_ROUNDING[mode] + ("f" if compute_dtype(src) == FP32 else "")
        return f"({ct}){fn}({x})"
    narrowing = src.is_float and dst.is_float and _PRECISION[dst] < _PRECISION[src]
    if dst in _FP8:  # to nearest, ties to even (none, rint) or away from zero (round); see pto_f2fp8_
        if mode not in ("none", "rint", "round"):
            raise PtoCompileError(f"pl.cast to {dst.name}: mode {mode!r} is not supported here "
                                  f"(to nearest: 'rint' ties to even, 'round' ties away from zero)")
        return f"pto_{_FP8[dst]}_round((float)({x}), {int(mode == 'round')})"
    if narrowing and mode not in ("none", "rint"):
        target = {FP16: "f16", BF16: "bf16", FP32: "f32"}[dst]
        return f"pto_cvt_{target}((double)({x}), {CAST_MODE_CODES[mode]})"
    # C's conversion: floats to ints toward zero, narrowing floats to nearest even.
    if dst == FP16:
        return f"(float)(_Float16)({x})"
    if dst == BF16:
        return f"pto_bf16_round((float)({x}))"
    return f"({ct})({x})"


def _layout(e, dtype: DataType, el: Element) -> str:
    idx = el.idx
    if isinstance(e, FillPad):
        cond = valid_cond(idx, e.x.type.shape, e.x.type.valid)
        x = el.operand(e.x)
        return f"(({cond}) ? {x} : {_pad(e.pad, dtype)})" if cond else x
    if isinstance(e, Reshape):
        return el.at(e.x, None)  # the same linear position
    if isinstance(e, Slice):
        return el.at(e.x, [f"{index(o)} + {i}" for o, i in zip(e.offsets, idx)])
    if isinstance(e, Transpose):
        a, b = e.axes
        src = list(idx)
        src[a], src[b] = idx[b], idx[a]
        return el.at(e.x, src)
    if isinstance(e, Concat):
        na = e.a.type.shape[1]
        left = el.at(e.a, [idx[0], idx[1]])
        right = el.at(e.b, [idx[0], f"{idx[1]} - {na}"])
        return f"({idx[1]} < {na} ? {left} : {right})"
    if isinstance(e, Assemble):
        src = e.source.type.shape
        inside = " && ".join(
            f"{i} - {index(o)} >= 0 && {i} - {index(o)} < {s}" for i, o, s in zip(idx, e.offsets, src)
        )
        written = el.at(e.source, [f"{i} - {index(o)}" for i, o in zip(idx, e.offsets)])
        return f"(({inside}) ? {written} : {el.operand(e.target)})"
    raise PtoCompileError(f"codegen: not an element-wise expression: {e!r}")


# ---- gathers (pypto_async.ir._gather has their type rules) ---------------------------------


def unsigned_index(value: str, dtype: DataType) -> str:
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


def _gather(e: Gather, dtype: DataType, el: Element) -> str:
    """One element of a gather: its index read as unsigned, then the source where the mode says (see ``_gather``)."""
    idx = el.idx
    src = e.src.type.shape
    ity = e.index.type.dtype
    if e.mode == "block" and e.dtype is not None and e.dtype != e.src.type.dtype:
        return _gather_bytes(e, dtype, el)
    if e.mode == "block":
        epb = block_elems(e.src.type.dtype)
        raw = el.at(e.index, [idx[0], f"{idx[1]} / {epb}"])
        n = math.prod(src) // epb  # blocks in the source
        v = f"({unsigned_index(raw, ity)} / 32u)"  # a byte offset: its block
        pos, ok = _policy(v, n, e.oob)
        k = f"{pos} * {epb} + {idx[1]} % {epb}"
        value = el.at(e.src, _unravel(src, k))
    else:
        v = unsigned_index(el.operand(e.index) if e.mode != "rows" else el.at(e.index, _index_of_row(e, idx[0])), ity)
        if e.mode == "axis":
            pos, ok = _policy(v, src[e.dim], e.oob)
            dims = [pos if d == e.dim else idx[d] for d in range(len(src))]
            value = el.at(e.src, dims)
        elif e.mode == "flat":
            pos, ok = _policy(v, math.prod(src), e.oob)
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


def _gather_bytes(e: Gather, dtype: DataType, el: Element) -> str:
    """gatherb with another output dtype: element ``j`` of a row is read from the block's bytes as ``dtype``."""
    idx = el.idx
    size = dtype.itemsize
    epb = block_elems(dtype)
    raw = el.at(e.index, [idx[0], f"{idx[1]} / {epb}"])
    n = math.prod(e.src.type.shape) // block_elems(e.src.type.dtype)
    pos, ok = _policy(f"({unsigned_index(raw, e.index.type.dtype)} / 32u)", n, e.oob)
    base = el.at(e.src, ["0"] * len(e.src.type.shape))
    at = f"(const char *)&{base} + {pos} * 32 + ({idx[1]} % {epb}) * {size}"
    storage = {2: "uint16_t"}.get(size, dtype.c_type) if dtype.is_float and size == 2 else dtype.c_type
    word = f"({{ {storage} w_; __builtin_memcpy(&w_, {at}, {size}); w_; }})"
    if dtype == FP16:
        word = f"(float)({{ _Float16 h_; __builtin_memcpy(&h_, {at}, 2); h_; }})"
    elif dtype == BF16:
        word = f"pto_bf2f({word})"
    if ok is None:
        return word
    return f"({ok} ? {word} : {literal(0, dtype)})"
