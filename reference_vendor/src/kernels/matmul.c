/*
 * matmul.c -- mm, addmm, bmm, baddbmm on BLAS (OpenBLAS sgemm/dgemm).
 *
 * A strided matrix goes to BLAS directly when one of its strides is 1 (as
 * a normal or transposed operand, the other stride as leading dimension) and
 * its data is aligned to the element size; otherwise it is packed into a
 * contiguous temporary first.  An output BLAS can't address is computed in a
 * temporary and copied out.
 */
#include "fl_kernel.h"
#include "util/blas.h"
#include "util/half.h"

typedef struct mat {
    char *p;
    int64_t rows, cols, rs, cs; /* strides in elements */
} mat;

/* BLAS can read m as stored: *trans = 0 row-major (ld = rs), 1 column-major */
static int blas_layout(const mat *m, size_t es, int *trans, int64_t *ld) {
    if ((uintptr_t)m->p % es != 0)
        return 0;
    int64_t r = m->rows, c = m->cols;
    if ((c <= 1 || m->cs == 1) && (r <= 1 || (m->rs >= c && m->rs >= 1))) {
        *trans = 0;
        *ld = r <= 1 ? (c > 1 ? c : 1) : m->rs;
        return *ld <= 0x7fffffff;
    }
    if ((r <= 1 || m->rs == 1) && (c <= 1 || (m->cs >= r && m->cs >= 1))) {
        *trans = 1;
        *ld = c <= 1 ? (r > 1 ? r : 1) : m->cs;
        return *ld <= 0x7fffffff;
    }
    return 0;
}

/* dst (rows x cols, strides) <- src (rows x cols, strides), elements of es bytes */
static void copy2d(char *dst, int64_t drs, int64_t dcs, const char *src, int64_t srs, int64_t scs,
                   int64_t rows, int64_t cols, size_t es) {
    for (int64_t i = 0; i < rows; ++i) {
        char *d = dst + i * drs * (int64_t)es;
        const char *s = src + i * srs * (int64_t)es;
        if (es == 4) {
            if (dcs == 1 && scs == 1)
                memcpy(d, s, (size_t)cols * 4);
            else
                for (int64_t j = 0; j < cols; ++j)
                    *(flk_i32 *)(d + j * dcs * 4) = *(const flk_i32 *)(s + j * scs * 4);
        } else {
            if (dcs == 1 && scs == 1)
                memcpy(d, s, (size_t)cols * 8);
            else
                for (int64_t j = 0; j < cols; ++j)
                    *(flk_i64 *)(d + j * dcs * 8) = *(const flk_i64 *)(s + j * scs * 8);
        }
    }
}

/* An operand ready for BLAS: possibly a packed copy. */
typedef struct operand {
    const char *p;
    int trans;
    int64_t ld;
    char *tmp; /* owned, NULL when m is used in place */
} operand;

static fl_status prep_operand(const flk_args *a, const mat *m, size_t es, operand *o) {
    o->tmp = NULL;
    if (blas_layout(m, es, &o->trans, &o->ld)) {
        o->p = m->p;
        return FL_SUCCESS;
    }
    int64_t cols = m->cols > 0 ? m->cols : 1;
    o->tmp = (char *)flk_alloc((size_t)(m->rows * cols) * es);
    if (!o->tmp)
        return flk_fail(a, "out of host memory packing a %lldx%lld matrix", (long long)m->rows,
                        (long long)m->cols);
    copy2d(o->tmp, cols, 1, m->p, m->rs, m->cs, m->rows, m->cols, es);
    o->p = o->tmp;
    o->trans = 0;
    o->ld = cols;
    return FL_SUCCESS;
}

static void scale_zero(const mat *c, size_t es, double beta) {
    /* C = beta * C, beta == 0 writes zeros (NaN in C is dropped) */
    for (int64_t i = 0; i < c->rows; ++i)
        for (int64_t j = 0; j < c->cols; ++j) {
            char *p = c->p + (i * c->rs + j * c->cs) * (int64_t)es;
            if (es == 4)
                *(flk_f32 *)p = beta == 0.0 ? 0.0f : (float)beta * *(flk_f32 *)p;
            else
                *(flk_f64 *)p = beta == 0.0 ? 0.0 : beta * *(flk_f64 *)p;
        }
}

/* C = alpha * A @ B + beta * C for strided matrices (C's content is ignored
 * when beta == 0). tmp buffers are allocated per call. */
static fl_status gemm_strided(const flk_args *a, int32_t dt, const mat *A, const mat *B,
                              const mat *C, double alpha, double beta) {
    size_t es = flk_dtype_size(dt);
    int64_t m = C->rows, n = C->cols, k = A->cols;
    if (m == 0 || n == 0)
        return FL_SUCCESS;
    if (k == 0) {
        scale_zero(C, es, beta);
        return FL_SUCCESS;
    }
    operand oa, ob;
    FLK_TRY(prep_operand(a, A, es, &oa));
    fl_status st = prep_operand(a, B, es, &ob);
    if (st != FL_SUCCESS) {
        flk_free(oa.tmp);
        return st;
    }
    int ctrans;
    int64_t ldc;
    if (blas_layout(C, es, &ctrans, &ldc)) {
        if (!ctrans)
            st = ref_gemm(a, dt, oa.trans, ob.trans, m, n, k, alpha, oa.p, oa.ld, ob.p, ob.ld, beta,
                          C->p, ldc);
        else /* C^T = B^T A^T, C^T row-major with ld = ldc */
            st = ref_gemm(a, dt, !ob.trans, !oa.trans, n, m, k, alpha, ob.p, ob.ld, oa.p, oa.ld,
                          beta, C->p, ldc);
    } else {
        char *tc = (char *)flk_alloc((size_t)(m * n) * es);
        if (!tc) {
            st = flk_fail(a, "out of host memory for a %lldx%lld result", (long long)m,
                          (long long)n);
        } else {
            if (beta != 0.0)
                copy2d(tc, n, 1, C->p, C->rs, C->cs, m, n, es);
            st = ref_gemm(a, dt, oa.trans, ob.trans, m, n, k, alpha, oa.p, oa.ld, ob.p, ob.ld,
                          beta, tc, n);
            if (st == FL_SUCCESS)
                copy2d(C->p, C->rs, C->cs, tc, n, 1, m, n, es);
            flk_free(tc);
        }
    }
    flk_free(oa.tmp);
    flk_free(ob.tmp);
    return st;
}

static mat mat_of(const fl_tensor *t, int r, int c) {
    mat m = {(char *)flk_data(t), t->sizes[r], t->sizes[c], t->strides[r], t->strides[c]};
    return m;
}

static fl_status check_float_same(const flk_args *a, const fl_tensor *x, const fl_tensor *y,
                                  const fl_tensor *out) {
    if (x->dtype != FL_FLOAT32 && x->dtype != FL_FLOAT64)
        return flk_fail(a, "dtype %s is not supported (float32, float64)",
                        flk_dtype_name(x->dtype));
    if (y->dtype != x->dtype || out->dtype != x->dtype)
        return flk_fail(a, "expected all tensors to be %s, got %s and %s output",
                        flk_dtype_name(x->dtype), flk_dtype_name(y->dtype),
                        flk_dtype_name(out->dtype));
    return FL_SUCCESS;
}

/* mm(Tensor self, Tensor mat2) */
FLK_KERNEL_FN(k_mm) {
    flk_args a;
    const fl_tensor *x, *y, *out;
    FLK_TRY(flk_args_init(&a, "mm", args, nargs, 3, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &x));
    FLK_TRY(flk_get_tensor(&a, 1, "mat2", &y));
    FLK_TRY(flk_get_tensor(&a, 2, "out", &out));
    FLK_TRY(check_float_same(&a, x, y, out));
    if (x->ndim != 2 || y->ndim != 2 || out->ndim != 2)
        return flk_fail(&a, "expected 2-D tensors");
    if (x->sizes[1] != y->sizes[0] || out->sizes[0] != x->sizes[0] || out->sizes[1] != y->sizes[1])
        return flk_fail(&a, "shapes cannot be multiplied (%lldx%lld and %lldx%lld)",
                        (long long)x->sizes[0], (long long)x->sizes[1], (long long)y->sizes[0],
                        (long long)y->sizes[1]);
    mat A = mat_of(x, 0, 1), B = mat_of(y, 0, 1), C = mat_of(out, 0, 1);
    return gemm_strided(&a, x->dtype, &A, &B, &C, 1.0, 0.0);
}

/* fill_beta_self's loop for a float32/float64 C with unit column stride and a
 * tensor self of C's dtype: the same values (beta * v computed in double, v
 * itself when beta is 1) without a dtype switch and address sum per element;
 * a bias row broadcast down the rows (GPT-2's Conv1D addmm) is a memcpy. */
static void fill_rows(const mat *c, size_t es, const char *sb, int64_t srs, int64_t scs,
                      double beta) {
    for (int64_t i = 0; i < c->rows; ++i) {
        char *row = c->p + i * c->rs * (int64_t)es;
        const char *src = sb + i * srs;
        if (beta == 1.0 && scs == (int64_t)es)
            memmove(row, src, (size_t)c->cols * es); /* self may be out (addmm_) */
        else if (es == 4)
            for (int64_t j = 0; j < c->cols; ++j) {
                const double v = (double)*(const flk_f32 *)(src + j * scs);
                ((flk_f32 *)row)[j] = (flk_f32)(beta == 1.0 ? v : beta * v);
            }
        else
            for (int64_t j = 0; j < c->cols; ++j) {
                const double v = *(const flk_f64 *)(src + j * scs);
                ((flk_f64 *)row)[j] = beta == 1.0 ? v : beta * v;
            }
    }
}

/* out = beta * broadcast(self) (self a tensor or a scalar); out is 2-d or 3-d */
static fl_status fill_beta_self(const flk_args *a, const flk_operand *self, const fl_tensor *out,
                                double beta) {
    const size_t es = flk_dtype_size(out->dtype);
    int64_t st[FLK_MAX_DIMS] = {0};
    const char *sp = NULL;
    if (self->t) {
        FLK_TRY(flk_broadcast_strides(a, self->t, "self", out->ndim, out->sizes, st));
        sp = (const char *)flk_data(self->t);
    }
    const int batched = out->ndim == 3;
    const int64_t nb = batched ? out->sizes[0] : 1;
    for (int64_t b = 0; b < nb; ++b) {
        mat C = mat_of(out, batched, batched + 1);
        C.p += b * (batched ? out->strides[0] : 0) * (int64_t)es;
        const char *sb = sp ? sp + b * (batched ? st[0] : 0) : NULL;
        const int64_t srs = st[batched], scs = st[batched + 1];
        if (sb && C.cs == 1 && (es == 4 || es == 8)) {
            fill_rows(&C, es, sb, srs, scs, beta);
            continue;
        }
        for (int64_t i = 0; i < C.rows; ++i)
            for (int64_t j = 0; j < C.cols; ++j) {
                char *cp = C.p + (i * C.rs + j * C.cs) * (int64_t)es;
                double v = sb ? flk_load_f64(sb + i * srs + j * scs, out->dtype) : self->s.f;
                flk_store_f64(cp, out->dtype, beta == 1.0 ? v : beta * v);
            }
    }
    return FL_SUCCESS;
}

/* addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) */
FLK_KERNEL_FN(k_addmm) {
    flk_args a;
    const fl_tensor *x, *y, *out;
    flk_operand self;
    double beta, alpha;
    FLK_TRY(flk_args_init(&a, "addmm", args, nargs, 6, ctx));
    FLK_TRY(flk_get_operand(&a, 0, "self", &self));
    FLK_TRY(flk_get_tensor(&a, 1, "mat1", &x));
    FLK_TRY(flk_get_tensor(&a, 2, "mat2", &y));
    FLK_TRY(flk_get_double(&a, 3, "beta", &beta));
    FLK_TRY(flk_get_double(&a, 4, "alpha", &alpha));
    FLK_TRY(flk_get_tensor(&a, 5, "out", &out));
    FLK_TRY(check_float_same(&a, x, y, out));
    if (self.t && self.t->dtype != x->dtype)
        return flk_fail(&a, "self is %s, mat1 is %s", flk_dtype_name(self.t->dtype),
                        flk_dtype_name(x->dtype));
    if (x->ndim != 2 || y->ndim != 2 || out->ndim != 2)
        return flk_fail(&a, "expected 2-D mat1, mat2");
    if (x->sizes[1] != y->sizes[0] || out->sizes[0] != x->sizes[0] || out->sizes[1] != y->sizes[1])
        return flk_fail(&a, "shapes cannot be multiplied (%lldx%lld and %lldx%lld)",
                        (long long)x->sizes[0], (long long)x->sizes[1], (long long)y->sizes[0],
                        (long long)y->sizes[1]);
    mat C = mat_of(out, 0, 1);
    if (beta != 0.0)
        FLK_TRY(fill_beta_self(&a, &self, out, beta));
    mat A = mat_of(x, 0, 1), B = mat_of(y, 0, 1);
    return gemm_strided(&a, x->dtype, &A, &B, &C, alpha, beta != 0.0 ? 1.0 : 0.0);
}

/* C_i = alpha * A_i @ B_i + beta * C_i over the batch */
static fl_status batched(const flk_args *a, const fl_tensor *x, const fl_tensor *y,
                         const fl_tensor *out, double alpha, double beta) {
    FLK_TRY(check_float_same(a, x, y, out));
    if (x->ndim != 3 || y->ndim != 3 || out->ndim != 3)
        return flk_fail(a, "expected 3-D tensors");
    int64_t b = x->sizes[0];
    if (y->sizes[0] != b || out->sizes[0] != b || x->sizes[2] != y->sizes[1] ||
        out->sizes[1] != x->sizes[1] || out->sizes[2] != y->sizes[2])
        return flk_fail(a, "batch shapes do not match ([%lld,%lld,%lld] @ [%lld,%lld,%lld])",
                        (long long)x->sizes[0], (long long)x->sizes[1], (long long)x->sizes[2],
                        (long long)y->sizes[0], (long long)y->sizes[1], (long long)y->sizes[2]);
    size_t es = flk_dtype_size(x->dtype);
    for (int64_t i = 0; i < b; ++i) {
        mat A = mat_of(x, 1, 2), B = mat_of(y, 1, 2), C = mat_of(out, 1, 2);
        A.p += i * x->strides[0] * (int64_t)es;
        B.p += i * y->strides[0] * (int64_t)es;
        C.p += i * out->strides[0] * (int64_t)es;
        FLK_TRY(gemm_strided(a, x->dtype, &A, &B, &C, alpha, beta));
    }
    return FL_SUCCESS;
}

/* bmm(Tensor self, Tensor mat2) */
FLK_KERNEL_FN(k_bmm) {
    flk_args a;
    const fl_tensor *x, *y, *out;
    FLK_TRY(flk_args_init(&a, "bmm", args, nargs, 3, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &x));
    FLK_TRY(flk_get_tensor(&a, 1, "mat2", &y));
    FLK_TRY(flk_get_tensor(&a, 2, "out", &out));
    return batched(&a, x, y, out, 1.0, 0.0);
}

/* baddbmm(Tensor self, Tensor batch1, Tensor batch2, *, Scalar beta=1, Scalar alpha=1) */
FLK_KERNEL_FN(k_baddbmm) {
    flk_args a;
    const fl_tensor *x, *y, *out;
    flk_operand self;
    double beta, alpha;
    FLK_TRY(flk_args_init(&a, "baddbmm", args, nargs, 6, ctx));
    FLK_TRY(flk_get_operand(&a, 0, "self", &self));
    FLK_TRY(flk_get_tensor(&a, 1, "batch1", &x));
    FLK_TRY(flk_get_tensor(&a, 2, "batch2", &y));
    FLK_TRY(flk_get_double(&a, 3, "beta", &beta));
    FLK_TRY(flk_get_double(&a, 4, "alpha", &alpha));
    FLK_TRY(flk_get_tensor(&a, 5, "out", &out));
    FLK_TRY(check_float_same(&a, x, y, out));
    if (self.t && self.t->dtype != x->dtype)
        return flk_fail(&a, "self is %s, batch1 is %s", flk_dtype_name(self.t->dtype),
                        flk_dtype_name(x->dtype));
    if (out->ndim != 3)
        return flk_fail(&a, "expected 3-D batch1, batch2");
    if (beta != 0.0)
        FLK_TRY(fill_beta_self(&a, &self, out, beta));
    return batched(&a, x, y, out, alpha, beta != 0.0 ? 1.0 : 0.0);
}

/* ---- float16 / bfloat16 through float32 copies (util/half.h) ------------------- */

/* The registered kernels: the float32/float64 kernels above for those dtypes, on
 * float32 copies for float16 and bfloat16. */
REF_VIA_F32(k_mm_any, "mm", k_mm, 1, -1)
FLK_REGISTER("mm", FLK_FLOAT_TYPES, k_mm_any);
REF_VIA_F32(k_addmm_any, "addmm", k_addmm, 1, -1)
FLK_REGISTER("addmm", FLK_FLOAT_TYPES, k_addmm_any);
REF_VIA_F32(k_bmm_any, "bmm", k_bmm, 1, -1)
FLK_REGISTER("bmm", FLK_FLOAT_TYPES, k_bmm_any);
REF_VIA_F32(k_baddbmm_any, "baddbmm", k_baddbmm, 1, -1)
FLK_REGISTER("baddbmm", FLK_FLOAT_TYPES, k_baddbmm_any);
