"""Stream: order, overlap, device-side waits, back-pressure, close (runtime/_stream.py)."""

from __future__ import annotations

import threading
import time

import anyio
import numpy as np
import pytest

from pypto_async.errors import PtoArgumentError, PtoClosedError, PtoDependencyError, PtoTimeout
from pypto_async.runtime import ChipWorker, Stream
from pypto_async.testing import hold

N = 64


def rand(n: int = N) -> np.ndarray:
    return np.random.default_rng().standard_normal(n).astype(np.float32)


def test_stream_init_disabled():
    with pytest.raises(TypeError, match=r"ChipWorker\.stream\(\)"):
        Stream()


def test_stream_properties(worker):
    s = worker.stream(priority=3)
    assert s.priority == 3 and s.worker is worker and not s.is_closed
    assert s.id != worker.default_stream.id
    assert s.backlog == 0
    with pytest.raises(PtoArgumentError, match="priority"):
        worker.stream(priority="high")
    s.close()


def test_launches_on_one_stream_complete_in_order(worker, kernels):
    step = worker.register(kernels.get("step"))
    counter = worker.alloc_tensor(1, np.int64, init=np.zeros(1, np.int64))
    s = worker.stream()
    # k_step fails unless the counter equals the launch's index: any reordering fails a launch.
    launches = [step.submit(counter, i, stream=s) for i in range(200)]
    s.sync(timeout=10)
    assert [launch.exception() for launch in launches] == [None] * 200
    assert counter.numpy()[0] == 200
    counter.free()
    s.close()


def test_two_streams_overlap(worker, kernels):
    inc = worker.register(kernels.get("inc", N))
    a, b = worker.stream(), worker.stream()
    ta = worker.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32))
    x = np.zeros(N, np.float32)
    with hold(a) as latch:
        held = inc.submit(ta, stream=a)
        # A sync-mode call returns only once complete: stream b is not held by a.
        inc(x, stream=b)
        np.testing.assert_array_equal(x, np.ones(N, np.float32))
        assert not held.done() and not a.record().query()
        latch.release()
        held.sync(timeout=10)
    np.testing.assert_array_equal(ta.numpy(), np.ones(N, np.float32))
    ta.free()
    a.close()
    b.close()


@pytest.mark.parametrize("what", ["launch", "event", "stream"])
def test_wait_orders_across_streams(worker, kernels, what):
    inc = worker.register(kernels.get("inc", N))
    copy = worker.register(kernels.get("copy", N))
    a, b = worker.stream(), worker.stream()
    x = rand()
    t = worker.alloc_tensor(N, np.float32, init=x)
    out = np.full(N, np.nan, np.float32)
    with hold(a) as latch:
        first = inc.submit(t, stream=a)
        b.wait({"launch": first, "event": a.record(), "stream": a}[what])
        second = copy.submit(t, out, stream=b)
        after = b.record()
        assert not after.query()  # b waits on the device for a, which is held
        assert not second.done()
        latch.release()
        second.sync(timeout=10)
    np.testing.assert_array_equal(out, x + np.float32(1))
    t.free()
    a.close()
    b.close()


def test_wait_rejects_other_things(worker, config, kernels):
    s = worker.stream()
    with pytest.raises(PtoArgumentError, match="takes an Event, a Launch or a Stream"):
        s.wait(42)
    with ChipWorker(config.replace(device_id=1)) as other:
        # Another worker's work is waited for on the device (tests/runtime/test_devices.py).
        s.wait(other.default_stream)
        s.wait(other.default_stream.record())
        foreign = other.register(kernels.get("inc", N)).submit(rand())
        s.wait(foreign)
        s.sync(timeout=10)
    s.close()


def test_wait_on_what_is_already_settled_adds_no_dependency(worker, kernels):
    inc = worker.register(kernels.get("inc", N))
    s, c = worker.stream(), worker.stream()
    done = inc.submit(rand(), stream=c)
    done.sync(timeout=10)
    with hold(c, timeout=2):
        s.wait(done)  # completed: nothing to wait for, though c is held now
        s.wait(s)  # a stream is in order with itself
        x = rand()
        expected = x + np.float32(1)
        # Sync mode returns once complete: had s waited on c, this would fail with the latch.
        inc(x, stream=s)
        np.testing.assert_array_equal(x, expected)
    s.close()
    c.close()


def test_sync_has_a_timeout(worker, kernels):
    inc = worker.register(kernels.get("inc", N))
    t = worker.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32))
    with hold(worker.default_stream):
        inc.submit(t)
        with pytest.raises(PtoTimeout, match="did not complete within"):
            worker.default_stream.sync(timeout=0.05)
    worker.default_stream.sync(timeout=10)
    np.testing.assert_array_equal(t.numpy(), np.ones(N, np.float32))
    t.free()


@pytest.mark.anyio
async def test_await_stream_waits_for_work_queued_so_far(config, kernels):
    async with ChipWorker(config) as w:
        inc = w.register(kernels.get("inc", N))
        x = rand()
        t = w.alloc_tensor(N, np.float32, init=x)
        launches = [inc(t) for _ in range(10)]
        await w.default_stream
        assert all(launch.done() for launch in launches)
        for _ in range(10):
            x = x + np.float32(1)  # step by step, in float32, as the kernel does
        np.testing.assert_array_equal(await t.to_host(), x)
        t.free()


@pytest.mark.anyio
async def test_await_stream_raises_the_failure_of_a_launch_nobody_awaited(config, kernels):
    async with ChipWorker(config) as w:
        failed = w.register(kernels.get("fail", N))(rand())
        with pytest.raises(PtoDependencyError) as info:
            await w.default_stream
        assert failed.done() and info.value.__cause__ is failed.exception() is not None
        await w.default_stream  # delivered: nothing left to raise


@pytest.mark.anyio
async def test_backpressure_never_blocks_the_loop(kernels, tiny_ring):
    async with ChipWorker(tiny_ring) as w:
        step = w.register(kernels.get("step"))
        counter = w.alloc_tensor(1, np.int64, init=np.zeros(1, np.int64))
        await w.default_stream
        ticks = 0
        done = False
        latch_cm = hold(w.default_stream)  # the ring is sure to fill: the first ticks release it
        latch = latch_cm.__enter__()

        async def ticker():
            nonlocal ticks
            while not done:
                ticks += 1
                if ticks == 3:
                    latch.release()
                await anyio.sleep(0)

        launches = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(ticker)
            for i in range(1000):
                launch = await step.submit(counter, i)
                assert launch.submitted_to_ring
                launches.append(launch)
            await launches[-1].wait()
            done = True
        latch_cm.__exit__(None, None, None)
        # k_step saw the launches in order; the other task ran while this one waited for room.
        assert [launch.exception() for launch in launches] == [None] * 1000
        assert ticks >= 3
        stats = w.stats()
        assert stats.backpressure_waits > 0
        np.testing.assert_array_equal(await counter.to_host(), [1000])
        counter.free()


@pytest.mark.anyio
async def test_launches_queue_in_the_fifo_in_order(kernels, tiny_ring):
    # Without awaiting submit(): everything past the ring waits in the stream's FIFO, in order.
    async with ChipWorker(tiny_ring) as w:
        step = w.register(kernels.get("step"))
        counter = w.alloc_tensor(1, np.int64, init=np.zeros(1, np.int64))
        with hold(w.default_stream) as latch:  # nothing leaves the ring while we submit
            launches = [step(counter, i) for i in range(300)]
            assert w.default_stream.backlog > 0
            latch.release()
        order = []

        async def watch(i):
            await launches[i]
            # Launches resolve in submission order: every earlier one is done too.
            assert all(launches[j].done() for j in range(i))
            order.append(i)

        async with anyio.create_task_group() as tg:
            for i in range(len(launches)):
                tg.start_soon(watch, i)
        assert sorted(order) == list(range(300))
        assert [launch.exception() for launch in launches] == [None] * 300
        np.testing.assert_array_equal(await counter.to_host(), [300])
        counter.free()


def test_sync_mode_submit_blocks_only_while_the_window_is_full(kernels, tiny_ring):
    with ChipWorker(tiny_ring) as w:
        step = w.register(kernels.get("step"))
        counter = w.alloc_tensor(1, np.int64, init=np.zeros(1, np.int64))
        launches = [step.submit(counter, i) for i in range(100)]
        assert all(launch.submitted_to_ring for launch in launches)
        w.default_stream.sync(timeout=10)
        assert [launch.exception() for launch in launches] == [None] * 100
        np.testing.assert_array_equal(counter.numpy(), [100])
        counter.free()


def test_sync_mode_submit_waits_for_room_in_the_ring(kernels, tiny_ring):
    with ChipWorker(tiny_ring) as w:
        step = w.register(kernels.get("step"))
        counter = w.alloc_tensor(1, np.int64, init=np.zeros(1, np.int64))
        s = w.default_stream
        w.sync(timeout=10)
        released = threading.Event()
        with hold(s) as latch:
            launches = [step.submit(counter, i) for i in range(3)]  # with the latch: 4 slots of 4

            def release_once_blocked():
                # The next submit finds no room: its launch waits in the FIFO while the
                # caller blocks.  Only then let the ring drain.
                deadline = time.monotonic() + 10
                while not s.backlog and time.monotonic() < deadline:
                    time.sleep(0.001)
                released.set()
                latch.release()

            helper = threading.Thread(target=release_once_blocked)
            helper.start()
            launches.append(step.submit(counter, 3))
            assert released.is_set() and launches[-1].submitted_to_ring
            helper.join()
        w.sync(timeout=10)
        assert [launch.exception() for launch in launches] == [None] * 4
        np.testing.assert_array_equal(counter.numpy(), [4])
        counter.free()


def test_close_stream(worker, kernels):
    inc = worker.register(kernels.get("inc", N))
    s = worker.stream()
    t = worker.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32), stream=s)
    with hold(s) as latch:
        queued = inc.submit(t, stream=s)
        s.close()  # queued work still runs
        s.close()  # idempotent
        assert s.is_closed
        with pytest.raises(PtoClosedError, match="closed"):
            inc(t, stream=s)
        with pytest.raises(PtoClosedError):
            s.record()
        latch.release()
        queued.sync(timeout=10)
    # The tensor's deallocation stream is closed: it is freed on the default stream instead.
    np.testing.assert_array_equal(t.numpy(), np.ones(N, np.float32))
    t.free()


def test_use_stream_of_a_stream_closed_inside_the_block_refuses_work(worker, kernels):
    # Closed inside use_stream: work queued there is refused as with stream=s, never sent
    # silently to the default stream.
    inc = worker.register(kernels.get("inc", N))
    s = worker.stream()
    t = worker.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32))
    with worker.use_stream(s):
        launch = inc.submit(t)
        assert launch.stream is s
        launch.sync(timeout=10)
        s.close()
        with pytest.raises(PtoClosedError, match="closed"):
            inc(t)
        with pytest.raises(PtoClosedError, match="closed"):
            inc.submit(t)
        with pytest.raises(PtoClosedError, match="closed"):
            worker.copy(t, rand())
        with pytest.raises(PtoClosedError, match="closed"):
            worker.alloc_tensor(N, np.float32)
        with pytest.raises(PtoClosedError, match="closed"):
            worker.copy_to(t.data_ptr, rand(), t.nbytes)
    assert inc(t).stream is worker.default_stream  # outside the block: the default stream again
    np.testing.assert_array_equal(t.numpy(), np.full(N, 2, np.float32))
    t.free()


def test_query_tells_whether_the_work_queued_so_far_completed(kernels, tiny_ring):
    with ChipWorker(tiny_ring) as w:
        inc = w.register(kernels.get("inc", N))
        fail = w.register(kernels.get("fail", N))
        a, b = w.stream(), w.stream()
        x = rand()
        t = w.alloc_tensor(N, np.float32, init=x, stream=a)
        a.sync(timeout=10)
        assert a.query() and b.query()  # nothing queued yet on b
        with hold(a) as latch:
            launches = [inc.submit(t, stream=a) for _ in range(2)]  # behind the latch, in the ring
            inc(rand(), stream=b)  # sync mode: complete on return
            assert not a.query() and b.query()
            latch.release()
            a.sync(timeout=10)
        assert a.query() and all(launch.done() for launch in launches)
        np.testing.assert_array_equal(t.numpy(), x + np.float32(1) + np.float32(1))
        # A failed command is completed work: query() does not raise for it (sync() does).
        failed = fail.submit(rand(), stream=b)
        with pytest.raises(PtoDependencyError):
            b.sync(timeout=10)
        assert b.query() and failed.exception() is not None
        # A closed stream answers for the work queued before it closed.
        with hold(b) as latch:
            inc.submit(t, stream=b)
            b.close()
            assert not b.query()
            latch.release()
            w.default_stream.wait(b)  # on b's final event
            w.default_stream.sync(timeout=10)
            assert b.query()
        t.free()
        a.close()
    with pytest.raises(PtoClosedError):
        a.query()


@pytest.mark.anyio
async def test_query_counts_the_fifo(kernels, tiny_ring):
    async with ChipWorker(tiny_ring) as w:
        inc = w.register(kernels.get("inc", N))
        x = rand()
        t = w.alloc_tensor(N, np.float32, init=x)
        s = w.default_stream
        await s
        with hold(s) as latch:
            launches = [inc(t) for _ in range(10)]
            assert s.backlog > 0 and not s.query()
            latch.release()
        await launches[-1]  # its record was pushed after the stream's counter moved
        assert s.backlog == 0 and s.query()
        for _ in range(10):
            x = x + np.float32(1)  # step by step, in float32, as the kernel does
        np.testing.assert_array_equal(await t.to_host(), x)
        t.free()


@pytest.mark.anyio
async def test_a_stream_closed_with_a_backlog_runs_it_then_goes(kernels, tiny_ring):
    async with ChipWorker(tiny_ring) as w:
        step = w.register(kernels.get("step"))
        s = w.stream()
        counter = w.alloc_tensor(1, np.int64, init=np.zeros(1, np.int64), stream=s)
        with hold(s) as latch:
            launches = [step(counter, i, stream=s) for i in range(50)]
            assert s.backlog > 0
            s.close()  # the backlog still enters the ring, in order, and runs
            assert s.is_closed and s.id in w._streams
            with pytest.raises(PtoClosedError):
                step(counter, 50, stream=s)
            latch.release()
        for launch in launches:
            await launch  # k_step fails unless launches run in submission order
        assert s.backlog == 0 and s.id not in w._streams  # released once its FIFO emptied
        np.testing.assert_array_equal(await counter.to_host(), [50])
        counter.free()


def test_default_stream_cannot_be_closed(worker):
    with pytest.raises(PtoArgumentError, match="closed with its worker"):
        worker.default_stream.close()


def test_a_dropped_stream_is_released(worker, kernels):
    import gc

    inc = worker.register(kernels.get("inc", N))
    x = np.zeros(N, np.float32)
    s = worker.stream()
    launch = inc.submit(x, stream=s)
    assert worker.stats().streams == 2
    launch.sync(timeout=10)
    del s, launch
    gc.collect()
    assert worker.stats().streams == 1
    np.testing.assert_array_equal(x, np.ones(N, np.float32))
