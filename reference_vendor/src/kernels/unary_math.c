/*
 * unary_math.c -- pointwise math on the elementwise engine (fl_kernel.h):
 * neg, abs, exp, log, sqrt, rsqrt, reciprocal, pow with a scalar exponent
 * (PyTorch's special cases), the transcendental functions, rounding, sign,
 * the float predicates (isnan, isinf, ...) and logit.
 *
 * Integral inputs of the "float" functions compute in float32 (PyTorch's
 * int-to-float promotion); rounding follows PyTorch's CPU definitions
 * exactly (round half to even).
 */
#include "fl_kernel.h"

#if defined(__AVX__) || defined(__SSE2__)
#include <immintrin.h>
#endif

FLK_DEF1_F(l_neg, FLK_NOSETUP, -a)
FLK_DEF1_I(l_neg, FLK_NOSETUP, FLK_ISUB(0, a))
FLK_DEF1_F(l_abs, FLK_NOSETUP, FLK_G1(fabs, a))
FLK_DEF1_I(l_abs, FLK_NOSETUP, a < 0 ? FLK_ISUB(0, a) : a)
/* float32 exp uses the vectorisable flk_expf, log flk_logf; float64 libm */
#define EXP_(T, a) _Generic((T)0, float: flk_expf, default: exp)(a)
FLK_DEF1_F(l_exp, FLK_NOSETUP, EXP_(T, a))
#define LOG_(T, a) _Generic((T)0, float: flk_logf, default: log)(a)
FLK_DEF1_F(l_log, FLK_NOSETUP, LOG_(T, a))
FLK_DEF1_F(l_rsqrt, FLK_NOSETUP, (T)1 / FLK_G1(sqrt, a))
FLK_DEF1_F(l_reciprocal, FLK_NOSETUP, (T)1 / a)
FLK_EW_LOOP1(l_sqrt_f64, double, flk_f64, double, flk_f64, FLK_NOSETUP, sqrt(a))

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
            ((flk_f32 *)o)[i] = sqrtf(((const flk_f32 *)ap)[i]);
    } else {
        for (int64_t i = 0; i < n; ++i)
            *(flk_f32 *)(o_ + i * st[0]) = sqrtf(*(const flk_f32 *)(a_ + i * st[1]));
    }
}

/* pow with a scalar exponent (PyTorch's special cases) */
FLK_EW_LOOP1(l_powg_f32, float, flk_f32, float, flk_f32, const float e = P->f[0];, powf(a, e))
FLK_EW_LOOP1(l_powg_f64, double, flk_f64, double, flk_f64, const double e = P->d[0];, pow(a, e))
FLK_DEF1_F(l_pow_sq, FLK_NOSETUP, a * a)
FLK_DEF1_F(l_pow_cube, FLK_NOSETUP, a * a * a)
FLK_DEF1_F(l_pow_invsq, FLK_NOSETUP, (T)1 / (a * a))
FLK_DEF1_F(l_pow_one, FLK_NOSETUP, ((void)a, (T)1))
FLK_DEF1_F(l_copy, FLK_NOSETUP, a)
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
FLK_DEF1_I(l_pow, const T e = FLK_PARAM(T, 0);, ipow(a, e))

FLK_EW_UNARY_KERNEL(k_neg, "neg", FLK_LOOPS_FI(l_neg), FLK_EW_NO_BOOL)
FLK_REGISTER("neg", FLK_NUM_TYPES, k_neg);
FLK_EW_UNARY_KERNEL(k_neg_, "neg_", FLK_LOOPS_FI(l_neg), FLK_EW_NO_BOOL)
FLK_REGISTER("neg_", FLK_NUM_TYPES, k_neg_);
/* abs on float8 as PyTorch's scalar CPU loop computes it: through float32, so
 * -0 becomes +0 and a NaN the format's positive NaN (its vector loop keeps their
 * sign bits instead; the suite accepts either, conformance/cpu_loops.py) */
static uint8_t abs_fp8_bits(uint8_t v, int32_t dt) {
    return flk_fp8_from_float(fabsf(flk_fp8_to_float(v, dt)), dt);
}

static void abs_fp8_row(char **p, const int64_t *st, int64_t n, void *dt) {
    for (int64_t i = 0; i < n; ++i)
        *(flk_u8 *)(p[0] + i * st[0]) = abs_fp8_bits(*(const flk_u8 *)(p[1] + i * st[1]), *(const int32_t *)dt);
}

/* (self, out): the same float8 dtype and shape; one byte each, any strides */
static fl_status abs_fp8(const char *op, const fl_arg *args, uint32_t nargs, flk_ctx *ctx) {
    flk_args a;
    const fl_tensor *self, *out;
    FLK_TRY(flk_args_init(&a, op, args, nargs, 2, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &self));
    FLK_TRY(flk_get_tensor(&a, 1, "out", &out));
    if (out->dtype != self->dtype || !flk_same_sizes(out, self))
        return flk_fail(&a, "out must have self's float8 dtype and shape");
    int64_t strides[2][FLK_MAX_DIMS];
    for (int32_t d = 0; d < out->ndim; ++d) {
        strides[0][d] = out->strides[d];
        strides[1][d] = self->strides[d];
    }
    char *p[2] = {(char *)flk_data(out), (char *)flk_data(self)};
    int32_t dt = self->dtype;
    flk_for_each_row(out->ndim, out->sizes, 2, p, strides, 0, abs_fp8_row, &dt);
    return FL_SUCCESS;
}

static int fp8_self(const fl_arg *args, uint32_t nargs) {
    return nargs > 0 && args && args[0].kind == FL_ARG_TENSOR && args[0].value.tensor &&
           flk_is_fp8(args[0].value.tensor->dtype);
}

FLK_KERNEL_FN(k_abs) {
    if (fp8_self(args, nargs))
        return abs_fp8("abs", args, nargs, ctx);
    return flk_ew_unary("abs", args, nargs, ctx, FLK_LOOPS_FI(l_abs), FLK_EW_NO_BOOL);
}
FLK_REGISTER("abs", FLK_NUM_TYPES | FLK_FP8_TYPES, k_abs);
FLK_KERNEL_FN(k_abs_) {
    if (fp8_self(args, nargs))
        return abs_fp8("abs_", args, nargs, ctx);
    return flk_ew_unary("abs_", args, nargs, ctx, FLK_LOOPS_FI(l_abs), FLK_EW_NO_BOOL);
}
FLK_REGISTER("abs_", FLK_NUM_TYPES | FLK_FP8_TYPES, k_abs_);
FLK_EW_UNARY_KERNEL(k_exp, "exp", FLK_LOOPS_F(l_exp), FLK_EW_INT_TO_FLOAT)
FLK_REGISTER("exp", FLK_REAL_TYPES, k_exp);
FLK_EW_UNARY_KERNEL(k_exp_, "exp_", FLK_LOOPS_F(l_exp), FLK_EW_INT_TO_FLOAT)
FLK_REGISTER("exp_", FLK_FLOAT_TYPES, k_exp_);
FLK_EW_UNARY_KERNEL(k_log, "log", FLK_LOOPS_F(l_log), FLK_EW_INT_TO_FLOAT)
FLK_REGISTER("log", FLK_REAL_TYPES, k_log);
FLK_EW_UNARY_KERNEL(k_log_, "log_", FLK_LOOPS_F(l_log), FLK_EW_INT_TO_FLOAT)
FLK_REGISTER("log_", FLK_FLOAT_TYPES, k_log_);
FLK_EW_UNARY_KERNEL(k_sqrt, "sqrt", FLK_LOOPS_F(l_sqrt), FLK_EW_INT_TO_FLOAT)
FLK_REGISTER("sqrt", FLK_REAL_TYPES, k_sqrt);
FLK_EW_UNARY_KERNEL(k_sqrt_, "sqrt_", FLK_LOOPS_F(l_sqrt), FLK_EW_INT_TO_FLOAT)
FLK_REGISTER("sqrt_", FLK_FLOAT_TYPES, k_sqrt_);
FLK_EW_UNARY_KERNEL(k_rsqrt, "rsqrt", FLK_LOOPS_F(l_rsqrt), FLK_EW_INT_TO_FLOAT)
FLK_REGISTER("rsqrt", FLK_REAL_TYPES, k_rsqrt);
FLK_EW_UNARY_KERNEL(k_rsqrt_, "rsqrt_", FLK_LOOPS_F(l_rsqrt), FLK_EW_INT_TO_FLOAT)
FLK_REGISTER("rsqrt_", FLK_FLOAT_TYPES, k_rsqrt_);
FLK_EW_UNARY_KERNEL(k_reciprocal, "reciprocal", FLK_LOOPS_F(l_reciprocal), FLK_EW_INT_TO_FLOAT)
FLK_REGISTER("reciprocal", FLK_REAL_TYPES, k_reciprocal);

/* pow.Tensor_Scalar(self, exponent) / pow_.Scalar */
static fl_status pow_impl(const char *op, const fl_arg *args, uint32_t nargs,
                          flk_ctx *ctx) {
    flk_args a;
    flk_ew_call c;
    memset(&c, 0, sizeof c);
    FLK_TRY(flk_args_init(&a, op, args, nargs, 3, ctx));
    FLK_TRY(flk_get_operand(&a, 0, "self", &c.in[0]));
    FLK_TRY(flk_get_scalar(&a, 1, "exponent", &c.params[0]));
    FLK_TRY(flk_get_tensor(&a, 2, "out", &c.out));
    c.nin = 1;
    c.nparams = 1;
    c.param_names[0] = "exponent";
    c.nextra = 1;
    c.extra[0].t = NULL;
    c.extra[0].s = c.params[0];
    int32_t full = flk_result_type((flk_operand[]){c.in[0], c.extra[0]}, 2);
    double e = c.params[0].f;
    if (!flk_is_floating(full)) {
        if (full == FL_BOOL)
            return flk_fail(&a, "bool tensors are not supported");
        if (c.params[0].i < 0)
            return flk_fail(&a, "integers to negative integer powers are not allowed");
        return flk_ew_run(&a, (flk_ew_loops){NULL, NULL, l_pow_i64}, FLK_EW_NO_BOOL, &c);
    }
    flk_ew_loops loops;
    if (full == FL_FLOAT16 || full == FL_BFLOAT16) {
        /* PyTorch: the generic pow takes the exponent rounded to the tensor's
         * dtype; float16 has no special cases, bfloat16 shares float32's
         * (sqrt for 0.5: pow(-inf, 0.5) is NaN, not inf) */
        uint16_t h;
        flk_store_f64(&h, full, e);
        c.params[0].kind = FL_ARG_FLOAT;
        c.params[0].f = flk_load_f64(&h, full);
        if (full == FL_FLOAT16)
            return flk_ew_run(&a, (flk_ew_loops){l_powg_f32, l_powg_f64, NULL}, FLK_EW_NO_BOOL, &c);
    }
    if (e == 0.0)
        loops = FLK_LOOPS_F(l_pow_one);
    else if (e == 1.0)
        loops = FLK_LOOPS_F(l_copy);
    else if (e == 2.0)
        loops = FLK_LOOPS_F(l_pow_sq);
    else if (e == 3.0)
        loops = FLK_LOOPS_F(l_pow_cube);
    else if (e == 0.5)
        loops = FLK_LOOPS_F(l_sqrt);
    else if (e == -0.5)
        loops = FLK_LOOPS_F(l_rsqrt);
    else if (e == -1.0)
        loops = FLK_LOOPS_F(l_reciprocal);
    else if (e == -2.0)
        loops = FLK_LOOPS_F(l_pow_invsq);
    else
        loops = (flk_ew_loops){l_powg_f32, l_powg_f64, NULL};
    return flk_ew_run(&a, loops, FLK_EW_NO_BOOL, &c);
}
FLK_KERNEL_FN(k_pow_tensor_scalar) { return pow_impl("pow.Tensor_Scalar", args, nargs, ctx); }
FLK_REGISTER("pow.Tensor_Scalar", FLK_NUM_TYPES, k_pow_tensor_scalar);
FLK_KERNEL_FN(k_pow__scalar) { return pow_impl("pow_.Scalar", args, nargs, ctx); }
FLK_REGISTER("pow_.Scalar", FLK_NUM_TYPES, k_pow__scalar);

/* transcendental (float compute; integral inputs give float32) */
FLK_DEF1_F(l_sin, FLK_NOSETUP, FLK_G1(sin, a))
FLK_DEF1_F(l_cos, FLK_NOSETUP, FLK_G1(cos, a))
FLK_DEF1_F(l_tan, FLK_NOSETUP, FLK_G1(tan, a))
FLK_DEF1_F(l_asin, FLK_NOSETUP, FLK_G1(asin, a))
FLK_DEF1_F(l_acos, FLK_NOSETUP, FLK_G1(acos, a))
FLK_DEF1_F(l_atan, FLK_NOSETUP, FLK_G1(atan, a))
FLK_DEF1_F(l_sinh, FLK_NOSETUP, FLK_G1(sinh, a))
FLK_DEF1_F(l_cosh, FLK_NOSETUP, FLK_G1(cosh, a))
FLK_DEF1_F(l_log1p, FLK_NOSETUP, FLK_G1(log1p, a))
FLK_DEF1_F(l_expm1, FLK_NOSETUP, FLK_G1(expm1, a))
FLK_DEF1_F(l_log2, FLK_NOSETUP, FLK_G1(log2, a))
FLK_DEF1_F(l_log10, FLK_NOSETUP, FLK_G1(log10, a))
FLK_DEF1_F(l_exp2, FLK_NOSETUP, FLK_G1(exp2, a))
FLK_DEF1_F(l_erf, FLK_NOSETUP, FLK_G1(erf, a))
FLK_DEF1_F(l_erfc, FLK_NOSETUP, FLK_G1(erfc, a))

/* rounding: integral values pass through */
FLK_DEF1_F(l_floor, FLK_NOSETUP, FLK_G1(floor, a))
FLK_DEF1_F(l_ceil, FLK_NOSETUP, FLK_G1(ceil, a))
FLK_DEF1_F(l_trunc, FLK_NOSETUP, FLK_G1(trunc, a))
FLK_DEF1_F(l_round, FLK_NOSETUP, FLK_G1(nearbyint, a))
FLK_DEF1_F(l_frac, FLK_NOSETUP, a - FLK_G1(trunc, a))
FLK_DEF1_I(l_ident, FLK_NOSETUP, a)
FLK_DEF1_F(l_sign, FLK_NOSETUP, (T)((a > (T)0) - (a < (T)0)))
FLK_DEF1_I(l_sign, FLK_NOSETUP, (T)((a > 0) - (a < 0)))

/* predicates (bool output) */
FLK_DEF1_PRED(l_isnan, a != a, ((void)a, 0))
FLK_DEF1_PRED(l_isinf, FLK_G1(fabs, a) == (T)INFINITY, ((void)a, 0))
FLK_DEF1_PRED(l_isposinf, a == (T)INFINITY, ((void)a, 0))
FLK_DEF1_PRED(l_isneginf, a == -(T)INFINITY, ((void)a, 0))
FLK_DEF1_PRED(l_isfinite, a == a && FLK_G1(fabs, a) != (T)INFINITY, ((void)a, 1))

#define LOOPS_ROUND(NAME) ((flk_ew_loops){NAME##_f32, NAME##_f64, l_ident_i64})

FLK_EW_UNARY_KERNEL(k_sin, "sin", FLK_LOOPS_F(l_sin), FLK_EW_INT_TO_FLOAT)
FLK_REGISTER("sin", FLK_REAL_TYPES, k_sin);
FLK_EW_UNARY_KERNEL(k_cos, "cos", FLK_LOOPS_F(l_cos), FLK_EW_INT_TO_FLOAT)
FLK_REGISTER("cos", FLK_REAL_TYPES, k_cos);
FLK_EW_UNARY_KERNEL(k_tan, "tan", FLK_LOOPS_F(l_tan), FLK_EW_INT_TO_FLOAT)
FLK_REGISTER("tan", FLK_REAL_TYPES, k_tan);
FLK_EW_UNARY_KERNEL(k_asin, "asin", FLK_LOOPS_F(l_asin), FLK_EW_INT_TO_FLOAT)
FLK_REGISTER("asin", FLK_REAL_TYPES, k_asin);
FLK_EW_UNARY_KERNEL(k_acos, "acos", FLK_LOOPS_F(l_acos), FLK_EW_INT_TO_FLOAT)
FLK_REGISTER("acos", FLK_REAL_TYPES, k_acos);
FLK_EW_UNARY_KERNEL(k_atan, "atan", FLK_LOOPS_F(l_atan), FLK_EW_INT_TO_FLOAT)
FLK_REGISTER("atan", FLK_REAL_TYPES, k_atan);
FLK_EW_UNARY_KERNEL(k_sinh, "sinh", FLK_LOOPS_F(l_sinh), FLK_EW_INT_TO_FLOAT)
FLK_REGISTER("sinh", FLK_REAL_TYPES, k_sinh);
FLK_EW_UNARY_KERNEL(k_cosh, "cosh", FLK_LOOPS_F(l_cosh), FLK_EW_INT_TO_FLOAT)
FLK_REGISTER("cosh", FLK_REAL_TYPES, k_cosh);
FLK_EW_UNARY_KERNEL(k_log1p, "log1p", FLK_LOOPS_F(l_log1p), FLK_EW_INT_TO_FLOAT)
FLK_REGISTER("log1p", FLK_REAL_TYPES, k_log1p);
FLK_EW_UNARY_KERNEL(k_expm1, "expm1", FLK_LOOPS_F(l_expm1), FLK_EW_INT_TO_FLOAT)
FLK_REGISTER("expm1", FLK_REAL_TYPES, k_expm1);
FLK_EW_UNARY_KERNEL(k_log2, "log2", FLK_LOOPS_F(l_log2), FLK_EW_INT_TO_FLOAT)
FLK_REGISTER("log2", FLK_REAL_TYPES, k_log2);
FLK_EW_UNARY_KERNEL(k_log10, "log10", FLK_LOOPS_F(l_log10), FLK_EW_INT_TO_FLOAT)
FLK_REGISTER("log10", FLK_REAL_TYPES, k_log10);
FLK_EW_UNARY_KERNEL(k_exp2, "exp2", FLK_LOOPS_F(l_exp2), FLK_EW_INT_TO_FLOAT)
FLK_REGISTER("exp2", FLK_REAL_TYPES, k_exp2);
FLK_EW_UNARY_KERNEL(k_erf, "erf", FLK_LOOPS_F(l_erf), FLK_EW_INT_TO_FLOAT)
FLK_REGISTER("erf", FLK_REAL_TYPES, k_erf);
FLK_EW_UNARY_KERNEL(k_erfc, "erfc", FLK_LOOPS_F(l_erfc), FLK_EW_INT_TO_FLOAT)
FLK_REGISTER("erfc", FLK_REAL_TYPES, k_erfc);
FLK_EW_UNARY_KERNEL(k_floor, "floor", LOOPS_ROUND(l_floor), FLK_EW_NO_BOOL)
FLK_REGISTER("floor", FLK_NUM_TYPES, k_floor);
FLK_EW_UNARY_KERNEL(k_ceil, "ceil", LOOPS_ROUND(l_ceil), FLK_EW_NO_BOOL)
FLK_REGISTER("ceil", FLK_NUM_TYPES, k_ceil);
FLK_EW_UNARY_KERNEL(k_trunc, "trunc", LOOPS_ROUND(l_trunc), FLK_EW_NO_BOOL)
FLK_REGISTER("trunc", FLK_NUM_TYPES, k_trunc);
FLK_EW_UNARY_KERNEL(k_round, "round", LOOPS_ROUND(l_round), FLK_EW_NO_BOOL)
FLK_REGISTER("round", FLK_NUM_TYPES, k_round);
FLK_EW_UNARY_KERNEL(k_frac, "frac", FLK_LOOPS_F(l_frac), FLK_EW_NO_BOOL)
FLK_REGISTER("frac", FLK_FLOAT_TYPES, k_frac);
FLK_EW_UNARY_KERNEL(k_sign, "sign", FLK_LOOPS_FI(l_sign), 0)
FLK_REGISTER("sign", FLK_REAL_TYPES, k_sign);
FLK_EW_UNARY_KERNEL(k_sgn, "sgn", FLK_LOOPS_FI(l_sign), 0)
FLK_REGISTER("sgn", FLK_REAL_TYPES, k_sgn);
FLK_EW_UNARY_KERNEL(k_isnan, "isnan", FLK_LOOPS_FI(l_isnan), FLK_EW_BOOL_OUT)
FLK_REGISTER("isnan", FLK_REAL_TYPES, k_isnan);
FLK_EW_UNARY_KERNEL(k_isinf, "isinf", FLK_LOOPS_FI(l_isinf), FLK_EW_BOOL_OUT)
FLK_REGISTER("isinf", FLK_REAL_TYPES, k_isinf);
FLK_EW_UNARY_KERNEL(k_isposinf, "isposinf", FLK_LOOPS_FI(l_isposinf), FLK_EW_BOOL_OUT)
FLK_REGISTER("isposinf", FLK_REAL_TYPES, k_isposinf);
FLK_EW_UNARY_KERNEL(k_isneginf, "isneginf", FLK_LOOPS_FI(l_isneginf), FLK_EW_BOOL_OUT)
FLK_REGISTER("isneginf", FLK_REAL_TYPES, k_isneginf);
FLK_EW_UNARY_KERNEL(k_isfinite, "isfinite", FLK_LOOPS_FI(l_isfinite), FLK_EW_BOOL_OUT)
FLK_REGISTER("isfinite", FLK_REAL_TYPES, k_isfinite);

/* logit(self, eps?): log(x / (1 - x)), x clamped to [eps, 1 - eps] when eps is given */
FLK_DEF1_F(l_logit, FLK_NOSETUP, FLK_G1(log, a / ((T)1 - a)))
FLK_DEF1_F(l_logit_eps, const T lo = FLK_PARAM(T, 0); const T hi = (T)1 - lo;,
           FLK_G1(log, (a < lo ? lo : (a > hi ? hi : a)) / ((T)1 - (a < lo ? lo : (a > hi ? hi : a)))))
FLK_KERNEL_FN(k_logit) {
    flk_args a;
    flk_ew_call c;
    int has_eps;
    memset(&c, 0, sizeof c);
    FLK_TRY(flk_args_init(&a, "logit", args, nargs, 3, ctx));
    FLK_TRY(flk_get_operand(&a, 0, "self", &c.in[0]));
    FLK_TRY(flk_get_opt_scalar(&a, 1, "eps", &has_eps, &c.params[0]));
    FLK_TRY(flk_get_tensor(&a, 2, "out", &c.out));
    c.nin = 1;
    c.nparams = has_eps;
    c.param_names[0] = "eps";
    return flk_ew_run(&a, has_eps ? FLK_LOOPS_F(l_logit_eps) : FLK_LOOPS_F(l_logit), FLK_EW_INT_TO_FLOAT, &c);
}
FLK_REGISTER("logit", FLK_REAL_TYPES, k_logit);
