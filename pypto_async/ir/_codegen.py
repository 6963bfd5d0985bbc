"""Generate C11 for a lowered program.

The kernel is one function ``void SYMBOL(const pto_block *blk, void *const *args)``
(see ``pto_kernel.h``).  Tensor parameters become ``restrict`` pointers, scalar
parameters are ``memcpy``'d out of their argument slot.  Every tile that must
outlive its loop nest gets a buffer declared at the top of the function (on
the stack while small, else ``aligned_alloc``), so loops reuse it per
iteration.  A :class:`~pypto_async.ir._nodes.Fused` chain becomes one loop
nest whose innermost loop runs over the contiguous dimension with unit
stride, which the compiler vectorises; matmul calls a register-blocked,
packed-panel GEMM emitted into the same file.

FP16 and BF16 tiles compute in ``float`` and round when stored or cast.
"""

from __future__ import annotations

import math

from .._dtypes import BF16, BOOL, FP16, FP64, DataType
from .._signature import SCALAR
from ..errors import PtoCompileError
from ._infer import compute_dtype
from ._nodes import (
    Assign,
    Binary,
    Cast,
    Const,
    For,
    Full,
    Fused,
    IBin,
    IConst,
    IVar,
    Load,
    Matmul,
    MatmulAcc,
    Program,
    Reduce,
    ScalarRef,
    Scope,
    Spmd,
    Store,
    Unary,
    Var,
)
from ._passes import view_loads

__all__ = ["generate_c", "CODEGEN_VERSION"]

CODEGEN_VERSION = "4"
_STACK_BUDGET = 96 * 1024  # bytes of tile buffers kept on the stack, per kernel

_PRELUDE = r"""
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pto_kernel.h"

static inline float pto_bf2f(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t pto_f2bf(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);          /* round to nearest even */
    return (uint16_t)(u >> 16);
}

static inline float pto_bf16_round(float f) { return pto_bf2f(pto_f2bf(f)); }

static inline int64_t pto_floordiv(int64_t a, int64_t b)
{
    if (b == 0)
        return 0;
    if (b == -1)
        return (int64_t)(0u - (uint64_t)a);
    int64_t q = a / b;
    return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;
}

static inline int64_t pto_mod(int64_t a, int64_t b)
{
    if (b == 0 || b == -1)
        return 0;
    int64_t r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
"""

_GEMM_F32 = r"""
#ifdef __AVX512F__
#define PTO_MR 8
#else
#define PTO_MR 4
#endif
#define PTO_NR 32
#define PTO_KC 256
typedef float pto_v16f __attribute__((vector_size(64)));

/* C[MR x NR] (+)= A[MR x kc] @ Bp[kc x NR]; Bp is packed (row k at Bp + k*NR).
 * Contraction to FMA is allowed here only: a GEMM is compared to BLAS, which fuses too. */
__attribute__((optimize("fp-contract=fast")))
static inline void pto_gemm_f32_micro(int64_t kc, const float *restrict A, int64_t lda,
                                      const float *restrict Bp, float *restrict C, int64_t ldc, int acc)
{
    pto_v16f c0[PTO_MR], c1[PTO_MR];
    for (int r = 0; r < PTO_MR; r++) {
        if (acc) {
            memcpy(&c0[r], C + r * ldc, 64);
            memcpy(&c1[r], C + r * ldc + 16, 64);
        } else {
            c0[r] = (pto_v16f){0};
            c1[r] = (pto_v16f){0};
        }
    }
    for (int64_t k = 0; k < kc; k++) {
        pto_v16f b0, b1;
        memcpy(&b0, Bp + k * PTO_NR, 64);
        memcpy(&b1, Bp + k * PTO_NR + 16, 64);
        for (int r = 0; r < PTO_MR; r++) {
            float a = A[r * lda + k];
            c0[r] += a * b0;
            c1[r] += a * b1;
        }
    }
    for (int r = 0; r < PTO_MR; r++) {
        memcpy(C + r * ldc, &c0[r], 64);
        memcpy(C + r * ldc + 16, &c1[r], 64);
    }
}

/* C[M x N] (+)= A[M x K] @ B[K x N]; row-major, leading dimensions lda/ldb/ldc. */
__attribute__((optimize("fp-contract=fast")))
static void pto_gemm_f32(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                         const float *B, int64_t ldb, float *C, int64_t ldc, int accumulate)
{
    _Alignas(64) float Bp[PTO_KC * PTO_NR];
    int64_t n_full = N - N % PTO_NR, m_full = M - M % PTO_MR;
    for (int64_t j0 = 0; j0 < n_full; j0 += PTO_NR) {
        for (int64_t p0 = 0; p0 < K; p0 += PTO_KC) {
            int64_t kc = K - p0 < PTO_KC ? K - p0 : PTO_KC;
            for (int64_t k = 0; k < kc; k++)
                memcpy(Bp + k * PTO_NR, B + (p0 + k) * ldb + j0, PTO_NR * sizeof(float));
            int acc = accumulate || p0 > 0;
            for (int64_t i0 = 0; i0 < m_full; i0 += PTO_MR)
                pto_gemm_f32_micro(kc, A + i0 * lda + p0, lda, Bp, C + i0 * ldc + j0, ldc, acc);
            for (int64_t i = m_full; i < M; i++) {
                for (int64_t j = 0; j < PTO_NR; j++) {
                    float s = acc ? C[i * ldc + j0 + j] : 0.0f;
                    for (int64_t k = 0; k < kc; k++)
                        s += A[i * lda + p0 + k] * Bp[k * PTO_NR + j];
                    C[i * ldc + j0 + j] = s;
                }
            }
        }
    }
    for (int64_t i = 0; i < M; i++) {
        for (int64_t j = n_full; j < N; j++) {
            float s = accumulate ? C[i * ldc + j] : 0.0f;
            for (int64_t k = 0; k < K; k++)
                s += A[i * lda + k] * B[k * ldb + j];
            C[i * ldc + j] = s;
        }
    }
}
"""

_GEMM_F64 = r"""
/* C[M x N] (+)= A[M x K] @ B[K x N] in double; i-k-j order, the j loop vectorises. */
static void pto_gemm_f64(int64_t M, int64_t N, int64_t K, const double *A, int64_t lda,
                         const double *B, int64_t ldb, double *restrict C, int64_t ldc, int accumulate)
{
    for (int64_t i = 0; i < M; i++) {
        if (!accumulate)
            for (int64_t j = 0; j < N; j++)
                C[i * ldc + j] = 0.0;
        for (int64_t k = 0; k < K; k++) {
            double a = A[i * lda + k];
            const double *restrict b = B + k * ldb;
            for (int64_t j = 0; j < N; j++)
                C[i * ldc + j] += a * b[j];
        }
    }
}
"""


def _ctype(dtype: DataType) -> str:
    """C type of a tile element while computing (FP16/BF16 compute in float)."""
    return compute_dtype(dtype).c_type


def _literal(value, dtype: DataType) -> str:
    ct = _ctype(dtype)
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


def _index(e) -> str:
    if isinstance(e, IConst):
        return f"INT64_C({e.value})"
    if isinstance(e, IVar):
        return f"ix_{e.name}"
    if isinstance(e, IBin):
        a, b = _index(e.a), _index(e.b)
        if e.op == "//":
            return f"pto_floordiv({a}, {b})"
        if e.op == "%":
            return f"pto_mod({a}, {b})"
        return f"({a} {e.op} {b})"
    raise PtoCompileError(f"bad index expression {e!r}")


def _strides(shape) -> list[int]:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return out[::-1]


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


class _Gen:
    def __init__(self, program: Program, symbol: str):
        self.p = program
        self.symbol = symbol
        self.params = {q.name: q for q in program.params}
        self.lines: list[str] = []
        self.depth = 1
        self.buffers: dict[int, str] = {}  # var id -> C name of its tile buffer
        self.views: dict[int, tuple[str, int]] = {}  # var id -> (pointer name, leading dim)
        self.view_ids = view_loads(program)
        self.decls: list[str] = []
        self.heap: list[str] = []
        self.stack_bytes = 0
        self.uid = 0
        self.uses_gemm_f32 = False
        self.uses_gemm_f64 = False
        self.uses_blk = False

    # -- helpers ----------------------------------------------------------------
    def emit(self, line: str) -> None:
        self.lines.append("    " * self.depth + line)

    def fresh(self, prefix: str) -> str:
        self.uid += 1
        return f"{prefix}{self.uid}"

    def buffer(self, v: Var) -> str:
        name = self.buffers.get(v.id)
        if name is not None:
            return name
        name = f"t{v.id}"
        ct = _ctype(v.type.dtype)
        n = _numel(v.type.shape)
        nbytes = n * compute_dtype(v.type.dtype).itemsize
        if self.stack_bytes + nbytes <= _STACK_BUDGET:
            self.stack_bytes += nbytes
            self.decls.append(f"_Alignas(64) {ct} {name}[{n}];")
        else:
            rounded = (nbytes + 63) // 64 * 64
            self.decls.append(f"{ct} *restrict {name} = ({ct} *)aligned_alloc(64, {rounded});")
            self.heap.append(name)
        self.buffers[v.id] = name
        return name

    def tensor_ptr(self, param: str) -> str:
        return f"p_{param}"

    def linear(self, param: str, offsets) -> str:
        shape = self.params[param].shape
        terms = []
        for off, stride in zip(offsets, _strides(shape)):
            if isinstance(off, IConst) and off.value == 0:
                continue
            terms.append(_index(off) if stride == 1 else f"{_index(off)} * {stride}")
        return " + ".join(terms) if terms else "0"

    def operand_src(self, v: Var) -> tuple[str, str, int]:
        """Return (pointer, base offset, leading dim) for a 2-D tile read in place."""
        if v.id in self.views:
            ptr, ld = self.views[v.id]
            return ptr, "0", ld
        return self.buffer(v), "0", v.type.shape[-1]

    # -- program ----------------------------------------------------------------
    def run(self) -> str:
        body_start = len(self.lines)
        for s in self.p.body:
            self.stmt(s)
        body = self.lines[body_start:]
        # The body is a static function whose tensor parameters are restrict
        # *parameters*: gcc honours restrict there (not on local pointers), so
        # the fused loops vectorise without runtime alias checks.
        sig, unpack, call = ["const pto_block *blk"], [], ["blk"]
        for i, q in enumerate(self.p.params):
            if q.direction == SCALAR:
                st = q.dtype.c_type
                unpack.append(f"    {st} sraw_{q.name};")
                unpack.append(f"    memcpy(&sraw_{q.name}, (const void *)&args[{i}], sizeof sraw_{q.name});")
                conv = f"pto_bf2f(sraw_{q.name})" if q.dtype == BF16 else f"({_ctype(q.dtype)})sraw_{q.name}"
                sig.append(f"const {_ctype(q.dtype)} s_{q.name}")
                call.append(conv)
            else:
                sig.append(f"{q.dtype.c_type} *restrict p_{q.name}")
                call.append(f"({q.dtype.c_type} *)args[{i}]")
        body_fn = f"{self.symbol}_body"
        head = [f"static void {body_fn}({', '.join(sig)})", "{"]
        for q in self.p.params:
            head.append(f"    (void){'s' if q.direction == SCALAR else 'p'}_{q.name};")
        for d in self.decls:
            head.append("    " + d)
        if self.heap:
            cond = " || ".join(f"!{h}" for h in self.heap)
            head.append(f"    if ({cond}) {{")
            head.append('        blk->fail(blk, 2, "kernel: out of memory for tile buffers");')
            head.append("        goto done;")
            head.append("    }")
            self.uses_blk = True
        if not self.uses_blk:
            head.append("    (void)blk;")
        tail = []
        if self.heap:
            tail.append("done:")
            for h in self.heap:
                tail.append(f"    free({h});")
        tail.append("}")
        entry = ["", f"void {self.symbol}(const pto_block *blk, void *const *args)", "{", *unpack,
                 f"    {body_fn}({', '.join(call)});", "}"]
        tail.extend(entry)
        parts = [_PRELUDE]
        if self.uses_gemm_f32:
            parts.append(_GEMM_F32)
        if self.uses_gemm_f64:
            parts.append(_GEMM_F64)
        parts.append(f"/* {self.p.name}: generated by pypto_async.ir (codegen {CODEGEN_VERSION}) */")
        parts.append("\n".join(head + body + tail))
        return "\n".join(parts) + "\n"

    # -- statements ---------------------------------------------------------------
    def block(self, body) -> None:
        self.depth += 1
        for s in body:
            self.stmt(s)
        self.depth -= 1

    def stmt(self, s) -> None:
        if isinstance(s, Fused):
            self.fused(s)
        elif isinstance(s, For):
            v = _index(s.var)
            self.emit(f"for (int64_t {v} = {s.start}; {v} < {s.stop}; {v} += {s.step}) {{")
            self.block(s.body)
            self.emit("}")
        elif isinstance(s, Spmd):
            self.uses_blk = True
            self.emit(f"{{ /* spmd: {s.count} blocks */")
            self.depth += 1
            self.emit(f"const int64_t {_index(s.var)} = (int64_t)blk->block_idx;")
            self.depth -= 1
            self.block(s.body)
            self.emit("}")
        elif isinstance(s, Scope):
            self.emit(f"{{ /* at {s.level} */")
            self.block(s.body)
            self.emit("}")
        elif isinstance(s, Assign) and isinstance(s.expr, Load):
            # Only view loads remain outside fused chains.
            q = self.params[s.expr.param]
            name = f"vw{s.var.id}"
            if s.var.id not in self.views:  # declared at the top: a view may be read after its loop
                self.decls.append(f"const {q.dtype.c_type} *{name} = 0;")
            self.emit(f"{name} = {self.tensor_ptr(q.name)} + ({self.linear(q.name, s.expr.offsets)});")
            self.views[s.var.id] = (name, q.shape[-1])
        elif isinstance(s, Assign) and isinstance(s.expr, Reduce):
            self.reduce(s.var, s.expr)
        elif isinstance(s, Assign) and isinstance(s.expr, Matmul):
            self.matmul(s.var, s.expr.a, s.expr.b, accumulate=False)
        elif isinstance(s, MatmulAcc):
            self.matmul(s.acc, s.a, s.b, accumulate=True)
        else:
            raise PtoCompileError(f"codegen: statement not lowered: {type(s).__name__} (run the pass pipeline)")

    def matmul(self, out: Var, a: Var, b: Var, accumulate: bool) -> None:
        m, k = a.type.shape
        n = b.type.shape[1]
        pa, _, lda = self.operand_src(a)
        pb, _, ldb = self.operand_src(b)
        c = self.buffer(out)
        if out.type.dtype == FP64:
            self.uses_gemm_f64 = True
            fn = "pto_gemm_f64"
        else:
            self.uses_gemm_f32 = True
            fn = "pto_gemm_f32"
        self.emit(f"{fn}({m}, {n}, {k}, {pa}, {lda}, {pb}, {ldb}, {c}, {n}, {int(accumulate)});")

    def reduce(self, out: Var, e: Reduce) -> None:
        src, _, ld = self.operand_src(e.x)
        r, c = e.x.type.shape
        dst = self.buffer(out)
        dt = e.x.type.dtype
        ct = _ctype(dt)
        kind = e.op.split("_")[1]
        if kind == "sum":
            acc_t = "double" if dt.is_float else "int64_t"
        else:
            acc_t = ct
        cmp = {"max": ">", "min": "<"}.get(kind)
        self.emit("{")
        self.depth += 1
        if e.op.startswith("row"):
            self.emit(f"for (int64_t r = 0; r < {r}; r++) {{")
            self.depth += 1
            self.emit(f"const {ct} *restrict row = {src} + r * {ld};")
            if kind == "sum":
                self.emit(f"{acc_t} acc = 0;")
                self.emit(f"for (int64_t c = 0; c < {c}; c++) acc += row[c];")
            else:
                self.emit(f"{acc_t} acc = row[0];")
                self.emit(f"for (int64_t c = 1; c < {c}; c++) acc = (row[c] {cmp} acc || row[c] != row[c]) ? row[c] : acc;")
            self.emit(f"{dst}[r] = ({ct})acc;")
            self.depth -= 1
            self.emit("}")
        else:
            self.emit(f"for (int64_t c = 0; c < {c}; c++) {dst}[c] = {src}[c];")
            self.emit(f"for (int64_t r = 1; r < {r}; r++) {{")
            self.depth += 1
            self.emit(f"const {ct} *restrict row = {src} + r * {ld};")
            if kind == "sum":
                self.emit(f"for (int64_t c = 0; c < {c}; c++) {dst}[c] += row[c];")
            else:
                self.emit(
                    f"for (int64_t c = 0; c < {c}; c++) {dst}[c] = (row[c] {cmp} {dst}[c] || row[c] != row[c]) "
                    f"? row[c] : {dst}[c];"
                )
            self.depth -= 1
            self.emit("}")
        self.depth -= 1
        self.emit("}")

    # -- fused chains ---------------------------------------------------------------
    def fused(self, f: Fused) -> None:
        shape = f.shape
        rank = len(shape)
        idx = [f"e{d}" for d in range(rank)]
        defs = {m.var.id for m in f.members if isinstance(m, Assign)}
        keep = set(f.materialize)
        self.emit("{")
        self.depth += 1
        bases: dict[int, str] = {}
        for m in f.members:
            if isinstance(m, Assign) and isinstance(m.expr, Load):
                off = self.linear(m.expr.param, m.expr.offsets)
                if off != "0":
                    name = self.fresh("o")
                    self.emit(f"const int64_t {name} = {off};")
                    bases[id(m)] = name
            elif isinstance(m, Store):
                off = self.linear(m.param, m.offsets)
                if off != "0":
                    name = self.fresh("o")
                    self.emit(f"const int64_t {name} = {off};")
                    bases[id(m)] = name
        for d in range(rank):
            self.emit(f"for (int64_t {idx[d]} = 0; {idx[d]} < {shape[d]}; {idx[d]}++) {{")
            self.depth += 1
        tile_lin = self._lin(shape, shape, idx)

        def tensor_index(param: str, m) -> str:
            lin = self._lin(self.params[param].shape, shape, idx, tensor=True)
            base = bases.get(id(m))
            return f"{base} + {lin}" if base else lin

        def operand(x) -> str:
            if isinstance(x, Var):
                if x.id in defs:
                    return f"v{x.id}"
                return f"{self.buffer(x)}[{self._lin(x.type.shape, shape, idx)}]"
            if isinstance(x, Const):
                return _literal(x.value, x.dtype)
            if isinstance(x, ScalarRef):
                q = self.params[x.param]
                if compute_dtype(q.dtype) == compute_dtype(x.dtype):
                    return f"s_{x.param}"
                return f"(({_ctype(x.dtype)})s_{x.param})"
            raise PtoCompileError(f"bad operand {x!r}")

        for m in f.members:
            if isinstance(m, Store):
                q = self.params[m.param]
                val = operand(m.value)
                if q.dtype == FP16:
                    val = f"(_Float16){val}"
                elif q.dtype == BF16:
                    val = f"pto_f2bf({val})"
                self.emit(f"{self.tensor_ptr(m.param)}[{tensor_index(m.param, m)}] = {val};")
                continue
            v = m.var
            ct = _ctype(v.type.dtype)
            rhs = self._expr(m.expr, v.type.dtype, operand, lambda: tensor_index(m.expr.param, m))
            self.emit(f"const {ct} v{v.id} = {rhs};")
            if v.id in keep:
                self.emit(f"{self.buffer(v)}[{tile_lin}] = v{v.id};")
        for _ in range(rank):
            self.depth -= 1
            self.emit("}")
        self.depth -= 1
        self.emit("}")

    def _lin(self, vshape, gshape, idx, tensor: bool = False) -> str:
        """Linear index of element ``idx`` (over ``gshape``) in an array of ``vshape``.

        Tiles broadcast (size-1 dims read index 0, missing leading dims are
        ignored); tensors are indexed with their full strides.
        """
        off = len(gshape) - len(vshape)
        terms = []
        for d, (size, stride) in enumerate(zip(vshape, _strides(vshape))):
            if size == 1 and not tensor:
                continue
            i = idx[d + off]
            terms.append(i if stride == 1 else f"{i} * {stride}")
        return " + ".join(terms) if terms else "0"

    def _expr(self, e, dtype: DataType, operand, load_index) -> str:
        ct = _ctype(dtype)
        f = "f" if ct == "float" else ""
        if isinstance(e, Load):
            q = self.params[e.param]
            ref = f"{self.tensor_ptr(e.param)}[{load_index()}]"
            if q.dtype == BF16:
                return f"pto_bf2f({ref})"
            if q.dtype == FP16:
                return f"(float){ref}"
            return ref
        if isinstance(e, Full):
            return operand(e.value)
        if isinstance(e, Cast):
            x = operand(e.x)
            if e.dtype == FP16:
                return f"(float)(_Float16)({x})"
            if e.dtype == BF16:
                return f"pto_bf16_round((float)({x}))"
            return f"({ct})({x})"
        if isinstance(e, Unary):
            x = operand(e.x)
            if e.op == "neg":
                return f"({ct})(-{x})"
            if e.op == "abs":
                return f"fabs{f}({x})" if dtype.is_float else f"({ct})({x} < 0 ? -{x} : {x})"
            if e.op == "relu":
                return f"({x} > 0 ? {x} : ({ct})0)"
            if e.op == "rsqrt":
                return f"(({ct})1 / sqrt{f}({x}))"
            return f"{e.op}{f}({x})"
        if isinstance(e, Binary):
            a, b = operand(e.a), operand(e.b)
            if e.op in ("add", "sub", "mul"):
                sym = {"add": "+", "sub": "-", "mul": "*"}[e.op]
                return f"({ct})({a} {sym} {b})"
            if e.op == "div":
                if dtype.is_float:
                    return f"({a} / {b})"
                return f"({ct})pto_floordiv((int64_t)({a}), (int64_t)({b}))"
            cmp = ">" if e.op == "maximum" else "<"
            if dtype.is_float:
                return f"(({a} {cmp} {b} || {a} != {a}) ? {a} : {b})"
            return f"({a} {cmp} {b} ? {a} : {b})"
        raise PtoCompileError(f"codegen: not an element-wise expression: {e!r}")


def generate_c(program: Program, symbol: str) -> str:
    """Return the C11 source of a lowered program with entry point ``symbol``."""
    if program.stage != "lowered":
        raise PtoCompileError("generate_c needs a lowered program (run ir.run_passes first)")
    return _Gen(program, symbol).run()
