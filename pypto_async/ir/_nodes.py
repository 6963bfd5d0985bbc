"""The IR: a program is parameters plus a tree of statements over tiles.

Everything here is a small frozen dataclass, so two programs traced from the
same kernel with the same arguments compare equal (``==``) and print the same.
Source locations ride along on statements but take no part in equality.

Three kinds of values appear:

* index expressions (:class:`IConst`, :class:`IVar`, :class:`IBin`,
  :class:`IScalar`): ``int64`` arithmetic on loop indices, the block index
  and integer scalar parameters, used in offsets and valid extents;
* tile values (:class:`Var`): an SSA name with a static :class:`TileType`
  (shape, dtype, memory space, valid region);
* scalar operands (:class:`Const`, :class:`ScalarRef`): a literal or a
  scalar parameter, used on one side of a binary op or in ``full``.

A tile lives in one of PyPTO's on-chip memory spaces (:data:`MEMORY_SPACES`).
The sim has a single memory, so a space changes no number a kernel computes;
it is checked (which op may read or produce which space) so that a kernel
that is wrong about placement on the device is wrong here too.  A tile's
*valid region* (``TileType.valid``) is the leading box of elements that hold
data; the rest is padding whose values are unspecified until ``fillpad``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

from .._dtypes import DataType

__all__ = [
    "Loc",
    "IConst",
    "IVar",
    "IBin",
    "IScalar",
    "IRead",
    "IndexExpr",
    "linear_index",
    "TileType",
    "Var",
    "Const",
    "ScalarRef",
    "ScalarBits",
    "ScalarIndex",
    "ICheck",
    "Operand",
    "Load",
    "Unary",
    "Binary",
    "Cast",
    "Full",
    "Reduce",
    "Matmul",
    "Move",
    "Broadcast",
    "Reshape",
    "Transpose",
    "Slice",
    "Concat",
    "Assemble",
    "FillPad",
    "Expr",
    "Assign",
    "MatmulAcc",
    "Update",
    "Store",
    "For",
    "Spmd",
    "Scope",
    "Fused",
    "SetIndex",
    "DynFor",
    "COMPARE_OPS",
    "Stmt",
    "Param",
    "UNARY_OPS",
    "BINARY_OPS",
    "REDUCE_OPS",
    "ELEMENTWISE",
    "MEMORY_SPACES",
    "PAD_VALUES",
    "CAST_MODES",
    "Compare",
    "Select",
    "CMP_TYPES",
    "INT_BINARY_OPS",
    "ACC_PHASES",
    "PART_OPS",
    "Bitcast",
    "Gather",
    "Scatter",
    "GATHER_MODES",
    "SCATTER_MODES",
    "GATHER_OOB",
]

UNARY_OPS = ("neg", "abs", "exp", "log", "sqrt", "rsqrt", "recip", "relu", "not_")
#: ``sin`` / ``cos`` (radians; FP32 tiles only, as PyPTO).
UNARY_OPS += ("sin", "cos")
#: ``rem`` is Python's ``%`` (the divisor's sign); ``prelu`` is ``a > 0 ? a : a * b`` (float only);
#: the bitwise and shift ops (:data:`INT_BINARY_OPS`) take integer tiles only.
BINARY_OPS = ("add", "sub", "mul", "div", "maximum", "minimum", "rem", "prelu", "and_", "or_", "xor", "shl", "shr")
INT_BINARY_OPS = ("and_", "or_", "xor", "shl", "shr")
#: ``fmod`` is C's ``fmod`` (the dividend's sign, as ``torch.fmod``); the ``part_*`` ops combine two
#: same-shape tiles over the first one's valid region, copying whichever source alone is valid at an element.
PART_OPS = ("part_add", "part_mul", "part_max", "part_min")
BINARY_OPS += ("fmod", *PART_OPS)
#: ``pl.cmp`` comparison codes, PyPTO's numbering (``cmp_type=0`` is ``eq``).
CMP_TYPES = ("eq", "ne", "lt", "le", "gt", "ge")
#: The gemv ops' ``acc_phase`` values (PyPTO's).
ACC_PHASES = ("unspecified", "partial", "final")
REDUCE_OPS = ("row_sum", "row_max", "row_min", "col_sum", "col_max", "col_min")
REDUCE_OPS += ("row_prod", "col_prod")
#: PyPTO's on-chip memory spaces; tensors live in "DDR".
MEMORY_SPACES = ("Vec", "Mat", "Left", "Right", "Acc", "Bias", "LeftScale", "RightScale")
#: What ``fillpad`` writes outside the valid region: 0, +max (+inf), -max (-inf).
PAD_VALUES = ("zero", "max", "min")
#: ``cast`` rounding modes (PyPTO's names); ``"none"`` converts as C does.
CAST_MODES = ("none", "rint", "round", "floor", "ceil", "trunc", "odd")


@dataclass(frozen=True)
class Loc:
    """Where in the user's source a statement was traced."""

    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


# ---- index expressions ------------------------------------------------------


@dataclass(frozen=True)
class IConst:
    value: int


@dataclass(frozen=True)
class IVar:
    """A loop index (``pl.range``) or the block index (``pl.spmd``)."""

    name: str


@dataclass(frozen=True)
class IBin:
    op: str  # "+", "-", "*", "//", "%"
    a: "IndexExpr"
    b: "IndexExpr"


@dataclass(frozen=True)
class IScalar:
    """An integer scalar parameter used as an index (a runtime valid extent)."""

    param: str


@dataclass(frozen=True)
class IRead:
    """An element of an integer tensor, read when the statement using it runs (``pl.read``).

    ``shape`` is the tensor's, for its strides.  Bound by a ``SetIndex``, it is
    read where that statement is: in a region, after the region's earlier
    stores to the tensor (a task's reads count it as read whole).
    """

    param: str
    offsets: tuple["IndexExpr", ...]
    shape: tuple[int, ...]
    #: The element is a float (FP32) read as its bit pattern (an orchestration's ``pl.read`` of a float
    #: tensor): the value is ``uint32`` of its bits, which a :class:`ScalarBits` operand turns back.
    bits: bool = False


@dataclass(frozen=True)
class ICheck:
    """``expr``, checked equal to ``value`` where it is computed: otherwise the launch fails with ``message``.

    An extent an orchestration reads when it runs (``pl.create_tensor([16, n])``,
    ``pl.slice(x, [16, n], ...)``) takes the static extent of the kernel
    parameter it is passed to; the orchestration checks, before it submits
    that task, that the value read is that extent.
    """

    expr: "IndexExpr"
    value: int
    message: str


#: Comparisons of index expressions (``IBin`` ops); each gives 1 or 0.
COMPARE_OPS = ("==", "!=", "<", "<=", ">", ">=")

IndexExpr = Union[IConst, IVar, IBin, IScalar, IRead, ICheck]


def linear_index(e) -> dict | None:
    """An index expression as ``{var name: coefficient, None: constant}``, or None if it is not linear."""
    if isinstance(e, IConst):
        return {None: e.value}
    if isinstance(e, IVar):
        return {e.name: 1, None: 0}
    if isinstance(e, IBin) and e.op in ("+", "-", "*"):
        a, b = linear_index(e.a), linear_index(e.b)
        if a is None or b is None:
            return None
        if e.op == "*":
            if set(a) == {None}:
                a, b = b, a
            if set(b) != {None}:
                return None
            return {k: v * b[None] for k, v in a.items()}
        sign = 1 if e.op == "+" else -1
        out = dict(a)
        for k, v in b.items():
            out[k] = out.get(k, 0) + sign * v
        return out
    return None


# ---- tile values and operands ----------------------------------------------


@dataclass(frozen=True)
class TileType:
    """Shape, dtype, memory space and valid region of a tile.

    ``valid`` is ``None`` for a fully valid tile, else one extent per
    dimension (ints or index expressions, each at most the dimension).
    """

    shape: tuple[int, ...]
    dtype: DataType
    memory: str = "Vec"
    valid: tuple | None = None

    def __str__(self) -> str:
        text = f"{self.dtype.name}[{', '.join(map(str, self.shape))}]"
        if self.memory != "Vec":
            text += f"@{self.memory}"
        if self.valid is not None:
            text += f" valid[{', '.join(format_index(e) for e in self.valid)}]"
        return text


@dataclass(frozen=True)
class Var:
    """A tile value, defined once (``MatmulAcc`` updates one in place)."""

    id: int
    type: TileType


@dataclass(frozen=True)
class Const:
    """A literal scalar operand, already converted to ``dtype``."""

    value: Union[int, float, bool]
    dtype: DataType


@dataclass(frozen=True)
class ScalarRef:
    """A scalar parameter used as an operand (converted to ``dtype``)."""

    param: str
    dtype: DataType


@dataclass(frozen=True)
class ScalarBits:
    """A float operand carried as its bit pattern in an index expression (converted to ``dtype``).

    An orchestration's ``pl.read`` of an FP32 tensor is an integer of the
    orchestration (its bits, :attr:`IRead.bits`); a task captures it as it
    captures any scalar, and the kernel reads ``expr``'s low 32 bits as the
    FP32 value.
    """

    expr: "IndexExpr"
    dtype: DataType


@dataclass(frozen=True)
class ScalarIndex:
    """The value of an index expression (a runtime scalar ``pl.read`` gave, a loop index) as an operand.

    Converted to ``dtype`` where it is used (``pl.write(out, [0, i], v)``
    of a value read earlier in the region: its value then, not the
    tensor's element now).
    """

    expr: "IndexExpr"
    dtype: DataType


Operand = Union[Var, Const, ScalarRef, ScalarBits, ScalarIndex]


# ---- expressions (right-hand sides of Assign) ---------------------------------


@dataclass(frozen=True)
class Load:
    """Read a window of a tensor; with ``valid``, only its leading box."""

    param: str
    offsets: tuple[IndexExpr, ...]
    shape: tuple[int, ...]
    memory: str = "Vec"
    valid: tuple[IndexExpr, ...] | None = None


@dataclass(frozen=True)
class Unary:
    op: str
    x: Var


@dataclass(frozen=True)
class Binary:
    op: str
    a: Operand
    b: Operand


@dataclass(frozen=True)
class Cast:
    """Convert to ``dtype``, rounding as ``mode`` says (one of :data:`CAST_MODES`)."""

    x: Var
    dtype: DataType
    mode: str = "none"


@dataclass(frozen=True)
class Full:
    """A tile of ``shape`` filled with ``value`` (``create_tile`` fills zeros)."""

    shape: tuple[int, ...]
    value: Union[Const, ScalarRef]
    dtype: DataType
    memory: str = "Vec"
    valid: tuple[IndexExpr, ...] | None = None


@dataclass(frozen=True)
class Reduce:
    op: str
    x: Var
    #: ``col_sum`` with PyPTO's ``tmp_tile``: rows summed pairwise (a binary tree) instead of one after another.
    tree: bool = False


@dataclass(frozen=True)
class Matmul:
    """``a @ b``; with ``bias`` (a ``[1, n]`` tile of the product's dtype) added to every row.

    ``acc_phase`` is set by the gemv forms (``a`` a ``[1, K]`` row): PyPTO's
    accumulation-phase hint, one of :data:`ACC_PHASES`.  It changes no result
    on the sim; it is recorded and printed.

    ``a_scale`` / ``b_scale`` (both or neither) make it ``pl.matmul_mx``: FP8
    data, one FP8E8M0 scale per 32-element block along K (``a_scale``
    ``[M, K/32]``, ``b_scale`` ``[K/32, N]``), each block's products scaled.
    """

    a: Var
    b: Var
    bias: Var | None = None
    acc_phase: str | None = None
    a_scale: Var | None = None
    b_scale: Var | None = None


@dataclass(frozen=True)
class Move:
    """The same values in memory space ``memory`` (``pl.move``)."""

    x: Var
    memory: str


@dataclass(frozen=True)
class Broadcast:
    """``x`` broadcast to ``shape`` (``pl.row_expand`` / ``pl.col_expand``)."""

    x: Var
    shape: tuple[int, ...]


@dataclass(frozen=True)
class Reshape:
    """The same elements in row-major order, viewed as ``shape``."""

    x: Var
    shape: tuple[int, ...]


@dataclass(frozen=True)
class Transpose:
    """A tile with its dimensions ``axes`` swapped (``pl.transpose``; a 2-D tile's two by default)."""

    x: Var
    axes: tuple[int, int] = (0, 1)


@dataclass(frozen=True)
class Slice:
    """The ``shape`` window of tile ``x`` at ``offsets``."""

    x: Var
    shape: tuple[int, ...]
    offsets: tuple[IndexExpr, ...]
    valid: tuple[IndexExpr, ...] | None = None


@dataclass(frozen=True)
class Concat:
    """``a`` and ``b`` side by side (along the last dimension)."""

    a: Var
    b: Var


@dataclass(frozen=True)
class Assemble:
    """``target`` with the window at ``offsets`` replaced by ``source``."""

    target: Var
    source: Var
    offsets: tuple[IndexExpr, ...]


@dataclass(frozen=True)
class FillPad:
    """``x`` with every element outside its valid region set to ``pad``."""

    x: Var
    pad: str


@dataclass(frozen=True)
class Compare:
    """``pl.cmp``: compare ``a`` with ``b`` (a tile or a scalar), one bit per element.

    The result is PyPTO's packed predicate mask: a UINT8 tile whose last
    dimension holds ``ceil(n / 8)`` bytes rounded up to 32; element ``j`` of
    a row is bit ``j % 8`` of byte ``j // 8`` (least significant bit first).
    ``cmp`` is one of :data:`CMP_TYPES`.
    """

    a: Var
    b: Operand
    cmp: str


@dataclass(frozen=True)
class Select:
    """``pl.sel``: ``a`` where the packed ``mask`` bit is set, else ``b`` (a tile or a scalar).

    ``mask`` is any integer tile holding the mask bytes (as ``Compare``
    writes them), read as bytes in memory order.
    """

    mask: Var
    a: Var
    b: Operand


@dataclass(frozen=True)
class Bitcast:
    """``pl.reinterpret_view``: the bytes of ``x`` (row-major, little-endian) read as ``shape`` elements of ``dtype``."""

    x: Var
    dtype: DataType
    shape: tuple[int, ...]


#: How a :class:`Gather` finds its source element: ``"axis"`` (``torch.gather`` along ``dim``), ``"flat"``
#: (the source's row-major position), ``"rows"`` (a whole source row per index), ``"block"``
#: (``pl.gatherb``: a 32-byte block per byte offset).
GATHER_MODES = ("axis", "flat", "rows", "block")
#: A :class:`Scatter`'s destination: along the last axis of each row, at a flat position, or a whole row.
SCATTER_MODES = ("axis", "flat", "rows", "box")
#: What a gather does with an index past its extent (PyPTO's ``gather_oob=``; indices read as unsigned):
#: ``"undefined"`` and ``"clamp"`` take the last element, ``"wrap"`` the index modulo the extent,
#: ``"zero"`` gives 0.  No policy reads outside the source.
GATHER_OOB = ("undefined", "clamp", "wrap", "zero")


@dataclass(frozen=True)
class Gather:
    """Elements of ``src`` at the positions an integer ``index`` tile holds (``pl.gather`` and kin).

    Computed element by element over the result (it fuses), reading ``src``
    where ``index`` says; see :data:`GATHER_MODES` and :data:`GATHER_OOB`.
    """

    src: Var
    index: Var
    mode: str = "axis"
    dim: int = -1
    oob: str = "undefined"
    #: ``"block"`` only: the dtype the gathered bytes are read as (``pl.gatherb(output_dtype=)``); None: src's.
    dtype: DataType | None = None


@dataclass(frozen=True)
class Scatter:
    """``target`` with the elements of ``src`` written where ``index`` says (``pl.scatter`` and kin).

    In index order, a later write to one position wins; an index outside
    ``target`` fails the launch (nothing is written outside it).  Mode
    ``"box"`` (``pl.gather_row`` with a runtime ``valid_shape``) has no
    index: it writes ``src``'s valid box into ``target`` at ``offsets``, and
    a box outside ``target`` fails the launch.
    """

    target: Var
    src: Var
    index: Var | None
    mode: str = "axis"
    offsets: tuple[IndexExpr, ...] = ()


Expr = Union[Load, Unary, Binary, Cast, Full, Reduce, Matmul, Move, Broadcast, Reshape, Transpose, Slice, Concat,
             Assemble, FillPad, Compare, Select, Bitcast, Gather, Scatter]
#: Expressions computed element by element over their result's shape (fusable).
ELEMENTWISE = (Load, Unary, Binary, Cast, Full, Move, Broadcast, Reshape, Transpose, Slice, Concat, Assemble, FillPad,
               Compare, Select, Gather)
ELEMENTWISE += (Bitcast,)


# ---- statements ----------------------------------------------------------------


@dataclass(frozen=True)
class Assign:
    var: Var
    expr: Expr
    loc: Loc | None = field(default=None, compare=False)


@dataclass(frozen=True)
class MatmulAcc:
    """``acc += a @ b``, in place (``acc_phase``, ``a_scale``, ``b_scale`` as for :class:`Matmul`)."""

    acc: Var
    a: Var
    b: Var
    loc: Loc | None = field(default=None, compare=False)
    acc_phase: str | None = None
    a_scale: Var | None = None
    b_scale: Var | None = None


@dataclass(frozen=True)
class Update:
    """``target := value`` in place: a loop-carried tile takes its next value."""

    target: Var
    value: Var
    loc: Loc | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Store:
    """Write the valid region of ``value`` into ``param`` at ``offsets``.

    ``atomic="add"`` adds into the tensor instead of overwriting it.  With
    ``index`` (``pl.mscatter``), element ``k`` of ``value`` (row-major) goes
    to the tensor's row-major position ``index.flat[k]`` instead (``offsets``
    are zeros): a write of the whole tensor, as far as dependencies go; an
    index past the tensor fails the launch.
    """

    value: Var
    param: str
    offsets: tuple[IndexExpr, ...]
    loc: Loc | None = field(default=None, compare=False)
    atomic: str | None = None
    index: Var | None = None


@dataclass(frozen=True)
class For:
    var: IVar
    start: int
    stop: int
    step: int
    body: tuple["Stmt", ...]
    loc: Loc | None = field(default=None, compare=False)
    #: The loop form: ``"range"``, or ``"unroll"`` / ``"pipeline"`` (scheduling hints: every form computes
    #: what ``pl.range`` computes, iteration by iteration in order).
    kind: str = "range"
    #: ``pl.pipeline(..., stage=n)``: the bodies a stage keeps in flight (double buffering at 2); else 1.
    stage: int = 1
    #: Task-id arrays (``pl.array.create(n, pl.TASK_ID)``) made in the body, ``(name, n)``: empty again at
    #: each iteration.
    task_fresh: tuple[tuple[str, int], ...] = ()
    #: Task-id arrays carried by ``init_values=``: ``(carry, init, yielded)``, the carry holding a copy of
    #: ``init``'s slots before the first iteration and of ``yielded``'s at the end of each.
    task_carries: tuple[tuple[str, str, str], ...] = ()

    @property
    def trip_count(self) -> int:
        return max(0, -(-(self.stop - self.start) // self.step))


@dataclass(frozen=True)
class Spmd:
    """The body runs once per block; ``var`` is the block index."""

    var: IVar
    count: int
    body: tuple["Stmt", ...]
    loc: Loc | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Scope:
    """``pl.at(level=...)``: the body runs on a core of that level."""

    level: str
    body: tuple["Stmt", ...]
    loc: Loc | None = field(default=None, compare=False)
    #: The task's name (``name_hint=``, or the kernel a program calls); ``None`` for a plain region.
    name: str | None = None
    #: Task ids (see ``task``) this task is declared to wait for (``deps=``), on top of the inferred edges.
    deps: tuple[int, ...] = ()
    #: Inside ``pl.manual_scope()``: no edge is inferred into this task, only ``deps=`` order it.
    manual: bool = False
    #: Declared accesses of a kernel call, ``(tensor, mode, offsets, shape)`` with mode ``"r"``, ``"w"``
    #: or ``"rw"`` (from the parameters' directions); empty for a region, whose loads and stores say it.
    accesses: tuple = ()
    #: The task id: the region's position among the program's regions, in trace order.
    task: int | None = field(default=None, compare=False)
    #: Tensors this task's accesses are not tracked for (``no_dep_args=``): no edge into or out of it
    #: is inferred from them; ``deps=`` still orders it.
    no_dep: tuple[str, ...] = ()
    #: Scheduling hints, ``(name, value)`` pairs in the order given: ``("split", "UP_DOWN")``,
    #: ``("cross_core_slot", 4)``, ``("allow_early_resolve", True)``.  They cannot change a result.
    hints: tuple[tuple[str, object], ...] = ()
    #: Task-id arrays in ``deps=`` (``pl.array.create(n, pl.TASK_ID)``), ``(name, size)``: the task waits for
    #: every task the array holds when it is submitted.
    dep_arrays: tuple[tuple[str, int], ...] = ()
    #: Stores of this task's id into task-id arrays (``arr[i] = tid``), ``(name, size, index)``, the index
    #: evaluated per instance.
    assigns: tuple[tuple[str, int, "IndexExpr"], ...] = ()
    #: Single slots of task-id arrays in ``deps=`` (``prev = arr[i]``), ``(name, size, index)``: the task
    #: waits for the task that slot holds when it is submitted.
    dep_slots: tuple[tuple[str, int, "IndexExpr"], ...] = ()


@dataclass(frozen=True)
class Fused:
    """One loop nest over ``shape`` computing an element-wise chain.

    ``members`` are the chain's ``Assign`` (element-wise expressions only) and
    ``Store`` statements, in order.  Inputs that are not members are read from
    materialised tiles (broadcast as needed).  ``materialize`` names the member
    variables whose values are used outside the chain and so are written to a
    tile buffer as well.
    """

    shape: tuple[int, ...]
    members: tuple["Stmt", ...]
    materialize: tuple[int, ...]


@dataclass(frozen=True)
class SetIndex:
    """``var := value``: a runtime scalar (an :class:`IVar` of no static range) takes a value.

    Each one the tracer makes is assigned here once per execution of the
    enclosing body, except a name merged after a runtime ``if``, assigned
    once in each branch.
    """

    var: IVar
    value: "IndexExpr"
    loc: Loc | None = field(default=None, compare=False)


@dataclass(frozen=True)
class DynFor:
    """A loop whose bounds are runtime index expressions (``pl.range`` over a ``pl.read`` scalar).

    ``kind="if"`` / ``"else"``: the two branches of a runtime ``if``, each a
    loop of 0 or 1 iterations (``stop`` is the condition, or 1 minus it).
    Lives inside a region; its body holds no region.
    """

    var: IVar
    start: "IndexExpr"
    stop: "IndexExpr"
    step: int
    body: tuple["Stmt", ...]
    loc: Loc | None = field(default=None, compare=False)
    kind: str = "range"


Stmt = Union[Assign, MatmulAcc, Update, Store, For, Spmd, Scope, Fused, SetIndex, DynFor]


# ---- program -------------------------------------------------------------------


@dataclass(frozen=True)
class Param:
    """A kernel parameter; ``direction`` as in :mod:`pypto_async._signature`."""

    name: str
    direction: str
    shape: tuple[int, ...]
    dtype: DataType


def format_index(e) -> str:
    """Format an index expression (``i0 * 64 + 8``)."""
    if isinstance(e, IConst):
        return str(e.value)
    if isinstance(e, IVar):
        return e.name
    if isinstance(e, IScalar):
        return f"${e.param}"
    if isinstance(e, IRead):
        name = "pl.read_bits" if e.bits else "pl.read"
        return f"{name}({e.param}, [{', '.join(format_index(o) for o in e.offsets)}])"
    if isinstance(e, ICheck):
        return f"check({format_index(e.expr)} == {e.value}, {e.message!r})"
    if isinstance(e, IBin) and e.op in ("min", "max"):
        return f"{e.op}({format_index(e.a)}, {format_index(e.b)})"
    if isinstance(e, IBin):
        a, b = format_index(e.a), format_index(e.b)
        if isinstance(e.a, IBin):
            a = f"({a})"
        if isinstance(e.b, IBin):
            b = f"({b})"
        return f"{a} {e.op} {b}"
    return repr(e)


# ---- index, sort and generator ops (pl.row_argmax, pl.sort32, pl.mrgsort, pl.tri, pl.arange, pl.random) -------

#: :class:`Generate` kinds.
GENERATE_KINDS = ("ci", "tri", "random")
#: :class:`Order` ops.
ORDER_OPS = ("row_argmax", "row_argmin", "col_argmax", "col_argmin", "sort32", "mrgsort", "mrgsort_merge")


@dataclass(frozen=True)
class Generate:
    """A tile computed from its element positions alone (it reads no tile).

    ``args`` are index expressions (ints, scalar parameters, runtime scalars):

    * ``"ci"`` (``pl.arange``): ``args == (start,)``; element ``[..., j]`` is
      ``start + j``, or ``start - j`` with ``option == 1`` (descending).
    * ``"tri"``: ``args == (diagonal,)``; element ``[i, j]`` is 1 where
      ``j <= i + diagonal`` (``option == 0``, lower) or ``j >= i + diagonal``
      (``option == 1``, upper), else 0.
    * ``"random"``: ``args == (key0, key1, counter0, ..., counter3)``,
      ``option`` the Philox round count (7 or 10); the element at row-major
      position ``p`` is word ``p % 4`` of Philox4x32 of the 128-bit counter
      plus ``p // 4`` under the 64-bit key.
    """

    kind: str
    shape: tuple[int, ...]
    dtype: DataType
    args: tuple
    option: int = 0
    valid: tuple | None = None


@dataclass(frozen=True)
class Order:
    """An argmax/argmin reduction or a sort of a tile (not element-wise: one statement of its own).

    * ``row_argmax`` ... ``col_argmin``: ``xs == (x,)``, the INT32 index of each
      row's (column's) extremum over the valid region, the first on a tie.
    * ``sort32``: ``xs == (src, idx)``; every group of 32 elements of a row
      sorted descending (stably), written as ``(value, index)`` pairs: the
      result's last dimension is twice the source's, values at even
      columns, the ``idx`` element's bits at odd ones.
    * ``mrgsort``: ``xs == (src,)`` of such pairs; each group of four
      consecutive sorted runs of ``block_len`` columns merged into one.
    * ``mrgsort_merge``: ``xs`` two to four tiles of sorted pairs, merged row
      by row into one (their last dimensions add).
    """

    op: str
    xs: tuple[Var, ...]
    block_len: "IndexExpr | None" = None


Expr = Union[Expr, Generate, Order]
ELEMENTWISE = ELEMENTWISE + (Generate,)
__all__ += ["Generate", "Order", "GENERATE_KINDS", "ORDER_OPS"]
