/*
 * engines.c - the sim's engines: compute cores and copy engines as host
 * threads, their queues, and their statistics.
 *
 * Phase: execution.  A scheduler pass (sched.c) hands each started copy or
 * launch to an engine queue (pti_copy_enqueue, pti_core_enqueue; sched_lock
 * held).  Cores take blocks from the first launch of the core queue
 * (next_block under core_lock); the core that finishes a launch's last block
 * completes it.  Copy engines pop whole commands.  The engine that completes
 * a command (pti_cmd_finish, exec.c) runs a scheduler pass at once
 * (pti_sched_run), so the stream's next command starts without a hand-off.
 * pti_engines_start starts every device thread, the schedulers' included
 * (pti_sched_main, sched.c), and pti_engines_stop joins them all; the sim
 * platform's engines_start / engines_stop are these two (sim.c).
 *
 * Idling.  An engine whose queue-mates all sleep spins at most spin_us
 * watching its queue (and serving scheduler kicks meanwhile: watch_kicks),
 * then sleeps on its condition variable with no timeout, so an idle device
 * burns no CPU.  It spins only while a CPU is spare for the host
 * (pti_may_spin), so on a host with no CPU to spare nothing spins.  Queue
 * pushes, sleeper, waking and spinner counts are all under the queue's
 * lock; copy_len / core_len are what the spinning engine watches.  Ready
 * work reaches an idle engine at once: a push (or a batch of them), and an
 * engine taking a run that leaves others queued, signal sleepers until
 * every queued run has a thread coming for it (wake_for), each sleeper
 * once; tiny program tasks pushed by a thread that runs them itself wake
 * nobody (takes_tiny: a wake-up takes longer than they do).  Appends are
 * O(1) (a tail pointer per queue).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sched.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "internal.h"

/* 1 while the current block called blk->fail (trace status of the block). */
static __thread int tl_block_failed;
/* The engine this thread runs as (NULL on host and scheduler threads): its own, or one it helps for. */
static __thread const struct pto_engine *tl_engine;
/* The engine thread this is (NULL on host and scheduler threads). */
static __thread const struct pto_engine *tl_self;
/* True while this engine spins in watch_kicks: it counts among its queue's spinners. */
static __thread bool tl_watching;
/* True while this thread runs work in a sleeping engine's stead (engine_help): no help within help. */
static __thread bool tl_helping;
/* The device whose scheduler thread this is (pti_sched_main): it may help too. */
static __thread const pto_device *tl_sched_dev;
/* The device this host thread runs short work for (pti_host_begin .. pti_host_run): it takes what it pushes. */
static __thread const pto_device *tl_host_dev;
/* A blocked waiter with a CPU spare (pti_host_serve): it runs a program's tiny tasks only. */
static __thread bool tl_host_tasks_only;

void pti_sched_thread_init(pto_device *dev)
{
    tl_sched_dev = dev;
}

static bool cpu_for_wakee(pto_device *dev);
static uint32_t cpus_now(void);

/*
 * Whether a finishing device thread runs the next command of the other
 * engine kind itself (engine_help) rather than wake an engine for it: on a
 * one-CPU host, and, with the host first, while no CPU is left for a woken
 * engine (cpu_for_wakee; PTO_HOST_FIRST_ALWAYS: as if none ever were).
 */
static bool hands_to_self(pto_device *dev)
{
    switch (dev->cfg.host_first) {
    case PTO_HOST_FIRST_OFF:
        return cpus_now() <= 1;
    case PTO_HOST_FIRST_ALWAYS:
        return true;
    default:
        return cpus_now() <= 1 || !cpu_for_wakee(dev);
    }
}

/*
 * 1 if the calling thread takes the first run pushed to dev's `copy` kind
 * from its own finish path without anybody being woken: an engine of that
 * kind (or helping as one) goes back to that queue as soon as it returns;
 * on a one-CPU host an engine of the other kind runs it in a sleeping
 * engine's stead right after (engine_help), since waking that engine would
 * only take turns with this thread on the same CPU.  (A watching engine is
 * counted among the spinners already.)
 */
static int self_returning(pto_device *dev, bool copy)
{
    if (tl_watching)
        return 0;
    if (tl_host_dev == dev)
        return 1; /* a host thread about to run what it queued (pti_host_run) */
    if (tl_engine && tl_engine->dev == dev && tl_engine->is_copy == copy)
        return 1;
    return tl_self && tl_self->dev == dev && (tl_self->is_copy == copy || hands_to_self(dev));
}

/*
 * Let this device thread's timed sleeps end on time: Linux lets a thread's
 * timers run late by its timer slack, 50 us by default, so a 100 us task
 * delay (pypto_async.testing.delay_task) or a delay command's deadline ran
 * 150 us.  Best effort.
 */
void pti_thread_precise_timers(void)
{
    (void)prctl(PR_SET_TIMERSLACK, 1000ul); /* 1 us */
}

uint32_t pti_host_cpus(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
        return (uint32_t)CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (uint32_t)n : 1;
}

/* When this thread last read its CPUs (cpus_now), and what it read. */
static __thread uint64_t tl_cpus_ns;
static __thread uint32_t tl_cpus;

/*
 * The CPUs the calling thread may run on now (its sched_getaffinity), read
 * at most once a millisecond per thread.  Not the count at open
 * (dev->cpus): a service that pins its threads after the device opened (or
 * unpins them) changes what is spare, and a device thread and the host
 * thread may be pinned apart.  Every spin, help and host-first choice asks
 * this.
 */
static uint32_t cpus_now(void)
{
    uint64_t now = pto_now_ns();
    if (!tl_cpus || now - tl_cpus_ns >= 1000000ull) {
        tl_cpus = pti_host_cpus();
        tl_cpus_ns = now;
    }
    return tl_cpus;
}

/*
 * The host comes first: an idle device thread spins only while a CPU is
 * spare for the host thread (pti_cpu_spare).  A spinner on the CPU the host
 * needs is worse than none: it yields, but each yield and each wake-up of
 * it is a context switch the host pays for, and work it waits for cannot
 * reach it until the host blocks.  With host_first "always" nothing spins
 * (as on a host with no CPU spare), so the host runs every short command
 * on any machine: a spinner would take it first.
 */
bool pti_may_spin(pto_device *dev)
{
    /* PTO_HOST_FIRST_ALWAYS is the choice of a host with no CPU spare, on any machine. */
    bool ok = dev->cfg.host_first != PTO_HOST_FIRST_ALWAYS && pti_cpu_spare(dev);
    atomic_fetch_add_explicit(ok ? &dev->st_idle_spins : &dev->st_idle_no_spin, 1, memory_order_relaxed);
    return ok;
}

/*
 * Runnable threads on the whole machine (the fourth field of /proc/loadavg,
 * the caller included); -1 if unknown.  It sees what the device's own count
 * cannot: the host's other threads (a BLAS pool spinning after a call) and
 * other processes.  The read is dear: 9-21 us on a loaded 2-CPU VM (p10 -
 * p90), 5-12 us on a quiet one after an idle spell.  So the value is
 * cached, and only idle paths refresh it often: a device thread about to
 * spin or spinning (pti_cpu_spare) rereads it when it is max_age_ns old
 * (PTI_RUNNABLE_IDLE_NS), while the choices on a command's path (a host
 * thread's host-first choice, a helper's: cpu_for_wakee) take the cached
 * value unless it is older than PTI_RUNNABLE_HOT_NS.  Read on that path
 * once a millisecond, it put 13 us between a small program's start and its
 * first task in one round of ten (8 tasks of 1 us, back to back).
 */
#define PTI_RUNNABLE_IDLE_NS 1000000ull   /* 1 ms */
#define PTI_RUNNABLE_HOT_NS 100000000ull  /* 100 ms */

static int machine_runnable(pto_device *dev, uint64_t max_age_ns)
{
    uint64_t now = pto_now_ns();
    uint64_t at = atomic_load_explicit(&dev->runnable_ns, memory_order_relaxed);
    if (at && now - at < max_age_ns)
        return atomic_load_explicit(&dev->runnable, memory_order_relaxed);
    atomic_store_explicit(&dev->runnable_ns, now, memory_order_relaxed);
    int n = -1;
    if (dev->loadavg_fd >= 0) {
        char buf[128];
        /* From offset 0 on the device's open file: procfs writes the line afresh. */
        ssize_t len = pread(dev->loadavg_fd, buf, sizeof(buf) - 1, 0);
        if (len > 0) {
            buf[len] = '\0';
            double l1, l5, l15;
            int running, total;
            if (sscanf(buf, "%lf %lf %lf %d/%d", &l1, &l5, &l15, &running, &total) == 5)
                n = running;
        }
    }
    atomic_store_explicit(&dev->runnable, n, memory_order_relaxed);
    return n;
}

bool pti_cpu_spare(pto_device *dev)
{
    return pti_cpu_spare_at(dev, sched_getcpu());
}

/*
 * CPU-aware: a device thread on the host thread's CPU never counts a CPU
 * as spare.  Linux places a woken thread on the waker's CPU when the other
 * CPUs are busy (on a loaded 2-CPU VM every core woken for a burst of tiny
 * tasks landed on the host's CPU, and the bursts ran 3x their serial sum):
 * there a spinner only takes turns with the host, however few threads the
 * machine runs.  On another CPU it runs beside the host, which the
 * machine's runnable count then includes when it is busy: the count (the
 * caller and a busy host included) need only fit the machine, so a busy
 * host on a 2-CPU machine may have one spinner beside it on the other CPU,
 * to take a share of the next burst of tiny tasks at once.  Where the
 * host's CPU is unknown (no host thread submitted through host first yet,
 * or sched_getcpu failed) one CPU is left for a waking host, as before.
 */
bool pti_cpu_spare_at(pto_device *dev, int cpu)
{
    /* The device's own threads: the awake ones (the caller included) and the host fit its CPUs. */
    if (dev->n_dev_threads - atomic_load_explicit(&dev->asleep, memory_order_relaxed) + 1 > cpus_now())
        return false;
    /*
     * Read first, whatever the answer: idle paths keep the sample fresh for
     * the host-first choice (cpu_for_wakee), which would otherwise go on
     * taking a stale "spare" and signal a core for every burst (spread_burst)
     * that then only lands here, on the host's CPU.
     */
    int running = machine_runnable(dev, PTI_RUNNABLE_IDLE_NS);
    int host = atomic_load_explicit(&dev->host_cpu, memory_order_relaxed);
    if (host >= 0 && cpu == host) {
        atomic_fetch_add_explicit(&dev->st_idle_host_cpu, 1, memory_order_relaxed);
        return false;
    }
    /* The machine's: the runnable threads (the caller included) and, unless it runs elsewhere, the host fit. */
    uint32_t room = host >= 0 && cpu >= 0 ? 0 : 1;
    return running < 0 || (uint32_t)running + room <= dev->machine_cpus;
}

void pti_host_note_cpu(pto_device *dev)
{
    int cpu = sched_getcpu(); /* the vDSO's: tens of ns */
    if (cpu >= 0 && atomic_load_explicit(&dev->host_cpu, memory_order_relaxed) != cpu)
        atomic_store_explicit(&dev->host_cpu, cpu, memory_order_relaxed);
}

/*
 * Insert r into a queue (head, tail) after every entry of the same or higher
 * priority: O(1) when r's priority is not above the last entry's (always, with
 * one priority), else a walk past the higher ones.
 */
static void queue_insert(struct pto_run **head, struct pto_run **tail, struct pto_run *r)
{
    int32_t prio = r->stream->priority;
    r->qnext = NULL;
    if (!*head || (*tail)->stream->priority >= prio) {
        if (*head)
            (*tail)->qnext = r;
        else
            *head = r;
        *tail = r;
        return;
    }
    struct pto_run **pp = head;
    while ((*pp)->stream->priority >= prio)
        pp = &(*pp)->qnext; /* stops before *tail: its priority is below prio */
    r->qnext = *pp;
    *pp = r;
}

/* Take the first run off a queue (its lock held). */
static void queue_pop(struct pto_run **head, struct pto_run **tail)
{
    *head = (*head)->qnext;
    if (!*head)
        *tail = NULL;
}

/*
 * Wake sleepers of a queue (its lock held) until every queued run has a
 * thread coming for it: the spinners, the sleepers already signalled and
 * not back (waking), and (self) an engine of the queue pushing from its own
 * finish path.  Ready work reaches an idle engine at once, and a burst of
 * runs signals each sleeper once.
 */
static void wake_for(pto_device *dev, pthread_cond_t *cv, uint32_t len, int sleepers, int *waking,
                     int spinners, int self)
{
    uint32_t takers = (uint32_t)(spinners + *waking + self);
    while (sleepers > *waking && len > takers) {
        pthread_cond_signal(cv);
        (*waking)++;
        takers++;
        atomic_fetch_add_explicit(&dev->st_engine_wakes, 1, memory_order_relaxed);
    }
}

/* Prepare s->run for cmd (sched_lock held; s has no other started command). */
static struct pto_run *run_init(pto_stream *s, struct pto_cmd *cmd)
{
    struct pto_run *r = &s->run;
    r->cmd = cmd;
    r->task = NULL;
    r->stream = s;
    r->next_block = 0;
    atomic_store_explicit(&r->done_blocks, 0, memory_order_relaxed);
    atomic_store_explicit(&r->fail_claim, 0, memory_order_relaxed);
    r->fail_code = 0;
    r->fail_msg[0] = '\0';
    return r;
}

void pti_copy_enqueue(pto_device *dev, pto_stream *s, struct pto_cmd *cmd)
{
    struct pto_run *r = run_init(s, cmd);
    pthread_mutex_lock(&dev->copy_lock);
    queue_insert(&dev->copy_head, &dev->copy_tail, r);
    uint32_t len = atomic_fetch_add_explicit(&dev->copy_len, 1, memory_order_release) + 1;
    /* The spinner takes one, and so does a copy engine pushing from its own finish path. */
    wake_for(dev, &dev->copy_cv, len, dev->copy_sleepers, &dev->copy_waking, dev->copy_spinners,
             self_returning(dev, true));
    pthread_mutex_unlock(&dev->copy_lock);
}

void pti_core_enqueue(pto_device *dev, pto_stream *s, struct pto_cmd *cmd)
{
    pti_core_enqueue_run(dev, run_init(s, cmd));
}

void pti_core_enqueue_run(pto_device *dev, struct pto_run *r)
{
    r->qnext = NULL;
    pti_core_enqueue_runs(dev, r);
}

/*
 * Whether the calling thread runs the tiny tasks it pushes to the core
 * queue itself, so that they need no core woken: a thread that takes what
 * it pushes (self_returning: an engine's own loop, a helper, a host thread
 * in pti_host_run), or dev's scheduler thread, which helps the cores after
 * its pass (pti_core_help).  A sleeping core's wake-up takes longer than
 * such a task (tens of microseconds on a busy host, against under
 * PTI_TINY_NS): waking one for a burst of them only made the burst wait for
 * the wake-up, then run on the woken core.  If the thread declines (a queue
 * head it may not run, no sleeping core to run as) or stops (its bound of
 * runs and time), it wakes cores for what is left (engine_help,
 * pti_host_run).
 */
static bool takes_tiny(pto_device *dev)
{
    /* A core watching for kicks (watch_kicks) pushes from the pass it serves, then takes the head itself. */
    if (tl_watching)
        return tl_self && tl_self->dev == dev && !tl_self->is_copy;
    return tl_sched_dev == dev || self_returning(dev, false);
}

void pti_core_enqueue_runs(pto_device *dev, struct pto_run *runs)
{
    if (!runs)
        return;
    uint32_t n = 0, tasks = 0;
    bool multi = false, tiny = true;
    pthread_mutex_lock(&dev->core_lock);
    while (runs) {
        struct pto_run *next = runs->qnext;
        multi = multi || (!runs->task && runs->cmd->u.launch.blocks > 1);
        tiny = tiny && pti_task_tiny(runs);
        tasks += runs->task != NULL;
        queue_insert(&dev->core_head, &dev->core_tail, runs);
        n++;
        runs = next;
    }
    if (tasks) {
        atomic_fetch_add_explicit(&dev->st_task_batches, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&dev->st_tasks_queued, tasks, memory_order_relaxed);
    }
    uint32_t len = atomic_fetch_add_explicit(&dev->core_len, n, memory_order_release) + n;
    if (multi && dev->core_sleepers > dev->core_waking) {
        /* A launch of several blocks: every core can take one. */
        pthread_cond_broadcast(&dev->core_cv);
        atomic_fetch_add_explicit(&dev->st_engine_wakes, (uint64_t)(dev->core_sleepers - dev->core_waking),
                                  memory_order_relaxed);
        dev->core_waking = dev->core_sleepers;
    } else if (!(tiny && takes_tiny(dev))) {
        wake_for(dev, &dev->core_cv, len, dev->core_sleepers, &dev->core_waking, dev->core_spinners,
                 self_returning(dev, false));
    } /* else tiny tasks this thread runs itself: no wake-up */
    pthread_mutex_unlock(&dev->core_lock);
}

/* Run the passes a kick asks for (no lock held). */
static void serve_kicks(pto_device *dev)
{
    pthread_mutex_lock(&dev->sched_lock);
    pti_sched_run(dev);
    pthread_mutex_unlock(&dev->sched_lock);
}

/*
 * Spin (no lock held) until len is nonzero, shutdown, or spin_ns passed.
 * While spinning the engine is a kick watcher: pti_sched_kick does not wake
 * the scheduler thread but leaves the pass to us, so a submission to an idle
 * stream costs the submitter one atomic increment, and the run the pass
 * pushes is taken by this very engine.
 *
 * A kick is pending while kick differs from kick_served, the value the
 * latest pass read before scanning (whoever ran it): comparing with that,
 * not with a value we read on arrival, keeps a kick made just before we
 * started watching from being taken for an old one.  Leaving, we re-check
 * after the seq_cst decrement of kick_watchers: a kicker that saw us
 * watching bumped kick before that decrement, so its kick is served here.
 */
static void watch_kicks(pto_device *dev, _Atomic uint32_t *len, uint64_t spin_ns)
{
    tl_watching = true;
    atomic_fetch_add(&dev->kick_watchers, 1);
    uint64_t end = pto_now_ns() + spin_ns;
    while (atomic_load_explicit(len, memory_order_acquire) == 0 &&
           !atomic_load_explicit(&dev->shutdown, memory_order_relaxed)) {
        if (pti_sched_kick_pending(dev)) {
            serve_kicks(dev);
            continue; /* the pass may have pushed a run for us */
        }
        /* Yield, not pause: on an oversubscribed host the thread we are
         * waiting for (often the host thread just woken by the eventfd)
         * may need this very CPU. */
        sched_yield();
        if (pto_now_ns() >= end || !pti_cpu_spare(dev))
            break; /* a device thread woke: the spare CPU is its now */
    }
    atomic_fetch_sub(&dev->kick_watchers, 1);
    if (pti_sched_kick_pending(dev) && !atomic_load_explicit(&dev->shutdown, memory_order_relaxed))
        serve_kicks(dev);
    tl_watching = false;
}

/*
 * Wait (lock held) until *head is non-empty or shutdown.  An engine that goes
 * idle while every other engine of its queue sleeps (there are `total`)
 * watches len without the lock for up to spin_us before sleeping on cv; the
 * others sleep at once.  So a quiet device keeps one warm engine per queue,
 * and a busy one spins none: the busy engine comes back to the queue itself
 * and takes what its own finish path pushed, so nobody needs to be woken,
 * and a spinner would only steal that run and a CPU from the host.
 * Enqueuers signal a sleeper only when the queue holds more runs than there
 * are engines about to take them.
 */
static void engine_idle(pto_device *dev, struct pto_engine *eng, pthread_mutex_t *mu, pthread_cond_t *cv,
                        struct pto_run *const *head, _Atomic uint32_t *len, int *sleepers,
                        int *waking, int *spinners, uint32_t total)
{
    uint64_t spin_ns = (uint64_t)dev->cfg.spin_us * 1000ull;
    if (spin_ns && !eng->claimed && *spinners == 0 && total - (uint32_t)*sleepers == 1 && pti_may_spin(dev)) {
        (*spinners)++;
        pthread_mutex_unlock(mu);
        watch_kicks(dev, len, spin_ns);
        pthread_mutex_lock(mu);
        (*spinners)--;
        if (*head || atomic_load_explicit(&dev->shutdown, memory_order_acquire))
            return;
    }
    (*sleepers)++;
    eng->sleeping = true;
    atomic_fetch_add_explicit(&dev->asleep, 1, memory_order_relaxed);
    pthread_cond_wait(cv, mu);
    atomic_fetch_sub_explicit(&dev->asleep, 1, memory_order_relaxed);
    eng->sleeping = false;
    (*sleepers)--;
    if (*waking > 0)
        (*waking)--; /* back (a spurious wake-up only makes the next push signal early) */
    if (eng->claimed) {
        /*
         * A helper runs in our stead, so we go back to sleep; but the
         * signal that woke us was counted for queued work (wake_for counts
         * every sleeper): pass it on to another sleeper, or that work would
         * wait behind the helper's run while an engine sleeps.
         */
        wake_for(dev, cv, atomic_load_explicit(len, memory_order_relaxed), *sleepers, waking, *spinners, 0);
    }
}

static void run_copy(pto_device *dev, struct pto_engine *eng, struct pto_run *run);
static void run_block(pto_device *dev, struct pto_engine *eng, struct pto_run *run, uint32_t b);

/* The last sleeping engine of a kind that nobody claimed (its queue's lock held); NULL if none. */
static struct pto_engine *sleeping_engine(pto_device *dev, bool copy)
{
    uint32_t first = copy ? dev->cfg.cores : 0, n = copy ? dev->cfg.copy_engines : dev->cfg.cores;
    for (uint32_t i = first + n; i-- > first;)
        if (dev->engines[i].sleeping && !dev->engines[i].claimed)
            return &dev->engines[i];
    return NULL;
}

/*
 * Take the head of a kind's queue to run in a sleeping engine's stead (its
 * lock held, the queue not empty): a copy whole, a launch's next block
 * (*block; the launch leaves the queue with its last one), a task whole.
 */
static struct pto_run *take_head(pto_device *dev, bool copy, uint32_t *block)
{
    struct pto_run **head = copy ? &dev->copy_head : &dev->core_head;
    struct pto_run *r = *head;
    *block = 0;
    if (!copy) {
        *block = r->next_block++;
        if (*block == 0 && !r->task)
            r->start_ns = pto_now_ns(); /* a launch's (run_block's finish); a task times itself */
        if (!r->task && r->next_block < r->cmd->u.launch.blocks)
            return r;
    }
    queue_pop(head, copy ? &dev->copy_tail : &dev->core_tail);
    atomic_fetch_sub_explicit(copy ? &dev->copy_len : &dev->core_len, 1, memory_order_relaxed);
    return r;
}

/* Run what take_head took, as engine x (no lock held); returns when a task's work ended, else 0. */
static uint64_t run_taken(pto_device *dev, struct pto_engine *x, bool copy, struct pto_run *r, uint32_t block)
{
    if (copy)
        run_copy(dev, x, r);
    else if (r->task)
        return pti_task_run(dev, x, r);
    else
        run_block(dev, x, r, block);
    return 0;
}

/* Wake the engines what is left on a kind's queue needs (its lock held; the caller takes none of it). */
static void wake_queue(pto_device *dev, bool copy)
{
    if (copy)
        wake_for(dev, &dev->copy_cv, atomic_load_explicit(&dev->copy_len, memory_order_relaxed), dev->copy_sleepers,
                 &dev->copy_waking, dev->copy_spinners, 0);
    else
        wake_for(dev, &dev->core_cv, atomic_load_explicit(&dev->core_len, memory_order_relaxed), dev->core_sleepers,
                 &dev->core_waking, dev->core_spinners, 0);
}

/*
 * Whether a helper may run r in a sleeping engine's stead: anything on a
 * one-CPU host (waking the engine would only take turns with this thread on
 * that CPU, a context switch per hand-off), and work known to be short
 * (task_known_short, long_command: timed within inline_us, or a small copy)
 * while no CPU is left for a woken engine beside the awake threads and the
 * host (cpu_for_wakee: a loaded machine, or busy host threads; the woken
 * engine would wait for a time slice, and the finishing thread hands the
 * next command to itself instead); else only a program's tiny task
 * (pti_task_tiny: its site ran under 5 us last time), where a core's
 * wake-up takes longer than the work.  A task held by a testing delay
 * sleeps on its core, so its holds overlap only on engines of their own.
 */
static bool long_command(const pto_device *dev, const struct pto_run *r);

/*
 * The backstop.  A helper or host thread keeps work judged short from its
 * last run; this time it may run long, and the rest of its queue would wait
 * for it while an engine sleeps.  So each kept run marks its claimed engine
 * (kept_ns, one store before and after), and a watcher checks the marks: a
 * run kept past its budget with work queued behind it gets a sleeping
 * engine woken for that work (pti_backstop, the one place that wakes one).
 * Every kept run with work behind has a watcher that looks by its budget
 * (kept_begin):
 *
 *   - a run a device or host thread keeps: the scheduler thread's timed
 *     wait; the keeper wakes that thread only if it sleeps past the budget
 *     and its poll (sched_sleep_until); never a spin;
 *   - a run a scheduler thread keeps (engine_help after its pass), which
 *     that thread's wait cannot watch: a host thread blocked in a
 *     completion wait while keeps are recent (pti_kept_watch; it sleeps at
 *     most PTI_KEPT_POLL_NS, as the scheduler thread does, and hands what it
 *     watched to the engines when it returns: pti_kept_leave); with none
 *     (a host waiting on the completion fd, or a quiet spell before), the
 *     backstop fires as the run is taken: nobody would look at it.
 */
static uint64_t kept_budget_ns(const pto_device *dev)
{
    uint64_t ns = (uint64_t)dev->cfg.inline_us * 1000ull;
    return ns < 20000ull ? 20000ull : ns;
}

/* Wake an engine for the work behind x's kept run k (no lock held), once per kept run. */
static void backstop_fire(pto_device *dev, struct pto_engine *x, uint64_t k)
{
    uint64_t was = atomic_load_explicit(&x->backstopped, memory_order_relaxed);
    if (was == k || !atomic_compare_exchange_strong(&x->backstopped, &was, k))
        return; /* another watcher fired for it: the woken engine takes the rest */
    bool copy = x->is_copy;
    pthread_mutex_t *mu = copy ? &dev->copy_lock : &dev->core_lock;
    pthread_mutex_lock(mu);
    if (atomic_load_explicit(&x->kept_ns, memory_order_relaxed) == k)
        wake_queue(dev, copy);
    pthread_mutex_unlock(mu);
}

/*
 * Mark x's kept run started (no lock held); behind: runs left on its queue
 * when it was taken; now: the keeper's latest clock read (its last run's
 * end: the marks are judged against a budget of 20 us or more), 0 to read
 * it here.  A read costs tens of ns on a VM, a tiny task under 1 us.
 * Returns the time of the mark.
 */
static uint64_t kept_begin(pto_device *dev, struct pto_engine *x, uint32_t behind, uint64_t now)
{
    if (!now)
        now = pto_now_ns();
    if (atomic_load_explicit(&dev->last_kept_ns, memory_order_relaxed) + 100000ull < now)
        atomic_store_explicit(&dev->last_kept_ns, now, memory_order_relaxed); /* at most one store per 100 us */
    bool sched = tl_sched_dev == dev;
    atomic_store_explicit(&x->kept_by_sched, sched, memory_order_relaxed); /* published by the store of kept_ns */
    if (!behind) {
        atomic_store_explicit(&x->kept_ns, now, memory_order_relaxed);
        return now;
    }
    /*
     * seq_cst, and the watchers read after: pairs with pti_sched_main's
     * store of sched_sleep_until (pti_kept_watch's count of kept_watchers),
     * then its scan of the marks.
     */
    atomic_store(&x->kept_ns, now);
    if (sched) {
        /* A host thread blocked in a completion wait looks within its poll; else nobody would. */
        if (!atomic_load(&dev->kept_watchers))
            backstop_fire(dev, x, now);
        return now;
    }
    /*
     * It sleeps past the budget and its poll (keeps were not recent when it
     * went to sleep): it rearms for this run.  While keeps are recent it
     * sleeps at most PTI_KEPT_POLL_NS (pti_sched_main): the backstop then
     * comes within budget + poll, and a burst's keeper wakes nobody.
     */
    if (atomic_load(&dev->sched_sleep_until) > now + kept_budget_ns(dev) + PTI_KEPT_POLL_NS)
        pti_sched_wake(dev, false);
    return now;
}

static void kept_end(struct pto_engine *x)
{
    atomic_store_explicit(&x->kept_ns, 0, memory_order_relaxed);
}

/*
 * Scan the marks: fire for each run kept past its budget with work behind
 * it, and with `leaving` for each such run a scheduler thread keeps (its
 * watcher goes); returns the nearest budget's end still to come (0: none).
 */
static uint64_t backstop_scan(pto_device *dev, uint64_t now, bool leaving)
{
    if (!dev->engines)
        return 0;
    uint64_t budget = kept_budget_ns(dev), next = 0;
    uint32_t n = dev->cfg.cores + dev->cfg.copy_engines;
    for (uint32_t i = 0; i < n; i++) {
        struct pto_engine *x = &dev->engines[i];
        uint64_t k = atomic_load(&x->kept_ns);
        if (!k || k == atomic_load_explicit(&x->backstopped, memory_order_relaxed) ||
            !atomic_load_explicit(x->is_copy ? &dev->copy_len : &dev->core_len, memory_order_relaxed))
            continue;
        if (now < k + budget && !(leaving && atomic_load_explicit(&x->kept_by_sched, memory_order_relaxed))) {
            if (!next || k + budget < next)
                next = k + budget;
            continue;
        }
        backstop_fire(dev, x, k);
    }
    return next;
}

uint64_t pti_backstop(pto_device *dev, uint64_t now)
{
    return backstop_scan(dev, now, false);
}

/*
 * A host thread blocked in a completion wait (completion.c) watches the
 * kept runs while keeps are recent.  Close waits for host_runners before it
 * stops the engines (device.c): a watcher that saw no closing may scan them.
 */
bool pti_kept_watch(pto_device *dev, uint64_t *until)
{
    uint64_t now = pto_now_ns();
    uint64_t last = atomic_load_explicit(&dev->last_kept_ns, memory_order_relaxed);
    if (!last || now - last >= PTI_KEPT_RECENT_NS)
        return false;
    atomic_fetch_add(&dev->kept_watchers, 1); /* seq_cst, then the scan: pairs with kept_begin */
    atomic_fetch_add(&dev->host_runners, 1);  /* seq_cst, then closing: as in pti_host_run */
    uint64_t next = atomic_load(&dev->closing) ? 0 : pti_backstop(dev, now);
    atomic_fetch_sub(&dev->host_runners, 1);
    uint64_t look = next && next < now + PTI_KEPT_POLL_NS ? next : now + PTI_KEPT_POLL_NS;
    if (!*until || look < *until)
        *until = look;
    return true;
}

void pti_kept_unwatch(pto_device *dev)
{
    atomic_fetch_sub(&dev->kept_watchers, 1); /* seq_cst: a keeper that read us counted is scanned after */
}

void pti_kept_leave(pto_device *dev)
{
    /*
     * After our last unwatch: a scheduler thread's keeper that counted us
     * stored its mark before, so this scan sees it, and fires for it now,
     * since nobody may look at it after us.
     */
    atomic_fetch_add(&dev->host_runners, 1);
    if (!atomic_load(&dev->closing))
        backstop_scan(dev, pto_now_ns(), true);
    atomic_fetch_sub(&dev->host_runners, 1);
}

/*
 * Whether a program's task is known to be short: its site ran within
 * inline_us last time.  A task never timed is of unknown length (it may
 * spin, wait for a task beside it, or run for seconds): a helper that ran
 * it would leave the rest of the queue behind it while an engine sleeps, so
 * it goes to an engine.
 */
static bool task_known_short(const pto_device *dev, const struct pto_run *r)
{
    return pti_task_short(r, (uint64_t)dev->cfg.inline_us * 1000ull);
}

static bool may_help(pto_device *dev, const struct pto_run *r)
{
    if (cpus_now() <= 1 || pti_task_tiny(r))
        return true;
    if (r->task && !task_known_short(dev, r))
        return false;
    return !long_command(dev, r) && hands_to_self(dev);
}

/*
 * Whether r is a command (not a program's task) longer than a wake-up is
 * worth, by host_first's measure of short (inline_us, as host_may_run
 * judges it): a copy or memset over inline_us x 4 KiB, a block that took
 * over inline_us last time, the builtin spin.  With more than one CPU a
 * helper leaves such work to a woken engine even while no CPU looks spare:
 * the wake-up costs less than the work, and the woken engine runs beside
 * the finishing thread, which goes back to its own queue (a launch's other
 * blocks, the next copy), instead of the device's work running one command
 * at a time on whichever thread finished last.
 */
static bool long_command(const pto_device *dev, const struct pto_run *r)
{
    if (r->task)
        return false;
    const struct pto_cmd *c = r->cmd;
    uint64_t limit_ns = (uint64_t)dev->cfg.inline_us * 1000ull;
    uint64_t limit_bytes = (uint64_t)dev->cfg.inline_us * 4096ull;
    switch (c->kind) {
    case PTO_CMD_H2D:
    case PTO_CMD_D2H:
    case PTO_CMD_D2D:
        return c->u.copy.n > limit_bytes;
    case PTO_CMD_MEMSET:
        return c->u.set.n > limit_bytes;
    case PTO_CMD_LAUNCH: {
        /* A kernel never timed is of unknown length: not known short (task_known_short). */
        const pto_kernel *k = c->u.launch.k;
        uint64_t ns = atomic_load_explicit(&k->block_ns, memory_order_relaxed);
        return k->arg_timed || !ns || ns > limit_ns;
    }
    default:
        return false;
    }
}

/*
 * Run queued runs of one kind on the calling device thread, in the stead of
 * a sleeping engine of that kind (no lock held).  The engine is claimed
 * (under its queue's lock) so that it stays asleep even if signalled: at
 * most `cores` (copy_engines) runs of the kind run at once, each under one
 * engine's name (trace lanes, stats, blk->core_idx).  Bounded: at most 64
 * runs or 50 us of starts, and only runs may_help allows; what is left,
 * and the claimed engine, are handed back with a wake-up.  Only while no
 * engine of the kind spins (a spinner takes the work at once), or beside a
 * spinner for a burst of tiny tasks.
 */
static void engine_help(pto_device *dev, bool copy)
{
    if (tl_helping || tl_watching || !((tl_self && tl_self->dev == dev) || tl_sched_dev == dev))
        return; /* helpers are device threads of dev (not the host, not a spinner serving kicks) */
    if (tl_self && tl_self->is_copy == copy)
        return; /* its own queue: it goes back to it itself */
    _Atomic uint32_t *len = copy ? &dev->copy_len : &dev->core_len;
    if (!atomic_load_explicit(len, memory_order_acquire))
        return;
    pthread_mutex_t *mu = copy ? &dev->copy_lock : &dev->core_lock;
    struct pto_run **head = copy ? &dev->copy_head : &dev->core_head;
    pthread_mutex_lock(mu);
    struct pto_engine *x = NULL;
    /*
     * A spinner takes the work at once.  Beside one, only a burst of tiny
     * tasks (more queued than spinners) is worth a helper, which is awake
     * already: the two take turns at the queue instead of the spinner
     * running the burst alone.
     */
    int spinners = copy ? dev->copy_spinners : dev->core_spinners;
    if (spinners == 0 || (!copy && *head && atomic_load_explicit(len, memory_order_relaxed) > (uint32_t)spinners &&
                          pti_task_tiny(*head)))
        x = sleeping_engine(dev, copy);
    if (!x || !*head || !may_help(dev, *head)) {
        wake_queue(dev, copy); /* declined: a push that counted on this thread (self_returning) needs an engine */
        pthread_mutex_unlock(mu);
        return;
    }
    x->claimed = true;
    const struct pto_engine *was = tl_engine;
    tl_engine = x;
    tl_helping = true;
    uint64_t until = pto_now_ns() + 50000ull;
    uint64_t ran = 0;
    while (*head && ran < 64 && may_help(dev, *head) && !atomic_load_explicit(&dev->shutdown, memory_order_acquire)) {
        uint32_t b;
        struct pto_run *r = take_head(dev, copy, &b);
        uint32_t behind = atomic_load_explicit(len, memory_order_relaxed) + (*head == r);
        pthread_mutex_unlock(mu);
        kept_begin(dev, x, behind, 0);
        run_taken(dev, x, copy, r, b);
        kept_end(x);
        ran++;
        pthread_mutex_lock(mu);
        if (pto_now_ns() >= until)
            break;
    }
    x->claimed = false;
    tl_engine = was;
    tl_helping = false;
    wake_queue(dev, copy); /* what is left needs an engine: x (asleep again) is one of the sleepers */
    pthread_mutex_unlock(mu);
    atomic_fetch_add_explicit(&dev->st_engine_helps, ran, memory_order_relaxed);
}

/*
 * Host first.  A small command submitted to an idle stream takes two
 * hand-offs when a device thread runs it: the submitter wakes an engine, and
 * the engine's completion wakes the host through the eventfd.  With no CPU
 * left for a woken engine beside the host (cpu_for_wakee) each of them waits
 * for the other thread's time slice, and the woken engine takes the CPU the
 * host needs.  So
 * there the host thread runs short work itself: after the pass its
 * submission ran (pti_stream_kick, submit.c), and while it blocks for a
 * completion (pto_cq_wait, pto_wait_token, completion.c).  It runs in a
 * sleeping engine's stead, claimed like engine_help's, so the engine limits,
 * the engine names (traces, stats, the modeled clock) and every ordering
 * rule are those of a queued run: the run went through the same scheduler
 * pass, hazards and stream order included, and finishes through the same
 * pti_cmd_finish.  Its record is in the completion queue when the call
 * returns.  Only short work: a held or delayed command never reaches an
 * engine queue (latches and delays hold the stream in the scheduler), a
 * task with a testing delay is not tiny, and the builtin spin is never
 * judged short.
 */

/*
 * Whether a woken device thread would get a CPU of its own: beside the awake
 * device threads and the host thread (the caller is one of them), among the
 * device's CPUs and the machine's runnable threads.
 */
static bool cpu_for_wakee(pto_device *dev)
{
    uint32_t awake = dev->n_dev_threads - atomic_load_explicit(&dev->asleep, memory_order_relaxed);
    if (awake + 2 > cpus_now()) /* the awake device threads, the host and the one woken */
        return false;
    int running = machine_runnable(dev, PTI_RUNNABLE_HOT_NS); /* the host included; cached (idle paths refresh it) */
    return running < 0 || (uint32_t)running + 1 <= dev->machine_cpus;
}

bool pti_host_first(pto_device *dev)
{
    if (!pti_host_may_first(dev))
        return false;
    if (dev->cfg.host_first == PTO_HOST_FIRST_ALWAYS)
        return true;
    atomic_fetch_add_explicit(&dev->st_host_first_checks, 1, memory_order_relaxed);
    return cpus_now() <= 1 || !cpu_for_wakee(dev);
}

bool pti_host_may_first(pto_device *dev)
{
    if (tl_self || tl_sched_dev == dev)
        return false; /* device threads have their own hand-offs (engine_help) */
    return dev->cfg.host_first != PTO_HOST_FIRST_OFF;
}

/* Whether a host thread may run r itself: short work only (its queue's lock held). */
static bool host_may_run(pto_device *dev, const struct pto_run *r)
{
    if (r->task)
        return pti_task_tiny(r);
    const struct pto_cmd *c = r->cmd;
    uint64_t limit_ns = (uint64_t)dev->cfg.inline_us * 1000ull;
    uint64_t limit_bytes = (uint64_t)dev->cfg.inline_us * 4096ull; /* 4 KiB a microsecond */
    switch (c->kind) {
    case PTO_CMD_H2D:
    case PTO_CMD_D2H:
    case PTO_CMD_D2D:
        return c->u.copy.n <= limit_bytes;
    case PTO_CMD_MEMSET:
        return c->u.set.n <= limit_bytes;
    case PTO_CMD_LAUNCH: {
        const pto_kernel *k = c->u.launch.k;
        uint64_t ns = atomic_load_explicit(&k->block_ns, memory_order_relaxed);
        return !k->arg_timed && r->next_block == 0 && ns && ns * c->u.launch.blocks <= limit_ns;
    }
    default:
        return false; /* a peer copy waits on another device */
    }
}

void pti_host_begin(pto_device *dev)
{
    tl_host_dev = dev;
    pti_host_note_cpu(dev);
}

bool pti_host_in_pass(const pto_device *dev)
{
    return tl_host_dev == dev && !tl_helping;
}

/* Whether a host thread may take the head of a kind's queue now (its lock held). */
static bool host_may_take(pto_device *dev, bool copy)
{
    _Atomic uint32_t *len = copy ? &dev->copy_len : &dev->core_len;
    struct pto_run *h = copy ? dev->copy_head : dev->core_head;
    if (!h || atomic_load_explicit(&dev->shutdown, memory_order_acquire))
        return false;
    /* Beside a spinner, only a burst of tiny tasks (more queued than spinners): the two share it. */
    int spinners = copy ? dev->copy_spinners : dev->core_spinners;
    bool burst = !copy && atomic_load_explicit(len, memory_order_relaxed) > (uint32_t)spinners && pti_task_tiny(h);
    return (spinners == 0 || burst) && host_may_run(dev, h) && (!tl_host_tasks_only || h->task);
}

/*
 * Run heads of one queue in a sleeping engine's stead while they are short
 * (no lock held): at most max runs, and none started at or after until.
 * The engine is claimed once for the lot, and the queue's lock is taken
 * once a run (the next head is taken as the last run is given back), so a
 * burst of tiny tasks costs the host little more than their work; the
 * clock is read by the runs themselves (a task's start and end), and their
 * ends serve the marks and the budget.  Returns the runs it ran; *now: the
 * caller's latest clock read on entry, when the last run ended on return.
 */
static uint32_t host_run_some(pto_device *dev, bool copy, uint32_t max, uint64_t until, uint64_t *now)
{
    _Atomic uint32_t *len = copy ? &dev->copy_len : &dev->core_len;
    if (!max || !atomic_load_explicit(len, memory_order_acquire))
        return 0;
    pthread_mutex_t *mu = copy ? &dev->copy_lock : &dev->core_lock;
    struct pto_run **head = copy ? &dev->copy_head : &dev->core_head;
    pthread_mutex_lock(mu);
    struct pto_engine *x = host_may_take(dev, copy) ? sleeping_engine(dev, copy) : NULL;
    if (!x) {
        pthread_mutex_unlock(mu);
        return 0;
    }
    x->claimed = true;
    tl_engine = x;
    tl_helping = true; /* a device thread's help paths (run_copy's pti_core_help) leave the host alone */
    uint32_t ran = 0;
    do {
        uint32_t b;
        struct pto_run *r = take_head(dev, copy, &b);
        uint32_t behind = atomic_load_explicit(len, memory_order_relaxed) + (*head == r);
        pthread_mutex_unlock(mu);
        kept_begin(dev, x, behind, *now);
        uint64_t end = run_taken(dev, x, copy, r, b);
        kept_end(x);
        *now = end ? end : pto_now_ns();
        ran++;
        pthread_mutex_lock(mu);
    } while (ran < max && *now < until && host_may_take(dev, copy));
    x->claimed = false;
    pthread_mutex_unlock(mu);
    tl_helping = false;
    tl_engine = NULL;
    atomic_fetch_add_explicit(&dev->st_inline_runs, ran, memory_order_relaxed);
    return ran;
}

/*
 * Spread a burst: a host thread about to run a program's tiny tasks with a
 * CPU spare (host first declined: pti_host_end, pti_host_serve) signals one
 * sleeping core when no core is awake for them and the burst is worth
 * sharing (3 or more queued).  The woken core mostly arrives after the
 * burst (tens of microseconds; the host does not wait for it), but on the
 * spare CPU it lingers (engine_idle: it spins where the host is not,
 * pti_cpu_spare_at), so the next burst starts beside it and is shared at
 * once (host_may_take: beside a spinner the host takes only the excess),
 * with no wake-up per task or per burst.  One signal on its way at a time;
 * none with one core (the host runs as it).  (A device always spins some:
 * pto_device_config's spin_us 0 is the default, 200 us.)
 */
static void spread_burst(pto_device *dev)
{
    if (dev->cfg.cores < 2 || atomic_load_explicit(&dev->core_len, memory_order_relaxed) < 3)
        return;
    pthread_mutex_lock(&dev->core_lock);
    uint32_t idle = 0; /* sleeping cores nobody claimed: the host claims one, the woken core is another */
    for (uint32_t i = 0; i < dev->cfg.cores; i++)
        idle += dev->engines[i].sleeping && !dev->engines[i].claimed;
    if (idle == dev->cfg.cores && dev->core_spinners == 0 && dev->core_waking == 0 && dev->core_head &&
        atomic_load_explicit(&dev->core_len, memory_order_relaxed) >= 3 && pti_task_tiny(dev->core_head)) {
        pthread_cond_signal(&dev->core_cv);
        dev->core_waking++;
        atomic_fetch_add_explicit(&dev->st_engine_wakes, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&dev->st_spread_wakes, 1, memory_order_relaxed);
    }
    pthread_mutex_unlock(&dev->core_lock);
}

/* Wake engines for what both queues hold (each under its lock): what a host thread that ran no more leaves behind. */
static void wake_queues(pto_device *dev)
{
    pthread_mutex_lock(&dev->copy_lock);
    wake_queue(dev, true);
    pthread_mutex_unlock(&dev->copy_lock);
    pthread_mutex_lock(&dev->core_lock);
    wake_queue(dev, false);
    pthread_mutex_unlock(&dev->core_lock);
}

uint32_t pti_host_run(pto_device *dev, uint64_t budget_ns)
{
    uint32_t ran = 0;
    /* seq_cst, and closing read after: a close that saw no runner finds no run started after (device.c). */
    atomic_fetch_add(&dev->host_runners, 1);
    if (tl_host_dev == dev && !tl_helping && !atomic_load(&dev->closing)) {
        uint64_t now = pto_now_ns(), until = now + budget_ns;
        for (;;) {
            uint32_t n = host_run_some(dev, true, 64 - ran, until, &now);
            n += host_run_some(dev, false, 64 - ran - n, until, &now);
            ran += n;
            if (!n || ran >= 64 || now >= until)
                break;
        }
    }
    tl_host_dev = NULL;
    /* What is left needs an engine: the pushes since pti_host_begin counted this thread as one. */
    wake_queues(dev);
    atomic_fetch_sub(&dev->host_runners, 1);
    return ran;
}

uint32_t pti_host_end(pto_device *dev, uint64_t budget_ns)
{
    /*
     * The choice waits for work to choose about: a pass that queued nothing
     * for the engines (a notify, a record, an event wait) reads no machine
     * load, whose read (/proc/loadavg, 5-12 us after an idle spell) would
     * sit between the submission and its completion record.
     */
    if (tl_host_dev == dev && (atomic_load(&dev->copy_len) || atomic_load(&dev->core_len))) {
        if (pti_host_first(dev))
            return pti_host_run(dev, budget_ns);
        if (atomic_load(&dev->core_len)) {
            /*
             * A CPU is spare, but a program's tiny tasks (a quick program's,
             * started by this thread's pass: pti_program_quick) are still
             * this thread's to run, beside any awake device thread: a core
             * woken for them arrives (tens of microseconds on an idle VM's
             * CPU) after they could have run.  Other work is left to the
             * engines (pti_host_run wakes them for it).
             */
            spread_burst(dev);
            tl_host_tasks_only = true;
            uint32_t ran = pti_host_run(dev, budget_ns);
            tl_host_tasks_only = false;
            return ran;
        }
    }
    tl_host_dev = NULL;
    /* Nothing queued, or declined: the pushes since pti_host_begin counted this thread as one. */
    atomic_fetch_add(&dev->host_runners, 1); /* as in pti_host_run: close waits for the wake-ups */
    wake_queues(dev);
    atomic_fetch_sub(&dev->host_runners, 1);
    return 0;
}

bool pti_host_serve(pto_device *dev)
{
    if (!pti_host_may_first(dev))
        return false;
    /*
     * With a CPU spare (host first declined) the waiter still serves a
     * program's start and its tiny tasks: it blocks for their completion
     * anyway, on a CPU of its own, and a device thread woken for a burst of
     * them arrives (tens of microseconds on an idle VM's CPU) after the
     * burst could have run.  It runs beside whatever device thread is awake
     * (a spinner, the scheduler thread helping: engine_help), each in a
     * sleeping core's stead, so the burst spreads over both; other work
     * (copies, launches) is left to the engines.
     */
    bool all = pti_host_first(dev);
    atomic_fetch_add(&dev->host_runners, 1); /* seq_cst, then closing: as in pti_host_run */
    bool ran = false;
    if (!atomic_load(&dev->closing)) {
        pti_host_begin(dev);
        tl_host_tasks_only = !all;
        /* A kick nobody served yet (a program's start is left to the scheduler): the pass is ours. */
        if (pti_sched_kick_pending(dev) && pthread_mutex_trylock(&dev->sched_lock) == 0) {
            uint64_t done = atomic_load_explicit(&dev->st_completed, memory_order_relaxed);
            pti_sched_run(dev);
            ran = atomic_load_explicit(&dev->st_completed, memory_order_relaxed) != done;
            pthread_mutex_unlock(&dev->sched_lock);
        }
        if (!all)
            spread_burst(dev);
        ran = pti_host_run(dev, (uint64_t)dev->cfg.inline_us * 1000ull) > 0 || ran;
        tl_host_tasks_only = false;
    }
    atomic_fetch_sub(&dev->host_runners, 1);
    return ran;
}

void pti_core_help(pto_device *dev)
{
    engine_help(dev, false);
}

void pti_copy_help(pto_device *dev)
{
    engine_help(dev, true);
}

static void run_copy(pto_device *dev, struct pto_engine *eng, struct pto_run *run)
{
    struct pto_cmd *cmd = run->cmd;
    char msg[PTI_MSG_LEN] = "";
    int32_t status = 0;
    uint64_t cause = 0;
    bool own = false;
    uint64_t start = pto_now_ns();
    uint64_t n = cmd->kind == PTO_CMD_MEMSET ? cmd->u.set.n : cmd->u.copy.n;
    if (pti_dev_lost(dev)) {
        status = -PTO_EDEVLOST;
    } else if (n > 0) {
        int rc = 0;
        switch (cmd->kind) {
        case PTO_CMD_H2D:
            rc = pti_mem_check_range(dev, cmd->u.copy.dst, n, msg, sizeof(msg));
            break;
        case PTO_CMD_D2H:
            rc = pti_mem_check_range(dev, cmd->u.copy.src, n, msg, sizeof(msg));
            break;
        case PTO_CMD_D2D:
            rc = pti_mem_check_range(dev, cmd->u.copy.dst, n, msg, sizeof(msg));
            if (!rc)
                rc = pti_mem_check_range(dev, cmd->u.copy.src, n, msg, sizeof(msg));
            break;
        case PTO_CMD_MEMSET:
            rc = pti_mem_check_range(dev, cmd->u.set.dst, n, msg, sizeof(msg));
            break;
        case PTO_CMD_PEER:
            rc = pti_peer_copy(dev, cmd, msg, sizeof(msg)); /* checks both sides, then copies */
            break;
        }
        if (rc) {
            status = rc;
            own = true;
        } else if (cmd->kind == PTO_CMD_PEER) {
            /* copied by pti_peer_copy */
        } else if (cmd->kind == PTO_CMD_MEMSET) {
            memset((void *)(uintptr_t)cmd->u.set.dst, cmd->u.set.value, n);
        } else {
            memmove((void *)(uintptr_t)cmd->u.copy.dst, (const void *)(uintptr_t)cmd->u.copy.src, n);
        }
    }
    uint64_t end = pto_now_ns();
    atomic_fetch_add_explicit(&eng->busy_ns, end - start, memory_order_relaxed);
    atomic_fetch_add_explicit(&eng->commands, 1, memory_order_relaxed);
    if (status == 0) {
        atomic_fetch_add_explicit(&eng->bytes, n, memory_order_relaxed);
        atomic_fetch_add_explicit(&dev->st_copies, 1, memory_order_relaxed);
        _Atomic uint64_t *ctr = cmd->kind == PTO_CMD_H2D   ? &dev->st_bytes_h2d
                                : cmd->kind == PTO_CMD_D2H ? &dev->st_bytes_d2h
                                : cmd->kind == PTO_CMD_D2D ? &dev->st_bytes_d2d
                                : cmd->kind == PTO_CMD_PEER ? &dev->st_bytes_peer
                                                           : NULL;
        if (ctr)
            atomic_fetch_add_explicit(ctr, n, memory_order_relaxed);
    }
    pthread_mutex_lock(&dev->sched_lock);
    if (status == -PTO_EDEVLOST) {
        cause = dev->lost_cause;
        pti_msgf(msg, sizeof(msg), "device lost: %s", dev->lost_msg);
    }
    pti_cmd_finish(dev, run->stream, cmd, status, cause, msg, own, start, end, eng->id);
    pti_sched_run(dev);
    pthread_mutex_unlock(&dev->sched_lock);
    pti_core_help(dev); /* what the pass queued for the cores, if they all sleep */
}

static void *copy_main(void *arg)
{
    struct pto_engine *eng = arg;
    pto_device *dev = eng->dev;
    tl_engine = tl_self = eng;
    pti_thread_precise_timers();
    pthread_mutex_lock(&dev->copy_lock);
    for (;;) {
        while ((!dev->copy_head || eng->claimed) && !atomic_load_explicit(&dev->shutdown, memory_order_acquire))
            engine_idle(dev, eng, &dev->copy_lock, &dev->copy_cv, &dev->copy_head, &dev->copy_len,
                        &dev->copy_sleepers, &dev->copy_waking, &dev->copy_spinners,
                        dev->cfg.copy_engines);
        struct pto_run *r = dev->copy_head;
        if (!r)
            break; /* shutdown with an empty queue */
        queue_pop(&dev->copy_head, &dev->copy_tail);
        uint32_t left = atomic_fetch_sub_explicit(&dev->copy_len, 1, memory_order_relaxed) - 1;
        /* We are busy now: what is left needs another engine. */
        wake_for(dev, &dev->copy_cv, left, dev->copy_sleepers, &dev->copy_waking, dev->copy_spinners, 0);
        pthread_mutex_unlock(&dev->copy_lock);
        run_copy(dev, eng, r);
        pthread_mutex_lock(&dev->copy_lock);
    }
    pthread_mutex_unlock(&dev->copy_lock);
    return NULL;
}

void pti_block_fail(const pto_block *blk, int code, const char *msg)
{
    struct pto_run *r = blk->ctx;
    tl_block_failed = 1;
    if (code <= 0 || code > PTO_ENOTSUP)
        code = PTO_EKERNEL;
    int expected = 0;
    if (!atomic_compare_exchange_strong(&r->fail_claim, &expected, 1))
        return;
    /* Read by the run's finisher after its acq_rel add of done_blocks (a task: its own core). */
    r->fail_code = code;
    pti_msgf(r->fail_msg, sizeof(r->fail_msg), "%s", msg && *msg ? msg : "kernel failed");
    if (code == PTO_EDEVLOST) {
        pto_device *dev = r->stream->dev;
        pthread_mutex_lock(&dev->sched_lock);
        pti_device_lose_locked(dev, r->cmd->token, r->fail_msg);
        pthread_mutex_unlock(&dev->sched_lock);
    }
}

static void run_block(pto_device *dev, struct pto_engine *eng, struct pto_run *run, uint32_t b)
{
    struct pto_cmd *cmd = run->cmd;
    pto_kernel *k = cmd->u.launch.k;
    uint32_t blocks = cmd->u.launch.blocks;
    uint64_t start = pto_now_ns();
    bool skip = pti_dev_lost(dev) || atomic_load_explicit(&run->fail_claim, memory_order_acquire);
    tl_block_failed = 0;
    pto_work work;
    memset(&work, 0, sizeof(work));
    if (!skip) {
        pto_block blk = {
            .block_idx = b,
            .block_num = blocks,
            .core_idx = (uint32_t)eng->id,
            .ctx = run,
            .fail = pti_block_fail,
            .work = &work,
        };
        k->fn(&blk, (void *const *)cmd->u.launch.args);
    }
    uint64_t end = pto_now_ns();
    if (!skip) {
        uint64_t ran = end - start; /* what the host-first choice judges the kernel's next launch by */
        atomic_store_explicit(&k->block_ns, ran > UINT32_MAX ? UINT32_MAX : (uint32_t)ran, memory_order_relaxed);
    }
    atomic_fetch_add_explicit(&eng->busy_ns, end - start, memory_order_relaxed);
    atomic_fetch_add_explicit(&eng->commands, 1, memory_order_relaxed);
    struct pto_when w = {start, end, start, eng->id, start, end, eng->id};
    bool traced = false; /* the model places and traces it in the launch's turn (model.c) */
    if (!skip && pti_model_of(dev))
        traced = !pti_model_block(dev, run, b, tl_block_failed ? -PTO_EKERNEL : 0, &work, &w);
    if (!skip && !traced && pti_trace_on(dev))
        pti_trace_cmd(dev, run->stream, cmd, b, tl_block_failed ? -PTO_EKERNEL : 0, &w);
    /* acq_rel: our block's writes (fail_msg included) happen before the finisher reads them. */
    if (atomic_fetch_add_explicit(&run->done_blocks, 1, memory_order_acq_rel) + 1 != blocks)
        return;
    int32_t status = 0;
    uint64_t cause = 0;
    bool own = false;
    char msg[PTI_MSG_LEN] = "";
    pto_stream *s = run->stream;
    atomic_fetch_add_explicit(&dev->st_launches, 1, memory_order_relaxed);
    pthread_mutex_lock(&dev->sched_lock);
    if (atomic_load_explicit(&run->fail_claim, memory_order_acquire)) {
        status = -run->fail_code;
        own = true;
        pti_strlcpy(msg, run->fail_msg, sizeof(msg));
    } else if (pti_dev_lost(dev)) {
        status = -PTO_EDEVLOST;
        cause = dev->lost_cause;
        pti_msgf(msg, sizeof(msg), "device lost: %s", dev->lost_msg);
    }
    pti_cmd_finish(dev, s, cmd, status, cause, msg, own, run->start_ns, end, eng->id);
    pti_sched_run(dev);
    pthread_mutex_unlock(&dev->sched_lock);
}

static void *core_main(void *arg)
{
    struct pto_engine *eng = arg;
    pto_device *dev = eng->dev;
    tl_engine = tl_self = eng;
    pti_thread_precise_timers();
    pthread_mutex_lock(&dev->core_lock);
    for (;;) {
        while ((!dev->core_head || eng->claimed) && !atomic_load_explicit(&dev->shutdown, memory_order_acquire))
            engine_idle(dev, eng, &dev->core_lock, &dev->core_cv, &dev->core_head, &dev->core_len,
                        &dev->core_sleepers, &dev->core_waking, &dev->core_spinners, dev->cfg.cores);
        struct pto_run *r = dev->core_head;
        if (!r)
            break;
        uint32_t b = r->next_block++;
        if (b == 0 && !r->task)
            r->start_ns = pto_now_ns(); /* read by the finisher after done_blocks (acq_rel) */
        if (r->task || r->next_block == r->cmd->u.launch.blocks) {
            /* Last block handed out: the launch leaves the queue (it may still run). */
            queue_pop(&dev->core_head, &dev->core_tail);
            uint32_t left = atomic_fetch_sub_explicit(&dev->core_len, 1, memory_order_relaxed) - 1;
            /* We are busy now: what is left needs another core. */
            wake_for(dev, &dev->core_cv, left, dev->core_sleepers, &dev->core_waking,
                     dev->core_spinners, 0);
        }
        pthread_mutex_unlock(&dev->core_lock);
        if (r->task)
            pti_task_run(dev, eng, r); /* a program's task: one block (orch.c) */
        else
            run_block(dev, eng, r, b);
        pti_copy_help(dev); /* what our finish queued for a sleeping copy engine (self_returning) */
        pthread_mutex_lock(&dev->core_lock);
    }
    pthread_mutex_unlock(&dev->core_lock);
    return NULL;
}

int pti_engines_start(pto_device *dev)
{
    uint32_t ncores = dev->cfg.cores, ncopy = dev->cfg.copy_engines;
    uint32_t nsched = dev->cfg.aicpu_thread_num;
    dev->engines = calloc(ncores + ncopy, sizeof(*dev->engines));
    dev->threads = calloc(ncores + ncopy + nsched, sizeof(*dev->threads));
    if (!dev->engines || !dev->threads) {
        free(dev->engines);
        free(dev->threads);
        dev->engines = NULL;
        dev->threads = NULL;
        return pti_error(PTO_ENOMEM, "pto_device_open: out of host memory");
    }
    for (uint32_t i = 0; i < ncores + ncopy; i++) {
        dev->engines[i].dev = dev;
        dev->engines[i].id = (int32_t)i;
        dev->engines[i].is_copy = i >= ncores;
    }
    for (uint32_t i = 0; i < ncores + ncopy + nsched; i++) {
        void *(*fn)(void *);
        void *arg;
        if (i < ncores) {
            fn = core_main;
            arg = &dev->engines[i];
        } else if (i < ncores + ncopy) {
            fn = copy_main;
            arg = &dev->engines[i];
        } else {
            fn = pti_sched_main;
            arg = dev;
        }
        int rc = pthread_create(&dev->threads[i], NULL, fn, arg);
        if (rc) {
            pti_engines_stop(dev);
            return pti_error(PTO_ENOMEM, "pto_device_open: cannot start thread %u: %s", i,
                             strerror(rc));
        }
        dev->n_threads++;
        /*
         * The host comes first.  Opened on one CPU, the device's threads
         * share it with the host: SCHED_BATCH (the same share of the CPU,
         * no rights needed) keeps a woken device thread from preempting the
         * thread that woke it, so the host goes on submitting until it
         * awaits and the device then runs the whole burst, instead of a
         * context switch per hand-off; a host thread woken by a completion
         * still preempts a device thread.  Not with CPUs to spare: there a
         * woken thread takes an idle CPU, and SCHED_BATCH would only make
         * it wait a time slice behind other processes on a loaded host.
         */
        if (dev->cpus <= 1) {
            struct sched_param sp = {.sched_priority = 0};
            (void)pthread_setschedparam(dev->threads[i], SCHED_BATCH, &sp); /* best effort */
        }
        /* Named for top, perf and gdb: pto-core0, pto-copy0, pto-sched0. */
        char name[32];
        if (i < ncores)
            snprintf(name, sizeof(name), "pto-core%u", i);
        else if (i < ncores + ncopy)
            snprintf(name, sizeof(name), "pto-copy%u", i - ncores);
        else
            snprintf(name, sizeof(name), "pto-sched%u", i - ncores - ncopy);
        pthread_setname_np(dev->threads[i], name);
    }
    return 0;
}

void pti_engines_stop(pto_device *dev)
{
    atomic_store_explicit(&dev->shutdown, 1, memory_order_release);
    pthread_mutex_lock(&dev->sched_lock);
    atomic_fetch_add(&dev->kick, 1);
    pthread_cond_broadcast(&dev->sched_cv);
    pthread_mutex_unlock(&dev->sched_lock);
    pthread_mutex_lock(&dev->copy_lock);
    pthread_cond_broadcast(&dev->copy_cv);
    pthread_mutex_unlock(&dev->copy_lock);
    pthread_mutex_lock(&dev->core_lock);
    pthread_cond_broadcast(&dev->core_cv);
    pthread_mutex_unlock(&dev->core_lock);
    for (size_t i = 0; i < dev->n_threads; i++)
        pthread_join(dev->threads[i], NULL);
    dev->n_threads = 0;
    free(dev->threads);
    free(dev->engines);
    dev->threads = NULL;
    dev->engines = NULL;
}

/* Returns 0 and *out, -PTO_EINVAL for an engine id out of range. */
int pto_engine_get_stats(pto_device *dev, int32_t engine, pto_engine_stats *out)
{
    if (!dev || !out)
        return pti_error(PTO_EINVAL, "pto_engine_get_stats: NULL argument");
    if (pti_model_of(dev))
        return pti_model_engine_stats(dev, engine, out); /* device time: the modeled engines */
    int32_t n = (int32_t)(dev->cfg.cores + dev->cfg.copy_engines);
    if (engine < 0 || engine >= n)
        return pti_error(PTO_EINVAL, "pto_engine_get_stats: engine %d out of range [0, %d)", engine, n);
    struct pto_engine *e = &dev->engines[engine];
    out->engine = engine;
    out->is_copy = e->is_copy;
    out->busy_ns = atomic_load_explicit(&e->busy_ns, memory_order_relaxed);
    out->commands = atomic_load_explicit(&e->commands, memory_order_relaxed);
    out->bytes = atomic_load_explicit(&e->bytes, memory_order_relaxed);
    return 0;
}
