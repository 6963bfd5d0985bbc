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

#define PTO_PROGRAM_ABI 1
#define PTO_PROGRAM_MAX_IDX 8   /* loop indices a task site may capture */

typedef struct pto_orch pto_orch;   /* a running program: the driver's, opaque */

typedef void (*pto_task_fn)(const pto_block *blk, void *const *args, const int64_t *idx);

typedef struct pto_task_site {
    const char *name;       /* the task's name (name_hint, or the kernel called) */
    pto_task_fn fn;
    uint32_t nidx;          /* loop indices it takes (<= PTO_PROGRAM_MAX_IDX) */
    uint32_t reserved;
} pto_task_site;

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
 */
typedef struct pto_orch_ops {
    int (*submit)(pto_orch *o, uint32_t site, const int64_t *idx);
    int (*scope_begin)(pto_orch *o);
    int (*scope_end)(pto_orch *o);
} pto_orch_ops;

typedef struct pto_program_desc {
    uint32_t abi;                       /* PTO_PROGRAM_ABI */
    uint32_t nparams;                   /* launch arguments */
    uint32_t nsites, nscratch;
    const pto_task_site *sites;
    const pto_scratch_desc *scratch;
    /*
     * Task instances in submission order.  ninstances == 0: no table (the
     * program submits too many to expand at compile time); each instance
     * then waits for the one before it.  Otherwise instance i is of site
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
} pto_program_desc;

#endif /* PTO_PROGRAM_H */
