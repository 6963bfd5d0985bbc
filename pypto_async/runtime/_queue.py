"""The worker's command queue: token map, stream backlogs, completion drain, blocking waits.

How work flows (the timeline of one launch):

1. A call validates its arguments (nothing is queued on error), takes
   temporaries for host arrays (one block), and builds its command group: H2D
   copies for ``In``/``InOut`` host arrays, the kernel launch, D2H copies for
   ``Out``/``InOut``, a stream-ordered free of the temporaries.  If they do
   not fit, the group waits in the stream's FIFO for memory (see ``_memwait``).
2. Every command gets its own completion token from the worker's counter, and
   the token map (``_pending``) points each token at the group's
   :class:`Launch`.  Every command carries one because the driver treats a
   failing token-less command as observed at once, which would let the rest
   of the group run on bad data.
3. Commands go straight to the driver.  Every stream of a worker has its
   overflow on: a command that finds no room in the ring (a slot, heap bytes,
   a dependency entry) is accepted anyway and waits in the driver, in order,
   and whichever driver thread completes a command moves the backlog into the
   room it freed.  The device never waits for the event loop to refill a
   ring.  A submission says where the command went (0: the ring,
   ``PTO_QUEUED``: the overflow).  For a Launch whose last command went to the
   overflow the queue keeps the sequence number the driver gave it (the
   stream's ``pto_stream_accepted``): the launch is in the ring once the
   stream's ring has reached that number (``pto_stream_submitted``), which
   the pump checks after each drain.  That is what ``await handle.submit()``
   waits for, so back-pressure is still the stream's window.
4. Only work that waits on a host condition stays on the host: an entry whose
   gate is not open yet (a launch waiting for device memory, see
   ``_memwait``; a wait on an event whose record is itself held back), and
   everything queued on its stream after it, waits in that stream's FIFO
   (``Stream._fifo``), in order, and goes to the driver once the gate opens.
   Each such :class:`_Entry` is stamped with the stream's failure epoch when
   it is queued, and its submission is backdated to that epoch
   (``pto_stream_backdate``), so the driver judges it as if it had been
   submitted then.
5. The completion pump drains records in batches (256 per driver call),
   resolves owners, submits FIFO entries whose gates opened, and marks the
   launches that entered their ring.
6. A Launch resolves when its last record arrived; its error is the first
   failure among its records.

"A command queued behind an observed failure fails as a dependent" is the
driver's rule (``native/src/exec.c``, "Failure propagation"): every command
carries the failure epoch it was queued at, whether it entered the ring at
once, waited in the overflow or waited here, and the driver judges them all
alike.  The host keeps no copy of the rule.

Threading: a worker belongs to the thread (and event loop) that opened it.
In sync mode several threads may share it (the process-wide default worker):
one lock guards the token map, the FIFOs and the driver queue, and blocking
waits never hold it.

:class:`CommandQueue` is a mixin of :class:`~pypto_async.runtime.ChipWorker`;
methods marked "lock held" expect the caller to hold ``self._lock``.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
import warnings

import numpy as np

from .._driver import (
    PTO_ECANCELED,
    PTO_EDEP,
    PTO_EPOCH_NOW,
    PTO_QUEUED,
    check,
    error_for_status,
    ffi,
    lib,
)
from ..errors import PtoCanceledError, PtoError, PtoTimeout
from ._checks import check_timeout
from ._launch import Launch, _Marker
from ._pump import running_loop_flavour
from ._state import FORKED, OPEN
from ._stream import Stream

__all__ = ["CommandQueue", "cq_view"]

_F_LAST = 1  # the last command of its owner's group: entering the ring completes submission
_F_DATA = 2  # a copy or launch: not sent once the driver refused an earlier command of its group
_F_RECORD = 4  # an event record: its event counts as recorded once the driver accepted it
_QUEUED = PTO_QUEUED
_ECANCELED = -PTO_ECANCELED
_FIRST_FAILURE = lib.PTO_CQ_FIRST_FAILURE
_EDEP = -PTO_EDEP
_BATCH = 256
_MAX_BATCHES = 16  # per pump wake-up: 4096 records, then the event loop gets a turn
_SLICE_US = 50_000  # blocking waits wake this often, so Ctrl-C stays prompt
_KEEP_FAILURES = 256  # first failures remembered for cause_token look-ups
_Future = asyncio.Future
_COLUMNS_FROM = 16  # batches this large are read column-wise through cq_view (cheaper past ~8)


class _Entry:
    """A command waiting in a stream's host FIFO (see the module doc, step 4).

    Attributes
    ----------
    fn, args
        ``fn(*args)`` submits it and returns a driver status; ``args[-1]`` is
        its token (0: none).
    owner
        The Launch or Event it belongs to, or None.
    flags : int
        ``_F_LAST``, ``_F_DATA`` and ``_F_RECORD``.
    gate
        None, or an object whose ``_entered`` must be true before the entry
        may go (an Event: its record reached the driver).
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


def cq_view(buf):
    """Return a numpy structured view of the completion buffer `buf` (``pto_completion[]``).

    Only the fields the drain reads in bulk are named; offsets come from cffi,
    so the view follows the C layout.
    """
    fields = ("token", "status", "start_ns", "end_ns")
    dtype = np.dtype({
        "names": fields,
        "formats": ["=u8", "=i4", "=u8", "=u8"],
        "offsets": [ffi.offsetof("pto_completion", f) for f in fields],
        "itemsize": ffi.sizeof("pto_completion"),
    })
    return np.frombuffer(ffi.buffer(buf), dtype=dtype)


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _caller_stacklevel() -> int:
    """The ``stacklevel`` that points a warning at the first frame outside pypto_async."""
    frame = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR + os.sep):
        frame = frame.f_back
        level += 1
    return level


class CommandQueue:
    """Submission, completion and waiting for a worker (a mixin; see the module doc)."""

    # -- submission (lock held) -------------------------------------------------------------------

    def _token(self, owner) -> int:
        token = self._next_token
        self._next_token = token + 1
        self._pending[token] = owner
        return token

    def _submit(self, stream: Stream, fn, args: tuple, owner, flags: int, gate=None) -> bool:
        """Queue one command; True if it entered the ring now.  args[-1] is its token."""
        if stream._fifo or (gate is not None and not gate._entered):
            self._hold(stream, fn, args, owner, flags, gate)
            return False
        rc = fn(*args)
        if not rc:
            return True
        if rc == _QUEUED:
            self._overflowed(stream, 1)
            if flags & _F_RECORD:
                owner._entered = True  # recorded: what waits on the event from now on waits for it
            elif flags & _F_LAST and owner is not None:
                self._track(stream, owner, args[-1], args[-1])
            return False
        self._pending.pop(args[-1], None)
        check(rc, owner._name if owner is not None else "queueing a command")

    def _submit_group(self, stream: Stream, cmds: list, owner: Launch) -> bool:
        """Queue a group of (fn, args, flags); True if all of it entered the ring."""
        if stream._fifo:
            epoch = lib.pto_stream_epoch(stream._ptr)
            fifo = stream._fifo
            for fn, args, flags in cmds:
                fifo.append(_Entry(fn, args, owner, flags, None, epoch))
            self._fifo_waits += len(cmds)
            return False
        queued = 0
        rc = 0
        for i, (fn, args, flags) in enumerate(cmds):
            rc = fn(*args)
            if rc:
                if rc != _QUEUED:
                    self._group_error(stream, cmds, i, rc, owner)
                queued += 1
        if not queued:
            return True
        self._overflowed(stream, queued)
        if rc == _QUEUED:
            self._track(stream, owner, cmds[0][1][-1], cmds[-1][1][-1])
            return False
        return True  # the last command is in the ring, so every one before it is

    def _group_error(self, stream: Stream, cmds: list, i: int, rc: int, owner: Launch) -> None:
        """The driver refused command `i` of a group: undo what was not queued, then raise.

        Commands [0, i) are queued and will report.  Of [i, n), the data
        commands never run (an output copy would write what no kernel
        computed); the free of the temporaries still goes in, in stream order
        (behind the queued commands that use them, and behind the work before
        a queued free the driver may have carved them from).
        """
        try:
            check(rc, owner._name)  # first: the driver's message is the last error of this thread
        except PtoError as exc:
            error = exc
        pending = self._pending
        dropped = 0
        for k in range(i, len(cmds)):
            fn, args, flags = cmds[k]
            if fn is lib.pto_stream_free and k > i:
                try:
                    self._submit(stream, fn, args, owner, flags)
                    continue
                except PtoError:  # a lost device: its memory goes with it
                    pass
            else:
                pending.pop(args[-1], None)
            dropped += 1
        owner._remaining -= dropped
        owner._mark_retrieved()
        if owner._exc is None:
            owner._exc = error
        if not owner._remaining:
            owner._finish()
        raise error

    def _overflowed(self, stream: Stream, n: int) -> None:
        """`n` commands went to `stream`'s overflow in the driver (lock held)."""
        self._fifo_waits += n
        if stream not in self._backlog:  # entering it starts the stream's back-pressure clock
            self._backlog[stream] = None

    def _track(self, stream: Stream, owner: Launch, first_token: int, last_token: int) -> None:
        """Note where `owner` (tokens first..last, queued back to back) waits for the ring."""
        seq = lib.pto_stream_accepted(stream._ptr)  # its last command's
        owner._span = (first_token, last_token, seq)
        stream._unentered.append((seq, owner))

    def _hold(self, stream: Stream, fn, args: tuple, owner, flags: int, gate) -> _Entry:
        """Queue a command in `stream`'s host FIFO, stamped with its failure epoch (lock held)."""
        entry = _Entry(fn, args, owner, flags, gate, lib.pto_stream_epoch(stream._ptr))
        stream._fifo.append(entry)
        if stream not in self._backlog:
            self._backlog[stream] = None
        self._fifo_waits += 1
        return entry

    def _queue_call(self, stream: Stream, fn, args: tuple, record: bool) -> _Entry | None:
        """Queue ``fn(*args, token)`` on `stream` in order with the worker's own work (lock held).

        The one hook :mod:`pypto_async.testing` uses.  ``fn`` returns a
        driver status; with `record` it is a device command whose completion
        the worker tracks (a token in its map), else it gets token 0.
        Returns the FIFO entry when it has to wait on the host, else None.
        """
        token = self._token(None) if record else 0
        args = (*args, token)
        if stream._fifo:
            return self._hold(stream, fn, args, None, 0, None)
        rc = fn(*args)
        if rc == _QUEUED:
            self._overflowed(stream, 1)
        elif rc:
            self._pending.pop(token, None)
            check(rc, "queueing a command")
        return None

    def _mark_entered(self, owner) -> None:
        owner._entered = True
        waiters = owner._entry_waiters
        if waiters:
            owner._entry_waiters = None
            self._wake_all(waiters)

    def _flush(self) -> None:
        """Let FIFO entries whose gates opened go; mark launches that entered their ring (lock held)."""
        backlog = self._backlog
        progress = True
        while progress and backlog:
            progress = False
            for stream in list(backlog):
                if stream._fifo and self._submit_held(stream):
                    progress = True  # a record that went may open a gate on another stream
                unentered = stream._unentered
                if unentered:
                    in_ring = lib.pto_stream_submitted(stream._ptr)
                    while unentered and unentered[0][0] <= in_ring:
                        owner = unentered.popleft()[1]
                        if not owner._entered:
                            # _mark_entered, called only when someone waits for entry.
                            owner._entered = True
                            if owner._entry_waiters:
                                self._mark_entered(owner)
                if not stream._fifo and not unentered:
                    sp = stream._ptr
                    if lib.pto_stream_accepted(sp) == lib.pto_stream_submitted(sp):
                        del backlog[stream]
                        if stream._closed:
                            self._destroy_stream(stream)

    def _submit_held(self, stream: Stream) -> bool:
        """Submit `stream`'s FIFO entries, in order, up to the first closed gate (lock held).

        Each goes backdated to the failure epoch it was queued at.  Returns
        whether any went.
        """
        fifo = stream._fifo
        sp = stream._ptr
        went = False
        backdate = None
        run_owner, run_first = None, 0  # the owner whose group is going, and its first token
        refused = None  # the driver refused a command of run_owner's group: its data stays out
        try:
            while fifo:
                entry = fifo[0]
                gate = entry.gate
                if gate is not None and not gate._entered:
                    break
                if entry.epoch != backdate:
                    backdate = entry.epoch
                    lib.pto_stream_backdate(sp, backdate)
                fifo.popleft()
                went = True
                owner = entry.owner
                if owner is not run_owner:
                    run_owner, run_first, refused = owner, entry.token, None
                if refused is not None and entry.flags & _F_DATA:
                    # Its output copies would write what no kernel computed; its free still goes.
                    self._pending.pop(entry.token, None)
                    owner._fail(refused)
                    continue
                rc = entry.fn(*entry.args)
                if rc == 0 or rc == _QUEUED:
                    flags = entry.flags
                    if flags & _F_RECORD:
                        owner._entered = True
                    elif flags & _F_LAST and owner is not None:
                        if rc:
                            self._track(stream, owner, run_first, entry.token)
                        elif not owner._entered:
                            self._mark_entered(owner)
                    continue
                self._pending.pop(entry.token, None)
                try:
                    check(rc, owner._name if owner is not None else "queueing a command")
                except PtoError as exc:
                    if owner is not None:
                        owner._fail(exc)
                        refused = exc
        finally:
            if backdate is not None:
                lib.pto_stream_backdate(sp, PTO_EPOCH_NOW)
        return went

    def _cancel(self, launch: Launch) -> bool:
        """Withdraw `launch` if none of it has reached the device (Launch.cancel)."""
        with self._lock:
            if launch._done or launch._entered or self._state != OPEN:
                return False
            stream = launch._stream
            if not self._drop_held(stream, launch):
                span = launch._span
                if span is None:
                    return False
                first, last, seq = span
                # Its commands have consecutive tokens and, on the stream, consecutive seqs.
                rc = lib.pto_stream_cancel_queued(stream._ptr, seq - (last - first), seq)
                if rc == 0:
                    return False  # its first command is in the ring: on the device
                check(rc, f"canceling {launch._name}")
                pop = self._pending.pop
                for token in range(first, last + 1):
                    pop(token, None)
            launch._remaining = 0
            if launch._exc is None:
                launch._exc = PtoCanceledError(f"{launch._name}: canceled before it reached the device")
            launch._finish()
            if self._pump.on_own_thread():
                self._settle_locked()  # its tokens left without records: waits on them may end
            return True

    def _drop_held(self, stream: Stream, owner) -> bool:
        """Take `owner`'s entries out of `stream`'s FIFO; False if it has none there (lock held).

        Its temporaries (the block its free stands for, or the one its memory
        wait was granted) go back in stream order, straight to the driver:
        the block may have been carved from a free still queued on the
        stream, which the work before that free still uses; nothing held in
        the FIFO uses it.
        """
        fifo = stream._fifo
        mine = [entry for entry in fifo if entry.owner is owner]
        if not mine:
            return False
        kept = [entry for entry in fifo if entry.owner is not owner]
        fifo.clear()
        fifo.extend(kept)
        blocks = []
        for entry in mine:
            self._pending.pop(entry.token, None)
            if entry.fn is lib.pto_stream_free:
                blocks.append(entry.args[1])
            elif entry.gate is not None:  # a memory wait's stand-in (see _memwait)
                block = entry.gate.withdraw()
                if block is not None:
                    blocks.append(block)
        for ptr in blocks:
            token = self._token(None)
            rc = lib.pto_stream_free(stream._ptr, ptr, token)
            if rc == _QUEUED:
                self._overflowed(stream, 1)
            elif rc:
                self._pending.pop(token, None)  # a lost device: its memory goes with it
        return True

    # -- completion (lock held) -------------------------------------------------------------------

    def _drain(self) -> int:
        """Drain ready completion records and resolve their owners (lock held).

        At most ``_MAX_BATCHES`` batches per call, so a device that keeps
        producing records cannot hold the event loop: records left over keep
        the fd readable, and the loop comes back to them after other work.
        """
        buf = self._cq
        view = self._cq_view
        pop = self._pending.pop
        dev = self._dev
        drain = lib.pto_cq_drain
        total = 0
        for _ in range(_MAX_BATCHES):
            n = drain(dev, buf, _BATCH)
            if n <= 0:
                break
            total += n
            if n >= _COLUMNS_FROM and not view["status"][:n].any():
                # A large batch of successes (pipelined work): read the fields the
                # owners need as whole columns, one numpy call each, instead of four
                # cffi attribute reads per record.  Same order as the records.
                recs = view[:n]
                for token, start_ns, end_ns in zip(recs["token"].tolist(), recs["start_ns"].tolist(),
                                                   recs["end_ns"].tolist()):
                    owner = pop(token, None)
                    if owner is not None:
                        owner._ok(start_ns, end_ns)
            else:
                for i in range(n):
                    rec = buf[i]
                    owner = pop(rec.token, None)
                    status = rec.status
                    if status:
                        self._on_failure(rec, status, owner)
                    elif owner is not None:
                        owner._ok(rec.start_ns, rec.end_ns)
            if n < _BATCH:
                break
        if total:
            self._completions += total
            self._wakeups += 1
        return total

    def _on_failure(self, rec, status: int, owner) -> None:
        cause_token = rec.cause_token
        cause = self._failures.get(cause_token) if cause_token else None
        what = owner._name if owner is not None else "a queued command"
        message = ffi.string(rec.message).decode("utf-8", "replace")
        text = f"{what}: {message}" if message else what
        if cause is not None:
            text = f"{text} (first failure: {cause})"
        exc = error_for_status(status, text, cause=cause, cause_token=cause_token)
        if status != _EDEP and status != _ECANCELED:
            self._remember_failure(rec.token, exc)
        if owner is not None:
            owner._fail(exc)

    def _remember_failure(self, token: int, exc: BaseException) -> None:
        """Keep `exc` as the first failure of `token`, for dependents naming it (lock held)."""
        failures = self._failures
        failures[token] = exc
        if len(failures) > _KEEP_FAILURES:
            del failures[next(iter(failures))]

    def _release_waiters(self, owner) -> None:
        """Wake everything waiting for `owner` (a Launch or Event) to enter its ring or finish."""
        waiters = owner._entry_waiters
        if waiters:
            owner._entry_waiters = None
            self._wake_all(waiters)
        waiters = owner._waiters
        if waiters:
            owner._waiters = None
            self._wake_all(waiters)

    def _wake_all(self, waiters: list) -> None:
        wake = self._pump.wake
        for waiter in waiters:
            if type(waiter) is _Future:
                # AsyncioPump.wake inlined (asyncio and uvloop waiters are asyncio
                # Futures): one Python call less per woken task.
                if not waiter.done():
                    try:
                        waiter.set_result(None)
                    except RuntimeError:  # its event loop is gone
                        pass
            elif type(waiter) is threading.Event:
                waiter.set()
            else:
                try:
                    wake(waiter)
                except RuntimeError:  # its event loop is gone
                    pass

    def _wake_idle(self) -> None:
        waiters = self._idle_waiters
        if waiters:
            self._idle_waiters = []
            self._wake_all(waiters)

    def _on_readable(self) -> None:
        """The pump's callback: the completion fd is readable."""
        with self._lock:
            if self._state == OPEN:
                self._service_locked()

    def _service_locked(self) -> None:
        """Drain records, refill rings from the FIFOs, run deferred frees, retry memory waits, settle."""
        self._drain()
        if self._backlog:
            self._flush()
        if self._deferred:
            self._process_deferred_locked()
        if self._mem_waiters:  # frees may have made room for launches waiting for memory
            self._retry_memory_locked()
        self._settle_locked()

    def _settle_locked(self) -> None:
        """Complete the sync points and wake the idle waiters whose wait is over (lock held).

        Also called where commands leave the token map without a record (a
        launch canceled before it reached the device), so no wait outlives
        its last command.
        """
        points = self._sync_points
        if points:
            oldest = self._oldest_in_flight()
            while points and points[0][0] <= oldest:
                points.popleft()[1]._ok(0, 0)
        if self._idle_waiters and not self._pending and not self._backlog:
            self._wake_idle()

    def _sync_point(self) -> Launch:
        """A Launch that completes once every command queued so far has completed.

        It has no command of its own: it waits for the token map to drain up to
        the next token, on every stream at once, closed and collected streams
        included.
        """
        self._check_open()
        with self._lock:
            if self._deferred:  # frees of collected tensors count as work queued so far
                self._process_deferred_locked()
            point = _Marker._make(self, self._default_stream, "a worker sync point")
            point._entered = True
            token = self._next_token
            if token <= self._oldest_in_flight():
                point._ok(0, 0)  # nothing in flight: done (no waiter to wake yet, on any thread)
            else:
                self._sync_points.append((token, point))
        return point

    def _oldest_in_flight(self) -> int:
        """The oldest token still in flight, else the next token (lock held)."""
        # Tokens are handed out in increasing order and the token map keeps insertion
        # order, so its first key is the oldest command still in flight.
        pending = self._pending
        return next(iter(pending)) if pending else self._next_token

    # -- blocking waits -------------------------------------------------------------------------------

    def _drive(self, predicate, timeout: float | None) -> bool:
        """Drain and flush on this thread until `predicate()`; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        lock = self._lock
        while True:
            with lock:
                if self._state != OPEN:
                    return predicate()
                self._service_locked()
                dev = self._dev
            if predicate():
                return True
            wait_us = _SLICE_US
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                wait_us = min(wait_us, int(left * 1e6) + 1)
            lib.pto_cq_wait(dev, wait_us)

    def _block_until(self, obj, entry: bool, timeout: float | None) -> None:
        """Block until `obj` entered the ring (entry) or completed; PtoTimeout past `timeout`.

        Every blocking wait ends here (sync-mode launches and copies, and the
        ``sync()`` methods), so this is where a wait that blocks an event loop
        running on this thread is noticed and warned about.
        """
        timeout = check_timeout(timeout, f"waiting for {obj._name}")
        self._check_open()
        if len(self._loop_warned) < 2 and running_loop_flavour() is not None:
            self._warn_loop_blocked()
        if entry:
            def predicate():
                return obj._entered
        else:
            def predicate():
                return obj._done
        if self._pump.on_own_thread():
            finished = self._drive(predicate, timeout)
        else:
            finished = self._block_foreign(obj, entry, predicate, timeout)
        if not finished:
            what = "enter its stream's ring" if entry else "complete"
            raise PtoTimeout(f"{obj._name} did not {what} within {timeout} s "
                             f"({len(self._pending)} command(s) in flight on the worker)")
        if self._state == FORKED:
            self._check_open()

    def _warn_loop_blocked(self) -> None:
        """Warn, once per worker and kind, that a blocking wait holds this thread's event loop."""
        kind = "wait" if self._async else "sync mode"
        if kind in self._loop_warned:
            return
        self._loop_warned.add(kind)
        loop = running_loop_flavour()
        if self._async:
            text = (f"a blocking wait (.sync()) blocks the {loop} event loop running on this thread "
                    "until the device finished: await the launch, stream or event instead "
                    "(or `await worker.wait()`)")
        else:
            text = (f"this ChipWorker is in sync mode, so its launches and waits block the {loop} "
                    "event loop running on this thread: open it with `async with ChipWorker(...)` "
                    "or `await worker.open()`, then await its launches")
        warnings.warn(text, RuntimeWarning, stacklevel=_caller_stacklevel())

    def _block_foreign(self, obj, entry: bool, predicate, timeout) -> bool:
        # Another thread than the event loop's: the pump resolves obj; wait on an Event.
        event = threading.Event()
        with self._lock:
            obj._waiter_list(entry).append(event)
        deadline = None if timeout is None else time.monotonic() + timeout
        while not predicate():
            if self._state != OPEN:
                return predicate()
            wait_s = _SLICE_US / 1e6
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                wait_s = min(wait_s, left)
            event.wait(wait_s)
        return True
