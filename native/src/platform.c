/*
 * platform.c - the platform table: the platforms pto_device_open knows.
 *
 * Phase: setup.  Each row names a platform, the aliases it also opens
 * under, and its operations (struct pto_platform_ops, internal.h): only
 * what really differs per platform, each platform's in its own file (the
 * sim's: sim.c).  A second platform (cuda) adds its file and a row here,
 * never a branch elsewhere.
 */
#include <stdio.h>
#include <string.h>

#include "internal.h"

enum { MAX_ALIASES = 4 };

static const struct {
    const char *name;                          /* as pto_device_info.platform reports it */
    const char *aliases[MAX_ALIASES];          /* other names it opens under (unused: NULL) */
    const struct pto_platform_ops *ops;
} platforms[] = {
    {"sim", {"a2a3sim", "a5sim"}, &pti_sim_ops},
};

enum { N_PLATFORMS = sizeof(platforms) / sizeof(platforms[0]) };

static bool named(size_t i, const char *name)
{
    if (strcmp(platforms[i].name, name) == 0)
        return true;
    for (size_t a = 0; a < MAX_ALIASES && platforms[i].aliases[a]; a++)
        if (strcmp(platforms[i].aliases[a], name) == 0)
            return true;
    return false;
}

/* Append sep and s to buf (n bytes, *len used); a full buffer keeps what fits. */
static void append(char *buf, size_t n, size_t *len, const char *sep, const char *s)
{
    if (*len < n)
        *len += (size_t)snprintf(buf + *len, n - *len, "%s%s", sep, s);
}

const struct pto_platform_ops *pti_platform_find(const char *name, const char **canonical)
{
    for (size_t i = 0; i < N_PLATFORMS; i++) {
        if (named(i, name)) {
            *canonical = platforms[i].name;
            return platforms[i].ops;
        }
    }
    char known[128] = "";
    size_t len = 0;
    for (size_t i = 0; i < N_PLATFORMS; i++) {
        append(known, sizeof(known), &len, i ? ", " : "", platforms[i].name);
        for (size_t a = 0; a < MAX_ALIASES && platforms[i].aliases[a]; a++)
            append(known, sizeof(known), &len, ", ", platforms[i].aliases[a]);
    }
    pti_error(PTO_ENOTSUP, "pto_device_open: unknown platform '%s' (supported: %s)", name, known);
    return NULL;
}
