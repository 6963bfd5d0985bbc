/*
 * overflow.c - commands accepted while their stream's ring had no room.
 *
 * Phase: submission (accepting into the overflow) and, under submit_lock,
 * whichever thread frees ring room (the refill).
 *
 * Why the driver keeps the backlog
 * --------------------------------
 * A ring holds `entries` commands, their launch arguments in `heap_size`
 * bytes and their event waits in `dep_size` entries.  A service queues more
 * than that: hundreds of requests of five commands each.  If the host kept
 * what does not fit, the ring would be refilled only when the host's event
 * loop comes round to it, and the device would idle in between, however long
 * the backlog.  So a stream with its overflow on accepts such a command
 * anyway, here, and the thread that completes a command (an engine, a
 * scheduler, the host running a cancel) moves waiting commands into the room
 * it freed, in order.  The host learns which commands entered the ring from
 * the sequence numbers: every accepted command gets the next one, and it is
 * in the ring once the stream's tail has reached it.
 *
 * An accepted command is whole: its sequence number, failure epoch, injected
 * failure and submit time are taken on acceptance, as for a command that
 * enters the ring at once, so the failure rule judges a backlog exactly as it
 * judges the ring (exec.c, "Failure propagation").  Only ring resources
 * wait: the slot, the heap bytes (the command keeps a private copy of its
 * launch arguments) and the dependency entry of an event wait.  Everything
 * else is taken on acceptance: an event record becomes its event's current
 * recording, a wait takes its event's current recording, a free turns its
 * block into a pending free, a launch and a latch wait take their
 * references.
 *
 * Invariants (all under submit_lock, which every reader and writer of the
 * overflow holds):
 *
 *     tail <= accepted, and seqs (tail, accepted] wait in the overflow,
 *     oldest at ents[head]: seq tail + 1 + i lives in ents[(head + i) & mask].
 *     Commands wait here only while the ring is non-empty, or while a refill
 *     is on its way (see below), so a backlog never strands.
 *
 * A submission goes to the overflow if commands wait here already (order) or
 * the ring has no room for it.  Who moves it into the ring:
 *
 *   completion  pti_cmd_finish stores head (seq_cst), then loads accepted
 *               (seq_cst, pti_ovf_due); if commands wait and a refill is
 *               due (below), it takes submit_lock (lock order: sched_lock
 *               -> submit_lock) and refills, before the command's record is
 *               pushed: a host that drains the record finds them in the ring
 *               already.  So a completion takes submit_lock once per batch,
 *               not once per command.
 *   submission  after storing accepted (seq_cst), the submitter refills too,
 *               loading head (seq_cst).  In the total order of seq_cst
 *               operations one side sees the other: either the completion
 *               sees the new command, or the submitter sees the room.
 *
 * Refills wait for `refill` free slots (a quarter of the ring, at least one)
 * unless the ring is empty: one wake-up of a producer that waits for its
 * command to enter then admits a batch of launches, and the ring still holds
 * three quarters of its commands while it waits, so the device never idles.
 * An empty ring has all of its heap and dependency entries free, so the
 * oldest waiting command always fits then.  Launch arguments of up to
 * PTI_OVF_INLINE_ARGS words wait inside the entry, so a backlog of ordinary
 * launches costs no allocation per command.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

enum { OVF_INITIAL_CAP = 64 };

/* Double the array, unwrapping it (submit_lock held).  False if out of memory. */
static bool ovf_grow(pto_stream *s, uint32_t waiting)
{
    struct pto_overflow *o = &s->ovf;
    uint32_t ncap = o->cap ? o->cap * 2 : OVF_INITIAL_CAP;
    if (ncap < o->cap)
        return false;
    struct pto_ovf_ent *n = malloc((size_t)ncap * sizeof(*n));
    if (!n)
        return false;
    uint32_t first = o->cap - o->head;
    if (first > waiting)
        first = waiting;
    if (waiting) {
        memcpy(n, &o->ents[o->head], first * sizeof(*n));
        memcpy(&n[first], o->ents, (waiting - first) * sizeof(*n));
    }
    free(o->ents);
    o->ents = n;
    o->cap = ncap;
    o->head = 0;
    return true;
}

static uint32_t ovf_waiting(const pto_stream *s)
{
    /* Both are written under submit_lock, which we hold. */
    return (uint32_t)(atomic_load_explicit(&s->accepted, memory_order_relaxed) -
                      atomic_load_explicit(&s->tail, memory_order_relaxed));
}

int pti_ovf_reserve(pto_stream *s, uint32_t heap_len, bool dep, struct pto_ovf_ent **out)
{
    struct pto_overflow *o = &s->ovf;
    uint32_t waiting = ovf_waiting(s);
    if (waiting == o->cap && !ovf_grow(s, waiting))
        return pti_error(PTO_ENOMEM, "stream %u: out of host memory for %u waiting commands", s->id,
                         waiting + 1);
    struct pto_ovf_ent *ent = &o->ents[(o->head + waiting) & (o->cap - 1)];
    uint64_t *args = NULL;
    if (heap_len > sizeof(ent->inline_args)) {
        args = malloc(heap_len);
        if (!args)
            return pti_error(PTO_ENOMEM, "stream %u: out of host memory for launch arguments", s->id);
    }
    memset(&ent->cmd, 0, sizeof(ent->cmd));
    ent->args = args;
    ent->heap_len = heap_len;
    ent->dep = dep;
    *out = ent;
    return 0;
}

/* Release an entry's launch arguments (they were copied, or are not needed). */
static void ovf_release_args(struct pto_ovf_ent *ent)
{
    free(ent->args);
    ent->args = NULL;
}

void pti_ovf_unreserve(pto_stream *s, struct pto_ovf_ent *ent)
{
    (void)s;
    ovf_release_args(ent);
}

uint32_t pti_ovf_refill(pto_stream *s, uint64_t *first)
{
    struct pto_overflow *o = &s->ovf;
    uint64_t tail = atomic_load_explicit(&s->tail, memory_order_relaxed); /* we are the producer */
    uint64_t accepted = atomic_load_explicit(&s->accepted, memory_order_relaxed);
    if (tail == accepted)
        return 0;
    /* seq_cst: the submission side of the hand-off (see the essay). */
    uint64_t head = atomic_load(&s->head);
    uint32_t in_ring = (uint32_t)(tail - head);
    if (in_ring && s->entries - in_ring < o->refill)
        return 0; /* a completion to come refills a batch */
    uint32_t moved = 0;
    *first = tail + 1;
    while (tail != accepted) {
        struct pto_ovf_ent *ent = &o->ents[o->head];
        uint32_t used;
        uint8_t *heap;
        if (pti_ring_room(s, head, tail, ent->heap_len, ent->dep, &used, &heap))
            break;
        struct pto_cmd *cmd = &s->ring[tail & s->mask];
        *cmd = ent->cmd;
        cmd->heap_used = used;
        if (ent->heap_len)
            memcpy(heap, pti_ovf_args(ent), ent->heap_len); /* only launches carry heap bytes */
        if (cmd->kind == PTO_CMD_LAUNCH)
            cmd->u.launch.args = (uint64_t *)heap; /* never into the entry: entries move */
        else if (cmd->kind == PTO_CMD_PROGRAM)
            cmd->u.prog.args = (uint64_t *)heap;
        ovf_release_args(ent);
        if (ent->dep)
            pti_ring_take_dep(s);
        pti_ring_charge(s, used, cmd->seq);
        o->head = (o->head + 1) & (o->cap - 1);
        tail++;
        moved++;
    }
    if (moved) {
        /* seq_cst, a release of the slots too: as in pti_slot_commit. */
        atomic_store(&s->tail, tail);
        o->refills++; /* one hand-off for the batch (pto_stream_stats.refills) */
    }
    return moved;
}

void pti_ovf_fini(pto_stream *s)
{
    struct pto_overflow *o = &s->ovf;
    uint32_t waiting = ovf_waiting(s);
    for (uint32_t i = 0; i < waiting; i++)
        ovf_release_args(&o->ents[(o->head + i) & (o->cap - 1)]);
    free(o->ents);
    o->ents = NULL;
    o->cap = 0;
}

int pto_stream_set_overflow(pto_stream *s, int on)
{
    if (!s)
        return pti_error(PTO_EINVAL, "pto_stream_set_overflow: NULL stream");
    pthread_mutex_lock(&s->submit_lock);
    if (!on && ovf_waiting(s)) {
        uint32_t waiting = ovf_waiting(s);
        pthread_mutex_unlock(&s->submit_lock);
        return pti_error(PTO_EINVAL, "pto_stream_set_overflow: %u commands wait in stream %u's overflow",
                         waiting, s->id);
    }
    s->ovf.on = on != 0;
    pthread_mutex_unlock(&s->submit_lock);
    return 0;
}

int pto_stream_cancel_queued(pto_stream *s, uint64_t first, uint64_t last)
{
    if (!s)
        return pti_error(PTO_EINVAL, "pto_stream_cancel_queued: NULL stream");
    pthread_mutex_lock(&s->submit_lock);
    uint64_t tail = atomic_load_explicit(&s->tail, memory_order_relaxed);
    uint64_t accepted = atomic_load_explicit(&s->accepted, memory_order_relaxed);
    int rc = 0;
    if (first == 0 || first > last || last > accepted) {
        rc = pti_error(PTO_EINVAL, "pto_stream_cancel_queued: commands %llu..%llu were not accepted on stream %u",
                       (unsigned long long)first, (unsigned long long)last, s->id);
    } else if (first > tail) {
        struct pto_overflow *o = &s->ovf;
        uint32_t from = (uint32_t)(first - tail - 1), n = (uint32_t)(last - first + 1);
        for (uint32_t i = 0; i < n && !rc; i++) {
            if (o->ents[(o->head + from + i) & (o->cap - 1)].cmd.kind == PTO_CMD_RECORD)
                rc = pti_error(PTO_EINVAL, "pto_stream_cancel_queued: command %llu records an event",
                               (unsigned long long)(first + i));
        }
        for (uint32_t i = 0; i < n && !rc; i++)
            o->ents[(o->head + from + i) & (o->cap - 1)].cmd.canceled = true;
        if (!rc)
            rc = 1;
    }
    pthread_mutex_unlock(&s->submit_lock);
    return rc;
}

/* Whether the command with sequence number seq on s has started (sched_lock held). */
static bool cmd_started(pto_stream *s, uint64_t seq, uint64_t head)
{
    if (seq <= head)
        return true; /* completed */
    if (seq != head + 1)
        return false; /* only the head command can have started */
    const struct pto_cmd *cmd = &s->ring[head & s->mask];
    /* On an engine, or held by the scheduler on a delay or latch.  A blocked wait has done nothing yet. */
    return s->active || (cmd->state == PTI_CMD_BLOCKED && cmd->kind != PTO_CMD_WAIT);
}

/*
 * pto_stream_cancel_tokens - withdraw s's commands with tokens first..last,
 * in the ring or the overflow, if none of them has started.
 *
 * Takes sched_lock, so no command starts meanwhile: each found is either
 * started already (nothing changes) or marked and later skipped.  Returns
 * the count withdrawn, 0 (none found, one started, or one records an
 * event: nothing changed), -PTO_EINVAL.
 */
int pto_stream_cancel_tokens(pto_stream *s, uint64_t first, uint64_t last)
{
    if (!s)
        return pti_error(PTO_EINVAL, "pto_stream_cancel_tokens: NULL stream");
    if (first == 0 || first > last)
        return pti_error(PTO_EINVAL, "pto_stream_cancel_tokens: bad token range %llu..%llu",
                         (unsigned long long)first, (unsigned long long)last);
    pto_device *dev = s->dev;
    pthread_mutex_lock(&dev->sched_lock);
    pthread_mutex_lock(&s->submit_lock);
    uint64_t head = atomic_load_explicit(&s->head, memory_order_relaxed);
    uint64_t tail = atomic_load_explicit(&s->tail, memory_order_relaxed);
    uint64_t accepted = atomic_load_explicit(&s->accepted, memory_order_relaxed);
    struct pto_overflow *o = &s->ovf;
    int found = 0;
    bool refuse = false;
    /* Two passes: check every command of the range, then mark them all, or none. */
    for (int mark = 0; mark < 2 && !refuse; mark++) {
        for (uint64_t seq = head + 1; seq <= accepted; seq++) {
            struct pto_cmd *cmd = seq <= tail ? &s->ring[(seq - 1) & s->mask]
                                              : &o->ents[(o->head + (seq - tail - 1)) & (o->cap - 1)].cmd;
            if (cmd->token < first || cmd->token > last || cmd->canceled)
                continue;
            if (!mark) {
                found++;
                if (cmd->kind == PTO_CMD_RECORD || cmd_started(s, seq, head) || seq <= s->cancel_seq) {
                    refuse = true;
                    break;
                }
            } else {
                cmd->canceled = true;
            }
        }
    }
    pthread_mutex_unlock(&s->submit_lock);
    pthread_mutex_unlock(&dev->sched_lock);
    return refuse ? 0 : found;
}
