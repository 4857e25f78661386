/*
 * where.c -- selection by a bool condition on the elementwise engine
 * (fl_kernel.h): where.self, where.self_out and masked_fill.Scalar (with its
 * in-place form).
 */
#include "fl_kernel.h"

FLK_EW_WHERE(l_where_f32, float, flk_f32)
FLK_EW_WHERE(l_where_f64, double, flk_f64)
FLK_EW_WHERE(l_where_i64, int64_t, flk_i64)

/* where.self(condition, self, other) */
FLK_KERNEL_FN(k_where_self) {
    flk_args a;
    flk_ew_call c;
    memset(&c, 0, sizeof c);
    FLK_TRY(flk_args_init(&a, "where.self", args, nargs, 4, ctx));
    FLK_TRY(flk_get_operand(&a, 0, "condition", &c.in[0]));
    FLK_TRY(flk_get_operand(&a, 1, "self", &c.in[1]));
    FLK_TRY(flk_get_operand(&a, 2, "other", &c.in[2]));
    FLK_TRY(flk_get_tensor(&a, 3, "out", &c.out));
    if (c.in[0].t && c.in[0].t->dtype != FL_BOOL && c.in[0].t->dtype != FL_UINT8)
        return flk_fail(&a, "condition must be a bool tensor, got %s",
                        flk_dtype_name(c.in[0].t->dtype));
    c.nin = 3;
    c.in_role[0] = FLK_IN_COND;
    return flk_ew_run(&a, (flk_ew_loops){l_where_f32, l_where_f64, l_where_i64}, 0, &c);
}
FLK_REGISTER("where.self", FLK_REAL_TYPES, k_where_self);

/* masked_fill.Scalar(self, mask, value): where(mask, value, self) in self's
 * dtype -- the value is converted to self's kind first, as PyTorch does */
static fl_status masked_fill_impl(const char *op, const fl_arg *args, uint32_t nargs,
                                  flk_ctx *ctx) {
    flk_args a;
    flk_ew_call c;
    memset(&c, 0, sizeof c);
    FLK_TRY(flk_args_init(&a, op, args, nargs, 4, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &c.in[2].t));
    FLK_TRY(flk_get_operand(&a, 1, "mask", &c.in[0]));
    FLK_TRY(flk_get_scalar(&a, 2, "value", &c.in[1].s));
    FLK_TRY(flk_get_tensor(&a, 3, "out", &c.out));
    if (c.in[0].t && c.in[0].t->dtype != FL_BOOL)
        return flk_fail(&a, "mask must be a bool tensor, got %s", flk_dtype_name(c.in[0].t->dtype));
    flk_scalar *v = &c.in[1].s;
    int32_t sdt = c.in[2].t->dtype;
    if (sdt == FL_BOOL)
        *v = (flk_scalar){FL_ARG_BOOL, v->f != 0.0, v->f != 0.0};
    else if (flk_is_integral(sdt) && v->kind == FL_ARG_FLOAT)
        *v = (flk_scalar){FL_ARG_INT, (double)flk_double_to_i64(v->f), flk_double_to_i64(v->f)};
    c.nin = 3;
    c.in_role[0] = FLK_IN_COND;
    return flk_ew_run(&a, (flk_ew_loops){l_where_f32, l_where_f64, l_where_i64}, 0, &c);
}
FLK_KERNEL_FN(k_masked_fill_scalar) {
    return masked_fill_impl("masked_fill.Scalar", args, nargs, ctx);
}
FLK_REGISTER("masked_fill.Scalar", FLK_REAL_TYPES, k_masked_fill_scalar);
FLK_KERNEL_FN(k_masked_fill__scalar) {
    return masked_fill_impl("masked_fill_.Scalar", args, nargs, ctx);
}
FLK_REGISTER("masked_fill_.Scalar", FLK_REAL_TYPES, k_masked_fill__scalar);

/* numpy broadcast shape of the tensor arguments [0, n); returns its ndim */
static int broadcast_shape(const fl_arg *args, uint32_t n, int64_t *shape) {
    int nd = 0;
    for (uint32_t i = 0; i < n; ++i)
        if (args[i].kind == FL_ARG_TENSOR && args[i].value.tensor->ndim > nd)
            nd = args[i].value.tensor->ndim;
    for (int d = 0; d < nd; ++d)
        shape[d] = 1;
    for (uint32_t i = 0; i < n; ++i) {
        if (args[i].kind != FL_ARG_TENSOR)
            continue;
        const fl_tensor *t = args[i].value.tensor;
        for (int d = 0; d < t->ndim; ++d)
            if (shape[nd - t->ndim + d] == 1)
                shape[nd - t->ndim + d] = t->sizes[d];
    }
    return nd;
}

/* where.self_out(condition, self, other, *, out) -> out: PyTorch's math
 * attention calls it with out aliasing other (a same-place update).  The
 * runtime does not resize out= tensors, so an out of another shape (PyTorch
 * would resize it) fails instead of being silently left alone. */
FLK_KERNEL_FN(k_where_self_out) {
    int64_t shape[FLK_MAX_DIMS];
    const fl_tensor *out = nargs == 5 && args[4].kind == FL_ARG_TENSOR ? args[4].value.tensor : NULL;
    const int nd = broadcast_shape(args, nargs < 3 ? nargs : 3, shape);
    int same = out && out->ndim == nd;
    for (int d = 0; same && d < nd; ++d)
        same = out->sizes[d] == shape[d];
    if (!same)
        return flk_kernel_fail(ctx, "where.self_out: out must already have the broadcast shape "
                                    "of condition, self and other");
    return flk_out_variant("where.self_out", args, nargs, ctx, k_where_self);
}
FLK_REGISTER("where.self_out", FLK_REAL_TYPES, k_where_self_out);
