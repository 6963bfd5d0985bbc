"""Tensors of an orchestration whose extents are read when the program runs, sized by the kernel they feed.

PyPTO's orchestration may size an intermediate or a window from values it
reads from a config tensor (``pl.create_tensor([q_tile, head_dim_cfg])``,
``pl.slice(key_cache, [block_size_cfg, head_dim_cfg], [row, 0])``); the
kernel it is passed to declares a static shape (``pl.Tensor[[16, 128],
pl.FP32]``).  Here an intermediate's size is planned when the program is
compiled, so such a tensor is *pending* until its first kernel call: each
extent read at run time is unified with the parameter's extent there, the
tensor takes that static shape, and the orchestration checks, when it
reaches the call (before it submits the task), that the value it read is
that extent; otherwise the launch fails naming the extent, the kernel's
parameter and the line (and the worker keeps working).  An extent that is
an int must match the parameter as any argument's does.

A pending tensor is for kernel calls: using it otherwise before a call
fixed its shape (its ``shape``, a ``pl.slice`` of it, returning it) is a
compile error.  Once resolved it is that tensor for every later use, each
later call checked against the shape it took.
"""

from __future__ import annotations

from pathlib import Path

from ..ir._diag import compile_error
from ..ir._nodes import ICheck
from ._tracer import Index, TensorArg, user_loc

__all__ = ["PendingTensor", "PendingWindow", "is_pending", "resolve"]


class _Pending:
    """A tensor whose shape holds extents known only when the program runs (see the module)."""

    what = "tensor"

    def __init__(self, shape, loc):
        self.extents = tuple(shape)
        self.loc = loc
        self.resolved: TensorArg | None = None

    @property
    def shape(self):
        if self.resolved is not None:
            return self.resolved.shape
        raise compile_error(f"{self!r}: its shape is read when the program runs; pass it to a kernel first "
                            f"(the kernel's parameter fixes its extents)", user_loc())

    def __repr__(self) -> str:
        dims = ", ".join(repr(d) if isinstance(d, Index) else str(d) for d in self.extents)
        return f"<{self.what} [{dims}]>"

    def make(self, shape: tuple) -> TensorArg:
        raise NotImplementedError


class PendingTensor(_Pending):
    """``pl.create_tensor`` of extents read at run time: created with the shape of its first kernel's parameter."""

    what = "pl.create_tensor"

    def __init__(self, shape, dtype, kwargs: dict, loc):
        super().__init__(shape, loc)
        self.dtype, self.kwargs = dtype, kwargs

    def make(self, shape):
        from ._program import create_tensor

        return create_tensor(list(shape), self.dtype, **self.kwargs)


class PendingWindow(_Pending):
    """``pl.slice`` of a tensor with extents read at run time: the window its first kernel's parameter takes."""

    what = "pl.slice"

    def __init__(self, tensor: TensorArg, shape, offset, valid_shape, loc):
        super().__init__(shape, loc)
        self.tensor, self.offset, self.valid_shape = tensor, list(offset), valid_shape

    def make(self, shape):
        from .tensor import slice as tensor_slice

        return tensor_slice(self.tensor, list(shape), self.offset, self.valid_shape)


def is_pending(x) -> bool:
    return isinstance(x, _Pending)


def resolve(t, arg: _Pending, declared, kernel: str, pname: str, loc) -> TensorArg:
    """The tensor `arg` is as `kernel`'s parameter `pname` (static shape `declared`), its run-time extents checked.

    Emits, at the orchestration's current position (before the task), one
    check per extent read at run time; raises a compile error when an int
    extent disagrees, or when the parameter's shape is not static.
    """
    if declared is None or not all(isinstance(n, int) and not isinstance(n, bool) for n in declared):
        raise compile_error(f"{kernel}: parameter {pname!r} takes {arg!r}, whose extents are read when the program "
                            f"runs; the parameter must declare a static shape (ints) to fix them", loc)
    if len(declared) != len(arg.extents):
        raise compile_error(f"{kernel}: parameter {pname!r} is {len(declared)}-d, got {arg!r}", loc)
    shape = tuple(declared)
    if arg.resolved is not None and tuple(arg.resolved.shape) != shape:
        raise compile_error(f"{kernel}: parameter {pname!r} is {list(shape)}, but {arg!r} took the shape "
                            f"{list(arg.resolved.shape)} from an earlier kernel call", loc)
    from ._runtime_scalars import _bind

    where = f" at {Path(loc.file).name}:{loc.line}" if loc is not None else ""
    for d, (e, n) in enumerate(zip(arg.extents, shape)):
        if isinstance(e, Index):
            # Short: the driver keeps a message of PTI_MSG_LEN (160) bytes.
            msg = f"{pname!r} of {kernel}: extent {d} read at run time is not {n}{where}"
            _bind(t, ICheck(e.expr, n, msg), loc)
        elif e != n:
            raise compile_error(f"{kernel}: parameter {pname!r} is {list(shape)}, got {arg!r}: dimension {d} is "
                                f"{e}, not {n}", loc)
    if arg.resolved is None:
        arg.resolved = arg.make(shape)
    return arg.resolved
