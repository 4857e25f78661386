/*
 * inplace.c -- the in-place writes that are no arithmetic: fill_, zero_,
 * copy_ (same dtype, any layout and broadcast) and masked_fill_, on the
 * elementwise family (cl/ew.cl.h, elementwise.h), and cat as one copy per
 * input.  A copy_ between dtypes declines: the runtime converts through the
 * host.
 */
#include "elementwise.h"

#define FLOATS CLK_FLOATS

/* Every real dtype: a contiguous tensor is filled by the driver (any dtype);
 * a strided one by the elementwise kernel (float dtypes). */
#define REAL_DTYPES ((1ull << FL_COMPLEX64) - 1)

static fl_status fill(const flk_args *a, const fl_tensor *out, flk_scalar value) {
    if (flk_is_contiguous(out) && out->dtype != FL_COMPLEX64) {
        unsigned char pattern[8];
        if (value.kind == FL_ARG_FLOAT)
            flk_store_f64(pattern, out->dtype, value.f);   /* PyTorch's casts (float -> int truncates) */
        else
            flk_store_i64(pattern, out->dtype, value.i);
        return clk_fill(a->ctx, out, pattern, flk_dtype_size(out->dtype));
    }
    return ew_unary(a, out, out, CLK_U_FILL, value.kind == FL_ARG_FLOAT ? value.f : (double)value.i, 0);
}

/* fill_.Scalar(self, value) */
FLK_KERNEL_FN(k_fill) {
    flk_args a;
    const fl_tensor *self, *out;
    flk_scalar value;
    FLK_TRY(flk_args_init(&a, "fill_.Scalar", args, nargs, 3, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &self));
    FLK_TRY(flk_get_scalar(&a, 1, "value", &value));
    FLK_TRY(flk_get_tensor(&a, 2, "out", &out));
    return fill(&a, out, value);
}
FLK_REGISTER("fill_.Scalar", REAL_DTYPES, k_fill);

/* zero_(self) */
FLK_KERNEL_FN(k_zero) {
    flk_args a;
    const fl_tensor *self, *out;
    FLK_TRY(flk_args_init(&a, "zero_", args, nargs, 2, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &self));
    FLK_TRY(flk_get_tensor(&a, 1, "out", &out));
    return fill(&a, out, (flk_scalar){FL_ARG_INT, 0.0, 0});
}
FLK_REGISTER("zero_", REAL_DTYPES, k_zero);

/* copy_(self, src, non_blocking) */
FLK_KERNEL_FN(k_copy) {
    flk_args a;
    const fl_tensor *self, *src, *out;
    int non_blocking;
    FLK_TRY(flk_args_init(&a, "copy_", args, nargs, 4, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &self));
    FLK_TRY(flk_get_tensor(&a, 1, "src", &src));
    FLK_TRY(flk_get_bool(&a, 2, "non_blocking", &non_blocking));
    FLK_TRY(flk_get_tensor(&a, 3, "out", &out));
    if (src->dtype != out->dtype)
        return flk_decline(&a, "a %s -> %s conversion runs elsewhere", flk_dtype_name(src->dtype),
                           flk_dtype_name(out->dtype));
    return ew_unary(&a, out, src, CLK_U_COPY, 0, 0);
}
FLK_REGISTER("copy_", FLOATS, k_copy);

/* masked_fill_.Scalar(self, mask, value) */
FLK_KERNEL_FN(k_masked_fill) {
    flk_args a;
    const fl_tensor *self, *mask, *out;
    flk_operand value;
    FLK_TRY(flk_args_init(&a, "masked_fill_.Scalar", args, nargs, 4, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &self));
    FLK_TRY(flk_get_tensor(&a, 1, "mask", &mask));
    FLK_TRY(flk_get_operand(&a, 2, "value", &value));
    FLK_TRY(flk_get_tensor(&a, 3, "out", &out));
    if (value.t)
        return flk_decline(&a, "a tensor value runs elsewhere");
    value.s.kind = FL_ARG_FLOAT;   /* the fill value takes self's dtype, whatever its Python type */
    return ew_where(&a, out, mask, value, ew_tensor(self));
}
FLK_REGISTER("masked_fill_.Scalar", FLOATS, k_masked_fill);

/* cat(tensors, dim): one copy per input into its slice of out.  Every input of
 * out's dtype (a 1-d empty tensor, PyTorch's legacy placeholder, is skipped). */
FLK_KERNEL_FN(k_cat) {
    flk_args a;
    const fl_tensor *const *ts, *out;
    uint32_t n;
    int64_t dim;
    FLK_TRY(flk_args_init(&a, "cat", args, nargs, 3, ctx));
    FLK_TRY(flk_get_tensor_list(&a, 0, "tensors", 0, &ts, &n));
    FLK_TRY(flk_get_int(&a, 1, "dim", &dim));
    FLK_TRY(flk_get_tensor(&a, 2, "out", &out));
    int32_t d;
    FLK_TRY(flk_wrap_dim(&a, dim, out->ndim, &d));
    if (out->ndim == 0)
        return flk_fail(&a, "cannot concatenate 0-d tensors");
    for (uint32_t k = 0; k < n; k++) {
        if (ts[k]->ndim == 1 && ts[k]->sizes[0] == 0)
            continue;
        if (ts[k]->dtype != out->dtype || ts[k]->ndim != out->ndim)
            return flk_decline(&a, "tensors[%u] differs from the output in dtype or rank", k);
        if (flk_may_overlap(out, ts[k]))
            return flk_decline(&a, "the output overlaps tensors[%u]", k);
    }
    FLK_TRY(clk_need(ctx, CLK_EW, out->dtype));
    int64_t at = 0;
    for (uint32_t k = 0; k < n; k++) {
        const fl_tensor *t = ts[k];
        if (t->ndim == 1 && t->sizes[0] == 0)
            continue;
        fl_tensor slice = *out;   /* out's strides, t's sizes, starting at `at` along dim */
        slice.sizes = t->sizes;
        slice.byte_offset = out->byte_offset + (uint64_t)(at * out->strides[d]) * flk_dtype_size(out->dtype);
        if (at + t->sizes[d] > out->sizes[d])
            return flk_fail(&a, "the inputs are longer than the output along dim %d", d);
        FLK_TRY(ew_unary(&a, &slice, t, CLK_U_COPY, 0, 0));
        at += t->sizes[d];
    }
    return FL_SUCCESS;
}
FLK_REGISTER("cat", FLOATS, k_cat);
