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
 *   pto_e4m3_2f, pto_f2e4m3, pto_e4m3_round, and the same for e5m2 and e8m0
 *                          FP8E4M3FN / FP8E5M2 <-> float (see pto_f2fp8_)
 *   pto_floordiv, pto_mod  Python's // and % on int64 (floor toward -inf;
 *                          the remainder takes the divisor's sign)
 *   pto_min64, pto_max64   min / max of index expressions
 *   pto_remf, pto_rem      pl.rem of floats (Python's %)
 *   pto_cvt_f32/f16/bf16   a double rounded to FP32 / FP16 / BF16 with one of
 *                          pl.cast's rounding modes (see PTO_CVT_*)
 *   pto_atomic_add_*       pl.store(..., atomic=Add): add into a tensor
 *                          element that other blocks may add to as well
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

/* The value of FP8 bits b: mbits mantissa bits, exponent bias `bias`; fn: no
 * infinities, the all-ones pattern is NaN (E4M3FN), else IEEE-like (E5M2). */
static inline float pto_fp82f_(uint8_t b, int mbits, int bias, int fn)
{
    int emax = (1 << (7 - mbits)) - 1, mmax = (1 << mbits) - 1;
    int e = (b >> mbits) & emax, m = b & mmax;
    float s = (b & 0x80u) ? -1.0f : 1.0f;
    if (fn ? (e == emax && m == mmax) : (e == emax && m))
        return __builtin_nanf("");
    if (!fn && e == emax)
        return s * __builtin_inff();
    if (e == 0)
        return s * ldexpf((float)m, 1 - bias - mbits);
    return s * ldexpf((float)(m + (1 << mbits)), e - bias - mbits);
}

/* f rounded to FP8 bits (the format as pto_fp82f_ has it), to nearest even
 * (away: ties away from zero), as torch's .to(torch.float8_*) rounds: a
 * magnitude that rounds past the largest finite value `maxv` (infinity too)
 * saturates to it (fn: E4M3FN has no infinity) or is infinity (E5M2); a NaN
 * is NaN.  The sign is kept (-0 too). */
static inline uint8_t pto_f2fp8_(float f, int mbits, int bias, float maxv, int fn, int away)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80u), over = (uint8_t)(sign | (fn ? 0x7Eu : (0x7Fu << mbits & 0x7Fu)));
    float a = fabsf(f);
    if (a != a)
        return (uint8_t)(sign | 0x7Fu);
    if (a > maxv * 2.0f)
        return over;
    int e;
    frexpf(a, &e);
    int ex = (a == 0.0f || e - 1 < 1 - bias) ? 1 - bias : e - 1;
    float q = ldexpf(1.0f, ex - mbits), n = a / q; /* a power of two: exact */
    float r = (away ? roundf(n) : rintf(n)) * q;
    if (r > maxv)
        return over;
    if (r == 0.0f)
        return sign;
    frexpf(r, &e);
    if (e - 1 < 1 - bias) /* subnormal */
        return (uint8_t)(sign | (uint8_t)(r / ldexpf(1.0f, 1 - bias - mbits)));
    uint32_t m = (uint32_t)(r / ldexpf(1.0f, e - 1 - mbits)) - (1u << mbits);
    return (uint8_t)(sign | (uint8_t)((uint32_t)(e - 1 + bias) << mbits) | (uint8_t)m);
}

static inline float pto_e4m3_2f(uint8_t b) { return pto_fp82f_(b, 3, 7, 1); }
static inline uint8_t pto_f2e4m3(float f) { return pto_f2fp8_(f, 3, 7, 448.0f, 1, 0); }
static inline float pto_e4m3_round(float f, int away) { return pto_e4m3_2f(pto_f2fp8_(f, 3, 7, 448.0f, 1, away)); }
static inline float pto_e5m2_2f(uint8_t b) { return pto_fp82f_(b, 2, 15, 0); }
static inline uint8_t pto_f2e5m2(float f) { return pto_f2fp8_(f, 2, 15, 57344.0f, 0, 0); }
static inline float pto_e5m2_round(float f, int away) { return pto_e5m2_2f(pto_f2fp8_(f, 2, 15, 57344.0f, 0, away)); }

/* OCP E8M0, the MX block scale: 2**(b - 127), b == 255 NaN.  From a float as
 * torch's float8_e8m0fnu rounds: the magnitude's exponent, one up when the
 * mantissa is 1.5 or more (a subnormal: over 2**-127); NaN and infinities are 255. */
static inline float pto_e8m0_2f(uint8_t b) { return b == 255 ? NAN : ldexpf(1.0f, (int)b - 127); }
static inline uint8_t pto_f2e8m0(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint32_t e = (u >> 23) & 0xffu;
    if (e == 0xffu)
        return 255;
    /* the guard bit rounds up unless it is an exact tie with an even (subnormal: zero) result */
    if ((u & 0x400000u) && ((u & 0x3fffffu) || e != 0))
        e += 1;
    return (uint8_t)(e > 0xffu ? 0xffu : e);
}
static inline float pto_e8m0_round(float f, int away) { (void)away; return pto_e8m0_2f(pto_f2e8m0(f)); }

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

static inline int64_t pto_min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t pto_max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* pl.rem of floats: Python's %, the remainder taking the divisor's sign (NaN for b == 0). */
static inline float pto_remf(float a, float b)
{
    float r = __builtin_fmodf(a, b);
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

static inline double pto_rem(double a, double b)
{
    double r = __builtin_fmod(a, b);
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

/* ---- rounding conversions (pl.cast(..., mode=...)) ------------------------
 *
 * Each pto_cvt_T(x, mode) returns x rounded to a value of type T (as a float,
 * the type FP16/BF16/FP32 tiles compute in).  The nearest-even conversion r
 * and the other representable neighbour of x bracket it; the mode picks one:
 * nearest-even, nearest with ties away from zero, toward -inf, toward +inf,
 * toward zero, or the neighbour whose last significand bit is odd.  Bit
 * patterns are sign-magnitude, so the neighbour of magnitude m is m - 1 or
 * m + 1 (the step crosses binades and reaches infinity correctly).
 */
#define PTO_CVT_RINT  0
#define PTO_CVT_ROUND 1
#define PTO_CVT_FLOOR 2
#define PTO_CVT_CEIL  3
#define PTO_CVT_TRUNC 4
#define PTO_CVT_ODD   5

static inline uint32_t pto_f32_bits_(double x) { float f = (float)x; uint32_t u; memcpy(&u, &f, 4); return u; }
static inline double pto_f32_value_(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t pto_f16_bits_(double x) { _Float16 h = (_Float16)x; uint16_t u; memcpy(&u, &h, 2); return u; }
static inline double pto_f16_value_(uint32_t u) { uint16_t b = (uint16_t)u; _Float16 h; memcpy(&h, &b, 2); return (double)h; }
static inline double pto_bf16_value_(uint32_t u) { return pto_bf2f((uint16_t)u); }

/* x to BF16, nearest even.  Going through float rounds twice; that matters
 * only when the float lands exactly on a BF16 tie that x itself is not on. */
static inline uint32_t pto_bf16_bits_(double x)
{
    float f = (float)x;
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0xffffu) == 0x8000u && (double)f != x && (u & 0x7fffffffu) < 0x7f800000u)
        return (u >> 16) + (fabs(x) > fabs((double)f) ? 1u : 0u);
    return pto_f2bf(f);
}

static inline double pto_cvt_pick_(double x, uint32_t r, uint32_t sign, double (*value)(uint32_t), int mode)
{
    double rv = value(r);
    if (x != x || rv == x || mode == PTO_CVT_RINT)
        return rv;
    uint32_t s = r & sign, m = r & ~sign;
    uint32_t other = fabs(rv) > fabs(x) ? m - 1u : m + 1u;
    uint32_t tz = m < other ? m : other, az = m < other ? other : m;
    uint32_t pick = r;
    switch (mode) {
    case PTO_CVT_ROUND:
        pick = fabs(x) == (value(tz) + value(az)) / 2 ? s | az : r;
        break;
    case PTO_CVT_FLOOR: pick = s | (x > 0 ? tz : az); break;
    case PTO_CVT_CEIL: pick = s | (x > 0 ? az : tz); break;
    case PTO_CVT_TRUNC: pick = s | tz; break;
    case PTO_CVT_ODD: pick = s | ((tz & 1u) ? tz : az); break;
    default: break;
    }
    return value(pick);
}

static inline float pto_cvt_f32(double x, int mode)
{
    return (float)pto_cvt_pick_(x, pto_f32_bits_(x), 0x80000000u, pto_f32_value_, mode);
}

static inline float pto_cvt_f16(double x, int mode)
{
    return (float)pto_cvt_pick_(x, pto_f16_bits_(x), 0x8000u, pto_f16_value_, mode);
}

static inline float pto_cvt_bf16(double x, int mode)
{
    return (float)pto_cvt_pick_(x, pto_bf16_bits_(x), 0x8000u, pto_bf16_value_, mode);
}

/* ---- atomic adds into tensors (blocks of one launch run concurrently) ---- */
static inline void pto_atomic_add_f32(float *p, float v)
{
    float old, upd;
    __atomic_load(p, &old, __ATOMIC_RELAXED);
    do
        upd = old + v;
    while (!__atomic_compare_exchange(p, &old, &upd, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
}

static inline void pto_atomic_add_f16(_Float16 *p, float v)
{
    _Float16 old, upd;
    __atomic_load(p, &old, __ATOMIC_RELAXED);
    do
        upd = (_Float16)((float)old + v);
    while (!__atomic_compare_exchange(p, &old, &upd, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
}

static inline void pto_atomic_add_bf16(uint16_t *p, float v)
{
    uint16_t old = __atomic_load_n(p, __ATOMIC_RELAXED), upd;
    do
        upd = pto_f2bf(pto_bf2f(old) + v);
    while (!__atomic_compare_exchange_n(p, &old, upd, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
}

static inline void pto_atomic_add_i32(int32_t *p, int32_t v) { __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
static inline void pto_atomic_add_i8(int8_t *p, int8_t v) { __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
static inline void pto_atomic_add_i16(int16_t *p, int16_t v) { __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }

#endif /* PTO_KERNEL_RT_H */
