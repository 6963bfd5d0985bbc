"""native/src/engines.c, submit.c: when a host thread makes the host-first choice (host_first auto)."""

from __future__ import annotations

import pytest

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


_PINNED_AFTER_OPEN = r"""
import os, sys, time
import numpy as np
from pypto_async._driver import check, ffi, lib
sys.path.insert(0, "tests")
from helpers import close_device, open_device
from helpers.latch import held
from helpers.raw_driver import alloc, builtin, d2h, device_stats, h2d, launch, sync
dev = open_device("sim", cores=2, copy_engines=1, spin_us=1, host_first=lib.PTO_HOST_FIRST_OFF)
out = ffi.new("pto_stream **")
check(lib.pto_stream_create(dev, 0, out))
s = out[0]
n = 1024
buf = alloc(dev, n * 4, s)
spin = builtin(dev, "spin")
rng = np.random.default_rng(28)

def rounds(k):
    before = device_stats(dev)
    for _ in range(k):
        x = rng.standard_normal(n).astype(np.float32)
        y = np.full(n, np.nan, np.float32)
        with held(dev, s) as gate:  # queued behind a latch: the copy engine's finish starts the kernel
            h2d(s, buf, x)
            launch(s, spin, 1, [200])  # 200 us: a long command, helped on one CPU only
            d2h(s, y, buf)
            gate.release()
            sync(s)
        np.testing.assert_array_equal(y, x)
    st = device_stats(dev)
    return st.engine_helps - before.engine_helps

assert rounds(5) == 0  # opened on 2+ CPUs: a long kernel goes to a woken core
cpu = sorted(os.sched_getaffinity(0))[0]
for tid in os.listdir("/proc/self/task"):  # every thread of the process, the device's included
    os.sched_setaffinity(int(tid), {cpu})
time.sleep(0.002)  # past each thread's cached CPU count (read at most once a millisecond)
helps = rounds(10)
assert helps >= 10, helps  # one CPU now: the copy engine runs each kernel in the sleeping core's stead
lib.pto_mem_free(dev, buf)
lib.pto_stream_destroy(s)
close_device(dev)
print("ok")
"""


@pytest.mark.slow  # a fresh interpreter, pinned after its device opened
def test_the_cpus_a_choice_counts_are_the_threads_affinity_now_not_at_open():
    """Pinned to one CPU after the device opened on 2+: the finishing copy engine runs a long kernel itself.

    The spin, help and host-first choices read the calling thread's affinity (sched_getaffinity,
    at most once a millisecond), not the count at open: opened on two CPUs a 200 us kernel after a
    copy goes to a woken core; once every thread of the process is pinned to one CPU, the copy
    engine that finishes the copy runs it in the sleeping core's stead (waking the core would only
    take turns with it on that CPU).
    """
    import os
    import subprocess
    import sys
    from pathlib import Path

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs to open on")
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    r = subprocess.run([sys.executable, "-c", _PINNED_AFTER_OPEN], cwd=root, env=env, capture_output=True,
                       text=True, check=False, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr
