/*
 * attention.c -- fused scaled dot-product attention: PyTorch's op for a
 * vendor's own attention, _scaled_dot_product_fused_attention_overrideable,
 * and its _backward.  The runtime picks them for
 * torch.nn.functional.scaled_dot_product_attention when a plugin offers both
 * (README, "Fused attention"); otherwise PyTorch's math path runs.
 *
 * Semantics are those of PyTorch's math path (attention.cpp):
 *   S = scale * Q K^T + bias, causal rows keep keys j <= i (top-left aligned),
 *   P = softmax(S) with fully masked rows giving 0 (_safe_softmax), O = P V.
 * query [B, Hq, L, E], key [B, Hk, S, E], value [B, Hk, S, Ev]; Hq a multiple
 * of Hk (grouped-query attention: query head h reads key head h / (Hq/Hk));
 * bias [B, Hq, L, S] (any strides, 0 for broadcast dims); scale defaults to
 * 1/sqrt(E).  Any strides; float32 and float64, accumulated in double.
 * Dropout is not offered: dropout_p must be 0 (the runtime sends dropout to
 * the math path).  The backward recomputes each row's softmax in double
 * rather than reading the float32 logsumexp, so float64 gradients keep full
 * precision.
 */
#include <math.h>

#include "fl_kernel.h"

typedef struct attn_geom {
    int64_t B, Hq, Hk, L, S, E, Ev, group;
    double scale;
    int causal;
    const fl_tensor *q, *k, *v, *bias;
} attn_geom;

static double ld(const fl_tensor *t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    const int64_t off = i0 * t->strides[0] + i1 * t->strides[1] + i2 * t->strides[2] +
                        i3 * t->strides[3];
    const char *p = (const char *)flk_data(t) + off * (int64_t)flk_dtype_size(t->dtype);
    return t->dtype == FL_FLOAT32 ? (double)*(const flk_f32 *)p : *(const flk_f64 *)p;
}

static void st(const fl_tensor *t, int64_t i0, int64_t i1, int64_t i2, int64_t i3, double v) {
    const int64_t off = i0 * t->strides[0] + i1 * t->strides[1] + i2 * t->strides[2] +
                        i3 * t->strides[3];
    char *p = (char *)flk_data(t) + off * (int64_t)flk_dtype_size(t->dtype);
    if (t->dtype == FL_FLOAT32)
        *(flk_f32 *)p = (float)v;
    else if (t->dtype == FL_FLOAT64)
        *(flk_f64 *)p = v;
    else
        flk_store_f64(p, t->dtype, v);
}

static int dims4(const fl_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d) {
    return t->ndim == 4 && t->sizes[0] == a && t->sizes[1] == b && t->sizes[2] == c &&
           t->sizes[3] == d;
}

/* t[b, h, :, :] (rows x cols, any strides) as contiguous doubles: the row loops
 * below then read plain arrays instead of computing a strided offset and testing
 * the dtype per element (which made this kernel ~40% of a tiny GPT-2 step). */
static void pack_head(const fl_tensor *t, int64_t b, int64_t h, int64_t rows, int64_t cols,
                      double *dst) {
    const int64_t es = (int64_t)flk_dtype_size(t->dtype), rs = t->strides[2], cs = t->strides[3];
    const char *base = (const char *)flk_data(t) + (b * t->strides[0] + h * t->strides[1]) * es;
    if (t->dtype == FL_FLOAT32) {
        const flk_f32 *p = (const flk_f32 *)base;
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < cols; ++c)
                dst[r * cols + c] = (double)p[r * rs + c * cs];
    } else {
        const flk_f64 *p = (const flk_f64 *)base;
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < cols; ++c)
                dst[r * cols + c] = p[r * rs + c * cs];
    }
}

/* pack_head transposed: dst[c * rows + r], so that a row's scores (or dP) are
 * accumulated key by key in one vectorisable pass per feature, each score still
 * summed over the features in order. */
static void pack_head_t(const fl_tensor *t, int64_t b, int64_t h, int64_t rows, int64_t cols,
                        const double *packed, double *dst) {
    (void)t, (void)b, (void)h;
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
            dst[c * rows + r] = packed[r * cols + c];
}

/* y += a * x; the arrays never overlap (separate parts of one scratch block).
 * Out of line: inlined into the kernels' loop nests GCC left it scalar. */
__attribute__((noinline)) static void axpy(double *restrict y, double a,
                                           const double *restrict x, int64_t n) {
    for (int64_t e = 0; e < n; ++e)
        y[e] += a * x[e];
}

/* The keys row i may see: j <= i when causal (top-left aligned). */
static int64_t attn_keys(const attn_geom *g, int64_t i) {
    return g->causal && i + 1 < g->S ? i + 1 : g->S;
}

/* Shared argument checks of both kernels: shapes, dtypes, scale. */
static fl_status attn_parse(const flk_args *a, const fl_tensor *q, const fl_tensor *k,
                            const fl_tensor *v, const fl_tensor *bias, double dropout_p,
                            int causal, int has_scale, double scale, attn_geom *g) {
    FLK_TRY(flk_check_dtype(a, q, "query", FLK_F32_F64));
    if (k->dtype != q->dtype || v->dtype != q->dtype)
        return flk_fail(a, "key and value must have query's dtype");
    if (q->ndim != 4 || k->ndim != 4 || v->ndim != 4)
        return flk_fail(a, "query, key and value must be 4-d [batch, heads, seq, dim]");
    g->B = q->sizes[0], g->Hq = q->sizes[1], g->L = q->sizes[2], g->E = q->sizes[3];
    g->Hk = k->sizes[1], g->S = k->sizes[2], g->Ev = v->sizes[3];
    if (k->sizes[0] != g->B || v->sizes[0] != g->B || k->sizes[3] != g->E ||
        v->sizes[1] != g->Hk || v->sizes[2] != g->S)
        return flk_fail(a, "key/value shapes do not match query's");
    if (g->Hk <= 0 ? g->Hq != 0 : g->Hq % g->Hk != 0)
        return flk_fail(a, "query heads (%lld) must be a multiple of key heads (%lld)",
                        (long long)g->Hq, (long long)g->Hk);
    g->group = g->Hk > 0 ? g->Hq / g->Hk : 1;
    if (bias) {
        if (bias->dtype != q->dtype)
            return flk_fail(a, "attn_bias must have query's dtype, got %s",
                            flk_dtype_name(bias->dtype));
        if (!dims4(bias, g->B, g->Hq, g->L, g->S))
            return flk_fail(a, "attn_bias must be [batch, query heads, L, S] (expand it first)");
    }
    if (dropout_p != 0.0)
        return flk_fail(a, "dropout_p must be 0 (this kernel has no dropout)");
    g->scale = has_scale ? scale : (g->E > 0 ? 1.0 / sqrt((double)g->E) : 1.0);
    g->causal = causal;
    g->q = q, g->k = k, g->v = v, g->bias = bias;
    return FL_SUCCESS;
}

/* Scores of row (b, h, i) into s[0..S); returns 0 when every key is masked,
 * else 1 with *m the row's maximum (0 when the row has only NaNs, so that
 * they reach the output as PyTorch's softmax gives them). */
static int attn_row(const attn_geom *g, int64_t b, int64_t h, int64_t i, const double *qrow,
                    const double *keys_t, double *s, double *m) {
    int live = 0;
    double mx = -INFINITY;
    const int64_t n = attn_keys(g, i);
    for (int64_t j = 0; j < n; ++j)
        s[j] = 0.0;
    for (int64_t e = 0; e < g->E; ++e) /* keys_t: key head h / group, E x S (pack_head_t) */
        axpy(s, qrow[e], keys_t + e * g->S, n);
    for (int64_t j = 0; j < n; ++j) {
        double x = g->scale * s[j];
        if (g->bias)
            x += ld(g->bias, b, h, i, j);
        s[j] = x;
        live |= x != -INFINITY;
        if (x > mx)
            mx = x;
    }
    for (int64_t j = n; j < g->S; ++j)
        s[j] = -INFINITY;
    *m = mx == -INFINITY ? 0.0 : mx;
    return live;
}

/* 1 when every value is finite: then a masked key's 0 * v adds nothing and the
 * P @ V loop may stop at the row's last visible key. */
static int all_finite(const double *x, int64_t n) {
    int ok = 1;
    for (int64_t i = 0; i < n; ++i)
        ok &= isfinite(x[i]) != 0;
    return ok;
}

/* Softmax of a live row in place; returns log(sum exp(s - m)). */
static double attn_softmax(double *s, int64_t n, double m) {
    double sum = 0.0;
    for (int64_t j = 0; j < n; ++j) /* exp(-inf - m) is +0 for every m a live row has */
        sum += s[j] = s[j] == -INFINITY ? 0.0 : exp(s[j] - m);
    const double inv = 1.0 / sum;
    for (int64_t j = 0; j < n; ++j)
        s[j] *= inv;
    return log(sum);
}

/* _scaled_dot_product_fused_attention_overrideable(query, key, value,
 *   attn_bias?, dropout_p, is_causal, return_debug_mask, *, scale?)
 *   -> output, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, philox_seed,
 *      philox_offset, debug_attn_mask
 * The runtime passes only output, logsumexp [B, Hq, L] (float32) and the two
 * 0-dim philox tensors; the other outputs arrive as None. */
FLK_KERNEL_FN(k_sdpa_forward) {
    flk_args a;
    const fl_tensor *q, *k, *v, *bias, *out, *lse, *seed, *offset;
    double dropout_p, scale = 0.0;
    int causal, debug, has_scale;
    flk_scalar sc;
    attn_geom g;
    FLK_TRY(flk_args_init(&a, "_scaled_dot_product_fused_attention_overrideable", args, nargs, 17,
                          ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "query", &q));
    FLK_TRY(flk_get_tensor(&a, 1, "key", &k));
    FLK_TRY(flk_get_tensor(&a, 2, "value", &v));
    FLK_TRY(flk_get_opt_tensor(&a, 3, "attn_bias", &bias));
    FLK_TRY(flk_get_double(&a, 4, "dropout_p", &dropout_p));
    FLK_TRY(flk_get_bool(&a, 5, "is_causal", &causal));
    FLK_TRY(flk_get_bool(&a, 6, "return_debug_mask", &debug));
    FLK_TRY(flk_get_opt_scalar(&a, 7, "scale", &has_scale, &sc));
    FLK_TRY(flk_get_tensor(&a, 8, "output", &out));
    FLK_TRY(flk_get_tensor(&a, 9, "logsumexp", &lse));
    FLK_TRY(flk_get_opt_tensor(&a, 14, "philox_seed", &seed));
    FLK_TRY(flk_get_opt_tensor(&a, 15, "philox_offset", &offset));
    if (has_scale)
        scale = sc.f;
    if (debug)
        return flk_fail(&a, "return_debug_mask is not supported");
    FLK_TRY(attn_parse(&a, q, k, v, bias, dropout_p, causal, has_scale, scale, &g));
    if (!dims4(out, g.B, g.Hq, g.L, g.Ev) || out->dtype != q->dtype)
        return flk_fail(&a, "output must be [B, Hq, L, Ev] in query's dtype");
    if (lse->ndim != 3 || lse->sizes[0] != g.B || lse->sizes[1] != g.Hq || lse->sizes[2] != g.L ||
        !flk_is_floating(lse->dtype))
        return flk_fail(&a, "logsumexp must be a floating [B, Hq, L] tensor");
    double *buf = flk_alloc(sizeof(double) * (size_t)(g.S + g.E + g.Ev + g.S * (2 * g.E + g.Ev) + 1));
    if (!buf)
        return flk_fail(&a, "out of host memory for a row buffer");
    double *s = buf, *qrow = buf + g.S, *acc = qrow + g.E, *keys = acc + g.Ev;
    double *keys_t = keys + g.S * g.E, *vals = keys_t + g.S * g.E;
    for (int64_t b = 0; b < g.B; ++b)
        for (int64_t h = 0; h < g.Hq; ++h) {
            pack_head(k, b, h / g.group, g.S, g.E, keys);
            pack_head_t(k, b, h / g.group, g.S, g.E, keys, keys_t);
            pack_head(v, b, h / g.group, g.S, g.Ev, vals);
            const int finite = all_finite(vals, g.S * g.Ev);
            for (int64_t i = 0; i < g.L; ++i) {
                double m, lsum = -INFINITY;
                for (int64_t e = 0; e < g.E; ++e)
                    qrow[e] = ld(q, b, h, i, e);
                for (int64_t e = 0; e < g.Ev; ++e)
                    acc[e] = 0.0;
                if (attn_row(&g, b, h, i, qrow, keys_t, s, &m)) {
                    lsum = m + attn_softmax(s, g.S, m);
                    const int64_t n = finite ? attn_keys(&g, i) : g.S;
                    for (int64_t j = 0; j < n; ++j) {
                        /* masked keys too: 0 * inf is NaN in PyTorch's P @ V as well */
                        axpy(acc, s[j], vals + j * g.Ev, g.Ev);
                    }
                }
                for (int64_t e = 0; e < g.Ev; ++e)
                    st(out, b, h, i, e, acc[e]);
                flk_store_f64((char *)flk_data(lse) +
                                  (b * lse->strides[0] + h * lse->strides[1] + i * lse->strides[2]) *
                                      (int64_t)flk_dtype_size(lse->dtype),
                              lse->dtype, lsum);
            }
        }
    flk_free(buf);
    /* No dropout, so no random state was drawn: the philox pair is 0. */
    if (seed)
        flk_store_i64(flk_data(seed), seed->dtype, 0);
    if (offset)
        flk_store_i64(flk_data(offset), offset->dtype, 0);
    return FL_SUCCESS;
}
FLK_REGISTER("_scaled_dot_product_fused_attention_overrideable", FLK_F32_F64, k_sdpa_forward);

/* _scaled_dot_product_fused_attention_overrideable_backward(grad_out, query,
 *   key, value, attn_bias, grad_input_mask, out, logsumexp, cum_seq_q,
 *   cum_seq_k, max_q, max_k, dropout_p, is_causal, philox_seed,
 *   philox_offset, *, scale?) -> grad_query, grad_key, grad_value,
 *   grad_attn_bias (None without attn_bias)
 * Per row: P recomputed, dP = dO V^T, dS = P * (dP - sum(P * dP)),
 * dQ = scale dS K, dK += scale dS^T Q, dV += P^T dO, d(bias) = dS.  dK and dV
 * sum over the query heads of a group, in double scratch. */
FLK_KERNEL_FN(k_sdpa_backward) {
    flk_args a;
    const fl_tensor *go, *q, *k, *v, *bias, *gq, *gk, *gv, *gb;
    const int64_t *mask;
    uint32_t nmask;
    double dropout_p, scale = 0.0;
    int causal, has_scale;
    flk_scalar sc;
    attn_geom g;
    FLK_TRY(flk_args_init(&a, "_scaled_dot_product_fused_attention_overrideable_backward", args,
                          nargs, 21, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "grad_out", &go));
    FLK_TRY(flk_get_tensor(&a, 1, "query", &q));
    FLK_TRY(flk_get_tensor(&a, 2, "key", &k));
    FLK_TRY(flk_get_tensor(&a, 3, "value", &v));
    FLK_TRY(flk_get_opt_tensor(&a, 4, "attn_bias", &bias));
    FLK_TRY(flk_get_bool_list(&a, 5, "grad_input_mask", &mask, &nmask));
    FLK_TRY(flk_get_double(&a, 12, "dropout_p", &dropout_p));
    FLK_TRY(flk_get_bool(&a, 13, "is_causal", &causal));
    FLK_TRY(flk_get_opt_scalar(&a, 16, "scale", &has_scale, &sc));
    FLK_TRY(flk_get_tensor(&a, 17, "grad_query", &gq));
    FLK_TRY(flk_get_tensor(&a, 18, "grad_key", &gk));
    FLK_TRY(flk_get_tensor(&a, 19, "grad_value", &gv));
    FLK_TRY(flk_get_opt_tensor(&a, 20, "grad_attn_bias", &gb));
    if (has_scale)
        scale = sc.f;
    if (nmask != 4)
        return flk_fail(&a, "grad_input_mask must have 4 entries, got %u", nmask);
    FLK_TRY(attn_parse(&a, q, k, v, bias, dropout_p, causal, has_scale, scale, &g));
    if (!dims4(go, g.B, g.Hq, g.L, g.Ev) || go->dtype != q->dtype)
        return flk_fail(&a, "grad_out must be [B, Hq, L, Ev] in query's dtype");
    if (!flk_same_sizes(gq, q) || !flk_same_sizes(gk, k) || !flk_same_sizes(gv, v) ||
        gq->dtype != q->dtype || gk->dtype != q->dtype || gv->dtype != q->dtype)
        return flk_fail(&a, "grad_query/key/value must have the shapes and dtype of query/key/value");
    if (gb && (!bias || !flk_same_sizes(gb, bias) || gb->dtype != q->dtype))
        return flk_fail(&a, "grad_attn_bias must have attn_bias's shape and dtype");
    const int64_t nk = g.B * g.Hk * g.S;
    double *buf = flk_alloc(sizeof(double) * (size_t)(2 * g.S + 2 * g.E + g.Ev + nk * (g.E + g.Ev) +
                                                      2 * g.S * (g.E + g.Ev) + 1));
    if (!buf)
        return flk_fail(&a, "out of host memory for the gradient buffers");
    double *p = buf, *dp = p + g.S, *qrow = dp + g.S, *dq = qrow + g.E, *dorow = dq + g.E;
    double *dk = dorow + g.Ev, *dv = dk + nk * g.E, *keys = dv + nk * g.Ev;
    double *vals = keys + g.S * g.E, *keys_t = vals + g.S * g.Ev, *vals_t = keys_t + g.S * g.E;
    memset(dk, 0, sizeof(double) * (size_t)(nk * (g.E + g.Ev)));
    for (int64_t b = 0; b < g.B; ++b)
        for (int64_t h = 0; h < g.Hq; ++h) {
            const int64_t kh = h / g.group;
            pack_head(k, b, kh, g.S, g.E, keys);
            pack_head(v, b, kh, g.S, g.Ev, vals);
            pack_head_t(k, b, kh, g.S, g.E, keys, keys_t);
            pack_head_t(v, b, kh, g.S, g.Ev, vals, vals_t);
            for (int64_t i = 0; i < g.L; ++i) {
                double m;
                for (int64_t e = 0; e < g.E; ++e)
                    qrow[e] = ld(q, b, h, i, e), dq[e] = 0.0;
                int live = attn_row(&g, b, h, i, qrow, keys_t, p, &m);
                if (live) {
                    attn_softmax(p, g.S, m);
                    for (int64_t e = 0; e < g.Ev; ++e)
                        dorow[e] = ld(go, b, h, i, e);
                    /* dP = dO V^T for the visible keys (p is 0 past them), each
                     * summed over the features in order; a key with p == 0 gets
                     * 0, never 0 * inf */
                    const int64_t n = attn_keys(&g, i);
                    for (int64_t j = 0; j < n; ++j)
                        dp[j] = 0.0;
                    for (int64_t e = 0; e < g.Ev; ++e)
                        axpy(dp, dorow[e], vals_t + e * g.S, n);
                    double D = 0.0;
                    for (int64_t j = 0; j < g.S; ++j) {
                        const double x = j < n && p[j] != 0.0 ? dp[j] : 0.0;
                        dp[j] = x;
                        D += p[j] * x;
                    }
                    for (int64_t j = 0; j < g.S; ++j) {
                        if (p[j] == 0.0) {
                            dp[j] = 0.0;
                            continue;
                        }
                        const double ds = p[j] * (dp[j] - D);
                        double *dkr = dk + ((b * g.Hk + kh) * g.S + j) * g.E;
                        double *dvr = dv + ((b * g.Hk + kh) * g.S + j) * g.Ev;
                        const double *krow = keys + j * g.E;
                        axpy(dq, g.scale * ds, krow, g.E);
                        axpy(dkr, g.scale * ds, qrow, g.E);
                        axpy(dvr, p[j], dorow, g.Ev);
                        dp[j] = ds;
                    }
                }
                for (int64_t e = 0; e < g.E; ++e)
                    st(gq, b, h, i, e, dq[e]);
                if (gb)
                    for (int64_t j = 0; j < g.S; ++j)
                        st(gb, b, h, i, j, live ? dp[j] : 0.0);
            }
        }
    for (int64_t b = 0; b < g.B; ++b)
        for (int64_t h = 0; h < g.Hk; ++h)
            for (int64_t j = 0; j < g.S; ++j) {
                const int64_t r = (b * g.Hk + h) * g.S + j;
                for (int64_t e = 0; e < g.E; ++e)
                    st(gk, b, h, j, e, dk[r * g.E + e]);
                for (int64_t e = 0; e < g.Ev; ++e)
                    st(gv, b, h, j, e, dv[r * g.Ev + e]);
            }
    flk_free(buf);
    return FL_SUCCESS;
}
FLK_REGISTER("_scaled_dot_product_fused_attention_overrideable_backward", FLK_F32_F64,
             k_sdpa_backward);
