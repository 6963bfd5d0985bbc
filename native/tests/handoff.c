/*
 * Description: hand-offs of work submitted to idle streams.  Host threads
 * each run round trips on their own stream (submit, wait for the record)
 * with random pauses around the engines' spin window, which is set to a few
 * microseconds: submissions land while an engine is watching kicks, while it
 * is leaving (the re-check after kick_watchers drops), while every engine
 * sleeps (the submitter runs the pass itself) and while another thread holds
 * sched_lock (the scheduler is kicked).  A lost hand-off leaves a command
 * unstarted: its wait times out and the test fails.  Delays ride along, so
 * deadlines must still reach the scheduler thread.  Records stay queued
 * (pto_wait_token leaves them; a drain could take one before its waiter).
 */
#include <pthread.h>
#include <stdatomic.h>

#include "helpers.h"

#define NTHREADS 4
#define WAIT_US 5000000

static pto_device *dev;
static pto_kernel *k_noop;
static double seconds;
static atomic_ullong next_token = 1;
static atomic_ullong round_trips;

static void *round_tripper(void *arg)
{
    uint64_t rng = (uint64_t)(uintptr_t)arg * 0x9E3779B97F4A7C15ull + 1;
    pto_stream *s;
    pto_completion rec;
    t_check(pto_stream_create(dev, (int)(rng % 3), &s));
    uint64_t end = t_now_ns() + (uint64_t)(seconds * 1e9);
    while (t_now_ns() < end) {
        uint64_t t = atomic_fetch_add(&next_token, 1);
        uint64_t pick = t_rand(&rng) % 16;
        if (pick == 0)
            t_check(pto_stream_delay(s, t_rand_range(&rng, 1, 200), t));
        else if (pick < 4)
            t_check(pto_stream_notify(s, t));
        else
            t_check(pto_stream_launch(s, k_noop, (uint32_t)t_rand_range(&rng, 1, 3), NULL, 0, t));
        int rc = pto_wait_token(dev, t, WAIT_US, &rec);
        t_assert(rc == 0, "token %llu never completed (rc %d): a hand-off was lost",
                 (unsigned long long)t, rc);
        t_assert(rec.status == 0, "token %llu failed: %s", (unsigned long long)t, rec.message);
        atomic_fetch_add(&round_trips, 1);
        /* Around the spin window: sometimes inside it, sometimes past it. */
        uint64_t pause = t_rand(&rng) % 4;
        if (pause)
            t_pause_us((unsigned)t_rand_range(&rng, 1, pause == 3 ? 40 : 8));
    }
    t_check(pto_stream_synchronize(s, WAIT_US));
    pto_stream_destroy(s);
    return NULL;
}

int main(int argc, char **argv)
{
    seconds = t_duration(argc, argv, 2.0);
    pto_device_config cfg;
    pto_device_config_init(&cfg);
    cfg.cores = 2;
    cfg.copy_engines = 1;
    cfg.aicpu_thread_num = 1;
    cfg.spin_us = 5;
    int rc = pto_device_open("sim", &cfg, &dev);
    if (rc == -PTO_ENOTSUP)
        return T_EXIT_SKIP;
    t_check(rc);
    t_check(pto_kernel_builtin(dev, "noop", &k_noop));
    pthread_t th[NTHREADS];
    for (int i = 0; i < NTHREADS; i++)
        pthread_create(&th[i], NULL, round_tripper, (void *)(uintptr_t)(i + 1));
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(th[i], NULL);
    t_assert(atomic_load(&round_trips) > 100, "only %llu round trips",
             (unsigned long long)atomic_load(&round_trips));
    printf("%llu round trips\n", (unsigned long long)atomic_load(&round_trips));
    pto_kernel_unload(k_noop);
    pto_device_close(dev);
    return T_EXIT_PASS;
}
