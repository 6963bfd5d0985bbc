"""``pl.split_aiv``, ``pl.aiv_shard``, ``pl.aic_gather``: the explicit AIV-split region of a mixed kernel.

PyPTO's ``for aiv_id in pl.split_aiv(2, mode=...):`` puts a region's vector
work on the two AIV lanes of a core group (language/04-scopes, "Clusters and
AIV lanes"):

* ``mode=pl.SplitMode.NONE`` (task-parallel): **both** lanes run the full
  body, ``aiv_id`` (also ``pl.tile.get_subblock_idx()``) being 0 on one and 1
  on the other, and the author divides the work by ``aiv_id``.  Here the body
  is a loop of two iterations, lane 0 then lane 1, so a side effect both
  lanes perform happens twice, as on the device.
* ``UP_DOWN`` / ``LEFT_RIGHT`` (data-parallel): each lane computes one half
  of every vector tile (rows / columns) and the halves together are the
  whole.  The sim computes the body once on the whole tiles, which gives
  the same values; the lane index has no meaning there, so using ``aiv_id``
  raises :class:`~pypto_async.errors.PtoNotSupported`.

``pl.aiv_shard(x)`` names a cube value read on the vector lanes (at the top
of the region) and ``pl.aic_gather(x)`` a vector value handed back to the
cube; on the device they are the transfers (halving and re-joining in a
data-parallel region).  The sim has one memory and computes the region
whole, so each returns its operand's values unchanged.  Both are refused
outside a region, and a cube op (``pl.matmul`` and friends) inside one, as
PyPTO refuses them.  The mode is recorded on the enclosing task
(``Scope.hints``: ``("split_aiv", "NONE")``), which the printed program shows.

A ``pl.split_aiv`` loop outside every region is wrapped in a region of its
own (a task), as PyPTO's outliner wraps it in an InCore scope.
"""

from __future__ import annotations

import sys

from ..errors import PtoNotSupported
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


class _DataParallelLane:
    """``aiv_id`` of a data-parallel split: the sim computes the region whole, so it has no value."""

    def __init__(self, mode: SplitMode, loc):
        self._mode, self._loc = mode, loc

    def __repr__(self) -> str:
        return f"<AIV lane of a pl.split_aiv(mode=pl.SplitMode.{self._mode.name}) region>"

    def _refuse(self, *_):
        raise PtoNotSupported(f"{self._loc}: the lane index of a pl.split_aiv(2, mode=pl.SplitMode."
                              f"{self._mode.name}) region: the sim computes a data-parallel region whole (both "
                              f"halves at once), so there is no lane to index; use mode=pl.SplitMode.NONE to divide "
                              f"the work by lane")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __floordiv__ = __mod__ = _refuse
    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __bool__ = __index__ = __int__ = _refuse
    __hash__ = object.__hash__


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
        if self._state == 1:
            self._state = 2
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
        if self.mode is SplitMode.NONE:
            self._lanes = _Lanes(0, 2)
            self._lanes._loc = self._loc
            index = self._lanes._begin(t, frame)
            t.subblock_index = index
            return index
        t.open_block("split_aiv")
        lane = _DataParallelLane(self.mode, self._loc)
        t.subblock_index = lane
        return lane

    def _end(self, frame) -> None:
        t = self._tracer
        t.split_aiv_mode = None
        t.subblock_index = None
        if self.mode is SplitMode.NONE:
            body = t.blocks[-1]
            cube = _cube_ops(body)
            if cube is None:
                self._lanes._end(t, frame)
        else:
            body = t.close_block()
            cube = _cube_ops(body)
            for s in body:
                t.append(s)
        if cube is not None:
            raise compile_error(f"cube op '{cube}' inside a pl.split_aiv region: a region body is AIV work; move "
                                f"the matmul out of the region", self._loc)
        if self._region is not None:
            self._region.__exit__(None, None, None)


def _crossing(op: str, x, lane: str, keep: tuple[str, ...]):
    """``x`` carried to ``lane``'s buffer (a move, unless it is a tensor or already in one of ``keep``)."""
    from ._memory import move
    from ._types import MemorySpace

    t = current(op)
    if getattr(t, "split_aiv_mode", None) is None:
        raise compile_error(f"{op} is the boundary of a pl.split_aiv region: use it inside "
                            f"'for aiv_id in pl.split_aiv(2, mode=...)'", user_loc())
    if not isinstance(x, (Tile, TensorArg)):
        raise compile_error(f"{op} takes a tile or a tensor, got {x!r}", user_loc())
    if isinstance(x, TensorArg) or x.var.type.memory in keep:
        return x
    return move(x, target_memory=MemorySpace(lane))


def aiv_shard(x):
    """Carry a cube value to the AIV lanes of a ``pl.split_aiv`` region: a tile in Mat or Acc moves to Vec.

    The values are unchanged (the sim computes a data-parallel region whole,
    so there is no half to take); a tensor, or a tile already in Vec, is
    returned as it is.
    """
    return _crossing("pl.aiv_shard", x, "Vec", ("Vec",))


def aic_gather(x):
    """Hand a vector value of a ``pl.split_aiv`` region back to the cube: a Vec tile moves to Mat (L1).

    The values are unchanged (both lanes' halves make the whole tile the
    sim computed); a tensor, or a tile outside Vec, is returned as it is.
    """
    return _crossing("pl.aic_gather", x, "Mat", ("Mat", "Left", "Right", "Acc", "Bias"))


def get_subblock_idx():
    """The AIV lane index (0 or 1) of the enclosing ``pl.split_aiv(2, mode=pl.SplitMode.NONE)`` region."""
    t = current("pl.tile.get_subblock_idx")
    index = getattr(t, "subblock_index", None)
    if index is None:
        raise compile_error("pl.tile.get_subblock_idx() is the AIV lane of a pl.split_aiv region; there is none "
                            "here", user_loc())
    return index
