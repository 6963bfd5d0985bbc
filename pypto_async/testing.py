"""A pytest plugin for testing code that uses pypto_async, deterministically.

Installed with pypto_async and loaded by pytest through the ``pytest11`` entry
point, so every test session gets these fixtures without a ``conftest.py``:

``pto_worker``
    A sync-mode :class:`~pypto_async.runtime.ChipWorker` on a small sim device
    (opened with ``with``): launches return once they have completed.
``pto_async_worker``
    An async-mode worker (opened with ``async with`` inside your test's event
    loop): launches return a :class:`~pypto_async.runtime.Launch` to await.
    Works under pytest-asyncio (``@pytest.mark.asyncio``) and under anyio's
    plugin (``@pytest.mark.anyio``: asyncio, uvloop or trio).
``pto_config``
    The :class:`~pypto_async.runtime.RunConfig` both workers are opened with:
    :data:`SIM_DEVICE` plus whatever a ``@pytest.mark.pto_config(**fields)``
    marker on the test (or its class or module) sets.  Override the fixture to
    change it for a whole directory.

The sanitizer (see docs/hazards.md): with ``pto_sanitize = raise``
(or ``warn``) in your pytest configuration, or ``--pto-sanitize=raise`` on the
command line, every worker your tests open checks the ordering you write
yourself (``auto_deps=False``, ``manual_deps``) and raises
:class:`~pypto_async.errors.PtoRaceError` at a racy call.  It works through
the environment variable ``PYPTO_ASYNC_SANITIZE``, which wins when set.  A
test that races on purpose opts out with ``@pytest.mark.pto_races``.

And helpers that make ordering, back-pressure and error paths
deterministic, with no sleeps:

:func:`hold`
    ``with hold(stream) as latch:`` queues a latch on the stream; everything
    queued behind it waits on the device until ``latch.release()`` (or the end
    of the block).  The latch has a timeout, so a test that fails while
    holding a stream cannot hang the session: past it, the stream's held work
    fails instead, and the plugin fails the test, naming the latch (a test
    that waited for a latch to expire tested something else than it says).
    A test that lets a latch expire on purpose says so with
    ``@pytest.mark.pto_latch_expires``.
:func:`fail_next`
    ``fail_next(stream)`` makes the next command queued on the stream fail
    on the device (as a copy fault by default), so you can test how your code
    handles a failed launch and the dependency errors that follow it.
:func:`delay_task`
    ``delay_task(handle, "name", seconds)`` makes every task of that name in
    a registered program hold its core that long before it runs: a delay
    kernel inside a task graph, to make overlaps and orderings visible.

This module is imported by every pytest run where pypto_async is installed, so
it imports nothing heavy at import time: the runtime and the driver are
loaded only when a fixture or helper is used.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

__all__ = ["SIM_DEVICE", "Latch", "hold", "fail_next", "sim_config", "delay_task", "note_expired"]

#: The device the fixtures open: small enough to open in milliseconds and to
#: run out of on purpose.
SIM_DEVICE: dict[str, Any] = {
    "platform": "sim",
    "cores": 2,
    "copy_engines": 2,
    "device_memory": 64 << 20,
}

try:  # pytest-asyncio runs the async fixture in asyncio tests; anyio's plugin in anyio tests.
    from pytest_asyncio import fixture as _async_fixture
except ImportError:  # pragma: no cover - without pytest-asyncio, only anyio runs it
    _async_fixture = pytest.fixture


def sim_config(**fields: Any):
    """Return a :class:`~pypto_async.runtime.RunConfig` for a small sim device.

    Parameters
    ----------
    **fields
        RunConfig fields that override :data:`SIM_DEVICE`
        (``ring_task_window=4`` for back-pressure tests, ...).
    """
    from .runtime import RunConfig

    return RunConfig(**{**SIM_DEVICE, **fields})


_SANITIZE_ENV = "PYPTO_ASYNC_SANITIZE"  # read by every worker that opens (runtime/_hazards.py)


def pytest_addoption(parser: pytest.Parser) -> None:
    help_ = ("the sanitizer's mode for the workers tests open: off, raise or warn "
             f"(the environment variable {_SANITIZE_ENV} wins when set)")
    parser.addini("pto_sanitize", help_, default="")
    parser.addoption("--pto-sanitize", dest="pto_sanitize", default=None, choices=("off", "raise", "warn"),
                     help=help_)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "pto_config(**fields): RunConfig fields for the pto_worker / pto_async_worker fixtures "
        "(e.g. ring_task_window=4)",
    )
    config.addinivalue_line(
        "markers", "pto_races: the test races on purpose: the sanitizer is off for the workers it opens")
    config.addinivalue_line(
        "markers", "pto_latch_expires: the test lets a hold() latch expire on purpose (not a failure)")
    mode = config.getoption("pto_sanitize", None) or str(config.getini("pto_sanitize") or "").strip()
    if mode:
        if mode not in ("off", "raise", "warn"):
            raise pytest.UsageError(f"pto_sanitize = {mode!r}: expected off, raise or warn")
        os.environ.setdefault(_SANITIZE_ENV, mode)


@pytest.fixture(autouse=True)
def _pto_races(request: pytest.FixtureRequest) -> Iterator[None]:
    """``@pytest.mark.pto_races``: no sanitizer for the workers the test opens."""
    if request.node.get_closest_marker("pto_races") is None:
        yield
        return
    before = os.environ.get(_SANITIZE_ENV)
    os.environ[_SANITIZE_ENV] = "off"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(_SANITIZE_ENV, None)
        else:
            os.environ[_SANITIZE_ENV] = before


# Latches that expired instead of being released, one line each ("hold(...) at file:line: ..."),
# appended when their block ends; the hook below fails the test they ended in.
_expired: list[str] = []


def note_expired(what: str) -> None:
    """Record that the latch described by `what` expired: the running test fails (see :func:`hold`).

    For latch helpers built on the driver directly (a test suite's own); :func:`hold` calls it itself.
    """
    _expired.append(what)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """Fail a test in which a latch expired instead of being released (``pto_latch_expires`` opts out)."""
    start = len(_expired)
    try:
        result = yield
    except BaseException:
        del _expired[start:]  # the test's own failure is the one to report
        raise
    expired = _expired[start:]
    del _expired[start:]
    if expired and item.get_closest_marker("pto_latch_expires") is None:
        pytest.fail("a latch expired instead of being released (the test waited for its timeout, "
                    "not for the event it meant):\n  " + "\n  ".join(expired), pytrace=False)
    return result


def _caller() -> str:
    """``file:line`` of the first frame outside this module and contextlib (who called hold)."""
    f = sys._getframe(1)
    while f is not None and f.f_code.co_filename in (__file__, contextlib.__file__):
        f = f.f_back
    return f"{f.f_code.co_filename}:{f.f_lineno}" if f is not None else "?"


@pytest.fixture
def pto_config(request: pytest.FixtureRequest):
    """The RunConfig of ``pto_worker`` and ``pto_async_worker`` (see the module doc)."""
    fields: dict[str, Any] = {}
    # Outermost marker first, so the test's own marker wins over its class's and module's.
    for marker in reversed(list(request.node.iter_markers("pto_config"))):
        if marker.args:
            raise pytest.UsageError("@pytest.mark.pto_config takes keyword arguments only")
        fields.update(marker.kwargs)
    return sim_config(**fields)


@pytest.fixture
def pto_worker(pto_config) -> Iterator[Any]:
    """A sync-mode ChipWorker on a small sim device, closed after the test."""
    from .runtime import ChipWorker

    with ChipWorker(config=pto_config) as worker:
        yield worker


@_async_fixture
async def pto_async_worker(pto_config) -> AsyncIterator[Any]:
    """An async-mode ChipWorker in the test's event loop, closed (awaited) after the test."""
    from .runtime import ChipWorker

    async with ChipWorker(config=pto_config) as worker:
        yield worker


class Latch:
    """A driver latch holding a stream; made by :func:`hold`.

    Attributes
    ----------
    timeout : float
        Seconds after which the latch expires on its own: the held wait then
        fails on the device, and so does the work queued behind it.
    """

    __slots__ = ("_handle", "_stream", "_lock", "_queued", "_exited", "released", "timeout")

    def __init__(self, handle, stream, timeout: float):
        self._handle = handle
        self._stream = stream
        self._lock = threading.Lock()  # orders _queued and _exited: the wait may be queued on another thread
        self._queued = False  # the driver has the wait (and its own reference to the latch)
        self._exited = False  # the hold() block ended: destroy the handle once the driver has the wait
        self.released = False
        self.timeout = timeout

    def release(self) -> None:
        """Let the held stream go on.  Idempotent.

        After the worker closed this does nothing: closing the device
        released (and freed) every latch.
        """
        if not self.released:
            from ._driver import lib

            self.released = True
            if not self._stream.worker.is_closed:
                lib.pto_latch_release(self._handle)

    def __repr__(self) -> str:
        state = "released" if self.released else "holding"
        return f"<Latch {state} stream {self._stream!r}>"


def _stream_of(stream):
    """Return ``stream`` checked to be an open runtime Stream."""
    from .errors import PtoArgumentError
    from .runtime import Stream

    if not isinstance(stream, Stream):
        raise PtoArgumentError(f"expected a pypto_async Stream, not {type(stream).__name__}")
    stream._check()
    return stream


def _queue(stream, fn, args: tuple, *, record: bool) -> None:
    """Queue a driver call on `stream` in order with the runtime's own work.

    Through the one hook the worker's command queue keeps for this module
    (``_submit.enqueue_hook``): nothing jumps the queue, behind a full
    ring (the driver's backlog keeps the order) or behind work the runtime
    holds back on the host.  ``fn(*args, token)`` returns a driver status.
    With `record`, the call is a device command whose completion the worker
    tracks (a token in its map); otherwise it gets token 0.
    """
    from .runtime._submit import enqueue_hook  # the plugin loads without the driver

    enqueue_hook(stream.worker._queue, stream, fn, args, record=record)


@contextlib.contextmanager
def hold(stream, *, timeout: float = 10.0) -> Iterator[Latch]:
    """Hold ``stream`` on the device until you release the latch or the block ends.

    A latch wait is queued on the stream now; commands you queue on the stream
    afterwards wait behind it on the device (the host is never blocked), while
    other streams run freely.  Call ``latch.release()`` inside the block to let
    it go at a moment of your choosing; leaving the block releases it anyway.

    Parameters
    ----------
    stream : Stream
        A stream of an open worker (``w.stream()`` or ``w.default_stream``).
    timeout : float, optional
        Seconds after which the latch gives up (default 10).  The held wait
        then fails with a timeout on the device, and work queued behind it on
        the stream fails with a dependency error, so a broken test fails
        rather than hangs.  Under pytest the plugin then fails the test,
        naming this latch, unless it is marked ``pto_latch_expires``.

    Yields
    ------
    Latch

    Raises
    ------
    PtoArgumentError
        If ``stream`` is not a pypto_async stream, or ``timeout <= 0``.
    """
    from ._driver import check, ffi, lib
    from .errors import PtoArgumentError

    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise PtoArgumentError(f"timeout must be a number of seconds > 0, not {timeout!r}")
    stream = _stream_of(stream)
    worker = stream.worker
    out = ffi.new("pto_latch **")
    check(lib.pto_latch_create(worker._queue.dev, max(1, int(timeout * 1e6)), out), "pto_latch_create")
    latch = Latch(out[0], stream, float(timeout))
    where = _caller()

    def wait(ptr, handle, token):  # runs when the runtime queues it: at once, or in its turn
        with latch._lock:
            rc = lib.pto_stream_latch_wait(ptr, handle, token)
            latch._queued = True
            if latch._exited:  # the block ended while it waited on the host: the latch is released
                lib.pto_latch_destroy(handle)
        return rc

    try:
        _queue(stream, wait, (stream._ptr, latch._handle), record=True)
    except BaseException:
        lib.pto_latch_destroy(latch._handle)
        raise
    try:
        yield latch
    finally:
        if not worker.is_closed:
            latch.release()
            with latch._lock:
                latch._exited = True
                if latch._queued:
                    # Final now that it is released: a released latch never expires.
                    if lib.pto_latch_expired(latch._handle):
                        note_expired(f"hold({stream!r}, timeout={timeout}) at {where}: expired after {timeout} s")
                    lib.pto_latch_destroy(latch._handle)  # the driver keeps its own reference
        else:
            latch.released = True  # the worker closed inside the block: its device freed the latch


def fail_next(stream, error: type | str | None = None, *, count: int = 1) -> None:
    """Make the next ``count`` commands queued on ``stream`` fail on the device.

    They fail instead of running, with the status of ``error``; the commands
    after them on the stream (and on streams waiting on them) then fail with
    :class:`~pypto_async.errors.PtoDependencyError`, exactly as after a real
    fault.  It takes effect in order with work already queued on the stream
    (behind a full ring too), so it hits the next command *you* queue.

    "Command" means the device's: a launch with host arrays queues its input
    copies first (with ``count=1`` the first copy fails and the kernel fails
    as dependent), and the first use of a DeviceTensor on a stream other
    than its own queues an event wait first.  To fail a kernel itself,
    launch it on DeviceTensors allocated on (or already used on) the stream.
    The ordering points the runtime records (a tensor's allocation point
    without ``init``, a free's joins of the other streams that used the
    tensor) are not commands that fail: an injected fault passes them by.

    Parameters
    ----------
    stream : Stream
        The stream whose next commands fail.
    error : PtoError subclass or status name, optional
        What they fail with: ``PtoKernelFault``, ``"PTO_EKERNEL"``, ...
        Default: :class:`~pypto_async.errors.PtoCopyFault` (``PTO_EFAULT``).
    count : int, optional
        How many commands fail (default 1).

    Raises
    ------
    PtoArgumentError
        For an error that is not a driver status, or ``count < 1``.
    """
    from ._driver import ERROR_CLASSES, lib, status_name
    from .errors import PtoArgumentError

    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise PtoArgumentError(f"count must be an int >= 1, not {count!r}")
    if error is None:
        code = 0
    elif isinstance(error, str):
        names = {status_name(c): c for c in range(1, len(ERROR_CLASSES))}
        if error not in names:
            raise PtoArgumentError(f"unknown status {error!r} (known: {', '.join(names)})")
        code = names[error]
    elif isinstance(error, type) and error in ERROR_CLASSES:
        code = ERROR_CLASSES.index(error)
    else:
        raise PtoArgumentError(f"error must be a driver status name or one of the PtoError classes "
                               f"of a driver status, not {error!r}")
    stream = _stream_of(stream)

    def arm(ptr, status, n, token):  # runs when the runtime queues it: at once, or in its turn
        return lib.pto_debug_fail_next(ptr, status, n)

    _queue(stream, arm, (stream._ptr, code, count), record=False)


def delay_task(handle, task: str, seconds: float) -> None:
    """Make every task named `task` of a registered program hold its core `seconds` before it runs.

    A delay kernel inside a program: with it, tasks that may run at the same
    time overlap for long enough to see in a trace, and a task that must
    wait for another visibly does.  ``seconds=0`` turns it off.

    Raises
    ------
    PtoArgumentError
        If `handle` is not a registered program, or it has no task `task`.
    """
    from ._driver import ffi, lib
    from .errors import PtoArgumentError

    if getattr(handle.compiled, "kind", "kernel") != "program" or ffi.typeof(handle._kptr) is not ffi.typeof(
            "pto_program *"):
        raise PtoArgumentError(f"delay_task needs a registered program, got {handle!r}")
    if lib.pto_debug_task_delay(handle._kptr, task.encode(), round(seconds * 1e6)) < 0:
        raise PtoArgumentError(f"{handle.name!r} has no task named {task!r}")
