"""Print a program back as a ``@pl.jit`` function (``Program.as_python()``).

The source uses only ``pypto_async.language`` spellings, so executing it and
tracing the function for arguments of the program's parameter types gives an
equivalent program: the same statements, though lowering may emit independent
ones in another order (fusion emits a chain where it closes).  Tiles are named
``t0, t1, ...`` in order of definition, so printing is stable: print, trace,
lower and print again, and the text no longer changes.  A lowered program's
fused chains print as their statements; a loop with carried tiles prints in
PyPTO's explicit form, ``init_values=`` and ``pl.yield_``.  A ``@pl.program``
prints as one such function: its intermediates as ``pl.create_tensor``
calls, each kernel call as the region it traced to (whose accesses are then
derived from its loads and stores, where the call declared them by its
parameters' directions).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import math

from .._signature import INOUT, OUT, SCALAR
from ._layout import slice_valid
from ._nodes import (
    Assemble,
    Assign,
    Binary,
    Broadcast,
    Cast,
    Concat,
    Const,
    FillPad,
    For,
    Full,
    Fused,
    DynFor,
    IBin,
    IConst,
    IRead,
    IScalar,
    IVar,
    SetIndex,
    Load,
    Matmul,
    MatmulAcc,
    Move,
    Reduce,
    Reshape,
    Bitcast,
    ScalarIndex,
    ScalarRef,
    Scope,
    Slice,
    Transpose,
    Spmd,
    Store,
    Unary,
    CMP_TYPES,
    Compare,
    Select,
    Generate,
    Order,
    Update,
    Var,
    Gather,
    Scatter,
)

if TYPE_CHECKING:  # annotations only: _program imports this module
    from ._program import Program
from ._valid import normalize

__all__ = ["format_python"]

_PAD = {"zero": "pl.PadValue.zero", "max": "pl.PadValue.max", "min": "pl.PadValue.min"}


def _index(e) -> str:
    if isinstance(e, IConst):
        return str(e.value)
    if isinstance(e, IVar):
        return e.name
    if isinstance(e, IScalar):
        return e.param
    if isinstance(e, IRead):
        return f"pl.read({e.param}, {_list(_index(o) for o in e.offsets)})"
    if isinstance(e, IBin):
        if e.op in ("min", "max"):
            return f"pl.{e.op}({_index(e.a)}, {_index(e.b)})"
        return f"({_index(e.a)} {e.op} {_index(e.b)})"
    raise ValueError(f"not an index expression: {e!r}")


def _list(items) -> str:
    return "[" + ", ".join(items) + "]"


def hint_args(hints) -> str:
    """The ``pl.at`` keywords that spell a region's scheduling hints (``Scope.hints``)."""
    opts, text = [], ""
    for name, value in hints:
        if name == "split":
            opts.append(f"pl.split(pl.SplitMode.{value})")
        elif name == "cross_core_slot":
            opts.append(f"pl.cross_core_slot(slot_num={value})")
        elif name == "scope":
            continue  # printed as the `with pl.scope():` blocks around the region
        elif name == "core":
            continue  # a pl.FunctionType.AIC / AIV function's placement: no pl.at spelling
        elif name in ("split_aiv", "core_num", "sync_start"):
            continue  # a pl.split_aiv / pl.spmd body: printed as the loop over its lanes / blocks
        elif name == "dumps":
            text += f", dumps=[{', '.join(value)}]"
        else:
            text += f", {name}={value!r}"
    return (f", optimizations=[{', '.join(opts)}]" if opts else "") + text


def _task_arrays(body) -> list[tuple[str, int]]:
    """The task-id arrays (``pl.array.create``) the regions of ``body`` store into or wait on, in order."""
    found: dict[str, int] = {}
    for s in body:
        if isinstance(s, Scope):
            for name, size, *_ in (*s.assigns, *s.dep_arrays, *s.dep_slots):
                found.setdefault(name, size)
        for inner in getattr(s, "body", ()):
            for name, size in _task_arrays((inner,)):
                found.setdefault(name, size)
        if isinstance(s, For):  # a loop's own arrays are made where it prints them (see _loop_arrays)
            for name, size in s.task_fresh:
                found.setdefault(name, size)
            for names in s.task_carries:
                size = next((found[n] for n in names if n in found), None)
                for n in names if size is not None else ():
                    found.setdefault(n, size)
    return sorted(found.items(), key=lambda kv: int(kv[0].removeprefix("tids")))  # creation order: tids0, ...


def _loop_arrays(body) -> set[str]:
    """The task-id arrays the loops of ``body`` make or carry (printed in the loop, not at the top)."""
    out: set[str] = set()
    for s in body:
        if isinstance(s, For):
            out |= {name for name, _ in s.task_fresh} | {c for c, _, _ in s.task_carries}
        for inner in getattr(s, "body", ()):
            out |= _loop_arrays((inner,))
    return out


def _scope_depth(s) -> int | None:
    """The depth of the hand-placed AUTO ``pl.scope()`` around a region (its ``scope`` hint), or None."""
    return next((value for name, value in s.hints if name == "scope"), None)


def _has_scopes(body) -> bool:
    return any((isinstance(s, Scope) and _scope_depth(s) is not None) or _has_scopes(getattr(s, "body", ()))
               for s in body)


def _ints(shape) -> str:
    return _list(str(d) for d in shape)


def _number(value) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return f'float("{value}")'
    return repr(value)


class _Printer:
    def __init__(self, program: Program):
        self.program = program
        self.names: dict[int, str] = {}
        self.lines: list[str] = []
        self.prefix = "t"
        #: Annotate each tile with its type (``t0: pl.Tile[[64], pl.FP32] = ...``): the outlined view's default.
        self.annotate = False
        while any(q.name.startswith(self.prefix) for q in program.params):
            self.prefix = "_" + self.prefix  # tile names never shadow a parameter

    def name(self, v: Var) -> str:
        if v.id not in self.names:
            self.names[v.id] = f"{self.prefix}{len(self.names)}"
        return self.names[v.id]

    def operand(self, x) -> str:
        if isinstance(x, Var):
            return self.name(x)
        if isinstance(x, ScalarRef):
            return x.param
        if isinstance(x, Const):
            return _number(x.value)
        if isinstance(x, ScalarIndex):  # a loop index (or an integer expression of one) as the scalar operand
            return _index(x.expr)
        raise ValueError(f"not an operand: {x!r}")

    def expr(self, e, v: Var) -> str:
        t = v.type
        valid = "" if t.valid is None else f", valid_shape={_list(_index(x) for x in t.valid)}"
        if isinstance(e, Load):
            mem = "" if e.memory == "Vec" else f", target_memory=pl.Mem.{e.memory}"
            return f"pl.load({e.param}, {_list(_index(o) for o in e.offsets)}, {_ints(e.shape)}{mem}{valid})"
        if isinstance(e, Unary):
            return f"pl.{e.op}({self.name(e.x)})"
        if isinstance(e, Binary):
            return f"pl.{e.op}({self.operand(e.a)}, {self.operand(e.b)})"
        if isinstance(e, Cast):
            mode = "" if e.mode == "round" else f', mode="{e.mode}"'
            return f"pl.cast({self.name(e.x)}, pl.{e.dtype.name}{mode})"
        if isinstance(e, Full):
            if e.memory != "Vec" or valid:
                mem = f"target_memory=pl.Mem.{e.memory}"
                return f"pl.create_tile({_ints(e.shape)}, dtype=pl.{e.dtype.name}, {mem}{valid})"
            return f"pl.full({_ints(e.shape)}, {self.operand(e.value)}, pl.{e.dtype.name})"
        if isinstance(e, Reduce):
            if e.tree:  # PyPTO's tmp_tile selects the pairwise order
                t = e.x.type
                tmp = f"pl.create_tile({_ints(t.shape)}, dtype=pl.{t.dtype.name}, target_memory=pl.Mem.Vec)"
                return f"pl.{e.op}({self.name(e.x)}, {tmp})"
            return f"pl.{e.op}({self.name(e.x)})"
        if isinstance(e, Matmul) and e.a_scale is not None:
            args = f"{self.name(e.a)}, {self.name(e.a_scale)}, {self.name(e.b)}, {self.name(e.b_scale)}"
            if e.bias is not None:
                return f"pl.matmul_mx_bias({args}, {self.name(e.bias)})"
            return f"pl.matmul_mx({args})"
        if isinstance(e, Matmul):
            bias = "" if e.bias is None else f", {self.name(e.bias)}"
            if e.acc_phase is not None:
                name = "gemv" if e.bias is None else "gemv_bias"
                return f'pl.{name}({self.name(e.a)}, {self.name(e.b)}{bias}, acc_phase="{e.acc_phase}")'
            if e.bias is not None:
                return f"pl.matmul_bias({self.name(e.a)}, {self.name(e.b)}{bias})"
            return f"pl.matmul({self.name(e.a)}, {self.name(e.b)})"
        if isinstance(e, Move):
            return f"pl.move({self.name(e.x)}, target_memory=pl.Mem.{e.memory})"
        if isinstance(e, Broadcast):
            op = "row_expand" if e.x.type.shape[0] == e.shape[0] else "col_expand"
            target = f"pl.zeros({_ints(e.shape)}, pl.{t.dtype.name})"  # only its shape is read
            if len(e.shape) != 2 or sum(a != b for a, b in zip(e.x.type.shape, e.shape)) != 1:
                return f"pl.expand_clone({self.name(e.x)}, {target})"  # any rank, any dimensions of 1
            return f"pl.{op}({target}, {self.name(e.x)})"
        if isinstance(e, Reshape):
            return f"pl.reshape({self.name(e.x)}, {_ints(e.shape)})"
        if isinstance(e, Bitcast):
            return f"pl.reinterpret_view({self.name(e.x)}, pl.{e.dtype.name}, shape={_ints(e.shape)})"
        if isinstance(e, Transpose):
            return f"pl.transpose({self.name(e.x)}, axis1={e.axes[0]}, axis2={e.axes[1]})"
        if isinstance(e, Slice):
            if normalize(e.shape, slice_valid(e.x.type, Slice(e.x, e.shape, e.offsets), e.shape)) == t.valid:
                valid = ""  # inherited from the source: the language derives it again
            return f"pl.slice({self.name(e.x)}, {_ints(e.shape)}, {_list(_index(o) for o in e.offsets)}{valid})"
        if isinstance(e, Concat):
            return f"pl.concat({self.name(e.a)}, {self.name(e.b)})"
        if isinstance(e, Assemble):
            offs = _list(_index(o) for o in e.offsets)
            return f"pl.tile.assemble({self.name(e.target)}, {self.name(e.source)}, {offs})"
        if isinstance(e, FillPad):
            return f"pl.fillpad({self.name(e.x)}, {_PAD[e.pad]})"
        if isinstance(e, Compare):
            return f"pl.cmp({self.name(e.a)}, {self.operand(e.b)}, cmp_type={CMP_TYPES.index(e.cmp)})"
        if isinstance(e, Select):
            return f"pl.sel({self.name(e.mask)}, {self.name(e.a)}, {self.operand(e.b)})"
        if isinstance(e, Order):
            xs = ", ".join(self.name(x) for x in e.xs)
            if e.op == "mrgsort":
                return f"pl.mrgsort({xs}, block_len={_index(e.block_len)})"
            return f"pl.{'mrgsort' if e.op == 'mrgsort_merge' else e.op}({xs})"
        if isinstance(e, Generate):
            args = ", ".join(_index(a) for a in e.args)
            if e.kind == "ci":
                return f"pl.arange({args}, {_ints(e.shape)}, dtype=pl.{t.dtype.name}, descending={bool(e.option)})"
            if e.kind == "tri":
                return f"pl.tri({args}, {_ints(e.shape)}{valid}, dtype=pl.{t.dtype.name}, upper={bool(e.option)})"
            return f"pl.tile.random({args}, {_ints(e.shape)}{valid}, dtype=pl.{t.dtype.name}, rounds={e.option})"
        if isinstance(e, Gather) and e.mode == "block" and e.oob == "undefined":
            out = "" if e.dtype is None else f", output_dtype=pl.{e.dtype.name}"
            return f"pl.gatherb({self.name(e.src)}, {self.name(e.index)}{out})"
        if isinstance(e, Gather):
            mode = "" if e.mode == "flat" else f', mode="{e.mode}"'
            dim = f", dim={e.dim}" if e.mode == "axis" else ""
            oob = "" if e.oob == "undefined" else f', gather_oob="{e.oob}"'
            return f"pl.tile.gather({self.name(e.src)}, {self.name(e.index)}{mode}{dim}{oob})"
        if isinstance(e, Scatter):
            mode = "" if e.mode == "flat" else f', mode="{e.mode}"'
            if e.index is None:
                offs = _list(_index(o) for o in e.offsets)
                return f"pl.tile.scatter({self.name(e.target)}, {self.name(e.src)}, None{mode}, offsets={offs})"
            return f"pl.tile.scatter({self.name(e.target)}, {self.name(e.src)}, {self.name(e.index)}{mode})"
        raise ValueError(f"cannot print {type(e).__name__}")

    def emit(self, depth: int, line: str) -> None:
        self.lines.append("    " * depth + line)

    def block(self, body, depth: int) -> None:
        flat = _flatten(body)
        inits = _carry_inits(flat)
        skip = {id(a) for loop in inits.values() for _, a in loop}
        start = len(self.lines)
        for s in flat:
            if id(s) in skip:
                continue
            if isinstance(s, For) and id(s) in inits:
                self.carried_loop(s, inits[id(s)], depth)
            else:
                self.stmt(s, depth)
        if len(self.lines) == start:
            self.emit(depth, "pass")

    def carried_loop(self, s: For, carries, depth: int) -> None:
        """Print a loop with carried tiles in PyPTO's explicit form: init_values= and pl.yield_."""
        targets = ", ".join([self.name(c) for c, _ in carries] + [c for c, _, _ in s.task_carries])
        init = ", ".join([self.name(a.expr.x) for _, a in carries] + [i for _, i, _ in s.task_carries])
        # pl.unroll takes no init_values: a carried unrolled loop prints as pl.range, the form noted.
        form, stage = ("pipeline", f"stage={s.stage}, ") if s.kind == "pipeline" else (
            ("parallel", "") if s.kind == "parallel" else ("range", ""))
        note = f"  # pl.{s.kind}" if s.kind not in ("range", form) else ""
        self.emit(depth, f"for {s.var.name}, ({targets},) in pl.{form}({s.start}, {s.stop}, {s.step}, "
                         f"{stage}init_values=({init},)):{note}")
        flat = _flatten(s.body)
        updates = {u.target.id: u for u in flat if isinstance(u, Update)}
        copies = {a.var.id: a.expr.x for a in flat if isinstance(a, Assign) and _is_carry_copy(a, updates)}
        body = tuple(b for b in flat
                     if not isinstance(b, Update) and not (isinstance(b, Assign) and b.var.id in copies))
        self.fresh_arrays(s, depth + 1)
        self.block(body, depth + 1)
        values = ", ".join([self.name(copies.get(updates[c.id].value.id, updates[c.id].value)) for c, _ in carries]
                           + [y for _, _, y in s.task_carries])
        self.emit(depth + 1, f"{targets} = pl.yield_({values})")

    def fresh_arrays(self, s: For, depth: int) -> None:
        for name, size in s.task_fresh:
            self.emit(depth, f"{name} = pl.array.create({size}, pl.TASK_ID)")

    def stmt(self, s, depth: int) -> None:
        if isinstance(s, Assign):
            rhs = self.expr(s.expr, s.var)
            ann = f": pl.Tile[{_ints(s.var.type.shape)}, pl.{s.var.type.dtype.name}]" if self.annotate else ""
            self.emit(depth, f"{self.name(s.var)}{ann} = {rhs}")
        elif isinstance(s, MatmulAcc) and s.a_scale is not None:
            self.emit(depth, f"{self.name(s.acc)} = pl.matmul_mx_acc({self.name(s.acc)}, {self.name(s.a)}, "
                             f"{self.name(s.a_scale)}, {self.name(s.b)}, {self.name(s.b_scale)})")
        elif isinstance(s, MatmulAcc):
            if s.acc_phase is not None:
                self.emit(depth, f'pl.gemv_acc({self.name(s.acc)}, {self.name(s.a)}, {self.name(s.b)}, '
                                 f'acc_phase="{s.acc_phase}")')
            else:
                self.emit(depth, f"pl.matmul_acc({self.name(s.acc)}, {self.name(s.a)}, {self.name(s.b)})")
        elif isinstance(s, Update):
            self.emit(depth, f"{self.name(s.target)} = {self.name(s.value)}")
        elif isinstance(s, Store) and s.index is not None:
            self.emit(depth, f"pl.mscatter({self.name(s.value)}, {self.name(s.index)}, {s.param})")
        elif isinstance(s, Store):
            atomic = ", atomic=pl.AtomicType.Add" if s.atomic == "add" else ""
            offs = _list(_index(o) for o in s.offsets)
            self.emit(depth, f"pl.store({self.name(s.value)}, {offs}, {s.param}{atomic})")
        elif isinstance(s, For) and s.task_carries:
            self.carried_loop(s, (), depth)
        elif isinstance(s, For):
            stage = f", stage={s.stage}" if s.kind == "pipeline" else ""
            self.emit(depth, f"for {s.var.name} in pl.{s.kind}({s.start}, {s.stop}, {s.step}{stage}):")
            self.fresh_arrays(s, depth + 1)
            self.block(s.body, depth + 1)
        elif isinstance(s, SetIndex):
            self.emit(depth, f"{s.var.name} = {_index(s.value)}")
        elif isinstance(s, DynFor) and s.kind == "while":
            self.emit(depth, f"while {_index(s.stop)}:  # pl.while_, its values carried as runtime scalars")
            self.block(s.body, depth + 1)
        elif isinstance(s, DynFor):
            # A runtime if's branch is a loop of 0 or 1 iterations, and prints as one.
            note = "" if s.kind == "range" else f"  # {s.kind} branch"
            self.emit(depth, f"for {s.var.name} in pl.range({_index(s.start)}, {_index(s.stop)}, {s.step}):{note}")
            self.block(s.body, depth + 1)
        elif isinstance(s, Spmd):
            self.emit(depth, f"for {s.var.name} in pl.spmd({s.count}):")
            self.block(s.body, depth + 1)
        elif isinstance(s, Scope):
            # A kernel call (declared accesses) prints as its region; the region's accesses are then
            # derived from its loads and stores.
            args = f"level=pl.Level.{s.level}"
            if s.name is not None:
                args += f", name_hint={s.name!r}"
            if s.deps or s.dep_arrays or s.dep_slots:
                ids = [f"_task{d}" for d in s.deps] + [name for name, _ in s.dep_arrays]
                ids += [f"{name}[{_index(index)}]" for name, _, index in s.dep_slots]
                args += f", deps=[{', '.join(ids)}]"
            if s.no_dep:
                args += f", no_dep_args=[{', '.join(s.no_dep)}]"
            args += hint_args(s.hints)
            bind = f" as _task{s.task}" if s.task is not None else ""
            scope_depth = _scope_depth(s)
            for _ in range(-1 if scope_depth is None else scope_depth, -1, -1):  # depth + 1 nested scopes
                self.emit(depth, "with pl.scope():")
                depth += 1
            if s.manual:
                self.emit(depth, "with pl.manual_scope():")
                depth += 1
            self.emit(depth, f"with pl.at({args}){bind}:")
            self.block(s.body, depth + 1)
            for name, _, index in s.assigns:
                self.emit(depth, f"{name}[{_index(index)}] = _task{s.task}")
        else:
            raise ValueError(f"cannot print {type(s).__name__}")

    def run(self) -> str:
        p = self.program
        params = []
        for q in p.params:
            if q.direction == SCALAR:
                params.append(f"{q.name}: pl.Scalar[pl.{q.dtype.name}]")
                continue
            ann = f"pl.Tensor[{_ints(q.shape)}, pl.{q.dtype.name}]"
            if q.direction == OUT:
                ann = f"pl.Out[{ann}]"
            elif q.direction == INOUT:
                ann = f"pl.InOut[{ann}]"
            params.append(f"{q.name}: {ann}")
        jit = "@pl.jit(auto_scope=False)" if _has_scopes(p.body) else "@pl.jit"
        self.lines = ["import pypto_async.language as pl", "", "", jit, f"def {p.name}({', '.join(params)}):"]
        for q in p.scratch:
            manual = ", manual_dep=True" if q.name in p.manual_dep else ""
            self.emit(1, f"{q.name} = pl.create_tensor({_ints(q.shape)}, dtype=pl.{q.dtype.name}, name={q.name!r}"
                         f"{manual})")
        in_loops = _loop_arrays(p.body)
        for name, size in _task_arrays(p.body):
            if name not in in_loops:
                self.emit(1, f"{name} = pl.array.create({size}, pl.TASK_ID)")
        self.block(p.body, 1)
        if p.ret is not None:
            self.emit(1, f"return {p.ret}")
        return "\n".join(self.lines) + "\n"


def _carry_inits(flat: list) -> dict[int, list]:
    """For each loop of ``flat`` that carries tiles: ``[(carry, its initialising Assign)]``.

    The tracer initialises a carried tile ``c = move a`` before its loop, and
    the body ends with ``c := value`` updates (preceded by copies of carried
    tiles that another update reads).  A loop whose updates do not all have
    such an initialisation prints in the rebinding form instead.
    """
    defs = {s.var.id: s for s in flat if isinstance(s, Assign)}
    out = {}
    for s in flat:
        if not isinstance(s, For):
            continue
        body = _flatten(s.body)
        updates = [u for u in body if isinstance(u, Update)]
        tail = body[len(body) - len(updates):]
        if not updates or any(not isinstance(u, Update) for u in tail):
            continue
        carries = []
        for u in updates:
            a = defs.get(u.target.id)
            if a is None or not isinstance(a.expr, Move) or a.expr.memory != u.target.type.memory:
                break
            carries.append((u.target, a))
        else:
            out[id(s)] = carries
    return out


def _flatten(body) -> list:
    """The statements of ``body`` with fused chains spelled out."""
    out = []
    for s in body:
        out.extend(s.members if isinstance(s, Fused) else (s,))
    return out


def _is_carry_copy(a: Assign, updates: dict) -> bool:
    """A copy of a carried tile taken for a parallel update (``a, b = b, a``)."""
    return (isinstance(a.expr, Move) and a.expr.x.id in updates and a.expr.memory == a.expr.x.type.memory
            and any(u.value.id == a.var.id for u in updates.values()))


def format_python(program: Program) -> str:
    """Return ``program`` as the source of a ``@pl.jit`` function of the same name (see the module)."""
    return _Printer(program).run()
