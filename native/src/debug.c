/*
 * debug.c - fault injectors for tests: fail the next commands, fail
 * allocations, lose the device.
 *
 * Phase: submission (they arm state that submissions and allocations read).
 * An armed pto_debug_fail_next is consumed as commands are accepted
 * (pti_slot_commit, submit.c) and fires when the command is started
 * (pre_status, exec.c); pto_debug_fail_alloc is consumed by pto_mem_alloc.
 */
#include "internal.h"

/* The next count commands submitted to s fail with -status (0: PTO_EFAULT). */
int pto_debug_fail_next(pto_stream *s, int status, uint32_t count)
{
    if (!s)
        return pti_error(PTO_EINVAL, "pto_debug_fail_next: NULL stream");
    if (status < 0 || status > PTO_ENOTSUP)
        return pti_error(PTO_EINVAL, "pto_debug_fail_next: status %d is not a PTO_E* code", status);
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
        return pti_error(PTO_EINVAL, "pto_debug_fail_alloc: NULL device");
    pthread_mutex_lock(&dev->mem_lock);
    dev->fail_alloc = count;
    pthread_mutex_unlock(&dev->mem_lock);
    return 0;
}

/* Mark dev lost now; queued commands complete -PTO_EDEVLOST. */
int pto_debug_lose_device(pto_device *dev, const char *msg)
{
    if (!dev)
        return pti_error(PTO_EINVAL, "pto_debug_lose_device: NULL device");
    pthread_mutex_lock(&dev->sched_lock);
    pti_device_lose_locked(dev, 0, msg && *msg ? msg : "lost by pto_debug_lose_device");
    pthread_mutex_unlock(&dev->sched_lock);
    return 0;
}
