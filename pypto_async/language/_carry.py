"""Loop-carried tiles: rebinding a name inside ``pl.range``, and ``init_values=`` with ``pl.yield_``.

A ``pl.range`` body is traced once, so ``t = pl.add(t, x)`` in it records a
read of the ``t`` from before the loop.  To give it Python's meaning (each
iteration reads the previous one's ``t``) the loop gets a *carried* tile
``c``: before the loop ``c = t``; the body's reads of the old ``t`` become
reads of ``c``; the body ends with ``c := <the new t>`` (an ``Update``); and
after the loop the name ``t`` holds ``c``.  A name is carried when, at the end
of the body, it is bound to another tile than at the start *and* the old one is
needed in the loop (the body reads it, or another name is rebound to it); a
name only rebound to fresh values needs no carry.

``init_values=`` names the carried values explicitly (PyPTO's printed form):
the loop target receives them, and ``pl.yield_`` ends the body with their next
values and returns the values that hold them after the loop.  A carried tensor
is carried by reference (the iterations share its buffer): yield the tensor
``pl.store`` returned, or a tile that is then stored over the whole tensor.

All updates of one iteration read the values of that iteration, as a
parallel assignment does: ``a, b = b, a`` swaps (a value that is itself a
carried tile is copied first).
"""

from __future__ import annotations

from ..ir._diag import compile_error
from .._signature import IN
from ..ir._infer import check_store
from .._scalars import is_int
from ..ir._bounds import RUNTIME
from ..ir._nodes import Assign, IConst, IVar, Load, Move, SetIndex, Store, TileType, Update, Var
from ..ir._rewrite import reads, substitute
from ..ir._spaces import CUBE_ONLY
from ._tracer import Index, ScalarArg, TensorArg, Tile, current, to_index, user_loc

__all__ = ["tile_locals", "scratch_locals", "carry_rebound", "open_carries", "yield_"]


def tile_locals(frame) -> dict[str, Tile]:
    """The local names of ``frame`` bound to tiles."""
    return {name: v for name, v in frame.f_locals.items() if isinstance(v, Tile)}


def scratch_locals(tracer, frame) -> dict[str, TensorArg]:
    """The local names of ``frame`` bound to a whole intermediate tensor (``pl.create_tensor``) that no other name holds.

    Inside a region such a tensor is a buffer of the region (PyPTO's passes
    make it a tile); a loop that rebinds its name to a tile carries it.
    """
    scratch = {p.name for p in tracer.scratch}
    tensors = [(n, v) for n, v in frame.f_locals.items()
               if isinstance(v, TensorArg) and not hasattr(v, "origin") and v.name in scratch]
    held = [v.name for _, v in tensors]
    return {n: v for n, v in tensors if held.count(v.name) == 1}


def _stores_to(body, name: str) -> bool:
    from ..ir._nodes import Store

    for s in body:
        if isinstance(s, Store) and s.param == name:
            return True
        if _stores_to(getattr(s, "body", ()) or getattr(s, "members", ()) or (), name):
            return True
    return False


def _loads_as_tile(body, name: str, shape, var) -> tuple:
    """``body`` with each whole-tensor load of ``name`` made a read of tile ``var``."""
    import dataclasses

    out = []
    for s in body:
        if (isinstance(s, Assign) and isinstance(s.expr, Load) and s.expr.param == name
                and s.expr.shape == shape and s.expr.valid is None
                and all(isinstance(o, IConst) and o.value == 0 for o in s.expr.offsets)):
            s = Assign(s.var, Move(var, s.expr.memory), s.loc)
        else:
            for field in ("body", "members"):
                inner = getattr(s, field, None)
                if isinstance(inner, tuple) and inner:
                    s = dataclasses.replace(s, **{field: _loads_as_tile(inner, name, shape, var)})
        out.append(s)
    return tuple(out)


def _scratch_carries(tracer, scratch: dict, frame, body: tuple, loop_loc):
    """Names bound to an intermediate tensor before the loop and to a tile of its shape after the body.

    ``acc = pl.create_tensor(...)`` then, in the loop, ``acc = pl.matmul(...)``
    or ``acc = pl.matmul_acc(acc, ...)``: each iteration reads the previous
    one's ``acc``.  The tensor's value becomes a tile before the loop (a load
    of it), the body's whole-tensor loads of it read that tile instead, and
    the tile is carried like any other.  Returns (statements before the
    loop, the body, the extra ``before`` tiles).
    """
    after = frame.f_locals
    pre, extra = [], {}
    for name, tensor in scratch.items():
        new = after.get(name)
        if not isinstance(new, Tile) or new.shape != tuple(tensor.shape) or new.dtype != tensor.dtype:
            continue
        if _stores_to(body, tensor.name):
            continue
        start = tracer.new_var(TileType(tuple(tensor.shape), tensor.dtype, "Vec"))
        pre.append(Assign(start, Load(tensor.name, (IConst(0),) * len(tensor.shape), tuple(tensor.shape)),
                          loop_loc))
        body = _loads_as_tile(body, tensor.name, tuple(tensor.shape), start)
        extra[name] = Tile(start)
    return pre, body, extra


def _same(a: TileType, b: TileType) -> bool:
    return (a.shape, a.dtype, a.valid) == (b.shape, b.dtype, b.valid)


def _def_loc(body, var_id: int):
    for s in body:
        if isinstance(s, Assign) and s.var.id == var_id:
            return s.loc
        found = _def_loc(getattr(s, "body", ()), var_id)
        if found is not None:
            return found
    return None


def _updates(tracer, pairs, carry_ids: set[int], loc) -> list:
    """``Update`` statements for ``(carry, value)`` pairs, copying values that are carries themselves."""
    stmts, fixed = [], []
    for c, v in pairs:
        if v.id in carry_ids and v.id != c.id:
            tmp = tracer.new_var(v.type)
            stmts.append(Assign(tmp, Move(v, v.type.memory), loc))
            v = tmp
        fixed.append((c, v))
    stmts.extend(Update(c, v, loc) for c, v in fixed if c.id != v.id)
    return stmts


def carry_rebound(tracer, before: dict[str, Tile], frame, body: tuple, loop_loc,
                  scratch: dict | None = None) -> tuple[list, tuple]:
    """Turn names rebound in a traced loop body into carried tiles.

    ``scratch`` (:func:`scratch_locals` at the loop's start) are names bound
    to intermediate tensors; one the body rebinds to a tile of the tensor's
    shape is carried too (see :func:`_scratch_carries`).  Returns the
    statements to run before the loop and the new body.
    """
    pre = []
    if scratch:
        pre, body, extra = _scratch_carries(tracer, scratch, frame, body, loop_loc)
        before = {**before, **extra}
    inits, body = _carry_tiles(tracer, before, frame, body, loop_loc)
    return pre + inits, body


def _carry_tiles(tracer, before: dict[str, Tile], frame, body: tuple, loop_loc) -> tuple[list, tuple]:
    after = tile_locals(frame)
    # The old value of a name is needed in the loop when the body reads it, or when it becomes
    # another name's value (``a, b = b, a``): the next iteration reads it through that name.
    body_reads = reads(body) | {t.var.id for t in after.values()}
    carried: dict[int, list[str]] = {}  # old var id -> rebound names
    for name, old in before.items():
        new = after.get(name)
        if new is None or new.var.id == old.var.id or old.var.id not in body_reads:
            continue
        carried.setdefault(old.var.id, []).append(name)
    if not carried:
        return [], body
    mapping, inits, pairs, targets = {}, [], [], []
    for old_id, names in carried.items():
        aliases = [m for m, t in before.items() if t.var.id == old_id and m not in names]
        if len(names) > 1 or any(after.get(m) is not None and after[m].var.id == old_id for m in aliases):
            others = names[1:] + aliases
            raise compile_error(
                f"tiles {names[0]!r} and {others[0]!r} are one tile when the pl.range loop starts, and "
                f"{names[0]!r} is rebound in the loop: the body, traced once, cannot tell which of them it "
                "reads. Give one of them its own tile first (e.g. pl.add(t, 0))",
                loop_loc,
            )
        name = names[0]
        a, b = before[name].var, after[name].var
        if not _same(a.type, b.type):
            raise compile_error(
                f"tile {name!r} is carried by the pl.range loop but changes type in it: {a.type} before, "
                f"{b.type} at the end of the body",
                _def_loc(body, b.id) or loop_loc,
            )
        memory = b.type.memory if b.type.memory in CUBE_ONLY else a.type.memory
        c = tracer.new_var(TileType(a.type.shape, a.type.dtype, memory, a.type.valid))
        inits.append(Assign(c, Move(a, memory), loop_loc))
        mapping[a.id] = c
        pairs.append((c, b))
        targets.append((name, c))
    body = substitute(body, mapping)
    carry_ids = {c.id for c in mapping.values()}
    pairs = [(c, mapping.get(b.id, b)) for c, b in pairs]
    body = body + tuple(_updates(tracer, pairs, carry_ids, loop_loc))
    carried_objects = {id(before[name]) for name, _ in targets}
    pre_loop = {id(t) for t in before.values()} - carried_objects
    for name, c in targets:
        if id(after[name]) not in pre_loop:  # a loop-invariant tile keeps its value (and its other names)
            after[name].var = c  # after the loop the name holds the carried tile
    return inits, body


def open_carries(tracer, init_values, loop_loc) -> tuple[list, list]:
    """The carried values of ``init_values=``: (statements before the loop, carries).

    A tile is carried in a fresh var (a :class:`Var`); a tensor is carried by
    reference (its :class:`TensorArg`), see :func:`yield_`.
    """
    from .array import TASK_ID, TaskIdArray, create

    inits, carries = [], []
    for i, t in enumerate(init_values):
        if isinstance(t, TaskIdArray):  # a task-id array: a carry array of its own (see For.task_carries)
            if t._tracer is not tracer:
                raise compile_error(f"pl.range init_values[{i}]: {t.name} belongs to another kernel", loop_loc)
            c = create(t.size, TASK_ID)
            c.carried_from = t.name
            carries.append(c)
            continue
        if isinstance(t, TensorArg):
            params = (getattr(tracer, "func_attrs", None) or {}).get("params", ())
            kernel_param = any(t is p for p in params)  # a program kernel's parameter: its whole tensor to the kernel
            if getattr(t, "origin", None) is not None and not kernel_param:
                raise compile_error(f"pl.range init_values[{i}] is a window of {t.name!r}: carry a whole tensor "
                                    f"or a tile", loop_loc)
            carries.append(t)
            continue
        if not isinstance(t, Tile):
            raise compile_error(f"pl.range init_values[{i}] must be a tile, a tensor or a task-id array, "
                                f"got {t!r}", loop_loc)
        c = tracer.new_var(t.var.type)
        inits.append(Assign(c, Move(t.var, t.var.type.memory), loop_loc))
        carries.append(c)
    return inits, carries


def yield_(*values):
    """End a ``pl.range(..., init_values=...)`` body: the carried tiles' next values.

    Returns the tile (or a tuple of tiles) holding the carried values, which
    after the loop are its results.  It must be the body's last statement,
    with one value per ``init_values`` entry, each of the same shape, dtype
    and valid region.
    """
    t = current("pl.yield_")
    loc = user_loc()
    loop = t.carry_loops[-1] if getattr(t, "carry_loops", None) else None
    if (loop is None or loop.depth != len(t.blocks)) and t.frames and t.frames[-1] in ("if", "else"):
        return values[0] if len(values) == 1 else values  # PyPTO's 'x = pl.yield_(v)' in a branch: the if's value
    if loop is None or loop.depth != len(t.blocks):
        raise compile_error("pl.yield_ belongs directly in the body of a pl.range(..., init_values=...) loop", loc)
    if loop.yielded is not None:
        raise compile_error("pl.yield_ is called once per loop body", loc)
    if len(values) != len(loop.carries):
        raise compile_error(f"pl.yield_ got {len(values)} values for {len(loop.carries)} init_values", loc)
    from .array import TaskIdArray

    pairs, write_backs, scalars = [], [], []
    for i, (c, v) in enumerate(zip(loop.carries, values)):
        if isinstance(c, TaskIdArray):
            if not isinstance(v, TaskIdArray) or v.size != c.size:
                raise compile_error(f"pl.yield_ value {i} must be a task-id array of {c.size} slots "
                                    f"(init_values[{i}] is one), got {v!r}", loc)
            loop.task_yields[c.name] = v.name
            continue
        if isinstance(c, TensorArg):
            write_backs.extend(_tensor_yield(t, i, c, v, loc))
            continue
        if isinstance(c, IVar):  # a pl.while_ scalar: the next value, assigned after all are computed
            if isinstance(v, bool) or not (is_int(v) or isinstance(v, (Index, ScalarArg))):
                raise compile_error(f"pl.yield_ value {i} must be an int or an index (init_values[{i}] is one), "
                                    f"got {v!r}", loc)
            tmp = t.new_index("y")
            t.ranges[tmp.name] = RUNTIME
            write_backs.append(SetIndex(tmp, to_index(v, f"pl.yield_ value {i}"), loc))
            scalars.append(SetIndex(c, tmp, loc))
            continue
        if not isinstance(v, Tile):
            raise compile_error(f"pl.yield_ value {i} must be a tile, got {v!r}", loc)
        if not _same(c.type, v.var.type):
            raise compile_error(f"pl.yield_ value {i} is {v.var.type}, but init_values[{i}] is {c.type}", loc)
        pairs.append((c, v.var))
    tile_ids = {c.id for c in loop.carries if isinstance(c, Var)}
    for s in write_backs + scalars + _updates(t, pairs, tile_ids, loc):
        t.append(s)
    loop.yielded = len(t.blocks[-1])
    out = tuple(c if isinstance(c, (TensorArg, TaskIdArray)) else Index(c) if isinstance(c, IVar) else Tile(c)
                for c in loop.carries)
    return out[0] if len(out) == 1 else out  # one value: also '(x,) = pl.yield_(v)' (see _tracer's __iter__)


def _tensor_yield(t, i: int, c: TensorArg, v, loc) -> list:
    """The statements that make ``v`` the next value of the tensor carried as ``c``.

    A tensor is carried by reference: the loop's iterations read and write
    the one buffer.  Yielding the tensor itself (what ``pl.store`` returned)
    needs nothing; yielding a tile (a tensor-level op's result) stores it
    over the whole tensor, so the next iteration reads it there, which makes
    the tensor writable: ``pl.Out``, ``pl.InOut`` or a ``pl.create_tensor``
    tensor.
    """
    if isinstance(v, TensorArg):
        if v is not c and (v.name != c.name or getattr(v, "origin", None) is not None):
            raise compile_error(f"pl.yield_ value {i} is {v!r}, but init_values[{i}] carries the tensor {c.name!r}: "
                                f"yield that tensor (what pl.store returned) or a tile of its shape", loc)
        return []
    if not isinstance(v, Tile):
        raise compile_error(f"pl.yield_ value {i} must be a tile or the tensor {c.name!r}, got {v!r}", loc)
    if tuple(v.shape) != tuple(c.shape) or v.dtype != c.dtype:
        raise compile_error(f"pl.yield_ value {i} is a {v.dtype.name}{list(v.shape)} tile, but init_values[{i}] "
                            f"is the {c.dtype.name}{list(c.shape)} tensor {c.name!r}", loc)
    if t.params[c.name].direction == IN:
        raise compile_error(f"pl.yield_ value {i} is a tile for the tensor {c.name!r}, an input: the tile is "
                            f"stored over the carried tensor, so carry a pl.Out/pl.InOut or a pl.create_tensor "
                            f"tensor", loc)
    offsets = (IConst(0),) * len(c.shape)
    check_store(v.var, c.name, offsets, t.params, t.ranges, loc, None)
    return [Store(v.var, c.name, offsets, loc, None)]
