"""Several devices as one: StackedDeviceTensor, DistributedWorker, collectives.

Every result is checked against numpy on random data (outputs poisoned
first); ordering and back-pressure are made deterministic with latches.
"""

from __future__ import annotations

import contextlib
import time

import anyio
import numpy as np
import pytest

from conftest import SMALL
from pypto_async.errors import (
    PtoArgumentError,
    PtoCopyFault,
    PtoDependencyError,
    PtoError,
    PtoNotSupported,
    PtoTimeout,
)
from pypto_async.runtime import (
    ChipWorker,
    DistributedLaunch,
    DistributedWorker,
    RunConfig,
    StackedDeviceTensor,
)
from pypto_async.testing import fail_next, hold

N = 1024
CFG = RunConfig(**SMALL)


def rand(shape, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(-1000, 1000, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def poison(shape, dtype=np.float32):
    return np.full(shape, -7777, dtype)


def read(dw, t) -> np.ndarray:
    out = poison(t.full_shape, t.dtype.np_storage)
    dw.copy_stacked_from(t, out)
    return out


# -- StackedDeviceTensor ------------------------------------------------------------------


@pytest.fixture
def pair():
    with DistributedWorker([0, 1], CFG) as dw:
        yield dw


def test_stacked_tensor_validation_rules(pair):
    a, b = pair.workers
    s0 = a.alloc_tensor((4, 8), np.float32)
    s1 = b.alloc_tensor((4, 8), np.float32)
    odd = b.alloc_tensor((4, 9), np.float32)
    ints = b.alloc_tensor((4, 8), np.int32)
    rules = [
        (([s0, s1], (2,), (0, 1)), "rank >= 2"),
        (([], (0, 4, 8), ()), "at least one shard"),
        (([s0], (2, 4, 8), (0, 1)), "expects 2 shards"),
        (([s0, s1], (2, 4, 8), (0,)), "expects 2 worker_ids"),
        (([s0, s1], (2, 4, 8), (1, 1)), "distinct"),
        (([s0, np.zeros((4, 8))], (2, 4, 8), (0, 1)), "must be a DeviceTensor"),
        (([s0, odd], (2, 4, 8), (0, 1)), "expected per-shard shape"),
        (([s0, ints], (2, 4, 8), (0, 1)), "dtype int32 differs"),
        (([s0, s1], (2, "4", 8), (0, 1)), "must contain ints"),
    ]
    for args, match in rules:
        with pytest.raises(PtoArgumentError, match=match):
            StackedDeviceTensor(*args)
    x = StackedDeviceTensor([s0, s1], [2, 4, 8], [0, 1])
    assert x.full_shape == x.shape == (2, 4, 8) and x.worker_ids == (0, 1) and len(x) == 2
    assert x[0] is s0 and x[1] is s1
    assert x[1, ...] is s1 and x[0, :, 0:8] is s0 and x[np.int64(1)] is s1
    assert x.dtype.np_name == "float32"
    with pytest.raises(IndexError, match="out of range"):
        x[2]
    with pytest.raises(IndexError, match="too many"):
        x[0, :, :, :]
    with pytest.raises(PtoArgumentError, match="whole-shard"):
        x[0, 1:3]
    with pytest.raises(PtoArgumentError, match="must be int"):
        x["0"]
    for t in (s0, s1, odd, ints):
        t.free()


def test_distributed_worker_validation():
    with pytest.raises(PtoArgumentError, match="at least one"):
        DistributedWorker([])
    with pytest.raises(PtoArgumentError, match="distinct"):
        DistributedWorker([1, 1])
    with pytest.raises(PtoArgumentError, match="depth"):
        DistributedWorker([0], depth=0)
    with pytest.raises(PtoArgumentError, match="out of range"):
        DistributedWorker([0, 99], CFG)  # the first device is closed again


def test_alloc_stacked_tensor_shards_and_validates(pair, kernels):
    host = rand((2, 4, 8))
    t = pair.alloc_stacked_tensor(host)
    assert t.worker_ids == (0, 1) and t.full_shape == (2, 4, 8)
    assert t[0].worker is pair.workers[0] and t[1].worker is pair.workers[1]
    np.testing.assert_array_equal(read(pair, t), host)
    swapped = pair.alloc_stacked_tensor(host, worker_ids=[1, 0])
    assert swapped[0].worker is pair.workers[1]
    np.testing.assert_array_equal(read(pair, swapped), host)
    torch = pytest.importorskip("torch")
    tt = pair.alloc_stacked_tensor(torch.from_numpy(host))
    np.testing.assert_array_equal(read(pair, tt), host)
    for bad, match in [(np.zeros(4, np.float32), "rank >= 2"), (np.zeros((0, 4), np.float32), "at least one")]:
        with pytest.raises(PtoArgumentError, match=match):
            pair.alloc_stacked_tensor(bad)
    for ids, match in [([0], "1 entries"), ([0, 0], "distinct"), ([0, 2], "out of range")]:
        with pytest.raises(PtoArgumentError, match=match):
            pair.alloc_stacked_tensor(host, worker_ids=ids)
    with pytest.raises(PtoArgumentError, match="does not match"):
        pair.copy_stacked_from(t, np.empty((2, 4, 9), np.float32))
    for x in (t, swapped, tt):
        pair.free_stacked_tensor(x)
        pair.free_stacked_tensor(x)  # idempotent
        assert all(s.freed for s in x.shards)


# -- run and submit ---------------------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 4])
def test_run_on_every_device_equals_numpy(kernels, n):
    with DistributedWorker(range(n), CFG) as dw:
        add = dw.register(kernels.get("add", N))
        x = rand((n, N), seed=1)
        y = rand(N, seed=2)  # a host input: the same array on every device
        xs = dw.alloc_stacked_tensor(x)
        out = dw.alloc_stacked_tensor(poison((n, N)))
        done = add(xs, y, out)
        assert isinstance(done, DistributedLaunch) and done.done()
        np.testing.assert_array_equal(read(dw, out), x + y)
        dw.run(kernels.get("add", N), out, xs, out)  # the one-shot form, shards as outputs too
        np.testing.assert_array_equal(read(dw, out), (x + y) + x)
        dw.free_stacked_tensor(xs)
        dw.free_stacked_tensor(out)


def test_run_refuses_arguments_that_do_not_fit_before_queueing(pair, kernels):
    add = pair.register(kernels.get("add", N))
    xs = pair.alloc_stacked_tensor(rand((2, N)))
    one = pair.alloc_stacked_tensor(rand((1, N)))  # a shard on worker 0 only
    with pytest.raises(PtoArgumentError, match="every device would write"):
        add(xs, xs, np.empty(N, np.float32))
    with pytest.raises(PtoArgumentError, match="StackedDeviceTensor"):
        add(xs, xs, xs[0])
    with pytest.raises(PtoArgumentError, match="no shard on worker 1"):
        add(xs, one, xs)
    with DistributedWorker([2, 3], CFG) as other:
        foreign = other.alloc_stacked_tensor(rand((2, N)))
        with pytest.raises(PtoArgumentError, match="does not live on worker"):
            add(xs, foreign, xs)
        other.free_stacked_tensor(foreign)
    assert all(w.stats().launches == 0 for w in pair.workers)
    add(xs, xs, xs)  # still working
    pair.free_stacked_tensor(xs)
    pair.free_stacked_tensor(one)


def test_sync_submit_keeps_at_most_depth_in_flight(kernels):
    with DistributedWorker([0, 1], CFG, depth=2) as dw:
        add = dw.register(kernels.get("add", N))
        x = rand((2, N))
        xs = dw.alloc_stacked_tensor(x)
        outs = [dw.alloc_stacked_tensor(poison((2, N))) for _ in range(4)]
        subs = []
        for i, out in enumerate(outs):
            subs.append(add.submit(xs, np.full(N, i, np.float32), out))
            # The call returned with at most `depth` dispatches not yet done.
            assert sum(not s.done() for s in subs) <= 2
        for i, (s, out) in enumerate(zip(subs, outs)):
            s.sync()
            np.testing.assert_array_equal(read(dw, out), x + i)
            dw.free_stacked_tensor(out)
        dw.free_stacked_tensor(xs)


@pytest.mark.slow
def test_sync_timeout_is_one_deadline_for_every_device_and_raises_pto_timeout(kernels):
    # Every device is held, so every part is late: a wait per device would take 3 t; one
    # deadline for all takes about t.  (The bound is loose, for a loaded machine; what it
    # tells apart is t against 3 t.)
    t = 0.4
    with DistributedWorker([0, 1, 2], CFG) as dw:
        add = dw.register(kernels.get("add", N))
        x = rand((3, N))
        xs = dw.alloc_stacked_tensor(x)
        out = dw.alloc_stacked_tensor(poison((3, N)))
        with contextlib.ExitStack() as held:
            latches = [held.enter_context(hold(w.default_stream)) for w in dw.workers]
            pending = add.submit(xs, np.full(N, 2, np.float32), out)
            start = time.monotonic()
            with pytest.raises(PtoTimeout, match="not every device completed"):
                pending.sync(timeout=t)
            elapsed = time.monotonic() - start
            assert elapsed < 2.5 * t, f"sync(timeout={t}) took {elapsed:.2f} s on 3 held devices"
            assert not pending.done()
            with pytest.raises(PtoTimeout):
                pending.sync(timeout=0)
            for latch in latches:
                latch.release()
            assert pending.sync(timeout=30) is None  # the work went on
        np.testing.assert_array_equal(read(dw, out), x + 2)
        add(xs, np.full(N, 5, np.float32), out)  # the workers go on
        np.testing.assert_array_equal(read(dw, out), x + 5)
        with pytest.raises(PtoArgumentError, match="timeout"):
            pending.sync(timeout=-1)
        dw.free_stacked_tensor(out)
        dw.free_stacked_tensor(xs)


@pytest.mark.anyio
async def test_async_submit_is_back_pressure_not_a_blocked_loop(kernels):
    async with DistributedWorker([0, 1], CFG, depth=2) as dw:
        add = dw.register(kernels.get("add", N))
        x = rand((2, N))
        xs = dw.alloc_stacked_tensor(x)
        outs = [dw.alloc_stacked_tensor(poison((2, N))) for _ in range(3)]
        third = None
        with hold(dw.workers[0].default_stream) as l0, hold(dw.workers[1].default_stream) as l1:
            first = await add.submit(xs, np.zeros(N, np.float32), outs[0])
            second = await add.submit(xs, np.ones(N, np.float32), outs[1])

            async def submit_third():
                nonlocal third
                third = await add.submit(xs, np.full(N, 2, np.float32), outs[2])

            async with anyio.create_task_group() as tg:
                tg.start_soon(submit_third)
                # The loop runs on while the third waits: other device work completes.
                await dw.workers[0].stream().record()
                await dw.workers[1].stream().record()
                assert third is None and not first.done()
                l0.release()
                l1.release()
            assert first.done() and third is not None
        for i, launch in enumerate((first, second, third)):
            await launch
            np.testing.assert_array_equal(await _aread(dw, outs[i]), x + i)
        for t in (xs, *outs):
            dw.free_stacked_tensor(t)


async def _aread(dw, t) -> np.ndarray:
    out = poison(t.full_shape, t.dtype.np_storage)
    await dw.copy_stacked_from(t, out)
    return out


# -- collectives -----------------------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_all_reduce_equals_numpy(n, dtype):
    with DistributedWorker(range(n), CFG) as dw:
        host = rand((n, 37, 11), dtype, seed=n)  # 407 elements: chunks of unequal size
        for op, ref in (("sum", np.sum), ("max", np.max), ("min", np.min), ("prod", np.prod)):
            t = dw.alloc_stacked_tensor(host)
            out = dw.alloc_stacked_tensor(poison(host.shape, dtype))
            assert dw.all_reduce(t, op, out=out) is out
            want = np.broadcast_to(ref(host, axis=0), host.shape)
            np.testing.assert_allclose(read(dw, out), want, rtol=1e-5, atol=1e-6)
            np.testing.assert_array_equal(read(dw, t), host)  # out= leaves t alone
            assert dw.all_reduce(t, op) is t  # in place
            np.testing.assert_allclose(read(dw, t), want, rtol=1e-5, atol=1e-6)
            dw.free_stacked_tensor(t)
            dw.free_stacked_tensor(out)


def _halves(seed: int) -> np.ndarray:
    """[2, 64] float16: random normals and subnormals, and the edges of the format (65504, inf, -0, NaN, ties)."""
    rng = np.random.default_rng(seed)
    h = (rng.standard_normal((2, 64)) * 8).astype(np.float16)
    h[:, :8] = (rng.standard_normal((2, 8)) * 2.0**-20).astype(np.float16)  # subnormals (and their sums)
    h[:, 8] = [65504, 65504]  # sum overflows to inf
    h[:, 9] = [np.inf, -1]
    h[:, 10] = [-0.0, -0.0]
    h[:, 11] = [np.nan, 3]
    h[:, 12] = [2048, 1]  # 2049 is a tie between 2048 and 2050: to even, 2048
    h[:, 13] = [2048, 3]  # 2051: a tie rounding up, to 2052
    h[:, 14] = [6.1e-5, 6.1e-5]  # the largest subnormal region meets the smallest normal
    return h


@pytest.mark.parametrize("op", ["sum", "max", "min", "prod"])
def test_all_reduce_of_float16_is_each_step_rounded_to_half_as_numpy(op, pair):
    # Two ranks: one step per element, so the result is numpy's float16 op of the two shards, bit for bit.
    host = _halves(seed=len(op))
    t = pair.alloc_stacked_tensor(host)
    out = pair.alloc_stacked_tensor(poison(host.shape, np.float16))
    pair.all_reduce(t, op, out=out)
    ufunc = {"sum": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply}[op]
    with np.errstate(all="ignore"):
        want = np.broadcast_to(ufunc(host[0], host[1]), host.shape)
    got = read(pair, out)
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, want)  # NaN where numpy's is
    real = ~np.isnan(want)
    np.testing.assert_array_equal(got.view(np.uint16)[real], want.view(np.uint16)[real])  # -0, inf, ties: bits


@pytest.mark.slow  # four ranks
def test_all_reduce_of_float16_over_four_ranks_is_close_to_the_exact_sum():
    with DistributedWorker(range(4), CFG) as dw:
        host = rand((4, 300), np.float16, seed=9)
        t = dw.alloc_stacked_tensor(host)
        dw.all_reduce(t, "sum")
        want = np.broadcast_to(host.astype(np.float64).sum(0), host.shape)
        np.testing.assert_allclose(read(dw, t).astype(np.float64), want, rtol=4e-3, atol=4e-3)


@pytest.mark.slow  # over half a second each on two CPUs (the fast tier's budget)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_all_reduce_max_and_min_propagate_nan_whatever_the_ring_order(dtype):
    # As np.maximum / np.minimum and pl.maximum / pl.minimum: a NaN in any shard makes that
    # element NaN, whichever shard holds it, wherever it falls in the chunks of the ring, and
    # whichever worker holds which shard.  (It used to depend on the order the ring met it.)
    n, elems = 3, 7  # chunks of 3, 3 and 1 elements
    orders = [(0, 1, 2), (2, 0, 1), (1, 3, 0)]
    with DistributedWorker(range(4), CFG) as dw:
        base = rand((n, elems), dtype, seed=3)
        cases = [(shard, pos) for shard in range(n) for pos in range(elems)]
        for op, ref in (("max", np.max), ("min", np.min)):
            for ids in orders:
                for k, (shard, pos) in enumerate(cases):
                    host = base.copy()
                    host[shard, pos] = np.nan
                    other = cases[(k * 5 + 3) % len(cases)]  # a second NaN elsewhere, some of the time
                    if k % 2:
                        host[other] = np.nan
                    t = dw.alloc_stacked_tensor(host, worker_ids=ids)
                    out = dw.alloc_stacked_tensor(poison(host.shape, dtype), worker_ids=ids)
                    dw.all_reduce(t, op, out=out)
                    want = np.broadcast_to(ref(host, axis=0), host.shape)
                    assert np.isnan(want[0, pos])
                    np.testing.assert_array_equal(read(dw, out), want, err_msg=f"{op} {ids} {host}")
                    dw.all_reduce(t, op)  # in place
                    np.testing.assert_array_equal(read(dw, t), want, err_msg=f"{op} {ids} in place")
                    dw.free_stacked_tensor(t)
                    dw.free_stacked_tensor(out)


def test_all_reduce_max_of_the_reported_shards_is_nan():
    host = np.array([[np.nan, 1], [2, 3], [4, np.nan]], np.float32)[:, None, :]  # the example
    with DistributedWorker(range(3), CFG) as dw:
        for op in ("max", "min"):
            t = dw.alloc_stacked_tensor(host)
            dw.all_reduce(t, op)
            assert np.isnan(read(dw, t)).all()
            dw.free_stacked_tensor(t)


def test_all_reduce_of_fewer_elements_than_devices():
    with DistributedWorker(range(4), CFG) as dw:
        host = rand((4, 1, 2))  # two elements over four ranks: empty chunks
        t = dw.alloc_stacked_tensor(host)
        dw.all_reduce(t)
        np.testing.assert_allclose(read(dw, t), np.broadcast_to(host.sum(0), host.shape), rtol=1e-5, atol=1e-6)
        dw.free_stacked_tensor(t)


@pytest.mark.parametrize("n", [2, 3, 4])
def test_all_gather_and_broadcast_equal_numpy(n):
    with DistributedWorker(range(n), CFG) as dw:
        host = rand((n, 64, 3), np.float64, seed=10 + n)
        t = dw.alloc_stacked_tensor(host)
        g = dw.all_gather(t)
        assert g.full_shape == (n, n, 64, 3) and g.worker_ids == t.worker_ids
        got = read(dw, g)
        for i in range(n):
            np.testing.assert_array_equal(got[i], host)
        for root in range(n):
            u = dw.alloc_stacked_tensor(host)
            assert dw.broadcast(u, root) is u
            np.testing.assert_array_equal(read(dw, u), np.broadcast_to(host[root], host.shape))
            dw.free_stacked_tensor(u)
        dw.free_stacked_tensor(g)
        dw.free_stacked_tensor(t)


def test_collectives_on_a_permuted_subset_of_workers():
    with DistributedWorker(range(4), CFG) as dw:
        host = rand((3, 50))
        t = dw.alloc_stacked_tensor(host, worker_ids=[3, 0, 2])
        dw.all_reduce(t, "max")
        np.testing.assert_array_equal(read(dw, t), np.broadcast_to(host.max(0), host.shape))
        dw.free_stacked_tensor(t)


def test_collective_argument_errors(pair):
    t = pair.alloc_stacked_tensor(rand((2, 8)))
    half = pair.alloc_stacked_tensor(rand((2, 8), np.int16))
    other = pair.alloc_stacked_tensor(rand((2, 9)))
    with pytest.raises(PtoArgumentError, match="'sum', 'max', 'min', 'prod'"):
        pair.all_reduce(t, "mean")
    with pytest.raises(PtoNotSupported, match="int16"):
        pair.all_reduce(half)
    with pytest.raises(PtoArgumentError, match="full_shape"):
        pair.all_reduce(t, out=other)
    with pytest.raises(PtoArgumentError, match="root"):
        pair.broadcast(t, 2)
    with pytest.raises(PtoArgumentError, match="StackedDeviceTensor"):
        pair.all_gather(t[0])
    np.testing.assert_array_equal(read(pair, t), read(pair, t))  # nothing was queued on t
    for x in (t, half, other):
        pair.free_stacked_tensor(x)


def test_a_failure_fails_the_collective_and_the_worker_goes_on(pair):
    host = rand((2, 256))
    t = pair.alloc_stacked_tensor(host)
    read(pair, t)  # uploads done
    fail_next(pair.workers[1].default_stream, PtoCopyFault)
    with pytest.raises((PtoCopyFault, PtoDependencyError)):
        pair.all_reduce(t)
    u = pair.alloc_stacked_tensor(host)
    pair.all_reduce(u)
    np.testing.assert_allclose(read(pair, u), np.broadcast_to(host.sum(0), host.shape), rtol=1e-5, atol=1e-6)
    pair.free_stacked_tensor(t)
    pair.free_stacked_tensor(u)


@pytest.mark.anyio
async def test_collectives_in_async_mode_wait_for_the_shards_writers(kernels):
    n = 3
    async with DistributedWorker(range(n), CFG) as dw:
        inc = [w.register(kernels.get("inc", N)) for w in dw.workers]
        host = rand((n, N), seed=5)
        t = dw.alloc_stacked_tensor(host)
        side = dw.workers[1].stream()
        with hold(side) as latch:
            writer = inc[1](t[1], stream=side)  # a held writer of shard 1, on another stream
            pending = dw.all_reduce(t)
            assert isinstance(pending, DistributedLaunch)
            await dw.workers[0].stream().record()
            assert not pending.done() and not writer.done()
            latch.release()
            assert await pending is t
        want = host.sum(0) + 1  # the writer's increment is in: the ring waited for it
        np.testing.assert_allclose(await _aread(dw, t), np.broadcast_to(want, host.shape), rtol=1e-5, atol=1e-6)
        g = await dw.all_gather(t)
        got = await _aread(dw, g)
        for i in range(n):
            np.testing.assert_allclose(got[i], np.broadcast_to(want, host.shape), rtol=1e-5, atol=1e-6)
        await dw.broadcast(t, 2)
        # Later work on a shard's other stream waits for the collective.
        later = inc[0](t[0], stream=dw.workers[0].stream())
        await later
        got = await _aread(dw, t)
        np.testing.assert_allclose(got[0], want + 1, rtol=1e-5, atol=1e-6)
        for x in (t, g):
            dw.free_stacked_tensor(x)


def test_lifecycle():
    dw = DistributedWorker([4, 6], CFG)
    assert [w.device_id for w in dw.workers] == [4, 6] and dw.device_ids == (4, 6) and dw.depth == 2
    assert not dw.is_closed and "DistributedWorker" in repr(dw)
    dw.close()
    dw.close()
    assert dw.is_closed and all(w.is_closed for w in dw.workers)
    with pytest.raises(PtoError):
        dw.alloc_stacked_tensor(rand((2, 4)))
    with DistributedWorker([0], CFG) as one:
        assert isinstance(one.workers[0], ChipWorker)
    assert one.is_closed


@pytest.mark.slow
def test_bench_devices_script_runs(tmp_path):
    # A smoke run of benchmarks/bench_devices.py: its rounds check their results against
    # numpy; the figures are for the README, not asserted here.
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "devices.json"
    proc = subprocess.run([sys.executable, str(root / "benchmarks" / "bench_devices.py"), "--quick",
                           "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(out.read_text())
    assert result["copies"]["peer_gbps"] > 0 and result["all_reduce"]["bus_gbps"] > 0
    assert [r["unit"] for r in result["rows"]] == ["GB/s", "GB/s", "ms"]


# -- WorkerStats.bytes_peer ----------------------------------------------------------------------


def test_bytes_peer_counts_what_peer_copies_moved_on_the_device_that_ran_them():
    with DistributedWorker([0, 1], CFG) as dw:
        w0, w1 = dw.workers
        assert (w0.stats().bytes_peer, w1.stats().bytes_peer) == (0, 0)
        a = w0.alloc_tensor(N, np.float32, init=rand(N, seed=1))
        b = w1.alloc_tensor(N, np.float32, init=poison(N))
        w0.copy(b, a)  # on w0's stream (the source's default)
        w1.copy(b, a, stream=w1.default_stream)  # on w1's
        w1.copy(a, b)  # on w1's (the source's default)
        st0, st1 = w0.stats(), w1.stats()
        assert (st0.bytes_peer, st1.bytes_peer) == (N * 4, 2 * N * 4)
        assert st0.bytes_d2d == st1.bytes_d2d == 0  # a peer copy is not a local one
        host = rand((2, 3, 100), seed=2)  # all_reduce: each rank moves 2 (n - 1) / n of its shard
        t = dw.alloc_stacked_tensor(host)
        dw.all_reduce(t)
        moved = [w.stats().bytes_peer for w in dw.workers]
        assert moved == [st0.bytes_peer + 300 * 4, st1.bytes_peer + 300 * 4]
        g = dw.all_gather(t)  # each rank takes the other's shard (300 elements)
        assert [w.stats().bytes_peer - m for w, m in zip(dw.workers, moved)] == [300 * 4, 300 * 4]
        for x in (a, b):
            x.free()
        dw.free_stacked_tensor(g)
        dw.free_stacked_tensor(t)
