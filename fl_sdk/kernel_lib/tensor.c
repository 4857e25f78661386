/*
 * tensor.c -- facts about tensors: element count, contiguity, the bytes they
 * span and whether two may overlap (fl_kernel.h section 4).
 */
#include "fl_kernel.h"

#include <string.h>

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

/* ---- inputs that share memory with the output (fl_abi.h "ARGUMENTS THAT SHARE MEMORY") -- */

typedef struct unshare_row {
    size_t es;
} unshare_row;

static void copy_elements(char **p, const int64_t *st, int64_t n, void *ctx) {
    size_t es = ((const unshare_row *)ctx)->es;
    for (int64_t i = 0; i < n; ++i)
        memcpy(p[0] + i * st[0], p[1] + i * st[1], es);
}

fl_status flk_unshare(const flk_args *a, const fl_tensor *out, const fl_tensor *in, int same_view_too,
                      flk_unshared *u, const fl_tensor **use) {
    u->memory = NULL;
    *use = in;
    if (!flk_may_overlap(out, in) || (!same_view_too && flk_same_view(out, in)))
        return FL_SUCCESS;
    unshare_row row = {flk_dtype_size(in->dtype)};
    int64_t n = flk_numel(in), strides[2][FLK_MAX_DIMS], running = 1;
    u->memory = flk_alloc((size_t)(n > 0 ? n : 1) * row.es);
    if (!u->memory)
        return flk_fail(a, "out of host memory for a %lld-element copy of an input that shares memory with the "
                           "output", (long long)n);
    u->copy = *in;
    u->copy.base = (fl_devptr)(uintptr_t)u->memory;
    u->copy.byte_offset = 0;
    for (int32_t d = in->ndim - 1; d >= 0; --d) {
        u->strides[d] = running;
        strides[0][d] = running * (int64_t)row.es;
        strides[1][d] = in->strides[d] * (int64_t)row.es;
        running *= in->sizes[d];
    }
    u->copy.strides = u->strides;
    char *p[2] = {(char *)u->memory, (char *)flk_data(in)};
    flk_for_each_row(in->ndim, in->sizes, 2, p, strides, 0, copy_elements, &row);
    *use = &u->copy;
    return FL_SUCCESS;
}

void flk_unshared_free(flk_unshared *u) {
    flk_free(u->memory);
    u->memory = NULL;
}
