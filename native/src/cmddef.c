/*
 * cmddef.c - the command kinds: one row per PTO_CMD_* (io_uring's opdef.c).
 *
 * Phase: none (a table).  exec.c starts, polls, finishes and releases every
 * command through its kind's row, and trace.c names records by it; the
 * functions a row points at live in the kind's own file (engines.c for the
 * engines' queues, event.c, latch.c, kernel.c, program.c and orch.c,
 * memory.c, sched.c).  A new command kind is one row here and its file.
 */
#include "internal.h"

static const struct pto_cmd_def defs[] = {
    [PTO_CMD_H2D] = {.name = "h2d", .where = PTI_ON_ENGINE, .start = pti_copy_enqueue},
    [PTO_CMD_D2H] = {.name = "d2h", .where = PTI_ON_ENGINE, .start = pti_copy_enqueue},
    [PTO_CMD_D2D] = {.name = "d2d", .where = PTI_ON_ENGINE, .start = pti_copy_enqueue},
    [PTO_CMD_MEMSET] = {.name = "memset", .where = PTI_ON_ENGINE, .start = pti_copy_enqueue},
    [PTO_CMD_LAUNCH] = {
        .name = "launch",
        .where = PTI_ON_ENGINE,
        .start = pti_core_enqueue,
        .release = pti_launch_release,
        .trace_name = pti_launch_name,
    },
    [PTO_CMD_BLOCK] = {.name = "block", .where = PTI_TRACE_ONLY},
    [PTO_CMD_RECORD] = {
        .name = "record",
        .where = PTI_AT_ONCE,
        .finish = pti_record_finish,
        .release = pti_record_release,
    },
    [PTO_CMD_WAIT] = {
        .name = "wait",
        .where = PTI_IN_SCHED,
        .poll = pti_wait_poll,
        .release = pti_wait_release,
    },
    [PTO_CMD_FREE] = {.name = "free", .where = PTI_AT_ONCE, .release = pti_free_release},
    [PTO_CMD_NOTIFY] = {.name = "notify", .where = PTI_AT_ONCE},
    [PTO_CMD_DELAY] = {
        .name = "delay",
        .where = PTI_IN_SCHED,
        .start = pti_delay_start,
        .poll = pti_delay_poll,
    },
    [PTO_CMD_LATCH] = {
        .name = "latch",
        .where = PTI_IN_SCHED,
        .start = pti_latch_start,
        .poll = pti_latch_poll,
        .release = pti_latch_release,
    },
    /* A copy to or from another device: a copy engine runs it (pti_peer_copy, peer.c). */
    [PTO_CMD_PEER] = {.name = "peer", .where = PTI_ON_ENGINE, .start = pti_copy_enqueue},
    [PTO_CMD_PROGRAM] = {
        .name = "program",
        .where = PTI_ON_ENGINE,
        .slow_start = true,
        .start = pti_program_start,
        .release = pti_program_release,
        .trace_name = pti_program_cmd_name,
    },
    [PTO_CMD_TASK] = {.name = "task", .where = PTI_TRACE_ONLY},
};

const struct pto_cmd_def *pti_cmd_def(uint32_t kind)
{
    if (kind >= sizeof(defs) / sizeof(defs[0]) || !defs[kind].name)
        return NULL;
    return &defs[kind];
}
