"""Small argument checks shared by the waiting objects (no driver, no state)."""

from __future__ import annotations

from ..errors import PtoArgumentError

__all__ = ["check_timeout"]


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
