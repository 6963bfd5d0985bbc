"""Records resolved in line as a task awaits its launch (_complete.serve_ready, pto_cq_drain_keep).

With the host first (``RunConfig.host_first``) a short launch has often run by
the time its task awaits it: ``await launch`` drains the record then and there
and the task does not suspend.  That drain leaves the completion fd signalled
(``pto_cq_drain_keep``), so a task that awaits launch after launch costs no
eventfd write and read per record; the pump's own callback resets the fd on
the loop's next look at it.  These tests assert the mechanism (signals per
record, the fd reset by the loop, no record stranded behind a kept fd) and
the results, under asyncio and uvloop; not timings.
"""

from __future__ import annotations

import asyncio
import select

import numpy as np
import pytest

from helpers.raw_driver import device_stats
from pypto_async._driver import lib
from pypto_async.errors import PtoCopyFault, PtoDependencyError
from pypto_async.runtime import ChipWorker, RunConfig
from pypto_async.testing import fail_next, hold

N = 1024
AWAITS = 64
CONFIG = {"host_first": "always", "timing": "host", "device_memory": 64 << 20}


def _asyncio_run(main):
    return asyncio.run(main())


def _uvloop_run(main):
    uvloop = pytest.importorskip("uvloop")
    return uvloop.run(main())


RUNNERS = pytest.mark.parametrize("run", [_asyncio_run, _uvloop_run], ids=["asyncio", "uvloop"])


def _readable(fd: int) -> bool:
    return bool(select.select([fd], [], [], 0)[0])


async def _fd_reset_by_the_loop(w, turns: int = 100) -> bool:
    """Whether the completion fd is reset within `turns` turns of the loop (the pump's callback does it)."""
    fd = lib.pto_cq_fd(w._dev)
    for _ in range(turns):
        if not _readable(fd):
            return True
        await asyncio.sleep(0)
    return not _readable(fd)


@RUNNERS
def test_awaits_answered_in_line_signal_the_fd_once_not_per_record(kernels, run):
    """64 launches awaited one by one, each resolved in line: a handful of eventfd signals, not one per record."""
    rng = np.random.default_rng(261)

    async def main():
        async with ChipWorker(RunConfig(**CONFIG)) as w:
            add = w.register(kernels.get("add", N))
            x = rng.standard_normal(N).astype(np.float32)
            weight = rng.standard_normal(N).astype(np.float32)
            a = w.alloc_tensor(N, np.float32, init=x)
            wd = w.alloc_tensor(N, np.float32, init=weight)
            out = w.alloc_tensor(N, np.float32, init=np.full(N, np.nan, np.float32))  # poisoned
            await add(a, wd, out)  # the kernel's time is known from here: short, run in line
            await w.wait()
            assert await _fd_reset_by_the_loop(w)
            q = w._queue
            st0, done0, inline0 = device_stats(w._dev), q.completions, w.stats().inline_runs
            want = x.copy()
            for i in range(AWAITS):
                await add(a if i % 2 == 0 else out, wd, out if i % 2 == 0 else a)
                want = want + weight
            st = device_stats(w._dev)
            records = st.cq_records - st0.cq_records
            signals = st.cq_signals - st0.cq_signals
            assert q.completions - done0 == records >= AWAITS
            assert w.stats().inline_runs - inline0 >= AWAITS // 2
            # Draining each record in line with pto_cq_drain cost one signal (and one reset) per
            # record; kept, the fd is signalled again only after the loop (or the launch path's
            # service every 64 tokens) reset it.
            assert signals <= records // 4, (signals, records)
            # The loop's next looks at the fd reset it: no wake-up left pending for nothing.
            assert await _fd_reset_by_the_loop(w)
            host = np.full(N, np.nan, np.float32)
            await w.copy(host, a)  # AWAITS is even: the last launch wrote a
            np.testing.assert_allclose(host, want, rtol=1e-5, atol=1e-5)

    run(main)


@RUNNERS
def test_a_record_pushed_behind_a_kept_fd_still_wakes_the_awaiting_task(kernels, run):
    """After drains that kept the fd signalled, a launch held by a latch completes on a device thread and wakes its task."""
    rng = np.random.default_rng(262)

    async def main():
        async with ChipWorker(RunConfig(**CONFIG)) as w:
            add = w.register(kernels.get("add", N))
            x = rng.standard_normal(N).astype(np.float32)
            a = w.alloc_tensor(N, np.float32, init=x)
            out = w.alloc_tensor(N, np.float32)
            for _ in range(8):
                await add(a, a, out)  # in line: the fd is left signalled
            await w.copy(out, np.full(N, np.nan, np.float32))  # poisoned
            with hold(w.default_stream) as latch:
                task = asyncio.ensure_future(add(a, a, out).wait())
                for _ in range(20):  # the loop resets the kept fd meanwhile; the launch waits
                    await asyncio.sleep(0)
                assert not task.done()
                assert await _fd_reset_by_the_loop(w)
                latch.release()  # a device thread runs it: its record signals the fd again
                await asyncio.wait_for(task, 60)
            host = np.full(N, np.nan, np.float32)
            await w.copy(host, out)
            np.testing.assert_array_equal(host, x + x)

    run(main)


@RUNNERS
def test_a_failure_resolved_in_line_raises_as_before(kernels, run):
    """A failed launch whose record is drained in line raises its error; its dependent its dependency error."""
    rng = np.random.default_rng(263)

    async def main():
        async with ChipWorker(RunConfig(**CONFIG)) as w:
            add = w.register(kernels.get("add", N))
            x = rng.standard_normal(N).astype(np.float32)
            a = w.alloc_tensor(N, np.float32, init=x)
            out = w.alloc_tensor(N, np.float32)
            await add(a, a, out)
            fail_next(w.default_stream, PtoCopyFault)
            first = add(a, a, out)
            second = add(out, a, out)
            with pytest.raises(PtoCopyFault):
                await first
            with pytest.raises(PtoDependencyError):
                await second
            await add(a, a, out)  # observed: the stream runs again
            host = np.full(N, np.nan, np.float32)
            await w.copy(host, out)
            np.testing.assert_array_equal(host, x + x)

    run(main)


@RUNNERS
def test_many_tasks_each_awaiting_a_launch_get_their_outputs(kernels, run):
    """The benchmark's pattern, checked: 500 tasks each await their own launch on their own output tensor."""
    rng = np.random.default_rng(264)

    async def main():
        async with ChipWorker(RunConfig(**CONFIG)) as w:
            add = w.register(kernels.get("add", 16))
            xs = [rng.standard_normal(16).astype(np.float32) for _ in range(500)]
            ins = [w.alloc_tensor(16, np.float32, init=x) for x in xs]
            outs = [w.alloc_tensor(16, np.float32, init=np.full(16, np.nan, np.float32)) for _ in xs]

            async def one(i):
                return await add(ins[i], ins[i], outs[i])

            got = await asyncio.gather(*[one(i) for i in range(len(xs))])
            assert [g is outs[i] for i, g in enumerate(got)] == [True] * len(xs)
            for x, o in zip(xs, outs):
                host = np.full(16, np.nan, np.float32)
                await w.copy(host, o)
                np.testing.assert_array_equal(host, x + x)

    run(main)


class _Clock:
    """A stand-in for the pump's clock (``_pump._clock``): `step` nanoseconds more at each look."""

    def __init__(self, step: int):
        self.now = 0
        self.step = step
        self.looks = 0

    def __call__(self) -> int:
        self.now += self.step
        self.looks += 1
        return self.now


@pytest.mark.parametrize("step_ns, awaits, low, high", [
    (0, 2048, 2, 2),  # a clock that stands still: one yield per _YIELD_EVERY awaits, exactly
    (100_000, 1600, 5, 16),  # 0.1 ms a look, one look per 16 awaits: about one yield per 11 looks
])
def test_awaits_of_finished_launches_yield_once_a_slice_not_once_a_look(kernels, monkeypatch, step_ns, awaits,
                                                                       low, high):
    """A coroutine awaiting finished launches yields after a slice (or 1024 awaits), its clock started per streak."""
    from pypto_async.runtime import _pump

    clock = _Clock(step_ns)
    monkeypatch.setattr(_pump, "_clock", clock)
    rng = np.random.default_rng(265)

    async def main():
        async with ChipWorker(RunConfig(**CONFIG)) as w:
            add = w.register(kernels.get("add", N))
            x = rng.standard_normal(N).astype(np.float32)
            a = w.alloc_tensor(N, np.float32, init=x)
            out = w.alloc_tensor(N, np.float32)
            launch = add(a, a, out)
            await w.wait()
            assert launch.done()
            yields = []

            def counted():
                yields.append(clock.looks)
                yield

            w._pump._yield_once = counted
            w._pump.streak = 0
            for _ in range(awaits):
                assert await launch is out
            host = np.full(N, np.nan, np.float32)
            await w.copy(host, out)
            np.testing.assert_array_equal(host, x + x)
            return len(yields)

    assert low <= asyncio.run(main()) <= high


# -- the kept fd: one owner of q.fd_kept, the same under both pumps ---------------------------------------


def test_only_the_take_writes_the_kept_flag_and_the_pumps_only_reset_it():
    # The rule is written once: _complete._take sets and clears q.fd_kept, reset_kept_fd reads it;
    # no pump (nor anything else) writes it.
    import inspect
    import pathlib

    from pypto_async.runtime import _complete

    root = pathlib.Path(_complete.__file__).parent.parent
    writers = sorted((p.name, line.split("#")[0].strip()) for p in sorted(root.rglob("*.py"))
                     for line in p.read_text().splitlines() if "fd_kept =" in line.split("#")[0])
    assert writers == [("_complete.py", "q.fd_kept = False"), ("_complete.py", "q.fd_kept = True"),
                       ("_queue.py", "self.fd_kept = False")], writers  # the last: the queue's initial value
    assert "q.fd_kept = " in inspect.getsource(_complete._take)


async def _turn(flavour):
    if flavour == "trio":
        import trio

        await trio.sleep(0)
    else:
        await asyncio.sleep(0)


def _run_flavour(flavour, main):
    if flavour == "trio":
        trio = pytest.importorskip("trio")
        return trio.run(main)
    return asyncio.run(main())


@pytest.mark.parametrize("flavour", ["asyncio", "trio"])
def test_a_kept_fd_is_reset_by_the_loop_under_either_pump(kernels, flavour):
    """serve_ready leaves the fd signalled (q.fd_kept); the loop's next look resets it; a held launch's record still wakes its task."""
    from pypto_async.runtime._complete import reset_kept_fd, serve_ready

    rng = np.random.default_rng(266)

    async def main():
        async with ChipWorker(RunConfig(**CONFIG)) as w:
            q, fd = w._queue, lib.pto_cq_fd(w._dev)
            add = w.register(kernels.get("add", N))
            x = rng.standard_normal(N).astype(np.float32)
            a = w.alloc_tensor(N, np.float32, init=x)
            out = w.alloc_tensor(N, np.float32)
            await add(a, a, out)
            await w.wait()
            for _ in range(100):  # the loop's looks at the fd reset it
                if not _readable(fd):
                    break
                await _turn(flavour)
            assert not _readable(fd) and not q.fd_kept
            first = add(a, a, out)  # host_first="always": its record is pushed as it is launched
            for _ in range(100):
                if lib.pto_cq_ready(w._dev):
                    break
                await _turn(flavour)
            serve_ready(q)  # in line, keeping the fd: resolved, the fd left signalled
            assert first.done() and q.fd_kept and _readable(fd)
            for _ in range(100):
                if not q.fd_kept:
                    break
                await _turn(flavour)
            assert not q.fd_kept and not _readable(fd)  # the pump's callback drained with the reset
            reset_kept_fd(q)  # nothing kept: nothing to do
            assert not q.fd_kept and not _readable(fd)
            await w.copy(out, np.full(N, np.nan, np.float32))  # poisoned
            with hold(w.default_stream) as latch:
                held = add(a, a, out)
                if flavour == "trio":
                    import trio

                    async with trio.open_nursery() as nursery:
                        done = []

                        async def waiter():
                            done.append(await held)

                        nursery.start_soon(waiter)
                        for _ in range(20):
                            await trio.sleep(0)
                        assert not done
                        latch.release()
                else:
                    task = asyncio.ensure_future(held.wait())
                    for _ in range(20):
                        await asyncio.sleep(0)
                    assert not task.done()
                    latch.release()
                    await asyncio.wait_for(task, 60)
            host = np.full(N, np.nan, np.float32)
            await w.copy(host, out)
            np.testing.assert_array_equal(host, x + x)

    _run_flavour(flavour, main)
