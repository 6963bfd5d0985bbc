/*
 * Description: the host-first path (pto_device_config.host_first, engines.c):
 * host threads run short queued work themselves.  With PTO_HOST_FIRST_ALWAYS,
 * host threads each run request round trips on their own stream (copy in,
 * add_f32, copy out; random data, checked), submitting and then blocking in
 * pto_wait_token, so submissions and waits both run commands inline, beside
 * the engines taking the rest and a thread that holds a stream on a latch
 * (nothing behind the latch may run until it is released, inline or not).
 * Every result must equal its reference, inline_runs must count the inline
 * runs, stream order must hold (the copy out sees the kernel's result), an
 * injected failure must fail its dependents on the inline path too, and
 * TSan must see no race (run.sh tsan).
 */
#include <pthread.h>
#include <stdatomic.h>

#include "helpers.h"

#define NTHREADS 3
#define N 1024
#define WAIT_US 5000000

static pto_device *dev;
static pto_kernel *k_add;
static double seconds;
static atomic_ullong next_token = 1;
static atomic_ullong requests;

static uint64_t tok(void)
{
    return atomic_fetch_add(&next_token, 1);
}

static void wait_ok(uint64_t t)
{
    pto_completion rec;
    int rc = pto_wait_token(dev, t, WAIT_US, &rec);
    t_assert(rc == 0, "token %llu never completed (rc %d)", (unsigned long long)t, rc);
    t_assert(rec.status == 0, "token %llu failed: %s", (unsigned long long)t, rec.message);
}

/* One request: out = x + x through the device, on s; returns after checking it. */
static void request(pto_stream *s, pto_devptr src, pto_devptr dst, uint64_t *rng)
{
    float x[N], y[N];
    for (int i = 0; i < N; i++) {
        x[i] = (float)(t_rand(rng) % 2001) / 100.0f - 10.0f;
        y[i] = -12345.0f; /* poisoned: a copy out that ran before the kernel leaves this */
    }
    uint64_t args[4] = {src, src, dst, N};
    t_check(pto_stream_copy_h2d(s, src, x, sizeof(x), tok()));
    t_check(pto_stream_launch(s, k_add, 1, args, 4, tok()));
    uint64_t t = tok();
    t_check(pto_stream_copy_d2h(s, y, dst, sizeof(y), t));
    wait_ok(t);
    for (int i = 0; i < N; i++)
        t_assert(y[i] == x[i] + x[i], "element %d: %g, want %g", i, y[i], x[i] + x[i]);
    atomic_fetch_add(&requests, 1);
}

static void *requester(void *arg)
{
    uint64_t rng = (uint64_t)(uintptr_t)arg * 0x9E3779B97F4A7C15ull + 7;
    pto_stream *s;
    pto_devptr src, dst;
    t_check(pto_stream_create(dev, 0, &s));
    t_check(pto_mem_alloc(dev, N * 4, s, &src));
    t_check(pto_mem_alloc(dev, N * 4, s, &dst));
    uint64_t end = t_now_ns() + (uint64_t)(seconds * 1e9);
    while (t_now_ns() < end) {
        request(s, src, dst, &rng);
        if (t_rand(&rng) % 4 == 0)
            t_pause_us((unsigned)t_rand_range(&rng, 1, 30));
    }
    t_check(pto_stream_synchronize(s, WAIT_US));
    pto_mem_free(dev, src);
    pto_mem_free(dev, dst);
    pto_stream_destroy(s);
    return NULL;
}

/* A latch holds the stream: the copy behind it runs only once it is released. */
static void *holder(void *arg)
{
    pto_stream *s;
    pto_devptr buf;
    t_check(pto_stream_create(dev, 0, &s));
    t_check(pto_mem_alloc(dev, N * 4, s, &buf));
    uint64_t end = t_now_ns() + (uint64_t)(seconds * 1e9);
    while (t_now_ns() < end) {
        float x[N], y[N];
        for (int i = 0; i < N; i++) {
            x[i] = (float)i;
            y[i] = -1.0f;
        }
        pto_latch *l;
        t_check(pto_latch_create(dev, 0, &l));
        t_check(pto_stream_latch_wait(s, l, 0));
        t_check(pto_stream_copy_h2d(s, buf, x, sizeof(x), tok()));
        uint64_t t = tok();
        t_check(pto_stream_copy_d2h(s, y, buf, sizeof(y), t));
        t_pause_us(50);
        pto_completion rec;
        t_assert(pto_wait_token(dev, t, 1000, &rec) == -PTO_ETIMEDOUT, "a copy behind a latch ran");
        t_assert(y[7] == -1.0f, "a copy behind a latch ran");
        pto_latch_release(l);
        wait_ok(t);
        t_assert(y[7] == 7.0f, "copy out after the release: %g", y[7]);
        pto_latch_destroy(l);
    }
    pto_mem_free(dev, buf);
    pto_stream_destroy(s);
    return NULL;
}

/* An injected failure on the inline path fails its dependents, and the stream recovers once observed. */
static void failure_propagates(void)
{
    pto_stream *s;
    pto_devptr buf;
    t_check(pto_stream_create(dev, 0, &s));
    t_check(pto_mem_alloc(dev, N * 4, s, &buf));
    float x[N] = {0}, y[N];
    uint64_t t1 = tok(), t2 = tok();
    t_check(pto_debug_fail_next(s, PTO_EFAULT, 1));
    t_check(pto_stream_copy_h2d(s, buf, x, sizeof(x), t1));
    t_check(pto_stream_copy_d2h(s, y, buf, sizeof(y), t2));
    pto_completion r1, r2;
    t_check(pto_wait_token(dev, t1, WAIT_US, &r1));
    t_check(pto_wait_token(dev, t2, WAIT_US, &r2));
    t_assert(r1.status == -PTO_EFAULT, "injected failure: status %d", r1.status);
    t_assert(r2.status == -PTO_EDEP && r2.cause_token == t1, "dependent: status %d cause %llu", r2.status,
             (unsigned long long)r2.cause_token);
    t_check(pto_completion_observe(dev, &r1));
    uint64_t t3 = tok();
    t_check(pto_stream_copy_h2d(s, buf, x, sizeof(x), t3));
    wait_ok(t3);
    t_check(pto_stream_synchronize(s, WAIT_US));
    pto_mem_free(dev, buf);
    pto_stream_destroy(s);
}

int main(int argc, char **argv)
{
    seconds = t_duration(argc, argv, 1.5);
    pto_device_config cfg;
    pto_device_config_init(&cfg);
    cfg.cores = 2;
    cfg.copy_engines = 1;
    cfg.spin_us = 5;
    cfg.host_first = PTO_HOST_FIRST_ALWAYS;
    int rc = pto_device_open("sim", &cfg, &dev);
    if (rc == -PTO_ENOTSUP)
        return T_EXIT_SKIP;
    t_check(rc);
    t_check(pto_kernel_builtin(dev, "add_f32", &k_add));
    failure_propagates();
    pthread_t th[NTHREADS + 1];
    for (int i = 0; i < NTHREADS; i++)
        pthread_create(&th[i], NULL, requester, (void *)(uintptr_t)(i + 1));
    pthread_create(&th[NTHREADS], NULL, holder, NULL);
    for (int i = 0; i <= NTHREADS; i++)
        pthread_join(th[i], NULL);
    pto_device_stats st;
    t_check(pto_device_get_stats(dev, &st));
    t_assert(atomic_load(&requests) > 20, "only %llu requests", (unsigned long long)atomic_load(&requests));
    t_assert(st.inline_runs > 0, "no command ran inline (%llu requests)", (unsigned long long)atomic_load(&requests));
    printf("%llu requests, %llu inline runs, %llu engine wakes\n", (unsigned long long)atomic_load(&requests),
           (unsigned long long)st.inline_runs, (unsigned long long)st.engine_wakes);
    pto_kernel_unload(k_add);
    pto_device_close(dev);
    return T_EXIT_PASS;
}
