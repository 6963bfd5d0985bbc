"""pto_stream_cancel_tokens: withdraw commands not yet started, in the ring or the overflow (overflow.c, exec.c)."""

from __future__ import annotations

import numpy as np

from helpers import CompletionLog, held, new_token
from pypto_async._driver import PTO_ECANCELED, PTO_EINVAL, check, lib

from helpers.raw_driver import alloc, builtin, d2h, f32_bits, h2d, launch, mem_stats, new_event, notify, sync

N = 64


def test_commands_in_the_ring_behind_a_latch_are_withdrawn_and_later_work_runs(dev, stream):
    cq = CompletionLog(dev)
    x = alloc(dev, N * 4, stream)
    data = np.random.default_rng(5).uniform(1, 2, N).astype(np.float32)
    out = np.full(N, np.nan, np.float32)
    h2d(stream, x, data)
    sync(stream)
    toks = [new_token() for _ in range(4)]
    ev = new_event(dev)
    with held(dev, stream):
        launch(stream, builtin(dev, "fill_f32"), 2, [x, f32_bits(-7.0), N], toks[0])
        d2h(stream, out, x, toks[1])  # in the ring, not started
        check(lib.pto_stream_record(stream, ev, toks[2]))
        notify(stream, toks[3])
        assert lib.pto_stream_cancel_tokens(stream, toks[0], toks[2]) == 0  # holds a record: nothing changes
        assert lib.pto_stream_cancel_tokens(stream, toks[0], toks[1]) == 2
        assert lib.pto_stream_cancel_tokens(stream, toks[0], toks[1]) == 0  # withdrawn already
        assert lib.pto_stream_cancel_tokens(stream, 0, 1) == -PTO_EINVAL
    got = cq.wait(*toks)
    assert [got[t].status for t in toks] == [-PTO_ECANCELED, -PTO_ECANCELED, 0, 0]
    assert np.isnan(out).all()  # the withdrawn copy never ran
    assert lib.pto_event_query(ev) == 1  # the record after them fired, healthy
    back = np.zeros(N, np.float32)
    d2h(stream, back, x)
    sync(stream)
    np.testing.assert_array_equal(back, data)  # the withdrawn fill never ran
    check(lib.pto_stream_free(stream, x, 0))
    sync(stream)
    lib.pto_event_destroy(ev)


def test_a_withdrawn_wait_still_orders_what_follows_it(dev, stream, stream2):
    """Withdrawn, a wait still waits for its event: the stream's later work stays behind the other stream."""
    cq = CompletionLog(dev)
    x = alloc(dev, N * 4, stream)
    out = np.full(N, np.nan, np.float32)
    ev = new_event(dev)
    wait_tok, after = new_token(), new_token()
    with held(dev, stream) as h:
        launch(stream, builtin(dev, "fill_f32"), 1, [x, f32_bits(3.0), N])
        check(lib.pto_stream_record(stream, ev, 0))
        check(lib.pto_stream_wait_event(stream2, ev, wait_tok))
        d2h(stream2, out, x, after)
        assert lib.pto_stream_cancel_tokens(stream2, wait_tok, wait_tok) == 1
        assert lib.pto_stream_synchronize(stream2, 50_000) == -lib.PTO_ETIMEDOUT  # still waiting
        h.release()
    got = cq.wait(wait_tok, after)
    assert got[wait_tok].status == -PTO_ECANCELED and got[after].status == 0
    np.testing.assert_array_equal(out, np.full(N, 3.0, np.float32))  # read after the fill
    check(lib.pto_stream_free(stream, x, 0))
    sync(stream)
    lib.pto_event_destroy(ev)


def test_a_withdrawn_free_still_gives_its_block_back(dev, stream):
    x = alloc(dev, N * 4, stream)
    t = new_token()
    with held(dev, stream):
        check(lib.pto_stream_free(stream, x, t))
        assert lib.pto_stream_cancel_tokens(stream, t, t) == 1
    sync(stream)
    st = mem_stats(dev)
    assert (st.allocations, st.pending_frees) == (0, 0)
