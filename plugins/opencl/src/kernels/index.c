/*
 * index.c -- index_select, gather and embedding_dense_backward on the nn
 * family (cl/nn.cl.h).  (nn.Embedding's forward reaches the device as
 * index_select.)  Indices are int64 or int32; one out of range is reported
 * by the stream's device-side check (clk.h) and its output element is 0.
 */
#include <string.h>

#include "clk.h"

#define FLOATS CLK_FLOATS

/* clk_index in cl/nn.cl.h, field for field */
typedef struct clk_index {
    cl_long nd, n, dim, limit;
    cl_long size[CLK_MAX_DIMS];
    cl_long stride[3][CLK_MAX_DIMS];
} clk_index;

static fl_status check_index_dtype(const flk_args *a, const fl_tensor *index) {
    if (index->dtype != FL_INT64 && index->dtype != FL_INT32)
        return flk_decline(a, "index of %s (int64 and int32 only)", flk_dtype_name(index->dtype));
    return FL_SUCCESS;
}

static fl_status launch(const flk_args *a, const fl_tensor *out, const fl_tensor *x, const fl_tensor *index,
                        const clk_index *s) {
    if (!(CLK_FLOATS & FLK_DT(x->dtype)) || out->dtype != x->dtype)
        return flk_decline(a, "%s has no OpenCL kernel here", flk_dtype_name(x->dtype));
    if (flk_may_overlap(out, x) || flk_may_overlap(out, index))
        return flk_decline(a, "the output overlaps an input");
    FLK_TRY(clk_need(a->ctx, CLK_NN, x->dtype));
    clk_launch l;
    clk_begin(&l, a->ctx, CLK_NN, x->dtype, "index_gather");
    clk_tensor(&l, out);
    clk_tensor(&l, x);
    clk_tensor(&l, index);
    clk_int(&l, index->dtype == FL_INT32);
    clk_bytes(&l, s, sizeof *s);
    clk_checks(&l);
    return clk_run(&l, s->n);
}

/* The output's dimensions, uncoalesced (dim must stay whole): a 0-d tensor is one of size 1. */
static fl_status output_dims(const flk_args *a, const fl_tensor *out, clk_index *s) {
    memset(s, 0, sizeof *s);
    if (out->ndim > CLK_MAX_DIMS)
        return flk_decline(a, "%d dimensions (the OpenCL kernel takes %d)", out->ndim, CLK_MAX_DIMS);
    s->nd = out->ndim ? out->ndim : 1;
    s->n = flk_numel(out);
    for (int d = 0; d < out->ndim; d++) {
        s->size[d] = out->sizes[d];
        s->stride[0][d] = out->strides[d];
    }
    if (!out->ndim)
        s->size[0] = 1;
    return FL_SUCCESS;
}

/* index_select(self, dim, index) */
FLK_KERNEL_FN(k_index_select) {
    flk_args a;
    const fl_tensor *x, *index, *out;
    int64_t dim;
    FLK_TRY(flk_args_init(&a, "index_select", args, nargs, 4, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &x));
    FLK_TRY(flk_get_int(&a, 1, "dim", &dim));
    FLK_TRY(flk_get_tensor(&a, 2, "index", &index));
    FLK_TRY(flk_get_tensor(&a, 3, "out", &out));
    FLK_TRY(check_index_dtype(&a, index));
    if (index->ndim > 1)
        return flk_fail(&a, "index must be 0-d or 1-d");
    int32_t d;
    FLK_TRY(flk_wrap_dim(&a, dim, x->ndim, &d));
    if (out->ndim != x->ndim)
        return flk_fail(&a, "the output has %d dimensions, self %d", out->ndim, x->ndim);
    clk_index s;
    FLK_TRY(output_dims(&a, out, &s));
    s.dim = d;
    s.limit = x->ndim ? x->sizes[d] : 1;
    for (int k = 0; k < x->ndim; k++)
        s.stride[2][k] = x->strides[k];
    s.stride[1][d] = index->ndim ? index->strides[0] : 0;
    return launch(&a, out, x, index, &s);
}
FLK_REGISTER("index_select", FLOATS, k_index_select);

/* gather(self, dim, index, *, sparse_grad) */
FLK_KERNEL_FN(k_gather) {
    flk_args a;
    const fl_tensor *x, *index, *out;
    int64_t dim;
    int sparse_grad;
    FLK_TRY(flk_args_init(&a, "gather", args, nargs, 5, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &x));
    FLK_TRY(flk_get_int(&a, 1, "dim", &dim));
    FLK_TRY(flk_get_tensor(&a, 2, "index", &index));
    FLK_TRY(flk_get_bool(&a, 3, "sparse_grad", &sparse_grad));
    FLK_TRY(flk_get_tensor(&a, 4, "out", &out));
    FLK_TRY(check_index_dtype(&a, index));
    int32_t d;
    FLK_TRY(flk_wrap_dim(&a, dim, x->ndim, &d));
    if (index->ndim != x->ndim && !(index->ndim <= 1 && x->ndim <= 1))
        return flk_fail(&a, "index has %d dimensions, self %d", index->ndim, x->ndim);
    if (out->ndim != index->ndim)
        return flk_fail(&a, "the output's shape is not the index's");
    clk_index s;
    FLK_TRY(output_dims(&a, out, &s));
    s.dim = d;
    s.limit = x->ndim ? x->sizes[d] : 1;
    for (int k = 0; k < index->ndim; k++)
        s.stride[1][k] = index->strides[k];
    for (int k = 0; k < x->ndim; k++)
        s.stride[2][k] = x->strides[k];
    return launch(&a, out, x, index, &s);
}
FLK_REGISTER("gather", FLOATS, k_gather);

/* embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq) */
FLK_KERNEL_FN(k_embedding_backward) {
    flk_args a;
    const fl_tensor *g, *indices, *out;
    int64_t num_weights, padding_idx;
    int scale;
    FLK_TRY(flk_args_init(&a, "embedding_dense_backward", args, nargs, 6, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "grad_output", &g));
    FLK_TRY(flk_get_tensor(&a, 1, "indices", &indices));
    FLK_TRY(flk_get_int(&a, 2, "num_weights", &num_weights));
    FLK_TRY(flk_get_int(&a, 3, "padding_idx", &padding_idx));
    FLK_TRY(flk_get_bool(&a, 4, "scale_grad_by_freq", &scale));
    FLK_TRY(flk_get_tensor(&a, 5, "out", &out));
    if (scale)
        return flk_decline(&a, "scale_grad_by_freq runs elsewhere");
    if (indices->dtype != FL_INT64)
        return flk_decline(&a, "indices of %s (int64 only)", flk_dtype_name(indices->dtype));
    if (!(CLK_FLOATS & FLK_DT(g->dtype)) || out->dtype != g->dtype)
        return flk_decline(&a, "%s has no OpenCL kernel here", flk_dtype_name(g->dtype));
    if (!flk_is_contiguous(g) || !flk_is_contiguous(indices) || !flk_is_contiguous(out))
        return flk_decline(&a, "non-contiguous tensors run elsewhere");
    int64_t dim = out->ndim == 2 ? out->sizes[1] : 0, rows = flk_numel(indices);
    if (out->ndim != 2 || out->sizes[0] != num_weights || flk_numel(g) != rows * dim)
        return flk_fail(&a, "grad_output, indices and the [num_weights, dim] output do not match");
    if (flk_may_overlap(out, g))
        return flk_decline(&a, "the output overlaps grad_output");
    FLK_TRY(clk_need(ctx, CLK_NN, g->dtype));
    clk_launch l;
    clk_begin(&l, ctx, CLK_NN, g->dtype, "embedding_backward");
    clk_tensor(&l, out);
    clk_tensor(&l, g);
    clk_tensor(&l, indices);
    clk_long(&l, rows);
    clk_long(&l, dim);
    clk_long(&l, num_weights);
    clk_long(&l, padding_idx);
    return clk_run(&l, num_weights * dim);
}
FLK_REGISTER("embedding_dense_backward", FLOATS, k_embedding_backward);
