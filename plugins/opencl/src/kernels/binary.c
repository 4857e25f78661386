/*
 * binary.c -- elementwise kernels of two or three operands: arithmetic
 * (add/sub with alpha, mul, div, maximum, minimum, pow, atan2, lerp, addcmul,
 * addcdiv), activation backwards, comparisons and where, on the elementwise
 * family (cl/ew.cl.h, elementwise.h).  Either operand of a binary op may be
 * a scalar (a number PyTorch wrapped in a tensor slot); in-place overloads
 * share the out-of-place code (their output argument is self).
 */
#include <string.h>

#include "elementwise.h"

#define FLOATS CLK_FLOATS

/* (self, other, [Scalar p0, [Scalar p1,]] out) */
static fl_status binary(const char *op, int code, int nscalars, const fl_arg *args, uint32_t nargs, flk_ctx *ctx) {
    flk_args a;
    flk_operand x, y;
    flk_scalar s[2] = {{FL_ARG_FLOAT, 0, 0}, {FL_ARG_FLOAT, 0, 0}};
    const fl_tensor *out;
    FLK_TRY(flk_args_init(&a, op, args, nargs, 3 + (uint32_t)nscalars, ctx));
    FLK_TRY(flk_get_operand(&a, 0, "self", &x));
    FLK_TRY(flk_get_operand(&a, 1, "other", &y));
    for (int i = 0; i < nscalars; i++)
        FLK_TRY(flk_get_scalar(&a, 2 + (uint32_t)i, i ? "second scalar" : "scalar", &s[i]));
    FLK_TRY(flk_get_tensor(&a, 2 + (uint32_t)nscalars, "out", &out));
    if (!x.t && !y.t)
        return flk_decline(&a, "two scalars");
    return ew_binary(&a, out, x, y, code, s[0].f, s[1].f);
}

#define BINARY(NAME, FN, CODE, N)                                                   \
    FLK_KERNEL_FN(FN) { return binary(NAME, CLK_##CODE, N, args, nargs, ctx); }     \
    FLK_REGISTER(NAME, FLOATS, FN);

/* alpha is the scalar: add is fma(alpha, other, self) */
BINARY("add.Tensor", k_add, B_ADD, 1)
BINARY("add_.Tensor", k_add_, B_ADD, 1)
BINARY("sub.Tensor", k_sub, B_SUB, 1)
BINARY("sub_.Tensor", k_sub_, B_SUB, 1)
BINARY("rsub.Tensor", k_rsub, B_RSUB, 1)
BINARY("mul.Tensor", k_mul, B_MUL, 0)
BINARY("mul_.Tensor", k_mul_, B_MUL, 0)
BINARY("div.Tensor", k_div, B_DIV, 0)
BINARY("div_.Tensor", k_div_, B_DIV, 0)
BINARY("maximum", k_maximum, B_MAXIMUM, 0)
BINARY("minimum", k_minimum, B_MINIMUM, 0)
BINARY("pow.Tensor_Tensor", k_pow, B_POW, 0)
BINARY("atan2", k_atan2, B_ATAN2, 0)
/* lerp.Scalar(self, end, weight) */
BINARY("lerp.Scalar", k_lerp, B_LERP, 1)
BINARY("lerp_.Scalar", k_lerp_, B_LERP, 1)
/* backwards: (grad_output, self or output, [scalars]) */
BINARY("threshold_backward", k_threshold_backward, B_THRESHOLD_BACKWARD, 1)
BINARY("tanh_backward", k_tanh_backward, B_TANH_BACKWARD, 0)
BINARY("sigmoid_backward", k_sigmoid_backward, B_SIGMOID_BACKWARD, 0)
BINARY("silu_backward", k_silu_backward, B_SILU_BACKWARD, 0)
BINARY("hardtanh_backward", k_hardtanh_backward, B_HARDTANH_BACKWARD, 2)

/* gelu_backward(grad_output, self, *, approximate) */
FLK_KERNEL_FN(k_gelu_backward) {
    flk_args a;
    flk_operand g, x;
    const char *approximate;
    const fl_tensor *out;
    FLK_TRY(flk_args_init(&a, "gelu_backward", args, nargs, 4, ctx));
    FLK_TRY(flk_get_operand(&a, 0, "grad_output", &g));
    FLK_TRY(flk_get_operand(&a, 1, "self", &x));
    FLK_TRY(flk_get_string(&a, 2, "approximate", &approximate));
    FLK_TRY(flk_get_tensor(&a, 3, "out", &out));
    int code = !strcmp(approximate, "none") ? CLK_B_GELU_BACKWARD
             : !strcmp(approximate, "tanh") ? CLK_B_GELU_TANH_BACKWARD : -1;
    if (code < 0)
        return flk_fail(&a, "approximate must be 'none' or 'tanh', not '%s'", approximate);
    if (!g.t && !x.t)
        return flk_decline(&a, "two scalars");
    return ew_binary(&a, out, g, x, code, 0, 0);
}
FLK_REGISTER("gelu_backward", FLOATS, k_gelu_backward);

/* leaky_relu_backward(grad_output, self, negative_slope, self_is_result) */
FLK_KERNEL_FN(k_leaky_relu_backward) {
    flk_args a;
    flk_operand g, x;
    flk_scalar slope;
    int is_result;
    const fl_tensor *out;
    FLK_TRY(flk_args_init(&a, "leaky_relu_backward", args, nargs, 5, ctx));
    FLK_TRY(flk_get_operand(&a, 0, "grad_output", &g));
    FLK_TRY(flk_get_operand(&a, 1, "self", &x));
    FLK_TRY(flk_get_scalar(&a, 2, "negative_slope", &slope));
    FLK_TRY(flk_get_bool(&a, 3, "self_is_result", &is_result));
    FLK_TRY(flk_get_tensor(&a, 4, "out", &out));
    if (is_result && slope.f < 0)
        return flk_fail(&a, "in-place leakyReLu backward with a negative slope is not supported (as in PyTorch)");
    if (!g.t && !x.t)
        return flk_decline(&a, "two scalars");
    return ew_binary(&a, out, g, x, CLK_B_LEAKY_RELU_BACKWARD, slope.f, 0);
}
FLK_REGISTER("leaky_relu_backward", FLOATS, k_leaky_relu_backward);

/* ---- three operands: (self, tensor1, tensor2 or weight, [value,] out) ---------- */

static fl_status ternary(const char *op, int code, int has_value, const fl_arg *args, uint32_t nargs,
                         flk_ctx *ctx) {
    flk_args a;
    const fl_tensor *x, *y, *out;
    flk_operand z;
    flk_scalar value = {FL_ARG_FLOAT, 1.0, 1};
    FLK_TRY(flk_args_init(&a, op, args, nargs, 4 + (uint32_t)has_value, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &x));
    FLK_TRY(flk_get_tensor(&a, 1, "tensor1", &y));
    FLK_TRY(flk_get_operand(&a, 2, "tensor2", &z));
    if (has_value)
        FLK_TRY(flk_get_scalar(&a, 3, "value", &value));
    FLK_TRY(flk_get_tensor(&a, 3 + (uint32_t)has_value, "out", &out));
    return ew_ternary(&a, out, x, y, z, code, value.f);
}

#define TERNARY(NAME, FN, CODE, VALUE)                                                 \
    FLK_KERNEL_FN(FN) { return ternary(NAME, CLK_##CODE, VALUE, args, nargs, ctx); }   \
    FLK_REGISTER(NAME, FLOATS, FN);

TERNARY("addcmul", k_addcmul, T_ADDCMUL, 1)
TERNARY("addcmul_", k_addcmul_, T_ADDCMUL, 1)
TERNARY("addcdiv", k_addcdiv, T_ADDCDIV, 1)
TERNARY("addcdiv_", k_addcdiv_, T_ADDCDIV, 1)
TERNARY("lerp.Tensor", k_lerp_tensor, T_LERP, 0)
TERNARY("lerp_.Tensor", k_lerp_tensor_, T_LERP, 0)

/* ---- comparisons: (self, other, out) -> bool -------------------------------- */

static fl_status compare(const char *op, int code, const fl_arg *args, uint32_t nargs, flk_ctx *ctx) {
    flk_args a;
    const fl_tensor *x, *out;
    flk_operand y;
    FLK_TRY(flk_args_init(&a, op, args, nargs, 3, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &x));
    FLK_TRY(flk_get_operand(&a, 1, "other", &y));
    FLK_TRY(flk_get_tensor(&a, 2, "out", &out));
    return ew_compare(&a, out, x, y, code);
}

#define COMPARE(NAME, CODE)                                                                        \
    FLK_KERNEL_FN(k_##CODE##_t) { return compare(NAME ".Tensor", CLK_##CODE, args, nargs, ctx); }  \
    FLK_REGISTER(NAME ".Tensor", FLOATS, k_##CODE##_t);                                           \
    FLK_KERNEL_FN(k_##CODE##_s) { return compare(NAME ".Scalar", CLK_##CODE, args, nargs, ctx); }  \
    FLK_REGISTER(NAME ".Scalar", FLOATS, k_##CODE##_s);

COMPARE("eq", C_EQ)
COMPARE("ne", C_NE)
COMPARE("lt", C_LT)
COMPARE("le", C_LE)
COMPARE("gt", C_GT)
COMPARE("ge", C_GE)

/* where.self(condition, self, other).  The runtime keys the dtype mask on an
 * op's first tensor argument, here the bool condition: bool is in the mask,
 * and the values' dtype is checked in ew_where. */
FLK_KERNEL_FN(k_where) {
    flk_args a;
    const fl_tensor *cond, *out;
    flk_operand x, y;
    FLK_TRY(flk_args_init(&a, "where.self", args, nargs, 4, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "condition", &cond));
    FLK_TRY(flk_get_operand(&a, 1, "self", &x));
    FLK_TRY(flk_get_operand(&a, 2, "other", &y));
    FLK_TRY(flk_get_tensor(&a, 3, "out", &out));
    return ew_where(&a, out, cond, x, y);
}
FLK_REGISTER("where.self", FLOATS | FLK_DT(FL_BOOL), k_where);
