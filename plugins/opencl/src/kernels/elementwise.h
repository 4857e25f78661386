/*
 * elementwise.h -- the host side of the elementwise family (cl/ew.cl.h),
 * shared by unary.c, binary.c, inplace.c and foreach.c.
 *
 * Each function checks what the OpenCL kernels compute and declines the rest
 * (FL_ERROR_NOT_SUPPORTED, so the runtime's fallback runs the call): every
 * tensor operand and the output of one float dtype the device has kernels for
 * (comparisons: a bool output), an output that does not partly overlap an
 * input, at most CLK_MAX_DIMS dimensions after coalescing.  Scalars (an
 * operand with t == NULL) are computed in the compute type (float for float16
 * and float32), as PyTorch's CPU kernels take a wrapped number.
 */
#ifndef PLG_KERNELS_ELEMENTWISE_H
#define PLG_KERNELS_ELEMENTWISE_H

#include "clk.h"

#pragma GCC visibility push(hidden)

/* out = op(x; p0, p1) (cl/ew.cl.h unary_op) */
fl_status ew_unary(const flk_args *a, const fl_tensor *out, const fl_tensor *x, int op, double p0, double p1);
/* out = op(x, y; p0, p1); x or y may be a scalar */
fl_status ew_binary(const flk_args *a, const fl_tensor *out, flk_operand x, flk_operand y, int op, double p0,
                    double p1);
/* out = op(x, y, z; p0); z may be a scalar */
fl_status ew_ternary(const flk_args *a, const fl_tensor *out, const fl_tensor *x, const fl_tensor *y, flk_operand z,
                     int op, double p0);
/* bool out = op(x, y); y may be a scalar */
fl_status ew_compare(const flk_args *a, const fl_tensor *out, const fl_tensor *x, flk_operand y, int op);
/* out = cond ? x : y (cond bool); x or y may be a scalar */
fl_status ew_where(const flk_args *a, const fl_tensor *out, const fl_tensor *cond, flk_operand x, flk_operand y);

/* A tensor as an operand. */
static inline flk_operand ew_tensor(const fl_tensor *t) {
    flk_operand o = {t, {FL_ARG_NONE, 0, 0}};
    return o;
}

#pragma GCC visibility pop

#endif /* PLG_KERNELS_ELEMENTWISE_H */
