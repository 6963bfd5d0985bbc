"""native/src/engines.c, sched.c: the backstop of kept runs.

A device thread that finishes a command may run the next ready one of the
other engine kind itself instead of waking an engine (engine_help), and a host
thread may run short work inline (host_first).  Work is judged short from its
last run; when it runs long this time, the rest of its queue must not wait for
it while an engine sleeps: the scheduler thread wakes an engine for that work
once the kept run is past its budget.
"""

from __future__ import annotations

import select
import subprocess
from pathlib import Path

import numpy as np
import pytest
from helpers.latch import held
from helpers.raw_driver import alloc, device_stats, free, h2d, sync

from pypto_async._driver import check, ffi, lib

INCLUDE = Path(__file__).resolve().parents[2] / "pypto_async" / "include"
# A warm-up run preempted on a loaded host times a site over the tiny bound: then nothing keeps the
# held run's tasks (they go to woken cores) and the round proves nothing; it is run again.
ATTEMPTS = 10

# Two independent tasks "a" and "b" over one int32[4] gate: [hold, arrived, met, timed_out].  With
# gate[0] == 0 they return at once (so both sites are timed tiny); with gate[0] != 0 each arrives,
# then waits for the other to arrive: they can only both finish if they run at the same time.  The
# wait is bounded (5 s): a task left alone counts a timeout and fails instead of hanging the device.
SOURCE = r"""
#include <stdint.h>
#include <time.h>
#include "pto_program.h"

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void meet(const pto_block *blk, void *const *args)
{
    int32_t *g = args[0];
    if (!__atomic_load_n(&g[0], __ATOMIC_ACQUIRE))
        return;
    __atomic_fetch_add(&g[1], 1, __ATOMIC_ACQ_REL);
    uint64_t end = now_ns() + 5000000000ull;
    while (__atomic_load_n(&g[1], __ATOMIC_ACQUIRE) < 2) {
        struct timespec d = {0, 20000};
        nanosleep(&d, NULL);
        if (now_ns() > end) {
            __atomic_fetch_add(&g[3], 1, __ATOMIC_ACQ_REL);
            blk->fail(blk, PTO_ETIMEDOUT, "the other task never ran while this one waited");
            return;
        }
    }
    __atomic_fetch_add(&g[2], 1, __ATOMIC_ACQ_REL);
}

static void t_a(const pto_block *blk, void *const *args, const int64_t *idx) { (void)idx; meet(blk, args); }
static void t_b(const pto_block *blk, void *const *args, const int64_t *idx) { (void)idx; meet(blk, args); }

static int orch(pto_orch *o, const pto_orch_ops *ops, void *const *args)
{
    (void)args;
    int rc = ops->submit(o, 0, NULL);
    return rc ? rc : ops->submit(o, 1, NULL);
}

static const pto_task_site sites[] = {{"a", t_a, 0, 0}, {"b", t_b, 0, 0}};
static const uint32_t site_of[] = {0, 1};
static const uint32_t pred_off[] = {0, 0, 0};
static const uint32_t pred_ids[] = {0};
static const pto_program_desc pair = {PTO_PROGRAM_ABI, 1, 2, 0, sites, 0, 2, 0, site_of, pred_off, pred_ids, orch};

const pto_program_desc *prog_pair(void) { return &pair; }
"""


@pytest.fixture(scope="module")
def pair_library(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("backstop")
    src, so = d / "pair.c", d / "libpair.so"
    src.write_text(SOURCE)
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-std=gnu11", f"-I{INCLUDE}", "-o", str(so), str(src)],
                   check=True)
    return so


@pytest.mark.slow
def test_a_kept_task_that_runs_long_gets_an_engine_woken_for_the_task_queued_behind_it(
        open_dev, new_stream, pair_library):
    """A copy engine keeps a task timed tiny; held this time, the task behind it still starts on a core.

    host_first always: the copy engine that finishes the copy starts the program in its pass and runs
    its tiny tasks itself, in a sleeping core's stead, waking nobody for them.  On this run task "a"
    waits until "b" runs beside it: "b", queued behind "a", must reach a core woken by the backstop
    while "a" holds, or "a" times out.  The host waits in pto_stream_synchronize, which runs nothing.
    """
    dev = open_dev(cores=2, copy_engines=1, spin_us=0, host_first=lib.PTO_HOST_FIRST_ALWAYS)
    out = ffi.new("pto_program **")
    check(lib.pto_program_load(dev, str(pair_library).encode(), b"prog_pair", out), "pto_program_load")
    prog = out[0]
    gate_ptr = alloc(dev, 16)
    gate = ffi.cast("int32_t *", lib.pto_mem_host_ptr(dev, gate_ptr))
    for i in range(4):
        gate[i] = 0
    n = 1 << 18  # 1 MiB: a copy no helper or host keeps (over inline_us x 4 KiB): a copy engine runs it
    big = alloc(dev, n * 4)
    src = np.random.default_rng(12).standard_normal(n).astype(np.float32)
    args = ffi.new("uint64_t[1]", [gate_ptr])
    s = new_stream(device=dev)
    try:
        kept = False
        for _ in range(ATTEMPTS):
            for i in range(4):
                gate[i] = 0
            for _ in range(3):  # time both sites (tiny: they return at once)
                h2d(s, big, src)
                check(lib.pto_stream_run_program(s, prog, args, 1, 0), "pto_stream_run_program")
                sync(s)
            assert (gate[1], gate[2], gate[3]) == (0, 0, 0)
            gate[0] = 1
            with held(dev, s) as latch:
                h2d(s, big, src)
                check(lib.pto_stream_run_program(s, prog, args, 1, 0), "pto_stream_run_program")
                before = device_stats(dev)
                latch.release()  # the copy goes to a woken copy engine; its finish starts the program
                sync(s)
            st = device_stats(dev)
            assert gate[3] == 0, "a task waited alone: the one queued behind it never started"
            assert (gate[1], gate[2]) == (2, 2), (gate[1], gate[2])
            kept = st.engine_helps > before.engine_helps  # the finishing copy engine kept one of them
            if kept:
                break
        assert kept, f"in {ATTEMPTS} attempts no task was kept"
        back = np.full(n, np.nan, np.float32)
        check(lib.pto_stream_copy_d2h(s, ffi.from_buffer(back), big, back.nbytes, 0), "copy_d2h")
        sync(s)
        np.testing.assert_array_equal(back, src)
    finally:
        sync(s)
        lib.pto_program_unload(prog)
        free(dev, big)
        free(dev, gate_ptr)
        lib.pto_stream_destroy(s)


def test_a_task_the_host_runs_inline_that_runs_long_leaves_the_task_behind_it_to_a_core(
        open_dev, new_stream, pair_library):
    """host_first always: the host thread waiting for the program runs its tiny tasks; "b" still meets "a".

    The waiting host runs the program's start (a kick nobody served yet) and the tiny tasks it
    queued, in a sleeping core's stead.  Whichever thread keeps "a", held this time, "b" must start
    beside it: on a core woken by the backstop, or on the waiting host.
    """
    dev = open_dev(cores=2, copy_engines=1, spin_us=0, host_first=lib.PTO_HOST_FIRST_ALWAYS)
    out = ffi.new("pto_program **")
    check(lib.pto_program_load(dev, str(pair_library).encode(), b"prog_pair", out), "pto_program_load")
    prog = out[0]
    gate_ptr = alloc(dev, 16)
    gate = ffi.cast("int32_t *", lib.pto_mem_host_ptr(dev, gate_ptr))
    for i in range(4):
        gate[i] = 0
    args = ffi.new("uint64_t[1]", [gate_ptr])
    s = new_stream(device=dev)
    rec = ffi.new("pto_completion *")
    try:
        kept = False
        token = 0
        for _ in range(ATTEMPTS):
            for i in range(4):
                gate[i] = 0
            for _ in range(3):  # time both sites
                token += 1
                check(lib.pto_stream_run_program(s, prog, args, 1, token), "pto_stream_run_program")
                check(lib.pto_wait_token(dev, token, 10_000_000, rec), "pto_wait_token")
                assert rec.status == 0, ffi.string(rec.message)
            gate[0] = 1
            before = device_stats(dev)
            token += 1
            check(lib.pto_stream_run_program(s, prog, args, 1, token), "pto_stream_run_program")
            check(lib.pto_wait_token(dev, token, 10_000_000, rec), "pto_wait_token")
            st = device_stats(dev)
            assert gate[3] == 0, "a task waited alone: the one queued behind it never started"
            assert rec.status == 0, ffi.string(rec.message)
            assert (gate[1], gate[2]) == (2, 2), (gate[1], gate[2])
            kept = st.inline_runs > before.inline_runs  # the host ran one of them
            if kept:
                break
        assert kept, f"in {ATTEMPTS} attempts the host ran no task"
    finally:
        sync(s)
        lib.pto_program_unload(prog)
        free(dev, gate_ptr)
        lib.pto_stream_destroy(s)


def _pair_on(dev, new_stream, pair_library):
    """Load prog_pair on `dev` with its gate and a stream: (stream, program, args, gate, release)."""
    out = ffi.new("pto_program **")
    check(lib.pto_program_load(dev, str(pair_library).encode(), b"prog_pair", out), "pto_program_load")
    prog = out[0]
    gate_ptr = alloc(dev, 16)
    gate = ffi.cast("int32_t *", lib.pto_mem_host_ptr(dev, gate_ptr))
    args = ffi.new("uint64_t[1]", [gate_ptr])
    s = new_stream(device=dev)

    def release():
        sync(s)
        lib.pto_program_unload(prog)
        free(dev, gate_ptr)
        lib.pto_stream_destroy(s)

    return s, prog, args, gate, release


def _delayed_pair(dev, s, prog, args, gate, wait) -> tuple[bool, object]:
    """Warm both sites up, then run the pair held (gate[0] = 1) behind a delay; `wait(token)` waits for it.

    Only the scheduler thread's timed wait ends a delay (nothing kicks a stream whose head is one), so
    that thread's pass starts the program and runs its tiny tasks itself (engine_help), keeping "a"
    with "b" queued behind.  Returns (whether a task was kept, the device stats after), or raises.
    """
    token = 0
    for _ in range(ATTEMPTS):
        for i in range(4):
            gate[i] = 0
        for _ in range(3):  # time both sites (tiny: they return at once)
            token += 1
            check(lib.pto_stream_run_program(s, prog, args, 1, token), "pto_stream_run_program")
            wait(token)
        gate[0] = 1
        before = device_stats(dev)
        token += 1
        check(lib.pto_stream_delay(s, 1000, 0), "pto_stream_delay")
        check(lib.pto_stream_run_program(s, prog, args, 1, token), "pto_stream_run_program")
        rec = wait(token)
        st = device_stats(dev)
        assert gate[3] == 0, "a task waited alone: the one queued behind it never started"
        assert rec.status == 0, ffi.string(rec.message)
        assert (gate[1], gate[2]) == (2, 2), (gate[1], gate[2])
        if st.engine_helps > before.engine_helps:  # the scheduler thread kept one of them
            return True, st
    return False, None


@pytest.mark.parametrize("host_first", ["OFF", "ALWAYS"])
def test_a_task_the_scheduler_thread_keeps_that_runs_long_leaves_the_task_behind_it_to_a_core(
        open_dev, new_stream, pair_library, host_first):
    """The scheduler thread keeps "a" while the host blocks in pto_wait_token; "b" still meets "a".

    The backstop is the scheduler thread's own timed wait, which cannot watch a run that thread keeps:
    the host blocked in the driver watches it (its wait wakes for the kept run's budget).
    """
    dev = open_dev(cores=2, copy_engines=1, spin_us=0, host_first=getattr(lib, f"PTO_HOST_FIRST_{host_first}"))
    s, prog, args, gate, release = _pair_on(dev, new_stream, pair_library)
    rec = ffi.new("pto_completion *")

    def wait(token):
        check(lib.pto_wait_token(dev, token, 10_000_000, rec), "pto_wait_token")
        return rec

    try:
        kept, st = _delayed_pair(dev, s, prog, args, gate, wait)
        assert kept, f"in {ATTEMPTS} attempts the scheduler thread kept no task"
    finally:
        release()


def test_a_task_the_scheduler_thread_keeps_while_the_host_waits_on_the_fd_leaves_the_task_behind_it_to_a_core(
        open_dev, new_stream, pair_library):
    """As above, but the host waits on the completion fd (as the runtime's pump does): nothing in the driver waits.

    With no host thread blocked in the driver to watch it, a run the scheduler thread keeps with work
    queued behind gets an engine woken for that work at once.
    """
    dev = open_dev(cores=2, copy_engines=1, spin_us=0, host_first=lib.PTO_HOST_FIRST_ALWAYS)
    s, prog, args, gate, release = _pair_on(dev, new_stream, pair_library)
    fd = lib.pto_cq_fd(dev)
    buf = ffi.new("pto_completion[4]")

    def wait(token):
        while True:
            r, _, _ = select.select([fd], [], [], 10.0)
            assert r, f"token {token}: no record within 10 s"
            n = lib.pto_cq_drain(dev, buf, 4)
            assert n >= 0, n
            for i in range(n):
                if buf[i].token == token:
                    return buf[i]

    try:
        kept, st = _delayed_pair(dev, s, prog, args, gate, wait)
        assert kept, f"in {ATTEMPTS} attempts the scheduler thread kept no task"
    finally:
        release()
