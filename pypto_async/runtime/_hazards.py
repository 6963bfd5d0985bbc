"""Data hazards: accesses to DeviceTensors ordered across streams, and the sanitizer that checks them.

Kernels declare ``In``/``Out``/``InOut``, and copies know their direction,
so every access to a DeviceTensor is known when it is queued.  The rule
that orders two accesses is the one the tasks of a program obey
(:func:`pypto_async._hazard_rule.hazard`): a read waits for the last write
(RAW); a write waits for the last write (WAW) and for the reads since it
(WAR); a read never waits for a read.  Same-stream order is free (a stream
runs its commands in order); only accesses on different streams need an
edge, and an edge is a device-side wait: an event recorded on the earlier
access's stream, waited for on the later one (one driver call,
``pto_stream_wait_stream``, when neither stream holds work on the host; a
launch's lone edge goes in with the launch, ``pto_stream_launch_after``).
No host round trip, and no Python on a driver thread.  An edge's commands
are the runtime's, not the user's: an injected failure (``fail_next``)
passes them by and hits the user's next command.

Positions.  Every command carries a token, handed out in host submission
order, so on one stream tokens grow in the order the stream runs its
commands (a command held in a stream's FIFO keeps its place and its token).
An access is known by ``(stream, token)``.  An event recorded on stream S
with token r completes after every command of S with a smaller token: it
covers those accesses.

Clocks.  Each stream keeps a vector clock (``Stream._clock``): for every
other stream S (by id), the largest token of an S-recorded event it waits for,
directly or through events it waits for (a wait merges the recording
stream's clock as it was at the record).  An edge from ``(S, p)`` to a
stream whose clock for S is above p is implied already, and is not added
again; nor is one to S when another stream the call waits for has waited for
``(S, p)`` itself, nor a first use's join that an edge to the tensor's
allocation stream covers.  Explicit ``stream.wait(...)`` merges in the same way, so an edge you
wrote is not doubled.  Only events that carry failures count: an ordering-only
point (a free's join) orders, but a failure would not propagate through it,
and an inferred edge must propagate one exactly as an explicit wait does.
Whether the earlier access has completed does not count either: which
records the host has drained depends on timing, and the edges inserted must
not (an edge to completed work costs one record and one wait that finish at
once).

Per tensor, the bookkeeping is the last write, ``(stream, token, what,
exact)``, and the reads since, one per stream.  An edge waits for the
stream's tail, recorded when the edge is made (over-waiting for later work
there, never under-waiting), unless an exact point is known: ``exact`` is an
event recorded right after the access (the point right after an
``alloc_tensor(init=...)`` copy, which the first-use join uses too).  The common case is cheaper still: a
tensor written on stream S and used only on S since has ``_home`` S, and an
access on S needs nothing at all (:meth:`Binder.bind` checks one attribute).
When another stream comes, the home's accesses are summed up as a write at
S's last data command (``Stream._last``): conservative, and exact in a
pipeline (so while a tensor has a home, its write record may be None).
Crossing streams, the common case is compiled (``native/python/fastorder.c``,
:meth:`Hazards.order`): the same rule on the same slots, without the
interpreter's cost per step.

Opt-outs, narrow to wide: ``alloc_tensor(..., manual_deps=True)``; ``with
w.manual_deps():`` (task-local, a :mod:`contextvars` variable);
``RunConfig(auto_deps=False)``.  Where ordering is the user's, the sanitizer
(``RunConfig(sanitize="raise" | "warn")``, ``PYPTO_ASYNC_SANITIZE``) checks
what auto ordering would have inserted: an edge neither implied by the
waits queued (any event counts here, ordering-only ones too:
``Stream._oclock``) nor made moot by the earlier access having completed
(its token left the token map: the host saw it finish) is a race, raised as
:class:`~pypto_async.errors.PtoRaceError` before the call queues anything.  It also watches host arrays: one handed to an
in-flight launch as an input and then to another stream's launch or copy as
an output before the first launch completed.

Threads: ordering follows host submission order, which two threads
submitting at once do not have; a tensor shared between threads needs
their own order on the host.  Graphs: inside a capture, edges between its
streams are derived once, at capture time, by the same rule
(:mod:`._capture_hazards`); a replay is one access on its stream to each
tensor it touches, ordered here (:meth:`~._graph.Graph.replay`).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import pathlib
import sys
import threading
import traceback
import warnings

from .._driver import check, ffi, lib
from .._fastorder import order as fast_order
from .._fastorder import setup as _fast_setup
from .._hazard_rule import hazard
from ..errors import PtoArgumentError, PtoRaceError
from ._queue import QUEUED
from ._submit import overflowed

__all__ = ["Access", "Hazards", "order", "fast_order", "fused_overflow", "read_home", "mark", "merge_clock",
           "prune_clocks", "closed", "fold_readers", "manual_region", "sanitize_mode", "ENV_SANITIZE"]

#: The environment variable that turns the sanitizer on for workers whose config leaves it unset.
ENV_SANITIZE = "PYPTO_ASYNC_SANITIZE"
_MODES = ("off", "raise", "warn")
_PACKAGE = str(pathlib.Path(__file__).resolve().parent.parent)
_KEEP_INFERRED = 1 << 16  # tokens of inferred waits remembered for traces
_KEEP_FREED = 4096  # freed blocks the sanitizer remembers
_FOLD_FROM = 4  # readers a tensor notes before it folds the closed streams' ones
_CLOCK_SLACK = 16  # entries of gone streams a clock may hold beyond one per live stream
_wait_stream = lib.pto_stream_wait_stream
_SRC_QUEUED = lib.PTO_EDGE_SRC_QUEUED
_WAIT_QUEUED = lib.PTO_EDGE_WAIT_QUEUED

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


_regions = [0]  # manual regions open in any task or thread: while none is, order() skips the contextvar
_regions_lock = threading.Lock()


@contextlib.contextmanager
def manual_region(worker):
    """``with w.manual_deps():``: accesses queued on `worker` in this task are not ordered for you."""
    token = _manual.set((*_manual.get(), worker))
    with _regions_lock:
        _regions[0] += 1
    try:
        yield
    finally:
        with _regions_lock:
            _regions[0] -= 1
        _manual.reset(token)


def mark(stream, token: int, ordering: bool) -> tuple:
    """What an event recorded on `stream` with `token` stands for, for the clocks of streams that wait for it."""
    return (stream._id, token, None if ordering else dict(stream._clock), dict(stream._oclock))


def merge_clock(stream, event) -> None:
    """`stream` waits for `event`: what the event's recording stream had waited for, and the event itself.

    ``Stream._clock`` counts events that carry failures (what inferred edges
    may rely on); ``Stream._oclock`` counts every event, ordering-only ones
    too (what the sanitizer asks: is it ordered at all).
    """
    src, r, snapshot, osnapshot = event._clock
    me = stream._id
    _merge(stream._oclock, osnapshot, me, src, r)
    if snapshot is not None:
        _merge(stream._clock, snapshot, me, src, r)
    if len(stream._clock) > _CLOCK_SLACK or len(stream._oclock) > _CLOCK_SLACK:
        _prune_clock(stream)  # an event of a closed stream names streams gone since


def prune_clocks(worker) -> None:
    """Drop gone streams' entries from clocks grown past one per live stream and a slack (lock held).

    A stream's clock gains an entry for every stream it waits for, directly
    or through others; without this, a long-lived stream's clock (and the
    snapshot each of its events copies) would grow with every short-lived
    stream ever seen.  Called when a stream is made or closed, and for one
    stream when it merged a large snapshot (:func:`merge_clock`).  Dropping an
    entry of ``_clock`` is always sound: it only lets an edge be skipped (an
    edge to a gone stream is then queued again, and costs one wait).  The
    sanitizer reads ``_oclock`` to prove an access ordered: an entry there
    goes only once nothing it could prove is left in flight (:func:`closed`).
    """
    for stream in worker._streams.values():
        _prune_clock(stream)


def _prune_clock(stream) -> None:
    """:func:`prune_clocks` for one stream (it just merged a snapshot that may name gone streams)."""
    worker = stream._worker
    live = worker._streams
    bound = 2 * len(live) + _CLOCK_SLACK
    clock = stream._clock
    if len(clock) > bound:
        for sid in [sid for sid in clock if sid not in live]:
            del clock[sid]
    clock = stream._oclock
    if len(clock) > bound:
        hz = worker._hazards
        gone = hz.gone if hz is not None else {}
        for sid in [sid for sid in clock if sid not in live and ((g := gone.get(sid)) is None or g._done)]:
            del clock[sid]


def closed(stream) -> None:
    """`stream` was closed (lock held): remember it while its work may be in flight, if the sanitizer is on.

    The sanitizer proves an access ordered with ``_oclock``: an entry of a
    closed stream may go once the host saw its final point complete (its
    accesses have all left the token map, so none can race any more), and
    one of a stream collected unclosed at once (no record names it).
    """
    worker = stream._worker
    hz = worker._hazards
    if hz is not None and hz.mode != "off" and stream._final is not None:
        gone = hz.gone
        gone[stream._id] = stream._final
        if len(gone) > _CLOCK_SLACK:
            for sid in [sid for sid, final in gone.items() if final._done]:
                del gone[sid]
    prune_clocks(worker)


def fold_readers(hz, t, readers: dict) -> None:
    """Fold the reads of closed streams among `t`'s readers into one read of the fold point (lock held).

    A write after them waits for the fold point's tail, which is ordered
    after all those streams' work (``_stream.fold_point``), where it waited
    for each of them: sound, over-waiting.  Ordering only: a failure of a
    closed reader is not carried to a later writer through it.  With the
    sanitizer on, a read still in flight stays (the sanitizer names it).
    """
    pending = hz.queue.pending if hz is not None and hz.mode != "off" else None
    fold = t._worker._fold
    pos = 0
    for r_stream in [s for s in readers if s._closed and s._folded and s is not fold]:
        if pending is not None and readers[r_stream][1] in pending:
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
    """Order a launch's or copy's DeviceTensor accesses on `stream` (lock held; the bind step's slow path).

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
    hands ``(tensor, access)`` to :meth:`Hazards.order`; its slots are what
    the compiled common case reads (``writes``, the same as ``copies_out``).
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


def fused_overflow(q, stream, src, rc: int) -> int:
    """Account the commands of a ``pto_stream_launch_after`` that went to overflow; the launch's part of `rc`."""
    if rc & _SRC_QUEUED:
        overflowed(q, src, 1)
    if rc & _WAIT_QUEUED:
        overflowed(q, stream, 1)
    return rc & QUEUED


def read_home(worker, stream, accesses: list) -> None:
    """After :func:`order`: `stream` reads these tensors again with nothing to order (lock held).

    A graph replay calls it for the tensors it only reads: while no write
    comes, its next replays on `stream` skip them (``DeviceTensor._readhome``),
    and a writer elsewhere waits for `stream`'s last data command instead of
    a noted read.  Only for automatic ordering with the sanitizer off, which
    is what left every such read ordered after the tensor's last write.
    """
    hz = worker._hazards
    if hz is None or not hz.fast or (_regions[0] and worker in _manual.get()):
        return
    for t, _, _, writes in accesses:
        if not writes and not t._manual:
            t._readhome = stream


class Hazards:
    """A worker's hazard tracking: inferred waits, skipped waits, and the sanitizer.

    Attributes
    ----------
    auto : bool
        ``RunConfig.auto_deps``.
    mode : str
        The sanitizer's mode: ``"off"``, ``"raise"`` or ``"warn"``.
    inferred, skipped : int
        Waits inserted; waits not inserted because earlier waits (or the
        access's completion) imply them.
    races : int
        Races the sanitizer reported.
    """

    __slots__ = ("worker", "queue", "auto", "mode", "stacks", "fast", "inferred", "skipped", "races",
                 "inferred_tokens", "_hosts", "recorder", "gone")

    def __init__(self, worker, auto: bool, mode: str, stacks: bool):
        self.worker = worker
        self.queue = worker._queue
        self.auto = auto
        self.mode = mode
        self.stacks = stacks
        self.fast = auto and mode == "off"  # order()'s compiled common case may run
        self.inferred = 0
        self.skipped = 0
        self.races = 0
        self.inferred_tokens: dict[int, None] = {}  # the waits' tokens, for the trace's arrows
        self._hosts: dict[int, tuple] = {}  # host address -> (end, launch, what): inputs in flight
        self.recorder = None  # the worker's trace recorder, made after this object (the worker sets it)
        self.gone: dict[int, object] = {}  # sanitizer: closed stream id -> its final Event, until done
        if not _fast_ready:
            _setup_fast()

    @property
    def sanitizing(self) -> bool:
        return self.mode != "off"

    # -- the slow path of the bind step (lock held) ---------------------------------------------

    def order(self, stream, accesses: list, label: str, offset: int, fuse: bool = False):
        """Decide the edges of one call's accesses, insert them, then note the accesses (lock held).

        The common case, automatic ordering with the sanitizer off and every
        tensor known on `stream` already, is compiled (``fast_order``,
        ``native/python/fastorder.c``): it runs for every launch whose
        tensors cross streams, and queues its edges with :meth:`_queue_edge`.
        What it declines, before changing anything, it hands to
        :meth:`_order_declined`.

        With `fuse` (a launch with no host arrays, about to be queued with
        ``pto_stream_launch_after``), the last edge is left to that call:
        returns its source stream (the edge's token is the one just before
        the launch's).  Otherwise None.  (The launch path calls
        ``fast_order`` itself: ``_dispatch.launch_kernel``.)
        """
        return fast_order(self, stream, accesses, label, offset, fuse)

    def _order_declined(self, stream, accesses: list, label: str, offset: int) -> None:
        """:meth:`order` for a call the compiled common case declined: the general path."""
        self._order_general(stream, accesses, label, offset, bool(_regions[0] and self.worker in _manual.get()))

    def _order_general(self, stream, accesses: list, label: str, offset: int, region: bool) -> None:
        """:meth:`order`, all of it: check (the sanitizer) or insert, then note.

        It takes whatever the compiled common case declines: the sanitizer,
        manual ordering, first uses, exact points, streams holding work on the
        host.  Nothing is queued before every check passed.
        """
        q = self.queue
        pending = q.pending
        clock = stream._clock
        sanitizing = self.mode != "off"
        waits: dict = {}  # stream -> the latest of its accesses to wait for (at its current tail)
        notes = []
        site = None
        for acc in accesses:
            t = acc[0]
            if len(acc) == 2:
                p = acc[1]
                name, reads, writes = p.name, p.copies_in, p.copies_out
            else:
                _, name, reads, writes = acc
            if t._manual and not sanitizing:
                notes.append((t, None, False))
                continue
            manual = region or t._manual or not self.auto
            home = t._home
            if home is not None and home is not stream:
                # Leaving the home stream: its accesses, summed up as a write at its last data command.
                w = t._writer
                exact = w[3] if w is not None and w[1] == home._last else None
                t._writer = (home, home._last, w[2] if w is not None else None, exact)
                t._readers = None
                t._home = None
            earlier = []
            w = t._writer
            if w is not None and w[0] is not stream and hazard(reads, writes, False, True):
                earlier.append((w, "write"))
            readers = t._readers
            if writes and readers:
                rhome = t._readhome
                for r_stream, r in readers.items():
                    if r_stream is not stream:
                        if r_stream is rhome:  # reads there went unnoted: its last data command
                            r = (r_stream, r_stream._last, r[2], None)
                        earlier.append((r, "read"))
            for prev, how in earlier:
                src, pos, what, exact = prev
                if not manual:
                    if clock.get(src._id, 0) > pos:
                        self.skipped += 1  # implied by a wait queued on `stream` already
                    elif src in waits:
                        self.skipped += 1  # one wait per stream and call
                        waits[src] = _combine(waits[src], pos, exact)
                    else:
                        waits[src] = (pos, exact)
                elif sanitizing and pos in pending and stream._oclock.get(src._id, 0) <= pos \
                        and not _joined_after(t, stream, src, pos):
                    if site is None:
                        site = self._site()
                    self._race(t, prev, how, describe(label, name, reads, writes, stream, site))
            if sanitizing and site is None:
                site = self._site()
            notes.append((t, describe(label, name, reads, writes, stream, site) if sanitizing else None,
                          writes))
        # Every check passed: now queue the edges, then the first uses' joins (rule 4 of DeviceTensor).
        if len(waits) > 1:
            self._prune(waits)
        for src, (_, exact) in waits.items():
            self._wait(stream, src, exact)
        for acc in accesses:
            t = acc[0]
            if stream not in t._streams:
                _first_use(t, stream)
        pos = q.next_token + offset  # the token of the command that touches the tensors
        home_ok = not sanitizing
        for t, what, writes in notes:
            if what is None and t._manual and not sanitizing:
                t._home = stream  # nothing to track: nothing to do on this stream again
                continue
            acc = (stream, pos, what, None)
            if writes:
                t._writer = acc
                t._readers = None
                t._readhome = None
                if home_ok:
                    t._home = stream
            else:
                readers = t._readers
                if readers is None:
                    t._readers = {stream: acc}
                else:
                    if len(readers) >= _FOLD_FROM and stream not in readers:
                        fold_readers(self, t, readers)
                    readers[stream] = acc

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
        if not freed or self.mode == "off":
            return
        pending = self.queue.pending
        for start, (end, src, pos, what) in freed.items():
            if start < hi and lo < end and src != stream._id and pos in pending \
                    and stream._oclock.get(src, 0) <= pos:
                second = f"{label} on stream {stream._id} at {self._site()}"
                self.report(f"data race on freed device memory: {second} uses the block of a DeviceTensor "
                            f"that {what} frees, and nothing orders it after that free", what, second)

    def freed(self, t, stream, token: int) -> None:
        """Remember the block of `t`, freed on `stream` by the command with `token` (sanitizer; lock held)."""
        blocks = self.worker._memory.freed_blocks
        blocks[t._ptr] = (t._ptr + max(t._nbytes, 1), stream._id, token,
                          f"free_tensor() on stream {stream._id} at {self._site()}")
        if len(blocks) > _KEEP_FREED:
            del blocks[next(iter(blocks))]

    def _prune(self, waits: dict) -> None:
        """Drop the waits that another one implies: a stream that waited for that access itself."""
        for a in list(waits):
            pos = waits[a][0]
            for b in list(waits):
                if b is not a and b._clock.get(a._id, 0) > pos:
                    del waits[a]
                    self.skipped += 1
                    break

    def written(self, t, stream, token: int, label: str, exact) -> None:
        """Note a write the runtime queued itself (``alloc_tensor(init=...)``; lock held).

        `exact` is an Event recorded right after it (or None).
        """
        what = describe(label, "init", False, True, stream, self._site()) if self.mode != "off" else None
        t._writer = (stream, token, what, exact)
        t._readers = None
        t._readhome = None
        if self.mode == "off":
            t._home = stream

    def _wait(self, stream, src, exact) -> None:
        """Insert the edge: `stream` waits on the device for `exact`, else for everything queued on `src` so far.

        The common edge, with neither stream holding work on the host, is one
        driver call, ``pto_stream_wait_stream``: it records `src`'s own hazard
        event (one per stream, re-recorded each time: a wait takes the
        recording current when it is queued) and queues the wait on `stream`,
        both as an inferred edge's commands: injected failures pass them by,
        and the wait has a completion record only if it fails itself (a
        failure the event carries), so its token is not in the token map.
        That token is the edge's mark in the clocks: every command of `src`
        before the record has a smaller one.
        """
        if exact is None and not src._fifo and not stream._fifo and not src._closed:
            self._queue_edge(stream, src, self._edge(stream, src))
            return
        event = exact
        if event is None:
            event = src._final if src._closed else src._record_locked(edge=True)
            if event is None:
                return
        tok = self.queue.next_token
        stream._wait_locked(event, edge=True)
        self._count(tok)

    def _queue_edge(self, stream, src, tok: int) -> None:
        """Queue the edge from `src`'s tail that :meth:`_edge` (or ``fast_order``) made: one driver call."""
        rc = _wait_stream(stream._ptr, src._ptr, src._hz_event, tok)
        if rc:
            if rc < 0:
                check(rc, "queueing an inferred wait")
            if rc & _SRC_QUEUED:
                overflowed(self.queue, src, 1)
            if rc & QUEUED:
                overflowed(self.queue, stream, 1)

    def _edge(self, stream, src) -> int:
        """The edge of one driver call from `src`'s tail to `stream`, clocks merged and counted.

        Returns its token; the caller queues it next (:meth:`_queue_edge`),
        with ``src._hz_event``, the event it makes here if need be.
        (The driver refuses an edge only on a device that is lost or closing,
        after which nothing runs to order.)
        """
        q = self.queue
        tok = q.next_token
        q.next_token = tok + 1
        event = src._hz_event
        if event is None:
            out = ffi.new("pto_event **")
            check(lib.pto_event_create(q.dev, out), "pto_event_create")
            event = src._hz_event = out[0]
        if self.mode != "off":  # only the sanitizer reads the clocks of ordering-only events
            _merge(stream._oclock, src._oclock, stream._id, src._id, tok)
        _merge(stream._clock, src._clock, stream._id, src._id, tok)
        self.inferred += 1
        if self.recorder is not None and self.recorder.graph_tags is not None:
            self._keep(tok)
        return tok

    def _count(self, tok: int) -> None:
        """One inferred wait, with token `tok`: counted, and kept for the trace's arrows when tracing."""
        self.inferred += 1
        if self.recorder is not None and self.recorder.graph_tags is not None:
            self._keep(tok)

    def _keep(self, tok: int) -> None:
        kept = self.inferred_tokens
        kept[tok] = None
        if len(kept) > _KEEP_INFERRED:
            del kept[next(iter(kept))]

    # -- the sanitizer ------------------------------------------------------------------------------

    def _site(self) -> str:
        """The user's call site: file:line of the first frame outside pypto_async (or its stack)."""
        f = sys._getframe(2)
        while f is not None and f.f_code.co_filename.startswith(_PACKAGE):
            f = f.f_back
        if f is None:
            return "<unknown>"
        if self.stacks:
            return "\n" + "".join(traceback.format_stack(f)).rstrip()
        return f"{f.f_code.co_filename}:{f.f_lineno}"

    def _race(self, t, prev, how: str, second: str) -> None:
        first = prev[2] or f"an access on stream {prev[0]._id} (its call site unknown: queued while the " \
                           "sanitizer was off)"
        message = (f"data race on {_tensor_name(t)}: {second} is not ordered after the {how} by {first}; "
                   f"add stream.wait(...) between them, or leave the ordering to auto_deps")
        self.report(message, first, second)

    def report(self, message: str, first: str, second: str) -> None:
        """Raise or warn about a race, as the mode says."""
        self.races += 1
        if self.mode == "raise":
            raise PtoRaceError(message, first=first, second=second)
        warnings.warn(message, RuntimeWarning, stacklevel=4)

    def check_hosts(self, stream, hosts: list, label: str) -> None:
        """Sanitize a call's host arrays (lock held): an output over an input of an unordered call elsewhere.

        `hosts` are ``(index, HostArray, param)`` as the bind step gives
        them.  An input stays on record until its call completed; an output
        on another stream must be ordered after it (or it completed).
        """
        table = self._hosts
        if not table:
            return
        pending = self.queue.pending
        for addr in [a for a, entry in table.items() if entry[2] not in pending]:
            del table[addr]  # completed
        oclock = stream._oclock
        for _, ha, p in hosts:
            if not p.copies_out or not ha.nbytes:
                continue
            lo = _address(ha.ptr)
            hi = lo + ha.nbytes
            for addr, (end, src, pos, what) in table.items():
                if addr < hi and lo < end and src != stream._id and oclock.get(src, 0) <= pos:
                    second = describe(label, p.name, p.copies_in, True, stream, self._site())
                    self.report(f"data race on a host array: {second} writes it while {what} may still "
                                "read it (nothing orders them, and it has not completed); wait for it first",
                                what, second)

    def note_hosts(self, stream, hosts: list, label: str, pos: int) -> None:
        """Remember the host arrays a call queued at token `pos` reads, until it completes (lock held)."""
        site = None
        for _, ha, p in hosts:
            if p.copies_in and ha.nbytes:
                if site is None:
                    site = self._site()
                lo = _address(ha.ptr)
                self._hosts[lo] = (lo + ha.nbytes, stream._id, pos,
                                   describe(label, p.name, True, p.copies_out, stream, site))


_fast_ready = []


def _setup_fast() -> None:
    """Hand the compiled common case the classes whose slots it reads (once: their layout is fixed)."""
    from ._queue import CommandQueue
    from ._recorder import TraceRecorder
    from ._stream import Stream
    from ._tensor import DeviceTensor

    _fast_setup(DeviceTensor, Stream, Hazards, CommandQueue, Access, TraceRecorder, _regions)
    _fast_ready.append(True)


def _first_use(t, stream) -> None:
    """`t`'s first use on `stream`: join its allocation (rule 4 of DeviceTensor), unless an edge covers that."""
    # (A point of another worker, a peer copy's, is not in this worker's clocks.)
    ready = t._ready._clock if t._ready is not None and t._ready._worker is stream._worker else None
    if ready is not None and stream._clock.get(ready[0], 0) > ready[1]:
        t._add_stream(stream)  # an edge just queued waits for more than the join would
    else:
        t._join(stream)


def _joined_after(t, stream, src, pos: int) -> bool:
    """Whether `t`'s first use on `stream` (queued with this call) waits for `src` past `pos` (its join)."""
    if stream in t._streams or t._ready is None or t._ready._worker is not stream._worker:
        return False
    ready = t._ready._clock
    return ready[0] == src._id and ready[1] > pos


def _combine(need: tuple, pos: int, exact) -> tuple:
    """One wait for two accesses on one stream: the latest position, and an exact event after both if any."""
    latest = max(need[0], pos)
    best = None
    for event in (need[1], exact):
        if event is not None and event._clock[1] > latest and (best is None or event._clock[1] < best._clock[1]):
            best = event
    return latest, best


def _address(ptr) -> int:
    return int(ffi.cast("uintptr_t", ptr))


def describe(label: str, name: str, reads: bool, writes: bool, stream, site: str) -> str:
    """One side of a race: call, parameter, direction, stream, call site (a capture's too: _capture_hazards)."""
    direction = "InOut" if reads and writes else ("Out" if writes else "In")
    return f"{label} ({name!r}, {direction}) on stream {stream._id} at {site}"


def _tensor_name(t) -> str:
    return f"DeviceTensor shape={t._shape} dtype={t._dtype.np_name} at 0x{t._ptr:x}"
