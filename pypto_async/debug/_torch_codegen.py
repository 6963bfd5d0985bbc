"""Generate a PyTorch reference from a program's IR (``pypto_async.debug.torch_codegen``).

The generated source defines one function, named as the program, with the
program's parameters in order: tensors are torch tensors, written in place
(``Out``/``InOut``), scalars are Python numbers.  Executing it computes what
the compiled kernel computes, statement by statement, on the CPU:

* every tile is a torch tensor of its full shape and dtype; FP16/BF16 tiles
  compute in float32 and round to their dtype after each statement, as the
  simulator's kernels do (a fused chain there keeps its intermediates in
  float, so half-precision results may differ in the last place);
* a load with a valid region reads its leading box; the rest is NaN (0 for
  integers), the padding the compiled kernel reads; ``fillpad`` replaces it;
* a store writes the valid region only (``atomic=Add`` adds it);
* loops, ``pl.spmd`` blocks and regions run in program order (the order
  the task graph allows; a race-free program has no other result);
* integer ``div`` rounds toward minus infinity, ``maximum``/``minimum``
  propagate NaN, reductions run over the whole tile, as the compiled code's;
  integer ``div`` and ``rem`` by zero give 0 (and ``rem`` by -1 gives 0),
  ``rem`` takes the divisor's sign (Python's ``%``, exact for floats), shifts
  by the width or more give 0 (``shr`` of a negative signed value -1);
* ``pl.cmp`` gives PyPTO's packed predicate mask (bit ``j % 8`` of byte
  ``j // 8`` of each row) and ``pl.sel`` reads it back, bytes in memory order;
* ``pl.read`` reads its tensor element when the statement runs, runtime
  scalars are Python ints, and a ``pl.range`` over them (or a runtime
  ``if``/``else``, a loop of 0 or 1 iterations) is a Python ``for``.

A statement the generator does not know raises ``PtoNotSupported`` naming
it.  ``check_shapes=True`` adds checks of each tensor argument's shape and
dtype at the top of the function.
"""

from __future__ import annotations

from .._dtypes import BF16, BOOL, FP16, DataType
from .._signature import SCALAR
from ..errors import PtoArgumentError, PtoNotSupported
from ..ir._nodes import (
    COMPARE_OPS,
    Assemble,
    Assign,
    Binary,
    Broadcast,
    Cast,
    Compare,
    Concat,
    Const,
    DynFor,
    FillPad,
    Generate,
    Order,
    For,
    Full,
    Fused,
    IBin,
    IConst,
    ICheck,
    IRead,
    IScalar,
    IVar,
    Load,
    Matmul,
    MatmulAcc,
    Move,
    Reduce,
    Bitcast,
    Reshape,
    ScalarBits,
    ScalarIndex,
    ScalarRef,
    Scope,
    Select,
    SetIndex,
    Slice,
    Spmd,
    Store,
    Transpose,
    Unary,
    Update,
    Var,
    Gather,
    Scatter,
)
from ..ir._program import Program

__all__ = ["torch_codegen"]

_TORCH = {"FP32": "float32", "FP64": "float64", "FP16": "float16", "BF16": "bfloat16", "FP8E4M3FN": "float8_e4m3fn",
          "FP8E5M2": "float8_e5m2", "FP8E8M0": "float8_e8m0fnu", "INT8": "int8",
          "INT16": "int16", "INT32": "int32", "INT64": "int64", "UINT8": "uint8", "UINT16": "uint16",
          "UINT32": "uint32", "UINT64": "uint64", "BOOL": "bool"}

_PRELUDE = '''\
import math

import torch


def _scalar(v, dtype):
    return torch.tensor(v, dtype=dtype)


def _load(t, offsets, shape, valid, dtype):
    """The window at offsets; outside the valid box, the padding (NaN, or 0 for integers)."""
    box = tuple(valid) if valid is not None else tuple(shape)
    out = torch.full(tuple(shape), math.nan if dtype.is_floating_point else 0, dtype=dtype)
    region = tuple(slice(o, o + b) for o, b in zip(offsets, box))
    out[tuple(slice(0, b) for b in box)] = t[region].to(dtype)
    return out


def _store(t, value, offsets, valid, atomic):
    box = tuple(valid) if valid is not None else tuple(value.shape)
    region = tuple(slice(o, o + b) for o, b in zip(offsets, box))
    v = value[tuple(slice(0, b) for b in box)].to(t.dtype)
    if atomic:
        t[region] += v
    else:
        t[region] = v


def _pad(x, valid, pad):
    if valid is None:
        return x
    if pad == "zero":
        fill = 0
    elif x.dtype.is_floating_point:
        fill = math.inf if pad == "max" else -math.inf
    elif x.dtype == torch.bool:
        fill = pad == "max"
    else:
        info = torch.iinfo(x.dtype)
        fill = info.max if pad == "max" else info.min
    out = torch.full_like(x, fill)
    box = tuple(slice(0, v) for v in valid)
    out[box] = x[box]
    return out


def _round_half_away(x):
    return torch.sign(x) * torch.floor(torch.abs(x) + 0.5)


def _narrow(x, dtype, mode):
    """A narrowing float conversion rounded as mode says (the nearest even is what .to gives)."""
    x = x.to(torch.float64)
    r = x.to(dtype)
    rv = r.to(torch.float64)
    toward = torch.where(x > rv, math.inf, -math.inf).to(dtype)
    other = torch.nextafter(r, toward)
    bigger = other.abs() > r.abs()
    tz, az = torch.where(bigger, r, other), torch.where(bigger, other, r)
    if mode == "round":
        mid = (tz.to(torch.float64).abs() + az.to(torch.float64).abs()) / 2
        pick = torch.where(x.abs() == mid, az, r)
    elif mode == "floor":
        pick = torch.where(x > 0, tz, az)
    elif mode == "ceil":
        pick = torch.where(x > 0, az, tz)
    elif mode == "odd":  # the neighbour whose last significand bit is odd (adjacent values differ in it)
        bits = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32}[dtype]
        pick = torch.where((r.view(bits) & 1) == 1, r, other)
    else:
        pick = tz
    return torch.where((rv == x) | torch.isnan(x), r, pick)


def _fp8_away(x, dtype):
    """x rounded to FP8 ``dtype``, ties away from zero (elsewhere as .to(dtype), which ties to even)."""
    mbits, bias = (3, 7) if dtype == torch.float8_e4m3fn else (2, 15)
    a = x.to(torch.float64).abs()
    e = torch.floor(torch.log2(torch.where(a > 0, a, torch.ones_like(a)))).clamp(min=1 - bias)
    q = torch.pow(2.0, e - mbits)
    r = torch.copysign(torch.floor(a / q + 0.5) * q, x.to(torch.float64))
    return torch.where(torch.isfinite(x), r, x.to(torch.float64)).to(torch.float32)


def _ifloordiv(a, b):
    """Python's // on index values; 0 for b == 0, as the kernel's."""
    return a // b if b else 0


def _icheck(v, want, message):
    """An extent read at run time, unified with a kernel parameter's static one: the launch fails otherwise."""
    if v != want:
        raise ValueError(message)
    return v


def _fbits(x):
    """An FP32 element as its bit pattern (an orchestration's float read)."""
    return int(torch.tensor([float(x)], dtype=torch.float32).view(torch.int32).item()) & 0xFFFFFFFF


def _bitsf(v):
    """The FP32 value of a bit pattern (a ScalarBits operand)."""
    return float(torch.tensor([v & 0xFFFFFFFF], dtype=torch.int64).to(torch.int32).view(torch.float32).item())


def _imod(a, b):
    """Python's % on index values; 0 for b == 0 or -1, as the kernel's."""
    return 0 if b in (0, -1) else a % b


def _truncdiv(a, b):
    """Integer tiles: a / b rounded toward zero, in int64; 0 where b == 0, -a where b == -1 (wrapping)."""
    a, b = torch.broadcast_tensors(a.to(torch.int64), b.to(torch.int64))
    special = (b == 0) | (b == -1)
    q = torch.div(a, torch.where(special, torch.ones_like(b), b), rounding_mode="trunc")
    return torch.where(b == 0, torch.zeros_like(q), torch.where(b == -1, -a, q))


def _mod(a, b):
    """Integer tiles: a % b with the divisor's sign, in int64; 0 where b is 0 or -1."""
    a, b = torch.broadcast_tensors(a.to(torch.int64), b.to(torch.int64))
    special = (b == 0) | (b == -1)
    r = torch.remainder(a, torch.where(special, torch.ones_like(b), b))
    return torch.where(special, torch.zeros_like(r), r)


def _fmod(a, b):
    """Float tiles: a % b with the divisor's sign (an exact fmod, then the sign fixed; NaN for b == 0)."""
    r = torch.fmod(a, b)
    return torch.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)


def _shift(a, b, left, bits, signed):
    """a << b or a >> b on integer tiles; a shift of the width or more (or negative) gives 0, or -1 (>>)."""
    a, b = torch.broadcast_tensors(a.to(torch.int64), b.to(torch.int64))
    out_of_range = (b < 0) | (b >= bits)
    amount = b.clamp(0, bits - 1)
    if left:
        return torch.where(out_of_range, torch.zeros_like(a), a << amount)
    fill = torch.where(a < 0, -torch.ones_like(a), torch.zeros_like(a)) if signed else torch.zeros_like(a)
    return torch.where(out_of_range, fill, a >> amount)


_CMP = {"eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge}


def _cmp(a, b, op, n, shape):
    """PyPTO's packed predicate mask: bit j % 8 of byte j // 8 of each row is element j's comparison."""
    lead, width = tuple(shape[:-1]), shape[-1]
    r = torch.broadcast_to(_CMP[op](a, b), (*lead, n))
    bits = torch.zeros((*lead, width * 8), dtype=torch.int64)
    bits[..., :n] = r.to(torch.int64)
    return (bits.reshape(*lead, width, 8) << torch.arange(8)).sum(-1).to(torch.uint8)


def _sel(mask, a, b, shape):
    """a where element j's mask bit (bit j % 8 of byte j // 8 of its row, in memory order) is set, else b."""
    j = torch.arange(shape[-1])
    byte = mask.contiguous().view(torch.uint8)[..., j >> 3].to(torch.int64)
    bit = ((byte >> (j & 7)) & 1).bool()
    return torch.broadcast_to(torch.where(bit, a, b), tuple(shape))


def _ifmod(a, b):
    """Integer fmod: C's a % b (the dividend's sign), 0 where b is 0 or -1."""
    a, b = torch.broadcast_tensors(a, b)
    special = (b == 0) | (b == -1)
    r = torch.fmod(a, torch.where(special, torch.ones_like(b), b))
    return torch.where(special, torch.zeros_like(r), r)


def _ones_outside(x, valid):
    """x with every element outside the valid box 1 (a product reduction reads the valid region only)."""
    if valid is None:
        return x
    out = torch.ones_like(x)
    box = tuple(slice(0, v) for v in valid)
    out[box] = x[box]
    return out


def _fill_outside(x, valid, value):
    """x with every element outside the valid box ``value`` (a reduction reads the valid region only)."""
    if valid is None:
        return x
    out = torch.full_like(x, value)
    box = tuple(slice(0, v) for v in valid)
    out[box] = x[box]
    return out


def _col_sum(x, valid, tree, dtype):
    """A float column sum as the kernel's: in the tile's dtype, rows in order or pairwise (``tree``)."""
    rows = x[: x.shape[0] if valid is None else valid[0]].to(dtype)
    if not tree:
        acc = rows[0].clone()
        for r in range(1, rows.shape[0]):
            acc = (acc.float() + rows[r].float()).to(dtype)
        return acc.reshape(1, -1)
    buf, n = rows.clone(), rows.shape[0]
    while n > 1:
        half = n // 2
        buf[:half] = (buf[0:2 * half:2].float() + buf[1:2 * half:2].float()).to(dtype)
        if n % 2:
            buf[0] = (buf[0].float() + buf[n - 1].float()).to(dtype)
        n = half
    return buf[0:1].clone()


def _part(both, a, b, va, vb):
    """part_*: the op where both sources are valid, else whichever one is (a outside b's valid box)."""
    def inside(valid):
        m = torch.ones(tuple(a.shape), dtype=torch.bool)
        if valid is not None:
            m[...] = False
            m[tuple(slice(0, v) for v in valid)] = True
        return m

    ina, inb = inside(va), inside(vb)
    return torch.where(inb, torch.where(ina, both, b), a)
def _unsigned(index, bits):
    """Indices as unsigned integers of their width (PyPTO's: -1 is past every extent)."""
    v = index.to(torch.int64)
    return v if bits >= 64 else v & ((1 << bits) - 1)


def _gather(src, index, mode, dim, oob, bits, shape):
    """A gather (the kernel's Gather): wrap, or clamp to the last element; 'zero' gives 0 past the extent."""
    v = _unsigned(index, bits)
    if mode == "block":
        epb = max(1, 32 // src.element_size())
        table = src.reshape(-1, epb)
        v = v // 32
    elif mode == "flat":
        table = src.reshape(-1)
    elif mode == "rows":
        table, v = src, v.reshape(-1)
    else:
        table = src[tuple(slice(None) if d == dim else slice(0, e) for d, e in enumerate(index.shape))]
    n = table.shape[dim] if mode == "axis" else table.shape[0]
    pos = v % n if oob == "wrap" else torch.clamp(v, max=n - 1)
    out = torch.gather(table, dim, pos) if mode == "axis" else table[pos]
    if oob == "zero":
        ok = v < n
        while ok.dim() < out.dim():
            ok = ok.unsqueeze(-1)
        out = torch.where(ok, out, torch.zeros((), dtype=out.dtype))
    return out.reshape(tuple(shape))


def _scatter(target, src, index, mode, bits, offsets, valid):
    """A scatter (the kernel's Scatter), in source order; an index outside the target raises, as the launch fails."""
    out = target.clone()
    if mode == "box":
        r0, c0 = offsets
        vr, vc = valid if valid is not None else src.shape
        if vr < 0 or vc < 0 or r0 < 0 or c0 < 0 or r0 + vr > out.shape[0] or c0 + vc > out.shape[1]:
            raise ValueError("pl.gather_row: the valid box is outside the destination")
        out[r0:r0 + vr, c0:c0 + vc] = src[:vr, :vc]
        return out
    v = _unsigned(index, bits)
    if mode == "axis":
        for r in range(src.shape[0]):
            for c in range(src.shape[1]):
                if v[r, c] >= out.shape[1]:
                    raise ValueError("pl.scatter: an index is outside the destination")
                out[r, v[r, c]] = src[r, c]
    elif mode == "flat":
        flat = out.view(-1)
        for k, (i, x) in enumerate(zip(v.reshape(-1).tolist(), src.reshape(-1))):
            if i >= flat.numel():
                raise ValueError("pl.tile.scatter: an index is outside the destination")
            flat[i] = x
    else:
        for k, i in enumerate(v.reshape(-1).tolist()):
            if i >= out.shape[0]:
                raise ValueError("pl.scatter_update: an index is outside the destination")
            out[i] = src[k]
    return out


def _mscatter(t, value, index, bits):
    """pl.mscatter: t.flat[index.flat[k]] = value.flat[k] in order; an index past the tensor raises."""
    flat = t.view(-1)
    for i, x in zip(_unsigned(index, bits).reshape(-1).tolist(), value.reshape(-1)):
        if i >= flat.numel():
            raise ValueError("pl.mscatter: an index is outside the tensor")
        flat[i] = x.to(flat.dtype)


def _check(name, t, shape, dtype):
    if tuple(t.shape) != tuple(shape) or t.dtype != dtype:
        raise ValueError(f"{name}: expected {list(shape)} {dtype}, got {list(t.shape)} {t.dtype}")


def _philox(args, rounds, n):
    """pl.random: word p % 4 of Philox4x32 of counter + p // 4 (128-bit) under the key, for p < n."""
    import numpy as np

    m = (1 << 32) - 1
    k0, k1, *c = [int(a) & m for a in args]
    base = sum(w << (32 * i) for i, w in enumerate(c))
    q = [(base + b) % (1 << 128) for b in range((n + 3) // 4)]
    x = [np.array([(v >> (32 * i)) & m for v in q], dtype=np.uint64) for i in range(4)]
    k0, k1 = np.uint64(k0), np.uint64(k1)
    for _ in range(rounds):
        p0, p1 = np.uint64(0xD2511F53) * x[0], np.uint64(0xCD9E8D57) * x[2]
        x = [(p1 >> np.uint64(32)) ^ x[1] ^ k0, p1 & np.uint64(m), (p0 >> np.uint64(32)) ^ x[3] ^ k1, p0 & np.uint64(m)]
        k0, k1 = (k0 + np.uint64(0x9E3779B9)) & np.uint64(m), (k1 + np.uint64(0xBB67AE85)) & np.uint64(m)
    return torch.from_numpy(np.stack(x, axis=1).reshape(-1)[:n].astype(np.int64))


def _generate(kind, args, option, shape, dtype):
    """pl.arange (ci), pl.tri and pl.random tiles (every element; the valid region is the tile's metadata)."""
    n = math.prod(shape)
    if kind == "ci":
        j = torch.arange(shape[-1], dtype=torch.int64)
        return torch.broadcast_to(args[0] - j if option else args[0] + j, tuple(shape)).to(dtype)
    if kind == "tri":
        i, j = torch.arange(shape[0])[:, None], torch.arange(shape[1])[None, :]
        return (j >= i + args[0] if option else j <= i + args[0]).to(dtype)
    v = _philox(args, option, n).reshape(tuple(shape))
    return (v - (v >= 2**31).to(torch.int64) * 2**32 if dtype == torch.int32 else v).to(dtype)


def _argreduce(x, valid, op):
    """The INT32 index of each row's (column's) extremum over the valid box, the first on a tie."""
    r, c = x.shape
    vr, vc = valid if valid is not None else (r, c)
    box = x[:vr, :vc].to(torch.float32)
    fn = torch.argmax if op.endswith("max") else torch.argmin
    if op.startswith("row"):
        out = torch.zeros((r, 1), dtype=torch.int32)
        if vr and vc:
            out[:vr, 0] = fn(box, dim=1).to(torch.int32)
    else:
        out = torch.zeros((1, c), dtype=torch.int32)
        if vr and vc:
            out[0, :vc] = fn(box, dim=0).to(torch.int32)
    return out


def _sort32(src, idx, half):
    """(value, index-bits) pairs of each 32-element group sorted descending, stably."""
    lead, n = tuple(src.shape[:-1]), src.shape[-1]
    v = src.to(torch.float32).reshape(*lead, n // 32, 32)
    order = torch.sort(v, dim=-1, descending=True, stable=True).indices
    ix = idx.to(torch.int64).reshape(*lead, n // 32, 32)
    if half:
        bits = (ix & 0xFFFF).to(torch.int32).to(torch.int16).view(torch.float16).to(torch.float32)
    else:
        bits = (ix & 0xFFFFFFFF).to(torch.int64)
        bits = (bits - (bits >= 2**31).to(torch.int64) * 2**32).to(torch.int32).view(torch.float32)
    pairs = torch.stack([torch.gather(v, -1, order), torch.gather(bits, -1, order)], dim=-1)
    return pairs.reshape(*lead, 2 * n)


def _mrgsort(xs, block_len):
    """Merge sorted pair runs: groups of four block_len-column runs of one tile, or two to four tiles."""
    if block_len is not None:
        if block_len <= 0 or block_len % 64:
            raise ValueError("pl.mrgsort: block_len must be a positive multiple of 64")
        x = xs[0]
        groups = [(g, min(g + 4 * block_len, x.shape[-1])) for g in range(0, x.shape[-1], 4 * block_len)]
    else:
        x = torch.cat(xs, dim=-1)
        groups = [(0, x.shape[-1])]
    out = x.clone()
    for a, b in groups:
        pairs = x[..., a:b].reshape(*x.shape[:-1], (b - a) // 2, 2)
        order = torch.sort(pairs[..., 0].to(torch.float32), dim=-1, descending=True, stable=True).indices
        out[..., a:b] = torch.gather(pairs, -2, order[..., None].expand(*order.shape, 2)).reshape(*x.shape[:-1], b - a)
    return out
'''


def _tdt(dtype: DataType) -> str:
    return f"torch.{_TORCH[dtype.name]}"


def _compute(dtype: DataType) -> str:
    """The torch dtype a tile of ``dtype`` computes in: float32 for the narrow floats (FP8 too), int64 for the
    unsigned types torch has no arithmetic for (UINT16, UINT32; stores wrap them back)."""
    if dtype in (FP16, BF16) or (dtype.is_float and dtype.itemsize == 1):
        return "torch.float32"
    if dtype.name in ("UINT16", "UINT32"):
        return "torch.int64"
    if dtype.name == "UINT64":
        raise PtoNotSupported("torch_codegen: UINT64 tiles (torch has no uint64 arithmetic, and int64 cannot "
                              "hold their values)")
    return _tdt(dtype)


class _Gen:
    def __init__(self, program: Program):
        self.program = program
        self.lines: list[str] = []
        self.names: dict[int, str] = {}
        self.prefix = "t"
        while any(q.name.startswith(self.prefix) for q in (*program.params, *program.scratch)):
            self.prefix = "_" + self.prefix

    def name(self, v: Var) -> str:
        if v.id not in self.names:
            self.names[v.id] = f"{self.prefix}{len(self.names)}"
        return self.names[v.id]

    def emit(self, depth: int, line: str) -> None:
        self.lines.append("    " * depth + line)

    def mx_product(self, a: Var, sa: Var, b: Var, sb: Var) -> str:
        """pl.matmul_mx's product: each operand times its scales, one per 32 elements of K, in float32."""
        return (f"(({self.name(a)}.to(torch.float32) * {self.name(sa)}.to(torch.float32).repeat_interleave(32, 1)) @ "
                f"({self.name(b)}.to(torch.float32) * {self.name(sb)}.to(torch.float32).repeat_interleave(32, 0)))")

    def index(self, e) -> str:
        if isinstance(e, int):
            return str(e)
        if isinstance(e, IConst):
            return str(e.value)
        if isinstance(e, IVar):
            return e.name
        if isinstance(e, IScalar):
            return f"int({e.param})"
        if isinstance(e, IRead):  # the element, read when the statement runs
            at = f"{e.param}[{', '.join(self.index(o) for o in e.offsets)}]"
            return f"_fbits({at})" if e.bits else f"int({at})"
        if isinstance(e, ICheck):
            return f"_icheck({self.index(e.expr)}, {e.value}, {e.message!r})"
        if isinstance(e, IBin):
            a, b = self.index(e.a), self.index(e.b)
            if e.op in ("min", "max"):
                return f"{e.op}({a}, {b})"
            if e.op in COMPARE_OPS:
                return f"int({a} {e.op} {b})"
            if e.op in ("//", "%"):
                return f"{'_ifloordiv' if e.op == '//' else '_imod'}({a}, {b})"
            return f"({a} {e.op} {b})"
        raise PtoNotSupported(f"torch_codegen: index expression {e!r}")

    def ints(self, items) -> str:
        items = [self.index(x) for x in items]
        return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"

    def valid(self, t) -> str:
        return "None" if t.valid is None else self.ints(t.valid)

    def operand(self, x, dtype: DataType) -> str:
        """The operand in ``dtype``'s compute type."""
        if isinstance(x, Var):
            if x.type.dtype == dtype and _compute(dtype) == _tdt(dtype):
                return self.name(x)
            return f"{self.name(x)}.to({_compute(dtype)})"
        if isinstance(x, Const):
            return f"_scalar({x.value!r}, {_compute(x.dtype)})"
        if isinstance(x, ScalarRef):
            return f"_scalar({x.param}, {_tdt(x.dtype)}).to({_compute(x.dtype)})"
        if isinstance(x, ScalarBits):
            return f"_scalar(_bitsf({self.index(x.expr)}), torch.float32).to({_compute(x.dtype)})"
        if isinstance(x, ScalarIndex):
            return f"_scalar({self.index(x.expr)}, torch.int64).to({_compute(x.dtype)})"
        raise PtoNotSupported(f"torch_codegen: operand {x!r}")

    def expr(self, e, v: Var) -> str:
        t = v.type
        ct = _compute(t.dtype)
        if isinstance(e, Load):
            valid = "None" if e.valid is None else self.ints(e.valid)
            return f"_load({e.param}, {self.ints(e.offsets)}, {self.ints(e.shape)}, {valid}, {_tdt(t.dtype)})"
        if isinstance(e, Full):
            # The valid region is the tile's metadata: every element holds the value, as in the compiled code.
            return f"torch.full({self.ints(e.shape)}, {self.operand(e.value, t.dtype)}.item(), dtype={ct})"
        if isinstance(e, Unary):
            x = self.operand(e.x, t.dtype)
            ops = {"neg": "-{x}", "abs": "torch.abs({x})", "exp": "torch.exp({x})", "log": "torch.log({x})",
                   # A float64 square root rounded once is the correctly rounded one, as C's sqrtf.
                   "sqrt": f"torch.sqrt({{x}}.double()).to({ct})",
                   "rsqrt": f"(1 / torch.sqrt({{x}}.double()).to({ct}))", "recip": "(1 / {x})",
                   "relu": "torch.where({x} > 0, {x}, torch.zeros_like({x}))",
                   "not_": "torch.bitwise_not({x})", "sin": "torch.sin({x})", "cos": "torch.cos({x})"}
            if e.op not in ops:
                raise PtoNotSupported(f"torch_codegen: unary op {e.op!r}")
            return ops[e.op].format(x=x)
        if isinstance(e, Binary):
            a, b = self.operand(e.a, t.dtype), self.operand(e.b, t.dtype)
            if e.op == "div" and not t.dtype.is_float:
                return f"_truncdiv({a}, {b})"
            if e.op == "rem":
                return f"{'_fmod' if t.dtype.is_float else '_mod'}({a}, {b})"
            if e.op == "fmod":
                return f"torch.fmod({a}, {b})" if t.dtype.is_float else f"_ifmod({a}, {b})"
            if e.op.startswith("part_"):
                both = {"part_add": "({a} + {b})", "part_mul": "({a} * {b})", "part_max": "torch.maximum({a}, {b})",
                        "part_min": "torch.minimum({a}, {b})"}[e.op].format(a=a, b=b)
                return f"_part({both}, {a}, {b}, {self.valid(e.a.type)}, {self.valid(e.b.type)})"
            if e.op in ("shl", "shr"):
                signed = not t.dtype.c_type.startswith("uint")
                return f"_shift({a}, {b}, {e.op == 'shl'}, {t.dtype.itemsize * 8}, {signed})"
            ops = {"add": "({a} + {b})", "sub": "({a} - {b})", "mul": "({a} * {b})", "div": "({a} / {b})",
                   "maximum": "torch.maximum({a}, {b})", "minimum": "torch.minimum({a}, {b})",
                   "prelu": "torch.where({a} > 0, {a}, {a} * {b})", "and_": "torch.bitwise_and({a}, {b})",
                   "or_": "torch.bitwise_or({a}, {b})", "xor": "torch.bitwise_xor({a}, {b})"}
            if e.op not in ops:
                raise PtoNotSupported(f"torch_codegen: binary op {e.op!r}")
            return ops[e.op].format(a=a, b=b)
        if isinstance(e, Cast):
            return self.cast(e)
        if isinstance(e, Reduce):
            x = self.operand(e.x, e.x.type.dtype)
            axis, kind = (1, e.op[4:]) if e.op.startswith("row_") else (0, e.op[4:])
            valid = self.valid(e.x.type)  # a reduction reads the valid region only, as the kernel's
            if kind == "sum" and axis == 0 and e.x.type.dtype.is_float:
                return f"_col_sum({x}, {valid}, {e.tree}, {_tdt(e.x.type.dtype)}).to({ct})"
            if kind == "sum":
                acc = "torch.float64" if e.x.type.dtype.is_float else "torch.int64"
                x = f"_fill_outside({x}.to({acc}), {valid}, 0)"
                return f"{x}.sum(dim={axis}, keepdim=True).reshape({self.ints(t.shape)})"
            if kind == "prod":  # over the valid region, as the kernel's
                acc = "torch.float64" if e.x.type.dtype.is_float else "torch.int64"
                x = f"_ones_outside({x}.to({acc}), {self.valid(e.x.type)})"
                return f"{x}.prod(dim={axis}, keepdim=True).to({ct}).reshape({self.ints(t.shape)})"
            fn = "amax" if kind == "max" else "amin"
            if e.x.type.valid is not None:  # the padding loses: the lowest value for max, the highest for min
                fill = "-math.inf" if kind == "max" else "math.inf"
                if not e.x.type.dtype.is_float:
                    fill = f"torch.iinfo({x}.dtype).{'min' if kind == 'max' else 'max'}"
                x = f"_fill_outside({x}, {valid}, {fill})"
            return f"torch.{fn}({x}, dim={axis}, keepdim=True).reshape({self.ints(t.shape)})"
        if isinstance(e, Matmul):  # acc_phase (gemv) is a hint: no effect on the result
            acc = {"FP64": "torch.float64", "INT32": "torch.float64"}.get(t.dtype.name, "torch.float32")
            product = f"{self.name(e.a)}.to({acc}) @ {self.name(e.b)}.to({acc})"
            if t.dtype.name == "INT32":  # INT8 operands: exact in float64 up to K = 2**39, then INT32
                product = f"({product}).to(torch.int64).to(torch.int32)"
            if e.a_scale is not None:  # matmul_mx: every 32-block of K times its scale
                product = self.mx_product(e.a, e.a_scale, e.b, e.b_scale)
            if e.bias is not None:  # every row starts as the bias; the product accumulates onto it
                return f"({self.name(e.bias)}.to({acc}) + {product})"
            return f"({product})"
        if isinstance(e, Compare):
            a = self.operand(e.a, e.a.type.dtype)
            b = self.operand(e.b, e.a.type.dtype)
            n = max(e.a.type.shape[-1], e.b.type.shape[-1] if isinstance(e.b, Var) else 0)
            return f"_cmp({a}, {b}, {e.cmp!r}, {n}, {self.ints(t.shape)})"
        if isinstance(e, Select):
            a, b = self.operand(e.a, t.dtype), self.operand(e.b, t.dtype)
            return f"_sel({self.name(e.mask)}, {a}, {b}, {self.ints(t.shape)})"
        if isinstance(e, Move):
            return f"{self.name(e.x)}.clone()"
        if isinstance(e, Broadcast):
            return f"{self.name(e.x)}.expand({self.ints(e.shape)}).clone()"
        if isinstance(e, Reshape):
            return f"{self.name(e.x)}.reshape({self.ints(e.shape)}).clone()"
        if isinstance(e, Bitcast):  # the storage bytes, viewed as the other dtype
            return (f"{self.name(e.x)}.to({_tdt(e.x.type.dtype)}).contiguous().reshape(-1).view({_tdt(e.dtype)})"
                    f".reshape({self.ints(e.shape)}).to({ct})")
        if isinstance(e, Transpose):
            return f"{self.name(e.x)}.transpose({e.axes[0]}, {e.axes[1]}).contiguous()"
        if isinstance(e, Slice):
            region = ", ".join(f"{self.index(o)}:{self.index(o)} + {d}" for o, d in zip(e.offsets, e.shape))
            return f"{self.name(e.x)}[{region}].clone()"
        if isinstance(e, Concat):
            return f"torch.cat([{self.name(e.a)}, {self.name(e.b)}], dim=-1)"
        if isinstance(e, Assemble):
            return f"{self.name(e.target)}.clone()"  # the window is written by the statement (see stmt)
        if isinstance(e, FillPad):
            return f"_pad({self.name(e.x)}, {self.valid(e.x.type)}, {e.pad!r})"
        if isinstance(e, Generate):
            args = ", ".join(self.index(a) for a in e.args)
            return f"_generate({e.kind!r}, ({args},), {e.option}, {self.ints(e.shape)}, {ct})"
        if isinstance(e, Order):
            xs = ", ".join(self.name(x) for x in e.xs)
            if e.op.startswith(("row_arg", "col_arg")):
                return f"_argreduce({xs}, {self.valid(e.xs[0].type)}, {e.op!r})"
            if e.op == "sort32":
                return f"_sort32({xs}, {e.xs[0].type.dtype == FP16})"
            block = "None" if e.block_len is None else self.index(e.block_len)
            return f"_mrgsort([{xs}], {block})"
        if isinstance(e, Gather) and e.dtype is not None:
            raise PtoNotSupported("torch_codegen: pl.gatherb with another output_dtype has no torch form here")
        if isinstance(e, Gather):
            bits = e.index.type.dtype.itemsize * 8
            return (f"_gather({self.name(e.src)}, {self.name(e.index)}, {e.mode!r}, {e.dim}, {e.oob!r}, {bits}, "
                    f"{self.ints(t.shape)})")
        if isinstance(e, Scatter):
            bits = e.index.type.dtype.itemsize * 8 if e.index is not None else 64
            index = self.name(e.index) if e.index is not None else "None"
            offsets = self.ints(e.offsets) if e.offsets else "()"
            return (f"_scatter({self.name(e.target)}, {self.name(e.src)}, {index}, {e.mode!r}, {bits}, {offsets}, "
                    f"{self.valid(e.src.type)})")
        raise PtoNotSupported(f"torch_codegen: {type(e).__name__} has no torch form here")

    def cast(self, e: Cast) -> str:
        src, dst, mode = e.x.type.dtype, e.dtype, e.mode
        x = self.operand(e.x, src)
        if dst == BOOL:
            return f"({x} != 0)"
        if src.is_float and not dst.is_float and mode != "none":
            fn = {"rint": "torch.round({x})", "round": "_round_half_away({x})", "floor": "torch.floor({x})",
                  "ceil": "torch.ceil({x})", "trunc": "torch.trunc({x})"}.get(mode)
            if fn is None:
                raise PtoNotSupported(f"torch_codegen: cast to {dst.name} with mode {mode!r}")
            return fn.format(x=x)
        precision = {"FP64": 53, "FP32": 24, "FP16": 11, "BF16": 8, "FP8E4M3FN": 4, "FP8E5M2": 3, "FP8E8M0": 1}
        if dst.is_float and dst.itemsize == 1:  # FP8: .to() rounds to nearest even as the kernel does
            if mode not in ("none", "rint", "round"):
                raise PtoNotSupported(f"torch_codegen: a cast to {dst.name} with mode {mode!r}")
            if dst.name == "FP8E8M0":  # the kernel rounds as torch's .to(float8_e8m0fnu) in every mode
                return x
            return f"_fp8_away({x}, {_tdt(dst)})" if mode == "round" else x
        if (src.is_float and dst.is_float and mode not in ("none", "rint")
                and precision[dst.name] < precision[src.name]):
            if mode not in ("round", "floor", "ceil", "trunc", "odd"):
                raise PtoNotSupported(f"torch_codegen: a narrowing cast with mode {mode!r}")
            return f"_narrow({self.name(e.x)}, {_tdt(dst)}, {mode!r})"
        return x

    def stmt(self, s, depth: int) -> None:
        if isinstance(s, Fused):
            for m in s.members:
                self.stmt(m, depth)
        elif isinstance(s, Assign):
            v = s.var
            rhs = self.expr(s.expr, v)
            self.emit(depth, f"{self.name(v)} = {rhs}.to({_tdt(v.type.dtype)})")
            if isinstance(s.expr, Assemble):
                e = s.expr
                region = ", ".join(f"{self.index(o)}:{self.index(o)} + {d}"
                                   for o, d in zip(e.offsets, e.source.type.shape))
                self.emit(depth, f"{self.name(v)}[{region}] = {self.name(e.source)}.to({_tdt(v.type.dtype)})")
        elif isinstance(s, MatmulAcc):
            acc = self.name(s.acc)
            dt = _tdt(s.acc.type.dtype)
            product = (f"{self.name(s.a)}.to(torch.float32) @ {self.name(s.b)}.to(torch.float32)" if s.a_scale is None
                       else self.mx_product(s.a, s.a_scale, s.b, s.b_scale))
            if s.acc.type.dtype.name == "INT32":  # INT8 operands: exact in float64, wrapping in INT32
                product = f"({self.name(s.a)}.to(torch.float64) @ {self.name(s.b)}.to(torch.float64)).to(torch.int64)"
                self.emit(depth, f"{acc} = ({acc}.to(torch.int64) + {product}).to(torch.int32)")
            else:
                self.emit(depth, f"{acc} = ({acc}.to(torch.float32) + {product}).to({dt})")
        elif isinstance(s, Update):
            self.emit(depth, f"{self.name(s.target)} = {self.name(s.value)}.clone()")
        elif isinstance(s, Store) and s.index is not None:  # pl.mscatter
            bits = s.index.type.dtype.itemsize * 8
            self.emit(depth, f"_mscatter({s.param}, {self.name(s.value)}, {self.name(s.index)}, {bits})")
        elif isinstance(s, Store):
            atomic = s.atomic == "add"
            self.emit(depth, f"_store({s.param}, {self.name(s.value)}, {self.ints(s.offsets)}, "
                             f"{self.valid(s.value.type)}, {atomic})")
        elif isinstance(s, For):
            self.emit(depth, f"for {s.var.name} in range({s.start}, {s.stop}, {s.step}):")
            self.block(s.body, depth + 1)
        elif isinstance(s, SetIndex):  # a runtime scalar takes its value
            self.emit(depth, f"{s.var.name} = {self.index(s.value)}")
        elif isinstance(s, DynFor):  # runtime bounds, evaluated once; an if/else branch runs 0 or 1 times
            self.emit(depth, f"for {s.var.name} in range({self.index(s.start)}, {self.index(s.stop)}, {s.step}):"
                             + ("" if s.kind == "range" else f"  # {s.kind} branch"))
            self.block(s.body, depth + 1)
        elif isinstance(s, Spmd):
            self.emit(depth, f"for {s.var.name} in range({s.count}):")
            self.block(s.body, depth + 1)
        elif isinstance(s, Scope):
            label = s.name or "region"
            self.emit(depth, f"# task {s.task}: {label} (pl.at level={s.level})")
            self.block(s.body, depth)
        else:
            raise PtoNotSupported(f"torch_codegen: statement {type(s).__name__} has no torch form here")

    def block(self, body, depth: int) -> None:
        start = len(self.lines)
        for s in body:
            self.stmt(s, depth)
        if len(self.lines) == start:
            self.emit(depth, "pass")

    def run(self, check_shapes: bool) -> str:
        p = self.program
        self.lines = [_PRELUDE, "", f"def {p.name}({', '.join(q.name for q in p.params)}):"]
        if check_shapes:
            for q in p.params:
                if q.direction != SCALAR:
                    self.emit(1, f"_check({q.name!r}, {q.name}, {self.ints(q.shape)}, "
                                 f"{_tdt(q.dtype)})")
        for q in p.scratch:
            self.emit(1, f"{q.name} = torch.full({self.ints(q.shape)}, "
                         f"{'math.nan' if q.dtype.is_float else 0}, dtype={_tdt(q.dtype)})")
        self.block(p.body, 1)
        if p.ret is not None:
            self.emit(1, f"return {p.ret}")
        return "\n".join(self.lines) + "\n"


def torch_codegen(program, check_shapes: bool = False) -> str:
    """Return PyTorch source computing what ``program`` computes (see the module).

    Parameters
    ----------
    program
        An :class:`~pypto_async.ir.Program` (``kernel.lower(...)`` or
        ``kernel.trace(...)``), one of its :class:`~pypto_async.ir.Function`
        (its program is generated), or a ``@pl.program`` class (its
        Orchestration function's name is bound to the generated function
        too, as PyPTO's code names it).
    check_shapes
        Check each tensor argument's shape and dtype when the function runs.

    Raises
    ------
    PtoArgumentError
        If ``program`` is none of these.
    PtoNotSupported
        If the program holds a statement with no torch form here.
    """
    from ..ir._function import Function

    alias = None
    if isinstance(program, Function):
        program = program.program
    elif not isinstance(program, Program) and hasattr(program, "trace") and hasattr(program, "kernels"):
        orch = getattr(program, "orchestration", None)
        alias = getattr(getattr(orch, "fn", None), "__name__", None)  # PyPTO's entry: the Orchestration function
        if getattr(program, "is_dynamic", False) and not getattr(program, "_bound", ()):
            return _per_extent_source(program, alias, check_shapes)
        program = program.trace()
    if not isinstance(program, Program):
        raise PtoArgumentError(f"torch_codegen takes an ir.Program, an ir.Function or a @pl.program class, "
                               f"got {type(program).__name__}")
    alias = alias or program.entry  # a program lowered from a @pl.program class keeps its entry's name
    code = _Gen(program).run(check_shapes)
    if alias and alias.isidentifier() and alias != program.name:
        code += f"\n\n{alias} = {program.name}  # the program's Orchestration function, by its name\n"
    return code


# -- a @pl.program whose pl.dynamic extents are compiled in -------------------------------------------

#: The dynamic programs whose generated source specialises per call (see :func:`_per_extent_source`).
_PER_EXTENT: dict = {}


class _PerExtent:
    """A ``@pl.program`` with ``pl.dynamic`` dims: its torch code for each set of argument extents, made once."""

    def __init__(self, program, check_shapes: bool):
        self.program, self.check_shapes, self.made = program, check_shapes, {}

    def __call__(self, *args):
        key = tuple(tuple(a.shape) if hasattr(a, "shape") else type(a).__name__ for a in args)
        fn = self.made.get(key)
        if fn is None:
            bound = self.program.bind(*args)
            ns: dict = {}
            exec(compile(torch_codegen(bound, self.check_shapes), f"<torch_codegen {self.program.name}>", "exec"),
                 ns)  # noqa: S102 - our own generated source
            fn = self.made[key] = ns[self.program.name]
        return fn(*args)


def _per_extent_source(program, alias, check_shapes: bool) -> str:
    """Source for a program whose orchestration sizes tensors or windows from its ``pl.dynamic`` dims.

    Those extents are compiled into the program (its tile and intermediate
    shapes), so the function it defines reads its arguments' shapes when
    called and runs the torch code generated for those extents (once per
    set of extents, in this process: the source names the program by a
    token of this process's registry).
    """
    token = f"{program.name}_{id(program):x}"
    _PER_EXTENT[token] = _PerExtent(program, check_shapes)
    orch = program.orchestration
    params = [n for n in orch.param_names()]
    name = program.name
    lines = [
        f"# {name}: its pl.dynamic extents size tensors and windows of the program, so the torch code is",
        "# generated for each call's argument extents (once per set of extents, in the process that made this",
        "# source).",
        "from pypto_async.debug._torch_codegen import _PER_EXTENT",
        "",
        f"_program = _PER_EXTENT[{token!r}]",
        "",
        "",
        f"def {name}({', '.join(params)}):",
        f"    return _program({', '.join(params)})",
    ]
    if alias and alias.isidentifier() and alias != name:
        lines += ["", "", f"{alias} = {name}  # the program's Orchestration function, by its name"]
    return "\n".join(lines) + "\n"
