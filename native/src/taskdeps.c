/*
 * taskdeps.c - the task-edge rule: which task instance of a program waits
 * for which (pto_task_deps_*, and pti_task_conflict with its parts
 * pti_task_hazard, pti_box_overlaps, pti_box_covers; the rule itself is
 * stated in pto_driver.h).
 *
 * Phase: compile time and execution.  The compiler builds a program's
 * table with pto_task_deps_* (pypto_async/ir/_deps.py packs the accesses
 * and unpacks the edges); a program without a table has its edges resolved
 * at submission by orch.c with the same pair rule (resolve_edges).
 *
 * The index.  Each tensor keeps its live accesses twice: all of them (what
 * a write may conflict with) and its writes (what a read may).  Each of the
 * two is hashed into a grid whose cell is the size of the first window
 * added to it (the tiles of one tensor are usually of one size), so the
 * accesses a window may overlap or cover are those in the cells it spans,
 * plus the large ones (the whole tensor, a window over more than
 * TD_MAX_CELLS cells, an empty one, one of another rank), which every
 * lookup looks at; a lookup by a large window looks at every live access.
 * An access leaves once a later write covers it: it is marked dead and
 * dropped from a list when a lookup next passes it.  A lookup's candidates
 * (a superset of the accesses that overlap) are checked exactly and taken
 * in history order, so the edges depend on the rule only, the cost on the
 * index: linear in the tasks and the edges found when tasks touch tiles.
 *
 * Not thread-safe: one table is used by one thread at a time.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define NONE UINT32_MAX
/* A window over more cells than this is one of its region's large ones. */
#define TD_MAX_CELLS 64
#define TD_MAX_TENSORS (1u << 24)

/* ---- the pair rule ----------------------------------------------------------- */

uint32_t pti_task_hazard(uint32_t later, uint32_t earlier)
{
    if ((later & PTO_TASK_READ) && (earlier & PTO_TASK_WRITE))
        return PTO_TASK_RAW;
    if ((later & PTO_TASK_WRITE) && (earlier & PTO_TASK_WRITE))
        return PTO_TASK_WAW;
    if ((later & PTO_TASK_WRITE) && (earlier & PTO_TASK_READ))
        return PTO_TASK_WAR;
    return 0;
}

bool pti_box_overlaps(struct pto_box a, struct pto_box b)
{
    if (a.whole || b.whole || a.ndim != b.ndim)
        return true;
    for (uint32_t k = 0; k < a.ndim; k++)
        if (!(a.lo[k] < b.hi[k] && b.lo[k] < a.hi[k]))
            return false;
    return true;
}

bool pti_box_covers(struct pto_box a, struct pto_box b)
{
    if (a.whole)
        return true;
    if (b.whole || a.ndim != b.ndim)
        return false;
    for (uint32_t k = 0; k < a.ndim; k++)
        if (!(a.lo[k] <= b.lo[k] && b.hi[k] <= a.hi[k]))
            return false;
    return true;
}

uint32_t pti_task_conflict(uint32_t later, struct pto_box lw, uint32_t earlier, struct pto_box ew)
{
    uint32_t hz = pti_task_hazard(later, earlier);
    return hz && pti_box_overlaps(lw, ew) ? hz : 0;
}

/* ---- the table ----------------------------------------------------------------- */

struct td_vec {
    uint32_t *v;
    uint32_t n;
    uint64_t cap;
};

struct td_entry {
    uint32_t task;
    uint32_t flags;   /* PTO_TASK_READ | _WRITE | _WHOLE */
    uint32_t ndim;
    uint32_t stamp;   /* the last lookup that took it */
    uint64_t box;     /* lo at bounds[box], hi at bounds[box + ndim] */
    bool alive;
};

/* One tensor's live accesses (or its live writes), by region. */
struct td_region {
    uint32_t id;      /* its cells' key: tensor * 2 + (1 for the writes) */
    bool has_cell;
    uint32_t ndim;
    int64_t *cell;    /* the grid's cell size per dimension */
    struct td_vec large, every;
    uint32_t live;
};

struct td_tensor {
    bool used;
    struct td_region all, writes;
};

struct td_cell {
    uint64_t hash;
    uint64_t key;     /* its coordinates at coords[key .. key + ndim) */
    uint32_t region, ndim;
    struct td_vec list;
};

struct pto_task_deps {
    bool broken;      /* out of memory part way: every later call fails */
    uint32_t ntasks;
    struct td_entry *e;
    uint32_t ne;
    uint64_t cape;
    int64_t *bounds;
    uint64_t nb, capb;
    struct td_tensor *t;
    uint64_t capt;
    struct td_cell *cells;
    uint32_t ncells;
    uint64_t capcells;
    int64_t *coords;
    uint64_t ncoords, capcoords;
    uint32_t *table;  /* open addressing: cell ids, NONE empty */
    uint32_t tcap;    /* a power of two */
    uint32_t *mark;   /* per task: 1 + the last task found to wait for it */
    uint64_t capmark;
    pto_task_edge *edges;
    size_t nedges, taken;
    uint64_t capedges;
    struct td_vec cand;
    uint32_t stamp;
    uint64_t looked, most;
    int64_t first[PTO_TASK_MAX_DIMS], last[PTO_TASK_MAX_DIMS], cur[PTO_TASK_MAX_DIMS];
};

/*
 * Grow the array at *pp (the address of a pointer to *cap elements of size
 * sz) to hold at least n; false: out of memory (the array is kept).  The
 * pointer is read and written with memcpy, whatever its element type.
 */
static bool grow(void *pp, size_t sz, uint64_t *cap, uint64_t n)
{
    if (n <= *cap)
        return true;
    uint64_t c = *cap ? *cap : 16;
    while (c < n)
        c *= 2;
    if (c > SIZE_MAX / sz)
        return false;
    void *p, *q;
    memcpy(&p, pp, sizeof(p));
    if (!(q = realloc(p, (size_t)(c * sz))))
        return false;
    memcpy(pp, &q, sizeof(q));
    *cap = c;
    return true;
}

static bool vec_push(struct td_vec *x, uint32_t v)
{
    if (x->n == UINT32_MAX || !grow(&x->v, sizeof(*x->v), &x->cap, (uint64_t)x->n + 1))
        return false;
    x->v[x->n++] = v;
    return true;
}

static struct pto_box entry_box(const pto_task_deps *d, const struct td_entry *e)
{
    const int64_t *b = d->bounds + e->box;
    return (struct pto_box){b, b + e->ndim, e->ndim, (e->flags & PTO_TASK_WHOLE) != 0};
}

static int64_t floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

/* The cells box spans in region r (d->first/last), or false: a large box. */
static bool cells_of(pto_task_deps *d, const struct td_region *r, struct pto_box box)
{
    if (box.whole || !r->has_cell || box.ndim != r->ndim)
        return false;
    uint64_t count = 1;
    for (uint32_t k = 0; k < box.ndim; k++) {
        if (box.hi[k] <= box.lo[k])
            return false; /* empty: it may still overlap, or be covered, at a cell's edge */
        int64_t first = floor_div(box.lo[k], r->cell[k]), last = floor_div(box.hi[k] - 1, r->cell[k]);
        int64_t span;
        if (__builtin_sub_overflow(last, first, &span) || span >= TD_MAX_CELLS)
            return false;
        count *= (uint64_t)span + 1;
        if (count > TD_MAX_CELLS)
            return false;
        d->first[k] = first;
        d->last[k] = last;
    }
    return true;
}

static uint64_t cell_hash(uint32_t region, const int64_t *c, uint32_t ndim)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ region;
    for (uint32_t k = 0; k < ndim; k++) {
        h = (h ^ (uint64_t)c[k]) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
    }
    return h ^ (h >> 29);
}

static bool table_grow(pto_task_deps *d)
{
    uint32_t cap = d->tcap ? d->tcap * 2 : 64;
    uint32_t *t = malloc((size_t)cap * sizeof(*t));
    if (!t)
        return false;
    memset(t, 0xff, (size_t)cap * sizeof(*t));
    for (uint32_t i = 0; i < d->ncells; i++) {
        uint32_t j = (uint32_t)d->cells[i].hash & (cap - 1);
        while (t[j] != NONE)
            j = (j + 1) & (cap - 1);
        t[j] = i;
    }
    free(d->table);
    d->table = t;
    d->tcap = cap;
    return true;
}

/* The cell at d->cur in region r; create: add it if new.  NONE: none (or out of memory, with create). */
static uint32_t cell_find(pto_task_deps *d, const struct td_region *r, bool create)
{
    uint64_t h = cell_hash(r->id, d->cur, r->ndim);
    if (d->tcap) {
        for (uint32_t j = (uint32_t)h & (d->tcap - 1);; j = (j + 1) & (d->tcap - 1)) {
            uint32_t i = d->table[j];
            if (i == NONE)
                break;
            const struct td_cell *c = &d->cells[i];
            if (c->hash == h && c->region == r->id &&
                (!r->ndim || !memcmp(d->coords + c->key, d->cur, (size_t)r->ndim * sizeof(int64_t))))
                return i;
        }
    }
    if (!create)
        return NONE;
    if (((uint64_t)d->ncells + 1) * 2 > d->tcap && !table_grow(d))
        return NONE;
    if (d->ncells == NONE - 1 || !grow(&d->cells, sizeof(*d->cells), &d->capcells, (uint64_t)d->ncells + 1) ||
        !grow(&d->coords, sizeof(*d->coords), &d->capcoords, d->ncoords + r->ndim))
        return NONE;
    uint32_t i = d->ncells++;
    struct td_cell *c = &d->cells[i];
    memset(c, 0, sizeof(*c));
    c->hash = h;
    c->region = r->id;
    c->ndim = r->ndim;
    c->key = d->ncoords;
    if (r->ndim)
        memcpy(d->coords + d->ncoords, d->cur, (size_t)r->ndim * sizeof(int64_t));
    d->ncoords += r->ndim;
    uint32_t j = (uint32_t)h & (d->tcap - 1);
    while (d->table[j] != NONE)
        j = (j + 1) & (d->tcap - 1);
    d->table[j] = i;
    return i;
}

/* Step d->cur to the next cell of d->first .. d->last; false: done. */
static bool next_cell(pto_task_deps *d, uint32_t ndim)
{
    for (uint32_t k = ndim; k-- > 0;) {
        if (d->cur[k] < d->last[k]) {
            d->cur[k]++;
            return true;
        }
        d->cur[k] = d->first[k];
    }
    return false;
}

static bool region_add(pto_task_deps *d, struct td_region *r, uint32_t id)
{
    struct td_entry *e = &d->e[id];
    struct pto_box box = entry_box(d, e);
    if (!r->has_cell && !box.whole) {
        r->cell = malloc((box.ndim ? box.ndim : 1) * sizeof(int64_t));
        if (!r->cell)
            return false;
        for (uint32_t k = 0; k < box.ndim; k++) {
            int64_t ext;
            if (__builtin_sub_overflow(box.hi[k], box.lo[k], &ext))
                ext = INT64_MAX;
            r->cell[k] = ext > 1 ? ext : 1;
        }
        r->ndim = box.ndim;
        r->has_cell = true;
    }
    if (!vec_push(&r->every, id))
        return false;
    r->live++;
    if (!cells_of(d, r, box))
        return vec_push(&r->large, id);
    memcpy(d->cur, d->first, (size_t)r->ndim * sizeof(int64_t));
    do {
        uint32_t c = cell_find(d, r, true);
        if (c == NONE || !vec_push(&d->cells[c].list, id))
            return false;
    } while (next_cell(d, r->ndim));
    return true;
}

/* Add l's live entries not yet taken by this lookup to d->cand, dropping its dead ones. */
static bool take_list(pto_task_deps *d, struct td_vec *l)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < l->n; i++) {
        uint32_t id = l->v[i];
        struct td_entry *e = &d->e[id];
        if (!e->alive)
            continue;
        l->v[n++] = id;
        if (e->stamp != d->stamp) {
            e->stamp = d->stamp;
            if (!vec_push(&d->cand, id))
                return false;
        }
    }
    l->n = n;
    return true;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

static void sort_u32(uint32_t *v, uint32_t n)
{
    if (n > 16) {
        qsort(v, n, sizeof(*v), cmp_u32);
        return;
    }
    for (uint32_t i = 1; i < n; i++) {
        uint32_t x = v[i], j = i;
        for (; j > 0 && v[j - 1] > x; j--)
            v[j] = v[j - 1];
        v[j] = x;
    }
}

/* Every live entry of r whose window may overlap box (a superset), in history order, into d->cand. */
static bool region_near(pto_task_deps *d, struct td_region *r, struct pto_box box)
{
    d->cand.n = 0;
    if (r->live == 0)
        return true;
    if (++d->stamp == 0) { /* wrapped: no entry may keep a stamp a later lookup reuses */
        for (uint32_t i = 0; i < d->ne; i++)
            d->e[i].stamp = 0;
        d->stamp = 1;
    }
    if (!cells_of(d, r, box)) {
        if (!take_list(d, &r->every))
            return false;
    } else {
        if (!take_list(d, &r->large))
            return false;
        memcpy(d->cur, d->first, (size_t)r->ndim * sizeof(int64_t));
        do {
            uint32_t c = cell_find(d, r, false);
            if (c != NONE && !take_list(d, &d->cells[c].list))
                return false;
        } while (next_cell(d, r->ndim));
    }
    sort_u32(d->cand.v, d->cand.n);
    d->looked += d->cand.n;
    if (d->cand.n > d->most)
        d->most = d->cand.n;
    return true;
}

static int cmp_edge(const void *a, const void *b)
{
    uint32_t x = ((const pto_task_edge *)a)->src, y = ((const pto_task_edge *)b)->src;
    return (x > y) - (x < y);
}

static bool add_edge(pto_task_deps *d, uint32_t src, uint32_t dst, uint32_t hazard, uint32_t tensor)
{
    if (d->mark[src] == dst + 1)
        return true; /* found already: the first conflict names the edge */
    d->mark[src] = dst + 1;
    if (!grow(&d->edges, sizeof(*d->edges), &d->capedges, (uint64_t)d->nedges + 1))
        return false;
    d->edges[d->nedges++] = (pto_task_edge){src, dst, hazard, tensor};
    return true;
}

/* One task: its edges (declared, then each access's conflicts in history order), then its accesses noted. */
static bool add_task(pto_task_deps *d, const uint32_t *task, const uint32_t *deps, const uint32_t *acc,
                     const int64_t *bounds)
{
    uint32_t id = d->ntasks, nacc = task[0], ndeps = task[1];
    bool manual = task[2] & PTO_TASK_MANUAL;
    if (!grow(&d->mark, sizeof(*d->mark), &d->capmark, (uint64_t)id + 1))
        return false;
    d->mark[id] = 0;
    size_t start = d->nedges;
    for (uint32_t i = 0; i < ndeps; i++)
        if (!add_edge(d, deps[i], id, PTO_TASK_DECLARED, UINT32_MAX))
            return false;
    /* Copy the windows in first: the entries keep them. */
    uint64_t nb = 0;
    for (uint32_t i = 0; i < nacc; i++)
        nb += (acc[3 * i + 1] & PTO_TASK_WHOLE) ? 0 : 2ull * acc[3 * i + 2];
    if (!grow(&d->bounds, sizeof(*d->bounds), &d->capb, d->nb + nb))
        return false;
    uint64_t box0 = d->nb;
    if (nb)
        memcpy(d->bounds + d->nb, bounds, (size_t)nb * sizeof(int64_t));
    d->nb += nb;
    if (!manual) {
        uint64_t box = box0;
        for (uint32_t i = 0; i < nacc; i++) {
            uint32_t tensor = acc[3 * i], flags = acc[3 * i + 1], ndim = acc[3 * i + 2];
            struct pto_box mine = {d->bounds + box, d->bounds + box + ndim, ndim, (flags & PTO_TASK_WHOLE) != 0};
            box += mine.whole ? 0 : 2ull * ndim;
            if (!(flags & (PTO_TASK_READ | PTO_TASK_WRITE)) || tensor >= d->capt || !d->t[tensor].used)
                continue;
            struct td_tensor *t = &d->t[tensor];
            if (!region_near(d, (flags & PTO_TASK_WRITE) ? &t->all : &t->writes, mine))
                return false;
            for (uint32_t j = 0; j < d->cand.n; j++) {
                const struct td_entry *e = &d->e[d->cand.v[j]];
                uint32_t hz = pti_task_conflict(flags, mine, e->flags, entry_box(d, e));
                if (hz && e->task != id && !add_edge(d, e->task, id, hz, tensor))
                    return false;
            }
        }
    }
    uint64_t box = box0;
    for (uint32_t i = 0; i < nacc; i++) {
        uint32_t tensor = acc[3 * i], flags = acc[3 * i + 1], ndim = acc[3 * i + 2];
        uint64_t at = box;
        box += (flags & PTO_TASK_WHOLE) ? 0 : 2ull * ndim;
        if (!(flags & (PTO_TASK_READ | PTO_TASK_WRITE)))
            continue; /* waits for nothing and is waited for by nothing */
        if (tensor >= d->capt) {
            uint64_t old = d->capt;
            if (!grow(&d->t, sizeof(*d->t), &d->capt, (uint64_t)tensor + 1))
                return false;
            memset(d->t + old, 0, (size_t)(d->capt - old) * sizeof(*d->t));
        }
        struct td_tensor *t = &d->t[tensor];
        if (!t->used) {
            t->used = true;
            t->all.id = tensor * 2;
            t->writes.id = tensor * 2 + 1;
        }
        struct pto_box mine = {d->bounds + at, d->bounds + at + ndim, ndim, (flags & PTO_TASK_WHOLE) != 0};
        if ((flags & PTO_TASK_WRITE) && !manual) {
            /* This task now waits for every earlier access its write covers; a later task that conflicts
             * with one of those conflicts with this write too, so waiting for this task implies it. */
            if (!region_near(d, &t->all, mine))
                return false;
            for (uint32_t j = 0; j < d->cand.n; j++) {
                struct td_entry *e = &d->e[d->cand.v[j]];
                if (e->task != id && pti_box_covers(mine, entry_box(d, e))) {
                    e->alive = false;
                    t->all.live--;
                    if (e->flags & PTO_TASK_WRITE)
                        t->writes.live--;
                }
            }
        }
        if (d->ne == NONE - 1 || !grow(&d->e, sizeof(*d->e), &d->cape, (uint64_t)d->ne + 1))
            return false;
        uint32_t eid = d->ne++;
        d->e[eid] = (struct td_entry){id, flags, ndim, 0, at, true};
        if (!region_add(d, &t->all, eid) || ((flags & PTO_TASK_WRITE) && !region_add(d, &t->writes, eid)))
            return false;
    }
    size_t n = d->nedges - start;
    if (n > 1)
        qsort(d->edges + start, n, sizeof(*d->edges), cmp_edge);
    d->ntasks++;
    return true;
}

int pto_task_deps_create(pto_task_deps **out)
{
    pto_task_deps *d = calloc(1, sizeof(*d));
    if (!d || !grow(&d->bounds, sizeof(*d->bounds), &d->capb, 16)) {
        free(d);
        return pti_error(PTO_ENOMEM, "pto_task_deps_create: out of memory");
    }
    *out = d;
    return 0;
}

static void region_free(struct td_region *r)
{
    free(r->cell);
    free(r->large.v);
    free(r->every.v);
}

void pto_task_deps_destroy(pto_task_deps *d)
{
    if (!d)
        return;
    for (uint32_t i = 0; i < d->capt; i++) {
        region_free(&d->t[i].all);
        region_free(&d->t[i].writes);
    }
    for (uint32_t i = 0; i < d->ncells; i++)
        free(d->cells[i].list.v);
    free(d->t);
    free(d->cells);
    free(d->coords);
    free(d->table);
    free(d->e);
    free(d->bounds);
    free(d->mark);
    free(d->edges);
    free(d->cand.v);
    free(d);
}

int pto_task_deps_add(pto_task_deps *d, uint32_t ntasks, const uint32_t *tasks, const uint32_t *deps,
                      const uint32_t *acc, const int64_t *bounds)
{
    if (d->broken)
        return pti_error(PTO_ENOMEM, "pto_task_deps_add: an earlier call ran out of memory");
    if (ntasks > UINT32_MAX - 1 - d->ntasks)
        return pti_error(PTO_EINVAL, "pto_task_deps_add: too many tasks");
    /* Check the whole batch first: a refused one adds nothing. */
    const uint32_t *dp = deps, *ap = acc;
    for (uint32_t i = 0; i < ntasks; i++) {
        uint32_t id = d->ntasks + i;
        for (uint32_t j = 0; j < tasks[3 * i + 1]; j++, dp++)
            if (*dp >= id)
                return pti_error(PTO_EINVAL, "task %u declares a dependency on %u, not an earlier task", id, *dp);
        if (tasks[3 * i + 2] & ~(uint32_t)PTO_TASK_MANUAL)
            return pti_error(PTO_EINVAL, "task %u: unknown flags %#x", id, tasks[3 * i + 2]);
        for (uint32_t j = 0; j < tasks[3 * i]; j++, ap += 3) {
            uint32_t flags = ap[1], ndim = ap[2];
            if (ap[0] >= TD_MAX_TENSORS || (flags & ~(uint32_t)(PTO_TASK_READ | PTO_TASK_WRITE | PTO_TASK_WHOLE)) ||
                ndim > PTO_TASK_MAX_DIMS || ((flags & PTO_TASK_WHOLE) && ndim))
                return pti_error(PTO_EINVAL, "task %u: access %u (tensor %u, flags %#x, ndim %u) is not valid", id,
                                 j, ap[0], flags, ndim);
        }
    }
    dp = deps;
    ap = acc;
    const int64_t *bp = bounds;
    for (uint32_t i = 0; i < ntasks; i++) {
        const uint32_t *task = tasks + 3 * i;
        if (!add_task(d, task, dp, ap, bp)) {
            d->broken = true;
            return pti_error(PTO_ENOMEM, "pto_task_deps_add: out of memory");
        }
        dp += task[1];
        for (uint32_t j = 0; j < task[0]; j++, ap += 3)
            bp += (ap[1] & PTO_TASK_WHOLE) ? 0 : 2 * ap[2];
    }
    size_t pending = d->nedges - d->taken;
    return pending > INT_MAX ? INT_MAX : (int)pending;
}

int pto_task_deps_take(pto_task_deps *d, pto_task_edge *out, uint32_t cap)
{
    size_t n = d->nedges - d->taken;
    if (n > cap)
        n = cap;
    if (n > INT_MAX)
        n = INT_MAX;
    if (n)
        memcpy(out, d->edges + d->taken, n * sizeof(*out));
    d->taken += n;
    if (d->taken == d->nedges)
        d->taken = d->nedges = 0;
    return (int)n;
}

void pto_task_deps_counts(pto_task_deps *d, uint64_t *out)
{
    out[0] = d->ntasks;
    out[1] = d->looked;
    out[2] = d->most;
}
