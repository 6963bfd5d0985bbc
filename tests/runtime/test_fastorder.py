"""The compiled common case of automatic ordering (native/python/fastorder.c).

``Hazards.order`` hands every call to the compiled function first; what it
declines takes the general path.  These tests check that the common cases
do run compiled, that the compiled path decides exactly what the general
path decides (same edges, same counts, same numbers), that a declined call
changes nothing, and that no reference leaks.  The state machine of the
reliability suite runs it against the model too (``RuntimeVsModelCompiledPath``).
"""

from __future__ import annotations

import dataclasses
import sys

import numpy as np
import pytest

from pypto_async import _fastorder
from pypto_async.runtime import ChipWorker
from pypto_async.runtime import _dispatch, _hazards
from pypto_async.testing import hold

from conftest import assert_no_device_memory

N = 64


def rand(rng, n: int = N) -> np.ndarray:
    return rng.standard_normal(n).astype(np.float32)


@pytest.fixture
def worker(config):
    """Automatic ordering on its own: the sanitizer off, as users run it."""
    with ChipWorker(dataclasses.replace(config, sanitize="off")) as w:
        yield w
        assert_no_device_memory(w)


@pytest.fixture
def declines(monkeypatch):
    """Counts the calls of ``fast_order`` and those it declines (with ``force``: declines them all)."""

    class Counter:
        calls = 0
        declined = 0
        force = False

    real = _hazards.fast_order
    general = _hazards.Hazards._order_declined

    def counting(hz, stream, accesses, label, offset, fuse):
        Counter.calls += 1
        if Counter.force:
            return hz._order_declined(stream, accesses, label, offset)
        return real(hz, stream, accesses, label, offset, fuse)

    def declined(hz, stream, accesses, label, offset):
        Counter.declined += 1
        return general(hz, stream, accesses, label, offset)

    monkeypatch.setattr(_hazards, "fast_order", counting)
    monkeypatch.setattr(_dispatch, "fast_order", counting)  # the launch path calls it itself
    monkeypatch.setattr(_hazards.Hazards, "_order_declined", declined)
    return Counter


def _ping_pong(w, kernels, rounds: int, rng, declines):
    """b = 2a on s1, a = 2b on s2, `rounds` times, no explicit waits (RAW, WAR and WAW every launch).

    Returns the expected and the actual result, and how many of the rounds' calls were declined.
    """
    scale = w.register(kernels.get("scale", N))
    s1, s2 = w.stream(), w.stream()
    x = rand(rng)
    a = w.alloc_tensor(N, np.float32, init=x, stream=s1)
    b = w.alloc_tensor(N, np.float32, init=np.full(N, np.nan, np.float32), stream=s1)
    for _ in range(2):  # first uses, and each stream's first edge: the general path's
        scale.submit(a, 2.0, b, stream=s1)
        scale.submit(b, 0.5, a, stream=s2)
    calls, declined = declines.calls, declines.declined
    with hold(s1) as latch:
        for _ in range(rounds):
            scale.submit(a, 2.0, b, stream=s1)
            scale.submit(b, 2.0, a, stream=s2)
        assert not s2.query()  # everything on s2 waits for the held s1
        latch.release()
    assert declines.calls - calls == 2 * rounds
    declined = declines.declined - declined
    w.sync(timeout=10)
    got = a.numpy()
    for t in (a, b):
        t.free()
    for s in (s1, s2):
        s.close()
    return x * np.float32(4.0) ** rounds, got, declined


def test_crossing_launches_run_compiled_and_are_ordered(worker, kernels, declines):
    inferred = worker.stats().inferred_waits
    want, got, declined = _ping_pong(worker, kernels, 12, np.random.default_rng(1), declines)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert declined == 0
    assert worker.stats().inferred_waits - inferred >= 24


def test_two_producers_on_two_streams_hold_the_consumer(worker, kernels, declines):
    """Two edges for one launch: the first queued alone, the last with the launch."""
    rng = np.random.default_rng(2)
    scale = worker.register(kernels.get("scale", N))
    add = worker.register(kernels.get("add", N))
    s1, s2, s3 = worker.stream(), worker.stream(), worker.stream()
    x, y = rand(rng), rand(rng)
    xt = worker.alloc_tensor(N, np.float32, init=x, stream=s1)
    yt = worker.alloc_tensor(N, np.float32, init=y, stream=s2)
    a = worker.alloc_tensor(N, np.float32, init=np.full(N, np.nan, np.float32), stream=s1)
    b = worker.alloc_tensor(N, np.float32, init=np.full(N, np.nan, np.float32), stream=s2)
    out = worker.alloc_tensor(N, np.float32, init=np.full(N, np.nan, np.float32), stream=s3)
    for _ in range(2):  # first uses, and each stream's first edge: the general path's
        scale.submit(xt, 1.0, a, stream=s1)
        scale.submit(yt, 1.0, b, stream=s2)
        add.submit(a, b, out, stream=s3)
    worker.sync(timeout=10)
    calls, declined = declines.calls, declines.declined
    with hold(s1) as l1, hold(s2) as l2:
        scale.submit(xt, 2.0, a, stream=s1)  # (each waits for the read on s3: WAR)
        scale.submit(yt, 3.0, b, stream=s2)
        inferred = worker.stats().inferred_waits
        add.submit(a, b, out, stream=s3)
        assert declines.calls - calls == 3 and declines.declined == declined  # all three compiled
        assert worker.stats().inferred_waits == inferred + 2  # s3 waits for s1 and for s2
        l1.release()
        s1.sync(timeout=10)
        assert not s3.query()  # still waiting for s2
        l2.release()
    worker.sync(timeout=10)
    np.testing.assert_allclose(out.numpy(), 2 * x + 3 * y, rtol=1e-6)
    for t in (xt, yt, a, b, out):
        t.free()
    for s in (s1, s2, s3):
        s.close()


def _random_program(w, kernels, seed: int) -> tuple[list, tuple]:
    """A random program of launches over 3 streams and 4 tensors, no waits; its results and counts."""
    rng = np.random.default_rng(seed)
    scale = w.register(kernels.get("scale", N))
    add = w.register(kernels.get("add", N))
    streams = [w.stream() for _ in range(3)]
    init = [rand(rng) for _ in range(4)]
    ts = [w.alloc_tensor(N, np.float32, init=x, stream=streams[0]) for x in init]
    ref = [x.copy() for x in init]
    with hold(streams[0]) as latch:  # the first writer held: whatever runs too early reads stale data
        for _ in range(40):
            s = streams[rng.integers(3)]
            i, j, k = rng.choice(4, size=3, replace=False)
            if rng.random() < 0.5:
                f = np.float32(rng.choice([0.5, 2.0, -1.0]))
                scale.submit(ts[i], float(f), ts[k], stream=s)
                ref[k] = f * ref[i]
            else:
                add.submit(ts[i], ts[j], ts[k], stream=s)
                ref[k] = ref[i] + ref[j]
        latch.release()
    w.sync(timeout=10)
    got = [t.numpy() for t in ts]
    stats = w.stats()
    for t in ts:
        t.free()
    for s in streams:
        s.close()
    for g, r in zip(got, ref):
        np.testing.assert_allclose(g, r, rtol=1e-5)
    return got, (stats.inferred_waits, stats.skipped_waits)


@pytest.mark.parametrize("seed", range(6))
def test_compiled_and_general_paths_decide_alike(config, kernels, declines, seed):
    """The same random program, compiled where it can and all on the general path: same edges."""
    with ChipWorker(dataclasses.replace(config, sanitize="off")) as w:
        got, counts = _random_program(w, kernels, seed)
    compiled = declines.calls - declines.declined
    declines.force = True
    with ChipWorker(dataclasses.replace(config, sanitize="off")) as w:
        got_general, counts_general = _random_program(w, kernels, seed)
    assert compiled > 0
    assert counts == counts_general
    for a, b in zip(got, got_general):
        np.testing.assert_array_equal(a, b)


def _state(w, tensors, streams) -> tuple:
    hz = w._hazards
    return (hz.inferred, hz.skipped, w._queue.next_token,
            [(t._home, t._writer, dict(t._readers or {}), t._readhome) for t in tensors],
            [dict(s._clock) for s in streams])


def test_a_declined_call_changes_nothing(worker, kernels, monkeypatch):
    """What the compiled path declines reaches the general path untouched."""
    scale = worker.register(kernels.get("scale", N))
    s1, s2 = worker.stream(), worker.stream()
    a = worker.alloc_tensor(N, np.float32, init=rand(np.random.default_rng(3)), stream=s1)
    b = worker.alloc_tensor(N, np.float32, stream=s1)
    scale.submit(a, 2.0, b, stream=s1)
    hz = worker._hazards
    p_in, p_out = (row[5] for row in (scale._binder._rows[0], scale._binder._rows[2]))  # Access
    before = _state(worker, (a, b), (s1, s2))
    seen = []

    def general(hz, stream, accesses, label, offset):  # in place of the general path: look, change nothing
        seen.append((accesses, _state(worker, (a, b), (s1, s2))))

    monkeypatch.setattr(_hazards.Hazards, "_order_declined", general)
    declined = [
        (s2, [(a, p_in), (b, p_out)]),  # first uses on s2: their joins are the general path's
        (s1, [(a, p_in), (a, p_in)]),  # a tensor given twice
        (s1, [(object(), p_in)]),
        (s1, [(a,)]),
        (s1, [(a, scale._binder._rows[0][4])]),  # a ParamSpec, not an Access
        (s1, [(a, "x", True, 1)]),  # not a bool
        (s1, ((a, p_in),)),  # not a list
        (object(), [(a, p_in)]),
    ]
    with worker._queue.lock:
        for stream, accesses in declined:
            assert _fastorder.order(hz, stream, accesses, "test", 0, True) is None
        assert _fastorder.order(hz, s1, [(a, p_in)], "test", "0", True) is None  # an odd offset
        with pytest.raises(AttributeError):  # declined, and not a Hazards
            _fastorder.order(object(), s1, [(a, p_in)], "test", 0, True)
        with pytest.raises(TypeError):
            _fastorder.order(hz, s1, [(a, p_in)])
    assert [acc for acc, _ in seen] == [acc for _, acc in declined] + [[(a, p_in)]]
    assert all(state == before for _, state in seen)
    assert _state(worker, (a, b), (s1, s2)) == before
    monkeypatch.undo()
    worker.sync(timeout=10)
    for t in (a, b):
        t.free()
    for s in (s1, s2):
        s.close()


def test_setup_refuses_classes_without_the_slots(worker, kernels, declines):
    class NoSlots:
        pass

    with pytest.raises(AttributeError):  # NoSlots._streams
        _fastorder.setup(NoSlots, NoSlots, NoSlots, NoSlots, NoSlots, NoSlots, [0])
    plain = type("Plain", (), dict.fromkeys(("_streams", "_manual", "_home", "_writer", "_readers", "_readhome")))
    with pytest.raises(TypeError, match="not a __slots__ attribute"):
        _fastorder.setup(plain, NoSlots, NoSlots, NoSlots, NoSlots, NoSlots, [0])
    # A failed setup replaced nothing: ordering still runs compiled, and right.
    want, got, declined = _ping_pong(worker, kernels, 4, np.random.default_rng(5), declines)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert declined == 0


def test_no_reference_leaks(worker, kernels):
    scale = worker.register(kernels.get("scale", N))
    s1, s2 = worker.stream(), worker.stream()
    a = worker.alloc_tensor(N, np.float32, init=rand(np.random.default_rng(4)), stream=s1)
    b = worker.alloc_tensor(N, np.float32, stream=s1)

    def run(n):
        for _ in range(n):
            scale.submit(a, 1.0, b, stream=s1)
            scale.submit(b, 1.0, a, stream=s2)
        worker.sync(timeout=10)

    run(4)  # first uses, hazard events made
    objs = (s1, s2, a, b, scale, worker._hazards)
    counts = [sys.getrefcount(o) for o in objs]
    run(300)
    assert [sys.getrefcount(o) for o in objs] == counts
    for t in (a, b):
        t.free()
    for s in (s1, s2):
        s.close()


def _declined_handoff(worker, kernels, declines, seed: int, after_write=lambda s1: None) -> None:
    """a = 2x on a held s1, then b = 3a on s2, a call the compiled path declines: still ordered.

    Warmed first (first uses, each stream's first edge), so that only what
    `after_write(s1)` (or the caller around it) changes makes the decline.
    """
    rng = np.random.default_rng(seed)
    scale = worker.register(kernels.get("scale", N))
    s1, s2 = worker.stream(), worker.stream()
    x = rand(rng)
    xt = worker.alloc_tensor(N, np.float32, init=x, stream=s1)
    a = worker.alloc_tensor(N, np.float32, init=np.full(N, np.nan, np.float32), stream=s1)
    b = worker.alloc_tensor(N, np.float32, init=np.full(N, np.nan, np.float32), stream=s2)
    for _ in range(2):
        scale.submit(xt, 1.0, a, stream=s1)
        scale.submit(a, 1.0, b, stream=s2)
    worker.sync(timeout=10)
    with hold(s1) as latch:
        scale.submit(xt, 2.0, a, stream=s1)
        after_write(s1)
        declined = declines.declined
        scale.submit(a, 3.0, b, stream=s2)
        assert declines.declined == declined + 1  # the general path's edge
        assert not s2.query()  # ... and s2 waits for the held write
        latch.release()
    worker.sync(timeout=10)
    np.testing.assert_allclose(b.numpy(), 6 * x, rtol=1e-6)
    for t in (xt, a, b):
        t.free()
    for s in (s1, s2):
        s.close()  # (idempotent)


def test_an_edge_from_a_closed_stream_is_the_general_paths(worker, kernels, declines):
    """A tensor last written on a stream closed since: the edge waits for the stream's final point."""
    # Closed after the write: its queued work still runs, behind the latch.
    _declined_handoff(worker, kernels, declines, 6, after_write=lambda s1: s1.close())


def test_a_manual_region_in_another_thread_leaves_this_one_ordered(worker, kernels, declines):
    """While any region is open the compiled path declines; the general path still orders this task."""
    import threading

    opened, done = threading.Event(), threading.Event()

    def elsewhere():
        with worker.manual_deps():
            opened.set()
            done.wait(10)

    thread = threading.Thread(target=elsewhere)
    thread.start()
    try:
        assert opened.wait(10)
        _declined_handoff(worker, kernels, declines, 7)
    finally:
        done.set()
        thread.join(10)
