"""Tiles that leave their region: a value one task computes and a later task reads.

PyPTO outlines each ``pl.at`` region into an InCore function; a value the
region defines and the code after it reads becomes one of the function's
outputs, a tensor the next task takes as an input::

    with pl.at(level=pl.Level.CORE_GROUP, name_hint="gate"):
        gate = pl.matmul(x, w)                  # a tile of the "gate" task
    with pl.at(level=pl.Level.CORE_GROUP, name_hint="silu"):
        y = pl.mul(gate, pl.recip(...))         # read by the "silu" task

Here a region's tiles live on the core while the task runs, so the value
goes through an intermediate tensor: when a tile defined at the top level of
a closed region is first used outside it, the region gets a store of its
final value into a new ``pl.create_tensor`` intermediate, and each later use
loads it from there (the task graph orders the two tasks by that tensor).
Only tiles that are used elsewhere are stored, and each once.

A use after the loop around the defining region has closed (the value of
its last iteration) is refused: the region's body is already sealed in the
loop by then.
"""

from __future__ import annotations

import dataclasses

from ..ir._diag import compile_error
from ..ir._nodes import Assign, IConst, Param, Store
from .._signature import INOUT
from ._tracer import Tile, TensorArg, user_loc

__all__ = ["region_closed", "region_opened", "escaped"]


def region_opened(t, task: int) -> None:
    """Note that region ``task`` is being traced (a tile it defines is its own while it is open)."""
    t.open_region = task


def region_closed(t, task: int) -> None:
    """Record the tiles the region just appended (the last statement of the open block) defines at its top level."""
    t.open_region = None
    block = t.blocks[-1]
    index = len(block) - 1
    defs = getattr(t, "region_defs", None)
    if defs is None:
        defs = t.region_defs = {}
    for s in block[index].body:
        if isinstance(s, Assign):
            defs[s.var.id] = (task, block, index)


def escaped(t, x: Tile):
    """``x`` as a tensor when it is a tile of another, closed region (see the module doc); else None."""
    defs = getattr(t, "region_defs", None)
    if not defs or x.var.id not in defs:
        return None
    task, block, index = defs[x.var.id]
    if task == getattr(t, "open_region", None):
        return None
    stored = getattr(t, "escaped_tiles", None)
    if stored is None:
        stored = t.escaped_tiles = {}
    if x.var.id in stored:
        return stored[x.var.id]
    if not any(b is block for b in t.blocks):
        raise compile_error(f"tile {x!r} is computed in a region inside a loop that has ended; use it inside that "
                            f"loop, or store it to a pl.create_tensor tensor in the region", user_loc())
    ty = x.var.type
    name = f"tensor{len(t.scratch)}"
    while name in t.params:
        name = f"{name}_"
    p = Param(name, INOUT, tuple(ty.shape), ty.dtype)
    t.params[name] = p
    t.scratch.append(p)
    scope = block[index]
    store = Store(x.var, name, (IConst(0),) * len(ty.shape), scope.loc)
    block[index] = dataclasses.replace(scope, body=tuple(scope.body) + (store,))
    out = stored[x.var.id] = TensorArg(p)
    return out
