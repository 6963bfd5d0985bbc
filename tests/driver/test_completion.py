"""native/src/completion.c: the completion queue, its eventfd, drain, wait_token."""

from __future__ import annotations

import select
import threading
import time

import pytest

from helpers import held, new_token
from pypto_async._driver import PTO_ETIMEDOUT, check, ffi, lib

from helpers.raw_driver import device_stats, notify, sync


def readable(fd: int, timeout: float = 0.0) -> bool:
    r, _, _ = select.select([fd], [], [], timeout)
    return bool(r)


def test_fd_follows_the_queue(dev, cq, stream):
    fd = lib.pto_cq_fd(dev)
    assert fd >= 0
    assert not readable(fd)
    assert lib.pto_cq_ready(dev) == 0
    t = new_token()
    notify(stream, t)
    assert readable(fd, 10.0)
    assert lib.pto_cq_ready(dev) == 1
    [rec] = cq.drain()
    assert (rec.token, rec.status, rec.message) == (t, 0, "")
    assert rec.stream_id == lib.pto_stream_id(stream) and rec.seq == 1
    assert 0 < rec.submit_ns <= rec.start_ns <= rec.end_ns <= lib.pto_now_ns()
    assert not readable(fd)
    assert lib.pto_cq_ready(dev) == 0
    assert cq.drain() == []


def test_token_zero_pushes_no_record(dev, cq, stream):
    t = new_token()
    notify(stream, 0)
    notify(stream, t)
    recs = cq.wait(t)
    assert list(cq.records) == [t] and recs[t].seq == 2


def test_small_drains_leave_the_fd_readable(dev, cq, stream):
    fd = lib.pto_cq_fd(dev)
    toks = [new_token() for _ in range(10)]
    with held(dev, stream):
        for t in toks:
            notify(stream, t)
    check(lib.pto_stream_synchronize(stream, 10_000_000))
    while lib.pto_cq_ready(dev) < 10:
        assert lib.pto_cq_wait(dev, 10_000_000) == 0
    got = []
    for expect_left in (7, 4, 1):
        got += cq.drain(3)
        assert lib.pto_cq_ready(dev) == expect_left
        assert readable(fd), f"fd not readable with {expect_left} records left"
    got += cq.drain(3)
    assert not readable(fd)
    assert [r.token for r in got] == toks  # oldest first
    assert [r.seq for r in got] == list(range(2, 12))


def test_a_kept_drain_leaves_the_fd_signalled_and_later_pushes_signal_nothing(dev, cq, stream):
    """pto_cq_drain_keep: records drained one by one cost one signal; the next pto_cq_drain resets the fd."""
    fd = lib.pto_cq_fd(dev)
    out = ffi.new("pto_completion[]", 4)
    st0 = device_stats(dev)
    toks = [new_token() for _ in range(6)]
    for t in toks:
        notify(stream, t)
        while lib.pto_cq_ready(dev) == 0:
            assert lib.pto_cq_wait(dev, 10_000_000) == 0
        assert lib.pto_cq_drain_keep(dev, out, 4) == 1 and out[0].token == t
        assert readable(fd)  # kept: readable with the queue empty
    st = device_stats(dev)
    assert st.cq_records - st0.cq_records == 6
    assert st.cq_signals - st0.cq_signals == 1
    assert cq.drain() == []  # an ordinary drain, of nothing: resets it
    assert not readable(fd)
    t = new_token()
    notify(stream, t)  # signalled again: nothing is stranded behind the reset
    assert readable(fd, 10.0)
    assert [r.token for r in cq.drain()] == [t]
    assert lib.pto_cq_drain_keep(ffi.NULL, out, 1) < 0


def test_cq_wait_times_out_when_idle(dev):
    assert lib.pto_cq_wait(dev, 1000) == -PTO_ETIMEDOUT
    assert lib.pto_cq_wait(dev, 0) == -PTO_ETIMEDOUT


def test_wait_token_copies_and_keeps_the_record(dev, cq, stream):
    t = new_token()
    check(lib.pto_stream_delay(stream, 500, 0))
    notify(stream, t)
    out = ffi.new("pto_completion *")
    assert lib.pto_wait_token(dev, t, 10_000_000, out) == 0
    assert (out.token, out.status) == (t, 0)
    assert lib.pto_cq_ready(dev) == 1
    assert cq.drain()[0].token == t
    # Unknown (or already drained) tokens time out.
    assert lib.pto_wait_token(dev, t, 1000, out) == -PTO_ETIMEDOUT
    assert lib.pto_wait_token(dev, new_token(), 1000, out) == -PTO_ETIMEDOUT


def test_wait_token_releases_the_gil(dev, cq, stream):
    """A thread blocked in pto_wait_token must not stop this thread from releasing the latch."""
    t = new_token()
    result = {}
    started = threading.Event()

    def waiter():
        out = ffi.new("pto_completion *")
        started.set()
        result["rc"] = lib.pto_wait_token(dev, t, 10_000_000, out)
        result["status"] = out.status

    with held(dev, stream) as h:
        notify(stream, t)
        th = threading.Thread(target=waiter)
        th.start()
        assert started.wait(10)
        h.release()  # needs the GIL while the waiter sits in C
        th.join(15)
    assert not th.is_alive()
    assert result == {"rc": 0, "status": 0}
    cq.wait(t)


def test_device_counters_move(dev, cq, stream):
    st0 = device_stats(dev)
    toks = [new_token() for _ in range(5)]
    notify(stream, 0)  # first: the records waited for below come after it completed
    for t in toks:
        notify(stream, t)
    cq.wait(*toks)
    st = device_stats(dev)
    # The counter is bumped just after a command's head moves, so a later command's record can
    # overtake the bump by a few instructions: wait (bounded) for the count, do not race it.
    deadline = time.monotonic() + 10
    while st.commands_completed - st0.commands_completed < 6 and time.monotonic() < deadline:
        time.sleep(0.001)
        st = device_stats(dev)
    assert st.commands_submitted - st0.commands_submitted == 6
    assert st.commands_completed - st0.commands_completed == 6
    assert st.cq_records - st0.cq_records == 5
    assert 1 <= st.cq_signals - st0.cq_signals <= 5
    assert 1 <= st.cq_drains - st0.cq_drains <= 5


@pytest.mark.parametrize("batch", [1, 7])
def test_everything_drains_eventually(dev, cq, new_stream, batch):
    streams = [new_stream() for _ in range(3)]
    toks = [new_token() for _ in range(90)]
    for i, t in enumerate(toks):
        notify(streams[i % 3], t)
    fd = lib.pto_cq_fd(dev)
    while len(cq.records) < len(toks):
        assert readable(fd, 10.0)
        cq.drain(batch)
    assert sorted(cq.records) == sorted(toks)
    assert not readable(fd)


def test_only_a_streams_first_failure_carries_the_first_failure_flag(dev, cq, stream):
    first, dependent, later = new_token(), new_token(), new_token()
    with held(dev, stream):
        check(lib.pto_debug_fail_next(stream, 0, 1))
        notify(stream, first)
        notify(stream, dependent)
    got = cq.wait(first, dependent)
    assert got[first].status == -lib.PTO_EFAULT
    assert got[first].flags & lib.PTO_CQ_FIRST_FAILURE
    assert got[dependent].status == -lib.PTO_EDEP
    assert not got[dependent].flags & lib.PTO_CQ_FIRST_FAILURE
    assert got[dependent].fail_id == got[first].fail_id != 0  # both name the stream's failure
    notify(stream, later)
    # Drained is not delivered: the failure stands, whenever the records were drained.
    assert cq.wait(later)[later].status == -lib.PTO_EDEP
    assert cq.observe(dependent) == 1  # a dependent's error reached its user: observed
    assert cq.observe(first) == 0      # once
    healthy = new_token()
    notify(stream, healthy)
    rec = cq.wait(healthy)[healthy]
    assert rec.status == 0 and rec.flags == 0 and rec.fail_id == 0


def test_the_queue_doubles_around_its_wrap_and_keeps_every_record_in_order(dev, cq, stream):
    # Its first 256 slots hold 100 records, 60 of them drained: the ring then wraps and must
    # double twice (256 -> 512 -> 1024) with its oldest record in the middle of the array.
    toks = [new_token() for _ in range(700)]
    for t in toks[:100]:
        notify(stream, t)
    sync(stream)
    got = []
    while len(got) < 60:
        got += cq.drain(60 - len(got))
    for k in range(100, 700, 100):
        for t in toks[k:k + 100]:
            notify(stream, t)
        sync(stream)
    assert lib.pto_cq_ready(dev) == 640
    out = ffi.new("pto_completion *")
    for t in (toks[60], toks[255], toks[256], toks[511], toks[699]):  # found, and left queued
        check(lib.pto_wait_token(dev, t, 10_000_000, out))
        assert out.token == t
    assert lib.pto_cq_ready(dev) == 640
    while len(got) < 700:
        got += cq.drain()
    assert [r.token for r in got] == toks
    assert [r.seq for r in got] == list(range(1, 701))
    assert lib.pto_cq_ready(dev) == 0 and not readable(lib.pto_cq_fd(dev))
