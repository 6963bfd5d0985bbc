/*
 * ring.c - ring room: slots, argument heap bytes and dependency entries.
 *
 * Phase: submission.  Producers (submit_lock held) ask here whether a
 * command fits in its stream's ring and charge what it takes: a direct
 * submission (pti_slot_begin, submit.c) and a refill from the overflow
 * (pti_ovf_refill, overflow.c) alike.  The completion side gives the room
 * back (pti_cmd_finish and release_resources, exec.c).
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
 *            dev->sched_lock by pti_cmd_finish, with a release store after
 *            the last read of the slot; read with acquire by producers (room
 *            in the ring) and by host waiters.
 *
 * Command seq n lives in ring[(n - 1) & mask].  Slots (head, tail] are in
 * flight, so a submission needs tail - head < entries; pto_stream_space_left
 * is entries - (tail - head).  A third counter, accepted (>= tail), counts
 * the commands accepted: those that found no room wait in the stream's
 * overflow, seqs (tail, accepted], and enter the ring in order as room frees
 * (overflow.c).  Sequence numbers are given on acceptance, so a command's
 * seq never changes.  A slot is free again as soon as its command
 * completes (exec.c says in which order commands do).
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
 * The slots and the heap are allocated by the stream's first submission
 * (pti_ring_alloc, under submit_lock, before the tail release that
 * publishes any slot), so a stream that was never used costs only its
 * struct: tens of thousands of idle streams stay cheap.
 */
#include <stdlib.h>

#include "internal.h"

/* Allocate s's slots and argument heap (submit_lock held).  Returns 0, or -1 out of host memory. */
int pti_ring_alloc(pto_stream *s)
{
    struct pto_cmd *ring = calloc(s->entries, sizeof(*ring));
    uint8_t *heap = malloc(s->heap_size ? s->heap_size : 8);
    if (!ring || !heap) {
        free(ring);
        free(heap);
        return -1;
    }
    pto_device *dev = s->dev;
    pthread_mutex_lock(&dev->rung_lock);
    if (dev->n_rung == dev->cap_rung) {
        size_t ncap = dev->cap_rung ? dev->cap_rung * 2 : 16;
        pto_stream **nr = realloc(dev->rung, ncap * sizeof(*nr));
        if (!nr) {
            pthread_mutex_unlock(&dev->rung_lock);
            free(ring);
            free(heap);
            return -1;
        }
        dev->rung = nr;
        dev->cap_rung = ncap;
    }
    s->rung_at = dev->n_rung;
    dev->rung[dev->n_rung++] = s;
    s->heap = heap;
    s->ring = ring;
    pthread_mutex_unlock(&dev->rung_lock);
    atomic_fetch_add_explicit(&dev->rings_allocated, 1, memory_order_relaxed);
    return 0;
}

/* Free s's ring and heap, if it has them (s is being freed). */
void pti_ring_free(pto_stream *s)
{
    if (s->ring) {
        pto_device *dev = s->dev;
        pthread_mutex_lock(&dev->rung_lock);
        pto_stream *last = dev->rung[--dev->n_rung];
        dev->rung[s->rung_at] = last;
        last->rung_at = s->rung_at;
        pthread_mutex_unlock(&dev->rung_lock);
        atomic_fetch_sub_explicit(&dev->rings_allocated, 1, memory_order_relaxed);
    }
    free(s->ring);
    free(s->heap);
    s->ring = NULL;
    s->heap = NULL;
}

int pti_ring_room(pto_stream *s, uint64_t head, uint64_t tail, uint32_t heap_len, bool dep,
                  uint32_t *used_out, uint8_t **heap_out)
{
    if (tail - head >= s->entries)
        return PTI_RING_SLOTS;
    uint32_t used = 0;
    uint8_t *heap = s->heap;
    if (heap_len > 0) {
        /* Acquire pairs with the release add of heap_freed in pti_cmd_finish. */
        uint64_t in_use = s->heap_alloc - atomic_load_explicit(&s->heap_freed, memory_order_acquire);
        uint32_t pos = (uint32_t)(s->heap_alloc % s->heap_size);
        uint32_t pad = pos + heap_len > s->heap_size ? s->heap_size - pos : 0;
        used = pad + heap_len;
        if ((uint64_t)used > s->heap_size - in_use)
            return PTI_RING_HEAP;
        heap = s->heap + (pad ? 0 : pos);
    }
    /* Acquire pairs with the release decrement of dep_used in release_resources. */
    if (dep && atomic_load_explicit(&s->dep_used, memory_order_acquire) >= s->dep_size)
        return PTI_RING_DEPS;
    *used_out = used;
    *heap_out = heap;
    return 0;
}

void pti_ring_take_dep(pto_stream *s)
{
    /*
     * Only producers (under submit_lock) increment, so pti_ring_room's check
     * still holds; the scheduler reads the command only after the tail
     * release.
     */
    uint32_t used = atomic_fetch_add_explicit(&s->dep_used, 1, memory_order_relaxed) + 1;
    if (used > s->dep_hwm)
        s->dep_hwm = used;
}

void pti_ring_charge(pto_stream *s, uint32_t used, uint64_t seq)
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
