/*
 * mixed.h - the accesses of prog_mixed (lib/programs.c), shared with the
 * test that checks the edges the driver resolves for it (model.c): per
 * instance, pseudo-random accesses to three args slots of every shape the
 * driver's index tells apart (whole, another rank, empty, over many cells,
 * tiles aligned or not, negative offsets), and now and then none it can
 * list (the instance orders after everything).
 */
#ifndef PTO_TESTS_MIXED_H
#define PTO_TESTS_MIXED_H

#include <stdint.h>
#include <string.h>

#include "pto_program.h"

#define MIXED_N 700
#define MIXED_ARGS 3

static inline uint32_t mixed_hash(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return (uint32_t)x;
}

static inline uint32_t mixed_acc(const int64_t *idx, pto_task_access *out, uint32_t cap)
{
    int64_t i = idx[0];
    uint32_t h = mixed_hash((uint64_t)i + 12345);
    if (h % 61 == 0)
        return cap + 1; /* more than the driver keeps: orders after everything */
    uint32_t n = h % 89 == 1 ? 0 : 1 + (h >> 8) % 3;
    if (cap < n)
        return cap + 1;
    memset(out, 0, (n ? n : 1) * sizeof(*out));
    for (uint32_t k = 0; k < n; k++) {
        uint32_t r = mixed_hash((uint64_t)i * 7 + k + 1);
        pto_task_access *a = &out[k];
        a->arg = r % MIXED_ARGS;
        uint32_t kind = (r >> 2) % 5;
        a->read = kind != 1;
        a->write = kind == 1 || kind == 2;
        int64_t t = (int64_t)((r >> 8) % 24) - 4;
        switch ((r >> 4) % 10) {
        case 0: /* ndim 0: the whole tensor */
            break;
        case 1: /* another rank */
            a->ndim = 2;
            a->lo[0] = 4 * t, a->hi[0] = 4 * t + 4, a->lo[1] = 0, a->hi[1] = (r >> 20) % 2 ? 4 : 2;
            break;
        case 2: /* empty */
            a->ndim = 1;
            a->lo[0] = a->hi[0] = 4 * t;
            break;
        case 3: /* over many cells */
            a->ndim = 1;
            a->lo[0] = 4 * t - 300, a->hi[0] = 4 * t + 100;
            break;
        case 4: /* across a cell's edge */
            a->ndim = 1;
            a->lo[0] = 4 * t + 2, a->hi[0] = 4 * t + 7;
            break;
        default: /* one tile */
            a->ndim = 1;
            a->lo[0] = 4 * t, a->hi[0] = 4 * t + 4;
            break;
        }
    }
    return n;
}

#endif
