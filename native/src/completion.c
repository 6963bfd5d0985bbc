/*
 * completion.c - the completion queue and its eventfd.
 *
 * Phase: completion.  Pushed by whoever finishes a command (pti_cmd_finish,
 * exec.c), drained and waited on by host threads.
 *
 * The queue
 * ---------
 * Every command with a nonzero token pushes one pto_completion when it
 * finishes.  Records live in a growable ring (cq: cq_entries slots, a power
 * of two, cq_mask = cq_entries - 1; the ring scheme of internal.h) under
 * cq_lock: cq_head counts the records ever drained, cq_tail those ever
 * pushed, and record i lives in cq[i & cq_mask].  Pushes come from any
 * driver thread (schedulers, cores, copy engines, the host thread running a
 * cancel), drains from host threads.  Nothing is ever dropped: a full ring
 * doubles.  The counters never wrap, so pto_wait_token can resume its scan
 * where it stopped even while other threads drain.
 *
 * The eventfd protocol
 * --------------------
 * The fd (EFD_NONBLOCK | EFD_CLOEXEC, counter mode) is readable exactly
 * while the queue holds records.  One flag, cq_signalled, under cq_lock,
 * mirrors "the counter is nonzero", and these invariants hold whenever
 * cq_lock is free:
 *
 *     cq_tail != cq_head   <=>   cq_signalled   <=>   eventfd counter > 0
 *
 *   push   appends; if !cq_signalled, writes 1 to the fd and sets the flag.
 *          So a burst of completions costs one write(2), not one per record.
 *   drain  moves up to max records out; only if that empties the queue does
 *          it read(2) the fd (resetting the counter) and clear the flag.
 *
 * Both happen under cq_lock, so a record pushed concurrently with a drain
 * either lands before the drain looks at cq_tail (and the fd stays readable)
 * or after the reset (and its push writes the fd again).  A drain that
 * leaves records behind never touches the fd: it stays readable, and an
 * event loop that wakes on it drains again.  No record is ever stranded
 * behind a non-readable fd.
 *
 * Blocking waits (pto_cq_wait, pto_wait_token) sleep on cq_cv; pushes
 * broadcast it only when cq_waiters > 0.  pto_wait_token copies a record
 * and leaves it queued.  Handing out records observes nothing: a failure is
 * observed when the host delivers it to its user (pto_completion_observe,
 * stream.c), so when the host drains never changes which commands fail.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "internal.h"

int pti_cq_init(pto_device *dev)
{
    dev->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (dev->efd < 0)
        return pti_error(PTO_ENOMEM, "pto_device_open: eventfd failed: %s", strerror(errno));
    dev->cq_entries = 256;
    dev->cq_mask = dev->cq_entries - 1;
    dev->cq_head = dev->cq_tail = 0;
    dev->cq = malloc(dev->cq_entries * sizeof(*dev->cq));
    if (!dev->cq) {
        close(dev->efd);
        dev->efd = -1;
        return pti_error(PTO_ENOMEM, "pto_device_open: out of host memory");
    }
    pti_mutex_init(&dev->cq_lock);
    pti_cond_init(&dev->cq_cv);
    return 0;
}

void pti_cq_fini(pto_device *dev)
{
    if (dev->efd >= 0) {
        close(dev->efd);
        dev->efd = -1;
    }
    if (dev->cq) {
        free(dev->cq);
        dev->cq = NULL;
        pthread_mutex_destroy(&dev->cq_lock);
        pthread_cond_destroy(&dev->cq_cv);
    }
}

/* Double the ring, each record moving to its slot under the new mask (cq_lock held).  False if out of memory. */
static bool cq_grow(pto_device *dev)
{
    size_t nentries = dev->cq_entries * 2, nmask = nentries - 1;
    struct pto_cq_rec *n = malloc(nentries * sizeof(*n));
    if (!n)
        return false;
    for (uint64_t i = dev->cq_head; i != dev->cq_tail; i++)
        n[i & nmask] = dev->cq[i & dev->cq_mask];
    free(dev->cq);
    dev->cq = n;
    dev->cq_entries = nentries;
    dev->cq_mask = nmask;
    return true;
}

/* Whether the ring is full (cq_lock held). */
static bool cq_full(const pto_device *dev)
{
    return dev->cq_tail - dev->cq_head == dev->cq_entries;
}

static void fd_signal(pto_device *dev)
{
    uint64_t one = 1;
    ssize_t rc;
    do
        rc = write(dev->efd, &one, sizeof(one));
    while (rc < 0 && errno == EINTR);
    atomic_fetch_add_explicit(&dev->st_cq_signals, 1, memory_order_relaxed);
}

static void fd_reset(pto_device *dev)
{
    uint64_t v;
    ssize_t rc;
    do
        rc = read(dev->efd, &v, sizeof(v));
    while (rc < 0 && errno == EINTR);
}

_Static_assert(sizeof(((pto_completion *)0)->message) == PTI_MSG_LEN,
               "PTI_MSG_LEN must match pto_completion.message");

void pti_cq_push(pto_device *dev, const pto_completion *c)
{
    pthread_mutex_lock(&dev->cq_lock);
    if (cq_full(dev) && !cq_grow(dev)) {
        /*
         * Host memory exhausted: block the pushing driver thread until a
         * drain makes room rather than lose a record.
         */
        while (cq_full(dev) && !cq_grow(dev)) {
            pthread_mutex_unlock(&dev->cq_lock);
            usleep(1000);
            pthread_mutex_lock(&dev->cq_lock);
        }
    }
    struct pto_cq_rec *r = &dev->cq[dev->cq_tail & dev->cq_mask];
    r->c = *c;
    dev->cq_tail++;
    atomic_fetch_add_explicit(&dev->st_cq_records, 1, memory_order_relaxed);
    if (!dev->cq_signalled) {
        dev->cq_signalled = true;
        fd_signal(dev);
    }
    bool wake = dev->cq_waiters > 0;
    pthread_mutex_unlock(&dev->cq_lock);
    /*
     * After unlocking: a waiter woken while we still held cq_lock would go
     * straight back to sleep on the mutex, and cost a second wake-up.  Its
     * predicate (the record) is in the queue already.  Pushes run under
     * sched_lock (pti_cmd_finish), which close takes before it tears the
     * queue down, so cq_cv outlives this broadcast.
     */
    if (wake)
        pthread_cond_broadcast(&dev->cq_cv);
}

void pti_cq_wake_all(pto_device *dev)
{
    pthread_mutex_lock(&dev->cq_lock);
    pthread_cond_broadcast(&dev->cq_cv);
    pthread_mutex_unlock(&dev->cq_lock);
}

int pto_cq_fd(pto_device *dev)
{
    return dev ? dev->efd : pti_error(PTO_EINVAL, "pto_cq_fd: NULL device");
}

uint32_t pto_cq_ready(pto_device *dev)
{
    if (!dev)
        return 0;
    pthread_mutex_lock(&dev->cq_lock);
    uint32_t n = (uint32_t)(dev->cq_tail - dev->cq_head);
    pthread_mutex_unlock(&dev->cq_lock);
    return n;
}

/*
 * Move up to max records into out, oldest first, and return the count.
 * With reset, the eventfd is reset when the queue is left empty; without,
 * it is left as it is (see pto_cq_drain_keep).  Never blocks on the device.
 */
static int cq_drain(pto_device *dev, pto_completion *out, uint32_t max, bool reset)
{
    uint32_t n = 0;
    pthread_mutex_lock(&dev->cq_lock);
    while (n < max && dev->cq_head != dev->cq_tail) {
        struct pto_cq_rec *r = &dev->cq[dev->cq_head & dev->cq_mask];
        out[n++] = r->c;
        dev->cq_head++;
    }
    if (reset && dev->cq_head == dev->cq_tail && dev->cq_signalled) {
        fd_reset(dev);
        dev->cq_signalled = false;
    }
    pthread_mutex_unlock(&dev->cq_lock);
    if (n)
        atomic_fetch_add_explicit(&dev->st_cq_drains, 1, memory_order_relaxed);
    return (int)n;
}

/*
 * pto_cq_drain - move up to max records into out, oldest first.
 *
 * Returns the count (0: none ready).  Resets the eventfd only when the
 * queue is left empty.  Never blocks on the device.
 */
int pto_cq_drain(pto_device *dev, pto_completion *out, uint32_t max)
{
    if (!dev || (!out && max))
        return pti_error(PTO_EINVAL, "pto_cq_drain: NULL argument");
    return cq_drain(dev, out, max, true);
}

/*
 * pto_cq_drain_keep - pto_cq_drain that never resets the eventfd.
 *
 * A signalled fd stays signalled (cq_signalled stays set), so the pushes
 * that follow write nothing either: a host that drains in line, record by
 * record, saves the read and the write a record would cost.  The fd may so
 * be readable with the queue empty; the next pto_cq_drain resets it.
 */
int pto_cq_drain_keep(pto_device *dev, pto_completion *out, uint32_t max)
{
    if (!dev || (!out && max))
        return pti_error(PTO_EINVAL, "pto_cq_drain_keep: NULL argument");
    return cq_drain(dev, out, max, false);
}

/*
 * Before a blocking wait sleeps (cq_lock held, and held again on return):
 * with the host first (engines.c), the waiting thread runs the short work
 * queued meanwhile, and the pass of a kick nobody served, itself, rather
 * than sleep while a device thread it would take turns with is woken for
 * it.  *serve: whether to try (cleared after a try that ran nothing, set
 * again by a wake-up).  True if cq_lock was let go: the caller looks for
 * records again before it sleeps (a push meanwhile broadcast to nobody).
 */
static bool host_serve(pto_device *dev, bool *serve)
{
    if (!*serve)
        return false;
    if (!atomic_load_explicit(&dev->copy_len, memory_order_relaxed) &&
        !atomic_load_explicit(&dev->core_len, memory_order_relaxed) && !pti_sched_kick_pending(dev))
        return false; /* nothing waits for a thread: what we wait for runs on a device thread */
    pthread_mutex_unlock(&dev->cq_lock);
    *serve = pti_host_serve(dev);
    pthread_mutex_lock(&dev->cq_lock);
    return true;
}

/*
 * A blocking wait's sleep (cq_lock held): until deadline (0: none), and
 * while keeps are recent at most until the waiter's next look at the kept
 * runs (engines.c, pti_kept_watch: it watches those a scheduler thread
 * keeps); *watched is set once it watched.  ETIMEDOUT only at deadline.
 */
static int cq_sleep(pto_device *dev, uint64_t deadline, bool *watched)
{
    uint64_t until = deadline;
    bool watch = pti_kept_watch(dev, &until);
    int rc = pti_cond_wait_until(&dev->cq_cv, &dev->cq_lock, until);
    if (!watch)
        return rc;
    pti_kept_unwatch(dev);
    *watched = true;
    return rc && deadline && pto_now_ns() >= deadline ? rc : 0;
}

/*
 * pto_cq_wait - block until a record is ready.
 *
 * Returns 0, -PTO_ETIMEDOUT, or -PTO_EDEVLOST / -PTO_ECLOSED when the device
 * is lost / closing and no record is ready.
 */
int pto_cq_wait(pto_device *dev, int64_t timeout_us)
{
    if (!dev)
        return pti_error(PTO_EINVAL, "pto_cq_wait: NULL device");
    uint64_t deadline = pti_deadline_after_us(timeout_us);
    int rc = 0;
    bool serve = true, watched = false;
    pthread_mutex_lock(&dev->cq_lock);
    dev->cq_waiters++;
    while (dev->cq_head == dev->cq_tail) {
        if (pti_dev_lost(dev)) {
            rc = pti_error(PTO_EDEVLOST, "pto_cq_wait: device lost");
            break;
        }
        if (atomic_load_explicit(&dev->closing, memory_order_acquire)) {
            rc = pti_error(PTO_ECLOSED, "pto_cq_wait: device is closing");
            break;
        }
        if (host_serve(dev, &serve))
            continue; /* look for records again: work may have run, on this thread or another */
        if (cq_sleep(dev, deadline, &watched)) {
            rc = pti_error(PTO_ETIMEDOUT, "pto_cq_wait: no completion within %lld us",
                           (long long)timeout_us);
            break;
        }
        serve = true;
    }
    if (watched)
        pti_kept_leave(dev); /* before cq_waiters--: close frees the device once no waiter is left */
    dev->cq_waiters--;
    pthread_mutex_unlock(&dev->cq_lock);
    return rc;
}

/*
 * pto_wait_token - block until the record for token is in the queue.
 *
 * Returns 0 and *out (the record stays queued), -PTO_ETIMEDOUT, or
 * -PTO_EDEVLOST / -PTO_ECLOSED when the device is lost / closing and the
 * record is not there.
 */
int pto_wait_token(pto_device *dev, uint64_t token, int64_t timeout_us, pto_completion *out)
{
    if (!dev || !out)
        return pti_error(PTO_EINVAL, "pto_wait_token: NULL argument");
    if (token == 0)
        return pti_error(PTO_EINVAL, "pto_wait_token: token 0 never has a record");
    uint64_t deadline = pti_deadline_after_us(timeout_us);
    int rc = 0;
    bool serve = true, watched = false;
    pthread_mutex_lock(&dev->cq_lock);
    dev->cq_waiters++;
    uint64_t scanned = dev->cq_head; /* index of the next record to look at */
    for (;;) {
        if (scanned < dev->cq_head)
            scanned = dev->cq_head;
        bool found = false;
        for (; scanned < dev->cq_tail; scanned++) {
            uint64_t i = scanned & dev->cq_mask;
            if (dev->cq[i].c.token == token) {
                *out = dev->cq[i].c;
                found = true;
                break;
            }
        }
        if (found)
            break;
        if (pti_dev_lost(dev)) {
            rc = pti_error(PTO_EDEVLOST, "pto_wait_token: device lost before token %llu completed",
                           (unsigned long long)token);
            break;
        }
        if (atomic_load_explicit(&dev->closing, memory_order_acquire)) {
            rc = pti_error(PTO_ECLOSED, "pto_wait_token: device is closing");
            break;
        }
        if (host_serve(dev, &serve))
            continue; /* look for records again: work may have run, on this thread or another */
        if (cq_sleep(dev, deadline, &watched)) {
            rc = pti_error(PTO_ETIMEDOUT, "pto_wait_token: token %llu not completed within %lld us",
                           (unsigned long long)token, (long long)timeout_us);
            break;
        }
        serve = true;
    }
    if (watched)
        pti_kept_leave(dev); /* before cq_waiters--: close frees the device once no waiter is left */
    dev->cq_waiters--;
    pthread_mutex_unlock(&dev->cq_lock);
    return rc;
}
