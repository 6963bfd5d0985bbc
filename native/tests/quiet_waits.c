/*
 * Description: explicit waits as quiet commands (Stream.wait's): a record
 * only when the wait fails.
 *
 *   1. pto_hazards_queue_wait: one command on the waiting stream, none on
 *      the source, no completion record, not counted as inferred; a
 *      failure on the source before it still fails the waiter's next
 *      command (-PTO_EDEP) and the wait reports it once.
 *   2. Two threads, each recording on one stream and waiting for it quietly
 *      on another (pto_stream_wait_event_quiet) while the device completes
 *      their work: every command completes, and the only records are the
 *      launches' (TSan).
 */
#include <pthread.h>

#include "helpers.h"

static int drain_count(pto_device *dev)
{
    pto_completion recs[64];
    int n, total = 0;
    while ((n = pto_cq_drain(dev, recs, 64)) > 0)
        total += n;
    return total;
}

static void table_wait(pto_device *dev)
{
    pto_hazards *hz;
    pto_stream *a, *b;
    pto_kernel *noop;
    pto_latch *latch;
    t_check(pto_hazards_create(dev, &hz));
    t_check(pto_stream_create(dev, 0, &a));
    t_check(pto_stream_create(dev, 0, &b));
    t_check(pto_hazards_stream(hz, a));
    t_check(pto_hazards_stream(hz, b));
    t_check(pto_kernel_builtin(dev, "noop", &noop));
    drain_count(dev);
    /* Healthy: one command on b, nothing on a, no record of the wait. */
    t_check(pto_latch_create(dev, 0, &latch));
    t_check(pto_stream_latch_wait(a, latch, 0));
    t_check(pto_stream_launch(a, noop, 1, NULL, 0, 1));
    uint64_t na = pto_stream_accepted(a), nb = pto_stream_accepted(b);
    t_check(pto_hazards_queue_wait(hz, pto_stream_id(b), pto_stream_id(a), 2));
    t_assert(pto_stream_accepted(a) == na && pto_stream_accepted(b) == nb + 1, "one command, on the waiter");
    t_check(pto_stream_launch(b, noop, 1, NULL, 0, 3));
    pto_latch_release(latch);
    t_check(pto_stream_synchronize(b, 10000000));
    t_check(pto_stream_synchronize(a, 10000000));
    uint64_t counts[2];
    pto_hazards_counts(hz, counts);
    t_assert(counts[0] == 0, "not counted as inferred (%llu)", (unsigned long long)counts[0]);
    int n = drain_count(dev);
    t_assert(n == 2, "the two launches' records only (%d)", n);
    /* A failure on a before the wait: the wait reports it, b's next command fails as a dependent. */
    t_check(pto_latch_create(dev, 0, &latch));
    t_check(pto_stream_latch_wait(a, latch, 0));
    t_check(pto_debug_fail_next(a, 0, 1));
    t_check(pto_stream_launch(a, noop, 1, NULL, 0, 11));
    t_check(pto_hazards_queue_wait(hz, pto_stream_id(b), pto_stream_id(a), 12));
    t_check(pto_stream_launch(b, noop, 1, NULL, 0, 13));
    pto_latch_release(latch);
    pto_completion c;
    t_check(pto_wait_token(dev, 12, 10000000, &c));
    t_assert(c.status == -PTO_EDEP && (c.flags & PTO_CQ_FIRST_FAILURE), "the wait's failure (%d)", c.status);
    t_check(pto_wait_token(dev, 13, 10000000, &c));
    t_assert(c.status == -PTO_EDEP, "b's next command depends on it (%d)", c.status);
    t_check(pto_stream_synchronize(a, 10000000));
    drain_count(dev);
    pto_hazards_destroy(hz);
    pto_kernel_unload(noop);
    pto_stream_destroy(a);
    pto_stream_destroy(b);
}

struct waiter {
    pto_stream *s[2];
    pto_event *ev;
    pto_kernel *noop;
};

static void *quiet(void *arg)
{
    struct waiter *x = arg;
    for (int i = 0; i < 2000; i++) {
        t_check(pto_stream_launch(x->s[0], x->noop, 1, NULL, 0, 0));
        t_check(pto_stream_record(x->s[0], x->ev, 0));
        t_check(pto_stream_wait_event_quiet(x->s[1], x->ev, 1));
        t_check(pto_stream_launch(x->s[1], x->noop, 1, NULL, 0, 0));
    }
    for (int d = 0; d < 2; d++)
        t_check(pto_stream_synchronize(x->s[d], 30000000));
    return NULL;
}

static void threads(pto_device *dev)
{
    struct waiter x[2];
    pthread_t th[2];
    drain_count(dev);
    for (int t = 0; t < 2; t++) {
        t_check(pto_kernel_builtin(dev, "noop", &x[t].noop));
        for (int d = 0; d < 2; d++) {
            t_check(pto_stream_create(dev, 0, &x[t].s[d]));
            t_check(pto_stream_set_overflow(x[t].s[d], 1));
        }
        t_check(pto_event_create(dev, &x[t].ev));
        t_assert(pthread_create(&th[t], NULL, quiet, &x[t]) == 0, "pthread_create");
    }
    for (int t = 0; t < 2; t++) {
        pthread_join(th[t], NULL);
        for (int d = 0; d < 2; d++) {
            t_assert(pto_stream_completed(x[t].s[d]) == pto_stream_accepted(x[t].s[d]), "all done");
            pto_stream_destroy(x[t].s[d]);
        }
        pto_event_destroy(x[t].ev);
        pto_kernel_unload(x[t].noop);
    }
    int n = drain_count(dev);
    t_assert(n == 0, "no records for token-0 commands or healthy quiet waits (%d)", n);
}

int main(void)
{
    pto_device *dev = t_open_device(1u << 20, 4096);
    table_wait(dev);
    threads(dev);
    pto_device_close(dev);
    printf("quiet_waits: table wait, threads\n");
    return T_EXIT_PASS;
}
