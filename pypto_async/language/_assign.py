"""Subscript assignment into a tensor: ``out[:] = expr``, ``out[r0:r1, c0:c1] = expr``.

PyPTO lowers a subscript assignment to ``assemble`` of the value into the
tensor.  Here the value is a tile (a tensor, or a window of one, is loaded
whole first, as every tensor-level op does) and the assignment is the store
of that tile into the window the subscript names, so it is checked as a
store is: a writable tensor of the value's dtype, inside its bounds.
"""

from __future__ import annotations

import ctypes
import sys

from ..errors import PtoCompileError
from ..ir._diag import compile_error
from ._tracer import TensorArg, Tile, current, user_loc

__all__ = ["assign_window", "rebind_tile"]


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


def rebind_tile(t: Tile, key, value, frame) -> None:
    """``dst[key] = value`` on a tile: ``dst = pl.assemble(dst, value, offsets)``, rebinding ``dst`` in ``frame``.

    PyPTO's parser rewrites the statement into that assignment; here the
    assembled tile (a new value, as ``pl.tile.assemble`` gives) replaces the
    tile under the one local name of ``frame`` that holds it, so a later read
    of the name, or a loop carrying it, sees the write.
    """
    current("tile[...] = value")
    loc = user_loc()
    from ._layout import tile_assemble
    from ._memory import as_tile
    from ._program import slice_box

    what = f"tile[{_key_text(key)}] = ..."
    offsets, shape = slice_box(t.shape, key, what, loc)
    src = as_tile(value)
    if not isinstance(src, Tile):
        raise compile_error(f"{what}: the value must be a tile (or a tensor), got {value!r}", loc)
    if tuple(src.shape) != tuple(shape):
        raise compile_error(f"{what}: the value's shape {list(src.shape)} is not the window's {list(shape)}", loc)
    if src.dtype != t.dtype:
        raise compile_error(f"{what}: the value's dtype {src.dtype.name} is not the tile's {t.dtype.name} "
                            f"(pl.cast it first)", loc)
    names = [n for n, v in frame.f_locals.items() if v is t]
    if len(names) != 1:
        held = "no local name" if not names else f"the names {names}"
        raise compile_error(f"{what}: the tile is held by {held} of the function, so the subscript write has no "
                            f"one name to rebind; write dst = pl.assemble(dst, value, offsets)", loc)
    new = tile_assemble(t, src, offsets)
    _rebind_local(frame, names[0], new)


def _rebind_local(frame, name: str, value) -> None:
    """Bind ``name`` to ``value`` in ``frame``, a function's frame (its fast locals) or a module's."""
    local = frame.f_locals  # before PEP 667 (3.13) each read of f_locals refreshes it from the fast locals
    local[name] = value
    if sys.version_info < (3, 13) and local is not frame.f_globals:
        # The snapshot is written back to the fast locals.
        ctypes.pythonapi.PyFrame_LocalsToFast(ctypes.py_object(frame), ctypes.c_int(0))
