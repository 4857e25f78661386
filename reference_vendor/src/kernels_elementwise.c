/*
 * kernels_elementwise.c -- pointwise ops (TensorIterator-style).
 *
 * Every op goes through ref_elementwise: inputs broadcast to the output's
 * shape, scalars accepted in any tensor slot, the computation dtype is
 * PyTorch's result_type of the inputs (integral results of "float" ops such
 * as div/exp compute in float32), inputs of another dtype and outputs of
 * another dtype are cast in chunks.  Loops exist for float (float32, float16
 * and bfloat16 compute in float), double and int64 (all integral types and
 * bool compute in int64 with wrap-around).  In-place overloads share the
 * out-of-place code: the trailing output argument is self.
 */
#include "kernels_ew.h"

#if defined(__AVX__) || defined(__SSE2__)
#include <immintrin.h>
#endif

/* ---- loops ----------------------------------------------------------------- */

/* binary arithmetic.  Where PyTorch's vectorised CPU kernels fuse a multiply
 * and an add (add/sub with alpha, addcmul, lerp, tanh_backward) an explicit
 * fma gives bit-identical results on FMA hardware. */
DEF2_F(l_add, const T alpha = PARAM(T, 0);, FMA_(T, alpha, b, a))
DEF2_I(l_add, const T alpha = PARAM(T, 0);, IADD(a, IMUL(alpha, b)))
DEF2_F(l_sub, const T nalpha = -PARAM(T, 0);, FMA_(T, nalpha, b, a))
DEF2_I(l_sub, const T alpha = PARAM(T, 0);, ISUB(a, IMUL(alpha, b)))
DEF2_F(l_mul, NOSETUP, a * b)
DEF2_I(l_mul, NOSETUP, IMUL(a, b))
DEF2_F(l_div, NOSETUP, a / b)
DEF2_F(l_maximum, NOSETUP, (a != a) ? a : ((b != b) ? b : (a < b ? b : a)))
DEF2_I(l_maximum, NOSETUP, a < b ? b : a)
DEF2_F(l_minimum, NOSETUP, (a != a) ? a : ((b != b) ? b : (b < a ? b : a)))
DEF2_I(l_minimum, NOSETUP, b < a ? b : a)
/* a = grad, b = self */
DEF2_F(l_threshold_bw, const T thr = PARAM(T, 0);, b <= thr ? (T)0 : a)
DEF2_I(l_threshold_bw, const T thr = PARAM(T, 0);, b <= thr ? (T)0 : a)
/* a = grad_output, b = output */
DEF2_F(l_sigmoid_bw, NOSETUP, a * ((T)1 - b) * b)
DEF2_F(l_tanh_bw, NOSETUP, a * FMA_(T, -b, b, (T)1))

/* comparisons (bool out) */
DEF_CMP(l_eq, a == b)
DEF_CMP(l_ne, a != b)
DEF_CMP(l_gt, a > b)
DEF_CMP(l_lt, a < b)
DEF_CMP(l_ge, a >= b)
DEF_CMP(l_le, a <= b)

/* unary */
DEF1_F(l_neg, NOSETUP, -a)
DEF1_I(l_neg, NOSETUP, ISUB(0, a))
DEF1_F(l_abs, NOSETUP, G1(fabs, a))
DEF1_I(l_abs, NOSETUP, a < 0 ? ISUB(0, a) : a)
/* float32 exp / sigmoid / tanh use the vectorisable ref_expf; float64 libm */
static inline float tanh_f32(float x) {
    float ax = x < 0 ? -x : x;
    float z = x * x;
    float small = ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z +
                    1.33314422036e-1f) * z - 3.33332819422e-1f) * z * x + x;
    float t = ref_expf(2.0f * ax);
    float big = 1.0f - 2.0f / (t + 1.0f);
    big = x < 0 ? -big : big;
    return ax < 0.625f ? small : (x != x ? x : big);
}
#define EXP_(T, a) _Generic((T)0, float: ref_expf, default: exp)(a)
#define TANH_(T, a) _Generic((T)0, float: tanh_f32, default: tanh)(a)
DEF1_F(l_exp, NOSETUP, EXP_(T, a))
#define LOG_(T, a) _Generic((T)0, float: ref_logf, default: log)(a)
DEF1_F(l_log, NOSETUP, LOG_(T, a))
DEF1_F(l_rsqrt, NOSETUP, (T)1 / G1(sqrt, a))
DEF1_F(l_reciprocal, NOSETUP, (T)1 / a)
DEF1_F(l_sigmoid, NOSETUP, (T)1 / ((T)1 + EXP_(T, -a)))
DEF1_F(l_tanh, NOSETUP, TANH_(T, a))
DEF1_F(l_relu, NOSETUP, a < 0 ? (T)0 : a)
DEF1_I(l_relu, NOSETUP, a < 0 ? (T)0 : a)
EW_LOOP1(l_sqrt_f64, double, ref_f64, double, ref_f64, NOSETUP, sqrt(a))

/* float32 sqrt: vectorised by hand (libm's errno handling blocks the
 * auto-vectoriser); sqrt is correctly rounded either way. */
static void l_sqrt_f32(char **data, const int64_t *st, int64_t n, const void *pp) {
    (void)pp;
    char *o_ = data[0];
    const char *a_ = data[1];
    if (st[0] == 4 && st[1] == 4) {
        float *o = (float *)(void *)o_;
        const float *ap = (const float *)(const void *)a_;
        int64_t i = 0;
#if defined(__AVX__)
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(o + i, _mm256_sqrt_ps(_mm256_loadu_ps(ap + i)));
#elif defined(__SSE2__)
        for (; i + 4 <= n; i += 4)
            _mm_storeu_ps(o + i, _mm_sqrt_ps(_mm_loadu_ps(ap + i)));
#endif
        for (; i < n; ++i)
            ((ref_f32 *)o)[i] = sqrtf(((const ref_f32 *)ap)[i]);
    } else {
        for (int64_t i = 0; i < n; ++i)
            *(ref_f32 *)(o_ + i * st[0]) = sqrtf(*(const ref_f32 *)(a_ + i * st[1]));
    }
}

/* pow with a scalar exponent (PyTorch's special cases) */
EW_LOOP1(l_powg_f32, float, ref_f32, float, ref_f32, const float e = P->f[0];, powf(a, e))
EW_LOOP1(l_powg_f64, double, ref_f64, double, ref_f64, const double e = P->d[0];, pow(a, e))
DEF1_F(l_pow_sq, NOSETUP, a * a)
DEF1_F(l_pow_cube, NOSETUP, a * a * a)
DEF1_F(l_pow_invsq, NOSETUP, (T)1 / (a * a))
DEF1_F(l_pow_one, NOSETUP, ((void)a, (T)1))
DEF1_F(l_copy, NOSETUP, a)
static inline int64_t ipow(int64_t b, int64_t e) {
    uint64_t r = 1, x = (uint64_t)b;
    while (e > 0) {
        if (e & 1)
            r *= x;
        x *= x;
        e >>= 1;
    }
    return (int64_t)r;
}
DEF1_I(l_pow, const T e = PARAM(T, 0);, ipow(a, e))

/* clamp: a NaN input stays NaN (the comparisons are false); a NaN bound
 * makes every element NaN, handled by the driver with l_nan */
DEF1_F(l_clamp_min, const T lo = PARAM(T, 0);, a < lo ? lo : a)
DEF1_F(l_clamp_max, const T hi = PARAM(T, 1);, a > hi ? hi : a)
DEF1_F(l_clamp_both, const T lo = PARAM(T, 0); const T hi = PARAM(T, 1);,
       (a < lo ? lo : a) > hi ? hi : (a < lo ? lo : a))
DEF1_F(l_nan, NOSETUP, ((void)a, (T)NAN))
DEF1_I(l_clamp_min, const T lo = PARAM(T, 0);, a < lo ? lo : a)
DEF1_I(l_clamp_max, const T hi = PARAM(T, 1);, a > hi ? hi : a)
DEF1_I(l_clamp_both, const T lo = PARAM(T, 0); const T hi = PARAM(T, 1);,
       (a < lo ? lo : a) > hi ? hi : (a < lo ? lo : a))

/* ternary: a = self, b = tensor1/end, c = tensor2 */
DEF3_F(l_addcmul, const T v = PARAM(T, 0);, FMA_(T, v * b, c, a))
DEF3_I(l_addcmul, const T v = PARAM(T, 0);, IADD(a, IMUL(IMUL(v, b), c)))
DEF3_F(l_addcdiv, const T v = PARAM(T, 0);, a + v * b / c)

/* lerp: two-branch formula, as PyTorch's vectorised kernel (one fma) */
DEF2_F(l_lerp, const T w = PARAM(T, 0); const int small = G1(fabs, w) < (T)0.5;
       const T coeff = small ? w : w - (T)1;,
       FMA_(T, coeff, b - a, small ? a : b))

EW_WHERE(l_where_f32, float, ref_f32)
EW_WHERE(l_where_f64, double, ref_f64)
EW_WHERE(l_where_i64, int64_t, ref_i64)

/* ---- op driver ------------------------------------------------------------------ */

fl_status ref_ew_run(const ref_args *a, ew_loops loops, unsigned flags, ew_call *c) {
    ref_operand prom[REF_EW_MAX_INPUTS + 2];
    int np = 0;
    for (int k = 0; k < c->nin; ++k)
        if (c->in_role[k] == IN_PROMOTE)
            prom[np++] = c->in[k];
    for (int k = 0; k < c->nextra; ++k)
        prom[np++] = c->extra[k];
    int32_t common = ref_result_type(prom, np);
    if (common < 0)
        return ref_fail(a, "cannot determine the computation dtype");
    if ((flags & EW_INT_TO_FLOAT) && !ref_is_floating(common))
        common = FL_FLOAT32;
    if ((flags & EW_NO_BOOL) && common == FL_BOOL)
        return ref_fail(a, "bool tensors are not supported");
    int32_t ldt = common == FL_FLOAT64 ? FL_FLOAT64 : ref_is_floating(common) ? FL_FLOAT32 : FL_INT64;
    ref_loop_fn fn = ldt == FL_FLOAT32 ? loops.f32 : ldt == FL_FLOAT64 ? loops.f64 : loops.i64;
    if (!fn)
        return ref_fail(a, "dtype %s is not supported", ref_dtype_name(common));
    if (!(flags & EW_BOOL_OUT) && !ref_can_cast(common, c->out->dtype))
        return ref_fail(a, "result type %s can't be cast to the desired output type %s",
                        ref_dtype_name(common), ref_dtype_name(c->out->dtype));
    ew_params P;
    memset(&P, 0, sizeof P);
    for (int k = 0; k < c->nparams; ++k) {
        const ref_scalar *s = &c->params[k];
        if (ldt == FL_INT64 && s->kind == FL_ARG_FLOAT && s->f != (double)s->i &&
            !c->param_trunc[k])
            return ref_fail(a, "for integral input tensors, argument %s must not be a "
                               "floating point number (got %g)", c->param_names[k], s->f);
        if (s->kind == FL_ARG_FLOAT) {
            P.f[k] = (float)s->f;
            P.d[k] = s->f;
        } else {
            P.f[k] = (float)s->i;
            P.d[k] = (double)s->i;
        }
        P.i[k] = s->i;
    }
    int32_t in_dt[REF_EW_MAX_INPUTS], via[REF_EW_MAX_INPUTS];
    for (int k = 0; k < c->nin; ++k) {
        in_dt[k] = c->in_role[k] == IN_COND ? FL_BOOL : ldt;
        via[k] = c->in_role[k] == IN_COND ? -1 : common;
        if (k == 1 && !c->in[k].t && (flags & EW_SCALAR_OPMATH) &&
            (common == FL_FLOAT16 || common == FL_BFLOAT16))
            via[k] = -1;
    }
    ref_ew_desc d = {
        .out = c->out,
        .out_dtype = (flags & EW_BOOL_OUT) ? FL_BOOL : ldt,
        .nin = c->nin,
        .in = c->in,
        .in_dtypes = in_dt,
        .in_via = via,
        .fn = fn,
        .params = &P,
    };
    return ref_elementwise(a, &d);
}

/* ---- argument patterns ----------------------------------------------------------- */

/* (self, out) */
fl_status ref_ew_unary(const char *op, const fl_arg *args, uint32_t nargs, ref_kernel_ctx *ctx,
                       ew_loops loops, unsigned flags) {
    ref_args a;
    ew_call c;
    memset(&c, 0, sizeof c);
    REF_TRY(ref_args_init(&a, op, args, nargs, 2, ctx));
    REF_TRY(ref_get_operand(&a, 0, "self", &c.in[0]));
    REF_TRY(ref_get_tensor(&a, 1, "out", &c.out));
    c.nin = 1;
    return ref_ew_run(&a, loops, flags, &c);
}

/* (self, other, out) */
fl_status ref_ew_binary(const char *op, const fl_arg *args, uint32_t nargs, ref_kernel_ctx *ctx,
                        ew_loops loops, unsigned flags) {
    ref_args a;
    ew_call c;
    memset(&c, 0, sizeof c);
    REF_TRY(ref_args_init(&a, op, args, nargs, 3, ctx));
    REF_TRY(ref_get_operand(&a, 0, "self", &c.in[0]));
    REF_TRY(ref_get_operand(&a, 1, "other", &c.in[1]));
    REF_TRY(ref_get_tensor(&a, 2, "out", &c.out));
    c.nin = 2;
    return ref_ew_run(&a, loops, flags, &c);
}

/* (self, other, alpha, out) */
static fl_status binary_alpha(const char *op, const fl_arg *args, uint32_t nargs,
                              ref_kernel_ctx *ctx, ew_loops loops, int reversed,
                              unsigned flags) {
    ref_args a;
    ew_call c;
    memset(&c, 0, sizeof c);
    REF_TRY(ref_args_init(&a, op, args, nargs, 4, ctx));
    REF_TRY(ref_get_operand(&a, reversed ? 1 : 0, reversed ? "other" : "self", &c.in[0]));
    REF_TRY(ref_get_operand(&a, reversed ? 0 : 1, reversed ? "self" : "other", &c.in[1]));
    REF_TRY(ref_get_scalar(&a, 2, "alpha", &c.params[0]));
    REF_TRY(ref_get_tensor(&a, 3, "out", &c.out));
    c.nin = 2;
    c.nparams = 1;
    c.param_names[0] = "alpha";
    return ref_ew_run(&a, loops, flags, &c);
}

#define K_BINARY_ALPHA(FN, OPNAME, LOOPS, REV, FLAGS) \
    REF_KERNEL(FN) { return binary_alpha(OPNAME, args, nargs, ctx, LOOPS, REV, FLAGS); }

#define OPM EW_SCALAR_OPMATH
K_BINARY_ALPHA(ref_k_add_tensor, "add.Tensor", LOOPS_FI(l_add), 0, 0)
K_BINARY_ALPHA(ref_k_add__tensor, "add_.Tensor", LOOPS_FI(l_add), 0, 0)
K_BINARY_ALPHA(ref_k_add_scalar, "add.Scalar", LOOPS_FI(l_add), 0, 0)
K_BINARY_ALPHA(ref_k_add__scalar, "add_.Scalar", LOOPS_FI(l_add), 0, 0)
K_BINARY_ALPHA(ref_k_sub_tensor, "sub.Tensor", LOOPS_FI(l_sub), 0, EW_NO_BOOL)
K_BINARY_ALPHA(ref_k_sub__tensor, "sub_.Tensor", LOOPS_FI(l_sub), 0, EW_NO_BOOL)
K_BINARY_ALPHA(ref_k_sub_scalar, "sub.Scalar", LOOPS_FI(l_sub), 0, EW_NO_BOOL)
K_BINARY_ALPHA(ref_k_sub__scalar, "sub_.Scalar", LOOPS_FI(l_sub), 0, EW_NO_BOOL)
K_BINARY_ALPHA(ref_k_rsub_scalar, "rsub.Scalar", LOOPS_FI(l_sub), 1, EW_NO_BOOL)

K_BINARY(ref_k_mul_tensor, "mul.Tensor", LOOPS_FI(l_mul), OPM)
K_BINARY(ref_k_mul__tensor, "mul_.Tensor", LOOPS_FI(l_mul), OPM)
K_BINARY(ref_k_mul_scalar, "mul.Scalar", LOOPS_FI(l_mul), OPM)
K_BINARY(ref_k_mul__scalar, "mul_.Scalar", LOOPS_FI(l_mul), OPM)
K_BINARY(ref_k_div_tensor, "div.Tensor", LOOPS_F(l_div), EW_INT_TO_FLOAT | OPM)
K_BINARY(ref_k_div__tensor, "div_.Tensor", LOOPS_F(l_div), EW_INT_TO_FLOAT | OPM)
K_BINARY(ref_k_div_scalar, "div.Scalar", LOOPS_F(l_div), EW_INT_TO_FLOAT | OPM)
K_BINARY(ref_k_div__scalar, "div_.Scalar", LOOPS_F(l_div), EW_INT_TO_FLOAT | OPM)
K_BINARY(ref_k_maximum, "maximum", LOOPS_FI(l_maximum), 0)
K_BINARY(ref_k_minimum, "minimum", LOOPS_FI(l_minimum), 0)
K_BINARY(ref_k_sigmoid_backward, "sigmoid_backward", LOOPS_F(l_sigmoid_bw), EW_NO_BOOL)
K_BINARY(ref_k_tanh_backward, "tanh_backward", LOOPS_F(l_tanh_bw), EW_NO_BOOL)

K_BINARY(ref_k_eq_tensor, "eq.Tensor", LOOPS_FI(l_eq), EW_BOOL_OUT)
K_BINARY(ref_k_ne_tensor, "ne.Tensor", LOOPS_FI(l_ne), EW_BOOL_OUT)
K_BINARY(ref_k_gt_tensor, "gt.Tensor", LOOPS_FI(l_gt), EW_BOOL_OUT)
K_BINARY(ref_k_lt_tensor, "lt.Tensor", LOOPS_FI(l_lt), EW_BOOL_OUT)
K_BINARY(ref_k_ge_tensor, "ge.Tensor", LOOPS_FI(l_ge), EW_BOOL_OUT)
K_BINARY(ref_k_le_tensor, "le.Tensor", LOOPS_FI(l_le), EW_BOOL_OUT)
K_BINARY(ref_k_eq_scalar, "eq.Scalar", LOOPS_FI(l_eq), EW_BOOL_OUT)
K_BINARY(ref_k_ne_scalar, "ne.Scalar", LOOPS_FI(l_ne), EW_BOOL_OUT)
K_BINARY(ref_k_gt_scalar, "gt.Scalar", LOOPS_FI(l_gt), EW_BOOL_OUT)
K_BINARY(ref_k_lt_scalar, "lt.Scalar", LOOPS_FI(l_lt), EW_BOOL_OUT)
K_BINARY(ref_k_ge_scalar, "ge.Scalar", LOOPS_FI(l_ge), EW_BOOL_OUT)
K_BINARY(ref_k_le_scalar, "le.Scalar", LOOPS_FI(l_le), EW_BOOL_OUT)

K_UNARY(ref_k_neg, "neg", LOOPS_FI(l_neg), EW_NO_BOOL)
K_UNARY(ref_k_neg_, "neg_", LOOPS_FI(l_neg), EW_NO_BOOL)
K_UNARY(ref_k_abs, "abs", LOOPS_FI(l_abs), EW_NO_BOOL)
K_UNARY(ref_k_abs_, "abs_", LOOPS_FI(l_abs), EW_NO_BOOL)
K_UNARY(ref_k_exp, "exp", LOOPS_F(l_exp), EW_INT_TO_FLOAT)
K_UNARY(ref_k_exp_, "exp_", LOOPS_F(l_exp), EW_INT_TO_FLOAT)
K_UNARY(ref_k_log, "log", LOOPS_F(l_log), EW_INT_TO_FLOAT)
K_UNARY(ref_k_log_, "log_", LOOPS_F(l_log), EW_INT_TO_FLOAT)
K_UNARY(ref_k_sqrt, "sqrt", LOOPS_F(l_sqrt), EW_INT_TO_FLOAT)
K_UNARY(ref_k_sqrt_, "sqrt_", LOOPS_F(l_sqrt), EW_INT_TO_FLOAT)
K_UNARY(ref_k_rsqrt, "rsqrt", LOOPS_F(l_rsqrt), EW_INT_TO_FLOAT)
K_UNARY(ref_k_rsqrt_, "rsqrt_", LOOPS_F(l_rsqrt), EW_INT_TO_FLOAT)
K_UNARY(ref_k_reciprocal, "reciprocal", LOOPS_F(l_reciprocal), EW_INT_TO_FLOAT)
K_UNARY(ref_k_sigmoid, "sigmoid", LOOPS_F(l_sigmoid), EW_INT_TO_FLOAT)
K_UNARY(ref_k_sigmoid_, "sigmoid_", LOOPS_F(l_sigmoid), EW_INT_TO_FLOAT)
K_UNARY(ref_k_tanh, "tanh", LOOPS_F(l_tanh), EW_INT_TO_FLOAT)
K_UNARY(ref_k_tanh_, "tanh_", LOOPS_F(l_tanh), EW_INT_TO_FLOAT)
K_UNARY(ref_k_relu, "relu", LOOPS_FI(l_relu), EW_NO_BOOL)
K_UNARY(ref_k_relu_, "relu_", LOOPS_FI(l_relu), EW_NO_BOOL)

/* threshold_backward(grad_output, self, threshold) */
REF_KERNEL(ref_k_threshold_backward) {
    ref_args a;
    ew_call c;
    memset(&c, 0, sizeof c);
    REF_TRY(ref_args_init(&a, "threshold_backward", args, nargs, 4, ctx));
    REF_TRY(ref_get_operand(&a, 0, "grad_output", &c.in[0]));
    REF_TRY(ref_get_operand(&a, 1, "self", &c.in[1]));
    REF_TRY(ref_get_scalar(&a, 2, "threshold", &c.params[0]));
    REF_TRY(ref_get_tensor(&a, 3, "out", &c.out));
    c.nin = 2;
    c.nparams = 1;
    c.param_names[0] = "threshold";
    c.param_trunc[0] = 1;
    /* PyTorch converts the threshold to the tensors' dtype first: -1 is 255
     * for uint8, 0.1 rounds for float16 */
    int32_t common = ref_result_type(c.in, 2);
    if (common >= 0 && common != FL_BOOL) {
        char v[8];
        ref_scalar *thr = &c.params[0];
        if (ref_is_floating(common)) {
            ref_store_f64(v, common, thr->kind == FL_ARG_FLOAT ? thr->f : (double)thr->i);
            *thr = (ref_scalar){FL_ARG_FLOAT, ref_load_f64(v, common), 0};
        } else {
            ref_store_i64(v, common,
                          thr->kind == FL_ARG_FLOAT ? ref_double_to_i64(thr->f) : thr->i);
            const int64_t i = ref_load_i64(v, common);
            *thr = (ref_scalar){FL_ARG_INT, (double)i, i};
        }
    }
    return ref_ew_run(&a, LOOPS_FI(l_threshold_bw), EW_NO_BOOL, &c);
}

/* pow.Tensor_Scalar(self, exponent) / pow_.Scalar */
static fl_status pow_impl(const char *op, const fl_arg *args, uint32_t nargs,
                          ref_kernel_ctx *ctx) {
    ref_args a;
    ew_call c;
    memset(&c, 0, sizeof c);
    REF_TRY(ref_args_init(&a, op, args, nargs, 3, ctx));
    REF_TRY(ref_get_operand(&a, 0, "self", &c.in[0]));
    REF_TRY(ref_get_scalar(&a, 1, "exponent", &c.params[0]));
    REF_TRY(ref_get_tensor(&a, 2, "out", &c.out));
    c.nin = 1;
    c.nparams = 1;
    c.param_names[0] = "exponent";
    c.nextra = 1;
    c.extra[0].t = NULL;
    c.extra[0].s = c.params[0];
    int32_t full = ref_result_type((ref_operand[]){c.in[0], c.extra[0]}, 2);
    double e = c.params[0].f;
    if (!ref_is_floating(full)) {
        if (full == FL_BOOL)
            return ref_fail(&a, "bool tensors are not supported");
        if (c.params[0].i < 0)
            return ref_fail(&a, "integers to negative integer powers are not allowed");
        return ref_ew_run(&a, (ew_loops){NULL, NULL, l_pow_i64}, EW_NO_BOOL, &c);
    }
    ew_loops loops;
    if (full == FL_FLOAT16 || full == FL_BFLOAT16) {
        /* PyTorch: the generic pow takes the exponent rounded to the tensor's
         * dtype; float16 has no special cases, bfloat16 shares float32's
         * (sqrt for 0.5: pow(-inf, 0.5) is NaN, not inf) */
        uint16_t h;
        ref_store_f64(&h, full, e);
        c.params[0].kind = FL_ARG_FLOAT;
        c.params[0].f = ref_load_f64(&h, full);
        if (full == FL_FLOAT16)
            return ref_ew_run(&a, (ew_loops){l_powg_f32, l_powg_f64, NULL}, EW_NO_BOOL, &c);
    }
    if (e == 0.0)
        loops = LOOPS_F(l_pow_one);
    else if (e == 1.0)
        loops = LOOPS_F(l_copy);
    else if (e == 2.0)
        loops = LOOPS_F(l_pow_sq);
    else if (e == 3.0)
        loops = LOOPS_F(l_pow_cube);
    else if (e == 0.5)
        loops = LOOPS_F(l_sqrt);
    else if (e == -0.5)
        loops = LOOPS_F(l_rsqrt);
    else if (e == -1.0)
        loops = LOOPS_F(l_reciprocal);
    else if (e == -2.0)
        loops = LOOPS_F(l_pow_invsq);
    else
        loops = (ew_loops){l_powg_f32, l_powg_f64, NULL};
    return ref_ew_run(&a, loops, EW_NO_BOOL, &c);
}
REF_KERNEL(ref_k_pow_tensor_scalar) { return pow_impl("pow.Tensor_Scalar", args, nargs, ctx); }
REF_KERNEL(ref_k_pow__scalar) { return pow_impl("pow_.Scalar", args, nargs, ctx); }

/* lerp.Scalar(self, end, weight) */
static fl_status lerp_impl(const char *op, const fl_arg *args, uint32_t nargs,
                           ref_kernel_ctx *ctx) {
    ref_args a;
    ew_call c;
    memset(&c, 0, sizeof c);
    REF_TRY(ref_args_init(&a, op, args, nargs, 4, ctx));
    REF_TRY(ref_get_operand(&a, 0, "self", &c.in[0]));
    REF_TRY(ref_get_operand(&a, 1, "end", &c.in[1]));
    REF_TRY(ref_get_scalar(&a, 2, "weight", &c.params[0]));
    REF_TRY(ref_get_tensor(&a, 3, "out", &c.out));
    c.nin = 2;
    c.nparams = 1;
    c.param_names[0] = "weight";
    return ref_ew_run(&a, LOOPS_F(l_lerp), EW_NO_BOOL, &c);
}
REF_KERNEL(ref_k_lerp_scalar) { return lerp_impl("lerp.Scalar", args, nargs, ctx); }
REF_KERNEL(ref_k_lerp__scalar) { return lerp_impl("lerp_.Scalar", args, nargs, ctx); }

/* addcmul / addcdiv (self, tensor1, tensor2, *, value) */
static fl_status addc_impl(const char *op, const fl_arg *args, uint32_t nargs,
                           ref_kernel_ctx *ctx, ew_loops loops, int is_div) {
    ref_args a;
    ew_call c;
    memset(&c, 0, sizeof c);
    REF_TRY(ref_args_init(&a, op, args, nargs, 5, ctx));
    REF_TRY(ref_get_operand(&a, 0, "self", &c.in[0]));
    REF_TRY(ref_get_operand(&a, 1, "tensor1", &c.in[1]));
    REF_TRY(ref_get_operand(&a, 2, "tensor2", &c.in[2]));
    REF_TRY(ref_get_scalar(&a, 3, "value", &c.params[0]));
    REF_TRY(ref_get_tensor(&a, 4, "out", &c.out));
    c.nin = 3;
    c.nparams = 1;
    c.param_names[0] = "value";
    if (is_div) {
        int32_t common = ref_result_type(c.in, 3);
        if (common >= 0 && !ref_is_floating(common))
            return ref_fail(&a, "integer division with addcdiv is not supported (dtype %s)",
                            ref_dtype_name(common));
    }
    return ref_ew_run(&a, loops, EW_NO_BOOL, &c);
}
REF_KERNEL(ref_k_addcmul) { return addc_impl("addcmul", args, nargs, ctx, LOOPS_FI(l_addcmul), 0); }
REF_KERNEL(ref_k_addcmul_) { return addc_impl("addcmul_", args, nargs, ctx, LOOPS_FI(l_addcmul), 0); }
REF_KERNEL(ref_k_addcdiv) { return addc_impl("addcdiv", args, nargs, ctx, LOOPS_F(l_addcdiv), 1); }
REF_KERNEL(ref_k_addcdiv_) { return addc_impl("addcdiv_", args, nargs, ctx, LOOPS_F(l_addcdiv), 1); }

static fl_status clamp_run(const ref_args *a, ew_call *c, int has_min, ref_scalar lo,
                           int has_max, ref_scalar hi);

/* clamp(self, min?, max?) */
static fl_status clamp_impl(const char *op, const fl_arg *args, uint32_t nargs,
                            ref_kernel_ctx *ctx) {
    ref_args a;
    ew_call c;
    memset(&c, 0, sizeof c);
    int has_min, has_max;
    ref_scalar lo, hi;
    REF_TRY(ref_args_init(&a, op, args, nargs, 4, ctx));
    REF_TRY(ref_get_operand(&a, 0, "self", &c.in[0]));
    REF_TRY(ref_get_opt_scalar(&a, 1, "min", &has_min, &lo));
    REF_TRY(ref_get_opt_scalar(&a, 2, "max", &has_max, &hi));
    REF_TRY(ref_get_tensor(&a, 3, "out", &c.out));
    if (!has_min && !has_max)
        return ref_fail(&a, "at least one of 'min' or 'max' must not be None");
    return clamp_run(&a, &c, has_min, lo, has_max, hi);
}

/* the bounds that are present (at least one) join the promotion and the params */
static fl_status clamp_run(const ref_args *a, ew_call *c, int has_min, ref_scalar lo,
                           int has_max, ref_scalar hi) {
    c->nin = 1;
    c->nparams = 2;
    c->param_names[0] = "min";
    c->param_names[1] = "max";
    c->params[0] = has_min ? lo : (ref_scalar){FL_ARG_INT, 0.0, 0};
    c->params[1] = has_max ? hi : (ref_scalar){FL_ARG_INT, 0.0, 0};
    if (has_min)
        c->extra[c->nextra++].s = lo;
    if (has_max)
        c->extra[c->nextra++].s = hi;
    ew_loops loops = has_min && has_max ? LOOPS_FI(l_clamp_both)
                     : has_min          ? LOOPS_FI(l_clamp_min)
                                        : LOOPS_FI(l_clamp_max);
    if ((has_min && lo.kind == FL_ARG_FLOAT && lo.f != lo.f) ||
        (has_max && hi.kind == FL_ARG_FLOAT && hi.f != hi.f))
        loops = (ew_loops){l_nan_f32, l_nan_f64, NULL}; /* NaN bound: all NaN */
    return ref_ew_run(a, loops, EW_NO_BOOL, c);
}
REF_KERNEL(ref_k_clamp) { return clamp_impl("clamp", args, nargs, ctx); }
REF_KERNEL(ref_k_clamp_) { return clamp_impl("clamp_", args, nargs, ctx); }

/* where.self(condition, self, other) */
REF_KERNEL(ref_k_where_self) {
    ref_args a;
    ew_call c;
    memset(&c, 0, sizeof c);
    REF_TRY(ref_args_init(&a, "where.self", args, nargs, 4, ctx));
    REF_TRY(ref_get_operand(&a, 0, "condition", &c.in[0]));
    REF_TRY(ref_get_operand(&a, 1, "self", &c.in[1]));
    REF_TRY(ref_get_operand(&a, 2, "other", &c.in[2]));
    REF_TRY(ref_get_tensor(&a, 3, "out", &c.out));
    if (c.in[0].t && c.in[0].t->dtype != FL_BOOL && c.in[0].t->dtype != FL_UINT8)
        return ref_fail(&a, "condition must be a bool tensor, got %s",
                        ref_dtype_name(c.in[0].t->dtype));
    c.nin = 3;
    c.in_role[0] = IN_COND;
    return ref_ew_run(&a, (ew_loops){l_where_f32, l_where_f64, l_where_i64}, 0, &c);
}

/* clamp_min(self, min) / clamp_max(self, max) and their in-place forms */
static fl_status clamp_one(const char *op, const fl_arg *args, uint32_t nargs,
                           ref_kernel_ctx *ctx, int is_min) {
    ref_args a;
    ew_call c;
    ref_scalar bound;
    memset(&c, 0, sizeof c);
    REF_TRY(ref_args_init(&a, op, args, nargs, 3, ctx));
    REF_TRY(ref_get_operand(&a, 0, "self", &c.in[0]));
    REF_TRY(ref_get_scalar(&a, 1, is_min ? "min" : "max", &bound));
    REF_TRY(ref_get_tensor(&a, 2, "out", &c.out));
    return clamp_run(&a, &c, is_min, bound, !is_min, bound);
}
REF_KERNEL(ref_k_clamp_min) { return clamp_one("clamp_min", args, nargs, ctx, 1); }
REF_KERNEL(ref_k_clamp_min_) { return clamp_one("clamp_min_", args, nargs, ctx, 1); }
REF_KERNEL(ref_k_clamp_max) { return clamp_one("clamp_max", args, nargs, ctx, 0); }
REF_KERNEL(ref_k_clamp_max_) { return clamp_one("clamp_max_", args, nargs, ctx, 0); }

/* masked_fill.Scalar(self, mask, value): where(mask, value, self) in self's
 * dtype -- the value is converted to self's kind first, as PyTorch does */
static fl_status masked_fill_impl(const char *op, const fl_arg *args, uint32_t nargs,
                                  ref_kernel_ctx *ctx) {
    ref_args a;
    ew_call c;
    memset(&c, 0, sizeof c);
    REF_TRY(ref_args_init(&a, op, args, nargs, 4, ctx));
    REF_TRY(ref_get_tensor(&a, 0, "self", &c.in[2].t));
    REF_TRY(ref_get_operand(&a, 1, "mask", &c.in[0]));
    REF_TRY(ref_get_scalar(&a, 2, "value", &c.in[1].s));
    REF_TRY(ref_get_tensor(&a, 3, "out", &c.out));
    if (c.in[0].t && c.in[0].t->dtype != FL_BOOL)
        return ref_fail(&a, "mask must be a bool tensor, got %s", ref_dtype_name(c.in[0].t->dtype));
    ref_scalar *v = &c.in[1].s;
    int32_t sdt = c.in[2].t->dtype;
    if (sdt == FL_BOOL)
        *v = (ref_scalar){FL_ARG_BOOL, v->f != 0.0, v->f != 0.0};
    else if (ref_is_integral(sdt) && v->kind == FL_ARG_FLOAT)
        *v = (ref_scalar){FL_ARG_INT, (double)ref_double_to_i64(v->f), ref_double_to_i64(v->f)};
    c.nin = 3;
    c.in_role[0] = IN_COND;
    return ref_ew_run(&a, (ew_loops){l_where_f32, l_where_f64, l_where_i64}, 0, &c);
}
REF_KERNEL(ref_k_masked_fill_scalar) {
    return masked_fill_impl("masked_fill.Scalar", args, nargs, ctx);
}
REF_KERNEL(ref_k_masked_fill__scalar) {
    return masked_fill_impl("masked_fill_.Scalar", args, nargs, ctx);
}

/* numpy broadcast shape of the tensor arguments [0, n); returns its ndim */
static int broadcast_shape(const fl_arg *args, uint32_t n, int64_t *shape) {
    int nd = 0;
    for (uint32_t i = 0; i < n; ++i)
        if (args[i].kind == FL_ARG_TENSOR && args[i].value.tensor->ndim > nd)
            nd = args[i].value.tensor->ndim;
    for (int d = 0; d < nd; ++d)
        shape[d] = 1;
    for (uint32_t i = 0; i < n; ++i) {
        if (args[i].kind != FL_ARG_TENSOR)
            continue;
        const fl_tensor *t = args[i].value.tensor;
        for (int d = 0; d < t->ndim; ++d)
            if (shape[nd - t->ndim + d] == 1)
                shape[nd - t->ndim + d] = t->sizes[d];
    }
    return nd;
}

/* where.self_out(condition, self, other, *, out) -> out: PyTorch's math
 * attention calls it with out aliasing other (a same-place update).  The
 * runtime does not resize out= tensors, so an out of another shape (PyTorch
 * would resize it) fails instead of being silently left alone. */
REF_KERNEL(ref_k_where_self_out) {
    int64_t shape[REF_MAX_DIMS];
    const fl_tensor *out = nargs == 5 && args[4].kind == FL_ARG_TENSOR ? args[4].value.tensor : NULL;
    const int nd = broadcast_shape(args, nargs < 3 ? nargs : 3, shape);
    int same = out && out->ndim == nd;
    for (int d = 0; same && d < nd; ++d)
        same = out->sizes[d] == shape[d];
    if (!same)
        return ref_kernel_fail(ctx, "where.self_out: out must already have the broadcast shape "
                                    "of condition, self and other");
    return ref_out_variant("where.self_out", args, nargs, ctx, ref_k_where_self);
}
