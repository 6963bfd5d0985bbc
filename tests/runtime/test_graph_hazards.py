"""Data hazards and graphs: edges derived at capture, replays ordered against eager work (_capture.py, _graph.py).

As in tests/runtime/test_hazards.py, each test holds the earlier side of a hazard on
a latch, so that a later access that ran too early would see what it must
not (poisoned or overwritten data), and checks the numbers against numpy on
random data.  A variant with the ordering switched off shows the test can
fail.
"""

from __future__ import annotations

import asyncio
import contextlib

import numpy as np
import pytest

from pypto_async.errors import PtoArgumentError, PtoDependencyError, PtoRaceError
from pypto_async.runtime import ChipWorker, RunConfig
from pypto_async.testing import fail_next, hold

from conftest import here

N = 64
POISON = np.float32(-12345.0)


def rand(n: int = N) -> np.ndarray:
    return np.random.default_rng().standard_normal(n).astype(np.float32)


def poisoned(n: int = N) -> np.ndarray:
    return np.full(n, POISON, np.float32)


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


def test_a_replay_on_another_stream_is_ordered_there(worker, kernels):
    # Captured on s0, replayed on s2: the edge goes to s2, where this replay starts and ends.
    scale = worker.register(kernels.get("scale", N))
    s0, s1, s2 = worker.stream(), worker.stream(), worker.stream()
    x = rand()
    src = worker.alloc_tensor(N, np.float32, init=x, stream=s1)
    a = worker.alloc_tensor(N, np.float32, init=poisoned(), stream=s1)
    out = worker.alloc_tensor(N, np.float32, init=poisoned(), stream=s2)
    g = _reader_graph(worker, scale, a, s0, bound=False)
    with hold(s1) as latch:
        scale.submit(src, 2.0, a, stream=s1)
        replay = g.submit(out=out, stream=s2)
        assert not replay.done() and not s2.query()
        latch.release()
        worker.sync(timeout=10)
    np.testing.assert_allclose(out.numpy(), 6 * x, rtol=1e-6)
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


@pytest.mark.parametrize("bound", [False, True], ids=["static", "bound"])
def test_an_eager_write_waits_for_the_last_of_several_replays_that_read(open_worker, kernels, bound):
    # The second and third replays read `a` with nothing to order, so they are not noted one by
    # one; a writer on another stream, already ordered after the first (its explicit wait), must
    # still wait for the last of them.
    w = open_worker(sanitize="off")
    scale = w.register(kernels.get("scale", N))
    s1, s2 = w.stream(), w.stream()
    x, y = rand(), rand()
    a = w.alloc_tensor(N, np.float32, init=x, stream=s2)
    yd = w.alloc_tensor(N, np.float32, init=y, stream=s2)
    outs = [w.alloc_tensor(N, np.float32, init=poisoned(), stream=s1) for _ in range(3)]
    g = _reader_graph(w, scale, a, s1, bound)
    extra = {"a": a} if bound else {}
    g.submit(out=outs[0], **extra)
    w.sync()
    s2.wait(s1)  # s2 is ordered after the first replay's read
    with hold(s1) as latch:
        replays = [g.submit(out=o, **extra) for o in outs[1:]]
        writer = scale.submit(yd, 5.0, a, stream=s2)
        assert not writer.done() and not s2.query()
        latch.release()
        w.sync(timeout=10)
    assert all(r.exception() is None for r in replays) and writer.exception() is None
    for o in outs:
        np.testing.assert_allclose(o.numpy(), 3 * x, rtol=1e-6)
    np.testing.assert_allclose(a.numpy(), 5 * y, rtol=1e-6)
    g.close()
    for t in (a, yd, *outs):
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


# -- replays the driver orders (pto_graph_replay_ordered) ------------------------------------------
#
# Once every tensor a replay touches has joined its stream (an earlier replay there), the
# driver orders the replay in the replay call itself.  Each test warms the graph up first,
# then makes the race deterministic with a latch, and checks that the driver's path took it.


@pytest.fixture
def paths(monkeypatch):
    """Count the replays the driver ordered (``driver``), declined (``declined``), or Python ordered."""
    import pypto_async.runtime._graph as graph_mod

    seen = {"driver": 0, "declined": 0, "python": 0}
    ordered, order = graph_mod._replay_ordered, graph_mod.Graph._order

    def counted_ordered(*args):
        rc = ordered(*args)
        seen["declined" if rc == graph_mod._DECLINED else "driver"] += 1
        return rc

    def counted_order(self, *args):
        seen["python"] += 1
        return order(self, *args)

    monkeypatch.setattr(graph_mod, "_replay_ordered", counted_ordered)
    monkeypatch.setattr(graph_mod.Graph, "_order", counted_order)
    return seen


def _warm(w, g, paths, **bindings) -> None:
    """A first replay (its tensors join the stream, the Python path), then counts from zero."""
    g.replay(**bindings)
    w.sync(timeout=10)
    for k in paths:
        paths[k] = 0


@pytest.mark.parametrize("bound", [False, True], ids=["static", "bound"])
def test_the_driver_orders_a_warm_replay_after_an_eager_write(open_worker, kernels, paths, bound):
    # Read after write: an eager write on s1 (held), then a replay on s2 that reads it.
    w = open_worker(sanitize="off")
    scale = w.register(kernels.get("scale", N))
    s1, s2 = w.stream(), w.stream()
    x = rand()
    src = w.alloc_tensor(N, np.float32, init=x, stream=s1)
    a = w.alloc_tensor(N, np.float32, init=poisoned(), stream=s1)
    out = w.alloc_tensor(N, np.float32, init=poisoned(), stream=s2)
    g = _reader_graph(w, scale, a, s2, bound)
    extra = {"a": a} if bound else {}
    _warm(w, g, paths, out=out, **extra)
    w.copy(out, poisoned(), stream=s2)
    with hold(s1) as latch:
        scale.submit(src, 2.0, a, stream=s1)  # the writer, held
        before = inferred(w)
        replay = g.submit(out=out, **extra)
        assert not replay.done() and not s2.query()  # it waits on the device for the held write
        latch.release()
        w.sync(timeout=10)
    assert replay.exception() is None
    assert paths == {"driver": 1, "declined": 0, "python": 0}
    assert inferred(w) == before + 1
    np.testing.assert_allclose(out.numpy(), 6 * x, rtol=1e-6)
    g.close()
    for t in (src, a, out):
        t.free()


@pytest.mark.parametrize("bound", [False, True], ids=["static", "bound"])
def test_the_driver_orders_an_eager_write_after_a_warm_replay_that_reads(open_worker, kernels, paths, bound):
    # Write after read: a replay on s2 reads `a` (held), then an eager launch on s1 overwrites it.
    w = open_worker(sanitize="off")
    scale = w.register(kernels.get("scale", N))
    s1, s2 = w.stream(), w.stream()
    x, y = rand(), rand()
    a = w.alloc_tensor(N, np.float32, init=x, stream=s1)
    yd = w.alloc_tensor(N, np.float32, init=y, stream=s1)
    out = w.alloc_tensor(N, np.float32, init=poisoned(), stream=s2)
    g = _reader_graph(w, scale, a, s2, bound)
    extra = {"a": a} if bound else {}
    _warm(w, g, paths, out=out, **extra)
    w.copy(out, poisoned(), stream=s2)
    scale.submit(yd, 1.0, yd, stream=s1)  # s1 touches yd again: the write below has only the replay to wait for
    w.sync(timeout=10)
    with hold(s2) as latch:
        replay = g.submit(out=out, **extra)  # the reader, held
        writer = scale.submit(yd, 5.0, a, stream=s1)
        assert not writer.done() and not s1.query()  # it waits on the device for the held read
        latch.release()
        w.sync(timeout=10)
    assert replay.exception() is None and writer.exception() is None
    assert paths == {"driver": 1, "declined": 0, "python": 0}
    np.testing.assert_allclose(out.numpy(), 3 * x, rtol=1e-6)  # read before the overwrite
    np.testing.assert_allclose(a.numpy(), 5 * y, rtol=1e-6)
    g.close()
    for t in (a, yd, out):
        t.free()


@pytest.mark.parametrize("bound", [False, True], ids=["static", "bound"])
def test_an_eager_read_waits_for_a_warm_replay_that_writes(open_worker, kernels, paths, bound):
    # Read after write the other way: a replay on s2 writes `a` (held), then an eager read on s1.
    w = open_worker(sanitize="off")
    scale = w.register(kernels.get("scale", N))
    s1, s2 = w.stream(), w.stream()
    x = rand()
    xd = w.alloc_tensor(N, np.float32, init=x, stream=s2)
    a = w.alloc_tensor(N, np.float32, init=poisoned(), stream=s1)
    b = w.alloc_tensor(N, np.float32, init=poisoned(), stream=s1)
    g = _writer_graph(w, scale, a, s2, bound)
    extra = {"a": a} if bound else {}
    _warm(w, g, paths, x=xd, **extra)
    w.copy(a, poisoned(), stream=s1)
    w.sync(timeout=10)
    with hold(s2) as latch:
        replay = g.submit(x=xd, **extra)  # the writer, held
        reader = scale.submit(a, 3.0, b, stream=s1)
        assert not reader.done() and not s1.query()
        latch.release()
        w.sync(timeout=10)
    assert replay.exception() is None and reader.exception() is None
    assert paths == {"driver": 1, "declined": 0, "python": 0}
    np.testing.assert_allclose(b.numpy(), 6 * x, rtol=1e-6)
    g.close()
    for t in (xd, a, b):
        t.free()


@pytest.mark.parametrize("bound", [False, True], ids=["static", "bound"])
def test_a_warm_replay_that_writes_waits_for_an_eager_read(open_worker, kernels, paths, bound):
    # Write after read the other way: an eager read of `a` on s1 (held), then a replay on s2 that writes it.
    w = open_worker(sanitize="off")
    scale = w.register(kernels.get("scale", N))
    copy = w.register(kernels.get("copy", N))
    s1, s2 = w.stream(), w.stream()
    x, y = rand(), rand()
    a = w.alloc_tensor(N, np.float32, init=poisoned(), stream=s1)
    yd = w.alloc_tensor(N, np.float32, init=y, stream=s2)
    r = w.alloc_tensor(N, np.float32, init=poisoned(), stream=s1)
    g = _writer_graph(w, scale, a, s2, bound)
    extra = {"a": a} if bound else {}
    _warm(w, g, paths, x=yd, **extra)
    w.copy(a, x, stream=s1)
    w.sync(timeout=10)
    before = inferred(w)
    with hold(s1) as latch:
        reader = copy.submit(a, r, stream=s1)  # the reader, held
        replay = g.submit(x=yd, **extra)
        assert not replay.done() and not s2.query()
        latch.release()
        w.sync(timeout=10)
    assert replay.exception() is None and reader.exception() is None
    assert paths == {"driver": 1, "declined": 0, "python": 0}
    assert inferred(w) >= before + 1
    np.testing.assert_allclose(r.numpy(), x, rtol=1e-6)  # read before the replay overwrote it
    np.testing.assert_allclose(a.numpy(), 2 * y, rtol=1e-6)
    g.close()
    for t in (a, yd, r):
        t.free()


def test_the_driver_declines_an_edge_from_a_closed_stream(open_worker, kernels, paths):
    # out = a + b.  `a`'s writer's stream is closed before the replay: that edge waits for its
    # final point, which only the runtime queues, so the driver declines and the replay is ordered
    # the general way; `b`'s edge, implied by an explicit wait, is counted skipped once.
    w = open_worker(sanitize="off")
    add = w.register(kernels.get("add", N))
    scale = w.register(kernels.get("scale", N))
    s1, s2 = w.stream(), w.stream()
    x, y = rand(), rand()
    src = w.alloc_tensor(N, np.float32, init=x, stream=s1)
    a = w.alloc_tensor(N, np.float32, init=poisoned(), stream=s1)
    b = w.alloc_tensor(N, np.float32, init=y, stream=s1)
    out = w.alloc_tensor(N, np.float32, init=poisoned(), stream=s2)
    with w.capture(name="sum", stream=s2) as cap:
        add(a, b, cap.input("out", N, np.float32), stream=s2)
    g = cap.graph
    _warm(w, g, paths, out=out)
    w.copy(out, poisoned(), stream=s2)
    scale.submit(b, 2.0, b, stream=s1)
    s2.wait(s1)  # orders the replay after that write: its edge is implied
    s3 = w.stream()
    with hold(s3) as latch:
        scale.submit(src, 2.0, a, stream=s3)  # a's writer, held
        s3.close()
        skipped = w.stats().skipped_waits
        replay = g.submit(out=out)
        assert not replay.done() and not s2.query()
        assert w.stats().skipped_waits == skipped + 1  # the declined decision's skip is not counted twice
        latch.release()
        w.sync(timeout=10)
    assert replay.exception() is None
    assert paths == {"driver": 0, "declined": 1, "python": 1}
    np.testing.assert_allclose(out.numpy(), 2 * x + 2 * y, rtol=1e-6)
    g.close()
    for t in (src, a, b, out):
        t.free()


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
        with pytest.raises(PtoDependencyError):  # the failure s1 carries
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


# -- edges derived at capture ---------------------------------------------------------------------


def _fork_graph(w, scale, a, s0, s1, s2, *, explicit: bool = False, region: bool = False):
    """Forked from s0 and joined back: s1 writes a = 2 * x, s2 reads y = 3 * a; no wait between them
    unless `explicit`."""
    with w.capture(name="fork", stream=s0) as cap:
        x = cap.input("x", N, np.float32)
        y = cap.input("y", N, np.float32)
        start = s0.record()
        s1.wait(start)
        s2.wait(start)
        with w.manual_deps() if region else contextlib.nullcontext():
            writer = scale(x, 2.0, a, stream=s1)
            if explicit:
                s2.wait(writer)
            scale(a, 3.0, y, stream=s2)
        s0.wait(s1)
        s0.wait(s2)
    return cap.graph


def _replay_with_the_writer_held(w, g, s1, s2, x, ordered: bool):
    """Replay with s1 (where the graph writes) held; returns y."""
    xd = w.alloc_tensor(N, np.float32, init=x)
    yd = w.alloc_tensor(N, np.float32, init=poisoned())
    with hold(s1) as latch:
        replay = g.submit(x=xd, y=yd)
        if ordered:
            assert not s2.query()  # the reader waits on the device for the held writer
        else:
            s2.sync(timeout=10)  # nothing orders it: it ran, on the poison
        latch.release()
        w.sync(timeout=10)
    assert replay.exception() is None
    y = yd.numpy()
    xd.free()
    yd.free()
    return y


@pytest.mark.parametrize("auto", [True, False])
def test_a_capture_on_two_streams_needs_no_waits(open_worker, kernels, auto):
    w = open_worker(auto_deps=auto, sanitize="off")
    scale = w.register(kernels.get("scale", N))
    s0, s1, s2 = w.stream(), w.stream(), w.stream()
    a = w.alloc_tensor(N, np.float32, init=poisoned(), stream=s1)
    before = inferred(w)
    g = _fork_graph(w, scale, a, s0, s1, s2)
    assert g.inferred_waits == (1 if auto else 0) and inferred(w) == before + g.inferred_waits
    assert ("1 inferred waits" in repr(g)) == auto
    for _ in range(2):  # derived once: every replay has it
        x = rand()
        w.copy(a, poisoned())
        y = _replay_with_the_writer_held(w, g, s1, s2, x, ordered=auto)
        np.testing.assert_allclose(y, 6 * x if auto else 3 * POISON, rtol=1e-6)
    g.close()
    a.free()


def test_an_inferred_capture_edge_is_the_wait_you_would_write(worker, kernels):
    scale = worker.register(kernels.get("scale", N))
    s0, s1, s2 = worker.stream(), worker.stream(), worker.stream()
    a = worker.alloc_tensor(N, np.float32, stream=s1)
    before = worker.stats()
    explicit = _fork_graph(worker, scale, a, s0, s1, s2, explicit=True)
    mid = worker.stats()
    inferred_graph = _fork_graph(worker, scale, a, s0, s1, s2)
    # Your wait implies the edge: none added, one skipped.
    assert explicit.inferred_waits == 0 and mid.inferred_waits == before.inferred_waits
    assert mid.skipped_waits == before.skipped_waits + 1
    # The inferred edge is the same two commands (a record after the writer, a wait before the reader).
    assert inferred_graph.inferred_waits == 1 and len(inferred_graph) == len(explicit)
    x = rand()
    for g in (explicit, inferred_graph):
        np.testing.assert_allclose(_replay_with_the_writer_held(worker, g, s1, s2, x, ordered=True), 6 * x,
                                   rtol=1e-6)
        g.close()
    a.free()


def test_an_edge_another_edge_of_the_call_implies_is_skipped(worker, kernels):
    # s1 writes a; s2 reads a (an edge s1 -> s2) and writes b; s3 reads both: one edge, from s2.
    scale = worker.register(kernels.get("scale", N))
    add = worker.register(kernels.get("add", N))
    s0, s1, s2, s3 = (worker.stream() for _ in range(4))
    a = worker.alloc_tensor(N, np.float32, stream=s1)
    b = worker.alloc_tensor(N, np.float32, stream=s2)
    with worker.capture(name="diamond", stream=s0) as cap:
        x = cap.input("x", N, np.float32)
        y = cap.input("y", N, np.float32)
        start = s0.record()
        for s in (s1, s2, s3):
            s.wait(start)
        scale(x, 2.0, a, stream=s1)
        scale(a, 3.0, b, stream=s2)
        skipped = worker.stats().skipped_waits
        add(a, b, y, stream=s3)
        assert worker.stats().skipped_waits == skipped + 1
        for s in (s1, s2, s3):
            s0.wait(s)
    g = cap.graph
    assert g.inferred_waits == 2
    x_h, y_h = rand(), poisoned()
    with hold(s1) as latch:
        replay = g.submit(x=x_h, y=y_h)
        assert not s3.query()
        latch.release()
        replay.sync(timeout=10)
    np.testing.assert_allclose(y_h, 8 * x_h, rtol=1e-6)
    g.close()
    a.free()
    b.free()


@pytest.mark.parametrize("auto", [True, False])
def test_a_captured_write_waits_for_a_captured_read_on_another_stream(open_worker, kernels, auto):
    # Write after read inside the graph: s1 reads a (held), s2 then overwrites it.
    w = open_worker(auto_deps=auto, sanitize="off")
    scale = w.register(kernels.get("scale", N))
    copy = w.register(kernels.get("copy", N))
    s0, s1, s2 = w.stream(), w.stream(), w.stream()
    x = rand()
    a = w.alloc_tensor(N, np.float32, init=x, stream=s1)
    with w.capture(name="war", stream=s0) as cap:
        r = cap.input("r", N, np.float32)
        y = cap.input("y", N, np.float32)
        start = s0.record()
        s1.wait(start)
        s2.wait(start)
        copy(a, r, stream=s1)
        scale(y, 5.0, a, stream=s2)
        s0.wait(s1)
        s0.wait(s2)
    g = cap.graph
    assert g.inferred_waits == (1 if auto else 0)
    y_h = rand()
    rd = w.alloc_tensor(N, np.float32, init=poisoned())
    yd = w.alloc_tensor(N, np.float32, init=y_h)
    with hold(s1) as latch:
        replay = g.submit(r=rd, y=yd)
        if auto:
            assert not s2.query()
        else:
            s2.sync(timeout=10)  # overwrote `a` before the held read
        latch.release()
        w.sync(timeout=10)
    assert replay.exception() is None
    np.testing.assert_allclose(rd.numpy(), x if auto else 5 * y_h, rtol=1e-6)
    np.testing.assert_allclose(a.numpy(), 5 * y_h, rtol=1e-6)
    g.close()
    for t in (a, rd, yd):
        t.free()


@pytest.mark.parametrize("how", ["tensor", "region", "worker"])
def test_each_opt_out_switches_capture_edges_off(open_worker, kernels, how):
    w = open_worker(sanitize="off", **({"auto_deps": False} if how == "worker" else {}))
    scale = w.register(kernels.get("scale", N))
    s0, s1, s2 = w.stream(), w.stream(), w.stream()
    a = w.alloc_tensor(N, np.float32, init=poisoned(), stream=s1, manual_deps=how == "tensor")
    before = inferred(w)
    g = _fork_graph(w, scale, a, s0, s1, s2, region=how == "region")
    assert g.inferred_waits == 0 and inferred(w) == before
    x = rand()
    np.testing.assert_allclose(_replay_with_the_writer_held(w, g, s1, s2, x, ordered=False), 3 * POISON,
                               rtol=1e-6)
    g.close()
    a.free()


def test_the_sanitizer_names_both_sides_of_a_race_in_a_capture(open_worker, kernels):
    w = open_worker(auto_deps=False, sanitize="raise")
    scale = w.register(kernels.get("scale", N))
    s0, s1, s2 = w.stream(), w.stream(), w.stream()
    a = w.alloc_tensor(N, np.float32, stream=s1)
    with w.capture(name="racy", stream=s0) as cap:
        x = cap.input("x", N, np.float32)
        y = cap.input("y", N, np.float32)
        start = s0.record()
        s1.wait(start)
        s2.wait(start)
        scale(x, 2.0, a, stream=s1); first_line = here()  # noqa: E702
        with pytest.raises(PtoRaceError) as info:
            second_line = here() + 1
            scale(a, 3.0, y, stream=s2)
        assert len(cap._cmds) == 4  # the refused launch recorded nothing; the capture goes on
        s2.wait(s1)
        scale(a, 3.0, y, stream=s2)  # ordered now: no race
        s0.wait(s2)
    msg = str(info.value)
    assert f"test_graph_hazards.py:{first_line}" in msg and f"test_graph_hazards.py:{second_line}" in msg
    assert "capture 'racy'" in msg and "after the write by launch of 'scale' ('out', Out)" in msg
    assert f"launch of 'scale' ('x', In) on stream {s2.id}" in msg and f"on stream {s1.id}" in msg
    assert f"test_graph_hazards.py:{first_line}" in info.value.first
    assert w.stats().races == 1
    x_h, y_h = rand(), poisoned()
    cap.graph.replay(x=x_h, y=y_h)
    np.testing.assert_allclose(y_h, 6 * x_h, rtol=1e-6)
    cap.graph.close()
    a.free()


def test_the_sanitizer_is_silent_on_a_correct_manual_capture(open_worker, kernels):
    w = open_worker(auto_deps=False, sanitize="raise")
    scale = w.register(kernels.get("scale", N))
    copy = w.register(kernels.get("copy", N))
    s0, s1, s2 = w.stream(), w.stream(), w.stream()
    a = w.alloc_tensor(N, np.float32, stream=s1)
    g = _fork_graph(w, scale, a, s0, s1, s2, explicit=True)
    with w.capture(name="war", stream=s0) as cap:  # write after read, ordered by hand
        r = cap.input("r", N, np.float32)
        s1.wait(s0)
        copy(a, r, stream=s1)
        s0.wait(s1)
        scale(r, 2.0, a, stream=s0)
    assert w.stats().races == 0
    x_h, y_h, r_h = rand(), poisoned(), poisoned()
    g.replay(x=x_h, y=y_h)
    cap.graph.replay(r=r_h)
    np.testing.assert_allclose(y_h, 6 * x_h, rtol=1e-6)
    np.testing.assert_allclose(r_h, 2 * x_h, rtol=1e-6)
    np.testing.assert_allclose(a.numpy(), 4 * x_h, rtol=1e-6)
    assert w.stats().races == 0
    g.close()
    cap.graph.close()
    a.free()


def test_the_sanitizer_warns_about_a_race_in_a_capture(open_worker, kernels):
    w = open_worker(auto_deps=False, sanitize="warn")
    scale = w.register(kernels.get("scale", N))
    s0, s1, s2 = w.stream(), w.stream(), w.stream()
    a = w.alloc_tensor(N, np.float32, stream=s1)
    with pytest.warns(RuntimeWarning, match="data race in capture 'fork'"):
        g = _fork_graph(w, scale, a, s0, s1, s2)  # recorded anyway
    assert w.stats().races == 1 and g.inferred_waits == 0
    g.close()
    a.free()


def test_a_replay_marks_the_waits_its_capture_inferred_in_the_trace(tmp_path, worker, kernels):
    import json

    from pypto_async.runtime._trace import Trace

    scale = worker.register(kernels.get("scale", N))
    s0, s1, s2 = worker.stream(), worker.stream(), worker.stream()
    a = worker.alloc_tensor(N, np.float32, stream=s1)
    inferred_graph = _fork_graph(worker, scale, a, s0, s1, s2)
    explicit = _fork_graph(worker, scale, a, s0, s1, s2, explicit=True)
    x = rand()
    xd = worker.alloc_tensor(N, np.float32, init=x, stream=s0)
    yd = worker.alloc_tensor(N, np.float32, init=poisoned(), stream=s0)
    worker.sync()
    with worker.trace(tmp_path / "t.json") as tr:
        inferred_graph.replay(x=xd, y=yd)
        explicit.replay(x=xd, y=yd)
    np.testing.assert_allclose(yd.numpy(), 6 * x, rtol=1e-6)
    doc = json.loads(tr.path.read_text())
    flows = [e for e in doc["traceEvents"] if e["ph"] in ("s", "f")]
    # Per replay: the fork (s0 -> s1, s0 -> s2) and the joins (s1 -> s0, s2 -> s0), captured waits;
    # the edge s1 -> s2, inferred in the first graph, captured in the second.
    marked = [e for e in flows if e["cat"] == "inferred"]
    assert len(marked) == 2 and all(e["name"].startswith("inferred wait") for e in marked)
    assert {(e["ph"], e["tid"]) for e in marked} == {("s", 1 + s1.id), ("f", 1 + s2.id)}
    plain = [e for e in flows if e["cat"] == "event"]
    assert len(plain) == 2 * 9  # 4 + 5 arrows
    # Into s2: each replay's fork, and the second graph's s2.wait(writer).
    assert sum(e["ph"] == "f" and e["tid"] == 1 + s2.id for e in plain) == 3
    (token,) = tr.trace.inferred_waits
    (record,) = [r for r in tr.trace.records if r.token == token]
    assert (record.kind_name, record.graph, record.stream_id) == ("wait", "fork", s2.id)
    assert Trace.from_chrome(doc).inferred_waits == tr.trace.inferred_waits
    for g in (inferred_graph, explicit):
        g.close()
    for t in (a, xd, yd):
        t.free()


# -- bindings the capture could not see -------------------------------------------------------------


def _apart_graph(w, scale, s0, s1, s2, a=None):
    """s1 writes t = 2 * x, s2 reads y = 3 * b: no edge between them, the capture sees two tensors.

    `t` is the input "t", or `a` used directly."""
    with w.capture(name="apart", stream=s0) as cap:
        x = cap.input("x", N, np.float32)
        t = cap.input("t", N, np.float32) if a is None else a
        b = cap.input("b", N, np.float32)
        y = cap.input("y", N, np.float32)
        start = s0.record()
        s1.wait(start)
        s2.wait(start)
        scale(x, 2.0, t, stream=s1)
        scale(b, 3.0, y, stream=s2)
        s0.wait(s1)
        s0.wait(s2)
    assert cap.graph.inferred_waits == 0
    return cap.graph


def _refused(w, g, match: str, **bindings) -> None:
    """The replay is refused before anything is queued."""
    before = w.stats()
    with pytest.raises(PtoArgumentError, match=match):
        g.replay(**bindings)
    after = w.stats()
    assert (after.commands_submitted, after.inferred_waits) == (before.commands_submitted, before.inferred_waits)


def test_a_replay_refuses_an_input_bound_to_a_tensor_the_graph_writes_directly(worker, kernels):
    scale = worker.register(kernels.get("scale", N))
    s0, s1, s2 = worker.stream(), worker.stream(), worker.stream()
    x, old = rand(), rand()
    a = worker.alloc_tensor(N, np.float32, init=old, stream=s0)
    xd = worker.alloc_tensor(N, np.float32, init=x, stream=s0)
    bd = worker.alloc_tensor(N, np.float32, init=old, stream=s0)
    yd = worker.alloc_tensor(N, np.float32, init=poisoned(), stream=s0)
    g = _apart_graph(worker, scale, s0, s1, s2, a)
    # Bound to "b", `a` would be read on s2 while s1 writes it, unordered.
    _refused(worker, g, r"binding 'b' is a DeviceTensor the graph also uses directly .*the graph writes it.*"
             r"bind a different DeviceTensor, or capture that tensor as an input", x=xd, b=a, y=yd)
    # The graph writes `a` and input "x" only reads: still two tensors to the capture.
    _refused(worker, g, "binding 'x' is a DeviceTensor the graph also uses directly", x=a, b=bd, y=yd)
    np.testing.assert_allclose(yd.numpy(), POISON)
    g.replay(x=xd, b=bd, y=yd)  # the worker and the graph keep working
    np.testing.assert_allclose(a.numpy(), 2 * x, rtol=1e-6)
    np.testing.assert_allclose(yd.numpy(), 3 * old, rtol=1e-6)
    g.close()
    for t in (a, xd, bd, yd):
        t.free()


def test_a_replay_refuses_one_tensor_bound_to_two_inputs_unless_both_read(worker, kernels):
    scale = worker.register(kernels.get("scale", N))
    s0, s1, s2 = worker.stream(), worker.stream(), worker.stream()
    x = rand()
    xd = worker.alloc_tensor(N, np.float32, init=x, stream=s0)
    td = worker.alloc_tensor(N, np.float32, init=poisoned(), stream=s0)
    yd = worker.alloc_tensor(N, np.float32, init=poisoned(), stream=s0)
    g = _apart_graph(worker, scale, s0, s1, s2)
    # "t" written on s1, "b" read on s2: one tensor, unordered.
    _refused(worker, g, r"bindings 't' and 'b' are one DeviceTensor, and 't' writes it.*"
             r"bind different DeviceTensors, or capture one input for both", x=xd, t=td, b=td, y=yd)
    _refused(worker, g, "bindings 'x' and 'y' are one DeviceTensor, and 'y' writes it", x=xd, t=td, b=yd, y=xd)
    np.testing.assert_allclose(td.numpy(), POISON)
    g.replay(x=xd, t=td, b=xd, y=yd)  # "x" and "b" only read: allowed
    np.testing.assert_allclose(td.numpy(), 2 * x, rtol=1e-6)
    np.testing.assert_allclose(yd.numpy(), 3 * x, rtol=1e-6)
    g.close()
    for t in (xd, td, yd):
        t.free()


@pytest.mark.pto_races
def test_aliased_bindings_are_the_users_business_without_ordering(open_worker, kernels):
    # With auto_deps and the sanitizer both off nothing tracks the accesses, so a replay takes
    # the bindings it would refuse otherwise: the ordering is the program's own.
    w = open_worker(auto_deps=False, sanitize="off")
    scale = w.register(kernels.get("scale", N))
    s0, s1, s2 = w.stream(), w.stream(), w.stream()
    x = rand()
    xd = w.alloc_tensor(N, np.float32, init=x, stream=s0)
    td = w.alloc_tensor(N, np.float32, init=poisoned(), stream=s0)
    yd = w.alloc_tensor(N, np.float32, init=poisoned(), stream=s0)
    g = _apart_graph(w, scale, s0, s1, s2)
    g.replay(x=xd, t=td, b=td, y=yd)  # refused with ordering tracked (above)
    np.testing.assert_allclose(td.numpy(), 2 * x, rtol=1e-6)  # the write; the read raced it
    g.close()
    for t in (xd, td, yd):
        t.free()
