/*
 * submit.c - submission: the producer side of a stream (any host thread).
 *
 * Phase: submission.  pti_slot_begin takes submit_lock and reserves a ring
 * slot (ring.c) or, when the ring has no room and the stream accepts it, an
 * overflow entry (overflow.c); the pto_stream_<command> functions fill it;
 * pti_slot_commit gives it its sequence number and failure epoch, publishes
 * it and, if the stream was idle, hands it to a scheduler pass
 * (pti_stream_kick).  Nothing here waits: a full ring is -PTO_EAGAIN or an
 * overflow entry.  What happens to a command once published is in exec.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "pto_program.h"

/*
 * A batch (pti_batch_begin .. pti_batch_end, a graph replay's run of
 * commands on one stream): the thread holds s->submit_lock across the
 * batch's slots instead of taking it per slot, publishes each tail with a
 * release store (one seq_cst fence for the batch, at its end) and counts
 * its submissions once.  Its commits queue no kick (pti_stream_kick_deferred
 * gives the one), so nothing under the lock takes another lock.
 */
_Thread_local pto_stream *pti_batch_stream __attribute__((tls_model("initial-exec"))) = NULL;
static _Thread_local uint32_t batch_submitted __attribute__((tls_model("initial-exec")));

static inline bool in_batch(const pto_stream *s)
{
    return pti_batch_stream == s;
}

static inline void slot_unlock(pto_stream *s)
{
    if (!in_batch(s))
        pthread_mutex_unlock(&s->submit_lock);
}

void pti_batch_begin(pto_stream *s)
{
    pthread_mutex_lock(&s->submit_lock);
    s->slot_locks++;
    pti_batch_stream = s;
    batch_submitted = 0;
}

void pti_batch_end(pto_stream *s)
{
    /*
     * seq_cst fence: the batch's release stores of tail, then this, then the
     * deferred kick's seq_cst load of head: the Dekker pair of
     * pti_slot_commit, for the whole batch.
     */
    atomic_thread_fence(memory_order_seq_cst);
    pti_batch_stream = NULL;
    pthread_mutex_unlock(&s->submit_lock);
    if (batch_submitted)
        atomic_fetch_add_explicit(&s->dev->st_submitted, batch_submitted, memory_order_relaxed);
    batch_submitted = 0;
}

bool pti_slot_run_begin(pto_stream *s, struct pto_slot_run *r)
{
    pto_device *dev = s->dev;
    if (!in_batch(s) || !s->ring || pti_dev_lost(dev) || atomic_load_explicit(&dev->closing, memory_order_acquire))
        return false;
    uint64_t tail = atomic_load_explicit(&s->tail, memory_order_relaxed); /* we are the producer */
    if (atomic_load_explicit(&s->accepted, memory_order_relaxed) != tail)
        return false; /* commands wait in the overflow: the run goes behind them, one at a time */
    r->s = s;
    /* Acquire: as pti_slot_begin's (the slots and heap bytes before them are no longer read). */
    r->head = atomic_load_explicit(&s->head, memory_order_acquire);
    r->freed = atomic_load_explicit(&s->heap_freed, memory_order_acquire);
    r->pos = (uint32_t)(s->heap_alloc % s->heap_size);
    r->first = tail + 1;
    r->seq = tail;
    /* Pairs with the acq_rel bump in pti_stream_observe; the whole run is accepted now. */
    uint64_t epoch = atomic_load_explicit(&s->epoch, memory_order_acquire);
    r->epoch = epoch < s->backdate ? epoch : s->backdate;
    r->submit_ns = pti_submit_ns ? pti_submit_ns : pto_now_ns();
    return true;
}

void pti_slot_run_end(struct pto_slot_run *r)
{
    pto_stream *s = r->s;
    if (r->seq < r->first)
        return;
    pti_ring_charge(s, 0, r->seq); /* heap_alloc advanced by pti_slot_run_add: the high-water marks */
    /* Before tail: accepted >= tail for every reader. */
    atomic_store_explicit(&s->accepted, r->seq, memory_order_release);
    /* Release: the slots are filled; the batch's end fences for the Dekker pair (pti_batch_end). */
    atomic_store_explicit(&s->tail, r->seq, memory_order_release);
    if (!s->kick_first)
        s->kick_first = r->first;
    batch_submitted += (uint32_t)(r->seq - r->first + 1);
}

int pti_slot_begin(pto_stream *s, const char *fn, uint32_t heap_len, bool dep,
                   struct pto_cmd **cmd_out, void **heap_out)
{
    pto_device *dev = s->dev;
    if (pti_dev_lost(dev))
        return pti_error(PTO_EDEVLOST, "%s: device lost: %s", fn, dev->lost_msg);
    if (atomic_load_explicit(&dev->closing, memory_order_acquire))
        return pti_error(PTO_ECLOSED, "%s: device is closing", fn);
    if (heap_len > s->heap_size)
        return pti_error(PTO_EINVAL, "%s: %u argument bytes exceed the %u-byte ring heap", fn,
                         heap_len, s->heap_size);

    if (!in_batch(s)) {
        pthread_mutex_lock(&s->submit_lock);
        s->slot_locks++;
    }
    /* Re-check under the lock: close fences submitters by taking it. */
    if (atomic_load_explicit(&dev->closing, memory_order_acquire)) {
        slot_unlock(s);
        return pti_error(PTO_ECLOSED, "%s: device is closing", fn);
    }
    if (!s->ring && pti_ring_alloc(s)) {
        slot_unlock(s);
        return pti_error(PTO_ENOMEM, "%s: out of host memory for stream %u's ring", fn, s->id);
    }
    uint64_t tail = atomic_load_explicit(&s->tail, memory_order_relaxed); /* we are the producer */
    int short_of = PTI_RING_SLOTS; /* commands wait in the overflow: this one goes behind them */
    if (atomic_load_explicit(&s->accepted, memory_order_relaxed) == tail) {
        /* Acquire pairs with the release store of head in pti_cmd_finish: the slot is no longer read. */
        uint64_t head = atomic_load_explicit(&s->head, memory_order_acquire);
        uint32_t used;
        uint8_t *heap;
        short_of = pti_ring_room(s, head, tail, heap_len, dep, &used, &heap);
        if (!short_of) {
            struct pto_cmd *cmd = &s->ring[tail & s->mask];
            memset(cmd, 0, sizeof(*cmd));
            cmd->heap_used = used;
            if (dep)
                pti_ring_take_dep(s);
            s->slot_dep = dep;
            s->ovf.slot = false;
            *cmd_out = cmd;
            if (heap_out)
                *heap_out = heap;
            return 0;
        }
    }
    atomic_fetch_add_explicit(&s->refused, 1, memory_order_relaxed);
    if (!s->ovf.on) {
        uint64_t in_use = s->heap_alloc - atomic_load_explicit(&s->heap_freed, memory_order_relaxed);
        slot_unlock(s);
        if (short_of == PTI_RING_HEAP)
            return pti_error(PTO_EAGAIN, "%s: stream %u ring heap full (%llu of %u bytes in use)", fn,
                             s->id, (unsigned long long)in_use, s->heap_size);
        if (short_of == PTI_RING_DEPS)
            return pti_error(PTO_EAGAIN, "%s: stream %u dependency pool full (%u entries)", fn, s->id,
                             s->dep_size);
        return pti_error(PTO_EAGAIN, "%s: stream %u ring full (%u commands in flight)", fn, s->id,
                         s->entries);
    }
    struct pto_ovf_ent *ent;
    int rc = pti_ovf_reserve(s, heap_len, dep, &ent);
    if (rc) {
        slot_unlock(s);
        return rc;
    }
    s->ovf.slot = true;
    s->slot_dep = false;
    *cmd_out = &ent->cmd;
    if (heap_out)
        *heap_out = pti_ovf_args(ent);
    return 0;
}

void pti_slot_abort(pto_stream *s)
{
    if (s->ovf.slot) {
        uint32_t waiting = (uint32_t)(atomic_load_explicit(&s->accepted, memory_order_relaxed) -
                                      atomic_load_explicit(&s->tail, memory_order_relaxed));
        pti_ovf_unreserve(s, &s->ovf.ents[(s->ovf.head + waiting) & (s->ovf.cap - 1)]);
        s->ovf.slot = false;
    } else if (s->slot_dep) {
        /* Nothing published used it: give the dependency entry back. */
        atomic_fetch_sub_explicit(&s->dep_used, 1, memory_order_relaxed);
    }
    s->slot_dep = false;
    slot_unlock(s);
}

void pti_stream_kick(pto_stream *s, uint64_t first)
{
    pto_device *dev = s->dev;
    uint64_t head = atomic_load(&s->head);
    if (head + 1 != first)
        return; /* busy (or already done): whoever completes first - 1 starts it */
    /*
     * The stream was idle: nothing will start the command but a scheduler
     * pass.  Run it here if sched_lock is free: the pass hands the command
     * to its engine queue, where an idle engine (spinning or woken) takes it.
     * Only if the lock is held, kick: a spinning engine runs the pass
     * (engines.c, watch_kicks), else the scheduler thread is woken.  Leaving
     * the pass to a spinner even when the lock is free would add a
     * hand-off, and on a loaded host the spinner, which yields its CPU
     * while it watches, may not be running.  Either way the pass finds s
     * by its doorbell (sched.c): passes visit only streams with work.
     */
    pti_sched_ring(s);
    /*
     * Not for a command whose start is host work of its own (its row's
     * slow_start: a program), which the submitting thread should not pay for.
     * (s->ring[head & mask] is the command this thread just queued: seq head + 1.)
     */
    /*
     * Under submit_lock: every slot is written under it, and once the command
     * ran an overflow refill may reuse its slot (then the kind read here is a
     * later command's, which only makes this choice less exact).
     */
    pthread_mutex_lock(&s->submit_lock);
    const struct pto_cmd *c = &s->ring[head & s->mask];
    const struct pto_cmd_def *def = pti_cmd_def(c->kind);
    /*
     * A quick program (pti_program_quick: a small table of tiny tasks)
     * starts here, in a few microseconds, when the host may come first: its
     * tasks are then this thread's to run (pti_host_end).  Host first off,
     * its start stays the scheduler thread's, which runs them.
     */
    bool slow = def && def->slow_start &&
                !(c->kind == PTO_CMD_PROGRAM && c->u.prog.quick && pti_host_may_first(dev));
    pthread_mutex_unlock(&s->submit_lock);
    if (!slow && pthread_mutex_trylock(&dev->sched_lock) == 0) {
        /*
         * Host first (engines.c): with no CPU spare for the host, this thread
         * runs the short work the pass queues itself, rather than waking an
         * engine it would take turns with; the record is queued on return.
         * Whether a CPU is spare is asked after the pass, and only if it
         * queued engine work (pti_host_end): its pushes wake nobody until then.
         */
        bool host = pti_host_may_first(dev);
        if (host)
            pti_host_begin(dev);
        pti_sched_run(dev);
        pthread_mutex_unlock(&dev->sched_lock);
        if (host)
            pti_host_end(dev, (uint64_t)dev->cfg.inline_us * 1000ull);
        return;
    }
    pti_sched_kick(dev, false);
}

int pti_slot_commit(pto_stream *s, struct pto_cmd *cmd, uint32_t kind, uint64_t token)
{
    pto_device *dev = s->dev;
    uint64_t seq = atomic_load_explicit(&s->accepted, memory_order_relaxed) + 1;
    cmd->kind = kind;
    cmd->token = token;
    cmd->quiet = pti_quiet || cmd->quiet;
    cmd->seq = seq;
    cmd->state = PTI_CMD_QUEUED;
    /* Pairs with the acq_rel bump in pti_stream_observe. */
    uint64_t epoch = atomic_load_explicit(&s->epoch, memory_order_acquire);
    cmd->epoch = epoch < s->backdate ? epoch : s->backdate;
    cmd->submit_ns = pti_submit_ns ? pti_submit_ns : pto_now_ns(); /* a graph replay reads it once */
    /*
     * An ordering-only record is a point, not a command that can fail, and an
     * inferred edge is not the user's command: injections pass them by.
     */
    if (s->fail_next_count > 0 && !cmd->edge && !(kind == PTO_CMD_RECORD && cmd->u.ev.ordering)) {
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
        uint32_t moved = pti_ovf_refill(s, &first);
        bool entered = atomic_load_explicit(&s->tail, memory_order_relaxed) == seq;
        if (in_batch(s)) {
            /* The batch's deferred kick starts what moved (kick_deferred kicks head + 1). */
            if (moved && !s->kick_first)
                s->kick_first = first;
            batch_submitted++;
            return entered ? 0 : PTO_QUEUED;
        }
        pthread_mutex_unlock(&s->submit_lock);
        atomic_fetch_add_explicit(&dev->st_submitted, 1, memory_order_relaxed);
        if (moved)
            pti_stream_kick(s, first);
        return entered ? 0 : PTO_QUEUED;
    }
    pti_ring_charge(s, cmd->heap_used, seq);
    /* Before tail: accepted >= tail for every reader. */
    atomic_store_explicit(&s->accepted, seq, memory_order_release);
    /*
     * seq_cst, like the load of head in pti_stream_kick, the store of head in
     * pti_cmd_finish and the load of tail in pti_stream_step (a Dekker
     * pair): either the pass that completes command seq - 1 sees this tail
     * and starts this command, or the load in pti_stream_kick sees that
     * head.  (Also a release: the slot is filled.)
     */
    if (in_batch(s)) {
        /* Release: the slot is filled; the batch's end fences for the Dekker pair (pti_batch_end). */
        atomic_store_explicit(&s->tail, seq, memory_order_release);
        if (!s->kick_first)
            s->kick_first = seq;
        batch_submitted++;
        return 0;
    }
    atomic_store(&s->tail, seq);
    bool defer = pti_defer_kicks;
    if (defer && !s->kick_first)
        s->kick_first = seq;
    pthread_mutex_unlock(&s->submit_lock);
    atomic_fetch_add_explicit(&dev->st_submitted, 1, memory_order_relaxed);
    if (!defer)
        pti_stream_kick(s, seq);
    return 0;
}

void pti_stream_kick_deferred(pto_stream *s)
{
    pthread_mutex_lock(&s->submit_lock);
    uint64_t first = s->kick_first;
    s->kick_first = 0;
    uint64_t tail = atomic_load_explicit(&s->tail, memory_order_relaxed); /* we are the producer */
    pthread_mutex_unlock(&s->submit_lock);
    if (!first)
        return;
    /*
     * A replay runs on a host thread only (graph.c): note its CPU, as host
     * first's passes do (pti_host_begin, which a kick below may not reach),
     * for the idle device threads' choice to spin (pti_cpu_spare_at).  With
     * it unknown one CPU stays left for a waking host: on a 2-CPU machine no
     * device thread spins while this thread runs (host_first off), and each
     * replay finds the scheduler asleep.  Waking it on the other CPU costs
     * this thread 7-13 us on a 2-CPU KVM guest (2-3 us on its own CPU),
     * most of a 64-node replay's submission.
     */
    pti_host_note_cpu(s->dev);
    /*
     * Kick the command after the last completed one, not the first deferred:
     * the stream may have started that one, finished it and gone idle before
     * the next was published, and no kick was sent for the next.  Every
     * deferred command is published (tail) by now, so either this load of
     * head sees the stream idle short of tail and starts it, or the pass
     * completing head sees the tail (the Dekker pair of pti_slot_commit).
     * A command before the first deferred one not completed yet (a replay
     * queued behind work in flight) is that case: its completion's pass
     * starts what follows, as for an eager command on a busy stream
     * (pti_stream_kick), and the kick, a wake of a sleeping scheduler
     * with host_first off, is not needed.
     */
    uint64_t head = atomic_load(&s->head);
    if (head >= tail || head + 1 < first)
        return;
    if (s->dev->cfg.host_first != PTO_HOST_FIRST_OFF) {
        pti_stream_kick(s, head + 1);
        return;
    }
    /*
     * host_first off: the device threads start the work.  Rather than run a
     * scheduler pass here, which hands the command to an engine under its
     * queue's lock and finishes it under sched_lock while that engine, woken,
     * contends for both (a futex call each), ring the stream's doorbell and
     * kick: a spinning engine runs the pass, else the scheduler thread is
     * woken, once, outside sched_lock (pti_sched_kick).  Either way the pass
     * finds s by its bell, as for a kick that finds sched_lock held.
     */
    pti_sched_ring(s);
    pti_sched_kick(s->dev, false);
}

static int check_stream(const pto_stream *s, const char *fn)
{
    if (!s)
        return pti_error(PTO_EINVAL, "%s: NULL stream", fn);
    return 0;
}

static int check_dev_range(pto_stream *s, const char *fn, uint64_t addr, uint64_t n)
{
    if (n == 0 || pti_mem_in_arena(s->dev, addr, n))
        return 0;
    return pti_error(PTO_EINVAL, "%s: device range 0x%llx+%llu lies outside the device arena", fn,
                     (unsigned long long)addr, (unsigned long long)n);
}

static int submit_copy(pto_stream *s, const char *fn, uint32_t kind, uint64_t dst, uint64_t src,
                       uint64_t n, uint64_t token)
{
    struct pto_cmd *cmd;
    int rc = pti_slot_begin(s, fn, 0, false, &cmd, NULL);
    if (rc)
        return rc;
    cmd->u.copy.dst = dst;
    cmd->u.copy.src = src;
    cmd->u.copy.n = n;
    return pti_slot_commit(s, cmd, kind, token);
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
        return pti_error(PTO_EINVAL, "pto_stream_copy_h2d: NULL host pointer");
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
        return pti_error(PTO_EINVAL, "pto_stream_copy_d2h: NULL host pointer");
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
    if ((rc = pti_slot_begin(s, "pto_stream_memset", 0, false, &cmd, NULL)))
        return rc;
    cmd->u.set.dst = dst;
    cmd->u.set.n = nbytes;
    cmd->u.set.value = value;
    return pti_slot_commit(s, cmd, PTO_CMD_MEMSET, token);
}

/* The argument array of a launch or a program run: present, and within the ring heap.  0 or -PTO_EINVAL. */
static int check_args(const pto_stream *s, const uint64_t *args, uint32_t nargs, const char *fn)
{
    if (nargs && !args)
        return pti_error(PTO_EINVAL, "%s: NULL args with nargs=%u", fn, nargs);
    if ((uint64_t)nargs * 8u > s->heap_size)
        return pti_error(PTO_EINVAL, "%s: %u arguments exceed the %u-byte ring heap", fn, nargs,
                         s->heap_size);
    return 0;
}

/*
 * Take a slot for a launch or a program run and copy its arguments (which
 * check_args accepted) into the slot's ring heap, at *heap; the caller fills
 * cmd->u and commits.  Returns 0 or pti_slot_begin's error.
 */
/* Drop the references to nodes[0..n) a wait was to take (no lock held). */
static void drop_nodes(pto_device *dev, struct pto_event_node **nodes, uint32_t n)
{
    pthread_mutex_lock(&dev->sched_lock);
    for (uint32_t i = 0; i < n; i++) {
        if (nodes[i]->fence)
            pti_fence_unref(dev, nodes[i]);
        else
            pti_event_node_unref(nodes[i]);
    }
    pthread_mutex_unlock(&dev->sched_lock);
}

static int begin_with_args(pto_stream *s, const uint64_t *args, uint32_t nargs, const char *fn,
                           struct pto_cmd **cmd, uint64_t **heap)
{
    void *h;
    int rc = pti_slot_begin(s, fn, nargs * 8u, false, cmd, &h);
    if (rc)
        return rc;
    if (nargs)
        memcpy(h, args, (size_t)nargs * 8u);
    *heap = h;
    return 0;
}

static int check_launch(pto_stream *s, pto_kernel *k, uint32_t blocks, const uint64_t *args,
                        uint32_t nargs, const char *fn)
{
    int rc = check_stream(s, fn);
    if (rc)
        return rc;
    if (!k || k->dev != s->dev)
        return pti_error(PTO_EINVAL, "%s: kernel is NULL or from another device", fn);
    if (atomic_load_explicit(&k->unloaded, memory_order_acquire))
        return pti_error(PTO_EINVAL, "%s: kernel %s was unloaded", fn, k->name);
    if (blocks == 0)
        return pti_error(PTO_EINVAL, "%s: blocks must be >= 1", fn);
    if ((rc = check_args(s, args, nargs, fn)))
        return rc;
    /* Declared tensor arguments inside device memory: a core never dereferences a stray address. */
    return pti_args_check(s->dev, atomic_load_explicit(&k->kinds, memory_order_acquire), args, nargs, fn,
                          k->name);
}

/* Queue a launch that check_launch accepted. */
/* after: a fence the launch waits for first (its reference moves to the command), or NULL. */
static int commit_launch_ref(pto_stream *s, pto_kernel *k, uint32_t blocks, const uint64_t *args,
                             uint32_t nargs, struct pto_event_node *after, bool take_ref, uint64_t token,
                             const char *fn);

static int commit_launch_after(pto_stream *s, pto_kernel *k, uint32_t blocks, const uint64_t *args,
                               uint32_t nargs, struct pto_event_node *after, uint64_t token, const char *fn)
{
    return commit_launch_ref(s, k, blocks, args, nargs, after, true, token, fn);
}

/* take_ref false: the caller took the command's kernel reference already (pti_kernel_ref_n). */
static int commit_launch_ref(pto_stream *s, pto_kernel *k, uint32_t blocks, const uint64_t *args,
                             uint32_t nargs, struct pto_event_node *after, bool take_ref, uint64_t token,
                             const char *fn)
{
    struct pto_cmd *cmd;
    uint64_t *heap;
    int rc = begin_with_args(s, args, nargs, fn, &cmd, &heap);
    if (rc) {
        if (after)
            drop_nodes(s->dev, &after, 1);
        return rc;
    }
    if (take_ref)
        pti_kernel_ref(k);
    cmd->u.launch.k = k;
    cmd->u.launch.args = heap;
    cmd->u.launch.blocks = blocks;
    cmd->u.launch.nargs = nargs;
    cmd->u.launch.after = after;
    if (after) {
        /* Counted as a wait (pto_stream_free: local reuse), released with the launch (kernel.c). */
        atomic_fetch_add_explicit(&s->waits_pending, 1, memory_order_relaxed);
    }
    return pti_slot_commit(s, cmd, PTO_CMD_LAUNCH, token);
}

static int commit_launch(pto_stream *s, pto_kernel *k, uint32_t blocks, const uint64_t *args,
                         uint32_t nargs, uint64_t token, const char *fn)
{
    return commit_launch_after(s, k, blocks, args, nargs, NULL, token, fn);
}

int pto_stream_launch(pto_stream *s, pto_kernel *k, uint32_t blocks, const uint64_t *args,
                      uint32_t nargs, uint64_t token)
{
    int rc = check_launch(s, k, blocks, args, nargs, "pto_stream_launch");
    if (rc)
        return rc;
    return commit_launch(s, k, blocks, args, nargs, token, "pto_stream_launch");
}

/* A program run: p loaded on s's device, its parameter count, its arguments (as check_launch's). */
static int check_program(pto_stream *s, pto_program *p, const uint64_t *args, uint32_t nargs, const char *fn)
{
    int rc = check_stream(s, fn);
    if (rc)
        return rc;
    if (!p || p->dev != s->dev)
        return pti_error(PTO_EINVAL, "%s: program is NULL or from another device", fn);
    if (atomic_load_explicit(&p->unloaded, memory_order_acquire))
        return pti_error(PTO_EINVAL, "%s: program %s was unloaded", fn, p->name);
    if (nargs != p->desc->nparams)
        return pti_error(PTO_EINVAL, "%s: program %s takes %u arguments, got %u", fn, p->name,
                         p->desc->nparams, nargs);
    if ((rc = check_args(s, args, nargs, fn)))
        return rc;
    return pti_program_args_check(p, args, nargs, fn);
}

/* Queue a PTO_CMD_PROGRAM (orch.c runs it) that check_program accepted. */
static int commit_program(pto_stream *s, pto_program *p, const uint64_t *args, uint32_t nargs,
                          uint64_t token, const char *fn)
{
    struct pto_cmd *cmd;
    uint64_t *heap;
    int rc = begin_with_args(s, args, nargs, fn, &cmd, &heap);
    if (rc)
        return rc;
    pti_program_ref(p);
    cmd->u.prog.p = p;
    cmd->u.prog.args = heap;
    cmd->u.prog.nargs = nargs;
    cmd->u.prog.quick = pti_program_quick(s->dev, p);
    return pti_slot_commit(s, cmd, PTO_CMD_PROGRAM, token);
}

int pto_stream_run_program(pto_stream *s, pto_program *p, const uint64_t *args, uint32_t nargs,
                           uint64_t token)
{
    int rc = check_program(s, p, args, nargs, "pto_stream_run_program");
    if (rc)
        return rc;
    return commit_program(s, p, args, nargs, token, "pto_stream_run_program");
}

static int submit_record(pto_stream *s, pto_event *e, bool ordering, bool edge, uint64_t token,
                         const char *fn)
{
    int rc = check_stream(s, fn);
    if (rc)
        return rc;
    if (!e || e->dev != s->dev)
        return pti_error(PTO_EINVAL, "%s: event is NULL or from another device", fn);
    /* A reserved event (pto_event_reserve, peer.c) is filled by this record: waits hold it already. */
    struct pto_event_node *node = pti_event_take_reserved(e);
    if (!node)
        node = pti_event_node_new(e->id);
    if (!node)
        return pti_error(PTO_ENOMEM, "pto_stream_record: out of host memory");
    struct pto_cmd *cmd;
    if ((rc = pti_slot_begin(s, fn, 0, false, &cmd, NULL))) {
        pti_event_node_unref(node);
        return rc;
    }
    /* node starts with one reference (the command's); the event takes a second. */
    pti_event_node_ref(node);
    pthread_mutex_lock(&s->dev->obj_lock);
    struct pto_event_node *old = e->cur;
    e->cur = node;
    pthread_mutex_unlock(&s->dev->obj_lock);
    if (old)
        pti_event_node_unref(old);
    cmd->u.ev.node = node;
    cmd->u.ev.event_id = e->id;
    cmd->u.ev.ordering = ordering;
    cmd->edge = edge;
    return pti_slot_commit(s, cmd, PTO_CMD_RECORD, token);
}

int pto_stream_record(pto_stream *s, pto_event *e, uint64_t token)
{
    return submit_record(s, e, false, false, token, "pto_stream_record");
}

int pto_stream_record_ordering(pto_stream *s, pto_event *e, uint64_t token)
{
    return submit_record(s, e, true, false, token, "pto_stream_record_ordering");
}

/*
 * Fill and publish a wait on `node` (NULL: a no-op wait), in a slot taken
 * with a dependency entry if node is set.  The caller's reference to node
 * moves to the command.
 */
static int commit_wait(pto_stream *s, struct pto_cmd *cmd, struct pto_event_node *node, uint64_t event_id,
                       bool peer, bool edge, uint64_t token)
{
    cmd->u.ev.node = node;
    cmd->u.ev.event_id = event_id;
    cmd->u.ev.peer = peer;
    cmd->edge = edge;
    if (node || cmd->u.ev.set)
        /* Its dependency entry was taken with the slot (or is, on entering the ring). */
        atomic_fetch_add_explicit(&s->waits_pending, 1, memory_order_relaxed);
    return pti_slot_commit(s, cmd, PTO_CMD_WAIT, token);
}

static int submit_wait(pto_stream *s, pto_event *e, bool edge, uint64_t token, const char *fn)
{
    int rc = check_stream(s, fn);
    if (rc)
        return rc;
    if (!e)
        return pti_error(PTO_EINVAL, "%s: NULL event", fn);
    bool peer = e->dev != s->dev;
    if (peer && e->dev->ops != s->dev->ops)
        return pti_error(PTO_ENOTSUP, "%s: the event is of a device of platform '%s', the stream of "
                         "platform '%s'", fn, e->dev->platform, s->dev->platform);
    struct pto_event_node *node = pti_event_current(e);
    /* Another device's event: counted, so that its completion wakes this device (peer.c). */
    if (peer && node && (rc = pti_peer_watch(e->dev, node))) {
        pti_event_node_unref(node);
        return rc;
    }
    struct pto_cmd *cmd;
    if ((rc = pti_slot_begin(s, fn, 0, node != NULL, &cmd, NULL))) {
        if (node)
            pti_event_node_unref(node);
        return rc;
    }
    return commit_wait(s, cmd, node, e->id, peer, edge, token);
}

int pto_stream_wait_event(pto_stream *s, pto_event *e, uint64_t token)
{
    return submit_wait(s, e, false, token, "pto_stream_wait_event");
}

/*
 * pto_stream_wait_event on an event of s's device, quiet: its token gets a
 * completion record only when the wait itself fails (a failure the event
 * carries, or an injected one), as a quiet fence wait's.
 */
int pto_stream_wait_event_quiet(pto_stream *s, pto_event *e, uint64_t token)
{
    const char *fn = "pto_stream_wait_event_quiet";
    int rc = check_stream(s, fn);
    if (rc)
        return rc;
    if (!e || e->dev != s->dev)
        return pti_error(PTO_EINVAL, "%s: an event of the stream's device expected", fn);
    struct pto_event_node *node = pti_event_current(e);
    struct pto_cmd *cmd;
    if ((rc = pti_slot_begin(s, fn, 0, node != NULL, &cmd, NULL))) {
        if (node)
            pti_event_node_unref(node);
        return rc;
    }
    cmd->quiet = true;
    return commit_wait(s, cmd, node, e->id, false, false, token);
}

int pto_stream_record_edge(pto_stream *s, pto_event *e, uint64_t token)
{
    return submit_record(s, e, false, true, token, "pto_stream_record_edge");
}

int pto_stream_wait_edge(pto_stream *s, pto_event *e, uint64_t token)
{
    return submit_wait(s, e, true, token, "pto_stream_wait_edge");
}

static int check_edge(pto_stream *s, pto_stream *src, pto_event *e, const char *fn)
{
    if (!s || !src || s == src || s->dev != src->dev || !e || e->dev != s->dev)
        return pti_error(PTO_EINVAL, "%s: two distinct streams and an event of one device expected", fn);
    int rc = check_stream(s, fn);
    if (rc)
        return rc;
    return check_stream(src, fn);
}

int pti_wait_many_commit(pto_stream *s, struct pto_event_node **nodes, uint32_t n, uint64_t token, const char *fn)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++)
        if (nodes[i])
            nodes[k++] = nodes[i];
    if (!k)
        return 0; /* every point is reached and healthy: nothing to wait for */
    struct pto_fence_set *fs = NULL;
    if (k > 1) {
        fs = malloc(sizeof(*fs) + (size_t)k * sizeof(fs->v[0]));
        if (!fs) {
            drop_nodes(s->dev, nodes, k);
            return pti_error(PTO_ENOMEM, "%s: out of host memory", fn);
        }
        fs->n = k;
        fs->next = 0;
        fs->end_ns = 0;
        fs->failed = NULL;
        memcpy(fs->v, nodes, (size_t)k * sizeof(fs->v[0]));
    }
    struct pto_cmd *cmd;
    int rc = pti_slot_begin(s, fn, 0, true, &cmd, NULL);
    if (rc) {
        drop_nodes(s->dev, nodes, k);
        free(fs);
        return rc;
    }
    cmd->quiet = true;
    cmd->u.ev.set = fs;
    /* One node: a wait as on an event; several: the set names the first's event in traces. */
    return commit_wait(s, cmd, fs ? NULL : nodes[0], nodes[0]->event_id, false, true, token);
}

/*
 * The edge check_edge accepted: a fence of src (its last command accepted,
 * no command queued there) and a quiet wait for it on s, or nothing if src's
 * work is done and healthy.  Returns PTO_QUEUED (the wait's), 0, or an
 * error.  e names the edge in traces.
 */
static int commit_edge(pto_stream *s, pto_stream *src, pto_event *e, uint64_t token, const char *fn)
{
    struct pto_event_node *node;
    int rc = pti_fences_take(s->dev, &src, &e->id, 1, &node);
    if (rc)
        return rc;
    return pti_wait_many_commit(s, &node, 1, token, fn);
}

/*
 * Every command one call queues is stamped with the same submission time:
 * on some hosts reading the clock costs as much as queueing a command.
 */
static uint64_t stamp_begin(void)
{
    uint64_t outer = pti_submit_ns;
    if (!outer)
        pti_submit_ns = pto_now_ns();
    return outer;
}

int pto_stream_wait_stream(pto_stream *s, pto_stream *src, pto_event *e, uint64_t token)
{
    const char *fn = "pto_stream_wait_stream";
    int rc = check_edge(s, src, e, fn);
    if (rc)
        return rc;
    uint64_t outer = stamp_begin();
    rc = commit_edge(s, src, e, token, fn);
    pti_submit_ns = outer;
    return rc;
}

int pto_stream_launch_after(pto_stream *s, pto_stream *src, pto_event *e, uint64_t edge_token,
                            pto_kernel *k, uint32_t blocks, const uint64_t *args, uint32_t nargs,
                            uint64_t token)
{
    const char *fn = "pto_stream_launch_after";
    int rc = check_edge(s, src, e, fn);
    if (rc || (rc = check_launch(s, k, blocks, args, nargs, fn)))
        return rc;
    /* The edge rides on the launch: a fence of src, no command of its own (edge_token unused). */
    uint64_t outer = stamp_begin();
    struct pto_event_node *node;
    rc = pti_fences_take(s->dev, &src, &e->id, 1, &node);
    if (!rc)
        rc = commit_launch_after(s, k, blocks, args, nargs, node, token, fn);
    pti_submit_ns = outer;
    return rc;
}

/* For hazard.c, which queues inferred edges with a launch (pto_hazards_launch). */
int pti_launch_check(pto_stream *s, pto_kernel *k, uint32_t blocks, const uint64_t *args, uint32_t nargs,
                     const char *fn)
{
    return check_launch(s, k, blocks, args, nargs, fn);
}

int pti_launch_commit(pto_stream *s, pto_kernel *k, uint32_t blocks, const uint64_t *args, uint32_t nargs,
                      uint64_t token, const char *fn)
{
    return commit_launch(s, k, blocks, args, nargs, token, fn);
}

int pti_launch_commit_held(pto_stream *s, pto_kernel *k, uint32_t blocks, const uint64_t *args, uint32_t nargs,
                           uint64_t token, const char *fn)
{
    return commit_launch_ref(s, k, blocks, args, nargs, NULL, false, token, fn);
}

int pti_launch_commit_after(pto_stream *s, pto_kernel *k, uint32_t blocks, const uint64_t *args, uint32_t nargs,
                            struct pto_event_node *after, uint64_t token, const char *fn)
{
    return commit_launch_after(s, k, blocks, args, nargs, after, token, fn);
}

int pti_edge_check(pto_stream *s, pto_stream *src, pto_event *e, const char *fn)
{
    return check_edge(s, src, e, fn);
}

int pti_edge_commit(pto_stream *s, pto_stream *src, pto_event *e, uint64_t token, const char *fn)
{
    return commit_edge(s, src, e, token, fn);
}

uint64_t pti_stamp_begin(void)
{
    return stamp_begin();
}

void pti_stamp_end(uint64_t outer)
{
    pti_submit_ns = outer;
}

int pto_stream_free(pto_stream *s, pto_devptr ptr, uint64_t token)
{
    int rc = check_stream(s, "pto_stream_free");
    if (rc)
        return rc;
    struct pto_cmd *cmd;
    if ((rc = pti_slot_begin(s, "pto_stream_free", 0, false, &cmd, NULL)))
        return rc;
    /*
     * Under submit_lock no wait can be added concurrently; acquire pairs with
     * the release decrement in release_resources (a wait that executed).
     */
    bool local_ok = atomic_load_explicit(&s->waits_pending, memory_order_acquire) == 0;
    struct pto_pending_free *pf;
    if ((rc = pti_mem_pend_free(s->dev, s, ptr, local_ok, &pf))) {
        pti_slot_abort(s);
        return rc;
    }
    cmd->u.free.pf = pf;
    cmd->u.free.ptr = ptr;
    return pti_slot_commit(s, cmd, PTO_CMD_FREE, token);
}

int pto_stream_notify(pto_stream *s, uint64_t token)
{
    int rc = check_stream(s, "pto_stream_notify");
    if (rc)
        return rc;
    struct pto_cmd *cmd;
    if ((rc = pti_slot_begin(s, "pto_stream_notify", 0, false, &cmd, NULL)))
        return rc;
    return pti_slot_commit(s, cmd, PTO_CMD_NOTIFY, token);
}

int pto_stream_delay(pto_stream *s, uint64_t delay_us, uint64_t token)
{
    int rc = check_stream(s, "pto_stream_delay");
    if (rc)
        return rc;
    struct pto_cmd *cmd;
    if ((rc = pti_slot_begin(s, "pto_stream_delay", 0, false, &cmd, NULL)))
        return rc;
    cmd->u.delay.us = delay_us;
    return pti_slot_commit(s, cmd, PTO_CMD_DELAY, token);
}

/* Queue a wait on l: holds s until l is released or times out. */
int pto_stream_latch_wait(pto_stream *s, pto_latch *l, uint64_t token)
{
    if (!s)
        return pti_error(PTO_EINVAL, "pto_stream_latch_wait: NULL stream");
    if (!l || l->dev != s->dev)
        return pti_error(PTO_EINVAL, "pto_stream_latch_wait: latch is NULL or from another device");
    struct pto_cmd *cmd;
    int rc = pti_slot_begin(s, "pto_stream_latch_wait", 0, false, &cmd, NULL);
    if (rc)
        return rc;
    atomic_fetch_add_explicit(&l->refs, 1, memory_order_relaxed);
    cmd->u.latch.l = l;
    return pti_slot_commit(s, cmd, PTO_CMD_LATCH, token);
}
