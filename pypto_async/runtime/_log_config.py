"""``runtime.configure_log`` / ``runtime.log_level``: PyPTO's runtime log threshold.

PyPTO keeps two loggers: the compiler's (``pypto.set_log_level``) and the
runtime's, set by ``configure_log(level, *, sync_pypto=False)``.  Here the
runtime's is the ``pypto_async.runtime`` logger (and those under it): a level
is a :mod:`logging` ``int`` or one of the names ``debug`` (10), ``info`` (20),
``timing`` (25), ``warn``/``warning`` (30), ``error`` (40) and ``null`` (60),
in any case.  ``sync_pypto=True`` also sets :func:`pypto_async.set_log_level`
to the nearest band.  Until ``configure_log`` is called the runtime's logger
follows ``set_log_level`` (it sits under the ``pypto_async`` logger), and
``configure_log(0)`` (:mod:`logging`'s ``NOTSET``) makes it follow again.

``PYPTO_RUNTIME_LOG`` in the environment (a level as above) configures it when
``pypto_async.runtime`` is imported, with ``PYPTO_RUNTIME_LOG_SYNC=1`` for
``sync_pypto``; a value that is no level is ignored with a ``RuntimeWarning``.
"""

from __future__ import annotations

import logging
import os
import warnings

from .._log_level import LogLevel, set_log_level
from ..errors import PtoArgumentError, PtoTypeError

__all__ = ["configure_log", "log_level"]

LOGGER_NAME = "pypto_async.runtime"

#: The level names configure_log takes, with their logging ints.
LEVELS = {"debug": 10, "info": 20, "timing": 25, "warn": 30, "warning": 30, "error": 40, "null": 60}

#: (highest threshold, the compiler's band): sync_pypto's mapping, the first entry that holds.
_BANDS = ((10, LogLevel.DEBUG), (20, LogLevel.INFO), (30, LogLevel.WARN), (40, LogLevel.ERROR))


def _threshold(level) -> int:
    if isinstance(level, str):
        try:
            return LEVELS[level.strip().lower()]
        except KeyError:
            raise PtoArgumentError(f"configure_log(): {level!r} is no runtime log level; the names are "
                                   f"{', '.join(LEVELS)} (or a logging int)") from None
    if isinstance(level, bool) or not isinstance(level, int):
        raise PtoTypeError(f"configure_log() takes a level name (\"info\", ...) or a logging int, not "
                           f"{type(level).__name__} {level!r}")
    if level < 0:
        raise PtoArgumentError(f"configure_log(): a logging level is an int >= 0, not {level}")
    return level


def configure_log(level: int | str, *, sync_pypto: bool = False) -> None:
    """Let the runtime's log messages at `level` or above through; with `sync_pypto`, the compiler's too.

    Raises :class:`~pypto_async.PtoArgumentError` for a name that is no level
    or a negative int, :class:`~pypto_async.PtoTypeError` for another type;
    nothing changes then.
    """
    threshold = _threshold(level)
    logging.getLogger(LOGGER_NAME).setLevel(threshold)
    if sync_pypto:
        set_log_level(next((band for top, band in _BANDS if threshold <= top), LogLevel.NONE))


def log_level() -> int:
    """The runtime logger's threshold now, as a :mod:`logging` int."""
    return logging.getLogger(LOGGER_NAME).getEffectiveLevel()


def _apply_environment() -> None:
    """Configure from ``PYPTO_RUNTIME_LOG`` if it is set; run once, on import."""
    raw = os.environ.get("PYPTO_RUNTIME_LOG")
    if raw is None:
        return
    try:
        configure_log(int(raw) if raw.strip().isdigit() else raw,
                      sync_pypto=os.environ.get("PYPTO_RUNTIME_LOG_SYNC") == "1")
    except PtoArgumentError as exc:
        warnings.warn(f"PYPTO_RUNTIME_LOG={raw!r} ignored: {exc}", RuntimeWarning, stacklevel=2)
