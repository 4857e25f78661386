/*
 * reduce.c -- sum, mean, amax/amin and max/min (whole tensor) on the
 * reduction family (reduce.h, cl/reduce.cl.h).  A dtype= argument other than
 * the input's declines (the runtime converts elsewhere).
 */
#include "reduce.h"

#include <string.h>

#define FLOATS CLK_FLOATS

/* The kernel's argument struct: clk_reduce in cl/reduce.cl.h, field for field. */
typedef struct clk_reduce {
    cl_long nkeep, nred, outputs, count;
    cl_long keep_size[CLK_MAX_DIMS], keep_in[CLK_MAX_DIMS], keep_out[CLK_MAX_DIMS];
    cl_long red_size[CLK_MAX_DIMS], red_in[CLK_MAX_DIMS];
} clk_reduce;

/* Split x's dimensions into kept (with the output's strides) and reduced, and
 * coalesce each set.  *empty_out when there is no output element. */
static fl_status layout(const flk_args *a, const fl_tensor *out, const fl_tensor *x, uint64_t dims, int keepdim,
                        clk_reduce *r, int *empty_out) {
    int64_t keep_sizes[FLK_MAX_DIMS], red_sizes[FLK_MAX_DIMS];
    int64_t keep_st[2][FLK_MAX_DIMS], red_st[1][FLK_MAX_DIMS], sz[FLK_MAX_DIMS], st[2][FLK_MAX_DIMS];
    int nk = 0, nr = 0, od = 0;
    for (int d = 0; d < x->ndim; d++) {
        if (dims >> d & 1) {
            red_sizes[nr] = x->sizes[d];
            red_st[0][nr++] = x->strides[d];
            od += keepdim;
        } else {
            if (od >= out->ndim || out->sizes[od] != x->sizes[d])
                return flk_fail(a, "the output's shape does not match the reduction");
            keep_sizes[nk] = x->sizes[d];
            keep_st[0][nk] = x->strides[d];
            keep_st[1][nk++] = out->strides[od++];
        }
    }
    memset(r, 0, sizeof *r);
    int nkeep = flk_simplify_dims(nk, keep_sizes, 2, keep_st, -1, sz, st);
    *empty_out = nkeep < 0;
    if (nkeep > CLK_MAX_DIMS)
        return flk_decline(a, "%d kept dimensions after coalescing", nkeep);
    r->nkeep = nkeep < 0 ? 0 : nkeep;
    r->outputs = 1;
    for (int d = 0; d < r->nkeep; d++) {
        r->keep_size[d] = sz[d];
        r->keep_in[d] = st[0][d];
        r->keep_out[d] = st[1][d];
        r->outputs *= sz[d];
    }
    int nred = flk_simplify_dims(nr, red_sizes, 1, red_st, -1, sz, st);
    if (nred > CLK_MAX_DIMS)
        return flk_decline(a, "%d reduced dimensions after coalescing", nred);
    r->nred = nred < 0 ? 0 : nred;
    r->count = nred < 0 ? 0 : 1;
    for (int d = 0; d < r->nred; d++) {
        r->red_size[d] = sz[d];
        r->red_in[d] = st[0][d];
        r->count *= sz[d];
    }
    return FL_SUCCESS;
}

fl_status reduce_run(const flk_args *a, const fl_tensor *out, const fl_tensor *x, uint64_t dims, int keepdim,
                     int op, double divisor) {
    if (!(CLK_FLOATS & FLK_DT(x->dtype)) || out->dtype != x->dtype)
        return flk_decline(a, "%s -> %s has no OpenCL kernel here", flk_dtype_name(x->dtype),
                           flk_dtype_name(out->dtype));
    if (flk_may_overlap(out, x))
        return flk_decline(a, "the output overlaps the input");
    clk_reduce r;
    int empty = 0;
    FLK_TRY(layout(a, out, x, dims, keepdim, &r, &empty));
    if ((op == CLK_R_MAX || op == CLK_R_MIN) && r.count == 0 && !empty)
        return flk_decline(a, "max/min of an empty selection (PyTorch raises)");
    FLK_TRY(clk_need(a->ctx, CLK_REDUCE, x->dtype));
    if (empty)
        return FL_SUCCESS;
    int per_group = r.count >= 256 || r.outputs <= 64;
    clk_launch l;
    clk_begin(&l, a->ctx, CLK_REDUCE, x->dtype, per_group ? "reduce_groups" : "reduce_items");
    clk_tensor(&l, out);
    clk_tensor(&l, x);
    clk_bytes(&l, &r, sizeof r);
    clk_int(&l, op);
    clk_scalar(&l, divisor);
    return per_group ? clk_run_groups(&l, r.outputs) : clk_run(&l, r.outputs);
}

/* ---- the kernels ------------------------------------------------------------------ */

static uint64_t all_dims(const fl_tensor *x) { return x->ndim >= 64 ? ~0ull : (1ull << x->ndim) - 1; }

/* The dims bit set of an int[]? argument; absent or empty: every dimension. */
static fl_status dims_of(const flk_args *a, uint32_t i, const fl_tensor *x, uint64_t *dims) {
    int present = 1;
    const int64_t *vals = NULL;
    uint32_t count = 0;
    if (i < a->nargs && a->args[i].kind == FL_ARG_NONE)
        present = 0;
    else
        FLK_TRY(flk_get_opt_int_list(a, i, "dim", &present, &vals, &count));
    *dims = 0;
    if (!present || count == 0) {
        *dims = all_dims(x);
        return FL_SUCCESS;
    }
    for (uint32_t k = 0; k < count; k++) {
        int32_t d;
        FLK_TRY(flk_wrap_dim(a, vals[k], x->ndim, &d));
        if (*dims >> d & 1)
            return flk_fail(a, "dimension %d appears twice", d);
        *dims |= 1ull << d;
    }
    return FL_SUCCESS;
}

static fl_status check_dtype_arg(const flk_args *a, uint32_t i, const fl_tensor *x) {
    int present;
    int32_t dtype;
    FLK_TRY(flk_get_opt_dtype(a, i, "dtype", &present, &dtype));
    if (present && dtype != x->dtype)
        return flk_decline(a, "dtype=%s differs from the input's %s", flk_dtype_name(dtype), flk_dtype_name(x->dtype));
    return FL_SUCCESS;
}

static double count_of(const fl_tensor *x, uint64_t dims) {
    double n = 1;
    for (int d = 0; d < x->ndim; d++)
        if (dims >> d & 1)
            n *= (double)x->sizes[d];
    return n;
}

/* sum.dim_IntList / mean.dim (self, dim, keepdim, dtype, out) */
static fl_status over_dims(const char *op, int mean, const fl_arg *args, uint32_t nargs, flk_ctx *ctx) {
    flk_args a;
    const fl_tensor *x, *out;
    uint64_t dims;
    int keepdim;
    FLK_TRY(flk_args_init(&a, op, args, nargs, 5, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &x));
    FLK_TRY(dims_of(&a, 1, x, &dims));
    FLK_TRY(flk_get_bool(&a, 2, "keepdim", &keepdim));
    FLK_TRY(check_dtype_arg(&a, 3, x));
    FLK_TRY(flk_get_tensor(&a, 4, "out", &out));
    return reduce_run(&a, out, x, dims, keepdim, CLK_R_SUM, mean ? count_of(x, dims) : 1.0);
}
FLK_KERNEL_FN(k_sum_dim) { return over_dims("sum.dim_IntList", 0, args, nargs, ctx); }
FLK_REGISTER("sum.dim_IntList", FLOATS, k_sum_dim);
FLK_KERNEL_FN(k_mean_dim) { return over_dims("mean.dim", 1, args, nargs, ctx); }
FLK_REGISTER("mean.dim", FLOATS, k_mean_dim);

/* sum / mean (self, dtype, out): every element */
static fl_status whole(const char *op, int mean, const fl_arg *args, uint32_t nargs, flk_ctx *ctx) {
    flk_args a;
    const fl_tensor *x, *out;
    FLK_TRY(flk_args_init(&a, op, args, nargs, 3, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &x));
    FLK_TRY(check_dtype_arg(&a, 1, x));
    FLK_TRY(flk_get_tensor(&a, 2, "out", &out));
    return reduce_run(&a, out, x, all_dims(x), 0, CLK_R_SUM, mean ? (double)flk_numel(x) : 1.0);
}
FLK_KERNEL_FN(k_sum) { return whole("sum", 0, args, nargs, ctx); }
FLK_REGISTER("sum", FLOATS, k_sum);
FLK_KERNEL_FN(k_mean) { return whole("mean", 1, args, nargs, ctx); }
FLK_REGISTER("mean", FLOATS, k_mean);

/* amax / amin (self, dim[], keepdim, out) */
static fl_status extreme(const char *op, int code, const fl_arg *args, uint32_t nargs, flk_ctx *ctx) {
    flk_args a;
    const fl_tensor *x, *out;
    uint64_t dims;
    int keepdim;
    FLK_TRY(flk_args_init(&a, op, args, nargs, 4, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &x));
    FLK_TRY(dims_of(&a, 1, x, &dims));
    FLK_TRY(flk_get_bool(&a, 2, "keepdim", &keepdim));
    FLK_TRY(flk_get_tensor(&a, 3, "out", &out));
    return reduce_run(&a, out, x, dims, keepdim, code, 1.0);
}
FLK_KERNEL_FN(k_amax) { return extreme("amax", CLK_R_MAX, args, nargs, ctx); }
FLK_REGISTER("amax", FLOATS, k_amax);
FLK_KERNEL_FN(k_amin) { return extreme("amin", CLK_R_MIN, args, nargs, ctx); }
FLK_REGISTER("amin", FLOATS, k_amin);

/* max / min (self, out): every element */
static fl_status extreme_all(const char *op, int code, const fl_arg *args, uint32_t nargs, flk_ctx *ctx) {
    flk_args a;
    const fl_tensor *x, *out;
    FLK_TRY(flk_args_init(&a, op, args, nargs, 2, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &x));
    FLK_TRY(flk_get_tensor(&a, 1, "out", &out));
    if (flk_numel(x) == 0)
        return flk_fail(&a, "max/min of an empty tensor has no identity");
    return reduce_run(&a, out, x, all_dims(x), 0, code, 1.0);
}
FLK_KERNEL_FN(k_max) { return extreme_all("max", CLK_R_MAX, args, nargs, ctx); }
FLK_REGISTER("max", FLOATS, k_max);
FLK_KERNEL_FN(k_min) { return extreme_all("min", CLK_R_MIN, args, nargs, ctx); }
FLK_REGISTER("min", FLOATS, k_min);
