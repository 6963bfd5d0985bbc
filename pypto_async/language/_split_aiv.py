"""``pl.split_aiv``, ``pl.aiv_shard``, ``pl.aic_gather``: the explicit AIV-split region of a mixed kernel.

PyPTO's ``for aiv_id in pl.split_aiv(2, mode=...):`` puts a region's vector
work on the two AIV lanes of a core group (language/04-scopes, "Clusters and
AIV lanes"):

* ``mode=pl.SplitMode.NONE`` (task-parallel): **both** lanes run the full
  body, ``aiv_id`` (also ``pl.tile.get_subblock_idx()``) being 0 on one and 1
  on the other, and the author divides the work by ``aiv_id``.  Here the body
  is a loop of two iterations, lane 0 then lane 1, so a side effect both
  lanes perform happens twice, as on the device.
* ``UP_DOWN`` / ``LEFT_RIGHT`` (data-parallel): each lane owns one half of
  the rows / columns.  A body written per lane -- it reads ``aiv_id`` or
  crosses with ``pl.aiv_shard`` / ``pl.aic_gather`` -- is traced once per
  lane (``aiv_id`` a plain int, 0 then 1, so ``if aiv_id == 0:`` picks a
  branch), which is what each lane computes on the board.  A body that never
  reads its lane is PyPTO's full-width form, which its compiler halves: the
  halves together are the whole-tile computation, traced once.  The lane
  index is an ``int`` that notes being read, which is how the two are told
  apart after lane 0's trace.

``pl.aiv_shard(x)`` names a cube value read on the vector lanes (at the top
of the region) and ``pl.aic_gather(x)`` a vector value handed back to the
cube.  In a ``mode=NONE`` region they cross whole.  In a data-parallel one
``aiv_shard`` gives the lane its half (lane 0 the first ``ceil(n / 2)``,
lane 1 the rest on the same box, valid where ``x`` is) and ``aic_gather``
joins lane 0's and lane 1's tiles along the split axis into the tile the
cube reads after the region.  Both are refused outside a region, and a cube
op (``pl.matmul`` and friends) inside one, as PyPTO refuses them.  The mode
is recorded on the enclosing task (``Scope.hints``: ``("split_aiv",
"NONE")``), which the printed program shows.

A ``pl.split_aiv`` loop outside every region is wrapped in a region of its
own (a task), as PyPTO's outliner wraps it in an InCore scope.
"""

from __future__ import annotations

import sys

from ..ir._diag import compile_error
from ..ir._nodes import Matmul, MatmulAcc
from ._control import at, range as _range
from ._hints import SplitMode
from ._tracer import TensorArg, Tile, current, user_loc
from ._types import Level

__all__ = ["split_aiv", "aiv_shard", "aic_gather", "get_subblock_idx", "add_task_hint"]


def add_task_hint(t, hint) -> None:
    """Record ``hint`` on the task being traced: a ``pl.at`` region or a kernel call's task."""
    attrs = getattr(t, "func_attrs", None)
    if attrs is not None:
        attrs["hints"].append(hint)
        return
    extra = getattr(t, "region_extra", None)
    if extra is None:
        raise compile_error("no task is being traced here", user_loc())
    extra.append(hint)


class _Lane(int):
    """``aiv_id`` of a data-parallel split: the lane (0 or 1) being traced; any use marks the body per-lane."""

    def __new__(cls, value: int, split: "split_aiv"):
        self = super().__new__(cls, value)
        self._split = split
        return self

    def __repr__(self) -> str:
        return repr(int(self))

    __str__ = __repr__


def _marking(name: str):
    base = getattr(int, name)

    def method(self, *args):
        self._split.per_lane = True
        return base(self, *args)

    method.__name__ = name
    return method


for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__floordiv__",
              "__rfloordiv__", "__mod__", "__rmod__", "__neg__", "__eq__", "__ne__", "__lt__", "__le__",
              "__gt__", "__ge__", "__bool__", "__index__", "__int__", "__hash__", "__format__", "__and__",
              "__or__", "__xor__", "__lshift__", "__rshift__", "__pow__", "__truediv__", "__rtruediv__"):
    setattr(_Lane, _name, _marking(_name))


def _cube_ops(body) -> str | None:
    for s in body:
        value = getattr(s, "expr", None)
        if isinstance(s, MatmulAcc) or isinstance(value, Matmul):
            return "pl.matmul_acc" if isinstance(s, MatmulAcc) else "pl.matmul"
        for inner in ("body", "members"):
            found = _cube_ops(getattr(s, inner, None) or ())
            if found:
                return found
    return None


class _Lanes(_range):
    """The ``mode=NONE`` body: a loop over the two lanes, carrying tiles as ``pl.range`` does."""

    _kind = "pl.split_aiv"


class split_aiv:
    """``for aiv_id in pl.split_aiv(2, mode=pl.SplitMode.NONE):`` the region on the two AIV lanes (see the module)."""

    def __init__(self, n, *, mode=None, **kwargs):
        self._loc = user_loc()
        hint = "use 'for aiv_id in pl.split_aiv(2, mode=pl.SplitMode.NONE):' (n is the AIV lane count, 2)"
        for kw in kwargs:
            raise compile_error(f"pl.split_aiv() loop form does not accept '{kw}='", self._loc)
        if not isinstance(n, int) or isinstance(n, bool) or n != 2:
            raise compile_error(f"pl.split_aiv: n is the AIV sub-core count, fixed at 2, got {n!r}; {hint}",
                                self._loc)
        if not isinstance(mode, SplitMode):
            raise compile_error(f"pl.split_aiv: mode= is required, a pl.SplitMode, got {mode!r}; {hint}", self._loc)
        self.mode = mode
        self._state = 0

    def __iter__(self):
        return self

    def __next__(self):
        if self._state == 0:
            self._state = 1
            return self._begin(sys._getframe(1))
        if self._state == 1 and self.mode is not SplitMode.NONE and self.per_lane:
            self._state = 2
            return self._next_lane()
        if self._state in (1, 2):
            self._state = 3
            self._end(sys._getframe(1))
        raise StopIteration

    def _begin(self, frame):
        t = current("pl.split_aiv")
        self._tracer = t
        if getattr(t, "split_aiv_mode", None) is not None:
            raise compile_error("nested 'for ... in pl.split_aiv(...)' is not allowed: a split_aiv body already "
                                "represents the two AIV lanes", self._loc)
        self._region = None
        if "at" not in t.frames and getattr(t, "func_attrs", None) is None:
            self._region = at(Level.CORE_GROUP)  # PyPTO wraps a top-level region in an InCore scope
            self._region.__enter__()
        hints = getattr(t, "region_hints_now", ()) or ()
        if any(h[0] == "split" for h in hints):
            raise compile_error("scope combines a function-level pl.split(...) (optimizations=[pl.split(...)]) "
                                "with a pl.split_aiv region; these are mutually exclusive AIV-split mechanisms",
                                self._loc)
        add_task_hint(t, ("split_aiv", self.mode.value))
        t.split_aiv_mode = self.mode
        t.split_aiv_region = self
        if self.mode is SplitMode.NONE:
            self._lanes = _Lanes(0, 2)
            self._lanes._loc = self._loc
            index = self._lanes._begin(t, frame)
            t.subblock_index = index
            return index
        # Data-parallel: the body is traced for lane 0; if it is written per lane (it reads the lane index or
        # crosses with pl.aiv_shard / pl.aic_gather) it is traced again for lane 1, else lane 0's trace is the
        # whole-tile computation (the halves together).
        self.per_lane = False
        self.lane = 0
        self._gathers: list = []  # lane 0's pl.aic_gather operands, in call order
        self._gather_at = 0
        t.open_block("split_aiv")
        lane = _Lane(0, self)
        t.subblock_index = lane
        return lane

    def _next_lane(self):
        t = self._tracer
        self.lane = 1
        self._gather_at = 0
        lane = _Lane(1, self)
        t.subblock_index = lane
        return lane

    def _end(self, frame) -> None:
        t = self._tracer
        t.split_aiv_mode = None
        t.split_aiv_region = None
        t.subblock_index = None
        if self.mode is SplitMode.NONE:
            body = t.blocks[-1]
            cube = _cube_ops(body)
            if cube is None:
                self._lanes._end(t, frame)
        else:
            if self.per_lane and self._gather_at != len(self._gathers):
                raise compile_error(f"pl.aic_gather: lane 0 of this pl.split_aiv region gathered "
                                    f"{len(self._gathers)} value(s) and lane 1 {self._gather_at}; both lanes must "
                                    f"reach the same gathers", self._loc)
            body = t.close_block()
            cube = _cube_ops(body)
            for s in body:
                t.append(s)
        if cube is not None:
            raise compile_error(f"cube op '{cube}' inside a pl.split_aiv region: a region body is AIV work; move "
                                f"the matmul out of the region", self._loc)
        if self._region is not None:
            self._region.__exit__(None, None, None)


def _region(op: str):
    t = current(op)
    region = getattr(t, "split_aiv_region", None)
    if getattr(t, "split_aiv_mode", None) is None or region is None:
        raise compile_error(f"{op} is the boundary of a pl.split_aiv region: use it inside "
                            f"'for aiv_id in pl.split_aiv(2, mode=...)'", user_loc())
    return region


def _operand(op: str, x):
    if not isinstance(x, (Tile, TensorArg)):
        raise compile_error(f"{op} takes a tile or a tensor, got {x!r}", user_loc())
    return x


def _axis(region) -> int:
    return 0 if region.mode is SplitMode.UP_DOWN else 1


def _halves(extent: int) -> tuple[int, int]:
    """The two lanes' extents of a split axis: the ceil half first (an odd 17 is 9 and 8)."""
    half = (extent + 1) // 2
    return half, extent - half


def aiv_shard(x):
    """Carry a cube value to the AIV lanes of a ``pl.split_aiv`` region: a tile in Mat or Acc moves to Vec.

    In a ``mode=NONE`` region each lane receives the whole value.  In an
    ``UP_DOWN`` / ``LEFT_RIGHT`` region each lane receives its half along the
    rows / columns (lane 0 the first ``ceil(n / 2)``, lane 1 the rest), valid
    where the value is: an accumulator valid to 5 of 16 rows gives lane 0 five
    valid rows and lane 1 none.  A tensor is a window of it (the half, in a
    data-parallel region), a tile already in Vec is not moved.
    """
    from ._memory import move
    from ._types import MemorySpace

    region = _region("pl.aiv_shard")
    x = _operand("pl.aiv_shard", x)
    if region.mode is not SplitMode.NONE:
        region.per_lane = True
        axis = _axis(region)
        if len(x.shape) != 2:
            raise compile_error(f"pl.aiv_shard in a pl.split_aiv(mode=pl.SplitMode.{region.mode.name}) region "
                                f"halves a 2-D value, got shape {list(x.shape)}", user_loc())
        first, second = _halves(x.shape[axis])
        size = first if region.lane == 0 else second
        shape = list(x.shape)
        shape[axis] = size
        offset = [0, 0]
        offset[axis] = first * region.lane
        if size == 0:
            raise compile_error(f"pl.aiv_shard: a {list(x.shape)} value has no half for lane 1 along the split axis",
                                user_loc())
        from ._layout import slice as _slice

        x = _slice(x, shape, offset)
        if size < first and isinstance(x, Tile):
            x = _odd_box(x, axis, first)
    if isinstance(x, TensorArg) or x.var.type.memory == "Vec":
        return x
    return move(x, target_memory=MemorySpace.Vec)


def _odd_box(x: Tile, axis: int, box: int) -> Tile:
    """Lane 1's half of an odd extent on the lanes' common box (17 rows: 8 valid rows of a 9-row tile)."""
    from ._layout import slice as _slice, tile_assemble
    from ._memory import create_tile, fillpad

    t = x.var.type
    valid = [_index(e) for e in t.valid] if t.valid is not None else list(t.shape)
    shape = list(t.shape)
    shape[axis] = box
    placed = tile_assemble(create_tile(shape, t.dtype), fillpad(x) if t.valid is not None else x, [0, 0])
    return _slice(placed, shape, [0, 0], valid_shape=valid)


class _LaneZeroGather:
    """What ``pl.aic_gather`` gives lane 0 of a data-parallel region: the joined tile exists once lane 1 runs."""

    def __init__(self, loc):
        self._loc = loc

    def __repr__(self) -> str:
        return (f"<pl.aic_gather result at {self._loc}: the two lanes' halves joined, for the cube after the "
                f"pl.split_aiv region (not a value inside it)>")


def _joined_valid(op: str, a, b, axis: int, loc):
    """The valid extents of ``a`` and ``b`` put end to end along ``axis`` (None: fully valid)."""
    from ..ir._nodes import IConst

    ta, tb = a.var.type, b.var.type
    va = ta.valid or tuple(IConst(d) for d in ta.shape)
    vb = tb.valid or tuple(IConst(d) for d in tb.shape)
    out = []
    for d in range(2):
        ea, eb = va[d], vb[d]
        if d == axis:
            full_a = isinstance(ea, IConst) and ea.value == ta.shape[d]
            empty_b = isinstance(eb, IConst) and eb.value == 0
            if full_a and isinstance(eb, IConst):
                out.append(IConst(ta.shape[d] + eb.value))
            elif empty_b:
                out.append(ea)
            else:
                raise compile_error(
                    f"{op}: the lanes' halves do not abut: {op} re-joins the two lanes positionally, and lane 0 "
                    f"holds a partial extent ({_text(ea)} of {ta.shape[d]}) while lane 1 holds "
                    f"{_text(eb)}; pad lane 0's half first (pl.fillpad) or make lane 1's empty", loc)
        else:
            if not (isinstance(ea, IConst) and isinstance(eb, IConst) and ea.value == eb.value) and ea != eb:
                raise compile_error(f"{op}: the lanes' halves differ across the split ({_text(ea)} and "
                                    f"{_text(eb)} along dimension {d})", loc)
            out.append(ea)
    return out


def _text(e) -> str:
    from ..ir._nodes import IConst

    return str(e.value) if isinstance(e, IConst) else "a runtime extent"


def aic_gather(x):
    """Hand a vector value of a ``pl.split_aiv`` region back to the cube: a Vec tile moves to Mat (L1).

    In a ``mode=NONE`` region the value crosses whole (both lanes hand over
    the same value, as PyPTO requires).  In an ``UP_DOWN`` / ``LEFT_RIGHT``
    region lane 0's and lane 1's tiles are joined along the split axis
    (lane 0 first) into the tile the cube reads after the region; inside
    the region there is no joined value to compute on.  A tensor, or a tile
    outside Vec, crosses as it is.
    """
    from ._memory import move
    from ._types import MemorySpace

    region = _region("pl.aic_gather")
    x = _operand("pl.aic_gather", x)
    loc = user_loc()
    if region.mode is SplitMode.NONE:
        if isinstance(x, TensorArg) or x.var.type.memory in ("Mat", "Left", "Right", "Acc", "Bias"):
            return x
        return move(x, target_memory=MemorySpace.Mat)
    region.per_lane = True
    if isinstance(x, TensorArg):
        raise compile_error("pl.aic_gather in a data-parallel pl.split_aiv region joins the lanes' tiles; got a "
                            "tensor (a GM tensor belongs to no lane: write each lane's half to it instead)", loc)
    if x.var.type.memory != "Vec":
        raise compile_error(f"pl.aic_gather joins the lanes' vector tiles; got a tile in {x.var.type.memory}", loc)
    if len(x.shape) != 2:
        raise compile_error(f"pl.aic_gather joins 2-D tiles, got shape {list(x.shape)}", loc)
    if region.lane == 0:
        region._gathers.append(x)
        return _LaneZeroGather(loc)
    if region._gather_at >= len(region._gathers):
        raise compile_error("pl.aic_gather: lane 1 of this pl.split_aiv region reaches a gather lane 0 did not",
                            loc)
    first = region._gathers[region._gather_at]
    region._gather_at += 1
    axis = _axis(region)
    a, b = first.var.type, x.var.type
    other = 1 - axis
    if a.dtype != b.dtype or a.shape[other] != b.shape[other]:
        raise compile_error(f"pl.aic_gather: lane 0 handed over a {list(a.shape)} {a.dtype.name} tile and lane 1 "
                            f"a {list(b.shape)} {b.dtype.name} one; they must match across the split axis", loc)
    valid = _joined_valid("tile.aic_gather", first, x, axis, loc)
    from ._layout import slice as _slice, tile_assemble
    from ._memory import create_tile, fillpad

    shape = list(a.shape)
    shape[axis] = a.shape[axis] + b.shape[axis]
    joined = create_tile(shape, a.dtype)
    at_b = [0, 0]
    at_b[axis] = a.shape[axis]
    joined = tile_assemble(joined, fillpad(first) if a.valid is not None else first, [0, 0])
    joined = tile_assemble(joined, fillpad(x) if b.valid is not None else x, at_b)
    if any(not (hasattr(v, "value") and v.value == d) for v, d in zip(valid, shape)):
        joined = _slice(joined, shape, [0, 0], valid_shape=list(_index(v) for v in valid))
    return move(joined, target_memory=MemorySpace.Mat)


def _index(e):
    from ..ir._nodes import IConst

    from ._tracer import Index

    return e.value if isinstance(e, IConst) else Index(e)


def get_subblock_idx():
    """The AIV lane index (0 or 1) of the enclosing ``pl.split_aiv(2, mode=...)`` region (the body's ``aiv_id``)."""
    t = current("pl.tile.get_subblock_idx")
    index = getattr(t, "subblock_index", None)
    if index is None:
        raise compile_error("pl.tile.get_subblock_idx() is the AIV lane of a pl.split_aiv region; there is none "
                            "here", user_loc())
    if isinstance(index, _Lane):
        index._split.per_lane = True  # reading the lane makes a data-parallel body per-lane
    return index
