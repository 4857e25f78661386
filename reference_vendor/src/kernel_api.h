/*
 * kernel_api.h -- the seam between the reference chip's "driver" (plugin.c,
 * memory.c, stream.c, event.c) and its kernels (kernels_*.c, kernel_table.c).
 *
 * The driver launches a kernel on a stream's worker thread.  By then every
 * fl_tensor in the arguments has been copied and its `base` rewritten to a
 * host address the worker may read and write (the device's private mapping),
 * so a kernel finds element [0,...,0] at ref_tensor_data(t).  Kernels never
 * see the fl_devptr values the runtime holds.
 */
#ifndef REF_KERNEL_API_H
#define REF_KERNEL_API_H

#include <stdarg.h>
#include <stdint.h>

#include "fl_abi.h"

#define REF_ERROR_MESSAGE_MAX 512

typedef struct ref_kernel_ctx {
    int32_t device;                          /* device index the kernel runs on */
    char message[REF_ERROR_MESSAGE_MAX];     /* filled by ref_kernel_fail */
} ref_kernel_ctx;

typedef fl_status (*ref_kernel_fn)(const fl_arg *args, uint32_t nargs, ref_kernel_ctx *ctx);

typedef struct ref_kernel_def {
    const char *op;       /* ATen overload name, e.g. "add.Tensor" */
    uint64_t dtypes;      /* mask of (1ull << fl_dtype) */
    int32_t variant;      /* fl_kernel_variant */
    ref_kernel_fn fn;
    /* Optional, run by launch_kernel before anything is enqueued, on the
     * arguments' metadata only (tensor bases are still device addresses, so
     * it must never read data).  FL_ERROR_NOT_SUPPORTED (ref_decline) declines
     * the call with its message and the runtime runs it elsewhere: for
     * well-formed configurations the kernel cannot compute.  Any other status
     * is ignored here: malformed arguments still fail in the kernel, as the
     * conformance suite's robustness probes expect. */
    ref_kernel_fn accepts;
} ref_kernel_def;

/* Defined in kernel_table.c: every kernel the reference chip offers. */
extern const ref_kernel_def ref_kernel_defs[];
extern const uint32_t ref_kernel_def_count;

/* Record why a kernel failed and return FL_ERROR_KERNEL_FAILED. */
fl_status ref_kernel_fail(ref_kernel_ctx *ctx, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static inline void *ref_tensor_data(const fl_tensor *t) {
    return (char *)(uintptr_t)t->base + t->byte_offset;
}

#endif /* REF_KERNEL_API_H */
