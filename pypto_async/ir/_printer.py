"""Print a program as readable text (also the input of its content hash)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._nodes import (
    format_index,
    Assemble,
    Assign,
    Binary,
    Broadcast,
    Cast,
    Concat,
    Const,
    DynFor,
    FillPad,
    For,
    SetIndex,
    Full,
    Fused,
    Load,
    Matmul,
    MatmulAcc,
    Move,
    Reduce,
    Reshape,
    Bitcast,
    ScalarBits,
    ScalarIndex,
    ScalarRef,
    Scope,
    Slice,
    Transpose,
    Spmd,
    Store,
    Unary,
    Compare,
    Gather,
    Scatter,
    Select,
    Generate,
    Order,
    Update,
    Var,
)

if TYPE_CHECKING:  # annotations only: _program imports this module
    from ._program import Program

__all__ = ["format_program", "format_index", "format_stmt"]


def _operand(x) -> str:
    if isinstance(x, Var):
        return f"%{x.id}"
    if isinstance(x, Const):
        return f"{x.value!r}:{x.dtype.name}"
    if isinstance(x, ScalarRef):
        return f"${x.param}"
    if isinstance(x, ScalarBits):
        return f"bits({format_index(x.expr)}):{x.dtype.name}"
    if isinstance(x, ScalarIndex):
        return f"index({format_index(x.expr)}):{x.dtype.name}"
    return repr(x)


def _offsets(offsets) -> str:
    return "[" + ", ".join(format_index(o) for o in offsets) + "]"


def _expr(e) -> str:
    if isinstance(e, Load):
        return f"load {e.param}{_offsets(e.offsets)}"
    if isinstance(e, Unary):
        return f"{e.op} {_operand(e.x)}"
    if isinstance(e, Binary):
        return f"{e.op} {_operand(e.a)}, {_operand(e.b)}"
    if isinstance(e, Cast):
        mode = "" if e.mode == "none" else f" mode {e.mode}"
        return f"cast {_operand(e.x)} to {e.dtype.name}{mode}"
    if isinstance(e, Full):
        return f"full {_operand(e.value)}"
    if isinstance(e, Reduce):
        return f"{e.op} {_operand(e.x)}" + (" (tree)" if e.tree else "")
    if isinstance(e, Matmul) and e.a_scale is not None:
        bias = "" if e.bias is None else f" + bias {_operand(e.bias)}"
        return (f"matmul_mx {_operand(e.a)} scale {_operand(e.a_scale)}, {_operand(e.b)} scale "
                f"{_operand(e.b_scale)}{bias}")
    if isinstance(e, Matmul):
        bias = "" if e.bias is None else f" + bias {_operand(e.bias)}"
        name = "matmul" if e.acc_phase is None else "gemv"
        phase = "" if e.acc_phase is None else f" acc_phase {e.acc_phase}"
        return f"{name} {_operand(e.a)}, {_operand(e.b)}{bias}{phase}"
    if isinstance(e, Move):
        return f"move {_operand(e.x)} to {e.memory}"
    if isinstance(e, Broadcast):
        return f"broadcast {_operand(e.x)}"
    if isinstance(e, Reshape):
        return f"reshape {_operand(e.x)}"
    if isinstance(e, Bitcast):
        return f"reinterpret_view {_operand(e.x)} as {e.dtype.name}"
    if isinstance(e, Transpose):
        axes = "" if tuple(e.axes) == (0, 1) else f" axes {e.axes[0]},{e.axes[1]}"
        return f"transpose {_operand(e.x)}{axes}"
    if isinstance(e, Slice):
        return f"slice {_operand(e.x)}{_offsets(e.offsets)}"
    if isinstance(e, Concat):
        return f"concat {_operand(e.a)}, {_operand(e.b)}"
    if isinstance(e, Assemble):
        return f"assemble {_operand(e.source)} into {_operand(e.target)}{_offsets(e.offsets)}"
    if isinstance(e, FillPad):
        return f"fillpad {_operand(e.x)} with {e.pad}"
    if isinstance(e, Compare):
        return f"cmp.{e.cmp} {_operand(e.a)}, {_operand(e.b)}"
    if isinstance(e, Select):
        return f"sel {_operand(e.mask)} ? {_operand(e.a)} : {_operand(e.b)}"
    if isinstance(e, Order):
        block = "" if e.block_len is None else f" block_len {format_index(e.block_len)}"
        return f"{e.op} {', '.join(_operand(x) for x in e.xs)}{block}"
    if isinstance(e, Generate):
        option = {"ci": " descending" if e.option else "", "tri": " upper" if e.option else " lower",
                  "random": f" rounds {e.option}"}[e.kind]
        return f"{e.kind} {', '.join(format_index(a) for a in e.args)}{option}"
    if isinstance(e, Gather):
        dim = f" dim {e.dim}" if e.mode == "axis" else ""
        oob = "" if e.oob == "undefined" else f" oob {e.oob}"
        return f"gather.{e.mode} {_operand(e.src)} at {_operand(e.index)}{dim}{oob}"
    if isinstance(e, Scatter):
        at = _operand(e.index) if e.index is not None else _offsets(e.offsets)
        return f"scatter.{e.mode} {_operand(e.src)} into {_operand(e.target)} at {at}"
    return repr(e)


def format_stmt(s, indent: int = 0) -> list[str]:
    """Return the lines of one statement, indented by ``indent`` levels."""
    pad = "  " * indent
    if isinstance(s, Assign):
        return [f"{pad}%{s.var.id}: {s.var.type} = {_expr(s.expr)}"]
    if isinstance(s, MatmulAcc) and s.a_scale is not None:
        return [f"{pad}%{s.acc.id} += matmul_mx {_operand(s.a)} scale {_operand(s.a_scale)}, {_operand(s.b)} scale "
                f"{_operand(s.b_scale)}"]
    if isinstance(s, MatmulAcc):
        if s.acc_phase is not None:
            return [f"{pad}%{s.acc.id} += gemv {_operand(s.a)}, {_operand(s.b)} acc_phase {s.acc_phase}"]
        return [f"{pad}%{s.acc.id} += matmul {_operand(s.a)}, {_operand(s.b)}"]
    if isinstance(s, Update):
        return [f"{pad}%{s.target.id} <- {_operand(s.value)}"]
    if isinstance(s, Store) and s.index is not None:
        return [f"{pad}mscatter {_operand(s.value)} -> {s.param}[at {_operand(s.index)}]"]
    if isinstance(s, Store):
        atomic = f" atomic {s.atomic}" if s.atomic else ""
        return [f"{pad}store {_operand(s.value)} -> {s.param}{_offsets(s.offsets)}{atomic}"]
    if isinstance(s, SetIndex):
        return [f"{pad}{s.var.name} := {format_index(s.value)}"]
    if isinstance(s, For):
        form = f"pipeline stage={s.stage}" if s.kind == "pipeline" else s.kind
        head = f"{pad}for {s.var.name} in {form}({s.start}, {s.stop}, {s.step})"
        head += "".join(f" fresh({name}[{size}])" for name, size in s.task_fresh)
        head += "".join(f" carry({c} = {i}; <- {y})" for c, i, y in s.task_carries) + " {"
    elif isinstance(s, DynFor) and s.kind == "range":
        head = f"{pad}for {s.var.name} in range({format_index(s.start)}, {format_index(s.stop)}, {s.step}) {{"
    elif isinstance(s, DynFor):
        head = f"{pad}{s.kind} ({format_index(s.stop)}) {{"
    elif isinstance(s, Spmd):
        head = f"{pad}spmd {s.var.name} in blocks({s.count}) {{"
    elif isinstance(s, Scope):
        head = f"{pad}at {s.level}{_task_attrs(s)} {{"
    elif isinstance(s, Fused):
        keep = ", ".join(f"%{i}" for i in s.materialize)
        head = f"{pad}fused [{', '.join(map(str, s.shape))}] keep({keep}) {{"
    else:
        return [f"{pad}{s!r}"]
    body = s.members if isinstance(s, Fused) else s.body
    lines = [head]
    for b in body:
        lines.extend(format_stmt(b, indent + 1))
    lines.append(f"{pad}}}")
    return lines


def _task_attrs(s: Scope) -> str:
    text = f" task {s.name!r}" if s.name is not None else ""
    if s.deps:
        text += f" deps({', '.join(map(str, s.deps))})"
    if s.manual:
        text += " manual"
    if s.dep_arrays:
        text += f" deps_all({', '.join(name for name, _ in s.dep_arrays)})"
    if s.dep_slots:
        text += f" deps_at({', '.join(f'{name}[{format_index(index)}]' for name, _, index in s.dep_slots)})"
    for name, size, index in s.assigns:
        text += f" -> {name}[{format_index(index)}] of {size}"
    if s.no_dep:
        text += f" no_dep({', '.join(s.no_dep)})"
    for name, value in s.hints:
        text += f" {name}={value}"
    for tensor, mode, offsets, shape in s.accesses:
        dims = ", ".join(str(n) if isinstance(n, int) else format_index(n) for n in shape)
        text += f" {mode}:{tensor}{_offsets(offsets)}[{dims}]"
    return text


def format_program(p: Program) -> str:
    """Return the program as text: a header line, then one line per statement."""
    params = ", ".join(f"{q.name}: {q.direction} {q.dtype.name}[{', '.join(map(str, q.shape))}]" for q in p.params)
    head = f"program {p.name}({params})"
    if p.ret is not None:
        head += f" -> {p.ret}"
    head += f" blocks={p.block_num} stage={p.stage}"
    for q in p.scratch:
        head += f" scratch {q.name}: {q.dtype.name}[{', '.join(map(str, q.shape))}]"
        if q.name in p.manual_dep:
            head += " manual_dep"
    if p.dump_tags:
        head += f" dump_tags({', '.join(p.dump_tags)})"
    head += " {"
    lines = [head]
    for s in p.body:
        lines.extend(format_stmt(s, 1))
    lines.append("}")
    return "\n".join(lines)
