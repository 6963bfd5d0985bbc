"""The IR: a program is parameters plus a tree of statements over tiles.

Everything here is a small frozen dataclass, so two programs traced from the
same kernel with the same arguments compare equal (``==``) and print the same.
Source locations ride along on statements but take no part in equality.

Three kinds of values appear:

* index expressions (:class:`IConst`, :class:`IVar`, :class:`IBin`): ``int64``
  arithmetic on loop indices and the block index, used in load/store offsets;
* tile values (:class:`Var`): an SSA name with a static :class:`TileType`;
* scalar operands (:class:`Const`, :class:`ScalarRef`): a literal or a
  scalar parameter, used on one side of a binary op or in ``full``.
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
    "IndexExpr",
    "TileType",
    "Var",
    "Const",
    "ScalarRef",
    "Operand",
    "Load",
    "Unary",
    "Binary",
    "Cast",
    "Full",
    "Reduce",
    "Matmul",
    "Expr",
    "Assign",
    "MatmulAcc",
    "Store",
    "For",
    "Spmd",
    "Scope",
    "Fused",
    "Stmt",
    "Param",
    "Program",
    "UNARY_OPS",
    "BINARY_OPS",
    "REDUCE_OPS",
    "ELEMENTWISE",
]

UNARY_OPS = ("neg", "abs", "exp", "log", "sqrt", "rsqrt", "relu")
BINARY_OPS = ("add", "sub", "mul", "div", "maximum", "minimum")
REDUCE_OPS = ("row_sum", "row_max", "row_min", "col_sum", "col_max", "col_min")


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


IndexExpr = Union[IConst, IVar, IBin]


# ---- tile values and operands ----------------------------------------------


@dataclass(frozen=True)
class TileType:
    shape: tuple[int, ...]
    dtype: DataType

    def __str__(self) -> str:
        return f"{self.dtype.name}[{', '.join(map(str, self.shape))}]"


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


Operand = Union[Var, Const, ScalarRef]


# ---- expressions (right-hand sides of Assign) ---------------------------------


@dataclass(frozen=True)
class Load:
    param: str
    offsets: tuple[IndexExpr, ...]
    shape: tuple[int, ...]


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
    x: Var
    dtype: DataType


@dataclass(frozen=True)
class Full:
    shape: tuple[int, ...]
    value: Union[Const, ScalarRef]
    dtype: DataType


@dataclass(frozen=True)
class Reduce:
    op: str
    x: Var


@dataclass(frozen=True)
class Matmul:
    a: Var
    b: Var


Expr = Union[Load, Unary, Binary, Cast, Full, Reduce, Matmul]
ELEMENTWISE = (Load, Unary, Binary, Cast, Full)


# ---- statements ----------------------------------------------------------------


@dataclass(frozen=True)
class Assign:
    var: Var
    expr: Expr
    loc: Loc | None = field(default=None, compare=False)


@dataclass(frozen=True)
class MatmulAcc:
    """``acc += a @ b``, in place."""

    acc: Var
    a: Var
    b: Var
    loc: Loc | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Store:
    value: Var
    param: str
    offsets: tuple[IndexExpr, ...]
    loc: Loc | None = field(default=None, compare=False)


@dataclass(frozen=True)
class For:
    var: IVar
    start: int
    stop: int
    step: int
    body: tuple["Stmt", ...]
    loc: Loc | None = field(default=None, compare=False)

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


Stmt = Union[Assign, MatmulAcc, Store, For, Spmd, Scope, Fused]


# ---- program -------------------------------------------------------------------


@dataclass(frozen=True)
class Param:
    """A kernel parameter; ``direction`` as in :mod:`pypto_async._signature`."""

    name: str
    direction: str
    shape: tuple[int, ...]
    dtype: DataType


@dataclass(frozen=True)
class Program:
    """A traced kernel.

    ``stage`` is ``"traced"`` straight from the tracer and ``"lowered"`` once
    the pass pipeline has run; compiling a lowered program skips the passes.
    ``ret`` names the parameter the kernel returns (or ``None``).
    """

    name: str
    params: tuple[Param, ...]
    body: tuple[Stmt, ...]
    block_num: int = 1
    ret: str | None = None
    stage: str = "traced"

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)

    def __str__(self) -> str:
        from ._printer import format_program

        return format_program(self)
