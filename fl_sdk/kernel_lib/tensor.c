/*
 * tensor.c -- facts about tensors: element count, contiguity, the bytes they
 * span and whether two may overlap (fl_kernel.h section 4).
 */
#include "fl_kernel.h"

int64_t flk_numel(const fl_tensor *t) {
    int64_t n = 1;
    for (int32_t d = 0; d < t->ndim; ++d)
        n *= t->sizes[d];
    return n;
}

int flk_is_contiguous(const fl_tensor *t) {
    int64_t expected = 1;
    for (int32_t d = t->ndim - 1; d >= 0; --d) {
        if (t->sizes[d] == 1)
            continue;
        if (t->sizes[d] == 0)
            return 1;
        if (t->strides[d] != expected)
            return 0;
        expected *= t->sizes[d];
    }
    return 1;
}

int flk_same_sizes(const fl_tensor *a, const fl_tensor *b) {
    if (a->ndim != b->ndim)
        return 0;
    for (int32_t d = 0; d < a->ndim; ++d)
        if (a->sizes[d] != b->sizes[d])
            return 0;
    return 1;
}

int flk_byte_span(const fl_tensor *t, uintptr_t *lo, uintptr_t *hi) {
    int64_t es = (int64_t)flk_dtype_size(t->dtype);
    int64_t mn = 0, mx = 0;
    for (int32_t d = 0; d < t->ndim; ++d) {
        if (t->sizes[d] == 0)
            return 0;
        int64_t ext = (t->sizes[d] - 1) * t->strides[d];
        if (ext < 0)
            mn += ext;
        else
            mx += ext;
    }
    uintptr_t base = (uintptr_t)flk_data(t);
    *lo = base + (uintptr_t)(mn * es);
    *hi = base + (uintptr_t)((mx + 1) * es);
    return 1;
}

int flk_may_overlap(const fl_tensor *a, const fl_tensor *b) {
    uintptr_t alo, ahi, blo, bhi;
    if (!flk_byte_span(a, &alo, &ahi) || !flk_byte_span(b, &blo, &bhi))
        return 0;
    return alo < bhi && blo < ahi;
}

int flk_same_view(const fl_tensor *a, const fl_tensor *b) {
    if (flk_data(a) != flk_data(b) || a->dtype != b->dtype || !flk_same_sizes(a, b))
        return 0;
    for (int32_t d = 0; d < a->ndim; ++d)
        if (a->sizes[d] > 1 && a->strides[d] != b->strides[d])
            return 0;
    return 1;
}
