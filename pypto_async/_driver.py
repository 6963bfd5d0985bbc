"""The native driver seen from Python: ``ffi``, ``lib`` and the status funnel.

This module is the thin face of ``native/include/pto_driver.h``.  It holds no
policy and no objects with lifetimes: the runtime builds streams, events and
workers on top of it.  What it adds is the one way driver statuses become
exceptions:

* :func:`check` turns a call's return value into either the value (``>= 0``)
  or a raised :class:`~pypto_async.errors.PtoError` whose message carries the
  thread-local ``pto_last_error()`` text;
* :func:`error_for_status` builds (does not raise) the exception for a
  completion record's status, linking a dependency failure to the first
  failure through ``cause_token`` and ``__cause__``.

Both are cheap enough for hot paths: a success costs one comparison, and the
status → class table is a tuple built once at import.

A call's status is not the command's result (see the header): a submission
that returns 0 only means "queued"; the command's own outcome arrives later in
its ``pto_completion`` record.
"""

from __future__ import annotations

from .errors import (
    PtoArgumentError,
    PtoCanceledError,
    PtoClosedError,
    PtoCopyFault,
    PtoDependencyError,
    PtoDeviceLost,
    PtoError,
    PtoKernelFault,
    PtoLoadError,
    PtoNotSupported,
    PtoOutOfMemory,
    PtoTimeout,
    PtoTryAgain,
)

try:
    from ._pto_driver import ffi, lib
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        "the pypto_async native driver is not built: run `pip install -e .` or "
        "`python pypto_async/_ffi_build.py` from the source tree"
    ) from exc

__all__ = [
    "ffi",
    "lib",
    "check",
    "error_for_status",
    "status_name",
    "last_error",
    "device_config",
    "DEVICE_CONFIG_FIELDS",
    "ERROR_CLASSES",
    "PTO_ABI_VERSION",
    "PTO_OK",
    "PTO_EAGAIN",
    "PTO_ENOMEM",
    "PTO_EINVAL",
    "PTO_EKERNEL",
    "PTO_EDEP",
    "PTO_EDEVLOST",
    "PTO_ECLOSED",
    "PTO_ETIMEDOUT",
    "PTO_ECANCELED",
    "PTO_EFAULT",
    "PTO_ELOAD",
    "PTO_ENOTSUP",
    "PTO_QUEUED",
    "PTO_EPOCH_NOW",
    "PTO_CMD_H2D",
    "PTO_CMD_D2H",
    "PTO_CMD_D2D",
    "PTO_CMD_MEMSET",
    "PTO_CMD_LAUNCH",
    "PTO_CMD_BLOCK",
    "PTO_CMD_RECORD",
    "PTO_CMD_WAIT",
    "PTO_CMD_FREE",
    "PTO_CMD_NOTIFY",
    "PTO_CMD_DELAY",
    "PTO_CMD_LATCH",
    "PTO_CMD_PEER",
    "PTO_CMD_PROGRAM",
    "PTO_CMD_TASK",
    "PTO_ENGINE_NONE",
]

PTO_ABI_VERSION: int = lib.PTO_ABI_VERSION

# Status codes; driver functions return their negation.
PTO_OK: int = lib.PTO_OK
PTO_EAGAIN: int = lib.PTO_EAGAIN
PTO_ENOMEM: int = lib.PTO_ENOMEM
PTO_EINVAL: int = lib.PTO_EINVAL
PTO_EKERNEL: int = lib.PTO_EKERNEL
PTO_EDEP: int = lib.PTO_EDEP
PTO_EDEVLOST: int = lib.PTO_EDEVLOST
PTO_ECLOSED: int = lib.PTO_ECLOSED
PTO_ETIMEDOUT: int = lib.PTO_ETIMEDOUT
PTO_ECANCELED: int = lib.PTO_ECANCELED
PTO_EFAULT: int = lib.PTO_EFAULT
PTO_ELOAD: int = lib.PTO_ELOAD
PTO_ENOTSUP: int = lib.PTO_ENOTSUP

# A submission's positive result: accepted into the stream's overflow, not yet in its ring.
PTO_QUEUED: int = lib.PTO_QUEUED
# pto_stream_backdate's "no backdating": judge commands at the epoch they are accepted in.
PTO_EPOCH_NOW: int = lib.PTO_EPOCH_NOW

# Trace record kinds.
PTO_CMD_H2D: int = lib.PTO_CMD_H2D
PTO_CMD_D2H: int = lib.PTO_CMD_D2H
PTO_CMD_D2D: int = lib.PTO_CMD_D2D
PTO_CMD_MEMSET: int = lib.PTO_CMD_MEMSET
PTO_CMD_LAUNCH: int = lib.PTO_CMD_LAUNCH
PTO_CMD_BLOCK: int = lib.PTO_CMD_BLOCK
PTO_CMD_RECORD: int = lib.PTO_CMD_RECORD
PTO_CMD_WAIT: int = lib.PTO_CMD_WAIT
PTO_CMD_FREE: int = lib.PTO_CMD_FREE
PTO_CMD_NOTIFY: int = lib.PTO_CMD_NOTIFY
PTO_CMD_DELAY: int = lib.PTO_CMD_DELAY
PTO_CMD_LATCH: int = lib.PTO_CMD_LATCH
PTO_CMD_PEER: int = lib.PTO_CMD_PEER
PTO_CMD_PROGRAM: int = lib.PTO_CMD_PROGRAM
PTO_CMD_TASK: int = lib.PTO_CMD_TASK
PTO_ENGINE_NONE: int = lib.PTO_ENGINE_NONE

#: Exception class per status code (index = positive code); None for PTO_OK.
ERROR_CLASSES: tuple[type[PtoError] | None, ...] = (
    None,  # PTO_OK
    PtoTryAgain,  # PTO_EAGAIN
    PtoOutOfMemory,  # PTO_ENOMEM
    PtoArgumentError,  # PTO_EINVAL
    PtoKernelFault,  # PTO_EKERNEL
    PtoDependencyError,  # PTO_EDEP
    PtoDeviceLost,  # PTO_EDEVLOST
    PtoClosedError,  # PTO_ECLOSED
    PtoTimeout,  # PTO_ETIMEDOUT
    PtoCanceledError,  # PTO_ECANCELED
    PtoCopyFault,  # PTO_EFAULT
    PtoLoadError,  # PTO_ELOAD
    PtoNotSupported,  # PTO_ENOTSUP
)
assert len(ERROR_CLASSES) == PTO_ENOTSUP + 1, "status table out of step with pto_driver.h"

#: Names of the fields of ``pto_device_config`` that :func:`device_config` accepts.
DEVICE_CONFIG_FIELDS: frozenset[str] = frozenset(
    name for name, _ in ffi.typeof("pto_device_config").fields if name != "reserved"
)

_status_name = lib.pto_status_name
_last_error = lib.pto_last_error
_string = ffi.string


def status_name(code: int) -> str:
    """Return the short name of a status code (``"PTO_EAGAIN"``).

    Parameters
    ----------
    code : int
        A status code or its negation, as the driver returns it.
    """
    return _string(_status_name(code)).decode("ascii", "replace")


def last_error() -> str:
    """Return the detail text of the last failing driver call on this thread."""
    return _string(_last_error()).decode("utf-8", "replace")


def _error_class(code: int) -> type[PtoError]:
    if 0 < code < len(ERROR_CLASSES):
        return ERROR_CLASSES[code]  # type: ignore[return-value]
    return PtoError


def _raise_for(rc: int, what: str) -> None:
    code = -rc
    name = status_name(code)
    text = last_error()
    if what and text:
        message = f"{what}: {text} [{name}]"
    else:
        message = f"{what or text or 'driver call failed'} [{name}]"
    raise _error_class(code)(message, status=name)


def check(rc: int, what: str = "") -> int:
    """Return a driver call's result, or raise the error its status names.

    Call it right after the driver call, on the same thread: the message
    includes ``pto_last_error()``, which is thread-local and overwritten by the
    next failing call.

    Parameters
    ----------
    rc : int
        What the driver function returned: ``>= 0`` is success (a count or
        0), ``-PTO_E*`` a failure.
    what : str, optional
        What was being done (``"pto_mem_alloc"``), to start the message.

    Returns
    -------
    int
        ``rc`` itself when it is not negative.

    Raises
    ------
    PtoError
        The subclass for ``-rc`` (:class:`~pypto_async.errors.PtoTryAgain` for
        ``-PTO_EAGAIN``, :class:`~pypto_async.errors.PtoOutOfMemory` for
        ``-PTO_ENOMEM``, ...), with ``status`` set to the status name.
    """
    if rc >= 0:
        return rc
    _raise_for(rc, what)
    raise AssertionError("unreachable")  # pragma: no cover


def error_for_status(
    status: int,
    message: str,
    *,
    cause: BaseException | None = None,
    cause_token: int = 0,
) -> PtoError:
    """Build the exception for a failed command's completion status.

    This builds the exception; it does not raise it.  Use it for the
    ``status`` of a ``pto_completion`` record, whose ``message`` says what
    failed.

    Parameters
    ----------
    status : int
        The record's status, ``-PTO_E*`` (a positive code is accepted too).
    message : str
        The record's message (may be empty: the status name is always added).
    cause : BaseException, optional
        For a dependency failure, the first failure's exception; it becomes
        ``__cause__``.
    cause_token : int, optional
        The record's ``cause_token`` (the first failure's token); set as the
        exception's ``cause_token`` when nonzero.

    Returns
    -------
    PtoError
        An instance of the subclass for the status.

    Raises
    ------
    ValueError
        If ``status`` is 0: success is not an error.
    """
    code = -status if status < 0 else status
    if code == 0:
        raise ValueError("status 0 (PTO_OK) is not a failure")
    name = status_name(code)
    if isinstance(message, bytes):
        message = message.decode("utf-8", "replace")
    exc = _error_class(code)(f"{message} [{name}]" if message else name, status=name)
    if cause_token:
        exc.cause_token = cause_token  # type: ignore[attr-defined]
    if cause is not None:
        exc.__cause__ = cause
    return exc


def device_config(**fields: int):
    """Return a new ``pto_device_config *`` with the defaults and your fields set.

    Fields you leave out keep their defaults (``pto_device_config_init``).  The
    returned cdata owns its memory; keep it alive while you pass it on.

    Parameters
    ----------
    **fields : int
        Any field of ``pto_device_config``: ``cores``, ``copy_engines``,
        ``aicpu_thread_num``, ``ring_task_window``, ``ring_heap``,
        ``ring_dep_pool``, ``trace`` (bool accepted), ``trace_capacity``,
        ``device_memory``, ``spin_us``, ``host_first``, ``inline_us``.

    Raises
    ------
    PtoArgumentError
        For an unknown field, or a value that is not a non-negative integer
        that fits the field.
    """
    cfg = ffi.new("pto_device_config *")
    lib.pto_device_config_init(cfg)
    for name, value in fields.items():
        if name not in DEVICE_CONFIG_FIELDS:
            known = ", ".join(sorted(DEVICE_CONFIG_FIELDS))
            raise PtoArgumentError(f"unknown device config field {name!r} (known: {known})")
        if isinstance(value, bool):
            value = int(value)
        if not isinstance(value, int) or value < 0:
            raise PtoArgumentError(f"device config field {name!r} must be an int >= 0, not {value!r}")
        try:
            setattr(cfg, name, value)
        except OverflowError:
            raise PtoArgumentError(f"device config field {name!r} = {value} does not fit") from None
    return cfg
