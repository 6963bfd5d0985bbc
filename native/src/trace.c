/*
 * trace.c - the trace buffer: a bounded ring of pto_trace_record.
 *
 * Phase: execution (producers) and host reads.  Producers are the driver
 * threads, through pti_trace_cmd: one record per command at completion
 * (exec.c), one per launch block on its core (engines.c); the host drains
 * with pto_trace_read.
 * The ring follows internal.h's scheme: trace_head counts the records ever
 * read or dropped, trace_tail those ever pushed; it keeps exactly
 * trace_entries records (the configured trace_capacity, any number, so
 * record i lives in trace_buf[i % trace_entries] and there is no mask).
 * When the ring is full the oldest record is overwritten and counted in
 * trace_dropped.  The buffer is allocated on first use.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"


void pti_trace_push(pto_device *dev, const pto_trace_record *r)
{
    pthread_mutex_lock(&dev->trace_lock);
    if (!dev->trace_buf) {
        dev->trace_buf = malloc((size_t)dev->trace_entries * sizeof(*dev->trace_buf));
        if (!dev->trace_buf) {
            dev->trace_dropped++;
            pthread_mutex_unlock(&dev->trace_lock);
            return;
        }
    }
    if (dev->trace_tail - dev->trace_head == dev->trace_entries) {
        dev->trace_head++;
        dev->trace_dropped++;
    }
    dev->trace_buf[dev->trace_tail % dev->trace_entries] = *r;
    dev->trace_tail++;
    pthread_mutex_unlock(&dev->trace_lock);
}

void pti_trace_cmd(pto_device *dev, const pto_stream *s, const struct pto_cmd *cmd, int64_t block,
                   int32_t status, const struct pto_when *w)
{
    pto_trace_record r;
    memset(&r, 0, sizeof(r));
    r.token = cmd->token;
    r.seq = cmd->seq;
    r.submit_ns = cmd->submit_ns;
    r.start_ns = w->start_ns;
    r.end_ns = w->end_ns;
    r.dispatch_ns = w->dispatch_ns;
    r.host_start_ns = w->host_start_ns;
    r.host_end_ns = w->host_end_ns;
    r.host_engine = w->host_engine;
    r.stream_id = s->id;
    r.engine = w->engine;
    r.kind = block == PTI_TRACE_WHOLE ? cmd->kind : PTO_CMD_BLOCK;
    r.block = block == PTI_TRACE_WHOLE ? 0 : (uint32_t)block;
    r.status = status;
    switch (cmd->kind) {
    case PTO_CMD_H2D:
    case PTO_CMD_D2H:
    case PTO_CMD_D2D:
    case PTO_CMD_PEER:
        r.bytes = cmd->u.copy.n;
        break;
    case PTO_CMD_MEMSET:
        r.bytes = cmd->u.set.n;
        break;
    case PTO_CMD_RECORD:
    case PTO_CMD_WAIT:
        r.event_id = cmd->u.ev.event_id;
        break;
    default:
        break;
    }
    /* Its kind's row names it (cmddef.c): a launch or a program by its own name. */
    const struct pto_cmd_def *def = pti_cmd_def(cmd->kind);
    const char *name = !def ? "?" : def->trace_name ? def->trace_name(cmd) : def->name;
    pti_strlcpy(r.name, name, sizeof(r.name));
    pti_trace_push(dev, &r);
    /* A wait-many: one record per point it waited for, so that each has its arrow. */
    const struct pto_fence_set *fs = cmd->kind == PTO_CMD_WAIT ? cmd->u.ev.set : NULL;
    for (uint32_t i = 1; fs && i < fs->n; i++) {
        r.event_id = fs->v[i]->event_id;
        pti_trace_push(dev, &r);
    }
}

void pti_trace_fence(pto_device *dev, const pto_stream *s, const struct pto_event_node *n, uint64_t submit_ns,
                     uint64_t end_ns)
{
    pto_trace_record r;
    memset(&r, 0, sizeof(r));
    r.seq = n->fence_seq;
    r.submit_ns = submit_ns;
    r.start_ns = r.end_ns = end_ns;
    r.host_start_ns = r.host_end_ns = pto_now_ns();
    r.dispatch_ns = end_ns;
    r.host_engine = r.engine = PTO_ENGINE_NONE;
    r.stream_id = s->id;
    r.kind = PTO_CMD_RECORD;
    r.status = n->status;
    r.event_id = n->event_id;
    pti_strlcpy(r.name, "record", sizeof(r.name));
    pti_trace_push(dev, &r);
}

void pti_trace_fini(pto_device *dev)
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
        return pti_error(PTO_EINVAL, "pto_trace_read: NULL argument");
    pthread_mutex_lock(&dev->trace_lock);
    uint32_t n = 0;
    while (n < max && dev->trace_head != dev->trace_tail) {
        out[n++] = dev->trace_buf[dev->trace_head % dev->trace_entries];
        dev->trace_head++;
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
