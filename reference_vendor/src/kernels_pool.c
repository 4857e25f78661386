/*
 * kernels_pool.c -- max_pool2d_with_indices and its backward (float32,
 * float64; 3-d [C,H,W] or 4-d [N,C,H,W] input, any strides, padding,
 * dilation, ceil_mode).  Indices are int64 flat offsets within each H*W
 * plane and NaN propagates (the last NaN of a window wins), as in PyTorch's
 * CPU kernel.
 */
#include <math.h>

#include "kernel_util.h"

typedef struct pool_geom {
    int64_t N, C, H, W, OH, OW, KH, KW, SH, SW, PH, PW, DH, DW;
    int64_t is[4], os[4], xs[4]; /* element strides: input, output, indices */
} pool_geom;

static fl_status pair_arg(const ref_args *a, uint32_t i, const char *name, int allow_empty,
                          int64_t *v0, int64_t *v1, int *empty) {
    const int64_t *v;
    uint32_t n;
    REF_TRY(ref_get_int_list(a, i, name, &v, &n));
    if (empty)
        *empty = 0;
    if (n == 0 && allow_empty) {
        *empty = 1;
        return FL_SUCCESS;
    }
    if (n != 1 && n != 2)
        return ref_fail(a, "%s must have 1 or 2 entries, got %u", name, n);
    *v0 = v[0];
    *v1 = n == 2 ? v[1] : v[0];
    return FL_SUCCESS;
}

static int64_t pool_out_size(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dil,
                             int ceil_mode) {
    int64_t num = in + 2 * pad - dil * (k - 1) - 1 + (ceil_mode ? stride - 1 : 0);
    int64_t out = (num >= 0 ? num / stride : -((-num + stride - 1) / stride)) + 1;
    if (ceil_mode && (out - 1) * stride >= in + pad)
        --out;
    return out;
}

/* x: input; y: a tensor with the output's shape (values or grad_output) */
static fl_status parse_pool(const ref_args *a, const fl_tensor *x, const fl_tensor *y,
                            uint32_t ki, pool_geom *g, int *ceil_mode) {
    int empty;
    memset(g, 0, sizeof *g);
    REF_TRY(pair_arg(a, ki, "kernel_size", 0, &g->KH, &g->KW, NULL));
    REF_TRY(pair_arg(a, ki + 1, "stride", 1, &g->SH, &g->SW, &empty));
    if (empty) {
        g->SH = g->KH;
        g->SW = g->KW;
    }
    REF_TRY(pair_arg(a, ki + 2, "padding", 0, &g->PH, &g->PW, NULL));
    REF_TRY(pair_arg(a, ki + 3, "dilation", 0, &g->DH, &g->DW, NULL));
    REF_TRY(ref_get_bool(a, ki + 4, "ceil_mode", ceil_mode));
    if (x->dtype != FL_FLOAT32 && x->dtype != FL_FLOAT64)
        return ref_fail(a, "dtype %s is not supported (float32, float64)",
                        ref_dtype_name(x->dtype));
    if (x->ndim != 3 && x->ndim != 4)
        return ref_fail(a, "expected a 3-d or 4-d input, got %d dims", (int)x->ndim);
    if (y->ndim != x->ndim)
        return ref_fail(a, "output must have the input's number of dims");
    if (g->KH <= 0 || g->KW <= 0 || g->SH <= 0 || g->SW <= 0 || g->DH <= 0 || g->DW <= 0)
        return ref_fail(a, "kernel_size, stride and dilation must be positive");
    if (g->PH < 0 || g->PW < 0 || g->PH > g->KH / 2 || g->PW > g->KW / 2)
        return ref_fail(a, "pad should be non-negative and at most half of the kernel size");
    int b = x->ndim == 4;
    g->N = b ? x->sizes[0] : 1;
    g->C = x->sizes[b];
    g->H = x->sizes[b + 1];
    g->W = x->sizes[b + 2];
    g->OH = pool_out_size(g->H, g->KH, g->PH, g->SH, g->DH, *ceil_mode);
    g->OW = pool_out_size(g->W, g->KW, g->PW, g->SW, g->DW, *ceil_mode);
    if (g->OH <= 0 || g->OW <= 0)
        return ref_fail(a, "output size is too small (%lldx%lld)", (long long)g->OH,
                        (long long)g->OW);
    if ((b && y->sizes[0] != g->N) || y->sizes[b] != g->C || y->sizes[b + 1] != g->OH ||
        y->sizes[b + 2] != g->OW)
        return ref_fail(a, "output shape does not match the pooling (expected %lldx%lld)",
                        (long long)g->OH, (long long)g->OW);
    g->is[0] = b ? x->strides[0] : 0;
    g->os[0] = b ? y->strides[0] : 0;
    for (int d = 0; d < 3; ++d) {
        g->is[d + 1] = x->strides[b + d];
        g->os[d + 1] = y->strides[b + d];
    }
    return FL_SUCCESS;
}

static fl_status index_strides(const ref_args *a, const fl_tensor *ind, const fl_tensor *y,
                               pool_geom *g) {
    if (ind->dtype != FL_INT64)
        return ref_fail(a, "indices must be int64, got %s", ref_dtype_name(ind->dtype));
    if (!ref_same_sizes(ind, y))
        return ref_fail(a, "indices must have the output's shape");
    int b = ind->ndim == 4;
    g->xs[0] = b ? ind->strides[0] : 0;
    for (int d = 0; d < 3; ++d)
        g->xs[d + 1] = ind->strides[b + d];
    return FL_SUCCESS;
}

#define POOL_FWD(NAME, T, TU)                                                              \
    static void NAME(const pool_geom *g, const char *x, char *y, char *ind) {              \
        for (int64_t n = 0; n < g->N; ++n)                                                 \
            for (int64_t c = 0; c < g->C; ++c) {                                           \
                const TU *ip = (const TU *)x + n * g->is[0] + c * g->is[1];                \
                TU *op = (TU *)y + n * g->os[0] + c * g->os[1];                            \
                ref_i64 *xp = (ref_i64 *)ind + n * g->xs[0] + c * g->xs[1];                \
                for (int64_t oh = 0; oh < g->OH; ++oh) {                                   \
                    int64_t ih0 = oh * g->SH - g->PH;                                      \
                    int64_t ih1 = ih0 + (g->KH - 1) * g->DH + 1;                           \
                    if (ih1 > g->H)                                                        \
                        ih1 = g->H;                                                        \
                    while (ih0 < 0)                                                        \
                        ih0 += g->DH;                                                      \
                    for (int64_t ow = 0; ow < g->OW; ++ow) {                               \
                        int64_t iw0 = ow * g->SW - g->PW;                                  \
                        int64_t iw1 = iw0 + (g->KW - 1) * g->DW + 1;                       \
                        if (iw1 > g->W)                                                    \
                            iw1 = g->W;                                                    \
                        while (iw0 < 0)                                                    \
                            iw0 += g->DW;                                                  \
                        int64_t maxidx = ih0 * g->W + iw0;                                 \
                        T maxval = -(T)INFINITY;                                           \
                        for (int64_t ih = ih0; ih < ih1; ih += g->DH)                      \
                            for (int64_t iw = iw0; iw < iw1; iw += g->DW) {                \
                                T v = ip[ih * g->is[2] + iw * g->is[3]];                   \
                                if (v > maxval || v != v) {                                \
                                    maxval = v;                                            \
                                    maxidx = ih * g->W + iw;                               \
                                }                                                          \
                            }                                                              \
                        op[oh * g->os[2] + ow * g->os[3]] = maxval;                        \
                        xp[oh * g->xs[2] + ow * g->xs[3]] = maxidx;                        \
                    }                                                                      \
                }                                                                          \
            }                                                                              \
    }

POOL_FWD(pool_fwd_f32, float, ref_f32)
POOL_FWD(pool_fwd_f64, double, ref_f64)

/* max_pool2d_with_indices(self, kernel_size, stride=[], padding=0, dilation=1,
 *                         ceil_mode=False) -> (Tensor, Tensor) */
REF_KERNEL(ref_k_max_pool2d_with_indices) {
    ref_args a;
    const fl_tensor *x, *y, *ind;
    pool_geom g;
    int ceil_mode;
    REF_TRY(ref_args_init(&a, "max_pool2d_with_indices", args, nargs, 8, ctx));
    REF_TRY(ref_get_tensor(&a, 0, "self", &x));
    REF_TRY(ref_get_tensor(&a, 6, "out", &y));
    REF_TRY(ref_get_tensor(&a, 7, "indices", &ind));
    REF_TRY(parse_pool(&a, x, y, 1, &g, &ceil_mode));
    REF_TRY(index_strides(&a, ind, y, &g));
    if (y->dtype != x->dtype)
        return ref_fail(&a, "output dtype %s differs from input dtype %s",
                        ref_dtype_name(y->dtype), ref_dtype_name(x->dtype));
    if (x->dtype == FL_FLOAT32)
        pool_fwd_f32(&g, ref_tensor_data(x), ref_tensor_data(y), ref_tensor_data(ind));
    else
        pool_fwd_f64(&g, ref_tensor_data(x), ref_tensor_data(y), ref_tensor_data(ind));
    return FL_SUCCESS;
}

#define POOL_BWD(NAME, T, TU)                                                             \
    static int NAME(const pool_geom *g, const int64_t *gs, const char *gy,                 \
                    const char *ind, char *gx, int64_t *bad) {                             \
        const int64_t HW = g->H * g->W;                                                    \
        for (int64_t n = 0; n < g->N; ++n)                                                 \
            for (int64_t c = 0; c < g->C; ++c) {                                           \
                const TU *gp = (const TU *)gy + n * g->os[0] + c * g->os[1];               \
                const ref_i64 *xp = (const ref_i64 *)ind + n * g->xs[0] + c * g->xs[1];    \
                TU *dp = (TU *)gx + n * gs[0] + c * gs[1];                                 \
                for (int64_t oh = 0; oh < g->OH; ++oh)                                     \
                    for (int64_t ow = 0; ow < g->OW; ++ow) {                               \
                        int64_t k = xp[oh * g->xs[2] + ow * g->xs[3]];                     \
                        if (k < 0 || k >= HW) {                                            \
                            *bad = k;                                                      \
                            return 0;                                                      \
                        }                                                                  \
                        dp[(k / g->W) * gs[2] + (k % g->W) * gs[3]] +=                     \
                            gp[oh * g->os[2] + ow * g->os[3]];                             \
                    }                                                                      \
            }                                                                              \
        return 1;                                                                          \
    }

POOL_BWD(pool_bwd_f32, float, ref_f32)
POOL_BWD(pool_bwd_f64, double, ref_f64)

/* max_pool2d_with_indices_backward(grad_output, self, kernel_size, stride, padding,
 *                                  dilation, ceil_mode, indices) -> grad_input */
REF_KERNEL(ref_k_max_pool2d_with_indices_backward) {
    ref_args a;
    const fl_tensor *gy, *x, *ind, *gx;
    pool_geom g;
    int ceil_mode;
    REF_TRY(ref_args_init(&a, "max_pool2d_with_indices_backward", args, nargs, 9, ctx));
    REF_TRY(ref_get_tensor(&a, 0, "grad_output", &gy));
    REF_TRY(ref_get_tensor(&a, 1, "self", &x));
    REF_TRY(ref_get_tensor(&a, 7, "indices", &ind));
    REF_TRY(ref_get_tensor(&a, 8, "grad_input", &gx));
    REF_TRY(parse_pool(&a, x, gy, 2, &g, &ceil_mode));
    REF_TRY(index_strides(&a, ind, gy, &g));
    if (gy->dtype != x->dtype || gx->dtype != x->dtype)
        return ref_fail(&a, "grad_output, self and grad_input must have the same dtype");
    if (!ref_same_sizes(gx, x))
        return ref_fail(&a, "grad_input must have the input's shape");
    int b = gx->ndim == 4;
    int64_t gs[4] = {b ? gx->strides[0] : 0, gx->strides[b], gx->strides[b + 1],
                     gx->strides[b + 2]};
    /* zero grad_input */
    size_t es = ref_dtype_size(x->dtype);
    for (int64_t n = 0; n < g.N; ++n)
        for (int64_t c = 0; c < g.C; ++c) {
            char *p = (char *)ref_tensor_data(gx) + (n * gs[0] + c * gs[1]) * (int64_t)es;
            if (gs[3] == 1 && (g.H == 1 || gs[2] == g.W)) {
                memset(p, 0, (size_t)(g.H * g.W) * es);
            } else {
                for (int64_t h = 0; h < g.H; ++h)
                    for (int64_t w = 0; w < g.W; ++w)
                        memset(p + (h * gs[2] + w * gs[3]) * (int64_t)es, 0, es);
            }
        }
    int64_t bad = 0;
    int ok = x->dtype == FL_FLOAT32
                 ? pool_bwd_f32(&g, gs, ref_tensor_data(gy), ref_tensor_data(ind),
                                ref_tensor_data(gx), &bad)
                 : pool_bwd_f64(&g, gs, ref_tensor_data(gy), ref_tensor_data(ind),
                                ref_tensor_data(gx), &bad);
    if (!ok)
        return ref_fail(&a, "index %lld out of range for a %lldx%lld plane", (long long)bad,
                        (long long)g.H, (long long)g.W);
    return FL_SUCCESS;
}
