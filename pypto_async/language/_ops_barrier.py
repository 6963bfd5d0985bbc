"""``pl.system.sync_src`` / ``sync_dst`` / ``bar_v`` / ``bar_m`` / ``bar_all`` / ``task_invalid``.

On the device a core's pipes (MTE1-3, M, V, S, FIX) run apart: ``sync_src`` sets a flag on one
pipe that ``sync_dst`` waits for on another, and ``bar_v`` / ``bar_m`` / ``bar_all`` hold the vector
unit, the cube or every pipe until what was issued has finished.  The sim runs each kernel's ops
in program order, so every earlier op has finished when the next starts: the calls are checked
(inside a kernel being traced; pipes are ``pl.PipeType``; the flag a non-negative int) and order
nothing further.  ``task_invalid()`` is PyPTO's "no producer" task id, which a program writes as
``None`` (a carried task id's seed in ``pl.manual_scope``), and is ``None`` here.
"""

from __future__ import annotations

from .._scalars import is_int
from ..ir._diag import compile_error
from ._ops_sync import PipeType
from ._tracer import current, user_loc

__all__ = ["sync_src", "sync_dst", "bar_v", "bar_m", "bar_all", "task_invalid"]


def _flag(op: str, set_pipe, wait_pipe, event_id) -> None:
    current(op)
    for what, pipe in (("set_pipe", set_pipe), ("wait_pipe", wait_pipe)):
        if not isinstance(pipe, PipeType):
            raise compile_error(f"{op}: {what} must be a pl.PipeType (e.g. pl.PipeType.MTE2), got {pipe!r}",
                                user_loc())
    if isinstance(event_id, bool) or not is_int(event_id) or event_id < 0:
        raise compile_error(f"{op}: event_id must be a non-negative int, got {event_id!r}", user_loc())


def sync_src(*, set_pipe, wait_pipe, event_id) -> None:
    """Set flag ``event_id`` on ``set_pipe`` for ``wait_pipe`` (a core's pipes run in program order here)."""
    _flag("pl.system.sync_src", set_pipe, wait_pipe, event_id)


def sync_dst(*, set_pipe, wait_pipe, event_id) -> None:
    """Wait on ``wait_pipe`` for flag ``event_id`` of ``set_pipe`` (already set here: program order)."""
    _flag("pl.system.sync_dst", set_pipe, wait_pipe, event_id)


def bar_v() -> None:
    """Barrier of the vector unit: its earlier ops have finished (always so here)."""
    current("pl.system.bar_v")


def bar_m() -> None:
    """Barrier of the cube unit: its earlier ops have finished (always so here)."""
    current("pl.system.bar_m")


def bar_all() -> None:
    """Barrier of every pipe of the core: every earlier op has finished (always so here)."""
    current("pl.system.bar_all")


def task_invalid():
    """PyPTO's "no producer" task id: ``None``, the empty slot ``deps=`` skips."""
    current("pl.system.task_invalid")
    return None
