"""native/src/orch.c, submit.c, engines.c: a small program of tiny tasks starts on its submitter.

A program of 8 independent tasks, orchestrated inline (in the pass that starts it), pushes each
task to the core queue as it is submitted (native/tests/program.c test_early_dispatch: a task may
run before the orchestration returns): 8 tasks queued, in at most 8 pushes (the driver's
task_batches / tasks_queued), under every host_first mode, and each task's output right.

Once its sites are timed tiny the program is quick (pti_program_quick): the thread that submits it
to an idle stream runs the pass that starts it, as it does for a launch, instead of leaving the
start to the scheduler thread (the program row's slow_start); its first task is queued within the
submission, not after a hand-off, and its tiny tasks, which the submitter runs after that pass,
go to the core queue as one push when the orchestration returns (orch.c, orch_submit).  The
orchestration records the thread it ran on (gate[2]).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from helpers.raw_driver import alloc, device_stats, free, h2d, sync

from pypto_async._driver import check, ffi, lib

INCLUDE = Path(__file__).resolve().parents[2] / "pypto_async" / "include"

# args: [gate int32[4], x float[8 * 16], y float[8 * 16]]; gate: [started, started seen by the
# orchestration after its submissions, the orchestration's thread id, unused].  Task i: y[i*16 .. +16) = 2 x + 1.
SOURCE = r"""
#define _GNU_SOURCE
#include <stdint.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>
#include "pto_program.h"

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void inc(const pto_block *blk, void *const *args, const int64_t *idx)
{
    (void)blk;
    int32_t *g = args[0];
    const float *x = args[1];
    float *y = args[2];
    __atomic_fetch_add(&g[0], 1, __ATOMIC_ACQ_REL);
    for (int k = 0; k < 16; k++)
        y[idx[0] * 16 + k] = 2.0f * x[idx[0] * 16 + k] + 1.0f;
}

static int orch(pto_orch *o, const pto_orch_ops *ops, void *const *args)
{
    int32_t *g = args[0];
    __atomic_store_n(&g[2], (int32_t)syscall(SYS_gettid), __ATOMIC_RELEASE);
    for (int64_t i = 0; i < 8; i++) {
        int rc = ops->submit(o, 0, &i);
        if (rc)
            return rc;
    }
    uint64_t end = now_ns() + 200000ull;
    int32_t seen = 0;
    while (now_ns() < end && !(seen = __atomic_load_n(&g[0], __ATOMIC_ACQUIRE))) {
        struct timespec d = {0, 50000};
        nanosleep(&d, NULL);
    }
    __atomic_store_n(&g[1], seen, __ATOMIC_RELEASE);
    return 0;
}

static const pto_task_site sites[] = {{"inc", inc, 1, 0}};
static const uint32_t site_of[] = {0, 0, 0, 0, 0, 0, 0, 0};
static const uint32_t pred_off[] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
static const uint32_t pred_ids[] = {0};
static const pto_program_desc eight = {PTO_PROGRAM_ABI, 3, 1, 0, sites, 0, 8, 0, site_of, pred_off, pred_ids, orch};

const pto_program_desc *prog_eight(void) { return &eight; }
"""


@pytest.fixture(scope="module")
def eight_library(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("batch")
    src, so = d / "eight.c", d / "libeight.so"
    src.write_text(SOURCE)
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-std=gnu11", f"-I{INCLUDE}", "-o", str(so), str(src)],
                   check=True)
    return so


@pytest.mark.parametrize("host_first", ["PTO_HOST_FIRST_AUTO", "PTO_HOST_FIRST_OFF", "PTO_HOST_FIRST_ALWAYS"])
def test_eight_ready_tasks_are_counted_as_queued(open_dev, new_stream, eight_library, host_first):
    dev = open_dev(cores=2, host_first=getattr(lib, host_first))
    out = ffi.new("pto_program **")
    check(lib.pto_program_load(dev, str(eight_library).encode(), b"prog_eight", out), "pto_program_load")
    prog = out[0]
    s = new_stream(device=dev)
    gate_ptr, x_ptr, y_ptr = alloc(dev, 16), alloc(dev, 8 * 16 * 4), alloc(dev, 8 * 16 * 4)
    gate = ffi.cast("int32_t *", lib.pto_mem_host_ptr(dev, gate_ptr))
    y = np.frombuffer(ffi.buffer(lib.pto_mem_host_ptr(dev, y_ptr), 8 * 16 * 4), np.float32)
    rng = np.random.default_rng(26)
    args = ffi.new("uint64_t[3]", [gate_ptr, x_ptr, y_ptr])
    try:
        for _ in range(4):
            x = rng.standard_normal(8 * 16).astype(np.float32)
            h2d(s, x_ptr, x)
            sync(s)
            y[:] = np.nan
            for i in range(4):
                gate[i] = 0
            before = device_stats(dev)
            check(lib.pto_stream_run_program(s, prog, args, 3, 0), "pto_stream_run_program")
            sync(s)
            st = device_stats(dev)
            assert gate[0] == 8
            assert 1 <= st.task_batches - before.task_batches <= 8
            assert st.tasks_queued - before.tasks_queued == 8
            np.testing.assert_allclose(y, 2 * x + 1, rtol=1e-6)
    finally:
        sync(s)
        lib.pto_program_unload(prog)
        for p in (gate_ptr, x_ptr, y_ptr):
            free(dev, p)
        lib.pto_stream_destroy(s)


def _run(dev, s, prog, args, gate):
    for i in range(4):
        gate[i] = 0
    check(lib.pto_stream_run_program(s, prog, args, 3, 0), "pto_stream_run_program")
    sync(s)  # pto_stream_synchronize runs no pass itself
    assert gate[0] == 8
    return gate[2]


def test_a_quick_program_starts_in_its_submitters_pass(open_dev, new_stream, eight_library):
    """Timed tiny, the program starts on the submitting thread; with a testing delay, never there.

    The wait (pto_stream_synchronize) runs no pass, so the orchestration runs on the submitter only
    through pti_stream_kick's own pass.  That pass needs sched_lock free (else the submitter kicks
    the scheduler thread): of 20 runs on an idle device, most start on the submitter.  A site with
    a testing delay is not tiny: then the start is the scheduler's, on every run; and with host
    first off (the device's threads run the tasks) it is the scheduler's too.
    """
    import threading

    me = threading.get_native_id()
    for host_first in (lib.PTO_HOST_FIRST_AUTO, lib.PTO_HOST_FIRST_OFF):
        dev = open_dev(cores=2, host_first=host_first)
        out = ffi.new("pto_program **")
        check(lib.pto_program_load(dev, str(eight_library).encode(), b"prog_eight", out), "pto_program_load")
        prog = out[0]
        s = new_stream(device=dev)
        gate_ptr, x_ptr, y_ptr = alloc(dev, 16), alloc(dev, 8 * 16 * 4), alloc(dev, 8 * 16 * 4)
        gate = ffi.cast("int32_t *", lib.pto_mem_host_ptr(dev, gate_ptr))
        args = ffi.new("uint64_t[3]", [gate_ptr, x_ptr, y_ptr])
        try:
            for _ in range(3):  # time the site (tiny: 16 floats)
                _run(dev, s, prog, args, gate)
            mine = batched = 0
            for _ in range(20):
                before = device_stats(dev)
                if _run(dev, s, prog, args, gate) == me:
                    mine += 1
                    batched += device_stats(dev).task_batches - before.task_batches == 1
            if host_first == lib.PTO_HOST_FIRST_OFF:
                assert mine == 0, f"{mine} of 20 runs started on the submitting thread, host first off"
                continue
            assert mine >= 10, f"only {mine} of 20 quick runs started on the submitting thread"
            # Its tiny tasks are the submitter's to run after the pass: one push when the orchestration returns.
            assert batched == mine, f"{mine - batched} of {mine} runs on the submitter pushed their tasks one by one"
            assert lib.pto_debug_task_delay(prog, b"inc", 1) == 1  # a testing delay: not tiny, not quick
            _run(dev, s, prog, args, gate)
            assert not any(_run(dev, s, prog, args, gate) == me for _ in range(10))
        finally:
            sync(s)
            lib.pto_program_unload(prog)
            for p in (gate_ptr, x_ptr, y_ptr):
                free(dev, p)
            lib.pto_stream_destroy(s)


def test_a_host_keeping_bursts_back_to_back_does_not_wake_the_scheduler_for_each(
        open_dev, new_stream, eight_library):
    """Keeps are recent: the scheduler thread sleeps at most 1 ms, so a keeper need not arm it.

    host_first always: the submitting thread starts the quick program and runs its 8 tiny tasks
    itself, in sleeping cores' stead, with tasks queued behind each (kept runs, engines.c).  The
    backstop must be armed for them; it used to be by a signal to the sleeping scheduler thread
    per burst (a futex wake between the program's start and its first task).  Now only the first
    burst after a quiet spell signals it: 20 runs back to back (well within 10 ms of each other)
    signal it a few times at most (a kick while its poll pass held sched_lock is one).

    On a loaded host the signalled scheduler thread may wait milliseconds for a CPU, asleep with
    no deadline as far as the keepers can tell: it used to be signalled again by every kept task
    that had work behind it (7 a burst, for all 20 bursts); a signal on its way now spares the
    rest (sched.c, sched_signalled).
    """
    dev = open_dev(cores=2, host_first=lib.PTO_HOST_FIRST_ALWAYS)
    out = ffi.new("pto_program **")
    check(lib.pto_program_load(dev, str(eight_library).encode(), b"prog_eight", out), "pto_program_load")
    prog = out[0]
    s = new_stream(device=dev)
    gate_ptr, x_ptr, y_ptr = alloc(dev, 16), alloc(dev, 8 * 16 * 4), alloc(dev, 8 * 16 * 4)
    gate = ffi.cast("int32_t *", lib.pto_mem_host_ptr(dev, gate_ptr))
    args = ffi.new("uint64_t[3]", [gate_ptr, x_ptr, y_ptr])
    try:
        for _ in range(3):  # time the site (tiny)
            _run(dev, s, prog, args, gate)
        # Count the signals of the bursts the host kept whole: a run the host did not keep (a site
        # timed past tiny by a preempted run, on a loaded machine) signals the scheduler rightly.
        kept = signals = 0
        for _ in range(20):
            before = device_stats(dev)
            _run(dev, s, prog, args, gate)
            st = device_stats(dev)
            if st.inline_runs - before.inline_runs >= 8:
                kept += 1
                signals += st.sched_signals - before.sched_signals
        assert kept >= 5, f"the host kept only {kept} of 20 bursts"
        assert signals <= 4, (signals, kept)
    finally:
        sync(s)
        lib.pto_program_unload(prog)
        for p in (gate_ptr, x_ptr, y_ptr):
            free(dev, p)
        lib.pto_stream_destroy(s)
