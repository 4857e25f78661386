/*
 * kernels_half.c -- float16 / bfloat16 for the float32 kernels that have no
 * half path of their own (matmul family, convolution, softmax, max pooling,
 * nll loss): the half tensors are converted to float32 copies, the float32
 * kernel runs (float32 accumulation, as PyTorch's CPU kernels do for these
 * dtypes), and the outputs are rounded back once.  Calls without a half
 * tensor go straight to the float32 kernel.
 */
#include "kernel_util.h"

#define HALF_MAX_ARGS 32

static int is_half(int32_t dt) { return dt == FL_FLOAT16 || dt == FL_BFLOAT16; }

typedef struct half_call {
    fl_arg args[HALF_MAX_ARGS];
    fl_tensor views[HALF_MAX_ARGS];
    int64_t strides[HALF_MAX_ARGS][REF_MAX_DIMS];
    void *bufs[HALF_MAX_ARGS];
} half_call;

/* float32 copy of args[i] into c (a contiguous tensor over a packed buffer) */
static fl_status widen_arg(const ref_args *a, half_call *c, uint32_t i) {
    const fl_tensor *t = c->args[i].value.tensor;
    REF_TRY(ref_pack(a, t, FL_FLOAT32, &c->bufs[i]));
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

static fl_status run_as_f32(const char *op, const fl_arg *args, uint32_t nargs,
                            ref_kernel_ctx *ctx, ref_kernel_fn fn, uint32_t nout,
                            int dtype_arg) {
    int any = 0;
    for (uint32_t i = 0; i < nargs; ++i)
        any |= args[i].kind == FL_ARG_TENSOR && is_half(args[i].value.tensor->dtype);
    if (!any)
        return fn(args, nargs, ctx);
    ref_args a = {args, nargs, ctx, op};
    if (nargs > HALF_MAX_ARGS || nout > nargs)
        return ref_fail(&a, "too many arguments (%u) for the half-precision path", nargs);
    half_call *c = (half_call *)ref_alloc(sizeof *c);
    if (!c)
        return ref_fail(&a, "out of host memory");
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
    ref_free(c);
    return st;
}

#define K_HALF(NAME, OP, FN, NOUT, DTYPE_ARG) \
    REF_KERNEL(NAME) { return run_as_f32(OP, args, nargs, ctx, FN, NOUT, DTYPE_ARG); }

K_HALF(ref_k_mm_any, "mm", ref_k_mm, 1, -1)
K_HALF(ref_k_addmm_any, "addmm", ref_k_addmm, 1, -1)
K_HALF(ref_k_bmm_any, "bmm", ref_k_bmm, 1, -1)
K_HALF(ref_k_baddbmm_any, "baddbmm", ref_k_baddbmm, 1, -1)
K_HALF(ref_k_convolution_any, "convolution", ref_k_convolution, 1, -1)
K_HALF(ref_k_convolution_backward_any, "convolution_backward", ref_k_convolution_backward, 3, -1)
K_HALF(ref_k_softmax_any, "_softmax", ref_k_softmax, 1, -1)
K_HALF(ref_k_log_softmax_any, "_log_softmax", ref_k_log_softmax, 1, -1)
K_HALF(ref_k_softmax_backward_data_any, "_softmax_backward_data", ref_k_softmax_backward_data,
       1, 3)
K_HALF(ref_k_log_softmax_backward_data_any, "_log_softmax_backward_data",
       ref_k_log_softmax_backward_data, 1, 3)
K_HALF(ref_k_max_pool2d_with_indices_any, "max_pool2d_with_indices",
       ref_k_max_pool2d_with_indices, 2, -1)
K_HALF(ref_k_max_pool2d_with_indices_backward_any, "max_pool2d_with_indices_backward",
       ref_k_max_pool2d_with_indices_backward, 1, -1)
K_HALF(ref_k_nll_loss_forward_any, "nll_loss_forward", ref_k_nll_loss_forward, 2, -1)
K_HALF(ref_k_nll_loss_backward_any, "nll_loss_backward", ref_k_nll_loss_backward, 1, -1)
