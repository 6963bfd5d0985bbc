"""Scheduling hints and dependency opt-outs of a region: ``pl.at(optimizations=, no_dep_args=, ...)``.

Two kinds of knob live here, and they differ in what they may change:

* **Hints** (``pl.split``, ``pl.cross_core_slot``, ``allow_early_resolve=``) say
  how a device may schedule or place a task: a mixed cube+vector region split
  in halves, the depth of its cube-to-vector ring, consumers pre-staged before
  their producer finishes.  None of them changes a result, and the simulator
  computes every region whole; each is checked as PyPTO documents it and kept
  in the region's IR (``Scope.hints``), where the printed program shows it.
* **Opt-outs** (``no_dep_args=[t]`` on a region, ``pl.create_tensor(...,
  manual_dep=True)`` on a tensor) remove edges from the task graph: the
  region's accesses to that tensor are neither ordered after earlier tasks
  nor waited for by later ones (:mod:`pypto_async.ir._deps`).  They are the
  user's promise that the accesses do not conflict; nothing checks it.

``pl.scope()`` is the runtime scope of PyPTO's task chapter: ``mode=MANUAL``
is ``pl.manual_scope()``; a hand-placed AUTO scope (dependency tracking on,
as everywhere by default) needs ``@pl.jit(auto_scope=False)`` and is recorded
on the tasks inside it as the hint ``scope=<depth>`` (the outermost is depth 0).
"""

from __future__ import annotations

import enum
import warnings
from dataclasses import dataclass

from .._scalars import is_int
from ..ir._diag import compile_error
from ._tracer import TensorArg, current, user_loc

__all__ = ["SplitMode", "Optimization", "Split", "CrossCoreSlot", "split", "cross_core_slot", "ScopeMode", "scope"]


class SplitMode(enum.Enum):
    """How ``pl.split`` halves a mixed cube+vector region: by rows, by columns, or not at all."""

    NONE = "NONE"
    UP_DOWN = "UP_DOWN"
    LEFT_RIGHT = "LEFT_RIGHT"


class Optimization:
    """An entry of ``pl.at(..., optimizations=[...])``."""


@dataclass(frozen=True)
class Split(Optimization):
    """``pl.split(mode)``: the region is a mixed kernel whose vector half the device may split along ``mode``."""

    mode: SplitMode
    slot_num: int | None = None


@dataclass(frozen=True)
class CrossCoreSlot(Optimization):
    """``pl.cross_core_slot(slot_num=n)``: the depth of the cube/vector ring of a mixed region."""

    slot_num: int


def _slot_num(slot_num, api: str) -> int:
    if not is_int(slot_num) or isinstance(slot_num, bool) or slot_num <= 0:
        raise compile_error(f"{api} slot_num must be a positive integer, got {slot_num!r}", user_loc())
    return int(slot_num)


def split(mode: SplitMode, *, slot_num: int | None = None) -> Split:
    """Mark a ``pl.at`` region as a mixed cube+vector kernel split along ``mode`` (a scheduling hint).

    ``slot_num=`` is PyPTO's deprecated spelling of :func:`cross_core_slot`.
    """
    if not isinstance(mode, SplitMode):
        raise compile_error(f"pl.split takes a pl.SplitMode, got {mode!r}", user_loc())
    if slot_num is not None:
        slot_num = _slot_num(slot_num, "pl.split")
        warnings.warn("pl.split(slot_num=...) is deprecated: use optimizations=[pl.cross_core_slot(slot_num=N)]",
                      DeprecationWarning, stacklevel=2)
    return Split(mode, slot_num)


def cross_core_slot(*, slot_num: int) -> CrossCoreSlot:
    """Size the cube/vector ring of a mixed ``pl.at`` region (a scheduling hint)."""
    return CrossCoreSlot(_slot_num(slot_num, "pl.cross_core_slot"))


def region_hints(optimizations, allow_early_resolve, loc) -> tuple[tuple[str, object], ...]:
    """Check ``pl.at``'s ``optimizations=`` and ``allow_early_resolve=``; return them as ``Scope.hints``."""
    hints: list[tuple[str, object]] = []
    if optimizations is not None:
        if not isinstance(optimizations, (list, tuple)):
            raise compile_error(f"pl.at(optimizations=...) must be a list, got {optimizations!r} "
                                f"(use optimizations=[pl.split(pl.SplitMode.NONE)])", loc)
        seen_split = seen_slot = slot_from_split = False
        for entry in optimizations:
            if isinstance(entry, Split):
                if seen_split:
                    raise compile_error("Duplicate 'pl.split(...)' in optimizations=[...]", loc)
                seen_split = True
                hints.append(("split", entry.mode.value))
                if entry.slot_num is not None:
                    if seen_slot:
                        raise compile_error("optimizations=[...] sets the cross-core slot count twice: via the "
                                            "deprecated pl.split(slot_num=...) and via pl.cross_core_slot(...)", loc)
                    slot_from_split = True
                    hints.append(("cross_core_slot", entry.slot_num))
            elif isinstance(entry, CrossCoreSlot):
                if seen_slot:
                    raise compile_error("Duplicate 'pl.cross_core_slot(...)' in optimizations=[...]", loc)
                if slot_from_split:
                    raise compile_error("optimizations=[...] sets the cross-core slot count twice: via the "
                                        "deprecated pl.split(slot_num=...) and via pl.cross_core_slot(...)", loc)
                seen_slot = True
                hints.append(("cross_core_slot", entry.slot_num))
            else:
                raise compile_error(f"Unsupported entry {entry!r} in pl.at(optimizations=[...]): each entry must "
                                    f"be pl.split(pl.SplitMode.X) or pl.cross_core_slot(slot_num=N)", loc)
    if not isinstance(allow_early_resolve, bool):
        raise compile_error(f"pl.at() allow_early_resolve must be a boolean (True/False), got "
                            f"{allow_early_resolve!r}", loc)
    if allow_early_resolve:
        hints.append(("allow_early_resolve", True))
    return tuple(hints)


def no_dep_names(no_dep_args, loc) -> tuple[str, ...]:
    """Check ``pl.at(no_dep_args=[...])`` (tensors of this kernel, each once); return their names."""
    if no_dep_args is None:
        return ()
    if not isinstance(no_dep_args, (list, tuple)):
        raise compile_error(f"pl.at(no_dep_args=...) must be a list of tensors, got {no_dep_args!r}", loc)
    names: list[str] = []
    for t in no_dep_args:
        if not isinstance(t, TensorArg) or hasattr(t, "origin"):
            raise compile_error(f"pl.at(no_dep_args=[...]) entries must be tensors (a parameter or a "
                                f"pl.create_tensor tensor, not a window or a tile), got {t!r}", loc)
        if t.name in names:
            raise compile_error(f"pl.at(no_dep_args=[...]) lists '{t.name}' more than once", loc)
        names.append(t.name)
    return tuple(names)


class ScopeMode(enum.Enum):
    """A runtime scope's mode: ``AUTO`` infers the edges among its tasks, ``MANUAL`` leaves them to ``deps=``."""

    AUTO = "AUTO"
    MANUAL = "MANUAL"


class scope:
    """``with pl.scope():`` a runtime scope of the orchestration (PyPTO's ``PTO2_SCOPE``).

    ``mode=pl.ScopeMode.MANUAL`` is :class:`pl.manual_scope`.  An AUTO scope
    (the default mode) keeps dependency tracking on, as it is everywhere
    else; writing one needs ``@pl.jit(auto_scope=False)`` (the compiler owns
    AUTO placement otherwise), it may not sit inside a manual scope or a
    ``pl.at`` region, and the tasks inside record its depth (``scope=0`` for the
    outermost; PyPTO maps the depth to a heap ring, which the sim does not have).
    """

    def __init__(self, mode: ScopeMode = ScopeMode.AUTO):
        if not isinstance(mode, ScopeMode):
            raise compile_error(f"pl.scope(mode=...) takes a pl.ScopeMode, got {mode!r}", user_loc())
        self.mode = mode

    def __enter__(self):
        from ._control import manual_scope

        t = current("pl.scope")
        loc = user_loc()
        if any(frame == "at" for frame in t.frames):
            raise compile_error("pl.scope belongs to the orchestration: it is not valid inside a pl.at region", loc)
        if self.mode is ScopeMode.MANUAL:
            self._inner = manual_scope()
            return self._inner.__enter__()
        if getattr(t, "auto_scope", True):
            raise compile_error("a hand-placed AUTO 'with pl.scope()' requires @pl.jit(auto_scope=False) (or "
                                "@pl.function / @pl.jit.inline(auto_scope=False): the compiler places AUTO scopes "
                                "otherwise); or use pl.scope(mode=pl.ScopeMode.MANUAL)", loc)
        if t.manual > 0:
            raise compile_error("an AUTO pl.scope() cannot nest inside a manual scope", loc)
        self._inner = None
        self._tracer = t
        t.scope_depth = getattr(t, "scope_depth", 0) + 1
        return self

    def __exit__(self, *exc):
        if self._inner is not None:
            return self._inner.__exit__(*exc)
        self._tracer.scope_depth -= 1
        return False


def scope_hints(tracer) -> tuple[tuple[str, object], ...]:
    """The hint a task gets from the hand-placed AUTO scopes around it (none when there are none)."""
    depth = getattr(tracer, "scope_depth", 0)
    return (("scope", depth - 1),) if depth else ()  # PyPTO counts the outermost scope as depth 0
