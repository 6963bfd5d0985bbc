"""Syncing a stream raises the failure it carries, as an event recorded there would (runtime/_stream.py).

``await stream`` and ``stream.sync()`` wait for a marker on the stream; the
marker raises what an Event recorded at that point raises when awaited (one
rule, ``_complete.raise_carried``), and raising it observes the failure, so
work queued on the stream afterwards runs.  Every test holds the stream with a
latch, or drains the failure's record itself, so what it asserts never depends
on when the runtime drains completions.
"""

from __future__ import annotations

import anyio
import numpy as np
import pytest

from pypto_async.errors import PtoClosedError, PtoDependencyError, PtoKernelFault, PtoTimeout
from pypto_async.runtime import ChipWorker
from pypto_async.runtime._wait import drive
from pypto_async.testing import hold

N = 64


def _rand(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(N).astype(np.float32)


def _drain_until(w, launch) -> None:
    """Drain records until `launch` is done, delivering nothing (what the pump may do at any time)."""
    assert drive(w._queue, launch.done, 10.0)


async def _sync_raising(s) -> PtoDependencyError:
    with pytest.raises(PtoDependencyError) as info:
        await s
    return info.value


@pytest.mark.anyio
@pytest.mark.parametrize("drained", [False, True], ids=["queued-before-the-failure", "after-it-drained"])
async def test_await_stream_raises_the_failure_it_carries_then_runs_new_work(config, kernels, drained):
    async with ChipWorker(config) as w:
        s = w.stream()
        fail = w.register(kernels.get("fail", N))
        inc = w.register(kernels.get("inc", N))
        x = _rand(1)
        t = w.alloc_tensor(N, np.float32, init=x, stream=s)
        await s
        got = []
        with hold(s) as latch:
            failed = fail.submit(t, stream=s)  # fire and forget
            before = inc.submit(t, stream=s)  # queued behind it: its dependent
            if drained:
                latch.release()
                _drain_until(w, before)  # the records are drained: that delivers nothing
                assert failed.done() and before.done()
                got.append(await _sync_raising(s))
            else:
                async with anyio.create_task_group() as tg:

                    async def sync_it():
                        got.append(await _sync_raising(s))

                    tg.start_soon(sync_it)
                    await anyio.wait_all_tasks_blocked()  # its marker is queued, the failure not yet run
                    assert not failed.done()
                    latch.release()
        fault = failed.exception()
        assert isinstance(fault, PtoKernelFault)
        assert got[0].__cause__ is fault
        # Delivered: work queued from now on runs; work queued before still failed.
        after = inc.submit(t, stream=s)
        await s  # the stream is healthy: nothing to raise
        assert after.exception() is None
        assert isinstance(before.exception(), PtoDependencyError)
        np.testing.assert_array_equal(await t.to_host(stream=s), x + np.float32(1))
        t.free(stream=s)


@pytest.mark.anyio
async def test_await_stream_raises_what_an_event_recorded_there_raises(config, kernels):
    async with ChipWorker(config) as w:
        s = w.stream()
        fail = w.register(kernels.get("fail", N))
        t = w.alloc_tensor(N, np.float32, init=_rand(2), stream=s)
        await s
        with hold(s) as latch:
            failed = fail.submit(t, stream=s)
            event = s.record()  # the same point as the marker `await s` queues next
            latch.release()
            with pytest.raises(PtoDependencyError) as via_stream:
                await s
        # The event was recorded before the failure was delivered: it still carries it.
        with pytest.raises(PtoDependencyError) as via_event:
            await event
        fault = failed.exception()
        assert type(via_stream.value) is type(via_event.value)
        assert via_stream.value.__cause__ is fault and via_event.value.__cause__ is fault
        assert via_stream.value.cause_token == via_event.value.cause_token != 0
        assert "first failure" in str(via_stream.value) and "k_fail" in str(via_stream.value)
        await s.record()  # observed once: an event recorded now completes healthy
        t.free(stream=s)


@pytest.mark.anyio
async def test_await_stream_after_the_failure_was_delivered_raises_nothing(config, kernels):
    async with ChipWorker(config) as w:
        s = w.stream()
        fail = w.register(kernels.get("fail", N))
        t = w.alloc_tensor(N, np.float32, init=_rand(3), stream=s)
        with pytest.raises(PtoKernelFault):
            await fail(t, stream=s)  # delivered here
        await s  # queued after the delivery: the stream carries no failure
        t.free(stream=s)


@pytest.mark.anyio
async def test_await_event_after_await_stream_raised_is_healthy(config, kernels):
    """Either point delivers the failure: one rule, whichever the user waits for first."""
    async with ChipWorker(config) as w:
        s = w.stream()
        fail = w.register(kernels.get("fail", N))
        t = w.alloc_tensor(N, np.float32, init=_rand(4), stream=s)
        failed = fail.submit(t, stream=s)
        event = s.record()
        with pytest.raises(PtoDependencyError):
            await event  # delivered through the event...
        await s  # ... so a marker queued now carries nothing
        assert isinstance(failed.exception(), PtoKernelFault)
        t.free(stream=s)


@pytest.mark.anyio
async def test_stream_sync_from_another_thread_raises_and_observes(config, kernels):
    async with ChipWorker(config) as w:
        s = w.stream()
        fail = w.register(kernels.get("fail", N))
        inc = w.register(kernels.get("inc", N))
        x = _rand(5)
        t = w.alloc_tensor(N, np.float32, init=x, stream=s)
        await s
        failed = fail.submit(t, stream=s)

        def sync_there():
            with pytest.raises(PtoDependencyError) as info:
                s.sync(timeout=10)
            return info.value

        exc = await anyio.to_thread.run_sync(sync_there)
        assert exc.__cause__ is failed.exception()
        after = inc.submit(t, stream=s)
        await anyio.to_thread.run_sync(lambda: s.sync(timeout=10))
        assert after.exception() is None
        np.testing.assert_array_equal(await t.to_host(stream=s), x + np.float32(1))
        t.free(stream=s)


def test_stream_sync_raises_the_failure_in_sync_mode(worker, kernels):
    s = worker.stream()
    fail = worker.register(kernels.get("fail", N))
    inc = worker.register(kernels.get("inc", N))
    x = _rand(6)
    t = worker.alloc_tensor(N, np.float32, init=x, stream=s)
    s.sync(timeout=10)
    with hold(s) as latch:
        failed = fail.submit(t, stream=s)
        with pytest.raises(PtoTimeout):
            s.sync(timeout=0.05)  # a timeout delivers nothing...
        latch.release()
        with pytest.raises(PtoDependencyError) as info:
            s.sync(timeout=10)  # ... so this sync still raises the failure
    assert info.value.__cause__ is failed.exception()
    after = inc.submit(t, stream=s)
    s.sync(timeout=10)  # delivered: healthy again
    assert after.exception() is None
    np.testing.assert_array_equal(t.numpy(stream=s), x + np.float32(1))
    t.free(stream=s)
    s.close()
    with pytest.raises(PtoClosedError):
        s.sync()


def test_each_sync_delivers_only_what_it_raised(worker, kernels):
    """A failure queued after a sync's marker is the next sync's to raise."""
    s = worker.stream()
    fail = worker.register(kernels.get("fail", N))
    t = worker.alloc_tensor(N, np.float32, init=_rand(7), stream=s)
    first = fail.submit(t, stream=s)
    with pytest.raises(PtoDependencyError) as one:
        s.sync(timeout=10)
    second = fail.submit(t, stream=s)  # runs (the first failure was delivered) and fails on its own
    with pytest.raises(PtoDependencyError) as two:
        s.sync(timeout=10)
    assert one.value.__cause__ is first.exception()
    assert two.value.__cause__ is second.exception() and second.exception() is not first.exception()
    s.sync(timeout=10)
    t.free(stream=s)


# -- the worker-wide sync: the same rule on every open stream ---------------------------------------


def test_worker_sync_raises_each_failure_a_stream_carries_in_stream_order(worker, kernels):
    fail = worker.register(kernels.get("fail", N))
    inc = worker.register(kernels.get("inc", N))
    a, b, healthy = worker.stream(), worker.stream(), worker.stream()
    x = _rand(8)
    t = worker.alloc_tensor(N, np.float32, init=x, stream=a)
    u = worker.alloc_tensor(N, np.float32, init=x, stream=b)
    worker.sync(timeout=10)
    with hold(a) as la, hold(b) as lb:
        fa = fail.submit(t, stream=a)
        fb = fail.submit(u, stream=b)
        ok = inc.submit(_rand(9), stream=healthy)
        la.release()
        lb.release()
        with pytest.raises(PtoDependencyError) as first:
            worker.sync(timeout=10)  # a's (the lower stream id): delivered
    assert first.value.__cause__ is fa.exception() and ok.exception() is None
    on_a = inc.submit(t, stream=a)  # a runs new work again
    on_b = inc.submit(u, stream=b)  # b still carries its failure: a dependent
    with pytest.raises(PtoDependencyError) as second:
        worker.sync(timeout=10)
    assert second.value.__cause__ is fb.exception()
    assert on_a.exception() is None and isinstance(on_b.exception(), PtoDependencyError)
    worker.sync(timeout=10)  # every failure delivered: nothing left
    inc.submit(u, stream=b).sync(timeout=10)
    np.testing.assert_array_equal(t.numpy(stream=a), x + np.float32(1))
    np.testing.assert_array_equal(u.numpy(stream=b), x + np.float32(1))
    t.free(stream=a)
    u.free(stream=b)
    worker.sync(timeout=10)


def test_worker_sync_leaves_a_closed_streams_failure_to_its_last_event(worker, kernels):
    fail = worker.register(kernels.get("fail", N))
    s = worker.stream()
    failed = fail.submit(_rand(10), stream=s)
    s.close()  # nothing can be queued on it any more: no marker, nothing to deliver
    worker.sync(timeout=10)
    assert isinstance(failed.exception(), PtoKernelFault)


@pytest.mark.anyio
async def test_worker_wait_raises_and_delivers_like_stream_sync(config, kernels):
    async with ChipWorker(config) as w:
        fail = w.register(kernels.get("fail", N))
        inc = w.register(kernels.get("inc", N))
        x = _rand(11)
        t = w.alloc_tensor(N, np.float32, init=x)
        await w.wait()
        with hold(w.default_stream) as latch:
            failed = fail.submit(t)
            before = inc.submit(t)
            got = []
            async with anyio.create_task_group() as tg:

                async def wait_all():
                    with pytest.raises(PtoDependencyError) as info:
                        await w.wait()
                    got.append(info.value)

                tg.start_soon(wait_all)
                await anyio.wait_all_tasks_blocked()  # queued before the failure ran
                latch.release()
        assert got[0].__cause__ is failed.exception()
        after = inc.submit(t)
        await w.wait()  # delivered: healthy
        assert after.exception() is None and isinstance(before.exception(), PtoDependencyError)
        np.testing.assert_array_equal(await t.to_host(), x + np.float32(1))
        t.free()
