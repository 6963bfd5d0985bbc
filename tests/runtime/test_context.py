"""dispatch(), the worker stack and the task-local default stream (runtime/_context.py, runtime/_entry.py)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from pypto_async.runtime import ChipWorker, Launch, current_worker, dispatch
from pypto_async.runtime._entry import default_worker

N = 64


def rand(n: int = N) -> np.ndarray:
    return np.random.default_rng().standard_normal(n).astype(np.float32)


def test_dispatch_uses_the_innermost_open_worker(config, kernels):
    add = kernels.get("add", N)
    with ChipWorker(config) as outer:
        assert current_worker() is outer
        with ChipWorker(config) as inner:
            assert current_worker() is inner
            a, b, out = rand(), rand(), np.zeros(N, np.float32)
            assert dispatch(add, (a, b, out)) is out  # sync mode: the result, once complete
            np.testing.assert_array_equal(out, a + b)
            assert inner.stats().launches == 1
        assert current_worker() is outer
        assert outer.stats().launches == 0
    assert current_worker() is None


def test_without_a_worker_dispatch_uses_one_default_worker(kernels):
    x = rand()
    expected = x + np.float32(1)
    assert current_worker() is None
    assert dispatch(kernels.get("inc", N), (x,)) is x
    np.testing.assert_array_equal(x, expected)
    first = default_worker()
    dispatch(kernels.get("inc", N), (x,))
    assert default_worker() is first  # created once, not per call
    assert first.mode == "sync"


def test_dispatch_in_async_mode_returns_a_launch(config, kernels):
    async def main():
        async with ChipWorker(config) as w:
            x = rand()
            launch = dispatch(kernels.get("inc", N), (x,))
            assert isinstance(launch, Launch) and launch.stream is w.default_stream
            assert await launch is x

    asyncio.run(main())


def test_worker_stack_is_task_local(config):
    async def main():
        seen = {}
        entered = asyncio.Event()
        leave = asyncio.Event()

        async def holder():
            async with ChipWorker(config) as w:
                seen["holder"] = current_worker() is w
                entered.set()
                await leave.wait()

        async def other():
            await entered.wait()
            seen["other"] = current_worker()
            leave.set()

        await asyncio.gather(holder(), other())
        return seen

    seen = asyncio.run(main())
    assert seen == {"holder": True, "other": None}


def test_use_stream_is_task_local(config, kernels):
    async def main():
        async with ChipWorker(config) as w:
            inc = w.register(kernels.get("inc", N))
            s1, s2 = w.stream(), w.stream()

            async def task(stream):
                with w.use_stream(stream):
                    await asyncio.sleep(0)  # let the other task set its own default
                    launch = inc(rand())
                    assert launch.stream is stream
                    await launch

            await asyncio.gather(task(s1), task(s2))
            assert inc(rand()).stream is w.default_stream
            with pytest.raises(Exception, match="another ChipWorker"):
                async with ChipWorker(config) as other:
                    with other.use_stream(s1):
                        pass
            await w.default_stream
            s1.close()
            s2.close()

    asyncio.run(main())


# -- real @pl.jit kernels and compiled programs dispatch through the same stack ------------------

pl = pytest.importorskip("pypto_async.language")
ir = pytest.importorskip("pypto_async.ir")

R, C = 16, 32


@pl.jit
def scaled_add(a: pl.Tensor, b: pl.Tensor, out: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        ta = pl.load(a, [0, 0], [R, C])
        tb = pl.load(b, [0, 0], [R, C])
        pl.store(pl.add(pl.mul(ta, 2.0), tb), [0, 0], out)
    return out


def _inputs():
    rng = np.random.default_rng()
    a = rng.standard_normal((R, C)).astype(np.float32)
    b = rng.standard_normal((R, C)).astype(np.float32)
    return a, b, np.full((R, C), np.nan, np.float32)


def test_jit_kernel_dispatches_on_the_open_worker(config):
    with ChipWorker(config) as w:
        a, b, out = _inputs()
        assert scaled_add(a, b, out) is out
        np.testing.assert_allclose(out, 2 * a + b, rtol=1e-6)
        assert w.stats().launches == 1


def test_compiled_program_call_and_worker_run_agree(config):
    a, b, out = _inputs()
    compiled = ir.compile(scaled_add.lower(a, b, out), platform="a2a3sim")
    with ChipWorker(config) as w:
        assert compiled(a, b, out) is out
        np.testing.assert_allclose(out, 2 * a + b, rtol=1e-6)
        resident = w.alloc_tensor((R, C), np.float32, init=b)
        out2 = np.zeros((R, C), np.float32)
        w.run(compiled, a, resident, out2)
        np.testing.assert_array_equal(out2, out)
        resident.free()


def test_jit_kernel_in_async_mode_returns_a_launch(config):
    async def main():
        async with ChipWorker(config):
            a, b, out = _inputs()
            launch = scaled_add(a, b, out)
            assert isinstance(launch, Launch)
            assert await launch is out
            np.testing.assert_allclose(out, 2 * a + b, rtol=1e-6)

    asyncio.run(main())
