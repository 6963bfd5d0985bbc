"""``pl.tile``: the tile-level spellings of PyPTO's ops.

``pl.tile.assemble(target, source, offsets)`` writes a tile into a tile (the
top-level ``pl.assemble`` writes into a tensor); the rest are the same ops
as at top level, under their ``pl.tile.*`` names.
"""

from ._layout import concat, reshape, slice  # noqa: A004
from ._layout import tile_assemble as assemble
from ._memory import create_tile, fillpad, load, move, store
from ._ops import (
    abs,  # noqa: A004
    add,
    adds,
    divs,
    maxs,
    mins,
    muls,
    subs,
    cast,
    col_max,
    col_min,
    col_sum,
    div,
    exp,
    full,
    log,
    matmul,
    matmul_acc,
    maximum,
    minimum,
    mul,
    neg,
    recip,
    relu,
    row_max,
    row_min,
    row_sum,
    rsqrt,
    sqrt,
    sub,
)
from ._ops_extended import *  # noqa: F401,F403
from ._ops_extended import __all__ as _ops_extended_all
from ._ops_compose import *  # noqa: F401,F403
from ._ops_compose import __all__ as _ops_compose_all

create = create_tile
from ._submit import get_block_idx, get_block_num  # noqa: E402 - the block index of a pl.spmd_submit kernel or a pl.spmd body
from ._split_aiv import aic_gather, aiv_shard, get_subblock_idx  # noqa: E402 - a pl.split_aiv region's lanes


def transpose_view(tile):
    """Return ``tile`` with its two dimensions swapped (PyPTO's NZ <-> ZN view of a placed buffer).

    PyPTO reinterprets the buffer's fractal layout without moving data; the
    sim has no layouts, so the view is the transposed tile (the values a
    matmul reads from it are the same).
    """
    from ._layout import transpose

    return transpose(tile)

__all__ = [
    "get_block_idx",
    "get_block_num",
    "get_subblock_idx",
    "aiv_shard",
    "aic_gather",
    "assemble",
    "concat",
    "reshape",
    "slice",
    "create",
    "create_tile",
    "transpose_view",
    "fillpad",
    "load",
    "move",
    "store",
    "abs",
    "add",
    "adds",
    "subs",
    "muls",
    "divs",
    "maxs",
    "mins",
    "cast",
    "col_max",
    "col_min",
    "col_sum",
    "div",
    "exp",
    "full",
    "log",
    "matmul",
    "matmul_acc",
    "maximum",
    "minimum",
    "mul",
    "neg",
    "recip",
    "relu",
    "row_max",
    "row_min",
    "row_sum",
    "rsqrt",
    "sqrt",
    "sub",
    *_ops_extended_all,
    *_ops_compose_all,
]


# PyPTO's tile-level broadcast ops, the same as the top-level ones (pl.row_expand_add, ...).
from ._layout import (  # noqa: E402 - after the names above, as PyPTO's tile_ops lists them
    col_expand,
    col_expand_add,
    col_expand_div,
    col_expand_mul,
    col_expand_sub,
    row_expand,
    row_expand_div,
    row_expand_mul,
    row_expand_sub,
)
from ._layout import row_expand_add as _row_expand_add  # noqa: E402 - wrapped below for tmp=
from ._tracer import Tile, user_loc  # noqa: E402
from ..ir._diag import compile_error  # noqa: E402


def row_expand_add(tile, row_vec, tmp=None):
    """Return ``tile + row_vec`` (``[rows, 1]`` broadcast along each row); ``tmp`` is PyPTO's scratch tile.

    The sim needs no scratch: ``tmp`` must be a tile when given, and is otherwise unused.
    """
    if tmp is not None and not isinstance(tmp, Tile):
        raise compile_error(f"pl.tile.row_expand_add: tmp must be a scratch tile, got {tmp!r}", user_loc())
    return _row_expand_add(tile, row_vec)


__all__ += ["col_expand", "col_expand_add", "col_expand_div", "col_expand_mul", "col_expand_sub", "row_expand",
            "row_expand_add", "row_expand_div", "row_expand_mul", "row_expand_sub"]
