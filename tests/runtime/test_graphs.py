"""Graphs: capture a step once, replay it with new bindings in one driver call (runtime/_capture.py, _graph.py)."""

from __future__ import annotations

import gc
import warnings

import anyio
import numpy as np
import pytest

from conftest import assert_no_device_memory
from pypto_async._driver import lib
from pypto_async.errors import (
    PtoArgumentError,
    PtoCaptureError,
    PtoClosedError,
    PtoForeignTensorError,
    PtoInvalidStateError,
    PtoKernelFault,
    PtoTensorFreedError,
)
from pypto_async.runtime import CapturedEvent, CapturedNode, ChipWorker, Graph, RunConfig
from pypto_async.testing import hold

N = 64
POISON = np.float32(-12345.0)


def rand(n: int = N, rng=np.random.default_rng(2026)) -> np.ndarray:
    return rng.standard_normal(n).astype(np.float32)


def poisoned(n: int = N) -> np.ndarray:
    return np.full(n, POISON, np.float32)


def queued_state(w):
    """What a refused replay must leave alone: tokens, the token map, every stream's accepted count."""
    return (w._queue.next_token, len(w._queue.pending),
            tuple(lib.pto_stream_accepted(s._ptr) for s in w._streams.values()))


def chain_graph(w, k, name="chain"):
    """y = 3 * (x + b) + x on one stream, through a tensor the capture allocates."""
    add, scale = k["add"], k["scale"]
    with w.capture(name=name) as cap:
        x = cap.input("x", N, np.float32)
        b = cap.input("b", N, np.float32)
        y = cap.input("y", N, np.float32)
        mid = w.alloc_tensor(N, np.float32)
        add(x, b, mid)
        scale(mid, 3.0, mid)
        add(mid, x, y)
    return cap.graph


def chain_want(x, b):
    return np.float32(3.0) * (x + b) + x


@pytest.fixture
def k(worker, kernels):
    return {name: worker.register(kernels.get(name)) for name in ("add", "scale", "inc", "fail", "copy")}


# -- replay equals eager ------------------------------------------------------------------------


def test_chain_replay_equals_eager_with_device_and_host_bindings(worker, k):
    g = chain_graph(worker, k)
    x, b = rand(), rand()
    # Eager reference, outputs poisoned first.
    eager = poisoned()
    mid = worker.alloc_tensor(N, np.float32)
    k["add"](x, b, mid)
    k["scale"](mid, 3.0, mid)
    k["add"](mid, x, eager)
    np.testing.assert_allclose(eager, chain_want(x, b), rtol=1e-6)
    # Host bindings: copied in and out by direction inside the replay.
    y = poisoned()
    launch = g.replay(x=x, b=b, y=y)
    assert launch.done() and launch.exception() is None
    np.testing.assert_array_equal(y, eager)
    # DeviceTensor bindings.
    xd = worker.alloc_tensor(N, np.float32, init=x)
    bd = worker.alloc_tensor(N, np.float32, init=b)
    yd = worker.alloc_tensor(N, np.float32, init=poisoned())
    g.replay(x=xd, b=bd, y=yd)
    np.testing.assert_array_equal(yd.numpy(), eager)
    # Mixed.
    y2 = poisoned()
    g.replay(x=xd, b=b, y=y2)
    np.testing.assert_array_equal(y2, eager)
    assert isinstance(g, Graph) and len(g) == 3 and [i.name for i in g.inputs] == ["x", "b", "y"]
    assert "chain" in repr(g) and "3 commands" in repr(g)
    g.close()
    for t in (mid, xd, bd, yd):
        t.free()


def pipeline_capture(w, kernel, weight, s_in, s_k, s_out, xs, ys):
    """The demo's batch: H2D on s_in, the kernel on s_k, D2H on s_out, joined back on s_in."""
    with w.capture(name="batch", stream=s_in) as cap:
        x = cap.input("x", N, np.float32)
        y = cap.input("y", N, np.float32)
        h2d = w.copy(xs, x, stream=s_in)
        s_k.wait(h2d)
        launch = kernel(xs, weight, ys, stream=s_k)
        s_out.wait(launch)
        w.copy(y, ys, stream=s_out)
        cap.stream.wait(s_out)
    return cap.graph


@pytest.mark.anyio
async def test_three_stream_pipeline_with_host_bindings(config, kernels):
    async with ChipWorker(config) as w:
        add = w.register(kernels.get("add"))
        weight_h = rand()
        weight = w.alloc_tensor(N, np.float32, init=weight_h)
        s_in, s_k, s_out = w.stream(), w.stream(), w.stream()
        xs = w.alloc_tensor(N, np.float32, stream=s_in)
        ys = w.alloc_tensor(N, np.float32, stream=s_k)
        g = pipeline_capture(w, add, weight, s_in, s_k, s_out, xs, ys)
        assert set(g.streams) == {s_in, s_k, s_out} and g.stream is s_in
        batches = [rand() for _ in range(16)]
        outs = [poisoned() for _ in batches]
        launches = [g.replay(x=x, y=y) for x, y in zip(batches, outs)]
        for launch in launches:
            assert await launch is None
        for x, y in zip(batches, outs):
            np.testing.assert_array_equal(y, x + weight_h)
        # Eager, the same batch: the same numbers.
        eager = poisoned()
        await w.copy(xs, batches[0], stream=s_in)
        s_k.wait(s_in)
        await add(xs, weight, ys, stream=s_k)
        await w.copy(eager, ys, stream=s_k)
        np.testing.assert_array_equal(eager, outs[0])
        g.close()
        for t in (weight, xs, ys):
            t.free()


@pytest.mark.anyio
async def test_a_thousand_replays_with_fresh_bindings_give_fresh_results(config, kernels):
    async with ChipWorker(config) as w:
        add, scale = (w.register(kernels.get(n)) for n in ("add", "scale"))
        g = chain_graph(w, {"add": add, "scale": scale})
        rng = np.random.default_rng(5)
        xs = [rng.standard_normal(N).astype(np.float32) for _ in range(1000)]
        bs = [rng.standard_normal(N).astype(np.float32) for _ in range(1000)]
        ys = [poisoned() for _ in range(1000)]
        launches = [g.replay(x=x, b=b, y=y) for x, b, y in zip(xs, bs, ys)]
        for launch in launches:
            await launch
        # No replay's output was overwritten by a later one: each holds its own inputs' result.
        for x, b, y in zip(xs, bs, ys):
            np.testing.assert_allclose(y, chain_want(x, b), rtol=1e-6)
        g.close()


@pytest.mark.anyio
async def test_device_bound_replays_in_flight_keep_their_own_outputs(config, kernels):
    async with ChipWorker(config) as w:
        add, scale = (w.register(kernels.get(n)) for n in ("add", "scale"))
        g = chain_graph(w, {"add": add, "scale": scale})
        pairs = [(rand(), rand()) for _ in range(20)]
        ins = [(w.alloc_tensor(N, np.float32, init=x), w.alloc_tensor(N, np.float32, init=b)) for x, b in pairs]
        outs = [w.alloc_tensor(N, np.float32, init=poisoned()) for _ in pairs]
        with hold(g.stream) as latch:  # all twenty queued before the first runs
            launches = [g.replay(x=xd, b=bd, y=yd) for (xd, bd), yd in zip(ins, outs)]
            assert not any(launch.done() for launch in launches)
            latch.release()
        for launch in launches:
            await launch
        for (x, b), yd in zip(pairs, outs):
            np.testing.assert_allclose(await yd.to_host(), chain_want(x, b), rtol=1e-6)
        g.close()
        for t in [t for pair in ins for t in pair] + outs:
            t.free()


@pytest.mark.anyio
async def test_replays_larger_than_a_small_ring_and_heap_keep_their_own_outputs(kernels):
    """A replay's launches go in as one run of ring slots; what a 16-slot ring with a 256-byte
    argument heap has no room for follows through the overflow, the heap wrapping inside runs."""
    cfg = RunConfig(ring_task_window=16, ring_heap=256, cores=2, copy_engines=1, device_memory=16 << 20)
    async with ChipWorker(cfg) as w:
        add, scale = (w.register(kernels.get(n)) for n in ("add", "scale"))
        with w.capture(name="long") as cap:
            x = cap.input("x", N, np.float32)
            b = cap.input("b", N, np.float32)
            y = cap.input("y", N, np.float32)
            add(x, b, y)
            for i in range(24):  # y = 0.5 * y + x, 24 times: each launch patched
                scale(y, 0.5, y)
                add(y, x, y)
        g = cap.graph

        def want(xv, bv):
            yv = xv + bv
            for _ in range(24):
                yv = np.float32(0.5) * yv
                yv = yv + xv
            return yv

        pairs = [(rand(), rand()) for _ in range(6)]
        ins = [(w.alloc_tensor(N, np.float32, init=xv), w.alloc_tensor(N, np.float32, init=bv)) for xv, bv in pairs]
        outs = [w.alloc_tensor(N, np.float32, init=poisoned()) for _ in pairs]
        with hold(g.stream) as latch:  # every replay accepted before the first runs
            launches = [g.submit(x=xd, b=bd, y=yd) for (xd, bd), yd in zip(ins, outs)]
            assert not any(launch.done() for launch in launches)
            latch.release()
        for launch in launches:
            await launch.wait()
        for (xv, bv), yd in zip(pairs, outs):
            np.testing.assert_allclose(await yd.to_host(), want(xv, bv), rtol=1e-6)
        # Again with the ring drained (the heap mid-way) and host bindings: the same numbers.
        host_out = poisoned()
        await g.replay(x=pairs[0][0], b=pairs[0][1], y=host_out)
        np.testing.assert_allclose(host_out, want(*pairs[0]), rtol=1e-6)
        g.close()
        for t in [t for pair in ins for t in pair] + outs:
            t.free()


# -- forbidden calls, forks, other tasks ---------------------------------------------------------


@pytest.mark.anyio
async def test_every_forbidden_call_raises_at_its_call_site_and_the_capture_goes_on(config, kernels):
    async with ChipWorker(config) as w:
        inc = w.register(kernels.get("inc"))
        other = chain_graph(w, {"add": w.register(kernels.get("add")), "scale": w.register(kernels.get("scale"))})
        t = w.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32))
        host = np.zeros(N, np.float32)
        async with w.capture(name="forbidden") as cap:
            x = cap.input("x", N, np.float32)
            node = inc(x)
            assert isinstance(node, CapturedNode) and node.index == 0 and not node.done()
            with pytest.raises(PtoCaptureError, match="awaiting node 0"):
                await node
            with pytest.raises(PtoCaptureError):
                node.sync()
            with pytest.raises(PtoCaptureError):
                node.result()
            with pytest.raises(PtoCaptureError, match="ChipWorker.wait"):
                await w.wait()
            with pytest.raises(PtoCaptureError, match="ChipWorker.sync"):
                w.sync()
            with pytest.raises(PtoCaptureError, match="await stream"):
                await cap.stream
            with pytest.raises(PtoCaptureError, match="Stream.sync"):
                cap.stream.sync()
            with pytest.raises(PtoCaptureError, match="copy_from"):
                w.copy_from(host, t.data_ptr, t.nbytes)
            with pytest.raises(PtoCaptureError, match="host array"):
                await w.copy(host, t)  # a copy to the host
            with pytest.raises(PtoCaptureError, match="host array"):
                inc(host)
            with pytest.raises(PtoCaptureError, match="replay of graph"):
                other.replay(x=host, b=host, y=host.copy())
            event = cap.stream.record()
            assert isinstance(event, CapturedEvent)
            with pytest.raises(PtoCaptureError):
                await event
            inc(x)  # still capturing
            inc(t)
        g = cap.graph
        assert len(g) == 4  # inc, record, inc, inc
        xd = w.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32))
        await g.replay(x=xd)
        np.testing.assert_array_equal(await xd.to_host(), np.full(N, 2, np.float32))
        np.testing.assert_array_equal(await t.to_host(), np.ones(N, np.float32))
        g.close()
        other.close()
        for tt in (t, xd):
            tt.free()


def test_a_fork_not_joined_back_is_an_error_naming_the_stream(worker, k):
    import pypto_async

    assert pypto_async.PtoCaptureError is PtoCaptureError and issubclass(PtoCaptureError, pypto_async.PtoError)
    s2 = worker.stream()
    with pytest.raises(PtoCaptureError, match=f"stream {s2.id} was forked into the capture and not joined"):
        with worker.capture(name="fork") as cap:
            x = cap.input("x", N, np.float32)
            a = k["inc"](x)
            s2.wait(a)
            k["inc"](x, stream=s2)
    with pytest.raises(PtoCaptureError, match="discarded"):
        cap.graph
    # Joined: fine.
    with worker.capture(name="fork") as cap:
        x = cap.input("x", N, np.float32)
        a = k["inc"](x)
        s2.wait(a)
        k["inc"](x, stream=s2)
        cap.stream.wait(s2)
    xd = worker.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32))
    cap.graph.replay(x=xd)
    np.testing.assert_array_equal(xd.numpy(), np.full(N, 2, np.float32))
    cap.graph.close()
    xd.free()


def test_a_stream_outside_the_capture_is_refused(worker, k):
    other = worker.stream()
    with worker.capture(name="outside") as cap:
        x = cap.input("x", N, np.float32)
        with pytest.raises(PtoCaptureError, match=f"stream {other.id} is not part of the capture"):
            k["inc"](x, stream=other)
        node = k["inc"](x)
    with pytest.raises(PtoCaptureError, match="has ended"):
        node.event
    with pytest.raises(PtoCaptureError, match="declare inputs inside"):
        cap.input("late", N, np.float32)
    with pytest.raises(PtoArgumentError, match="not CapturedNode"):
        other.wait(node)
    cap.graph.close()


def test_an_exception_discards_the_capture_and_frees_its_tensors(worker, k):
    with pytest.raises(ZeroDivisionError):
        with worker.capture(name="boom") as cap:
            x = cap.input("x", N, np.float32)
            mid = worker.alloc_tensor(N, np.float32)
            k["add"](x, x, mid)
            1 / 0
    assert mid.freed
    with pytest.raises(PtoCaptureError, match="discarded"):
        cap.graph


@pytest.mark.anyio
async def test_another_tasks_work_during_a_capture_is_not_recorded(config, kernels):
    async with ChipWorker(config) as w:
        inc = w.register(kernels.get("inc"))
        theirs = w.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32))
        in_capture = anyio.Event()
        captured = anyio.Event()
        launched = []

        async def other_task():
            await in_capture.wait()
            launched.append(inc(theirs))  # same stream, queued for real behind the latch
            captured.set()

        with hold(w.default_stream) as latch:
            async with anyio.create_task_group() as tg:
                tg.start_soon(other_task)
                async with w.capture(name="mine") as cap:
                    x = cap.input("x", N, np.float32)
                    inc(x)
                    in_capture.set()
                    await captured.wait()
                    inc(x)
            assert not launched[0].done()  # held by the latch: really queued, not recorded
            latch.release()
        await launched[0]
        np.testing.assert_array_equal(await theirs.to_host(), np.ones(N, np.float32))
        g = cap.graph
        assert len(g) == 2
        xd = w.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32))
        await g.replay(x=xd)
        np.testing.assert_array_equal(await xd.to_host(), np.full(N, 2, np.float32))
        np.testing.assert_array_equal(await theirs.to_host(), np.ones(N, np.float32))  # not replayed
        g.close()
        for t in (theirs, xd):
            t.free()


# -- bindings and tensors -----------------------------------------------------------------------


def test_freeing_a_static_tensor_while_its_graph_lives_is_refused(worker, k):
    weight = worker.alloc_tensor(N, np.float32, init=rand())
    with worker.capture(name="static") as cap:
        x = cap.input("x", N, np.float32)
        own = worker.alloc_tensor(N, np.float32)
        k["add"](x, weight, own)
        k["copy"](own, x)
    g = cap.graph
    for t in (weight, own):
        with pytest.raises(PtoInvalidStateError, match="used by a graph"):
            t.free()
        assert not t.freed
    g.close()
    assert own.freed  # the graph's own, freed with it
    weight.free()


def test_wrong_bindings_are_refused_with_nothing_queued(worker, k, config):
    g = chain_graph(worker, k)
    good = worker.alloc_tensor(N, np.float32)
    freed = worker.alloc_tensor(N, np.float32)
    freed.free()
    wrong_shape = worker.alloc_tensor(N + 1, np.float32)
    wrong_dtype = worker.alloc_tensor(N, np.int32)
    with ChipWorker(config) as other:
        foreign = other.alloc_tensor(N, np.float32)
        before = queued_state(worker)
        cases = [
            (dict(x=good, b=good), PtoArgumentError, "missing 'y'"),
            (dict(x=good, b=good, y=good, z=good), PtoArgumentError, "unknown 'z'"),
            (dict(x=wrong_shape, b=good, y=good), PtoArgumentError, r"expected shape \(64,\)"),
            (dict(x=wrong_dtype, b=good, y=good), PtoArgumentError, "expected dtype float32"),
            (dict(x=foreign, b=good, y=good), PtoForeignTensorError, "another ChipWorker"),
            (dict(x=freed, b=good, y=good), PtoTensorFreedError, "freed"),
            (dict(x=rand(N + 1), b=good, y=good), PtoArgumentError, "expected shape"),
            (dict(x=rand().astype(np.float64), b=good, y=good), PtoArgumentError, "expected dtype"),
            (dict(x=np.zeros(2 * N, np.float32)[::2], b=good, y=good), PtoArgumentError, "contiguous"),
            (dict(x=good, b=good, y=np.zeros(N, np.float32).copy().view()), None, None),
        ]
        for bindings, error, match in cases:
            if error is None:
                continue
            with pytest.raises(error, match=match):
                g.replay(**bindings)
            assert queued_state(worker) == before
        ro = np.zeros(N, np.float32)
        ro.flags.writeable = False
        with pytest.raises(PtoArgumentError, match="read-only"):
            g.replay(x=good, b=good, y=ro)  # the replay writes y
        assert queued_state(worker) == before
        foreign.free()
    g.close()
    for t in (good, wrong_shape, wrong_dtype):
        t.free()


def test_inputs_are_declared_once_and_must_be_used(worker, k):
    with pytest.raises(PtoCaptureError, match="'unused' is used by no launch or copy"):
        with worker.capture(name="unused") as cap:
            cap.input("unused", N, np.float32)
            x = cap.input("x", N, np.float32)
            k["inc"](x)
    with worker.capture(name="names") as cap:
        x = cap.input("x", N, np.float32)
        with pytest.raises(PtoArgumentError, match="declared already"):
            cap.input("x", N, np.float32)
        with pytest.raises(PtoArgumentError, match="other than 'stream'"):
            cap.input("stream", N, np.float32)
        k["inc"](x)
    cap.graph.close()


# -- failures, back-pressure, streams -------------------------------------------------------------


def test_a_failing_node_fails_its_replay_naming_the_node_and_later_replays_run(worker, k):
    with worker.capture(name="faulty") as cap:
        x = cap.input("x", N, np.float32)
        k["inc"](x)
        k["inc"](x)
        k["fail"](x)
        k["inc"](x)
    g = cap.graph
    xd = worker.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32))
    with pytest.raises(PtoKernelFault, match=r"graph 'faulty' replay failed at node 2 \(launch of 'fail'") as info:
        g.replay(x=xd)
    assert "k_fail: failing on purpose" in str(info.value)
    np.testing.assert_array_equal(xd.numpy(), np.full(N, 2, np.float32))  # the node after it did not run
    good = chain_graph(worker, k, name="good")
    y = poisoned()
    a, b = rand(), rand()
    good.replay(x=a, b=b, y=y)  # the failure was observed: later replays run normally
    np.testing.assert_allclose(y, chain_want(a, b), rtol=1e-6)
    with pytest.raises(PtoKernelFault, match="node 2"):
        g.replay(x=xd)
    for graph in (g, good):
        graph.close()
    xd.free()


@pytest.mark.anyio
async def test_a_failing_node_on_a_fork_names_it(config, kernels):
    async with ChipWorker(config) as w:
        inc, fail = w.register(kernels.get("inc")), w.register(kernels.get("fail"))
        s2 = w.stream()
        async with w.capture(name="forked") as cap:
            x = cap.input("x", N, np.float32)
            a = inc(x)
            s2.wait(a)
            fail(x, stream=s2)
            cap.stream.wait(s2)
            inc(x)
        g = cap.graph
        xd = w.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32))
        with pytest.raises(PtoKernelFault, match=rf"node 1 \(launch of 'fail', a launch on stream {s2.id}\)"):
            await g.replay(x=xd)
        np.testing.assert_array_equal(await xd.to_host(), np.ones(N, np.float32))
        g.close()
        xd.free()


@pytest.mark.anyio
async def test_backpressure_with_a_4_slot_ring_and_a_64_node_graph(kernels):
    cfg = RunConfig(ring_task_window=4, cores=1, copy_engines=1, device_memory=16 << 20)
    async with ChipWorker(cfg) as w:
        inc = w.register(kernels.get("inc"))
        async with w.capture(name="deep") as cap:
            x = cap.input("x", N, np.float32)
            for _ in range(64):
                inc(x)
        g = cap.graph
        assert len(g) == 64
        xd = w.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32))
        await w.default_stream
        ticks = 0
        done = False
        latch_cm = hold(w.default_stream)
        latch = latch_cm.__enter__()

        async def ticker():
            nonlocal ticks
            while not done:
                ticks += 1
                if ticks == 3:
                    latch.release()  # the first submits wait: the loop still runs
                await anyio.sleep(0)

        replays = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(ticker)
            for _ in range(10):
                launch = await g.submit(x=xd)
                assert launch.submitted_to_ring
                replays.append(launch)
            await replays[-1].wait()
            done = True
        latch_cm.__exit__(None, None, None)
        assert ticks >= 3
        assert [r.exception() for r in replays] == [None] * 10
        assert w.stats().backpressure_waits > 0
        np.testing.assert_array_equal(await xd.to_host(), np.full(N, 640, np.float32))
        g.close()
        xd.free()


def test_replays_on_another_stream_run_after_the_previous_replay(worker, k):
    with worker.capture(name="moving") as cap:
        x = cap.input("x", N, np.float32)
        k["scale"](x, 2.0, x)
        k["inc"](x)
    g = cap.graph
    s1, s2 = worker.stream(), worker.stream()
    xd = worker.alloc_tensor(N, np.float32, init=np.ones(N, np.float32))
    with hold(s1) as latch:
        first = g.submit(x=xd, stream=s1)
        second = g.submit(x=xd, stream=s2)
        # The second waits on the device for the first, held by the latch.
        assert lib.pto_stream_synchronize(s2._ptr, 50_000) == -lib.PTO_ETIMEDOUT
        assert not first.done() and not second.done()
        latch.release()
    worker.sync()
    assert first.exception() is None and second.exception() is None
    np.testing.assert_array_equal(xd.numpy(), np.full(N, (1 * 2 + 1) * 2 + 1, np.float32))
    g.close()
    xd.free()


def test_closed_graphs_and_streams_refuse_replays(worker, k):
    s2 = worker.stream()
    with worker.capture(name="closing", stream=s2) as cap:
        x = cap.input("x", N, np.float32)
        k["inc"](x, stream=s2)
    g = cap.graph
    xd = worker.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32))
    with hold(s2):
        launch = g.submit(x=xd)
        s2.close()  # the queued replay still runs
    worker.sync()
    assert launch.exception() is None
    with pytest.raises(PtoClosedError):
        g.replay(x=xd)
    g.close()
    g.close()  # idempotent
    with pytest.raises(PtoClosedError, match="graph 'closing' is closed"):
        g.replay(x=xd, stream=worker.default_stream)
    np.testing.assert_array_equal(xd.numpy(), np.ones(N, np.float32))
    xd.free()


def test_closing_the_worker_closes_its_graphs(config, kernels):
    w = ChipWorker(config)
    with w:
        inc = w.register(kernels.get("inc"))
        with w.capture(name="left open") as cap:
            x = cap.input("x", N, np.float32)
            own = w.alloc_tensor(N, np.float32)
            inc(x)
            inc(own)
        g = cap.graph
        g.replay(x=np.zeros(N, np.float32))
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the graph's tensors are not "forgotten"
            w.close()
    assert g.is_closed and own.freed


@pytest.mark.slow
def test_a_dropped_graph_lets_go_of_its_tensors(worker, k):
    weight = worker.alloc_tensor(N, np.float32, init=rand())
    with worker.capture(name="dropped") as cap:
        x = cap.input("x", N, np.float32)
        own = worker.alloc_tensor(N, np.float32)
        k["add"](x, weight, own)
    g = cap.graph
    g.replay(x=rand())
    del g, cap, own
    gc.collect()
    weight.free()  # no graph holds it any more
    worker.sync()
    assert_no_device_memory(worker)


def test_traces_tag_replayed_commands_with_the_graph(worker, k):
    g = chain_graph(worker, k, name="traced")
    x, b = rand(), rand()
    eager = worker.alloc_tensor(N, np.float32, init=x)
    with worker.trace() as window:
        g.replay(x=x, b=b, y=poisoned())
        k["inc"](eager)
    records = window.trace.records
    tagged = [r for r in records if r.graph == "traced"]
    assert {"launch", "h2d", "d2h"} <= {r.kind_name for r in tagged}
    assert [r.name for r in tagged if r.kind_name == "launch"] == ["k_add", "k_scale", "k_add"]
    assert any(r.kind_name == "launch" and r.name == "k_inc" and r.graph == "" for r in records)
    doc = window.trace.to_chrome()
    assert any(ev.get("args", {}).get("graph") == "traced" for ev in doc["traceEvents"])
    g.close()
    eager.free()


@pytest.mark.anyio
async def test_async_replay_and_submit_under_every_backend(config, kernels):
    async with ChipWorker(config) as w:
        add, scale = (w.register(kernels.get(n)) for n in ("add", "scale"))
        g = chain_graph(w, {"add": add, "scale": scale})
        x, b = rand(), rand()
        y = poisoned()
        launch = g.submit(x=x, b=b, y=y)
        assert await launch is launch
        await launch.wait()
        np.testing.assert_allclose(y, chain_want(x, b), rtol=1e-6)
        assert not launch.cancel()  # a replay cannot be withdrawn
        g.close()


@pytest.mark.slow
def test_demo_runs_its_batch_loop_through_graphs(tmp_path, capsys):
    import json

    from pypto_async._cli import main

    assert main(["demo", "--graph", "--batches", "6", "--rows", "64", "--cols", "256", "--depth", "2",
                 "--out", str(tmp_path), "--no-progress", "--no-png"]) == 0
    text = capsys.readouterr().out
    assert "one graph replay per batch (2 graphs" in text and "replayed graphs:" in text
    assert "matched numpy" in text
    doc = json.loads((tmp_path / "demo_trace.json").read_text())
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    launches = [e for e in xs if e["cat"] == "launch"]
    assert len(launches) == 6 and {e["args"].get("graph") for e in launches} == {"batch 0", "batch 1"}
    assert sum(e["cat"] == "h2d" and e["tid"] < 100_000 for e in xs) == 6


@pytest.mark.anyio
async def test_a_replay_behind_a_launch_waiting_for_memory_waits_in_order(kernels):
    big = 4096  # an `add` of three host arrays of this size fills the device below
    cfg = RunConfig(cores=1, copy_engines=1, device_memory=64 << 10)
    async with ChipWorker(cfg) as w:
        add = w.register(kernels.get("add", big))
        inc = w.register(kernels.get("inc", N))
        held, s = w.stream(), w.stream()
        async with w.capture(name="behind", stream=s) as cap:
            x = cap.input("x", N, np.float32)
            inc(x, stream=s)
        g = cap.graph
        xd = w.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32), stream=s)
        a, b = rand(big), rand(big)
        o1, o2 = poisoned(big), poisoned(big)
        with hold(held) as latch:
            first = add(a, b, o1, stream=held)  # its temporaries fill the device
            second = add(a, b, o2, stream=s)  # do not fit: waits in s's host FIFO
            assert not second.submitted_to_ring
            replay = g.submit(x=xd)  # behind it, in stream order
            assert not replay.submitted_to_ring
            latch.release()
        await replay
        await replay.wait()
        await first
        await second
        np.testing.assert_array_equal(o2, a + b)
        np.testing.assert_array_equal(await xd.to_host(), np.ones(N, np.float32))
        g.close()
        xd.free()


def test_a_worker_closed_inside_the_capture_leaves_no_graph(config, kernels):
    w = ChipWorker(config)
    inc = w.register(kernels.get("inc"))
    with pytest.raises(PtoClosedError):
        with w.capture(name="orphan") as cap:
            x = cap.input("x", N, np.float32)
            inc(x)
            w.close()
    with pytest.raises(PtoCaptureError, match="discarded"):
        cap.graph


def test_torch_inputs_and_bindings_and_a_replay_on_a_new_stream(worker, k):
    torch = pytest.importorskip("torch")
    born = worker.stream()
    w_h = rand()
    weight = worker.alloc_tensor(N, torch.float32, init=torch.from_numpy(w_h), stream=born)
    with worker.capture(name="torch") as cap:
        x = cap.input("x", N, torch.float32)
        y = cap.input("y", (N,), np.float32)
        k["add"](x, weight, y)
    g = cap.graph
    assert g.inputs[0].shape == (N,) and g.inputs[0].dtype.np_name == "float32"
    x_h = torch.from_numpy(rand())
    y_h = torch.full((N,), float(POISON))
    elsewhere = worker.stream()  # neither the capture's stream nor the weight's: it joins both first
    g.replay(x=x_h, y=y_h, stream=elsewhere)
    np.testing.assert_array_equal(y_h.numpy(), x_h.numpy() + w_h)
    with pytest.raises(PtoArgumentError, match="expected dtype float32"):
        g.replay(x=x_h.double(), y=y_h)
    g.close()
    weight.free()


# -- placeholders outside their capture (issue 25, item 1) ----------------------------------------

_PLACEHOLDER_SCRIPT = r"""
import sys
sys.path.insert(0, sys.argv[1])
import anyio, numpy as np
from helpers.kernels import KernelLib
from pypto_async._driver import ffi, lib
from pypto_async.errors import PtoCaptureError
from pypto_async.runtime import ChipWorker, RunConfig

kernels = KernelLib(sys.argv[2])


async def main():
    async with ChipWorker(RunConfig(cores=2, copy_engines=2, device_memory=64 << 20)) as w:
        inc = w.register(kernels.get("inc"))
        ready, done = anyio.Event(), anyio.Event()
        box = {}

        async def other_task():
            await ready.wait()
            try:
                await inc(box["x"])  # used to be queued with address 0: the core segfaulted
            except PtoCaptureError as exc:
                print("refused:", exc)
            # Past the runtime's checks, straight to the driver: refused there too.
            rc = lib.pto_stream_launch(w.default_stream._ptr, inc._kptr, 1, [0], 1, 0)
            print("driver:", rc, ffi.string(lib.pto_last_error()).decode())
            done.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(other_task)
            async with w.capture(name="mine") as cap:
                box["x"] = cap.input("x", 64, np.float32)
                inc(box["x"])
                ready.set()
                await done.wait()
        await w.default_stream
    print("clean exit")


anyio.run(main, backend=sys.argv[3])
"""


@pytest.mark.slow  # a subprocess or pytester run: seconds
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_another_tasks_launch_of_a_placeholder_is_refused_not_a_crash(kernels, backend, tmp_path):
    """Run several times in a subprocess: before the fix the process died of SIGSEGV."""
    import pathlib
    import subprocess
    import sys

    script = tmp_path / "placeholder.py"
    script.write_text(_PLACEHOLDER_SCRIPT)
    tests_dir = pathlib.Path(__file__).resolve().parents[1]  # tests/: its helpers
    for _ in range(3):
        proc = subprocess.run([sys.executable, str(script), str(tests_dir), str(kernels.directory), backend],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
        out = proc.stdout
        assert "refused: " in out and "input 'x' of capture 'mine'" in out, out
        assert f"driver: {-lib.PTO_EINVAL} " in out and "argument 0 is a tensor" in out, out
        assert out.rstrip().endswith("clean exit"), out


@pytest.mark.anyio
async def test_a_placeholder_is_refused_everywhere_but_its_own_recording(config, kernels):
    """Another task's launch, copy, to_host and free; and any use after the capture: PtoCaptureError, nothing queued."""
    async with ChipWorker(config) as w:
        inc = w.register(kernels.get("inc"))
        ready, done = anyio.Event(), anyio.Event()
        seen = []

        async def other_task():
            await ready.wait()
            x = box["x"]
            before = queued_state(w)
            for use in (lambda: inc(x), lambda: w.copy(x, rand()), lambda: w.copy(rand(), x),
                        lambda: inc.submit(x)):
                with pytest.raises(PtoCaptureError, match="input 'x' of capture 'mine'.*another task") as info:
                    use()
                seen.append(str(info.value))
            with pytest.raises(PtoCaptureError, match="input 'x' of capture 'mine'"):
                await x.to_host()
            assert queued_state(w) == before
            done.set()

        box = {}
        async with anyio.create_task_group() as tg:
            tg.start_soon(other_task)  # started outside the capture: a task started inside inherits it
            async with w.capture(name="mine") as cap:
                x = box["x"] = cap.input("x", N, np.float32)
                inc(x)  # its own recording takes it
                ready.set()
                await done.wait()
                inc(x)
        assert len(seen) == 4 and x.freed
        before = queued_state(w)
        with pytest.raises(PtoCaptureError, match="input 'x' of capture 'mine'.*after it ended"):
            inc(x)
        with pytest.raises(PtoCaptureError, match="after it ended"):
            cap.graph.replay(x=x)
        assert queued_state(w) == before
        xd = w.alloc_tensor(N, np.float32, init=(start := rand()))
        await cap.graph.replay(x=xd)
        np.testing.assert_array_equal(await xd.to_host(), (start + np.float32(1)) + np.float32(1))
        cap.graph.close()
        xd.free()


def test_a_placeholder_of_one_capture_is_refused_in_another(worker, k):
    with worker.capture(name="first") as first:
        x = first.input("x", N, np.float32)
        k["inc"](x)
    with worker.capture(name="second") as second:
        y = second.input("y", N, np.float32)
        with pytest.raises(PtoCaptureError, match="input 'x' of capture 'first'"):
            k["add"](x, y, y)
        with pytest.raises(PtoCaptureError, match="input 'x' of capture 'first'"):
            worker.copy(y, x)
        k["inc"](y)
    first.graph.close()
    second.graph.close()


# -- an empty capture (issue 25, item 9) -----------------------------------------------------------


def test_an_empty_capture_replays_as_a_no_op_in_sync_mode(worker, k):
    with worker.capture(name="nothing") as cap:
        pass
    g = cap.graph
    assert len(g) == 0
    x = worker.alloc_tensor(N, np.float32, init=(start := rand()))
    k["inc"](x)
    launch = g.replay()
    assert launch.done() and launch.exception() is None
    g.replay()  # again: nothing accumulates
    np.testing.assert_array_equal(x.numpy(), start + np.float32(1))
    g.close()
    x.free()


@pytest.mark.anyio
async def test_an_empty_capture_replays_as_a_no_op_in_order_on_its_stream(config, kernels):
    async with ChipWorker(config) as w:
        inc = w.register(kernels.get("inc"))
        s = w.stream()
        async with w.capture(name="nothing", stream=s) as cap:
            pass
        g = cap.graph
        x = w.alloc_tensor(N, np.float32, init=(start := rand()), stream=s)
        with hold(s) as latch:
            inc(x, stream=s)
            replay = g.submit()
            await replay  # in the ring, behind the held launch
            assert not replay.done()  # an ordered no-op: it waits for the work queued before it
            latch.release()
        assert await replay.wait() is None
        np.testing.assert_array_equal(await x.to_host(), start + np.float32(1))
        g.close()
        x.free()
