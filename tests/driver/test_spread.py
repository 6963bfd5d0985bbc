"""native/src/engines.c: ready tiny tasks spread over the cores without taking the host's CPU.

A host thread that runs a program's burst of tiny tasks with a CPU spare (host first declined)
signals one sleeping core for it (spread_burst; ``pto_device_stats.spread_wakes``): the core
mostly arrives after the burst, but lingers on the spare CPU for the next one.  It lingers only
on a CPU the host thread is not on (pti_cpu_spare_at; refusals there: ``idle_host_cpu``;
native/tests/spin_cpu.c asserts the rule itself, with the load sample set by hand).  Whether a
CPU is spare depends on the machine's load, so these tests assert what holds either way.
"""

from __future__ import annotations

import subprocess

import numpy as np
import pytest
from helpers.raw_driver import alloc, device_stats, free, h2d

from pypto_async._driver import check, ffi, lib

from . import test_task_batch as batch
from .test_task_batch import _run


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    """test_task_batch's program of 8 independent tiny tasks, built once here."""
    d = tmp_path_factory.mktemp("spread")
    src, so = d / "eight.c", d / "libeight.so"
    src.write_text(batch.SOURCE)
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-std=gnu11", f"-I{batch.INCLUDE}", "-o", str(so), str(src)],
                   check=True)
    return so


def _bursts(open_dev, new_stream, library, rounds: int, **cfg):
    """Run the 8-task program `rounds` times back to back; the device stats before and after."""
    dev = open_dev(**cfg)
    out = ffi.new("pto_program **")
    check(lib.pto_program_load(dev, str(library).encode(), b"prog_eight", out), "pto_program_load")
    prog = out[0]
    s = new_stream(device=dev)
    gate_ptr, x_ptr, y_ptr = alloc(dev, 16), alloc(dev, 8 * 16 * 4), alloc(dev, 8 * 16 * 4)
    gate = ffi.cast("int32_t *", lib.pto_mem_host_ptr(dev, gate_ptr))
    y = np.frombuffer(ffi.buffer(lib.pto_mem_host_ptr(dev, y_ptr), 8 * 16 * 4), np.float32)
    args = ffi.new("uint64_t[3]", [gate_ptr, x_ptr, y_ptr])
    x = np.random.default_rng(17).standard_normal(8 * 16).astype(np.float32)
    try:
        h2d(s, x_ptr, x)
        for _ in range(3):  # time the site (tiny): the program is quick from then on
            _run(dev, s, prog, args, gate)
        before = device_stats(dev)
        for _ in range(rounds):
            y[:] = np.nan  # poisoned: each round writes it again
            _run(dev, s, prog, args, gate)
            np.testing.assert_allclose(y, 2 * x + 1, rtol=1e-6)
        return before, device_stats(dev)
    finally:
        lib.pto_program_unload(prog)
        for p in (gate_ptr, x_ptr, y_ptr):
            free(dev, p)
        lib.pto_stream_destroy(s)


def test_with_no_cpu_spare_the_host_runs_bursts_and_wakes_no_core_for_them(open_dev, new_stream, library):
    """host_first ALWAYS (as if no CPU were spare): the host runs every burst; no core is signalled to spread it.

    A woken core on a loaded 2-CPU machine lands on the host's CPU and takes turns with it (the
    bursts ran 3x their serial sum): with nothing spare the host keeps the burst.
    """
    rounds = 20
    before, after = _bursts(open_dev, new_stream, library, rounds, cores=2,
                            host_first=lib.PTO_HOST_FIRST_ALWAYS)
    assert after.spread_wakes == before.spread_wakes, after.spread_wakes - before.spread_wakes
    assert after.tasks_queued - before.tasks_queued == 8 * rounds


@pytest.mark.parametrize("cores", [1, 2])
def test_a_burst_signals_at_most_one_core_and_only_with_one_to_spare(open_dev, new_stream, library, cores):
    """host_first auto: at most one spread wake-up per burst, none with one core (the host runs as it)."""
    rounds = 20
    before, after = _bursts(open_dev, new_stream, library, rounds, cores=cores,
                            host_first=lib.PTO_HOST_FIRST_AUTO)
    wakes = after.spread_wakes - before.spread_wakes
    if cores == 1:
        assert wakes == 0, wakes
    else:
        assert wakes <= rounds, wakes
    assert after.engine_wakes - before.engine_wakes >= wakes  # each is an engine wake-up too
