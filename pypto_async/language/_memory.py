"""Data movement: load, store, move, create_tile, copy, fillpad, assemble into a tensor.

Memory spaces are PyPTO's (``pl.MemorySpace``); the rules each op checks are
in :mod:`pypto_async.ir._spaces`.  A load may be given a valid region
(``valid_shape``): it then reads only that leading box of its window, and the
rest of the tile is padding until ``pl.fillpad`` fills it.
"""

from __future__ import annotations

from .._scalars import is_int
from .._dtypes import as_dtype
from ..errors import PtoArgumentError, PtoNotSupported
from ..ir._infer import check_load, check_store, compile_error, infer_expr
from ..ir._nodes import Assign, Const, FillPad, Full, IConst, Load, Move, Store, Transpose
from ..ir._valid import static_extent
from ._program import shift
from ._tracer import ScalarArg, TensorArg, Tile, _state, current, to_index, user_loc
from ._types import AtomicType, MemorySpace, PadValue

__all__ = ["load", "store", "l0c_store", "move", "create_tile", "copy", "fillpad", "fillpad_inplace", "assemble"]


def space_name(x, op: str, what: str = "target_memory") -> str:
    """The IR name of a memory space given as ``pl.MemorySpace`` (or its name)."""
    if isinstance(x, MemorySpace):
        return x.value
    if isinstance(x, str) and x in MemorySpace.__members__:
        return x
    raise compile_error(f"{op}: {what} must be a pl.MemorySpace, got {x!r}", user_loc())


def _tensor(x, op: str) -> TensorArg:
    if not isinstance(x, TensorArg):
        raise compile_error(f"{op}: expected a tensor parameter of the kernel, got {x!r}", user_loc())
    return x


def as_tile(x):
    """A tensor (or a window of one) used where a tile goes is loaded whole: tensor-level ops are sugar.

    A tile of another, closed region is loaded from the tensor it is stored
    to (see :mod:`._escape`).
    """
    t = getattr(_state, "tracer", None)
    if isinstance(x, Tile) and t is not None and getattr(t, "region_defs", None):
        from ._escape import escaped
        from ._tracer import Index

        tensor = escaped(t, x)
        if tensor is not None:
            valid = x.var.type.valid
            valid = None if valid is None else [e.value if isinstance(e, IConst) else Index(e) for e in valid]
            return load(tensor, [0] * len(x.shape), list(x.shape), valid_shape=valid)
    if isinstance(x, TensorArg):
        return load(x, [0] * len(x.shape), list(x.shape))
    return x


def _tile(x, op: str, what: str = "operand") -> Tile:
    x = as_tile(x)
    if not isinstance(x, Tile):
        raise compile_error(f"{op}: {what} must be a tile, got {x!r}", user_loc())
    return x


def _extent(x, op: str):
    """A valid extent: an int, a loop index, or an integer scalar parameter."""
    if isinstance(x, ScalarArg) and x.dtype.is_float:
        raise compile_error(f"{op}: valid extent {x.name!r} is a {x.dtype.name} scalar, not an integer", user_loc())
    return to_index(x, "valid extent")


def valid_extents(valid, op: str):
    if valid is None:
        return None
    if not isinstance(valid, (list, tuple)):
        raise compile_error(f"{op}: valid_shape must be a list, got {valid!r}", user_loc())
    return tuple(_extent(v, op) for v in valid)


def record(expr, op: str) -> Tile:
    """Type-check ``expr`` at the caller's line, append ``v = expr``, return the tile."""
    t = current(op)
    loc = user_loc()
    v = t.new_var(infer_expr(expr, t.params, loc))
    t.append(Assign(v, expr, loc))
    return Tile(v)


def load(tensor, offsets, shapes, valid_shapes=None, target_memory=MemorySpace.Vec, transpose=False, *,
         valid_shape=None, clamp: bool = False) -> Tile:
    """Load the window ``[offsets, offsets + shapes)`` of a tensor parameter as a tile.

    Offsets may be ints or loop/block indices; shapes are ints.
    ``target_memory`` is ``Vec`` (the default) or ``Mat``.  With
    ``valid_shape`` (also spelt ``valid_shapes``: ints, loop indices or
    integer scalar parameters) only that leading box is read, and it is what
    must lie inside the tensor; the rest of the tile is padding.  A runtime
    extent outside the tile or the tensor fails the launch.  With
    ``clamp=True`` (PyPTO's) the window may run off the tensor's end: its
    valid box is cut back to the tensor's edge (a tail tile of a loop over
    rows that do not divide evenly).
    """
    t = current("pl.load")
    loc = user_loc()
    if not isinstance(clamp, bool):
        raise compile_error(f"pl.load: clamp must be a bool, got {clamp!r}", loc)
    if isinstance(tensor, Tile) and getattr(tensor, "view_of", None):
        # pl.tensor.view in a region gives the tile of the view's values: a load of it is its window.
        from ._layout import slice as tile_window

        if clamp or (valid_shape is not None and valid_shapes is not None):
            raise compile_error(f"pl.load of a {tensor.view_of}: clamp= is not taken, nor both valid_shape and "
                                f"valid_shapes", loc)
        return tile_window(tensor, list(shapes), list(offsets),
                           valid_shape=valid_shape if valid_shape is not None else valid_shapes)
    if clamp:
        if valid_shapes is not None and valid_shape is not None:
            raise compile_error("pl.load: pass valid_shape or valid_shapes, not both", loc)
        wanted = valid_shape if valid_shape is not None else valid_shapes
        valid_shape, valid_shapes = clamped_extents(tensor, offsets, wanted if wanted is not None else shapes,
                                                    "pl.load"), None
    layout = getattr(tensor, "mx_layout", None)
    ten = _tensor(tensor, "pl.load")
    if transpose:
        raise compile_error("pl.load(transpose=True) is not supported here; load, then use pl.transpose", loc)
    if valid_shapes is not None and valid_shape is not None:
        raise compile_error("pl.load: pass valid_shape or valid_shapes, not both", loc)
    offs = tuple(to_index(o) for o in offsets)
    shape = tuple(shapes)
    if not all(is_int(d) for d in shape):
        raise compile_error(f"pl.load: shapes must be ints, got {list(shape)}", loc)
    if valid_shape is None and valid_shapes is None and getattr(ten, "valid", None) is not None:
        # A window with a valid box (pl.tensor.slice(..., valid_shape=)): a whole load of it is partial there.
        if shape != tuple(ten.shape) or not all(isinstance(o, IConst) and o.value == 0 for o in offs):
            raise compile_error(f"pl.load: {ten!r} has a valid box; load the whole window (offsets 0, shape "
                                f"{list(ten.shape)}) or pass valid_shape=", loc)
        valid_shape = list(ten.valid)
    valid_arg = valid_shape if valid_shape is not None else valid_shapes
    bound = shape  # what must lie inside a window: the valid box when one is given (the rest is padding)
    if isinstance(valid_arg, (list, tuple)) and len(valid_arg) == len(shape):
        bound = tuple(int(v) if is_int(v) else None for v in valid_arg)
    offs = shift(ten, offs, bound, "pl.load")
    valid = valid_extents(valid_arg, "pl.load")
    expr = Load(ten.name, offs, shape, space_name(target_memory, "pl.load"), valid)
    type_ = infer_expr(expr, t.params, loc)
    check_load(expr, t.params, t.ranges, loc)
    v = t.new_var(type_)
    t.append(Assign(v, expr, loc))
    if layout is not None:  # an MX scale tensor (pl.MX_A_ZZ / pl.MX_B_NN): a whole load gives the logical tile
        if shape != tuple(ten.shape) or not all(isinstance(o, IConst) and o.value == 0 for o in offs) or valid:
            raise PtoNotSupported(f"{loc}: pl.load of a pl.{layout.name} tensor loads it whole (offsets 0, shape "
                                  f"{list(ten.shape)}): a window of the packed layout is not a box here")
        from ._ops_mx import mx_unpack

        return mx_unpack(Tile(v), layout, loc)
    return Tile(v)


def clamped_extents(tensor, offsets, extents, op: str) -> list:
    """``extents`` of a window at ``offsets`` cut back to the tensor's edge (PyPTO's ``clamp=True``).

    Each is ``min(extent, dim - offset)``: an int when both are, else an
    index expression the kernel evaluates (a window wholly past the end
    still fails the launch, as any valid extent outside the tile does).
    """
    from ._tracer import index_min

    ten = _tensor(tensor, op)
    dims = tuple(getattr(tensor, "shape", ten.shape))
    offsets, extents = list(offsets), list(extents)
    if not (len(offsets) == len(extents) == len(dims)):
        raise compile_error(f"{op}: a {len(dims)}-d tensor needs {len(dims)} offsets and extents, got "
                            f"{offsets!r} and {extents!r}", user_loc())
    out = []
    for dim, o, e in zip(dims, offsets, extents):
        if not is_int(dim):
            raise PtoNotSupported(f"{user_loc()}: {op}(clamp=True) on a dimension whose extent is not known when "
                                  f"the kernel is traced ({dim!r})")
        out.append(index_min(e, int(dim) - o) if not (is_int(o) and is_int(e)) else min(int(e), int(dim) - int(o)))
    return out


def _atomic(atomic, op: str) -> str | None:
    if atomic is None or atomic is AtomicType.None_:
        return None
    if atomic is AtomicType.Add:
        return "add"
    raise compile_error(f"{op}: atomic must be a pl.AtomicType, got {atomic!r}", user_loc())


def store(tile, offsets, output_tensor, shapes=None, *, atomic=None):
    """Store a tile (its valid region) into ``output_tensor`` at ``offsets``; return the tensor.

    The tensor must be ``pl.Out`` or ``pl.InOut`` and have the tile's dtype.
    ``atomic=pl.AtomicType.Add`` adds into the tensor instead (blocks of one
    launch may add into the same window).  The older order
    ``pl.store(tile, offsets, shapes, output_tensor)`` is accepted too.
    """
    t = current("pl.store")
    loc = user_loc()
    if isinstance(output_tensor, (list, tuple)) and isinstance(shapes, TensorArg):
        output_tensor, shapes = shapes, output_tensor  # PyPTO's older argument order
    if isinstance(output_tensor, Tile) and getattr(output_tensor, "view_of", None):
        from ..errors import PtoNotSupported

        raise PtoNotSupported(f"{loc}: pl.store into a {output_tensor.view_of}: its values here (PyPTO's is a view "
                              f"of the same bytes), so it is only read")
    tl = _tile(tile, "pl.store", "the value")
    ten = _tensor(output_tensor, "pl.store")
    if getattr(output_tensor, "view_of", None):
        from ..errors import PtoNotSupported

        raise PtoNotSupported(f"{loc}: pl.store into {output_tensor.name!r}, a {output_tensor.view_of}: a copy "
                              f"here (PyPTO's is a view of the same bytes), so it is only read")
    if shapes is not None and tuple(shapes) != tl.shape:
        raise compile_error(f"pl.store: shapes {list(shapes)} differ from the tile's {list(tl.shape)}", loc)
    offsets = tuple(to_index(o) for o in offsets)
    if len(tl.shape) < len(offsets) == len(ten.shape):
        # PyPTO's lower-rank store: the tile fills the tensor's trailing dimensions, its leading ones are 1
        # (a [1, S] row stored at [0, j, 0] of a [1, N, S] tensor writes out[0, j, :]).
        from ._layout import reshape

        tl = reshape(tl, (1,) * (len(offsets) - len(tl.shape)) + tuple(tl.shape))
    # Only the tile's valid region is written: that box must lie inside a window (an [8, 1] tile valid [1, 1]
    # stores into a [1, 1] window, PyPTO's aligned staging of one element).
    valid = tl.var.type.valid
    bound = tl.shape if valid is None else tuple(static_extent(v) for v in valid)
    offs = shift(ten, offsets, bound, "pl.store")
    mode = _atomic(atomic, "pl.store")
    check_store(tl.var, ten.name, offs, t.params, t.ranges, loc, mode)
    if mode == "add":
        _added_into(t, ten.name)
    t.append(Store(tl.var, ten.name, offs, loc, mode))
    return output_tensor


def _added_into(t, name: str) -> None:
    """An entry's ``pl.Out`` parameter that an atomic-add store adds into: read too (an ``InOut``).

    The entry is a ``@pl.jit`` kernel or a ``@pl.program``'s orchestration
    (the store then in a kernel it calls, whose task reads the tensor too).

    PyPTO's atomic add accumulates onto what the caller's tensor holds (its
    baseline), so the launch copies that tensor in as well as out.
    """
    from .._signature import INOUT, OUT

    p = t.params.get(name)
    entry = getattr(t, "promotable", False) or getattr(t, "is_program", False)  # a @pl.jit's or a program's
    if (p is None or p.direction != OUT or not entry
            or any(s.name == name for s in t.scratch)):
        return
    import dataclasses

    t.params[name] = dataclasses.replace(p, direction=INOUT)


def l0c_store(tile, offsets, shapes, output_tensor):
    """Store an Acc tile (a matmul result, in L0C) into ``output_tensor``: PyPTO's older spelling.

    ``pl.l0c_store(t, offsets, shapes, tensor)`` is ``pl.store(t, offsets, tensor)`` for a tile
    in ``pl.MemorySpace.Acc``; any other tile is refused.
    """
    current("pl.l0c_store")
    tl = _tile(tile, "pl.l0c_store", "the value")
    if tl.var.type.memory != MemorySpace.Acc.value:
        raise compile_error(f"pl.l0c_store stores an Acc tile (a pl.matmul result), got one in "
                            f"{tl.var.type.memory}; use pl.store", user_loc())
    return store(tile, offsets, output_tensor, shapes)


def move(tile, target_memory, blayout=None, slayout=None, transpose=False) -> Tile:
    """Return the tile in memory space ``target_memory`` (the only way into Left, Right and Bias).

    With ``transpose=True`` the 2-D tile arrives with its dimensions swapped (as
    ``pl.move(pl.transpose(t, 0, 1), ...)``).  ``blayout`` / ``slayout`` (PyPTO's
    layout hints) change nothing on the sim.
    """
    current("pl.move")
    tl = _tile(tile, "pl.move")
    if transpose:
        tl = record(Transpose(tl.var), "pl.move(transpose=True)")
    return record(Move(tl.var, space_name(target_memory, "pl.move")), "pl.move")


def create_tile(shape, dtype, target_memory=MemorySpace.Vec, *, valid_shape=None) -> Tile:
    """Allocate a tile of ``shape`` and ``dtype`` in ``target_memory``.

    Its contents are unspecified in PyPTO (a scratch buffer); the sim fills
    zeros.  ``valid_shape`` marks only a leading box as data.
    """
    current("pl.create_tile")
    loc = user_loc()
    try:
        d = as_dtype(dtype)
    except PtoArgumentError as exc:
        raise compile_error(f"pl.create_tile: {exc}", loc) from None
    shape = tuple(shape)
    memory = space_name(target_memory, "pl.create_tile")
    valid = valid_extents(valid_shape, "pl.create_tile")
    return record(Full(shape, Const(0, d), d, memory, valid), "pl.create_tile")


def copy(dst, src, source_memory=MemorySpace.DDR, target_memory=MemorySpace.DDR):
    """Copy tensor ``src`` into tensor ``dst`` (destination first); return ``dst``.

    Both are tensor parameters of one shape and dtype, in DDR; ``dst`` must be
    ``pl.Out`` or ``pl.InOut``.
    """
    current("pl.copy")
    loc = user_loc()
    d, s = _tensor(dst, "pl.copy"), _tensor(src, "pl.copy")
    for what, m in (("source_memory", source_memory), ("target_memory", target_memory)):
        if space_name(m, "pl.copy", what) != "DDR":
            raise compile_error(f"pl.copy: {what} must be pl.MemorySpace.DDR for tensors (use pl.move for tiles)",
                                loc)
    if d.shape != s.shape or d.dtype != s.dtype:
        raise compile_error(
            f"pl.copy: {s.name!r} is {s.dtype.name}{list(s.shape)}, {d.name!r} is {d.dtype.name}{list(d.shape)}", loc
        )
    zero = [0] * len(s.shape)
    return store(load(src, zero, list(s.shape)), zero, dst)


_PAD_SUGAR = {0: "zero", float("inf"): "max", float("-inf"): "min"}


def pad_name(pad_value, op: str) -> str | None:
    """``PadValue`` (or the sugars ``0``, ``math.inf``, ``-math.inf``) as the IR's name; None for null."""
    if isinstance(pad_value, PadValue):
        return None if pad_value is PadValue.null else pad_value.value
    if isinstance(pad_value, (int, float)) and not isinstance(pad_value, bool) and pad_value in _PAD_SUGAR:
        return _PAD_SUGAR[pad_value]
    raise compile_error(
        f"{op}: pad_value must be a pl.PadValue (zero, max, min) or 0, math.inf, -math.inf, got {pad_value!r}",
        user_loc(),
    )


def fillpad(tile, pad_value=PadValue.zero) -> Tile:
    """Return the tile with every element outside its valid region set to the pad value.

    ``PadValue.zero``, ``max`` (+inf, or the dtype's largest value) or
    ``min`` (-inf, or the smallest).  The result is fully valid.
    """
    return _fillpad(tile, pad_value, "pl.fillpad")


def fillpad_inplace(tile, pad_value=PadValue.zero) -> Tile:
    """PyPTO's ``pl.tile.fillpad_inplace``: :func:`fillpad` whose result reuses the input's buffer on a board.

    The value is fillpad's; the buffer reuse is the device allocator's
    business, so here the result is a tile of its own (the input keeps its
    valid region and values).
    """
    return _fillpad(tile, pad_value, "pl.tile.fillpad_inplace")


def _fillpad(tile, pad_value, op: str) -> Tile:
    current(op)
    tl = _tile(tile, op)
    pad = pad_name(pad_value, op)
    if pad is None:
        raise compile_error(f"{op}: PadValue.null fills nothing; choose zero, max or min", user_loc())
    return record(FillPad(tl.var, pad), op)


def assemble(dst, src, offset, atomic=None):
    """Write tile ``src`` into ``dst`` at ``offset`` (PyPTO's name).

    ``dst`` a tensor parameter: the tile (or a whole tensor, loaded) is stored
    there (``atomic=pl.AtomicType.Add`` adds it in), and the tensor is returned;
    a source of another dtype is converted to the tensor's (PyPTO's
    ``tensor.assemble`` types its result as the target).  ``dst`` a
    tile: the same as ``pl.tile.assemble`` (a new tile).
    """
    current("pl.assemble")
    if isinstance(dst, Tile):
        if _atomic(atomic, "pl.assemble") is not None:
            raise compile_error("pl.assemble: atomic applies to a tensor destination only", user_loc())
        from ._layout import tile_assemble

        return tile_assemble(dst, src, offset)
    src = as_tile(src)
    if isinstance(src, Tile) and isinstance(dst, TensorArg) and src.dtype != dst.dtype:
        # PyPTO's tensor.assemble types its result as the target (it checks no source dtype): the
        # source's values are written in the target's dtype (pl.store, a tile-level op, still refuses).
        from ._ops import cast

        src = cast(src, dst.dtype)
    return store(src, offset, dst, atomic=atomic)


def _statements(blocks):
    for block in blocks:
        for s in block:
            yield s
            for name in ("body", "then_body", "else_body"):
                inner = getattr(s, name, None)
                if isinstance(inner, tuple):
                    yield from _statements([inner])


def tile_read(tile, indices):
    """PyPTO's ``pl.tile.read(tile, indices)``: one element of an integer tile, as a runtime scalar.

    Here the tile must be a load of an integer input tensor that nothing
    writes in place afterwards: the element is then the tensor's, read when
    the region runs (as :func:`pl.read <pypto_async.language.read>` reads
    it), at the load's offset plus ``indices``.  The result is an INT64
    index (PyPTO's ``pl.cast(row, pl.INDEX)`` of it is the value itself).
    """
    from ..ir._bounds import index_range
    from ..ir._nodes import IBin, IRead, MatmulAcc, Update
    from ._runtime_scalars import INTEGER_DTYPES, _bind
    from ._tracer import to_index

    t = current("pl.tile.read")
    loc = user_loc()
    if not isinstance(tile, Tile):
        raise compile_error(f"pl.tile.read: expected a tile, got {tile!r} (a tensor's element is pl.read)", loc)
    if "at" not in t.frames:
        raise compile_error("pl.tile.read runs inside a pl.at region (or an InCore function)", loc)
    if not isinstance(indices, (list, tuple)):
        indices = [indices]
    shape = tile.var.type.shape
    if len(indices) != len(shape):
        raise compile_error(f"pl.tile.read: {len(indices)} indices for the {len(shape)}-d tile {list(shape)}", loc)
    load = None
    for s in _statements(t.blocks):
        if isinstance(s, Assign) and s.var.id == tile.var.id:
            load = s.expr if isinstance(s.expr, Load) else None
        elif isinstance(s, (Update, MatmulAcc)) and getattr(s, "target", getattr(s, "acc", None)).id == tile.var.id:
            raise compile_error("pl.tile.read: the tile is written in place before this read; here a tile's "
                                "element is read only from a tile loaded from an input tensor and left as loaded", loc)
    p = t.params.get(load.param) if load is not None else None
    if p is None or p.direction != "in":
        raise compile_error("pl.tile.read: here a tile's element is read only from a tile loaded (pl.load) from an "
                            "input tensor of the kernel, left as loaded; read the tensor with pl.read", loc)
    if p.dtype.name not in INTEGER_DTYPES:
        raise compile_error(f"pl.tile.read: the tile is {p.dtype.name}; only integer tiles "
                            f"({', '.join(INTEGER_DTYPES)}) are read as runtime scalars here", loc)
    offs = []
    for d, (i, base) in enumerate(zip(indices, load.offsets)):
        e = to_index(i, "pl.tile.read index")
        bounds = index_range(e, t.ranges, loc, runtime_ok=True)
        valid = load.valid[d] if load.valid is not None else shape[d]
        hi_ok = shape[d] if not isinstance(valid, int) else min(shape[d], valid)
        if bounds is not None and (bounds[0] < 0 or bounds[1] >= hi_ok):
            raise compile_error(f"pl.tile.read: index [{bounds[0]}..{bounds[1]}] of dimension {d} is outside "
                                f"[0, {hi_ok}) of the tile's valid region", loc)
        offs.append(IBin("+", base, e))
    return _bind(t, IRead(p.name, tuple(offs), p.shape), loc)
