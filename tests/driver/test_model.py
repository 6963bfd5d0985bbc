"""The device model in the driver: modeled device time, computed by hand.

A profile with round figures (1 GHz: a cycle is a nanosecond) makes every
expected time a small sum.  Streams are held with a latch while their work
is queued, so the modeled start of what follows does not depend on when the
host got round to submitting it; results stay real (checked against numpy).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from helpers import CompletionLog, held
from helpers.raw_driver import alloc, builtin, d2h, free, h2d, info, launch, new_event, sync
from pypto_async._driver import check, ffi, lib
from pypto_async.errors import PtoArgumentError
from pypto_async.runtime import DeviceProfile
from pypto_async.runtime._profile import SIM

#: 1 GHz, 1 µs pickup, 0.5 µs least kernel, 10 GB/s + 2 µs host link, 100 GB/s GM.
P = SIM.replace(name="round", aic_cores=1, aiv_cores=2, copy_engines=2, clock_ghz=1.0, pickup_us=1.0,
                min_kernel_us=0.5, orch_us_per_task=0.25, gm_gbps=100.0, host_link_gbps=10.0,
                host_link_latency_us=2.0, transfer_granule_bytes=512, mte2_bytes_per_cycle=64.0,
                mte3_bytes_per_cycle=32.0, mte1_bytes_per_cycle=128.0, vec_simple_bytes_per_cycle=128.0)
PICKUP, FLOOR = 1000, 500


def modeled(dev, profile: DeviceProfile = P):
    check(lib.pto_device_set_profile(dev, profile._to_c()), "pto_device_set_profile")
    return dev


def cost_ns(**work) -> int:
    """The model's duration of one block's work on P, by the formula docs/device_model.md gives."""
    g = P.transfer_granule_bytes

    def rows(nbytes, nrows):
        return math.ceil(nbytes / max(nrows, 1) / g) * g * max(nrows, 1) if nbytes else 0

    pipes = [rows(work.get("load_bytes", 0), work.get("load_rows", 0)) / P.mte2_bytes_per_cycle,
             rows(work.get("store_bytes", 0), work.get("store_rows", 0)) / P.mte3_bytes_per_cycle,
             work.get("vec", 0) / P.vec_simple_bytes_per_cycle]
    cycles = max(pipes) if work.get("overlap") else sum(pipes)
    return max(int(cycles / P.clock_ghz + 0.5), FLOOR)


def test_a_profile_makes_the_device_modeled_and_none_keeps_the_host_clock(open_dev):
    dev = open_dev()
    assert info(dev).timing_model == 0
    modeled(dev)
    i = info(dev)
    assert (i.timing_model, i.model_cores, i.model_aic, i.model_copy_engines) == (1, 3, 1, 2)
    check(lib.pto_device_set_profile(dev, ffi.NULL), "pto_device_set_profile")
    assert info(dev).timing_model == 0


def test_a_profile_is_refused_after_the_first_command_and_for_a_bad_figure(open_dev, new_stream):
    dev = open_dev()
    bad = P._to_c()
    bad.clock_ghz = 0
    with pytest.raises(PtoArgumentError, match="clock_ghz"):
        check(lib.pto_device_set_profile(dev, bad), "pto_device_set_profile")
    s = new_stream(device=dev)
    check(lib.pto_stream_notify(s, 0), "notify")
    sync(s)
    with pytest.raises(PtoArgumentError, match="before the device's first command"):
        check(lib.pto_device_set_profile(dev, P._to_c()), "pto_device_set_profile")


def test_a_copy_of_n_bytes_takes_the_link_latency_plus_bytes_over_its_bandwidth(dev, stream, cq):
    modeled(dev)
    n = 1 << 20
    src = np.random.default_rng(1).standard_normal(n // 4).astype(np.float32)
    out = np.full_like(src, -1.0)
    a, b = alloc(dev, n), alloc(dev, n)
    with held(dev, stream):
        h2d(stream, a, src, token=1)
        check(lib.pto_stream_copy_d2d(stream, b, a, n, 2), "d2d")
        check(lib.pto_stream_memset(stream, a, 0, n, 3), "memset")
        d2h(stream, out, b, token=4)
    r = cq.wait(1, 2, 3, 4)
    np.testing.assert_array_equal(out, src)
    assert r[1].end_ns - r[1].start_ns == 2000 + round(n / 10.0)  # 2 µs + n B at 10 GB/s
    assert r[2].end_ns - r[2].start_ns == round(2 * n / 100.0)   # read and write at 100 GB/s
    assert r[3].end_ns - r[3].start_ns == round(n / 100.0)
    assert r[4].end_ns - r[4].start_ns == 2000 + round(n / 10.0)
    # In stream order, each starting as its predecessor ends (a copy engine is free).
    assert r[2].start_ns == r[1].end_ns and r[3].start_ns == r[2].end_ns and r[4].start_ns == r[3].end_ns
    free(dev, a)
    free(dev, b)


def test_a_vector_op_of_n_elements_costs_its_loads_compute_and_store(dev, stream, cq):
    modeled(dev)
    n = 4096
    rng = np.random.default_rng(2)
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    out = np.full(n, np.nan, np.float32)
    a, b, c = alloc(dev, 4 * n), alloc(dev, 4 * n), alloc(dev, 4 * n)
    add = builtin(dev, "add_f32")
    with held(dev, stream):
        h2d(stream, a, x)
        h2d(stream, b, y, token=1)
        launch(stream, add, 1, [a, b, c, n], token=2)
        d2h(stream, out, c)
    r = cq.wait(1, 2)
    sync(stream)
    np.testing.assert_array_equal(out, x + y)
    want = cost_ns(load_bytes=8 * n, load_rows=2, store_bytes=4 * n, store_rows=1, vec=4 * n)
    assert want == 512 + 512 + 128  # 32 KiB at 64 B/cycle, 16 KiB at 32, 16 KiB at 128
    assert r[2].end_ns - r[2].start_ns == want
    assert r[2].start_ns == r[1].end_ns + PICKUP
    for p in (a, b, c):
        free(dev, p)


def test_short_rows_pay_the_transfer_granule_and_overlap_takes_the_longest_pipe(open_dev):
    dev = modeled(open_dev())
    w = ffi.new("pto_work *")
    w.load_bytes, w.load_rows = 65536, 128  # 512 B rows
    wide = lib.pto_model_work_ns(dev, w)
    w.load_rows = 512  # 128 B rows: each costs a 512 B granule
    narrow = lib.pto_model_work_ns(dev, w)
    assert (wide, narrow) == (1024, 4096)
    w.load_rows = 128
    w.store_bytes, w.store_rows = 65536, 128
    w.vec_bytes[0] = 65536
    serial = lib.pto_model_work_ns(dev, w)
    w.overlap = 1
    pipelined = lib.pto_model_work_ns(dev, w)
    assert (serial, pipelined) == (1024 + 2048 + 512, 2048)
    assert lib.pto_model_work_ns(dev, ffi.new("pto_work *")) == FLOOR  # no work: the floor


def test_a_chain_of_k_launches_pays_k_pickups(dev, stream, cq):
    modeled(dev)
    noop = builtin(dev, "noop")
    k = 5
    with held(dev, stream):
        for i in range(k):
            launch(stream, noop, 1, [], token=10 + i)
    r = cq.wait(*range(10, 10 + k))
    recs = [r[10 + i] for i in range(k)]
    for prev, cur in zip(recs, recs[1:]):
        assert cur.start_ns - prev.end_ns == PICKUP
    assert all(x.end_ns - x.start_ns == FLOOR for x in recs)
    assert recs[-1].end_ns - recs[0].start_ns == k * (PICKUP + FLOOR) - PICKUP


def test_a_fork_of_n_blocks_on_fewer_cores_runs_in_waves(open_dev, new_stream):
    dev = modeled(open_dev(trace=1))
    cq = CompletionLog(dev)
    s = new_stream(device=dev)
    noop = builtin(dev, "noop")
    with held(dev, s):
        launch(s, noop, 5, [], token=1)  # 5 vector blocks, 2 AIV cores: 3 waves
    rec = cq.wait(1)[1]
    assert rec.end_ns - rec.start_ns == 3 * (PICKUP + FLOOR) - PICKUP
    buf = ffi.new("pto_trace_record[]", 64)
    got = [buf[i] for i in range(lib.pto_trace_read(dev, buf, 64))]
    blocks = [b for b in got if b.kind == lib.PTO_CMD_BLOCK]
    assert sorted(b.engine for b in blocks) == [1, 1, 1, 2, 2]  # the AIVs (AIC is engine 0)
    starts = sorted(b.start_ns - rec.start_ns for b in blocks)
    assert starts == [0, 0, 1500, 1500, 3000]
    assert all(b.start_ns - b.dispatch_ns == PICKUP for b in blocks)
    assert all(b.host_end_ns >= b.host_start_ns > 0 for b in blocks)  # and what the host did


def test_a_stream_wait_across_engines_starts_after_the_copy_it_waits_for(dev, new_stream, cq):
    modeled(dev)
    a_stream, b_stream = new_stream(), new_stream()
    n = 1 << 16
    buf = alloc(dev, n)
    src = np.arange(n // 4, dtype=np.float32)
    e = new_event(dev)
    noop = builtin(dev, "noop")
    with held(dev, a_stream):
        h2d(a_stream, buf, src, token=1)
        check(lib.pto_stream_record(a_stream, e, 2), "record")
        check(lib.pto_stream_wait_event(b_stream, e, 3), "wait")
        launch(b_stream, noop, 1, [], token=4)
    r = cq.wait(1, 2, 3, 4)
    assert r[2].end_ns == r[1].end_ns  # the record: when the copy before it ended
    assert r[3].end_ns == r[1].end_ns  # the wait ends with it, on the other stream
    assert r[4].start_ns == r[1].end_ns + PICKUP  # then the core picks the launch up
    lib.pto_event_destroy(e)
    free(dev, buf)


def test_a_host_that_submits_slower_than_the_device_runs_leaves_gaps(open_dev, new_stream):
    quick = P.replace(pickup_us=0.0, min_kernel_us=0.001)  # a launch takes 1 ns
    dev = modeled(open_dev(), quick)
    cq = CompletionLog(dev)
    s = new_stream(device=dev)
    noop = builtin(dev, "noop")
    launch(s, noop, 1, [], token=1)
    first = cq.wait(1)[1]  # the host waits for it: the next submission comes later
    launch(s, noop, 1, [], token=2)
    second = cq.wait(2)[2]
    assert first.start_ns == first.submit_ns and first.end_ns == first.start_ns + 1
    assert second.start_ns == second.submit_ns > first.end_ns  # idle until the host submitted


def test_engine_stats_report_the_modeled_engines_busy_time(dev, stream, cq):
    modeled(dev)
    noop = builtin(dev, "noop")
    with held(dev, stream):
        launch(stream, noop, 4, [], token=1)
    cq.wait(1)
    st = ffi.new("pto_engine_stats *")
    busy = []
    for e in range(P.cores + P.copy_engines):
        check(lib.pto_engine_get_stats(dev, e, st), "pto_engine_get_stats")
        busy.append((int(st.busy_ns), int(st.commands), int(st.is_copy)))
    assert busy == [(0, 0, 0), (2 * FLOOR, 2, 0), (2 * FLOOR, 2, 0), (0, 0, 1), (0, 0, 1)]
    with pytest.raises(PtoArgumentError, match="modeled engines"):
        check(lib.pto_engine_get_stats(dev, P.cores + P.copy_engines, st), "pto_engine_get_stats")


def test_event_elapsed_time_is_modeled(dev, stream, cq):
    modeled(dev)
    e0, e1 = new_event(dev), new_event(dev)
    add = builtin(dev, "add_f32")
    n = 4096
    a = alloc(dev, 4 * n)
    with held(dev, stream):
        check(lib.pto_stream_record(stream, e0, 0), "record")
        launch(stream, add, 1, [a, a, a, n], token=1)
        check(lib.pto_stream_record(stream, e1, 2), "record")
    cq.wait(1, 2)
    ms = ffi.new("double *")
    check(lib.pto_event_elapsed_ms(e0, e1, ms), "elapsed")
    want = PICKUP + cost_ns(load_bytes=8 * n, load_rows=2, store_bytes=4 * n, store_rows=1, vec=4 * n)
    assert ms[0] == pytest.approx(want / 1e6, abs=1e-9)
    free(dev, a)
    lib.pto_event_destroy(e0)
    lib.pto_event_destroy(e1)


def test_one_work_costs_each_devices_own_profile_called_in_turn(open_dev):
    """The same counts on two devices of different profiles, from one thread, alternately."""
    fast = modeled(open_dev())
    slow = modeled(open_dev(), P.replace(name="slow", clock_ghz=0.5))
    w = ffi.new("pto_work *")
    w.load_bytes, w.load_rows = 65536, 128
    for _ in range(3):
        assert lib.pto_model_work_ns(fast, w) == 1024
        assert lib.pto_model_work_ns(slow, w) == 2048
    w.load_rows = 512  # changed counts: costed anew
    assert (lib.pto_model_work_ns(fast, w), lib.pto_model_work_ns(slow, w)) == (4096, 8192)
