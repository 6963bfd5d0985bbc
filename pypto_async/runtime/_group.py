"""A launch's command group: its commands, their order and flags, and its temporaries.

A launch with host arrays queues, on its stream and in this order: an H2D
copy into a device temporary per ``In``/``InOut`` array, the kernel, a D2H
copy out of its temporary per ``Out``/``InOut`` array, then one free of the
block that holds every temporary.  The temporaries are one block, carved per
array at the allocator's alignment (:func:`rounded`), so the allocation
succeeds or fails whole.  The dispatch path builds the group at once
(:mod:`._dispatch`); a launch that waits for memory builds it when granted
(:mod:`._memwait`).
"""

from __future__ import annotations

from .._driver import lib
from ._queue import F_DATA, F_LAST

__all__ = ["group_flags", "group_commands", "rounded", "needed", "inputs"]

_ALIGN = 256  # the driver's allocation granule


def group_flags(hosts: list) -> list[int]:
    """The FIFO flags of a launch group's commands, in the order the group queues them.

    Input copies, the kernel, output copies (data commands), then the free of
    the temporaries' block, the group's last command.
    """
    n_data = 1 + sum(p.copies_in + p.copies_out for _, _, p in hosts)
    return [F_DATA] * n_data + [F_LAST]


def inputs(hosts: list) -> int:
    """How many commands of a launch group come before its kernel: one input copy per ``In``/``InOut`` array."""
    return sum(1 for _, _, p in hosts if p.copies_in)


def group_commands(h, stream, values: list, hosts: list, temps: list, tokens: list) -> list:
    """The commands ``(fn, args, flags)`` of a launch group, in stream order.

    `hosts` are ``(index, HostArray, param)`` of the host arguments, `temps`
    their temporaries (the first is the block's start), `tokens` one per
    command (as many as :func:`group_flags` gives flags).  The temporaries
    take the host arrays' places in `values`.
    """
    sp = stream._ptr
    tokens = iter(tokens)
    for (i, ha, p), ptr in zip(hosts, temps):
        values[i] = ptr
    cmds = []
    for (i, ha, p), ptr in zip(hosts, temps):
        if p.copies_in:
            cmds.append((lib.pto_stream_copy_h2d, (sp, ptr, ha.ptr, ha.nbytes, next(tokens)), F_DATA))
    cmds.append((h._launch, (sp, h._kptr, h._blocks, values, h._nargs, next(tokens)), F_DATA))
    for (i, ha, p), ptr in zip(hosts, temps):
        if p.copies_out:
            cmds.append((lib.pto_stream_copy_d2h, (sp, ha.ptr, ptr, ha.nbytes, next(tokens)), F_DATA))
    cmds.append((lib.pto_stream_free, (sp, temps[0], next(tokens)), F_LAST))  # the one block
    return cmds


def rounded(nbytes: int) -> int:
    """The bytes the allocator reserves for a temporary of `nbytes` (its alignment)."""
    return (max(nbytes, 1) + _ALIGN - 1) // _ALIGN * _ALIGN


def needed(hosts: list) -> int:
    """The bytes of the block that holds a launch's temporaries."""
    return sum(rounded(ha.nbytes) for _, ha, _ in hosts)
