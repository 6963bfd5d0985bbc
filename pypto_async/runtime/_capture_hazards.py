"""Data hazards inside a capture: edges between captured commands, decided by the driver, once, at capture time.

Eager launches and copies are ordered across streams as they are queued
(:mod:`._hazards`).  A capture records instead of queuing, and asks the
driver's rule all the same: each capture has its own ``pto_hazards`` table
of points (``pto_hazards_create_points``), whose streams are the capture's
streams and whose positions are the capture's own (one per recorded access,
in recording order).  For each captured launch or copy the driver decides
the edges (``pto_hazards_decide``: the same rule as eager work's, queuing
nothing), takes them into the stream's clock and notes the accesses; an
edge from stream A is a wait, on the later stream, for the point right
after the latest conflicting access on A: a graph event recorded after that
node, and a wait for it before the new node, the very commands an explicit
``stream_b.wait(node)`` captures.  They are part of the graph, so a replay
pays nothing for them.

The driver's table knows the captured waits too: each node and each
``stream.record()`` takes a mark of its point (``pto_hazards_mark``), and a
captured wait for it hands the mark over (``pto_hazards_waited``).  An edge
that a captured wait implies is skipped, as is one that another edge of the
same call implies.  Same-stream order is free, read-read never ordered.

Opt-outs are those of eager work, as they stand when the call is captured:
``alloc_tensor(..., manual_deps=True)``, ``with w.manual_deps():`` (the
capturing task's), ``RunConfig(auto_deps=False)``.  Where the ordering is
yours and the sanitizer is on, a conflicting access the captured waits do
not order raises :class:`~pypto_async.errors.PtoRaceError` (or warns) from
the capturing call, before anything of it is recorded, naming both sides
(kernel or copy, parameter, direction, stream, file:line).  The sanitizer
stays in Python, as for eager work: its own records of the accesses with
their call sites, checked against the capture's vector clocks.

What a graph touches across its boundary (eager work, other replays) is
ordered at each replay, on its origin stream (:meth:`~._graph.Graph._order`).
"""

from __future__ import annotations

from .._driver import check, ffi, lib
from ._hazards import _manual
from ._sanitizer import describe

__all__ = ["CaptureHazards"]

_READ = lib.PTO_HZ_READ
_WRITE = lib.PTO_HZ_WRITE
_MANUAL = lib.PTO_HZ_MANUAL
_mark_release = lib.pto_hz_mark_release


class CaptureHazards:
    """A capture's hazard bookkeeping (see the module docstring).

    Attributes
    ----------
    inferred, skipped : int
        Edges added to the recording; edges not added because captured
        waits imply them (the capture table's counts).
    """

    __slots__ = ("cap", "hz", "table", "inferred", "skipped", "_pos", "_nodes", "_state", "_edges", "_counts")

    def __init__(self, cap, hz):
        self.cap = cap
        self.hz = hz  # the worker's Hazards
        self.inferred = 0
        self.skipped = 0
        out = ffi.new("pto_hazards **")
        check(lib.pto_hazards_create_points(cap._worker._dev, out), "pto_hazards_create_points")
        self.table = ffi.gc(out[0], lib.pto_hazards_destroy)  # (a capture never entered is collected)
        self._pos = 0  # the capture's positions: one per access (a launch's or copy's), in recording order
        self._nodes: dict[int, object] = {}  # position -> the CapturedNode whose accesses are noted there
        # The sanitizer's records (only while it is on): id(tensor) -> [last write, {slot: last read since}];
        # an access: (slot, count on the slot, node, what).
        self._state: dict[int, list] = {}
        self._edges = ffi.new("pto_hz_edge[]", 8)
        self._counts = ffi.new("uint64_t[2]")

    def close(self) -> None:
        """Destroy the driver's table (the recording is over; marks outlive it)."""
        table, self.table = self.table, None
        if table is not None:
            ffi.release(table)

    def stream(self, stream) -> None:
        """A stream joined the capture: register it with the table."""
        check(lib.pto_hazards_stream(self.table, stream._ptr), "pto_hazards_stream")

    def mark(self, slot: int):
        """The driver's mark of a point recorded on `slot` now (a node just recorded, or a record)."""
        return ffi.gc(lib.pto_hazards_mark(self.table, self.cap._streams[slot]._id, self._pos + 1), _mark_release)

    def waited(self, slot: int, event) -> None:
        """A captured wait on `slot` for `event` (a :class:`~._capture.CapturedEvent`)."""
        if event._mark is not None:
            lib.pto_hazards_waited(self.table, self.cap._streams[slot]._id, event._mark)

    def check(self, slot: int, accesses: list, label: str):
        """Raise (or warn) if the sanitizer finds a race; the plan of the call, for :meth:`decide`.

        `accesses` are ``(tensor, name, reads, writes)``.  Nothing is
        recorded or decided yet: the call may still be refused.
        """
        hz = self.hz
        sanitizing = hz.mode != "off"
        region = self.cap._worker in _manual.get() if _manual.get() else False
        plan = []  # (key, flags, tensor, writes, what)
        site = None
        for t, name, reads, writes in accesses:
            if t._manual and not sanitizing:
                continue
            manual = region or t._manual or not hz.auto
            what = None
            if sanitizing:
                if site is None:
                    site = hz.sanitizer.site()
                what = describe(label, name, reads, writes, self._stream(slot), site)
                if manual:
                    self._check(slot, t, name, reads, writes, what)
            flags = (_READ if reads else 0) | (_WRITE if writes else 0) | (_MANUAL if manual else 0)
            plan.append((id(t), flags, t, writes, what))  # keyed by the tensor: inputs have no address
        return plan

    def decide(self, slot: int, plan: list) -> list:
        """The driver's edges for the call `plan` stands for: the nodes to wait for, in order.

        The accesses are noted at the call's position; :meth:`note` then
        names the node recorded there.
        """
        self._pos += 1
        pos = self._pos
        n = len(plan)
        if not n:
            return []
        acc = ffi.new("pto_hz_access[]", n)
        for e, (key, flags, *_) in zip(acc, plan):
            e.addr = key
            e.flags = flags
        sid = self.cap._streams[slot]._id
        edges = self._edges
        k = lib.pto_hazards_decide(self.table, sid, acc, n, pos, edges, len(edges))
        if k > len(edges):
            edges = self._edges = ffi.new("pto_hz_edge[]", 2 * k)
            k = lib.pto_hazards_decide(self.table, sid, acc, n, pos, edges, len(edges))
        check(k, "pto_hazards_decide")
        self._count()
        return [self._nodes[edges[i].pos] for i in range(k)]

    def note(self, plan: list, node) -> None:
        """The call just recorded as `node`: its position names it; the sanitizer's records of its accesses."""
        self._nodes[self._pos] = node
        if self.hz.mode == "off":
            return
        slot = node._cmd.slot
        state = self._state
        acc = (slot, node._clock[slot], node)
        for _, _, t, writes, what in plan:
            entry = state.get(id(t))
            if entry is None:
                entry = state[id(t)] = [None, None]
            if writes:
                entry[0] = (*acc, what)
                entry[1] = None
            elif entry[1] is None:
                entry[1] = {slot: (*acc, what)}
            else:
                entry[1][slot] = (*acc, what)

    def _count(self) -> None:
        """Take the table's counts; add what changed to the worker's (``stats().inferred_waits``)."""
        c = self._counts
        lib.pto_hazards_counts(self.table, c)
        inferred, skipped = int(c[0]), int(c[1])
        if inferred != self.inferred or skipped != self.skipped:
            with self.cap._worker._lock:  # the worker's counters: other threads count there too
                self.hz.inferred_here += inferred - self.inferred
                self.hz.skipped_here += skipped - self.skipped
            self.inferred, self.skipped = inferred, skipped

    def _check(self, slot: int, t, name: str, reads: bool, writes: bool, what: str) -> None:
        """The sanitizer: a conflicting access on another slot the captured waits do not order is a race."""
        entry = self._state.get(id(t))
        if entry is None:
            return
        clock = self.cap._clocks[slot]
        earlier = []
        w, readers = entry
        if w is not None and w[0] != slot and (reads or writes):
            earlier.append((w, "write"))
        if readers and writes:
            earlier.extend((r, "read") for s, r in readers.items() if s != slot)
        for prev, how in earlier:
            if clock.get(prev[0], 0) < prev[1]:
                self._race(t, prev, how, what)

    def _stream(self, slot: int):
        return self.cap._streams[slot]

    def _race(self, t, prev, how: str, second: str) -> None:
        first = prev[3] or f"an access on stream {self._stream(prev[0]).id} (its call site unknown: captured " \
                           "while the sanitizer was off)"
        message = (f"data race in capture {self.cap.name!r} on {self._tensor_name(t)}: {second} is not "
                   f"ordered after the {how} by {first}; add stream.wait(...) between them, or leave the "
                   "ordering to auto_deps")
        self.hz.sanitizer.report(message, first, second)

    def _tensor_name(self, t) -> str:
        k = self.cap._input_ids.get(id(t))
        if k is not None:
            return f"input {self.cap._inputs[k].name!r}"
        return f"DeviceTensor shape={t._shape} dtype={t._dtype.np_name} at 0x{t._ptr:x}"
