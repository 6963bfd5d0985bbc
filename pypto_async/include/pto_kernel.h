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
} pto_block;
/* PTO_CDEF_END */

#endif /* PTO_KERNEL_H */
