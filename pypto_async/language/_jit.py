"""``@pl.jit``: trace a Python function into a Program, once per signature."""

from __future__ import annotations

import inspect

import numpy as np

from .._dtypes import BOOL, FP32, INT64, DataType, as_dtype, check_native
from .._signature import OUT, SCALAR
from ..backend.pto_backend import PartialCodegenError
from ..errors import PtoArgumentError, PtoNotSupported
from ..ir._compile import _dispatch
from ..ir._compile import compile as ir_compile
from ..ir._diag import compile_error
from ..ir._nodes import Loc, Param
from ..ir._program import DynamicExtent, Program
from ..ir._passes import run_passes
from ._annotations import defining_scope, evaluate
from ._branch import traced_fn
from ._incore import incore
from ._inline import decorate, inline, opaque
from .distributed_host import host
from ._dynamic import dynamic_program, dynamic_shape, extent_free, extent_view, name_extents, with_extents
from ._placement import DimExpr, DynamicDim, bind_shape, is_dynamic, is_dynamic_dim
from ._tracer import ScalarArg, TensorArg, Tracer, tracing
from ._types import Scalar, ScalarAnnotation, Tensor, TensorAnnotation

__all__ = ["jit", "JitFunction"]


def _is_device_tensor(x) -> bool:
    if type(x).__name__ == "DeviceTensor":
        return True
    return hasattr(x, "worker") and hasattr(x, "data_ptr") and not hasattr(x, "__array_interface__")


def _is_runtime(x) -> bool:
    from ._directives import RUNTIME

    return x is RUNTIME


def _is_number(x) -> bool:
    return isinstance(x, (bool, int, float, np.generic))


class _Sample:
    """A tensor argument that is only a shape and a dtype (``kernel.compile()`` from the signature)."""

    def __init__(self, shape: tuple, dtype: DataType):
        self.shape = tuple(int(d) for d in shape)
        self.dtype = dtype


class JitFunction:
    """A kernel: call it to dispatch, or ``lower``/``compile`` it for given arguments.

    Each distinct signature (shapes, dtypes and directions of the arguments)
    is traced and compiled once; later calls with the same signature reuse it.
    """

    def __init__(self, fn, auto_scope: bool = True):
        self.fn = fn
        #: ``@pl.jit(auto_scope=False)``: the body may place AUTO runtime scopes itself (``pl.scope()``).
        self.auto_scope = auto_scope
        self.__name__ = fn.__name__
        self.__qualname__ = getattr(fn, "__qualname__", fn.__name__)
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn
        self._sig = inspect.signature(fn)
        code = fn.__code__
        self._loc = Loc(code.co_filename, code.co_firstlineno)
        self._annotations = None
        self._scope = defining_scope(fn)  # what string annotations name there
        self._compiled: dict = {}
        self._per_extent: set = set()  # static-part keys whose trace needs its extents: one artifact per extent
        self._views: dict = {}  # each artifact's handle per set of run-time extents (see extent_view)

    def __repr__(self) -> str:
        return f"<pl.jit {self.__qualname__}>"

    @property
    def _cache(self) -> dict:
        """The in-memory cache of compiled specialisations, by PyPTO's name (its tests ``_cache.clear()`` it)."""
        return self._compiled

    # -- signature ---------------------------------------------------------------
    def _anns(self) -> dict:
        if self._annotations is None:
            try:
                raw = evaluate(self.fn, self._scope)
            except PtoNotSupported:  # a storage-only dtype: its own message
                raise
            except Exception as exc:  # an annotation that does not evaluate
                raise compile_error(f"cannot evaluate the annotations of {self.__name__}: {exc}", self._loc) from exc
            self._annotations = raw
        return self._annotations

    def _bind(self, args, kwargs) -> tuple:
        """The arguments in parameter order: ``kernel(a, b, out=c)`` as ``(a, b, c)``."""
        params = self._sig.parameters
        names = list(params)
        if not kwargs and len(args) >= len(names):
            return args  # a count that does not bind is reported with the signature (see _params)
        unknown = sorted(set(kwargs) - set(names))
        if unknown:
            raise PtoArgumentError(f"{self.__name__} has no parameter {', '.join(map(repr, unknown))} "
                                   f"(its parameters: {', '.join(names)})")
        doubled = sorted(n for n in names[:len(args)] if n in kwargs)
        if doubled:
            raise PtoArgumentError(f"{self.__name__}: argument {', '.join(map(repr, doubled))} given twice")
        # A parameter left out takes its Python default (``alpha: pl.Scalar[pl.FP32] = 0.5``).
        missing = [n for n in names[len(args):] if n not in kwargs and params[n].default is params[n].empty]
        if missing:
            raise PtoArgumentError(f"{self.__name__}: missing argument {self._described(missing)} (its "
                                   f"parameters: {', '.join(names)})")
        return (*args, *(kwargs[n] if n in kwargs else params[n].default for n in names[len(args):]))

    def _described(self, names: list[str]) -> str:
        """``'n' (a pl.Scalar[INT32] parameter)``: the names, a scalar one with its annotation."""
        try:
            anns = self._anns()
        except Exception:  # noqa: BLE001 - the annotations' own error comes with the trace
            anns = {}
        out = []
        for n in names:
            ann = anns.get(n)
            if isinstance(ann, DataType):
                ann = ScalarAnnotation(ann)
            if isinstance(ann, ScalarAnnotation) or ann is Scalar:
                dtype = getattr(ann, "dtype", None)
                out.append(f"{n!r} (a pl.Scalar{'[' + dtype.name + ']' if dtype else ''} parameter)")
            else:
                out.append(repr(n))
        return ", ".join(out)

    def _split(self, args, kwargs) -> tuple[tuple, dict]:
        """Kernel arguments given by name, bound into ``args``; the other keywords are returned."""
        names = set(self._sig.parameters)
        mine = {k: v for k, v in kwargs.items() if k in names}
        return self._bind(args, mine), {k: v for k, v in kwargs.items() if k not in names}

    def _params(self, args) -> list[Param]:
        names = list(self._sig.parameters)
        for name, p in self._sig.parameters.items():
            if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                raise compile_error(f"{self.__name__}: parameter {name!r} must be positional", self._loc)
        if len(args) != len(names):
            raise PtoArgumentError(f"{self.__name__} takes {len(names)} arguments ({', '.join(names)}), got {len(args)}")
        anns = self._anns()
        out = []
        dims: dict = {}  # each pl.dynamic dimension's extent, as the first argument it annotates binds it
        for name, arg in zip(names, args):
            ann = anns.get(name)
            if ann is Tensor:
                ann = TensorAnnotation()
            elif ann is Scalar:
                ann = ScalarAnnotation()
            elif isinstance(ann, DataType):  # a bare dtype (``n: pl.INDEX``) annotates a scalar
                ann = ScalarAnnotation(ann)
            if _is_device_tensor(arg):
                raise compile_error(
                    f"missing inferred tensor metadata for parameter {name}: a DeviceTensor carries no "
                    f"shape/dtype for the @pl.jit specializer; compile the program with "
                    f"ir.compile({self.__name__}.lower(<host arrays of the same shape and dtype>)) and "
                    f"dispatch it through a worker (ChipWorker.run or ChipWorker.register)",
                    self._loc,
                )
            if isinstance(ann, ScalarAnnotation) or (ann is None and (_is_number(arg) or _is_runtime(arg))):
                out.append(self._scalar_param(name, arg, ann))
            elif ann is None or isinstance(ann, TensorAnnotation):
                out.append(self._tensor_param(name, arg, ann or TensorAnnotation(), dims))
            else:
                raise compile_error(f"parameter {name!r}: unsupported annotation {ann!r}", self._loc)
        return out

    def _scalar_param(self, name, arg, ann) -> Param:
        from ._directives import RUNTIME

        if arg is RUNTIME:  # compile(n=pl.RUNTIME): the value comes at dispatch, as every scalar's does here
            if ann is None or ann.dtype is None:
                raise compile_error(f"parameter {name!r} is pl.RUNTIME: annotate its dtype (pl.Scalar[pl.INT32]) "
                                    f"so the artifact knows what it will be passed", self._loc)
            return Param(name, SCALAR, (), ann.dtype)
        if not _is_number(arg):
            raise compile_error(f"parameter {name!r} is a scalar, got {type(arg).__name__}", self._loc)
        if ann is not None and ann.dtype is not None:
            dtype = ann.dtype
        elif isinstance(arg, bool):
            dtype = BOOL
        elif isinstance(arg, int):
            dtype = INT64
        elif hasattr(arg, "dtype"):
            dtype = self._dtype_of(name, arg.dtype)
        else:
            dtype = FP32
        return Param(name, SCALAR, (), dtype)

    def _dtype_of(self, name, dt):
        try:
            return as_dtype(dt)
        except PtoArgumentError as exc:
            raise compile_error(f"parameter {name!r}: {exc}", self._loc) from None

    def _tensor_param(self, name, arg, ann: TensorAnnotation, dims: dict) -> Param:
        if not (hasattr(arg, "shape") and hasattr(arg, "dtype")) or _is_number(arg):
            raise compile_error(
                f"parameter {name!r} is a tensor: pass a numpy array or a torch tensor, got {type(arg).__name__}",
                self._loc,
            )
        shape = tuple(int(d) for d in arg.shape)
        if isinstance(arg.dtype, np.dtype):
            try:  # traced as its dtype's name, the array would then be read byte for byte
                check_native(arg.dtype)
            except PtoArgumentError as exc:
                raise PtoArgumentError(f"{self.__name__}: argument {name!r}: {exc}") from None
        if ann.dtype is not None and ann.dtype.np_storage.name != ann.dtype.np_name and \
                str(arg.dtype).removeprefix("torch.") == ann.dtype.np_storage.name:
            dtype = ann.dtype  # bfloat16 stored as uint16, FP8 as uint8: the raw bits
        else:
            dtype = self._dtype_of(name, arg.dtype)
        if not shape:
            raise compile_error(f"parameter {name!r}: a 0-d tensor has no tiles; pass a scalar instead", self._loc)
        why = None if ann.shape is None else bind_shape(ann.shape, shape, dims)
        if why is not None:
            raise compile_error(f"parameter {name!r} is declared {list(ann.shape)} but got shape {list(shape)}: "
                                f"{why}", self._loc)
        if ann.dtype is not None and ann.dtype != dtype:
            raise compile_error(f"parameter {name!r} is declared {ann.dtype.name} but got {dtype.name}", self._loc)
        return Param(name, ann.direction, shape, dtype)

    # -- tracing -----------------------------------------------------------------
    def trace(self, *args, **kwargs) -> Program:
        """Trace the kernel for these arguments; return the program before any pass."""
        args = self._bind(args, kwargs)
        params = self._params(args)
        return self._trace(params, literals=_literals(params, args))

    def _trace(self, params: list[Param], runtime: tuple = (), literals: tuple = ()) -> Program:
        """Trace the body; ``runtime`` holds ``(scalar Param, tensor, axis)`` for each extent read at run time.

        ``literals`` holds ``(name, value)`` for each scalar parameter given a number (see
        :func:`_literals`): the body sees that number, as PyPTO's specializer substitutes it.
        """
        hidden = list(dict.fromkeys(q for q, _, _ in runtime))
        tracer = Tracer(self.__name__, [*params, *hidden])
        tracer.auto_scope = self.auto_scope
        tracer.promotable = True  # an In parameter an inline helper writes becomes InOut (see _inline)
        from .distributed_trace import scalar_proxy  # a scalar a multi-chip dispatch fixes: its int

        fixed = dict(literals)
        proxies = [(fixed[p.name] if p.name in fixed else scalar_proxy(p)) if p.direction == SCALAR else TensorArg(p)
                   for p in params]
        # A run-time extent is the hidden scalar in the body: x.shape[0] and pl.tensor.dim(x, 0) give it.
        tracer.dyn_axes = {}
        for q, t, axis in runtime:
            tracer.dyn_axes.setdefault(t, {})[axis] = ScalarArg(q)
        for x in proxies:
            if isinstance(x, TensorArg) and x.name in tracer.dyn_axes:
                x.shape = dynamic_shape(x.param.shape, tracer.dyn_axes[x.name])
        from ._ops_mx import mark_layouts

        mark_layouts(proxies, self._anns())  # pl.MX_A_ZZ / pl.MX_B_NN tensors: loads unpack them
        with tracing(tracer):
            result = traced_fn(self.fn)(*proxies)
            from ._ops_crosscore import function_closed

            function_closed(tracer, self._loc)  # the body's own cross-core pushes popped, pops released
        params = [tracer.params[p.name] for p in params]
        if len(tracer.blocks) != 1:
            raise compile_error(
                f"{self.__name__}: a pl.range or pl.spmd loop did not finish (break is not supported)", self._loc
            )
        items = result if isinstance(result, tuple) else (() if result is None else (result,))
        if not all(isinstance(r, TensorArg) and not hasattr(r, "origin") for r in items):
            raise compile_error(
                f"{self.__name__} must return its tensor parameters or pl.create_tensor tensors (one, a "
                f"tuple of them, or nothing), got {result!r}", self._loc, PartialCodegenError
            )
        returned = [r.name for r in items]
        # A returned intermediate is an output of the program, after the parameters; the rest is scratch.
        outs = tuple(Param(p.name, OUT, p.shape, p.dtype) for p in tracer.scratch if p.name in returned)
        scratch = tuple(p for p in tracer.scratch if p.name not in returned)
        ret = ", ".join(returned) or None
        from ._control import spmd_as_tasks
        from ._submit import program_dump_tags

        body, as_tasks = spmd_as_tasks(tracer, tuple(tracer.blocks[0]))
        if as_tasks:
            tracer.blocks[0], tracer.block_num = list(body), None
        elif getattr(tracer, "spmd_counts_differ", None) is not None:
            loc, n, before = tracer.spmd_counts_differ
            raise compile_error(f"pl.spmd({n}) disagrees with an earlier pl.spmd({before}) (one block count per "
                                f"kernel, unless each loop sits beside the kernel's regions, as a task of its own)",
                                loc)
        return Program(self.__name__, (*params, *hidden, *outs), tuple(tracer.blocks[0]), tracer.block_num or 1,
                       ret, scratch=scratch, manual_dep=tuple(getattr(tracer, "manual_dep", ())),
                       dump_tags=program_dump_tags(tracer, tracer.blocks[0]),
                       dynamic=tuple((q.name, t, axis) for q, t, axis in runtime), specialised=literals)

    def lower(self, *args, config=None, **kwargs) -> Program:
        """Return the lowered program (after the pass pipeline) for these arguments.

        As PyPTO's: with no sample arguments the annotations' shapes specialise it (as
        ``compile()``), and ``config=RunConfig(...)`` is taken (checked; it selects nothing here:
        there is one pass pipeline, whatever the platform).
        """
        if config is not None:
            from ..runtime._config import as_run_config  # the runtime's config check, only when one is given

            as_run_config(config)
        if not args and any(n not in kwargs for n in self._sig.parameters):
            args, kwargs = self._from_signature(kwargs)
        return run_passes(self.trace(*args, **kwargs))

    def compile_for_test(self, *args, **kwargs) -> Program:
        """Compile for these arguments (cached, as :meth:`compile`) and return the lowered program.

        PyPTO's test entry: nothing runs; the result's ``functions`` and
        ``as_python()`` show what was compiled.
        """
        self.compile(*args, **kwargs)
        return self.lower(*self._split(args, kwargs)[0])

    def compile(self, *args, platform: str | None = None, output_dir=None, config=None, **kwargs):
        """Compile for these arguments and return a CompiledProgram (cached per signature).

        A keyword naming a parameter of the kernel is that argument
        (``kernel.compile(a, b, out=c)``); the other keywords are options of
        :func:`pypto_async.ir.compile`.  ``config=RunConfig(...)`` compiles
        for its platform with its compile-side fields
        (``RunConfig.compile_kwargs``, which key the cache too); keywords
        given here win over the config's.
        """
        if not args and any(n not in kwargs for n in self._sig.parameters):
            args, kwargs = self._from_signature(kwargs)
        args, kwargs = self._split(args, kwargs)
        if config is not None:
            from ..runtime._config import as_run_config

            cfg = as_run_config(config)
            kwargs = {**cfg.compile_kwargs(), **kwargs}
            output_dir = kwargs.pop("output_dir", None) if output_dir is None else output_dir
            platform = cfg.platform if platform is None else platform
        platform = "sim" if platform is None else platform
        params = self._params(args)
        literals = _literals(params, args)
        free = [a for a in args if getattr(a, "free", ())]  # kernel.compile(): pl.dynamic dims left open
        if output_dir is None:
            view = self._dynamic(params, platform, kwargs, literals)
            if view is not None:
                return dynamic_program(view) if free else view
        if free:
            names = ", ".join(dict.fromkeys(n for a in free for n in a.free))
            why = ("an artifact written to output_dir= is compiled for the extents of sample tensors"
                   if output_dir is not None else
                   "the trace needs its extent as a number (a tile or pl.create_tensor of that size, a Python "
                   "loop over it)")
            raise PtoNotSupported(f"{self._loc}: {self.__name__}.compile() with no arguments leaves {names} to "
                                  f"run time, but {why}; pass sample tensors, {self.__name__}.compile(*tensors), "
                                  f"or call the kernel")
        key = (tuple(params), literals, platform, repr(sorted(kwargs.items())))
        if output_dir is None:
            hit = self._compiled.get(key)
            if hit is not None:
                return hit
        compiled = ir_compile(run_passes(self._trace(params, literals=literals)), platform=platform,
                              output_dir=output_dir, **kwargs)
        if output_dir is None:
            self._compiled[key] = compiled
        return compiled

    # -- one artifact for every extent of a pl.dynamic dimension ----------------------------------
    def _runtime_dims(self) -> dict:
        """The signature's ``pl.dynamic`` dims read at run time: ``id(dim) -> (dim, [(param, axis), ...])``.

        A dim qualifies when each dimension it annotates is the leading one
        of its tensor (so no stride depends on it) and it is the dimension
        itself, not in an expression (``M * 2``): the generated code then
        reads it from the argument's shape at launch.  Any other dynamic
        dim (an inner axis, an expression) keeps its extent compiled in:
        the artifact is specialised per extent of it.
        """
        if getattr(self, "_dims_cache", None) is not None:
            return self._dims_cache
        anns = self._anns()
        found: dict = {}
        static: set = set()
        for name in self._sig.parameters:
            ann = anns.get(name)
            if not isinstance(ann, TensorAnnotation) or ann.shape is None:
                continue
            for axis, d in enumerate(ann.shape):
                if isinstance(d, DynamicDim) and axis == 0:
                    found.setdefault(id(d), (d, []))[1].append((name, axis))
                elif isinstance(d, DimExpr):
                    static.update(id(x) for x in d.dims())
                elif isinstance(d, DynamicDim):
                    static.add(id(d))
        self._dims_cache = {k: v for k, v in found.items() if k not in static}
        return self._dims_cache

    def _dynamic(self, params: list[Param], platform: str, kwargs: dict, literals: tuple = ()):
        """The artifact of the signature's static part for ``params`` (None: compile per extent).

        Traced once, with each run-time extent a hidden INT64 scalar
        parameter (the tensor declares a :class:`DynamicExtent` there); the
        in-memory cache keys on the rest of the signature, so every extent
        hits the same artifact.  A trace that needs such an extent as a
        number (a tile or pl.create_tensor shape, a Python range) falls back
        to one artifact per extent, as does one reading the tensor other
        than by windowed loads and stores (``pl.read``, ``pl.mscatter``),
        whose run-time bounds checks are not written against a run-time
        extent.
        """
        dims = self._runtime_dims()
        if not dims:
            return None
        by_param = {p.name: p for p in params}
        used = set(by_param)
        runtime, masked = [], {}
        for dim, sites in dims.values():
            sites = [(t, a) for t, a in sites if t in by_param and by_param[t].direction != SCALAR]
            if not sites:
                continue
            name = dim.name
            while name in used:
                name += "_"
            used.add(name)
            q = Param(name, SCALAR, (), INT64)
            for t, a in sites:
                runtime.append((q, t, a))
                masked.setdefault(t, set()).add(a)
        if not runtime:
            return None
        key = (tuple(Param(p.name, p.direction, tuple(None if a in masked.get(p.name, ()) else n
                                                       for a, n in enumerate(p.shape)), p.dtype) for p in params),
               literals, platform, repr(sorted(kwargs.items())), "dynamic")
        base = self._compiled.get(key)
        if base is None:
            if key in self._per_extent:
                return None
            extent = {(t, a): DynamicExtent(q.name) for q, t, a in runtime}
            traced = [Param(p.name, p.direction, tuple(extent.get((p.name, a), n) for a, n in enumerate(p.shape)),
                            p.dtype) for p in params]
            try:
                lowered = run_passes(self._trace(traced, tuple(runtime), literals))
            except Exception:  # noqa: BLE001 - the per-extent trace reports (or passes) it
                lowered = None
            if lowered is None or not extent_free(lowered):
                self._per_extent.add(key)
                return None
            base = name_extents(ir_compile(lowered, platform=platform, **kwargs))
            self._compiled[key] = base
        return extent_view(base, params, self._views)

    def _from_signature(self, kwargs: dict) -> tuple[tuple, dict]:
        """``kernel.compile()``: sample arguments made from the annotations, when they give every shape.

        A tensor parameter needs ``pl.Tensor[[...], dtype]`` with int
        dimensions or ``pl.dynamic`` leading ones read at run time (the
        samples mark them ``free``: :meth:`compile` then returns the
        artifact's handle for every extent), a scalar parameter a value, given
        as a keyword (``kernel.compile(n=128)``) or as the parameter's
        default.  Returns the arguments and the keywords left over.
        """
        anns = self._anns()
        kwargs = dict(kwargs)
        args = []
        for name, p in self._sig.parameters.items():
            ann = anns.get(name)
            if name in kwargs:  # given by name: that is the argument
                args.append(kwargs.pop(name))
                continue
            if ann is Tensor or ann is None and p.default is p.empty:
                raise compile_error(
                    f"{self.__name__}.compile() with no arguments reads the shapes from the signature, but "
                    f"parameter {name!r} has no shape: annotate it pl.Tensor[[...], dtype] or pass sample "
                    f"tensors, {self.__name__}.compile(*tensors)", self._loc)
            if isinstance(ann, TensorAnnotation):
                if ann.shape is None or ann.dtype is None:
                    raise compile_error(
                        f"{self.__name__}.compile() with no arguments reads the shapes from the signature, but "
                        f"parameter {name!r} has no shape or dtype: annotate it pl.Tensor[[...], dtype] or pass "
                        f"sample tensors, {self.__name__}.compile(*tensors)", self._loc)
                if is_dynamic(ann.shape):
                    runtime = {id(d) for d, _ in self._runtime_dims().values()}
                    fixed = [d for d in ann.shape if is_dynamic_dim(d) and id(d) not in runtime]
                    if fixed:
                        raise PtoNotSupported(
                            f"{self._loc}: {self.__name__}.compile() with no arguments: parameter {name!r} is "
                            f"{list(ann.shape)}, and {fixed[0]!r} has no extent here: only a pl.dynamic "
                            f"dimension used as nothing but leading extents is read at run time (an inner one "
                            f"or an expression sets strides, compiled per extent); pass sample tensors, "
                            f"{self.__name__}.compile(*tensors), or call the kernel")
                    sample = _Sample([1 if is_dynamic_dim(d) else d for d in ann.shape], ann.dtype)
                    sample.free = [d.name for d in ann.shape if is_dynamic_dim(d)]
                    args.append(sample)
                    continue
                args.append(_Sample(ann.shape, ann.dtype))
                continue
            if p.default is not p.empty:
                args.append(p.default)
            else:
                raise compile_error(
                    f"{self.__name__}.compile() with no arguments: scalar parameter {name!r} has no value in "
                    f"the signature; pass it as a keyword, {self.__name__}.compile({name}=...)", self._loc)
        return tuple(args), kwargs

    def __call__(self, *args, stream=None, config=None, **kwargs):
        """Compile the specialisation for ``args`` (cached) and dispatch it.

        Arguments may be given by parameter name too (``kernel(a, b, out=c)``).

        With ``config=RunConfig(...)`` the kernel is compiled for the
        config's platform with its compile-side fields, and run on the
        innermost open worker of that platform and device, else to
        completion on a worker opened with that config for this call
        (PyPTO's ``kernel(*args, config=cfg)``); the config's DFX switches
        apply to the call.  Otherwise it runs on the worker opened around
        the call.

        Raises
        ------
        PtoCompileError
            If an argument is a DeviceTensor (compile the program and use a
            worker instead) or tracing fails.
        PtoArgumentError
            If both ``stream`` and ``config`` are given.
        """
        from .distributed_host import host_active, host_dispatch

        if host_active() is not None:  # a dispatch of a @pl.jit.host orchestrator being traced
            return host_dispatch(self, args, kwargs)
        args = self._bind(args, kwargs)
        if config is None:
            compiled = self.compile(*args)
            return _dispatch(compiled, with_extents(compiled, args), stream)
        if stream is not None:
            raise PtoArgumentError(f"{self.__name__}: pass stream= or config=, not both (a stream has its worker)")
        compiled = self.compile(*args, config=config)
        return _dispatch(compiled, with_extents(compiled, args), None, config)


def _literals(params: list[Param], args) -> tuple:
    """``(name, value)`` of each scalar parameter given a number: the trace specialises on it.

    As PyPTO's specializer: a scalar argument's value is compiled into the
    artifact (the body sees the number: a shape, a Python ``range``, a
    static ``if``), so each value is its own artifact; ``pl.RUNTIME``
    leaves the parameter a value read at dispatch.  The parameter stays in
    the signature (a call passes it).  The number takes its parameter's
    kind: an int for an integer dtype, a float for a float one, a bool for
    ``BOOL``.
    """
    out = []
    for p, a in zip(params, args):
        if p.direction != SCALAR or _is_runtime(a) or not _is_number(a):
            continue
        v = a.item() if hasattr(a, "item") else a
        if p.dtype == BOOL:
            v = bool(v)
        elif p.dtype.is_float:
            v = float(v)
        elif isinstance(v, float) and not v.is_integer():
            raise PtoArgumentError(f"argument {p.name!r}: a {p.dtype.name} scalar parameter, got {a!r}")
        else:
            v = int(v)
        out.append((p.name, v))
    return tuple(out)


def jit(fn=None, *, auto_scope: bool = True):
    """Make a Python function a kernel (``@pl.jit``); ``@pl.jit.incore`` makes a helper kernel it calls.

    ``@pl.jit(auto_scope=False)`` lets the body place AUTO runtime scopes
    (``with pl.scope():``) itself; ``@pl.jit.inline`` makes a helper spliced
    into the kernel that calls it.
    """
    return decorate(fn, auto_scope, JitFunction, "@pl.jit", jit)


jit.incore = incore
jit.inline = inline
jit.opaque = opaque
jit.host = host


def extern(fn=None, **options):
    """PyPTO's ``@pl.jit.extern(source=..., core_type=...)``: a hand-written C++ kernel; not on the sim.

    Raises
    ------
    PtoNotSupported
        Always, when the decorator is applied: the simulator runs kernels it
        generates from the language, and cannot run a device C++ source.
    """
    from ..errors import PtoNotSupported

    raise PtoNotSupported("@pl.jit.extern: a hand-written C++ kernel (PyPTO's external source) cannot run on the "
                          "sim, which compiles kernels only from the tile language; write the kernel with "
                          "@pl.jit.incore")


jit.extern = extern
