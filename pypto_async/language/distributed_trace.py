"""How a per-device ``@pl.jit`` function of a multi-chip program is traced: one rank at a time, cut at its messages.

A ``@pl.jit.host`` orchestrator dispatches ``@pl.jit`` functions to ranks
(``per_rank(..., device=r)``).  Each such dispatch is traced here for its
rank: ``pld.rank(ctx)`` and ``pld.nranks(ctx)`` are that rank's numbers (Python
ints at trace time), and a ``pl.range`` with int bounds and no
``init_values`` runs as a Python loop (unrolled), so ``if peer != my_rank:``
is decided while tracing.  Each cross-rank operation (``pld.tile.remote_load``,
``remote_store``, ``pld.tensor.put`` / ``get`` / ``barrier``,
``pld.system.notify`` / ``wait``) leaves a :class:`Cut` in the trace, and
:func:`split` cuts the traced program there into *segments*: ordinary
single-chip programs, compiled and launched as any other, with the
operation between two of them.  :mod:`pypto_async.runtime.distributed_runner`
queues the segments and carries out the operations between them with the
driver's peer copies.

A tile does not live across a cut; a tile that a cross-rank operation reads
(``remote_store``) is stored by the segment before the cut into a staging
tensor, and one it produces (``remote_load``) is loaded by the segment after
it from a mirror tensor the peer copy fills.  Both are extra parameters of
the segments (:attr:`RankTrace.extra`), allocated per dispatch by the runner.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field

from .._signature import IN, INOUT, OUT
from ..errors import PtoCompileError, PtoNotSupported
from ..ir._diag import compile_error
from ..ir._nodes import Assign, IConst, IRead, Load, Loc, Param, Scope, Store
from ..ir._program import Program
from ..ir._rewrite import reads
from .._scalars import is_int
from ._tracer import ScalarArg, TensorArg, current, user_loc

__all__ = ["Cut", "CommOp", "RankTrace", "rank_tracing", "active_rank", "cut", "split", "Segmented"]

_state = threading.local()


@dataclass(frozen=True)
class CommOp:
    """One cross-rank operation of a rank's trace.

    ``kind`` is ``"barrier"``, ``"remote_load"``, ``"remote_store"``,
    ``"put"``, ``"get"``, ``"notify"`` or ``"wait"``; ``tensor`` the window
    parameter it addresses (the signal of a barrier, notify and wait, the
    destination of put and get); ``src`` the other window of put / get;
    ``staging`` / ``mirror`` the extra parameter a remote_store reads / a
    remote_load fills; ``peer`` the other rank; ``offsets`` / ``shape`` the
    box of a remote op or the cell of a signal op (for put and get: the
    box of ``tensor``, the destination); ``src_offsets`` the box of ``src``
    (put and get); ``chunks`` the ``(rows, cols)`` of one chunk of a put or
    get's transfer, viewed as ``[rows, cols]`` (``cols`` its last dimension);
    ``value`` the notified value or the expected one; ``mode`` ``"set"``,
    ``"add"``, ``"eq"`` or ``"ge"`` (a collective's: its reduction).
    """

    kind: str
    tensor: str
    peer: int | None = None
    src: str | None = None
    staging: str | None = None
    mirror: str | None = None
    offsets: tuple[int, ...] = ()
    shape: tuple[int, ...] = ()
    value: int | float = 0
    mode: str = "set"
    loc: Loc | None = field(default=None, compare=False)
    src_offsets: tuple[int, ...] = ()
    chunks: tuple[int, int] = (0, 0)


@dataclass(frozen=True)
class Cut:
    """A marker statement: the segment before it ends, ``op`` runs, the next begins."""

    op: CommOp
    loc: Loc | None = field(default=None, compare=False)


class RankTrace:
    """The rank a per-device function is traced for, and what its cross-rank operations added."""

    def __init__(self, rank: int, world: int, windows: set[str], scalars: dict | None = None):
        self.rank = rank
        self.world = world
        self.windows = set(windows)  # the parameters bound to window buffers (pld.DistributedTensor)
        #: the dispatch's int scalar arguments by parameter name: a rank each dispatch fixes (PyPTO's peer)
        self.scalars = dict(scalars or {})
        self.extra: list[Param] = []  # staging / mirror tensors, in creation order
        self.ops: list[CommOp] = []

    def new_param(self, tracer, kind: str, shape, dtype, direction: str) -> TensorArg:
        """Add a tensor parameter to the program `tracer` traces; return its proxy."""
        name = f"__pld_{kind}{len(self.extra)}"
        p = Param(name, direction, tuple(shape), dtype)
        self.extra.append(p)
        tracer.params[name] = p
        tracer.param_list.append(p)  # the list the tracer's program takes its parameters from
        return TensorArg(p)


class rank_tracing:
    """Make `trace` the rank being traced for the duration of a ``with``."""

    def __init__(self, trace: RankTrace):
        self.trace = trace

    def __enter__(self) -> RankTrace:
        _state.rank = self.trace
        return self.trace

    def __exit__(self, *exc) -> None:
        _state.rank = None


def active_rank() -> RankTrace | None:
    """The rank being traced, or None outside a per-device trace of a multi-chip program."""
    return getattr(_state, "rank", None)


def _fixed_op(name: str, swap: bool = False):
    import operator

    fn = getattr(operator, name)
    base = getattr(ScalarArg, f"__r{name}__" if swap and name not in _COMPARE else f"__{name}__", None)

    def method(self, other):
        if isinstance(other, FixedScalar):
            other = other.value
        if is_int(other) and not isinstance(other, bool):
            return fn(int(other), self.value) if swap else fn(self.value, int(other))
        return base(self, other) if base is not None else NotImplemented  # an index, a runtime scalar

    return method


_COMPARE = ("eq", "ne", "lt", "le", "gt", "ge")


class FixedScalar(ScalarArg):
    """An integer scalar parameter whose value this rank's host dispatch fixed (PyPTO's ``my_rank``).

    It is still the kernel's scalar parameter (passed when the segment
    launches, as any scalar), but with ints it computes ints, so
    ``if p != my_rank:`` is decided while tracing and ``(my_rank + 1) % n``
    can be a cross-rank op's peer, as ``pld.rank(ctx)`` is.
    """

    def __init__(self, param, value: int):
        super().__init__(param)
        self.value = int(value)

    def __index__(self) -> int:
        return self.value

    __int__ = __index__

    def __bool__(self) -> bool:
        return self.value != 0

    def __repr__(self) -> str:
        return f"<scalar {self.name} = {self.value} (this rank's)>"

    __hash__ = object.__hash__


for _name in ("add", "sub", "mul", "floordiv", "mod"):
    setattr(FixedScalar, f"__{_name}__", _fixed_op(_name))
    setattr(FixedScalar, f"__r{_name}__", _fixed_op(_name, True))
for _name in _COMPARE:
    setattr(FixedScalar, f"__{_name}__", _fixed_op(_name))


def scalar_proxy(p):
    """The proxy of scalar parameter `p` in a trace: in a rank's trace, a :class:`FixedScalar` of its value.

    A per-rank trace is already specialized to its rank (``pld.rank`` is an
    int); an integer scalar the dispatch gave an int is fixed the same way.
    """
    r = active_rank()
    if r is not None and p.name in r.scalars and not p.dtype.is_float and p.dtype.name != "BOOL":
        return FixedScalar(p, r.scalars[p.name])
    return ScalarArg(p)


def unrolls_ranges() -> bool:
    """Whether ``pl.range`` with int bounds runs as a Python loop (inside a per-rank trace)."""
    from .distributed_host import host_active

    return active_rank() is not None or host_active() is not None


def require_rank(op: str) -> RankTrace:
    """The rank being traced, or a located error: `op` belongs in a per-device function of a host program."""
    r = active_rank()
    if r is None:
        raise compile_error(f"{op} is a cross-rank operation: call it in a @pl.jit (or @pl.jit.incore) function "
                            f"that a @pl.jit.host orchestrator dispatches (per_rank(..., device=r))", user_loc())
    return r


def cut(op: CommOp) -> None:
    """Record `op` in the program being traced, where its segment ends (see the module doc)."""
    t = current(f"pld {op.kind}")
    if any(frame != "at" for frame in t.frames):
        raise compile_error(
            f"pld {op.kind}: a cross-rank operation runs between two launches of the rank's program, so it "
            f"cannot sit inside a traced loop or a runtime if (open here: {', '.join(t.frames)}); give the "
            f"loop int bounds (it is then unrolled) or decide the branch with Python values", op.loc)
    require_rank(f"pld {op.kind}").ops.append(op)
    t.append(Cut(op, op.loc))


def _contains_cut(body) -> bool:
    for s in body:
        if isinstance(s, Cut):
            return True
        inner = getattr(s, "body", None) or getattr(s, "members", None)
        if isinstance(inner, tuple) and _contains_cut(inner):
            return True
        for name in ("then", "orelse", "else_"):
            inner = getattr(s, name, None)
            if isinstance(inner, tuple) and _contains_cut(inner):
                return True
    return False


def _defined(body) -> set[int]:
    out: set[int] = set()
    for s in body:
        if isinstance(s, Assign):
            out.add(s.var.id)
        if dataclasses.is_dataclass(s):
            for f in dataclasses.fields(s):
                v = getattr(s, f.name)
                if isinstance(v, tuple) and v and dataclasses.is_dataclass(v[0]):
                    out |= _defined(v)
    return out


@dataclass(frozen=True)
class Segmented:
    """A rank's traced program cut at its cross-rank operations: ``steps`` alternate programs and ops."""

    name: str
    program: Program  # the whole trace (markers in it), for printing
    steps: tuple  # of Program (a segment) or CommOp, in order


def split(program: Program, extra: list[Param]) -> Segmented:
    """Cut `program` at its :class:`Cut` markers into single-chip segments (see the module doc).

    Raises
    ------
    PtoNotSupported
        If a tile or a ``pl.create_tensor`` tensor would live across a cut.
    """
    items: list = []
    for s in program.body:
        if isinstance(s, Cut):
            items.append(s.op)
        elif isinstance(s, Scope) and any(isinstance(x, Cut) for x in s.body):
            part: list = []
            for x in s.body:
                if isinstance(x, Cut):
                    if part:
                        items.append(dataclasses.replace(s, body=tuple(part)))
                    items.append(x.op)
                    part = []
                else:
                    part.append(x)
            if part:
                items.append(dataclasses.replace(s, body=tuple(part)))
        elif _contains_cut((s,)):
            raise PtoCompileError(f"{program.name}: a cross-rank operation inside a nested block")
        else:
            items.append(s)
    steps: list = []
    run: list = []

    def flush():
        if run:
            steps.append(list(run))
            run.clear()

    for it in items:
        if isinstance(it, CommOp):
            flush()
            steps.append(it)
        else:
            run.append(it)
    flush()
    n_seg = sum(1 for s in steps if isinstance(s, list))
    if n_seg > 1 and program.scratch:
        raise PtoNotSupported(f"{program.name}: a pl.create_tensor tensor lives only inside one launch, and this "
                              f"program is cut into {n_seg} launches by its cross-rank operations; pass the tensor "
                              f"as a parameter instead")
    spills = _spill(program.name, steps)
    params = (*program.params, *(p for p in extra if p not in program.params), *spills)
    out, k = [], 0
    for s in steps:
        if isinstance(s, CommOp):
            out.append(s)
            continue
        body = tuple(s)
        both = _walk(body, IRead) & _walk(body, Store)
        if both:
            raise PtoNotSupported(
                f"{program.name}: pl.read of {', '.join(sorted(both))} in the same launch that stores to it (a "
                f"runtime scalar may be read before the store); put a cross-rank operation (a barrier, a wait) "
                f"between them")
        out.append(Program(f"{program.name}_s{k}", params, body, program.block_num, program.ret,
                           scratch=program.scratch, manual_dep=program.manual_dep))
        k += 1
    return Segmented(program.name, program, tuple(out))


def _spill(name: str, steps: list) -> list[Param]:
    """Carry each tile a later segment reads from the segment that made it, through a tensor; return those.

    The segment that defines the tile stores it (at the end of its last
    region) into a spill tensor, an extra parameter; the segment that reads
    it loads it back (at the start of its first region).  Only tiles that
    live in Vec or Mat are carried; another raises PtoNotSupported.
    """
    segs = [i for i, s in enumerate(steps) if isinstance(s, list)]
    made: dict[int, tuple[int, object]] = {}  # tile id -> (step index, its Var)
    spills: dict[int, Param] = {}
    for i in segs:
        body = tuple(steps[i])
        need = reads(body) - _defined(body)
        for vid in sorted(need):
            if vid not in made:
                raise PtoCompileError(f"{name}: tile %{vid} is read before it is made")
            j, var = made[vid]
            tt = var.type
            if tt.memory not in ("Vec", "Mat") or tt.valid is not None:
                raise PtoNotSupported(
                    f"{name}: tile %{vid} ({tt}) would live across a cross-rank operation (each one ends a launch of "
                    f"the rank's program); store it to a tensor before the operation and load it after")
            p = spills.get(vid)
            if p is None:
                p = spills[vid] = Param(f"__pld_spill{vid}", INOUT, tuple(tt.shape), tt.dtype)
                _append_to_last_scope(steps[j], Store(var, p.name, tuple(IConst(0) for _ in tt.shape)))
            load = Assign(var, Load(p.name, tuple(IConst(0) for _ in tt.shape), tuple(tt.shape), tt.memory))
            _prepend_to_first_scope(steps[i], load)
        for vid, var in _defined_vars(body).items():
            made[vid] = (i, var)
    return list(spills.values())


def _walk(x, kind) -> set[str]:
    """The ``param`` of every `kind` node (IRead or Store) anywhere inside `x`."""
    out: set[str] = set()
    if isinstance(x, kind):
        out.add(x.param)
    if isinstance(x, tuple):
        for e in x:
            out |= _walk(e, kind)
    elif dataclasses.is_dataclass(x) and not isinstance(x, (Loc, Param)):
        for f in dataclasses.fields(x):
            v = getattr(x, f.name)
            if isinstance(v, tuple) or dataclasses.is_dataclass(v):
                out |= _walk(v, kind)
    return out


def _defined_vars(body) -> dict:
    out: dict = {}
    for s in body:
        if isinstance(s, Assign):
            out[s.var.id] = s.var
        if isinstance(s, Scope):
            out.update(_defined_vars(s.body))
    return out


def _append_to_last_scope(seg: list, stmt) -> None:
    for k in range(len(seg) - 1, -1, -1):
        if isinstance(seg[k], Scope):
            seg[k] = dataclasses.replace(seg[k], body=(*seg[k].body, stmt))
            return
    raise PtoNotSupported("a tile made outside a region cannot live across a cross-rank operation")


def _prepend_to_first_scope(seg: list, stmt) -> None:
    for k, s in enumerate(seg):
        if isinstance(s, Scope):
            seg[k] = dataclasses.replace(s, body=(stmt, *s.body))
            return
    raise PtoNotSupported("a tile read outside a region cannot live across a cross-rank operation")


def window_param(tracer, tensor, op: str, loc) -> Param:
    """The window parameter `tensor` stands for (a ``pld.DistributedTensor`` argument), or a located error."""
    rank = require_rank(op)
    if not isinstance(tensor, TensorArg) or tensor.name not in rank.windows:
        raise compile_error(f"{op}: expected a pld.DistributedTensor (a window buffer view passed by the host "
                            f"orchestrator), got {tensor!r}", loc)
    if getattr(tensor, "origin", None) is not None and any(
            getattr(o, "value", 0) != 0 for o in tensor.origin):
        raise compile_error(f"{op}: pass the whole window, not a window of it", loc)
    return tracer.params[tensor.name]


__all__ += ["unrolls_ranges", "require_rank", "window_param", "IN", "OUT", "INOUT"]
