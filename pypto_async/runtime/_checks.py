"""Small argument checks shared by the runtime's objects (no driver, no state).

The scalar predicates every layer asks (:func:`is_int`, :func:`is_number`,
:func:`check_int`) are in :mod:`pypto_async._scalars`, below every layer, so
that the language and the IR ask "an int, not a bool" the same way without
importing the runtime.
"""

from __future__ import annotations

import math

import numpy as np

from .._scalars import is_number
from ..errors import PtoArgumentError

__all__ = ["check_timeout", "as_shape", "check_same", "int_tuple"]


def check_timeout(timeout, what: str) -> float | None:
    """Return `timeout` as seconds to wait at most, ``None`` for no limit.

    ``None`` and ``float("inf")`` (or any number too large for a float) mean
    no limit; ``0`` means "do not wait": the call raises PtoTimeout at once if
    the work has not completed.

    Raises
    ------
    PtoArgumentError
        For anything else: a non-number, NaN, or a negative number.
    """
    if timeout is None:
        return None
    if not is_number(timeout):
        raise PtoArgumentError(
            f"{what}: timeout must be a number of seconds or None, not {type(timeout).__name__}")
    try:
        seconds = float(timeout)
    except OverflowError:  # an int beyond any float: longer than any wait
        return None if timeout > 0 else _negative(what, timeout)
    if seconds != seconds:  # NaN
        raise PtoArgumentError(f"{what}: timeout must be a number of seconds, not NaN")
    if seconds < 0:
        _negative(what, timeout)
    return None if math.isinf(seconds) else seconds


def _negative(what: str, timeout) -> None:
    raise PtoArgumentError(f"{what}: timeout must be >= 0 seconds (or None for no limit), not {timeout}")


def as_shape(shape) -> tuple[int, ...]:
    """A non-empty tuple of ints > 0, as PyPTO's DeviceTensor takes (an int n means ``(n,)``)."""
    dims = (shape,) if isinstance(shape, (int, np.integer)) else shape
    try:
        dims = tuple(dims)
    except TypeError:
        raise PtoArgumentError(f"alloc_tensor(): shape must be an int or a tuple of ints, "
                               f"not {shape!r}") from None
    if not dims or any(isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d <= 0
                       for d in dims):
        raise PtoArgumentError(f"alloc_tensor(): shape must be a non-empty tuple of ints > 0, "
                               f"not {shape!r}")
    return tuple(int(d) for d in dims)


def check_same(dst_dtype, dst_nbytes, src_dtype, src_nbytes) -> None:
    """Refuse a copy between two sides of different dtypes or sizes (``copy()``, eager or captured)."""
    if dst_dtype != src_dtype:
        raise PtoArgumentError(f"copy(): dtypes differ (dst {dst_dtype.np_name}, src {src_dtype.np_name})")
    if dst_nbytes != src_nbytes:
        raise PtoArgumentError(f"copy(): sizes differ (dst {dst_nbytes} bytes, src {src_nbytes} bytes)")


def int_tuple(values, what: str) -> tuple[int, ...]:
    """Return `values` as a tuple of ints (numpy ints included, bools not); `what` names it in errors."""
    try:
        out = tuple(values)
    except TypeError:
        raise PtoArgumentError(f"{what} must be a sequence of ints, not {type(values).__name__}") from None
    for v in out:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise PtoArgumentError(f"{what} must contain ints, got {out!r}")
    return tuple(int(v) for v in out)
