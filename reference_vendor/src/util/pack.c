/*
 * pack.c -- packed copies of strided tensors (see pack.h).
 */
#include "util/pack.h"

typedef struct pack_ctx {
    int32_t tensor_dt;
    int32_t buf_dt;
    int to_buffer;
} pack_ctx;

/* ptrs[0]: tensor elements of one row, ptrs[1]: the matching buffer row */
static void pack_row(char **ptrs, const int64_t *strides, int64_t n, void *vc) {
    const pack_ctx *c = (const pack_ctx *)vc;
    if (c->to_buffer)
        flk_convert(ptrs[1], c->buf_dt, strides[1], ptrs[0], c->tensor_dt, strides[0], n);
    else
        flk_convert(ptrs[0], c->tensor_dt, strides[0], ptrs[1], c->buf_dt, strides[1], n);
}

static void transfer(const fl_tensor *t, int32_t dt, void *buf, int to_buffer) {
    int64_t strides[2][FLK_MAX_DIMS];
    const int64_t tes = (int64_t)flk_dtype_size(t->dtype), bes = (int64_t)flk_dtype_size(dt);
    int64_t running = bes;
    for (int d = t->ndim - 1; d >= 0; --d) {
        strides[0][d] = t->strides[d] * tes;
        strides[1][d] = running;
        running *= t->sizes[d];
    }
    char *ptrs[2] = {(char *)flk_data(t), (char *)buf};
    pack_ctx c = {t->dtype, dt, to_buffer};
    /* order by the buffer: logical row-major order */
    flk_for_each_row(t->ndim, t->sizes, 2, ptrs, strides, 1, pack_row, &c);
}

fl_status ref_pack(const flk_args *a, const fl_tensor *t, int32_t dt, void **out) {
    *out = NULL;
    if (!t)
        return FL_SUCCESS;
    int64_t n = flk_numel(t);
    *out = flk_alloc((size_t)(n > 0 ? n : 1) * flk_dtype_size(dt));
    if (!*out)
        return flk_fail(a, "out of host memory packing a tensor of %lld elements", (long long)n);
    transfer(t, dt, *out, 1);
    return FL_SUCCESS;
}

void ref_unpack(const fl_tensor *t, int32_t dt, const void *buf) {
    if (t && buf)
        transfer(t, dt, (void *)(uintptr_t)buf, 0);
}

fl_status ref_alloc_f64(const flk_args *a, int64_t n, double **out) {
    *out = (double *)flk_alloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    if (!*out)
        return flk_fail(a, "out of host memory for %lld doubles", (long long)n);
    return FL_SUCCESS;
}

void ref_free_all(void **ptrs, int n) {
    for (int i = 0; i < n; ++i) {
        flk_free(ptrs[i]);
        ptrs[i] = NULL;
    }
}
