"""IR functions: a lowered program seen as PyPTO's passes leave it (``Program.functions``).

After PyPTO's outlining pass a program is an orchestration function and one
InCore function per region: each ``with pl.at(...)`` (or, in a kernel with
no region, the whole body) becomes ``<program>_incore_<k>``, numbered in
trace order, and the orchestration keeps the loops around the regions and
calls the functions.  Here the program is compiled as it is (the regions
are its tasks); :func:`outline` derives that view from it, for reading:

* an InCore function's parameters are the tensors its body loads or stores
  (``In`` read only, ``Out`` written only, ``InOut`` both, in the program's
  order), then the scalar parameters it reads, then the orchestration's loop
  indices it uses (``pl.Scalar[pl.INDEX]``, printed ``pl.INT64``);
* the orchestration has the program's parameters and intermediates, and
  calls each function where its region was: with ``name_hint=`` the
  region's name, inside ``pl.manual_scope()`` where the region was, and a
  ``# task k: deps=[task j]`` note for a region's declared dependencies
  (task ids count the regions in trace order).

:func:`format_outlined` prints that view as a ``@pl.program`` class.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .._dtypes import INT64
from .._signature import IN, INOUT, OUT, SCALAR
from ._nodes import (Assign, Full, IScalar, IVar, Load, Matmul, MatmulAcc, Move, Param, ScalarRef, Scope, Stmt,
                     Store, For, Var)
from ._python import _Printer, _ints

if TYPE_CHECKING:  # annotations only: _program imports this module
    from ._program import Program

__all__ = ["FunctionType", "Function", "outline", "format_outlined"]


class FunctionType(enum.Enum):
    """What a function of a program is: a kernel, or the orchestration that calls kernels."""

    InCore = "InCore"
    Orchestration = "Orchestration"
    #: A function whose body holds its own regions (``with pl.auto_incore():``), compiled as the
    #: program's entry when the program has no orchestration; its tensors' directions follow its body.
    Opaque = "Opaque"
    #: PyPTO's cube-only and vector-only kernels: InCore kernels here (the sim has one kind of core).
    AIC = "AIC"
    AIV = "AIV"
    #: Spliced into each caller (``@pl.function(type=pl.FunctionType.Inline)``): no function of its own.
    Inline = "Inline"
    #: A co-scheduled AIC+AIV cluster (``pl.cluster``): not on the sim.
    Group = "Group"


@dataclass(frozen=True)
class Function:
    """One function of a lowered program: its name, type, parameters and body.

    ``body`` is the region's statements for an InCore function and the
    program's statements for the orchestration; ``calls`` maps each region
    of the orchestration (by ``id``) to the InCore function it became.
    """

    name: str
    func_type: FunctionType
    params: tuple[Param, ...]
    body: tuple[Stmt, ...]
    program: "Program" = field(repr=False, compare=False)
    #: InCore: the region this function was outlined from (``None`` for the body of a kernel without regions).
    region: Scope | None = field(default=None, repr=False, compare=False)
    #: What the function returns, where it is not the tensors it writes (``pl.parse``'s functions).
    returns: tuple[Param, ...] | None = None

    @property
    def return_types(self) -> tuple[Param, ...]:
        """The tensors the function returns: those it writes (an InCore function's outputs; the program's)."""
        if self.returns is not None:
            return self.returns
        return tuple(p for p in self.params if p.direction in (OUT, INOUT))

    def as_python(self, prefix: str = "pl", concise: bool = False) -> str:
        """Return the function as it prints in its program's ``@pl.program`` class (see :func:`format_outlined`)."""
        text = format_outlined(self.program, prefix=prefix, concise=concise)
        if self.func_type is FunctionType.Opaque:  # a parsed function: its program, whole
            return text
        head = f"    def {self.name}("
        lines = text.splitlines()
        start = next(i for i, line in enumerate(lines) if line.startswith(head)) - 1  # its decorator
        end = start + 2
        while end < len(lines) and (lines[end].startswith("        ") or not lines[end].strip()):
            end += 1
        return "\n".join(line[4:] for line in lines[start:end]).rstrip() + "\n"


def _nodes(x):
    """Every IR node reachable from ``x`` (statements, expressions, index expressions)."""
    stack = [x]
    while stack:
        n = stack.pop()
        if isinstance(n, (tuple, list)):
            stack.extend(n)
        elif dataclasses.is_dataclass(n) and not isinstance(n, type):
            yield n
            stack.extend(getattr(n, f.name) for f in dataclasses.fields(n))


def _signature(program: "Program", body, outer: list[str]) -> tuple[Param, ...]:
    reads: set[str] = set()
    writes: set[str] = set()
    scalars: set[str] = set()
    loops: set[str] = set()
    for n in _nodes(body):
        if isinstance(n, Store):
            writes.add(n.param)
            if n.atomic is not None:
                reads.add(n.param)
        elif isinstance(n, Load):
            reads.add(n.param)
        elif isinstance(n, (ScalarRef, IScalar)):
            scalars.add(n.param)
        elif isinstance(n, IVar) and n.name in outer:
            loops.add(n.name)
    params = []
    for q in (*program.params, *program.scratch):
        if q.direction == SCALAR:
            continue
        if q.name in reads or q.name in writes:
            direction = INOUT if q.name in reads and q.name in writes else OUT if q.name in writes else IN
            params.append(Param(q.name, direction, q.shape, q.dtype))
    params += [q for q in program.params if q.direction == SCALAR and q.name in scalars]
    params += [Param(name, SCALAR, (), INT64) for name in outer if name in loops]
    return tuple(params)


_CUBE_SPACES = ("Mat", "Left", "Right", "Acc", "Bias", "LeftScale", "RightScale")


def _core_type(body) -> FunctionType:
    """What PyPTO's ExpandMixedKernel makes of a lowered InCore function: AIC, AIV, or (mixed) InCore here.

    Cube: a matmul, a load into a cube buffer, a store of one, a tile computed in one.  Vector: a store of
    a Vec tile, a load into Vec, a tile computed in Vec.  Moves and allocations are on either core.  A
    function with only vector (or neither) is AIV, with only cube AIC; a mixed one, which PyPTO splits
    into an AIC and an AIV function under a Group, is one kernel on the sim and stays InCore.
    """
    cube = vector = False
    for n in _nodes(body):
        if isinstance(n, (Matmul, MatmulAcc)):
            cube = True
        elif isinstance(n, Load):
            cube, vector = cube or n.memory in _CUBE_SPACES, vector or n.memory not in _CUBE_SPACES
        elif isinstance(n, Store) and isinstance(n.value, Var):
            in_cube = n.value.type.memory in _CUBE_SPACES
            cube, vector = cube or in_cube, vector or not in_cube
        elif isinstance(n, Assign) and not isinstance(n.expr, (Load, Move, Full, Matmul)):
            in_cube = n.var.type.memory in _CUBE_SPACES
            cube, vector = cube or in_cube, vector or not in_cube
    if cube and vector:
        return FunctionType.InCore
    return FunctionType.AIC if cube else FunctionType.AIV


def _contains_region(s) -> bool:
    return isinstance(s, Scope) or (isinstance(s, For) and any(_contains_region(b) for b in s.body))


def outline(program: "Program") -> tuple[Function, ...]:
    """Return the program's functions: its InCore functions in trace order, then its orchestration."""
    kernels: list[Function] = []

    def add(body, outer: list[str], region: Scope | None) -> None:
        name = f"{program.name}_incore_{len(kernels)}"
        kind = FunctionType.InCore
        if program.stage == "lowered":
            declared = dict(region.hints).get("core") if region is not None else None  # a pl.FunctionType.AIC / AIV
            kind = FunctionType(declared) if declared in ("AIC", "AIV") else _core_type(body)
        kernels.append(Function(name, kind, _signature(program, body, outer), tuple(body), program, region))

    def walk(body, outer: list[str]) -> None:
        loose: list = []  # statements outside any region: a kernel with no pl.at is one function
        for s in body:
            if _contains_region(s):
                if loose:
                    add(loose, outer, None)
                    loose = []
                if isinstance(s, Scope):
                    add(s.body, outer, s)
                else:
                    walk(s.body, [*outer, s.var.name])
            else:
                loose.append(s)
        if loose:
            add(loose, outer, None)

    walk(program.body, [])
    orch = Function(program.name, FunctionType.Orchestration, program.params, program.body, program)
    return (*kernels, orch)


def _attrs(region: Scope | None, p: str) -> str:
    """The ``pl.func_attr({...})`` dict an outlined InCore function declares for its region's hints."""
    items = []
    for name, value in region.hints if region is not None else ():
        if name == "split":
            items.append(f'"split": {p}.SplitMode.{value}')
        elif name == "cross_core_slot":
            items.append(f'"slot_num": {value}')
        elif name == "stationary":
            items.append(f'"stationary": {value}')
    return f"{{{', '.join(items)}}}" if items else ""


def _submit_args(region: Scope | None) -> list[str]:
    """The ``pl.submit`` keywords for a region's hints that a plain kernel call cannot carry."""
    out = []
    for name, value in region.hints if region is not None else ():
        if name == "allow_early_resolve":
            out.append("allow_early_resolve=True")
    return out


def format_outlined(program: "Program", prefix: str = "pl", concise: bool = False) -> str:
    """Return the outlined program as the source of a ``@pl.program`` class.

    Each InCore function prints its region's statements (tiles ``t0, t1,
    ...`` as in ``as_python(form="jit")``; with ``concise=False`` each tile
    is annotated with its ``pl.Tile[[shape], dtype]`` type) and returns the
    tensors it writes; the orchestration prints the loops and one call per
    region, binding what each returns.  ``prefix`` is the language's module
    name in the source (``pl``).
    """
    functions = outline(program)
    kernels, orch = functions[:-1], functions[-1]
    printer = _Printer(program)
    printer.annotate = not concise
    p = prefix

    def ann(q: Param) -> str:
        if q.direction == SCALAR:
            return f"{p}.Scalar[{p}.{q.dtype.name}]"
        text = f"{p}.Tensor[{_ints(q.shape)}, {p}.{q.dtype.name}]"
        return f"{p}.Out[{text}]" if q.direction == OUT else f"{p}.InOut[{text}]" if q.direction == INOUT else text

    def signature(f: Function) -> str:
        params = ", ".join(["self", *(f"{q.name}: {ann(q)}" for q in f.params)])
        outs = f.return_types
        if not outs:
            return f"    def {f.name}({params}):"
        rets = ", ".join(f"{p}.Tensor[{_ints(q.shape)}, {p}.{q.dtype.name}]" for q in outs)
        rets = rets if len(outs) == 1 else f"tuple[{rets}]"
        return f"    def {f.name}({params}) -> {rets}:"

    lines = [f"import pypto_async.language as {p}", "", "", f"@{p}.program", f"class {program.name}:"]
    for f in kernels:
        lines.append(f"    @{p}.function(type={p}.FunctionType.{f.func_type.value})")
        lines.append(signature(f))
        attrs = _attrs(f.region, p)
        if attrs:
            lines.append(f"        {p}.func_attr({attrs})")
        printer.lines = []
        printer.block(f.body, 2)
        lines.extend(printer.lines)
        if f.return_types:
            lines.append(f"        return {', '.join(q.name for q in f.return_types)}")
        lines.append("")
    lines.append(f"    @{p}.function(type={p}.FunctionType.Orchestration)")
    lines.append(signature(orch).split(" -> ")[0].rstrip(":") + ":")
    for q in program.scratch:
        lines.append(f"        {q.name} = {p}.create_tensor({_ints(q.shape)}, dtype={p}.{q.dtype.name}, name={q.name!r})")
    by_region = {id(f.region): f for f in kernels if f.region is not None}
    loose = iter(f for f in kernels if f.region is None)

    def call(f: Function, depth: int) -> None:
        region, note = f.region, ""
        untracked = set(region.no_dep) if region is not None else set()
        args = [f"{p}.no_dep({q.name})" if q.name in untracked else q.name for q in f.params]
        outs = ", ".join(q.name for q in f.return_types)
        bind = f"{outs} = " if outs else ""
        if region is not None and region.name is not None:
            args.append(f"name_hint={region.name!r}")
        if region is not None and region.manual:
            lines.append("    " * depth + f"with {p}.manual_scope():")
            depth += 1
        if region is not None and region.deps:
            note = f"  # task {region.task}: deps=[{', '.join(f'task {d}' for d in region.deps)}]"
        submitted = _submit_args(region)
        if submitted:  # a hint only pl.submit spells: the call is a submit, binding its task id too
            bind = f"{outs}, _ = " if outs else ""
            lines.append("    " * depth + f"{bind}{p}.submit(self.{f.name}, {', '.join(args + submitted)}){note}")
            return
        lines.append("    " * depth + f"{bind}self.{f.name}({', '.join(args)}){note}")

    def walk(body, depth: int) -> None:
        pending = False
        for s in body:
            if _contains_region(s):
                if pending:
                    call(next(loose), depth)
                    pending = False
                if isinstance(s, Scope):
                    call(by_region[id(s)], depth)
                else:
                    stage = f", stage={s.stage}" if s.kind == "pipeline" else ""
                    lines.append("    " * depth + f"for {s.var.name} in {p}.{s.kind}({s.start}, {s.stop}, {s.step}"
                                                    f"{stage}):")
                    walk(s.body, depth + 1)
            else:
                pending = True
        if pending:
            call(next(loose), depth)

    walk(program.body, 2)
    if program.ret is not None:
        lines.append(f"        return {program.ret}")
    text = "\n".join(lines) + "\n"
    if p != "pl":
        text = text.replace(" pl.", f" {p}.").replace("(pl.", f"({p}.").replace("[pl.", f"[{p}.")
    return text
