"""``pl.tensor``: the tensor-level spellings of PyPTO's ops (``pl.tensor.read``, ``pl.tensor.dim``, ...).

PyPTO dispatches ``pl.add(a, b)`` on its operands' level; ``pl.tensor.add``
names the tensor-level op outright (its programs spell ``pl.tensor.read``
and ``pl.tensor.dim`` in orchestration code).  Here:

* ``read(t, [i, ...])`` is ``pl.read``: the element, read when the task
  that uses it runs (a runtime scalar; see :mod:`._runtime_scalars`).
* ``dim(t, axis)`` is the extent of ``t``'s dimension ``axis`` (negative
  axes count from the end).  PyPTO returns a scalar the orchestration reads
  at run time; here a kernel is traced, and compiled, for its arguments'
  shapes, so the extent is known when it is traced and ``dim`` gives the int
  (it may shape tensors and bound loops).
* ``slice(t, shape, offset)`` is the window ``t[offset : offset + shape]``
  of a tensor, which a kernel call or a region then reads or writes (PyPTO's
  tensor view; no data moves).  ``valid_shape=`` marks a leading box of it
  as its data: loads from it are partial there, as ``pl.load(...,
  valid_shape=)``.
* ``view(t, shape=None, valid_shape=None, *, layout=None)`` is PyPTO's
  reinterpreting view: ``t``'s elements read as ``shape`` (row-major) or,
  with ``layout=pl.TensorLayout.DN``, column-major in the trailing pair (see
  :func:`._ops_extended.tensor_view`).  The older window form is ``pl.view``.
* ``create`` / ``create_tensor`` is ``pl.create_tensor``; ``assemble`` is
  ``pl.assemble`` (a tile into a tensor).
* The element-wise, reduction, broadcast and layout ops are the top-level
  ones: on a tensor (or a window of one) they load it whole and compute on
  the tile (tensor-level ops are sugar here, as :mod:`pypto_async.language`
  says), so ``pl.tensor.add(a, b)`` is ``pl.add(a, b)``.
"""

from __future__ import annotations

from ..errors import PtoNotSupported
from ..ir._diag import compile_error
from ._layout import (
    col_expand,
    col_expand_add,
    col_expand_div,
    col_expand_mul,
    col_expand_sub,
    concat,
    reshape,
    row_expand,
    row_expand_add,
    row_expand_div,
    row_expand_mul,
    row_expand_sub,
    transpose,
)
from ._memory import assemble, fillpad
from . import _ops
from ._ops import (
    abs,  # noqa: A004
    add,
    cast,
    col_max,
    col_min,
    col_sum,
    div,
    divs,
    exp,
    log,
    matmul,
    matmul_acc,
    maximum,
    minimum,
    mul,
    muls,
    neg,
    recip,
    row_max,
    row_min,
    row_sum,
    rsqrt,
    sqrt,
    sub,
    subs,
)
from ._ops_extended import and_, ands, cmp, expands, not_, or_, ors, shl, shls, shr, shrs, xor, xors
from ._ops_extended import tensor_view as view
from ._program import create_tensor, window
from ._ops_gather import gather, gather_row, paged_gather, scatter, scatter_update
from ._runtime_scalars import read
from ._submit import dump_tag
from ._tracer import Index, TensorArg, current, user_loc
from ._ops_index import arange, ci, col_argmax, col_argmin, create_l1, random, row_argmax, row_argmin, sort32
from ._ops_index import tensor_mrgsort as mrgsort

create = create_tensor

__all__ = [
    "dump_tag",
    "create",
    "create_tensor",
    "read",
    "dim",
    "slice",
    "fillpad",
    "full",
    "assemble",
    "concat",
    "reshape",
    "transpose",
    "view",
    "matmul",
    "matmul_acc",
    "add",
    "adds",
    "sub",
    "subs",
    "mul",
    "muls",
    "div",
    "divs",
    "maximum",
    "minimum",
    "cmp",
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
    "row_max",
    "row_sum",
    "row_min",
    "col_sum",
    "col_max",
    "col_min",
    "row_expand",
    "row_expand_mul",
    "row_expand_div",
    "row_expand_add",
    "row_expand_sub",
    "col_expand",
    "col_expand_mul",
    "col_expand_div",
    "col_expand_sub",
    "col_expand_add",
    "expands",
    "exp",
    "log",
    "neg",
    "abs",
    "recip",
    "sqrt",
    "rsqrt",
    "cast",
    "row_argmax",
    "row_argmin",
    "col_argmax",
    "col_argmin",
    "sort32",
    "mrgsort",
    "ci",
    "arange",
    "random",
    "gather",
    "gather_row",
    "paged_gather",
    "scatter",
    "scatter_update",
    "create_l1",
]


def full(shape, dtype, value):
    """A tile of ``shape`` filled with ``value`` (PyPTO's ``tensor.full(shape, dtype, value)``)."""
    return _ops.full(shape, value=value, dtype=dtype)


def adds(lhs, rhs):
    """``lhs + rhs`` for a scalar ``rhs`` (PyPTO's scalar-operand form of ``add``)."""
    return add(lhs, rhs)


def _tensor(t, op: str) -> TensorArg:
    from ._unify import is_pending

    if is_pending(t):  # extents read at run time: the tensor it became at its first kernel call
        t.shape  # noqa: B018 - raises until a kernel call fixed them
        t = t.resolved
    if not isinstance(t, TensorArg):
        raise compile_error(f"pl.tensor.{op}: expected a tensor (a parameter, a pl.create_tensor tensor or a window "
                            f"of one), got {t!r}", user_loc())
    return t


def dim(tensor, axis: int) -> int:
    """The extent of ``tensor``'s dimension ``axis`` (negative counts from the end), an int here (see the module doc)."""
    t = _tensor(tensor, "dim")
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise compile_error(f"pl.tensor.dim: axis must be an int, got {axis!r}", user_loc())
    rank = len(t.shape)
    if not -rank <= axis < rank:
        raise compile_error(f"pl.tensor.dim: axis {axis} is out of range for the {rank}-d tensor {t.name!r}",
                            user_loc())
    from ._tracer import ScalarArg

    n = t.shape[axis]
    return n if isinstance(n, ScalarArg) else int(n)  # a run-time extent (pl.dynamic): its scalar


def slice(tensor, shape, offset, valid_shape=None, drop_dims=None, pad_value=None,  # noqa: A001 - PyPTO's name
          clamp: bool = False):
    """The ``shape`` window of ``tensor`` at ``offset`` (ints, loop indices or runtime scalars); see the module doc.

    ``drop_dims``, ``pad_value`` and ``clamp=True`` (a window running off the
    tensor's end, its valid box cut back to the edge) act inside a region
    or an InCore function, where the window is loaded as a tile, as
    ``pl.slice``'s do.
    """
    t = _tensor(tensor, "slice")
    loc = user_loc()
    if clamp or pad_value is not None or (drop_dims is not None and list(drop_dims)):
        if "at" not in current("pl.tensor.slice").frames:
            raise PtoNotSupported(f"{loc}: pl.tensor.slice(drop_dims= / pad_value= / clamp=) of a tensor in the "
                                  f"orchestration: a window passed to kernels keeps its extents here; use them "
                                  f"on the tiles a kernel loads (pl.load(..., clamp=True))")
        from ._layout import slice as tile_slice

        return tile_slice(tensor, shape, offset, valid_shape, drop_dims, pad_value, clamp)
    shape, offset = list(shape), list(offset)
    if len(shape) != len(t.shape) or len(offset) != len(t.shape):
        raise compile_error(f"pl.tensor.slice: shape {shape} and offset {offset} need one entry per dimension of "
                            f"the {len(t.shape)}-d tensor {t.name!r}", loc)
    tracer = current("pl.tensor.slice")
    if (any(isinstance(d, Index) for d in shape) and getattr(tracer, "is_program", False)
            and "at" not in tracer.frames):  # extents read at run time: sized by the kernel it is passed to
        from ._unify import PendingWindow

        return PendingWindow(t, shape, offset, valid_shape, loc)
    from ._placement import same_extent
    from ._tracer import ScalarArg

    key = []
    for d, o, n in zip(shape, offset, t.shape):
        if isinstance(d, ScalarArg) and isinstance(n, ScalarArg) and same_extent(d, n) and \
                isinstance(o, int) and o == 0:
            key.append(builtins_slice(None, None))  # the whole of a run-time (pl.dynamic) extent
            continue
        if isinstance(d, bool) or not isinstance(d, int):
            raise compile_error(f"pl.tensor.slice: a window's extents are ints here, or a dimension's whole "
                                f"run-time extent from offset 0 (pl.tensor.dim of a pl.dynamic dimension); got "
                                f"{d!r} in {shape}; mark a partial window with valid_shape=", loc)
        key.append(builtins_slice(o, o + d))
    key = tuple(key)
    out = window(t, key)
    if valid_shape is not None:
        valid = list(valid_shape)
        if len(valid) != len(shape):
            raise compile_error(f"pl.tensor.slice: valid_shape {valid} needs one entry per dimension", loc)
        out.valid = tuple(valid)
    return out


builtins_slice = __builtins__["slice"] if isinstance(__builtins__, dict) else __builtins__.slice

from ._ops_math import TENSOR_OPS as _math_tensor_ops  # noqa: E402 - sin, fmod, part_*, row_prod, ... (tensor names)

for _name, _fn in _math_tensor_ops.items():
    globals().setdefault(_name, _fn)
__all__ += [name for name in _math_tensor_ops if name not in __all__]

from ._runtime_scalars import write  # noqa: E402 - PyPTO's tensor.write: one element of an Out/InOut tensor

__all__ += ["write"]
