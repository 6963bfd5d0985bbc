"""Event: record, query, await, sync, elapsed time, failures (runtime/_event.py)."""

from __future__ import annotations

import numpy as np
import pytest

from pypto_async.errors import (
    PtoArgumentError,
    PtoDependencyError,
    PtoInvalidStateError,
    PtoKernelFault,
    PtoTimeout,
    PtoTryAgain,
)
from pypto_async._driver import lib
from pypto_async.runtime import ChipWorker, Event
from pypto_async.runtime._wait import drive
from pypto_async.testing import hold

N = 64


def test_event_init_disabled():
    with pytest.raises(TypeError, match=r"Stream\.record\(\)"):
        Event()


def test_record_query_sync(worker, kernels):
    inc = worker.register(kernels.get("inc", N))
    t = worker.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32))
    with hold(worker.default_stream) as latch:
        inc.submit(t)
        event = worker.default_stream.record()
        assert event.stream is worker.default_stream
        assert not event.query()
        with pytest.raises(PtoTimeout):
            event.sync(timeout=0.05)
        latch.release()
        event.sync(timeout=10)
    assert event.query()
    np.testing.assert_array_equal(t.numpy(), np.ones(N, np.float32))
    t.free()


@pytest.mark.anyio
async def test_await_event(config, kernels):
    async with ChipWorker(config) as w:
        inc = w.register(kernels.get("inc", N))
        t = w.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32))
        inc(t)
        inc(t)
        event = w.default_stream.record()
        await event
        assert event.query()
        await event  # a completed event answers at once
        np.testing.assert_array_equal(await t.to_host(), np.full(N, 2, np.float32))
        t.free()


def test_elapsed_ms_brackets_device_work(worker, kernels):
    inc = worker.register(kernels.get("inc", 1 << 16))
    t = worker.alloc_tensor(1 << 16, np.float32, init=np.zeros(1 << 16, np.float32))
    start = worker.default_stream.record()
    for _ in range(5):
        inc.submit(t)
    end = worker.default_stream.record()
    end.sync(timeout=10)
    assert end.elapsed_ms(start) <= 0.0 <= start.elapsed_ms(end)
    t.free()


def test_elapsed_ms_needs_completed_events(worker, kernels):
    with hold(worker.default_stream):
        start = worker.default_stream.record()
        end = worker.default_stream.record()
        with pytest.raises(PtoTryAgain):
            start.elapsed_ms(end)
    end.sync(timeout=10)
    with pytest.raises(PtoArgumentError, match="must be an Event"):
        start.elapsed_ms(3)


@pytest.mark.parametrize("drained", ["before", "after"])
def test_elapsed_ms_of_a_finished_launch_event(worker, kernels, drained):
    # Reading launch.event after the launch's completion was drained gives a complete event
    # with the launch's own end time; reading it before records a point after the launch.
    # Either way it times like any other event, against recorded events and other launches.
    inc = worker.register(kernels.get("inc", N))
    t = worker.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32))
    start = worker.default_stream.record()
    if drained == "before":
        first = inc.submit(t)
        first.sync(timeout=10)  # returns once its completion was drained
        second = inc.submit(t)
        second.sync(timeout=10)
        assert first.done() and second.done()
        first_event, second_event = first.event, second.event
    else:
        with hold(worker.default_stream) as latch:
            first = inc.submit(t)
            first_event = first.event
            second = inc.submit(t)
            second_event = second.event
            assert not first.done()
            latch.release()
        second.sync(timeout=10)
    end = worker.default_stream.record()
    end.sync(timeout=10)
    assert first_event.query() and second_event.query()
    first_event.sync(timeout=10)
    assert 0.0 <= start.elapsed_ms(first_event) <= start.elapsed_ms(second_event) <= start.elapsed_ms(end)
    assert first_event.elapsed_ms(second_event) >= 0.0 and second_event.elapsed_ms(first_event) <= 0.0
    assert end.elapsed_ms(second_event) <= 0.0 <= second_event.elapsed_ms(end)
    np.testing.assert_array_equal(t.numpy(), np.full(N, 2, np.float32))
    t.free()


def test_elapsed_ms_of_a_failed_launch_event_says_why_not(worker, kernels):
    t = worker.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32))
    failed = worker.register(kernels.get("fail", N)).submit(t)
    with pytest.raises(PtoKernelFault):
        failed.sync(timeout=10)
    start = worker.default_stream.record()
    start.sync(timeout=10)
    with pytest.raises(PtoInvalidStateError, match="failed"):
        start.elapsed_ms(failed.event)
    t.free()


def test_elapsed_ms_needs_events_of_one_worker(worker, config):
    start = worker.default_stream.record()
    with ChipWorker(config) as other:
        end = other.default_stream.record()
        end.sync(timeout=10)
        start.sync(timeout=10)
        with pytest.raises(PtoInvalidStateError, match="different workers"):
            start.elapsed_ms(end)


@pytest.mark.anyio
async def test_event_after_a_failure_raises_it(config, kernels):
    async with ChipWorker(config) as w:
        t = w.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32))
        await w.default_stream
        failed = w.register(kernels.get("fail", N))(t)
        # Recorded right behind the failure, nothing held: it carries the failure whenever the
        # runtime drains the failure's record, since draining observes nothing.
        event = w.default_stream.record()
        with pytest.raises(PtoDependencyError) as info:
            await event
        assert isinstance(info.value.__cause__, PtoKernelFault)
        # Awaiting the event delivered a dependency error of the failure: observed, so an event
        # recorded now completes healthy, and the failed launch still raises its own error.
        await w.default_stream.record()
        with pytest.raises(PtoKernelFault):
            await failed
        t.free()


@pytest.mark.anyio
async def test_event_after_a_drained_failure_still_raises_it(config, kernels):
    async with ChipWorker(config) as w:
        t = w.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32))
        await w.default_stream
        failed = w.register(kernels.get("fail", N))(t)
        # Draining the failure's record (what the pump may do at any time) delivers nothing.
        assert drive(w._queue, failed.done, 10)
        event = w.default_stream.record()
        with pytest.raises(PtoDependencyError) as info:
            await event
        with pytest.raises(PtoKernelFault) as fault:
            await failed
        assert info.value.__cause__ is fault.value
        await w.default_stream.record()  # observed: the stream runs new work again
        t.free()


@pytest.mark.anyio
async def test_a_failure_delivered_through_a_wait_observes_the_stream_it_came_from(config, kernels):
    async with ChipWorker(config) as w:
        a, b = w.default_stream, w.stream()
        inc = w.register(kernels.get("inc", N))
        x = w.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32), stream=a)
        y = w.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32), stream=b)
        await a
        await b
        failed = w.register(kernels.get("fail", N))(x, stream=a)
        b.wait(a.record())  # b's own failure, carrying a's
        dep = inc(y, stream=b)
        assert drive(w._queue, dep.done, 10)  # drained, delivered nothing: both streams still fail
        assert failed.done()
        still = inc(x, stream=a)
        with pytest.raises(PtoDependencyError) as info:
            await dep
        assert isinstance(info.value.__cause__, PtoKernelFault)
        # Delivered: b's failure is observed, and a's, which it came from through the wait.
        await inc(y, stream=b)
        await inc(x, stream=a)
        np.testing.assert_array_equal(await y.to_host(stream=b), np.ones(N, np.float32))
        np.testing.assert_array_equal(await x.to_host(), np.ones(N, np.float32))
        with pytest.raises(PtoDependencyError):  # queued before the observation
            await still
        with pytest.raises(PtoKernelFault):
            await failed
        x.free()
        y.free()


@pytest.mark.anyio
async def test_event_recorded_behind_a_failure_in_the_fifo_fails(kernels, tiny_ring):
    # Window 4: the record waits in the stream's FIFO when the fault is drained.  It was queued
    # before the fault was observed, so it fails, and a stream waiting on it fails as a dependent.
    async with ChipWorker(tiny_ring) as w:
        a, b = w.default_stream, w.stream()
        x = w.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32))
        inc = w.register(kernels.get("inc", N))
        await inc(x, stream=b)  # b has joined x already
        with hold(a) as latch:
            failed = w.register(kernels.get("fail", N))(x, stream=a)
            event = a.record()
            while not a.backlog:
                event = a.record()
            b.wait(event)
            dependent = inc(x, stream=b)
            latch.release()
            assert lib.pto_stream_synchronize(a._ptr, 10_000_000) == 0
            with pytest.raises(PtoKernelFault):
                await failed
            with pytest.raises(PtoDependencyError) as dep:
                await dependent
            assert isinstance(dep.value.__cause__, PtoKernelFault)  # names the first failure
            with pytest.raises(PtoDependencyError):
                await event
        np.testing.assert_array_equal(await x.to_host(), np.ones(N, np.float32))
        x.free()
        b.close()
