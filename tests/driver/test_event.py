"""native/src/event.c: record, device-side wait, query, synchronize, elapsed time."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import held, new_token
from pypto_async._driver import PTO_ETIMEDOUT, check, ffi, lib
from pypto_async.errors import PtoTryAgain

from helpers.raw_driver import alloc, builtin, d2h, h2d, new_event, notify, sync


@pytest.fixture
def event(dev):
    ev = new_event(dev)
    yield ev
    lib.pto_event_destroy(ev)


def test_never_recorded_event_is_complete(dev, cq, stream, event):
    assert lib.pto_event_query(event) == 1
    assert lib.pto_event_synchronize(event, 1000) == 1
    assert lib.pto_event_timestamp_ns(event) == 0
    t = new_token()
    check(lib.pto_stream_wait_event(stream, event, 0))  # a no-op
    notify(stream, t)
    assert cq.wait(t)[t].status == 0


def test_query_and_synchronize_follow_the_recorded_work(dev, cq, stream, event):
    t = new_token()
    with held(dev, stream):
        check(lib.pto_stream_record(stream, event, t))
        assert lib.pto_event_query(event) == 0
        assert lib.pto_event_synchronize(event, 2000) == -PTO_ETIMEDOUT
        assert lib.pto_event_timestamp_ns(event) == 0
    assert lib.pto_event_synchronize(event, 10_000_000) == 1
    assert lib.pto_event_query(event) == 1
    rec = cq.wait(t)[t]
    assert rec.status == 0
    ts = lib.pto_event_timestamp_ns(event)
    assert rec.submit_ns <= ts <= lib.pto_now_ns()


def test_elapsed_time_spans_a_delay(dev, stream, new_stream):
    e1, e2 = new_event(dev), new_event(dev)
    ms = ffi.new("double *")
    with held(dev, stream):
        check(lib.pto_stream_record(stream, e1, 0))
        check(lib.pto_stream_delay(stream, 2000, 0))
        check(lib.pto_stream_record(stream, e2, 0))
        with pytest.raises(PtoTryAgain):
            check(lib.pto_event_elapsed_ms(e1, e2, ms))
    sync(stream)
    check(lib.pto_event_elapsed_ms(e1, e2, ms))
    assert ms[0] >= 2.0  # e1 completed before the delay started, e2 after it ended
    forward = ms[0]
    check(lib.pto_event_elapsed_ms(e2, e1, ms))
    assert ms[0] == pytest.approx(-forward)
    lib.pto_event_destroy(e1)
    lib.pto_event_destroy(e2)


def _copy_across(dev, cq, stream, stream2, rng, edge) -> None:
    """Copy random bytes in on `stream`, `edge()`, copy them out on `stream2`: it must see them.

    `stream` is held on a latch until the copy out has had every chance to run too early.
    """
    n = 1 << 16
    data = rng.integers(0, 256, n, dtype=np.uint8)
    out = np.full(n, 0x55, dtype=np.uint8)
    p = alloc(dev, n, stream)
    check(lib.pto_stream_memset(stream, p, 0xAA, n, 0))
    sync(stream)
    t = new_token()
    with held(dev, stream):
        h2d(stream, p, data)
        edge()
        d2h(stream2, out, p, t)
        assert lib.pto_stream_synchronize(stream2, 2000) == -PTO_ETIMEDOUT
        cq.drain_all()
        assert t not in cq and (out == 0x55).all()
    assert cq.wait(t)[t].status == 0
    np.testing.assert_array_equal(out, data)
    check(lib.pto_stream_free(stream, p, 0))
    sync(stream)


def test_wait_orders_work_across_streams(dev, cq, stream, stream2, event, rng):
    """B reads what A writes, because B waits for an event A records after the write."""

    def edge():
        check(lib.pto_stream_record(stream, event, 0))
        check(lib.pto_stream_wait_event(stream2, event, 0))

    _copy_across(dev, cq, stream, stream2, rng, edge)


def test_wait_uses_the_recording_at_the_time_of_the_call(dev, cq, new_stream, event):
    a, b, c = new_stream(), new_stream(), new_stream()
    t = new_token()
    with held(dev, a):
        check(lib.pto_stream_record(a, event, 0))
        check(lib.pto_stream_wait_event(b, event, 0))
        notify(b, t)
        check(lib.pto_stream_record(c, event, 0))  # re-record on an idle stream
        sync(c)
        assert lib.pto_event_query(event) == 1  # the event now follows c
        # ...but b waits on a's recording, still held.
        assert lib.pto_stream_synchronize(b, 2000) == -PTO_ETIMEDOUT
        cq.drain_all()
        assert t not in cq
    assert cq.wait(t)[t].status == 0


def test_destroyed_event_still_orders_queued_waits(dev, cq, stream, stream2):
    ev = new_event(dev)
    t = new_token()
    with held(dev, stream):
        check(lib.pto_stream_record(stream, ev, 0))
        check(lib.pto_stream_wait_event(stream2, ev, 0))
        notify(stream2, t)
        lib.pto_event_destroy(ev)
        assert lib.pto_stream_synchronize(stream2, 2000) == -PTO_ETIMEDOUT
    assert cq.wait(t)[t].status == 0


def _fail_and_observe(cq, stream) -> tuple[int, int]:
    """Fail a command on `stream` and deliver its record; return (its token, the epoch before)."""
    fail_t = new_token()
    before = lib.pto_stream_epoch(stream)
    check(lib.pto_debug_fail_next(stream, 0, 1))
    notify(stream, fail_t)
    assert cq.wait(fail_t)[fail_t].status == -lib.PTO_EFAULT
    assert lib.pto_stream_epoch(stream) == before  # drained: not observed
    assert cq.observe(fail_t) == 1
    assert lib.pto_stream_epoch(stream) == before + 1
    return fail_t, before


def test_backdated_record_fails_waiters_but_not_its_own_stream(dev, cq, stream, new_stream):
    """A record a host held back from before an observed failure carries it to waiters only."""
    waiter = new_stream()
    ev = new_event(dev)
    fail_t, before = _fail_and_observe(cq, stream)
    rec_t, wait_t, after_wait_t, own_t = (new_token() for _ in range(4))
    check(lib.pto_stream_backdate(stream, before))
    check(lib.pto_stream_record(stream, ev, rec_t))
    check(lib.pto_stream_backdate(stream, lib.PTO_EPOCH_NOW))
    check(lib.pto_stream_wait_event(waiter, ev, wait_t))
    notify(waiter, after_wait_t)
    notify(stream, own_t)
    got = cq.wait(rec_t, wait_t, after_wait_t, own_t)
    assert got[rec_t].status == -lib.PTO_EDEP and got[rec_t].cause_token == fail_t
    assert lib.pto_event_query(ev) == -lib.PTO_EDEP
    assert got[wait_t].status == -lib.PTO_EDEP and got[wait_t].cause_token == fail_t
    assert got[after_wait_t].status == -lib.PTO_EDEP  # the waiter fails as a dependent
    assert got[own_t].status == 0                     # the recording stream stays healthy
    lib.pto_event_destroy(ev)


def test_wait_on_a_failed_stream_still_waits_for_its_event(dev, cq, stream, new_stream):
    """Work behind a wait (a stream-ordered free above all) stays ordered after the other stream."""
    other = new_stream()
    ev = new_event(dev)
    fail_t, wait_t, after_t = new_token(), new_token(), new_token()
    with held(dev, other) as latch:
        check(lib.pto_stream_record(other, ev, 0))
        check(lib.pto_debug_fail_next(stream, 0, 1))
        notify(stream, fail_t)                       # fails: stream's first failure
        check(lib.pto_stream_wait_event(stream, ev, wait_t))
        notify(stream, after_t)
        assert cq.wait(fail_t)[fail_t].status == -lib.PTO_EFAULT
        assert lib.pto_stream_synchronize(stream, 20_000) == -PTO_ETIMEDOUT  # the wait holds
        assert lib.pto_stream_completed(stream) < lib.pto_stream_submitted(stream)
        latch.release()
    got = cq.wait(wait_t, after_t)
    assert got[wait_t].status == -lib.PTO_EDEP  # submitted before the failure was observed
    assert got[after_t].status == -lib.PTO_EDEP
    lib.pto_event_destroy(ev)


def test_backdated_wait_waits_then_fails_only_as_a_dependent(dev, cq, stream, new_stream):
    """A wait held back from before an observed failure: still ordered, never a new failure."""
    other = new_stream()
    ev = new_event(dev)
    fail_t, before = _fail_and_observe(cq, stream)
    wait_t, after_t = new_token(), new_token()
    with held(dev, other) as latch:
        check(lib.pto_stream_record(other, ev, 0))
        check(lib.pto_stream_backdate(stream, before))
        check(lib.pto_stream_wait_event(stream, ev, wait_t))
        check(lib.pto_stream_backdate(stream, lib.PTO_EPOCH_NOW))
        notify(stream, after_t)
        assert lib.pto_stream_synchronize(stream, 20_000) == -PTO_ETIMEDOUT  # the wait holds
        latch.release()
    got = cq.wait(wait_t, after_t)
    assert got[wait_t].status == -lib.PTO_EDEP and got[wait_t].cause_token == fail_t
    assert not got[wait_t].flags & lib.PTO_CQ_FIRST_FAILURE  # not news about its stream
    assert got[after_t].status == 0                          # the stream stays healthy
    lib.pto_event_destroy(ev)


# -- pto_stream_wait_stream: an inferred edge in one call -------------------------------------------


def test_wait_stream_orders_work_across_streams(dev, cq, stream, stream2, event, rng):
    """What stream2 queues after the edge runs after what stream had queued before it."""

    def edge():
        assert lib.pto_stream_wait_stream(stream2, stream, event, new_token()) == 0

    _copy_across(dev, cq, stream, stream2, rng, edge)


def test_wait_stream_is_quiet_on_success(dev, cq, stream, stream2, event):
    wait_t, after_t = new_token(), new_token()
    notify(stream, new_token())
    check(lib.pto_stream_wait_stream(stream2, stream, event, wait_t))
    notify(stream2, after_t)
    cq.wait(after_t)
    sync(stream)
    cq.drain_all()
    assert wait_t not in cq  # no record for a wait that did not fail


def test_injected_failures_pass_the_edge_by(dev, cq, stream, stream2, event):
    """An edge is not the caller's command: fail_next hits the next command of each stream."""
    src_t, dst_t = new_token(), new_token()
    check(lib.pto_debug_fail_next(stream, 0, 1))
    check(lib.pto_debug_fail_next(stream2, 0, 1))
    check(lib.pto_stream_wait_stream(stream2, stream, event, new_token()))
    notify(stream, src_t)
    notify(stream2, dst_t)
    got = cq.wait(src_t, dst_t)
    assert got[src_t].status == -lib.PTO_EFAULT and got[src_t].flags & lib.PTO_CQ_FIRST_FAILURE
    assert got[dst_t].status == -lib.PTO_EFAULT and got[dst_t].flags & lib.PTO_CQ_FIRST_FAILURE


def test_wait_stream_carries_a_failure_and_reports_it_once(dev, cq, stream, stream2, event):
    """A failure before the edge fails the waiting stream's later work, which runs again once observed."""
    fail_t, wait_t, after_t = new_token(), new_token(), new_token()
    with held(dev, stream):
        check(lib.pto_debug_fail_next(stream, 0, 1))
        notify(stream, fail_t)
        check(lib.pto_stream_wait_stream(stream2, stream, event, wait_t))
        notify(stream2, after_t)
    got = cq.wait(fail_t, wait_t, after_t)
    assert got[fail_t].status == -lib.PTO_EFAULT
    # The wait's own failure: a record, news about stream2, naming the first failure.
    assert got[wait_t].status == -lib.PTO_EDEP and got[wait_t].cause_token == fail_t
    assert got[wait_t].flags & lib.PTO_CQ_FIRST_FAILURE
    assert got[after_t].status == -lib.PTO_EDEP and got[after_t].cause_token == fail_t
    # after_t's error delivered: stream2's failure observed, and stream's it came from.
    assert cq.observe(after_t) == 1
    assert cq.observe(fail_t) == 0
    healthy, healthy1 = new_token(), new_token()
    notify(stream2, healthy)
    notify(stream, healthy1)
    assert cq.wait(healthy)[healthy].status == 0
    assert cq.wait(healthy1)[healthy1].status == 0


def test_wait_stream_refuses_one_stream_or_two_devices(dev, open_dev, stream, new_stream, event):
    from pypto_async.errors import PtoArgumentError

    with pytest.raises(PtoArgumentError):
        check(lib.pto_stream_wait_stream(stream, stream, event, 0))
    other = open_dev()
    out = ffi.new("pto_stream **")
    check(lib.pto_stream_create(other, 0, out))
    with pytest.raises(PtoArgumentError):
        check(lib.pto_stream_wait_stream(out[0], stream, event, 0))
    lib.pto_stream_destroy(out[0])


# -- pto_stream_wait_event_quiet: an explicit wait with a record only on failure --------------------


def test_wait_event_quiet_orders_work_across_streams(dev, cq, stream, stream2, event, rng):
    def wait():
        check(lib.pto_stream_record(stream, event, 0))
        assert lib.pto_stream_wait_event_quiet(stream2, event, new_token()) == 0

    _copy_across(dev, cq, stream, stream2, rng, wait)


def test_wait_event_quiet_is_quiet_on_success(dev, cq, stream, stream2, event):
    rec_t, wait_t, after_t = new_token(), new_token(), new_token()
    with held(dev, stream):
        check(lib.pto_stream_record(stream, event, rec_t))
        check(lib.pto_stream_wait_event_quiet(stream2, event, wait_t))
        notify(stream2, after_t)
    got = cq.wait(rec_t, after_t)
    assert got[rec_t].status == 0 and got[after_t].status == 0
    sync(stream2)
    cq.drain_all()
    assert wait_t not in cq  # no record for a wait that did not fail


def test_wait_event_quiet_carries_a_failure_and_reports_it_once(dev, cq, stream, stream2, event):
    fail_t, wait_t, after_t = new_token(), new_token(), new_token()
    with held(dev, stream):
        check(lib.pto_debug_fail_next(stream, 0, 1))
        notify(stream, fail_t)
        check(lib.pto_stream_record(stream, event, 0))
        check(lib.pto_stream_wait_event_quiet(stream2, event, wait_t))
        notify(stream2, after_t)
    got = cq.wait(fail_t, wait_t, after_t)
    assert got[fail_t].status == -lib.PTO_EFAULT
    assert got[wait_t].status == -lib.PTO_EDEP and got[wait_t].flags & lib.PTO_CQ_FIRST_FAILURE
    assert got[after_t].status == -lib.PTO_EDEP and got[after_t].cause_token == fail_t
    assert cq.observe(after_t) == 1  # stream2's failure, and stream's it came from
    healthy, healthy1 = new_token(), new_token()
    notify(stream2, healthy)
    notify(stream, healthy1)
    assert cq.wait(healthy)[healthy].status == 0
    assert cq.wait(healthy1)[healthy1].status == 0


def test_an_injected_failure_hits_a_quiet_event_wait(dev, cq, stream, stream2, event):
    """Unlike an inferred edge, the wait is the caller's command: fail_next hits it (a record)."""
    wait_t, after_t = new_token(), new_token()
    check(lib.pto_stream_record(stream, event, 0))
    check(lib.pto_debug_fail_next(stream2, 0, 1))
    check(lib.pto_stream_wait_event_quiet(stream2, event, wait_t))
    notify(stream2, after_t)
    got = cq.wait(wait_t, after_t)
    assert got[wait_t].status == -lib.PTO_EFAULT and got[wait_t].flags & lib.PTO_CQ_FIRST_FAILURE
    assert got[after_t].status == -lib.PTO_EDEP


def test_wait_event_quiet_refuses_another_devices_event(dev, open_dev, stream):
    from pypto_async.errors import PtoArgumentError

    other = open_dev()
    ev = new_event(other)
    with pytest.raises(PtoArgumentError):
        check(lib.pto_stream_wait_event_quiet(stream, ev, 0))
    lib.pto_event_destroy(ev)


# -- pto_stream_launch_after: an inferred edge and the launch it orders, in one call -----------------


def _args(*values):
    return ffi.new("uint64_t[]", [int(v) for v in values])


def test_launch_after_runs_after_the_other_streams_work(dev, cq, stream, stream2, event, rng):
    n = 4097
    a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    out = np.full(n, np.nan, dtype=np.float32)
    pa, pb, po = alloc(dev, 4 * n, stream), alloc(dev, 4 * n, stream), alloc(dev, 4 * n, stream)
    h2d(stream, po, out)  # poisoned
    add, t = builtin(dev, "add_f32"), new_token()
    with held(dev, stream):
        h2d(stream, pa, a)
        h2d(stream, pb, b)
        assert lib.pto_stream_launch_after(stream2, stream, event, new_token(), add, 3,
                                           _args(pa, pb, po, n), 4, t) == 0
        assert lib.pto_stream_synchronize(stream2, 2000) == -PTO_ETIMEDOUT
        cq.drain_all()
        assert t not in cq
    assert cq.wait(t)[t].status == 0
    d2h(stream2, out, po)
    sync(stream2)
    np.testing.assert_array_equal(out, a + b)
    for p in (pa, pb, po):
        check(lib.pto_stream_free(stream2, p, 0))
    sync(stream2)


def test_launch_after_queues_nothing_unless_both_are_valid(dev, stream, stream2, event):
    from pypto_async.errors import PtoArgumentError

    noop = builtin(dev, "noop")
    before = (lib.pto_stream_accepted(stream), lib.pto_stream_accepted(stream2))
    with pytest.raises(PtoArgumentError, match="blocks"):
        check(lib.pto_stream_launch_after(stream2, stream, event, 0, noop, 0, ffi.NULL, 0, 0))
    with pytest.raises(PtoArgumentError, match="distinct streams"):
        check(lib.pto_stream_launch_after(stream, stream, event, 0, noop, 1, ffi.NULL, 0, 0))
    assert (lib.pto_stream_accepted(stream), lib.pto_stream_accepted(stream2)) == before


def test_launch_after_carries_a_failure_to_the_launch(dev, cq, stream, stream2, event):
    fail_t, wait_t, launch_t = new_token(), new_token(), new_token()
    with held(dev, stream):
        check(lib.pto_debug_fail_next(stream, 0, 1))
        notify(stream, fail_t)
        check(lib.pto_stream_launch_after(stream2, stream, event, wait_t, builtin(dev, "noop"), 1,
                                          ffi.NULL, 0, launch_t))
    got = cq.wait(fail_t, launch_t)
    assert got[fail_t].status == -lib.PTO_EFAULT
    # The edge rides on the launch (a fence, no wait command): the failure it carries is the launch's own.
    assert got[launch_t].status == -lib.PTO_EDEP and got[launch_t].cause_token == fail_t
    assert got[launch_t].flags & lib.PTO_CQ_FIRST_FAILURE
    assert wait_t not in cq.records


def test_launch_after_reports_what_went_to_overflow(open_dev, new_stream):
    """Behind a latch a 4-slot ring fills: the launch goes to the overflow; neither ring gets an edge command.

    The edge is a fence of src (a point of its work, no command there) that
    the launch carries inline (no wait command on dst either): one command
    per launch_after.
    """
    dev = open_dev(ring_task_window=4)
    src, dst = new_stream(device=dev), new_stream(device=dev)
    for s in (src, dst):
        check(lib.pto_stream_set_overflow(s, 1))
    event = new_event(dev)
    noop, seen = builtin(dev, "noop"), set()
    with held(dev, src) as h:
        h.hold(dst)
        before = lib.pto_stream_accepted(src)
        for _ in range(6):
            rc = lib.pto_stream_launch_after(dst, src, event, 0, noop, 1, ffi.NULL, 0, 0)
            assert rc >= 0
            seen.add(rc)
        assert lib.pto_stream_accepted(src) == before  # nothing queued on src
    sync(src)
    sync(dst)
    lib.pto_event_destroy(event)
    for s in (src, dst):
        lib.pto_stream_destroy(s)
    assert 0 in seen  # room at first
    assert seen == {0, lib.PTO_QUEUED}  # the launch, later; no edge command anywhere


def test_an_edge_record_and_wait_pass_injected_failures_by(dev, cq, stream, stream2, event):
    rec_t, wait_t, src_t, dst_t = (new_token() for _ in range(4))
    check(lib.pto_debug_fail_next(stream, 0, 1))
    check(lib.pto_debug_fail_next(stream2, 0, 1))
    check(lib.pto_stream_record_edge(stream, event, rec_t))
    check(lib.pto_stream_wait_edge(stream2, event, wait_t))
    notify(stream, src_t)
    notify(stream2, dst_t)
    got = cq.wait(rec_t, wait_t, src_t, dst_t)
    assert got[rec_t].status == 0 and got[wait_t].status == 0  # not quiet: both have records
    assert got[src_t].status == -lib.PTO_EFAULT and got[dst_t].status == -lib.PTO_EFAULT
