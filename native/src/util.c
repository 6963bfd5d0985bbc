/*
 * util.c - small helpers every phase uses: the clock, timed waits, lock
 * and condition-variable setup, aligned allocation, bounded string copies.
 *
 * Phase: none (support).  Nothing here knows about devices or streams.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

uint64_t pto_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int pto_nop(void)
{
    return 0;
}

void pti_strlcpy(char *dst, const char *src, size_t n)
{
    if (n == 0)
        return;
    size_t len = src ? strnlen(src, n - 1) : 0;
    if (len)
        memcpy(dst, src, len);
    dst[len] = '\0';
}

void *pti_zalloc64(size_t size)
{
    size_t rounded = (size + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, rounded);
    if (p)
        memset(p, 0, rounded);
    return p;
}

uint64_t pti_deadline_after_us(int64_t timeout_us)
{
    if (timeout_us < 0)
        return 0;
    return pto_now_ns() + (uint64_t)timeout_us * 1000ull;
}

void pti_mutex_init(pthread_mutex_t *mu)
{
#ifdef PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ADAPTIVE_NP);
    pthread_mutex_init(mu, &attr);
    pthread_mutexattr_destroy(&attr);
#else
    pthread_mutex_init(mu, NULL);
#endif
}

void pti_cond_init(pthread_cond_t *cv)
{
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &attr);
    pthread_condattr_destroy(&attr);
}

int pti_cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, uint64_t deadline_ns)
{
    if (deadline_ns == 0) {
        pthread_cond_wait(cv, mu);
        return 0;
    }
    if (pto_now_ns() >= deadline_ns)
        return ETIMEDOUT;
    struct timespec ts = {
        .tv_sec = (time_t)(deadline_ns / 1000000000ull),
        .tv_nsec = (long)(deadline_ns % 1000000000ull),
    };
    int rc = pthread_cond_timedwait(cv, mu, &ts);
    return rc == ETIMEDOUT ? ETIMEDOUT : 0;
}
