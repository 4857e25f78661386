/*
 * reduce_packed.c -- reductions beyond sum/mean: all/any, amax/amin,
 * max.dim/min.dim (values and indices), argmin, var/std/var_mean/std_mean
 * (any correction), linalg_vector_norm (any ord), prod, and the cumsum scan.
 *
 * The input is packed (float64) through a permuted view that puts the kept
 * dims first and the reduced dims last, so every output element reduces one
 * contiguous row of D values; results are written in the kept dims' order,
 * which is the output's logical order with or without keepdim.  float64
 * holds every value of the narrower dtypes exactly; int64 is not offered
 * (values beyond 2^53 would round).
 */
#include <math.h>

#include "fl_kernel.h"
#include "util/pack.h"
#include "util/reduce_dims.h"

/* every dtype float64 holds exactly: int64 is left out */
#define REAL_NO_I64 (FLK_REAL_TYPES & ~FLK_DT(FL_INT64))
#define NUM_NO_I64 (FLK_NUM_TYPES & ~FLK_DT(FL_INT64))

typedef struct red_params {
    double ord;        /* vector norm order */
    double correction; /* var / std */
} red_params;

/* o[0] (and o[1] for two-output reductions) from the row x[0..d) */
typedef void (*red_row_fn)(const double *x, int64_t d, double *o, const red_params *p);

/* the view of t with dims where rmask == last_group moved to the end */
static void permuted_view(const fl_tensor *t, const uint8_t *rmask, fl_tensor *view,
                          int64_t *sizes, int64_t *strides, int64_t *rows, int64_t *cols) {
    int k = 0;
    *rows = 1;
    *cols = 1;
    for (int pass = 0; pass < 2; ++pass)
        for (int32_t d = 0; d < t->ndim; ++d)
            if (rmask[d] == pass) {
                sizes[k] = t->sizes[d];
                strides[k++] = t->strides[d];
                *(pass ? cols : rows) *= t->sizes[d];
            }
    *view = *t;
    view->sizes = sizes;
    view->strides = strides;
}

static fl_status reduce_rows(const flk_args *a, const fl_tensor *in, const uint8_t *rmask,
                             const fl_tensor *out0, const fl_tensor *out1, red_row_fn fn,
                             const red_params *p) {
    fl_tensor view;
    int64_t sizes[FLK_MAX_DIMS], strides[FLK_MAX_DIMS], R, D;
    permuted_view(in, rmask, &view, sizes, strides, &R, &D);
    void *buf[3] = {0};
    fl_status st = ref_pack(a, &view, FL_FLOAT64, &buf[0]);
    if (st == FL_SUCCESS) st = ref_alloc_f64(a, R, (double **)&buf[1]);
    if (st == FL_SUCCESS) st = ref_alloc_f64(a, R, (double **)&buf[2]);
    if (st == FL_SUCCESS) {
        const double *x = buf[0];
        double *o0 = buf[1], *o1 = buf[2];
        for (int64_t r = 0; r < R; ++r) {
            double o[2] = {0.0, 0.0};
            fn(x + r * D, D, o, p);
            o0[r] = o[0];
            o1[r] = o[1];
        }
        ref_unpack(out0, FL_FLOAT64, o0);
        ref_unpack(out1, FL_FLOAT64, o1);
    }
    ref_free_all(buf, 3);
    return st;
}

/* ---- row reductions -------------------------------------------------------------- */

static void row_all(const double *x, int64_t d, double *o, const red_params *p) {
    (void)p;
    o[0] = 1.0;
    for (int64_t i = 0; i < d && o[0] != 0.0; ++i)
        o[0] = x[i] != 0.0;
}
static void row_any(const double *x, int64_t d, double *o, const red_params *p) {
    (void)p;
    o[0] = 0.0;
    for (int64_t i = 0; i < d && o[0] == 0.0; ++i)
        o[0] = x[i] != 0.0;
}
/* extreme value and the index of its first occurrence; NaN wins (first NaN) */
static void row_extreme(const double *x, int64_t d, double *o, int want_max) {
    int64_t best = 0;
    for (int64_t i = 1; i < d && x[best] == x[best]; ++i)
        if (x[i] != x[i] || (want_max ? x[i] > x[best] : x[i] < x[best]))
            best = i;
    o[0] = d > 0 ? x[best] : NAN;
    o[1] = (double)best;
}
static void row_max(const double *x, int64_t d, double *o, const red_params *p) {
    (void)p;
    row_extreme(x, d, o, 1);
}
static void row_min(const double *x, int64_t d, double *o, const red_params *p) {
    (void)p;
    row_extreme(x, d, o, 0);
}
static void row_argmin(const double *x, int64_t d, double *o, const red_params *p) {
    (void)p;
    row_extreme(x, d, o, 0);
    o[0] = o[1];
}
/* The mean PyTorch's var_mean/std_mean return: Welford's update, element by element.  It
 * differs from sum / d only where the row holds an infinity: one followed by any other
 * element makes inf - inf, NaN (an all -inf row's mean is NaN, not -inf). */
static double welford_mean(const double *x, int64_t d) {
    double m = 0.0;
    for (int64_t i = 0; i < d; ++i)
        m += (x[i] - m) / (double)(i + 1);
    return m;
}

/* o[0] = variance with the correction, o[1] = mean */
static void row_var(const double *x, int64_t d, double *o, const red_params *p) {
    double s = 0.0, q = 0.0;
    for (int64_t i = 0; i < d; ++i)
        s += x[i];
    const double mean = s / (double)d;
    for (int64_t i = 0; i < d; ++i)
        q += (x[i] - mean) * (x[i] - mean);
    const double denom = (double)d - p->correction;
    o[0] = q / (denom > 0.0 ? denom : 0.0);
    o[1] = isinf(mean) ? welford_mean(x, d) : mean;
}
static void row_std(const double *x, int64_t d, double *o, const red_params *p) {
    row_var(x, d, o, p);
    o[0] = sqrt(o[0]);
}
static void row_norm(const double *x, int64_t d, double *o, const red_params *p) {
    const double ord = p->ord;
    double acc = isinf(ord) ? (ord > 0 ? 0.0 : INFINITY) : 0.0;
    for (int64_t i = 0; i < d; ++i) {
        const double v = fabs(x[i]);
        if (isinf(ord))
            acc = v != v ? v : (ord > 0 ? fmax(acc, v) : fmin(acc, v));
        else if (ord == 0.0)
            acc += v != 0.0;
        else if (ord == 1.0)
            acc += v;
        else if (ord == 2.0)
            acc += v * v;
        else
            acc += pow(v, ord);
    }
    o[0] = (isinf(ord) || ord == 0.0 || ord == 1.0) ? acc : ord == 2.0 ? sqrt(acc)
                                                                      : pow(acc, 1.0 / ord);
}
static void row_prod(const double *x, int64_t d, double *o, const red_params *p) {
    (void)p;
    o[0] = 1.0;
    for (int64_t i = 0; i < d; ++i)
        o[0] *= x[i];
}

/* ---- argument patterns ------------------------------------------------------------ */

static fl_status keep_all(const fl_tensor *in, uint8_t *rmask) {
    memset(rmask, 0, FLK_MAX_DIMS);
    memset(rmask, 1, (size_t)in->ndim);
    return FL_SUCCESS;
}

/* (self, out): every dim */
static fl_status reduce_all(const char *op, const fl_arg *args, uint32_t nargs,
                            flk_ctx *ctx, red_row_fn fn) {
    flk_args a;
    const fl_tensor *in, *out;
    uint8_t rmask[FLK_MAX_DIMS];
    FLK_TRY(flk_args_init(&a, op, args, nargs, 2, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &in));
    FLK_TRY(flk_get_tensor(&a, 1, "out", &out));
    keep_all(in, rmask);
    return reduce_rows(&a, in, rmask, out, NULL, fn, NULL);
}

/* (self, dim, keepdim, outputs...): nout outputs */
static fl_status reduce_dim(const char *op, const fl_arg *args, uint32_t nargs,
                            flk_ctx *ctx, red_row_fn fn, int nout) {
    flk_args a;
    const fl_tensor *in, *o0, *o1 = NULL;
    uint8_t rmask[FLK_MAX_DIMS];
    FLK_TRY(flk_args_init(&a, op, args, nargs, (uint32_t)(3 + nout), ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &in));
    FLK_TRY(ref_reduce_dim_mask(&a, in, 1, rmask));
    FLK_TRY(flk_get_tensor(&a, 3, "out", &o0));
    if (nout == 2)
        FLK_TRY(flk_get_tensor(&a, 4, "indices", &o1));
    return reduce_rows(&a, in, rmask, o0, o1, fn, NULL);
}

FLK_KERNEL_FN(k_all) { return reduce_all("all", args, nargs, ctx, row_all); }
FLK_REGISTER("all", REAL_NO_I64, k_all);
FLK_KERNEL_FN(k_any) { return reduce_all("any", args, nargs, ctx, row_any); }
FLK_REGISTER("any", REAL_NO_I64, k_any);
FLK_KERNEL_FN(k_all_dim) { return reduce_dim("all.dim", args, nargs, ctx, row_all, 1); }
FLK_REGISTER("all.dim", REAL_NO_I64, k_all_dim);
FLK_KERNEL_FN(k_any_dim) { return reduce_dim("any.dim", args, nargs, ctx, row_any, 1); }
FLK_REGISTER("any.dim", REAL_NO_I64, k_any_dim);
FLK_KERNEL_FN(k_all_dims) { return reduce_dim("all.dims", args, nargs, ctx, row_all, 1); }
FLK_REGISTER("all.dims", REAL_NO_I64, k_all_dims);
FLK_KERNEL_FN(k_any_dims) { return reduce_dim("any.dims", args, nargs, ctx, row_any, 1); }
FLK_REGISTER("any.dims", REAL_NO_I64, k_any_dims);
FLK_KERNEL_FN(k_amax) { return reduce_dim("amax", args, nargs, ctx, row_max, 1); }
FLK_REGISTER("amax", REAL_NO_I64, k_amax);
FLK_KERNEL_FN(k_amin) { return reduce_dim("amin", args, nargs, ctx, row_min, 1); }
FLK_REGISTER("amin", REAL_NO_I64, k_amin);
FLK_KERNEL_FN(k_max_dim) { return reduce_dim("max.dim", args, nargs, ctx, row_max, 2); }
FLK_REGISTER("max.dim", REAL_NO_I64, k_max_dim);
FLK_KERNEL_FN(k_min_dim) { return reduce_dim("min.dim", args, nargs, ctx, row_min, 2); }
FLK_REGISTER("min.dim", REAL_NO_I64, k_min_dim);

/* argmin(self, dim?, keepdim) */
FLK_KERNEL_FN(k_argmin) {
    flk_args a;
    const fl_tensor *in, *out;
    uint8_t rmask[FLK_MAX_DIMS];
    FLK_TRY(flk_args_init(&a, "argmin", args, nargs, 4, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &in));
    FLK_TRY(flk_get_tensor(&a, 3, "out", &out));
    if (flk_arg_is_none(&a, 1))
        keep_all(in, rmask);
    else
        FLK_TRY(ref_reduce_dim_mask(&a, in, 1, rmask));
    /* an empty output is fine ([0, 3] over dim 1); a minimum over nothing is not */
    for (int d = 0; d < in->ndim; ++d)
        if (rmask[d] && in->sizes[d] == 0)
            return flk_fail(&a, "cannot take the argmin over dimension %d, which has size 0", d);
    return reduce_rows(&a, in, rmask, out, NULL, row_argmin, NULL);
}
FLK_REGISTER("argmin", NUM_NO_I64, k_argmin);

/* var/std .correction(self, dim?, *, correction?, keepdim) and the _mean forms */
static fl_status var_impl(const char *op, const fl_arg *args, uint32_t nargs,
                          flk_ctx *ctx, red_row_fn fn, int nout) {
    flk_args a;
    const fl_tensor *in, *o0, *o1 = NULL;
    uint8_t rmask[FLK_MAX_DIMS];
    red_params p = {0.0, 1.0};
    int present;
    flk_scalar corr;
    FLK_TRY(flk_args_init(&a, op, args, nargs, (uint32_t)(4 + nout), ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &in));
    FLK_TRY(ref_reduce_dim_mask(&a, in, 1, rmask));
    FLK_TRY(flk_get_opt_scalar(&a, 2, "correction", &present, &corr));
    FLK_TRY(flk_get_tensor(&a, 4, "out", &o0));
    if (nout == 2)
        FLK_TRY(flk_get_tensor(&a, 5, "mean", &o1));
    if (present)
        p.correction = corr.f;
    return reduce_rows(&a, in, rmask, o0, o1, fn, &p);
}
FLK_KERNEL_FN(k_var_correction) { return var_impl("var.correction", args, nargs, ctx, row_var, 1); }
FLK_REGISTER("var.correction", FLK_FLOAT_TYPES, k_var_correction);
FLK_KERNEL_FN(k_std_correction) { return var_impl("std.correction", args, nargs, ctx, row_std, 1); }
FLK_REGISTER("std.correction", FLK_FLOAT_TYPES, k_std_correction);
FLK_KERNEL_FN(k_var_mean_correction) {
    return var_impl("var_mean.correction", args, nargs, ctx, row_var, 2);
}
FLK_REGISTER("var_mean.correction", FLK_FLOAT_TYPES, k_var_mean_correction);
FLK_KERNEL_FN(k_std_mean_correction) {
    return var_impl("std_mean.correction", args, nargs, ctx, row_std, 2);
}
FLK_REGISTER("std_mean.correction", FLK_FLOAT_TYPES, k_std_mean_correction);

/* linalg_vector_norm(self, ord, dim?, keepdim, *, dtype?) */
FLK_KERNEL_FN(k_linalg_vector_norm) {
    flk_args a;
    const fl_tensor *in, *out;
    uint8_t rmask[FLK_MAX_DIMS];
    red_params p = {2.0, 0.0};
    FLK_TRY(flk_args_init(&a, "linalg_vector_norm", args, nargs, 6, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &in));
    FLK_TRY(flk_get_double(&a, 1, "ord", &p.ord));
    FLK_TRY(ref_reduce_dim_mask(&a, in, 2, rmask));
    FLK_TRY(flk_get_tensor(&a, 5, "out", &out));
    FLK_TRY(flk_check_dtype(&a, in, "self", FLK_FLOAT_TYPES));
    if (p.ord < 0 && flk_numel(in) == 0)
        return flk_fail(&a, "a negative ord needs a non-empty input");
    return reduce_rows(&a, in, rmask, out, NULL, row_norm, &p);
}
FLK_REGISTER("linalg_vector_norm", FLK_FLOAT_TYPES, k_linalg_vector_norm);

/* prod(self, *, dtype?) and prod.dim_int(self, dim, keepdim, *, dtype?) */
FLK_KERNEL_FN(k_prod) {
    flk_args a;
    const fl_tensor *in, *out;
    uint8_t rmask[FLK_MAX_DIMS];
    FLK_TRY(flk_args_init(&a, "prod", args, nargs, 3, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &in));
    FLK_TRY(flk_get_tensor(&a, 2, "out", &out));
    keep_all(in, rmask);
    return reduce_rows(&a, in, rmask, out, NULL, row_prod, NULL);
}
FLK_REGISTER("prod", FLK_FLOAT_TYPES, k_prod);
FLK_KERNEL_FN(k_prod_dim_int) {
    flk_args a;
    const fl_tensor *in, *out;
    uint8_t rmask[FLK_MAX_DIMS];
    FLK_TRY(flk_args_init(&a, "prod.dim_int", args, nargs, 5, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &in));
    FLK_TRY(ref_reduce_dim_mask(&a, in, 1, rmask));
    FLK_TRY(flk_get_tensor(&a, 4, "out", &out));
    return reduce_rows(&a, in, rmask, out, NULL, row_prod, NULL);
}
FLK_REGISTER("prod.dim_int", FLK_FLOAT_TYPES, k_prod_dim_int);

/* cumsum(self, dim, *, dtype?): a running sum along dim, in float64 */
FLK_KERNEL_FN(k_cumsum) {
    flk_args a;
    const fl_tensor *in, *out;
    uint8_t rmask[FLK_MAX_DIMS];
    FLK_TRY(flk_args_init(&a, "cumsum", args, nargs, 4, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &in));
    FLK_TRY(flk_get_tensor(&a, 3, "out", &out));
    FLK_TRY(ref_reduce_dim_mask(&a, in, 1, rmask));
    fl_tensor iv, ov;
    int64_t is[FLK_MAX_DIMS], ist[FLK_MAX_DIMS], os[FLK_MAX_DIMS], ost[FLK_MAX_DIMS], R, D;
    permuted_view(in, rmask, &iv, is, ist, &R, &D);
    permuted_view(out, rmask, &ov, os, ost, &R, &D);
    double *x;
    FLK_TRY(ref_pack(&a, &iv, FL_FLOAT64, (void **)&x));
    for (int64_t r = 0; r < R; ++r)
        for (int64_t j = 1; j < D; ++j)
            x[r * D + j] += x[r * D + j - 1];
    ref_unpack(&ov, FL_FLOAT64, x);
    flk_free(x);
    return FL_SUCCESS;
}
FLK_REGISTER("cumsum", FLK_FLOAT_TYPES, k_cumsum);
