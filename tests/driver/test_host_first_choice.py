"""native/src/engines.c, submit.c: when a host thread makes the host-first choice (host_first auto)."""

from __future__ import annotations

from helpers.raw_driver import device_stats, notify, sync

from pypto_async._driver import lib


def test_host_first_asks_for_a_spare_cpu_only_when_engine_work_is_queued(open_dev, new_stream):
    """host_first auto: a submission whose pass queues nothing for an engine makes no choice (reads no load).

    A notify on an idle stream completes in the submitter's own pass; asking whether a CPU is
    spare (the device's threads, /proc/loadavg) would only delay its record.  A launch queued
    behind a busy core is short work the host may run: that submission asks.
    """
    import numpy as np

    from helpers.raw_driver import alloc, builtin, d2h, h2d, launch

    dev = open_dev(cores=1, copy_engines=1, host_first=lib.PTO_HOST_FIRST_AUTO)
    s = new_stream(device=dev)
    before = device_stats(dev)
    for _ in range(20):
        notify(s, 0)
        sync(s)
    st = device_stats(dev)
    assert st.commands_completed - before.commands_completed == 20
    assert st.host_first_checks == before.host_first_checks, st.host_first_checks - before.host_first_checks

    n = 256
    streams = [new_stream(device=dev) for _ in range(4)]
    bufs = [(alloc(dev, n * 4, t), alloc(dev, n * 4, t)) for t in streams]
    add = builtin(dev, "add_f32")
    rng = np.random.default_rng(26)
    xs = [rng.standard_normal(n).astype(np.float32) for _ in streams]
    ys = [np.full(n, np.nan, np.float32) for _ in streams]
    for t, (src, _), x in zip(streams, bufs, xs):
        h2d(t, src, x)
        sync(t)
    before = device_stats(dev)
    launch(s, builtin(dev, "spin"), 1, [30_000])  # 30 ms on the only core: the launches below queue behind it
    for t, (src, dst) in zip(streams, bufs):
        launch(t, add, 1, [src, src, dst, n])  # dst = src + src, each on an idle stream
    for t, (_, dst), y in zip(streams, bufs, ys):
        d2h(t, y, dst)
        sync(t)
    sync(s)
    st = device_stats(dev)
    for x, y in zip(xs, ys):
        np.testing.assert_array_equal(y, x + x)
    assert st.host_first_checks > before.host_first_checks
    for src, dst in bufs:
        lib.pto_mem_free(dev, src)
        lib.pto_mem_free(dev, dst)
