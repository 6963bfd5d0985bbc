"""Launches that wait for device memory: back-pressure on the arena, as on ring room.

A launch with host arrays holds one device temporary per array for its
life, all carved from one block: the input copies fill them, the kernel
uses them, the output copies empty them, and a stream-ordered free returns
the block.  Under load (a service with many requests in flight on a small
device) the arena can be full of the temporaries of launches about to
finish.  Failing the next launch then would be wrong: the memory it needs
is on its way back.  So a launch whose temporaries do not fit waits, as a
launch waits for ring room:

1. Its commands enter its stream's FIFO as stand-ins (:meth:`MemoryWait.run`)
   behind a gate, a :class:`MemoryWait` not yet "entered": the flush stops
   there, so later work on the stream queues behind the launch and order on
   the stream is kept.  Their tokens are taken at once, so a sync point
   (``w.sync()``, ``await w.wait()``) taken afterwards covers the launch.
2. After each drain (frees completed) and flush, device memory retries the
   oldest waiting launch (:func:`retry`, from ``DeviceMemory.on_service``).  Waiters are served in arrival
   order, worker-wide, and while one waits a new launch with host arrays
   joins the line instead of allocating, so a run of small requests cannot
   starve a large one.
3. Granted, the gate opens, and each stand-in submits its real command
   (now with the temporaries) when the flush reaches it.  The temporaries may
   be taken before the stand-ins reach the head of their FIFO: only the
   group's own commands use them, in stream order.

Waiting cannot help when the request is larger than the device, or when
nothing in flight could free memory: the device has no command left to run
(after a drain and a flush, whatever still sits in a FIFO waits, directly or
not, on a launch that waits for memory).  The launch then fails with
:class:`~pypto_async.errors.PtoOutOfMemory`: at the call if that is so when
it is made; else in its place on its stream, where its stand-ins complete
failed, so what was queued behind it runs next.

Facts this rests on:

* The driver counts a command completed after its effects: a free has
  returned its block by then (``release_resources`` in exec.c).  Reading "nothing in flight" *before* an
  allocation attempt therefore means the attempt saw every free that will
  ever run.
* A block freed on stream S may be handed to S again while its free is still
  queued (stream-ordered reuse): the group's commands all come later on S.

The functions take the worker's :class:`~._memory.DeviceMemory` (``mem``),
which keeps the waiting line; everything here runs with the worker's lock
held.
"""

from __future__ import annotations

from .._driver import ffi, lib
from ..errors import PtoError, PtoOutOfMemory
from ._group import group_commands, group_flags, needed
from ._queue import Entry
from ._submit import held, token

__all__ = ["MemoryWait", "wait_for_memory", "retry"]


def _device_idle(dev) -> bool:
    """True if the device has no command queued or running (every submission completed)."""
    stats = ffi.new("pto_device_stats *")
    lib.pto_device_get_stats(dev, stats)
    return stats.commands_submitted == stats.commands_completed


class MemoryWait:
    """The gate of a launch waiting for its temporaries, and the stand-in of its commands.

    ``_entered`` is the gate's state, read by the flush (as an Event's): False
    while the launch waits, True once it was granted memory or gave up.
    """

    __slots__ = ("_entered", "queue", "handle", "stream", "values", "launch", "tokens", "cmds", "exc")

    def __init__(self, queue, handle, stream, values: list, launch, tokens: list):
        self._entered = False
        self.queue = queue
        self.handle = handle
        self.stream = stream
        self.values = values
        self.launch = launch
        self.tokens = tokens
        self.cmds = None  # (fn, args, flags) per command, once granted
        self.exc = None  # the error, once it gave up

    def run(self, k: int, token: int) -> int:
        """Submit command `k` of the group (the flush calls it in the command's place).

        Returns the driver's status.  After the launch gave up, the command
        fails here instead, without reaching the device.
        """
        cmds = self.cmds
        if cmds is not None:
            fn, args, _ = cmds[k]
            return fn(*args)
        self.queue.pending.pop(token, None)
        self.launch._fail(self.exc)
        return 0

    def grant(self, temps: list) -> None:
        self.cmds = group_commands(self.handle, self.stream, self.values, self.launch._keep, temps, self.tokens)
        self._entered = True

    def give_up(self, exc: PtoError) -> None:
        self.exc = exc
        self._entered = True

    def withdraw(self) -> int | None:
        """Its launch was canceled while its stand-ins waited in the FIFO (Launch.cancel).

        The gate opens (nothing waits on it any more; :func:`retry` drops the
        done launch).  Returns the device block it was granted, for the
        caller to free in stream order, or None (idempotent).
        """
        self._entered = True
        cmds, self.cmds = self.cmds, None
        if cmds is None:
            return None
        fn, args, _ = cmds[-1]  # the free of the one block (see group_commands)
        return args[1]


def wait_for_memory(mem, handle, stream, values: list, launch):
    """Make `launch` wait for its temporaries, or raise if waiting cannot help.

    Called when the temporaries did not fit (or others wait already).
    Returns the temporaries if a last try found room, else None: the launch
    then waits in its stream's FIFO.

    Raises
    ------
    PtoOutOfMemory
        If the temporaries are larger than the device, or nothing is in
        flight that could free room; nothing is queued.
    """
    hosts = launch._keep
    nbytes = needed(hosts)
    capacity = mem.capacity
    q = mem.queue
    if nbytes > capacity:
        raise PtoOutOfMemory(
            f"{handle._label}: allocating {nbytes} bytes of device temporaries for its host arrays, more "
            f"than the device's {capacity} bytes: pass DeviceTensors, or open the worker with more "
            "device_memory"
        )
    if not (mem.mem_waiters or q.backlog or mem.deferred) and _device_idle(q.dev):
        # Nothing in flight: no free is coming.  A last try sees every free that ran.
        temps = mem.alloc_temps(hosts, stream, handle._label)
        if temps is None:
            raise PtoOutOfMemory(
                f"{handle._label}: allocating {nbytes} bytes of device temporaries: no free extent fits, "
                "and no work in flight would free any"
            )
        return temps
    flags = group_flags(hosts)
    tokens = [token(q, launch) for _ in flags]
    launch._remaining = len(tokens)
    gate = MemoryWait(q, handle, stream, values, launch, tokens)
    run = gate.run
    epoch = lib.pto_stream_epoch(stream._ptr)  # the driver judges the group as queued now
    if not stream._fifo:
        held(stream)
    stream._fifo.extend(Entry(run, (k, t), launch, f, gate, epoch)
                        for k, (t, f) in enumerate(zip(tokens, flags)))
    if stream not in q.backlog:
        q.backlog[stream] = None
    q.fifo_waits += len(tokens)
    mem.memory_waits += 1
    mem.mem_waiters.append(gate)
    return None


def retry(mem) -> bool:
    """Give the oldest waiting launches their temporaries; True if any was granted or gave up.

    Stops at the first that still does not fit while work is in flight (it
    goes on waiting).  One that cannot be helped gives up, and this returns
    at once, so the flush lets its stand-ins fail before the next is tried:
    work queued behind it may free memory.
    """
    waiters = mem.mem_waiters
    dev = mem.queue.dev
    moved = False
    while waiters:
        gate = waiters[0]
        launch = gate.launch
        if launch._done:  # its stand-ins were dropped (close() ran out of time)
            waiters.popleft()
            continue
        idle = _device_idle(dev)  # before the attempt: see the module doc
        try:
            temps = mem.alloc_temps(launch._keep, gate.stream, gate.handle._label)
        except PtoError as exc:  # not a shortage: a lost device
            waiters.popleft()
            gate.give_up(exc)
            return True
        if temps is None:
            if moved or not idle:  # (what it granted is not on the device yet: flush first)
                break
            waiters.popleft()
            gate.give_up(PtoOutOfMemory(
                f"{gate.handle._label}: allocating {needed(launch._keep)} bytes of device temporaries: "
                "waited for device memory until the device had nothing left to run, and they still "
                "do not fit (DeviceTensors still held keep the rest)"
            ))
            return True
        waiters.popleft()
        gate.grant(temps)
        moved = True
    return moved
