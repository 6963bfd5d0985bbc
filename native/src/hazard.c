/*
 * hazard.c - automatic ordering of accesses to device memory across streams.
 *
 * The rule (pto_driver.h, "hazards"): a read waits for the allocation's
 * last write, a write for the last write and the reads since; accesses on
 * one stream are ordered already.  Positions are the caller's tokens.
 *
 * State.  Per allocation (struct hz_tensor, by base address): the last
 * write (stream, position, and the position of an exact point right after
 * it, if the caller has one) and the reads since, one per stream.  Per
 * stream (struct hz_stream, by id): its clock, for every other stream the
 * largest position of a failure-carrying point it waits for, directly or
 * through the points those waited for.  A clock is an array sorted by
 * stream id, shared copy-on-write by the marks taken of it (a record costs
 * a reference, not a copy), and kept to the live streams and a slack; one
 * larger than HZ_MERGE_MAX passes on only its stream's own entry.
 *
 * Deciding one call's edges (decide) costs the accesses' records: each
 * earlier access is looked up in the stream's clock (implied: skipped; an
 * allocation's reads are sorted by stream id, as clocks are, so a write
 * after many reads is one merge-join of the two),
 * edges to one stream are combined into one, and an edge another one of the
 * call implies (a stream that waited for that access itself) is dropped, by
 * one pass over the clocks of the edges' streams (prune).  A write after M
 * reads on M streams costs O(M): each clock scanned is at most HZ_MERGE_MAX.
 *
 * Reads of closed streams fold into one read of the fold point, a stream
 * that waits (ordering only) for every closed stream's work: a write after
 * them waits there once (over-waiting, never under-waiting), and a
 * long-lived allocation read by many short-lived streams keeps a bounded
 * number of records.
 *
 * A table of points (pto_hazards_create_points, a graph capture's) queues
 * nothing: pto_hazards_decide returns the edges for the caller to record,
 * each waiting for the point right after the earlier access itself, not for
 * its stream's tail.  So each record keeps a reference to its stream's clock
 * as it was at the access (clocks are copy-on-write: a reference, not a
 * copy), and the edge's stream's clock in prune is that one.
 *
 * Not locked: one caller at a time (the runtime calls it with its lock
 * held).  Nothing here runs on a driver thread.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define HZ_FOLD_FROM 4    /* reads an allocation keeps before it folds the closed streams' ones */
#define HZ_CLOCK_SLACK 16 /* entries of gone streams a clock may hold beyond two per live stream */
#define HZ_BLOOM 4096     /* bits of prune's filter of the plan's streams */
/*
 * A clock of more entries than this is not merged whole, nor scanned to drop
 * edges: a stream that waits for it takes its direct entry only (knowing less
 * only lets an edge be queued again).  So a write after M reads on M streams
 * costs O(M), however many streams each reader's clock has heard of.
 */
#define HZ_MERGE_MAX 32
/*
 * Reads a write's decision looks ahead: it fetches that read's stream
 * record while it decides this one (the records of M streams are M cache
 * misses otherwise, most of a wide write's cost).
 */
#define HZ_AHEAD 8

struct hz_ent {
    uint64_t sid, pos;
};

struct hz_clock {
    uint32_t refs, n, cap;
    struct hz_ent e[];
};

#define HZ_HEAD 2 /* clock entries a stream keeps beside it (prune reads them there) */

struct hz_stream {
    /*
     * One cache line (the struct is aligned to two): what deciding reads of an
     * earlier access's stream; the next line, what queueing an edge from it
     * reads (a write after M reads touches each reader's stream once).
     */
    uint32_t sid;
    uint32_t plan_idx;
    uint64_t plan_gen;                 /* decide: in the plan of call plan_gen, at plan_idx */
    struct hz_clock *clock;            /* NULL: waits for nothing */
    uint32_t cn;                       /* clock's entries */
    uint32_t pad;
    struct hz_ent head[HZ_HEAD];       /* cn <= HZ_HEAD: a copy of them (clock_sync) */
    bool closed, held, gone;
    pto_stream *ptr;        /* NULL once gone */
    pto_event *ev;          /* names this stream's edges in traces (made at the first) */
    uint64_t ev_id;         /* ev's id (ev is not read when an edge is queued) */
    uint64_t folded;        /* closed: the position of the fold point's wait for it */
    uint64_t named;         /* records naming it, and its registration */
};
_Static_assert(offsetof(struct hz_stream, closed) <= 64, "what deciding reads of a stream fits in one cache line");
_Static_assert(offsetof(struct hz_stream, ev_id) + 8 <= 128, "what queueing an edge reads of it fits in the next");

struct hz_read {
    struct hz_stream *s;
    uint64_t pos;
    struct hz_clock *clock; /* a table of points: the reader's clock at the read (a reference) */
    uint32_t sid;           /* s->sid, here: a decision reads the reads in order, not their streams */
};

struct hz_tensor {
    pto_devptr addr;
    struct hz_stream *w; /* the last write's stream, or NULL */
    uint64_t wpos, wexact;
    struct hz_clock *wclock; /* a table of points: the writer's clock at the write (a reference) */
    uint32_t nr, cap;
    struct hz_read *r; /* sorted by stream id (a write after them is a merge-join with the clock) */
};

/* Open addressing, linear probing, backward-shift deletion; key 0 is free. */
struct hz_map {
    size_t cap, n;
    uint64_t *k;
    void **v;
};

struct pto_hz_mark {
    uint32_t sid;
    uint64_t pos;
    struct hz_clock *clock;
};

struct hz_need {
    struct hz_stream *s;
    const struct hz_clock *clock; /* what waiting for the edge's point orders after (prune) */
    uint64_t pos, exact;
    uint32_t index;
    bool dropped;
};

struct hz_plan {
    struct hz_need *w;
    uint32_t n, cap;
    uint64_t skipped;
    struct hz_need small[8];
};

struct pto_hazards {
    pto_device *dev;
    struct hz_map streams, tensors;
    uint32_t fold;
    bool has_fold;
    bool points; /* edges wait for the accesses' own points (pto_hazards_create_points) */
    uint64_t gen;
    uint64_t inferred, skipped;
    size_t live;
    uint64_t serial; /* this table's, never 0 nor reused: a stream's hz_serial names it */
};

static _Atomic uint64_t hz_serials;

/* ---- the maps ---------------------------------------------------------------- */

static size_t hz_hash(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return (size_t)k;
}

/* Keys are stored plus one (stream id 0 and every address stay apart from the free mark). */
static void *map_get(const struct hz_map *m, uint64_t key)
{
    if (!m->cap)
        return NULL;
    uint64_t k = key + 1;
    for (size_t i = hz_hash(k) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        if (m->k[i] == k)
            return m->v[i];
        if (!m->k[i])
            return NULL;
    }
}

static int map_grow(struct hz_map *m)
{
    size_t cap = m->cap ? 2 * m->cap : 16;
    uint64_t *k = calloc(cap, sizeof(*k));
    void **v = calloc(cap, sizeof(*v));
    if (!k || !v) {
        free(k);
        free(v);
        return -1;
    }
    for (size_t j = 0; j < m->cap; j++) {
        if (!m->k[j])
            continue;
        size_t i = hz_hash(m->k[j]) & (cap - 1);
        while (k[i])
            i = (i + 1) & (cap - 1);
        k[i] = m->k[j];
        v[i] = m->v[j];
    }
    free(m->k);
    free(m->v);
    m->k = k;
    m->v = v;
    m->cap = cap;
    return 0;
}

/* Insert a key not in the map: 0, or -1 out of memory. */
static int map_put(struct hz_map *m, uint64_t key, void *val)
{
    if ((m->n + 1) * 4 > m->cap * 3 && map_grow(m))
        return -1;
    uint64_t k = key + 1;
    size_t i = hz_hash(k) & (m->cap - 1);
    while (m->k[i])
        i = (i + 1) & (m->cap - 1);
    m->k[i] = k;
    m->v[i] = val;
    m->n++;
    return 0;
}

static void map_del(struct hz_map *m, uint64_t key)
{
    if (!m->cap)
        return;
    uint64_t k = key + 1;
    size_t mask = m->cap - 1, i = hz_hash(k) & mask;
    while (m->k[i] != k) {
        if (!m->k[i])
            return;
        i = (i + 1) & mask;
    }
    m->n--;
    for (size_t j = (i + 1) & mask; m->k[j]; j = (j + 1) & mask) {
        size_t home = hz_hash(m->k[j]) & mask;
        /* Move j's entry into the hole at i if its probe run passes i. */
        if ((j > i && (home <= i || home > j)) || (j < i && home <= i && home > j)) {
            m->k[i] = m->k[j];
            m->v[i] = m->v[j];
            i = j;
        }
    }
    m->k[i] = 0;
    m->v[i] = NULL;
}

/* ---- clocks -------------------------------------------------------------------- */

static void clock_unref(struct hz_clock *c)
{
    if (c && --c->refs == 0)
        free(c);
}

/* Keep s's copy of a small clock's entries (s->head) in step with s->clock. */
static void clock_sync(struct hz_stream *s)
{
    const struct hz_clock *c = s->clock;
    s->cn = c ? c->n : 0;
    if (s->cn <= HZ_HEAD && s->cn)
        memcpy(s->head, c->e, s->cn * sizeof(c->e[0]));
}

/* A reference to stream clock c for a record of a table of points (NULL otherwise). */
static struct hz_clock *clock_ref(const pto_hazards *hz, struct hz_clock *c)
{
    if (!hz->points || !c)
        return NULL;
    c->refs++;
    return c;
}

/* The entry of stream sid in c, or NULL. */
static struct hz_ent *clock_find(const struct hz_clock *c, uint64_t sid)
{
    if (!c)
        return NULL;
    uint32_t lo = 0, hi = c->n;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (c->e[mid].sid < sid)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < c->n && c->e[lo].sid == sid ? (struct hz_ent *)&c->e[lo] : NULL;
}

/* c's position of stream sid (0: none). */
static uint64_t clock_get(const struct hz_clock *c, uint64_t sid)
{
    const struct hz_ent *e = clock_find(c, sid);
    return e ? e->pos : 0;
}

static struct hz_clock *clock_new(uint32_t cap)
{
    struct hz_clock *c = malloc(sizeof(*c) + (size_t)cap * sizeof(c->e[0]));
    if (c) {
        c->refs = 1;
        c->n = 0;
        c->cap = cap;
    }
    return c;
}

/* Whether stream sid is live (registered, not gone). */
static bool live(pto_hazards *hz, uint64_t sid)
{
    struct hz_stream *st = map_get(&hz->streams, sid);
    return st && !st->gone;
}

/*
 * s waits for a point of stream src at position r, whose recording stream
 * had waited for snap: s's clock takes the larger of each entry (never its
 * own), then src's r.  Entries of gone streams go once the clock grows past
 * two per live stream and a slack (dropping one only lets an edge be
 * queued again).  0, or -1 out of memory (the clock is left as it was).
 */
static int merge(pto_hazards *hz, struct hz_stream *s, const struct hz_clock *snap, uint64_t src, uint64_t r)
{
    struct hz_clock *c = s->clock;
    uint32_t sn = snap && snap->n <= HZ_MERGE_MAX ? snap->n : 0;
    /* In place when the clock is s's alone and has every entry the merge raises. */
    if (c && c->refs == 1) {
        bool fits = src == s->sid || clock_find(c, src);
        for (uint32_t i = 0; fits && i < sn; i++)
            if (snap->e[i].sid != s->sid && !clock_find(c, snap->e[i].sid))
                fits = false;
        if (fits) { /* O(sn log n): a large clock is not walked */
            for (uint32_t i = 0; i < sn; i++) {
                struct hz_ent *e = snap->e[i].sid != s->sid ? clock_find(c, snap->e[i].sid) : NULL;
                if (e && snap->e[i].pos > e->pos)
                    e->pos = snap->e[i].pos;
            }
            struct hz_ent *e = src != s->sid ? clock_find(c, src) : NULL;
            if (e && r > e->pos)
                e->pos = r;
            clock_sync(s);
            return 0;
        }
    }
    uint32_t cn = c ? c->n : 0;
    struct hz_clock *out = clock_new(cn + sn + 1);
    if (!out)
        return -1;
    uint32_t i = 0, j = 0;
    bool src_done = src == s->sid;
    while (i < cn || j < sn || !src_done) {
        uint64_t a = i < cn ? c->e[i].sid : UINT64_MAX, b = j < sn ? snap->e[j].sid : UINT64_MAX;
        uint64_t sid = a < b ? a : b, pos = 0;
        if (!src_done && src < sid) {
            sid = src;
        } else {
            if (a == sid)
                pos = c->e[i++].pos;
            if (b == sid) {
                if (sid != s->sid && snap->e[j].pos > pos)
                    pos = snap->e[j].pos;
                j++;
            }
        }
        if (sid == src) {
            if (r > pos)
                pos = r;
            src_done = true;
        }
        if (pos && sid != s->sid)
            out->e[out->n++] = (struct hz_ent){sid, pos};
    }
    if (out->n > cn && out->n > 2 * hz->live + HZ_CLOCK_SLACK) { /* grown past the bound */
        uint32_t k = 0;
        for (uint32_t m = 0; m < out->n; m++)
            if (live(hz, out->e[m].sid))
                out->e[k++] = out->e[m];
        out->n = k;
    }
    clock_unref(c);
    s->clock = out;
    clock_sync(s);
    return 0;
}

/* ---- streams and records --------------------------------------------------------- */

static void stream_unname(pto_hazards *hz, struct hz_stream *st)
{
    if (--st->named)
        return;
    map_del(&hz->streams, st->sid);
    if (st->ev)
        pto_event_destroy(st->ev);
    clock_unref(st->clock);
    free(st);
}

static struct hz_stream *stream_of(pto_hazards *hz, uint32_t sid)
{
    return map_get(&hz->streams, sid);
}

static void tensor_free(pto_hazards *hz, struct hz_tensor *t)
{
    if (t->w)
        stream_unname(hz, t->w);
    clock_unref(t->wclock);
    for (uint32_t i = 0; i < t->nr; i++) {
        stream_unname(hz, t->r[i].s);
        clock_unref(t->r[i].clock);
    }
    free(t->r);
    free(t);
}

static struct hz_tensor *tensor_get(pto_hazards *hz, pto_devptr addr, bool make)
{
    struct hz_tensor *t = map_get(&hz->tensors, addr);
    if (t || !make)
        return t;
    t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->addr = addr;
    if (map_put(&hz->tensors, addr, t)) {
        free(t);
        return NULL;
    }
    return t;
}

static void set_writer(pto_hazards *hz, struct hz_tensor *t, struct hz_stream *s, uint64_t pos, uint64_t exact)
{
    if (t->w == s && !t->nr && !t->wclock && !hz->points) { /* a stream writing what it wrote last */
        t->wpos = pos;
        t->wexact = exact;
        return;
    }
    s->named++;
    for (uint32_t i = 0; i < t->nr; i++) {
        stream_unname(hz, t->r[i].s);
        clock_unref(t->r[i].clock);
    }
    t->nr = 0;
    if (t->w)
        stream_unname(hz, t->w);
    clock_unref(t->wclock);
    t->w = s;
    t->wpos = pos;
    t->wexact = exact;
    t->wclock = clock_ref(hz, s->clock);
}

/* Where stream sid's read is in t's reads, or would go (they are sorted by stream id). */
static uint32_t read_find(const struct hz_tensor *t, uint32_t sid)
{
    uint32_t lo = 0, hi = t->nr;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (t->r[mid].sid < sid)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Fold the reads of closed streams into one read of the fold point. */
static void fold_reads(pto_hazards *hz, struct hz_tensor *t)
{
    struct hz_stream *fold = hz->has_fold ? stream_of(hz, hz->fold) : NULL;
    if (!fold)
        return;
    uint64_t pos = 0;
    uint32_t k = 0;
    for (uint32_t i = 0; i < t->nr; i++) {
        struct hz_stream *s = t->r[i].s;
        if (s->closed && s->folded && s != fold) {
            if (s->folded > pos)
                pos = s->folded;
            stream_unname(hz, s);
            clock_unref(t->r[i].clock);
        } else {
            t->r[k++] = t->r[i];
        }
    }
    t->nr = k;
    if (!pos)
        return;
    uint32_t at = read_find(t, fold->sid);
    if (at < t->nr && t->r[at].s == fold) {
        if (t->r[at].pos < pos)
            t->r[at].pos = pos;
        return;
    }
    fold->named++;
    memmove(&t->r[at + 1], &t->r[at], (t->nr - at) * sizeof(t->r[0])); /* room: one read was folded */
    t->r[at] = (struct hz_read){fold, pos, clock_ref(hz, fold->clock), fold->sid};
    t->nr++;
}

static int add_read(pto_hazards *hz, struct hz_tensor *t, struct hz_stream *s, uint64_t pos)
{
    uint32_t at = read_find(t, s->sid);
    if (at < t->nr && t->r[at].s == s) {
        t->r[at].pos = pos;
        clock_unref(t->r[at].clock);
        t->r[at].clock = clock_ref(hz, s->clock);
        return 0;
    }
    if (t->nr >= HZ_FOLD_FROM) {
        fold_reads(hz, t);
        at = read_find(t, s->sid);
    }
    if (t->nr == t->cap) {
        uint32_t cap = t->cap ? 2 * t->cap : 4;
        struct hz_read *r = realloc(t->r, cap * sizeof(*r));
        if (!r)
            return -1;
        t->r = r;
        t->cap = cap;
    }
    s->named++;
    memmove(&t->r[at + 1], &t->r[at], (t->nr - at) * sizeof(t->r[0]));
    t->r[at] = (struct hz_read){s, pos, clock_ref(hz, s->clock), s->sid};
    t->nr++;
    return 0;
}

/* ---- deciding --------------------------------------------------------------------- */

static void plan_init(struct hz_plan *pl)
{
    pl->w = pl->small;
    pl->n = 0;
    pl->cap = sizeof(pl->small) / sizeof(pl->small[0]);
    pl->skipped = 0;
}

static void plan_fini(struct hz_plan *pl)
{
    if (pl->w != pl->small)
        free(pl->w);
}

/* One wait for two accesses on one stream: the latest position, and an exact point after both if any. */
static void combine(struct hz_need *need, uint64_t pos, uint64_t exact, uint32_t index,
                    const struct hz_clock *clock)
{
    uint64_t latest = need->pos > pos ? need->pos : pos;
    if (pos > need->pos)
        need->clock = clock; /* a stream's clock only grows: the latest access's holds the others' */
    uint64_t best = 0;
    uint32_t best_index = 0;
    if (need->exact && need->exact > latest) {
        best = need->exact;
        best_index = need->index;
    }
    if (exact && exact > latest && (!best || exact < best)) {
        best = exact;
        best_index = index;
    }
    need->pos = latest;
    need->exact = best;
    need->index = best_index;
}

/*
 * The earlier access (src, pos) of access index: implied (skipped), combined,
 * or a new edge.  clock: src's clock at that access (a table of points), else
 * NULL (src's tail: its clock now); seen: me's clock's entry of src.  0, or
 * -1 out of memory.
 */
static int earlier(pto_hazards *hz, struct hz_plan *pl, struct hz_stream *src, uint64_t pos, uint64_t exact,
                   uint32_t index, const struct hz_clock *clock, uint64_t seen)
{
    if (!hz->points)
        clock = src->clock;
    if (seen > pos) {
        pl->skipped++; /* implied by a wait queued on the stream already */
        return 0;
    }
    if (src->plan_gen == hz->gen) {
        pl->skipped++; /* one wait per stream and call */
        combine(&pl->w[src->plan_idx], pos, exact, index, clock);
        return 0;
    }
    if (pl->n == pl->cap) {
        uint32_t cap = 2 * pl->cap;
        struct hz_need *w = malloc(cap * sizeof(*w));
        if (!w)
            return -1;
        memcpy(w, pl->w, pl->n * sizeof(*w));
        if (pl->w != pl->small)
            free(pl->w);
        pl->w = w;
        pl->cap = cap;
    }
    src->plan_gen = hz->gen;
    src->plan_idx = pl->n;
    pl->w[pl->n++] = (struct hz_need){src, clock, pos, exact, index, false};
    return 0;
}

/*
 * Drop the edges another edge of the call implies: a stream that waited for
 * that access itself.  In the plan's order, each against the edges still
 * kept (so of two streams that waited for each other, one stays).  One pass
 * over the clocks of the plan's streams finds the candidates.
 */
static int prune(pto_hazards *hz, struct hz_plan *pl)
{
    if (pl->n < 2)
        return 0;
    /* implies[a]: the edges b whose stream waited for a's access past its position. */
    size_t npairs = 0, cap = 0;
    struct {
        uint32_t a, b;
    } *pairs = NULL;
    /* The plan's streams as bits of their ids: most clock entries name none of them, found without a lookup. */
    uint64_t bloom[HZ_BLOOM / 64] = {0};
    for (uint32_t a = 0; a < pl->n; a++)
        bloom[(pl->w[a].s->sid % HZ_BLOOM) / 64] |= 1ull << (pl->w[a].s->sid % 64);
    for (uint32_t b = 0; b < pl->n; b++) {
        const struct hz_stream *bs = pl->w[b].s;
        const struct hz_ent *e;
        uint32_t cn;
        if (!hz->points && bs->cn <= HZ_HEAD) { /* its tail's clock, small: beside the stream */
            e = bs->head;
            cn = bs->cn;
        } else {
            const struct hz_clock *c = pl->w[b].clock;
            if (c && c->n > HZ_MERGE_MAX)
                continue; /* (see HZ_MERGE_MAX) */
            e = c ? c->e : NULL;
            cn = c ? c->n : 0;
        }
        for (uint32_t i = 0; i < cn; i++) {
            uint64_t sid = e[i].sid;
            if (!(bloom[(sid % HZ_BLOOM) / 64] & 1ull << (sid % 64)))
                continue;
            struct hz_stream *as = stream_of(hz, (uint32_t)sid);
            if (!as || as->plan_gen != hz->gen || as->plan_idx == b || e[i].pos <= pl->w[as->plan_idx].pos)
                continue;
            if (npairs == cap) {
                cap = cap ? 2 * cap : 16;
                void *p = realloc(pairs, cap * sizeof(*pairs));
                if (!p) {
                    free(pairs);
                    return -1;
                }
                pairs = p;
            }
            pairs[npairs].a = as->plan_idx;
            pairs[npairs].b = b;
            npairs++;
        }
    }
    if (!npairs)
        return 0;
    /* Sort by a (counting sort: a < n), then decide a in order. */
    uint32_t *start = calloc(pl->n + 1, sizeof(*start));
    uint32_t *by = malloc(npairs * sizeof(*by));
    if (!start || !by) {
        free(start);
        free(by);
        free(pairs);
        return -1;
    }
    for (size_t p = 0; p < npairs; p++)
        start[pairs[p].a + 1]++;
    for (uint32_t a = 0; a < pl->n; a++)
        start[a + 1] += start[a];
    uint32_t *fill = calloc(pl->n, sizeof(*fill));
    if (!fill) {
        free(start);
        free(by);
        free(pairs);
        return -1;
    }
    for (size_t p = 0; p < npairs; p++)
        by[start[pairs[p].a] + fill[pairs[p].a]++] = pairs[p].b;
    for (uint32_t a = 0; a < pl->n; a++) {
        for (uint32_t p = start[a]; p < start[a + 1]; p++) {
            if (!pl->w[by[p]].dropped) {
                pl->w[a].dropped = true;
                pl->skipped++;
                break;
            }
        }
    }
    uint32_t k = 0;
    for (uint32_t a = 0; a < pl->n; a++)
        if (!pl->w[a].dropped)
            pl->w[k++] = pl->w[a];
    pl->n = k;
    free(fill);
    free(start);
    free(by);
    free(pairs);
    return 0;
}

/*
 * The edges of one call on `me`: 0 (plan filled), or -1 out of memory.
 * tens (or NULL): each access's record, NULL where it has none or is not
 * looked at, for note_found, so the call looks each address up once.
 */
static int decide(pto_hazards *hz, struct hz_stream *me, const pto_hz_access *acc, uint32_t n, struct hz_plan *pl,
                  struct hz_tensor **tens)
{
    hz->gen++;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t f = acc[i].flags;
        if (tens)
            tens[i] = NULL;
        if (f & PTO_HZ_MANUAL || !(f & (PTO_HZ_READ | PTO_HZ_WRITE)))
            continue;
        struct hz_tensor *t = map_get(&hz->tensors, acc[i].addr);
        if (!t)
            continue;
        if (tens)
            tens[i] = t;
        /* RAW and WAW: any access after a write on another stream. */
        if (t->w && t->w != me &&
            earlier(hz, pl, t->w, t->wpos, t->wexact, i, t->wclock, clock_get(me->clock, t->w->sid)))
            return -1;
        if (!(f & PTO_HZ_WRITE))
            continue;
        /*
         * WAR: the reads, sorted by stream id, against me's clock, sorted too:
         * a merge-join, O(reads + clock), where the clock is not much larger
         * than the reads (a binary search per read mispredicts a branch per
         * step); else a search per read.
         */
        const struct hz_clock *c = me->clock;
        uint32_t cn = c ? c->n : 0, j = 0;
        bool join = t->nr >= 8 && cn <= 8u * t->nr;
        for (uint32_t r = 0; r < t->nr; r++) {
            const struct hz_read *rd = &t->r[r];
            if (r + HZ_AHEAD < t->nr) { /* a later read's stream, both lines: deciding and queueing read them */
                const char *ahead = (const char *)t->r[r + HZ_AHEAD].s;
                __builtin_prefetch(ahead);
                __builtin_prefetch(ahead + 64);
            }
            if (rd->s == me)
                continue;
            uint64_t seen;
            if (join) {
                while (j < cn && c->e[j].sid < rd->sid)
                    j++;
                seen = j < cn && c->e[j].sid == rd->sid ? c->e[j].pos : 0;
            } else {
                seen = clock_get(c, rd->sid);
            }
            if (earlier(hz, pl, rd->s, rd->pos, 0, i, rd->clock, seen))
                return -1;
        }
    }
    return prune(hz, pl);
}

/* Note the accesses; tens (or NULL): their records as decide found them (NULL: look up, or make). */
static int note_found(pto_hazards *hz, struct hz_stream *me, const pto_hz_access *acc, uint32_t n, uint64_t pos,
                      struct hz_tensor *const *tens)
{
    for (uint32_t i = 0; i < n; i++) {
        uint32_t f = acc[i].flags;
        if (!(f & (PTO_HZ_READ | PTO_HZ_WRITE)))
            continue;
        struct hz_tensor *t = tens && tens[i] ? tens[i] : tensor_get(hz, acc[i].addr, true);
        if (!t)
            return pti_error(PTO_ENOMEM, "pto_hazards_note: out of host memory");
        if (f & PTO_HZ_WRITE)
            set_writer(hz, t, me, pos, 0);
        else if (add_read(hz, t, me, pos))
            return pti_error(PTO_ENOMEM, "pto_hazards_note: out of host memory");
    }
    return 0;
}

static int note(pto_hazards *hz, struct hz_stream *me, const pto_hz_access *acc, uint32_t n, uint64_t pos)
{
    return note_found(hz, me, acc, n, pos, NULL);
}

/* An edge from src's tail queued at position tok: me's clock takes src's, and src's tok. */
static int edge_merge(pto_hazards *hz, struct hz_stream *me, struct hz_stream *src, uint64_t tok)
{
    hz->inferred++;
    return merge(hz, me, src->clock, src->sid, tok);
}

static int edge_event(pto_hazards *hz, struct hz_stream *src)
{
    if (src->ev)
        return 0;
    int rc = pto_event_create(hz->dev, &src->ev);
    if (!rc)
        src->ev_id = src->ev->id;
    return rc;
}

/* The end of the sorted run of e[0..n) that starts at lo. */
static uint32_t ents_run(const struct hz_ent *e, uint32_t lo, uint32_t n)
{
    uint32_t i = lo + 1;
    while (i < n && e[i - 1].sid <= e[i].sid)
        i++;
    return i;
}

/*
 * Sort e[0..n) by stream id (a bottom-up merge sort through tmp; already
 * sorted: one pass; two sorted runs, such as a write's readers sorted by
 * stream id followed by what their clocks hold, in one merge).
 */
static void ents_sort(struct hz_ent *e, struct hz_ent *tmp, uint32_t n)
{
    if (n < 2)
        return;
    uint32_t i = ents_run(e, 0, n);
    if (i >= n)
        return;
    if (ents_run(e, i, n) >= n) {
        uint32_t x = 0, y = i, k = 0;
        while (x < i && y < n)
            tmp[k++] = e[y].sid < e[x].sid ? e[y++] : e[x++];
        while (x < i)
            tmp[k++] = e[x++];
        while (y < n)
            tmp[k++] = e[y++];
        memcpy(e, tmp, (size_t)n * sizeof(*e));
        return;
    }
    struct hz_ent *a = e, *b = tmp;
    for (uint32_t w = 1; w < n; w *= 2) {
        for (uint32_t lo = 0; lo < n; lo += 2 * w) {
            uint32_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            uint32_t x = lo, y = mid, k = lo;
            while (x < mid && y < hi)
                b[k++] = a[y].sid < a[x].sid ? a[y++] : a[x++];
            while (x < mid)
                b[k++] = a[x++];
            while (y < hi)
                b[k++] = a[y++];
        }
        struct hz_ent *t = a;
        a = b;
        b = t;
    }
    if (a != e)
        memcpy(e, a, (size_t)n * sizeof(*e));
}

/*
 * Edges from the tails of srcs[0..n) queued at position tok, all at once:
 * me's clock takes each one's clock (unless larger than HZ_MERGE_MAX) and
 * its tok, in one pass over me's clock, as n merges (merge) would, gone
 * streams' entries dropped once at the end if it grew past the bound.
 * O(K log K + clock), K the entries taken: n merges would copy me's clock
 * per new stream.  0, or -1 out of memory (the clock is left as it was).
 */
static int merge_many(pto_hazards *hz, struct hz_stream *me, struct hz_stream *const *srcs, uint32_t n, uint64_t tok)
{
    size_t k = 0;
    for (uint32_t i = 0; i < n; i++)
        k += 1 + (srcs[i]->cn <= HZ_MERGE_MAX ? srcs[i]->cn : 0); /* (cn: its clock's entries, clock_sync) */
    struct hz_ent *e = malloc(2 * k * sizeof(*e));
    if (!e)
        return -1;
    /* The streams' own entries first (in plan order: a write's readers come sorted), then their clocks'. */
    uint32_t m = 0;
    for (uint32_t i = 0; i < n; i++)
        if (srcs[i] != me)
            e[m++] = (struct hz_ent){srcs[i]->sid, tok};
    for (uint32_t i = 0; i < n; i++) {
        /* A small clock's entries beside its stream (the line deciding read), else the clock itself. */
        uint32_t cn = srcs[i]->cn;
        const struct hz_ent *ce = cn <= HZ_HEAD ? srcs[i]->head : srcs[i]->clock->e;
        for (uint32_t j = 0; cn <= HZ_MERGE_MAX && j < cn; j++)
            if (ce[j].sid != me->sid)
                e[m++] = ce[j];
    }
    ents_sort(e, e + k, m);
    struct hz_clock *c = me->clock;
    uint32_t cn = c ? c->n : 0;
    struct hz_clock *out = clock_new(cn + m);
    if (!out) {
        free(e);
        return -1;
    }
    uint32_t i = 0, j = 0;
    while (i < cn || j < m) {
        uint64_t a = i < cn ? c->e[i].sid : UINT64_MAX, b = j < m ? e[j].sid : UINT64_MAX;
        uint64_t sid = a < b ? a : b, pos = 0;
        if (a == sid)
            pos = c->e[i++].pos;
        for (; j < m && e[j].sid == sid; j++)
            if (e[j].pos > pos)
                pos = e[j].pos;
        if (pos)
            out->e[out->n++] = (struct hz_ent){sid, pos};
    }
    free(e);
    if (out->n > cn && out->n > 2 * hz->live + HZ_CLOCK_SLACK) { /* grown past the bound */
        uint32_t q = 0;
        for (uint32_t r = 0; r < out->n; r++)
            if (live(hz, out->e[r].sid))
                out->e[q++] = out->e[r];
        out->n = q;
    }
    clock_unref(c);
    me->clock = out;
    clock_sync(me);
    hz->inferred += n;
    return 0;
}

/* ---- the ABI ------------------------------------------------------------------------ */

int pto_hazards_create(pto_device *dev, pto_hazards **out)
{
    if (!dev || !out)
        return pti_error(PTO_EINVAL, "pto_hazards_create: NULL argument");
    pto_hazards *hz = calloc(1, sizeof(*hz));
    if (!hz)
        return pti_error(PTO_ENOMEM, "pto_hazards_create: out of host memory");
    hz->dev = dev;
    hz->serial = atomic_fetch_add_explicit(&hz_serials, 1, memory_order_relaxed) + 1;
    *out = hz;
    return 0;
}

int pto_hazards_create_points(pto_device *dev, pto_hazards **out)
{
    int rc = pto_hazards_create(dev, out);
    if (rc == 0)
        (*out)->points = true;
    return rc;
}

void pto_hazards_destroy(pto_hazards *hz)
{
    if (!hz)
        return;
    if (hz->dev->hz == hz)
        hz->dev->hz = NULL;
    for (size_t i = 0; i < hz->tensors.cap; i++) {
        struct hz_tensor *t = hz->tensors.v[i];
        if (!t)
            continue;
        clock_unref(t->wclock);
        for (uint32_t r = 0; r < t->nr; r++)
            clock_unref(t->r[r].clock);
        free(t->r);
        free(t);
    }
    for (size_t i = 0; i < hz->streams.cap; i++) {
        struct hz_stream *st = hz->streams.v[i];
        if (!st)
            continue;
        if (st->ev)
            pto_event_destroy(st->ev);
        clock_unref(st->clock);
        free(st);
    }
    free(hz->tensors.k);
    free(hz->tensors.v);
    free(hz->streams.k);
    free(hz->streams.v);
    free(hz);
}

int pto_hazards_stream(pto_hazards *hz, pto_stream *s)
{
    if (!hz || !s || s->dev != hz->dev)
        return pti_error(PTO_EINVAL, "pto_hazards_stream: a stream of the table's device expected");
    struct hz_stream *st = stream_of(hz, s->id);
    if (st) { /* an id seen before: only while its old entry is named by records; start afresh */
        if (!st->gone)
            return pti_error(PTO_EINVAL, "pto_hazards_stream: stream %u registered twice", s->id);
        return pti_error(PTO_EINVAL, "pto_hazards_stream: stream id %u is still named", s->id);
    }
    size_t size = (sizeof(*st) + 127) / 128 * 128;
    st = aligned_alloc(128, size); /* its first line is what deciding reads, the second what an edge reads */
    if (st)
        memset(st, 0, size);
    if (!st || map_put(&hz->streams, s->id, st)) {
        free(st);
        return pti_error(PTO_ENOMEM, "pto_hazards_stream: out of host memory");
    }
    st->sid = s->id;
    st->ptr = s;
    st->named = 1;
    hz->live++;
    return 0;
}

void pto_hazards_stream_closed(pto_hazards *hz, uint32_t sid, uint64_t folded)
{
    struct hz_stream *st = stream_of(hz, sid);
    if (st) {
        st->closed = true;
        st->folded = folded;
    }
}

void pto_hazards_stream_gone(pto_hazards *hz, uint32_t sid)
{
    struct hz_stream *st = stream_of(hz, sid);
    if (!st || st->gone)
        return;
    st->gone = true;
    st->closed = true;
    st->ptr = NULL;
    hz->live--;
    stream_unname(hz, st); /* its registration */
}

int pto_hazards_known(pto_hazards *hz, uint32_t sid)
{
    return stream_of(hz, sid) != NULL;
}

void pto_hazards_set_fold(pto_hazards *hz, uint32_t sid)
{
    hz->fold = sid;
    hz->has_fold = true;
}

void pto_hazards_set_held(pto_hazards *hz, uint32_t sid, int held)
{
    struct hz_stream *st = stream_of(hz, sid);
    if (st)
        st->held = held != 0;
}

int pto_hazards_fenceable(pto_hazards *hz, uint32_t sid, uint32_t src)
{
    struct hz_stream *me = hz ? stream_of(hz, sid) : NULL, *from = hz ? stream_of(hz, src) : NULL;
    return me && from && me->ptr && from->ptr && !from->closed && !from->held && !me->held;
}

int pto_hazards_order(pto_hazards *hz, uint32_t sid, const pto_hz_access *acc, uint32_t n, pto_hz_edge *edges,
                      uint32_t max)
{
    struct hz_stream *me = hz ? stream_of(hz, sid) : NULL;
    if (!me || (n && !acc) || (max && !edges))
        return pti_error(PTO_EINVAL, "pto_hazards_order: unknown stream %u or NULL arrays", sid);
    struct hz_plan pl;
    plan_init(&pl);
    if (decide(hz, me, acc, n, &pl, NULL)) {
        plan_fini(&pl);
        return pti_error(PTO_ENOMEM, "pto_hazards_order: out of host memory");
    }
    for (uint32_t i = 0; i < pl.n && i < max; i++)
        edges[i] = (pto_hz_edge){pl.w[i].s->sid, pl.w[i].index, pl.w[i].pos, pl.w[i].exact};
    int need = (int)pl.n;
    if (pl.n <= max)
        hz->skipped += pl.skipped; /* counted once: when the caller got them all */
    plan_fini(&pl);
    return need;
}

/*
 * Decide only: the edges are the caller's to record (a graph capture's
 * waits), each for the point right after the latest earlier access it
 * covers, so me's clock takes that access's clock, as it was then, and
 * pos + 1 of its stream: what waiting for that point orders after.
 */
int pto_hazards_decide(pto_hazards *hz, uint32_t sid, const pto_hz_access *acc, uint32_t n, uint64_t pos,
                       pto_hz_edge *edges, uint32_t max)
{
    const char *fn = "pto_hazards_decide";
    struct hz_stream *me = hz && hz->points ? stream_of(hz, sid) : NULL;
    if (!me || (n && !acc) || (max && !edges))
        return pti_error(PTO_EINVAL, "%s: a table of points (pto_hazards_create_points), its stream %u and arrays "
                         "expected", fn, sid);
    struct hz_plan pl;
    plan_init(&pl);
    if (decide(hz, me, acc, n, &pl, NULL)) {
        plan_fini(&pl);
        return pti_error(PTO_ENOMEM, "%s: out of host memory", fn);
    }
    int need = (int)pl.n;
    if (pl.n > max) { /* nothing changed: call again with room */
        plan_fini(&pl);
        return need;
    }
    for (uint32_t i = 0; i < pl.n; i++) {
        struct hz_need *w = &pl.w[i];
        edges[i] = (pto_hz_edge){w->s->sid, w->index, w->pos, w->exact};
        if (merge(hz, me, w->clock, w->s->sid, w->pos + 1)) {
            plan_fini(&pl);
            return pti_error(PTO_ENOMEM, "%s: out of host memory", fn);
        }
    }
    hz->inferred += pl.n;
    hz->skipped += pl.skipped;
    plan_fini(&pl);
    int rc = note(hz, me, acc, n, pos);
    return rc < 0 ? rc : need;
}

int pto_hazards_note(pto_hazards *hz, uint32_t sid, const pto_hz_access *acc, uint32_t n, uint64_t pos)
{
    struct hz_stream *me = hz ? stream_of(hz, sid) : NULL;
    if (!me || (n && !acc))
        return pti_error(PTO_EINVAL, "pto_hazards_note: unknown stream %u or NULL accesses", sid);
    return note(hz, me, acc, n, pos);
}

int pto_hazards_written(pto_hazards *hz, uint32_t sid, pto_devptr addr, uint64_t pos, uint64_t exact)
{
    struct hz_stream *me = hz ? stream_of(hz, sid) : NULL;
    if (!me)
        return pti_error(PTO_EINVAL, "pto_hazards_written: unknown stream %u", sid);
    struct hz_tensor *t = tensor_get(hz, addr, true);
    if (!t)
        return pti_error(PTO_ENOMEM, "pto_hazards_written: out of host memory");
    set_writer(hz, t, me, pos, exact);
    return 0;
}

void pto_hazards_forget(pto_hazards *hz, pto_devptr addr)
{
    struct hz_tensor *t = hz ? map_get(&hz->tensors, addr) : NULL;
    if (!t)
        return;
    map_del(&hz->tensors, addr);
    tensor_free(hz, t);
}

int pto_hazards_queue_edge(pto_hazards *hz, uint32_t sid, uint32_t src, uint64_t token)
{
    const char *fn = "pto_hazards_queue_edge";
    struct hz_stream *me = hz ? stream_of(hz, sid) : NULL, *from = hz ? stream_of(hz, src) : NULL;
    if (!me || !from || !me->ptr || !from->ptr)
        return pti_error(PTO_EINVAL, "%s: streams %u and %u must be live", fn, sid, src);
    int rc = edge_event(hz, from);
    if (rc)
        return rc;
    rc = pto_stream_wait_stream(me->ptr, from->ptr, from->ev, token);
    if (rc >= 0 && edge_merge(hz, me, from, token))
        return pti_error(PTO_ENOMEM, "%s: out of host memory", fn);
    return rc;
}

/*
 * An explicit wait (the caller's user asked for it) as a fence: queued as
 * pto_hazards_queue_edge's, and sid's clock takes src's, but it is not
 * counted as inferred.
 */
int pto_hazards_queue_wait(pto_hazards *hz, uint32_t sid, uint32_t src, uint64_t token)
{
    const char *fn = "pto_hazards_queue_wait";
    struct hz_stream *me = hz ? stream_of(hz, sid) : NULL, *from = hz ? stream_of(hz, src) : NULL;
    if (!me || !from || !me->ptr || !from->ptr)
        return pti_error(PTO_EINVAL, "%s: streams %u and %u must be live", fn, sid, src);
    int rc = edge_event(hz, from);
    if (rc)
        return rc;
    rc = pto_stream_wait_stream(me->ptr, from->ptr, from->ev, token);
    if (rc >= 0 && merge(hz, me, from->clock, from->sid, token))
        return pti_error(PTO_ENOMEM, "%s: out of host memory", fn);
    return rc;
}

pto_hz_mark *pto_hazards_mark(pto_hazards *hz, uint32_t sid, uint64_t pos)
{
    struct hz_stream *st = hz ? stream_of(hz, sid) : NULL;
    pto_hz_mark *m = malloc(sizeof(*m));
    if (!m)
        return NULL;
    m->sid = sid;
    m->pos = pos;
    m->clock = st ? st->clock : NULL;
    if (m->clock)
        m->clock->refs++;
    return m;
}

void pto_hz_mark_release(pto_hz_mark *m)
{
    if (!m)
        return;
    clock_unref(m->clock);
    free(m);
}

void pto_hazards_waited(pto_hazards *hz, uint32_t sid, const pto_hz_mark *m)
{
    struct hz_stream *me = hz && m ? stream_of(hz, sid) : NULL;
    if (me)
        (void)merge(hz, me, m->clock, m->sid, m->pos); /* out of memory: an edge may be queued again */
}

int pto_hazards_ordered(pto_hazards *hz, uint32_t sid, uint32_t src, uint64_t pos)
{
    struct hz_stream *me = hz ? stream_of(hz, sid) : NULL;
    return me && clock_get(me->clock, src) > pos;
}

void pto_hazards_counts(pto_hazards *hz, uint64_t *out)
{
    out[0] = hz->inferred;
    out[1] = hz->skipped;
}

void pto_hazards_sizes(pto_hazards *hz, pto_devptr addr, uint32_t sid, uint64_t *out)
{
    struct hz_tensor *t = map_get(&hz->tensors, addr);
    struct hz_stream *st = stream_of(hz, sid);
    out[0] = t ? t->nr : 0;
    out[1] = st && st->clock ? st->clock->n : 0;
}

/*
 * The edges go as fences (event.c): no command on the streams waited for;
 * one edge rides on the launch itself, several take one wait command on s
 * for all of them (a wait-many); the clock takes them in one merge.  So a
 * launch behind M edges queues one command (M = 1) or two, and costs
 * O(M log M) here, not 2M + 1 commands and M clock copies.
 */
/*
 * Whether no access of the call needs an edge because every earlier access
 * that conflicts with it is me's own: each record absent, or written last by
 * me and (for a write) read since by me alone.  Fills tens as decide does.
 * The common case (a stream working on its own tensors) stops here: no plan,
 * no clock is read.
 */
static bool all_mine(pto_hazards *hz, const struct hz_stream *me, const pto_hz_access *acc, uint32_t n,
                     struct hz_tensor **tens)
{
    for (uint32_t i = 0; i < n; i++) {
        struct hz_tensor *t = map_get(&hz->tensors, acc[i].addr);
        tens[i] = t;
        if (!t)
            continue;
        if (t->w && t->w != me)
            return false;
        if (acc[i].flags & PTO_HZ_WRITE)
            for (uint32_t r = 0; r < t->nr; r++)
                if (t->r[r].s != me)
                    return false;
    }
    return true;
}

/*
 * Whether every allocation of access[0..nacc) was last touched by `me` alone
 * (or never): all_mine over the arguments themselves, no access list built.
 * tens[j] is the record of the j-th access (access[i] != 0), for the ones
 * checked before the answer and every one after it: the slow path's.
 */
static inline __attribute__((always_inline)) bool args_mine(pto_hazards *hz, const struct hz_stream *me,
                                                             const uint64_t *args, const uint8_t *access,
                                                             uint32_t nacc, struct hz_tensor **tens)
{
    bool mine = true;
    uint32_t j = 0;
    for (uint32_t i = 0; i < nacc; i++) {
        if (!access[i])
            continue;
        struct hz_tensor *t = map_get(&hz->tensors, args[i]);
        tens[j++] = t;
        if (!t || !mine)
            continue;
        if (t->w && t->w != me)
            mine = false;
        else if (access[i] & PTO_HZ_WRITE)
            for (uint32_t r = 0; r < t->nr; r++)
                if (t->r[r].s != me)
                    mine = false;
    }
    return mine;
}

/* note_found over the arguments (args_mine's records): the accesses of a launch queued at pos. */
static inline __attribute__((always_inline)) int note_args(pto_hazards *hz, struct hz_stream *me,
                                                            const uint64_t *args, const uint8_t *access,
                                                            uint32_t nacc, uint64_t pos,
                                                            struct hz_tensor *const *tens)
{
    uint32_t j = 0;
    for (uint32_t i = 0; i < nacc; i++) {
        if (!access[i])
            continue;
        struct hz_tensor *t = tens[j++];
        uint32_t f = access[i] & (PTO_HZ_READ | PTO_HZ_WRITE);
        if (!f)
            continue;
        if (!t && !(t = tensor_get(hz, args[i], true)))
            return pti_error(PTO_ENOMEM, "pto_hazards_note: out of host memory");
        if (!(f & PTO_HZ_WRITE)) {
            if (add_read(hz, t, me, pos))
                return pti_error(PTO_ENOMEM, "pto_hazards_note: out of host memory");
        } else if (t->w == me && !t->nr && !t->wclock && !hz->points) { /* set_writer's own first case */
            t->wpos = pos;
            t->wexact = 0;
        } else {
            set_writer(hz, t, me, pos, 0);
        }
    }
    return 0;
}

static int launch_edges(pto_hazards *hz, struct hz_stream *me, pto_stream *s, pto_kernel *k, uint32_t blocks,
                        const uint64_t *args, uint32_t nargs, const uint8_t *access, uint32_t nacc,
                        uint64_t edge_token, uint64_t token, const char *fn, struct hz_tensor **found);

/* The table's record of s: the one s keeps (hz_me), or looked up and kept. */
static struct hz_stream *stream_me(pto_hazards *hz, pto_stream *s)
{
    if (s->hz_serial == hz->serial)
        return s->hz_me;
    struct hz_stream *me = stream_of(hz, s->id);
    if (me && me->ptr == s && !hz->points) {
        s->hz_me = me;
        s->hz_serial = hz->serial;
    }
    return me;
}

/*
 * pto_hazards_launch, with access[0..nacc) (arguments past them are not
 * accesses).  The common case first: every allocation the launch accesses
 * was last touched by its own stream (one stream, or a stream's own
 * tensors), so no edge is needed: the launch is queued as it is and its
 * accesses noted, with no access list built and no plan.
 */
static inline __attribute__((always_inline)) int launch_ordered(pto_hazards *hz, pto_stream *s, pto_kernel *k,
                                                                 uint32_t blocks, const uint64_t *args,
                                                                 uint32_t nargs, const uint8_t *access,
                                                                 uint32_t nacc, uint64_t edge_token,
                                                                 uint64_t token, const char *fn)
{
    struct hz_stream *me = hz && s ? stream_me(hz, s) : NULL;
    if (!me || me->ptr != s || (nacc && !access))
        return pti_error(PTO_EINVAL, "%s: a stream registered with the table expected", fn);
    int rc = pti_launch_check(s, k, blocks, args, nargs, fn);
    if (rc)
        return rc;
    if (nacc > nargs)
        nacc = nargs;
    if (nacc > 16)
        return launch_edges(hz, me, s, k, blocks, args, nargs, access, nacc, edge_token, token, fn, NULL);
    struct hz_tensor *tens[16];
    if (!args_mine(hz, me, args, access, nacc, tens))
        return launch_edges(hz, me, s, k, blocks, args, nargs, access, nacc, edge_token, token, fn, tens);
    rc = pti_launch_commit(s, k, blocks, args, nargs, token, fn);
    if (rc >= 0) {
        int noted = note_args(hz, me, args, access, nacc, token, tens);
        if (noted < 0)
            rc = noted;
    }
    return rc;
}

/*
 * launch_ordered's other cases: a launch that needs edges, or accesses past
 * the 16 the fast path holds.  `found`: args_mine's records, when it said
 * not all mine (else NULL: found here).
 */
static __attribute__((noinline)) int launch_edges(pto_hazards *hz, struct hz_stream *me, pto_stream *s,
                                                  pto_kernel *k, uint32_t blocks, const uint64_t *args,
                                                  uint32_t nargs, const uint8_t *access, uint32_t nacc,
                                                  uint64_t edge_token, uint64_t token, const char *fn,
                                                  struct hz_tensor **found)
{
    int rc;
    pto_hz_access small[16], *acc = small;
    struct hz_tensor *tsmall[16], **tens = found ? found : tsmall; /* the records decide found, for note_found */
    if (nacc > 16) {
        acc = malloc(nacc * sizeof(*acc));
        tens = malloc(nacc * sizeof(*tens));
        if (!acc || !tens) {
            free(acc);
            free(tens);
            return pti_error(PTO_ENOMEM, "%s: out of host memory", fn);
        }
    }
    uint32_t n = 0;
    for (uint32_t i = 0; i < nacc; i++)
        if (access[i])
            acc[n++] = (pto_hz_access){args[i], access[i] & (PTO_HZ_READ | PTO_HZ_WRITE), 0};
    if (!found && all_mine(hz, me, acc, n, tens)) { /* no edge: the launch, and its accesses noted */
        rc = pti_launch_commit(s, k, blocks, args, nargs, token, fn);
        if (rc >= 0) {
            int noted = note_found(hz, me, acc, n, token, tens);
            if (noted < 0)
                rc = noted;
        }
        if (acc != small) {
            free(acc);
            free(tens);
        }
        return rc;
    }
    /* Per edge: its stream (table and driver), its event's id (traces), its fence. */
    struct hz_stream *hsmall[8], **hs = hsmall;
    pto_stream *psmall[8], **ps = psmall;
    uint64_t idsmall[8], *ids = idsmall;
    struct pto_event_node *nsmall[8], **nodes = nsmall;
    struct hz_plan pl;
    plan_init(&pl);
    if (decide(hz, me, acc, n, &pl, tens)) {
        rc = pti_error(PTO_ENOMEM, "%s: out of host memory", fn);
        goto out;
    }
    if (pl.n > 8) {
        hs = malloc(pl.n * sizeof(*hs));
        ps = malloc(pl.n * sizeof(*ps));
        ids = malloc(pl.n * sizeof(*ids));
        nodes = malloc(pl.n * sizeof(*nodes));
        if (!hs || !ps || !ids || !nodes) {
            rc = pti_error(PTO_ENOMEM, "%s: out of host memory", fn);
            goto out;
        }
    }
    /* Edges the caller must queue itself (through its own events): decline, nothing changed. */
    for (uint32_t i = 0; i < pl.n; i++) {
        struct hz_stream *src = pl.w[i].s;
        if (pl.w[i].exact || src->closed || src->held || !src->ptr || me->held) {
            rc = PTO_HZ_DECLINED;
            goto out;
        }
        /*
         * No pti_edge_check: the table's streams are of its device
         * (pto_hazards_stream), src is not s (decide plans no edge from
         * the caller's own stream), and src->ev was made on that device.
         */
        if ((rc = edge_event(hz, src)))
            goto out;
        hs[i] = src;
        ps[i] = src->ptr;
        ids[i] = src->ev_id;
    }
    uint64_t outer = pti_stamp_begin();
    int waited = 0;
    struct pto_event_node *after = NULL;
    if (pl.n) {
        if ((rc = pti_fences_take(s->dev, ps, ids, pl.n, nodes))) {
            pti_stamp_end(outer);
            goto out;
        }
        if (pl.n == 1) /* one edge rides on the launch: no command of its own */
            after = nodes[0];
        else
            waited = pti_wait_many_commit(s, nodes, pl.n, edge_token, fn);
        if (waited < 0) { /* a device lost or closing: nothing after runs to order */
            pti_stamp_end(outer);
            rc = waited;
            goto out;
        }
        if (pl.n == 1 ? edge_merge(hz, me, hs[0], edge_token) : merge_many(hz, me, hs, pl.n, edge_token)) {
            pti_stamp_end(outer);
            rc = pti_error(PTO_ENOMEM, "%s: out of host memory", fn);
            goto out;
        }
    }
    rc = pti_launch_commit_after(s, k, blocks, args, nargs, after, token, fn);
    pti_stamp_end(outer);
    if (rc < 0)
        goto out;
    hz->skipped += pl.skipped;
    int noted = note_found(hz, me, acc, n, token, tens);
    if (noted < 0)
        rc = noted;
    else
        rc = (waited & PTO_QUEUED ? PTO_EDGE_WAIT_QUEUED : 0) | rc;
out:
    if (hs != hsmall) {
        free(hs);
        free(ps);
        free(ids);
        free(nodes);
    }
    plan_fini(&pl);
    if (acc != small) {
        free(acc);
        free(tens);
    }
    return rc;
}

int pto_hazards_launch(pto_hazards *hz, pto_stream *s, pto_kernel *k, uint32_t blocks, const uint64_t *args,
                       uint32_t nargs, const uint8_t *access, uint64_t edge_token, uint64_t token)
{
    return launch_ordered(hz, s, k, blocks, args, nargs, access, nargs, edge_token, token, "pto_hazards_launch");
}

int pto_hazards_attach(pto_hazards *hz)
{
    if (!hz || hz->points)
        return pti_error(PTO_EINVAL, "pto_hazards_attach: a table (not of points) expected");
    if (hz->dev->hz && hz->dev->hz != hz)
        return pti_error(PTO_EINVAL, "pto_hazards_attach: the device has another table attached");
    hz->dev->hz = hz;
    return 0;
}

static uint64_t edge_token_of(uint64_t token)
{
    return token ? token - 1 : 0;
}

int pto_stream_launch_ordered(pto_stream *s, pto_kernel *k, uint32_t blocks, const uint64_t *args,
                              uint32_t nargs, uint64_t token)
{
    const char *fn = "pto_stream_launch_ordered";
    pto_hazards *hz = s ? s->dev->hz : NULL;
    const struct pto_argaccess *aa = k ? atomic_load_explicit(&k->access, memory_order_acquire) : NULL;
    if (!hz || !aa)
        return pti_error(PTO_EINVAL, "%s: a stream of a device with a table attached (pto_hazards_attach) and a "
                         "kernel that declared its accesses (pto_kernel_set_arg_access) expected", fn);
    return launch_ordered(hz, s, k, blocks, args, nargs, aa->bits, aa->nargs, edge_token_of(token), token, fn);
}
