"""A pure-Python reference model of what the device and runtime promise.

The model executes a command program serially, in the order the host issues
it, and predicts every buffer's final contents and every Launch's outcome.
It knows nothing of threads, rings or engines; it follows the rules of
``native/include/pto_driver.h`` and ``pypto_async/runtime`` instead:

1. Commands on one stream run in order.  A stream that waits on an event runs
   what follows only after everything recorded before the event.
2. Copies and launches read and write buffers; a failed command writes
   nothing.
3. A command that fails on its own (kernel fault, injected fault) is the
   stream's *first failure*.  Every later command on that stream fails with a
   dependency error until the failure is *observed*, and so does every command
   on a stream that waits on an event recorded after the failure (the wait
   itself becomes that stream's first failure, carrying the same cause).
   Commands issued after the observation run normally.  A failure is observed
   when the host delivers it to the user: awaiting (or ``result()`` /
   ``exception()`` of) a Launch, or awaiting an Event or a stream (``await
   stream``, ``stream.sync()``: a marker, which raises what an event recorded
   there would), raises the failure or a dependency error behind it
   (:meth:`Model.observe_raised`, :meth:`Model.observe_event`,
   :meth:`Model.barrier`).  That observes the failure of the stream the
   delivered command failed on, and, when that failure came through an event
   wait, the failure it came from, along the chain of such waits.  Draining
   records observes nothing (``pto_completion_observe``).
4. The runtime adds implicit commands that the model must mirror exactly:
   the first use of a tensor on a stream other than the ones that used it
   before records an event on its allocation stream and waits on it; a free
   records an ordering-only event on every other stream that used the tensor
   and waits on each first (ordered behind their work, not failed by their
   failures); a launch with host arrays is a group (H2D copies, the kernel,
   D2H copies, frees of the temporaries) whose error is its first failure.
5. With automatic ordering (``Model(auto_deps=True)``, the runtime's
   default), a launch or copy that touches a DeviceTensor last written on
   another stream (or, when it writes, read there since) first records an
   event on that stream and waits on it, after the first-use joins; the
   driver's rule (``hazard_model.py``, ``native/src/hazard.c``); the edges come before the
   first-use joins.  An edge is left out when the stream's hazard clock
   (merged only through events that carry failures) shows one queued
   already, or another stream the call waits for has waited for that access
   itself; each other stream is waited for once per call; a join is left out
   when an edge to the allocation stream covers its point.  An edge's record
   and wait are not the caller's commands: an injected failure passes them by
   and hits the next command.  Without the sanitizer (``homes=True``) a tensor written on a stream
   and used only there since is summed up, when another stream comes, as a
   write at that stream's last data command, as the runtime does.

Executing in issue order is a valid linearisation only for race-free
programs: two accesses to one buffer, one of them a write, must be ordered
by stream order or events.  The model tracks that with vector clocks and
answers :meth:`Model.conflicts` so a program generator can order racing
accesses (record + wait) before issuing them.  The same clocks say whether
a command is held behind a latch (:meth:`Model.blocked`).

Contents are float32 vectors; ``None`` means "unknown" (fresh device memory,
or computed from unknown data): the model predicts nothing for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "KERNELS",
    "OK",
    "KERNEL_FAULT",
    "COPY_FAULT",
    "DEPENDENCY",
    "Failure",
    "Model",
    "MTensor",
    "MHost",
    "MLaunch",
    "MEvent",
]

OK = "ok"
KERNEL_FAULT = "PtoKernelFault"
COPY_FAULT = "PtoCopyFault"
DEPENDENCY = "PtoDependencyError"

# name -> (parameter directions, function of the input vectors -> output vectors)
# Directions: "in", "out", "inout", "scalar".  Functions take the values of the
# in/inout/scalar parameters in order and return the values of out/inout ones.
KERNELS: dict[str, tuple[tuple[str, ...], object]] = {
    "add": (("in", "in", "out"), lambda a, b: (a + b,)),
    "scale": (("in", "scalar", "out"), lambda x, alpha: (np.float32(alpha) * x,)),
    "inc": (("inout",), lambda x: (x + np.float32(1.0),)),
    "copy": (("in", "out"), lambda x: (x.copy(),)),
    "fail": (("in",), None),  # fails through blk->fail: PtoKernelFault
}


@dataclass(frozen=True)
class Failure:
    """A first failure: which command failed on its own, and with what."""

    uid: int          # a unique id of the failing command
    kind: str         # KERNEL_FAULT or COPY_FAULT (never DEPENDENCY)
    stream: int       # the stream it failed on
    pos: int          # its position on that stream


@dataclass
class MStream:
    index: int
    pos: int = 0                                    # commands issued on it so far
    clock: dict[int, int] = field(default_factory=dict)   # stream -> position known complete before next
    fail: Failure | None = None                     # unobserved first failure (or its propagation)
    fail_pos: int = 0                               # where this stream's failure happened
    fail_no: int = 0                                # failures so far: the current one's number
    fail_from: tuple[int, int] | None = None        # (stream, number) it came from through a wait
    inject: str | None = None                       # the next command fails with this kind
    latches: list = field(default_factory=list)     # (latch id, pos) held
    hold_clock: dict[int, int] = field(default_factory=dict)  # like clock, merged by every wait
    hclock: dict[int, int] = field(default_factory=dict)  # the runtime's Stream._clock (auto ordering)
    last_data: int = 0                              # position of the last command of its last data call


@dataclass
class MTensor:
    uid: int
    n: int
    birth: int
    data: np.ndarray | None
    streams: list[int] = field(default_factory=list)   # streams that used it, in first-use order
    freed: bool = False
    last_write: tuple[int, int] | None = None          # (stream, pos)
    reads: dict[int, int] = field(default_factory=dict)
    init: MLaunch | None = None                        # the last copy that filled it entirely
    ready: MEvent | None = None                        # recorded right after allocation and init
    home: int | None = None                            # auto ordering's state (runtime/_hazards.py)
    hw: tuple | None = None                            # its last write: (stream, position, exact event)
    hr: dict[int, int] | None = None                   # the reads since: stream -> position


@dataclass
class MHost:
    uid: int
    data: np.ndarray | None   # None: unknown (never happens for fresh host arrays)
    last_write: tuple[int, int] | None = None
    reads: dict[int, int] = field(default_factory=dict)


@dataclass
class MLaunch:
    uid: int
    stream: int
    pos: int                 # position of its last command
    clock: dict[int, int]    # what must have completed for it to complete
    outcome: str = OK
    cause: Failure | None = None   # the first failure behind a dependency error
    ambiguous: bool = False        # the cause depends on an unordered set's order
    epoch: int = 0                 # the host sync epoch it was issued in
    resolved: bool = False         # the host has certainly drained all its records
    fail_ref: tuple[int, int] | None = None  # (stream, failure number) its error is or depends on
    hold_clock: dict[int, int] = field(default_factory=dict)  # what may hold it back (latches)


@dataclass
class MEvent:
    uid: int
    stream: int
    pos: int
    clock: dict[int, int]
    fail: Failure | None
    hold_clock: dict[int, int] = field(default_factory=dict)
    hclock: dict[int, int] | None = None   # for hazard clocks: None for an ordering-only point
    fail_src: tuple[int, int] | None = None  # (stream, failure number) it carries


def _merge(a: dict[int, int], b: dict[int, int]) -> None:
    for k, v in b.items():
        if a.get(k, 0) < v:
            a[k] = v


class Model:
    """The reference model of one worker: streams, tensors, host arrays, launches, events.

    Parameters
    ----------
    streams : int
        How many streams (0 is the default stream).
    join_on_ready : bool
        How the runtime joins a tensor's first use on another stream: False, with an event
        recorded on its allocation stream at that moment; True, with the event recorded right
        after its allocation (and initial copy).
    auto_deps, homes : bool
        Rule 5: automatic ordering of DeviceTensors across streams; and whether a tensor's
        home stream is summed up (the runtime without its sanitizer) or every access recorded.
    """

    def __init__(self, streams: int, *, join_on_ready: bool = False, auto_deps: bool = False,
                 homes: bool = False):
        self.join_on_ready = join_on_ready
        self.auto_deps = auto_deps
        self.homes = homes
        self.inferred = 0  # the waits rule 5 inserted
        self.streams = [MStream(i) for i in range(streams)]
        self.tensors: dict[int, MTensor] = {}
        self.hosts: dict[int, MHost] = {}
        self.launches: dict[int, MLaunch] = {}
        self.events: dict[int, MEvent] = {}
        self._uid = 0
        self.epoch = 0   # host sync points so far: records are drained only at sync points

    # -- bookkeeping ------------------------------------------------------------------

    def _next(self) -> int:
        self._uid += 1
        return self._uid

    def _clock_of(self, s: MStream) -> dict[int, int]:
        """The vector clock of the next command on s (before issuing it)."""
        c = dict(s.clock)
        c[s.index] = s.pos
        return c

    def _hold_clock_of(self, s: MStream) -> dict[int, int]:
        c = dict(s.hold_clock)
        _merge(c, s.clock)
        c[s.index] = s.pos
        return c

    def _issue(self, s: MStream, kind: str, *, data: bool,
               injectable: bool = True) -> tuple[int, str, Failure | None, bool]:
        """Issue one driver command on s: return (pos, status, cause, own).

        status is OK, DEPENDENCY, or the injected failure kind.  The stream's
        failure state is updated; the command's effects are the caller's.
        A command that is not `injectable` leaves a pending injection to the
        next one.
        """
        s.pos += 1
        pos = s.pos
        # The driver marks the command at submit; an earlier failure still wins when it runs.
        injected = None
        if injectable:
            injected, s.inject = s.inject, None
        if s.fail is not None:
            return pos, DEPENDENCY, s.fail, False
        if injected is not None:
            kind_ = injected
            f = Failure(self._next(), kind_, s.index, pos)
            self._fail(s, f, pos)
            return pos, kind_, f, True
        return pos, OK, None, False

    def _fail(self, s: MStream, f: Failure, pos: int, came_from: tuple[int, int] | None = None) -> None:
        """Make `f` the first failure of s, at `pos` (`came_from`: the event's failure it came through)."""
        s.fail, s.fail_pos = f, pos
        s.fail_no += 1
        s.fail_from = came_from

    def _record(self, s: MStream, ordering: bool = False, edge: bool = False) -> MEvent:
        clock = self._clock_of(s)
        # An ordering-only record (pto_stream_record_ordering) is a point, and an inferred
        # edge's record not the caller's command: injected failures do not hit them.
        pos, status, cause, own = self._issue(s, "record", data=False, injectable=not ordering and not edge)
        clock[s.index] = pos
        # A record completes its event carrying the stream's failure; an ordering-only record
        # never carries it.
        fail = s.fail if status != OK and not ordering else None
        ev = MEvent(self._next(), s.index, pos, clock, fail, self._hold_clock_of(s),
                    None if ordering else {**s.hclock, s.index: pos},
                    fail_src=(s.index, s.fail_no) if fail is not None else None)
        self.events[ev.uid] = ev
        return ev

    def _wait(self, s: MStream, ev: MEvent, edge: bool = False) -> None:
        pos, status, cause, own = self._issue(s, "wait", data=False, injectable=not edge)
        # Even a wait that fails at once may be held on the host until its event's record
        # entered a ring (the runtime gates it), so for latches every wait counts.
        _merge(s.hold_clock, ev.clock)
        _merge(s.hold_clock, getattr(ev, "hold_clock", {}))
        if ev.hclock is not None:  # the runtime merges as it queues the wait, whatever its fate
            for k, v in ev.hclock.items():
                if (k != s.index or k == ev.stream) and s.hclock.get(k, 0) < v:
                    s.hclock[k] = v
        if status == OK:
            _merge(s.clock, ev.clock)
            if ev.fail is not None:
                # The wait fails on its own with EDEP: s's first failure, same cause.
                self._fail(s, ev.fail, pos, ev.fail_src)
        elif status == DEPENDENCY:
            # On a failed stream a wait still waits for its event, then fails as a dependent:
            # a stream-ordered free behind it stays ordered after the other stream's work.
            _merge(s.clock, ev.clock)
        # An injected failure fails the wait itself at once: it waits for nothing.

    def _join_first_use(self, t: MTensor, s: MStream) -> None:
        if s.index in t.streams:
            return
        ev = t.ready if t.ready is not None else self._record(self.streams[t.birth])
        self._wait(s, ev)
        t.streams.append(s.index)

    def _auto(self, s: MStream, accesses: list) -> list:
        """Rule 5, before the call's commands: insert the edges, join first uses; return what to note.

        `accesses` are ``(MTensor, reads, writes)`` in the runtime's order.
        """
        waits: dict[int, None] = {}
        notes = []
        for t, reads, writes in accesses:
            if t.home is not None and t.home != s.index:
                last = self.streams[t.home].last_data
                exact = t.hw[2] if t.hw is not None and t.hw[1] == last else None
                t.hw, t.hr, t.home = (t.home, last, exact), None, None
            earlier = []
            if t.hw is not None and t.hw[0] != s.index and (reads or writes):
                earlier.append(t.hw)
            if writes and t.hr:
                earlier.extend((st, pos, None) for st, pos in t.hr.items() if st != s.index)
            for st, pos, exact in earlier:
                if s.hclock.get(st, 0) > pos:
                    continue
                if st not in waits:
                    waits[st] = (pos, exact)
                    continue
                # One wait per stream: the latest position, and an exact event after both if any.
                latest = max(waits[st][0], pos)
                usable = [ev for ev in (waits[st][1], exact) if ev is not None and ev.pos > latest]
                waits[st] = (latest, min(usable, key=lambda ev: ev.pos) if usable else None)
            notes.append((t, writes))
        # A stream that waited for the access itself covers it (the runtime prunes in this order).
        for a in list(waits):
            for b in list(waits):
                if b != a and self.streams[b].hclock.get(a, 0) > waits[a][0]:
                    del waits[a]
                    break
        for st, (_, exact) in waits.items():
            self._wait(s, exact if exact is not None else self._record(self.streams[st], edge=True), edge=True)
            self.inferred += 1
        for t, _, _ in accesses:
            ready = t.ready if self.join_on_ready else None
            if s.index not in t.streams and ready is not None and s.hclock.get(ready.stream, 0) > ready.pos:
                t.streams.append(s.index)  # an edge just queued covers the join
            else:
                self._join_first_use(t, s)
        return notes

    def _noted(self, notes: list, s: MStream, pos: int) -> None:
        """Rule 5, after the call's commands: the accesses at `pos` (the kernel's or the copy's)."""
        for t, writes in notes:
            if writes:
                t.hw, t.hr = (s.index, pos, None), None
                if self.homes:
                    t.home = s.index
            elif t.hr is None:
                t.hr = {s.index: pos}
            else:
                t.hr[s.index] = pos

    # -- queries for a generator ------------------------------------------------------------

    def conflicts(self, stream: int, reads=(), writes=()) -> set[int]:
        """Return the streams whose earlier accesses race with these on `stream`.

        `reads` and `writes` hold MTensor or MHost objects.  Ordering the
        returned streams before the access (record there, wait here) makes it
        race-free.
        """
        s = self.streams[stream]
        clock = self._clock_of(s)
        out: set[int] = set()

        def ordered(acc):
            st, pos = acc
            return st == stream or clock.get(st, 0) >= pos

        for b in list(reads) + list(writes):
            if b.last_write is not None and not ordered(b.last_write):
                out.add(b.last_write[0])
        for b in writes:
            for st, pos in b.reads.items():
                if not ordered((st, pos)):
                    out.add(st)
        return out

    def blocked(self, clock: dict[int, int]) -> bool:
        """Return True if a command with this clock waits behind a held latch."""
        for s in self.streams:
            for _, pos in s.latches:
                if clock.get(s.index, 0) >= pos:
                    return True
        return False

    def unobserved(self) -> list[MStream]:
        """Streams whose first failure the host has not observed yet."""
        return [s for s in self.streams if s.fail is not None]

    # -- the program ------------------------------------------------------------------------------

    def alloc(self, n: int, stream: int, init: np.ndarray | None) -> MTensor:
        """alloc_tensor((n,), f32, init=..., stream=stream); the init copy has no Launch."""
        s = self.streams[stream]
        t = MTensor(self._next(), n, stream, None, streams=[stream])
        self.tensors[t.uid] = t
        if init is not None:
            lc = self._new_launch(stream)
            pos, status, cause, own = self._issue(s, "h2d", data=True)
            if status == OK:
                t.data = np.array(init, dtype=np.float32, copy=True)
            t.last_write = (stream, pos)
            self._finish(lc, s, pos, status, cause)
            t.init = lc
            s.last_data = pos
        if self.join_on_ready:
            # Without an initial copy the point stands for no result (runtime: ordering-only).
            t.ready = self._record(s, ordering=init is None)
        if self.auto_deps and init is not None:
            t.hw = (stream, t.last_write[1], t.ready)  # the ready point is an exact one for this write
            if self.homes:
                t.home = stream
        return t

    def init_state(self, t: MTensor) -> str:
        """Whether using `t` now passes the runtime's check of its initial copy.

        ``"ok"``: the call goes ahead; ``"raise"``: it raises a dependency error
        before queueing anything (the initial copy failed and the host saw it);
        ``"unknown"``: the host may or may not have seen that failure yet.
        """
        lc = t.init
        if lc is None or lc.outcome == OK:
            return "ok"
        if lc.resolved:
            return "raise"
        return "ok" if lc.epoch == self.epoch else "unknown"

    def host(self, data: np.ndarray) -> MHost:
        """A host array the program owns."""
        h = MHost(self._next(), np.array(data, dtype=np.float32, copy=True))
        self.hosts[h.uid] = h
        return h

    def record(self, stream: int) -> MEvent:
        """stream.record()."""
        return self._record(self.streams[stream])

    def wait(self, stream: int, ev: MEvent) -> None:
        """stream.wait(event)."""
        self._wait(self.streams[stream], ev)

    def latch(self, stream: int, latch_id: int) -> None:
        """A latch wait queued on the stream (token 0)."""
        s = self.streams[stream]
        pos, status, cause, own = self._issue(s, "latch", data=False)
        if status == OK:
            s.latches.append((latch_id, pos))

    def release(self, latch_id: int) -> None:
        for s in self.streams:
            s.latches = [(i, p) for i, p in s.latches if i != latch_id]

    def inject(self, stream: int, kind: str = COPY_FAULT) -> None:
        """fail_next(stream): the next driver command on the stream fails with `kind`."""
        self.streams[stream].inject = kind

    def free(self, t: MTensor, stream: int) -> None:
        """free_tensor(t, stream=stream): join the other users, then a stream-ordered free."""
        s = self.streams[stream]
        for u in t.streams:
            if u != stream:
                # Ordering only: the free waits for u's work, not for u's failures.
                self._wait(s, self._record(self.streams[u], ordering=True))
        self._issue(s, "free", data=False)
        t.freed = True

    def _finish(self, launch: MLaunch, s: MStream, pos: int, status: str, cause: Failure | None):
        if launch.outcome == OK and status != OK:
            launch.outcome = status
            launch.cause = cause if status == DEPENDENCY else None
            launch.fail_ref = (s.index, s.fail_no)  # its own failure, or the one it depends on
        launch.pos = pos
        launch.clock = self._clock_of(s)
        launch.hold_clock = self._hold_clock_of(s)

    def _new_launch(self, stream: int) -> MLaunch:
        lc = MLaunch(self._next(), stream, 0, {}, epoch=self.epoch)
        self.launches[lc.uid] = lc
        return lc

    def _touch(self, b, s: MStream, pos: int, write: bool) -> None:
        if write:
            b.last_write = (s.index, pos)
            b.reads = {}
        else:
            b.reads[s.index] = max(b.reads.get(s.index, 0), pos)

    def copy(self, dst, src, stream: int) -> MLaunch:
        """w.copy(dst, src, stream=stream): H2D, D2H or D2D (one command, one Launch)."""
        s = self.streams[stream]
        notes = None
        if self.auto_deps:
            notes = self._auto(s, [(b, b is src, b is dst) for b in (dst, src) if isinstance(b, MTensor)])
        else:
            for b in (dst, src):
                if isinstance(b, MTensor):
                    self._join_first_use(b, s)
        lc = self._new_launch(stream)
        pos, status, cause, own = self._issue(s, "copy", data=True)
        s.last_data = pos
        if notes is not None:
            self._noted(notes, s, pos)
        if status == OK:
            dst.data = None if src.data is None else src.data.copy()
        self._touch(src, s, pos, False)
        self._touch(dst, s, pos, True)
        self._finish(lc, s, pos, status, cause)
        if isinstance(dst, MTensor):
            dst.init = lc  # a full overwrite: the tensor is as good as this copy
        return lc

    def launch(self, kernel: str, args: list, stream: int) -> MLaunch:
        """handle(*args, stream=stream) for a kernel of :data:`KERNELS`.

        Tensor arguments are MTensor (resident) or MHost (copied in and out as
        a command group); scalars are floats.
        """
        dirs, fn = KERNELS[kernel]
        s = self.streams[stream]
        notes = None
        if self.auto_deps:
            # The bind step's slow path takes the tensors whose home is not this stream.
            notes = self._auto(s, [(a, d in ("in", "inout"), d in ("out", "inout")) for a, d in zip(args, dirs)
                                   if isinstance(a, MTensor) and not (self.homes and a.home == s.index)])
        else:
            for a in args:
                if isinstance(a, MTensor):
                    self._join_first_use(a, s)
        lc = self._new_launch(stream)
        hosts = [(a, d) for a, d in zip(args, dirs) if isinstance(a, MHost)]
        # The group: H2D for in/inout host arrays, the launch, D2H for out/inout, frees.
        status_all = []
        for a, d in hosts:
            if d in ("in", "inout"):
                pos, status, cause, own = self._issue(s, "h2d", data=True)
                self._finish(lc, s, pos, status, cause)
                status_all.append(status)
        pos, status, cause, own = self._issue(s, "launch", data=True)
        kpos = pos
        ran = status == OK and all(st == OK for st in status_all)
        if status == OK and fn is None:
            f = Failure(self._next(), KERNEL_FAULT, s.index, pos)
            self._fail(s, f, pos)
            status = KERNEL_FAULT
            ran = False
        self._finish(lc, s, pos, status, cause)
        outputs = None
        if ran:
            ins = []
            for a, d in zip(args, dirs):
                if d == "scalar":
                    ins.append(a)
                elif d in ("in", "inout"):
                    ins.append(a.data)
            if any(v is None for v in ins):
                outputs = [None] * sum(d in ("out", "inout") for d in dirs)
            else:
                outputs = list(fn(*ins))
        # Device-side effects of the kernel on resident tensors.
        k = 0
        for a, d in zip(args, dirs):
            if d in ("out", "inout"):
                if isinstance(a, MTensor) and ran:
                    a.data = None if outputs[k] is None else np.asarray(outputs[k], np.float32)
                k += 1
            if isinstance(a, MTensor):
                self._touch(a, s, kpos, d in ("out", "inout"))
        # D2H copies back to host arrays.
        k = 0
        for a, d in zip(args, dirs):
            if d in ("out", "inout"):
                if isinstance(a, MHost):
                    pos, status, cause, own = self._issue(s, "d2h", data=True)
                    self._finish(lc, s, pos, status, cause)
                    if status == OK and ran:
                        a.data = None if outputs[k] is None else np.asarray(outputs[k], np.float32)
                k += 1
        for a, d in zip(args, dirs):
            if isinstance(a, MHost):
                self._touch(a, s, kpos, d in ("out", "inout"))
        for _ in hosts:
            pos, status, cause, own = self._issue(s, "free", data=False)
            self._finish(lc, s, pos, OK, None)   # a free's failure is not the launch's
        lc.pos = s.pos
        lc.clock = self._clock_of(s)
        lc.hold_clock = self._hold_clock_of(s)
        s.last_data = s.pos
        if notes is not None:
            self._noted(notes, s, kpos)
        return lc

    # -- host synchronisation ----------------------------------------------------------------------

    def observe_through(self, clock: dict[int, int]) -> None:
        """The host waited for a command with `clock`: the records in its past are drained.

        That observes no failure (:meth:`observe_raised` does, for the waited launch).
        """
        self.epoch += 1
        for lc in self.launches.values():
            if clock.get(lc.stream, 0) >= lc.pos:
                lc.resolved = True

    def observe_raised(self, lc: MLaunch) -> None:
        """The host delivered `lc`'s error (it raised, or ``exception()`` returned it)."""
        if lc.outcome != OK:
            self._observe(lc.fail_ref)

    def observe_event(self, ev: MEvent) -> None:
        """The host awaited `ev`, and it raised the failure it carries."""
        if ev.fail is not None:
            self._observe(ev.fail_src)

    def _observe(self, ref: tuple[int, int] | None) -> None:
        # The stream's failure if it is still that one, then the one it came from, and so on.
        while ref is not None:
            s = self.streams[ref[0]]
            if s.fail is None or s.fail_no != ref[1]:
                return
            s.fail = None
            s.fail_pos = 0
            ref = s.fail_from

    def barrier(self, order: list[int] | None = None) -> list[Failure | None]:
        """``await stream`` on every stream in turn: everything issued has completed and was drained.

        Each stream's marker (one command) carries the failure the stream
        has when it is queued, as an event recorded there would, and raising
        it observes that failure (:meth:`observe_event`'s rule).  The streams
        are synced in turn (`order`, default by index), so observing one
        stream's failure (and the one it came from) comes before the next
        stream's marker is queued.  Returns what each stream's sync carried,
        in that order (``None``: it raised nothing).
        """
        self.epoch += 1
        for lc in self.launches.values():
            lc.resolved = True
        carried: list[Failure | None] = []
        for i in range(len(self.streams)) if order is None else order:
            s = self.streams[i]
            s.pos += 1
            s.latches = []
            carried.append(s.fail)
            if s.fail is not None:
                self._observe((s.index, s.fail_no))
        return carried
