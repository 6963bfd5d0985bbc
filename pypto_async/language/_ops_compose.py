"""PyPTO tile ops that are exact compositions of ops the IR already has.

Each is written here as PyPTO's catalog defines it, in terms of existing
nodes, so the code generator, the torch reference (``debug.torch_codegen``)
and the device model need nothing new:

* ``row_expand_expdif(tile, row_vec)``: ``exp(tile - row_vec)`` with the
  ``[rows, 1]`` vector broadcast along each row (the softmax step);
  ``col_expand_expdif`` with a ``[1, cols]`` vector down each column.
* ``fillpad_expand(tile, shape, pad_value)``: a larger tile of ``shape`` whose
  top-left holds the source's valid region and every other element the pad
  value (``PadValue.zero``, ``max``, ``min`` or ``0``, ``math.inf``,
  ``-math.inf``).
* ``set_validshape(tile, valid_rows, valid_cols)``: the same data with a new
  valid region (ints, loop indices or runtime scalars); later stores write
  that box only and ``pl.fillpad`` fills the rest.  A region larger than the
  tile's current one stays cut to it: the elements outside it hold no data.
* ``batch_matmul(lhs, rhs)``: ``[...batch, M, K] @ [...batch, K, N]`` with the
  batch dimensions broadcast as numpy's ``matmul`` does; one ``pl.matmul``
  per batch element (each accumulates as ``pl.matmul`` does), the results
  assembled into ``[...batch, M, N]``.
* ``batch_matmul_acc(acc, lhs, rhs)`` (``pl.tile`` only, as in PyPTO): that
  product added into ``acc`` in place; ``pl.matmul_acc`` of operands of rank
  3 or more is this.
"""

from __future__ import annotations

import itertools
import math

from ..ir._diag import compile_error
from ._layout import col_expand_sub, reshape, row_expand_sub, slice as _slice, tile_assemble
from ._memory import _tile, fillpad, pad_name
from ._ops import exp, full, matmul
from ._tracer import TensorArg, Tile, current, user_loc
from ._types import PadValue

__all__ = ["row_expand_expdif", "col_expand_expdif", "fillpad_expand", "set_validshape", "batch_matmul"]


def row_expand_expdif(tile, row_vec) -> Tile:
    """Return ``exp(tile[i, :] - row_vec[i, 0])`` for every row ``i`` (float tiles)."""
    current("pl.row_expand_expdif")
    return exp(row_expand_sub(tile, row_vec))


def col_expand_expdif(tile, col_vec) -> Tile:
    """Return ``exp(tile[:, j] - col_vec[0, j])`` for every column ``j`` (float tiles)."""
    current("pl.col_expand_expdif")
    return exp(col_expand_sub(tile, col_vec))


def _pad_number(pad: str, dtype):
    if pad == "zero":
        return 0
    if dtype.is_float:
        return math.inf if pad == "max" else -math.inf
    lo, hi = dtype.int_range
    return hi if pad == "max" else lo


def fillpad_expand(tile, shape, pad_value=PadValue.zero) -> Tile:
    """Return a ``shape`` tile: the source's valid region at its top-left, the pad value everywhere else.

    Each dimension of ``shape`` must be at least the source's.  The result
    is fully valid.
    """
    current("pl.fillpad_expand")
    loc = user_loc()
    tl = _tile(tile, "pl.fillpad_expand")
    pad = pad_name(pad_value, "pl.fillpad_expand")
    if pad is None:
        raise compile_error("pl.fillpad_expand: PadValue.null fills nothing; choose zero, max or min", loc)
    shape = tuple(shape)
    if len(shape) != len(tl.shape) or any(not isinstance(d, int) or isinstance(d, bool) for d in shape):
        raise compile_error(f"pl.fillpad_expand: shape must be {len(tl.shape)} ints, one per dimension of the "
                            f"{list(tl.shape)} source, got {list(shape)}", loc)
    if any(d < s for d, s in zip(shape, tl.shape)):
        raise compile_error(f"pl.fillpad_expand: each dimension of shape {list(shape)} must be at least the "
                            f"source's {list(tl.shape)}", loc)
    src = fillpad(tl, pad_value) if tl.var.type.valid is not None else tl
    if shape == tuple(tl.shape):
        return src
    target = full(shape, _pad_number(pad, tl.dtype), tl.dtype)
    return tile_assemble(target, src, [0] * len(shape))


def set_validshape(tile, valid_rows, valid_cols) -> Tile:
    """Return the 2-D tile with valid region ``[valid_rows, valid_cols]``; no data moves.

    ``valid_rows`` and ``valid_cols`` are ints (at most the tile's extents),
    loop indices or runtime scalars.  A tensor is not taken here: give a
    tensor's valid extent where it is loaded (``pl.load(..., valid_shapes=)``).
    """
    current("pl.set_validshape")
    if isinstance(tile, TensorArg):
        raise compile_error("pl.set_validshape of a tensor is not supported here; give the extent where the "
                            "tensor is loaded (pl.load(..., valid_shapes=[rows, cols]))", user_loc())
    tl = _tile(tile, "pl.set_validshape")
    if len(tl.shape) != 2:
        raise compile_error(f"pl.set_validshape needs a 2-D tile, got {list(tl.shape)}", user_loc())
    for what, v, d in (("valid_rows", valid_rows, tl.shape[0]), ("valid_cols", valid_cols, tl.shape[1])):
        if isinstance(v, int) and not isinstance(v, bool) and not 0 <= v <= d:
            raise compile_error(f"pl.set_validshape: {what}={v} is outside [0, {d}] for a {list(tl.shape)} tile",
                                user_loc())
    return _slice(tl, list(tl.shape), [0, 0], valid_shape=[valid_rows, valid_cols])


def batch_matmul(lhs, rhs) -> Tile:
    """Return the batched product of two tiles of rank 2 or more (PyPTO's ``pl.batch_matmul``).

    ``lhs`` is ``[...batch, M, K]``, ``rhs`` ``[...batch, K, N]``; the batch
    dimensions broadcast as numpy's (a missing or size-1 one repeats), and
    the result is ``[...batch, M, N]`` in the dtype ``pl.matmul`` gives.
    Tile operands only, as in PyPTO.
    """
    current("pl.batch_matmul")
    loc = user_loc()
    if isinstance(lhs, TensorArg) or isinstance(rhs, TensorArg):
        raise compile_error("pl.batch_matmul takes tile operands only; load the tensors first", loc)
    a, b = _tile(lhs, "pl.batch_matmul", "lhs"), _tile(rhs, "pl.batch_matmul", "rhs")
    if len(a.shape) < 2 or len(b.shape) < 2:
        raise compile_error(f"pl.batch_matmul needs tiles of rank 2 or more, got {list(a.shape)} and "
                            f"{list(b.shape)}", loc)
    (m, k), (k2, n) = a.shape[-2:], b.shape[-2:]
    if k != k2:
        raise compile_error(f"pl.batch_matmul: inner dimensions differ: {list(a.shape)} @ {list(b.shape)}", loc)
    nb = max(len(a.shape), len(b.shape)) - 2
    ba = (1,) * (nb - len(a.shape) + 2) + tuple(a.shape[:-2])
    bb = (1,) * (nb - len(b.shape) + 2) + tuple(b.shape[:-2])
    batch = []
    for x, y in zip(ba, bb):
        if x != y and 1 not in (x, y):
            raise compile_error(f"pl.batch_matmul: batch dimensions {list(a.shape[:-2])} and {list(b.shape[:-2])} "
                                "do not broadcast (equal, or 1)", loc)
        batch.append(max(x, y))
    if not batch:
        return matmul(a, b)

    def matrix(t, bdims, at, rows, cols):
        lead = len(t.shape) - 2
        idx = [i if d > 1 else 0 for i, d in zip(at, bdims)][nb - lead:] if lead else []
        window = _slice(t, [1] * lead + [rows, cols], idx + [0, 0])
        return reshape(window, [rows, cols])

    out = None
    for at in itertools.product(*(range(d) for d in batch)):
        c = matmul(matrix(a, ba, at, m, k), matrix(b, bb, at, k, n))
        if out is None:
            out = full(tuple(batch) + (m, n), 0, c.dtype)
        out = tile_assemble(out, reshape(c, [1] * nb + [m, n]), list(at) + [0, 0])
    return out


def transpose_trailing(tile) -> Tile:
    """Return ``tile`` (rank 2 or more) with its two trailing axes swapped (a matmul's ``a_trans`` / ``b_trans``)."""
    from ._layout import transpose

    if len(tile.shape) == 2:
        return transpose(tile)
    *batch, r, c = tile.shape
    nb = len(batch)
    out = None
    for at in itertools.product(*(range(d) for d in batch)):
        m = transpose(reshape(_slice(tile, [1] * nb + [r, c], list(at) + [0, 0]), [r, c]))
        if out is None:
            out = full(tuple(batch) + (c, r), 0, m.dtype)
        out = tile_assemble(out, reshape(m, [1] * nb + [c, r]), list(at) + [0, 0])
    return out


def batch_matmul_acc(acc, lhs, rhs) -> Tile:
    """Add the batched product ``lhs @ rhs`` into ``acc`` in place and return ``acc`` (``pl.tile.batch_matmul_acc``).

    ``lhs`` and ``rhs`` broadcast their batch dimensions as for
    :func:`batch_matmul`; the result's shape must be ``acc``'s (the
    accumulator is not broadcast), its dtype ``acc``'s.  The product is
    computed as :func:`batch_matmul` does, then added to ``acc``.
    """
    from ..ir._nodes import Update
    from ._ops import add

    t = current("pl.tile.batch_matmul_acc")
    loc = user_loc()
    if any(isinstance(x, TensorArg) for x in (acc, lhs, rhs)):
        raise compile_error("pl.tile.batch_matmul_acc takes tile operands only; load the tensors first", loc)
    c = _tile(acc, "pl.tile.batch_matmul_acc", "acc")
    prod = batch_matmul(lhs, rhs)
    if tuple(prod.shape) != tuple(c.shape):
        raise compile_error(f"pl.tile.batch_matmul_acc: the product is {list(prod.shape)} but acc is "
                            f"{list(c.shape)} (acc's batch dimensions are not broadcast)", loc)
    if prod.dtype != c.dtype:
        raise compile_error(f"pl.tile.batch_matmul_acc: the product accumulates in {prod.dtype.name} but acc is "
                            f"{c.dtype.name}", loc)
    t.append(Update(c.var, add(c, prod).var, loc))
    return c
