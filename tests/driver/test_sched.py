"""native/src/sched.c and engines.c: what a scheduler pass visits, and who runs ready work."""

from __future__ import annotations

from helpers import new_token
from pypto_async._driver import check, ffi, lib

from .util import device_stats, notify, sync


def test_a_pass_visits_only_streams_with_work(dev, cq, new_stream):
    """Idle open streams cost a pass nothing: passes visit the ready list, not every stream."""
    idle = [new_stream() for _ in range(300)]
    busy = new_stream()
    before = device_stats(dev)
    tokens = [new_token() for _ in range(50)]
    for t in tokens:
        notify(busy, t)
        sync(busy)  # one command at a time: each one runs its own passes
    cq.wait(*tokens)
    after = device_stats(dev)
    passes = after.sched_passes - before.sched_passes
    visits = after.sched_visits - before.sched_visits
    assert passes >= len(tokens)
    # A full scan would visit 301 streams per pass; the ready list holds at most the busy one.
    assert visits <= passes
    del idle


def test_a_priority_stream_still_goes_first_from_the_ready_list(dev, cq, new_stream):
    """Streams rung low priority first start high priority first: the ready list keeps priority order."""
    out = ffi.new("pto_latch **")
    check(lib.pto_latch_create(dev, 0, out))
    latch = out[0]
    low, high = new_stream(priority=0), new_stream(priority=5)
    t_low, t_high = new_token(), new_token()
    for s, t in ((low, t_low), (high, t_high)):
        check(lib.pto_stream_latch_wait(s, latch, 0))
        notify(s, t)
    lib.pto_latch_release(latch)  # one pass under sched_lock starts both
    recs = cq.wait(t_low, t_high)
    assert recs[t_high].end_ns <= recs[t_low].start_ns
    lib.pto_latch_destroy(latch)
