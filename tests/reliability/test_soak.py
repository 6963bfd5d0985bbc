"""Soak: mixed traffic for a bounded time; RSS, device memory, fds and threads come back.

A few seconds in CI; ``PYPTO_ASYNC_LONG=1`` runs it for minutes
(``PYPTO_ASYNC_SOAK_S`` sets the seconds).
"""

from __future__ import annotations

import asyncio
import gc
import os
import time

import numpy as np
import pytest

from pypto_async import testing
from pypto_async.errors import PtoDependencyError, PtoKernelFault
from pypto_async.runtime import ChipWorker, RunConfig

from .conftest import LONG, SMALL, mem_stats, proc_fds, proc_threads, rss_kib, threads_left

N = 1024
SECONDS = float(os.environ.get("PYPTO_ASYNC_SOAK_S", 300 if LONG else 3))
RSS_TOLERANCE_KIB = 8 * 1024
#: Set by tests/reliability/run_asan.sh: ASan's quarantine holds freed memory, so RSS grows.
SANITIZED = os.environ.get("PYPTO_ASYNC_SANITIZED", "") == "1"


async def _round(w, handles, streams, rng, i):
    add, inc, fail = handles
    a = rng.standard_normal(N).astype(np.float32)
    b = rng.standard_normal(N).astype(np.float32)
    s0, s1, s2, s3 = streams
    t = w.alloc_tensor((N,), np.float32, init=a, stream=s0)
    out = np.full(N, np.nan, np.float32)
    launches = [add(t, b, out, stream=s1)]
    s2.wait(launches[0])
    launches.append(inc(t, stream=s2))
    back = np.empty(N, np.float32)
    launches.append(w.copy(back, t, stream=s2))
    if i % 7 == 3:  # a fault now and then, on a stream of its own: only its dependents fail
        u = w.alloc_tensor((N,), np.float32, stream=s3)
        bad = fail(u, stream=s3)
        after = inc(u, stream=s3)
        u.free()
        try:
            await bad
        except PtoKernelFault:
            pass
        try:
            await after
        except PtoDependencyError:
            pass
    for launch in launches:
        await launch
    np.testing.assert_array_equal(out, a + b)
    np.testing.assert_array_equal(back, a + 1)
    t.free(stream=s2)


async def _traffic(seconds: float, seed: int):
    async with ChipWorker(RunConfig(**dict(SMALL, ring_task_window=16))) as w:
        handles = [w.register(k) for k in _kernels]
        streams = [w.default_stream, w.stream(), w.stream(), w.stream()]
        rng = np.random.default_rng(seed)
        deadline = time.monotonic() + seconds
        i = 0
        while time.monotonic() < deadline:
            await asyncio.gather(*(_round(w, handles, streams, rng, i + j) for j in range(4)))
            if i % 50 == 0:  # a held stream released later, as a test would
                held = w.alloc_tensor((N,), np.float32, stream=streams[1])
                with testing.hold(streams[1]) as latch:
                    pending = handles[1](held, stream=streams[1])
                    latch.release()
                    await pending
                held.free()
                gc.collect()
            i += 4
        for s in streams:
            await s
        m = mem_stats(w)
        assert (m.allocations, m.pending_frees) == (0, 0), (m.allocations, m.pending_frees)
    return i


_kernels = []


@pytest.mark.slow
def test_soak_returns_to_its_starting_point(rel_kernels):
    _kernels[:] = [rel_kernels.get(n, N) for n in ("add", "inc", "fail")]
    asyncio.run(_traffic(0.5, 0))  # warm-up: caches, allocator arenas, imports
    gc.collect()
    rss0, fds0, thr0 = rss_kib(), proc_fds(), proc_threads()
    rounds = asyncio.run(_traffic(SECONDS, 1))
    gc.collect()
    assert rounds > 0
    assert proc_fds() == fds0
    # No thread started since is still alive (a library's idle worker may have ended meanwhile:
    # trio keeps its thread cache for 10 s).
    assert threads_left(thr0) == {}
    grown = rss_kib() - rss0
    if not SANITIZED:
        assert grown < RSS_TOLERANCE_KIB, f"RSS grew by {grown} KiB over {rounds} rounds"
