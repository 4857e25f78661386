/*
 * kernels_ew.h -- the elementwise op layer shared by the pointwise kernel files
 * (kernels_elementwise.c, kernels_unary.c, kernels_activation.c, ...): loop
 * templates (contiguous / scalar-broadcast fast paths, strided fallback),
 * loop sets per compute dtype, and ref_ew_run, which applies PyTorch's type
 * promotion and hands the loop to the elementwise engine (ref_elementwise).
 */
#ifndef REF_KERNELS_EW_H
#define REF_KERNELS_EW_H

#include <math.h>

#include "kernel_util.h"

typedef struct ew_params {
    float f[4];
    double d[4];
    int64_t i[4];
} ew_params;

#define PARAM(T, k) _Generic((T)0, float: P->f[k], double: P->d[k], default: P->i[k])

#ifdef __FMA__
#define FMA_(T, a, b, c) _Generic((T)0, float: fmaf, default: fma)((a), (b), (c))
#else
#define FMA_(T, a, b, c) ((a) * (b) + (c))
#endif

/* integer arithmetic with wrap-around (no UB) */
#define IADD(a, b) ((int64_t)((uint64_t)(a) + (uint64_t)(b)))
#define ISUB(a, b) ((int64_t)((uint64_t)(a) - (uint64_t)(b)))
#define IMUL(a, b) ((int64_t)((uint64_t)(a) * (uint64_t)(b)))

/* ---- loop templates ------------------------------------------------------- */

#define EW_LOOP1(NAME, TT, TU, OTT, OTU, SETUP, EXPR)                               \
    static void NAME(char **data, const int64_t *st_, int64_t n, const void *pp) { \
        const int64_t st[2] = {st_[0], st_[1]}; /* locals: element stores may alias */ \
        typedef TT T;                                                              \
        typedef OTT OT;                                                            \
        const ew_params *P = (const ew_params *)pp;                                \
        (void)P;                                                                   \
        SETUP                                                                      \
        char *o_ = data[0];                                                        \
        const char *a_ = data[1];                                                  \
        if (st[0] == (int64_t)sizeof(OT) && st[1] == (int64_t)sizeof(T)) {         \
            OTU *o = (OTU *)o_;                                                    \
            const TU *ap = (const TU *)a_;                                         \
            for (int64_t i = 0; i < n; ++i) {                                      \
                T a = ap[i];                                                       \
                o[i] = (OT)(EXPR);                                                 \
            }                                                                      \
        } else {                                                                   \
            for (int64_t i = 0; i < n; ++i) {                                      \
                T a = *(const TU *)(a_ + i * st[1]);                               \
                *(OTU *)(o_ + i * st[0]) = (OT)(EXPR);                             \
            }                                                                      \
        }                                                                          \
    }

#define EW_LOOP2(NAME, TT, TU, OTT, OTU, SETUP, EXPR)                               \
    static void NAME(char **data, const int64_t *st_, int64_t n, const void *pp) { \
        const int64_t st[3] = {st_[0], st_[1], st_[2]}; /* locals: element stores may alias */ \
        typedef TT T;                                                              \
        typedef OTT OT;                                                            \
        const ew_params *P = (const ew_params *)pp;                                \
        (void)P;                                                                   \
        SETUP                                                                      \
        char *o_ = data[0];                                                        \
        const char *a_ = data[1], *b_ = data[2];                                   \
        const int64_t so = (int64_t)sizeof(OT), si = (int64_t)sizeof(T);           \
        if (st[0] == so && st[1] == si && st[2] == si) {                           \
            OTU *o = (OTU *)o_;                                                    \
            const TU *ap = (const TU *)a_, *bp = (const TU *)b_;                   \
            for (int64_t i = 0; i < n; ++i) {                                      \
                T a = ap[i], b = bp[i];                                            \
                o[i] = (OT)(EXPR);                                                 \
            }                                                                      \
        } else if (st[0] == so && st[1] == si && st[2] == 0) {                     \
            OTU *o = (OTU *)o_;                                                    \
            const TU *ap = (const TU *)a_;                                         \
            const T b = *(const TU *)b_;                                           \
            for (int64_t i = 0; i < n; ++i) {                                      \
                T a = ap[i];                                                       \
                o[i] = (OT)(EXPR);                                                 \
            }                                                                      \
        } else if (st[0] == so && st[1] == 0 && st[2] == si) {                     \
            OTU *o = (OTU *)o_;                                                    \
            const TU *bp = (const TU *)b_;                                         \
            const T a = *(const TU *)a_;                                           \
            for (int64_t i = 0; i < n; ++i) {                                      \
                T b = bp[i];                                                       \
                o[i] = (OT)(EXPR);                                                 \
            }                                                                      \
        } else {                                                                   \
            for (int64_t i = 0; i < n; ++i) {                                      \
                T a = *(const TU *)(a_ + i * st[1]);                               \
                T b = *(const TU *)(b_ + i * st[2]);                               \
                *(OTU *)(o_ + i * st[0]) = (OT)(EXPR);                             \
            }                                                                      \
        }                                                                          \
    }

/* three inputs of type T (c is the third) */
#define EW_LOOP3(NAME, TT, TU, SETUP, EXPR)                                          \
    static void NAME(char **data, const int64_t *st_, int64_t n, const void *pp) { \
        const int64_t st[4] = {st_[0], st_[1], st_[2], st_[3]}; /* locals: element stores may alias */ \
        typedef TT T;                                                              \
        const ew_params *P = (const ew_params *)pp;                                \
        (void)P;                                                                   \
        SETUP                                                                      \
        char *o_ = data[0];                                                        \
        const char *a_ = data[1], *b_ = data[2], *c_ = data[3];                    \
        const int64_t s = (int64_t)sizeof(T);                                      \
        if (st[0] == s && st[1] == s && st[2] == s && st[3] == s) {                \
            TU *o = (TU *)o_;                                                      \
            const TU *ap = (const TU *)a_, *bp = (const TU *)b_, *cp = (const TU *)c_; \
            for (int64_t i = 0; i < n; ++i) {                                      \
                T a = ap[i], b = bp[i], c = cp[i];                                 \
                o[i] = (EXPR);                                                     \
            }                                                                      \
        } else {                                                                   \
            for (int64_t i = 0; i < n; ++i) {                                      \
                T a = *(const TU *)(a_ + i * st[1]);                               \
                T b = *(const TU *)(b_ + i * st[2]);                               \
                T c = *(const TU *)(c_ + i * st[3]);                               \
                *(TU *)(o_ + i * st[0]) = (EXPR);                                  \
            }                                                                      \
        }                                                                          \
    }

/* where: cond (bool byte), b and c of type T */
#define EW_WHERE(NAME, T, TU)                                                      \
    static void NAME(char **data, const int64_t *st_, int64_t n, const void *pp) { \
        const int64_t st[4] = {st_[0], st_[1], st_[2], st_[3]}; /* locals: element stores may alias */ \
        (void)pp;                                                                  \
        char *o_ = data[0];                                                        \
        const char *a_ = data[1], *b_ = data[2], *c_ = data[3];                    \
        const int64_t s = (int64_t)sizeof(T);                                      \
        if (st[0] == s && st[1] == 1 && st[2] == s && st[3] == s) {                \
            TU *o = (TU *)o_;                                                      \
            const ref_u8 *ap = (const ref_u8 *)a_;                                 \
            const TU *bp = (const TU *)b_, *cp = (const TU *)c_;                   \
            for (int64_t i = 0; i < n; ++i)                                        \
                o[i] = ap[i] ? bp[i] : cp[i];                                      \
        } else if (st[0] == s && st[1] == 1 && st[2] == s && st[3] == 0) {         \
            TU *o = (TU *)o_;                                                      \
            const ref_u8 *ap = (const ref_u8 *)a_;                                 \
            const TU *bp = (const TU *)b_;                                         \
            const T c = *(const TU *)c_;                                           \
            for (int64_t i = 0; i < n; ++i)                                        \
                o[i] = ap[i] ? bp[i] : c;                                          \
        } else if (st[0] == s && st[1] == 1 && st[2] == 0 && st[3] == s) {         \
            TU *o = (TU *)o_;                                                      \
            const ref_u8 *ap = (const ref_u8 *)a_;                                 \
            const TU *cp = (const TU *)c_;                                         \
            const T b = *(const TU *)b_;                                           \
            for (int64_t i = 0; i < n; ++i)                                        \
                o[i] = ap[i] ? b : cp[i];                                          \
        } else {                                                                   \
            for (int64_t i = 0; i < n; ++i) {                                      \
                uint8_t a = *(const ref_u8 *)(a_ + i * st[1]);                     \
                T b = *(const TU *)(b_ + i * st[2]);                               \
                T c = *(const TU *)(c_ + i * st[3]);                               \
                *(TU *)(o_ + i * st[0]) = a ? b : c;                               \
            }                                                                      \
        }                                                                          \
    }

#define NOSETUP

#define DEF1_F(NAME, SETUP, EXPR)                                                  \
    EW_LOOP1(NAME##_f32, float, ref_f32, float, ref_f32, SETUP, EXPR)              \
    EW_LOOP1(NAME##_f64, double, ref_f64, double, ref_f64, SETUP, EXPR)
#define DEF1_I(NAME, SETUP, EXPR) \
    EW_LOOP1(NAME##_i64, int64_t, ref_i64, int64_t, ref_i64, SETUP, EXPR)
#define DEF2_F(NAME, SETUP, EXPR)                                                  \
    EW_LOOP2(NAME##_f32, float, ref_f32, float, ref_f32, SETUP, EXPR)              \
    EW_LOOP2(NAME##_f64, double, ref_f64, double, ref_f64, SETUP, EXPR)
#define DEF2_I(NAME, SETUP, EXPR) \
    EW_LOOP2(NAME##_i64, int64_t, ref_i64, int64_t, ref_i64, SETUP, EXPR)
#define DEF_CMP(NAME, EXPR)                                                        \
    EW_LOOP2(NAME##_f32, float, ref_f32, uint8_t, ref_u8, NOSETUP, EXPR)           \
    EW_LOOP2(NAME##_f64, double, ref_f64, uint8_t, ref_u8, NOSETUP, EXPR)          \
    EW_LOOP2(NAME##_i64, int64_t, ref_i64, uint8_t, ref_u8, NOSETUP, EXPR)
#define DEF3_F(NAME, SETUP, EXPR)                                                  \
    EW_LOOP3(NAME##_f32, float, ref_f32, SETUP, EXPR)                              \
    EW_LOOP3(NAME##_f64, double, ref_f64, SETUP, EXPR)
#define DEF3_I(NAME, SETUP, EXPR) EW_LOOP3(NAME##_i64, int64_t, ref_i64, SETUP, EXPR)

#define G1(F, x) _Generic((x), float: F##f, default: F)(x)

typedef struct ew_loops {
    ref_loop_fn f32, f64, i64;
} ew_loops;

#define LOOPS_F(NAME) ((ew_loops){NAME##_f32, NAME##_f64, NULL})
#define LOOPS_FI(NAME) ((ew_loops){NAME##_f32, NAME##_f64, NAME##_i64})

enum {
    EW_INT_TO_FLOAT = 1u, /* integral/bool common dtype computes in float32 */
    EW_NO_BOOL = 2u,      /* bool common dtype is not supported */
    EW_BOOL_OUT = 4u,     /* comparison: the loop writes bool */
    EW_SCALAR_OPMATH = 8u, /* a scalar second input keeps float precision for
                              float16/bfloat16 (PyTorch's mul/div) */
};

enum { IN_PROMOTE = 0, IN_COND = 1 };

typedef struct ew_call {
    const fl_tensor *out;
    int nin;
    ref_operand in[REF_EW_MAX_INPUTS];
    int in_role[REF_EW_MAX_INPUTS];      /* IN_PROMOTE or IN_COND */
    int nextra;                          /* scalars that join the type promotion */
    ref_operand extra[2];
    int nparams;                         /* scalars converted to the compute type */
    ref_scalar params[4];
    const char *param_names[4];
    int param_trunc[4];                  /* fractional value allowed for integral compute */
} ew_call;


/* Promote, pick the loop for the compute dtype, convert params, run. */
fl_status ref_ew_run(const ref_args *a, ew_loops loops, unsigned flags, ew_call *c);
/* (self, out) */
fl_status ref_ew_unary(const char *op, const fl_arg *args, uint32_t nargs, ref_kernel_ctx *ctx,
                       ew_loops loops, unsigned flags);
/* (self, other, out) */
fl_status ref_ew_binary(const char *op, const fl_arg *args, uint32_t nargs, ref_kernel_ctx *ctx,
                        ew_loops loops, unsigned flags);

#define K_BINARY(FN, OPNAME, LOOPS, FLAGS) \
    REF_KERNEL(FN) { return ref_ew_binary(OPNAME, args, nargs, ctx, LOOPS, FLAGS); }
#define K_UNARY(FN, OPNAME, LOOPS, FLAGS) \
    REF_KERNEL(FN) { return ref_ew_unary(OPNAME, args, nargs, ctx, LOOPS, FLAGS); }

#endif /* REF_KERNELS_EW_H */
