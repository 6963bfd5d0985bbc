"""Memory-space rules: where each op may read a tile from, and where it puts one.

PyPTO's core has separate on-chip buffers (``Vec`` the unified buffer, ``Mat``
L1, ``Left``/``Right`` the cube's operand buffers L0A/L0B, ``Acc`` its
accumulator L0C, ``Bias``), and which transfers exist is a property of the
hardware.  These are its rules, checked at the op that breaks one:

* a load from a tensor lands in ``Vec`` (the default) or ``Mat``;
* ``Left``, ``Right`` and ``Bias`` are reached only by ``pl.move``, and only
  the cube reads them: ``Left`` as a matmul's left operand, ``Right`` as its
  right one.  Nothing moves or stores a tile out of them.  ``LeftScale`` and
  ``RightScale`` are the same for ``pl.matmul_mx``'s block scales;
* ``Acc`` is written only by ``pl.matmul`` / ``pl.matmul_acc`` (and may be
  allocated with ``pl.create_tile``): no load or move targets it;
* every other op computes in ``Vec``.  A ``Mat`` or ``Acc`` operand is moved
  there implicitly, as PyPTO's ``InferTileMemorySpace`` pass inserts that
  move; likewise a matmul operand in ``Vec``, ``Mat`` or ``Acc`` is moved to
  ``Left``/``Right`` implicitly.

The sim has one memory, so a space never changes a result; a placement the
device could not execute is a compile error here too.
"""

from __future__ import annotations

from ._diag import compile_error
from ._nodes import MEMORY_SPACES, Loc, Var

__all__ = [
    "CUBE_ONLY",
    "LOAD_TARGETS",
    "MOVE_TARGETS",
    "CREATE_TARGETS",
    "check_space",
    "check_vector_operand",
    "check_matmul_operand",
    "check_move",
]

CUBE_ONLY = ("Left", "Right", "Bias", "LeftScale", "RightScale")
LOAD_TARGETS = ("Vec", "Mat")
MOVE_TARGETS = ("Vec", "Mat", "Left", "Right", "Bias", "LeftScale", "RightScale")
CREATE_TARGETS = ("Vec", "Mat", "Left", "Right", "Acc", "Bias")


def _error(message: str, loc: Loc | None):
    return compile_error(message, loc)


def check_space(memory: str, allowed: tuple[str, ...], what: str, loc: Loc | None) -> None:
    """Raise unless ``memory`` is one of ``allowed`` for ``what``."""
    if memory not in MEMORY_SPACES and memory != "DDR":
        raise _error(f"{what}: unknown memory space {memory!r} (use pl.MemorySpace)", loc)
    if memory not in allowed:
        reason = {
            "DDR": "DDR holds tensors, not tiles",
            "Acc": "Acc is written only by pl.matmul / pl.matmul_acc",
            "Left": "Left is reached only through pl.move",
            "Right": "Right is reached only through pl.move",
            "Bias": "Bias is reached only through pl.move",
            "LeftScale": "LeftScale is reached only through pl.move",
            "RightScale": "RightScale is reached only through pl.move",
        }.get(memory, f"{memory} is not a target here")
        raise _error(f"{what} cannot target {memory}: {reason} (allowed: {', '.join(allowed)})", loc)


def check_vector_operand(v: Var, op: str, loc: Loc | None) -> None:
    """Refuse a Left/Right/Bias tile where a vector op (or a store) reads it."""
    if v.type.memory in CUBE_ONLY:
        raise _error(
            f"{op} reads tile %{v.id} in {v.type.memory}: Left, Right and Bias tiles feed the cube "
            "(pl.matmul) only; compute on the tile before moving it there, or keep a copy in Vec or Mat",
            loc,
        )


def check_matmul_operand(v: Var, slot: str, op: str, loc: Loc | None) -> None:
    """``slot`` is ``"Left"`` or ``"Right"``: refuse a tile placed for another slot."""
    m = v.type.memory
    if m in CUBE_ONLY and m != slot:
        side = "left" if slot == "Left" else "right"
        raise _error(
            f"{op}: the {side} operand %{v.id} is in {m}, but the cube reads its {side} operand from {slot} "
            f"(pl.move it to {slot}, or swap the operands)",
            loc,
        )


def check_move(v: Var, target: str, loc: Loc | None) -> None:
    """Check ``pl.move(v, target_memory=target)`` (a move within one space is a copy)."""
    if target == v.type.memory:
        return
    check_space(target, MOVE_TARGETS, "pl.move", loc)
    if v.type.memory in CUBE_ONLY:
        raise _error(
            f"pl.move: tile %{v.id} is in {v.type.memory}, which only the cube reads; nothing moves a tile "
            "out of Left, Right or Bias (move a copy kept in Vec or Mat instead)",
            loc,
        )
