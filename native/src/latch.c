/*
 * latch.c - latches: host-released gates that hold streams (a test hook).
 *
 * Phase: lifecycle and execution.  A latch is refcounted: the host handle
 * holds one reference and every queued pto_stream_latch_wait another (taken
 * at submit, submit.c; dropped at completion, pti_latch_release), so
 * destroying a latch never frees it under a queued wait.  The scheduler
 * checks a started latch wait on each pass (pti_latch_poll, its row in
 * cmddef.c); releasing one runs the passes it enables from the releasing
 * thread.
 */
#include <stdlib.h>

#include "internal.h"

/* Returns 0 and *out, -PTO_EINVAL, -PTO_ENOMEM. */
int pto_latch_create(pto_device *dev, int64_t timeout_us, pto_latch **out)
{
    if (!dev || !out)
        return pti_error(PTO_EINVAL, "pto_latch_create: NULL argument");
    pto_latch *l = calloc(1, sizeof(*l));
    if (!l)
        return pti_error(PTO_ENOMEM, "pto_latch_create: out of host memory");
    l->dev = dev;
    l->timeout_us = timeout_us;
    atomic_init(&l->released, 0);
    atomic_init(&l->refs, 1);
    atomic_init(&l->expired, 0);
    pthread_mutex_lock(&dev->obj_lock);
    pti_link_add(&dev->latches, &l->link);
    pthread_mutex_unlock(&dev->obj_lock);
    *out = l;
    return 0;
}

void pti_latch_unref(pto_latch *l)
{
    if (atomic_fetch_sub_explicit(&l->refs, 1, memory_order_acq_rel) != 1)
        return;
    pthread_mutex_lock(&l->dev->obj_lock);
    pti_link_del(&l->link);
    pthread_mutex_unlock(&l->dev->obj_lock);
    free(l);
}

static void release(pto_latch *l)
{
    /* Release pairs with the acquire load in pti_latch_poll. */
    atomic_store_explicit(&l->released, 1, memory_order_release);
}

/*
 * Release under sched_lock and run the passes it enables from here: no pass
 * can be half-way through the streams when the latch opens, so the streams
 * it held move on in priority order, and no thread needs waking to start
 * them.
 */
static void release_and_run(pto_latch *l)
{
    pto_device *dev = l->dev;
    pthread_mutex_lock(&dev->sched_lock);
    release(l);
    pti_sched_run(dev);
    pthread_mutex_unlock(&dev->sched_lock);
}

void pto_latch_release(pto_latch *l)
{
    if (!l)
        return;
    release_and_run(l);
}

/*
 * pto_latch_expired - how many waits on l timed out instead of being released.
 *
 * Returns that count (0 for NULL).  Taken under sched_lock, so it is final
 * for l once pto_latch_release returned: a released latch never expires.
 */
int pto_latch_expired(pto_latch *l)
{
    if (!l)
        return 0;
    pthread_mutex_lock(&l->dev->sched_lock);
    int n = atomic_load_explicit(&l->expired, memory_order_relaxed);
    pthread_mutex_unlock(&l->dev->sched_lock);
    return n;
}

void pto_latch_destroy(pto_latch *l)
{
    if (!l)
        return;
    release_and_run(l);
    pti_latch_unref(l);
}

void pti_latches_release_all(pto_device *dev)
{
    pthread_mutex_lock(&dev->obj_lock);
    for (struct pto_link *p = dev->latches.next; p != &dev->latches; p = p->next)
        release(PTI_CONTAINER(p, pto_latch, link));
    pthread_mutex_unlock(&dev->obj_lock);
}

/* ---- the latch-wait command (its row in cmddef.c) ------------------------------------ */

/* Arm the wait's timeout (none when the latch has none). */
void pti_latch_start(pto_device *dev, pto_stream *s, struct pto_cmd *cmd)
{
    int64_t t = cmd->u.latch.l->timeout_us;
    cmd->deadline_ns = t > 0 ? cmd->start_ns + (uint64_t)t * 1000ull : 0;
}

/* The wait ends when the latch is released, or fails with -PTO_ETIMEDOUT at its deadline. */
bool pti_latch_poll(pto_device *dev, pto_stream *s, struct pto_cmd *cmd, uint64_t now,
                    struct pto_cmd_outcome *out)
{
    pto_latch *l = cmd->u.latch.l;
    /* Acquire pairs with the release store in pto_latch_release. */
    if (atomic_load_explicit(&l->released, memory_order_acquire))
        return true;
    if (!cmd->deadline_ns || now < cmd->deadline_ns)
        return false;
    pti_msgf(out->msg, sizeof(out->msg), "latch wait timed out after %lld us", (long long)l->timeout_us);
    atomic_fetch_add_explicit(&l->expired, 1, memory_order_relaxed);
    out->status = -PTO_ETIMEDOUT;
    out->own = true;
    return true;
}

void pti_latch_release(pto_device *dev, pto_stream *s, struct pto_cmd *cmd)
{
    pti_latch_unref(cmd->u.latch.l);
}
