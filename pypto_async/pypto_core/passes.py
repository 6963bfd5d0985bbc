"""``MemoryPlanner``: who plans on-chip buffer memory, PyPTO's ``ir.compile(memory_planner=)`` values.

The simulator has no on-chip memory to plan (each tile is its own buffer), so every planner
compiles the same program here; the option is taken, and checked to be one of these.
"""

from __future__ import annotations

import enum

__all__ = ["MemoryPlanner"]


class MemoryPlanner(enum.Enum):
    """PyPTO's planners: its own (``PYPTO``, the default), ``DSA_RP``, or ptoas's (``PTOAS``)."""

    PYPTO = "PYPTO"
    DSA_RP = "DSA_RP"
    PTOAS = "PTOAS"
