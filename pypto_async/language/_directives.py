"""Compile-time directives: ``pl.static_print``, ``pl.static_assert``, ``pl.const``, ``pl.RUNTIME``.

``static_print`` and ``static_assert`` run while the kernel is traced (PyPTO's
parse time) and leave nothing in the IR: a kernel is traced at its first call
for a signature (or ``kernel.compile``), a ``@pl.program`` when it is
compiled.  ``pl.const(value, dtype)`` is a number of a given dtype (a numpy
scalar), for a literal whose width matters.  ``pl.RUNTIME`` marks a scalar
parameter as a value that arrives at dispatch (``kernel.compile(n=pl.RUNTIME)``,
or as its default): here every scalar parameter is one (the sim never
specialises a scalar's value into the artifact), so it only stands in for the
value ``compile()`` has none for.
"""

from __future__ import annotations

import numpy as np

from .._dtypes import as_dtype
from ..errors import PtoArgumentError
from ..ir._diag import compile_error
from ._tracer import current, user_loc

__all__ = ["static_print", "static_assert", "const", "RUNTIME"]


def static_print(*args, **kwargs) -> None:
    """Print while the kernel is traced (the values the tracer sees: tensors, tiles, indices)."""
    current("pl.static_print")
    print(*args, **kwargs)


def static_assert(condition, msg: str = "") -> None:
    """Fail the trace with ``msg`` at the caller's line when ``condition`` (a Python value) is false.

    The condition is evaluated now, never when the kernel runs: a loop index
    or a runtime scalar has no value here, and is refused.
    """
    current("pl.static_assert")
    loc = user_loc()
    if not isinstance(msg, str):
        raise compile_error(f"pl.static_assert's message must be a string literal, got {msg!r}", loc)
    from ._tracer import Index, ScalarArg, Tile

    if isinstance(condition, (Index, ScalarArg, Tile)):
        raise compile_error(f"pl.static_assert takes a condition known at compile time, got {condition!r} (its "
                            f"value is known only when the kernel runs)", loc)
    if not condition:
        raise compile_error(f"static_assert failed: {msg}" if msg else "static_assert failed", loc)


def const(value, dtype):
    """``value`` as a number of ``dtype`` (a numpy scalar; a float for BF16, which numpy lacks)."""
    try:
        d = as_dtype(dtype)
    except PtoArgumentError as exc:
        raise compile_error(f"pl.const: {exc}", user_loc()) from None
    if isinstance(value, bool) and d.name != "BOOL" or not isinstance(value, (bool, int, float, np.generic)):
        raise compile_error(f"pl.const takes a number, got {value!r}", user_loc())
    if d.np_storage.name != d.np_name:  # BF16, FP8: numpy has no such type
        return float(value)
    if not d.is_float and float(value) != int(value):
        raise compile_error(f"pl.const({value!r}, pl.{d.name}): not an integer", user_loc())
    return np.dtype(d.np_name).type(value)


class _Runtime:
    """``pl.RUNTIME``: a scalar parameter's value arrives at dispatch (see the module)."""

    def __repr__(self) -> str:
        return "pl.RUNTIME"


RUNTIME = _Runtime()
