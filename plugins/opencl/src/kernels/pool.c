/*
 * pool.c -- max_pool2d_with_indices and its backward on the nn family
 * (cl/nn.cl.h): PyTorch's window, NaN and index rules (indices flattened over
 * each input plane), the backward summing in output order as the CPU's
 * scatter does.  3-d (unbatched) and 4-d float tensors, any strides.
 */
#include "clk.h"

#define FLOATS CLK_FLOATS

/* clk_pool in cl/nn.cl.h, field for field */
typedef struct clk_pool {
    cl_long n, c, h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw;
    cl_long x_st[4], o_st[4];
} clk_pool;

/* an int[2] argument (one entry: both); empty: `fallback` */
static fl_status pair(const flk_args *a, uint32_t i, const char *name, const int64_t *fallback, int64_t *out) {
    const int64_t *v;
    uint32_t n;
    FLK_TRY(flk_get_int_list(a, i, name, &v, &n));
    if (n > 2)
        return flk_fail(a, "%s has %u entries", name, n);
    out[0] = n ? v[0] : fallback[0];
    out[1] = n ? v[n - 1] : fallback[1];
    return FL_SUCCESS;
}

/* the 4 dims (n, c, h, w) of a 3-d or 4-d tensor's sizes and strides */
static void dims4(const fl_tensor *t, int64_t *sizes, cl_long *strides) {
    int lead = 4 - t->ndim;
    for (int d = 0; d < 4; d++) {
        sizes[d] = d < lead ? 1 : t->sizes[d - lead];
        strides[d] = d < lead ? 0 : t->strides[d - lead];
    }
}

/* (self, kernel_size, stride, padding, dilation, ceil_mode): the pool geometry */
static fl_status geometry(const flk_args *a, const fl_tensor *x, const fl_tensor *y, clk_pool *p) {
    static const int64_t zeros[2] = {0, 0}, ones[2] = {1, 1};
    int64_t k[2], s[2], pad[2], dil[2];
    FLK_TRY(pair(a, 1, "kernel_size", ones, k));
    FLK_TRY(pair(a, 2, "stride", k, s));          /* stride=[] means kernel_size */
    FLK_TRY(pair(a, 3, "padding", zeros, pad));
    FLK_TRY(pair(a, 4, "dilation", ones, dil));
    if ((x->ndim != 3 && x->ndim != 4) || y->ndim != x->ndim)
        return flk_decline(a, "%d-d input (max_pool2d takes 3-d or 4-d)", x->ndim);
    if (!(CLK_FLOATS & FLK_DT(x->dtype)) || y->dtype != x->dtype)
        return flk_decline(a, "%s has no OpenCL kernel here", flk_dtype_name(x->dtype));
    if (k[0] <= 0 || k[1] <= 0 || s[0] <= 0 || s[1] <= 0 || dil[0] <= 0 || dil[1] <= 0)
        return flk_fail(a, "kernel size, stride and dilation must be positive");
    int64_t xs[4], ys[4];
    clk_pool q = {0};
    dims4(x, xs, q.x_st);
    dims4(y, ys, q.o_st);
    q.n = xs[0], q.c = xs[1], q.h = xs[2], q.w = xs[3], q.oh = ys[2], q.ow = ys[3];
    q.kh = k[0], q.kw = k[1], q.sh = s[0], q.sw = s[1], q.ph = pad[0], q.pw = pad[1], q.dh = dil[0], q.dw = dil[1];
    *p = q;
    return FL_SUCCESS;
}

/* max_pool2d_with_indices(self, kernel_size, stride, padding, dilation, ceil_mode) -> (out, indices) */
FLK_KERNEL_FN(k_max_pool) {
    flk_args a;
    const fl_tensor *x, *y, *idx;
    clk_pool p;
    FLK_TRY(flk_args_init(&a, "max_pool2d_with_indices", args, nargs, 8, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &x));
    FLK_TRY(flk_get_tensor(&a, 6, "out", &y));
    FLK_TRY(flk_get_tensor(&a, 7, "indices", &idx));
    FLK_TRY(geometry(&a, x, y, &p));
    if (idx->dtype != FL_INT64 || !flk_same_sizes(idx, y))
        return flk_fail(&a, "indices must be int64 of the output's shape");
    for (int d = 0; d < idx->ndim; d++)
        if (idx->strides[d] != y->strides[d])
            return flk_decline(&a, "indices and output of different layouts");
    if (flk_may_overlap(y, x) || flk_may_overlap(idx, x) || flk_may_overlap(idx, y))
        return flk_decline(&a, "an output overlaps an input");
    FLK_TRY(clk_need(ctx, CLK_NN, x->dtype));
    clk_launch l;
    clk_begin(&l, ctx, CLK_NN, x->dtype, "max_pool_forward");
    clk_tensor(&l, y);
    clk_tensor(&l, idx);
    clk_tensor(&l, x);
    clk_bytes(&l, &p, sizeof p);
    return clk_run(&l, p.n * p.c * p.oh * p.ow);
}
FLK_REGISTER("max_pool2d_with_indices", FLOATS, k_max_pool);

/* max_pool2d_with_indices_backward(grad_output, self, kernel_size, stride, padding, dilation,
 *                                  ceil_mode, indices) -> grad_input */
FLK_KERNEL_FN(k_max_pool_backward) {
    flk_args a;
    const fl_tensor *gy, *x, *idx, *gx;
    clk_pool p;
    FLK_TRY(flk_args_init(&a, "max_pool2d_with_indices_backward", args, nargs, 9, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "grad_output", &gy));
    FLK_TRY(flk_get_tensor(&a, 1, "self", &x));
    FLK_TRY(flk_get_tensor(&a, 7, "indices", &idx));
    FLK_TRY(flk_get_tensor(&a, 8, "grad_input", &gx));
    /* the geometry's argument positions are the forward's, one later */
    flk_args shifted = a;
    shifted.args = a.args + 1;
    shifted.nargs = a.nargs - 1;
    FLK_TRY(geometry(&shifted, x, gy, &p));
    if (idx->dtype != FL_INT64 || !flk_same_sizes(idx, gy))
        return flk_fail(&a, "indices must be int64 of grad_output's shape");
    for (int d = 0; d < idx->ndim; d++)
        if (idx->strides[d] != gy->strides[d])
            return flk_decline(&a, "indices and grad_output of different layouts");
    if (gx->dtype != x->dtype || !flk_same_sizes(gx, x))
        return flk_fail(&a, "grad_input must have self's dtype and shape");
    int64_t sizes[4];
    dims4(gx, sizes, p.x_st);                     /* the kernel writes grad_input with these */
    if (flk_may_overlap(gx, gy) || flk_may_overlap(gx, idx))
        return flk_decline(&a, "grad_input overlaps an input");
    FLK_TRY(clk_need(ctx, CLK_NN, x->dtype));
    clk_launch l;
    clk_begin(&l, ctx, CLK_NN, x->dtype, "max_pool_backward");
    clk_tensor(&l, gx);
    clk_tensor(&l, gy);
    clk_tensor(&l, idx);
    clk_bytes(&l, &p, sizeof p);
    return clk_run(&l, p.n * p.c * p.h * p.w);
}
FLK_REGISTER("max_pool2d_with_indices_backward", FLOATS, k_max_pool_backward);
