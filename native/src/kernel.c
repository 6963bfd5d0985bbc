/*
 * kernel.c - kernel objects: loaded from a library or built in.
 *
 * Phase: lifecycle.  A kernel is refcounted: the host handle holds one
 * reference and every queued launch another (taken at submit, dropped at
 * completion), so pto_kernel_unload never blocks and the platform releases
 * the kernel's library (the sim: dlclose) only after the last launch that
 * uses it has finished.  Finding the code is the platform's
 * (pto_platform_ops.kernel_load, kernel_builtin; the sim's are in sim.c).
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/*
 * pti_argkinds_set - publish a kernel's or program's argument kinds once.
 *
 * Returns 0 (set now, or set before to the same kinds), -PTO_EINVAL (a kind
 * other than PTO_ARG_SCALAR / PTO_ARG_TENSOR, or kinds that differ from those
 * set), -PTO_ENOMEM.
 */
int pti_argkinds_set(struct pto_argkinds *_Atomic *slot, const uint8_t *kinds, uint32_t nargs,
                     const char *fn, const char *name)
{
    if (nargs && !kinds)
        return pti_error(PTO_EINVAL, "%s: NULL kinds with nargs=%u", fn, nargs);
    struct pto_argkinds *ak = malloc(sizeof(*ak) + (size_t)nargs * sizeof(ak->idx[0]));
    if (!ak)
        return pti_error(PTO_ENOMEM, "%s: out of host memory", fn);
    ak->nargs = nargs;
    ak->ntensors = 0;
    for (uint32_t i = 0; i < nargs; i++) {
        if (kinds[i] != PTO_ARG_SCALAR && kinds[i] != PTO_ARG_TENSOR) {
            free(ak);
            return pti_error(PTO_EINVAL, "%s: %s: kind %u of argument %u is neither PTO_ARG_SCALAR nor "
                             "PTO_ARG_TENSOR", fn, name, kinds[i], i);
        }
        if (kinds[i] == PTO_ARG_TENSOR)
            ak->idx[ak->ntensors++] = i;
    }
    struct pto_argkinds *expected = NULL;
    if (atomic_compare_exchange_strong(slot, &expected, ak))
        return 0;
    bool same = expected->nargs == ak->nargs && expected->ntensors == ak->ntensors &&
                !memcmp(expected->idx, ak->idx, (size_t)ak->ntensors * sizeof(ak->idx[0]));
    free(ak);
    if (!same)
        return pti_error(PTO_EINVAL, "%s: %s: its argument kinds were declared already, differently", fn,
                         name);
    return 0;
}

/*
 * pti_args_check - a launch's arguments against its kernel's declared kinds.
 *
 * Returns 0 (also when none were declared), -PTO_EINVAL: fewer arguments
 * than declared (more are passed through unchecked), or a tensor argument not inside a live allocation (the
 * message gives its index and address).
 */
int pti_args_check(pto_device *dev, const struct pto_argkinds *ak, const uint64_t *args, uint32_t nargs,
                   const char *fn, const char *what)
{
    if (!ak)
        return 0;
    if (nargs < ak->nargs)
        return pti_error(PTO_EINVAL, "%s: %s takes %u arguments, got %u", fn, what, ak->nargs, nargs);
    if (!ak->ntensors)
        return 0;
    long k = pti_mem_find_stray(dev, args, ak->idx, ak->ntensors);
    if (k < 0)
        return 0;
    uint32_t i = ak->idx[k];
    return pti_error(PTO_EINVAL, "%s: %s: argument %u is a tensor, but its address 0x%llx is not inside a "
                     "live device allocation%s", fn, what, i, (unsigned long long)args[i],
                     args[i] ? "" : " (0: no address at all)");
}

/* The argument kinds of the built-in kernels (pto_kernel_builtin): T a tensor, S a scalar. */
static const struct {
    const char *name, *kinds;
} builtin_kinds[] = {
    {"noop", ""},     {"fill_f32", "TSS"}, {"add_f32", "TTTS"},  {"axpy_f32", "STTS"},
    {"spin", "S"},    {"fail", "S"},       {"reduce", "TTSSS"},
};

static pto_kernel *kernel_new(pto_device *dev, const char *name, pto_kernel_fn fn, void *handle)
{
    pto_kernel *k = calloc(1, sizeof(*k));
    if (!k)
        return NULL;
    k->dev = dev;
    k->fn = fn;
    k->handle = handle;
    k->arg_timed = !handle && strcmp(name, "spin") == 0; /* no host thread runs it inline (engines.c) */
    atomic_init(&k->refs, 1);
    atomic_init(&k->unloaded, 0);
    atomic_init(&k->kinds, NULL);
    atomic_init(&k->access, NULL);
    pti_strlcpy(k->name, name, sizeof(k->name));
    pthread_mutex_lock(&dev->obj_lock);
    pti_link_add(&dev->kernels, &k->link);
    pthread_mutex_unlock(&dev->obj_lock);
    return k;
}

void pti_kernel_ref(pto_kernel *k)
{
    atomic_fetch_add_explicit(&k->refs, 1, memory_order_relaxed);
}

void pti_kernel_ref_n(pto_kernel *k, uint32_t n)
{
    atomic_fetch_add_explicit(&k->refs, n, memory_order_relaxed);
}

void pti_kernel_unref(pto_kernel *k)
{
    if (atomic_fetch_sub_explicit(&k->refs, 1, memory_order_acq_rel) != 1)
        return;
    pto_device *dev = k->dev;
    pthread_mutex_lock(&dev->obj_lock);
    pti_link_del(&k->link);
    pthread_mutex_unlock(&dev->obj_lock);
    if (k->handle)
        dev->ops->kernel_unload(k->handle);
    free(atomic_load_explicit(&k->kinds, memory_order_relaxed));
    free(atomic_load_explicit(&k->access, memory_order_relaxed));
    free(k);
}

/*
 * pto_kernel_load - resolve symbol in the kernel library at path (the sim:
 * dlopen and dlsym).
 *
 * Returns 0 and *out, -PTO_EINVAL, -PTO_ELOAD (the message says why: on the
 * sim, dlerror()), -PTO_ENOMEM.
 */
int pto_kernel_load(pto_device *dev, const char *path, const char *symbol, pto_kernel **out)
{
    if (!dev || !path || !symbol || !out)
        return pti_error(PTO_EINVAL, "pto_kernel_load: NULL argument");
    if (strlen(symbol) >= PTI_NAME_LEN)
        return pti_error(PTO_EINVAL, "pto_kernel_load: symbol name longer than %d bytes",
                         PTI_NAME_LEN - 1);
    pto_kernel_fn fn;
    void *handle;
    int rc = dev->ops->kernel_load(path, symbol, &fn, &handle);
    if (rc)
        return rc;
    pto_kernel *k = kernel_new(dev, symbol, fn, handle);
    if (!k) {
        dev->ops->kernel_unload(handle);
        return pti_error(PTO_ENOMEM, "pto_kernel_load: out of host memory");
    }
    atomic_fetch_add_explicit(&dev->loads_host, 1, memory_order_relaxed);
    *out = k;
    return 0;
}

/* Returns 0 and *out, -PTO_EINVAL for an unknown name, -PTO_ENOMEM. */
int pto_kernel_builtin(pto_device *dev, const char *name, pto_kernel **out)
{
    if (!dev || !name || !out)
        return pti_error(PTO_EINVAL, "pto_kernel_builtin: NULL argument");
    pto_kernel_fn fn;
    int rc = dev->ops->kernel_builtin(name, &fn);
    if (rc)
        return rc;
    pto_kernel *k = kernel_new(dev, name, fn, NULL);
    if (!k)
        return pti_error(PTO_ENOMEM, "pto_kernel_builtin: out of host memory");
    for (size_t i = 0; i < sizeof(builtin_kinds) / sizeof(builtin_kinds[0]); i++) {
        if (strcmp(builtin_kinds[i].name, name))
            continue;
        uint8_t kinds[8];
        uint32_t n = (uint32_t)strlen(builtin_kinds[i].kinds);
        for (uint32_t j = 0; j < n; j++)
            kinds[j] = builtin_kinds[i].kinds[j] == 'T' ? PTO_ARG_TENSOR : PTO_ARG_SCALAR;
        if ((rc = pti_argkinds_set(&k->kinds, kinds, n, "pto_kernel_builtin", name))) {
            pti_kernel_unref(k);
            return rc;
        }
    }
    *out = k;
    return 0;
}

/* Returns 0, -PTO_EINVAL, -PTO_ENOMEM (see pti_argkinds_set). */
int pto_kernel_set_arg_kinds(pto_kernel *k, const uint8_t *kinds, uint32_t nargs)
{
    if (!k)
        return pti_error(PTO_EINVAL, "pto_kernel_set_arg_kinds: NULL kernel");
    return pti_argkinds_set(&k->kinds, kinds, nargs, "pto_kernel_set_arg_kinds", k->name);
}

/* Published once, as the kinds are (pti_argkinds_set). */
int pto_kernel_set_arg_access(pto_kernel *k, const uint8_t *access, uint32_t nargs)
{
    const char *fn = "pto_kernel_set_arg_access";
    if (!k || (nargs && !access))
        return pti_error(PTO_EINVAL, "%s: NULL kernel, or NULL access with nargs=%u", fn, nargs);
    struct pto_argaccess *aa = malloc(sizeof(*aa) + nargs);
    if (!aa)
        return pti_error(PTO_ENOMEM, "%s: out of host memory", fn);
    aa->nargs = nargs;
    for (uint32_t i = 0; i < nargs; i++) {
        if (access[i] & ~(PTO_HZ_READ | PTO_HZ_WRITE)) {
            free(aa);
            return pti_error(PTO_EINVAL, "%s: %s: access %u of argument %u is not PTO_HZ_READ | PTO_HZ_WRITE", fn,
                             k->name, access[i], i);
        }
        aa->bits[i] = access[i];
    }
    struct pto_argaccess *expected = NULL;
    if (atomic_compare_exchange_strong(&k->access, &expected, aa))
        return 0;
    bool same = expected->nargs == nargs && !memcmp(expected->bits, aa->bits, nargs);
    free(aa);
    if (!same)
        return pti_error(PTO_EINVAL, "%s: %s: its accesses were declared already, differently", fn, k->name);
    return 0;
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
        pti_kernel_unref(k);
}

void pti_kernels_release_all(pto_device *dev)
{
    /* Close: no launch is queued any more, so each remaining kernel holds only its host ref. */
    for (;;) {
        pthread_mutex_lock(&dev->obj_lock);
        if (dev->kernels.next == &dev->kernels) {
            pthread_mutex_unlock(&dev->obj_lock);
            break;
        }
        pto_kernel *k = PTI_CONTAINER(dev->kernels.next, pto_kernel, link);
        pti_link_del(&k->link);
        pthread_mutex_unlock(&dev->obj_lock);
        if (k->handle)
            dev->ops->kernel_unload(k->handle);
        free(atomic_load_explicit(&k->kinds, memory_order_relaxed));
        free(k);
    }
}

/* ---- the launch command (its row in cmddef.c; the cores run it, engines.c) ---------------- */

void pti_launch_release(pto_device *dev, pto_stream *s, struct pto_cmd *cmd)
{
    pti_kernel_unref(cmd->u.launch.k);
    if (cmd->u.launch.after) { /* its inline fence (event.c) */
        pti_fence_unref(dev, cmd->u.launch.after);
        atomic_fetch_sub_explicit(&s->waits_pending, 1, memory_order_release);
    }
}

const char *pti_launch_name(const struct pto_cmd *cmd)
{
    return cmd->u.launch.k->name;
}
