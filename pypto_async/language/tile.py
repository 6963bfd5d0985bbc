"""``pl.tile``: the tile-level spellings of PyPTO's ops.

``pl.tile.assemble(target, source, offsets)`` writes a tile into a tile (the
top-level ``pl.assemble`` writes into a tensor); the rest are the same ops
as at top level, under their ``pl.tile.*`` names.
"""

from ..ir._infer import compile_error
from ._tracer import Tile, user_loc
from ._layout import concat, extract, reshape, slice  # noqa: A004
from ._layout import tile_assemble as assemble
from ._memory import create_tile, fillpad, fillpad_inplace, load, move, store
from ._memory import tile_read as read
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
from ._ops_index import arange, ci, col_argmax, col_argmin, row_argmax, row_argmin, sort32, tri  # noqa: E402
from ._ops_index import tile_mrgsort as mrgsort  # noqa: E402
from ._ops_index import tile_random as random  # noqa: E402
from ._ops_mx import *  # noqa: F401,F403
from ._ops_mx import __all__ as _ops_mx_all
from ._ops_gather import MaskPattern, gather_mask, gather_row, gatherb, mgather, mscatter, scatter_mask, scatter_update
from ._ops_gather import tile_gather as gather
from ._ops_gather import tile_scatter as scatter

create = create_tile
from ._submit import get_block_idx, get_block_num  # noqa: E402 - the block index of a pl.spmd_submit kernel or a pl.spmd body
from ._split_aiv import aic_gather, aiv_shard, get_subblock_idx  # noqa: E402 - a pl.split_aiv region's lanes
from ._ops_compose import batch_matmul_acc  # noqa: E402 - pl.tile only, as in PyPTO
from ._runtime_scalars import write  # noqa: E402 - PyPTO's tile.write: an element of a tile, in place


def transpose_view(tile):
    """Return ``tile`` with its two trailing dimensions swapped (PyPTO's NZ <-> ZN view of a placed buffer).

    PyPTO reinterprets the buffer's fractal layout without moving data; the
    sim has no layouts, so the view is the transposed tile (the values a
    matmul reads from it are the same).  A tile of rank 3 or more (a
    ``pl.batch_matmul`` operand) has each of its matrices transposed.
    """
    from ._ops_compose import transpose_trailing

    if isinstance(tile, Tile) and len(tile.shape) < 2:
        raise compile_error(f"pl.tile.transpose_view swaps a tile's two trailing dimensions, but it is "
                            f"{len(tile.shape)}-D {list(tile.shape)}", user_loc())
    return transpose_trailing(tile)

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
    "fillpad_inplace",
    "extract",
    "read",
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
    "row_argmax",
    "row_argmin",
    "col_argmax",
    "col_argmin",
    "sort32",
    "mrgsort",
    "tri",
    "ci",
    "arange",
    "random",
    *_ops_mx_all,
    "MaskPattern",
    "gather",
    "gather_mask",
    "gather_row",
    "gatherb",
    "mgather",
    "mscatter",
    "scatter",
    "scatter_mask",
    "scatter_update",
]

from ._ops_math import TILE_OPS as _math_tile_ops  # noqa: E402 - sin, fmod, part_*, row_prod, ... (PyPTO's tile names)

for _name, _fn in _math_tile_ops.items():
    globals().setdefault(_name, _fn)
__all__ += [name for name in _math_tile_ops if name not in __all__]
__all__ += ["batch_matmul_acc", "write"]
