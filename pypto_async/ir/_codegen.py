"""Generate C11 for a lowered program.

The kernel is one function ``void SYMBOL(const pto_block *blk, void *const *args)``
(see ``pto_kernel.h``).  Tensor parameters become ``restrict`` pointers, scalar
parameters are ``memcpy``'d out of their argument slot.  Every tile that must
outlive its loop nest gets a buffer declared at the top of the function (on
the stack while small, else ``aligned_alloc``), so loops reuse it per
iteration.  A :class:`~pypto_async.ir._nodes.Fused` chain becomes one loop
nest whose innermost loop runs over the contiguous dimension with unit
stride, which the compiler vectorises (``_cexpr`` writes each member's
element expression); matmul calls the register-blocked, packed-panel GEMM of
``pto_gemm.h``.  A loop-carried tile's ``Update`` copies the new value into
the carried tile's buffer.  The C helpers live in real headers under
``pypto_async/include`` (``pto_kernel_rt.h``: BF16 rounding, Python's ``//``
and ``%``, rounding casts, atomic adds; ``pto_gemm.h``), which the generated
file includes.

Memory spaces generate nothing: the sim has one memory.  A partially valid
tile costs a test per element where a load reads or a store writes it; a
valid extent known only at run time is checked once per loop nest, and one
outside its tile or tensor fails the launch (``PTO_EINVAL``) with the
kernel's file and line.

FP16 and BF16 tiles compute in ``float`` and round when stored or cast.

Every statement also counts its work for the device model
(:mod:`pypto_async.ir._work`): bytes and rows of each load and store,
vector bytes by op class, cube MACs.  The counts are locals of the body
function, added where the statement runs (so runtime trip counts and
runtime ``if`` branches count what ran) and into ``blk->work`` once at its
exit, failed launches included.
"""

from __future__ import annotations

from pathlib import Path

from .._dtypes import BF16, FP16, FP64, INT8
from .._signature import SCALAR
from ..errors import PtoCompileError
from ._cexpr import Element, bits_float, element, linear_at, literal, strides, valid_cond
from ._cexpr import ctype as _ctype
from ._cexpr import index as _index
from ._infer import compute_dtype
from ._nodes import (
    IBin,
    IConst,
    ICheck,
    IRead,
    IScalar,
    IVar,
    SetIndex,
    Assign,
    Const,
    DynFor,
    For,
    Fused,
    Load,
    Matmul,
    MatmulAcc,
    Move,
    Reduce,
    ScalarBits,
    ScalarIndex,
    ScalarRef,
    Scope,
    Spmd,
    Store,
    Update,
    Var,
    Assemble,
)
from ._nodes import Order, Scatter
from ._program import Program
from ._codegen_order import PHILOX_C, emit_order
from ._passes import view_loads
from ._gather_c import emit_scatter, emit_scatter_store
from ._work import FIELDS, acc_reads, fixpipe_work, matmul_work, member_work, overlaps, reduce_work, scatter_work, transfer

__all__ = ["generate_c", "CODEGEN_VERSION"]

CODEGEN_VERSION = "15"
_STACK_BUDGET = 96 * 1024  # bytes of tile buffers kept on the stack, per kernel

#: What every generated kernel includes; a kernel that multiplies adds pto_gemm.h.
#: The headers live in pypto_async/include (the compiler adds it with -I).
_INCLUDES = ('#include "pto_kernel.h"', '#include "pto_kernel_rt.h"')
_GEMM_INCLUDE = '#include "pto_gemm.h"'


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


#: The FP8 types' pto_kernel_rt.h names (pto_e4m3_2f, pto_f2e4m3, pto_e4m3_round), by pl name.
_FP8_C = {"FP8E4M3FN": "e4m3", "FP8E5M2": "e5m2", "FP8E8M0": "e8m0"}


def _fp8_round(dtype, value: str) -> str:
    """C of float ``value`` rounded to FP8 ``dtype``, to nearest even (pto_kernel_rt.h)."""
    return f"pto_{_FP8_C[dtype.name]}_round({value}, 0)"


def _c_string(text: str) -> str:
    """A C string literal of ``text`` (printable ASCII kept, anything else as '?')."""
    safe = "".join(ch if 32 <= ord(ch) < 127 and ch not in '"\\?' else "?" for ch in text)
    return f'"{safe}"'


class _Gen:
    def __init__(self, program: Program, symbol: str):
        self.program = program
        self.symbol = symbol
        self.params = {q.name: q for q in (*program.params, *program.scratch)}
        #: ``(tensor, axis) -> C`` of each extent read at run time (a ``pl.dynamic`` dimension's scalar).
        self.dyn = {(t, a): f"((int64_t)s_{sc})" for sc, t, a in getattr(program, "dynamic", ())}
        self.task: str | None = None  # the task (named region) being emitted, for failure messages
        self.lines: list[str] = []
        self.depth = 1
        self.buffers: dict[int, str] = {}  # var id -> C name of its tile buffer
        self.views: dict[int, tuple[str, int]] = {}  # var id -> (pointer name, leading dim)
        self.view_ids = view_loads(program)
        self.decls: list[str] = []
        self.heap: list[str] = []
        self.stack_bytes = 0
        self.uid = 0
        self.uses_gemm = False
        self.uses_blk = False
        self.uses_fail = False  # a runtime check may fail the launch (goto done)
        self.declared: set[str] = set()  # runtime scalars (SetIndex) declared at the top
        self.runtime = runtime_names(program.body)  # their names and those of runtime-bound loops
        self.work: list[str] = []  # the pto_work counters this kernel adds to (FIELDS keys), in first use
        self.acc: set[int] = set()  # tiles a matmul writes (its accumulator, L0C): read out through FIXPIPE

    def add_work(self, items) -> None:
        """Add (counter, C amount) pairs to the kernel's work counters, where the code runs now."""
        for field, amount in items:
            if amount == "0":
                continue
            if field not in self.work:
                self.work.append(field)
            self.emit(f"w_{field} += {amount};")

    def transfer_work(self, kind: str, param: str, shape, valid) -> None:
        """Count a load (`kind` "load") or store of a `shape` box (valid extents `valid`) of tensor `param`."""
        q = self.params[param]
        nbytes, rows = transfer(q.shape, shape, valid, q.dtype.itemsize)
        self.add_work([(f"{kind}_bytes", nbytes), (f"{kind}_rows", rows)])

    def work_frame(self, head: list[str], tail: list[str], body) -> None:
        """Declare the work counters at the top of `head`'s body and add them into blk->work at the exit.

        `tail` is what :meth:`frame` returned; the flush goes right after its
        ``done:`` label (every exit passes it) or before its closing brace.
        """
        flush = [f"    blk->work->{FIELDS[f]} += w_{f};" for f in self.work]
        if overlaps(body):
            flush.append("    blk->work->overlap = 1u;")
        if not flush:
            return
        at = head.index("{") + 1
        head[at:at] = [f"    uint64_t w_{f} = 0;" for f in self.work]
        if head[-1] == "    (void)blk;":
            head.pop()
        i = tail.index("done:;") + 1 if "done:;" in tail else len(tail) - 1
        tail[i:i] = flush

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
        for off, stride in zip(offsets, strides(shape)):
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
        for s in self.program.body:
            self.stmt(s)
        body = self.lines[body_start:]
        # The body is a static function whose tensor parameters are restrict
        # *parameters*: gcc honours restrict there (not on local pointers), so
        # the fused loops vectorise without runtime alias checks.
        sig, unpack, call = ["const pto_block *blk"], [], ["blk"]
        for i, q in enumerate(self.program.params):
            if q.direction == SCALAR:
                if q.dtype.is_float and q.dtype.itemsize == 1:
                    raise PtoCompileError(f"scalar parameter {q.name!r}: a {q.dtype.name} scalar is not supported "
                                          f"here; pass an FP32 scalar (tiles cast to {q.dtype.name} with pl.cast)")
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
        for q in self.program.params:
            head.append(f"    (void){'s' if q.direction == SCALAR else 'p'}_{q.name};")
        for d in self.decls:
            head.append("    " + d)
        # A program's intermediates (pl.create_tensor) live for one launch, beside its tile buffers.
        for q in self.program.scratch:
            nbytes = (_numel(q.shape) * q.dtype.itemsize + 63) // 64 * 64
            head.append(f"    {q.dtype.c_type} *restrict p_{q.name} = ({q.dtype.c_type} *)aligned_alloc(64, {nbytes});")
            self.heap.append(f"p_{q.name}")
        tail = self.frame(head)
        self.work_frame(head, tail, self.program.body)
        entry = ["", f"void {self.symbol}(const pto_block *blk, void *const *args)", "{", *unpack,
                 f"    {body_fn}({', '.join(call)});", "}"]
        tail.extend(entry)
        parts = [f"/* {self.program.name}: generated by pypto_async.ir (codegen {CODEGEN_VERSION}) */",
                 *_INCLUDES]
        if self.uses_gemm:
            parts.append(_GEMM_INCLUDE)
        if any("pto_philox4x32(" in line for line in body):  # pl.random
            parts.extend(["", PHILOX_C.rstrip()])
        parts.append("")
        parts.append("\n".join(head + body + tail))
        return "\n".join(parts) + "\n"

    # -- statements ---------------------------------------------------------------
    def frame(self, head: list[str]) -> list[str]:
        """Close the body function's frame and return its tail.

        Appends to `head` the check that the tile buffers were allocated
        (failing the block with PTO_ENOMEM); the tail frees them at ``done:``.
        """
        if self.heap:
            cond = " || ".join(f"!{h}" for h in self.heap)
            head.append(f"    if ({cond}) {{")
            head.append('        blk->fail(blk, PTO_ENOMEM, "kernel: out of memory for tile buffers");')
            head.append("        goto done;")
            head.append("    }")
            self.uses_blk = True
        if not self.uses_blk:
            head.append("    (void)blk;")
        tail = []
        if self.heap or self.uses_fail:
            tail.append("done:;")
            for h in self.heap:
                tail.append(f"    free({h});")
        tail.append("}")
        return tail

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
        elif isinstance(s, SetIndex):
            v = _index(s.var)
            for r in _reads(s.value):  # a pl.read at an index known only now: checked before it is read
                self.check_offsets(s, r.param, r.offsets, (1,) * len(r.offsets), None, "pl.read")
            if isinstance(s.value, ICheck):  # an extent read at run time, unified with a kernel's static one
                self.uses_blk = self.uses_fail = True
                self.emit(f"if ({_index(s.value.expr)} != INT64_C({s.value.value})) {{")
                self.emit(f"    blk->fail(blk, PTO_EINVAL, {_c_string(s.value.message)});")
                self.emit("    goto done;")
                self.emit("}")
            if v not in self.declared:  # declared at the top: both branches of an if assign it
                self.declared.add(v)
                self.decls.append(f"int64_t {v} = 0;")
            self.emit(f"{v} = {_index(s.value)};")
        elif isinstance(s, DynFor) and s.kind == "while":  # pl.while_: the condition before each iteration
            self.emit(f"while (({_index(s.stop)}) != 0) {{")
            self.block(s.body)
            self.emit("}")
        elif isinstance(s, DynFor):
            v, n = _index(s.var), self.fresh("n")
            self.emit(f"{{ /* {s.kind} */")
            self.depth += 1
            self.emit(f"const int64_t {n} = {_index(s.stop)};")
            self.emit(f"for (int64_t {v} = {_index(s.start)}; {v} < {n}; {v} += {s.step}) {{")
            self.block(s.body)
            self.emit("}")
            self.depth -= 1
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
            outer = self.task
            if s.name is not None:
                self.task = s.name
            self.emit(f"{{ /* at {s.level}{'' if s.name is None else ': task ' + s.name} */")
            self.block(s.body)
            self.emit("}")
            self.task = outer
        elif isinstance(s, Assign) and isinstance(s.expr, Load):
            # Only view loads remain outside fused chains.
            q = self.params[s.expr.param]
            self.check_offsets(s, q.name, s.expr.offsets, s.expr.shape, s.expr.valid, "pl.load")
            name = f"vw{s.var.id}"
            if s.var.id not in self.views:  # declared at the top: a view may be read after its loop
                self.decls.append(f"const {q.dtype.c_type} *{name} = 0;")
            self.emit(f"{name} = {self.tensor_ptr(q.name)} + ({self.linear(q.name, s.expr.offsets)});")
            self.views[s.var.id] = (name, q.shape[-1])
            self.transfer_work("load", q.name, s.expr.shape, s.expr.valid)
        elif isinstance(s, Assign) and isinstance(s.expr, Reduce):
            self.reduce(s.var, s.expr)
        elif isinstance(s, Assign) and isinstance(s.expr, Order):  # argmax / argmin, sort32, mrgsort
            emit_order(self, s)
        elif isinstance(s, Store) and s.index is not None:  # pl.mscatter
            emit_scatter_store(self, s)
            q = self.params[s.param]
            n = _numel(s.value.type.shape)
            self.add_work([("store_bytes", str(n * q.dtype.itemsize)), ("store_rows", str(n))])
        elif isinstance(s, Assign) and isinstance(s.expr, Scatter):
            emit_scatter(self, s.var, s.expr, s.loc)
            self.add_work(scatter_work(s.expr))
        elif isinstance(s, Assign) and isinstance(s.expr, Matmul):
            self.matmul(s.var, s.expr.a, s.expr.b, accumulate=False, bias=s.expr.bias,
                        scales=(s.expr.a_scale, s.expr.b_scale))
        elif isinstance(s, MatmulAcc):
            self.matmul(s.acc, s.a, s.b, accumulate=True, scales=(s.a_scale, s.b_scale))
        elif isinstance(s, Update):
            if s.value.id != s.target.id:
                nbytes = _numel(s.target.type.shape) * compute_dtype(s.target.type.dtype).itemsize
                self.emit(f"memcpy({self.buffer(s.target)}, {self.buffer(s.value)}, {nbytes}); /* carried */")
        else:
            raise PtoCompileError(f"codegen: statement not lowered: {type(s).__name__} (run the pass pipeline)")

    def matmul(self, out: Var, a: Var, b: Var, accumulate: bool, bias: Var | None = None,
               scales: tuple = (None, None)) -> None:
        m, k = a.type.shape
        n = b.type.shape[1]
        pa, _, lda = self.operand_src(a)
        pb, _, ldb = self.operand_src(b)
        c = self.buffer(out)
        if bias is not None:  # pl.matmul_bias: every row starts as the bias, the product accumulates onto it
            pbias, _, _ = self.operand_src(bias)
            self.emit(f"for (int64_t r = 0; r < {m}; r++) memcpy({c} + r * {n}, {pbias}, {n} * sizeof *{c});")
            accumulate = True
        self.uses_gemm = True
        if scales[0] is not None:  # pl.matmul_mx: each K block of 32 scaled by its FP8E8M0 scale
            (psa, _, ldsa), (psb, _, ldsb) = self.operand_src(scales[0]), self.operand_src(scales[1])
            self.emit(f"pto_gemm_mx_f32({m}, {n}, {k}, {pa}, {lda}, {psa}, {ldsa}, {pb}, {ldb}, {psb}, {ldsb}, "
                      f"{c}, {n}, {int(accumulate)});")
        elif a.type.dtype == INT8:  # INT8 x INT8 into INT32 (wrapping, as the cube's int32 accumulator)
            acc = f"(uint32_t)c_[i * {n} + j]" if accumulate else "0u"
            self.emit(f"{{ int32_t *restrict c_ = {c}; for (int64_t i = 0; i < {m}; i++) "
                      f"for (int64_t j = 0; j < {n}; j++) {{ uint32_t s_ = {acc}; for (int64_t p = 0; p < {k}; p++) "
                      f"s_ += (uint32_t)((int32_t){pa}[i * {lda} + p] * (int32_t){pb}[p * {ldb} + j]); "
                      f"c_[i * {n} + j] = (int32_t)s_; }} }}")
        else:
            fn = "pto_gemm_f64" if out.type.dtype == FP64 else "pto_gemm_f32"
            self.emit(f"{fn}({m}, {n}, {k}, {pa}, {lda}, {pb}, {ldb}, {c}, {n}, {int(accumulate)});")
        self.add_work(fixpipe_work([x for x in (a, b) if x.id in self.acc]))  # an accumulator into L1
        self.add_work(matmul_work(a, b))
        self.acc.add(out.id)

    def reduce(self, out: Var, e: Reduce) -> None:
        """A row / column reduction over the tile's valid region (as the device's, which reads no padding)."""
        src, _, ld = self.operand_src(e.x)
        r, c = e.x.type.shape
        valid = e.x.type.valid
        vr, vc = (r, c) if valid is None else (_index(valid[0]), _index(valid[1]))
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
        if kind == "prod":
            self.reduce_prod(e, src, ld, dst)
        elif e.op.startswith("row"):
            self.emit(f"for (int64_t r = 0; r < {r}; r++) {{")
            self.depth += 1
            self.emit(f"const {ct} *restrict row = {src} + r * {ld};")
            if kind == "sum":
                self.emit(f"{acc_t} acc = 0;")
                self.emit(f"for (int64_t c = 0; c < {vc}; c++) acc += row[c];")
            else:
                self.emit(f"{acc_t} acc = row[0];")
                self.emit(f"for (int64_t c = 1; c < {vc}; c++) acc = (row[c] {cmp} acc || row[c] != row[c]) ? row[c] : acc;")
            self.emit(f"{dst}[r] = ({ct})acc;")
            self.depth -= 1
            self.emit("}")
        elif kind == "sum" and dt.is_float:
            self.col_sum(e, src, ld, dst, r, c, vr)
        else:
            self.emit(f"for (int64_t c = 0; c < {c}; c++) {dst}[c] = {src}[c];")
            self.emit(f"for (int64_t r = 1; r < {vr}; r++) {{")
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
        if dt.is_float and dt.itemsize == 1:  # an FP8 tile holds FP8 values: the result rounds once
            n = r if e.op.startswith("row") else c
            self.emit(f"for (int64_t i = 0; i < {n}; i++) {dst}[i] = {_fp8_round(dt, f'{dst}[i]')};")
        self.depth -= 1
        self.emit("}")
        self.add_work(fixpipe_work([e.x] if e.x.id in self.acc else []))
        self.add_work(reduce_work(e.x))

    def col_sum(self, e: Reduce, src: str, ld: int, dst: str, r: int, c: int, vr) -> None:
        """A float column sum as the device's: in the tile's dtype, each step rounded to it.

        The rows are added one after another, or with ``tmp_tile`` (``e.tree``) pairwise: row ``i``
        becomes rows ``2i`` + ``2i + 1``, an odd last row is added into row 0, until one row is left.
        """
        dt = e.x.type.dtype
        ct = _ctype(dt)
        rnd = {FP16: "(float)(_Float16)({})", BF16: "pto_bf16_round((float)({}))"}.get(dt, "({})")
        if not e.tree:
            self.emit(f"for (int64_t c = 0; c < {c}; c++) {dst}[c] = {src}[c];")
            self.emit(f"for (int64_t r = 1; r < {vr}; r++)")
            self.emit(f"    for (int64_t c = 0; c < {c}; c++) {dst}[c] = {rnd.format(f'{dst}[c] + {src}[r * {ld} + c]')};")
            return
        self.emit(f"{ct} col_[{r}];")
        self.emit(f"for (int64_t c = 0; c < {c}; c++) {{")
        self.emit(f"    for (int64_t r = 0; r < {vr}; r++) col_[r] = {src}[r * {ld} + c];")
        self.emit(f"    for (int64_t n = {vr}; n > 1; n /= 2) {{")
        self.emit(f"        for (int64_t i = 0; i < n / 2; i++) col_[i] = {rnd.format('col_[2 * i] + col_[2 * i + 1]')};")
        self.emit(f"        if (n % 2) col_[0] = {rnd.format('col_[0] + col_[n - 1]')};")
        self.emit("    }")
        self.emit(f"    {dst}[c] = col_[0];")
        self.emit("}")

    def reduce_prod(self, e: Reduce, src: str, ld: int, dst: str) -> None:
        """row_prod / col_prod over the valid region (as PyPTO's): floats multiply in double, integers wrap."""
        r, c = e.x.type.shape
        dt = e.x.type.dtype
        ct = _ctype(dt)
        acc_t = "double" if dt.is_float else "int64_t"
        valid = e.x.type.valid
        vr, vc = (r, c) if valid is None else (_index(valid[0]), _index(valid[1]))
        if e.op.startswith("row"):
            self.emit(f"for (int64_t r = 0; r < {r}; r++) {{")
            self.emit(f"    const {ct} *restrict row = {src} + r * {ld};")
            self.emit(f"    {acc_t} acc = 1;")
            self.emit(f"    for (int64_t c = 0; c < {vc}; c++) acc = {_prod_step('acc', 'row[c]', dt)};")
            self.emit(f"    {dst}[r] = ({ct})acc;")
            self.emit("}")
        else:
            self.emit(f"for (int64_t c = 0; c < {c}; c++) {{")
            self.emit(f"    {acc_t} acc = 1;")
            self.emit(f"    for (int64_t r = 0; r < {vr}; r++) acc = {_prod_step('acc', f'{src}[r * {ld} + c]', dt)};")
            self.emit(f"    {dst}[c] = ({ct})acc;")
            self.emit("}")

    # -- fused chains ---------------------------------------------------------------
    def check_box(self, m, param: str, offsets, shape, valid, what: str) -> None:
        """Fail the launch if a runtime valid extent, or a runtime offset, leaves its tile or its tensor."""
        self.check_offsets(m, param, offsets, shape, valid, what)
        if valid is None:
            return
        dims = self.extents(param)
        for d, e in enumerate(valid):
            if isinstance(e, IConst):
                continue  # checked at compile time (against a run-time extent by check_offsets)
            x = self.fresh("x")
            self.emit(f"const int64_t {x} = {_index(e)};")
            self.fail_if(f"{x} < 0 || {x} > {shape[d]} || {_index(offsets[d])} + {x} > {dims[d]}",
                         f"{self.where(m.loc)}{what}: valid extent of dimension {d} outside [0, {shape[d]}] or "
                         f"tensor {param!r}")

    def check_offsets(self, m, param: str, offsets, shape, valid, what: str) -> None:
        """Fail the launch if an offset over a runtime scalar puts the window outside its tensor."""
        dims = self.extents(param)
        for d, off in enumerate(offsets):
            dynamic = (param, d) in self.dyn
            if not dynamic and not _mentions(off, self.runtime):
                continue  # checked at compile time
            x = self.fresh("x")
            # With a valid region only its box must lie inside (check_box checks a runtime extent).
            ext = shape[d] if valid is None else valid[d].value if isinstance(valid[d], IConst) else 0
            self.emit(f"const int64_t {x} = {_index(off)};")
            if dynamic:  # the tensor's extent is read at run time (a pl.dynamic dimension)
                self.fail_if(f"{x} < 0 || {x} + {ext} > {dims[d]}",
                             f"{self.where(m.loc)}{what}: dim {d} of {param!r} past its run-time extent")
                continue
            self.fail_if(f"{x} < 0 || {x} + {ext} > {dims[d]}",
                         f"{self.where(m.loc)}{what}: runtime offset of dimension {d} puts the window outside "
                         f"tensor {param!r} (extent {dims[d]})")

    def extents(self, param: str) -> list:
        """Tensor ``param``'s extents: ints, or the C of one read at run time (a ``pl.dynamic`` dimension)."""
        return [self.dyn.get((param, d), n) for d, n in enumerate(self.params[param].shape)]

    def check_tile_offsets(self, m, tile: Var, offsets, shape, what: str) -> None:
        """Fail the launch if an offset over a runtime scalar puts a ``shape`` window outside ``tile``."""
        dims = tile.type.shape
        for d, off in enumerate(offsets):
            if not _mentions(off, self.runtime):
                continue  # checked at compile time
            x = self.fresh("x")
            self.emit(f"const int64_t {x} = {_index(off)};")
            self.fail_if(f"{x} < 0 || {x} + {shape[d]} > {dims[d]}",
                         f"{self.where(m.loc)}{what}: offset of dim {d} leaves the tile ({dims[d]})")

    def where(self, loc) -> str:
        """A run-time failure message's prefix: the checked statement's file:line, and the task it runs in."""
        where = f"{Path(loc.file).name}:{loc.line}: " if loc is not None else ""
        return where + (f"task {self.task}: " if self.task is not None else "")

    def fail_if(self, cond: str, message: str) -> None:
        """Emit a check: where the C condition ``cond`` holds, the launch fails (``PTO_EINVAL``, ``message``)."""
        self.uses_blk = self.uses_fail = True
        self.emit(f"if ({cond}) {{")
        self.emit(f"    blk->fail(blk, PTO_EINVAL, {_c_string(message)});")
        self.emit("    goto done;")
        self.emit("}")

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
            if isinstance(m, Assign) and isinstance(m.expr, Assemble):
                self.check_tile_offsets(m, m.expr.target, m.expr.offsets, m.expr.source.type.shape,
                                        "pl.tile.assemble")
            if isinstance(m, Assign) and isinstance(m.expr, Load):
                param, offsets = m.expr.param, m.expr.offsets
                self.check_box(m, param, offsets, m.expr.shape, m.expr.valid, "pl.load")
            elif isinstance(m, Store):
                param, offsets = m.param, m.offsets
                self.check_box(m, param, offsets, m.value.type.shape, m.value.type.valid, "pl.store")
            else:
                continue
            off = self.linear(param, offsets)
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
                return literal(x.value, x.dtype)
            if isinstance(x, ScalarRef):
                q = self.params[x.param]
                if compute_dtype(q.dtype) == compute_dtype(x.dtype):
                    return f"s_{x.param}"
                return f"(({_ctype(x.dtype)})s_{x.param})"
            if isinstance(x, ScalarBits):
                return f"(({_ctype(x.dtype)}){bits_float(x.expr)})"
            if isinstance(x, ScalarIndex):
                return f"(({_ctype(x.dtype)}){_index(x.expr)})"
            raise PtoCompileError(f"bad operand {x!r}")

        def at(x: Var, dims) -> str:
            lin = tile_lin if dims is None else linear_at(x.type.shape, dims)
            return f"{self.buffer(x)}[{lin}]"

        for m in f.members:
            if isinstance(m, Store):
                self.fused_store(m, operand(m.value), f"{self.tensor_ptr(m.param)}[{tensor_index(m.param, m)}]",
                                 valid_cond(idx, m.value.type.shape, m.value.type.valid))
                continue
            v = m.var
            ct = _ctype(v.type.dtype)
            def tensor_ref(m=m) -> str:
                return f"{self.tensor_ptr(m.expr.param)}[{tensor_index(m.expr.param, m)}]"

            el = Element(idx, operand, at, tensor_ref)
            value = element(m.expr, v.type.dtype, el)
            if v.type.dtype.is_float and v.type.dtype.itemsize == 1:  # an FP8 tile holds FP8 values
                value = _fp8_round(v.type.dtype, value)
            self.emit(f"const {ct} v{v.id} = {value};")
            if v.id in keep:
                self.emit(f"{self.buffer(v)}[{tile_lin}] = v{v.id};")
        for _ in range(rank):
            self.depth -= 1
            self.emit("}")
        out_of_acc = acc_reads(f.members, self.acc, defs)  # accumulators this chain reads, once each
        for m in f.members:
            if isinstance(m, Store) and isinstance(m.value, Var) and m.value.id in out_of_acc:
                # L0C -> GM is FIXPIPE's, not MTE3's: the stored box's bytes, and the tile is out.
                nbytes, _ = transfer(self.params[m.param].shape, m.value.type.shape, m.value.type.valid,
                                     self.params[m.param].dtype.itemsize)
                self.add_work([("fixpipe_bytes", nbytes)])
                out_of_acc.pop(m.value.id)
            elif isinstance(m, Store):
                self.transfer_work("store", m.param, m.value.type.shape, m.value.type.valid)
            elif isinstance(m.expr, Load):
                self.transfer_work("load", m.expr.param, m.expr.shape, m.expr.valid)
            elif isinstance(m.expr, Move) and isinstance(m.expr.x, Var) and m.expr.x.id in out_of_acc:
                self.add_work(fixpipe_work([out_of_acc.pop(m.expr.x.id)]))  # L0C -> UB/L1 is FIXPIPE's
            else:
                self.add_work(member_work(m))
        self.add_work(fixpipe_work(list(out_of_acc.values())))  # read by vector ops: L0C -> UB
        self.depth -= 1
        self.emit("}")

    def fused_store(self, m: Store, val: str, ref: str, cond: str) -> None:
        q = self.params[m.param]
        if m.atomic == "add":
            fn = {"FP32": "f32", "FP16": "f16", "BF16": "bf16", "INT32": "i32", "INT16": "i16", "INT8": "i8"}[q.dtype.name]
            line = f"pto_atomic_add_{fn}(&{ref}, {val});"
        else:
            if q.dtype == FP16:
                val = f"(_Float16){val}"
            elif q.dtype == BF16:
                val = f"pto_f2bf({val})"
            elif q.dtype.is_float and q.dtype.itemsize == 1:  # FP8: to nearest even, as torch rounds
                val = f"pto_f2{_FP8_C[q.dtype.name]}({val})"
            line = f"{ref} = {val};"
        self.emit(f"if ({cond}) {line}" if cond else line)

    def _lin(self, vshape, gshape, idx, tensor: bool = False) -> str:
        """Linear index of element ``idx`` (over ``gshape``) in an array of ``vshape``.

        Tiles broadcast (size-1 dims read index 0, missing leading dims are
        ignored); tensors are indexed with their full strides.
        """
        off = len(gshape) - len(vshape)
        terms = []
        for d, (size, stride) in enumerate(zip(vshape, strides(vshape))):
            if size == 1 and not tensor:
                continue
            i = idx[d + off]
            terms.append(i if stride == 1 else f"{i} * {stride}")
        return " + ".join(terms) if terms else "0"


def runtime_names(body) -> set[str]:
    """The names of a body's runtime scalars and of its runtime-bound loops' indices."""
    out = set()
    for s in body:
        if isinstance(s, SetIndex):
            out.add(s.var.name)
        elif isinstance(s, DynFor):
            if s.kind == "range":
                out.add(s.var.name)
            out |= runtime_names(s.body)
        elif isinstance(s, (For, Spmd, Scope)):
            out |= runtime_names(s.body)
    return out


def _reads(e) -> list:
    """The ``pl.read`` elements an index expression reads (outermost first)."""
    if isinstance(e, ICheck):
        return _reads(e.expr)
    if isinstance(e, IRead):
        return [e, *(r for o in e.offsets for r in _reads(o))]
    if isinstance(e, IBin):
        return _reads(e.a) + _reads(e.b)
    return []


def _mentions(e, names: set[str]) -> bool:
    if isinstance(e, ICheck):
        return _mentions(e.expr, names)
    if isinstance(e, (IRead, IScalar)):
        return True
    if isinstance(e, IVar):
        return e.name in names
    if isinstance(e, IBin):
        return _mentions(e.a, names) or _mentions(e.b, names)
    return False


def generate_c(program: Program, symbol: str) -> str:
    """Return the C11 source of a lowered program with entry point ``symbol``."""
    if program.stage != "lowered":
        raise PtoCompileError("generate_c needs a lowered program (run ir.run_passes first)")
    return _Gen(program, symbol).run()


def _prod_step(acc: str, x: str, dt) -> str:
    """``acc * x`` for a product reduction; integers multiply as uint64 (wrapping, no signed overflow)."""
    if dt.is_float:
        return f"{acc} * {x}"
    return f"(int64_t)((uint64_t)({acc}) * (uint64_t)(int64_t)({x}))"
