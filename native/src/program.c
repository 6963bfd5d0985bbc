/*
 * program.c - program objects: load, unload, argument kinds, statistics.
 *
 * Phase: lifecycle.  A program is a shared object whose descriptor
 * (pypto_async/include/pto_program.h) lists its task sites, its
 * intermediates, the predecessor table of its task instances, and the
 * orchestration.  One PTO_CMD_PROGRAM command on a stream runs it once:
 * submit.c queues it (pto_stream_run_program) and orch.c runs it (the
 * orchestration threads, the tasks on the cores, the heap of
 * intermediates).  A program is refcounted: the host handle holds one
 * reference and every queued run (or graph node) one more; the last drop
 * unlinks and frees it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "pto_program.h"

/* ---- program objects -------------------------------------------------------------------------- */

static void program_free(pto_program *p)
{
    if (p->handle)
        p->dev->ops->kernel_unload(p->handle);
    pthread_mutex_destroy(&p->stats_lock);
    free(p->g_sites);
    free(p->g_off);
    free(p->g_pred);
    free(p->g_info);
    free(p->delay_us);
    free(p->site_ns);
    free(atomic_load_explicit(&p->kinds, memory_order_relaxed));
    free(p);
}

void pti_program_ref(pto_program *p)
{
    atomic_fetch_add_explicit(&p->refs, 1, memory_order_relaxed);
}

void pti_program_unref(pto_program *p)
{
    if (atomic_fetch_sub_explicit(&p->refs, 1, memory_order_acq_rel) != 1)
        return;
    pto_device *dev = p->dev;
    pthread_mutex_lock(&dev->obj_lock);
    pti_link_del(&p->link);
    pthread_mutex_unlock(&dev->obj_lock);
    program_free(p);
}

pto_device *pti_program_device(const pto_program *p)
{
    return p->dev;
}

uint32_t pti_program_nparams(const pto_program *p)
{
    return p->desc->nparams;
}

int pti_program_args_check(pto_program *p, const uint64_t *args, uint32_t nargs, const char *fn)
{
    char what[80];
    const struct pto_argkinds *ak = atomic_load_explicit(&p->kinds, memory_order_acquire);
    if (!ak)
        return 0;
    snprintf(what, sizeof(what), "program %s", p->name);
    return pti_args_check(p->dev, ak, args, nargs, fn, what);
}

/* Returns 0, -PTO_EINVAL, -PTO_ENOMEM (see pti_argkinds_set). */
int pto_program_set_arg_kinds(pto_program *p, const uint8_t *kinds, uint32_t nargs)
{
    if (!p)
        return pti_error(PTO_EINVAL, "pto_program_set_arg_kinds: NULL program");
    if (nargs != p->desc->nparams)
        return pti_error(PTO_EINVAL, "pto_program_set_arg_kinds: program %s takes %u arguments, not %u", p->name,
                         p->desc->nparams, nargs);
    return pti_argkinds_set(&p->kinds, kinds, nargs, "pto_program_set_arg_kinds", p->name);
}

bool pti_program_unloaded(pto_program *p)
{
    return atomic_load_explicit(&p->unloaded, memory_order_acquire) != 0;
}

void pti_programs_release_all(pto_device *dev)
{
    while (dev->programs.next != &dev->programs) {
        pto_program *p = PTI_CONTAINER(dev->programs.next, pto_program, link);
        pti_link_del(&p->link);
        program_free(p);
    }
}

static int check_desc(const pto_program_desc *d, const char *path)
{
    if (!d || d->abi < 1 || d->abi > PTO_PROGRAM_ABI)
        return pti_error(PTO_ELOAD, "pto_program_load: %s: program ABI %u, expected 1 to %u", path, d ? d->abi : 0,
                         PTO_PROGRAM_ABI);
    if (!d->orchestrate || (d->nsites && !d->sites) || (d->nscratch && !d->scratch))
        return pti_error(PTO_ELOAD, "pto_program_load: %s: incomplete program descriptor", path);
    for (uint32_t i = 0; i < d->nsites; i++)
        if (!d->sites[i].fn || !d->sites[i].name || d->sites[i].nidx > PTO_PROGRAM_MAX_IDX)
            return pti_error(PTO_ELOAD, "pto_program_load: %s: bad task site %u", path, i);
    if (d->ninstances) {
        if (!d->site_of || !d->pred_off || !d->pred_ids)
            return pti_error(PTO_ELOAD, "pto_program_load: %s: task table missing", path);
        for (uint32_t i = 0; i < d->ninstances; i++) {
            if (d->site_of[i] >= d->nsites || d->pred_off[i] > d->pred_off[i + 1])
                return pti_error(PTO_ELOAD, "pto_program_load: %s: bad task table at %u", path, i);
            for (uint32_t k = d->pred_off[i]; k < d->pred_off[i + 1]; k++)
                if (d->pred_ids[k] >= i)
                    return pti_error(PTO_ELOAD, "pto_program_load: %s: task %u waits for a later task", path, i);
        }
    }
    return 0;
}

int pto_program_load(pto_device *dev, const char *path, const char *symbol, pto_program **out)
{
    if (!dev || !path || !symbol || !out)
        return pti_error(PTO_EINVAL, "pto_program_load: NULL argument");
    if (strlen(symbol) >= 64)
        return pti_error(PTO_EINVAL, "pto_program_load: symbol name longer than 63 bytes");
    pto_kernel_fn fn;
    void *handle;
    int rc = dev->ops->kernel_load(path, symbol, &fn, &handle);
    if (rc)
        return rc;
    const pto_program_desc *(*get)(void);
    memcpy(&get, &fn, sizeof(get));
    const pto_program_desc *d = get();
    if ((rc = check_desc(d, path))) {
        dev->ops->kernel_unload(handle);
        return rc;
    }
    pto_program *p = calloc(1, sizeof(*p));
    if (p)
        p->delay_us = calloc(d->nsites ? d->nsites : 1, sizeof(*p->delay_us));
    if (p)
        p->site_ns = calloc(d->nsites ? d->nsites : 1, sizeof(*p->site_ns));
    if (!p || !p->delay_us || !p->site_ns) {
        if (p) {
            free(p->delay_us);
            free(p->site_ns);
        }
        free(p);
        dev->ops->kernel_unload(handle);
        return pti_error(PTO_ENOMEM, "pto_program_load: out of host memory");
    }
    p->dev = dev;
    p->handle = handle;
    p->desc = d;
    atomic_init(&p->refs, 1);
    atomic_init(&p->unloaded, 0);
    atomic_init(&p->kinds, NULL);
    pti_mutex_init(&p->stats_lock);
    pti_strlcpy(p->name, symbol, sizeof(p->name));
    pthread_mutex_lock(&dev->obj_lock);
    rc = pti_orch_start(dev);
    if (!rc)
        pti_link_add(&dev->programs, &p->link);
    pthread_mutex_unlock(&dev->obj_lock);
    if (rc) {
        p->handle = NULL;
        program_free(p);
        dev->ops->kernel_unload(handle);
        return rc;
    }
    atomic_fetch_add_explicit(&dev->loads_aicpu, 1, memory_order_relaxed);
    *out = p;
    return 0;
}

const char *pto_program_name(const pto_program *p)
{
    return p ? p->name : "";
}

void pto_program_unload(pto_program *p)
{
    if (!p)
        return;
    int expected = 0;
    if (atomic_compare_exchange_strong(&p->unloaded, &expected, 1))
        pti_program_unref(p);
}

void pti_program_count_run(pto_program *p, const pto_program_stats *run)
{
    pthread_mutex_lock(&p->stats_lock);
    p->st.runs += run->runs;
    p->st.tasks += run->tasks;
    if (run->window_hwm > p->st.window_hwm)
        p->st.window_hwm = run->window_hwm;
    if (run->dep_hwm > p->st.dep_hwm)
        p->st.dep_hwm = run->dep_hwm;
    if (run->heap_hwm > p->st.heap_hwm)
        p->st.heap_hwm = run->heap_hwm;
    p->st.window_waits += run->window_waits;
    p->st.dep_waits += run->dep_waits;
    p->st.heap_waits += run->heap_waits;
    p->st.inline_runs += run->inline_runs;
    pthread_mutex_unlock(&p->stats_lock);
}

int pto_program_get_stats(pto_program *p, pto_program_stats *out)
{
    if (!p || !out)
        return pti_error(PTO_EINVAL, "pto_program_get_stats: NULL argument");
    pthread_mutex_lock(&p->stats_lock);
    *out = p->st;
    pthread_mutex_unlock(&p->stats_lock);
    out->sites = p->desc->nsites;
    out->instances = p->desc->ninstances;
    return 0;
}

bool pti_program_records_edges(pto_program *p)
{
    return atomic_load_explicit(&p->record_edges, memory_order_relaxed);
}

void pti_program_keep_edges(pto_program *p, uint32_t ntasks, uint32_t *sites, uint32_t *off, uint32_t *pred,
                            uint32_t *info)
{
    pthread_mutex_lock(&p->stats_lock);
    uint32_t *old[4] = {p->g_sites, p->g_off, p->g_pred, p->g_info};
    p->g_tasks = ntasks;
    p->g_sites = sites;
    p->g_off = off;
    p->g_pred = pred;
    p->g_info = info;
    pthread_mutex_unlock(&p->stats_lock);
    for (int k = 0; k < 4; k++)
        free(old[k]);
}

int pto_program_record_edges(pto_program *p, int on)
{
    if (!p)
        return pti_error(PTO_EINVAL, "pto_program_record_edges: NULL program");
    atomic_store_explicit(&p->record_edges, on != 0, memory_order_relaxed);
    return 0;
}

const char *pto_program_site_name(const pto_program *p, uint32_t site)
{
    return p && site < p->desc->nsites ? p->desc->sites[site].name : NULL;
}

int pto_program_last_edges(pto_program *p, uint32_t *sites, uint32_t tasks_cap, uint32_t *edges,
                           uint32_t edges_cap, uint32_t *ntasks, uint32_t *nedges)
{
    if (!p || !ntasks || !nedges || (tasks_cap && !sites) || (edges_cap && !edges))
        return pti_error(PTO_EINVAL, "pto_program_last_edges: NULL argument");
    pthread_mutex_lock(&p->stats_lock);
    uint32_t n = p->g_tasks, m = n ? p->g_off[n] : 0;
    *ntasks = n;
    *nedges = m;
    if (n <= tasks_cap && m <= edges_cap) {
        memcpy(sites, p->g_sites, (size_t)n * sizeof(uint32_t));
        for (uint32_t i = 0; i < n; i++)
            for (uint32_t k = p->g_off[i]; k < p->g_off[i + 1]; k++) {
                uint32_t *e = &edges[(size_t)4 * k], info = p->g_info[k];
                e[0] = p->g_pred[k];
                e[1] = i;
                e[2] = info & 3u;
                e[3] = (info >> 2) ? (info >> 2) - 1 : UINT32_MAX;
            }
    }
    pthread_mutex_unlock(&p->stats_lock);
    return 0;
}

int pto_debug_task_delay(pto_program *p, const char *task, uint32_t us)
{
    if (!p || !task)
        return pti_error(PTO_EINVAL, "pto_debug_task_delay: NULL argument");
    int n = 0;
    for (uint32_t i = 0; i < p->desc->nsites; i++) {
        if (strcmp(p->desc->sites[i].name, task) == 0) {
            atomic_store_explicit(&p->delay_us[i], us, memory_order_relaxed);
            n++;
        }
    }
    if (!n)
        return pti_error(PTO_EINVAL, "pto_debug_task_delay: program %s has no task %s", p->name, task);
    return n;
}

int pto_device_get_load_counts(pto_device *dev, pto_load_counts *out)
{
    if (!dev || !out)
        return pti_error(PTO_EINVAL, "pto_device_get_load_counts: NULL argument");
    out->host_dlopen = atomic_load_explicit(&dev->loads_host, memory_order_relaxed);
    out->aicpu_dlopen = atomic_load_explicit(&dev->loads_aicpu, memory_order_relaxed);
    return 0;
}

/* ---- the program command (its row in cmddef.c; orch.c runs it) -------------------------- */

void pti_program_release(pto_device *dev, pto_stream *s, struct pto_cmd *cmd)
{
    pti_program_unref(cmd->u.prog.p);
}

const char *pti_program_cmd_name(const struct pto_cmd *cmd)
{
    return cmd->u.prog.p->name;
}
