/*
 * ew_ops.c -- the elementwise op driver (fl_kernel.h section 9): PyTorch's
 * type promotion over the operands, the loop for the compute dtype, scalar
 * parameters converted to it, then the elementwise engine; and the two
 * argument patterns most pointwise ops share.
 */
#include "fl_kernel.h"

fl_status flk_ew_run(const flk_args *a, flk_ew_loops loops, unsigned flags, flk_ew_call *c) {
    flk_operand prom[FLK_EW_MAX_INPUTS + 2];
    int np = 0;
    for (int k = 0; k < c->nin; ++k)
        if (c->in_role[k] == FLK_IN_PROMOTE)
            prom[np++] = c->in[k];
    for (int k = 0; k < c->nextra; ++k)
        prom[np++] = c->extra[k];
    int32_t common = flk_result_type(prom, np);
    if (common < 0)
        return flk_fail(a, "cannot determine the computation dtype");
    if ((flags & FLK_EW_INT_TO_FLOAT) && !flk_is_floating(common))
        common = FL_FLOAT32;
    if ((flags & FLK_EW_NO_BOOL) && common == FL_BOOL)
        return flk_fail(a, "bool tensors are not supported");
    int32_t ldt = common == FL_FLOAT64 ? FL_FLOAT64 : flk_is_floating(common) ? FL_FLOAT32 : FL_INT64;
    flk_loop_fn fn = ldt == FL_FLOAT32 ? loops.f32 : ldt == FL_FLOAT64 ? loops.f64 : loops.i64;
    if (!fn)
        return flk_fail(a, "dtype %s is not supported", flk_dtype_name(common));
    if (!(flags & FLK_EW_BOOL_OUT) && !flk_can_cast(common, c->out->dtype))
        return flk_fail(a, "result type %s can't be cast to the desired output type %s",
                        flk_dtype_name(common), flk_dtype_name(c->out->dtype));
    flk_ew_params P;
    memset(&P, 0, sizeof P);
    for (int k = 0; k < c->nparams; ++k) {
        const flk_scalar *s = &c->params[k];
        if (ldt == FL_INT64 && s->kind == FL_ARG_FLOAT && s->f != (double)s->i &&
            !c->param_trunc[k])
            return flk_fail(a, "for integral input tensors, argument %s must not be a "
                               "floating point number (got %g)", c->param_names[k], s->f);
        if (s->kind == FL_ARG_FLOAT) {
            P.f[k] = (float)s->f;
            P.d[k] = s->f;
        } else {
            P.f[k] = (float)s->i;
            P.d[k] = (double)s->i;
        }
        P.i[k] = s->i;
    }
    int32_t in_dt[FLK_EW_MAX_INPUTS], via[FLK_EW_MAX_INPUTS];
    for (int k = 0; k < c->nin; ++k) {
        in_dt[k] = c->in_role[k] == FLK_IN_COND ? FL_BOOL : ldt;
        via[k] = c->in_role[k] == FLK_IN_COND ? -1 : common;
        if (k == 1 && !c->in[k].t && (flags & FLK_EW_SCALAR_OPMATH) &&
            (common == FL_FLOAT16 || common == FL_BFLOAT16))
            via[k] = -1;
    }
    flk_ew_desc d = {
        .out = c->out,
        .out_dtype = (flags & FLK_EW_BOOL_OUT) ? FL_BOOL : ldt,
        .nin = c->nin,
        .in = c->in,
        .in_dtypes = in_dt,
        .in_via = via,
        .fn = fn,
        .params = &P,
    };
    return flk_elementwise(a, &d);
}

/* (self, out) */
fl_status flk_ew_unary(const char *op, const fl_arg *args, uint32_t nargs, flk_ctx *ctx,
                       flk_ew_loops loops, unsigned flags) {
    flk_args a;
    flk_ew_call c;
    memset(&c, 0, sizeof c);
    FLK_TRY(flk_args_init(&a, op, args, nargs, 2, ctx));
    FLK_TRY(flk_get_operand(&a, 0, "self", &c.in[0]));
    FLK_TRY(flk_get_tensor(&a, 1, "out", &c.out));
    c.nin = 1;
    return flk_ew_run(&a, loops, flags, &c);
}

/* (self, other, out) */
fl_status flk_ew_binary(const char *op, const fl_arg *args, uint32_t nargs, flk_ctx *ctx,
                        flk_ew_loops loops, unsigned flags) {
    flk_args a;
    flk_ew_call c;
    memset(&c, 0, sizeof c);
    FLK_TRY(flk_args_init(&a, op, args, nargs, 3, ctx));
    FLK_TRY(flk_get_operand(&a, 0, "self", &c.in[0]));
    FLK_TRY(flk_get_operand(&a, 1, "other", &c.in[1]));
    FLK_TRY(flk_get_tensor(&a, 2, "out", &c.out));
    c.nin = 2;
    return flk_ew_run(&a, loops, flags, &c);
}
