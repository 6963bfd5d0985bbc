/*
 * Description: the device model (model.c) under concurrency.  A program of
 * 64 tasks and a join (lib/programs.c's tiles, through a 4-slot window) run
 * on devices with 1 and 4 host core threads: its modeled task timeline,
 * relative to the program's modeled start, is the same in every run and on
 * both devices; the same for the program without a table (prog_resolved),
 * whose edges the driver resolves at submit, and the edges it recorded;
 * and those a program without a table of accesses of every shape
 * (lib/mixed.h) resolves are the rule's, pair by pair, over the window;
 * and the same timelines again with the model's in-order placement off
 * (pti_model_fast_off: every program through the list schedule's queues).
 * Then launches of several blocks and copies on four streams
 * at once: every stream's records are in order in modeled time (each starts
 * at or after its predecessor's end), and the modeled engines' busy time is
 * exactly the floor per zero-work block.  Under tsan, this is the model's
 * locking under real contention.
 */
#include <stdbool.h>

#include "helpers.h"
#include "internal.h"
#include "lib/mixed.h"

#define N 64
#define STREAMS 4
#define ROUNDS 3

static char lib[4096];

static pto_device_profile profile(void)
{
    pto_device_profile p;
    memset(&p, 0, sizeof(p));
    p.aic_cores = 1;
    p.aiv_cores = 4;
    p.copy_engines = 2;
    p.clock_ghz = 1.0;
    p.pickup_us = 1.0;
    p.orch_us_per_task = 0.25;
    p.min_kernel_us = 0.5;
    p.gm_gbps = 100;
    p.host_link_gbps = 10;
    p.host_link_latency_us = 2;
    p.transfer_granule_bytes = 512;
    p.mte2_bytes_per_cycle = p.mte1_bytes_per_cycle = p.mte3_bytes_per_cycle = p.fixpipe_bytes_per_cycle = 64;
    for (int i = 0; i < 3; i++) {
        p.vec_bytes_per_cycle[i] = 128;
        p.cube_macs_per_cycle[i] = 1024;
    }
    return p;
}

static pto_device *open_dev(uint32_t cores)
{
    pto_device_config cfg;
    pto_device_config_init(&cfg);
    cfg.cores = cores;
    cfg.copy_engines = 2;
    cfg.ring_task_window = 4;
    cfg.ring_dep_pool = 2;
    cfg.trace = 1;
    pto_device *dev;
    t_check(pto_device_open("sim", &cfg, &dev));
    pto_device_profile p = profile();
    t_check(pto_device_set_profile(dev, &p));
    return dev;
}

struct slot {
    uint64_t dispatch, start, end;
    int32_t engine;
};

/* Run tiles once; fill tl[0..N] (task instance order) relative to the program's modeled start. */
static void run_tiles(pto_device *dev, pto_program *p, uint64_t *args, uint64_t tok, struct slot *tl)
{
    pto_stream *s;
    t_check(pto_stream_create(dev, 0, &s));
    t_check(pto_stream_run_program(s, p, args, 2, tok));
    pto_completion c;
    t_assert(pto_wait_token(dev, tok, 20000000, &c) == 0, "program %llu never completed", (unsigned long long)tok);
    t_assert(c.status == 0, "tiles failed: %s", c.message);
    t_assert(pto_cq_drain(dev, &(pto_completion){0}, 1) == 1, "no record to drain");
    pto_stream_destroy(s);
    pto_trace_record rec[2 * N];
    int n = pto_trace_read(dev, rec, 2 * N), seen = 0;
    for (int i = 0; i < n; i++) {
        if (rec[i].kind != PTO_CMD_TASK || rec[i].token != tok)
            continue;
        t_assert(rec[i].block <= N, "task instance %u", rec[i].block);
        uint64_t t0 = c.start_ns;
        tl[rec[i].block] = (struct slot){rec[i].dispatch_ns - t0, rec[i].start_ns - t0, rec[i].end_ns - t0,
                                         rec[i].engine};
        t_assert(rec[i].start_ns - rec[i].dispatch_ns == 1000, "pickup %llu ns",
                 (unsigned long long)(rec[i].start_ns - rec[i].dispatch_ns));
        t_assert(rec[i].host_end_ns >= rec[i].host_start_ns && rec[i].host_start_ns, "host times");
        seen++;
    }
    t_assert(seen == N + 1, "%d task records", seen);
    t_assert(tl[N].end == c.end_ns - c.start_ns, "the program ends with its join");
    /* The next run starts on an idle modeled device: the host submits it after this one's modeled end. */
    while (pto_now_ns() <= c.end_ns) {
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
}

/* The edges prog_resolved's last run resolved, through its 4-slot window: each tile waits for the one 4 back. */
static void check_resolved_edges(pto_program *p)
{
    uint32_t ntasks, nedges, sites[N + 1], edges[4 * N];
    t_check(pto_program_last_edges(p, NULL, 0, NULL, 0, &ntasks, &nedges));
    t_assert(ntasks == N + 1, "%u tasks", ntasks);
    uint32_t want = (N - 4) + 4; /* the window's edges; the sum: the window's and the 3 tiles after it */
    t_assert(nedges == want, "%u edges", nedges);
    t_check(pto_program_last_edges(p, sites, N + 1, edges, N, &ntasks, &nedges));
    for (uint32_t i = 0; i <= N; i++)
        t_assert(sites[i] == (i < N ? 0u : 1u), "task %u: site %u", i, sites[i]);
    t_assert(!strcmp(pto_program_site_name(p, 1), "sum") && !pto_program_site_name(p, 2), "site names");
    uint32_t k = 0;
    for (uint32_t i = 4; i < N; i++, k++) {
        const uint32_t *e = &edges[4 * k];
        t_assert(e[0] == i - 4 && e[1] == i && e[2] == 0 && e[3] == UINT32_MAX, "edge %u: %u -> %u (%u, %u)", k,
                 e[0], e[1], e[2], e[3]);
    }
    for (uint32_t j = N - 4; j < N; j++, k++) {
        const uint32_t *e = &edges[4 * k];
        bool window = j == N - 4;
        t_assert(e[0] == j && e[1] == N && e[2] == (window ? 0u : 1u) && e[3] == (window ? UINT32_MAX : 2u),
                 "sum's edge %u: %u (%u, %u)", k, e[0], e[2], e[3]);
    }
}

static void test_program_timeline(const char *name)
{
    struct slot want[N + 1], got[N + 1];
    bool have = false;
    bool resolved = !strcmp(name, "prog_resolved");
    uint32_t cores[] = {1, 4, 4};
    for (int d = 0; d < 3; d++) {
        pti_model_fast_off = d == 2; /* the list schedule places them as the in-order path did */
        pto_device *dev = open_dev(cores[d]);
        pto_program *p;
        t_check(pto_program_load(dev, lib, name, &p));
        if (resolved)
            t_check(pto_program_record_edges(p, 1));
        pto_devptr bx, bo;
        t_check(pto_mem_alloc(dev, N * sizeof(float), NULL, &bx));
        t_check(pto_mem_alloc(dev, sizeof(float), NULL, &bo));
        float *x = pto_mem_host_ptr(dev, bx);
        for (int i = 0; i < N; i++)
            x[i] = (float)i;
        uint64_t args[2] = {bx, bo};
        for (int r = 0; r < ROUNDS; r++) {
            run_tiles(dev, p, args, 10 + r, got);
            if (!have) {
                memcpy(want, got, sizeof(want));
                have = true;
            }
            for (int i = 0; i <= N; i++)
                t_assert(got[i].dispatch == want[i].dispatch && got[i].start == want[i].start &&
                             got[i].end == want[i].end && got[i].engine == want[i].engine,
                         "%s, cores %u round %d: task %d differs", name, cores[d], r, i);
            if (resolved)
                check_resolved_edges(p);
        }
        float *out = pto_mem_host_ptr(dev, bo);
        t_assert(out[0] == 2.0f * (N * (N - 1) / 2), "sum %f", out[0]);
        pto_program_unload(p);
        pto_device_close(dev);
    }
    pti_model_fast_off = 0;
}

static void test_streams_in_order(void)
{
    pto_device *dev = open_dev(4);
    pto_kernel *noop;
    t_check(pto_kernel_builtin(dev, "noop", &noop));
    pto_stream *s[STREAMS];
    pto_devptr buf[STREAMS];
    enum { BYTES = 1 << 16, LAUNCHES = 50, BLOCKS = 3 };
    for (int i = 0; i < STREAMS; i++)
        t_check(pto_mem_alloc(dev, BYTES, NULL, &buf[i])); /* one per stream: the copies never race */
    char *host = t_malloc(BYTES);
    memset(host, 7, BYTES);
    uint64_t tok = 1000;
    for (int i = 0; i < STREAMS; i++) {
        t_check(pto_stream_create(dev, 0, &s[i]));
        t_check(pto_stream_set_overflow(s[i], 1));
    }
    for (int k = 0; k < LAUNCHES; k++)
        for (int i = 0; i < STREAMS; i++) {
            t_check(pto_stream_launch(s[i], noop, BLOCKS, NULL, 0, ++tok));
            if (k % 10 == 0)
                t_check(pto_stream_copy_h2d(s[i], buf[i], host, BYTES, ++tok));
        }
    t_check(pto_device_synchronize(dev, 20000000));
    uint64_t last_end[STREAMS + 8] = {0}, last_seq[STREAMS + 8] = {0};
    pto_completion c[64];
    int got = 0, n;
    while ((n = pto_cq_drain(dev, c, 64)) > 0) {
        for (int i = 0; i < n; i++) {
            uint32_t id = c[i].stream_id;
            t_assert(id < STREAMS + 8, "stream %u", id);
            t_assert(c[i].status == 0, "status %d", c[i].status);
            t_assert(c[i].seq > last_seq[id], "out of order");
            t_assert(c[i].start_ns >= last_end[id], "stream %u: a command starts before its predecessor ends", id);
            t_assert(c[i].end_ns >= c[i].start_ns && c[i].start_ns >= c[i].submit_ns, "times");
            last_end[id] = c[i].end_ns;
            last_seq[id] = c[i].seq;
            got++;
        }
    }
    t_assert(got == STREAMS * (LAUNCHES + LAUNCHES / 10), "%d records", got);
    uint64_t busy = 0, cmds = 0;
    for (int e = 0; e < 5; e++) {
        pto_engine_stats st;
        t_check(pto_engine_get_stats(dev, e, &st));
        busy += st.busy_ns;
        cmds += st.commands;
    }
    t_assert(cmds == STREAMS * LAUNCHES * BLOCKS && busy == cmds * 500, "cores: %llu blocks, %llu ns",
             (unsigned long long)cmds, (unsigned long long)busy);
    for (int i = 0; i < STREAMS; i++)
        pto_stream_destroy(s[i]);
    free(host);
    for (int i = 0; i < STREAMS; i++)
        t_check(pto_mem_free(dev, buf[i]));
    pto_device_close(dev);
}

/* The task-edge rule for one pair of accesses (pto_driver.h): its hazard, 0: none. */
static uint32_t pair_hazard(const pto_task_access *l, const pto_task_access *e)
{
    uint32_t hz = l->read && e->write ? PTO_TASK_RAW : l->write && e->write ? PTO_TASK_WAW
                : l->write && e->read ? PTO_TASK_WAR : 0;
    if (!hz || l->arg != e->arg)
        return 0;
    if (l->ndim == 0 || e->ndim == 0 || l->ndim != e->ndim)
        return hz;
    for (uint32_t k = 0; k < l->ndim; k++)
        if (!(l->lo[k] < e->hi[k] && e->lo[k] < l->hi[k]))
            return 0;
    return hz;
}

/*
 * prog_mixed without a table, recorded through a 16-slot window on 1 and 4
 * cores: the edges the driver resolved are the rule's, pair by pair, against
 * every instance of the window (back to the last that orders after
 * everything), with the window's edge, whatever the driver's index skipped.
 */
static void test_resolved_edges_follow_the_rule(void)
{
    enum { W = 16 };
    static pto_task_access acc[MIXED_N][8];
    static uint32_t nacc[MIXED_N], want[MIXED_N * W * 4], got[MIXED_N * W * 4], sites[MIXED_N];
    uint32_t nwant = 0, last_all = UINT32_MAX;
    for (uint32_t i = 0; i < MIXED_N; i++) {
        int64_t idx[1] = {i};
        nacc[i] = mixed_acc(idx, acc[i], 8);
        uint32_t rlo = i >= W ? i - W + 1 : 0;
        if (last_all != UINT32_MAX && last_all > rlo) {
            rlo = last_all;
        } else if (i >= W) {
            uint32_t *e = &want[4 * nwant++];
            e[0] = i - W, e[1] = i, e[2] = PTO_TASK_DECLARED, e[3] = UINT32_MAX;
        }
        for (uint32_t j = rlo; j < i; j++) {
            uint32_t hz = 0, arg = UINT32_MAX;
            if (nacc[i] > 8 || nacc[j] > 8) {
                hz = PTO_TASK_DECLARED, arg = UINT32_MAX;
            } else {
                for (uint32_t a = 0; a < nacc[i] && !hz; a++)
                    for (uint32_t b = 0; b < nacc[j] && !hz; b++)
                        if ((hz = pair_hazard(&acc[i][a], &acc[j][b])))
                            arg = acc[i][a].arg;
                if (!hz)
                    continue;
            }
            uint32_t *e = &want[4 * nwant++];
            e[0] = j, e[1] = i, e[2] = hz, e[3] = arg;
        }
        if (nacc[i] > 8)
            last_all = i;
    }
    uint32_t cores[] = {1, 4};
    for (int d = 0; d < 2; d++) {
        pto_device_config cfg;
        pto_device_config_init(&cfg);
        cfg.cores = cores[d];
        cfg.ring_task_window = W;
        pto_device *dev;
        t_check(pto_device_open("sim", &cfg, &dev));
        pto_program *p;
        t_check(pto_program_load(dev, lib, "prog_mixed", &p));
        t_check(pto_program_record_edges(p, 1));
        pto_devptr b[2];
        for (int k = 0; k < 2; k++)
            t_check(pto_mem_alloc(dev, 64, NULL, &b[k]));
        uint64_t args[2] = {b[0], b[1]};
        pto_stream *s;
        t_check(pto_stream_create(dev, 0, &s));
        t_check(pto_stream_run_program(s, p, args, 2, 7));
        t_check(pto_stream_synchronize(s, 20000000));
        uint32_t ntasks, nedges;
        t_check(pto_program_last_edges(p, sites, MIXED_N, got, MIXED_N * W, &ntasks, &nedges));
        t_assert(ntasks == MIXED_N, "%u tasks", ntasks);
        t_assert(nedges == nwant, "cores %u: %u edges, the rule gives %u", cores[d], nedges, nwant);
        for (uint32_t k = 0; k < nedges; k++)
            t_assert(!memcmp(&got[4 * k], &want[4 * k], 4 * sizeof(uint32_t)),
                     "edge %u: %u -> %u (%u, %u), the rule: %u -> %u (%u, %u)", k, got[4 * k], got[4 * k + 1],
                     got[4 * k + 2], got[4 * k + 3], want[4 * k], want[4 * k + 1], want[4 * k + 2], want[4 * k + 3]);
        pto_stream_destroy(s);
        pto_program_unload(p);
        pto_device_close(dev);
    }
}

int main(void)
{
    const char *dir = getenv("PTO_TEST_LIBDIR");
    if (!dir) {
        fprintf(stderr, "PTO_TEST_LIBDIR is not set (run through run.sh)\n");
        return T_EXIT_SKIP;
    }
    snprintf(lib, sizeof(lib), "%s/libprograms.so", dir);
    test_program_timeline("prog_tiles");
    test_program_timeline("prog_resolved");
    test_resolved_edges_follow_the_rule();
    test_streams_in_order();
    printf("model: ok\n");
    return T_EXIT_PASS;
}
