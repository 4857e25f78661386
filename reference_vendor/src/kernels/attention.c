/*
 * attention.c -- fused scaled dot-product attention: PyTorch's op for a
 * vendor's own attention, _scaled_dot_product_fused_attention_overrideable,
 * and its _backward.  The runtime picks them for
 * torch.nn.functional.scaled_dot_product_attention when a plugin offers both
 * (docs/users/attention.md); otherwise PyTorch's math path runs.
 *
 * Semantics are those of PyTorch's math path (attention.cpp):
 *   S = scale * Q K^T + bias, causal rows keep keys j <= i (top-left aligned),
 *   P = softmax(S) with fully masked rows giving 0 (_safe_softmax), O = P V.
 * query [B, Hq, L, E], key [B, Hk, S, E], value [B, Hk, S, Ev]; Hq a multiple
 * of Hk (grouped-query attention: query head h reads key head h / (Hq/Hk));
 * bias [B, Hq, L, S] (any strides, 0 for broadcast dims); scale defaults to
 * 1/sqrt(E).  Any strides; float32 and float64, accumulated in double: each
 * head is packed into contiguous doubles and its products (Q K^T, P V and the
 * backward's four) are BLAS dgemms (util/blas.h), the softmax row by row.
 * Dropout is not offered: dropout_p must be 0 (the runtime sends dropout to
 * the math path).  The backward recomputes each row's softmax in double
 * rather than reading the float32 logsumexp, so float64 gradients keep full
 * precision.
 */
#include <math.h>

#include "fl_kernel.h"
#include "util/blas.h"

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

/* The inverse of pack_head: t[b, h, :, :] = src (rows x cols doubles), rounded to
 * t's dtype; rows with keep[r] == 0 are stored as 0 (keep may be NULL). */
static void unpack_head(const fl_tensor *t, int64_t b, int64_t h, int64_t rows, int64_t cols,
                        const double *src, const double *keep) {
    const int64_t es = (int64_t)flk_dtype_size(t->dtype), rs = t->strides[2], cs = t->strides[3];
    char *base = (char *)flk_data(t) + (b * t->strides[0] + h * t->strides[1]) * es;
    for (int64_t r = 0; r < rows; ++r) {
        const int zero = keep && keep[r] == 0.0;
        if (t->dtype == FL_FLOAT32)
            for (int64_t c = 0; c < cols; ++c)
                ((flk_f32 *)base)[r * rs + c * cs] = zero ? 0.0f : (float)src[r * cols + c];
        else
            for (int64_t c = 0; c < cols; ++c)
                ((flk_f64 *)base)[r * rs + c * cs] = zero ? 0.0 : src[r * cols + c];
    }
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

/* Row i of a head's scores (scale * q_i K^T, from the gemm) in s[0..S): the
 * bias added, the keys past the causal limit masked with -inf.  Returns 0 when
 * every key is masked, else 1 with *m the row's maximum (0 when the row has
 * only NaNs, so that they reach the output as PyTorch's softmax gives them). */
static int attn_mask_row(const attn_geom *g, int64_t b, int64_t h, int64_t i, double *s,
                         double *m) {
    int live = 0;
    double mx = -INFINITY;
    const int64_t n = attn_keys(g, i);
    for (int64_t j = 0; j < n; ++j) {
        double x = s[j];
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

/* C[m, n] = alpha * op(A) op(B) + beta * C on packed doubles (ld = row length);
 * with nothing to sum over (k == 0) C is only scaled, as BLAS defines it. */
static fl_status dgemm(const flk_args *a, int ta, int tb, int64_t m, int64_t n, int64_t k,
                       double alpha, const double *A, const double *B, double beta, double *C) {
    if (k == 0) {
        for (int64_t i = 0; i < m * n; ++i)
            C[i] = beta == 0.0 ? 0.0 : beta * C[i];
        return FL_SUCCESS;
    }
    return ref_gemm(a, FL_FLOAT64, ta, tb, m, n, k, alpha, A, ta ? m : k, B, tb ? k : n, beta, C,
                    n);
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

/* P [L, S] of head (b, h) from its packed Q [L, E] and K [S, E]: the scores
 * as one gemm (BLAS, in double), then each row masked and softmaxed in place.
 * A row with every key masked becomes zeros with live[i] = 0 and lse[i] = -inf
 * (PyTorch's _safe_softmax); else live[i] = 1 and lse[i] its log-sum-exp. */
static fl_status attn_probs(const flk_args *a, const attn_geom *g, int64_t b, int64_t h,
                            const double *Q, const double *K, double *P, double *lse,
                            double *live) {
    FLK_TRY(dgemm(a, 0, 1, g->L, g->S, g->E, g->scale, Q, K, 0.0, P));
    for (int64_t i = 0; i < g->L; ++i) {
        double *s = P + i * g->S, m;
        live[i] = attn_mask_row(g, b, h, i, s, &m);
        if (live[i] != 0.0) {
            lse[i] = m + attn_softmax(s, g->S, m);
        } else {
            lse[i] = -INFINITY;
            for (int64_t j = 0; j < g->S; ++j)
                s[j] = 0.0;
        }
    }
    return FL_SUCCESS;
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
    /* per head: Q [L, E], K [S, E], V [S, Ev], P [L, S], O [L, Ev], lse, live [L] */
    const int64_t need = g.L * g.E + g.S * (g.E + g.Ev) + g.L * (g.S + g.Ev + 2) + 1;
    double *buf = flk_alloc(sizeof(double) * (size_t)need);
    if (!buf)
        return flk_fail(&a, "out of host memory for the attention buffers");
    double *Q = buf, *K = Q + g.L * g.E, *V = K + g.S * g.E, *P = V + g.S * g.Ev;
    double *O = P + g.L * g.S, *lsum = O + g.L * g.Ev, *live = lsum + g.L;
    fl_status status = FL_SUCCESS;
    for (int64_t b = 0; b < g.B && status == FL_SUCCESS; ++b)
        for (int64_t h = 0; h < g.Hq && status == FL_SUCCESS; ++h) {
            pack_head(q, b, h, g.L, g.E, Q);
            pack_head(k, b, h / g.group, g.S, g.E, K);
            pack_head(v, b, h / g.group, g.S, g.Ev, V);
            status = attn_probs(&a, &g, b, h, Q, K, P, lsum, live);
            /* O = P V over every key, masked ones too: 0 * inf is NaN in PyTorch's
             * P @ V as well */
            if (status == FL_SUCCESS)
                status = dgemm(&a, 0, 0, g.L, g.Ev, g.S, 1.0, P, V, 0.0, O);
            if (status != FL_SUCCESS)
                break;
            unpack_head(out, b, h, g.L, g.Ev, O, live); /* a fully masked row is 0 */
            for (int64_t i = 0; i < g.L; ++i) {
                flk_store_f64((char *)flk_data(lse) +
                                  (b * lse->strides[0] + h * lse->strides[1] + i * lse->strides[2]) *
                                      (int64_t)flk_dtype_size(lse->dtype),
                              lse->dtype, lsum[i]);
            }
        }
    flk_free(buf);
    if (status != FL_SUCCESS)
        return status;
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
    /* dK, dV summed over a group's query heads [B, Hk, S, E | Ev]; per head:
     * Q, dQ [L, E], K [S, E], V [S, Ev], dO [L, Ev], P, dS [L, S], lse, live [L] */
    const int64_t nk = g.B * g.Hk * g.S;
    const int64_t need = nk * (g.E + g.Ev) + 2 * g.L * g.E + g.S * (g.E + g.Ev) +
                         g.L * (g.Ev + 2 * g.S + 2) + 1;
    double *buf = flk_alloc(sizeof(double) * (size_t)need);
    if (!buf)
        return flk_fail(&a, "out of host memory for the gradient buffers");
    double *dk = buf, *dv = dk + nk * g.E, *Q = dv + nk * g.Ev, *dQ = Q + g.L * g.E;
    double *K = dQ + g.L * g.E, *V = K + g.S * g.E, *dO = V + g.S * g.Ev, *P = dO + g.L * g.Ev;
    double *dS = P + g.L * g.S, *lsum = dS + g.L * g.S, *live = lsum + g.L;
    memset(dk, 0, sizeof(double) * (size_t)(nk * (g.E + g.Ev)));
    fl_status status = FL_SUCCESS;
    for (int64_t b = 0; b < g.B && status == FL_SUCCESS; ++b)
        for (int64_t h = 0; h < g.Hq; ++h) {
            const int64_t kh = h / g.group;
            double *dkh = dk + (b * g.Hk + kh) * g.S * g.E, *dvh = dv + (b * g.Hk + kh) * g.S * g.Ev;
            pack_head(q, b, h, g.L, g.E, Q);
            pack_head(k, b, kh, g.S, g.E, K);
            pack_head(v, b, kh, g.S, g.Ev, V);
            pack_head(go, b, h, g.L, g.Ev, dO);
            status = attn_probs(&a, &g, b, h, Q, K, P, lsum, live);
            if (status == FL_SUCCESS) /* dP = dO V^T */
                status = dgemm(&a, 0, 1, g.L, g.S, g.Ev, 1.0, dO, V, 0.0, dS);
            if (status != FL_SUCCESS)
                break;
            /* dS = P * (dP - sum(P * dP)) per row; a key with p == 0 (masked, or a
             * fully masked row) gets 0, never 0 * inf */
            for (int64_t i = 0; i < g.L; ++i) {
                const double *p = P + i * g.S;
                double *ds = dS + i * g.S, D = 0.0;
                for (int64_t j = 0; j < g.S; ++j)
                    D += p[j] * (p[j] != 0.0 ? ds[j] : 0.0);
                for (int64_t j = 0; j < g.S; ++j)
                    ds[j] = p[j] != 0.0 ? p[j] * (ds[j] - D) : 0.0;
            }
            /* dQ = scale dS K; dK += scale dS^T Q; dV += P^T dO */
            status = dgemm(&a, 0, 0, g.L, g.E, g.S, g.scale, dS, K, 0.0, dQ);
            if (status == FL_SUCCESS)
                status = dgemm(&a, 1, 0, g.S, g.E, g.L, g.scale, dS, Q, 1.0, dkh);
            if (status == FL_SUCCESS)
                status = dgemm(&a, 1, 0, g.S, g.Ev, g.L, 1.0, P, dO, 1.0, dvh);
            if (status != FL_SUCCESS)
                break;
            unpack_head(gq, b, h, g.L, g.E, dQ, NULL);
            if (gb)
                unpack_head(gb, b, h, g.L, g.S, dS, NULL);
        }
    if (status != FL_SUCCESS) {
        flk_free(buf);
        return status;
    }
    for (int64_t b = 0; b < g.B; ++b)
        for (int64_t h = 0; h < g.Hk; ++h) {
            unpack_head(gk, b, h, g.S, g.E, dk + (b * g.Hk + h) * g.S * g.E, NULL);
            unpack_head(gv, b, h, g.S, g.Ev, dv + (b * g.Hk + h) * g.S * g.Ev, NULL);
        }
    flk_free(buf);
    return FL_SUCCESS;
}
FLK_REGISTER("_scaled_dot_product_fused_attention_overrideable_backward", FLK_F32_F64,
             k_sdpa_backward);
