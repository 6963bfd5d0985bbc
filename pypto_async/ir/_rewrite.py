"""Rewriting statement trees: which tiles a body reads, and renaming the tiles it reads."""

from __future__ import annotations

import dataclasses

from ._nodes import Assign, Loc, TileType, Var
from ._passes import _stmt_inputs

__all__ = ["reads", "substitute"]


def reads(body) -> set[int]:
    """Return the ids of the tiles any statement of ``body`` (nested ones too) reads or updates."""
    out: set[int] = set()
    for s in body:
        out.update(v.id for v in _stmt_inputs(s))
        out |= reads(getattr(s, "body", ()) or getattr(s, "members", ()))
    return out


def _subst(x, mapping: dict[int, Var]):
    if isinstance(x, Var):
        return mapping.get(x.id, x)
    if isinstance(x, tuple):
        new = tuple(_subst(e, mapping) for e in x)
        return x if all(a is b for a, b in zip(new, x)) else new
    if isinstance(x, (TileType, Loc)) or not dataclasses.is_dataclass(x):
        return x
    changes = {}
    for f in dataclasses.fields(x):
        if isinstance(x, Assign) and f.name == "var":
            continue  # a definition, not a read
        old = getattr(x, f.name)
        new = _subst(old, mapping)
        if new is not old:
            changes[f.name] = new
    return dataclasses.replace(x, **changes) if changes else x


def substitute(body: tuple, mapping: dict[int, Var]) -> tuple:
    """Return ``body`` with every read (and in-place update) of tile ``id`` made a read of ``mapping[id]``."""
    return tuple(_subst(s, mapping) for s in body)
