"""Programs in graphs: a program, however many tasks it holds, is one launch and so one node of a graph."""

from __future__ import annotations

import numpy as np
import pytest

import pypto_async.language as pl
from pypto_async import ir
from pypto_async.errors import PtoArgumentError, PtoCaptureError, PtoError
from pypto_async.runtime import ChipWorker, RunConfig

from test_programs import Diamond, Failing, HelloWorld, poison, rand

R, C = 128, 128


@pl.jit
def plus_half(x: pl.Tensor, y: pl.Out[pl.Tensor]):
    with pl.incore():
        pl.store(pl.load(x, [0, 0], [R, C]) + 0.5, [0, 0], y)


@pl.jit
def too_big_a_scope(x: pl.Tensor, y: pl.Out[pl.Tensor]):
    with pl.manual_scope():
        for i in pl.range(8):
            with pl.incore(name_hint="step"):
                pl.store(pl.load(x, [i * 8, 0], [8, 32]) * 2.0, [i * 8, 0], y)


def diamond_want(x):
    e = np.exp(x.astype(np.float64))
    return (e + 1) * (e * 2)


@pytest.mark.slow
def test_a_diamond_program_and_a_kernel_replay_like_eager_with_fresh_bindings():
    diamond = ir.compile(Diamond)
    kernel = plus_half.compile(rand((R, C), 0), poison((R, C)))
    assert diamond.kind == "program" and kernel.kind == "kernel"
    with ChipWorker(RunConfig(cores=2)) as w:
        hd, hk = w.register(diamond), w.register(kernel)
        with w.capture(name="step") as cap:
            x = cap.input("x", (R, C), np.float32)
            y = cap.input("y", (R, C), np.float32)
            mid = w.alloc_tensor((R, C), np.float32)
            node = hd(x, mid)
            hk(mid, y)
        assert node.index == 0 and node.name == "launch of 'Diamond'"
        g = cap.graph
        assert len(g) == 2 and "2 commands (2 launches)" in repr(g)  # four tasks, one node
        for seed in range(5):
            xs = rand((R, C), 100 + seed)
            want = poison((R, C))
            scratch = poison((R, C))
            hd(xs, scratch)  # eager: the same two launches
            hk(scratch, want)
            np.testing.assert_allclose(want, diamond_want(xs) + 0.5, rtol=1e-5)
            got = poison((R, C))
            with w.trace() as window:
                g.replay(x=xs, y=got)  # host arrays: copied in and out inside the replay
            np.testing.assert_array_equal(got, want)
            records = [r for r in window.trace.records if r.graph == "step"]
            assert [r.kind_name for r in records].count("program") == 1
            assert sorted(r.name for r in records if r.kind_name == "task") == ["bottom", "left", "right", "top"]
        # Device bindings: results land in each replay's own output, none overwritten by a later one.
        xs = [rand((R, C), 200 + i) for i in range(3)]
        xd = [w.alloc_tensor((R, C), np.float32, init=a) for a in xs]
        yd = [w.alloc_tensor((R, C), np.float32, init=poison((R, C))) for _ in xs]
        for a, b in zip(xd, yd):
            g.submit(x=a, y=b)
        for a, b in zip(xs, yd):
            np.testing.assert_allclose(b.numpy(), diamond_want(a) + 0.5, rtol=1e-5)
        assert hd.program_stats()["runs"] == 5 + 5 + 3
        g.close()
        for t in (*xd, *yd):
            t.free()


@pytest.mark.anyio
async def test_a_program_replays_under_every_backend(config):
    c = ir.compile(HelloWorld)
    async with ChipWorker(config) as w:
        h = w.register(c)
        async with w.capture(name="hello") as cap:
            a = cap.input("a", (R, C), np.float32)
            b = cap.input("b", (R, C), np.float32)
            out = cap.input("out", (R, C), np.float32)
            h(a, b, out)
        g = cap.graph
        for seed in range(3):
            xa, xb, got = rand((R, C), seed), rand((R, C), seed + 10), poison((R, C))
            await g.replay(a=xa, b=xb, out=got)
            np.testing.assert_array_equal(got, xa + xb)
        g.close()


@pytest.mark.slow
def test_a_failing_task_fails_the_replay_naming_the_node_and_the_task_and_later_replays_run():
    c = ir.compile(Failing)
    kernel = plus_half.compile(rand((R, C), 0), poison((R, C)))
    with ChipWorker() as w:
        h = w.register(c)
        graphs = {}
        for name, n in (("bad", 9), ("good", 5)):
            with w.capture(name=name) as cap:
                x = cap.input("x", (8, 8), np.float32)
                out = cap.input("out", (8, 8), np.float32)
                h(x, n, out)  # n > 8 fails the task masked_head: a scalar fixed at capture
            graphs[name] = cap.graph
        x = rand((8, 8), 14)
        for _ in range(2):  # the failure was observed: the next replay of the same graph runs (and fails again)
            out = poison((8, 8))
            with pytest.raises(PtoError, match=r"graph 'bad' replay failed at node 0 \(launch of 'Failing', "
                                               r"a program on stream \d+\): task masked_head") as info:
                graphs["bad"].replay(x=x, out=out)
            assert "dependency" not in str(info.value).lower()
            assert np.isnan(out).all()  # the dependent task never wrote, and nothing was copied back
            out = poison((8, 8))
            graphs["good"].replay(x=x, out=out)
            want = np.zeros((8, 8), np.float32)
            want[:5] = x[:5]
            np.testing.assert_array_equal(out, want + 1)
        hk = w.register(kernel)
        xs = rand((R, C), 3)
        y = poison((R, C))
        hk(xs, y)  # the worker keeps working
        np.testing.assert_array_equal(y, xs + np.float32(0.5))
        for g in graphs.values():
            g.close()


def test_capture_time_checks_still_refuse_a_program_and_the_capture_goes_on():
    x = rand((64, 32), 28)
    scoped = too_big_a_scope.compile(x, poison((64, 32)))
    hello = ir.compile(HelloWorld)
    with ChipWorker(RunConfig(ring_task_window=4)) as w:
        hs, hh = w.register(scoped), w.register(hello)
        with w.capture(name="checked") as cap:
            a = cap.input("a", (R, C), np.float32)
            out = cap.input("out", (R, C), np.float32)
            with pytest.raises(PtoArgumentError, match=r"holds 8 tasks in one pl.manual_scope\(\)"):
                hs(x, poison((64, 32)))
            with pytest.raises(PtoCaptureError, match="host array inside capture"):
                hh(a, rand((R, C), 1), out)
            hh(a, a, out)
        g = cap.graph
        assert len(g) == 1 and hs.program_stats()["runs"] == 0
        xa, got = rand((R, C), 2), poison((R, C))
        g.replay(a=xa, out=got)
        np.testing.assert_array_equal(got, xa + xa)
        g.close()
