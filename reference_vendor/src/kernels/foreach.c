/*
 * foreach.c -- the in-place tensor-list ops torch.optim's foreach paths call
 * (_foreach_mul_.Scalar, _foreach_lerp_.Scalar, _foreach_addcmul_.Scalar, ...):
 * one launch updates entry k of `self` from entry k of the other lists, for
 * every k.  The ScalarList overloads (AdamW's per-parameter bias corrections:
 * _foreach_div_.ScalarList, _foreach_addcdiv_.ScalarList) take entry k's scalar
 * from a Scalar[] (fl_abi.h: a FLOAT_LIST of doubles).  _foreach_sqrt.out writes a separate output list; the runtime
 * builds the out-of-place _foreach_sqrt on it (fl_runtime/ops/foreach.py).
 *
 * float32/float64, every list entry k of one dtype and shape; anything else
 * (integer lists, broadcasting, mixed dtypes) is declined at launch and the
 * runtime runs PyTorch's per-tensor loop instead.  Arithmetic in the tensor's
 * precision, as ATen's per-tensor kernels compute it.
 */
#include <math.h>

#include "fl_kernel.h"

typedef enum {
    FE_ADD_SCALAR, FE_MUL_SCALAR, FE_ADD_LIST, FE_LERP_SCALAR, FE_ADDCMUL_SCALAR,
    FE_ADDCDIV_SCALAR, FE_SQRT_, FE_SQRT_OUT, FE_DIV_SCALAR
} fe_op;

enum { FE_NO_SCALAR = 0, FE_ONE_SCALAR = 1, FE_SCALAR_PER_ENTRY = 2 };

typedef struct fe_spec {
    const char *name;
    fe_op op;
    uint32_t nlists;   /* tensor lists first: self, then the operands (or `out` last) */
    int scalars;       /* after the lists: FE_NO_SCALAR, a Scalar, or a Scalar[] (one per entry) */
} fe_spec;

#define ELEM(T, t, i) (*(T *)flk_element((t), (t), (i)))

/* One element's update; the same expression on both paths below, so a
 * contiguous entry and a strided one compute identical values.  Returns 0 when
 * it wrote its result itself (the out-of-place sqrt). */
#define FE_APPLY(T, op, v, A, B, s, scalar, OUT)                                             \
    switch (op) {                                                                            \
    case FE_ADD_SCALAR: v = v + s; break;                                                    \
    case FE_MUL_SCALAR: v = v * s; break;                                                    \
    case FE_DIV_SCALAR: v = v / s; break;   /* ATen's div_: a / b, b in T */                  \
    case FE_ADD_LIST: v = v + s * (A); break;                                                \
    case FE_LERP_SCALAR: { /* ATen's lerp: exact at both ends */                              \
        T end = (A);                                                                         \
        v = fabs(scalar) < 0.5 ? v + s * (end - v) : end - (end - v) * ((T)1 - s);           \
        break;                                                                               \
    }                                                                                        \
    case FE_ADDCMUL_SCALAR: v = v + s * (A) * (B); break;                                    \
    case FE_ADDCDIV_SCALAR: /* (s * a) / b, ATen's order: 0 * a / tiny is 0, not NaN */      \
        v = v + s * (A) / (B); break;                                                        \
    case FE_SQRT_: v = (T)sqrt(v); break;                                                    \
    case FE_SQRT_OUT: OUT = (T)sqrt(v); continue;                                            \
    }

/* The contiguous loop of one op: `op` is a constant in each instantiation, so
 * the switch folds away and the loop vectorises (an optimizer step is a few
 * such passes over every parameter; the strided loop's index arithmetic made it
 * 50x slower). */
#define FE_CONTIG(T, OP)                                                                     \
    __attribute__((optimize("no-math-errno"))) /* sqrt's errno blocks vectorising */          \
    static void fe_contig_##T##_##OP(T *restrict x, T *restrict a, const T *restrict b,      \
                                     int64_t n, double scalar) {                              \
        const T s = (T)scalar;                                                               \
        (void)a, (void)b;                                                                    \
        for (int64_t i = 0; i < n; ++i) {                                                    \
            T v = x[i];                                                                      \
            FE_APPLY(T, OP, v, a[i], b[i], s, scalar, a[i])                                  \
            x[i] = v;                                                                        \
        }                                                                                    \
    }

#define FE_LOOP(T)                                                                           \
    FE_CONTIG(T, FE_ADD_SCALAR)                                                              \
    FE_CONTIG(T, FE_MUL_SCALAR)                                                              \
    FE_CONTIG(T, FE_DIV_SCALAR)                                                              \
    FE_CONTIG(T, FE_ADD_LIST)                                                                \
    FE_CONTIG(T, FE_LERP_SCALAR)                                                             \
    FE_CONTIG(T, FE_ADDCMUL_SCALAR)                                                          \
    FE_CONTIG(T, FE_ADDCDIV_SCALAR)                                                          \
    FE_CONTIG(T, FE_SQRT_)                                                                   \
    FE_CONTIG(T, FE_SQRT_OUT)                                                                \
    /* 1 when it ran: every tensor contiguous, and no operand overlapping self               \
     * (fe_accepts allows an identical view; restrict does not) */                           \
    static int fe_fast_##T(fe_op op, const fl_tensor *x, const fl_tensor *a,                  \
                           const fl_tensor *b, double scalar) {                              \
        if (!flk_is_contiguous(x) || (a && !flk_is_contiguous(a)) ||                         \
            (b && !flk_is_contiguous(b)))                                                    \
            return 0;                                                                        \
        T *px = (T *)flk_data(x), *pa = a ? (T *)flk_data(a) : NULL;                          \
        const T *pb = b ? (const T *)flk_data(b) : NULL;                                     \
        /* a and b may be one tensor (addcmul_(v, g, g)): both are only read then */        \
        if ((pa && flk_may_overlap(a, x)) || (pb && flk_may_overlap(b, x)))                  \
            return 0;                                                                        \
        const int64_t n = flk_numel(x);                                                      \
        switch (op) {                                                                        \
        case FE_ADD_SCALAR: fe_contig_##T##_FE_ADD_SCALAR(px, pa, pb, n, scalar); break;     \
        case FE_MUL_SCALAR: fe_contig_##T##_FE_MUL_SCALAR(px, pa, pb, n, scalar); break;     \
        case FE_DIV_SCALAR: fe_contig_##T##_FE_DIV_SCALAR(px, pa, pb, n, scalar); break;     \
        case FE_ADD_LIST: fe_contig_##T##_FE_ADD_LIST(px, pa, pb, n, scalar); break;         \
        case FE_LERP_SCALAR: fe_contig_##T##_FE_LERP_SCALAR(px, pa, pb, n, scalar); break;   \
        case FE_ADDCMUL_SCALAR: fe_contig_##T##_FE_ADDCMUL_SCALAR(px, pa, pb, n, scalar);    \
            break;                                                                           \
        case FE_ADDCDIV_SCALAR: fe_contig_##T##_FE_ADDCDIV_SCALAR(px, pa, pb, n, scalar);    \
            break;                                                                           \
        case FE_SQRT_: fe_contig_##T##_FE_SQRT_(px, pa, pb, n, scalar); break;               \
        case FE_SQRT_OUT: fe_contig_##T##_FE_SQRT_OUT(px, pa, pb, n, scalar); break;         \
        }                                                                                    \
        return 1;                                                                            \
    }                                                                                        \
    static void fe_loop_##T(fe_op op, const fl_tensor *x, const fl_tensor *a,                 \
                            const fl_tensor *b, double scalar) {                              \
        if (fe_fast_##T(op, x, a, b, scalar))                                                \
            return;                                                                          \
        const T s = (T)scalar;                                                               \
        const int64_t n = flk_numel(x);                                                      \
        for (int64_t i = 0; i < n; ++i) {                                                    \
            T v = ELEM(T, x, i);                                                             \
            FE_APPLY(T, op, v, ELEM(T, a, i), ELEM(T, b, i), s, scalar, ELEM(T, a, i))       \
            ELEM(T, x, i) = v;                                                               \
        }                                                                                    \
    }
FE_LOOP(float)
FE_LOOP(double)

static fl_status fe_read(const fe_spec *spec, flk_args *a, const fl_arg *args, uint32_t nargs,
                         flk_ctx *ctx, const fl_tensor *const *lists[3], uint32_t *n,
                         const double **scalars, double *scalar) {
    FLK_TRY(flk_args_init(a, spec->name, args, nargs, spec->nlists + (spec->scalars ? 1u : 0u), ctx));
    for (uint32_t l = 0; l < spec->nlists; ++l) {
        uint32_t count;
        FLK_TRY(flk_get_tensor_list(a, l, l ? "tensors" : "self", 0, &lists[l], &count));
        if (l == 0)
            *n = count;
        else if (count != *n)
            return flk_fail(a, "tensor list %u has %u tensors, self %u", l, count, *n);
    }
    *scalar = 1;
    *scalars = NULL;            /* NULL: every entry takes *scalar */
    if (spec->scalars == FE_ONE_SCALAR) {
        flk_scalar s;
        FLK_TRY(flk_get_scalar(a, spec->nlists, "scalar", &s));
        *scalar = s.f;
    } else if (spec->scalars == FE_SCALAR_PER_ENTRY) {
        uint32_t count;
        FLK_TRY(flk_get_double_list(a, spec->nlists, "scalars", scalars, &count));
        if (count != *n)
            return flk_fail(a, "scalars has %u entries, self %u", count, *n);
    }
    return FL_SUCCESS;
}

/* Launch-time check (metadata only, fl_kernel.h flk_kernel.accepts): what the loop
 * cannot compute is declined before anything is enqueued. */
static fl_status fe_accepts(const fe_spec *spec, const fl_arg *args, uint32_t nargs,
                            flk_ctx *ctx) {
    flk_args a;
    const fl_tensor *const *lists[3] = {NULL, NULL, NULL};
    uint32_t n;
    const double *scalars;
    double scalar;
    FLK_TRY(fe_read(spec, &a, args, nargs, ctx, lists, &n, &scalars, &scalar));
    for (uint32_t k = 0; k < n; ++k) {
        const fl_tensor *x = lists[0][k];
        if (x->dtype != FL_FLOAT32 && x->dtype != FL_FLOAT64)
            return flk_decline(&a, "self[%u] is %s; this kernel takes float32/float64", k,
                               flk_dtype_name(x->dtype));
        for (uint32_t l = 1; l < spec->nlists; ++l) {
            const fl_tensor *t = lists[l][k];
            if (t->dtype != x->dtype || !flk_same_sizes(t, x))
                return flk_decline(&a, "list %u entry %u differs from self[%u] in dtype or shape "
                                   "(no promotion or broadcasting here)", l, k, k);
            if (flk_may_overlap(t, x) && !flk_same_view(t, x))
                return flk_decline(&a, "list %u entry %u partly overlaps self[%u]", l, k, k);
        }
    }
    return FL_SUCCESS;
}

static fl_status fe_run(const fe_spec *spec, const fl_arg *args, uint32_t nargs, flk_ctx *ctx) {
    flk_args a;
    const fl_tensor *const *lists[3] = {NULL, NULL, NULL};
    uint32_t n;
    const double *scalars;
    double scalar;
    FLK_TRY(fe_read(spec, &a, args, nargs, ctx, lists, &n, &scalars, &scalar));
    for (uint32_t k = 0; k < n; ++k) {  /* re-checked: a kernel never trusts its caller */
        const fl_tensor *x = lists[0][k];
        if (x->dtype != FL_FLOAT32 && x->dtype != FL_FLOAT64)
            return flk_fail(&a, "self[%u] is %s; this kernel takes float32/float64", k,
                            flk_dtype_name(x->dtype));
        for (uint32_t l = 1; l < spec->nlists; ++l)
            if (lists[l][k]->dtype != x->dtype || !flk_same_sizes(lists[l][k], x))
                return flk_fail(&a, "list %u entry %u differs from self[%u] in dtype or shape", l,
                                k, k);
    }
    for (uint32_t k = 0; k < n; ++k) {
        const fl_tensor *x = lists[0][k];
        const fl_tensor *p = spec->nlists > 1 ? lists[1][k] : NULL;
        const fl_tensor *q = spec->nlists > 2 ? lists[2][k] : NULL;
        const double s = scalars ? scalars[k] : scalar;
        if (x->dtype == FL_FLOAT32)
            fe_loop_float(spec->op, x, p, q, s);
        else
            fe_loop_double(spec->op, x, p, q, s);
    }
    return FL_SUCCESS;
}

/* one registration per op: its spec, kernel and launch-time check */
#define FE_OP(ID, NAME, OP, NLISTS, SCALARS)                                                  \
    static const fe_spec fe_spec_##ID = {NAME, OP, NLISTS, SCALARS};                          \
    FLK_KERNEL_FN(k_##ID) { return fe_run(&fe_spec_##ID, args, nargs, ctx); }                 \
    FLK_KERNEL_FN(accepts_##ID) { return fe_accepts(&fe_spec_##ID, args, nargs, ctx); }       \
    FLK_REGISTER_ENTRY(NAME, FLK_F32_F64, FL_VARIANT_PRECISE, k_##ID, accepts_##ID)

FE_OP(add_scalar, "_foreach_add_.Scalar", FE_ADD_SCALAR, 1, FE_ONE_SCALAR);
FE_OP(mul_scalar, "_foreach_mul_.Scalar", FE_MUL_SCALAR, 1, FE_ONE_SCALAR);
FE_OP(add_list, "_foreach_add_.List", FE_ADD_LIST, 2, FE_ONE_SCALAR);  /* (self, other, *, alpha) */
FE_OP(lerp_scalar, "_foreach_lerp_.Scalar", FE_LERP_SCALAR, 2, FE_ONE_SCALAR);
FE_OP(addcmul_scalar, "_foreach_addcmul_.Scalar", FE_ADDCMUL_SCALAR, 3, FE_ONE_SCALAR);
FE_OP(addcdiv_scalar, "_foreach_addcdiv_.Scalar", FE_ADDCDIV_SCALAR, 3, FE_ONE_SCALAR);
FE_OP(div_scalarlist, "_foreach_div_.ScalarList", FE_DIV_SCALAR, 1, FE_SCALAR_PER_ENTRY);
FE_OP(addcdiv_scalarlist, "_foreach_addcdiv_.ScalarList", FE_ADDCDIV_SCALAR, 3, FE_SCALAR_PER_ENTRY);
FE_OP(sqrt_, "_foreach_sqrt_", FE_SQRT_, 1, FE_NO_SCALAR);
FE_OP(sqrt_out, "_foreach_sqrt.out", FE_SQRT_OUT, 2, FE_NO_SCALAR);   /* (self, *, out) */
