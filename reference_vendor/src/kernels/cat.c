/*
 * cat.c -- cat: every input is converted to the output's dtype and
 * written into its slice of the output (any strides on either side).
 * stack reaches the chip as unsqueeze (a view) + cat.
 */
#include "fl_kernel.h"
#include "util/pack.h"

/* a legacy empty input (1-d, size 0) is skipped whatever the other shapes */
static int skipped_input(const fl_tensor *t) { return t->ndim == 1 && t->sizes[0] == 0; }

/* the part of out that input t fills: same strides, t's sizes, offset along dim */
static void slice_view(const fl_tensor *out, const fl_tensor *t, int32_t dim, int64_t at,
                       fl_tensor *view) {
    *view = *out;
    view->sizes = t->sizes;
    view->byte_offset =
        out->byte_offset + (uint64_t)(at * out->strides[dim] * (int64_t)flk_dtype_size(out->dtype));
}

/* cat(tensors, dim) */
FLK_KERNEL_FN(k_cat) {
    flk_args a;
    const fl_tensor *const *ts;
    const fl_tensor *out;
    uint32_t n;
    int64_t dim64;
    int32_t dim;
    FLK_TRY(flk_args_init(&a, "cat", args, nargs, 3, ctx));
    FLK_TRY(flk_get_tensor_list(&a, 0, "tensors", 0, &ts, &n));
    FLK_TRY(flk_get_int(&a, 1, "dim", &dim64));
    FLK_TRY(flk_get_tensor(&a, 2, "out", &out));
    FLK_TRY(flk_wrap_dim(&a, dim64, out->ndim, &dim));
    int64_t at = 0;
    for (uint32_t k = 0; k < n; ++k) {
        const fl_tensor *t = ts[k];
        if (skipped_input(t))
            continue;
        if (t->ndim != out->ndim)
            return flk_fail(&a, "tensors[%u] has %d dims, the output %d", k, (int)t->ndim,
                            (int)out->ndim);
        if (flk_may_overlap(t, out))
            return flk_fail(&a, "tensors[%u] overlaps the output; use a separate output", k);
        fl_tensor view;
        slice_view(out, t, dim, at, &view);
        void *buf;
        FLK_TRY(ref_pack(&a, t, out->dtype, &buf));
        ref_unpack(&view, out->dtype, buf);
        flk_free(buf);
        at += t->sizes[dim];
    }
    return FL_SUCCESS;
}
FLK_REGISTER("cat", FLK_REAL_TYPES, k_cat);
