"""Submission: tokens, commands to the driver, the host FIFO and its flush.

The producer side of the :class:`~._queue.CommandQueue` (see :mod:`._queue`
for how work flows, steps 2 to 4).  A command is ``fn(*args)``, a driver
call that returns a status and whose last argument is its token.
:func:`submit` sends it at once unless its stream's FIFO holds work (or its
gate is closed), in which case it waits there, stamped with the stream's
failure epoch, until :func:`flush` lets it go.

The launch hot path (:func:`~._dispatch.launch_kernel`) inlines
:func:`token` and :func:`submit` for a launch without host arrays; every
other command comes through here.  Everything here runs with the lock held.
"""

from __future__ import annotations

from .._driver import PTO_EPOCH_NOW, check, lib
from ..errors import PtoError
from ._queue import F_DATA, F_LAST, F_RECORD, QUEUED, CommandQueue, Entry, release_waiters

__all__ = ["token", "note_used", "submit", "submit_group", "overflowed", "track", "hold", "enqueue_hook", "queue_call",
           "mark_entered", "flush"]


def token(q: CommandQueue, owner) -> int:
    """Hand out the next token, mapped to `owner` (a Launch, an Event, or None)."""
    t = q.next_token
    q.next_token = t + 1
    q.pending[t] = owner
    return t


def note_used(q: CommandQueue, stream) -> None:
    """`stream` takes work: the next worker sync looks at it (lock held; see ``_stream.sync_point``).

    Every path that queues a command on a stream calls it once the stream's
    ``_used`` is false: the functions here, and the two that inline them
    (``_dispatch.launch_kernel``, ``Graph.replay`` for each of its streams).
    """
    stream._used = True
    q.used[stream._id] = None


def submit(q: CommandQueue, stream, fn, args: tuple, owner, flags: int, gate=None) -> bool:
    """Queue one command; True if it entered the ring now.  args[-1] is its token."""
    if not stream._used:
        note_used(q, stream)
    if stream._fifo or (gate is not None and not gate._entered):
        hold(q, stream, fn, args, owner, flags, gate)
        return False
    rc = fn(*args)
    if not rc:
        return True
    if rc == QUEUED:
        overflowed(q, stream, 1)
        if flags & F_RECORD:
            owner._entered = True  # recorded: what waits on the event from now on waits for it
        elif flags & F_LAST and owner is not None:
            track(stream, owner, args[-1], args[-1])
        return False
    q.pending.pop(args[-1], None)
    check(rc, owner._name if owner is not None else "queueing a command")


def submit_group(q: CommandQueue, stream, cmds: list, owner) -> bool:
    """Queue a group of (fn, args, flags); True if all of it entered the ring."""
    if not stream._used:
        note_used(q, stream)
    if stream._fifo:
        epoch = lib.pto_stream_epoch(stream._ptr)
        fifo = stream._fifo
        for fn, args, flags in cmds:
            fifo.append(Entry(fn, args, owner, flags, None, epoch))
        q.fifo_waits += len(cmds)
        return False
    queued = 0
    rc = 0
    for i, (fn, args, flags) in enumerate(cmds):
        rc = fn(*args)
        if rc:
            if rc != QUEUED:
                _group_error(q, stream, cmds, i, rc, owner)
            queued += 1
    if not queued:
        return True
    overflowed(q, stream, queued)
    if rc == QUEUED:
        track(stream, owner, cmds[0][1][-1], cmds[-1][1][-1])
        return False
    return True  # the last command is in the ring, so every one before it is


def _group_error(q: CommandQueue, stream, cmds: list, i: int, rc: int, owner) -> None:
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
    pending = q.pending
    dropped = 0
    for k in range(i, len(cmds)):
        fn, args, flags = cmds[k]
        if fn is lib.pto_stream_free and k > i:
            try:
                submit(q, stream, fn, args, owner, flags)
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


def overflowed(q: CommandQueue, stream, n: int) -> None:
    """`n` commands went to `stream`'s overflow in the driver."""
    q.fifo_waits += n
    if stream not in q.backlog:  # entering it starts the stream's back-pressure clock
        q.backlog[stream] = None


def track(stream, owner, first_token: int, last_token: int) -> None:
    """Note where `owner` (tokens first..last, queued back to back) waits for the ring."""
    seq = lib.pto_stream_accepted(stream._ptr)  # its last command's
    owner._span = (first_token, last_token, seq)
    stream._unentered.append((seq, owner))


def hold(q: CommandQueue, stream, fn, args: tuple, owner, flags: int, gate) -> Entry:
    """Queue a command in `stream`'s host FIFO, stamped with its failure epoch."""
    if not stream._used:
        note_used(q, stream)
    entry = Entry(fn, args, owner, flags, gate, lib.pto_stream_epoch(stream._ptr))
    fifo = stream._fifo
    if not fifo:
        held(stream)
    fifo.append(entry)
    if stream not in q.backlog:
        q.backlog[stream] = None
    q.fifo_waits += 1
    return entry


def held(stream) -> None:
    """`stream`'s FIFO takes work: the driver's ordering queues no edge from or to it alone (lock held).

    The driver hears the FIFO is empty again when the runtime next orders
    an edge there itself (:meth:`~._hazards.Hazards.order`).
    """
    hz = stream._worker._hazards
    if hz is not None and hz.table is not None:
        lib.pto_hazards_set_held(hz.table, stream._id, 1)


def enqueue_hook(q: CommandQueue, stream, fn, args: tuple, *, record: bool) -> None:
    """Queue ``fn(*args, token)`` on `stream` in order with the worker's own work.

    The hook of :mod:`pypto_async.testing` (its latches and fault
    injections).  ``fn`` returns a driver status; with `record` it is a
    device command whose completion the queue tracks (a token in its
    map), else it gets token 0.  It goes to the driver now (into the
    ring, or the overflow behind a full one), or, behind work held on the
    host, into the stream's FIFO, and then runs, under the worker's lock,
    when the flush reaches it.  Takes the lock.
    """
    with q.lock:
        queue_call(q, stream, fn, args, record)


def queue_call(q: CommandQueue, stream, fn, args: tuple, record: bool) -> Entry | None:
    """Queue ``fn(*args, token)`` on `stream` in order (see :func:`enqueue_hook`).

    Returns the FIFO entry when it has to wait on the host, else None.
    """
    t = token(q, None) if record else 0
    args = (*args, t)
    if not stream._used:
        note_used(q, stream)
    if stream._fifo:
        return hold(q, stream, fn, args, None, 0, None)
    rc = fn(*args)
    if rc == QUEUED:
        overflowed(q, stream, 1)
    elif rc:
        q.pending.pop(t, None)
        check(rc, "queueing a command")
    return None


def mark_entered(q: CommandQueue, owner) -> None:
    """`owner` entered its ring: wake what waits for that."""
    owner._entered = True
    release_waiters(q, owner, entry_only=True)


def flush(q: CommandQueue) -> None:
    """Let FIFO entries whose gates opened go; mark launches that entered their ring."""
    backlog = q.backlog
    progress = True
    while progress and backlog:
        progress = False
        for stream in list(backlog):
            if stream._fifo and _submit_held(q, stream):
                progress = True  # a record that went may open a gate on another stream
            unentered = stream._unentered
            if unentered:
                in_ring = lib.pto_stream_submitted(stream._ptr)
                while unentered and unentered[0][0] <= in_ring:
                    owner = unentered.popleft()[1]
                    if not owner._entered:
                        # mark_entered, called only when someone waits for entry.
                        owner._entered = True
                        if owner._entry_waiters:
                            mark_entered(q, owner)
            if not stream._fifo and not unentered:
                sp = stream._ptr
                if lib.pto_stream_accepted(sp) == lib.pto_stream_submitted(sp):
                    del backlog[stream]
                    if stream._closed:
                        stream._destroy()


def _submit_held(q: CommandQueue, stream) -> bool:
    """Submit `stream`'s FIFO entries, in order, up to the first closed gate.

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
            if refused is not None and entry.flags & F_DATA:
                # Its output copies would write what no kernel computed; its free still goes.
                q.pending.pop(entry.token, None)
                owner._fail(refused)
                continue
            rc = entry.fn(*entry.args)
            if rc == 0 or rc == QUEUED:
                flags = entry.flags
                if flags & F_RECORD:
                    owner._entered = True
                elif flags & F_LAST and owner is not None:
                    if rc:
                        track(stream, owner, run_first, entry.token)
                    elif not owner._entered:
                        mark_entered(q, owner)
                continue
            q.pending.pop(entry.token, None)
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
