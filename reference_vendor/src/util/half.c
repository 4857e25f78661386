/*
 * half.c -- float16 / bfloat16 through float32 copies (see half.h).
 */
#include "util/half.h"

#include "util/pack.h"

#define HALF_MAX_ARGS 32

static int is_half(int32_t dt) { return dt == FL_FLOAT16 || dt == FL_BFLOAT16; }

typedef struct half_call {
    fl_arg args[HALF_MAX_ARGS];
    fl_tensor views[HALF_MAX_ARGS];
    int64_t strides[HALF_MAX_ARGS][FLK_MAX_DIMS];
    void *bufs[HALF_MAX_ARGS];
} half_call;

/* float32 copy of args[i] into c (a contiguous tensor over a packed buffer) */
static fl_status widen_arg(const flk_args *a, half_call *c, uint32_t i) {
    const fl_tensor *t = c->args[i].value.tensor;
    FLK_TRY(ref_pack(a, t, FL_FLOAT32, &c->bufs[i]));
    fl_tensor *v = &c->views[i];
    *v = *t;
    v->dtype = FL_FLOAT32;
    v->base = (fl_devptr)(uintptr_t)c->bufs[i];
    v->byte_offset = 0;
    int64_t running = 1;
    for (int32_t d = t->ndim - 1; d >= 0; --d) {
        c->strides[i][d] = running;
        running *= t->sizes[d];
    }
    v->strides = c->strides[i];
    c->args[i].value.tensor = v;
    return FL_SUCCESS;
}

fl_status ref_run_as_f32(const char *op, const fl_arg *args, uint32_t nargs, flk_ctx *ctx,
                         flk_fn fn, uint32_t nout, int dtype_arg) {
    int any = 0;
    for (uint32_t i = 0; i < nargs; ++i)
        any |= args[i].kind == FL_ARG_TENSOR && is_half(args[i].value.tensor->dtype);
    if (!any)
        return fn(args, nargs, ctx);
    flk_args a = {args, nargs, ctx, op};
    if (nargs > HALF_MAX_ARGS || nout > nargs)
        return flk_fail(&a, "too many arguments (%u) for the half-precision path", nargs);
    half_call *c = (half_call *)flk_alloc(sizeof *c);
    if (!c)
        return flk_fail(&a, "out of host memory");
    memset(c->bufs, 0, sizeof c->bufs);
    memcpy(c->args, args, nargs * sizeof *args);
    fl_status st = FL_SUCCESS;
    for (uint32_t i = 0; i < nargs && st == FL_SUCCESS; ++i)
        if (args[i].kind == FL_ARG_TENSOR && is_half(args[i].value.tensor->dtype))
            st = widen_arg(&a, c, i);
    fl_arg *dt = dtype_arg >= 0 ? &c->args[dtype_arg] : NULL; /* e.g. input_dtype */
    if (dt && dt->kind == FL_ARG_INT && is_half((int32_t)dt->value.i))
        dt->value.i = FL_FLOAT32;
    if (st == FL_SUCCESS)
        st = fn(c->args, nargs, ctx);
    for (uint32_t i = nargs - nout; i < nargs && st == FL_SUCCESS; ++i)
        if (c->bufs[i])
            ref_unpack(args[i].value.tensor, FL_FLOAT32, c->bufs[i]);
    ref_free_all(c->bufs, HALF_MAX_ARGS);
    flk_free(c);
    return st;
}
