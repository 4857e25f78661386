/*
 * softmax_nll.c -- _softmax / _log_softmax (any dim, any strides) and their
 * _backward_data, nll_loss_forward / nll_loss_backward (reduction none /
 * mean / sum, optional class weights, ignore_index).  float32 and float64;
 * sums accumulate in double.
 */
#include <math.h>

#include "fl_kernel.h"
#include "util/half.h"

/* ---- softmax family ----------------------------------------------------------- */

enum { SM_SOFTMAX, SM_LOG_SOFTMAX, SM_SOFTMAX_BW, SM_LOG_SOFTMAX_BW };

typedef struct sm_ctx {
    int mode;
    int32_t dt;
    int64_t len;    /* size along dim */
    int64_t ds[3];  /* byte strides along dim of the operands */
} sm_ctx;

#define SM_ROW(NAME, T, TU, EXP, LOG)                                                     \
    static void NAME(const sm_ctx *c, char *const *p) {                                   \
        const int64_t L = c->len;                                                         \
        if (c->mode == SM_SOFTMAX || c->mode == SM_LOG_SOFTMAX) {                         \
            const char *x = p[1];                                                         \
            char *y = p[0];                                                               \
            const int64_t xs = c->ds[1], ys = c->ds[0];                                   \
            T m = -(T)INFINITY;                                                           \
            for (int64_t i = 0; i < L; ++i) {                                             \
                T v = *(const TU *)(x + i * xs);                                          \
                if (v > m || v != v)                                                      \
                    m = v;                                                                \
                if (m != m)                                                               \
                    break;                                                                \
            }                                                                             \
            double sum = 0.0;                                                             \
            if (c->mode == SM_LOG_SOFTMAX) {                                              \
                for (int64_t i = 0; i < L; ++i)                                           \
                    sum += EXP(*(const TU *)(x + i * xs) - m);                            \
                const T ls = (T)LOG((T)sum);                                              \
                for (int64_t i = 0; i < L; ++i)                                           \
                    *(TU *)(y + i * ys) = *(const TU *)(x + i * xs) - m - ls;             \
            } else {                                                                      \
                for (int64_t i = 0; i < L; ++i) {                                         \
                    T e = EXP(*(const TU *)(x + i * xs) - m);                             \
                    *(TU *)(y + i * ys) = e;                                              \
                    sum += e;                                                             \
                }                                                                         \
                const T inv = (T)(1.0 / sum);                                             \
                for (int64_t i = 0; i < L; ++i)                                           \
                    *(TU *)(y + i * ys) *= inv;                                           \
            }                                                                             \
        } else {                                                                          \
            /* p[0] = grad_input, p[1] = grad_output, p[2] = output */                    \
            char *gi = p[0];                                                              \
            const char *go = p[1], *out = p[2];                                           \
            const int64_t gis = c->ds[0], gos = c->ds[1], os = c->ds[2];                  \
            double sum = 0.0;                                                             \
            if (c->mode == SM_LOG_SOFTMAX_BW) {                                           \
                for (int64_t i = 0; i < L; ++i)                                           \
                    sum += *(const TU *)(go + i * gos);                                   \
                const T s = (T)sum;                                                       \
                for (int64_t i = 0; i < L; ++i)                                           \
                    *(TU *)(gi + i * gis) = *(const TU *)(go + i * gos) -                 \
                                            EXP(*(const TU *)(out + i * os)) * s;         \
            } else {                                                                      \
                for (int64_t i = 0; i < L; ++i)                                           \
                    sum += (double)(*(const TU *)(go + i * gos) *                         \
                                    *(const TU *)(out + i * os));                         \
                const T s = (T)sum;                                                       \
                for (int64_t i = 0; i < L; ++i)                                           \
                    *(TU *)(gi + i * gis) = *(const TU *)(out + i * os) *                 \
                                            (*(const TU *)(go + i * gos) - s);            \
            }                                                                             \
        }                                                                                 \
    }

SM_ROW(sm_row_f32, float, flk_f32, flk_expf, flk_logf)
SM_ROW(sm_row_f64, double, flk_f64, exp, log)

/* float32 rows contiguous along dim: 16 float lanes per pass (the loops
 * vectorise), lane sums of at most 64 terms folded into double per block */
#define LANES 16
#define LANE_BLOCK 1024

static float lanes_max(const flk_f32 *x, int64_t L) { /* NaN if any NaN */
    float mx[LANES], nan[LANES];
    for (int l = 0; l < LANES; ++l) {
        mx[l] = -INFINITY;
        nan[l] = 0.0f;
    }
    int64_t i = 0;
    for (; i + LANES <= L; i += LANES)
        for (int l = 0; l < LANES; ++l) {
            float v = x[i + l];
            mx[l] = v > mx[l] ? v : mx[l];
            nan[l] = v != v ? v : nan[l];
        }
    float m = -INFINITY, anynan = 0.0f;
    for (int l = 0; l < LANES; ++l) {
        m = mx[l] > m ? mx[l] : m;
        anynan = nan[l] != nan[l] ? nan[l] : anynan;
    }
    for (; i < L; ++i) {
        float v = x[i];
        m = v > m ? v : m;
        anynan = v != v ? v : anynan;
    }
    return anynan != anynan ? anynan : m;
}

/* sum over i of f(i), f vectorisable, in float lanes per block, blocks in double */
#define LANES_SUM(L, EXPR_OF_I)                                                   \
    ({                                                                            \
        double total_ = 0.0;                                                      \
        int64_t i = 0;                                                            \
        while (i + LANES <= (L)) {                                                \
            float acc_[LANES] = {0};                                              \
            int64_t end_ = i + LANE_BLOCK <= (L) ? i + LANE_BLOCK                 \
                                                 : (L) - ((L) - i) % LANES;       \
            for (; i < end_; i += LANES)                                          \
                for (int l_ = 0; l_ < LANES; ++l_) {                              \
                    int64_t j_ = i + l_;                                          \
                    acc_[l_] += (EXPR_OF_I(j_));                                  \
                }                                                                 \
            double b_ = 0.0;                                                      \
            for (int l_ = 0; l_ < LANES; ++l_)                                    \
                b_ += acc_[l_];                                                   \
            total_ += b_;                                                         \
        }                                                                         \
        for (; i < (L); ++i)                                                      \
            total_ += (EXPR_OF_I(i));                                             \
        total_;                                                                   \
    })

static void sm_row_f32_contig(int mode, int64_t L, char *const *p) {
    if (mode == SM_SOFTMAX || mode == SM_LOG_SOFTMAX) {
        const flk_f32 *x = (const flk_f32 *)p[1];
        flk_f32 *y = (flk_f32 *)p[0];
        const float m = lanes_max(x, L);
#define EXPM(j) flk_expf(x[j] - m)
        if (mode == SM_LOG_SOFTMAX) {
            const float ls = flk_logf((float)LANES_SUM(L, EXPM));
            for (int64_t i = 0; i < L; ++i)
                y[i] = x[i] - m - ls;
        } else {
            for (int64_t i = 0; i < L; ++i)
                y[i] = flk_expf(x[i] - m);
#define YI(j) y[j]
            const float inv = (float)(1.0 / LANES_SUM(L, YI));
            for (int64_t i = 0; i < L; ++i)
                y[i] *= inv;
        }
    } else {
        flk_f32 *gi = (flk_f32 *)p[0];
        const flk_f32 *go = (const flk_f32 *)p[1], *out = (const flk_f32 *)p[2];
        if (mode == SM_LOG_SOFTMAX_BW) {
#define GOI(j) go[j]
            const float s = (float)LANES_SUM(L, GOI);
            for (int64_t i = 0; i < L; ++i)
                gi[i] = go[i] - flk_expf(out[i]) * s;
        } else {
#define GOOUT(j) (go[j] * out[j])
            const float s = (float)LANES_SUM(L, GOOUT);
            for (int64_t i = 0; i < L; ++i)
                gi[i] = out[i] * (go[i] - s);
        }
    }
#undef EXPM
#undef YI
#undef GOI
#undef GOOUT
}

static void sm_rows(char **p, const int64_t *st, int64_t n, void *vc) {
    const sm_ctx *c = (const sm_ctx *)vc;
    const int fwd = c->mode == SM_SOFTMAX || c->mode == SM_LOG_SOFTMAX;
    const int contig = c->dt == FL_FLOAT32 && c->ds[0] == 4 && c->ds[1] == 4 &&
                       (fwd || c->ds[2] == 4);
    for (int64_t i = 0; i < n; ++i) {
        char *q[3] = {p[0] + i * st[0], p[1] + i * st[1], p[2] + i * st[2]};
        if (contig)
            sm_row_f32_contig(c->mode, c->len, q);
        else if (c->dt == FL_FLOAT32)
            sm_row_f32(c, q);
        else
            sm_row_f64(c, q);
    }
}

/* ops[0] is written; all have the same shape; reduce along dim */
static fl_status sm_run(const flk_args *a, int mode, int64_t dim, const fl_tensor *const *ops,
                        int nops) {
    const fl_tensor *t0 = ops[0];
    int32_t d;
    if (t0->dtype != FL_FLOAT32 && t0->dtype != FL_FLOAT64)
        return flk_fail(a, "dtype %s is not supported (float32, float64)",
                        flk_dtype_name(t0->dtype));
    for (int k = 1; k < nops; ++k) {
        if (ops[k]->dtype != t0->dtype)
            return flk_fail(a, "all tensors must be %s, got %s", flk_dtype_name(t0->dtype),
                            flk_dtype_name(ops[k]->dtype));
        if (!flk_same_sizes(ops[k], t0))
            return flk_fail(a, "all tensors must have the same shape");
    }
    FLK_TRY(flk_wrap_dim(a, dim, t0->ndim, &d));
    if (flk_numel(t0) == 0)
        return FL_SUCCESS;
    int64_t es = (int64_t)flk_dtype_size(t0->dtype);
    sm_ctx c;
    memset(&c, 0, sizeof c);
    c.mode = mode;
    c.dt = t0->dtype;
    int nd = t0->ndim;
    int64_t sizes[FLK_MAX_DIMS];
    int64_t strides[3][FLK_MAX_DIMS];
    char *ptrs[3] = {NULL, NULL, NULL};
    memset(strides, 0, sizeof strides);
    if (nd == 0) {
        c.len = 1;
    } else {
        c.len = t0->sizes[d];
        for (int i = 0; i < nd; ++i)
            sizes[i] = i == d ? 1 : t0->sizes[i];
    }
    for (int k = 0; k < 3; ++k) {
        const fl_tensor *t = ops[k < nops ? k : 0];
        ptrs[k] = (char *)flk_data(t);
        if (nd > 0) {
            c.ds[k] = t->strides[d] * es;
            for (int i = 0; i < nd; ++i)
                strides[k][i] = t->strides[i] * es;
        }
    }
    flk_for_each_row(nd, sizes, 3, ptrs, strides, 0, sm_rows, &c);
    return FL_SUCCESS;
}

static fl_status sm_fwd(const char *op, const fl_arg *args, uint32_t nargs, flk_ctx *ctx,
                        int mode) {
    flk_args a;
    const fl_tensor *x, *y;
    int64_t dim;
    int half_to_float;
    FLK_TRY(flk_args_init(&a, op, args, nargs, 4, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &x));
    FLK_TRY(flk_get_int(&a, 1, "dim", &dim));
    FLK_TRY(flk_get_bool(&a, 2, "half_to_float", &half_to_float));
    FLK_TRY(flk_get_tensor(&a, 3, "out", &y));
    if (half_to_float && x->dtype != y->dtype)
        return flk_fail(&a, "half_to_float is not supported");
    const fl_tensor *ops[2] = {y, x};
    return sm_run(&a, mode, dim, ops, 2);
}

static fl_status sm_bwd(const char *op, const fl_arg *args, uint32_t nargs, flk_ctx *ctx,
                        int mode) {
    flk_args a;
    const fl_tensor *go, *out, *gi;
    int64_t dim;
    int has_dt;
    int32_t in_dt = 0;
    FLK_TRY(flk_args_init(&a, op, args, nargs, 5, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "grad_output", &go));
    FLK_TRY(flk_get_tensor(&a, 1, "output", &out));
    FLK_TRY(flk_get_int(&a, 2, "dim", &dim));
    FLK_TRY(flk_get_opt_dtype(&a, 3, "input_dtype", &has_dt, &in_dt));
    FLK_TRY(flk_get_tensor(&a, 4, "grad_input", &gi));
    if (has_dt && in_dt != gi->dtype)
        return flk_fail(&a, "input_dtype %s differs from grad_input's %s",
                        flk_dtype_name(in_dt), flk_dtype_name(gi->dtype));
    const fl_tensor *ops[3] = {gi, go, out};
    return sm_run(&a, mode, dim, ops, 3);
}

FLK_KERNEL_FN(k_softmax) { return sm_fwd("_softmax", args, nargs, ctx, SM_SOFTMAX); }
FLK_KERNEL_FN(k_log_softmax) { return sm_fwd("_log_softmax", args, nargs, ctx, SM_LOG_SOFTMAX); }
FLK_KERNEL_FN(k_softmax_backward_data) {
    return sm_bwd("_softmax_backward_data", args, nargs, ctx, SM_SOFTMAX_BW);
}
FLK_KERNEL_FN(k_log_softmax_backward_data) {
    return sm_bwd("_log_softmax_backward_data", args, nargs, ctx, SM_LOG_SOFTMAX_BW);
}

/* ---- nll_loss ------------------------------------------------------------------------ */

enum { RED_NONE = 0, RED_MEAN = 1, RED_SUM = 2 };

typedef struct nll_geom {
    int64_t N, C;
    int64_t xs0, xs1;   /* self strides (elements) */
    int64_t ts;         /* target stride */
    int batched;
} nll_geom;

static fl_status nll_parse(const flk_args *a, const fl_tensor *x, const fl_tensor *t,
                           const fl_tensor *w, int64_t reduction, nll_geom *g) {
    if (x->dtype != FL_FLOAT32 && x->dtype != FL_FLOAT64)
        return flk_fail(a, "dtype %s is not supported (float32, float64)",
                        flk_dtype_name(x->dtype));
    if (!flk_is_integral(t->dtype))
        return flk_fail(a, "target must be an integer tensor (int64), got %s",
                        flk_dtype_name(t->dtype));
    if (x->ndim != 1 && x->ndim != 2)
        return flk_fail(a, "input must be 1-d or 2-d, got %d dims", (int)x->ndim);
    if (reduction < 0 || reduction > 2)
        return flk_fail(a, "invalid reduction %lld", (long long)reduction);
    g->batched = x->ndim == 2;
    g->N = g->batched ? x->sizes[0] : 1;
    g->C = x->sizes[g->batched ? 1 : 0];
    g->xs0 = g->batched ? x->strides[0] : 0;
    g->xs1 = x->strides[g->batched ? 1 : 0];
    if (g->batched) {
        if (t->ndim != 1 || t->sizes[0] != g->N)
            return flk_fail(a, "expected a target of shape [%lld]", (long long)g->N);
        g->ts = t->strides[0];
    } else {
        if (t->ndim != 0 && !(t->ndim == 1 && t->sizes[0] == 1))
            return flk_fail(a, "1-d input expects a 0-d target");
        g->ts = 0;
    }
    if (w && (w->ndim != 1 || w->sizes[0] != g->C || w->dtype != x->dtype))
        return flk_fail(a, "weight must be a 1-d %s tensor of %lld elements",
                        flk_dtype_name(x->dtype), (long long)g->C);
    return FL_SUCCESS;
}

/* nll_loss_forward(self, target, weight?, reduction, ignore_index) -> (output, total_weight) */
FLK_KERNEL_FN(k_nll_loss_forward) {
    flk_args a;
    const fl_tensor *x, *t, *w, *out, *tw;
    int64_t reduction, ignore;
    nll_geom g;
    FLK_TRY(flk_args_init(&a, "nll_loss_forward", args, nargs, 7, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &x));
    FLK_TRY(flk_get_tensor(&a, 1, "target", &t));
    FLK_TRY(flk_get_opt_tensor(&a, 2, "weight", &w));
    FLK_TRY(flk_get_int(&a, 3, "reduction", &reduction));
    FLK_TRY(flk_get_int(&a, 4, "ignore_index", &ignore));
    FLK_TRY(flk_get_tensor(&a, 5, "output", &out));
    FLK_TRY(flk_get_tensor(&a, 6, "total_weight", &tw));
    FLK_TRY(nll_parse(&a, x, t, w, reduction, &g));
    int per_sample = reduction == RED_NONE && g.batched;
    if (per_sample ? (out->ndim != 1 || out->sizes[0] != g.N) : flk_numel(out) != 1)
        return flk_fail(&a, "output has the wrong shape");
    if (flk_numel(tw) != 1)
        return flk_fail(&a, "total_weight must have one element");
    const int64_t es = (int64_t)flk_dtype_size(x->dtype);
    const int64_t tes = (int64_t)flk_dtype_size(t->dtype);
    const int64_t oes = (int64_t)flk_dtype_size(out->dtype);
    const char *xp = (const char *)flk_data(x);
    const char *tp = (const char *)flk_data(t);
    const char *wp = w ? (const char *)flk_data(w) : NULL;
    char *op = (char *)flk_data(out);
    double sum = 0.0, wsum = 0.0;
    for (int64_t i = 0; i < g.N; ++i) {
        int64_t cls = flk_load_i64(tp + i * g.ts * tes, t->dtype);
        double v = 0.0;
        if (cls != ignore) {
            if (cls < 0 || cls >= g.C)
                return flk_fail(&a, "target %lld is out of bounds (%lld classes)",
                                (long long)cls, (long long)g.C);
            double wt = wp ? flk_load_f64(wp + cls * w->strides[0] * es, x->dtype) : 1.0;
            double xv = flk_load_f64(xp + (i * g.xs0 + cls * g.xs1) * es, x->dtype);
            v = -xv * wt;
            sum += v;
            wsum += wt;
        }
        if (per_sample)
            flk_store_f64(op + i * out->strides[0] * oes, out->dtype, v);
    }
    if (!per_sample) {
        double r = sum;
        if (reduction == RED_MEAN)
            r = sum / wsum; /* 0/0 = NaN when every target is ignored */
        flk_store_f64(op, out->dtype, r);
    }
    /* PyTorch leaves total_weight at 0 for per-sample (2-d, 'none') losses */
    flk_store_f64(flk_data(tw), tw->dtype, per_sample ? 0.0 : wsum);
    return FL_SUCCESS;
}

/* nll_loss_backward(grad_output, self, target, weight?, reduction, ignore_index,
 *                   total_weight) -> grad_input */
FLK_KERNEL_FN(k_nll_loss_backward) {
    flk_args a;
    const fl_tensor *x, *t, *w, *gi;
    flk_operand go, tw;
    int64_t reduction, ignore;
    nll_geom g;
    FLK_TRY(flk_args_init(&a, "nll_loss_backward", args, nargs, 8, ctx));
    FLK_TRY(flk_get_operand(&a, 0, "grad_output", &go));
    FLK_TRY(flk_get_tensor(&a, 1, "self", &x));
    FLK_TRY(flk_get_tensor(&a, 2, "target", &t));
    FLK_TRY(flk_get_opt_tensor(&a, 3, "weight", &w));
    FLK_TRY(flk_get_int(&a, 4, "reduction", &reduction));
    FLK_TRY(flk_get_int(&a, 5, "ignore_index", &ignore));
    FLK_TRY(flk_get_operand(&a, 6, "total_weight", &tw));
    FLK_TRY(flk_get_tensor(&a, 7, "grad_input", &gi));
    FLK_TRY(nll_parse(&a, x, t, w, reduction, &g));
    if (!flk_same_sizes(gi, x) || gi->dtype != x->dtype)
        return flk_fail(&a, "grad_input must have self's shape and dtype");
    int per_sample = reduction == RED_NONE && g.batched;
    if (go.t && (per_sample ? (go.t->ndim != 1 || go.t->sizes[0] != g.N) : flk_numel(go.t) != 1))
        return flk_fail(&a, "grad_output has the wrong shape");
    if (per_sample && !go.t)
        return flk_fail(&a, "grad_output must be a tensor for reduction='none'");
    if (tw.t && flk_numel(tw.t) != 1)
        return flk_fail(&a, "total_weight must have one element");
    const int64_t es = (int64_t)flk_dtype_size(x->dtype);
    const int64_t tes = (int64_t)flk_dtype_size(t->dtype);
    double twv = tw.t ? flk_load_f64(flk_data(tw.t), tw.t->dtype) : tw.s.f;
    double go0 = 0.0;
    if (!per_sample)
        go0 = go.t ? flk_load_f64(flk_data(go.t), go.t->dtype) : go.s.f;

    /* zero grad_input */
    char *gp = (char *)flk_data(gi);
    int64_t gs0 = g.batched ? gi->strides[0] : 0, gs1 = gi->strides[g.batched ? 1 : 0];
    for (int64_t i = 0; i < g.N; ++i) {
        char *row = gp + i * gs0 * es;
        if (gs1 == 1)
            memset(row, 0, (size_t)(g.C * es));
        else
            for (int64_t cc = 0; cc < g.C; ++cc)
                memset(row + cc * gs1 * es, 0, (size_t)es);
    }
    const char *tp = (const char *)flk_data(t);
    const char *wp = w ? (const char *)flk_data(w) : NULL;
    for (int64_t i = 0; i < g.N; ++i) {
        int64_t cls = flk_load_i64(tp + i * g.ts * tes, t->dtype);
        if (cls == ignore)
            continue;
        if (cls < 0 || cls >= g.C)
            return flk_fail(&a, "target %lld is out of bounds (%lld classes)", (long long)cls,
                            (long long)g.C);
        double wt = wp ? flk_load_f64(wp + cls * w->strides[0] * es, x->dtype) : 1.0;
        double gv;
        if (per_sample)
            gv = flk_load_f64((const char *)flk_data(go.t) +
                                  i * go.t->strides[0] * (int64_t)flk_dtype_size(go.t->dtype),
                              go.t->dtype);
        else
            gv = go0;
        double grad = reduction == RED_MEAN ? -(gv / twv) : -gv;
        flk_store_f64(gp + (i * gs0 + cls * gs1) * es, gi->dtype, wt * grad);
    }
    return FL_SUCCESS;
}

/* ---- float16 / bfloat16 through float32 copies (util/half.h) ------------------- */

/* The registered kernels: the float32/float64 kernels above for those dtypes, on
 * float32 copies for float16 and bfloat16. */
REF_VIA_F32(k_softmax_any, "_softmax", k_softmax, 1, -1)
FLK_REGISTER("_softmax", FLK_FLOAT_TYPES, k_softmax_any);
REF_VIA_F32(k_log_softmax_any, "_log_softmax", k_log_softmax, 1, -1)
FLK_REGISTER("_log_softmax", FLK_FLOAT_TYPES, k_log_softmax_any);
REF_VIA_F32(k_softmax_backward_data_any, "_softmax_backward_data", k_softmax_backward_data, 1, 3)
FLK_REGISTER("_softmax_backward_data", FLK_FLOAT_TYPES, k_softmax_backward_data_any);
REF_VIA_F32(k_log_softmax_backward_data_any, "_log_softmax_backward_data",
            k_log_softmax_backward_data, 1, 3)
FLK_REGISTER("_log_softmax_backward_data", FLK_FLOAT_TYPES, k_log_softmax_backward_data_any);
REF_VIA_F32(k_nll_loss_forward_any, "nll_loss_forward", k_nll_loss_forward, 2, -1)
FLK_REGISTER("nll_loss_forward", FLK_FLOAT_TYPES, k_nll_loss_forward_any);
REF_VIA_F32(k_nll_loss_backward_any, "nll_loss_backward", k_nll_loss_backward, 1, -1)
FLK_REGISTER("nll_loss_backward", FLK_FLOAT_TYPES, k_nll_loss_backward_any);
