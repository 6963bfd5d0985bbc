"""PyPTO's index, sort and generator ops: argmax/argmin, sort32/mrgsort, tri, arange (ci), random, create_l1.

* ``pl.row_argmax(t, tmp_tile)`` (``row_argmin``, ``col_argmax``,
  ``col_argmin``): the INT32 column (row) index of each row's (column's)
  maximum or minimum over the tile's valid region, ``[rows, 1]``
  (``[1, cols]``); the first one on a tie, and a NaN counts as the
  extremum (as ``torch.argmax``).  FP16 or FP32 tiles.
* ``pl.sort32(src, idx)``: each group of 32 elements of a row sorted
  descending (stably: equal values keep their order), written as
  ``(value, index)`` pairs, so the last dimension doubles: the value at
  column ``2k``, the matching ``idx`` element's bits at ``2k + 1`` (an FP32
  tile holds the index's 32 bits as an FP32 bit pattern, read back with
  ``.view(int32)``; an FP16 tile its low 16 bits).
* ``pl.mrgsort(src, block_len=n)``: of a tile of such pairs, each group of
  four consecutive sorted runs of ``n`` columns (a multiple of 64) merged
  into one run of ``4 n``; ``pl.mrgsort(a, b[, c[, d]], tmp=t)`` merges two
  to four sorted tiles row by row (their last dimensions add).
* ``pl.tri(diagonal, shape, valid_shape=None, dtype=pl.INT32, upper=False)``:
  1 where ``j <= i + diagonal`` (``upper``: ``j >= i + diagonal``), else 0;
  only the valid region is data.
* ``pl.arange(start, shape, dtype=pl.INT32, descending=False)`` (PyPTO's
  ``tensor.ci``): ``start + j`` (``start - j``) along the last dimension,
  the same in every row.
* ``pl.random(key0, key1, counter0, ..., counter3, shape, dtype=pl.UINT32,
  rounds=10)``: counter-based random 32-bit values (Philox4x32 with 7 or 10
  rounds): the element at row-major position ``p`` is word ``p % 4`` of the
  cipher of counter ``(counter0..counter3) + p // 4`` under key ``(key0,
  key1)``, so the same key and counter give the same tile.  ``pl.tile.random``
  also takes ``valid_shape``.
* ``pl.create_l1(shape, dtype, transpose=False)``: a zero-filled tile in L1
  (``pl.Mem.Mat``), e.g. a matmul operand filled on chip.

Scalar arguments (``start``, ``diagonal``, the keys, ``block_len``) are ints,
integer ``pl.Scalar`` parameters or runtime scalars (``pl.tensor.read``).
"""

from __future__ import annotations

from .._dtypes import INT32, UINT32, as_dtype
from ..errors import PtoArgumentError
from ..ir._diag import compile_error
from ..ir._nodes import Const, Full, Generate, Order
from ._memory import _tile, record, valid_extents
from ._tracer import TensorArg, Tile, current, to_index, user_loc

__all__ = [
    "row_argmax",
    "row_argmin",
    "col_argmax",
    "col_argmin",
    "sort32",
    "mrgsort",
    "tri",
    "arange",
    "random",
    "create_l1",
]


def _dtype(dtype, op: str):
    try:
        return as_dtype(dtype)
    except PtoArgumentError as exc:
        raise compile_error(f"{op}: {exc}", user_loc()) from None


def _int(x, op: str, what: str):
    """An int, an integer scalar parameter or a runtime scalar as an index expression."""
    if isinstance(x, bool) or isinstance(x, (Tile, TensorArg)) or (isinstance(x, float) and not x.is_integer()):
        raise compile_error(f"{op}: {what} must be an integer (an int, an integer pl.Scalar or a pl.read "
                            f"scalar), got {x!r}", user_loc())
    if isinstance(x, float):
        x = int(x)
    return to_index(x, f"{op}: {what}")


def _shape(shape, op: str) -> tuple:
    if not isinstance(shape, (list, tuple)):
        raise compile_error(f"{op}: shape must be a list of ints, got {shape!r}", user_loc())
    shape = tuple(shape)
    if not shape or any(isinstance(d, bool) or not isinstance(d, int) or d <= 0 for d in shape):
        raise compile_error(f"{op}: shape must be positive ints, got {list(shape)}", user_loc())
    return shape


# ---- argmax / argmin -----------------------------------------------------------------------


def _arg(op: str, x, tmp_tile) -> Tile:
    current(f"pl.{op}")
    if isinstance(x, TensorArg) and tmp_tile is not None:
        raise compile_error(f"pl.{op}: tmp_tile is the tile-level scratch; a tensor input takes none", user_loc())
    t = _tile(x, f"pl.{op}", "input")
    if tmp_tile is not None:  # PyPTO's scratch tile: the sim needs none, but one given must fit
        tmp = _tile(tmp_tile, f"pl.{op}", "tmp_tile")
        if tmp.dtype != t.dtype or len(tmp.shape) != len(t.shape):
            raise compile_error(f"pl.{op}: tmp_tile must have the input's dtype and rank: got {tmp.var.type}, "
                                f"input {t.var.type}", user_loc())
    return record(Order(op, (t.var,)), f"pl.{op}")


def row_argmax(input, tmp_tile=None) -> Tile:  # noqa: A002 - PyPTO's name
    """The INT32 column index of each row's maximum over the valid region, ``[rows, 1]`` (first on a tie)."""
    return _arg("row_argmax", input, tmp_tile)


def row_argmin(input, tmp_tile=None) -> Tile:  # noqa: A002
    """The INT32 column index of each row's minimum over the valid region, ``[rows, 1]`` (first on a tie)."""
    return _arg("row_argmin", input, tmp_tile)


def col_argmax(input, tmp_tile=None) -> Tile:  # noqa: A002
    """The INT32 row index of each column's maximum over the valid region, ``[1, cols]`` (first on a tie)."""
    return _arg("col_argmax", input, tmp_tile)


def col_argmin(input, tmp_tile=None) -> Tile:  # noqa: A002
    """The INT32 row index of each column's minimum over the valid region, ``[1, cols]`` (first on a tie)."""
    return _arg("col_argmin", input, tmp_tile)


# ---- sort32 / mrgsort ----------------------------------------------------------------------


def sort32(src, idx) -> Tile:
    """Sort each 32-element group of every row descending, as ``(value, index)`` pairs (last dimension doubled).

    ``src`` is FP16 or FP32, ``idx`` a UINT32 tile of its shape (PyPTO
    initialises it ``[0, 1, ..., 31]`` per group); equal values keep their
    order.  The value goes to column ``2k``, the ``idx`` element's bits to
    ``2k + 1``.
    """
    current("pl.sort32")
    s, i = _tile(src, "pl.sort32", "src"), _tile(idx, "pl.sort32", "idx")
    return record(Order("sort32", (s.var, i.var)), "pl.sort32")


def _mrgsort(src0, src1, src2, src3, tmp, exhausted, block_len, op: str, tile_level: bool) -> Tile:
    current(op)
    loc = user_loc()
    if not isinstance(exhausted, bool):
        raise compile_error(f"{op}: exhausted must be a bool, got {exhausted!r}", loc)
    others = [s for s in (src1, src2, src3) if s is not None]
    if block_len is not None:
        if others or tmp is not None or exhausted:
            raise compile_error(f"{op}: block_len= (one tile of sorted runs) and src1, ... / tmp / exhausted "
                                f"(merging 2-4 tiles) are two forms; give one", loc)
        s = _tile(src0, op, "src0")
        return record(Order("mrgsort", (s.var,), _int(block_len, op, "block_len")), op)
    if not others:
        raise compile_error(f"{op} needs block_len= (one tile of sorted runs) or two to four sorted tiles "
                            f"(src0, src1, ...)", loc)
    if any(a is None for a in (src1, src2, src3)[:len(others)]):
        raise compile_error(f"{op}: give the sorted tiles in order (src1 before src2 before src3)", loc)
    srcs = [_tile(s, op, f"src{k}") for k, s in enumerate([src0, *others])]
    if tmp is not None:
        if not tile_level:
            raise compile_error(f"{op}: tmp is the tile-level scratch; a tensor-level merge takes none", loc)
        t = _tile(tmp, op, "tmp")
        cols = sum(s.shape[-1] for s in srcs)
        if tuple(t.shape) != tuple(srcs[0].shape[:-1]) + (cols,):
            raise compile_error(f"{op}: tmp {list(t.shape)} must have the merged shape "
                                f"{list(srcs[0].shape[:-1]) + [cols]}", loc)
    return record(Order("mrgsort_merge", tuple(s.var for s in srcs)), op)


def mrgsort(src0, src1=None, src2=None, src3=None, tmp=None, *, exhausted=False, block_len=None) -> Tile:
    """Merge sorted runs of ``(value, index)`` pairs (descending), as ``pl.sort32`` writes them.

    ``mrgsort(src, block_len=n)``: each group of four consecutive runs of
    ``n`` columns (a positive multiple of 64) merges into one of ``4 n``.
    ``mrgsort(a, b[, c[, d]], tmp=t)``: two to four sorted tiles merge row
    by row into one whose last dimension is their sum (``tmp``, PyPTO's
    tile-level scratch of that shape, is optional here).  On a tie the
    earlier run's pair comes first.  ``exhausted`` is PyPTO's hint for the
    device's merge; every pair is merged here.
    """
    tile_level = not isinstance(src0, TensorArg)
    return _mrgsort(src0, src1, src2, src3, tmp, exhausted, block_len, "pl.mrgsort", tile_level)


def tile_mrgsort(src0, src1=None, src2=None, src3=None, tmp=None, exhausted=False, *, block_len=None) -> Tile:
    """``pl.tile.mrgsort``: as :func:`mrgsort` (``exhausted`` may also be the sixth positional argument)."""
    return _mrgsort(src0, src1, src2, src3, tmp, exhausted, block_len, "pl.tile.mrgsort", True)


def tensor_mrgsort(src0, src1=None, src2=None, src3=None, *, exhausted=False, block_len=None) -> Tile:
    """``pl.tensor.mrgsort``: as :func:`mrgsort`, without the scratch tile."""
    return _mrgsort(src0, src1, src2, src3, None, exhausted, block_len, "pl.tensor.mrgsort", False)


# ---- generators ------------------------------------------------------------------------------


def tri(diagonal, shape, valid_shape=None, dtype=INT32, upper=False) -> Tile:
    """A triangular mask: 1 where ``j <= i + diagonal`` (``upper``: ``j >= i + diagonal``), else 0.

    ``diagonal`` 0 includes the main diagonal; positive moves the boundary
    right, negative left.  ``valid_shape`` (each extent at most the shape's)
    marks the region written; the rest is padding.
    """
    op = "pl.tri"
    current(op)
    if not isinstance(upper, bool):
        raise compile_error(f"{op}: upper must be a bool, got {upper!r}", user_loc())
    shape = _shape(shape, op)
    if len(shape) != 2:
        raise compile_error(f"{op} needs a 2-D shape, got {list(shape)}", user_loc())
    d = _dtype(dtype, op)
    expr = Generate("tri", shape, d, (_int(diagonal, op, "diagonal"),), int(upper), valid_extents(valid_shape, op))
    return record(expr, op)


def arange(start, shape, dtype=INT32, descending=False) -> Tile:
    """Consecutive integers along the last dimension: ``start + j`` (``descending``: ``start - j``).

    PyPTO's ``tensor.ci`` / ``tile.ci``; ``dtype`` INT16, INT32, UINT16 or UINT32.  Every
    row holds the same sequence (PyPTO fills the first; give ``[1, N]``).
    """
    op = "pl.arange"
    current(op)
    if not isinstance(descending, bool):
        raise compile_error(f"{op}: descending must be a bool, got {descending!r}", user_loc())
    shape = _shape(shape, op)
    d = _dtype(dtype, op)
    return record(Generate("ci", shape, d, (_int(start, op, "start"),), int(descending)), op)


ci = arange


def _random(op: str, seeds, shape, valid_shape, dtype, rounds) -> Tile:
    current(op)
    if isinstance(rounds, bool) or rounds not in (7, 10):
        raise compile_error(f"{op}: rounds must be 7 or 10, got {rounds!r}", user_loc())
    names = ("key0", "key1", "counter0", "counter1", "counter2", "counter3")
    args = tuple(_int(v, op, n) for v, n in zip(seeds, names))
    shape = _shape(shape, op)
    d = _dtype(dtype, op)
    return record(Generate("random", shape, d, args, rounds, valid_extents(valid_shape, op)), op)


def random(key0, key1, counter0, counter1, counter2, counter3, shape, dtype=UINT32, rounds=10) -> Tile:
    """Counter-based random 32-bit values (Philox4x32, ``rounds`` 7 or 10); INT32 or UINT32.

    The element at row-major position ``p`` is word ``p % 4`` of the cipher
    of the 128-bit counter ``(counter0, ..., counter3)`` plus ``p // 4``
    under the 64-bit key ``(key0, key1)``: the same key and counter give
    the same tile, and each value is uniform over the dtype's range.
    """
    return _random("pl.random", (key0, key1, counter0, counter1, counter2, counter3), shape, None, dtype, rounds)


def tile_random(key0, key1, counter0, counter1, counter2, counter3, shape, valid_shape=None, dtype=UINT32,
                rounds=10) -> Tile:
    """``pl.tile.random``: as :func:`random`, with ``valid_shape`` marking the region written."""
    return _random("pl.tile.random", (key0, key1, counter0, counter1, counter2, counter3), shape, valid_shape,
                   dtype, rounds)


# ---- L1 ------------------------------------------------------------------------------------------


def create_l1(shape, dtype, transpose=False) -> Tile:
    """A zero-filled ``shape`` tile in L1 (``pl.Mem.Mat``): an on-chip buffer a kernel fills, e.g. a matmul operand.

    ``transpose`` is PyPTO's choice of the L1 fractal layout (for a
    ``b_trans`` operand); the sim has no layouts, and the tile is ``shape``
    either way.
    """
    op = "pl.create_l1"
    current(op)
    if not isinstance(transpose, bool):
        raise compile_error(f"{op}: transpose must be a bool, got {transpose!r}", user_loc())
    shape = _shape(shape, op)
    d = _dtype(dtype, op)
    return record(Full(shape, Const(0, d), d, "Mat"), op)

