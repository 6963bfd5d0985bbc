"""The command queue: completion tokens, the host FIFO that remains, and how work flows.

How work flows (the timeline of one launch):

1. A call validates its arguments (nothing is queued on error), takes
   temporaries for host arrays (one block), and builds its command group: H2D
   copies for ``In``/``InOut`` host arrays, the kernel launch, D2H copies for
   ``Out``/``InOut``, a stream-ordered free of the temporaries
   (:mod:`._dispatch`, :mod:`._group`).  If they do not fit, the group waits
   in the stream's FIFO for memory (:mod:`._memwait`).
2. Every command gets its own completion token from the queue's counter, and
   the token map (``CommandQueue.pending``) points each token at the group's
   :class:`Launch`.  Every command carries one because the driver treats a
   failing token-less command as observed at once, which would let the rest
   of the group run on bad data.
3. Commands go straight to the driver (:mod:`._submit`).  Every stream of a
   worker has its overflow on: a command that finds no room in the ring (a
   slot, heap bytes, a dependency entry) is accepted anyway and waits in the
   driver, in order, and whichever driver thread completes a command moves
   the backlog into the room it freed.  The device never waits for the event
   loop to refill a ring.  A submission says where the command went (0: the
   ring, ``PTO_QUEUED``: the overflow).  For a Launch whose last command went
   to the overflow the queue keeps the sequence number the driver gave it
   (the stream's ``pto_stream_accepted``): the launch is in the ring once the
   stream's ring has reached that number (``pto_stream_submitted``), which
   the flush checks after each drain.  That is what ``await handle.submit()``
   waits for, so back-pressure is still the stream's window.
4. Only work that waits on a host condition stays on the host: an entry whose
   gate is not open yet (a launch waiting for device memory, see
   :mod:`._memwait`; a wait on an event whose record is itself held back),
   and everything queued on its stream after it, waits in that stream's FIFO
   (``Stream._fifo``), in order, and goes to the driver once the gate opens.
   Each such :class:`Entry` is stamped with the stream's failure epoch when
   it is queued, and its submission is backdated to that epoch
   (``pto_stream_backdate``), so the driver judges it as if it had been
   submitted then.
5. The completion pump calls :func:`~._complete.service`: it drains records
   in batches (256 per driver call), resolves owners, submits FIFO entries
   whose gates opened, and marks the launches that entered their ring
   (:mod:`._complete`).
6. A Launch resolves when its last record arrived; its error is the first
   failure among its records.  A host that blocks instead of awaiting drives
   the same service itself (:mod:`._wait`).

"A command queued behind an observed failure fails as a dependent" is the
driver's rule (``native/src/exec.c``, "Failure propagation"): every command
carries the failure epoch it was queued at, whether it entered the ring at
once, waited in the overflow or waited here, and the driver judges them all
alike.  The host keeps no copy of the rule.

The queue is a component of its :class:`~pypto_async.runtime.ChipWorker`:
:class:`CommandQueue` holds the state, and the behaviour lives in three files
by phase, as liburing splits its setup from its hot path: :mod:`._submit`
(tokens, submission, the FIFO and its flush), :mod:`._complete` (records,
failures, withdrawals, settling waits) and :mod:`._wait` (sync points and
blocking waits).  Each is a set of functions of a queue ``q``; those marked
"lock held" expect the caller to hold ``q.lock``.  Waking waiters, which
both submission (a launch entered its ring) and completion need, is here.

Threading: a worker belongs to the thread (and event loop) that opened it.
In sync mode several threads may share it (the process-wide default worker):
one lock guards the token map, the FIFOs and the driver queue, and blocking
waits never hold it.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque

import numpy as np

from .._driver import PTO_QUEUED, ffi
from ._stats import BacklogClock

__all__ = ["CommandQueue", "Entry", "cq_view", "CQ_WORDS", "CQ_INTS", "wake_all", "release_waiters", "wake_idle",
           "F_LAST", "F_DATA", "F_RECORD", "QUEUED", "BATCH"]

F_LAST = 1  # the last command of its owner's group: entering the ring completes submission
F_DATA = 2  # a copy or launch: not sent once the driver refused an earlier command of its group
F_RECORD = 4  # an event record: its event counts as recorded once the driver accepted it
QUEUED = PTO_QUEUED  # a submission's status: accepted into the stream's overflow in the driver
BATCH = 256  # completion records per driver call
_Future = asyncio.Future
_running_loop = asyncio._get_running_loop  # the loop running on this thread, or None


class CommandQueue:
    """A worker's command queue: the state the submit, complete and wait phases share.

    :mod:`pypto_async.testing` reaches the worker through this object only:
    ``_submit.enqueue_hook``, and ``dev`` to create its latches.

    Parameters
    ----------
    dev
        The open ``pto_device *`` (None once the worker closed it).
    lock : threading.Lock
        The worker's lock (see the module doc, "Threading").
    pump
        The worker's completion pump (replaced when the worker changes mode).
    alive, check_open : callable
        The worker's state questions: ``alive()`` is True while the worker
        is open; ``check_open()`` raises if it is not.  The queue asks its
        owner nothing else.

    Attributes
    ----------
    pending : dict
        The token map: token -> owner (a Launch, an Event, or None), in
        token order, for every command whose record has not arrived.
    next_token : int
        The next token to hand out.
    backlog : BacklogClock
        Streams with work not yet in their ring (a FIFO entry, a launch in
        the driver's overflow), in the order they got it.
    failures : dict
        Recent first failures by token, for dependents that name them.
    sync_points : deque
        ``(token, Launch)``: worker-wide waits for every token before it.
    idle_waiters : list
        Waiters woken once nothing is pending or backlogged.
    on_service : callable
        Called by every service after the flush, lock held: the owner's
        work that waits for completions (deferred frees, memory waits).
    completions, wakeups, fifo_waits : int
        Records drained; drains that found any; commands that waited for
        room in their ring.
    loop_warned : set
        The kinds of blocked-event-loop warning given (see ``_wait.block_until``).
    """

    __slots__ = ("dev", "lock", "pump", "alive", "check_open", "on_service", "pending", "next_token",
                 "serve_at", "backlog", "failures", "sync_points", "idle_waiters", "completions", "wakeups",
                 "fifo_waits", "loop_warned", "cq", "cq_view", "used", "syncing", "fd_kept")

    def __init__(self, dev, lock, pump, alive, check_open):
        self.dev = dev
        self.lock = lock
        self.pump = pump
        self.alive = alive
        self.check_open = check_open
        self.on_service = _nothing
        self.pending: dict[int, object] = {}
        self.next_token = 1
        self.serve_at = 0  # the token from which the hot path runs the completion service itself
        self.backlog: BacklogClock = BacklogClock()  # also times back-pressure waits
        self.failures: dict[int, BaseException] = {}
        self.sync_points: deque = deque()
        self.idle_waiters: list = []
        self.completions = 0
        self.wakeups = 0
        self.fifo_waits = 0
        self.loop_warned: set[str] = set()
        self.cq = ffi.new("pto_completion[]", BATCH)
        self.cq_view = cq_view(self.cq)  # the same memory, read by field by the drain
        self.fd_kept = False  # an in-line drain left the completion fd signalled (written by _complete._take only)
        # What a worker sync looks at (_stream.sync_point), by stream id: the streams given work since
        # the last one (_submit.note_used), and those whose marker of it has not completed healthy
        # (-> that marker's token).
        self.used: dict[int, None] = {}
        self.syncing: dict[int, int] = {}

    def idle(self) -> bool:
        """True if no command is in flight and no stream has work waiting for its ring."""
        return not self.pending and not self.backlog

    def oldest_in_flight(self) -> int:
        """The oldest token still in flight, else the next token (lock held)."""
        # Tokens are handed out in increasing order and the token map keeps insertion
        # order, so its first key is the oldest command still in flight.
        pending = self.pending
        return next(iter(pending)) if pending else self.next_token


def _nothing() -> None:
    pass


class Entry:
    """A command waiting in a stream's host FIFO (see the module doc, step 4).

    Attributes
    ----------
    fn, args
        ``fn(*args)`` submits it and returns a driver status; ``args[-1]`` is
        its token (0: none).
    owner
        The Launch or Event it belongs to, or None.
    flags : int
        ``F_LAST``, ``F_DATA`` and ``F_RECORD``.
    gate
        None, or an object whose ``_entered`` must be true before the entry
        may go (an Event: its record reached the driver; a memory wait).
    epoch : int
        The stream's failure epoch when the entry was queued.
    """

    __slots__ = ("fn", "args", "owner", "flags", "gate", "epoch")

    def __init__(self, fn, args: tuple, owner, flags: int, gate, epoch: int):
        self.fn = fn
        self.args = args
        self.owner = owner
        self.flags = flags
        self.gate = gate
        self.epoch = epoch

    @property
    def token(self) -> int:
        return self.args[-1]


#: Where the drain reads a completion record's fields in :func:`cq_view`'s views, from cffi (the C
#: layout): (words per record, token, start_ns, end_ns) in its 64-bit words, (int32s per record,
#: status) in its 32-bit ones.
CQ_WORDS = (ffi.sizeof("pto_completion") // 8, *(ffi.offsetof("pto_completion", f) // 8
                                                  for f in ("token", "start_ns", "end_ns")))
CQ_INTS = (ffi.sizeof("pto_completion") // 4, ffi.offsetof("pto_completion", "status") // 4)
assert ffi.sizeof("pto_completion") % 8 == 0 and ffi.offsetof("pto_completion", "status") % 4 == 0
assert all(ffi.offsetof("pto_completion", f) % 8 == 0 for f in ("token", "start_ns", "end_ns"))


def cq_view(buf):
    """Views of the completion buffer `buf` (``pto_completion[]``): ``(columns, words, ints)``.

    ``columns``: a numpy structured view naming the fields the drain reads
    in bulk (a field of every record is a column, one numpy call).
    ``words``, ``ints``: flat memoryviews of its 64-bit words and 32-bit
    ints (:data:`CQ_WORDS`, :data:`CQ_INTS` say where a record's fields
    are), for one record's fields (an index each, cheaper than a cffi
    attribute read).  Offsets come from cffi, so the views follow the C layout.
    """
    fields = ("token", "status", "start_ns", "end_ns")
    dtype = np.dtype({
        "names": fields,
        "formats": ["=u8", "=i4", "=u8", "=u8"],
        "offsets": [ffi.offsetof("pto_completion", f) for f in fields],
        "itemsize": ffi.sizeof("pto_completion"),
    })
    raw = memoryview(ffi.buffer(buf))
    return np.frombuffer(ffi.buffer(buf), dtype=dtype), raw.cast("Q"), raw.cast("i")


# -- waking waiters (on the pump's thread, lock held) ---------------------------------------------


def wake_all(q: CommandQueue, waiters: list) -> None:
    """Wake every waiter of `waiters` (registered by the pump's ``wait``, or a thread's Event).

    Usually on the pump's thread; a close on another thread (one the busy loop
    could not take over) or a blocking drive there finish owners too.  A loop's
    futures and tasks are then woken through that loop's thread-safe path
    (:func:`resolve_soon`, ``TrioPump.wake``): resolved off its thread, a
    future would not wake the loop (and under asyncio's debug mode its task
    would never run again).
    """
    wake = q.pump.wake
    here = _running_loop()
    for waiter in waiters:
        if type(waiter) is _Future:
            # AsyncioPump.wake inlined (asyncio and uvloop waiters are asyncio
            # Futures): one Python call less per woken task.
            if not waiter.done():
                try:
                    if waiter.get_loop() is here:
                        waiter.set_result(None)
                    else:
                        resolve_soon(waiter, None, None)
                except RuntimeError:  # its event loop is gone
                    pass
        elif type(waiter) is threading.Event:
            waiter.set()
        else:
            try:
                wake(waiter)
            except RuntimeError:  # its event loop is gone
                pass


def _resolve(fut, result, exc) -> None:
    if not fut.done():  # cancelled meanwhile
        if exc is None:
            fut.set_result(result)
        else:
            fut.set_exception(exc)


def resolve_soon(fut, result, exc) -> None:
    """Resolve an asyncio future from a thread other than its loop's: on that loop, through its thread-safe path.

    Raises RuntimeError if the loop is closed.
    """
    fut.get_loop().call_soon_threadsafe(_resolve, fut, result, exc)


def release_waiters(q: CommandQueue, owner, entry_only: bool = False) -> None:
    """Wake everything waiting for `owner` (a Launch or Event) to enter its ring, and to finish."""
    waiters = owner._entry_waiters
    if waiters:
        owner._entry_waiters = None
        wake_all(q, waiters)
    if entry_only:
        return
    waiters = owner._waiters
    if waiters:
        owner._waiters = None
        wake_all(q, waiters)


def wake_idle(q: CommandQueue) -> None:
    """Wake the waiters of an idle queue (``aclose``, a trace window's end)."""
    waiters = q.idle_waiters
    if waiters:
        q.idle_waiters = []
        wake_all(q, waiters)
