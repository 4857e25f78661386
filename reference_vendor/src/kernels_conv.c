/*
 * kernels_conv.c -- convolution (1-d and 2-d, stride / padding / dilation /
 * groups, optional bias) and convolution_backward (grad_input, grad_weight,
 * grad_bias per output_mask), float32 and float64, on im2col + BLAS gemm.
 *
 * The batch is processed in chunks of nb samples: im2col builds a
 * [Cg*KH*KW, nb*OH*OW] column matrix per group so that one large gemm does
 * a whole chunk (better BLAS efficiency than one small gemm per sample).
 *   forward:      out_g[Og, nb*OHW]   = W_g[Og, K] @ cols[K, nb*OHW]
 *   grad_weight:  dW_g[Og, K]        += dY_g[Og, nb*OHW] @ cols^T
 *   grad_input:   dcols[K, nb*OHW]    = W_g^T @ dY_g, then col2im (add)
 * Transposed convolution is not supported.
 */
#include <stdlib.h>

#include "kernel_util.h"

#define COLS_BUDGET_ELEMS (8ll << 20) /* per column buffer: 32 MiB of float32 */

typedef struct geom {
    int64_t N, C, H, W, O, KH, KW, SH, SW, PH, PW, DH, DW, OH, OW, G, Cg, Og, K, OHW;
    int64_t is[4]; /* input strides (elements): N, C, H, W */
    int64_t os[4]; /* output / grad_output strides */
    size_t es;
} geom;

static fl_status get_pair(const ref_args *a, uint32_t i, const char *name, int nsp,
                          int64_t *v0, int64_t *v1) {
    const int64_t *v;
    uint32_t n;
    REF_TRY(ref_get_int_list(a, i, name, &v, &n));
    if (n == 0 || (n != 1 && n != (uint32_t)nsp))
        return ref_fail(a, "%s must have 1 or %d entries, got %u", name, nsp, n);
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
static fl_status parse_geom(const ref_args *a, const fl_tensor *x, const fl_tensor *w,
                            const fl_tensor *yt, uint32_t si, geom *g) {
    if (x->dtype != FL_FLOAT32 && x->dtype != FL_FLOAT64)
        return ref_fail(a, "dtype %s is not supported (float32, float64)",
                        ref_dtype_name(x->dtype));
    if (w->dtype != x->dtype || yt->dtype != x->dtype)
        return ref_fail(a, "input, weight and output must have the same dtype (%s, %s, %s)",
                        ref_dtype_name(x->dtype), ref_dtype_name(w->dtype),
                        ref_dtype_name(yt->dtype));
    if (x->ndim != 3 && x->ndim != 4)
        return ref_fail(a, "only 1-d and 2-d convolution are supported (input has %d dims)",
                        (int)x->ndim);
    if (w->ndim != x->ndim || yt->ndim != x->ndim)
        return ref_fail(a, "input, weight and output must have the same number of dims");
    int nsp = x->ndim - 2;
    int transposed;
    int64_t groups;
    REF_TRY(ref_get_bool(a, si + 3, "transposed", &transposed));
    REF_TRY(ref_get_int(a, si + 5, "groups", &groups));
    if (transposed)
        return ref_fail(a, "transposed convolution is not supported by the reference chip");
    memset(g, 0, sizeof *g);
    REF_TRY(get_pair(a, si, "stride", nsp, &g->SH, &g->SW));
    REF_TRY(get_pair(a, si + 1, "padding", nsp, &g->PH, &g->PW));
    REF_TRY(get_pair(a, si + 2, "dilation", nsp, &g->DH, &g->DW));
    g->es = ref_dtype_size(x->dtype);
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
        return ref_fail(a, "stride must be positive");
    if (g->DH <= 0 || g->DW <= 0)
        return ref_fail(a, "dilation must be positive");
    if (g->PH < 0 || g->PW < 0)
        return ref_fail(a, "padding must be non-negative");
    if (groups <= 0)
        return ref_fail(a, "groups must be positive, got %lld", (long long)groups);
    if (g->C % groups != 0 || g->O % groups != 0 || w->sizes[1] * groups != g->C)
        return ref_fail(a, "groups=%lld does not fit input channels %lld, weight [%lld, %lld, ...]",
                        (long long)groups, (long long)g->C, (long long)w->sizes[0],
                        (long long)w->sizes[1]);
    g->Cg = g->C / groups;
    g->Og = g->O / groups;
    g->OH = (g->H + 2 * g->PH - g->DH * (g->KH - 1) - 1) / g->SH + 1;
    g->OW = (g->W + 2 * g->PW - g->DW * (g->KW - 1) - 1) / g->SW + 1;
    if (g->H + 2 * g->PH - g->DH * (g->KH - 1) - 1 < 0 ||
        g->W + 2 * g->PW - g->DW * (g->KW - 1) - 1 < 0 || g->OH <= 0 || g->OW <= 0)
        return ref_fail(a, "kernel size can't be greater than the padded input size");
    int64_t yoh = nsp == 2 ? yt->sizes[2] : 1, yow = yt->sizes[nsp == 2 ? 3 : 2];
    if (yt->sizes[0] != g->N || yt->sizes[1] != g->O || yoh != g->OH || yow != g->OW)
        return ref_fail(a, "output shape does not match the convolution (expected [%lld, %lld, "
                           "%lld, %lld])", (long long)g->N, (long long)g->O, (long long)g->OH,
                        (long long)g->OW);
    g->K = g->Cg * g->KH * g->KW;
    g->OHW = g->OH * g->OW;
    return FL_SUCCESS;
}

static int64_t chunk_size(const geom *g) {
    int64_t per = g->K * g->OHW;
    if (g->Og * g->OHW > per)
        per = g->Og * g->OHW;
    int64_t nb = per > 0 ? COLS_BUDGET_ELEMS / per : g->N;
    if (nb < 1)
        nb = 1;
    if (nb > g->N)
        nb = g->N;
    return nb;
}

/* ---- im2col / col2im ---------------------------------------------------------- */

static inline void copy_elems(char *d, const char *s, int64_t n, int64_t sstride_b, size_t es) {
    if (sstride_b == (int64_t)es) {
        memcpy(d, s, (size_t)n * es);
    } else if (es == 4) {
        for (int64_t i = 0; i < n; ++i)
            ((ref_i32 *)d)[i] = *(const ref_i32 *)(s + i * sstride_b);
    } else {
        for (int64_t i = 0; i < n; ++i)
            ((ref_i64 *)d)[i] = *(const ref_i64 *)(s + i * sstride_b);
    }
}

/* cols[K, nb*OHW] (contiguous) from input samples n0..n0+nb-1, group grp */
static void im2col(const geom *g, const char *x, int64_t n0, int64_t nb, int64_t grp, char *cols) {
    const size_t es = g->es;
    const int64_t ld = nb * g->OHW;
    for (int64_t c = 0; c < g->Cg; ++c)
        for (int64_t i = 0; i < g->KH; ++i)
            for (int64_t j = 0; j < g->KW; ++j) {
                char *row = cols + (size_t)(((c * g->KH + i) * g->KW + j) * ld) * es;
                int64_t ow_lo = 0, ow_hi = g->OW;
                if (g->SW == 1) {
                    int64_t off = j * g->DW - g->PW; /* iw = ow + off */
                    ow_lo = off < 0 ? -off : 0;
                    ow_hi = g->W - off;
                    if (ow_hi > g->OW)
                        ow_hi = g->OW;
                    if (ow_hi < ow_lo)
                        ow_hi = ow_lo;
                }
                for (int64_t nl = 0; nl < nb; ++nl) {
                    const char *src = x + ((n0 + nl) * g->is[0] + (grp * g->Cg + c) * g->is[1]) *
                                              (int64_t)es;
                    char *dst = row + (size_t)(nl * g->OHW) * es;
                    for (int64_t oh = 0; oh < g->OH; ++oh) {
                        int64_t ih = oh * g->SH - g->PH + i * g->DH;
                        char *d = dst + (size_t)(oh * g->OW) * es;
                        if (ih < 0 || ih >= g->H) {
                            memset(d, 0, (size_t)g->OW * es);
                            continue;
                        }
                        const char *s = src + ih * g->is[2] * (int64_t)es;
                        if (g->SW == 1) {
                            int64_t off = j * g->DW - g->PW;
                            if (ow_lo > 0)
                                memset(d, 0, (size_t)ow_lo * es);
                            if (ow_hi > ow_lo)
                                copy_elems(d + ow_lo * es, s + (ow_lo + off) * g->is[3] * (int64_t)es,
                                           ow_hi - ow_lo, g->is[3] * (int64_t)es, es);
                            if (ow_hi < g->OW)
                                memset(d + ow_hi * es, 0, (size_t)(g->OW - ow_hi) * es);
                        } else {
                            for (int64_t ow = 0; ow < g->OW; ++ow) {
                                int64_t iw = ow * g->SW - g->PW + j * g->DW;
                                char *de = d + ow * es;
                                if (iw < 0 || iw >= g->W)
                                    memset(de, 0, es);
                                else
                                    memcpy(de, s + iw * g->is[3] * (int64_t)es, es);
                            }
                        }
                    }
                }
            }
}

/* grad_input[n0.., grp] += col2im(dcols[K, nb*OHW]); gs: grad_input strides */
static void col2im_add(const geom *g, char *gi, const int64_t *gs, int64_t n0, int64_t nb,
                       int64_t grp, const char *dcols) {
    const size_t es = g->es;
    const int64_t ld = nb * g->OHW;
    for (int64_t c = 0; c < g->Cg; ++c)
        for (int64_t i = 0; i < g->KH; ++i)
            for (int64_t j = 0; j < g->KW; ++j) {
                const char *row = dcols + (size_t)(((c * g->KH + i) * g->KW + j) * ld) * es;
                for (int64_t nl = 0; nl < nb; ++nl) {
                    char *dst = gi + ((n0 + nl) * gs[0] + (grp * g->Cg + c) * gs[1]) * (int64_t)es;
                    const char *src = row + (size_t)(nl * g->OHW) * es;
                    for (int64_t oh = 0; oh < g->OH; ++oh) {
                        int64_t ih = oh * g->SH - g->PH + i * g->DH;
                        if (ih < 0 || ih >= g->H)
                            continue;
                        char *d = dst + ih * gs[2] * (int64_t)es;
                        const char *s = src + (size_t)(oh * g->OW) * es;
                        if (g->SW == 1 && gs[3] == 1) {
                            int64_t off = j * g->DW - g->PW;
                            int64_t lo = off < 0 ? -off : 0, hi = g->W - off;
                            if (hi > g->OW)
                                hi = g->OW;
                            if (es == 4) {
                                ref_f32 *dp = (ref_f32 *)d + off;
                                const float *sp = (const float *)(const void *)s;
                                for (int64_t ow = lo; ow < hi; ++ow)
                                    dp[ow] += sp[ow];
                            } else {
                                ref_f64 *dp = (ref_f64 *)d + off;
                                const double *sp = (const double *)(const void *)s;
                                for (int64_t ow = lo; ow < hi; ++ow)
                                    dp[ow] += sp[ow];
                            }
                        } else {
                            for (int64_t ow = 0; ow < g->OW; ++ow) {
                                int64_t iw = ow * g->SW - g->PW + j * g->DW;
                                if (iw < 0 || iw >= g->W)
                                    continue;
                                char *de = d + iw * gs[3] * (int64_t)es;
                                if (es == 4)
                                    *(ref_f32 *)de += ((const float *)(const void *)s)[ow];
                                else
                                    *(ref_f64 *)de += ((const double *)(const void *)s)[ow];
                            }
                        }
                    }
                }
            }
}

/* buf[Og, nb*OHW] <- y[n0.., grp*Og..] (strided) */
static void gather_y(const geom *g, const char *y, int64_t n0, int64_t nb, int64_t grp, char *buf) {
    const size_t es = g->es;
    const int64_t ld = nb * g->OHW;
    for (int64_t o = 0; o < g->Og; ++o)
        for (int64_t nl = 0; nl < nb; ++nl) {
            const char *src =
                y + ((n0 + nl) * g->os[0] + (grp * g->Og + o) * g->os[1]) * (int64_t)es;
            char *dst = buf + (size_t)(o * ld + nl * g->OHW) * es;
            if (g->os[3] == 1 && (g->OH == 1 || g->os[2] == g->OW)) {
                memcpy(dst, src, (size_t)g->OHW * es);
            } else {
                for (int64_t oh = 0; oh < g->OH; ++oh)
                    copy_elems(dst + (size_t)(oh * g->OW) * es, src + oh * g->os[2] * (int64_t)es,
                               g->OW, g->os[3] * (int64_t)es, es);
            }
        }
}

/* y[n0.., grp*Og..] <- buf[Og, nb*OHW] + bias */
static void scatter_y(const geom *g, char *y, int64_t n0, int64_t nb, int64_t grp, const char *buf,
                      const char *bias /* contiguous, same dtype, or NULL */) {
    const size_t es = g->es;
    const int64_t ld = nb * g->OHW;
    for (int64_t o = 0; o < g->Og; ++o) {
        int64_t oc = grp * g->Og + o;
        for (int64_t nl = 0; nl < nb; ++nl) {
            char *dst = y + ((n0 + nl) * g->os[0] + oc * g->os[1]) * (int64_t)es;
            const char *src = buf + (size_t)(o * ld + nl * g->OHW) * es;
            int plane = g->os[3] == 1 && (g->OH == 1 || g->os[2] == g->OW);
            for (int64_t oh = 0; oh < g->OH; ++oh) {
                char *d = dst + oh * g->os[2] * (int64_t)es;
                const char *s = src + (size_t)(oh * g->OW) * es;
                int64_t n = plane ? g->OHW : g->OW, ds = plane ? 1 : g->os[3];
                if (es == 4) {
                    const float b = bias ? ((const float *)(const void *)bias)[oc] : 0.0f;
                    const float *sp = (const float *)(const void *)s;
                    if (ds == 1)
                        for (int64_t k = 0; k < n; ++k)
                            ((ref_f32 *)d)[k] = sp[k] + b;
                    else
                        for (int64_t k = 0; k < n; ++k)
                            *(ref_f32 *)(d + k * ds * 4) = sp[k] + b;
                } else {
                    const double b = bias ? ((const double *)(const void *)bias)[oc] : 0.0;
                    const double *sp = (const double *)(const void *)s;
                    if (ds == 1)
                        for (int64_t k = 0; k < n; ++k)
                            ((ref_f64 *)d)[k] = sp[k] + b;
                    else
                        for (int64_t k = 0; k < n; ++k)
                            *(ref_f64 *)(d + k * ds * 8) = sp[k] + b;
                }
                if (plane)
                    break;
            }
        }
    }
}

/* weight as a contiguous aligned [O, K] matrix: the tensor itself or a copy */
static fl_status weight_matrix(const ref_args *a, const fl_tensor *w, const geom *g, char **mat,
                               char **owned) {
    *owned = NULL;
    if (ref_is_contiguous(w) && (uintptr_t)ref_tensor_data(w) % g->es == 0) {
        *mat = (char *)ref_tensor_data(w);
        return FL_SUCCESS;
    }
    char *buf = (char *)ref_alloc((size_t)(g->O * g->K) * g->es);
    if (!buf)
        return ref_fail(a, "out of host memory for the weight");
    int64_t strides[2][REF_MAX_DIMS];
    int64_t run = (int64_t)g->es;
    for (int d = w->ndim - 1; d >= 0; --d) {
        strides[0][d] = run;
        strides[1][d] = w->strides[d] * (int64_t)g->es;
        run *= w->sizes[d];
    }
    /* reuse ref_convert row by row through a tiny iterator */
    int64_t idx[REF_MAX_DIMS] = {0};
    int64_t total = ref_numel(w);
    const char *src = (const char *)ref_tensor_data(w);
    for (int64_t e = 0; e < total; ++e) {
        int64_t so = 0, doff = 0;
        for (int d = 0; d < w->ndim; ++d) {
            so += idx[d] * strides[1][d];
            doff += idx[d] * strides[0][d];
        }
        memcpy(buf + doff, src + so, g->es);
        for (int d = w->ndim - 1; d >= 0; --d) {
            if (++idx[d] < w->sizes[d])
                break;
            idx[d] = 0;
        }
    }
    *mat = buf;
    *owned = buf;
    return FL_SUCCESS;
}

/* ---- forward ------------------------------------------------------------------ */

/* convolution(input, weight, bias?, stride, padding, dilation, transposed,
 *             output_padding, groups) */
REF_KERNEL(ref_k_convolution) {
    ref_args a;
    const fl_tensor *x, *w, *b, *y;
    geom g;
    REF_TRY(ref_args_init(&a, "convolution", args, nargs, 10, ctx));
    REF_TRY(ref_get_tensor(&a, 0, "input", &x));
    REF_TRY(ref_get_tensor(&a, 1, "weight", &w));
    REF_TRY(ref_get_opt_tensor(&a, 2, "bias", &b));
    REF_TRY(ref_get_tensor(&a, 9, "out", &y));
    REF_TRY(parse_geom(&a, x, w, y, 3, &g));
    if (b && (b->ndim != 1 || b->sizes[0] != g.O || b->dtype != x->dtype))
        return ref_fail(&a, "bias must be a 1-d %s tensor of %lld elements",
                        ref_dtype_name(x->dtype), (long long)g.O);
    if (g.N == 0 || g.O == 0)
        return FL_SUCCESS;

    fl_status st = FL_SUCCESS;
    int64_t nb = chunk_size(&g);
    char *wmat = NULL, *wown = NULL;
    char *bias = NULL, *cols = NULL, *obuf = NULL;
    REF_TRY(weight_matrix(&a, w, &g, &wmat, &wown));
    if (b) {
        bias = (char *)ref_alloc((size_t)g.O * g.es);
        if (bias)
            ref_convert(bias, b->dtype, (int64_t)g.es, ref_tensor_data(b), b->dtype,
                        b->strides[0] * (int64_t)g.es, g.O);
    }
    cols = (char *)ref_alloc((size_t)(g.K * nb * g.OHW) * g.es);
    obuf = (char *)ref_alloc((size_t)(g.Og * nb * g.OHW) * g.es);
    if ((b && !bias) || !cols || !obuf) {
        st = ref_fail(&a, "out of host memory for convolution buffers");
        goto done;
    }
    for (int64_t n0 = 0; n0 < g.N; n0 += nb) {
        int64_t nc = g.N - n0 < nb ? g.N - n0 : nb;
        for (int64_t grp = 0; grp < g.G; ++grp) {
            if (g.K > 0) {
                im2col(&g, (const char *)ref_tensor_data(x), n0, nc, grp, cols);
                st = ref_gemm(&a, x->dtype, 0, 0, g.Og, nc * g.OHW, g.K, 1.0,
                              wmat + (size_t)(grp * g.Og * g.K) * g.es, g.K, cols, nc * g.OHW, 0.0,
                              obuf, nc * g.OHW);
                if (st != FL_SUCCESS)
                    goto done;
            } else {
                memset(obuf, 0, (size_t)(g.Og * nc * g.OHW) * g.es);
            }
            scatter_y(&g, (char *)ref_tensor_data(y), n0, nc, grp, obuf, bias);
        }
    }
done:
    ref_free(wown);
    ref_free(bias);
    ref_free(cols);
    ref_free(obuf);
    return st;
}

/* ---- backward ------------------------------------------------------------------- */

static void zero_strided4(const geom *g, char *p, const int64_t *s, int64_t d1) {
    /* zero a [N, d1, H, W] tensor with element strides s */
    const size_t es = g->es;
    for (int64_t n = 0; n < g->N; ++n)
        for (int64_t c = 0; c < d1; ++c) {
            char *q = p + (n * s[0] + c * s[1]) * (int64_t)es;
            if (s[3] == 1 && (g->H == 1 || s[2] == g->W)) {
                memset(q, 0, (size_t)(g->H * g->W) * es);
                continue;
            }
            for (int64_t h = 0; h < g->H; ++h)
                for (int64_t w = 0; w < g->W; ++w)
                    memset(q + (h * s[2] + w * s[3]) * (int64_t)es, 0, es);
        }
}

/* convolution_backward(grad_output, input, weight, bias_sizes?, stride, padding,
 *   dilation, transposed, output_padding, groups, output_mask)
 *   -> (grad_input, grad_weight, grad_bias) */
REF_KERNEL(ref_k_convolution_backward) {
    ref_args a;
    const fl_tensor *gy, *x, *w, *gx = NULL, *gw = NULL, *gb = NULL;
    const int64_t *mask;
    uint32_t nmask;
    geom g;
    REF_TRY(ref_args_init(&a, "convolution_backward", args, nargs, 14, ctx));
    REF_TRY(ref_get_tensor(&a, 0, "grad_output", &gy));
    REF_TRY(ref_get_tensor(&a, 1, "input", &x));
    REF_TRY(ref_get_tensor(&a, 2, "weight", &w));
    REF_TRY(ref_get_bool_list(&a, 10, "output_mask", &mask, &nmask));
    if (nmask != 3)
        return ref_fail(&a, "output_mask must have 3 entries, got %u", nmask);
    if (mask[0])
        REF_TRY(ref_get_tensor(&a, 11, "grad_input", &gx));
    else
        REF_TRY(ref_get_opt_tensor(&a, 11, "grad_input", &gx));
    if (mask[1])
        REF_TRY(ref_get_tensor(&a, 12, "grad_weight", &gw));
    else
        REF_TRY(ref_get_opt_tensor(&a, 12, "grad_weight", &gw));
    if (mask[2])
        REF_TRY(ref_get_tensor(&a, 13, "grad_bias", &gb));
    else
        REF_TRY(ref_get_opt_tensor(&a, 13, "grad_bias", &gb));
    if (!mask[0])
        gx = NULL;
    if (!mask[1])
        gw = NULL;
    if (!mask[2])
        gb = NULL;
    REF_TRY(parse_geom(&a, x, w, gy, 4, &g));
    if (gx && (!ref_same_sizes(gx, x) || gx->dtype != x->dtype))
        return ref_fail(&a, "grad_input must have the input's shape and dtype");
    if (gw && (!ref_same_sizes(gw, w) || gw->dtype != x->dtype))
        return ref_fail(&a, "grad_weight must have the weight's shape and dtype");
    if (gb && (gb->ndim != 1 || gb->sizes[0] != g.O))
        return ref_fail(&a, "grad_bias must be a 1-d tensor of %lld elements", (long long)g.O);
    const size_t es = g.es;

    /* grad_bias = sum of grad_output over N, H, W */
    if (gb) {
        for (int64_t o = 0; o < g.O; ++o) {
            double s = 0.0;
            for (int64_t n = 0; n < g.N; ++n) {
                const char *p = (const char *)ref_tensor_data(gy) + (n * g.os[0] + o * g.os[1]) * (int64_t)es;
                for (int64_t oh = 0; oh < g.OH; ++oh) {
                    const char *q = p + oh * g.os[2] * (int64_t)es;
                    if (es == 4) {
                        double s0 = 0, s1 = 0;
                        int64_t ow = 0;
                        if (g.os[3] == 1) {
                            const ref_f32 *r = (const ref_f32 *)q;
                            for (; ow + 2 <= g.OW; ow += 2) {
                                s0 += r[ow];
                                s1 += r[ow + 1];
                            }
                        }
                        for (; ow < g.OW; ++ow)
                            s0 += *(const ref_f32 *)(q + ow * g.os[3] * 4);
                        s += s0 + s1;
                    } else {
                        for (int64_t ow = 0; ow < g.OW; ++ow)
                            s += *(const ref_f64 *)(q + ow * g.os[3] * 8);
                    }
                }
            }
            ref_store_f64((char *)ref_tensor_data(gb) + o * gb->strides[0] * (int64_t)ref_dtype_size(gb->dtype),
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
        zero_strided4(&g, (char *)ref_tensor_data(gx), gxs, g.C);
    }

    fl_status st = FL_SUCCESS;
    int64_t nb = chunk_size(&g);
    char *wmat = NULL, *wown = NULL, *cols = NULL, *ybuf = NULL, *gwmat = NULL, *gwown = NULL;
    REF_TRY(weight_matrix(&a, w, &g, &wmat, &wown));
    cols = (char *)ref_alloc((size_t)(g.K * nb * g.OHW) * es);
    ybuf = (char *)ref_alloc((size_t)(g.Og * nb * g.OHW) * es);
    if (!cols || !ybuf) {
        st = ref_fail(&a, "out of host memory for convolution buffers");
        goto done;
    }
    if (gw) {
        if (ref_is_contiguous(gw) && (uintptr_t)ref_tensor_data(gw) % es == 0) {
            gwmat = (char *)ref_tensor_data(gw);
        } else {
            gwown = (char *)ref_alloc((size_t)(g.O * g.K) * es);
            if (!gwown) {
                st = ref_fail(&a, "out of host memory for grad_weight");
                goto done;
            }
            gwmat = gwown;
        }
        if (g.N == 0 || g.OHW == 0)
            memset(gwmat, 0, (size_t)(g.O * g.K) * es);
    }
    for (int64_t n0 = 0; n0 < g.N; n0 += nb) {
        int64_t nc = g.N - n0 < nb ? g.N - n0 : nb;
        int64_t ncols = nc * g.OHW;
        for (int64_t grp = 0; grp < g.G; ++grp) {
            gather_y(&g, (const char *)ref_tensor_data(gy), n0, nc, grp, ybuf);
            if (gw && g.K > 0) {
                im2col(&g, (const char *)ref_tensor_data(x), n0, nc, grp, cols);
                st = ref_gemm(&a, x->dtype, 0, 1, g.Og, g.K, ncols, 1.0, ybuf, ncols, cols, ncols,
                              n0 == 0 ? 0.0 : 1.0, gwmat + (size_t)(grp * g.Og * g.K) * es, g.K);
                if (st != FL_SUCCESS)
                    goto done;
            }
            if (gx && g.K > 0) {
                st = ref_gemm(&a, x->dtype, 1, 0, g.K, ncols, g.Og, 1.0,
                              wmat + (size_t)(grp * g.Og * g.K) * es, g.K, ybuf, ncols, 0.0, cols,
                              ncols);
                if (st != FL_SUCCESS)
                    goto done;
                col2im_add(&g, (char *)ref_tensor_data(gx), gxs, n0, nc, grp, cols);
            }
        }
    }
    if (gwown) {
        /* copy the contiguous [O, K] result into grad_weight's layout */
        int64_t idx[REF_MAX_DIMS] = {0};
        int64_t total = ref_numel(gw);
        char *dst = (char *)ref_tensor_data(gw);
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
    ref_free(wown);
    ref_free(gwown);
    ref_free(cols);
    ref_free(ybuf);
    return st;
}
