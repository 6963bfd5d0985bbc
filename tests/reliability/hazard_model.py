"""The reference model of automatic ordering: the rule the driver's ``pto_hazards`` table applies.

Plain Python over dicts, written for reading, not speed.  ``test_hazard_rule.py``
drives the driver's table and this model with the same random access
sequences and compares every decision (the edges, in order, with their
positions and exact points) and the counts.

The rule (the driver's ``native/src/hazard.c``; its pairs are those of the
compile-time task rule, :func:`task_rule_model.hazard`):

* Per allocation: the last write ``(stream, pos, exact)`` and the reads
  since, one per stream, taken in the order of their streams' ids.  A read waits for the last
  write (RAW), a write for the last write (WAW) and the reads (WAR), when
  they are on another stream.  A manual access waits for nothing but is
  noted.
* Per stream, a clock: for every other stream, the largest position of a
  failure-carrying point it waits for.  An earlier access ``(src, pos)`` is
  implied when the clock's ``src`` entry is above ``pos`` (skipped).  Edges
  to one stream in one call combine into one: the latest position, and an
  exact point after both if either has one (the earliest such).
* An edge that another edge of the call implies (that edge's stream's clock
  is above this one's position) is dropped, in the calls' order, against
  the edges still kept.  A clock of more than ``MERGE_MAX`` entries is not
  scanned for this.
* Waiting for a point (an edge from a stream's tail, or a mark taken when
  a point was recorded) merges that stream's clock as it was then into the
  waiter's, unless it has more than ``MERGE_MAX`` entries (then only the
  point itself), never the waiter's own entry.  A clock that grew past two
  entries per live stream and ``CLOCK_SLACK`` drops the gone streams'.  The
  edges of one launch merge at once (:meth:`HazardModel.edges`): that
  drop happens once, after all of them.
* Reads fold: a read by a stream not among the reads, when there are
  ``FOLD_FROM`` already, first folds the reads of closed streams into one
  read of the fold point at the largest of their fold positions.
* A table of points (``HazardModel(points=True)``, the driver's
  ``pto_hazards_create_points``: a graph capture's) queues nothing, and an
  edge waits for the point right after the earlier access, not for that
  stream's tail: each record keeps its stream's clock as it was at the
  access, the dropping above reads that clock, and :meth:`HazardModel.decide`
  (``pto_hazards_decide``) merges it, with the access's position plus one,
  into the waiter's clock, then notes the call's accesses.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["HazardModel", "MERGE_MAX", "CLOCK_SLACK", "FOLD_FROM"]

MERGE_MAX = 32
CLOCK_SLACK = 16
FOLD_FROM = 4
READ, WRITE, MANUAL = 1, 2, 4


@dataclass
class _Stream:
    clock: dict[int, int] = field(default_factory=dict)
    closed: bool = False
    folded: int = 0
    gone: bool = False


@dataclass
class _Tensor:
    writer: tuple[int, int, int] | None = None  # (stream, pos, exact)
    readers: dict[int, int] = field(default_factory=dict)
    # A table of points: the writer's clock at the write, and each reader's at its read.
    wclock: dict = field(default_factory=dict)
    rclocks: dict[int, dict] = field(default_factory=dict)


class HazardModel:
    """The driver's table, in Python: streams by id, allocations by address."""

    def __init__(self, points: bool = False) -> None:
        self.points = points
        self.streams: dict[int, _Stream] = {}
        self.tensors: dict[int, _Tensor] = {}
        self.fold: int | None = None
        self.inferred = 0
        self.skipped = 0

    # -- streams ----------------------------------------------------------------------------

    def stream(self, sid: int) -> None:
        self.streams[sid] = _Stream()

    def closed(self, sid: int, folded: int) -> None:
        s = self.streams[sid]
        s.closed, s.folded = True, folded

    def gone(self, sid: int) -> None:
        s = self.streams[sid]
        s.gone = s.closed = True

    def _live(self) -> int:
        return sum(1 for s in self.streams.values() if not s.gone)

    # -- deciding ---------------------------------------------------------------------------

    def order(self, sid: int, accesses: list[tuple[int, int]]) -> list[tuple[int, int, int, int]]:
        """The edges of one call: ``[(src, pos, exact, index)]`` in the order to queue them."""
        clock = self.streams[sid].clock
        waits: dict[int, list] = {}  # src -> [pos, exact, index]
        points: dict[int, dict] = {}  # src -> the clock of the point the edge waits for
        skipped = 0
        for i, (addr, flags) in enumerate(accesses):
            if flags & MANUAL or not flags & (READ | WRITE):
                continue
            t = self.tensors.get(addr)
            if t is None:
                continue
            earlier = []
            if t.writer is not None and t.writer[0] != sid:
                earlier.append((*t.writer, t.wclock))
            if flags & WRITE:
                earlier.extend((r, pos, 0, t.rclocks.get(r)) for r, pos in sorted(t.readers.items()) if r != sid)
            for src, pos, exact, at in earlier:
                if not self.points:  # what waiting for it orders after: the clock at the access, or src's now
                    at = self.streams[src].clock
                if clock.get(src, 0) > pos:
                    skipped += 1  # implied by a wait queued already
                elif src in waits:
                    skipped += 1  # one wait per stream and call
                    if pos > waits[src][0]:
                        points[src] = at
                    waits[src] = _combine(waits[src], pos, exact, i)
                else:
                    waits[src] = [pos, exact, i]
                    points[src] = at
        for a in list(waits):
            for b in list(waits):
                bclock = points[b]
                if b != a and len(bclock) <= MERGE_MAX and bclock.get(a, 0) > waits[a][0]:
                    del waits[a]
                    skipped += 1
                    break
        self.skipped += skipped
        self._points = points
        return [(src, pos, exact, index) for src, (pos, exact, index) in waits.items()]

    def decide(self, sid: int, accesses: list[tuple[int, int]], pos: int) -> list[tuple[int, int, int, int]]:
        """A table of points: the edges of one call at `pos`, taken (each point's clock) and noted."""
        assert self.points
        edges = self.order(sid, accesses)
        points = self._points
        for src, epos, _, _ in edges:
            self._merge(sid, dict(points[src]), src, epos + 1)
        self.inferred += len(edges)
        self.note(sid, accesses, pos)
        return edges

    def note(self, sid: int, accesses: list[tuple[int, int]], pos: int) -> None:
        for addr, flags in accesses:
            if not flags & (READ | WRITE):
                continue
            t = self.tensors.setdefault(addr, _Tensor())
            if flags & WRITE:
                t.writer = (sid, pos, 0)
                t.readers = {}
                t.rclocks = {}
                if self.points:
                    t.wclock = dict(self.streams[sid].clock)
                continue
            if sid not in t.readers and len(t.readers) >= FOLD_FROM:
                self._fold(t)  # (not with points: a recording closes no streams)
            t.readers[sid] = pos
            if self.points:
                t.rclocks[sid] = dict(self.streams[sid].clock)

    def _fold(self, t: _Tensor) -> None:
        if self.fold is None:
            return
        pos = 0
        for r in [r for r in t.readers if self.streams[r].closed and self.streams[r].folded and r != self.fold]:
            pos = max(pos, self.streams[r].folded)
            del t.readers[r]
        if pos:
            t.readers[self.fold] = max(t.readers.get(self.fold, 0), pos)

    def written(self, sid: int, addr: int, pos: int, exact: int) -> None:
        t = self.tensors.setdefault(addr, _Tensor())
        t.writer = (sid, pos, exact)
        t.readers = {}

    def forget(self, addr: int) -> None:
        self.tensors.pop(addr, None)

    # -- waits ------------------------------------------------------------------------------

    def mark(self, sid: int, pos: int) -> tuple[int, int, dict]:
        """A point recorded on `sid` at `pos`: what waiting for it orders after."""
        return sid, pos, dict(self.streams[sid].clock)

    def waited(self, sid: int, mark: tuple[int, int, dict]) -> None:
        src, pos, snapshot = mark
        self._merge(sid, snapshot, src, pos)

    def edge(self, sid: int, src: int, tok: int) -> None:
        """An edge from `src`'s tail, its wait at `tok`."""
        self.inferred += 1
        self._merge(sid, dict(self.streams[src].clock), src, tok)

    def edges(self, sid: int, srcs: list[int], tok: int) -> None:
        """The edges of one launch (``pto_hazards_launch``), from the tails of `srcs`, all at `tok`.

        One merge of every source's clock (each unless larger than
        ``MERGE_MAX``) and its `tok`: the gone streams' entries are dropped
        once, at the end, if the clock grew past the bound.
        """
        if len(srcs) == 1:
            self.edge(sid, srcs[0], tok)
            return
        self.inferred += len(srcs)
        clock = self.streams[sid].clock
        before = len(clock)
        snapshots = [dict(self.streams[src].clock) for src in srcs]
        for src, snapshot in zip(srcs, snapshots):
            if len(snapshot) <= MERGE_MAX:
                for s, v in snapshot.items():
                    if s != sid and v > clock.get(s, 0):
                        clock[s] = v
            if src != sid and tok > clock.get(src, 0):
                clock[src] = tok
        if len(clock) > before and len(clock) > 2 * self._live() + CLOCK_SLACK:
            for s in [s for s in clock if s not in self.streams or self.streams[s].gone]:
                del clock[s]

    def _merge(self, sid: int, snapshot: dict, src: int, r: int) -> None:
        clock = self.streams[sid].clock
        before = len(clock)
        if len(snapshot) <= MERGE_MAX:
            for s, v in snapshot.items():
                if s != sid and v > clock.get(s, 0):
                    clock[s] = v
        if src != sid and r > clock.get(src, 0):
            clock[src] = r
        if len(clock) > before and len(clock) > 2 * self._live() + CLOCK_SLACK:
            for s in [s for s in clock if s not in self.streams or self.streams[s].gone]:
                del clock[s]

    def ordered(self, sid: int, src: int, pos: int) -> bool:
        return self.streams[sid].clock.get(src, 0) > pos


def _combine(need: list, pos: int, exact: int, index: int) -> list:
    latest = max(need[0], pos)
    best, best_index = 0, 0
    if need[1] and need[1] > latest:
        best, best_index = need[1], need[2]
    if exact and exact > latest and (not best or exact < best):
        best, best_index = exact, index
    return [latest, best, best_index]
