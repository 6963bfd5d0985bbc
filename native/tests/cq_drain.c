/*
 * Description: the completion queue's eventfd contract.  Records are queued
 * behind a latch and released at once; draining them in small batches must
 * leave the fd readable while records remain and reset it once the queue is
 * empty.  A thread blocked in poll() on the fd wakes for a new record, and
 * pto_wait_token finds a record without draining it.  pto_cq_drain_keep
 * leaves the fd signalled: the records pushed meanwhile signal nothing, and
 * the next pto_cq_drain resets it.
 */
#include <pthread.h>

#include "helpers.h"

#define N 100

static pto_device *dev;

static void *poller(void *arg)
{
    int *woke = arg;
    *woke = t_readable(pto_cq_fd(dev), 10000);
    return NULL;
}

int main(void)
{
    pto_stream *s;
    pto_latch *l;
    pto_completion recs[7], one;
    uint64_t expect = 1;
    int fd, total = 0, woke = 0;
    pthread_t th;

    dev = t_open_device(16u << 20, 256);
    fd = pto_cq_fd(dev);
    t_check(pto_stream_create(dev, 0, &s));
    t_assert(!t_readable(fd, 0), "fd readable on a new device");

    t_check(pto_latch_create(dev, 10000000, &l));
    t_check(pto_stream_latch_wait(s, l, 0));
    for (uint64_t t = 1; t <= N; t++)
        t_check(pto_stream_notify(s, t));
    t_assert(pto_cq_ready(dev) == 0, "records before the latch was released");
    pto_latch_release(l);
    t_check(pto_stream_synchronize(s, 10000000));
    while (pto_cq_ready(dev) < N)
        t_assert(pto_cq_wait(dev, 10000000) == 0, "records never arrived");

    while (total < N) {
        int n = t_check(pto_cq_drain(dev, recs, 7));
        t_assert(n > 0, "drain returned nothing with %d records left", N - total);
        for (int i = 0; i < n; i++) {
            t_assert(recs[i].token == expect, "got token %llu, want %llu",
                     (unsigned long long)recs[i].token, (unsigned long long)expect);
            t_assert(recs[i].status == 0, "status %d", recs[i].status);
            expect++;
        }
        total += n;
        if (total < N)
            t_assert(t_readable(fd, 0), "fd not readable with %d records left", N - total);
    }
    t_assert(!t_readable(fd, 0), "fd readable after the queue emptied");
    t_assert(pto_cq_drain(dev, recs, 7) == 0, "drain of an empty queue");

    /* A thread asleep in poll() wakes for the next record. */
    pthread_create(&th, NULL, poller, &woke);
    t_check(pto_stream_delay(s, 2000, 0));
    t_check(pto_stream_notify(s, 1000));
    pthread_join(th, NULL);
    t_assert(woke, "poller did not wake");

    /* pto_wait_token copies the record and leaves it in the queue. */
    t_assert(pto_wait_token(dev, 1000, 10000000, &one) == 0, "wait_token");
    t_assert(one.token == 1000 && one.status == 0, "wrong record");
    t_assert(pto_cq_ready(dev) == 1, "wait_token drained the record");
    t_assert(t_check(pto_cq_drain(dev, recs, 7)) == 1 && recs[0].token == 1000, "record lost");
    t_assert(pto_wait_token(dev, 1000, 1000, &one) == -PTO_ETIMEDOUT, "drained token found");

    /* pto_cq_drain_keep: one signal for records drained one by one, the fd left readable. */
    pto_device_stats st0, st1;
    t_check(pto_device_get_stats(dev, &st0));
    for (uint64_t t = 2000; t < 2010; t++) {
        t_check(pto_stream_notify(s, t));
        while (pto_cq_ready(dev) == 0)
            t_assert(pto_cq_wait(dev, 10000000) == 0, "record %llu never arrived", (unsigned long long)t);
        t_assert(t_check(pto_cq_drain_keep(dev, recs, 7)) == 1 && recs[0].token == t, "kept drain lost %llu",
                 (unsigned long long)t);
        t_assert(t_readable(fd, 0), "a kept drain reset the fd");
    }
    t_check(pto_device_get_stats(dev, &st1));
    t_assert(st1.cq_signals - st0.cq_signals == 1, "%llu signals for 10 records drained kept",
             (unsigned long long)(st1.cq_signals - st0.cq_signals));
    t_assert(pto_cq_drain(dev, recs, 7) == 0, "records after the kept drains");
    t_assert(!t_readable(fd, 0), "an empty pto_cq_drain left the fd readable");
    t_assert(pto_cq_drain_keep(NULL, recs, 1) == -PTO_EINVAL, "NULL device");

    pto_latch_destroy(l);
    pto_device_close(dev);
    return T_EXIT_PASS;
}
