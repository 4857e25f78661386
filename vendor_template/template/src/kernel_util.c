/*
 * kernel_util.c -- the out-of-line kernel helpers (errors, element sizes).
 */
#include "kernel_util.h"

#include <stdarg.h>
#include <stdio.h>

fl_status kt_fail(kt_call *call, fl_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(call->message, sizeof call->message, fmt, ap);
    va_end(ap);
    return status;
}

fl_status kt_not_supported(kt_call *call) {
    return kt_fail(call, FL_ERROR_NOT_SUPPORTED,
                   "%s: the kernel is a skeleton (TODO(vendor) in its kernels_*.c)", call->op);
}

size_t kt_itemsize(int32_t dtype) {
    switch (dtype) {
    case FL_BOOL: case FL_INT8: case FL_UINT8: return 1;
    case FL_FLOAT16: case FL_BFLOAT16: case FL_INT16: return 2;
    case FL_FLOAT32: case FL_INT32: return 4;
    case FL_FLOAT64: case FL_INT64: case FL_COMPLEX64: return 8;
    default: return 0;
    }
}
