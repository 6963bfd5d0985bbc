"""PyPTO's gather and scatter family: gather, gather_row, paged_gather, gatherb, mgather, scatter, scatter_update, mscatter.

Each records IR at the caller's line and is checked there.  The gathers are
one :class:`~pypto_async.ir._nodes.Gather` (element-wise over the result, so
it fuses with its neighbours), the scatters one
:class:`~pypto_async.ir._nodes.Scatter`; the mask forms are reshapes,
slices and assembles.  A tensor operand inside a region is loaded whole, as
for the other tensor-level ops.

Indices are read as unsigned integers of their width.  Out-of-range indices:

* the gathers clamp to the last element (PyPTO's ``gather_oob="undefined"``
  and ``"clamp"``), or wrap or give zero where ``gather_oob=`` says so:
  nothing is ever read outside the source;
* the scatters (``scatter``, ``scatter_update``, ``mscatter``) fail the
  launch (``PTO_EINVAL``, a message naming the op): nothing is written
  outside the destination.

``mgather`` and ``mscatter`` reach a DDR tensor: ``mgather`` reads the
whole tensor (a load the task's dependencies see) and ``mscatter`` writes
only its elements, which the task graph counts as a write of the whole
tensor, so tasks touching that tensor are ordered around them.
"""

from __future__ import annotations

import enum

from .._dtypes import INT32, UINT32, as_dtype
from ..ir._diag import compile_error
from ..ir._nodes import Gather, Scatter
from ._layout import reshape
from ._layout import slice as tile_slice
from ._layout import tile_assemble
from ._memory import _tile as tile_operand
from ._memory import load, move, record, space_name
from ._tracer import TensorArg, Tile, current, user_loc
from ._types import MemorySpace

__all__ = [
    "gather",
    "gather_row",
    "paged_gather",
    "gatherb",
    "mgather",
    "scatter",
    "scatter_update",
    "mscatter",
]


class MaskPattern(enum.IntEnum):
    """PyPTO's hardware mask patterns (``pl.tile.MaskPattern``): which columns of each group are selected."""

    P0101 = 1
    P1010 = 2
    P0001 = 3
    P0010 = 4
    P0100 = 5
    P1000 = 6
    P1111 = 7


#: mask pattern -> (group size, position in the group)
_MASKS = {1: (2, 0), 2: (2, 1), 3: (4, 0), 4: (4, 1), 5: (4, 2), 6: (4, 3), 7: (1, 0)}
_OOB = {"undefined": "undefined", "clamp": "clamp", "wrap": "wrap", "zero": "zero",
        0: "undefined", 1: "clamp", 2: "wrap", 3: "zero"}
_COALESCE = {"row": "rows", 0: "rows", "elem": "flat", 1: "flat"}


def _tile(x, op: str, what: str) -> Tile:
    return tile_operand(x, op, what)


def _err(message: str):
    return compile_error(message, user_loc())


def _dim(dim, rank: int, op: str) -> int:
    if isinstance(dim, bool) or not isinstance(dim, int) or not -rank <= dim < rank:
        raise _err(f"{op}: dim must be an int in [{-rank}, {rank}), got {dim!r}")
    return dim % rank


def _mask(mask_pattern, op: str) -> tuple[int, int]:
    if isinstance(mask_pattern, bool) or not isinstance(mask_pattern, int) or int(mask_pattern) not in _MASKS:
        raise _err(f"{op}: mask_pattern must be 1-7 (pl.tile.MaskPattern.P0101 ... P1111), got {mask_pattern!r}")
    return _MASKS[int(mask_pattern)]


def _output_dtype(output_dtype, src: Tile, op: str) -> None:
    if output_dtype is None:
        return
    dt = as_dtype(output_dtype) if not isinstance(output_dtype, int) else None
    if dt != src.dtype:
        raise _err(f"{op}: output_dtype={output_dtype!r} (a reinterpretation of the {src.dtype.name} bits) is not "
                   f"supported here; only the source's dtype {src.dtype.name}")


def _int_index(index: Tile, op: str) -> None:
    if index.dtype.is_float or index.dtype.name == "BOOL":
        raise _err(f"{op}: the index tile must be an integer tile (INT32, INT16, UINT32), got {index.dtype.name}")


def _gather(src: Tile, index: Tile, mode: str, op: str, dim: int = -1, oob: str = "undefined") -> Tile:
    _int_index(index, op)
    return record(Gather(src.var, index.var, mode, dim, oob), op)


def _collapse(x: Tile, keep: int) -> Tile:
    """``x`` as a 2-D tile: every dimension before the last ``keep`` merged into rows."""
    if len(x.shape) == 2:
        return x
    rows = 1
    for d in x.shape[:-1]:
        rows *= d
    return reshape(x, [rows, x.shape[-1]])


# ---- gather ------------------------------------------------------------------------------------


def _gather_mask(src: Tile, mask_pattern, op: str) -> Tile:
    size, pos = _mask(mask_pattern, op)
    if size == 1:
        return src
    if len(src.shape) != 2 or src.shape[1] % size:
        raise _err(f"{op}: a mask gather takes a 2-D tile whose columns are a multiple of {size}, got "
                   f"{list(src.shape)}")
    r, c = src.shape
    groups = reshape(src, [r * c // size, size])
    picked = tile_slice(groups, [r * c // size, 1], [0, pos])
    return reshape(picked, [r, c // size])


def gather(input, dim=None, index=None, *, mask_pattern=None, output_dtype=None, kvalue=None, cmp_mode=None,
           out_cols=None, offset=0, count_dtype=None):
    """Gather elements of ``input``: the index form or the mask form (PyPTO's tensor-level ``gather``).

    Index form, ``gather(input, dim, index)``: ``out[..., k, ...] =
    input[..., index[..., k, ...], ...]`` along ``dim`` (as
    ``torch.gather``); ``index`` is an integer tile or tensor of ``input``'s
    rank whose other extents are at most ``input``'s, and the result has its
    shape.  An index past the extent reads the last element.

    Mask form, ``gather(input, mask_pattern=p)``: the columns of each row the
    hardware pattern selects (``P0101`` the even ones, ``P1010`` the odd
    ones, ``P0001``..``P1000`` one of every four, ``P1111`` all).
    """
    op = "pl.gather"
    current(op)
    is_index = dim is not None or index is not None
    is_mask = mask_pattern is not None
    if kvalue is not None or cmp_mode is not None or out_cols is not None:
        raise _err(f"{op}: the compare form (kvalue=, cmp_mode=, out_cols=) is not supported here")
    if is_index and is_mask:
        raise _err(f"{op}: the index form (dim, index) and the mask form (mask_pattern=) are exclusive")
    src = _tile(input, op, "input")
    if is_mask:
        _output_dtype(output_dtype, src, op)
        return _gather_mask(src, mask_pattern, op)
    if output_dtype is not None:
        raise _err(f"{op}: output_dtype is only for the mask form (mask_pattern=)")
    if dim is None or index is None:
        raise _err(f"{op}: the index form needs both dim and index (or pass mask_pattern=)")
    idx = _tile(index, op, "index")
    return _gather(src, idx, "axis", op, _dim(dim, len(src.shape), op))


def tile_gather(src, indices, tmp=None, *, mode="flat", dim=-1, gather_oob="undefined") -> Tile:
    """Gather ``src`` at flat (row-major) positions: ``out[i, j] = src.flat[indices[i, j]]`` (``pl.tile.gather``).

    ``tmp`` (PyPTO's scratch tile) is optional here; one given must be a tile.
    An index past the source reads its last element.  ``mode=`` (``"axis"``
    with ``dim=``, ``"rows"``, ``"block"``) and ``gather_oob=`` are this
    package's: the other gathers of the family on a tile, as
    ``Program.as_python()`` prints them.
    """
    op = "pl.tile.gather"
    current(op)
    s, i = _tile(src, op, "src"), _tile(indices, op, "indices")
    if tmp is not None:
        _tile(tmp, op, "tmp")
    oob = _OOB.get(gather_oob)
    if oob is None or isinstance(gather_oob, bool):
        raise _err(f"{op}: gather_oob must be 'undefined', 'clamp', 'wrap', 'zero' or 0-3, got {gather_oob!r}")
    if mode == "axis":
        dim = _dim(dim, len(s.shape), op)
    return _gather(s, i, mode, op, dim, oob)


def gather_mask(src, mask_pattern, *, output_dtype=None) -> Tile:
    """The columns of each row a hardware mask pattern selects (``pl.tile.gather_mask``; see :func:`gather`)."""
    op = "pl.tile.gather_mask"
    current(op)
    s = _tile(src, op, "src")
    _output_dtype(output_dtype, s, op)
    return _gather_mask(s, mask_pattern, op)


def gatherb(src, offset, *, output_dtype=None) -> Tile:
    """Gather 32-byte blocks of ``src`` by UINT32 *byte* offsets (``pl.gatherb``).

    Offset ``[i, k]`` selects the block at that byte offset of the source
    (row-major); it fills output columns ``k * e`` to ``k * e + e - 1`` of
    row ``i``, ``e = 32 / sizeof(dtype)``.  An offset past the source reads
    its last block.  ``output_dtype`` reads the gathered bytes as another
    dtype (then ``e = 32 / sizeof(output_dtype)``); an FP16/BF16 source is
    not supported there.
    """
    op = "pl.gatherb"
    current(op)
    s, o = _tile(src, op, "src"), _tile(offset, op, "offset")
    if o.dtype != UINT32:
        raise _err(f"{op}: offset must be a UINT32 tile of byte offsets, got {o.dtype.name}")
    out = None
    if output_dtype is not None:
        out = as_dtype(output_dtype)
        out = None if out == s.dtype else out
    return record(Gather(s.var, o.var, "block", -1, "undefined", out), op)


def mgather(mem, idx, coalesce="row", *, gather_oob="undefined", target_memory=MemorySpace.Vec, scratch=None,
            valid_shape=None) -> Tile:
    """Gather rows (``coalesce="row"``) or elements (``"elem"``) of a DDR tensor by an INT32 index tile.

    Row form: index ``[1, n]`` or ``[n, 1]`` gives ``[n, cols]`` with row
    ``k`` the tensor's row ``idx.flat[k]``.  Element form: ``out[i, j] =
    mem.flat[idx[i, j]]``.  The result's valid region is the index tile's.
    ``gather_oob`` (``"undefined"``, ``"clamp"``, ``"wrap"``, ``"zero"`` or
    0-3) says what an index past the tensor gives: the last row/element
    (undefined, clamp), the index modulo the extent (wrap) or zeros; never a
    read outside it.  ``target_memory=pl.Mem.Mat`` places the result in Mat
    (``idx`` may then be a tensor; ``scratch`` is accepted and unused).
    """
    op = "pl.mgather"
    current(op)
    if not isinstance(mem, TensorArg):
        raise _err(f"{op}: mem must be a tensor (in DDR), got {mem!r}")
    mode = _COALESCE.get(coalesce)
    if mode is None or isinstance(coalesce, bool):
        raise _err(f"{op}: coalesce must be 'row', 'elem', 0 or 1, got {coalesce!r}")
    oob = _OOB.get(gather_oob)
    if oob is None or isinstance(gather_oob, bool):
        raise _err(f"{op}: gather_oob must be 'undefined', 'clamp', 'wrap', 'zero' or 0-3, got {gather_oob!r}")
    space = space_name(target_memory, op)
    if space not in ("Vec", "Mat"):
        raise _err(f"{op}: target_memory must be Vec or Mat, got {space}")
    if scratch is not None and not (space == "Mat" and mode == "flat"):
        raise _err(f"{op}: scratch is only for the Mat element form")
    i = _tile(idx, op, "idx")
    if i.dtype != INT32:
        raise _err(f"{op}: idx must be an INT32 tile, got {i.dtype.name}")
    if mode == "rows" and len(mem.shape) < 2:
        raise _err(f"{op}: a row gather needs a tensor of rank 2 or more, got {list(mem.shape)}")
    table = load(mem, [0] * len(mem.shape), list(mem.shape))
    out = _gather(table, i, mode, op, oob=oob)
    if valid_shape is not None and len(valid_shape) != len(out.shape):
        raise _err(f"{op}: valid_shape {list(valid_shape)} needs one extent per dimension of {list(out.shape)}")
    if space == "Mat":
        out = move(out, target_memory=MemorySpace.Mat)
    return out


def gather_row(dst, src, dst_offset, src_offset, shapes, transpose=False, *, valid_shape=None) -> Tile:
    """Copy the ``shapes`` window of tensor ``src`` at ``src_offset`` into ``dst`` at ``dst_offset`` (``pl.gather_row``).

    ``dst`` is a tile (or a ``pl.create_l1`` accumulator); the result is its
    new value.  Offsets may be loop indices or runtime scalars.  With
    ``valid_shape`` (ints) only that leading box of the window is copied;
    ``transpose=True`` places the window transposed.
    """
    op = "pl.gather_row"
    current(op)
    d = _tile(dst, op, "dst")
    if not isinstance(src, TensorArg):
        raise _err(f"{op}: src must be a tensor (in DDR), got {src!r}")
    shapes = list(shapes)
    if len(shapes) != len(src.shape) or len(list(dst_offset)) != len(d.shape) or len(shapes) != len(d.shape):
        raise _err(f"{op}: shapes {shapes} and dst_offset {list(dst_offset)} need one entry per dimension of "
                   f"dst {list(d.shape)}")
    if transpose and valid_shape is not None:
        raise _err(f"{op}: valid_shape is not supported together with transpose=True")
    if valid_shape is not None:
        valid = list(valid_shape)
        if len(valid) != len(shapes):
            raise _err(f"{op}: valid_shape {valid} needs one extent per dimension of shapes {shapes}")
        if all(isinstance(v, int) and not isinstance(v, bool) for v in valid):
            if any(not 0 < v <= s for v, s in zip(valid, shapes)):
                raise _err(f"{op}: valid_shape {valid} must lie in shapes {shapes}")
            shapes = valid
        else:  # runtime extents: the window's valid box is written where it lands, checked when it runs
            from ._tracer import to_index

            if len(shapes) != 2:
                raise _err(f"{op}: a runtime valid_shape takes 2-D windows here")
            win = load(src, list(src_offset), shapes, valid_shape=valid)
            offs = tuple(to_index(o) for o in dst_offset)
            return record(Scatter(d.var, win.var, None, "box", offs), op)
    win = load(src, list(src_offset), shapes)
    if transpose:
        from ._layout import transpose as tile_transpose

        win = tile_transpose(win)
    return tile_assemble(d, win, list(dst_offset))


def paged_gather(src, indices, block_table, block_size, size, max_indices, *, space=MemorySpace.Mat, col_off=0,
                 is_trans=False, is_b_matrix=False) -> Tile:
    """Gather rows of a paged pool (``pl.paged_gather``).

    Row ``k`` of the result is pool row ``block_table[i // block_size] *
    block_size + i % block_size`` for ``i = indices.flat[k]``, columns
    ``col_off`` to ``col_off + size``.  The result is ``[max_indices, size]``
    (``[size, max_indices]`` with ``is_trans=True``) in ``space`` (Mat or
    Vec); rows past the index count are zeros.  A block past the table, or a
    row past the pool, reads the last one.
    """
    from ._ops import add, divs, full, muls
    from ._ops_extended import rems

    op = "pl.paged_gather"
    current(op)
    if not isinstance(src, TensorArg) or len(src.shape) != 2:
        raise _err(f"{op}: src must be a 2-D tensor (the paged pool), got {src!r}")
    for name, v in (("block_size", block_size), ("size", size), ("max_indices", max_indices), ("col_off", col_off)):
        if isinstance(v, bool) or not isinstance(v, int) or v < (0 if name == "col_off" else 1):
            raise _err(f"{op}: {name} must be a positive int, got {v!r}")
    if col_off + size > src.shape[1]:
        raise _err(f"{op}: columns col_off + size = {col_off + size} exceed the pool's {src.shape[1]}")
    sp = space_name(space, op, "space")
    if sp not in ("Mat", "Vec"):
        raise _err(f"{op}: space must be Mat or Vec, got {sp}")
    if is_trans and sp != "Mat":
        raise _err(f"{op}: is_trans=True needs space=Mat")
    idx = _tile(indices, op, "indices")
    table = _tile(block_table, op, "block_table")
    if idx.dtype != INT32 or table.dtype != INT32:
        raise _err(f"{op}: indices and block_table must be INT32, got {idx.dtype.name} and {table.dtype.name}")
    n = _numel(idx.shape)
    if n > max_indices:
        raise _err(f"{op}: {n} indices exceed max_indices={max_indices}")
    flat_idx = reshape(idx, [1, n]) if len(idx.shape) != 2 or idx.shape[0] != 1 else idx
    blocks = _gather(reshape(table, [_numel(table.shape)]) if len(table.shape) != 1 else table,
                     reshape(divs(flat_idx, block_size), [n]), "flat", op, oob="clamp")
    phys = add(muls(reshape(blocks, [1, n]), block_size), rems(flat_idx, block_size))
    pool = load(src, [0, col_off], [src.shape[0], size])
    out = _gather(pool, phys, "rows", op, oob="clamp")
    if n < max_indices:
        out = tile_assemble(full([max_indices, size], value=0, dtype=src.dtype), out, [0, 0])
    if is_trans:
        from ._layout import transpose as tile_transpose

        out = tile_transpose(out)
    if sp == "Mat":
        out = move(out, target_memory=MemorySpace.Mat)
    return out


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


# ---- scatter -----------------------------------------------------------------------------------


def _scatter_mask(inp: Tile, dst: Tile, mask_pattern, op: str) -> Tile:
    size, pos = _mask(mask_pattern, op)
    if len(inp.shape) != 2 or len(dst.shape) != 2 or dst.shape != (inp.shape[0], inp.shape[1] * size):
        raise _err(f"{op}: a mask scatter writes a [r, c] input into a [r, c * {size}] dst, got {list(inp.shape)} "
                   f"and {list(dst.shape)}")
    if inp.dtype != dst.dtype:
        raise _err(f"{op}: input is {inp.dtype.name} but dst is {dst.dtype.name}")
    if size == 1:
        return inp
    r, c = inp.shape
    groups = reshape(dst, [r * c, size])
    written = tile_assemble(groups, reshape(inp, [r * c, 1]), [0, pos])
    return reshape(written, [r, c * size])


def scatter(input, dim=None, index=None, src=None, *, mask_pattern=None, dst=None) -> Tile:
    """Scatter into ``input``: the index form or the mask form (PyPTO's tensor-level ``scatter``).

    Index form, ``scatter(input, dim, index, src)`` with ``dim`` the last
    axis: ``out = input; out[..., index[..., k]] = src[..., k]`` (the inverse
    of :func:`gather`; ``index`` has ``src``'s shape, leading extents at most
    ``input``'s).  A later write to one position wins; an index past the row
    fails the launch.

    Mask form, ``scatter(input, mask_pattern=p, dst=d)``: ``d`` with the
    columns the pattern selects replaced by the columns of ``input`` (the
    inverse of the mask gather).
    """
    op = "pl.scatter"
    current(op)
    is_index = dim is not None or index is not None or src is not None
    is_mask = mask_pattern is not None or dst is not None
    if is_index and is_mask:
        raise _err(f"{op}: the index form (dim, index, src) and the mask form (mask_pattern=, dst=) are exclusive")
    base = _tile(input, op, "input")
    if is_mask:
        if mask_pattern is None or dst is None:
            raise _err(f"{op}: the mask form needs both mask_pattern= and dst=")
        return _scatter_mask(base, _tile(dst, op, "dst"), mask_pattern, op)
    if dim is None or index is None or src is None:
        raise _err(f"{op}: the index form needs dim, index and src (or pass mask_pattern= and dst=)")
    d = _dim(dim, len(base.shape), op)
    if d != len(base.shape) - 1:
        raise _err(f"{op}: only dim=-1 (the last axis) is supported, got dim={dim!r}")
    idx, s = _tile(index, op, "index"), _tile(src, op, "src")
    if len(idx.shape) != len(base.shape) or len(s.shape) != len(base.shape):
        raise _err(f"{op}: input, index and src must have one rank, got {list(base.shape)}, {list(idx.shape)}, "
                   f"{list(s.shape)}")
    if len(base.shape) > 2:
        if s.shape[:-1] != base.shape[:-1]:
            raise _err(f"{op}: for a rank-{len(base.shape)} input, src's leading extents must be the input's")
        out = record(Scatter(_collapse(base, 1).var, _collapse(s, 1).var, _collapse(idx, 1).var, "axis"), op)
        return reshape(out, list(base.shape))
    _int_index(idx, op)
    return record(Scatter(base.var, s.var, idx.var, "axis"), op)


def tile_scatter(dst, src, indexes, *, mode="flat", offsets=None) -> Tile:
    """``dst`` with ``dst.flat[indexes[i, j]] = src[i, j]`` (``pl.tile.scatter``; ``indexes`` has ``src``'s shape).

    A later write to one position wins; an index past ``dst`` fails the launch.
    ``mode=`` (``"axis"``: along each row; ``"rows"``: whole rows) is this
    package's, as ``Program.as_python()`` prints the other scatters (``"box"``
    with ``offsets=`` and no index: ``pl.gather_row``'s runtime box).
    """
    from ._tracer import to_index

    op = "pl.tile.scatter"
    current(op)
    d, s = _tile(dst, op, "dst"), _tile(src, op, "src")
    if mode == "box":
        return record(Scatter(d.var, s.var, None, "box", tuple(to_index(o) for o in offsets or ())), op)
    i = _tile(indexes, op, "indexes")
    _int_index(i, op)
    return record(Scatter(d.var, s.var, i.var, mode), op)


def scatter_mask(dst, src, mask_pattern) -> Tile:
    """``dst`` with the columns ``mask_pattern`` selects replaced by ``src``'s (``pl.tile.scatter_mask``)."""
    op = "pl.tile.scatter_mask"
    current(op)
    return _scatter_mask(_tile(src, op, "src"), _tile(dst, op, "dst"), mask_pattern, op)


def _update_args(args, kwargs, op: str):
    """PyPTO's call shapes: (dim, index, src), (index, src, dim=-2), (dim, index=, src=)."""
    kwargs = dict(kwargs)
    dim = kwargs.pop("dim", None)
    index = kwargs.pop("index", None)
    src = kwargs.pop("src", None)
    if kwargs:
        raise _err(f"{op}: unexpected keyword arguments {sorted(kwargs)}")
    args = list(args)
    if args and isinstance(args[0], int) and not isinstance(args[0], bool):
        if dim is not None:
            raise _err(f"{op}: dim given twice")
        dim = args.pop(0)
    for name in ("index", "src"):
        if args:
            v = args.pop(0)
            if name == "index":
                if index is not None:
                    raise _err(f"{op}: index given twice")
                index = v
            else:
                if src is not None:
                    raise _err(f"{op}: src given twice")
                src = v
    if args:
        raise _err(f"{op}: too many arguments")
    if index is None or src is None:
        raise _err(f"{op}: needs index and src: scatter_update(input, dim, index, src)")
    return (-2 if dim is None else dim), index, src


def scatter_update(input, *args, **kwargs) -> Tile:
    """Update rows of ``input``: row ``index.flat[k]`` takes row ``k`` of ``src`` (PyPTO's ``scatter_update``).

    2-D: ``input [rows, d]``, ``src [b * s, d]``, ``index [b, s]``; 4-D:
    ``input [blocks, block_size, 1, d]``, ``src [b, s, 1, d]`` (rows
    counted across the first two dimensions).  ``dim`` is -2.  A later write
    to one row wins; an index past the rows fails the launch.
    """
    op = "pl.scatter_update"
    current(op)
    dim, index, src = _update_args(args, kwargs, op)
    base = _tile(input, op, "input")
    s, i = _tile(src, op, "src"), _tile(index, op, "index")
    _int_index(i, op)
    rank = len(base.shape)
    if rank not in (2, 4) or len(s.shape) != rank:
        raise _err(f"{op}: input and src must both be 2-D or both 4-D, got {list(base.shape)} and {list(s.shape)}")
    if dim not in (-2, rank - 2):
        raise _err(f"{op}: dim must be -2, got {dim!r}")
    if rank == 4:
        if base.shape[2] != 1 or s.shape[2] != 1:
            raise _err(f"{op}: 4-D input and src are [blocks, block_size, 1, d], got {list(base.shape)} and "
                       f"{list(s.shape)}")
        b2 = reshape(base, [base.shape[0] * base.shape[1], base.shape[3]])
        s2 = reshape(s, [s.shape[0] * s.shape[1], s.shape[3]])
        out = record(Scatter(b2.var, s2.var, i.var, "rows"), op)
        return reshape(out, list(base.shape))
    return record(Scatter(base.var, s.var, i.var, "rows"), op)


def mscatter(src, idx, output_tensor):
    """Write ``output_tensor.flat[idx[i, j]] = src[i, j]`` into a DDR tensor and return it (``pl.mscatter``).

    ``idx`` is an INT32 tile of ``src``'s shape; only those elements are
    written (blocks of one ``pl.spmd`` kernel may scatter into one tensor).
    A later write to one element wins; an index past the tensor fails the
    launch.
    """
    op = "pl.mscatter"
    current(op)
    if not isinstance(output_tensor, TensorArg):
        raise _err(f"{op}: output_tensor must be a tensor (in DDR), got {output_tensor!r}")
    s, i = _tile(src, op, "src"), _tile(idx, op, "idx")
    if i.dtype != INT32:
        raise _err(f"{op}: idx must be an INT32 tile, got {i.dtype.name}")
    if s.dtype != output_tensor.dtype:
        raise _err(f"{op}: src is {s.dtype.name} but output_tensor is {output_tensor.dtype.name}")
    if s.shape != i.shape:
        raise _err(f"{op}: idx {list(i.shape)} must have src's shape {list(s.shape)}")
    from ..ir._gather import check_scatter_store
    from ..ir._nodes import IConst, Store

    t = current(op)
    loc = user_loc()
    offs = getattr(output_tensor, "origin", None)
    if offs is not None and any(not (isinstance(o, IConst) and o.value == 0) for o in offs) or \
            tuple(output_tensor.shape) != tuple(t.params[output_tensor.name].shape):
        raise _err(f"{op}: output_tensor must be a whole tensor parameter, not a window of one")
    st = Store(s.var, output_tensor.name, tuple(IConst(0) for _ in output_tensor.shape), loc, None, i.var)
    check_scatter_store(st, t.params, loc)
    t.append(st)
    return output_tensor

