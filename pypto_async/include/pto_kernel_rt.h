/*
 * pto_kernel_rt.h - the small runtime every generated kernel includes.
 *
 * pypto_async.ir's code generator emits C that calls these helpers; they are
 * static inline, so a kernel that does not use one pays nothing for it.  The
 * header also brings in the C library headers generated code relies on
 * (math.h, stdint.h, stdlib.h, string.h) and the kernel ABI, pto_kernel.h.
 *
 *   pto_bf2f, pto_f2bf     BF16 <-> float (BF16 tiles compute in float and
 *                          round to nearest even when stored)
 *   pto_bf16_round         a float rounded through BF16 (pl.cast to BF16)
 *   pto_floordiv, pto_mod  Python's // and % on int64 (floor toward -inf;
 *                          the remainder takes the divisor's sign)
 *
 * Division by zero cannot trap here: both return 0 for b == 0, and the
 * int64 overflow of INT64_MIN / -1 wraps instead of trapping.
 */
#ifndef PTO_KERNEL_RT_H
#define PTO_KERNEL_RT_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pto_kernel.h"

/* The float whose upper 16 bits are h (BF16 is float's upper half). */
static inline float pto_bf2f(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* f rounded to BF16, to nearest even; a NaN stays a (quiet) NaN. */
static inline uint16_t pto_f2bf(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);          /* round to nearest even */
    return (uint16_t)(u >> 16);
}

static inline float pto_bf16_round(float f) { return pto_bf2f(pto_f2bf(f)); }

/* a // b as Python computes it; 0 for b == 0. */
static inline int64_t pto_floordiv(int64_t a, int64_t b)
{
    if (b == 0)
        return 0;
    if (b == -1)
        return (int64_t)(0u - (uint64_t)a);
    int64_t q = a / b;
    return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;
}

/* a % b as Python computes it (the sign of b); 0 for b == 0. */
static inline int64_t pto_mod(int64_t a, int64_t b)
{
    if (b == 0 || b == -1)
        return 0;
    int64_t r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

#endif /* PTO_KERNEL_RT_H */
