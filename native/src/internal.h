/*
 * internal.h - private structures and helpers of the driver.
 *
 * Never installed, never seen by cffi.  Names say which side of the
 * contract they are on: the ABI (pto_driver.h) is pto_* / PTO_*; a function,
 * macro or constant private to the driver is pti_* / PTI_* ("pto
 * internal") and declared here only.  Private struct and enum tags keep
 * pto_ (they never reach the cdef).
 *
 * Lock order (take left before right):
 *
 *     sched_lock -> submit_lock (close's fence; the overflow refill in pti_cmd_finish)
 *     sched_lock -> obj_lock / mem_lock / cq_lock / copy_lock / core_lock
 *     submit_lock -> obj_lock / mem_lock
 *     any of the above -> trace_lock
 *
 * Nobody takes sched_lock while holding another driver lock: submitters
 * drop submit_lock before they kick the scheduler (a submitter that moved
 * overflow commands into the ring hands them off the same way), engine
 * threads drop their queue lock before they take sched_lock to finish a
 * command, and pto_completion_observe takes sched_lock holding no other lock.
 *
 * Rings.  The driver's three rings name their fields one way, liburing's
 * (struct io_uring_sq / io_uring_cq: khead, ktail, ring_mask, ring_entries):
 *
 *     entries  slots in the ring (a power of two unless said otherwise)
 *     mask     entries - 1: item i lives in slot i & mask
 *     head     items ever consumed: the next to consume is item head
 *     tail     items ever produced: the next to produce is item tail
 *
 * head and tail are 64-bit and never wrap; tail - head items are in the
 * ring, and it is full when that is entries.  The stream ring (struct
 * pto_stream: entries, mask, head, tail; ring.c) counts commands: tail is
 * the seq of the last submitted, head of the last completed, seq n being
 * item n - 1.  The completion queue (struct pto_device: cq_entries,
 * cq_mask, cq_head, cq_tail; completion.c) counts records and doubles
 * when full.  The trace buffer (trace_entries, trace_head, trace_tail;
 * trace.c) keeps exactly the configured trace_capacity records, any
 * number, so it has no mask and indexes with i % trace_entries; when full
 * its oldest record is dropped (head advances).
 */
#ifndef PTO_INTERNAL_H
#define PTO_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "pto_driver.h"

#define PTI_ALIGN 256u            /* device allocation alignment */
#define PTI_ARG_HEAP (64u * 1024u) /* a stream's argument heap when ring_heap is not set */
#define PTI_MSG_LEN 104           /* == sizeof(pto_completion.message), asserted in completion.c */
#define PTI_VIA_EVENT "via event " /* how a wait's carried failure starts (event.c), kept by edep_msg (exec.c) */
#define PTI_NAME_LEN 48           /* == sizeof(pto_trace_record.name) */

/* ---- error text (error.c) ------------------------------------------------- */

/* Set this thread's last-error text and return -code. */
int pti_error(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* snprintf into a fixed message buffer; truncation is intended. */
void pti_msgf(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Clear this thread's last-error text. */
void pti_clear_error(void);

/* ---- the task-edge rule (taskdeps.c) ------------------------------------- */

/* A window: [lo[k], hi[k]) for k < ndim, or the whole tensor. */
struct pto_box {
    const int64_t *lo, *hi;
    uint32_t ndim;
    bool whole;
};
/* The hazard that orders a later access after an earlier one (flags PTO_TASK_READ | _WRITE):
 * PTO_TASK_RAW, _WAW, _WAR, or 0 (none). */
uint32_t pti_task_hazard(uint32_t later, uint32_t earlier);
/* Whether two windows share an element (see pto_task_deps in pto_driver.h). */
bool pti_box_overlaps(struct pto_box a, struct pto_box b);
/* Whether window a holds every element of window b. */
bool pti_box_covers(struct pto_box a, struct pto_box b);
/* The hazard that orders a later access (flags, window) after an earlier one of the same tensor, 0: none. */
uint32_t pti_task_conflict(uint32_t later, struct pto_box lw, uint32_t earlier, struct pto_box ew);

/* ---- small helpers (util.c) ------------------------------------------------- */

/* Absolute CLOCK_MONOTONIC deadline timeout_us from now; 0 means none (< 0). */
uint64_t pti_deadline_after_us(int64_t timeout_us);
/*
 * pthread_cond_wait, or a timed wait until deadline_ns (CLOCK_MONOTONIC; 0:
 * forever).  Returns 0, or ETIMEDOUT once the deadline has passed.
 */
int pti_cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, uint64_t deadline_ns);
/*
 * Initialise a driver lock: adaptive (glibc) where available, so a thread
 * finding it held spins briefly before sleeping.  The driver's critical
 * sections are a few hundred nanoseconds; sleeping on one costs a futex
 * wake-up, which on a VM with an idle vCPU takes tens of microseconds.
 */
void pti_mutex_init(pthread_mutex_t *mu);
/* Initialise a condition variable on CLOCK_MONOTONIC. */
void pti_cond_init(pthread_cond_t *cv);
/* Zeroed allocation aligned to 64 (structs with cache-line-aligned members); free() it. */
void *pti_zalloc64(size_t size);
/* Bounded copy of a C string into a fixed buffer. */
void pti_strlcpy(char *dst, const char *src, size_t n);
/* Spin-loop hint. */
static inline void pti_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* ---- sorted arrays ---------------------------------------------------------------- */

/*
 * Binary search over n items sorted by key_of(v, i): the index of the first
 * item whose key is > key (upper) or >= key (!upper), n if there is none.
 * The one bound helper of the driver (allocator tables, streams by id);
 * inline, so a constant key_of folds into the loop.
 */
static inline size_t pti_bound(const void *v, size_t n, uint64_t (*key_of)(const void *v, size_t i),
                               uint64_t key, bool upper)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        uint64_t k = key_of(v, mid);
        if (k < key || (upper && k == key))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* ---- intrusive list ---------------------------------------------------------- */

struct pto_link {
    struct pto_link *prev, *next;
};

static inline void pti_link_init(struct pto_link *h) { h->prev = h->next = h; }
static inline void pti_link_add(struct pto_link *h, struct pto_link *n)
{
    n->prev = h->prev;
    n->next = h;
    h->prev->next = n;
    h->prev = n;
}
static inline void pti_link_del(struct pto_link *n)
{
    n->prev->next = n->next;
    n->next->prev = n->prev;
    n->prev = n->next = n;
}

#define PTI_CONTAINER(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))

/* ---- events (event.c) ----------------------------------------------------------- */

/*
 * One recording of an event.  pto_stream_record creates a node and makes it
 * the event's current one; waits queued afterwards hold a reference to that
 * node, so re-recording never changes what an already queued wait waits for.
 * done/status/cause/time_ns are written once, by the record command's
 * completion under sched_lock, and published by the release store of done.
 */
struct pto_event_node {
    /*
     * Its first 64 bytes: what queueing, firing and waiting on a fence read and
     * write (a fence's node is 64-byte aligned: one cache line, see fence_node).
     */
    atomic_int refs;
    atomic_int done;              /* release-stored by the record's completion */
    int32_t status;               /* 0, or the failure the recorded work carried */
    int peer_waits;               /* waits of other devices on it (peer.c); under the recording device's sched_lock */
    bool fence;                   /* a fence's node: its last reference is dropped under sched_lock */
    uint64_t time_ns;             /* when the record command executed */
    uint64_t event_id;
    /* A fence (pti_fences_take): the point of its stream it stands for, and the list it is on. */
    uint64_t fence_seq, fence_epoch;
    struct pto_event_node *fence_next; /* the stream's fences, under sched_lock */
    /* The failure, read only where status is set (whoever sets status writes these too). */
    uint64_t cause;               /* first failure's token for a failed record */
    uint32_t fail_stream;         /* a failed record: its stream, and the failure */
    uint32_t fail_id;             /*   it carried (0: none, or another device's) */
    char msg[PTI_MSG_LEN];
};

struct pto_event {
    pto_device *dev;
    struct pto_link link;         /* dev->events, under obj_lock */
    uint64_t id;
    struct pto_event_node *cur;   /* under obj_lock; NULL: never recorded */
    bool reserved;                /* cur is a node no record filled yet (pto_event_reserve), under obj_lock */
};

struct pto_event_node *pti_event_node_new(uint64_t event_id);
void pti_event_node_ref(struct pto_event_node *n);
/*
 * Fences: a point of a stream that another stream waits for with no command
 * on the first one (event.c).  A fence of src is a node that src's
 * completion of its command at fence_seq (the last command src had
 * accepted) fills as a record queued right there would be filled: its
 * status the failure src carries then for a command accepted at
 * fence_epoch, its time the command's end.  pti_cmd_finish fires them
 * (pti_fences_fire): the fences of a stream are a list in seq order, so a
 * completion costs one comparison when none is due.  A wait command holds
 * one node (cmd->u.ev.node) or a set of them (cmd->u.ev.set: a wait-many).
 *
 * pti_fences_take: a fence of each srcs[i] (sched_lock not held, no other
 * driver lock held), named event_ids[i] in traces; out[i] is NULL where
 * srcs[i] completed its work healthy already and no device model needs its
 * time.  Returns 0 or -PTO_ENOMEM (nothing taken).
 */
struct pto_cmd;
struct pto_fence_set {
    uint32_t n, next;             /* nodes, and the first one not seen done (the waiting stream's scheduler) */
    uint64_t end_ns;              /* the latest time of the nodes seen done */
    struct pto_event_node *failed; /* the first of them that failed, or NULL */
    struct pto_event_node *v[];
};
int pti_fences_take(pto_device *dev, pto_stream *const *srcs, const uint64_t *event_ids, uint32_t n,
                    struct pto_event_node **out);
/* s completed cmd (sched_lock held, head stored): fill and release its fences up to cmd->seq. */
void pti_fences_fire(pto_device *dev, pto_stream *s, const struct pto_cmd *cmd, int32_t status, uint64_t end_ns);
/* s is freed with fences left (a device closing): complete them canceled (sched_lock held). */
void pti_fences_drop(pto_device *dev, pto_stream *s);
/* Drop a reference to a fence's node (sched_lock held): the last one gives it back to dev's pool. */
void pti_fence_unref(pto_device *dev, struct pto_event_node *n);
/* Free dev's pool of fence nodes (closing, single-threaded). */
void pti_fences_fini(pto_device *dev);
/*
 * A wait on nodes[0..n) (NULL entries skipped; none: nothing queued, 0) on
 * s: one command, quiet, an inferred edge's (injected failures pass it by).
 * The references move to the command (or are dropped on failure).  Returns
 * 0, PTO_QUEUED, or an error.
 */
int pti_wait_many_commit(pto_stream *s, struct pto_event_node **nodes, uint32_t n, uint64_t token, const char *fn);
/* A wait command still to wait for: some node not done yet (sched_lock held). */
bool pti_wait_holds(struct pto_cmd *cmd);
/*
 * The node a failed wait, or a launch behind an inline fence, took its
 * failure from (NULL: none, a node that did not fail, or another device's).
 */
const struct pto_event_node *pti_wait_source(const struct pto_cmd *cmd);
/*
 * A launch that carries its one edge inline (cmd->u.launch.after, a fence:
 * no wait command) is held, queued, until the fence is done, whatever else
 * holds (sched_lock held): what follows it on its stream stays ordered
 * behind the other stream's work, as behind a wait.  A device lost or a
 * cancel lets it go.  Then a failure the fence carries is the launch's own
 * (pti_launch_fence_status: -PTO_EDEP, the cause, the message; 0: none).
 */
bool pti_launch_held(pto_device *dev, pto_stream *s, const struct pto_cmd *cmd);
int32_t pti_launch_fence_status(const struct pto_cmd *cmd, uint64_t *cause, char *msg, size_t n);
/* The latest end of the done nodes of a wait (0: none): the device model's start for it. */
uint64_t pti_wait_end_ns(struct pto_cmd *cmd);
void pti_event_node_unref(struct pto_event_node *n);
/* Current node of e with a new reference (NULL: never recorded). */
struct pto_event_node *pti_event_current(pto_event *e);

/* ---- latches (latch.c) ---------------------------------------------------------- */

struct pto_latch {
    pto_device *dev;
    struct pto_link link;         /* dev->latches, under obj_lock */
    atomic_int released;          /* sticky; release-stored, then the scheduler is woken */
    atomic_int refs;              /* host handle + queued waits */
    atomic_int expired;           /* waits that timed out before a release (pto_latch_expired) */
    int64_t timeout_us;
};

void pti_latch_unref(struct pto_latch *l);
/* Release every latch of dev (cancel/close). */
void pti_latches_release_all(pto_device *dev);

/* ---- kernels (kernel.c) --------------------------------------------------------- */

typedef void (*pto_kernel_fn)(const pto_block *blk, void *const *args);

/*
 * What a kernel's or program's arguments are (pto_kernel_set_arg_kinds):
 * their count and the indices of the tensors (device addresses), which
 * every launch checks at submit.  Set once, never freed before its owner.
 */
struct pto_argkinds {
    uint32_t nargs, ntensors;
    uint32_t idx[];
};

/*
 * Publish kinds[0..nargs) in *slot unless set already (then they must be the
 * same).  Returns 0, -PTO_EINVAL (a bad kind, different from those set),
 * -PTO_ENOMEM.
 */
int pti_argkinds_set(struct pto_argkinds *_Atomic *slot, const uint8_t *kinds, uint32_t nargs,
                     const char *fn, const char *name);
/*
 * Check a launch's arguments against ak (NULL: none declared, nothing to
 * check): at least ak->nargs of them, and each declared tensor inside a
 * live allocation of dev.
 * Returns 0 or -PTO_EINVAL (the message names fn, what and the argument).
 */
int pti_args_check(pto_device *dev, const struct pto_argkinds *ak, const uint64_t *args, uint32_t nargs,
                   const char *fn, const char *what);

/* A kernel's declared accesses (pto_kernel_set_arg_access): PTO_HZ_READ | PTO_HZ_WRITE per argument. */
struct pto_argaccess {
    uint32_t nargs;
    uint8_t bits[];
};

struct pto_kernel {
    pto_device *dev;
    struct pto_link link;         /* dev->kernels, under obj_lock */
    atomic_int refs;              /* host handle + queued launches */
    atomic_int unloaded;
    pto_kernel_fn fn;
    void *handle;                 /* the platform's (sim: dlopen handle); NULL for builtins */
    struct pto_argkinds *_Atomic kinds; /* pto_kernel_set_arg_kinds; NULL: unchecked */
    struct pto_argaccess *_Atomic access; /* pto_kernel_set_arg_access; NULL: none declared */
    _Atomic uint32_t block_ns;    /* host time of its last block run, capped (host-first choice, engines.c) */
    bool arg_timed;               /* its time is its argument's (the builtin spin): never judged by block_ns */
    char name[PTI_NAME_LEN];
};

void pti_kernel_ref(pto_kernel *k);
void pti_kernel_ref_n(pto_kernel *k, uint32_t n); /* n references at once */
void pti_kernel_unref(pto_kernel *k);
/* Close: drop every kernel still loaded. */
void pti_kernels_release_all(pto_device *dev);

/* ---- memory (memory.c) ----------------------------------------------------------- */

/*
 * A node of the allocator's two ordered indexes (treaps keyed by off, memory.c):
 * a free extent, or a block handed out, live (pf == NULL) or waiting for its
 * queued free.
 */
struct pto_mnode {
    uint64_t off, len;            /* offsets into the arena */
    uint64_t max;                 /* free index: the largest len in this subtree (first fit) */
    uint32_t prio;                /* treap priority (random) */
    struct pto_mnode *l, *r;
    struct pto_pending_free *pf;  /* blocks: non-NULL: this block's free is queued */
    struct pto_pending_free *src; /* blocks: live block carved from a queued free, until it executes */
};

/*
 * A block whose stream-ordered free is queued.  It lives on its stream's
 * pending list (under mem_lock) until the free command executes.  Local
 * reuse carves allocations from the front of [off, off+len); what is left
 * when the free executes goes back to the free list, so a carved piece is
 * never returned twice.
 */
struct pto_pending_free {
    struct pto_link link;         /* stream->pending, under mem_lock */
    pto_stream *stream;
    uint64_t off, len;            /* remaining extent still to reclaim */
    uint64_t orig_off, orig_len;  /* the block as it was freed: work queued before the free may use all of it */
    bool local_ok;                /* no event wait was queued on the stream at submit */
};

int pti_mem_init(pto_device *dev);
void pti_mem_fini(pto_device *dev);
/* Turn the live allocation at ptr into a pending free (submit side). */
int pti_mem_pend_free(pto_device *dev, pto_stream *s, pto_devptr ptr, bool local_ok,
                      struct pto_pending_free **out);
/* The free command executed (or was dropped): reclaim what is left of pf. */
void pti_mem_reclaim(pto_device *dev, struct pto_pending_free *pf);
/*
 * The one lookup of device ranges (copies, and launch pointer arguments):
 * 0 if [addr, addr+n) lies in one block that queued work may touch (a live
 * allocation, or the original extent of a queued free), else -PTO_EFAULT
 * with msg set.  O(log live allocations), under mem_lock.
 */
int pti_mem_check_range(pto_device *dev, uint64_t addr, uint64_t n, char *msg, size_t msglen);
/*
 * The first of args[idx[0..n)] that is not inside a live allocation (nor a
 * block whose stream-ordered free is still queued), as its position in idx,
 * or -1 if all are: one mem_lock and a binary search per address.
 */
long pti_mem_find_stray(pto_device *dev, const uint64_t *args, const uint32_t *idx, uint32_t n);
/* True if [addr, addr+n) lies inside the arena. */
bool pti_mem_in_arena(pto_device *dev, uint64_t addr, uint64_t n);

/* ---- commands and streams -------------------------------------------------- */

enum pto_cmd_state {
    PTI_CMD_QUEUED = 0,           /* in the ring, not started */
    PTI_CMD_BLOCKED,              /* started on the scheduler, waiting (delay/latch/event) */
    PTI_CMD_RUNNING,              /* handed to an engine */
};

struct pto_cmd {
    uint32_t kind;                /* PTO_CMD_* */
    uint8_t state;                /* enum pto_cmd_state, under sched_lock */
    bool canceled;                /* withdrawn before it started (pto_stream_cancel_queued / _tokens) */
    bool quiet;                   /* a graph replay's command: a record only for its own first failure */
    bool edge;                    /* an inferred edge's record or wait: injected failures pass it by */
    bool modeled;                 /* the times given pti_cmd_finish are modeled already (a program's schedule) */
    uint64_t token;
    uint64_t seq;
    uint64_t epoch;               /* stream epoch at acceptance, or earlier (pto_stream_backdate) */
    uint64_t submit_ns, start_ns, deadline_ns;
    int32_t inject;               /* > 0: pto_debug_fail_next made this fail with -inject */
    uint32_t heap_used;           /* ring-heap bytes consumed, padding included */
    union {
        struct {
            uint64_t dst, src, n;                         /* host addresses (sim) */
            uint32_t peer;                                /* PTO_CMD_PEER: the other device's serial (peer.c) */
            bool peer_dst;                                /* PTO_CMD_PEER: dst lies on the other device */
        } copy;
        struct { uint64_t dst, n; uint8_t value; } set;
        struct {
            pto_kernel *k;
            uint64_t *args;
            uint32_t blocks, nargs;
            struct pto_event_node *after; /* a fence it waits for before it starts (event.c), or NULL */
        } launch;
        struct {
            struct pto_event_node *node;
            uint64_t event_id;
            bool ordering;                /* record: never carries s's failure (pto_stream_record_ordering) */
            bool peer;                    /* wait: the event is another device's (peer.c) */
            struct pto_fence_set *set;    /* wait: several nodes (then node is NULL; event.c) */
        } ev;                                             /* record, wait */
        struct { struct pto_pending_free *pf; uint64_t ptr; } free;
        struct { uint64_t us; } delay;
        struct { pto_latch *l; } latch;
        struct { pto_program *p; uint64_t *args; uint32_t nargs; bool quick; } prog; /* quick: pti_program_quick */
    } u;
};

/*
 * The started command of a stream that runs on an engine.  At most one
 * command per stream is started at a time, so its run state lives in the
 * stream, keeping ring slots small (the submit path touches fewer lines).
 */
struct pto_run {
    struct pto_cmd *cmd;
    struct pto_task *task;        /* a program's task (orch.c; cmd is its program's command), else NULL */
    pto_stream *stream;
    struct pto_run *qnext;        /* copy or core queue link, under that queue's lock */
    uint32_t next_block;          /* under core_lock */
    uint64_t start_ns;            /* block 0 handed to a core (under core_lock) */
    atomic_uint done_blocks;      /* acq_rel: the last block's finisher completes the launch */
    atomic_int fail_claim;        /* CAS 0 -> 1 by the first failing block */
    int32_t fail_code;            /* written by the claimer, read after done_blocks */
    char fail_msg[PTI_MSG_LEN];
    /* The device model's placement of a launch's blocks (model.c), under sched_lock. */
    uint64_t model_first, model_last;
    uint32_t model_blocks;
    int32_t model_engine;
    /* The blocks that ran, waiting for the launch's turn to be placed (model.c, pti_model_block: the model's lock). */
    struct pto_mblock *model_blk;
    uint32_t model_cap;
};

struct pto_stream_fail {
    bool set;                     /* a failure is in effect */
    bool observed;                /* delivered to the user (pto_completion_observe) */
    int32_t status;               /* the first failure's own status */
    uint64_t cause;               /* the first failure's token (EDEP cause) */
    uint64_t id;                  /* records' fail_id (low 32 bits) names it */
    uint32_t from_stream;         /* a wait's failure: the stream, and the failure, */
    uint32_t from_id;             /*   its event carried (0: none); observed with it */
    uint64_t observed_epoch;      /* commands with epoch >= this run normally */
    uint64_t seq;                 /* the failing command */
    char msg[PTI_MSG_LEN];
};

/*
 * A command accepted while its stream's ring had no room for it (a slot, heap
 * bytes or a dependency entry), waiting to enter the ring in order
 * (overflow.c).  Its cmd is complete (seq, epoch, token, injection) except for
 * ring resources: the launch arguments are a private copy until it enters.
 */
#define PTI_OVF_INLINE_ARGS 8     /* launch arguments an overflow entry holds without a malloc */

struct pto_ovf_ent {
    struct pto_cmd cmd;
    uint64_t *args;               /* launch arguments past PTI_OVF_INLINE_ARGS words (malloc'd) */
    uint32_t heap_len;            /* ring-heap bytes it needs on entry */
    bool dep;                     /* it needs a dependency entry on entry (an event wait) */
    uint64_t inline_args[PTI_OVF_INLINE_ARGS];  /* the arguments otherwise (entries move: no pointer) */
};

/* Where an overflow entry's launch arguments are. */
static inline uint64_t *pti_ovf_args(struct pto_ovf_ent *ent)
{
    return ent->heap_len > sizeof(ent->inline_args) ? ent->args : ent->inline_args;
}

/* A stream's overflow: a circular array, under submit_lock. */
struct pto_overflow {
    bool on;                      /* pto_stream_set_overflow: accept instead of -PTO_EAGAIN */
    bool slot;                    /* the slot pti_slot_begin handed out lies here */
    struct pto_ovf_ent *ents;     /* ents[head] holds seq tail + 1 */
    uint32_t cap, head;           /* cap: a power of two (0: not allocated yet) */
    uint32_t refill;              /* free ring slots a refill waits for (hysteresis) */
    uint32_t hwm;                 /* high-water mark of commands waiting */
    uint64_t refills;             /* refills that moved commands into the ring (batches, not commands) */
};

struct pto_stream {
    pto_device *dev;
    uint32_t id;
    int32_t priority;

    /* ring (the scheme at the top of this file; the essay in ring.c) */
    uint32_t entries, mask;
    struct pto_cmd *ring;
    _Atomic uint64_t tail;        /* seq of the last command in the ring; producer: release */
    /*
     * seq of the last accepted command: >= tail, and (tail, accepted] wait in
     * the overflow (overflow.c).  Stored before tail, under submit_lock.
     */
    _Atomic uint64_t accepted;
    /* Completion-side counters on their own cache line (no false sharing with tail). */
    _Alignas(64) _Atomic uint64_t head; /* seq of the last completed command; completion: release */

    /* producer side, under submit_lock */
    _Alignas(64) pthread_mutex_t submit_lock;
    uint8_t *heap;
    uint32_t heap_size;
    uint64_t heap_alloc;          /* bytes ever allocated (producer) */
    _Atomic uint64_t heap_freed;  /* bytes ever released (completion: release) */
    uint32_t dep_size;
    _Atomic uint32_t dep_used;    /* wait entries in use (completion decrements) */
    _Atomic uint32_t waits_pending; /* event waits queued and not executed */
    _Atomic uint64_t epoch;       /* bumped when a failure is observed */
    uint32_t fail_next_count;
    int32_t fail_next_status;
    uint32_t window_hwm, heap_hwm, dep_hwm;
    _Atomic uint64_t refused;     /* submissions the ring had no room for */
    uint64_t backdate;            /* commands are accepted at min(epoch, backdate) (pto_stream_backdate) */
    bool slot_dep;                /* the ring slot pti_slot_begin handed out took a dep entry */
    uint64_t kick_first;          /* first command committed without its kick (pti_defer_kicks); 0: none */
    uint64_t slot_locks;          /* submit_lock takes by pti_slot_begin and pti_batch_begin (a batch: one) */
    struct pto_overflow ovf;      /* commands accepted while the ring had no room */
    /*
     * The attached hazard table's record of this stream (hazard.c), found at
     * its first ordered launch and kept while hz_serial names that table:
     * a launch need not look its stream up.  The producer's, as the rest.
     */
    struct hz_stream *hz_me;
    uint64_t hz_serial;

    /* scheduler side, under sched_lock */
    struct pto_link ready;        /* dev->ready while on_ready (sched.c) */
    bool on_ready;                /* on dev->ready: it may have work to start */
    size_t rung_at;               /* its index in dev->rung once it has a ring */
    pto_stream *bell_next;        /* dev->doorbell link while bell is set */
    atomic_int bell;              /* 1 while s is on dev->doorbell (seq_cst; sched.c) */
    struct pto_run run;           /* the head command while it is on an engine */
    uint64_t model_end;           /* modeled end of its last completed command (model.c) */
    /* Its head copy ran but waits to be placed (model.c, pti_model_park): 1 parked, 2 being placed. */
    uint8_t parked;
    int32_t park_engine;
    uint64_t park_ready, park_start, park_end;
    struct pto_mprog *model_prog; /* its program run's tasks until the run's turn (model.c) */
    bool active;                  /* head command is on an engine */
    bool destroyed;               /* freed once the ring is empty */
    struct pto_link doomed;       /* on dev->doomed while destroyed with work left (self-linked otherwise) */
    uint64_t cancel_seq;          /* commands with seq <= this are dropped */
    uint64_t fail_ids;
    struct pto_stream_fail fail;
    struct pto_event_node *fence_first, *fence_last; /* fences of s not fired yet, seq order (event.c) */

    /* memory side, under mem_lock */
    struct pto_link pending;      /* struct pto_pending_free */
};

/* ---- submission (submit.c, ring.c) ---------------------------------------------- */

/*
 * Submission slots (submit.c).  pti_slot_begin takes submit_lock and
 * reserves a ring slot, heap_len heap bytes and (dep) one dependency entry,
 * or, when they are not free (or commands wait in the overflow already) and
 * s accepts overflow, an overflow entry with heap_len private bytes; on
 * success the zeroed slot is returned with the lock held and *heap pointing
 * at the reserved bytes.  pti_slot_commit publishes it and unlocks; it
 * returns 0 (in the ring) or PTO_QUEUED (in the overflow).  pti_slot_abort
 * unlocks without queueing anything.
 */
int pti_slot_begin(pto_stream *s, const char *fn, uint32_t heap_len, bool dep,
                   struct pto_cmd **cmd, void **heap);
int pti_slot_commit(pto_stream *s, struct pto_cmd *cmd, uint32_t kind, uint64_t token);
void pti_slot_abort(pto_stream *s);
/*
 * Hand commands just published into the ring of s (first: the first one's
 * seq) to a scheduler pass if s was idle (no lock held; see pti_slot_commit).
 */
void pti_stream_kick(pto_stream *s, uint64_t first);
/*
 * Ring room (ring.c; submit_lock held; head as loaded by the caller, tail
 * the producer's): 0 if a command needing heap_len heap bytes and (dep) one
 * dependency entry fits now, with *used the heap bytes it is charged
 * (padding included) and *heap where they start; else which one is short:
 * PTI_RING_SLOTS, PTI_RING_HEAP or PTI_RING_DEPS.
 */
enum { PTI_RING_SLOTS = 1, PTI_RING_HEAP, PTI_RING_DEPS };
int pti_ring_room(pto_stream *s, uint64_t head, uint64_t tail, uint32_t heap_len, bool dep,
                  uint32_t *used, uint8_t **heap);
/* Take one dependency entry for a wait entering the ring (submit_lock held). */
void pti_ring_take_dep(pto_stream *s);
/* Charge `used` heap bytes to command seq entering the ring; update the high-water marks. */
void pti_ring_charge(pto_stream *s, uint32_t used, uint64_t seq);
/* Allocate s's ring and heap at its first submission (submit_lock held): 0, or -1 out of memory. */
int pti_ring_alloc(pto_stream *s);
/* Free s's ring and heap, if allocated. */
void pti_ring_free(pto_stream *s);

/* ---- graphs (graph.c) ---------------------------------------------------------------- */

/*
 * Set by pto_graph_replay around the commands it queues: pti_slot_commit
 * marks a command submitted by this thread meanwhile quiet (pto_cmd.quiet).
 * Thread-local, so another thread's submissions on the same streams are
 * never marked.
 */
extern _Thread_local bool pti_quiet __attribute__((tls_model("initial-exec")));
/*
 * Also set by pto_graph_replay: the submission time every command it queues
 * carries (one clock read per replay; on a VM a read costs tens of ns).
 * 0: read the clock per command.
 */
extern _Thread_local uint64_t pti_submit_ns __attribute__((tls_model("initial-exec")));
/*
 * Also set by pto_graph_replay: a command committed meanwhile is published
 * without its kick, and the stream remembers the first such command
 * (kick_first); pti_stream_kick_deferred gives the stream its one kick once
 * the replay's commands are all in.  Without this, an idle device starts
 * each tiny command as it is committed, and the submitting thread runs a
 * scheduler pass per command.  A late kick is as safe as a slow submitter:
 * the command is published (tail) before it, as always.
 */
extern _Thread_local bool pti_defer_kicks __attribute__((tls_model("initial-exec")));
void pti_stream_kick_deferred(pto_stream *s);
/*
 * A run of commands on s queued as one batch (submit.c): s->submit_lock held
 * from pti_batch_begin to pti_batch_end, one fence and no kick in between.
 * Only commands whose submission takes no other lock, or only obj_lock as
 * it does alone (a record), go in a batch: launches, copies, memsets, a
 * replay's done record and notify; pti_stream_kick_deferred starts them.
 */
extern _Thread_local pto_stream *pti_batch_stream __attribute__((tls_model("initial-exec")));
void pti_batch_begin(pto_stream *s);
void pti_batch_end(pto_stream *s);
/*
 * A run of slots inside a batch (a graph replay's launches, submit.c): the
 * ring's room is read once for the whole run, each pti_slot_run_add takes the
 * next slot and its heap bytes from that room and gives the command its
 * commit fields (as pti_slot_commit: seq, epoch, token, quiet, injection),
 * and pti_slot_run_end publishes every slot taken with one accepted and one tail
 * store.  pti_slot_run_begin returns false where the run cannot go so (commands
 * wait in the overflow, the ring is not allocated, the device is lost or
 * closing): the commands go one at a time (pti_slot_begin), which reports
 * it.  pti_slot_run_add returns NULL once the room read is spent; the commands
 * after it go one at a time, behind the run, once pti_slot_run_end published it.
 * The caller fills what pti_slot_run_add returns (cmd->u; *heap, heap_len bytes)
 * before pti_slot_run_end.
 */
struct pto_slot_run {
    pto_stream *s;
    uint64_t head, freed;         /* the room read once: the ring's head and heap bytes given back */
    uint32_t pos;                 /* heap_alloc's offset in the heap */
    uint64_t first, seq;          /* the run's first seq, the last taken (first - 1: none yet) */
    uint64_t epoch, submit_ns;
};
bool pti_slot_run_begin(pto_stream *s, struct pto_slot_run *r);
/* Inline: a replay takes a slot per command, and a call was a tenth of its work per node. */
static inline struct pto_cmd *pti_slot_run_add(struct pto_slot_run *r, uint32_t kind, uint64_t token,
                                               uint32_t heap_len, void **heap)
{
    pto_stream *s = r->s;
    uint64_t seq = r->seq + 1;
    if (seq - r->head > s->entries)
        return NULL;
    uint32_t used = 0;
    uint8_t *h = s->heap;
    if (heap_len) { /* as pti_ring_room, against the room read at pti_slot_run_begin */
        uint64_t in_use = s->heap_alloc - r->freed;
        uint32_t pos = r->pos;
        uint32_t pad = pos + heap_len > s->heap_size ? s->heap_size - pos : 0;
        used = pad + heap_len;
        if ((uint64_t)used > s->heap_size - in_use)
            return NULL;
        h = s->heap + (pad ? 0 : pos);
        pos = (pad ? 0 : pos) + heap_len;
        r->pos = pos == s->heap_size ? 0 : pos; /* heap_alloc % heap_size, kept without a division */
    }
    struct pto_cmd *cmd = &s->ring[(seq - 1) & s->mask];
    memset(cmd, 0, sizeof(*cmd));
    s->heap_alloc += used;
    cmd->heap_used = used;
    cmd->kind = kind;
    cmd->token = token;
    cmd->quiet = pti_quiet;
    cmd->seq = seq;
    cmd->state = PTI_CMD_QUEUED;
    cmd->epoch = r->epoch;
    cmd->submit_ns = r->submit_ns;
    if (s->fail_next_count > 0) { /* as pti_slot_commit's */
        s->fail_next_count--;
        cmd->inject = s->fail_next_status;
    }
    r->seq = seq;
    *heap = h;
    return cmd;
}
void pti_slot_run_end(struct pto_slot_run *r);

/* ---- the overflow (overflow.c) ----------------------------------------------------- */

/*
 * Reserve the next overflow entry of s (submit_lock held) with heap_len bytes
 * for launch arguments; 0 and *ent (zeroed but for its args buffer), or
 * -PTO_ENOMEM.  It counts only once pti_slot_commit has published it.
 */
int pti_ovf_reserve(pto_stream *s, uint32_t heap_len, bool dep, struct pto_ovf_ent **ent);
/* Give back an entry pti_ovf_reserve handed out and nothing published (submit_lock held). */
void pti_ovf_unreserve(pto_stream *s, struct pto_ovf_ent *ent);
/*
 * Move overflow commands of s into its ring, in order, while they fit
 * (submit_lock held); returns how many moved, and *first the first one's
 * seq.  A refill waits until a batch of slots is free (ovf.refill) unless
 * the ring is empty, so one producer wake-up admits many commands.
 */
uint32_t pti_ovf_refill(pto_stream *s, uint64_t *first);
/*
 * Whether pti_ovf_refill could move anything now, read without submit_lock
 * by the completion path right after it stored head (overflow.c).  A stale
 * tail only makes it say yes: the refill itself decides under the lock.
 */
static inline bool pti_ovf_due(pto_stream *s)
{
    /* seq_cst: the completion side of the overflow hand-off. */
    uint64_t accepted = atomic_load(&s->accepted);
    uint64_t tail = atomic_load_explicit(&s->tail, memory_order_relaxed);
    if (accepted == tail)
        return false;
    uint32_t in_ring = (uint32_t)(tail - atomic_load_explicit(&s->head, memory_order_relaxed));
    return in_ring == 0 || s->entries - in_ring >= s->ovf.refill;
}
/* Release the overflow's memory (the stream is being freed; no entry is left). */
void pti_ovf_fini(pto_stream *s);

/* ---- stream lifecycle (stream.c) ---------------------------------------------------- */

/* The stream with this id, or NULL (sched_lock held). */
pto_stream *pti_stream_find(pto_device *dev, uint32_t id);
/* Destroyed streams whose rings drained (sched_lock held). */
void pti_streams_reap(pto_device *dev);
/*
 * Mark the failure fail_id (a record's, low 32 bits) of stream stream_id
 * observed, if it is still the stream's and unobserved (sched_lock held).
 * Returns true if it did.
 */
bool pti_stream_observe(pto_device *dev, uint32_t stream_id, uint32_t fail_id);
/* Unlink and free a stream (sched_lock held, ring empty). */
void pti_stream_free_now(pto_device *dev, pto_stream *s);
/*
 * Whether s holds no command at all, in its ring or its overflow (sched_lock
 * held, no submitter running on s: a stream being destroyed or closed).
 */
static inline bool pti_stream_idle(pto_stream *s)
{
    return !s->active && atomic_load_explicit(&s->head, memory_order_relaxed) ==
                             atomic_load_explicit(&s->accepted, memory_order_acquire);
}

/* ---- execution (exec.c) ------------------------------------------------------------- */

/*
 * Whether a command of s accepted at epoch fails for s's earlier failure
 * (sched_lock held): the failure is unobserved, or was observed after the
 * command was accepted.  The rule of exec.c ("Failure propagation"); fences
 * (event.c) apply it too.
 */
static inline bool pti_failed_for(const pto_stream *s, uint64_t epoch)
{
    return s->fail.set && (!s->fail.observed || epoch < s->fail.observed_epoch);
}

/* Scheduler: start the head command of s (sched_lock held). Returns true if progress. */
bool pti_stream_step(pto_device *dev, pto_stream *s, uint64_t now, uint64_t *next_deadline);
/*
 * Whether pti_stream_step could do anything (sched_lock held): no command of
 * s is on an engine, and s holds a command.  The load of tail is seq_cst, as
 * in pti_stream_step (see pti_slot_commit).
 */
static inline bool pti_stream_has_work(pto_stream *s)
{
    return !s->active &&
           atomic_load_explicit(&s->head, memory_order_relaxed) != atomic_load(&s->tail);
}
/*
 * Complete s's head command cmd (sched_lock held): record, resources, head
 * advance, wake-ups, deferred stream free.  status/cause/msg are the
 * command's outcome before stream-failure bookkeeping; own == true marks a
 * failure of the command itself (it becomes the stream's first failure).
 */
void pti_cmd_finish(pto_device *dev, pto_stream *s, struct pto_cmd *cmd, int32_t status,
                    uint64_t cause, const char *msg, bool own, uint64_t start_ns,
                    uint64_t end_ns, int32_t engine);
/* Cancel every not-started command of s (sched_lock held); returns the count. */
int pti_stream_cancel_locked(pto_device *dev, pto_stream *s);
/* Drop s's queued commands whose seq <= cancel_seq, while its head is not on an engine (overflow included). */
void pti_stream_drop_canceled(pto_device *dev, pto_stream *s);

/* ---- command kinds (cmddef.c) ------------------------------------------------------- */

/* Where a command runs once started (pti_stream_step, exec.c). */
enum pto_cmd_where {
    PTI_TRACE_ONLY = 0,   /* not a command: a kind only trace records carry (block, task) */
    PTI_AT_ONCE,          /* nothing to run: it completes, healthy, when it starts */
    PTI_ON_ENGINE,        /* .start hands it to an engine or a thread, which finishes it */
    PTI_IN_SCHED,         /* held by the scheduler: .start arms it, .poll says when it may finish */
};

/* How a command held by the scheduler ends (.poll). */
struct pto_cmd_outcome {
    int32_t status;       /* 0 or -PTO_E* */
    uint64_t cause;       /* the token its failure names */
    bool own;             /* its own failure: the stream's first from now on */
    char msg[PTI_MSG_LEN];
};

/*
 * One row per command kind, as io_uring's opdef.c: exec.c runs every kind
 * through its row, and each row's functions live in the kind's own file.
 * Every function runs under sched_lock; NULL: nothing to do there.  The
 * failure and cancel rules stay in exec.c (pre_status), for every kind.
 */
struct pto_cmd_def {
    const char *name;     /* its trace records' name (unless .trace_name gives one) */
    enum pto_cmd_where where;
    /*
     * Starting it is host work of its own (a program allocates its run and
     * wakes an orchestration thread): the thread that queued it does not run
     * the scheduler pass that starts it (pti_stream_kick), the scheduler does.
     */
    bool slow_start;
    /* Start cmd (cmd->start_ns is now; PTI_ON_ENGINE: cmd is RUNNING and s active already). */
    void (*start)(pto_device *dev, pto_stream *s, struct pto_cmd *cmd);
    /*
     * PTI_IN_SCHED: whether cmd may finish at now: true with *out filled;
     * false to hold it on (a deadline to wake for is cmd->deadline_ns).
     */
    bool (*poll)(pto_device *dev, pto_stream *s, struct pto_cmd *cmd, uint64_t now,
                 struct pto_cmd_outcome *out);
    /*
     * cmd's own part of its finish (pti_cmd_finish), before its record is
     * pushed: status/cause/msg its outcome, fail_id the failure its status
     * is (0: none), end_ns its end.
     */
    void (*finish)(pto_device *dev, pto_stream *s, struct pto_cmd *cmd, int32_t status, uint64_t cause,
                   uint64_t fail_id, const char *msg, uint64_t end_ns);
    /* Give back what cmd holds (references, dependency entries), whatever its outcome. */
    void (*release)(pto_device *dev, pto_stream *s, struct pto_cmd *cmd);
    /* The name of cmd's trace record, where it has its own (a kernel's, a program's). */
    const char *(*trace_name)(const struct pto_cmd *cmd);
};

/* The row of kind (PTO_CMD_*); NULL for a kind the driver does not know. */
const struct pto_cmd_def *pti_cmd_def(uint32_t kind);

/* The rows' functions, each in its kind's file. */
void pti_launch_release(pto_device *dev, pto_stream *s, struct pto_cmd *cmd);        /* kernel.c */
const char *pti_launch_name(const struct pto_cmd *cmd);                               /* kernel.c */
void pti_program_release(pto_device *dev, pto_stream *s, struct pto_cmd *cmd);       /* program.c */
const char *pti_program_cmd_name(const struct pto_cmd *cmd);                          /* program.c */
void pti_record_finish(pto_device *dev, pto_stream *s, struct pto_cmd *cmd, int32_t status, uint64_t cause,
                       uint64_t fail_id, const char *msg, uint64_t end_ns);           /* event.c */
void pti_record_release(pto_device *dev, pto_stream *s, struct pto_cmd *cmd);        /* event.c */
bool pti_wait_poll(pto_device *dev, pto_stream *s, struct pto_cmd *cmd, uint64_t now,
                   struct pto_cmd_outcome *out);                                      /* event.c */
void pti_wait_release(pto_device *dev, pto_stream *s, struct pto_cmd *cmd);          /* event.c */
void pti_free_release(pto_device *dev, pto_stream *s, struct pto_cmd *cmd);          /* memory.c */
void pti_latch_start(pto_device *dev, pto_stream *s, struct pto_cmd *cmd);           /* latch.c */
bool pti_latch_poll(pto_device *dev, pto_stream *s, struct pto_cmd *cmd, uint64_t now,
                    struct pto_cmd_outcome *out);                                     /* latch.c */
void pti_latch_release(pto_device *dev, pto_stream *s, struct pto_cmd *cmd);         /* latch.c */
void pti_delay_start(pto_device *dev, pto_stream *s, struct pto_cmd *cmd);           /* sched.c */
bool pti_delay_poll(pto_device *dev, pto_stream *s, struct pto_cmd *cmd, uint64_t now,
                    struct pto_cmd_outcome *out);                                     /* sched.c */

/* ---- completion queue (completion.c) ---------------------------------------------- */

struct pto_cq_rec {
    pto_completion c;
};

int pti_cq_init(pto_device *dev);
void pti_cq_fini(pto_device *dev);
/* Push a record (any thread; takes cq_lock).  Wakes the eventfd on empty -> non-empty. */
void pti_cq_push(pto_device *dev, const pto_completion *c);
/* Wake every cq waiter (device lost/closing). */
void pti_cq_wake_all(pto_device *dev);

/* ---- trace (trace.c) ---------------------------------------------------------------- */

static inline bool pti_trace_on(pto_device *dev);
void pti_trace_push(pto_device *dev, const pto_trace_record *r);
void pti_trace_fini(pto_device *dev);
/*
 * Push the trace record of cmd, run on s from start_ns to end_ns by engine
 * (PTO_ENGINE_NONE: the scheduler) with status: the whole command
 * (block == PTI_TRACE_WHOLE), or block `block` of a launch (kind
 * PTO_CMD_BLOCK).  The one place a record is filled.
 */
enum { PTI_TRACE_WHOLE = -1 };
struct pto_when; /* device and host times (the device model's section) */
void pti_trace_cmd(pto_device *dev, const pto_stream *s, const struct pto_cmd *cmd, int64_t block,
                   int32_t status, const struct pto_when *w);
/*
 * The point fence n of s stands for, reached at end_ns (event.c): a record
 * of kind PTO_CMD_RECORD with n's event, as a record command there would
 * leave, so that traces draw the arrow to the wait.
 */
void pti_trace_fence(pto_device *dev, const pto_stream *s, const struct pto_event_node *n, uint64_t submit_ns,
                     uint64_t end_ns);

/* ---- engines (engines.c) ------------------------------------------------------------ */

struct pto_engine {
    pto_device *dev;
    int32_t id;
    uint32_t is_copy;
    _Atomic uint64_t busy_ns, commands, bytes;
    bool sleeping;                /* in its condition wait (its queue's lock) */
    bool claimed;                 /* a helper runs in its stead: it stays asleep (its queue's lock; engines.c) */
    _Atomic uint64_t kept_ns;     /* when the helper's current run in its stead started; 0: none (the backstop) */
    _Atomic bool kept_by_sched;   /* that run's keeper is a scheduler thread (set before kept_ns) */
    _Atomic uint64_t backstopped; /* the kept_ns an engine was last woken for (claimed by CAS: once per kept run) */
};

int pti_engines_start(pto_device *dev);
/* Stop and join every thread (closing: queues are empty). */
void pti_engines_stop(pto_device *dev);
/* Hand cmd to the copy engines / compute cores (sched_lock held). */
void pti_copy_enqueue(pto_device *dev, pto_stream *s, struct pto_cmd *cmd);
void pti_core_enqueue(pto_device *dev, pto_stream *s, struct pto_cmd *cmd);
/*
 * Run queued core (copy) work on the calling device thread in a sleeping
 * core's (copy engine's) stead, instead of waking it (no lock held; engines.c).
 */
void pti_core_help(pto_device *dev);
void pti_copy_help(pto_device *dev);
/*
 * The backstop of kept runs (engines.c): wake an engine for a queue whose
 * helper or host thread has run one command longer than its budget;
 * returns the next deadline to check at (0: none).  Its watchers call it:
 * the scheduler thread's timed wait (sched_lock held), and a host thread
 * blocked in a completion wait while keeps are recent, which watches the
 * runs a scheduler thread keeps (completion.c, cq_lock held):
 * pti_kept_watch before it sleeps (counts it, scans, and lowers *until to
 * its next look; false: keeps are not recent, it does not watch),
 * pti_kept_unwatch after each such sleep, and pti_kept_leave when the wait
 * returns (what it watched gets an engine now).
 */
uint64_t pti_backstop(pto_device *dev, uint64_t now);
bool pti_kept_watch(pto_device *dev, uint64_t *until);
void pti_kept_unwatch(pto_device *dev);
void pti_kept_leave(pto_device *dev);
/* Mark the calling thread as dev's scheduler thread (it may help; pti_sched_main). */
void pti_sched_thread_init(pto_device *dev);
/* Whether r is a program task whose site ran under PTI_TINY_NS last time, without a delay (orch.c). */
bool pti_task_tiny(const struct pto_run *r);
bool pti_task_short(const struct pto_run *r, uint64_t limit_ns);
/* Whether r is a program's task held by a testing delay (pto_debug_task_delay; orch.c). */
bool pti_task_delayed(const struct pto_run *r);
/* Hand a prepared one-block run (a program's task) to the compute cores (no lock needed). */
void pti_core_enqueue_run(pto_device *dev, struct pto_run *r);
/* Hand a qnext-linked list of such runs to the cores at once: one lock, one round of wake-ups. */
void pti_core_enqueue_runs(pto_device *dev, struct pto_run *runs);
/*
 * blk->fail of every block a core runs (a launch's, a program's task's; blk->ctx
 * is its pto_run): the first failure of the run wins (CAS on fail_claim) and
 * keeps its code (outside 1..PTO_ENOTSUP: PTO_EKERNEL) and message;
 * PTO_EDEVLOST loses the device, naming r->cmd's token.
 */
void pti_block_fail(const pto_block *blk, int code, const char *msg);
/* The CPUs the calling thread may run on (sched_getaffinity), at least 1. */
uint32_t pti_host_cpus(void);
/* Make the calling device thread's timed sleeps precise (timer slack 1 us; engines.c). */
void pti_thread_precise_timers(void);
/*
 * Whether an idle device thread may spin now (any lock or none): a CPU is
 * left for the host thread after every awake device thread, the caller
 * included, both among the CPUs the device was opened on and among the
 * machine's runnable threads (/proc/loadavg).  Counts a spin or a refusal
 * in the device stats.
 */
bool pti_may_spin(pto_device *dev);
/* The same test, not counted: a spinner leaves when it fails (a device thread woke). */
bool pti_cpu_spare(pto_device *dev);
/*
 * The test for a device thread on CPU `cpu` (pti_cpu_spare passes its
 * sched_getcpu()): never on the CPU of the host thread that last submitted
 * or waited (dev->host_cpu; counted in idle_host_cpu).  On another CPU the
 * host runs beside the caller, so the machine's runnable threads (host and
 * caller included) need only fit its CPUs.
 */
bool pti_cpu_spare_at(pto_device *dev, int cpu);
/* Note the calling host thread's CPU in dev->host_cpu (pti_host_begin, pti_host_serve). */
void pti_host_note_cpu(pto_device *dev);
#define PTI_KEPT_POLL_NS 1000000ull    /* a watcher's longest sleep while keeps are recent (scheduler, host waiter) */
#define PTI_KEPT_RECENT_NS 10000000ull /* how long a keep counts as recent */
/*
 * Host first (engines.c).  pti_host_first: whether a host thread is to run
 * short queued work itself now (pto_device_config.host_first).  Between
 * pti_host_begin and pti_host_run the calling host thread counts as coming
 * back to both engine queues (a push it causes wakes nobody);
 * pti_host_run runs short queued runs in sleeping engines' stead, at most
 * budget_ns of starts, and wakes engines for what it leaves.  Returns the
 * runs it ran.  No lock held.
 */
bool pti_host_first(pto_device *dev);
void pti_host_begin(pto_device *dev);
uint32_t pti_host_run(pto_device *dev, uint64_t budget_ns);
/*
 * pti_host_may_first: whether the calling thread is a host thread and
 * host_first is not off, so that it may come first (no choice made, no
 * load read).  pti_host_end: after pti_host_begin, make the choice only if
 * engine work is queued; then pti_host_run, else wake engines for it.
 */
bool pti_host_may_first(pto_device *dev);
uint32_t pti_host_end(pto_device *dev, uint64_t budget_ns);
/* Whether the calling thread is a host thread between pti_host_begin and its run of dev's queues (its pass). */
bool pti_host_in_pass(const pto_device *dev);
/*
 * For a host thread about to block for a completion (completion.c): if the
 * host comes first, serve a pending kick's pass and run short queued work
 * (pti_host_run).  True if a command completed meanwhile.  No lock held.
 */
bool pti_host_serve(pto_device *dev);
/*
 * Whether a run of p is quick (orch.c): orchestrated inline (a small
 * compiled table, run_inline) and every task site timed tiny last time
 * (pti_task_tiny's bound, no testing delay).  The submitter of a quick run
 * starts it in its own pass (pti_stream_kick) instead of leaving its start
 * to the scheduler thread (the program row's slow_start).  Read at
 * submission, while the caller holds p.
 */
bool pti_program_quick(const pto_device *dev, pto_program *p);

/* ---- programs (program.c: objects; orch.c: runs) ------------------------------------- */

struct pto_program {
    pto_device *dev;
    struct pto_link link;         /* dev->programs, under obj_lock */
    atomic_int refs;              /* host handle + queued runs */
    atomic_int unloaded;
    void *handle;
    const struct pto_program_desc *desc;
    char name[64];
    _Atomic uint32_t *delay_us;   /* per site: test hook (pto_debug_task_delay) */
    _Atomic uint32_t *site_ns;    /* per site: its last task's run time, ns (pti_task_tiny) */
    struct pto_argkinds *_Atomic kinds; /* pto_program_set_arg_kinds; NULL: unchecked */
    /* statistics, under stats_lock */
    pthread_mutex_t stats_lock;
    pto_program_stats st;
    /* pto_program_record_edges; the last run's resolved graph (orch.c's arrays), under stats_lock */
    atomic_bool record_edges;
    uint32_t g_tasks, *g_sites, *g_off, *g_pred, *g_info;
    /* orch.c: the last recorded run's task and edge counts, its next run's first sizes (no growth per task) */
    _Atomic uint32_t hint_tasks, hint_edges;
};

void pti_program_ref(pto_program *p);
void pti_program_unref(pto_program *p);
/* For graph.c: p's device, its parameter count, whether it was unloaded. */
pto_device *pti_program_device(const pto_program *p);
uint32_t pti_program_nparams(const pto_program *p);
bool pti_program_unloaded(pto_program *p);
/* pti_args_check against p's declared argument kinds (none declared: 0). */
int pti_program_args_check(pto_program *p, const uint64_t *args, uint32_t nargs, const char *fn);
/* Add one finished run's figures to p's statistics (sums, and the high-water marks' maxima). */
void pti_program_count_run(pto_program *p, const pto_program_stats *run);
/* Whether p's runs keep the edges they resolve (pto_program_record_edges). */
bool pti_program_records_edges(pto_program *p);
/* A run's resolved graph becomes p's last (pto_program_last_edges): p takes the arrays (malloc'd). */
void pti_program_keep_edges(pto_program *p, uint32_t ntasks, uint32_t *sites, uint32_t *off, uint32_t *pred,
                            uint32_t *info);
/* Close: drop every program still loaded. */
void pti_programs_release_all(pto_device *dev);

struct pto_orch_pool;
/* Start the device's orchestration threads once (obj_lock held; the first load): 0 or -PTO_ENOMEM. */
int pti_orch_start(pto_device *dev);
/* Start the program command cmd of s (its row's .start, sched_lock held): hand it to the orchestration threads. */
void pti_program_start(pto_device *dev, pto_stream *s, struct pto_cmd *cmd);
/* Run a program's task on engine eng (a core thread, no lock held), then complete it; returns when its work ended. */
uint64_t pti_task_run(pto_device *dev, struct pto_engine *eng, struct pto_run *r);
/* Close: join the orchestration threads (no program runs). */
void pti_programs_stop(pto_device *dev);

/* ---- the device model (model.c) ------------------------------------------------------ */

/* A command's or block's times: device (modeled, or the host's) and the host's. */
struct pto_when {
    uint64_t start_ns, end_ns, dispatch_ns;
    int32_t engine;
    uint64_t host_start_ns, host_end_ns;
    int32_t host_engine;
};

/*
 * One program task as the model sees it (orch.c fills it, the model places it
 * in its turn).  At submission only site, ran (false), early and start_ns (0)
 * are set; the other inputs when it ran (ran true), the outputs by the model.
 */
struct pto_mtask {
    uint64_t dur_ns;              /* modeled duration (pto_model_work_ns), when it ran */
    uint64_t host_start_ns, host_end_ns;
    int32_t host_engine, status;
    uint32_t site;
    uint8_t kind;                 /* 0: AIC (cube work), 1: AIV */
    bool ran;
    bool early;                   /* PTO_SITE_EARLY_RESOLVE: its consumers are staged when it starts */
    /* outputs */
    uint64_t submit_ns, dispatch_ns, start_ns, end_ns; /* submit_ns: when the orchestrator submitted it */
    int32_t engine;
};

struct pto_model;
/* Whether dev models its device time (a profile is set). */
static inline struct pto_model *pti_model_of(pto_device *dev);
/* Free dev's model (close). */
void pti_model_fini(pto_device *dev);
/*
 * A copy that ran on the host is placed on the modeled copy engines only once
 * no other stream can still bring work that is ready before it (sched_lock
 * held): true when cmd is parked for that (pti_cmd_finish returns at once;
 * pti_model_unpark finishes it later with these arguments).
 */
bool pti_model_park(pto_device *dev, pto_stream *s, struct pto_cmd *cmd, int32_t status, uint64_t start,
                    uint64_t end, int32_t engine);
/* Finish the parked copies whose turn has come, in modeled order (sched_lock held; end of pti_cmd_finish). */
void pti_model_unpark(pto_device *dev);
/*
 * Block b of a launch did *work from host w->start_ns to w->end_ns on host
 * engine w->engine (no lock held): kept, to be placed with the launch's
 * other blocks when the launch's turn comes (pti_model_finish, which traces
 * them then): false.  Out of host memory: placed now, *w modeled, true (the
 * caller traces it).
 */
bool pti_model_block(pto_device *dev, struct pto_run *run, uint32_t b, int32_t status, const pto_work *work,
                     struct pto_when *w);
/* Free what the model keeps for s (s is being freed). */
void pti_model_stream_free(pto_stream *s);
/* The modeled duration and core kind (0 AIC, 1 AIV) of one block's work. */
uint64_t pti_model_cost(struct pto_model *m, const pto_work *work, uint8_t *kind);
/*
 * pti_cmd_finish's hook (sched_lock held): turn w's host times of cmd into
 * modeled ones and advance the clocks; s->model_end becomes its end.
 */
void pti_model_finish(pto_device *dev, pto_stream *s, struct pto_cmd *cmd, int32_t status,
                      struct pto_when *w);
/*
 * A program run of n tasks completed on the host (no driver lock held; its
 * stream's head is the program, about to finish with cmd->modeled set): the
 * model takes t (malloc'd; it frees it) and the graph (preds: the compiled
 * table pred_off/pred_ids, which live with d, or the resolved graph, which
 * it copies; NULL: a chain) and places the tasks in the program's modeled
 * turn (pti_model_park, pti_model_finish), tracing them then.
 */
void pti_model_program_keep(pto_device *dev, pto_stream *s, const struct pto_program_desc *d, struct pto_mtask *t,
                            uint32_t n, const uint32_t *pred_off, const uint32_t *pred_ids, bool table);

/*
 * A program run's task records, at least n (sched_lock held, as the run
 * starts): the array of s's last placed run when it is large enough (no
 * allocation a run), else a new one; NULL: out of host memory.  *cap: its size.
 */
struct pto_mtask *pti_model_mt_take(pto_stream *s, uint32_t n, uint32_t *cap);
/* Tests only: nonzero makes the model take its list schedule for every program with edges. */
extern int pti_model_fast_off;

/* pto_engine_get_stats / pto_device_get_info for a modeled device (a profile is set). */
int pti_model_engine_stats(pto_device *dev, int32_t engine, pto_engine_stats *out);
void pti_model_info(pto_device *dev, pto_device_info *out);

/* ---- the scheduler (sched.c) ---------------------------------------------------------- */

/*
 * Wake the scheduler after new work or a state change.  Cheap when the
 * scheduler is spinning or busy: only a sleeping scheduler costs a signal.
 * locked: the caller holds sched_lock.
 */
void pti_sched_kick(pto_device *dev, bool locked);
/* Wake the scheduler thread itself (deadlines, leftover work), watchers or not. */
void pti_sched_wake(pto_device *dev, bool locked);
/* Run scheduler passes from the calling thread (sched_lock held) until nothing more starts. */
void pti_sched_run(pto_device *dev);
/* Whether some kick is newer than the latest pass (a watching engine serves it). */
bool pti_sched_kick_pending(pto_device *dev);
/*
 * s, an idle stream, has just been given work (no lock held): ring its
 * doorbell, so the next pass visits it (sched.c).  Call before kicking.
 */
void pti_sched_ring(pto_stream *s);
/* s may have work to start (sched_lock held): put it on the ready list. */
void pti_sched_ready(pto_device *dev, pto_stream *s);
/* s is being freed (sched_lock held): take it off the ready list. */
void pti_sched_forget(pto_device *dev, pto_stream *s);
/* A scheduler thread's body (arg: the device); pti_engines_start starts it. */
void *pti_sched_main(void *arg);

/* ---- platforms (platform.c; the sim: sim.c) ---------------------------------------- */

/*
 * What differs per platform, and nothing else: where device memory comes
 * from, what runs the commands, how a kernel's code is found.  Streams,
 * rings, the scheduler, events, the completion queue and the trace are the
 * driver's own, the same on every platform.  Each returns 0 or -PTO_E* with
 * the error text set, like an ABI call.
 */
struct pto_platform_ops {
    /* Map dev->cfg.device_memory bytes of device memory into dev->arena / arena_size. */
    int (*mem_map)(pto_device *dev);
    void (*mem_unmap)(pto_device *dev);
    /* Start the device's threads (engines and schedulers); stop and join them (queues empty). */
    int (*engines_start)(pto_device *dev);
    void (*engines_stop)(pto_device *dev);
    /* Find symbol in the kernel library at path: *fn, and *handle for kernel_unload. */
    int (*kernel_load)(const char *path, const char *symbol, pto_kernel_fn *fn, void **handle);
    /* The built-in kernel called name (see pto_kernel_builtin): *fn. */
    int (*kernel_builtin)(const char *name, pto_kernel_fn *fn);
    /* Release what kernel_load handed out (the last launch of the kernel has finished). */
    void (*kernel_unload)(void *handle);
    /* How many devices the platform offers (pto_device_count): >= 1, or -PTO_E* with the error text set. */
    int (*device_count)(void);
};

/*
 * The operations of the platform called name or one of its aliases, and
 * *canonical its name; NULL with the error text set (PTO_ENOTSUP) if none.
 */
const struct pto_platform_ops *pti_platform_find(const char *name, const char **canonical);
extern const struct pto_platform_ops pti_sim_ops;

/* ---- the device (device.c) ----------------------------------------------------------- */

struct pto_device {
    pto_device_config cfg;        /* resolved: no zeros left */
    pto_hazards *hz;              /* pto_hazards_attach: what pto_stream_launch_ordered orders by (the table's caller's lock) */
    char platform[16];            /* the platform's name (pto_device_info.platform) */
    const struct pto_platform_ops *ops;

    atomic_int lost;              /* sticky */
    atomic_int closing;
    atomic_int shutdown;          /* threads exit */
    uint64_t lost_cause;          /* under sched_lock; written once */
    struct pto_event_node *fence_pool; /* fence nodes to reuse (event.c), under sched_lock */
    uint32_t fence_pooled;
    char lost_msg[PTI_MSG_LEN];

    /* memory (memory.c), under mem_lock */
    pthread_mutex_t mem_lock;
    uint8_t *arena;
    uint64_t arena_size;
    uint64_t arena_touched; /* arena bytes [0, this) populated by allocations (mem_lock; memory.c, populate) */
    struct pto_mnode *free_root;  /* free extents by off, coalesced, max-augmented */
    struct pto_mnode *alloc_root; /* live and pending-free blocks by off */
    _Atomic uint64_t mem_gen;     /* changes whenever a block leaves or shrinks (pti_mem_find_stray's cache) */
    struct pto_mnode *node_pool;  /* spare nodes (linked by l) */
    size_t n_free, n_alloc;
    uint32_t mem_seed;            /* treap priorities */
    uint64_t in_use, pending_bytes, peak, pending_frees, alloc_failures, n_live;
    uint32_t fail_alloc;

    /* scheduling, under sched_lock */
    pthread_mutex_t sched_lock;
    pthread_cond_t sched_cv;      /* scheduler threads sleep here */
    pthread_cond_t host_cv;       /* synchronize / event waits sleep here */
    _Alignas(64) _Atomic uint64_t kick; /* bumped when there is work to schedule (seq_cst) */
    _Atomic uint64_t kick_served; /* kick as read by the latest pass, before it scanned */
    _Atomic uint64_t wakes;       /* bumped to wake the scheduler thread itself (deadlines) */
    atomic_int sched_sleepers;    /* schedulers inside cond wait (seq_cst; see sched.c) */
    /*
     * A signal to the sleeping schedulers is on its way (seq_cst; sched.c,
     * signal_scheduler): set by the signaller that sends it, cleared by a
     * scheduler going to sleep before it re-reads kick and wakes.
     */
    atomic_int sched_signalled;
    atomic_int kick_watchers;     /* spinning engines that run a pass on a kick (seq_cst) */
    _Atomic uint64_t sched_sleep_until; /* the scheduler thread's wait: 0 awake, its deadline, UINT64_MAX none */
    /*
     * When a helper or host thread last kept a run (engines.c, kept_begin).
     * While keeps are recent (PTI_KEPT_RECENT_NS) the scheduler thread
     * sleeps at most PTI_KEPT_POLL_NS, so a keeper need not wake it to arm
     * the backstop for each burst (a futex wake, and on a loaded host the
     * woken thread preempting the keeper, between a program's start and its
     * first task).
     */
    _Atomic uint64_t last_kept_ns;
    /*
     * Host threads blocked in a completion wait that look at the kept runs
     * within PTI_KEPT_POLL_NS (pti_kept_watch; seq_cst): a run a scheduler
     * thread keeps is theirs to watch, and with none its keeper wakes an
     * engine for the work behind it at once (engines.c, kept_begin).
     */
    atomic_int kept_watchers;
    int host_waiters;
    pto_stream **streams;         /* by id (creation order) */
    size_t n_streams, cap_streams;
    /*
     * The streams that have a ring (were ever given work), in no order: the
     * device model's turn looks at these only, so open streams that never got
     * work cost it nothing.  rung_lock is a leaf lock (taken under sched_lock
     * or a stream's submit_lock, never the other way round); n_rung changes
     * under it, and is atomic for the model's look without it (copy_turn).
     */
    pthread_mutex_t rung_lock;
    pto_stream **rung;
    _Atomic size_t n_rung;
    size_t cap_rung;
    pto_stream **order;           /* by priority (desc), then id */
    struct pto_link ready;        /* streams that may have work, priority order (sched.c) */
    _Atomic(pto_stream *) doorbell; /* streams submitters found idle, not yet on ready (sched.c) */
    uint32_t next_stream_id;
    _Atomic uint64_t rings_allocated; /* streams whose ring and heap exist (ring.c) */
    bool reap;                    /* a destroyed stream drained: free it */
    struct pto_link doomed;       /* streams destroyed with work left: what pti_streams_reap looks at */

    /* engines (engines.c) */
    pthread_mutex_t copy_lock;
    pthread_cond_t copy_cv;
    struct pto_run *copy_head;    /* copies and memsets, priority order */
    struct pto_run *copy_tail;    /* its last run (O(1) appends) */
    int copy_sleepers;
    int copy_waking;              /* sleepers signalled and not back yet */
    int copy_spinners;            /* at most one idle copy engine spins (engine_idle) */
    _Atomic uint32_t copy_len;    /* the spinning copy engine watches this */
    pthread_mutex_t core_lock;
    pthread_cond_t core_cv;
    struct pto_run *core_head;    /* launches with blocks left to start */
    struct pto_run *core_tail;
    int core_sleepers;
    int core_waking;
    int core_spinners;            /* at most one idle core spins */
    _Atomic uint32_t core_len;
    uint32_t cpus;                /* CPUs the opening thread may run on (sched_getaffinity) */
    uint32_t n_dev_threads;       /* cores + copy engines + schedulers + orchestration threads */
    _Atomic uint32_t asleep;      /* device threads inside a condition wait (pti_cpu_spare, engines.c) */
    uint32_t machine_cpus;        /* online CPUs of the machine */
    atomic_int runnable;          /* runnable threads on the machine, as last sampled (-1: unknown) */
    int loadavg_fd;               /* /proc/loadavg, open while the device is (-1: none), read with pread */
    _Atomic uint64_t runnable_ns; /* when it was sampled */
    atomic_int host_cpu;          /* CPU of the host thread that last submitted or waited (-1: none yet) */
    struct pto_engine *engines;   /* cores first, then copy engines */
    pthread_t *threads;
    size_t n_threads;

    /* completion queue (completion.c), under cq_lock */
    pthread_mutex_t cq_lock;
    pthread_cond_t cq_cv;
    struct pto_cq_rec *cq;        /* a ring (the scheme at the top): grows by doubling */
    size_t cq_entries, cq_mask;
    uint64_t cq_head, cq_tail;    /* records ever drained / pushed */
    bool cq_signalled;            /* the eventfd counter is nonzero */
    int cq_waiters;
    int efd;

    /* trace (trace.c), under trace_lock */
    pthread_mutex_t trace_lock;
    atomic_int trace_enabled;
    pto_trace_record *trace_buf;  /* a ring (the scheme at the top) of exactly trace_entries: indexed % */
    uint32_t trace_entries;
    uint64_t trace_head, trace_tail; /* records ever read or dropped / pushed */
    uint64_t trace_dropped;

    /* objects, under obj_lock */
    pthread_mutex_t obj_lock;
    struct pto_link events, latches, kernels, programs;
    struct pto_orch_pool *orch_pool; /* orch.c: started with the first program load */
    uint64_t program_heap;        /* ring_heap as configured (0: not set): bounds a program's intermediates */
    _Atomic uint64_t loads_host, loads_aicpu; /* pto_device_get_load_counts */
    uint64_t next_event_id;

    /* several devices (peer.c), under the process's peers lock */
    uint32_t peer_serial;         /* this open device's number in the process, never reused */
    int peer_pins;                /* peer copies and the notifier using the device right now */

    /* counters */
    _Alignas(64) _Atomic uint64_t st_submitted; /* host side: own cache line */
    _Alignas(64) _Atomic uint64_t st_completed, st_cq_records, st_cq_signals, st_cq_drains,
        st_canceled, st_launches, st_copies, st_bytes_h2d, st_bytes_d2h, st_bytes_d2d, st_bytes_peer;
    uint64_t st_sched_passes, st_sched_visits; /* under sched_lock */
    struct pto_model *_Atomic model; /* the device model (model.c); NULL: host timing */
    _Atomic uint64_t st_idle_spins, st_idle_no_spin, st_engine_wakes, st_engine_helps;
    _Atomic uint64_t st_idle_host_cpu, st_spread_wakes; /* engines.c: pti_cpu_spare_at, spread_burst */
    _Atomic uint64_t st_inline_runs; /* runs a host thread ran itself (host_first, engines.c) */
    _Atomic uint64_t st_host_first_checks; /* host-first choices made by asking for a spare CPU */
    _Atomic uint64_t st_task_batches, st_tasks_queued; /* pushes of ready program tasks (engines.c) */
    _Atomic uint64_t st_sched_signals; /* signals to a sleeping scheduler thread (sched.c) */
    _Atomic uint32_t host_runners;   /* host threads inside pti_host_run: close waits for them */
};

static inline bool pti_trace_on(pto_device *dev)
{
    return atomic_load_explicit(&dev->trace_enabled, memory_order_relaxed) != 0;
}

static inline struct pto_model *pti_model_of(pto_device *dev)
{
    return atomic_load_explicit(&dev->model, memory_order_acquire);
}

static inline bool pti_dev_lost(pto_device *dev)
{
    return atomic_load_explicit(&dev->lost, memory_order_acquire) != 0;
}

/* ---- several devices (peer.c) ----------------------------------------------------------
 *
 * The process's open devices are registered (by serial) so that a command of
 * one device never holds a pointer to another: a peer copy names the other
 * device by serial and pins it while it runs.  Lock order: the peers lock is
 * a leaf under sched_lock (pti_peer_notify); nobody takes a sched_lock or
 * mem_lock while holding it.
 */

/* Register dev (open, before its threads start) / unregister it (close, before its memory goes). */
int pti_peer_register(pto_device *dev);
void pti_peer_unregister(pto_device *dev);
/* Run the peer copy cmd on dev's copy engine (no lock held): 0, or -PTO_E* with msg set. */
int pti_peer_copy(pto_device *dev, const struct pto_cmd *cmd, char *msg, size_t n);
/*
 * A wait of s's device on node, an event node of device owner (another
 * device, same platform), is being queued: count it, so the record's
 * completion wakes the other devices (takes owner's sched_lock; no lock held).
 */
int pti_peer_watch(pto_device *owner, struct pto_event_node *node);
/* Wake the other devices: a node with their waits has completed (any lock may be held). */
void pti_peer_notify(void);
/*
 * Mark node n of dev done, n having waits of other devices (n->peer_waits;
 * sched_lock of dev held), and wake them.  A recording canceled by dev's
 * close completes with -PTO_ECLOSED.
 */
void pti_peer_complete(pto_device *dev, struct pto_event_node *n);
/*
 * The status a cross-device wait on the done node n fails with (0: none),
 * with its message in msg: -PTO_ECLOSED if n's device closed before n
 * completed, else -PTO_EDEP for a failed recording.
 */
int32_t pti_peer_wait_status(const struct pto_event_node *n, char *msg, size_t len);
/*
 * The node a record of e fills: a reserved one (pto_event_reserve), with a
 * new reference, taken from e; NULL if e is not reserved (obj_lock not held).
 */
struct pto_event_node *pti_event_take_reserved(pto_event *e);
/*
 * Complete the reserved, never recorded nodes of e (one event) or of every
 * event of dev (closing) with status; sched_lock not held.
 */
void pti_event_abandon(pto_event *e, int32_t status, const char *msg);
void pti_events_abandon_all(pto_device *dev);

/* ---- device loss (lost.c) ------------------------------------------------------ */

/* Mark dev lost (sched_lock held); the first call wins the message. */
void pti_device_lose_locked(pto_device *dev, uint64_t cause, const char *msg);

/* ---- submission helpers for automatic ordering (submit.c, used by hazard.c) ------ */

/* check_launch / commit_launch, check_edge / commit_edge of submit.c (same returns). */
int pti_launch_check(pto_stream *s, pto_kernel *k, uint32_t blocks, const uint64_t *args, uint32_t nargs,
                     const char *fn);
int pti_launch_commit(pto_stream *s, pto_kernel *k, uint32_t blocks, const uint64_t *args, uint32_t nargs,
                      uint64_t token, const char *fn);
/* pti_launch_commit of a launch whose kernel reference the caller took (pti_kernel_ref_n); on a refusal it stays the caller's. */
int pti_launch_commit_held(pto_stream *s, pto_kernel *k, uint32_t blocks, const uint64_t *args, uint32_t nargs,
                           uint64_t token, const char *fn);
/* The same behind the fence after (NULL: none), carried inline; the reference moves to the launch. */
int pti_launch_commit_after(pto_stream *s, pto_kernel *k, uint32_t blocks, const uint64_t *args, uint32_t nargs,
                            struct pto_event_node *after, uint64_t token, const char *fn);
int pti_edge_check(pto_stream *s, pto_stream *src, pto_event *e, const char *fn);
int pti_edge_commit(pto_stream *s, pto_stream *src, pto_event *e, uint64_t token, const char *fn);
/* One submission time for every command of a call: returns the outer stamp, which pti_stamp_end restores. */
uint64_t pti_stamp_begin(void);
void pti_stamp_end(uint64_t outer);

#endif /* PTO_INTERNAL_H */
