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

static pto_kernel *kernel_new(pto_device *dev, const char *name, pto_kernel_fn fn, void *handle)
{
    pto_kernel *k = calloc(1, sizeof(*k));
    if (!k)
        return NULL;
    k->dev = dev;
    k->fn = fn;
    k->handle = handle;
    atomic_init(&k->refs, 1);
    atomic_init(&k->unloaded, 0);
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
    *out = k;
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
        free(k);
    }
}
