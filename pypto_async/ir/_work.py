"""What each statement of a kernel adds to its block's ``pto_work`` (the device model's input).

The code generator (:mod:`pypto_async.ir._codegen`) asks :func:`work_of` for
every statement it emits and adds the result to the kernel's counters right
where the statement runs, so loops with runtime trip counts and runtime
``if`` branches count exactly what ran.  The counters are locals of the
kernel's body function, added into ``blk->work`` once at its exit.

The rules, per pipe (``pto_work`` in ``pto_kernel.h``):

* **load / store** (MTE2 / MTE3): the bytes of the box moved (the valid
  region where the tile has one; a runtime extent is evaluated as the
  statement runs) in the tensor's dtype, and the *rows* they come in: the
  contiguous runs in GM.  A box whose inner dimensions span the tensor's
  whole extent merges into fewer, longer runs (a ``[4, 128]`` window of a
  ``[N, 128]`` tensor is one run); a runtime extent is never taken as
  spanning its dimension.
* **move** (MTE1): ``pl.move`` between on-chip memory spaces, the tile's bytes.
* **vector**: each element-wise op of a fused chain, the reductions and the
  broadcasts, as the op's element count times the widest element it reads
  or writes, by class: :data:`VEC_SPECIAL` for division, remainder, exp, log,
  sqrt, rsqrt and reciprocal; :data:`VEC_REDUCE` for ``row_*`` / ``col_*``
  reductions and ``row_expand`` / ``col_expand`` broadcasts;
  :data:`VEC_SIMPLE` for the rest.  A reshape or a slice is a view and
  costs nothing; the copy of a loop-carried tile into its buffer is the
  simulator's, not the kernel's, and costs nothing.
* **cube**: a matmul, ``M * N * K`` multiply-accumulates by the dtype of its
  inputs (FP16 and BF16 together; FP64, which the device lacks, as FP32).
* **fixpipe**: a tile a matmul wrote is its accumulator, in L0C; each time a
  statement other than an accumulating matmul reads it, it leaves L0C
  through FIXPIPE, its bytes counted once per statement: a store of it
  (L0C to GM, the stored box's bytes, in place of the store's MTE3 bytes
  and rows), a ``pl.move`` of it (in place of MTE1), a fused chain's vector
  ops or a reduction reading it (L0C to UB), a matmul taking it as an
  operand (L0C to L1).

``overlap`` is set for a kernel that contains a ``pl.pipeline`` loop of
``stage >= 2`` (its loads and stores then run under its compute).
"""

from __future__ import annotations

from .._dtypes import BF16, FP16, INT8, UINT8
from ._cexpr import index as _index
from ._nodes import (
    Bitcast,
    Assemble,
    Binary,
    Broadcast,
    Cast,
    Compare,
    Concat,
    DynFor,
    FillPad,
    For,
    Full,
    Generate,
    IConst,
    Move,
    Scope,
    Store,
    Select,
    Spmd,
    Transpose,
    Unary,
    Var,
    Gather,
)

__all__ = ["VEC_SIMPLE", "VEC_SPECIAL", "VEC_REDUCE", "CUBE_F16", "CUBE_F32", "CUBE_I8", "FIELDS",
           "transfer", "member_work", "reduce_work", "matmul_work", "cube_index", "overlaps", "vec_class",
           "fixpipe_work", "acc_reads", "scatter_work"]

# The pto_work indices (pto_kernel.h: PTO_VEC_*, PTO_CUBE_*).
VEC_SIMPLE, VEC_SPECIAL, VEC_REDUCE = 0, 1, 2
CUBE_F16, CUBE_F32, CUBE_I8 = 0, 1, 2

#: The counters, as (C local of the kernel, pto_work member).
FIELDS = {
    "load_bytes": "load_bytes", "load_rows": "load_rows",
    "store_bytes": "store_bytes", "store_rows": "store_rows",
    "move_bytes": "move_bytes",
    **{f"vec_bytes{c}": f"vec_bytes[{c}]" for c in range(3)},
    **{f"cube_macs{c}": f"cube_macs[{c}]" for c in range(3)},
    "fixpipe_bytes": "fixpipe_bytes",
}

_SPECIAL_UNARY = frozenset(("exp", "log", "sqrt", "rsqrt", "recip"))
_SPECIAL_BINARY = frozenset(("div", "rem"))
_SPECIAL_UNARY |= {"sin", "cos"}
_SPECIAL_BINARY |= {"fmod"}


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _product(terms: list) -> str:
    """C of the product of ints and C expressions (an int folded in front)."""
    const = 1
    exprs = []
    for t in terms:
        if isinstance(t, int):
            const *= t
        else:
            exprs.append(f"(uint64_t)({t})")
    if const == 0:
        return "0"
    if not exprs:
        return str(const)
    return " * ".join(([str(const)] if const != 1 else []) + exprs)


def transfer(tensor_shape, box_shape, valid, itemsize: int) -> tuple[str, str]:
    """C of the bytes and the rows (contiguous GM runs) of a load or store of a box.

    `box_shape` is the tile's; `valid` its valid extents (index expressions)
    or None.  A negative runtime extent is taken as 0 (the launch fails on
    it before the data moves).
    """
    if valid is None:  # the common case, all ints
        k = len(box_shape) - 1
        while k > 0 and box_shape[k] == tensor_shape[k]:
            k -= 1
        n = _numel(box_shape)
        return str(n * itemsize), str(_numel(box_shape[:k]) if n else 0)
    ext: list = []
    for d, size in enumerate(box_shape):
        e = None if valid is None else valid[d]
        if e is None:
            ext.append(size)
        elif isinstance(e, IConst):
            ext.append(max(0, e.value))
        else:
            c = _index(e)
            ext.append(f"({c}) > 0 ? ({c}) : 0")
    n = len(ext)
    k = n - 1
    while k > 0 and ext[k] == tensor_shape[k]:
        k -= 1
    nbytes = _product([*ext, itemsize])
    rows = _product(ext[:k])
    if any(not isinstance(x, int) for x in ext) and nbytes != "0":
        rows = f"(({nbytes}) != 0 ? ({rows}) : 0)"
    elif nbytes == "0":
        rows = "0"
    return nbytes, rows


def vec_class(expr) -> int | None:
    """The vector class of an element-wise expression, or None if it costs no vector work."""
    if isinstance(expr, Unary):
        return VEC_SPECIAL if expr.op in _SPECIAL_UNARY else VEC_SIMPLE
    if isinstance(expr, Binary):
        return VEC_SPECIAL if expr.op in _SPECIAL_BINARY else VEC_SIMPLE
    if isinstance(expr, Broadcast):
        return VEC_REDUCE
    if isinstance(expr, (Cast, Full, Compare, Select, FillPad, Transpose, Concat, Assemble, Gather)):
        return VEC_SIMPLE
    if isinstance(expr, Generate):  # pl.arange, pl.tri; pl.random runs a cipher per element
        return VEC_SPECIAL if expr.kind == "random" else VEC_SIMPLE
    return None  # Load (counted as a load), Move (MTE1), Reshape and Slice (views)


_OPERANDS = {Unary: ("x",), Cast: ("x",), FillPad: ("x",), Transpose: ("x",), Broadcast: ("x",), Bitcast: ("x",),
             Binary: ("a", "b"), Concat: ("a", "b"), Compare: ("a", "b"), Select: ("a", "b"),
             Assemble: ("target", "source"), Gather: ("src", "index")}


def _width(expr, out: Var) -> int:
    """The widest element an element-wise op reads or writes, in bytes (a packed mask: its operands')."""
    width = 0 if isinstance(expr, Compare) else out.type.dtype.itemsize
    for name in _OPERANDS.get(type(expr), ()):
        v = getattr(expr, name)
        if isinstance(v, Var) and v.type.dtype.itemsize > width:
            width = v.type.dtype.itemsize
    return width or out.type.dtype.itemsize


def member_work(m) -> list[tuple[str, str]]:
    """The (counter, C amount) pairs an element-wise Assign of a fused chain adds (Loads excluded)."""
    expr, v = m.expr, m.var
    if isinstance(expr, Move):
        return [("move_bytes", str(_numel(v.type.shape) * v.type.dtype.itemsize))]
    c = vec_class(expr)
    if c is None:
        return []
    return [(f"vec_bytes{c}", str(_numel(v.type.shape) * _width(expr, v)))]


def reduce_work(x: Var) -> list[tuple[str, str]]:
    """What a reduction of tile `x` adds."""
    return [(f"vec_bytes{VEC_REDUCE}", str(_numel(x.type.shape) * x.type.dtype.itemsize))]


def cube_index(dtype) -> int:
    """The ``cube_macs`` slot of a matmul whose inputs are of `dtype`."""
    if dtype in (FP16, BF16):
        return CUBE_F16
    if dtype in (INT8, UINT8) or (dtype.is_float and dtype.itemsize == 1):  # FP8 (matmul_mx): the 1-byte rate
        return CUBE_I8
    return CUBE_F32


def matmul_work(a: Var, b: Var) -> list[tuple[str, str]]:
    """What ``a @ b`` adds: M * N * K MACs."""
    m, k = a.type.shape
    n = b.type.shape[1]
    return [(f"cube_macs{cube_index(a.type.dtype)}", str(m * n * k))]


def fixpipe_work(tiles: list) -> list[tuple[str, str]]:
    """What reading accumulator tiles out of L0C adds: their bytes on FIXPIPE."""
    n = sum(_numel(t.type.shape) * t.type.dtype.itemsize for t in tiles)
    return [("fixpipe_bytes", str(n))] if n else []


def acc_reads(members, acc: set, defined: set) -> dict:
    """The accumulator tiles (ids in `acc`, defined outside the chain) a fused chain reads, by id."""
    found: dict = {}
    for m in members:
        if isinstance(m, Store):
            reads = [m.value]
        elif isinstance(m.expr, Move):
            reads = [m.expr.x]
        else:
            reads = [getattr(m.expr, name) for name in _OPERANDS.get(type(m.expr), ())]
        for v in reads:
            if isinstance(v, Var) and v.id in acc and v.id not in defined:
                found.setdefault(v.id, v)
    return found


def overlaps(body) -> bool:
    """Whether a kernel body holds a ``pl.pipeline`` loop that keeps two or more bodies in flight."""
    for s in body:
        if isinstance(s, For):
            if s.kind == "pipeline" and s.stage >= 2:
                return True
            if overlaps(s.body):
                return True
        elif isinstance(s, (DynFor, Spmd, Scope)) and overlaps(s.body):
            return True
    return False



def scatter_work(e) -> list[tuple[str, str]]:
    """What a scatter adds: the target's copy and the source's writes, as simple vector work."""
    t, s = e.target.type, e.src.type
    width = max(t.dtype.itemsize, e.index.type.dtype.itemsize if e.index is not None else 0)
    return [(f"vec_bytes{VEC_SIMPLE}", str((_numel(t.shape) + _numel(s.shape)) * width))]
