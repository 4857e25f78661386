/*
 * clamp.c -- clamp (optional min / max), clamp_min, clamp_max and their
 * in-place forms on the elementwise engine (fl_kernel.h).  The bounds that
 * are present join the type promotion, as in PyTorch; a NaN input stays NaN
 * and a NaN bound makes every element NaN.
 */
#include "fl_kernel.h"

/* clamp: a NaN input stays NaN (the comparisons are false); a NaN bound
 * makes every element NaN, handled by the driver with l_nan */
FLK_DEF1_F(l_clamp_min, const T lo = FLK_PARAM(T, 0);, a < lo ? lo : a)
FLK_DEF1_F(l_clamp_max, const T hi = FLK_PARAM(T, 1);, a > hi ? hi : a)
FLK_DEF1_F(l_clamp_both, const T lo = FLK_PARAM(T, 0); const T hi = FLK_PARAM(T, 1);,
           (a < lo ? lo : a) > hi ? hi : (a < lo ? lo : a))
FLK_DEF1_F(l_nan, FLK_NOSETUP, ((void)a, (T)NAN))
FLK_DEF1_I(l_clamp_min, const T lo = FLK_PARAM(T, 0);, a < lo ? lo : a)
FLK_DEF1_I(l_clamp_max, const T hi = FLK_PARAM(T, 1);, a > hi ? hi : a)
FLK_DEF1_I(l_clamp_both, const T lo = FLK_PARAM(T, 0); const T hi = FLK_PARAM(T, 1);,
           (a < lo ? lo : a) > hi ? hi : (a < lo ? lo : a))

static fl_status clamp_run(const flk_args *a, flk_ew_call *c, int has_min, flk_scalar lo,
                           int has_max, flk_scalar hi);

/* clamp(self, min?, max?) */
static fl_status clamp_impl(const char *op, const fl_arg *args, uint32_t nargs,
                            flk_ctx *ctx) {
    flk_args a;
    flk_ew_call c;
    memset(&c, 0, sizeof c);
    int has_min, has_max;
    flk_scalar lo, hi;
    FLK_TRY(flk_args_init(&a, op, args, nargs, 4, ctx));
    FLK_TRY(flk_get_operand(&a, 0, "self", &c.in[0]));
    FLK_TRY(flk_get_opt_scalar(&a, 1, "min", &has_min, &lo));
    FLK_TRY(flk_get_opt_scalar(&a, 2, "max", &has_max, &hi));
    FLK_TRY(flk_get_tensor(&a, 3, "out", &c.out));
    if (!has_min && !has_max)
        return flk_fail(&a, "at least one of 'min' or 'max' must not be None");
    return clamp_run(&a, &c, has_min, lo, has_max, hi);
}

/* the bounds that are present (at least one) join the promotion and the params */
static fl_status clamp_run(const flk_args *a, flk_ew_call *c, int has_min, flk_scalar lo,
                           int has_max, flk_scalar hi) {
    c->nin = 1;
    c->nparams = 2;
    c->param_names[0] = "min";
    c->param_names[1] = "max";
    c->params[0] = has_min ? lo : (flk_scalar){FL_ARG_INT, 0.0, 0};
    c->params[1] = has_max ? hi : (flk_scalar){FL_ARG_INT, 0.0, 0};
    if (has_min)
        c->extra[c->nextra++].s = lo;
    if (has_max)
        c->extra[c->nextra++].s = hi;
    flk_ew_loops loops = has_min && has_max ? FLK_LOOPS_FI(l_clamp_both)
                     : has_min          ? FLK_LOOPS_FI(l_clamp_min)
                                        : FLK_LOOPS_FI(l_clamp_max);
    if ((has_min && lo.kind == FL_ARG_FLOAT && lo.f != lo.f) ||
        (has_max && hi.kind == FL_ARG_FLOAT && hi.f != hi.f))
        loops = (flk_ew_loops){l_nan_f32, l_nan_f64, NULL}; /* NaN bound: all NaN */
    return flk_ew_run(a, loops, FLK_EW_NO_BOOL, c);
}
FLK_KERNEL_FN(k_clamp) { return clamp_impl("clamp", args, nargs, ctx); }
FLK_REGISTER("clamp", FLK_NUM_TYPES, k_clamp);
FLK_KERNEL_FN(k_clamp_) { return clamp_impl("clamp_", args, nargs, ctx); }
FLK_REGISTER("clamp_", FLK_NUM_TYPES, k_clamp_);

/* clamp_min(self, min) / clamp_max(self, max) and their in-place forms */
static fl_status clamp_one(const char *op, const fl_arg *args, uint32_t nargs,
                           flk_ctx *ctx, int is_min) {
    flk_args a;
    flk_ew_call c;
    flk_scalar bound;
    memset(&c, 0, sizeof c);
    FLK_TRY(flk_args_init(&a, op, args, nargs, 3, ctx));
    FLK_TRY(flk_get_operand(&a, 0, "self", &c.in[0]));
    FLK_TRY(flk_get_scalar(&a, 1, is_min ? "min" : "max", &bound));
    FLK_TRY(flk_get_tensor(&a, 2, "out", &c.out));
    return clamp_run(&a, &c, is_min, bound, !is_min, bound);
}
FLK_KERNEL_FN(k_clamp_min) { return clamp_one("clamp_min", args, nargs, ctx, 1); }
FLK_REGISTER("clamp_min", FLK_NUM_TYPES, k_clamp_min);
FLK_KERNEL_FN(k_clamp_min_) { return clamp_one("clamp_min_", args, nargs, ctx, 1); }
FLK_REGISTER("clamp_min_", FLK_NUM_TYPES, k_clamp_min_);
FLK_KERNEL_FN(k_clamp_max) { return clamp_one("clamp_max", args, nargs, ctx, 0); }
FLK_REGISTER("clamp_max", FLK_NUM_TYPES, k_clamp_max);
FLK_KERNEL_FN(k_clamp_max_) { return clamp_one("clamp_max_", args, nargs, ctx, 0); }
FLK_REGISTER("clamp_max_", FLK_NUM_TYPES, k_clamp_max_);
