"""Data hazards and graphs: edges derived at capture, replays ordered against eager work (_capture.py, _graph.py).

As in tests/test_hazards.py, each test holds the earlier side of a hazard on
a latch, so that a later access that ran too early would see what it must
not (poisoned or overwritten data), and checks the numbers against numpy on
random data.  A variant with the ordering switched off shows the test can
fail.
"""

from __future__ import annotations

import asyncio
import sys

import numpy as np
import pytest

from pypto_async.errors import PtoDependencyError, PtoRaceError
from pypto_async.runtime import ChipWorker, RunConfig
from pypto_async.testing import fail_next, hold

N = 64
SMALL = {"cores": 2, "copy_engines": 2, "device_memory": 64 << 20}
POISON = np.float32(-12345.0)


def rand(n: int = N) -> np.ndarray:
    return np.random.default_rng().standard_normal(n).astype(np.float32)


def poisoned(n: int = N) -> np.ndarray:
    return np.full(n, POISON, np.float32)


def here() -> int:
    """The caller's line number (where a racy call is made, for the sanitizer's message)."""
    return sys._getframe(1).f_lineno


@pytest.fixture
def open_worker():
    """Open a sync-mode worker on the small device with some RunConfig fields; close them all after."""
    opened = []

    def make(**fields):
        w = ChipWorker(RunConfig(**{**SMALL, **fields}))
        opened.append(w)
        return w

    yield make
    for w in opened:
        w.close()


def inferred(w) -> int:
    return w.stats().inferred_waits


# -- replays ordered against eager work -------------------------------------------------------------


def _reader_graph(w, scale, a, stream, bound: bool):
    """out = 3 * a on `stream`; `a` used directly (static) or bound as input "a" at replay."""
    with w.capture(name="reader", stream=stream) as cap:
        src = cap.input("a", N, np.float32) if bound else a
        out = cap.input("out", N, np.float32)
        scale(src, 3.0, out, stream=stream)
    return cap.graph


@pytest.mark.parametrize("bound", [False, True], ids=["static", "bound"])
@pytest.mark.parametrize("auto", [True, False])
def test_an_eager_write_orders_a_replay_that_reads_it(open_worker, kernels, bound, auto):
    w = open_worker(auto_deps=auto, sanitize="off")
    scale = w.register(kernels.get("scale", N))
    s1, s2 = w.stream(), w.stream()
    x = rand()
    src = w.alloc_tensor(N, np.float32, init=x, stream=s1)
    a = w.alloc_tensor(N, np.float32, init=poisoned(), stream=s1)
    out = w.alloc_tensor(N, np.float32, init=poisoned(), stream=s2)
    g = _reader_graph(w, scale, a, s2, bound)
    before = inferred(w)
    with hold(s1) as latch:
        scale.submit(src, 2.0, a, stream=s1)  # the writer, held
        replay = g.submit(out=out, **({"a": a} if bound else {}))
        if auto:
            assert not s2.query()  # the replay waits on the device for the held write
        else:
            replay.sync(timeout=10)  # nothing orders it: it runs now, on the poison
        latch.release()
        w.sync(timeout=10)
    assert replay.exception() is None
    assert inferred(w) == before + (1 if auto else 0)
    np.testing.assert_allclose(out.numpy(), 6 * x if auto else 3 * POISON, rtol=1e-6)
    g.close()
    for t in (src, a, out):
        t.free()


def _writer_graph(w, scale, a, stream, bound: bool):
    """a = 2 * x on `stream`; `a` used directly (static) or bound as input "a" at replay."""
    with w.capture(name="writer", stream=stream) as cap:
        x = cap.input("x", N, np.float32)
        dst = cap.input("a", N, np.float32) if bound else a
        scale(x, 2.0, dst, stream=stream)
    return cap.graph


@pytest.mark.parametrize("bound", [False, True], ids=["static", "bound"])
@pytest.mark.parametrize("auto", [True, False])
def test_a_replay_that_writes_orders_an_eager_read(open_worker, kernels, bound, auto):
    w = open_worker(auto_deps=auto, sanitize="off")
    scale = w.register(kernels.get("scale", N))
    s1, s2 = w.stream(), w.stream()
    x = rand()
    xd = w.alloc_tensor(N, np.float32, init=x, stream=s1)
    a = w.alloc_tensor(N, np.float32, init=poisoned(), stream=s2)  # last touched on the reader's stream
    b = w.alloc_tensor(N, np.float32, init=poisoned(), stream=s2)
    g = _writer_graph(w, scale, a, s1, bound)
    with hold(s1) as latch:
        replay = g.submit(x=xd, **({"a": a} if bound else {}))  # the writer, held
        reader = scale.submit(a, 3.0, b, stream=s2)
        if auto:
            assert not reader.done() and not s2.query()
        else:
            reader.sync(timeout=10)
        latch.release()
        w.sync(timeout=10)
    assert replay.exception() is None and reader.exception() is None
    np.testing.assert_allclose(a.numpy(), 2 * x, rtol=1e-6)
    np.testing.assert_allclose(b.numpy(), 6 * x if auto else 3 * POISON, rtol=1e-6)
    g.close()
    for t in (xd, a, b):
        t.free()


@pytest.mark.parametrize("auto", [True, False])
def test_an_eager_write_waits_for_a_replay_that_reads(open_worker, kernels, auto):
    # Write after read: the replay reads `a` (held), then an eager launch on another stream
    # overwrites it.
    w = open_worker(auto_deps=auto, sanitize="off")
    scale = w.register(kernels.get("scale", N))
    s1, s2 = w.stream(), w.stream()
    x, y = rand(), rand()
    a = w.alloc_tensor(N, np.float32, init=x, stream=s2)  # last touched on the writer's stream
    yd = w.alloc_tensor(N, np.float32, init=y, stream=s2)
    out = w.alloc_tensor(N, np.float32, init=poisoned(), stream=s1)
    g = _reader_graph(w, scale, a, s1, bound=False)
    w.sync()
    with hold(s1) as latch:
        replay = g.submit(out=out)
        writer = scale.submit(yd, 5.0, a, stream=s2)
        if auto:
            assert not writer.done() and not s2.query()
        else:
            writer.sync(timeout=10)  # overwrites `a` before the held replay read it
        latch.release()
        w.sync(timeout=10)
    assert replay.exception() is None and writer.exception() is None
    np.testing.assert_allclose(out.numpy(), 3 * x if auto else 15 * y, rtol=1e-6)
    np.testing.assert_allclose(a.numpy(), 5 * y, rtol=1e-6)
    g.close()
    for t in (a, yd, out):
        t.free()


@pytest.mark.parametrize("auto", [True, False])
def test_a_replay_that_writes_waits_for_an_eager_read(open_worker, kernels, auto):
    # Write after read the other way: an eager read of `a` (held), then a replay that writes it.
    w = open_worker(auto_deps=auto, sanitize="off")
    scale = w.register(kernels.get("scale", N))
    copy = w.register(kernels.get("copy", N))
    s1, s2 = w.stream(), w.stream()
    x, y = rand(), rand()
    a = w.alloc_tensor(N, np.float32, init=x, stream=s1)
    yd = w.alloc_tensor(N, np.float32, init=y, stream=s2)
    r = w.alloc_tensor(N, np.float32, init=poisoned(), stream=s1)
    g = _writer_graph(w, scale, a, s2, bound=False)
    w.sync()
    with hold(s1) as latch:
        reader = copy.submit(a, r, stream=s1)
        replay = g.submit(x=yd)
        if auto:
            assert not replay.done() and not s2.query()
        else:
            replay.sync(timeout=10)
        latch.release()
        w.sync(timeout=10)
    assert replay.exception() is None and reader.exception() is None
    np.testing.assert_allclose(r.numpy(), x if auto else 2 * y, rtol=1e-6)
    np.testing.assert_allclose(a.numpy(), 2 * y, rtol=1e-6)
    g.close()
    for t in (a, yd, r):
        t.free()


def test_replays_of_two_graphs_on_two_streams_are_ordered(worker, kernels):
    scale = worker.register(kernels.get("scale", N))
    s1, s2 = worker.stream(), worker.stream()
    x = rand()
    a = worker.alloc_tensor(N, np.float32, init=poisoned(), stream=s1)
    out = worker.alloc_tensor(N, np.float32, init=poisoned(), stream=s2)
    xd = worker.alloc_tensor(N, np.float32, init=x, stream=s1)
    producer = _writer_graph(worker, scale, a, s1, bound=False)
    consumer = _reader_graph(worker, scale, a, s2, bound=False)
    with hold(s1) as latch:
        producer.submit(x=xd)
        second = consumer.submit(out=out)
        assert not second.done() and not s2.query()
        latch.release()
        worker.sync(timeout=10)
    np.testing.assert_allclose(out.numpy(), 6 * x, rtol=1e-6)
    producer.close()
    consumer.close()
    for t in (a, out, xd):
        t.free()


def test_a_replay_is_its_streams_latest_write(open_worker, kernels):
    # `a` lives on s1 (written and read only there: nothing tracked per access), s2 has waited
    # for s1 once; then a replay on s1 writes `a`: a read on s2 must wait for the replay, not
    # take the older wait as enough.
    w = open_worker(sanitize="off")
    scale = w.register(kernels.get("scale", N))
    s1, s2 = w.stream(), w.stream()
    x, y = rand(), rand()
    src = w.alloc_tensor(N, np.float32, init=x, stream=s1)
    yd = w.alloc_tensor(N, np.float32, init=y, stream=s1)
    a = w.alloc_tensor(N, np.float32, stream=s1)
    b = w.alloc_tensor(N, np.float32, init=poisoned(), stream=s2)
    g = _writer_graph(w, scale, a, s1, bound=False)
    scale(src, 2.0, a, stream=s1)
    scale(a, 1.0, b, stream=s2)  # used on s2 once (its first use there joined)
    scale(src, 2.0, a, stream=s1)  # home on s1 again
    s2.wait(s1)
    with hold(s1) as latch:
        g.submit(x=yd)  # a = 2 * y, held
        reader = scale.submit(a, 3.0, b, stream=s2)
        assert not reader.done() and not s2.query()
        latch.release()
        w.sync(timeout=10)
    np.testing.assert_allclose(b.numpy(), 6 * y, rtol=1e-6)
    g.close()
    for t in (src, yd, a, b):
        t.free()


def test_a_replay_after_its_edge_needs_no_second_one(worker, kernels):
    # The first replay waits for the eager write; the next ones are ordered behind it already.
    scale = worker.register(kernels.get("scale", N))
    s1, s2 = worker.stream(), worker.stream()
    x = rand()
    src = worker.alloc_tensor(N, np.float32, init=x, stream=s1)
    a = worker.alloc_tensor(N, np.float32, stream=s1)
    outs = [worker.alloc_tensor(N, np.float32, init=poisoned(), stream=s2) for _ in range(3)]
    g = _reader_graph(worker, scale, a, s2, bound=False)
    with hold(s1) as latch:
        scale.submit(src, 2.0, a, stream=s1)
        before = inferred(worker)
        for out in outs:
            g.submit(out=out)
        assert inferred(worker) == before + 1
        latch.release()
        worker.sync(timeout=10)
    for out in outs:
        np.testing.assert_allclose(out.numpy(), 6 * x, rtol=1e-6)
    g.close()
    for t in (src, a, *outs):
        t.free()


@pytest.mark.parametrize("auto", [True, False])
def test_a_replay_held_in_its_fifo_keeps_submission_order(kernels, auto):
    # The replay waits in its stream's host FIFO behind a launch waiting for device memory; an
    # eager reader of what it writes, queued after it on another stream, must still see its result.
    big = 4096  # an `add` of three host arrays of this size fills the device below
    cfg = RunConfig(cores=1, copy_engines=1, device_memory=64 << 10, auto_deps=auto, sanitize="off")

    async def main():
        async with ChipWorker(cfg) as w:
            add = w.register(kernels.get("add", big))
            scale = w.register(kernels.get("scale", N))
            held, s1, s2 = w.stream(), w.stream(), w.stream()
            x = rand()
            xd = w.alloc_tensor(N, np.float32, init=x, stream=s1)
            a = w.alloc_tensor(N, np.float32, init=poisoned(), stream=s2)
            b = w.alloc_tensor(N, np.float32, init=poisoned(), stream=s2)
            g = _writer_graph(w, scale, a, s1, bound=False)
            p, q = rand(big), rand(big)
            o1, o2 = poisoned(big), poisoned(big)
            with hold(held) as latch:
                first = add(p, q, o1, stream=held)  # its temporaries fill the device
                second = add(p, q, o2, stream=s1)  # do not fit: waits in s1's host FIFO
                replay = g.submit(x=xd)  # behind it
                assert not second.submitted_to_ring and not replay.submitted_to_ring
                reader = scale(a, 3.0, b, stream=s2)
                if auto:
                    assert not reader.done() and not s2.query()
                else:
                    await reader  # nothing orders it after the held replay
                latch.release()
            for launch in (first, second, replay, reader):
                await launch
            np.testing.assert_array_equal(o2, p + q)
            got = await b.to_host()
            g.close()
            for t in (xd, a, b):
                t.free()
            return x, got

    x, got = asyncio.run(main())
    np.testing.assert_allclose(got, 6 * x if auto else 3 * POISON, rtol=1e-6)


def test_a_failed_eager_writer_fails_the_replay_as_a_dependency(worker, kernels):
    scale = worker.register(kernels.get("scale", N))
    s1, s2 = worker.stream(), worker.stream()
    src = worker.alloc_tensor(N, np.float32, init=rand(), stream=s1)
    a = worker.alloc_tensor(N, np.float32, stream=s1)
    out = worker.alloc_tensor(N, np.float32, init=poisoned(), stream=s2)
    g = _reader_graph(worker, scale, a, s2, bound=False)
    with hold(s1) as latch:
        fail_next(s1)
        writer = scale.submit(src, 2.0, a, stream=s1)
        replay = g.submit(out=out)
        latch.release()
        worker.sync(timeout=10)
    assert "injected" in str(writer.exception())
    exc = replay.exception()
    assert isinstance(exc, PtoDependencyError) and "injected" in str(exc)  # it names the first failure
    np.testing.assert_array_equal(out.numpy(), poisoned())  # the replay did not run
    g.replay(out=out)  # later replays run normally
    g.close()
    for t in (src, a, out):
        t.free()


@pytest.mark.parametrize("how", ["tensor", "region", "worker"])
def test_each_opt_out_switches_replay_ordering_off(open_worker, kernels, how):
    w = open_worker(sanitize="off", **({"auto_deps": False} if how == "worker" else {}))
    scale = w.register(kernels.get("scale", N))
    s1, s2 = w.stream(), w.stream()
    x = rand()
    src = w.alloc_tensor(N, np.float32, init=x, stream=s1)
    a = w.alloc_tensor(N, np.float32, init=poisoned(), stream=s1, manual_deps=how == "tensor")
    out = w.alloc_tensor(N, np.float32, init=poisoned(), stream=s2)
    g = _reader_graph(w, scale, a, s2, bound=False)
    before = inferred(w)
    with hold(s1) as latch:
        scale.submit(src, 2.0, a, stream=s1)
        if how == "region":
            with w.manual_deps():
                replay = g.submit(out=out)
        else:
            replay = g.submit(out=out)
        replay.sync(timeout=10)  # not ordered: it runs now, on the poison
        latch.release()
        w.sync(timeout=10)
    assert inferred(w) == before
    np.testing.assert_allclose(out.numpy(), 3 * POISON, rtol=1e-6)
    g.close()
    for t in (src, a, out):
        t.free()


def test_the_sanitizer_names_an_eager_write_and_a_replay(open_worker, kernels):
    w = open_worker(auto_deps=False, sanitize="raise")
    scale = w.register(kernels.get("scale", N))
    s1, s2 = w.stream(), w.stream()
    src = w.alloc_tensor(N, np.float32, init=rand(), stream=s1)
    a = w.alloc_tensor(N, np.float32, stream=s1)
    out = w.alloc_tensor(N, np.float32, stream=s2)
    g = _reader_graph(w, scale, a, s2, bound=False)
    with hold(s1):
        scale.submit(src, 2.0, a, stream=s1); first_line = here()  # noqa: E702
        before = w.stats().commands_submitted
        with pytest.raises(PtoRaceError) as info:
            second_line = here() + 1
            g.submit(out=out)
        assert w.stats().commands_submitted == before  # nothing of the replay was queued
    msg = str(info.value)
    assert f"test_graph_hazards.py:{first_line}" in msg and f"test_graph_hazards.py:{second_line}" in msg
    assert "graph 'reader' replay ('x', In)" in msg and "launch of 'scale' ('out', Out)" in msg
    assert f"stream {s1.id}" in msg and f"stream {s2.id}" in msg
    w.sync(timeout=10)
    g.close()
    for t in (src, a, out):
        t.free()


def test_the_sanitizer_names_a_replay_and_an_eager_read(open_worker, kernels):
    # The replay is in flight (held) when the racy read comes: its accesses stay on record until
    # it completed.
    w = open_worker(auto_deps=False, sanitize="raise")
    scale = w.register(kernels.get("scale", N))
    s1, s2 = w.stream(), w.stream()
    xd = w.alloc_tensor(N, np.float32, init=rand(), stream=s1)
    a = w.alloc_tensor(N, np.float32, stream=s1)
    b = w.alloc_tensor(N, np.float32, stream=s2)
    g = _writer_graph(w, scale, a, s1, bound=True)
    with hold(s1):
        g.submit(x=xd, a=a); first_line = here()  # noqa: E702
        with pytest.raises(PtoRaceError) as info:
            scale.submit(a, 3.0, b, stream=s2)
    msg = str(info.value)
    assert f"test_graph_hazards.py:{first_line}" in msg
    assert "graph 'writer' replay ('a', Out)" in msg and "launch of 'scale' ('x', In)" in msg
    w.sync(timeout=10)
    g.close()
    for t in (xd, a, b):
        t.free()


def test_the_sanitizer_is_silent_on_an_ordered_replay(open_worker, kernels):
    w = open_worker(auto_deps=False, sanitize="raise")
    scale = w.register(kernels.get("scale", N))
    s1, s2 = w.stream(), w.stream()
    x = rand()
    src = w.alloc_tensor(N, np.float32, init=x, stream=s1)
    a = w.alloc_tensor(N, np.float32, stream=s1)
    out = w.alloc_tensor(N, np.float32, stream=s2)
    b = w.alloc_tensor(N, np.float32, stream=s1)
    g = _reader_graph(w, scale, a, s2, bound=False)
    with hold(s1) as latch:
        first = scale.submit(src, 2.0, a, stream=s1)
        s2.wait(first)
        g.submit(out=out)
        s1.wait(s2)  # the next write of `a` waits for the replay's read
        scale.submit(src, 4.0, a, stream=s1)
        latch.release()
        w.sync(timeout=10)
    np.testing.assert_allclose(out.numpy(), 6 * x, rtol=1e-6)
    np.testing.assert_allclose(a.numpy(), 4 * x, rtol=1e-6)
    assert w.stats().races == 0
    g.close()
    for t in (src, a, out, b):
        t.free()
