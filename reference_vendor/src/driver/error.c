/*
 * error.c -- the per-thread last error message (the ABI's
 * last_error_message(), see "ERRORS" at the top of fl_abi.h).  The bottom
 * layer of the driver: every other file reports failures through drv_fail.
 */
#include "driver.h"

#include <stdarg.h>
#include <stdio.h>

/* Thread-local so that concurrent callers never see each other's errors.
 * It keeps the last failure until the next one (successes do not clear it,
 * which keeps the hot paths free of TLS writes). */
static __thread char tls_message[DRV_MESSAGE_MAX];

fl_status drv_fail(fl_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tls_message, sizeof tls_message, fmt, ap);
    va_end(ap);
    return status;
}

const char *drv_last_error_message(void) { return tls_message; }
