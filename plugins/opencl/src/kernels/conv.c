/*
 * conv.c -- 2-d convolution forward and backward as im2col + the matrix
 * product (cl/nn.cl.h's im2col/col2im, gemm.h), the bias gradient as a
 * reduction (reduce.h).  groups 1, not transposed, 4-d input and weight of
 * one float dtype; everything else (3-d, grouped, transposed convolutions)
 * declines and runs through the runtime's fallback.
 */
#include <string.h>

#include "gemm.h"
#include "reduce.h"

#define FLOATS CLK_FLOATS
#define MAX_COLUMN_BYTES (512ull << 20)   /* one im2col larger than this declines */

/* clk_conv in cl/nn.cl.h, field for field */
typedef struct clk_conv {
    cl_long n, c, h, w, kh, kw, oh, ow;
    cl_long sh, sw, ph, pw, dh, dw;
    cl_long x_st[4];
    cl_long col_bs, col_ks, col_ps;
} clk_conv;

/* the one stride of dims [from, 4) of a 4-d tensor taken as one dimension
 * (0 for a broadcast one), or -1 when they do not merge */
static int64_t merged_stride(const fl_tensor *t, int from) {
    int64_t stride = 1, expect = 0;
    int found = 0;
    for (int d = 3; d >= from; d--) {
        if (t->sizes[d] == 1)
            continue;
        if (found && t->strides[d] != expect)
            return -1;
        if (!found)
            stride = t->strides[d];
        found = 1;
        expect = t->strides[d] * t->sizes[d];
    }
    return stride;
}

static fl_status pair(const flk_args *a, uint32_t i, const char *name, int64_t *out) {
    const int64_t *v;
    uint32_t n;
    FLK_TRY(flk_get_int_list(a, i, name, &v, &n));
    if (n != 1 && n != 2)
        return flk_decline(a, "%s has %u entries (2-d convolutions only)", name, n);
    out[0] = v[0];
    out[1] = v[n - 1];
    return FL_SUCCESS;
}

typedef struct conv_setup {
    clk_conv v;
    int64_t oc, ckk, p;
} conv_setup;

/* (input, weight, ..., stride, padding, dilation, transposed, output_padding, groups) at `first` = stride */
static fl_status setup(const flk_args *a, const fl_tensor *x, const fl_tensor *w, uint32_t first,
                       const fl_tensor *y_or_gy, conv_setup *s) {
    int64_t stride[2], padding[2], dilation[2], groups;
    int transposed;
    FLK_TRY(pair(a, first, "stride", stride));
    FLK_TRY(pair(a, first + 1, "padding", padding));
    FLK_TRY(pair(a, first + 2, "dilation", dilation));
    FLK_TRY(flk_get_bool(a, first + 3, "transposed", &transposed));
    FLK_TRY(flk_get_int(a, first + 5, "groups", &groups));
    if (x->ndim != 4 || w->ndim != 4)
        return flk_decline(a, "a %d-d input (2-d convolutions only)", x->ndim);
    if (transposed || groups != 1)
        return flk_decline(a, "transposed or grouped convolutions run elsewhere");
    if (!(CLK_FLOATS & FLK_DT(x->dtype)) || w->dtype != x->dtype || y_or_gy->dtype != x->dtype)
        return flk_decline(a, "mixed or non-float dtypes");
    if (w->sizes[1] != x->sizes[1] || y_or_gy->ndim != 4)
        return flk_fail(a, "input, weight and output shapes do not match");
    memset(s, 0, sizeof *s);
    s->v = (clk_conv){x->sizes[0], x->sizes[1], x->sizes[2], x->sizes[3], w->sizes[2], w->sizes[3],
                      y_or_gy->sizes[2], y_or_gy->sizes[3], stride[0], stride[1], padding[0], padding[1],
                      dilation[0], dilation[1], {x->strides[0], x->strides[1], x->strides[2], x->strides[3]},
                      0, 0, 0};
    s->oc = w->sizes[0];
    s->ckk = s->v.c * s->v.kh * s->v.kw;
    s->p = s->v.oh * s->v.ow;
    if ((uint64_t)(s->v.n * s->ckk * s->p) * flk_dtype_size(x->dtype) > MAX_COLUMN_BYTES)
        return flk_decline(a, "the im2col columns would take more than %llu MiB",
                           (unsigned long long)(MAX_COLUMN_BYTES >> 20));
    if (merged_stride(w, 1) < 0 || merged_stride(y_or_gy, 2) < 0)
        return flk_decline(a, "weight or output of a layout im2col cannot address");
    return FL_SUCCESS;
}

/* im2col of x into a new scratch; `transposed_columns`: [n, p, ckk] instead of [n, ckk, p] */
static fl_status columns(const flk_args *a, const fl_tensor *x, conv_setup *s, int transposed_columns,
                         clk_scratch *col) {
    int64_t sizes[3] = {s->v.n, transposed_columns ? s->p : s->ckk, transposed_columns ? s->ckk : s->p};
    FLK_TRY(clk_scratch_new(a->ctx, x->dtype, 3, sizes, col));
    clk_conv v = s->v;
    v.col_bs = s->ckk * s->p;
    v.col_ks = transposed_columns ? 1 : s->p;
    v.col_ps = transposed_columns ? s->ckk : 1;
    clk_launch l;
    clk_begin(&l, a->ctx, CLK_NN, x->dtype, "im2col");
    clk_tensor(&l, &col->t);
    clk_tensor(&l, x);
    clk_bytes(&l, &v, sizeof v);
    fl_status status = clk_run(&l, s->v.n * s->ckk * s->p);
    if (status != FL_SUCCESS)
        clk_scratch_free(col);
    return status;
}

/* convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups) */
FLK_KERNEL_FN(k_convolution) {
    flk_args a;
    const fl_tensor *x, *w, *bias, *y;
    conv_setup s;
    FLK_TRY(flk_args_init(&a, "convolution", args, nargs, 10, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "input", &x));
    FLK_TRY(flk_get_tensor(&a, 1, "weight", &w));
    FLK_TRY(flk_get_opt_tensor(&a, 2, "bias", &bias));
    FLK_TRY(flk_get_tensor(&a, 9, "out", &y));
    FLK_TRY(setup(&a, x, w, 3, y, &s));
    if (bias && (bias->dtype != x->dtype || bias->ndim != 1 || bias->sizes[0] != s.oc))
        return flk_decline(&a, "a bias of another dtype or shape");
    if (flk_may_overlap(y, x) || flk_may_overlap(y, w) || (bias && flk_may_overlap(y, bias)))
        return flk_decline(&a, "the output overlaps an input");
    FLK_TRY(clk_need(ctx, CLK_NN, x->dtype));
    FLK_TRY(clk_need(ctx, CLK_GEMM, x->dtype));
    if (flk_numel(y) == 0)
        return FL_SUCCESS;
    clk_scratch col;
    FLK_TRY(columns(&a, x, &s, 0, &col));
    gemm_call g = {s.oc, s.p, s.ckk, s.v.n,
                   {w, w->strides[0], merged_stride(w, 1), 0},
                   {&col.t, s.p, 1, s.ckk * s.p},
                   {y, y->strides[1], merged_stride(y, 2), y->strides[0]},
                   {bias, bias ? bias->strides[0] : 0, 0, 0}, 0, 0, 1.0, bias ? 1.0 : 0.0};
    fl_status status = gemm_run(&a, x->dtype, g);
    clk_scratch_free(&col);
    return status;
}
FLK_REGISTER("convolution", FLOATS, k_convolution);

/* grad_input: columns = weight^T @ grad_output per sample, then col2im */
static fl_status grad_input(const flk_args *a, const fl_tensor *gy, const fl_tensor *w, const fl_tensor *gx,
                            conv_setup *s) {
    int64_t sizes[3] = {s->v.n, s->ckk, s->p};
    clk_scratch col;
    FLK_TRY(clk_scratch_new(a->ctx, gy->dtype, 3, sizes, &col));
    gemm_call g = {s->ckk, s->p, s->oc, s->v.n,
                   {w, merged_stride(w, 1), w->strides[0], 0},
                   {gy, gy->strides[1], merged_stride(gy, 2), gy->strides[0]},
                   {&col.t, s->p, 1, s->ckk * s->p}, {NULL, 0, 0, 0}, 0, 0, 1.0, 0.0};
    fl_status status = gemm_run(a, gy->dtype, g);
    if (status == FL_SUCCESS) {
        clk_conv v = s->v;
        for (int d = 0; d < 4; d++)
            v.x_st[d] = gx->strides[d];
        v.col_bs = s->ckk * s->p;
        v.col_ks = s->p;
        v.col_ps = 1;
        clk_launch l;
        clk_begin(&l, a->ctx, CLK_NN, gy->dtype, "col2im");
        clk_tensor(&l, gx);
        clk_tensor(&l, &col.t);
        clk_bytes(&l, &v, sizeof v);
        status = clk_run(&l, s->v.n * s->v.c * s->v.h * s->v.w);
    }
    clk_scratch_free(&col);
    return status;
}

/* grad_weight [oc, ckk] = sum over samples and pixels of grad_output x columns^T */
static fl_status grad_weight(const flk_args *a, const fl_tensor *gy, const fl_tensor *x, const fl_tensor *gw,
                             conv_setup *s) {
    clk_scratch col;
    FLK_TRY(columns(a, x, s, 1, &col));
    gemm_call g = {s->oc, s->ckk, s->v.n * s->p, 1,
                   {gy, gy->strides[1], merged_stride(gy, 2), 0},
                   {&col.t, s->ckk, 1, 0},
                   {gw, gw->strides[0], merged_stride(gw, 1), 0}, {NULL, 0, 0, 0}, s->p, gy->strides[0], 1.0, 0.0};
    fl_status status = gemm_run(a, gy->dtype, g);
    clk_scratch_free(&col);
    return status;
}

/* convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
 *                      output_padding, groups, output_mask) -> (grad_input?, grad_weight?, grad_bias?) */
FLK_KERNEL_FN(k_convolution_backward) {
    flk_args a;
    const fl_tensor *gy, *x, *w, *gx, *gw, *gb;
    conv_setup s;
    FLK_TRY(flk_args_init(&a, "convolution_backward", args, nargs, 14, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "grad_output", &gy));
    FLK_TRY(flk_get_tensor(&a, 1, "input", &x));
    FLK_TRY(flk_get_tensor(&a, 2, "weight", &w));
    FLK_TRY(flk_get_opt_tensor(&a, 11, "grad_input", &gx));
    FLK_TRY(flk_get_opt_tensor(&a, 12, "grad_weight", &gw));
    FLK_TRY(flk_get_opt_tensor(&a, 13, "grad_bias", &gb));
    FLK_TRY(setup(&a, x, w, 4, gy, &s));
    if ((gx && (gx->dtype != x->dtype || gx->ndim != 4)) || (gw && (gw->dtype != x->dtype || gw->ndim != 4 ||
        merged_stride(gw, 1) < 0)) || (gb && gb->dtype != x->dtype))
        return flk_decline(&a, "gradients of another dtype or layout");
    const fl_tensor *outs[3] = {gx, gw, gb}, *ins[3] = {gy, x, w};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            if (outs[i] && flk_may_overlap(outs[i], ins[j]))
                return flk_decline(&a, "an output overlaps an input");
    FLK_TRY(clk_need(ctx, CLK_NN, x->dtype));
    FLK_TRY(clk_need(ctx, CLK_GEMM, x->dtype));
    FLK_TRY(clk_need(ctx, CLK_EW, x->dtype));     /* gemm_run may pack an operand */
    if (gb)
        FLK_TRY(clk_need(ctx, CLK_REDUCE, x->dtype));
    if (gb)
        FLK_TRY(reduce_run(&a, gb, gy, (1u << 0) | (1u << 2) | (1u << 3), 0, CLK_R_SUM, 1.0));
    if (gw)
        FLK_TRY(grad_weight(&a, gy, x, gw, &s));
    if (gx)
        FLK_TRY(grad_input(&a, gy, w, gx, &s));
    return FL_SUCCESS;
}
FLK_REGISTER("convolution_backward", FLOATS, k_convolution_backward);
