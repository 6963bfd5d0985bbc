"""``@pl.jit.host``: the host orchestrator of a multi-chip (L3) program, traced into a plan.

A host function's body runs as Python while it is compiled, with its tensor
parameters as :class:`HostTensor` proxies (``x[r]`` is the proxy of a
leading-index view), ``pl.range`` with int bounds as a Python loop,
:func:`world_size` as the rank count, :func:`alloc_window_buffer` /
:func:`window` making :class:`WindowBuffer` / :class:`WindowView` records,
and each call of a ``@pl.jit`` function (``per_rank(..., device=r)``)
recorded as a :class:`Dispatch` to rank ``r``, traced for that rank and
compiled (:mod:`.distributed_trace`).  A ``@pl.program``'s host orchestrator
(``pl.function(level=pl.Level.HOST, role=pl.Role.Orchestrator)``) is traced
the same way, its ``self.<chip orchestration>(...)`` calls being dispatches
and its ``self.<SubWorker>(...)`` calls :class:`Callback` steps.  The plan is
a :class:`~pypto_async.ir.distributed_compiled_program.DistributedCompiledProgram`;
:mod:`pypto_async.runtime.distributed_runner` runs it.
"""

from __future__ import annotations

import ast
import enum
import functools
import inspect
import textwrap
import threading
from dataclasses import dataclass

import numpy as np

from ._annotations import defining_scope, evaluate
from .._dtypes import DataType, as_dtype
from .._scalars import is_int
from .._signature import IN, SCALAR
from ..errors import PtoArgumentError, PtoCompileError, PtoNotSupported
from ..ir._diag import compile_error
from ..ir._nodes import Loc, Param
from ._placement import bind_shape
from ._tracer import user_loc
from ._types import ScalarAnnotation, TensorAnnotation
from .distributed_trace import CommOp, RankTrace, Segmented, rank_tracing, split

__all__ = [
    "Role",
    "HostFunction",
    "HostTensor",
    "WindowBuffer",
    "WindowView",
    "Dispatch",
    "Callback",
    "host",
    "host_active",
    "host_dispatch",
    "world_size",
    "alloc_window_buffer",
    "window",
    "requires_runtime_binding",
]

_state = threading.local()

#: PyPTO's floor on a window buffer: each is padded to at least this many bytes.
WINDOW_FLOOR = 4096


class Role(enum.Enum):
    """The role of a HOST-level ``@pl.function``: the orchestrator, or a Python SubWorker callback."""

    Orchestrator = "Orchestrator"
    SubWorker = "SubWorker"


def requires_runtime_binding(fn) -> bool:
    """Whether `fn`'s body is only ``...`` (and a docstring): a callback bound at ``prepare(callbacks=)``."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return False
    defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if len(defs) != 1:
        return False
    body = list(defs[0].body)
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    return bool(body) and all(isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)
                              and s.value.value is Ellipsis for s in body)


class HostLevelFunction:
    """A ``pl.function(level=pl.Level.HOST, role=...)`` of a ``@pl.program``: its orchestrator or a SubWorker."""

    def __init__(self, fn, role: Role, name_hint: str | None):
        self.fn = fn
        self.role = role
        self.name = name_hint or fn.__name__
        code = fn.__code__
        self.loc = Loc(code.co_filename, code.co_firstlineno)
        self._scope = defining_scope(fn)  # what string annotations name there
        #: True for a SubWorker whose body is ``...``: bound at ``prepare(callbacks={name: fn})``.
        self.requires_runtime_binding = role is Role.SubWorker and requires_runtime_binding(fn)

    @property
    def level(self):
        from ._types import Level

        return Level.HOST

    def annotations(self) -> dict:
        try:
            return evaluate(self.fn, self._scope)
        except PtoNotSupported:  # a storage-only dtype: its own message
            raise
        except Exception as exc:
            raise compile_error(f"cannot evaluate the annotations of {self.name}: {exc}", self.loc) from exc

    def param_names(self) -> list[str]:
        names = list(inspect.signature(self.fn).parameters)
        return names[1:] if names and names[0] == "self" else names

    def __repr__(self) -> str:
        return f"<pl.function {self.name}: HOST {self.role.name}>"

    def __call__(self, *args, **kwargs):
        raise PtoCompileError(f"{self.name} is a HOST function of a @pl.program: compile the program with "
                              f"ir.compile(..., distributed_config=...)")


def host_function(fn, level, role, name_hint):
    """``pl.function(level=, role=)``: a HOST function of a multi-chip ``@pl.program``."""
    from ._types import Level

    if level is not Level.HOST:
        raise PtoCompileError(f"@pl.function(level=...) is pl.Level.HOST for a host function here, got {level!r}")
    if not isinstance(role, Role):
        raise PtoCompileError(f"@pl.function(level=pl.Level.HOST, role=...) takes a pl.Role (Orchestrator or "
                              f"SubWorker), got {role!r}")

    def wrap(f):
        if not callable(f):
            raise PtoCompileError(f"@pl.function decorates a function, got {f!r}")
        return HostLevelFunction(f, role, name_hint)

    return wrap if fn is None else wrap(fn)


# -- the host-level values -------------------------------------------------------------------


@dataclass(frozen=True)
class HostTensor:
    """A host tensor parameter, or a leading-index view of one (``x[r]``), while a host function is traced."""

    param: str
    index: tuple[int, ...]
    shape: tuple[int, ...]
    dtype: DataType
    direction: str = IN

    def __getitem__(self, key):
        keys = key if isinstance(key, tuple) else (key,)
        if not keys or not all(is_int(k) for k in keys) or len(keys) > len(self.shape):
            raise compile_error(f"{self.param}[{key!r}]: a host tensor is indexed by ints in its leading "
                                f"dimensions here (x[r])", user_loc())
        for d, k in enumerate(keys):
            if not 0 <= k < self.shape[d]:
                raise compile_error(f"{self.param}: index {k} is outside [0, {self.shape[d]}) of dimension "
                                    f"{len(self.index) + d}", user_loc())
        return HostTensor(self.param, self.index + tuple(int(k) for k in keys), self.shape[len(keys):],
                          self.dtype, self.direction)

    def __repr__(self) -> str:
        idx = "".join(f"[{i}]" for i in self.index)
        return f"<host tensor {self.param}{idx}: {self.dtype.name}{list(self.shape)}>"


@dataclass(frozen=True)
class WindowBuffer:
    """A window buffer (``pld.alloc_window_buffer``): one zeroed copy per rank, for each run."""

    index: int
    shape: tuple[int, ...]
    dtype: DataType
    name: str = ""
    raw: bool = False  # allocated by byte count and not viewed yet (shape: the byte count)

    @property
    def nbytes(self) -> int:
        """Its size on a device: the data, padded to PyPTO's 4 KiB window floor."""
        return max(WINDOW_FLOOR, int(np.prod(self.shape)) * self.dtype.itemsize)


@dataclass(frozen=True)
class WindowView:
    """A rank's view of a window buffer (``pld.window``), passed to a ``pld.DistributedTensor`` parameter."""

    buffer: WindowBuffer
    shape: tuple[int, ...]
    dtype: DataType


@dataclass
class Dispatch:
    """One per-device function dispatched to one rank: its segments and operations, and its arguments."""

    rank: int
    name: str
    segmented: Segmented
    params: tuple[Param, ...]  # the segments' parameters: the function's, then the staging / mirror tensors
    args: dict  # parameter name -> HostTensor, WindowView or a number
    compiled: tuple = ()  # per step of segmented.steps: a CompiledProgram, or the CommOp itself
    windows: frozenset = frozenset()


@dataclass(frozen=True)
class HostCollective:
    """A collective a host orchestrator calls on window views: it runs on every rank between two dispatches.

    ``kind`` is ``"allreduce"``, ``"broadcast"``, ``"allgather"``,
    ``"reduce_scatter"``, ``"all_to_all"``, ``"all_to_all_v"`` (with
    ``counts`` and ``recv``) or ``"barrier"``; ``target`` and
    ``source`` the window views (None where the collective has none);
    ``mode`` the reduction; ``root`` a broadcast's root.
    """

    kind: str
    target: WindowView | None
    source: WindowView | None = None
    mode: str = ""
    root: int = 0
    loc: Loc | None = None
    ring: bool = False  # an allreduce written with mode="ring" (same numbers; its own variant name)
    counts: WindowView | None = None  # an all_to_all_v's send_counts ...
    recv: WindowView | None = None  # ... and recv_counts views

    @property
    def name(self) -> str:
        return f"pld.tensor.{self.kind}"

    @property
    def variant(self) -> str:
        """PyPTO's name for this collective's chip-level build: ``builtin.tensor.<op>[__<reduction>|__root<r>]__<dtype>``.

        The build of that name is ``next_levels/<variant>/`` under a compiled
        program's ``output_dir`` (a barrier's dtype is its FP32 signal's).
        """
        view = self.target if self.target is not None else self.source
        dtype = "fp32" if view is None else view.dtype.name.lower()
        op = "allreduce_ring" if self.ring else self.kind
        if self.kind in ("allreduce", "reduce_scatter"):
            return f"builtin.tensor.{op}__{self.mode}__{dtype}"
        if self.kind == "broadcast":
            return f"builtin.tensor.{op}__root{self.root}__{dtype}"
        return f"builtin.tensor.{op}__{dtype}"


@dataclass
class Callback:
    """A SubWorker call: `name` runs on the host with `args` once the work before it completed."""

    name: str
    args: tuple
    fn: object = None  # the function's own body, when it is not a runtime-bound ``...``


class HostTrace:
    """What a host function's trace collects."""

    def __init__(self, name: str, device_ids: tuple[int, ...], compile_fn, dim_of=None):
        self.name = name
        self.device_ids = device_ids
        self.world = len(device_ids)
        #: a pl.dynamic dim's extent in the host's body (its arguments' binding; a @pl.program's: the rank count)
        self.dim_of = dim_of
        self.windows: list[WindowBuffer] = []
        self.steps: list = []  # Dispatch and Callback, in program order
        self.compile_fn = compile_fn  # Program -> CompiledProgram


class host_tracing:
    def __init__(self, trace: HostTrace):
        self.trace = trace

    def __enter__(self):
        if getattr(_state, "host", None) is not None:
            raise PtoCompileError("a @pl.jit.host function cannot be traced inside another")
        _state.host = self.trace
        return self.trace

    def __exit__(self, *exc):
        _state.host = None


def host_active() -> HostTrace | None:
    """The host function being traced, or None."""
    return getattr(_state, "host", None)


def _host(op: str) -> HostTrace:
    h = host_active()
    if h is None:
        raise compile_error(f"{op} is called in a @pl.jit.host orchestrator (while it is compiled)", user_loc())
    return h


def world_size() -> int:
    """The number of ranks the host program is compiled for (``len(DistributedConfig.device_ids)``)."""
    return _host("pld.world_size()").world


def _extents(shape):
    """A shape (or byte count) with its ``pl.dynamic`` dims as the host binds them (``NR * 64 * 4``: an int)."""
    from ._placement import resolve_dim

    if isinstance(shape, (list, tuple)):
        return type(shape)(resolve_dim(d) for d in shape)
    return resolve_dim(shape)


def alloc_window_buffer(shape, dtype=None, *, name: str = "") -> WindowBuffer:
    """Allocate a window buffer of `shape` and `dtype` on every rank (zeroed for each run).

    ``alloc_window_buffer(nbytes)`` (a byte count) is a buffer of that many
    bytes (UINT8).  Each buffer takes at least 4 KiB of a device.
    """
    h = _host("pld.alloc_window_buffer")
    loc = user_loc()
    raw = False
    shape = _extents(shape)
    if is_int(shape):
        if dtype is not None:
            raise compile_error("pld.alloc_window_buffer(nbytes): dtype= goes with a shape, not a byte count", loc)
        shape, dtype, raw = [int(shape)], "uint8", True
    if not isinstance(shape, (list, tuple)) or not shape or not all(is_int(d) and d > 0 for d in shape):
        raise compile_error(f"pld.alloc_window_buffer: shape must be positive ints, got {shape!r}", loc)
    if dtype is None:
        raise compile_error("pld.alloc_window_buffer(shape, dtype=...): the dtype is required", loc)
    buf = WindowBuffer(len(h.windows), tuple(int(d) for d in shape), as_dtype(dtype), name, raw)
    h.windows.append(buf)
    return buf


def window(buffer, shape, dtype=None) -> WindowView:
    """This rank's view of `buffer` as a ``pld.DistributedTensor`` of `shape` and `dtype`.

    A buffer allocated with a shape and dtype is viewed as itself.  One
    allocated by byte count (``pld.alloc_window_buffer(nbytes)``, PyPTO's
    canonical form) takes the shape and dtype of its first view, which must
    fit in its bytes; every later view of it must be that one.
    """
    h = _host("pld.window")
    loc = user_loc()
    if not isinstance(buffer, WindowBuffer):
        raise compile_error(f"pld.window: expected a pld.alloc_window_buffer result, got {buffer!r}", loc)
    shape = tuple(_extents(list(shape)) if isinstance(shape, (list, tuple)) else shape)
    if not shape or not all(is_int(d) and d > 0 for d in shape):
        raise compile_error(f"pld.window: shape must be positive ints, got {list(shape)!r}", loc)
    shape = tuple(int(d) for d in shape)
    dt = buffer.dtype if dtype is None else as_dtype(dtype)
    typed = h.windows[buffer.index] if buffer.index < len(h.windows) else buffer
    if typed.raw:
        nbytes = int(np.prod(shape)) * dt.itemsize
        if nbytes > typed.shape[0]:
            raise compile_error(f"pld.window: the view {dt.name}{list(shape)} ({nbytes} bytes) does not fit the "
                                f"buffer's {typed.shape[0]} bytes", loc)
        typed = h.windows[buffer.index] = WindowBuffer(buffer.index, shape, dt, buffer.name)
    if shape != typed.shape or dt != typed.dtype:
        what = "its first view" if buffer.raw else "the buffer"
        raise compile_error(f"pld.window: the view {dt.name}{list(shape)} must be {what}, "
                            f"{typed.dtype.name}{list(typed.shape)}, here", loc)
    return WindowView(typed, shape, dt)


# -- dispatches ----------------------------------------------------------------------------


def _rank_of(h: HostTrace, device, loc) -> int:
    if device is None:
        return 0
    if not is_int(device) or not 0 <= device < h.world:
        raise compile_error(f"device={device!r}: a rank of this program, 0..{h.world - 1} "
                            f"(DistributedConfig(device_ids={list(h.device_ids)}))", loc)
    return int(device)


def _windows_of(names, args) -> frozenset:
    return frozenset(n for n, a in zip(names, args) if isinstance(a, WindowView))


def record_dispatch(h: HostTrace, name: str, rank: int, names, args, trace_fn, loc) -> Dispatch:
    """Trace `trace_fn` (a callable of a RankTrace, giving a Program) for `rank`, cut and compile it."""
    windows = _windows_of(names, args)
    scalars = {n: int(a) for n, a in zip(names, args) if is_int(a) and not isinstance(a, bool)}
    r = RankTrace(rank, h.world, windows, scalars)
    with rank_tracing(r):
        program = trace_fn()
    seg = split(program, r.extra)
    params = next((s.params for s in seg.steps if not isinstance(s, CommOp)),
                  (*program.params, *(p for p in r.extra if p not in program.params)))
    compiled = tuple(s if isinstance(s, CommOp) else h.compile_fn(s) for s in seg.steps)
    d = Dispatch(rank, name, seg, tuple(params), dict(zip(names, args)), compiled, windows)
    h.steps.append(d)
    return d


def record_collective(h: HostTrace, kind: str, target, source, signal, *, mode: str = "", root: int = 0,
                      loc=None, ring: bool = False) -> WindowView | None:
    """Record a host-level collective on window views (checked); return its target view."""
    from .distributed import _MISSING, check_exchange

    what = f"pld.tensor.{kind}"
    for role, v in (("target", target), ("signal", signal), ("source", source)):
        if role == "target" and kind == "barrier":
            continue
        if v is None and role == "source" and kind not in ("allgather", "all_to_all"):
            continue
        if v is _MISSING and role == "signal" and kind == "allreduce":
            continue  # PyPTO synthesizes one
        if v is _MISSING and role == "signal":
            raise compile_error(f"{what} takes a signal window (pld.window of a [world_size] INT32 buffer)", loc)
        if not isinstance(v, WindowView):
            raise compile_error(f"{what}: in a host orchestrator the {role} is a pld.window(...) view, got {v!r}",
                                loc)
    if kind in ("allgather", "all_to_all"):
        if source.buffer == target.buffer:
            raise compile_error(f"{what}: the source and the target must be different window buffers", loc)
        check_exchange(kind, what, "source", source.shape, source.dtype, "target", target.shape, target.dtype,
                       h.world, loc)
    h.steps.append(HostCollective(kind, target if kind != "barrier" else None, source, mode, root, loc, ring))
    return target


def record_all_to_all_v(h: HostTrace, source, target, signal, counts, recv, loc) -> None:
    """Record a host-level ``pld.tensor.all_to_all_v`` on window views (checked)."""
    from .distributed import check_all_to_all_v

    what = "pld.tensor.all_to_all_v"
    views = {"input": source, "target": target, "signal": signal, "send_counts": counts, "recv_counts": recv}
    for role, v in views.items():
        if not isinstance(v, WindowView):
            raise compile_error(f"{what}: in a host orchestrator the {role} is a pld.window(...) view, got {v!r}",
                                loc)
    buffers = [v.buffer.index for v in views.values()]
    if len(set(buffers)) != len(buffers):
        raise compile_error(f"{what}: in a host orchestrator its five operands are views of five different window "
                            f"buffers (PyPTO's rule: two sharing one would race)", loc)
    check_all_to_all_v(what, "input", source.shape, source.dtype, "target", target.shape, target.dtype,
                       "send_counts", counts.shape, counts.dtype, "recv_counts", recv.shape, recv.dtype, h.world, loc,
                       distinct=True)
    h.steps.append(HostCollective("all_to_all_v", target, source, loc=loc, counts=counts, recv=recv))


def _returned(d: Dispatch, ret: str | None):
    if not ret:
        return None
    vals = [d.args.get(n.strip()) for n in ret.split(",")]
    return vals[0] if len(vals) == 1 else tuple(vals)


def host_dispatch(jitfn, args, kwargs):
    """``per_rank(..., device=r)`` inside a host function: record the dispatch; return its outputs' proxies."""
    h = host_active()
    loc = user_loc()
    kwargs = dict(kwargs)
    rank = _rank_of(h, kwargs.pop("device", None), loc)
    for k in ("config", "stream"):
        if k in kwargs:
            raise compile_error(f"{jitfn.__name__}(..., {k}=): a dispatch of a host program takes device= only", loc)
    args = jitfn._bind(args, kwargs)
    params = jitfn._params(args)
    names = [p.name for p in params]
    d = record_dispatch(h, jitfn.__name__, rank, names, args, lambda: jitfn._trace(list(params)), loc)
    return _returned(d, d.segmented.program.ret)


# -- @pl.jit.host -------------------------------------------------------------------------


def _host_param(name: str, ann, arg, where: str, loc, dims: dict) -> tuple[Param, object]:
    if isinstance(ann, ScalarAnnotation) or (ann is None and isinstance(arg, (int, float)) and not isinstance(arg, bool)):
        dtype = ann.dtype if isinstance(ann, ScalarAnnotation) and ann.dtype is not None else (
            as_dtype("int64") if isinstance(arg, int) else as_dtype("float32"))
        return Param(name, SCALAR, (), dtype), arg
    if ann is not None and not isinstance(ann, TensorAnnotation):
        from ._types import Tensor

        if ann is Tensor:
            ann = TensorAnnotation()
        else:
            raise compile_error(f"{where}: parameter {name!r}: unsupported annotation {ann!r}", loc)
    ann = ann or TensorAnnotation()
    if type(arg).__name__ == "DeviceTensor":
        shape, dtype = tuple(arg.shape), arg.dtype
    elif hasattr(arg, "shape") and hasattr(arg, "dtype"):
        shape, dtype = tuple(int(d) for d in arg.shape), as_dtype(arg.dtype)
    else:
        raise compile_error(f"{where}: parameter {name!r} is a tensor: pass a numpy array or a torch tensor, "
                            f"got {type(arg).__name__}", loc)
    dtype = as_dtype(dtype)
    if ann.dtype is not None and ann.dtype != dtype and ann.dtype.np_storage.name != ann.dtype.np_name and \
            dtype.np_name == ann.dtype.np_storage.name:
        dtype = ann.dtype  # BF16 given as UINT16, FP8 as UINT8 (numpy has neither): the raw bits, as a kernel takes
    why = None if ann.shape is None else bind_shape(ann.shape, shape, dims)
    if why is not None:
        raise compile_error(f"{where}: parameter {name!r} is declared {list(ann.shape)} but got shape "
                            f"{list(shape)}: {why}", loc)
    if ann.dtype is not None and ann.dtype != dtype:
        raise compile_error(f"{where}: parameter {name!r} is declared {ann.dtype.name} but got {dtype.name}", loc)
    return Param(name, ann.direction, shape, dtype), None


def host_params(fn, names, args, where: str, loc, anns=None, dims: dict | None = None) -> list[Param]:
    """The host function's parameters for these arguments (shapes and dtypes taken from them).

    ``dims``, when given, receives the ``pl.dynamic`` dims the arguments bind (``id(dim) -> (dim, extent)``).
    """
    if len(args) != len(names):
        raise PtoArgumentError(f"{where} takes {len(names)} arguments ({', '.join(names)}), got {len(args)}")
    if anns is None:
        try:
            anns = evaluate(fn)
        except PtoNotSupported:  # a storage-only dtype: its own message
            raise
        except Exception as exc:
            raise compile_error(f"cannot evaluate the annotations of {where}: {exc}", loc) from exc
    dims = {} if dims is None else dims  # a pl.dynamic dimension takes one extent per call
    return [_host_param(n, anns.get(n), a, where, loc, dims)[0] for n, a in zip(names, args)]


def trace_host(name: str, fn, self_arg, params: list[Param], device_ids, compile_fn, scalars: dict, dim_of=None):
    """Run host function `fn` on proxies of `params`; return its HostTrace and what it returned.

    ``dim_of(dim)``: a ``pl.dynamic`` dim's extent in the body (None: unbound).
    """
    h = HostTrace(name, tuple(device_ids), compile_fn, dim_of)
    proxies = []
    for p in params:
        proxies.append(scalars.get(p.name) if p.direction == SCALAR else HostTensor(p.name, (), p.shape, p.dtype,
                                                                                      p.direction))
    with host_tracing(h):
        result = fn(self_arg, *proxies) if self_arg is not None else fn(*proxies)
    return h, result


class HostFunction:
    """A ``@pl.jit.host`` orchestrator: ``compile(*args, config=)`` it, then call what it returns.

    Calling the function itself compiles it for the arguments (cached per
    signature and config) and runs it once.
    """

    def __init__(self, fn):
        self.fn = fn
        self.__name__ = fn.__name__
        self.__qualname__ = getattr(fn, "__qualname__", fn.__name__)
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn
        code = fn.__code__
        self._loc = Loc(code.co_filename, code.co_firstlineno)
        self._names = list(inspect.signature(fn).parameters)
        self._compiled: dict = {}

    def __repr__(self) -> str:
        return f"<pl.jit.host {self.__qualname__}>"

    def compile(self, *args, config=None, platform: str | None = None, output_dir=None, **kwargs):
        """Trace and compile the host program for these arguments; return a DistributedCompiledProgram.

        ``config=RunConfig(distributed_config=DistributedConfig(device_ids=...))``
        names the ranks (default: one rank, the config's ``device_id``).
        """
        from ..ir.distributed_compiled_program import compile_host

        return compile_host(self, args, kwargs, config=config, platform=platform, output_dir=output_dir)

    def __call__(self, *args, config=None, **kwargs):
        if host_active() is not None:
            raise compile_error(f"{self.__name__}: a @pl.jit.host function cannot be called from another", user_loc())
        compiled = self.compile(*args, config=config, **kwargs)
        return compiled(*args, config=config)


def host(fn=None):
    """Make a Python function the host orchestrator of a multi-chip program (``@pl.jit.host``)."""
    if fn is None:
        return host
    if isinstance(fn, HostFunction):
        return fn
    if not callable(fn):
        raise PtoCompileError(f"@pl.jit.host decorates a function, got {fn!r}")
    return functools.update_wrapper(HostFunction(fn), fn, updated=())
