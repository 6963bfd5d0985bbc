"""``pl.prefetch``: PyPTO's asynchronous GM -> L2 prefetch, a cache hint that changes no values.

On the device ``async_prefetch`` starts an SDMA pull of a flat global-memory region into L2 while
the kernel goes on, and ``wait`` blocks until it has landed::

    ctx = pl.prefetch.make_context()
    evt = pl.prefetch.async_prefetch(x, ctx)
    session = pl.prefetch.session(ctx)
    pl.prefetch.wait(evt, session)

The sim has no L2 to warm: the calls are checked as PyPTO's verifier checks them (in an InCore
function or a ``pl.at`` region, on the vector core: not in an orchestration or an AIC function; a
tensor parameter of static shape whose dimensions are all 1 but the last; each
handle of the kind its call takes) and the kernel computes what it computes without them.  A
prefetch is not a read of the tensor for the task graph (it reads no value the kernel uses).
The sim needs no SDMA workspace, so a worker opened without ``enable_sdma=True`` runs such a
kernel too.
"""

from __future__ import annotations

from .._scalars import is_int
from ..ir._diag import compile_error
from ._ops_crosscore import _kernel_side, _task_owner
from ._tracer import TensorArg, current, user_loc

__all__ = ["make_context", "async_prefetch", "session", "wait", "PrefetchAsyncContext", "AsyncEvent", "AsyncSession"]


class PrefetchAsyncContext:
    """What ``pl.prefetch.make_context()`` returns: the context a kernel's prefetches and their session share."""

    __slots__ = ("_tracer",)

    def __init__(self, tracer):
        self._tracer = tracer

    def __repr__(self) -> str:
        return "pl.PrefetchAsyncContext()"


class AsyncEvent:
    """What ``pl.prefetch.async_prefetch`` returns: the completion event of one prefetch."""

    __slots__ = ("context", "tensor")

    def __init__(self, context: PrefetchAsyncContext, tensor: str):
        self.context, self.tensor = context, tensor

    def __repr__(self) -> str:
        return f"pl.AsyncEvent({self.tensor})"


class AsyncSession:
    """What ``pl.prefetch.session(ctx)`` returns: the session a context's events are waited in."""

    __slots__ = ("context",)

    def __init__(self, context: PrefetchAsyncContext):
        self.context = context

    def __repr__(self) -> str:
        return "pl.AsyncSession()"


def _in_vector_code(op: str):
    """The tracer, if ``op`` is called where PyPTO places it: vector-core code of an InCore function or region.

    A prefetch is an AIV op (its SDMA scratch lives in the vector core's UB): an orchestration, which
    runs on the host side and touches no L2, and a ``pl.FunctionType.AIC`` function are refused.
    """
    t = current(op)
    if _task_owner(t) is None:
        raise compile_error(f"{op}: a prefetch belongs in an InCore function (a kernel the orchestration "
                            f"calls, or a pl.at region); this is the orchestration", user_loc())
    if _kernel_side(t) == "AIC":
        raise compile_error(f"{op}: a prefetch runs on the vector core (AIV), but this is an AIC function "
                            f"(pl.FunctionType.AIC)", user_loc())
    return t


def _context(op: str, ctx) -> PrefetchAsyncContext:
    if not isinstance(ctx, PrefetchAsyncContext):
        raise compile_error(f"{op}: ctx must be what pl.prefetch.make_context() returned, got {ctx!r}", user_loc())
    if ctx._tracer is not _in_vector_code(op):
        raise compile_error(f"{op}: the context was made in another kernel; make one in this kernel", user_loc())
    return ctx


def make_context() -> PrefetchAsyncContext:
    """A prefetch context for this kernel (the runtime's SDMA workspace on the device; none is needed here)."""
    return PrefetchAsyncContext(_in_vector_code("pl.prefetch.make_context"))


def async_prefetch(src, ctx) -> AsyncEvent:
    """Start prefetching the tensor ``src`` (static shape, every dimension 1 but the last) into L2."""
    op = "pl.prefetch.async_prefetch"
    _in_vector_code(op)
    if not isinstance(src, TensorArg):
        raise compile_error(f"{op}: src must be a tensor parameter of the kernel, got {src!r}", user_loc())
    shape = list(src.shape)
    if not shape or not all(is_int(n) for n in shape) or any(n != 1 for n in shape[:-1]):
        raise compile_error(f"{op}: src must be a flat tensor of static shape, every dimension 1 but the last "
                            f"([N] or [1, N]), got {src.name} of shape {shape}", user_loc())
    return AsyncEvent(_context(op, ctx), src.name)


def session(ctx) -> AsyncSession:
    """The session in which the events of ``ctx`` are waited for."""
    return AsyncSession(_context("pl.prefetch.session", ctx))


def wait(event, session_handle) -> bool:
    """Wait for ``event`` in ``session_handle`` (both of one context); returns True: the region is resident."""
    op = "pl.prefetch.wait"
    _in_vector_code(op)
    if not isinstance(event, AsyncEvent):
        raise compile_error(f"{op}: event must be what pl.prefetch.async_prefetch returned, got {event!r}", user_loc())
    if not isinstance(session_handle, AsyncSession):
        raise compile_error(f"{op}: session_handle must be what pl.prefetch.session returned, got {session_handle!r}",
                            user_loc())
    if event.context is not session_handle.context:
        raise compile_error(f"{op}: the event ({event.tensor}) and the session come from different contexts",
                            user_loc())
    return True
