"""Garbage collection: dropped Launches and DeviceTensors free device memory in stream order,
and closed workers leave no threads behind."""

from __future__ import annotations

import asyncio
import ctypes
import gc
import os
import threading
import warnings

import numpy as np
import pytest

from pypto_async import testing
from pypto_async.runtime import ChipWorker, RunConfig

from .conftest import SMALL, mem_stats, proc_threads, thread_name, threads_left

N = 256


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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


def test_threads_left_names_only_threads_this_library_may_have_started():
    """Why test_open_close_leaves_no_threads once saw one extra thread: the gRPC threads a Ray
    session (tests/ray_cluster, earlier in the same process) leaves behind start new ones of
    their own at any moment (an ``event_engine`` thread was seen starting 11 s into an idle
    wait).  Such a thread is another library's, named by it; one the driver started is named
    ``pto-...``, and one nobody named carries the process's name."""
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    before = proc_threads()
    stop = threading.Event()
    named = threading.Barrier(4)

    def run(name):
        if name is not None:
            assert prctl(15, name.encode(), 0, 0, 0) == 0  # PR_SET_NAME: this thread's comm
        named.wait()
        stop.wait()

    threads = [threading.Thread(target=run, args=(name,)) for name in ("event_engine", "pto-core7", None)]
    for t in threads:
        t.start()
    try:
        named.wait()
        left = threads_left(before, settle_s=0)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert sorted(left.values()) == sorted(["pto-core7", thread_name(str(os.getpid()))])
