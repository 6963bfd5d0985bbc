"""Runtime scalars: ``pl.read``, and ``if``/``else`` on the values it reads.

``pl.read(cfg, [k])`` reads one element of an integer input tensor when the
region runs and returns an :class:`Index` whose value is unknown at trace
time: a *runtime scalar*.  It combines with ints and indices (``+ - * // %``,
comparisons giving 1 or 0), and may be a ``valid_shape`` extent, a load or
store offset (the window is then checked when the kernel runs), or a bound of
``pl.range``.

A kernel's ``if`` statements are rewritten when it is traced (see
:mod:`._branch`): an ``if`` whose condition is a plain Python value runs as
Python's; one whose condition is a runtime scalar, an integer scalar
parameter (``if my_rank == 0:``, ``if flag:``) or a comparison of loop
indices traces both branches, each as a loop of 0 or 1 iterations, and a
name either branch binds to an int or index takes ``else + c * (then - else)``
after it (``c`` the condition, 1 or 0).  A branch may load, compute and
store; a tile name both branches bind takes the taken branch's tile (a
branch that binds it to a whole tensor instead, PyPTO's ``pl.yield_`` of a
carried tensor, gives the tensor's value there, loaded at the branch's end).  A
``return`` inside such an ``if`` is an early return (see :mod:`._branch`):
both branches must return the same tensor, same-shaped tiles, or indices.
"""

from __future__ import annotations

from .._dtypes import INTEGER_DTYPES as _INTEGER_DTYPES
from ..ir._bounds import RUNTIME, index_range
from ..ir._diag import compile_error
from ..ir._infer import check_load, infer_expr
from ..ir._nodes import (Assign, Const, DynFor, Full, IBin, IConst, IRead, IVar, Load, Move, SetIndex, TileType,
                         Update)
from ..ir._spaces import CUBE_ONLY
from ._tracer import Index, ScalarArg, TensorArg, Tile, current, to_index, user_loc

__all__ = ["read", "write", "runtime_if", "loop_carry", "as_runtime_index", "FloatScalar", "INTEGER_DTYPES",
           "FLOAT_DTYPES"]

_RESULT = "__pl_result"  # the name an early return binds (see _branch)

INTEGER_DTYPES = tuple(d.name for d in _INTEGER_DTYPES)
#: Float tensors an orchestration's ``pl.read`` reads (as :class:`FloatScalar`, its bits captured by the tasks).
FLOAT_DTYPES = ("FP32",)


def _in_region(t, what: str, loc) -> None:
    if "at" not in t.frames:
        raise compile_error(f"{what} runs inside a pl.at region (or an InCore function) here, where its value "
                            f"is read on the core", loc)


def read(tensor, indices) -> Index:
    """Read the element ``tensor[indices]`` when the region runs; return it as a runtime scalar.

    ``tensor`` is an integer tensor of the kernel (INT8 ... UINT64, or
    BOOL; a UINT64 above INT64's range wraps), ``indices`` one int or loop index per dimension, inside the
    tensor.  In a region the element is read where the statement is: a
    ``pl.Out`` / ``pl.InOut`` tensor's after the region's earlier stores to
    it; the orchestration reads only input tensors.  The result is an INT64 value (PyPTO's ``pl.INDEX``).  Outside
    every region (in the orchestration) the element is read by the tasks
    that use the value (see :func:`_deferred`).  An FP32 tensor may be read
    too, giving a :class:`FloatScalar`: in a region an operand of the tile
    ops that take a scalar (``pl.mul(row, w)``), in the orchestration a
    value for a kernel's float scalar parameter.
    """
    t = current("pl.read")
    loc = user_loc()
    if isinstance(tensor, Tile):  # PyPTO's pl.read dispatches a tile to pl.tile.read
        from ._memory import tile_read

        return tile_read(tensor, indices)
    if not isinstance(tensor, TensorArg):
        raise compile_error(f"pl.read: expected a tensor parameter of the kernel or a tile, got {tensor!r}", loc)
    p = t.params[tensor.name]
    as_float = p.dtype.name in FLOAT_DTYPES  # read as its bits (a FloatScalar: an operand of pl.mul, pl.add ...)
    if p.dtype.name not in INTEGER_DTYPES and not as_float:
        raise compile_error(f"pl.read: {tensor.name!r} is {p.dtype.name}; only integer tensors "
                            f"({', '.join(INTEGER_DTYPES)}) are read as runtime scalars here", loc)
    from .distributed_trace import active_rank

    rank = active_rank()  # a window of a multi-chip program: each read is checked against stores at its cut
    window = rank is not None and tensor.name in rank.windows
    if tensor.param.direction != "in" and not window and "at" not in t.frames:
        # In a region (or a kernel) the element is read where the statement is, after the region's earlier stores
        # (PyPTO's tensor.read of an InOut tensor); the orchestration reads before any task has run.
        raise compile_error(f"pl.read: {tensor.name!r} is {tensor.param.direction}; the orchestration reads a runtime "
                            f"scalar from an input tensor (pl.Tensor), which no task writes (read it inside the "
                            f"kernel that uses it)", loc)
    if not isinstance(indices, (list, tuple)):
        indices = [indices]
    origin = getattr(tensor, "origin", (IConst(0),) * len(p.shape))
    if len(indices) != len(tensor.shape):
        raise compile_error(f"pl.read: {len(indices)} indices for the {len(tensor.shape)}-d tensor "
                            f"{tensor.name!r}", loc)
    offs = []
    for d, (i, base) in enumerate(zip(indices, origin)):
        e = to_index(i, "pl.read index")
        bounds = index_range(e, t.ranges, loc, runtime_ok=True)  # None: checked when it is read
        if bounds is None:
            offs.append(e if isinstance(base, IConst) and base.value == 0 else IBin("+", base, e))
            continue
        lo, hi = bounds
        if lo < 0 or hi >= tensor.shape[d]:
            raise compile_error(f"pl.read: index [{lo}..{hi}] of dimension {d} is outside "
                                f"[0, {tensor.shape[d]}) of {tensor.name!r}", loc)
        offs.append(e if isinstance(base, IConst) and base.value == 0 else IBin("+", base, e))
    value = IRead(p.name, tuple(offs), p.shape, bits=as_float)
    if as_float:
        return FloatScalar(_deferred(t, value, loc) if "at" not in t.frames else _bind(t, value, loc), p.dtype,
                           tensor.name)
    if "at" not in t.frames:
        return _deferred(t, value, loc)
    return _bind(t, value, loc)


class FloatScalar:
    """An FP32 element the orchestration read (``pl.read`` of a float tensor outside every task).

    PyPTO's orchestration reads it into a float variable and passes it to a
    kernel's ``pl.Scalar[pl.FP32]`` parameter.  Here the orchestration's
    values are integers, so the element is read as its bit pattern (a
    runtime scalar, :attr:`IRead.bits`); a task that uses it captures those
    bits as it captures any scalar, and inside the kernel this proxy is the
    FP32 value again (a :class:`~pypto_async.ir._nodes.ScalarBits` operand
    of ``pl.mul``, ``pl.add``, ``pl.full`` ...).  It is a value to hand to a
    kernel: arithmetic on it, or using it as an index or a bound, is
    refused.
    """

    def __init__(self, index: Index, dtype, name: str):
        self.index, self.dtype, self.name = index, dtype, name

    def __repr__(self) -> str:
        return f"<{self.dtype.name} scalar read from {self.name!r} by the orchestration>"

    def __index__(self):
        raise compile_error(f"{self!r} is a float: it is not an index or a loop bound", user_loc())

    def __bool__(self):
        raise compile_error(f"{self!r} is a float read when the program runs: an if on it is not supported "
                            f"(compare it inside a kernel)", user_loc())


def _deferred(t, value: IRead, loc) -> Index:
    """A ``pl.read`` in the orchestration (outside every region): read when the orchestration runs.

    As PyPTO's orchestration does on the device's control processor: the
    element is read into a variable of the orchestration (after the
    program's inputs are ready, when the orchestration reaches it), and a
    task that uses the value captures it when it is submitted, as it
    captures a loop index.  It may bound a ``pl.range`` or decide an ``if``
    around kernel calls: such a program's task graph is then known only
    when it runs, and the device resolves each task's edges as it is
    submitted.  An index known only at run time is checked there (the
    launch fails naming the read).  Tensor shapes must still be ints.
    """
    return _bind(t, value, loc)


def write(tensor, indices, value):
    """Write ``value`` into the element ``tensor[indices]`` when the region runs; return ``tensor``.

    ``tensor`` is a ``pl.Out`` / ``pl.InOut`` tensor of the kernel
    (``out = pl.write(out, [i, j], v)``), or a tile, written in place (as
    PyPTO's ``tile.write``: later uses of the tile see the element);
    ``indices`` one int or index per dimension.  ``value`` is a number, a
    scalar parameter, a scalar ``pl.read`` returned or another index
    expression (a loop index): its value where ``pl.write`` is, converted
    to the destination's dtype.
    """
    from .._dtypes import as_dtype
    from ..ir._nodes import Full, ScalarIndex
    from ._memory import record, store
    from ._ops import full

    t = current("pl.write")
    loc = user_loc()
    _in_region(t, "pl.write", loc)
    if not isinstance(tensor, (TensorArg, Tile)):
        raise compile_error(f"pl.write: expected a tensor parameter of the kernel or a tile, got {tensor!r}", loc)
    if not isinstance(indices, (list, tuple)):
        indices = [indices]
    what = f"tensor {tensor.name!r}" if isinstance(tensor, TensorArg) else f"tile {list(tensor.shape)}"
    if len(indices) != len(tensor.shape):
        raise compile_error(f"pl.write: {len(indices)} indices for the {len(tensor.shape)}-d {what}", loc)
    one = [1] * len(tensor.shape)
    dtype = as_dtype(tensor.dtype)
    if isinstance(value, Index):  # a runtime scalar or a loop index: its value now
        tile = record(Full(tuple(one), ScalarIndex(value.expr, dtype), dtype), "pl.write")
    else:
        tile = full(one, value, dtype)
    if isinstance(tensor, TensorArg):
        return store(tile, list(indices), tensor)
    from ._layout import tile_assemble

    updated = tile_assemble(tensor, tile, indices)
    t.append(Update(tensor.var, updated.var, loc))
    return tensor


def _bind(t, value, loc) -> Index:
    var = t.new_index("s")
    t.ranges[var.name] = RUNTIME
    t.append(SetIndex(var, value, loc))
    return Index(var)


def as_runtime_index(x):
    """``pl.cast(x, pl.INDEX)`` (or another integer dtype) of an int or an index: the value itself."""
    return x


class _Undefined:
    """A name bound in only one branch of a runtime ``if`` (and not before it)."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"<{self.name!r}: bound in only one branch of a runtime if>"


class runtime_if:
    """One ``if`` statement of a kernel, as the rewritten kernel drives it (see :mod:`._branch`)."""

    def __init__(self, cond, before: dict):
        if isinstance(cond, ScalarArg) and not cond.dtype.is_float:  # ``if flag:``: a runtime condition
            cond = cond != 0
        self.static = not isinstance(cond, Index)
        if self.static:
            self.value = bool(cond)  # a tile or a scalar parameter raises its own error here
            return
        if isinstance(cond.expr, IConst):
            self.static, self.value = True, bool(cond.expr.value)
            return
        self.t = current("if")
        self.loc = user_loc()
        self.before = dict(before)
        e = cond.expr
        if not (isinstance(e, IBin) and e.op in ("==", "!=", "<", "<=", ">", ">=")):
            e = IBin("!=", e, IConst(0))
        self.cond = _bind(self.t, e, self.loc).expr

    def refuse(self, what: str):
        raise compile_error(f"{what} inside an if on a runtime scalar is not supported (both branches are traced)",
                            self.loc)

    def then(self) -> None:
        self.t.open_block("if")

    def otherwise(self, names: tuple, now: dict) -> tuple:
        """Close the then-branch; return the names' values from before the ``if`` for the else-branch."""
        self.then_body = self.t.close_block()
        self.then_vals = {n: now[n] for n in names if n in now}
        self.t.open_block("else")
        return tuple(self.before.get(n, _Undefined(n)) for n in names)

    def merge(self, names: tuple, now: dict) -> tuple:
        """Close the else-branch, emit both branches; return the names' values after the ``if``."""
        t, loc = self.t, self.loc
        else_body = t.close_block()
        else_vals = {n: now[n] for n in names if n in now}
        out, pre, then_end, else_end = [], [], [], []
        for n in names:
            a, b = self.then_vals.get(n, _Undefined(n)), else_vals.get(n, _Undefined(n))
            if n == _RESULT and a is not b and not (isinstance(a, Tile) and isinstance(b, Tile)):
                out.append(self._merge_results(a, b, (pre, then_end, else_end)))
            elif isinstance(a, Tile) and isinstance(b, Tile) and a.var.id != b.var.id:
                out.append(self._merge_tiles(n, a, b, pre, then_end, else_end))
            elif _tile_and_tensor(a, b):  # PyPTO's tensor-level if: one branch yields a tensor, one a value
                a, b = self._as_tile(a, then_end), self._as_tile(b, else_end)
                out.append(self._merge_tiles(n, a, b, pre, then_end, else_end))
            else:
                out.append(self._merge_one(n, a, b))
        self.then_body = tuple(self.then_body) + tuple(then_end)
        else_body = tuple(else_body) + tuple(else_end)
        for s in pre:
            t.append(s)
        c = self.cond
        if self.then_body:
            t.append(DynFor(t.new_index("c"), IConst(0), c, 1, self.then_body, loc, "if"))
        if else_body:
            t.append(DynFor(t.new_index("c"), IConst(0), IBin("-", IConst(1), c), 1, else_body, loc, "else"))
        # The merged names are computed after both branches, from values that stay bound.
        def bound(v):
            if isinstance(v, tuple):  # an early return of several values
                return tuple(bound(x) for x in v)
            return _bind(t, v.expr, loc) if isinstance(v, _Pending) else v

        return tuple(bound(v) for v in out)

    def _merge_results(self, a, b, ends):
        """What an early-returning ``if`` returns: one tensor both branches return, an index, or an error.

        A tuple (``return acc, out``) merges element by element; its tiles as a tile name's do.
        """
        if a is b:
            return a
        if isinstance(a, Tile) and isinstance(b, Tile):
            return a if a.var.id == b.var.id else self._merge_tiles("the returned tile", a, b, *ends)
        if isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b):
            return tuple(self._merge_results(x, y, ends) for x, y in zip(a, b))
        index_like = (int, Index, ScalarArg)
        if isinstance(a, index_like) and isinstance(b, index_like) and not isinstance(a, bool) and not isinstance(b, bool):
            return self._merge_one(_RESULT, a, b)
        if isinstance(a, TensorArg) and isinstance(b, TensorArg) and a.name == b.name and _same_view(a, b):
            return a
        raise compile_error(f"the function returns {a!r} when the if on a runtime scalar is taken and {b!r} when it "
                            f"is not; both branches must return the same tensor (store into it in each), the "
                            f"same-shaped tile, or an index", self.loc)

    def _merge_tiles(self, name, a, b, pre, then_end, else_end):
        """A tile name both branches bind: one tile made before the ``if`` that each branch ends by setting.

        PyPTO's ``if`` yields the branch's tile; here the branches are traced
        both, so the name is given a tile of its own (of the shape, dtype and
        valid region both branches agree on), and each branch copies its value
        into it (an ``Update``, as a loop-carried tile takes its next value).
        """
        ta, tb = a.var.type, b.var.type
        if (ta.shape, ta.dtype, ta.valid) != (tb.shape, tb.dtype, tb.valid):
            raise compile_error(f"tile {name!r} is {ta} in the then-branch and {tb} in the else-branch of an if "
                                f"on a runtime scalar or loop index; both branches must give it the same shape, "
                                f"dtype and valid region", self.loc)
        memory = next((m for m in (ta.memory, tb.memory) if m in CUBE_ONLY), ta.memory)
        merged = self.t.new_var(TileType(ta.shape, ta.dtype, memory, ta.valid))
        start = self.before.get(name)
        # Only Acc is out of a move's reach (a matmul writes it): a tile from before the if elsewhere (e.g. a
        # pl.full accumulator the branches make a matmul result) places nothing, as both branches set the tile.
        movable = isinstance(start, Tile) and (memory != "Acc" or start.var.type.memory == "Acc")
        if movable and start.var.type.shape == ta.shape and start.var.type.dtype == ta.dtype:
            init = Move(start.var, memory)  # keeps the buffer's placement, as a carried tile's start does
        else:
            init = Full(ta.shape, Const(0, ta.dtype), ta.dtype, memory, ta.valid)
        pre.append(Assign(merged, init, self.loc))
        then_end.append(Update(merged, a.var, self.loc))
        else_end.append(Update(merged, b.var, self.loc))
        return Tile(merged)

    def _as_tile(self, v, end: list):
        """``v``, a tile, or a whole tensor loaded at the end of its branch (its value there, as a tile)."""
        if isinstance(v, Tile):
            return v
        origin = (IConst(0),) * len(v.shape)
        expr = Load(v.name, origin, tuple(v.shape), "Vec", None)
        check_load(expr, self.t.params, self.t.ranges, self.loc)
        var = self.t.new_var(infer_expr(expr, self.t.params, self.loc))
        end.append(Assign(var, expr, self.loc))
        return Tile(var)

    def _merge_one(self, name, a, b):
        if a is b:
            return a
        # A loop index left bound by a loop inside a branch (Python keeps its last value) is out of
        # scope after the branch: its C variable lives in the loop. The name is then unbound here.
        a, b = (_Undefined(name) if isinstance(v, Index) and not _in_scope(v.expr, self.t.ranges) else v
                for v in (a, b))
        if isinstance(a, _Undefined) or isinstance(b, _Undefined):
            other = b if isinstance(a, _Undefined) else a
            origin = getattr(other, "origin", None) or ()
            if isinstance(other, TensorArg) and all(_in_scope(o, self.t.ranges) for o in origin):
                # A tensor (``out = pl.store(t, ..., c)``), or a window of one placed by values still in scope:
                # the same buffer whichever branch ran.
                return other
            return a if isinstance(a, _Undefined) else b
        from ._control import TaskId

        if isinstance(a, TaskId) and isinstance(b, TaskId) and a._tracer is b._tracer is self.t:
            from ._submit import TaskJoin

            # The task of whichever branch ran: a later deps= waits for both (the one that did not run
            # adds no edge for this instance, or an earlier one's: more edges, never fewer).
            ids = tuple(dict.fromkeys((*getattr(a, "ids", (a.id,)), *getattr(b, "ids", (b.id,)))))
            merged = TaskJoin(self.t, ids)
            merged.branches = True  # a pl.array store of it stores the branch's own task (see TaskIdArray)
            return merged
        index_like = (int, Index, ScalarArg)
        if isinstance(a, bool) or isinstance(b, bool) or not (isinstance(a, index_like) and isinstance(b, index_like)):
            if isinstance(a, Tile) or isinstance(b, Tile):
                raise compile_error(f"tile {name!r} is bound to different tiles in the branches of an if on a "
                                    f"runtime scalar; that is not supported here (compute the tile once, with "
                                    f"the branch choosing scalars such as its valid extent)", self.loc)
            if a == b:
                return a
            raise compile_error(f"{name!r} is bound to {a!r} and {b!r} in the branches of an if on a runtime "
                                f"scalar; only ints and indices are merged", self.loc)
        if isinstance(a, int) and isinstance(b, int) and a == b:
            return a
        ea, eb = to_index(a, name), to_index(b, name)
        return _Pending(IBin("+", eb, IBin("*", self.cond, IBin("-", ea, eb))))


def _tile_and_tensor(a, b) -> bool:
    """Whether one of ``a``, ``b`` is a tile and the other a whole tensor of its shape and dtype."""
    if isinstance(a, TensorArg):
        a, b = b, a
    return (isinstance(a, Tile) and isinstance(b, TensorArg) and getattr(b, "origin", None) is None
            and tuple(a.shape) == tuple(b.shape) and a.dtype == b.dtype)


def _same_view(a, b) -> bool:
    """Whether two proxies of one tensor parameter are the same window of it."""
    return (getattr(a, "origin", None), getattr(a, "shape", None)) == (getattr(b, "origin", None),
                                                                         getattr(b, "shape", None))


def _in_scope(e, ranges) -> bool:
    """Whether every index variable of `e` is still bound (a loop's index is only inside its loop)."""
    if isinstance(e, IVar):
        return e.name in ranges
    return all(_in_scope(getattr(e, f), ranges) for f in getattr(e, "__dataclass_fields__", ())
               if isinstance(getattr(e, f), (IVar, IBin)))


class _Pending:
    def __init__(self, expr):
        self.expr = expr


class loop_carry:
    """Scalars a ``pl.range`` loop of a ``@pl.program``'s orchestration carries (as the rewritten function drives it).

    ``m = 0; for b in pl.range(n): m = pl.max(m, pl.read(lens, [b]))``: the
    body, traced once, reads ``m`` from the iteration before.  The rewrite
    (:mod:`._branch`) hands such names here: each int or index among them
    gets one variable of the orchestration, set before the loop, read by the
    body, and set from its new value at the end of each iteration (all of
    them at once, as a parallel assignment); after the loop the name reads
    the variable.  Anywhere else (a kernel, a region, a value that is not an
    int or an index) the names pass through unchanged.
    """

    def __init__(self, names: tuple, now: dict):
        from ._tracer import _state

        self.names = names
        self.values = [now.get(n, _Undefined(n)) for n in names]
        t = getattr(_state, "tracer", None)
        self.t = t if t is not None and getattr(t, "is_program", False) and "at" not in t.frames else None
        self.vars: dict[str, Index] = {}

    def enter(self) -> tuple:
        if self.t is None:
            return tuple(self.values)
        loc = user_loc()
        out = []
        for n, v in zip(self.names, self.values):
            if isinstance(v, Index) or isinstance(v, int) and not isinstance(v, bool):
                self.vars[n] = _bind(self.t, to_index(v, n), loc)
                out.append(self.vars[n])
            else:
                out.append(v)
        return tuple(out)

    def next(self, now: dict) -> tuple:
        """End an iteration: the carried variables take the names' new values; the names read them again."""
        if self.t is not None and self.vars:
            loc = user_loc()
            pending = [(self.vars[n].expr, now.get(n)) for n in self.names if n in self.vars]
            temps = []
            for var, new in pending:
                if not (isinstance(new, Index) or isinstance(new, int) and not isinstance(new, bool)):
                    raise compile_error(f"a scalar carried by this pl.range loop of the orchestration is rebound "
                                        f"to {new!r}; it must stay an int or an index", loc)
                temps.append((var, _bind(self.t, to_index(new, var.name), loc).expr))
            for var, tmp in temps:
                self.t.append(SetIndex(var, tmp, loc))
        return tuple(self.vars.get(n, now.get(n, v)) for n, v in zip(self.names, self.values))

    def exit(self, now: dict) -> tuple:
        """After the loop: a carried name reads its variable; any other keeps what the loop left in it."""
        return tuple(self.vars.get(n, now.get(n, v)) for n, v in zip(self.names, self.values))
