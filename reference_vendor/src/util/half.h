/*
 * half.h -- float16 / bfloat16 for the reference's float32 kernels that have
 * no half path of their own (matmul family, convolution, softmax, max
 * pooling, nll loss): the half tensors are converted to float32 copies, the
 * float32 kernel runs (float32 accumulation, as PyTorch's CPU kernels do for
 * these dtypes), and the outputs are rounded back once.  Calls without a
 * half tensor go straight to the float32 kernel.
 */
#ifndef REF_UTIL_HALF_H
#define REF_UTIL_HALF_H

#include "fl_kernel.h"

#pragma GCC visibility push(hidden)

/* Run fn (a float32/float64 kernel of `op`) on float32 copies of the half
 * tensor arguments; the last nout arguments are outputs, written back.
 * dtype_arg >= 0: that argument is a ScalarType (e.g. input_dtype) to turn
 * from a half dtype into float32 too. */
fl_status ref_run_as_f32(const char *op, const fl_arg *args, uint32_t nargs, flk_ctx *ctx,
                         flk_fn fn, uint32_t nout, int dtype_arg);

/* The kernel NAME: FN through ref_run_as_f32. */
#define REF_VIA_F32(NAME, OP, FN, NOUT, DTYPE_ARG) \
    FLK_KERNEL_FN(NAME) { return ref_run_as_f32(OP, args, nargs, ctx, FN, NOUT, DTYPE_ARG); }

#pragma GCC visibility pop

#endif /* REF_UTIL_HALF_H */
