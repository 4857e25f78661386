/*
 * norm.c -- native_layer_norm and its backward on the nn family
 * (cl/nn.cl.h): one work-group per row of the normalized shape.  Contiguous
 * tensors of one float dtype (mean and rstd float32 for float16); anything
 * else declines.
 */
#include "clk.h"

#define FLOATS CLK_FLOATS

typedef struct ln_shape {
    int64_t rows, n;
} ln_shape;

/* mean and rstd are float32 for a float16 input (the kernels' ACC), as PyTorch's */
static int32_t statistics_dtype(int32_t dtype) { return dtype == FL_FLOAT16 ? FL_FLOAT32 : dtype; }

/* rows x n of a contiguous input whose last dims are normalized_shape */
static fl_status shape_of(const flk_args *a, uint32_t i, const fl_tensor *x, ln_shape *s) {
    const int64_t *shape;
    uint32_t count;
    FLK_TRY(flk_get_int_list(a, i, "normalized_shape", &shape, &count));
    if ((int32_t)count > x->ndim)
        return flk_fail(a, "normalized_shape has more dimensions than the input");
    s->n = 1;
    for (uint32_t k = 0; k < count; k++) {
        if (x->sizes[x->ndim - (int32_t)count + (int32_t)k] != shape[k])
            return flk_fail(a, "normalized_shape does not match the input's last dimensions");
        s->n *= shape[k];
    }
    s->rows = s->n ? flk_numel(x) / s->n : 0;
    return FL_SUCCESS;
}

/* every given tensor contiguous, of `dtype`, with `numel` elements */
static fl_status plain(const flk_args *a, int32_t dtype, const fl_tensor *t, const char *name, int64_t numel) {
    if (!t)
        return FL_SUCCESS;
    if (t->dtype != dtype)
        return flk_decline(a, "%s is %s, expected %s", name, flk_dtype_name(t->dtype), flk_dtype_name(dtype));
    if (!flk_is_contiguous(t))
        return flk_decline(a, "%s is not contiguous", name);
    if (flk_numel(t) != numel)
        return flk_fail(a, "%s has %lld elements, expected %lld", name, (long long)flk_numel(t), (long long)numel);
    return FL_SUCCESS;
}

/* native_layer_norm(input, normalized_shape, weight, bias, eps) -> (out, mean, rstd) */
FLK_KERNEL_FN(k_layer_norm) {
    flk_args a;
    const fl_tensor *x, *w, *b, *y, *mean, *rstd;
    double eps;
    ln_shape s;
    FLK_TRY(flk_args_init(&a, "native_layer_norm", args, nargs, 8, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "input", &x));
    FLK_TRY(shape_of(&a, 1, x, &s));
    FLK_TRY(flk_get_opt_tensor(&a, 2, "weight", &w));
    FLK_TRY(flk_get_opt_tensor(&a, 3, "bias", &b));
    FLK_TRY(flk_get_double(&a, 4, "eps", &eps));
    FLK_TRY(flk_get_tensor(&a, 5, "out", &y));
    FLK_TRY(flk_get_tensor(&a, 6, "mean", &mean));
    FLK_TRY(flk_get_tensor(&a, 7, "rstd", &rstd));
    if (!(CLK_FLOATS & FLK_DT(x->dtype)))
        return flk_decline(&a, "%s has no OpenCL kernel here", flk_dtype_name(x->dtype));
    int32_t dt = x->dtype, stats = statistics_dtype(dt);
    FLK_TRY(plain(&a, dt, x, "input", flk_numel(x)));
    FLK_TRY(plain(&a, dt, y, "out", flk_numel(x)));
    FLK_TRY(plain(&a, dt, w, "weight", s.n));
    FLK_TRY(plain(&a, dt, b, "bias", s.n));
    FLK_TRY(plain(&a, stats, mean, "mean", s.rows));
    FLK_TRY(plain(&a, stats, rstd, "rstd", s.rows));
    if (flk_may_overlap(y, x))
        return flk_decline(&a, "the output overlaps the input");
    FLK_TRY(clk_need(ctx, CLK_NN, x->dtype));
    if (s.n == 0)
        return flk_decline(&a, "an empty normalized shape");
    clk_launch l;
    clk_begin(&l, ctx, CLK_NN, x->dtype, "layer_norm");
    clk_tensor(&l, y);
    clk_tensor(&l, x);
    clk_opt_tensor(&l, w);
    clk_opt_tensor(&l, b);
    clk_tensor(&l, mean);
    clk_tensor(&l, rstd);
    clk_long(&l, s.n);
    clk_scalar(&l, eps);
    return clk_run_groups(&l, s.rows);
}
FLK_REGISTER("native_layer_norm", FLOATS, k_layer_norm);

/* native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask)
 *   -> (grad_input?, grad_weight?, grad_bias?) */
FLK_KERNEL_FN(k_layer_norm_backward) {
    flk_args a;
    const fl_tensor *dy, *x, *mean, *rstd, *w, *b, *dx, *dw, *db;
    ln_shape s;
    FLK_TRY(flk_args_init(&a, "native_layer_norm_backward", args, nargs, 11, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "grad_out", &dy));
    FLK_TRY(flk_get_tensor(&a, 1, "input", &x));
    FLK_TRY(shape_of(&a, 2, x, &s));
    FLK_TRY(flk_get_tensor(&a, 3, "mean", &mean));
    FLK_TRY(flk_get_tensor(&a, 4, "rstd", &rstd));
    FLK_TRY(flk_get_opt_tensor(&a, 5, "weight", &w));
    FLK_TRY(flk_get_opt_tensor(&a, 6, "bias", &b));
    FLK_TRY(flk_get_opt_tensor(&a, 8, "grad_input", &dx));
    FLK_TRY(flk_get_opt_tensor(&a, 9, "grad_weight", &dw));
    FLK_TRY(flk_get_opt_tensor(&a, 10, "grad_bias", &db));
    if (!(CLK_FLOATS & FLK_DT(x->dtype)))
        return flk_decline(&a, "%s has no OpenCL kernel here", flk_dtype_name(x->dtype));
    int32_t dt = x->dtype, stats = statistics_dtype(dt);
    FLK_TRY(plain(&a, dt, x, "input", flk_numel(x)));
    FLK_TRY(plain(&a, dt, dy, "grad_out", flk_numel(x)));
    FLK_TRY(plain(&a, stats, mean, "mean", s.rows));
    FLK_TRY(plain(&a, stats, rstd, "rstd", s.rows));
    FLK_TRY(plain(&a, dt, w, "weight", s.n));
    FLK_TRY(plain(&a, dt, dx, "grad_input", flk_numel(x)));
    FLK_TRY(plain(&a, dt, dw, "grad_weight", s.n));
    FLK_TRY(plain(&a, dt, db, "grad_bias", s.n));
    (void)b;
    const fl_tensor *outs[3] = {dx, dw, db}, *ins[5] = {dy, x, mean, rstd, w};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 5; j++)
            if (outs[i] && ins[j] && flk_may_overlap(outs[i], ins[j]))
                return flk_decline(&a, "an output overlaps an input");
    FLK_TRY(clk_need(ctx, CLK_NN, x->dtype));
    if (dx) {
        clk_launch l;
        clk_begin(&l, ctx, CLK_NN, x->dtype, "layer_norm_backward");
        clk_tensor(&l, dx);
        clk_tensor(&l, dy);
        clk_tensor(&l, x);
        clk_tensor(&l, mean);
        clk_tensor(&l, rstd);
        clk_opt_tensor(&l, w);
        clk_long(&l, s.n);
        FLK_TRY(clk_run_groups(&l, s.n ? s.rows : 0));
    }
    if (dw || db) {
        clk_launch l;
        clk_begin(&l, ctx, CLK_NN, x->dtype, "layer_norm_params_backward");
        clk_opt_tensor(&l, dw);
        clk_opt_tensor(&l, db);
        clk_tensor(&l, dy);
        clk_tensor(&l, x);
        clk_tensor(&l, mean);
        clk_tensor(&l, rstd);
        clk_long(&l, s.rows);
        clk_long(&l, s.n);
        FLK_TRY(clk_run(&l, s.n));
    }
    return FL_SUCCESS;
}
FLK_REGISTER("native_layer_norm_backward", FLOATS, k_layer_norm_backward);
