"""PyPTO's pass-manager names (``from pypto_async.ir.pass_manager import OptimizationStrategy``).

PyPTO's compiler picks a pass pipeline by :class:`OptimizationStrategy`;
it has one, ``Default``.  Here the one pipeline is :data:`~pypto_async.ir.PIPELINE`:
``PassManager.get_strategy(OptimizationStrategy.Default).run_passes(program)``
runs it (the same as :func:`~pypto_async.ir.run_passes`).
"""

from __future__ import annotations

import enum

from ..errors import PtoArgumentError
from ._passes import PIPELINE, run_passes
from ._program import Program

__all__ = ["OptimizationStrategy", "PassManager", "PassDumpLevel"]


class OptimizationStrategy(enum.Enum):
    """A pass pipeline: ``Default`` is the only one (PyPTO's too)."""

    Default = "Default"


class PassDumpLevel(enum.Enum):
    """``ir.compile(dump_passes=...)``'s verbosity (PyPTO's): ``NONE`` writes no dump; ``CONCISE`` and
    ``EXPLICIT`` write the program after each pass (one text here: the IR has no layouts to spell out)."""

    NONE = 0
    CONCISE = 1
    EXPLICIT = 2


class PassManager:
    """The pass pipeline of one strategy."""

    def __init__(self, strategy: OptimizationStrategy):
        self.strategy = strategy

    @classmethod
    def get_strategy(cls, strategy: OptimizationStrategy = OptimizationStrategy.Default) -> "PassManager":
        """Return the pass manager of ``strategy``."""
        if not isinstance(strategy, OptimizationStrategy):
            raise PtoArgumentError(f"get_strategy takes an OptimizationStrategy, got {strategy!r}")
        return cls(strategy)

    @property
    def passes(self) -> tuple:
        """The passes, in the order they run."""
        return tuple(PIPELINE)

    def run_passes(self, program):
        """Return ``program`` lowered by the pipeline (a lowered program is returned as it is).

        ``program`` is a traced or lowered :class:`~pypto_async.ir.Program`, or a
        ``@pl.program`` class (traced first).
        """
        if not isinstance(program, Program) and hasattr(program, "trace") and hasattr(program, "kernels"):
            program = program.trace()
        if not isinstance(program, Program):
            raise PtoArgumentError(f"run_passes takes an ir.Program or a @pl.program class, got {program!r}")
        return run_passes(program)
