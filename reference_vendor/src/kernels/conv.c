/*
 * conv.c -- convolution (1-d and 2-d, stride / padding / dilation /
 * groups, optional bias) and convolution_backward (grad_input, grad_weight,
 * grad_bias per output_mask), float32 and float64, on im2col + BLAS gemm.
 *
 * Samples go in chunks of a few (buffers of a few MiB); per group g, with
 * K = Cg*KH*KW:
 *   forward:      Y_ng[Og, OHW]  = [W_g | b_g][Og, K+1] @ [cols_n; 1][K+1, OHW]
 *                 one batched gemm per chunk (bias folded into the gemm;
 *                 written straight into Y when its H*W planes are contiguous)
 *   grad_weight:  P_n[Og, K]     = dY_ng[Og, OHW] @ cols_n^T (batched gemm),
 *                 dW_g = sum of P_n
 *   grad_input:   dcols_n[K, OHW] = W_g^T @ dY_ng (batched gemm), col2im (add)
 *   grad_bias:    sum of dY over N, H, W
 * The forward of 1x1 / stride 1 / unpadded convolutions reads the input planes
 * directly (no im2col).
 * Transposed and 3-d convolutions (and mixed dtypes) are not computed: the
 * launch-time checks (accept_convolution*) decline them so the runtime
 * runs them elsewhere instead of failing on the stream.
 */
#include <stdlib.h>

#include "fl_kernel.h"
#include "util/blas.h"
#include "util/half.h"

typedef struct geom {
    int64_t N, C, H, W, O, KH, KW, SH, SW, PH, PW, DH, DW, OH, OW, G, Cg, Og, K, OHW;
    int64_t is[4]; /* input strides (elements): N, C, H, W */
    int64_t os[4]; /* output / grad_output strides */
    size_t es;
} geom;

static fl_status get_pair(const flk_args *a, uint32_t i, const char *name, int nsp,
                          int64_t *v0, int64_t *v1) {
    const int64_t *v;
    uint32_t n;
    FLK_TRY(flk_get_int_list(a, i, name, &v, &n));
    if (n == 0 || (n != 1 && n != (uint32_t)nsp))
        return flk_fail(a, "%s must have 1 or %d entries, got %u", name, nsp, n);
    if (nsp == 1) {
        *v0 = 1; /* placeholder for the virtual H dim; overwritten by callers */
        *v1 = v[0];
    } else {
        *v0 = v[0];
        *v1 = n == 1 ? v[0] : v[1];
    }
    return FL_SUCCESS;
}

/* args: stride, padding, dilation at si, si+1, si+2; transposed at si+3,
 * groups at si+5.  yt is the output (forward) or grad_output (backward). */
static fl_status parse_geom(const flk_args *a, const fl_tensor *x, const fl_tensor *w,
                            const fl_tensor *yt, uint32_t si, geom *g) {
    if (x->dtype != FL_FLOAT32 && x->dtype != FL_FLOAT64)
        return flk_fail(a, "dtype %s is not supported (float32, float64)",
                        flk_dtype_name(x->dtype));
    if (w->dtype != x->dtype || yt->dtype != x->dtype)
        return flk_fail(a, "input, weight and output must have the same dtype (%s, %s, %s)",
                        flk_dtype_name(x->dtype), flk_dtype_name(w->dtype),
                        flk_dtype_name(yt->dtype));
    if (x->ndim != 3 && x->ndim != 4)
        return flk_fail(a, "only 1-d and 2-d convolution are supported (input has %d dims)",
                        (int)x->ndim);
    if (w->ndim != x->ndim || yt->ndim != x->ndim)
        return flk_fail(a, "input, weight and output must have the same number of dims");
    int nsp = x->ndim - 2;
    int transposed;
    int64_t groups;
    FLK_TRY(flk_get_bool(a, si + 3, "transposed", &transposed));
    FLK_TRY(flk_get_int(a, si + 5, "groups", &groups));
    if (transposed)
        return flk_fail(a, "transposed convolution is not supported by the reference chip");
    memset(g, 0, sizeof *g);
    FLK_TRY(get_pair(a, si, "stride", nsp, &g->SH, &g->SW));
    FLK_TRY(get_pair(a, si + 1, "padding", nsp, &g->PH, &g->PW));
    FLK_TRY(get_pair(a, si + 2, "dilation", nsp, &g->DH, &g->DW));
    g->es = flk_dtype_size(x->dtype);
    g->N = x->sizes[0];
    g->C = x->sizes[1];
    g->O = w->sizes[0];
    g->G = groups;
    if (nsp == 2) {
        g->H = x->sizes[2];
        g->W = x->sizes[3];
        g->KH = w->sizes[2];
        g->KW = w->sizes[3];
        for (int d = 0; d < 4; ++d) {
            g->is[d] = x->strides[d];
            g->os[d] = yt->strides[d];
        }
    } else {
        g->H = 1;
        g->W = x->sizes[2];
        g->KH = 1;
        g->KW = w->sizes[2];
        g->SH = 1;
        g->PH = 0;
        g->DH = 1;
        g->is[0] = x->strides[0];
        g->is[1] = x->strides[1];
        g->is[2] = 0;
        g->is[3] = x->strides[2];
        g->os[0] = yt->strides[0];
        g->os[1] = yt->strides[1];
        g->os[2] = 0;
        g->os[3] = yt->strides[2];
    }
    if (g->SH <= 0 || g->SW <= 0)
        return flk_fail(a, "stride must be positive");
    if (g->DH <= 0 || g->DW <= 0)
        return flk_fail(a, "dilation must be positive");
    if (g->PH < 0 || g->PW < 0)
        return flk_fail(a, "padding must be non-negative");
    if (groups <= 0)
        return flk_fail(a, "groups must be positive, got %lld", (long long)groups);
    if (g->C % groups != 0 || g->O % groups != 0 || w->sizes[1] * groups != g->C)
        return flk_fail(a, "groups=%lld does not fit input channels %lld, weight [%lld, %lld, ...]",
                        (long long)groups, (long long)g->C, (long long)w->sizes[0],
                        (long long)w->sizes[1]);
    g->Cg = g->C / groups;
    g->Og = g->O / groups;
    g->OH = (g->H + 2 * g->PH - g->DH * (g->KH - 1) - 1) / g->SH + 1;
    g->OW = (g->W + 2 * g->PW - g->DW * (g->KW - 1) - 1) / g->SW + 1;
    if (g->H + 2 * g->PH - g->DH * (g->KH - 1) - 1 < 0 ||
        g->W + 2 * g->PW - g->DW * (g->KW - 1) - 1 < 0 || g->OH <= 0 || g->OW <= 0)
        return flk_fail(a, "kernel size can't be greater than the padded input size");
    int64_t yoh = nsp == 2 ? yt->sizes[2] : 1, yow = yt->sizes[nsp == 2 ? 3 : 2];
    if (yt->sizes[0] != g->N || yt->sizes[1] != g->O || yoh != g->OH || yow != g->OW)
        return flk_fail(a, "output shape does not match the convolution (expected [%lld, %lld, "
                           "%lld, %lld])", (long long)g->N, (long long)g->O, (long long)g->OH,
                        (long long)g->OW);
    g->K = g->Cg * g->KH * g->KW;
    g->OHW = g->OH * g->OW;
    return FL_SUCCESS;
}

/* samples per chunk: the per-sample buffers of a chunk (per_sample_rows
 * rows of OH*OW elements each) stay within a few MiB (cache friendly); the
 * batched gemms of a chunk run on BLAS's threads */
#define CHUNK_BYTES ((int64_t)4 << 20)
static int64_t chunk_samples(const geom *g, int64_t per_sample_rows) {
    int64_t per = per_sample_rows * g->OHW * (int64_t)g->es;
    int64_t nb = per > 0 ? CHUNK_BYTES / per : g->N;
    if (nb < 1)
        nb = 1;
    if (nb > g->N)
        nb = g->N;
    return nb;
}

/* ---- im2col / col2im ---------------------------------------------------------- */

static inline void copy_run(char *d, const char *s, int64_t n, int64_t sstride_b, size_t es) {
    if (es == 4) {
        flk_f32 *dp = (flk_f32 *)d;
        if (sstride_b == 4) {
            const flk_f32 *sp = (const flk_f32 *)s;
            for (int64_t i = 0; i < n; ++i)
                dp[i] = sp[i];
        } else {
            for (int64_t i = 0; i < n; ++i)
                dp[i] = *(const flk_f32 *)(s + i * sstride_b);
        }
    } else {
        flk_f64 *dp = (flk_f64 *)d;
        for (int64_t i = 0; i < n; ++i)
            dp[i] = *(const flk_f64 *)(s + i * sstride_b);
    }
}

static inline void zero_run(char *d, int64_t n, size_t es) {
    if (es == 4)
        for (int64_t i = 0; i < n; ++i)
            ((flk_f32 *)d)[i] = 0.0f;
    else
        for (int64_t i = 0; i < n; ++i)
            ((flk_f64 *)d)[i] = 0.0;
}

/*
 * Stride 1 with output width == input width ("same" padding) and contiguous
 * input planes: a column row (c, i, j) is the input plane shifted by
 * delta = (i*DH - PH)*W + (j*DW - PW) elements, with zeros in the rows and
 * columns that fall into the padding.  Bulk copies / adds instead of one
 * short run per output row.
 */
static int same_plane_fast(const geom *g, const int64_t *s) {
    return g->SH == 1 && g->SW == 1 && g->OW == g->W && s[3] == 1 && (g->H == 1 || s[2] == g->W);
}

typedef struct shift {
    int64_t delta, off, oh_lo, oh_hi, q0, q1; /* valid rows, copy range in the column row */
} shift;

static shift plane_shift(const geom *g, int64_t i, int64_t j) {
    shift r;
    int64_t ih_off = i * g->DH - g->PH;
    r.off = j * g->DW - g->PW;
    r.delta = ih_off * g->W + r.off;
    r.oh_lo = ih_off < 0 ? -ih_off : 0;
    r.oh_hi = g->H - ih_off < g->OH ? g->H - ih_off : g->OH;
    if (r.oh_hi < r.oh_lo)
        r.oh_hi = r.oh_lo;
    int64_t P0 = r.oh_lo * g->OW, P1 = r.oh_hi * g->OW;
    r.q0 = P0 > -r.delta ? P0 : -r.delta;
    r.q1 = P1 < g->H * g->W - r.delta ? P1 : g->H * g->W - r.delta;
    if (r.q1 < r.q0)
        r.q1 = r.q0;
    return r;
}

/* zero the padding positions (rows outside [oh_lo, oh_hi), columns with
 * ow + off outside [0, W)) of one column row */
static void zero_padding(const geom *g, const shift *sh, char *row, int rows_too) {
    const size_t es = g->es;
    if (rows_too) {
        zero_run(row, sh->oh_lo * g->OW, es);
        zero_run(row + (size_t)(sh->oh_hi * g->OW) * es, (g->OH - sh->oh_hi) * g->OW, es);
    }
    int64_t P0 = sh->oh_lo * g->OW, P1 = sh->oh_hi * g->OW;
    zero_run(row + (size_t)P0 * es, sh->q0 - P0, es);
    zero_run(row + (size_t)sh->q1 * es, P1 - sh->q1, es);
    int64_t clo = sh->off < 0 ? -sh->off : 0;             /* columns [0, clo) */
    int64_t chi = g->W - sh->off < g->OW ? g->W - sh->off : g->OW; /* [chi, OW) */
    if (chi < 0)
        chi = 0;
    if (clo == 0 && chi == g->OW)
        return;
    for (int64_t oh = sh->oh_lo; oh < sh->oh_hi; ++oh) {
        char *r = row + (size_t)(oh * g->OW) * es;
        zero_run(r, clo < g->OW ? clo : g->OW, es);
        zero_run(r + chi * es, g->OW - chi, es);
    }
}

/* cols[K, OHW] (row stride ld elements) from sample n, group grp */
static void im2col(const geom *g, const char *x, int64_t n, int64_t grp, char *cols, int64_t ld) {
    const size_t es = g->es;
    if (same_plane_fast(g, g->is)) {
        for (int64_t c = 0; c < g->Cg; ++c) {
            const char *src = x + (n * g->is[0] + (grp * g->Cg + c) * g->is[1]) * (int64_t)es;
            for (int64_t i = 0; i < g->KH; ++i)
                for (int64_t j = 0; j < g->KW; ++j) {
                    char *row = cols + (size_t)(((c * g->KH + i) * g->KW + j) * ld) * es;
                    shift sh = plane_shift(g, i, j);
                    memcpy(row + (size_t)sh.q0 * es, src + (sh.q0 + sh.delta) * (int64_t)es,
                           (size_t)(sh.q1 - sh.q0) * es);
                    zero_padding(g, &sh, row, 1);
                }
        }
        return;
    }
    const int64_t sw_b = g->is[3] * (int64_t)es;
    for (int64_t c = 0; c < g->Cg; ++c) {
        const char *src = x + (n * g->is[0] + (grp * g->Cg + c) * g->is[1]) * (int64_t)es;
        for (int64_t i = 0; i < g->KH; ++i)
            for (int64_t j = 0; j < g->KW; ++j) {
                char *row = cols + (size_t)(((c * g->KH + i) * g->KW + j) * ld) * es;
                int64_t ow_lo = 0, ow_hi = g->OW, off = j * g->DW - g->PW;
                if (g->SW == 1) { /* iw = ow + off */
                    ow_lo = off < 0 ? -off : 0;
                    ow_hi = g->W - off;
                    if (ow_hi > g->OW)
                        ow_hi = g->OW;
                    if (ow_hi < ow_lo)
                        ow_hi = ow_lo;
                }
                for (int64_t oh = 0; oh < g->OH; ++oh) {
                    int64_t ih = oh * g->SH - g->PH + i * g->DH;
                    char *d = row + (size_t)(oh * g->OW) * es;
                    if (ih < 0 || ih >= g->H) {
                        zero_run(d, g->OW, es);
                        continue;
                    }
                    const char *s = src + ih * g->is[2] * (int64_t)es;
                    if (g->SW == 1) {
                        zero_run(d, ow_lo, es);
                        copy_run(d + ow_lo * es, s + (ow_lo + off) * sw_b, ow_hi - ow_lo, sw_b, es);
                        zero_run(d + ow_hi * es, g->OW - ow_hi, es);
                    } else {
                        for (int64_t ow = 0; ow < g->OW; ++ow) {
                            int64_t iw = ow * g->SW + off;
                            if (es == 4)
                                ((flk_f32 *)d)[ow] = (iw < 0 || iw >= g->W) ? 0.0f
                                                     : *(const flk_f32 *)(s + iw * sw_b);
                            else
                                ((flk_f64 *)d)[ow] = (iw < 0 || iw >= g->W) ? 0.0
                                                     : *(const flk_f64 *)(s + iw * sw_b);
                        }
                    }
                }
            }
    }
}

/* grad_input[n, grp] += col2im(dcols[K, OHW]); gs: grad_input element strides */
static void col2im_add(const geom *g, char *gi, const int64_t *gs, int64_t n, int64_t grp,
                       char *dcols) {
    const size_t es = g->es;
    const int64_t ld = g->OHW;
    if (same_plane_fast(g, gs)) {
        for (int64_t c = 0; c < g->Cg; ++c) {
            char *dst = gi + (n * gs[0] + (grp * g->Cg + c) * gs[1]) * (int64_t)es;
            for (int64_t i = 0; i < g->KH; ++i)
                for (int64_t j = 0; j < g->KW; ++j) {
                    char *row = dcols + (size_t)(((c * g->KH + i) * g->KW + j) * ld) * es;
                    shift sh = plane_shift(g, i, j);
                    /* padding positions must not contribute: zero them, then
                     * one contiguous add */
                    zero_padding(g, &sh, row, 0);
                    int64_t m = sh.q1 - sh.q0;
                    if (es == 4) {
                        flk_f32 *d = (flk_f32 *)dst + sh.q0 + sh.delta;
                        const float *sp = (const float *)(const void *)row + sh.q0;
                        for (int64_t k = 0; k < m; ++k)
                            d[k] += sp[k];
                    } else {
                        flk_f64 *d = (flk_f64 *)dst + sh.q0 + sh.delta;
                        const double *sp = (const double *)(const void *)row + sh.q0;
                        for (int64_t k = 0; k < m; ++k)
                            d[k] += sp[k];
                    }
                }
        }
        return;
    }
    for (int64_t c = 0; c < g->Cg; ++c) {
        char *dst = gi + (n * gs[0] + (grp * g->Cg + c) * gs[1]) * (int64_t)es;
        for (int64_t i = 0; i < g->KH; ++i)
            for (int64_t j = 0; j < g->KW; ++j) {
                const char *row = dcols + (size_t)(((c * g->KH + i) * g->KW + j) * ld) * es;
                int64_t off = j * g->DW - g->PW;
                int64_t lo = off < 0 ? -off : 0, hi = g->W - off;
                if (hi > g->OW)
                    hi = g->OW;
                for (int64_t oh = 0; oh < g->OH; ++oh) {
                    int64_t ih = oh * g->SH - g->PH + i * g->DH;
                    if (ih < 0 || ih >= g->H)
                        continue;
                    char *d = dst + ih * gs[2] * (int64_t)es;
                    const char *s = row + (size_t)(oh * g->OW) * es;
                    if (g->SW == 1 && gs[3] == 1) {
                        if (es == 4) {
                            flk_f32 *dp = (flk_f32 *)d + off;
                            const float *sp = (const float *)(const void *)s;
                            for (int64_t ow = lo; ow < hi; ++ow)
                                dp[ow] += sp[ow];
                        } else {
                            flk_f64 *dp = (flk_f64 *)d + off;
                            const double *sp = (const double *)(const void *)s;
                            for (int64_t ow = lo; ow < hi; ++ow)
                                dp[ow] += sp[ow];
                        }
                    } else {
                        for (int64_t ow = 0; ow < g->OW; ++ow) {
                            int64_t iw = ow * g->SW + off;
                            if (iw < 0 || iw >= g->W)
                                continue;
                            char *de = d + iw * gs[3] * (int64_t)es;
                            if (es == 4)
                                *(flk_f32 *)de += ((const float *)(const void *)s)[ow];
                            else
                                *(flk_f64 *)de += ((const double *)(const void *)s)[ow];
                        }
                    }
                }
            }
    }
}

/* H*W planes of a [N, C, H, W] view with element strides s are contiguous
 * rows of a gemm matrix: returns the leading dimension (channel stride), 0 if not */
static int64_t plane_ld(const geom *g, const int64_t *s, int64_t H, int64_t W, int64_t nch,
                        const void *base) {
    if ((uintptr_t)base % g->es != 0)
        return 0;
    if (!(W == 1 || s[3] == 1) || !(H == 1 || s[2] == W))
        return 0;
    if (nch > 1 && s[1] < H * W)
        return 0;
    return nch > 1 ? s[1] : H * W;
}

/* buf[Og, OHW] (row stride ld elements) <- y[n, grp*Og..] (strided) */
static void gather_y(const geom *g, const char *y, int64_t n, int64_t grp, char *buf, int64_t ld) {
    const size_t es = g->es;
    for (int64_t o = 0; o < g->Og; ++o) {
        const char *src = y + (n * g->os[0] + (grp * g->Og + o) * g->os[1]) * (int64_t)es;
        for (int64_t oh = 0; oh < g->OH; ++oh)
            copy_run(buf + (size_t)(o * ld + oh * g->OW) * es, src + oh * g->os[2] * (int64_t)es,
                     g->OW, g->os[3] * (int64_t)es, es);
    }
}

/* y[n, grp*Og..] <- buf[Og, OHW] (+ bias if not NULL) */
static void scatter_y(const geom *g, char *y, int64_t n, int64_t grp, const char *buf,
                      const char *bias) {
    const size_t es = g->es;
    for (int64_t o = 0; o < g->Og; ++o) {
        int64_t oc = grp * g->Og + o;
        char *dst = y + (n * g->os[0] + oc * g->os[1]) * (int64_t)es;
        for (int64_t oh = 0; oh < g->OH; ++oh)
            for (int64_t ow = 0; ow < g->OW; ++ow) {
                char *d = dst + (oh * g->os[2] + ow * g->os[3]) * (int64_t)es;
                size_t k = (size_t)(o * g->OHW + oh * g->OW + ow);
                if (es == 4)
                    *(flk_f32 *)d = ((const float *)(const void *)buf)[k] +
                                    (bias ? ((const float *)(const void *)bias)[oc] : 0.0f);
                else
                    *(flk_f64 *)d = ((const double *)(const void *)buf)[k] +
                                    (bias ? ((const double *)(const void *)bias)[oc] : 0.0);
            }
    }
}

/* [O, ldw] contiguous matrix: weight rows (K elements) and, if b, the bias in
 * column K */
static char *pack_weight(const fl_tensor *w, const fl_tensor *b, const geom *g, int64_t ldw) {
    char *buf = (char *)flk_alloc((size_t)(g->O * ldw) * g->es);
    if (!buf)
        return NULL;
    const char *src = (const char *)flk_data(w);
    int64_t idx[FLK_MAX_DIMS] = {0};
    int64_t total = flk_numel(w);
    for (int64_t e = 0; e < total; ++e) {
        int64_t so = 0;
        for (int d = 0; d < w->ndim; ++d)
            so += idx[d] * w->strides[d];
        int64_t o = e / g->K, k = e % g->K;
        memcpy(buf + (size_t)(o * ldw + k) * g->es, src + so * (int64_t)g->es, g->es);
        for (int d = w->ndim - 1; d >= 0; --d) {
            if (++idx[d] < w->sizes[d])
                break;
            idx[d] = 0;
        }
    }
    if (b)
        for (int64_t o = 0; o < g->O; ++o)
            memcpy(buf + (size_t)(o * ldw + g->K) * g->es,
                   (const char *)flk_data(b) + o * b->strides[0] * (int64_t)g->es, g->es);
    return buf;
}

/* 1x1, stride 1, no padding, input planes usable as gemm rows: no im2col */
static int64_t direct_cols_ld(const geom *g, const fl_tensor *x) {
    if (g->KH != 1 || g->KW != 1 || g->SH != 1 || g->SW != 1 || g->PH != 0 || g->PW != 0)
        return 0;
    return plane_ld(g, g->is, g->H, g->W, g->Cg, flk_data(x));
}

/* ---- launch-time checks (metadata only; see flk_kernel.accepts) ------------ */

/* What parse_geom would refuse for any data: dims, transposed, dtype mix.
 * Float16/bfloat16 pass here: the *_any wrappers compute them in float32. */
static fl_status conv_supported(const flk_args *a, const fl_tensor *x, const fl_tensor *w,
                                uint32_t si) {
    int transposed;
    if (x->ndim != 3 && x->ndim != 4)
        return flk_decline(a, "%d-d convolution is not supported (1-d and 2-d only)",
                        (int)x->ndim - 2);
    if (w->ndim != x->ndim)
        return flk_decline(a, "weight has %d dims, input %d", (int)w->ndim, (int)x->ndim);
    if (w->dtype != x->dtype)
        return flk_decline(a, "input and weight dtypes differ (%s, %s)", flk_dtype_name(x->dtype),
                        flk_dtype_name(w->dtype));
    FLK_TRY(flk_get_bool(a, si + 3, "transposed", &transposed));
    if (transposed)
        return flk_decline(a, "transposed convolution is not supported");
    return FL_SUCCESS;
}

/* input at xi, weight at xi + 1, stride... at si (see parse_geom) */
static fl_status accept_conv(const char *op, const fl_arg *args, uint32_t nargs,
                             flk_ctx *ctx, uint32_t expected, uint32_t xi, uint32_t si) {
    flk_args a;
    const fl_tensor *x, *w;
    FLK_TRY(flk_args_init(&a, op, args, nargs, expected, ctx));
    FLK_TRY(flk_get_tensor(&a, xi, "input", &x));
    FLK_TRY(flk_get_tensor(&a, xi + 1, "weight", &w));
    return conv_supported(&a, x, w, si);
}

FLK_KERNEL_FN(accept_convolution) {
    return accept_conv("convolution", args, nargs, ctx, 10, 0, 3);
}

FLK_KERNEL_FN(accept_convolution_backward) {
    return accept_conv("convolution_backward", args, nargs, ctx, 14, 1, 4);
}

/* ---- forward ------------------------------------------------------------------ */

/* convolution(input, weight, bias?, stride, padding, dilation, transposed,
 *             output_padding, groups) */
FLK_KERNEL_FN(k_convolution) {
    flk_args a;
    const fl_tensor *x, *w, *b, *y;
    geom g;
    FLK_TRY(flk_args_init(&a, "convolution", args, nargs, 10, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "input", &x));
    FLK_TRY(flk_get_tensor(&a, 1, "weight", &w));
    FLK_TRY(flk_get_opt_tensor(&a, 2, "bias", &b));
    FLK_TRY(flk_get_tensor(&a, 9, "out", &y));
    FLK_TRY(parse_geom(&a, x, w, y, 3, &g));
    if (b && (b->ndim != 1 || b->sizes[0] != g.O || b->dtype != x->dtype))
        return flk_fail(&a, "bias must be a 1-d %s tensor of %lld elements",
                        flk_dtype_name(x->dtype), (long long)g.O);
    if (g.N == 0 || g.O == 0)
        return FL_SUCCESS;

    const size_t es = g.es;
    const int64_t xld = direct_cols_ld(&g, x);
    const int fold_bias = b && !xld;          /* bias as an extra gemm column */
    const int64_t Kb = g.K + (fold_bias ? 1 : 0);
    const int64_t yld = plane_ld(&g, g.os, g.OH, g.OW, g.Og, flk_data(y));
    const int64_t nb = chunk_samples(&g, Kb > g.Og ? Kb : g.Og);
    const int64_t cstride = Kb * g.OHW, ostride = g.Og * g.OHW; /* per sample slot */
    fl_status st = FL_SUCCESS;
    char *wmat = pack_weight(w, fold_bias ? b : NULL, &g, Kb);
    char *cols = xld ? NULL : (char *)flk_alloc((size_t)(nb * cstride) * es);
    char *obuf = yld ? NULL : (char *)flk_alloc((size_t)(nb * ostride) * es);
    char *bias = NULL;
    if (b && !fold_bias) {
        bias = (char *)flk_alloc((size_t)g.O * es);
        if (bias)
            flk_convert(bias, b->dtype, (int64_t)es, flk_data(b), b->dtype,
                        b->strides[0] * (int64_t)es, g.O);
    }
    if (!wmat || (!xld && !cols) || (!yld && !obuf) || (b && !fold_bias && !bias)) {
        st = flk_fail(&a, "out of host memory for convolution buffers");
        goto done;
    }
    if (fold_bias) /* the ones row of every sample slot */
        for (int64_t nl = 0; nl < nb; ++nl)
            for (int64_t p = 0; p < g.OHW; ++p) {
                size_t k = (size_t)(nl * cstride + g.K * g.OHW + p);
                if (es == 4)
                    ((float *)(void *)cols)[k] = 1.0f;
                else
                    ((double *)(void *)cols)[k] = 1.0;
            }
    const char *xp = (const char *)flk_data(x);
    char *yp = (char *)flk_data(y);
    for (int64_t n0 = 0; n0 < g.N; n0 += nb) {
        const int64_t nc = g.N - n0 < nb ? g.N - n0 : nb;
        for (int64_t grp = 0; grp < g.G; ++grp) {
            const char *B;
            int64_t ldb, sb;
            if (xld) {
                B = xp + (n0 * g.is[0] + grp * g.Cg * g.is[1]) * (int64_t)es;
                ldb = xld;
                sb = g.is[0];
            } else {
                for (int64_t nl = 0; nl < nc; ++nl)
                    im2col(&g, xp, n0 + nl, grp, cols + (size_t)(nl * cstride) * es, g.OHW);
                B = cols;
                ldb = g.OHW;
                sb = cstride;
            }
            char *C = yld ? yp + (n0 * g.os[0] + grp * g.Og * g.os[1]) * (int64_t)es : obuf;
            const int64_t ldc = yld ? yld : g.OHW, sc = yld ? g.os[0] : ostride;
            if (Kb > 0) {
                st = ref_gemm_batch(&a, x->dtype, 0, 0, g.Og, g.OHW, Kb, 1.0,
                                    wmat + (size_t)(grp * g.Og * Kb) * es, Kb, 0, B, ldb, sb, 0.0,
                                    C, ldc, sc, nc);
                if (st != FL_SUCCESS)
                    goto done;
            } else {
                for (int64_t nl = 0; nl < nc; ++nl)
                    for (int64_t o = 0; o < g.Og; ++o)
                        zero_run(C + (size_t)(nl * sc + o * ldc) * es, g.OHW, es);
            }
            for (int64_t nl = 0; nl < nc; ++nl) {
                if (!yld) {
                    scatter_y(&g, yp, n0 + nl, grp, obuf + (size_t)(nl * ostride) * es, bias);
                } else if (bias) {
                    for (int64_t o = 0; o < g.Og; ++o) {
                        char *r = C + (size_t)(nl * sc + o * ldc) * es;
                        if (es == 4) {
                            const float bv = ((const float *)(const void *)bias)[grp * g.Og + o];
                            for (int64_t p = 0; p < g.OHW; ++p)
                                ((flk_f32 *)r)[p] += bv;
                        } else {
                            const double bv = ((const double *)(const void *)bias)[grp * g.Og + o];
                            for (int64_t p = 0; p < g.OHW; ++p)
                                ((flk_f64 *)r)[p] += bv;
                        }
                    }
                }
            }
        }
    }
done:
    flk_free(wmat);
    flk_free(cols);
    flk_free(obuf);
    flk_free(bias);
    return st;
}

/* ---- backward ------------------------------------------------------------------- */

static double sum_run(const char *p, int64_t n, int64_t stride_b, size_t es) {
    if (es == 4 && stride_b == 4) {
        /* 16 float lanes (vectorisable), folded into double per run */
        const flk_f32 *x = (const flk_f32 *)p;
        float acc[16] = {0};
        int64_t i = 0;
        for (; i + 16 <= n; i += 16)
            for (int l = 0; l < 16; ++l)
                acc[l] += x[i + l];
        double s = 0.0;
        for (int l = 0; l < 16; ++l)
            s += acc[l];
        for (; i < n; ++i)
            s += x[i];
        return s;
    }
    double s = 0.0;
    for (int64_t i = 0; i < n; ++i)
        s += es == 4 ? (double)*(const flk_f32 *)(p + i * stride_b) : *(const flk_f64 *)(p + i * stride_b);
    return s;
}

/* convolution_backward(grad_output, input, weight, bias_sizes?, stride, padding,
 *   dilation, transposed, output_padding, groups, output_mask)
 *   -> (grad_input, grad_weight, grad_bias) */
FLK_KERNEL_FN(k_convolution_backward) {
    flk_args a;
    const fl_tensor *gy, *x, *w, *gx = NULL, *gw = NULL, *gb = NULL;
    const int64_t *mask;
    uint32_t nmask;
    geom g;
    FLK_TRY(flk_args_init(&a, "convolution_backward", args, nargs, 14, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "grad_output", &gy));
    FLK_TRY(flk_get_tensor(&a, 1, "input", &x));
    FLK_TRY(flk_get_tensor(&a, 2, "weight", &w));
    FLK_TRY(flk_get_bool_list(&a, 10, "output_mask", &mask, &nmask));
    if (nmask != 3)
        return flk_fail(&a, "output_mask must have 3 entries, got %u", nmask);
    if (mask[0])
        FLK_TRY(flk_get_tensor(&a, 11, "grad_input", &gx));
    if (mask[1])
        FLK_TRY(flk_get_tensor(&a, 12, "grad_weight", &gw));
    if (mask[2])
        FLK_TRY(flk_get_tensor(&a, 13, "grad_bias", &gb));
    FLK_TRY(parse_geom(&a, x, w, gy, 4, &g));
    if (gx && (!flk_same_sizes(gx, x) || gx->dtype != x->dtype))
        return flk_fail(&a, "grad_input must have the input's shape and dtype");
    if (gw && (!flk_same_sizes(gw, w) || gw->dtype != x->dtype))
        return flk_fail(&a, "grad_weight must have the weight's shape and dtype");
    if (gb && (gb->ndim != 1 || gb->sizes[0] != g.O || !flk_is_floating(gb->dtype)))
        return flk_fail(&a, "grad_bias must be a 1-d floating tensor of %lld elements",
                        (long long)g.O);
    const size_t es = g.es;
    const char *gyp = (const char *)flk_data(gy);

    /* grad_bias = sum of grad_output over N, H, W */
    if (gb) {
        int plane = g.os[3] == 1 && (g.OH == 1 || g.os[2] == g.OW);
        for (int64_t o = 0; o < g.O; ++o) {
            double s = 0.0;
            for (int64_t n = 0; n < g.N; ++n) {
                const char *p = gyp + (n * g.os[0] + o * g.os[1]) * (int64_t)es;
                if (plane)
                    s += sum_run(p, g.OHW, (int64_t)es, es);
                else
                    for (int64_t oh = 0; oh < g.OH; ++oh)
                        s += sum_run(p + oh * g.os[2] * (int64_t)es, g.OW, g.os[3] * (int64_t)es, es);
            }
            flk_store_f64((char *)flk_data(gb) +
                              o * gb->strides[0] * (int64_t)flk_dtype_size(gb->dtype),
                          gb->dtype, s);
        }
    }
    if (!gx && !gw)
        return FL_SUCCESS;

    int64_t gxs[4] = {0, 0, 0, 0};
    if (gx) {
        if (x->ndim == 4) {
            for (int d = 0; d < 4; ++d)
                gxs[d] = gx->strides[d];
        } else {
            gxs[0] = gx->strides[0];
            gxs[1] = gx->strides[1];
            gxs[3] = gx->strides[2];
        }
        /* zero grad_input */
        char *p = (char *)flk_data(gx);
        for (int64_t n = 0; n < g.N; ++n)
            for (int64_t c = 0; c < g.C; ++c) {
                char *q = p + (n * gxs[0] + c * gxs[1]) * (int64_t)es;
                if (gxs[3] == 1 && (g.H == 1 || gxs[2] == g.W)) {
                    zero_run(q, g.H * g.W, es);
                    continue;
                }
                for (int64_t h = 0; h < g.H; ++h)
                    for (int64_t ww = 0; ww < g.W; ++ww)
                        memset(q + (h * gxs[2] + ww * gxs[3]) * (int64_t)es, 0, es);
            }
    }

    fl_status st = FL_SUCCESS;
    /* per chunk of nb samples, one slot per sample: cols [K, OHW], dcols
     * [K, OHW], partial grad_weight [Og, K] (batched gemms, summed after),
     * and grad_output [Og, OHW] when its planes can't be read in place */
    const int64_t yld = plane_ld(&g, g.os, g.OH, g.OW, g.Og, gyp);
    const int64_t nb = chunk_samples(&g, g.K > g.Og ? g.K : g.Og);
    const int64_t cstride = g.K * g.OHW, ystride = g.Og * g.OHW, pstride = g.Og * g.K;
    char *wmat = NULL, *cols = NULL, *ybuf = NULL, *part = NULL, *gwmat = NULL, *gwown = NULL;
    if (gx && g.K > 0) {
        wmat = pack_weight(w, NULL, &g, g.K);
        if (!wmat) {
            st = flk_fail(&a, "out of host memory for the weight");
            goto done;
        }
    }
    cols = (char *)flk_alloc((size_t)(nb * cstride) * es); /* im2col, then dcols */
    ybuf = yld ? NULL : (char *)flk_alloc((size_t)(nb * ystride) * es);
    part = gw ? (char *)flk_alloc((size_t)(nb * pstride) * es) : NULL;
    if (!cols || (!yld && !ybuf) || (gw && !part)) {
        st = flk_fail(&a, "out of host memory for convolution buffers");
        goto done;
    }
    if (gw) {
        if (flk_is_contiguous(gw) && (uintptr_t)flk_data(gw) % es == 0) {
            gwmat = (char *)flk_data(gw);
        } else {
            gwown = (char *)flk_alloc((size_t)(g.O * g.K) * es);
            if (!gwown) {
                st = flk_fail(&a, "out of host memory for grad_weight");
                goto done;
            }
            gwmat = gwown;
        }
        zero_run(gwmat, g.O * g.K, es);
    }
    const char *xp = (const char *)flk_data(x);
    for (int64_t n0 = 0; n0 < g.N && g.K > 0; n0 += nb) {
        const int64_t nc = g.N - n0 < nb ? g.N - n0 : nb;
        for (int64_t grp = 0; grp < g.G; ++grp) {
            const char *Y;
            int64_t ldy, sy;
            if (yld) {
                Y = gyp + (n0 * g.os[0] + grp * g.Og * g.os[1]) * (int64_t)es;
                ldy = yld;
                sy = g.os[0];
            } else {
                for (int64_t nl = 0; nl < nc; ++nl)
                    gather_y(&g, gyp, n0 + nl, grp, ybuf + (size_t)(nl * ystride) * es, g.OHW);
                Y = ybuf;
                ldy = g.OHW;
                sy = ystride;
            }
            if (gw) {
                for (int64_t nl = 0; nl < nc; ++nl)
                    im2col(&g, xp, n0 + nl, grp, cols + (size_t)(nl * cstride) * es, g.OHW);
                st = ref_gemm_batch(&a, x->dtype, 0, 1, g.Og, g.K, g.OHW, 1.0, Y, ldy, sy, cols,
                                    g.OHW, cstride, 0.0, part, g.K, pstride, nc);
                if (st != FL_SUCCESS)
                    goto done;
                /* add the per-sample partials into grad_weight, in sample order */
                char *dst = gwmat + (size_t)(grp * g.Og * g.K) * es;
                for (int64_t nl = 0; nl < nc; ++nl) {
                    const char *src = part + (size_t)(nl * pstride) * es;
                    if (es == 4)
                        for (int64_t e = 0; e < pstride; ++e)
                            ((flk_f32 *)dst)[e] += ((const float *)(const void *)src)[e];
                    else
                        for (int64_t e = 0; e < pstride; ++e)
                            ((flk_f64 *)dst)[e] += ((const double *)(const void *)src)[e];
                }
            }
            if (gx) {
                st = ref_gemm_batch(&a, x->dtype, 1, 0, g.K, g.OHW, g.Og, 1.0,
                                    wmat + (size_t)(grp * g.Og * g.K) * es, g.K, 0, Y, ldy, sy,
                                    0.0, cols, g.OHW, cstride, nc);
                if (st != FL_SUCCESS)
                    goto done;
                for (int64_t nl = 0; nl < nc; ++nl)
                    col2im_add(&g, (char *)flk_data(gx), gxs, n0 + nl, grp,
                               cols + (size_t)(nl * cstride) * es);
            }
        }
    }
    if (gwown) {
        /* copy the contiguous [O, K] result into grad_weight's layout */
        int64_t idx[FLK_MAX_DIMS] = {0};
        int64_t total = flk_numel(gw);
        char *dst = (char *)flk_data(gw);
        for (int64_t e = 0; e < total; ++e) {
            int64_t off = 0;
            for (int d = 0; d < gw->ndim; ++d)
                off += idx[d] * gw->strides[d];
            memcpy(dst + off * (int64_t)es, gwown + (size_t)e * es, es);
            for (int d = gw->ndim - 1; d >= 0; --d) {
                if (++idx[d] < gw->sizes[d])
                    break;
                idx[d] = 0;
            }
        }
    }
done:
    flk_free(wmat);
    flk_free(gwown);
    flk_free(cols);
    flk_free(part);
    flk_free(ybuf);
    return st;
}

/* ---- float16 / bfloat16 through float32 copies (util/half.h) ------------------- */

/* The registered kernels: the float32/float64 kernels above for those dtypes, on
 * float32 copies for float16 and bfloat16. */
REF_VIA_F32(k_convolution_any, "convolution", k_convolution, 1, -1)
FLK_REGISTER_ENTRY("convolution", FLK_FLOAT_TYPES, FL_VARIANT_PRECISE, k_convolution_any,
                   accept_convolution);
REF_VIA_F32(k_convolution_backward_any, "convolution_backward", k_convolution_backward, 3, -1)
FLK_REGISTER_ENTRY("convolution_backward", FLK_FLOAT_TYPES, FL_VARIANT_PRECISE,
                   k_convolution_backward_any, accept_convolution_backward);
