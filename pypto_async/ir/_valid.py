"""Valid regions: which leading box of a tile holds data, op by op.

A tile's ``TileType.valid`` is ``None`` when every element is data, else one
extent per dimension (index expressions: ints, loop indices, integer scalar
parameters).  The elements outside that box are padding, whose values are
unspecified until ``pl.fillpad`` writes them.  The rules are PyPTO's,
restricted to what this compiler can prove:

* a load with ``valid_shape`` reads only that box; unary ops, casts, moves
  and ops with a scalar operand keep their input's region;
* a binary op needs its tile operands to agree on the region (a broadcast
  operand must be fully valid along the broadcast dimension);
* a reduction keeps the region of the dimension it does not reduce, and reads
  the valid region only (as the device's reductions do; ``fillpad`` first to
  reduce the padding too);
* ``fillpad`` makes the tile fully valid; a store writes the region only;
* a slice is valid where its source is, shifted by its offset and cut to its
  window (and within its own ``valid_shape``);
* matmul needs its contracted dimension fully valid; reshape, concat and
  assemble need fully valid operands here.
"""

from __future__ import annotations

from ._diag import compile_error
from ._nodes import IBin, IConst, IRead, IScalar, IVar, Loc, TileType, Var

__all__ = ["extents", "normalize", "is_full", "agree", "require_full", "static_extent", "check_extents"]


def static_extent(e) -> int | None:
    """Return the int value of a constant extent, else None."""
    return e.value if isinstance(e, IConst) else None


def extents(t: TileType) -> tuple:
    """The valid extent of each dimension (the shape where fully valid)."""
    return t.valid if t.valid is not None else tuple(IConst(d) for d in t.shape)


def normalize(shape: tuple[int, ...], valid) -> tuple | None:
    """Return ``valid`` as stored in a TileType: None when it covers the whole shape."""
    if valid is None:
        return None
    valid = tuple(valid)
    if all(static_extent(e) == d for e, d in zip(valid, shape)):
        return None
    return valid


def is_full(t: TileType) -> bool:
    return t.valid is None


def _error(message: str, loc: Loc | None):
    return compile_error(message, loc)


def check_extents(shape: tuple[int, ...], valid, what: str, loc: Loc | None) -> None:
    """Check a requested valid region: one extent per dimension, constants in [0, dim]."""
    if len(valid) != len(shape):
        raise _error(f"{what}: valid_shape has {len(valid)} extents for a {len(shape)}-D tile", loc)
    for d, (e, size) in enumerate(zip(valid, shape)):
        if not isinstance(e, (IConst, IVar, IBin, IScalar, IRead)):  # IRead: an orchestration pl.read
            raise _error(f"{what}: valid extent {e!r} is not an int, a loop index or an integer scalar", loc)
        v = static_extent(e)
        if v is not None and not 0 <= v <= size:
            raise _error(f"{what}: valid extent {v} of dimension {d} is outside [0, {size}]", loc)


def agree(operands: list[TileType], shape: tuple[int, ...], op: str, loc: Loc | None) -> tuple | None:
    """The region of an element-wise result over ``shape`` from its tile operands."""
    if all(is_full(t) for t in operands):
        return None
    out = []
    for d in range(len(shape)):
        chosen = None
        for t in operands:
            k = d - (len(shape) - len(t.shape))
            if k < 0:
                continue
            e = extents(t)[k]
            if t.shape[k] == 1 and shape[d] != 1:  # broadcast along d
                if static_extent(e) != 1:
                    raise _error(f"{op}: a tile broadcast along dimension {d} must be valid there (fillpad it)", loc)
                continue
            if chosen is None:
                chosen = e
            elif chosen != e:
                raise _error(
                    f"{op}: operands disagree on the valid region along dimension {d} "
                    "(fillpad the partial one, or give both the same valid_shape)",
                    loc,
                )
        out.append(chosen if chosen is not None else IConst(shape[d]))
    return normalize(shape, out)


def require_full(v: Var, op: str, loc: Loc | None, dims: tuple[int, ...] | None = None) -> None:
    """Refuse a partially valid operand (along ``dims``, or any dimension)."""
    if v.type.valid is None:
        return
    for d in dims if dims is not None else range(len(v.type.shape)):
        if static_extent(v.type.valid[d]) != v.type.shape[d]:
            raise _error(
                f"{op}: tile %{v.id} is only partially valid (valid_shape); pl.fillpad it first", loc
            )
