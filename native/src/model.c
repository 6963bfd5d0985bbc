/*
 * model.c - the device model: device time from a chip's profile, not the host's clock.
 *
 * Phase: execution, as hooks where commands finish.  Without a profile
 * (pto_device_set_profile(dev, NULL), the default) nothing here runs and
 * every device timestamp is the host's CLOCK_MONOTONIC.  With one, the
 * driver keeps a clock per modeled core (AIC cores first, then AIV cores),
 * per modeled copy engine and for the orchestrator, and every timestamp it
 * reports is modeled:
 *
 *   ready = max(the stream predecessor's modeled end, the command's
 *               submission (host wall time: the same ns origin), and for
 *               a wait its event's modeled completion)
 *   start = max(ready, the chosen engine's free time) + pickup (cores)
 *   end   = start + the modeled duration
 *
 * Durations.  A block or task: its pto_work on the profile's pipes
 * (pti_model_cost): loads on MTE2 and stores on MTE3, each row rounded up
 * to the transfer granule; on-chip moves on MTE1; vector bytes per op class;
 * cube MACs per dtype; accumulator bytes out of L0C on FIXPIPE; the pipes' cycles summed, or their maximum when the
 * kernel overlaps them (pto_work.overlap); cycles over clock_ghz; at least
 * min_kernel_us.  A copy: the host link's latency plus bytes over its
 * bandwidth (h2d, d2h, peer), or bytes over GM bandwidth (twice for d2d:
 * read and write).  Commands the scheduler holds (records, waits, frees,
 * notifies) take no time; a delay its microseconds; a latch ends when the
 * host released it.
 *
 * Placement.  Every engine keeps its latest busy intervals (struct lane),
 * so work takes the earliest time it fits at or after it is ready, in a gap
 * if one is long enough.  Launches and copies are placed in modeled order:
 * one the host finished is parked (pti_model_park) until no other stream
 * can still bring work ready before it, then placed (pti_model_unpark),
 * earliest (ready, stream id) first, whatever order the host's threads ran
 * them in.  A launch's blocks are kept as they run (pti_model_block) and
 * placed in its turn, in block order, each on the modeled core of its kind
 * (cube work: AIC, else AIV) where it fits first.  A program's tasks are
 * kept when its run completes (pti_model_program_keep) and placed in its
 * turn: a list schedule over its task graph, so its modeled timeline depends only on its work, its edges and the profile, never on
 * which host threads ran what.  The orchestrator submits task i at
 * start + (i + 1) * orch_us_per_task; a task is ready once submitted and
 * its predecessors ended; a free core of its kind takes the earliest ready
 * task (ties: the lower instance), and it starts pickup_us later.
 *
 * The task graph is the compiled table's, or for a program without one the
 * edges the driver resolved at submit (orch.c, resolve_edges).
 *
 * Locks: the clocks, the runs' model_* fields, the modeled engine
 * statistics, s->model_end, the streams' park_* fields, m->nparked and
 * m->unparking are under sched_lock: every placement happens in a command's
 * modeled turn, which is under it anyway, so a launch, copy or program run
 * takes no lock of the model's.  m->lock is a leaf: a launch's kept blocks
 * (run->model_blk, model_cap) as its blocks run on several core threads.
 */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "pto_program.h"

/*
 * A modeled engine's timeline: its busy intervals, sorted and disjoint, the
 * latest PTI_LANE_SPANS of them; before `floor` (the end of the last one
 * let go) the engine counts as busy, so work never lands where forgotten
 * work ran.  A ring: the k-th oldest is v[(head + k) % PTI_LANE_SPANS]
 * (lane_at), so letting the oldest go moves nothing (a full lane takes a
 * new interval a launch when the host submits slower than the device runs).
 */
#define PTI_LANE_SPANS 64u
_Static_assert((PTI_LANE_SPANS & (PTI_LANE_SPANS - 1)) == 0, "a lane's ring is a power of two");

struct span {
    uint64_t start, end;
};

struct lane {
    uint64_t floor;
    uint32_t head, n;
    struct span v[PTI_LANE_SPANS];
};

/* The k-th oldest interval of l (k < l->n). */
static inline struct span *lane_at(struct lane *l, uint32_t k)
{
    return &l->v[(l->head + k) & (PTI_LANE_SPANS - 1)];
}

struct pto_model {
    pthread_mutex_t lock;
    pto_device_profile prof;
    uint32_t naic, naiv, ncores, ncopy; /* engines: [0, naic) AIC, [naic, ncores) AIV, then copy */
    uint64_t pickup_ns, orch_ns, floor_ns, link_lat_ns;
    /* Cycles per unit of each pipe (the profile's rates inverted once: no division per block). */
    double cyc_load, cyc_store, cyc_move, cyc_fixpipe, cyc_vec[PTO_VEC_CLASSES], cyc_cube[PTO_CUBE_DTYPES];
    double ns_per_cycle;
    uint64_t gen; /* this model's generation, never 0 (pti_model_cost's per-thread cache) */
    uint64_t orch_free;
    uint64_t *free_ns, *busy_ns, *commands, *bytes; /* per modeled engine */
    struct lane *lanes;                             /* per modeled engine: its busy intervals (lane_fit) */
    /* Parked copies (pti_model_park), under the device's sched_lock, not m->lock. */
    uint32_t nparked;
    bool unparking;
    /* The list schedule's scratch (under sched_lock), grown as programs need: no allocation per run. */
    void *scratch;
    size_t scratch_cap;
};

/* A program run's tasks and graph, from its completion on the host until its modeled turn. */
struct pto_mprog {
    bool set;                       /* a run waits to be placed */
    bool oom;                       /* its graph could not be copied: its tasks take no modeled time */
    const struct pto_program_desc *d; /* its sites' names (alive until the command's release) */
    struct pto_mtask *t;            /* the run's tasks (the model's: freed once placed) */
    uint32_t n;
    const uint32_t *off, *ids;      /* its graph: the table's, or `own` */
    uint32_t *own;                  /* a resolved graph's copy: off (n + 1), then ids */
    size_t own_cap;
    /* The last placed run's task array, for the stream's next run (pti_model_mt_take): no
     * allocation a run.  Under the device's sched_lock. */
    struct pto_mtask *spare;
    uint32_t spare_cap;
};

/*
 * The last work each thread costed, and what it came to: a core thread runs
 * task after task of one site, or block after block of one kernel, with the
 * same counts, and a compare is cheaper than the sum.  Keyed by the model's
 * generation (a new profile, even at a freed model's address, misses).
 */
static _Atomic uint64_t model_gens;
static _Thread_local struct {
    uint64_t gen;
    pto_work work;
    uint64_t ns;
    uint8_t kind;
} tl_cost __attribute__((tls_model("initial-exec"))); /* a direct %fs access, not a __tls_get_addr call */

/*
 * Whether two works' counts are the same: field by field, each load the
 * width of its field, in registers, no call.  The kernel has just written b's
 * counts: a load wider than the store it reads (16 bytes over two 8-byte
 * counts, 8 over the two 4-byte fields) cannot be forwarded from the store
 * buffer and waits for the stores to retire, most of the compare's time.
 * (memcmp's call was a tenth of the model's cost per task.)
 */
static inline bool same_work(const pto_work *a, const pto_work *b)
{
    _Static_assert(sizeof(pto_work) == offsetof(pto_work, fixpipe_bytes) + sizeof(uint64_t),
                   "same_work compares every field of pto_work");
    uint64_t d = (a->load_bytes ^ b->load_bytes) | (a->load_rows ^ b->load_rows) | (a->store_bytes ^ b->store_bytes) |
                 (a->store_rows ^ b->store_rows) | (a->move_bytes ^ b->move_bytes) |
                 (a->fixpipe_bytes ^ b->fixpipe_bytes) | (a->overlap ^ b->overlap) | (a->core_kind ^ b->core_kind);
    for (int i = 0; i < PTO_VEC_CLASSES; i++)
        d |= a->vec_bytes[i] ^ b->vec_bytes[i];
    for (int i = 0; i < PTO_CUBE_DTYPES; i++)
        d |= a->cube_macs[i] ^ b->cube_macs[i];
    return d == 0;
}

static uint64_t us_to_ns(double us) { return (uint64_t)(us * 1000.0 + 0.5); }
static uint64_t max64(uint64_t a, uint64_t b) { return a > b ? a : b; }

/* ---- the profile ------------------------------------------------------------------------ */

/* 0, or -PTO_EINVAL naming the first figure out of range. */
static int check_profile(const pto_device_profile *p)
{
    const char *bad = NULL;
    if (p->aic_cores > 1024 || p->aiv_cores > 1024 || p->aic_cores + p->aiv_cores == 0)
        bad = "aic_cores + aiv_cores (1 .. 2048, each at most 1024)";
    else if (p->copy_engines == 0 || p->copy_engines > 1024)
        bad = "copy_engines (1 .. 1024)";
    else if (!(p->clock_ghz > 0))
        bad = "clock_ghz (> 0)";
    else if (!(p->pickup_us >= 0) || !(p->orch_us_per_task >= 0) || !(p->min_kernel_us >= 0) ||
             !(p->host_link_latency_us >= 0))
        bad = "pickup_us, orch_us_per_task, min_kernel_us, host_link_latency_us (>= 0)";
    else if (!(p->gm_gbps > 0) || !(p->host_link_gbps > 0))
        bad = "gm_gbps, host_link_gbps (> 0)";
    else if (!(p->transfer_granule_bytes >= 1))
        bad = "transfer_granule_bytes (>= 1)";
    else if (!(p->mte2_bytes_per_cycle > 0) || !(p->mte1_bytes_per_cycle > 0) ||
             !(p->mte3_bytes_per_cycle > 0) || !(p->fixpipe_bytes_per_cycle > 0))
        bad = "mte2/mte1/mte3/fixpipe_bytes_per_cycle (> 0)";
    for (int i = 0; !bad && i < PTO_VEC_CLASSES; i++)
        if (!(p->vec_bytes_per_cycle[i] > 0))
            bad = "vec_bytes_per_cycle (each > 0)";
    for (int i = 0; !bad && i < PTO_CUBE_DTYPES; i++)
        if (!(p->cube_macs_per_cycle[i] > 0))
            bad = "cube_macs_per_cycle (each > 0)";
    if (bad)
        return pti_error(PTO_EINVAL, "pto_device_set_profile: %s out of range", bad);
    return 0;
}

static void model_free(struct pto_model *m)
{
    if (!m)
        return;
    pthread_mutex_destroy(&m->lock);
    free(m->free_ns);
    free(m->busy_ns);
    free(m->commands);
    free(m->bytes);
    free(m->lanes);
    free(m->scratch);
    free(m);
}

int pto_device_set_profile(pto_device *dev, const pto_device_profile *p)
{
    if (!dev)
        return pti_error(PTO_EINVAL, "pto_device_set_profile: NULL device");
    if (atomic_load_explicit(&dev->st_submitted, memory_order_relaxed) != 0)
        return pti_error(PTO_EINVAL, "pto_device_set_profile: only before the device's first command");
    int rc = p ? check_profile(p) : 0;
    if (rc)
        return rc;
    struct pto_model *m = NULL;
    if (p) {
        m = calloc(1, sizeof(*m));
        uint32_t n = p->aic_cores + p->aiv_cores + p->copy_engines;
        if (m) {
            m->free_ns = calloc(n, sizeof(uint64_t));
            m->busy_ns = calloc(n, sizeof(uint64_t));
            m->commands = calloc(n, sizeof(uint64_t));
            m->bytes = calloc(n, sizeof(uint64_t));
            m->lanes = calloc(n, sizeof(struct lane));
        }
        if (!m || !m->free_ns || !m->busy_ns || !m->commands || !m->bytes || !m->lanes) {
            if (m) {
                free(m->free_ns);
                free(m->busy_ns);
                free(m->commands);
                free(m->bytes);
                free(m->lanes);
                free(m);
            }
            return pti_error(PTO_ENOMEM, "pto_device_set_profile: out of host memory");
        }
        pti_mutex_init(&m->lock);
        m->prof = *p;
        m->naic = p->aic_cores;
        m->naiv = p->aiv_cores;
        m->ncores = p->aic_cores + p->aiv_cores;
        m->ncopy = p->copy_engines;
        m->pickup_ns = us_to_ns(p->pickup_us);
        m->orch_ns = us_to_ns(p->orch_us_per_task);
        m->floor_ns = us_to_ns(p->min_kernel_us);
        m->link_lat_ns = us_to_ns(p->host_link_latency_us);
        m->cyc_load = 1.0 / p->mte2_bytes_per_cycle;
        m->cyc_store = 1.0 / p->mte3_bytes_per_cycle;
        m->cyc_move = 1.0 / p->mte1_bytes_per_cycle;
        m->cyc_fixpipe = 1.0 / p->fixpipe_bytes_per_cycle;
        for (int i = 0; i < PTO_VEC_CLASSES; i++)
            m->cyc_vec[i] = 1.0 / p->vec_bytes_per_cycle[i];
        for (int i = 0; i < PTO_CUBE_DTYPES; i++)
            m->cyc_cube[i] = 1.0 / p->cube_macs_per_cycle[i];
        m->ns_per_cycle = 1.0 / p->clock_ghz;
        m->gen = atomic_fetch_add(&model_gens, 1) + 1;
    }
    pthread_mutex_lock(&dev->sched_lock);
    struct pto_model *old = atomic_exchange(&dev->model, m);
    pthread_mutex_unlock(&dev->sched_lock);
    model_free(old);
    return 0;
}

void pti_model_fini(pto_device *dev)
{
    model_free(atomic_exchange(&dev->model, NULL));
}

/* ---- durations ------------------------------------------------------------------------------- */

/*
 * Bytes a pipe moves for `bytes` in `rows` contiguous rows, each rounded up
 * to the granule: rows * ceil(bytes / rows / granule) * granule, exactly
 * (one division; the quotient's rounding corrected in exact products).
 */
static double granular(uint64_t bytes, uint64_t rows, double granule)
{
    if (!bytes)
        return 0;
    double rg = (rows ? (double)rows : 1.0) * granule, b = (double)bytes;
    double k = ceil(b / rg);
    if (k * rg < b)
        k += 1;
    else if (k >= 1 && (k - 1) * rg >= b)
        k -= 1;
    return k * rg;
}

static uint64_t cost_of(struct pto_model *m, const pto_work *w, uint8_t *kind);

uint64_t pti_model_cost(struct pto_model *m, const pto_work *w, uint8_t *kind)
{
    if (tl_cost.gen == m->gen && same_work(&tl_cost.work, w)) {
        *kind = tl_cost.kind;
        return tl_cost.ns;
    }
    return cost_of(m, w, kind);
}

/* pti_model_cost's sum, out of line: its registers are saved and its counts loaded only when the
 * cache misses, not on every task and block the cache answers. */
static __attribute__((noinline)) uint64_t cost_of(struct pto_model *m, const pto_work *w, uint8_t *kind)
{
    /* Cycles per pipe: MTE2 loads, MTE3 stores, MTE1 moves, VECTOR, CUBE, FIXPIPE. */
    double pipes[6];
    pipes[0] = granular(w->load_bytes, w->load_rows, m->prof.transfer_granule_bytes) * m->cyc_load;
    pipes[1] = granular(w->store_bytes, w->store_rows, m->prof.transfer_granule_bytes) * m->cyc_store;
    pipes[2] = (double)w->move_bytes * m->cyc_move;
    pipes[3] = 0;
    for (int i = 0; i < PTO_VEC_CLASSES; i++)
        pipes[3] += (double)w->vec_bytes[i] * m->cyc_vec[i];
    pipes[4] = 0;
    uint64_t macs = 0;
    for (int i = 0; i < PTO_CUBE_DTYPES; i++) {
        pipes[4] += (double)w->cube_macs[i] * m->cyc_cube[i];
        macs |= w->cube_macs[i];
    }
    pipes[5] = (double)w->fixpipe_bytes * m->cyc_fixpipe;
    double cycles = 0;
    for (int i = 0; i < 6; i++)
        cycles = w->overlap ? (pipes[i] > cycles ? pipes[i] : cycles) : cycles + pipes[i];
    uint64_t ns = max64((uint64_t)(cycles * m->ns_per_cycle + 0.5), m->floor_ns);
    bool cube = w->core_kind == PTO_CORE_AIC || (w->core_kind != PTO_CORE_AIV && macs);
    *kind = cube ? (m->naic ? 0 : 1) : (m->naiv ? 1 : 0);
    tl_cost.gen = m->gen;
    tl_cost.work = *w;
    tl_cost.ns = ns;
    tl_cost.kind = *kind;
    return ns;
}

uint64_t pto_model_work_ns(pto_device *dev, const pto_work *work)
{
    struct pto_model *m = dev ? pti_model_of(dev) : NULL;
    uint8_t kind;
    return m && work ? pti_model_cost(m, work, &kind) : 0;
}

static void kind_range(struct pto_model *m, uint8_t kind, uint32_t *lo, uint32_t *hi)
{
    *lo = kind == 0 ? 0 : m->naic;
    *hi = kind == 0 ? m->naic : m->ncores;
}

/* ---- launches and copies ------------------------------------------------------------------ */

/* ---- engines' timelines ------------------------------------------------------------------ */

/* The earliest start at or after `ready` where `lane` is free for `dur` (sched_lock held). */
static uint64_t lane_fit(struct lane *l, uint64_t ready, uint64_t dur)
{
    uint64_t at = max64(ready, l->floor);
    if (!l->n || lane_at(l, l->n - 1)->end <= at)
        return at; /* free from then on: the usual case */
    for (uint32_t k = 0; k < l->n; k++) {
        const struct span *v = lane_at(l, k);
        if (v->end <= at)
            continue;
        if (v->start >= at + dur)
            break;
        at = v->end;
    }
    return at;
}

/* Mark [start, end) busy on `lane` (free there: lane_fit), merging touching intervals. */
static void lane_take(struct lane *l, uint64_t start, uint64_t end)
{
    uint32_t k = l->n;
    while (k > 0 && lane_at(l, k - 1)->end > start)
        k--; /* from the end: work mostly lands after the rest */
    /* The k oldest end at or before start; the rest start at or after end. */
    bool left = k > 0 && lane_at(l, k - 1)->end == start, right = k < l->n && lane_at(l, k)->start == end;
    if (left && right) {
        lane_at(l, k - 1)->end = lane_at(l, k)->end;
        for (uint32_t j = k; j + 1 < l->n; j++)
            *lane_at(l, j) = *lane_at(l, j + 1);
        l->n--;
        return;
    }
    if (left) {
        lane_at(l, k - 1)->end = end;
        return;
    }
    if (right) {
        lane_at(l, k)->start = start;
        return;
    }
    if (l->n == PTI_LANE_SPANS) {
        /* Let the oldest go: the engine counts as busy up to its end. */
        l->floor = lane_at(l, 0)->end;
        l->head = (l->head + 1) & (PTI_LANE_SPANS - 1);
        l->n--;
        if (k)
            k--;
    }
    for (uint32_t j = l->n; j > k; j--)
        *lane_at(l, j) = *lane_at(l, j - 1);
    *lane_at(l, k) = (struct span){start, end};
    l->n++;
}

static uint64_t ready_of(const pto_stream *s, const struct pto_cmd *cmd)
{
    uint64_t ready = max64(s->model_end, cmd->submit_ns);
    /* A launch behind an inline fence (event.c) starts after the point it waited for. */
    if (cmd->kind == PTO_CMD_LAUNCH && cmd->u.launch.after)
        ready = max64(ready, pti_wait_end_ns((struct pto_cmd *)cmd));
    return ready;
}

/*
 * A block that ran, kept until its launch's turn (pti_model_block): its
 * work's duration and kind and its host times.
 */
struct pto_mblock {
    uint64_t seq; /* its launch's cmd->seq (0: none): entries of earlier launches are stale */
    uint64_t dur, host_start, host_end;
    int32_t host_engine, status;
    uint8_t kind;
};

/*
 * Place a block ready at `ready` taking `dur` on a core of `kind` (sched_lock
 * held): the core of its kind where it can be dispatched first, in a gap
 * other work left if one fits (ties: the lowest); the launch's span in run.
 */
static void place_block(struct pto_model *m, struct pto_run *run, uint64_t ready, uint64_t dur, uint8_t kind,
                        struct pto_when *w)
{
    uint32_t lo, hi;
    kind_range(m, kind, &lo, &hi);
    uint32_t c = lo;
    uint64_t dispatch = lane_fit(&m->lanes[lo], ready, m->pickup_ns + dur);
    for (uint32_t e = lo + 1; e < hi && dispatch > ready; e++) {
        uint64_t t = lane_fit(&m->lanes[e], ready, m->pickup_ns + dur);
        if (t < dispatch) {
            dispatch = t;
            c = e;
        }
    }
    uint64_t start = dispatch + m->pickup_ns, end = start + dur;
    lane_take(&m->lanes[c], dispatch, end);
    m->free_ns[c] = max64(m->free_ns[c], end);
    m->busy_ns[c] += dur;
    m->commands[c]++;
    if (!run->model_blocks || start < run->model_first)
        run->model_first = start;
    if (!run->model_blocks || end >= run->model_last) {
        run->model_last = end;
        run->model_engine = (int32_t)c;
    }
    run->model_blocks++;
    w->dispatch_ns = dispatch;
    w->start_ns = start;
    w->end_ns = end;
    w->engine = (int32_t)c;
}

bool pti_model_block(pto_device *dev, struct pto_run *run, uint32_t b, int32_t status, const pto_work *work,
                     struct pto_when *w)
{
    struct pto_model *m = pti_model_of(dev);
    uint8_t kind;
    uint64_t dur = pti_model_cost(m, work, &kind);
    uint32_t blocks = run->cmd->u.launch.blocks;
    /* One block: the only thread that touches run's blocks now (the finisher is this thread). */
    bool locked = blocks > 1;
    if (locked)
        pthread_mutex_lock(&m->lock);
    if (run->model_cap < blocks) {
        struct pto_mblock *v = realloc(run->model_blk, (size_t)blocks * sizeof(*v));
        if (!v) {
            /* Out of host memory: placed as the host finished it (m->lock is a leaf: let go first). */
            if (locked)
                pthread_mutex_unlock(&m->lock);
            pthread_mutex_lock(&dev->sched_lock);
            place_block(m, run, ready_of(run->stream, run->cmd), dur, kind, w);
            pthread_mutex_unlock(&dev->sched_lock);
            return true;
        }
        for (uint32_t k = run->model_cap; k < blocks; k++)
            v[k].seq = 0;
        run->model_blk = v;
        run->model_cap = blocks;
    }
    /* Field by field: its placement (dispatch, start, end, engine) is written when it is placed. */
    struct pto_mblock *e = &run->model_blk[b];
    e->seq = run->cmd->seq;
    e->dur = dur;
    e->host_start = w->host_start_ns;
    e->host_end = w->host_end_ns;
    e->host_engine = w->host_engine;
    e->status = status;
    e->kind = kind;
    if (locked)
        pthread_mutex_unlock(&m->lock);
    return false;
}

/*
 * Place the blocks of s's launch cmd that ran, in block order, at its
 * modeled turn (sched_lock held: pti_model_finish), and trace them.  The
 * thread finishing the launch ran its last block: the acq_rel add of
 * done_blocks orders every block's entry before this.
 */
static void place_launch(pto_device *dev, struct pto_model *m, pto_stream *s, const struct pto_cmd *cmd,
                         uint64_t ready)
{
    struct pto_run *run = &s->run;
    uint32_t n = cmd->u.launch.blocks < run->model_cap ? cmd->u.launch.blocks : run->model_cap;
    if (!n)
        return;
    bool trace = pti_trace_on(dev);
    for (uint32_t b = 0; b < n; b++) {
        struct pto_mblock *e = &run->model_blk[b];
        if (e->seq != cmd->seq)
            continue; /* it did not run (skipped), or was placed already */
        e->seq = 0;
        struct pto_when w;
        place_block(m, run, ready, e->dur, e->kind, &w);
        if (trace) {
            w.host_start_ns = e->host_start;
            w.host_end_ns = e->host_end;
            w.host_engine = e->host_engine;
            pti_trace_cmd(dev, s, cmd, b, e->status, &w);
        }
    }
}

void pti_model_stream_free(pto_stream *s)
{
    if (s->model_prog) {
        free(s->model_prog->t);
        free(s->model_prog->spare);
        free(s->model_prog->own);
        free(s->model_prog);
        s->model_prog = NULL;
    }
    free(s->run.model_blk);
    s->run.model_blk = NULL;
    s->run.model_cap = 0;
}

static uint64_t copy_ns(struct pto_model *m, const struct pto_cmd *cmd, uint64_t *bytes)
{
    const pto_device_profile *p = &m->prof;
    uint64_t n = cmd->kind == PTO_CMD_MEMSET ? cmd->u.set.n : cmd->u.copy.n;
    *bytes = n;
    double gbps; /* GB/s == bytes per ns */
    double moved = (double)n;
    uint64_t lat = 0;
    switch (cmd->kind) {
    case PTO_CMD_H2D:
    case PTO_CMD_D2H:
    case PTO_CMD_PEER:
        gbps = p->host_link_gbps;
        lat = m->link_lat_ns;
        break;
    case PTO_CMD_D2D:
        gbps = p->gm_gbps;
        moved *= 2; /* each byte read and written */
        break;
    default:
        gbps = p->gm_gbps;
        break;
    }
    return lat + (uint64_t)(moved / gbps + 0.5);
}

/*
 * Place a copy ready at `ready` taking `dur` on a copy engine (sched_lock held):
 * the engine where it can start first, in a gap its earlier copies left if
 * one fits (so a copy the host ran late still takes the time that was free
 * when it was ready, and no engine idles while a copy waits for it), ties
 * to the stream's own engine and then the ones after it.  A stream's own
 * engine is its id modulo the copy engines, a device-to-host copy's the
 * one half the engines on: so streams that do not compete for the engines
 * (no more copies at once than engines) each keep to theirs, and their
 * placement does not depend on which the host ran first.  Returns the
 * engine's index among the copy engines; *start: when it starts.
 */
static uint32_t place_copy(struct pto_model *m, const pto_stream *s, const struct pto_cmd *cmd, uint64_t ready,
                           uint64_t dur, uint64_t *start)
{
    uint32_t n = m->ncopy, own = (s->id + (cmd->kind == PTO_CMD_D2H ? n / 2 : 0)) % n, best = own;
    struct lane *l = m->lanes + m->ncores;
    uint64_t at = lane_fit(&l[own], ready, dur);
    for (uint32_t k = 1; k < n && at > ready; k++) {
        uint32_t e = (own + k) % n;
        uint64_t t = lane_fit(&l[e], ready, dur);
        if (t < at) {
            at = t;
            best = e;
        }
    }
    lane_take(&l[best], at, at + dur);
    *start = at;
    return best;
}

/* ---- programs, kept until their turn --------------------------------------------------------- */

static void model_program(pto_device *dev, pto_stream *s, const struct pto_cmd *cmd, struct pto_mtask *t,
                          uint32_t n, const uint32_t *pred_off, const uint32_t *pred_ids, uint64_t *start_out,
                          uint64_t *end_out);

void pti_model_program_keep(pto_device *dev, pto_stream *s, const struct pto_program_desc *d, struct pto_mtask *t,
                            uint32_t n, const uint32_t *pred_off, const uint32_t *pred_ids, bool table)
{
    struct pto_mprog *g = s->model_prog;
    if (!g)
        g = s->model_prog = calloc(1, sizeof(*g));
    if (!g) {
        free(t); /* out of host memory: the run's tasks take no modeled time (pti_model_finish) */
        return;
    }
    free(g->t);
    *g = (struct pto_mprog){.set = true, .d = d, .t = t, .n = n, .off = pred_off, .ids = pred_ids,
                            .own = g->own, .own_cap = g->own_cap, .spare = g->spare, .spare_cap = g->spare_cap};
    if (!pred_off || table)
        return;
    /* A resolved graph: the driver moves or frees its arrays once the run is over. */
    size_t need = (size_t)n + 1 + pred_off[n];
    if (need > g->own_cap) {
        uint32_t *v = realloc(g->own, need * sizeof(uint32_t));
        if (!v) {
            g->oom = true;
            return;
        }
        g->own = v;
        g->own_cap = need;
    }
    memcpy(g->own, pred_off, ((size_t)n + 1) * sizeof(uint32_t));
    memcpy(g->own + n + 1, pred_ids, (size_t)pred_off[n] * sizeof(uint32_t));
    g->off = g->own;
    g->ids = g->own + n + 1;
}

/* Push the trace records of a placed run's tasks (sched_lock held). */
static void trace_tasks(pto_device *dev, const pto_stream *s, const struct pto_cmd *cmd, const struct pto_mprog *g)
{
    for (uint32_t i = 0; i < g->n; i++) {
        const struct pto_mtask *x = &g->t[i];
        if (!x->ran)
            continue;
        pto_trace_record rec;
        memset(&rec, 0, sizeof(rec));
        rec.token = cmd->token;
        rec.seq = cmd->seq;
        rec.submit_ns = x->submit_ns; /* device time: the modeled orchestrator's submission */
        rec.start_ns = x->start_ns;
        rec.end_ns = x->end_ns;
        rec.dispatch_ns = x->dispatch_ns;
        rec.engine = x->engine;
        rec.host_start_ns = x->host_start_ns;
        rec.host_end_ns = x->host_end_ns;
        rec.host_engine = x->host_engine;
        rec.stream_id = s->id;
        rec.kind = PTO_CMD_TASK;
        rec.block = i;
        rec.status = x->status;
        pti_strlcpy(rec.name, g->d->sites[x->site].name, sizeof(rec.name));
        pti_trace_push(dev, &rec);
    }
}

/* Place s's kept program run in its turn (sched_lock held): its modeled *start, *end. */
static void place_program(pto_device *dev, pto_stream *s, const struct pto_cmd *cmd, uint64_t ready,
                          uint64_t *start, uint64_t *end)
{
    struct pto_mprog *g = s->model_prog;
    *start = *end = ready;
    if (!g || !g->set)
        return;
    g->set = false;
    if (g->oom) {
        for (uint32_t i = 0; i < g->n; i++) {
            g->t[i].submit_ns = g->t[i].dispatch_ns = g->t[i].start_ns = g->t[i].end_ns = ready;
            g->t[i].engine = PTO_ENGINE_NONE;
        }
    } else {
        model_program(dev, s, cmd, g->t, g->n, g->off, g->ids, start, end);
    }
    if (pti_trace_on(dev))
        trace_tasks(dev, s, cmd, g);
    free(g->spare); /* the next run takes this one */
    g->spare = g->t;
    g->spare_cap = g->n;
    g->t = NULL;
}

struct pto_mtask *pti_model_mt_take(pto_stream *s, uint32_t n, uint32_t *cap)
{
    struct pto_mprog *g = s->model_prog;
    struct pto_mtask *t;
    if (g && g->spare && g->spare_cap >= n) {
        t = g->spare;
        *cap = g->spare_cap;
        g->spare = NULL;
        g->spare_cap = 0;
        return t;
    }
    t = malloc((size_t)n * sizeof(*t));
    *cap = t ? n : 0;
    return t;
}

void pti_model_finish(pto_device *dev, pto_stream *s, struct pto_cmd *cmd, int32_t status,
                      struct pto_when *w)
{
    struct pto_model *m = pti_model_of(dev);
    uint64_t ready = ready_of(s, cmd);
    uint64_t start = ready, end = ready;
    int32_t engine = PTO_ENGINE_NONE;
    bool ran = cmd->state == PTI_CMD_RUNNING;
    if (cmd->modeled) {
        /* A program, in its turn: its tasks' schedule gives the times; the host's are its run's. */
        w->host_start_ns = cmd->start_ns;
        w->host_end_ns = w->end_ns;
        place_program(dev, s, cmd, ready, &start, &end);
    } else {
        switch (cmd->kind) {
        case PTO_CMD_LAUNCH:
            /* Its turn in modeled order (pti_model_park): its blocks take their cores now. */
            if (ran && s->run.cmd == cmd)
                place_launch(dev, m, s, cmd, ready);
            if (ran && s->run.cmd == cmd && s->run.model_blocks) {
                start = s->run.model_first;
                end = s->run.model_last;
                engine = s->run.model_engine;
            }
            s->run.model_blocks = 0;
            break;
        case PTO_CMD_H2D:
        case PTO_CMD_D2H:
        case PTO_CMD_D2D:
        case PTO_CMD_MEMSET:
        case PTO_CMD_PEER:
            if (ran && status == 0) {
                uint64_t n;
                uint64_t dur = copy_ns(m, cmd, &n);
                uint32_t e = m->ncores + place_copy(m, s, cmd, ready, dur, &start);
                end = start + dur;
                m->free_ns[e] = max64(m->free_ns[e], end);
                m->busy_ns[e] += dur;
                m->commands[e]++;
                m->bytes[e] += n;
                engine = (int32_t)e;
            }
            break;
        case PTO_CMD_WAIT:
            /* The latest end of what it waited for (its event's recording, or its fences: event.c). */
            start = end = max64(ready, pti_wait_end_ns(cmd));
            break;
        case PTO_CMD_LATCH:
            end = max64(ready, w->host_end_ns); /* held until the host released it */
            break;
        case PTO_CMD_DELAY:
            if (status == 0)
                end = ready + cmd->u.delay.us * 1000ull;
            break;
        default:
            break; /* records, frees, notifies, refusals: no time */
        }
    }
    w->start_ns = start;
    w->end_ns = end;
    w->dispatch_ns = engine >= 0 && (uint32_t)engine < m->ncores && start >= m->pickup_ns
                         ? start - m->pickup_ns
                         : start;
    w->engine = engine;
    s->model_end = end;
}

/* ---- copies in modeled order ------------------------------------------------------------------ */

static bool is_copy(uint32_t kind)
{
    return kind == PTO_CMD_H2D || kind == PTO_CMD_D2H || kind == PTO_CMD_D2D || kind == PTO_CMD_MEMSET ||
           kind == PTO_CMD_PEER;
}

/*
 * The earliest modeled time at which stream t can still bring work (sched_lock
 * held): false when it cannot bring any before something else does, which
 * then bounds it instead: an empty ring (new work is the host's), a latch
 * (the host releases it), a wait or an inline fence whose event is not
 * recorded yet (its recorder bounds it).  Otherwise its head command cannot
 * be ready before its stream's last end, its submission and what it waited
 * for (a parked copy: its own ready time), and what comes after it on t
 * not before that.
 */
static bool bound_of(pto_device *dev, pto_stream *t, uint64_t *lb)
{
    if (t->parked) {
        *lb = t->park_ready;
        return true;
    }
    uint64_t head = atomic_load_explicit(&t->head, memory_order_relaxed);
    if (head == atomic_load_explicit(&t->tail, memory_order_acquire))
        return false;
    struct pto_cmd *cmd = &t->ring[head & t->mask];
    uint64_t at = max64(t->model_end, cmd->submit_ns);
    switch (cmd->kind) {
    case PTO_CMD_LATCH:
        return false;
    case PTO_CMD_WAIT:
        if (pti_wait_holds(cmd))
            return false;
        at = max64(at, pti_wait_end_ns(cmd));
        break;
    case PTO_CMD_LAUNCH:
        if (cmd->u.launch.after) {
            if (pti_launch_held(dev, t, cmd))
                return false;
            at = max64(at, pti_wait_end_ns(cmd));
        }
        break;
    default:
        break;
    }
    *lb = at;
    return true;
}

/* copy_turn's scan of the other streams with a ring, out of line (rung_lock taken here). */
static __attribute__((noinline)) bool copy_turn_scan(pto_device *dev, const pto_stream *s, uint64_t ready)
{
    bool turn = true;
    pthread_mutex_lock(&dev->rung_lock);
    for (size_t i = 0; i < dev->n_rung; i++) {
        pto_stream *t = dev->rung[i];
        uint64_t lb;
        if (t == s || !bound_of(dev, t, &lb))
            continue;
        if (lb < ready || (lb == ready && t->id < s->id)) {
            turn = false; /* t may still bring a copy ready before this one: it goes first */
            break;
        }
    }
    pthread_mutex_unlock(&dev->rung_lock);
    return turn;
}

/* Whether a copy of s ready at `ready` goes before everything the other streams can still bring. */
static inline bool copy_turn(pto_device *dev, const pto_stream *s, uint64_t ready)
{
    /*
     * Only streams with a ring can bring work before the host submits more
     * (dev->rung), and s has one: s alone, it is its turn, with no lock.  A
     * ring another thread is making as this reads counts as made after the
     * look, as it would have under the lock taken first; one made before,
     * as far as this thread can know (its work seen), is counted.
     */
    return atomic_load_explicit(&dev->n_rung, memory_order_relaxed) <= 1 || copy_turn_scan(dev, s, ready);
}

bool pti_model_park(pto_device *dev, pto_stream *s, struct pto_cmd *cmd, int32_t status, uint64_t start,
                    uint64_t end, int32_t engine)
{
    struct pto_model *m = pti_model_of(dev);
    if (s->parked) { /* pti_model_unpark finishing it: its turn */
        s->parked = 0;
        return false;
    }
    bool kind = is_copy(cmd->kind) || (cmd->kind == PTO_CMD_LAUNCH && !cmd->modeled) ||
                (cmd->kind == PTO_CMD_PROGRAM && cmd->modeled);
    if (!kind || status != 0 || cmd->state != PTI_CMD_RUNNING)
        return false;
    uint64_t ready = ready_of(s, cmd);
    if (copy_turn(dev, s, ready))
        return false;
    s->parked = 1;
    s->park_ready = ready;
    s->park_start = start;
    s->park_end = end;
    s->park_engine = engine;
    m->nparked++;
    return true;
}

void pti_model_unpark(pto_device *dev)
{
    struct pto_model *m = pti_model_of(dev);
    if (!m->nparked || m->unparking)
        return;
    m->unparking = true;
    while (m->nparked) {
        /* The parked copy first in modeled order (ready time, then stream id), if its turn has come. */
        pto_stream *first = NULL;
        pthread_mutex_lock(&dev->rung_lock); /* a parked stream has a ring */
        for (size_t i = 0; i < dev->n_rung; i++) {
            pto_stream *t = dev->rung[i];
            if (t->parked == 1 && (!first || t->park_ready < first->park_ready ||
                                   (t->park_ready == first->park_ready && t->id < first->id)))
                first = t;
        }
        pthread_mutex_unlock(&dev->rung_lock);
        if (!first || !copy_turn(dev, first, first->park_ready))
            break;
        uint64_t head = atomic_load_explicit(&first->head, memory_order_relaxed);
        struct pto_cmd *cmd = &first->ring[head & first->mask];
        first->parked = 2;
        m->nparked--;
        pti_cmd_finish(dev, first, cmd, 0, 0, NULL, false, first->park_start, first->park_end,
                       first->park_engine);
    }
    m->unparking = false;
}

/* ---- programs: a list schedule over the task graph ------------------------------------------- */

struct hent {
    uint64_t key;
    uint32_t id;
};

struct heap {
    struct hent *v;
    uint32_t n;
};

static inline bool hless(struct hent a, struct hent b)
{
    return a.key < b.key || (a.key == b.key && a.id < b.id);
}

/* Push: sift a hole up from the end (no swaps). */
static void hpush(struct heap *h, uint64_t key, uint32_t id)
{
    struct hent x = {key, id};
    uint32_t i = h->n++;
    while (i) {
        uint32_t p = (i - 1) / 2;
        if (!hless(x, h->v[p]))
            break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = x;
}

/* Put x at the root's place (h->n > 0): sift the hole down to where x belongs. */
static void sift_down(struct heap *h, struct hent x)
{
    uint32_t i = 0, n = h->n;
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && hless(h->v[c + 1], h->v[c]))
            c++;
        if (!hless(h->v[c], x))
            break;
        h->v[i] = h->v[c];
        i = c;
    }
    h->v[i] = x;
}

/* Pop the least: the last entry takes the root's place. */
static struct hent hpop(struct heap *h)
{
    struct hent top = h->v[0], x = h->v[--h->n];
    if (h->n)
        sift_down(h, x);
    return top;
}

/*
 * The ready tasks of one kind: those ready at their submission (no
 * predecessors) in a FIFO, already in (time, instance) order since the
 * orchestrator submits in instance order, and those a predecessor released
 * in a heap.  The least of the two heads is the least ready task: one heap
 * would give the same order, at a cost per task of log n instead of 1.
 */
struct rq {
    const uint32_t *fifo;
    uint32_t head, tail;
    struct heap h;
};

static inline bool rq_empty(const struct rq *q) { return q->head == q->tail && !q->h.n; }

/* The least ready task's key (rq not empty): via *from_fifo, where it is. */
static inline struct hent rq_top(const struct rq *q, const uint64_t *at, bool *from_fifo)
{
    struct hent f = {0, 0};
    bool have_f = q->head != q->tail;
    if (have_f)
        f = (struct hent){at[q->fifo[q->head]], q->fifo[q->head]};
    *from_fifo = have_f && (!q->h.n || hless(f, q->h.v[0]));
    return *from_fifo ? f : q->h.v[0];
}

/*
 * The cores of one kind by (free time, id), the least first: a sorted run
 * v[head, tail) of a buffer with room for every task of the program to
 * append one (cq_room), so the run never wraps.  A core that takes a task
 * goes back in at its new free time; with tasks of one duration (one
 * site's, a fork's) that is behind every other core of its kind, so it is
 * appended with one compare, where a heap sifts the largest key down its
 * whole depth, each load waiting on the last task's stores.  A key that
 * goes between others: a binary search, and the shorter side shifts.
 * (key, id) is a total order, so the least core is the one a heap gives.
 */
struct cq {
    struct hent *v;
    uint32_t head, tail;
};

static inline bool cq_empty(const struct cq *q) { return q->head == q->tail; }

/*
 * Insert x where it goes among v[head, tail) (not after the last: the
 * caller appends that), out of line (its registers are saved only when it
 * runs), the queue in and out by value (the caller's copy stays in
 * registers: its address is never taken).
 */
static __attribute__((noinline)) struct cq cq_insert_slow(struct cq q, struct hent x)
{
    uint32_t h = q.head, t = q.tail, lo = h, hi = t - 1; /* p: the first entry after x (v[t - 1] is) */
    struct hent *v = q.v;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (hless(x, v[mid]))
            hi = mid;
        else
            lo = mid + 1;
    }
    uint32_t p = lo;
    if (h > 0 && p - h <= t - p) { /* the entries before x move down a place */
        memmove(v + h - 1, v + h, (size_t)(p - h) * sizeof(*v));
        v[p - 1] = x;
        q.head = h - 1;
        return q;
    }
    memmove(v + p + 1, v + p, (size_t)(t - p) * sizeof(*v));
    v[p] = x;
    q.tail = t + 1;
    return q;
}

/* Insert x (room: cq_room).  at_least: x is not before v[tail - 1] if the run is empty (the entry popped last). */
static inline void cq_insert(struct cq *q, struct hent x, bool at_least)
{
    uint32_t t = q->tail;
    if ((!at_least && q->head == t) || !hless(x, q->v[t - 1])) {
        q->v[t] = x;
        q->tail = t + 1;
        return;
    }
    *q = cq_insert_slow(*q, x);
}

/*
 * The least core (not before `key`) takes (key, id)'s place: it is free
 * again at key.  Emptied, the run's last entry is the one popped.
 */
static inline void cq_replace_top(struct cq *q, uint64_t key, uint32_t id)
{
    q->head++;
    cq_insert(q, (struct hent){key, id}, true);
}

/*
 * The room the cores' queues take for a program of n tasks: each kind's
 * cores, an entry a task that takes one (each moves the run's end on by
 * at most one), and the entry before an empty run (cq_replace_top).
 */
static size_t cq_room(const struct pto_model *m, uint32_t n) { return (size_t)m->ncores + 2 * ((size_t)n + 1); }

/* Each kind's cores by their free time for a program of n tasks starting at `start`, in buf (cq_room). */
static void cq_build(struct pto_model *m, struct cq cores[2], struct hent *buf, uint32_t n, uint64_t start)
{
    cores[0] = (struct cq){buf, 0, 0};
    cores[1] = (struct cq){buf + m->naic + n + 1, 0, 0};
    for (uint32_t c = 0; c < m->ncores; c++)
        cq_insert(&cores[c < m->naic ? 0 : 1], (struct hent){max64(m->free_ns[c], start), c}, false);
}

/*
 * Place task x, ready at `at`, on the core of q free first (sched_lock held):
 * dispatched when both are ready, started a pickup later.  Returns its end.
 * The model's figures come in as values (its callers keep them in
 * registers: the stores to x may alias m's arrays).
 */
static inline uint64_t place_on_first_free(struct cq *q, struct pto_mtask *x, uint64_t at, uint64_t pickup,
                                           uint64_t *busy, uint64_t *commands)
{
    struct hent top = q->v[q->head];
    uint32_t core = top.id;
    uint64_t dur = x->dur_ns, dispatch = max64(at, top.key);
    uint64_t tend = dispatch + pickup + dur;
    x->dispatch_ns = dispatch;
    x->start_ns = dispatch + pickup;
    x->end_ns = tend;
    x->engine = (int32_t)core;
    cq_replace_top(q, tend, core);
    busy[core] += dur; /* in_order takes it back if it bails out */
    commands[core]++;
    return tend;
}

/* A task is ready at `at` (all predecessors ended, submitted): queue it, or end it at once (it never ran). */
static void make_ready(struct pto_mtask *t, uint32_t i, uint64_t at, struct rq *ready, struct heap *done)
{
    if (!t[i].ran) {
        t[i].dispatch_ns = t[i].start_ns = t[i].end_ns = at;
        t[i].engine = PTO_ENGINE_NONE;
        hpush(done, at, i);
    } else {
        hpush(&ready[t[i].kind].h, at, i);
    }
}

/*
 * The cores' free times after a program's schedule (sched_lock held).  A core
 * the program used counts as busy up to its last task's end: later work
 * never lands in the program's gaps (one interval a core, not one a task).
 */
static void keep_cores(struct pto_model *m, const struct cq cores[2], uint64_t start)
{
    for (int k = 0; k < 2; k++)
        for (uint32_t j = cores[k].head; j < cores[k].tail; j++) {
            uint32_t c = cores[k].v[j].id;
            uint64_t key = cores[k].v[j].key;
            if (key > max64(m->free_ns[c], start)) {
                m->lanes[c].floor = key; /* every interval of c ends by then */
                m->lanes[c].n = 0;
            }
            m->free_ns[c] = key;
        }
}

/* The model's scratch of at least `bytes` (sched_lock held), or NULL: out of host memory. */
static void *scratch(struct pto_model *m, size_t bytes)
{
    if (bytes > m->scratch_cap) {
        size_t cap = m->scratch_cap ? m->scratch_cap : 4096;
        while (cap < bytes)
            cap *= 2;
        void *p = realloc(m->scratch, cap);
        if (!p)
            return NULL;
        m->scratch = p;
        m->scratch_cap = cap;
    }
    return m->scratch;
}

/*
 * A program whose tasks become ready in instance order within each kind: a
 * task is ready at the latest of its submission and its predecessors' ends,
 * and those are all placed before it (they precede it).  When that ready
 * time never goes back from one task of a kind to the next, the list
 * schedule below takes each kind's tasks in instance order, each on the core
 * free first, as the no-edge placement does: place them so, with no queues
 * (a table-less run: every task has the edge to the instance a window back,
 * which has mostly ended by then).  An early-resolving task releases its
 * consumers when it starts, which this does not follow: such a program, or
 * one whose ready times go back, takes the list schedule (false, nothing of
 * m changed).
 */
static bool in_order(struct pto_model *m, struct pto_mtask *t, uint32_t n, const uint32_t *pred_off,
                     const uint32_t *pred_ids, uint64_t start, struct hent *cv, uint64_t *end)
{
    if (pti_model_fast_off)
        return false;
    struct cq cores[2];
    cq_build(m, cores, cv, n, start);
    uint64_t last[2] = {0, 0}, e = *end;
    /* The model's figures in registers: the stores to t below may alias m's arrays. */
    const uint64_t orch_ns = m->orch_ns, pickup = m->pickup_ns;
    uint64_t *busy = m->busy_ns, *commands = m->commands;
    struct cq q0 = cores[0], q1 = cores[1]; /* each kind's: in registers (cq_insert_slow) */
    uint64_t sub = start;
    for (uint32_t i = 0; i < n; i++) {
        struct pto_mtask *x = &t[i];
        uint64_t at = x->submit_ns = sub += orch_ns; /* start + (i + 1) * orch_ns */
        uint32_t k0 = pred_off ? pred_off[i] : 0, k1 = pred_off ? pred_off[i + 1] : (i ? 1 : 0);
        for (uint32_t k = k0; k < k1; k++) {
            uint32_t p = pred_off ? pred_ids[k] : i - 1;
            if (p < i)
                at = max64(at, t[p].end_ns);
        }
        if (x->early || (x->ran && at < last[x->kind])) {
            /* Early-resolving, or out of order: undo (the list schedule reads no output but a staged start). */
            for (uint32_t j = 0; j < i; j++) {
                if (t[j].ran) {
                    m->busy_ns[t[j].engine] -= t[j].dur_ns;
                    m->commands[t[j].engine]--;
                }
                t[j].start_ns = 0;
            }
            return false;
        }
        if (!x->ran) {
            x->dispatch_ns = x->start_ns = x->end_ns = at;
            x->engine = PTO_ENGINE_NONE;
            continue;
        }
        last[x->kind] = at;
        e = max64(e, x->kind ? place_on_first_free(&q1, x, at, pickup, busy, commands)
                             : place_on_first_free(&q0, x, at, pickup, busy, commands));
    }
    cores[0] = q0;
    cores[1] = q1;
    keep_cores(m, cores, start);
    *end = e;
    return true;
}

int pti_model_fast_off;

/*
 * List-schedule a program run's n tasks over the modeled cores (preds: the
 * compiled table pred_off/pred_ids, NULL: a chain; sched_lock held, in its
 * turn): each task's outputs, and the run's modeled *start / *end.
 */
static void model_program(pto_device *dev, pto_stream *s, const struct pto_cmd *cmd, struct pto_mtask *t,
                          uint32_t n, const uint32_t *pred_off, const uint32_t *pred_ids, uint64_t *start_out,
                          uint64_t *end_out)
{
    struct pto_model *m = pti_model_of(dev);
    uint64_t ready0 = ready_of(s, cmd);
    size_t nedges = 0;
    if (pred_off)
        nedges = pred_off[n] - pred_off[0];
    else if (n)
        nedges = n - 1;
    /* Scratch: at (u64), heap entries, then the u32 arrays (npred, soff, fill, sids, fifo). */
    size_t nh = (size_t)2 * n + 2 + cq_room(m, n); /* ready heaps (at most n in all), done (n), then the cores */
    size_t n32 = (size_t)(n + 1) + (n + 2) + (n + 1) + (nedges + 1) + (size_t)n;
    size_t bytes = (size_t)(n + 1) * sizeof(uint64_t) + nh * sizeof(struct hent) + n32 * sizeof(uint32_t);
    uint64_t start = max64(ready0, m->orch_free);
    uint64_t orch_end = start + (uint64_t)n * m->orch_ns;
    m->orch_free = orch_end;
    uint64_t end = orch_end;
    char *mem = scratch(m, bytes);
    if (!mem) {
        /* Out of host memory: no schedule, the tasks take no modeled time. */
        for (uint32_t i = 0; i < n; i++) {
            t[i].submit_ns = t[i].dispatch_ns = t[i].start_ns = t[i].end_ns = start;
            t[i].engine = PTO_ENGINE_NONE;
        }
        goto out;
    }
    uint64_t *at = (uint64_t *)mem;
    struct hent *hv = (struct hent *)(mem + (size_t)(n + 1) * sizeof(uint64_t));
    struct hent *cv = hv + 2 * (size_t)n + 2; /* the cores' queues (cq_build) */
    uint32_t *npred = (uint32_t *)(hv + nh);
    uint32_t *soff = npred + (n + 1);
    uint32_t *fill = soff + (n + 2);
    uint32_t *sids = fill + (n + 1);
    uint32_t *fifo = sids + (nedges + 1);
    if (!nedges) {
        /*
         * No edges: the kinds never wait on each other, and each kind's tasks
         * are ready in instance order as they are submitted, so the schedule
         * below takes them in that order: place them so, with no queues.
         */
        struct cq cores[2];
        cq_build(m, cores, cv, n, start);
        /* The model's figures in registers: the stores to t below may alias m's arrays. */
        const uint64_t orch_ns = m->orch_ns, pickup = m->pickup_ns;
        uint64_t *busy = m->busy_ns, *commands = m->commands;
        struct cq q0 = cores[0], q1 = cores[1]; /* each kind's: in registers (cq_insert_slow) */
        uint64_t sub = start;
        for (uint32_t i = 0; i < n; i++) {
            struct pto_mtask *x = &t[i];
            x->submit_ns = sub += orch_ns; /* start + (i + 1) * orch_ns */
            if (!x->ran) {
                x->dispatch_ns = x->start_ns = x->end_ns = sub;
                x->engine = PTO_ENGINE_NONE;
                continue;
            }
            end = max64(end, x->kind ? place_on_first_free(&q1, x, sub, pickup, busy, commands)
                                     : place_on_first_free(&q0, x, sub, pickup, busy, commands));
        }
        cores[0] = q0;
        cores[1] = q1;
        keep_cores(m, cores, start);
        goto out;
    }
    if (in_order(m, t, n, pred_off, pred_ids, start, cv, &end))
        goto out;
    memset(npred, 0, (size_t)(n + 1) * sizeof(uint32_t));
    memset(soff, 0, (size_t)(n + 2) * sizeof(uint32_t));
    /* Successor lists (CSR) from the predecessor table, or a chain. */
    if (nedges) {
        for (uint32_t i = 0; i < n; i++) {
            uint32_t k0 = pred_off ? pred_off[i] : 0, k1 = pred_off ? pred_off[i + 1] : (i ? 1 : 0);
            for (uint32_t k = k0; k < k1; k++) {
                uint32_t p = pred_off ? pred_ids[k] : i - 1;
                if (p < i) {
                    soff[p + 1]++;
                    npred[i]++;
                }
            }
        }
        for (uint32_t i = 0; i < n; i++)
            soff[i + 1] += soff[i];
        memcpy(fill, soff, (size_t)(n + 1) * sizeof(uint32_t));
        for (uint32_t i = 0; i < n; i++) {
            uint32_t k0 = pred_off ? pred_off[i] : 0, k1 = pred_off ? pred_off[i + 1] : (i ? 1 : 0);
            for (uint32_t k = k0; k < k1; k++) {
                uint32_t p = pred_off ? pred_ids[k] : i - 1;
                if (p < i)
                    sids[fill[p]++] = i;
            }
        }
    }
    /* Ready tasks per kind (FIFO + heap), completions, free cores per kind. */
    uint32_t nk[2] = {0, 0}, nall[2] = {0, 0}; /* per kind: ready at submission, all that ran */
    for (uint32_t i = 0; i < n; i++)
        if (t[i].ran) {
            nall[t[i].kind]++;
            nk[t[i].kind] += !npred[i];
        }
    /* Room: a kind's heap holds its tasks that a predecessor releases; done holds every task. */
    struct rq ready[2] = {{fifo, 0, nk[0], {hv, 0}}, {fifo + nk[0], 0, nk[1], {hv + (nall[0] - nk[0]), 0}}};
    uint32_t *fill_fifo[2] = {fifo, fifo + nk[0]};
    struct heap done = {ready[1].h.v + (nall[1] - nk[1]), 0};
    struct cq cores[2];
    /* Cores idle when the program starts tie (the lowest takes work first): the past does not show. */
    cq_build(m, cores, cv, n, start);
    for (uint32_t i = 0; i < n; i++) {
        at[i] = t[i].submit_ns = start + (uint64_t)(i + 1) * m->orch_ns; /* submitted */
        if (npred[i])
            continue;
        if (t[i].ran)
            *fill_fifo[t[i].kind]++ = i; /* in (time, instance) order */
        else
            make_ready(t, i, at[i], ready, &done);
    }
    uint32_t finished = 0;
    while (finished < n) {
        int bk = -1;
        uint64_t best = 0;
        bool bfifo = false;
        for (int k = 0; k < 2; k++) {
            if (rq_empty(&ready[k]) || cq_empty(&cores[k]))
                continue;
            bool f;
            uint64_t c = max64(rq_top(&ready[k], at, &f).key, cores[k].v[cores[k].head].key);
            if (bk < 0 || c < best) {
                bk = k;
                best = c;
                bfifo = f;
            }
        }
        if (done.n && (bk < 0 || done.v[0].key <= best)) {
            struct hent e = hpop(&done);
            finished++;
            if (t[e.id].early && t[e.id].ran)
                continue; /* it released its successors when it started */
            for (uint32_t k = soff[e.id]; k < soff[e.id + 1]; k++) {
                uint32_t u = sids[k];
                at[u] = max64(at[u], e.key);
                if (--npred[u] == 0)
                    make_ready(t, u, at[u], ready, &done);
            }
            continue;
        }
        if (bk < 0)
            break; /* cannot happen: every kind has cores (pti_model_cost) */
        uint32_t id = bfifo ? ready[bk].fifo[ready[bk].head++] : hpop(&ready[bk].h).id;
        uint32_t core = cores[bk].v[cores[bk].head].id;
        struct pto_mtask *x = &t[id];
        x->dispatch_ns = best;
        x->start_ns = max64(best + m->pickup_ns, x->start_ns); /* staged early: released as its producers end */
        x->end_ns = x->start_ns + x->dur_ns;
        x->engine = (int32_t)core;
        m->busy_ns[core] += x->dur_ns;
        m->commands[core]++;
        if (x->early) /* allow_early_resolve: its consumers may be staged on a core now, start as it ends */
            for (uint32_t k = soff[id]; k < soff[id + 1]; k++) {
                uint32_t u = sids[k];
                t[u].start_ns = max64(t[u].start_ns, x->end_ns); /* the doorbell: no start before */
                at[u] = max64(at[u], x->start_ns);
                if (--npred[u] == 0)
                    make_ready(t, u, at[u], ready, &done);
            }
        cq_replace_top(&cores[bk], x->end_ns, core);
        hpush(&done, x->end_ns, id);
    }
    keep_cores(m, cores, start);
    for (uint32_t i = 0; i < n; i++)
        end = max64(end, t[i].end_ns);
out:
    *start_out = start;
    *end_out = end;
}

/* ---- statistics ---------------------------------------------------------------------------------- */

/* pto_engine_get_stats for a modeled device: its modeled engines. */
int pti_model_engine_stats(pto_device *dev, int32_t engine, pto_engine_stats *out)
{
    struct pto_model *m = pti_model_of(dev);
    int32_t n = (int32_t)(m->ncores + m->ncopy);
    if (engine < 0 || engine >= n)
        return pti_error(PTO_EINVAL, "pto_engine_get_stats: engine %d out of range [0, %d) (modeled engines)",
                         engine, n);
    pthread_mutex_lock(&dev->sched_lock); /* the statistics' lock (the placements') */
    out->engine = engine;
    out->is_copy = (uint32_t)engine >= m->ncores;
    out->busy_ns = m->busy_ns[engine];
    out->commands = m->commands[engine];
    out->bytes = m->bytes[engine];
    pthread_mutex_unlock(&dev->sched_lock);
    return 0;
}

void pti_model_info(pto_device *dev, pto_device_info *out)
{
    struct pto_model *m = pti_model_of(dev);
    if (!m)
        return;
    out->timing_model = 1;
    out->model_cores = m->ncores;
    out->model_aic = m->naic;
    out->model_copy_engines = m->ncopy;
}
