/*
 * blas.h -- matrix multiplies through OpenBLAS (the scipy-openblas32 build,
 * plugin.yaml `link: [openblas]`): what makes the reference's matmul and
 * convolution kernels fast.  Reference-specific: a chip has its own.
 */
#ifndef REF_UTIL_BLAS_H
#define REF_UTIL_BLAS_H

#include "fl_kernel.h"

#pragma GCC visibility push(hidden)

/* Row-major C[m,n] = alpha * op(A)[m,k] @ op(B)[k,n] + beta * C.  dtype
 * FL_FLOAT32 or FL_FLOAT64; A, B, C aligned to the element size; leading
 * dimensions in elements.  Fails if a size does not fit BLAS's int. */
fl_status ref_gemm(const flk_args *a, int32_t dtype, int trans_a, int trans_b, int64_t m,
                   int64_t n, int64_t k, double alpha, const void *A, int64_t lda,
                   const void *B, int64_t ldb, double beta, void *C, int64_t ldc);

/* count gemms with the same shapes: A_i = A + i*sa (elements), likewise B,
 * C; one BLAS call (cblas_?gemm_batch_strided), on BLAS's threads when
 * FL_REFERENCE_BLAS_THREADS gives it more than the caller's (blas.c).  The C_i
 * must not overlap. */
fl_status ref_gemm_batch(const flk_args *a, int32_t dtype, int trans_a, int trans_b, int64_t m,
                         int64_t n, int64_t k, double alpha, const void *A, int64_t lda,
                         int64_t sa, const void *B, int64_t ldb, int64_t sb, double beta, void *C,
                         int64_t ldc, int64_t sc, int64_t count);

#pragma GCC visibility pop

#endif /* REF_UTIL_BLAS_H */
