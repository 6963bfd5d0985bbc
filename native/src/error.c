/*
 * error.c - thread-local error text and status names.
 *
 * Phase: none (support).  Every ABI call that fails sets this thread's
 * message with pti_error and returns -code; pto_last_error reads it back.
 */
#include <stdarg.h>
#include <stdio.h>

#include "internal.h"

/* Each host thread reads the text of its own last failing call. */
static __thread char pto_errbuf[256];

int pti_error(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pto_errbuf, sizeof(pto_errbuf), fmt, ap);
    va_end(ap);
    return -code;
}

void pti_msgf(char *buf, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, n, fmt, ap);
    va_end(ap);
}

void pti_clear_error(void)
{
    pto_errbuf[0] = '\0';
}

const char *pto_last_error(void)
{
    return pto_errbuf;
}

const char *pto_status_name(int status)
{
    static const char *const names[] = {
        "PTO_OK",       "PTO_EAGAIN",   "PTO_ENOMEM",    "PTO_EINVAL",    "PTO_EKERNEL",
        "PTO_EDEP",     "PTO_EDEVLOST", "PTO_ECLOSED",   "PTO_ETIMEDOUT", "PTO_ECANCELED",
        "PTO_EFAULT",   "PTO_ELOAD",    "PTO_ENOTSUP",
    };
    if (status < 0)
        status = -status;
    if (status >= (int)(sizeof(names) / sizeof(names[0])))
        return "PTO_E?";
    return names[status];
}
