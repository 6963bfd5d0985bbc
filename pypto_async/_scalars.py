"""Scalar validators shared by every layer (no driver, no state).

Python counts ``True`` as the int 1; no argument of pypto_async does, so "an
int" always means "an int that is not a bool" and is asked in one place.  The
language and the IR raise their own errors (with the kernel's file and line)
from the predicates; the runtime's settings use :func:`check_int`, which
raises :class:`~pypto_async.errors.PtoArgumentError` naming the argument.
The runtime's own argument checks (timeouts, ...) are in
``pypto_async.runtime._checks``.
"""

from __future__ import annotations

from .errors import PtoArgumentError

__all__ = ["is_int", "is_number", "check_int"]


def is_int(value: object) -> bool:
    """Return True for an int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> bool:
    """Return True for an int or a float that is not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_int(value: object, what: str, *, low: int | None = None, high: int | None = None,
              optional: bool = False) -> int | None:
    """Return `value` if it is an int (not a bool) in ``[low, high]``, else raise.

    Parameters
    ----------
    value : object
        What the caller passed.
    what : str
        The argument's name, to start the message (``"RunConfig.cores"``).
    low, high : int, optional
        Inclusive bounds; None leaves that side open.
    optional : bool
        Accept None too (and return it).

    Raises
    ------
    PtoArgumentError
        ``"<what> must be [None or ]an int <bounds>, not <value!r>"``.
    """
    if value is None and optional:
        return None
    if is_int(value) and (low is None or value >= low) and (high is None or value <= high):
        return value
    if low is not None and high is not None:
        bounds = f" in [{low}, {high}]"
    elif low is not None:
        bounds = f" >= {low}"
    elif high is not None:
        bounds = f" <= {high}"
    else:
        bounds = ""
    either = "None or " if optional else ""
    raise PtoArgumentError(f"{what} must be {either}an int{bounds}, not {value!r}")
