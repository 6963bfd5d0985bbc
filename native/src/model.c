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
 * cube MACs per dtype; the pipes' cycles summed, or their maximum when the
 * kernel overlaps them (pto_work.overlap); cycles over clock_ghz; at least
 * min_kernel_us.  A copy: the host link's latency plus bytes over its
 * bandwidth (h2d, d2h, peer), or bytes over GM bandwidth (twice for d2d:
 * read and write).  Commands the scheduler holds (records, waits, frees,
 * notifies) take no time; a delay its microseconds; a latch ends when the
 * host released it.
 *
 * Placement.  A launch's blocks go to the earliest free modeled core of
 * their kind (cube work: AIC, else AIV) as the host finishes them
 * (pti_model_block), so concurrent launches share the cores in the order
 * the host ran them.  A program's tasks are placed when the run completes
 * (pti_model_program): a list schedule over its task graph, so its modeled
 * timeline depends only on its work, its edges and the profile, never on
 * which host threads ran what.  The orchestrator submits task i at
 * start + (i + 1) * orch_us_per_task; a task is ready once submitted and
 * its predecessors ended; a free core of its kind takes the earliest ready
 * task (ties: the lower instance), and it starts pickup_us later.
 *
 * Locks: m->lock is a leaf (under sched_lock, or alone); the clocks, the
 * runs' model_* fields and the modeled engine statistics are under it;
 * s->model_end is under sched_lock.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct pto_model {
    pthread_mutex_t lock;
    pto_device_profile prof;
    uint32_t naic, naiv, ncores, ncopy; /* engines: [0, naic) AIC, [naic, ncores) AIV, then copy */
    uint64_t pickup_ns, orch_ns, floor_ns, link_lat_ns;
    uint64_t orch_free;
    uint64_t *free_ns, *busy_ns, *commands, *bytes; /* per modeled engine */
};

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
        }
        if (!m || !m->free_ns || !m->busy_ns || !m->commands || !m->bytes) {
            if (m) {
                free(m->free_ns);
                free(m->busy_ns);
                free(m->commands);
                free(m->bytes);
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

/* Bytes a pipe moves for `bytes` in `rows` contiguous rows, each rounded up to the granule. */
static double granular(uint64_t bytes, uint64_t rows, double granule)
{
    if (!bytes)
        return 0;
    double r = rows ? (double)rows : 1.0;
    return ceil((double)bytes / r / granule) * granule * r;
}

uint64_t pti_model_cost(struct pto_model *m, const pto_work *w, uint8_t *kind)
{
    const pto_device_profile *p = &m->prof;
    double g = p->transfer_granule_bytes;
    double pipes[5];
    pipes[0] = granular(w->load_bytes, w->load_rows, g) / p->mte2_bytes_per_cycle;
    pipes[1] = granular(w->store_bytes, w->store_rows, g) / p->mte3_bytes_per_cycle;
    pipes[2] = (double)w->move_bytes / p->mte1_bytes_per_cycle;
    pipes[3] = 0;
    for (int i = 0; i < PTO_VEC_CLASSES; i++)
        pipes[3] += (double)w->vec_bytes[i] / p->vec_bytes_per_cycle[i];
    pipes[4] = 0;
    bool cube = false;
    for (int i = 0; i < PTO_CUBE_DTYPES; i++) {
        pipes[4] += (double)w->cube_macs[i] / p->cube_macs_per_cycle[i];
        cube = cube || w->cube_macs[i];
    }
    double cycles = 0;
    for (int i = 0; i < 5; i++)
        cycles = w->overlap ? (pipes[i] > cycles ? pipes[i] : cycles) : cycles + pipes[i];
    uint64_t ns = (uint64_t)(cycles / p->clock_ghz + 0.5);
    *kind = cube ? (m->naic ? 0 : 1) : (m->naiv ? 1 : 0);
    return max64(ns, m->floor_ns);
}

uint64_t pto_model_work_ns(pto_device *dev, const pto_work *work)
{
    struct pto_model *m = dev ? pti_model_of(dev) : NULL;
    uint8_t kind;
    return m && work ? pti_model_cost(m, work, &kind) : 0;
}

/*
 * The engine in [lo, hi) that can start work ready at `ready` first (m->lock
 * held): every engine free by then ties, and ties go to the lowest, so which
 * idle engine takes the work never depends on what ran before.
 */
static uint32_t earliest(struct pto_model *m, uint32_t lo, uint32_t hi, uint64_t ready)
{
    uint32_t best = lo;
    uint64_t at = max64(m->free_ns[lo], ready);
    for (uint32_t e = lo + 1; e < hi; e++) {
        uint64_t t = max64(m->free_ns[e], ready);
        if (t < at) {
            best = e;
            at = t;
        }
    }
    return best;
}

static void kind_range(struct pto_model *m, uint8_t kind, uint32_t *lo, uint32_t *hi)
{
    *lo = kind == 0 ? 0 : m->naic;
    *hi = kind == 0 ? m->naic : m->ncores;
}

/* ---- launches and copies ------------------------------------------------------------------ */

static uint64_t ready_of(const pto_stream *s, const struct pto_cmd *cmd)
{
    uint64_t ready = max64(s->model_end, cmd->submit_ns);
    /* A launch behind an inline fence (event.c) starts after the point it waited for. */
    if (cmd->kind == PTO_CMD_LAUNCH && cmd->u.launch.after)
        ready = max64(ready, pti_wait_end_ns((struct pto_cmd *)cmd));
    return ready;
}

void pti_model_block(pto_device *dev, struct pto_run *run, const pto_work *work, struct pto_when *w)
{
    struct pto_model *m = pti_model_of(dev);
    uint8_t kind;
    uint64_t dur = pti_model_cost(m, work, &kind);
    /* The stream's previous command finished before this launch started: model_end is stable. */
    uint64_t ready = ready_of(run->stream, run->cmd);
    uint32_t lo, hi;
    kind_range(m, kind, &lo, &hi);
    pthread_mutex_lock(&m->lock);
    uint32_t c = earliest(m, lo, hi, ready);
    uint64_t dispatch = max64(ready, m->free_ns[c]);
    uint64_t start = dispatch + m->pickup_ns, end = start + dur;
    m->free_ns[c] = end;
    m->busy_ns[c] += dur;
    m->commands[c]++;
    if (!run->model_blocks || start < run->model_first)
        run->model_first = start;
    if (!run->model_blocks || end >= run->model_last) {
        run->model_last = end;
        run->model_engine = (int32_t)c;
    }
    run->model_blocks++;
    pthread_mutex_unlock(&m->lock);
    w->dispatch_ns = dispatch;
    w->start_ns = start;
    w->end_ns = end;
    w->engine = (int32_t)c;
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

void pti_model_finish(pto_device *dev, pto_stream *s, struct pto_cmd *cmd, int32_t status,
                      struct pto_when *w)
{
    struct pto_model *m = pti_model_of(dev);
    uint64_t ready = ready_of(s, cmd);
    uint64_t start = ready, end = ready;
    int32_t engine = PTO_ENGINE_NONE;
    bool ran = cmd->state == PTI_CMD_RUNNING;
    if (cmd->modeled) {
        /* A program: its schedule gave the times (pti_model_program); the host's are its run's. */
        start = w->start_ns;
        end = w->end_ns;
        w->host_start_ns = cmd->start_ns;
        w->host_end_ns = pto_now_ns();
    } else {
        switch (cmd->kind) {
        case PTO_CMD_LAUNCH:
            /*
             * No lock: the thread finishing a launch ran its last block, and
             * the acq_rel add of done_blocks orders every block's placement
             * (under m->lock) before this; no block of it runs any more.
             */
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
                pthread_mutex_lock(&m->lock);
                uint32_t e = earliest(m, m->ncores, m->ncores + m->ncopy, ready);
                start = max64(ready, m->free_ns[e]);
                end = start + dur;
                m->free_ns[e] = end;
                m->busy_ns[e] += dur;
                m->commands[e]++;
                m->bytes[e] += n;
                pthread_mutex_unlock(&m->lock);
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

/* Pop the least: sift a hole down from the root, then drop the last entry into it. */
static struct hent hpop(struct heap *h)
{
    struct hent top = h->v[0], x = h->v[--h->n];
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
    if (n)
        h->v[i] = x;
    return top;
}

/* A task is ready at `at` (all predecessors ended, submitted): queue it, or end it at once (it never ran). */
static void make_ready(struct pto_mtask *t, uint32_t i, uint64_t at, struct heap *ready, struct heap *done)
{
    if (!t[i].ran) {
        t[i].dispatch_ns = t[i].start_ns = t[i].end_ns = at;
        t[i].engine = PTO_ENGINE_NONE;
        hpush(done, at, i);
    } else {
        hpush(&ready[t[i].kind], at, i);
    }
}

void pti_model_program(pto_device *dev, pto_stream *s, const struct pto_cmd *cmd, struct pto_mtask *t,
                       uint32_t n, const uint32_t *pred_off, const uint32_t *pred_ids, uint64_t *start_out,
                       uint64_t *end_out)
{
    struct pto_model *m = pti_model_of(dev);
    uint64_t ready0 = ready_of(s, cmd);
    uint32_t *npred = calloc(n + 1, sizeof(uint32_t));
    uint32_t *soff = calloc((size_t)n + 2, sizeof(uint32_t));
    uint64_t *at = calloc(n + 1, sizeof(uint64_t));
    size_t nedges = 0;
    if (pred_off)
        for (uint32_t i = 0; i < n; i++)
            nedges += pred_off[i + 1] - pred_off[i];
    else if (n)
        nedges = n - 1;
    uint32_t *sids = calloc(nedges + 1, sizeof(uint32_t));
    struct hent *hv = calloc((size_t)4 * n + 2 * m->ncores + 4, sizeof(struct hent));
    pthread_mutex_lock(&m->lock);
    uint64_t start = max64(ready0, m->orch_free);
    uint64_t orch_end = start + (uint64_t)n * m->orch_ns;
    m->orch_free = orch_end;
    uint64_t end = orch_end;
    if (!npred || !soff || !at || !sids || !hv) {
        /* Out of host memory: no schedule, the tasks take no modeled time. */
        for (uint32_t i = 0; i < n; i++) {
            t[i].submit_ns = t[i].dispatch_ns = t[i].start_ns = t[i].end_ns = start;
            t[i].engine = PTO_ENGINE_NONE;
        }
        goto out;
    }
    /* Successor lists (CSR) from the predecessor table, or a chain. */
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
    uint32_t *fill = calloc(n + 1, sizeof(uint32_t));
    if (!fill) {
        for (uint32_t i = 0; i < n; i++) {
            t[i].submit_ns = t[i].dispatch_ns = t[i].start_ns = t[i].end_ns = start;
            t[i].engine = PTO_ENGINE_NONE;
        }
        goto out;
    }
    for (uint32_t i = 0; i < n; i++) {
        uint32_t k0 = pred_off ? pred_off[i] : 0, k1 = pred_off ? pred_off[i + 1] : (i ? 1 : 0);
        for (uint32_t k = k0; k < k1; k++) {
            uint32_t p = pred_off ? pred_ids[k] : i - 1;
            if (p < i)
                sids[soff[p] + fill[p]++] = i;
        }
    }
    free(fill);
    /* Heaps: ready tasks per kind, free cores per kind, completions. */
    struct heap ready[2] = {{hv, 0}, {hv + n, 0}};
    struct heap done = {hv + 2 * n, 0};
    struct heap cores[2] = {{hv + 3 * n, 0}, {hv + 3 * n + m->ncores, 0}};
    /* Cores idle when the program starts tie (the lowest takes work first): the past does not show. */
    for (uint32_t c = 0; c < m->ncores; c++)
        hpush(&cores[c < m->naic ? 0 : 1], max64(m->free_ns[c], start), c);
    for (uint32_t i = 0; i < n; i++) {
        at[i] = t[i].submit_ns = start + (uint64_t)(i + 1) * m->orch_ns; /* submitted */
        if (!npred[i])
            make_ready(t, i, at[i], ready, &done);
    }
    uint32_t finished = 0;
    while (finished < n) {
        int bk = -1;
        uint64_t best = 0;
        for (int k = 0; k < 2; k++) {
            if (!ready[k].n || !cores[k].n)
                continue;
            uint64_t c = max64(ready[k].v[0].key, cores[k].v[0].key);
            if (bk < 0 || c < best) {
                bk = k;
                best = c;
            }
        }
        if (done.n && (bk < 0 || done.v[0].key <= best)) {
            struct hent e = hpop(&done);
            finished++;
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
        struct hent task = hpop(&ready[bk]);
        struct hent core = hpop(&cores[bk]);
        struct pto_mtask *x = &t[task.id];
        x->dispatch_ns = best;
        x->start_ns = best + m->pickup_ns;
        x->end_ns = x->start_ns + x->dur_ns;
        x->engine = (int32_t)core.id;
        m->busy_ns[core.id] += x->dur_ns;
        m->commands[core.id]++;
        hpush(&cores[bk], x->end_ns, core.id);
        hpush(&done, x->end_ns, task.id);
    }
    for (int k = 0; k < 2; k++)
        for (uint32_t j = 0; j < cores[k].n; j++)
            m->free_ns[cores[k].v[j].id] = cores[k].v[j].key;
    for (uint32_t i = 0; i < n; i++)
        end = max64(end, t[i].end_ns);
out:
    pthread_mutex_unlock(&m->lock);
    free(npred);
    free(soff);
    free(at);
    free(sids);
    free(hv);
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
    pthread_mutex_lock(&m->lock);
    out->engine = engine;
    out->is_copy = (uint32_t)engine >= m->ncores;
    out->busy_ns = m->busy_ns[engine];
    out->commands = m->commands[engine];
    out->bytes = m->bytes[engine];
    pthread_mutex_unlock(&m->lock);
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
