/*
 * stream.c - stream rings, submission, in-order execution state, failure propagation.
 *
 * Ring invariants
 * ---------------
 * A stream is a ring of `entries` command slots (a power of two, `mask` =
 * entries - 1) with two 64-bit sequence counters that never wrap:
 *
 *     tail   seq of the last submitted command.  Written only by a producer
 *            holding s->submit_lock, with a release store after the slot and
 *            its heap bytes are filled; read with acquire by the scheduler.
 *     head   seq of the last completed command.  Written only under
 *            dev->sched_lock by pto_cmd_finish, with a release store after
 *            the last read of the slot; read with acquire by producers (room
 *            in the ring) and by host waiters.
 *
 * Command seq n lives in ring[(n - 1) & mask].  Slots (head, tail] are in
 * flight, so a submission needs tail - head < entries; pto_stream_space_left
 * is entries - (tail - head).  A third counter, accepted (>= tail), counts
 * the commands accepted: those that found no room wait in the stream's
 * overflow, seqs (tail, accepted], and enter the ring in order as room frees
 * (overflow.c).  Sequence numbers are given on acceptance, so a command's
 * seq never changes.  Commands complete strictly in order: the
 * scheduler starts ring[head & mask] only when the previous command has
 * completed, and at most one command of a stream is ever started (queued on
 * an engine, or blocked in the scheduler on a delay, latch or event).  A slot
 * is free again as soon as its command completes.
 *
 * Submission may come from several host threads: submit_lock makes each
 * stream single-producer, which the slot fill, heap_alloc and the tail
 * store rely on.  The consumer side is single too: only sched_lock holders
 * advance head, heap_freed and dep_used's releases.
 *
 * The argument heap is a byte ring of heap_size bytes with the same
 * discipline: heap_alloc (producer) and heap_freed (completion, release)
 * count bytes ever taken and given back; a reservation that would straddle
 * the end skips to offset 0 and the skipped bytes are charged to that
 * command (heap_used), so releases stay in FIFO order with the commands.
 * Event waits take one of dep_size dependency entries until they execute
 * (the entry's payload, the event node, lives in the slot).
 *
 * Failure propagation
 * -------------------
 * Each command remembers the stream's epoch when it was accepted (in the
 * ring or the overflow alike), or the earlier epoch a host that held it back
 * backdated it to (pto_stream_backdate).  When a command fails
 * on its own (kernel fail, injected fault, copy fault, latch timeout, or a
 * wait on an event that carries a failure), the stream records that first
 * failure (s->fail).  A later command fails with -PTO_EDEP (cause = the first
 * failure's token) while the failure is unobserved, or if it was accepted
 * before the observation (epoch < observed_epoch).  This is the one place the
 * rule lives: the host keeps no copy of it.  The failure is observed
 * when its record leaves the completion queue (pto_cq_drain, pto_wait_token),
 * or at once if it carries no token.  Frees on a failed stream still reclaim
 * their block; records still complete their event, carrying the failure.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* ---- submission ------------------------------------------------------------ */

int pto_ring_room(pto_stream *s, uint64_t head, uint64_t tail, uint32_t heap_len, bool dep,
                  uint32_t *used_out, uint8_t **heap_out)
{
    if (tail - head >= s->entries)
        return PTO_RING_SLOTS;
    uint32_t used = 0;
    uint8_t *heap = s->heap;
    if (heap_len > 0) {
        /* Acquire pairs with the release add of heap_freed in pto_cmd_finish. */
        uint64_t in_use = s->heap_alloc - atomic_load_explicit(&s->heap_freed, memory_order_acquire);
        uint32_t pos = (uint32_t)(s->heap_alloc % s->heap_size);
        uint32_t pad = pos + heap_len > s->heap_size ? s->heap_size - pos : 0;
        used = pad + heap_len;
        if ((uint64_t)used > s->heap_size - in_use)
            return PTO_RING_HEAP;
        heap = s->heap + (pad ? 0 : pos);
    }
    /* Acquire pairs with the release decrement of dep_used in release_resources. */
    if (dep && atomic_load_explicit(&s->dep_used, memory_order_acquire) >= s->dep_size)
        return PTO_RING_DEPS;
    *used_out = used;
    *heap_out = heap;
    return 0;
}

void pto_ring_take_dep(pto_stream *s)
{
    /*
     * Only producers (under submit_lock) increment, so pto_ring_room's check
     * still holds; the scheduler reads the command only after the tail
     * release.
     */
    uint32_t used = atomic_fetch_add_explicit(&s->dep_used, 1, memory_order_relaxed) + 1;
    if (used > s->dep_hwm)
        s->dep_hwm = used;
}

void pto_ring_charge(pto_stream *s, uint32_t used, uint64_t seq)
{
    s->heap_alloc += used;
    /* Relaxed: the two loads below only feed the high-water marks. */
    uint32_t heap_in_use =
        (uint32_t)(s->heap_alloc - atomic_load_explicit(&s->heap_freed, memory_order_relaxed));
    if (heap_in_use > s->heap_hwm)
        s->heap_hwm = heap_in_use;
    uint32_t window = (uint32_t)(seq - atomic_load_explicit(&s->head, memory_order_relaxed));
    if (window > s->window_hwm)
        s->window_hwm = window;
}

int pto_slot_begin(pto_stream *s, const char *fn, uint32_t heap_len, bool dep,
                   struct pto_cmd **cmd_out, void **heap_out)
{
    pto_device *dev = s->dev;
    if (pto_dev_lost(dev))
        return pto_error(PTO_EDEVLOST, "%s: device lost: %s", fn, dev->lost_msg);
    if (atomic_load_explicit(&dev->closing, memory_order_acquire))
        return pto_error(PTO_ECLOSED, "%s: device is closing", fn);
    if (heap_len > s->heap_size)
        return pto_error(PTO_EINVAL, "%s: %u argument bytes exceed the %u-byte ring heap", fn,
                         heap_len, s->heap_size);

    pthread_mutex_lock(&s->submit_lock);
    /* Re-check under the lock: close fences submitters by taking it. */
    if (atomic_load_explicit(&dev->closing, memory_order_acquire)) {
        pthread_mutex_unlock(&s->submit_lock);
        return pto_error(PTO_ECLOSED, "%s: device is closing", fn);
    }
    uint64_t tail = atomic_load_explicit(&s->tail, memory_order_relaxed); /* we are the producer */
    int short_of = PTO_RING_SLOTS; /* commands wait in the overflow: this one goes behind them */
    if (atomic_load_explicit(&s->accepted, memory_order_relaxed) == tail) {
        /* Acquire pairs with the release store of head in pto_cmd_finish: the slot is no longer read. */
        uint64_t head = atomic_load_explicit(&s->head, memory_order_acquire);
        uint32_t used;
        uint8_t *heap;
        short_of = pto_ring_room(s, head, tail, heap_len, dep, &used, &heap);
        if (!short_of) {
            struct pto_cmd *cmd = &s->ring[tail & s->mask];
            memset(cmd, 0, sizeof(*cmd));
            cmd->heap_used = used;
            if (dep)
                pto_ring_take_dep(s);
            s->slot_dep = dep;
            s->ovf.slot = false;
            *cmd_out = cmd;
            if (heap_out)
                *heap_out = heap;
            return 0;
        }
    }
    atomic_fetch_add_explicit(&s->eagain, 1, memory_order_relaxed);
    if (!s->ovf.on) {
        uint64_t in_use = s->heap_alloc - atomic_load_explicit(&s->heap_freed, memory_order_relaxed);
        pthread_mutex_unlock(&s->submit_lock);
        if (short_of == PTO_RING_HEAP)
            return pto_error(PTO_EAGAIN, "%s: stream %u ring heap full (%llu of %u bytes in use)", fn,
                             s->id, (unsigned long long)in_use, s->heap_size);
        if (short_of == PTO_RING_DEPS)
            return pto_error(PTO_EAGAIN, "%s: stream %u dependency pool full (%u entries)", fn, s->id,
                             s->dep_size);
        return pto_error(PTO_EAGAIN, "%s: stream %u ring full (%u commands in flight)", fn, s->id,
                         s->entries);
    }
    struct pto_ovf_ent *ent;
    int rc = pto_ovf_reserve(s, heap_len, dep, &ent);
    if (rc) {
        pthread_mutex_unlock(&s->submit_lock);
        return rc;
    }
    s->ovf.slot = true;
    s->slot_dep = false;
    *cmd_out = &ent->cmd;
    if (heap_out)
        *heap_out = pto_ovf_args(ent);
    return 0;
}

void pto_slot_abort(pto_stream *s)
{
    if (s->ovf.slot) {
        uint32_t waiting = (uint32_t)(atomic_load_explicit(&s->accepted, memory_order_relaxed) -
                                      atomic_load_explicit(&s->tail, memory_order_relaxed));
        pto_ovf_unreserve(s, &s->ovf.ents[(s->ovf.head + waiting) & (s->ovf.cap - 1)]);
        s->ovf.slot = false;
    } else if (s->slot_dep) {
        /* Nothing published used it: give the dependency entry back. */
        atomic_fetch_sub_explicit(&s->dep_used, 1, memory_order_relaxed);
    }
    s->slot_dep = false;
    pthread_mutex_unlock(&s->submit_lock);
}

void pto_stream_kick(pto_stream *s, uint64_t first)
{
    pto_device *dev = s->dev;
    uint64_t head = atomic_load(&s->head);
    if (head + 1 != first)
        return; /* busy (or already done): whoever completes first - 1 starts it */
    /*
     * The stream was idle: nothing will start the command but a scheduler
     * pass.  A spinning engine runs one on a kick (engines.c, watch_kicks):
     * one atomic increment here.  Otherwise run it here if sched_lock is
     * free, instead of waking the scheduler thread: one cross-thread
     * hand-off less on a launch's critical path.
     */
    if (atomic_load(&dev->kick_watchers) == 0 && pthread_mutex_trylock(&dev->sched_lock) == 0) {
        pto_sched_run(dev);
        pthread_mutex_unlock(&dev->sched_lock);
        return;
    }
    pto_sched_kick(dev, false);
}

int pto_slot_commit(pto_stream *s, struct pto_cmd *cmd, uint32_t kind, uint64_t token)
{
    pto_device *dev = s->dev;
    uint64_t seq = atomic_load_explicit(&s->accepted, memory_order_relaxed) + 1;
    cmd->kind = kind;
    cmd->token = token;
    cmd->seq = seq;
    cmd->state = PTO_CMD_QUEUED;
    /* Pairs with the acq_rel bump in pto_stream_observe / pto_cmd_finish (scheduler side). */
    uint64_t epoch = atomic_load_explicit(&s->epoch, memory_order_acquire);
    cmd->epoch = epoch < s->backdate ? epoch : s->backdate;
    cmd->submit_ns = pto_now_ns();
    /* An ordering-only record is a point, not a command that can fail: injections pass it by. */
    if (s->fail_next_count > 0 && !(kind == PTO_CMD_RECORD && cmd->u.ev.ordering)) {
        s->fail_next_count--;
        cmd->inject = s->fail_next_status;
    }
    s->slot_dep = false;
    if (s->ovf.slot) {
        s->ovf.slot = false;
        uint32_t waiting =
            (uint32_t)(seq - atomic_load_explicit(&s->tail, memory_order_relaxed));
        if (waiting > s->ovf.hwm)
            s->ovf.hwm = waiting;
        /* seq_cst: the submission side of the overflow hand-off (overflow.c). */
        atomic_store(&s->accepted, seq);
        uint64_t first = 0;
        uint32_t moved = pto_ovf_refill(s, &first);
        bool entered = atomic_load_explicit(&s->tail, memory_order_relaxed) == seq;
        pthread_mutex_unlock(&s->submit_lock);
        atomic_fetch_add_explicit(&dev->st_submitted, 1, memory_order_relaxed);
        if (moved)
            pto_stream_kick(s, first);
        return entered ? 0 : PTO_QUEUED;
    }
    pto_ring_charge(s, cmd->heap_used, seq);
    /* Before tail: accepted >= tail for every reader. */
    atomic_store_explicit(&s->accepted, seq, memory_order_release);
    /*
     * seq_cst, like the load of head in pto_stream_kick, the store of head in
     * pto_cmd_finish and the load of tail in pto_stream_step (a Dekker
     * pair): either the pass that completes command seq - 1 sees this tail
     * and starts this command, or the load in pto_stream_kick sees that
     * head.  (Also a release: the slot is filled.)
     */
    atomic_store(&s->tail, seq);
    pthread_mutex_unlock(&s->submit_lock);
    atomic_fetch_add_explicit(&dev->st_submitted, 1, memory_order_relaxed);
    pto_stream_kick(s, seq);
    return 0;
}

static int check_stream(const pto_stream *s, const char *fn)
{
    if (!s)
        return pto_error(PTO_EINVAL, "%s: NULL stream", fn);
    return 0;
}

static int check_dev_range(pto_stream *s, const char *fn, uint64_t addr, uint64_t n)
{
    if (n == 0 || pto_mem_in_arena(s->dev, addr, n))
        return 0;
    return pto_error(PTO_EINVAL, "%s: device range 0x%llx+%llu lies outside the device arena", fn,
                     (unsigned long long)addr, (unsigned long long)n);
}

static int submit_copy(pto_stream *s, const char *fn, uint32_t kind, uint64_t dst, uint64_t src,
                       uint64_t n, uint64_t token)
{
    struct pto_cmd *cmd;
    int rc = pto_slot_begin(s, fn, 0, false, &cmd, NULL);
    if (rc)
        return rc;
    cmd->u.copy.dst = dst;
    cmd->u.copy.src = src;
    cmd->u.copy.n = n;
    return pto_slot_commit(s, cmd, kind, token);
}

/*
 * Copies.  Rule for device ranges: a range not inside the arena is refused
 * at submit with -PTO_EINVAL (nothing queued); a range inside the arena that
 * does not lie inside one live allocation when the copy executes fails the
 * command with -PTO_EFAULT.
 */
int pto_stream_copy_h2d(pto_stream *s, pto_devptr dst, const void *src, uint64_t nbytes,
                        uint64_t token)
{
    int rc = check_stream(s, "pto_stream_copy_h2d");
    if (rc)
        return rc;
    if (nbytes && !src)
        return pto_error(PTO_EINVAL, "pto_stream_copy_h2d: NULL host pointer");
    if ((rc = check_dev_range(s, "pto_stream_copy_h2d", dst, nbytes)))
        return rc;
    return submit_copy(s, "pto_stream_copy_h2d", PTO_CMD_H2D, dst, (uint64_t)(uintptr_t)src, nbytes,
                       token);
}

int pto_stream_copy_d2h(pto_stream *s, void *dst, pto_devptr src, uint64_t nbytes, uint64_t token)
{
    int rc = check_stream(s, "pto_stream_copy_d2h");
    if (rc)
        return rc;
    if (nbytes && !dst)
        return pto_error(PTO_EINVAL, "pto_stream_copy_d2h: NULL host pointer");
    if ((rc = check_dev_range(s, "pto_stream_copy_d2h", src, nbytes)))
        return rc;
    return submit_copy(s, "pto_stream_copy_d2h", PTO_CMD_D2H, (uint64_t)(uintptr_t)dst, src, nbytes,
                       token);
}

int pto_stream_copy_d2d(pto_stream *s, pto_devptr dst, pto_devptr src, uint64_t nbytes,
                        uint64_t token)
{
    int rc = check_stream(s, "pto_stream_copy_d2d");
    if (rc)
        return rc;
    if ((rc = check_dev_range(s, "pto_stream_copy_d2d", dst, nbytes)) ||
        (rc = check_dev_range(s, "pto_stream_copy_d2d", src, nbytes)))
        return rc;
    return submit_copy(s, "pto_stream_copy_d2d", PTO_CMD_D2D, dst, src, nbytes, token);
}

int pto_stream_memset(pto_stream *s, pto_devptr dst, uint8_t value, uint64_t nbytes, uint64_t token)
{
    int rc = check_stream(s, "pto_stream_memset");
    if (rc)
        return rc;
    if ((rc = check_dev_range(s, "pto_stream_memset", dst, nbytes)))
        return rc;
    struct pto_cmd *cmd;
    if ((rc = pto_slot_begin(s, "pto_stream_memset", 0, false, &cmd, NULL)))
        return rc;
    cmd->u.set.dst = dst;
    cmd->u.set.n = nbytes;
    cmd->u.set.value = value;
    return pto_slot_commit(s, cmd, PTO_CMD_MEMSET, token);
}

int pto_stream_launch(pto_stream *s, pto_kernel *k, uint32_t blocks, const uint64_t *args,
                      uint32_t nargs, uint64_t token)
{
    int rc = check_stream(s, "pto_stream_launch");
    if (rc)
        return rc;
    if (!k || k->dev != s->dev)
        return pto_error(PTO_EINVAL, "pto_stream_launch: kernel is NULL or from another device");
    if (atomic_load_explicit(&k->unloaded, memory_order_acquire))
        return pto_error(PTO_EINVAL, "pto_stream_launch: kernel %s was unloaded", k->name);
    if (blocks == 0)
        return pto_error(PTO_EINVAL, "pto_stream_launch: blocks must be >= 1");
    if (nargs && !args)
        return pto_error(PTO_EINVAL, "pto_stream_launch: NULL args with nargs=%u", nargs);
    if ((uint64_t)nargs * 8u > s->heap_size)
        return pto_error(PTO_EINVAL, "pto_stream_launch: %u arguments exceed the %u-byte ring heap",
                         nargs, s->heap_size);
    struct pto_cmd *cmd;
    void *heap;
    if ((rc = pto_slot_begin(s, "pto_stream_launch", nargs * 8u, false, &cmd, &heap)))
        return rc;
    if (nargs)
        memcpy(heap, args, (size_t)nargs * 8u);
    pto_kernel_ref(k);
    cmd->u.launch.k = k;
    cmd->u.launch.args = heap;
    cmd->u.launch.blocks = blocks;
    cmd->u.launch.nargs = nargs;
    return pto_slot_commit(s, cmd, PTO_CMD_LAUNCH, token);
}

static int submit_record(pto_stream *s, pto_event *e, bool ordering, uint64_t token, const char *fn)
{
    int rc = check_stream(s, fn);
    if (rc)
        return rc;
    if (!e || e->dev != s->dev)
        return pto_error(PTO_EINVAL, "%s: event is NULL or from another device", fn);
    struct pto_event_node *node = pto_event_node_new(e->id);
    if (!node)
        return pto_error(PTO_ENOMEM, "pto_stream_record: out of host memory");
    struct pto_cmd *cmd;
    if ((rc = pto_slot_begin(s, fn, 0, false, &cmd, NULL))) {
        pto_event_node_unref(node);
        return rc;
    }
    /* node starts with one reference (the command's); the event takes a second. */
    pto_event_node_ref(node);
    pthread_mutex_lock(&s->dev->obj_lock);
    struct pto_event_node *old = e->cur;
    e->cur = node;
    pthread_mutex_unlock(&s->dev->obj_lock);
    if (old)
        pto_event_node_unref(old);
    cmd->u.ev.node = node;
    cmd->u.ev.event_id = e->id;
    cmd->u.ev.ordering = ordering;
    return pto_slot_commit(s, cmd, PTO_CMD_RECORD, token);
}

int pto_stream_record(pto_stream *s, pto_event *e, uint64_t token)
{
    return submit_record(s, e, false, token, "pto_stream_record");
}

int pto_stream_record_ordering(pto_stream *s, pto_event *e, uint64_t token)
{
    return submit_record(s, e, true, token, "pto_stream_record_ordering");
}

int pto_stream_wait_event(pto_stream *s, pto_event *e, uint64_t token)
{
    const char *fn = "pto_stream_wait_event";
    int rc = check_stream(s, fn);
    if (rc)
        return rc;
    if (!e || e->dev != s->dev)
        return pto_error(PTO_EINVAL, "%s: event is NULL or from another device", fn);
    struct pto_event_node *node = pto_event_current(e);
    struct pto_cmd *cmd;
    if ((rc = pto_slot_begin(s, fn, 0, node != NULL, &cmd, NULL))) {
        if (node)
            pto_event_node_unref(node);
        return rc;
    }
    cmd->u.ev.node = node; /* the reference taken above moves to the command */
    cmd->u.ev.event_id = e->id;
    if (node)
        /* Its dependency entry was taken with the slot (or is, on entering the ring). */
        atomic_fetch_add_explicit(&s->waits_pending, 1, memory_order_relaxed);
    return pto_slot_commit(s, cmd, PTO_CMD_WAIT, token);
}

int pto_stream_free(pto_stream *s, pto_devptr ptr, uint64_t token)
{
    int rc = check_stream(s, "pto_stream_free");
    if (rc)
        return rc;
    struct pto_cmd *cmd;
    if ((rc = pto_slot_begin(s, "pto_stream_free", 0, false, &cmd, NULL)))
        return rc;
    /*
     * Under submit_lock no wait can be added concurrently; acquire pairs with
     * the release decrement in release_resources (a wait that executed).
     */
    bool local_ok = atomic_load_explicit(&s->waits_pending, memory_order_acquire) == 0;
    struct pto_pending_free *pf;
    if ((rc = pto_mem_pend_free(s->dev, s, ptr, local_ok, &pf))) {
        pto_slot_abort(s);
        return rc;
    }
    cmd->u.free.pf = pf;
    cmd->u.free.ptr = ptr;
    return pto_slot_commit(s, cmd, PTO_CMD_FREE, token);
}

int pto_stream_notify(pto_stream *s, uint64_t token)
{
    int rc = check_stream(s, "pto_stream_notify");
    if (rc)
        return rc;
    struct pto_cmd *cmd;
    if ((rc = pto_slot_begin(s, "pto_stream_notify", 0, false, &cmd, NULL)))
        return rc;
    return pto_slot_commit(s, cmd, PTO_CMD_NOTIFY, token);
}

int pto_stream_delay(pto_stream *s, uint64_t delay_us, uint64_t token)
{
    int rc = check_stream(s, "pto_stream_delay");
    if (rc)
        return rc;
    struct pto_cmd *cmd;
    if ((rc = pto_slot_begin(s, "pto_stream_delay", 0, false, &cmd, NULL)))
        return rc;
    cmd->u.delay.us = delay_us;
    return pto_slot_commit(s, cmd, PTO_CMD_DELAY, token);
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

/* ---- streams ---------------------------------------------------------------- */

/* Insert s into dev->order: priority descending, then id ascending (sched_lock held). */
static void order_insert(pto_device *dev, pto_stream *s)
{
    size_t i = dev->n_streams; /* n_streams already counts s in streams[], not in order[] */
    size_t n = i - 1;
    size_t pos = n;
    for (size_t j = 0; j < n; j++) {
        if (dev->order[j]->priority < s->priority) {
            pos = j;
            break;
        }
    }
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
        return pto_error(PTO_EINVAL, "pto_stream_create: NULL argument");
    if (pto_dev_lost(dev))
        return pto_error(PTO_EDEVLOST, "pto_stream_create: device lost: %s", dev->lost_msg);
    if (atomic_load(&dev->closing))
        return pto_error(PTO_ECLOSED, "pto_stream_create: device is closing");
    pto_stream *s = pto_zalloc64(sizeof(*s));
    if (!s)
        return pto_error(PTO_ENOMEM, "pto_stream_create: out of host memory");
    s->dev = dev;
    s->priority = priority;
    s->entries = dev->cfg.ring_task_window;
    s->mask = s->entries - 1;
    s->heap_size = dev->cfg.ring_heap & ~7u;
    s->dep_size = dev->cfg.ring_dep_pool;
    s->ring = calloc(s->entries, sizeof(*s->ring));
    s->heap = malloc(s->heap_size ? s->heap_size : 8);
    if (!s->ring || !s->heap) {
        free(s->ring);
        free(s->heap);
        free(s);
        return pto_error(PTO_ENOMEM, "pto_stream_create: out of host memory");
    }
    pto_mutex_init(&s->submit_lock);
    pto_link_init(&s->pending);
    atomic_init(&s->tail, 0);
    atomic_init(&s->accepted, 0);
    atomic_init(&s->head, 0);
    atomic_init(&s->heap_freed, 0);
    atomic_init(&s->dep_used, 0);
    atomic_init(&s->waits_pending, 0);
    atomic_init(&s->epoch, 0);
    atomic_init(&s->eagain, 0);
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
            free(s->ring);
            free(s->heap);
            free(s);
            return pto_error(PTO_ENOMEM, "pto_stream_create: out of host memory");
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

void pto_stream_free_now(pto_device *dev, pto_stream *s)
{
    size_t n = dev->n_streams;
    for (size_t i = 0; i < n; i++) {
        if (dev->streams[i] == s) {
            memmove(&dev->streams[i], &dev->streams[i + 1], (n - i - 1) * sizeof(*dev->streams));
            break;
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (dev->order[i] == s) {
            memmove(&dev->order[i], &dev->order[i + 1], (n - i - 1) * sizeof(*dev->order));
            break;
        }
    }
    dev->n_streams = n - 1;
    pto_ovf_fini(s);
    pthread_mutex_destroy(&s->submit_lock);
    free(s->ring);
    free(s->heap);
    free(s);
}

void pto_streams_reap(pto_device *dev)
{
    dev->reap = false;
    for (size_t i = 0; i < dev->n_streams;) {
        pto_stream *s = dev->streams[i];
        if (s->destroyed && pto_stream_idle(s))
            pto_stream_free_now(dev, s); /* shifts streams[i + 1..] down */
        else
            i++;
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
    if (pto_stream_idle(s))
        pto_stream_free_now(dev, s);
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
    /* Acquire pairs with the release store of head in pto_cmd_finish. */
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
    /* Pairs with the acq_rel bump in pto_stream_observe / pto_cmd_finish. */
    return s ? atomic_load_explicit(&((pto_stream *)s)->epoch, memory_order_acquire) : 0;
}

int pto_stream_backdate(pto_stream *s, uint64_t epoch)
{
    if (!s)
        return pto_error(PTO_EINVAL, "pto_stream_backdate: NULL stream");
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
    /* Acquire pairs with the release store of head in pto_cmd_finish: the record is pushed. */
    return s ? atomic_load_explicit(&((pto_stream *)s)->head, memory_order_acquire) : 0;
}

int pto_stream_get_stats(const pto_stream *cs, pto_stream_stats *out)
{
    if (!cs || !out)
        return pto_error(PTO_EINVAL, "pto_stream_get_stats: NULL argument");
    pto_stream *s = (pto_stream *)cs;
    pthread_mutex_lock(&s->submit_lock);
    uint64_t tail = atomic_load_explicit(&s->tail, memory_order_relaxed);
    uint64_t accepted = atomic_load_explicit(&s->accepted, memory_order_relaxed);
    uint64_t head = atomic_load_explicit(&s->head, memory_order_acquire);
    *out = (pto_stream_stats){
        .id = s->id,
        .priority = s->priority,
        .entries = s->entries,
        .in_flight = (uint32_t)(tail - head),
        .window_hwm = s->window_hwm,
        .heap_bytes = s->heap_size,
        .heap_hwm = s->heap_hwm,
        .dep_entries = s->dep_size,
        .dep_hwm = s->dep_hwm,
        .overflow = (uint32_t)(accepted - tail),
        .overflow_hwm = s->ovf.hwm,
        .submitted = accepted,
        .completed = head,
        .eagain = atomic_load_explicit(&s->eagain, memory_order_relaxed),
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
        return pto_error(PTO_EINVAL, "pto_stream_synchronize: NULL stream");
    pto_device *dev = s->dev;
    uint64_t deadline = pto_deadline_after_us(timeout_us);
    uint64_t target = atomic_load_explicit(&s->accepted, memory_order_acquire);
    int rc = 0;
    pthread_mutex_lock(&dev->sched_lock);
    dev->host_waiters++;
    for (;;) {
        if (pto_dev_lost(dev)) {
            rc = pto_error(PTO_EDEVLOST, "pto_stream_synchronize: device lost: %s", dev->lost_msg);
            break;
        }
        uint64_t head = atomic_load_explicit(&s->head, memory_order_relaxed);
        if (head >= target)
            break;
        if (pto_cond_wait_until(&dev->host_cv, &dev->sched_lock, deadline)) {
            rc = pto_error(PTO_ETIMEDOUT,
                           "pto_stream_synchronize: stream %u timed out at %llu of %llu completed",
                           s->id, (unsigned long long)head, (unsigned long long)target);
            break;
        }
    }
    dev->host_waiters--;
    pthread_mutex_unlock(&dev->sched_lock);
    return rc;
}

/* ---- execution (sched_lock held from here on) ------------------------------ */

static bool failed_for(const pto_stream *s, const struct pto_cmd *cmd)
{
    return s->fail.set && (!s->fail.observed || cmd->epoch < s->fail.observed_epoch);
}

static void release_resources(pto_device *dev, pto_stream *s, struct pto_cmd *cmd)
{
    switch (cmd->kind) {
    case PTO_CMD_LAUNCH:
        pto_kernel_unref(cmd->u.launch.k);
        break;
    case PTO_CMD_RECORD:
        pto_event_node_unref(cmd->u.ev.node);
        break;
    case PTO_CMD_WAIT:
        if (cmd->u.ev.node) {
            pto_event_node_unref(cmd->u.ev.node);
            /* Release pairs with the acquire load of dep_used in pto_slot_begin. */
            atomic_fetch_sub_explicit(&s->dep_used, 1, memory_order_release);
            atomic_fetch_sub_explicit(&s->waits_pending, 1, memory_order_release);
        }
        break;
    case PTO_CMD_FREE:
        /* Reclaimed whatever the outcome: a failed or canceled stream must not leak. */
        pto_mem_reclaim(dev, cmd->u.free.pf);
        break;
    case PTO_CMD_LATCH:
        pto_latch_unref(cmd->u.latch.l);
        break;
    default:
        break;
    }
    if (cmd->heap_used)
        /* Release pairs with the acquire load of heap_freed in pto_slot_begin. */
        atomic_fetch_add_explicit(&s->heap_freed, cmd->heap_used, memory_order_release);
}

static void trace_cmd(pto_device *dev, pto_stream *s, struct pto_cmd *cmd, int32_t status,
                      uint64_t start_ns, uint64_t end_ns, int32_t engine)
{
    pto_trace_record r;
    memset(&r, 0, sizeof(r));
    r.token = cmd->token;
    r.seq = cmd->seq;
    r.submit_ns = cmd->submit_ns;
    r.start_ns = start_ns;
    r.end_ns = end_ns;
    r.stream_id = s->id;
    r.engine = engine;
    r.kind = cmd->kind;
    r.status = status;
    switch (cmd->kind) {
    case PTO_CMD_H2D:
    case PTO_CMD_D2H:
    case PTO_CMD_D2D:
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
    if (cmd->kind == PTO_CMD_LAUNCH)
        pto_strlcpy(r.name, cmd->u.launch.k->name, sizeof(r.name));
    else
        pto_strlcpy(r.name, pto_cmd_name(cmd->kind), sizeof(r.name));
    pto_trace_push(dev, &r);
}

void pto_cmd_finish(pto_device *dev, pto_stream *s, struct pto_cmd *cmd, int32_t status,
                    uint64_t cause, const char *msg, bool own, uint64_t start_ns, uint64_t end_ns,
                    int32_t engine)
{
    uint64_t fail_id = 0;
    if (status != 0 && own) {
        /* The command's own failure: the first failure of the stream from now on. */
        if (status != -PTO_EDEP)
            cause = cmd->token;
        s->fail.set = true;
        s->fail.observed = false;
        s->fail.status = status;
        s->fail.cause = cause;
        s->fail.id = ++s->fail_ids;
        s->fail.seq = cmd->seq;
        pto_strlcpy(s->fail.msg, msg, sizeof(s->fail.msg));
        fail_id = s->fail.id;
        if (cmd->token == 0) {
            /* Nobody can drain a record that is never pushed: observed now. */
            s->fail.observed = true;
            s->fail.observed_epoch = atomic_fetch_add_explicit(&s->epoch, 1, memory_order_acq_rel) + 1;
        }
    }
    if (cmd->kind == PTO_CMD_RECORD) {
        struct pto_event_node *n = cmd->u.ev.node;
        n->status = status;
        n->cause = status ? cause : 0;
        n->time_ns = end_ns;
        pto_strlcpy(n->msg, status ? msg : "", sizeof(n->msg));
        /* Release pairs with the acquire loads of done in event.c and pto_stream_step. */
        atomic_store_explicit(&n->done, 1, memory_order_release);
    }
    /* The record is built now (the slot may be refilled once head moves) and pushed after. */
    pto_completion c;
    uint64_t token = cmd->token;
    if (token) {
        c.token = cmd->token;
        c.status = status;
        c.stream_id = s->id;
        c.seq = cmd->seq;
        c.submit_ns = cmd->submit_ns;
        c.start_ns = start_ns;
        c.end_ns = end_ns;
        c.cause_token = status ? cause : 0;
        c.flags = fail_id ? PTO_CQ_FIRST_FAILURE : 0;
        c.reserved = 0;
        pto_strlcpy(c.message, status ? msg : "", sizeof(c.message));
    }
    if (pto_trace_on(dev))
        trace_cmd(dev, s, cmd, status, start_ns, end_ns, engine);
    if (status == -PTO_ECANCELED)
        atomic_fetch_add_explicit(&dev->st_canceled, 1, memory_order_relaxed);
    release_resources(dev, s, cmd);
    cmd->state = PTO_CMD_QUEUED;
    s->active = false;
    /*
     * Release pairs with the acquire loads of head in pto_slot_begin (the slot
     * may be refilled after this store: nothing below reads cmd).  seq_cst for
     * pto_slot_commit's hand-off: our caller's next pass loads tail.
     */
    atomic_store(&s->head, cmd->seq);
    atomic_fetch_add_explicit(&dev->st_completed, 1, memory_order_relaxed);
    /*
     * seq_cst: the completion side of the overflow hand-off (overflow.c).
     * Refilled before the record is pushed, so a host that drains it finds
     * the room it announces taken by the backlog already.
     */
    if (pto_ovf_due(s)) {
        uint64_t first;
        pthread_mutex_lock(&s->submit_lock);
        pto_ovf_refill(s, &first);
        pthread_mutex_unlock(&s->submit_lock);
    }
    /*
     * Pushed after head moved: whoever drains the record sees the command
     * completed (pto_stream_completed, pto_stream_space_left), so a host that
     * refills a full ring on each drained record never finds it still full.
     */
    if (token)
        pto_cq_push(dev, &c, fail_id);
    if (dev->host_waiters)
        pthread_cond_broadcast(&dev->host_cv);
    if (s->destroyed && pto_stream_idle(s))
        dev->reap = true;
    /*
     * s's next command may be startable now.  Whoever called us runs
     * scheduler passes next: the scheduler's own pass reports progress and
     * rescans, an engine calls pto_sched_run, a host-side cancel kicks once
     * at its end.
     */
    (void)engine;
}

void pto_stream_observe(pto_device *dev, uint32_t stream_id, uint64_t fail_id)
{
    /* streams[] is sorted by id: creation order, removals keep the order. */
    size_t lo = 0, hi = dev->n_streams;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (dev->streams[mid]->id < stream_id)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == dev->n_streams || dev->streams[lo]->id != stream_id)
        return;
    pto_stream *s = dev->streams[lo];
    if (s->fail.set && s->fail.id == fail_id && !s->fail.observed) {
        s->fail.observed = true;
        s->fail.observed_epoch = atomic_fetch_add_explicit(&s->epoch, 1, memory_order_acq_rel) + 1;
    }
}

static void edep_msg(char *buf, size_t n, const pto_stream *s)
{
    pto_msgf(buf, n, "depends on failed token %llu (%s): %s", (unsigned long long)s->fail.cause,
             pto_status_name(s->fail.status), s->fail.msg);
}

/* Finish cmd with no work done: status decided before it ran. */
static void finish_now(pto_device *dev, pto_stream *s, struct pto_cmd *cmd, int32_t status,
                       uint64_t cause, const char *msg, bool own, uint64_t now)
{
    uint64_t start = cmd->state == PTO_CMD_BLOCKED ? cmd->start_ns : now;
    pto_cmd_finish(dev, s, cmd, status, cause, msg, own, start, now, PTO_ENGINE_NONE);
}

/*
 * The status cmd must complete with before (or instead of) running: lost
 * device, cancel, earlier failure, injected fault.  0: run it.
 */
static int32_t pre_status(pto_device *dev, pto_stream *s, struct pto_cmd *cmd, uint64_t *cause,
                          char *msg, size_t n, bool *own)
{
    *own = false;
    *cause = 0;
    if (pto_dev_lost(dev)) {
        *cause = dev->lost_cause;
        pto_msgf(msg, n, "device lost: %s", dev->lost_msg);
        return -PTO_EDEVLOST;
    }
    if (cmd->seq <= s->cancel_seq) {
        pto_msgf(msg, n, "canceled before it started");
        return -PTO_ECANCELED;
    }
    if (cmd->canceled) {
        pto_msgf(msg, n, "withdrawn while it waited for ring room");
        return -PTO_ECANCELED;
    }
    if (failed_for(s, cmd)) {
        /* An ordering-only record completes its event healthy: it marks a point, not a result. */
        if (cmd->kind == PTO_CMD_RECORD && cmd->u.ev.ordering)
            return 0;
        /*
         * A wait still waits for its event before failing: what follows it on
         * this stream (a stream-ordered free above all) was ordered behind the
         * other stream's work, and must stay so even on a failed stream.
         */
        if (cmd->kind == PTO_CMD_WAIT && cmd->u.ev.node &&
            /* Acquire pairs with the release store of done in pto_cmd_finish. */
            !atomic_load_explicit(&cmd->u.ev.node->done, memory_order_acquire))
            return 0;
        *cause = s->fail.cause;
        edep_msg(msg, n, s);
        return -PTO_EDEP;
    }
    if (cmd->inject > 0 && cmd->state == PTO_CMD_QUEUED) {
        *own = true;
        pto_msgf(msg, n, "injected failure (pto_debug_fail_next): %s", pto_status_name(cmd->inject));
        return -cmd->inject;
    }
    return 0;
}

/* Try to finish a started scheduler-side command; true if it finished. */
static bool check_blocked(pto_device *dev, pto_stream *s, struct pto_cmd *cmd, uint64_t now,
                          uint64_t *next_deadline)
{
    char msg[PTO_MSG_LEN];
    switch (cmd->kind) {
    case PTO_CMD_WAIT: {
        struct pto_event_node *n = cmd->u.ev.node;
        /* Acquire pairs with the release store of done in pto_cmd_finish. */
        if (!atomic_load_explicit(&n->done, memory_order_acquire))
            return false;
        if (n->status == 0) {
            finish_now(dev, s, cmd, 0, 0, NULL, false, now);
        } else {
            pto_msgf(msg, sizeof(msg), "waits on event %llu recorded after failed token %llu: %s",
                     (unsigned long long)n->event_id, (unsigned long long)n->cause, n->msg);
            /* The wait's own failure: s fails from here on, with the event's cause. */
            finish_now(dev, s, cmd, -PTO_EDEP, n->cause, msg, true, now);
        }
        return true;
    }
    case PTO_CMD_DELAY:
        if (now >= cmd->deadline_ns) {
            finish_now(dev, s, cmd, 0, 0, NULL, false, now);
            return true;
        }
        break;
    case PTO_CMD_LATCH:
        /* Acquire pairs with the release store in pto_latch_release. */
        if (atomic_load_explicit(&cmd->u.latch.l->released, memory_order_acquire)) {
            finish_now(dev, s, cmd, 0, 0, NULL, false, now);
            return true;
        }
        if (cmd->deadline_ns && now >= cmd->deadline_ns) {
            pto_msgf(msg, sizeof(msg), "latch wait timed out after %lld us",
                     (long long)cmd->u.latch.l->timeout_us);
            finish_now(dev, s, cmd, -PTO_ETIMEDOUT, 0, msg, true, now);
            return true;
        }
        break;
    default:
        return false;
    }
    if (cmd->deadline_ns && (*next_deadline == 0 || cmd->deadline_ns < *next_deadline))
        *next_deadline = cmd->deadline_ns;
    return false;
}

bool pto_stream_step(pto_device *dev, pto_stream *s, uint64_t now, uint64_t *next_deadline)
{
    if (s->active)
        return false;
    uint64_t head = atomic_load_explicit(&s->head, memory_order_relaxed); /* we are the consumer */
    /* seq_cst, an acquire of the slot too: see pto_slot_commit. */
    uint64_t tail = atomic_load(&s->tail);
    if (head == tail)
        return false;
    struct pto_cmd *cmd = &s->ring[head & s->mask];
    char msg[PTO_MSG_LEN];
    uint64_t cause;
    bool own;
    int32_t st = pre_status(dev, s, cmd, &cause, msg, sizeof(msg), &own);
    if (st) {
        finish_now(dev, s, cmd, st, cause, msg, own, now);
        return true;
    }
    if (cmd->state == PTO_CMD_BLOCKED)
        return check_blocked(dev, s, cmd, now, next_deadline);

    cmd->start_ns = now;
    switch (cmd->kind) {
    case PTO_CMD_H2D:
    case PTO_CMD_D2H:
    case PTO_CMD_D2D:
    case PTO_CMD_MEMSET:
        cmd->state = PTO_CMD_RUNNING;
        s->active = true;
        pto_copy_enqueue(dev, s, cmd);
        return true;
    case PTO_CMD_LAUNCH:
        cmd->state = PTO_CMD_RUNNING;
        s->active = true;
        pto_core_enqueue(dev, s, cmd);
        return true;
    case PTO_CMD_RECORD:
    case PTO_CMD_FREE:
    case PTO_CMD_NOTIFY:
        pto_cmd_finish(dev, s, cmd, 0, 0, NULL, false, now, now, PTO_ENGINE_NONE);
        return true;
    case PTO_CMD_WAIT:
        if (!cmd->u.ev.node) {
            pto_cmd_finish(dev, s, cmd, 0, 0, NULL, false, now, now, PTO_ENGINE_NONE);
            return true;
        }
        cmd->state = PTO_CMD_BLOCKED;
        break;
    case PTO_CMD_DELAY:
        cmd->deadline_ns = now + cmd->u.delay.us * 1000ull;
        cmd->state = PTO_CMD_BLOCKED;
        break;
    case PTO_CMD_LATCH: {
        int64_t t = cmd->u.latch.l->timeout_us;
        cmd->deadline_ns = t > 0 ? now + (uint64_t)t * 1000ull : 0;
        cmd->state = PTO_CMD_BLOCKED;
        break;
    }
    default:
        pto_msgf(msg, sizeof(msg), "unknown command kind %u", cmd->kind);
        pto_cmd_finish(dev, s, cmd, -PTO_EINVAL, 0, msg, true, now, now, PTO_ENGINE_NONE);
        return true;
    }
    check_blocked(dev, s, cmd, now, next_deadline);
    return true; /* started: progress even if still blocked */
}

void pto_stream_drop_canceled(pto_device *dev, pto_stream *s)
{
    uint64_t now = pto_now_ns();
    while (!s->active) {
        uint64_t head = atomic_load_explicit(&s->head, memory_order_relaxed);
        uint64_t tail = atomic_load_explicit(&s->tail, memory_order_acquire);
        if (head == tail || head + 1 > s->cancel_seq)
            break;
        struct pto_cmd *cmd = &s->ring[head & s->mask];
        finish_now(dev, s, cmd, -PTO_ECANCELED, 0, "canceled before it started", false, now);
    }
}

int pto_stream_cancel_locked(pto_device *dev, pto_stream *s)
{
    uint64_t head = atomic_load_explicit(&s->head, memory_order_relaxed);
    /* The overflow too: its commands enter the ring as the canceled ones ahead leave it. */
    uint64_t accepted = atomic_load_explicit(&s->accepted, memory_order_acquire);
    int n = (int)(accepted - head) - (s->active ? 1 : 0);
    if (n <= 0)
        return 0;
    if (accepted > s->cancel_seq)
        s->cancel_seq = accepted;
    pto_stream_drop_canceled(dev, s);
    return n;
}
