/*
 * trace.c - the trace buffer: a bounded ring of pto_trace_record.
 *
 * Producers are the driver threads (one record per command at completion,
 * one per launch block on its core); the host drains with pto_trace_read.
 * When the ring is full the oldest record is overwritten and counted in
 * trace_dropped.  The buffer is allocated on first use.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

const char *pto_cmd_name(uint32_t kind)
{
    static const char *const names[] = {
        "?",      "h2d",    "d2h",  "d2d",  "memset", "launch", "block",
        "record", "wait",   "free", "notify", "delay", "latch",
    };
    return kind < sizeof(names) / sizeof(names[0]) ? names[kind] : "?";
}

void pto_trace_push(pto_device *dev, const pto_trace_record *r)
{
    pthread_mutex_lock(&dev->trace_lock);
    if (!dev->trace_buf) {
        dev->trace_buf = malloc((size_t)dev->trace_cap * sizeof(*dev->trace_buf));
        if (!dev->trace_buf) {
            dev->trace_dropped++;
            pthread_mutex_unlock(&dev->trace_lock);
            return;
        }
    }
    if (dev->trace_len == dev->trace_cap) {
        dev->trace_head = (dev->trace_head + 1) % dev->trace_cap;
        dev->trace_len--;
        dev->trace_dropped++;
    }
    dev->trace_buf[(dev->trace_head + dev->trace_len) % dev->trace_cap] = *r;
    dev->trace_len++;
    pthread_mutex_unlock(&dev->trace_lock);
}

void pto_trace_fini(pto_device *dev)
{
    free(dev->trace_buf);
    dev->trace_buf = NULL;
    pthread_mutex_destroy(&dev->trace_lock);
}

void pto_trace_enable(pto_device *dev, int on)
{
    if (dev)
        atomic_store_explicit(&dev->trace_enabled, on != 0, memory_order_relaxed);
}

/* Move up to max records into out, oldest first; returns the count. */
int pto_trace_read(pto_device *dev, pto_trace_record *out, uint32_t max)
{
    if (!dev || (!out && max))
        return pto_error(PTO_EINVAL, "pto_trace_read: NULL argument");
    pthread_mutex_lock(&dev->trace_lock);
    uint32_t n = 0;
    while (n < max && dev->trace_len > 0) {
        out[n++] = dev->trace_buf[dev->trace_head];
        dev->trace_head = (dev->trace_head + 1) % dev->trace_cap;
        dev->trace_len--;
    }
    pthread_mutex_unlock(&dev->trace_lock);
    return (int)n;
}

uint64_t pto_trace_dropped(pto_device *dev)
{
    if (!dev)
        return 0;
    pthread_mutex_lock(&dev->trace_lock);
    uint64_t d = dev->trace_dropped;
    pthread_mutex_unlock(&dev->trace_lock);
    return d;
}
