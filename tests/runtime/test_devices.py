"""Several devices in one process: device ids, peer copies, waits across workers.

Ordering is made deterministic with latches (pypto_async.testing.hold): a
held writer, reader or copy stream, and a value at the end that could only
come out with the ordering (without it, the copy would have read or written
the other value).
"""

from __future__ import annotations

import anyio
import numpy as np
import pytest

from conftest import SMALL, assert_no_device_memory
from pypto_async.errors import (
    PtoArgumentError,
    PtoClosedError,
    PtoDependencyError,
    PtoForeignTensorError,
    PtoKernelFault,
    PtoNotSupported,
)
from pypto_async.runtime import ChipWorker, RunConfig, device_count
from pypto_async.testing import fail_next, hold

N = 4096


def cfg(device_id: int) -> RunConfig:
    return RunConfig(device_id=device_id, **SMALL)


def rand(n: int = N, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n).astype(np.float32)


# -- device ids --------------------------------------------------------------------------


def test_device_count_default_and_environment(monkeypatch):
    monkeypatch.delenv("PYPTO_ASYNC_SIM_DEVICES", raising=False)
    assert device_count() == 8
    assert device_count("a2a3sim") == 8
    monkeypatch.setenv("PYPTO_ASYNC_SIM_DEVICES", "3")
    assert device_count("sim") == 3
    with pytest.raises(PtoArgumentError, match="0..2"):
        ChipWorker(cfg(3))
    monkeypatch.setenv("PYPTO_ASYNC_SIM_DEVICES", "many")
    with pytest.raises(PtoArgumentError, match="PYPTO_ASYNC_SIM_DEVICES"):
        device_count()
    with pytest.raises(PtoNotSupported, match="unknown platform"):
        device_count("nope")
    with pytest.raises(PtoArgumentError, match="str"):
        device_count(3)


def test_device_id_opens_that_device():
    with ChipWorker(cfg(5)) as w:
        assert w.device_id == 5
        assert w.config.device_id == 5
    with ChipWorker(RunConfig(**SMALL)) as w:
        assert w.device_id == 0


def test_device_id_out_of_range_names_the_range():
    with pytest.raises(PtoArgumentError, match=r"device_id 8 is out of range.*devices 0\.\.7"):
        ChipWorker(cfg(8))
    with pytest.raises(PtoArgumentError, match="device_id"):
        RunConfig(device_id=-1)


# -- peer copies (sync mode) -----------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint8])
def test_peer_copy_round_trips_bytes_exactly(dtype):
    rng = np.random.default_rng(7)
    x = rng.integers(0, 255, size=(64, 33)).astype(dtype) if dtype is not np.float32 else \
        rng.standard_normal((64, 33)).astype(dtype)
    with ChipWorker(cfg(0)) as a, ChipWorker(cfg(1)) as b:
        ta = a.alloc_tensor(x.shape, dtype, init=x)
        tb = b.alloc_tensor(x.shape, dtype)
        b.copy(tb, np.full(x.shape, 3, dtype))  # poisoned first
        launch = a.copy(tb, ta)  # on a's default stream: the source's
        assert launch.done() and launch.stream is a.default_stream
        assert launch.result() is tb
        back = a.alloc_tensor(x.shape, dtype)
        b.copy(back, tb, stream=a.stream())  # dst's worker's stream, copy called on the source's
        assert tb.numpy().tobytes() == x.tobytes()
        assert back.numpy().tobytes() == x.tobytes()
        for t in (ta, back):
            t.free()
        tb.free()
        assert_no_device_memory(a)
        assert_no_device_memory(b)


def test_peer_copy_refuses_bad_arguments_before_queueing():
    with ChipWorker(cfg(0)) as a, ChipWorker(cfg(1)) as b, ChipWorker(cfg(2)) as c:
        ta = a.alloc_tensor(N, np.float32, init=rand())
        tb = b.alloc_tensor(N, np.float32)
        small = b.alloc_tensor(N // 2, np.float32)
        ints = b.alloc_tensor(N, np.int32)
        with pytest.raises(PtoArgumentError, match="sizes differ"):
            a.copy(small, ta)
        with pytest.raises(PtoArgumentError, match="dtypes differ"):
            a.copy(ints, ta)
        with pytest.raises(PtoArgumentError, match="neither"):
            a.copy(tb, ta, stream=c.default_stream)
        with pytest.raises(PtoForeignTensorError, match="neither"):
            c.copy(tb, ta)
        with pytest.raises(PtoForeignTensorError, match="worker that owns it"):
            b.copy(np.empty(N, np.float32), ta)  # a host copy stays with the tensor's worker
        b._platform = "other"  # as a worker of another platform would say
        try:
            with pytest.raises(PtoNotSupported, match="stage the data through the host"):
                a.copy(tb, ta)
        finally:
            b._platform = a.platform
        a.copy(tb, ta)  # still working
        np.testing.assert_array_equal(tb.numpy(), ta.numpy())
        for t in (ta, tb, small, ints):
            t.free()


def test_launch_refuses_another_workers_tensor_pointing_at_copy(kernels):
    with ChipWorker(cfg(0)) as a, ChipWorker(cfg(1)) as b:
        inc = b.register(kernels.get("inc", N))
        ta = a.alloc_tensor(N, np.float32, init=rand())
        with pytest.raises(PtoForeignTensorError, match=r"w\.copy\(dst, src\)"):
            inc(ta)
        ta.free()


# -- ordering (async mode: a held stream must not block the test) -----------------------------


@pytest.mark.anyio
async def test_peer_copy_waits_for_the_sources_held_writer(kernels):
    x = rand()
    async with ChipWorker(cfg(0)) as a, ChipWorker(cfg(1)) as b:
        inc = a.register(kernels.get("inc", N))
        s = a.stream()
        ta = a.alloc_tensor(N, np.float32, init=x)
        tb = b.alloc_tensor(N, np.float32)
        with hold(s) as latch:
            writer = inc(ta, stream=s)
            copy = a.copy(tb, ta)  # on a's default stream: waits for s on the device
            await b.stream().record()  # the devices go on meanwhile
            assert not writer.done() and not copy.done()
            latch.release()
            await copy
        assert writer.done()
        # The copy read the writer's bytes: without the wait it would have read x.
        np.testing.assert_array_equal(await tb.to_host(), x + 1)
        ta.free()
        tb.free()


@pytest.mark.anyio
async def test_peer_copy_waits_for_pending_uses_of_the_destination(kernels):
    x = rand()
    async with ChipWorker(cfg(0)) as a, ChipWorker(cfg(1)) as b:
        inc = b.register(kernels.get("inc", N))
        ta = a.alloc_tensor(N, np.float32, init=x)
        tb = b.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32))
        s = b.stream()
        with hold(s) as latch:
            inc(tb, stream=s)  # a pending use (a write) of tb on b
            copy = a.copy(tb, ta)
            latch.release()
            await copy
        await s
        # The copy came after the increment: without the wait tb would be x + 1.
        np.testing.assert_array_equal(await tb.to_host(), x)
        ta.free()
        tb.free()


@pytest.mark.anyio
async def test_a_first_write_of_the_source_on_a_new_stream_waits_for_the_copy(kernels):
    # Write after read: the source was last written on another stream than the copy's, and the
    # stream that overwrites it afterwards never used it.  The write's inferred edge goes to the
    # source's last writer, which waits for the copy (as every stream that used the source does).
    x = rand()
    async with ChipWorker(cfg(0)) as a, ChipWorker(cfg(1)) as b:
        inc = a.register(kernels.get("inc", N))
        writer_home, copier, later = a.stream(), a.stream(), a.stream()
        ta = a.alloc_tensor(N, np.float32, init=x, stream=writer_home)
        await inc(ta, stream=writer_home)  # ta = x + 1, last written on writer_home
        tb = b.alloc_tensor(N, np.float32, init=np.full(N, np.nan, np.float32))
        with hold(copier) as latch:
            copy = a.copy(tb, ta, stream=copier)  # held: it has not read ta yet
            overwrite = inc(ta, stream=later)
            await a.stream().record()  # a's device goes on meanwhile
            assert not overwrite.done()
            latch.release()
            await copy
            await overwrite
        np.testing.assert_array_equal(await tb.to_host(), x + 1)  # the copy read ta before the overwrite
        np.testing.assert_array_equal(await ta.to_host(), x + 1 + 1)
        ta.free()
        tb.free()


@pytest.mark.anyio
@pytest.mark.parametrize("where", ["used stream", "new stream"])
async def test_later_uses_of_the_destination_wait_for_the_copy(kernels, where):
    x = rand()
    async with ChipWorker(cfg(0)) as a, ChipWorker(cfg(1)) as b:
        inc = b.register(kernels.get("inc", N))
        ta = a.alloc_tensor(N, np.float32, init=x)
        tb = b.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32))
        with hold(a.default_stream) as latch:
            copy = a.copy(tb, ta)  # held on a's stream
            stream = b.default_stream if where == "used stream" else b.stream()
            later = inc(tb, stream=stream)
            await b.stream().record()  # b's device goes on meanwhile
            assert not later.done()
            latch.release()
            await later
        await copy  # done on the device before `later` started; a's pump may not have seen it yet
        # The increment ran on the copied bytes: without the wait, the copy would have
        # overwritten it and tb would be x.
        np.testing.assert_array_equal(await tb.to_host(), x + 1)
        ta.free()
        tb.free()


@pytest.mark.anyio
async def test_stream_waits_on_a_launch_of_another_worker(kernels):
    async with ChipWorker(cfg(0)) as a, ChipWorker(cfg(1)) as b:
        inc_a = a.register(kernels.get("inc", N))
        inc_b = b.register(kernels.get("inc", N))
        ta = a.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32))
        tb = b.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32))
        with hold(a.default_stream) as latch:
            first = inc_a(ta)
            b.default_stream.wait(first)  # a device-side wait of b on a
            second = inc_b(tb)
            await b.stream().record()  # b's device goes on with other streams
            assert not first.done() and not second.done()
            latch.release()
            await second
        await first  # finished on a's device before `second` ran; a's pump may not have seen it yet
        b.default_stream.wait(first)  # a finished launch: nothing to wait for
        b.default_stream.wait(a.default_stream)  # a stream of another worker, too
        b.default_stream.wait(a.default_stream.record())  # and an event
        await b.default_stream
        ta.free()
        tb.free()


@pytest.mark.anyio
async def test_failure_of_the_awaited_launch_fails_the_waiters_dependents(kernels):
    async with ChipWorker(cfg(0)) as a, ChipWorker(cfg(1)) as b:
        fail = a.register(kernels.get("fail", N))
        inc = b.register(kernels.get("inc", N))
        ta = a.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32))
        tb = b.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32))
        s = b.stream()
        with hold(a.default_stream) as latch:
            bad = fail(ta)
            s.wait(bad)
            dependent = inc(tb, stream=s)
            latch.release()
            with pytest.raises(PtoKernelFault):
                await bad
            with pytest.raises(PtoDependencyError, match="another device"):
                await dependent
        # The failure was observed: b's stream runs new work normally.
        await inc(tb, stream=s)
        np.testing.assert_array_equal(await tb.to_host(), np.ones(N, np.float32))
        ta.free()
        tb.free()


@pytest.mark.anyio
async def test_failed_writer_fails_the_peer_copy_as_dependent(kernels):
    async with ChipWorker(cfg(0)) as a, ChipWorker(cfg(1)) as b:
        inc = a.register(kernels.get("inc", N))
        s = a.stream()
        ta = a.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32))
        tb = b.alloc_tensor(N, np.float32)
        await inc(ta, stream=s)  # ta is used on s
        fail_next(s, "PTO_EKERNEL")
        writer = inc(ta, stream=s)
        copy = a.copy(tb, ta)
        with pytest.raises(PtoKernelFault):
            await writer
        with pytest.raises(PtoDependencyError):
            await copy
        ta.free()
        tb.free()


@pytest.mark.anyio
async def test_closing_a_worker_fails_the_waits_of_others_instead_of_hanging(kernels):
    async with ChipWorker(cfg(1)) as b:
        inc = b.register(kernels.get("inc", N))
        tb = b.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32))
        a = ChipWorker(cfg(0))
        await a.open()
        s = b.stream()
        latch_cm = hold(a.default_stream)
        latch_cm.__enter__()
        s.wait(a.default_stream.record())  # held behind a's latch
        dependent = inc(tb, stream=s)
        with pytest.warns(RuntimeWarning, match="dropped"):
            await a.aclose(timeout=0)  # the latch is never released
        with pytest.raises(PtoDependencyError) as info:
            await dependent
        assert isinstance(info.value.__cause__, PtoClosedError)
        assert "closed" in str(info.value)
        latch_cm.__exit__(None, None, None)
        await inc(tb, stream=s)  # b goes on
        np.testing.assert_array_equal(await tb.to_host(), np.ones(N, np.float32))
        tb.free()


ONE_LAUNCH = {"cores": 1, "copy_engines": 1, "device_memory": 64 << 10}  # one add of N at a time


@pytest.mark.anyio
async def test_copy_and_wait_on_work_still_held_on_the_host(kernels):
    # On a, a launch waits for memory in its stream's host FIFO, and what is queued behind
    # it there (the increment of t, the events recorded after it) has not reached the
    # driver yet.  A peer copy of t and a wait of b on such an event must still wait for
    # it on the device, not pass at once.
    async with ChipWorker(RunConfig(device_id=0, **ONE_LAUNCH)) as a, ChipWorker(cfg(1)) as b:
        add = a.register(kernels.get("add", N))
        inc_a = a.register(kernels.get("inc", 64))
        inc_b = b.register(kernels.get("inc", 64))
        t0 = rand(64)
        t = a.alloc_tensor(64, np.float32, init=t0)
        tb = b.alloc_tensor(64, np.float32, init=np.zeros(64, np.float32))
        ub = b.alloc_tensor(64, np.float32, init=np.zeros(64, np.float32))
        probe = b.alloc_tensor(64, np.float32, init=np.zeros(64, np.float32))
        held, waiting = a.stream(), a.stream()
        o1, o2 = np.empty(N, np.float32), np.empty(N, np.float32)
        with hold(held) as latch:
            first = add(rand(), rand(), o1, stream=held)  # its temporaries fill a's memory
            second = add(rand(), rand(), o2, stream=waiting)  # waits for memory on the host
            writer = inc_a(t, stream=waiting)  # behind it, in the FIFO
            event = waiting.record()
            assert not second.submitted_to_ring and not event.query()
            copy = b.copy(tb, t, stream=b.default_stream)  # b pulls t once the writer ran
            b.default_stream.wait(event)
            later = inc_b(ub)
            await inc_b(probe, stream=b.stream())  # b's device goes on meanwhile (on a tensor of its own)
            assert not copy.done() and not later.done()
            latch.release()
            await later
        # b drained copy's record with later's (one stream, before it).  a's records are a's pump's
        # to drain: b's device passed a's event, but a's host may not have looked at its fd yet.
        assert copy.done()
        for x in (first, second, writer, event):
            await x
        np.testing.assert_array_equal(await tb.to_host(), t0 + 1)  # without the wait: t0
        np.testing.assert_array_equal(await ub.to_host(), np.full(64, 1, np.float32))
        np.testing.assert_array_equal(await probe.to_host(), np.full(64, 1, np.float32))
        for x in (t, tb, ub, probe):
            x.free()


@pytest.mark.anyio
async def test_several_workers_from_one_event_loop(kernels):
    workers = [ChipWorker(cfg(i)) for i in range(3)]
    results = {}
    try:
        for w in workers:
            await w.open()

        async def work(i, w):
            add = w.register(kernels.get("add", N))
            x, y = rand(seed=i), rand(seed=10 + i)
            out = np.empty(N, np.float32)
            for _ in range(5):
                await add(x, y, out)
            results[i] = (out, x + y)

        async with anyio.create_task_group() as tg:
            for i, w in enumerate(workers):
                tg.start_soon(work, i, w)
    finally:
        for w in workers:
            await w.aclose()
    assert sorted(results) == [0, 1, 2]
    for out, want in results.values():
        np.testing.assert_array_equal(out, want)


@pytest.mark.anyio
async def test_a_held_wait_on_a_worker_closed_meanwhile_becomes_a_no_op(kernels):
    # b's wait on a's event waits in b's host FIFO (behind a launch waiting for memory) while
    # a closes: when the FIFO reaches it, a's work is over and its driver objects are gone,
    # so the wait must not touch them; what follows it runs.
    async with ChipWorker(RunConfig(device_id=1, **ONE_LAUNCH)) as b:
        add = b.register(kernels.get("add", N))
        inc = b.register(kernels.get("inc", 64))
        t = b.alloc_tensor(64, np.float32, init=np.zeros(64, np.float32))
        a = ChipWorker(cfg(0))
        await a.open()
        event = a.default_stream.record()
        held, waiting = b.stream(), b.stream()
        o1, o2 = np.empty(N, np.float32), np.empty(N, np.float32)
        with hold(held) as latch:
            add(rand(), rand(), o1, stream=held)  # fills b's memory
            second = add(rand(), rand(), o2, stream=waiting)  # waits for memory on the host
            waiting.wait(event)  # behind it, in the FIFO
            later = inc(t, stream=waiting)
            await a.aclose()
            latch.release()
            await later
        await second
        np.testing.assert_array_equal(await t.to_host(), np.ones(64, np.float32))
        t.free()


def test_waits_and_copies_across_platforms_are_refused():
    with ChipWorker(cfg(0)) as a, ChipWorker(cfg(1)) as b:
        event = a.default_stream.record()
        b._platform = "other"  # as a worker of another platform would say
        try:
            with pytest.raises(PtoNotSupported, match="one platform only"):
                b.default_stream.wait(event)
        finally:
            b._platform = a.platform
        b.default_stream.wait(event)
        b.default_stream.sync()


@pytest.mark.anyio
async def test_freeing_the_source_waits_for_a_peer_copy_still_reading_it():
    # b pulls a's tensor on b's stream, held by a latch; a frees the tensor and reuses its
    # block at once.  The free waits (on the device) for the copy, so the copy still reads
    # the original bytes; without that wait it would read the new tensor's zeros.
    x = rand()
    async with ChipWorker(cfg(0)) as a, ChipWorker(cfg(1)) as b:
        src = a.alloc_tensor(N, np.float32, init=x)
        await a.default_stream
        dst = b.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32))
        with hold(b.default_stream) as latch:
            copy = b.copy(dst, src, stream=b.default_stream)
            src.free()
            reuse = a.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32))
            await a.stream().record()
            assert not copy.done()
            latch.release()
            await copy
        np.testing.assert_array_equal(await dst.to_host(), x)
        np.testing.assert_array_equal(await reuse.to_host(), np.zeros(N, np.float32))
        reuse.free()
        dst.free()
