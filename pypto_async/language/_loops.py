"""``pl.unroll`` and ``pl.pipeline``: loop forms that are scheduling hints over ``pl.range``; ``pl.while_``.

Both compute exactly what ``pl.range`` over the same bounds computes, one
iteration after another in order; the form is recorded on the loop
(``For.kind``, ``For.stage``) and shown by the printed program.

* ``pl.unroll(n)`` / ``pl.unroll(start, stop, step)``: PyPTO unrolls the loop
  at compile time; it takes int bounds and no ``init_values``.
* ``pl.pipeline(n, stage=s)``: PyPTO replicates the body ``s`` times per step
  so that consecutive iterations' loads and computes overlap (ping-pong
  buffering at ``s=2``), with a tail for a remainder.  ``stage=`` is required
  and at least 1; carried tiles (``init_values=``) work as in ``pl.range``.
"""

from __future__ import annotations

from .._scalars import is_int
from ..ir._bounds import RUNTIME
from ..ir._diag import compile_error
from ..ir._nodes import DynFor, IConst, IVar, SetIndex
from ._carry import open_carries
from ._control import range as _range
from ._tracer import Index, ScalarArg, Tile, current, to_index, user_loc

__all__ = ["unroll", "pipeline", "while_", "cond"]


class unroll(_range):
    """A ``pl.range`` PyPTO unrolls at compile time (``for i in pl.unroll(4):``); no ``init_values``."""

    _kind = "pl.unroll"
    _form = "unroll"

    def __init__(self, start, stop=None, step=1, *, init_values=None):
        if init_values is not None:
            raise compile_error("pl.unroll() cannot be combined with init_values (an unrolled loop carries "
                                "no explicit state; use pl.range)", user_loc())
        bounds = (("stop", start),) if stop is None else (("start", start), ("stop", stop))
        for name, v in (*bounds, ("step", step)):
            if v is not None and (isinstance(v, bool) or not is_int(v)):
                raise compile_error(f"pl.unroll() {name} must be a compile-time int literal (it is unrolled at "
                                    f"compile time), got {v!r}; use pl.range for a Scalar bound", user_loc())
        super().__init__(start, stop, step)


class pipeline(_range):
    """A ``pl.range`` software-pipelined ``stage`` deep (``for i in pl.pipeline(n, stage=2):``)."""

    _kind = "pl.pipeline"
    _form = "pipeline"

    def __init__(self, start, stop=None, step=1, *, stage=None, init_values=None):
        if stage is None:
            raise compile_error("pl.pipeline() requires stage= (positive integer): pl.pipeline(stop, stage=F)",
                                user_loc())
        if not is_int(stage) or isinstance(stage, bool):
            raise compile_error(f"pl.pipeline() stage must be a compile-time constant integer, got {stage!r}",
                                user_loc())
        if stage < 1:
            raise compile_error(f"pl.pipeline() stage must be >= 1, got {stage}", user_loc())
        super().__init__(start, stop, step, init_values=init_values)
        self._stage = int(stage)


class while_:  # noqa: N801 - PyPTO's name
    """``for (x, acc) in pl.while_(init_values=(0, t)):`` a loop that runs while ``pl.cond(...)`` holds.

    The body is traced once.  Its first statement is ``pl.cond(c)``: before
    each iteration the condition ``c`` (an index expression over the carried
    values: a comparison gives 1 or 0) is evaluated, and the loop ends when it
    is 0.  ``init_values`` is required: ints, loop indices, runtime scalars
    (``pl.read``) and tiles.  An integer value is carried as a runtime scalar,
    a tile as in ``pl.range``; the body ends with ``pl.yield_(...)`` giving
    the next values, which after the loop it returns.  The loop lives inside
    a ``pl.at`` region (or an InCore function), where its values are known.
    """

    def __init__(self, *, init_values=None):
        self._loc = user_loc()
        if init_values is None:
            raise compile_error("while_() requires init_values to be specified (the values the loop carries, "
                                "e.g. pl.while_(init_values=(0,)))", self._loc)
        if not isinstance(init_values, (list, tuple)) or not init_values:
            raise compile_error(f"pl.while_ init_values must be a non-empty tuple, got {init_values!r}", self._loc)
        self._init = tuple(init_values)
        self._state = 0

    def __iter__(self):
        return self

    def __next__(self):
        t = current("pl.while_")
        if self._state == 0:
            self._state = 1
            return self._begin(t)
        if self._state == 1:
            self._state = 2
            self._end(t)
        raise StopIteration

    def _begin(self, t):
        if "at" not in t.frames:
            raise compile_error("pl.while_ runs inside a pl.at region or an InCore function here (its condition "
                                "is evaluated on the core)", self._loc)
        carries, tiles = [], []
        for i, v in enumerate(self._init):
            if isinstance(v, Tile):
                tiles.append(v)
                carries.append(None)
                continue
            if isinstance(v, bool) or not (is_int(v) or isinstance(v, (Index, ScalarArg))):
                raise compile_error(f"pl.while_ init_values[{i}] must be an int, an index or a tile, got {v!r}",
                                    self._loc)
            var = t.new_index("w")
            t.ranges[var.name] = RUNTIME
            t.append(SetIndex(var, to_index(v, f"pl.while_ init_values[{i}]"), self._loc))
            carries.append(var)
        inits, tile_vars = open_carries(t, tiles, self._loc)
        for s in inits:
            t.append(s)
        it = iter(tile_vars)
        self.carries = [c if c is not None else next(it) for c in carries]
        self.cond = None
        self._var = t.new_index("wl")
        t.open_block("while")
        self.depth, self.yielded = len(t.blocks), None
        t.carry_loops.append(self)
        return tuple(Index(c) if isinstance(c, IVar) else Tile(c) for c in self.carries)

    def _end(self, t) -> None:
        t.carry_loops.pop()
        if self.cond is None:
            raise compile_error("a pl.while_ body must start with pl.cond(condition)", self._loc)
        if self.yielded is None:
            raise compile_error("a pl.while_(init_values=...) body must end with pl.yield_", self._loc)
        if self.yielded != len(t.blocks[-1]):
            raise compile_error("pl.yield_ must be the last statement of the loop body", self._loc)
        body = t.close_block()
        t.append(DynFor(self._var, IConst(0), self.cond, 1, body, self._loc, kind="while"))


def cond(condition) -> None:
    """``pl.cond(c)``: the condition of the enclosing ``pl.while_``, as the first statement of its body."""
    t = current("pl.cond")
    loc = user_loc()
    loop = t.carry_loops[-1] if getattr(t, "carry_loops", None) else None
    if not isinstance(loop, while_) or loop.depth != len(t.blocks):
        raise compile_error("pl.cond belongs directly in the body of a pl.while_ loop, as its first statement", loc)
    if loop.cond is not None or t.blocks[-1]:
        raise compile_error("pl.cond must be the first statement of the pl.while_ body (and appear once)", loc)
    if isinstance(condition, bool) or not isinstance(condition, (Index, ScalarArg)) and not is_int(condition):
        raise compile_error(f"pl.cond takes a condition over the loop's values (e.g. x < 10), got {condition!r}",
                            loc)
    loop.cond = to_index(condition, "pl.cond condition")
