"""Tracing state and the values a kernel body manipulates.

While a ``@pl.jit`` function is traced, every op appends a statement to the
innermost open block of the current :class:`Tracer`.  The kernel sees proxies:
:class:`TensorArg` for tensor parameters, :class:`ScalarArg` for scalar
parameters, :class:`Tile` for tile values and :class:`Index` for loop and
block indices.  Each statement records the user's ``file:line`` (the first
frame outside this package), which every error message starts with.
"""

from __future__ import annotations

import sys
import threading

from .._scalars import is_int
from .._user_frame import user_frame
from ..errors import PtoCompileError
from ..ir._diag import compile_error
from ..ir._nodes import IBin, ICheck, IConst, IndexExpr, IScalar, IVar, Loc, Param, Var

__all__ = [
    "Tracer",
    "current",
    "user_loc",
    "TensorArg",
    "ScalarArg",
    "Tile",
    "Index",
    "to_index",
    "tracing",
    "index_min",
    "index_max",
]

_state = threading.local()


def user_loc() -> Loc | None:
    """Return the location of the innermost caller outside pypto_async."""
    f = user_frame(sys._getframe(1))
    return None if f is None else Loc(f.f_code.co_filename, f.f_lineno)


class Tracer:
    """The program being traced: parameters, open blocks, counters."""

    def __init__(self, name: str, params: list[Param]):
        self.name = name
        self.params = {p.name: p for p in params}
        self.param_list = params
        self.blocks: list[list] = [[]]
        self.frames: list[str] = []  # kind of each open block, for error messages
        self.next_var = 0
        self.next_index = 0
        self.ranges: dict[str, tuple[int, int]] = {}
        self.block_num: int | None = None
        self.in_spmd = False
        self.carry_loops: list = []  # open pl.range loops with init_values (innermost last)
        self.next_task = 0  # the id the next region (task) gets
        self.manual = 0  # depth of open pl.manual_scope() blocks
        self.scratch: list[Param] = []  # pl.create_tensor intermediates, in creation order

    def new_var(self, type_) -> Var:
        v = Var(self.next_var, type_)
        self.next_var += 1
        return v

    def new_index(self, prefix: str) -> IVar:
        v = IVar(f"{prefix}{self.next_index}")
        self.next_index += 1
        return v

    def append(self, stmt) -> None:
        self.blocks[-1].append(stmt)

    def open_block(self, kind: str) -> None:
        self.blocks.append([])
        self.frames.append(kind)

    def close_block(self) -> tuple:
        self.frames.pop()
        return tuple(self.blocks.pop())


class tracing:
    """Make ``tracer`` the current tracer for the duration of a ``with``."""

    def __init__(self, tracer: Tracer):
        self.tracer = tracer

    def __enter__(self) -> Tracer:
        if getattr(_state, "tracer", None) is not None:
            raise PtoCompileError("a @pl.jit kernel cannot be traced inside another kernel")
        _state.tracer = self.tracer
        return self.tracer

    def __exit__(self, *exc) -> None:
        _state.tracer = None


def current(op: str) -> Tracer:
    """Return the current tracer, or raise if ``op`` is called outside a kernel."""
    t = getattr(_state, "tracer", None)
    if t is None:
        raise compile_error(f"{op} can only be called inside a @pl.jit kernel while it is traced", user_loc())
    return t


# ---- proxies ---------------------------------------------------------------------


def _binop(name):
    def method(self, other):
        from . import _ops

        return getattr(_ops, name)(self, other)

    return method


def _rbinop(name):
    def method(self, other):
        from . import _ops

        return getattr(_ops, name)(other, self)

    return method


def _cmpop(cmp_type: int):
    def method(self, other):
        from ._ops_extended import cmp

        if not isinstance(other, (Tile, TensorArg, ScalarArg, bool, int, float)) and not hasattr(other, "item"):
            return NotImplemented  # ``tile == None`` and the like stay Python's comparisons
        return cmp(self, other, cmp_type)

    return method


class TensorArg:
    """A tensor parameter inside a traced kernel (``shape``, ``dtype``, ``name``)."""

    def __init__(self, param: Param):
        self.param = param
        self.name = param.name
        self.shape = param.shape
        self.dtype = param.dtype
        # A dimension read at run time (a pl.dynamic extent of a @pl.jit kernel's tensor): its scalar.
        axes = getattr(getattr(_state, "tracer", None), "dyn_axes", None)
        if axes and param.name in axes:
            self.shape = tuple(axes[param.name].get(a, n) for a, n in enumerate(param.shape))

    # Tensor-level element-wise ops: each tensor operand is loaded whole (a tile results).
    __add__, __radd__ = _binop("add"), _rbinop("add")
    __sub__, __rsub__ = _binop("sub"), _rbinop("sub")
    __mul__, __rmul__ = _binop("mul"), _rbinop("mul")
    __truediv__, __rtruediv__ = _binop("div"), _rbinop("div")

    def __neg__(self):
        from . import _ops

        return _ops.neg(self)

    def bind_dynamic(self, dim: int, var) -> None:
        """PyPTO's ``x.bind_dynamic(0, M)``: mark dimension ``dim`` as the runtime dimension ``var``.

        In PyPTO it is read from the source to pick which extents a ``@pl.jit`` artifact leaves open; the
        sim reads that from the signature's ``pl.dynamic`` annotations (see ``_dynamic``), so it is
        checked and changes nothing: ``dim`` must be a dimension of the tensor and ``var`` a
        ``pl.dynamic`` dimension.
        """
        from ._placement import DynamicDim

        loc = user_loc()
        if isinstance(dim, bool) or not isinstance(dim, int) or not -len(self.shape) <= dim < len(self.shape):
            raise compile_error(f"{self.name}.bind_dynamic: dim must be a dimension of the {len(self.shape)}-d "
                                f"tensor, got {dim!r}", loc)
        if not isinstance(var, DynamicDim):
            raise compile_error(f"{self.name}.bind_dynamic: var must be a pl.dynamic(...) dimension, got {var!r}",
                                loc)

    def _predicate(op):
        def compare(self, other):
            from ._submit import DispatchPredicate

            return DispatchPredicate(self, op, other, user_loc())

        return compare

    # PyPTO's dispatch predicate, ``tensor[i, j] > 0`` (``pl.submit(..., predicate=...)``).
    __lt__, __le__, __gt__, __ge__ = _predicate("<"), _predicate("<="), _predicate(">"), _predicate(">=")

    def __iter__(self):
        """One value: ``(t,) = pl.yield_(t_next)``, PyPTO's form for one carried value, unpacks to the tensor."""
        return iter((self,))

    def __getitem__(self, key):
        """A window of the tensor (``t[0:64, :]``) to pass to a program's kernel."""
        from ._program import window

        return window(self, key)

    def __setitem__(self, key, value):
        """``t[r0:r1, c0:c1] = value``: store a tile (or a tensor, loaded whole) into that window of ``t``.

        PyPTO's subscript assignment, which it lowers to ``assemble`` into the
        tensor: here the same store as ``pl.assemble(t, value, [r0, c0])``.
        The value must have the window's shape and the tensor's dtype, and
        ``t`` must be writable (``pl.Out`` / ``pl.InOut``).
        """
        from ._assign import assign_window

        assign_window(self, key, value)

    def __repr__(self) -> str:
        return f"<tensor {self.name}: {self.param.direction} {self.dtype.name}{list(self.shape)}>"


def _sop(op, swap=False):
    """A ``ScalarArg`` operator: the scalar as an index expression, combined with an int, index or scalar."""

    def method(self, other):
        if not (is_int(other) or isinstance(other, (bool, float, Index, ScalarArg))):
            return NotImplemented  # a tile's own operator, or Python's identity for ==
        if self.dtype.is_float or isinstance(other, float) or (isinstance(other, ScalarArg) and other.dtype.is_float):
            if op in _ARITH:  # PyPTO folds it into a scalar expression; the sim's operands are one scalar each
                from ..errors import PtoNotSupported

                raise PtoNotSupported(f"{user_loc()}: {self!r} {op} {other!r}: arithmetic on a float scalar "
                                      f"parameter is not supported on the sim; apply each to the tile "
                                      f"(pl.mul(pl.mul(t, alpha), 2.0)) or pass the computed value")
            raise compile_error(f"{self!r} {op} {other!r}: a float scalar parameter has no value at trace time, "
                                f"so it cannot be the condition of an if (compare integer scalars, or use "
                                f"pl.cmp / pl.sel on tiles)", user_loc())
        a = IScalar(self.name)  # a BOOL scalar too: its value is 1 or 0 here
        b = IScalar(other.name) if isinstance(other, ScalarArg) else to_index(int(other) if isinstance(other, bool)
                                                                               else other, "operand")
        return Index(IBin(op, b, a) if swap else IBin(op, a, b))

    return method


_ARITH = ("+", "-", "*", "//", "%")


def _scalar_params(expr) -> list[str]:
    """The scalar parameters an index expression reads (:class:`IScalar`), in order, once each."""
    found: dict[str, None] = {}
    stack = [expr]
    while stack:
        e = stack.pop()
        if isinstance(e, IScalar):
            found[e.param] = None
        elif isinstance(e, IBin):
            stack += (e.b, e.a)
        elif isinstance(e, ICheck):
            stack.append(e.expr)
    return list(found)


class ScalarArg:
    """A scalar parameter inside a traced kernel; use it as an op operand."""

    def __init__(self, param: Param):
        self.param = param
        self.name = param.name
        self.dtype = param.dtype

    def __bool__(self):
        raise compile_error(f"scalar parameter {self.name!r} has no value at trace time", user_loc())

    def __repr__(self) -> str:
        return f"<scalar {self.name}: {self.dtype.name}>"

    # An integer scalar combines with ints and indices as an index does (``my_rank == 0`` is the condition of a
    # runtime ``if``, ``n - 1`` a bound); a float one has no index value, so comparing it is an error, not False.
    __add__, __radd__ = _sop("+"), _sop("+", True)
    __sub__, __rsub__ = _sop("-"), _sop("-", True)
    __mul__, __rmul__ = _sop("*"), _sop("*", True)
    __floordiv__, __rfloordiv__ = _sop("//"), _sop("//", True)
    __mod__, __rmod__ = _sop("%"), _sop("%", True)
    __eq__, __ne__ = _sop("=="), _sop("!=")
    __lt__, __le__ = _sop("<"), _sop("<=")
    __gt__, __ge__ = _sop(">"), _sop(">=")
    __hash__ = object.__hash__


class Tile:
    """A tile value: ``shape``, ``dtype``; supports ``+ - * /``, unary ``-``, ``abs`` and ``@``."""

    def __init__(self, var: Var):
        self.var = var

    def __class_getitem__(cls, item):
        """``pl.Tile[[r, c], pl.FP32]`` (and a ``pl.TileView``): an annotation of a tile variable, checked for form only."""
        from .._dtypes import as_dtype
        from ._view import TileView

        if isinstance(item, tuple) and len(item) == 3 and isinstance(item[2], TileView):
            if isinstance(item[0], (list, tuple)):
                item[2].check(item[0])
            item = item[:2]
        if not isinstance(item, tuple) or len(item) != 2 or not isinstance(item[0], (list, tuple)):
            raise PtoCompileError("pl.Tile[...] takes [shape, dtype] (and a pl.TileView), e.g. "
                                  "pl.Tile[[64, 64], pl.FP32]")
        return (tuple(item[0]), as_dtype(item[1]))

    @property
    def shape(self) -> tuple[int, ...]:
        return self.var.type.shape

    @property
    def dtype(self):
        return self.var.type.dtype

    __add__, __radd__ = _binop("add"), _rbinop("add")
    __sub__, __rsub__ = _binop("sub"), _rbinop("sub")
    __mul__, __rmul__ = _binop("mul"), _rbinop("mul")
    __truediv__, __rtruediv__ = _binop("div"), _rbinop("div")
    __matmul__ = _binop("matmul")

    def __iter__(self):
        """One value: ``(t,) = pl.yield_(t_next)``, PyPTO's form for one carried value, unpacks to the tile."""
        return iter((self,))

    def __neg__(self):
        from . import _ops

        return _ops.neg(self)

    def __abs__(self):
        from . import _ops

        return _ops.abs(self)

    def __getitem__(self, key):
        """``tile[r0:r1, c0:c1]``: the window of the tile (``pl.slice``); bounds are ints or loop indices.

        ``tile[i, j]`` (an index per dimension, no slice) is one element, ``pl.tile.read(tile, [i, j])``.
        """
        parts = key if isinstance(key, tuple) else (key,)
        if len(parts) == len(self.shape) and not any(isinstance(k, slice) for k in parts):
            from ._memory import tile_read

            return tile_read(self, list(parts))
        from ._program import slice_box
        from ._layout import slice as tile_slice

        offsets, shape = slice_box(self.shape, key, "tile[...]", user_loc())
        return tile_slice(self, shape, offsets)

    def __setitem__(self, key, value):
        """``dst[r0:r1, c0:c1] = src``: PyPTO's sugar for ``dst = pl.assemble(dst, src, [r0, c0])``.

        The name holding ``dst`` in the calling function is rebound to the
        assembled tile (a new value: other names of the old tile keep it).
        """
        from ._assign import rebind_tile

        rebind_tile(self, key, value, sys._getframe(1))

    def __bool__(self):
        raise compile_error("a tile has no truth value at trace time (use pl.maximum/pl.minimum)", user_loc())

    # Comparisons are PyPTO's eq / ne / lt / le / gt / ge (``pl.cmp``): a predicate mask for ``pl.sel``.
    __eq__, __ne__ = _cmpop(0), _cmpop(1)
    __lt__, __le__ = _cmpop(2), _cmpop(3)
    __gt__, __ge__ = _cmpop(4), _cmpop(5)
    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"<tile %{self.var.id}: {self.var.type}>"


def to_index(x, what: str = "offset") -> IndexExpr:
    """Convert an int, an :class:`Index` or an integer scalar parameter to an index expression."""
    if isinstance(x, Index):
        return x.expr
    if isinstance(x, ScalarArg):
        if x.dtype.is_float or x.dtype.name == "BOOL":
            raise compile_error(f"{what} must be an integer, but scalar {x.name!r} is {x.dtype.name}", user_loc())
        return IScalar(x.name)
    if not is_int(x):
        try:
            import operator

            x = operator.index(x)
        except TypeError:
            raise compile_error(f"{what} must be an int or a loop index, got {x!r}", user_loc()) from None
    return IConst(int(x))


def _iop(op, swap=False):
    def method(self, other):
        if not (is_int(other) or isinstance(other, Index) or (isinstance(other, ScalarArg) and not other.dtype.is_float)):
            return NotImplemented
        a, b = self.expr, to_index(other)
        if swap:
            a, b = b, a
        return Index(IBin(op, a, b))

    return method


class Index:
    """A symbolic loop or block index; combine it with ints using ``+ - * // %``."""

    def __init__(self, expr: IndexExpr):
        self.expr = expr

    __add__, __radd__ = _iop("+"), _iop("+", True)
    __sub__, __rsub__ = _iop("-"), _iop("-", True)
    __mul__, __rmul__ = _iop("*"), _iop("*", True)
    __floordiv__, __rfloordiv__ = _iop("//"), _iop("//", True)
    __mod__, __rmod__ = _iop("%"), _iop("%", True)
    # Comparisons give an index of value 1 or 0: the condition of a runtime ``if`` (see _runtime_scalars).
    __eq__, __ne__ = _iop("=="), _iop("!=")
    __lt__, __le__ = _iop("<"), _iop("<=")
    __gt__, __ge__ = _iop(">"), _iop(">=")
    __hash__ = object.__hash__

    def __lshift__(self, n):  # i << n, i >> n for an int n >= 0: i * 2**n, i // 2**n (floor, as Python's >>)
        return self * (1 << n) if is_int(n) and n >= 0 else NotImplemented

    def __rshift__(self, n):
        return self // (1 << n) if is_int(n) and n >= 0 else NotImplemented

    def __rlshift__(self, c):
        """``c << i`` (PyPTO's ``1 << (6 + 2 * i)`` block lengths): ``c * 2**i`` for ``0 <= i < 63``, else 0."""
        if not is_int(c):
            return NotImplemented
        power = IConst(0)
        for k in range(63):
            power = IBin("+", power, IBin("*", IBin("==", self.expr, IConst(k)), IConst(1 << k)))
        return Index(IBin("*", IConst(int(c)), power))

    def _symbolic(self, *_):
        names = _scalar_params(self.expr)
        if names:
            said = ", ".join(repr(n) for n in names)
            raise compile_error(
                f"scalar parameter {said} has no value at trace time (its value arrives at dispatch), and a "
                f"Python range() or a shape needs a number: give it one ({names[0]}=128 when compiling or "
                "calling specialises the artifact on that value), or use it in load/store offsets, valid "
                "extents, pl.range bounds or the condition of an if statement inside a pl.at region or an "
                "InCore function",
                user_loc(),
            )
        raise compile_error(
            "a loop index is symbolic at trace time (so are a pl.read scalar and an integer scalar parameter); "
            "use it in load/store offsets, valid extents, pl.range bounds or the condition of an if statement "
            "inside a pl.at region or an InCore function, "
            "or use a Python range() to unroll",
            user_loc(),
        )

    __index__ = __int__ = __bool__ = _symbolic

    def __repr__(self) -> str:
        from ..ir._printer import format_index

        return f"<index {format_index(self.expr)}>"


def _index_extreme(op: str, a, b):
    if is_int(a) and is_int(b):
        return min(a, b) if op == "min" else max(a, b)
    return Index(IBin(op, to_index(a, f"pl.{op} operand"), to_index(b, f"pl.{op} operand")))


def index_min(a, b):
    """``pl.min`` of two ints, loop indices or integer scalars (an int when both are ints)."""
    return _index_extreme("min", a, b)


def index_max(a, b):
    """``pl.max`` of two ints, loop indices or integer scalars (an int when both are ints)."""
    return _index_extreme("max", a, b)
