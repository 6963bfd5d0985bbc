"""native/src/sched.c and engines.c: what a scheduler pass visits, and who runs ready work."""

from __future__ import annotations

import os

import pytest

from helpers import new_token

from pypto_async._driver import check, ffi, lib

from helpers.raw_driver import device_stats, notify, sync


def test_a_pass_visits_only_streams_with_work(dev, cq, new_stream):
    """Idle open streams cost a pass nothing: passes visit the ready list, not every stream."""
    idle = [new_stream() for _ in range(300)]
    busy = new_stream()
    before = device_stats(dev)
    tokens = [new_token() for _ in range(50)]
    for t in tokens:
        notify(busy, t)
        sync(busy)  # one command at a time: each one runs its own passes
    cq.wait(*tokens)
    after = device_stats(dev)
    passes = after.sched_passes - before.sched_passes
    visits = after.sched_visits - before.sched_visits
    assert passes >= len(tokens)
    # A full scan would visit 301 streams per pass; the ready list holds at most the busy one.
    assert visits <= passes
    del idle


def test_a_priority_stream_still_goes_first_from_the_ready_list(dev, cq, new_stream):
    """Streams rung low priority first start high priority first: the ready list keeps priority order."""
    out = ffi.new("pto_latch **")
    check(lib.pto_latch_create(dev, 0, out))
    latch = out[0]
    low, high = new_stream(priority=0), new_stream(priority=5)
    t_low, t_high = new_token(), new_token()
    for s, t in ((low, t_low), (high, t_high)):
        check(lib.pto_stream_latch_wait(s, latch, 0))
        notify(s, t)
    lib.pto_latch_release(latch)  # one pass under sched_lock starts both
    recs = cq.wait(t_low, t_high)
    assert recs[t_high].end_ns <= recs[t_low].start_ns
    lib.pto_latch_destroy(latch)


@pytest.mark.slow
def test_queued_launches_reach_the_idle_core_each_sleeper_woken_once(open_dev, new_stream):
    """Eight launches queued by one pass: each sleeping core is signalled once, and both cores run them."""
    from helpers.latch import held

    from helpers.raw_driver import builtin, launch

    dev = open_dev(cores=2, copy_engines=1)
    spin = builtin(dev, "spin")
    streams = [new_stream(device=dev) for _ in range(8)]
    engines_before = [_engine_commands(dev, i) for i in range(2)]
    with held(dev, streams[0]) as gate:
        for s in streams[1:]:
            gate.hold(s)
        for s in streams:
            launch(s, spin, 1, [30_000])  # 30 ms each: both cores must take some
        before = device_stats(dev)
        gate.release()  # one pass under sched_lock queues all eight
        for s in streams:
            sync(s)
    after = device_stats(dev)
    ran = [_engine_commands(dev, i) - engines_before[i] for i in range(2)]
    assert sum(ran) == 8
    assert min(ran) >= 1, f"one core ran every launch: {ran}"
    # Each sleeping core is signalled once at most: not once per queued launch.
    assert after.engine_wakes - before.engine_wakes <= 2


def _engine_commands(dev, engine: int) -> int:
    st = ffi.new("pto_engine_stats *")
    check(lib.pto_engine_get_stats(dev, engine, st))
    return st.commands


_PINNED = r"""
import os, sys
os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
from pypto_async._driver import check, ffi, lib
from pypto_async.runtime import ChipWorker, RunConfig
sys.path.insert(0, "tests")
from helpers import close_device, open_device
from helpers.raw_driver import device_stats, info, notify, sync
import time
# Defaults follow the affinity: one CPU, one core and one copy engine.
cfg = ffi.new("pto_device_config *")
lib.pto_device_config_init(cfg)
assert (cfg.cores, cfg.copy_engines) == (1, 1), (cfg.cores, cfg.copy_engines)
dev = open_device("sim", cores=1, copy_engines=1, spin_us=100_000)
out = ffi.new("pto_stream **")
check(lib.pto_stream_create(dev, 0, out))
for i in range(20):
    notify(out[0], 0)
    sync(out[0])
    time.sleep(0.001)  # let the device go idle: each idle thread decides whether to spin
st = device_stats(dev)
# No CPU to spare for the host: nothing ever spun, however long spin_us is.
assert st.idle_spins == 0 and st.idle_no_spin > 0, (st.idle_spins, st.idle_no_spin)
lib.pto_stream_destroy(out[0])
close_device(dev)
print("ok")
"""


@pytest.mark.slow
def test_on_one_cpu_no_device_thread_spins_and_defaults_fit(tmp_path):
    """Pinned to one CPU: one core, one copy engine by default, and no thread spins beside the host."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    r = subprocess.run([sys.executable, "-c", _PINNED], cwd=root, env=env, capture_output=True, text=True, check=False,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr


def test_default_threads_follow_the_affinity():
    """Without a pin, the default cores are min(4, CPUs this process may use), copy engines min(2, ...)."""
    cfg = ffi.new("pto_device_config *")
    lib.pto_device_config_init(cfg)
    cpus = len(os.sched_getaffinity(0))
    assert (cfg.cores, cfg.copy_engines) == (min(4, cpus), min(2, cpus))


_PINNED_HELP = r"""
import os, sys
os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
import numpy as np
from pypto_async._driver import check, ffi, lib
sys.path.insert(0, "tests")
from helpers import close_device, open_device
from helpers.latch import held
from helpers.raw_driver import alloc, builtin, d2h, device_stats, f32_bits, h2d, launch, sync
dev = open_device("sim", cores=1, copy_engines=1)
out = ffi.new("pto_stream **")
check(lib.pto_stream_create(dev, 0, out))
s = out[0]
n = 1024
src, dst = alloc(dev, n * 4, s), alloc(dev, n * 4, s)
add = builtin(dev, "add_f32")
rng = np.random.default_rng(5)
before = device_stats(dev)
for i in range(20):
    x = rng.standard_normal(n).astype(np.float32)
    y = np.full(n, np.nan, np.float32)
    with held(dev, s) as gate:  # queued behind a latch: the copy engine's finish starts the kernel
        h2d(s, src, x)
        launch(s, add, 1, [src, src, dst, n])  # dst = src + src
        d2h(s, y, dst)
        gate.release()
        sync(s)
    np.testing.assert_array_equal(y, x + x)
st = device_stats(dev)
# The copy engine ran each kernel in the sleeping core's stead (and the core each copy after it):
# on one CPU nobody is woken for a hand-off.
assert st.engine_helps - before.engine_helps >= 20, (st.engine_helps, before.engine_helps)
assert st.engine_wakes - before.engine_wakes <= 20, (st.engine_wakes, before.engine_wakes)  # the copy engine's, not the core's
lib.pto_mem_free(dev, src)
lib.pto_mem_free(dev, dst)
lib.pto_stream_destroy(s)
close_device(dev)
print("ok")
"""


@pytest.mark.slow  # a fresh interpreter pinned to one CPU
def test_on_one_cpu_a_finishing_engine_runs_the_next_command_in_a_sleeping_engines_stead(tmp_path):
    """Pinned to one CPU: copy in, kernel, copy out run on one device thread, no wake-up per hand-off."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    r = subprocess.run([sys.executable, "-c", _PINNED_HELP], cwd=root, env=env, capture_output=True, text=True,
                       check=False, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr


@pytest.mark.parametrize("host_first", [lib.PTO_HOST_FIRST_ALWAYS, lib.PTO_HOST_FIRST_OFF])
def test_with_no_cpu_spare_a_finishing_engine_runs_the_next_command_itself(open_dev, new_stream, host_first):
    """host_first ALWAYS (as if no CPU were spare): copy in, kernel, copy out run on the copy engine, one wake-up.

    With OFF the copy engine may wake a core for the kernel (how often depends on the host's
    CPUs and load); the results are the same either way.
    """
    import numpy as np

    from helpers.latch import held
    from helpers.raw_driver import alloc, builtin, d2h, h2d, launch

    # inline_us: a budget no run of this small kernel exceeds, however loaded the host (a run preempted past
    # the default 50 us would make the next one "long", left to a woken core: a count that swung with load).
    dev = open_dev(cores=2, copy_engines=1, spin_us=1, host_first=host_first, inline_us=1_000_000)
    s = new_stream(device=dev)
    n = 1024
    src, dst = alloc(dev, n * 4, s), alloc(dev, n * 4, s)
    try:
        add = builtin(dev, "add_f32")
        rng = np.random.default_rng(26)
        rounds = 20
        # One launch first: a kernel never timed is of unknown length, which no finishing thread keeps for itself.
        launch(s, add, 1, [src, src, dst, n])
        sync(s)
        before = device_stats(dev)
        for _ in range(rounds):
            x = rng.standard_normal(n).astype(np.float32)
            y = np.full(n, np.nan, np.float32)
            with held(dev, s) as gate:  # queued behind a latch: the copy engine's finish starts the kernel
                h2d(s, src, x)
                launch(s, add, 1, [src, src, dst, n])  # dst = src + src
                d2h(s, y, dst)
                gate.release()
                sync(s)
            np.testing.assert_array_equal(y, x + x)
        st = device_stats(dev)
        wakes, helps = st.engine_wakes - before.engine_wakes, st.engine_helps - before.engine_helps
        if host_first == lib.PTO_HOST_FIRST_ALWAYS:
            assert helps >= rounds, (helps, wakes)
            assert wakes <= rounds, (helps, wakes)  # the copy engine's, for the copy in: never a core's
    finally:
        lib.pto_mem_free(dev, src)
        lib.pto_mem_free(dev, dst)


def test_a_finishing_engine_leaves_long_commands_to_a_woken_engine(open_dev, new_stream):
    """host_first ALWAYS (as if no CPU were spare), 2+ CPUs: 1 MiB copies and a 200 us kernel are not helped.

    Each is longer than a wake-up (inline_us): the copy engine's finish wakes a core for the kernel
    and the core's wakes the copy engine for the copy out, rather than the finishing thread running
    the device's work one command at a time (the pipelined demo's copies and kernels did not overlap).
    """
    import numpy as np

    from helpers.latch import held
    from helpers.raw_driver import alloc, builtin, d2h, h2d, launch

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("on one CPU a finishing engine runs everything itself (the one-CPU rule)")
    dev = open_dev(cores=2, copy_engines=1, spin_us=1, host_first=lib.PTO_HOST_FIRST_ALWAYS)
    s = new_stream(device=dev)
    n = 1 << 18  # 1 MiB of float32: over inline_us (50) x 4 KiB
    buf = alloc(dev, n * 4, s)
    spin = builtin(dev, "spin")
    rng = np.random.default_rng(27)
    rounds = 10
    before = device_stats(dev)
    for _ in range(rounds):
        x = rng.standard_normal(n).astype(np.float32)
        y = np.full(n, np.nan, np.float32)
        with held(dev, s) as gate:
            h2d(s, buf, x)
            launch(s, spin, 1, [200])  # 200 us: longer than inline_us
            d2h(s, y, buf)
            gate.release()
            sync(s)
        np.testing.assert_array_equal(y, x)
    st = device_stats(dev)
    assert st.engine_helps - before.engine_helps == 0, (st.engine_helps, before.engine_helps)
    lib.pto_mem_free(dev, buf)
