/*
 * Description: graph replay (pto_graph_*) under concurrency.
 *
 *   - several replays in flight: a two-stream graph (a fork and its join)
 *     with host-bound and device-bound inputs, replayed eight times behind a
 *     latch on a 4-slot ring (most of each replay waits in the overflow),
 *     each with fresh bindings; every replay's one record arrives, and every
 *     result is its own;
 *   - a failing node: an injected fault on the fork fails the replay with
 *     one record for the node (its tag, PTO_CQ_FIRST_FAILURE) and the
 *     replay's record (-PTO_EDEP naming that tag); the next replay runs;
 *   - replays racing stream closes: two threads, each with its own graph,
 *     replay in a loop while one destroys and recreates its fork stream
 *     with replays still queued on it;
 *   - refusals: a bad replay queues nothing;
 *   - ordered replays (pto_graph_replay_ordered): a replay after an eager
 *     write on another stream held by a latch waits for it on the device,
 *     its accesses are noted, and an edge from a closed stream declines;
 *   - behind a held head: a replay queued behind a latch on its stream
 *     kicks nothing (host_first off: no wake), and runs once it opens;
 *   - runs: a replay's launches on one stream go in as one run of slots;
 *     in a ring with part of its room free (a latch, eager launches, a
 *     small argument heap) the rest follows through the overflow, the heap
 *     wraps inside a run, an injected failure hits the run's first launch,
 *     and a kernel unloaded after its checks were remembered is refused;
 *   - programs (lib/programs.c, through $PTO_TEST_LIBDIR): a diamond program
 *     and a kernel launch, one node each, replayed four times in flight with
 *     fresh bindings (one record per replay: a program command is quiet
 *     too); a program whose task fails fails its replay, the cause its
 *     node's tag and the message the task's, and the next replay runs; an
 *     unloaded program is refused before anything is queued.
 */
#include <pthread.h>
#include <sched.h>

#include "helpers.h"
#include "internal.h" /* batched_replay: the stream's slot_locks, the kernel's refs */

#define N 256
#define REPLAYS 8

static uint64_t f_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* Drain records into log until `token` is among them; returns its index in log. */
static int wait_record(pto_device *dev, pto_completion *log, int *n_log, int cap, uint64_t token)
{
    for (;;) {
        for (int i = 0; i < *n_log; i++)
            if (log[i].token == token)
                return i;
        t_assert(*n_log < cap, "record log full");
        int rc = pto_cq_wait(dev, 10 * 1000 * 1000);
        t_assert(rc == 0, "no record for token %llu: %s", (unsigned long long)token, pto_status_name(rc));
        *n_log += t_check(pto_cq_drain(dev, &log[*n_log], (uint32_t)(cap - *n_log)));
    }
}

/*
 * slot 0: Y = 2*X + Y            (X host-bound: staged; Y device-bound)
 *         record e0
 * slot 1: wait e0; Z = 1*Y + Z   (Z host-bound: staged, read and written)
 *         record e1
 * slot 0: wait e1
 */
static pto_graph *build_fork_graph(pto_device *dev, pto_kernel *axpy, int *axpy2_cmd)
{
    pto_graph *g;
    t_check(pto_graph_create(dev, &g));
    int x = t_check(pto_graph_add_input(g, N * 4));
    int y = t_check(pto_graph_add_input(g, N * 4));
    int z = t_check(pto_graph_add_input(g, N * 4));
    uint64_t a1[4] = {f_bits(2.0f), 0, 0, N};
    int c = t_check(pto_graph_add_launch(g, 0, axpy, 2, a1, 4));
    t_check(pto_graph_patch(g, c, 1, x, PTO_GRAPH_READ));
    t_check(pto_graph_patch(g, c, 2, y, PTO_GRAPH_READ | PTO_GRAPH_WRITE));
    t_check(pto_graph_add_record(g, 0, 0));
    t_check(pto_graph_add_wait(g, 1, 0));
    uint64_t a2[4] = {f_bits(1.0f), 0, 0, N};
    c = t_check(pto_graph_add_launch(g, 1, axpy, 2, a2, 4));
    *axpy2_cmd = c;
    t_check(pto_graph_patch(g, c, 1, y, PTO_GRAPH_READ));
    t_check(pto_graph_patch(g, c, 2, z, PTO_GRAPH_READ | PTO_GRAPH_WRITE));
    t_check(pto_graph_add_record(g, 1, 1));
    t_check(pto_graph_add_wait(g, 0, 1));
    t_check(pto_graph_instantiate(g));
    t_assert(pto_graph_input_staged(g, 0) == 1 && pto_graph_input_staged(g, 2) == 1, "staging");
    pto_graph_info info;
    t_check(pto_graph_get_info(g, &info));
    t_assert(info.commands == 6 && info.streams == 2 && info.inputs == 3 && info.launches == 2,
             "info %u %u %u %u", info.commands, info.streams, info.inputs, info.launches);
    return g;
}

static void several_in_flight_and_a_failure(void)
{
    pto_device *dev = t_open_device(16u << 20, 4);
    pto_kernel *axpy;
    t_check(pto_kernel_builtin(dev, "axpy_f32", &axpy));
    pto_stream *s[2];
    for (int i = 0; i < 2; i++) {
        t_check(pto_stream_create(dev, 0, &s[i]));
        t_check(pto_stream_set_overflow(s[i], 1));
    }
    int axpy2;
    pto_graph *g = build_fork_graph(dev, axpy, &axpy2);
    pto_graph_info info;
    t_check(pto_graph_get_info(g, &info));
    uint64_t span = info.commands + 2;

    static float xh[REPLAYS][N], zh[REPLAYS][N], y0[REPLAYS][N];
    pto_devptr yd[REPLAYS], stage[3];
    uint64_t seed = 7;
    for (int i = 0; i < 3; i++)
        t_check(pto_mem_alloc(dev, N * 4, NULL, &stage[i]));
    for (int r = 0; r < REPLAYS; r++) {
        t_check(pto_mem_alloc(dev, N * 4, NULL, &yd[r]));
        for (int i = 0; i < N; i++) {
            xh[r][i] = (float)(t_rand(&seed) % 1000) / 100.0f;
            zh[r][i] = (float)(t_rand(&seed) % 1000) / 100.0f;
            y0[r][i] = (float)(t_rand(&seed) % 1000) / 100.0f;
        }
        memcpy(pto_mem_host_ptr(dev, yd[r]), y0[r], N * 4);
    }
    static float z0[REPLAYS][N];
    memcpy(z0, zh, sizeof(z0));

    /* Several replays in flight behind a latch: most commands wait in the overflow. */
    pto_latch *l;
    t_check(pto_latch_create(dev, 0, &l));
    t_check(pto_stream_latch_wait(s[0], l, 0));
    uint64_t tok[REPLAYS];
    uint64_t next = 1000;
    int queued = 0;
    for (int r = 0; r < REPLAYS; r++) {
        /* One staging buffer per input serves every replay: replays of a graph run in order. */
        uint64_t dev_ptrs[3] = {stage[0], yd[r], stage[2]};
        uint64_t host_ptrs[3] = {(uint64_t)(uintptr_t)xh[r], 0, (uint64_t)(uintptr_t)zh[r]};
        tok[r] = next;
        next += span;
        int rc = t_check(pto_graph_replay(g, s, 2, dev_ptrs, host_ptrs, 3, tok[r]));
        queued += rc == PTO_QUEUED;
    }
    t_assert(queued > 0, "a 4-slot ring behind a latch took %d replays whole", REPLAYS);
    t_assert(pto_cq_ready(dev) == 0, "records before the latch was released");
    pto_latch_release(l);
    static pto_completion log[256];
    int n_log = 0;
    for (int r = 0; r < REPLAYS; r++) {
        int k = wait_record(dev, log, &n_log, 256, tok[r]);
        t_assert(log[k].status == 0, "replay %d: %s %s", r, pto_status_name(log[k].status), log[k].message);
    }
    t_check(pto_device_synchronize(dev, 10 * 1000 * 1000));
    n_log += t_check(pto_cq_drain(dev, &log[n_log], (uint32_t)(256 - n_log)));
    t_assert(n_log == REPLAYS, "%d records for %d replays: one each", n_log, REPLAYS);
    for (int r = 0; r < REPLAYS; r++) {
        const float *y = pto_mem_host_ptr(dev, yd[r]);
        for (int i = 0; i < N; i++) {
            float want_y = 2.0f * xh[r][i] + y0[r][i];
            float want_z = want_y + z0[r][i];
            t_assert(y[i] == want_y && zh[r][i] == want_z, "replay %d [%d]: y %g (%g) z %g (%g)", r, i,
                     y[i], want_y, zh[r][i], want_z);
        }
    }

    /* A failing node: the fork's launch (the first command queued on slot 1 is its wait). */
    t_check(pto_debug_fail_next(s[1], PTO_EKERNEL, 2));
    uint64_t dev_ptrs[3] = {stage[0], yd[0], stage[2]};
    uint64_t host_ptrs[3] = {(uint64_t)(uintptr_t)xh[0], 0, (uint64_t)(uintptr_t)zh[0]};
    uint64_t bad = next;
    next += span;
    t_check(pto_graph_replay(g, s, 2, dev_ptrs, host_ptrs, 3, bad));
    n_log = 0;
    int k = wait_record(dev, log, &n_log, 256, bad);
    t_assert(log[k].status == -PTO_EDEP, "replay with a failing node: %s", pto_status_name(log[k].status));
    /* The wait on slot 1 is command 2 (tag bad + 1 + 2): the injection hit it first. */
    uint64_t tag = bad + 1 + 2;
    t_assert(log[k].cause_token == tag, "cause %llu, want the node's tag %llu",
             (unsigned long long)log[k].cause_token, (unsigned long long)tag);
    int own = -1;
    for (int i = 0; i < n_log; i++)
        if (log[i].token == tag)
            own = i;
    t_assert(own >= 0 && (log[own].flags & PTO_CQ_FIRST_FAILURE) && log[own].status == -PTO_EKERNEL,
             "the failing node's own record");
    t_check(pto_device_synchronize(dev, 10 * 1000 * 1000));
    n_log += t_check(pto_cq_drain(dev, &log[n_log], (uint32_t)(256 - n_log)));
    for (int i = 0; i < n_log; i++)
        t_assert(log[i].token == bad || log[i].token == tag || log[i].token == bad + 1 + 3 ||
                     log[i].token == bad + 1 + 4 || log[i].token == bad + 1 + 5,
                 "a stray record %llu", (unsigned long long)log[i].token);
    /*
     * Drained is not observed: delivering the replay's record observes the
     * origin's failure and, through the join it came by, the fork's.  The next
     * replay runs normally.
     */
    t_assert(pto_completion_observe(dev, &log[k]) == 1, "the replay's record observes its failure");
    t_assert(pto_completion_observe(dev, &log[own]) == 0, "the fork's failure was observed with it");
    uint64_t good = next;
    next += span;
    t_check(pto_graph_replay(g, s, 2, dev_ptrs, host_ptrs, 3, good));
    n_log = 0;
    k = wait_record(dev, log, &n_log, 256, good);
    t_assert(log[k].status == 0, "the replay after an observed failure: %s %s", pto_status_name(log[k].status),
             log[k].message);

    /* Refusals queue nothing. */
    uint64_t before0 = pto_stream_accepted(s[0]), before1 = pto_stream_accepted(s[1]);
    t_assert(pto_graph_replay(g, s, 1, dev_ptrs, host_ptrs, 3, next) == -PTO_EINVAL, "streams");
    t_assert(pto_graph_replay(g, s, 2, dev_ptrs, host_ptrs, 2, next) == -PTO_EINVAL, "inputs");
    uint64_t no_dev[3] = {stage[0], 0, stage[2]};
    t_assert(pto_graph_replay(g, s, 2, no_dev, host_ptrs, 3, next) == -PTO_EINVAL, "no device address");
    uint64_t outside[3] = {stage[0], 16, stage[2]};
    t_assert(pto_graph_replay(g, s, 2, outside, host_ptrs, 3, next) == -PTO_EINVAL, "outside the arena");
    t_assert(pto_graph_replay(g, s, 2, dev_ptrs, host_ptrs, 3, 0) == -PTO_EINVAL, "token 0");
    t_assert(pto_stream_accepted(s[0]) == before0 && pto_stream_accepted(s[1]) == before1, "queued");
    pto_graph *bad_g;
    t_check(pto_graph_create(dev, &bad_g));
    t_check(pto_graph_add_wait(bad_g, 0, 0));
    t_assert(pto_graph_instantiate(bad_g) == -PTO_EINVAL, "a wait before its record");
    t_assert(pto_graph_add_record(bad_g, 0, 0) >= 0, "still open after a failed instantiate");
    pto_graph_destroy(bad_g);

    t_check(pto_device_synchronize(dev, 10 * 1000 * 1000));
    pto_graph_destroy(g);
    for (int r = 0; r < REPLAYS; r++)
        t_check(pto_mem_free(dev, yd[r]));
    for (int i = 0; i < 3; i++)
        t_check(pto_mem_free(dev, stage[i]));
    pto_latch_destroy(l);
    pto_kernel_unload(axpy);
    pto_device_close(dev);
}

/* ---- replays racing stream closes ------------------------------------------------ */

struct racer {
    pto_device *dev;
    pto_kernel *add;
    int recreate;               /* destroy and recreate the fork stream every few replays */
    uint64_t token_base;
    int replays;
    int ok;
};

/* slot 0: c = a + b; record; slot 1: wait; c = c + a; record; slot 0: wait. */
static pto_graph *build_add_graph(pto_device *dev, pto_kernel *add)
{
    pto_graph *g;
    t_check(pto_graph_create(dev, &g));
    int a = t_check(pto_graph_add_input(g, N * 4));
    int b = t_check(pto_graph_add_input(g, N * 4));
    int c = t_check(pto_graph_add_input(g, N * 4));
    uint64_t args[4] = {0, 0, 0, N};
    int k = t_check(pto_graph_add_launch(g, 0, add, 1, args, 4));
    t_check(pto_graph_patch(g, k, 0, a, PTO_GRAPH_READ));
    t_check(pto_graph_patch(g, k, 1, b, PTO_GRAPH_READ));
    t_check(pto_graph_patch(g, k, 2, c, PTO_GRAPH_WRITE));
    t_check(pto_graph_add_record(g, 0, 0));
    t_check(pto_graph_add_wait(g, 1, 0));
    k = t_check(pto_graph_add_launch(g, 1, add, 1, args, 4));
    t_check(pto_graph_patch(g, k, 0, c, PTO_GRAPH_READ));
    t_check(pto_graph_patch(g, k, 1, a, PTO_GRAPH_READ));
    t_check(pto_graph_patch(g, k, 2, c, PTO_GRAPH_WRITE));
    t_check(pto_graph_add_record(g, 1, 1));
    t_check(pto_graph_add_wait(g, 0, 1));
    t_check(pto_graph_instantiate(g));
    return g;
}

static void *race(void *arg)
{
    struct racer *r = arg;
    pto_device *dev = r->dev;
    pto_graph *g = build_add_graph(dev, r->add);
    pto_stream *s[2];
    for (int i = 0; i < 2; i++) {
        t_check(pto_stream_create(dev, i, &s[i]));
        t_check(pto_stream_set_overflow(s[i], 1));
    }
    pto_devptr a, b, c;
    t_check(pto_mem_alloc(dev, N * 4, NULL, &a));
    t_check(pto_mem_alloc(dev, N * 4, NULL, &b));
    t_check(pto_mem_alloc(dev, N * 4, NULL, &c));
    float *ha = pto_mem_host_ptr(dev, a), *hb = pto_mem_host_ptr(dev, b);
    for (int i = 0; i < N; i++) {
        ha[i] = (float)i;
        hb[i] = (float)(2 * i);
    }
    uint64_t ptrs[3] = {a, b, c};
    pto_graph_info info;
    t_check(pto_graph_get_info(g, &info));
    uint64_t tok = r->token_base;
    for (int i = 0; i < r->replays; i++) {
        t_check(pto_graph_replay(g, s, 2, ptrs, NULL, 3, tok));
        tok += info.commands + 2;
        if (r->recreate && i % 5 == 4) {
            pto_stream_destroy(s[1]); /* replays still queued on it run; it is freed once drained */
            t_check(pto_stream_create(dev, 1, &s[1]));
            t_check(pto_stream_set_overflow(s[1], 1));
        }
    }
    t_check(pto_stream_synchronize(s[0], 20 * 1000 * 1000));
    const float *hc = pto_mem_host_ptr(dev, c);
    r->ok = 1;
    for (int i = 0; i < N; i++)
        if (hc[i] != 4.0f * (float)i)
            r->ok = 0;
    pto_stream_destroy(s[0]);
    pto_stream_destroy(s[1]);
    pto_graph_destroy(g);
    t_check(pto_device_synchronize(dev, 20 * 1000 * 1000));
    t_check(pto_mem_free(dev, a));
    t_check(pto_mem_free(dev, b));
    t_check(pto_mem_free(dev, c));
    return NULL;
}

static void replays_racing_stream_closes(void)
{
    pto_device *dev = t_open_device(16u << 20, 8);
    pto_kernel *add;
    t_check(pto_kernel_builtin(dev, "add_f32", &add));
    struct racer rs[2] = {{dev, add, 1, 1, 200, 0}, {dev, add, 0, 1ull << 40, 200, 0}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        t_assert(pthread_create(&th[i], NULL, race, &rs[i]) == 0, "pthread_create");
    /* Meanwhile: drain what comes (each replay's one record). */
    int records = 0;
    while (records < 400) {
        static pto_completion buf[64];
        t_assert(pto_cq_wait(dev, 20 * 1000 * 1000) == 0, "records stopped after %d", records);
        int n = t_check(pto_cq_drain(dev, buf, 64));
        for (int i = 0; i < n; i++)
            t_assert(buf[i].status == 0, "record %llu: %s %s", (unsigned long long)buf[i].token,
                     pto_status_name(buf[i].status), buf[i].message);
        records += n;
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        t_assert(rs[i].ok, "racer %d computed the wrong result", i);
    }
    t_assert(records == 400, "%d records for 400 replays", records);
    pto_kernel_unload(add);
    pto_device_close(dev);
}

/* ---- replays ordered by a hazard table ------------------------------------------ */

/*
 * c = 2a + b (build_add_graph) replayed on s0/s1 after an eager write of a on s2 held by a
 * latch: pto_graph_replay_ordered queues the edge (a poisoned until the write runs), then notes
 * the replay's accesses; with the writer's stream closed it declines, queuing nothing.
 */
static void ordered_replays(void)
{
    pto_device *dev = t_open_device(16u << 20, 4);
    pto_kernel *add;
    t_check(pto_kernel_builtin(dev, "add_f32", &add));
    pto_stream *s[3];
    pto_hazards *hz;
    t_check(pto_hazards_create(dev, &hz));
    for (int i = 0; i < 3; i++) {
        t_check(pto_stream_create(dev, 0, &s[i]));
        t_check(pto_stream_set_overflow(s[i], 1));
        t_check(pto_hazards_stream(hz, s[i]));
    }
    pto_graph *g = build_add_graph(dev, add);
    pto_graph_info info;
    t_check(pto_graph_get_info(g, &info));
    pto_devptr buf[3];
    static float ah[N], bh[N];
    uint64_t seed = 11;
    for (int i = 0; i < 3; i++)
        t_check(pto_mem_alloc(dev, N * 4, NULL, &buf[i]));
    for (int i = 0; i < N; i++) {
        ah[i] = (float)(t_rand(&seed) % 1000) / 100.0f;
        bh[i] = (float)(t_rand(&seed) % 1000) / 100.0f;
        ((float *)pto_mem_host_ptr(dev, buf[0]))[i] = -12345.0f; /* poisoned until the write */
    }
    memcpy(pto_mem_host_ptr(dev, buf[1]), bh, N * 4);

    pto_latch *l;
    t_check(pto_latch_create(dev, 0, &l));
    t_check(pto_stream_latch_wait(s[2], l, 0));
    t_check(pto_stream_copy_h2d(s[2], buf[0], ah, N * 4, 1)); /* the writer, held */
    pto_hz_access w = {buf[0], PTO_HZ_WRITE, 0};
    t_check(pto_hazards_note(hz, pto_stream_id(s[2]), &w, 1, 1));
    uint64_t counts[2], skipped = 99;
    uint64_t token = 100;
    t_check(pto_graph_replay_ordered(g, hz, s, 2, buf, NULL, 3, token, &skipped));
    pto_hazards_counts(hz, counts);
    t_assert(counts[0] == 1, "one edge queued (got %llu)", (unsigned long long)counts[0]);
    t_assert(skipped == 99, "skipped is written only on a decline");
    t_assert(pto_cq_ready(dev) == 0, "records before the latch was released");
    pto_latch_release(l);
    static pto_completion log[16];
    int n_log = 0;
    int at = wait_record(dev, log, &n_log, 16, token);
    t_assert(log[at].status == 0, "the replay: %s %s", pto_status_name(log[at].status), log[at].message);
    const float *c = pto_mem_host_ptr(dev, buf[2]);
    for (int i = 0; i < N; i++) {
        float want = (ah[i] + bh[i]) + ah[i]; /* as the graph adds */
        t_assert(c[i] == want, "c[%d] = %g, want %g: the replay ran before the write", i, c[i], want);
    }
    /* A write after the replay's read on another stream waits for it: the accesses were noted. */
    w.flags = PTO_HZ_WRITE;
    t_assert(t_check(pto_hazards_order(hz, pto_stream_id(s[2]), &w, 1, NULL, 0)) == 1,
             "a write of a on s2 waits for the replay's read");

    /* The writer's stream closed: the edge is the caller's; nothing queued. */
    t_check(pto_hazards_note(hz, pto_stream_id(s[2]), &w, 1, token + 10));
    pto_hazards_stream_closed(hz, pto_stream_id(s[2]), 0);
    uint64_t before = pto_stream_accepted(s[0]);
    int rc = pto_graph_replay_ordered(g, hz, s, 2, buf, NULL, 3, token + 20, &skipped);
    t_assert(rc == PTO_HZ_DECLINED, "declined (got %d)", rc);
    t_assert(pto_stream_accepted(s[0]) == before && skipped == 0, "nothing queued, nothing skipped");
    t_assert(pto_graph_replay_ordered(g, NULL, s, 2, buf, NULL, 3, token + 20, NULL) == -PTO_EINVAL,
             "a NULL table is refused");

    t_check(pto_stream_synchronize(s[2], 10000000));
    pto_hazards_destroy(hz);
    pto_latch_destroy(l);
    pto_graph_destroy(g);
    for (int i = 0; i < 3; i++) {
        t_check(pto_stream_synchronize(s[i], 10000000));
        pto_stream_destroy(s[i]);
        pto_mem_free(dev, buf[i]);
    }
    pto_kernel_unload(add);
    pto_device_close(dev);
}

/*
 * A replay's run of commands on one stream goes as one batch: submit_lock is
 * taken once for it, not per command (s->slot_locks), and the kernel
 * references its launches hold are taken in one go and all given back;
 * with host_first on and off (the one kick per stream then wakes the device
 * threads instead of running a pass on the submitting thread).  Either way
 * the replay notes the submitting thread's CPU (dev->host_cpu), which the
 * idle device threads' choice to spin reads (pti_cpu_spare_at): this thread
 * is pinned to one CPU for the replays, and that CPU is the one noted.
 */
static void batched_replay(bool host_first_off)
{
    pto_device_config cfg;
    pto_device *dev = NULL;
    pto_device_config_init(&cfg);
    cfg.cores = 2;
    cfg.copy_engines = 2;
    cfg.aicpu_thread_num = 2;
    cfg.device_memory = 16u << 20;
    cfg.ring_task_window = 4; /* a ring of a few slots: the batch goes through the overflow too */
    if (host_first_off)
        cfg.host_first = PTO_HOST_FIRST_OFF; /* the replay's kick wakes the device threads */
    t_check(pto_device_open("sim", &cfg, &dev));
    pto_kernel *fill, *add;
    t_check(pto_kernel_builtin(dev, "fill_f32", &fill));
    t_check(pto_kernel_builtin(dev, "add_f32", &add));
    pto_stream *s;
    t_check(pto_stream_create(dev, 0, &s));
    t_check(pto_stream_set_overflow(s, 1));
    pto_devptr a, one, c;
    t_check(pto_mem_alloc(dev, N * 4, NULL, &a));
    t_check(pto_mem_alloc(dev, N * 4, NULL, &one));
    t_check(pto_mem_alloc(dev, N * 4, NULL, &c));
    float *ah = pto_mem_host_ptr(dev, a), *ch = pto_mem_host_ptr(dev, c), *oh = pto_mem_host_ptr(dev, one);
    for (int i = 0; i < N; i++)
        oh[i] = 1.0f;
    enum { ADDS = 63 };
    pto_graph *g;
    t_check(pto_graph_create(dev, &g));
    int in = t_check(pto_graph_add_input(g, N * 4));
    uint64_t fargs[3] = {0, f_bits(0.5f), N};
    int k = t_check(pto_graph_add_launch(g, 0, fill, 1, fargs, 3));
    t_check(pto_graph_patch(g, k, 0, in, PTO_GRAPH_WRITE));
    for (int i = 0; i < ADDS; i++) {
        uint64_t args[4] = {0, one, 0, N};
        k = t_check(pto_graph_add_launch(g, 0, add, 1, args, 4));
        t_check(pto_graph_patch(g, k, 0, in, PTO_GRAPH_READ));
        t_check(pto_graph_patch(g, k, 2, in, PTO_GRAPH_WRITE));
    }
    k = t_check(pto_graph_add_copy(g, 0, PTO_CMD_D2D, c, 0, N * 4));
    t_check(pto_graph_patch(g, k, PTO_GRAPH_SRC, in, PTO_GRAPH_READ));
    t_check(pto_graph_instantiate(g));
    int refs = atomic_load(&add->refs);
    static pto_completion log[16];
    cpu_set_t was, one_cpu;
    t_assert(sched_getaffinity(0, sizeof(was), &was) == 0, "sched_getaffinity");
    int cpu = 0;
    while (!CPU_ISSET(cpu, &was))
        cpu++;
    CPU_ZERO(&one_cpu);
    CPU_SET(cpu, &one_cpu);
    t_assert(sched_setaffinity(0, sizeof(one_cpu), &one_cpu) == 0, "sched_setaffinity"); /* this thread only */
    t_assert(atomic_load(&dev->host_cpu) == -1, "a host CPU noted before any submission (%d)",
             atomic_load(&dev->host_cpu));
    for (int r = 0; r < 3; r++) {
        for (int i = 0; i < N; i++)
            ah[i] = ch[i] = -12345.0f; /* poisoned until the replay writes them */
        uint64_t locks = s->slot_locks, token = 1000 + 1000 * (uint64_t)r;
        t_check(pto_graph_replay(g, &s, 1, &a, NULL, 1, token));
        /* One batch: the fill, the adds, the copy, the done record, the notify. */
        t_assert(s->slot_locks - locks == 1, "replay %d took submit_lock %llu times for %d commands", r,
                 (unsigned long long)(s->slot_locks - locks), ADDS + 4);
        t_assert(atomic_load(&dev->host_cpu) == cpu, "replay %d: host CPU %d noted, the replay ran on %d", r,
                 atomic_load(&dev->host_cpu), cpu);
        int n_log = 0;
        int at = wait_record(dev, log, &n_log, 16, token);
        t_assert(log[at].status == 0, "replay %d: %s %s", r, pto_status_name(log[at].status), log[at].message);
        for (int i = 0; i < N; i++)
            t_assert(ah[i] == 0.5f + ADDS && ch[i] == ah[i], "replay %d: a[%d] = %g, c[%d] = %g, want %g", r, i,
                     ah[i], i, ch[i], 0.5f + ADDS);
    }
    t_assert(sched_setaffinity(0, sizeof(was), &was) == 0, "sched_setaffinity");
    t_check(pto_stream_synchronize(s, 10000000));
    t_assert(atomic_load(&add->refs) == refs, "add_f32's references: %d after the replays, %d before",
             atomic_load(&add->refs), refs);
    pto_graph_destroy(g);
    pto_stream_destroy(s);
    pto_mem_free(dev, a);
    pto_mem_free(dev, one);
    pto_mem_free(dev, c);
    pto_kernel_unload(fill);
    pto_kernel_unload(add);
    pto_device_close(dev);
}

/*
 * A replay queued behind work still in flight on its stream (here a latch
 * holding the head) kicks nothing (pti_stream_kick_deferred): the command
 * before it completes, and that completion's pass starts the replay, as for
 * an eager command queued on a busy stream.  With host_first off the kick
 * would wake the sleeping scheduler: the device's kick count does not move
 * across the replay, no record arrives before the release, and after it
 * the replay runs with its own result (the output poisoned before).
 */
static void replay_behind_held_head(void)
{
    pto_device_config cfg;
    pto_device *dev = NULL;
    pto_device_config_init(&cfg);
    cfg.cores = 2;
    cfg.copy_engines = 1;
    cfg.device_memory = 16u << 20;
    cfg.host_first = PTO_HOST_FIRST_OFF;
    t_check(pto_device_open("sim", &cfg, &dev));
    pto_kernel *fill;
    t_check(pto_kernel_builtin(dev, "fill_f32", &fill));
    pto_stream *s;
    t_check(pto_stream_create(dev, 0, &s));
    t_check(pto_stream_set_overflow(s, 1));
    pto_devptr a;
    t_check(pto_mem_alloc(dev, N * 4, NULL, &a));
    float *ah = pto_mem_host_ptr(dev, a);
    pto_graph *g;
    t_check(pto_graph_create(dev, &g));
    int in = t_check(pto_graph_add_input(g, N * 4));
    uint64_t fargs[3] = {0, f_bits(2.5f), N};
    int k = t_check(pto_graph_add_launch(g, 0, fill, 1, fargs, 3));
    t_check(pto_graph_patch(g, k, 0, in, PTO_GRAPH_WRITE));
    t_check(pto_graph_instantiate(g));
    static pto_completion log[8];
    for (int r = 0; r < 2; r++) {
        for (int i = 0; i < N; i++)
            ah[i] = -12345.0f; /* poisoned until the replay writes it */
        pto_latch *l;
        t_check(pto_latch_create(dev, 0, &l));
        t_check(pto_stream_latch_wait(s, l, 0));
        uint64_t kicks = atomic_load(&dev->kick), token = 5000 + 100 * (uint64_t)r;
        t_check(pto_graph_replay(g, &s, 1, &a, NULL, 1, token));
        t_assert(atomic_load(&dev->kick) == kicks, "replay %d behind a held head kicked (%llu -> %llu)", r,
                 (unsigned long long)kicks, (unsigned long long)atomic_load(&dev->kick));
        t_assert(pto_cq_ready(dev) == 0, "replay %d: a record before the latch was released", r);
        pto_latch_release(l);
        int n_log = 0;
        int at = wait_record(dev, log, &n_log, 8, token);
        t_assert(log[at].status == 0, "replay %d: %s %s", r, pto_status_name(log[at].status), log[at].message);
        for (int i = 0; i < N; i++)
            t_assert(ah[i] == 2.5f, "replay %d: a[%d] = %g, want 2.5", r, i, ah[i]);
        t_check(pto_stream_synchronize(s, 10000000));
        pto_latch_destroy(l);
    }
    pto_graph_destroy(g);
    pto_stream_destroy(s);
    pto_mem_free(dev, a);
    pto_kernel_unload(fill);
    pto_device_close(dev);
}

/* ---- a run of launches in a ring with part of its room free -------------------------- */

/*
 * A replay's launches on one stream go in as one run of slots (graph.c,
 * queue_launch_run): the room is read once, and what does not fit (slots or
 * argument heap bytes) goes one at a time behind the run, through the
 * overflow.  A 16-slot ring with a 200-byte heap, a latch and three eager
 * launches in it: the first replay's run stops short of the heap, the
 * second replay finds commands waiting in the overflow and goes one at a
 * time, a third (the ring drained, the heap mid-way) wraps the heap inside
 * its run; an injected failure hits the run's first launch.  Every result
 * is its own, each replay accepts exactly its commands, and the kernel
 * references return.
 */
static void runs_in_a_partly_free_ring(void)
{
    enum { ADDS = 20, R = 3 };
    pto_device_config cfg;
    pto_device *dev = NULL;
    pto_device_config_init(&cfg);
    cfg.cores = 2;
    cfg.copy_engines = 2;
    cfg.aicpu_thread_num = 2;
    cfg.device_memory = 16u << 20;
    cfg.ring_task_window = 16;
    cfg.ring_heap = 200; /* six adds' arguments (32 bytes each) */
    t_check(pto_device_open("sim", &cfg, &dev));
    pto_kernel *fill, *add;
    t_check(pto_kernel_builtin(dev, "fill_f32", &fill));
    t_check(pto_kernel_builtin(dev, "add_f32", &add));
    pto_stream *s;
    t_check(pto_stream_create(dev, 0, &s));
    t_check(pto_stream_set_overflow(s, 1));
    pto_devptr a[R], one, e;
    for (int r = 0; r < R; r++)
        t_check(pto_mem_alloc(dev, N * 4, NULL, &a[r]));
    t_check(pto_mem_alloc(dev, N * 4, NULL, &one));
    t_check(pto_mem_alloc(dev, N * 4, NULL, &e));
    float *oh = pto_mem_host_ptr(dev, one), *eh = pto_mem_host_ptr(dev, e);
    uint64_t seed = 23;
    float base = (float)(t_rand(&seed) % 100) / 4.0f;
    for (int i = 0; i < N; i++) {
        oh[i] = 1.0f;
        eh[i] = base;
    }
    pto_graph *g;
    t_check(pto_graph_create(dev, &g));
    int in = t_check(pto_graph_add_input(g, N * 4));
    float start = (float)(t_rand(&seed) % 100) / 8.0f;
    uint64_t fargs[3] = {0, f_bits(start), N};
    int k = t_check(pto_graph_add_launch(g, 0, fill, 1, fargs, 3));
    t_check(pto_graph_patch(g, k, 0, in, PTO_GRAPH_WRITE));
    for (int i = 0; i < ADDS; i++) {
        uint64_t args[4] = {0, one, 0, N};
        k = t_check(pto_graph_add_launch(g, 0, add, 1, args, 4));
        t_check(pto_graph_patch(g, k, 0, in, PTO_GRAPH_READ));
        t_check(pto_graph_patch(g, k, 2, in, PTO_GRAPH_WRITE));
    }
    t_check(pto_graph_instantiate(g));
    uint64_t span = ADDS + 1 + 2; /* its commands, the done record, the notify */
    int refs = atomic_load(&add->refs);
    for (int r = 0; r < R; r++) {
        float *ah = pto_mem_host_ptr(dev, a[r]);
        for (int i = 0; i < N; i++)
            ah[i] = -12345.0f; /* poisoned until the replay writes it */
    }

    pto_latch *l;
    t_check(pto_latch_create(dev, 0, &l));
    t_check(pto_stream_latch_wait(s, l, 0));
    for (int i = 0; i < 3; i++) /* 96 heap bytes and three slots taken */
        t_check(pto_stream_launch(s, add, 1, (uint64_t[4]){e, one, e, N}, 4, 0));
    uint64_t accepted = pto_stream_accepted(s), tok[R], next = 3000;
    for (int r = 0; r < 2; r++) {
        tok[r] = next;
        next += span + 1;
        int rc = t_check(pto_graph_replay(g, &s, 1, &a[r], NULL, 1, tok[r]));
        t_assert(rc == PTO_QUEUED, "replay %d behind a latch went in whole (rc %d)", r, rc);
        t_assert(pto_stream_accepted(s) - accepted == span, "replay %d accepted %llu commands, want %llu", r,
                 (unsigned long long)(pto_stream_accepted(s) - accepted), (unsigned long long)span);
        accepted = pto_stream_accepted(s);
    }
    t_assert(pto_cq_ready(dev) == 0, "records before the latch was released");
    pto_latch_release(l);
    static pto_completion log[64];
    int n_log = 0;
    for (int r = 0; r < 2; r++) {
        int at = wait_record(dev, log, &n_log, 64, tok[r]);
        t_assert(log[at].status == 0, "replay %d: %s %s", r, pto_status_name(log[at].status), log[at].message);
    }
    t_check(pto_stream_synchronize(s, 10000000));
    /* The ring drained, its heap mid-way: the third replay's run wraps the heap, then waits for room. */
    tok[2] = next;
    next += span + 1;
    t_check(pto_graph_replay(g, &s, 1, &a[2], NULL, 1, tok[2]));
    int at = wait_record(dev, log, &n_log, 64, tok[2]);
    t_assert(log[at].status == 0, "replay 2: %s %s", pto_status_name(log[at].status), log[at].message);
    for (int r = 0; r < R; r++) {
        const float *ah = pto_mem_host_ptr(dev, a[r]);
        for (int i = 0; i < N; i++)
            t_assert(ah[i] == start + ADDS, "replay %d: a[%d] = %g, want %g", r, i, ah[i], start + ADDS);
    }
    for (int i = 0; i < N; i++)
        t_assert(eh[i] == base + 3, "eager e[%d] = %g, want %g", i, eh[i], base + 3);

    /* An injected failure hits the run's first launch (the fill, command 0): the replay's cause. */
    t_check(pto_debug_fail_next(s, PTO_EKERNEL, 1));
    uint64_t bad = next;
    next += span + 1;
    t_check(pto_graph_replay(g, &s, 1, &a[0], NULL, 1, bad));
    at = wait_record(dev, log, &n_log, 64, bad);
    t_assert(log[at].status == -PTO_EDEP && log[at].cause_token == bad + 1,
             "replay with an injected failure: %s, cause %llu, want %llu", pto_status_name(log[at].status),
             (unsigned long long)log[at].cause_token, (unsigned long long)(bad + 1));
    t_assert(pto_completion_observe(dev, &log[at]) == 1, "the replay's record observes its failure");
    uint64_t good = next;
    t_check(pto_graph_replay(g, &s, 1, &a[1], NULL, 1, good));
    at = wait_record(dev, log, &n_log, 64, good);
    t_assert(log[at].status == 0, "the replay after the failure: %s %s", pto_status_name(log[at].status),
             log[at].message);

    t_check(pto_stream_synchronize(s, 10000000));
    t_assert(atomic_load(&add->refs) == refs, "add_f32's references: %d after the replays, %d before",
             atomic_load(&add->refs), refs);
    /* The launches' checks are remembered (the same binding), but an unloaded kernel is refused. */
    pto_kernel_unload(add);
    accepted = pto_stream_accepted(s);
    t_assert(pto_graph_replay(g, &s, 1, &a[1], NULL, 1, next + span + 1) == -PTO_EINVAL,
             "a replay of an unloaded kernel");
    t_assert(pto_stream_accepted(s) == accepted, "a refused replay queued commands");
    pto_graph_destroy(g);
    pto_latch_destroy(l);
    pto_stream_destroy(s);
    for (int r = 0; r < R; r++)
        pto_mem_free(dev, a[r]);
    pto_mem_free(dev, one);
    pto_mem_free(dev, e);
    pto_kernel_unload(fill);
    pto_device_close(dev);
}

/* ---- programs ------------------------------------------------------------------ */

#define PN 64 /* lib/programs.c's tensors: 64 floats */

static pto_program *load_program(pto_device *dev, const char *symbol)
{
    char lib[4096];
    snprintf(lib, sizeof(lib), "%s/libprograms.so", getenv("PTO_TEST_LIBDIR"));
    pto_program *p;
    t_check(pto_program_load(dev, lib, symbol, &p));
    return p;
}

/* The wait_record log's records, drained until the device is idle; returns how many there are. */
static int drain_all(pto_device *dev, pto_completion *log, int n_log, int cap)
{
    t_check(pto_device_synchronize(dev, 10 * 1000 * 1000));
    return n_log + t_check(pto_cq_drain(dev, &log[n_log], (uint32_t)(cap - n_log)));
}

static void programs_in_a_graph(void)
{
    if (!getenv("PTO_TEST_LIBDIR")) {
        printf("graph: programs skipped (PTO_TEST_LIBDIR is not set: run through run.sh)\n");
        return;
    }
    pto_device *dev = t_open_device(16u << 20, 16);
    pto_program *diamond = load_program(dev, "prog_diamond"), *failing = load_program(dev, "prog_failing");
    pto_kernel *add;
    t_check(pto_kernel_builtin(dev, "add_f32", &add));
    pto_stream *s[2];
    for (int i = 0; i < 2; i++) {
        t_check(pto_stream_create(dev, 0, &s[i]));
        t_check(pto_stream_set_overflow(s[i], 1));
    }
    /* diamond(x, s, l, r, out): out = 2 (x + 1) + 3 (x + 1); then y = out + x.  s, l, r: static. */
    pto_devptr mid[3];
    for (int i = 0; i < 3; i++)
        t_check(pto_mem_alloc(dev, PN * 4, NULL, &mid[i]));
    pto_graph *g;
    t_check(pto_graph_create(dev, &g));
    int x = t_check(pto_graph_add_input(g, PN * 4));
    int out = t_check(pto_graph_add_input(g, PN * 4));
    int y = t_check(pto_graph_add_input(g, PN * 4));
    uint64_t dargs[5] = {0, mid[0], mid[1], mid[2], 0};
    t_assert(pto_graph_add_program(g, 0, diamond, dargs, 4) == -PTO_EINVAL, "a wrong argument count");
    t_assert(pto_graph_add_program(g, 0, NULL, dargs, 5) == -PTO_EINVAL, "a NULL program");
    int c = t_check(pto_graph_add_program(g, 0, diamond, dargs, 5));
    t_assert(pto_graph_patch(g, c, 5, x, PTO_GRAPH_READ) == -PTO_EINVAL, "a field past the arguments");
    t_check(pto_graph_patch(g, c, 0, x, PTO_GRAPH_READ));
    t_check(pto_graph_patch(g, c, 4, out, PTO_GRAPH_WRITE));
    uint64_t aargs[4] = {0, 0, 0, PN};
    c = t_check(pto_graph_add_launch(g, 0, add, 1, aargs, 4));
    t_check(pto_graph_patch(g, c, 0, out, PTO_GRAPH_READ));
    t_check(pto_graph_patch(g, c, 1, x, PTO_GRAPH_READ));
    t_check(pto_graph_patch(g, c, 2, y, PTO_GRAPH_WRITE));
    t_check(pto_graph_instantiate(g));
    pto_graph_info info;
    t_check(pto_graph_get_info(g, &info));
    t_assert(info.commands == 2 && info.launches == 2, "info %u commands %u launches", info.commands,
             info.launches);
    uint64_t span = info.commands + 2;

    /* Four replays in flight, each with its own buffers: one record each, every result its own. */
    enum { R = 4 };
    pto_devptr b[R][3];
    uint64_t seed = 11, tok[R], next = 5000;
    for (int r = 0; r < R; r++) {
        for (int i = 0; i < 3; i++)
            t_check(pto_mem_alloc(dev, PN * 4, NULL, &b[r][i]));
        float *hx = pto_mem_host_ptr(dev, b[r][0]), *hy = pto_mem_host_ptr(dev, b[r][2]);
        for (int i = 0; i < PN; i++) {
            hx[i] = (float)(t_rand(&seed) % 1000) / 100.0f;
            hy[i] = -12345.0f;
        }
        tok[r] = next;
        next += span;
        t_check(pto_graph_replay(g, s, 1, (uint64_t[3]){b[r][0], b[r][1], b[r][2]}, NULL, 3, tok[r]));
    }
    static pto_completion log[64];
    int n_log = 0;
    for (int r = 0; r < R; r++) {
        int k = wait_record(dev, log, &n_log, 64, tok[r]);
        t_assert(log[k].status == 0, "replay %d: %s %s", r, pto_status_name(log[k].status), log[k].message);
    }
    n_log = drain_all(dev, log, n_log, 64);
    t_assert(n_log == R, "%d records for %d replays: one each", n_log, R);
    for (int r = 0; r < R; r++) {
        const float *hx = pto_mem_host_ptr(dev, b[r][0]), *hy = pto_mem_host_ptr(dev, b[r][2]);
        for (int i = 0; i < PN; i++) {
            float sum = hx[i] + 1.0f, want = (sum * 2.0f + sum * 3.0f) + hx[i]; /* as the tasks compute it */
            t_assert(hy[i] == want, "replay %d [%d]: %g, want %g", r, i, hy[i], want);
        }
    }

    /* failing(out): task bad fails, after (its dependent) does not run, beside does; then add. */
    pto_graph *fg;
    t_check(pto_graph_create(dev, &fg));
    int fo = t_check(pto_graph_add_input(fg, PN * 4));
    c = t_check(pto_graph_add_program(fg, 0, failing, (uint64_t[1]){0}, 1));
    t_check(pto_graph_patch(fg, c, 0, fo, PTO_GRAPH_WRITE));
    c = t_check(pto_graph_add_launch(fg, 0, add, 1, aargs, 4));
    t_check(pto_graph_patch(fg, c, 0, fo, PTO_GRAPH_READ));
    t_check(pto_graph_patch(fg, c, 1, fo, PTO_GRAPH_READ));
    t_check(pto_graph_patch(fg, c, 2, fo, PTO_GRAPH_WRITE));
    t_check(pto_graph_instantiate(fg));
    float *hf = pto_mem_host_ptr(dev, b[0][1]);
    for (int i = 0; i < PN; i++)
        hf[i] = 0.0f;
    uint64_t bad = next;
    next += span;
    t_check(pto_graph_replay(fg, s, 1, (uint64_t[1]){b[0][1]}, NULL, 1, bad));
    n_log = 0;
    int k = wait_record(dev, log, &n_log, 64, bad);
    t_assert(log[k].status == -PTO_EDEP && log[k].cause_token == bad + 1, "replay with a failing task: %s, "
             "cause %llu", pto_status_name(log[k].status), (unsigned long long)log[k].cause_token);
    n_log = drain_all(dev, log, n_log, 64);
    int own = -1;
    for (int i = 0; i < n_log; i++) {
        t_assert(log[i].token == bad || log[i].token == bad + 1, "a stray record %llu",
                 (unsigned long long)log[i].token);
        if (log[i].token == bad + 1)
            own = i;
    }
    t_assert(own >= 0 && (log[own].flags & PTO_CQ_FIRST_FAILURE) && log[own].status == -PTO_EKERNEL &&
                 strstr(log[own].message, "task bad: bad input"),
             "the program node's own record: %s", own >= 0 ? log[own].message : "none");
    t_assert(hf[0] == 0.0f && hf[1] == 1.0f && hf[2] == 0.0f, "after ran or beside did not, or add ran: "
             "%g %g %g", hf[0], hf[1], hf[2]);
    /* Delivering the replay's record observes the failure: the next replay runs. */
    t_assert(pto_completion_observe(dev, &log[k]) == 1, "the replay's record observes its failure");
    uint64_t good = next;
    next += span;
    t_check(pto_graph_replay(g, s, 1, (uint64_t[3]){b[1][0], b[1][1], b[1][2]}, NULL, 3, good));
    n_log = 0;
    k = wait_record(dev, log, &n_log, 64, good);
    t_assert(log[k].status == 0, "the replay after an observed failure: %s %s", pto_status_name(log[k].status),
             log[k].message);

    /* An unloaded program: refused before anything is queued (the graph's reference keeps it). */
    pto_program_unload(diamond);
    uint64_t before = pto_stream_accepted(s[0]);
    t_assert(pto_graph_replay(g, s, 1, (uint64_t[3]){b[1][0], b[1][1], b[1][2]}, NULL, 3, next) == -PTO_EINVAL,
             "a replay of an unloaded program");
    t_assert(strstr(pto_last_error(), "pto_graph_replay: command 0: program prog_diamond was unloaded"),
             "checked before queuing: %s", pto_last_error());
    t_assert(pto_stream_accepted(s[0]) == before, "queued");
    pto_graph *ug;
    t_check(pto_graph_create(dev, &ug));
    t_assert(pto_graph_add_program(ug, 0, diamond, dargs, 5) == -PTO_EINVAL, "adding an unloaded program");
    pto_graph_destroy(ug);

    t_check(pto_device_synchronize(dev, 10 * 1000 * 1000));
    pto_graph_destroy(g); /* the last reference to the diamond */
    pto_graph_destroy(fg);
    for (int r = 0; r < R; r++)
        for (int i = 0; i < 3; i++)
            t_check(pto_mem_free(dev, b[r][i]));
    for (int i = 0; i < 3; i++)
        t_check(pto_mem_free(dev, mid[i]));
    for (int i = 0; i < 2; i++)
        pto_stream_destroy(s[i]);
    pto_program_unload(failing);
    pto_kernel_unload(add);
    pto_device_close(dev);
}

int main(void)
{
    several_in_flight_and_a_failure();
    replays_racing_stream_closes();
    ordered_replays();
    batched_replay(false);
    batched_replay(true);
    replay_behind_held_head();
    runs_in_a_partly_free_ring();
    programs_in_a_graph();
    return T_EXIT_PASS;
}
