"""``@pl.program`` classes: InCore kernels called by one Orchestration function.

A program is traced as one kernel whose regions are its tasks: each call
``self.kernel(...)`` in the orchestration traces the kernel's body once more,
as a region named after the kernel, with its tensor parameters bound to the
orchestration's tensors or to windows of them (``a[0:64, :]``).  The call
records what the task touches: each tensor argument's window, read for an
``In`` parameter, written for ``Out``, both for ``InOut``.  The task graph
(:mod:`pypto_async.ir._deps`) is derived from those accesses.

``pl.create_tensor(shape, dtype)`` makes an intermediate.  One the
orchestration returns becomes an ``Out`` parameter of the compiled program,
after the orchestration's own parameters; one it does not return is scratch
that lives for one launch.
"""

from __future__ import annotations

import inspect

from .._dtypes import INT64, DataType, as_dtype
from .._signature import IN, INOUT, OUT, SCALAR
from ..errors import PtoArgumentError, PtoCompileError, PtoNotSupported
from ..ir._infer import compile_error, index_range
from ..ir._nodes import For, IBin, IConst, IRead, IScalar, IVar, Loc, Param, Scope, Store
from ..ir._function import FunctionType
from ..ir._program import DynamicExtent, Program
from ..ir._nodes import linear_index as _linear
from ._annotations import defining_scope, evaluate
from ._control import task_deps
from ._dynamic import dynamic_shape, extent_free
from ._hints import scope_hints
from ._placement import DimExpr, DynamicDim, bind_shape, dim_value, is_dynamic, is_dynamic_dim
from ._tracer import Index, ScalarArg, TensorArg, Tracer, current, tracing, user_loc
from ._types import Level, MemorySpace, ScalarAnnotation, Scalar, Tensor, TensorAnnotation

__all__ = ["FunctionType", "function", "func_attr", "program", "create_tensor", "ProgramDef"]


class _Function:
    """A ``@pl.function``: the Python function and its type, until ``@pl.program`` collects it."""

    def __init__(self, fn, type_: FunctionType, name_hint: str | None):
        self.fn = fn
        self.type = type_
        self.name = name_hint or fn.__name__
        code = fn.__code__
        self.loc = Loc(code.co_filename, code.co_firstlineno)
        self._scope = defining_scope(fn)  # what string annotations name there

    @property
    def func_type(self) -> FunctionType:
        """The function's type (PyPTO's ``Function.func_type``)."""
        return self.type

    def annotations(self) -> dict:
        try:
            # String annotations (``from __future__ import annotations``) may name the closure's variables
            # and the locals of the scope the function was defined in.
            return evaluate(self.fn, self._scope)
        except PtoNotSupported:  # a storage-only dtype: its own message
            raise
        except Exception as exc:
            raise compile_error(f"cannot evaluate the annotations of {self.name}: {exc}", self.loc) from exc

    def param_names(self) -> list[str]:
        names = list(inspect.signature(self.fn).parameters)
        if not names or names[0] != "self":
            raise compile_error(f"@pl.function {self.name} must take self first", self.loc)
        return names[1:]

    def __call__(self, *args, name_hint: str | None = None, deps=None):
        """Call the kernel from an orchestration being traced: one task (PyPTO's module-level InCore functions).

        A ``@pl.function`` defined outside the program class (without
        ``self``) is called by its name, and is part of every program whose
        orchestration calls it.
        """
        from ._tracer import _state

        t = getattr(_state, "tracer", None)
        if t is not None and self.type is FunctionType.Inline:
            return _splice(self, None, args)
        if t is None or self.type not in _KERNEL_TYPES:
            raise PtoCompileError(f"{self.name} is a function of a @pl.program: call it (as self.{self.fn.__name__}"
                                  f"(...) for a method) inside the orchestration, and compile the program with "
                                  f"ir.compile")
        names = list(inspect.signature(self.fn).parameters)
        self_arg = None
        if names and names[0] == "self":
            names, self_arg = names[1:], _Self({})
        raw = self.annotations()
        anns = {n: _annotation(raw.get(n), f"{self.name}: parameter {n!r}", self.loc) for n in names}
        return call_task(t, self.name, self.fn, self_arg, names, anns, args, loc=user_loc(), fn_loc=self.loc,
                         name_hint=name_hint, deps=deps)


def function(fn=None, *, type: FunctionType = FunctionType.Opaque, name_hint: str | None = None,  # noqa: A002
             auto_scope: bool = True, attrs: dict | None = None, strict_ssa: bool = False,
             level: Level | None = None, role=None, external_source=None):
    """Mark a method of a ``@pl.program`` class as a kernel (``InCore``) or as its ``Orchestration``.

    The default type is PyPTO's ``Opaque``: a function that takes its plane
    from where it is used.  In a program with an orchestration, an Opaque
    function the orchestration calls is a kernel (each call one task, its
    body outlined as one InCore function, as PyPTO's passes do with plain
    tile code); in a program without one, the one Opaque function is the
    entry, holding its own ``pl.at`` regions.

    ``auto_scope=False`` on the orchestration lets its body place AUTO runtime scopes
    (``with pl.scope():``), as on ``@pl.jit``.  ``attrs=`` on an InCore function takes
    the scheduling hints PyPTO's outlined functions carry, recorded on each task the
    function makes and changing no result: ``{"split": pl.SplitMode.UP_DOWN}`` (as
    ``pl.at(optimizations=[pl.split(...)])``) and ``{"cross_core_slot": n}`` (as
    ``pl.cross_core_slot(slot_num=n)``); another key is an error.
    ``strict_ssa=True`` rejects, when the function is decorated, a name bound
    twice in its body (a parameter counts as bound) and the ``dst[...] = src``
    subscript write, which rebinds ``dst`` (see :func:`check_strict_ssa`).
    ``level=pl.Level.HOST, role=pl.Role.Orchestrator`` (or ``SubWorker``) makes a
    multi-chip program's host function (see :mod:`pypto_async.language.distributed_host`).
    ``external_source=`` (PyPTO's hand-written C++ kernel) raises
    :class:`~pypto_async.errors.PtoNotSupported`: the sim runs only kernels it generates.
    """
    if external_source is not None:
        raise PtoNotSupported(f"@pl.function(external_source={str(external_source)!r}): a hand-written C++ kernel "
                              f"cannot run on the sim, which compiles kernels only from the tile language; write "
                              f"the function's body with pl.load / tile ops / pl.store instead")
    if level is not None or role is not None:
        from .distributed_host import host_function

        return host_function(fn, level, role, name_hint)
    if not isinstance(type, FunctionType):
        raise PtoCompileError(f"@pl.function(type=...) takes a pl.FunctionType, got {type!r}")
    if not isinstance(auto_scope, bool):
        raise PtoCompileError(f"@pl.function(auto_scope=...) must be a bool (True/False), got {auto_scope!r}")
    hints = _attr_hints(attrs, type)
    if attrs:
        import warnings

        warnings.warn("@pl.function(attrs={...}) is deprecated: declare the attributes with pl.func_attr({...}) as "
                      "the first statement of the body", DeprecationWarning, stacklevel=2)

    if not isinstance(strict_ssa, bool):
        raise PtoCompileError(f"@pl.function(strict_ssa=...) must be a bool (True/False), got {strict_ssa!r}")

    def wrap(f):
        if not callable(f):
            raise PtoCompileError(f"@pl.function decorates a function, got {f!r}")
        if strict_ssa:
            check_strict_ssa(f)
        out = _Function(f, type, name_hint)
        out.auto_scope = auto_scope
        out.hints = hints
        return out

    return wrap if fn is None else wrap(fn)


def check_strict_ssa(fn) -> None:
    """Raise a compile error at the first rebinding in ``fn``'s body (``@pl.function(strict_ssa=True)``).

    A name may be bound once: by a parameter, an assignment (each name of a
    tuple target), a ``for`` target or a ``with ... as``.  An augmented
    assignment and a subscript write (``dst[...] = src``) rebind.
    """
    import ast
    import textwrap

    code = fn.__code__
    try:
        lines, first = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        raise PtoCompileError(f"@pl.function(strict_ssa=True) reads {fn.__name__}'s source, which is not "
                              f"available") from None
    tree = ast.parse(textwrap.dedent("".join(lines)))
    node = next(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
    bound = {a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)}

    def fail(n, what: str):
        raise compile_error(f"SSAViolationError: {what} under @pl.function(strict_ssa=True); use distinct "
                            f"names (or drop strict_ssa)", Loc(code.co_filename, first + n.lineno - 1))

    def bind(target, stmt):
        if isinstance(target, ast.Name):
            if target.id in bound:
                fail(stmt, f"{target.id!r} is bound again")
            bound.add(target.id)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for t in target.elts:
                bind(t, stmt)
        elif isinstance(target, ast.Starred):
            bind(target.value, stmt)
        elif isinstance(target, ast.Subscript):
            fail(stmt, "the subscript write dst[...] = src rebinds dst (call pl.assemble explicitly)")

    for n in ast.walk(node):
        if n is node:
            continue
        if isinstance(n, ast.Assign):
            for t in n.targets:
                bind(t, n)
        elif isinstance(n, (ast.AnnAssign, ast.NamedExpr)) and getattr(n, "value", None) is not None:
            bind(n.target, n)
        elif isinstance(n, ast.AugAssign):
            fail(n, f"{ast.unparse(n.target)!r} is updated in place")
        elif isinstance(n, (ast.For, ast.AsyncFor)):
            bind(n.target, n)
        elif isinstance(n, (ast.With, ast.AsyncWith)):
            for item in n.items:
                if item.optional_vars is not None:
                    bind(item.optional_vars, n)


def _attr_hints(attrs, type_: FunctionType, what: str = "@pl.function(attrs=...)", params=None) -> tuple:
    """Function attributes (``pl.func_attr({...})``, ``@pl.function(attrs={...})``) as the task hints they are.

    ``"split"`` (a ``pl.SplitMode``) and ``"slot_num"`` (also spelled
    ``"cross_core_slot"``, a positive int) are ``pl.at(optimizations=[...])``'s
    hints; ``"stationary"`` names a tensor parameter (``params``, the
    function's, when known) the cube keeps resident.  They change no result.
    Another key is an error.
    """
    if attrs is None:
        return ()
    from ._hints import SplitMode

    if not isinstance(attrs, dict):
        raise PtoCompileError(f"{what} takes a dict, got {attrs!r}")
    if attrs and type_ not in (*_KERNEL_TYPES, FunctionType.Group):
        raise PtoCompileError(f"{what} belongs on an InCore function, not {type_.value}")
    hints = []
    for key, value in attrs.items():
        if key == "split":
            if not isinstance(value, SplitMode):
                raise PtoCompileError(f"{what}: 'split' takes a pl.SplitMode, got {value!r}")
            hints.append(("split", value.value))
        elif key in ("slot_num", "cross_core_slot"):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise PtoCompileError(f"{what}: {key!r} takes a positive int, got {value!r}")
            hints.append(("cross_core_slot", value))
        elif key == "dual_aiv_dispatch":  # both AIV lanes run the AIV function: the sim runs it once, whole
            if not isinstance(value, bool):
                raise PtoCompileError(f"{what}: 'dual_aiv_dispatch' takes a bool, got {value!r}")
        elif key == "stationary":
            if not isinstance(value, TensorArg) or (params is not None and not any(value is q for q in params)):
                raise PtoCompileError(f"{what}: 'stationary' takes a tensor parameter of the function, got "
                                      f"{value!r}")
            hints.append(("stationary", value.name))
        else:
            raise PtoCompileError(f"{what}: unknown attribute {key!r} (known: 'split', 'slot_num', 'stationary', "
                                  f"'dual_aiv_dispatch')")
    return tuple(hints)


def func_attr(attrs: dict) -> None:
    """Declare an InCore function's attributes, as the first statement of its body (``pl.func_attr({...})``).

    ``{"split": pl.SplitMode.UP_DOWN, "slot_num": 2, "stationary": w}``: see
    :func:`_attr_hints`; recorded on each task the function makes.  It must
    come before any statement that records IR, in a ``@pl.function(type=
    pl.FunctionType.InCore)`` or ``@pl.jit.incore`` body; a key declared
    twice is an error.
    """
    t = current("pl.func_attr")
    loc = user_loc()
    pending = getattr(t, "func_attrs", None)
    if pending is None:
        raise compile_error("pl.func_attr belongs at the top of an InCore function's body (a @pl.function of type "
                            "InCore or a @pl.jit.incore helper)", loc)
    if t.blocks[-1]:
        raise compile_error("pl.func_attr() must appear before every other statement of the function", loc)
    try:
        hints = _attr_hints(attrs, FunctionType.InCore, "pl.func_attr({...})", pending["params"])
    except PtoCompileError as exc:
        raise compile_error(str(exc), loc) from None
    for name, _ in hints:
        if any(name == n for n, _ in pending["hints"]):
            raise compile_error(f"pl.func_attr: attribute {name!r} is declared twice", loc)
    pending["hints"].extend(hints)


def _annotation(ann, where: str, loc) -> TensorAnnotation | ScalarAnnotation:
    if ann is Tensor:
        ann = TensorAnnotation()
    elif ann is Scalar:
        ann = ScalarAnnotation()
    elif isinstance(ann, DataType):  # a bare dtype (``n: pl.INDEX``) annotates a scalar
        ann = ScalarAnnotation(ann)
    if isinstance(ann, TensorAnnotation):
        if ann.shape is None or ann.dtype is None:
            raise compile_error(f"{where}: a program's tensors need a shape and dtype: pl.Tensor[[r, c], pl.FP32]",
                                loc)
        return ann
    if isinstance(ann, ScalarAnnotation):
        if ann.dtype is None:
            raise compile_error(f"{where}: a program's scalars need a dtype: pl.Scalar[pl.INT64]", loc)
        return ann
    raise compile_error(f"{where}: unsupported annotation {ann!r} (pl.Tensor[[...], dtype] or pl.Scalar[dtype])",
                        loc)


class TensorWindow(TensorArg):
    """A window of a tensor, ``t[r0:r1, c0:c1]``: a kernel call's argument, or a kernel's view of one."""

    def __init__(self, base: TensorArg, origin: tuple, shape: tuple[int, ...], direction: str | None = None):
        param = base.param
        super().__init__(Param(param.name, direction or param.direction, param.shape, param.dtype))
        self.shape = shape
        self.origin = origin
        if getattr(base, "view_of", None):  # a window of an orchestration's reshape / transpose copy
            self.view_of = base.view_of

    def __repr__(self) -> str:
        from ..ir._printer import format_index

        box = ", ".join(f"{format_index(o)}:+{d}" for o, d in zip(self.origin, self.shape))
        return f"<window {self.name}[{box}]: {self.dtype.name}>"


def _bound(k, what: str, loc):
    if isinstance(k, Index):
        return k.expr
    if isinstance(k, int) and not isinstance(k, bool):
        return IConst(k)
    raise compile_error(f"{what}: window bounds must be ints or loop indices, got {k!r}", loc)


def _reads_as_atoms(e, atoms: dict):
    """``e`` with each ``pl.read`` element (an orchestration's deferred read) as a variable of its own."""
    if isinstance(e, IRead):
        return atoms.setdefault(e, IVar(f"__read{len(atoms)}"))
    if isinstance(e, IBin):
        return IBin(e.op, _reads_as_atoms(e.a, atoms), _reads_as_atoms(e.b, atoms))
    return e


def _extent(start, stop, what: str, loc) -> int:
    """``stop - start`` when it is the same int in every iteration (``x[i*64:(i+1)*64]``, ``x[p:p+1]``)."""
    if isinstance(stop, IBin) and stop.op == "+" and stop.a == start and isinstance(stop.b, IConst):
        return stop.b.value  # start + n, whatever start is (pl.slice(x, [n, ...], [b * heads + q, ...]))
    atoms: dict = {}
    a, b = _linear(_reads_as_atoms(start, atoms)), _linear(_reads_as_atoms(stop, atoms))
    diff = None
    if a is not None and b is not None:
        d = {k: b.get(k, 0) - a.get(k, 0) for k in {*a, *b}}
        if all(v == 0 for k, v in d.items() if k is not None):
            diff = d.get(None, 0)
    if diff is None:
        raise compile_error(f"{what}: a window's extent (stop - start) must be a constant", loc)
    return diff


def _add(a, b):
    if isinstance(a, IConst) and isinstance(b, IConst):
        return IConst(a.value + b.value)
    if isinstance(b, IConst) and b.value == 0:
        return a
    if isinstance(a, IConst) and a.value == 0:
        return b
    return IBin("+", a, b)


def slice_box(shape, key, what: str, loc) -> tuple[list, list[int]]:
    """The offsets and extents ``key`` (unit-step slices) selects of ``shape``: a tile's window, ``x[0:8, 64:128]``."""
    key = key if isinstance(key, tuple) else (key,)
    if len(key) > len(shape):
        raise compile_error(f"{what}: {len(key)} indices for a {len(shape)}-d tile", loc)
    offsets, extents = [], []
    for d, extent in enumerate(shape):
        k = key[d] if d < len(key) else slice(None)
        if not isinstance(k, slice) or k.step not in (None, 1):
            raise compile_error(f"{what}: a tile's window takes unit-step slices (lo:hi), got {k!r}", loc)
        start = _bound(0 if k.start is None else k.start, what, loc)
        stop = _bound(extent if k.stop is None else k.stop, what, loc)
        offsets.append(k.start if k.start is not None else 0)
        extents.append(_extent(start, stop, what, loc))
    return offsets, extents


def window(t: TensorArg, key) -> TensorWindow:
    """``t[key]`` for a tensor of a program: unit-step slices (or indices) bounded by ints or loop indices."""
    tracer = current(f"{t.name}[...]")
    loc = user_loc()
    what = f"{t.name}[...]"
    key = key if isinstance(key, tuple) else (key,)
    if len(key) > len(t.shape):
        raise compile_error(f"{what}: {len(key)} indices for a {len(t.shape)}-d tensor", loc)
    base_origin = getattr(t, "origin", (IConst(0),) * len(t.shape))
    origin, shape = [], []
    for d, extent in enumerate(t.shape):
        k = key[d] if d < len(key) else slice(None)
        runtime = isinstance(extent, ScalarArg)  # a pl.dynamic extent read at run time
        if runtime and isinstance(k, slice) and k.step in (None, 1) and k.stop is None and \
                (k.start is None or (type(k.start) is int and k.start == 0)):
            origin.append(base_origin[d])  # the whole dimension: its extent stays the run-time one
            shape.append(extent)
            continue
        if isinstance(k, slice):
            if k.step not in (None, 1):
                raise compile_error(f"{what}: a window's step must be 1, got {k.step!r}", loc)
            if runtime and k.stop is None:
                raise compile_error(f"{what}: dimension {d} is the run-time extent {extent.name}: a window "
                                    f"from {k.start!r} to its end has no fixed extent (give the stop)", loc)
            start = _bound(0 if k.start is None else k.start, what, loc)
            stop = _bound(extent if k.stop is None else k.stop, what, loc)
        else:
            start = _bound(k, what, loc)
            stop = _add(start, IConst(1))
        n = _extent(start, stop, what, loc)
        # A start over a runtime scalar (pl.read, a runtime pl.range) is checked when the kernel runs.
        if runtime:  # the window's end is checked at launch, by each load and store, against the extent
            lo = (index_range(start, tracer.ranges, loc, runtime_ok=True) or (0, 0))[0]
            if n <= 0 or lo < 0:
                raise compile_error(f"{what}: dimension {d} window from {lo} + {n} is outside [0, {extent.name}]",
                                    loc)
            origin.append(_add(base_origin[d], start))
            shape.append(n)
            continue
        lo, hi = index_range(start, tracer.ranges, loc, runtime_ok=True) or (0, extent - n)
        if n <= 0 or lo < 0 or hi + n > extent:
            raise compile_error(f"{what}: dimension {d} window [{lo}..{hi}] + {n} is outside [0, {extent}]", loc)
        origin.append(_add(base_origin[d], start))
        shape.append(n)
    return TensorWindow(TensorArg(t.param), tuple(origin), tuple(shape))


def shift(t: TensorArg, offsets: tuple, shape, op: str):
    """Offsets into ``t``'s window as offsets into its tensor (a window checks constant bounds).

    ``shape`` is the box that must lie inside the window: the valid extents of
    the tile where it has them (padding past them is neither read nor
    written), an entry None where that extent is a runtime value.
    """
    origin = getattr(t, "origin", None)
    if origin is None:
        return offsets
    if len(offsets) != len(origin):
        return offsets  # a rank mismatch, which the op's own check reports
    if shape is not None and len(shape) != len(origin):
        shape = None
    out = []
    for d, (o, base) in enumerate(zip(offsets, origin)):
        n = None if shape is None else shape[d]  # None: a runtime extent (the kernel checks it against the tensor)
        # A run-time extent of the window (a pl.dynamic dimension) is checked at launch against the tensor's.
        if isinstance(o, IConst) and isinstance(n, int) and isinstance(t.shape[d], int) and \
                not 0 <= o.value <= o.value + n <= t.shape[d]:
            raise compile_error(f"{op}: window {o.value}:{o.value + n} of dimension {d} is outside "
                                f"the {list(t.shape)} window of {t.name!r}", user_loc())
        out.append(_add(base, o))
    return tuple(out)


def create_tensor(shape, dtype, layout=None, *, memory_type=MemorySpace.DDR, name: str | None = None,
                  manual_dep: bool = False, init_value=None) -> TensorArg:
    """An intermediate tensor of a program (``pl.create_tensor([r, c], dtype=pl.FP32)``).

    Returned by the orchestration (or a ``@pl.jit`` entry), it is an output
    of the compiled program, after the parameters; otherwise it lives only
    inside one launch.  A tensor lives in DDR: ``memory_type`` may only be
    ``pl.MemorySpace.DDR`` (on-chip buffers are tiles, ``pl.create_tile``).
    With ``manual_dep=True`` no task's access to the tensor is tracked, for
    its whole lifetime: no edge is inferred from it (order its writer and
    readers with ``deps=``).  As in PyPTO the tensor's contents are undefined
    until written, unless ``init_value=`` (a number) fills it first: here a
    task of its own (``<name>_init``) stores the value over the whole
    tensor, which every later task touching it is ordered after.  PyPTO's
    ``layout=`` may only be ``pl.TensorLayout.ND`` (row-major, the default).
    """
    t = current("pl.create_tensor")
    loc = user_loc()
    space = memory_type.value if isinstance(memory_type, MemorySpace) else memory_type
    if space != MemorySpace.DDR.value:
        raise compile_error(f"pl.create_tensor: memory_type must be pl.MemorySpace.DDR, got {memory_type!r} "
                            f"(a tensor lives in DDR; make an on-chip buffer with pl.create_tile)", loc)
    shape = tuple(shape)
    runtime = next((d for d in shape if isinstance(d, Index)), None)
    if runtime is not None and getattr(t, "is_program", False) and "at" not in t.frames and init_value is None:
        from ._unify import PendingTensor  # sized by the kernel parameter it is first passed to

        return PendingTensor(shape, dtype, dict(layout=layout, memory_type=memory_type, name=name,
                                                manual_dep=manual_dep), loc)
    if runtime is not None:  # an extent read when the program runs (pl.read): the heap is planned before
        raise compile_error(f"pl.create_tensor: shape {list(shape)} has the extent {runtime!r}, a value known only "
                            f"when the program runs; an intermediate's shape is fixed when the program is compiled "
                            f"here (use an int, e.g. the tensor's pl.tensor.dim)", loc)
    if not shape or not all(isinstance(d, int) and d > 0 for d in shape):
        raise compile_error(f"pl.create_tensor: shape must be a list of positive ints, got {list(shape)}", loc)
    try:
        d = as_dtype(dtype)
    except PtoArgumentError as exc:
        raise compile_error(f"pl.create_tensor: {exc}", loc) from None
    name = name or f"tensor{len(t.scratch)}"
    if name in t.params:
        raise compile_error(f"pl.create_tensor: the name {name!r} is taken", loc)
    if not isinstance(manual_dep, bool):
        raise compile_error(f"pl.create_tensor: manual_dep must be a bool, got {manual_dep!r}", loc)
    if layout is not None and getattr(layout, "name", layout) != "ND":
        raise compile_error(f"pl.create_tensor: layout must be pl.TensorLayout.ND (a tensor here is row-major), "
                            f"got {layout!r}", loc)
    if init_value is not None:
        _check_init_value(init_value, d, manual_dep, t, loc)
    p = Param(name, INOUT, shape, d)
    t.params[name] = p
    t.scratch.append(p)
    if manual_dep:
        if not hasattr(t, "manual_dep"):
            t.manual_dep = []
        t.manual_dep.append(name)
    out = TensorArg(p)
    if init_value is not None:
        _fill(t, out, init_value, name)
    return out


def _check_init_value(value, dtype, manual_dep: bool, t, loc) -> None:
    from ..errors import PtoNotSupported

    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise compile_error(f"pl.create_tensor: init_value must be a number, got {value!r}", loc)
    if value != 0 and dtype.name in ("FP16", "BF16"):
        raise compile_error(f"pl.create_tensor: a non-zero init_value of a {dtype.name} tensor is not supported "
                            f"(PyPTO rejects it at codegen); use init_value=0 or fill it with pl.full", loc)
    if not dtype.is_float and isinstance(value, float) and not value.is_integer():
        raise compile_error(f"pl.create_tensor: init_value={value!r} is not a {dtype.name} value", loc)
    if manual_dep or t.manual > 0 or "at" in t.frames:
        raise PtoNotSupported(f"{loc}: pl.create_tensor(init_value=...) "
                              + ("inside a region" if "at" in t.frames else
                                 "with manual_dep=True or in a manual scope")
                              + ": the sim fills the tensor with a task of its own, which later tasks are ordered "
                                "after by the edges the tensor gives; create it where its edges are tracked")


def _fill(t, tensor: TensorArg, value, name: str) -> None:
    """The task that fills a new intermediate with ``init_value`` (before any task that touches it)."""
    from ._control import at
    from ._memory import store
    from ._ops import full

    with at(Level.CORE_GROUP, name_hint=f"{name}_init"):
        store(full(list(tensor.shape), value, tensor.dtype), [0] * len(tensor.shape), tensor)


_MODES = {IN: "r", OUT: "w", INOUT: "rw"}


def call_task(t, name: str, fn, self_arg, param_names: list[str], anns: dict, args, *, loc, fn_loc,
              name_hint: str | None = None, deps=None, hints: tuple = (), with_task: bool = False,
              core_num: int | None = None, fn_type=None, predicate=None):
    """Trace one call of a kernel as a task of the orchestration traced by ``t``; return its result.

    ``anns`` maps each parameter to its :class:`TensorAnnotation` or
    :class:`ScalarAnnotation`; a tensor annotation without a shape or dtype
    (a ``@pl.jit.incore`` helper's bare ``pl.Tensor``) takes the argument's.
    The task records the accesses the parameters' directions declare: each
    tensor argument's window, read for ``In``, written for ``Out``, both for
    ``InOut``; an argument wrapped in ``pl.no_dep`` is not tracked.
    ``deps=`` takes task ids and task-id arrays; ``hints`` are recorded on
    the task; ``with_task=True`` returns ``(result, task id)``.  With
    ``core_num=n`` (``pl.spmd_submit``) the task runs the body for each of
    ``n`` blocks, ``pl.tile.get_block_idx()`` giving the block's index; the
    sim runs the blocks one after another inside the task.
    """
    if len(args) != len(param_names):
        raise compile_error(f"{name} takes {len(param_names)} arguments ({', '.join(param_names)}), "
                            f"got {len(args)}", loc)
    proxies, accesses, untracked = [], [], []
    dims: dict = {}  # the pl.dynamic dimensions this call binds (each to its first argument's extent)
    from ._unify import is_pending, resolve

    args = list(args)
    for k, (pname, arg) in enumerate(zip(param_names, args)):
        ann = anns[pname]
        if is_pending(arg) and not isinstance(ann, ScalarAnnotation):  # extents read at run time: the kernel's
            arg = args[k] = resolve(t, arg, ann.shape, name, pname, loc)
        if isinstance(ann, ScalarAnnotation):
            if isinstance(arg, Index) and ann.dtype is not None and ann.dtype.is_float:
                raise compile_error(f"{name}: parameter {pname!r} is a {ann.dtype.name} scalar, got the loop "
                                    f"index {arg!r} (an integer)", loc)
            from ._runtime_scalars import FloatScalar

            if isinstance(arg, FloatScalar) and not (ann.dtype is None or ann.dtype.is_float):
                raise compile_error(f"{name}: parameter {pname!r} is a {ann.dtype.name} scalar, got {arg!r}", loc)
            if not isinstance(arg, (ScalarArg, Index, FloatScalar, int, float)):  # a loop index: read as is
                raise compile_error(f"{name}: parameter {pname!r} is a scalar, got {arg!r}", loc)
            proxies.append(arg)
            continue
        if not isinstance(arg, TensorArg):
            raise compile_error(f"{name}: parameter {pname!r} is a tensor, got {arg!r}", loc)
        why = None if ann.shape is None else bind_shape(ann.shape, tuple(arg.shape), dims)
        if why is not None or (ann.dtype is not None and arg.dtype != ann.dtype):
            declared = f"{(ann.dtype or arg.dtype).name}{list(ann.shape or arg.shape)}"
            raise compile_error(f"{name}: parameter {pname!r} is {declared}, "
                                f"got {arg.dtype.name}{list(arg.shape)} ({arg.name!r})"
                                + (f": {why}" if why else ""), loc)
        if ann.direction != IN and getattr(arg, "view_of", None):
            raise PtoNotSupported(f"{loc}: {name}: parameter {pname!r} is {ann.direction}, but {arg.name!r} is a "
                                  f"{arg.view_of}: a copy here (PyPTO's is a view of the same bytes), so a kernel "
                                  f"only reads it")
        if ann.direction != IN and t.params[arg.name].direction == IN:
            raise compile_error(f"{name}: parameter {pname!r} is {ann.direction}, but {arg.name!r} is an "
                                f"input of the orchestration (declare it pl.Out or pl.InOut)", loc)
        origin = getattr(arg, "origin", (IConst(0),) * len(arg.shape))
        proxy = TensorWindow(TensorArg(t.params[arg.name]), origin, arg.shape, ann.direction)
        from ._ops_mx import MxLayout

        if isinstance(ann.view, MxLayout):  # pl.MX_A_ZZ / pl.MX_B_NN: the kernel's loads unpack it
            proxy.mx_layout = ann.view
        valid = _view_valid(ann, arg, name, loc)
        if valid is not None:  # pl.tensor.slice(..., valid_shape=) or a pl.TensorView: the kernel's loads see it
            proxy.valid = valid
        proxies.append(proxy)
        # A run-time extent (a pl.dynamic dimension of a @pl.jit tensor) is its scalar in the access.
        accesses.append((arg.name, _MODES[ann.direction], origin,
                         tuple(IScalar(n.name) if isinstance(n, ScalarArg) else n for n in arg.shape)))
        if getattr(arg, "no_dep", False) and arg.name not in untracked:
            untracked.append(arg.name)
    from .array import split_deps

    spmd_call = getattr(t, "spmd_call", None)
    if spmd_call is not None and core_num is None:  # the first call inside `with pl.spmd(n, ...) [as tid]:`
        t.spmd_call = None
        deps = spmd_call["deps"] if deps is None else [*deps, *(spmd_call["deps"] or ())]
        hints = (*hints, *spmd_call["hints"])
        name_hint = name_hint or spmd_call["name_hint"]
        predicate = predicate if predicate is not None else spmd_call.get("predicate")
    cluster = getattr(t, "cluster", None)  # inside `with pl.cluster():` (PyPTO's Group: no per-task metadata)
    if cluster is not None:
        if deps:
            raise compile_error(f"{name}(..., deps=) inside pl.cluster() cannot carry per-task dispatch metadata: "
                                f"the cluster is dispatched as one Group task", loc)
        hints = (*hints, ("cluster", cluster))
    deps, dep_arrays, dep_slots = split_deps(deps, loc)
    deps_ids = task_deps(t, deps, loc, t.next_task)
    if any(frame == "at" for frame in t.frames):
        raise compile_error(f"{name}(...) is a task: call it from the orchestration, not inside a region", loc)
    task = t.next_task
    t.next_task += 1
    t.open_block("at")
    ok = False
    from ._branch import traced_fn

    fn = traced_fn(fn)
    t.func_attrs = {"params": proxies, "hints": []}  # what pl.func_attr in the body declares
    if fn_type in (FunctionType.AIC, FunctionType.AIV):  # the side of a cross-core pipe the body runs on
        t.func_attrs["fn_type"] = fn_type.value
        hints = (*hints, ("core", fn_type.value))  # and the kind of core the device model places it on
    t.func_attrs["accesses"] = []  # tensors the body reaches besides its parameters (a Group's pipes)
    blocks = None
    if core_num is None:
        core_num = getattr(t, "spmd_dispatch", None)  # a call inside `with pl.spmd(n):` of a program
    if core_num is not None:  # pl.spmd_submit: the body once per block, in a loop over the block index
        blocks = t.new_index("b")
        t.ranges[blocks.name] = (0, core_num - 1)
        t.open_block("range")
        t.block_index = Index(blocks)
    try:
        result = fn(self_arg, *proxies) if self_arg is not None else fn(*proxies)
        result = _returned_tiles(t, name, result, accesses, fn_loc)
        from ._ops_crosscore import function_closed

        function_closed(t, fn_loc)
        ok = True
    finally:
        if blocks is not None:
            inner = t.close_block()
            del t.ranges[blocks.name]
            t.block_index = None
            t.append(For(blocks, 0, core_num, 1, inner, loc))  # the blocks, in order (hint core_num)
        body = t.close_block()
        if ok and predicate is not None:  # pl.submit(..., predicate=...): the body only where it holds
            body, extra = predicate.wrap(t, body, loc)
            accesses += list(extra)
        declared = tuple(t.func_attrs["hints"])
        accesses += t.func_attrs["accesses"]
        t.func_attrs = None
    if ok:
        from ._submit import task_dumps

        explicit = tuple(n for k, v in hints if k == "dumps" for n in v)
        hints = tuple(h for h in hints if h[0] != "dumps") + task_dumps(t, {a[0] for a in accesses}, explicit)
        t.append(Scope(Level.CORE_GROUP.value, body, loc, name=name_hint or name, deps=deps_ids,
                       manual=t.manual > 0, task=task, accesses=tuple(accesses), no_dep=tuple(untracked),
                       hints=declared + tuple(hints) + scope_hints(t), dep_arrays=dep_arrays,
                       dep_slots=dep_slots))
    out = _task_result(name, result, proxies, [_tracked(a) for a in args], fn_loc)
    if with_task:
        from ._control import TaskId

        return out, TaskId(t, task, name_hint or name)
    return out


def _tracked(arg):
    """A call's argument as the caller sees it after the call: a ``pl.no_dep`` mark does not outlive the call."""
    if getattr(arg, "no_dep", False):
        import copy

        arg = copy.copy(arg)
        arg.no_dep = False
    return arg


def _view_valid(ann, arg, name: str, loc):
    """The valid box a kernel sees of ``arg``: its parameter's ``pl.TensorView(valid_shape=)``, else the argument's."""
    own = getattr(arg, "valid", None)
    view = getattr(ann, "view", None)
    if view is None or view.valid_shape is None:
        return own
    from ._placement import DynamicDim

    out = []
    for d, e in enumerate(view.valid_shape):
        if isinstance(e, DynamicDim):  # the argument's own extent
            out.append(own[d] if own is not None else arg.shape[d])
        elif isinstance(e, (int, Index, ScalarArg)) and not isinstance(e, bool):
            out.append(e)
        else:
            raise compile_error(f"{name}: pl.TensorView valid_shape entry {e!r} is not an int, a pl.dynamic "
                                f"dimension or an index", loc)
    return tuple(out)


class _ReturnedTile:
    """A tile a kernel returned: stored, at the end of its body, into a new intermediate of the caller."""

    def __init__(self, tensor: TensorArg):
        self.tensor = tensor


def _returned_tiles(t, name: str, result, accesses: list, fn_loc):
    """A kernel's returned tiles, each stored into a new intermediate tensor that the call returns.

    As PyPTO's ConvertTensorToTileOps does for an InCore function returning
    a computed value: the function gets an ``Out`` parameter the tile is
    stored into (its valid region), and the call site a new tensor
    (``tensor.create``) of the tile's shape and dtype for it.
    """
    if isinstance(result, tuple):
        return tuple(_returned_tiles(t, name, r, accesses, fn_loc) for r in result)
    from ._tracer import Tile

    if not isinstance(result, Tile):
        return result
    from ._memory import store

    shape = tuple(result.shape)
    k = sum(1 for q in t.scratch if q.name.startswith(f"{name}_ret"))
    p = Param(f"{name}_ret{k}", INOUT, shape, result.dtype)
    t.params[p.name] = p
    t.scratch.append(p)
    zeros = (IConst(0),) * len(shape)
    store(result, [0] * len(shape), TensorWindow(TensorArg(p), zeros, shape, OUT))
    accesses.append((p.name, "w", zeros, shape))
    return _ReturnedTile(TensorArg(p))


def _task_result(name, result, proxies, args, fn_loc):
    """Map what a kernel returned (its own parameters) back to the caller's arguments."""
    if isinstance(result, tuple):
        return tuple(_task_result(name, r, proxies, args, fn_loc) for r in result)
    if isinstance(result, _ReturnedTile):
        return result.tensor
    for p, a in zip(proxies, args):
        if result is p:
            return a
    if result is None:
        return None
    raise compile_error(f"{name} must return its tensor parameters, tiles (each a new tensor of the caller) or "
                        f"nothing, got {result!r}", fn_loc)


class _Kernel:
    """``self.kernel`` inside the orchestration: calling it traces the kernel's body as one task."""

    def __init__(self, prog, fn: _Function):
        self.prog = prog
        self.fn = fn

    def __call__(self, *args, name_hint: str | None = None, deps=None):
        return self.call(args, name_hint=name_hint, deps=deps, loc=user_loc())

    def call(self, args, *, loc, name_hint: str | None = None, deps=None, hints: tuple = (), with_task=False,
             core_num: int | None = None, predicate=None):
        """Trace one call of the kernel as a task (``pl.submit`` passes ``hints`` and ``with_task=True``)."""
        t = current(f"self.{self.fn.name}")
        names = self.fn.param_names()
        raw = self.fn.annotations()
        anns = {n: _annotation(raw.get(n), f"{self.fn.name}: parameter {n!r}", self.fn.loc) for n in names}
        hints = (*getattr(self.fn, "hints", ()), *hints)
        return call_task(t, self.fn.name, self.fn.fn, self.prog, names, anns, args, loc=loc,
                         fn_loc=self.fn.loc, name_hint=name_hint, deps=deps, hints=hints, with_task=with_task,
                         core_num=core_num, fn_type=self.fn.type, predicate=predicate)


#: The function types an orchestration calls as kernels (each call one task).
_KERNEL_TYPES = (FunctionType.InCore, FunctionType.Opaque, FunctionType.AIC, FunctionType.AIV)


def _splice(f, self_arg, args):
    """Trace an Inline function's body where it is called (PyPTO's ``InlineFunctions`` pass)."""
    from ._branch import traced_fn

    names = list(inspect.signature(f.fn).parameters)
    if names and names[0] == "self" and self_arg is None:
        self_arg = _Self({})
    fn = traced_fn(f.fn)
    return fn(self_arg, *args) if self_arg is not None else fn(*args)


class _Inlined:
    """``self.helper`` of an Inline function: calling it splices the body into the caller."""

    def __init__(self, prog, fn):
        self.prog, self.fn = prog, fn

    def __call__(self, *args):
        return _splice(self.fn, self.prog, args)


class _Self:
    """The ``self`` an orchestration sees: its kernels, as task-making callables."""

    def __init__(self, kernels: dict):
        self._kernels = kernels

    def __getattr__(self, name):
        try:
            return self._kernels[name]
        except KeyError:
            raise AttributeError(f"the program has no InCore function {name!r}") from None


def runtime_dims(names, anns: dict) -> tuple:
    """The ``(hidden scalar Param, tensor, axis)`` of each ``pl.dynamic`` dimension a signature leaves to run time.

    A dimension qualifies when it only annotates leading dimensions of
    tensors, itself (not in an expression): no stride depends on it.  Any
    other dynamic dimension of the signature must be bound (empty result).
    """
    found: dict = {}
    for name in names:
        ann = anns.get(name)
        if not isinstance(ann, TensorAnnotation) or ann.shape is None:
            continue
        for axis, d in enumerate(ann.shape):
            if isinstance(d, DynamicDim) and axis == 0:
                found.setdefault(id(d), (d, []))[1].append((name, axis))
            elif is_dynamic_dim(d):
                return ()
    used = set(names)
    out = []

    def scalar(name: str) -> Param:
        while name in used:
            name += "_"
        used.add(name)
        return Param(name, SCALAR, (), INT64)

    # PyPTO's orchestration reads each tensor's extents from its own argument: a scalar per tensor, the
    # first named after the dimension (the body's N), the others after their tensor too.
    for dim, sites in found.values():
        out.extend((scalar(dim.name if k == 0 else f"{dim.name}_{t}"), t, a, dim) for k, (t, a) in enumerate(sites))
    return tuple(out)


def runtime_dim_scalars(runtime) -> list:
    """``(DynamicDim, hidden scalar Param)`` of each dimension :func:`runtime_dims` found: its first tensor's."""
    out: dict = {}
    for q, _, _, dim in runtime:
        out.setdefault(id(dim), (dim, q))
    return list(out.values())


def _dynamic_dims(shape) -> list:
    """The :class:`DynamicDim` objects a declared shape names (directly or in a dim expression)."""
    out = []
    for d in shape:
        if isinstance(d, DimExpr):
            out.extend(d.dims())
        elif isinstance(d, DynamicDim):
            out.append(d)
    return out


class ProgramDef:
    """A ``@pl.program`` class: its kernels and its orchestration; ``ir.compile(cls)`` compiles it."""

    __pl_program__ = True

    def __init__(self, cls):
        self.cls = cls
        self.name = cls.__name__
        self.__name__ = cls.__name__
        self.__qualname__ = cls.__qualname__
        self.__doc__ = cls.__doc__
        from .distributed_host import HostLevelFunction

        #: HOST-level functions of a multi-chip program (``pl.function(level=pl.Level.HOST, role=...)``).
        self.host_functions = {v.name: v for v in vars(cls).values() if isinstance(v, HostLevelFunction)}
        fns = {k: v for k, v in vars(cls).items() if isinstance(v, _Function)}
        self._all = fns
        orch = [f for f in fns.values() if f.type is FunctionType.Orchestration]
        opaque = [f for f in fns.values() if f.type is FunctionType.Opaque]
        # An Opaque function takes its plane from its use: beside an orchestration (or with other
        # kernels and no orchestration) it is a kernel the orchestration calls.
        kernel_types = _KERNEL_TYPES if orch or len(opaque) != 1 else \
            tuple(k for k in _KERNEL_TYPES if k is not FunctionType.Opaque)
        self.kernels = {k: f for k, f in fns.items() if f.type in kernel_types}
        counts = (len(orch), len(opaque))
        if orch or len(opaque) > 1:
            opaque = []
        # The entry: the orchestration, or (PyPTO's other form) one Opaque function holding its own regions.
        # A class of InCore functions alone is a program too (a library of kernels), with nothing to compile.
        self._entries = counts
        if len(orch) == 1 and not opaque or not orch and len(opaque) == 1 or self.host_functions and orch:
            self.orchestration = (orch or opaque)[0]  # with HOST functions: one chip program; each is an entry
        elif not orch and not opaque:
            self.orchestration = None
        else:
            self._no_entry()

    def _no_entry(self):
        orch, opaque = self._entries
        raise PtoCompileError(f"@pl.program {self.name} compiles one entry: one "
                              f"@pl.function(type=pl.FunctionType.Orchestration), or one "
                              f"pl.FunctionType.Opaque function and no orchestration; found {orch} "
                              f"Orchestration and {opaque} Opaque")

    def __repr__(self) -> str:
        return f"<pl.program {self.__qualname__}: kernels {sorted(self.kernels)}>"

    def get_function(self, name: str):
        """The program's function `name` (kernel, orchestration or HOST function), or None (PyPTO's)."""
        return self.host_functions.get(name) or next(
            (f for f in self._all.values() if f.name == name), None)

    def with_entry(self, name: str) -> "ProgramDef":
        """This program with orchestration `name` as its entry (a chip program of its host orchestrator)."""
        import copy

        other = copy.copy(self)
        other.orchestration = self.chip_orchestration(name)
        return other

    def chip_orchestration(self, name: str):
        """The Orchestration function `name`, or None."""
        return next((f for f in self._all.values() if f.name == name and f.type is FunctionType.Orchestration),
                    None)

    def bind(self, *args) -> "ProgramDef":
        """The program with its orchestration's ``pl.dynamic`` dimensions bound to these arguments' extents.

        ``args`` are the orchestration's arguments in parameter order (host
        arrays, torch tensors, anything with a ``shape``; scalars are
        skipped), or a prefix of them (the inputs of a return-style call):
        each dynamic dimension takes the extent of the first argument it
        annotates.  ``ir.compile(Prog.bind(*tensors))`` compiles for those
        extents; ``runtime.run(Prog, *tensors)`` binds them itself.
        """
        out = object.__new__(ProgramDef)
        out.__dict__.update(self.__dict__)
        out._bound = tuple(args)
        return out

    @property
    def is_dynamic(self) -> bool:
        """Whether the orchestration's signature has a ``pl.dynamic`` dimension (bound by :meth:`bind`)."""
        if self.orchestration is None:
            return False
        anns = self.orchestration.annotations()
        return any(isinstance(a, TensorAnnotation) and is_dynamic(a.shape) for a in anns.values())

    def _shape(self, name: str, ann: TensorAnnotation, arg, dims: dict, orch) -> tuple[int, ...]:
        """A parameter's shape: its annotation's, ``pl.dynamic`` dims taken from the bound arguments."""
        if arg is not None and hasattr(arg, "shape"):
            shape = tuple(int(d) for d in arg.shape)
            trial = dict(dims)
            why = bind_shape(ann.shape, shape, trial)
            if why is None:
                dims.update(trial)
            else:
                # PyPTO reads each orchestration tensor's extents from its own argument: a pl.dynamic name
                # bound to another extent by an earlier argument (a flat [M] beside an [M, N] view of it)
                # takes this argument's extent here (the name's value elsewhere stays the first binding).
                mine = {id(d) for d in _dynamic_dims(ann.shape)}
                own = {k: v for k, v in dims.items() if k not in mine}
                if bind_shape(ann.shape, shape, own) is not None:
                    raise compile_error(f"{orch.name}: parameter {name!r} is declared {list(ann.shape)}, got an "
                                        f"argument of shape {list(arg.shape)}: {why}", orch.loc)
                for k, v in own.items():
                    dims.setdefault(k, v)
                dims = own
        if not is_dynamic(ann.shape):
            return ann.shape
        shape = []
        for d in ann.shape:
            n = dim_value(d, lambda x: dims[id(x)][1] if id(x) in dims else None)
            if n is not None:
                shape.append(n)
            else:
                d = ", ".join(dict.fromkeys(x.name for x in _dynamic_dims(ann.shape) if id(x) not in dims))
                raise PtoNotSupported(
                    f"{orch.loc}: {orch.name}: parameter {name!r} is {list(ann.shape)}: unbound, a pl.dynamic "
                    f"dimension is read at run time only when every one in the signature is used as nothing but "
                    f"tensors' leading extents (an inner one or an expression sets strides, compiled per extent); "
                    f"bind {d} to the tensors it runs on, runtime.run({self.name}, *tensors) or "
                    f"ir.compile({self.name}.bind(*tensors))")
        return tuple(shape)

    def trace(self) -> Program:
        """Trace the orchestration (each kernel call a task) into a Program, before any pass."""
        orch = self.orchestration
        if orch is None:
            self._no_entry()
        opaque = orch.type is FunctionType.Opaque
        anns = orch.annotations()
        params = []
        bound = getattr(self, "_bound", ())
        dims: dict = {}
        names = orch.param_names()
        anns_of = {name: _annotation(anns.get(name), f"{orch.name}: parameter {name!r}", orch.loc) for name in names}
        # Bound arguments first, so a dimension an unbound (later) parameter shares with them is known.
        shapes = {}  # each bound tensor's shape: its own extents (see _shape)
        for i, name in enumerate(names):
            if i < len(bound) and isinstance(anns_of[name], TensorAnnotation):
                shapes[name] = self._shape(name, anns_of[name], bound[i], dims, orch)
        # Unbound, a pl.dynamic leading dimension is read at run time (one artifact; see _dynamic).
        runtime = () if bound else runtime_dims(names, anns_of)
        hidden = list(dict.fromkeys(q for q, _, _, _ in runtime))
        for _, t, axis, dim in runtime:
            shapes[t] = tuple(DynamicExtent(dim.name) if a == axis else d
                              for a, d in enumerate(shapes.get(t, anns_of[t].shape)))
        for name in names:
            ann = anns_of[name]
            if isinstance(ann, ScalarAnnotation):
                params.append(Param(name, SCALAR, (), ann.dtype))
            else:
                # An Opaque function's tensors may be written whatever they are annotated: traced
                # writable, each is then an input unless its body stores to it (_opaque_directions).
                direction = INOUT if opaque and ann.direction == IN else ann.direction
                shape = shapes[name] if name in shapes else self._shape(name, ann, None, dims, orch)
                params.append(Param(name, direction, shape, ann.dtype))
        tracer = Tracer(self.name, [*params, *hidden])
        tracer.dims = dict(dims)  # the bound pl.dynamic dims: ints in the bodies (see _placement.resolve_dim)
        tracer.dyn_axes = {}  # the run-time ones: their hidden scalars (x.shape[0], pl.tensor.dim(x, 0), N)
        for q, t, axis, _ in runtime:
            tracer.dyn_axes.setdefault(t, {})[axis] = ScalarArg(q)
        for dim, q in runtime_dim_scalars(runtime):
            tracer.dims[id(dim)] = (dim, ScalarArg(q))
        tracer.auto_scope = getattr(orch, "auto_scope", True)
        tracer.is_program = True  # `with pl.spmd(n):` around kernel calls dispatches each to n blocks
        me = _Self({})
        me._kernels.update({k: _Kernel(me, f) for k, f in self.kernels.items()})
        me._kernels.update({k: _Inlined(me, f) for k, f in self._all.items() if f.type is FunctionType.Inline})
        from ._ops_crosscore import Group

        me._kernels.update({k: Group(me, f) for k, f in self._all.items() if f.type is FunctionType.Group})
        from .distributed_trace import scalar_proxy  # a scalar a multi-chip dispatch fixes: its int

        proxies = [scalar_proxy(p) if p.direction == SCALAR else TensorArg(p) for p in params]
        for x in proxies:
            if isinstance(x, TensorArg) and x.name in tracer.dyn_axes:
                x.shape = dynamic_shape(x.param.shape, tracer.dyn_axes[x.name])
        from ._branch import traced_fn

        try:
            with tracing(tracer):
                result = traced_fn(orch.fn)(me, *proxies)  # an if on a runtime scalar: both branches, as in a kernel
        except PtoNotSupported:
            raise
        except Exception as exc:
            if runtime:
                self._needs_extents(orch, runtime, exc)
            raise
        if len(tracer.blocks) != 1:
            raise compile_error(f"{self.name}: a pl.range loop did not finish (break is not supported)", orch.loc)
        if tracer.block_num is not None:
            raise compile_error(f"{self.name}: pl.spmd is not supported in a @pl.program's kernels yet (the program "
                                f"runs as one launch of one block; write the blocks as separate kernel calls)",
                                orch.loc)
        returned = self._returned(result, orch)
        # A direction the body changed: a pl.Out an atomic-add store adds into is read too (see _memory).
        params = [tracer.params.get(p.name, p) for p in params]
        if opaque:
            params = _opaque_directions(params, anns, tracer.blocks[0])
        outs = [p for p in tracer.scratch if p.name in returned]
        scratch = tuple(p for p in tracer.scratch if p.name not in returned)
        all_params = (*params, *hidden, *(Param(p.name, OUT, p.shape, p.dtype) for p in outs))
        ret = ", ".join(returned) or None
        from ._submit import program_dump_tags

        traced = Program(self.name, all_params, tuple(tracer.blocks[0]), 1, ret, scratch=scratch,
                         manual_dep=tuple(getattr(tracer, "manual_dep", ())),
                         dump_tags=program_dump_tags(tracer, tracer.blocks[0]),
                         entry=orch.name if orch.name != self.name else None,
                         dynamic=tuple((q.name, t, axis) for q, t, axis, _ in runtime))
        if runtime and not extent_free(traced):
            self._needs_extents(orch, runtime, None)
        return traced

    def _needs_extents(self, orch, runtime, exc) -> None:
        """Raise for an unbound program whose trace needs a run-time extent as a number."""
        names = ", ".join(dict.fromkeys(dim.name for _, _, _, dim in runtime))
        why = f" ({exc})" if exc is not None else ""
        raise PtoNotSupported(
            f"{orch.loc}: {orch.name}: the trace needs the extent of {names} as a number (a tile or "
            f"pl.create_tensor of that size, a Python loop over it){why}; bind it to the tensors the program "
            f"runs on: runtime.run({self.name}, *tensors) or ir.compile({self.name}.bind(*tensors))") from exc

    @property
    def functions(self) -> dict[str, "_Function"]:
        """The program's ``@pl.function`` methods by name: its kernels and its orchestration."""
        entry = {} if self.orchestration is None else {self.orchestration.name: self.orchestration}
        return {**{f.name: f for f in self.kernels.values()}, **entry}

    def as_python(self, form: str = "jit") -> str:
        """The traced program as source.

        ``form="jit"``: one ``@pl.jit`` function (see :meth:`Program.as_python`).
        ``form="class"``: a ``@pl.program`` class, one InCore function per
        kernel call on the same windows; compiling the class it defines
        gives the same artifact (see :mod:`pypto_async.ir._program_python`).
        """
        if form == "jit":
            return self.trace().as_python(form="jit")
        if form == "class":
            from ..ir._program_python import format_program_class

            return format_program_class(self.trace())
        raise PtoArgumentError(f"as_python(form=...) takes 'jit' or 'class', got {form!r}")

    def _returned(self, result, orch) -> list[str]:
        items = result if isinstance(result, tuple) else (() if result is None else (result,))
        names = []
        for r in items:
            if not isinstance(r, TensorArg) or hasattr(r, "origin"):
                raise compile_error(f"{orch.name} must return whole tensors (or nothing), got {r!r}", orch.loc)
            names.append(r.name)
        return names


def _stored(body) -> set[str]:
    """The tensors ``body`` stores to, at any depth."""
    out = set()
    for s in body:
        if isinstance(s, Store):
            out.add(s.param)
        for inner in ("body", "members"):
            if isinstance(getattr(s, inner, None), tuple):
                out |= _stored(getattr(s, inner))
    return out


def _opaque_directions(params, anns, body) -> list[Param]:
    """An Opaque entry's tensors: declared ``pl.Tensor``, one its body stores to is ``InOut``, else ``In``."""
    written = _stored(body)
    out = []
    for p in params:
        declared = anns.get(p.name)
        if p.direction == INOUT and getattr(_annotation(declared, p.name, None), "direction", None) == IN:
            p = Param(p.name, INOUT if p.name in written else IN, p.shape, p.dtype)
        out.append(p)
    return out


def program(cls):
    """Make a class a program (``@pl.program``): its ``@pl.function`` methods are its kernels and orchestration."""
    if not isinstance(cls, type):
        raise PtoCompileError(f"@pl.program decorates a class, got {cls!r}")
    return ProgramDef(cls)


def add_task_access(t, name: str, mode: str, shape) -> None:
    """Record that the kernel call being traced reads (``"r"``) or writes (``"w"``) all of tensor ``name``."""
    from ..ir._nodes import IConst

    t.func_attrs["accesses"].append((name, mode, (IConst(0),) * len(shape), tuple(shape)))


def orchestration_view(op: str, tensor, shape, build):
    """``pl.reshape`` / ``pl.transpose`` of a tensor in a program's orchestration: a tensor to pass to kernels.

    PyPTO's orchestration makes a view of the same bytes (``ChipTensor::reshape``
    / ``transpose``).  Here it is a new intermediate holding those values,
    written by a task of its own (``<op>_<tensor>``) that loads the tensor
    and stores ``build(tile)``; later tasks reading it are ordered after.
    It is read-only: writing through it (a kernel's ``Out`` / ``InOut``
    parameter) would not reach the tensor, and is refused.
    """
    from ._control import at
    from ._memory import load, store

    t = current(f"pl.{op}")
    k = sum(1 for q in t.scratch if q.name.startswith(f"{tensor.name}_{op}"))
    out = create_tensor(list(shape), tensor.dtype, name=f"{tensor.name}_{op}{k}")
    with at(Level.CORE_GROUP, name_hint=f"{op}_{tensor.name}"):
        tile = load(tensor, [0] * len(tensor.shape), list(tensor.shape))
        store(build(tile), [0] * len(out.shape), out)
    out.view_of = f"pl.{op} of {tensor.name!r} in the orchestration"
    return out


def in_orchestration(x) -> bool:
    """Whether ``x`` is a tensor used in a program's orchestration, outside every task (a view is made there)."""
    t = current("pl.reshape")
    return isinstance(x, TensorArg) and getattr(t, "is_program", False) and "at" not in t.frames
