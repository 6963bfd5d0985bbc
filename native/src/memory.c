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
 *   free_root  free extents, ordered by offset and always coalesced
 *              (no two are adjacent); allocation is first fit (the lowest
 *              extent that fits), which keeps the low end of the arena dense.
 *              Each node also holds the largest extent in its subtree, so
 *              first fit is one descent.
 *   alloc_root handed-out blocks, ordered by offset, so both "is ptr the
 *              start of a live block" and "does [a, a+n) lie inside one" are
 *              one descent.  A block whose stream-ordered free is queued
 *              stays here with pf set: work queued before the free may still
 *              touch it, but it is no longer live for pto_mem_free/size.
 *   pending    per stream: those queued frees (struct pto_pending_free).
 *
 * Both indexes are treaps (struct pto_mnode; random priorities, split and
 * merge), so alloc, free and every lookup cost O(log n) in the extents and
 * blocks, whatever the population.  Nodes come from a per-device pool: an
 * alloc reserves its one node before it changes anything, a free recycles
 * the block's node for the extent it returns, so nothing after the
 * reservation can run out of host memory.
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

#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"

static uint64_t round_up(uint64_t n)
{
    return (n + PTI_ALIGN - 1) & ~(uint64_t)(PTI_ALIGN - 1);
}

/* ---- the treaps ---------------------------------------------------------------------- */

static void pull(struct pto_mnode *t)
{
    uint64_t m = t->len;
    if (t->l && t->l->max > m)
        m = t->l->max;
    if (t->r && t->r->max > m)
        m = t->r->max;
    t->max = m;
}

/* Split t into *a (off < key) and *b (off >= key). */
static void split(struct pto_mnode *t, uint64_t key, struct pto_mnode **a, struct pto_mnode **b)
{
    if (!t) {
        *a = *b = NULL;
    } else if (t->off < key) {
        split(t->r, key, &t->r, b);
        pull(t);
        *a = t;
    } else {
        split(t->l, key, a, &t->l);
        pull(t);
        *b = t;
    }
}

/* Join a and b, every key of a below every key of b. */
static struct pto_mnode *merge(struct pto_mnode *a, struct pto_mnode *b)
{
    if (!a)
        return b;
    if (!b)
        return a;
    if (a->prio > b->prio) {
        a->r = merge(a->r, b);
        pull(a);
        return a;
    }
    b->l = merge(a, b->l);
    pull(b);
    return b;
}

/* Recompute max on the path to the node keyed key, after its len changed in place (its order held). */
static void tree_fix(struct pto_mnode *t, uint64_t key)
{
    if (!t)
        return;
    if (key < t->off)
        tree_fix(t->l, key);
    else if (key > t->off)
        tree_fix(t->r, key);
    pull(t);
}

/* Insert n: descend while the priorities say so, split the rest under n (aug: keep max on the path). */
static void tree_insert(struct pto_mnode **root, struct pto_mnode *n, bool aug)
{
    struct pto_mnode **p = root;
    while (*p && (*p)->prio > n->prio)
        p = n->off < (*p)->off ? &(*p)->l : &(*p)->r;
    split(*p, n->off, &n->l, &n->r);
    pull(n);
    *p = n;
    if (aug)
        tree_fix(*root, n->off);
}

/* Unlink and return the node keyed off (which must exist): its children merge in its place. */
static struct pto_mnode *tree_take(struct pto_mnode **root, uint64_t off, bool aug)
{
    struct pto_mnode **p = root;
    while ((*p)->off != off)
        p = off < (*p)->off ? &(*p)->l : &(*p)->r;
    struct pto_mnode *m = *p;
    *p = merge(m->l, m->r);
    if (aug)
        tree_fix(*root, off); /* the path to where it was: its ancestors */
    return m;
}

/* The node with the largest off <= key, or NULL. */
static struct pto_mnode *tree_floor(struct pto_mnode *t, uint64_t key)
{
    struct pto_mnode *best = NULL;
    while (t) {
        if (t->off <= key) {
            best = t;
            t = t->r;
        } else {
            t = t->l;
        }
    }
    return best;
}

/* The node with the smallest off >= key, or NULL. */
static struct pto_mnode *tree_ceil(struct pto_mnode *t, uint64_t key)
{
    struct pto_mnode *best = NULL;
    while (t) {
        if (t->off >= key) {
            best = t;
            t = t->l;
        } else {
            t = t->r;
        }
    }
    return best;
}

/* The free extent of lowest offset with len >= size, or NULL (one descent on max). */
static struct pto_mnode *first_fit(struct pto_mnode *t, uint64_t size)
{
    while (t && t->max >= size) {
        if (t->l && t->l->max >= size)
            t = t->l;
        else if (t->len >= size)
            return t;
        else
            t = t->r;
    }
    return NULL;
}

static void tree_free_all(struct pto_mnode *t)
{
    while (t) {
        tree_free_all(t->r);
        struct pto_mnode *l = t->l;
        free(t);
        t = l;
    }
}

/* ---- the stray-pointer check's cache ------------------------------------------------- */

/*
 * pti_mem_find_stray remembers, per thread, the last blocks it found, with
 * the device's mem_gen at the time.  Only a block leaving alloc_root or
 * shrinking can turn an address that was inside a block into a stray one,
 * so each of those bumps mem_gen (mem_lock held) and a remembered block is
 * trusted only while mem_gen is unchanged.  Generations come from one
 * process-wide counter, so a device opened where a closed one was never
 * matches the old one's entries.  A replay of a graph checks every launch
 * node's every tensor argument twice (graph.c before it queues anything,
 * then pto_stream_launch): with the cache, without mem_lock or a descent.
 */
static _Atomic uint64_t mem_gens = 1;

static void mem_changed(pto_device *dev)
{
    atomic_store_explicit(&dev->mem_gen, atomic_fetch_add_explicit(&mem_gens, 1, memory_order_relaxed) + 1,
                          memory_order_release);
}

#define STRAY_CACHE 4
static __thread struct stray_hit {
    const pto_device *dev;
    uint64_t gen, off, len;
} tl_hits[STRAY_CACHE];
static __thread uint32_t tl_hit_next;

/* ---- the node pool (mem_lock held) --------------------------------------------------- */

static int pool_reserve(pto_device *dev)
{
    if (dev->node_pool)
        return 0;
    struct pto_mnode *n = malloc(sizeof(*n));
    if (!n)
        return -1;
    n->l = NULL;
    dev->node_pool = n;
    return 0;
}

static struct pto_mnode *node_get(pto_device *dev, uint64_t off, uint64_t len)
{
    struct pto_mnode *n = dev->node_pool; /* reserved by the caller */
    dev->node_pool = n->l;
    uint32_t x = dev->mem_seed; /* xorshift32 */
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    dev->mem_seed = x;
    *n = (struct pto_mnode){.off = off, .len = len, .max = len, .prio = x};
    return n;
}

static void node_put(pto_device *dev, struct pto_mnode *n)
{
    n->l = dev->node_pool;
    dev->node_pool = n;
}

/*
 * Return [off, off+len) to the free index, merging with its neighbours.
 * Needs at most one node, reserved in the pool (mem_lock held).
 */
static void free_insert(pto_device *dev, uint64_t off, uint64_t len)
{
    struct pto_mnode *prev = off ? tree_floor(dev->free_root, off - 1) : NULL;
    struct pto_mnode *next = tree_ceil(dev->free_root, off + len);
    bool merge_prev = prev && prev->off + prev->len == off;
    bool merge_next = next && next->off == off + len;
    if (merge_prev && merge_next) {
        tree_take(&dev->free_root, next->off, true);
        prev->len += len + next->len;
        tree_fix(dev->free_root, prev->off);
        node_put(dev, next);
        dev->n_free--;
    } else if (merge_prev) {
        prev->len += len; /* grows in place: its order holds */
        tree_fix(dev->free_root, prev->off);
    } else if (merge_next) {
        next->off = off; /* moves down to off: still above prev's end */
        next->len += len;
        tree_fix(dev->free_root, next->off);
    } else {
        tree_insert(&dev->free_root, node_get(dev, off, len), true);
        dev->n_free++;
    }
}

/* The block starting at off (live or pending), or NULL (mem_lock held). */
static struct pto_mnode *block_find(pto_device *dev, uint64_t off)
{
    struct pto_mnode *b = tree_floor(dev->alloc_root, off);
    return b && b->off == off ? b : NULL;
}

/* The live allocation starting at off, or NULL (mem_lock held). */
static struct pto_mnode *alloc_find(pto_device *dev, uint64_t off)
{
    struct pto_mnode *b = block_find(dev, off);
    return b && b->pf == NULL ? b : NULL;
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
    mem_changed(dev); /* a generation no other device had */
    dev->mem_seed = 0x9e3779b9u;
    uint64_t usable = dev->arena_size & ~(uint64_t)(PTI_ALIGN - 1);
    if (usable) {
        if (pool_reserve(dev)) {
            pti_mem_fini(dev);
            return pti_error(PTO_ENOMEM, "out of host memory for the allocator tables");
        }
        tree_insert(&dev->free_root, node_get(dev, 0, usable), true);
        dev->n_free = 1;
    }
    return 0;
}

void pti_mem_fini(pto_device *dev)
{
    if (dev->arena) {
        dev->ops->mem_unmap(dev);
        pthread_mutex_destroy(&dev->mem_lock);
    }
    dev->arena = NULL;
    tree_free_all(dev->free_root);
    tree_free_all(dev->alloc_root);
    while (dev->node_pool) {
        struct pto_mnode *n = dev->node_pool;
        dev->node_pool = n->l;
        free(n);
    }
    dev->free_root = dev->alloc_root = NULL;
    mem_changed(dev);
    dev->n_free = dev->n_alloc = 0;
}

bool pti_mem_in_arena(pto_device *dev, uint64_t addr, uint64_t n)
{
    uint64_t base = (uint64_t)(uintptr_t)dev->arena;
    return addr >= base && addr - base <= dev->arena_size && n <= dev->arena_size - (addr - base);
}

/*
 * Map arena bytes [from, to) in now, on the allocating thread: device memory
 * is there when it is allocated, as a device's is.  The sim's arena is an
 * anonymous mapping whose pages would otherwise be mapped by their first
 * write, one fault per page, on whichever thread writes first: a copy
 * engine's first H2D into a fresh buffer, a kernel's first store (the
 * demo's pipelined loop took a thousand such faults in its timed loop, 3-4
 * MiB of fresh buffers, where its serial loop reused touched ones).  Every
 * byte below arena_touched was populated once (allocations only raise it;
 * a freed block keeps its pages).  MADV_POPULATE_WRITE (Linux 5.14) maps the
 * pages without writing them, so a block another thread already uses below
 * `to` is left as it is; on an older kernel the pages fault as before.
 */
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
static void populate(pto_device *dev, uint64_t from, uint64_t to)
{
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = (uintptr_t)(dev->arena + from) & ~(page - 1);
    uintptr_t hi = (uintptr_t)(dev->arena + to);
    (void)madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE);
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
    if (pool_reserve(dev)) {
        pthread_mutex_unlock(&dev->mem_lock);
        return pti_error(PTO_ENOMEM, "pto_mem_alloc: out of host memory for allocator tables");
    }
    uint64_t off = UINT64_MAX;
    struct pto_pending_free *carved = NULL;
    struct pto_mnode *e = first_fit(dev->free_root, rsize);
    if (e) {
        off = e->off;
        if (e->len > rsize) {
            e->off += rsize; /* carved from the front: its order holds */
            e->len -= rsize;
            tree_fix(dev->free_root, e->off);
        } else {
            node_put(dev, tree_take(&dev->free_root, off, true));
            dev->n_free--;
        }
    }
    if (off == UINT64_MAX && s) {
        /* s's own queued frees that are ordered behind s's work only. */
        for (struct pto_link *l = s->pending.next; l != &s->pending; l = l->next) {
            struct pto_pending_free *pf = PTI_CONTAINER(l, struct pto_pending_free, link);
            if (pf->local_ok && pf->len >= rsize) {
                /* Carve from the front; the pending block's node shrinks with it (its order holds). */
                struct pto_mnode *j = block_find(dev, pf->off);
                off = pf->off;
                carved = pf;
                pf->off += rsize;
                pf->len -= rsize;
                dev->pending_bytes -= rsize;
                mem_changed(dev); /* the pending block shrinks */
                if (pf->len == 0) {
                    node_put(dev, tree_take(&dev->alloc_root, j->off, false));
                    dev->n_alloc--;
                } else {
                    j->off = pf->off;
                    j->len = pf->len;
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
    struct pto_mnode *blk = node_get(dev, off, rsize);
    blk->src = carved;
    tree_insert(&dev->alloc_root, blk, false);
    dev->n_alloc++;
    dev->in_use += rsize;
    dev->n_live++;
    account_reserved(dev);
    uint64_t from = dev->arena_touched, to = off + rsize;
    if (to > from)
        dev->arena_touched = to;
    pthread_mutex_unlock(&dev->mem_lock);
    if (to > from)
        populate(dev, from, to);
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
    struct pto_mnode *b = off == UINT64_MAX ? NULL : alloc_find(dev, off);
    if (!b) {
        pthread_mutex_unlock(&dev->mem_lock);
        return pti_error(PTO_EINVAL, "pto_mem_free: 0x%llx is not a live device allocation",
                         (unsigned long long)ptr);
    }
    tree_take(&dev->alloc_root, b->off, false);
    mem_changed(dev);
    dev->n_alloc--;
    dev->in_use -= b->len;
    dev->n_live--;
    uint64_t boff = b->off, blen = b->len;
    node_put(dev, b); /* the node free_insert needs */
    free_insert(dev, boff, blen);
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
    struct pto_mnode *b = off == UINT64_MAX ? NULL : alloc_find(dev, off);
    uint64_t len = b ? b->len : 0;
    pthread_mutex_unlock(&dev->mem_lock);
    if (!b)
        return pti_error(PTO_EINVAL, "pto_mem_size: 0x%llx is not a live device allocation",
                         (unsigned long long)ptr);
    *out = len;
    return 0;
}

int pto_mem_lookup(pto_device *dev, pto_devptr addr, pto_devptr *base, uint64_t *len)
{
    if (!dev)
        return -PTO_EINVAL;
    uint64_t off = arena_off(dev, addr);
    if (off == UINT64_MAX)
        return -PTO_EINVAL;
    pthread_mutex_lock(&dev->mem_lock);
    const struct pto_mnode *b = tree_floor(dev->alloc_root, off);
    bool hit = b && b->pf == NULL && off - b->off < b->len;
    uint64_t boff = hit ? b->off : 0, blen = hit ? b->len : 0;
    pthread_mutex_unlock(&dev->mem_lock);
    if (!hit)
        return -PTO_EINVAL;
    if (base)
        *base = (pto_devptr)(uintptr_t)(dev->arena + boff);
    if (len)
        *len = blen;
    return 0;
}

int pto_mem_get_stats(pto_device *dev, pto_mem_stats *out)
{
    if (!dev || !out)
        return pti_error(PTO_EINVAL, "pto_mem_get_stats: NULL argument");
    pthread_mutex_lock(&dev->mem_lock);
    uint64_t largest = dev->free_root ? dev->free_root->max : 0;
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
    struct pto_mnode *b = off == UINT64_MAX ? NULL : alloc_find(dev, off);
    if (!b) {
        pthread_mutex_unlock(&dev->mem_lock);
        free(pf);
        return pti_error(PTO_EINVAL, "pto_stream_free: 0x%llx is not a live device allocation",
                         (unsigned long long)ptr);
    }
    b->pf = pf; /* stays in the index for work queued before the free */
    dev->in_use -= b->len;
    dev->n_live--;
    dev->pending_bytes += b->len;
    dev->pending_frees++;
    pf->stream = s;
    pf->off = pf->orig_off = b->off;
    pf->len = pf->orig_len = b->len;
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
    for (struct pto_mnode *b = tree_ceil(dev->alloc_root, pf->orig_off);
         b && b->off < pf->orig_off + pf->orig_len; b = tree_ceil(dev->alloc_root, b->off + 1))
        if (b->src == pf)
            b->src = NULL;
    if (pf->len > 0) {
        struct pto_mnode *b = block_find(dev, pf->off);
        if (b) {
            tree_take(&dev->alloc_root, b->off, false);
            mem_changed(dev);
            dev->n_alloc--;
            node_put(dev, b); /* the node free_insert needs */
        }
        if (pool_reserve(dev) == 0)
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
        const struct pto_mnode *a = tree_floor(dev->alloc_root, off);
        if (a) {
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
    /* Acquire pairs with mem_changed: a generation read here was current after the change it names. */
    uint64_t gen = atomic_load_explicit(&dev->mem_gen, memory_order_acquire);
    uint32_t k = 0;
    for (; k < n; k++) {
        uint64_t off = arena_off(dev, args[idx[k]]);
        bool hit = false;
        for (uint32_t c = 0; c < STRAY_CACHE && !hit; c++)
            hit = tl_hits[c].dev == dev && tl_hits[c].gen == gen && off - tl_hits[c].off < tl_hits[c].len;
        if (!hit)
            break; /* this one and the rest: under mem_lock */
    }
    if (k == n)
        return -1;
    long bad = -1;
    pthread_mutex_lock(&dev->mem_lock);
    gen = atomic_load_explicit(&dev->mem_gen, memory_order_relaxed);
    for (; k < n && bad < 0; k++) {
        uint64_t off = arena_off(dev, args[idx[k]]);
        const struct pto_mnode *a = off == UINT64_MAX ? NULL : tree_floor(dev->alloc_root, off);
        /* Inside a block: live, carved from a queued free, or queued for freeing itself. */
        if (!a || off - a->off >= a->len) {
            bad = (long)k;
        } else {
            tl_hits[tl_hit_next] = (struct stray_hit){dev, gen, a->off, a->len};
            tl_hit_next = (tl_hit_next + 1) % STRAY_CACHE;
        }
    }
    pthread_mutex_unlock(&dev->mem_lock);
    return bad;
}

/* The stream-ordered free command's release (its row in cmddef.c): the block is reclaimed whatever the outcome. */
void pti_free_release(pto_device *dev, pto_stream *s, struct pto_cmd *cmd)
{
    pti_mem_reclaim(dev, cmd->u.free.pf);
}
