"""The exception tree of pypto_async.

Every error this package raises on purpose is a :class:`PtoError`.  The tree has
one branch per way things go wrong, so you can catch exactly what you can
handle:

* :class:`PtoArgumentError` (also a ``ValueError``) — *you* passed something
  wrong; nothing was queued and the worker is fine.

  * :class:`PtoPlatformMismatch` — a program compiled for another platform.
  * :class:`PtoForeignTensorError` — a DeviceTensor of another worker.
  * :class:`PtoTypeError` (also a ``TypeError``) — an argument of the wrong
    type (a string where a ``LogLevel`` belongs).

* :class:`PtoTryAgain` — no room, or nothing ready, right now
  (``Event.elapsed_ms`` before both events ran); nothing was queued.
* :class:`PtoOutOfMemory` (also a ``MemoryError``) — the device arena has no
  extent that fits, or a kernel could not allocate its tile buffers.
* :class:`PtoKernelFault` — a kernel failed its own launch.
* :class:`PtoCopyFault` — a copy or memset failed on the device.
* :class:`PtoDependencyError` — *this* command was fine, but something it
  depended on failed first; ``__cause__`` holds that first failure.
* :class:`PtoDeviceLost` — the device is unusable (sticky); everything fails.
* :class:`PtoClosedError` — you closed the worker, stream, event or kernel
  already.

  * :class:`PtoTensorFreedError` — you freed the DeviceTensor already.

* :class:`PtoTimeout` (also a ``TimeoutError``) — a wait ran out of time; the
  work itself goes on.
* :class:`PtoInvalidStateError` — the object's state does not allow the call
  (a launch's result before it finished, a sync-mode worker awaited, a worker
  used in a forked child).
* :class:`PtoCaptureError` — inside ``w.capture()``, a call that would wait
  for captured work (or use a host array directly); a fork not joined back.
* :class:`PtoCanceledError` — the command was dropped before it ran (the
  worker closed under it).
* :class:`PtoLoadError` — a kernel library or its symbol could not be loaded.
* :class:`PtoCompileError` — tracing or compiling a kernel failed; the message
  starts with the kernel's file and line.

  * :class:`PtoKeywordError` (also a ``TypeError``) — a keyword only the other
    level honours (``pl.matmul(tiles, b_trans=True)``).
* :class:`PtoNotSupported` — the platform or feature is not available here.
* :class:`PtoRaceError` — the sanitizer found two accesses to one tensor on
  different streams with nothing ordering them; nothing was queued.

Each class with a driver counterpart names it in ``status`` (see
:class:`PtoError`).  Cancellation is never wrapped: ``asyncio.CancelledError``
and trio's ``Cancelled`` pass through untouched.
"""

from __future__ import annotations

__all__ = [
    "PtoError",
    "PtoArgumentError",
    "PtoPlatformMismatch",
    "PtoForeignTensorError",
    "PtoTypeError",
    "PtoTryAgain",
    "PtoOutOfMemory",
    "PtoKernelFault",
    "PtoCopyFault",
    "PtoDependencyError",
    "PtoDeviceLost",
    "PtoClosedError",
    "PtoTensorFreedError",
    "PtoTimeout",
    "PtoInvalidStateError",
    "PtoCaptureError",
    "PtoCanceledError",
    "PtoLoadError",
    "PtoCompileError",
    "PtoNotSupported",
    "PtoRaceError",
    "PtoKeywordError",
]


class PtoError(Exception):
    """Base of every pypto_async error.  Never raised directly.

    ``status`` names the driver status code of this kind of failure
    (``"PTO_EKERNEL"`` for :class:`PtoKernelFault`).  It is set on each class
    that has a driver counterpart, so it holds whether the driver or a check
    on the Python side found the problem (:class:`PtoArgumentError` is
    ``"PTO_EINVAL"`` either way); an error built from a driver status carries
    that status.  It is ``None`` for the kinds the driver has no code for
    (:class:`PtoInvalidStateError`, :class:`PtoCompileError`).
    """

    status: str | None = None

    def __init__(self, message: str = "", *, status: str | None = None):
        super().__init__(message)
        if status is not None:
            self.status = status


class PtoArgumentError(PtoError, ValueError):
    """An argument is wrong (type, shape, dtype, arity, size, layout).

    Raised before anything is queued: the worker stays usable.  Also a
    :class:`ValueError`, so generic argument checks still catch it.
    ``status`` is ``"PTO_EINVAL"`` for a check on the Python side as for one
    in the driver.
    """

    status = "PTO_EINVAL"


class PtoPlatformMismatch(PtoArgumentError):
    """A compiled program was built for another platform than the worker's."""


class PtoForeignTensorError(PtoArgumentError):
    """A DeviceTensor of one worker was handed to another worker."""


class PtoTypeError(PtoArgumentError, TypeError):
    """An argument is of the wrong type.

    Also a :class:`TypeError`, what Python and PyPTO raise for an argument of
    the wrong type, and a :class:`PtoArgumentError`: nothing was queued.
    """


class PtoTryAgain(PtoError):
    """No room, or nothing ready, right now; nothing was queued.

    :meth:`Event.elapsed_ms <pypto_async.runtime.Event.elapsed_ms>` raises it
    while either event has not run on the device yet, and
    :func:`pypto_async.testing.latch` when the stream's ring has no slot for
    the latch; a raw driver call (``pypto_async._driver.check``) raises it for
    ``-PTO_EAGAIN`` (full ring, heap or dependency pool).  Launches, copies
    and the other calls that queue work never raise it: they wait for room
    instead (back-pressure).
    """

    status = "PTO_EAGAIN"


class PtoOutOfMemory(PtoError, MemoryError):
    """The device arena has no free extent of the requested size.

    The device keeps working; free something and try again.  A generated
    kernel that cannot allocate its tile buffers fails its launch with it too.
    """

    status = "PTO_ENOMEM"


class PtoKernelFault(PtoError):
    """A kernel failed its own launch (through ``blk->fail``).

    Unlike :class:`PtoDependencyError`, this command is the first failure.
    """

    status = "PTO_EKERNEL"


class PtoCopyFault(PtoError):
    """A copy or memset failed on the device (bad range or injected fault)."""

    status = "PTO_EFAULT"


class PtoDependencyError(PtoError):
    """This command did not run because an earlier one it depends on failed.

    ``__cause__`` (when known) is the first failure's error; ``cause_token``
    names its completion token.  Work submitted after that failure has been
    observed runs normally.
    """

    status = "PTO_EDEP"
    cause_token: int = 0


class PtoDeviceLost(PtoError):
    """The device is lost: every pending and later call fails with this.

    Sticky, unlike :class:`PtoKernelFault`; only closing the worker helps.
    """

    status = "PTO_EDEVLOST"


class PtoClosedError(PtoError):
    """You used a worker, stream, event or kernel after closing it.

    Unlike :class:`PtoDeviceLost`, nothing broke: it was closed on purpose.
    """

    status = "PTO_ECLOSED"


class PtoTensorFreedError(PtoClosedError):
    """You used a DeviceTensor after freeing it."""


class PtoTimeout(PtoError, TimeoutError):
    """A wait ran out of time.  The work it waited for is not cancelled."""

    status = "PTO_ETIMEDOUT"


class PtoInvalidStateError(PtoError):
    """The object is not in a state that allows this call.

    Asking a launch that has not finished for its result, awaiting a worker
    opened in sync mode, or using a worker in a process forked after it was
    opened.  Unlike :class:`PtoClosedError`, nothing was closed; unlike
    :class:`PtoDeviceLost`, the device may be fine.
    """


class PtoCaptureError(PtoError):
    """A call that cannot be recorded, inside a graph capture, or a capture that cannot end.

    Waiting for captured work (awaiting a captured node, ``sync()``,
    ``w.sync()``, ``await stream``, a blocking copy to the host), replaying
    another graph, or using a host array directly, inside
    ``w.capture(...)``; a stream forked into the capture and not joined
    back when it ends.  Raised at the call site; the capture stays usable.
    """


class PtoCanceledError(PtoError):
    """The command was dropped before it ran (worker closing, device cancel)."""

    status = "PTO_ECANCELED"


class PtoLoadError(PtoError):
    """A kernel library or its symbol could not be loaded."""

    status = "PTO_ELOAD"


class PtoCompileError(PtoError, ValueError):
    """Tracing or compiling a kernel failed; the message names file and line.

    Also a :class:`ValueError`, as PyPTO's compile diagnostics are, so a
    program's ``pytest.raises(ValueError)`` or ``except ValueError`` holds here.
    """


class PtoNotSupported(PtoError):
    """The platform or feature is not available here."""

    status = "PTO_ENOTSUP"


class PtoRaceError(PtoError):
    """Two accesses to the same data on different streams, and nothing orders them.

    Raised by the sanitizer (``RunConfig(sanitize="raise")``) from the call
    that makes the second access, before anything is queued.  The message
    names both sides: what accessed the data (a kernel and its parameter, or
    a copy), how (read or write), on which stream, and where in your code.
    ``first`` and ``second`` hold those two descriptions.
    """

    def __init__(self, message: str = "", *, first: str = "", second: str = "", status: str | None = None):
        super().__init__(message, status=status)
        self.first = first
        self.second = second


class PtoKeywordError(PtoCompileError, TypeError):
    """A keyword only the other level honours, given a non-default value (``b_trans=True`` on tiles).

    Also a :class:`TypeError`, as PyPTO's ops/00-dispatch documents for a
    path-specific keyword on the wrong path; the message names the keyword
    and the level's own spelling.
    """
