"""Subscript assignment into a tensor: ``out[:] = expr``, ``out[r0:r1, c0:c1] = expr``.

PyPTO lowers a subscript assignment to ``assemble`` of the value into the
tensor.  Here the value is a tile (a tensor, or a window of one, is loaded
whole first, as every tensor-level op does) and the assignment is the store
of that tile into the window the subscript names, so it is checked as a
store is: a writable tensor of the value's dtype, inside its bounds.
"""

from __future__ import annotations

from ..errors import PtoCompileError
from ..ir._diag import compile_error
from ._tracer import TensorArg, Tile, current, user_loc

__all__ = ["assign_window"]


def _key_text(key) -> str:
    def one(k):
        if isinstance(k, slice):
            a = "" if k.start is None else _bound_text(k.start)
            b = "" if k.stop is None else _bound_text(k.stop)
            return f"{a}:{b}"
        return _bound_text(k)

    return ", ".join(one(k) for k in (key if isinstance(key, tuple) else (key,)))


def _bound_text(x) -> str:
    return str(x) if isinstance(x, int) else repr(x)


def assign_window(t: TensorArg, key, value) -> None:
    """Store ``value`` into the window ``t[key]`` (the body of ``TensorArg.__setitem__``)."""
    from ._memory import as_tile, store
    from ._program import window

    current(f"{t.name}[...] =")
    loc = user_loc()
    what = f"{t.name}[{_key_text(key)}] = ..."
    tile = as_tile(value)
    if not isinstance(tile, Tile):
        raise compile_error(f"{what}: the value must be a tile or a tensor, got {value!r} "
                            f"(fill a tile with pl.full to store a number)", loc)
    try:
        w = window(t, key)
    except PtoCompileError:
        offsets = _overhang(t, key, tile, what, loc)
        if offsets is None:
            raise
        return store(tile, offsets, t)  # the store checks that the tile's valid box lies inside
    if tuple(tile.shape) != tuple(w.shape):
        raise compile_error(f"{what}: the value is {tile.dtype.name}{list(tile.shape)} but the window is "
                            f"{list(w.shape)}", loc)
    if tile.dtype != t.dtype:
        raise compile_error(f"{what}: the value is {tile.dtype.name} but {t.name!r} is {t.dtype.name} "
                            f"(cast the value with pl.cast)", loc)
    store(tile, [0] * len(w.shape), w)


def _overhang(t: TensorArg, key, tile: Tile, what: str, loc):
    """The window's offsets when it overhangs ``t`` but the partially valid ``tile`` only writes inside it.

    As a store, a subscript assignment writes the value's valid box only (PyPTO's lane 1 of an odd
    ``pl.split_aiv`` half: ``out[9:18] = shard`` of a 17-row tensor, 8 rows valid); ``None`` otherwise.
    """
    from ._program import _bound, _extent

    if tile.var.type.valid is None:
        return None
    key = key if isinstance(key, tuple) else (key,)
    if len(key) != len(t.shape) or not all(isinstance(k, slice) and k.step in (None, 1) for k in key):
        return None
    offsets = []
    for d, k in enumerate(key):
        start = _bound(0 if k.start is None else k.start, what, loc)
        stop = _bound(t.shape[d] if k.stop is None else k.stop, what, loc)
        if _extent(start, stop, what, loc) != tile.shape[d]:
            return None
        offsets.append(k.start if k.start is not None else 0)
    return offsets
