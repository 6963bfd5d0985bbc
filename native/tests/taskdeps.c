/*
 * Description: the task-edge rule (taskdeps.c, pto_task_deps_*).
 *
 *   1. The pairs: RAW, WAW, WAR found and named, read after read none;
 *      disjoint windows give no edge, overlapping and whole ones do; boxes
 *      of different ranks overlap.
 *   2. A covering write ends the history (a reader waits for the last
 *      writer only); a partial one does not; a manual task's write ends
 *      nothing, and the task gets its declared edges only; a declared pair
 *      stays declared.
 *   3. Batches: the same tasks added one at a time, or all at once, give the
 *      same edges; edges are taken in (dst, src) order, a few at a time.
 *   4. Bad input is refused with nothing added.
 *   5. 20,000 tasks over disjoint tiles: each lookup looks at a bounded
 *      number of earlier accesses (linear in the tasks).
 *   6. The same tables built on four threads at once (one table each) agree.
 */
#include <pthread.h>

#include "helpers.h"

struct prog {
    uint32_t tasks[3 * 64], deps[64], acc[3 * 256];
    int64_t bounds[1024];
    uint32_t nt, nd, na, nb;
};

static void task(struct prog *p, uint32_t flags, uint32_t ndeps, const uint32_t *deps)
{
    p->tasks[3 * p->nt] = 0;
    p->tasks[3 * p->nt + 1] = ndeps;
    p->tasks[3 * p->nt + 2] = flags;
    p->nt++;
    for (uint32_t i = 0; i < ndeps; i++)
        p->deps[p->nd++] = deps[i];
}

/* An access of the last task: ndim 0 with PTO_TASK_WHOLE, or a 1-d [lo, hi), or 2-d [lo, hi) x [0, 8). */
static void acc(struct prog *p, uint32_t tensor, uint32_t flags, uint32_t ndim, int64_t lo, int64_t hi)
{
    p->tasks[3 * (p->nt - 1)]++;
    p->acc[p->na++] = tensor;
    p->acc[p->na++] = flags;
    p->acc[p->na++] = ndim;
    if (ndim >= 1) {
        p->bounds[p->nb++] = lo;
        if (ndim == 2)
            p->bounds[p->nb++] = 0;
        p->bounds[p->nb++] = hi;
        if (ndim == 2)
            p->bounds[p->nb++] = 8;
    }
}

#define R PTO_TASK_READ
#define W PTO_TASK_WRITE
#define WH PTO_TASK_WHOLE

static pto_task_edge got[4096];

static int run(const struct prog *p)
{
    pto_task_deps *d;
    t_check(pto_task_deps_create(&d));
    int n = t_check(pto_task_deps_add(d, p->nt, p->tasks, p->deps, p->acc, p->bounds));
    t_assert(t_check(pto_task_deps_take(d, got, 4096)) == n, "every edge taken");
    pto_task_deps_destroy(d);
    return n;
}

static void expect(const struct prog *p, const pto_task_edge *want, int nwant)
{
    int n = run(p);
    t_assert(n == nwant, "%d edges, want %d", n, nwant);
    for (int i = 0; i < n; i++)
        t_assert(got[i].src == want[i].src && got[i].dst == want[i].dst && got[i].hazard == want[i].hazard &&
                     got[i].tensor == want[i].tensor,
                 "edge %d: %u->%u hazard %u tensor %u, want %u->%u hazard %u tensor %u", i, got[i].src, got[i].dst,
                 got[i].hazard, got[i].tensor, want[i].src, want[i].dst, want[i].hazard, want[i].tensor);
}

static void pairs(void)
{
    struct prog p = {0};
    task(&p, 0, 0, NULL), acc(&p, 0, W | WH, 0, 0, 0);
    task(&p, 0, 0, NULL), acc(&p, 0, R, 1, 0, 4);
    task(&p, 0, 0, NULL), acc(&p, 0, R, 1, 2, 6);                      /* read after read: none */
    task(&p, 0, 0, NULL), acc(&p, 0, W, 1, 4, 8);                      /* WAR with 2 only (1 is disjoint) */
    task(&p, 0, 0, NULL), acc(&p, 1, R, 2, 0, 4), acc(&p, 0, R, 2, 0, 1); /* another rank: overlaps 3's */
    const pto_task_edge want[] = {
        {0, 1, PTO_TASK_RAW, 0}, {0, 2, PTO_TASK_RAW, 0}, {0, 3, PTO_TASK_WAW, 0}, {2, 3, PTO_TASK_WAR, 0},
        {0, 4, PTO_TASK_RAW, 0}, {3, 4, PTO_TASK_RAW, 0},
    };
    expect(&p, want, 6);
}

static void history(void)
{
    struct prog p = {0};
    uint32_t dep0 = 0, dep1 = 1;
    task(&p, 0, 0, NULL), acc(&p, 0, W, 1, 0, 8);
    task(&p, 0, 0, NULL), acc(&p, 0, W, 1, 0, 4);       /* partial: 0 stays */
    task(&p, 0, 0, NULL), acc(&p, 0, R, 1, 0, 8);       /* waits for 0 and 1 */
    task(&p, 0, 0, NULL), acc(&p, 0, R | W, 1, 0, 8);   /* RAW first; covers: 0, 1 and 2 leave */
    task(&p, 0, 0, NULL), acc(&p, 0, R, 1, 0, 8);       /* waits for 3 only */
    task(&p, PTO_TASK_MANUAL, 1, &dep0), acc(&p, 0, W, 1, 0, 8); /* declared only; ends nothing */
    task(&p, 0, 1, &dep1), acc(&p, 0, R, 1, 0, 8);      /* 1 declared; 3 and the manual 5 by RAW */
    const pto_task_edge want[] = {
        {0, 1, PTO_TASK_WAW, 0}, {0, 2, PTO_TASK_RAW, 0}, {1, 2, PTO_TASK_RAW, 0}, {0, 3, PTO_TASK_RAW, 0},
        {1, 3, PTO_TASK_RAW, 0}, {2, 3, PTO_TASK_WAR, 0}, {3, 4, PTO_TASK_RAW, 0}, {0, 5, PTO_TASK_DECLARED, UINT32_MAX},
        {1, 6, PTO_TASK_DECLARED, UINT32_MAX}, {3, 6, PTO_TASK_RAW, 0}, {5, 6, PTO_TASK_RAW, 0},
    };
    expect(&p, want, 11);
}

static void batches(void)
{
    struct prog p = {0};
    uint64_t s = 27;
    for (int i = 0; i < 60; i++) {
        uint32_t dep = i ? (uint32_t)(t_rand(&s) % i) : 0;
        task(&p, t_rand(&s) % 5 == 0 ? PTO_TASK_MANUAL : 0, i && t_rand(&s) % 4 == 0, &dep);
        for (int j = t_rand(&s) % 4; j > 0; j--) {
            int64_t lo = (int64_t)(t_rand(&s) % 12) - 2;
            uint32_t ndim = t_rand(&s) % 3, flags = 1 + t_rand(&s) % 3;
            acc(&p, t_rand(&s) % 3, flags | (ndim == 0 ? WH : 0), ndim, lo, lo + (int64_t)(t_rand(&s) % 6));
        }
    }
    int n = run(&p);
    pto_task_edge all[4096];
    memcpy(all, got, (size_t)n * sizeof(*all));
    for (int i = 1; i < n; i++)
        t_assert(all[i - 1].dst < all[i].dst || (all[i - 1].dst == all[i].dst && all[i - 1].src < all[i].src),
                 "edges in (dst, src) order");

    pto_task_deps *d;
    t_check(pto_task_deps_create(&d));
    const uint32_t *dp = p.deps, *ap = p.acc;
    const int64_t *bp = p.bounds;
    int k = 0;
    for (uint32_t i = 0; i < p.nt; i++) {
        const uint32_t *t = &p.tasks[3 * i];
        t_check(pto_task_deps_add(d, 1, t, dp, ap, bp));
        dp += t[1];
        for (uint32_t j = 0; j < t[0]; j++, ap += 3)
            bp += (ap[1] & WH) ? 0 : 2 * ap[2];
        int m;
        while ((m = t_check(pto_task_deps_take(d, got, 2))) > 0)
            for (int j = 0; j < m; j++, k++)
                t_assert(k < n && !memcmp(&got[j], &all[k], sizeof(got[j])), "edge %d the same one at a time", k);
    }
    t_assert(k == n, "%d edges one at a time, %d at once", k, n);
    uint64_t counts[3];
    pto_task_deps_counts(d, counts);
    t_assert(counts[0] == p.nt, "tasks counted");
    pto_task_deps_destroy(d);
}

static void refused(void)
{
    pto_task_deps *d;
    t_check(pto_task_deps_create(&d));
    uint32_t tasks[6] = {1, 0, 0, 0, 1, 0}, dep = 1, acc[3] = {0, W, 1};
    int64_t b[2] = {0, 4};
    t_assert(pto_task_deps_add(d, 2, tasks, &dep, acc, b) == -PTO_EINVAL, "a dependency on itself");
    uint32_t bad[3] = {0, W | WH, 1};
    t_assert(pto_task_deps_add(d, 1, tasks, &dep, bad, b) == -PTO_EINVAL, "a whole window with dimensions");
    uint32_t deep[3] = {0, W, PTO_TASK_MAX_DIMS + 1};
    t_assert(pto_task_deps_add(d, 1, tasks, &dep, deep, b) == -PTO_EINVAL, "too many dimensions");
    uint32_t flags[3] = {0, 0, 2};
    t_assert(pto_task_deps_add(d, 1, flags, &dep, acc, b) == -PTO_EINVAL, "unknown task flags");
    uint64_t counts[3];
    pto_task_deps_counts(d, counts);
    t_assert(counts[0] == 0, "nothing added");
    pto_task_deps_destroy(d);
}

/* 20,000 tasks: a tile of x read, the whole of w read, the same tile of y written (read too, every third). */
static uint64_t tiles(uint64_t *most, int *edges_out)
{
    enum { N = 20000, TILES = 512 };
    uint32_t *tasks = t_calloc(3 * N, sizeof(uint32_t)), *acc = t_calloc(9 * N, sizeof(uint32_t));
    int64_t *b = t_calloc(8 * N, sizeof(int64_t));
    for (int i = 0; i < N; i++) {
        int64_t lo = (i % TILES) * 16;
        tasks[3 * i] = 3;
        uint32_t a[9] = {0, R, 2, 1, R | WH, 0, 2, (i % 3 == 0 ? R : 0) | W, 2};
        memcpy(&acc[9 * i], a, sizeof(a));
        int64_t bb[8] = {lo, 0, lo + 16, 64, lo, 0, lo + 16, 64};
        memcpy(&b[8 * i], bb, sizeof(bb));
    }
    pto_task_deps *d;
    t_check(pto_task_deps_create(&d));
    int n = t_check(pto_task_deps_add(d, N, tasks, NULL, acc, b));
    uint64_t counts[3];
    pto_task_deps_counts(d, counts);
    pto_task_deps_destroy(d);
    free(tasks);
    free(acc);
    free(b);
    *most = counts[2];
    *edges_out = n;
    return counts[1];
}

static void *tiles_thread(void *arg)
{
    uint64_t most;
    int n;
    *(uint64_t *)arg = tiles(&most, &n) * 1000003u + (uint64_t)n;
    return NULL;
}

int main(void)
{
    pairs();
    history();
    batches();
    refused();
    uint64_t most;
    int n;
    uint64_t looked = tiles(&most, &n);
    t_assert(most <= 4 && looked <= 4ull * 20000, "looked at %llu (most %llu): not linear",
             (unsigned long long)looked, (unsigned long long)most);
    t_assert(n == 20000 - 512, "each tile's task waits for the one before it: %d edges", n);
    pthread_t th[4];
    uint64_t res[4];
    for (int i = 0; i < 4; i++)
        t_assert(!pthread_create(&th[i], NULL, tiles_thread, &res[i]), "thread");
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        t_assert(res[i] == res[0], "table %d agrees", i);
    }
    printf("taskdeps: pairs, history, batches, refusals; 20,000 tiled tasks looked at %llu earlier accesses\n",
           (unsigned long long)looked);
    return T_EXIT_PASS;
}
