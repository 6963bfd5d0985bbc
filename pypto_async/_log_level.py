"""The threshold of pypto_async's own log messages, under PyPTO's names.

``set_log_level(LogLevel.WARN)`` sets the level of the ``pypto_async``
logger (and so of ``pypto_async.ir`` and every other logger under it) to the
matching :mod:`logging` level; ``get_log_level()`` reads that logger's
effective level back as a :class:`LogLevel`, so the two make a save-restore
pair.  Handlers, formats and the root logger stay yours to configure.

The levels keep PyPTO's order and values.  Two have no :mod:`logging`
counterpart: ``EVENT`` (PyPTO's timing events, above ``FATAL``) and ``NONE``
map to levels above ``CRITICAL``; pypto_async logs no events, so both mute
everything it logs.

``PYPTO_LOG_LEVEL`` in the environment (a level's name, any case) sets the
level when pypto_async is imported; another value is ignored, as PyPTO does.
Warnings (:mod:`warnings`: deprecations, unclosed workers) are not log
messages: the warnings filters govern them.
"""

from __future__ import annotations

import enum
import logging
import os

from .errors import PtoArgumentError, PtoTypeError

__all__ = ["LogLevel", "set_log_level", "get_log_level"]

LOGGER_NAME = "pypto_async"


class LogLevel(enum.IntEnum):
    """A log threshold; messages at or above it are emitted.  An ``int`` with PyPTO's values."""

    DEBUG = 0
    INFO = 1
    WARN = 2
    ERROR = 3
    FATAL = 4
    EVENT = 5
    NONE = 6


#: The :mod:`logging` level each LogLevel sets; increasing, so the inverse below is exact.
_TO_LOGGING = {
    LogLevel.DEBUG: logging.DEBUG,
    LogLevel.INFO: logging.INFO,
    LogLevel.WARN: logging.WARNING,
    LogLevel.ERROR: logging.ERROR,
    LogLevel.FATAL: logging.CRITICAL,
    LogLevel.EVENT: logging.CRITICAL + 5,
    LogLevel.NONE: logging.CRITICAL + 10,
}


def _as_level(level) -> LogLevel:
    if isinstance(level, LogLevel):
        return level
    if isinstance(level, bool) or not isinstance(level, int):
        raise PtoTypeError(f"set_log_level() takes a LogLevel (LogLevel.WARN, ...), not {type(level).__name__} "
                           f"{level!r}")
    try:
        return LogLevel(level)
    except ValueError:
        raise PtoArgumentError(f"set_log_level(): {level} is no LogLevel; the levels are "
                               f"{', '.join(f'{m.name}={m.value}' for m in LogLevel)}") from None


def set_log_level(level: LogLevel) -> None:
    """Emit only pypto_async's log messages at `level` or above (process-wide).

    `level` is a :class:`LogLevel` (or its ``int`` value).  Anything else
    raises :class:`~pypto_async.PtoTypeError`, an ``int`` that is no level
    :class:`~pypto_async.PtoArgumentError`, and the level stays as it was.
    """
    logging.getLogger(LOGGER_NAME).setLevel(_TO_LOGGING[_as_level(level)])


def get_log_level() -> LogLevel:
    """The threshold pypto_async's logger applies now: the lowest LogLevel it lets through.

    After ``set_log_level(x)`` it is ``x``.  Before any, it follows
    :mod:`logging`'s configuration (``WARN`` under Python's defaults).
    """
    effective = logging.getLogger(LOGGER_NAME).getEffectiveLevel()
    for member, value in _TO_LOGGING.items():
        if effective <= value:
            return member
    return LogLevel.NONE


def _apply_environment() -> None:
    """Set the level from ``PYPTO_LOG_LEVEL``, if it names one; run once, on import."""
    name = os.environ.get("PYPTO_LOG_LEVEL", "").strip().upper()
    if name in LogLevel.__members__:
        set_log_level(LogLevel[name])
