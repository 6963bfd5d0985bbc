"""A user's tests of their own pipeline, with the pypto_async pytest plugin.

(Run by tests/test_plugin.py through pytester; docs/testing.md shows it.)
"""

import numpy as np
import pytest

import pypto_async.language as pl
from pypto_async.errors import PtoCopyFault
from pypto_async.testing import fail_next, hold

N = 1024


@pl.jit
def double(x: pl.Tensor, y: pl.Out[pl.Tensor]):
    pl.store(pl.load(x, [0], [N]) * 2.0, [0], y)


def data():
    return np.random.default_rng(0).standard_normal(N).astype(np.float32)


@pytest.mark.asyncio
async def test_streams_overlap(pto_async_worker):
    w = pto_async_worker
    k = w.register(double.compile(data(), data()))
    a, b = w.stream(), w.stream()
    x, ya, yb = data(), np.full(N, np.nan, np.float32), np.full(N, np.nan, np.float32)
    with hold(a) as latch:            # stream a is held on the device
        on_a = k(x, ya, stream=a)
        await k(x, yb, stream=b)      # ... while stream b runs
        assert not on_a.done()
        latch.release()
        await on_a
    np.testing.assert_array_equal(ya, 2 * x)


@pytest.mark.asyncio
async def test_a_failed_copy_is_reported_and_the_stream_recovers(pto_async_worker):
    w = pto_async_worker
    k = w.register(double.compile(data(), data()))
    s = w.stream()
    x, y = data(), np.full(N, np.nan, np.float32)  # poisoned until the kernel writes it
    fail_next(s)                      # the launch's input copy fails on the device
    with pytest.raises(PtoCopyFault):
        await k(x, y, stream=s)
    await k(x, y, stream=s)           # later work on the stream runs normally
    np.testing.assert_array_equal(y, 2 * x)


@pytest.mark.asyncio
@pytest.mark.pto_config(ring_task_window=4)   # a tiny ring, to fill it on purpose
async def test_back_pressure_keeps_order(pto_async_worker):
    w = pto_async_worker
    k = w.register(double.compile(data(), data()))
    s = w.stream()
    xd = w.alloc_tensor(N, np.float32, init=data(), stream=s)
    yd = w.alloc_tensor(N, np.float32, stream=s)
    with hold(s) as latch:
        launches = [k.submit(xd, yd, stream=s) for _ in range(10)]
        assert s.backlog > 0          # the ring is full: the rest waits in order
        latch.release()
    for launch in launches:
        await launch.wait()
    assert w.stats().backpressure_waits > 0
    w.free_tensor(xd)
    w.free_tensor(yd)


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request):
    return request.param


@pytest.mark.anyio
async def test_under_anyio(pto_async_worker):
    w = pto_async_worker
    x, y = data(), np.full(N, np.nan, np.float32)  # poisoned until the kernel writes it
    await w.run(double.compile(x, y), x, y)
    np.testing.assert_array_equal(y, 2 * x)
