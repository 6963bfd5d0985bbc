"""The threshold of pypto_async's own log messages, under PyPTO's names.

``set_log_level(LogLevel.WARN)`` sets the level of the ``pypto_async``
logger (and so of ``pypto_async.ir`` and every other logger under it) to the
matching :mod:`logging` level; ``get_log_level()`` reads that logger's
effective level back as a :class:`LogLevel`, so the two make a save-restore
pair.  Handlers, formats and the root logger stay yours to configure.

The levels keep PyPTO's order and values.  Two have no :mod:`logging`
counterpart: ``EVENT`` (PyPTO's timing events, above ``FATAL``) and ``NONE``
map to levels above ``CRITICAL`` (the first is named ``EVENT`` in
:mod:`logging`'s records); at ``EVENT`` only ``log_event``'s messages pass, at
``NONE`` nothing does.

``log_debug(message)`` ... ``log_event(message)`` write one message at their
level to the ``pypto_async`` logger, where the threshold above filters it, as
PyPTO's calls do on its compiler's logger.

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

__all__ = ["LogLevel", "set_log_level", "get_log_level", "log_debug", "log_info", "log_warn", "log_error", "log_fatal",
           "log_event"]

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
logging.addLevelName(_TO_LOGGING[LogLevel.EVENT], "EVENT")


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


def _log(level: LogLevel, call: str, message: str) -> None:
    if not isinstance(message, str):
        raise PtoTypeError(f"{call}() takes the message as a str, not {type(message).__name__} {message!r}")
    logging.getLogger(LOGGER_NAME).log(_TO_LOGGING[level], message)


def log_debug(message: str) -> None:
    """Log `message` at DEBUG on the ``pypto_async`` logger (a ``str``, else PtoTypeError)."""
    _log(LogLevel.DEBUG, "log_debug", message)


def log_info(message: str) -> None:
    """Log `message` at INFO, as :func:`log_debug`."""
    _log(LogLevel.INFO, "log_info", message)


def log_warn(message: str) -> None:
    """Log `message` at WARN, as :func:`log_debug`."""
    _log(LogLevel.WARN, "log_warn", message)


def log_error(message: str) -> None:
    """Log `message` at ERROR, as :func:`log_debug`."""
    _log(LogLevel.ERROR, "log_error", message)


def log_fatal(message: str) -> None:
    """Log `message` at FATAL (``logging.CRITICAL``), as :func:`log_debug`; it raises nothing and exits nothing."""
    _log(LogLevel.FATAL, "log_fatal", message)


def log_event(message: str) -> None:
    """Log `message` at EVENT, above FATAL: it passes every threshold but ``NONE``."""
    _log(LogLevel.EVENT, "log_event", message)


def _apply_environment() -> None:
    """Set the level from ``PYPTO_LOG_LEVEL``, if it names one; run once, on import."""
    name = os.environ.get("PYPTO_LOG_LEVEL", "").strip().upper()
    if name in LogLevel.__members__:
        set_log_level(LogLevel[name])
