/*
 * Description: stream overflows under concurrency.  Three threads each own a
 * stream with its overflow on, a 4-slot ring, a 64-byte ring heap (two
 * launches' arguments) and a 2-entry dependency pool, and submit groups
 * (H2D of random floats, an add_f32 launch doubling them in place, D2H,
 * an event record, a wait on another thread's event, a notify) far faster
 * than the device runs them, so almost everything waits in the overflow and
 * enters the ring from the engine and scheduler threads that complete work.
 * Now and then a thread withdraws a group's copies and launch right after
 * queueing them (pto_stream_cancel_queued).  A drainer thread checks that
 * every token completes exactly once, in sequence order per stream, with
 * ECANCELED exactly for the withdrawn commands and success otherwise; then
 * every group's output must hold its doubled input (or stay untouched if
 * withdrawn), and the stream statistics must account for the overflow.
 * Phase 2 closes a device and destroys a stream whose overflows are full
 * behind a latch (the sanitizer builds check nothing leaks); phase 3 loses
 * a device with a full overflow: every command still completes.
 *
 * Usage: overflow [groups per thread]   (default 2000)
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "helpers.h"

#define NSUB 3
#define NFLOAT 32
#define PER_GROUP 6
#define MAX_GROUPS 4096

struct group {
    float src[NFLOAT], dst[NFLOAT];
    uint64_t first_token;         /* PER_GROUP consecutive tokens */
    bool withdrawn;               /* its first three commands (h2d, launch, d2h) */
};

static pto_device *dev;
static pto_stream *streams[NSUB];
static pto_event *events[NSUB];
static pto_kernel *k_add;
static struct group *groups[NSUB];
static int ngroups;
static atomic_bool failed, stop_drainer;
static _Atomic uint64_t n_done, n_withdrawn, n_cancel_tries;

/* Per token: how often it completed, and its status; per stream: the last seq seen. */
#define TOKEN(sub, g, k) ((((uint64_t)(sub) + 1) << 40) | ((uint64_t)(g) * PER_GROUP + (k) + 1))
static _Atomic uint8_t done_count[NSUB][MAX_GROUPS * PER_GROUP + 1];
static int32_t done_status[NSUB][MAX_GROUPS * PER_GROUP + 1];
static uint64_t last_seq[NSUB + 1];

#define FAIL(...)                                                                     \
    do {                                                                              \
        t_fail(__VA_ARGS__);                                                          \
        atomic_store(&failed, true);                                                  \
    } while (0)

static void *drainer(void *arg)
{
    (void)arg;
    pto_completion buf[64];
    for (;;) {
        int n = pto_cq_drain(dev, buf, 64);
        if (n < 0) {
            FAIL("pto_cq_drain: %s", pto_status_name(n));
            return NULL;
        }
        for (int i = 0; i < n; i++) {
            uint64_t tok = buf[i].token;
            unsigned sub = (unsigned)(tok >> 40) - 1;
            uint64_t idx = tok & ((1ull << 40) - 1);
            if (sub >= NSUB || idx == 0 || idx > (uint64_t)ngroups * PER_GROUP) {
                FAIL("unknown token %llu", (unsigned long long)tok);
                continue;
            }
            if (atomic_fetch_add(&done_count[sub][idx], 1) != 0)
                FAIL("token %llu completed twice", (unsigned long long)tok);
            done_status[sub][idx] = buf[i].status;
            uint32_t sid = buf[i].stream_id;
            if (sid > NSUB || buf[i].seq <= last_seq[sid])
                FAIL("stream %u: seq %llu after %llu", sid, (unsigned long long)buf[i].seq,
                     (unsigned long long)last_seq[sid < NSUB + 1 ? sid : 0]);
            else
                last_seq[sid] = buf[i].seq;
            atomic_fetch_add(&n_done, 1);
        }
        if (n == 0) {
            if (atomic_load(&stop_drainer))
                return NULL;
            pto_cq_wait(dev, 10000);
        }
    }
}

static void *submitter(void *arg)
{
    int sub = (int)(intptr_t)arg;
    pto_stream *s = streams[sub];
    uint64_t rng = 0x9E3779B97F4A7C15ull * (uint64_t)(sub + 1);
    pto_devptr block;
    t_check(pto_mem_alloc(dev, NFLOAT * sizeof(float) * (uint64_t)ngroups, s, &block));
    for (int g = 0; g < ngroups && !atomic_load(&failed); g++) {
        struct group *gr = &groups[sub][g];
        for (int i = 0; i < NFLOAT; i++)
            gr->src[i] = (float)t_rand_range(&rng, 1, 1000) / 8.0f;
        memset(gr->dst, 0xAA, sizeof(gr->dst));
        gr->first_token = TOKEN(sub, g, 0);
        pto_devptr b = block + (uint64_t)g * NFLOAT * sizeof(float);
        uint64_t args[4] = {b, b, b, NFLOAT};
        uint64_t tok = gr->first_token;
        int rc[3];
        rc[0] = t_check(pto_stream_copy_h2d(s, b, gr->src, sizeof(gr->src), tok));
        rc[1] = t_check(pto_stream_launch(s, k_add, 2, args, 4, tok + 1));
        rc[2] = t_check(pto_stream_copy_d2h(s, gr->dst, b, sizeof(gr->dst), tok + 2));
        if (t_rand(&rng) % 4 == 0) {
            uint64_t last = pto_stream_accepted(s);
            int c = t_check(pto_stream_cancel_queued(s, last - 2, last));
            atomic_fetch_add(&n_cancel_tries, 1);
            if (c == 1) {
                gr->withdrawn = true;
                atomic_fetch_add(&n_withdrawn, 1);
            } else if (rc[0] == PTO_QUEUED && pto_stream_submitted(s) < last - 2) {
                FAIL("cancel refused for commands still in the overflow");
            }
        }
        t_check(pto_stream_record(s, events[sub], tok + 3));
        t_check(pto_stream_wait_event(s, events[(sub + 1) % NSUB], tok + 4));
        t_check(pto_stream_notify(s, tok + 5));
    }
    t_check(pto_stream_synchronize(s, 30000000));
    t_check(pto_stream_free(s, block, 0));
    return NULL;
}

static int phase1(void)
{
    pto_device_config cfg;
    pto_device_config_init(&cfg);
    cfg.cores = 2;
    cfg.copy_engines = 2;
    cfg.device_memory = 16u << 20;
    cfg.ring_task_window = 4;
    cfg.ring_heap = 64;
    cfg.ring_dep_pool = 2;
    t_check(pto_device_open("sim", &cfg, &dev));
    t_check(pto_kernel_builtin(dev, "add_f32", &k_add));
    for (int i = 0; i < NSUB; i++) {
        t_check(pto_stream_create(dev, 0, &streams[i]));
        t_check(pto_stream_set_overflow(streams[i], 1));
        t_check(pto_event_create(dev, &events[i]));
        groups[i] = t_calloc((size_t)ngroups, sizeof(struct group));
    }
    pthread_t th[NSUB], dr;
    pthread_create(&dr, NULL, drainer, NULL);
    for (int i = 0; i < NSUB; i++)
        pthread_create(&th[i], NULL, submitter, (void *)(intptr_t)i);
    for (int i = 0; i < NSUB; i++)
        pthread_join(th[i], NULL);
    t_check(pto_device_synchronize(dev, 30000000));
    uint64_t want = (uint64_t)NSUB * ngroups * PER_GROUP;
    uint64_t deadline = t_now_ns() + 30000000000ull;
    while (atomic_load(&n_done) < want && t_now_ns() < deadline && !atomic_load(&failed))
        t_pause_us(1000);
    atomic_store(&stop_drainer, true);
    pthread_join(dr, NULL);
    t_assert(!atomic_load(&failed), "see above");
    t_assert(atomic_load(&n_done) == want, "%llu of %llu records", (unsigned long long)n_done,
             (unsigned long long)want);

    uint64_t overflowed = 0;
    for (int sub = 0; sub < NSUB; sub++) {
        pto_stream_stats st;
        t_check(pto_stream_get_stats(streams[sub], &st));
        t_assert(st.overflow == 0 && st.in_flight == 0, "stream %d: %u waiting, %u in flight", sub,
                 st.overflow, st.in_flight);
        t_assert(st.submitted == st.completed && st.submitted == (uint64_t)ngroups * PER_GROUP + 1,
                 "stream %d: %llu accepted, %llu completed", sub, (unsigned long long)st.submitted,
                 (unsigned long long)st.completed);
        t_assert(st.window_hwm <= 4 && st.heap_hwm <= 64 && st.dep_hwm <= 2, "stream %d: hwm %u/%u/%u",
                 sub, st.window_hwm, st.heap_hwm, st.dep_hwm);
        overflowed += st.overflow_hwm;
        for (int g = 0; g < ngroups; g++) {
            struct group *gr = &groups[sub][g];
            uint64_t base = gr->first_token & ((1ull << 40) - 1);
            for (int k = 0; k < PER_GROUP; k++) {
                int32_t st_k = done_status[sub][base + k];
                int32_t want_k = gr->withdrawn && k < 3 ? -PTO_ECANCELED : 0;
                t_assert(st_k == want_k, "stream %d group %d command %d: %s, expected %s", sub, g, k,
                         pto_status_name(st_k), pto_status_name(want_k));
            }
            for (int i = 0; i < NFLOAT; i++) {
                uint32_t bits;
                memcpy(&bits, &gr->dst[i], sizeof(bits));
                if (gr->withdrawn)
                    t_assert(bits == 0xAAAAAAAAu, "stream %d group %d float %d written: %g", sub, g, i,
                             gr->dst[i]);
                else
                    t_assert(gr->dst[i] == gr->src[i] * 2.0f, "stream %d group %d float %d: %g, expected %g",
                             sub, g, i, gr->dst[i], gr->src[i] * 2.0f);
            }
        }
    }
    t_assert(overflowed > 0, "nothing ever waited in an overflow: the test tests nothing");
    pto_mem_stats ms;
    t_check(pto_mem_get_stats(dev, &ms));
    t_assert(ms.allocations == 0 && ms.pending_frees == 0, "%llu allocations, %llu pending frees left",
             (unsigned long long)ms.allocations, (unsigned long long)ms.pending_frees);
    printf("phase 1: %llu records, %llu of %llu withdrawals took\n", (unsigned long long)want,
           (unsigned long long)n_withdrawn, (unsigned long long)n_cancel_tries);
    for (int i = 0; i < NSUB; i++) {
        pto_event_destroy(events[i]);
        free(groups[i]);
    }
    pto_device_close(dev);
    return 0;
}

/* Full overflows behind a latch: a destroyed stream, then a closed device, release everything. */
static int phase2(void)
{
    for (int round = 0; round < 3; round++) {
        pto_device_config cfg;
        pto_device_config_init(&cfg);
        cfg.cores = 1;
        cfg.copy_engines = 1;
        cfg.device_memory = 4u << 20;
        cfg.ring_task_window = 2;
        cfg.ring_heap = 32;
        pto_device *d;
        t_check(pto_device_open("sim", &cfg, &d));
        pto_kernel *noop;
        t_check(pto_kernel_builtin(d, "noop", &noop));
        pto_latch *l;
        t_check(pto_latch_create(d, 0, &l));
        pto_event *e;
        t_check(pto_event_create(d, &e));
        pto_stream *s[2];
        static unsigned char host[4096];
        uint64_t tok = 1;
        for (int i = 0; i < 2; i++) {
            t_check(pto_stream_create(d, 0, &s[i]));
            t_check(pto_stream_set_overflow(s[i], 1));
        }
        for (int i = 0; i < 2; i++) {
            t_check(pto_stream_latch_wait(s[i], l, tok++));
            for (int k = 0; k < 50; k++) {
                pto_devptr a;
                uint64_t args[3] = {1, 2, 3};
                t_check(pto_mem_alloc(d, sizeof(host), s[i], &a));
                t_assert(pto_stream_copy_h2d(s[i], a, host, sizeof(host), tok++) == PTO_QUEUED || k == 0,
                         "command %d did not wait in the overflow", k);
                t_check(pto_stream_launch(s[i], noop, 1, args, 3, tok++));
                t_check(pto_stream_record(s[i], e, tok++));
                t_check(pto_stream_wait_event(s[1 - i], e, tok++));
                t_check(pto_stream_free(s[i], a, tok++));
            }
        }
        t_assert(pto_stream_set_overflow(s[0], 0) == -PTO_EINVAL, "overflow turned off while full");
        /* seq 2 is the first h2d, in the ring behind the latch; 3.. wait; 4 is a record. */
        t_assert(pto_stream_cancel_queued(s[0], 2, 2) == 0, "withdrew a command in the ring");
        t_assert(pto_stream_cancel_queued(s[0], 3, 4) == -PTO_EINVAL, "withdrew an event record");
        uint64_t accepted = pto_stream_accepted(s[0]);
        t_assert(pto_stream_cancel_queued(s[0], accepted, accepted + 1) == -PTO_EINVAL,
                 "withdrew a command never accepted");
        t_assert(pto_stream_cancel_queued(s[0], accepted, accepted) == 1, "withdrew the last command queued");
        pto_stream_destroy(s[1]);            /* destroyed with its overflow full */
        if (round == 1)
            pto_latch_release(l);            /* let some of it run into the close */
        pto_device_close(d);
    }
    printf("phase 2: overflows released at destroy and close\n");
    return 0;
}

/* A device lost with full overflows: every queued command still completes, -PTO_EDEVLOST. */
static int phase3(void)
{
    pto_device *d = t_open_device(4u << 20, 4);
    pto_stream *s;
    pto_latch *l;
    t_check(pto_stream_create(d, 0, &s));
    t_check(pto_stream_set_overflow(s, 1));
    t_check(pto_latch_create(d, 0, &l));
    t_check(pto_stream_latch_wait(s, l, 1));
    enum { NCMD = 300 };
    for (uint64_t tok = 2; tok <= NCMD; tok++)
        t_check(pto_stream_notify(s, tok));
    t_check(pto_debug_lose_device(d, "lost on purpose"));
    pto_latch_release(l);
    pto_completion buf[64];
    int lost = 0, seen = 0;
    uint64_t deadline = t_now_ns() + 30000000000ull;
    while (seen < NCMD && t_now_ns() < deadline) {
        int n = pto_cq_drain(d, buf, 64);
        for (int i = 0; i < n; i++) {
            seen++;
            lost += buf[i].status == -PTO_EDEVLOST;
        }
        if (n == 0)
            pto_cq_wait(d, 10000);
    }
    t_assert(seen == NCMD, "%d of %d records after the loss", seen, NCMD);
    t_assert(lost >= NCMD - 1, "%d of %d commands failed with the device", lost, NCMD);
    pto_latch_destroy(l);
    pto_device_close(d);
    printf("phase 3: %d commands waiting in an overflow completed with the lost device\n", lost);
    return 0;
}

int main(int argc, char **argv)
{
    ngroups = argc > 1 ? atoi(argv[1]) : 2000;
    if (ngroups < 1 || ngroups > MAX_GROUPS)
        ngroups = 2000;
    if (phase1() || phase2() || phase3())
        return T_EXIT_FAIL;
    return T_EXIT_PASS;
}
