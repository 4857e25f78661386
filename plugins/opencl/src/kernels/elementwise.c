/*
 * elementwise.c -- elementwise.h: checks, shapes and launches of the
 * elementwise family's OpenCL kernels (cl/ew.cl.h).
 */
#include "elementwise.h"

static fl_status check_float(const flk_args *a, int32_t dtype) {
    if (!(CLK_FLOATS & FLK_DT(dtype)))
        return flk_decline(a, "%s has no OpenCL kernel here (float32/float64/float16 only)", flk_dtype_name(dtype));
    return FL_SUCCESS;
}

/* A tensor input of the compute dtype, not partly overlapping the output. */
static fl_status check_input(const flk_args *a, const fl_tensor *out, const fl_tensor *in, int32_t dtype,
                             const char *name) {
    if (!in)
        return FL_SUCCESS;
    if (in->dtype != dtype)
        return flk_decline(a, "%s is %s and the computation %s: mixed dtypes run elsewhere", name,
                           flk_dtype_name(in->dtype), flk_dtype_name(dtype));
    if (flk_may_overlap(out, in) && !flk_same_view(out, in))
        return flk_decline(a, "the output partly overlaps %s", name);
    return FL_SUCCESS;
}

/* The iteration shape of out and its operands (*empty: nothing to do), and a
 * launch of `kernel` begun with out as its first argument. */
static fl_status begin(const flk_args *a, const fl_tensor *out, const fl_tensor *const *ops, int nops, int32_t dtype,
                       const char *kernel, clk_launch *l, clk_shape *shape, int *empty) {
    FLK_TRY(clk_need(a->ctx, CLK_EW, dtype));
    FLK_TRY(clk_shape_of(a, out, ops, nops, shape, empty));
    clk_begin(l, a->ctx, CLK_EW, dtype, kernel);
    clk_tensor(l, out);
    return FL_SUCCESS;
}

static double scalar_value(flk_operand o) { return o.s.kind == FL_ARG_FLOAT ? o.s.f : (double)o.s.i; }

static void push_operand(clk_launch *l, flk_operand o) {
    clk_opt_tensor(l, o.t);
}

static void push_scalar_flag(clk_launch *l, flk_operand o) {
    clk_int(l, o.t == NULL);
    clk_scalar(l, o.t ? 0.0 : scalar_value(o));
}

fl_status ew_unary(const flk_args *a, const fl_tensor *out, const fl_tensor *x, int op, double p0, double p1) {
    FLK_TRY(check_float(a, out->dtype));
    FLK_TRY(check_input(a, out, x, out->dtype, "self"));
    const fl_tensor *ops[2] = {out, x};
    clk_shape shape;
    clk_launch l;
    int empty;
    FLK_TRY(begin(a, out, ops, 2, out->dtype, "ew_unary", &l, &shape, &empty));
    if (empty)
        return FL_SUCCESS;
    clk_tensor(&l, x);
    clk_bytes(&l, &shape, sizeof shape);
    clk_int(&l, op);
    clk_scalar(&l, p0);
    clk_scalar(&l, p1);
    return clk_run(&l, shape.n);
}

/* PyTorch's result dtype of the operands must be the output's. */
static fl_status check_promotion(const flk_args *a, const fl_tensor *out, const flk_operand *ops, int n) {
    int32_t common = flk_result_type(ops, n);
    if (common != out->dtype)
        return flk_decline(a, "the operands promote to %s, the output is %s", common < 0 ? "complex" :
                           flk_dtype_name(common), flk_dtype_name(out->dtype));
    return FL_SUCCESS;
}

fl_status ew_binary(const flk_args *a, const fl_tensor *out, flk_operand x, flk_operand y, int op, double p0,
                    double p1) {
    FLK_TRY(check_float(a, out->dtype));
    flk_operand both[2] = {x, y};
    FLK_TRY(check_promotion(a, out, both, 2));
    FLK_TRY(check_input(a, out, x.t, out->dtype, "self"));
    FLK_TRY(check_input(a, out, y.t, out->dtype, "other"));
    const fl_tensor *ops[3] = {out, x.t, y.t};
    clk_shape shape;
    clk_launch l;
    int empty;
    FLK_TRY(begin(a, out, ops, 3, out->dtype, "ew_binary", &l, &shape, &empty));
    if (empty)
        return FL_SUCCESS;
    push_operand(&l, x);
    push_operand(&l, y);
    clk_bytes(&l, &shape, sizeof shape);
    clk_int(&l, op);
    clk_scalar(&l, p0);
    clk_scalar(&l, p1);
    push_scalar_flag(&l, x);
    push_scalar_flag(&l, y);
    return clk_run(&l, shape.n);
}

fl_status ew_ternary(const flk_args *a, const fl_tensor *out, const fl_tensor *x, const fl_tensor *y, flk_operand z,
                     int op, double p0) {
    FLK_TRY(check_float(a, out->dtype));
    flk_operand all[3] = {ew_tensor(x), ew_tensor(y), z};
    FLK_TRY(check_promotion(a, out, all, 3));
    FLK_TRY(check_input(a, out, x, out->dtype, "self"));
    FLK_TRY(check_input(a, out, y, out->dtype, "tensor1"));
    FLK_TRY(check_input(a, out, z.t, out->dtype, "tensor2"));
    const fl_tensor *ops[4] = {out, x, y, z.t};
    clk_shape shape;
    clk_launch l;
    int empty;
    FLK_TRY(begin(a, out, ops, 4, out->dtype, "ew_ternary", &l, &shape, &empty));
    if (empty)
        return FL_SUCCESS;
    clk_tensor(&l, x);
    clk_tensor(&l, y);
    push_operand(&l, z);
    clk_bytes(&l, &shape, sizeof shape);
    clk_int(&l, op);
    clk_scalar(&l, p0);
    push_scalar_flag(&l, z);
    return clk_run(&l, shape.n);
}

fl_status ew_compare(const flk_args *a, const fl_tensor *out, const fl_tensor *x, flk_operand y, int op) {
    if (out->dtype != FL_BOOL)
        return flk_decline(a, "a comparison into %s runs elsewhere", flk_dtype_name(out->dtype));
    FLK_TRY(check_float(a, x->dtype));
    flk_operand both[2] = {ew_tensor(x), y};
    int32_t common = flk_result_type(both, 2);
    if (common != x->dtype)
        return flk_decline(a, "the operands promote to %s", common < 0 ? "complex" : flk_dtype_name(common));
    FLK_TRY(check_input(a, out, y.t, x->dtype, "other"));
    if (flk_may_overlap(out, x))
        return flk_decline(a, "the output overlaps self");
    if (y.t && flk_may_overlap(out, y.t))
        return flk_decline(a, "the output overlaps other");
    const fl_tensor *ops[3] = {out, x, y.t};
    clk_shape shape;
    clk_launch l;
    int empty;
    FLK_TRY(begin(a, out, ops, 3, x->dtype, "ew_compare", &l, &shape, &empty));
    if (empty)
        return FL_SUCCESS;
    clk_tensor(&l, x);
    push_operand(&l, y);
    clk_bytes(&l, &shape, sizeof shape);
    clk_int(&l, op);
    push_scalar_flag(&l, y);
    return clk_run(&l, shape.n);
}

fl_status ew_where(const flk_args *a, const fl_tensor *out, const fl_tensor *cond, flk_operand x, flk_operand y) {
    FLK_TRY(check_float(a, out->dtype));
    if (cond->dtype != FL_BOOL)
        return flk_decline(a, "condition is %s, not bool", flk_dtype_name(cond->dtype));
    flk_operand both[2] = {x, y};
    FLK_TRY(check_promotion(a, out, both, 2));
    FLK_TRY(check_input(a, out, x.t, out->dtype, "self"));
    FLK_TRY(check_input(a, out, y.t, out->dtype, "other"));
    if (flk_may_overlap(out, cond))
        return flk_decline(a, "the output overlaps the condition");
    const fl_tensor *ops[4] = {out, cond, x.t, y.t};
    clk_shape shape;
    clk_launch l;
    int empty;
    FLK_TRY(begin(a, out, ops, 4, out->dtype, "ew_where", &l, &shape, &empty));
    if (empty)
        return FL_SUCCESS;
    clk_tensor(&l, cond);
    push_operand(&l, x);
    push_operand(&l, y);
    clk_bytes(&l, &shape, sizeof shape);
    push_scalar_flag(&l, x);
    push_scalar_flag(&l, y);
    return clk_run(&l, shape.n);
}
