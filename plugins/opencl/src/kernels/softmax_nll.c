/*
 * softmax_nll.c -- _softmax, _log_softmax, their backwards and nll_loss
 * (forward and backward) on the nn family (cl/nn.cl.h): what
 * nn.functional.cross_entropy runs.  Any strides; one dtype per call
 * (half_to_float declines); targets are int64 and one out of range is
 * reported by the stream's device-side check (clk.h).
 */
#include <string.h>

#include "clk.h"

#define FLOATS CLK_FLOATS

/* clk_rows in cl/nn.cl.h, field for field */
typedef struct clk_rows {
    cl_long nd, rows, k;
    cl_long size[CLK_MAX_DIMS];
    cl_long stride[3][CLK_MAX_DIMS];
    cl_long kstride[3];
} clk_rows;

static fl_status same_dtype(const flk_args *a, const fl_tensor *x, const fl_tensor *y) {
    if (!(CLK_FLOATS & FLK_DT(x->dtype)))
        return flk_decline(a, "%s has no OpenCL kernel here", flk_dtype_name(x->dtype));
    if (y && y->dtype != x->dtype)
        return flk_decline(a, "mixed dtypes (%s and %s)", flk_dtype_name(x->dtype), flk_dtype_name(y->dtype));
    return FL_SUCCESS;
}

/* The rows along `dim` of up to three same-shaped tensors; *empty when none. */
static fl_status rows_of(const flk_args *a, const fl_tensor *const *ts, int nops, int32_t dim, clk_rows *r,
                         int *empty) {
    int64_t sizes[FLK_MAX_DIMS], strides[3][FLK_MAX_DIMS], sz[FLK_MAX_DIMS], st[3][FLK_MAX_DIMS];
    int n = 0;
    memset(r, 0, sizeof *r);
    memset(strides, 0, sizeof strides);
    r->k = ts[0]->ndim ? ts[0]->sizes[dim] : 1;
    for (int d = 0; d < ts[0]->ndim; d++) {
        for (int k = 0; k < nops; k++)
            if (ts[k]->sizes[d] != ts[0]->sizes[d])
                return flk_fail(a, "the tensors' shapes differ");
        if (d == dim) {
            for (int k = 0; k < nops; k++)
                r->kstride[k] = ts[k]->strides[d];
            continue;
        }
        sizes[n] = ts[0]->sizes[d];
        for (int k = 0; k < nops; k++)
            strides[k][n] = ts[k]->strides[d];
        n++;
    }
    int nd = flk_simplify_dims(n, sizes, nops, strides, -1, sz, st);
    *empty = nd < 0 || r->k == 0;
    if (nd > CLK_MAX_DIMS)
        return flk_decline(a, "%d dimensions after coalescing", nd);
    r->nd = nd < 0 ? 0 : nd;
    r->rows = 1;
    for (int d = 0; d < r->nd; d++) {
        r->size[d] = sz[d];
        r->rows *= sz[d];
        for (int k = 0; k < nops; k++)
            r->stride[k][d] = st[k][d];
    }
    return FL_SUCCESS;
}

static fl_status no_overlap(const flk_args *a, const fl_tensor *out, const fl_tensor *x, const fl_tensor *y) {
    if (flk_may_overlap(out, x) || (y && flk_may_overlap(out, y)))
        return flk_decline(a, "the output overlaps an input");
    return FL_SUCCESS;
}

/* _softmax / _log_softmax (self, dim, half_to_float, out) */
static fl_status forward(const char *op, int log_form, const fl_arg *args, uint32_t nargs, flk_ctx *ctx) {
    flk_args a;
    const fl_tensor *x, *out;
    int64_t dim;
    int half_to_float;
    FLK_TRY(flk_args_init(&a, op, args, nargs, 4, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &x));
    FLK_TRY(flk_get_int(&a, 1, "dim", &dim));
    FLK_TRY(flk_get_bool(&a, 2, "half_to_float", &half_to_float));
    FLK_TRY(flk_get_tensor(&a, 3, "out", &out));
    if (half_to_float)
        return flk_decline(&a, "half_to_float runs elsewhere");
    FLK_TRY(same_dtype(&a, x, out));
    FLK_TRY(no_overlap(&a, out, x, NULL));
    int32_t d;
    FLK_TRY(flk_wrap_dim(&a, dim, x->ndim, &d));
    clk_rows r;
    int empty = 0;
    FLK_TRY(rows_of(&a, (const fl_tensor *[]){out, x}, 2, d, &r, &empty));
    FLK_TRY(clk_need(ctx, CLK_NN, x->dtype));
    if (empty)
        return FL_SUCCESS;
    clk_launch l;
    clk_begin(&l, ctx, CLK_NN, x->dtype, "softmax_forward");
    clk_tensor(&l, out);
    clk_tensor(&l, x);
    clk_bytes(&l, &r, sizeof r);
    clk_int(&l, log_form);
    return clk_run_groups(&l, r.rows);
}
FLK_KERNEL_FN(k_softmax) { return forward("_softmax", 0, args, nargs, ctx); }
FLK_REGISTER("_softmax", FLOATS, k_softmax);
FLK_KERNEL_FN(k_log_softmax) { return forward("_log_softmax", 1, args, nargs, ctx); }
FLK_REGISTER("_log_softmax", FLOATS, k_log_softmax);

/* _softmax_backward_data / _log_softmax_backward_data (grad_output, output, dim, input_dtype, out) */
static fl_status backward(const char *op, int log_form, const fl_arg *args, uint32_t nargs, flk_ctx *ctx) {
    flk_args a;
    const fl_tensor *g, *y, *out;
    int64_t dim, input_dtype;
    FLK_TRY(flk_args_init(&a, op, args, nargs, 5, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "grad_output", &g));
    FLK_TRY(flk_get_tensor(&a, 1, "output", &y));
    FLK_TRY(flk_get_int(&a, 2, "dim", &dim));
    FLK_TRY(flk_get_int(&a, 3, "input_dtype", &input_dtype));
    FLK_TRY(flk_get_tensor(&a, 4, "out", &out));
    FLK_TRY(same_dtype(&a, g, y));
    FLK_TRY(same_dtype(&a, g, out));
    if (input_dtype != g->dtype)
        return flk_decline(&a, "input_dtype differs from the gradient's");
    FLK_TRY(no_overlap(&a, out, g, y));
    int32_t d;
    FLK_TRY(flk_wrap_dim(&a, dim, g->ndim, &d));
    clk_rows r;
    int empty = 0;
    FLK_TRY(rows_of(&a, (const fl_tensor *[]){out, g, y}, 3, d, &r, &empty));
    FLK_TRY(clk_need(ctx, CLK_NN, g->dtype));
    if (empty)
        return FL_SUCCESS;
    clk_launch l;
    clk_begin(&l, ctx, CLK_NN, g->dtype, "softmax_backward");
    clk_tensor(&l, out);
    clk_tensor(&l, g);
    clk_tensor(&l, y);
    clk_bytes(&l, &r, sizeof r);
    clk_int(&l, log_form);
    return clk_run_groups(&l, r.rows);
}
FLK_KERNEL_FN(k_softmax_bw) { return backward("_softmax_backward_data", 0, args, nargs, ctx); }
FLK_REGISTER("_softmax_backward_data", FLOATS, k_softmax_bw);
FLK_KERNEL_FN(k_log_softmax_bw) { return backward("_log_softmax_backward_data", 1, args, nargs, ctx); }
FLK_REGISTER("_log_softmax_backward_data", FLOATS, k_log_softmax_bw);

/* ---- nll_loss ---------------------------------------------------------------------- */

typedef struct nll_shape {
    int64_t n, c, xs_n, xs_c, ts, ws;
} nll_shape;

/* self [n, c] or [c], target [n] or [], weight [c] or none */
static fl_status nll_shape_of(const flk_args *a, const fl_tensor *x, const fl_tensor *target, const fl_tensor *w,
                              nll_shape *s) {
    if (x->ndim != 1 && x->ndim != 2)
        return flk_decline(a, "input of %d dimensions (nll_loss2d's shapes run elsewhere)", x->ndim);
    if (target->dtype != FL_INT64)
        return flk_decline(a, "targets of %s (int64 only)", flk_dtype_name(target->dtype));
    s->n = x->ndim == 2 ? x->sizes[0] : 1;
    s->c = x->sizes[x->ndim - 1];
    s->xs_n = x->ndim == 2 ? x->strides[0] : 0;
    s->xs_c = x->strides[x->ndim - 1];
    if (flk_numel(target) != s->n || target->ndim > 1)
        return flk_fail(a, "target has %lld elements for a batch of %lld", (long long)flk_numel(target),
                        (long long)s->n);
    s->ts = target->ndim == 1 ? target->strides[0] : 0;
    if (w && (w->ndim != 1 || w->sizes[0] != s->c))
        return flk_fail(a, "weight must have %lld elements", (long long)s->c);
    if (w && w->dtype != x->dtype)
        return flk_decline(a, "weight of another dtype");
    s->ws = w ? w->strides[0] : 0;
    return FL_SUCCESS;
}

/* nll_loss_forward(self, target, weight, reduction, ignore_index) -> (output, total_weight) */
FLK_KERNEL_FN(k_nll_forward) {
    flk_args a;
    const fl_tensor *x, *target, *w, *out, *total;
    int64_t reduction, ignore_index;
    FLK_TRY(flk_args_init(&a, "nll_loss_forward", args, nargs, 7, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &x));
    FLK_TRY(flk_get_tensor(&a, 1, "target", &target));
    FLK_TRY(flk_get_opt_tensor(&a, 2, "weight", &w));
    FLK_TRY(flk_get_int(&a, 3, "reduction", &reduction));
    FLK_TRY(flk_get_int(&a, 4, "ignore_index", &ignore_index));
    FLK_TRY(flk_get_tensor(&a, 5, "output", &out));
    FLK_TRY(flk_get_tensor(&a, 6, "total_weight", &total));
    FLK_TRY(same_dtype(&a, x, out));
    FLK_TRY(same_dtype(&a, x, total));
    if (reduction < 0 || reduction > 2)
        return flk_fail(&a, "reduction %lld is not 0 (none), 1 (mean) or 2 (sum)", (long long)reduction);
    nll_shape s;
    FLK_TRY(nll_shape_of(&a, x, target, w, &s));
    if (reduction == 0 && x->ndim == 1)
        return flk_decline(&a, "an unbatched input without reduction");
    FLK_TRY(clk_need(ctx, CLK_NN, x->dtype));
    clk_launch l;
    clk_begin(&l, ctx, CLK_NN, x->dtype, reduction == 0 ? "nll_forward_each" : "nll_forward_reduce");
    clk_tensor(&l, out);
    clk_tensor(&l, total);
    clk_tensor(&l, x);
    clk_tensor(&l, target);
    clk_opt_tensor(&l, w);
    clk_long(&l, s.n);
    clk_long(&l, s.c);
    clk_long(&l, s.xs_n);
    clk_long(&l, s.xs_c);
    clk_long(&l, s.ts);
    if (reduction == 0)
        clk_long(&l, out->strides[0]);
    clk_long(&l, s.ws);
    clk_long(&l, ignore_index);
    if (reduction != 0)
        clk_int(&l, reduction == 1);
    clk_checks(&l);
    return reduction == 0 ? clk_run(&l, s.n > 0 ? s.n : 1) : clk_run_groups(&l, 1);
}
FLK_REGISTER("nll_loss_forward", FLOATS, k_nll_forward);

/* nll_loss_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight) -> grad_input */
FLK_KERNEL_FN(k_nll_backward) {
    flk_args a;
    const fl_tensor *g, *x, *target, *w, *total, *gi;
    int64_t reduction, ignore_index;
    FLK_TRY(flk_args_init(&a, "nll_loss_backward", args, nargs, 8, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "grad_output", &g));
    FLK_TRY(flk_get_tensor(&a, 1, "self", &x));
    FLK_TRY(flk_get_tensor(&a, 2, "target", &target));
    FLK_TRY(flk_get_opt_tensor(&a, 3, "weight", &w));
    FLK_TRY(flk_get_int(&a, 4, "reduction", &reduction));
    FLK_TRY(flk_get_int(&a, 5, "ignore_index", &ignore_index));
    FLK_TRY(flk_get_tensor(&a, 6, "total_weight", &total));
    FLK_TRY(flk_get_tensor(&a, 7, "grad_input", &gi));
    FLK_TRY(same_dtype(&a, x, g));
    FLK_TRY(same_dtype(&a, x, gi));
    FLK_TRY(same_dtype(&a, x, total));
    nll_shape s;
    FLK_TRY(nll_shape_of(&a, x, target, w, &s));
    if (reduction == 0 && (x->ndim == 1 || flk_numel(g) != s.n))
        return flk_decline(&a, "an unreduced gradient of another shape");
    if (flk_may_overlap(gi, g) || flk_may_overlap(gi, x))
        return flk_decline(&a, "the output overlaps an input");
    FLK_TRY(clk_need(ctx, CLK_NN, x->dtype));
    clk_launch l;
    clk_begin(&l, ctx, CLK_NN, x->dtype, "nll_backward");
    clk_tensor(&l, gi);
    clk_tensor(&l, g);
    clk_tensor(&l, target);
    clk_opt_tensor(&l, w);
    clk_tensor(&l, total);
    clk_long(&l, s.n);
    clk_long(&l, s.c);
    clk_long(&l, gi->ndim == 2 ? gi->strides[0] : 0);
    clk_long(&l, gi->strides[gi->ndim - 1]);
    clk_long(&l, s.ts);
    clk_long(&l, reduction == 0 && g->ndim == 1 ? g->strides[0] : 0);
    clk_long(&l, s.ws);
    clk_int(&l, (int32_t)reduction);
    clk_long(&l, ignore_index);
    return clk_run(&l, s.n * s.c);
}
FLK_REGISTER("nll_loss_backward", FLOATS, k_nll_backward);
