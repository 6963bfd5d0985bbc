"""Bounds: the range an index expression takes, and windows that must lie inside their tensor or tile."""

from __future__ import annotations

from .._scalars import is_int
from ._diag import compile_error
from ._nodes import COMPARE_OPS, IBin, IConst, IRead, IScalar, IVar, Loc
from ._valid import static_extent

__all__ = ["index_range", "check_window", "mentions_runtime", "RUNTIME"]

#: The range of a runtime scalar (``pl.read``, a merged ``if`` name, a ``pl.range`` over one) in ``ranges``.
RUNTIME = None



def index_range(e, ranges: dict[str, tuple[int, int]], loc: Loc | None, *, runtime_ok: bool = False):
    """Return the inclusive (min, max) an index expression takes.

    ``ranges`` maps each loop / block index name to its inclusive range, or
    to :data:`RUNTIME` for a runtime scalar.  With ``runtime_ok`` an
    expression over a runtime scalar gives ``None`` (its bounds are checked
    when the kernel runs); otherwise it is a compile error.
    """
    if runtime_ok and _mentions_runtime(e, ranges):
        return None
    if isinstance(e, IConst):
        return e.value, e.value
    if isinstance(e, IVar):
        if e.name not in ranges:
            raise compile_error(f"index {e.name} used outside its loop", loc)
        if ranges[e.name] is RUNTIME:
            raise compile_error(f"{e.name} is a runtime scalar (pl.read, or a pl.range over one): its value is "
                                f"unknown at compile time, so it cannot be used here", loc)
        return ranges[e.name]
    if isinstance(e, IRead):
        raise compile_error(f"pl.read({e.param}, ...) is a runtime scalar: its value is unknown at compile time, "
                            f"so it cannot be used here", loc)
    if isinstance(e, IBin) and e.op in COMPARE_OPS:
        index_range(e.a, ranges, loc)
        index_range(e.b, ranges, loc)
        return 0, 1
    if isinstance(e, IBin):
        alo, ahi = index_range(e.a, ranges, loc)
        blo, bhi = index_range(e.b, ranges, loc)
        if e.op == "+":
            return alo + blo, ahi + bhi
        if e.op == "-":
            return alo - bhi, ahi - blo
        if e.op == "*":
            c = (alo * blo, alo * bhi, ahi * blo, ahi * bhi)
            return min(c), max(c)
        if e.op == "min":
            return min(alo, blo), min(ahi, bhi)
        if e.op == "max":
            return max(alo, blo), max(ahi, bhi)
        if e.op in ("//", "%") and blo == bhi and blo > 0:
            if e.op == "//":
                return alo // blo, ahi // blo
            if alo >= 0:
                return (alo % blo, ahi % blo) if ahi - alo < blo and alo % blo <= ahi % blo else (0, blo - 1)
        raise compile_error(f"cannot bound index expression with {e.op!r} (divide by a positive constant only)", loc)
    if isinstance(e, IScalar):
        raise compile_error(
            f"scalar parameter {e.param!r} cannot be an offset: its value is unknown at compile time "
            "(offsets are ints and loop indices; a scalar may be a valid_shape extent)",
            loc,
        )
    raise compile_error(f"offsets must be ints or loop indices, got {e!r}", loc)


def _mentions_runtime(e, ranges) -> bool:
    if isinstance(e, (IRead, IScalar)):  # a pl.read value, a scalar parameter: known when the kernel runs
        return True
    if isinstance(e, IVar):
        return e.name in ranges and ranges[e.name] is RUNTIME
    if isinstance(e, IBin):
        return _mentions_runtime(e.a, ranges) or _mentions_runtime(e.b, ranges)
    return False


def mentions_runtime(e, ranges) -> bool:
    """Whether an index expression depends on a runtime scalar."""
    return _mentions_runtime(e, ranges)


def check_window(kind: str, name: str, dims, offsets, shape, valid, ranges, loc: Loc | None, what: str,
                 runtime_ok: bool | None = None) -> None:
    """Check that ``[offsets, offsets + extent)`` lies inside ``dims`` for every index value.

    The extent is the valid extent where one is given and constant (a window
    may overhang its source past the valid region), else the tile's shape.  A
    runtime valid extent is checked by the kernel when it runs, as is a
    runtime offset into a tensor (or, with ``runtime_ok``, into a tile).
    """
    if len(offsets) != len(dims) or len(shape) != len(dims):
        raise compile_error(
            f"{what} {name!r}: {kind} has rank {len(dims)}, but got {len(offsets)} offsets "
            f"and a {len(shape)}-D tile",
            loc,
        )
    for d, (off, size, dim) in enumerate(zip(offsets, shape, dims)):
        if not is_int(size) or size <= 0:
            raise compile_error(f"tile shape must be positive ints, got {list(shape)}", loc)
        r = index_range(off, ranges, loc, runtime_ok=kind == "tensor" if runtime_ok is None else runtime_ok)
        if r is None:
            continue  # a runtime offset into a tensor: the kernel checks the window when it runs
        lo, hi = r
        if valid is not None:
            size = static_extent(valid[d])
            if size is None:  # a runtime extent: only the offset is checked here
                size = 0
        if lo < 0 or hi + size > dim:
            raise compile_error(
                f"{what} window outside {kind} {name!r}: dimension {d} spans "
                f"[{lo}, {hi + size}) but the {kind} has {dim} (shape {list(dims)})",
                loc,
            )
