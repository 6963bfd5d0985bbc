"""Work queued past a full ring: the driver keeps it, judges it, and lets it be withdrawn.

* The backlog reaches the device without the host (issue 11, item 12): the
  driver moves it into the ring as commands complete, so a busy event loop
  does not leave the device idle.
* One failure rule (issue 12, item 2): every command carries the failure
  epoch it was queued at, in the ring, the driver's backlog or the host's
  FIFO alike, and the driver judges them all.
* ``Launch.cancel()`` (issue 11, item 14) withdraws a launch that has not
  reached the device yet.

The rings are tiny (4 slots) and held by ``testing.hold`` latches, so what
waits where is deterministic; device memory is read straight from the sim
arena where the host must not queue anything to look.
"""

from __future__ import annotations

import contextlib
import gc
import weakref

import numpy as np
import pytest

from pypto_async._driver import ffi, lib
from pypto_async.errors import PtoCanceledError, PtoDependencyError, PtoError, PtoKernelFault
from pypto_async.runtime import ChipWorker, RunConfig
from pypto_async.runtime._complete import service
from pypto_async.runtime._submit import submit, token
from pypto_async.testing import fail_next, hold

from conftest import mem_stats

N = 64


def rand(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0.5, 4.0, N).astype(np.float32)


def poisoned() -> np.ndarray:
    return np.full(N, np.nan, np.float32)


def arena(worker, t, dtype) -> np.ndarray:
    """A tensor's device contents, read from the sim arena (nothing queued)."""
    ptr = lib.pto_mem_host_ptr(worker._dev, t.data_ptr)
    return np.frombuffer(ffi.buffer(ptr, t.nbytes), dtype=dtype).copy()


async def outcome(launch):
    try:
        return await launch
    except PtoError as exc:
        return exc


# -- the backlog reaches the device without the host ---------------------------------------------


@pytest.mark.anyio
async def test_the_backlog_runs_on_the_device_while_the_event_loop_is_busy(kernels, tiny_ring):
    async with ChipWorker(tiny_ring) as w:
        step = w.register(kernels.get("step"))
        counter = w.alloc_tensor(1, np.int64, init=np.zeros(1, np.int64))
        s = w.default_stream
        await s
        with hold(s) as latch:
            launches = [step(counter, i) for i in range(40)]  # k_step fails unless run in order
            assert s.backlog == 37  # the latch and three launches fill the ring
            latch.release()
            # The event loop is busy from here on (a blocking driver wait stands for any work
            # that keeps it from the pump): whatever reaches the device now gets there without it.
            assert lib.pto_stream_synchronize(s._ptr, 10_000_000) == 0
        np.testing.assert_array_equal(arena(w, counter, np.int64), [40])
        assert lib.pto_stream_completed(s._ptr) == lib.pto_stream_accepted(s._ptr)
        for launch in launches:
            await launch
        assert s.backlog == 0 and w.stats().backpressure_waits >= 37
        np.testing.assert_array_equal(await counter.to_host(), [40])
        counter.free()


@pytest.mark.anyio
async def test_a_service_backlog_waits_in_the_driver_and_enters_the_ring_in_batches(kernels):
    """The pattern of bench_service: more requests (copy in, kernel, copy out, free) than the ring
    holds, all in flight before the first is awaited.  No task waits on the host for ring room (the stream's
    FIFO stays empty); the driver's overflow keeps the backlog, in order, and a refill admits at
    least a quarter of the ring, so the hand-offs are far fewer than the commands that waited."""
    async with ChipWorker(RunConfig(ring_task_window=16, cores=1, copy_engines=1)) as w:
        add = w.register(kernels.get("add", N))
        rng = np.random.default_rng(7)
        weight = rng.uniform(0.5, 2.0, N).astype(np.float32)
        xs = rng.uniform(-4.0, 4.0, (24, N)).astype(np.float32)
        outs = np.full_like(xs, np.nan)
        wd = w.alloc_tensor(N, np.float32, init=weight)
        s = w.default_stream
        await s
        st = ffi.new("pto_stream_stats *")
        with hold(s) as latch:
            launches = [add(xs[i], wd, outs[i]) for i in range(len(xs))]
            assert not s._fifo  # nothing waits on the host for room
            assert s.backlog > 3 * 16  # four commands a request, 24 requests, 16 slots
            check_stats = lib.pto_stream_get_stats(s._ptr, st)
            assert check_stats == 0 and st.refills == 0
            waited = s.backlog
            latch.release()
            for launch in launches:
                await launch
        np.testing.assert_array_equal(outs, xs + weight)
        assert lib.pto_stream_get_stats(s._ptr, st) == 0
        assert st.overflow == 0 and 0 < st.refills <= waited // 4 + 1, (st.refills, waited)
        wd.free()


# -- one failure rule: the driver's ---------------------------------------------------------------


@pytest.mark.anyio
async def test_an_injection_aimed_behind_an_observed_failure_is_used_up_there(kernels, tiny_ring):
    """fail_next aimed at a record queued behind a failure (past a full ring): the record fails
    as a dependent, using the injection up, and work queued after the observation runs.

    Was: the host kept that record in its FIFO, and on the observation turned it into a
    "record failed" command that entered the ring healthy: the injection made it the stream's
    new first failure, and the next launch failed as its dependent.
    """
    async with ChipWorker(tiny_ring) as w:
        fail = w.register(kernels.get("fail", N))
        inc = w.register(kernels.get("inc", N))
        s, c = w.default_stream, w.stream()
        x = w.alloc_tensor(N, np.float32, init=rand(1))
        y = w.alloc_tensor(N, np.float32, init=rand(2))
        z = w.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32))
        await s
        with hold(c) as held_c, hold(s) as latch:
            failed = fail(x)
            s.wait(c.record())  # keeps s's ring after the failure, until c goes on
            fillers = []
            while not s.backlog:
                fillers.append(inc(y))
            fail_next(s)  # aimed at the record, which waits for ring room behind the failure
            e = s.record()
            latch.release()
            assert isinstance(await outcome(failed), PtoKernelFault)  # observed now
            later = inc(z)  # queued after the observation, before the record runs
            held_c.release()
        assert await outcome(later) is z
        with pytest.raises(PtoDependencyError):
            await e
        for launch in fillers:
            assert isinstance(await outcome(launch), PtoDependencyError)
        np.testing.assert_array_equal(await z.to_host(), np.ones(N, np.float32))
        for t in (x, y, z):
            t.free()


class _Gate:
    """A host condition work can be queued behind (a stand-in for one not yet met)."""

    _entered = False


def _hold_behind(w, stream, gate) -> None:
    """Queue a notify on `stream` that waits for `gate`: what follows waits on the host."""
    q = w._queue
    with q.lock:
        submit(q, stream, lib.pto_stream_notify, (stream._ptr, token(q, None)), None, 0, gate=gate)


def _open(w, gate) -> None:
    gate._entered = True
    with w._queue.lock:
        service(w._queue)  # what the pump does once the condition is met


@pytest.mark.anyio
async def test_work_held_on_the_host_is_judged_at_the_epoch_it_was_queued(kernels, tiny_ring):
    async with ChipWorker(tiny_ring) as w:
        fail = w.register(kernels.get("fail", N))
        inc = w.register(kernels.get("inc", N))
        s = w.default_stream
        x = w.alloc_tensor(N, np.float32, init=rand(1))
        z = w.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32))
        await s
        gate = _Gate()
        with hold(s) as latch:
            failed = fail(x)
            _hold_behind(w, s, gate)
            before = inc(z)  # queued before the failure is observed
            latch.release()
            assert isinstance(await outcome(failed), PtoKernelFault)  # observed now
        after = inc(z)  # queued after the observation, behind the gate too
        assert s.backlog == 3 and not s.query()
        assert not before.done() and not after.done()
        _open(w, gate)
        exc = await outcome(before)
        assert isinstance(exc, PtoDependencyError) and isinstance(exc.__cause__, PtoKernelFault)
        assert await outcome(after) is z
        np.testing.assert_array_equal(await z.to_host(), np.ones(N, np.float32))
        assert s.backlog == 0
        x.free()
        z.free()


# -- Launch.cancel ---------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_cancel_withdraws_a_launch_in_the_ring_or_waiting_for_ring_room(kernels, tiny_ring):
    async with ChipWorker(tiny_ring) as w:
        add = w.register(kernels.get("add", N))
        s = w.default_stream
        weight = rand(9)
        wd = w.alloc_tensor(N, np.float32, init=weight)
        await s
        xs = [rand(i) for i in range(6)]
        outs = [poisoned() for _ in range(6)]
        with hold(s) as latch:
            # Five commands each (copy in, kernel, copy out, two frees): the latch and the first
            # three of launch 0 fill the ring; the rest waits in the driver's backlog.
            launches = [add(x, wd, out) for x, out in zip(xs, outs)]
            assert launches[0].cancel() is True  # in the ring behind the latch: not started either
            assert launches[3].cancel() is True
            assert launches[3].done()  # at once, while the stream is still held
            assert launches[3].cancel() is False  # nothing left to withdraw
            with pytest.raises(PtoCanceledError):
                await launches[3]
            held = weakref.ref(xs[3])
            xs[3] = None
            gc.collect()
            assert held() is None  # the runtime let go of its host arrays
            latch.release()
        for i in (1, 2, 4, 5):
            assert await launches[i] is outs[i]
            np.testing.assert_array_equal(outs[i], rand(i) + weight)
        assert np.isnan(outs[0]).all() and np.isnan(outs[3]).all()  # never written
        await s
        stats = mem_stats(w)
        assert (stats.allocations, stats.pending_frees) == (1, 0)  # the weight: its temporaries went
        assert s.backlog == 0
        wd.free()


@pytest.mark.anyio
async def test_cancel_of_work_held_on_the_host(kernels, tiny_ring):
    async with ChipWorker(tiny_ring) as w:
        add = w.register(kernels.get("add", N))
        s = w.default_stream
        weight = rand(9)
        wd = w.alloc_tensor(N, np.float32, init=weight)
        await s
        gate = _Gate()
        _hold_behind(w, s, gate)
        out_a, out_b = poisoned(), poisoned()
        a = add(rand(1), wd, out_a)
        b = add(rand(2), wd, out_b)
        assert mem_stats(w).allocations == 3  # the weight and a block of temporaries each
        assert a.cancel() is True
        assert lib.pto_stream_synchronize(s._ptr, 10_000_000) == 0  # its block went back, in order
        assert mem_stats(w).allocations == 2
        with pytest.raises(PtoCanceledError):
            await a
        _open(w, gate)
        assert await b is out_b
        np.testing.assert_array_equal(out_b, rand(2) + weight)
        assert np.isnan(out_a).all()
        await s
        assert mem_stats(w).allocations == 1
        wd.free()


ONE_LAUNCH = RunConfig(cores=1, copy_engines=1, device_memory=64 << 10)  # one 4096-float add at a time
M = 4096


@pytest.mark.anyio
async def test_cancel_of_a_launch_waiting_for_device_memory(kernels):
    async with ChipWorker(ONE_LAUNCH) as w:
        add = w.register(kernels.get("add", M))
        held, s = w.stream(), w.stream()
        a = [np.random.default_rng(i).standard_normal(M).astype(np.float32) for i in range(6)]
        outs = [np.full(M, np.nan, np.float32) for _ in range(3)]
        with hold(held) as latch:
            first = add(a[0], a[1], outs[0], stream=held)  # its temporaries fill the device
            second = add(a[2], a[3], outs[1], stream=s)  # waits for memory
            third = add(a[4], a[5], outs[2], stream=s)  # waits behind it
            assert not second.submitted_to_ring and w.stats().memory_waits >= 1
            assert second.cancel() is True
            with pytest.raises(PtoCanceledError):
                await second
            latch.release()
        assert await first is outs[0] and await third is outs[2]
        np.testing.assert_array_equal(outs[0], a[0] + a[1])
        np.testing.assert_array_equal(outs[2], a[4] + a[5])
        assert np.isnan(outs[1]).all()
        await w.wait()
        assert mem_stats(w).allocations == 0


@pytest.mark.anyio
async def test_cancel_of_a_launch_granted_memory_but_held_on_the_host(kernels):
    async with ChipWorker(ONE_LAUNCH) as w:
        add = w.register(kernels.get("add", M))
        held, s = w.stream(), w.stream()
        a = [np.random.default_rng(i).standard_normal(M).astype(np.float32) for i in range(4)]
        outs = [np.full(M, np.nan, np.float32) for _ in range(2)]
        gate = _Gate()
        _hold_behind(w, s, gate)
        with hold(held) as latch:
            first = add(a[0], a[1], outs[0], stream=held)  # its temporaries fill the device
            second = add(a[2], a[3], outs[1], stream=s)  # waits for memory, behind the gate too
            latch.release()
        assert await first is outs[0]
        await held
        with w._queue.lock:
            service(w._queue)  # memory came back: the waiting launch is granted its block
        assert mem_stats(w).allocations == 1 and not second.done()
        assert second.cancel() is True  # still behind the gate: its block goes back in order
        assert lib.pto_stream_synchronize(s._ptr, 10_000_000) == 0
        assert mem_stats(w).allocations == 0
        with pytest.raises(PtoCanceledError):
            await second
        _open(w, gate)
        await s
        assert np.isnan(outs[1]).all()


def test_cancel_after_completion_or_close_is_false(kernels, config):
    w = ChipWorker(config)
    inc = w.register(kernels.get("inc", N))
    t = w.alloc_tensor(N, np.float32, init=rand())
    done = inc.submit(t)
    done.sync(timeout=10)
    assert done.cancel() is False and done.exception() is None
    t.free()
    w.close()
    assert done.cancel() is False


@pytest.mark.anyio
async def test_cancel_withdraws_launches_in_the_rings_of_four_held_streams_and_order_holds(kernels, config):
    """100 launches in the rings of 4 held streams, none started: all withdrawn, none runs.

    What was queued after them still runs, in order: on each stream an
    ``inc`` then a ``scale`` (so order shows in the value, (x + 1) * 3), an
    event recorded after them fires, and another stream waiting on that event
    reads the final value.
    """
    async with ChipWorker(config) as w:
        inc, scale, add = (w.register(kernels.get(n)) for n in ("inc", "scale", "add"))
        streams = [w.stream() for _ in range(4)]
        starts = [rand(10 + i) for i in range(4)]
        ts = [w.alloc_tensor(N, np.float32, init=x, stream=s) for x, s in zip(starts, streams)]
        sink = w.alloc_tensor(N, np.float32, init=poisoned(), stream=streams[1])
        for s in streams:
            await s
        with contextlib.ExitStack() as stack:
            latches = [stack.enter_context(hold(s)) for s in streams]
            doomed = [inc(t, stream=s) for _ in range(25) for s, t in zip(streams, ts)]
            assert all(launch.cancel() for launch in doomed)  # in the rings, behind the latches
            assert all(launch.done() for launch in doomed)  # at once, while the streams are held
            assert not any(launch.cancel() for launch in doomed)  # nothing left to withdraw
            later = []
            for s, t in zip(streams, ts):
                later.append(inc(t, stream=s))
                later.append(scale(t, 3.0, t, stream=s))
            ev = streams[0].record()
            streams[1].wait(ev)
            later.append(add(ts[0], ts[1], sink, stream=streams[1]))  # reads stream 0's final value
            assert not any(launch.done() for launch in later)
            for latch in latches:
                latch.release()
        for launch in doomed:
            with pytest.raises(PtoCanceledError, match="canceled before it started"):
                await launch
        for launch in later:
            await launch.wait()
        await ev
        finals = [(x + np.float32(1)) * np.float32(3) for x in starts]
        for t, want in zip(ts, finals):
            np.testing.assert_array_equal(await t.to_host(), want)  # the withdrawn 25 never ran
        np.testing.assert_array_equal(await sink.to_host(), finals[0] + finals[1])
        for t in (*ts, sink):
            t.free()


def test_cancel_racing_the_device_either_runs_a_launch_fully_or_skips_it(kernels, config):
    """Unheld streams, cancels as the device runs: each launch ran (cancel False) or not (True), never both."""
    with ChipWorker(config) as w:
        inc = w.register(kernels.get("inc"))
        streams = [w.stream() for _ in range(4)]
        ts = [w.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32), stream=s) for s in streams]
        ran = [0] * 4
        for round_ in range(4):
            launches = [(i, inc.submit(t, stream=s)) for _ in range(50) for i, (s, t) in enumerate(zip(streams, ts))]
            for k, (i, launch) in enumerate(launches):
                if (k + round_) % 3 and not launch.cancel():
                    ran[i] += 1
                elif not (k + round_) % 3:
                    ran[i] += 1
            w.sync()
            for i, launch in launches:
                assert launch.done()
            for t, n in zip(ts, ran):
                np.testing.assert_array_equal(t.numpy(), np.full(N, n, np.float32))
        for t in ts:
            t.free()
