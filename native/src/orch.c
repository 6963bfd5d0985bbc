/*
 * orch.c - a program's run: its orchestration threads, its tasks dispatched
 * to free compute cores as their dependencies complete, and the heap of its
 * intermediates.
 *
 * Phase: execution.  The program object (its descriptor, load, stats) is
 * program.c's; the PTO_CMD_PROGRAM command is queued by submit.c
 * (pto_stream_run_program) and started here.
 *
 * Threads.  When the scheduler starts the command (pti_program_start,
 * sched_lock held), it hands the run to the device's orchestration threads
 * (aicpu_thread_num of them, started with the first program loaded): an
 * orchestration blocks when the task window is full, and a scheduler thread
 * must never block, so such an orchestration does not run inside a scheduler
 * pass.  A small program whose tasks can never make it wait (run_inline) is
 * the exception: it is orchestrated inside the pass that starts it.  The
 * orchestration is compiled C: its loops are real loops, and
 * each ops->submit makes the next task instance.  A task whose
 * predecessors have all completed goes to the core queue (engines.c) at
 * once; one that waits is dispatched by the core that completes its last
 * predecessor.  So the orchestration, the cores and the dispatch overlap.
 *
 * One edge rule, the driver's (taskdeps.c).  Which instance waits for which
 * is decided at compile time by pto_task_deps_* (called by
 * pypto_async/ir/_deps.py) and arrives here as a table (pred_off,
 * pred_ids); the driver only counts: at submit, each predecessor not yet
 * complete takes a dependency entry on its successor list and bumps the new
 * task's pending count; completing a task walks its list.  Without a table
 * (a program too large to expand at compile time) the driver resolves each
 * instance's edges as it is submitted, from the accesses its site lists, by
 * the same rule, against the instances still in the task window
 * (resolve_edges): no program falls back to running its tasks in order.
 * (Only an ABI 1 program without a table still does.)
 *
 * The rings, PyPTO's:
 *   - ring_task_window: task slots.  Instance i lives in slot i % W; slots
 *     retire in submission order once their task completed, so a full
 *     window makes the orchestration wait for the oldest task.  Tasks of an
 *     open scope (pl.manual_scope) do not retire until the scope ends: a
 *     scope that holds a whole window can never end, and that (and only
 *     that) is reported as a deadlock naming the knob.
 *   - ring_heap: bytes of intermediates (when set; left at its default, only
 *     device memory bounds them).  Each is placed (first fit) before
 *     its first user is submitted and reclaimed when its last user retires;
 *     when none fits the orchestration waits for a retirement that frees
 *     one, and fails only when no such retirement can come.
 *   - ring_dep_pool: successor entries in flight.  When the pool is empty
 *     the orchestration waits for tasks to complete (every entry belongs to
 *     a submitted task, which will complete), so it never deadlocks.
 *
 * Failure.  A task that fails (blk->fail, engines.c's pti_block_fail) fails
 * the program with its own status and "task NAME: message"; its successors,
 * and theirs, complete without running; independent tasks still run.  The
 * command completes once the orchestration has returned and every submitted
 * task completed, so no task outlives its launch.
 *
 * Locks: run->lock guards one run's slots, pool and heap (an inline run's
 * submissions take it only once a task of the run reached the cores:
 * before, no other thread can see the run, o->alone); it is taken with
 * no driver lock held, and core_lock / trace_lock / mem_lock may be taken
 * under it (never sched_lock: the finish path drops it first).  pool->lock
 * (the orchestration threads' queue) is taken under sched_lock.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "pto_program.h"

#define NONE UINT32_MAX
/* Accesses a task slot keeps for edges resolved at submit (more: the task orders after everything). */
#define PTI_TASK_ACC 8u
#define ACC_ALL UINT32_MAX
/* A recorded edge without a hazard (rinfo's low 2 bits: PTO_TASK_DECLARED, _RAW, _WAW, _WAR). */
#define PTI_EDGE_ORDER PTO_TASK_DECLARED /* a site that orders after everything, or the window */
/* The most task instances a program may have to be orchestrated inline (run_inline). */
#define PTI_ORCH_INLINE_MAX 64u

enum { T_FREE = 0, T_WAITING, T_RUNNING, T_DONE };

/*
 * An access's key for the recording scan (resolve_edges): its args slot,
 * whether it writes, its rank and its window's first dimension (ndim 0:
 * the whole axis).  Compact, so the scan over a whole window reads a few
 * bytes a slot; keys that cannot conflict (keys_may_conflict false) give no
 * edge by the rule, and only the others go to accesses_conflict.
 */
struct acc_key {
    uint32_t arg;
    uint8_t write, ndim;
    int64_t lo, hi;
};

/*
 * The window's access index (no table): per args slot, the instances with
 * an access to it (ascending; those below the range a scan can reach are
 * dropped from the front as scans pass), its writes apart, and a grid over
 * its first dimension: the cell is the extent of the slot's first bounded
 * access.  An access of another rank, an empty or whole one, or one over
 * more than IX_MAX_CELLS cells is one of the slot's large ones, which every
 * lookup of the slot looks at; the others are listed in each cell they span
 * (a hash of (slot, cell)).  A lookup by a large access looks at every
 * instance of the slot.
 */
#define IX_MAX_CELLS 64
struct ix_vec {
    uint32_t *v;
    uint32_t head, n, cap;
};

struct ix_arg {
    struct ix_vec all, w, large, large_w;
    int64_t grid_cell;            /* 0: no grid yet */
    uint8_t grid_ndim;
};

struct ix_cell {
    int64_t cell;
    uint32_t arg;
    struct ix_vec all, w;
};

/* A table slot's tag (0 free, else its cell's newest instance + 1) and its cell's hash (ix_hash). */
struct ix_slot {
    uint32_t tag, hash;
};

/* A cell on its way to the rebuilt table (ix_grow), with its slot. */
struct ix_moved {
    struct ix_cell c;
    struct ix_slot slot;
};

struct pto_task {
    struct pto_run run;           /* its run on the core queue (run.task == this) */
    struct pto_orch *orch;
    uint32_t id, site;
    uint32_t nacc;                /* no table: its accesses in orch->acc (ACC_ALL: orders after everything) */
    uint32_t pending;             /* predecessors not complete (+1 while it is being submitted) */
    uint32_t succ;                /* first successor entry in the dep pool, NONE: none */
    uint8_t state;
    bool poisoned;                /* a predecessor failed: complete without running */
    int32_t status;
    uint64_t submit_ns;
    int64_t idx[PTO_PROGRAM_MAX_IDX];
};

struct pto_dep {
    uint32_t task;                /* the successor's instance id */
    uint32_t next;
};

struct pto_extent {
    uint64_t off, len;
    uint32_t scratch;
};

struct pto_orch {
    pto_device *dev;
    pto_stream *s;
    struct pto_cmd *cmd;
    pto_program *p;
    const pto_program_desc *d;
    struct pto_orch *qnext;       /* the orchestration threads' queue */
    pthread_mutex_t lock;
    pthread_cond_t cv;            /* the orchestration waits here for retirements */
    bool waiting;

    uint32_t window;
    struct pto_task *slots;
    uint32_t submitted, retired, completed;
    uint32_t scope_depth, scope_start;
    bool orch_done, finished;
    bool inline_run;              /* orchestrated by the thread that started it (run_inline) */
    /*
     * An inline run none of whose tasks has reached the cores yet (its
     * ready tiny ones are held: orch_submit): no other thread can touch
     * the run, so its submissions take no lock.  It never waits either
     * (run_inline: no window, pool or heap wait).  Cleared, by the
     * orchestrating thread, before its first dispatch.
     */
    bool alone;
    struct pto_run *held, *held_tail; /* tiny ready tasks a host's inline run pushes when it returns (orch_submit) */
    uint64_t bump;                /* inline: the next free heap offset (intermediates are not reused) */

    struct pto_dep *pool;
    uint32_t pool_size, free_dep, dep_used;

    pto_devptr heap_base;
    uint64_t heap_size, heap_used;
    struct pto_extent *live;      /* placed intermediates, sorted by off */
    uint32_t nlive;
    uint8_t *failed;              /* per instance (with a table): completed with a failure */
    pto_task_access *acc;         /* no table, ABI 2: PTI_TASK_ACC per slot, the edges resolved at submit */

    int32_t status;               /* the first failure */
    char msg[PTI_MSG_LEN];
    uint64_t start_ns;
    uint32_t window_hwm, dep_hwm;
    uint64_t heap_hwm, waits_window, waits_deps, waits_heap;
    void **args;                  /* launch arguments, then the intermediates' addresses */
    struct pto_mtask *mt;         /* the device model: per instance (model.c); NULL: host timing */
    uint32_t mt_cap;
    bool mt_oom;                  /* could not grow mt: the run is not modeled */
    const uint32_t *early_flags;  /* the sites' flags where they can say PTO_SITE_EARLY_RESOLVE (ABI 2), else NULL */
    /*
     * No table: the edges resolved at submission, per instance, whatever had
     * completed by then (record_edges): the model's graph and deps.json's.
     * Instance i's predecessors are rpred[roff[i] .. roff[i + 1]), ascending;
     * rinfo per edge: its hazard (PTO_TASK_*) | (the args slot + 1) << 2.
     * The model reads roff and rpred only: rsite and rinfo (deps.json's) are
     * kept only where the program keeps its edges (keep, read at the start).
     * First sized from the program's last recorded run (hint_tasks,
     * hint_edges): a run like the last grows nothing per task or edge.
     */
    bool record, keep;
    uint32_t *roff, *rsite;       /* per instance (rt_cap), roff one more */
    uint32_t *rpred, *rinfo;      /* per edge (re_cap) */
    uint32_t rt_cap, re_cap, rn;
    uint32_t last_all;            /* the last instance that orders after everything; NONE: none yet */
    struct acc_key *keys;         /* recording: per slot, PTI_TASK_ACC keys of its accesses (key_fill) */
    uint32_t *knacc;              /* recording: per slot, its accesses' count (ACC_ALL: everything) */
    /*
     * No table: the window's accesses indexed by args slot and region
     * (ix_*), so a task's scan looks at the instances it may conflict with,
     * not at the whole window.  ix_off: out of host memory, the scan goes
     * over the window instead.
     */
    struct ix_cell *ix;           /* open addressing, ix_cap (a power of two) */
    /*
     * Per table slot: its tag, 0 free, else the newest instance in its
     * cell + 1 (UINT32_MAX while it gets its first), and its cell's hash.
     * Apart from the cells, so a probe reads 8 bytes a slot and a cell only
     * where the hash matches, and the rebuild's scan (ix_grow) reads no
     * cell: a recording run (a modeled device) keeps a window's cells, a
     * table of cache lines a probe would otherwise touch one by one.
     */
    struct ix_slot *ix_tag;
    uint32_t ix_cap, ix_n;
    struct ix_moved *ix_tmp;      /* ix_grow's scratch (ix_tmp_cap) */
    uint32_t ix_tmp_cap;
    struct ix_arg *ix_args;       /* per args slot (ix_nargs) */
    uint32_t ix_nargs;
    struct ix_vec ix_every;       /* the instances that order after everything */
    uint32_t *cand, cand_cap;     /* a task's candidates */
    bool ix_off;
};

struct pto_orch_pool {
    pthread_mutex_t lock;
    pthread_cond_t cv;
    struct pto_orch *head, *tail;
    bool stop;
    uint32_t n;
    pthread_t *threads;
};

static const pto_orch_ops orch_ops;

/* ---- failure ---------------------------------------------------------------------------- */

/* Record the program's first failure (run->lock held). */
static void run_fail(struct pto_orch *o, int32_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void run_fail(struct pto_orch *o, int32_t status, const char *fmt, ...)
{
    if (o->status)
        return;
    o->status = status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(o->msg, sizeof(o->msg), fmt, ap);
    va_end(ap);
}

/* ---- the heap of intermediates -------------------------------------------------------- */

/* First fit in [0, heap_size) among the live extents (run->lock held); UINT64_MAX: none. */
static uint64_t heap_fit(struct pto_orch *o, uint64_t len, uint32_t *at)
{
    uint64_t off = 0;
    for (uint32_t k = 0; k < o->nlive; k++) {
        if (o->live[k].off - off >= len) {
            *at = k;
            return off;
        }
        off = o->live[k].off + o->live[k].len;
    }
    if (o->heap_size - off >= len) {
        *at = o->nlive;
        return off;
    }
    return UINT64_MAX;
}

static void heap_release(struct pto_orch *o, uint32_t scratch)
{
    for (uint32_t k = 0; k < o->nlive; k++) {
        if (o->live[k].scratch != scratch)
            continue;
        o->heap_used -= o->live[k].len;
        memmove(&o->live[k], &o->live[k + 1], (o->nlive - k - 1) * sizeof(*o->live));
        o->nlive--;
        return;
    }
}

/* Whether a retirement still to come reclaims some placed intermediate (run->lock held). */
static bool heap_will_free(struct pto_orch *o, uint32_t next)
{
    for (uint32_t k = 0; k < o->nlive; k++) {
        uint32_t last = o->d->scratch[o->live[k].scratch].last;
        bool held = o->scope_depth && last >= o->scope_start;
        if (last < next && !held)
            return true;
    }
    return false;
}

static uint64_t round64(uint64_t n) { return (n + 63) & ~(uint64_t)63; }

/* ---- completion ---------------------------------------------------------------------------- */

static bool pred_failed(struct pto_orch *o, uint32_t p)
{
    if (o->failed)
        return o->failed[p] != 0;
    return o->status != 0; /* no table: a chain, and everything after a failure depends on it */
}

/* Retire completed tasks in order (run->lock held); wakes the orchestration if it waits. */
static void retire(struct pto_orch *o)
{
    bool moved = false;
    while (o->retired < o->submitted) {
        struct pto_task *t = &o->slots[o->retired % o->window];
        if (t->state != T_DONE || (o->scope_depth && o->retired >= o->scope_start))
            break;
        t->state = T_FREE;
        for (uint32_t j = 0; j < o->d->nscratch; j++)
            if (o->d->scratch[j].last == o->retired)
                heap_release(o, j);
        o->retired++;
        moved = true;
    }
    if (moved && o->waiting)
        pthread_cond_signal(&o->cv);
}

/*
 * Complete task t with status (0, its own failure, or -PTO_EDEP skipped),
 * run->lock held: walk its successors, appending those now ready to
 * *ready (a singly linked list through run.qnext); skipped ones complete
 * here too, iteratively.
 */
static void task_complete(struct pto_orch *o, struct pto_task *t, int32_t status,
                          struct pto_run **ready)
{
    struct pto_task *stack = NULL; /* skipped tasks still to complete, through run.qnext */
    for (;;) {
        t->state = T_DONE;
        t->status = status;
        if (status && o->failed)
            o->failed[t->id] = 1;
        o->completed++;
        uint32_t e = t->succ;
        t->succ = NONE;
        while (e != NONE) {
            struct pto_dep *dep = &o->pool[e];
            uint32_t next = dep->next;
            struct pto_task *u = &o->slots[dep->task % o->window];
            if (status)
                u->poisoned = true;
            if (--u->pending == 0) {
                if (u->poisoned) {
                    u->run.qnext = (struct pto_run *)stack;
                    stack = u;
                } else {
                    u->state = T_RUNNING;
                    u->run.qnext = *ready;
                    *ready = &u->run;
                }
            }
            dep->next = o->free_dep;
            o->free_dep = e;
            o->dep_used--;
            e = next;
        }
        if (!stack)
            break;
        t = stack;
        stack = (struct pto_task *)t->run.qnext;
        status = -PTO_EDEP;
    }
    retire(o);
    if (o->waiting)
        pthread_cond_signal(&o->cv); /* dependency entries came back */
}

static void dispatch(pto_device *dev, struct pto_run *ready)
{
    pti_core_enqueue_runs(dev, ready); /* one batch: one lock, each idle core woken once */
}

/*
 * The run is over (run->lock not held, nobody else touches o): complete the
 * command.  locked: the caller holds sched_lock and runs the passes after
 * (an inline run finishing inside the pass that started it).
 */
static void run_finish(struct pto_orch *o, bool locked)
{
    pto_device *dev = o->dev;
    uint64_t end = pto_now_ns();
    uint64_t start = o->start_ns;
    bool modeled = pti_model_of(dev) && !o->mt_oom && (o->mt || !o->submitted);
    if (modeled) {
        /* Device time: the list schedule of the run's tasks, in the program's modeled turn (model.c). */
        const pto_program_desc *d = o->d;
        const uint32_t *off = d->ninstances ? d->pred_off : o->record ? o->roff : NULL;
        const uint32_t *ids = d->ninstances ? d->pred_ids : o->rpred;
        pti_model_program_keep(dev, o->s, d, o->mt, o->submitted, o->submitted ? off : NULL, ids,
                               d->ninstances != 0);
        o->mt = NULL; /* the model's now */
    }
    pti_program_count_run(o->p, &(pto_program_stats){
                                    .runs = 1,
                                    .tasks = o->submitted,
                                    .window_hwm = o->window_hwm,
                                    .dep_hwm = o->dep_hwm,
                                    .heap_hwm = o->heap_hwm,
                                    .window_waits = o->waits_window,
                                    .dep_waits = o->waits_deps,
                                    .heap_waits = o->waits_heap,
                                    .inline_runs = o->inline_run,
                                });
    if (o->record && o->submitted) {
        /* The next run's first sizes (run_new). */
        atomic_store_explicit(&o->p->hint_tasks, o->submitted, memory_order_relaxed);
        atomic_store_explicit(&o->p->hint_edges, o->rn, memory_order_relaxed);
    }
    if (o->record && o->keep && o->submitted) {
        /* The resolved graph becomes the program's last (pto_program_last_edges): the arrays move. */
        pti_program_keep_edges(o->p, o->submitted, o->rsite, o->roff, o->rpred, o->rinfo);
        o->rsite = o->roff = o->rpred = o->rinfo = NULL;
    }
    if (o->heap_base)
        pto_mem_free(dev, o->heap_base);
    atomic_fetch_add_explicit(&dev->st_launches, 1, memory_order_relaxed); /* one launch per run */
    if (!locked)
        pthread_mutex_lock(&dev->sched_lock);
    int32_t status = o->status;
    if (!status && pti_dev_lost(dev))
        status = -PTO_EDEVLOST;
    o->cmd->modeled = modeled;
    pti_cmd_finish(dev, o->s, o->cmd, status, status == -PTO_EDEVLOST ? dev->lost_cause : 0,
                   status ? o->msg : NULL, status != 0, start, end, PTO_ENGINE_NONE);
    if (!locked) {
        pti_sched_run(dev);
        pthread_mutex_unlock(&dev->sched_lock);
    }
    pthread_mutex_destroy(&o->lock);
    pthread_cond_destroy(&o->cv);
    free(o->slots);
    free(o->pool);
    free(o->live);
    free(o->failed);
    free(o->acc);
    free(o->args);
    free(o->mt);
    free(o->roff);
    free(o->rsite);
    free(o->rpred);
    free(o->rinfo);
    free(o->keys);
    free(o->knacc);
    for (uint32_t k = 0; k < o->ix_cap; k++)
        if (o->ix_tag[k].tag) {
            free(o->ix[k].all.v);
            free(o->ix[k].w.v);
        }
    free(o->ix);
    free(o->ix_tag);
    free(o->ix_tmp);
    for (uint32_t k = 0; o->ix_args && k < o->ix_nargs; k++) {
        free(o->ix_args[k].all.v);
        free(o->ix_args[k].w.v);
        free(o->ix_args[k].large.v);
        free(o->ix_args[k].large_w.v);
    }
    free(o->ix_args);
    free(o->ix_every.v);
    free(o->cand);
    free(o);
}

/* Whether the run is over and this caller is the one to finish it (run->lock held). */
static bool claim_finish(struct pto_orch *o)
{
    if (o->finished || !o->orch_done || o->completed != o->submitted)
        return false;
    o->finished = true;
    return true;
}

/* ---- tasks on cores -------------------------------------------------------------------------- */

/*
 * Per core thread: how late its last hold's sleep ended (ns not yet paid
 * back), and when its last task ended.
 */
static __thread uint64_t tl_hold_late, tl_task_end;

/*
 * Hold the core us microseconds (a task's testing delay), from start.  A
 * host sleep ends late (a loaded host gives the woken thread its CPU tens of
 * microseconds on), and without a correction every task of a busy core
 * would add that lateness: 20,000 tasks held 100 us ran 178 us each on one
 * core of a loaded 2-CPU host.  So a core that went straight on to its next
 * task (within 50 us) holds it shorter by the lateness carried so far, as a
 * periodic timer does: back-to-back holds take their nominal time on the
 * average, as a device's would.  After an idle gap nothing is carried.
 */
static void hold_core(uint32_t us, uint64_t start)
{
    uint64_t want = (uint64_t)us * 1000ull;
    uint64_t credit = tl_task_end && start - tl_task_end < 50000ull ? tl_hold_late : 0;
    if (credit >= want) {
        tl_hold_late = credit - want;
        return;
    }
    uint64_t until = start + want - credit;
    struct timespec ts = {.tv_sec = (time_t)(until / 1000000000ull), .tv_nsec = (long)(until % 1000000000ull)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0)
        ;
    uint64_t woke = pto_now_ns();
    tl_hold_late = woke > until ? woke - until : 0;
}

/* A task a helper may run in a sleeping core's stead on a host with CPUs to spare (engines.c). */
#define PTI_TINY_NS 5000u

bool pti_task_tiny(const struct pto_run *r)
{
    const struct pto_task *t = r->task;
    if (!t)
        return false;
    const pto_program *p = t->orch->p;
    uint32_t ns = atomic_load_explicit(&p->site_ns[t->site], memory_order_relaxed);
    return ns && ns < PTI_TINY_NS && !atomic_load_explicit(&p->delay_us[t->site], memory_order_relaxed);
}

/* Whether r is a task whose site ran within limit_ns last time, with no testing delay (never timed: unknown). */
bool pti_task_short(const struct pto_run *r, uint64_t limit_ns)
{
    const struct pto_task *t = r->task;
    if (!t)
        return false;
    const pto_program *p = t->orch->p;
    uint32_t ns = atomic_load_explicit(&p->site_ns[t->site], memory_order_relaxed);
    return ns && ns <= limit_ns && !atomic_load_explicit(&p->delay_us[t->site], memory_order_relaxed);
}

/* Whether r is a task held by a testing delay (its core sleeps: a helper would run the holds one by one). */
bool pti_task_delayed(const struct pto_run *r)
{
    const struct pto_task *t = r->task;
    return t && atomic_load_explicit(&t->orch->p->delay_us[t->site], memory_order_relaxed) != 0;
}

uint64_t pti_task_run(pto_device *dev, struct pto_engine *eng, struct pto_run *r)
{
    struct pto_task *t = r->task;
    struct pto_orch *o = t->orch;
    const pto_task_site *site = &o->d->sites[t->site];
    uint64_t start = pto_now_ns();
    bool lost = pti_dev_lost(dev);
    pto_work work;
    memset(&work, 0, sizeof(work));
    if (!lost) {
        pto_block blk = {
            .block_idx = 0,
            .block_num = 1,
            .core_idx = (uint32_t)eng->id,
            .ctx = r,
            .fail = pti_block_fail,
            .work = &work,
        };
        uint32_t delay = atomic_load_explicit(&o->p->delay_us[t->site], memory_order_relaxed);
        if (delay)
            hold_core(delay, start); /* the core is busy with this task, before its body runs */
        site->fn(&blk, (void *const *)o->args, t->idx);
    }
    uint64_t end = pto_now_ns();
    tl_task_end = end;
    if (!lost) {
        /*
         * The site's time as the tiny / short judgements read it: it falls
         * to a faster run at once, but rises at most twofold a run, so one
         * run preempted on a loaded host (tens of microseconds) does not
         * make a 1 us site look long for its program's next run (every
         * task of the site then went to woken cores); a site that really
         * got slower is judged so after a few runs.
         */
        uint64_t ran = end - start;
        uint64_t was = atomic_load_explicit(&o->p->site_ns[t->site], memory_order_relaxed);
        if (was && ran > 2 * was)
            ran = 2 * was;
        atomic_store_explicit(&o->p->site_ns[t->site], ran > UINT32_MAX ? UINT32_MAX : (uint32_t)ran,
                              memory_order_relaxed);
    }
    atomic_fetch_add_explicit(&eng->busy_ns, end - start, memory_order_relaxed);
    atomic_fetch_add_explicit(&eng->commands, 1, memory_order_relaxed);
    int32_t status = 0;
    if (lost)
        status = -PTO_EDEVLOST;
    else if (atomic_load_explicit(&r->fail_claim, memory_order_acquire))
        status = -r->fail_code;
    struct pto_model *m = pti_model_of(dev);
    uint8_t kind = 1;
    uint64_t dur = m && !lost ? pti_model_cost(m, &work, &kind) : 0;
    if (!m && pti_trace_on(dev)) { /* a modeled run traces its tasks when it completes */
        pto_trace_record rec;
        memset(&rec, 0, sizeof(rec));
        rec.token = o->cmd->token;
        rec.seq = o->cmd->seq;
        rec.submit_ns = t->submit_ns ? t->submit_ns : o->start_ns; /* submitted before the trace began */
        rec.start_ns = rec.host_start_ns = rec.dispatch_ns = start;
        rec.end_ns = rec.host_end_ns = end;
        rec.stream_id = o->s->id;
        rec.engine = rec.host_engine = eng->id;
        rec.kind = PTO_CMD_TASK;
        rec.block = t->id;
        rec.status = status;
        pti_strlcpy(rec.name, site->name, sizeof(rec.name));
        pti_trace_push(dev, &rec);
    }
    struct pto_run *ready = NULL;
    pthread_mutex_lock(&o->lock);
    if (m && !o->mt_oom && t->id < o->mt_cap) {
        struct pto_mtask *x = &o->mt[t->id];
        x->dur_ns = dur;
        x->kind = kind;
        x->ran = !lost;
        x->host_start_ns = start;
        x->host_end_ns = end;
        x->host_engine = eng->id;
        x->status = status;
    }
    if (status == -PTO_EDEVLOST)
        run_fail(o, status, "task %s: device lost: %s", site->name, dev->lost_msg);
    else if (status)
        run_fail(o, status, "task %s: %s", site->name, r->fail_msg);
    task_complete(o, t, status, &ready);
    bool fin = claim_finish(o);
    pthread_mutex_unlock(&o->lock);
    dispatch(dev, ready);
    if (fin)
        run_finish(o, false);
    return end;
}

/* ---- the orchestration's calls ------------------------------------------------------------ */

static int stopped(struct pto_orch *o)
{
    pto_device *dev = o->dev;
    if (pti_dev_lost(dev)) {
        run_fail(o, -PTO_EDEVLOST, "device lost: %s", dev->lost_msg);
        return -PTO_EDEVLOST;
    }
    if (atomic_load_explicit(&dev->closing, memory_order_acquire)) {
        run_fail(o, -PTO_ECANCELED, "device closed while program %s ran", o->p->name);
        return -PTO_ECANCELED;
    }
    return 0;
}

static void wait_retire(struct pto_orch *o, uint64_t *counter)
{
    (*counter)++;
    o->waiting = true;
    /* Asleep for the spin rule (pti_cpu_spare): an orchestration thread awake takes a CPU. */
    atomic_fetch_add_explicit(&o->dev->asleep, 1, memory_order_relaxed);
    pthread_cond_wait(&o->cv, &o->lock);
    atomic_fetch_sub_explicit(&o->dev->asleep, 1, memory_order_relaxed);
    o->waiting = false;
}

/* Place the intermediates first used by instance i (run->lock held). */
static int place_scratch(struct pto_orch *o, uint32_t i)
{
    const pto_program_desc *d = o->d;
    for (uint32_t j = 0; j < d->nscratch; j++) {
        if (d->scratch[j].first != i)
            continue;
        uint64_t len = round64(d->scratch[j].bytes);
        uint32_t at;
        uint64_t off;
        if (o->inline_run) {
            /* The heap holds every intermediate at once (run_inline): place each after the last. */
            o->args[d->nparams + j] = (void *)(uintptr_t)(o->heap_base + o->bump);
            o->bump += len;
            o->heap_used = o->heap_hwm = o->bump;
            continue;
        }
        while ((off = heap_fit(o, len, &at)) == UINT64_MAX) {
            if (!heap_will_free(o, i)) {
                run_fail(o, -PTO_ENOMEM,
                         "intermediates need more than ring_heap=%llu bytes (task %u): raise "
                         "RunConfig(ring_heap=...)",
                         (unsigned long long)o->dev->program_heap, i);
                return -PTO_ENOMEM;
            }
            wait_retire(o, &o->waits_heap);
            int rc = stopped(o);
            if (rc)
                return rc;
        }
        memmove(&o->live[at + 1], &o->live[at], (o->nlive - at) * sizeof(*o->live));
        o->live[at] = (struct pto_extent){off, len, j};
        o->nlive++;
        o->heap_used += len;
        if (o->heap_used > o->heap_hwm)
            o->heap_hwm = o->heap_used;
        o->args[d->nparams + j] = (void *)(uintptr_t)(o->heap_base + off);
    }
    return 0;
}

/* Make t wait for predecessor p (run->lock held); may wait for a dependency entry. */
static int add_pred(struct pto_orch *o, struct pto_task *t, uint32_t p)
{
    for (;;) {
        if (p < o->retired || o->slots[p % o->window].state == T_DONE) {
            if (pred_failed(o, p))
                t->poisoned = true;
            return 0;
        }
        if (o->free_dep != NONE)
            break;
        wait_retire(o, &o->waits_deps); /* p may complete meanwhile: look again */
        int rc = stopped(o);
        if (rc)
            return rc;
    }
    uint32_t e = o->free_dep;
    struct pto_task *src = &o->slots[p % o->window];
    o->free_dep = o->pool[e].next;
    o->pool[e].task = t->id;
    o->pool[e].next = src->succ;
    src->succ = e;
    t->pending++;
    if (++o->dep_used > o->dep_hwm)
        o->dep_hwm = o->dep_used;
    return 0;
}

static struct pto_box access_box(const pto_task_access *a)
{
    return (struct pto_box){a->lo, a->hi, a->ndim, a->ndim == 0}; /* ndim 0: the whole tensor */
}

static uint32_t access_flags(const pto_task_access *a)
{
    return (a->read ? PTO_TASK_READ : 0) | (a->write ? PTO_TASK_WRITE : 0);
}

/*
 * Whether a later task with accesses a[0..na) must wait for an earlier one
 * with b[0..nb): the task-edge rule's pairs (taskdeps.c), which the
 * compiler's table follows too.  *info: the first conflict found, as rinfo
 * holds it (its hazard, PTO_TASK_*, and its args slot + 1; 0: no slot).
 */
static bool accesses_conflict(const pto_task_access *a, uint32_t na, const pto_task_access *b, uint32_t nb,
                              uint32_t *info)
{
    *info = PTI_EDGE_ORDER;
    if (na == ACC_ALL || nb == ACC_ALL)
        return true;
    for (uint32_t i = 0; i < na; i++)
        for (uint32_t j = 0; j < nb; j++)
            if (a[i].arg == b[j].arg) {
                uint32_t hz = pti_task_conflict(access_flags(&a[i]), access_box(&a[i]), access_flags(&b[j]),
                                                access_box(&b[j]));
                if (!hz)
                    continue;
                *info = hz | (a[i].arg + 1) << 2;
                return true;
            }
    return false;
}

static void key_fill(struct acc_key *k, const pto_task_access *a, uint32_t n)
{
    for (uint32_t i = 0; n != ACC_ALL && i < n; i++) {
        k[i].arg = a[i].arg;
        k[i].write = a[i].write;
        k[i].ndim = a[i].ndim;
        k[i].lo = a[i].ndim ? a[i].lo[0] : INT64_MIN;
        k[i].hi = a[i].ndim ? a[i].hi[0] : INT64_MAX;
    }
}

/* False only where accesses_conflict is false too (pti_box_overlaps): no shared argument written, or disjoint first dimensions. */
static bool keys_may_conflict(const struct acc_key *a, uint32_t na, const struct acc_key *b, uint32_t nb)
{
    if (na == ACC_ALL || nb == ACC_ALL)
        return true;
    for (uint32_t i = 0; i < na; i++)
        for (uint32_t j = 0; j < nb; j++)
            if (a[i].arg == b[j].arg && (a[i].write || b[j].write) &&
                (!a[i].ndim || a[i].ndim != b[j].ndim || (a[i].lo < b[j].hi && b[j].lo < a[i].hi)))
                return true;
    return false;
}

/* Grow a per-run array to hold at least `need` entries of `size` bytes (run->lock held); false: no memory. */
static bool grow(void **arr, uint32_t *cap, uint32_t need, size_t size)
{
    if (need <= *cap)
        return true;
    uint32_t c = *cap ? *cap : 64;
    while (c < need)
        c = c > UINT32_MAX / 2 ? need : 2 * c;
    void *p = realloc(*arr, (size_t)c * size);
    if (!p)
        return false;
    *arr = p;
    *cap = c;
    return true;
}

/* Stop recording (out of host memory): the run goes on, unmodeled and without its graph. */
static void record_off(struct pto_orch *o)
{
    o->record = false;
    o->mt_oom = true;
}

/* Grow a recording array and, where the run keeps its edges, its companion to `need` entries; false: no memory. */
static bool record_grow(struct pto_orch *o, uint32_t **a, uint32_t **b, uint32_t *cap, uint32_t need)
{
    uint32_t c = *cap;
    if (!grow((void **)a, &c, need, sizeof(uint32_t)) || (o->keep && !grow((void **)b, cap, need, sizeof(uint32_t))))
        return false;
    *cap = c;
    return true;
}

/* Instance i's edges start here (run->lock held). */
static void record_task(struct pto_orch *o, uint32_t i, uint32_t site)
{
    if (i + 2 > o->rt_cap && !record_grow(o, &o->roff, &o->rsite, &o->rt_cap, i + 2)) {
        record_off(o);
        return;
    }
    o->roff[i] = o->rn;
    o->roff[i + 1] = o->rn;
    if (o->keep)
        o->rsite[i] = site;
}

static void record_edge(struct pto_orch *o, uint32_t i, uint32_t p, uint32_t info)
{
    if (!o->record)
        return;
    if (o->rn + 1 > o->re_cap && !record_grow(o, &o->rpred, &o->rinfo, &o->re_cap, o->rn + 1)) {
        record_off(o);
        return;
    }
    o->rpred[o->rn] = p;
    if (o->keep)
        o->rinfo[o->rn] = info;
    o->roff[i + 1] = ++o->rn;
}

/* ---- the window's access index (no table) ------------------------------------------- */

/* Append id to l (once); full, it first drops the instances below lo, which no scan reaches any more. */
static bool ix_push(struct ix_vec *l, uint32_t id, uint32_t lo)
{
    if (l->n && l->v[l->n - 1] == id)
        return true;
    if (l->n == l->cap && l->n) {
        while (l->head < l->n && l->v[l->head] < lo)
            l->head++;
        /*
         * Compact only when half of it is dropped, else grow: a list that
         * holds a window's instances (a recording run's scans reach back a
         * window) would otherwise move the whole window for every push.
         */
        if (l->head && 2 * l->head >= l->n) {
            memmove(l->v, l->v + l->head, (size_t)(l->n - l->head) * sizeof(uint32_t));
            l->n -= l->head;
            l->head = 0;
        }
    }
    if (l->n == l->cap) { /* from 4: most cells hold a few instances */
        uint32_t c = l->cap ? 2 * l->cap : 4;
        uint32_t *v = c > l->cap ? realloc(l->v, (size_t)c * sizeof(uint32_t)) : NULL;
        if (!v)
            return false;
        l->v = v;
        l->cap = c;
    }
    l->v[l->n++] = id;
    return true;
}

static uint32_t ix_hash(uint32_t arg, int64_t cell)
{
    uint64_t h = (uint64_t)arg * 0x9E3779B97F4A7C15ull ^ (uint64_t)cell * 0xC2B2AE3D27D4EB4Full;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    return (uint32_t)(h ^ (h >> 32));
}

/*
 * Drop the cells no scan can reach any more (every instance below lo) and
 * rehash into a table of at least 8 slots a live cell (a quarter full at
 * most), so the next rebuild comes after at least 3 x live new cells: one
 * pass over the slots for each of them, rather than the 8-16 a table half
 * as large took (a recording run keeps a window's cells live).  False: no
 * memory (the stale cells are gone, the live ones stay indexed).
 */
static bool ix_grow(struct pto_orch *o, uint32_t lo)
{
    if (!grow((void **)&o->ix_tmp, &o->ix_tmp_cap, o->ix_n + 1, sizeof(*o->ix_tmp)))
        return false;
    /* One pass: the live cells move out, the stale ones go. */
    uint32_t m = 0;
    for (uint32_t k = 0; k < o->ix_cap; k++) {
        struct ix_slot slot = o->ix_tag[k];
        if (!slot.tag)
            continue;
        if (slot.tag - 1 < lo) {
            free(o->ix[k].all.v);
            free(o->ix[k].w.v);
        } else {
            o->ix_tmp[m].c = o->ix[k];
            o->ix_tmp[m++].slot = slot;
        }
    }
    uint32_t cap = 64;
    while (cap < 8 * (m + 1))
        cap *= 2;
    struct ix_cell *tab = o->ix;
    struct ix_slot *tags = o->ix_tag;
    bool ok = true;
    if (cap != o->ix_cap) {
        tab = malloc((size_t)cap * sizeof(*tab));
        tags = calloc(cap, sizeof(*tags));
        if (tab && tags) {
            free(o->ix);
            free(o->ix_tag);
        } else {
            /* No memory: the live cells go back into the table they came from (it held them). */
            free(tab);
            free(tags);
            tab = o->ix;
            tags = o->ix_tag;
            ok = o->ix_cap != 0;
            cap = o->ix_cap;
        }
    }
    if (tab == o->ix && cap)
        memset(tags, 0, (size_t)cap * sizeof(*tags));
    for (uint32_t q = 0; q < m; q++) {
        uint32_t h = o->ix_tmp[q].slot.hash & (cap - 1);
        while (tags[h].tag)
            h = (h + 1) & (cap - 1);
        tab[h] = o->ix_tmp[q].c;
        tags[h] = o->ix_tmp[q].slot;
    }
    o->ix = tab;
    o->ix_tag = tags;
    o->ix_cap = cap;
    o->ix_n = m;
    return ok && 2 * (m + 1) <= cap;
}

/*
 * Cell `cell` of args slot arg; create: add it where absent (NULL: no
 * memory), else NULL where absent.  An absent cell takes the first stale
 * slot its probe passed (every instance of that cell below lo: no scan
 * reaches it any more), keeping the slot's lists' memory, so a table whose
 * cells come and go as the window moves seldom fills up and rebuilds
 * (ix_grow), and a new cell seldom allocates.
 */
static struct ix_cell *ix_find(struct pto_orch *o, uint32_t arg, int64_t cell, bool create, uint32_t lo)
{
    if (!o->ix_cap && (!create || !ix_grow(o, lo)))
        return NULL;
    uint32_t hash = ix_hash(arg, cell), k = hash & (o->ix_cap - 1), stale = UINT32_MAX;
    for (; o->ix_tag[k].tag; k = (k + 1) & (o->ix_cap - 1)) {
        if (o->ix_tag[k].hash == hash && o->ix[k].cell == cell && o->ix[k].arg == arg)
            return &o->ix[k];
        if (stale == UINT32_MAX && o->ix_tag[k].tag - 1 < lo)
            stale = k;
    }
    if (!create)
        return NULL;
    struct ix_cell *c;
    if (stale != UINT32_MAX) {
        k = stale;
        c = &o->ix[k];
        c->all.head = c->all.n = c->w.head = c->w.n = 0;
    } else {
        if (2 * (o->ix_n + 1) > o->ix_cap) {
            if (!ix_grow(o, lo))
                return NULL;
            for (k = hash & (o->ix_cap - 1); o->ix_tag[k].tag; k = (k + 1) & (o->ix_cap - 1))
                ;
        }
        c = &o->ix[k];
        memset(c, 0, sizeof(*c));
        o->ix_n++;
    }
    o->ix_tag[k] = (struct ix_slot){UINT32_MAX, hash}; /* its first instance's tag (ix_insert) */
    c->arg = arg;
    c->cell = cell;
    return c;
}

static int64_t ix_floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

/* Access x's cells [*c0, *c1] in its argument's grid; false: one of the argument's large ones. */
static bool ix_cells(const pto_task_access *x, const struct ix_arg *g, int64_t *c0, int64_t *c1)
{
    if (!x->ndim || !g->grid_cell || x->ndim != g->grid_ndim || x->lo[0] >= x->hi[0])
        return false;
    *c0 = ix_floor_div(x->lo[0], g->grid_cell);
    *c1 = ix_floor_div(x->hi[0] - 1, g->grid_cell);
    return (uint64_t)*c1 - (uint64_t)*c0 < IX_MAX_CELLS;
}

/* Add instance i's accesses (n of them, ACC_ALL: everything) to the index; false: no memory. */
static bool ix_insert(struct pto_orch *o, uint32_t i, const pto_task_access *a, uint32_t n, uint32_t lo)
{
    if (n == ACC_ALL)
        return ix_push(&o->ix_every, i, lo);
    for (uint32_t k = 0; k < n; k++) {
        const pto_task_access *x = &a[k];
        if (!x->read && !x->write)
            continue;
        struct ix_arg *g = &o->ix_args[x->arg];
        if (!g->grid_cell && x->ndim && x->lo[0] < x->hi[0]) {
            g->grid_ndim = x->ndim;
            g->grid_cell = x->hi[0] - x->lo[0];
        }
        int64_t c0, c1;
        if (!ix_push(&g->all, i, lo) || (x->write && !ix_push(&g->w, i, lo)))
            return false;
        if (!ix_cells(x, g, &c0, &c1)) {
            if (!ix_push(&g->large, i, lo) || (x->write && !ix_push(&g->large_w, i, lo)))
                return false;
            continue;
        }
        for (int64_t c = c0; c <= c1; c++) {
            struct ix_cell *e = ix_find(o, x->arg, c, true, lo);
            if (!e || !ix_push(&e->all, i, lo) || (x->write && !ix_push(&e->w, i, lo)))
                return false;
            o->ix_tag[e - o->ix].tag = i + 1;
        }
    }
    return true;
}

/* Take l's instances from lo on as candidates (dropping those below lo); false: no memory. */
static bool ix_walk(struct pto_orch *o, struct ix_vec *l, uint32_t lo, uint32_t *nc)
{
    while (l->head < l->n && l->v[l->head] < lo)
        l->head++;
    if (l->head >= 32 && 2 * l->head >= l->n) {
        memmove(l->v, l->v + l->head, (size_t)(l->n - l->head) * sizeof(uint32_t));
        l->n -= l->head;
        l->head = 0;
    }
    uint32_t m = l->n - l->head;
    if (!m)
        return true;
    if (!grow((void **)&o->cand, &o->cand_cap, *nc + m, sizeof(uint32_t)))
        return false;
    memcpy(o->cand + *nc, l->v + l->head, (size_t)m * sizeof(uint32_t));
    *nc += m;
    return true;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/*
 * The earlier instances from lo on that accesses a[0..n) may conflict with
 * (a superset of those accesses_conflict names), ascending, in
 * o->cand[0..*nc); false: no memory (scan the window instead).
 */
static bool ix_lookup(struct pto_orch *o, const pto_task_access *a, uint32_t n, uint32_t lo, uint32_t *nc)
{
    *nc = 0;
    if (!ix_walk(o, &o->ix_every, lo, nc))
        return false;
    for (uint32_t k = 0; k < n; k++) {
        const pto_task_access *x = &a[k];
        if (!x->read && !x->write)
            continue;
        struct ix_arg *g = &o->ix_args[x->arg];
        int64_t c0, c1;
        bool w = x->write;
        if (!ix_cells(x, g, &c0, &c1)) {
            if (!ix_walk(o, w ? &g->all : &g->w, lo, nc))
                return false;
            continue;
        }
        if (!ix_walk(o, w ? &g->large : &g->large_w, lo, nc))
            return false;
        for (int64_t c = c0; c <= c1; c++) {
            struct ix_cell *e = ix_find(o, x->arg, c, false, lo);
            if (e && !ix_walk(o, w ? &e->all : &e->w, lo, nc))
                return false;
        }
    }
    if (*nc > 1) {
        uint32_t *v = o->cand, m = 1;
        bool sorted = true;
        for (uint32_t q = 1; q < *nc && sorted; q++)
            sorted = v[q - 1] < v[q];
        if (!sorted) {
            qsort(v, *nc, sizeof(*v), cmp_u32);
            for (uint32_t q = 1; q < *nc; q++)
                if (v[q] != v[m - 1])
                    v[m++] = v[q];
            *nc = m;
        }
    }
    return true;
}

/* Whether the index can take accesses a[0..n): each names an args slot of the run. */
static bool ix_fits(const struct pto_orch *o, const pto_task_access *a, uint32_t n)
{
    for (uint32_t k = 0; n != ACC_ALL && k < n; k++)
        if (a[k].arg >= o->ix_nargs)
            return false;
    return true;
}

/*
 * No table: resolve instance t's edges now (run->lock held), as the
 * compiler's table would have: its site lists its accesses for these loop
 * indices, and t waits for every earlier instance still in the task window,
 * not yet complete, that it conflicts with.  Instances that left the window
 * have completed, so the window is the whole dependency horizon (PyPTO's
 * runtime resolves its edges the same way, within ring_dep_pool).  An
 * instance of a site without accesses, with too many, or with declared
 * dependencies or a manual scope (PTO_SITE_BARRIER) waits for every earlier
 * one still running: more order than the table would give, never less.
 *
 * Recording (o->record: a modeled device, or pto_program_record_edges), the
 * same rule also runs against the instances of the window that already
 * completed (their accesses stay in their slots until the window wraps), so
 * the recorded graph does not depend on how far the host threads had got:
 * t's recorded predecessors are every conflicting instance among the last
 * window - 1, back to the last one that orders after everything (which
 * waits for all before it), and the one a window back, which the driver
 * waits to retire before it submits t.
 */
static int resolve_edges(struct pto_orch *o, struct pto_task *t, const int64_t *idx)
{
    const pto_program_desc *d = o->d;
    uint32_t i = t->id;
    pto_task_access *mine = &o->acc[(size_t)(i % o->window) * PTI_TASK_ACC];
    pto_access_fn fn = d->site_accesses[t->site];
    uint32_t n = ACC_ALL;
    if (fn && !(d->site_flags && (d->site_flags[t->site] & PTO_SITE_BARRIER))) {
        int64_t zero[PTO_PROGRAM_MAX_IDX] = {0};
        n = fn(d->sites[t->site].nidx ? idx : zero, mine, PTI_TASK_ACC);
        if (n > PTI_TASK_ACC)
            n = ACC_ALL;
    }
    t->nacc = n;
    /*
     * A failure already complete (its instance may have left the window):
     * skip t, as a chain did.  A failure still to come poisons t through
     * its edge (task_complete).
     */
    if (o->status)
        t->poisoned = true;
    uint32_t lo = o->retired, rlo = NONE;
    const struct acc_key *kmine = NULL;
    if (o->record) {
        struct acc_key *k = &o->keys[(size_t)(i % o->window) * PTI_TASK_ACC];
        key_fill(k, mine, n);
        o->knacc[i % o->window] = n;
        kmine = k;
        record_task(o, i, t->site);
        rlo = i >= o->window ? i - o->window + 1 : 0;
        if (o->last_all != NONE && o->last_all > rlo)
            rlo = o->last_all;
        else if (i >= o->window)
            record_edge(o, i, i - o->window, PTI_EDGE_ORDER); /* the window's edge */
        if (rlo < lo)
            lo = rlo;
    }
    /* The index's candidates (ascending), or, without it, every instance of the range. */
    uint32_t nc = 0;
    if (!o->ix_off && !ix_fits(o, mine, n))
        o->ix_off = true; /* an access past the run's args slots: scan the window from here on */
    bool use_ix = !o->ix_off && n != ACC_ALL && ix_lookup(o, mine, n, lo, &nc);
    for (uint32_t q = 0;; q++) {
        uint32_t j = use_ix ? (q < nc ? o->cand[q] : i) : lo + q;
        if (j >= i)
            break;
        size_t slot = j % o->window;
        /* Recording: the keys first (a few bytes a slot), the slot itself only where they may conflict. */
        if (kmine && !keys_may_conflict(kmine, n, &o->keys[slot * PTI_TASK_ACC], o->knacc[slot]))
            continue;
        struct pto_task *u = &o->slots[slot];
        bool done = j < o->retired || u->state == T_DONE; /* (add_pred may have waited: the window moved) */
        bool rec = o->record && j >= rlo;
        if (done && !rec)
            continue;
        const pto_task_access *theirs = &o->acc[slot * PTI_TASK_ACC];
        uint32_t info;
        if (!accesses_conflict(mine, n, theirs, u->nacc, &info))
            continue;
        if (rec)
            record_edge(o, i, j, info);
        if (!done) {
            int rc = add_pred(o, t, j);
            if (rc)
                return rc;
        }
    }
    if (n == ACC_ALL)
        o->last_all = i;
    if (!o->ix_off && !ix_insert(o, i, mine, n, lo))
        o->ix_off = true; /* out of host memory: later tasks scan the window */
    return 0;
}

static int orch_submit_locked(struct pto_orch *o, uint32_t site, const int64_t *idx,
                              struct pto_run **ready)
{
    const pto_program_desc *d = o->d;
    uint32_t i = o->submitted;
    int rc = stopped(o);
    if (rc)
        return rc;
    if (site >= d->nsites || (d->ninstances && (i >= d->ninstances || d->site_of[i] != site))) {
        run_fail(o, -PTO_EINVAL, "program %s: task %u of site %u does not match its compiled table", o->p->name,
                 i, site);
        return -PTO_EINVAL;
    }
    while (i - o->retired >= o->window) {
        if (o->scope_depth && o->retired >= o->scope_start) {
            run_fail(o, -PTO_EINVAL,
                     "deadlock: a scope holds more than ring_task_window=%u tasks: raise "
                     "RunConfig(ring_task_window=...)",
                     o->window);
            return -PTO_EINVAL;
        }
        wait_retire(o, &o->waits_window);
        if ((rc = stopped(o)))
            return rc;
    }
    if ((rc = place_scratch(o, i)))
        return rc;
    struct pto_task *t = &o->slots[i % o->window];
    memset(t, 0, sizeof(*t));
    t->orch = o;
    t->id = i;
    t->site = site;
    t->succ = NONE;
    t->pending = 1; /* held until every predecessor is counted */
    t->state = T_WAITING;
    /* The trace's submission time only (a clock read is tens of ns on a VM, a tiny task under 1 us). */
    t->submit_ns = pti_trace_on(o->dev) ? pto_now_ns() : 0;
    if (pti_model_of(o->dev) && !o->mt_oom) {
        /* The device model's record of the instance (model.c), indexed by its id. */
        if (i >= o->mt_cap) {
            uint32_t cap = o->mt_cap ? 2 * o->mt_cap : 64;
            struct pto_mtask *mt = realloc(o->mt, (size_t)cap * sizeof(*mt));
            if (mt) {
                o->mt = mt;
                o->mt_cap = cap;
            } else {
                o->mt_oom = true; /* the run goes on, unmodeled */
            }
        }
        if (i < o->mt_cap) {
            /*
             * What the model reads of a task that never ran, and its staged
             * start (0: none); the rest comes with its run (pti_task_run) or
             * from the model's placement.  Field by field: zeroing the whole
             * record was a tenth of the submission's cost.
             */
            struct pto_mtask *x = &o->mt[i];
            x->site = site;
            x->ran = false;
            x->start_ns = 0;
            x->early = o->early_flags && (o->early_flags[site] & PTO_SITE_EARLY_RESOLVE);
        }
    }
    uint32_t nidx = d->sites[site].nidx;
    if (nidx)
        memcpy(t->idx, idx, nidx * sizeof(*idx));
    t->run.cmd = o->cmd; /* the program's command: its token names a device loss */
    t->run.task = t;
    t->run.stream = o->s;
    o->submitted = i + 1; /* slot i is in use from here on (retire stops at it while it waits) */
    if (o->submitted - o->retired > o->window_hwm)
        o->window_hwm = o->submitted - o->retired;
    if (d->ninstances) {
        for (uint32_t k = d->pred_off[i]; k < d->pred_off[i + 1]; k++)
            if ((rc = add_pred(o, t, d->pred_ids[k])))
                break;
    } else if (o->acc) {
        rc = resolve_edges(o, t, idx);
    } else if (i > 0) {
        rc = add_pred(o, t, i - 1); /* an ABI 1 program without a table: a chain */
    }
    if (--t->pending == 0) {
        if (t->poisoned || rc) {
            task_complete(o, t, -PTO_EDEP, ready);
        } else {
            t->state = T_RUNNING;
            t->run.qnext = *ready;
            *ready = &t->run;
        }
    } else if (rc) {
        t->poisoned = true; /* the program has failed: it completes without running */
    }
    return rc;
}

static int orch_submit(pto_orch *o, uint32_t site, const int64_t *idx)
{
    struct pto_run *ready = NULL;
    bool alone = o->alone; /* nobody else sees the run yet: no lock to take */
    if (!alone)
        pthread_mutex_lock(&o->lock);
    int rc = orch_submit_locked(o, site, idx, &ready);
    if (!alone)
        pthread_mutex_unlock(&o->lock);
    /*
     * To the cores at once, inline runs included: a core (spinning, or
     * woken now) starts the first task while the orchestration goes on, and
     * tiny tasks cost no wake-up (the thread that runs the pass takes them
     * after it, engines.c).  But a host thread's inline run (its
     * submission's pass: pti_host_begin) runs its tiny tasks itself once
     * the pass is over, so those go to the queue as one push when the
     * orchestration returns (orchestrate): one core_lock for the burst,
     * not one a task.  Others go at once, for a core woken for them.
     */
    if (ready && o->inline_run && pti_host_in_pass(o->dev)) {
        struct pto_run **pp = &ready;
        while (*pp) {
            struct pto_run *r = *pp;
            if (!pti_task_tiny(r)) {
                pp = &r->qnext;
                continue;
            }
            *pp = r->qnext;
            r->qnext = NULL;
            if (o->held_tail)
                o->held_tail->qnext = r;
            else
                o->held = r;
            o->held_tail = r;
        }
    }
    if (ready)
        o->alone = false; /* from here on a core may complete a task of the run */
    dispatch(o->dev, ready);
    return rc;
}

static int orch_scope_begin(pto_orch *o)
{
    pthread_mutex_lock(&o->lock);
    if (o->scope_depth++ == 0)
        o->scope_start = o->submitted;
    pthread_mutex_unlock(&o->lock);
    return 0;
}

static int orch_scope_end(pto_orch *o)
{
    pthread_mutex_lock(&o->lock);
    if (o->scope_depth && --o->scope_depth == 0)
        retire(o);
    pthread_mutex_unlock(&o->lock);
    return 0;
}

/* Fail the program with the orchestration's own message; returns -PTO_EINVAL (the status it records). */
static int orch_fail(pto_orch *o, const char *msg)
{
    pthread_mutex_lock(&o->lock);
    /* The launch's message names the program; the check's own message fills the rest. */
    run_fail(o, -PTO_EINVAL, "%s", msg ? msg : "the orchestration failed a check");
    pthread_mutex_unlock(&o->lock);
    return -PTO_EINVAL;
}

static const pto_orch_ops orch_ops = {
    .submit = orch_submit,
    .scope_begin = orch_scope_begin,
    .scope_end = orch_scope_end,
    .fail = orch_fail,
};

/* ---- the orchestration threads ---------------------------------------------------------------- */

static uint64_t scratch_total(const pto_program_desc *d)
{
    uint64_t total = 0;
    for (uint32_t j = 0; j < d->nscratch; j++)
        total += round64(d->scratch[j].bytes);
    return total;
}

static void orchestrate(struct pto_orch *o)
{
    o->start_ns = pto_now_ns();
    int rc = 0;
    uint64_t want = scratch_total(o->d);
    if (o->dev->program_heap && want > o->dev->program_heap)
        want = o->dev->program_heap;
    if (want) {
        o->heap_size = want;
        rc = pto_mem_alloc(o->dev, want, NULL, &o->heap_base);
        if (rc) {
            o->heap_base = 0;
            pthread_mutex_lock(&o->lock);
            run_fail(o, rc, "program %s: no device memory for its %llu-byte heap of intermediates",
                     o->p->name, (unsigned long long)want);
            pthread_mutex_unlock(&o->lock);
        }
    }
    if (!rc)
        rc = o->d->orchestrate(o, &orch_ops, (void *const *)o->args);
    if (o->held) {
        /* Before orch_done: none of them can finish the run, so o is still ours. */
        dispatch(o->dev, o->held);
        o->held = o->held_tail = NULL;
    }
    pthread_mutex_lock(&o->lock);
    if (rc && !o->status)
        run_fail(o, rc, "program %s: its orchestration returned %s", o->p->name, pto_status_name(rc));
    o->scope_depth = 0;
    retire(o);
    o->orch_done = true;
    bool fin = claim_finish(o);
    pthread_mutex_unlock(&o->lock);
    if (fin)
        run_finish(o, o->inline_run); /* inline: inside the pass that started it, sched_lock held */
}

static void *orch_main(void *arg)
{
    pto_device *dev = arg;
    struct pto_orch_pool *pool = dev->orch_pool;
    pti_thread_precise_timers();
    pthread_mutex_lock(&pool->lock);
    for (;;) {
        while (!pool->head && !pool->stop)
            pthread_cond_wait(&pool->cv, &pool->lock);
        struct pto_orch *o = pool->head;
        if (!o)
            break;
        pool->head = o->qnext;
        if (!pool->head)
            pool->tail = NULL;
        pthread_mutex_unlock(&pool->lock);
        /* Counted asleep (pti_cpu_spare) but while it orchestrates: device.c starts it so. */
        atomic_fetch_sub_explicit(&dev->asleep, 1, memory_order_relaxed);
        orchestrate(o);
        atomic_fetch_add_explicit(&dev->asleep, 1, memory_order_relaxed);
        pthread_mutex_lock(&pool->lock);
    }
    pthread_mutex_unlock(&pool->lock);
    return NULL;
}

/* Start the orchestration threads once (obj_lock held).  Returns 0 or -PTO_ENOMEM. */
int pti_orch_start(pto_device *dev)
{
    if (dev->orch_pool)
        return 0;
    struct pto_orch_pool *pool = calloc(1, sizeof(*pool));
    uint32_t n = dev->cfg.aicpu_thread_num;
    if (!pool || !(pool->threads = calloc(n, sizeof(*pool->threads)))) {
        free(pool);
        return pti_error(PTO_ENOMEM, "pto_program_load: out of host memory");
    }
    pti_mutex_init(&pool->lock);
    pthread_cond_init(&pool->cv, NULL);
    dev->orch_pool = pool;
    for (uint32_t i = 0; i < n; i++) {
        if (pthread_create(&pool->threads[i], NULL, orch_main, dev) != 0)
            break;
        char name[32];
        snprintf(name, sizeof(name), "pto-aicpu%u", i);
        pthread_setname_np(pool->threads[i], name);
        pool->n++;
    }
    if (pool->n == 0) {
        dev->orch_pool = NULL;
        pthread_mutex_destroy(&pool->lock);
        pthread_cond_destroy(&pool->cv);
        free(pool->threads);
        free(pool);
        return pti_error(PTO_ENOMEM, "pto_program_load: cannot start an orchestration thread");
    }
    return 0;
}

void pti_programs_stop(pto_device *dev)
{
    struct pto_orch_pool *pool = dev->orch_pool;
    if (!pool)
        return;
    pthread_mutex_lock(&pool->lock);
    pool->stop = true;
    pthread_cond_broadcast(&pool->cv);
    pthread_mutex_unlock(&pool->lock);
    for (uint32_t i = 0; i < pool->n; i++)
        pthread_join(pool->threads[i], NULL);
    pthread_mutex_destroy(&pool->lock);
    pthread_cond_destroy(&pool->cv);
    free(pool->threads);
    free(pool);
    dev->orch_pool = NULL;
}

/*
 * Whether a run of d can never wait, so the thread that starts it
 * (a scheduler pass, sched_lock held) may run it at once instead of handing
 * it to an orchestration thread: a compiled table of at most
 * PTI_ORCH_INLINE_MAX instances (bounded work; the table refuses any submit
 * past it), all of them fitting the task window (no window wait), every
 * predecessor entry fitting the dependency pool (no pool wait), and every
 * intermediate fitting the heap at once (placed one after another, never
 * reused: no heap wait).  A small program then costs no thread hand-off:
 * on a busy host the wake-up of an orchestration thread, then of a core,
 * took longer than its tasks.  Its task window is its instances (instance
 * i in slot i), not ring_task_window slots: no per-run allocation of a
 * whole window (tens of KiB to clear) for a handful of tasks.
 */
static bool run_inline(const pto_device *dev, const pto_program_desc *d)
{
    if (!d->ninstances || d->ninstances > PTI_ORCH_INLINE_MAX || d->ninstances > dev->cfg.ring_task_window)
        return false;
    if (d->pred_off[d->ninstances] > dev->cfg.ring_dep_pool)
        return false;
    return !dev->program_heap || scratch_total(d) <= dev->program_heap;
}

bool pti_program_quick(const pto_device *dev, pto_program *p)
{
    const pto_program_desc *d = p->desc;
    if (!d->nsites || !run_inline(dev, d))
        return false;
    for (uint32_t i = 0; i < d->nsites; i++) {
        uint32_t ns = atomic_load_explicit(&p->site_ns[i], memory_order_relaxed);
        if (!ns || ns >= PTI_TINY_NS || atomic_load_explicit(&p->delay_us[i], memory_order_relaxed))
            return false;
    }
    return true;
}

static struct pto_orch *run_new(pto_device *dev, pto_stream *s, struct pto_cmd *cmd)
{
    pto_program *p = cmd->u.prog.p;
    const pto_program_desc *d = p->desc;
    struct pto_orch *o = calloc(1, sizeof(*o));
    if (!o)
        return NULL;
    o->dev = dev;
    o->s = s;
    o->cmd = cmd;
    o->p = p;
    o->d = d;
    o->inline_run = run_inline(dev, d);
    o->alone = o->inline_run;
    o->window = o->inline_run ? d->ninstances : dev->cfg.ring_task_window;
    /* Inline: every edge of the table fits the pool at once (run_inline), so it needs no more entries. */
    uint32_t edges = o->inline_run ? d->pred_off[d->ninstances] : 0;
    o->pool_size = o->inline_run ? (edges ? edges : 1) : dev->cfg.ring_dep_pool;
    o->slots = calloc(o->window, sizeof(*o->slots));
    o->pool = calloc(o->pool_size, sizeof(*o->pool));
    o->live = calloc(d->nscratch ? d->nscratch : 1, sizeof(*o->live));
    o->args = calloc((size_t)d->nparams + d->nscratch + 1, sizeof(*o->args));
    o->failed = d->ninstances ? calloc(d->ninstances, 1) : NULL;
    bool resolve = !d->ninstances && d->abi >= 2 && d->site_accesses;
    o->acc = resolve ? calloc((size_t)o->window * PTI_TASK_ACC, sizeof(*o->acc)) : NULL;
    o->keep = resolve && pti_program_records_edges(p);
    o->record = resolve && (pti_model_of(dev) || o->keep);
    o->last_all = NONE;
    if (resolve) {
        o->ix_nargs = d->nparams + d->nscratch;
        o->ix_args = calloc(o->ix_nargs ? o->ix_nargs : 1, sizeof(*o->ix_args));
        o->ix_off = !o->ix_args; /* no memory: each task scans the window */
    }
    if (o->record) {
        o->keys = calloc((size_t)o->window * PTI_TASK_ACC, sizeof(*o->keys));
        o->knacc = calloc(o->window, sizeof(*o->knacc));
        if (!o->keys || !o->knacc)
            o->record = false, o->mt_oom = true; /* the run goes on, unmodeled */
        /* Sized as the last recorded run (out of memory here: they grow as the run goes). */
        uint32_t ht = atomic_load_explicit(&p->hint_tasks, memory_order_relaxed);
        uint32_t he = atomic_load_explicit(&p->hint_edges, memory_order_relaxed);
        if (o->record && ht && record_grow(o, &o->roff, &o->rsite, &o->rt_cap, ht + 2))
            record_grow(o, &o->rpred, &o->rinfo, &o->re_cap, he + 1);
    }
    o->early_flags = d->abi >= 2 ? d->site_flags : NULL; /* read per task: looked at once here */
    /* The model's per-instance records: the table's count, or the last recorded run's. */
    uint32_t nmt = d->ninstances ? d->ninstances : o->record ? o->rt_cap : 0;
    if (pti_model_of(dev) && !o->mt_oom && nmt)
        o->mt = pti_model_mt_take(s, nmt, &o->mt_cap); /* the stream's last run's, or new */
    if (!o->slots || !o->pool || !o->live || !o->args || (d->ninstances && !o->failed) || (resolve && !o->acc)) {
        free(o->slots);
        free(o->pool);
        free(o->live);
        free(o->args);
        free(o->failed);
        free(o->acc);
        free(o->ix_args);
        free(o->keys);
        free(o->knacc);
        free(o->roff);
        free(o->rsite);
        free(o->rpred);
        free(o->rinfo);
        free(o->mt);
        free(o);
        return NULL;
    }
    for (uint32_t e = 0; e < o->pool_size; e++)
        o->pool[e].next = e + 1 < o->pool_size ? e + 1 : NONE;
    o->free_dep = 0;
    memcpy(o->args, cmd->u.prog.args, (size_t)cmd->u.prog.nargs * 8u);
    pti_mutex_init(&o->lock);
    pti_cond_init(&o->cv);
    return o;
}

void pti_program_start(pto_device *dev, pto_stream *s, struct pto_cmd *cmd)
{
    uint64_t now = cmd->start_ns;
    struct pto_orch *o = run_new(dev, s, cmd);
    struct pto_orch_pool *pool = dev->orch_pool;
    if (!o || !pool) {
        free(o);
        pti_cmd_finish(dev, s, cmd, -PTO_ENOMEM, 0, "out of host memory to run the program", true, now,
                       now, PTO_ENGINE_NONE);
        return;
    }
    if (o->inline_run) {
        orchestrate(o); /* may finish the command here: run_finish(o, true) */
        return;
    }
    pthread_mutex_lock(&pool->lock);
    if (pool->tail)
        pool->tail->qnext = o;
    else
        pool->head = o;
    pool->tail = o;
    pthread_cond_signal(&pool->cv);
    pthread_mutex_unlock(&pool->lock);
}
