/*
 * stream.c - stream lifecycle: create, destroy and reap; accessors, stats
 * and host waits; marking a failure observed.
 *
 * Phase: lifecycle.  A stream lives in dev->streams (by id: creation order)
 * and dev->order (the scan order: priority, then id), both under
 * sched_lock.  pto_stream_destroy never waits: a stream with commands left
 * is marked destroyed and freed by whoever completes its last one (reap).
 * pto_completion_observe is the host's half of the failure rule (exec.c,
 * "Failure propagation"): the host delivered a failure to its user, and the
 * stream's epoch moves on.  Draining records never does.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* dev->order's sort key: priority descending, then id ascending. */
static uint64_t order_key_of(const pto_stream *s)
{
    return (uint64_t)((int64_t)INT32_MAX - s->priority) << 32 | s->id;
}

static uint64_t order_key(const void *v, size_t i)
{
    return order_key_of(((pto_stream *const *)v)[i]);
}

/* Insert s into dev->order by a binary search (sched_lock held); O(1) moves when it goes last. */
static void order_insert(pto_device *dev, pto_stream *s)
{
    size_t n = dev->n_streams - 1; /* n_streams already counts s in streams[], not in order[] */
    size_t pos = pti_bound(dev->order, n, order_key, order_key_of(s), true);
    memmove(&dev->order[pos + 1], &dev->order[pos], (n - pos) * sizeof(*dev->order));
    dev->order[pos] = s;
}

/*
 * pto_stream_create - create a stream.
 *
 * Returns 0 and *out, -PTO_EINVAL, -PTO_ENOMEM, -PTO_EDEVLOST, -PTO_ECLOSED.
 */
int pto_stream_create(pto_device *dev, int priority, pto_stream **out)
{
    if (!dev || !out)
        return pti_error(PTO_EINVAL, "pto_stream_create: NULL argument");
    if (pti_dev_lost(dev))
        return pti_error(PTO_EDEVLOST, "pto_stream_create: device lost: %s", dev->lost_msg);
    if (atomic_load(&dev->closing))
        return pti_error(PTO_ECLOSED, "pto_stream_create: device is closing");
    pto_stream *s = pti_zalloc64(sizeof(*s));
    if (!s)
        return pti_error(PTO_ENOMEM, "pto_stream_create: out of host memory");
    s->dev = dev;
    s->priority = priority;
    s->entries = dev->cfg.ring_task_window;
    s->mask = s->entries - 1;
    s->heap_size = dev->cfg.ring_heap & ~7u;
    s->dep_size = dev->cfg.ring_dep_pool;
    /* The ring and its heap come with the first submission (pti_ring_alloc): an idle stream is small. */
    pti_mutex_init(&s->submit_lock);
    pti_link_init(&s->pending);
    pti_link_init(&s->doomed);
    atomic_init(&s->tail, 0);
    atomic_init(&s->accepted, 0);
    atomic_init(&s->head, 0);
    atomic_init(&s->heap_freed, 0);
    atomic_init(&s->dep_used, 0);
    atomic_init(&s->waits_pending, 0);
    atomic_init(&s->epoch, 0);
    atomic_init(&s->refused, 0);
    s->backdate = PTO_EPOCH_NOW;
    s->ovf.refill = s->entries / 4 ? s->entries / 4 : 1;

    pthread_mutex_lock(&dev->sched_lock);
    if (dev->n_streams == dev->cap_streams) {
        size_t ncap = dev->cap_streams ? dev->cap_streams * 2 : 16;
        pto_stream **ns = realloc(dev->streams, ncap * sizeof(*ns));
        if (ns)
            dev->streams = ns;
        pto_stream **no = ns ? realloc(dev->order, ncap * sizeof(*no)) : NULL;
        if (no)
            dev->order = no;
        if (!ns || !no) {
            pthread_mutex_unlock(&dev->sched_lock);
            pthread_mutex_destroy(&s->submit_lock);
            free(s);
            return pti_error(PTO_ENOMEM, "pto_stream_create: out of host memory");
        }
        dev->cap_streams = ncap;
    }
    s->id = ++dev->next_stream_id;
    dev->streams[dev->n_streams++] = s;
    order_insert(dev, s);
    pthread_mutex_unlock(&dev->sched_lock);
    *out = s;
    return 0;
}

static uint64_t stream_id_at(const void *v, size_t i)
{
    return ((pto_stream *const *)v)[i]->id;
}

void pti_stream_free_now(pto_device *dev, pto_stream *s)
{
    pti_sched_forget(dev, s);
    size_t n = dev->n_streams;
    /* Both tables are sorted (streams[] by id, order[] by order_key): binary searches. */
    size_t i = pti_bound(dev->streams, n, stream_id_at, s->id, false);
    if (i < n && dev->streams[i] == s)
        memmove(&dev->streams[i], &dev->streams[i + 1], (n - i - 1) * sizeof(*dev->streams));
    size_t j = pti_bound(dev->order, n, order_key, order_key_of(s), false);
    if (j < n && dev->order[j] == s)
        memmove(&dev->order[j], &dev->order[j + 1], (n - j - 1) * sizeof(*dev->order));
    dev->n_streams = n - 1;
    pti_link_del(&s->doomed);
    if (s->fence_first)
        pti_fences_drop(dev, s); /* (a device closing: what waits for them is dropped too) */
    pti_ovf_fini(s);
    pthread_mutex_destroy(&s->submit_lock);
    pti_ring_free(s);
    pti_model_stream_free(s);
    free(s);
}

void pti_streams_reap(pto_device *dev)
{
    dev->reap = false;
    /* Only streams destroyed with work left: O(those), not O(streams open). */
    for (struct pto_link *l = dev->doomed.next; l != &dev->doomed;) {
        pto_stream *s = PTI_CONTAINER(l, pto_stream, doomed);
        l = l->next;
        if (pti_stream_idle(s))
            pti_stream_free_now(dev, s); /* unlinks s */
    }
}

/* Destroy s once its ring drains; never blocks. */
void pto_stream_destroy(pto_stream *s)
{
    if (!s)
        return;
    pto_device *dev = s->dev;
    pthread_mutex_lock(&dev->sched_lock);
    s->destroyed = true;
    if (pti_stream_idle(s))
        pti_stream_free_now(dev, s);
    else
        pti_link_add(&dev->doomed, &s->doomed);
    pthread_mutex_unlock(&dev->sched_lock);
}

uint32_t pto_stream_id(const pto_stream *s)
{
    return s ? s->id : 0;
}

uint32_t pto_stream_space_left(const pto_stream *s)
{
    if (!s)
        return 0;
    /* Acquire pairs with the release store of head in pti_cmd_finish. */
    uint64_t head = atomic_load_explicit(&((pto_stream *)s)->head, memory_order_acquire);
    uint64_t tail = atomic_load_explicit(&((pto_stream *)s)->tail, memory_order_acquire);
    return s->entries - (uint32_t)(tail - head);
}

uint64_t pto_stream_accepted(const pto_stream *s)
{
    return s ? atomic_load_explicit(&((pto_stream *)s)->accepted, memory_order_acquire) : 0;
}

uint64_t pto_stream_epoch(const pto_stream *s)
{
    /* Pairs with the acq_rel bump in pti_stream_observe. */
    return s ? atomic_load_explicit(&((pto_stream *)s)->epoch, memory_order_acquire) : 0;
}

int pto_stream_backdate(pto_stream *s, uint64_t epoch)
{
    if (!s)
        return pti_error(PTO_EINVAL, "pto_stream_backdate: NULL stream");
    pthread_mutex_lock(&s->submit_lock);
    s->backdate = epoch;
    pthread_mutex_unlock(&s->submit_lock);
    return 0;
}

uint64_t pto_stream_submitted(const pto_stream *s)
{
    return s ? atomic_load_explicit(&((pto_stream *)s)->tail, memory_order_acquire) : 0;
}

uint64_t pto_stream_completed(const pto_stream *s)
{
    /* Acquire pairs with the release store of head in pti_cmd_finish: the record is pushed. */
    return s ? atomic_load_explicit(&((pto_stream *)s)->head, memory_order_acquire) : 0;
}

int pto_stream_get_stats(const pto_stream *cs, pto_stream_stats *out)
{
    if (!cs || !out)
        return pti_error(PTO_EINVAL, "pto_stream_get_stats: NULL argument");
    pto_stream *s = (pto_stream *)cs;
    pthread_mutex_lock(&s->submit_lock);
    uint64_t tail = atomic_load_explicit(&s->tail, memory_order_relaxed);
    uint64_t accepted = atomic_load_explicit(&s->accepted, memory_order_relaxed);
    uint64_t head = atomic_load_explicit(&s->head, memory_order_acquire);
    *out = (pto_stream_stats){
        .id = s->id,
        .priority = s->priority,
        .window = s->entries,
        .in_flight = (uint32_t)(tail - head),
        .window_hwm = s->window_hwm,
        .heap_bytes = s->heap_size,
        .heap_hwm = s->heap_hwm,
        .dep_entries = s->dep_size,
        .dep_hwm = s->dep_hwm,
        .overflow = (uint32_t)(accepted - tail),
        .overflow_hwm = s->ovf.hwm,
        .ring_allocated = s->ring != NULL,
        .submitted = accepted,
        .completed = head,
        .refused = atomic_load_explicit(&s->refused, memory_order_relaxed),
        .refills = s->ovf.refills,
    };
    pthread_mutex_unlock(&s->submit_lock);
    return 0;
}

/*
 * pto_stream_synchronize - wait for everything queued on s so far.
 *
 * Returns 0, -PTO_ETIMEDOUT, -PTO_EDEVLOST.
 */
int pto_stream_synchronize(pto_stream *s, int64_t timeout_us)
{
    if (!s)
        return pti_error(PTO_EINVAL, "pto_stream_synchronize: NULL stream");
    pto_device *dev = s->dev;
    uint64_t deadline = pti_deadline_after_us(timeout_us);
    uint64_t target = atomic_load_explicit(&s->accepted, memory_order_acquire);
    int rc = 0;
    pthread_mutex_lock(&dev->sched_lock);
    dev->host_waiters++;
    for (;;) {
        if (pti_dev_lost(dev)) {
            rc = pti_error(PTO_EDEVLOST, "pto_stream_synchronize: device lost: %s", dev->lost_msg);
            break;
        }
        uint64_t head = atomic_load_explicit(&s->head, memory_order_relaxed);
        if (head >= target)
            break;
        if (pti_cond_wait_until(&dev->host_cv, &dev->sched_lock, deadline)) {
            rc = pti_error(PTO_ETIMEDOUT,
                           "pto_stream_synchronize: stream %u timed out at %llu of %llu completed",
                           s->id, (unsigned long long)head, (unsigned long long)target);
            break;
        }
    }
    dev->host_waiters--;
    pthread_mutex_unlock(&dev->sched_lock);
    return rc;
}

pto_stream *pti_stream_find(pto_device *dev, uint32_t id)
{
    /* streams[] is sorted by id: creation order, removals keep the order. */
    size_t i = pti_bound(dev->streams, dev->n_streams, stream_id_at, id, false);
    return i < dev->n_streams && dev->streams[i]->id == id ? dev->streams[i] : NULL;
}

bool pti_stream_observe(pto_device *dev, uint32_t stream_id, uint32_t fail_id)
{
    bool now = false;
    /* Along the chain of waits it came through; each link names an older failure. */
    for (size_t hops = 0; fail_id && hops <= dev->n_streams; hops++) {
        pto_stream *s = pti_stream_find(dev, stream_id);
        if (!s || !s->fail.set || (uint32_t)s->fail.id != fail_id || s->fail.observed)
            break;
        s->fail.observed = true;
        s->fail.observed_epoch = atomic_fetch_add_explicit(&s->epoch, 1, memory_order_acq_rel) + 1;
        now |= hops == 0;
        stream_id = s->fail.from_stream;
        fail_id = s->fail.from_id;
    }
    return now;
}

/*
 * pto_completion_observe - the host delivered the failure of record c.
 *
 * Observes the failure c names (c->fail_id on stream c->stream_id) if it is
 * still that stream's and unobserved: commands accepted on the stream from
 * now on run normally; those accepted before still fail as dependents.
 * A failure that came from another stream's through an event wait observes
 * that one too, and so on along the chain (each link is in c's causal past,
 * so this does not depend on timing either); another device's is not.
 * Returns 1 if it observed the failure now, 0 if there was nothing to
 * observe (a success, a cancel, a lost device, a failure observed already
 * or superseded, a stream gone), -PTO_EINVAL for a NULL argument.
 */
int pto_completion_observe(pto_device *dev, const pto_completion *c)
{
    if (!dev || !c)
        return pti_error(PTO_EINVAL, "pto_completion_observe: NULL argument");
    if (c->status == 0 || c->fail_id == 0)
        return 0;
    pthread_mutex_lock(&dev->sched_lock);
    bool now = pti_stream_observe(dev, c->stream_id, c->fail_id);
    pthread_mutex_unlock(&dev->sched_lock);
    return now ? 1 : 0;
}
