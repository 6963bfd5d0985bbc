/*
 * pto_program.h - the program-side ABI of pypto_async: an orchestration and
 * its task graph, as one shared object.
 *
 * A program is a shared object that exports one function,
 *
 *     const pto_program_desc *NAME(void);
 *
 * returning a static descriptor: the program's task sites (one C function
 * per kernel call site of the orchestration), its intermediates
 * (pl.create_tensor), the predecessor table of its task instances, and the
 * orchestration itself.  The driver (native/src/program.c) runs the
 * orchestration on a device scheduler thread; each ops->submit(o, site, idx)
 * makes the next task instance, which waits for the instances the table
 * lists and then runs on a free compute core.  The compiler computes the
 * table (pypto_async/ir/_deps.py, the one edge rule); the driver only
 * counts dependencies.
 *
 * A task function is called once per instance on a compute core:
 *
 *     void site(const pto_block *blk, void *const *args, const int64_t *idx);
 *
 * args: the program's launch arguments, then one device address per
 * intermediate; idx: the values of the orchestration loop indices around
 * the call site, outermost first.  It fails like a kernel, through
 * blk->fail.
 */
#ifndef PTO_PROGRAM_H
#define PTO_PROGRAM_H

#include <stdint.h>

#include "pto_kernel.h"

#define PTO_PROGRAM_ABI 2       /* 2: the descriptor ends with the sites' accesses (1 still loads) */
#define PTO_PROGRAM_MAX_IDX 8   /* loop indices a task site may capture */
#define PTO_ACCESS_MAX_DIMS 4   /* window dimensions an access carries (more: the whole tensor) */

typedef struct pto_orch pto_orch;   /* a running program: the driver's, opaque */

typedef void (*pto_task_fn)(const pto_block *blk, void *const *args, const int64_t *idx);

typedef struct pto_task_site {
    const char *name;       /* the task's name (name_hint, or the kernel called) */
    pto_task_fn fn;
    uint32_t nidx;          /* loop indices it takes (<= PTO_PROGRAM_MAX_IDX) */
    uint32_t reserved;
} pto_task_site;

/*
 * One access of a task instance, for a program without a table: the
 * driver resolves its edges at submission (orch.c) with the rule the
 * compiler's table is computed by (taskdeps.c, pto_task_deps_*): a later access waits
 * for an earlier one of the same argument when either writes and their
 * windows overlap.  arg: the args slot (a parameter, or nparams + an
 * intermediate); lo/hi: per dimension, in elements, hi exclusive; ndim 0:
 * the whole tensor.  An access the program does not track (no_dep_args,
 * manual_dep) is not listed.
 */
typedef struct pto_task_access {
    uint32_t arg;
    uint8_t read, write;
    uint8_t ndim;
    uint8_t reserved;
    int64_t lo[PTO_ACCESS_MAX_DIMS], hi[PTO_ACCESS_MAX_DIMS];
} pto_task_access;

/*
 * A site's accesses for the loop indices idx: writes up to cap of them to
 * out and returns how many it has (more than cap: the driver orders the
 * instance after every earlier one still running).
 */
typedef uint32_t (*pto_access_fn)(const int64_t *idx, pto_task_access *out, uint32_t cap);

/* Site flags: PTO_SITE_BARRIER: its instances wait for every earlier one still running
 * (declared dependencies or a manual scope, without a table). */
#define PTO_SITE_BARRIER 1u
/* PTO_SITE_EARLY_RESOLVE: allow_early_resolve=True: its consumers may be staged on a core while it
 * runs (the device model's schedule; no effect on results or on host execution). */
#define PTO_SITE_EARLY_RESOLVE 2u

/* An intermediate: allocated in the ring heap before instance `first` is
 * submitted, reclaimed once every instance up to `last` has retired. */
typedef struct pto_scratch_desc {
    uint64_t bytes;
    uint32_t first, last;
} pto_scratch_desc;

/*
 * What the orchestration calls.  Each returns 0, or a negative status: the
 * program has failed (its message is set) and the orchestration returns
 * that status at once.
 *   submit       the next task instance, of site `site`, with its indices
 *   scope_begin  open a scope: its tasks stay in the task window (they do
 *   scope_end    not retire) until the scope ends (pl.manual_scope)
 *   fail         fail the program with message `msg` (a check of the
 *                orchestration's own, such as a pl.read index known only
 *                when it runs); returns -PTO_EINVAL
 */
typedef struct pto_orch_ops {
    int (*submit)(pto_orch *o, uint32_t site, const int64_t *idx);
    int (*scope_begin)(pto_orch *o);
    int (*scope_end)(pto_orch *o);
    int (*fail)(pto_orch *o, const char *msg);
} pto_orch_ops;

typedef struct pto_program_desc {
    uint32_t abi;                       /* PTO_PROGRAM_ABI */
    uint32_t nparams;                   /* launch arguments */
    uint32_t nsites, nscratch;
    const pto_task_site *sites;
    const pto_scratch_desc *scratch;
    /*
     * Task instances in submission order.  ninstances == 0: no table (the
     * program submits too many to expand at compile time); the driver then
     * resolves each instance's edges as it is submitted, from its site's
     * accesses (site_accesses, ABI 2; an ABI 1 program: each instance waits
     * for the one before it).  Otherwise instance i is of site
     * site_of[i] and waits for pred_ids[pred_off[i] .. pred_off[i + 1]),
     * all earlier instances.
     */
    uint32_t ninstances;
    uint32_t reserved;
    const uint32_t *site_of;
    const uint32_t *pred_off;
    const uint32_t *pred_ids;
    /* The orchestration: returns 0, or the status a failing ops call returned. */
    int (*orchestrate)(pto_orch *o, const pto_orch_ops *ops, void *const *args);
    /* ABI 2: per site, its accesses (NULL entry: order it after everything) and PTO_SITE_* flags. */
    const pto_access_fn *site_accesses;
    const uint32_t *site_flags;
} pto_program_desc;

#endif /* PTO_PROGRAM_H */
