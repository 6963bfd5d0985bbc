"""Data hazards: DeviceTensors ordered across streams for you, and the sanitizer (runtime/_hazards.py).

Each test holds the earlier side of a hazard on a latch, so that a later
access that ran too early would see what it must not (poisoned or
overwritten data), and checks the numbers against numpy on random data.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys
import threading
import time

import numpy as np
import pytest

from pypto_async.errors import PtoDependencyError, PtoError, PtoRaceError
from pypto_async.runtime import ChipWorker, RunConfig
from pypto_async.testing import fail_next, hold

from conftest import SMALL, assert_no_device_memory, here

N = 64


def rand(n: int = N) -> np.ndarray:
    return np.random.default_rng().standard_normal(n).astype(np.float32)


@pytest.fixture(params=["raise", "off"], ids=["general-path", "driver-path"])
def worker(request, config):
    """Both ways automatic ordering runs: beside the sanitizer (the suite's), and on its own.

    Users run the second by default, where the driver orders a launch with the launch itself.
    """
    with ChipWorker(dataclasses.replace(config, sanitize=request.param)) as w:
        yield w
        assert_no_device_memory(w)


# -- the shared rule ------------------------------------------------------------------------------


def test_the_rule_is_the_programs_rule():
    """The pairs the streams are ordered by are the driver's task-edge rule's (its reference model's)."""
    from reliability.task_rule_model import hazard

    from pypto_async.ir import _deps

    assert hazard(True, False, False, True) == "RAW"
    assert hazard(False, True, False, True) == "WAW"
    assert hazard(False, True, True, False) == "WAR"
    assert hazard(True, False, True, False) is None
    modes = [(True, False), (False, True), (True, True)]
    for earlier in modes:
        for later in modes:
            got = _deps.edges([_deps.Task(0, "a", (_deps.Access("t", *earlier),)),
                               _deps.Task(1, "b", (_deps.Access("t", *later),))])
            want = hazard(*later, *earlier)
            assert [e.hazard for e in got] == ([want] if want else []), (earlier, later)


# -- automatic ordering ---------------------------------------------------------------------------------


def _pipeline(w, kernels, steps: int = 4, before_release=None):
    """Three stages on three streams, no explicit waits; buffers reused every step (RAW and WAR).

    s1: a = 2 * x[i];  s2: b = 3 * a;  s3: out[i] = a + b  (= 8 * x[i]).
    The producer's stream is held on a latch while everything is queued.
    """
    scale = w.register(kernels.get("scale", N))
    add = w.register(kernels.get("add", N))
    s1, s2, s3 = w.stream(), w.stream(), w.stream()
    xs = [rand() for _ in range(steps)]
    xt = [w.alloc_tensor(N, np.float32, init=x, stream=s1) for x in xs]
    poison = np.full(N, np.nan, np.float32)
    a = w.alloc_tensor(N, np.float32, init=poison, stream=s1)
    b = w.alloc_tensor(N, np.float32, init=poison, stream=s2)
    outs = [w.alloc_tensor(N, np.float32, init=poison, stream=s3) for _ in range(steps)]
    with hold(s1) as latch:
        for i in range(steps):
            scale.submit(xt[i], 2.0, a, stream=s1)
            scale.submit(a, 3.0, b, stream=s2)
            add.submit(a, b, outs[i], stream=s3)
        if before_release is not None:
            before_release(s1, s2, s3)
        latch.release()
        w.sync(timeout=10)
    got = [o.numpy() for o in outs]
    for t in (*xt, a, b, *outs):
        t.free()
    for s in (s1, s2, s3):
        s.close()
    return xs, got


def test_pipeline_without_waits_is_correct_with_the_producer_held(worker, kernels):
    def still_waiting(s1, s2, s3):
        # Stages 2 and 3 wait on the device for the held producer: nothing of theirs ran.
        assert not s2.query() and not s3.query()

    xs, got = _pipeline(worker, kernels, before_release=still_waiting)
    for x, out in zip(xs, got):
        np.testing.assert_allclose(out, 8 * x, rtol=1e-6)
    assert worker.stats().inferred_waits > 0


def test_pipeline_without_waits_is_wrong_without_auto_deps(open_worker, kernels):
    w = open_worker(auto_deps=False, sanitize="off")

    def let_them_run(s1, s2, s3):
        s2.sync(timeout=10)  # nothing orders them after the held producer: they run now, on poison
        s3.sync(timeout=10)

    xs, got = _pipeline(w, kernels, before_release=let_them_run)
    assert not all(np.allclose(out, 8 * x) for x, out in zip(xs, got))
    assert w.stats().inferred_waits == 0


def test_pipeline_without_waits_is_a_race_for_the_sanitizer(open_worker, kernels):
    w = open_worker(auto_deps=False, sanitize="raise")
    scale = w.register(kernels.get("scale", N))
    s1, s2 = w.stream(), w.stream()
    x = w.alloc_tensor(N, np.float32, init=rand(), stream=s1)
    a = w.alloc_tensor(N, np.float32, stream=s1)
    b = w.alloc_tensor(N, np.float32, stream=s2)
    with hold(s1):
        scale.submit(x, 2.0, a, stream=s1)
        before = w.stats().commands_submitted
        with pytest.raises(PtoRaceError):
            scale.submit(a, 3.0, b, stream=s2)
        assert w.stats().commands_submitted == before  # nothing of the racy call was queued


def test_two_readers_on_two_streams_run_concurrently(worker, kernels):
    copy = worker.register(kernels.get("copy", N))
    s1, s2 = worker.stream(), worker.stream()
    x = rand()
    t = worker.alloc_tensor(N, np.float32, init=x)
    r1 = worker.alloc_tensor(N, np.float32, stream=s1)
    r2 = worker.alloc_tensor(N, np.float32, stream=s2)
    with hold(s1) as latch:
        first = copy.submit(t, r1, stream=s1)
        second = copy.submit(t, r2, stream=s2)
        second.sync(timeout=10)  # completes while the other reader is held: read-read is not ordered
        assert not first.done()
        latch.release()
        first.sync(timeout=10)
    np.testing.assert_array_equal(r1.numpy(), x)
    np.testing.assert_array_equal(r2.numpy(), x)
    for tensor in (t, r1, r2):
        tensor.free()
    s1.close()
    s2.close()


@pytest.mark.parametrize("auto", [True, False])
def test_write_after_read_across_streams(open_worker, kernels, auto):
    w = open_worker(auto_deps=auto, sanitize="off")
    copy = w.register(kernels.get("copy", N))
    scale = w.register(kernels.get("scale", N))
    s1, s2 = w.stream(), w.stream()
    x, y = rand(), rand()
    t = w.alloc_tensor(N, np.float32, init=x)
    ty = w.alloc_tensor(N, np.float32, init=y)
    r = w.alloc_tensor(N, np.float32, stream=s1)
    with hold(s1) as latch:
        reader = copy.submit(t, r, stream=s1)
        writer = scale.submit(ty, 5.0, t, stream=s2)  # overwrites what the held reader is to read
        if not auto:
            writer.sync(timeout=10)  # nothing holds it back
        latch.release()
        w.sync(timeout=10)
    assert reader.exception() is None and writer.exception() is None
    if auto:
        np.testing.assert_array_equal(r.numpy(), x)  # the reader saw the data before the write
    else:
        np.testing.assert_allclose(r.numpy(), 5 * y, rtol=1e-6)  # it ran too early
    np.testing.assert_allclose(t.numpy(), 5 * y, rtol=1e-6)
    for tensor in (t, ty, r):
        tensor.free()


@pytest.mark.parametrize("m", [1, 8])
def test_a_write_after_many_readers_queues_one_wait(open_worker, kernels, m):
    """A write after reads on M held streams: one command for its M edges (none for M = 1), none on the readers.

    Each edge is a fence of the reader's stream (no record queued there),
    and the launch waits for all of them with one wait command, or carries
    a single one itself.  The readers still see the data before the write.
    """
    import contextlib

    w = open_worker(sanitize="off")  # the driver orders the launch alone (the default)
    copy = w.register(kernels.get("copy", N))
    scale = w.register(kernels.get("scale", N))
    readers = [w.stream() for _ in range(m)]
    writer = w.stream()
    x, y = rand(), rand()
    t = w.alloc_tensor(N, np.float32, stream=writer)
    tx = w.alloc_tensor(N, np.float32, init=x, stream=writer)
    ty = w.alloc_tensor(N, np.float32, init=y, stream=writer)
    copy.submit(tx, t, stream=writer)  # t = x; every tensor of the write used on its stream before
    outs = [w.alloc_tensor(N, np.float32, init=np.full(N, np.nan, np.float32), stream=r) for r in readers]  # poisoned
    w.sync()
    with contextlib.ExitStack() as stack:
        latches = [stack.enter_context(hold(r)) for r in readers]
        reads = [copy.submit(t, o, stream=r) for r, o in zip(readers, outs)]
        before = w.stats()
        write = scale.submit(ty, 3.0, t, stream=writer)  # overwrites what the held readers are to read
        after = w.stats()
        assert after.inferred_waits - before.inferred_waits == m
        assert after.commands_submitted - before.commands_submitted == (1 if m == 1 else 2)
        assert not write.done()
        for latch in latches:
            latch.release()
        w.sync(timeout=10)
    assert write.exception() is None and all(r.exception() is None for r in reads)
    for o in outs:
        np.testing.assert_array_equal(o.numpy(), x)  # each reader saw the data before the write
    np.testing.assert_allclose(t.numpy(), 3 * y, rtol=1e-6)
    for tensor in (t, tx, ty, *outs):
        tensor.free()


def test_a_wait_implied_by_an_earlier_one_is_skipped(worker, kernels):
    pair = worker.register(kernels.get("pair", N))
    add = worker.register(kernels.get("add", N))
    s1, s2 = worker.stream(), worker.stream()
    x = rand()
    a = worker.alloc_tensor(N, np.float32, init=x, stream=s1)
    lo = worker.alloc_tensor(N, np.float32, stream=s1)
    hi = worker.alloc_tensor(N, np.float32, stream=s1)
    out = worker.alloc_tensor(N, np.float32, stream=s2)
    out2 = worker.alloc_tensor(N, np.float32, stream=s2)
    with hold(s1) as latch:
        pair.submit(a, lo, hi, stream=s1)  # two outputs, one writer on s1
        before = worker.stats()
        add.submit(lo, hi, out, stream=s2)  # one wait covers both
        mid = worker.stats()
        add.submit(hi, lo, out2, stream=s2)  # the wait queued before implies it again
        after = worker.stats()
        latch.release()
        worker.sync(timeout=10)
    assert mid.inferred_waits - before.inferred_waits == 1
    assert mid.skipped_waits - before.skipped_waits == 1
    assert after.inferred_waits == mid.inferred_waits
    assert after.skipped_waits - mid.skipped_waits == 2
    want = (x - np.float32(1)) + (x + np.float32(1))
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-6)
    np.testing.assert_allclose(out2.numpy(), want, rtol=1e-6)
    for t in (a, lo, hi, out, out2):
        t.free()


def test_an_explicit_wait_is_merged_in(worker, kernels):
    scale = worker.register(kernels.get("scale", N))
    s1, s2 = worker.stream(), worker.stream()
    x = rand()
    src = worker.alloc_tensor(N, np.float32, init=x, stream=s1)
    a = worker.alloc_tensor(N, np.float32, stream=s1)
    b = worker.alloc_tensor(N, np.float32, stream=s2)
    with hold(s1) as latch:
        scale.submit(src, 2.0, a, stream=s1)
        s2.wait(s1)  # yours: the runtime adds none of its own
        before = worker.stats()
        scale.submit(a, 3.0, b, stream=s2)
        after = worker.stats()
        latch.release()
        worker.sync(timeout=10)
    assert after.inferred_waits == before.inferred_waits
    assert after.skipped_waits == before.skipped_waits + 1
    np.testing.assert_allclose(b.numpy(), 6 * x, rtol=1e-6)
    for t in (src, a, b):
        t.free()


def test_a_completed_write_is_no_race(open_worker, kernels):
    # The host saw the write complete (sync mode): the sanitizer takes that as ordering.  Inferred
    # edges do not depend on what the host happened to see: one is added, and finishes at once.
    for auto in (True, False):
        w = open_worker(auto_deps=auto, sanitize="raise")
        scale = w.register(kernels.get("scale", N))
        s1, s2 = w.stream(), w.stream()
        x = rand()
        src = w.alloc_tensor(N, np.float32, init=x, stream=s1)
        a = w.alloc_tensor(N, np.float32, stream=s1)
        b = w.alloc_tensor(N, np.float32, stream=s2)
        scale(src, 2.0, a, stream=s1)  # sync mode: complete when the call returns
        scale(a, 3.0, b, stream=s2)
        assert w.stats().inferred_waits == (1 if auto else 0) and w.stats().races == 0
        np.testing.assert_allclose(b.numpy(), 6 * x, rtol=1e-6)


def test_copies_are_ordered_too(worker, kernels):
    scale = worker.register(kernels.get("scale", N))
    s1, s2 = worker.stream(), worker.stream()
    x, y = rand(), rand()
    src = worker.alloc_tensor(N, np.float32, init=x, stream=s1)
    a = worker.alloc_tensor(N, np.float32, init=np.full(N, np.nan, np.float32), stream=s1)
    b = worker.alloc_tensor(N, np.float32, init=y, stream=s2)
    with hold(s1) as latch:
        scale.submit(src, 2.0, a, stream=s1)
        # A sync-mode copy returns once done, so make it from another thread, queued after the write.
        th = threading.Thread(target=worker.copy, args=(b, a), kwargs={"stream": s2})
        th.start()
        while th.is_alive() and s2.query():  # until its wait and copy are queued on s2
            time.sleep(0.001)
        latch.release()
        th.join()
    np.testing.assert_allclose(b.numpy(stream=s2), 2 * x, rtol=1e-6)
    for t in (src, a, b):
        t.free()


def test_a_failure_propagates_along_an_inferred_edge(worker, kernels):
    scale = worker.register(kernels.get("scale", N))
    s1, s2 = worker.stream(), worker.stream()
    src = worker.alloc_tensor(N, np.float32, init=rand(), stream=s1)
    a = worker.alloc_tensor(N, np.float32, stream=s1)
    b = worker.alloc_tensor(N, np.float32, stream=s2)
    with hold(s1) as latch:
        fail_next(s1)
        writer = scale.submit(src, 2.0, a, stream=s1)
        reader = scale.submit(a, 3.0, b, stream=s2)
        latch.release()
        with pytest.raises(PtoDependencyError):  # the failure s1 carries
            worker.sync(timeout=10)
    first = writer.exception()
    assert first is not None and "injected" in str(first)
    exc = reader.exception()
    assert isinstance(exc, PtoDependencyError)
    assert "injected" in str(exc)  # it names the first failure
    for t in (src, a, b):
        t.free()


def test_an_injected_failure_hits_the_launch_not_its_inferred_wait(worker, kernels):
    # fail_next(s2) names the next command the caller queues on s2: the reader, not the edge
    # the runtime queues in front of it.
    scale = worker.register(kernels.get("scale", N))
    s1, s2 = worker.stream(), worker.stream()
    x = rand()
    a = worker.alloc_tensor(N, np.float32, stream=s1)
    b = worker.alloc_tensor(N, np.float32, stream=s2)
    before = worker.stats().inferred_waits
    writer = scale.submit(x, 2.0, a, stream=s1)
    fail_next(s2)
    reader = scale.submit(a, 3.0, b, stream=s2)
    with pytest.raises(PtoDependencyError):  # the failure s2 carries
        worker.sync(timeout=10)
    assert worker.stats().inferred_waits == before + 1
    assert writer.exception() is None
    exc = reader.exception()
    assert exc is not None and not isinstance(exc, PtoDependencyError) and "injected" in str(exc)
    again = scale.submit(a, 3.0, b, stream=s2)  # s2 runs new work once the failure is seen
    worker.sync(timeout=10)
    assert again.exception() is None
    np.testing.assert_allclose(b.numpy(stream=s2), 6 * x, rtol=1e-6)
    a.free()
    b.free()


def test_a_stream_runs_again_after_a_failure_came_along_an_inferred_edge(worker, kernels):
    scale = worker.register(kernels.get("scale", N))
    s1, s2 = worker.stream(), worker.stream()
    x = rand()
    a = worker.alloc_tensor(N, np.float32, stream=s1)
    b = worker.alloc_tensor(N, np.float32, stream=s2)
    c = worker.alloc_tensor(N, np.float32, init=x, stream=s2)
    with hold(s1) as latch:
        fail_next(s1)
        writer = scale.submit(x, 2.0, a, stream=s1)
        first = scale.submit(a, 3.0, b, stream=s2)
        second = scale.submit(a, 4.0, b, stream=s2)  # implied by the first's edge: no new wait
        latch.release()
        with pytest.raises(PtoDependencyError):  # the failure s1 carries
            worker.sync(timeout=10)
    assert "injected" in str(writer.exception())
    assert isinstance(first.exception(), PtoDependencyError)
    assert isinstance(second.exception(), PtoDependencyError)
    worker.copy(b, np.full(N, np.nan, np.float32), stream=s2)  # poison what the next launch writes
    healthy = scale.submit(c, 5.0, b, stream=s2)
    worker.sync(timeout=10)
    assert healthy.exception() is None
    np.testing.assert_allclose(b.numpy(stream=s2), 5 * x, rtol=1e-6)
    for t in (a, b, c):
        t.free()


@pytest.mark.anyio
async def test_crossing_launches_stay_ordered_when_the_rings_overflow(kernels):
    # Each launch and its inferred edge are one driver call; behind a latch the 4-slot rings
    # fill, so the record, the wait and the launch of later calls wait in the driver's overflow.
    async with ChipWorker(RunConfig(**{**SMALL, "ring_task_window": 4, "cores": 1})) as w:
        inc = w.register(kernels.get("inc", N))
        s1, s2 = w.stream(), w.stream()
        x = rand()
        t = w.alloc_tensor(N, np.float32, init=x, stream=s1)
        await s1
        before = w.stats()
        with hold(s1):
            launches = [inc.submit(t, stream=(s1, s2)[i % 2]) for i in range(40)]
            assert w.stats().backpressure_waits > before.backpressure_waits  # the overflow took some
        for launch in launches:
            await launch.wait()
        assert w.stats().inferred_waits - before.inferred_waits == 39
        np.testing.assert_allclose(await t.to_host(), x + 40, rtol=1e-6)
        t.free()


@pytest.mark.anyio
async def test_ordering_holds_while_the_writer_waits_in_its_fifo(kernels):
    # The writer waits on the host for device memory (its stream's FIFO); the reader on another
    # stream is queued after it, while it still waits there, and must still see its result. An
    # async worker, so that queuing the writer does not block until it enters its ring (a sync
    # worker's submit would: it returned only once the latch had expired, the memory came back
    # and the writer had gone to the device, so the reader was never queued behind a waiting one).
    async with ChipWorker(RunConfig(**{**SMALL, "device_memory": 1 << 20})) as w:
        scale = w.register(kernels.get("scale", N))
        s0, s1, s2 = w.stream(), w.stream(), w.stream()
        x = rand()
        a = w.alloc_tensor(N, np.float32, init=np.full(N, np.nan, np.float32), stream=s1)
        b = w.alloc_tensor(N, np.float32, init=np.full(N, np.nan, np.float32), stream=s2)
        await w.wait()  # the initial copies are done: only the hog takes memory from here
        free = w.stats().memory_capacity - w.stats().memory_reserved
        hog = w.alloc_tensor(free // 4, np.float32, stream=s0)  # every byte left
        with hold(s0) as latch:
            hog.free()  # queued behind the latch: the memory comes back once it is released
            writer = scale.submit(x, 2.0, a, stream=s1)  # a host array: its temporary must wait
            assert w.stats().memory_waits == 1 and not writer.submitted_to_ring and not writer.done()
            reader = scale.submit(a, 3.0, b, stream=s2)  # queued while the writer waits on the host
            assert not writer.submitted_to_ring and not reader.done()
            latch.release()
            await writer
            await reader
        np.testing.assert_allclose(await b.to_host(), 6 * x, rtol=1e-6)
        a.free()
        b.free()


# -- opt-outs --------------------------------------------------------------------------------------------


def _racy_read(w, kernels, *, manual_tensor: bool = False, region: bool = False):
    """A write held on s1, a read of it on s2 with no explicit wait; returns (inferred waits, result ok)."""
    scale = w.register(kernels.get("scale", N))
    s1, s2 = w.stream(), w.stream()
    x = rand()
    src = w.alloc_tensor(N, np.float32, init=x, stream=s1)
    a = w.alloc_tensor(N, np.float32, init=np.full(N, np.nan, np.float32), stream=s1,
                       manual_deps=manual_tensor)
    b = w.alloc_tensor(N, np.float32, stream=s2)
    before = w.stats().inferred_waits
    with hold(s1) as latch:
        scale.submit(src, 2.0, a, stream=s1)
        if region:
            with w.manual_deps():
                reader = scale.submit(a, 3.0, b, stream=s2)
        else:
            reader = scale.submit(a, 3.0, b, stream=s2)
        if w.stats().inferred_waits == before:
            reader.sync(timeout=10)  # not ordered: it runs now, on the poison
        latch.release()
        w.sync(timeout=10)
    inferred = w.stats().inferred_waits - before
    ok = np.allclose(b.numpy(), 6 * x)
    for t in (src, a, b):
        t.free()
    return inferred, ok


def test_auto_ordering_is_on_by_default(open_worker, kernels):
    assert _racy_read(open_worker(), kernels) == (1, True)


@pytest.mark.parametrize("how", ["tensor", "region", "worker"])
def test_each_opt_out_switches_it_off(open_worker, kernels, how):
    w = open_worker(sanitize="off", **({"auto_deps": False} if how == "worker" else {}))
    inferred, ok = _racy_read(w, kernels, manual_tensor=how == "tensor", region=how == "region")
    assert (inferred, ok) == (0, False)


def test_the_manual_region_is_task_local(open_worker, kernels):
    w = open_worker(sanitize="off")
    seen = {}
    with w.manual_deps():

        def other():  # another thread: its own context, outside the region
            seen["other"] = _racy_read(w, kernels)

        th = threading.Thread(target=other)
        th.start()
        th.join()
    assert seen["other"] == (1, True)
    assert _racy_read(w, kernels) == (1, True)  # the region ended


def test_manual_region_in_tasks():
    async def main():
        w = ChipWorker(RunConfig(**SMALL))
        async with w:
            inside = asyncio.Event()
            done = asyncio.Event()

            async def in_region():
                with w.manual_deps():
                    inside.set()
                    await done.wait()

            async def outside():
                await inside.wait()
                from pypto_async.runtime._hazards import _manual

                try:
                    return w in _manual.get()
                finally:
                    done.set()

            _, seen = await asyncio.gather(in_region(), outside())
            return seen

    assert asyncio.run(main()) is False


# -- the sanitizer ---------------------------------------------------------------------------------------


def test_the_sanitizer_names_both_sides(open_worker, kernels):
    w = open_worker(auto_deps=False, sanitize="raise")
    scale = w.register(kernels.get("scale", N))
    s1, s2 = w.stream(), w.stream()
    src = w.alloc_tensor(N, np.float32, init=rand(), stream=s1)
    a = w.alloc_tensor(N, np.float32, stream=s1)
    b = w.alloc_tensor(N, np.float32, stream=s2)
    with hold(s1):
        scale.submit(src, 2.0, a, stream=s1); first_line = here()  # noqa: E702
        with pytest.raises(PtoRaceError) as info:
            second_line = here() + 1
            scale.submit(a, 3.0, b, stream=s2)
    msg = str(info.value)
    assert isinstance(info.value, PtoError)
    assert f"test_hazards.py:{first_line}" in msg and f"test_hazards.py:{second_line}" in msg
    assert "launch of 'scale'" in msg and "'out', Out" in msg and "'x', In" in msg
    assert f"stream {s1.id}" in msg and f"stream {s2.id}" in msg
    assert f"test_hazards.py:{first_line}" in info.value.first
    assert w.stats().races == 1
    w.sync(timeout=10)


def test_the_sanitizer_is_silent_on_an_ordered_program(open_worker, kernels):
    w = open_worker(auto_deps=False, sanitize="raise")
    scale = w.register(kernels.get("scale", N))
    s1, s2 = w.stream(), w.stream()
    x = rand()
    src = w.alloc_tensor(N, np.float32, init=x, stream=s1)
    a = w.alloc_tensor(N, np.float32, stream=s1)
    b = w.alloc_tensor(N, np.float32, stream=s2)
    with hold(s1) as latch:
        first = scale.submit(src, 2.0, a, stream=s1)
        s2.wait(first)
        scale.submit(a, 3.0, b, stream=s2)
        s1.wait(s2)  # the next write of a waits for that read
        scale.submit(src, 4.0, a, stream=s1)
        latch.release()
        w.sync(timeout=10)
    np.testing.assert_allclose(b.numpy(), 6 * x, rtol=1e-6)
    np.testing.assert_allclose(a.numpy(), 4 * x, rtol=1e-6)
    assert w.stats().races == 0


def test_the_sanitizer_catches_a_write_after_read(open_worker, kernels):
    w = open_worker(auto_deps=False, sanitize="raise")
    copy = w.register(kernels.get("copy", N))
    scale = w.register(kernels.get("scale", N))
    s1, s2 = w.stream(), w.stream()
    t = w.alloc_tensor(N, np.float32, init=rand())
    y = w.alloc_tensor(N, np.float32, init=rand(), stream=s2)
    r = w.alloc_tensor(N, np.float32, stream=s1)
    w.sync()
    with hold(s1):
        copy.submit(t, r, stream=s1)
        with pytest.raises(PtoRaceError, match="after the read by launch of 'copy' \\('src', In\\)"):
            scale.submit(y, 2.0, t, stream=s2)
    w.sync(timeout=10)


def test_the_sanitizer_checks_manual_tensors_only_when_auto_is_on(open_worker, kernels):
    w = open_worker(sanitize="raise")
    scale = w.register(kernels.get("scale", N))
    s1, s2 = w.stream(), w.stream()
    src = w.alloc_tensor(N, np.float32, init=rand(), stream=s1)
    auto = w.alloc_tensor(N, np.float32, stream=s1)
    manual = w.alloc_tensor(N, np.float32, stream=s1, manual_deps=True)
    b = w.alloc_tensor(N, np.float32, stream=s2)
    with hold(s1):
        scale.submit(src, 2.0, auto, stream=s1)
        scale.submit(src, 2.0, manual, stream=s1)
        with pytest.raises(PtoRaceError):
            scale.submit(manual, 3.0, b, stream=s2)
        with w.manual_deps(), pytest.raises(PtoRaceError):
            scale.submit(auto, 3.0, b, stream=s2)  # inside the region, yours to order
        before = w.stats().inferred_waits
        scale.submit(auto, 3.0, b, stream=s2)  # outside it, ordered for you: no race
        assert w.stats().inferred_waits == before + 1
        scale.submit(manual, 3.0, b, stream=s2)  # ... which orders this read too
    w.sync(timeout=10)
    assert w.stats().races == 2


def test_the_sanitizer_warns(open_worker, kernels):
    w = open_worker(auto_deps=False, sanitize="warn")
    scale = w.register(kernels.get("scale", N))
    s1, s2 = w.stream(), w.stream()
    src = w.alloc_tensor(N, np.float32, init=rand(), stream=s1)
    a = w.alloc_tensor(N, np.float32, stream=s1)
    b = w.alloc_tensor(N, np.float32, stream=s2)
    with hold(s1):
        scale.submit(src, 2.0, a, stream=s1)
        with pytest.warns(RuntimeWarning, match="data race"):
            scale.submit(a, 3.0, b, stream=s2)  # queued anyway
    w.sync(timeout=10)
    assert w.stats().races == 1


def test_the_sanitizer_gives_full_stacks_on_request(open_worker, kernels):
    w = open_worker(auto_deps=False, sanitize="raise", sanitize_stacks=True)
    scale = w.register(kernels.get("scale", N))
    s1, s2 = w.stream(), w.stream()
    src = w.alloc_tensor(N, np.float32, init=rand(), stream=s1)
    a = w.alloc_tensor(N, np.float32, stream=s1)
    b = w.alloc_tensor(N, np.float32, stream=s2)
    with hold(s1):
        scale.submit(src, 2.0, a, stream=s1)
        with pytest.raises(PtoRaceError) as info:
            scale.submit(a, 3.0, b, stream=s2)
    assert info.value.first.count("in test_the_sanitizer_gives_full_stacks_on_request") == 1
    assert "File " in info.value.second
    w.sync(timeout=10)


def test_the_sanitizer_catches_a_host_input_handed_out_as_an_output(open_worker, kernels):
    w = open_worker(sanitize="raise")
    scale = w.register(kernels.get("scale", N))
    s1, s2 = w.stream(), w.stream()
    x = rand()
    host = x.copy()
    t = w.alloc_tensor(N, np.float32, init=rand(), stream=s2)
    w.sync()
    with hold(s1):
        scale.submit(host, 2.0, t, stream=s1)  # reads `host` once the latch lets it
        with pytest.raises(PtoRaceError, match="host array") as info:
            scale.submit(t, 3.0, host, stream=s2)  # ... and this would write it first
        assert "'x', In" in str(info.value) and "'out', Out" in str(info.value)
    w.sync(timeout=10)
    np.testing.assert_allclose(t.numpy(), 2 * x, rtol=1e-6)
    t.free()


def test_the_environment_variable_turns_the_sanitizer_on(monkeypatch, kernels):
    monkeypatch.setenv("PYPTO_ASYNC_SANITIZE", "warn")
    with ChipWorker(RunConfig(**SMALL, auto_deps=False)) as w:
        assert w._hazards.mode == "warn"
    monkeypatch.setenv("PYPTO_ASYNC_SANITIZE", "loud")
    with pytest.raises(PtoError, match="PYPTO_ASYNC_SANITIZE"):
        ChipWorker(RunConfig(**SMALL))


def test_bad_config_is_refused():
    with pytest.raises(PtoError, match="sanitize"):
        RunConfig(sanitize="yes")
    with pytest.raises(PtoError, match="auto_deps"):
        RunConfig(auto_deps=1)


def test_manual_deps_must_be_a_bool(worker):
    with pytest.raises(PtoError, match="manual_deps"):
        worker.alloc_tensor(N, np.float32, manual_deps="yes")


def test_raw_copies_are_ordered_as_the_tensor_they_touch(worker, kernels):
    scale = worker.register(kernels.get("scale", N))
    s1, s2 = worker.stream(), worker.stream()
    x = rand()
    src = worker.alloc_tensor(N, np.float32, init=x, stream=s1)
    a = worker.alloc_tensor(N, np.float32, init=np.full(N, np.nan, np.float32), stream=s1)
    out = np.full(N, np.nan, np.float32)
    with hold(s1) as latch:
        scale.submit(src, 2.0, a, stream=s1)
        # PyPTO's blocking copy by address, from another thread, queued after the write.
        th = threading.Thread(target=worker.copy_from, args=(out, a.data_ptr, a.nbytes), kwargs={"stream": s2})
        th.start()
        while th.is_alive() and s2.query():  # until its wait and copy are queued on s2
            time.sleep(0.001)
        latch.release()
        th.join()
    np.testing.assert_allclose(out, 2 * x, rtol=1e-6)
    src.free()
    a.free()


def test_the_sanitizer_catches_a_use_of_memory_freed_on_another_stream(open_worker):
    w = open_worker(sanitize="raise")
    s1, s2 = w.stream(), w.stream()
    t = w.alloc_tensor(N, np.float32, init=rand(), stream=s1)
    w.sync()
    ptr, nbytes = t.data_ptr, t.nbytes
    out = np.empty(N, np.float32)
    with hold(s1):
        t.free(); free_line = here()  # noqa: E702
        with pytest.raises(PtoRaceError, match="freed device memory") as info:
            w.copy_from(out, ptr, nbytes, stream=s2)
    assert f"free_tensor() on stream {s1.id} at " in str(info.value)
    assert f"test_hazards.py:{free_line}" in str(info.value)
    w.sync(timeout=10)


@pytest.mark.parametrize("sanitize", ["raise", "off"], ids=["general-path", "compiled-path"])
def test_inferred_waits_are_marked_in_the_trace(tmp_path, open_worker, kernels, sanitize):
    import json

    from pypto_async.runtime._trace import Trace

    worker = open_worker(sanitize=sanitize)  # off: the edge goes in with its launch, in one call
    scale = worker.register(kernels.get("scale", N))
    s1, s2 = worker.stream(), worker.stream()
    src = worker.alloc_tensor(N, np.float32, init=rand(), stream=s1)
    a = worker.alloc_tensor(N, np.float32, stream=s1)
    b = worker.alloc_tensor(N, np.float32, stream=s2)
    c = worker.alloc_tensor(N, np.float32, stream=s1)
    worker.sync()
    with worker.trace(tmp_path / "t.json") as tr:
        scale(src, 2.0, a, stream=s1)
        scale(a, 3.0, b, stream=s2)  # an inferred wait on s1
        s1.wait(s2)  # an explicit one
        scale(src, 4.0, c, stream=s1)
    doc = json.loads(tr.path.read_text())
    flows = [e for e in doc["traceEvents"] if e["ph"] in ("s", "f")]
    assert sorted({e["cat"] for e in flows}) == ["event", "inferred"]
    inferred = [e for e in flows if e["cat"] == "inferred"]
    assert len(inferred) == 2 and all(e["name"].startswith("inferred wait") for e in inferred)
    assert {e["tid"] for e in inferred if e["ph"] == "f"} == {1 + s2.id}
    assert len(tr.trace.inferred_waits) == 1
    assert Trace.from_chrome(doc).inferred_waits == tr.trace.inferred_waits
    for t in (src, a, b, c):
        t.free()



@pytest.mark.parametrize("swimlane", [False, True], ids=["window", "worker-long"])
def test_a_trace_marks_the_inferred_waits_of_launches_the_fused_path_would_take(tmp_path, kernels, swimlane):
    # Tensors both streams used before (no first uses): outside a trace such launches go to the
    # driver with their edges in one call.  While a trace tags graph replays (a window open, or a
    # worker-long trace), they are ordered the general way, whose inferred waits the trace marks;
    # the fused path opens again when the window closes (never under a worker-long trace).
    import json

    cfg = RunConfig(**SMALL, sanitize="off", enable_chip_swimlane=swimlane, save_kernels_dir=str(tmp_path))
    with ChipWorker(cfg) as w:
        hz = w._hazards
        scale = w.register(kernels.get("scale", N))
        s1, s2 = w.stream(), w.stream()
        x = rand()
        src = w.alloc_tensor(N, np.float32, init=x, stream=s1)
        a = w.alloc_tensor(N, np.float32, stream=s1)
        b = w.alloc_tensor(N, np.float32, stream=s2)
        scale(src, 1.0, a, stream=s1)
        scale(a, 1.0, b, stream=s2)  # a's first use on s2
        scale(b, 1.0, a, stream=s1)  # b's first use on s1
        w.sync()
        assert (hz.launch is None) == swimlane
        with w.trace(tmp_path / "t.json") as tr:
            assert hz.launch is None
            scale(src, 2.0, a, stream=s1)
            scale(a, 3.0, b, stream=s2)  # read after write: an inferred wait on s1
        assert (hz.launch is None) == swimlane
        doc = json.loads(tr.path.read_text())
        inferred = [e for e in doc["traceEvents"] if e["ph"] in ("s", "f") and e["cat"] == "inferred"]
        assert len(inferred) == 2 and {e["tid"] for e in inferred if e["ph"] == "f"} == {1 + s2.id}
        np.testing.assert_allclose(b.numpy(), 6 * x, rtol=1e-6)
        for t in (src, a, b):
            t.free()

def test_the_readme_pipeline(kernels):
    # docs/hazards.md: copies in, a kernel, copies out, on three streams, no waits; the
    # loading stream is held while every step is queued.
    async def main():
        steps = 4
        batches = [rand() for _ in range(steps)]
        results = [np.full(N, np.nan, np.float32) for _ in range(steps)]
        async with ChipWorker(RunConfig(**SMALL)) as w:
            handle = w.register(kernels.get("add", N))
            weight_host = rand()
            weight = w.alloc_tensor(N, np.float32, init=weight_host)
            load, compute, store = w.stream(), w.stream(), w.stream()
            x_dev = w.alloc_tensor(N, np.float32, stream=load)
            y_dev = w.alloc_tensor(N, np.float32, stream=compute)
            with hold(load) as latch:
                for i, batch in enumerate(batches):
                    w.copy(x_dev, batch, stream=load)
                    handle(x_dev, weight, y_dev, stream=compute)
                    w.copy(results[i], y_dev, stream=store)
                assert not store.query()
                latch.release()
                await store
            for t in (weight, x_dev, y_dev):
                t.free()
            return batches, weight_host, results

    batches, weight, results = asyncio.run(main())
    for batch, out in zip(batches, results):
        np.testing.assert_array_equal(out, batch + weight)


@pytest.mark.slow
def test_bench_hazards_script_runs(tmp_path):
    # A smoke run of benchmarks/bench_hazards.py (figures, not timing assertions).
    import json
    import os
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    # Its own environment: not the suite's sanitizer setting (pto_sanitize), which would put every
    # worker the script opens without a sanitize= of its own on the sanitizer's path.
    from pypto_async.runtime._hazards import ENV_SANITIZE

    env = {k: v for k, v in os.environ.items() if k != ENV_SANITIZE}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, str(root / "benchmarks" / "bench_hazards.py"), "--quick", "--json", "-"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout)
    assert len(results["rows"]) == 14 and all(row["figure"] is not None for row in results["rows"])
    lo, hi = results["single_cpu_added_ci_us"]  # the one-stream headline: paired rounds, their interval
    assert lo <= results["single_cpu_added_us"] <= hi and results["single_rounds"] == 40
    assert results["inferred_waits"] > 0 and all(v > 0 for v in results["median_us"].values())


def test_the_suite_runs_with_the_sanitizer_raising():
    # pyproject.toml sets pto_sanitize = "raise"; the plugin hands it to every worker opened.
    from pypto_async.runtime._hazards import ENV_SANITIZE

    assert os.environ.get(ENV_SANITIZE) in ("raise", "warn")
    with ChipWorker(RunConfig(**SMALL, auto_deps=False)) as w:
        assert w._hazards is not None and w._hazards.mode == os.environ[ENV_SANITIZE]


@pytest.mark.pto_races
def test_the_pto_races_marker_turns_the_sanitizer_off(kernels):
    with ChipWorker(RunConfig(**SMALL, auto_deps=False)) as w:
        assert w._hazards is None  # nothing to track: no ordering, no checks
        scale = w.register(kernels.get("scale", N))
        s1, s2 = w.stream(), w.stream()
        src = w.alloc_tensor(N, np.float32, init=rand(), stream=s1)
        a = w.alloc_tensor(N, np.float32, stream=s1)
        b = w.alloc_tensor(N, np.float32, stream=s2)
        with hold(s1):
            scale.submit(src, 2.0, a, stream=s1)
            scale.submit(a, 3.0, b, stream=s2)  # a race, on purpose: not refused
        w.sync(timeout=10)


# -- long-lived tensors, short-lived streams --------------------------------------------------------


def _bounded_records(w, t, most: int) -> None:
    """`t`'s records and every live stream's clock stay bounded, however many streams came and went."""
    assert len(t._streams) <= most, t._streams
    assert len(t._readers or ()) <= most, t._readers  # the sanitizer's records
    hz = w._hazards
    live = w._streams
    kept = {*live.values(), *t._streams, *(t._readers or ()), t._writer and t._writer[0],
            *hz.closed_streams.values()} - {None}
    most_clock = 32  # a few live streams here at any time: two entries each and a slack of 16 gone ones
    assert len(hz.closed_streams) <= 2 * 32 + 1, len(hz.closed_streams)
    for s in kept:  # the live streams, and the closed ones the tensor's records still name
        readers, clock = hz.sizes(t, s)  # the driver's records
        assert readers <= most and clock <= most_clock, (s, readers, clock)
        # (The sanitizer keeps the ordering-only marks of closed streams still in flight.)
        assert len(s._oclock) <= (most_clock if not w._hazards.sanitizing else most_clock + most), (s, s._oclock)


def test_a_resident_tensor_keeps_bounded_records_of_many_short_lived_streams(worker, kernels):
    """2,000 streams, each opened, reading (and some writing) a resident tensor, closed and dropped.

    Before the fix the tensor kept every stream that ever used it, with their events and
    clocks, and a stream's clock grew with every stream it had waited for (through others):
    about 3.7 KiB per stream, for ever.  Now closed streams fold into the worker's fold point.
    Ordering still holds, through that point too: a write on a new stream after a closed,
    still-held reader waits for its read, and a read after a held writer sees its write.
    """
    w = worker
    scale = w.register(kernels.get("scale", N))
    inc = w.register(kernels.get("inc", N))
    x = rand()
    resident = w.alloc_tensor(N, np.float32, init=x)
    writes = 0
    most = 8 if not w._hazards.sanitizing else 24  # the sanitizer keeps reads still in flight
    for i in range(2000):
        s = w.stream()
        if i % 10 == 3:
            inc.submit(resident, stream=s)  # a write: the next stream's read waits for it
            writes += 1
        out = w.alloc_tensor(N, np.float32, init=np.full(N, np.nan, np.float32), stream=s)
        scale.submit(resident, 2.0, out, stream=s)
        if i % 16 == 0:
            np.testing.assert_allclose(out.numpy(stream=s), 2 * (x + writes), rtol=1e-6)
        out.free()
        s.close()
        del s, out
        if i % 100 == 99:
            _bounded_records(w, resident, most)
    w.sync(timeout=30)
    _bounded_records(w, resident, most)

    # A reader held on a latch, its stream closed, then folded away by later readers: a
    # write on a new stream must still wait for that read.
    poison = np.full(N, np.nan, np.float32)
    before = w.alloc_tensor(N, np.float32, init=poison)
    held = w.stream()
    with hold(held) as latch:
        scale.submit(resident, 1.0, before, stream=held)
        held.close()
        for _ in range(2 * most):
            s = w.stream()
            scale.submit(resident, 0.0, w.alloc_tensor(N, np.float32, stream=s), stream=s)
            s.close()
        writer = w.stream()
        inc.submit(resident, stream=writer)
        latch.release()
    np.testing.assert_allclose(before.numpy(), x + writes, rtol=1e-6)
    # A writer held on a latch: a read on a new stream sees its write.
    after = w.alloc_tensor(N, np.float32, init=poison)
    held_writer = w.stream()
    with hold(held_writer) as latch:
        inc.submit(resident, stream=held_writer)
        reader = w.stream()
        scale.submit(resident, 1.0, after, stream=reader)
        held_writer.close()
        latch.release()
    np.testing.assert_allclose(after.numpy(), x + writes + 2, rtol=1e-6)
    _bounded_records(w, resident, most)
    for t in (resident, before, after):
        t.free()
    for s in (writer, reader):
        s.close()


def test_a_manual_region_in_another_thread_leaves_this_threads_launches_ordered(kernels):
    # A region open on the worker (any thread or task) closes the fused launch path for all of
    # them; launches outside the region are then ordered on the general path, and the fused
    # path opens again when the region closes.
    with ChipWorker(RunConfig(**SMALL, sanitize="off")) as w:
        hz = w._hazards
        noop = w.register(kernels.get("noop", N))
        t = w.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32))
        s1, s2 = w.stream(), w.stream()
        noop.submit(t, stream=s1)
        noop.submit(t, stream=s2)  # first uses: joins and edges
        assert hz.launch is hz.table
        entered, leave = threading.Event(), threading.Event()

        def region():
            with w.manual_deps():
                entered.set()
                leave.wait(10)

        th = threading.Thread(target=region)
        th.start()
        try:
            assert entered.wait(10)
            assert hz.launch is None
            before = w.stats().inferred_waits
            noop.submit(t, stream=s1)  # write after write on s2: still ordered here
            noop.submit(t, stream=s2)
            assert w.stats().inferred_waits - before == 2
        finally:
            leave.set()
            th.join(10)
        assert hz.launch is hz.table
        before = w.stats().inferred_waits
        noop.submit(t, stream=s1)
        assert w.stats().inferred_waits - before == 1
        w.sync()
        t.free()
