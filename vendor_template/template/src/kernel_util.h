/*
 * kernel_util.h -- what a kernel of this plugin sees: its call (arguments,
 * device, error message) and small helpers for reading arguments and
 * addressing elements of strided, broadcast and misaligned tensors.
 *
 * In this template device memory is host memory, so a tensor's data is at
 * kt_data(t) and a kernel can be written (and checked by `fl-sdk test`) on the
 * host before the chip's own launch replaces it.
 */
#ifndef KT_KERNEL_UTIL_H
#define KT_KERNEL_UTIL_H

#include <stdint.h>
#include <string.h>

#include "fl_abi.h"

#define KT_MESSAGE_MAX 512
#define KT_DTYPE(d) (1ull << (d))

typedef struct kt_call {
    const fl_arg *args;
    uint32_t nargs;
    int32_t device;                    /* the device of the stream it runs on */
    const char *op;                    /* the ATen overload, for messages */
    char message[KT_MESSAGE_MAX];      /* why it failed (kt_fail) */
} kt_call;

typedef fl_status (*kt_kernel_fn)(kt_call *call);

/* One row of kernel_table.c. */
typedef struct kt_kernel_def {
    const char *op;            /* ATen overload, e.g. "add.Tensor" */
    const char *signature;     /* one letter per argument: T tensor, S scalar */
    const uint64_t *dtypes;    /* mask of KT_DTYPE(fl_dtype); 0 = not written yet */
    int32_t variant;           /* fl_kernel_variant */
    kt_kernel_fn fn;
} kt_kernel_def;

extern const kt_kernel_def kt_kernel_defs[];
extern const uint32_t kt_kernel_def_count;

/* Record why the kernel failed and return `status` (kernel_util.c). */
fl_status kt_fail(kt_call *call, fl_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* FL_ERROR_NOT_SUPPORTED naming the op: the body is still a skeleton. */
fl_status kt_not_supported(kt_call *call);

/* Bytes per element of an fl_dtype (0 for an unknown one). */
size_t kt_itemsize(int32_t dtype);

static inline const fl_tensor *kt_tensor(const kt_call *call, uint32_t i) {
    return call->args[i].value.tensor;
}

/* A Scalar argument (int, float or bool) as a double. */
static inline double kt_scalar(const kt_call *call, uint32_t i) {
    const fl_arg *a = &call->args[i];
    return a->kind == FL_ARG_FLOAT ? a->value.f : (double)a->value.i;
}

static inline int64_t kt_numel(const fl_tensor *t) {
    int64_t n = 1;
    for (int32_t d = 0; d < t->ndim; d++)
        n *= t->sizes[d];
    return n;
}

/* Element [0,...,0]. */
static inline char *kt_data(const fl_tensor *t) {
    return (char *)(uintptr_t)t->base + t->byte_offset;
}

/* The element of `t` at row-major position `linear` of the iteration shape
 * `shape` (usually the output's): t's dimensions align to the right and a
 * missing or size-1 dimension broadcasts.  Works for any strides. */
static inline char *kt_element(const fl_tensor *t, const fl_tensor *shape, int64_t linear) {
    int64_t offset = 0;
    for (int32_t d = shape->ndim - 1, td = t->ndim - 1; d >= 0; d--, td--) {
        int64_t size = shape->sizes[d], index = linear % size;
        linear /= size;
        if (td >= 0 && t->sizes[td] != 1)
            offset += index * t->strides[td];
    }
    return kt_data(t) + offset * (int64_t)kt_itemsize(t->dtype);
}

/* Tensor data may be misaligned for its dtype: load and store through memcpy. */
static inline float kt_load_f32(const char *p) {
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void kt_store_f32(char *p, float v) { memcpy(p, &v, sizeof v); }

static inline double kt_load_f64(const char *p) {
    double v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void kt_store_f64(char *p, double v) { memcpy(p, &v, sizeof v); }

#endif /* KT_KERNEL_UTIL_H */
