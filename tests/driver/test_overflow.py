"""native/src/overflow.c: commands accepted while the ring has no room, and withdrawn ones."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import held, new_token
from pypto_async._driver import PTO_EAGAIN, PTO_EINVAL, PTO_QUEUED, check, ffi, lib

from helpers.raw_driver import alloc, builtin, d2h, f32_bits, h2d, launch, mem_stats, new_event, notify, stream_stats, sync


@pytest.fixture
def small_dev(open_dev):
    """A device with a 4-slot ring, a 64-byte ring heap and a 2-entry dependency pool."""
    return open_dev(ring_task_window=4, ring_heap=64, ring_dep_pool=2)


@pytest.fixture
def ostream(small_dev):
    """A stream of `small_dev` with its overflow on."""
    out = ffi.new("pto_stream **")
    check(lib.pto_stream_create(small_dev, 0, out), "pto_stream_create")
    check(lib.pto_stream_set_overflow(out[0], 1))
    return out[0]


def _cq(dev):
    from helpers import CompletionLog

    return CompletionLog(dev)


def test_without_the_overflow_a_full_ring_refuses(small_dev):
    out = ffi.new("pto_stream **")
    check(lib.pto_stream_create(small_dev, 0, out))
    s = out[0]
    with held(small_dev, s):
        for _ in range(3):
            notify(s, 0)
        assert lib.pto_stream_notify(s, 0) == -PTO_EAGAIN
        assert stream_stats(s).refused == 1 and stream_stats(s).overflow == 0


def test_the_overflow_accepts_in_order_and_drains_without_the_host(small_dev, ostream):
    cq = _cq(small_dev)
    toks = [new_token() for _ in range(40)]
    with held(small_dev, ostream) as latch:
        rcs = [lib.pto_stream_notify(ostream, t) for t in toks]
        assert rcs == [0, 0, 0] + [PTO_QUEUED] * 37  # the latch and three fill the ring
        assert lib.pto_stream_accepted(ostream) == 41
        assert lib.pto_stream_submitted(ostream) == 4
        st = stream_stats(ostream)
        assert (st.in_flight, st.overflow, st.overflow_hwm, st.refused) == (4, 37, 37, 37)
        latch.release()
        sync(ostream)  # waits for the overflow too; no drain, no host call moved anything
    assert lib.pto_stream_completed(ostream) == 41
    got = cq.wait(*toks)
    assert [got[t].seq for t in toks] == list(range(2, 42))  # seqs given on acceptance, in order
    assert all(r.status == 0 for r in got.values())
    st = stream_stats(ostream)
    assert (st.overflow, st.submitted, st.completed) == (0, 41, 41)
    assert st.window_hwm <= 4


def test_launch_arguments_wait_in_the_overflow_for_heap_room(small_dev, ostream):
    cq = _cq(small_dev)
    fill = builtin(small_dev, "fill_f32")
    n = 16
    bufs = [alloc(small_dev, n * 4, ostream) for _ in range(12)]
    values = np.random.default_rng(0).uniform(1, 9, 12).astype(np.float32)
    toks = []
    with held(small_dev, ostream):
        for buf, v in zip(bufs, values):
            toks.append(new_token())
            launch(ostream, fill, 1, [buf, f32_bits(v), n], toks[-1])  # 24 bytes of arguments each
        assert stream_stats(ostream).overflow == 10  # two launches' arguments fill the 64-byte heap
    cq.wait(*toks)
    for buf, v in zip(bufs, values):
        out = np.zeros(n, np.float32)
        d2h(ostream, out, buf)
        sync(ostream)
        np.testing.assert_array_equal(out, np.full(n, v, np.float32))
    st = stream_stats(ostream)
    assert st.heap_hwm <= 64
    for buf in bufs:
        check(lib.pto_stream_free(ostream, buf, 0))
    sync(ostream)


def test_long_argument_lists_wait_in_the_overflow_too(open_dev):
    # Ten arguments (80 bytes): past what an overflow entry holds inline.
    dev = open_dev(ring_task_window=4, ring_heap=256)
    out = ffi.new("pto_stream **")
    check(lib.pto_stream_create(dev, 0, out))
    s = out[0]
    check(lib.pto_stream_set_overflow(s, 1))
    cq = _cq(dev)
    fill = builtin(dev, "fill_f32")
    n = 16
    bufs = [alloc(dev, n * 4, s) for _ in range(8)]
    values = np.random.default_rng(1).uniform(1, 9, 8).astype(np.float32)
    toks = []
    with held(dev, s):
        for buf, v in zip(bufs, values):
            toks.append(new_token())
            launch(s, fill, 1, [buf, f32_bits(v), n] + [0xDEAD] * 7, toks[-1])
        assert stream_stats(s).overflow >= 5
    cq.wait(*toks)
    for buf, v in zip(bufs, values):
        got = np.zeros(n, np.float32)
        d2h(s, got, buf)
        sync(s)
        np.testing.assert_array_equal(got, np.full(n, v, np.float32))
    for buf in bufs:
        check(lib.pto_stream_free(s, buf, 0))
    sync(s)


def test_waits_take_dependency_entries_only_in_the_ring(small_dev, ostream, new_stream):
    cq = _cq(small_dev)
    src = ffi.new("pto_stream **")
    check(lib.pto_stream_create(small_dev, 0, src))
    check(lib.pto_stream_set_overflow(src[0], 1))
    events = [new_event(small_dev) for _ in range(6)]
    after = new_token()
    with held(small_dev, src[0]) as latch:
        for e in events:
            check(lib.pto_stream_record(src[0], e, 0))
        for e in events:  # six waits, a 2-entry pool: four wait in the overflow
            check(lib.pto_stream_wait_event(ostream, e, 0))
        notify(ostream, after)
        assert stream_stats(ostream).overflow == 5
        assert lib.pto_stream_synchronize(ostream, 20_000) < 0  # every wait holds
        latch.release()
    assert cq.wait(after)[after].status == 0
    assert stream_stats(ostream).dep_hwm == 2
    for e in events:
        lib.pto_event_destroy(e)


def test_a_record_in_the_overflow_is_what_later_waits_wait_for(small_dev, ostream, new_stream):
    cq = _cq(small_dev)
    waiter = new_stream(device=small_dev)
    ev = new_event(small_dev)
    x = alloc(small_dev, 64, ostream)
    data = np.arange(16, dtype=np.float32)
    out = np.zeros(16, np.float32)
    t_copy = new_token()
    with held(small_dev, ostream):
        for _ in range(3):
            notify(ostream, 0)
        h2d(ostream, x, data)                               # waits in the overflow
        assert lib.pto_stream_record(ostream, ev, 0) == PTO_QUEUED
        check(lib.pto_stream_wait_event(waiter, ev, 0))     # taken now: waits for that record
        d2h(waiter, out, x, t_copy)
        assert lib.pto_stream_synchronize(waiter, 20_000) < 0
    assert cq.wait(t_copy)[t_copy].status == 0
    np.testing.assert_array_equal(out, data)
    check(lib.pto_stream_free(ostream, x, 0))
    sync(ostream)
    lib.pto_event_destroy(ev)


def test_the_overflow_is_judged_by_the_epoch_it_was_accepted_at(small_dev, ostream, new_stream):
    cq = _cq(small_dev)
    other = new_stream(device=small_dev)
    ev = new_event(small_dev)
    fail_t, behind, armed, after = new_token(), new_token(), new_token(), new_token()
    with held(small_dev, other) as held_other:
        check(lib.pto_stream_record(other, ev, 0))
        with held(small_dev, ostream) as latch:
            check(lib.pto_debug_fail_next(ostream, 0, 1))
            notify(ostream, fail_t)  # fails on its own: the stream's first failure
            check(lib.pto_stream_wait_event(ostream, ev, 0))  # then holds the ring, failed or not
            notify(ostream, 0)  # the ring is full
            for _ in range(2):  # these take the room the latch and the failure leave
                assert lib.pto_stream_notify(ostream, 0) == PTO_QUEUED
            assert lib.pto_stream_notify(ostream, behind) == PTO_QUEUED
            check(lib.pto_debug_fail_next(ostream, 0, 1))
            assert lib.pto_stream_notify(ostream, armed) == PTO_QUEUED  # uses the injection up
            latch.release()
            assert cq.wait(fail_t)[fail_t].status == -lib.PTO_EFAULT
            assert cq.observe(fail_t) == 1  # delivered: observed now
            assert stream_stats(ostream).overflow == 2  # behind and armed still wait
            notify(ostream, after)  # accepted after the observation
        held_other.release()
    got = cq.wait(behind, armed, after)
    assert got[behind].status == -lib.PTO_EDEP and got[behind].cause_token == fail_t
    assert got[armed].status == -lib.PTO_EDEP  # a dependent anyway: no new first failure
    assert got[after].status == 0
    lib.pto_event_destroy(ev)


def test_cancel_queued_withdraws_what_waits_and_nothing_in_the_ring(small_dev, ostream):
    cq = _cq(small_dev)
    x = alloc(small_dev, 64, ostream)
    data = np.arange(16, dtype=np.float32)
    out = np.full(16, -1.0, np.float32)
    toks = [new_token() for _ in range(6)]
    with held(small_dev, ostream):
        notify(ostream, toks[0])            # seq 2, in the ring
        notify(ostream, toks[1])            # seq 3
        notify(ostream, toks[2])            # seq 4: the ring is full
        h2d(ostream, x, data, toks[3])      # seq 5, waiting
        d2h(ostream, out, x, toks[4])       # seq 6
        check(lib.pto_stream_free(ostream, x, toks[5]))  # seq 7
        assert lib.pto_stream_cancel_queued(ostream, 4, 5) == 0  # 4 is on the device
        assert lib.pto_stream_cancel_queued(ostream, 5, 7) == 1
        assert lib.pto_stream_cancel_queued(ostream, 7, 8) == -PTO_EINVAL  # 8 was never accepted
        assert lib.pto_stream_cancel_queued(ostream, 0, 1) == -PTO_EINVAL
    got = cq.wait(*toks)
    assert [got[t].status for t in toks] == [0, 0, 0] + [-lib.PTO_ECANCELED] * 3
    assert (out == -1.0).all()  # the withdrawn copies never ran
    st = mem_stats(small_dev)
    assert (st.allocations, st.pending_frees) == (0, 0)  # the withdrawn free still gave its block back
    t = new_token()
    notify(ostream, t)  # later work runs as if they had completed
    assert cq.wait(t)[t].status == 0


def test_cancel_queued_refuses_event_records(small_dev, ostream):
    ev = new_event(small_dev)
    with held(small_dev, ostream):
        for _ in range(3):
            notify(ostream, 0)
        check(lib.pto_stream_record(ostream, ev, 0))
        assert lib.pto_stream_cancel_queued(ostream, 5, 5) == -PTO_EINVAL
    sync(ostream)
    lib.pto_event_destroy(ev)


def test_the_overflow_cannot_be_turned_off_while_commands_wait(small_dev, ostream):
    with held(small_dev, ostream):
        for _ in range(5):
            notify(ostream, 0)
        assert lib.pto_stream_set_overflow(ostream, 0) == -PTO_EINVAL
    sync(ostream)
    check(lib.pto_stream_set_overflow(ostream, 0))
    with held(small_dev, ostream):
        for _ in range(3):
            notify(ostream, 0)
        assert lib.pto_stream_notify(ostream, 0) == -PTO_EAGAIN


def test_close_cancels_the_overflow(open_dev):
    dev = open_dev(ring_task_window=2)
    out = ffi.new("pto_stream **")
    check(lib.pto_stream_create(dev, 0, out))
    s = out[0]
    check(lib.pto_stream_set_overflow(s, 1))
    cq = _cq(dev)
    latch = ffi.new("pto_latch **")
    check(lib.pto_latch_create(dev, 0, latch))
    check(lib.pto_stream_latch_wait(s, latch[0], 0))
    toks = [new_token() for _ in range(10)]
    for t in toks:
        notify(s, t)
    assert lib.pto_device_cancel(dev) == 11
    got = cq.wait(*toks)
    assert all(r.status == -lib.PTO_ECANCELED for r in got.values())
    lib.pto_latch_destroy(latch[0])


def test_the_backlog_enters_the_ring_in_batches_of_a_quarter_ring(open_dev):
    """Room is granted in batches: one refill hand-off per quarter of the ring freed, not one per slot."""
    dev = open_dev(ring_task_window=64)
    out = ffi.new("pto_stream **")
    check(lib.pto_stream_create(dev, 0, out))
    s = out[0]
    check(lib.pto_stream_set_overflow(s, 1))
    cq = _cq(dev)
    toks = [new_token() for _ in range(63 + 200)]
    with held(dev, s):
        rcs = [lib.pto_stream_notify(s, t) for t in toks]
        assert rcs == [0] * 63 + [PTO_QUEUED] * 200  # the latch and 63 fill the ring
        assert stream_stats(s).refills == 0
    got = cq.wait(*toks)
    assert [got[t].seq for t in toks] == list(range(2, 2 + len(toks)))  # in order through every batch
    st = stream_stats(s)
    assert st.overflow == 0 and st.completed == len(toks) + 1
    # 200 commands in batches of at least 16 (a quarter of 64), the last perhaps smaller: at most
    # 200 / 16 + 1 hand-offs (an empty ring takes whatever waits, so usually fewer).
    assert 200 // 64 <= st.refills <= 200 // 16 + 1, st.refills
