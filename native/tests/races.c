/*
 * Description: device-wide state changes racing submitters.  Three threads
 * submit groups of work (copies, spin launches, cross-stream event waits,
 * inferred edges onto each other's streams (pto_stream_wait_stream, and
 * pto_stream_launch_after), latches, stream-ordered frees, notifies) while
 *   phase 1: a fourth thread calls pto_device_cancel at random moments, and
 *   phase 2: a fourth thread marks the device lost partway through.
 * Every token must complete exactly once with a status the phase allows,
 * copies that succeeded must carry the right bytes, canceled frees must
 * still give their memory back, and a lost device must fail everything
 * fast and still close cleanly.
 *
 * Usage: races [seconds per phase]   (default 1)
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "helpers.h"

#define NSUB 3
#define MAX_TOKENS (1u << 19)
#define NBYTES 4096
#define WAIT_NS (30ull * 1000000000ull)

static pto_device *dev;
static pto_event *events[NSUB];
static pto_stream *streams[NSUB];
static pto_kernel *k_spin;
static int phase;                         /* 1: cancel, 2: lost */
static _Atomic uint64_t next_token;
static _Atomic uint8_t done_count[MAX_TOKENS];
static int32_t done_status[MAX_TOKENS];
static _Atomic uint8_t issued[MAX_TOKENS];
static atomic_bool stop, stop_drainer, failed, lost;
static _Atomic uint64_t n_ok, n_canceled, n_lost, n_dep, n_cancels, n_retired;

#define FAIL(...)                                                                     \
    do {                                                                              \
        t_fail(__VA_ARGS__);                                                          \
        atomic_store(&failed, true);                                                  \
    } while (0)

static void *drainer(void *arg)
{
    pto_completion recs[16];
    int fd = pto_cq_fd(dev);
    (void)arg;
    for (;;) {
        bool last = atomic_load(&stop_drainer);
        if (!last)
            t_readable(fd, 20);
        int n;
        while ((n = pto_cq_drain(dev, recs, 16)) > 0) {
            for (int i = 0; i < n; i++) {
                uint64_t t = recs[i].token;
                if (t >= MAX_TOKENS || !atomic_load(&issued[t])) {
                    FAIL("record for unknown token %llu", (unsigned long long)t);
                    continue;
                }
                done_status[t] = recs[i].status;
                if (atomic_fetch_add_explicit(&done_count[t], 1, memory_order_release))
                    FAIL("token %llu completed twice", (unsigned long long)t);
            }
        }
        if (last)
            return NULL;
    }
}

struct sub {
    int idx;
    pto_stream *s;
    uint64_t rng;
    uint64_t group[16];
    int ngroup;
    unsigned char src[NBYTES], dst[NBYTES];
};

static uint64_t issue(struct sub *w)
{
    uint64_t t = atomic_fetch_add(&next_token, 1);
    if (t >= MAX_TOKENS || w->ngroup == 16)
        return 0;
    atomic_store(&issued[t], 1);
    w->group[w->ngroup++] = t;
    return t;
}

/* Submit; a refused command (full ring, lost device) retires its token. */
static int submit(struct sub *w, int rc, uint64_t t)
{
    if (rc == 0)
        return 0;
    if (t) {
        w->ngroup--;
        atomic_store(&issued[t], 0);
        atomic_fetch_add(&n_retired, 1);
    }
    if (rc == -PTO_EDEVLOST && phase == 2)
        return rc;
    if (rc != -PTO_EAGAIN)
        FAIL("stream %d: submit returned %s (%s)", w->idx, pto_status_name(rc), pto_last_error());
    return rc;
}

#define SUBMIT(w, fn, ...)                                                            \
    ({                                                                                \
        uint64_t tok_ = issue(w);                                                     \
        submit(w, fn(__VA_ARGS__, tok_), tok_);                                       \
    })

static bool wait_group(struct sub *w)
{
    bool ok = true;
    for (int i = 0; i < w->ngroup; i++) {
        uint64_t t = w->group[i], until = t_now_ns() + WAIT_NS;
        while (!atomic_load_explicit(&done_count[t], memory_order_acquire)) {
            if (t_now_ns() > until) {
                FAIL("stream %d: token %llu never completed", w->idx, (unsigned long long)t);
                return false;
            }
            t_pause_us(20);
        }
        int32_t st = done_status[t];
        if (st == 0) {
            atomic_fetch_add(&n_ok, 1);
            continue;
        }
        ok = false;
        if (st == -PTO_ECANCELED)
            atomic_fetch_add(&n_canceled, 1);
        else if (st == -PTO_EDEVLOST)
            atomic_fetch_add(&n_lost, 1);
        else if (st == -PTO_EDEP)
            atomic_fetch_add(&n_dep, 1);
        bool allowed = st == -PTO_ECANCELED || st == -PTO_EDEP ||
                       (phase == 2 && st == -PTO_EDEVLOST);
        if (!allowed)
            FAIL("stream %d: token %llu completed with %s (phase %d)", w->idx,
                 (unsigned long long)t, pto_status_name(st), phase);
    }
    return ok;
}

static void *submitter(void *arg)
{
    struct sub *w = arg;
    while (!atomic_load(&stop) && !atomic_load(&failed) &&
           atomic_load(&next_token) < MAX_TOKENS - 64) {
        pto_devptr a = 0, b = 0;
        pto_latch *l = NULL;
        w->ngroup = 0;
        if (pto_mem_alloc(dev, NBYTES, w->s, &a) < 0 || pto_mem_alloc(dev, NBYTES, w->s, &b) < 0) {
            if (a && pto_mem_free(dev, a) < 0)
                FAIL("pto_mem_free");
            if (atomic_load(&lost))
                break;
            continue;
        }
        t_fill_random(&w->rng, w->src, NBYTES);
        memset(w->dst, 0, NBYTES);
        if (t_rand_range(&w->rng, 0, 2) == 0 && pto_latch_create(dev, 0, &l) == 0)
            SUBMIT(w, pto_stream_latch_wait, w->s, l);
        if (t_rand_range(&w->rng, 0, 2) == 0)
            SUBMIT(w, pto_stream_wait_event, w->s, events[t_rand_range(&w->rng, 0, NSUB - 1)]);
        if (t_rand_range(&w->rng, 0, 2) == 0) {
            /* Another submitter's stream, recorded from this thread; a quiet wait: no token. */
            int other = (w->idx + 1 + (int)t_rand_range(&w->rng, 0, NSUB - 2)) % NSUB;
            int rc = pto_stream_wait_stream(w->s, streams[other], events[other], 0);
            submit(w, rc < 0 ? rc : 0, 0);
        }
        int copies = SUBMIT(w, pto_stream_copy_h2d, w->s, a, w->src, NBYTES);
        uint64_t us[1] = {t_rand_range(&w->rng, 1, 30)};
        if (t_rand_range(&w->rng, 0, 2) == 0) {
            /* The launch behind an inferred edge from another submitter's stream, in one call. */
            int other = (w->idx + 1 + (int)t_rand_range(&w->rng, 0, NSUB - 2)) % NSUB;
            SUBMIT(w, pto_stream_launch_after, w->s, streams[other], events[other], 0, k_spin, 2, us, 1);
        } else {
            SUBMIT(w, pto_stream_launch, w->s, k_spin, 2, us, 1);
        }
        copies |= SUBMIT(w, pto_stream_copy_d2d, w->s, b, a, NBYTES);
        copies |= SUBMIT(w, pto_stream_copy_d2h, w->s, w->dst, b, NBYTES);
        SUBMIT(w, pto_stream_record, w->s, events[w->idx]);
        SUBMIT(w, pto_stream_notify, w->s);
        /* Frees go in even when the device is lost: the memory must come back. */
        if (SUBMIT(w, pto_stream_free, w->s, a) < 0 && pto_mem_free(dev, a) < 0)
            FAIL("pto_mem_free after a refused stream free");
        if (SUBMIT(w, pto_stream_free, w->s, b) < 0 && pto_mem_free(dev, b) < 0)
            FAIL("pto_mem_free after a refused stream free");
        if (l) {
            pto_latch_release(l);
            pto_latch_destroy(l);
        }
        if (wait_group(w) && copies == 0 && memcmp(w->src, w->dst, NBYTES) != 0)
            FAIL("stream %d: copy came back wrong", w->idx);
        if (atomic_load(&lost))
            break;
    }
    return NULL;
}

static void *disturber(void *arg)
{
    uint64_t rng = 0xdeadbeefULL, until = *(uint64_t *)arg;
    if (phase == 2) {
        t_pause_us((unsigned)t_rand_range(&rng, 50000, 200000));
        t_check(pto_debug_lose_device(dev, "races: lost on purpose"));
        atomic_store(&lost, true);
        return NULL;
    }
    while (t_now_ns() < until && !atomic_load(&failed)) {
        t_pause_us((unsigned)t_rand_range(&rng, 100, 3000));
        if (t_check(pto_device_cancel(dev)) > 0)
            atomic_fetch_add(&n_cancels, 1);
    }
    return NULL;
}

static int run_phase(int which, double seconds)
{
    struct sub subs[NSUB];
    pthread_t th[NSUB], dist, drain;
    uint64_t until;

    phase = which;
    atomic_store(&next_token, 1);
    memset((void *)done_count, 0, sizeof(done_count));
    memset((void *)issued, 0, sizeof(issued));
    atomic_store(&stop, false);
    atomic_store(&stop_drainer, false);
    atomic_store(&lost, false);
    atomic_store(&n_ok, 0);
    atomic_store(&n_canceled, 0);
    atomic_store(&n_lost, 0);
    atomic_store(&n_cancels, 0);
    atomic_store(&n_dep, 0);
    atomic_store(&n_retired, 0);

    dev = t_open_device(4u << 20, 32);
    t_check(pto_kernel_builtin(dev, "spin", &k_spin));
    for (int i = 0; i < NSUB; i++) {
        memset(&subs[i], 0, sizeof(subs[i]));
        subs[i].idx = i;
        subs[i].rng = 0x51ed27ULL * (uint64_t)(i + 7) + (uint64_t)which;
        t_check(pto_stream_create(dev, i, &subs[i].s));
        streams[i] = subs[i].s;
        t_check(pto_event_create(dev, &events[i]));
    }
    until = t_now_ns() + (uint64_t)(seconds * 1e9);
    pthread_create(&drain, NULL, drainer, NULL);
    for (int i = 0; i < NSUB; i++)
        pthread_create(&th[i], NULL, submitter, &subs[i]);
    pthread_create(&dist, NULL, disturber, &until);
    while (t_now_ns() < until && !atomic_load(&failed))
        t_pause_us(10000);
    atomic_store(&stop, true);
    for (int i = 0; i < NSUB; i++)
        pthread_join(th[i], NULL);
    pthread_join(dist, NULL);

    int rc = pto_device_synchronize(dev, 30000000);
    if (rc != 0 && !(which == 2 && rc == -PTO_EDEVLOST))
        FAIL("pto_device_synchronize: %s", pto_status_name(rc));
    uint64_t last = atomic_load(&next_token), deadline = t_now_ns() + WAIT_NS;
    for (uint64_t t = 1; t < last && t < MAX_TOKENS; t++) {
        if (!atomic_load(&issued[t]))
            continue;
        while (!atomic_load(&done_count[t]) && t_now_ns() < deadline)
            t_pause_us(100);
        if (atomic_load(&done_count[t]) != 1) {
            FAIL("phase %d: token %llu completed %d times", which, (unsigned long long)t,
                 atomic_load(&done_count[t]));
            break;
        }
    }
    atomic_store(&stop_drainer, true);
    pthread_join(drain, NULL);
    if (which == 2) {
        t_assert(pto_device_status(dev) == -PTO_EDEVLOST, "device not lost");
        t_assert(pto_stream_notify(subs[0].s, 0) == -PTO_EDEVLOST, "lost device took work");
    }
    pto_mem_stats ms;
    t_check(pto_mem_get_stats(dev, &ms));
    if (ms.allocations || ms.pending_frees || ms.reserved)
        FAIL("phase %d: memory left: count=%llu pending=%llu reserved=%llu", which,
             (unsigned long long)ms.allocations, (unsigned long long)ms.pending_frees,
             (unsigned long long)ms.reserved);
    for (int i = 0; i < NSUB; i++)
        pto_event_destroy(events[i]);
    pto_device_close(dev);
    printf("races phase %d: %llu tokens (%llu refused): ok %llu, canceled %llu, dep %llu, "
           "lost %llu; %llu cancel calls dropped work\n",
           which, (unsigned long long)(last - 1), (unsigned long long)atomic_load(&n_retired),
           (unsigned long long)atomic_load(&n_ok), (unsigned long long)atomic_load(&n_canceled),
           (unsigned long long)atomic_load(&n_dep), (unsigned long long)atomic_load(&n_lost),
           (unsigned long long)atomic_load(&n_cancels));
    return 0;
}

int main(int argc, char **argv)
{
    double seconds = t_duration(argc, argv, 1.0);
    if (seconds > 3)
        seconds = 3;
    run_phase(1, seconds);
    if (!atomic_load(&failed))
        run_phase(2, seconds);
    return atomic_load(&failed) ? T_EXIT_FAIL : T_EXIT_PASS;
}
