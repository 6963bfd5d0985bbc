"""What a lowered program compiles to, decided once: one kernel launch, or a task program.

:func:`plan` asks the question (:func:`~._program_codegen.is_task_program`) a single time
and returns a value that carries the answer; ``ir.compile`` then asks that value for the
artifact's hash tag, C source and kind-specific metadata, and never asks again.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._codegen import generate_c
from ._deps import TaskGraph
from ._program import Program
from ._program_codegen import (
    PROGRAM_CODEGEN_VERSION,
    generate_program_c,
    is_task_program,
    largest_scope,
    program_graph,
    program_symbol,
    runtime_shaped,
    warn_serial,
)

__all__ = ["Target", "plan"]


@dataclass(frozen=True)
class Target:
    """A lowered program that runs as one kernel launch (``kind`` ``"kernel"``).

    ``graph`` is its task instances and edges (``deps.json``, the metadata's
    ``task_graph``), or None where they cannot be derived.
    """

    program: Program
    graph: TaskGraph | None

    kind = "kernel"
    #: What the artifact's hash covers beside the IR text and the kernel generator's version.
    hash_tag = ""

    def source(self, symbol: str) -> str:
        """Return the C11 source, entry point ``symbol``."""
        return generate_c(self.program, symbol)

    def meta(self, symbol: str) -> dict:
        """Return the metadata fields that depend on the kind."""
        return {"kind": self.kind, "program_symbol": None, "largest_scope": 0}


@dataclass(frozen=True)
class _TaskProgram(Target):
    """A lowered program that runs as a task graph on the device's scheduler threads."""

    kind = "program"
    hash_tag = f" program {PROGRAM_CODEGEN_VERSION}"

    def source(self, symbol: str) -> str:
        return generate_program_c(self.program, symbol, self.graph)

    def meta(self, symbol: str) -> dict:
        return {"kind": self.kind, "program_symbol": program_symbol(symbol),
                "largest_scope": largest_scope(self.program.body)}


def plan(lowered: Program, *, force: bool = False) -> Target:
    """Return what `lowered` compiles to; `force` (a ``@pl.program``) makes one task a program.

    A task program too large to expand warns, whether its build is cached or not.
    """
    graph = program_graph(lowered)
    if not is_task_program(lowered, force=force):
        return Target(lowered, graph)
    if graph is None and not runtime_shaped(lowered):  # too many to expand (a runtime-shaped one has none)
        warn_serial(lowered, stacklevel=5)
    return _TaskProgram(lowered, graph)
