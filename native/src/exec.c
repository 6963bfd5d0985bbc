/*
 * exec.c - execution: starting, finishing and failing a stream's commands.
 *
 * Phase: execution, under dev->sched_lock throughout: the consumer side of
 * the ring (ring.c).  A scheduler pass (sched.c) calls pti_stream_step for
 * each stream with work: it starts the head command on an engine
 * (engines.c), holds it in the scheduler (event wait, delay, latch), or
 * finishes it at once.  pti_cmd_finish completes a command wherever it ran:
 * its record, its resources, the head advance, the overflow refill, the
 * wake-ups.  Cancels drop commands not started.  What a kind does at each of
 * these points is its row in cmddef.c (start, poll, finish, release), so
 * this file names no kind's functions; it keeps the rules every kind
 * shares: in-order execution, failure propagation and cancels.
 *
 * In-order execution
 * ------------------
 * Commands complete strictly in order: the scheduler starts ring[head &
 * mask] only when the previous command has completed, and at most one
 * command of a stream is ever started (queued on an engine, or blocked in
 * the scheduler on a delay, latch or event).  Only sched_lock holders
 * advance head and give back heap bytes and dependency entries.
 *
 * Failure propagation
 * -------------------
 * Each command remembers the stream's epoch when it was accepted (in the
 * ring or the overflow alike), or the earlier epoch a host that held it back
 * backdated it to (pto_stream_backdate).  When a command fails
 * on its own (kernel fail, injected fault, copy fault, latch timeout, or a
 * wait on an event that carries a failure), the stream records that first
 * failure (s->fail).  A later command fails with -PTO_EDEP (cause = the first
 * failure's token) while the failure is unobserved, or if it was accepted
 * before the observation (epoch < observed_epoch).  This is the one place the
 * rule lives: the host keeps no copy of it.  The failure is observed when the
 * host delivers it to its user: it raises the record of the failure, or of a
 * dependent behind it, and says so with pto_completion_observe (stream.c; the
 * record's fail_id names the failure).  Draining records observes nothing,
 * so when the host happens to drain never changes what runs.  A failure the
 * user is never given (a token-less command's, or one whose records nobody
 * retrieves) keeps the stream failing until a dependent's error is delivered:
 * every command after it that has a token carries its fail_id.  Frees on a
 * failed stream still reclaim their block; records still complete their
 * event, carrying the failure.
 */
#include <string.h>

#include "internal.h"

static bool failed_for(const pto_stream *s, const struct pto_cmd *cmd)
{
    return pti_failed_for(s, cmd->epoch);
}

static void release_resources(pto_device *dev, pto_stream *s, struct pto_cmd *cmd)
{
    const struct pto_cmd_def *def = pti_cmd_def(cmd->kind);
    if (def && def->release)
        def->release(dev, s, cmd); /* whatever the outcome: a failed or canceled stream must not leak */
    if (cmd->heap_used)
        /* Release pairs with the acquire load of heap_freed in pti_slot_begin. */
        atomic_fetch_add_explicit(&s->heap_freed, cmd->heap_used, memory_order_release);
}

void pti_cmd_finish(pto_device *dev, pto_stream *s, struct pto_cmd *cmd, int32_t status,
                    uint64_t cause, const char *msg, bool own, uint64_t start_ns, uint64_t end_ns,
                    int32_t engine)
{
    /* Device time: the host's, or the device model's (model.c) when a profile is set. */
    struct pto_when w = {start_ns, end_ns, start_ns, engine, start_ns, end_ns, engine};
    struct pto_model *model = pti_model_of(dev);
    if (model && pti_model_park(dev, s, cmd, status, start_ns, end_ns, engine))
        return; /* placed in modeled order, later (pti_model_unpark) */
    if (model) {
        pti_model_finish(dev, s, cmd, status, &w);
        start_ns = w.start_ns;
        end_ns = w.end_ns;
    }
    uint64_t fail_id = 0;
    if (status != 0 && own) {
        /* The command's own failure: the first failure of the stream from now on. */
        if (status != -PTO_EDEP)
            cause = cmd->token;
        s->fail.set = true;
        s->fail.observed = false;
        s->fail.status = status;
        s->fail.cause = cause;
        s->fail.id = ++s->fail_ids;
        s->fail.seq = cmd->seq;
        pti_strlcpy(s->fail.msg, msg, sizeof(s->fail.msg));
        fail_id = s->fail.id;
        /* A wait's failure came from its event's stream: observing it observes that one too. */
        const struct pto_event_node *from =
            cmd->kind == PTO_CMD_WAIT || cmd->kind == PTO_CMD_LAUNCH ? pti_wait_source(cmd) : NULL;
        s->fail.from_stream = from ? from->fail_stream : 0;
        s->fail.from_id = from ? from->fail_id : 0;
        /*
         * Even with no token (no record the host could deliver) it stays
         * unobserved: the first dependent's record names it, and delivering
         * that observes it.  Observing it here, at the time it ran, would let
         * the commands accepted meanwhile run or fail by the scheduler's timing.
         */
    }
    /* The failure this record's own or dependent failure is (0: none): what delivering it observes. */
    uint64_t rec_fail = fail_id ? fail_id : status == -PTO_EDEP && s->fail.set ? s->fail.id : 0;
    const struct pto_cmd_def *def = pti_cmd_def(cmd->kind);
    if (def && def->finish)
        def->finish(dev, s, cmd, status, cause, rec_fail, msg, end_ns); /* a record completes its event */
    /* The record is built now (the slot may be refilled once head moves) and pushed after. */
    pto_completion c;
    /* A graph replay's command reports only its own first failure (graph.c). */
    uint64_t token = cmd->quiet && !fail_id ? 0 : cmd->token;
    if (token) {
        c.token = cmd->token;
        c.status = status;
        c.stream_id = s->id;
        c.seq = cmd->seq;
        c.submit_ns = cmd->submit_ns;
        c.start_ns = start_ns;
        c.end_ns = end_ns;
        c.cause_token = status ? cause : 0;
        c.flags = fail_id ? PTO_CQ_FIRST_FAILURE : 0;
        c.fail_id = (uint32_t)rec_fail;
        pti_strlcpy(c.message, status ? msg : "", sizeof(c.message));
    }
    if (pti_trace_on(dev))
        pti_trace_cmd(dev, s, cmd, PTI_TRACE_WHOLE, status, &w);
    if (status == -PTO_ECANCELED)
        atomic_fetch_add_explicit(&dev->st_canceled, 1, memory_order_relaxed);
    release_resources(dev, s, cmd);
    cmd->state = PTI_CMD_QUEUED;
    cmd->modeled = false;
    s->active = false;
    /*
     * Release pairs with the acquire loads of head in pti_slot_begin (the slot
     * may be refilled after this store: nothing below reads cmd).  seq_cst for
     * pti_slot_commit's hand-off: our caller's next pass loads tail.
     */
    atomic_store(&s->head, cmd->seq);
    if (s->fence_first)
        pti_fences_fire(dev, s, cmd, status, end_ns); /* streams waiting for this point may go on */
    pti_sched_ready(dev, s); /* its next command may start: the next pass visits it */
    atomic_fetch_add_explicit(&dev->st_completed, 1, memory_order_relaxed);
    /*
     * seq_cst: the completion side of the overflow hand-off (overflow.c).
     * Refilled before the record is pushed, so a host that drains it finds
     * the room it announces taken by the backlog already.
     */
    if (pti_ovf_due(s)) {
        uint64_t first;
        pthread_mutex_lock(&s->submit_lock);
        pti_ovf_refill(s, &first);
        pthread_mutex_unlock(&s->submit_lock);
    }
    /*
     * Pushed after head moved: whoever drains the record sees the command
     * completed (pto_stream_completed, pto_stream_space_left), so a host that
     * refills a full ring on each drained record never finds it still full.
     */
    if (token)
        pti_cq_push(dev, &c);
    if (dev->host_waiters)
        pthread_cond_broadcast(&dev->host_cv);
    if (s->destroyed && pti_stream_idle(s))
        dev->reap = true;
    if (model)
        pti_model_unpark(dev); /* parked copies this one held back */
    /*
     * s's next command may be startable now.  Whoever called us runs
     * scheduler passes next: the scheduler's own pass reports progress and
     * rescans, an engine calls pti_sched_run, a host-side cancel kicks once
     * at its end.
     */
}

/*
 * What a command behind s's failure fails with: "depends on failed token N
 * (STATUS): its message".  A failure carried in by a wait names its chain
 * itself ("via event E, depends on failed token N ...", event.c): as it is.
 */
static void edep_msg(char *buf, size_t n, const pto_stream *s)
{
    if (s->fail.status == -PTO_EDEP && !strncmp(s->fail.msg, PTI_VIA_EVENT, sizeof(PTI_VIA_EVENT) - 1))
        pti_msgf(buf, n, "%s", s->fail.msg);
    else
        pti_msgf(buf, n, "depends on failed token %llu (%s): %s", (unsigned long long)s->fail.cause,
                 pto_status_name(s->fail.status), s->fail.msg);
}

/* Finish cmd with no work done: status decided before it ran. */
static void finish_now(pto_device *dev, pto_stream *s, struct pto_cmd *cmd, int32_t status,
                       uint64_t cause, const char *msg, bool own, uint64_t now)
{
    uint64_t start = cmd->state == PTI_CMD_BLOCKED ? cmd->start_ns : now;
    pti_cmd_finish(dev, s, cmd, status, cause, msg, own, start, now, PTO_ENGINE_NONE);
}

/*
 * The status cmd must complete with before (or instead of) running: lost
 * device, cancel, earlier failure, injected fault.  0: run it.
 */
static int32_t pre_status(pto_device *dev, pto_stream *s, struct pto_cmd *cmd, uint64_t *cause,
                          char *msg, size_t n, bool *own)
{
    *own = false;
    *cause = 0;
    if (pti_dev_lost(dev)) {
        *cause = dev->lost_cause;
        pti_msgf(msg, n, "device lost: %s", dev->lost_msg);
        return -PTO_EDEVLOST;
    }
    if (cmd->seq <= s->cancel_seq) {
        pti_msgf(msg, n, "canceled before it started");
        return -PTO_ECANCELED;
    }
    if (cmd->canceled) {
        /* A withdrawn wait still waits (check_blocked ends it): what follows stays ordered behind it. */
        if (cmd->kind == PTO_CMD_WAIT && (cmd->u.ev.node || cmd->u.ev.set))
            return 0;
        pti_msgf(msg, n, "withdrawn before it started");
        return -PTO_ECANCELED;
    }
    if (failed_for(s, cmd)) {
        /* An ordering-only record completes its event healthy: it marks a point, not a result. */
        if (cmd->kind == PTO_CMD_RECORD && cmd->u.ev.ordering)
            return 0;
        /*
         * A wait still waits for its event before failing: what follows it on
         * this stream (a stream-ordered free above all) was ordered behind the
         * other stream's work, and must stay so even on a failed stream.
         */
        if (cmd->kind == PTO_CMD_WAIT && pti_wait_holds(cmd))
            return 0;
        *cause = s->fail.cause;
        edep_msg(msg, n, s);
        return -PTO_EDEP;
    }
    /* A launch's inline fence (event.c): the failure it carries is the launch's own. */
    if (cmd->kind == PTO_CMD_LAUNCH && cmd->u.launch.after) {
        int32_t st = pti_launch_fence_status(cmd, cause, msg, n);
        if (st) {
            *own = true;
            return st;
        }
    }
    if (cmd->inject > 0 && cmd->state == PTI_CMD_QUEUED) {
        *own = true;
        pti_msgf(msg, n, "injected failure (pto_debug_fail_next): %s", pto_status_name(cmd->inject));
        return -cmd->inject;
    }
    return 0;
}

/* Try to finish a started scheduler-side command (its row's .poll); true if it finished. */
static bool check_blocked(pto_device *dev, pto_stream *s, struct pto_cmd *cmd, uint64_t now,
                          uint64_t *next_deadline)
{
    const struct pto_cmd_def *def = pti_cmd_def(cmd->kind);
    if (!def || !def->poll)
        return false;
    struct pto_cmd_outcome out = {.status = 0, .cause = 0, .own = false, .msg = ""};
    if (!def->poll(dev, s, cmd, now, &out)) {
        if (cmd->deadline_ns && (*next_deadline == 0 || cmd->deadline_ns < *next_deadline))
            *next_deadline = cmd->deadline_ns;
        return false;
    }
    /* Only a wait is held while withdrawn (pre_status): it ends canceled once its event is done. */
    if (cmd->canceled)
        finish_now(dev, s, cmd, -PTO_ECANCELED, 0, "withdrawn before it started", false, now);
    else
        finish_now(dev, s, cmd, out.status, out.cause, out.status ? out.msg : NULL, out.own, now);
    return true;
}

bool pti_stream_step(pto_device *dev, pto_stream *s, uint64_t now, uint64_t *next_deadline)
{
    if (s->active)
        return false;
    uint64_t head = atomic_load_explicit(&s->head, memory_order_relaxed); /* we are the consumer */
    /* seq_cst, an acquire of the slot too: see pti_slot_commit. */
    uint64_t tail = atomic_load(&s->tail);
    if (head == tail)
        return false;
    struct pto_cmd *cmd = &s->ring[head & s->mask];
    /* Behind its inline fence, before anything else decides (event.c): a later pass looks again. */
    if (cmd->kind == PTO_CMD_LAUNCH && cmd->u.launch.after && pti_launch_held(dev, s, cmd))
        return false;
    char msg[PTI_MSG_LEN];
    uint64_t cause;
    bool own;
    int32_t st = pre_status(dev, s, cmd, &cause, msg, sizeof(msg), &own);
    if (st) {
        finish_now(dev, s, cmd, st, cause, msg, own, now);
        return true;
    }
    if (cmd->state == PTI_CMD_BLOCKED)
        return check_blocked(dev, s, cmd, now, next_deadline);

    cmd->start_ns = now;
    const struct pto_cmd_def *def = pti_cmd_def(cmd->kind);
    switch (def ? def->where : PTI_TRACE_ONLY) {
    case PTI_ON_ENGINE:
        /* An engine, or an orchestration thread (a program), finishes it. */
        cmd->state = PTI_CMD_RUNNING;
        s->active = true;
        def->start(dev, s, cmd);
        return true;
    case PTI_AT_ONCE:
        pti_cmd_finish(dev, s, cmd, 0, 0, NULL, false, now, now, PTO_ENGINE_NONE);
        return true;
    case PTI_IN_SCHED:
        cmd->state = PTI_CMD_BLOCKED;
        if (def->start)
            def->start(dev, s, cmd);
        check_blocked(dev, s, cmd, now, next_deadline);
        return true; /* started: progress even if still blocked */
    case PTI_TRACE_ONLY:
        break;
    }
    pti_msgf(msg, sizeof(msg), "unknown command kind %u", cmd->kind);
    pti_cmd_finish(dev, s, cmd, -PTO_EINVAL, 0, msg, true, now, now, PTO_ENGINE_NONE);
    return true;
}

void pti_stream_drop_canceled(pto_device *dev, pto_stream *s)
{
    uint64_t now = pto_now_ns();
    while (!s->active) {
        uint64_t head = atomic_load_explicit(&s->head, memory_order_relaxed);
        uint64_t tail = atomic_load_explicit(&s->tail, memory_order_acquire);
        if (head == tail || head + 1 > s->cancel_seq)
            break;
        struct pto_cmd *cmd = &s->ring[head & s->mask];
        finish_now(dev, s, cmd, -PTO_ECANCELED, 0, "canceled before it started", false, now);
    }
}

int pti_stream_cancel_locked(pto_device *dev, pto_stream *s)
{
    uint64_t head = atomic_load_explicit(&s->head, memory_order_relaxed);
    /* The overflow too: its commands enter the ring as the canceled ones ahead leave it. */
    uint64_t accepted = atomic_load_explicit(&s->accepted, memory_order_acquire);
    int n = (int)(accepted - head) - (s->active ? 1 : 0);
    if (n <= 0)
        return 0;
    if (accepted > s->cancel_seq)
        s->cancel_seq = accepted;
    pti_stream_drop_canceled(dev, s);
    return n;
}
