"""Event loops: a producer never starves its loop, closes from other threads, blocked-loop warnings.

The async tests run under asyncio, uvloop and trio.  No timing: each asserts counts
(ticks of a task beside the producer) or outcomes.
"""

from __future__ import annotations

import asyncio
import threading
import warnings

import anyio
import numpy as np
import pytest

from pypto_async._driver import lib
from pypto_async.errors import PtoCanceledError
from pypto_async.runtime import ChipWorker, RunConfig
from pypto_async.testing import hold

from .conftest import SMALL

N = 64
#: A 4-slot ring on one core: past three commands behind a latch, work waits in the FIFO.
TINY_RING = dict(SMALL, ring_task_window=4, cores=1, copy_engines=1)


def rand(n: int = N) -> np.ndarray:
    return np.random.default_rng().standard_normal(n).astype(np.float32)


# -- a producer that never suspends -------------------------------------------------------------------

#: An await answered without suspending yields to the loop at least this often (and after a
#: millisecond without suspending, whichever comes first): the documented bound tests count on.
YIELD_EVERY = 1024
#: Steps a ticker may miss: asyncio runs it at the producer's yield; trio runs each batch of
#: ready tasks in either order, so the producer may run on to its next yield first.
BETWEEN_TICKS = 2 * YIELD_EVERY
PRODUCED = 10_000


async def _tick_through(produce) -> tuple[int, int]:
    """Run `produce(step)` beside a ticker task; return (ticks, longest run of steps between ticks).

    `produce` calls ``step()`` after each of its awaits: a step with no tick since the last
    one means the loop got no turn between the two awaits.
    """
    ticks = 0
    done = False
    last, run, longest = 0, 0, 0

    async def ticker():
        nonlocal ticks
        while not done:
            ticks += 1
            await anyio.sleep(0)

    def step():
        nonlocal last, run, longest
        if ticks == last:
            run += 1
            longest = max(longest, run)
        else:
            last, run = ticks, 0

    async with anyio.create_task_group() as tg:
        tg.start_soon(ticker)
        while not ticks:
            await anyio.sleep(0)
        start = last = ticks
        await produce(step)
        done = True
    return ticks - start, longest


@pytest.mark.anyio
@pytest.mark.parametrize("device", [
    pytest.param(dict(ring=1 << 14, kernel="noop", n=16), id="keeps-up-ring-never-full"),
    pytest.param(dict(ring=4, kernel="noop", n=16), id="keeps-up-4-slot-ring"),
    pytest.param(dict(ring=4, kernel="inc", n=1 << 15), id="falls-behind-4-slot-ring"),
])
@pytest.mark.slow
async def test_a_producer_loop_lets_the_event_loop_run(rel_kernels, device):
    """10,000 ``await h.submit(t)`` in a row: a ticker beside them ticks all along."""
    # Falling behind needs the device's threads to run the kernels: with the host first, the submitting thread
    # may run them inline itself (on a loaded host, nearly all of them) and the ring never fills.
    cfg = RunConfig(ring_task_window=device["ring"], ring_heap=64 * device["ring"], cores=1, copy_engines=1,
                    device_memory=16 << 20, host_first="off" if device["kernel"] == "inc" else "auto")
    async with ChipWorker(cfg) as w:
        h = w.register(rel_kernels.get(device["kernel"], device["n"]))
        t = w.alloc_tensor(device["n"], np.float32, init=np.zeros(device["n"], np.float32))

        async def produce(step):
            for _ in range(PRODUCED):
                await h.submit(t)
                step()

        ticks, longest = await _tick_through(produce)
        await w.default_stream
        if device["kernel"] == "inc":
            assert w.stats().backpressure_waits > 0  # it did fall behind
            np.testing.assert_array_equal(await t.to_host(), np.full(device["n"], PRODUCED, np.float32))
        t.free()
    assert longest < BETWEEN_TICKS, longest
    assert ticks >= PRODUCED // BETWEEN_TICKS, ticks


@pytest.mark.anyio
@pytest.mark.parametrize("shift", [0, 1], ids=["even-tokens", "odd-tokens"])
async def test_a_producer_loop_across_streams_lets_the_event_loop_run(rel_kernels, shift):
    """``await h.submit(t)`` alternating two streams: every launch takes an inferred edge's token too.

    So the launches' tokens are all even or all odd (`shift`): neither may keep the loop waiting.
    """
    cfg = RunConfig(ring_task_window=1 << 14, ring_heap=1 << 18, ring_dep_pool=1 << 14, cores=1,
                    copy_engines=1, device_memory=16 << 20)
    async with ChipWorker(cfg) as w:
        h = w.register(rel_kernels.get("inc", N))
        t = w.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32))
        streams = (w.stream(), w.stream())
        other = w.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32))
        for _ in range(shift):
            await h.submit(other)  # one token more before the loop

        async def produce(step):
            for i in range(PRODUCED):
                await h.submit(t, stream=streams[i % 2])
                step()

        ticks, longest = await _tick_through(produce)
        for s in streams:
            await s
        assert w.stats().inferred_waits >= PRODUCED - 1
        np.testing.assert_array_equal(await t.to_host(), np.full(N, PRODUCED, np.float32))
    assert longest < BETWEEN_TICKS, longest
    assert ticks >= PRODUCED // BETWEEN_TICKS, ticks


@pytest.mark.anyio
@pytest.mark.parametrize("shift", [0, 1, pytest.param(2, marks=pytest.mark.slow), pytest.param(3, marks=pytest.mark.slow)])
async def test_a_replay_loop_across_streams_lets_the_event_loop_run(rel_kernels, shift):
    """``await g.submit(stream=...)`` alternating two streams: each replay takes an edge's token too.

    A one-launch replay takes three tokens, its edge a fourth: over the four alignments (`shift`)
    none may keep the loop waiting.
    """
    cfg = RunConfig(ring_task_window=1 << 14, ring_heap=1 << 18, ring_dep_pool=1 << 14, cores=1,
                    copy_engines=1, device_memory=16 << 20)
    async with ChipWorker(cfg) as w:
        h = w.register(rel_kernels.get("inc", N))
        s0, s1, s2 = w.stream(), w.stream(), w.stream()
        t = w.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32), stream=s1)
        with w.capture(name="inc", stream=s0) as cap:
            h(t, stream=s0)
        g = cap.graph
        other = w.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32))
        for _ in range(shift):
            await h.submit(other)  # one token more before the loop

        async def produce(step):
            for i in range(PRODUCED // 2):
                await g.submit(stream=(s1, s2)[i % 2])
                step()

        ticks, longest = await _tick_through(produce)
        for s in (s1, s2):
            await s
        assert w.stats().inferred_waits >= PRODUCED // 2 - 1
        np.testing.assert_array_equal(await t.to_host(), np.full(N, PRODUCED // 2, np.float32))
        g.close()
    assert longest < BETWEEN_TICKS, longest
    assert ticks >= PRODUCED // 2 // BETWEEN_TICKS, ticks


@pytest.mark.anyio
async def test_awaiting_finished_launches_in_a_loop_lets_the_event_loop_run(rel_config, rel_kernels):
    """``await launch``, ``launch.wait()`` and ``launch.submitted()`` of finished launches, in a row."""
    async with ChipWorker(rel_config) as w:
        h = w.register(rel_kernels.get("noop", N))
        t = w.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32))
        launches = [h(t) for _ in range(1000)]
        await w.default_stream
        assert all(launch.done() for launch in launches)

        async def produce(step):
            for i in range(PRODUCED):
                launch = launches[i % len(launches)]
                kind = i % 3
                await (launch if kind == 0 else launch.wait() if kind == 1 else launch.submitted())
                step()

        ticks, longest = await _tick_through(produce)
        t.free()
    assert longest < BETWEEN_TICKS, longest
    assert ticks >= PRODUCED // BETWEEN_TICKS, ticks


# -- close() from another thread ------------------------------------------------------------------


def _asyncio_run(main):
    asyncio.run(main())


def _asyncio_run_debug(main):
    asyncio.run(main(), debug=True)


def _uvloop_run_debug(main):
    import uvloop

    uvloop.run(main(), debug=True)


def _trio_run(main):
    import trio

    trio.run(main)


@pytest.mark.parametrize("runner", [_asyncio_run, _asyncio_run_debug, _uvloop_run_debug, _trio_run],
                         ids=["asyncio", "asyncio-debug", "uvloop-debug", "trio"])
def test_close_from_another_thread_wakes_the_tasks_awaiting_launches(rel_kernels, runner):
    """close() off the loop's thread runs on the loop: what it fails or finishes wakes its awaiters."""
    got = {}

    async def main():
        w = await ChipWorker(RunConfig(**TINY_RING)).open()
        inc = w.register(rel_kernels.get("inc", N))
        with hold(w.default_stream, timeout=60):  # never released: close() must cancel it
            launches = [inc(rand()) for _ in range(6)]  # 3 in the ring behind the latch, 3 in the FIFO
            assert not launches[-1].submitted_to_ring

            async def waiter():
                try:
                    await launches[-1]
                except PtoCanceledError as exc:
                    got["error"] = exc

            async with anyio.create_task_group() as tg:
                tg.start_soon(waiter)
                await anyio.wait_all_tasks_blocked()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)  # "dropped N command(s)"
                    await anyio.to_thread.run_sync(lambda: w.close(timeout=0))
                with anyio.fail_after(30):  # before the fix, the waiter never woke
                    await anyio.wait_all_tasks_blocked()
                    tg.cancel_scope.cancel()
        got["closed"] = w.is_closed

    runner(main)
    assert got["closed"] and isinstance(got.get("error"), PtoCanceledError), got


@pytest.mark.parametrize("outcome", ["finished", "dropped"])
@pytest.mark.parametrize("runner", [_asyncio_run, _asyncio_run_debug, _uvloop_run_debug, _trio_run],
                         ids=["asyncio", "asyncio-debug", "uvloop-debug", "trio"])
@pytest.mark.slow  # over half a second each on two CPUs (the fast tier's budget)
def test_close_from_another_thread_while_the_loop_is_busy_wakes_the_awaiting_tasks(rel_kernels, runner, outcome):
    """A close() the busy loop cannot take over runs on the closing thread: its completions still wake tasks.

    The loop is held in a synchronous call while another thread closes the worker, so the
    hand-off to the loop gives up and the close runs on that thread.  It finishes (latch
    released, the work done on the device but not drained) or drops (latch held) the
    launches two tasks wait for, one with ``await launch``, one with ``launch.wait()``;
    each must wake with that outcome.  Before the fix their futures were resolved off the
    loop's thread: under debug the tasks never woke.  The loop runs on a thread of its own,
    so that a task that never wakes fails the test instead of hanging it.
    """
    got = {}
    x = rand()
    out = np.full(N, np.nan, np.float32)

    async def main():
        w = await ChipWorker(RunConfig(**SMALL)).open()
        inc = w.register(rel_kernels.get("inc", N))
        t = w.alloc_tensor(N, np.float32, init=x)
        s = w.stream()
        loop_free = threading.Event()
        woke = anyio.Event()
        with hold(s, timeout=60) as latch:
            launches = {"first": inc.submit(t, stream=s), "copy": w.copy(out, t, stream=s)}
            t.free()

            async def waiter(name, wait):
                try:
                    got[name] = await wait()
                except PtoCanceledError as exc:
                    got[name] = exc
                if "first" in got and "copy" in got:
                    woke.set()

            def close_elsewhere():
                try:
                    if outcome == "finished":
                        latch.release()
                        assert lib.pto_device_synchronize(w._dev, 30_000_000) == 0  # done, not drained
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore", RuntimeWarning)  # "dropped N command(s)"
                        w.close(timeout=0.2)  # the loop is busy: the hand-off gives up
                finally:
                    loop_free.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(waiter, "first", launches["first"].wait)
                tg.start_soon(waiter, "copy", lambda: launches["copy"])
                await anyio.wait_all_tasks_blocked()
                closer = threading.Thread(target=close_elsewhere)
                closer.start()
                assert loop_free.wait(60)  # the loop's thread blocks: nothing runs on it meanwhile
                closer.join(30)
                await woke.wait()
        got["closed"] = w.is_closed

    errors = []
    loop_thread = threading.Thread(target=lambda: _record_errors(errors, lambda: runner(main)), daemon=True)
    loop_thread.start()
    loop_thread.join(60)
    assert not loop_thread.is_alive(), f"the awaiting tasks never woke: {got}"
    assert not errors and got["closed"], (errors, got)
    if outcome == "finished":
        assert not isinstance(got["first"], BaseException) and not isinstance(got["copy"], BaseException), got
        np.testing.assert_array_equal(out, x + 1)
    else:
        assert isinstance(got["first"], PtoCanceledError) and isinstance(got["copy"], PtoCanceledError), got


def test_close_from_another_thread_after_the_loop_ended_closes_there(rel_config, rel_kernels):
    box = {}

    async def main():
        box["w"] = w = await ChipWorker(rel_config).open()
        box["launch"] = w.register(rel_kernels.get("inc", N))(rand())

    asyncio.run(main())
    errors = []
    thread = threading.Thread(target=lambda: _record_errors(errors, box["w"].close))
    thread.start()
    thread.join(30)
    assert not errors and box["w"].is_closed and box["launch"].done()


def _record_errors(errors, fn):
    try:
        fn()
    except BaseException as exc:  # noqa: BLE001 - reported by the test
        errors.append(exc)


# -- warnings when a wait blocks an event loop --------------------------------------------------------


@pytest.mark.anyio
async def test_a_sync_mode_worker_used_in_a_coroutine_warns_once(rel_config, rel_kernels):
    w = ChipWorker(rel_config)  # no `await w.open()`: sync mode
    try:
        inc = w.register(rel_kernels.get("inc", N))
        x = rand()
        x0 = x.copy()
        with pytest.warns(RuntimeWarning, match=r"sync mode.*block.*event loop.*await worker\.open\(\)") as rec:
            inc(x)  # sync mode: returns the outputs once done, blocking the loop
        assert len(rec) == 1 and rec[0].filename == __file__  # it points at the caller
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            inc(x)  # once per worker
            w.default_stream.sync()
        np.testing.assert_array_equal(x, x0 + 1 + 1)  # float32, step by step
    finally:
        w.close()


@pytest.mark.anyio
async def test_a_blocking_wait_on_the_loops_thread_warns_once(rel_config, rel_kernels):
    async with ChipWorker(rel_config) as w:
        inc = w.register(rel_kernels.get("inc", N))
        x = rand()
        x0 = x.copy()
        with pytest.warns(RuntimeWarning, match=r"blocking wait.*blocks the (asyncio|trio) event loop.*await") as rec:
            inc(x).sync()
        assert len(rec) == 1 and rec[0].filename == __file__
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            inc(x).sync()  # once per worker
            w.default_stream.sync()
            w.sync()
        np.testing.assert_array_equal(x, x0 + 1 + 1)  # float32, step by step


def test_no_loop_warning_in_plain_sync_code(rel_config, rel_kernels):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with ChipWorker(rel_config) as w:
            inc = w.register(rel_kernels.get("inc", N))
            x = rand()
            x0 = x.copy()
            inc(x)
            inc.submit(x).sync()
            w.default_stream.sync()
            w.sync()
        np.testing.assert_array_equal(x, x0 + 1 + 1)  # float32, step by step


@pytest.mark.anyio
async def test_no_loop_warning_for_a_sync_worker_in_a_worker_thread(rel_config, rel_kernels):
    def work():
        with ChipWorker(rel_config) as w:
            x = rand()
            x0 = x.copy()
            w.register(rel_kernels.get("inc", N))(x)
            return x, x0

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        x, x0 = await anyio.to_thread.run_sync(work)
    np.testing.assert_array_equal(x, x0 + 1)
