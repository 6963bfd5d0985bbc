/*
 * graph.c - graphs: a recorded step, replayed with new addresses in one call.
 *
 * Phase: submission.  A graph is plain host data: the commands in the order
 * they were added, each on a stream slot, with its static arguments; the
 * patches that say which argument takes which input's address; and the
 * graph's own events.  Nothing here runs on a driver thread: a replay is a
 * producer like any other, queuing each command through the pto_stream_*
 * call of its kind (submit.c), so ring room, the overflow, back-dating and
 * failure propagation are exactly those of eager commands.  A stream's run
 * of launches, copies and memsets goes as one batch (pti_batch_begin,
 * submit.c: submit_lock once, one fence), and so does the origin's end of
 * the replay (its staging out, done record and notify) with the run before
 * it; consecutive launches go in as one run of slots (queue_launch_run:
 * the ring's room read once, each slot's arguments copied as recorded and
 * patched in place, one tail store); each kernel's references for the
 * replay are taken in one add, and every stream used gets one kick at the
 * end (pti_stream_kick_deferred), the notify's included.
 *
 * One record per replay
 * ---------------------
 * The replay's commands are quiet (pti_quiet while it queues them): each
 * carries a tag, token + 1 + its index, and pushes a completion record only
 * if it is its stream's first failure (exec.c, pti_cmd_finish).  The rest of the replay
 * fails behind it as dependents, silently, and the replay's last command, a
 * notify with the replay's token on the origin stream, reports -PTO_EDEP
 * naming the failed command's tag as its cause.  The host delivers that
 * record (the replay's error) and observes with it (pto_completion_observe)
 * the origin's failure and, along the joins it came through, the failed
 * fork's: a replay's failure is observed as one.  A program run is one such
 * command however many tasks it holds: it completes (pti_cmd_finish, from
 * the thread that finishes the run) once all its tasks have, failing with
 * its first failing task's "task NAME: message", so the rule is the same.
 * Every fork of the graph
 * joins the origin before that notify (the host checks it at capture), so
 * the notify completes after every command of the replay.
 *
 * Judged as one submission
 * ------------------------
 * A command may run, fail and be observed (its replay's error delivered by
 * another thread, or an earlier failure's) while the replay is still queuing
 * later ones.  Each stream is back-dated (pto_stream_backdate's field) to
 * its epoch when the replay began, so the rest of the replay fails as
 * dependents instead of running on a failed command's output.
 *
 * Replays in order
 * ----------------
 * Replays on one origin stream are ordered by the stream.  When a replay's
 * origin differs from the previous one's, it first waits for the previous
 * replay's end: an ordering-only record of the graph's `done` event, which
 * every replay queues before its notify (ordering-only, so a failed replay
 * does not fail the next one).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

enum { G_LAUNCH = 1, G_PROGRAM, G_COPY, G_MEMSET, G_RECORD, G_WAIT, G_WAIT_EXT };

struct pto_gcmd {
    uint32_t op;                  /* G_* */
    uint32_t slot;                /* stream slot */
    uint32_t kind;                /* copies: PTO_CMD_H2D / D2H / D2D */
    uint32_t event;               /* record/wait: graph event index */
    pto_event *ext;               /* wait on an outside event */
    pto_kernel *k;                /* launch (a reference held) */
    pto_program *prog;            /* program run (a reference held) */
    uint32_t blocks, nargs;
    uint64_t args_at;             /* launch, program: offset of its arguments in g->args */
    uint64_t dst, src, n;         /* copy / memset (value in src) */
    uint32_t patch_at, patches;   /* its patches: g->patches[patch_at .. + patches) */
};

struct pto_gpatch {
    uint32_t cmd, field, input, use;
};

struct pto_ginput {
    uint64_t nbytes;
    uint32_t use;                 /* PTO_GRAPH_READ | PTO_GRAPH_WRITE, from every patch */
    bool staged;                  /* a launch or program takes its address: host bindings are staged */
    bool patched;
};

struct pto_graph {
    pto_device *dev;
    struct pto_gcmd *cmds;
    uint32_t n_cmds, cap_cmds;
    uint64_t *args;
    uint64_t n_args, cap_args;
    struct pto_gpatch *patches;
    uint32_t n_patches, cap_patches;
    struct pto_ginput *inputs;
    uint32_t n_inputs, cap_inputs;
    pto_hz_access *accs;          /* the allocations used at fixed addresses (pto_graph_add_access) */
    uint32_t n_accs, cap_accs;
    uint32_t n_streams, n_events, n_launches, max_nargs;
    bool instantiated;
    pto_event **events;
    pto_event *done;              /* recorded (ordering only) at every replay's end */
    uint32_t last_origin;         /* stream id of the previous replay's origin */
    bool replayed;
    struct pto_gkref *krefs;      /* each kernel the launches use, with their count (instantiate) */
    uint32_t n_krefs;
    uint32_t *others;             /* the commands that are not launches, in order (instantiate) */
    uint32_t n_others;
    /*
     * The launches' arguments as the last replay's full check found them
     * (check_replay): the same bindings on the same streams are as good while
     * no block left the arena (mem_gen) and no kernel declared its kinds since.
     */
    bool memo;
    uint64_t memo_gen;
    uint32_t memo_nokinds;        /* kernels of krefs with no kinds declared */
    uint64_t *memo_ptrs;          /* n_inputs */
    pto_stream **memo_streams;    /* n_streams */
    uint32_t *memo_heap;          /* each stream's heap_size */
};

struct pto_gkref {
    pto_kernel *k;
    uint32_t n;
};

_Thread_local bool pti_quiet __attribute__((tls_model("initial-exec"))) = false;
_Thread_local uint64_t pti_submit_ns __attribute__((tls_model("initial-exec"))) = 0;
_Thread_local bool pti_defer_kicks __attribute__((tls_model("initial-exec"))) = false;

static bool grow(void **v, uint64_t *cap, uint64_t need, size_t size)
{
    if (need <= *cap)
        return true;
    uint64_t ncap = *cap ? *cap * 2 : 16;
    while (ncap < need)
        ncap *= 2;
    void *p = realloc(*v, (size_t)ncap * size);
    if (!p)
        return false;
    *v = p;
    *cap = ncap;
    return true;
}

static bool grow32(void **v, uint32_t *cap, uint32_t need, size_t size)
{
    uint64_t c = *cap;
    bool ok = grow(v, &c, need, size);
    *cap = (uint32_t)c;
    return ok;
}

int pto_graph_create(pto_device *dev, pto_graph **out)
{
    if (!dev || !out)
        return pti_error(PTO_EINVAL, "pto_graph_create: NULL argument");
    pto_graph *g = calloc(1, sizeof(*g));
    if (!g)
        return pti_error(PTO_ENOMEM, "pto_graph_create: out of host memory");
    g->dev = dev;
    g->n_streams = 1; /* slot 0, the origin, always: an empty graph replays as a no-op there */
    *out = g;
    return 0;
}

void pto_graph_destroy(pto_graph *g)
{
    if (!g)
        return;
    for (uint32_t i = 0; i < g->n_cmds; i++)
        if (g->cmds[i].op == G_LAUNCH)
            pti_kernel_unref(g->cmds[i].k);
        else if (g->cmds[i].op == G_PROGRAM)
            pti_program_unref(g->cmds[i].prog);
    if (g->events)
        for (uint32_t i = 0; i < g->n_events; i++)
            if (g->events[i])
                pto_event_destroy(g->events[i]);
    if (g->done)
        pto_event_destroy(g->done);
    free(g->events);
    free(g->cmds);
    free(g->args);
    free(g->patches);
    free(g->inputs);
    free(g->accs);
    free(g->krefs);
    free(g->others);
    free(g->memo_ptrs);
    free(g->memo_streams);
    free(g->memo_heap);
    free(g);
}

int pto_graph_get_info(const pto_graph *g, pto_graph_info *out)
{
    if (!g || !out)
        return pti_error(PTO_EINVAL, "pto_graph_get_info: NULL argument");
    memset(out, 0, sizeof(*out));
    out->commands = g->n_cmds;
    out->streams = g->n_streams;
    out->events = g->n_events;
    out->inputs = g->n_inputs;
    out->launches = g->n_launches;
    out->instantiated = g->instantiated;
    return 0;
}

/* A new command on slot, zeroed, or NULL with the error set (*rc). */
static struct pto_gcmd *new_cmd(pto_graph *g, uint32_t slot, const char *fn, int *rc)
{
    if (!g) {
        *rc = pti_error(PTO_EINVAL, "%s: NULL graph", fn);
        return NULL;
    }
    if (g->instantiated) {
        *rc = pti_error(PTO_EINVAL, "%s: the graph is instantiated already", fn);
        return NULL;
    }
    if (slot > 1024) {
        *rc = pti_error(PTO_EINVAL, "%s: stream slot %u is out of range", fn, slot);
        return NULL;
    }
    if (!grow32((void **)&g->cmds, &g->cap_cmds, g->n_cmds + 1, sizeof(*g->cmds))) {
        *rc = pti_error(PTO_ENOMEM, "%s: out of host memory", fn);
        return NULL;
    }
    struct pto_gcmd *c = &g->cmds[g->n_cmds];
    memset(c, 0, sizeof(*c));
    c->slot = slot;
    if (slot + 1 > g->n_streams)
        g->n_streams = slot + 1;
    *rc = (int)g->n_cmds++;
    return c;
}

/* A new launch or program command with its arguments copied, or NULL with the error set (*rc). */
static struct pto_gcmd *new_call(pto_graph *g, uint32_t slot, const uint64_t *args, uint32_t nargs,
                                 const char *fn, int *rc)
{
    if (nargs && !args) {
        *rc = pti_error(PTO_EINVAL, "%s: NULL args with nargs=%u", fn, nargs);
        return NULL;
    }
    if (g && (uint64_t)nargs * 8u > g->dev->cfg.ring_heap) {
        *rc = pti_error(PTO_EINVAL, "%s: %u arguments exceed the %u-byte ring heap", fn, nargs,
                        g->dev->cfg.ring_heap);
        return NULL;
    }
    if (g && !grow((void **)&g->args, &g->cap_args, g->n_args + nargs, sizeof(uint64_t))) {
        *rc = pti_error(PTO_ENOMEM, "%s: out of host memory", fn);
        return NULL;
    }
    struct pto_gcmd *c = new_cmd(g, slot, fn, rc);
    if (!c)
        return NULL;
    c->nargs = nargs;
    c->args_at = g->n_args;
    if (nargs)
        memcpy(&g->args[g->n_args], args, (size_t)nargs * 8u);
    g->n_args += nargs;
    g->n_launches++;
    if (nargs > g->max_nargs)
        g->max_nargs = nargs;
    return c;
}

int pto_graph_add_launch(pto_graph *g, uint32_t slot, pto_kernel *k, uint32_t blocks,
                         const uint64_t *args, uint32_t nargs)
{
    const char *fn = "pto_graph_add_launch";
    if (g && (!k || k->dev != g->dev))
        return pti_error(PTO_EINVAL, "%s: kernel is NULL or from another device", fn);
    if (blocks == 0)
        return pti_error(PTO_EINVAL, "%s: blocks must be >= 1", fn);
    int rc;
    struct pto_gcmd *c = new_call(g, slot, args, nargs, fn, &rc);
    if (!c)
        return rc;
    c->op = G_LAUNCH;
    pti_kernel_ref(k);
    c->k = k;
    c->blocks = blocks;
    return rc;
}

int pto_graph_add_program(pto_graph *g, uint32_t slot, pto_program *p, const uint64_t *args, uint32_t nargs)
{
    const char *fn = "pto_graph_add_program";
    if (g && (!p || pti_program_device(p) != g->dev))
        return pti_error(PTO_EINVAL, "%s: program is NULL or from another device", fn);
    if (p && pti_program_unloaded(p))
        return pti_error(PTO_EINVAL, "%s: program %s was unloaded", fn, pto_program_name(p));
    if (p && nargs != pti_program_nparams(p))
        return pti_error(PTO_EINVAL, "%s: program %s takes %u arguments, got %u", fn, pto_program_name(p),
                         pti_program_nparams(p), nargs);
    int rc;
    struct pto_gcmd *c = new_call(g, slot, args, nargs, fn, &rc);
    if (!c)
        return rc;
    c->op = G_PROGRAM;
    pti_program_ref(p);
    c->prog = p;
    c->blocks = 1;
    return rc;
}

int pto_graph_add_copy(pto_graph *g, uint32_t slot, uint32_t kind, uint64_t dst, uint64_t src,
                       uint64_t nbytes)
{
    const char *fn = "pto_graph_add_copy";
    if (kind != PTO_CMD_H2D && kind != PTO_CMD_D2H && kind != PTO_CMD_D2D)
        return pti_error(PTO_EINVAL, "%s: kind %u is not a copy", fn, kind);
    int rc;
    struct pto_gcmd *c = new_cmd(g, slot, fn, &rc);
    if (!c)
        return rc;
    c->op = G_COPY;
    c->kind = kind;
    c->dst = dst;
    c->src = src;
    c->n = nbytes;
    return rc;
}

int pto_graph_add_memset(pto_graph *g, uint32_t slot, uint64_t dst, uint8_t value, uint64_t nbytes)
{
    int rc;
    struct pto_gcmd *c = new_cmd(g, slot, "pto_graph_add_memset", &rc);
    if (!c)
        return rc;
    c->op = G_MEMSET;
    c->dst = dst;
    c->src = value;
    c->n = nbytes;
    return rc;
}

static int add_event_cmd(pto_graph *g, uint32_t slot, uint32_t event, uint32_t op, const char *fn)
{
    if (event > 65535)
        return pti_error(PTO_EINVAL, "%s: event %u is out of range", fn, event);
    int rc;
    struct pto_gcmd *c = new_cmd(g, slot, fn, &rc);
    if (!c)
        return rc;
    c->op = op;
    c->event = event;
    if (event + 1 > g->n_events)
        g->n_events = event + 1;
    return rc;
}

int pto_graph_add_record(pto_graph *g, uint32_t slot, uint32_t event)
{
    return add_event_cmd(g, slot, event, G_RECORD, "pto_graph_add_record");
}

int pto_graph_add_wait(pto_graph *g, uint32_t slot, uint32_t event)
{
    return add_event_cmd(g, slot, event, G_WAIT, "pto_graph_add_wait");
}

int pto_graph_add_wait_external(pto_graph *g, uint32_t slot, pto_event *e)
{
    const char *fn = "pto_graph_add_wait_external";
    if (g && (!e || e->dev != g->dev))
        return pti_error(PTO_EINVAL, "%s: event is NULL or from another device", fn);
    int rc;
    struct pto_gcmd *c = new_cmd(g, slot, fn, &rc);
    if (!c)
        return rc;
    c->op = G_WAIT_EXT;
    c->ext = e;
    return rc;
}

int pto_graph_add_input(pto_graph *g, uint64_t nbytes)
{
    if (!g)
        return pti_error(PTO_EINVAL, "pto_graph_add_input: NULL graph");
    if (g->instantiated)
        return pti_error(PTO_EINVAL, "pto_graph_add_input: the graph is instantiated already");
    if (!grow32((void **)&g->inputs, &g->cap_inputs, g->n_inputs + 1, sizeof(*g->inputs)))
        return pti_error(PTO_ENOMEM, "pto_graph_add_input: out of host memory");
    struct pto_ginput *in = &g->inputs[g->n_inputs];
    memset(in, 0, sizeof(*in));
    in->nbytes = nbytes;
    return (int)g->n_inputs++;
}

int pto_graph_add_access(pto_graph *g, pto_devptr addr, uint32_t flags)
{
    const char *fn = "pto_graph_add_access";
    if (!g)
        return pti_error(PTO_EINVAL, "%s: NULL graph", fn);
    if (g->instantiated)
        return pti_error(PTO_EINVAL, "%s: the graph is instantiated already", fn);
    if (!addr || !flags || (flags & ~(uint32_t)(PTO_HZ_READ | PTO_HZ_WRITE)))
        return pti_error(PTO_EINVAL, "%s: an address and PTO_HZ_READ and/or PTO_HZ_WRITE expected", fn);
    if (!grow32((void **)&g->accs, &g->cap_accs, g->n_accs + 1, sizeof(*g->accs)))
        return pti_error(PTO_ENOMEM, "%s: out of host memory", fn);
    g->accs[g->n_accs++] = (pto_hz_access){addr, flags, 0};
    return 0;
}

int pto_graph_patch(pto_graph *g, uint32_t cmd, uint32_t field, uint32_t input, uint32_t use)
{
    const char *fn = "pto_graph_patch";
    if (!g)
        return pti_error(PTO_EINVAL, "%s: NULL graph", fn);
    if (g->instantiated)
        return pti_error(PTO_EINVAL, "%s: the graph is instantiated already", fn);
    if (cmd >= g->n_cmds || input >= g->n_inputs)
        return pti_error(PTO_EINVAL, "%s: command %u or input %u does not exist", fn, cmd, input);
    struct pto_gcmd *c = &g->cmds[cmd];
    if (c->patches && c->patch_at + c->patches != g->n_patches)
        return pti_error(PTO_EINVAL, "%s: patch command %u's fields together, before the next command's",
                         fn, cmd);
    struct pto_ginput *in = &g->inputs[input];
    switch (c->op) {
    case G_LAUNCH:
    case G_PROGRAM:
        if (field >= c->nargs)
            return pti_error(PTO_EINVAL, "%s: the %s has %u arguments, no argument %u", fn,
                             c->op == G_LAUNCH ? "launch" : "program", c->nargs, field);
        if (!use || (use & ~(PTO_GRAPH_READ | PTO_GRAPH_WRITE)))
            return pti_error(PTO_EINVAL, "%s: use must be PTO_GRAPH_READ and/or PTO_GRAPH_WRITE", fn);
        in->staged = true;
        break;
    case G_COPY:
    case G_MEMSET:
        if (field == PTO_GRAPH_DST) {
            if (c->op == G_COPY && c->kind == PTO_CMD_D2H)
                return pti_error(PTO_EINVAL, "%s: a D2H copy's destination is a host address", fn);
            use = PTO_GRAPH_WRITE;
            if (c->op == G_MEMSET)
                in->staged = true; /* a memset writes device memory only */
        } else if (field == PTO_GRAPH_SRC && c->op == G_COPY) {
            if (c->kind == PTO_CMD_H2D)
                return pti_error(PTO_EINVAL, "%s: an H2D copy's source is a host address", fn);
            use = PTO_GRAPH_READ;
        } else {
            return pti_error(PTO_EINVAL, "%s: field %u of a %s", fn, field,
                             c->op == G_COPY ? "copy (PTO_GRAPH_DST or PTO_GRAPH_SRC)"
                                             : "memset (PTO_GRAPH_DST)");
        }
        break;
    default:
        return pti_error(PTO_EINVAL, "%s: command %u takes no address", fn, cmd);
    }
    if (!grow32((void **)&g->patches, &g->cap_patches, g->n_patches + 1, sizeof(*g->patches)))
        return pti_error(PTO_ENOMEM, "%s: out of host memory", fn);
    if (!c->patches)
        c->patch_at = g->n_patches;
    g->patches[g->n_patches++] = (struct pto_gpatch){cmd, field, input, use};
    c->patches++;
    in->use |= use;
    in->patched = true;
    return 0;
}

int pto_graph_instantiate(pto_graph *g)
{
    const char *fn = "pto_graph_instantiate";
    if (!g)
        return pti_error(PTO_EINVAL, "%s: NULL graph", fn);
    if (g->instantiated)
        return pti_error(PTO_EINVAL, "%s: the graph is instantiated already", fn);
    for (uint32_t i = 0; i < g->n_inputs; i++)
        if (!g->inputs[i].patched)
            return pti_error(PTO_EINVAL, "%s: input %u is used by no command", fn, i);
    /* A wait must find its event recorded by an earlier command of the replay. */
    bool *recorded = calloc(g->n_events ? g->n_events : 1, sizeof(bool));
    if (!recorded)
        return pti_error(PTO_ENOMEM, "%s: out of host memory", fn);
    for (uint32_t i = 0; i < g->n_cmds; i++) {
        struct pto_gcmd *c = &g->cmds[i];
        if (c->op == G_RECORD)
            recorded[c->event] = true;
        else if (c->op == G_WAIT && !recorded[c->event]) {
            free(recorded);
            return pti_error(PTO_EINVAL, "%s: command %u waits on event %u, which no earlier command records",
                             fn, i, c->event);
        }
    }
    free(recorded);
    /* A replay takes its launches' kernel references once per kernel (replay, below). */
    if ((g->n_launches && !(g->krefs = calloc(g->n_launches, sizeof(*g->krefs)))) ||
        !(g->memo_ptrs = calloc(g->n_inputs ? g->n_inputs : 1, sizeof(*g->memo_ptrs))) ||
        !(g->memo_streams = calloc(g->n_streams, sizeof(*g->memo_streams))) ||
        !(g->memo_heap = calloc(g->n_streams, sizeof(*g->memo_heap))) ||
        !(g->others = calloc(g->n_cmds + 1, sizeof(*g->others))))
        return pti_error(PTO_ENOMEM, "%s: out of host memory", fn);
    for (uint32_t i = 0; i < g->n_cmds; i++) {
        if (g->cmds[i].op != G_LAUNCH) {
            g->others[g->n_others++] = i;
            continue;
        }
        uint32_t j = 0;
        while (j < g->n_krefs && g->krefs[j].k != g->cmds[i].k)
            j++;
        if (j == g->n_krefs)
            g->krefs[g->n_krefs++] = (struct pto_gkref){g->cmds[i].k, 0};
        g->krefs[j].n++;
    }
    g->events = calloc(g->n_events ? g->n_events : 1, sizeof(pto_event *));
    if (!g->events)
        return pti_error(PTO_ENOMEM, "%s: out of host memory", fn);
    int rc = pto_event_create(g->dev, &g->done);
    for (uint32_t i = 0; !rc && i < g->n_events; i++)
        rc = pto_event_create(g->dev, &g->events[i]);
    if (rc)
        return rc; /* pto_graph_destroy releases what was created */
    g->instantiated = true;
    return 0;
}

int pto_graph_input_staged(const pto_graph *g, uint32_t input)
{
    if (!g || input >= g->n_inputs)
        return pti_error(PTO_EINVAL, "pto_graph_input_staged: no input %u", input);
    return g->inputs[input].staged;
}

/* ---- replay ------------------------------------------------------------------ */

struct replay {
    pto_graph *g;
    pto_stream *const *streams;
    const uint64_t *dev_ptrs, *host_ptrs;
};

static bool host_bound(const struct replay *r, uint32_t input)
{
    return r->host_ptrs && r->host_ptrs[input];
}

/*
 * The address input i stands for in field `field` of copy c: a copy-only
 * host-bound input is its host array; anything else its device address.
 * *host: whether it is a host address.
 */
static uint64_t copy_side(const struct replay *r, uint32_t input, bool *host)
{
    const struct pto_ginput *in = &r->g->inputs[input];
    if (host_bound(r, input) && !in->staged) {
        *host = true;
        return r->host_ptrs[input];
    }
    *host = false;
    return r->dev_ptrs[input];
}

/* A copy as it goes in this replay: kind, dst, src.  -PTO_EINVAL if host to host. */
static int resolve_copy(const struct replay *r, const struct pto_gcmd *c, uint32_t *kind,
                        uint64_t *dst, uint64_t *src)
{
    bool dst_host = c->kind == PTO_CMD_D2H, src_host = c->kind == PTO_CMD_H2D;
    *dst = c->dst;
    *src = c->src;
    for (uint32_t p = 0; p < c->patches; p++) {
        const struct pto_gpatch *pt = &r->g->patches[c->patch_at + p];
        if (pt->field == PTO_GRAPH_DST)
            *dst = copy_side(r, pt->input, &dst_host);
        else
            *src = copy_side(r, pt->input, &src_host);
    }
    if (dst_host && src_host)
        return pti_error(PTO_EINVAL, "pto_graph_replay: command %u would copy host to host (both sides "
                         "bound to host arrays)", (unsigned)(c - r->g->cmds));
    *kind = dst_host ? PTO_CMD_D2H : src_host ? PTO_CMD_H2D : PTO_CMD_D2D;
    return 0;
}

static int check_range(pto_device *dev, uint64_t addr, uint64_t n, uint32_t cmd)
{
    if (n == 0 || pti_mem_in_arena(dev, addr, n))
        return 0;
    return pti_error(PTO_EINVAL, "pto_graph_replay: command %u: device range 0x%llx+%llu lies outside the "
                     "device arena", cmd, (unsigned long long)addr, (unsigned long long)n);
}

/* The arguments launch or program command c takes in replay r: its own, or patched into scratch. */
static const uint64_t *patched_args(const struct replay *r, const struct pto_gcmd *c, uint64_t *scratch)
{
    pto_graph *g = r->g;
    const uint64_t *args = &g->args[c->args_at];
    if (!c->patches)
        return args;
    memcpy(scratch, args, (size_t)c->nargs * 8u);
    for (uint32_t p = 0; p < c->patches; p++) {
        const struct pto_gpatch *pt = &g->patches[c->patch_at + p];
        scratch[pt->field] = r->dev_ptrs[pt->input];
    }
    return scratch;
}

/* Whether a kernel the launches use was unloaded. */
static bool kernel_unloaded(const pto_graph *g)
{
    for (uint32_t i = 0; i < g->n_krefs; i++)
        if (atomic_load_explicit(&g->krefs[i].k->unloaded, memory_order_acquire))
            return true;
    return false;
}

static uint32_t kernels_without_kinds(const pto_graph *g)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < g->n_krefs; i++)
        n += atomic_load_explicit(&g->krefs[i].k->kinds, memory_order_acquire) == NULL;
    return n;
}

/* Whether the launches' last full check holds for replay r (g->memo; inputs and streams checked already). */
static bool memo_holds(const struct replay *r, uint64_t gen)
{
    pto_graph *g = r->g;
    if (!g->memo || gen != g->memo_gen)
        return false;
    if (g->n_inputs && memcmp(r->dev_ptrs, g->memo_ptrs, (size_t)g->n_inputs * sizeof(uint64_t)))
        return false;
    for (uint32_t i = 0; i < g->n_streams; i++)
        if (r->streams[i] != g->memo_streams[i] || r->streams[i]->heap_size != g->memo_heap[i])
            return false;
    return kernels_without_kinds(g) == g->memo_nokinds;
}

static void memo_set(const struct replay *r, uint64_t gen)
{
    pto_graph *g = r->g;
    if (g->n_inputs)
        memcpy(g->memo_ptrs, r->dev_ptrs, (size_t)g->n_inputs * sizeof(uint64_t));
    for (uint32_t i = 0; i < g->n_streams; i++) {
        g->memo_streams[i] = r->streams[i];
        g->memo_heap[i] = r->streams[i]->heap_size;
    }
    g->memo_nokinds = kernels_without_kinds(g);
    g->memo_gen = gen;
    g->memo = true;
}

/* Everything a replay is checked for before it queues anything (scratch: g->max_nargs slots). */
static int check_replay(const struct replay *r, uint32_t nstreams, uint32_t ninputs, uint64_t *scratch)
{
    const char *fn = "pto_graph_replay";
    pto_graph *g = r->g;
    if (!g->instantiated)
        return pti_error(PTO_EINVAL, "%s: the graph is not instantiated", fn);
    if (nstreams != g->n_streams || (nstreams && !r->streams))
        return pti_error(PTO_EINVAL, "%s: the graph uses %u streams, got %u", fn, g->n_streams, nstreams);
    for (uint32_t i = 0; i < nstreams; i++) {
        if (!r->streams[i] || r->streams[i]->dev != g->dev)
            return pti_error(PTO_EINVAL, "%s: stream %u is NULL or of another device", fn, i);
        /* With it off a full ring would refuse the replay part way; with it on nothing can. */
        if (!r->streams[i]->ovf.on)
            return pti_error(PTO_EINVAL, "%s: stream %u has its overflow off (pto_stream_set_overflow)",
                             fn, i);
    }
    if (ninputs != g->n_inputs || (ninputs && !r->dev_ptrs))
        return pti_error(PTO_EINVAL, "%s: the graph has %u inputs, got %u", fn, g->n_inputs, ninputs);
    for (uint32_t i = 0; i < ninputs; i++) {
        const struct pto_ginput *in = &g->inputs[i];
        bool host = host_bound(r, i);
        if ((in->staged || !host) && r->dev_ptrs[i] == 0)
            return pti_error(PTO_EINVAL, "%s: input %u has no device address", fn, i);
        if ((in->staged || !host) && !pti_mem_in_arena(g->dev, r->dev_ptrs[i], in->nbytes ? in->nbytes : 1))
            return pti_error(PTO_EINVAL, "%s: input %u's device range 0x%llx+%llu lies outside the device arena",
                             fn, i, (unsigned long long)r->dev_ptrs[i], (unsigned long long)in->nbytes);
    }
    /* Acquire pairs with mem_changed (memory.c): read before the checks it stands for. */
    uint64_t gen = atomic_load_explicit(&g->dev->mem_gen, memory_order_acquire);
    bool memo = memo_holds(r, gen);
    /*
     * The launches' checks remembered and none of their kernels unloaded: only the other commands are
     * looked at (a launch would pass), in order, so the first refusal is the one the whole loop gives.
     */
    bool others = memo && !kernel_unloaded(g);
    uint32_t n = others ? g->n_others : g->n_cmds;
    for (uint32_t j = 0; j < n; j++) {
        uint32_t i = others ? g->others[j] : j;
        const struct pto_gcmd *c = &g->cmds[i];
        uint32_t kind;
        uint64_t dst, src;
        int rc = 0;
        if (c->op == G_COPY) {
            if ((rc = resolve_copy(r, c, &kind, &dst, &src)))
                return rc;
            if (kind != PTO_CMD_D2H)
                rc = check_range(g->dev, dst, c->n, i);
            if (!rc && kind != PTO_CMD_H2D)
                rc = check_range(g->dev, src, c->n, i);
            if (!rc && c->n && ((kind == PTO_CMD_D2H && !dst) || (kind == PTO_CMD_H2D && !src)))
                rc = pti_error(PTO_EINVAL, "%s: command %u: NULL host pointer", fn, i);
        } else if (c->op == G_MEMSET) {
            dst = c->patches ? r->dev_ptrs[g->patches[c->patch_at].input] : c->dst;
            rc = check_range(g->dev, dst, c->n, i);
        } else if (c->op == G_LAUNCH && atomic_load_explicit(&c->k->unloaded, memory_order_acquire)) {
            rc = pti_error(PTO_EINVAL, "%s: command %u: kernel %s was unloaded", fn, i, c->k->name);
        } else if (c->op == G_PROGRAM && pti_program_unloaded(c->prog)) {
            rc = pti_error(PTO_EINVAL, "%s: command %u: program %s was unloaded", fn, i,
                           pto_program_name(c->prog));
        } else if (c->op == G_PROGRAM) {
            /* As pto_stream_run_program will check them, but now: a refusal part way would leave half a replay. */
            rc = pti_program_args_check(c->prog, patched_args(r, c, scratch), c->nargs, fn);
        } else if (c->op == G_LAUNCH && !memo) {
            /*
             * pto_stream_launch's whole check, here and only here (queue_cmd commits the launch
             * unchecked): a refusal part way would leave half a replay, and a node checked twice
             * cost the replay as much again.
             */
            const uint64_t *args = patched_args(r, c, scratch);
            rc = pti_launch_check(r->streams[c->slot], c->k, c->blocks, args, c->nargs, fn);
            if (rc) { /* an argument's refusal names the command: made only then, not per replayed node */
                char what[PTI_NAME_LEN + 32];
                snprintf(what, sizeof(what), "command %u (%s)", i, c->k->name);
                int named = pti_args_check(g->dev, atomic_load_explicit(&c->k->kinds, memory_order_acquire), args,
                                           c->nargs, fn, what);
                if (named)
                    rc = named;
            }
        }
        if (rc)
            return rc;
    }
    int st = pto_device_status(g->dev);
    if (st)
        return pti_error(-st, "%s: %s", fn, st == -PTO_EDEVLOST ? "device lost" : "device is closing");
    if (!memo)
        memo_set(r, gen);
    return 0;
}

/* Queue command i of the replay (tag: its token); returns the submission's status. */
static int queue_cmd(const struct replay *r, uint32_t i, uint64_t tag, uint64_t *scratch)
{
    pto_graph *g = r->g;
    const struct pto_gcmd *c = &g->cmds[i];
    pto_stream *s = r->streams[c->slot];
    switch (c->op) {
    case G_LAUNCH:
    case G_PROGRAM: {
        const uint64_t *args = patched_args(r, c, scratch);
        if (c->op == G_PROGRAM)
            return pto_stream_run_program(s, c->prog, args, c->nargs, tag);
        /* Checked (check_replay); its kernel reference taken with the replay's (replay, below). */
        return pti_launch_commit_held(s, c->k, c->blocks, args, c->nargs, tag, "pto_graph_replay");
    }
    case G_COPY: {
        uint32_t kind;
        uint64_t dst, src;
        resolve_copy(r, c, &kind, &dst, &src); /* checked in check_replay */
        if (kind == PTO_CMD_H2D)
            return pto_stream_copy_h2d(s, dst, (const void *)(uintptr_t)src, c->n, tag);
        if (kind == PTO_CMD_D2H)
            return pto_stream_copy_d2h(s, (void *)(uintptr_t)dst, src, c->n, tag);
        return pto_stream_copy_d2d(s, dst, src, c->n, tag);
    }
    case G_MEMSET: {
        uint64_t dst = c->patches ? r->dev_ptrs[g->patches[c->patch_at].input] : c->dst;
        return pto_stream_memset(s, dst, (uint8_t)c->src, c->n, tag);
    }
    case G_RECORD:
        return pto_stream_record(s, g->events[c->event], tag);
    case G_WAIT:
        return pto_stream_wait_event(s, g->events[c->event], tag);
    case G_WAIT_EXT:
        return pto_stream_wait_event(s, c->ext, tag);
    default:
        return pti_error(PTO_EINVAL, "pto_graph_replay: command %u of unknown kind", i);
    }
}

/*
 * Queue the launches from command i on, while they follow each other on one
 * stream, as one run of slots (pti_slot_run_begin, submit.c: the ring's room read
 * once, one tail store): each slot takes the launch's arguments as recorded,
 * with its patched fields overwritten in place.  Returns how many went in;
 * 0: none could (the first goes one at a time, queue_cmd), and those after
 * the last that went in go one at a time too (the ring full: the overflow).
 * Checked already (check_replay); their kernel references taken (replay).
 */
static uint32_t queue_launch_run(const struct replay *r, uint32_t i, uint64_t tag)
{
    pto_graph *g = r->g;
    uint32_t slot = g->cmds[i].slot;
    struct pto_slot_run run;
    if (!pti_slot_run_begin(r->streams[slot], &run))
        return 0;
    uint32_t n = 0;
    for (; i + n < g->n_cmds; n++) {
        const struct pto_gcmd *c = &g->cmds[i + n];
        if (c->op != G_LAUNCH || c->slot != slot)
            break;
        void *heap;
        struct pto_cmd *cmd = pti_slot_run_add(&run, PTO_CMD_LAUNCH, tag + i + n, c->nargs * 8u, &heap);
        if (!cmd)
            break;
        uint64_t *args = heap;
        const uint64_t *rec = &g->args[c->args_at];
        if (c->nargs <= 4) /* the usual few: copied in place, not through a call of memcpy */
            for (uint32_t a = 0; a < c->nargs; a++)
                args[a] = rec[a];
        else
            memcpy(args, rec, (size_t)c->nargs * 8u);
        for (uint32_t p = 0; p < c->patches; p++) {
            const struct pto_gpatch *pt = &g->patches[c->patch_at + p];
            args[pt->field] = r->dev_ptrs[pt->input];
        }
        cmd->u.launch.k = c->k;
        cmd->u.launch.args = args;
        cmd->u.launch.blocks = c->blocks;
        cmd->u.launch.nargs = c->nargs;
    }
    pti_slot_run_end(&run);
    return n;
}

/* The staging copies of host-bound inputs: H2D before the commands (in), D2H after (out). */
static int queue_staging(const struct replay *r, bool in, uint64_t tag)
{
    pto_graph *g = r->g;
    pto_stream *s = r->streams[0];
    if (!r->host_ptrs)
        return 0;
    int last = 0;
    for (uint32_t i = 0; i < g->n_inputs; i++) {
        const struct pto_ginput *b = &g->inputs[i];
        if (!b->staged || !r->host_ptrs[i] || !b->nbytes)
            continue;
        int rc;
        if (in && (b->use & PTO_GRAPH_READ))
            rc = pto_stream_copy_h2d(s, r->dev_ptrs[i], (const void *)(uintptr_t)r->host_ptrs[i], b->nbytes, tag);
        else if (!in && (b->use & PTO_GRAPH_WRITE))
            rc = pto_stream_copy_d2h(s, (void *)(uintptr_t)r->host_ptrs[i], r->dev_ptrs[i], b->nbytes, tag);
        else
            continue;
        if (rc < 0)
            return rc;
        last = rc;
    }
    return last;
}

#define PTI_GRAPH_STACK_ARGS 32
#define PTI_GRAPH_STACK_ACCS 16
#define PTI_GRAPH_STACK_EDGES 16

/*
 * Ordering a replay (pto_graph_replay_ordered)
 * --------------------------------------------
 * Against other streams' work a replay is one call on its origin: the
 * replay starts there, every fork joins the origin before the notify, and
 * the notify's token stays in flight until all of it ended, so waits queued
 * on the origin before its commands order all of them, and its token stands
 * for all its accesses.  Its accesses are the allocations it uses at fixed
 * addresses (pto_graph_add_access) and its device-bound inputs, each with
 * the union of its uses; the table decides the edges (pto_hazards_order),
 * each goes as a fence of its source's tail and a wait on the origin
 * (pto_hazards_queue_edge), and the accesses are noted at the replay's
 * token once its commands are in.  An edge the table cannot queue alone (to
 * an exact point, from a closed, held or gone stream) is the caller's: the
 * replay declines before anything is queued or noted.
 */
struct order {
    pto_hazards *hz;
    uint32_t sid;
    pto_hz_access *acc;
    uint32_t n, k;                /* accesses; edges */
    pto_hz_edge *edges;
    pto_hz_access acc_stack[PTI_GRAPH_STACK_ACCS];
    pto_hz_edge edge_stack[PTI_GRAPH_STACK_EDGES];
};

static void order_fini(struct order *o)
{
    if (o->acc != o->acc_stack)
        free(o->acc);
    if (o->edges != o->edge_stack)
        free(o->edges);
}

/* Decide the replay's edges: 0 (o->k of them, each a fence), PTO_HZ_DECLINED, or an error. */
static int order_decide(const struct replay *r, struct order *o, uint64_t *skipped)
{
    const char *fn = "pto_graph_replay_ordered";
    pto_graph *g = r->g;
    uint32_t most = g->n_accs + g->n_inputs;
    o->acc = o->acc_stack;
    o->edges = o->edge_stack;
    if (most > PTI_GRAPH_STACK_ACCS && !(o->acc = malloc((size_t)most * sizeof(*o->acc))))
        return pti_error(PTO_ENOMEM, "%s: out of host memory", fn);
    if (g->n_accs)
        memcpy(o->acc, g->accs, (size_t)g->n_accs * sizeof(*o->acc));
    o->n = g->n_accs;
    for (uint32_t i = 0; i < g->n_inputs; i++) /* a host-bound input: the graph's staging buffer, not ordered */
        if (!host_bound(r, i) && r->dev_ptrs[i] && (g->inputs[i].use & (PTO_HZ_READ | PTO_HZ_WRITE)))
            o->acc[o->n++] = (pto_hz_access){r->dev_ptrs[i], g->inputs[i].use & (PTO_HZ_READ | PTO_HZ_WRITE), 0};
    pto_hazards_set_held(o->hz, o->sid, 0); /* the caller holds nothing on the origin */
    uint64_t before[2], after[2];
    pto_hazards_counts(o->hz, before);
    int k = pto_hazards_order(o->hz, o->sid, o->acc, o->n, o->edges, PTI_GRAPH_STACK_EDGES);
    if (k > PTI_GRAPH_STACK_EDGES) {
        if (!(o->edges = malloc((size_t)k * sizeof(*o->edges))))
            return pti_error(PTO_ENOMEM, "%s: out of host memory", fn);
        k = pto_hazards_order(o->hz, o->sid, o->acc, o->n, o->edges, (uint32_t)k);
    }
    if (k < 0)
        return k;
    o->k = (uint32_t)k;
    for (uint32_t i = 0; i < o->k; i++) {
        if (o->edges[i].exact || !pto_hazards_fenceable(o->hz, o->sid, o->edges[i].src)) {
            pto_hazards_counts(o->hz, after);
            if (skipped)
                *skipped = after[1] - before[1]; /* the caller's own decision counts them again */
            return PTO_HZ_DECLINED;
        }
    }
    return 0;
}

static int replay(pto_graph *g, pto_hazards *hz, pto_stream *const *streams, uint32_t nstreams,
                  const uint64_t *dev_ptrs, const uint64_t *host_ptrs, uint32_t ninputs, uint64_t token,
                  uint64_t *skipped, const char *fn)
{
    if (!g)
        return pti_error(PTO_EINVAL, "%s: NULL graph", fn);
    if (token == 0)
        return pti_error(PTO_EINVAL, "%s: the replay needs a token", fn);
    struct replay r = {g, streams, dev_ptrs, host_ptrs};
    uint64_t stack_args[PTI_GRAPH_STACK_ARGS];
    uint64_t *scratch = stack_args;
    if (g->max_nargs > PTI_GRAPH_STACK_ARGS && !(scratch = malloc((size_t)g->max_nargs * 8u)))
        return pti_error(PTO_ENOMEM, "%s: out of host memory", fn);
    struct order o;
    o.hz = hz;
    o.acc = o.acc_stack;
    o.edges = o.edge_stack;
    o.k = 0;
    int rc = check_replay(&r, nstreams, ninputs, scratch);
    if (!rc && hz) {
        o.sid = streams[0]->id;
        rc = order_decide(&r, &o, skipped);
    }
    uint64_t saved_stack[8];
    uint64_t *saved = saved_stack;
    if (!rc && nstreams > 8 && !(saved = malloc((size_t)nstreams * sizeof(uint64_t))))
        rc = pti_error(PTO_ENOMEM, "%s: out of host memory", fn);
    if (rc) {
        order_fini(&o);
        if (scratch != stack_args)
            free(scratch);
        return rc;
    }
    /* Judged as one submission: each stream back-dated to its epoch now (see the essay). */
    for (uint32_t i = 0; i < nstreams; i++) {
        pto_stream *s = streams[i];
        saved[i] = s->backdate;
        uint64_t epoch = atomic_load_explicit(&s->epoch, memory_order_acquire);
        if (epoch < s->backdate)
            s->backdate = epoch;
    }
    /*
     * Tags: command i is token + 1 + i; the replay's own commands (order, staging) the one after; the waits
     * ordering it after other streams' work (pto_graph_replay_ordered) the one after that.
     */
    pto_stream *origin = streams[0];
    uint64_t tag = token + 1, own_tag = token + 1 + g->n_cmds;
    int last = 0;
    pti_quiet = true;
    pti_submit_ns = pto_now_ns();
    pti_defer_kicks = true; /* one kick per stream, below, once every command is in */
    if (g->replayed && g->last_origin != origin->id)
        rc = pto_stream_wait_event(origin, g->done, own_tag); /* the previous replay's end */
    for (uint32_t i = 0; rc >= 0 && i < o.k; i++)
        rc = pto_hazards_queue_edge(hz, o.sid, o.edges[i].src, own_tag + 1);
    if (rc >= 0)
        rc = queue_staging(&r, true, own_tag);
    bool refs = rc >= 0;
    if (refs)
        for (uint32_t i = 0; i < g->n_krefs; i++)
            pti_kernel_ref_n(g->krefs[i].k, g->krefs[i].n);
    pto_stream *batch = NULL; /* the stream whose run of commands goes as one batch (pti_batch_begin) */
    uint32_t queued = 0;      /* commands queued */
    for (; rc >= 0 && queued < g->n_cmds; queued++) {
        const struct pto_gcmd *c = &g->cmds[queued];
        bool batched = c->op == G_LAUNCH || c->op == G_COPY || c->op == G_MEMSET;
        pto_stream *s = batched ? streams[c->slot] : NULL;
        if (batch && batch != s) {
            pti_batch_end(batch);
            batch = NULL;
        }
        if (s && !batch)
            pti_batch_begin(batch = s);
        if (c->op == G_LAUNCH) {
            uint32_t n = queue_launch_run(&r, queued, tag);
            if (n) {
                queued += n - 1; /* (the loop counts the last) */
                continue;
            }
        }
        rc = queue_cmd(&r, queued, tag + queued, scratch);
        if (rc < 0)
            break;
    }
    if (batch && (rc < 0 || batch != origin)) {
        pti_batch_end(batch);
        batch = NULL;
    }
    if (refs && rc < 0) /* the launches not queued (the refused one among them): their references go back */
        for (uint32_t i = queued; i < g->n_cmds; i++)
            if (g->cmds[i].op == G_LAUNCH)
                pti_kernel_unref(g->cmds[i].k);
    /*
     * The origin's end of the replay (the staging out, the done record, the notify) as one batch too:
     * a record takes obj_lock under submit_lock as it does alone, and none of them takes another lock.
     */
    if (rc >= 0 && !batch)
        pti_batch_begin(batch = origin);
    if (rc >= 0)
        rc = queue_staging(&r, false, own_tag);
    if (rc >= 0)
        rc = pto_stream_record_ordering(origin, g->done, own_tag);
    pti_quiet = false;
    if (rc >= 0) { /* its kick deferred too: one per stream, whatever the stream did meanwhile */
        g->replayed = true;
        g->last_origin = origin->id;
        rc = last = pto_stream_notify(origin, token);
    }
    if (batch)
        pti_batch_end(batch);
    pti_submit_ns = 0;
    pti_defer_kicks = false;
    for (uint32_t i = 0; i < nstreams; i++) /* also after a refusal: what went in must start */
        pti_stream_kick_deferred(streams[i]);
    if (rc >= 0 && hz) {
        int noted = pto_hazards_note(hz, o.sid, o.acc, o.n, token);
        if (noted < 0)
            rc = noted;
    }
    for (uint32_t i = 0; i < nstreams; i++)
        streams[i]->backdate = saved[i];
    if (saved != saved_stack)
        free(saved);
    order_fini(&o);
    if (scratch != stack_args)
        free(scratch);
    return rc < 0 ? rc : last;
}

int pto_graph_replay(pto_graph *g, pto_stream *const *streams, uint32_t nstreams,
                     const uint64_t *dev_ptrs, const uint64_t *host_ptrs, uint32_t ninputs,
                     uint64_t token)
{
    return replay(g, NULL, streams, nstreams, dev_ptrs, host_ptrs, ninputs, token, NULL, "pto_graph_replay");
}

int pto_graph_replay_ordered(pto_graph *g, pto_hazards *hz, pto_stream *const *streams, uint32_t nstreams,
                             const uint64_t *dev_ptrs, const uint64_t *host_ptrs, uint32_t ninputs,
                             uint64_t token, uint64_t *skipped)
{
    if (!hz)
        return pti_error(PTO_EINVAL, "pto_graph_replay_ordered: NULL table");
    return replay(g, hz, streams, nstreams, dev_ptrs, host_ptrs, ninputs, token, skipped,
                  "pto_graph_replay_ordered");
}
