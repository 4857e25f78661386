/*
 * pool_max.c -- max_pool2d_with_indices and its backward (float32,
 * float64; 3-d [C,H,W] or 4-d [N,C,H,W] input, any strides, padding,
 * dilation, ceil_mode).  Indices are int64 flat offsets within each H*W
 * plane and NaN propagates (the last NaN of a window wins), as in PyTorch's
 * CPU kernel.
 */
#include <math.h>

#include "fl_kernel.h"
#include "util/pool_window.h"
#include "util/half.h"

typedef struct pool_geom {
    int64_t N, C, H, W, OH, OW, KH, KW, SH, SW, PH, PW, DH, DW;
    int64_t is[4], os[4], xs[4]; /* element strides: input, output, indices */
} pool_geom;

/* x: input; y: a tensor with the output's shape (values or grad_output) */
static fl_status parse_pool(const flk_args *a, const fl_tensor *x, const fl_tensor *y,
                            uint32_t ki, pool_geom *g, int *ceil_mode) {
    memset(g, 0, sizeof *g);
    const ref_pool_window w = {&g->KH, &g->KW, &g->SH, &g->SW, &g->PH, &g->PW};
    FLK_TRY(ref_pool_window_args(a, ki, &w));
    FLK_TRY(ref_pool_pair_arg(a, ki + 3, "dilation", 0, &g->DH, &g->DW, NULL));
    FLK_TRY(flk_get_bool(a, ki + 4, "ceil_mode", ceil_mode));
    if (x->dtype != FL_FLOAT32 && x->dtype != FL_FLOAT64)
        return flk_fail(a, "dtype %s is not supported (float32, float64)",
                        flk_dtype_name(x->dtype));
    if (x->ndim != 3 && x->ndim != 4)
        return flk_fail(a, "expected a 3-d or 4-d input, got %d dims", (int)x->ndim);
    if (y->ndim != x->ndim)
        return flk_fail(a, "output must have the input's number of dims");
    if (g->KH <= 0 || g->KW <= 0 || g->SH <= 0 || g->SW <= 0 || g->DH <= 0 || g->DW <= 0)
        return flk_fail(a, "kernel_size, stride and dilation must be positive");
    if (g->PH < 0 || g->PW < 0 || g->PH > g->KH / 2 || g->PW > g->KW / 2)
        return flk_fail(a, "pad should be non-negative and at most half of the kernel size");
    int b = x->ndim == 4;
    g->N = b ? x->sizes[0] : 1;
    g->C = x->sizes[b];
    g->H = x->sizes[b + 1];
    g->W = x->sizes[b + 2];
    g->OH = ref_pool_out_size(g->H, g->KH, g->PH, g->SH, g->DH, *ceil_mode);
    g->OW = ref_pool_out_size(g->W, g->KW, g->PW, g->SW, g->DW, *ceil_mode);
    if (g->OH <= 0 || g->OW <= 0)
        return flk_fail(a, "output size is too small (%lldx%lld)", (long long)g->OH,
                        (long long)g->OW);
    if ((b && y->sizes[0] != g->N) || y->sizes[b] != g->C || y->sizes[b + 1] != g->OH ||
        y->sizes[b + 2] != g->OW)
        return flk_fail(a, "output shape does not match the pooling (expected %lldx%lld)",
                        (long long)g->OH, (long long)g->OW);
    g->is[0] = b ? x->strides[0] : 0;
    g->os[0] = b ? y->strides[0] : 0;
    for (int d = 0; d < 3; ++d) {
        g->is[d + 1] = x->strides[b + d];
        g->os[d + 1] = y->strides[b + d];
    }
    return FL_SUCCESS;
}

static fl_status index_strides(const flk_args *a, const fl_tensor *ind, const fl_tensor *y,
                               pool_geom *g) {
    if (ind->dtype != FL_INT64)
        return flk_fail(a, "indices must be int64, got %s", flk_dtype_name(ind->dtype));
    if (!flk_same_sizes(ind, y))
        return flk_fail(a, "indices must have the output's shape");
    int b = ind->ndim == 4;
    g->xs[0] = b ? ind->strides[0] : 0;
    for (int d = 0; d < 3; ++d)
        g->xs[d + 1] = ind->strides[b + d];
    return FL_SUCCESS;
}

/*
 * For each output row the window positions are visited in the same raster
 * order as PyTorch's loop (ih, then iw ascending), but with the output column
 * innermost: the running max / argmax of a whole row is updated with
 * branch-free selects the compiler vectorises (a per-window loop with
 * data-dependent branches mispredicts on real activations).
 * mv / mi: scratch for OW values / indices.
 */
#define POOL_FWD(NAME, T, TU)                                                              \
    static void NAME(const pool_geom *gp, const char *x, char *y, char *ind, T *mv,        \
                     int64_t *mi) {                                                        \
        const pool_geom g = *gp; /* locals: element stores may alias */                    \
        for (int64_t n = 0; n < g.N; ++n)                                                  \
            for (int64_t c = 0; c < g.C; ++c) {                                            \
                const TU *ip = (const TU *)x + n * g.is[0] + c * g.is[1];                  \
                TU *op = (TU *)y + n * g.os[0] + c * g.os[1];                              \
                flk_i64 *xp = (flk_i64 *)ind + n * g.xs[0] + c * g.xs[1];                  \
                for (int64_t oh = 0; oh < g.OH; ++oh) {                                    \
                    int64_t ih0 = oh * g.SH - g.PH;                                        \
                    int64_t ih1 = ih0 + (g.KH - 1) * g.DH + 1;                             \
                    if (ih1 > g.H)                                                         \
                        ih1 = g.H;                                                         \
                    while (ih0 < 0)                                                        \
                        ih0 += g.DH;                                                       \
                    for (int64_t ow = 0; ow < g.OW; ++ow) {                                \
                        int64_t iw0 = ow * g.SW - g.PW;                                    \
                        while (iw0 < 0)                                                    \
                            iw0 += g.DW;                                                   \
                        mv[ow] = -(T)INFINITY;                                             \
                        mi[ow] = ih0 * g.W + iw0;                                          \
                    }                                                                      \
                    for (int64_t ih = ih0; ih < ih1; ih += g.DH) {                         \
                        const TU *row = ip + ih * g.is[2];                                 \
                        for (int64_t kj = 0; kj < g.KW; ++kj) {                            \
                            const int64_t off = kj * g.DW - g.PW; /* iw = ow*SW + off */   \
                            int64_t lo = off >= 0 ? 0 : (-off + g.SW - 1) / g.SW;          \
                            int64_t hi = g.W - off <= 0 ? 0 : (g.W - off + g.SW - 1) / g.SW; \
                            if (hi > g.OW)                                                 \
                                hi = g.OW;                                                 \
                            const int64_t sw = g.SW * g.is[3], base = ih * g.W + off;      \
                            const TU *r = row + off * g.is[3];                             \
                            for (int64_t ow = lo; ow < hi; ++ow) {                         \
                                T v = r[ow * sw];                                          \
                                T m = mv[ow];                                              \
                                int take = (v > m) | (v != v);                             \
                                mv[ow] = take ? v : m;                                     \
                                mi[ow] = take ? base + ow * g.SW : mi[ow];                 \
                            }                                                              \
                        }                                                                  \
                    }                                                                      \
                    for (int64_t ow = 0; ow < g.OW; ++ow) {                                \
                        op[oh * g.os[2] + ow * g.os[3]] = mv[ow];                          \
                        xp[oh * g.xs[2] + ow * g.xs[3]] = mi[ow];                          \
                    }                                                                      \
                }                                                                          \
            }                                                                              \
    }

#if defined(__AVX2__)
#include <immintrin.h>
/*
 * float32 2x2 / stride 2 / no padding / no dilation with unit inner strides,
 * 8 outputs per step (masked loads/stores for the row tail).  Same raster
 * order and NaN rule as the generic loop: take v if v > max or v is NaN.
 */
static inline __m256 pool_take(__m256 v, __m256 m) {
    return _mm256_or_ps(_mm256_cmp_ps(v, m, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
}

/* even / odd elements of 16 consecutive floats, in order */
static inline void deinterleave(__m256 x0, __m256 x1, __m256 *even, __m256 *odd) {
    __m256 e = _mm256_shuffle_ps(x0, x1, 0x88), o = _mm256_shuffle_ps(x0, x1, 0xDD);
    *even = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), 0xD8));
    *odd = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(o), 0xD8));
}

static void pool2x2_row_f32(const float *r0, const float *r1, float *o, int64_t *xi, int64_t n,
                            int32_t i0, int32_t W) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i kW = _mm256_set1_epi32(W), kW1 = _mm256_set1_epi32(W + 1);
    const __m256i one = _mm256_set1_epi32(1);
    for (int64_t ow = 0; ow < n; ow += 8) {
        int64_t rem = n - ow;
        __m256 x0, x1, y0, y1;
        __m256i m0 = _mm256_setzero_si256(), m1 = m0, mo = m0;
        if (rem >= 8) {
            x0 = _mm256_loadu_ps(r0 + 2 * ow);
            x1 = _mm256_loadu_ps(r0 + 2 * ow + 8);
            y0 = _mm256_loadu_ps(r1 + 2 * ow);
            y1 = _mm256_loadu_ps(r1 + 2 * ow + 8);
        } else {
            __m256i two_rem = _mm256_set1_epi32((int)(2 * rem));
            m0 = _mm256_cmpgt_epi32(two_rem, lane);
            m1 = _mm256_cmpgt_epi32(two_rem, _mm256_add_epi32(lane, _mm256_set1_epi32(8)));
            mo = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)rem), lane);
            x0 = _mm256_maskload_ps(r0 + 2 * ow, m0);
            x1 = _mm256_maskload_ps(r0 + 2 * ow + 8, m1);
            y0 = _mm256_maskload_ps(r1 + 2 * ow, m0);
            y1 = _mm256_maskload_ps(r1 + 2 * ow + 8, m1);
        }
        __m256 a, b, c, d;
        deinterleave(x0, x1, &a, &b);
        deinterleave(y0, y1, &c, &d);
        __m256 m = a, t;
        __m256i k = _mm256_setzero_si256();
        t = pool_take(b, m);
        m = _mm256_blendv_ps(m, b, t);
        k = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(k), _mm256_castsi256_ps(one), t));
        t = pool_take(c, m);
        m = _mm256_blendv_ps(m, c, t);
        k = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(k), _mm256_castsi256_ps(kW), t));
        t = pool_take(d, m);
        m = _mm256_blendv_ps(m, d, t);
        k = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(k), _mm256_castsi256_ps(kW1), t));
        /* index = i0 + 2 * (ow + lane) + k */
        __m256i idx = _mm256_add_epi32(
            _mm256_set1_epi32(i0 + (int32_t)(2 * ow)),
            _mm256_add_epi32(_mm256_add_epi32(lane, lane), k));
        __m256i lo = _mm256_cvtepi32_epi64(_mm256_castsi256_si128(idx));
        __m256i hi = _mm256_cvtepi32_epi64(_mm256_extracti128_si256(idx, 1));
        if (rem >= 8) {
            _mm256_storeu_ps(o + ow, m);
            _mm256_storeu_si256((__m256i *)(void *)(xi + ow), lo);
            _mm256_storeu_si256((__m256i *)(void *)(xi + ow + 4), hi);
        } else {
            _mm256_maskstore_ps(o + ow, mo, m);
            __m256i ml = _mm256_cvtepi32_epi64(_mm256_castsi256_si128(mo));
            __m256i mh = _mm256_cvtepi32_epi64(_mm256_extracti128_si256(mo, 1));
            _mm256_maskstore_epi64((long long *)(void *)(xi + ow), ml, lo);
            _mm256_maskstore_epi64((long long *)(void *)(xi + ow + 4), mh, hi);
        }
    }
}

static int pool2x2_f32(const pool_geom *gp, const char *x, char *y, char *ind) {
    const pool_geom g = *gp;
    if (!(g.KH == 2 && g.KW == 2 && g.SH == 2 && g.SW == 2 && g.PH == 0 && g.PW == 0 &&
          g.DH == 1 && g.DW == 1 && g.is[3] == 1 && g.os[3] == 1 && g.xs[3] == 1 &&
          2 * g.OH <= g.H && 2 * g.OW <= g.W && g.H * g.W < ((int64_t)1 << 30)))
        return 0;
    for (int64_t n = 0; n < g.N; ++n)
        for (int64_t c = 0; c < g.C; ++c) {
            const float *ip = (const float *)(const void *)x + n * g.is[0] + c * g.is[1];
            float *op = (float *)(void *)y + n * g.os[0] + c * g.os[1];
            int64_t *xp = (int64_t *)(void *)ind + n * g.xs[0] + c * g.xs[1];
            for (int64_t oh = 0; oh < g.OH; ++oh)
                pool2x2_row_f32(ip + 2 * oh * g.is[2], ip + (2 * oh + 1) * g.is[2],
                                op + oh * g.os[2], xp + oh * g.xs[2], g.OW,
                                (int32_t)(2 * oh * g.W), (int32_t)g.W);
        }
    return 1;
}
#endif

POOL_FWD(pool_fwd_f32, float, flk_f32)
POOL_FWD(pool_fwd_f64, double, flk_f64)

/* max_pool2d_with_indices(self, kernel_size, stride=[], padding=0, dilation=1,
 *                         ceil_mode=False) -> (Tensor, Tensor) */
FLK_KERNEL_FN(k_max_pool2d_with_indices) {
    flk_args a;
    const fl_tensor *x, *y, *ind;
    pool_geom g;
    int ceil_mode;
    FLK_TRY(flk_args_init(&a, "max_pool2d_with_indices", args, nargs, 8, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &x));
    FLK_TRY(flk_get_tensor(&a, 6, "out", &y));
    FLK_TRY(flk_get_tensor(&a, 7, "indices", &ind));
    FLK_TRY(parse_pool(&a, x, y, 1, &g, &ceil_mode));
    FLK_TRY(index_strides(&a, ind, y, &g));
    if (y->dtype != x->dtype)
        return flk_fail(&a, "output dtype %s differs from input dtype %s",
                        flk_dtype_name(y->dtype), flk_dtype_name(x->dtype));
    void *mv = flk_alloc((size_t)g.OW * 8), *mi = flk_alloc((size_t)g.OW * 8);
    if (!mv || !mi) {
        flk_free(mv);
        flk_free(mi);
        return flk_fail(&a, "out of host memory");
    }
#if defined(__AVX2__)
    if (x->dtype == FL_FLOAT32 &&
        pool2x2_f32(&g, flk_data(x), flk_data(y), flk_data(ind))) {
        flk_free(mv);
        flk_free(mi);
        return FL_SUCCESS;
    }
#endif
    if (x->dtype == FL_FLOAT32)
        pool_fwd_f32(&g, flk_data(x), flk_data(y), flk_data(ind),
                     (float *)mv, (int64_t *)mi);
    else
        pool_fwd_f64(&g, flk_data(x), flk_data(y), flk_data(ind),
                     (double *)mv, (int64_t *)mi);
    flk_free(mv);
    flk_free(mi);
    return FL_SUCCESS;
}

#define POOL_BWD(NAME, T, TU)                                                              \
    static int NAME(const pool_geom *gp, const int64_t *gsp, const char *gy,               \
                    const char *ind, char *gx, int64_t *bad) {                             \
        const pool_geom g = *gp;                                                           \
        const int64_t gs[4] = {gsp[0], gsp[1], gsp[2], gsp[3]};                            \
        const int64_t HW = g.H * g.W;                                                      \
        const int plane = gs[3] == 1 && gs[2] == g.W; /* flat index is the offset */       \
        for (int64_t n = 0; n < g.N; ++n)                                                  \
            for (int64_t c = 0; c < g.C; ++c) {                                            \
                const TU *gp_ = (const TU *)gy + n * g.os[0] + c * g.os[1];                \
                const flk_i64 *xp = (const flk_i64 *)ind + n * g.xs[0] + c * g.xs[1];      \
                TU *dp = (TU *)gx + n * gs[0] + c * gs[1];                                 \
                for (int64_t oh = 0; oh < g.OH; ++oh)                                      \
                    for (int64_t ow = 0; ow < g.OW; ++ow) {                                \
                        int64_t k = xp[oh * g.xs[2] + ow * g.xs[3]];                       \
                        if (k < 0 || k >= HW) {                                            \
                            *bad = k;                                                      \
                            return 0;                                                      \
                        }                                                                  \
                        int64_t off = plane ? k : (k / g.W) * gs[2] + (k % g.W) * gs[3];   \
                        dp[off] += gp_[oh * g.os[2] + ow * g.os[3]];                       \
                    }                                                                      \
            }                                                                              \
        return 1;                                                                          \
    }

POOL_BWD(pool_bwd_f32, float, flk_f32)
POOL_BWD(pool_bwd_f64, double, flk_f64)

/* max_pool2d_with_indices_backward(grad_output, self, kernel_size, stride, padding,
 *                                  dilation, ceil_mode, indices) -> grad_input */
FLK_KERNEL_FN(k_max_pool2d_with_indices_backward) {
    flk_args a;
    const fl_tensor *gy, *x, *ind, *gx;
    pool_geom g;
    int ceil_mode;
    FLK_TRY(flk_args_init(&a, "max_pool2d_with_indices_backward", args, nargs, 9, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "grad_output", &gy));
    FLK_TRY(flk_get_tensor(&a, 1, "self", &x));
    FLK_TRY(flk_get_tensor(&a, 7, "indices", &ind));
    FLK_TRY(flk_get_tensor(&a, 8, "grad_input", &gx));
    FLK_TRY(parse_pool(&a, x, gy, 2, &g, &ceil_mode));
    FLK_TRY(index_strides(&a, ind, gy, &g));
    if (gy->dtype != x->dtype || gx->dtype != x->dtype)
        return flk_fail(&a, "grad_output, self and grad_input must have the same dtype");
    if (!flk_same_sizes(gx, x))
        return flk_fail(&a, "grad_input must have the input's shape");
    int b = gx->ndim == 4;
    int64_t gs[4] = {b ? gx->strides[0] : 0, gx->strides[b], gx->strides[b + 1],
                     gx->strides[b + 2]};
    /* zero grad_input */
    size_t es = flk_dtype_size(x->dtype);
    for (int64_t n = 0; n < g.N; ++n)
        for (int64_t c = 0; c < g.C; ++c) {
            char *p = (char *)flk_data(gx) + (n * gs[0] + c * gs[1]) * (int64_t)es;
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
                 ? pool_bwd_f32(&g, gs, flk_data(gy), flk_data(ind),
                                flk_data(gx), &bad)
                 : pool_bwd_f64(&g, gs, flk_data(gy), flk_data(ind),
                                flk_data(gx), &bad);
    if (!ok)
        return flk_fail(&a, "index %lld out of range for a %lldx%lld plane", (long long)bad,
                        (long long)g.H, (long long)g.W);
    return FL_SUCCESS;
}

/* ---- float16 / bfloat16 through float32 copies (util/half.h) ------------------- */

/* The registered kernels: the float32/float64 kernels above for those dtypes, on
 * float32 copies for float16 and bfloat16. */
REF_VIA_F32(k_max_pool2d_with_indices_any, "max_pool2d_with_indices",
            k_max_pool2d_with_indices, 2, -1)
FLK_REGISTER("max_pool2d_with_indices", FLK_FLOAT_TYPES, k_max_pool2d_with_indices_any);
REF_VIA_F32(k_max_pool2d_with_indices_backward_any, "max_pool2d_with_indices_backward",
            k_max_pool2d_with_indices_backward, 1, -1)
FLK_REGISTER("max_pool2d_with_indices_backward", FLK_FLOAT_TYPES,
             k_max_pool2d_with_indices_backward_any);
