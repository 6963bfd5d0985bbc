"""PyPTO names that place or group work: ``pl.MemRef``, ``pl.dynamic``, ``pl.cluster``.

* ``pl.MemRef("name", slots=N)[k]`` names slot ``k`` of an on-chip
  allocation, in a tile's type annotation (PyPTO's hand-managed buffer
  rotation).  The sim has one memory and no allocator, so a placement
  changes no number a kernel computes: the declaration is checked (a name,
  ``slots`` a positive int, an index an int or a loop index) and has no
  other effect.  In a local annotation (``tile: pl.Tile[..., pl.MemRef(...)[i
  % 2]] = ...``) Python never evaluates it, as in PyPTO's re-parsed source.
* ``pl.dynamic("M")`` is a named runtime dimension for ``pl.Tensor[[M, 128],
  pl.FP32]``: a kernel accepts any extent there, bound where the kernel is
  called: a ``@pl.jit`` entry per call (a dimension used as nothing but
  leading extents is read at run time, one artifact for every extent, see
  ``_dynamic``; any other is specialised per call, each extent compiled
  once), a ``@pl.jit.incore`` helper or a program's InCore function per task
  call (from the caller's tensor), a ``@pl.program``'s orchestration at run
  time (``ir.compile(Prog)``, leading extents only) or when it is run with
  tensors (``runtime.run(Prog, *tensors)``, or
  ``ir.compile(Prog.bind(*tensors))``).  One ``pl.dynamic`` object is one
  extent: every dimension it annotates in one ``@pl.jit`` signature must be
  bound to the same extent.  A dimension may be an expression of dynamic dims and ints
  (``+ - * //``: ``pl.Tensor[[M * 2, N], ...]``, ``[NR * 64]``): it is the
  value of that expression where its dims are bound, and binds a dim it
  alone holds from the extent it is matched with when that solves it (a
  ``[1, NR * 64]`` tensor of extent 256 binds ``NR`` to 4).
* ``pl.cluster()`` co-schedules a Cube and a Vector kernel on one physical
  cluster (a ``Group`` function).  The sim has no clusters and runs no
  mixed kernels: in a ``@pl.program``'s orchestration each kernel call
  inside is the task it would be outside (see :class:`cluster`); anywhere
  else entering it raises ``PtoNotSupported``.
"""

from __future__ import annotations

from .._scalars import is_int
from ..errors import PtoCompileError, PtoNotSupported

__all__ = ["MemRef", "DynamicDim", "DimExpr", "dynamic", "cluster", "bind_shape", "is_dynamic", "dim_value",
           "is_dynamic_dim"]


class MemRef:
    """An on-chip allocation of ``slots`` equal slots (a placement: no effect on the sim's results).

    As PyPTO's, the name is optional: ``scratch = pl.MemRef(slots=2)`` takes
    the name of the variable it is bound to there, and ``pl.MemRef("ub")``
    names it explicitly.  A slot is picked by subscript (``scratch[i % 2]``);
    a constant slot outside ``range(slots)`` is a compile error.
    """

    def __init__(self, name: str | None = None, slots: int = 1):
        if name is not None and (not isinstance(name, str) or not name):
            raise PtoCompileError(f"pl.MemRef's name must be a non-empty str (or omitted), got {name!r}")
        if not is_int(slots) or isinstance(slots, bool) or slots < 1:
            raise PtoCompileError(f"{self._text(name, '...')} takes a positive int, got {slots!r}")
        self.name = name
        self.slots = int(slots)
        self.slot = None

    @staticmethod
    def _text(name, slots) -> str:
        return f"pl.MemRef(slots={slots})" if name is None else f"pl.MemRef({name!r}, slots={slots})"

    def __getitem__(self, k) -> "MemRef":
        if is_int(k) and not 0 <= k < self.slots:
            raise PtoCompileError(f"{self._text(self.name, self.slots)}: slot {k} is out of range")
        out = MemRef(self.name, self.slots)
        out.slot = k
        return out

    def __repr__(self) -> str:
        slot = "" if self.slot is None else f"[{self.slot}]"
        return self._text(self.name, self.slots) + slot


def _operand(x):
    if isinstance(x, _DimArith) or (is_int(x) and not isinstance(x, bool)):
        return x
    return None


def _dimop(op, swap=False):
    def method(self, other):
        if _operand(other) is None:
            return NotImplemented
        return DimExpr(op, other, self) if swap else DimExpr(op, self, other)

    return method


class _DimArith:
    """``+ - * //`` of a dynamic dim (or an expression of them) with ints and dims: a :class:`DimExpr`."""

    __add__, __radd__ = _dimop("+"), _dimop("+", True)
    __sub__, __rsub__ = _dimop("-"), _dimop("-", True)
    __mul__, __rmul__ = _dimop("*"), _dimop("*", True)
    __floordiv__, __rfloordiv__ = _dimop("//"), _dimop("//", True)


class DynamicDim(_DimArith):
    """A named runtime dimension (``pl.dynamic("M")``): matches any extent of a ``@pl.jit`` argument."""

    def __init__(self, name: str):
        if not isinstance(name, str) or not name.isidentifier():
            raise PtoCompileError(f"pl.dynamic takes a dimension's name, got {name!r}")
        self.name = name

    def __repr__(self) -> str:
        return self.name


_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
        "//": lambda a, b: a // b if b else None}


class DimExpr(_DimArith):
    """A dimension computed from dynamic dims and ints (``M * 2``): its value where its dims are bound."""

    def __init__(self, op: str, a, b):
        self.op, self.a, self.b = op, a, b
        self.name = repr(self)

    def dims(self) -> list:
        """The dynamic dims the expression holds, each once, in order."""
        out = []
        for x in (self.a, self.b):
            for d in (x.dims() if isinstance(x, DimExpr) else [x] if isinstance(x, DynamicDim) else []):
                if all(d is not e for e in out):
                    out.append(d)
        return out

    def value(self, lookup):
        """The expression's int value, each dim's given by ``lookup(dim)`` (None where one is unknown)."""
        a, b = dim_value(self.a, lookup), dim_value(self.b, lookup)
        return None if a is None or b is None else _OPS[self.op](a, b)

    def __repr__(self) -> str:
        return f"({self.a!r} {self.op} {self.b!r})"


def dim_value(d, lookup):
    """A declared dimension's extent: an int as it is, a dynamic dim or expression by ``lookup(dim)``."""
    if isinstance(d, DynamicDim):
        return lookup(d)
    if isinstance(d, DimExpr):
        return d.value(lookup)
    return d


def resolve_dim(x):
    """`x`'s extent where the trace in progress binds it (a ``pl.dynamic`` dim or expression), else `x` unchanged.

    A ``@pl.program``'s orchestration binds its dynamic dims to its
    arguments' extents, and a host orchestrator's take the rank count: in
    their bodies (and their kernels') such a dim is that int, a loop bound or
    a shape (PyPTO's ``NR = pl.dynamic("world_size")``, ``pl.range(NR)``).
    """
    if not is_dynamic_dim(x):
        return x
    from ._tracer import _state
    from .distributed_host import host_active

    t = getattr(_state, "tracer", None)
    env = getattr(t, "dims", None) or {}
    h = host_active()
    host = getattr(h, "dim_of", None)

    def lookup(d):
        if id(d) in env:
            return env[id(d)][1]
        return host(d) if host is not None else None

    v = dim_value(x, lookup)
    return x if v is None else v


def is_dynamic_dim(d) -> bool:
    """Whether a declared dimension is a ``pl.dynamic`` dim or an expression of them."""
    return isinstance(d, (DynamicDim, DimExpr))


def is_dynamic(shape) -> bool:
    """Whether a declared shape has a ``pl.dynamic`` dimension (or an expression of them)."""
    return shape is not None and any(is_dynamic_dim(d) for d in shape)


def _solve(e: DimExpr, n: int, env: dict):
    """The value of the one dim of ``e`` that ``env`` does not bind that makes ``e`` equal ``n`` (None if none)."""
    free = [d for d in e.dims() if id(d) not in env]
    if len(free) != 1:
        return None
    x = free[0]

    def at(v):
        return e.value(lambda d: v if d is x else env[id(d)][1])

    f0, f1 = at(0), at(1)
    if f0 is None or f1 is None or f1 == f0:
        return None
    guess, rem = divmod(n - f0, f1 - f0)  # exact for + - * (affine in one dim); checked below for //
    if rem or guess < 1 or at(guess) != n:
        return None
    return x, guess


def same_extent(a, b) -> bool:
    """Whether extents ``a`` and ``b`` are equal: ints, or the run-time extent of one ``pl.dynamic`` dimension."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return getattr(a, "name", a) == getattr(b, "name", b)  # a run-time extent (its scalar) equals only itself


def extent_text(n) -> str:
    """An extent as a message gives it: the int, or the name of the dimension read at run time."""
    return str(n) if isinstance(n, int) else f"the run-time extent {getattr(n, 'name', n)}"


def bind_shape(declared: tuple, shape: tuple, env: dict) -> str | None:
    """Match ``shape`` against a declared shape, binding its ``pl.dynamic`` dims in ``env``.

    ``env`` maps each :class:`DynamicDim` (by identity) to the extent it was
    bound to earlier in the same signature.  Returns ``None`` when ``shape``
    fits, else why not (a sentence to put in the caller's error).
    """
    if len(declared) != len(shape):
        return f"{len(shape)}-d, not {len(declared)}-d"
    for axis, (d, n) in enumerate(zip(declared, shape)):
        if isinstance(d, DimExpr):
            v = d.value(lambda x: env[id(x)][1] if id(x) in env else None)
            if v is None:
                solved = _solve(d, n, env)
                free = [x.name for x in d.dims() if id(x) not in env]
                if solved is None and len(free) > 1:
                    return (f"dimension {axis} is {d!r}, of {', '.join(free)}, none bound by an earlier dimension "
                            f"or argument (bind all but one of them first)")
                if solved is None:
                    return f"dimension {axis} is {n}, which {d!r} is for no positive {free[0]}"
                env[id(solved[0])] = solved
            elif v != n:
                return f"dimension {axis} is {n}, but {d!r} is {v} where its dims are bound"
        elif isinstance(d, DynamicDim):
            bound = env.setdefault(id(d), (d, n))[1]
            if not same_extent(bound, n):
                return (f"dimension {axis} ({d.name}) is {extent_text(n)}, but {d.name} is bound to "
                        f"{extent_text(bound)} by another argument")
        elif not same_extent(d, n):
            return f"dimension {axis} is {extent_text(n)}, not {extent_text(d)}"
    return None


def dynamic(name: str) -> DynamicDim:
    """Return a named runtime dimension for ``pl.Tensor[[...], dtype]`` annotations (see the module)."""
    return DynamicDim(name)


class cluster:
    """``with pl.cluster([name_hint=]):`` in a ``@pl.program``'s orchestration: kernels co-scheduled on one cluster.

    PyPTO outlines the body (``with pl.spmd(n):`` dispatches of a Cube and a
    Vector kernel) into one ``Group`` function run on a physical cluster.
    The sim has no clusters: each kernel call inside is the task it is
    outside (an ``spmd`` dispatch, a task of ``n`` blocks), ordered by its
    data as every task is, and carries the hint ``("cluster", name)``, so
    the results are the same.  As in PyPTO the calls inside take no
    per-task metadata: ``deps=``, ``pl.spmd(..., as tid)`` and
    ``pl.spmd(allow_early_resolve=True)`` are refused, and clusters do not
    nest.  Anywhere else (a ``@pl.jit`` body, a region) it raises
    ``PtoNotSupported``: the sim runs no mixed kernels.
    """

    def __init__(self, *, name_hint: str = ""):
        if not isinstance(name_hint, str):
            raise PtoCompileError(f"pl.cluster(name_hint=...) takes a str, got {name_hint!r}")
        self.name_hint = name_hint

    def __enter__(self) -> None:
        from ._tracer import _state, compile_error, user_loc

        t = getattr(_state, "tracer", None)
        loc = user_loc()
        if t is None or not getattr(t, "is_program", False) or "at" in t.frames:
            raise PtoNotSupported("pl.cluster(): the sim has no Cube/Vector clusters and runs no mixed kernels; "
                                  "it groups the kernel calls of a @pl.program's orchestration only (write the "
                                  "Cube and Vector work as separate pl.at regions elsewhere)")
        if getattr(t, "cluster", None) is not None:
            raise compile_error("pl.cluster() cannot be nested", loc)
        self._tracer = t
        t.cluster = self.name_hint or f"cluster{getattr(t, 'next_task', 0)}"

    def __exit__(self, *exc) -> bool:
        self._tracer.cluster = None
        return False
