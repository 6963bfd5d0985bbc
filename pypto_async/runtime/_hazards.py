"""Data hazards: accesses to DeviceTensors ordered across streams, and the sanitizer that checks them.

Kernels declare ``In``/``Out``/``InOut``, and copies know their direction,
so every access to a DeviceTensor is known when it is queued.  The rule
that orders two accesses pairs them as the tasks of a program are paired
(the driver's task-edge rule, ``native/src/taskdeps.c``): a read waits for the last write
(RAW); a write waits for the last write (WAW) and for the reads since it
(WAR); a read never waits for a read.  Same-stream order is free; only
accesses on different streams need an edge, and an edge is a device-side
wait: a fence of the earlier access's stream (a point of its work, no
command queued there), waited for on the later one, by the launch itself or
a wait command.

The driver owns the rule and its state (``native/src/hazard.c``, the
``pto_hazards_*`` calls of ``pto_driver.h``): per allocation the last write
and the reads since, per stream the points it waits for.  A launch on
DeviceTensors alone goes as ``pto_stream_launch_ordered``, in
``pto_stream_launch``'s shape: the table is the one attached to the device
(``pto_hazards_attach``), each argument's access the one its kernel
declared at registration (``pto_kernel_set_arg_access``), and the driver
queues the edges it needs with the launch, in the same call; on a stream
working on its own tensors that is the launch and a lookup per argument.  Everything else (copies, launches with host
arrays, peer copies, collectives, graph replays, first uses, and edges the
driver cannot queue alone: from a stream that holds work on the host or is
closed, or to an exact point) asks the driver for the edges
(``pto_hazards_order``), queues them here through events, and notes the
accesses (``pto_hazards_note``).  No Python runs on a driver thread, and no
C code reads Python objects.  An edge's commands are the runtime's, not
the user's: an injected failure (``fail_next``) passes them by and hits the
user's next command.

Positions are tokens, handed out in host submission order.  Only points
that carry failures count for skipping an edge (an ordering-only point, a
free's join, orders but would not carry a failure, and an inferred edge
must carry one exactly as an explicit wait does).  Whether the earlier
access has completed does not count either: the edges inserted must not
depend on when the host drained its records.

Opt-outs, narrow to wide: ``alloc_tensor(..., manual_deps=True)``; ``with
w.manual_deps():`` (task-local, a :mod:`contextvars` variable);
``RunConfig(auto_deps=False)``.  Where ordering is the user's, the sanitizer
(``RunConfig(sanitize="raise" | "warn")``, ``PYPTO_ASYNC_SANITIZE``) checks
what auto ordering would have inserted: an edge neither implied by the
waits queued (any event counts here, ordering-only ones too:
``Stream._oclock``) nor made moot by the earlier access having completed
(its token left the token map) is a race, raised as
:class:`~pypto_async.errors.PtoRaceError` before the call queues anything.
For that the sanitizer keeps its own records of the accesses with their
call sites (``DeviceTensor._writer``/``_readers``, only while it is on).
It also watches host arrays: one handed to an in-flight launch as an input
and then to another stream's launch or copy as an output before the first
launch completed.

Threads: ordering follows host submission order, which two threads
submitting at once do not have; a tensor shared between threads needs
their own order on the host.  Graphs: inside a capture, edges between its
streams are decided once, at capture time, by the driver's rule in a
table of the capture's own (:mod:`._capture_hazards`); a replay is one access on its stream to each
tensor it touches, ordered here (:meth:`~._graph.Graph.replay`).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import threading

from .._driver import check, ffi, lib
from .._signature import SCALAR
from ..errors import PtoArgumentError
from ._queue import QUEUED
from ._sanitizer import Sanitizer, describe
from ._submit import overflowed

__all__ = ["Access", "Hazards", "order", "fused_overflow", "mark", "merge_clock", "prune_clocks", "closed",
           "gone", "fold_readers", "manual_region", "manual_workers", "regions_open", "sanitize_mode", "launch_access",
           "ENV_SANITIZE"]

#: The environment variable that turns the sanitizer on for workers whose config leaves it unset.
ENV_SANITIZE = "PYPTO_ASYNC_SANITIZE"
_MODES = ("off", "raise", "warn")
_KEEP_INFERRED = 1 << 16  # tokens of inferred waits remembered for traces
_KEEP_FREED = 4096  # freed blocks the sanitizer remembers
_FOLD_FROM = 4  # readers a tensor notes before it folds the closed streams' ones (the sanitizer's records)
_CLOCK_SLACK = 16  # entries of gone streams a clock may hold beyond two per live stream
_KEEP_CLOSED = 32  # closed streams kept for the driver's records before asking which it still names
_WAIT_QUEUED = lib.PTO_EDGE_WAIT_QUEUED
_READ = lib.PTO_HZ_READ
_WRITE = lib.PTO_HZ_WRITE
_MANUAL = lib.PTO_HZ_MANUAL
_mark_release = lib.pto_hz_mark_release

# The workers whose ordering is manual in this task (``with w.manual_deps():``).
_manual: contextvars.ContextVar[tuple] = contextvars.ContextVar("pypto_async_manual_deps", default=())


def sanitize_mode(configured: str | None) -> str:
    """The sanitizer mode a worker opens with: its config, else ``PYPTO_ASYNC_SANITIZE``, else off.

    The pytest plugin (:mod:`pypto_async.testing`, ``pto_sanitize``) sets the variable.
    """
    if configured is not None:
        return configured
    env = os.environ.get(ENV_SANITIZE, "").strip().lower()
    if env not in ("", *_MODES):
        raise PtoArgumentError(f"{ENV_SANITIZE}={env!r}: expected 'off', 'raise' or 'warn'")
    return env or "off"


regions_open = [0]  # manual regions open in any task or thread: while none is, order() skips the contextvar
_regions_lock = threading.Lock()


@contextlib.contextmanager
def manual_region(worker):
    """``with w.manual_deps():``: accesses queued on `worker` in this task are not ordered for you."""
    token = _manual.set((*_manual.get(), worker))
    hz = worker._hazards
    with _regions_lock:
        regions_open[0] += 1
        if hz is not None:
            hz.regions += 1
            hz.launch = None  # the fused launch path is closed while any task has a region open here
    try:
        yield
    finally:
        with _regions_lock:
            regions_open[0] -= 1
            if hz is not None:
                hz.regions -= 1
                hz.refresh()
        _manual.reset(token)


def manual_workers() -> tuple:
    """The workers whose ordering is manual in this task (``with w.manual_deps():``)."""
    return _manual.get()


def launch_access(params) -> object:
    """The access of each kernel parameter, as the driver reads it (0 for scalars; ``pto_kernel_set_arg_access``)."""
    bits = [0 if p.direction == SCALAR else (_READ if p.copies_in else 0) | (_WRITE if p.copies_out else 0)
            for p in params]
    return ffi.new("uint8_t[]", bits or [0])


def mark(stream, token: int, ordering: bool):
    """What an event recorded on `stream` with `token` stands for, for the streams that wait for it.

    ``(stream id, token, driver mark, ordering clock)``: the driver's mark
    (``pto_hazards_mark``) of the failure-carrying points the stream waits
    for (None for an ordering-only point, which carries no failure), and,
    with the sanitizer on, a copy of the stream's ``_oclock``.  None when
    the worker tracks nothing.
    """
    hz = stream._worker._hazards
    if hz is None:
        return None
    m = None
    if not ordering and hz.table is not None:
        m = ffi.gc(lib.pto_hazards_mark(hz.table, stream._id, token), _mark_release)
    return (stream._id, token, m, dict(stream._oclock) if hz.sanitizing else None)


def merge_clock(stream, event) -> None:
    """`stream` waits for `event` (lock held): the driver merges its mark; the sanitizer its ordering clock.

    The driver's clock counts events that carry failures (what inferred
    edges may rely on); ``Stream._oclock`` counts every event, ordering-only
    ones too (what the sanitizer asks: is it ordered at all).
    """
    src, r, m, osnapshot = event._clock
    hz = stream._worker._hazards
    if m is not None and hz.table is not None:
        lib.pto_hazards_waited(hz.table, stream._id, m)
    if osnapshot is not None:
        _merge(stream._oclock, osnapshot, stream._id, src, r)
        if len(stream._oclock) > _CLOCK_SLACK:
            _prune_clock(stream)  # an event of a closed stream names streams gone since


def prune_clocks(worker) -> None:
    """Drop gone streams' entries from the sanitizer's clocks grown past two per live stream and a slack.

    An entry goes only once nothing it could prove ordered is left in
    flight (:func:`closed`).  Called when a stream is made or closed.
    """
    hz = worker._hazards
    if hz is None or not hz.sanitizing:
        return
    for stream in worker._streams.values():
        _prune_clock(stream)


def _prune_clock(stream) -> None:
    worker = stream._worker
    live = worker._streams
    clock = stream._oclock
    if len(clock) > 2 * len(live) + _CLOCK_SLACK:
        gone_ = worker._hazards.gone
        for sid in [sid for sid in clock if sid not in live and ((g := gone_.get(sid)) is None or g._done)]:
            del clock[sid]


def closed(stream) -> None:
    """`stream` was closed (lock held): the driver folds its reads; kept while the driver's records name it.

    The sanitizer proves an access ordered with ``_oclock``: an entry of a
    closed stream may go once the host saw its final point complete.
    """
    worker = stream._worker
    hz = worker._hazards
    if hz is None:
        return
    if hz.table is not None:
        lib.pto_hazards_stream_closed(hz.table, stream._id, stream._folded)
        kept = hz.closed_streams
        kept[stream._id] = stream  # an edge from it waits for its final point (Hazards._wait)
        if len(kept) > _KEEP_CLOSED:
            known = lib.pto_hazards_known
            for sid in [sid for sid in kept if not known(hz.table, sid)]:
                del kept[sid]
    if hz.sanitizing and stream._final is not None:
        g = hz.gone
        g[stream._id] = stream._final
        if len(g) > _CLOCK_SLACK:
            for sid in [sid for sid, final in g.items() if final._done]:
                del g[sid]
    prune_clocks(worker)


def gone(stream, later: bool = False) -> None:
    """`stream`'s driver stream is destroyed (lock held): no edge is queued from it any more.

    `later`: from its finalizer, which holds no lock; the table hears of it
    at the next call that does (nothing the driver decides reaches a stream
    nobody references: a tensor it used holds it).
    """
    hz = stream._worker._hazards
    if hz is None or hz.table is None:
        return
    if later:
        hz.dead.append(stream._id)
        hz.launch = None  # after the append: Hazards.refresh reads dead after it stores (see there)
    else:
        lib.pto_hazards_stream_gone(hz.table, stream._id)


def fold_readers(hz, t, readers: dict) -> None:
    """The sanitizer's records: fold the reads of closed streams into one read of the fold point.

    A read still in flight stays (the sanitizer names it).
    """
    pending = hz.queue.pending
    fold = t._worker._fold
    pos = 0
    for r_stream in [s for s in readers if s._closed and s._folded and s is not fold]:
        if readers[r_stream][1] in pending:
            continue
        pos = max(pos, r_stream._folded)
        del readers[r_stream]
    if pos:
        prev = readers.get(fold)
        if prev is None or prev[1] < pos:
            readers[fold] = (fold, pos, None, None)


def _merge(clock: dict, snapshot: dict, me: int, src: int, r: int) -> None:
    for s, v in snapshot.items():
        if v > clock.get(s, 0) and s != me:
            clock[s] = v
    if r > clock.get(src, 0):
        clock[src] = r


def order(worker, stream, accesses: list, label: str, offset: int) -> None:
    """Order a launch's or copy's DeviceTensor accesses on `stream` (lock held).

    `accesses` are ``(tensor, Access)`` (a kernel's) or ``(tensor, name,
    reads, writes)`` (a copy's); `offset` is how many commands of the call
    come before the one that touches the tensors (a launch group's input
    copies).  Without hazard tracking, only first uses join.
    """
    hz = worker._hazards
    if hz is None:
        for acc in accesses:
            t = acc[0]
            if stream not in t._streams:
                t._join(stream)
        return
    hz.order(stream, accesses, label, offset)


class Access:
    """A kernel parameter as ordering reads it: its name and directions (one per parameter).

    :class:`~._args.Binder` makes one per parameter at registration and
    hands ``(tensor, access)`` to :meth:`Hazards.order`.
    """

    __slots__ = ("name", "copies_in", "copies_out", "writes")

    @classmethod
    def of(cls, param) -> Access:
        """The access of a kernel parameter (a :class:`~pypto_async._signature.ParamSpec`)."""
        a = cls()
        a.name = param.name
        a.copies_in = bool(param.copies_in)
        a.copies_out = a.writes = bool(param.copies_out)
        return a

    def __repr__(self) -> str:
        return f"Access({self.name!r}, reads={self.copies_in}, writes={self.writes})"


def fused_overflow(q, stream, hz, rc: int) -> int:
    """Account the commands of a ``pto_stream_launch_ordered`` that went to overflow; the launch's part of `rc`.

    Its edges queue nothing on the streams they wait for (fences): only its
    wait-many can have gone to `stream`'s overflow before the launch.
    """
    if rc & _WAIT_QUEUED:
        overflowed(q, stream, 1)
    return rc & QUEUED


class Hazards:
    """A worker's hazard tracking: the driver's table, the waits it inferred and skipped, and the sanitizer.

    Attributes
    ----------
    auto : bool
        ``RunConfig.auto_deps``.
    mode : str
        The sanitizer's mode: ``"off"``, ``"raise"`` or ``"warn"``.
    inferred, skipped : int
        Waits inserted; waits not inserted because earlier waits imply them.
    races : int
        Races the sanitizer reported.
    table
        The driver's ``pto_hazards`` (None once the worker closed).
    """

    __slots__ = ("worker", "queue", "auto", "sanitizer", "fast", "sanitizing", "table", "launch", "regions",
                 "inferred_here", "skipped_here", "inferred_tokens", "recorder", "gone", "closed_streams", "dead",
                 "_acc", "_edges", "_counts")

    def __init__(self, worker, auto: bool, mode: str, stacks: bool):
        self.worker = worker
        self.queue = q = worker._queue
        self.auto = auto
        self.sanitizer = Sanitizer(q, mode, stacks)
        self.sanitizing = mode != "off"
        self.fast = auto and mode == "off"  # launches may go to pto_stream_launch_ordered
        out = ffi.new("pto_hazards **")
        check(lib.pto_hazards_create(q.dev, out), "pto_hazards_create")
        self.table = out[0]
        check(lib.pto_hazards_attach(self.table), "pto_hazards_attach")  # pto_stream_launch_ordered's table
        # The table while a launch on DeviceTensors may go to pto_stream_launch_ordered (the launch path
        # tests this one attribute), else None: no automatic ordering, the sanitizer on, streams
        # collected unclosed that the table has not heard of, a manual region open on the worker, or
        # a trace that tags graph replays (tags_changed).
        self.launch = self.table if self.fast else None
        self.regions = 0  # manual regions open on this worker, any task or thread (_regions_lock)
        self.inferred_here = 0  # edges queued here through events (the driver counts its own)
        self.skipped_here = 0  # edges a capture skipped
        self.inferred_tokens: dict[int, None] = {}  # the waits' tokens, for the trace's arrows
        self.recorder = _NO_RECORDER  # the worker's trace recorder, made after this object (the worker sets it)
        self.gone: dict[int, object] = {}  # sanitizer: closed stream id -> its final Event, until done
        self.closed_streams: dict[int, object] = {}  # closed stream id -> Stream, while the driver names it
        self.dead: list[int] = []  # ids of streams collected unclosed, for the table (_settle_dead)
        self._acc = ffi.new("pto_hz_access[]", 16)
        self._edges = ffi.new("pto_hz_edge[]", 16)
        self._counts = ffi.new("uint64_t[2]")

    def close(self) -> None:
        """Destroy the driver's table (lock held, before the device closes)."""
        table, self.table = self.table, None
        self.launch = None
        if table is not None:
            lib.pto_hazards_destroy(table)

    def register(self, stream) -> None:
        """Register a new stream with the driver's table (lock held)."""
        if self.table is not None:
            if self.dead:
                self.settle_dead()
            check(lib.pto_hazards_stream(self.table, stream._ptr), "pto_hazards_stream")

    def settle_dead(self) -> None:
        """Tell the table of the streams collected unclosed since the last call (lock held)."""
        dead = self.dead
        while dead:
            lib.pto_hazards_stream_gone(self.table, dead.pop())
        self.refresh()

    def refresh(self) -> None:
        """Open the fused launch path (:attr:`launch`) again if nothing keeps it closed.

        The store comes before the tests of ``dead`` and of the trace
        recorder's ``graph_tags``: a finalizer that appends to the one (no
        lock), or a trace that sets the other, closes the path after, so
        either order of the two leaves the path closed.
        """
        self.launch = self.table if self.fast and not self.regions else None
        if self.dead or self.recorder.graph_tags is not None:
            self.launch = None

    def tags_changed(self) -> None:
        """The trace recorder began or stopped tagging graph replays (its ``graph_tags``).

        While it tags them, launches are ordered the general way, whose
        inferred waits a trace marks (:meth:`_traced`); the fused path's
        are the driver's.  Called on the recorder's thread, without the
        worker's lock.
        """
        with _regions_lock:  # (manual_region's refresh reads regions under it)
            self.refresh()

    def set_fold(self, stream) -> None:
        if self.table is not None:
            lib.pto_hazards_set_fold(self.table, stream._id)

    def stream_of(self, sid: int):
        """The Stream of id `sid` the driver's records name: live, or closed and kept."""
        s = self.worker._streams.get(sid)
        return s if s is not None else self.closed_streams.get(sid)

    @property
    def mode(self) -> str:
        """The sanitizer's mode: ``"off"``, ``"raise"`` or ``"warn"``."""
        return self.sanitizer.mode

    @property
    def races(self) -> int:
        """Races the sanitizer reported."""
        return self.sanitizer.races

    def _driver_counts(self) -> tuple[int, int]:
        if self.table is None:
            return 0, 0
        c = self._counts
        lib.pto_hazards_counts(self.table, c)
        return int(c[0]), int(c[1])

    @property
    def inferred(self) -> int:
        """Waits inserted: the driver's, and those queued here (through events, or at capture)."""
        return self._driver_counts()[0] + self.inferred_here

    @inferred.setter
    def inferred(self, value: int) -> None:
        self.inferred_here += value - self.inferred

    @property
    def skipped(self) -> int:
        """Waits not inserted because earlier waits imply them (the driver's, and at capture)."""
        return self._driver_counts()[1] + self.skipped_here

    @skipped.setter
    def skipped(self, value: int) -> None:
        self.skipped_here += value - self.skipped

    # -- the general path (lock held) ---------------------------------------------------------

    def order(self, stream, accesses: list, label: str, offset: int) -> None:
        """Decide the edges of one call's accesses (the driver), insert them, then note the accesses.

        With the sanitizer on, a manual access that nothing orders after a
        conflicting earlier one is a race, reported before anything is
        queued.
        """
        table = self.table
        if self.dead and table is not None:
            self.settle_dead()
        region = bool(regions_open[0] and self.worker in _manual.get())
        sanitizing = self.sanitizing
        n = len(accesses)
        acc = self._acc if n <= len(self._acc) else ffi.new("pto_hz_access[]", n)
        m = 0
        notes = [] if sanitizing else None
        site = None
        for a in accesses:
            t = a[0]
            if len(a) == 2:
                p = a[1]
                name, reads, writes = p.name, p.copies_in, p.copies_out
            else:
                _, name, reads, writes = a
            if t._manual and not sanitizing:
                continue  # nothing to track
            manual = region or t._manual or not self.auto
            e = acc[m]
            e.addr = t._ptr
            e.flags = (_READ if reads else 0) | (_WRITE if writes else 0) | (_MANUAL if manual else 0)
            m += 1
            if sanitizing:
                if site is None:
                    site = self.sanitizer.site()
                what = describe(label, name, reads, writes, stream, site)
                if manual:
                    self._check(t, stream, reads, writes, what)
                notes.append((t, what, writes))
        # Every check passed: the driver decides the edges; queue them, then the first uses' joins.
        if table is not None and m:
            edges = self._edges
            k = lib.pto_hazards_order(table, stream._id, acc, m, edges, len(edges))
            if k > len(edges):
                edges = self._edges = ffi.new("pto_hz_edge[]", 2 * k)
                k = lib.pto_hazards_order(table, stream._id, acc, m, edges, len(edges))
            check(k, "pto_hazards_order")
            if not stream._fifo:
                lib.pto_hazards_set_held(table, stream._id, 0)
            for i in range(k):
                edge = edges[i]
                src = self.stream_of(edge.src)
                if src is None:
                    continue  # (its work is over: nothing of it is left to wait for)
                exact = None
                if edge.exact:
                    ready = accesses[edge.index][0]._ready
                    if ready is not None and ready._clock is not None and ready._clock[1] == edge.exact:
                        exact = ready
                self._wait(stream, src, exact)
        for a in accesses:
            t = a[0]
            if stream not in t._streams:
                _first_use(self, t, stream)
        pos = self.queue.next_token + offset  # the token of the command that touches the tensors
        if table is not None and m:
            check(lib.pto_hazards_note(table, stream._id, acc, m, pos), "pto_hazards_note")
        if notes:
            self._note(stream, notes, pos)

    def _check(self, t, stream, reads: bool, writes: bool, what: str) -> None:
        """The sanitizer: raise for an earlier conflicting access nothing orders this one after."""
        pending = self.queue.pending
        oclock = stream._oclock
        w = t._writer
        if w is not None and w[0] is not stream and (reads or writes):
            self._race_if(t, stream, w, "write", what, pending, oclock)
        readers = t._readers
        if writes and readers:
            for r_stream, r in list(readers.items()):
                if r_stream is not stream:
                    self._race_if(t, stream, r, "read", what, pending, oclock)

    def _race_if(self, t, stream, prev, how: str, what: str, pending, oclock) -> None:
        src, pos = prev[0], prev[1]
        if pos in pending and oclock.get(src._id, 0) <= pos and not _joined_after(t, stream, src, pos):
            self.sanitizer.race(t, prev, how, what)

    def _note(self, stream, notes: list, pos: int) -> None:
        """The sanitizer's records of the accesses, with their call sites."""
        for t, what, writes in notes:
            rec = (stream, pos, what, None)
            if writes:
                t._writer = rec
                t._readers = None
            else:
                readers = t._readers
                if readers is None:
                    t._readers = {stream: rec}
                else:
                    if len(readers) >= _FOLD_FROM and stream not in readers:
                        fold_readers(self, t, readers)
                    readers[stream] = rec

    def raw_access(self, stream, lo: int, nbytes: int, reads: bool, label: str) -> None:
        """Order a copy to or from a raw device address (``copy_from``/``copy_to``; lock held).

        The live tensor the range lies in is accessed as by any copy.  With
        the sanitizer on, a range in the block of a tensor freed on another
        stream, with nothing ordering this copy after that free, is a race.
        """
        hi = lo + nbytes
        t = self.worker._memory.tensor_at(lo)  # an ordered index, not a scan of every live tensor
        if t is not None and t._ptr < hi and lo < t._ptr + t._nbytes:
            self.order(stream, [(t, "dev_ptr", reads, not reads)], label, 0)
        freed = self.worker._memory.freed_blocks
        if not freed or not self.sanitizing:
            return
        pending = self.queue.pending
        for start, (end, src, pos, what) in freed.items():
            if start < hi and lo < end and src != stream._id and pos in pending \
                    and stream._oclock.get(src, 0) <= pos:
                second = f"{label} on stream {stream._id} at {self.sanitizer.site()}"
                self.sanitizer.report(f"data race on freed device memory: {second} uses the block of a DeviceTensor "
                            f"that {what} frees, and nothing orders it after that free", what, second)

    def freed(self, t, stream, token: int) -> None:
        """Remember the block of `t`, freed on `stream` by the command with `token` (sanitizer; lock held)."""
        blocks = self.worker._memory.freed_blocks
        blocks[t._ptr] = (t._ptr + max(t._nbytes, 1), stream._id, token,
                          f"free_tensor() on stream {stream._id} at {self.sanitizer.site()}")
        if len(blocks) > _KEEP_FREED:
            del blocks[next(iter(blocks))]

    def forget(self, ptr: int) -> None:
        """The block at `ptr` is freed: a tensor allocated there later starts with no accesses (lock held)."""
        if self.table is not None:
            lib.pto_hazards_forget(self.table, ptr)

    def written(self, t, stream, token: int, label: str, exact) -> None:
        """Note a write the runtime queued itself (``alloc_tensor(init=...)``; lock held).

        `exact` is an Event recorded right after it (or None): an edge that
        needs no more than this write waits for it.
        """
        point = exact._clock[1] if exact is not None and exact._clock is not None else 0
        if self.table is not None:
            check(lib.pto_hazards_written(self.table, stream._id, t._ptr, token, point), "pto_hazards_written")
        if self.sanitizing:
            what = describe(label, "init", False, True, stream, self.sanitizer.site())
            t._writer = (stream, token, what, exact)
            t._readers = None

    def _wait(self, stream, src, exact) -> None:
        """Insert the edge: `stream` waits on the device for `exact`, else for everything queued on `src` so far.

        The common edge, with neither stream holding work on the host, is one
        driver call, ``pto_hazards_queue_edge`` (``pto_stream_wait_stream``
        with the table's event of `src`: a fence of `src`, nothing queued
        there, and a wait here): injected failures pass the wait by, and it
        has a completion record only if it fails itself (a failure the fence
        carries), so its token is not in the token map.
        Otherwise an event is recorded on `src` (in its FIFO, behind the work
        it holds) and waited for, or `src`'s final point if it is closed.
        """
        q = self.queue
        table = self.table
        if exact is None and not src._fifo and not stream._fifo and not src._closed:
            lib.pto_hazards_set_held(table, src._id, 0)
            tok = q.next_token
            q.next_token = tok + 1
            if self.sanitizing:  # only the sanitizer reads the clocks of ordering-only events
                _merge(stream._oclock, src._oclock, stream._id, src._id, tok)
            rc = lib.pto_hazards_queue_edge(table, stream._id, src._id, tok)
            if rc:
                if rc < 0:
                    check(rc, "queueing an inferred wait")
                if rc & QUEUED:
                    overflowed(q, stream, 1)
            self._traced(tok)
            return
        event = exact
        if event is None:
            event = src._final if src._closed else src._record_locked(edge=True)
            if event is None:
                return
        tok = q.next_token
        stream._wait_locked(event, edge=True)
        self.inferred_here += 1
        self._traced(tok)

    def _traced(self, tok: int) -> None:
        """Keep an inferred wait's token for the trace's arrows when tracing."""
        if self.recorder.graph_tags is not None:
            kept = self.inferred_tokens
            kept[tok] = None
            if len(kept) > _KEEP_INFERRED:
                del kept[next(iter(kept))]

    def sizes(self, t, stream) -> tuple[int, int]:
        """The driver's records: reads kept for `t`, entries of `stream`'s clock (for tests)."""
        out = ffi.new("uint64_t[2]")
        lib.pto_hazards_sizes(self.table, t._ptr, stream._id, out)
        return int(out[0]), int(out[1])


class _NoRecorder:
    """The recorder of a worker whose tracing is not set up yet: no graph replay is tagged."""

    __slots__ = ()
    graph_tags = None


_NO_RECORDER = _NoRecorder()


def _first_use(hz, t, stream) -> None:
    """`t`'s first use on `stream`: join its allocation (rule 4 of DeviceTensor), unless an edge covers that."""
    # (A point of another worker, a peer copy's, is not in this worker's records.)
    ready = t._ready._clock if t._ready is not None and t._ready._worker is stream._worker else None
    if ready is not None and hz.table is not None and lib.pto_hazards_ordered(hz.table, stream._id, ready[0],
                                                                              ready[1]):
        t._add_stream(stream)  # an edge just queued waits for more than the join would
    else:
        t._join(stream)


def _joined_after(t, stream, src, pos: int) -> bool:
    """Whether `t`'s first use on `stream` (queued with this call) waits for `src` past `pos` (its join)."""
    if stream in t._streams or t._ready is None or t._ready._worker is not stream._worker:
        return False
    ready = t._ready._clock
    return ready is not None and ready[0] == src._id and ready[1] > pos
