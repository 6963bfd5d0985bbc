"""native/src/submit.c, ring.c, stream.c, exec.c: rings, ordering, copies, back-pressure, failure propagation."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import CompletionLog, held, new_token
from pypto_async._driver import (
    PTO_EAGAIN,
    PTO_EDEP,
    PTO_EFAULT,
    PTO_EKERNEL,
    PTO_ETIMEDOUT,
    check,
    ffi,
    lib,
)
from pypto_async.errors import PtoArgumentError, PtoTryAgain

from helpers.raw_driver import (
    alloc,
    builtin,
    d2h,
    device_stats,
    free,
    h2d,
    launch,
    new_event,
    notify,
    stream_stats,
    sync,
)


def test_create_ids_priority_and_stats(dev, new_stream):
    a, b = new_stream(0), new_stream(5)
    assert lib.pto_stream_id(a) != lib.pto_stream_id(b)
    st = stream_stats(b)
    assert (st.id, st.priority, st.window) == (lib.pto_stream_id(b), 5, 256)
    assert (st.in_flight, st.submitted, st.completed) == (0, 0, 0)
    assert st.heap_bytes == 64 << 10 and st.dep_entries == 64
    assert lib.pto_stream_space_left(a) == 256
    assert lib.pto_stream_submitted(a) == 0 and lib.pto_stream_completed(a) == 0


def test_an_idle_stream_has_no_ring_until_its_first_submission(dev, cq, new_stream):
    """A stream's ring and heap come with its first command: many idle streams stay small."""
    base = device_stats(dev)
    idle = [new_stream(p % 3) for p in range(50)]
    st = device_stats(dev)
    assert st.streams == base.streams + 50
    assert st.rings_allocated == base.rings_allocated
    assert all(stream_stats(s).ring_allocated == 0 for s in idle)
    used = idle[7]
    t = new_token()
    notify(used, t)
    sync(used)
    assert stream_stats(used).ring_allocated == 1 and stream_stats(idle[8]).ring_allocated == 0
    assert device_stats(dev).rings_allocated == base.rings_allocated + 1
    assert cq.wait(t)[t].status == 0
    lib.pto_stream_destroy(used)
    idle.remove(used)
    st = device_stats(dev)
    assert (st.streams, st.rings_allocated) == (base.streams + 49, base.rings_allocated)


def test_streams_of_mixed_priorities_are_found_and_removed_by_their_sort_keys(dev, cq, new_stream, rng):
    """Destroying streams in any order removes exactly them: the rest all keep running."""
    base = device_stats(dev).streams
    prios = [int(p) for p in rng.integers(-3, 4, size=40)]
    streams = [new_stream(p) for p in prios]
    order = rng.permutation(len(streams))
    gone = {int(i) for i in order[:25]}
    for i in order[:25]:
        lib.pto_stream_destroy(streams[int(i)])
    assert device_stats(dev).streams == base + 15
    keep = [s for i, s in enumerate(streams) if i not in gone]
    tokens = [new_token() for _ in keep]
    for s, t in zip(keep, tokens):
        notify(s, t)
    assert all(r.status == 0 for r in cq.wait(*tokens).values())
    for s in keep:
        lib.pto_stream_destroy(s)
    assert device_stats(dev).streams == base


def test_destroy_lets_queued_work_finish(dev, cq, new_stream):
    s = new_stream()
    t = new_token()
    with held(dev, s):
        notify(s, t)
        lib.pto_stream_destroy(s)
    assert cq.wait(t)[t].status == 0


def test_timeline_counters(dev, cq, stream):
    toks = [new_token() for _ in range(10)]
    with held(dev, stream):
        for t in toks:
            notify(stream, t)
        assert lib.pto_stream_submitted(stream) == 11
        assert lib.pto_stream_completed(stream) == 0
        assert lib.pto_stream_space_left(stream) == 256 - 11
        assert lib.pto_stream_synchronize(stream, 2000) == -PTO_ETIMEDOUT
    sync(stream)
    assert lib.pto_stream_completed(stream) == 11
    recs = cq.wait(*toks)
    seqs = [recs[t].seq for t in toks]
    assert seqs == list(range(2, 12))
    # In order: each command starts after the previous one completed.
    for prev, cur in zip(toks, toks[1:]):
        assert recs[prev].end_ns <= recs[cur].start_ns
        assert recs[cur].submit_ns <= recs[cur].start_ns <= recs[cur].end_ns
    st = stream_stats(stream)
    assert (st.submitted, st.completed, st.in_flight, st.window_hwm) == (11, 11, 0, 11)


@pytest.mark.parametrize("nbytes", [1, 255, 4096 + 3, (1 << 20) + 5])
def test_copies_round_trip_exact_bytes(dev, cq, stream, rng, nbytes):
    data = rng.integers(0, 256, nbytes, dtype=np.uint8)
    out = np.full(nbytes, 0x5A, dtype=np.uint8)
    a, b = alloc(dev, nbytes, stream), alloc(dev, nbytes, stream)
    t = [new_token() for _ in range(3)]
    h2d(stream, a, data, t[0])
    check(lib.pto_stream_copy_d2d(stream, b, a, nbytes, t[1]))
    d2h(stream, out, b, t[2])
    recs = cq.wait(*t)
    assert all(recs[x].status == 0 for x in t)
    np.testing.assert_array_equal(out, data)
    for p in (a, b):
        check(lib.pto_stream_free(stream, p, 0))
    sync(stream)


def test_memset_and_partial_copies(dev, stream, rng):
    n = 10_000
    p = alloc(dev, n, stream)
    check(lib.pto_stream_memset(stream, p, 0xAB, n, 0))
    check(lib.pto_stream_memset(stream, p + 256, 0x11, 1000, 0))
    chunk = rng.integers(0, 256, 77, dtype=np.uint8)
    h2d(stream, p + 5000, chunk)
    out = np.zeros(n, dtype=np.uint8)
    d2h(stream, out, p)
    sync(stream)
    expect = np.full(n, 0xAB, dtype=np.uint8)
    expect[256:1256] = 0x11
    expect[5000:5077] = chunk
    np.testing.assert_array_equal(out, expect)
    check(lib.pto_stream_free(stream, p, 0))
    sync(stream)


def test_copy_out_of_range_fails(dev, cq, stream):
    p = alloc(dev, 4096, stream)
    host = np.zeros(8192, dtype=np.uint8)
    t = new_token()
    rc = lib.pto_stream_copy_h2d(stream, p + 4096 * 20000, ffi.from_buffer(host), 8192, t)
    if rc == 0:  # accepted at submit: then the command itself must fail
        assert cq.wait(t)[t].status == -PTO_EFAULT
        cq.drain_all()
    else:
        with pytest.raises(PtoArgumentError):
            check(rc)
    free(dev, p)


def test_latch_on_one_stream_does_not_hold_another(dev, cq, stream, stream2, rng):
    data = rng.integers(0, 256, 4096, dtype=np.uint8)
    out = np.zeros(4096, dtype=np.uint8)
    p = alloc(dev, 4096, stream2)
    ta, tb = new_token(), new_token()
    with held(dev, stream):
        notify(stream, ta)
        h2d(stream2, p, data)
        d2h(stream2, out, p, tb)
        assert cq.wait(tb)[tb].status == 0
        np.testing.assert_array_equal(out, data)
        assert ta not in cq and lib.pto_stream_completed(stream) == 0
    assert cq.wait(ta)[ta].status == 0
    check(lib.pto_stream_free(stream2, p, 0))
    sync(stream2)


def test_ring_full_is_try_again(open_dev, new_stream):
    dev = open_dev(ring_task_window=4)
    s = new_stream(device=dev)
    with held(dev, s):
        for _ in range(3):
            notify(s, 0)  # the latch wait holds the fourth slot
        assert lib.pto_stream_space_left(s) == 0
        rc = lib.pto_stream_notify(s, 0)
        assert rc == -PTO_EAGAIN
        with pytest.raises(PtoTryAgain):
            check(rc)
        assert stream_stats(s).refused == 1
    sync(s)
    assert lib.pto_stream_space_left(s) == 4
    notify(s, 0)
    sync(s)


def test_ring_heap_full_is_try_again(open_dev, new_stream):
    dev = open_dev(ring_heap=2048)
    s = new_stream(device=dev)
    noop = builtin(dev, "noop")
    args = list(range(1, 65))  # 512 argument bytes per launch
    accepted = 0
    with held(dev, s):
        while True:
            a = ffi.new("uint64_t[]", args)
            rc = lib.pto_stream_launch(s, noop, 1, a, len(args), 0)
            if rc == -PTO_EAGAIN:
                break
            check(rc)
            accepted += 1
            assert accepted < 8, "a 2 KiB heap took more than 4 KiB of arguments"
        assert 1 <= accepted <= 4
        assert lib.pto_stream_space_left(s) > 0  # the ring has room: the heap ran out
        st = stream_stats(s)
        assert st.heap_hwm <= st.heap_bytes == 2048 and st.refused == 1
    sync(s)
    launch(s, noop, 1, args)  # room again once the launches completed
    sync(s)


def test_dep_pool_full_is_try_again(open_dev, new_stream):
    dev = open_dev(ring_dep_pool=2)
    a, b = new_stream(device=dev), new_stream(device=dev)
    ev = new_event(dev)
    with held(dev, b):
        check(lib.pto_stream_record(b, ev, 0))
        with held(dev, a):
            check(lib.pto_stream_wait_event(a, ev, 0))
            check(lib.pto_stream_wait_event(a, ev, 0))
            assert lib.pto_stream_wait_event(a, ev, 0) == -PTO_EAGAIN
            assert stream_stats(a).dep_hwm == 2
    sync(a)
    check(lib.pto_stream_wait_event(a, ev, 0))
    sync(a)
    lib.pto_event_destroy(ev)


def test_delay_holds_the_stream_for_its_duration(dev, cq, stream):
    t1, t2 = new_token(), new_token()
    check(lib.pto_stream_delay(stream, 3000, t1))
    notify(stream, t2)
    recs = cq.wait(t1, t2)
    assert recs[t1].end_ns - recs[t1].start_ns >= 3_000_000
    assert recs[t2].start_ns >= recs[t1].end_ns


def _assert_failed_then_dep(recs, first, first_status, rest):
    assert recs[first].status == first_status
    assert recs[first].message
    for t in rest:
        assert recs[t].status == -PTO_EDEP, (hex(t), recs[t])
        assert recs[t].cause_token == first


def test_fail_next_fails_the_rest_of_the_stream_then_recovers(dev, cq, stream, stream2, rng):
    p = alloc(dev, 4096, stream)
    data = rng.integers(0, 256, 4096, dtype=np.uint8)
    other = new_token()
    toks = [new_token() for _ in range(4)]
    with held(dev, stream):
        check(lib.pto_debug_fail_next(stream, 0, 1))
        notify(stream, toks[0])
        h2d(stream, p, data, toks[1])
        check(lib.pto_stream_memset(stream, p, 0, 4096, toks[2]))
        notify(stream, toks[3])
        notify(stream2, other)
    recs = cq.wait(*toks, other)
    _assert_failed_then_dep(recs, toks[0], -PTO_EFAULT, toks[1:])
    assert recs[other].status == 0  # the other stream is untouched
    assert cq.observe(toks[0]) == 1
    # The failure was delivered: new work on the stream runs normally.
    out = np.zeros(4096, dtype=np.uint8)
    t = new_token()
    h2d(stream, p, data)
    d2h(stream, out, p, t)
    assert cq.wait(t)[t].status == 0
    np.testing.assert_array_equal(out, data)
    check(lib.pto_stream_free(stream, p, 0))
    sync(stream)


def test_failing_kernel_fails_the_rest_with_its_token(dev, cq, stream):
    fail = builtin(dev, "fail")
    toks = [new_token() for _ in range(3)]
    launch(stream, fail, 2, [0], toks[0])
    notify(stream, toks[1])
    check(lib.pto_stream_delay(stream, 10, toks[2]))
    recs = cq.wait(*toks)
    _assert_failed_then_dep(recs, toks[0], -PTO_EKERNEL, toks[1:])
    t = new_token()
    notify(stream, t)  # drained, not delivered: still a dependent
    assert cq.wait(t)[t].status == -PTO_EDEP
    assert cq.observe(toks[0]) == 1
    t = new_token()
    notify(stream, t)
    assert cq.wait(t)[t].status == 0


def test_fail_next_count_and_status(dev, cq, stream):
    check(lib.pto_debug_fail_next(stream, PTO_EKERNEL, 2))
    t1 = new_token()
    notify(stream, t1)
    assert cq.wait(t1)[t1].status == -PTO_EKERNEL
    assert cq.observe(t1) == 1
    t2 = new_token()
    notify(stream, t2)  # submitted after the observation: injected failure number two
    assert cq.wait(t2)[t2].status == -PTO_EKERNEL
    assert cq.observe(t2) == 1
    t3 = new_token()
    notify(stream, t3)
    assert cq.wait(t3)[t3].status == 0


def test_event_wait_propagates_failure_to_the_waiting_stream(dev, cq, stream, stream2):
    fail = builtin(dev, "fail")
    ev = new_event(dev)
    ta, trec, twait, tb = (new_token() for _ in range(4))
    before = new_token()
    with held(dev, stream):
        launch(stream, fail, 1, [0], ta)
        check(lib.pto_stream_record(stream, ev, trec))
        notify(stream2, before)
        check(lib.pto_stream_wait_event(stream2, ev, twait))
        notify(stream2, tb)
    recs = cq.wait(ta, trec, twait, tb, before)
    assert recs[before].status == 0
    _assert_failed_then_dep(recs, ta, -PTO_EKERNEL, [trec, twait, tb])
    assert lib.pto_event_query(ev) < 0
    assert recs[twait].fail_id != 0 and recs[tb].fail_id == recs[twait].fail_id
    # Delivering stream2's dependent observes its failure and the one it came from, through
    # the wait: both streams recover for work submitted after that.
    assert cq.observe(tb) == 1
    assert cq.observe(ta) == 0
    t1, t2 = new_token(), new_token()
    notify(stream, t1)
    notify(stream2, t2)
    recs = cq.wait(t1, t2)
    assert (recs[t1].status, recs[t2].status) == (0, 0)
    lib.pto_event_destroy(ev)


def test_ordering_record_orders_without_passing_on_the_failure(dev, cq, stream, stream2):
    fail = builtin(dev, "fail")
    ev = new_event(dev)
    ta, trec, tafter, twait, tb = (new_token() for _ in range(5))
    with held(dev, stream) as h:
        launch(stream, fail, 1, [0], ta)
        check(lib.pto_stream_record_ordering(stream, ev, trec))
        notify(stream, tafter)
        check(lib.pto_stream_wait_event(stream2, ev, twait))
        notify(stream2, tb)
        h.release()
        recs = cq.wait(ta, trec, tafter, twait, tb)
    assert recs[ta].status == -PTO_EKERNEL
    # The point completes healthy, and so does what is ordered behind it elsewhere...
    assert (recs[trec].status, recs[twait].status, recs[tb].status) == (0, 0, 0)
    assert recs[twait].end_ns >= recs[ta].end_ns
    assert lib.pto_event_query(ev) == 1
    # ... while the failed stream still fails its own work queued behind the failure.
    assert recs[tafter].status == -PTO_EDEP and recs[tafter].cause_token == ta
    lib.pto_event_destroy(ev)


def test_an_injected_failure_passes_an_ordering_record_by(dev, cq, stream, stream2):
    ev = new_event(dev)
    trec, tnext, twait = (new_token() for _ in range(3))
    check(lib.pto_debug_fail_next(stream, 0, 1))
    check(lib.pto_stream_record_ordering(stream, ev, trec))
    notify(stream, tnext)
    check(lib.pto_stream_wait_event(stream2, ev, twait))
    recs = cq.wait(trec, tnext, twait)
    # The point is not a command that can fail: the next one takes the injection.
    assert (recs[trec].status, recs[twait].status) == (0, 0)
    assert recs[tnext].status == -PTO_EFAULT
    assert lib.pto_event_query(ev) == 1
    lib.pto_event_destroy(ev)


def test_higher_priority_head_runs_first(open_dev):
    dev = open_dev(aicpu_thread_num=1)
    streams = {}
    for prio in (0, 10, 5):
        out = ffi.new("pto_stream **")
        check(lib.pto_stream_create(dev, prio, out))
        streams[prio] = out[0]
    log = CompletionLog(dev)
    toks = {prio: new_token() for prio in streams}
    with held(dev, streams[0]) as h:
        h.hold(streams[10])
        h.hold(streams[5])
        for prio, s in streams.items():
            notify(s, toks[prio])
    log.wait(*toks.values())
    order = [r.token for r in log.records.values()]
    assert order == [toks[10], toks[5], toks[0]]


def test_failure_without_a_token_is_observed_through_its_first_dependent(dev, cq, stream):
    """A failing command with token 0 pushes no record; the first EDEP record stands in for it."""
    t1 = new_token()
    with held(dev, stream):  # both queued before the failure executes
        check(lib.pto_debug_fail_next(stream, 0, 1))
        notify(stream, 0)
        notify(stream, t1)
    rec = cq.wait(t1)[t1]
    assert rec.status == -PTO_EDEP and rec.cause_token == 0
    assert "PTO_EFAULT" in rec.message
    assert rec.fail_id != 0  # names the token-less failure
    t2 = new_token()
    notify(stream, t2)  # submitted after that record was drained: not observed
    assert cq.wait(t2)[t2].status == -PTO_EDEP
    assert cq.observe(t1) == 1  # delivered
    t3 = new_token()
    notify(stream, t3)
    assert cq.wait(t3)[t3].status == 0


# -- submissions to an idle stream ------------------------------------------------------------
# A command submitted to a stream whose earlier work has all completed is started by the
# submitting thread (pti_stream_kick runs the scheduler pass itself when sched_lock is free).
# What it cannot finish there must still be picked up: deadlines by the scheduler thread,
# event waits by whoever fires the event.  spin_us=1 and a pause before each submission make
# sure every driver thread is asleep, so nothing is finished by a thread that happened to spin.


def _asleep():
    import time

    time.sleep(0.005)


@pytest.fixture
def sleepy(open_dev):
    return open_dev(spin_us=1)


def _stream(dev, priority: int = 0):
    out = ffi.new("pto_stream **")
    check(lib.pto_stream_create(dev, priority, out), "pto_stream_create")
    return out[0]


def test_delay_on_an_idle_stream_hands_its_deadline_to_the_scheduler(sleepy):
    cq, s = CompletionLog(sleepy), _stream(sleepy)
    t = new_token()
    _asleep()
    check(lib.pto_stream_delay(s, 2000, t))  # alone: no later submission kicks the scheduler
    rec = cq.wait(t, timeout_s=5.0)[t]
    assert rec.status == 0
    assert rec.end_ns - rec.start_ns >= 2_000_000


@pytest.mark.parametrize("waiter_first_in_pass", [True, False])
def test_wait_entered_on_an_idle_stream_is_released_by_the_record(sleepy, waiter_first_in_pass):
    # The scheduler pass visits streams by priority: the waiter comes before or after the
    # recording stream.
    cq = CompletionLog(sleepy)
    waiter = _stream(sleepy, 1 if waiter_first_in_pass else 0)
    recorder = _stream(sleepy, 0 if waiter_first_in_pass else 1)
    ev = new_event(sleepy)
    try:
        t_rec, t_wait, t_after = new_token(), new_token(), new_token()
        with held(sleepy, recorder):
            check(lib.pto_stream_record(recorder, ev, t_rec))
            _asleep()
            check(lib.pto_stream_wait_event(waiter, ev, t_wait))  # the waiter is idle: starts here
            notify(waiter, t_after)
            _asleep()
            assert not cq.drain()
        recs = cq.wait(t_rec, t_wait, t_after)
        assert all(recs[t].status == 0 for t in (t_rec, t_wait, t_after))
        assert recs[t_wait].end_ns >= recs[t_rec].end_ns
    finally:
        sync(waiter)
        sync(recorder)
        lib.pto_event_destroy(ev)


def test_latch_on_an_idle_stream_is_released_by_the_host(sleepy):
    cq, s = CompletionLog(sleepy), _stream(sleepy)
    t = new_token()
    _asleep()
    with held(sleepy, s):
        notify(s, t)
        _asleep()
        assert not cq.drain()
    assert cq.wait(t)[t].status == 0
