"""PyPTO's extended tile ops: remainder, three-operand add/sub, prelu, bitwise, shifts, compare/select, gemv.

Each records IR at the caller's line and is checked there, as the ops of
``_ops`` are.  Most are one IR expression (``Binary``, ``Unary``, ``Compare``,
``Select``, ``Matmul`` with a bias); ``addc``/``subc``/``addsc``/``subsc`` are
two binary ops, ``expands`` a ``full``.

``tmp`` arguments (PyPTO's scratch tiles for the device's instructions) are
optional here; one given must be a tile, and changes no result.
``acc_phase`` of the gemv ops is checked against PyPTO's values, recorded
in the IR (printed) and changes no result on the simulator.

A tensor operand inside a region is loaded whole, as for the other
element-wise ops; ``pl.cmp`` of a tensor then follows PyPTO's tensor-level
meaning (a 0/1 tile of the operand's dtype), of a tile the tile-level one (a
packed predicate mask).
"""

from __future__ import annotations

import math

from .._dtypes import BOOL
from ..ir._infer import check_matmul_acc, compile_error
from ..ir._nodes import ACC_PHASES, CMP_TYPES, Binary, Compare, Const, Full, Matmul, MatmulAcc, Select, Unary
from ._memory import _tile as tile_operand
from ._memory import as_tile, record
from ._ops import _binary, _scalar
from ._tracer import ScalarArg, TensorArg, Tile, current, user_loc

__all__ = [
    "rem",
    "rems",
    "addc",
    "subc",
    "addsc",
    "subsc",
    "expands",
    "prelu",
    "and_",
    "ands",
    "or_",
    "ors",
    "xor",
    "xors",
    "not_",
    "shl",
    "shls",
    "shr",
    "shrs",
    "cmp",
    "cmps",
    "sel",
    "sels",
    "matmul_bias",
    "gemv",
    "gemv_acc",
    "gemv_bias",
    "sum",
    "view",
]


def _tile(x, op: str, what: str = "operand") -> Tile:
    return tile_operand(x, f"pl.{op}", what)


def _tmp(tmp, op: str) -> None:
    """PyPTO's scratch tile: not needed here, but one given must be a tile."""
    if tmp is not None:
        _tile(tmp, op, "tmp")


def _no_tile(x, op: str, base: str) -> None:
    if isinstance(as_tile(x), Tile):
        raise compile_error(f"pl.{op} takes a tile and a scalar (a number or a pl.Scalar parameter), got "
                            f"{x!r} as the scalar; use pl.{base} for two tiles", user_loc())


def _int_scalar(x, op: str, shift: bool = False) -> None:
    """Bitwise and shift scalars are integers; a constant shift amount is not negative."""
    if isinstance(x, ScalarArg):
        if x.dtype.is_float or x.dtype == BOOL:
            raise compile_error(f"pl.{op}: the scalar {x.name!r} is {x.dtype.name}; it must be an integer", user_loc())
        return
    if isinstance(as_tile(x), Tile):
        return
    if isinstance(x, bool) or not isinstance(x, int) and not (hasattr(x, "dtype") and x.dtype.kind in "iu"):
        raise compile_error(f"pl.{op}: the scalar must be an integer, got {x!r}", user_loc())
    if shift and int(x) < 0:
        raise compile_error(f"pl.{op}: the shift amount must be zero or positive, got {int(x)}", user_loc())


# ---- remainder ---------------------------------------------------------------------------------


def rem(lhs, rhs, tmp=None) -> Tile:
    """Return ``lhs % rhs`` as Python's ``%``: the remainder takes the divisor's sign.

    Integer tiles give 0 for a zero divisor, float tiles NaN.  ``rhs`` may be
    a tile or a scalar.
    """
    current("pl.rem")
    _tmp(tmp, "rem")
    return _binary("rem", lhs, rhs)


def rems(lhs, rhs, tmp=None) -> Tile:
    """Return ``lhs % rhs`` for a scalar ``rhs`` (as :func:`rem`)."""
    current("pl.rems")
    _no_tile(rhs, "rems", "rem")
    _tmp(tmp, "rems")
    return _binary("rem", lhs, rhs)


# ---- three-operand add / sub -------------------------------------------------------------------


def addc(lhs, rhs, rhs2) -> Tile:
    """Return ``lhs + rhs + rhs2`` (three tiles, broadcasting)."""
    current("pl.addc")
    _tile(rhs, "addc", "rhs")
    _tile(rhs2, "addc", "rhs2")
    return _binary("add", _binary("add", lhs, rhs), rhs2)


def subc(lhs, rhs, rhs2) -> Tile:
    """Return ``lhs - rhs - rhs2`` (three tiles, broadcasting)."""
    current("pl.subc")
    _tile(rhs, "subc", "rhs")
    _tile(rhs2, "subc", "rhs2")
    return _binary("sub", _binary("sub", lhs, rhs), rhs2)


def addsc(lhs, rhs, rhs2) -> Tile:
    """Return ``lhs + rhs + rhs2`` with ``rhs`` a scalar."""
    current("pl.addsc")
    _no_tile(rhs, "addsc", "addc")
    _tile(rhs2, "addsc", "rhs2")
    return _binary("add", _binary("add", _tile(lhs, "addsc", "lhs"), rhs), rhs2)


def subsc(lhs, rhs, rhs2) -> Tile:
    """Return ``lhs - rhs - rhs2`` with ``rhs`` a scalar."""
    current("pl.subsc")
    _no_tile(rhs, "subsc", "subc")
    _tile(rhs2, "subsc", "rhs2")
    return _binary("sub", _binary("sub", _tile(lhs, "subsc", "lhs"), rhs), rhs2)


def expands(target, scalar) -> Tile:
    """Return a tile of ``target``'s shape and dtype with every element ``scalar``."""
    current("pl.expands")
    t = _tile(target, "expands", "target")
    _no_tile(scalar, "expands", "row_expand")
    return record(Full(t.shape, _scalar(scalar, t.dtype, "expands"), t.dtype), "pl.expands")


# ---- activations -------------------------------------------------------------------------------


def prelu(tile, slope, tmp=None) -> Tile:
    """Parametric ReLU: ``x`` where ``x > 0``, else ``slope * x``, with ``slope`` a tile of ``tile``'s shape.

    Float tiles only (PyPTO: FP16 or FP32); NaN stays NaN.
    """
    current("pl.prelu")
    x, s = _tile(tile, "prelu", "tile"), _tile(slope, "prelu", "slope")
    _tmp(tmp, "prelu")
    if x.shape != s.shape:
        raise compile_error(f"pl.prelu: slope {list(s.shape)} must have the tile's shape {list(x.shape)}", user_loc())
    return record(Binary("prelu", x.var, s.var), "pl.prelu")


# ---- bitwise and shifts (integer tiles) ----------------------------------------------------------


def _bitwise(op: str, lhs, rhs, shift: bool = False) -> Tile:
    current(f"pl.{op}")
    _int_scalar(rhs, op, shift)
    return _binary(op, lhs, rhs)


def _bitwise_scalar(op: str, base: str, lhs, rhs, shift: bool = False) -> Tile:
    current(f"pl.{op}")
    _no_tile(rhs, op, base)
    _int_scalar(rhs, op, shift)
    _tile(lhs, op, "lhs")
    return _binary(base, lhs, rhs)


def and_(lhs, rhs) -> Tile:
    """Return ``lhs & rhs`` (integer tiles; ``rhs`` a tile or an integer scalar)."""
    return _bitwise("and_", lhs, rhs)


def ands(lhs, rhs) -> Tile:
    """Return ``lhs & rhs`` for an integer scalar ``rhs``."""
    return _bitwise_scalar("ands", "and_", lhs, rhs)


def or_(lhs, rhs) -> Tile:
    """Return ``lhs | rhs`` (integer tiles)."""
    return _bitwise("or_", lhs, rhs)


def ors(lhs, rhs) -> Tile:
    """Return ``lhs | rhs`` for an integer scalar ``rhs``."""
    return _bitwise_scalar("ors", "or_", lhs, rhs)


def xor(lhs, rhs, tmp=None) -> Tile:
    """Return ``lhs ^ rhs`` (integer tiles; ``tmp`` is PyPTO's scratch tile, optional here)."""
    current("pl.xor")
    _tmp(tmp, "xor")
    return _bitwise("xor", lhs, rhs)


def xors(lhs, rhs, tmp=None) -> Tile:
    """Return ``lhs ^ rhs`` for an integer scalar ``rhs``."""
    current("pl.xors")
    _tmp(tmp, "xors")
    return _bitwise_scalar("xors", "xor", lhs, rhs)


def not_(x) -> Tile:
    """Return ``~x`` (integer tiles)."""
    current("pl.not_")
    return record(Unary("not_", _tile(x, "not_").var), "pl.not_")


def shl(lhs, rhs) -> Tile:
    """Return ``lhs << rhs`` (integer tiles, wrapping; a shift of the width or more gives 0)."""
    return _bitwise("shl", lhs, rhs, shift=True)


def shls(lhs, rhs) -> Tile:
    """Return ``lhs << rhs`` for a scalar amount ``rhs >= 0``."""
    return _bitwise_scalar("shls", "shl", lhs, rhs, shift=True)


def shr(lhs, rhs) -> Tile:
    """Return ``lhs >> rhs``: arithmetic for signed dtypes, logical for unsigned.

    A shift of the width or more gives 0 (or -1 for a negative signed value).
    """
    return _bitwise("shr", lhs, rhs, shift=True)


def shrs(lhs, rhs) -> Tile:
    """Return ``lhs >> rhs`` for a scalar amount ``rhs >= 0``."""
    return _bitwise_scalar("shrs", "shr", lhs, rhs, shift=True)


# ---- compare and select ------------------------------------------------------------------------


def _cmp_name(cmp_type, op: str) -> str:
    if isinstance(cmp_type, bool) or not isinstance(cmp_type, int) or not 0 <= cmp_type < len(CMP_TYPES):
        raise compile_error(f"pl.{op}: cmp_type must be 0-5 (0=eq, 1=ne, 2=lt, 3=le, 4=gt, 5=ge), got {cmp_type!r}",
                            user_loc())
    return CMP_TYPES[cmp_type]


def _compare(op: str, lhs, rhs, cmp_type) -> Tile:
    name = _cmp_name(cmp_type, op)
    tensor_level = isinstance(lhs, TensorArg)
    a = _tile(lhs, op, "lhs")
    b = as_tile(rhs)
    operand = b.var if isinstance(b, Tile) else _scalar(b, a.dtype, op)
    mask = record(Compare(a.var, operand, name), f"pl.{op}")
    if not tensor_level:
        return mask
    # PyPTO's tensor-level cmp: a 0/1 tensor of the operand's dtype.
    ones = record(Full(_result_shape(a, b), Const(1, a.dtype), a.dtype), f"pl.{op}")
    return record(Select(mask.var, ones.var, Const(0, a.dtype)), f"pl.{op}")


def _result_shape(a: Tile, b) -> tuple:
    if not isinstance(b, Tile):
        return a.shape
    n = max(len(a.shape), len(b.shape))
    pa = (1,) * (n - len(a.shape)) + tuple(a.shape)
    pb = (1,) * (n - len(b.shape)) + tuple(b.shape)
    return tuple(max(x, y) for x, y in zip(pa, pb))


def cmp(lhs, rhs, cmp_type=0) -> Tile:
    """Compare element-wise (``cmp_type`` 0=eq, 1=ne, 2=lt, 3=le, 4=gt, 5=ge); ``rhs`` a tile or a scalar.

    On tiles the result is PyPTO's packed predicate mask: a UINT8 tile of
    ``ceil(cols / 8)`` bytes per row rounded up to 32, bit ``j % 8`` of byte
    ``j // 8`` for element ``j`` (see ``pl.sel``).  On a tensor (inside a
    region) it is PyPTO's tensor-level form: 1 where true, else 0, in the
    operand's dtype.  NaN compares unequal to everything.
    """
    current("pl.cmp")
    return _compare("cmp", lhs, rhs, cmp_type)


def cmps(lhs, rhs, cmp_type=0) -> Tile:
    """Compare a tile with a scalar (as :func:`cmp`)."""
    current("pl.cmps")
    _no_tile(rhs, "cmps", "cmp")
    return _compare("cmps", lhs, rhs, cmp_type)


def sel(mask, lhs, rhs, tmp=None) -> Tile:
    """Return ``lhs`` where the mask bit of the element is set, else ``rhs`` (a tile or a scalar).

    ``mask`` is a ``pl.cmp`` result or any integer tile holding such bits
    (bit ``j % 8`` of byte ``j // 8`` of its row, bytes in memory order).
    """
    current("pl.sel")
    m, a = _tile(mask, "sel", "mask"), _tile(lhs, "sel", "lhs")
    _tmp(tmp, "sel")
    b = as_tile(rhs)
    operand = b.var if isinstance(b, Tile) else _scalar(b, a.dtype, "sel")
    return record(Select(m.var, a.var, operand), "pl.sel")


def sels(mask, src, tmp=None, scalar=None) -> Tile:
    """Return ``src`` where the mask bit is set, else ``scalar`` (PyPTO's order: ``mask, src, tmp, scalar``)."""
    current("pl.sels")
    if scalar is None:
        raise compile_error("pl.sels needs the scalar: pl.sels(mask, src, tmp, scalar)", user_loc())
    _no_tile(scalar, "sels", "sel")
    return sel(mask, src, scalar, tmp)


# ---- matmul with bias, gemv --------------------------------------------------------------------


def matmul_bias(lhs, rhs, bias) -> Tile:
    """Return ``lhs @ rhs + bias`` (in Acc), ``bias`` a ``[1, n]`` tile in the product's dtype (FP32, or FP64).

    The bias may be in Bias (``pl.move(b, target_memory=pl.Mem.Bias)``), Vec or Mat.
    """
    current("pl.matmul_bias")
    a, b = _tile(lhs, "matmul_bias", "lhs"), _tile(rhs, "matmul_bias", "rhs")
    bt = _tile(bias, "matmul_bias", "bias")
    return record(Matmul(a.var, b.var, bt.var), "pl.matmul_bias")


def _gemv_checks(op: str, lhs, acc_phase) -> None:
    if acc_phase not in ACC_PHASES:
        raise compile_error(f"pl.{op}: acc_phase must be one of {', '.join(ACC_PHASES)}, got {acc_phase!r}",
                            user_loc())
    a = _tile(lhs, op, "lhs")
    if len(a.shape) != 2 or a.shape[0] != 1:
        raise compile_error(f"pl.{op}: lhs must be a [1, K] row vector, got {list(a.shape)}", user_loc())


def gemv(lhs, rhs, acc_phase="unspecified") -> Tile:
    """Return ``lhs @ rhs`` for a ``[1, K]`` row vector ``lhs`` (in Acc).

    ``acc_phase`` (PyPTO's ``"unspecified"``, ``"partial"`` or ``"final"``)
    is a hint for the device's accumulation; it is recorded in the IR and
    changes nothing on the sim.
    """
    current("pl.gemv")
    _gemv_checks("gemv", lhs, acc_phase)
    a, b = _tile(lhs, "gemv", "lhs"), _tile(rhs, "gemv", "rhs")
    return record(Matmul(a.var, b.var, None, acc_phase), "pl.gemv")


def gemv_acc(acc, lhs, rhs, acc_phase="unspecified") -> Tile:
    """Add ``lhs @ rhs`` (``lhs`` a ``[1, K]`` row) into ``acc`` in place and return it (as ``pl.matmul_acc``)."""
    t = current("pl.gemv_acc")
    loc = user_loc()
    _gemv_checks("gemv_acc", lhs, acc_phase)
    tacc = _tile(acc, "gemv_acc", "acc")
    ta, tb = _tile(lhs, "gemv_acc", "lhs"), _tile(rhs, "gemv_acc", "rhs")
    check_matmul_acc(tacc.var, ta.var, tb.var, loc)
    t.append(MatmulAcc(tacc.var, ta.var, tb.var, loc, acc_phase))
    return tacc


def gemv_bias(lhs, rhs, bias, acc_phase="unspecified") -> Tile:
    """Return ``lhs @ rhs + bias`` for a ``[1, K]`` row vector ``lhs`` (the bias as for ``pl.matmul_bias``)."""
    current("pl.gemv_bias")
    _gemv_checks("gemv_bias", lhs, acc_phase)
    a, b = _tile(lhs, "gemv_bias", "lhs"), _tile(rhs, "gemv_bias", "rhs")
    bt = _tile(bias, "gemv_bias", "bias")
    return record(Matmul(a.var, b.var, bt.var, acc_phase), "pl.gemv_bias")


# ---- PyPTO's older tensor-level spellings -------------------------------------------------------------


def sum(x, axis=-1, keep_dim=True) -> Tile:  # noqa: A001
    """Sum a 2-D tile (or tensor) along ``axis``: -1 or 1 gives ``[rows, 1]``, 0 or -2 ``[1, cols]``.

    PyPTO's earlier tensor-level reduction (``pl.sum(t, axis=-1,
    keep_dim=True)``), which its main branch spells ``pl.row_sum`` /
    ``pl.col_sum``; ``keep_dim=False`` drops the reduced dimension.
    """
    current("pl.sum")
    t = _tile(x, "sum", "input")
    if len(t.shape) != 2 or axis not in (-1, 0, 1, -2) or isinstance(axis, bool):
        raise compile_error(f"pl.sum reduces a 2-D tile along axis -1/1 (rows) or 0/-2 (columns), got shape "
                            f"{list(t.shape)}, axis={axis!r}", user_loc())
    from ._layout import reshape
    from ._ops import col_sum, row_sum

    out = row_sum(t) if axis in (-1, 1) else col_sum(t)
    if keep_dim:
        return out
    return reshape(out, [t.shape[0] if axis in (-1, 1) else t.shape[1]])


def tensor_view(tensor, shape=None, valid_shape=None, *, layout=None):
    """PyPTO's ``pl.tensor.view``: the tensor's elements read as ``shape`` (row-major), or as ``layout``.

    At least one of ``shape`` and ``layout`` is given.  ``shape`` keeps the
    element count (row-major order, canonical strides: ``pl.reshape``'s
    values); ``layout=pl.TensorLayout.DN`` reads the same memory
    column-major in the trailing pair, so ``view(x, layout=DN)`` of an
    ``[8, 4]`` tensor is ``[4, 8]``, element ``[i, j]`` being ``x[j, i]``
    (with ``shape=[..., a, b]`` too: element ``[..., i, j]`` is flat element
    ``i + j * a`` of its matrix).  ``ND`` is the row-major reading, ``NZ`` is
    refused.  ``valid_shape`` (with ``shape``) marks a leading box of the
    result as its data, as ``pl.set_validshape`` (2-D results only).

    Outside every region (a program's orchestration, a ``@pl.jit`` body)
    the result is a tensor, a new intermediate written by a task of its own
    (``view_<tensor>``) that regions load and kernels take, as ``pl.reshape``
    there.  Inside a region it is the tile of those values (the tensor
    loaded whole); ``pl.load`` of it reads a window of that tile.  Either is
    only read: PyPTO's is a view of the same bytes, writable, and a store
    into one here raises ``PtoNotSupported``.  The old window form,
    ``pl.view(tensor, shape, offset)``, is :func:`view`.
    """
    current("pl.tensor.view")
    loc = user_loc()
    from ._layout import reshape, transpose
    from ._program import in_orchestration, orchestration_view
    from ._view import TensorLayout

    if not isinstance(tensor, TensorArg):
        raise compile_error(f"pl.tensor.view: expected a tensor, got {tensor!r} (pl.reshape a tile)", loc)
    if layout is not None and not isinstance(layout, TensorLayout):
        raise compile_error(f"pl.tensor.view: layout must be a pl.TensorLayout (ND or DN), got {layout!r}", loc)
    if layout is TensorLayout.NZ:
        raise compile_error("pl.tensor.view: layout must be ND or DN, not NZ (a fractal layout is a tile's)", loc)
    if shape is None and layout is None:
        raise compile_error("pl.tensor.view needs shape= or layout= (or both)", loc)
    if valid_shape is not None and shape is None:
        raise compile_error("pl.tensor.view: valid_shape= needs shape=", loc)
    column_major = layout is TensorLayout.DN
    src = [int(d) for d in tensor.shape]
    if shape is None:
        if len(src) < 2:
            raise compile_error(f"pl.tensor.view(layout=DN) needs a tensor of rank 2 or more, got {src}", loc)
        target = src[:-2] + [src[-1], src[-2]]
    else:
        target = list(shape)
        if not target or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in target):
            raise compile_error(f"pl.tensor.view: shape must be positive ints (rank 1 or more), got {target}", loc)
        if math.prod(target) != math.prod(src):
            raise compile_error(f"pl.tensor.view: shape {target} holds {math.prod(target)} elements, the tensor "
                                f"{src} {math.prod(src)}", loc)
        if column_major and len(target) < 2:
            raise compile_error(f"pl.tensor.view(layout=DN) needs a shape of rank 2 or more, got {target}", loc)
    if valid_shape is not None:
        valid_shape = list(valid_shape)
        if len(target) != 2 or len(valid_shape) != 2:
            raise compile_error(f"pl.tensor.view: valid_shape= is taken for a 2-D view, got shape {target} and "
                                f"valid_shape {valid_shape}", loc)

    def build(tile):
        if column_major:  # each matrix read column-major: the transpose of the row-major [.., b, a]
            out = transpose(reshape(tile, target[:-2] + [target[-1], target[-2]]), -2, -1)
        else:
            out = reshape(tile, target)
        if valid_shape is not None:
            from ._ops_compose import set_validshape

            out = set_validshape(out, *valid_shape)
        return out

    frames = current("pl.tensor.view").frames
    if in_orchestration(tensor) or not any(f in ("at", "spmd") for f in frames):
        # Outside every region (a program's orchestration, a @pl.jit body): a tensor to pass on.
        if valid_shape is not None:
            raise compile_error("pl.tensor.view: valid_shape= outside a region is not supported here; give the "
                                "extent where a region loads the view (pl.load(..., valid_shapes=))", loc)
        return orchestration_view("view", tensor, target, build)
    out = build(tensor)
    out.view_of = f"pl.tensor.view of {tensor.name!r} in a region"  # pl.load takes it (a window of the tile)
    return out


def view(tensor, shape, offset) -> TensorArg:
    """The ``shape`` window of a tensor at ``offset`` (ints or loop indices), as ``tensor[o0:o0 + s0, ...]``.

    PyPTO's earlier ``pl.view(tensor, shape, offset)``; a window is read
    (and, for an output, written) where it lies in its tensor.
    """
    current("pl.view")
    if not isinstance(tensor, TensorArg):
        raise compile_error(f"pl.view: expected a tensor, got {tensor!r} (use pl.slice for a tile)", user_loc())
    shape, offset = list(shape), list(offset)
    if len(shape) != len(tensor.shape) or len(offset) != len(shape):
        raise compile_error(f"pl.view: shape {shape} and offset {offset} need one entry per dimension of the "
                            f"{len(tensor.shape)}-d tensor", user_loc())
    if not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape):
        raise compile_error(f"pl.view: shape must be positive ints, got {shape}", user_loc())
    from ._program import window

    return window(tensor, tuple(slice(o, o + d) for o, d in zip(offset, shape)))
