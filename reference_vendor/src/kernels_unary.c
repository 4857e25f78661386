/*
 * kernels_unary.c -- more pointwise math on the elementwise engine: the
 * transcendental functions, rounding, sign, the float predicates (isnan,
 * isinf, ...), logical and bitwise ops, and the binary ops pow (tensor
 * exponent), atan2, remainder, fmod, floor_divide, xlogy.
 *
 * Rounding and remainder-style ops follow PyTorch's CPU definitions exactly
 * (round half to even; remainder takes the divisor's sign; floor_divide
 * rounds the true quotient down).  Integer remainder / fmod / floor_divide
 * are left to the fallback: a zero divisor must raise, not trap.
 */
#include "kernels_ew.h"

/* a predicate with a bool output */
#define DEF1_PRED(NAME, FEXPR, IEXPR)                                             \
    EW_LOOP1(NAME##_f32, float, ref_f32, uint8_t, ref_u8, NOSETUP, FEXPR)         \
    EW_LOOP1(NAME##_f64, double, ref_f64, uint8_t, ref_u8, NOSETUP, FEXPR)        \
    EW_LOOP1(NAME##_i64, int64_t, ref_i64, uint8_t, ref_u8, NOSETUP, IEXPR)
#define DEF2_PRED(NAME, EXPR)                                                     \
    EW_LOOP2(NAME##_f32, float, ref_f32, uint8_t, ref_u8, NOSETUP, EXPR)          \
    EW_LOOP2(NAME##_f64, double, ref_f64, uint8_t, ref_u8, NOSETUP, EXPR)         \
    EW_LOOP2(NAME##_i64, int64_t, ref_i64, uint8_t, ref_u8, NOSETUP, EXPR)
#define G2(F, x, y) _Generic((x), float: F##f, default: F)(x, y)

/* transcendental (float compute; integral inputs give float32) */
DEF1_F(l_sin, NOSETUP, G1(sin, a))
DEF1_F(l_cos, NOSETUP, G1(cos, a))
DEF1_F(l_tan, NOSETUP, G1(tan, a))
DEF1_F(l_asin, NOSETUP, G1(asin, a))
DEF1_F(l_acos, NOSETUP, G1(acos, a))
DEF1_F(l_atan, NOSETUP, G1(atan, a))
DEF1_F(l_sinh, NOSETUP, G1(sinh, a))
DEF1_F(l_cosh, NOSETUP, G1(cosh, a))
DEF1_F(l_log1p, NOSETUP, G1(log1p, a))
DEF1_F(l_expm1, NOSETUP, G1(expm1, a))
DEF1_F(l_log2, NOSETUP, G1(log2, a))
DEF1_F(l_log10, NOSETUP, G1(log10, a))
DEF1_F(l_exp2, NOSETUP, G1(exp2, a))
DEF1_F(l_erf, NOSETUP, G1(erf, a))
DEF1_F(l_erfc, NOSETUP, G1(erfc, a))

/* rounding: integral values pass through */
DEF1_F(l_floor, NOSETUP, G1(floor, a))
DEF1_F(l_ceil, NOSETUP, G1(ceil, a))
DEF1_F(l_trunc, NOSETUP, G1(trunc, a))
DEF1_F(l_round, NOSETUP, G1(nearbyint, a))
DEF1_F(l_frac, NOSETUP, a - G1(trunc, a))
DEF1_I(l_ident, NOSETUP, a)
DEF1_F(l_sign, NOSETUP, (T)((a > (T)0) - (a < (T)0)))
DEF1_I(l_sign, NOSETUP, (T)((a > 0) - (a < 0)))

/* predicates */
DEF1_PRED(l_isnan, a != a, ((void)a, 0))
DEF1_PRED(l_isinf, G1(fabs, a) == (T)INFINITY, ((void)a, 0))
DEF1_PRED(l_isposinf, a == (T)INFINITY, ((void)a, 0))
DEF1_PRED(l_isneginf, a == -(T)INFINITY, ((void)a, 0))
DEF1_PRED(l_isfinite, a == a && G1(fabs, a) != (T)INFINITY, ((void)a, 1))
DEF1_PRED(l_logical_not, a == (T)0, a == 0)
DEF2_PRED(l_logical_and, a != (T)0 && b != (T)0)
DEF2_PRED(l_logical_or, a != (T)0 || b != (T)0)
DEF2_PRED(l_logical_xor, (a != (T)0) != (b != (T)0))

/* bitwise (integral and bool; bool values are 0/1 so &, |, ^ stay in {0, 1}) */
DEF1_I(l_bitwise_not, NOSETUP, ~a)
DEF2_I(l_bitwise_and, NOSETUP, a & b)
DEF2_I(l_bitwise_or, NOSETUP, a | b)
DEF2_I(l_bitwise_xor, NOSETUP, a ^ b)

/* binary float math */
DEF2_F(l_atan2, NOSETUP, G2(atan2, a, b))
DEF2_F(l_powt, NOSETUP, G2(pow, a, b))
static inline int64_t ipow_any(int64_t base, int64_t e) {
    if (e < 0) /* PyTorch: 1 ** -n = 1, (-1) ** -n = +-1, otherwise 0 */
        return base == 1 ? 1 : base == -1 ? ((e & 1) ? -1 : 1) : 0;
    uint64_t r = 1, x = (uint64_t)base;
    for (; e > 0; e >>= 1, x *= x)
        if (e & 1)
            r *= x;
    return (int64_t)r;
}
DEF2_I(l_powt, NOSETUP, ipow_any(a, b))
static inline double remainder_d(double a, double b) {
    double m = fmod(a, b);
    return (m != 0 && ((b < 0) != (m < 0))) ? m + b : m;
}
DEF2_F(l_remainder, NOSETUP, (T)remainder_d(a, b))
DEF2_F(l_fmod, NOSETUP, G2(fmod, a, b))
/* PyTorch's div_floor_floating */
static inline double floor_div_d(double a, double b) {
    if (b == 0)
        return a / b;
    double mod = fmod(a, b), div = (a - mod) / b;
    if (mod != 0 && ((b < 0) != (mod < 0)))
        div -= 1;
    if (div == 0)
        return copysign(0.0, a / b);
    double fl = floor(div);
    return div - fl > 0.5 ? fl + 1 : fl;
}
EW_LOOP2(l_floor_divide_f32, float, ref_f32, float, ref_f32, NOSETUP,
         (float)floor_div_d((double)a, (double)b))
EW_LOOP2(l_floor_divide_f64, double, ref_f64, double, ref_f64, NOSETUP, floor_div_d(a, b))
DEF2_F(l_xlogy, NOSETUP, b != b ? b : (a == (T)0 ? (T)0 : a * G1(log, b)))

#define FLT_OUT EW_INT_TO_FLOAT
#define BOOL_OUT EW_BOOL_OUT
#define LOOPS_I(NAME) ((ew_loops){NULL, NULL, NAME##_i64})
#define LOOPS_ROUND(NAME) ((ew_loops){NAME##_f32, NAME##_f64, l_ident_i64})

K_UNARY(ref_k_sin, "sin", LOOPS_F(l_sin), FLT_OUT)
K_UNARY(ref_k_cos, "cos", LOOPS_F(l_cos), FLT_OUT)
K_UNARY(ref_k_tan, "tan", LOOPS_F(l_tan), FLT_OUT)
K_UNARY(ref_k_asin, "asin", LOOPS_F(l_asin), FLT_OUT)
K_UNARY(ref_k_acos, "acos", LOOPS_F(l_acos), FLT_OUT)
K_UNARY(ref_k_atan, "atan", LOOPS_F(l_atan), FLT_OUT)
K_UNARY(ref_k_sinh, "sinh", LOOPS_F(l_sinh), FLT_OUT)
K_UNARY(ref_k_cosh, "cosh", LOOPS_F(l_cosh), FLT_OUT)
K_UNARY(ref_k_log1p, "log1p", LOOPS_F(l_log1p), FLT_OUT)
K_UNARY(ref_k_expm1, "expm1", LOOPS_F(l_expm1), FLT_OUT)
K_UNARY(ref_k_log2, "log2", LOOPS_F(l_log2), FLT_OUT)
K_UNARY(ref_k_log10, "log10", LOOPS_F(l_log10), FLT_OUT)
K_UNARY(ref_k_exp2, "exp2", LOOPS_F(l_exp2), FLT_OUT)
K_UNARY(ref_k_erf, "erf", LOOPS_F(l_erf), FLT_OUT)
K_UNARY(ref_k_erfc, "erfc", LOOPS_F(l_erfc), FLT_OUT)
K_UNARY(ref_k_floor, "floor", LOOPS_ROUND(l_floor), EW_NO_BOOL)
K_UNARY(ref_k_ceil, "ceil", LOOPS_ROUND(l_ceil), EW_NO_BOOL)
K_UNARY(ref_k_trunc, "trunc", LOOPS_ROUND(l_trunc), EW_NO_BOOL)
K_UNARY(ref_k_round, "round", LOOPS_ROUND(l_round), EW_NO_BOOL)
K_UNARY(ref_k_frac, "frac", LOOPS_F(l_frac), EW_NO_BOOL)
K_UNARY(ref_k_sign, "sign", LOOPS_FI(l_sign), 0)
K_UNARY(ref_k_sgn, "sgn", LOOPS_FI(l_sign), 0)
K_UNARY(ref_k_isnan, "isnan", LOOPS_FI(l_isnan), BOOL_OUT)
K_UNARY(ref_k_isinf, "isinf", LOOPS_FI(l_isinf), BOOL_OUT)
K_UNARY(ref_k_isposinf, "isposinf", LOOPS_FI(l_isposinf), BOOL_OUT)
K_UNARY(ref_k_isneginf, "isneginf", LOOPS_FI(l_isneginf), BOOL_OUT)
K_UNARY(ref_k_isfinite, "isfinite", LOOPS_FI(l_isfinite), BOOL_OUT)
K_UNARY(ref_k_logical_not, "logical_not", LOOPS_FI(l_logical_not), BOOL_OUT)
K_BINARY(ref_k_logical_and, "logical_and", LOOPS_FI(l_logical_and), BOOL_OUT)
K_BINARY(ref_k_logical_or, "logical_or", LOOPS_FI(l_logical_or), BOOL_OUT)
K_BINARY(ref_k_logical_xor, "logical_xor", LOOPS_FI(l_logical_xor), BOOL_OUT)
K_BINARY(ref_k_bitwise_and_tensor, "bitwise_and.Tensor", LOOPS_I(l_bitwise_and), 0)
K_BINARY(ref_k_bitwise_or_tensor, "bitwise_or.Tensor", LOOPS_I(l_bitwise_or), 0)
K_BINARY(ref_k_bitwise_xor_tensor, "bitwise_xor.Tensor", LOOPS_I(l_bitwise_xor), 0)
K_BINARY(ref_k_bitwise_and_scalar, "bitwise_and.Scalar", LOOPS_I(l_bitwise_and), 0)
K_BINARY(ref_k_bitwise_or_scalar, "bitwise_or.Scalar", LOOPS_I(l_bitwise_or), 0)
K_BINARY(ref_k_bitwise_xor_scalar, "bitwise_xor.Scalar", LOOPS_I(l_bitwise_xor), 0)
K_BINARY(ref_k_atan2, "atan2", LOOPS_F(l_atan2), FLT_OUT)
K_BINARY(ref_k_pow_tensor_tensor, "pow.Tensor_Tensor", LOOPS_FI(l_powt), EW_NO_BOOL)
K_BINARY(ref_k_pow_scalar, "pow.Scalar", LOOPS_FI(l_powt), EW_NO_BOOL)
K_BINARY(ref_k_remainder_tensor, "remainder.Tensor", LOOPS_F(l_remainder), EW_NO_BOOL)
K_BINARY(ref_k_remainder_scalar, "remainder.Scalar", LOOPS_F(l_remainder), EW_NO_BOOL)
K_BINARY(ref_k_fmod_tensor, "fmod.Tensor", LOOPS_F(l_fmod), EW_NO_BOOL)
K_BINARY(ref_k_fmod_scalar, "fmod.Scalar", LOOPS_F(l_fmod), EW_NO_BOOL)
K_BINARY(ref_k_floor_divide, "floor_divide", LOOPS_F(l_floor_divide), EW_NO_BOOL)
K_BINARY(ref_k_xlogy_tensor, "xlogy.Tensor", LOOPS_F(l_xlogy), FLT_OUT)

/* bitwise_not: bool is logical not (~1 would be -2, still "true") */
REF_KERNEL(ref_k_bitwise_not) {
    const fl_tensor *self = nargs > 0 && args[0].kind == FL_ARG_TENSOR ? args[0].value.tensor : NULL;
    if (self && self->dtype == FL_BOOL)
        return ref_ew_unary("bitwise_not", args, nargs, ctx, LOOPS_FI(l_logical_not), BOOL_OUT);
    return ref_ew_unary("bitwise_not", args, nargs, ctx, LOOPS_I(l_bitwise_not), 0);
}

/* logit(self, eps?): log(x / (1 - x)), x clamped to [eps, 1 - eps] when eps is given */
DEF1_F(l_logit, NOSETUP, G1(log, a / ((T)1 - a)))
DEF1_F(l_logit_eps, const T lo = PARAM(T, 0); const T hi = (T)1 - lo;,
       G1(log, (a < lo ? lo : (a > hi ? hi : a)) / ((T)1 - (a < lo ? lo : (a > hi ? hi : a)))))
REF_KERNEL(ref_k_logit) {
    ref_args a;
    ew_call c;
    int has_eps;
    memset(&c, 0, sizeof c);
    REF_TRY(ref_args_init(&a, "logit", args, nargs, 3, ctx));
    REF_TRY(ref_get_operand(&a, 0, "self", &c.in[0]));
    REF_TRY(ref_get_opt_scalar(&a, 1, "eps", &has_eps, &c.params[0]));
    REF_TRY(ref_get_tensor(&a, 2, "out", &c.out));
    c.nin = 1;
    c.nparams = has_eps;
    c.param_names[0] = "eps";
    return ref_ew_run(&a, has_eps ? LOOPS_F(l_logit_eps) : LOOPS_F(l_logit), FLT_OUT, &c);
}
