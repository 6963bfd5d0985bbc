"""Completion pumps: asyncio, uvloop and trio; sequential loops; threads (runtime/_pump.py)."""

from __future__ import annotations

import asyncio
import threading

import anyio
import numpy as np
import pytest
import trio
import uvloop

from pypto_async.errors import PtoInvalidStateError
from pypto_async.runtime import ChipWorker

N = 64


def rand(n: int = N) -> np.ndarray:
    return np.random.default_rng().standard_normal(n).astype(np.float32)


@pytest.mark.anyio
async def test_many_tasks_each_await_their_own_launch(config, kernels):
    async with ChipWorker(config) as w:
        assert w.mode in ("asyncio", "trio")
        add = w.register(kernels.get("add", N))
        results = {}

        async def request(i):
            a, b = rand(), rand()
            out = np.zeros(N, np.float32)
            assert await add(a, b, out) is out
            results[i] = np.array_equal(out, a + b)

        async with anyio.create_task_group() as tg:
            for i in range(200):
                tg.start_soon(request, i)
        assert results == {i: True for i in range(200)}
        assert w.stats().completions_per_wakeup >= 1.0


@pytest.mark.anyio
async def test_sync_from_a_worker_thread(config, kernels):
    async with ChipWorker(config) as w:
        x = rand()
        expected = x + np.float32(1)
        launch = w.register(kernels.get("inc", N))(x)
        assert await anyio.to_thread.run_sync(launch.sync, 10.0) is x
        np.testing.assert_array_equal(x, expected)


@pytest.mark.anyio
async def test_aclose_finishes_queued_work(config, kernels):
    w = await ChipWorker(config).open()
    assert await w.open() is w  # again in the same loop: nothing to do
    x = np.zeros(N, np.float32)
    launches = [w.register(kernels.get("inc", N))(x) for _ in range(5)]
    await w.aclose()
    assert w.is_closed
    assert all(launch.exception() is None for launch in launches)
    np.testing.assert_array_equal(x, np.full(N, 5, np.float32))


@pytest.mark.asyncio
async def test_under_pytest_asyncio(config, kernels):
    async with ChipWorker(config) as w:
        a, b, out = rand(), rand(), np.zeros(N, np.float32)
        await w.run(kernels.get("add", N), a, b, out)
        np.testing.assert_array_equal(out, a + b)
        outs = await asyncio.gather(*[w.run(kernels.get("inc", N), np.zeros(N, np.float32))
                                      for _ in range(20)])
        assert all(np.array_equal(o, np.ones(N, np.float32)) for o in outs)


def test_many_event_loops_in_sequence(config, kernels):
    inc = kernels.get("inc", N)

    async def fresh_worker():
        async with ChipWorker(config) as w:
            x = np.zeros(N, np.float32)
            await w.run(inc, x)
            return x

    for run in (asyncio.run, uvloop.run, asyncio.run):
        np.testing.assert_array_equal(run(fresh_worker()), np.ones(N, np.float32))
    np.testing.assert_array_equal(trio.run(fresh_worker), np.ones(N, np.float32))


def test_a_long_lived_worker_moves_between_loops(config, kernels):
    w = ChipWorker(config)
    h = w.register(kernels.get("inc", N))
    t = w.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32))

    async def step(reopen: bool):
        if reopen:
            await w.open()
        await h(t)

    asyncio.run(step(True))
    with pytest.raises(PtoInvalidStateError, match="another event loop"):
        asyncio.run(step(False))  # the first loop is gone: open the worker in this one
    # That launch was queued all the same (only awaiting it failed); it runs in order.
    trio.run(step, True)
    asyncio.run(step(True))
    assert w.mode == "asyncio"
    np.testing.assert_array_equal(t.numpy(), np.full(N, 4, np.float32))
    t.free()
    w.close()


def test_a_worker_cannot_move_out_of_a_loop_that_still_runs(config, kernels):
    # Its pump lives in a loop that runs in another thread: opening it here must refuse,
    # and leave it working there.
    w = ChipWorker(config)
    h = w.register(kernels.get("inc", N))
    x = np.random.default_rng().standard_normal(N).astype(np.float32)
    t = w.alloc_tensor(N, np.float32, init=x)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(w.open(), loop).result(10)
        with pytest.raises(PtoInvalidStateError, match="another live event loop"):
            asyncio.run(w.open())

        async def there():
            await h(t)
            return await t.to_host()

        got = asyncio.run_coroutine_threadsafe(there(), loop).result(10)
        np.testing.assert_array_equal(got, x + np.float32(1))
        t.free()
        asyncio.run_coroutine_threadsafe(w.aclose(), loop).result(10)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def test_awaiting_in_a_later_trio_run_asks_to_reopen(config, kernels):
    w = ChipWorker(config)
    h = w.register(kernels.get("inc", N))
    x = np.random.default_rng().standard_normal(N).astype(np.float32)
    t = w.alloc_tensor(N, np.float32, init=x)

    async def step(reopen: bool):
        if reopen:
            await w.open()
        await h(t)

    trio.run(step, True)
    with pytest.raises(PtoInvalidStateError, match="another trio run"):
        trio.run(step, False)  # the first run is over: open the worker in this one
    trio.run(step, True)  # the refused await's launch was queued all the same, and ran in order
    expected = x
    for _ in range(3):
        expected = expected + np.float32(1)
    np.testing.assert_array_equal(t.numpy(), expected)
    t.free()
    w.close()
