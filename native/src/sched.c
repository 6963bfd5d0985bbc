/*
 * sched.c - the scheduler: passes over the streams that start ready heads.
 *
 * Phase: execution, under sched_lock in every pass.  Schedulers
 * (aicpu_thread_num) walk the ready list (the streams with work, see below)
 * in priority order and start each ready head (pti_stream_step, exec.c): copies and memsets go to the shared
 * copy queue, launches to the core queue (engines.c), everything else
 * (record, wait, free, notify, delay, latch) they run themselves.  Delays
 * and latches hold their stream's head without occupying an engine or a
 * thread: the scheduler re-checks them on each pass and sleeps until the
 * nearest deadline.
 *
 * Scheduler passes do not only run on scheduler threads (pti_sched_run): an
 * engine that finishes a command runs one at once; a spinning engine runs
 * one when kicked (engines.c, watch_kicks); a submitter whose command lands
 * on an idle stream with no engine spinning runs one itself (submit.c,
 * pti_stream_kick).  The scheduler thread is woken only for what those
 * passes leave behind: a deadline to sleep towards, work left after the
 * passes, or a kick nobody watches.
 *
 * Idling.  A scheduler spins at most spin_us watching atomic counters, and
 * only while a CPU is spare for the host (pti_may_spin, engines.c), then
 * sleeps on sched_cv with no timeout (a scheduler with a delay or latch
 * timeout pending sleeps until that deadline), so an idle device burns no
 * CPU.  A wake-up costs a signal only when a scheduler sleeps:
 * kick (work to schedule) and wakes (deadlines) are seq_cst counters; a
 * scheduler about to sleep increments sched_sleepers (seq_cst) and re-reads
 * both under sched_lock.  pti_sched_kick bumps kick and then reads
 * kick_watchers (a watcher serves it) and sched_sleepers; pti_sched_wake
 * bumps wakes and reads sched_sleepers; either signals under sched_lock only
 * if a scheduler sleeps, and only if no signal is on its way already
 * (sched_signalled: a woken scheduler waiting for a CPU is still a sleeper).
 * In the single total order of seq_cst operations
 * one side sees the other, so a wake-up is never lost, and a busy or
 * spinning scheduler costs a kicker no syscall.  (Engines idle on their
 * own queues: engines.c.)
 */
#include <sched.h>

#include "internal.h"

static void signal_scheduler(pto_device *dev, bool locked)
{
    if (atomic_load(&dev->sched_sleepers) > 0) {
        /*
         * One signal at a time.  A scheduler woken but not yet back on a CPU
         * (a loaded host: it waits a time slice) still counts as a sleeper,
         * and every kick, wake and keeper (engines.c, kept_begin: one per
         * task of a burst) would signal it again, each taking sched_lock.
         * Whoever finds a signal on its way leaves it: the scheduler clears
         * sched_signalled on its way to sleep, before it re-reads kick and
         * wakes (pti_sched_main), and our bump came before our exchange
         * read the flag set, so that re-read sees it.
         */
        if (atomic_exchange(&dev->sched_signalled, 1))
            return;
        atomic_fetch_add_explicit(&dev->st_sched_signals, 1, memory_order_relaxed);
        if (locked) {
            pthread_cond_signal(&dev->sched_cv);
            return;
        }
        /*
         * Taking sched_lock once orders this after a sleeper's re-check of kick
         * and wakes under it: that sleeper is in its wait by the time the lock is
         * ours.  The signal goes after the unlock, so the woken scheduler does not
         * block on sched_lock straight away (and this thread does not pay a
         * second futex call to hand it over).
         */
        pthread_mutex_lock(&dev->sched_lock);
        pthread_mutex_unlock(&dev->sched_lock);
        pthread_cond_signal(&dev->sched_cv);
    }
}

void pti_sched_kick(pto_device *dev, bool locked)
{
    atomic_fetch_add(&dev->kick, 1); /* seq_cst: pairs with the sleepers++ / kick re-read in pti_sched_main */
    if (atomic_load(&dev->kick_watchers) > 0)
        return; /* a spinning engine runs the pass (engines.c, engine_idle) */
    signal_scheduler(dev, locked);
}

void pti_sched_wake(pto_device *dev, bool locked)
{
    /* Not kick: watchers would run a pass for it, and that pass would wake again. */
    atomic_fetch_add(&dev->wakes, 1); /* seq_cst: pairs with the sleepers++ / re-read in pti_sched_main */
    signal_scheduler(dev, locked);
}

/*
 * The ready list.  A pass visits only dev->ready: the streams that may have
 * a command to start or re-check (a head blocked on an event, delay or latch
 * stays on it), highest priority first, first come first within a priority.
 * So a pass costs O(streams with work), however many idle streams are open
 * (st_sched_visits counts the visits).  A stream joins it two ways:
 *
 *   - pti_cmd_finish puts the stream back under sched_lock (its next command
 *     may be startable), as does a pass finding it has work;
 *   - a submitter that finds its stream idle (pti_stream_kick: head + 1 ==
 *     the first new seq) cannot take sched_lock, so it rings the stream's
 *     doorbell: it sets s->bell and, if it was clear, pushes s on
 *     dev->doorbell, a lock-free stack that each pass takes whole (exchange
 *     with NULL: no ABA), reverses (arrival order), and moves to the ready
 *     list, clearing each bell.
 *
 * A pass drops a stream from the list after a visit that finds nothing to
 * do (on an engine, or nothing queued).  That is never a lost wake-up: the
 * drop follows the pass's seq_cst load of tail, after the seq_cst store of
 * head that completed the last command; a submitter stores tail, then loads
 * head (seq_cst), then exchanges bell.  Either the pass sees the new tail
 * and starts it, or the submitter sees the head and rings (Dekker, as in
 * pti_slot_commit).  A bell exchange that found the bell still set
 * precedes the pass's clearing store, which precedes that pass's tail loads.
 */
static void ready_insert(pto_device *dev, pto_stream *s)
{
    /* After the last stream of the same or higher priority: O(1) with one priority. */
    struct pto_link *at = dev->ready.prev;
    while (at != &dev->ready && PTI_CONTAINER(at, pto_stream, ready)->priority < s->priority)
        at = at->prev;
    /* pti_link_add(h, n) links n before h: before at->next is after at. */
    pti_link_add(at->next, &s->ready);
    s->on_ready = true;
}

void pti_sched_ready(pto_device *dev, pto_stream *s)
{
    if (!s->on_ready)
        ready_insert(dev, s);
}

static void ready_remove(pto_stream *s)
{
    pti_link_del(&s->ready);
    s->on_ready = false;
}

void pti_sched_ring(pto_stream *s)
{
    pto_device *dev = s->dev;
    if (atomic_exchange(&s->bell, 1))
        return; /* on the stack already; the pass that takes it clears bell, then loads tail */
    pto_stream *top = atomic_load_explicit(&dev->doorbell, memory_order_relaxed);
    do
        s->bell_next = top;
    while (!atomic_compare_exchange_weak_explicit(&dev->doorbell, &top, s, memory_order_release,
                                                  memory_order_relaxed));
}

/* Move every rung stream to the ready list (sched_lock held). */
static void take_doorbells(pto_device *dev)
{
    if (!atomic_load_explicit(&dev->doorbell, memory_order_relaxed))
        return;
    /* Acquire pairs with the pushes' release: bell_next is written. */
    pto_stream *s = atomic_exchange_explicit(&dev->doorbell, NULL, memory_order_acquire);
    pto_stream *fifo = NULL;
    while (s) {
        pto_stream *next = s->bell_next;
        s->bell_next = fifo;
        fifo = s;
        s = next;
    }
    for (s = fifo; s; s = fifo) {
        fifo = s->bell_next;
        s->bell_next = NULL;
        atomic_store(&s->bell, 0); /* seq_cst: before this pass's tail loads */
        pti_sched_ready(dev, s);
    }
}

void pti_sched_forget(pto_device *dev, pto_stream *s)
{
    /* A stream's last kick returned before it was destroyed: only a pass can hold it. */
    take_doorbells(dev);
    if (s->on_ready)
        ready_remove(s);
}

/* One pass over the streams with work, highest priority first (sched_lock held). */
static bool sched_pass(pto_device *dev, uint64_t *next_deadline)
{
    bool progress = false;
    /*
     * Every kick up to this value is covered by this pass: its kicker stored
     * the stream's tail before bumping kick, and the tail loads below come
     * after this seq_cst load.  Watchers compare kick with it (watch_kicks,
     * engines.c).
     */
    atomic_store(&dev->kick_served, atomic_load(&dev->kick));
    if (dev->reap)
        pti_streams_reap(dev);
    take_doorbells(dev);
    dev->st_sched_passes++;
    uint64_t now = 0; /* read the clock only for a stream with something to start */
    struct pto_link *l = dev->ready.next;
    while (l != &dev->ready) {
        pto_stream *s = PTI_CONTAINER(l, pto_stream, ready);
        dev->st_sched_visits++;
        /* Run a bounded burst per stream so one busy stream cannot starve the rest. */
        for (int burst = 0; burst < 64 && pti_stream_has_work(s); burst++) {
            if (!now)
                now = pto_now_ns();
            if (!pti_stream_step(dev, s, now, next_deadline))
                break;
            progress = true;
            now = 0;
        }
        /* Only s's own commands ran: the list around s is as it was. */
        l = l->next;
        if (!pti_stream_has_work(s))
            ready_remove(s);
    }
    if (dev->reap)
        pti_streams_reap(dev);
    return progress;
}

void *pti_sched_main(void *arg)
{
    pto_device *dev = arg;
    uint64_t spin_ns = (uint64_t)dev->cfg.spin_us * 1000ull;
    pti_thread_precise_timers(); /* delay and latch deadlines */
    pti_sched_thread_init(dev);
    pthread_mutex_lock(&dev->sched_lock);
    bool polled = false; /* the last sleep was a keep poll's (below): no spin after it */
    while (!atomic_load_explicit(&dev->shutdown, memory_order_acquire)) {
        uint64_t k = atomic_load(&dev->kick), w = atomic_load(&dev->wakes);
        uint64_t next_deadline = 0;
        if (sched_pass(dev, &next_deadline)) {
            polled = false;
            /* Work the pass queued for sleeping cores: tiny tasks are ours to run (engines.c, engine_help). */
            pthread_mutex_unlock(&dev->sched_lock);
            pti_core_help(dev);
            pthread_mutex_lock(&dev->sched_lock);
            continue;
        }
        uint64_t kept = pti_backstop(dev, pto_now_ns()); /* a kept run past its budget (engines.c) */
        if (kept && (!next_deadline || kept < next_deadline))
            next_deadline = kept;
        if (spin_ns && !polled && pti_may_spin(dev)) {
            pthread_mutex_unlock(&dev->sched_lock);
            uint64_t end = pto_now_ns() + spin_ns;
            if (next_deadline && next_deadline < end)
                end = next_deadline;
            while (atomic_load_explicit(&dev->kick, memory_order_relaxed) == k &&
                   atomic_load_explicit(&dev->wakes, memory_order_relaxed) == w) {
                sched_yield();   /* see watch_kicks (engines.c): give the CPU to the host */
                if (pto_now_ns() >= end || !pti_cpu_spare(dev))
                    break;
            }
            pthread_mutex_lock(&dev->sched_lock);
            if (atomic_load(&dev->kick) != k || atomic_load(&dev->wakes) != w)
                continue;
            if (next_deadline && pto_now_ns() >= next_deadline)
                continue;
        }
        /* Keeps are recent: a short sleep, so the next burst's keeper need not wake us (kept_begin). */
        uint64_t last_kept = atomic_load_explicit(&dev->last_kept_ns, memory_order_relaxed);
        uint64_t now = pto_now_ns();
        polled = false;
        if (last_kept && now - last_kept < PTI_KEPT_RECENT_NS &&
            (!next_deadline || next_deadline > now + PTI_KEPT_POLL_NS)) {
            next_deadline = now + PTI_KEPT_POLL_NS;
            polled = true; /* woken by it, look and sleep again: a poll is no reason to spin */
        }
        atomic_fetch_add(&dev->sched_sleepers, 1); /* seq_cst: pairs with signal_scheduler */
        /*
         * After sleepers++ and before the re-reads of kick and wakes: a
         * signaller that finds the flag set after this store finds a signal
         * sent after it, which the lock we hold until the wait cannot let
         * pass before it; one that found it set before bumped its counter
         * before, and the re-read sees that.
         */
        atomic_store(&dev->sched_signalled, 0);
        /*
         * seq_cst, then the kept runs read again: a keeper that read no sleep
         * here (engines.c, kept_begin) stored its mark before, and we see it.
         */
        atomic_store(&dev->sched_sleep_until, next_deadline ? next_deadline : UINT64_MAX);
        kept = pti_backstop(dev, pto_now_ns());
        if (kept && (!next_deadline || kept < next_deadline))
            next_deadline = kept;
        if (atomic_load(&dev->kick) == k && atomic_load(&dev->wakes) == w &&
            !atomic_load_explicit(&dev->shutdown, memory_order_acquire))
        {
            atomic_fetch_add_explicit(&dev->asleep, 1, memory_order_relaxed);
            pti_cond_wait_until(&dev->sched_cv, &dev->sched_lock, next_deadline);
            atomic_fetch_sub_explicit(&dev->asleep, 1, memory_order_relaxed);
        }
        atomic_store(&dev->sched_sleep_until, 0);
        atomic_fetch_sub(&dev->sched_sleepers, 1);
    }
    pthread_mutex_unlock(&dev->sched_lock);
    return NULL;
}

/* Whether some kick is newer than the latest pass (sched_pass records what it covers). */
bool pti_sched_kick_pending(pto_device *dev)
{
    return atomic_load(&dev->kick) != atomic_load(&dev->kick_served);
}

/*
 * Run scheduler passes from the calling thread (sched_lock held) until
 * everything startable has started (another pass is needed only after one
 * that completed commands: starting work frees nothing); wake the
 * scheduler thread only if it has something to do: a delay or latch deadline
 * to sleep towards, or work left after the last allowed pass.  Both the
 * engines (after finishing a command) and submitters (pti_slot_commit's fast
 * path) call this.  Without it, s's next command, and any stream whose head
 * waits on an event that just fired, would wait for the scheduler thread to
 * be woken and scheduled: on an oversubscribed host (every core thread busy
 * in a kernel) that takes milliseconds, and on an idle one each such hand-off
 * costs a vCPU wake-up (tens of microseconds) on the launch's critical path.
 */
void pti_sched_run(pto_device *dev)
{
    uint64_t next_deadline = 0;
    bool progress = false;
    for (int pass = 0; pass < 4; pass++) {
        /* Commands complete only under sched_lock: the count is ours to compare. */
        uint64_t completed = atomic_load_explicit(&dev->st_completed, memory_order_relaxed);
        next_deadline = 0;
        progress = sched_pass(dev, &next_deadline) &&
                   atomic_load_explicit(&dev->st_completed, memory_order_relaxed) != completed;
        if (!progress)
            break;
    }
    if (progress || next_deadline)
        pti_sched_wake(dev, true); /* the scheduler thread tracks deadlines */
}

/* ---- the delay command (its row in cmddef.c): a hold the passes time ---------------------- */

void pti_delay_start(pto_device *dev, pto_stream *s, struct pto_cmd *cmd)
{
    cmd->deadline_ns = cmd->start_ns + cmd->u.delay.us * 1000ull;
}

bool pti_delay_poll(pto_device *dev, pto_stream *s, struct pto_cmd *cmd, uint64_t now,
                    struct pto_cmd_outcome *out)
{
    return now >= cmd->deadline_ns;
}
