/*
 * pto_kernel.h - the kernel-side ABI of pypto_async.
 *
 * A kernel is a C function in a shared object:
 *
 *     void NAME(const pto_block *blk, void *const *args);
 *
 * The driver calls it once per block of a launch, on a compute-core thread.
 * args[i] is the i-th launch argument: a device address for a tensor, or the
 * raw 64 bits of a scalar (memcpy them out of the slot).  Generated kernels
 * include this header; the driver's public header includes it too, so there is
 * exactly one definition of the block descriptor and of the status codes.
 *
 * A kernel that fails calls blk->fail(blk, PTO_E..., "why") and returns: the
 * code is one of the status codes below, never a bare number.
 */
#ifndef PTO_KERNEL_H
#define PTO_KERNEL_H

#include <stdint.h>

/* PTO_CDEF_BEGIN */

/* ---- status codes (driver functions return their negation) ------------- */
#define PTO_OK          0
#define PTO_EAGAIN      1   /* ring/heap/dep pool full, or nothing ready: try again */
#define PTO_ENOMEM      2   /* device memory (or a driver-internal table) exhausted */
#define PTO_EINVAL      3   /* bad argument */
#define PTO_EKERNEL     4   /* a kernel failed its launch through blk->fail */
#define PTO_EDEP        5   /* an earlier command this one depends on failed */
#define PTO_EDEVLOST    6   /* the device is lost (sticky); everything fails fast */
#define PTO_ECLOSED     7   /* the device or stream is closed / closing */
#define PTO_ETIMEDOUT   8   /* a wait ran out of time; a latch expired */
#define PTO_ECANCELED   9   /* dropped by pto_device_cancel or pto_device_close */
#define PTO_EFAULT      10  /* a copy/memset failed (bad range, injected fault) */
#define PTO_ELOAD       11  /* a kernel library or symbol could not be loaded */
#define PTO_ENOTSUP     12  /* platform or feature not available */

/*
 * The work a block did, by pipe, for the device model: the kernel adds to
 * blk->work as it runs (so runtime trip counts are exact), and the driver
 * turns it into a modeled duration from the chip's profile.
 *   load_*   GM -> on-chip buffers (MTE2): bytes moved and rows (contiguous
 *            runs) they came in; each row costs at least one transfer granule
 *   store_*  on-chip buffers -> GM (MTE3), the same
 *   move_bytes  between on-chip buffers (MTE1)
 *   vec_bytes   vector bytes processed, by op class (PTO_VEC_*): each op's
 *               elements times the widest element it reads or writes
 *   cube_macs   matrix multiply-accumulates, by input dtype (PTO_CUBE_*)
 *   fixpipe_bytes  matmul results leaving the accumulator (L0C) through
 *               FIXPIPE: to GM (a store of the accumulator: not MTE3), to
 *               UB (a vector op or move reading it), or to L1 (a matmul
 *               reading it)
 *   overlap     nonzero: the kernel's loads and stores overlap its compute
 *               (pl.pipeline, double buffers); zero: the pipes run in turn
 */
#define PTO_VEC_SIMPLE   0  /* add, sub, mul, max, min, select, compare, cast, copy, fill */
#define PTO_VEC_SPECIAL  1  /* div, exp, log, sqrt, rsqrt, recip, pow, transcendental */
#define PTO_VEC_REDUCE   2  /* row/column reductions, broadcasts */
#define PTO_VEC_CLASSES  3
#define PTO_CUBE_F16     0  /* fp16 and bf16 inputs */
#define PTO_CUBE_F32     1
#define PTO_CUBE_I8      2
#define PTO_CUBE_DTYPES  3

/* pto_work.core_kind: a block of cube work runs on an AIC, other work on an AIV,
 * unless the block asks for a kind (a pl.FunctionType.AIC / AIV function's task). */
#define PTO_CORE_BY_WORK 0
#define PTO_CORE_AIC     1
#define PTO_CORE_AIV     2

typedef struct pto_work {
    uint64_t load_bytes, load_rows;
    uint64_t store_bytes, store_rows;
    uint64_t move_bytes;
    uint64_t vec_bytes[PTO_VEC_CLASSES];
    uint64_t cube_macs[PTO_CUBE_DTYPES];
    uint32_t overlap;
    uint32_t core_kind;         /* PTO_CORE_*: the kind of core the block asks for (0: by its work) */
    uint64_t fixpipe_bytes;     /* ABI 3 */
} pto_work;

typedef struct pto_block {
    uint32_t block_idx;     /* this block's index, 0 <= block_idx < block_num */
    uint32_t block_num;     /* number of blocks in the launch */
    uint32_t core_idx;      /* the compute core running this block */
    uint32_t reserved;
    void *ctx;              /* driver-private; do not touch */
    /*
     * Fail the launch: the launch completes with status -code (code > 0, a
     * PTO_E* value; anything else is reported as PTO_EKERNEL) and msg as its
     * message.  Return from the kernel right after calling it.  The first
     * failing block of a launch wins.  Failing with PTO_EDEVLOST marks the
     * whole device lost.
     */
    void (*fail)(const struct pto_block *blk, int code, const char *msg);
    pto_work *work;         /* this block's modeled work: add to it (never NULL) */
} pto_block;
/* PTO_CDEF_END */

#endif /* PTO_KERNEL_H */
