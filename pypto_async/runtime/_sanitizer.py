"""The sanitizer: races reported instead of ordered, with both sides named.

With ``RunConfig(sanitize="raise")`` (or ``"warn"``, or the environment
variable ``PYPTO_ASYNC_SANITIZE``) a worker's hazard tracking checks
instead of inserting: an access to a DeviceTensor, a host array or freed
device memory that nothing orders after a conflicting earlier one raises
:class:`~pypto_async.errors.PtoRaceError` (or warns) before it is queued,
naming both sides (call, parameter, direction, stream, ``file:line``; the
whole stack with ``sanitize_stacks``).  :class:`~._hazards.Hazards` decides
what conflicts; this module names the sides and reports.
"""

from __future__ import annotations

import sys
import traceback
import warnings

from .._driver import ffi
from .._user_frame import user_frame
from ..errors import PtoRaceError

__all__ = ["Sanitizer", "describe", "tensor_name", "address"]


class Sanitizer:
    """A worker's sanitizer state: its mode, the races it reported, host arrays in flight.

    Attributes
    ----------
    mode : str
        ``"off"``, ``"raise"`` or ``"warn"``.
    stacks : bool
        Name each side by its whole stack, not its ``file:line``.
    races : int
        Races reported.
    hosts : dict
        Host address -> ``(end, stream id, token, what)``: inputs of calls in flight.
    """

    __slots__ = ("queue", "mode", "stacks", "races", "hosts")

    def __init__(self, queue, mode: str, stacks: bool):
        self.queue = queue
        self.mode = mode
        self.stacks = stacks
        self.races = 0
        self.hosts: dict[int, tuple] = {}

    def site(self) -> str:
        """The user's call site: file:line of the first frame outside pypto_async (or its stack)."""
        f = user_frame(sys._getframe(2))
        if f is None:
            return "<unknown>"
        if self.stacks:
            return "\n" + "".join(traceback.format_stack(f)).rstrip()
        return f"{f.f_code.co_filename}:{f.f_lineno}"

    def race(self, t, prev, how: str, second: str) -> None:
        first = prev[2] or f"an access on stream {prev[0]._id} (its call site unknown: queued while the " \
                           "sanitizer was off)"
        message = (f"data race on {tensor_name(t)}: {second} is not ordered after the {how} by {first}; "
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
        table = self.hosts
        if not table:
            return
        pending = self.queue.pending
        for addr in [a for a, entry in table.items() if entry[2] not in pending]:
            del table[addr]  # completed
        oclock = stream._oclock
        for _, ha, p in hosts:
            if not p.copies_out or not ha.nbytes:
                continue
            lo = address(ha.ptr)
            hi = lo + ha.nbytes
            for addr, (end, src, pos, what) in table.items():
                if addr < hi and lo < end and src != stream._id and oclock.get(src, 0) <= pos:
                    second = describe(label, p.name, p.copies_in, True, stream, self.site())
                    self.report(f"data race on a host array: {second} writes it while {what} may still "
                                "read it (nothing orders them, and it has not completed); wait for it first",
                                what, second)

    def note_hosts(self, stream, hosts: list, label: str, pos: int) -> None:
        """Remember the host arrays a call queued at token `pos` reads, until it completes (lock held)."""
        site = None
        for _, ha, p in hosts:
            if p.copies_in and ha.nbytes:
                if site is None:
                    site = self.site()
                lo = address(ha.ptr)
                self.hosts[lo] = (lo + ha.nbytes, stream._id, pos,
                                   describe(label, p.name, True, p.copies_out, stream, site))


def address(ptr) -> int:
    return int(ffi.cast("uintptr_t", ptr))


def describe(label: str, name: str, reads: bool, writes: bool, stream, site: str) -> str:
    """One side of a race: call, parameter, direction, stream, call site (a capture's too: _capture_hazards)."""
    direction = "InOut" if reads and writes else ("Out" if writes else "In")
    return f"{label} ({name!r}, {direction}) on stream {stream._id} at {site}"


def tensor_name(t) -> str:
    return f"DeviceTensor shape={t._shape} dtype={t._dtype.np_name} at 0x{t._ptr:x}"
