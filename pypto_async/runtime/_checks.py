"""Small argument checks shared by the runtime's objects (no driver, no state).

The scalar validators (:func:`is_int`, :func:`is_number`, :func:`check_int`)
are defined in :mod:`pypto_async._checks`, below every layer, so that the
language and the IR ask "an int, not a bool" the same way without importing
the runtime; they are re-exported here.
"""

from __future__ import annotations

from .._checks import check_int, is_int, is_number
from ..errors import PtoArgumentError

__all__ = ["check_timeout", "check_int", "is_int", "is_number"]


def check_timeout(timeout, what: str) -> None:
    """Raise PtoArgumentError unless `timeout` is None or a number of seconds.

    A negative timeout is accepted and means "do not wait": the call raises
    PtoTimeout at once if the work has not completed.
    """
    if timeout is None:
        return
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise PtoArgumentError(
            f"{what}: timeout must be a number of seconds or None, not {type(timeout).__name__}")
    if timeout != timeout:  # NaN
        raise PtoArgumentError(f"{what}: timeout must be a number of seconds, not NaN")
