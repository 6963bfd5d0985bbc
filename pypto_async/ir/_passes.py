"""The pass pipeline: check a traced program, drop dead tiles, fuse element-wise chains.

:data:`PIPELINE` lists the passes in order; :func:`run_passes` applies them
and marks the result ``stage="lowered"`` (running it again is a no-op).

Fusion groups element-wise statements (load, unary, binary, cast, full) of
one shape, and the stores of their values, into a :class:`Fused` loop nest
that computes every element of the chain in one pass: a tile chain reads its
inputs once and writes only what is stored or used elsewhere.  Reading order
stays correct because a group is closed ("flushed", emitted at that point)
before anything that needs one of its values, before a load from a tensor it
stores to, and at every loop or scope boundary.
"""

from __future__ import annotations

from dataclasses import replace

from ..errors import PtoCompileError
from ._bounds import RUNTIME
from ._infer import check_acc_phase, check_load, check_matmul_acc, check_store, compile_error, compute_dtype, infer_expr
from ._gather import check_scatter_store
from ._layout import check_tile_window
from ._nodes import (
    ELEMENTWISE,
    Assemble,
    Assign,
    Binary,
    Broadcast,
    Cast,
    Compare,
    Concat,
    DynFor,
    FillPad,
    For,
    Fused,
    Load,
    Matmul,
    MatmulAcc,
    Move,
    Reduce,
    Reshape,
    Bitcast,
    Scope,
    Select,
    Order,
    SetIndex,
    Slice,
    Transpose,
    Spmd,
    Store,
    Unary,
    Update,
    Var,
    Gather,
    Scatter,
)
from ._program import Program

__all__ = [
    "PIPELINE",
    "run_passes",
    "infer_and_check",
    "eliminate_dead_tiles",
    "fuse_elementwise",
    "expr_inputs",
    "mutated_vars",
    "view_loads",
]


def expr_inputs(expr) -> list[Var]:
    """Return the tile variables an expression reads."""
    if isinstance(expr, (Unary, Cast, Reduce, Move, Broadcast, Reshape, Transpose, Slice, FillPad, Bitcast)):
        return [expr.x]
    if isinstance(expr, Binary):
        return [x for x in (expr.a, expr.b) if isinstance(x, Var)]
    if isinstance(expr, Matmul):
        return [expr.a, expr.b] + [x for x in (expr.bias, expr.a_scale, expr.b_scale) if x is not None]
    if isinstance(expr, Concat):
        return [expr.a, expr.b]
    if isinstance(expr, Assemble):
        return [expr.target, expr.source]
    if isinstance(expr, Compare):
        return [x for x in (expr.a, expr.b) if isinstance(x, Var)]
    if isinstance(expr, Select):
        return [x for x in (expr.mask, expr.a, expr.b) if isinstance(x, Var)]
    if isinstance(expr, Order):
        return list(expr.xs)
    if isinstance(expr, Gather):
        return [expr.src, expr.index]
    if isinstance(expr, Scatter):
        return [x for x in (expr.target, expr.src, expr.index) if x is not None]
    return []


def _stmt_inputs(s) -> list[Var]:
    if isinstance(s, Assign):
        return expr_inputs(s.expr)
    if isinstance(s, MatmulAcc):
        return [s.acc, s.a, s.b] + [x for x in (s.a_scale, s.b_scale) if x is not None]
    if isinstance(s, Update):
        return [s.target, s.value]
    if isinstance(s, Store):
        return [s.value] if s.index is None else [s.value, s.index]
    return []


def mutated_vars(s) -> set[int]:
    """Return the ids of the tiles a statement updates in place."""
    if isinstance(s, MatmulAcc):
        return {s.acc.id}
    if isinstance(s, Update):
        return {s.target.id}
    return set()


# ---- pass 1: shape/dtype inference and checks ----------------------------------


def infer_and_check(program: Program) -> Program:
    """Check every statement's types, windows and def-before-use; return the program.

    Raises
    ------
    PtoCompileError
        With the offending statement's ``file:line``.
    """
    params = {p.name: p for p in (*program.params, *program.scratch)}
    defined: set[int] = set()
    spmd_counts: set[int] = set()
    # Each region (Scope) is a task of its own: a tile it defines lives on that task's core only.
    region_of: dict[int, Scope] = {}
    regions: list[Scope] = []

    def use(v: Var, loc) -> None:
        if v.id not in defined:
            raise compile_error(f"tile %{v.id} used before it is defined", loc)
        home = region_of.get(v.id)
        if home is not None and (not regions or regions[-1] is not home):
            where = f"region {home.name!r}" if home.name is not None else "another pl.at region"
            raise compile_error(f"tile %{v.id} is defined in {where} and read outside it: each region is a task "
                                f"of its own, so pass the value through a tensor (pl.store it to a "
                                f"pl.create_tensor tensor there and pl.load it here)", loc)

    def walk(body, ranges) -> None:
        for s in body:
            if isinstance(s, Assign):
                for v in expr_inputs(s.expr):
                    use(v, s.loc)
                t = infer_expr(s.expr, params, s.loc)
                if t != s.var.type:
                    raise compile_error(f"tile %{s.var.id} declared {s.var.type} but computes {t}", s.loc)
                if isinstance(s.expr, Load):
                    check_load(s.expr, params, ranges, s.loc)
                check_tile_window(s.expr, ranges, s.loc)
                if s.var.id in defined:
                    raise compile_error(f"tile %{s.var.id} defined twice", s.loc)
                defined.add(s.var.id)
                if regions:
                    region_of[s.var.id] = regions[-1]
            elif isinstance(s, MatmulAcc):
                for v in _stmt_inputs(s):
                    use(v, s.loc)
                check_matmul_acc(s.acc, s.a, s.b, s.loc, s.a_scale, s.b_scale)
                check_acc_phase(s.acc_phase, s.a, s.loc)
            elif isinstance(s, Update):
                use(s.target, s.loc)
                use(s.value, s.loc)
                t, v = s.target.type, s.value.type
                if (t.shape, t.dtype, t.valid) != (v.shape, v.dtype, v.valid):
                    raise compile_error(f"loop-carried tile %{s.target.id} is {t}, but its next value is {v}", s.loc)
            elif isinstance(s, Store) and s.index is not None:  # pl.mscatter
                use(s.value, s.loc)
                use(s.index, s.loc)
                check_scatter_store(s, params, s.loc)
            elif isinstance(s, Store):
                use(s.value, s.loc)
                check_store(s.value, s.param, s.offsets, params, ranges, s.loc, s.atomic)
            elif isinstance(s, For):
                if s.step <= 0:
                    raise compile_error(f"pl.range step must be positive, got {s.step}", s.loc)
                if s.trip_count == 0:
                    walk(s.body, ranges)  # still type-check the body
                    continue
                last = s.start + (s.trip_count - 1) * s.step
                walk(s.body, {**ranges, s.var.name: (s.start, last)})
            elif isinstance(s, Spmd):
                spmd_counts.add(s.count)
                walk(s.body, {**ranges, s.var.name: (0, s.count - 1)})
            elif isinstance(s, Scope):
                regions.append(s)
                walk(s.body, ranges)
                regions.pop()
            elif isinstance(s, Fused):
                walk(s.members, ranges)
            elif isinstance(s, SetIndex):
                pass  # its name is RUNTIME in every range map (below)
            elif isinstance(s, DynFor):
                if s.step <= 0:
                    raise compile_error(f"pl.range step must be positive, got {s.step}", s.loc)
                walk(s.body, {**ranges, s.var.name: (0, 0) if s.kind != "range" else RUNTIME})
            else:
                raise PtoCompileError(f"unknown statement {type(s).__name__}")

    walk(program.body, {s.var.name: RUNTIME for s in _walk_all(program.body) if isinstance(s, SetIndex)})
    if len(spmd_counts) > 1 or (spmd_counts and program.block_num not in spmd_counts):
        raise PtoCompileError(
            f"program {program.name}: pl.spmd block counts {sorted(spmd_counts)} disagree with "
            f"block_num={program.block_num} (use one block count per kernel)"
        )
    return program


# ---- pass 2: dead tile elimination -----------------------------------------------


def eliminate_dead_tiles(program: Program) -> Program:
    """Drop tile definitions nothing reads (tile ops have no side effects)."""
    while True:
        used = {v.id for s in _walk_all(program.body) for v in _stmt_inputs(s)}
        removed = False

        def keep(body) -> tuple:
            nonlocal removed
            out = []
            for s in body:
                if isinstance(s, Assign) and s.var.id not in used:
                    removed = True
                    continue
                if isinstance(s, (For, Spmd, Scope, DynFor)):
                    s = replace(s, body=keep(s.body))
                out.append(s)
            return tuple(out)

        body = keep(program.body)
        if not removed:
            return program
        program = replace(program, body=body)


# ---- pass 3: element-wise fusion -------------------------------------------------

#: Compare reads 8 source elements per mask byte, Select a mask byte per 8 elements.
_REINDEXING = (Reshape, Transpose, Slice, Concat, Assemble, Compare, Select, Gather)
_REINDEXING += (Bitcast,)  # reads its source's bytes at other positions


def _walk_all(body):
    for s in body:
        yield s
        if isinstance(s, (For, Spmd, Scope, DynFor)):
            yield from _walk_all(s.body)
        elif isinstance(s, Fused):
            yield from _walk_all(s.members)


def view_loads(program: Program) -> set[int]:
    """Return the ids of loads read in place (no tile copy).

    A load is a view when only matmul operands and reductions read it, its
    dtype needs no conversion, and nothing in the program stores to its
    tensor (so reading it later cannot observe a store).
    """
    stored = {s.param for s in _walk_all(program.body) if isinstance(s, Store)}
    loads = {}
    ok: dict[int, bool] = {}
    used = {v.id for s in _walk_all(program.body) for v in _stmt_inputs(s)}
    for s in _walk_all(program.body):
        if isinstance(s, Assign) and isinstance(s.expr, Load):
            loads[s.var.id] = s
            ok.setdefault(s.var.id, True)
    for s in _walk_all(program.body):
        if isinstance(s, Assign) and isinstance(s.expr, Matmul):
            continue
        if isinstance(s, Assign) and isinstance(s.expr, Reduce):
            continue
        if isinstance(s, MatmulAcc):
            if s.acc.id in ok:
                ok[s.acc.id] = False
            continue
        if isinstance(s, Assign) and isinstance(s.expr, Load) and s.var.type.valid is not None:
            ok[s.var.id] = False  # a partial window may overhang its tensor: read its box only
            continue
        for v in _stmt_inputs(s):
            if v.id in ok:
                ok[v.id] = False
    return {
        vid
        for vid, good in ok.items()
        if good
        and loads[vid].expr.param not in stored
        and compute_dtype(loads[vid].var.type.dtype) == loads[vid].var.type.dtype  # FP16, BF16, FP8 convert
        and vid in used
    }


class _Group:
    def __init__(self, shape):
        self.shape = shape
        self.members: list = []
        self.defs: set[int] = set()
        self.reads: set[int] = set()
        self.loads: dict[str, list] = {}
        self.stores: set[str] = set()

    def add(self, s) -> None:
        self.members.append(s)
        for v in _stmt_inputs(s):
            if v.id not in self.defs:
                self.reads.add(v.id)
        if isinstance(s, Assign):
            self.defs.add(s.var.id)
            if isinstance(s.expr, Load):
                self.loads.setdefault(s.expr.param, []).append(s.expr)
        else:
            self.stores.add(s.param)


def fuse_elementwise(program: Program) -> Program:
    """Group element-wise chains into :class:`Fused` loop nests; return the new program."""
    views = view_loads(program)
    groups: list[_Group] = []

    def fuse_block(body) -> list:
        out: list = []
        open_: dict[tuple, _Group] = {}

        def flush(g: _Group) -> None:
            del open_[g.shape]
            groups.append(g)
            out.append(g)

        def flush_if(pred) -> None:
            for g in list(open_.values()):
                if pred(g):
                    flush(g)

        for s in body:
            if isinstance(s, Assign) and isinstance(s.expr, ELEMENTWISE) and s.var.id not in views:
                shape = s.var.type.shape
                ins = {v.id for v in expr_inputs(s.expr)}
                # Reshape, slice, concat and assemble read their operands at other positions
                # than the element being computed: those come from materialised tiles.
                moved = isinstance(s.expr, _REINDEXING)
                flush_if(lambda g: (g.shape != shape or moved) and g.defs & ins)
                if isinstance(s.expr, Load):
                    param = s.expr.param
                    flush_if(lambda g: param in g.stores)
                g = open_.get(shape) or open_.setdefault(shape, _Group(shape))
                g.add(s)
            elif isinstance(s, Store) and s.index is not None:  # pl.mscatter: a statement of its own
                ins = {v.id for v in _stmt_inputs(s)}
                flush_if(lambda g: g.defs & ins or s.param in g.loads or s.param in g.stores)
                out.append(s)
            elif isinstance(s, Store):
                shape = s.value.type.shape
                param = s.param
                flush_if(lambda g: param in g.loads and (g.shape != shape or s.value.id not in g.defs))
                g = open_.get(shape)
                if g is not None and param in g.loads:
                    # Same chain loads and stores this tensor: fusing is safe only when
                    # every load reads exactly the window being written.
                    if any(ld.offsets != s.offsets for ld in g.loads[param]):
                        flush(g)
                        g = None
                if g is None:
                    g = open_.setdefault(shape, _Group(shape))
                g.add(s)
            elif isinstance(s, (For, Spmd, Scope, DynFor)):
                flush_if(lambda g: True)
                out.append(replace(s, body=tuple(fuse_block(s.body))))
            elif isinstance(s, (Fused, SetIndex)):
                # A runtime scalar's new value must not reach an open chain's offsets, which read the old
                # one (a pl.while_ carry is assigned after the body's loads and stores).
                flush_if(lambda g: True)
                out.append(s)
            else:
                ins = {v.id for v in _stmt_inputs(s)}
                mutated = mutated_vars(s)
                flush_if(lambda g: g.defs & ins or g.reads & mutated)
                out.append(s)
        flush_if(lambda g: True)
        return out

    fused_body = fuse_block(program.body)

    # A member is materialised when anything outside its own group reads it.
    readers: dict[int, set[int]] = {}
    for s in _walk_all(program.body):
        for v in _stmt_inputs(s):
            readers.setdefault(v.id, set()).add(id(s))
    built: dict[int, Fused] = {}
    for g in groups:
        member_ids = {id(m) for m in g.members}
        keep = tuple(sorted(vid for vid in g.defs if readers.get(vid, set()) - member_ids))
        built[id(g)] = Fused(tuple(g.shape), tuple(g.members), keep)

    def rebuild(body) -> tuple:
        res = []
        for s in body:
            if isinstance(s, _Group):
                res.append(built[id(s)])
            elif isinstance(s, (For, Spmd, Scope, DynFor)):
                res.append(replace(s, body=rebuild(s.body)))
            else:
                res.append(s)
        return tuple(res)

    return replace(program, body=rebuild(fused_body))


PIPELINE = [infer_and_check, eliminate_dead_tiles, fuse_elementwise, infer_and_check]


def run_passes(program: Program) -> Program:
    """Run :data:`PIPELINE` over a traced program; a lowered one is returned as is."""
    if program.stage == "lowered":
        return infer_and_check(program)
    for p in PIPELINE:
        program = p(program)
    return replace(program, stage="lowered")
