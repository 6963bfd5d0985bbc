"""Graph: a captured step, replayed with new bindings in one driver call.

:meth:`Graph._build` turns a finished :class:`~._capture.Capture` into the
driver's graph (``native/src/graph.c``): each recorded command is added on
its stream slot, each use of an input becomes a patch, and the graph is
instantiated (validated, its events created).  :meth:`Graph.replay` then
checks the bindings (nothing is queued on error), reserves one token per
command plus the replay's own, and makes one ``pto_graph_replay`` call.

Tokens.  A replay with token ``T`` maps only ``T`` to its :class:`Launch`
(a :class:`_Replay`).  The driver gives command ``i`` the tag ``T + 1 + i``,
the replay's own commands (staging copies, ordering) ``T + 1 + n``, and the
waits ordering it after other streams' work ``T + 2 + n``; a
command reports only when it is its stream's first failure, under its tag,
which nobody owns: :func:`~._complete.on_failure` remembers its error, and
the replay's own record, a dependency failure naming that tag as its cause,
fails the Launch with an error that names the node (:meth:`_Replay._fail`).

Host-array bindings.  An input bound to a host array is copied by
direction inside the replay: a copy whose side it is copies to or from the
array directly; an input a launch uses goes through a device buffer the
graph owns (allocated at the first such replay), copied in before the
graph's commands if anything reads it and out after them if anything
writes it.  Replays of one graph run one after another, so one buffer per
input serves them all.

Data hazards.  Edges between the graph's own commands were derived at
capture (:mod:`._capture_hazards`) and are part of it.  A replay is ordered
against eager work and other replays (:mod:`._hazards`) as one access per
DeviceTensor it touches, those it uses directly and those bound to its
inputs, with the union of that tensor's directions over the graph, on its
origin stream at its own token.  Where every such tensor has joined the
origin already and ordering is automatic (no sanitizer, no manual region,
no trace of graph tags), the driver does it inside the replay call
(``pto_graph_replay_ordered``: the tensors used directly were declared at
build, ``pto_graph_add_access``); it declines, with nothing queued, an edge
only this side can queue (from a held or closed stream, to an exact
point), and the replay is ordered here instead (:meth:`Graph._order`), as
is any other replay.  That is exact
enough: the replay starts on its origin, every fork joins the origin before
the replay's last command (the notify of its token), and the token stays in
flight until all of it ended.  What the capture could not see, an input
bound to a tensor the graph uses directly or two inputs bound to one, it
could not order: such a replay is refused unless all of them only read
(:meth:`Graph._refuse_aliases`).  In a trace, the waits the capture
inferred are marked as such (``graph_tags`` of :mod:`._recorder`).
"""

from __future__ import annotations

from .._driver import PTO_CMD_D2D, check, ffi, lib
from .._dtypes import holds
from ..errors import (
    PtoArgumentError,
    PtoCaptureError,
    PtoClosedError,
    PtoError,
    PtoForeignTensorError,
)
from ._args import check_init, host_array
from ._capture import COPY, LAUNCH, RECORD, WAIT, WAIT_EXT
from ._complete import observe, service
from ._context import refuse
from ._hazards import manual_workers, order, regions_open
from ._launch import Launch, mark_turn
from ._memory import _dealloc_stream
from ._queue import F_DATA, F_LAST, QUEUED
from ._state import OPEN
from ._stream import accept
from ._submit import hold, note_used, overflowed
from ._tensor import DeviceTensor, freed_error
from ._wait import block_until

__all__ = ["Graph"]

_replay_fn = lib.pto_graph_replay  # bound once: every replay calls it
_replay_ordered = lib.pto_graph_replay_ordered  # the same, ordered by the driver's hazard table
_DECLINED = lib.PTO_HZ_DECLINED
_NULL = ffi.NULL
_USE = {"r": 1, "w": 2, "rw": 3}  # PTO_GRAPH_READ / PTO_GRAPH_WRITE
_SERVICE_EVERY = 256  # tokens between the completion services replays run inline (at least)


class _AfterHeld:
    """A FIFO gate: open once the given entries have left their streams' FIFOs."""

    __slots__ = ("pending",)

    def __init__(self, pending: list):
        self.pending = pending  # (stream, its last FIFO entry when the replay was held)

    @property
    def _entered(self) -> bool:
        self.pending = [(s, e) for s, e in self.pending if e in s._fifo]
        return not self.pending


class _Replay(Launch):
    """The Launch of one replay: its failure names the graph's node that failed."""

    __slots__ = ("_graph", "_base")

    _withdrawable = False  # once in the driver, Launch.cancel declines (held on the host, it withdraws)

    def cancel(self) -> bool:
        """A replay cannot be withdrawn (its commands span streams): returns False."""
        return False

    def _fail(self, exc) -> None:
        if self._exc is None:
            self._exc = self._graph._name_failure(self, exc)
        self._remaining -= 1
        if not self._remaining:
            self._finish()


class Graph:
    """A recorded step (from :meth:`ChipWorker.capture`): replay it with new bindings.

    ``len(graph)`` is its command count; :attr:`inputs` the declared
    inputs.  :meth:`close` it (or use ``with``) to free what it owns: the
    tensors allocated inside the capture, the staging buffers of host
    bindings, and the hold on the DeviceTensors it uses directly (freeing
    one of those while the graph lives is refused).  Closing the worker
    closes its graphs.
    """

    def __init__(self, *args, **kwargs):
        raise TypeError("Graph cannot be constructed directly; use ChipWorker.capture()")

    @classmethod
    def _build(cls, cap) -> Graph:
        worker = cap._worker
        g = cls.__new__(cls)
        g._worker = worker
        g._name = cap.name
        g._label = f"graph {cap.name!r} replay"
        g._origin = cap._origin
        g._streams = tuple(cap._streams)
        g._rest = g._streams[1:]  # the streams a replay forks to, whatever its origin
        g._inputs = tuple(cap._inputs)
        g._static = tuple(cap._static.values())
        # The DeviceTensors used directly, each with the union of its directions: what a replay is
        # ordered by, as one access each (bound DeviceTensors by their input's directions).
        g._touch = tuple((t, name, reads, writes) for t, name, reads, writes in cap._uses.values())
        g._direct = {id(t): writes for t, _, _, writes in g._touch}  # for refusing aliased bindings
        g._owned = list(cap._owned)
        g._keep = tuple(cap._keep)
        g._staging = [None] * len(g._inputs)
        g._ptr = None
        g._what = []  # per driver command: how a failure names it
        g._edges = []  # the driver command indices of the waits the capture inferred (for traces)
        g._nodes = len(cap._nodes)
        g._launches = sum(1 for c in cap._cmds if c.kind == LAUNCH)
        g._inferred = cap._hz.inferred if cap._hz is not None else 0
        for inp in g._inputs:
            if not (inp.reads or inp.writes):
                raise PtoCaptureError(f"capture {cap.name!r}: input {inp.name!r} is used by no launch or copy")
        out = ffi.new("pto_graph **")
        check(lib.pto_graph_create(worker._dev, out), "pto_graph_create")
        g._ptr = out[0]
        try:
            g._add_all(cap)
            for t, _, reads, writes in g._touch:  # what a replay the driver orders is ordered by
                if not t._manual:
                    check(lib.pto_graph_add_access(g._ptr, t._ptr, (lib.PTO_HZ_READ if reads else 0)
                                                   | (lib.PTO_HZ_WRITE if writes else 0)), "pto_graph_add_access")
            check(lib.pto_graph_instantiate(g._ptr), f"instantiating graph {cap.name!r}")
        except BaseException:
            lib.pto_graph_destroy(g._ptr)
            g._ptr = None
            raise
        g._staged = tuple(bool(lib.pto_graph_input_staged(g._ptr, k)) for k in range(len(g._inputs)))
        g._ncmds = len(g._what)
        g._edges = tuple(1 + i for i in g._edges)  # as offsets from a replay's token: command i is T + 1 + i
        # Tokens per replay: its own, one per command, one for its own commands, one for the waits
        # ordering it after other streams' work (pto_graph_replay_ordered).
        g._span = g._ncmds + 3
        g._joined = set()  # origins every DeviceTensor the graph uses directly has joined (first uses)
        g._skipped = ffi.new("uint64_t *")
        g._cstreams = {}  # origin -> (pto_stream *[] for the driver, the streams a replay checks)
        g._via_origin = g._via(g._origin)  # a replay on the origin, without the lookup
        g._nstreams = len(g._streams)
        g._ninputs = len(g._inputs)
        # Per input, what checking a binding reads of it (_bind): index, input, name, shape, dtype, and
        # how an error names the binding.
        g._binds = tuple((k, inp, inp.name, inp.shape, inp.dtype, f"{g._label}: binding {inp.name!r}")
                         for k, inp in enumerate(g._inputs))
        g._staged_ptrs = [None] * len(g._inputs)  # the staging buffers' addresses (_staging_for)
        g._closed = False
        g._recorder = worker._tracing.recorder
        pins = worker._memory.pinned
        for t in (*g._static, *g._owned):
            pins[id(t)] = pins.get(id(t), 0) + 1
        worker._graphs.add(g)
        return g

    def _add_all(self, cap) -> None:
        """Add every recorded command (and the records waits on nodes need) to the driver's graph."""
        p = self._ptr
        what = self._what
        for inp in self._inputs:
            check(lib.pto_graph_add_input(p, inp.nbytes), "pto_graph_add_input")
        for cmd in cap._cmds:
            slot = cmd.slot
            sid = self._streams[slot].id
            if cmd.kind == LAUNCH:
                h, values = cmd.data
                if getattr(h._compiled, "kind", "kernel") == "program":  # its tasks run inside one command
                    idx = check(lib.pto_graph_add_program(p, slot, h._kptr, list(values), h._nargs), h._label)
                    kind = "a program"
                else:
                    idx = check(lib.pto_graph_add_launch(p, slot, h._kptr, h._blocks, list(values), h._nargs),
                                h._label)
                    kind = "a launch"
                for field, k, use in cmd.patches:
                    check(lib.pto_graph_patch(p, idx, field, k, _USE[use]), h._label)
                what.append(f"node {cmd.node.index} ({h._label}, {kind} on stream {sid})")
            elif cmd.kind == COPY:
                d, s, n = cmd.data
                idx = check(lib.pto_graph_add_copy(p, slot, PTO_CMD_D2D, d, s, n), "copy()")
                for field, k, use in cmd.patches:
                    f = lib.PTO_GRAPH_DST if field == "dst" else lib.PTO_GRAPH_SRC
                    check(lib.pto_graph_patch(p, idx, f, k, 0), "copy()")
                what.append(f"node {cmd.node.index} ({cmd.node.name}, on stream {sid})")
            elif cmd.kind == RECORD:
                check(lib.pto_graph_add_record(p, slot, cmd.data[0]), "Stream.record()")
                what.append(f"an event record on stream {sid}")
            elif cmd.kind == WAIT:
                check(lib.pto_graph_add_wait(p, slot, cmd.data[0]), "Stream.wait()")
                node = cmd.data[1]
                if node is not None:
                    self._edges.append(len(what))
                what.append(f"a wait on stream {sid}" if node is None else
                            f"an inferred wait on stream {sid} for node {node}")
            elif cmd.kind == WAIT_EXT:
                check(lib.pto_graph_add_wait_external(p, slot, cmd.data[0]._ptr), "Stream.wait()")
                what.append(f"a wait on stream {sid} for an outside event")
            for e in cmd.after:
                check(lib.pto_graph_add_record(p, slot, e), "Stream.wait()")
                what.append(f"an event record on stream {sid}")

    def _via(self, origin) -> tuple:
        """What a replay whose origin is `origin` needs of it: ``(pto_stream *[], streams)`` (made once).

        `streams` are those a replay checks for closed and held: the
        graph's, and `origin` if it is not one of them.
        """
        via = self._cstreams.get(origin)
        if via is None:
            arr = ffi.new("pto_stream *[]", [origin._ptr] + [s._ptr for s in self._rest])
            streams = self._streams if origin in self._streams else (*self._streams, origin)
            via = self._cstreams[origin] = (arr, streams)
        return via

    # -- description -------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The name given to :meth:`ChipWorker.capture`."""
        return self._name

    @property
    def inputs(self) -> tuple:
        """The declared inputs (``name``, ``shape``, ``dtype``), in declaration order."""
        return self._inputs

    @property
    def stream(self):
        """The stream it was captured on: where a replay runs unless told otherwise."""
        return self._origin

    @property
    def streams(self) -> tuple:
        """Every stream it records on, its :attr:`stream` first."""
        return self._streams

    @property
    def is_closed(self) -> bool:
        return self._closed or not self._worker._alive()

    @property
    def inferred_waits(self) -> int:
        """Waits between its streams the capture inferred from the tensors its commands share.

        Made once, at capture (counted then in ``w.stats().inferred_waits``),
        and part of every replay; waits you captured are not counted.
        """
        return self._inferred

    def __len__(self) -> int:
        return self._ncmds

    def __repr__(self) -> str:
        inputs = ", ".join(f"{i.name}{list(i.shape)}:{i.dtype.np_name}" for i in self._inputs)
        state = " closed" if self.is_closed else ""
        inferred = f", {self._inferred} inferred waits" if self._inferred else ""
        return (f"<Graph {self._name!r}: {self._ncmds} commands ({self._launches} launches{inferred}) on "
                f"{len(self._streams)} streams, inputs ({inputs}){state}>")

    # -- replay ----------------------------------------------------------------------------------

    def replay(self, *, stream=None, **bindings) -> Launch:
        """Queue the graph's commands once, with `bindings` for its inputs, in one driver call.

        Parameters
        ----------
        stream : Stream, optional
            The stream the replay starts and ends on (``None``: the stream it
            was captured on); the other streams are those captured.
        **bindings
            One per input, by name: a DeviceTensor of this worker, or a host
            array (numpy, torch CPU) of the declared shape and dtype, copied
            in and out by direction inside the replay.

        Returns
        -------
        Launch
            Completed in sync mode; in async mode ``await`` it.  Its result
            is None.  A failing command fails it with an error that names the
            node (its kernel and position).  An empty graph (a capture that
            recorded nothing) replays as a no-op on `stream`: the Launch
            completes in order behind that stream's earlier work.

        Raises
        ------
        PtoArgumentError
            Before anything is queued, for a missing, unknown or mismatched
            binding; and, with ``auto_deps`` or the sanitizer on, for a
            DeviceTensor the graph also uses directly, or one bound to two
            inputs, where a side writes it (the capture ordered its commands
            as if they were different tensors).
        PtoCaptureError
            Inside a capture.
        PtoClosedError
            If the graph or its worker is closed.
        """
        return self._replay(stream, bindings, False)

    def submit(self, *, stream=None, **bindings) -> Launch:
        """Like :meth:`replay`, without waiting for completion.

        Awaiting the Launch waits only until the replay's commands entered
        their rings (back-pressure), as for ``handle.submit``.
        """
        return self._replay(stream, bindings, True)

    def _replay(self, stream, bindings: dict, submit_only: bool) -> Launch:
        # The hot path of a replay: what depends only on the graph was made at build (_build, _via).
        worker = self._worker
        if worker._state != OPEN:
            worker._check_open()
        if self._closed:
            raise PtoClosedError(f"graph {self._name!r} is closed")
        if worker._captures:
            refuse(worker, f"replay of graph {self._name!r}")
        if stream is None or stream is self._origin:
            origin = self._origin
            cstreams, streams = self._via_origin
        else:
            origin = accept(worker, stream)
            cstreams, streams = self._via(origin)
        ptrs, hosts, keep, touched, joined = self._bind(bindings, origin)
        launch = _Replay._make(worker, origin, self._label, 1, keep, None, submit_only)
        launch._graph = self
        q = worker._queue
        with q.lock:
            mem = worker._memory
            if mem.deferred:
                mem.free_deferred_locked()
            held = False
            for s in streams:  # the origin among them
                if s._closed:
                    raise PtoClosedError(f"{self._label}: stream {s.id} is closed")
                held = held or s._fifo
            hz = worker._hazards
            tags = self._recorder.graph_tags  # (the recorder is hz.recorder too: the worker's, set at open)
            rc = _DECLINED
            if (joined and not held and tags is None and hz.fast  # (joined: tracked, so hz is set)
                    and hz.table is not None and (origin in self._joined or self._joins(origin))
                    and not (regions_open[0] and worker in manual_workers())):
                # The driver orders the replay after other streams' work and queues it, in one call.
                if hz.dead:
                    hz.settle_dead()
                tok = q.next_token
                q.next_token = tok + self._span
                q.pending[tok] = launch
                rc = _replay_ordered(self._ptr, hz.table, cstreams, self._nstreams, ptrs, hosts, self._ninputs,
                                     tok, self._skipped)
                if rc == _DECLINED:  # nothing queued or noted: ordered here instead
                    del q.pending[tok]
                    q.next_token = tok
                    hz.skipped_here -= self._skipped[0]  # the decision here counts them again
            if rc == _DECLINED:
                if hz is not None:  # tracked: every DeviceTensor bound is ordered (see _bind)
                    touched = [(v, inp.name, inp.reads, inp.writes)
                               for inp in self._inputs if type(v := bindings[inp.name]) is DeviceTensor] or None
                self._order(origin, touched)
                held = False  # (an edge may have queued a wait on origin behind work held on the host)
                for s in streams:
                    held = held or s._fifo
                tok = q.next_token
                q.next_token = tok + self._span
                q.pending[tok] = launch
                args = (self._ptr, cstreams, self._nstreams, ptrs, hosts, self._ninputs, tok)
                if held:
                    self._hold(q, origin, args, launch)
                    rc = None
                else:
                    rc = _replay_fn(*args)
            launch._base = tok
            origin._last = tok  # its data command for hazards: the notify, last on origin (graph.c)
            if not origin._used:  # the replay's work, on each of its streams
                note_used(q, origin)
            for s in self._rest:
                if not s._used:
                    note_used(q, s)
            if rc == 0:
                launch._entered = True
            elif rc is None:  # held on the host
                pass
            elif rc == QUEUED:  # the driver keeps the rest until its rings have room
                overflowed(q, origin, 1)
                origin._unentered.append((lib.pto_stream_accepted(origin._ptr), launch))
            else:
                del q.pending[tok]
                check(rc, self._label)
            if tags is not None:
                tags.append((tok, tok + self._span - 1, self._name, self._edges))
            # As the launch path does every 64 tokens: a producer that never suspends still
            # drains completions now and then (here every 256 tokens), and gives the loop turns.
            end = tok + self._span
            if end > q.serve_at:
                q.serve_at = end + _SERVICE_EVERY
                if q.pump.can_serve_inline():
                    service(q)
                    if submit_only and q.pump.turn_due(1):
                        mark_turn(launch)
        if worker._async:
            return launch
        if submit_only:  # as handle.submit: blocks only until its commands entered their rings
            if not (launch._entered or launch._done):
                block_until(q, launch, True, None)
            return launch
        if not launch._done:
            block_until(q, launch, False, None)
        if launch._exc is not None:
            launch._mark_retrieved()
            observe(worker, launch._exc)
            raise launch._exc
        return launch

    def _joins(self, origin) -> bool:
        """Whether every DeviceTensor the graph uses directly has joined `origin` (noted once true).

        A stream stays among a tensor's streams while it is open, and a
        replay's origin is open.
        """
        for t, _, _, _ in self._touch:
            if origin not in t._streams:
                return False
        self._joined.add(origin)
        return True

    def _order(self, origin, touched) -> None:
        """Order the replay after other streams' use of the tensors it touches, and note its own (lock held).

        A replay starts on `origin` and every fork of it joins `origin` again
        before its last command (the notify of its token), so waits queued on
        `origin` before it order all of it, and the replay's token on
        `origin` stands for all its accesses: each tensor is one access there,
        with the union of its directions over the graph.  As in the bind step
        (:meth:`~._args.Binder.bind`), the driver decides the edges
        (:func:`~._hazards.order`); without hazard tracking, only first uses
        join.  Edges between the graph's own commands were made at capture.
        """
        track = self._worker._hazards is not None
        for acc in self._touch:
            t = acc[0]
            if track or origin not in t._streams:
                if touched is None:
                    touched = []
                touched.append(acc)
        if touched is not None:
            # Offset 0: noted at the replay's own token, in flight (q.pending) until all of it ended.
            order(self._worker, origin, touched, self._label, 0)

    def _hold(self, q, origin, args: tuple, launch) -> None:
        """Queue the replay in `origin`'s host FIFO: a stream of it holds work waiting on the host.

        That work (a launch waiting for device memory, a wait on an event not
        recorded yet) keeps stream order: the replay goes once what its
        streams hold now has gone, backdated to now, as any held command.
        """
        gate = _AfterHeld([(s, s._fifo[-1]) for s in {origin, *self._streams} if s._fifo and s is not origin])
        hold(q, origin, _replay_fn, args, launch, F_DATA | F_LAST, gate if gate.pending else None)

    def _bind(self, bindings: dict, origin):
        """Check the bindings; return (device addresses, host addresses or NULL, keep-alive, accesses, joined).

        The accesses are those of the DeviceTensors bound that need ordering
        on `origin` (:meth:`_order`), ``(tensor, input name, reads, writes)``,
        or None.  With hazard tracking every DeviceTensor bound needs it, and
        the caller makes them from `bindings` only when the replay is ordered
        here (None is returned): a replay the driver orders needs none.
        `joined`: whether hazards are tracked and every DeviceTensor bound
        has joined `origin` already (the driver can order the replay alone).
        """
        inputs = self._inputs
        if len(bindings) != self._ninputs:
            self._names_error(bindings)
        worker = self._worker
        ptrs = []
        hosts = keep = touched = None
        joined = track = worker._hazards is not None
        bound = 0  # DeviceTensors bound (with tracking: checked for aliases the capture missed)
        for k, inp, name, shape, dtype, what in self._binds:
            try:
                v = bindings[name]
            except KeyError:
                self._names_error(bindings)
            if type(v) is DeviceTensor:
                if (v._worker is not worker or v._freed or v._shape != shape
                        or (v._dtype is not dtype and v._dtype != dtype)):
                    self._tensor_error(inp, v)
                if v._init is not None:
                    check_init(v, what)
                ptrs.append(v._ptr)
                bound += 1
                if track:
                    if v._manual or origin not in v._streams:
                        joined = False
                elif origin not in v._streams:
                    if touched is None:
                        touched = []
                    touched.append((v, name, inp.reads, inp.writes))
                continue
            h = host_array(v, what, writeable=inp.writes)
            if h.shape != shape or not holds(h.dtype, dtype):
                if tuple(h.shape) != shape:
                    raise PtoArgumentError(f"{what}: expected shape {shape}, got {tuple(h.shape)}")
                raise PtoArgumentError(f"{what}: expected dtype {dtype.np_name}, got {h.dtype.np_name}")
            if hosts is None:
                hosts = [0] * len(inputs)
                keep = []
            hosts[k] = int(ffi.cast("uintptr_t", h.ptr))
            keep.append(h)
            if self._staged[k]:
                ptr = self._staged_ptrs[k]
                ptrs.append(self._staging_for(k)._ptr if ptr is None else ptr)
            else:
                ptrs.append(0)
        if track and (bound > 1 or (bound and self._direct)):  # (one tensor bound, none used directly: no alias)
            self._refuse_aliases(bindings)
        return ptrs, _NULL if hosts is None else hosts, keep, touched, joined

    def _refuse_aliases(self, bindings: dict) -> None:
        """Refuse a DeviceTensor bound where the capture could not see it as one tensor (tracking on).

        The capture derived its edges per tensor: an input was a tensor of its
        own, apart from those used directly and from other inputs.  A binding
        to a tensor the graph uses directly, or one tensor bound to two
        inputs, would leave their commands unordered on other streams, unless
        every one of them only reads it.
        """
        direct = self._direct
        first: dict[int, object] = {}
        for inp in self._inputs:
            v = bindings[inp.name]
            if type(v) is not DeviceTensor:
                continue
            writes = direct.get(id(v))
            if writes is not None and (writes or inp.writes):
                raise PtoArgumentError(
                    f"{self._label}: binding {inp.name!r} is a DeviceTensor the graph also uses directly (not "
                    f"through an input), and {'the graph' if writes else 'the input'} writes it: the capture "
                    "saw two tensors, so nothing orders their commands on other streams; bind a different "
                    "DeviceTensor, or capture that tensor as an input")
            other = first.setdefault(id(v), inp)
            if other is not inp and (other.writes or inp.writes):
                raise PtoArgumentError(
                    f"{self._label}: bindings {other.name!r} and {inp.name!r} are one DeviceTensor, and "
                    f"{(other if other.writes else inp).name!r} writes it: the capture saw two tensors, so "
                    "nothing orders their commands on other streams; bind different DeviceTensors, or capture "
                    "one input for both")

    def _staging_for(self, k: int) -> DeviceTensor:
        """The device buffer host bindings of input `k` go through (allocated once)."""
        t = self._staging[k]
        if t is None:
            inp = self._inputs[k]
            t = self._worker.alloc_tensor(inp.shape, inp.dtype, stream=self._origin)
            self._staging[k] = t
            self._staged_ptrs[k] = t._ptr
            self._owned.append(t)
            pins = self._worker._memory.pinned
            pins[id(t)] = pins.get(id(t), 0) + 1
        return t

    def _names_error(self, bindings: dict) -> None:
        names = [i.name for i in self._inputs]
        missing = [n for n in names if n not in bindings]
        unknown = [n for n in bindings if n not in names]
        parts = []
        if missing:
            parts.append(f"missing {', '.join(map(repr, missing))}")
        if unknown:
            parts.append(f"unknown {', '.join(map(repr, unknown))}")
        raise PtoArgumentError(f"{self._label}: bindings {'; '.join(parts)} (its inputs: {', '.join(names)})")

    def _tensor_error(self, inp, v) -> None:
        what = f"{self._label}: binding {inp.name!r}"
        if v._worker is not self._worker:
            raise PtoForeignTensorError(f"{what}: the DeviceTensor belongs to another ChipWorker")
        if v._freed:
            raise freed_error(v, what)
        if v._shape != inp.shape:
            raise PtoArgumentError(f"{what}: expected shape {inp.shape}, got {v._shape}")
        raise PtoArgumentError(f"{what}: expected dtype {inp.dtype.np_name}, got {v._dtype.np_name}")

    def _name_failure(self, launch: _Replay, exc):
        """The error of a failed replay: the failing node's own error, named."""
        ct = getattr(exc, "cause_token", 0) or 0
        i = ct - launch._base - 1
        if 0 <= i < self._ncmds:
            where = self._what[i]
        elif i == self._ncmds:
            where = "the copies of its host-array bindings"
        else:
            return exc
        cause = exc.__cause__ if exc.__cause__ is not None else exc
        text = str(cause)
        for prefix in ("a queued command: ",):
            if text.startswith(prefix):
                text = text[len(prefix):]
        new = type(cause)(f"{self._label} failed at {where}: {text}", status=getattr(cause, "status", None))
        new.__cause__ = exc
        new.cause_token = ct
        new._pto_fail = getattr(exc, "_pto_fail", None)  # delivering it observes what exc would
        return new

    # -- lifetime --------------------------------------------------------------------------------

    def close(self) -> None:
        """Free what the graph owns (idempotent); replays already queued still run.

        Tensors allocated inside the capture and the staging buffers are
        freed in stream order, behind every replay queued so far.
        """
        if self._closed:
            return
        worker = self._worker
        if not worker._alive():
            self._release_native()
            return
        self._closed = True
        worker._graphs.discard(self)
        self._unpin()
        mem = worker._memory
        with worker._lock:
            home = _dealloc_stream(worker, self._origin)
            for t in self._owned:
                if not t._freed:
                    t._freed = True
                    mem.tensors.discard(t)
                    used = {*self._streams, *self._cstreams, *t._streams}
                    try:
                        mem.free_locked(t._ptr, home, used)
                    except PtoError:  # a lost device: its memory goes with it
                        pass
            lib.pto_graph_destroy(self._ptr)
            self._ptr = None
        self._owned = []
        self._static = ()

    def _unpin(self) -> None:
        pins = self._worker._memory.pinned
        for t in (*self._static, *self._owned):
            n = pins.get(id(t), 0) - 1
            if n > 0:
                pins[id(t)] = n
            else:
                pins.pop(id(t), None)

    def _release_native(self) -> None:
        """The worker is closing its device: destroy the driver's graph first (no Python frees)."""
        self._closed = True
        if self._ptr is not None:
            lib.pto_graph_destroy(self._ptr)
            self._ptr = None

    def __enter__(self) -> Graph:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __del__(self):
        # Nothing references the graph, so nothing replays it: let go of its tensors (each
        # frees itself in stream order when collected) and of the driver's graph (replays
        # queued hold what they use).  No lock here: a finalizer may run anywhere.
        try:
            if not self._closed and self._worker._alive():
                self._closed = True
                self._unpin()
                self._owned = []
                self._static = ()
                self._release_native()
        except Exception:  # never raise from a finalizer
            pass
