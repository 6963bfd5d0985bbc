"""Memory back-pressure: a launch whose temporaries do not fit waits for in-flight work (runtime/_memwait.py).

A launch with host arrays takes a device temporary per array until it completes.  When they
do not fit but in-flight work will free room, the launch waits (in async mode its Launch is
returned at once; in sync mode the call blocks while the worker drains), in order on its
stream; it raises PtoOutOfMemory only when waiting cannot help.
"""

from __future__ import annotations

import contextlib
import threading
import time

import anyio
import numpy as np
import pytest

from conftest import assert_no_device_memory
from pypto_async.errors import PtoOutOfMemory
from pypto_async.runtime import ChipWorker, RunConfig
from pypto_async.testing import hold

N = 4096  # 16 KiB per f32 array: an `add` of three host arrays takes 48 KiB of temporaries
SMALL = 64  # elements of the little DeviceTensors the tests keep beside them
ONE_LAUNCH = RunConfig(cores=1, copy_engines=1, device_memory=64 << 10)  # one such launch at a time


def rand(n: int = N) -> np.ndarray:
    return np.random.default_rng().standard_normal(n).astype(np.float32)


def poisoned(n: int = N) -> np.ndarray:
    return np.full(n, np.float32(-9876.5), np.float32)


@pytest.mark.anyio
async def test_a_launch_waits_for_memory_that_in_flight_work_frees(kernels):
    async with ChipWorker(ONE_LAUNCH) as w:
        add = w.register(kernels.get("add", N))
        inc = w.register(kernels.get("inc", SMALL))
        t0 = rand(SMALL)
        t = w.alloc_tensor(SMALL, np.float32, init=t0)
        u = w.alloc_tensor(SMALL, np.float32, init=np.zeros(SMALL, np.float32))
        held, free, other = w.stream(), w.stream(), w.stream()
        a1, b1, a2, b2 = rand(), rand(), rand(), rand()
        o1, o2 = poisoned(), poisoned()
        with hold(held) as latch:
            first = add(a1, b1, o1, stream=held)  # its temporaries fill the device
            second = add(a2, b2, o2, stream=free)  # they do not fit: it waits (the call returned)
            behind = inc(t, stream=free)  # later work on its stream queues behind it
            assert not second.submitted_to_ring
            # The event loop goes on: unrelated work completes meanwhile.
            await inc(u, stream=other)
            await inc(u, stream=other)
            assert not second.done() and not behind.done()
            assert w.stats().memory_waits == 1
            np.testing.assert_array_equal(o2, poisoned())
            latch.release()
        await w.wait()  # taken after the launch waited: covers it
        assert first.done() and second.done() and behind.done()
        assert await second is o2
        np.testing.assert_array_equal(o1, a1 + b1)
        np.testing.assert_array_equal(o2, a2 + b2)
        np.testing.assert_array_equal(await t.to_host(), t0 + 1)
        np.testing.assert_array_equal(await u.to_host(), np.full(SMALL, 2, np.float32))
        t.free()
        u.free()
        await w.wait()
        assert_no_device_memory(w)


@pytest.mark.anyio
async def test_waiting_launches_are_served_in_order(kernels):
    # A small launch that would fit does not overtake a large one waiting before it.
    async with ChipWorker(ONE_LAUNCH) as w:
        add = w.register(kernels.get("add", N))
        small = w.register(kernels.get("add", SMALL))
        inc = w.register(kernels.get("inc", SMALL))
        u = w.alloc_tensor(SMALL, np.float32, init=np.zeros(SMALL, np.float32))
        held, s2, s3, other = w.stream(), w.stream(), w.stream(), w.stream()
        args = [(rand(), rand(), poisoned()) for _ in range(2)]
        a, b, c = rand(SMALL), rand(SMALL), poisoned(SMALL)
        with hold(held) as latch:
            first = add(*args[0], stream=held)
            large = add(*args[1], stream=s2)  # waits for the first one's 48 KiB
            little = small(a, b, c, stream=s3)  # 768 bytes would fit: it waits its turn
            await inc(u, stream=other)  # the pump serves completions meanwhile
            await inc(u, stream=other)
            assert not large.done() and not little.done()
            assert w.stats().memory_waits == 2
            latch.release()
        for launch, (x, y, out) in zip((first, large), args):
            assert await launch is out
            np.testing.assert_array_equal(out, x + y)
        assert await little is c
        np.testing.assert_array_equal(c, a + b)
        u.free()
        await w.wait()
        assert_no_device_memory(w)


def test_sync_mode_blocks_the_thread_until_memory_frees(kernels):
    with ChipWorker(ONE_LAUNCH) as w:
        add = w.register(kernels.get("add", N))
        a1, b1, a2, b2 = rand(), rand(), rand(), rand()
        o1, o2 = poisoned(), poisoned()
        other = w.stream()  # (a stream reuses its own queued frees at once: use another)
        with hold(w.default_stream) as latch:
            first = add.submit(a1, b1, o1)  # in the ring, behind the latch, holding its temporaries

            def release_once_waiting():
                while w.stats().memory_waits == 0:
                    time.sleep(0.001)
                latch.release()

            releaser = threading.Thread(target=release_once_waiting)
            releaser.start()
            assert add(a2, b2, o2, stream=other) is o2  # blocks until the first one freed them
            releaser.join()
        assert first.sync(timeout=10) is o1
        np.testing.assert_array_equal(o1, a1 + b1)
        np.testing.assert_array_equal(o2, a2 + b2)
        assert w.stats().memory_waits == 1
        assert_no_device_memory(w)


@pytest.mark.anyio
async def test_temporaries_larger_than_the_device_raise_at_once(kernels):
    async with ChipWorker(ONE_LAUNCH) as w:
        add = w.register(kernels.get("add", 2 * N))  # 96 KiB of temporaries on a 64 KiB device
        out = poisoned(2 * N)
        before = w.stats()
        with hold(w.default_stream):  # work in flight does not make it fit
            with pytest.raises(PtoOutOfMemory, match="more than the device's 65536 bytes"):
                add(rand(2 * N), rand(2 * N), out)
            after = w.stats()
        assert (after.memory_allocations, after.memory_in_use) == (before.memory_allocations,
                                                                   before.memory_in_use)
        assert after.memory_waits == 0
        np.testing.assert_array_equal(out, poisoned(2 * N))
        await w.wait()
        assert_no_device_memory(w)


@pytest.mark.anyio
async def test_nothing_in_flight_raises_at_once(kernels):
    async with ChipWorker(ONE_LAUNCH) as w:
        add = w.register(kernels.get("add", N))
        resident = w.alloc_tensor(2 * N, np.float32, init=rand(2 * N))  # 32 KiB kept: 48 KiB do not fit
        await w.wait()
        out = poisoned()
        before = w.stats()
        with pytest.raises(PtoOutOfMemory, match="no work in flight would free any"):
            add(rand(), rand(), out)
        after = w.stats()
        assert (after.memory_allocations, after.memory_in_use, after.in_flight) == (
            before.memory_allocations, before.memory_in_use, 0)
        np.testing.assert_array_equal(out, poisoned())
        resident.free()  # room again: the worker goes on
        a, b = rand(), rand()
        assert await add(a, b, out) is out
        np.testing.assert_array_equal(out, a + b)
        await w.wait()
        assert_no_device_memory(w)


@pytest.mark.anyio
async def test_a_wait_that_work_in_flight_cannot_end_fails_in_its_place(kernels):
    # In flight there is only a latch and a launch on DeviceTensors: once they finished, nothing
    # more can free memory, and the waiting launch fails; what was queued behind it runs.
    async with ChipWorker(ONE_LAUNCH) as w:
        add = w.register(kernels.get("add", N))
        inc = w.register(kernels.get("inc", SMALL))
        resident = w.alloc_tensor(2 * N, np.float32, init=rand(2 * N))
        t = w.alloc_tensor(SMALL, np.float32, init=np.zeros(SMALL, np.float32))
        await w.wait()
        out = poisoned()
        with hold(w.default_stream) as latch:
            before = inc(t)
            waiting = add(rand(), rand(), out)
            behind = inc(t)
            assert not waiting.done()
            latch.release()
        with pytest.raises(PtoOutOfMemory, match="waited for device memory"):
            await waiting
        await before
        await behind
        np.testing.assert_array_equal(await t.to_host(), np.full(SMALL, 2, np.float32))
        np.testing.assert_array_equal(out, poisoned())
        resident.free()
        t.free()
        await w.wait()
        assert_no_device_memory(w)


@pytest.mark.anyio
async def test_200_concurrent_requests_on_a_small_device_all_succeed(kernels):
    # The service pattern: a resident weight, host arrays in and out, 200 requests at once over
    # four streams.  The device holds the temporaries of about 30 requests.  The streams are
    # held until every request has been made, so that most of them must wait for memory.
    async with ChipWorker(RunConfig(cores=2, copy_engines=2, device_memory=1 << 20)) as w:
        add = w.register(kernels.get("add", N))
        weight_host = rand()
        weight = w.alloc_tensor(N, np.float32, init=weight_host)
        streams = [w.stream() for _ in range(4)]
        xs = np.random.default_rng().standard_normal((200, N)).astype(np.float32)
        outs = [np.full(N, np.nan, np.float32) for _ in range(200)]
        made = []
        all_made = anyio.Event()

        async def request(i: int) -> None:
            launch = add(xs[i], weight, outs[i], stream=streams[i % 4])
            made.append(launch)
            if len(made) == 200:
                all_made.set()
            assert await launch is outs[i]

        with contextlib.ExitStack() as held:
            latches = [held.enter_context(hold(s)) for s in streams]
            async with anyio.create_task_group() as tg:
                for i in range(200):
                    tg.start_soon(request, i)
                await all_made.wait()
                assert w.stats().memory_waits > 100
                for latch in latches:
                    latch.release()
        np.testing.assert_array_equal(np.stack(outs), xs + weight_host)
        weight.free()
        await w.wait()
        assert_no_device_memory(w)
