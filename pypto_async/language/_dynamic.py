"""One ``@pl.jit`` artifact for every extent of a ``pl.dynamic`` dimension.

A ``pl.dynamic`` dim that only annotates the leading dimension of tensor
parameters is read at run time: the kernel is traced once with the dim a
hidden INT64 scalar parameter (the tensors declare the placeholder
:data:`~pypto_async.ir._program.DYNAMIC_EXTENT` there, and the program's
``dynamic`` field names which scalar each such dimension is).  In the body
``x.shape[0]`` and ``pl.tensor.dim(x, 0)`` are that scalar: loop bounds,
offsets and valid extents computed from it are run-time values of the
generated C, and every load and store of such a tensor checks its window
against the extent passed at launch (``PTO_EINVAL`` naming the statement).

The artifact is compiled once; each set of extents it is called with gets
a handle of its own (:func:`extent_view`: the same ``kernel.so``, the
parameters with those extents, so the runtime checks the arguments
against them), and the call passes the extents as the hidden scalars
(:func:`with_extents`).
"""

from __future__ import annotations

import dataclasses

from .._signature import SCALAR, ParamSpec
from ..errors import PtoArgumentError
from ..ir._compile import CompiledProgram
from ..ir._nodes import IRead, Param, ScalarRef, Store
from ..ir._program import DYNAMIC_EXTENT, Program

__all__ = ["DynamicProgram", "dynamic_program", "dynamic_shape", "extent_free", "extent_view", "name_extents",
           "with_extents"]


def dynamic_shape(shape: tuple, axes: dict) -> tuple:
    """``shape`` with each axis of ``axes`` (``axis -> ScalarArg``) its run-time scalar."""
    return tuple(axes.get(a, n) for a, n in enumerate(shape))


def extent_free(program: Program) -> bool:
    """Whether the traced ``program`` never used a run-time extent as a number.

    The placeholder extent may appear only as the declared extent of the
    parameters; anywhere else (a tile's or scratch tensor's shape, a loop
    bound, an index constant) the trace needed the value, and the program
    must be compiled per extent.  A tensor with a run-time extent may be
    accessed only by windowed loads and stores (their bounds are checked at
    run time against the extent), not ``pl.read`` / ``pl.mscatter``.
    """
    tensors = {t for _, t, _ in program.dynamic}
    seen: set = set()

    def ok(x) -> bool:
        if isinstance(x, bool):
            return True
        if isinstance(x, int):
            return x != DYNAMIC_EXTENT
        if isinstance(x, (str, float, type(None))):
            return True
        if isinstance(x, (tuple, list)):
            return all(ok(y) for y in x)
        if isinstance(x, dict):
            return all(ok(y) for y in x.values())
        if not dataclasses.is_dataclass(x) or isinstance(x, type):
            return True
        if id(x) in seen:
            return True
        seen.add(id(x))
        if isinstance(x, (IRead, ScalarRef)) and x.param in tensors:
            return False
        if isinstance(x, Store) and x.index is not None and x.param in tensors:
            return False
        return all(ok(getattr(x, f.name)) for f in dataclasses.fields(x))

    return ok(program.body) and ok(program.scratch)


class ExtentView(CompiledProgram):
    """A dynamic artifact's handle for one set of run-time extents (the same library; see the module).

    Called directly (``kernel.compile(*args)(*args)``), it passes the
    extents itself.
    """

    def __call__(self, *args, stream=None, config=None):
        return super().__call__(*with_extents(self, args), stream=stream, config=config)


def extent_view(base: CompiledProgram, params: list[Param], views: dict) -> CompiledProgram:
    """``base``'s handle for the extents of ``params`` (the call's parameters), made once per set of extents."""
    key = (base.ir_hash, base.output_dir, tuple(params))
    hit = views.get(key)
    if hit is not None:
        return hit
    program = base.program
    concrete = {p.name: p for p in params}
    hidden = [sc for sc, _, _ in program.dynamic]
    hidden = list(dict.fromkeys(hidden))
    where = {sc: (t, a) for sc, t, a in program.dynamic}
    order = [p.name for p in params]
    view = _clone(base, ExtentView)
    view.params = tuple(ParamSpec(q.name, q.direction, concrete[q.name].shape if q.name in concrete else q.shape,
                                  q.dtype) for q in base.params)
    view.program = dataclasses.replace(program, params=tuple(
        dataclasses.replace(q, shape=concrete[q.name].shape) if q.name in concrete and q.direction != SCALAR
        else q for q in program.params))
    #: Each hidden scalar's source, in parameter order: (index of the tensor among the call's arguments, axis).
    view.extent_of = tuple((order.index(where[sc][0]), where[sc][1]) for sc in hidden)
    view.user_arity = len(params)
    view.base = base
    views[key] = view
    return view


def with_extents(compiled, args) -> tuple:
    """``args`` and, for a dynamic artifact, the run-time extents its hidden scalars take from them."""
    extent_of = getattr(compiled, "extent_of", None)
    if not extent_of or len(args) != compiled.user_arity:
        return tuple(args)
    return (*args, *(int(args[i].shape[a]) for i, a in extent_of))


class DynamicProgram(CompiledProgram):
    """``ir.compile`` of a ``@pl.program`` whose ``pl.dynamic`` leading dimensions are read at run time.

    One artifact serves every extent: each call takes each tensor's extent
    from its own argument (every argument, in place; as PyPTO's
    orchestration, two tensors of one dimension may differ), checks the
    static dimensions and runs the artifact's handle for those extents
    (:func:`extent_view`).
    """

    def __call__(self, *args, stream=None, config=None):
        return self.for_args(*args)(*args, stream=stream, config=config)

    def for_args(self, *args) -> CompiledProgram:
        """The handle for these arguments' extents (the same library), after checking them."""
        program = self.program
        hidden = {sc for sc, _, _ in program.dynamic}
        user = []
        for q in program.params:
            if q.name in hidden:
                break
            user.append(q)
        if len(args) != len(user):
            raise PtoArgumentError(
                f"{program.name} takes {len(user)} arguments ({', '.join(q.name for q in user)}), got "
                f"{len(args)}: a program whose extents are read at run time is called with every argument, "
                f"in place (each tensor's extent comes from its argument)")
        axes = {(t, a): sc for sc, t, a in program.dynamic}
        params = []
        for q, arg in zip(user, args):
            if q.direction == SCALAR:
                params.append(q)
                continue
            shape = getattr(arg, "shape", None)
            if shape is None:
                raise PtoArgumentError(f"{program.name}: argument {q.name!r} is a tensor, got {type(arg).__name__}")
            shape = tuple(int(n) for n in shape)
            if len(shape) != len(q.shape):
                raise PtoArgumentError(f"{program.name}: argument {q.name!r} is declared {list(q.shape)}, got "
                                       f"shape {list(shape)} ({len(shape)}-d)")
            for a, (n, declared) in enumerate(zip(shape, q.shape)):
                sc = axes.get((q.name, a))
                if sc is None:
                    if n != declared:
                        raise PtoArgumentError(f"{program.name}: argument {q.name!r} is declared {list(q.shape)}, "
                                               f"got shape {list(shape)}: dimension {a} is {n}, not {declared}")
                    continue
                if n < 1:
                    raise PtoArgumentError(f"{program.name}: argument {q.name!r}: {sc} is {n} (an extent is "
                                           f"at least 1)")
            params.append(Param(q.name, q.direction, shape, q.dtype))
        return extent_view(self, params, self._views)


def dynamic_program(handle: CompiledProgram) -> CompiledProgram:
    """``handle`` as a :class:`DynamicProgram` when its program reads extents at run time."""
    if not getattr(handle.program, "dynamic", ()):
        return handle
    handle = _clone(handle.base if isinstance(handle, ExtentView) else handle, DynamicProgram)
    handle._views = {}
    return name_extents(handle)


def name_extents(handle: CompiledProgram) -> CompiledProgram:
    """``handle`` with its parameters' run-time extents named (its metadata stores the placeholder number)."""
    declared = {q.name: q.shape for q in handle.program.params}
    handle.params = tuple(ParamSpec(p.name, p.direction, declared.get(p.name, p.shape), p.dtype)
                          for p in handle.params)
    return handle


def _clone(handle: CompiledProgram, cls) -> CompiledProgram:
    """A shallow copy of ``handle`` as a ``cls`` (``copy.copy`` would go through the pickled artifact)."""
    out = object.__new__(cls)
    out.__dict__.update(handle.__dict__)
    return out
