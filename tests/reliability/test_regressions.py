"""Shrunk failures of the random-program tests, kept as regular tests.

Each test names the program it came from and the bug it pins down.
"""

from __future__ import annotations

import asyncio
import contextlib

import numpy as np
import pytest

from pypto_async import testing
from pypto_async._driver import PTO_ETIMEDOUT, ffi, lib
from pypto_async.errors import PtoDependencyError, PtoDeviceLost, PtoError, PtoKernelFault
from pypto_async.runtime import ChipWorker

from .conftest import SMALL


@contextlib.contextmanager
def _async_worker(**overrides):
    """Yield (loop, worker): an async-mode worker opened on a fresh event loop, closed after."""
    loop = asyncio.new_event_loop()
    w = ChipWorker(dict(SMALL, **overrides))
    try:
        loop.run_until_complete(w.open())
        yield loop, w
    finally:
        loop.run_until_complete(w.aclose())
        loop.close()


def _outcome(loop, aw):
    async def run():
        try:
            return await asyncio.wait_for(aw, 10)
        except PtoError as exc:
            return exc
    return loop.run_until_complete(run())


def test_event_recorded_behind_a_failure_in_the_fifo_fails(rel_kernels):
    """From RuntimeVsModelBackPressure: 'join-event s0->s2: None, model: failed with a dependency'.

    Was: ChipWorker._poison_fifo poisoned only data commands, so a record still in the FIFO
    when the failure was drained entered the ring after the driver had healed the stream.

    Now the driver keeps that backlog and judges it by the epoch each record was queued at.

    Stream A: latch, failing kernel, a wait on held stream C (it keeps A's ring after the
    failure), records until three wait in A's backlog behind the 4-slot ring; e is the last.
    Stream B waits on e, then increments a tensor.  The failure is observed while e still
    waits for ring room.  e was recorded after the failure, so e must fail and B's launch must
    fail with a dependency error, as they do when the ring has room.
    """
    fail = rel_kernels.get("fail", 16)
    inc = rel_kernels.get("inc", 16)
    with _async_worker(ring_task_window=4) as (loop, w):
        a, b, c = w.default_stream, w.stream(), w.stream()
        # Its commands are counted against a 4-slot ring: x orders nothing for itself (manual_deps),
        # the test orders it (b's use completed before a's; b waits for a's event after).
        x = w.alloc_tensor((16,), np.float32, init=np.zeros(16, np.float32), stream=a, manual_deps=True)
        assert _outcome(loop, w.register(inc)(x, stream=b)) is x  # b has joined x: no join waits later
        loop.run_until_complete(a)
        with testing.hold(c) as held_c, testing.hold(a) as latch:
            failed = w.register(fail)(x, stream=a)
            a.wait(c.record())
            e = a.record()
            while a.backlog < 3:  # fill the ring: the last records wait in A's backlog
                e = a.record()
            b.wait(e)
            dependent = w.register(inc)(x, stream=b)
            latch.release()  # the latch and the failure leave the ring, two records take their slots
            assert isinstance(_outcome(loop, failed), PtoKernelFault)
            assert a.backlog == 1  # e waits for ring room: queued before the observation
            held_c.release()
            dep = _outcome(loop, dependent)
            event_exc = _outcome(loop, e)
        assert isinstance(event_exc, PtoDependencyError), f"event after the failure: {event_exc!r}"
        assert isinstance(dep, PtoDependencyError), f"dependent launch: {dep!r}"
        np.testing.assert_array_equal(x.numpy(), np.ones(16, np.float32))


def test_close_returns_after_device_lost_with_unfreed_tensors():
    """From test_faults.py: close() still returns once the device is lost.

    Was: close() -> _free_forgotten() -> _free_locked() raised PtoDeviceLost from
    pto_stream_free.
    """
    w = ChipWorker(dict(SMALL))
    t = w.alloc_tensor((16,), np.float32)  # forgotten: close() frees it  # noqa: F841
    assert lib.pto_debug_lose_device(w._dev, b"gone") == 0
    with pytest.warns(ResourceWarning):
        w.close(timeout=5)
    assert w.is_closed


def test_alloc_on_a_lost_device_fails_fast():
    """From test_faults.py.  Was: pto_mem_alloc did not check for a lost device."""
    w = ChipWorker(dict(SMALL))
    try:
        assert lib.pto_debug_lose_device(w._dev, b"gone") == 0
        with pytest.raises(PtoDeviceLost):
            w.alloc_tensor((16,), np.float32)
    finally:
        try:
            w.close(timeout=5)
        except PtoError:
            pass


def test_failed_init_copy_is_not_silently_lost(rel_kernels):
    """From RuntimeVsModel: 'alloc_tensor(init=...) copy failed and its error was never retrieved'.

    Was: the init copy's Launch was never returned, so its failure surfaced only as a
    RuntimeWarning at GC and later launches read the uninitialised tensor.
    """
    fail = rel_kernels.get("fail", 16)
    copy = rel_kernels.get("copy", 16)
    with _async_worker() as (loop, w):
        s = w.default_stream
        scratch = w.alloc_tensor((16,), np.float32, init=np.zeros(16, np.float32))
        loop.run_until_complete(s)
        # Both queued before the failing kernel runs, so the copy fails as its dependent (unheld,
        # the failure could be observed first, by the launch path's inline drain, and the copy
        # would run: either outcome was accepted, and which came was the race, not the rule).
        with testing.hold(s) as latch:
            failed = w.register(fail)(scratch)
            t = w.alloc_tensor((16,), np.float32, init=np.full(16, 5.0, np.float32))
            latch.release()
        assert isinstance(_outcome(loop, failed), PtoKernelFault)  # observed: s recovers
        out = np.full(16, np.nan, np.float32)
        # Whether the copy's own record was drained yet or not, the use reports the failed copy
        # and is refused before anything is queued.
        res = _use(loop, w.register(copy), t, out)
        assert isinstance(res, PtoDependencyError) and "initial copy failed" in str(res), res
        assert np.isnan(out).all()
        # Later work on the stream runs: a fresh tensor and a use of it.
        u = w.alloc_tensor((16,), np.float32, init=np.full(16, 7.0, np.float32))
        assert _use(loop, w.register(copy), u, out) is out
        np.testing.assert_array_equal(out, np.full(16, 7.0, np.float32))


def _use(loop, handle, *args, **kwargs):
    """Launch `handle(*args)` and return its outcome: its result, or the PtoError it raised or failed with."""
    try:
        launch = handle(*args, **kwargs)
    except PtoError as exc:  # refused before anything is queued
        return exc
    return _outcome(loop, launch)


# Ordering without hazard tracking; with it and the sanitizer (the suite's default); with it alone.
_ORDERINGS = {"manual": {"auto_deps": False, "sanitize": "off"}, "sanitized": {}, "auto": {"sanitize": "off"}}


@pytest.mark.parametrize("ordering", list(_ORDERINGS))
@pytest.mark.parametrize("where", ["allocation stream", "other stream", "other stream, after a wait"])
def test_failed_init_copy_refused_though_the_earlier_failure_was_drained_first(rel_kernels, ordering, where):
    """The race behind test_failed_init_copy_is_not_silently_lost, made deterministic.

    Was: the init copy failed as a dependent of an earlier failure on its stream, whose record
    the host drained first (observing it, which heals the stream) while the copy still waited
    on the device. A use then queued on the allocation stream ran after the copy had failed,
    and read uninitialised memory: the host did not know yet, and stream order let it run. So
    did a use on another stream ordered after the allocation stream by a wait queued since.

    Stream s: a failing kernel, a wait on held stream c, the init copy. The failure is observed
    while c holds the copy back; then t is used, then c is released.
    """
    fail = rel_kernels.get("fail", 16)
    copy = rel_kernels.get("copy", 16)
    with _async_worker(**_ORDERINGS[ordering]) as (loop, w):
        s, c, b = w.default_stream, w.stream(), w.stream()
        scratch = w.alloc_tensor((16,), np.float32, init=np.zeros(16, np.float32))
        loop.run_until_complete(s)
        use_on = s if where == "allocation stream" else b
        out = np.full(16, -1.0, np.float32)  # poisoned: any write shows
        with testing.hold(c) as held_c:
            failed = w.register(fail)(scratch)
            s.wait(c.record())  # holds the init copy back on the device, after the failure
            t = w.alloc_tensor((16,), np.float32, init=np.full(16, 5.0, np.float32))
            init = t._init
            assert isinstance(_outcome(loop, failed), PtoKernelFault)  # observed: s heals
            assert not init.done()  # the copy's fate is still unknown on the host
            if where.endswith("after a wait"):
                b.wait(s.record())  # an event after the copy, recorded once s had healed
            first = _use(loop, w.register(copy), t, out, stream=use_on)
            held_c.release()
            assert isinstance(_outcome(loop, init), PtoDependencyError)
        assert isinstance(first, PtoDependencyError), f"read t without an error: {first!r}, {out}"
        np.testing.assert_array_equal(out, np.full(16, -1.0, np.float32))
        second = _use(loop, w.register(copy), t, out, stream=use_on)
        assert isinstance(second, PtoDependencyError) and "initial copy failed" in str(second)


def test_failed_overwrite_refused_though_the_earlier_failure_was_drained_first(rel_kernels):
    """The same race for a copy that overwrites a whole tensor, which stands for its contents as
    an initial copy does: a use after it must not read the values it did not replace."""
    fail = rel_kernels.get("fail", 16)
    copy = rel_kernels.get("copy", 16)
    with _async_worker() as (loop, w):
        s, c = w.default_stream, w.stream()
        t = w.alloc_tensor((16,), np.float32, init=np.zeros(16, np.float32))
        loop.run_until_complete(s)
        out = np.full(16, -1.0, np.float32)
        with testing.hold(c) as held_c:
            failed = w.register(fail)(t)
            s.wait(c.record())
            overwrite = w.copy(t, np.full(16, 5.0, np.float32))
            assert isinstance(_outcome(loop, failed), PtoKernelFault)
            first = _use(loop, w.register(copy), t, out)
            held_c.release()
            assert isinstance(_outcome(loop, overwrite), PtoDependencyError)
        assert isinstance(first, PtoDependencyError), f"read t without an error: {first!r}, {out}"
        np.testing.assert_array_equal(out, np.full(16, -1.0, np.float32))


@pytest.mark.parametrize("ordering", list(_ORDERINGS))
def test_a_use_while_the_init_copy_runs_reads_its_values(rel_kernels, ordering):
    """Uses queued while the init copy is held wait for it (on its stream too) and see its values;
    a failure observed on another stream meanwhile does not make the runtime refuse them."""
    copy = rel_kernels.get("copy", 16)
    inc = rel_kernels.get("inc", 16)
    fail = rel_kernels.get("fail", 16)
    values = np.random.default_rng(7).standard_normal(16).astype(np.float32)
    with _async_worker(**_ORDERINGS[ordering]) as (loop, w):
        s, b, c = w.default_stream, w.stream(), w.stream()
        scratch = w.alloc_tensor((16,), np.float32, init=np.zeros(16, np.float32), stream=c)
        out = np.full(16, np.nan, np.float32)
        back = np.full(16, np.nan, np.float32)
        with testing.hold(s) as held:
            t = w.alloc_tensor((16,), np.float32, init=values)
            assert isinstance(_outcome(loop, w.register(fail)(scratch, stream=c)), PtoKernelFault)
            moved = w.register(copy)(t, back, stream=b)
            s.wait(moved)  # (ordered by hand for the manual case)
            bumped = w.register(inc)(t)  # a write on its stream, before the copy is known good
            read = w.register(copy)(t, out)
            held.release()
            for launch in (moved, bumped, read):
                assert not isinstance(_outcome(loop, launch), PtoError)
        np.testing.assert_array_equal(back, values)
        np.testing.assert_array_equal(out, values + 1)


def test_free_on_a_failed_stream_still_waits_for_other_users(rel_kernels):
    """Shrunk from RuntimeVsModel (PYPTO_ASYNC_LONG=1): a d2d copy on s0 failed with
    'device range ... is not inside a live allocation' after its source was freed on s2,
    whose previous command had an injected fault."""
    with _async_worker() as (loop, w):
        a, b = w.default_stream, w.stream()
        values = np.arange(1, 17, dtype=np.float32)
        t = w.alloc_tensor((16,), np.float32, init=values, stream=a)
        u = w.alloc_tensor((16,), np.float32, stream=b)
        loop.run_until_complete(a)
        loop.run_until_complete(b)
        back = np.zeros(16, np.float32)
        with testing.hold(a) as latch:
            read = w.copy(back, t, stream=a)  # held: still reads t later
            testing.fail_next(b)
            broken = w.copy(u, np.zeros(16, np.float32), stream=b)  # fails: b's failure, unobserved
            t.free(stream=b)  # joins a (record on a, wait on b), then frees on b
            # The wait in front of the free still waits for a, though b has failed: b cannot
            # run dry, and t's block stays reserved while a is held.
            assert lib.pto_stream_synchronize(b._ptr, 20_000) == -PTO_ETIMEDOUT
            stats = ffi.new("pto_mem_stats *")
            assert lib.pto_mem_get_stats(w._dev, stats) == 0 and stats.pending_frees >= 1
            latch.release()
            result = _outcome(loop, read)
            _outcome(loop, broken)
        assert not isinstance(result, PtoError), f"the held read of t failed: {result!r}"
        np.testing.assert_array_equal(back, values)
        u.free()


def test_dependents_of_a_poisoned_record_name_the_first_failure(rel_kernels):
    """From RuntimeVsModelBackPressure with faults: 'a dependency error without its first failure'.

    Was: the runtime failed such a record with pto_debug_fail_next(stream, PTO_EDEP), whose
    failure carries cause token 0.
    """
    fail = rel_kernels.get("fail", 16)
    inc = rel_kernels.get("inc", 16)
    with _async_worker(ring_task_window=4) as (loop, w):
        a, b = w.default_stream, w.stream()
        x = w.alloc_tensor((16,), np.float32, init=np.zeros(16, np.float32), stream=a)
        assert _outcome(loop, w.register(inc)(x, stream=b)) is x
        loop.run_until_complete(a)
        with testing.hold(a) as latch:
            failed = w.register(fail)(x, stream=a)
            e = a.record()
            while not a.backlog:
                e = a.record()
            b.wait(e)
            dependent = w.register(inc)(x, stream=b)
            latch.release()
            assert lib.pto_stream_synchronize(a._ptr, 10_000_000) == 0
            assert isinstance(_outcome(loop, failed), PtoKernelFault)
            dep = _outcome(loop, dependent)
            _outcome(loop, e)
        assert isinstance(dep, PtoDependencyError)
        assert isinstance(dep.__cause__, PtoKernelFault), f"no first failure: {dep}"


def test_work_queued_after_an_observed_failure_runs(rel_kernels):
    """From RuntimeVsModelBackPressure with faults: 'inc(t7,) on s2: runtime PtoDependencyError
    (... depends on failed token 30 (PTO_ECANCELED) ...), model ok'."""
    fail = rel_kernels.get("fail", 16)
    inc = rel_kernels.get("inc", 16)
    with _async_worker(ring_task_window=4) as (loop, w):
        a = w.default_stream
        x = w.alloc_tensor((16,), np.float32, init=np.zeros(16, np.float32), stream=a)
        loop.run_until_complete(a)
        with testing.hold(a) as latch:
            failed = w.register(fail)(x, stream=a)
            e = a.record()
            while not a.backlog:  # the last record waits in A's FIFO
                e = a.record()
            latch.release()
            assert lib.pto_stream_synchronize(a._ptr, 10_000_000) == 0
            assert isinstance(_outcome(loop, failed), PtoKernelFault)  # observed now
        later = w.register(inc)(x, stream=a)  # queued after the observation
        assert _outcome(loop, later) is x
        _outcome(loop, e)
        np.testing.assert_array_equal(x.numpy(), np.ones(16, np.float32))


def test_late_dependency_record_does_not_poison_newer_work(rel_kernels):
    """From RuntimeVsModelBackPressure with faults: 'event s2->s2: failed (... queued on stream 3
    behind a failed command ...) but the model says it succeeded'."""
    fail = rel_kernels.get("fail", 16)
    inc = rel_kernels.get("inc", 16)
    with _async_worker(ring_task_window=4) as (loop, w):
        a = w.default_stream
        x = w.alloc_tensor((16,), np.float32, init=np.zeros(16, np.float32), stream=a)
        y = w.alloc_tensor((16,), np.float32, init=np.zeros(16, np.float32), stream=a)
        loop.run_until_complete(a)
        c = w.stream()
        with testing.hold(c) as held_c, testing.hold(a) as first:
            failed = w.register(fail)(x, stream=a)
            a.wait(c.record())  # waits for c even once a has failed: keeps the dependent pending
            dependent = w.register(inc)(y, stream=a)  # queued before the observation
            first.release()
            assert isinstance(_outcome(loop, failed), PtoKernelFault)  # observed now
            fillers = []
            while not a.backlog:  # fill the ring; the next launch waits in the FIFO
                fillers.append(w.register(inc)(y, stream=a))
            later = w.register(inc)(x, stream=a)  # queued after the observation
            held_c.release()
            assert isinstance(_outcome(loop, dependent), PtoDependencyError)
            result = _outcome(loop, later)
            for launch in fillers:
                _outcome(loop, launch)
        assert result is x, f"work queued after the observation failed: {result!r}"


def test_latch_queued_behind_a_failure_in_the_fifo_holds_nothing(rel_kernels):
    """From RuntimeVsModelBackPressure with faults: 'waiting for scale(h0, 3.0, t6) on s1 hung'.

    Was: a testing.hold latch still in the FIFO when its stream's failure was drained entered
    the ring after the driver had healed the stream, and held it; in the ring it would have
    completed at once with a dependency error.  Work queued after the observation then waited
    for the latch's timeout.
    """
    fail = rel_kernels.get("fail", 16)
    inc = rel_kernels.get("inc", 16)
    with _async_worker(ring_task_window=4) as (loop, w):
        a = w.default_stream
        x = w.alloc_tensor((16,), np.float32, init=np.zeros(16, np.float32), stream=a)
        loop.run_until_complete(a)
        with testing.hold(a) as latch:
            failed = w.register(fail)(x, stream=a)
            e = a.record()
            while not a.backlog:  # fill the ring: the last record waits in A's FIFO
                e = a.record()
            with testing.hold(a, timeout=30):  # behind the failure, in the FIFO: holds nothing
                assert a.backlog == 2
                latch.release()
                assert lib.pto_stream_synchronize(a._ptr, 10_000_000) == 0
                assert isinstance(_outcome(loop, failed), PtoKernelFault)  # observed now
                later = w.register(inc)(x, stream=a)  # queued after the observation
                assert _outcome(loop, later) is x, "work after the observation waits behind the latch"
        assert isinstance(_outcome(loop, e), PtoDependencyError)
        np.testing.assert_array_equal(x.numpy(), np.ones(16, np.float32))


def test_wait_queued_behind_a_failure_in_the_fifo_fails_only_as_a_dependent(rel_kernels):
    """From RuntimeVsModelBackPressure with faults: 'inc(t0,) on s0: runtime PtoDependencyError
    (... waits on event 9 recorded after failed token 10 ...), model ok'.

    Was: an event wait still in the FIFO when its stream's failure was drained entered the ring
    as a plain wait on a healthy stream; its failed event then made it the stream's new first
    failure, and work queued after the observation failed.  In the ring it would have waited,
    then failed as a dependent.
    """
    fail = rel_kernels.get("fail", 16)
    inc = rel_kernels.get("inc", 16)
    with _async_worker(ring_task_window=4) as (loop, w):
        a, b = w.default_stream, w.stream()
        x = w.alloc_tensor((16,), np.float32, init=np.zeros(16, np.float32), stream=a)
        y = w.alloc_tensor((16,), np.float32, init=np.zeros(16, np.float32), stream=b)
        loop.run_until_complete(a)
        loop.run_until_complete(b)
        failed_b = w.register(fail)(y, stream=b)
        eb = b.record()  # carries failed_b's failure
        with testing.hold(a) as latch:
            failed_a = w.register(fail)(x, stream=a)
            while not a.backlog:  # fill the ring: the wait below waits in A's FIFO
                a.record()
            a.wait(eb)
            latch.release()
            assert lib.pto_stream_synchronize(a._ptr, 10_000_000) == 0
            assert isinstance(_outcome(loop, failed_a), PtoKernelFault)  # observed now
        later = w.register(inc)(x, stream=a)  # queued after the observation
        assert _outcome(loop, later) is x, "work after the observation failed behind the wait"
        assert isinstance(_outcome(loop, failed_b), PtoKernelFault)
        np.testing.assert_array_equal(x.numpy(), np.ones(16, np.float32))
