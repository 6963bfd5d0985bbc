"""Garbage collection: dropped Launches and DeviceTensors free device memory in stream order,
and closed workers leave no threads behind."""

from __future__ import annotations

import asyncio
import gc
import threading
import warnings

import numpy as np

from pypto_async import testing
from pypto_async.runtime import ChipWorker, RunConfig

from .conftest import SMALL, mem_stats, proc_threads, threads_left

N = 256


def test_dropped_tensors_and_launches_free_in_stream_order(rel_kernels):
    with ChipWorker(RunConfig(**SMALL)) as w:
        inc = w.register(rel_kernels.get("inc", N))
        s = w.stream()
        t = w.alloc_tensor((N,), np.float32, init=np.ones(N, np.float32), stream=s)
        with testing.hold(s) as latch:
            for _ in range(3):
                inc.submit(t, stream=s)  # dropped un-awaited
            ptr = t.data_ptr
            del t
            gc.collect()
            # The free is queued behind the held work: the block is not reusable yet.
            w.default_stream.sync()
            fresh = [w.alloc_tensor((N,), np.float32) for _ in range(4)]
            assert ptr not in {f.data_ptr for f in fresh}
            latch.release()
        s.sync(timeout=10)
        w.default_stream.sync()
        for f in fresh:
            f.free()
        w.default_stream.sync()
        s.sync()
        m = mem_stats(w)
        assert (m.allocations, m.pending_frees) == (0, 0)


def test_dropped_tensor_in_async_mode_is_freed(rel_kernels):
    async def main():
        async with ChipWorker(RunConfig(**SMALL)) as w:
            inc = w.register(rel_kernels.get("inc", N))
            t = w.alloc_tensor((N,), np.float32, init=np.ones(N, np.float32))
            inc(t)  # not awaited
            del t
            gc.collect()
            await w.default_stream
            await w.default_stream
            m = mem_stats(w)
            assert (m.allocations, m.pending_frees) == (0, 0)

    asyncio.run(main())


def test_open_close_leaves_no_threads(rel_kernels):
    add = rel_kernels.get("add", N)
    gc.collect()
    py_before, native_before = threading.active_count(), proc_threads()
    for _ in range(5):
        with ChipWorker(RunConfig(**SMALL)) as w:
            out = np.zeros(N, np.float32)
            w.register(add)(np.ones(N, np.float32), np.ones(N, np.float32), out)
            assert len(proc_threads() - native_before) >= 3  # cores, copy engines, scheduler
        w2 = ChipWorker(RunConfig(**SMALL))  # never closed: collected
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            del w2
            gc.collect()
    assert threading.active_count() <= py_before
    assert threads_left(native_before) == {}
