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
 * exactly one definition of the block descriptor.
 */
#ifndef PTO_KERNEL_H
#define PTO_KERNEL_H

#include <stdint.h>

/* PTO_CDEF_BEGIN */
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
