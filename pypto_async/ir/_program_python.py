"""Print a ``@pl.program`` back as a class (``MyProgram.as_python(form="class")``).

The traced program keeps each kernel call as a task whose body addresses the
orchestration's tensors, and the windows the call passed (its declared
accesses).  The printed class has one InCore function per call site, whose
parameters are those windows (``pl.Tensor[[r, c], dtype]``, ``pl.Out`` or
``pl.InOut`` by the access) and whose loads and stores are relative to the
window again; the orchestration makes the intermediates
(``pl.create_tensor(..., name=...)``), keeps ``pl.range`` loops as loops and
calls each function on the same windows, with ``name_hint=`` the task's
name.  Executing the source and tracing the class gives the same program:
the same tasks, accesses, parameters and statements (tile numbering
included), so it compiles to the same artifact.

Kernel bodies print through the ``@pl.jit`` printer (:mod:`._python`).  A call
that passes two windows of one tensor, an offset that is not the window's
origin plus a constant (or an expression of the kernel's own loops), or a
declared ``deps=`` has no such form here: printing raises ``ValueError``.
"""

from __future__ import annotations

from dataclasses import replace

from .._signature import INOUT, OUT, SCALAR
from ._nodes import (
    Assign,
    DynFor,
    For,
    IBin,
    IConst,
    IRead,
    IScalar,
    IVar,
    SetIndex,
    Load,
    ScalarRef,
    Scope,
    Spmd,
    Store,
)
from ._program import Program
from ._nodes import linear_index as _linear
from ._python import _Printer, _index, _ints

__all__ = ["format_program_class"]

_ANN = {"r": "{}", "w": "pl.Out[{}]", "rw": "pl.InOut[{}]"}


def _from_linear(terms: dict):
    expr = IConst(terms.get(None, 0))
    for name, coef in sorted((k, v) for k, v in terms.items() if k is not None and v):
        term = IVar(name) if coef == 1 else IBin("*", IVar(name), IConst(coef))
        expr = term if expr == IConst(0) else IBin("+", expr, term)
    return expr


class _Site:
    """One kernel call: its windows by tensor, and its body rewritten onto them."""

    def __init__(self, scope: Scope, outer: set[str], where: str):
        self.scope = scope
        self.outer = outer
        self.where = where
        self.windows: dict[str, tuple[str, tuple, tuple]] = {}  # tensor -> (local name, origin, shape)
        for k, (tensor, mode, origin, shape) in enumerate(scope.accesses):
            if tensor in self.windows:
                raise ValueError(f"{where}: passes two windows of {tensor!r}; as_python cannot tell them apart")
            self.windows[tensor] = (f"p{k}", tuple(origin), tuple(shape))
        self.scalars: list[str] = []

    def relative(self, tensor: str, offsets) -> tuple:
        _, origin, _ = self.windows[tensor]
        out = []
        for off, o in zip(offsets, origin):
            if o == IConst(0):
                out.append(off)
                continue
            a, b = _linear(off), _linear(o)
            if a is None or b is None:
                raise ValueError(f"{self.where}: offset {_index(off)} of {tensor!r} is not its window's origin "
                                 f"{_index(o)} plus an expression as_python can print")
            diff = dict(a)
            for k, v in b.items():
                diff[k] = diff.get(k, 0) - v
            if any(k in self.outer and v for k, v in diff.items()):
                raise ValueError(f"{self.where}: offset {_index(off)} of {tensor!r} moves with the orchestration's "
                                 f"loop, not with its window")
            out.append(_from_linear(diff))
        return tuple(out)

    def note_scalars(self, e) -> None:
        if isinstance(e, (ScalarRef, IScalar)) and e.param not in self.scalars:
            self.scalars.append(e.param)
        elif isinstance(e, IBin):
            self.note_scalars(e.a)
            self.note_scalars(e.b)

    def rewrite(self, body) -> tuple:
        out = []
        for s in body:
            if isinstance(s, Assign) and isinstance(s.expr, Load):
                e = s.expr
                for o in (*e.offsets, *(s.var.type.valid or ())):
                    self.note_scalars(o)
                s = replace(s, expr=replace(e, param=self.windows[e.param][0], offsets=self.relative(e.param,
                                                                                                       e.offsets)))
            elif isinstance(s, Assign):
                for x in vars(s.expr).values():
                    self.note_scalars(x)
                for o in s.var.type.valid or ():
                    self.note_scalars(o)
            elif isinstance(s, Store):
                for o in s.offsets:
                    self.note_scalars(o)
                s = replace(s, param=self.windows[s.param][0], offsets=self.relative(s.param, s.offsets))
            elif isinstance(s, (For, Spmd, Scope)):
                s = replace(s, body=self.rewrite(s.body))
            elif isinstance(s, SetIndex):
                s = replace(s, value=self.reads(s.value))
            elif isinstance(s, DynFor):
                s = replace(s, start=self.reads(s.start), stop=self.reads(s.stop), body=self.rewrite(s.body))
            out.append(s)
        return tuple(out)

    def reads(self, e):
        """``e`` with each ``pl.read`` of a tensor reading the kernel's parameter for its window."""
        if isinstance(e, IRead):
            offs = tuple(self.reads(o) for o in e.offsets)
            return replace(e, param=self.windows[e.param][0], offsets=self.relative(e.param, offs))
        if isinstance(e, IBin):
            return replace(e, a=self.reads(e.a), b=self.reads(e.b))
        self.note_scalars(e)
        return e


def _annotation(program: Program, tensor: str, mode: str, shape) -> str:
    q = program.param(tensor)
    return _ANN[mode].format(f"pl.Tensor[{_ints(shape)}, pl.{q.dtype.name}]")


def _window(tensor: str, origin, shape) -> str:
    if all(o == IConst(0) for o in origin) and tuple(shape) == tuple(_full_shape(tensor)):
        return tensor
    dims = []
    for o, d in zip(origin, shape):
        lo = _index(o)
        hi = str(o.value + d) if isinstance(o, IConst) else f"{lo} + {d}"
        dims.append(f"{lo}:{hi}")
    return f"{tensor}[{', '.join(dims)}]"


_shapes: dict[str, tuple] = {}


def _full_shape(tensor: str) -> tuple:
    return _shapes[tensor]


def format_program_class(program: Program) -> str:
    """Return the traced program of a ``@pl.program`` as the source of an equivalent class (see the module)."""
    _shapes.clear()
    _shapes.update({q.name: q.shape for q in (*program.params, *program.scratch)})
    printer = _Printer(program)
    kernels: list[str] = []
    orch: list[str] = []
    n = 0

    def emit(lines, depth, text):
        lines.append("    " * depth + text)

    def walk(body, depth: int, outer: set[str]) -> None:
        nonlocal n
        for s in body:
            if isinstance(s, For):
                emit(orch, depth, f"for {s.var.name} in pl.range({s.start}, {s.stop}, {s.step}):")
                walk(s.body, depth + 1, outer | {s.var.name})
                continue
            if not isinstance(s, Scope) or not s.accesses:
                raise ValueError(f"{program.name}: only kernel calls and pl.range loops print as an orchestration")
            if s.deps:
                raise ValueError(f"{program.name}: task {s.name!r} declares deps=, which a kernel call cannot")
            site = _Site(s, outer, f"{program.name}: task {s.name!r}")
            body = site.rewrite(s.body)
            fn = f"_k{n}_{s.name}"
            n += 1
            params = [f"{site.windows[t][0]}: {_annotation(program, t, mode, shape)}"
                      for t, mode, _, shape in s.accesses]
            params += [f"{name}: pl.Scalar[pl.{program.param(name).dtype.name}]" for name in site.scalars]
            kernels.append("    @pl.function(type=pl.FunctionType.InCore)")
            kernels.append(f"    def {fn}(self, {', '.join(params)}):")
            printer.lines = []
            printer.block(body, 2)
            kernels.extend(printer.lines)
            kernels.append("")
            args = [_window(t, origin, shape) for t, _, origin, shape in s.accesses] + site.scalars
            call = f"self.{fn}({', '.join(args)}, name_hint={s.name!r})"
            if s.manual:
                emit(orch, depth, "with pl.manual_scope():")
                emit(orch, depth + 1, call)
            else:
                emit(orch, depth, call)

    walk(program.body, 2, set())
    params = []
    for q in program.params:
        if q.direction == SCALAR:
            params.append(f"{q.name}: pl.Scalar[pl.{q.dtype.name}]")
            continue
        ann = f"pl.Tensor[{_ints(q.shape)}, pl.{q.dtype.name}]"
        ann = f"pl.Out[{ann}]" if q.direction == OUT else f"pl.InOut[{ann}]" if q.direction == INOUT else ann
        params.append(f"{q.name}: {ann}")
    lines = ["import pypto_async.language as pl", "", "", "@pl.program", f"class {program.name}:", *kernels,
             "    @pl.function(type=pl.FunctionType.Orchestration)",
             f"    def orchestrator(self, {', '.join(params)}):"]
    for q in program.scratch:
        lines.append(f"        {q.name} = pl.create_tensor({_ints(q.shape)}, pl.{q.dtype.name}, name={q.name!r})")
    lines.extend(orch)
    if program.ret is not None:
        lines.append(f"        return {program.ret}")
    return "\n".join(lines) + "\n"
