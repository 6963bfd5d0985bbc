"""Scopes and loops: ``pl.at``, ``pl.range``, ``pl.spmd``.

``pl.range`` and ``pl.spmd`` are iterators that yield exactly once: the body
of your ``for`` is traced one time, with a symbolic :class:`Index`, and
becomes a loop (or a per-block body) in the IR.  A plain Python ``range``
unrolls instead.  ``break`` and ``continue`` have no meaning in a traced loop.
"""

from __future__ import annotations

import builtins
import sys

from .._checks import is_int
from ..ir._infer import compile_error
from ..ir._nodes import Assign, For, Scope, Spmd
from ..ir._passes import expr_inputs
from ._tracer import Index, Tile, current, user_loc
from ._types import Level

__all__ = ["at", "range", "spmd"]


class at:
    """Mark the body of a ``with`` as running on a core of ``level``.

    ``with pl.at(level=pl.Level.CORE_GROUP): ...``
    """

    def __init__(self, level: Level = Level.CORE_GROUP):
        if not isinstance(level, Level):
            raise compile_error(f"pl.at(level=...) takes a pl.Level, got {level!r}", user_loc())
        self.level = level

    def __enter__(self):
        self._tracer = current("pl.at")
        self._loc = user_loc()
        self._tracer.open_block("at")
        return self

    def __exit__(self, exc_type, *_):
        body = self._tracer.close_block()
        if exc_type is None:
            self._tracer.append(Scope(self.level.value, body, self._loc))
        return False


def _int(x, what: str) -> int:
    if not is_int(x):
        raise compile_error(f"{what} must be a Python int, got {x!r}", user_loc())
    return x


class range:  # noqa: A001
    """Loop over ``range(start, stop, step)`` in the generated code, not at trace time.

    ``for i in pl.range(0, n, 64):`` traces its body once; ``i`` is an
    :class:`Index` you can use (with ``+ - * // %`` and ints) in load and
    store offsets.  Bounds are Python ints; the step must be positive.
    """

    def __init__(self, start, stop=None, step=1):
        if stop is None:
            start, stop = 0, start
        self.start = _int(start, "pl.range start")
        self.stop = _int(stop, "pl.range stop")
        self.step = _int(step, "pl.range step")
        self._loc = user_loc()
        if self.step <= 0:
            raise compile_error(f"pl.range step must be positive, got {self.step}", self._loc)
        self._state = 0

    def __iter__(self):
        return self

    def __next__(self) -> Index:
        t = current("pl.range")
        if self._state == 0:
            self._state = 1
            self._tracer = t
            self._var = t.new_index("i")
            n = len(builtins.range(self.start, self.stop, self.step))
            last = self.start + (n - 1) * self.step if n else self.start
            t.ranges[self._var.name] = (self.start, last)
            t.open_block("range")
            self._first_var = t.next_var
            self._tiles_before = _tile_locals(sys._getframe(1))
            return Index(self._var)
        if self._state == 1:
            self._state = 2
            body = t.close_block()
            del t.ranges[self._var.name]
            _check_no_carried_tiles(self._tiles_before, _tile_locals(sys._getframe(1)), self._first_var, body)
            t.append(For(self._var, self.start, self.stop, self.step, body, self._loc))
        raise StopIteration


def _tile_locals(frame) -> dict[str, int]:
    return {name: v.var.id for name, v in frame.f_locals.items() if isinstance(v, Tile)}


def _check_no_carried_tiles(before: dict[str, int], after: dict[str, int], first_var: int, body) -> None:
    """Refuse ``t = f(t)`` inside a pl.range body: the loop would not carry t.

    The body is traced once, so each iteration would read the tile from
    before the loop.  A name rebound to a tile computed in the loop from its
    own previous value is that mistake.
    """
    deps: dict[int, list[int]] = {}
    locs = {}

    def index(stmts) -> None:
        for s in stmts:
            if isinstance(s, Assign):
                deps[s.var.id] = [v.id for v in expr_inputs(s.expr)]
                locs[s.var.id] = s.loc
            index(getattr(s, "body", ()))

    index(body)
    for name, old in before.items():
        new = after.get(name)
        if new is None or new == old or new < first_var:
            continue
        seen, stack = set(), [new]
        while stack:
            v = stack.pop()
            if v == old:
                raise compile_error(
                    f"tile {name!r} is reassigned from its own value inside pl.range: the loop body is "
                    "traced once, so every iteration would read the value from before the loop. "
                    "Accumulate matmuls in place with pl.matmul(a, b, acc=...), or unroll with range()",
                    locs.get(new),
                )
            if v not in seen:
                seen.add(v)
                stack.extend(deps.get(v, ()))


class spmd:
    """Run the body as ``n`` blocks spread over the device's cores.

    ``for b in pl.spmd(4):`` (or ``with pl.spmd(4) as b:``) traces the body
    once; ``b`` is the block index (an :class:`Index`, ``0 <= b < n``) to use
    in offsets.  The launch then has ``n`` blocks.  One block count per
    kernel; statements outside the spmd body run in every block.
    """

    def __init__(self, n):
        self.n = _int(n, "pl.spmd block count")
        self._loc = user_loc()
        if self.n <= 0:
            raise compile_error(f"pl.spmd needs a positive block count, got {self.n}", self._loc)
        self._state = 0

    def _begin(self) -> Index:
        t = current("pl.spmd")
        if t.in_spmd:
            raise compile_error("pl.spmd cannot be nested", self._loc)
        if t.block_num is not None and t.block_num != self.n:
            raise compile_error(
                f"pl.spmd({self.n}) disagrees with an earlier pl.spmd({t.block_num}) (one block count per kernel)",
                self._loc,
            )
        t.block_num = self.n
        t.in_spmd = True
        self._tracer = t
        self._var = t.new_index("b")
        t.ranges[self._var.name] = (0, self.n - 1)
        t.open_block("spmd")
        return Index(self._var)

    def _end(self, ok: bool) -> None:
        t = self._tracer
        body = t.close_block()
        del t.ranges[self._var.name]
        t.in_spmd = False
        if ok:
            t.append(Spmd(self._var, self.n, body, self._loc))

    def __iter__(self):
        return self

    def __next__(self) -> Index:
        if self._state == 0:
            self._state = 1
            return self._begin()
        if self._state == 1:
            self._state = 2
            self._end(True)
        raise StopIteration

    def __enter__(self) -> Index:
        return self._begin()

    def __exit__(self, exc_type, *_):
        self._end(exc_type is None)
        return False
