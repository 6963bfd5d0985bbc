/*
 * Description: several devices in one process (peer.c).  Device ids and
 * their range; peer copies in both directions round-trip bytes exactly;
 * a stream of one device waits on the device side for another device's
 * event (held by a latch, then released); a failure of the awaited work
 * fails the waiter and its dependents; closing a device whose events are
 * awaited, recorded or only reserved, fails the waits with -PTO_ECLOSED
 * instead of hanging; a peer copy whose other device closed fails the
 * same way; threads ping-ponging data around a ring of devices with
 * cross-device waits keep every byte; and a device closed by another thread
 * while peer copies read its memory fails them cleanly (the sanitizer
 * builds watch the locking and the lifetimes).
 */
#include <pthread.h>

#include "helpers.h"

enum { N = 1 << 16 };

static pto_device *open_id(uint32_t id)
{
    pto_device_config cfg;
    pto_device *dev = NULL;
    pto_device_config_init(&cfg);
    cfg.cores = 1;
    cfg.copy_engines = 1;
    cfg.device_memory = 8u << 20;
    cfg.ring_task_window = 64;
    cfg.device_id = id;
    t_check(pto_device_open("sim", &cfg, &dev));
    return dev;
}

static pto_completion wait_tok(pto_device *dev, uint64_t tok)
{
    pto_completion c;
    t_check(pto_wait_token(dev, tok, 10 * 1000 * 1000, &c));
    return c;
}

static void test_ids(void)
{
    t_assert(pto_device_count("sim") == 8, "count %d", pto_device_count("sim"));
    t_assert(pto_device_count("nope") == -PTO_ENOTSUP, "unknown platform");
    setenv("PYPTO_ASYNC_SIM_DEVICES", "3", 1);
    t_assert(pto_device_count("a2a3sim") == 3, "env count");
    pto_device_config cfg;
    pto_device *dev = NULL;
    pto_device_config_init(&cfg);
    cfg.device_id = 3;
    t_assert(pto_device_open("sim", &cfg, &dev) == -PTO_EINVAL, "id 3 of 3 opened");
    t_assert(strstr(pto_last_error(), "0..2") != NULL, "message: %s", pto_last_error());
    setenv("PYPTO_ASYNC_SIM_DEVICES", "zero", 1);
    t_assert(pto_device_count("sim") == -PTO_EINVAL, "bad env accepted");
    unsetenv("PYPTO_ASYNC_SIM_DEVICES");
    dev = open_id(7);
    pto_device_info info;
    t_check(pto_device_get_info(dev, &info));
    t_assert(info.device_id == 7, "info.device_id %u", info.device_id);
    pto_device_close(dev);
}

static void test_round_trip(void)
{
    pto_device *d0 = open_id(0), *d1 = open_id(1);
    pto_stream *s0, *s1;
    pto_event *e0, *e1;
    t_check(pto_stream_create(d0, 0, &s0));
    t_check(pto_stream_create(d1, 0, &s1));
    t_check(pto_event_create(d0, &e0));
    t_check(pto_event_create(d1, &e1));
    pto_devptr a0, b0, a1;
    t_check(pto_mem_alloc(d0, N, s0, &a0));
    t_check(pto_mem_alloc(d0, N, s0, &b0));
    t_check(pto_mem_alloc(d1, N, s1, &a1));
    static unsigned char host[N], back[N];
    uint64_t seed = 42;
    t_fill_random(&seed, host, N);
    memset(back, 0, N);
    pto_latch *l;
    t_check(pto_latch_create(d0, 0, &l));
    /* d0 writes a0 behind a latch; d1 pulls it over (a copy on d1's stream) after a wait. */
    t_check(pto_stream_latch_wait(s0, l, 0));
    t_check(pto_stream_copy_h2d(s0, a0, host, N, 1));
    t_check(pto_stream_record(s0, e0, 0));
    t_check(pto_stream_wait_event(s1, e0, 0));
    t_check(pto_stream_copy_peer(s1, d1, a1, d0, a0, N, 2));
    t_check(pto_stream_record(s1, e1, 0));
    for (int i = 0; i < 50; i++) {
        t_pause_us(200); /* pace only: whatever the timing, the latch holds both */
        t_assert(pto_event_query(e1) == 0, "d1's copy ran before d0's writer");
    }
    pto_latch_release(l);
    t_assert(wait_tok(d1, 2).status == 0, "peer copy failed: %s", pto_last_error());
    /* And back, pushed by a copy on d0's stream into d1's memory... then to b0 on d0. */
    t_check(pto_stream_wait_event(s0, e1, 0));
    t_check(pto_stream_copy_peer(s0, d0, b0, d1, a1, N, 3));
    t_check(pto_stream_copy_d2h(s0, back, b0, N, 4));
    t_assert(wait_tok(d0, 4).status == 0, "copy back failed");
    t_assert(memcmp(host, back, N) == 0, "bytes differ after two peer copies");
    pto_device_stats st;
    t_check(pto_device_get_stats(d1, &st));
    t_assert(st.bytes_peer == N, "bytes_peer %llu", (unsigned long long)st.bytes_peer);
    /* A range outside the other device's arena: refused at submit. */
    t_assert(pto_stream_copy_peer(s1, d1, a1, d0, a1, N, 0) == -PTO_EINVAL, "foreign range accepted");
    t_assert(pto_stream_copy_peer(s1, d0, a0, d0, b0, N, 0) == -PTO_EINVAL, "neither side on s1");
    pto_latch_destroy(l);
    pto_device_close(d1);
    pto_device_close(d0);
}

static void test_failure_crosses(void)
{
    pto_device *d0 = open_id(0), *d1 = open_id(1);
    pto_stream *s0, *s1;
    pto_event *e0;
    pto_kernel *fail;
    t_check(pto_stream_create(d0, 0, &s0));
    t_check(pto_stream_create(d1, 0, &s1));
    t_check(pto_event_create(d0, &e0));
    t_check(pto_kernel_builtin(d0, "fail", &fail));
    uint64_t code[1] = {0};
    pto_latch *l;
    t_check(pto_latch_create(d0, 0, &l));
    t_check(pto_stream_latch_wait(s0, l, 0));
    t_check(pto_stream_launch(s0, fail, 1, code, 1, 10));
    t_check(pto_stream_record(s0, e0, 11));
    t_check(pto_stream_wait_event(s1, e0, 20));
    t_check(pto_stream_notify(s1, 21));
    pto_latch_release(l);
    pto_completion w = wait_tok(d1, 20), n = wait_tok(d1, 21);
    t_assert(w.status == -PTO_EDEP && (w.flags & PTO_CQ_FIRST_FAILURE), "wait: %d", w.status);
    t_assert(w.cause_token == 20, "wait's cause %llu", (unsigned long long)w.cause_token);
    t_assert(strstr(w.message, "another device") != NULL, "message: %s", w.message);
    t_assert(n.status == -PTO_EDEP && n.cause_token == 20, "dependent: %d", n.status);
    pto_completion buf[8];
    while (pto_cq_drain(d1, buf, 8) > 0) /* drained, not delivered: s1 still fails */
        ;
    t_check(pto_stream_notify(s1, 22));
    t_assert(wait_tok(d1, 22).status == -PTO_EDEP, "s1 healthy after a mere drain");
    t_assert(pto_completion_observe(d1, &n) == 1, "delivering the dependent observes s1's failure");
    t_check(pto_stream_notify(s1, 23));
    t_assert(wait_tok(d1, 23).status == 0, "s1 still failing after the observation");
    pto_latch_destroy(l);
    pto_device_close(d0);
    pto_device_close(d1);
}

static void test_close_fails_waiters(void)
{
    for (int reserved = 0; reserved < 2; reserved++) {
        pto_device *d0 = open_id(0), *d1 = open_id(1);
        pto_stream *s0, *s1;
        pto_event *e0;
        pto_latch *l;
        t_check(pto_stream_create(d0, 0, &s0));
        t_check(pto_stream_create(d1, 0, &s1));
        t_check(pto_event_create(d0, &e0));
        t_check(pto_latch_create(d0, 0, &l));
        if (reserved) {
            t_check(pto_event_reserve(e0)); /* its record never comes */
        } else {
            t_check(pto_stream_latch_wait(s0, l, 0));
            t_check(pto_stream_record(s0, e0, 0));
        }
        t_check(pto_stream_wait_event(s1, e0, 30));
        t_check(pto_stream_notify(s1, 31));
        pto_device_close(d0); /* the latch is never released */
        pto_completion w = wait_tok(d1, 30), n = wait_tok(d1, 31);
        t_assert(w.status == -PTO_ECLOSED, "reserved=%d: wait %s (%s)", reserved,
                 pto_status_name(w.status), w.message);
        t_assert(n.status == -PTO_EDEP && n.cause_token == 30, "dependent %d", n.status);
        pto_device_close(d1);
    }
    /* A reserved event filled by its record later: the wait queued before it waits for it. */
    pto_device *d0 = open_id(0), *d1 = open_id(1);
    pto_stream *s0, *s1;
    pto_event *e0;
    pto_latch *l;
    t_check(pto_stream_create(d0, 0, &s0));
    t_check(pto_stream_create(d1, 0, &s1));
    t_check(pto_event_create(d0, &e0));
    t_check(pto_latch_create(d0, 0, &l));
    t_check(pto_event_reserve(e0));
    t_check(pto_stream_wait_event(s1, e0, 40));
    t_check(pto_stream_latch_wait(s0, l, 0));
    t_check(pto_stream_record(s0, e0, 0));
    t_assert(pto_event_query(e0) == 0, "reserved event complete before its record");
    pto_latch_release(l);
    t_assert(wait_tok(d1, 40).status == 0, "wait on a filled reservation failed");
    /* A peer copy whose other device closed before it ran. */
    pto_devptr a0, a1;
    t_check(pto_mem_alloc(d0, N, NULL, &a0));
    t_check(pto_mem_alloc(d1, N, NULL, &a1));
    pto_latch *l1;
    t_check(pto_latch_create(d1, 0, &l1));
    t_check(pto_stream_latch_wait(s1, l1, 0));
    t_check(pto_stream_copy_peer(s1, d1, a1, d0, a0, N, 41));
    pto_device_close(d0);
    pto_latch_release(l1);
    pto_completion c = wait_tok(d1, 41);
    t_assert(c.status == -PTO_ECLOSED, "copy from a closed device: %s", pto_status_name(c.status));
    pto_latch_destroy(l1);
    pto_device_close(d1);
}

/* ---- concurrency: a ring of devices, one thread per hop ------------------------------ */

enum { DEVS = 4, ROUNDS = 200, M = 4096 };

struct ring {
    pto_device *dev[DEVS];
    pto_stream *s[DEVS];
    pto_devptr buf[DEVS];
    pto_event *ev[DEVS];
    int failures;
};

struct hop_arg {
    int id;
    uint64_t seed;
    struct ring *ring;
};

/* Each thread owns its own pair of devices' streams: it moves random data 0 -> 1 -> ... -> 0. */
static void *ring_thread(void *p)
{
    struct hop_arg *a = p;
    struct ring *r = a->ring;
    static __thread unsigned char in[M], out[M];
    pto_device *dev[DEVS];
    pto_stream *s[DEVS];
    pto_devptr buf[DEVS];
    pto_event *ev[DEVS];
    for (int i = 0; i < DEVS; i++) {
        dev[i] = r->dev[i];
        t_check(pto_stream_create(dev[i], a->id, &s[i]));
        t_check(pto_mem_alloc(dev[i], M, s[i], &buf[i]));
        t_check(pto_event_create(dev[i], &ev[i]));
    }
    uint64_t tok = 1;
    for (int round = 0; round < ROUNDS; round++) {
        t_fill_random(&a->seed, in, M);
        t_check(pto_stream_copy_h2d(s[0], buf[0], in, M, 0));
        t_check(pto_stream_record(s[0], ev[0], 0));
        pto_event *ready = ev[0]; /* the point after which the data is where it should be */
        for (int i = 1; i <= DEVS; i++) {
            int to = i % DEVS, from = i - 1;
            /*
             * Alternate who runs the copy: the receiver pulls, or the sender
             * pushes.  Each hop waits for the previous one, so earlier reads
             * of a buffer are over before the hop that rewrites it.
             */
            int on = round % 2 ? to : from;
            t_check(pto_stream_wait_event(s[on], ready, 0));
            t_check(pto_stream_copy_peer(s[on], dev[to], buf[to], dev[from], buf[from], M, 0));
            t_check(pto_stream_record(s[on], ev[on], 0));
            ready = ev[on];
        }
        t_check(pto_stream_wait_event(s[0], ready, 0));
        uint64_t t = (uint64_t)a->id << 32 | tok++;
        t_check(pto_stream_copy_d2h(s[0], out, buf[0], M, t));
        pto_completion c = wait_tok(dev[0], t);
        if (c.status != 0 || memcmp(in, out, M) != 0)
            __atomic_add_fetch(&r->failures, 1, __ATOMIC_RELAXED);
    }
    for (int i = 0; i < DEVS; i++) {
        t_check(pto_stream_synchronize(s[i], 10 * 1000 * 1000));
        t_check(pto_mem_free(dev[i], buf[i]));
        pto_event_destroy(ev[i]);
        pto_stream_destroy(s[i]);
    }
    return NULL;
}

static void test_ring_concurrency(void)
{
    struct ring r = {0};
    for (int i = 0; i < DEVS; i++)
        r.dev[i] = open_id((uint32_t)i);
    enum { THREADS = 3 };
    pthread_t th[THREADS];
    struct hop_arg args[THREADS];
    for (int i = 0; i < THREADS; i++) {
        args[i] = (struct hop_arg){.id = i + 1, .seed = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1), .ring = &r};
        t_assert(pthread_create(&th[i], NULL, ring_thread, &args[i]) == 0, "pthread_create");
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    t_assert(r.failures == 0, "%d rounds lost or corrupted data", r.failures);
    for (int i = 0; i < DEVS; i++)
        pto_device_close(r.dev[i]);
}

/* ---- concurrency: closing a device while another runs peer copies from it ------------ */

struct closer {
    pto_device *dev;
};

static void *close_thread(void *p)
{
    struct closer *c = p;
    pto_device_close(c->dev);
    return NULL;
}

/*
 * Peer copies queued on d1 from d0's memory run on d1's copy engines while
 * another thread closes d0: each either copied (d0 still there) or failed
 * with -PTO_ECLOSED (d0 gone first), and close never frees memory a copy is
 * still reading (the sanitizers would say so).  Waits of d1 on d0's events,
 * recorded behind work d0's close cancels, fail the same way.
 */
static void test_close_races_peer_copies(void)
{
    enum { ROUNDS = 20, COPIES = 64 };
    for (int round = 0; round < ROUNDS; round++) {
        pto_device *d0 = open_id(0), *d1 = open_id(1);
        pto_stream *s0, *s1;
        pto_event *e0;
        pto_latch *l;
        t_check(pto_stream_create(d0, 0, &s0));
        t_check(pto_stream_create(d1, 0, &s1));
        t_check(pto_stream_set_overflow(s1, 1)); /* more copies than the ring holds */
        t_check(pto_event_create(d0, &e0));
        t_check(pto_latch_create(d0, 0, &l));
        pto_devptr a0, a1;
        t_check(pto_mem_alloc(d0, N, NULL, &a0));
        t_check(pto_mem_alloc(d1, N, NULL, &a1));
        t_check(pto_stream_latch_wait(s0, l, 0));
        t_check(pto_stream_record(s0, e0, 0));
        uint64_t tok = 1;
        for (int i = 0; i < COPIES; i++) {
            if (i == COPIES / 2)
                t_check(pto_stream_wait_event(s1, e0, 1000));
            t_check(pto_stream_copy_peer(s1, d1, a1, d0, a0, N, tok++));
        }
        struct closer c = {d0};
        pthread_t th;
        t_assert(pthread_create(&th, NULL, close_thread, &c) == 0, "pthread_create");
        int ok = 0, closed = 0;
        for (uint64_t t = 1; t < tok; t++) {
            pto_completion cq = wait_tok(d1, t);
            if (cq.status == 0)
                ok++;
            else if (cq.status == -PTO_ECLOSED || cq.status == -PTO_EDEP)
                closed++;
            else
                t_assert(0, "copy %llu: %s (%s)", (unsigned long long)t, pto_status_name(cq.status),
                         cq.message);
        }
        pthread_join(th, NULL);
        pto_completion w = wait_tok(d1, 1000);
        /* Its own failure, or a dependent one if a copy before it found d0 gone already. */
        t_assert(w.status == -PTO_ECLOSED || w.status == -PTO_EDEP, "wait on a closed device's event: %s",
                 pto_status_name(w.status));
        t_assert(ok + closed == COPIES, "%d + %d copies", ok, closed);
        /* Everything behind the failed wait failed as its dependent. */
        t_assert(closed >= COPIES / 2, "only %d copies failed after the wait", closed);
        pto_device_close(d1);
    }
}

int main(void)
{
    test_ids();
    test_round_trip();
    test_failure_crosses();
    test_close_fails_waiters();
    test_ring_concurrency();
    test_close_races_peer_copies();
    return T_EXIT_PASS;
}
