"""A worker sync looks only at the streams that can carry a failure it has not seen (runtime/_stream.sync_point).

Those given work since the last worker sync, and those whose marker of an
earlier one has not completed healthy.  Every other open stream carries no
failure, so it gets no marker: a sync costs the streams used since, not
every open stream.  The rule it keeps is the one of
tests/runtime/test_stream_failures.py: the first failure an open stream
carries, in stream order, is raised (delivered); the others stay for later.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

from pypto_async.errors import PtoDependencyError, PtoTimeout
from pypto_async.runtime import _worker
from pypto_async.testing import hold

N = 64


@pytest.fixture
def marked(monkeypatch):
    """The streams (ids) each worker sync queued a marker on, one list per sync."""
    seen = []
    real = _worker.sync_point

    def spy(worker):
        point = real(worker)
        seen.append([m._stream.id for m in point._markers])
        return point

    monkeypatch.setattr(_worker, "sync_point", spy)
    return seen


def _rand(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(N).astype(np.float32)


def test_a_sync_marks_only_the_streams_used_since_the_last(worker, kernels, marked):
    inc = worker.register(kernels.get("inc", N))
    streams = [worker.stream() for _ in range(40)]
    worker.sync(timeout=10)  # the streams' creation queued nothing
    marked.clear()
    x = _rand(1)
    t = worker.alloc_tensor(N, np.float32, init=x, stream=streams[3])
    inc(t, stream=streams[3])
    inc(_rand(2), stream=streams[30])
    worker.sync(timeout=10)
    worker.sync(timeout=10)  # nothing since: no marker at all
    inc(t, stream=streams[3])
    worker.sync(timeout=10)
    assert marked == [sorted([streams[3].id, streams[30].id]), [], [streams[3].id]]
    np.testing.assert_array_equal(t.numpy(stream=streams[3]), (x + np.float32(1)) + np.float32(1))
    t.free(stream=streams[3])
    worker.sync(timeout=10)


def test_a_failure_left_by_one_sync_is_the_next_ones_with_no_new_work(worker, kernels, marked):
    fail = worker.register(kernels.get("fail", N))
    a, b, idle = worker.stream(), worker.stream(), worker.stream()
    t = worker.alloc_tensor(N, np.float32, init=_rand(3), stream=a)
    u = worker.alloc_tensor(N, np.float32, init=_rand(4), stream=b)
    worker.sync(timeout=10)
    fa, fb = fail.submit(t, stream=a), fail.submit(u, stream=b)
    with pytest.raises(PtoDependencyError) as first:
        worker.sync(timeout=10)  # a's, the lower stream id
    with pytest.raises(PtoDependencyError) as second:
        worker.sync(timeout=10)  # nothing queued since: b still carries its failure, and it is raised
    assert first.value.__cause__ is fa.exception() and second.value.__cause__ is fb.exception()
    worker.sync(timeout=10)  # both delivered
    worker.sync(timeout=10)
    assert idle.id not in {sid for ids in marked for sid in ids}
    assert marked[-1] == []  # the last sync looked at nothing: every marker before it was healthy
    t.free(stream=a)
    u.free(stream=b)
    worker.sync(timeout=10)


def test_a_sync_that_timed_out_leaves_its_streams_to_the_next(worker, kernels, marked):
    fail = worker.register(kernels.get("fail", N))
    s = worker.stream()
    t = worker.alloc_tensor(N, np.float32, init=_rand(5), stream=s)
    worker.sync(timeout=10)
    with hold(s) as latch:
        failed = fail.submit(t, stream=s)
        with pytest.raises(PtoTimeout):
            worker.sync(timeout=0.05)  # its marker is queued behind the latch, not done
        latch.release()
    with pytest.raises(PtoDependencyError) as info:
        worker.sync(timeout=10)  # no work since, but the earlier marker never completed healthy
    assert info.value.__cause__ is failed.exception()
    assert marked[-1] == [s.id]
    t.free(stream=s)
    worker.sync(timeout=10)


def test_streams_closed_or_dropped_before_any_sync_leave_nothing_for_it(worker, kernels, marked):
    # A service that opens a stream per request and never syncs the worker must not grow the set a
    # sync would look at: a closed stream gets no marker, so closing (or dropping) it takes it out.
    inc = worker.register(kernels.get("inc", N))
    worker.sync(timeout=10)
    marked.clear()
    q = worker._queue
    kept = worker.stream()
    x = _rand(3)
    t = worker.alloc_tensor(N, np.float32, init=x, stream=kept)
    for i in range(50):
        s = worker.stream()
        inc(_rand(10 + i), stream=s)
        if i % 2:
            s.close()
        del s  # the others are dropped unclosed: their finalizer takes them out
    inc(t, stream=kept)
    gc.collect()  # a dropped stream goes when the last thing holding it does
    # What is left: the stream still open, and the worker's fold point (closed streams' last points
    # join it; a sync gives it no marker either).
    assert set(q.used) <= {kept.id, worker._default_stream.id, worker._fold.id}
    worker.sync(timeout=10)
    assert kept.id in marked[-1] and len(marked[-1]) <= 2
    np.testing.assert_array_equal(t.numpy(stream=kept), x + np.float32(1))
    t.free(stream=kept)
