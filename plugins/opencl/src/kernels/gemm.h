/*
 * gemm.h -- the host side of the matrix product family (cl/gemm.cl.h),
 * shared by matmul.c and conv.c.
 */
#ifndef PLG_KERNELS_GEMM_H
#define PLG_KERNELS_GEMM_H

#include "clk.h"

#pragma GCC visibility push(hidden)

/* An operand: a tensor's buffer and offset (t), read as a matrix with these
 * element strides along rows, columns (k for A) and the batch. */
typedef struct gemm_operand {
    const fl_tensor *t;       /* NULL: no bias */
    int64_t rs, cs, bs;
} gemm_operand;

/* C[b] = alpha * A[b] @ B[b] + beta * D[b] (D only when d.t and beta != 0).
 * a_kin > 0 splits A's k into (k / a_kin) * a_ko + (k % a_kin) * a.cs. */
typedef struct gemm_call {
    int64_t m, n, k, batch;
    gemm_operand a, b, c, d;
    int64_t a_kin, a_ko;
    double alpha, beta;
} gemm_call;

/* Enqueue the product: every tensor of `dtype`.  B with unit stride along n
 * goes straight to the kernel; otherwise the transposed product when A has
 * unit stride along m, else B is first packed into a contiguous scratch. */
fl_status gemm_run(const flk_args *a, int32_t dtype, gemm_call g);

#pragma GCC visibility pop

#endif /* PLG_KERNELS_GEMM_H */
