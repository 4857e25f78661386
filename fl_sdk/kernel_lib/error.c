/*
 * error.c -- how kernels report failures and declines (fl_kernel.h section 5):
 * the message goes into the kernel's context, the status says what kind.
 */
#include "fl_kernel.h"

#include <stdarg.h>
#include <stdio.h>

fl_status flk_kernel_fail(flk_ctx *ctx, const char *fmt, ...) {
    if (ctx) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ctx->message, sizeof ctx->message, fmt, ap);
        va_end(ap);
    }
    return FL_ERROR_KERNEL_FAILED;
}

static fl_status fail_with(const flk_args *a, fl_status status, const char *fmt, va_list ap) {
    char body[FLK_MESSAGE_MAX];
    vsnprintf(body, sizeof body, fmt, ap);
    flk_kernel_fail(a->ctx, "%s: %s", a->op ? a->op : "kernel", body);
    return status;
}

fl_status flk_fail(const flk_args *a, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fl_status st = fail_with(a, FL_ERROR_KERNEL_FAILED, fmt, ap);
    va_end(ap);
    return st;
}

fl_status flk_decline(const flk_args *a, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fl_status st = fail_with(a, FL_ERROR_NOT_SUPPORTED, fmt, ap);
    va_end(ap);
    return st;
}

fl_status flk_unwritten(flk_ctx *ctx) {
    if (ctx)
        snprintf(ctx->message, sizeof ctx->message,
                 "%s: the kernel is a skeleton, its body is not written yet",
                 ctx->op ? ctx->op : "kernel");
    return FL_ERROR_NOT_SUPPORTED;
}
