"""The dispatch path: from a call to commands on a stream.

A launch goes down through these files::

    handle(*args) / handle.submit(*args)      _kernel.py      KernelHandle
      launch_kernel                           _dispatch.py    this module
        Binder.bind                           _args.py        check and convert the arguments
        DeviceTensor._join                    _tensor.py      first use on this stream
        token + pto_stream_launch             (inlined)       no host arrays: one command
        launch_group                          _dispatch.py    host arrays: a command group
          DeviceMemory.alloc_temps            _memory.py      one block of temporaries
          wait_for_memory                     _memwait.py     ... or wait for one
          group_commands                      _group.py       copies in, kernel, copies out, free
          submit_group                        _submit.py      to the driver, or the stream's FIFO
      finish_sync                             (sync mode)     block until it completed
    ... the device runs it; the pump wakes ...
    service -> drain -> Launch._ok / _fail    _complete.py    the Launch resolves

``dispatch(compiled, args)`` (what ``compiled(*args)`` and ``@pl.jit``
kernels call) picks the worker first and then takes this path; it is an
entry point, above the worker, in :mod:`._entry`.

The hot path.  :func:`launch_kernel` runs once per launch, and for a launch
on DeviceTensors and scalars (no host arrays) its cost is the runtime's
per-launch cost, so it is kept flat: it compares the worker's state itself,
takes the task-local default stream without a call when no ``use_stream``
is active, inlines :func:`~._submit.token` and :func:`~._submit.submit` (one
command, straight to the driver unless the stream's FIFO holds work), calls
``pto_stream_launch`` and ``Launch._make`` through names bound once (a cffi
``lib`` attribute costs a lookup, a classmethod a bound method), and passes the argument list as is (cffi converts it to a
temporary ``uint64_t`` array, which the driver copies into the ring heap or
its overflow).  A launch that waits in the FIFO keeps its values as a tuple:
a tuple of ints drops out of the cyclic GC's tracking at its first
collection, a list never does.  With automatic ordering, a launch on
DeviceTensors the stream used before goes to the driver as
``pto_stream_launch_ordered``, in ``pto_stream_launch``'s shape (the
device's table, the kernel's declared accesses): the driver decides the
edges its tensors need and queues them with the launch, in one call
(:mod:`._hazards`); it takes two tokens, the one before the launch's for a
wait the edges may need.  And every 64th launch it runs the completion
service itself when its pump may (``can_serve_inline``): a coroutine that
submits without ever suspending never lets the pump run, and draining now
and then lets finished launches die young (cheap for the cyclic GC) and
keeps the completion queue short.  There too it counts the launches of
``submit()`` for the pump's turn-taking (see :mod:`._pump`, on producers
that never suspend): when one is due, that launch's ``await`` yields to the
loop once.  Everything else on the path is ordinary code.
"""

from __future__ import annotations

from .._driver import check
from ._complete import observe, service
from ._context import capture_of, stream_stack
from ._group import group_commands, group_flags, inputs
from .._driver import lib
from ._hazards import fused_overflow, order
from ._launch import Launch, mark_turn, submitted_launch
from ._memwait import wait_for_memory
from ._queue import F_DATA, F_LAST, QUEUED
from ._state import OPEN
from ._stream import accept, task_default
from ._submit import hold, note_used, overflowed, submit, submit_group, token, track
from ._wait import block_until

__all__ = ["launch_kernel", "launch_group", "queue_one", "finish_sync"]

_hz_launch = lib.pto_stream_launch_ordered  # bound once, as the launch calls are (see the module doc)
_DECLINED = lib.PTO_HZ_DECLINED
_make_launch = Launch._make  # ... and this (a classmethod lookup makes a bound method each time)
# The hot path runs the completion service itself once per this many launches (a threshold on
# tokens, however many each launch takes: an inferred edge takes one too).
_SERVICE_EVERY = 64
_HELD = 1 << 40  # the status of a launch held in its stream's FIFO (_queue_launch): no driver status is this

def launch_kernel(worker, h, args: tuple, stream, submit_only: bool) -> Launch:
    """Queue a launch of the registered kernel `h` (``h(*args)``, or ``h.submit`` with `submit_only`).

    The hot path: see the module doc.
    """
    if worker._state != OPEN:
        worker._check_open()
    if worker._captures and (cap := capture_of(worker)) is not None:
        return cap.launch(h, args, stream, submit_only)  # recorded, not queued (_capture.py)
    if h._unfit is not None:
        raise h._refusal()
    if stream is None:
        stream = task_default(worker) if stream_stack() else worker._default_stream
    else:
        accept(worker, stream)
    values, hosts, joins = h._binder.bind(worker, stream, args)
    out1 = h._out1
    # Nothing to keep alive for DeviceTensor and scalar arguments: a tensor collected
    # while the launch runs is freed in stream order behind it.  Host arrays are kept
    # by launch_group.
    launch = (submitted_launch if submit_only else _make_launch)(
        worker, stream, h._label, 1, None, args[out1] if out1 >= 0 else h._result(args), submit_only)
    q = worker._queue
    with q.lock:
        if worker._memory.deferred:
            worker._memory.free_deferred_locked()
        hz = worker._hazards
        if hosts is None:  # one command
            if joins is None and not stream._fifo:  # the hot shape: DeviceTensors this stream used before
                if hz is None:  # nothing to order
                    tok = q.next_token
                    q.next_token = tok + 1
                    span = 1
                    q.pending[tok] = launch
                    stream._last = tok
                    rc = h._launch(stream._ptr, h._kptr, h._blocks, values, h._nargs, tok)
                elif hz.launch is not None and h._ordered:
                    # The driver orders the launch and queues the edges it needs with it, in one call
                    # of pto_stream_launch's shape (the table is the device's, the accesses the
                    # kernel's).  (hz.launch: the table while nothing closes this path, a trace
                    # that tags graph replays included, see Hazards.launch.)
                    tok = q.next_token + 1  # tok - 1: the edges' wait, if any (quiet)
                    q.next_token = tok + 1
                    span = 2
                    q.pending[tok] = launch
                    stream._last = tok
                    rc = _hz_launch(stream._ptr, h._kptr, h._blocks, values, h._nargs, tok)
                    if rc and rc > QUEUED:  # (rc: the commonest, 0, tested first)
                        if rc == _DECLINED:  # nothing queued: its tokens go back, and it is ordered here
                            del q.pending[tok]
                            q.next_token = tok - 1
                            hz.order(stream, h._binder.accesses(args), h._label, 0)
                            tok, rc = _queue_launch(q, h, stream, values, launch)
                            span = 1
                        else:
                            rc = fused_overflow(q, stream, hz, rc)
                else:  # the general path: the driver decides, the edges are queued here
                    hz.order(stream, h._binder.accesses(args), h._label, 0)
                    tok, rc = _queue_launch(q, h, stream, values, launch)
                    span = 1
            else:  # first uses join (the general path orders them), or a host condition holds the stream
                if hz is None:
                    order(worker, stream, joins, h._label, 0)
                else:
                    hz.order(stream, h._binder.accesses(args), h._label, 0)
                tok, rc = _queue_launch(q, h, stream, values, launch)
                span = 1
            if not stream._used:
                note_used(q, stream)
            if not rc:
                launch._entered = True
            elif rc == QUEUED:  # the driver keeps it until the ring has room
                overflowed(q, stream, 1)
                track(stream, launch, tok, tok)
            elif rc != _HELD:
                del q.pending[tok]
                check(rc, h._label)
            if tok >= q.serve_at:
                # Every 64 launches; a pump that may not serve here (sync mode, another thread) is
                # asked again then.
                q.serve_at = tok + span * _SERVICE_EVERY
                if q.pump.can_serve_inline():
                    service(q)
                    if submit_only and q.pump.turn_due(_SERVICE_EVERY):
                        mark_turn(launch)  # nor the rest of the loop: its await yields once
        else:  # host arrays: a command group
            sanitizing = hz is not None and hz.mode != "off"
            if sanitizing:
                hz.sanitizer.check_hosts(stream, hosts, h._label)
            if hz is None:
                if joins is not None:
                    order(worker, stream, joins, h._label, 0)
            else:
                hz.order(stream, h._binder.accesses(args), h._label, inputs(hosts))
            launch_group(worker, h, stream, values, hosts, launch)
            stream._last = q.next_token - 1
            if sanitizing:
                hz.sanitizer.note_hosts(stream, hosts, h._label, stream._last)
            if submit_only and q.pump.can_serve_inline() and q.pump.turn_due(1):
                mark_turn(launch)
    if worker._async:  # (_finish's first test, here: no call on the async hot path)
        return launch
    return _finish(worker, launch, submit_only, q)


def _queue_launch(q, h, stream, values, launch):
    """Queue the launch, one command: to the driver, or behind a host condition to the stream's FIFO.

    Returns its token and the driver's status (``_HELD``: held in the FIFO).
    """
    tok = q.next_token
    q.next_token = tok + 1
    q.pending[tok] = launch
    stream._last = tok
    if stream._fifo:  # behind a host condition: wait in the stream's FIFO
        hold(q, stream, h._launch, (stream._ptr, h._kptr, h._blocks, tuple(values), h._nargs, tok),
             launch, F_DATA | F_LAST, None)
        return tok, _HELD
    return tok, h._launch(stream._ptr, h._kptr, h._blocks, values, h._nargs, tok)


def _finish(worker, launch: Launch, submit_only: bool, q) -> Launch:
    if worker._async:
        return launch
    if submit_only:
        if not launch._entered:
            block_until(q, launch, True, None)
        return launch
    return finish_sync(worker, launch)


def launch_group(worker, h, stream, values: list, hosts: list, launch: Launch) -> None:
    """Queue a launch with host arrays: temporaries, copies in, kernel, copies out, free (lock held).

    If the temporaries do not fit, or other launches wait for memory
    already, the launch waits in its stream's FIFO (see :mod:`._memwait`).
    """
    launch._keep = hosts
    mem = worker._memory
    temps = None if mem.mem_waiters else mem.alloc_temps(hosts, stream, h._label)
    if temps is None:
        temps = wait_for_memory(mem, h, stream, values, launch)
        if temps is None:
            return
    q = worker._queue
    tokens = [token(q, launch) for _ in group_flags(hosts)]
    cmds = group_commands(h, stream, values, hosts, temps, tokens)
    launch._remaining = len(cmds)
    if submit_group(q, stream, cmds, launch):
        launch._entered = True


def queue_one(worker, stream, fn, args_without_token: tuple, name: str, keep, out) -> Launch:
    """Queue one data command owned by a new Launch (a copy; lock held)."""
    launch = _make_launch(worker, stream, name, 1, keep, out)
    q = worker._queue
    t = token(q, launch)
    stream._last = t
    if submit(q, stream, fn, (*args_without_token, t), launch, F_DATA | F_LAST):
        launch._entered = True
    return launch


def finish_sync(worker, launch: Launch) -> Launch:
    """In sync mode, wait for `launch` and raise its error; in async mode, return it."""
    if not worker._async:
        if not launch._done:
            block_until(worker._queue, launch, False, None)
        if launch._exc is not None:
            launch._mark_retrieved()
            observe(worker, launch._exc)
            raise launch._exc
    return launch
