/*
 * kernel.c - kernels: dlopen'ed symbols and the built-in kernels.
 *
 * A kernel is refcounted: the host handle holds one reference and every
 * queued launch another (taken at submit, dropped at completion), so
 * pto_kernel_unload never blocks and the library is dlclose'd only after
 * the last launch that uses it has finished.
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

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
}

static void k_add_f32(const pto_block *blk, void *const *args)
{
    const float *a = (const float *)args[0], *x = (const float *)args[1];
    float *out = (float *)args[2];
    uint64_t b, e;
    chunk(blk, arg_u64(args, 3), &b, &e);
    for (uint64_t i = b; i < e; i++)
        out[i] = a[i] + x[i];
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
}

static void k_spin(const pto_block *blk, void *const *args)
{
    (void)blk;
    uint64_t end = pto_now_ns() + arg_u64(args, 0) * 1000ull;
    while (pto_now_ns() < end)
        pto_cpu_relax();
}

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
};

/* ---- kernel objects --------------------------------------------------------------- */

static pto_kernel *kernel_new(pto_device *dev, const char *name, pto_kernel_fn fn, void *dl)
{
    pto_kernel *k = calloc(1, sizeof(*k));
    if (!k)
        return NULL;
    k->dev = dev;
    k->fn = fn;
    k->dl = dl;
    atomic_init(&k->refs, 1);
    atomic_init(&k->unloaded, 0);
    pto_strlcpy(k->name, name, sizeof(k->name));
    pthread_mutex_lock(&dev->obj_lock);
    pto_link_add(&dev->kernels, &k->link);
    pthread_mutex_unlock(&dev->obj_lock);
    return k;
}

void pto_kernel_ref(pto_kernel *k)
{
    atomic_fetch_add_explicit(&k->refs, 1, memory_order_relaxed);
}

void pto_kernel_unref(pto_kernel *k)
{
    if (atomic_fetch_sub_explicit(&k->refs, 1, memory_order_acq_rel) != 1)
        return;
    pto_device *dev = k->dev;
    pthread_mutex_lock(&dev->obj_lock);
    pto_link_del(&k->link);
    pthread_mutex_unlock(&dev->obj_lock);
    if (k->dl)
        dlclose(k->dl);
    free(k);
}

/*
 * pto_kernel_load - dlopen path and resolve symbol.
 *
 * Returns 0 and *out, -PTO_EINVAL, -PTO_ELOAD (the message carries dlerror()),
 * -PTO_ENOMEM.
 */
int pto_kernel_load(pto_device *dev, const char *path, const char *symbol, pto_kernel **out)
{
    if (!dev || !path || !symbol || !out)
        return pto_error(PTO_EINVAL, "pto_kernel_load: NULL argument");
    if (strlen(symbol) >= PTO_NAME_LEN)
        return pto_error(PTO_EINVAL, "pto_kernel_load: symbol name longer than %d bytes",
                         PTO_NAME_LEN - 1);
    dlerror();
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!dl) {
        const char *why = dlerror();
        return pto_error(PTO_ELOAD, "pto_kernel_load: cannot load %s: %s", path, why ? why : "?");
    }
    dlerror();
    void *sym = dlsym(dl, symbol);
    const char *why = dlerror();
    if (!sym || why) {
        int rc = pto_error(PTO_ELOAD, "pto_kernel_load: no symbol %s in %s: %s", symbol, path,
                           why ? why : "NULL symbol");
        dlclose(dl);
        return rc;
    }
    pto_kernel_fn fn;
    memcpy(&fn, &sym, sizeof(fn));
    pto_kernel *k = kernel_new(dev, symbol, fn, dl);
    if (!k) {
        dlclose(dl);
        return pto_error(PTO_ENOMEM, "pto_kernel_load: out of host memory");
    }
    *out = k;
    return 0;
}

/* Returns 0 and *out, -PTO_EINVAL for an unknown name, -PTO_ENOMEM. */
int pto_kernel_builtin(pto_device *dev, const char *name, pto_kernel **out)
{
    if (!dev || !name || !out)
        return pto_error(PTO_EINVAL, "pto_kernel_builtin: NULL argument");
    for (size_t i = 0; i < sizeof(builtins) / sizeof(builtins[0]); i++) {
        if (strcmp(builtins[i].name, name) == 0) {
            pto_kernel *k = kernel_new(dev, name, builtins[i].fn, NULL);
            if (!k)
                return pto_error(PTO_ENOMEM, "pto_kernel_builtin: out of host memory");
            *out = k;
            return 0;
        }
    }
    return pto_error(PTO_EINVAL,
                     "pto_kernel_builtin: unknown kernel '%s' (noop, fill_f32, add_f32, axpy_f32, "
                     "spin, fail)", name);
}

const char *pto_kernel_name(const pto_kernel *k)
{
    return k ? k->name : "";
}

void pto_kernel_unload(pto_kernel *k)
{
    if (!k)
        return;
    int expected = 0;
    if (atomic_compare_exchange_strong(&k->unloaded, &expected, 1))
        pto_kernel_unref(k);
}

void pto_kernels_release_all(pto_device *dev)
{
    /* Close: no launch is queued any more, so each remaining kernel holds only its host ref. */
    for (;;) {
        pthread_mutex_lock(&dev->obj_lock);
        if (dev->kernels.next == &dev->kernels) {
            pthread_mutex_unlock(&dev->obj_lock);
            break;
        }
        pto_kernel *k = PTO_CONTAINER(dev->kernels.next, pto_kernel, link);
        pto_link_del(&k->link);
        pthread_mutex_unlock(&dev->obj_lock);
        if (k->dl)
            dlclose(k->dl);
        free(k);
    }
}
