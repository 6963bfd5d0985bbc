"""PyPTO's ``pypto.pypto_core`` names that its programs import (``from pypto_async.pypto_core.passes import MemoryPlanner``).

``pypto_core`` is PyPTO's compiled core; here only the values its public options take live under
that name: :class:`~pypto_async.pypto_core.passes.MemoryPlanner`, ``ir.compile(memory_planner=)``'s.
"""

from __future__ import annotations

from . import passes

__all__ = ["passes"]
