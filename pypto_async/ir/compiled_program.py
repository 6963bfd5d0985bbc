"""PyPTO's ``pypto.ir.compiled_program`` name (``from pypto_async.ir.compiled_program import CompiledProgram``).

The handle ``ir.compile`` returns: :class:`pypto_async.ir.CompiledProgram`.
"""

from __future__ import annotations

from ._compile import CompiledProgram

__all__ = ["CompiledProgram"]
