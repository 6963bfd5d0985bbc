/*
 * memory.c - the device arena: allocator, stream-ordered free bookkeeping, stats.
 *
 * Phase: host calls (alloc, free, stats), submission (a stream-ordered free
 * turns its block into a pending free) and execution (the free command
 * reclaims it; copies check their ranges).  The platform maps the arena
 * (pto_platform_ops.mem_map; the sim: one anonymous mapping, sim.c); on the
 * sim a device address is the host address of the byte (so
 * pto_mem_host_ptr is the identity after validation, and kernels
 * dereference their arguments directly).  Bookkeeping, all under
 * dev->mem_lock:
 *
 *   free_ext   free extents, sorted by offset and always coalesced
 *              (no two are adjacent); allocation is first fit, which keeps
 *              the low end of the arena dense.
 *   allocs     handed-out blocks, sorted by offset, so both "is ptr the start
 *              of a live block" and "does [a, a+n) lie inside one" are a
 *              binary search.  A block whose stream-ordered free is queued
 *              stays here with pf set: work queued before the free may still
 *              touch it, but it is no longer live for pto_mem_free/size.
 *   pending    per stream: those queued frees (struct pto_pending_free).
 *
 * Range checks for copies accept a range inside one handed-out block, or
 * inside the original extent of a queued free (work queued on the stream
 * before the free may still touch the whole block, even after a local
 * reuse carved a live allocation out of its front).
 *
 * Sizes are rounded up to PTI_ALIGN, so every extent boundary is aligned.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static uint64_t round_up(uint64_t n)
{
    return (n + PTI_ALIGN - 1) & ~(uint64_t)(PTI_ALIGN - 1);
}

/* Keys of the two sorted tables, for pti_bound. */
static uint64_t ext_off(const void *v, size_t i)
{
    return ((const struct pto_extent *)v)[i].off;
}

static uint64_t alloc_off(const void *v, size_t i)
{
    return ((const struct pto_alloc *)v)[i].off;
}

static int vec_reserve(void **v, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t ncap = *cap ? *cap * 2 : 64;
    while (ncap < need)
        ncap *= 2;
    void *nv = realloc(*v, ncap * elem);
    if (!nv)
        return -1;
    *v = nv;
    *cap = ncap;
    return 0;
}

static int free_reserve(pto_device *dev, size_t need)
{
    return vec_reserve((void **)&dev->free_ext, &dev->cap_free, need, sizeof(*dev->free_ext));
}

static int alloc_reserve(pto_device *dev, size_t need)
{
    return vec_reserve((void **)&dev->allocs, &dev->cap_alloc, need, sizeof(*dev->allocs));
}

static void alloc_insert(pto_device *dev, struct pto_alloc a)
{
    size_t i = pti_bound(dev->allocs, dev->n_alloc, alloc_off, a.off, true);
    memmove(&dev->allocs[i + 1], &dev->allocs[i], (dev->n_alloc - i) * sizeof(*dev->allocs));
    dev->allocs[i] = a;
    dev->n_alloc++;
}

static void alloc_remove_at(pto_device *dev, size_t i)
{
    memmove(&dev->allocs[i], &dev->allocs[i + 1], (dev->n_alloc - i - 1) * sizeof(*dev->allocs));
    dev->n_alloc--;
}

static void ext_insert_at(struct pto_extent *v, size_t *n, size_t i, struct pto_extent e)
{
    memmove(&v[i + 1], &v[i], (*n - i) * sizeof(*v));
    v[i] = e;
    (*n)++;
}

static void ext_remove_at(struct pto_extent *v, size_t *n, size_t i)
{
    memmove(&v[i], &v[i + 1], (*n - i - 1) * sizeof(*v));
    (*n)--;
}

/*
 * Return [off, off+len) to the free list, merging with its neighbours.
 * Needs at most one new slot; callers reserve it first (mem_lock held).
 */
static void free_insert(pto_device *dev, uint64_t off, uint64_t len)
{
    size_t i = pti_bound(dev->free_ext, dev->n_free, ext_off, off, true);
    bool merge_prev = i > 0 && dev->free_ext[i - 1].off + dev->free_ext[i - 1].len == off;
    bool merge_next = i < dev->n_free && off + len == dev->free_ext[i].off;
    if (merge_prev && merge_next) {
        dev->free_ext[i - 1].len += len + dev->free_ext[i].len;
        ext_remove_at(dev->free_ext, &dev->n_free, i);
    } else if (merge_prev) {
        dev->free_ext[i - 1].len += len;
    } else if (merge_next) {
        dev->free_ext[i].off = off;
        dev->free_ext[i].len += len;
    } else {
        ext_insert_at(dev->free_ext, &dev->n_free, i, (struct pto_extent){off, len});
    }
}

/* Index of the block starting at off (live or pending), or -1 (mem_lock held). */
static long block_find(pto_device *dev, uint64_t off)
{
    size_t i = pti_bound(dev->allocs, dev->n_alloc, alloc_off, off, true);
    if (i > 0 && dev->allocs[i - 1].off == off)
        return (long)(i - 1);
    return -1;
}

/* Index of the live allocation starting at off, or -1 (mem_lock held). */
static long alloc_find(pto_device *dev, uint64_t off)
{
    long i = block_find(dev, off);
    return i >= 0 && dev->allocs[i].pf == NULL ? i : -1;
}

static void account_reserved(pto_device *dev)
{
    uint64_t reserved = dev->in_use + dev->pending_bytes;
    if (reserved > dev->peak)
        dev->peak = reserved;
}

int pti_mem_init(pto_device *dev)
{
    int rc = dev->ops->mem_map(dev);
    if (rc)
        return rc;
    pti_mutex_init(&dev->mem_lock);
    if (free_reserve(dev, 64) || alloc_reserve(dev, 64)) {
        pti_mem_fini(dev);
        return pti_error(PTO_ENOMEM, "out of host memory for the allocator tables");
    }
    dev->free_ext[0] = (struct pto_extent){0, dev->arena_size & ~(uint64_t)(PTI_ALIGN - 1)};
    dev->n_free = 1;
    return 0;
}

void pti_mem_fini(pto_device *dev)
{
    if (dev->arena) {
        dev->ops->mem_unmap(dev);
        pthread_mutex_destroy(&dev->mem_lock);
    }
    dev->arena = NULL;
    free(dev->free_ext);
    free(dev->allocs);
    dev->free_ext = NULL;
    dev->allocs = NULL;
    dev->n_free = dev->n_alloc = dev->cap_free = dev->cap_alloc = 0;
}

bool pti_mem_in_arena(pto_device *dev, uint64_t addr, uint64_t n)
{
    uint64_t base = (uint64_t)(uintptr_t)dev->arena;
    return addr >= base && addr - base <= dev->arena_size && n <= dev->arena_size - (addr - base);
}

/*
 * pto_mem_alloc - allocate size bytes for use on stream s.
 *
 * Returns 0 and *out, -PTO_EINVAL (size 0, NULL out), -PTO_ENOMEM (no extent
 * fits, or an injected failure), -PTO_ECLOSED.
 */
int pto_mem_alloc(pto_device *dev, uint64_t size, pto_stream *s, pto_devptr *out)
{
    if (!dev || !out)
        return pti_error(PTO_EINVAL, "pto_mem_alloc: NULL argument");
    if (size == 0)
        return pti_error(PTO_EINVAL, "pto_mem_alloc: size must be > 0");
    if (s && s->dev != dev)
        return pti_error(PTO_EINVAL, "pto_mem_alloc: stream belongs to another device");
    if (atomic_load(&dev->closing))
        return pti_error(PTO_ECLOSED, "pto_mem_alloc: device is closing");
    if (size > dev->arena_size)
        goto nomem_unlocked;
    uint64_t rsize = round_up(size);

    pthread_mutex_lock(&dev->mem_lock);
    if (dev->fail_alloc > 0) {
        dev->fail_alloc--;
        dev->alloc_failures++;
        pthread_mutex_unlock(&dev->mem_lock);
        return pti_error(PTO_ENOMEM, "pto_mem_alloc: injected allocation failure (%llu bytes)",
                         (unsigned long long)size);
    }
    if (alloc_reserve(dev, dev->n_alloc + 2) || free_reserve(dev, dev->n_free + 1)) {
        pthread_mutex_unlock(&dev->mem_lock);
        return pti_error(PTO_ENOMEM, "pto_mem_alloc: out of host memory for allocator tables");
    }
    uint64_t off = UINT64_MAX;
    struct pto_pending_free *carved = NULL;
    for (size_t i = 0; i < dev->n_free; i++) {
        struct pto_extent *e = &dev->free_ext[i];
        if (e->len >= rsize) {
            off = e->off;
            e->off += rsize;
            e->len -= rsize;
            if (e->len == 0)
                ext_remove_at(dev->free_ext, &dev->n_free, i);
            break;
        }
    }
    if (off == UINT64_MAX && s) {
        /* s's own queued frees that are ordered behind s's work only. */
        for (struct pto_link *l = s->pending.next; l != &s->pending; l = l->next) {
            struct pto_pending_free *pf = PTI_CONTAINER(l, struct pto_pending_free, link);
            if (pf->local_ok && pf->len >= rsize) {
                /* Carve from the front; the pending block's table entry shrinks with it. */
                long j = block_find(dev, pf->off);
                off = pf->off;
                carved = pf;
                pf->off += rsize;
                pf->len -= rsize;
                dev->pending_bytes -= rsize;
                if (pf->len == 0) {
                    alloc_remove_at(dev, (size_t)j);
                } else {
                    dev->allocs[j].off = pf->off;
                    dev->allocs[j].len = pf->len;
                }
                break;
            }
        }
    }
    if (off == UINT64_MAX) {
        dev->alloc_failures++;
        uint64_t in_use = dev->in_use, pend = dev->pending_bytes;
        pthread_mutex_unlock(&dev->mem_lock);
        return pti_error(PTO_ENOMEM,
                         "out of device memory: %llu bytes requested, %llu in use, %llu pending free, "
                         "%llu capacity",
                         (unsigned long long)size, (unsigned long long)in_use,
                         (unsigned long long)pend, (unsigned long long)dev->arena_size);
    }
    alloc_insert(dev, (struct pto_alloc){off, rsize, NULL, carved});
    dev->in_use += rsize;
    dev->n_live++;
    account_reserved(dev);
    pthread_mutex_unlock(&dev->mem_lock);
    *out = (pto_devptr)(uintptr_t)(dev->arena + off);
    return 0;

nomem_unlocked:
    pthread_mutex_lock(&dev->mem_lock);
    dev->alloc_failures++;
    pthread_mutex_unlock(&dev->mem_lock);
    return pti_error(PTO_ENOMEM, "out of device memory: %llu bytes requested, capacity %llu",
                     (unsigned long long)size, (unsigned long long)dev->arena_size);
}

/* Offset of ptr in the arena, or UINT64_MAX. */
static uint64_t arena_off(pto_device *dev, pto_devptr ptr)
{
    uint64_t base = (uint64_t)(uintptr_t)dev->arena;
    if (ptr < base || ptr - base >= dev->arena_size)
        return UINT64_MAX;
    return ptr - base;
}

/*
 * pto_mem_free - free a live allocation now.
 *
 * Returns 0, or -PTO_EINVAL if ptr is not the start of a live allocation.
 */
int pto_mem_free(pto_device *dev, pto_devptr ptr)
{
    if (!dev)
        return pti_error(PTO_EINVAL, "pto_mem_free: NULL device");
    uint64_t off = arena_off(dev, ptr);
    pthread_mutex_lock(&dev->mem_lock);
    long i = off == UINT64_MAX ? -1 : alloc_find(dev, off);
    if (i < 0 || free_reserve(dev, dev->n_free + 1)) {
        pthread_mutex_unlock(&dev->mem_lock);
        return pti_error(PTO_EINVAL, "pto_mem_free: 0x%llx is not a live device allocation",
                         (unsigned long long)ptr);
    }
    struct pto_alloc a = dev->allocs[i];
    alloc_remove_at(dev, (size_t)i);
    dev->in_use -= a.len;
    dev->n_live--;
    free_insert(dev, a.off, a.len);
    pthread_mutex_unlock(&dev->mem_lock);
    return 0;
}

/* Returns 0 and *out, or -PTO_EINVAL if ptr is not a live allocation start. */
int pto_mem_size(pto_device *dev, pto_devptr ptr, uint64_t *out)
{
    if (!dev || !out)
        return pti_error(PTO_EINVAL, "pto_mem_size: NULL argument");
    uint64_t off = arena_off(dev, ptr);
    pthread_mutex_lock(&dev->mem_lock);
    long i = off == UINT64_MAX ? -1 : alloc_find(dev, off);
    uint64_t len = i >= 0 ? dev->allocs[i].len : 0;
    pthread_mutex_unlock(&dev->mem_lock);
    if (i < 0)
        return pti_error(PTO_EINVAL, "pto_mem_size: 0x%llx is not a live device allocation",
                         (unsigned long long)ptr);
    *out = len;
    return 0;
}

int pto_mem_get_stats(pto_device *dev, pto_mem_stats *out)
{
    if (!dev || !out)
        return pti_error(PTO_EINVAL, "pto_mem_get_stats: NULL argument");
    pthread_mutex_lock(&dev->mem_lock);
    uint64_t largest = 0;
    for (size_t i = 0; i < dev->n_free; i++)
        if (dev->free_ext[i].len > largest)
            largest = dev->free_ext[i].len;
    *out = (pto_mem_stats){
        .capacity = dev->arena_size,
        .in_use = dev->in_use,
        .reserved = dev->in_use + dev->pending_bytes,
        .peak = dev->peak,
        .allocations = dev->n_live,
        .pending_frees = dev->pending_frees,
        .largest_free = largest,
        .alloc_failures = dev->alloc_failures,
    };
    pthread_mutex_unlock(&dev->mem_lock);
    return 0;
}

/* Host address of ptr (identity in the sim), or NULL if ptr is outside the arena. */
void *pto_mem_host_ptr(pto_device *dev, pto_devptr ptr)
{
    if (!dev || arena_off(dev, ptr) == UINT64_MAX) {
        pti_error(PTO_EINVAL, "pto_mem_host_ptr: 0x%llx is not a device address",
                  (unsigned long long)ptr);
        return NULL;
    }
    return (void *)(uintptr_t)ptr;
}

int pti_mem_pend_free(pto_device *dev, pto_stream *s, pto_devptr ptr, bool local_ok,
                      struct pto_pending_free **out)
{
    struct pto_pending_free *pf = calloc(1, sizeof(*pf));
    if (!pf)
        return pti_error(PTO_ENOMEM, "pto_stream_free: out of host memory");
    uint64_t off = arena_off(dev, ptr);
    pthread_mutex_lock(&dev->mem_lock);
    long i = off == UINT64_MAX ? -1 : alloc_find(dev, off);
    if (i < 0 || free_reserve(dev, dev->n_free + 1)) {
        pthread_mutex_unlock(&dev->mem_lock);
        free(pf);
        return pti_error(PTO_EINVAL, "pto_stream_free: 0x%llx is not a live device allocation",
                         (unsigned long long)ptr);
    }
    struct pto_alloc a = dev->allocs[i];
    dev->allocs[i].pf = pf; /* stays in the table for work queued before the free */
    dev->in_use -= a.len;
    dev->n_live--;
    dev->pending_bytes += a.len;
    dev->pending_frees++;
    pf->stream = s;
    pf->off = pf->orig_off = a.off;
    pf->len = pf->orig_len = a.len;
    pf->local_ok = local_ok;
    pti_link_add(&s->pending, &pf->link);
    pthread_mutex_unlock(&dev->mem_lock);
    *out = pf;
    return 0;
}

/*
 * The free command of pf executed (or was dropped, or its stream failed):
 * return what local reuse left of the block to the free list.
 */
void pti_mem_reclaim(pto_device *dev, struct pto_pending_free *pf)
{
    pthread_mutex_lock(&dev->mem_lock);
    pti_link_del(&pf->link);
    dev->pending_frees--;
    dev->pending_bytes -= pf->len;
    /* Pieces carved from pf are plain live allocations from now on. */
    for (size_t j = pti_bound(dev->allocs, dev->n_alloc, alloc_off, pf->orig_off, false);
         j < dev->n_alloc && dev->allocs[j].off < pf->orig_off + pf->orig_len; j++)
        if (dev->allocs[j].src == pf)
            dev->allocs[j].src = NULL;
    if (pf->len > 0) {
        long i = block_find(dev, pf->off);
        if (i >= 0)
            alloc_remove_at(dev, (size_t)i);
        /*
         * free_insert needs at most one new slot: reserved when the free was
         * queued, or a carve shrank this block (no new extent) since.
         */
        if (free_reserve(dev, dev->n_free + 1) == 0)
            free_insert(dev, pf->off, pf->len);
    }
    pthread_mutex_unlock(&dev->mem_lock);
    free(pf);
}

int pti_mem_check_range(pto_device *dev, uint64_t addr, uint64_t n, char *msg, size_t msglen)
{
    uint64_t off = arena_off(dev, addr);
    bool ok = false;
    if (off != UINT64_MAX) {
        pthread_mutex_lock(&dev->mem_lock);
        size_t i = pti_bound(dev->allocs, dev->n_alloc, alloc_off, off, true);
        if (i > 0) {
            const struct pto_alloc *a = &dev->allocs[i - 1];
            ok = off - a->off <= a->len && n <= a->len - (off - a->off);
            const struct pto_pending_free *pf = a->pf ? a->pf : a->src;
            if (!ok && pf && off - a->off < a->len)
                ok = off - pf->orig_off <= pf->orig_len && n <= pf->orig_len - (off - pf->orig_off);
        }
        pthread_mutex_unlock(&dev->mem_lock);
    }
    if (ok)
        return 0;
    pti_msgf(msg, msglen, "device range 0x%llx+%llu is not inside a live allocation",
             (unsigned long long)addr, (unsigned long long)n);
    return -PTO_EFAULT;
}

/*
 * pti_mem_find_stray - the tensor arguments of a launch, under one mem_lock.
 *
 * Returns the position in idx of the first address outside every block, or -1.
 */
long pti_mem_find_stray(pto_device *dev, const uint64_t *args, const uint32_t *idx, uint32_t n)
{
    long bad = -1;
    pthread_mutex_lock(&dev->mem_lock);
    for (uint32_t k = 0; k < n && bad < 0; k++) {
        uint64_t off = arena_off(dev, args[idx[k]]);
        size_t i = off == UINT64_MAX ? 0 : pti_bound(dev->allocs, dev->n_alloc, alloc_off, off, true);
        /* Inside a block: live, carved from a queued free, or queued for freeing itself. */
        if (i == 0 || off - dev->allocs[i - 1].off >= dev->allocs[i - 1].len)
            bad = (long)k;
    }
    pthread_mutex_unlock(&dev->mem_lock);
    return bad;
}
