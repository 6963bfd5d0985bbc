/*
 * Description: multi-stream stress of the sim driver.  Several host threads
 * each own a stream and, for a few seconds, submit random groups of work:
 * h2d -> d2d -> d2h copies of random bytes (checksums verified), memsets,
 * add_f32 / axpy_f32 launches (results verified), spin launches, delays,
 * events recorded on one thread's stream and waited on by another's, device
 * allocations freed stream-ordered, latches released at random points, and
 * fail_next injections.  A drainer thread drains the completion queue through
 * the eventfd with random batch sizes; the thread that waits for a group
 * observes its failures (pto_completion_observe), as a host delivering them.  Every command carries a token, and
 * every token must complete exactly once with a status its group allows.
 * The device is closed at the end with a last round of latched work queued.
 *
 * Usage: stress [seconds]   (default 3, or $PTO_STRESS_SECONDS)
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "helpers.h"

#define NTHREADS 4
#define MAX_TOKENS (1u << 20)
#define MAX_BYTES (96u << 10)
#define WAIT_NS (30ull * 1000000000ull)   /* a group that takes longer has hung */

static pto_device *dev;
static pto_event *events[NTHREADS];
static pto_kernel *k_add, *k_axpy, *k_spin, *k_fail, *k_noop;

static _Atomic uint64_t next_token = 1;
static _Atomic uint8_t done_count[MAX_TOKENS];  /* records seen per token */
static int32_t done_status[MAX_TOKENS];         /* written before done_count is released */
static uint64_t done_cause[MAX_TOKENS];
static uint32_t done_stream[MAX_TOKENS], done_fail[MAX_TOKENS];  /* for pto_completion_observe */
static _Atomic uint8_t issued[MAX_TOKENS];
static atomic_bool stop_drainer;
static atomic_bool failed;
static _Atomic uint64_t n_records, n_groups_ok, n_groups_failed, n_eagain, n_verified;

#define FAIL(...)                                                                     \
    do {                                                                              \
        t_fail(__VA_ARGS__);                                                          \
        atomic_store(&failed, true);                                                  \
    } while (0)

/* ---- the drainer ------------------------------------------------------------- */

static void drain_once(uint64_t *rng)
{
    pto_completion recs[32];
    uint32_t max = (uint32_t)t_rand_range(rng, 1, 32);
    int n = pto_cq_drain(dev, recs, max);
    if (n < 0) {
        FAIL("pto_cq_drain: %s", pto_status_name(n));
        return;
    }
    for (int i = 0; i < n; i++) {
        uint64_t t = recs[i].token;
        if (t == 0 || t >= MAX_TOKENS || !atomic_load(&issued[t])) {
            FAIL("record for a token never issued: %llu", (unsigned long long)t);
            continue;
        }
        done_status[t] = recs[i].status;
        done_cause[t] = recs[i].cause_token;
        done_stream[t] = recs[i].stream_id;
        done_fail[t] = recs[i].fail_id;
        if (atomic_fetch_add_explicit(&done_count[t], 1, memory_order_release) != 0)
            FAIL("token %llu completed twice", (unsigned long long)t);
        atomic_fetch_add(&n_records, 1);
    }
    if ((uint32_t)n == max && pto_cq_ready(dev) > 0 && !t_readable(pto_cq_fd(dev), 0))
        FAIL("records left after a partial drain but the fd is not readable");
}

static void *drainer(void *arg)
{
    uint64_t rng = 0x9e3779b97f4a7c15ULL;
    int fd = pto_cq_fd(dev);
    (void)arg;
    while (!atomic_load(&stop_drainer)) {
        if (t_readable(fd, 50))
            drain_once(&rng);
    }
    while (pto_cq_ready(dev) > 0)
        drain_once(&rng);
    return NULL;
}

/* ---- submitters ----------------------------------------------------------------- */

struct worker {
    int idx;
    pto_stream *s;
    uint64_t rng;
    double seconds;
    pto_latch *latch;             /* held latch, or NULL */
    uint64_t group[64];           /* tokens of the current group */
    int ngroup;
    bool may_fail;                /* an injected failure or a cross-stream wait is in this group */
    unsigned char *src, *dst;
    float *fa, *fb, *fo;
};

static uint64_t issue(struct worker *w)
{
    uint64_t t = atomic_fetch_add(&next_token, 1);
    if (t >= MAX_TOKENS || w->ngroup == (int)(sizeof(w->group) / sizeof(w->group[0])))
        return 0;   /* no record for this command */
    atomic_store(&issued[t], 1);
    w->group[w->ngroup++] = t;
    return t;
}

/* The command for token t was never queued: forget the token. */
static void retire(struct worker *w, uint64_t t)
{
    if (t && w->ngroup && w->group[w->ngroup - 1] == t) {
        w->ngroup--;
        atomic_store(&issued[t], 0);
    }
}

static void release_latch(struct worker *w)
{
    if (w->latch) {
        pto_latch_release(w->latch);
        pto_latch_destroy(w->latch);
        w->latch = NULL;
    }
}

/*
 * Submit fn(args..., token) with a fresh token, retrying on -PTO_EAGAIN (ring,
 * heap or dep pool full).  A full ring behind our own latch would never
 * drain, so release it first.  A token whose command was refused is retired.
 */
#define SUBMIT(w, fn, ...)                                                            \
    ({                                                                                \
        int rc_;                                                                      \
        uint64_t tok_ = issue(w);                                                     \
        uint64_t until_ = t_now_ns() + WAIT_NS;                                       \
        while ((rc_ = fn(__VA_ARGS__, tok_)) == -PTO_EAGAIN) {                        \
            atomic_fetch_add(&n_eagain, 1);                                           \
            release_latch(w);                                                         \
            if (t_now_ns() > until_) {                                                \
                FAIL("stream %d never got room", (w)->idx);                           \
                break;                                                                \
            }                                                                         \
            sched_yield();                                                            \
        }                                                                             \
        if (rc_ < 0) {                                                                \
            if (rc_ != -PTO_EAGAIN)                                                   \
                FAIL("%s = %s (%s)", #fn, pto_status_name(rc_), pto_last_error());     \
            retire(w, tok_);                                                          \
        }                                                                             \
        rc_;                                                                          \
    })

/* Wait for every token of the group; return true if every one succeeded. */
static bool wait_group(struct worker *w)
{
    bool ok = true;
    release_latch(w);
    for (int i = 0; i < w->ngroup; i++) {
        uint64_t t = w->group[i];
        uint64_t until = t_now_ns() + WAIT_NS;
        while (atomic_load_explicit(&done_count[t], memory_order_acquire) == 0) {
            if (t_now_ns() > until) {
                FAIL("stream %d: token %llu never completed", w->idx, (unsigned long long)t);
                return false;
            }
            t_pause_us(20);
        }
        int32_t st = done_status[t];
        if (st == 0)
            continue;
        ok = false;
        /* The group's owner saw the failure: delivered, so the stream runs new work again. */
        pto_completion c = {.token = t, .status = st, .stream_id = done_stream[t], .fail_id = done_fail[t]};
        if (pto_completion_observe(dev, &c) < 0)
            FAIL("pto_completion_observe: %s", pto_last_error());
        switch (-st) {
        case PTO_EFAULT:
        case PTO_EKERNEL:
        case PTO_EDEP:
        case PTO_ETIMEDOUT:
            if (!w->may_fail)
                FAIL("stream %d: token %llu failed (%s) in a group that could not fail", w->idx,
                     (unsigned long long)t, pto_status_name(st));
            if (-st == PTO_EDEP && done_cause[t] == 0)
                FAIL("token %llu: EDEP without a cause token", (unsigned long long)t);
            break;
        default:
            FAIL("stream %d: token %llu completed with %s", w->idx, (unsigned long long)t,
                 pto_status_name(st));
        }
    }
    return ok;
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* One group: allocate, copy or compute, verify, free stream-ordered. */
static void run_group(struct worker *w)
{
    pto_devptr a = 0, b = 0, c = 0;
    uint64_t n = t_rand_range(&w->rng, 1, MAX_BYTES);
    uint64_t nf = n / 4 ? n / 4 : 1;
    int kind = (int)t_rand_range(&w->rng, 0, 10);
    uint64_t sum = 0;
    float alpha = 0.5f + (float)t_rand_range(&w->rng, 0, 8);

    w->ngroup = 0;
    w->may_fail = false;
    if (t_rand_range(&w->rng, 0, 3) == 0) {   /* hold the stream while we queue */
        t_check(pto_latch_create(dev, 20000000, &w->latch));
        uint64_t t = issue(w);
        int rc = pto_stream_latch_wait(w->s, w->latch, t);
        if (rc < 0) {         /* ring full: go without the latch */
            if (rc != -PTO_EAGAIN)
                FAIL("pto_stream_latch_wait: %s", pto_status_name(rc));
            retire(w, t);
            release_latch(w);
        }
    }
    if (t_rand_range(&w->rng, 0, 3) == 0) {   /* order behind another thread's stream */
        int other = (int)t_rand_range(&w->rng, 0, NTHREADS - 1);
        if (other != w->idx) {
            w->may_fail = true;   /* the other stream's failures propagate through the event */
            SUBMIT(w, pto_stream_wait_event, w->s, events[other]);
        }
    }
    if (pto_mem_alloc(dev, n, w->s, &a) < 0 || pto_mem_alloc(dev, n, w->s, &b) < 0 ||
        pto_mem_alloc(dev, n, w->s, &c) < 0) {
        /* Memory pressure from the other threads: a legal outcome, try later. */
        goto free;
    }
    if (t_rand_range(&w->rng, 0, 15) == 0) {
        w->may_fail = true;
        t_check(pto_debug_fail_next(w->s, 0, (uint32_t)t_rand_range(&w->rng, 1, 2)));
    }
    if (t_rand_range(&w->rng, 0, 7) == 0)
        release_latch(w);     /* early, while commands are being queued */

    if (kind < 5) {           /* copies: h2d -> d2d -> d2h, maybe a memset in the middle */
        t_fill_random(&w->rng, w->src, n);
        sum = t_checksum(w->src, n);
        memset(w->dst, 0xEE, n);
        SUBMIT(w, pto_stream_copy_h2d, w->s, a, w->src, n);
        SUBMIT(w, pto_stream_copy_d2d, w->s, b, a, n);
        if (kind == 0)
            SUBMIT(w, pto_stream_memset, w->s, a, 0x00, n);
        SUBMIT(w, pto_stream_copy_d2h, w->s, w->dst, b, n);
    } else if (kind < 8) {    /* add_f32 or axpy_f32 on random floats */
        for (uint64_t i = 0; i < nf; i++) {
            w->fa[i] = (float)(t_rand(&w->rng) % 2001) / 100.0f - 10.0f;
            w->fb[i] = (float)(t_rand(&w->rng) % 2001) / 100.0f - 10.0f;
            w->fo[i] = NAN;
        }
        uint32_t blocks = (uint32_t)t_rand_range(&w->rng, 1, 6);
        SUBMIT(w, pto_stream_copy_h2d, w->s, a, w->fa, nf * 4);
        SUBMIT(w, pto_stream_copy_h2d, w->s, b, w->fb, nf * 4);
        if (kind == 5) {
            uint64_t args[4] = {a, b, c, nf};
            SUBMIT(w, pto_stream_launch, w->s, k_add, blocks, args, 4);
            SUBMIT(w, pto_stream_copy_d2h, w->s, w->fo, c, nf * 4);
        } else {
            uint64_t args[4] = {f32_bits(alpha), a, b, nf};
            SUBMIT(w, pto_stream_launch, w->s, k_axpy, blocks, args, 4);
            SUBMIT(w, pto_stream_copy_d2h, w->s, w->fo, b, nf * 4);
        }
    } else if (kind == 8) {   /* spin on the cores, then a short delay */
        uint64_t args[1] = {t_rand_range(&w->rng, 1, 50)};
        SUBMIT(w, pto_stream_launch, w->s, k_spin, (uint32_t)t_rand_range(&w->rng, 1, 4), args, 1);
        SUBMIT(w, pto_stream_delay, w->s, t_rand_range(&w->rng, 1, 100));
    } else if (kind == 10) {  /* a burst longer than the ring: back-pressure (-PTO_EAGAIN) */
        int burst = (int)t_rand_range(&w->rng, 8, 40);
        uint64_t args[48];
        for (int i = 0; i < 48; i++)
            args[i] = t_rand(&w->rng);
        for (int i = 0; i < burst; i++) {
            if (t_rand_range(&w->rng, 0, 1)) /* argument lists of any length wrap the ring heap */
                SUBMIT(w, pto_stream_launch, w->s, k_noop, 1, args, (uint32_t)t_rand_range(&w->rng, 0, 48));
            else
                SUBMIT(w, pto_stream_notify, w->s);
        }
    } else {                  /* a kernel that fails: the rest of the group fails with EDEP */
        uint64_t args[1] = {0};
        w->may_fail = true;
        SUBMIT(w, pto_stream_launch, w->s, k_fail, 2, args, 1);
        SUBMIT(w, pto_stream_notify, w->s);
    }
    SUBMIT(w, pto_stream_record, w->s, events[w->idx]);

free:
    if (a)
        SUBMIT(w, pto_stream_free, w->s, a);
    if (b)
        SUBMIT(w, pto_stream_free, w->s, b);
    if (c)
        SUBMIT(w, pto_stream_free, w->s, c);
    if (w->ngroup == 0)
        return;
    bool ok = wait_group(w);
    if (!a || !b || !c || !ok) {
        atomic_fetch_add(ok ? &n_groups_ok : &n_groups_failed, 1);
        return;
    }
    atomic_fetch_add(&n_groups_ok, 1);
    if (kind < 5) {
        /* The memset (kind 0) hits a after the d2d: b, and so dst, keep src's bytes. */
        if (t_checksum(w->dst, n) != sum || memcmp(w->dst, w->src, n) != 0)
            FAIL("stream %d: copy of %llu bytes came back wrong", w->idx, (unsigned long long)n);
        atomic_fetch_add(&n_verified, 1);
    } else if (kind < 8) {
        for (uint64_t i = 0; i < nf; i++) {
            float want = kind == 5 ? w->fa[i] + w->fb[i] : alpha * w->fa[i] + w->fb[i];
            if (!(fabsf(w->fo[i] - want) <= 1e-5f * (1.0f + fabsf(want)))) {
                FAIL("stream %d: %s[%llu] = %g, want %g", w->idx, kind == 5 ? "add" : "axpy",
                     (unsigned long long)i, w->fo[i], want);
                break;
            }
        }
        atomic_fetch_add(&n_verified, 1);
    }
}

/*
 * Object churn next to the submitters: short-lived streams destroyed with
 * work queued behind a latch, events destroyed with waits queued, builtin
 * kernels unloaded with launches queued, trace toggled and read, every
 * stats call.  Its commands carry no token (token 0: no record).
 */
static void *chaos(void *arg)
{
    double seconds = *(double *)arg;
    uint64_t rng = 0xc4a05ULL, until = t_now_ns() + (uint64_t)(seconds * 1e9);
    pto_trace_record tr[32];
    while (t_now_ns() < until && !atomic_load(&failed)) {
        pto_stream *s;
        pto_event *e;
        pto_latch *l;
        pto_kernel *k;
        t_check(pto_stream_create(dev, (int)t_rand_range(&rng, 0, 3), &s));
        t_check(pto_event_create(dev, &e));
        t_check(pto_latch_create(dev, 0, &l));
        t_check(pto_kernel_builtin(dev, "noop", &k));
        t_check(pto_stream_latch_wait(s, l, 0));
        t_check(pto_stream_launch(s, k, (uint32_t)t_rand_range(&rng, 1, 3), NULL, 0, 0));
        t_check(pto_stream_record(s, e, 0));
        t_check(pto_stream_wait_event(s, events[t_rand_range(&rng, 0, NTHREADS - 1)], 0));
        t_check(pto_stream_delay(s, t_rand_range(&rng, 0, 50), 0));
        pto_kernel_unload(k);         /* a queued launch still references it */
        bool early = t_rand_range(&rng, 0, 1);
        if (early)
            pto_event_destroy(e);     /* the queued record must still be safe */
        if (t_rand_range(&rng, 0, 1))
            pto_latch_release(l);
        pto_stream_destroy(s);        /* queued work still runs; freed once drained */
        pto_latch_destroy(l);         /* releases it if still held */
        if (!early) {
            int rc = pto_event_synchronize(e, 30000000);
            if (rc == -PTO_ETIMEDOUT)
                FAIL("event on a destroyed stream never completed");
            pto_event_destroy(e);
        }
        pto_trace_enable(dev, (int)t_rand_range(&rng, 0, 1));
        pto_trace_read(dev, tr, 32);
        pto_mem_stats ms;
        pto_device_stats ds;
        pto_engine_stats es;
        t_check(pto_mem_get_stats(dev, &ms));
        t_check(pto_device_get_stats(dev, &ds));
        t_check(pto_engine_get_stats(dev, (int32_t)t_rand_range(&rng, 0, 4), &es));
        t_assert(ms.reserved >= ms.in_use && ms.peak >= ms.reserved, "mem stats inconsistent");
        t_pause_us((unsigned)t_rand_range(&rng, 50, 500));
    }
    return NULL;
}

static void *submitter(void *arg)
{
    struct worker *w = arg;
    uint64_t until = t_now_ns() + (uint64_t)(w->seconds * 1e9);
    while (t_now_ns() < until && !atomic_load(&failed) &&
           atomic_load(&next_token) < MAX_TOKENS - 128)
        run_group(w);
    release_latch(w);
    return NULL;
}

int main(int argc, char **argv)
{
    double seconds = t_duration(argc, argv, 3.0);
    pto_device_config cfg;
    struct worker workers[NTHREADS];
    pthread_t threads[NTHREADS], drain_thread, chaos_thread;

    pto_device_config_init(&cfg);
    cfg.cores = 3;
    cfg.copy_engines = 2;
    cfg.aicpu_thread_num = 2;
    cfg.ring_task_window = 16;    /* small: back-pressure happens */
    cfg.ring_dep_pool = 4;
    cfg.ring_heap = 1024;         /* small: argument lists wrap it and fill it */
    cfg.device_memory = 1u << 20; /* small: allocations sometimes fail */
    cfg.trace = 1;
    cfg.trace_capacity = 1024;
    int rc = pto_device_open("sim", &cfg, &dev);
    if (rc == -PTO_ENOTSUP)
        return T_EXIT_SKIP;
    t_check(rc);
    t_check(pto_kernel_builtin(dev, "add_f32", &k_add));
    t_check(pto_kernel_builtin(dev, "axpy_f32", &k_axpy));
    t_check(pto_kernel_builtin(dev, "spin", &k_spin));
    t_check(pto_kernel_builtin(dev, "fail", &k_fail));
    t_check(pto_kernel_builtin(dev, "noop", &k_noop));
    for (int i = 0; i < NTHREADS; i++) {
        struct worker *w = &workers[i];
        memset(w, 0, sizeof(*w));
        w->idx = i;
        w->seconds = seconds;
        w->rng = 0x1234567ULL * (uint64_t)(i + 1) + (uint64_t)time(NULL);
        w->src = t_malloc(MAX_BYTES);
        w->dst = t_malloc(MAX_BYTES);
        w->fa = t_malloc(MAX_BYTES);
        w->fb = t_malloc(MAX_BYTES);
        w->fo = t_malloc(MAX_BYTES);
        t_check(pto_stream_create(dev, i % 3, &w->s));
        t_check(pto_event_create(dev, &events[i]));
    }
    pthread_create(&drain_thread, NULL, drainer, NULL);
    pthread_create(&chaos_thread, NULL, chaos, &seconds);
    for (int i = 0; i < NTHREADS; i++)
        pthread_create(&threads[i], NULL, submitter, &workers[i]);
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(threads[i], NULL);
    pthread_join(chaos_thread, NULL);

    /* Everything issued must complete exactly once. */
    t_assert(pto_device_synchronize(dev, 30000000) == 0, "device did not go idle");
    uint64_t last = atomic_load(&next_token);
    uint64_t until = t_now_ns() + WAIT_NS;
    for (uint64_t t = 1; t < last && t < MAX_TOKENS; t++) {
        if (!atomic_load(&issued[t]))
            continue;
        while (atomic_load(&done_count[t]) == 0 && t_now_ns() < until)
            t_pause_us(100);
        if (atomic_load(&done_count[t]) != 1) {
            FAIL("token %llu completed %d times", (unsigned long long)t, atomic_load(&done_count[t]));
            break;
        }
    }
    atomic_store(&stop_drainer, true);
    pthread_join(drain_thread, NULL);

    pto_mem_stats ms;
    t_check(pto_mem_get_stats(dev, &ms));
    if (ms.allocations || ms.pending_frees || ms.reserved)
        FAIL("memory left: allocations=%llu pending=%llu reserved=%llu", (unsigned long long)ms.allocations,
             (unsigned long long)ms.pending_frees, (unsigned long long)ms.reserved);
    if (ms.largest_free != ms.capacity)
        FAIL("free extents did not coalesce: largest %llu of %llu",
             (unsigned long long)ms.largest_free, (unsigned long long)ms.capacity);
    pto_trace_record tr[64];
    while (pto_trace_read(dev, tr, 64) > 0)
        ;

    /* Close with work queued behind a latch that nobody releases. */
    pto_latch *l;
    t_check(pto_latch_create(dev, 0, &l));
    pto_devptr p;
    t_check(pto_mem_alloc(dev, 4096, NULL, &p));
    for (int i = 0; i < NTHREADS; i++) {
        uint64_t spin_args[1] = {5};
        t_check(pto_stream_latch_wait(workers[i].s, l, MAX_TOKENS + 1));
        t_check(pto_stream_copy_h2d(workers[i].s, p, workers[i].src, 4096, MAX_TOKENS + 2));
        t_check(pto_stream_launch(workers[i].s, k_spin, 2, spin_args, 1, MAX_TOKENS + 3));
        t_check(pto_stream_record(workers[i].s, events[(i + 1) % NTHREADS], 0));
        t_check(pto_stream_free(workers[i].s, p, MAX_TOKENS + 4));
        if (i + 1 < NTHREADS)
            t_check(pto_mem_alloc(dev, 4096, NULL, &p));
    }
    pto_device_close(dev);
    for (int i = 0; i < NTHREADS; i++) {
        free(workers[i].src);
        free(workers[i].dst);
        free(workers[i].fa);
        free(workers[i].fb);
        free(workers[i].fo);
    }
    printf("stress: %.1fs, %llu tokens, %llu records, groups ok %llu failed %llu, verified %llu, "
           "eagain %llu\n",
           seconds, (unsigned long long)(last - 1), (unsigned long long)atomic_load(&n_records),
           (unsigned long long)atomic_load(&n_groups_ok),
           (unsigned long long)atomic_load(&n_groups_failed),
           (unsigned long long)atomic_load(&n_verified), (unsigned long long)atomic_load(&n_eagain));
    return atomic_load(&failed) ? T_EXIT_FAIL : T_EXIT_PASS;
}
