/*
 * programs.c - hand-written programs for native/tests/program.c (built by
 * run.sh as libprograms.so): each descriptor function is one program of the
 * program ABI (pypto_async/include/pto_program.h).
 *
 * Tensors are float arrays in device memory; task bodies are tiny.  A few
 * sites take part in a rendezvous (both must run at once, or the first
 * times out and fails) or fail on purpose.
 */
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "mixed.h"
#include "pto_program.h"

#define N 64

/* The rendezvous of two tasks: each arrives, then waits (bounded) for the other. */
atomic_int prog_meet;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void meet(const pto_block *blk)
{
    atomic_fetch_add(&prog_meet, 1);
    uint64_t end = now_ns() + 5000000000ull;
    while (atomic_load(&prog_meet) < 2)
        if (now_ns() > end) {
            blk->fail(blk, PTO_ETIMEDOUT, "the other middle task never ran at the same time");
            return;
        }
}

/* ---- diamond: a -> (b, c) -> d over args x, s, l, r, out (N floats each) -------------------- */

static void d_top(const pto_block *blk, void *const *args, const int64_t *idx)
{
    (void)blk, (void)idx;
    const float *x = args[0];
    float *s = args[1];
    for (int i = 0; i < N; i++)
        s[i] = x[i] + 1.0f;
}

static void d_left(const pto_block *blk, void *const *args, const int64_t *idx)
{
    (void)idx;
    meet(blk);
    const float *s = args[1];
    float *l = args[2];
    for (int i = 0; i < N; i++)
        l[i] = s[i] * 2.0f;
}

static void d_right(const pto_block *blk, void *const *args, const int64_t *idx)
{
    (void)idx;
    meet(blk);
    const float *s = args[1];
    float *r = args[3];
    for (int i = 0; i < N; i++)
        r[i] = s[i] * 3.0f;
}

static void d_bottom(const pto_block *blk, void *const *args, const int64_t *idx)
{
    (void)blk, (void)idx;
    const float *l = args[2], *r = args[3];
    float *out = args[4];
    for (int i = 0; i < N; i++)
        out[i] = l[i] + r[i];
}

static int diamond_orch(pto_orch *o, const pto_orch_ops *ops, void *const *args)
{
    (void)args;
    int rc;
    for (uint32_t site = 0; site < 4; site++)
        if ((rc = ops->submit(o, site, NULL)) != 0)
            return rc;
    return 0;
}

static const pto_task_site diamond_sites[] = {
    {"top", d_top, 0, 0}, {"left", d_left, 0, 0}, {"right", d_right, 0, 0}, {"bottom", d_bottom, 0, 0}};
static const uint32_t diamond_of[] = {0, 1, 2, 3};
static const uint32_t diamond_off[] = {0, 0, 1, 2, 4};
static const uint32_t diamond_ids[] = {0, 0, 1, 2};
static const pto_program_desc diamond = {
    PTO_PROGRAM_ABI, 5, 4, 0, diamond_sites, 0, 4, 0, diamond_of, diamond_off, diamond_ids, diamond_orch};

const pto_program_desc *prog_diamond(void) { return &diamond; }

/* ---- tiles: out[i] = x[i] * 2 for N tiles of one float, through a loop; an intermediate -------- */

static void t_scale(const pto_block *blk, void *const *args, const int64_t *idx)
{
    (void)blk;
    const float *x = args[0];
    float *tmp = args[2]; /* the intermediate, after the two parameters */
    tmp[idx[0]] = x[idx[0]] * 2.0f;
}

static void t_sum(const pto_block *blk, void *const *args, const int64_t *idx)
{
    (void)blk, (void)idx;
    const float *tmp = args[2];
    float *out = args[1];
    float acc = 0;
    for (int i = 0; i < N; i++)
        acc += tmp[i];
    out[0] = acc;
}

static int tiles_orch(pto_orch *o, const pto_orch_ops *ops, void *const *args)
{
    (void)args;
    int rc;
    int64_t idx[1];
    for (int64_t i = 0; i < N; i++) {
        idx[0] = i;
        if ((rc = ops->submit(o, 0, idx)) != 0)
            return rc;
    }
    return ops->submit(o, 1, NULL);
}

static const pto_task_site tiles_sites[] = {{"scale", t_scale, 1, 0}, {"sum", t_sum, 0, 0}};
static const pto_scratch_desc tiles_scratch[] = {{N * sizeof(float), 0, N}};
static uint32_t tiles_of[N + 1], tiles_off[N + 2], tiles_ids[N];
static pto_program_desc tiles = {
    PTO_PROGRAM_ABI, 2, 2, 1, tiles_sites, tiles_scratch, N + 1, 0, tiles_of, tiles_off, tiles_ids, tiles_orch};

const pto_program_desc *prog_tiles(void)
{
    for (uint32_t i = 0; i <= N; i++) {
        tiles_of[i] = i < N ? 0 : 1;
        tiles_off[i] = 0;
    }
    tiles_off[N + 1] = N; /* the sum waits for every tile */
    for (uint32_t i = 0; i < N; i++)
        tiles_ids[i] = i;
    return &tiles;
}

/* The same program without a table: each instance waits for the one before. */
static pto_program_desc chain = {PTO_PROGRAM_ABI, 2, 2, 1, tiles_sites, tiles_scratch, 0, 0, 0, 0, 0, tiles_orch};

const pto_program_desc *prog_chain(void) { return &chain; }

/* The same program without a table, with its accesses: the driver resolves its edges at submit. */
static uint32_t scale_acc(const int64_t *idx, pto_task_access *out, uint32_t cap)
{
    if (cap < 2)
        return cap + 1;
    memset(out, 0, 2 * sizeof(*out));
    out[0] = (pto_task_access){.arg = 0, .read = 1, .ndim = 1, .lo = {idx[0]}, .hi = {idx[0] + 1}};
    out[1] = (pto_task_access){.arg = 2, .write = 1, .ndim = 1, .lo = {idx[0]}, .hi = {idx[0] + 1}};
    return 2;
}

static uint32_t sum_acc(const int64_t *idx, pto_task_access *out, uint32_t cap)
{
    (void)idx;
    if (cap < 2)
        return cap + 1;
    memset(out, 0, 2 * sizeof(*out));
    out[0] = (pto_task_access){.arg = 2, .read = 1}; /* ndim 0: the whole intermediate */
    out[1] = (pto_task_access){.arg = 1, .write = 1};
    return 2;
}

static const pto_access_fn resolved_acc[] = {scale_acc, sum_acc};
static pto_program_desc resolved = {PTO_PROGRAM_ABI, 2, 2, 1, tiles_sites, tiles_scratch, 0, 0, 0, 0, 0,
                                    tiles_orch, resolved_acc, NULL};

const pto_program_desc *prog_resolved(void) { return &resolved; }

/* ---- scoped: N independent tasks inside one scope ------------------------------------------ */

static void s_one(const pto_block *blk, void *const *args, const int64_t *idx)
{
    (void)blk;
    float *out = args[0];
    out[idx[0]] = (float)idx[0];
}

static int scoped_orch(pto_orch *o, const pto_orch_ops *ops, void *const *args)
{
    (void)args;
    int rc;
    int64_t idx[1];
    if ((rc = ops->scope_begin(o)) != 0)
        return rc;
    for (int64_t i = 0; i < 8; i++) {
        idx[0] = i;
        if ((rc = ops->submit(o, 0, idx)) != 0)
            return rc;
    }
    return ops->scope_end(o);
}

static const pto_task_site scoped_sites[] = {{"one", s_one, 1, 0}};
static const uint32_t scoped_of[8] = {0};
static const uint32_t scoped_off[9] = {0};
static const uint32_t scoped_ids[1] = {0};
static const pto_program_desc scoped = {
    PTO_PROGRAM_ABI, 1, 1, 0, scoped_sites, 0, 8, 0, scoped_of, scoped_off, scoped_ids, scoped_orch};

const pto_program_desc *prog_scoped(void) { return &scoped; }

/* ---- failing: bad -> after; beside runs anyway --------------------------------------------- */

static void f_bad(const pto_block *blk, void *const *args, const int64_t *idx)
{
    (void)args, (void)idx;
    blk->fail(blk, PTO_EKERNEL, "bad input");
}

static void f_after(const pto_block *blk, void *const *args, const int64_t *idx)
{
    (void)blk, (void)idx;
    ((float *)args[0])[0] = 1.0f;
}

static void f_beside(const pto_block *blk, void *const *args, const int64_t *idx)
{
    (void)blk, (void)idx;
    ((float *)args[0])[1] = 1.0f;
}

static const pto_task_site failing_sites[] = {{"bad", f_bad, 0, 0}, {"after", f_after, 0, 0},
                                              {"beside", f_beside, 0, 0}};
static const uint32_t failing_of[] = {0, 1, 2};
static const uint32_t failing_off[] = {0, 0, 1, 1};
static const uint32_t failing_ids[] = {0};
static int failing_orch(pto_orch *o, const pto_orch_ops *ops, void *const *args)
{
    (void)args;
    int rc;
    for (uint32_t site = 0; site < 3; site++)
        if ((rc = ops->submit(o, site, NULL)) != 0)
            return rc;
    return 0;
}

static const pto_program_desc failing = {
    PTO_PROGRAM_ABI, 1, 3, 0, failing_sites, 0, 3, 0, failing_of, failing_off, failing_ids, failing_orch};

const pto_program_desc *prog_failing(void) { return &failing; }

/* ---- early: its first task runs while the orchestration still goes on ---------------------- */

/* Set by early's first task; early_seen: the orchestration saw it before submitting the second. */
atomic_int prog_early_ran, prog_early_seen;

static void e_first(const pto_block *blk, void *const *args, const int64_t *idx)
{
    (void)blk, (void)idx;
    uint64_t end = now_ns() + 10000; /* 10 us: never a tiny task (run after the pass) */
    while (now_ns() < end)
        ;
    ((float *)args[0])[0] = 1.0f;
    atomic_store(&prog_early_ran, 1);
}

static void e_second(const pto_block *blk, void *const *args, const int64_t *idx)
{
    (void)blk, (void)idx;
    ((float *)args[0])[1] = 2.0f;
}

static int early_orch(pto_orch *o, const pto_orch_ops *ops, void *const *args)
{
    (void)args;
    int rc = ops->submit(o, 0, NULL);
    if (rc)
        return rc;
    /* Wait a bounded while: a first task held back until the orchestration returns never runs here. */
    uint64_t end = now_ns() + 200000000ull;
    while (!atomic_load(&prog_early_ran) && now_ns() < end)
        sched_yield();
    atomic_store(&prog_early_seen, atomic_load(&prog_early_ran));
    return ops->submit(o, 1, NULL);
}

static const pto_task_site early_sites[] = {{"first", e_first, 0, 0}, {"second", e_second, 0, 0}};
static const uint32_t early_of[] = {0, 1};
static const uint32_t early_off[] = {0, 0, 0};
static const uint32_t early_ids[] = {0};
static const pto_program_desc early = {
    PTO_PROGRAM_ABI, 1, 2, 0, early_sites, 0, 2, 0, early_of, early_off, early_ids, early_orch};

const pto_program_desc *prog_early(void) { return &early; }

/* ---- eight: 8 independent tiny tasks (out[i] = i + 1) -------------------------------------- */

static void g_one(const pto_block *blk, void *const *args, const int64_t *idx)
{
    (void)blk;
    ((float *)args[0])[idx[0]] = (float)idx[0] + 1.0f;
}

static int eight_orch(pto_orch *o, const pto_orch_ops *ops, void *const *args)
{
    (void)args;
    int rc;
    for (int64_t i = 0; i < 8; i++)
        if ((rc = ops->submit(o, 0, &i)) != 0)
            return rc;
    return 0;
}

static const pto_task_site eight_sites[] = {{"one", g_one, 1, 0}};
static const uint32_t eight_of[8] = {0};
static const uint32_t eight_off[9] = {0};
static const uint32_t eight_ids[1] = {0};
static const pto_program_desc eight = {
    PTO_PROGRAM_ABI, 1, 1, 0, eight_sites, 0, 8, 0, eight_of, eight_off, eight_ids, eight_orch};

const pto_program_desc *prog_eight(void) { return &eight; }

/* ---- mixed: MIXED_N instances without a table, accesses of every shape (mixed.h) -------------- */


static void m_noop(const pto_block *blk, void *const *args, const int64_t *idx)
{
    (void)blk, (void)args, (void)idx;
}

static int mixed_orch(pto_orch *o, const pto_orch_ops *ops, void *const *args)
{
    (void)args;
    int rc;
    int64_t idx[1];
    for (int64_t i = 0; i < MIXED_N; i++) {
        idx[0] = i;
        if ((rc = ops->submit(o, 0, idx)) != 0)
            return rc;
    }
    return 0;
}

static uint32_t mixed_acc_fn(const int64_t *idx, pto_task_access *out, uint32_t cap)
{
    return mixed_acc(idx, out, cap);
}

static const pto_task_site mixed_sites[] = {{"mixed", m_noop, 1, 0}};
static const pto_access_fn mixed_accs[] = {mixed_acc_fn};
static const pto_scratch_desc mixed_scratch[] = {{64, 0, MIXED_N - 1}};
static pto_program_desc mixed = {PTO_PROGRAM_ABI, 2, 1, 1, mixed_sites, mixed_scratch, 0, 0, 0, 0, 0,
                                 mixed_orch, mixed_accs, NULL};

const pto_program_desc *prog_mixed(void) { return &mixed; }
