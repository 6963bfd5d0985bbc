"""native/src/latch.c and debug.c: latch (release, timeout, shared), delay, fail injection."""

from __future__ import annotations

from helpers import held, new_token
from pypto_async._driver import PTO_ECANCELED, PTO_EDEP, PTO_ETIMEDOUT, check, ffi, lib

from helpers.raw_driver import notify, sync


def _latch(dev, timeout_us):
    out = ffi.new("pto_latch **")
    check(lib.pto_latch_create(dev, timeout_us, out))
    return out[0]


def test_latch_expires_with_timeout_and_stream_recovers(dev, cq, stream):
    latch = _latch(dev, 2000)
    t_latch, t_after = new_token(), new_token()
    check(lib.pto_stream_latch_wait(stream, latch, t_latch))
    notify(stream, t_after)
    recs = cq.wait(t_latch, t_after)
    assert recs[t_latch].status == -PTO_ETIMEDOUT
    assert recs[t_after].status == -PTO_EDEP and recs[t_after].cause_token == t_latch
    assert lib.pto_latch_expired(latch) == 1  # what the pytest plugin fails a test for
    assert cq.observe(t_latch) == 1
    t = new_token()
    notify(stream, t)
    assert cq.wait(t)[t].status == 0
    lib.pto_latch_destroy(latch)


def test_release_is_sticky(dev, cq, stream):
    latch = _latch(dev, 0)
    lib.pto_latch_release(latch)
    t = new_token()
    check(lib.pto_stream_latch_wait(stream, latch, t))
    assert cq.wait(t)[t].status == 0
    assert lib.pto_latch_expired(latch) == 0 and lib.pto_latch_expired(ffi.NULL) == 0
    lib.pto_latch_destroy(latch)


def test_one_latch_holds_several_streams(dev, cq, new_stream):
    streams = [new_stream() for _ in range(3)]
    toks = [new_token() for _ in streams]
    with held(dev, streams[0]) as h:
        for s in streams[1:]:
            h.hold(s)
        for s, t in zip(streams, toks):
            notify(s, t)
        for s in streams:
            assert lib.pto_stream_synchronize(s, 1000) == -PTO_ETIMEDOUT
    recs = cq.wait(*toks)
    assert all(recs[t].status == 0 for t in toks)


def test_destroying_a_latch_releases_its_waiters(dev, cq, stream):
    latch = _latch(dev, 0)
    t = new_token()
    check(lib.pto_stream_latch_wait(stream, latch, 0))
    notify(stream, t)
    lib.pto_latch_destroy(latch)
    assert cq.wait(t)[t].status == 0


def test_cancel_releases_latches(dev, cq, stream):
    latch = _latch(dev, 0)
    t = new_token()
    check(lib.pto_stream_latch_wait(stream, latch, 0))
    notify(stream, t)
    lib.pto_device_cancel(dev)
    assert cq.wait(t)[t].status == -PTO_ECANCELED
    sync(stream)
    lib.pto_latch_destroy(latch)
