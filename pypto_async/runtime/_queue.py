"""The worker's command queue: token map, stream FIFOs, completion drain, blocking waits.

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
3. Commands go straight into the stream's ring while it has room and the
   stream's FIFO is empty; otherwise they wait in that FIFO, in order.
4. The completion pump drains records in batches (256 per driver call),
   resolves owners, then flushes FIFOs into the rings as room frees up (a
   quarter window at a time, so one producer wake-up admits many launches).
5. A Launch resolves when its last record arrived; its error is the first
   failure among its records.

A failure record for a stream whose FIFO still holds work "poisons" what
waits there: once the driver has reported the failure it heals the stream for
later submissions, but those commands were queued before the failure was
observed.  Copies and launches fail here with a dependency error, as they
would have in the ring; event records are made to fail on the device, so
streams waiting on them fail as dependents too; latch waits (testing.hold),
which would complete at once, are dropped.  Frees go in; event waits go in as
dependent waits (still ordered, but a failed event does not fail the stream).

Threading: a worker belongs to the thread (and event loop) that opened it.
In sync mode several threads may share it (the process-wide default worker):
one lock guards the token map, the FIFOs and the driver queue, and blocking
waits never hold it.

:class:`CommandQueue` is a mixin of :class:`~pypto_async.runtime.ChipWorker`;
methods marked "lock held" expect the caller to hold ``self._lock``.
"""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np

from .._driver import PTO_EAGAIN, PTO_ECANCELED, PTO_EDEP, check, error_for_status, ffi, lib
from ..errors import PtoDependencyError, PtoError, PtoTimeout
from ._checks import check_timeout
from ._launch import Launch, _new_launch
from ._stream import Stream

__all__ = ["CommandQueue", "cq_view"]

_OPEN = 0
_FORKED = 2
_F_LAST = 1  # the last command of its owner's group: entering the ring completes submission
_F_DATA = 2  # a copy or launch: skipped (fails) if queued behind an observed failure
_F_RECORD = 4  # an event record: made to fail on the device if queued behind an observed failure
_EAGAIN = -PTO_EAGAIN
_ECANCELED = -PTO_ECANCELED
_FIRST_FAILURE = lib.PTO_CQ_FIRST_FAILURE
_EDEP = -PTO_EDEP
_BATCH = 256
_MAX_BATCHES = 16  # per pump wake-up: 4096 records, then the event loop gets a turn
_SLICE_US = 50_000  # blocking waits wake this often, so Ctrl-C stays prompt
_KEEP_FAILURES = 256  # first failures remembered for cause_token look-ups
_Future = asyncio.Future
_COLUMNS_FROM = 16  # batches this large are read column-wise through cq_view (cheaper past ~8)


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


def _drop_injection(stream_ptr, token) -> int:
    """Stand in for a command the host dropped: use up one injected failure, if armed."""
    lib.pto_debug_fail_next_drop(stream_ptr)
    return 0


def dropped_entry(entry: tuple) -> tuple:
    """The FIFO entry that takes a dropped entry's place in line (see _drop_injection)."""
    return (_drop_injection, (entry[1][0], 0), None, 0, None)


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
        fifo = stream._fifo
        if not fifo and (gate is None or gate._entered):
            rc = fn(*args)
            if not rc:
                return True
            if rc != _EAGAIN:
                self._pending.pop(args[-1], None)
                check(rc, owner._name if owner is not None else "queueing a command")
        fifo.append((fn, args, owner, flags, gate))
        if stream not in self._backlog:  # entering it starts the stream's back-pressure clock
            self._backlog[stream] = None
        self._fifo_waits += 1
        return False

    def _submit_group(self, stream: Stream, cmds: list, owner: Launch) -> bool:
        """Queue a group of (fn, args, flags); True if all of it entered the ring."""
        fifo = stream._fifo
        i = 0
        n = len(cmds)
        if not fifo:
            while i < n:
                fn, args, flags = cmds[i]
                rc = fn(*args)
                if rc:
                    if rc != _EAGAIN:
                        self._group_error(stream, cmds, i, rc, owner)
                    break
                i += 1
            else:
                return True
        for fn, args, flags in cmds[i:]:
            fifo.append((fn, args, owner, flags, None))
        if stream not in self._backlog:
            self._backlog[stream] = None
        self._fifo_waits += n - i
        return False

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

    def _mark_entered(self, owner) -> None:
        owner._entered = True
        waiters = owner._entry_waiters
        if waiters:
            owner._entry_waiters = None
            self._wake_all(waiters)

    def _flush(self) -> None:
        """Move FIFO commands into rings while there is room (lock held)."""
        backlog = self._backlog
        pending = self._pending
        progress = True
        while progress and backlog:
            progress = False
            for stream in list(backlog):
                fifo = stream._fifo
                # Refill a ring in batches, not one slot at a time: one producer
                # wake-up then admits many launches (hysteresis).
                if lib.pto_stream_space_left(stream._ptr) < self._refill:
                    continue
                while fifo:
                    fn, args, owner, flags, gate = fifo[0]
                    if gate is not None and not gate._entered:
                        break
                    if flags & _F_DATA and owner._poison is not None:
                        fifo.popleft()
                        pending.pop(args[-1], None)
                        _drop_injection(stream._ptr, 0)  # it takes its place among fail_next's
                        owner._fail(owner._poison)
                    else:
                        if flags & _F_RECORD and owner._poison is not None:
                            # The driver healed the stream when the failure was drained, but this
                            # record was queued before that: record the event as failed instead,
                            # so streams waiting on it fail as dependents (the driver's own rule)
                            # while this stream stays healthy for work queued after the
                            # observation.  Dependents name this record's token as their cause:
                            # map it to the first failure.
                            poison = owner._poison
                            if owner._exc is None:
                                owner._exc = poison
                            owner._poison = None
                            token = args[-1]
                            self._remember_failure(token, poison.__cause__ or poison)
                            fn = lib.pto_stream_record_failed
                            args = (args[0], args[1], PTO_EDEP, token, token)
                            fifo[0] = (fn, args, owner, flags, gate)  # stays so on a full ring
                        rc = fn(*args)
                        if rc == _EAGAIN:
                            break
                        fifo.popleft()
                        if rc:
                            pending.pop(args[-1], None)
                            try:
                                check(rc, owner._name if owner is not None else "queueing a command")
                            except PtoError as exc:
                                if owner is not None:
                                    owner._fail(exc)
                                    if flags & _F_DATA:
                                        # The rest of its group must not run on bad data: its
                                        # output copies would write what no kernel computed.
                                        # Its free still goes in.
                                        owner._poison = exc
                    progress = True
                    if flags & _F_LAST and owner is not None and not owner._entered:
                        # _mark_entered, called only when someone waits for entry.
                        owner._entered = True
                        if owner._entry_waiters:
                            self._mark_entered(owner)
                if not fifo:
                    del backlog[stream]
                    if stream._closed:
                        self._destroy_stream(stream)

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
        if rec.flags & _FIRST_FAILURE:
            # Draining this record observed the failure: the driver runs what is
            # submitted from now on, so what still waits in the FIFO (queued
            # before now) must fail as a dependent here.  Dependents' records
            # carry no flag: they are not news about their stream.
            stream = self._streams.get(rec.stream_id)
            if stream is not None and stream._fifo:
                self._poison_fifo(stream, cause if cause is not None else exc)
        if owner is not None:
            owner._fail(exc)

    def _remember_failure(self, token: int, exc: BaseException) -> None:
        """Keep `exc` as the first failure of `token`, for dependents naming it (lock held)."""
        failures = self._failures
        failures[token] = exc
        if len(failures) > _KEEP_FAILURES:
            del failures[next(iter(failures))]

    def _poison_fifo(self, stream: Stream, first: BaseException) -> None:
        fifo = stream._fifo
        for i, entry in enumerate(fifo):  # entries are replaced in place, never added or removed
            fn, args, owner, flags, gate = entry
            if fn is lib.pto_stream_latch_wait:
                # A latch wait (testing.hold) behind a failed command completes at once on the
                # device: it holds nothing.  Let into the ring after the observation it would
                # hold the stream, so drop it, as it would have completed there; in its place
                # in line, it still uses up an injected failure (testing.fail_next).
                fifo[i] = dropped_entry(entry)
                self._pending.pop(args[-1], None)
                continue
            if fn is lib.pto_stream_wait_event:
                # In the ring this wait would wait for its event, then fail as a dependent:
                # entering after the observation it must not become a new first failure.
                fifo[i] = (lib.pto_stream_wait_event_dependent, args, owner, flags, gate)
                continue
            if flags & (_F_DATA | _F_RECORD) and owner._poison is None and not owner._done:
                exc = PtoDependencyError(
                    f"{owner._name}: queued on stream {stream._id} behind a failed command "
                    f"(first failure: {first})",
                    status="PTO_EDEP",
                )
                exc.__cause__ = first
                owner._poison = exc

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
            if self._state == _OPEN:
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

        Also called where a command leaves the token map without a record
        (testing's dropped latch waits), so no wait outlives its last command.
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
            point = _new_launch(self, self._default_stream, "a worker sync point", 1, None, None)
            point._retrieved = True
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

    def _pump_wait(self, waiters: list):
        return self._pump.wait(waiters)

    # -- blocking waits -------------------------------------------------------------------------------

    def _drive(self, predicate, timeout: float | None) -> bool:
        """Drain and flush on this thread until `predicate()`; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        lock = self._lock
        while True:
            with lock:
                if self._state != _OPEN:
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
        """Block until `obj` entered the ring (entry) or completed; PtoTimeout past `timeout`."""
        check_timeout(timeout, f"waiting for {obj._name}")
        self._check_open()
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
        if self._state == _FORKED:
            self._check_open()

    def _block_foreign(self, obj, entry: bool, predicate, timeout) -> bool:
        # Another thread than the event loop's: the pump resolves obj; wait on an Event.
        event = threading.Event()
        with self._lock:
            if entry:
                if obj._entry_waiters is None:
                    obj._entry_waiters = []
                obj._entry_waiters.append(event)
            else:
                if obj._waiters is None:
                    obj._waiters = []
                obj._waiters.append(event)
        deadline = None if timeout is None else time.monotonic() + timeout
        while not predicate():
            if self._state != _OPEN:
                return predicate()
            wait_s = _SLICE_US / 1e6
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                wait_s = min(wait_s, left)
            event.wait(wait_s)
        return True
