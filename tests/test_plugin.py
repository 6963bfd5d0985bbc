"""The pytest plugin (pypto_async.testing): fixtures, hold() and fail_next().

The helpers are tested here directly, with the plugin's own fixtures; a small
user test file (the example in docs/testing.md) runs through ``pytester`` in a
subprocess, under pytest-asyncio and under anyio's plugin (asyncio and trio).
"""

from __future__ import annotations

import importlib.metadata
import pathlib
import textwrap

import numpy as np
import pytest

import pypto_async.language as pl
from pypto_async.errors import (
    PtoArgumentError,
    PtoClosedError,
    PtoCopyFault,
    PtoDependencyError,
    PtoKernelFault,
)
from pypto_async.testing import SIM_DEVICE, hold, fail_next

pytest_plugins = ["pytester"]

N = 4096


@pl.jit
def scale2(x: pl.Tensor, y: pl.Out[pl.Tensor]):
    pl.store(pl.load(x, [0], [N]) * 2.0, [0], y)


@pytest.fixture(scope="module")
def compiled():
    x = np.zeros(N, np.float32)
    return scale2.compile(x, x)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def poisoned():
    return np.full(N, np.nan, np.float32)


# --- fixtures ---------------------------------------------------------------------


def test_sync_fixture_is_a_small_sim_worker(pto_worker, pto_config, compiled, rng):
    assert pto_worker.mode == "sync"
    assert pto_config.device_memory == SIM_DEVICE["device_memory"]
    assert pto_worker.stats().memory_capacity == SIM_DEVICE["device_memory"]
    x, y = rng.standard_normal(N).astype(np.float32), poisoned()
    pto_worker.run(compiled, x, y)  # sync mode: returns once done
    np.testing.assert_array_equal(y, x * 2)


@pytest.mark.asyncio
async def test_async_fixture_runs_in_the_test_loop(pto_async_worker, compiled, rng):
    assert pto_async_worker.mode == "asyncio"
    x, y = rng.standard_normal(N).astype(np.float32), poisoned()
    await pto_async_worker.run(compiled, x, y)
    np.testing.assert_array_equal(y, x * 2)


@pytest.mark.pto_config(ring_task_window=4, cores=1)
def test_marker_sets_config_fields(pto_config):
    assert pto_config.ring_task_window == 4 and pto_config.cores == 1
    assert pto_config.copy_engines == SIM_DEVICE["copy_engines"]  # the rest stays small


# --- hold -------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_hold_holds_one_stream_only(pto_async_worker, compiled, rng):
    w = pto_async_worker
    k = w.register(compiled)
    a, b = w.stream(), w.stream()
    x = rng.standard_normal(N).astype(np.float32)
    ya, yb = poisoned(), poisoned()
    with hold(a) as latch:
        la = k(x, ya, stream=a)
        await k(x, yb, stream=b)  # b is not held
        assert not la.done() and np.isnan(ya).all()
        latch.release()
        assert latch.released
        await la
    np.testing.assert_array_equal(ya, x * 2)
    np.testing.assert_array_equal(yb, x * 2)


def test_hold_in_sync_mode(pto_worker, compiled, rng):
    w = pto_worker
    k = w.register(compiled)
    a, b = w.stream(), w.stream()
    x = rng.standard_normal(N).astype(np.float32)
    ya, yb = poisoned(), poisoned()
    with hold(a) as latch:
        la = k.submit(x, ya, stream=a)  # submit never waits for completion
        k(x, yb, stream=b)  # a blocking launch on b completes while a is held
        assert not la.done() and np.isnan(ya).all()
        latch.release()
        la.sync(timeout=10)
    np.testing.assert_array_equal(ya, x * 2)
    np.testing.assert_array_equal(yb, x * 2)


@pytest.mark.asyncio
@pytest.mark.pto_config(ring_task_window=4)
async def test_hold_keeps_fifo_order_and_back_pressure(pto_async_worker, compiled, rng):
    w = pto_async_worker
    k = w.register(compiled)
    s = w.stream()
    x = rng.standard_normal(N).astype(np.float32)
    xd = w.alloc_tensor(N, np.float32, init=x)
    yds = [w.alloc_tensor(N, np.float32) for _ in range(10)]
    with hold(s) as latch:
        launches = [k.submit(xd, yd, stream=s) for yd in yds]
        assert s.backlog > 0  # the ring (4 slots, one the latch's) is full: the rest waits in order
        assert not any(launch.done() for launch in launches)
        latch.release()
        for launch in launches:
            await launch.wait()
    assert w.stats().backpressure_waits > 0
    for yd in yds:
        np.testing.assert_array_equal(await yd.to_host(), x * 2)
        w.free_tensor(yd)
    w.free_tensor(xd)


@pytest.mark.asyncio
@pytest.mark.pto_config(ring_task_window=2)
async def test_hold_queued_behind_a_full_ring_is_dropped_on_exit(pto_async_worker, compiled, rng):
    w = pto_async_worker
    k = w.register(compiled)
    s = w.stream()
    x = rng.standard_normal(N).astype(np.float32)
    xd = w.alloc_tensor(N, np.float32, init=x)
    yd = w.alloc_tensor(N, np.float32)
    with hold(s) as outer:
        launches = [k.submit(xd, yd, stream=s) for _ in range(3)]
        with hold(s):  # behind a full ring: its wait sits in the FIFO
            assert s.backlog >= 2
        outer.release()
        for launch in launches:
            await launch.wait()
    await s  # everything queued ran: nothing is left waiting on a gone latch
    assert s.backlog == 0
    w.free_tensor(xd)
    w.free_tensor(yd)


@pytest.mark.pto_latch_expires  # on purpose: without the marker the plugin fails the test
def test_hold_times_out_instead_of_hanging(pto_worker, compiled, rng):
    w = pto_worker
    k = w.register(compiled)
    s = w.stream()
    x = rng.standard_normal(N).astype(np.float32)
    with hold(s, timeout=0.05):
        launch = k.submit(x, poisoned(), stream=s)
        with pytest.raises(PtoDependencyError):  # the latch expired: held work fails
            launch.sync(timeout=10)
    y = poisoned()
    w.run(compiled, x, y, stream=s)  # then the stream recovers
    np.testing.assert_array_equal(y, x * 2)


def test_worker_closed_inside_hold(compiled, rng):
    from pypto_async.runtime import ChipWorker

    from pypto_async.testing import sim_config

    w = ChipWorker(sim_config())
    k = w.register(compiled)
    with hold(w.default_stream, timeout=30) as latch:
        stuck = k.submit(rng.standard_normal(N).astype(np.float32), poisoned())
        with pytest.warns(RuntimeWarning, match="dropped"):
            w.close(timeout=0.05)  # cancels the held work; the device frees the latch
        latch.release()  # harmless now
    assert latch.released and stuck.exception() is not None


def test_hold_rejects_bad_arguments(pto_worker):
    with pytest.raises(PtoArgumentError, match="Stream"):
        with hold(object()):
            pass
    with pytest.raises(PtoArgumentError, match="timeout"):
        with hold(pto_worker.stream(), timeout=0):
            pass
    s = pto_worker.stream()
    s.close()
    with pytest.raises(PtoClosedError):
        with hold(s):
            pass


# --- fail_next -------------------------------------------------------------------------------


def test_fail_next_fails_the_next_command_then_recovers(pto_worker, compiled, rng):
    w = pto_worker
    k = w.register(compiled)
    s = w.stream()
    x = rng.standard_normal(N).astype(np.float32)
    # Tensors born on s: their first use there needs no join (an event wait) before the launch.
    xd = w.alloc_tensor(N, np.float32, init=x, stream=s)
    yd = w.alloc_tensor(N, np.float32, init=poisoned(), stream=s)
    fail_next(s, PtoKernelFault)
    with pytest.raises(PtoKernelFault):
        k(xd, yd, stream=s)
    k(xd, yd, stream=s)
    out = np.empty(N, np.float32)
    w.copy(out, yd, stream=s)
    np.testing.assert_array_equal(out, x * 2)
    w.free_tensor(xd)
    w.free_tensor(yd)


@pytest.mark.asyncio
async def test_fail_next_default_is_a_copy_fault_and_dependents_fail(pto_async_worker, compiled, rng):
    w = pto_async_worker
    k = w.register(compiled)
    s = w.stream()
    x = rng.standard_normal(N).astype(np.float32)
    y = poisoned()
    fail_next(s)  # the launch's input copy fails; its kernel and output copy depend on it
    with pytest.raises(PtoCopyFault):
        await k(x, y, stream=s)
    assert np.isnan(y).all()
    await k(x, y, stream=s)
    np.testing.assert_array_equal(y, x * 2)


@pytest.mark.asyncio
@pytest.mark.pto_config(ring_task_window=2)
async def test_fail_next_waits_its_turn_behind_a_backlog(pto_async_worker, compiled, rng):
    w = pto_async_worker
    k = w.register(compiled)
    s = w.stream()
    x = rng.standard_normal(N).astype(np.float32)
    xd = w.alloc_tensor(N, np.float32, init=x, stream=s)
    yd = w.alloc_tensor(N, np.float32, stream=s)
    with hold(s) as latch:
        before = [k.submit(xd, yd, stream=s) for _ in range(3)]
        assert s.backlog > 0
        fail_next(s, "PTO_EKERNEL")  # applies to the next launch queued, not to the backlog
        bad = k.submit(xd, yd, stream=s)
        latch.release()
        for launch in before:
            await launch.wait()  # the backlog ran fine
        with pytest.raises(PtoKernelFault):
            await bad.wait()
    w.free_tensor(xd)
    w.free_tensor(yd)


def test_fail_next_rejects_bad_arguments(pto_worker):
    s = pto_worker.stream()
    with pytest.raises(PtoArgumentError, match="unknown status"):
        fail_next(s, "PTO_NOPE")
    with pytest.raises(PtoArgumentError, match="count"):
        fail_next(s, count=0)
    with pytest.raises(PtoArgumentError):
        fail_next(s, ValueError)
    with pytest.raises(PtoArgumentError):
        fail_next("stream")


# --- a user's test file, through pytester -----------------------------------------------------

USER_EXAMPLE = pathlib.Path(__file__).with_name("plugin_user_example.py")


def _plugin_args() -> list[str]:
    eps = importlib.metadata.entry_points(group="pytest11")
    if any(ep.value == "pypto_async.testing" for ep in eps):
        return []  # installed: pytest loads it through the entry point
    return ["-p", "pypto_async.testing"]


@pytest.mark.slow
def test_user_test_file_runs_with_the_plugin(pytester, monkeypatch):
    root = pathlib.Path(__file__).resolve().parent.parent
    monkeypatch.setenv("PYTHONPATH", str(root))
    pytester.makepyfile(test_user=USER_EXAMPLE.read_text())
    pytester.makeini(textwrap.dedent("""
        [pytest]
        asyncio_mode = strict
        asyncio_default_fixture_loop_scope = function
    """))
    result = pytester.runpytest_subprocess(*_plugin_args(), "-q", "-p", "no:cacheprovider", timeout=240)
    result.assert_outcomes(passed=5)


@pytest.mark.slow
def test_failing_user_test_fails_cleanly(pytester, monkeypatch):
    root = pathlib.Path(__file__).resolve().parent.parent
    monkeypatch.setenv("PYTHONPATH", str(root))
    pytester.makepyfile(test_bad=textwrap.dedent("""
        import pytest
        from pypto_async.testing import hold

        def test_assertion_inside_hold(pto_worker):
            s = pto_worker.stream()
            with hold(s, timeout=5):
                assert False, "user bug"

        def test_after_it_works(pto_worker):
            assert pto_worker.stats().in_flight == 0
    """))
    result = pytester.runpytest_subprocess(*_plugin_args(), "-q", "-p", "no:cacheprovider", timeout=120)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*user bug*"])


@pytest.mark.slow  # a subprocess or pytester run: seconds
def test_a_latch_that_expires_fails_the_test_naming_it(pytester, monkeypatch):
    # A test that waits for a latch to time out (instead of releasing it) tests something else than
    # it says: the plugin fails it, naming the latch; the marker lets a test do it on purpose.
    root = pathlib.Path(__file__).resolve().parent.parent
    monkeypatch.setenv("PYTHONPATH", str(root))
    pytester.makepyfile(test_expiry=textwrap.dedent("""
        import pytest
        from pypto_async.errors import PtoDependencyError
        from pypto_async.testing import hold

        def _expire(w):
            s = w.stream()
            with hold(s, timeout=0.05):
                with pytest.raises(PtoDependencyError, match="latch wait timed out"):
                    w.sync(timeout=10)  # the latch expires (nothing releases it in time); the sync says so

        def test_expired_latch(pto_worker):
            _expire(pto_worker)

        @pytest.mark.pto_latch_expires
        def test_expired_on_purpose(pto_worker):
            _expire(pto_worker)

        def test_released_latch(pto_worker):
            with hold(pto_worker.stream(), timeout=30) as latch:
                latch.release()
                pto_worker.sync(timeout=10)
    """))
    result = pytester.runpytest_subprocess(*_plugin_args(), "-q", "-p", "no:cacheprovider", timeout=120)
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*test_expired_latch*", "*a latch expired instead of being released*",
                                 "*hold(<Stream*timeout=0.05) at *test_expiry.py:7: expired after 0.05 s*"])
