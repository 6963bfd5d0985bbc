/*
 * Description: programs (program.c).  Hand-written programs of
 * lib/programs.c (run.sh builds them as $PTO_TEST_LIBDIR/libprograms.so):
 * a diamond whose middle tasks must meet (they run at the same time on two
 * cores, or the first fails after a timeout); 64 tiles through an
 * intermediate with a window of 4 slots and a pool of 2 dependency entries
 * (never more in use, and the result right); the same without
 * a table (a chain); a scope larger than the window (the deadlock error); a
 * failing task (its dependent does not run, an independent one does); and
 * a device closed while programs are queued (in the ring and its overflow)
 * and running; a small program (orchestrated inside the pass that starts
 * it) whose first task runs while its orchestration still goes on; and
 * eight tiny tasks run without a core woken (on one CPU, where nothing
 * spins); and a diamond never timed, started by a copy engine's finish
 * with host first always: no helper keeps its tasks, whose middle ones
 * meet on the two cores.
 */
#include <dlfcn.h>
#include <sched.h>
#include <stdatomic.h>

#include "helpers.h"

#define N 64

static char lib[4096];

static pto_device *open_dev(uint32_t window, uint32_t deps)
{
    pto_device_config cfg;
    pto_device_config_init(&cfg);
    cfg.cores = 2;
    cfg.ring_task_window = window;
    cfg.ring_dep_pool = deps;
    cfg.trace = 1;
    pto_device *dev;
    t_check(pto_device_open("sim", &cfg, &dev));
    return dev;
}

static pto_program *load(pto_device *dev, const char *symbol)
{
    pto_program *p;
    t_check(pto_program_load(dev, lib, symbol, &p));
    return p;
}

static float *alloc(pto_device *dev, pto_devptr *ptr, size_t n)
{
    t_check(pto_mem_alloc(dev, n * sizeof(float), NULL, ptr));
    return pto_mem_host_ptr(dev, *ptr);
}

static pto_completion run(pto_device *dev, pto_program *p, const uint64_t *args, uint32_t nargs, uint64_t tok)
{
    pto_stream *s;
    t_check(pto_stream_create(dev, 0, &s));
    t_check(pto_stream_run_program(s, p, args, nargs, tok));
    pto_completion c;
    t_assert(pto_wait_token(dev, tok, 20000000, &c) == 0, "program token %llu never completed",
             (unsigned long long)tok);
    t_assert(pto_cq_drain(dev, &(pto_completion){0}, 1) == 1, "no record to drain");
    pto_stream_destroy(s);
    return c;
}

static void test_diamond(void)
{
    pto_device *dev = open_dev(256, 64);
    pto_program *p = load(dev, "prog_diamond");
    pto_devptr b[5];
    float *x = alloc(dev, &b[0], N), *out = alloc(dev, &b[4], N);
    for (int i = 1; i < 4; i++)
        alloc(dev, &b[i], N);
    for (int i = 0; i < N; i++) {
        x[i] = (float)i;
        out[i] = -1;
    }
    uint64_t args[5] = {b[0], b[1], b[2], b[3], b[4]};
    t_assert(pto_stream_run_program(NULL, p, args, 5, 1) == -PTO_EINVAL, "NULL stream accepted");
    pto_stream *s;
    t_check(pto_stream_create(dev, 0, &s));
    t_assert(pto_stream_run_program(s, p, args, 4, 1) == -PTO_EINVAL, "wrong argument count accepted");
    pto_stream_destroy(s);
    pto_completion c = run(dev, p, args, 5, 7);
    t_assert(c.status == 0, "diamond failed: %s", c.message);
    for (int i = 0; i < N; i++)
        t_assert(out[i] == (i + 1.0f) * 5.0f, "out[%d] = %f", i, out[i]);
    pto_trace_record rec[64];
    int n = pto_trace_read(dev, rec, 64), tasks = 0, progs = 0;
    for (int i = 0; i < n; i++) {
        if (rec[i].kind == PTO_CMD_TASK) {
            tasks++;
            t_assert(rec[i].engine >= 0 && rec[i].engine < 2 && rec[i].token == 7, "task record on engine %d",
                     rec[i].engine);
        } else if (rec[i].kind == PTO_CMD_PROGRAM) {
            progs++;
        }
    }
    t_assert(tasks == 4 && progs == 1, "%d task records, %d program records", tasks, progs);
    pto_load_counts lc;
    t_check(pto_device_get_load_counts(dev, &lc));
    t_assert(lc.aicpu_dlopen == 1 && lc.host_dlopen == 0, "loads %llu/%llu", (unsigned long long)lc.aicpu_dlopen,
             (unsigned long long)lc.host_dlopen);
    pto_program_unload(p);
    pto_device_close(dev);
}

static void check_tiles(pto_device *dev, const char *symbol)
{
    pto_program *p = load(dev, symbol);
    pto_devptr bx, bo;
    float *x = alloc(dev, &bx, N), *out = alloc(dev, &bo, 1);
    float want = 0;
    for (int i = 0; i < N; i++) {
        x[i] = (float)(i % 7) - 3.0f;
        want += x[i] * 2.0f;
    }
    out[0] = -1;
    uint64_t args[2] = {bx, bo};
    for (int round = 0; round < 3; round++) {
        pto_completion c = run(dev, p, args, 2, 100 + round);
        t_assert(c.status == 0, "%s failed: %s", symbol, c.message);
        t_assert(out[0] == want, "%s: sum %f, want %f", symbol, out[0], want);
    }
    pto_program_stats st;
    t_check(pto_program_get_stats(p, &st));
    t_assert(st.runs == 3 && st.tasks == 3 * (N + 1), "runs %llu tasks %llu", (unsigned long long)st.runs,
             (unsigned long long)st.tasks);
    t_assert(st.window_hwm <= 4 && st.dep_hwm <= 2, "window hwm %u, dep hwm %u", st.window_hwm, st.dep_hwm);
    pto_program_unload(p);
}

static void test_tiles(void)
{
    pto_device *dev = open_dev(4, 2);
    check_tiles(dev, "prog_tiles");
    check_tiles(dev, "prog_chain");
    pto_device_close(dev);
}

static void test_scope_deadlock(void)
{
    pto_device *dev = open_dev(4, 64);
    pto_program *p = load(dev, "prog_scoped");
    pto_devptr bo;
    alloc(dev, &bo, 8);
    uint64_t args[1] = {bo};
    pto_completion c = run(dev, p, args, 1, 9);
    t_assert(c.status == -PTO_EINVAL && strstr(c.message, "ring_task_window=4"), "scope: %s (%s)",
             pto_status_name(c.status), c.message);
    pto_device_close(dev);
    dev = open_dev(8, 64);
    p = load(dev, "prog_scoped");
    float *out = alloc(dev, &bo, 8);
    args[0] = bo;
    c = run(dev, p, args, 1, 10);
    t_assert(c.status == 0, "scope in a window of 8: %s", c.message);
    for (int i = 0; i < 8; i++)
        t_assert(out[i] == (float)i, "out[%d] = %f", i, out[i]);
    pto_device_close(dev); /* p still loaded: close releases it */
}

static void test_failing(void)
{
    pto_device *dev = open_dev(256, 64);
    pto_program *p = load(dev, "prog_failing");
    pto_devptr bo;
    float *flags = alloc(dev, &bo, 2);
    flags[0] = flags[1] = 0;
    uint64_t args[1] = {bo};
    pto_completion c = run(dev, p, args, 1, 11);
    t_assert(c.status == -PTO_EKERNEL && strstr(c.message, "task bad: bad input"), "failing: %s (%s)",
             pto_status_name(c.status), c.message);
    t_assert(flags[0] == 0, "the dependent of the failed task ran");
    t_assert(flags[1] == 1, "the independent task did not run");
    pto_program_unload(p);
    pto_device_close(dev);
}

static void test_close_while_running(void)
{
    for (int round = 0; round < 4; round++) {
        pto_device *dev = open_dev(4, 2);
        pto_program *p = load(dev, "prog_tiles");
        pto_devptr bx, bo;
        alloc(dev, &bx, N);
        alloc(dev, &bo, 1);
        uint64_t args[2] = {bx, bo};
        pto_stream *s;
        t_check(pto_stream_create(dev, 0, &s));
        t_check(pto_stream_set_overflow(s, 1)); /* runs past the 4-slot ring wait in the overflow */
        for (int i = 0; i < 8; i++)
            t_check(pto_stream_run_program(s, p, args, 2, 200 + i));
        pto_program_unload(p); /* queued runs keep it */
        if (round & 1)
            t_pause_us(200);
        pto_device_close(dev);
    }
}

/* An int the test library defines (its programs' observations). */
static atomic_int *lib_int(const char *name)
{
    void *h = dlopen(lib, RTLD_NOW | RTLD_NOLOAD); /* the driver's load of it */
    t_assert(h != NULL, "%s not loaded: %s", lib, dlerror());
    atomic_int *v = dlsym(h, name);
    t_assert(v != NULL, "no %s in %s", name, lib);
    dlclose(h);
    return v;
}

/*
 * A small program runs inline, inside the scheduler pass that starts it;
 * its ready tasks still go to the cores as they are made ready, not when
 * the orchestration returns: early's orchestration sees its first task run
 * before it submits the second.  Host first off: the pass and the task are
 * the device's threads' (a host thread running the pass would itself be
 * the one to run the task).  Bounded waits in the orchestration: seen in
 * one of a few runs (a core may be the pass's own thread), never before.
 */
static void test_early_dispatch(void)
{
    int seen = 0;
    for (int round = 0; round < 5 && !seen; round++) {
        pto_device_config cfg;
        pto_device_config_init(&cfg);
        cfg.cores = 2;
        cfg.host_first = PTO_HOST_FIRST_OFF;
        cfg.spin_us = 1; /* no core still spinning from its start (a spinner would run the pass itself) */
        pto_device *dev;
        t_check(pto_device_open("sim", &cfg, &dev));
        pto_program *p = load(dev, "prog_early");
        atomic_store(lib_int("prog_early_ran"), 0);
        atomic_store(lib_int("prog_early_seen"), 0);
        pto_devptr bo;
        float *out = alloc(dev, &bo, 2);
        out[0] = out[1] = -1;
        uint64_t args[1] = {bo};
        t_pause_us(2000);
        pto_completion c = run(dev, p, args, 1, 20 + round);
        t_assert(c.status == 0, "early: %s", c.message);
        t_assert(out[0] == 1.0f && out[1] == 2.0f, "early: out %f %f", out[0], out[1]);
        pto_program_stats st;
        t_check(pto_program_get_stats(p, &st));
        t_assert(st.inline_runs == 1, "early was not orchestrated inline (%llu)",
                 (unsigned long long)st.inline_runs);
        seen = atomic_load(lib_int("prog_early_seen"));
        pto_program_unload(p);
        pto_device_close(dev);
    }
    t_assert(seen, "a small program's first task never ran before its orchestration returned");
}

/*
 * Ready work never waits behind a kept run while a core sleeps.  Host first
 * always (every device thread hands the next command to itself) and no
 * spinning core: a helper may run a sleeping core's work, but only work
 * known to be short.  A memset too long for the host to run inline goes to
 * a copy engine, whose finish starts the program and dispatches its first
 * task without waking a core (it counts itself as the taker), then offers
 * to help.  The diamond's tasks were never timed (a fresh load each round):
 * of unknown length, so no helper runs them (engine_helps stays put) and
 * cores do.  Its middle tasks meet: each waits for the other (5 s, then
 * fails), so the second must start on a core of its own while the first
 * runs.  Before: the copy engine ran top and then a middle task as a
 * claimed core, and the core signalled for the other middle task could be
 * the claimed one (it slept on): the task sat queued until the first timed
 * out.
 */
static void test_kept_work_leaves_the_rest_to_a_core(void)
{
    for (int round = 0; round < 4; round++) {
        pto_device_config cfg;
        pto_device_config_init(&cfg);
        cfg.cores = 2;
        cfg.host_first = PTO_HOST_FIRST_ALWAYS;
        cfg.spin_us = 1;
        pto_device *dev;
        t_check(pto_device_open("sim", &cfg, &dev));
        pto_program *p = load(dev, "prog_diamond");
        atomic_store(lib_int("prog_meet"), 0);
        pto_devptr b[5], big;
        float *x = alloc(dev, &b[0], N), *out = alloc(dev, &b[4], N);
        for (int i = 1; i < 4; i++)
            alloc(dev, &b[i], N);
        uint64_t big_n = (uint64_t)cfg.inline_us * 4096ull * 8; /* 8x what the host runs inline */
        if (!big_n)
            big_n = 1u << 20; /* inline_us 0: the default's */
        unsigned char *hbig = alloc(dev, &big, big_n / sizeof(float));
        for (int i = 0; i < N; i++) {
            x[i] = (float)(i * 3 - 7);
            out[i] = -1;
        }
        hbig[big_n - 1] = 1;
        uint64_t args[5] = {b[0], b[1], b[2], b[3], b[4]};
        pto_stream *s;
        t_check(pto_stream_create(dev, 0, &s));
        uint64_t tok = 200 + 2 * (uint64_t)round;
        pto_device_stats a, st;
        t_check(pto_device_get_stats(dev, &a));
        t_check(pto_stream_memset(s, big, 0, big_n, tok - 1));
        t_check(pto_stream_run_program(s, p, args, 5, tok));
        pto_completion c;
        t_assert(pto_wait_token(dev, tok, 20000000, &c) == 0, "round %d: the diamond never completed", round);
        t_check(pto_device_get_stats(dev, &st));
        t_assert(c.status == 0, "round %d: diamond failed: %s", round, c.message);
        for (int i = 0; i < N; i++)
            t_assert(out[i] == (x[i] + 1.0f) * 5.0f, "round %d: out[%d] = %f", round, i, out[i]);
        t_assert(hbig[big_n - 1] == 0, "round %d: the memset did not run", round);
        t_assert(st.engine_helps == a.engine_helps, "round %d: a helper ran %llu untimed runs in a core's stead",
                 round, (unsigned long long)(st.engine_helps - a.engine_helps));
        pto_stream_destroy(s);
        pto_program_unload(p);
        pto_device_close(dev);
    }
}

/*
 * Eight tiny independent tasks wake no core: the thread that starts the
 * program (the scheduler, host first off) runs them after its pass, in a
 * sleeping core's stead, since a core's wake-up takes longer than they do.
 * On one CPU (pinned before the device opens: its threads inherit it)
 * nothing spins.  A task is tiny once its site ran under 5 us, so a few
 * runs warm it; a preempted run may still wake a core, so most runs of ten,
 * not all, must wake none (before: every run woke one).
 */
static void test_tiny_tasks_wake_no_core(void)
{
    cpu_set_t was, one;
    t_check(sched_getaffinity(0, sizeof(was), &was));
    int cpu = 0;
    while (!CPU_ISSET(cpu, &was))
        cpu++;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    t_check(sched_setaffinity(0, sizeof(one), &one));
    pto_device_config cfg;
    pto_device_config_init(&cfg);
    cfg.cores = 2;
    cfg.host_first = PTO_HOST_FIRST_OFF;
    pto_device *dev;
    t_check(pto_device_open("sim", &cfg, &dev));
    pto_program *p = load(dev, "prog_eight");
    pto_devptr bo;
    float *out = alloc(dev, &bo, 8);
    uint64_t args[1] = {bo};
    for (int i = 0; i < 3; i++)
        t_assert(run(dev, p, args, 1, 30 + i).status == 0, "eight failed");
    int quiet = 0;
    for (int round = 0; round < 10; round++) {
        for (int i = 0; i < 8; i++)
            out[i] = -1;
        pto_device_stats a, b;
        t_check(pto_device_get_stats(dev, &a));
        pto_completion c = run(dev, p, args, 1, 40 + round);
        t_check(pto_device_get_stats(dev, &b));
        t_assert(c.status == 0, "eight: %s", c.message);
        for (int i = 0; i < 8; i++)
            t_assert(out[i] == (float)i + 1.0f, "eight: out[%d] = %f", i, out[i]);
        quiet += b.engine_wakes == a.engine_wakes;
    }
    pto_program_unload(p);
    pto_device_close(dev);
    t_check(sched_setaffinity(0, sizeof(was), &was));
    t_assert(quiet >= 5, "only %d of 10 runs of eight tiny tasks woke no core", quiet);
}

int main(void)
{
    const char *dir = getenv("PTO_TEST_LIBDIR");
    if (!dir) {
        fprintf(stderr, "PTO_TEST_LIBDIR is not set (run through run.sh)\n");
        return T_EXIT_SKIP;
    }
    snprintf(lib, sizeof(lib), "%s/libprograms.so", dir);
    test_diamond();
    test_tiles();
    test_scope_deadlock();
    test_failing();
    test_close_while_running();
    test_early_dispatch();
    test_tiny_tasks_wake_no_core();
    test_kept_work_leaves_the_rest_to_a_core();
    printf("programs: ok\n");
    return T_EXIT_PASS;
}
