/*
 * error.c -- the per-thread last error message (fl_driver.h section 1;
 * fl_abi.h "ERRORS"): every other part of a driver reports through fld_fail.
 */
#include "fl_driver.h"

#include <stdarg.h>
#include <stdio.h>

/* Thread-local, so concurrent callers never see each other's errors. */
static __thread char tls_message[FLD_MESSAGE_MAX];

fl_status fld_fail(fl_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tls_message, sizeof tls_message, fmt, ap);
    va_end(ap);
    return status;
}

const char *fld_last_error_message(void) { return tls_message; }
