/*
 * hooks.c - test hooks: latches, fail-next, allocation failure, device loss.
 */
#include <stdlib.h>

#include "internal.h"

/* Returns 0 and *out, -PTO_EINVAL, -PTO_ENOMEM. */
int pto_latch_create(pto_device *dev, int64_t timeout_us, pto_latch **out)
{
    if (!dev || !out)
        return pto_error(PTO_EINVAL, "pto_latch_create: NULL argument");
    pto_latch *l = calloc(1, sizeof(*l));
    if (!l)
        return pto_error(PTO_ENOMEM, "pto_latch_create: out of host memory");
    l->dev = dev;
    l->timeout_us = timeout_us;
    atomic_init(&l->released, 0);
    atomic_init(&l->refs, 1);
    pthread_mutex_lock(&dev->obj_lock);
    pto_link_add(&dev->latches, &l->link);
    pthread_mutex_unlock(&dev->obj_lock);
    *out = l;
    return 0;
}

void pto_latch_unref(pto_latch *l)
{
    if (atomic_fetch_sub_explicit(&l->refs, 1, memory_order_acq_rel) != 1)
        return;
    pthread_mutex_lock(&l->dev->obj_lock);
    pto_link_del(&l->link);
    pthread_mutex_unlock(&l->dev->obj_lock);
    free(l);
}

/* Queue a wait on l: holds s until l is released or times out. */
int pto_stream_latch_wait(pto_stream *s, pto_latch *l, uint64_t token)
{
    if (!s)
        return pto_error(PTO_EINVAL, "pto_stream_latch_wait: NULL stream");
    if (!l || l->dev != s->dev)
        return pto_error(PTO_EINVAL, "pto_stream_latch_wait: latch is NULL or from another device");
    struct pto_cmd *cmd;
    int rc = pto_slot_begin(s, "pto_stream_latch_wait", 0, false, &cmd, NULL);
    if (rc)
        return rc;
    atomic_fetch_add_explicit(&l->refs, 1, memory_order_relaxed);
    cmd->u.latch.l = l;
    return pto_slot_commit(s, cmd, PTO_CMD_LATCH, token);
}

static void release(pto_latch *l)
{
    /* Release pairs with the acquire load in check_blocked (stream.c). */
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
    pto_sched_run(dev);
    pthread_mutex_unlock(&dev->sched_lock);
}

void pto_latch_release(pto_latch *l)
{
    if (!l)
        return;
    release_and_run(l);
}

void pto_latch_destroy(pto_latch *l)
{
    if (!l)
        return;
    release_and_run(l);
    pto_latch_unref(l);
}

void pto_latches_release_all(pto_device *dev)
{
    pthread_mutex_lock(&dev->obj_lock);
    for (struct pto_link *p = dev->latches.next; p != &dev->latches; p = p->next)
        release(PTO_CONTAINER(p, pto_latch, link));
    pthread_mutex_unlock(&dev->obj_lock);
}

/* The next count commands submitted to s fail with -status (0: PTO_EFAULT). */
int pto_debug_fail_next(pto_stream *s, int status, uint32_t count)
{
    if (!s)
        return pto_error(PTO_EINVAL, "pto_debug_fail_next: NULL stream");
    if (status < 0 || status > PTO_ENOTSUP)
        return pto_error(PTO_EINVAL, "pto_debug_fail_next: status %d is not a PTO_E* code", status);
    pthread_mutex_lock(&s->submit_lock);
    s->fail_next_status = status ? status : PTO_EFAULT;
    s->fail_next_count = count;
    pthread_mutex_unlock(&s->submit_lock);
    return 0;
}

/* The next count pto_mem_alloc calls on dev return -PTO_ENOMEM. */
int pto_debug_fail_alloc(pto_device *dev, uint32_t count)
{
    if (!dev)
        return pto_error(PTO_EINVAL, "pto_debug_fail_alloc: NULL device");
    pthread_mutex_lock(&dev->mem_lock);
    dev->fail_alloc = count;
    pthread_mutex_unlock(&dev->mem_lock);
    return 0;
}

/* Mark dev lost now; queued commands complete -PTO_EDEVLOST. */
int pto_debug_lose_device(pto_device *dev, const char *msg)
{
    if (!dev)
        return pto_error(PTO_EINVAL, "pto_debug_lose_device: NULL device");
    pthread_mutex_lock(&dev->sched_lock);
    pto_device_lose_locked(dev, 0, msg && *msg ? msg : "lost by pto_debug_lose_device");
    pthread_mutex_unlock(&dev->sched_lock);
    return 0;
}
