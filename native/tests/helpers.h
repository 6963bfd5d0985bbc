/*
 * helpers.h - shared helpers of the standalone driver tests (liburing's
 * test/helpers.h style).  Every test is one program that returns T_EXIT_PASS,
 * T_EXIT_FAIL or T_EXIT_SKIP; run.sh builds and runs them.
 */
#ifndef PTO_TEST_HELPERS_H
#define PTO_TEST_HELPERS_H

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pto_driver.h"

enum t_exit {
    T_EXIT_PASS = 0,
    T_EXIT_FAIL = 1,
    T_EXIT_SKIP = 77,
};

/* Print a failure message with its location (the caller decides what to return). */
#define t_fail(...)                                                              \
    do {                                                                         \
        fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                          \
        fprintf(stderr, __VA_ARGS__);                                            \
        fputc('\n', stderr);                                                     \
    } while (0)

/* Check a driver call returned >= 0; on failure print the status and text, exit 1. */
#define t_check(call)                                                            \
    ({                                                                           \
        int t_rc_ = (call);                                                      \
        if (t_rc_ < 0) {                                                         \
            fprintf(stderr, "%s:%d: %s = %s (%s)\n", __FILE__, __LINE__, #call,  \
                    pto_status_name(t_rc_), pto_last_error());                   \
            exit(T_EXIT_FAIL);                                                   \
        }                                                                        \
        t_rc_;                                                                   \
    })

/* Assert a condition; on failure print it and exit 1. */
#define t_assert(cond, ...)                                                      \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "%s:%d: assertion failed: %s: ", __FILE__, __LINE__, \
                    #cond);                                                      \
            fprintf(stderr, __VA_ARGS__);                                        \
            fputc('\n', stderr);                                                 \
            exit(T_EXIT_FAIL);                                                   \
        }                                                                        \
    } while (0)

/* malloc that never returns NULL (exits the test instead). */
static inline void *t_malloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "t_malloc(%zu) failed\n", n);
        exit(T_EXIT_FAIL);
    }
    return p;
}

static inline void *t_calloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) {
        fprintf(stderr, "t_calloc(%zu, %zu) failed\n", n, size);
        exit(T_EXIT_FAIL);
    }
    return p;
}

/* xorshift64*: a small per-thread random generator (seed must be nonzero). */
static inline uint64_t t_rand(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545F4914F6CDD1DULL;
}

/* Uniform integer in [lo, hi]. */
static inline uint64_t t_rand_range(uint64_t *state, uint64_t lo, uint64_t hi)
{
    return lo + t_rand(state) % (hi - lo + 1);
}

static inline void t_fill_random(uint64_t *state, void *buf, size_t n)
{
    unsigned char *p = buf;
    while (n >= 8) {
        uint64_t v = t_rand(state);
        memcpy(p, &v, 8);
        p += 8;
        n -= 8;
    }
    while (n--)
        *p++ = (unsigned char)t_rand(state);
}

/* FNV-1a over n bytes: the checksum copies are verified with. */
static inline uint64_t t_checksum(const void *buf, size_t n)
{
    const unsigned char *p = buf;
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

/* Is fd readable right now (poll with timeout_ms, 0: do not wait)? */
static inline int t_readable(int fd, int timeout_ms)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    int rc;
    do {
        rc = poll(&pfd, 1, timeout_ms);
    } while (rc < 0 && errno == EINTR);
    return rc > 0 && (pfd.revents & POLLIN);
}

static inline uint64_t t_now_ns(void) { return pto_now_ns(); }

/* Sleep about us microseconds (only to pace a polling loop, never for ordering). */
static inline void t_pause_us(unsigned us)
{
    struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (long)(us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

/* Open a small sim device for a test; exits on failure. */
static inline pto_device *t_open_device(uint64_t memory, uint32_t window)
{
    pto_device_config cfg;
    pto_device *dev = NULL;
    pto_device_config_init(&cfg);
    cfg.cores = 2;
    cfg.copy_engines = 2;
    cfg.aicpu_thread_num = 2;
    cfg.device_memory = memory;
    cfg.ring_task_window = window;
    t_check(pto_device_open("sim", &cfg, &dev));
    return dev;
}

/* Seconds to run a timed test: argv[1], else $PTO_STRESS_SECONDS, else dflt. */
static inline double t_duration(int argc, char **argv, double dflt)
{
    const char *s = argc > 1 ? argv[1] : getenv("PTO_STRESS_SECONDS");
    double v = s ? atof(s) : 0;
    return v > 0 ? v : dflt;
}

#endif /* PTO_TEST_HELPERS_H */
