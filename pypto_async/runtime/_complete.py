"""Completion: how commands leave the token map.

The consumer side of the :class:`~._queue.CommandQueue` (see :mod:`._queue`,
steps 5 and 6).  A command leaves the map in one of three ways:

* its record arrives: :func:`drain` reads records in batches and resolves
  each owner (``_ok``, or ``_fail`` with the error the record names,
  :func:`on_failure`);
* it is withdrawn before any of it started (:func:`cancel`, for
  ``Launch.cancel``);
* the worker closes: :func:`drop_queued` cancels what has not started
  (past ``close``'s timeout), and :func:`fail_pending` fails whatever is
  left once the device is closed.

:func:`service` is what the completion pump runs whenever the completion fd
is readable (and what blocking waits run in a loop): drain, flush the FIFOs
(:func:`~._submit.flush`), the owner's ``on_service`` (deferred frees and
memory waits), then :func:`settle` the worker-wide waits.  Everything here
runs with the lock held unless it says otherwise.
"""

from __future__ import annotations

from sys import getsizeof

from .._driver import PTO_ECANCELED, PTO_EDEP, check, error_for_status, ffi, lib
from ..errors import PtoCanceledError
from ._queue import BATCH, CQ_INTS, CQ_WORDS, QUEUED, CommandQueue, wake_idle
from ._submit import flush, overflowed, token

__all__ = ["drain", "on_failure", "remember_failure", "observe", "raise_carried", "service", "on_readable", "serve_ready",
           "reset_kept_fd", "settle", "cancel", "drop_queued", "fail_pending"]

_cq_drain = lib.pto_cq_drain
_cq_drain_keep = lib.pto_cq_drain_keep
_ECANCELED = -PTO_ECANCELED
_EDEP = -PTO_EDEP
_MAX_BATCHES = 16  # per pump wake-up: 4096 records, then the event loop gets a turn
_KEEP_FAILURES = 256  # first failures remembered for cause_token look-ups
_COLUMNS_FROM = 16  # batches this large are read column-wise through cq_view (cheaper past ~8)
_W, _TOKEN, _START, _END = CQ_WORDS  # a record's 64-bit words, and where its fields are among them
_I, _STATUS = CQ_INTS  # its 32-bit ones, and where its status is
# A drained token map whose table is larger than this lets go of it (about 8,000 commands in flight at its peak).
_SHED_BYTES = 256 << 10


def _take(q: CommandQueue, most: int, keep_fd: bool) -> int:
    """Move up to `most` ready records into ``q.cq``; return how many (negative: a lost device).

    The one place ``q.fd_kept`` is written.  With `keep_fd`
    (``pto_cq_drain_keep``) the completion fd is left as it is, perhaps
    signalled for records already taken, and ``q.fd_kept`` says so until a
    plain drain (``pto_cq_drain``, which resets the fd once the queue is
    empty) clears it: :func:`reset_kept_fd` is what a pump runs before a task
    suspends.
    """
    if keep_fd:
        q.fd_kept = True
        return _cq_drain_keep(q.dev, q.cq, most)
    q.fd_kept = False
    return _cq_drain(q.dev, q.cq, most)


def reset_kept_fd(q: CommandQueue) -> None:
    """Before a task suspends for a record: if an in-line drain left the fd signalled, service now.

    The drain resets the fd (and resolves what arrived meanwhile), so the
    loop wakes for the record the task waits for, not at once for nothing.
    Both pumps run it on their way to suspending; it costs one attribute
    read when no drain kept the fd.  Takes the lock when it acts.
    """
    if q.fd_kept:
        on_readable(q)


def drain(q: CommandQueue, keep_fd: bool = False, taken: int = 0) -> int:
    """Drain ready completion records and resolve their owners; return how many.

    At most ``_MAX_BATCHES`` batches per call, so a device that keeps
    producing records cannot hold the event loop: records left over keep
    the fd readable, and the loop comes back to them after other work.
    `keep_fd`: leave the completion fd as it is (``pto_cq_drain_keep``), for
    a drain in line on the pump's thread (:func:`serve_ready`).  `taken`:
    the caller took the first batch, of that many records (all it asked for:
    more may be ready).
    """
    buf = q.cq
    most = taken or BATCH
    n = taken or _take(q, BATCH, keep_fd)
    if n <= 0:
        return 0  # nothing ready (or a lost device): nothing set up, nothing counted
    columns, words, ints = q.cq_view
    pop = q.pending.pop
    total = 0
    batches = 0
    while True:
        total += n
        batches += 1
        if n >= _COLUMNS_FROM and not columns["status"][:n].any():
            # A large batch of successes (pipelined work): read the fields the
            # owners need as whole columns, one numpy call each, instead of four
            # reads per record.  Same order as the records.
            recs = columns[:n]
            for t, start_ns, end_ns in zip(recs["token"].tolist(), recs["start_ns"].tolist(),
                                           recs["end_ns"].tolist()):
                owner = pop(t, None)
                if owner is not None:
                    owner._ok(start_ns, end_ns)
        else:
            for i in range(n):
                k = i * _W
                owner = pop(words[k + _TOKEN], None)
                status = ints[i * _I + _STATUS]
                if status:
                    on_failure(q, buf[i], status, owner)
                elif owner is not None:
                    owner._ok(words[k + _START], words[k + _END])
        if n < most or batches == _MAX_BATCHES:
            break
        most = BATCH
        n = _take(q, BATCH, keep_fd)
        if n <= 0:
            break
    q.completions += total
    q.wakeups += 1
    if not q.pending and getsizeof(q.pending) > _SHED_BYTES:
        # A dict keeps the table of its peak: after 100,000 commands in flight (allocations
        # queued without a sync) the map of a few hundred launches would still span ~130,000
        # slots, and every garbage collection that finds it young (a full one untracks it
        # empty; the next launch tracks it again) walks them all.  Emptied, clear() frees it.
        q.pending.clear()
    return total


def on_failure(q: CommandQueue, rec, status: int, owner) -> None:
    """Fail `owner` with the error of the failure record `rec`, naming its first failure."""
    cause_token = rec.cause_token
    cause = q.failures.get(cause_token) if cause_token else None
    what = owner._name if owner is not None else "a queued command"
    message = ffi.string(rec.message).decode("utf-8", "replace")
    text = f"{what}: {message}" if message else what
    if cause is not None:
        # The chain once: a driver message that carries the first failure's own names only its command.
        said = getattr(cause, "_pto_said", None)
        text = f"{text} (first failure: {said[0] if said and said[1] and said[1] in message else cause})"
    exc = error_for_status(status, text, cause=cause, cause_token=cause_token)
    exc._pto_said = (what, message)  # whose failure, and the driver's message of it
    if rec.fail_id:
        exc._pto_fail = (status, rec.stream_id, rec.fail_id)  # what delivering it observes
    if status != _EDEP and status != _ECANCELED:
        remember_failure(q, rec.token, exc)
    if owner is not None:
        owner._fail(exc)


def observe(worker, exc: BaseException, locked: bool = False) -> None:
    """Tell the driver that `exc`, a command's error, is being delivered to the user.

    The one call site of the failure rule's host half (``pto_completion_observe``;
    the rule is the driver's, exec.c "Failure propagation"): the stream failure
    that `exc`'s record is, or depends on, is observed, so work queued on that
    stream from now on runs, while work queued before still fails as its
    dependents.  Every path that hands a command's failure to the caller comes
    here as it does: ``await`` / ``sync()`` / ``result()`` / ``exception()`` of
    a Launch, and waiting for a point on a stream (:func:`raise_carried`: an
    Event, ``await stream``, ``stream.sync()``).  Draining records
    observes nothing, so when the runtime drains never changes what fails.  An
    error that is never retrieved observes nothing, nor does collecting its
    Launch.  `locked`: the caller holds the worker's lock.
    """
    fail = getattr(exc, "_pto_fail", None)
    if fail is None:
        return
    exc._pto_fail = None  # once is enough: the driver would ignore a second call
    if locked:
        _observe(worker, fail)
    else:
        with worker._lock:
            _observe(worker, fail)


def raise_carried(point) -> None:
    """Raise the failure that `point`, a completed point on a stream, carries; observe it as it goes.

    The one rule of every point on a stream that the host waits for: an
    :class:`~._event.Event` (``await event``, ``event.sync()``) and a stream
    marker (``await stream``, ``stream.sync()``) alike.  A point raises what
    its stream carries there: the failure of a command queued before it (a
    :class:`~pypto_async.errors.PtoDependencyError` whose ``__cause__`` is
    the first failure, when it is still known), or its own (an injected
    fault, a lost device, a cancel at close).  Raising it is delivering it:
    the stream's failure is observed (:func:`observe`), so work queued on
    that stream from now on runs.  Nothing is raised for a point that
    completed healthy.
    """
    exc = point._exc
    if exc is not None:
        observe(point._worker, exc)
        raise exc


def _observe(worker, fail) -> None:
    if worker._alive():
        rec = ffi.new("pto_completion *")
        rec.status, rec.stream_id, rec.fail_id = fail
        lib.pto_completion_observe(worker._dev, rec)


def remember_failure(q: CommandQueue, t: int, exc: BaseException) -> None:
    """Keep `exc` as the first failure of token `t`, for dependents naming it."""
    failures = q.failures
    failures[t] = exc
    if len(failures) > _KEEP_FAILURES:
        del failures[next(iter(failures))]


def on_readable(q: CommandQueue) -> None:
    """The pump's callback: the completion fd is readable (takes the lock)."""
    with q.lock:
        if q.alive():
            service(q)


def serve_ready(q: CommandQueue) -> None:
    """:func:`on_readable` in line, on the pump's thread, for records that wait already (takes the lock).

    What ``await launch`` runs when the launch's record is ready as it is
    awaited (a host thread ran the work itself, ``RunConfig.host_first``), so
    the task need not suspend.  The drain leaves the completion fd as it is
    (``pto_cq_drain_keep``): a fd signalled stays so, and the records pushed
    meanwhile signal nothing, where draining each record so would cost two
    system calls (the push's write, the drain's read).  The pump's own
    callback, on the loop's next look at the fd, resets it.
    """
    with q.lock:
        if not q.alive():
            return
        n = _take(q, 2, True)  # (two: a second one says more may be ready, with no call to ask)
        if n == 1:
            # The commonest: one record, the awaited launch's (drain's loop for one, written out).
            _, words, ints = q.cq_view
            owner = q.pending.pop(words[_TOKEN], None)
            status = ints[_STATUS]
            if status:
                on_failure(q, q.cq[0], status, owner)
            elif owner is not None:
                owner._ok(words[_START], words[_END])
            q.completions += 1
            q.wakeups += 1
        elif n > 1:
            drain(q, True, n)  # more: these two, then in batches, as any drain
        if q.backlog:
            flush(q)
        q.on_service()
        if q.sync_points or q.idle_waiters:  # settle's tests, without its call when both are empty
            settle(q)


def service(q: CommandQueue) -> None:
    """Drain records, refill rings from the FIFOs, run the owner's on_service, settle."""
    drain(q)
    if q.backlog:
        flush(q)
    q.on_service()
    if q.sync_points or q.idle_waiters:  # (as in serve_ready)
        settle(q)


def settle(q: CommandQueue) -> None:
    """Complete the sync points and wake the idle waiters whose wait is over.

    Also called where commands leave the token map without a record (a
    launch withdrawn before it started), so no wait outlives
    its last command.
    """
    points = q.sync_points
    if points:
        oldest = q.oldest_in_flight()
        while points and points[0][0] <= oldest:
            points.popleft()[1]._ok(0, 0)
    if q.idle_waiters and not q.pending and not q.backlog:
        wake_idle(q)


def cancel(q: CommandQueue, launch) -> bool:
    """Withdraw `launch` if none of its commands has started (Launch.cancel; takes the lock).

    Held on the host (its stream's FIFO): its entries leave the FIFO.  In
    the driver (the ring, or the backlog behind it): one call,
    ``pto_stream_cancel_tokens``, withdraws its commands still to run (its
    tokens in the map, consecutive on its stream), atomically with the
    device's scheduler, or none of them if one has started.  The driver
    skips them in their turn and their records, if any, name no owner.
    """
    with q.lock:
        if launch._done or not q.alive():
            return False
        stream = launch._stream
        if not _drop_held(q, stream, launch):
            if not launch._withdrawable:
                return False
            toks = [t for t, owner in q.pending.items() if owner is launch]
            if not toks:
                return False
            first, last = min(toks), max(toks)
            rc = lib.pto_stream_cancel_tokens(stream._ptr, first, last)
            if rc == 0:
                return False  # one of its commands has started: it runs to completion
            check(rc, f"canceling {launch._name}")
            pop = q.pending.pop
            for t in toks:
                pop(t, None)
        launch._remaining = 0
        if launch._exc is None:
            launch._exc = PtoCanceledError(f"{launch._name}: canceled before it started")
        launch._finish()
        if q.pump.on_own_thread():
            settle(q)  # its tokens left without records: waits on them may end
        return True


def _drop_held(q: CommandQueue, stream, owner) -> bool:
    """Take `owner`'s entries out of `stream`'s FIFO; False if it has none there.

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
        q.pending.pop(entry.token, None)
        if entry.fn is lib.pto_stream_free:
            blocks.append(entry.args[1])
        elif entry.gate is not None:  # a memory wait's stand-in (see _memwait)
            block = entry.gate.withdraw()
            if block is not None:
                blocks.append(block)
    for ptr in blocks:
        t = token(q, None)
        rc = lib.pto_stream_free(stream._ptr, ptr, t)
        if rc == QUEUED:
            overflowed(q, stream, 1)
        elif rc:
            q.pending.pop(t, None)  # a lost device: its memory goes with it
    return True


def drop_queued(q: CommandQueue, streams, exc: BaseException) -> int:
    """Cancel every command not yet started, on `streams` and in the driver; return how many.

    The entries of the streams' FIFOs fail with `exc` now; the driver fails
    its backlog and the commands waiting in rings, whose records then come
    as for any command.  Commands running on an engine finish.
    """
    dropped = 0
    for stream in streams:
        fifo = stream._fifo
        while fifo:
            entry = fifo.popleft()
            q.pending.pop(entry.token, None)
            if entry.owner is not None:
                entry.owner._fail(exc)
            dropped += 1
        stream._unentered.clear()  # the driver cancels its backlog below
    q.backlog.clear()
    return dropped + max(lib.pto_device_cancel(q.dev), 0)


def fail_pending(q: CommandQueue, exc: BaseException) -> None:
    """Finish every owner still in the token map with `exc`, and end every worker-wide wait.

    For a closed device: nothing is in flight any more, and no record will
    come.  A sync point or an idle waiter then finds the worker closed (the
    last drain normally settled them already).
    """
    owners = {id(o): o for o in q.pending.values() if o is not None}
    q.pending.clear()
    for owner in owners.values():
        if not owner._done:
            if owner._exc is None:
                owner._exc = exc
            owner._finish()
    points = q.sync_points
    while points:
        points.popleft()[1]._ok(0, 0)
    wake_idle(q)
