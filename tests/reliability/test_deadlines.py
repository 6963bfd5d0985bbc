"""Deadlines: timeouts leave state intact, a held latch cannot hang close(), Ctrl-C is prompt."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
import warnings

import anyio
import numpy as np
import pytest

from pypto_async import testing
from pypto_async._driver import lib
from pypto_async.errors import PtoArgumentError, PtoCanceledError, PtoTimeout
from pypto_async.runtime import ChipWorker, RunConfig, _wait

from .conftest import SMALL

N = 64


def _f(seed):
    return np.random.default_rng(seed).uniform(1, 2, N).astype(np.float32)


@pytest.mark.slow
def test_sync_timeout_leaves_the_launch_running(rel_kernels):
    with ChipWorker(RunConfig(**SMALL)) as w:
        add = w.register(rel_kernels.get("add", N))
        a, b, out = _f(1), _f(2), np.full(N, np.nan, np.float32)
        with testing.hold(w.default_stream) as latch:
            launch = add.submit(a, b, out)
            with pytest.raises(PtoTimeout, match="did not complete"):
                launch.sync(timeout=0.05)
            assert not launch.done()
            latch.release()
            launch.sync(timeout=10)
        np.testing.assert_array_equal(out, a + b)
        add(a, a, out)  # the worker is fine
        np.testing.assert_array_equal(out, a + a)


@pytest.mark.anyio
async def test_fail_after_around_an_await_leaves_state_intact(rel_kernels):
    async with ChipWorker(RunConfig(**SMALL)) as w:
        add = w.register(rel_kernels.get("add", N))
        a, b, out = _f(3), _f(4), np.full(N, np.nan, np.float32)
        with testing.hold(w.default_stream) as latch:
            launch = add(a, b, out)
            with pytest.raises(TimeoutError):
                with anyio.fail_after(0.05):
                    await launch
            assert not launch.done()
            latch.release()
            with anyio.fail_after(10):
                await launch
        np.testing.assert_array_equal(out, a + b)
        out2 = np.zeros(N, np.float32)
        with anyio.fail_after(10):
            await add(b, b, out2)
        np.testing.assert_array_equal(out2, b + b)


@pytest.mark.slow
def test_latch_never_released_does_not_hang_close(rel_kernels):
    """close() drains for its timeout, then cancels queued work and says what it dropped."""
    w = ChipWorker(RunConfig(**SMALL))
    inc = w.register(rel_kernels.get("inc", N))
    x = w.alloc_tensor((N,), np.float32, init=_f(5))
    with testing.hold(w.default_stream, timeout=60):
        queued = [inc.submit(x) for _ in range(4)]
        x.free()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            w.close(timeout=0.2)
    assert w.is_closed
    dropped = [c for c in caught if issubclass(c.category, RuntimeWarning) and "dropped" in str(c.message)]
    assert dropped, [str(c.message) for c in caught]
    assert "dropped" in str(dropped[0].message)
    for launch in queued:
        assert launch.done()
        assert isinstance(launch.exception(), PtoCanceledError)


@pytest.mark.anyio
async def test_aclose_past_its_timeout_cancels_what_waits_in_the_fifo(rel_kernels):
    """The same in async mode, with most of the work still in the stream's FIFO."""
    w = ChipWorker(RunConfig(**dict(SMALL, ring_task_window=4)))
    await w.open()
    inc = w.register(rel_kernels.get("inc", N))
    x = w.alloc_tensor((N,), np.float32, init=_f(6))
    await w.default_stream
    with testing.hold(w.default_stream, timeout=60):
        queued = [inc(x) for _ in range(20)]
        assert w.default_stream.backlog > 0
        x.free()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            await w.aclose(timeout=0.2)
    assert w.is_closed
    dropped = [str(c.message) for c in caught if issubclass(c.category, RuntimeWarning)]
    assert any("dropped" in m for m in dropped), dropped
    for launch in queued:
        assert launch.done()
        assert isinstance(launch.exception(), PtoCanceledError)


@pytest.mark.anyio
async def test_a_cancelled_aclose_cancels_queued_work_and_reraises(rel_kernels):
    """Cancelling aclose() does what close() does past its timeout, then lets the cancellation go on."""
    w = await ChipWorker(RunConfig(**SMALL)).open()
    inc = w.register(rel_kernels.get("inc", N))
    x, y = _f(11), _f(12)
    x0 = x.copy()
    other = w.stream()
    outcome = []

    async def waiter(launch):
        try:
            await launch
        except PtoCanceledError as exc:
            outcome.append(exc)

    with testing.hold(w.default_stream, timeout=60):  # never released: only cancelling ends the wait
        stuck = inc(y)
        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter, stuck)
            await anyio.wait_all_tasks_blocked()
            finished = inc(x, stream=other)
            assert lib.pto_stream_synchronize(other._ptr, 10_000_000) == 0  # done on the device, not drained
            with warnings.catch_warnings(record=True) as caught, anyio.CancelScope() as scope:
                warnings.simplefilter("always")
                scope.cancel()
                await w.aclose()
    assert scope.cancelled_caught and w.is_closed
    assert isinstance(stuck.exception(), PtoCanceledError) and len(outcome) == 1
    assert finished.result() is x  # drained before the device closed: its real outcome
    np.testing.assert_array_equal(x, x0 + 1)
    said = [str(c.message) for c in caught if c.category is RuntimeWarning]
    assert any(re.search(r"aclose\(\) was cancelled; dropped [1-9]\d* command", m) for m in said), said


_CTRL_C = textwrap.dedent(r"""
    import sys, threading, time
    sys.path[:0] = [{tests!r}, {root!r}]
    import numpy as np
    from helpers.kernels import KernelLib
    from pypto_async import testing
    from pypto_async.runtime import ChipWorker, RunConfig
    k = KernelLib({kdir!r}).get("inc", 64)
    w = ChipWorker(RunConfig(platform="sim", cores=1, copy_engines=1, device_memory=16 << 20))
    h = w.register(k)
    with testing.hold(w.default_stream, timeout=120):
        launch = h.submit(np.zeros(64, np.float32))
        try:
            print("blocking", flush=True)
            launch.sync()
        except KeyboardInterrupt:
            print("interrupted", flush=True)
    w.close(timeout=5)
    print("closed", flush=True)
""")


@pytest.mark.slow  # a child process: a second or more
def test_ctrl_c_during_a_blocking_sync_is_prompt(rel_kernels, tmp_path):
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    kdir = str(rel_kernels.directory)
    rel_kernels.get("inc", 64)
    script = tmp_path / "ctrl_c.py"
    script.write_text(_CTRL_C.format(tests=tests, root=os.path.dirname(tests), kdir=kdir))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                            cwd=os.path.dirname(tests))
    try:
        assert proc.stdout.readline().strip() == "blocking"
        proc.send_signal(signal.SIGINT)
        # The latch would hold for 120 s: finishing in 60 means Ctrl-C broke the wait.
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "interrupted" in out and "closed" in out, out
    assert proc.returncode == 0


def _interrupt_once_inside(code, thread_id: int) -> threading.Thread:
    """A started thread that interrupts the main thread once `thread_id` runs `code` (30 s at most).

    It watches the thread's stack instead of firing after a delay: a delay's interrupt can land
    before the wait begins (in ``Thread.start`` itself, on a loaded machine), outside the test's
    ``pytest.raises``.  Its ``sent`` says whether it sent the interrupt.
    """
    import _thread

    def inside() -> bool:
        f = sys._current_frames().get(thread_id)
        while f is not None:
            if f.f_code is code:
                return True
            f = f.f_back
        return False

    def run():
        deadline = time.monotonic() + 30
        while not inside():
            if time.monotonic() > deadline:
                return  # the wait never began: its own timeout fails the test
            time.sleep(0.001)
        _thread.interrupt_main()
        t.sent = True

    t = threading.Thread(target=run, daemon=True)
    t.sent = False
    t.start()
    return t


def test_interrupt_main_from_another_thread_during_a_blocking_sync(rel_kernels):
    # The collector stays on: a finalizer it runs inside the wait may be where the main thread
    # runs the SIGINT handler, and the wait delivers that interrupt all the same.
    with ChipWorker(RunConfig(**SMALL)) as w:
        inc = w.register(rel_kernels.get("inc", N))
        with testing.hold(w.default_stream, timeout=60) as latch:
            launch = inc.submit(np.zeros(N, np.float32))
            sender = _interrupt_once_inside(_wait._drive.__code__, threading.get_ident())
            with pytest.raises(KeyboardInterrupt):
                try:
                    launch.sync(timeout=30)
                except PtoTimeout as e:
                    sent = "sent" if sender.sent else "never sent (the wait was not seen on the stack)"
                    raise AssertionError(f"no KeyboardInterrupt within 30 s: the interrupt was {sent}") from e
            sender.join()
            latch.release()
            launch.sync(timeout=10)
        assert launch.done() and w.stats().in_flight == 0


class _InterruptedFinalizer:
    """An object whose finalizer is where the main thread runs the SIGINT handler."""

    ran = False

    def __del__(self):
        import _thread

        type(self).ran = True
        _thread.interrupt_main()  # (the main thread's own: the handler runs at its next check, here)
        type(self).ran = "not interrupted"  # never reached: the handler raised on the line above


@pytest.mark.parametrize("thread", ["service", "foreign"])
def test_an_interrupt_a_finalizer_swallows_during_a_blocking_wait_still_ends_it(rel_kernels, thread):
    # CPython reports a KeyboardInterrupt raised in a finalizer (sys.unraisablehook) and drops it:
    # a reference drop inside the wait runs one, and the wait must raise the interrupt anyway.
    with ChipWorker(RunConfig(**SMALL)) as w:
        inc = w.register(rel_kernels.get("inc", N))
        with testing.hold(w.default_stream, timeout=60) as latch:
            launch = inc.submit(np.zeros(N, np.float32))
            _InterruptedFinalizer.ran = False
            held = [_InterruptedFinalizer()]
            reported = []
            hook = sys.unraisablehook

            def predicate():
                if held:
                    held.pop()  # its last reference: the finalizer runs here, inside the wait
                return launch.done()

            def record(unraisable):
                reported.append(unraisable.exc_type)
                hook(unraisable)

            sys.unraisablehook = record
            try:
                with pytest.raises(KeyboardInterrupt):
                    if thread == "service":
                        _wait.drive(w._queue, predicate, 5)
                    else:  # the path of a thread that is not the pump's (a loop on another thread)
                        _wait._block_foreign(w._queue, launch, False, predicate, 5)
            finally:
                sys.unraisablehook = hook
            assert _InterruptedFinalizer.ran is True and not held
            assert reported == []  # delivered again, not reported as ignored
            latch.release()
            launch.sync(timeout=10)
        assert launch.done() and w.stats().in_flight == 0


# -- what a timeout may be ---------------------------------------------------------------------------

INF = float("inf")


def _waits(w, inc, x):
    """Each blocking wait that takes a timeout, as wait(timeout) on work queued now (held)."""
    return {
        "Launch.sync": lambda: inc.submit(x).sync,
        "Event.sync": lambda: (inc.submit(x), w.default_stream.record())[1].sync,
        "Stream.sync": lambda: (inc.submit(x), w.default_stream)[1].sync,
        "ChipWorker.sync": lambda: (inc.submit(x), w)[1].sync,
    }


@pytest.mark.parametrize("wait", ["Launch.sync", "Event.sync", "Stream.sync", "ChipWorker.sync"])
def test_an_infinite_timeout_means_no_limit(rel_kernels, wait):
    with ChipWorker(RunConfig(**SMALL)) as w:
        inc = w.register(rel_kernels.get("inc", N))
        x = _f(7)
        x0 = x.copy()
        with testing.hold(w.default_stream, timeout=60) as latch:
            sync = _waits(w, inc, x)[wait]()
            # Released from a timer: the wait must outlast it, however long it is.
            timer = threading.Timer(0.05, latch.release)
            timer.start()
            sync(timeout=INF)
            timer.join()
        w.sync()
        np.testing.assert_array_equal(x, x0 + 1)


@pytest.mark.parametrize("wait", ["Launch.sync", "Event.sync", "Stream.sync", "ChipWorker.sync", "close"])
@pytest.mark.parametrize("timeout", [float("nan"), -1, -0.5, "1", True])
def test_a_bad_timeout_is_refused_before_anything_happens(rel_kernels, wait, timeout):
    with ChipWorker(RunConfig(**SMALL)) as w:
        inc = w.register(rel_kernels.get("inc", N))
        x = _f(8)
        x0 = x.copy()
        sync = w.close if wait == "close" else _waits(w, inc, x)[wait]()
        with pytest.raises(PtoArgumentError, match="timeout"):
            sync(timeout=timeout)
        assert not w.is_closed
        w.sync()
        inc(x)  # the worker works on
        np.testing.assert_array_equal(x, x0 + 1 if wait == "close" else x0 + 1 + 1)


def test_close_with_an_infinite_timeout_finishes_the_queued_work(rel_kernels):
    w = ChipWorker(RunConfig(**dict(SMALL, ring_task_window=16)))
    inc = w.register(rel_kernels.get("inc", N))
    x = _f(9)
    x0 = x.copy()
    with testing.hold(w.default_stream, timeout=60) as latch:
        queued = [inc.submit(x) for _ in range(2)]  # in the ring behind the latch (4 commands each)
        timer = threading.Timer(0.05, latch.release)
        timer.start()
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # nothing may be dropped
            w.close(timeout=INF)
        timer.join()
    assert w.is_closed and [launch.exception() for launch in queued] == [None, None]
    np.testing.assert_array_equal(x, x0 + 1 + 1)  # float32, step by step


@pytest.mark.anyio
async def test_aclose_with_an_infinite_timeout_finishes_the_queued_work(rel_kernels):
    w = await ChipWorker(RunConfig(**dict(SMALL, ring_task_window=4))).open()
    inc = w.register(rel_kernels.get("inc", N))
    x = _f(10)
    x0 = x.copy()
    with testing.hold(w.default_stream, timeout=60) as latch:
        queued = [inc(x) for _ in range(8)]  # most of them wait in the FIFO

        async def release_once_closing():
            await anyio.wait_all_tasks_blocked()  # aclose() waits for the queued work
            latch.release()

        async with anyio.create_task_group() as tg:
            tg.start_soon(release_once_closing)
            with warnings.catch_warnings():
                warnings.simplefilter("error", RuntimeWarning)  # nothing may be dropped
                await w.aclose(timeout=INF)
    assert w.is_closed and all(launch.exception() is None for launch in queued)
    expect = x0
    for _ in queued:
        expect = expect + 1  # float32, step by step
    np.testing.assert_array_equal(x, expect)
