/*
 * blas.c -- the reference chip's gemm wrappers over OpenBLAS (see blas.h).
 */
#include "util/blas.h"

#include <limits.h>
#include <pthread.h>
#include <stdlib.h>

#include <cblas.h>

/* OpenBLAS starts one thread per core by default.  A reference device is one
 * stream worker, one core (docs/vendors/reference-vendor.md "Environment"): BLAS threads of its own
 * compete with the launching thread and with the other devices' workers, and
 * on a host with no idle core a gemm of a tiny model's shapes then waits for
 * its helper thread's time slice (11 ms instead of 0.2 ms per 256x64x64 mm on
 * a loaded 2-core machine).  So BLAS runs on the calling worker only, unless
 * FL_REFERENCE_BLAS_THREADS asks for more (unset or below 1: 1; without it, a
 * non-empty OPENBLAS_NUM_THREADS set by the user is left alone). */
static pthread_once_t g_threads_once = PTHREAD_ONCE_INIT;

static void set_blas_threads(void) {
    const char *ours = getenv("FL_REFERENCE_BLAS_THREADS"), *theirs = getenv("OPENBLAS_NUM_THREADS");
    if (!ours && theirs && *theirs)
        return;
    long n = ours ? strtol(ours, NULL, 10) : 1;
    scipy_openblas_set_num_threads(n < 1 ? 1 : n > 256 ? 256 : (int)n);
}

static void blas_init(void) { pthread_once(&g_threads_once, set_blas_threads); }

fl_status ref_gemm(const flk_args *a, int32_t dtype, int trans_a, int trans_b, int64_t m,
                   int64_t n, int64_t k, double alpha, const void *A, int64_t lda,
                   const void *B, int64_t ldb, double beta, void *C, int64_t ldc) {
    if (m <= 0 || n <= 0)
        return FL_SUCCESS;
    blas_init();
    if (m > INT_MAX || n > INT_MAX || k > INT_MAX || lda > INT_MAX || ldb > INT_MAX ||
        ldc > INT_MAX)
        return flk_fail(a, "matrix dimension too large for BLAS (m=%lld n=%lld k=%lld)",
                        (long long)m, (long long)n, (long long)k);
    /* BLAS requires ld >= max(1, columns) of the stored matrix even when unused */
    int64_t ca = trans_a ? m : k, cb = trans_b ? k : n;
    if (lda < 1) lda = 1;
    if (ldb < 1) ldb = 1;
    if (lda < ca) lda = ca;
    if (ldb < cb) ldb = cb;
    if (ldc < n) ldc = n;
    enum CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE tb = trans_b ? CblasTrans : CblasNoTrans;
    if (dtype == FL_FLOAT32)
        scipy_cblas_sgemm(CblasRowMajor, ta, tb, (blasint)m, (blasint)n, (blasint)k, (float)alpha,
                          (const float *)A, (blasint)lda, (const float *)B, (blasint)ldb,
                          (float)beta, (float *)C, (blasint)ldc);
    else if (dtype == FL_FLOAT64)
        scipy_cblas_dgemm(CblasRowMajor, ta, tb, (blasint)m, (blasint)n, (blasint)k, alpha,
                          (const double *)A, (blasint)lda, (const double *)B, (blasint)ldb, beta,
                          (double *)C, (blasint)ldc);
    else
        return flk_fail(a, "gemm: dtype %s not supported", flk_dtype_name(dtype));
    return FL_SUCCESS;
}

fl_status ref_gemm_batch(const flk_args *a, int32_t dtype, int trans_a, int trans_b, int64_t m,
                         int64_t n, int64_t k, double alpha, const void *A, int64_t lda,
                         int64_t sa, const void *B, int64_t ldb, int64_t sb, double beta, void *C,
                         int64_t ldc, int64_t sc, int64_t count) {
    if (m <= 0 || n <= 0 || count <= 0)
        return FL_SUCCESS;
    const size_t es = flk_dtype_size(dtype);
    int64_t ca = trans_a ? m : k, cb = trans_b ? k : n;
    int fits = count <= INT_MAX && m <= INT_MAX && n <= INT_MAX && k <= INT_MAX &&
               lda <= INT_MAX && ldb <= INT_MAX && ldc <= INT_MAX && sa >= 0 && sb >= 0 &&
               sc >= 0 && sa <= INT_MAX && sb <= INT_MAX && sc <= INT_MAX && k > 0 &&
               lda >= (ca > 1 ? ca : 1) && ldb >= (cb > 1 ? cb : 1) && ldc >= n;
    if (count == 1 || !fits || (dtype != FL_FLOAT32 && dtype != FL_FLOAT64)) {
        for (int64_t i = 0; i < count; ++i)
            FLK_TRY(ref_gemm(a, dtype, trans_a, trans_b, m, n, k, alpha,
                             (const char *)A + (size_t)(i * sa) * es, lda,
                             (const char *)B + (size_t)(i * sb) * es, ldb, beta,
                             (char *)C + (size_t)(i * sc) * es, ldc));
        return FL_SUCCESS;
    }
    blas_init();
    enum CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE tb = trans_b ? CblasTrans : CblasNoTrans;
    if (dtype == FL_FLOAT32)
        scipy_cblas_sgemm_batch_strided(CblasRowMajor, ta, tb, (blasint)m, (blasint)n, (blasint)k,
                                        (float)alpha, (const float *)A, (blasint)lda, (blasint)sa,
                                        (const float *)B, (blasint)ldb, (blasint)sb, (float)beta,
                                        (float *)C, (blasint)ldc, (blasint)sc, (blasint)count);
    else
        scipy_cblas_dgemm_batch_strided(CblasRowMajor, ta, tb, (blasint)m, (blasint)n, (blasint)k,
                                        alpha, (const double *)A, (blasint)lda, (blasint)sa,
                                        (const double *)B, (blasint)ldb, (blasint)sb, beta,
                                        (double *)C, (blasint)ldc, (blasint)sc, (blasint)count);
    return FL_SUCCESS;
}
