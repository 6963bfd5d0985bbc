/*
 * pto_driver.h - the whole contract of the pypto_async native driver.
 *
 * Everything Python (or a C test) may call is declared here, between the
 * PTO_CDEF_BEGIN / PTO_CDEF_END markers; pypto_async/_ffi_build.py feeds
 * exactly that text to cffi's cdef, so the header is never copied by hand.
 * The private pieces live in native/src/internal.h.
 *
 * Conventions (liburing's):
 *   - Functions return int: 0 (or a count) on success, -PTO_E* on failure.
 *     They never report through errno.  A detail message for the last failure
 *     on the calling thread is available from pto_last_error().
 *   - A submission never blocks.  A full ring, heap or dependency pool is
 *     -PTO_EAGAIN; the caller decides how to wait (see pto_stream_space_left).
 *     A stream with its overflow on (pto_stream_set_overflow) accepts such a
 *     command anyway and returns PTO_QUEUED: the driver moves it into the
 *     ring as room frees, with no help from the caller.
 *   - A call's status is not the command's result.  A command's own outcome
 *     arrives later in its completion record (pto_completion.status).
 *   - No driver thread ever calls back into the host.  Completions are
 *     published into the completion queue and announced through an eventfd.
 *   - Teardown cannot fail: pto_device_close() returns void.
 *
 * Objects are opaque.  A pto_stream, pto_event, pto_kernel or pto_latch
 * belongs to the device it was created on and must not outlive it; closing
 * the device releases all of them.
 */
#ifndef PTO_DRIVER_H
#define PTO_DRIVER_H

#include <stddef.h>
#include <stdint.h>

#include "pto_kernel.h"

/* What the driver exports: the driver is built with -fvisibility=hidden and
 * native/pto_driver.map, so only what is declared between these pragmas
 * (pto_*) leaves the shared object; every pti_* stays inside it. */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

/* PTO_CDEF_BEGIN */

#define PTO_ABI_VERSION 3 /* 3: pto_work.fixpipe_bytes */

/* Status codes PTO_OK, PTO_EAGAIN ... PTO_ENOTSUP (functions return their
 * negation): pto_kernel.h, included above, which kernels see too. */

/* A submission's result (positive): accepted, waiting in the stream's overflow for ring room. */
#define PTO_QUEUED      1

/* Detail text for the last failing call on this thread ("" if none). */
const char *pto_last_error(void);
/* Short name of a status code ("PTO_EAGAIN"); accepts code or -code. */
const char *pto_status_name(int status);

/* CLOCK_MONOTONIC in nanoseconds: the clock of every driver timestamp. */
uint64_t pto_now_ns(void);
/* An empty function: the reference point for the cost of a cffi call. */
int pto_nop(void);

/* ---- device ------------------------------------------------------------ */

typedef struct pto_device pto_device;
typedef struct pto_stream pto_stream;
typedef struct pto_event pto_event;
typedef struct pto_kernel pto_kernel;
typedef struct pto_latch pto_latch;
typedef uint64_t pto_devptr;   /* a device address; 0 is never valid */

typedef struct pto_device_config {
    uint32_t cores;             /* compute-core threads; 0: min(4, CPUs of the opener's affinity) */
    uint32_t copy_engines;      /* copy-engine threads; 0: min(2, those CPUs) */
    uint32_t aicpu_thread_num;  /* scheduler threads; 0: 1 */
    uint32_t ring_task_window;  /* slots per stream ring, power of two; 0: 256 */
    uint32_t ring_heap;         /* argument bytes per stream (0: 64 KiB), and a program run's intermediates (0: unbounded) */
    uint32_t ring_dep_pool;     /* event-wait entries per stream; 0: 64 */
    uint32_t trace;             /* nonzero: record a trace record per command */
    uint32_t trace_capacity;    /* trace records kept; 0: 65536 (oldest dropped) */
    uint64_t device_memory;     /* arena bytes; 0: 1 GiB */
    /*
     * An idle engine per queue (and the scheduler) spins this long before
     * sleeping; 0: 200.  It spins only while a CPU is spare: the awake device
     * threads, itself included, plus one for the host fit the CPUs the opening
     * thread may run on (sched_getaffinity), so on one CPU nothing spins; the
     * thread is not on the CPU of the host thread that last submitted or
     * waited (sched_getcpu; counted in idle_host_cpu); and the machine's
     * runnable threads fit its CPUs (/proc/loadavg; plus one for the host
     * while its CPU is unknown), so nothing spins on a loaded machine, and
     * beside a busy host only on another CPU of an otherwise idle machine.
     */
    uint32_t spin_us;
    uint32_t device_id;         /* which device of the platform, 0 .. pto_device_count() - 1 */
    /*
     * The host comes first: a host thread whose submission lands on an idle
     * stream, and a host thread blocked in pto_cq_wait / pto_wait_token, runs
     * short queued work itself (in a sleeping engine's stead, under its name)
     * instead of waking a device thread: a copy or memset of at most
     * inline_us x 4 KiB, a launch whose blocks took under inline_us together
     * last time (never the builtin spin), a program's tiny task.
     * PTO_HOST_FIRST_AUTO (0, the default): only while no CPU is spare for
     * the host (see spin_us), when a device thread's wake-up would take
     * turns with the host; _OFF: never; _ALWAYS: whenever the work is short,
     * as if no CPU were ever spare (device threads then also run the next
     * command of the other engine kind themselves rather than wake one).
     */
    uint32_t host_first;
    uint32_t inline_us;         /* what "short" means above; 0: 50 */
} pto_device_config;

#define PTO_HOST_FIRST_AUTO 0
#define PTO_HOST_FIRST_OFF 1
#define PTO_HOST_FIRST_ALWAYS 2

typedef struct pto_device_info {
    uint32_t cores, copy_engines, aicpu_thread_num;
    uint32_t ring_task_window, ring_heap, ring_dep_pool;
    uint32_t trace;
    uint32_t engines;           /* cores + copy_engines; engine ids: cores first */
    uint32_t device_id;         /* pto_device_config.device_id */
    uint32_t reserved;
    uint64_t device_memory;
    uint64_t arena_base;        /* device address of the first arena byte */
    char platform[16];
    /* The device model (pto_device_set_profile): 1 while device times are modeled, else 0 (host). */
    uint32_t timing_model;
    uint32_t model_cores;       /* modeled cores: AIC 0 .. model_aic-1, then AIV (0: host timing) */
    uint32_t model_aic;
    uint32_t model_copy_engines; /* modeled copy engines, numbered after the modeled cores */
} pto_device_info;

/* Fill cfg with the defaults (all zero means "default" too). */
void pto_device_config_init(pto_device_config *cfg);

/*
 * Open a device.  platform: "sim" ("a2a3sim" and "a5sim" are aliases).
 * cfg may be NULL for the defaults.  Returns 0 and *out, -PTO_EINVAL for a
 * bad config (ring_task_window not a power of two, ...), -PTO_ENOTSUP for an
 * unknown platform, -PTO_ENOMEM if the arena cannot be mapped.
 */
int pto_device_open(const char *platform, const pto_device_config *cfg, pto_device **out);

/*
 * Close a device: cancel every queued command (each with a token completes
 * -PTO_ECANCELED, released latches included), wait for commands already
 * running on an engine to finish, join every thread, unload kernels, unmap
 * memory.  Never fails, never hangs on a latch.  dev is invalid afterwards.
 */
void pto_device_close(pto_device *dev);

int pto_device_get_info(pto_device *dev, pto_device_info *out);

/* 0 while healthy; -PTO_EDEVLOST once lost (sticky); -PTO_ECLOSED if closing. */
int pto_device_status(pto_device *dev);

/*
 * Block until every command queued so far on every stream has completed, or
 * timeout_us passes (< 0: no limit).  Returns 0, -PTO_ETIMEDOUT, or
 * -PTO_EDEVLOST.  Runs without the GIL (cffi releases it).
 */
int pto_device_synchronize(pto_device *dev, int64_t timeout_us);

/*
 * Cancel every command not yet started, on every stream: each completes
 * with -PTO_ECANCELED, latches are released.  Returns how many were dropped.
 */
int pto_device_cancel(pto_device *dev);

/* ---- the device model (model.c) --------------------------------------------
 *
 * With a profile set, every device timestamp the driver reports (completion
 * records' start/end, event times, trace records' start/end/engine, engine
 * statistics) is modeled device time, not the host's wall clock: each
 * modeled core, copy engine and the orchestrator has a clock, a command
 * starts at the latest of its stream predecessor's modeled end, its waits'
 * ends, its engine's free time and its submission (host wall time, the
 * same nanosecond origin), and lasts what its work (pto_work, copies' bytes)
 * costs on the profile's pipes.  Results are unchanged: execution stays
 * real on the host threads.  docs/device_model.md has the model and its limits.
 */
typedef struct pto_device_profile {
    uint32_t aic_cores;             /* cube cores (AIC) */
    uint32_t aiv_cores;             /* vector cores (AIV) */
    uint32_t copy_engines;          /* DMA engines serving the host link and GM copies */
    uint32_t reserved;
    double clock_ghz;               /* core clock: cycles per ns */
    double pickup_us;               /* a task's or block's [dispatch, start] on its core */
    double orch_us_per_task;        /* the orchestrator's cost to submit one program task */
    double min_kernel_us;           /* the least a kernel or task takes (one with no counted work) */
    double gm_gbps;                 /* GM (HBM) bandwidth: device-to-device copies, memsets */
    double host_link_gbps;          /* host <-> device link: h2d, d2h (and peer copies) */
    double host_link_latency_us;    /* per host-link copy */
    double transfer_granule_bytes;  /* a load or store row costs at least this many bytes */
    double mte2_bytes_per_cycle;    /* loads GM -> on-chip, per core */
    double mte1_bytes_per_cycle;    /* moves between on-chip buffers */
    double mte3_bytes_per_cycle;    /* stores on-chip -> GM */
    double fixpipe_bytes_per_cycle; /* cube results out of L0C (pto_work.fixpipe_bytes) */
    double vec_bytes_per_cycle[3];  /* per PTO_VEC_* class */
    double cube_macs_per_cycle[3];  /* per PTO_CUBE_* input dtype */
} pto_device_profile;

/*
 * Model device time from now on with *profile (copied), or report the host's
 * wall clock (NULL: the default).  Only before the device's first command.
 * Returns 0, -PTO_EINVAL (a figure out of range, or commands were submitted
 * already; the message names it), -PTO_ENOMEM.
 */
int pto_device_set_profile(pto_device *dev, const pto_device_profile *profile);
/*
 * The modeled duration in ns of one block or task that did *work on a core of
 * the profile (0 if none is set): what the driver charges for it.
 */
uint64_t pto_model_work_ns(pto_device *dev, const pto_work *work);

/* ---- device memory -------------------------------------------------------- */

typedef struct pto_mem_stats {
    uint64_t capacity;          /* arena bytes */
    uint64_t in_use;            /* bytes in live allocations (rounded sizes) */
    uint64_t reserved;          /* in_use + bytes whose stream-ordered free is still queued */
    uint64_t peak;              /* high-water mark of reserved */
    uint64_t allocations;       /* live allocations */
    uint64_t pending_frees;     /* frees queued but not executed */
    uint64_t largest_free;      /* largest free extent (fragmentation view) */
    uint64_t alloc_failures;    /* allocations that returned -PTO_ENOMEM */
} pto_mem_stats;

/*
 * Allocate size bytes (> 0), aligned to 256, for use on stream s (NULL: no
 * stream; only blocks whose free has executed are eligible).  A block freed
 * on s whose free is still queued may be handed out at once when that free
 * was ordered behind s's own work only (s had no event wait pending when the
 * free was submitted); any other block becomes eligible only once its free
 * has executed.  Returns 0 and *out, -PTO_EINVAL for size 0, -PTO_ENOMEM when
 * no extent fits (never a silent malloc).
 */
int pto_mem_alloc(pto_device *dev, uint64_t size, pto_stream *s, pto_devptr *out);

/* Free now, not stream-ordered: only for blocks no queued work touches. */
int pto_mem_free(pto_device *dev, pto_devptr ptr);

/* Size of the live allocation starting at ptr, or -PTO_EINVAL. */
int pto_mem_size(pto_device *dev, pto_devptr ptr, uint64_t *out);

/*
 * The live allocation that holds device address addr: its start and
 * (rounded) size.  O(log allocations).  Returns 0, or -PTO_EINVAL if addr
 * lies in no live allocation (errno-style: no message is set).
 */
int pto_mem_lookup(pto_device *dev, pto_devptr addr, pto_devptr *base, uint64_t *len);

int pto_mem_get_stats(pto_device *dev, pto_mem_stats *out);

/* Host pointer for a device address (the sim arena is host memory). */
void *pto_mem_host_ptr(pto_device *dev, pto_devptr ptr);

/* ---- streams ------------------------------------------------------------- */

typedef struct pto_stream_stats {
    uint32_t id;
    int32_t priority;
    uint32_t window;            /* ring slots (ring_task_window) */
    uint32_t in_flight;         /* commands queued, not yet completed */
    uint32_t window_hwm;        /* high-water mark of in_flight */
    uint32_t heap_bytes;        /* argument heap size */
    uint32_t heap_hwm;          /* high-water mark of heap bytes in use */
    uint32_t dep_entries;       /* dependency pool size */
    uint32_t dep_hwm;           /* high-water mark of dependency entries in use */
    uint32_t overflow;          /* commands accepted and waiting in the overflow for ring room */
    uint32_t overflow_hwm;      /* high-water mark of overflow */
    uint32_t ring_allocated;    /* 1 once its ring and heap exist (its first submission), else 0 */
    uint64_t submitted;         /* commands accepted (monotonic: the timeline) */
    uint64_t completed;         /* commands finished, in order */
    uint64_t refused;           /* submissions the ring had no room for (-PTO_EAGAIN or PTO_QUEUED) */
    uint64_t refills;           /* overflow refills that moved commands into the ring: batches of at
                                   least a quarter of the ring while it is not empty (overflow.c) */
} pto_stream_stats;

/*
 * Create a stream.  Larger priority is scheduled first when several stream
 * heads are ready.  Returns 0 and *out, -PTO_ENOMEM, -PTO_EDEVLOST.
 */
int pto_stream_create(pto_device *dev, int priority, pto_stream **out);

/*
 * Destroy a stream.  Work already queued still runs and completes; the
 * stream's memory is released once its ring is empty.  s is invalid
 * afterwards.  Never blocks.
 */
void pto_stream_destroy(pto_stream *s);

uint32_t pto_stream_id(const pto_stream *s);
/*
 * Free ring slots.  Without the overflow, a submission now succeeds only if
 * this is > 0; with it, commands waiting in the overflow take freed slots
 * first.
 */
uint32_t pto_stream_space_left(const pto_stream *s);
/*
 * Sequence numbers.  Every accepted command gets the next one; it is in the
 * ring (on the device) once submitted >= its seq, done once completed >= it.
 */
/* Sequence number of the last command accepted, in the ring or the overflow (0: none yet). */
uint64_t pto_stream_accepted(const pto_stream *s);
/* Sequence number of the last command that entered the ring. */
uint64_t pto_stream_submitted(const pto_stream *s);
/* Number of commands completed, in order: command n is done iff completed >= n. */
uint64_t pto_stream_completed(const pto_stream *s);
int pto_stream_get_stats(const pto_stream *s, pto_stream_stats *out);

/*
 * The overflow.  With it on (off for a new stream), a command that finds no
 * room in s's ring (a slot, ring-heap bytes or a dependency entry), or finds
 * commands waiting in the overflow already, is accepted anyway: it gets its
 * sequence number, failure epoch and any injected failure now, and the
 * submission returns PTO_QUEUED.  It keeps a private copy of its launch
 * arguments and enters the ring in order as commands complete and free room,
 * on whatever thread completes them: no host call is needed for a backlog to
 * reach the device.  Refills wait for a quarter of the ring (at least one
 * slot) to be free, unless the ring is empty.  Turning it off while commands
 * wait in it is -PTO_EINVAL.  Returns 0.
 */
int pto_stream_set_overflow(pto_stream *s, int on);
/*
 * Withdraw commands first..last (sequence numbers; a command group queued
 * back to back) if none of them has entered the ring yet: each then completes
 * -PTO_ECANCELED without running when its turn comes (a free still reclaims
 * its block), and the commands after them run as if they had succeeded.
 * Returns 1 if withdrawn, 0 if the first one is in the ring already (nothing
 * changed: it is on the device), -PTO_EINVAL for a range not accepted.
 */
int pto_stream_cancel_queued(pto_stream *s, uint64_t first, uint64_t last);
/*
 * Withdraw the commands of s whose tokens lie in first..last (a command
 * group's, queued back to back), in the ring or the overflow, if none of
 * them has started (on an engine, or held by the scheduler on a delay or
 * latch; a wait blocked on its event has not).  Atomic with the scheduler:
 * a command either runs fully or is skipped, never both.  Each withdrawn
 * command completes -PTO_ECANCELED without running when its turn comes (its
 * record, if it has a token, says so; a free still reclaims its block; a
 * wait still waits for its event first, so later commands stay ordered
 * behind it), and the commands after them run as if they had succeeded:
 * later commands on s, events recorded after them, and streams waiting on
 * those.  Returns how many were withdrawn; 0 if none was found, one has
 * started, or one records an event (nothing changed); -PTO_EINVAL for a bad
 * range.
 */
int pto_stream_cancel_tokens(pto_stream *s, uint64_t first, uint64_t last);

/*
 * Failure epochs.  The epoch of s counts its failures observed so far (see
 * "Failure propagation" below).  A host that holds a command back on a host
 * condition before submitting it reads the epoch when it queues the command
 * and backdates the submission to it: the driver then judges the command as
 * if it had been submitted then (queued behind a failure observed since, it
 * fails as a dependent).  pto_stream_backdate(s, e) applies to every command
 * accepted on s until the next call; PTO_EPOCH_NOW ends it.  The caller keeps
 * other submitters off s meanwhile.  Returns 0.
 */
#define PTO_EPOCH_NOW 0xffffffffffffffff
uint64_t pto_stream_epoch(const pto_stream *s);
int pto_stream_backdate(pto_stream *s, uint64_t epoch);

/*
 * Block until everything queued on s so far completed, or timeout_us passes
 * (< 0: no limit).  Returns 0, -PTO_ETIMEDOUT, -PTO_EDEVLOST.  Does not
 * report the commands' own statuses.
 */
int pto_stream_synchronize(pto_stream *s, int64_t timeout_us);

/*
 * Commands.  Each takes a token: nonzero means "push a completion record
 * with this token when the command finishes"; 0 means no record.
 * Each returns 0 when queued in the ring, PTO_QUEUED when queued in the
 * overflow (see pto_stream_set_overflow), -PTO_EAGAIN when the ring/heap/dep
 * pool is full and the overflow is off (nothing was queued), -PTO_EINVAL for
 * a bad argument (nothing was queued), -PTO_ENOMEM (the overflow could not
 * grow), -PTO_EDEVLOST, -PTO_ECLOSED.  Commands on one stream start in order
 * and each starts only after the previous one completed.
 *
 * Failure propagation: when a command fails, its record carries its own
 * status; every later command on that stream, and every command on another
 * stream that waits on an event recorded after the failure, completes with
 * -PTO_EDEP and cause_token naming the first failure; the records of the
 * failure and of its dependents carry its fail_id.  Once the host has
 * delivered the failure to its user and said so (pto_completion_observe
 * with the failure's record or a dependent's), the stream is healthy again
 * for commands accepted from then on (the epoch of s moves on); commands
 * accepted before, in the ring or the overflow, still fail as dependents.
 * Draining records (pto_cq_drain / pto_wait_token) observes nothing, so the
 * rule does not depend on when the host drains.  A failure never delivered
 * (a token-less command's, or one nobody looks at) keeps the stream failing
 * until a dependent's record is.
 *
 * Host pointers passed to copies must stay valid until the command
 * completes; the driver reads and writes them in place (no staging).
 *
 * Device ranges of copies and memsets: a range that is not inside the arena
 * is refused at submit with -PTO_EINVAL (nothing queued); a range inside the
 * arena that does not lie within one allocation when the command executes
 * (live, or freed by a stream-ordered free that has not executed yet) makes
 * the command fail with -PTO_EFAULT.  Launch arguments are checked at submit
 * when the kernel or program declared their kinds (pto_kernel_set_arg_kinds):
 * a tensor argument that is not inside an allocation (live, or freed by a
 * stream-ordered free not executed yet) is -PTO_EINVAL, nothing queued.
 */
int pto_stream_copy_h2d(pto_stream *s, pto_devptr dst, const void *src, uint64_t nbytes, uint64_t token);
int pto_stream_copy_d2h(pto_stream *s, void *dst, pto_devptr src, uint64_t nbytes, uint64_t token);
int pto_stream_copy_d2d(pto_stream *s, pto_devptr dst, pto_devptr src, uint64_t nbytes, uint64_t token);
int pto_stream_memset(pto_stream *s, pto_devptr dst, uint8_t value, uint64_t nbytes, uint64_t token);

/*
 * Launch kernel k over `blocks` blocks (>= 1), spread over the compute cores.
 * args[0..nargs) are copied into the stream's ring heap at submit; each is a
 * device address or the raw bits of a scalar.  The launch fails with the
 * first block's blk->fail code (-PTO_EKERNEL etc.) and message.
 */
int pto_stream_launch(pto_stream *s, pto_kernel *k, uint32_t blocks,
                      const uint64_t *args, uint32_t nargs, uint64_t token);

/*
 * Record e: e completes once everything queued on s before it completes.  The
 * recording is taken when the command is accepted (in the overflow too), so a
 * wait submitted afterwards, on any stream, waits for this one.
 */
int pto_stream_record(pto_stream *s, pto_event *e, uint64_t token);
/*
 * Record e as an ordering point only: like pto_stream_record, but e (and this
 * command's record) complete healthy even when s has failed, so streams that
 * wait on it are ordered behind s's earlier work without inheriting its
 * failure.  For points that stand for no result, such as an allocation.
 * Cancel and device loss still fail it; an injected failure
 * (pto_debug_fail_next) passes it by and hits the next command.
 */
int pto_stream_record_ordering(pto_stream *s, pto_event *e, uint64_t token);
/*
 * Make s wait (on the device) for e as recorded at the time of this call.
 * e may belong to another device of the same platform (a cross-device
 * wait: see "Several devices" below).  On a stream whose earlier command failed, the wait still waits for e and
 * then completes -PTO_EDEP, so work ordered behind it stays ordered.
 * Waiting on an event never recorded is a no-op.  Uses one dep-pool entry
 * from entering the ring until it executes.
 */
int pto_stream_wait_event(pto_stream *s, pto_event *e, uint64_t token);
/*
 * The commands of an edge the caller inferred (automatic ordering), not ones
 * its user asked for: as pto_stream_record and pto_stream_wait_event, except
 * that injected failures (pto_debug_fail_next) pass them by and hit the next
 * command.
 */
int pto_stream_record_edge(pto_stream *s, pto_event *e, uint64_t token);
int pto_stream_wait_edge(pto_stream *s, pto_event *e, uint64_t token);
/*
 * pto_stream_wait_event for an event of s's own device, quiet: the token gets
 * a completion record only when the wait fails itself (PTO_CQ_FIRST_FAILURE:
 * a failure the event carries, or an injected one), as the wait of
 * pto_stream_wait_stream.  A failure it carries reaches s's later commands
 * as -PTO_EDEP, as after pto_stream_wait_event.
 */
int pto_stream_wait_event_quiet(pto_stream *s, pto_event *e, uint64_t token);
/*
 * An edge between two streams of one device, in one call: s waits for
 * everything queued on src so far, as after pto_stream_record_edge(src, e, 0)
 * and pto_stream_wait_edge(s, e, token), except that nothing is queued on
 * src: the point is a fence, src's last accepted command, which src's
 * completion of it fills as a record there would be (its failure, its
 * time); e only names the edge in traces (its own recording is left
 * alone).  If src's work is done and healthy, nothing is queued at all.
 * The wait is quiet: its token gets a completion record only when the wait
 * itself fails, with PTO_CQ_FIRST_FAILURE (a failure the fence carries;
 * delivering it, or a dependent's record, observes it and the failure on
 * src it came from, and lets s run again).  A failure on src before the
 * point reaches s's later commands as -PTO_EDEP naming it, as with an
 * explicit wait.  Returns 0, or PTO_QUEUED (the wait went to s's
 * overflow), or a negative error.  (PTO_EDGE_SRC_QUEUED, the record once
 * queued on src going to its overflow, is no longer returned.)
 */
#define PTO_EDGE_SRC_QUEUED 2
int pto_stream_wait_stream(pto_stream *s, pto_stream *src, pto_event *e, uint64_t token);
/*
 * pto_stream_launch(s, k, blocks, args, nargs, token) after everything
 * queued on src so far, in one call and one command: the launch carries the
 * edge inline (a fence of src, as pto_stream_wait_stream's), and the
 * scheduler holds it until the fence is done; a failure the fence carries
 * is the launch's own (-PTO_EDEP naming src's failure, with
 * PTO_CQ_FIRST_FAILURE).  edge_token is not used (no wait command).
 * Nothing is queued unless the launch is valid.  Returns 0, PTO_QUEUED (the
 * launch went to s's overflow), or a negative error.
 */
#define PTO_EDGE_WAIT_QUEUED 4
int pto_stream_launch_after(pto_stream *s, pto_stream *src, pto_event *e, uint64_t edge_token,
                            pto_kernel *k, uint32_t blocks, const uint64_t *args, uint32_t nargs,
                            uint64_t token);
/* Stream-ordered free of an allocation (see pto_mem_alloc for reuse). */
int pto_stream_free(pto_stream *s, pto_devptr ptr, uint64_t token);
/* A command that does nothing but complete its token in order. */
int pto_stream_notify(pto_stream *s, uint64_t token);
/* Hold the stream (scheduler-side, no engine busy) for delay_us microseconds. */
int pto_stream_delay(pto_stream *s, uint64_t delay_us, uint64_t token);

/* ---- events ---------------------------------------------------------------- */

/* Returns 0 and *out, -PTO_ENOMEM. */
int pto_event_create(pto_device *dev, pto_event **out);
/* Destroy e; pending waits on it already queued still behave as recorded. */
void pto_event_destroy(pto_event *e);
/*
 * 1: the recorded work completed (or e was never recorded);
 * 0: still pending; <0: the recorded work failed (-PTO_EDEP, -PTO_EDEVLOST...).
 */
int pto_event_query(pto_event *e);
/* Block until e completes or timeout_us passes; returns what query then says, or -PTO_ETIMEDOUT. */
int pto_event_synchronize(pto_event *e, int64_t timeout_us);
/* Completion time of e in ns (0: not complete). */
uint64_t pto_event_timestamp_ns(const pto_event *e);
/* ms from a's completion to b's; -PTO_EAGAIN if either is not complete. */
int pto_event_elapsed_ms(const pto_event *a, const pto_event *b, double *out_ms);

/* ---- kernels --------------------------------------------------------------- */

/* dlopen path and resolve symbol.  Returns 0, -PTO_ELOAD (message says why). */
int pto_kernel_load(pto_device *dev, const char *path, const char *symbol, pto_kernel **out);
/*
 * Built-in kernels, for tests, benchmarks and the demo (n is an element count
 * passed as a scalar argument; tensors are float32 device addresses):
 *   "noop"      (no args)                      does nothing
 *   "fill_f32"  (out, value_bits, n)            out[i] = value (float bits in the low 32 bits)
 *   "add_f32"   (a, b, out, n)                  out = a + b
 *   "axpy_f32"  (alpha_bits, x, y, n)           y = alpha*x + y
 *   "spin"      (us)                            busy for `us` microseconds per block
 *   "fail"      (code)                          fails the launch with code (0: PTO_EKERNEL)
 *   "reduce"    (dst, src, n, op, dtype)        dst = op(dst, src) elementwise; op 0 sum, 1 max,
 *                                               2 min (NaN propagates), 3 prod; dtype 0 f32, 1 f64,
 *                                               2 i32, 3 i64, 4 f16 (each op rounded to half)
 * Blocks split [0, n) into contiguous chunks.  Each reports its work to the
 * device model (blk->work): one load row per input chunk and one store row
 * per output chunk, and its vector result bytes (simple class: an add, a
 * fill; axpy's mul and add twice that); noop, spin and fail report none (the
 * model's min_kernel_us: spin's busy time is the host's).  Returns 0,
 * -PTO_EINVAL (unknown name).
 */
int pto_kernel_builtin(pto_device *dev, const char *name, pto_kernel **out);
/* Name of the kernel (its symbol). */
const char *pto_kernel_name(const pto_kernel *k);

/* Argument kinds (pto_kernel_set_arg_kinds, pto_program_set_arg_kinds). */
#define PTO_ARG_SCALAR  0   /* the raw 64 bits of a scalar */
#define PTO_ARG_TENSOR  1   /* a device address */
/*
 * Declare what k's arguments are: kinds[i] for argument i, nargs of them.
 * From then on every launch of k (pto_stream_launch, pto_stream_launch_after,
 * a graph's launch at each replay, checked before the replay queues
 * anything) must pass at least nargs arguments (any after them are not
 * checked), each PTO_ARG_TENSOR one the
 * address of a byte inside an allocation of k's device (live, or freed by a
 * stream-ordered free not executed yet), else it is refused with
 * -PTO_EINVAL naming the argument and nothing is queued: a kernel never sees
 * an address outside device memory.  The check is one lock and a binary
 * search per tensor argument.  A kernel whose kinds were never declared is
 * not checked; the built-in kernels come declared.  Declaring the same kinds
 * again changes nothing; different ones are -PTO_EINVAL.  Returns 0,
 * -PTO_EINVAL, -PTO_ENOMEM.
 */
int pto_kernel_set_arg_kinds(pto_kernel *k, const uint8_t *kinds, uint32_t nargs);
/*
 * Declare how k uses its arguments, for pto_stream_launch_ordered:
 * access[i] is PTO_HZ_READ and/or PTO_HZ_WRITE for a tensor argument, 0 for
 * a scalar (nargs of them).  Declared once; the same again changes nothing,
 * different ones are -PTO_EINVAL (that caller orders its launches another
 * way).  Returns 0, -PTO_EINVAL, -PTO_ENOMEM.
 */
int pto_kernel_set_arg_access(pto_kernel *k, const uint8_t *access, uint32_t nargs);
/* Unload once no queued launch references k.  Never blocks. */
void pto_kernel_unload(pto_kernel *k);

/* ---- programs (program.c) ------------------------------------------------ */

/*
 * A program: an orchestration and its tasks in one shared object (see
 * pypto_async/include/pto_program.h).  pto_stream_run_program queues one
 * command that runs it once: the orchestration runs on the device's
 * orchestration threads (aicpu_thread_num), each task it submits runs on a
 * free compute core once the tasks its compiled table names have
 * completed, concurrently with the orchestration and with other tasks.
 * The device config's rings bound a run: ring_task_window task slots,
 * ring_heap bytes of intermediates, ring_dep_pool dependency entries; when
 * one is full the orchestration waits for tasks to retire.  The command
 * fails with the first failing task's status and "task NAME: message" (its
 * dependents do not run; independent tasks do), or with -PTO_EINVAL /
 * -PTO_ENOMEM naming the knob when a ring can never make room (a scope
 * holding more tasks than the window; intermediates past ring_heap).
 */
typedef struct pto_program pto_program;

typedef struct pto_program_stats {
    uint32_t sites;             /* task sites (kernel call sites) */
    uint32_t instances;         /* task instances per run in the compiled table (0: no table) */
    uint64_t runs;              /* runs completed */
    uint64_t tasks;             /* task instances submitted, all runs */
    uint32_t window_hwm;        /* most task slots in use at once */
    uint32_t dep_hwm;           /* most dependency entries in use at once */
    uint64_t heap_hwm;          /* most intermediate bytes placed at once */
    uint64_t window_waits;      /* times the orchestration waited for a task slot */
    uint64_t dep_waits;         /* ... for a dependency entry */
    uint64_t heap_waits;        /* ... for ring-heap bytes */
    uint64_t inline_runs;       /* runs orchestrated at once by the thread that started them (small, never waiting) */
} pto_program_stats;

/* Load the program whose descriptor function is symbol in the library at path: 0, -PTO_ELOAD, -PTO_ENOMEM. */
int pto_program_load(pto_device *dev, const char *path, const char *symbol, pto_program **out);
const char *pto_program_name(const pto_program *p);
/* Unload once no queued run references p.  Never blocks. */
void pto_program_unload(pto_program *p);
/*
 * Declare p's argument kinds (PTO_ARG_*; nargs must be its parameter count):
 * as pto_kernel_set_arg_kinds, for pto_stream_run_program and a graph's
 * program runs.  Returns 0, -PTO_EINVAL, -PTO_ENOMEM.
 */
int pto_program_set_arg_kinds(pto_program *p, const uint8_t *kinds, uint32_t nargs);
int pto_program_get_stats(pto_program *p, pto_program_stats *out);
/*
 * Keep (on != 0) or stop keeping the edges p's runs resolve at submission
 * (a program without a compiled table): the last completed run's graph is
 * then pto_program_last_edges's.  Returns 0, -PTO_EINVAL.
 */
int pto_program_record_edges(pto_program *p, int on);
/*
 * The graph p's last recorded run resolved: *ntasks instances (sites[i]: the
 * site of instance i) and *nedges edges, 4 words each, in order of (dst,
 * src): src, dst (dst waited for src), hazard (PTO_TASK_RAW, _WAW, _WAR, or
 * PTO_TASK_DECLARED: an order without a tensor) and the args slot of that hazard's tensor
 * (UINT32_MAX: none).  Copies them only when both fit tasks_cap and
 * edges_cap (else only the counts: call again with room).  No run recorded:
 * 0 and 0.  Returns 0, -PTO_EINVAL.
 */
int pto_program_last_edges(pto_program *p, uint32_t *sites, uint32_t tasks_cap, uint32_t *edges,
                           uint32_t edges_cap, uint32_t *ntasks, uint32_t *nedges);
/* The name of p's task site (its kernel call site), or NULL past its sites. */
const char *pto_program_site_name(const pto_program *p, uint32_t site);
/*
 * Run p once with args[0..nargs) (its parameters: device addresses or
 * scalar bits), like pto_stream_launch: same returns, same ordering.
 */
int pto_stream_run_program(pto_stream *s, pto_program *p, const uint64_t *args, uint32_t nargs,
                           uint64_t token);

/* Libraries loaded so far: kernels (pto_kernel_load) and programs (pto_program_load). */
typedef struct pto_load_counts {
    uint64_t host_dlopen;
    uint64_t aicpu_dlopen;
} pto_load_counts;
int pto_device_get_load_counts(pto_device *dev, pto_load_counts *out);

/* ---- task edges: which task instance of a program waits for which ------ */

/*
 * The one rule ordering a program's task instances.  The compiler calls it
 * for a program's table (pypto_async/ir/_deps.py); the driver resolves a
 * program without a table by the same pair rule at submission (orch.c).
 *
 * Two accesses to one tensor conflict when their windows overlap and one of
 * them writes: a read after a write waits for it (PTO_TASK_RAW), a write
 * after a write (PTO_TASK_WAW), a write after a read (PTO_TASK_WAR); read
 * after read never waits.  A window is a box, [lo, hi) per dimension, or
 * the whole tensor; two boxes overlap when lo < the other's hi in every
 * dimension, both ways (so an empty box may overlap), and a box covers
 * another that lies within it; boxes of different ranks overlap and neither
 * covers the other.  A write that covers
 * an earlier access ends that access's history (a later conflict with it is
 * implied through the writer), so a reader waits for the last writer of its
 * window, not for the writers before.  A manual task (inside a manual
 * scope) waits only for its declared dependencies, and its writes end no
 * history.  Every edge goes from an earlier task to a later one.
 *
 * Tasks are added in submission order, in batches; a table keeps each
 * tensor's live accesses indexed by region, so the cost is linear in the
 * tasks and the edges found.
 */
typedef struct pto_task_deps pto_task_deps;
#define PTO_TASK_READ     1   /* an access's flags: it reads the tensor */
#define PTO_TASK_WRITE    2   /* ... writes it */
#define PTO_TASK_WHOLE    4   /* ... the whole tensor (its ndim must be 0) */
#define PTO_TASK_MANUAL   1   /* a task's flags: inside a manual scope */
#define PTO_TASK_DECLARED 0   /* an edge's hazard: a declared dependency */
#define PTO_TASK_RAW      1
#define PTO_TASK_WAW      2
#define PTO_TASK_WAR      3
#define PTO_TASK_MAX_DIMS 64  /* window dimensions an access may carry */
typedef struct pto_task_edge {
    uint32_t src, dst;      /* dst waits for src (src < dst) */
    uint32_t hazard;        /* PTO_TASK_DECLARED, _RAW, _WAW or _WAR (the first conflict found) */
    uint32_t tensor;        /* the tensor of that conflict; UINT32_MAX for a declared edge */
} pto_task_edge;

/* Returns 0 and *out, -PTO_ENOMEM. */
int pto_task_deps_create(pto_task_deps **out);
void pto_task_deps_destroy(pto_task_deps *d);
/*
 * Add the next ntasks task instances (ids continue from the tasks added
 * before).  tasks: 3 words per task: its accesses, its declared
 * dependencies, its flags (PTO_TASK_MANUAL).  deps: the declared
 * dependencies (earlier task ids), task by task.  acc: 3 words per access,
 * task by task: tensor (an id below 2^24), flags (PTO_TASK_READ | _WRITE |
 * _WHOLE), ndim.  bounds: per access with a window, lo[0..ndim) then
 * hi[0..ndim).  Returns the edges found and not yet taken, or -PTO_EINVAL
 * (nothing added: a dependency not on an earlier task, a bad access),
 * -PTO_ENOMEM.  Each task's edges are found in order of src.
 */
int pto_task_deps_add(pto_task_deps *d, uint32_t ntasks, const uint32_t *tasks, const uint32_t *deps,
                      const uint32_t *acc, const int64_t *bounds);
/* Move up to cap found edges, in order of (dst, src), to out; returns how many. */
int pto_task_deps_take(pto_task_deps *d, pto_task_edge *out, uint32_t cap);
/* Counts: [0] tasks added, [1] earlier accesses looked at (all region lookups), [2] the most one lookup looked at. */
void pto_task_deps_counts(pto_task_deps *d, uint64_t *out);


/* ---- completion queue -------------------------------------------------- */

typedef struct pto_completion {
    uint64_t token;
    int32_t status;             /* 0 or -PTO_E* */
    uint32_t stream_id;
    uint64_t seq;               /* the command's sequence number on its stream */
    uint64_t submit_ns, start_ns, end_ns;
    uint64_t cause_token;       /* for -PTO_EDEP/-PTO_EDEVLOST: the first failure's token (0: unknown) */
    uint32_t flags;             /* PTO_CQ_* */
    uint32_t fail_id;           /* the stream failure this record is or depends on (0: none) */
    char message[104];          /* failure text, "" on success */
} pto_completion;

/*
 * pto_completion.flags: this record is its stream's first failure.
 * Dependents' records (-PTO_EDEP behind it) do not carry the flag; they
 * carry its fail_id, as it does.
 */
#define PTO_CQ_FIRST_FAILURE 1

/*
 * Observing a failure.  A stream's first failure fails every later command
 * on it as a dependent until the failure is observed; commands accepted
 * after the observation run normally ("Failure propagation" below).  The
 * failure is observed when the host delivers it to its user: it raises the
 * record's error, or a dependent's, and calls this with that record.
 * Draining records (pto_cq_drain, pto_wait_token) observes nothing, so when
 * the host drains never changes which commands fail.  A failure that is
 * never delivered (its records never retrieved, or a token-less command's)
 * keeps the stream failing until a dependent's record is.  A failure that
 * reached c's stream through an event wait (the wait failed on its own,
 * carrying another stream's failure) observes the failure it came from too,
 * along the chain of such waits (on this device).
 * Returns 1 if c's failure was observed now, 0 if there was nothing to
 * observe (a success, a cancel or lost device, a failure observed already or
 * superseded), -PTO_EINVAL for NULL.
 */
int pto_completion_observe(pto_device *dev, const pto_completion *c);

/*
 * The eventfd that is readable while completion records are ready.  The
 * driver owns it; do not read or close it.
 */
int pto_cq_fd(pto_device *dev);
/* Records ready to drain. */
uint32_t pto_cq_ready(pto_device *dev);
/*
 * Move up to max ready records into out, oldest first.  Returns the count
 * (0 if none).  If records remain, the fd stays readable; once the queue is
 * empty the fd is reset.  Never blocks.
 */
int pto_cq_drain(pto_device *dev, pto_completion *out, uint32_t max);
/*
 * pto_cq_drain, except that the fd is never reset: it stays readable (if it
 * was) after the queue is left empty, and pushes meanwhile find it signalled
 * and write nothing.  For a host that drains in line on the thread whose
 * event loop watches the fd, as it awaits each command: that loop's next look
 * finds the fd readable, and its pto_cq_drain (of 0 or more records) resets
 * it.  Saves the two system calls (the push's write, the drain's read) that
 * each record drained so would cost.  A spurious readable fd is the only
 * difference: no record is ever stranded behind a reset fd.
 */
int pto_cq_drain_keep(pto_device *dev, pto_completion *out, uint32_t max);
/*
 * Block until a record is ready or timeout_us passes: 0, -PTO_ETIMEDOUT
 * (also -PTO_EDEVLOST / -PTO_ECLOSED when none is ready and the device is
 * lost / closing).
 */
int pto_cq_wait(pto_device *dev, int64_t timeout_us);
/*
 * Block until the command with this token has completed (records still in
 * the queue count; records already drained are unknown here), or timeout_us
 * passes.  Returns 0 and copies its record into *out (the record stays in the
 * queue for pto_cq_drain), or -PTO_ETIMEDOUT (also -PTO_EDEVLOST /
 * -PTO_ECLOSED when the record is not there and the device is lost /
 * closing; -PTO_EINVAL for token 0).  For threads without an event loop;
 * cffi releases the GIL for the call.
 */
int pto_wait_token(pto_device *dev, uint64_t token, int64_t timeout_us, pto_completion *out);

/* ---- trace ----------------------------------------------------------------- */

#define PTO_CMD_H2D     1
#define PTO_CMD_D2H     2
#define PTO_CMD_D2D     3
#define PTO_CMD_MEMSET  4
#define PTO_CMD_LAUNCH  5
#define PTO_CMD_BLOCK   6   /* one block of a launch, on one core */
#define PTO_CMD_RECORD  7
#define PTO_CMD_WAIT    8
#define PTO_CMD_FREE    9
#define PTO_CMD_NOTIFY  10
#define PTO_CMD_DELAY   11
#define PTO_CMD_LATCH   12
#define PTO_CMD_PEER    13  /* a copy between this device and another (pto_stream_copy_peer) */
#define PTO_CMD_PROGRAM 14  /* a whole program run (pto_stream_run_program), on the scheduler */
#define PTO_CMD_TASK    15  /* one task of a program, on one core: name is the task's, block its instance */

#define PTO_ENGINE_NONE -1     /* ran on the scheduler */

typedef struct pto_trace_record {
    uint64_t token;
    uint64_t seq;
    uint64_t bytes;             /* copies and memsets */
    uint64_t submit_ns, start_ns, end_ns;
    uint64_t event_id;          /* record/wait: the event (flow arrows); else 0 */
    uint32_t stream_id;
    int32_t engine;             /* 0..cores-1: core; cores..: copy engine; -1: scheduler
                                   (a launch: the core that finished its last block) */
    uint32_t kind;              /* PTO_CMD_* */
    uint32_t block;             /* PTO_CMD_BLOCK: block index */
    int32_t status;
    uint32_t reserved;
    char name[48];              /* kernel name, or "h2d", "d2h", ... */
    /*
     * start_ns / end_ns / engine above are device time: modeled with a
     * profile set (engine: a modeled core, AIC first, or copy engine, or
     * -1), else the host's.  These are always the host's wall clock and the
     * host thread that ran it (the same values without a profile).
     */
    uint64_t host_start_ns, host_end_ns;
    uint64_t dispatch_ns;       /* device time the command or task was handed to its engine (start - pickup) */
    int32_t host_engine;
    uint32_t reserved2;
} pto_trace_record;

/* Turn tracing on or off at run time. */
void pto_trace_enable(pto_device *dev, int on);
/* Move up to max trace records into out, oldest first; returns the count. */
int pto_trace_read(pto_device *dev, pto_trace_record *out, uint32_t max);
/* Records lost because the trace buffer was full. */
uint64_t pto_trace_dropped(pto_device *dev);

/* ---- engine statistics ------------------------------------------------------ */

typedef struct pto_engine_stats {
    int32_t engine;
    uint32_t is_copy;           /* 0: compute core, 1: copy engine */
    uint64_t busy_ns;
    uint64_t commands;          /* blocks (cores) or copies (copy engines) run */
    uint64_t bytes;             /* copy engines: bytes moved */
} pto_engine_stats;

typedef struct pto_device_stats {
    uint64_t commands_submitted, commands_completed;
    uint64_t cq_records;        /* completion records pushed */
    uint64_t cq_signals;        /* eventfd writes (wake-ups offered) */
    uint64_t cq_drains;         /* pto_cq_drain calls that returned records */
    uint64_t canceled;
    uint64_t launches, copies, bytes_h2d, bytes_d2h, bytes_d2d;
    uint64_t bytes_peer;        /* peer copies run on this device's copy engines, either direction */
    uint64_t sched_passes;      /* scheduler passes run (by any thread) */
    uint64_t sched_visits;      /* streams those passes looked at: only streams with work */
    uint64_t idle_spins;        /* idle device threads that spun (spin_us) before sleeping */
    uint64_t idle_no_spin;      /* ... that slept at once: no CPU spare for the host (see spin_us) */
    uint64_t engine_wakes;      /* sleeping engines (cores, copy engines) signalled for queued work */
    uint64_t streams;           /* streams open (or destroyed with work left) */
    uint64_t rings_allocated;   /* of those, streams with a ring: one has its ring from its first submission */
    uint64_t engine_helps;      /* runs a device thread ran in a sleeping engine's stead (no wake-up, engines.c) */
    uint64_t inline_runs;       /* runs a host thread ran itself (pto_device_config.host_first) */
    /*
     * Host-first choices (PTO_HOST_FIRST_AUTO) a host thread made by asking
     * whether a CPU is spare (the device's threads, /proc/loadavg): only when
     * short work is queued for an engine, never for a submission that queues
     * none (a notify, a record).
     */
    uint64_t host_first_checks;
    /*
     * Pushes of ready program tasks to the core queue, and the tasks they
     * carried: a table program's tasks that are ready at its start go as one
     * push (one lock, one wake-up decision), as do the successors one
     * completion makes ready.
     */
    uint64_t task_batches, tasks_queued;
    /* Signals to a sleeping scheduler thread (kicks nobody watched, deadlines, backstop arming). */
    uint64_t sched_signals;
    /*
     * Idle spins refused (or cut short) because the device thread was on the
     * CPU of the host thread that last submitted or waited: a spinner there
     * only takes turns with the host.
     */
    uint64_t idle_host_cpu;
    /* Sleeping cores signalled for a burst of tiny tasks a host thread runs with a CPU spare (engines.c). */
    uint64_t spread_wakes;
} pto_device_stats;

int pto_engine_get_stats(pto_device *dev, int32_t engine, pto_engine_stats *out);
int pto_device_get_stats(pto_device *dev, pto_device_stats *out);

/* ---- several devices (peer.c) ------------------------------------------ */

/*
 * Devices of a platform are numbered 0 .. count - 1 and opened by
 * pto_device_config.device_id (an id out of range is -PTO_EINVAL).  The sim
 * offers 8, or what the environment variable PYPTO_ASYNC_SIM_DEVICES says
 * (1..1024).  Each open device of the sim is a separate arena with its own
 * engines, in one process.  Returns the count, -PTO_ENOTSUP for an unknown
 * platform, -PTO_EINVAL for a bad PYPTO_ASYNC_SIM_DEVICES.
 */
int pto_device_count(const char *platform);

/*
 * A peer copy: nbytes from src on src_dev to dst on dst_dev, one of which is
 * s's device, as one command on s (run by s's device's copy engines), in
 * order with s's other commands and failing like any command (failure
 * propagation as above).  The other device must be of the same platform
 * (else -PTO_ENOTSUP: stage through the host) and stay open until the copy
 * has run; one closed before it runs fails the copy with -PTO_ECLOSED.
 * Ranges are checked as for pto_stream_copy_d2d, each on its own device.
 * The other device's streams are not ordered by it: order them with
 * events (pto_stream_wait_event accepts another device's event).
 */
int pto_stream_copy_peer(pto_stream *s, pto_device *dst_dev, pto_devptr dst, pto_device *src_dev,
                         pto_devptr src, uint64_t nbytes, uint64_t token);

/*
 * Cross-device waits.  pto_stream_wait_event(s, e) with e of another device
 * of the same platform makes s wait, on the device, for e's recording; no
 * host round trip.  If the recorded work failed, the wait fails as its
 * stream's first failure with -PTO_EDEP (its own token as cause: tokens of
 * the other device mean nothing here) and s's later commands fail as
 * dependents.  If e's device is closed before the recorded work completed,
 * or cancels that work (pto_device_cancel), the wait fails with
 * -PTO_ECLOSED instead of hanging.
 *
 * pto_event_reserve(e): the host will record e later (the record is still
 * held on the host): waits queued from now on, on any stream of any device,
 * wait for that next recording of e.  Until then e counts as pending; if e
 * is destroyed first those waits fail (-PTO_ECANCELED), and if its device
 * closes first they fail with -PTO_ECLOSED.  Reserving a reserved event
 * changes nothing.  Returns 0, -PTO_ENOMEM.
 */
int pto_event_reserve(pto_event *e);

/* ---- test hooks ---------------------------------------------------------- */

/*
 * A latch holds every stream that reaches a pto_stream_latch_wait on it until
 * the host releases it (or its timeout passes: those waits then fail with
 * -PTO_ETIMEDOUT; timeout_us <= 0: no limit).  Releasing is sticky: later
 * waits pass at once.  Returns 0 and *out, -PTO_ENOMEM.
 */
int pto_latch_create(pto_device *dev, int64_t timeout_us, pto_latch **out);
int pto_stream_latch_wait(pto_stream *s, pto_latch *l, uint64_t token);
/* Release l: the streams it holds move on, in priority order, before this returns. */
void pto_latch_release(pto_latch *l);
/* Destroy l (releasing it first). */
void pto_latch_destroy(pto_latch *l);
/*
 * How many waits on l timed out instead of being released (a test that meant
 * to release l in time is wrong if this is nonzero).  Final once
 * pto_latch_release(l) returned.  Returns 0 for NULL.
 */
int pto_latch_expired(pto_latch *l);

/*
 * The next `count` commands accepted on s (in the ring or the overflow)
 * fail with -status (status > 0, default PTO_EFAULT when 0) instead of
 * running.  A command that fails as a dependent anyway uses one up;
 * ordering-only records (pto_stream_record_ordering) do not count.
 */
int pto_debug_fail_next(pto_stream *s, int status, uint32_t count);
/* The next `count` pto_mem_alloc calls on dev return -PTO_ENOMEM. */
int pto_debug_fail_alloc(pto_device *dev, uint32_t count);
/*
 * Every task of p named `task` holds its core us microseconds before its
 * body runs (0: off): a delay kernel inside a program.  Returns how many task sites
 * matched, or -PTO_EINVAL if none.
 */
int pto_debug_task_delay(pto_program *p, const char *task, uint32_t us);
/* Mark the device lost now, with msg as the first failure. */
int pto_debug_lose_device(pto_device *dev, const char *msg);

/* ---- graphs (graph.c) ---------------------------------------------------------
 *
 * A graph is a recorded step: commands on a few streams, the event edges
 * between them, and argument slots that each replay fills in.  Build it once
 * (pto_graph_add_*), instantiate it (validate and size), then replay it any
 * number of times: one pto_graph_replay call queues every command on the
 * streams the caller passes, with the bound addresses patched in, and one
 * completion record (the replay's token) ends the whole replay.
 *
 * Streams are slots 0..n-1 (slot 0: the origin, where a replay starts and
 * ends; every graph has it, so an empty graph replays on one stream as a
 * no-op whose record arrives in order there, as CUDA's empty graphs do).  Events are graph-local indices; the graph creates and owns them.
 * Inputs are graph-local indices too; pto_graph_patch names which argument
 * of which command takes an input's address.
 *
 * Tokens.  A replay with token T gives command i (in the order the commands
 * were added) the tag T + 1 + i, and the few commands of its own (the
 * staging copies of host-bound inputs, its ordering behind the previous
 * replay) the tag T + 1 + commands: a command pushes no completion record of
 * its own, except when it is its stream's first failure; that record carries
 * its tag, and the replay's record (T), a -PTO_EDEP behind it, names the tag
 * as cause_token.  Delivering the replay's record (pto_completion_observe)
 * observes the origin's failure and, through the joins it came by, the
 * failed fork's.
 * Trace records of a replay's commands carry their tags.  A host that maps
 * tokens to owners reserves T .. T + 1 + pto_graph_get_info().commands
 * (T .. T + 2 + commands for pto_graph_replay_ordered, hazards below).
 *
 * A graph belongs to its device; destroy it before closing the device.
 * Building and replaying one graph is for one thread at a time.
 */

typedef struct pto_graph pto_graph;

/* pto_graph_patch fields for copies (a launch's or program's fields are its argument indices). */
#define PTO_GRAPH_DST 0xffffffffu
#define PTO_GRAPH_SRC 0xfffffffeu
/* How a launch uses a patched argument (copies: implied by the field). */
#define PTO_GRAPH_READ  1u
#define PTO_GRAPH_WRITE 2u

typedef struct pto_graph_info {
    uint32_t commands;          /* commands added (what a replay queues, less its own few) */
    uint32_t streams;           /* stream slots used (highest + 1; at least 1, the origin) */
    uint32_t events;            /* graph-local events */
    uint32_t inputs;            /* inputs declared */
    uint32_t launches;          /* of the commands, kernel launches and program runs */
    uint32_t instantiated;      /* nonzero once pto_graph_instantiate succeeded */
} pto_graph_info;

/* Returns 0 and *out, -PTO_EINVAL, -PTO_ENOMEM. */
int pto_graph_create(pto_device *dev, pto_graph **out);
/* Destroy g (replays already queued still run: they hold what they use). */
void pto_graph_destroy(pto_graph *g);
int pto_graph_get_info(const pto_graph *g, pto_graph_info *out);

/*
 * Add a command on stream slot `slot`; each returns the command's index
 * (>= 0) or -PTO_EINVAL (graph instantiated already, bad argument),
 * -PTO_ENOMEM.  Arguments are as for the pto_stream_* call of the same name;
 * a device address that an input patches may be 0 here.
 */
int pto_graph_add_launch(pto_graph *g, uint32_t slot, pto_kernel *k, uint32_t blocks,
                         const uint64_t *args, uint32_t nargs);
/*
 * A program run (pto_stream_run_program): one command however many tasks
 * it holds.  Its fields for pto_graph_patch are its argument indices, as a
 * launch's.  A task that fails fails the command, and so the replay, with
 * the task's "task NAME: message".
 */
int pto_graph_add_program(pto_graph *g, uint32_t slot, pto_program *p, const uint64_t *args, uint32_t nargs);
/* kind: PTO_CMD_H2D, PTO_CMD_D2H or PTO_CMD_D2D (a host side is a host address). */
int pto_graph_add_copy(pto_graph *g, uint32_t slot, uint32_t kind, uint64_t dst, uint64_t src,
                       uint64_t nbytes);
int pto_graph_add_memset(pto_graph *g, uint32_t slot, uint64_t dst, uint8_t value, uint64_t nbytes);
/* Record graph event `event` on slot; wait on slot for it (recorded by an earlier command). */
int pto_graph_add_record(pto_graph *g, uint32_t slot, uint32_t event);
int pto_graph_add_wait(pto_graph *g, uint32_t slot, uint32_t event);
/* Wait for e as recorded when the replay queues this command (an event outside the graph). */
int pto_graph_add_wait_external(pto_graph *g, uint32_t slot, pto_event *e);

/* Declare an input of nbytes; returns its index. */
int pto_graph_add_input(pto_graph *g, uint64_t nbytes);
/*
 * Argument `field` of command `cmd` (a launch's argument index, or
 * PTO_GRAPH_DST / PTO_GRAPH_SRC of a copy or memset) takes input `input`'s
 * address at replay; use: PTO_GRAPH_READ and/or PTO_GRAPH_WRITE for a
 * launch (ignored for copies).  Returns 0, -PTO_EINVAL.
 */
int pto_graph_patch(pto_graph *g, uint32_t cmd, uint32_t field, uint32_t input, uint32_t use);

/*
 * Validate g and size it: every wait's event is recorded by an earlier
 * command, every input is patched somewhere; create the graph's events.
 * Returns 0, -PTO_EINVAL (message says what), -PTO_ENOMEM.  No command
 * can be added afterwards.
 */
int pto_graph_instantiate(pto_graph *g);

/*
 * Whether input i must be given a device address at replay even when it is
 * bound to a host array: 1 if a launch uses it (the replay stages the host
 * array through that device buffer: an H2D before the graph's commands if
 * anything reads it, a D2H after them if anything writes it), 0 if only
 * copies use it (they copy to or from the host array directly).
 */
int pto_graph_input_staged(const pto_graph *g, uint32_t input);

/*
 * Replay g on streams[0..nstreams) (nstreams == the graph's streams; each of
 * g's device, with its overflow on).  dev_ptrs[i] is input i's device address (a host-bound input
 * that is staged: its staging buffer; a host-bound copy-only input: 0);
 * host_ptrs (NULL: all inputs device-bound) holds a host address for each
 * input bound to a host array, else 0.  Host memory must stay valid until
 * the replay's record arrives.  Everything is checked before anything is
 * queued (-PTO_EINVAL, -PTO_EDEVLOST, -PTO_ECLOSED; nothing queued).
 *
 * The commands go in the order they were added, each judged as if accepted
 * when the replay began (a failure observed meanwhile does not let the rest
 * of the replay run on its results).  Replays of one graph run one after
 * another: a replay whose origin stream differs from the previous replay's
 * first waits on the device for that one.  Returns 0 if the replay's last
 * command (on the origin) went into its ring, PTO_QUEUED if it waits in the
 * overflow (commands of other streams may wait in theirs either way).  A
 * device lost or closing part way returns its error; what was queued runs
 * or is canceled, and no record with token comes.
 */
int pto_graph_replay(pto_graph *g, pto_stream *const *streams, uint32_t nstreams,
                     const uint64_t *dev_ptrs, const uint64_t *host_ptrs, uint32_t ninputs,
                     uint64_t token);

/* ---- hazards: automatic ordering of device memory across streams (hazard.c) ----
 *
 * A pto_hazards table orders accesses to allocations (by device address)
 * across streams of one device: a read waits for the allocation's last
 * write (RAW); a write waits for the last write (WAW) and for the reads
 * since it (WAR); a read never waits for a read; one stream's commands are
 * ordered already.  Positions are the callers' command tokens, handed out in
 * submission order.  Per allocation the table keeps the last write and one
 * read per stream since it; per stream, for every other stream, the largest
 * position of a failure-carrying point it waits for (directly or through
 * the points those waited for): an edge that is implied already is skipped.
 * An edge is a fence of the source stream's tail (pto_stream_wait_stream's:
 * no command queued there) and a quiet wait for it, or the launch itself
 * (pto_hazards_launch): a failure before it reaches the later stream as a
 * dependency failure, as with an explicit wait.  The
 * table is not locked: one thread at a time (the caller's lock).
 */
typedef struct pto_hazards pto_hazards;
typedef struct pto_hz_mark pto_hz_mark;
#define PTO_HZ_READ     1   /* the access reads the allocation */
#define PTO_HZ_WRITE    2   /* ... writes it */
#define PTO_HZ_MANUAL   4   /* noted, but ordered by the caller (nothing waits for it here) */
typedef struct pto_hz_access {
    pto_devptr addr;        /* the allocation's base address */
    uint32_t flags;         /* PTO_HZ_* */
    uint32_t pad;
} pto_hz_access;
typedef struct pto_hz_edge {
    uint32_t src;           /* the stream to wait for (its id) */
    uint32_t index;         /* with exact: the access whose allocation's last write it follows */
    uint64_t pos;           /* the latest of its accesses the edge covers */
    uint64_t exact;         /* 0: wait for src's tail; else the position of a point right after
                             * that write (the caller's event) that covers the edge */
} pto_hz_edge;
#define PTO_HZ_DECLINED 8   /* pto_hazards_launch: not taken (nothing queued or changed) */

/* Returns 0 and *out, -PTO_ENOMEM. */
int pto_hazards_create(pto_device *dev, pto_hazards **out);
/* Destroy the table (before its device); edges already queued stay. */
void pto_hazards_destroy(pto_hazards *hz);
/* Register stream s (0, -PTO_EINVAL, -PTO_ENOMEM). */
int pto_hazards_stream(pto_hazards *hz, pto_stream *s);
/* Stream sid was closed; the fold point (pto_hazards_set_fold) waits for its work from position folded. */
void pto_hazards_stream_closed(pto_hazards *hz, uint32_t sid, uint64_t folded);
/* Stream sid's driver stream is destroyed: no edge is queued from it any more. */
void pto_hazards_stream_gone(pto_hazards *hz, uint32_t sid);
/* Whether stream sid is still named by the table (a record or a registration): 1 or 0. */
int pto_hazards_known(pto_hazards *hz, uint32_t sid);
/* The fold point: a stream that waits for every closed stream's work; reads of closed streams fold into it. */
void pto_hazards_set_fold(pto_hazards *hz, uint32_t sid);
/* Whether stream sid holds work on the host, ahead of what reached the driver (pto_hazards_launch declines). */
void pto_hazards_set_held(pto_hazards *hz, uint32_t sid, int held);
/*
 * Whether an edge from stream src to stream sid can be queued now as a fence
 * of src's tail (pto_hazards_queue_edge): both registered and live, src not
 * closed, neither held on the host.  1 or 0.
 */
int pto_hazards_fenceable(pto_hazards *hz, uint32_t sid, uint32_t src);
/*
 * Decide the edges of one call on stream sid with accesses acc[0..n): the
 * streams to wait for, in the order to queue them, at most max into
 * edges[].  Changes nothing but the skipped count.  Returns how many edges
 * are needed (may be > max: call again with room), or -PTO_EINVAL.
 */
int pto_hazards_order(pto_hazards *hz, uint32_t sid, const pto_hz_access *acc, uint32_t n,
                      pto_hz_edge *edges, uint32_t max);
/*
 * A table of points: the same rule, for a recording (a graph capture) whose
 * edges the caller records itself, each a wait for the point right after
 * the earlier access (not for that stream's tail).  Streams are registered
 * as for any table (pto_hazards_stream); positions are the recording's
 * (distinct, in recording order); nothing is ever queued.  Returns 0 and
 * *out, -PTO_EINVAL, -PTO_ENOMEM.
 */
int pto_hazards_create_points(pto_device *dev, pto_hazards **out);
/*
 * Decide only (a table of points): the edges of one call on stream sid
 * with accesses acc[0..n) at position pos, at most max into edges[] (src,
 * and pos: the latest access of src the edge covers; the caller waits for
 * the point right after it).  With room for them all, sid waits for them
 * (its clock takes each point's, as at that access, and src's pos + 1),
 * they are counted, and the accesses are noted at pos; with too little,
 * nothing changes.  Returns how many edges are needed (> max: call again
 * with room), or a negative error.  A mark (pto_hazards_mark) at the
 * recording's next position stands for a point recorded now.
 */
int pto_hazards_decide(pto_hazards *hz, uint32_t sid, const pto_hz_access *acc, uint32_t n, uint64_t pos,
                       pto_hz_edge *edges, uint32_t max);
/* Note the accesses of that call at position pos (its edges and joins queued). */
int pto_hazards_note(pto_hazards *hz, uint32_t sid, const pto_hz_access *acc, uint32_t n, uint64_t pos);
/* A write the caller queued itself at pos; exact: a point right after it (0: none). */
int pto_hazards_written(pto_hazards *hz, uint32_t sid, pto_devptr addr, uint64_t pos, uint64_t exact);
/* Forget the allocation at addr (freed: a new one there starts with no accesses). */
void pto_hazards_forget(pto_hazards *hz, pto_devptr addr);
/*
 * Queue an edge: stream sid waits for everything queued on stream src so far
 * (pto_stream_wait_stream, with the table's event of src), its wait with
 * token.  Returns what pto_stream_wait_stream returns.
 */
int pto_hazards_queue_edge(pto_hazards *hz, uint32_t sid, uint32_t src, uint64_t token);
/* The same for a wait the caller's user asked for (Stream.wait): not counted as inferred. */
int pto_hazards_queue_wait(pto_hazards *hz, uint32_t sid, uint32_t src, uint64_t token);
/* A failure-carrying point recorded on stream sid at pos: what waiting for it orders after (NULL: out of memory). */
pto_hz_mark *pto_hazards_mark(pto_hazards *hz, uint32_t sid, uint64_t pos);
void pto_hz_mark_release(pto_hz_mark *m);
/* Stream sid waits for mark m (an edge the caller queued, or an explicit wait). */
void pto_hazards_waited(pto_hazards *hz, uint32_t sid, const pto_hz_mark *m);
/* Whether stream sid waits for stream src's accesses up to pos (1), or not (0). */
int pto_hazards_ordered(pto_hazards *hz, uint32_t sid, uint32_t src, uint64_t pos);
/* Counts: [0] edges queued by the table, [1] edges skipped as implied. */
void pto_hazards_counts(pto_hazards *hz, uint64_t *out);
/* Records: [0] reads kept for the allocation at addr, [1] entries of stream sid's clock. */
void pto_hazards_sizes(pto_hazards *hz, pto_devptr addr, uint32_t sid, uint64_t *out);
/*
 * pto_stream_launch(s, k, blocks, args, nargs, token) ordered by hz: access[i]
 * (PTO_HZ_READ | PTO_HZ_WRITE, 0 for scalars) says how the launch uses the
 * allocation at args[i].  The edges it needs go with it, in the same call, as
 * fences (no command on the streams waited for): one edge rides on the launch
 * (as pto_stream_launch_after's), several take one wait command for all of
 * them (a wait-many, token edge_token) before it; the accesses are noted at
 * token.  Returns 0, or a positive mask (PTO_QUEUED: the launch went to s's
 * overflow; PTO_EDGE_WAIT_QUEUED: the wait-many did, and so the launch), or
 * PTO_HZ_DECLINED with nothing queued or changed, where the caller orders it
 * (an edge from a closed or held stream, or to an exact point), or a
 * negative error.
 */
int pto_hazards_launch(pto_hazards *hz, pto_stream *s, pto_kernel *k, uint32_t blocks, const uint64_t *args,
                       uint32_t nargs, const uint8_t *access, uint64_t edge_token, uint64_t token);
/*
 * The same launch in pto_stream_launch's shape, for the one caller that
 * orders every launch: the table is the one attached to s's device
 * (pto_hazards_attach), the accesses are those k declared
 * (pto_kernel_set_arg_access; arguments past them are not accesses), and
 * the wait-many, if any, takes token - 1 (the caller hands out two tokens).
 * When every tensor argument's last conflicting access is on s, no edge is
 * needed and the call is pto_stream_launch plus a lookup per argument.
 * Returns as pto_hazards_launch; -PTO_EINVAL without an attached table, or
 * for a kernel that declared no accesses.
 */
int pto_stream_launch_ordered(pto_stream *s, pto_kernel *k, uint32_t blocks, const uint64_t *args,
                              uint32_t nargs, uint64_t token);
/*
 * Make hz the table pto_stream_launch_ordered orders by on its device, until
 * pto_hazards_destroy.  Returns 0, or -PTO_EINVAL (a table of points, or
 * another table attached to the device already).
 */
int pto_hazards_attach(pto_hazards *hz);

/*
 * Graph replays ordered by a table (graph.c).  Against other streams' work a
 * replay is one call on its origin (streams[0]) at position token: its
 * accesses are the allocations its commands use at fixed addresses (declare
 * each with pto_graph_add_access: PTO_HZ_READ and/or PTO_HZ_WRITE, the union
 * over the graph, before instantiating) and its device-bound inputs (each by
 * its uses over the graph; a host-bound input's staging buffer is the
 * graph's own).  The edges they need (pto_hazards_order) go on the origin
 * before the replay's commands, each a fence of its source's tail and a wait
 * (pto_hazards_queue_edge) tagged token + 2 + commands, and the accesses are
 * noted at token once the commands are in.  That orders the whole replay:
 * every fork joins the origin before the replay's record.
 *
 * The caller holds nothing on the host for streams[0] (its held flag is
 * cleared).  Returns as pto_graph_replay, or PTO_HZ_DECLINED with nothing
 * queued or noted where an edge cannot be a fence now (to an exact point;
 * from a closed, held or gone stream): the caller orders the replay itself,
 * and *skipped (may be NULL) holds the edges the decision counted skipped
 * (pto_hazards_counts), which the caller's own decision counts again.
 */
int pto_graph_add_access(pto_graph *g, pto_devptr addr, uint32_t flags);
int pto_graph_replay_ordered(pto_graph *g, pto_hazards *hz, pto_stream *const *streams, uint32_t nstreams,
                             const uint64_t *dev_ptrs, const uint64_t *host_ptrs, uint32_t ninputs,
                             uint64_t token, uint64_t *skipped);

/* PTO_CDEF_END */

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif /* PTO_DRIVER_H */
