"""Stream.wait on a launch, a stream or an event of the same device (runtime/_stream.py).

Such a wait is a quiet fence of the source stream's tail (a launch or a
stream) or a quiet wait for the event: one command on the waiting stream,
nothing queued on the source, and a completion record only if the wait
fails.  These tests hold the source stream on a latch, so that a later
access the wait failed to order would read poisoned data, and check the
numbers against numpy on random data; failures of the waited work must
reach the waiter's later work as before; and the driver's counters give
the commands and records one wait costs.  Each runs where nothing infers
edges (``auto_deps=False``), where the hazard table does but the tensors
are manual, and beside the sanitizer (which raises if it does not see the
wait).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import SMALL, assert_no_device_memory
from pypto_async.errors import PtoDependencyError, PtoError
from pypto_async.runtime import ChipWorker, RunConfig
from pypto_async.testing import fail_next, hold

N = 64
POISON = np.full(N, np.nan, np.float32)
WHATS = ("launch", "stream", "event")
ORDERINGS = {
    "no-table": {"auto_deps": False, "sanitize": "off"},  # nothing tracked: no hazard table
    "manual-tensors": {"auto_deps": True, "sanitize": "off"},  # the table's path, tensors ordered by hand
    "sanitizer": {"auto_deps": False, "sanitize": "raise"},  # a wait it did not see is a race
}


def rand(n: int = N) -> np.ndarray:
    return np.random.default_rng().standard_normal(n).astype(np.float32)


@pytest.fixture(params=list(ORDERINGS))
def ordering(request) -> str:
    return request.param


def _config(ordering: str) -> RunConfig:
    return RunConfig(**{**SMALL, **ORDERINGS[ordering]})


def _target(what: str, writer, s1):
    """What the waiter waits for: the writer, its stream, or an event recorded right after it."""
    return {"launch": writer, "stream": s1}.get(what) or s1.record()


class _Setup:
    """Two streams; x on s1, a (written on s1) and b (written on s2) poisoned; c on s2."""

    def __init__(self, w, kernels, ordering: str):
        manual = ordering == "manual-tensors"
        self.w = w
        self.scale = w.register(kernels.get("scale", N))
        self.s1, self.s2 = w.stream(), w.stream()
        self.x = rand()
        self.src = w.alloc_tensor(N, np.float32, init=self.x, stream=self.s1, manual_deps=manual)
        self.a = w.alloc_tensor(N, np.float32, init=POISON, stream=self.s1, manual_deps=manual)
        self.b = w.alloc_tensor(N, np.float32, init=POISON, stream=self.s2, manual_deps=manual)
        self.c = w.alloc_tensor(N, np.float32, init=self.x, stream=self.s2, manual_deps=manual)

    def free(self) -> None:
        for t in (self.src, self.a, self.b, self.c):
            t.free()


# -- ordering ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("what", WHATS)
def test_a_read_after_an_explicit_wait_sees_the_held_write(ordering, what, kernels):
    with ChipWorker(_config(ordering)) as w:
        t = _Setup(w, kernels, ordering)
        w.sync()
        with hold(t.s1) as latch:
            writer = t.scale.submit(t.src, 2.0, t.a, stream=t.s1)
            t.s2.wait(_target(what, writer, t.s1))
            reader = t.scale.submit(t.a, 3.0, t.b, stream=t.s2)
            w.stream().record().sync(timeout=10)  # the device went on with another stream
            assert not reader.done()
            latch.release()
            w.sync(timeout=10)
        assert writer.exception() is None and reader.exception() is None
        np.testing.assert_allclose(t.b.numpy(stream=t.s2), 6 * t.x, rtol=1e-6)
        assert w.stats().races == 0 and w.stats().inferred_waits == 0
        t.free()
        assert_no_device_memory(w)


@pytest.mark.anyio
@pytest.mark.parametrize("what", WHATS)
async def test_an_awaited_pipeline_of_explicit_waits_is_ordered(ordering, what, kernels):
    # A write-read-write chain over two streams, each step ordered only by Stream.wait.
    async with ChipWorker(_config(ordering)) as w:
        t = _Setup(w, kernels, ordering)
        await w.wait()
        with hold(t.s1) as latch:
            writer = t.scale(t.src, 2.0, t.a, stream=t.s1)
            t.s2.wait(_target(what, writer, t.s1))
            reader = t.scale(t.a, 3.0, t.b, stream=t.s2)
            t.s1.wait(_target(what, reader, t.s2))  # WAR: s1 overwrites a only after the read
            again = t.scale(t.src, 5.0, t.a, stream=t.s1)
            latch.release()
            await reader
            await again
        np.testing.assert_allclose(await t.b.to_host(stream=t.s2), 6 * t.x, rtol=1e-6)
        np.testing.assert_allclose(await t.a.to_host(stream=t.s1), 5 * t.x, rtol=1e-6)
        t.free()


# -- failures ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("what", WHATS)
def test_a_failure_of_the_waited_work_fails_the_waiters_later_work(ordering, what, kernels):
    with ChipWorker(_config(ordering)) as w:
        t = _Setup(w, kernels, ordering)
        w.sync()
        with hold(t.s1) as latch:
            fail_next(t.s1)
            writer = t.scale.submit(t.src, 2.0, t.a, stream=t.s1)
            t.s2.wait(_target(what, writer, t.s1))
            reader = t.scale.submit(t.a, 3.0, t.b, stream=t.s2)
            latch.release()
            with pytest.raises(PtoDependencyError):
                w.sync(timeout=10)
        exc = reader.exception()  # delivered: s2's failure, and s1's it came from through the wait
        assert isinstance(exc, PtoDependencyError) and "injected" in str(exc)
        assert np.isnan(t.b.numpy(stream=t.s2)).all()  # the poisoned output was never written
        healthy2 = t.scale.submit(t.c, 5.0, t.b, stream=t.s2)
        healthy1 = t.scale.submit(t.src, 4.0, t.a, stream=t.s1)
        w.sync(timeout=10)
        assert healthy1.exception() is None and healthy2.exception() is None
        np.testing.assert_allclose(t.b.numpy(stream=t.s2), 5 * t.x, rtol=1e-6)
        np.testing.assert_allclose(t.a.numpy(stream=t.s1), 4 * t.x, rtol=1e-6)
        assert "injected" in str(writer.exception())
        t.free()


@pytest.mark.parametrize("what", WHATS)
def test_a_waiter_with_no_later_work_carries_the_failure_to_a_worker_sync(ordering, what, kernels):
    with ChipWorker(_config(ordering)) as w:
        t = _Setup(w, kernels, ordering)
        w.sync()
        with hold(t.s1) as latch:
            fail_next(t.s1)
            writer = t.scale.submit(t.src, 2.0, t.a, stream=t.s1)
            t.s2.wait(_target(what, writer, t.s1))
            latch.release()
        with pytest.raises(PtoDependencyError):
            t.s1.sync(timeout=10)  # delivers s1's failure only
        with pytest.raises(PtoDependencyError):
            w.sync(timeout=10)  # s2's wait failed: it carries the failure until delivered
        w.sync(timeout=10)
        assert "injected" in str(writer.exception())
        t.free()


@pytest.mark.anyio
async def test_an_awaited_failure_through_an_explicit_wait(kernels):
    async with ChipWorker(RunConfig(**SMALL)) as w:
        t = _Setup(w, kernels, "manual-tensors")
        await w.wait()
        with hold(t.s1) as latch:
            fail_next(t.s1)
            writer = t.scale(t.src, 2.0, t.a, stream=t.s1)
            t.s2.wait(writer)
            reader = t.scale(t.a, 3.0, t.b, stream=t.s2)
            latch.release()
            with pytest.raises(PtoDependencyError, match="injected"):
                await reader
        with pytest.raises(PtoError, match="injected"):
            await writer
        await t.scale(t.c, 5.0, t.b, stream=t.s2)  # delivered: s2 runs new work
        await t.scale(t.src, 4.0, t.a, stream=t.s1)  # and s1, whose failure came along the wait
        np.testing.assert_allclose(await t.b.to_host(stream=t.s2), 5 * t.x, rtol=1e-6)
        t.free()


# -- the mechanism ----------------------------------------------------------------------------------


@pytest.mark.parametrize("what", WHATS)
def test_an_explicit_wait_is_one_command_and_no_completion_record(ordering, what, kernels):
    # The same calls with and without the wait: the wait adds one command (no record queued on
    # s1) and no completion record, and is not counted as an inferred wait.
    with ChipWorker(_config(ordering)) as w:
        t = _Setup(w, kernels, ordering)
        t.scale.submit(t.c, 1.0, t.b, stream=t.s2)
        w.sync()

        def calls(wait: bool) -> tuple[int, int, int, int]:
            before = w.stats()
            with hold(t.s1) as latch:  # the wait is queued while the writer has not run
                writer = t.scale.submit(t.src, 2.0, t.a, stream=t.s1)
                target = _target(what, writer, t.s1)
                if wait:
                    t.s2.wait(target)
                t.scale.submit(t.c, 3.0, t.b, stream=t.s2)
                latch.release()
                w.sync(timeout=10)
            after = w.stats()
            return (after.commands_submitted - before.commands_submitted, after.completions - before.completions,
                    after.inferred_waits - before.inferred_waits, after.in_flight)

        without = calls(False)
        with_wait = calls(True)
        assert with_wait[0] - without[0] == 1  # the wait; nothing on s1
        assert with_wait[1] - without[1] == 0  # no completion record
        assert with_wait[2] == without[2] == 0
        assert with_wait[3] == 0
        t.free()


def test_a_cross_device_wait_still_records_on_the_other_device(kernels):
    with ChipWorker(RunConfig(device_id=0, **SMALL)) as a, ChipWorker(RunConfig(device_id=1, **SMALL)) as b:
        inc_a = a.register(kernels.get("inc", N))
        inc_b = b.register(kernels.get("inc", N))
        ta = a.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32))
        tb = b.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32))
        a.sync()
        b.sync()
        with hold(a.default_stream) as latch:
            before = a.stats().commands_submitted
            first = inc_a.submit(ta)
            b.default_stream.wait(first)  # an event recorded on a behind it, waited for on b
            second = inc_b.submit(tb)
            assert a.stats().commands_submitted - before == 2  # the launch and the record
            b.stream().record().sync(timeout=10)
            assert not second.done()
            latch.release()
            b.sync(timeout=10)
        a.sync(timeout=10)
        assert first.exception() is None and second.exception() is None
        np.testing.assert_array_equal(tb.numpy(), np.ones(N, np.float32))
        ta.free()
        tb.free()


def test_explicit_waits_draw_event_arrows_in_the_trace(tmp_path, ordering, kernels):
    with ChipWorker(_config(ordering)) as w:
        t = _Setup(w, kernels, ordering)
        w.sync()
        with w.trace(tmp_path / "t.json") as tr:
            for what in WHATS:
                with hold(t.s1) as latch:
                    writer = t.scale.submit(t.src, 2.0, t.a, stream=t.s1)
                    t.s2.wait(_target(what, writer, t.s1))
                    t.scale.submit(t.a, 3.0, t.b, stream=t.s2)
                    latch.release()
                    w.sync(timeout=10)
        doc = json.loads(tr.path.read_text())
        flows = [e for e in doc["traceEvents"] if e["ph"] in ("s", "f")]
        assert {e["cat"] for e in flows} == {"event"} and not tr.trace.inferred_waits
        assert sorted(e["tid"] for e in flows if e["ph"] == "s") == [1 + t.s1.id] * 3
        assert sorted(e["tid"] for e in flows if e["ph"] == "f") == [1 + t.s2.id] * 3
        np.testing.assert_allclose(t.b.numpy(stream=t.s2), 6 * t.x, rtol=1e-6)
        t.free()


@pytest.mark.parametrize("what", WHATS)
def test_auto_deps_takes_an_explicit_wait_as_ordering(what, kernels):
    # The table's clock takes the wait: the read it orders needs no inferred wait of its own.
    with ChipWorker(RunConfig(**SMALL)) as w:
        t = _Setup(w, kernels, "auto")
        w.sync()
        with hold(t.s1) as latch:
            writer = t.scale.submit(t.src, 2.0, t.a, stream=t.s1)
            t.s2.wait(_target(what, writer, t.s1))
            before = w.stats()
            t.scale.submit(t.a, 3.0, t.b, stream=t.s2)
            after = w.stats()
            latch.release()
            w.sync(timeout=10)
        assert after.inferred_waits == before.inferred_waits
        assert after.skipped_waits == before.skipped_waits + 1
        np.testing.assert_allclose(t.b.numpy(stream=t.s2), 6 * t.x, rtol=1e-6)
        t.free()


@pytest.mark.anyio
@pytest.mark.parametrize("what", ("launch", "stream"))
async def test_a_wait_on_work_held_on_the_host_waits_for_it(what, kernels):
    # The writer waits for device memory in s1's host FIFO: no fence of s1's tail in the driver
    # covers it, so the wait is an event recorded behind it there, and still orders the read.
    async with ChipWorker(RunConfig(**{**SMALL, "device_memory": 1 << 20, "auto_deps": False})) as w:
        scale = w.register(kernels.get("scale", N))
        s0, s1, s2 = w.stream(), w.stream(), w.stream()
        x = rand()
        a = w.alloc_tensor(N, np.float32, init=POISON, stream=s1)
        b = w.alloc_tensor(N, np.float32, init=POISON, stream=s2)
        await w.wait()
        free = w.stats().memory_capacity - w.stats().memory_reserved
        hog = w.alloc_tensor(free // 4, np.float32, stream=s0)  # every byte left
        with hold(s0) as latch:
            hog.free()  # behind the latch: the memory comes back once it is released
            writer = scale.submit(x, 2.0, a, stream=s1)  # a host array: its temporary waits
            assert not writer.submitted_to_ring
            s2.wait(writer if what == "launch" else s1)
            reader = scale.submit(a, 3.0, b, stream=s2)
            await w.stream().record()
            assert not reader.done()
            latch.release()
            await reader
        await writer
        np.testing.assert_allclose(await b.to_host(stream=s2), 6 * x, rtol=1e-6)
        a.free()
        b.free()


@pytest.mark.parametrize("what", WHATS)
def test_an_injected_failure_on_the_waiter_passes_a_fence_and_hits_an_event_wait(what, kernels):
    # fail_next(s2) before s2.wait(...): a fence wait (a launch, a stream) is passed by, as an
    # inferred wait is, so the reader fails itself; a wait for an event is a command it hits.
    with ChipWorker(_config("no-table")) as w:
        t = _Setup(w, kernels, "no-table")
        t.scale.submit(t.a, 1.0, t.b, stream=t.s2)  # a's first use on s2 (a join) is behind us
        w.sync()
        with hold(t.s1) as latch:
            writer = t.scale.submit(t.src, 2.0, t.a, stream=t.s1)
            target = _target(what, writer, t.s1)
            fail_next(t.s2)
            t.s2.wait(target)
            reader = t.scale.submit(t.a, 3.0, t.b, stream=t.s2)
            latch.release()
            with pytest.raises(PtoDependencyError):
                w.sync(timeout=10)
        exc = reader.exception()
        assert "injected" in str(exc)
        assert isinstance(exc, PtoDependencyError) == (what == "event")
        assert writer.exception() is None
        t.free()
