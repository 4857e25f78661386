/*
 * tensors.c -- a tensor's extent without overflow, and what makes one
 * malformed (fl_driver.h section 6).
 */
#include "fl_driver.h"

int fld_tensor_extent(const fl_tensor *t, uint64_t *bytes) {
    uint64_t last = 0, span;
    *bytes = 0;
    for (int32_t d = 0; d < t->ndim; d++)
        if (t->sizes[d] == 0)
            return 1;      /* empty: touches no memory, whatever the other sizes */
    for (int32_t d = 0; d < t->ndim; d++) {
        uint64_t step;
        if (__builtin_mul_overflow((uint64_t)(t->sizes[d] - 1), (uint64_t)t->strides[d], &step) ||
            __builtin_add_overflow(last, step, &last))
            return 0;
    }
    if (__builtin_add_overflow(last, 1, &span) ||
        __builtin_mul_overflow(span, (uint64_t)flk_dtype_size(t->dtype), &span))
        return 0;
    *bytes = span;
    return 1;
}

const char *fld_tensor_problem(const fl_tensor *t) {
    if (t->struct_size < FL_STRUCT_SIZE(fl_tensor, strides))
        return "fl_tensor.struct_size is too small";
    if (!flk_dtype_valid(t->dtype))
        return "unknown dtype";
    if (t->ndim < 0)
        return "negative ndim";
    if (t->ndim > 0 && (!t->sizes || !t->strides))
        return "NULL sizes or strides";
    for (int32_t d = 0; d < t->ndim; d++)
        if (t->sizes[d] < 0 || t->strides[d] < 0)
            return "negative size or stride";
    return NULL;
}
