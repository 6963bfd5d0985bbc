/*
 * event.c - events: recordings (nodes), host queries and waits, elapsed time.
 *
 * Phase: lifecycle and host waits, and execution for the record and wait
 * commands' rows (cmddef.c): submit.c queues them, exec.c runs them
 * through the functions at the end of this file.
 *
 * An event is a handle to its latest recording.  Each pto_stream_record
 * makes a new node (refcounted: the event, the record command, and every
 * wait queued while it was current), so re-recording never disturbs waits
 * already queued.  The record command's completion fills the node and
 * release-stores done (pti_record_finish); readers load done with acquire.
 */
#include <stdlib.h>

#include "internal.h"

struct pto_event_node *pti_event_node_new(uint64_t event_id)
{
    struct pto_event_node *n = calloc(1, sizeof(*n));
    if (!n)
        return NULL;
    atomic_init(&n->refs, 1);
    atomic_init(&n->done, 0);
    n->event_id = event_id;
    return n;
}

void pti_event_node_ref(struct pto_event_node *n)
{
    atomic_fetch_add_explicit(&n->refs, 1, memory_order_relaxed);
}

void pti_event_node_unref(struct pto_event_node *n)
{
    if (n && atomic_fetch_sub_explicit(&n->refs, 1, memory_order_acq_rel) == 1)
        free(n);
}

struct pto_event_node *pti_event_current(pto_event *e)
{
    pthread_mutex_lock(&e->dev->obj_lock);
    struct pto_event_node *n = e->cur;
    if (n)
        pti_event_node_ref(n);
    pthread_mutex_unlock(&e->dev->obj_lock);
    return n;
}

/* Returns 0 and *out, -PTO_EINVAL, -PTO_ENOMEM. */
int pto_event_create(pto_device *dev, pto_event **out)
{
    if (!dev || !out)
        return pti_error(PTO_EINVAL, "pto_event_create: NULL argument");
    pto_event *e = calloc(1, sizeof(*e));
    if (!e)
        return pti_error(PTO_ENOMEM, "pto_event_create: out of host memory");
    e->dev = dev;
    pthread_mutex_lock(&dev->obj_lock);
    e->id = ++dev->next_event_id;
    pti_link_add(&dev->events, &e->link);
    pthread_mutex_unlock(&dev->obj_lock);
    *out = e;
    return 0;
}

void pto_event_destroy(pto_event *e)
{
    if (!e)
        return;
    if (e->reserved) /* only its host sets and clears it (peer.c): waits on it must not hang */
        pti_event_abandon(e, -PTO_ECANCELED, "the event was destroyed before it was recorded");
    pthread_mutex_lock(&e->dev->obj_lock);
    pti_link_del(&e->link);
    struct pto_event_node *n = e->cur;
    e->cur = NULL;
    pthread_mutex_unlock(&e->dev->obj_lock);
    pti_event_node_unref(n);
    free(e);
}

static int node_state(const struct pto_event_node *n)
{
    if (!n)
        return 1;
    if (!atomic_load_explicit(&((struct pto_event_node *)n)->done, memory_order_acquire))
        return 0;
    return n->status ? n->status : 1;
}

/* 1 complete (or never recorded), 0 pending, < 0 the recorded work's failure. */
int pto_event_query(pto_event *e)
{
    if (!e)
        return pti_error(PTO_EINVAL, "pto_event_query: NULL event");
    struct pto_event_node *n = pti_event_current(e);
    int st = node_state(n);
    if (st < 0)
        pti_error(-st, "event %llu: %s", (unsigned long long)e->id, n->msg);
    pti_event_node_unref(n);
    return st;
}

/*
 * pto_event_synchronize - block until e's current recording completes.
 *
 * Returns what pto_event_query then says, -PTO_ETIMEDOUT, or -PTO_EDEVLOST.
 */
int pto_event_synchronize(pto_event *e, int64_t timeout_us)
{
    if (!e)
        return pti_error(PTO_EINVAL, "pto_event_synchronize: NULL event");
    pto_device *dev = e->dev;
    struct pto_event_node *n = pti_event_current(e);
    uint64_t deadline = pti_deadline_after_us(timeout_us);
    int rc;
    pthread_mutex_lock(&dev->sched_lock);
    dev->host_waiters++;
    for (;;) {
        rc = node_state(n);
        if (rc != 0)
            break;
        if (pti_dev_lost(dev)) {
            rc = pti_error(PTO_EDEVLOST, "pto_event_synchronize: device lost: %s", dev->lost_msg);
            break;
        }
        if (pti_cond_wait_until(&dev->host_cv, &dev->sched_lock, deadline)) {
            rc = node_state(n);
            if (rc == 0)
                rc = pti_error(PTO_ETIMEDOUT, "pto_event_synchronize: event %llu not complete within %lld us",
                               (unsigned long long)e->id, (long long)timeout_us);
            break;
        }
    }
    dev->host_waiters--;
    pthread_mutex_unlock(&dev->sched_lock);
    if (rc < 0 && rc != -PTO_ETIMEDOUT && rc != -PTO_EDEVLOST && n)
        pti_error(-rc, "event %llu: %s", (unsigned long long)e->id, n->msg);
    pti_event_node_unref(n);
    return rc;
}

uint64_t pto_event_timestamp_ns(const pto_event *ce)
{
    if (!ce)
        return 0;
    pto_event *e = (pto_event *)ce;
    struct pto_event_node *n = pti_event_current(e);
    uint64_t t = 0;
    if (n && atomic_load_explicit(&n->done, memory_order_acquire))
        t = n->time_ns;
    pti_event_node_unref(n);
    return t;
}

/* ms from a's completion to b's; -PTO_EAGAIN if either is not complete. */
int pto_event_elapsed_ms(const pto_event *a, const pto_event *b, double *out_ms)
{
    if (!a || !b || !out_ms)
        return pti_error(PTO_EINVAL, "pto_event_elapsed_ms: NULL argument");
    uint64_t ta = pto_event_timestamp_ns(a), tb = pto_event_timestamp_ns(b);
    if (ta == 0 || tb == 0)
        return pti_error(PTO_EAGAIN, "pto_event_elapsed_ms: event %s not complete",
                         ta == 0 ? "a" : "b");
    *out_ms = ((double)tb - (double)ta) / 1e6;
    return 0;
}

/* ---- the record and wait commands (their rows in cmddef.c) ---------------------------- */

/* A record's finish: fill its node with the outcome, then mark it done (peer waits: wake them). */
void pti_record_finish(pto_device *dev, pto_stream *s, struct pto_cmd *cmd, int32_t status, uint64_t cause,
                       uint64_t fail_id, const char *msg, uint64_t end_ns)
{
    struct pto_event_node *n = cmd->u.ev.node;
    n->status = status;
    n->cause = status ? cause : 0;
    n->fail_stream = fail_id ? s->id : 0;
    n->fail_id = (uint32_t)fail_id;
    n->time_ns = end_ns;
    pti_strlcpy(n->msg, status ? msg : "", sizeof(n->msg));
    if (n->peer_waits)
        pti_peer_complete(dev, n); /* done, then the other devices woken (peer.c) */
    else
        /* Release pairs with the acquire loads of done here and in pti_wait_poll, pre_status. */
        atomic_store_explicit(&n->done, 1, memory_order_release);
}

void pti_record_release(pto_device *dev, pto_stream *s, struct pto_cmd *cmd)
{
    pti_event_node_unref(cmd->u.ev.node);
}

/* A wait's outcome from the done node n it waited for (see pti_wait_poll). */
static void wait_outcome(struct pto_cmd *cmd, const struct pto_event_node *n, struct pto_cmd_outcome *out)
{
    if (cmd->u.ev.peer) {
        /* Another device's event (peer.c): the wait's own token is the cause here. */
        out->status = pti_peer_wait_status(n, out->msg, sizeof(out->msg));
        out->cause = out->status ? cmd->token : 0;
        out->own = out->status != 0;
    } else if (n->status != 0) {
        /*
         * The chain said once: a record behind a failure says already what it
         * depends on (exec.c's edep_msg), so the wait adds only the event it
         * came through, in front, where a short message keeps it.  Its
         * dependents repeat this message as it is (edep_msg).
         */
        if (n->status == -PTO_EDEP)
            pti_msgf(out->msg, sizeof(out->msg), PTI_VIA_EVENT "%llu, %s", (unsigned long long)n->event_id,
                     n->msg);
        else
            pti_msgf(out->msg, sizeof(out->msg), PTI_VIA_EVENT "%llu, depends on failed token %llu (%s): %s",
                     (unsigned long long)n->event_id, (unsigned long long)n->cause,
                     pto_status_name(n->status), n->msg);
        /* The wait's own failure: s fails from here on, with the event's cause. */
        out->status = -PTO_EDEP;
        out->cause = n->cause;
        out->own = true;
    }
}

/* Whether every node of the set is done, the set's cursor moved past those seen (sched_lock held). */
static bool set_done(struct pto_fence_set *fs)
{
    while (fs->next < fs->n) {
        const struct pto_event_node *n = fs->v[fs->next];
        /* Acquire pairs with the release store of done where the node was filled. */
        if (!atomic_load_explicit(&((struct pto_event_node *)n)->done, memory_order_acquire))
            return false;
        if (n->time_ns > fs->end_ns)
            fs->end_ns = n->time_ns;
        if (n->status && !fs->failed)
            fs->failed = (struct pto_event_node *)n;
        fs->next++;
    }
    return true;
}

/*
 * A wait ends once its event's node is done (none: at once), failing if the
 * recording failed; a wait on a set once every node is, failing with the
 * first failed one (in the set's order) if any.  Each poll of a set starts
 * where the last one stopped: waiting for M streams costs O(M) in all.
 */
bool pti_wait_poll(pto_device *dev, pto_stream *s, struct pto_cmd *cmd, uint64_t now,
                   struct pto_cmd_outcome *out)
{
    struct pto_fence_set *fs = cmd->u.ev.set;
    if (fs) {
        if (!set_done(fs))
            return false;
        if (fs->failed)
            wait_outcome(cmd, fs->failed, out);
        return true;
    }
    struct pto_event_node *n = cmd->u.ev.node;
    if (!n)
        return true; /* a wait on an event never recorded: nothing to wait for */
    /* Acquire pairs with the release store of done in pti_record_finish. */
    if (!atomic_load_explicit(&n->done, memory_order_acquire))
        return false;
    wait_outcome(cmd, n, out);
    return true;
}

bool pti_wait_holds(struct pto_cmd *cmd)
{
    if (cmd->u.ev.set)
        return !set_done(cmd->u.ev.set);
    /* Acquire pairs with the release store of done where the node was filled. */
    return cmd->u.ev.node && !atomic_load_explicit(&cmd->u.ev.node->done, memory_order_acquire);
}

const struct pto_event_node *pti_wait_source(const struct pto_cmd *cmd)
{
    const struct pto_event_node *n;
    if (cmd->kind == PTO_CMD_LAUNCH)
        n = cmd->u.launch.after;
    else if (cmd->u.ev.peer)
        return NULL;
    else
        n = cmd->u.ev.set ? cmd->u.ev.set->failed : cmd->u.ev.node;
    /* (A node's failure fields are written only with its status: a healthy one's are stale.) */
    return n && n->status ? n : NULL;
}

bool pti_launch_held(pto_device *dev, pto_stream *s, const struct pto_cmd *cmd)
{
    const struct pto_event_node *n = cmd->u.launch.after;
    /* Acquire pairs with the release store of done in fence_fill. */
    return n && !atomic_load_explicit(&((struct pto_event_node *)n)->done, memory_order_acquire) &&
           !pti_dev_lost(dev) && cmd->seq > s->cancel_seq;
}

int32_t pti_launch_fence_status(const struct pto_cmd *cmd, uint64_t *cause, char *msg, size_t len)
{
    const struct pto_event_node *n = cmd->u.launch.after;
    if (!n || !n->status)
        return 0;
    *cause = n->cause;
    pti_msgf(msg, len, "waits on event %llu recorded after failed token %llu: %s",
             (unsigned long long)n->event_id, (unsigned long long)n->cause, n->msg);
    return -PTO_EDEP;
}

uint64_t pti_wait_end_ns(struct pto_cmd *cmd)
{
    if (cmd->kind == PTO_CMD_LAUNCH) /* its inline fence, done before it started */
        return cmd->u.launch.after ? cmd->u.launch.after->time_ns : 0;
    struct pto_fence_set *fs = cmd->u.ev.set;
    if (fs)
        return set_done(fs) ? fs->end_ns : 0;
    struct pto_event_node *n = cmd->u.ev.node;
    /* Acquire pairs with the release store of done where the record completed. */
    return n && atomic_load_explicit(&n->done, memory_order_acquire) ? n->time_ns : 0;
}

void pti_wait_release(pto_device *dev, pto_stream *s, struct pto_cmd *cmd)
{
    struct pto_fence_set *fs = cmd->u.ev.set;
    if (!cmd->u.ev.node && !fs)
        return;
    if (fs) {
        for (uint32_t i = 0; i < fs->n; i++)
            pti_fence_unref(dev, fs->v[i]);
        free(fs);
    } else if (cmd->u.ev.node->fence) {
        pti_fence_unref(dev, cmd->u.ev.node);
    } else {
        pti_event_node_unref(cmd->u.ev.node);
    }
    /* Release pairs with the acquire load of dep_used in pti_slot_begin. */
    atomic_fetch_sub_explicit(&s->dep_used, 1, memory_order_release);
    atomic_fetch_sub_explicit(&s->waits_pending, 1, memory_order_release);
}

/* ---- fences (internal.h): a point of a stream waited for with no command on it ---------------- */

/*
 * Fill fence n of s as a record right after s's command at n->fence_seq
 * would be (sched_lock held): the device's loss, a cancel that dropped that
 * command, or the failure s carries for a command accepted at n's epoch
 * (exec.c's rule, pti_failed_for); time end_ns.  Then publish it (done).
 */
static void fence_fill(pto_device *dev, pto_stream *s, struct pto_event_node *n, bool canceled, uint64_t end_ns)
{
    uint64_t submit_ns = n->time_ns; /* (it holds its submission time: a record's time is never before that) */
    if (end_ns > n->time_ns)
        n->time_ns = end_ns;
    if (pti_dev_lost(dev)) {
        n->status = -PTO_EDEVLOST;
        n->cause = dev->lost_cause;
        n->fail_stream = 0;
        n->fail_id = 0;
        pti_msgf(n->msg, sizeof(n->msg), "device lost: %s", dev->lost_msg);
    } else if (canceled) {
        n->status = -PTO_ECANCELED;
        n->cause = 0;
        n->fail_stream = 0;
        n->fail_id = 0;
        pti_msgf(n->msg, sizeof(n->msg), "canceled before it started");
    } else if (pti_failed_for(s, n->fence_epoch)) {
        n->status = -PTO_EDEP;
        n->cause = s->fail.cause;
        n->fail_stream = s->id;
        n->fail_id = (uint32_t)s->fail.id;
        pti_msgf(n->msg, sizeof(n->msg), "depends on failed token %llu (%s): %s",
                 (unsigned long long)s->fail.cause, pto_status_name(s->fail.status), s->fail.msg);
    }
    if (pti_trace_on(dev))
        pti_trace_fence(dev, s, n, submit_ns, n->time_ns);
    /* Release pairs with the acquire loads of done in pti_wait_poll and set_done. */
    atomic_store_explicit(&n->done, 1, memory_order_release);
}

/*
 * Fence nodes a device keeps for reuse (192 bytes each, of which a healthy fence touches the
 * first 64: at most about 0.75 MB, kept only after that many fences were out at once).  Enough for a few thousand launches queued back to back
 * behind an edge each, such as two streams taking turns on a tensor: a node from malloc instead
 * costs about as much as the rest of the edge.
 */
#define FENCE_POOL_MAX 4096
#define FENCE_NODE_ALIGN 64
#define FENCE_NODE_SIZE ((sizeof(struct pto_event_node) + FENCE_NODE_ALIGN - 1) / FENCE_NODE_ALIGN * FENCE_NODE_ALIGN)
_Static_assert(offsetof(struct pto_event_node, fence_next) + sizeof(void *) <= FENCE_NODE_ALIGN,
               "a fence's hot fields fit its first cache line");

void pti_fence_unref(pto_device *dev, struct pto_event_node *n)
{
    if (atomic_fetch_sub_explicit(&n->refs, 1, memory_order_acq_rel) != 1)
        return;
    if (dev->fence_pooled >= FENCE_POOL_MAX) {
        free(n);
        return;
    }
    n->fence_next = dev->fence_pool;
    dev->fence_pool = n;
    dev->fence_pooled++;
}

void pti_fences_fini(pto_device *dev)
{
    struct pto_event_node *n;
    while ((n = dev->fence_pool)) {
        dev->fence_pool = n->fence_next;
        free(n);
    }
    dev->fence_pooled = 0;
}

/* A fence's node, from dev's pool if it has one (sched_lock held); NULL: out of memory. */
static struct pto_event_node *fence_node(pto_device *dev, uint64_t event_id)
{
    struct pto_event_node *n = dev->fence_pool;
    if (n) {
        dev->fence_pool = n->fence_next;
        dev->fence_pooled--;
        if (dev->fence_pool) /* the next call's node: taking M fences is not M dependent misses */
            __builtin_prefetch(dev->fence_pool);
    } else if (!(n = aligned_alloc(FENCE_NODE_ALIGN, FENCE_NODE_SIZE))) {
        return NULL;
    }
    /*
     * What a healthy fence's readers read: its first cache line.  The failure fields
     * (cause, fail_stream, fail_id, msg) are read only with a status set, and fence_fill
     * writes them all wherever it sets one.
     */
    atomic_init(&n->refs, 1);
    atomic_init(&n->done, 0);
    n->status = 0;
    n->event_id = event_id;
    n->peer_waits = 0;
    n->fence = true;
    n->fence_next = NULL;
    return n;
}

int pti_fences_take(pto_device *dev, pto_stream *const *srcs, const uint64_t *event_ids, uint32_t n,
                    struct pto_event_node **out)
{
    for (uint32_t i = 0; i < n; i++)
        out[i] = NULL;
    bool model = pti_model_of(dev) != NULL;
    uint64_t now = pti_submit_ns ? pti_submit_ns : pto_now_ns();
    pthread_mutex_lock(&dev->sched_lock);
    for (uint32_t i = 0; i < n; i++) {
        pto_stream *src = srcs[i];
        if (i + 4 < n) { /* what a later stream's fence reads of it, fetched while this one is taken */
            const pto_stream *ahead = srcs[i + 4];
            __builtin_prefetch(&ahead->accepted);
            __builtin_prefetch(&ahead->epoch);
            __builtin_prefetch(&ahead->head);
            __builtin_prefetch(&ahead->fence_last);
        }
        /* The last command src accepted (its ring or its overflow): every seq up to it completes. */
        uint64_t seq = atomic_load_explicit(&src->accepted, memory_order_acquire);
        uint64_t epoch = atomic_load_explicit(&src->epoch, memory_order_acquire);
        bool done = atomic_load_explicit(&src->head, memory_order_relaxed) >= seq; /* we hold sched_lock */
        if (done && !model && !pti_dev_lost(dev) && !pti_failed_for(src, epoch))
            continue; /* nothing left to wait for, nothing to carry */
        struct pto_event_node *node = fence_node(dev, event_ids[i]);
        if (!node) {
            for (uint32_t j = 0; j < i; j++) /* (a listed one is released when it fires) */
                if (out[j])
                    pti_fence_unref(dev, out[j]);
            pthread_mutex_unlock(&dev->sched_lock);
            return pti_error(PTO_ENOMEM, "out of host memory for a fence");
        }
        node->fence_seq = seq;
        node->fence_epoch = epoch;
        node->time_ns = now;
        out[i] = node;
        if (done) {
            fence_fill(dev, src, node, false, model ? src->model_end : now);
            continue;
        }
        pti_event_node_ref(node); /* the list's, dropped when it fires */
        if (src->fence_last)
            src->fence_last->fence_next = node;
        else
            src->fence_first = node;
        src->fence_last = node;
    }
    pthread_mutex_unlock(&dev->sched_lock);
    return 0;
}

void pti_fences_fire(pto_device *dev, pto_stream *s, const struct pto_cmd *cmd, int32_t status, uint64_t end_ns)
{
    bool canceled = status == -PTO_ECANCELED && cmd->seq <= s->cancel_seq;
    struct pto_event_node *n;
    while ((n = s->fence_first) && n->fence_seq <= cmd->seq) {
        s->fence_first = n->fence_next;
        if (!s->fence_first)
            s->fence_last = NULL;
        n->fence_next = NULL;
        fence_fill(dev, s, n, canceled, end_ns);
        pti_fence_unref(dev, n);
    }
}

void pti_fences_drop(pto_device *dev, pto_stream *s)
{
    struct pto_event_node *n;
    while ((n = s->fence_first)) {
        s->fence_first = n->fence_next;
        n->fence_next = NULL;
        fence_fill(dev, s, n, true, n->time_ns);
        pti_fence_unref(dev, n);
    }
    s->fence_last = NULL;
}
