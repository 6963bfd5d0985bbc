/*
 * sim.c - the simulated platform: host memory as device memory, host
 * threads as engines, shared objects as kernels.
 *
 * Phase: setup and teardown (the operations pto_device_open and close
 * reach through the platform table, platform.c), and the built-in kernels
 * the sim's cores run.  The sim's engines themselves are engines.c: its
 * compute cores call a kernel's C function on a host thread, and its copy
 * engines move bytes with memmove, since a device address is the host
 * address of an arena byte (memory.c).
 */
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "internal.h"

/* ---- device memory: one anonymous mapping ----------------------------------------- */

static int sim_mem_map(pto_device *dev)
{
    void *p = mmap(NULL, dev->cfg.device_memory, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return pti_error(PTO_ENOMEM, "cannot map a %llu-byte device arena: %s",
                         (unsigned long long)dev->cfg.device_memory, strerror(errno));
    dev->arena = p;
    dev->arena_size = dev->cfg.device_memory;
    return 0;
}

static void sim_mem_unmap(pto_device *dev)
{
    munmap(dev->arena, dev->arena_size);
}

/* ---- kernels: a symbol in a shared object ------------------------------------------- */

static int sim_kernel_load(const char *path, const char *symbol, pto_kernel_fn *fn, void **handle)
{
    dlerror();
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!dl) {
        const char *why = dlerror();
        return pti_error(PTO_ELOAD, "pto_kernel_load: cannot load %s: %s", path, why ? why : "?");
    }
    dlerror();
    void *sym = dlsym(dl, symbol);
    const char *why = dlerror();
    if (!sym || why) {
        int rc = pti_error(PTO_ELOAD, "pto_kernel_load: no symbol %s in %s: %s", symbol, path,
                           why ? why : "NULL symbol");
        dlclose(dl);
        return rc;
    }
    memcpy(fn, &sym, sizeof(*fn));
    *handle = dl;
    return 0;
}

static void sim_kernel_unload(void *handle)
{
    dlclose(handle);
}

/* ---- built-ins (argument conventions in pto_driver.h) ------------------------- */

static uint64_t arg_u64(void *const *args, int i)
{
    uint64_t v;
    memcpy(&v, &args[i], sizeof(v));
    return v;
}

static float arg_f32(void *const *args, int i)
{
    uint32_t bits = (uint32_t)arg_u64(args, i);
    float f;
    memcpy(&f, &bits, sizeof(f));
    return f;
}

/* [begin, end) of this block's contiguous chunk of n elements. */
static void chunk(const pto_block *blk, uint64_t n, uint64_t *begin, uint64_t *end)
{
    uint64_t per = (n + blk->block_num - 1) / blk->block_num;
    uint64_t b = per * blk->block_idx;
    *begin = b < n ? b : n;
    *end = b + per < n ? b + per : n;
}

/*
 * The work a built-in block did, for the device model (pto_work): `loads`
 * and `stores` contiguous rows of `bytes` each (a block's chunk of each
 * tensor is one row), and `vec` vector result bytes of the simple class.
 * The pipes run in turn (no overlap): a plain loop.
 */
static void count(const pto_block *blk, uint64_t bytes, uint32_t loads, uint32_t stores, uint64_t vec)
{
    blk->work->load_bytes += bytes * loads;
    blk->work->load_rows += bytes ? loads : 0;
    blk->work->store_bytes += bytes * stores;
    blk->work->store_rows += bytes ? stores : 0;
    blk->work->vec_bytes[PTO_VEC_SIMPLE] += vec;
}

static void k_noop(const pto_block *blk, void *const *args)
{
    (void)blk;
    (void)args;
}

static void k_fill_f32(const pto_block *blk, void *const *args)
{
    float *out = (float *)args[0];
    float v = arg_f32(args, 1);
    uint64_t b, e;
    chunk(blk, arg_u64(args, 2), &b, &e);
    for (uint64_t i = b; i < e; i++)
        out[i] = v;
    count(blk, (e - b) * 4, 0, 1, (e - b) * 4); /* a dup into the tile, one store */
}

static void k_add_f32(const pto_block *blk, void *const *args)
{
    const float *a = (const float *)args[0], *x = (const float *)args[1];
    float *out = (float *)args[2];
    uint64_t b, e;
    chunk(blk, arg_u64(args, 3), &b, &e);
    for (uint64_t i = b; i < e; i++)
        out[i] = a[i] + x[i];
    count(blk, (e - b) * 4, 2, 1, (e - b) * 4);
}

static void k_axpy_f32(const pto_block *blk, void *const *args)
{
    float alpha = arg_f32(args, 0);
    const float *x = (const float *)args[1];
    float *y = (float *)args[2];
    uint64_t b, e;
    chunk(blk, arg_u64(args, 3), &b, &e);
    for (uint64_t i = b; i < e; i++)
        y[i] = alpha * x[i] + y[i];
    count(blk, (e - b) * 4, 2, 1, 2 * (e - b) * 4); /* a mul and an add */
}

static void k_spin(const pto_block *blk, void *const *args)
{
    (void)blk;
    uint64_t end = pto_now_ns() + arg_u64(args, 0) * 1000ull;
    while (pto_now_ns() < end)
        pti_cpu_relax();
}

/* dst[i] = op(dst[i], src[i]) for one element type (pto_driver.h: "reduce": sum, max, min,
 * prod).  Max and min
 * propagate NaN, as pl.maximum / pl.minimum and numpy's maximum / minimum do: a NaN on either
 * side gives NaN, so the result of a reduction does not depend on the order of its operands.
 * ISNAN is the element type's NaN test (0 for the integer types); MUL its product (the integer
 * types' wraps, as numpy's does, instead of overflowing). */
#define REDUCE(T, ISNAN, MUL)                                                                      \
    do {                                                                                           \
        T *d = (T *)dst;                                                                           \
        const T *s = (const T *)src;                                                               \
        for (uint64_t i = b; i < e; i++)                                                           \
            d[i] = op == 0   ? d[i] + s[i]                                                         \
                   : op == 1 ? (s[i] > d[i] || ISNAN(s[i]) ? s[i] : d[i])                          \
                   : op == 2 ? (s[i] < d[i] || ISNAN(s[i]) ? s[i] : d[i])                          \
                             : (T)MUL(d[i], s[i]);                                                 \
    } while (0)
#define FLOAT_NAN(v) ((v) != (v))
#define INT_NAN(v) 0
#define FLOAT_MUL(a, b) ((a) * (b))
#define INT_MUL(a, b) ((uint64_t)(a) * (uint64_t)(b))

/* IEEE binary16 <-> double.  A half widens exactly; an op of two halves (sum, product, max, min)
 * is exact in double, so narrowing its result once, round to nearest even, is the op done in
 * half precision (as an FP16 reduction step on the device). */
static double half_to_double(uint16_t h)
{
    int ex = (h >> 10) & 0x1f, mant = h & 0x3ff;
    double v = ex == 0    ? ldexp((double)mant, -24)
               : ex == 31 ? (mant ? NAN : INFINITY)
                          : ldexp((double)(mant | 0x400), ex - 25);
    return h & 0x8000 ? -v : v;
}

static uint16_t double_to_half(double v)
{
    uint16_t sign = signbit(v) ? 0x8000 : 0;
    double a = fabs(v);
    if (a != a)
        return 0x7e00;
    if (a >= 65520.0) /* 65504 is the largest half; the midpoint to 2^16 rounds up (to even) */
        return sign | 0x7c00;
    if (a < 0x1p-14) /* subnormal (or a round up to the smallest normal: 0x400 is its encoding) */
        return sign | (uint16_t)nearbyint(a * 0x1p24);
    int e;
    (void)frexp(a, &e); /* a = m * 2^e, m in [0.5, 1): the half's unbiased exponent is e - 1 */
    double q = nearbyint(ldexp(a, 11 - e)); /* 1024 .. 2048 */
    if (q >= 2048.0) {
        q = 1024.0;
        e++;
    }
    return sign | (uint16_t)(((e - 1 + 15) << 10) | ((int)q - 1024));
}

static void reduce_f16(uint16_t *d, const uint16_t *s, uint64_t b, uint64_t e, uint64_t op)
{
    for (uint64_t i = b; i < e; i++) {
        double x = half_to_double(d[i]), y = half_to_double(s[i]);
        double r = op == 0   ? x + y
                   : op == 1 ? (y > x || y != y ? y : x)
                   : op == 2 ? (y < x || y != y ? y : x)
                             : x * y;
        d[i] = double_to_half(r);
    }
}

static void k_reduce(const pto_block *blk, void *const *args)
{
    void *dst = args[0];
    const void *src = args[1];
    uint64_t op = arg_u64(args, 3), dtype = arg_u64(args, 4);
    uint64_t b, e;
    chunk(blk, arg_u64(args, 2), &b, &e);
    if (op > 3 || dtype > 4) {
        blk->fail(blk, PTO_EINVAL, "builtin kernel 'reduce': op or dtype out of range");
        return;
    }
    switch (dtype) {
    case 0: REDUCE(float, FLOAT_NAN, FLOAT_MUL); break;
    case 1: REDUCE(double, FLOAT_NAN, FLOAT_MUL); break;
    case 2: REDUCE(int32_t, INT_NAN, INT_MUL); break;
    case 3: REDUCE(int64_t, INT_NAN, INT_MUL); break;
    default: reduce_f16((uint16_t *)dst, (const uint16_t *)src, b, e, op); break;
    }
    uint64_t size = dtype == 4 ? 2 : dtype == 0 || dtype == 2 ? 4 : 8;
    count(blk, (e - b) * size, 2, 1, (e - b) * size); /* one elementwise op: the simple class */
}
#undef REDUCE
#undef FLOAT_NAN
#undef INT_NAN
#undef FLOAT_MUL
#undef INT_MUL

static void k_fail(const pto_block *blk, void *const *args)
{
    int code = (int)arg_u64(args, 0);
    blk->fail(blk, code ? code : PTO_EKERNEL, "builtin kernel 'fail' failed its launch");
}

static const struct {
    const char *name;
    pto_kernel_fn fn;
} builtins[] = {
    {"noop", k_noop},     {"fill_f32", k_fill_f32}, {"add_f32", k_add_f32},
    {"axpy_f32", k_axpy_f32}, {"spin", k_spin},     {"fail", k_fail},
    {"reduce", k_reduce},
};

static int sim_kernel_builtin(const char *name, pto_kernel_fn *fn)
{
    for (size_t i = 0; i < sizeof(builtins) / sizeof(builtins[0]); i++) {
        if (strcmp(builtins[i].name, name) == 0) {
            *fn = builtins[i].fn;
            return 0;
        }
    }
    return pti_error(PTO_EINVAL,
                     "pto_kernel_builtin: unknown kernel '%s' (noop, fill_f32, add_f32, axpy_f32, "
                     "spin, fail, reduce)", name);
}

/* ---- devices: PYPTO_ASYNC_SIM_DEVICES of them, 8 by default ---------------------- */

static int sim_device_count(void)
{
    const char *env = getenv("PYPTO_ASYNC_SIM_DEVICES");
    if (!env || !*env)
        return 8;
    char *end;
    errno = 0;
    long n = strtol(env, &end, 10);
    if (errno || *end || n < 1 || n > 1024)
        return pti_error(PTO_EINVAL, "PYPTO_ASYNC_SIM_DEVICES='%s' is not a device count (1..1024)", env);
    return (int)n;
}

const struct pto_platform_ops pti_sim_ops = {
    .mem_map = sim_mem_map,
    .mem_unmap = sim_mem_unmap,
    .engines_start = pti_engines_start,
    .engines_stop = pti_engines_stop,
    .kernel_load = sim_kernel_load,
    .kernel_builtin = sim_kernel_builtin,
    .kernel_unload = sim_kernel_unload,
    .device_count = sim_device_count,
};
