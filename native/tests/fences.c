/*
 * Description: fences and the wait-many (event.c): an edge waits for a point
 * of the other stream with no command queued there.
 *
 *   1. A write after M latched reads on M streams (pto_hazards_launch):
 *      two commands on the writer (one wait for all M, the launch), none on
 *      the readers; the write stays held until the last reader is released.
 *      One edge rides on the launch (no wait command): one command.
 *   2. A failed predecessor fails the waiter: a reader whose launch fails
 *      makes the writer's wait fail (-PTO_EDEP, its cause) and the launch
 *      after it; a fence of a stream that failed and went idle carries the
 *      failure too.
 *   3. Two threads, each crossing two streams with pto_stream_wait_stream
 *      while the device completes their work (fences taken and fired at
 *      once: TSan).
 */
#include <pthread.h>

#include "helpers.h"

#define M 64

static pto_completion find(pto_device *dev, uint64_t token)
{
    pto_completion c;
    t_check(pto_wait_token(dev, token, 10000000, &c));
    return c;
}

static void drain(pto_device *dev)
{
    pto_completion recs[64];
    while (pto_cq_drain(dev, recs, 64) > 0)
        ;
}

static void wait_many(pto_device *dev)
{
    pto_hazards *hz;
    pto_stream *w, *r[M];
    pto_latch *latch[M];
    pto_kernel *noop;
    pto_devptr buf;
    t_check(pto_hazards_create(dev, &hz));
    t_check(pto_stream_create(dev, 0, &w));
    t_check(pto_stream_set_overflow(w, 1));
    t_check(pto_hazards_stream(hz, w));
    t_check(pto_kernel_builtin(dev, "noop", &noop));
    t_check(pto_mem_alloc(dev, 4096, w, &buf));
    uint64_t args[1] = {buf}, tok = 1;
    uint8_t wr[1] = {PTO_HZ_WRITE}, rd[1] = {PTO_HZ_READ};
    t_check(pto_hazards_launch(hz, w, noop, 1, args, 1, wr, tok, tok + 1));
    tok += 2;
    t_check(pto_stream_synchronize(w, 10000000));
    for (int i = 0; i < M; i++) {
        t_check(pto_stream_create(dev, 0, &r[i]));
        t_check(pto_stream_set_overflow(r[i], 1));
        t_check(pto_hazards_stream(hz, r[i]));
        t_check(pto_latch_create(dev, 0, &latch[i]));
        t_check(pto_stream_latch_wait(r[i], latch[i], 0));
        t_check(pto_hazards_launch(hz, r[i], noop, 1, args, 1, rd, tok, tok + 1));
        tok += 2;
    }
    uint64_t before[M], wb = pto_stream_accepted(w);
    for (int i = 0; i < M; i++)
        before[i] = pto_stream_accepted(r[i]);
    uint64_t launch_tok = tok + 1;
    int rc = t_check(pto_hazards_launch(hz, w, noop, 1, args, 1, wr, tok, launch_tok));
    tok += 2;
    t_assert(rc == 0, "the write and its wait went into the ring (rc %d)", rc);
    t_assert(pto_stream_accepted(w) == wb + 2, "one wait for %d edges and the launch (%llu commands)", M,
             (unsigned long long)(pto_stream_accepted(w) - wb));
    for (int i = 0; i < M; i++)
        t_assert(pto_stream_accepted(r[i]) == before[i], "nothing queued on reader %d", i);
    uint64_t counts[2];
    pto_hazards_counts(hz, counts);
    t_assert(counts[0] >= M, "the %d edges counted as inferred (%llu)", M, (unsigned long long)counts[0]);
    /* Released in reverse, all but reader 0: the write waits for it still. */
    for (int i = M - 1; i > 0; i--)
        pto_latch_release(latch[i]);
    for (int i = 1; i < M; i++)
        t_check(pto_stream_synchronize(r[i], 10000000));
    t_pause_us(20000);
    t_assert(pto_stream_completed(w) == wb, "the write ran before reader 0's read");
    pto_latch_release(latch[0]);
    pto_completion c = find(dev, launch_tok);
    t_assert(c.status == 0, "the write after its readers: %s", pto_status_name(c.status));

    /* One edge rides on the launch: one command, held until the reader's latch goes. */
    pto_latch_destroy(latch[0]);
    t_check(pto_latch_create(dev, 0, &latch[0]));
    t_check(pto_stream_latch_wait(r[0], latch[0], 0));
    t_check(pto_hazards_launch(hz, r[0], noop, 1, args, 1, rd, tok, tok + 1));
    tok += 2;
    wb = pto_stream_accepted(w);
    uint64_t done = pto_stream_completed(w);
    launch_tok = tok + 1;
    t_check(pto_hazards_launch(hz, w, noop, 1, args, 1, wr, tok, launch_tok));
    tok += 2;
    t_assert(pto_stream_accepted(w) == wb + 1, "one edge: the launch alone (%llu commands)",
             (unsigned long long)(pto_stream_accepted(w) - wb));
    t_pause_us(20000);
    t_assert(pto_stream_completed(w) == done, "the write ran before the read it waits for");
    pto_latch_release(latch[0]);
    c = find(dev, launch_tok);
    t_assert(c.status == 0, "the write after its reader: %s", pto_status_name(c.status));

    /* A reader fails: the writer's wait-many fails with its cause, and the launch behind it. */
    uint64_t bad = 0;
    for (int i = 0; i < M; i++) {
        pto_latch_destroy(latch[i]);
        t_check(pto_latch_create(dev, 0, &latch[i]));
        t_check(pto_stream_latch_wait(r[i], latch[i], 0));
        if (i == M / 2) { /* (the next command: the launch) */
            t_check(pto_debug_fail_next(r[i], PTO_EKERNEL, 1));
            bad = tok + 1;
        }
        t_check(pto_hazards_launch(hz, r[i], noop, 1, args, 1, rd, tok, tok + 1));
        tok += 2;
    }
    uint64_t wait_tok = tok;
    launch_tok = tok + 1;
    t_check(pto_hazards_launch(hz, w, noop, 1, args, 1, wr, wait_tok, launch_tok));
    tok += 2;
    for (int i = 0; i < M; i++)
        pto_latch_release(latch[i]);
    c = find(dev, bad);
    t_assert(c.status == -PTO_EKERNEL, "the injected failure: %s", pto_status_name(c.status));
    c = find(dev, wait_tok);
    t_assert(c.status == -PTO_EDEP && c.cause_token == bad, "the wait fails with the reader's cause: %s, %llu",
             pto_status_name(c.status), (unsigned long long)c.cause_token);
    c = find(dev, launch_tok);
    t_assert(c.status == -PTO_EDEP && c.cause_token == bad, "the launch behind it: %s, %llu",
             pto_status_name(c.status), (unsigned long long)c.cause_token);

    /* A fence of an idle stream whose failure nobody observed carries it too. */
    pto_stream *a, *b;
    pto_event *ev;
    t_check(pto_stream_create(dev, 0, &a));
    t_check(pto_stream_create(dev, 0, &b));
    t_check(pto_event_create(dev, &ev));
    t_check(pto_debug_fail_next(a, PTO_EKERNEL, 1));
    uint64_t fail_tok = tok++, edge_tok = tok++, after_tok = tok++;
    t_check(pto_stream_notify(a, fail_tok));
    c = find(dev, fail_tok);
    t_assert(c.status == -PTO_EKERNEL, "a's failure: %s", pto_status_name(c.status));
    t_check(pto_stream_launch_after(b, a, ev, edge_tok, noop, 1, args, 1, after_tok));
    c = find(dev, after_tok);
    t_assert(c.status == -PTO_EDEP && c.cause_token == fail_tok, "b's launch after idle failed a: %s, %llu",
             pto_status_name(c.status), (unsigned long long)c.cause_token);
    drain(dev);
    pto_event_destroy(ev);
    pto_stream_destroy(a);
    pto_stream_destroy(b);

    pto_hazards_destroy(hz);
    t_check(pto_stream_free(w, buf, 0));
    t_check(pto_stream_synchronize(w, 10000000));
    drain(dev);
    for (int i = 0; i < M; i++) {
        t_check(pto_stream_synchronize(r[i], 10000000));
        pto_latch_destroy(latch[i]);
        pto_stream_destroy(r[i]);
    }
    pto_kernel_unload(noop);
    pto_stream_destroy(w);
}

struct crosser {
    pto_device *dev;
    pto_stream *s[2];
    pto_event *ev[2];
    pto_kernel *noop;
};

static void *cross(void *arg)
{
    struct crosser *x = arg;
    for (int i = 0; i < 2000; i++) {
        int d = i & 1;
        t_check(pto_stream_launch_after(x->s[d], x->s[!d], x->ev[!d], 0, x->noop, 1, NULL, 0, 0));
    }
    for (int d = 0; d < 2; d++)
        t_check(pto_stream_synchronize(x->s[d], 30000000));
    return NULL;
}

static void threads(pto_device *dev)
{
    struct crosser x[2];
    pthread_t th[2];
    for (int t = 0; t < 2; t++) {
        x[t].dev = dev;
        t_check(pto_kernel_builtin(dev, "noop", &x[t].noop));
        for (int d = 0; d < 2; d++) {
            t_check(pto_stream_create(dev, 0, &x[t].s[d]));
            t_check(pto_stream_set_overflow(x[t].s[d], 1));
            t_check(pto_event_create(dev, &x[t].ev[d]));
        }
        t_assert(pthread_create(&th[t], NULL, cross, &x[t]) == 0, "pthread_create");
    }
    for (int t = 0; t < 2; t++) {
        pthread_join(th[t], NULL);
        for (int d = 0; d < 2; d++) {
            t_assert(pto_stream_completed(x[t].s[d]) == pto_stream_accepted(x[t].s[d]), "all done");
            pto_event_destroy(x[t].ev[d]);
            pto_stream_destroy(x[t].s[d]);
        }
        pto_kernel_unload(x[t].noop);
    }
    drain(dev);
}

int main(void)
{
    pto_device *dev = t_open_device(1u << 20, 4096);
    wait_many(dev);
    threads(dev);
    pto_device_close(dev);
    printf("fences: wait-many, failures, threads\n");
    return T_EXIT_PASS;
}
