/*
 * lost.c - losing the device: the sticky state every phase reads.
 *
 * Phase: execution (sched_lock held).  A kernel block that fails with
 * PTO_EDEVLOST (engines.c) or pto_debug_lose_device (debug.c) marks the
 * device lost; the first cause and message win.  From then on every
 * submission and host wait returns -PTO_EDEVLOST (pti_dev_lost), and the
 * scheduler completes each queued command with -PTO_EDEVLOST and that cause
 * (pre_status, exec.c).  Waiters on host_cv, sched_cv and the completion
 * queue are woken so that none sleeps through it.
 */
#include "internal.h"

void pti_device_lose_locked(pto_device *dev, uint64_t cause, const char *msg)
{
    if (atomic_load_explicit(&dev->lost, memory_order_relaxed))
        return;
    dev->lost_cause = cause;
    pti_strlcpy(dev->lost_msg, msg, sizeof(dev->lost_msg));
    /* Release pairs with pti_dev_lost's acquire: lost_msg/lost_cause are set. */
    atomic_store_explicit(&dev->lost, 1, memory_order_release);
    pthread_cond_broadcast(&dev->host_cv);
    atomic_fetch_add(&dev->kick, 1);
    pthread_cond_broadcast(&dev->sched_cv);
    pti_cq_wake_all(dev);
}
