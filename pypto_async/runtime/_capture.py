"""Capture: record a step's launches, copies and stream orderings instead of running them.

``w.capture(name=...)`` opens a :class:`Capture`.  While it is open, the
task that opened it (a ``contextvars`` variable: the capture belongs to the
task, not the thread) records what it queues on the capture's streams:

* kernel launches (a program, however many tasks it holds, is one) and
  copies become :class:`CapturedNode` objects;
* ``stream.record()`` becomes a :class:`CapturedEvent`;
* ``stream.wait(what)`` on captured work becomes a device-side edge, and
  pulls the waiting stream into the capture (a *fork*); a wait on an
  outside :class:`Event` (or launch, or stream) is kept as a wait on that
  event as recorded when the replay queues it.

Nothing is queued while recording.  Calls that would wait for captured work
(awaiting a node, ``sync()``, ``w.sync()``, ``await stream``, a blocking
copy to the host, replaying another graph) raise
:class:`~pypto_async.errors.PtoCaptureError` at the call site and leave the
capture usable.  When the block exits, every fork must have rejoined the
capture's stream (a ``wait`` on it), and the worker makes the recording a
:class:`~._graph.Graph` (``cap.graph``).  An exception escaping the block
discards the recording.

Work that other tasks queue during the capture, on the same streams, runs
eagerly as always, ordered by the streams behind whatever ran before it: it
is not recorded, since the capture is not theirs.

Joining forks is checked with vector clocks: each stream of the capture
knows, for every stream, how many of that stream's commands it is ordered
behind (its own count, and what its waits brought in).  At the end the
capture's stream must be ordered behind every command of every fork.

The hooks into the eager paths (``launch_kernel``, ``copy``, ``Stream``'s
record/wait/await, ``ChipWorker.sync``) are one test of the worker's
``_captures`` count, and only when it is nonzero one look-up of the task's
capture (:func:`capture_of`).

Launches and copies on different streams of the capture that touch one
DeviceTensor are ordered as eager ones are, by edges recorded with them
(:mod:`._capture_hazards`): derived once, here, so replays pay nothing for
them.  What a graph touches across its boundary is ordered at each replay.
"""

from __future__ import annotations

import weakref

from .._dtypes import as_dtype
from ..errors import PtoArgumentError, PtoCaptureError, PtoForeignTensorError
from ._capture_hazards import CaptureHazards
from ._checks import as_shape, check_same
from ._context import capture_of, reset_capture, set_capture
from ._event import Event
from ._launch import Launch
from ._stream import Stream, accept, task_default
from ._tensor import DeviceTensor, freed_error

__all__ = ["Capture", "CapturedNode", "CapturedEvent", "GraphInput", "Placeholder", "capture_of"]

# Command kinds of a recording (what graph.c adds for each).
LAUNCH, COPY, RECORD, WAIT, WAIT_EXT = "launch", "copy", "record", "wait", "wait_ext"


class _Everywhere:
    """The streams an input placeholder has joined: all of them (it is never allocated)."""

    __slots__ = ()

    def __contains__(self, stream) -> bool:
        return True

    def __iter__(self):
        return iter(())

    def add(self, stream) -> None:
        pass


_EVERYWHERE = _Everywhere()


class Placeholder:
    """The ``_freed`` mark of an input placeholder: never allocated, it has no device address.

    Truthy, so every eager path's freed-tensor test (a launch's bind, a copy,
    a replay binding, a free) turns it away before anything is queued; those
    paths raise :meth:`error` (through :func:`~._tensor.freed_error`).  Only
    its own capture's recording, in the task that opened it, takes it (and
    patches its address in at each replay).
    """

    __slots__ = ("cap", "capture_name", "name")

    def __init__(self, cap, name: str):
        self.cap = weakref.ref(cap)  # not a cycle through the capture, its graph and its inputs
        self.capture_name = cap.name
        self.name = name

    def recording(self) -> bool:
        """True in its capture's recording: the capture is open and belongs to this task."""
        cap = self.cap()
        return cap is not None and cap._open and capture_of(cap._worker) is cap

    def error(self, where: str) -> PtoCaptureError:
        cap = self.cap()
        when = ("while it is open, in another task than the one recording it" if cap is not None and cap._open
                else "after it ended; bind a real tensor at graph.replay(...) instead")
        return PtoCaptureError(
            f"{where}: the DeviceTensor is input {self.name!r} of capture {self.capture_name!r}, a placeholder with no "
            f"device memory: it can be used only inside that capture's recording, not {when}")


class _Cmd:
    """One recorded command: its kind, stream slot, what it takes, and its patches."""

    __slots__ = ("kind", "slot", "data", "patches", "after", "node")

    def __init__(self, kind: str, slot: int, data: tuple, patches: tuple = (), node=None):
        self.kind = kind
        self.slot = slot
        self.data = data  # launch: (handle, values); copy: (dst, src, nbytes); record/wait: (event,)
        self.patches = patches  # (field, input index, use)
        self.after = []  # graph events recorded right after it (waits on this node)
        self.node = node


class CapturedNode:
    """What a launch or copy returns inside a capture: a command of the graph being recorded.

    It stands where a :class:`Launch` would.  Pass it to ``stream.wait(...)``
    to order another stream behind it; its :attr:`event` is an event right
    after it.  Awaiting it, :meth:`sync`, :meth:`wait` or :meth:`result`
    raise :class:`~pypto_async.errors.PtoCaptureError`: it does not run
    until the graph is replayed.
    """

    __slots__ = ("_cap", "_cmd", "_index", "_stream", "_name", "_clock", "_event", "_mark")

    def __init__(self, cap, cmd: _Cmd, index: int, stream, name: str, clock: dict):
        self._cap = cap
        self._cmd = cmd
        self._index = index
        self._stream = stream
        self._name = name
        self._clock = clock
        self._event = None
        self._mark = None  # the driver's mark of the point right after it (capture hazards)

    @property
    def index(self) -> int:
        """Its position among the capture's launches and copies (0, 1, ...)."""
        return self._index

    @property
    def name(self) -> str:
        """The kernel's (or copy's) name."""
        return self._name

    @property
    def stream(self):
        """The :class:`Stream` it was recorded on."""
        return self._stream

    @property
    def event(self) -> CapturedEvent:
        """A captured event right after this node on its stream (while the capture is open)."""
        if self._event is None:
            if not self._cap._open:
                raise PtoCaptureError(f"node {self._index} ({self._name}): capture {self._cap.name!r} has "
                                      "ended; its graph replays as a whole")
            self._event = self._cap._event_after(self)
        return self._event

    def _refuse(self, what: str):
        raise PtoCaptureError(f"{what} node {self._index} ({self._name}) of capture {self._cap.name!r}: "
                              "it runs only when the graph is replayed")

    def __await__(self):
        self._refuse("awaiting")

    def sync(self, timeout=None):
        """Refused: raises :class:`~pypto_async.errors.PtoCaptureError`."""
        self._refuse("sync() of")

    def wait(self):
        """Refused: raises :class:`~pypto_async.errors.PtoCaptureError`."""
        self._refuse("wait() of")

    def submitted(self):
        """Refused: raises :class:`~pypto_async.errors.PtoCaptureError`."""
        self._refuse("submitted() of")

    def result(self):
        """Refused: raises :class:`~pypto_async.errors.PtoCaptureError`."""
        self._refuse("result() of")

    def done(self) -> bool:
        """False: a captured node never runs by itself."""
        return False

    def __repr__(self) -> str:
        return f"<CapturedNode {self._index} {self._name} on stream {self._stream.id} of capture {self._cap.name!r}>"


class CapturedEvent:
    """What ``stream.record()`` returns inside a capture: an event of the graph being recorded.

    ``stream.wait(event)`` orders a stream behind it.  Waiting for it on the
    host (``await``, ``sync()``, ``query()``) raises
    :class:`~pypto_async.errors.PtoCaptureError`.
    """

    __slots__ = ("_cap", "_index", "_stream", "_clock", "_mark")

    def __init__(self, cap, index: int, stream, clock: dict, mark=None):
        self._cap = cap
        self._index = index
        self._stream = stream
        self._clock = clock
        self._mark = mark  # the driver's mark of its point (capture hazards), or None

    @property
    def stream(self):
        """The :class:`Stream` it was recorded on."""
        return self._stream

    def _refuse(self, what: str):
        raise PtoCaptureError(f"{what} a captured event of capture {self._cap.name!r}: it is recorded only "
                              "when the graph is replayed")

    def __await__(self):
        self._refuse("awaiting")

    def sync(self, timeout=None):
        """Refused: raises :class:`~pypto_async.errors.PtoCaptureError`."""
        self._refuse("sync() of")

    def query(self):
        """Refused: raises :class:`~pypto_async.errors.PtoCaptureError`."""
        self._refuse("query() of")

    def __repr__(self) -> str:
        return f"<CapturedEvent {self._index} on stream {self._stream.id} of capture {self._cap.name!r}>"


class GraphInput:
    """A declared input of a graph: its name, shape and dtype (see :attr:`Graph.inputs`)."""

    __slots__ = ("name", "shape", "dtype", "nbytes", "reads", "writes", "_tensor")

    def __init__(self, name: str, shape: tuple, dtype, nbytes: int, tensor):
        self.name = name
        self.shape = shape
        self.dtype = dtype
        self.nbytes = nbytes
        self.reads = False  # some command reads it (a host binding is copied in)
        self.writes = False  # some command writes it (a host binding is copied out)
        self._tensor = tensor

    def __repr__(self) -> str:
        return f"GraphInput({self.name!r}, {self.shape}, {self.dtype.np_name})"


class Capture:
    """A recording in progress: ``with w.capture(...)`` / ``async with w.capture(...)``.

    Use :meth:`input` for placeholders, queue work as usual, and read
    :attr:`graph` once the block has exited.  See :meth:`ChipWorker.capture`.

    The capture records; its owner makes the product.  `build` is how the
    owner (:meth:`ChipWorker.capture`, which passes ``Graph._build``) turns
    a recording whose forks all rejoined into what :attr:`graph` returns, so
    this module knows nothing of :class:`~._graph.Graph`, which is built on
    it.
    """

    def __init__(self, worker, name: str, stream, build):
        worker._check_open()
        if not isinstance(name, str) or not name:
            raise PtoArgumentError(f"capture(name=...) must be a non-empty str, not {name!r}")
        self._worker = worker
        self.name = name
        self._build = build  # the finished recording -> its Graph (see the class doc)
        self._origin = task_default(worker) if stream is None else accept(worker, stream)
        self._open = False
        self._used = False
        self._graph = None
        self._token = None
        self._slots: dict[Stream, int] = {self._origin: 0}
        self._streams = [self._origin]
        self._clocks: list[dict] = [{}]  # per slot: stream slot -> commands it is ordered behind
        self._counts = [0]  # per slot: commands recorded on it
        self._cmds: list[_Cmd] = []
        self._nodes: list[CapturedNode] = []
        self._events = 0
        self._inputs: list[GraphInput] = []
        self._input_ids: dict[int, int] = {}  # id(placeholder) -> input index
        self._static: dict[int, DeviceTensor] = {}  # DeviceTensors used directly
        self._uses: dict[int, list] = {}  # id -> [tensor, name, reads, writes]: what a replay touches
        self._owned: list[DeviceTensor] = []  # tensors allocated inside the capture
        self._keep: list = []  # outside events waited on
        hz = worker._hazards
        self._hz = CaptureHazards(self, hz) if hz is not None else None  # edges across its streams
        if self._hz is not None:
            self._hz.stream(self._origin)

    # -- the block ------------------------------------------------------------------------------

    def _enter(self) -> Capture:
        if self._used:
            raise PtoCaptureError(f"capture {self.name!r} was entered already; open a new one")
        worker = self._worker
        worker._check_open()
        if capture_of(worker) is not None:
            raise PtoCaptureError(f"capture {self.name!r}: this task is capturing on the worker already")
        self._used = True
        self._open = True
        self._token = set_capture(self)
        worker._captures += 1
        return self

    def _exit(self, exc) -> None:
        worker = self._worker
        self._open = False
        worker._captures -= 1
        reset_capture(self._token)
        if exc is not None:
            self._discard()
            return
        try:
            worker._check_open()  # closed inside the block: nothing to build on
            self._check_joined()
            self._graph = self._build(self)
        except BaseException:
            self._discard()
            raise
        self._end_hazards()  # its bookkeeping served the recording

    def _end_hazards(self) -> None:
        hz, self._hz = self._hz, None
        if hz is not None:
            hz.close()

    def _discard(self) -> None:
        """Free what the capture allocated; forget what it recorded."""
        owned, self._owned = self._owned, []
        self._cmds, self._nodes, self._static, self._uses = [], [], {}, {}
        self._end_hazards()
        for t in owned:
            if not t._freed and self._worker._alive():
                self._worker.free_tensor(t)

    def __enter__(self) -> Capture:
        return self._enter()

    def __exit__(self, exc_type, exc, tb) -> None:
        self._exit(exc)

    async def __aenter__(self) -> Capture:
        return self._enter()

    async def __aexit__(self, exc_type, exc, tb) -> None:
        self._exit(exc)

    # -- public -----------------------------------------------------------------------------------

    @property
    def stream(self) -> Stream:
        """The capture's stream: where a replay starts and ends, and where forks rejoin."""
        return self._origin

    @property
    def graph(self):
        """The recorded :class:`~._graph.Graph`, once the block has exited without an exception.

        Raises
        ------
        PtoCaptureError
            While the block is open, or if the capture was discarded.
        """
        if self._graph is None:
            state = "is still open" if self._open else "was discarded (an exception left its block)" \
                if self._used else "was never entered"
            raise PtoCaptureError(f"capture {self.name!r} {state}: it has no graph")
        return self._graph

    def input(self, name: str, shape, dtype) -> DeviceTensor:
        """Declare an input: a placeholder to launch and copy on, bound at each replay.

        Parameters
        ----------
        name : str
            The keyword :meth:`Graph.replay` binds it by (an identifier, not
            ``stream``).
        shape : int or tuple of int
        dtype
            As for :meth:`ChipWorker.alloc_tensor`.

        Returns
        -------
        DeviceTensor
            The placeholder, with no device memory.  Use it only inside this
            capture, in the task recording it: a launch, copy, free or replay
            binding anywhere else (another task while the capture is open, or
            after it ended) raises :class:`~pypto_async.errors.PtoCaptureError`
            naming the input and the capture, before anything is queued.
        """
        if not self._open:
            raise PtoCaptureError(f"capture {self.name!r}: declare inputs inside the capture's block")
        if not isinstance(name, str) or not name.isidentifier() or name == "stream":
            raise PtoArgumentError(f"capture input name must be an identifier other than 'stream', not {name!r}")
        if any(i.name == name for i in self._inputs):
            raise PtoArgumentError(f"capture {self.name!r}: input {name!r} is declared already")
        shape = as_shape(shape)
        try:
            dt = as_dtype(dtype)
        except PtoArgumentError as exc:
            raise PtoArgumentError(f"capture input {name!r}: {exc}") from None
        nbytes = dt.itemsize
        for d in shape:
            nbytes *= d
        t = DeviceTensor._make(self._worker, 0, shape, dt, nbytes, self._origin)
        t._streams = _EVERYWHERE
        t._freed = Placeholder(self, name)  # refused by every eager path (see Placeholder)
        self._input_ids[id(t)] = len(self._inputs)
        self._inputs.append(GraphInput(name, shape, dt, nbytes, t))
        return t

    def __repr__(self) -> str:
        state = "open" if self._open else "closed"
        return f"<Capture {self.name!r} {state}: {len(self._nodes)} nodes on {len(self._streams)} streams>"

    # -- recording (the hooks call these) ------------------------------------------------------------

    def refuse(self, what: str) -> None:
        """Raise PtoCaptureError: `what` would wait for work that has not run."""
        raise PtoCaptureError(f"{what} inside capture {self.name!r}: captured work does not run until "
                              "the graph is replayed (end the capture first)")

    def _slot(self, stream, what: str) -> int:
        slot = self._slots.get(stream)
        if slot is None:
            raise PtoCaptureError(
                f"{what} inside capture {self.name!r}: stream {stream.id} is not part of the capture (its "
                f"stream is {self._origin.id}; another stream joins it by waiting on captured work, "
                "stream.wait(node))")
        return slot

    def _tick(self, slot: int) -> dict:
        """Count a command on `slot`; return the slot's clock after it (a copy)."""
        self._counts[slot] += 1
        clock = self._clocks[slot]
        clock[slot] = self._counts[slot]
        return dict(clock)

    def _add(self, kind: str, slot: int, data: tuple, patches=(), name: str = ""):
        """Record a command; a launch or copy returns its CapturedNode, anything else its slot's clock."""
        cmd = _Cmd(kind, slot, data, patches)
        self._cmds.append(cmd)
        clock = self._tick(slot)
        if kind not in (LAUNCH, COPY):
            return clock
        node = CapturedNode(self, cmd, len(self._nodes), self._streams[slot], name, clock)
        cmd.node = node
        self._nodes.append(node)
        return node

    def _arg(self, t, use: str, where: str, field, patches: list, name: str) -> int:
        """A DeviceTensor argument: its address (0 for an input, patched at replay).

        The directions of a tensor used directly add up over the capture
        (:attr:`_uses`): a replay is ordered as one access of each, by them.
        """
        k = self._input_ids.get(id(t))
        if k is not None:
            inp = self._inputs[k]
            if use in ("r", "rw"):
                inp.reads = True
            if use in ("w", "rw"):
                inp.writes = True
            patches.append((field, k, use))
            return 0
        self._check(t, where)
        self._static.setdefault(id(t), t)
        u = self._uses.get(id(t))
        if u is None:
            u = self._uses[id(t)] = [t, name, False, False]
        u[2] = u[2] or use != "w"
        u[3] = u[3] or use != "r"
        return t._ptr

    def _check(self, t, where: str) -> None:
        """Refuse a DeviceTensor (not an input) of another worker, or freed."""
        if id(t) in self._input_ids:
            return
        if t._worker is not self._worker:
            raise PtoForeignTensorError(f"{where}: the DeviceTensor belongs to another ChipWorker")
        if t._freed:
            raise freed_error(t, where)

    def launch(self, h, args: tuple, stream, submit_only: bool) -> CapturedNode:
        """Record ``h(*args)`` (the capture path of ``launch_kernel``).

        A program (a task graph) is one launch, so one node, however many
        tasks it holds: its tasks run inside the replay as they do eagerly.
        """
        worker = self._worker
        if h._unfit is not None:
            raise h._refusal()
        stream = task_default(worker) if stream is None else accept(worker, stream)
        slot = self._slot(stream, h._label)
        values, hosts, joins = h._binder.bind(worker, stream, args)
        if hosts is not None:
            i, _, p = hosts[0]
            raise PtoCaptureError(
                f"{h._label}: argument {p.name!r} is a host array inside capture {self.name!r}; declare it "
                "with cap.input(...) and bind the array at replay (the replay copies it by direction)")
        plan = None
        if self._hz is not None:
            accesses = [(arg, p.name, p.copies_in, p.copies_out)
                        for arg, p in zip(args, h._binder.params) if type(arg) is DeviceTensor]
            plan = self._hz.check(slot, accesses, h._label)  # may refuse a race: nothing recorded yet
        patches = []
        for i, (arg, p) in enumerate(zip(args, h._binder.params)):
            if type(arg) is DeviceTensor:
                use = "rw" if p.copies_in and p.copies_out else "w" if p.copies_out else "r"
                self._arg(arg, use, h._binder.labels[i], i, patches, p.name)
        if joins:
            with worker._lock:
                for t, _ in joins:
                    if id(t) not in self._input_ids and stream not in t._streams:
                        t._join(stream)  # its allocation, once, eagerly: every replay comes after
        return self._access(plan, slot, LAUNCH, (h, tuple(values)), tuple(patches), h._label)

    def copy(self, dst, src, stream) -> CapturedNode:
        """Record a copy between DeviceTensors (the capture path of ``ChipWorker.copy``)."""
        worker = self._worker
        stream = task_default(worker) if stream is None else accept(worker, stream)
        for side, t in (("dst", dst), ("src", src)):
            if not isinstance(t, DeviceTensor):
                raise PtoCaptureError(
                    f"copy({side}=...) of a host array inside capture {self.name!r}: declare it with "
                    "cap.input(...) and bind the array at replay (the replay copies it by direction)")
        slot = self._slot(stream, "copy()")
        check_same(dst._dtype, dst._nbytes, src._dtype, src._nbytes)
        self._check(dst, "copy(dst=...)")
        self._check(src, "copy(src=...)")
        nbytes = dst._nbytes
        label = f"copy d2d ({nbytes} bytes)"
        plan = None
        if self._hz is not None:
            plan = self._hz.check(slot, [(dst, "dst", False, True), (src, "src", True, False)], label)
        patches = []
        d = self._arg(dst, "w", "copy(dst=...)", "dst", patches, "dst")
        s = self._arg(src, "r", "copy(src=...)", "src", patches, "src")
        with worker._lock:
            for t in (dst, src):
                if id(t) not in self._input_ids and stream not in t._streams:
                    t._join(stream)
        return self._access(plan, slot, COPY, (d, s, nbytes), tuple(patches), label)

    def _access(self, plan, slot: int, kind: str, data: tuple, patches: tuple, name: str) -> CapturedNode:
        """Record a launch or copy on `slot` behind the edges the driver decides for it, and note its accesses."""
        if plan is None:
            return self._add(kind, slot, data, patches, name)
        hz = self._hz
        for earlier in hz.decide(slot, plan):
            self._wait_node(slot, earlier, True)
        node = self._add(kind, slot, data, patches, name)
        hz.note(plan, node)
        node._mark = hz.mark(slot)
        return node

    def record(self, stream) -> CapturedEvent:
        """Record an event on `stream` (``Stream.record`` inside the capture)."""
        slot = self._slot(stream, "record()")
        e = self._new_event()
        clock = self._add(RECORD, slot, (e,))
        return CapturedEvent(self, e, stream, clock, self._hz.mark(slot) if self._hz is not None else None)

    def _new_event(self) -> int:
        e = self._events
        self._events += 1
        return e

    def _event_after(self, node: CapturedNode) -> CapturedEvent:
        """A graph event recorded right after `node` on its stream."""
        e = self._new_event()
        node._cmd.after.append(e)
        return CapturedEvent(self, e, node._stream, node._clock, node._mark)

    def wait(self, stream, what) -> None:
        """``stream.wait(what)`` inside the capture."""
        worker = self._worker
        if isinstance(what, (CapturedNode, CapturedEvent)):
            if what._cap is not self:
                raise PtoCaptureError(f"Stream.wait(): {what!r} belongs to another capture")
            if what._stream is stream:
                return  # earlier work of this very stream: stream order has it
            self._wait_node(self._pull(stream), what, False)
            return
        if isinstance(what, Stream) and what in self._slots:
            if what is stream:
                return
            self.wait(stream, self.record(what))
            return
        slot = self._slot(stream, "Stream.wait()")
        # Outside work: wait for it as its event stands when each replay queues the wait.
        if isinstance(what, Launch):
            if what._worker is not worker:
                raise PtoArgumentError("Stream.wait(): the launch belongs to another worker")
            if what._done:
                return
            what = what.event
        elif isinstance(what, Stream):
            if what._worker is not worker:
                raise PtoArgumentError("Stream.wait(): the stream belongs to another worker")
            with worker._lock:
                what = what._record_locked() if not what._closed else what._final
            if what is None:
                return
        elif not isinstance(what, Event):
            raise PtoArgumentError(f"Stream.wait() takes an Event, a Launch or a Stream, not {type(what).__name__}")
        elif what._worker is not worker:
            raise PtoArgumentError("Stream.wait(): the event belongs to another worker")
        self._keep.append(what)
        self._add(WAIT_EXT, slot, (what,))

    def _wait_node(self, slot: int, what, inferred: bool) -> None:
        """Record a wait on `slot` for a captured event, or for the event right after a node."""
        event = what.event if isinstance(what, CapturedNode) else what
        self._add(WAIT, slot, (event._index, what.index if inferred else None))
        clock = self._clocks[slot]
        for k, n in event._clock.items():
            if clock.get(k, 0) < n:
                clock[k] = n
        if not inferred and self._hz is not None:  # (an inferred one: the driver took it when it decided it)
            self._hz.waited(slot, event)

    def _pull(self, stream) -> int:
        """The slot of `stream`, pulling it into the capture if new (a fork)."""
        slot = self._slots.get(stream)
        if slot is None:
            accept(self._worker, stream)
            slot = len(self._streams)
            self._slots[stream] = slot
            self._streams.append(stream)
            self._clocks.append({})
            self._counts.append(0)
            if self._hz is not None:
                self._hz.stream(stream)
        return slot

    def _check_joined(self) -> None:
        origin = self._clocks[0]
        for slot in range(1, len(self._streams)):
            n = self._counts[slot]
            if origin.get(slot, 0) < n:
                stream = self._streams[slot]
                raise PtoCaptureError(
                    f"capture {self.name!r}: stream {stream.id} was forked into the capture and not joined "
                    f"back ({n - origin.get(slot, 0)} of its commands are not waited for); end with "
                    f"cap.stream.wait(stream)")

    def own(self, t: DeviceTensor) -> None:
        """A tensor allocated inside the capture: the graph owns it."""
        self._owned.append(t)
