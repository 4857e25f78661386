/*
 * error.c -- the per-thread last error message (fl_abi.h, "ERRORS"): every
 * other file reports its failures through plg_fail.  The bottom layer
 * (internal.h).
 */
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>

/* Thread-local, so concurrent callers never see each other's errors; kept
 * until the thread's next failure, as the ABI asks. */
static __thread char tls_message[PLG_MESSAGE_MAX];

fl_status plg_fail(fl_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tls_message, sizeof tls_message, fmt, ap);
    va_end(ap);
    return status;
}

const char *plg_last_error_message(void) { return tls_message; }
