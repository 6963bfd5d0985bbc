"""``pl.system.set_ffts`` / ``sync_set`` / ``sync_wait``: PyPTO's explicit Cube/Vector cross-core events.

On the device an AIV lane raises an event (``sync_set``) once its stores have
landed and the AIC waits on it (``sync_wait``) before it reads them; the A3
FFTS needs a workspace tensor declared first (``set_ffts``).  The sim runs a
kernel's lanes and its cube part in program order in one task, so an event
that was set earlier in the kernel is already set when it is waited on: the
ops are checked (PyPTO's argument rules) and order nothing further.  A wait
with no earlier ``sync_set`` of its event in the kernel would read data not
yet written (on the device: wait for a set that comes later, on another
lane), which the sim cannot reproduce, so it is refused at trace time.
"""

from __future__ import annotations

import enum

from .._scalars import is_int
from ..errors import PtoNotSupported
from ..ir._diag import compile_error
from ._tracer import Index, ScalarArg, TensorArg, current, user_loc

__all__ = ["PipeType", "set_ffts", "sync_set", "sync_wait"]

#: User event ids are 0-13; 14 and 15 are reserved (PyPTO).
_EVENT_IDS = 14
#: ``set_ffts``'s workspace: a static 1-D INT64 tensor of at least this many elements (PyPTO).
_MIN_FFTS_WORKSPACE = 256


class PipeType(enum.IntEnum):
    """A core's pipes, in PyPTO's order: the one an event is raised or awaited on."""

    MTE1 = 0
    MTE2 = 1
    MTE3 = 2
    M = 3
    V = 4
    S = 5
    FIX = 6
    ALL = 7


def _events(t) -> dict:
    """The events set so far in the kernel being traced (event id, or None for a runtime id -> its pipe)."""
    ev = getattr(t, "_sync_events", None)
    if ev is None:
        ev = {}
        t._sync_events = ev
    return ev


def _event_id(op: str, event_id):
    if isinstance(event_id, bool):
        raise compile_error(f"{op}: event_id must be an int or an integer index, got {event_id!r}", user_loc())
    if is_int(event_id):
        if not 0 <= event_id < _EVENT_IDS:
            raise compile_error(f"{op}: event_id {event_id} is out of range: user events are 0-{_EVENT_IDS - 1} "
                                "(14 and 15 are reserved)", user_loc())
        return int(event_id)
    if isinstance(event_id, Index) or (isinstance(event_id, ScalarArg) and not event_id.dtype.is_float):
        return None  # known at run time
    raise compile_error(f"{op}: event_id must be an int or an integer index, got {event_id!r}", user_loc())


def _check(op: str, pipe, core_type) -> None:
    if not isinstance(pipe, PipeType):
        raise compile_error(f"{op}: pipe must be a pl.PipeType (e.g. pl.PipeType.MTE3), got {pipe!r}", user_loc())
    if core_type is not None and core_type not in ("aic", "aiv"):
        raise compile_error(f"{op}: core_type must be 'aic' or 'aiv', got {core_type!r}", user_loc())


def set_ffts(workspace) -> None:
    """Declare the FFTS workspace (a 1-D INT64 tensor of at least 256 elements) explicit events use.

    Checked as PyPTO checks it; the sim needs no workspace.
    """
    op = "pl.system.set_ffts"
    current(op)
    if not isinstance(workspace, TensorArg):
        raise compile_error(f"{op}: workspace must be a tensor parameter, got {workspace!r}", user_loc())
    p = workspace.param
    if p.dtype.name != "INT64":
        raise compile_error(f"{op}: workspace must be INT64, got {p.dtype.name}", user_loc())
    if len(p.shape) != 1:
        raise compile_error(f"{op}: workspace must be 1-D, got shape {list(p.shape)}", user_loc())
    if not is_int(p.shape[0]) or p.shape[0] < _MIN_FFTS_WORKSPACE:
        raise compile_error(f"{op}: workspace must have a static length of at least {_MIN_FFTS_WORKSPACE} "
                            f"INT64 elements, got {p.shape[0]}", user_loc())


def sync_set(event_id, *, pipe, ffts_mode=None, core_type=None) -> None:
    """Raise cross-core event ``event_id`` (0-13, or a runtime index) on ``pipe``.

    ``ffts_mode`` (0, 1 or 2; 2 is a V-to-C join of both AIV lanes) and
    ``core_type`` (``"aic"`` / ``"aiv"``) are checked and recorded nowhere:
    the sim has one lane order.
    """
    op = "pl.system.sync_set"
    t = current(op)
    eid = _event_id(op, event_id)
    _check(op, pipe, core_type)
    if ffts_mode is not None and (isinstance(ffts_mode, bool) or ffts_mode not in (0, 1, 2)):
        raise compile_error(f"{op}: ffts_mode must be 0, 1 or 2, got {ffts_mode!r}", user_loc())
    _events(t)[eid] = pipe


def sync_wait(event_id, *, pipe, core_type=None) -> None:
    """Wait for cross-core event ``event_id`` on ``pipe``; a ``sync_set`` of it must come earlier in the kernel."""
    op = "pl.system.sync_wait"
    t = current(op)
    eid = _event_id(op, event_id)
    _check(op, pipe, core_type)
    events = _events(t)
    if eid not in events and None not in events:
        raise PtoNotSupported(
            f"{user_loc()}: {op}({event_id}): no earlier pl.system.sync_set of this event in the kernel; the sim runs "
            "its lanes in program order, so a wait must follow the set it waits for (set the event first)")
