/*
 * unary.c -- unary elementwise kernels and the ops of one tensor and
 * scalars (pow with a scalar exponent, clamp, add.Scalar ...), on the
 * elementwise family (cl/ew.cl.h, elementwise.h).  In-place overloads share
 * the out-of-place code (their trailing output argument is self); only the
 * ones models call in place (relu_, sigmoid_, tanh_) are registered, the
 * rest run as the out-of-place kernel plus a copy (the runtime's generic path).
 */
#include <math.h>
#include <string.h>

#include "elementwise.h"

#define FLOATS CLK_FLOATS

/* (self, out): one op code */
static fl_status plain(const char *op, int code, const fl_arg *args, uint32_t nargs, flk_ctx *ctx) {
    flk_args a;
    const fl_tensor *self, *out;
    FLK_TRY(flk_args_init(&a, op, args, nargs, 2, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &self));
    FLK_TRY(flk_get_tensor(&a, 1, "out", &out));
    return ew_unary(&a, out, self, code, 0, 0);
}

#define UNARY(NAME, CODE)                                                         \
    FLK_KERNEL_FN(k_##CODE) { return plain(NAME, CLK_##CODE, args, nargs, ctx); } \
    FLK_REGISTER(NAME, FLOATS, k_##CODE);
#define UNARY_INPLACE(NAME, CODE)                                                              \
    FLK_KERNEL_FN(k_##CODE##_inplace) { return plain(NAME, CLK_##CODE, args, nargs, ctx); }    \
    FLK_REGISTER(NAME, FLOATS, k_##CODE##_inplace);

UNARY("neg", U_NEG)
UNARY("abs", U_ABS)
UNARY("relu", U_RELU)
UNARY("exp", U_EXP)
UNARY("log", U_LOG)
UNARY("sqrt", U_SQRT)
UNARY("rsqrt", U_RSQRT)
UNARY("tanh", U_TANH)
UNARY("sigmoid", U_SIGMOID)
UNARY("sin", U_SIN)
UNARY("cos", U_COS)
UNARY("reciprocal", U_RECIPROCAL)
UNARY("erf", U_ERF)
UNARY("log1p", U_LOG1P)
UNARY("expm1", U_EXPM1)
UNARY("silu", U_SILU)
UNARY("floor", U_FLOOR)
UNARY("ceil", U_CEIL)
UNARY("trunc", U_TRUNC)
UNARY("round", U_ROUND)
UNARY_INPLACE("relu_", U_RELU)
UNARY_INPLACE("sigmoid_", U_SIGMOID)
UNARY_INPLACE("tanh_", U_TANH)

/* gelu(self, *, approximate) */
static fl_status gelu(const char *op, const fl_arg *args, uint32_t nargs, flk_ctx *ctx) {
    flk_args a;
    const fl_tensor *self, *out;
    const char *approximate;
    FLK_TRY(flk_args_init(&a, op, args, nargs, 3, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &self));
    FLK_TRY(flk_get_string(&a, 1, "approximate", &approximate));
    FLK_TRY(flk_get_tensor(&a, 2, "out", &out));
    int code = !strcmp(approximate, "none") ? CLK_U_GELU : !strcmp(approximate, "tanh") ? CLK_U_GELU_TANH : -1;
    if (code < 0)
        return flk_fail(&a, "approximate must be 'none' or 'tanh', not '%s'", approximate);
    return ew_unary(&a, out, self, code, 0, 0);
}
FLK_KERNEL_FN(k_gelu) { return gelu("gelu", args, nargs, ctx); }
FLK_REGISTER("gelu", FLOATS, k_gelu);

/* The op code of x ** e: PyTorch's CPU kernel special-cases these exponents
 * (exact squares and cubes, correctly rounded sqrt and reciprocal). */
static int pow_code(double e) {
    return e == 0.0 ? CLK_U_ONE : e == 1.0 ? CLK_U_COPY : e == 2.0 ? CLK_U_SQUARE : e == 3.0 ? CLK_U_CUBE
         : e == 0.5 ? CLK_U_SQRT : e == -0.5 ? CLK_U_RSQRT : e == -1.0 ? CLK_U_RECIPROCAL
         : e == -2.0 ? CLK_U_INV_SQUARE : CLK_U_POW;
}

/* pow.Tensor_Scalar(self, exponent) / pow_.Scalar */
static fl_status pow_scalar(const char *op, const fl_arg *args, uint32_t nargs, flk_ctx *ctx) {
    flk_args a;
    const fl_tensor *self, *out;
    flk_scalar e;
    FLK_TRY(flk_args_init(&a, op, args, nargs, 3, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &self));
    FLK_TRY(flk_get_scalar(&a, 1, "exponent", &e));
    FLK_TRY(flk_get_tensor(&a, 2, "out", &out));
    if (out->dtype == FL_FLOAT16) {
        /* PyTorch's float16 pow takes the exponent rounded to float16 and has no special cases */
        uint16_t h;
        flk_store_f64(&h, FL_FLOAT16, e.f);
        return ew_unary(&a, out, self, CLK_U_POW, flk_load_f64(&h, FL_FLOAT16), 0);
    }
    return ew_unary(&a, out, self, pow_code(e.f), e.f, 0);
}
FLK_KERNEL_FN(k_pow_scalar) { return pow_scalar("pow.Tensor_Scalar", args, nargs, ctx); }
FLK_REGISTER("pow.Tensor_Scalar", FLOATS, k_pow_scalar);
FLK_KERNEL_FN(k_pow_scalar_) { return pow_scalar("pow_.Scalar", args, nargs, ctx); }
FLK_REGISTER("pow_.Scalar", FLOATS, k_pow_scalar_);

/* (self, Scalar p0, [Scalar p1,] out) with the scalars as the op's parameters */
static fl_status with_scalars(const char *op, int code, int nscalars, const fl_arg *args, uint32_t nargs,
                              flk_ctx *ctx) {
    flk_args a;
    const fl_tensor *self, *out;
    flk_scalar s[2] = {{FL_ARG_FLOAT, 0, 0}, {FL_ARG_FLOAT, 0, 0}};
    FLK_TRY(flk_args_init(&a, op, args, nargs, 2 + (uint32_t)nscalars, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &self));
    for (int i = 0; i < nscalars; i++)
        FLK_TRY(flk_get_scalar(&a, 1 + (uint32_t)i, i ? "second scalar" : "scalar", &s[i]));
    FLK_TRY(flk_get_tensor(&a, 1 + (uint32_t)nscalars, "out", &out));
    return ew_unary(&a, out, self, code, s[0].f, s[1].f);
}

#define WITH_SCALARS(NAME, FN, CODE, N)                                               \
    FLK_KERNEL_FN(FN) { return with_scalars(NAME, CLK_##CODE, N, args, nargs, ctx); } \
    FLK_REGISTER(NAME, FLOATS, FN);

WITH_SCALARS("threshold", k_threshold, U_THRESHOLD, 2)
WITH_SCALARS("threshold_", k_threshold_, U_THRESHOLD, 2)
WITH_SCALARS("leaky_relu", k_leaky_relu, U_LEAKY_RELU, 1)
WITH_SCALARS("leaky_relu_", k_leaky_relu_, U_LEAKY_RELU, 1)
WITH_SCALARS("hardtanh", k_hardtanh, U_HARDTANH, 2)
WITH_SCALARS("hardtanh_", k_hardtanh_, U_HARDTANH, 2)
WITH_SCALARS("mul.Scalar", k_mul_scalar, U_MUL, 1)
WITH_SCALARS("mul_.Scalar", k_mul_scalar_, U_MUL, 1)
WITH_SCALARS("div.Scalar", k_div_scalar, U_DIV, 1)
WITH_SCALARS("div_.Scalar", k_div_scalar_, U_DIV, 1)
/* (self, other, alpha): U_ADD is fma(alpha, other, self); U_RSUB other - alpha * self */
WITH_SCALARS("add.Scalar", k_add_scalar, U_ADD, 2)
WITH_SCALARS("add_.Scalar", k_add_scalar_, U_ADD, 2)
WITH_SCALARS("rsub.Scalar", k_rsub_scalar, U_RSUB, 2)

/* sub(self, other, alpha) = self + (-alpha) * other */
static fl_status sub_scalar(const char *op, const fl_arg *args, uint32_t nargs, flk_ctx *ctx) {
    flk_args a;
    const fl_tensor *self, *out;
    flk_scalar other, alpha;
    FLK_TRY(flk_args_init(&a, op, args, nargs, 4, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &self));
    FLK_TRY(flk_get_scalar(&a, 1, "other", &other));
    FLK_TRY(flk_get_scalar(&a, 2, "alpha", &alpha));
    FLK_TRY(flk_get_tensor(&a, 3, "out", &out));
    return ew_unary(&a, out, self, CLK_U_ADD, other.f, -alpha.f);
}
FLK_KERNEL_FN(k_sub_scalar) { return sub_scalar("sub.Scalar", args, nargs, ctx); }
FLK_REGISTER("sub.Scalar", FLOATS, k_sub_scalar);
FLK_KERNEL_FN(k_sub_scalar_) { return sub_scalar("sub_.Scalar", args, nargs, ctx); }
FLK_REGISTER("sub_.Scalar", FLOATS, k_sub_scalar_);

/* clamp(self, Scalar? min, Scalar? max): an absent bound is an infinity */
static fl_status clamp(const char *op, const fl_arg *args, uint32_t nargs, flk_ctx *ctx) {
    flk_args a;
    const fl_tensor *self, *out;
    flk_scalar lo, hi;
    int has_lo, has_hi;
    FLK_TRY(flk_args_init(&a, op, args, nargs, 4, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &self));
    FLK_TRY(flk_get_opt_scalar(&a, 1, "min", &has_lo, &lo));
    FLK_TRY(flk_get_opt_scalar(&a, 2, "max", &has_hi, &hi));
    FLK_TRY(flk_get_tensor(&a, 3, "out", &out));
    if (!has_lo && !has_hi)
        return flk_fail(&a, "at least one of min and max must be given");
    if ((has_lo && isnan(lo.f)) || (has_hi && isnan(hi.f)))
        return ew_unary(&a, out, self, CLK_U_FILL, NAN, 0);   /* PyTorch: a NaN bound gives NaN */
    return ew_unary(&a, out, self, CLK_U_CLAMP, has_lo ? lo.f : -INFINITY, has_hi ? hi.f : INFINITY);
}
FLK_KERNEL_FN(k_clamp) { return clamp("clamp", args, nargs, ctx); }
FLK_REGISTER("clamp", FLOATS, k_clamp);
FLK_KERNEL_FN(k_clamp_) { return clamp("clamp_", args, nargs, ctx); }
FLK_REGISTER("clamp_", FLOATS, k_clamp_);
