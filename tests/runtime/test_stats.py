"""w.stats() (runtime/_stats.py and WorkerStats) against known workloads, and scope stats files.

Every count is checked exactly against the work the test queued: launches,
copies and bytes per direction, per-engine commands and bytes, ring
high-water marks while a stream is held by a latch, back-pressure behind a
4-slot ring, device memory in use, reserved and peak.
"""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from pypto_async.runtime import ChipWorker, RunConfig
from pypto_async.runtime._stats import BacklogClock
from pypto_async.testing import hold

# The engines these tests count are the host threads cores= and copy_engines= start: host timing.
SMALL = {"cores": 2, "copy_engines": 2, "device_memory": 64 << 20, "timing": "host"}
N = 4096


@pytest.fixture
def rng():
    return np.random.default_rng(7)


def test_counts_match_a_known_workload(kernels, rng):
    add = kernels.get("add", N, blocks=2)
    launches, h2d_copies = 5, 3
    with ChipWorker(RunConfig(**SMALL)) as w:
        before = w.stats()
        assert (before.launches, before.copies, before.bytes_h2d, before.bytes_d2h) == (0, 0, 0, 0)
        a = w.alloc_tensor(N, np.float32, init=rng.standard_normal(N).astype(np.float32))  # 1 H2D
        b = w.alloc_tensor(N, np.float32)
        out = w.alloc_tensor(N, np.float32)
        for _ in range(h2d_copies - 1):
            w.copy(b, rng.standard_normal(N).astype(np.float32))  # H2D
        for _ in range(launches):
            w.run(add, a, b, out)  # device tensors: no copies
        host = np.empty(N, np.float32)
        w.copy(host, out)  # 1 D2H
        w.copy(b, a)  # 1 D2D
        st = w.stats()
        assert st.launches == launches
        assert st.copies == h2d_copies + 2
        assert st.bytes_h2d == h2d_copies * N * 4
        assert st.bytes_d2h == N * 4
        assert st.bytes_d2d == N * 4
        assert st.in_flight == 0
        assert st.completions >= launches + h2d_copies + 2
        assert st.wakeups >= 1 and st.completions_per_wakeup >= 1.0
        cores = [e for e in st.engines if e.kind == "core"]
        copiers = [e for e in st.engines if e.kind == "copy"]
        assert [e.engine for e in st.engines] == list(range(SMALL["cores"] + SMALL["copy_engines"]))
        assert len(cores) == SMALL["cores"] and len(copiers) == SMALL["copy_engines"]
        assert sum(e.commands for e in cores) == launches * 2  # two blocks per launch
        assert sum(e.commands for e in copiers) == h2d_copies + 2
        assert sum(e.bytes for e in copiers) == (h2d_copies + 2) * N * 4
        assert all(e.bytes == 0 for e in cores)
        assert sum(e.busy_ns for e in cores) > 0 and sum(e.busy_ns for e in copiers) > 0
        for t in (a, b, out):
            w.free_tensor(t)


def test_memory_in_use_reserved_and_peak(kernels):
    with ChipWorker(RunConfig(**SMALL)) as w:
        base = w.stats()
        assert base.memory_capacity == SMALL["device_memory"] and base.memory_in_use == 0
        ts = [w.alloc_tensor(1000 * (i + 1), np.float32) for i in range(3)]
        st = w.stats()
        want = sum(-(-1000 * (i + 1) * 4 // 256) * 256 for i in range(3))  # 256-byte granules
        assert st.memory_in_use == want and st.memory_allocations == 3
        assert st.memory_reserved >= st.memory_in_use and st.memory_peak >= want
        for t in ts:
            w.free_tensor(t)
        w.default_stream.sync()
        after = w.stats()
        assert (after.memory_in_use, after.memory_reserved, after.memory_allocations) == (0, 0, 0)
        assert after.memory_peak == st.memory_peak  # the high-water mark stays


def test_ring_high_water_marks_while_held(kernels, rng):
    add = kernels.get("add", N)
    with ChipWorker(RunConfig(**SMALL, ring_task_window=16)) as w:
        k = w.register(add)
        s, other = w.stream(), w.stream()
        a = w.alloc_tensor(N, np.float32, init=rng.standard_normal(N).astype(np.float32), stream=s)
        out = w.alloc_tensor(N, np.float32, stream=s)
        other.wait(s.record())  # one event wait on `other`
        other.sync()  # the wait, and so the record on s, completed: s is empty
        with hold(s) as latch:
            launches = [k.submit(a, a, out, stream=s) for _ in range(5)]
            (st,) = [x for x in w.stats().stream_stats if x.stream == s.id]
            assert st.in_flight == 6  # the latch and five launches
            assert st.window == 16 and st.window_hwm >= 6
            assert st.heap_hwm >= 5 * 3 * 8  # five launches' three 8-byte arguments
            assert st.backlog == 0 and st.refused == 0
            latch.release()
        for launch in launches:
            launch.sync(timeout=10)
        by_id = {x.stream: x for x in w.stats().stream_stats}
        assert by_id[s.id].window_hwm >= 6 and by_id[s.id].submitted >= 6
        assert by_id[other.id].dep_hwm >= 1 and by_id[other.id].dep_entries == 64
        assert w.default_stream.id in by_id
        w.free_tensor(a)
        w.free_tensor(out)


@pytest.mark.anyio
async def test_back_pressure_waits_are_counted_and_timed(kernels, rng, anyio_backend):
    add = kernels.get("add", N)
    async with ChipWorker(RunConfig(**SMALL, ring_task_window=4)) as w:
        k = w.register(add)
        s = w.stream()
        a = w.alloc_tensor(N, np.float32, init=rng.standard_normal(N).astype(np.float32), stream=s)
        out = w.alloc_tensor(N, np.float32, stream=s)
        await s
        assert w.stats().backpressure_waits == 0 and w.stats().backpressure_wait_ns == 0
        with hold(s) as latch:
            launches = [k.submit(a, a, out, stream=s) for _ in range(10)]
            (st,) = [x for x in w.stats().stream_stats if x.stream == s.id]
            # 4 slots: the latch and (at most) three launches; the rest wait in order.
            # (At most: the driver may still count the `await s` marker for a moment.)
            assert 7 <= st.backlog <= 8 and st.refused >= 1
            waited = st.backlog
            t_held = w.stats().backpressure_wait_ns
            assert t_held > 0  # a wait in progress counts up to now
            latch.release()
        for launch in launches:
            await launch.wait()
        st = w.stats()
        assert st.backpressure_waits == waited
        (ss,) = [x for x in st.stream_stats if x.stream == s.id]
        assert ss.backlog == 0 and ss.backpressure_wait_ns >= t_held
        assert st.backpressure_wait_ns == sum(x.backpressure_wait_ns for x in st.stream_stats)
        w.free_tensor(a)
        w.free_tensor(out)


def test_backlog_clock_times_membership():
    class S:
        def __init__(self, i):
            self.id = i

    a, b = S(1), S(2)
    clock = BacklogClock()
    assert clock.total_ns() == 0 and not clock
    clock[a] = None
    clock[a] = None  # already waiting: the clock keeps its start
    time.sleep(0.002)  # a real interval to measure (no ordering depends on it)
    assert clock.waited_ns(1) >= 2_000_000
    del clock[a]
    done = clock.waited_ns(1)
    assert done >= 2_000_000 and clock.waited_ns(1) == done  # stopped
    clock[b] = None
    clock.clear()
    assert not clock and clock.total_ns() == done + clock.waited_ns(2)
    assert list(clock) == []


def test_scope_stats_file_without_trace(tmp_path, kernels, rng):
    add = kernels.get("add", N)
    cfg = RunConfig(**SMALL, enable_scope_stats=True, save_kernels_dir=str(tmp_path))
    with ChipWorker(cfg) as w:
        x = rng.standard_normal(N).astype(np.float32)
        y = np.empty(N, np.float32)
        w.run(add, x, x, y)
        path = w._tracing.life_stats_path
        assert path.parent == tmp_path and path.name.startswith("pto_scope_stats_")
        assert not path.exists()  # written on close
    doc = json.loads(path.read_text())
    assert doc["launches"] == 1 and doc["bytes_h2d"] == 2 * N * 4 and doc["bytes_d2h"] == N * 4
    assert {s["stream"] for s in doc["streams"]} >= {1}
    assert all({"window_hwm", "heap_hwm", "dep_hwm", "backpressure_wait_ns"} <= set(s) for s in doc["streams"])
    assert len(doc["engines"]) == SMALL["cores"] + SMALL["copy_engines"]
    assert not list(tmp_path.glob("pto_swimlane_*"))  # no swimlane asked for


def test_no_files_unless_asked(tmp_path, monkeypatch, kernels):
    monkeypatch.chdir(tmp_path)
    with ChipWorker(RunConfig(**SMALL)) as w:
        w.run(kernels.get("noop", N), np.zeros(N, np.float32))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("host_first", ["off", "always"])
def test_wakes_helps_and_idle_spins_say_how_idle_cpu_was_traded(kernels, rng, host_first):
    add = kernels.get("add", N, blocks=1)
    x = rng.standard_normal(N).astype(np.float32)
    with ChipWorker(RunConfig(**SMALL, spin_us=0, host_first=host_first)) as w:
        h = w.register(add)
        a = w.alloc_tensor(N, np.float32, init=x)
        out = w.alloc_tensor(N, np.float32)
        before = w.stats()
        for _ in range(20):
            h(a, a, out)
            w.sync()
            time.sleep(0.001)  # the device falls idle between launches: its threads go to sleep
        st = w.stats()
        np.testing.assert_allclose(out.numpy(), 2 * x, rtol=1e-6)
        if host_first == "off":  # every launch goes to a core: a sleeping one woken, or one awake in its stead
            assert st.inline_runs == before.inline_runs
            assert (st.engine_wakes + st.engine_helps) - (before.engine_wakes + before.engine_helps) >= 20
        else:  # the host ran the launches itself (all but the first: a kernel is short once it ran short),
            # and no device thread spins
            assert st.inline_runs - before.inline_runs >= 19
            assert st.idle_spins == 0
        for t in (a, out):
            t.free()


def test_a_spinning_worker_counts_its_spins(kernels, rng):
    add = kernels.get("add", N, blocks=1)
    x = rng.standard_normal(N).astype(np.float32)
    with ChipWorker(RunConfig(**SMALL, spin_us=50, host_first="off")) as w:
        h = w.register(add)
        a = w.alloc_tensor(N, np.float32, init=x)
        out = w.alloc_tensor(N, np.float32)
        for _ in range(20):
            h(a, a, out)
            w.sync()
            time.sleep(0.001)
        st = w.stats()
        np.testing.assert_allclose(out.numpy(), 2 * x, rtol=1e-6)
        # Each time the device fell idle its last awake thread asked whether to spin: it spun, or
        # (no CPU spare for the host) slept at once.
        assert st.idle_spins + st.idle_sleeps >= 20
        for t in (a, out):
            t.free()
