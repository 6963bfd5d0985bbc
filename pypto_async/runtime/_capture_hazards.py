"""Data hazards inside a capture: edges between captured commands, derived once, at capture time.

Eager launches and copies are ordered across streams as they are queued
(:mod:`._hazards`).  A capture records instead of queuing, so the same rule
(:func:`pypto_async._hazard_rule.hazard`) is applied to what it records:
per DeviceTensor (inputs, tensors used directly, tensors allocated inside),
the last captured write and the captured reads since, one per capture stream
slot.  A captured launch or copy on slot B that conflicts with an access on
another slot A gets an edge A -> B: a graph event recorded right after A's
node, and a wait for it on B before the new node, the very commands an
explicit ``stream_b.wait(node)`` captures.  They are part of the graph, so a
replay pays nothing extra for them.

Positions are the capture's own: the n-th command recorded on a slot is at
position n there, and each slot's clock (``Capture._clocks``) says how many
commands of every slot it is ordered behind, through the waits captured so
far, yours and inferred ones.  An edge to a node the clock covers is implied
and not added (counted as skipped); nor is one to a node that another edge
of the same call covers.  Same-slot order is free, read-read never ordered.

Opt-outs are those of eager work, as they stand when the call is captured:
``alloc_tensor(..., manual_deps=True)``, ``with w.manual_deps():`` (the
capturing task's), ``RunConfig(auto_deps=False)``.  Where the ordering is
yours and the sanitizer is on, a conflicting access the captured waits do
not order raises :class:`~pypto_async.errors.PtoRaceError` (or warns) from
the capturing call, before anything of it is recorded, naming both sides
(kernel or copy, parameter, direction, stream, file:line).

What a graph touches across its boundary (eager work, other replays) is
ordered at each replay, on its origin stream (:meth:`~._graph.Graph._order`).
"""

from __future__ import annotations

from .._hazard_rule import hazard
from ._hazards import _manual
from ._sanitizer import describe

__all__ = ["CaptureHazards"]


class CaptureHazards:
    """A capture's hazard bookkeeping (see the module docstring).

    Attributes
    ----------
    inferred, skipped : int
        Edges added to the recording; edges not added because captured
        waits imply them.
    """

    __slots__ = ("cap", "hz", "inferred", "skipped", "_state")

    def __init__(self, cap, hz):
        self.cap = cap
        self.hz = hz  # the worker's Hazards
        self.inferred = 0
        self.skipped = 0
        # id(tensor) -> [last write, {slot: last read since}]; an access: (slot, position, node, what)
        self._state: dict[int, list] = {}

    def plan(self, slot: int, accesses: list, label: str):
        """The edges a call on `slot` needs, or raise if the sanitizer finds a race; nothing is recorded.

        `accesses` are ``(tensor, name, reads, writes)``.  Returns ``(nodes
        to wait for, notes)``: :meth:`Capture._access` records the waits,
        then the call's node, then hands the notes to :meth:`note`.
        """
        hz = self.hz
        sanitizing = hz.mode != "off"
        region = self.cap._worker in _manual.get() if _manual.get() else False
        clock = self.cap._clocks[slot]
        state = self._state
        need: dict[int, tuple] = {}  # slot -> (position, node): the latest access there to wait for
        notes = []
        site = None
        for t, name, reads, writes in accesses:
            if t._manual and not sanitizing:
                continue
            manual = region or t._manual or not hz.auto
            entry = state.get(id(t))
            earlier = []
            if entry is not None:
                w = entry[0]
                if w is not None and w[0] != slot and hazard(reads, writes, False, True):
                    earlier.append((w, "write"))
                if entry[1] and hazard(reads, writes, True, False):
                    earlier.extend((r, "read") for s, r in entry[1].items() if s != slot)
            for prev, how in earlier:
                src, pos, node, what = prev
                if clock.get(src, 0) >= pos:
                    if not manual:
                        self._skip()  # a captured wait orders it already
                elif not manual:
                    have = need.get(src)
                    if have is not None:
                        self._skip()  # one wait per slot and call
                    if have is None or have[0] < pos:
                        need[src] = (pos, node)
                elif sanitizing:
                    if site is None:
                        site = hz.sanitizer.site()
                    self._race(t, name, prev, how, describe(label, name, reads, writes, self._stream(slot), site))
            if sanitizing and site is None:
                site = hz.sanitizer.site()
            what = describe(label, name, reads, writes, self._stream(slot), site) if sanitizing else None
            notes.append((t, writes, what))
        waits = []
        for src, (pos, node) in need.items():
            if any(other is not node and other._clock.get(src, 0) >= pos for _, other in need.values()):
                self._skip()  # the wait for another slot's node orders it
            else:
                waits.append(node)
        return waits, notes

    def note(self, notes: list, node) -> None:
        """Remember the accesses of the call just recorded as `node`."""
        slot = node._cmd.slot
        state = self._state
        for t, writes, what in notes:
            acc = (slot, node._clock[slot], node, what)
            entry = state.get(id(t))
            if entry is None:
                entry = state[id(t)] = [None, None]
            if writes:
                entry[0] = acc
                entry[1] = None
            elif entry[1] is None:
                entry[1] = {slot: acc}
            else:
                entry[1][slot] = acc

    def count(self) -> None:
        """One edge added (also the worker's ``stats().inferred_waits``)."""
        self.inferred += 1
        with self.cap._worker._lock:  # the worker's counters: other threads count there too
            self.hz.inferred += 1

    def _skip(self) -> None:
        self.skipped += 1
        with self.cap._worker._lock:
            self.hz.skipped += 1

    def _stream(self, slot: int):
        return self.cap._streams[slot]

    def _race(self, t, name: str, prev, how: str, second: str) -> None:
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

