"""PyPTO's explicit cross-core transfer: ``tpush`` / ``tpop`` / ``tfree`` over pipes between AIC and AIV.

On the device a core group's cube (AIC) and vector cores (AIV) hand tiles to
each other through ring buffers ("pipes"): the producer pushes a tile into a
slot (``pl.tpush_to_aiv`` from the cube, ``pl.tpush_to_aic`` from a vector
core), the consumer pops it (``pl.tpop_from_aic`` / ``pl.tpop_from_aiv``)
and, once done with it, releases the slot (``pl.tfree_to_aic`` /
``pl.tfree_to_aiv``).  Each side sets its end of a pipe up first
(``pl.aic_initialize_pipe`` / ``pl.aiv_initialize_pipe``: direction mask
1 = cube to vector, 2 = vector to cube, 3 = both; the slot size in bytes;
an optional pipe ``id``), over a buffer the consumer reserves
(``pl.reserve_buffer``) and the producer imports (``pl.import_peer_buffer``).

How the sim runs it:

* **One InCore function** (a ``pl.at`` region, an InCore / Opaque kernel)
  holding both sides runs as one task in program order: a pop takes the
  oldest tile pushed on its pipe before it, moved into the consumer's
  buffer (``Vec`` on a vector core, ``Mat`` on the cube).  The pairing is
  resolved when the kernel is traced.
* **A Group function** (``pl.FunctionType.Group``) calling an ``AIC`` and an
  ``AIV`` function runs each member as a task of its own, each placed on a
  core of its kind by its work: a push stores the tile to a tensor the
  consumer task loads it from, and the consumer is ordered after the
  producer by that tensor (and an explicit edge), whatever order the Group's
  body calls them in.  Members that feed each other (a push each way) have
  no such order: they are traced as one task, each member in a thread of
  its own and one at a time, switching at a pop whose push has not been
  traced yet, so the task's statements pair every pop with an earlier push.

Misuse is a compile error, raised when the kernel is traced: one of these
ops outside an InCore function; a push or pop on a pipe its side did not
initialize; a pop with no push before it, or a push nobody pops; a pop
never released by a ``tfree`` (on the device it leaks the slot and the
producer stalls); a tile larger than the pipe's slot, or a pop declaring a
shape or dtype other than the tile pushed; ``split`` or ``id`` disagreeing
between a push, its pop and its ``tfree``.
"""

from __future__ import annotations

import threading

from ..errors import PtoNotSupported
from ..ir._diag import compile_error
from ._tracer import Tile, current, user_loc

__all__ = [
    "AUTO",
    "tpush_to_aiv",
    "tpush_to_aic",
    "tpop_from_aic",
    "tpop_from_aiv",
    "tfree_to_aic",
    "tfree_to_aiv",
    "aic_initialize_pipe",
    "aiv_initialize_pipe",
    "reserve_buffer",
    "import_peer_buffer",
]

#: The sentinel for a pipe parameter the compiler chooses (``reserve_buffer(base=pl.AUTO)``).
AUTO: int = -1

C2V, V2C = "C2V", "V2C"  # pipe directions: dir_mask bit 1 and bit 2
_DIRS = {1: (C2V,), 2: (V2C,), 3: (C2V, V2C)}
_PRODUCER = {C2V: "AIC", V2C: "AIV"}
_CONSUMER = {C2V: "AIV", V2C: "AIC"}
_PUSH = {C2V: "pl.tpush_to_aiv", V2C: "pl.tpush_to_aic"}
_POP = {C2V: "pl.tpop_from_aic", V2C: "pl.tpop_from_aiv"}
_FREE = {C2V: "pl.tfree_to_aic", V2C: "pl.tfree_to_aiv"}
_INIT = {"AIC": "pl.aic_initialize_pipe", "AIV": "pl.aiv_initialize_pipe"}
_LANDING = {"AIV": "Vec", "AIC": "Mat"}  # where a popped tile lands on each side


class _Empty(Exception):
    """A pop in a Group member found its pipe empty: trace the member after its producer (see group_call)."""


class PipeBuffer:
    """What ``pl.reserve_buffer`` / ``pl.import_peer_buffer`` return: a named slot buffer (the sim needs no address)."""

    def __init__(self, name: str, size: int | None, base: int | None, peer_func: str | None):
        self.name, self.size, self.base, self.peer_func = name, size, base, peer_func

    def __repr__(self) -> str:
        if self.peer_func is not None:
            return f"<pipe buffer {self.name!r} imported from {self.peer_func}>"
        return f"<pipe buffer {self.name!r}: {self.size} bytes>"


class _Pipe:
    def __init__(self):
        self.init: dict[str, dict] = {}  # side -> its initialize_pipe's parameters
        self.queue: list[dict] = []  # pushed tiles not popped yet, oldest first


class _State:
    """The pipes of one InCore function being traced (or of one Group call, across its members)."""

    def __init__(self, owner):
        self.owner = owner
        self.pipes: dict[tuple[str, int], _Pipe] = {}
        self.popped: dict[int, dict] = {}  # var id of a popped tile -> its pop, until its tfree
        self.buffers: dict[str, PipeBuffer] = {}
        self.edges: list[tuple[int, int]] = []  # (consumer task, producer task) of a Group's hand-overs
        self.merged = None  # a Group's members traced as one task: the _Merged switching between them

    def pipe(self, direction: str, pid: int) -> _Pipe:
        return self.pipes.setdefault((direction, pid), _Pipe())

    def snapshot(self):
        return ({k: (dict(p.init), list(p.queue)) for k, p in self.pipes.items()}, dict(self.popped),
                dict(self.buffers), list(self.edges))

    def restore(self, snap) -> None:
        pipes, self.popped, self.buffers, self.edges = snap
        self.pipes = {}
        for k, (init, queue) in pipes.items():
            p = self.pipes[k] = _Pipe()
            p.init, p.queue = init, queue


def _task_owner(t):
    """The task being traced (its id); ``"top"`` for a ``@pl.jit`` body's own code; None in an orchestration."""
    if "at" not in t.frames and getattr(t, "func_attrs", None) is None:
        return None if getattr(t, "is_program", False) else "top"
    return t.next_task - 1


_lane = threading.local()  # a merged Group member's side, in the thread tracing it (see _merged)


def _kernel_side(t) -> str | None:
    """``"AIC"`` / ``"AIV"`` inside a function of that type, else None (a mixed InCore function)."""
    side = getattr(_lane, "side", None)
    if side is not None:
        return side
    attrs = getattr(t, "func_attrs", None) or {}
    return attrs.get("fn_type")


def _state(op: str, side: str):
    """The pipe state for ``op`` (run on ``side``), refusing it outside an InCore function or on the wrong core."""
    t = current(op)
    loc = user_loc()
    owner = _task_owner(t)
    if owner is None:
        raise compile_error(f"{op}: a cross-core transfer belongs in an InCore function (a kernel the "
                            f"orchestration calls, or a pl.at region); this is the orchestration", loc)
    kind = _kernel_side(t)
    if kind is not None and kind != side:
        raise compile_error(f"{op} runs on the {side} side of a pipe, but this is an {kind} function "
                            f"(pl.FunctionType.{kind})", loc)
    group = getattr(t, "crosscore_group", None)
    if group is not None and kind is not None:
        return t, group, loc
    states = getattr(t, "crosscore", None)
    if states is None:
        states = t.crosscore = {}
    st = states.get(owner)
    if st is None:
        st = states[owner] = _State(owner)
    return t, st, loc


def _int_param(op: str, name: str, value, lo: int, hi: int | None, loc, allow_none=False):
    if value is None and allow_none:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < lo or (hi is not None and value > hi):
        bound = f"{lo}..{hi}" if hi is not None else f">= {lo}"
        raise compile_error(f"{op}: {name} must be an int in {bound}, got {value!r}", loc)
    return value


def _pipe_id(op: str, pid, loc) -> int:
    return 0 if pid is None else _int_param(op, "id", pid, 0, None, loc)


def _nbytes(tile: Tile) -> int:
    n = tile.var.type.dtype.itemsize
    for d in tile.shape:
        n *= d
    return n


# ---- pipe setup ------------------------------------------------------------------------------------------------


def _initialize(side: str, c2v_consumer_buf, v2c_consumer_buf, dir_mask, slot_size, slot_num, local_slot_num,
                pid):
    op = _INIT[side]
    t, st, loc = _state(op, side)
    if dir_mask not in _DIRS or isinstance(dir_mask, bool):
        raise compile_error(f"{op}: dir_mask must be 1 (cube to vector), 2 (vector to cube) or 3 (both), got "
                            f"{dir_mask!r}", loc)
    slot_size = _int_param(op, "slot_size", slot_size, 1, None, loc)
    slot_num = _int_param(op, "slot_num", slot_num, 1, None, loc, allow_none=True)
    local_slot_num = _int_param(op, "local_slot_num", local_slot_num, 1, None, loc, allow_none=True)
    if local_slot_num is not None and slot_num is not None and local_slot_num > slot_num:
        raise compile_error(f"{op}: local_slot_num ({local_slot_num}) must be <= slot_num ({slot_num})", loc)
    pid = _pipe_id(op, pid, loc)
    slots = local_slot_num or slot_num
    for direction in _DIRS[dir_mask]:
        buf = c2v_consumer_buf if direction == C2V else v2c_consumer_buf
        if isinstance(buf, PipeBuffer) and buf.size is not None and slots is not None and \
                buf.size < slot_size * slots:
            raise compile_error(f"{op}: buffer {buf.name!r} is {buf.size} bytes, smaller than the pipe's "
                                f"{slots} slots of {slot_size} bytes ({slots * slot_size})", loc)
        pipe = st.pipe(direction, pid)
        if side in pipe.init:
            raise compile_error(f"{op}: the {direction} pipe id={pid} is already initialized on the {side} side "
                                f"(at {pipe.init[side]['loc']})", loc)
        peer = pipe.init.get("AIC" if side == "AIV" else "AIV")
        if peer is not None and peer["slot_size"] != slot_size:
            raise compile_error(f"{op}: slot_size={slot_size} disagrees with the peer's slot_size="
                                f"{peer['slot_size']} for the {direction} pipe id={pid}", loc)
        pipe.init[side] = {"slot_size": slot_size, "slot_num": slot_num, "loc": loc}


def aic_initialize_pipe(c2v_consumer_buf=0, v2c_consumer_buf=0, *, dir_mask: int, slot_size: int,
                        slot_num: int | None = None, local_slot_num: int | None = None, id: int | None = None,  # noqa: A002
                        span=None) -> None:
    """Set up the cube's end of a cross-core pipe (``dir_mask`` 1: cube to vector, 2: vector to cube, 3: both).

    ``slot_size`` is the bytes of one ring slot (a pushed tile must fit);
    ``slot_num`` / ``local_slot_num`` the ring's depth (the sim needs none:
    a pushed tile waits until it is popped); ``id`` the pipe (0 unless
    given).  The consumer buffers are what ``pl.reserve_buffer`` /
    ``pl.import_peer_buffer`` returned, or 0.
    """
    _initialize("AIC", c2v_consumer_buf, v2c_consumer_buf, dir_mask, slot_size, slot_num, local_slot_num, id)


def aiv_initialize_pipe(c2v_consumer_buf=0, v2c_consumer_buf=0, *, dir_mask: int, slot_size: int,
                        slot_num: int | None = None, local_slot_num: int | None = None, id: int | None = None,  # noqa: A002
                        span=None) -> None:
    """Set up a vector core's end of a cross-core pipe; the parameters are :func:`aic_initialize_pipe`'s."""
    _initialize("AIV", c2v_consumer_buf, v2c_consumer_buf, dir_mask, slot_size, slot_num, local_slot_num, id)


def _buffer_name(op: str, name, loc) -> str:
    if not isinstance(name, str) or not name:
        raise compile_error(f"{op}: name must be a non-empty str, got {name!r}", loc)
    return name


def reserve_buffer(*, name: str, size: int, base: int = AUTO, span=None) -> PipeBuffer:
    """Reserve the named slot buffer a pipe's consumer receives into (``size`` bytes; ``base`` an address or AUTO)."""
    t = current("pl.reserve_buffer")
    loc = user_loc()
    if _task_owner(t) is None:
        raise compile_error("pl.reserve_buffer: a pipe buffer belongs in an InCore function, not the "
                            "orchestration", loc)
    name = _buffer_name("pl.reserve_buffer", name, loc)
    size = _int_param("pl.reserve_buffer", "size", size, 1, None, loc)
    if base != AUTO:
        _int_param("pl.reserve_buffer", "base", base, 0, None, loc)
    return PipeBuffer(name, size, base, None)


def import_peer_buffer(*, name: str, peer_func: str, span=None) -> PipeBuffer:
    """The slot buffer ``name`` that function ``peer_func`` of the same Group reserved (the producer's view of it)."""
    t = current("pl.import_peer_buffer")
    loc = user_loc()
    if _task_owner(t) is None:
        raise compile_error("pl.import_peer_buffer: a pipe buffer belongs in an InCore function, not the "
                            "orchestration", loc)
    name = _buffer_name("pl.import_peer_buffer", name, loc)
    if not isinstance(peer_func, str) or not peer_func:
        raise compile_error(f"pl.import_peer_buffer: peer_func must be a function name (a str), got "
                            f"{peer_func!r}", loc)
    return PipeBuffer(name, None, None, peer_func)


# ---- push / pop / free -----------------------------------------------------------------------------------------


def _push(direction: str, tile, split, lane_stride, pid) -> None:
    op = _PUSH[direction]
    side = _PRODUCER[direction]
    t, st, loc = _state(op, side)
    if not isinstance(tile, Tile):
        raise compile_error(f"{op}: tile must be a tile, got {tile!r}", loc)
    split = _int_param(op, "split", split, 0, 4 if direction == C2V else 2, loc)
    if lane_stride is not None:
        _int_param(op, "lane_stride", lane_stride, 1, None, loc)
    pid = _pipe_id(op, pid, loc)
    memory = tile.var.type.memory
    if memory in ("Left", "Right", "Bias"):
        raise compile_error(f"{op}: tile %{tile.var.id} is in {memory}, which only the cube reads; push a tile in "
                            f"Vec, Mat or Acc", loc)
    pipe = st.pipe(direction, pid)
    mine = pipe.init.get(side)
    if mine is None:
        raise compile_error(f"{op}: the {direction} pipe id={pid} is used before it is initialized on the {side} "
                            f"side (call {_INIT[side]}(dir_mask={1 if direction == C2V else 2}, slot_size=...) "
                            f"first)", loc)
    if _nbytes(tile) > mine["slot_size"]:
        raise compile_error(f"{op}: tile %{tile.var.id} ({tile.var.type}) is {_nbytes(tile)} bytes, larger than "
                            f"the pipe's slot_size={mine['slot_size']} (the {direction} pipe id={pid})", loc)
    entry = {"tile": tile, "split": split, "loc": loc, "block": t.blocks[-1], "tensor": None,
             "task": t.next_task - 1}
    if st.owner == "group" and not st.merged:
        entry["tensor"] = _through_gm(t, tile, op, loc)
    pipe.queue.append(entry)


def _through_gm(t, tile: Tile, op: str, loc):
    """A Group member's push: the tile stored to a tensor of its own, which the consumer task loads."""
    from .._signature import INOUT
    from ..ir._nodes import Param
    from ._memory import store
    from ._program import add_task_access
    from ._tracer import TensorArg

    if t.frames[-1] != "at":
        raise PtoNotSupported(f"{loc}: {op} inside a loop or a branch of a Group member: the sim runs each member "
                              f"as a task of its own and hands the tile over once; push at the top of the function")
    name = f"pipe{len(t.scratch)}"
    while name in t.params:
        name += "_"
    p = Param(name, INOUT, tuple(tile.shape), tile.var.type.dtype)
    t.params[name] = p
    t.scratch.append(p)
    ten = TensorArg(p)
    source = tile
    if tile.var.type.memory == "Mat":  # a store reads Vec or Acc
        from ._memory import move

        source = move(tile, target_memory="Vec")
    store(source, [0] * len(tile.shape), ten)
    add_task_access(t, name, "w", tile.shape)
    return ten


def _pop(direction: str, shape, dtype, split, lane_stride, pid) -> Tile:
    op = _POP[direction]
    side = _CONSUMER[direction]
    t, st, loc = _state(op, side)
    split = _int_param(op, "split", split, 0, 4 if direction == C2V else 2, loc)
    if lane_stride is not None:
        _int_param(op, "lane_stride", lane_stride, 1, None, loc)
    pid = _pipe_id(op, pid, loc)
    pipe = st.pipe(direction, pid)
    if side not in pipe.init:
        raise compile_error(f"{op}: the {direction} pipe id={pid} is used before it is initialized on the {side} "
                            f"side (call {_INIT[side]}(dir_mask={1 if direction == C2V else 2}, slot_size=...) "
                            f"first)", loc)
    if not pipe.queue and st.merged is not None:
        if t.frames[-1] != "at":
            raise PtoNotSupported(f"{loc}: {op} inside a loop or a branch, waiting for a push of the peer member: "
                                  f"the sim traces a Group whose members feed each other as one task, switching "
                                  f"between them only at the top of their bodies")
        st.merged.wait_for_peer(lambda: bool(pipe.queue), f"{op} at {loc}")
    if not pipe.queue:
        if st.owner == "group":
            raise _Empty()
        raise compile_error(f"{op}: nothing is pushed on the {direction} pipe id={pid} before this pop (each pop "
                            f"takes the tile of one {_PUSH[direction]} on the same pipe, earlier in the kernel)",
                            loc)
    entry = pipe.queue[0]
    pushed: Tile = entry["tile"]
    if entry["split"] != split:
        raise compile_error(f"{op}: split={split} disagrees with split={entry['split']} of the "
                            f"{_PUSH[direction]} at {entry['loc']} it pops", loc)
    if shape is not None and tuple(shape) != tuple(pushed.shape):
        raise compile_error(f"{op}: shape={list(shape)} disagrees with the tile pushed at {entry['loc']} "
                            f"({pushed.var.type}): a push of the wrong shape for the pipe", loc)
    if dtype is not None:
        from .._dtypes import as_dtype

        try:
            d = as_dtype(dtype)
        except Exception:
            raise compile_error(f"{op}: dtype must be a pl dtype, got {dtype!r}", loc) from None
        if d != pushed.var.type.dtype:
            raise compile_error(f"{op}: dtype={d.name} disagrees with the tile pushed at {entry['loc']} "
                                f"({pushed.var.type}): a push of the wrong dtype for the pipe", loc)
    if entry["tensor"] is None and entry["block"] is not t.blocks[-1]:
        raise compile_error(f"{op}: the pop and the {_PUSH[direction]} at {entry['loc']} are in different loop "
                            f"bodies or branches; pair them in the same one, so each push has its pop", loc)
    if entry["tensor"] is not None and t.frames[-1] != "at":
        raise PtoNotSupported(f"{loc}: {op} inside a loop or a branch of a Group member: the sim runs each member "
                              f"as a task of its own and hands the tile over once; pop at the top of the function")
    pipe.queue.pop(0)
    from ._memory import load, move

    if entry["tensor"] is None:
        out = move(pushed, target_memory=_LANDING[side])
    else:
        from ._program import add_task_access

        ten = entry["tensor"]
        out = load(ten, [0] * len(pushed.shape), list(pushed.shape), target_memory=_LANDING[side])
        add_task_access(t, ten.name, "r", pushed.shape)
        st.edges.append((t.next_task - 1, entry["task"]))  # an edge even where none is inferred (manual scope)
    st.popped[out.var.id] = {"direction": direction, "id": pid, "split": split, "loc": loc,
                             "block": t.blocks[-1]}
    return out


def _free(direction: str, tile, split, pid) -> None:
    op = _FREE[direction]
    side = _CONSUMER[direction]
    t, st, loc = _state(op, side)
    if not isinstance(tile, Tile):
        raise compile_error(f"{op}: tile must be the tile a {_POP[direction]} returned, got {tile!r}", loc)
    pop = st.popped.get(tile.var.id)
    if pop is None or pop["direction"] != direction:
        other = next((d for d in (C2V, V2C) if pop is not None and pop["direction"] == d), None)
        why = (f"it was popped by {_POP[other]}; release it with {_FREE[other]}" if other else
               f"it is not a tile a {_POP[direction]} returned in this function, or it was released already")
        raise compile_error(f"{op}: tile %{tile.var.id}: {why}", loc)
    if pid is not None and _pipe_id(op, pid, loc) != pop["id"]:
        raise compile_error(f"{op}: id={pid} disagrees with id={pop['id']} of the pop at {pop['loc']}", loc)
    if split is not None and split != pop["split"]:
        raise compile_error(f"{op}: split={split!r} disagrees with split={pop['split']} of the pop at "
                            f"{pop['loc']} (leave split out: the tfree takes its pop's)", loc)
    if pop["block"] is not t.blocks[-1]:
        raise compile_error(f"{op}: the tfree and its pop at {pop['loc']} are in different loop bodies or "
                            f"branches; release the slot in the one that popped it", loc)
    del st.popped[tile.var.id]


def tpush_to_aiv(tile, *, split: int, lane_stride: int | None = None, id: int | None = None,  # noqa: A002
                 span=None) -> None:
    """Push a tile from the cube to the vector cores (the consumer pops it with ``pl.tpop_from_aic``).

    ``split`` (0 whole, 1/2 halved up-down / left-right between the two
    vector lanes, 3/4 the same over an odd extent) and ``id`` must match the
    pop and its ``tfree``; the tile must fit the pipe's ``slot_size``.
    """
    _push(C2V, tile, split, lane_stride, id)


def tpush_to_aic(tile, *, split: int, id: int | None = None, span=None) -> None:  # noqa: A002
    """Push a tile from a vector core to the cube (popped with ``pl.tpop_from_aiv``); ``split`` 0, 1 or 2."""
    _push(V2C, tile, split, None, id)


def tpop_from_aic(*, shape=None, dtype=None, split: int = 0, lane_stride: int | None = None,
                  id: int | None = None, span=None) -> Tile:  # noqa: A002
    """Pop, on a vector core, the oldest tile the cube pushed on the pipe: a tile in ``Vec``.

    ``shape`` / ``dtype``, when given, must be the pushed tile's.  Release
    the slot with ``pl.tfree_to_aic`` once the tile is consumed.
    """
    return _pop(C2V, shape, dtype, split, lane_stride, id)


def tpop_from_aiv(*, shape=None, dtype=None, split: int = 0, id: int | None = None, span=None) -> Tile:  # noqa: A002
    """Pop, on the cube, the oldest tile a vector core pushed on the pipe: a tile in ``Mat``; release it with ``pl.tfree_to_aiv``."""
    return _pop(V2C, shape, dtype, split, None, id)


def tfree_to_aic(tile, span=None, *, split: int | None = None, id: int | None = None) -> None:  # noqa: A002
    """Release the slot of a tile ``pl.tpop_from_aic`` returned, back to the cube (its producer)."""
    _free(C2V, tile, split, id)


def tfree_to_aiv(tile, span=None, *, split: int | None = None, id: int | None = None) -> None:  # noqa: A002
    """Release the slot of a tile ``pl.tpop_from_aiv`` returned, back to the vector core (its producer)."""
    _free(V2C, tile, split, id)


# ---- the end of a function, and Group functions ----------------------------------------------------------------


def _check_closed(st: _State, loc, pops: bool = True, pushes: bool = True) -> None:
    if pops and st.popped:
        pop = next(iter(st.popped.values()))
        d = pop["direction"]
        raise compile_error(f"{_POP[d]} at {pop['loc']} is never released: call {_FREE[d]}(tile) once the tile "
                            f"is consumed (on the device the slot leaks and the producer stalls when the ring "
                            f"fills)", loc)
    if pushes:
        for (d, pid), pipe in st.pipes.items():
            if pipe.queue:
                e = pipe.queue[0]
                raise compile_error(f"{_PUSH[d]} at {e['loc']} has no matching {_POP[d]} on the {d} pipe "
                                    f"id={pid}: push and pop must be paired", loc)


def function_closed(t, loc) -> None:
    """The InCore function (or region) being traced ends: every push popped, every pop released."""
    st = (getattr(t, "crosscore", None) or {}).pop(_task_owner(t), None)
    if st is not None:
        _check_closed(st, loc)
    group = getattr(t, "crosscore_group", None)
    if group is not None and _kernel_side(t) is not None:
        _check_closed(group, loc, pushes=False)


class _Deferred:
    """A Group member's call whose task is traced once its pops have their pushes (see :func:`group_call`)."""

    def __init__(self, kernel, args, kwargs, loc):
        self.kernel, self.args, self.kwargs, self.loc = kernel, args, kwargs, loc
        self.result = None


class _Members:
    """``self`` inside a Group function: its AIC / AIV member calls, recorded."""

    def __init__(self, me, calls: list):
        self._me, self._calls = me, calls

    def __getattr__(self, name):
        target = getattr(self._me, name)
        from ._program import _Kernel

        if not isinstance(target, _Kernel):
            return target

        def call(*args, **kwargs):
            d = _Deferred(target, args, kwargs, user_loc())
            self._calls.append(d)
            return d

        return call


def _resolve(value):
    if isinstance(value, _Deferred):
        return value.result
    if isinstance(value, tuple):
        return tuple(_resolve(v) for v in value)
    return value


class Group:
    """``self.group(...)`` in an orchestration: a ``pl.FunctionType.Group`` function's members, each a task."""

    def __init__(self, me, fn):
        self.me, self.fn = me, fn

    def __call__(self, *args, deps=None):
        from ._branch import traced_fn

        t = current(f"self.{self.fn.name}")
        loc = user_loc()
        if getattr(t, "crosscore_group", None) is not None or "at" in t.frames or \
                getattr(t, "func_attrs", None) is not None:
            raise compile_error(f"self.{self.fn.name}(...): a Group function is called from the orchestration",
                                loc)
        calls: list[_Deferred] = []
        result = traced_fn(self.fn.fn)(_Members(self.me, calls), *args)
        state = _State("group")
        t.crosscore_group = state
        try:
            pending = list(calls)
            while pending:
                progressed = False
                for d in list(pending):
                    snap = state.snapshot()
                    marks = (t.next_task, len(t.scratch), dict(t.params), len(t.blocks[-1]), t.next_var,
                             t.next_index)
                    try:
                        kwargs = dict(d.kwargs)
                        if deps is not None:  # what the Group waits for, each member waits for
                            kwargs["deps"] = [*deps, *(kwargs.get("deps") or ())]
                        d.result = d.kernel.call(d.args, loc=d.loc, **kwargs)
                    except _Empty:
                        state.restore(snap)
                        t.next_task, n_scratch, t.params, n_stmts, t.next_var, t.next_index = marks
                        (getattr(t, "crosscore", None) or {}).pop(t.next_task, None)
                        del t.scratch[n_scratch:]
                        del t.blocks[-1][n_stmts:]
                        continue
                    pending.remove(d)
                    progressed = True
                if not progressed:  # the members feed each other: one task, switching between them
                    _merged(t, self.fn.name, pending, state, deps, loc)
                    pending = []
            _check_closed(state, loc, pops=False)
            _add_edges(t.blocks[-1], state.edges)
        finally:
            t.crosscore_group = None
        return _resolve(result)


def _add_edges(block: list, edges) -> None:
    """Make each consumer task of a Group wait for the producers it pops from (``Scope.deps``)."""
    from dataclasses import replace

    from ..ir._nodes import Scope

    wanted: dict[int, list[int]] = {}
    for consumer, producer in edges:
        wanted.setdefault(consumer, []).append(producer)
    for i, s in enumerate(block):
        if isinstance(s, Scope) and s.task in wanted:
            extra = tuple(p for p in dict.fromkeys(wanted[s.task]) if p not in s.deps)
            if extra:
                block[i] = replace(s, deps=(*s.deps, *extra))


class _Merged:
    """Members of a Group traced as one task, each in a thread of its own, one running at a time.

    A member runs until it pops from an empty pipe (at the top of its body),
    then the next member that can run does; the task's statements are the
    members' in the order they were traced, an order in which every pop
    follows its push.  Members that all wait are a compile error.
    """

    def __init__(self, t, members, loc):
        self.t, self.loc = t, loc
        self.cond = threading.Condition()
        self.running = None  # index of the member allowed to run
        self.waiting: dict[int, tuple] = {}  # member index -> (ready predicate, what it waits at)
        self.done: set[int] = set()
        self.error = None
        self.members = members

    def wait_for_peer(self, ready, what: str) -> None:
        me = _lane.index
        with self.cond:
            self.waiting[me] = (ready, what)
            self._pass_on()
            self.cond.wait_for(lambda: self.running == me or self.error is not None)
            if self.error is not None:
                raise _Abandoned()
            del self.waiting[me]

    def _pass_on(self) -> None:
        """Choose the next member to run (cond held): a waiting one whose pipe now has a tile, else a fresh one."""
        for i in range(len(self.members)):
            if i in self.done:
                continue
            if i in self.waiting:
                if self.waiting[i][0]():
                    self.running = i
                    self.cond.notify_all()
                    return
            elif i not in self.started:
                self.running = i
                self.started.add(i)
                self.cond.notify_all()
                return
        if len(self.done) < len(self.members):
            whats = "; ".join(w for _, w in self.waiting.values())
            self.error = compile_error(f"the members of this Group wait for each other: {whats} (no member pushes "
                                       f"what the others pop next)", self.loc)
        self.running = None
        self.cond.notify_all()

    def run(self, bodies) -> None:
        from ._tracer import _state

        self.started = {0}
        self.running = 0
        threads = []

        def member(i, side, body):
            _state.tracer = self.t
            _lane.side, _lane.index = side, i
            try:
                with self.cond:
                    self.cond.wait_for(lambda: self.running == i or self.error is not None)
                    if self.error is not None:
                        return
                body()
            except _Abandoned:
                return
            except BaseException as exc:  # noqa: BLE001 - handed to the tracing thread
                with self.cond:
                    if self.error is None:
                        self.error = exc
                    self.running = None
                    self.cond.notify_all()
                return
            finally:
                _state.tracer = None
                _lane.side = _lane.index = None
            with self.cond:
                self.done.add(i)
                self._pass_on()

        for i, (side, body) in enumerate(bodies):
            th = threading.Thread(target=member, args=(i, side, body), name=f"pypto-group-member-{i}")
            threads.append(th)
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        if self.error is not None:
            raise self.error


class _Abandoned(Exception):
    """A merged member gives up: another member failed or all wait."""


def _merged(t, group_name: str, pending, state: _State, deps, loc) -> None:
    """Trace the Group's remaining members as one task: their kernel calls become one call of a joined body."""
    from ._program import _annotation, call_task

    names, anns, args, spans, sides = [], {}, [], [], []
    for k, d in enumerate(pending):
        fn = d.kernel.fn
        if d.kwargs:
            raise PtoNotSupported(f"{d.loc}: self.{fn.name}(..., {', '.join(d.kwargs)}=) in a Group whose members "
                                  f"feed each other: the sim traces them as one task, which takes no per-member "
                                  f"keywords")
        own = fn.param_names()
        raw = fn.annotations()
        start = len(names)
        for n in own:
            key = f"m{k}_{n}"
            names.append(key)
            anns[key] = _annotation(raw.get(n), f"{fn.name}: parameter {n!r}", fn.loc)
        args.extend(d.args)
        spans.append((start, len(names)))
        sides.append(fn.type.value if fn.type.value in ("AIC", "AIV") else None)
    merged = _Merged(t, pending, loc)
    state.merged = merged

    def joined(self_arg, *proxies):
        from ._branch import traced_fn

        bodies = []
        for d, (a, b), side in zip(pending, spans, sides):
            fn = traced_fn(d.kernel.fn.fn)
            part = proxies[a:b]
            bodies.append((side, (lambda fn=fn, part=part: fn(self_arg, *part))))
        merged.run(bodies)
        _check_closed(state, loc, pushes=False)

    name = "_".join(d.kernel.fn.name for d in pending)
    try:
        call_task(t, name, joined, pending[0].kernel.prog, names, anns, args, loc=loc, fn_loc=loc, deps=deps)
    finally:
        state.merged = None
