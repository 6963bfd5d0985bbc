/*
 * device.c - open, close, info, status, synchronize, cancel, device stats.
 *
 * Phase: setup and teardown, plus the device-wide host calls.  The hot
 * paths live in submit.c, exec.c, sched.c, engines.c and completion.c.
 * Teardown cannot fail and cannot hang on a latch: close cancels everything
 * not started (releasing latches), waits for what runs on an engine, joins
 * the threads and frees every object still alive.
 */
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

void pto_device_config_init(pto_device_config *cfg)
{
    if (!cfg)
        return;
    /* The CPUs this thread may use, not the machine's: a pinned process gets threads that fit. */
    uint32_t cpus = pti_host_cpus();
    memset(cfg, 0, sizeof(*cfg));
    cfg->cores = cpus < 4 ? cpus : 4;
    cfg->copy_engines = cpus < 2 ? cpus : 2;
    cfg->aicpu_thread_num = 1;
    cfg->ring_task_window = 256;
    cfg->ring_heap = 0; /* unset: streams' argument heaps PTI_ARG_HEAP, programs' intermediates unbounded */
    cfg->ring_dep_pool = 64;
    cfg->trace = 0;
    cfg->trace_capacity = 65536;
    cfg->device_memory = 1ull << 30;
    cfg->spin_us = 200;
    cfg->host_first = PTO_HOST_FIRST_AUTO;
    cfg->inline_us = 50;
}

static int resolve_config(const pto_device_config *in, pto_device_config *out)
{
    pto_device_config def;
    pto_device_config_init(&def);
    *out = in ? *in : def;
#define DEFAULT(field)                                                                             \
    do {                                                                                           \
        if (out->field == 0)                                                                       \
            out->field = def.field;                                                                \
    } while (0)
    DEFAULT(cores);
    DEFAULT(copy_engines);
    DEFAULT(aicpu_thread_num);
    DEFAULT(ring_task_window);
    if (out->ring_heap == 0)
        out->ring_heap = PTI_ARG_HEAP;
    DEFAULT(ring_dep_pool);
    DEFAULT(trace_capacity);
    DEFAULT(device_memory);
    DEFAULT(spin_us);
    DEFAULT(inline_us);
#undef DEFAULT
    uint32_t w = out->ring_task_window;
    if (w & (w - 1))
        return pti_error(PTO_EINVAL, "pto_device_open: ring_task_window %u is not a power of two", w);
    if (w > (1u << 20))
        return pti_error(PTO_EINVAL, "pto_device_open: ring_task_window %u exceeds 2^20", w);
    if (out->cores > 1024 || out->copy_engines > 1024 || out->aicpu_thread_num > 64)
        return pti_error(PTO_EINVAL, "pto_device_open: too many threads (cores %u, copy engines %u, "
                         "schedulers %u)", out->cores, out->copy_engines, out->aicpu_thread_num);
    if (out->ring_heap < 8)
        return pti_error(PTO_EINVAL, "pto_device_open: ring_heap %u is below 8 bytes", out->ring_heap);
    if (out->device_memory < PTI_ALIGN)
        return pti_error(PTO_EINVAL, "pto_device_open: device_memory %llu is below %u bytes",
                         (unsigned long long)out->device_memory, PTI_ALIGN);
    if (out->spin_us > 1000000)
        return pti_error(PTO_EINVAL, "pto_device_open: spin_us %u exceeds one second", out->spin_us);
    if (out->host_first > PTO_HOST_FIRST_ALWAYS)
        return pti_error(PTO_EINVAL, "pto_device_open: host_first %u is not PTO_HOST_FIRST_AUTO, _OFF or "
                         "_ALWAYS", out->host_first);
    if (out->inline_us > 1000000)
        return pti_error(PTO_EINVAL, "pto_device_open: inline_us %u exceeds one second", out->inline_us);
    return 0;
}

/* Destroy the locks and condition variables that open initialised (teardown only). */
static void destroy_sync(pto_device *dev)
{
    pthread_mutex_destroy(&dev->sched_lock);
    pthread_cond_destroy(&dev->sched_cv);
    pthread_cond_destroy(&dev->host_cv);
    pthread_mutex_destroy(&dev->copy_lock);
    pthread_cond_destroy(&dev->copy_cv);
    pthread_mutex_destroy(&dev->core_lock);
    pthread_cond_destroy(&dev->core_cv);
    pthread_mutex_destroy(&dev->obj_lock);
    pthread_mutex_destroy(&dev->rung_lock);
}

/*
 * pto_device_open - open a device of the platform called platform (or an
 * alias of it), with the operations the platform table gives it.
 *
 * Returns 0 and *out, -PTO_EINVAL (bad config), -PTO_ENOTSUP (unknown
 * platform), -PTO_ENOMEM (arena, eventfd or threads).
 */
int pto_device_open(const char *platform, const pto_device_config *cfg, pto_device **out)
{
    if (!platform || !out)
        return pti_error(PTO_EINVAL, "pto_device_open: NULL argument");
    const char *name;
    const struct pto_platform_ops *ops = pti_platform_find(platform, &name);
    if (!ops)
        return -PTO_ENOTSUP;
    pto_device_config rc_cfg;
    int rc = resolve_config(cfg, &rc_cfg);
    if (rc)
        return rc;
    int count = ops->device_count();
    if (count < 0)
        return count;
    if (rc_cfg.device_id >= (uint32_t)count)
        return pti_error(PTO_EINVAL, "pto_device_open: device_id %u is out of range: platform %s has "
                         "devices 0..%d", rc_cfg.device_id, name, count - 1);
    pto_device *dev = pti_zalloc64(sizeof(*dev));
    if (!dev)
        return pti_error(PTO_ENOMEM, "pto_device_open: out of host memory");
    dev->cfg = rc_cfg;
    dev->cpus = pti_host_cpus();
    /*
     * Cores, copy engines, schedulers and the orchestration threads (as many
     * as schedulers, started with the first program loaded: until then, and
     * whenever they wait, they count as asleep, orch.c).
     */
    dev->n_dev_threads = rc_cfg.cores + rc_cfg.copy_engines + 2 * rc_cfg.aicpu_thread_num;
    atomic_init(&dev->asleep, rc_cfg.aicpu_thread_num);
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    dev->machine_cpus = online > 0 ? (uint32_t)online : 1;
    atomic_init(&dev->runnable, -1);
    atomic_init(&dev->runnable_ns, 0);
    atomic_init(&dev->host_cpu, -1);
    atomic_init(&dev->last_kept_ns, 0);
    atomic_init(&dev->kept_watchers, 0);
    /* Kept open: a pread costs a third of an open, read and close (engines.c, machine_runnable). */
    dev->loadavg_fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
    /* A program's intermediates: ring_heap bytes when set, else only device memory bounds them. */
    dev->program_heap = cfg ? cfg->ring_heap : 0;
    pti_strlcpy(dev->platform, name, sizeof(dev->platform));
    dev->ops = ops;
    dev->efd = -1;
    atomic_init(&dev->lost, 0);
    atomic_init(&dev->closing, 0);
    atomic_init(&dev->shutdown, 0);
    atomic_init(&dev->kick, 0);
    atomic_init(&dev->kick_served, 0);
    atomic_init(&dev->wakes, 0);
    atomic_init(&dev->kick_watchers, 0);
    atomic_init(&dev->rings_allocated, 0);
    atomic_init(&dev->sched_sleepers, 0);
    atomic_init(&dev->sched_signalled, 0);
    atomic_init(&dev->sched_sleep_until, 0);
    atomic_init(&dev->trace_enabled, rc_cfg.trace != 0);
    dev->trace_entries = rc_cfg.trace_capacity;
    pti_mutex_init(&dev->sched_lock);
    pti_cond_init(&dev->sched_cv);
    pti_cond_init(&dev->host_cv);
    pti_mutex_init(&dev->copy_lock);
    pthread_cond_init(&dev->copy_cv, NULL);
    pti_mutex_init(&dev->core_lock);
    pthread_cond_init(&dev->core_cv, NULL);
    pti_mutex_init(&dev->trace_lock);
    pti_mutex_init(&dev->obj_lock);
    pti_mutex_init(&dev->rung_lock);
    pti_link_init(&dev->events);
    pti_link_init(&dev->latches);
    pti_link_init(&dev->kernels);
    pti_link_init(&dev->programs);
    pti_link_init(&dev->ready);
    atomic_init(&dev->doorbell, NULL);
    pti_link_init(&dev->doomed);

    if ((rc = pti_mem_init(dev)))
        goto fail_mem;
    if ((rc = pti_cq_init(dev)))
        goto fail_cq;
    if ((rc = pti_peer_register(dev)))
        goto fail_register;
    if ((rc = dev->ops->engines_start(dev)))
        goto fail_threads;
    *out = dev;
    return 0;

fail_threads:
    pti_peer_unregister(dev);
fail_register:
    pti_cq_fini(dev);
fail_cq:
    pti_mem_fini(dev);
fail_mem:
    destroy_sync(dev);
    pthread_mutex_destroy(&dev->trace_lock); /* pti_trace_fini owns it once opened */
    if (dev->loadavg_fd >= 0)
        close(dev->loadavg_fd);
    free(dev);
    return rc;
}

/* Cancel every not-started command (sched_lock held); returns the count. */
static int cancel_locked(pto_device *dev)
{
    pti_latches_release_all(dev);
    int n = 0;
    for (size_t i = 0; i < dev->n_streams; i++)
        n += pti_stream_cancel_locked(dev, dev->streams[i]);
    if (dev->reap)
        pti_streams_reap(dev);
    pti_sched_kick(dev, true);
    return n;
}

/* Returns how many commands were dropped (each completes -PTO_ECANCELED). */
int pto_device_cancel(pto_device *dev)
{
    if (!dev)
        return pti_error(PTO_EINVAL, "pto_device_cancel: NULL device");
    pthread_mutex_lock(&dev->sched_lock);
    int n = cancel_locked(dev);
    pthread_mutex_unlock(&dev->sched_lock);
    return n;
}

static bool all_idle(pto_device *dev)
{
    for (size_t i = 0; i < dev->n_streams; i++) {
        pto_stream *s = dev->streams[i];
        if (!pti_stream_idle(s))
            return false;
    }
    return true;
}

void pto_device_close(pto_device *dev)
{
    if (!dev)
        return;
    atomic_store_explicit(&dev->closing, 1, memory_order_release);
    /*
     * Other devices first (peer.c): peer copies that run from now on find
     * this one gone, and waits of theirs on events no record will fill fail.
     */
    pti_peer_unregister(dev);
    pti_events_abandon_all(dev);
    pthread_mutex_lock(&dev->sched_lock);
    /*
     * Fence submitters: one that passed its closing check holds submit_lock
     * until its command is published.  (Taking submit_lock under sched_lock
     * is safe: no submitter takes sched_lock while holding submit_lock.)
     */
    for (size_t i = 0; i < dev->n_streams; i++) {
        pthread_mutex_lock(&dev->streams[i]->submit_lock);
        pthread_mutex_unlock(&dev->streams[i]->submit_lock);
    }
    cancel_locked(dev);
    /* Wait for commands running on engines; their completion broadcasts host_cv. */
    dev->host_waiters++;
    while (!all_idle(dev)) {
        cancel_locked(dev); /* whatever an engine completion unblocked */
        if (all_idle(dev))
            break;
        pti_cond_wait_until(&dev->host_cv, &dev->sched_lock, pto_now_ns() + 10000000ull);
    }
    dev->host_waiters--;
    pthread_mutex_unlock(&dev->sched_lock);
    /* A host thread that ran a command inline may still hand its engine back (engines.c, pti_host_run). */
    while (atomic_load(&dev->host_runners) > 0)
        sched_yield();

    dev->ops->engines_stop(dev);
    pti_programs_stop(dev);

    /*
     * Host threads still blocked in a wait (misuse, but it must not crash):
     * every stream is idle, so stream/device/event waits return; cq waits
     * see closing.  Let them all leave before anything is freed.
     */
    pthread_mutex_lock(&dev->sched_lock);
    while (dev->host_waiters > 0) {
        pthread_cond_broadcast(&dev->host_cv);
        pthread_mutex_unlock(&dev->sched_lock);
        sched_yield();
        pthread_mutex_lock(&dev->sched_lock);
    }
    pthread_mutex_unlock(&dev->sched_lock);
    pthread_mutex_lock(&dev->cq_lock);
    while (dev->cq_waiters > 0) {
        pthread_cond_broadcast(&dev->cq_cv);
        pthread_mutex_unlock(&dev->cq_lock);
        sched_yield();
        pthread_mutex_lock(&dev->cq_lock);
    }
    pthread_mutex_unlock(&dev->cq_lock);

    /* Everything below is single-threaded now. */
    while (dev->n_streams > 0)
        pti_stream_free_now(dev, dev->streams[dev->n_streams - 1]);
    pti_fences_fini(dev);
    free(dev->streams);
    free(dev->order);
    free(dev->rung);
    while (dev->events.next != &dev->events) {
        pto_event *e = PTI_CONTAINER(dev->events.next, pto_event, link);
        pto_event_destroy(e);
    }
    while (dev->latches.next != &dev->latches) {
        pto_latch *l = PTI_CONTAINER(dev->latches.next, pto_latch, link);
        pti_link_del(&l->link);
        free(l);
    }
    pti_programs_release_all(dev);
    pti_kernels_release_all(dev);
    pti_trace_fini(dev);
    pti_model_fini(dev);
    pti_cq_fini(dev);
    pti_mem_fini(dev);
    destroy_sync(dev);
    if (dev->loadavg_fd >= 0)
        close(dev->loadavg_fd);
    free(dev);
}

int pto_device_get_info(pto_device *dev, pto_device_info *out)
{
    if (!dev || !out)
        return pti_error(PTO_EINVAL, "pto_device_get_info: NULL argument");
    memset(out, 0, sizeof(*out));
    out->cores = dev->cfg.cores;
    out->copy_engines = dev->cfg.copy_engines;
    out->aicpu_thread_num = dev->cfg.aicpu_thread_num;
    out->ring_task_window = dev->cfg.ring_task_window;
    out->ring_heap = dev->cfg.ring_heap & ~7u;
    out->ring_dep_pool = dev->cfg.ring_dep_pool;
    out->trace = (uint32_t)atomic_load_explicit(&dev->trace_enabled, memory_order_relaxed);
    out->engines = dev->cfg.cores + dev->cfg.copy_engines;
    out->device_id = dev->cfg.device_id;
    out->device_memory = dev->arena_size;
    out->arena_base = (uint64_t)(uintptr_t)dev->arena;
    pti_strlcpy(out->platform, dev->platform, sizeof(out->platform));
    pti_model_info(dev, out);
    return 0;
}

int pto_device_status(pto_device *dev)
{
    if (!dev)
        return pti_error(PTO_EINVAL, "pto_device_status: NULL device");
    if (pti_dev_lost(dev))
        return pti_error(PTO_EDEVLOST, "device lost: %s", dev->lost_msg);
    if (atomic_load_explicit(&dev->closing, memory_order_acquire))
        return pti_error(PTO_ECLOSED, "device is closing");
    return 0;
}

/*
 * pto_device_synchronize - wait for every command queued so far.
 *
 * Returns 0, -PTO_ETIMEDOUT, -PTO_EDEVLOST.
 */
int pto_device_synchronize(pto_device *dev, int64_t timeout_us)
{
    if (!dev)
        return pti_error(PTO_EINVAL, "pto_device_synchronize: NULL device");
    uint64_t deadline = pti_deadline_after_us(timeout_us);
    int rc = 0;
    pthread_mutex_lock(&dev->sched_lock);
    size_t n = dev->n_streams;
    /* (id, target) per stream: a stream may be freed while we wait (pti_streams_reap). */
    uint32_t *ids = malloc((n ? n : 1) * sizeof(*ids));
    uint64_t *targets = malloc((n ? n : 1) * sizeof(*targets));
    if (!ids || !targets) {
        pthread_mutex_unlock(&dev->sched_lock);
        free(ids);
        free(targets);
        return pti_error(PTO_ENOMEM, "pto_device_synchronize: out of host memory");
    }
    for (size_t i = 0; i < n; i++) {
        ids[i] = dev->streams[i]->id;
        targets[i] = atomic_load_explicit(&dev->streams[i]->accepted, memory_order_acquire);
    }
    dev->host_waiters++;
    for (;;) {
        if (pti_dev_lost(dev)) {
            rc = pti_error(PTO_EDEVLOST, "pto_device_synchronize: device lost: %s", dev->lost_msg);
            break;
        }
        bool done = true;
        for (size_t i = 0; i < n && done; i++) {
            /* A stream freed meanwhile (destroyed, drained) has nothing left to wait for. */
            pto_stream *s = pti_stream_find(dev, ids[i]);
            if (s && atomic_load_explicit(&s->head, memory_order_relaxed) < targets[i])
                done = false;
        }
        if (done)
            break;
        if (pti_cond_wait_until(&dev->host_cv, &dev->sched_lock, deadline)) {
            rc = pti_error(PTO_ETIMEDOUT, "pto_device_synchronize: timed out after %lld us",
                           (long long)timeout_us);
            break;
        }
    }
    dev->host_waiters--;
    pthread_mutex_unlock(&dev->sched_lock);
    free(ids);
    free(targets);
    return rc;
}

int pto_device_get_stats(pto_device *dev, pto_device_stats *out)
{
    if (!dev || !out)
        return pti_error(PTO_EINVAL, "pto_device_get_stats: NULL argument");
#define LD(x) atomic_load_explicit(&dev->x, memory_order_relaxed)
    *out = (pto_device_stats){
        .commands_submitted = LD(st_submitted),
        .commands_completed = LD(st_completed),
        .cq_records = LD(st_cq_records),
        .cq_signals = LD(st_cq_signals),
        .cq_drains = LD(st_cq_drains),
        .canceled = LD(st_canceled),
        .launches = LD(st_launches),
        .copies = LD(st_copies),
        .bytes_h2d = LD(st_bytes_h2d),
        .bytes_d2h = LD(st_bytes_d2h),
        .bytes_d2d = LD(st_bytes_d2d),
        .bytes_peer = LD(st_bytes_peer),
        .idle_spins = LD(st_idle_spins),
        .idle_no_spin = LD(st_idle_no_spin),
        .engine_wakes = LD(st_engine_wakes),
        .engine_helps = LD(st_engine_helps),
        .inline_runs = LD(st_inline_runs),
        .host_first_checks = LD(st_host_first_checks),
        .task_batches = LD(st_task_batches),
        .tasks_queued = LD(st_tasks_queued),
        .sched_signals = LD(st_sched_signals),
        .idle_host_cpu = LD(st_idle_host_cpu),
        .spread_wakes = LD(st_spread_wakes),
        .rings_allocated = LD(rings_allocated),
    };
#undef LD
    pthread_mutex_lock(&dev->sched_lock);
    out->streams = dev->n_streams;
    out->sched_passes = dev->st_sched_passes;
    out->sched_visits = dev->st_sched_visits;
    pthread_mutex_unlock(&dev->sched_lock);
    return 0;
}
