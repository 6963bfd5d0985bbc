"""``pl.unroll`` and ``pl.pipeline``: loop forms that are scheduling hints over ``pl.range``.

Both compute exactly what ``pl.range`` over the same bounds computes, one
iteration after another in order; the form is recorded on the loop
(``For.kind``, ``For.stage``) and shown by the printed program.

* ``pl.unroll(n)`` / ``pl.unroll(start, stop, step)``: PyPTO unrolls the loop
  at compile time; it takes int bounds and no ``init_values``.
* ``pl.pipeline(n, stage=s)``: PyPTO replicates the body ``s`` times per step
  so that consecutive iterations' loads and computes overlap (ping-pong
  buffering at ``s=2``), with a tail for a remainder.  ``stage=`` is required
  and at least 1; carried tiles (``init_values=``) work as in ``pl.range``.
"""

from __future__ import annotations

from .._scalars import is_int
from ..ir._diag import compile_error
from ._control import range as _range
from ._tracer import user_loc

__all__ = ["unroll", "pipeline"]


class unroll(_range):
    """A ``pl.range`` PyPTO unrolls at compile time (``for i in pl.unroll(4):``); no ``init_values``."""

    _kind = "pl.unroll"
    _form = "unroll"

    def __init__(self, start, stop=None, step=1, *, init_values=None):
        if init_values is not None:
            raise compile_error("pl.unroll() cannot be combined with init_values (an unrolled loop carries "
                                "no explicit state; use pl.range)", user_loc())
        super().__init__(start, stop, step)


class pipeline(_range):
    """A ``pl.range`` software-pipelined ``stage`` deep (``for i in pl.pipeline(n, stage=2):``)."""

    _kind = "pl.pipeline"
    _form = "pipeline"

    def __init__(self, start, stop=None, step=1, *, stage=None, init_values=None):
        if stage is None:
            raise compile_error("pl.pipeline() requires stage= (positive integer): pl.pipeline(stop, stage=F)",
                                user_loc())
        if not is_int(stage) or isinstance(stage, bool):
            raise compile_error(f"pl.pipeline() stage must be a compile-time constant integer, got {stage!r}",
                                user_loc())
        if stage < 1:
            raise compile_error(f"pl.pipeline() stage must be >= 1, got {stage}", user_loc())
        super().__init__(start, stop, step, init_values=init_values)
        self._stage = int(stage)
