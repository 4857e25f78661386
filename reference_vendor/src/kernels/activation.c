/*
 * activation.c -- activations and their backwards: relu (threshold_backward),
 * sigmoid, tanh, gelu (exact and tanh, precise and fast variants), silu,
 * leaky_relu, elu, softplus, hardtanh, log_sigmoid.
 *
 * Each runs on the elementwise engine (broadcasting, any strides, float16 /
 * bfloat16 computed in float); the formulas are PyTorch's CPU ones so the
 * float32 results agree to an ulp or two.
 */
#include "fl_kernel.h"

#define SQRT1_2 0.70710678118654752440
#define SQRT_2_OVER_PI 0.79788456080286535588
#define INV_SQRT_2PI 0.39894228040143267794
#define GELU_KAPPA 0.044715

#define EXPG(T, x) _Generic((T)0, float: flk_expf, default: exp)(x)

static inline double gelu_tanh_inner(double x) {
    return SQRT_2_OVER_PI * (x + GELU_KAPPA * x * x * x);
}

/* FAST variant (kernel table: FL_VARIANT_FAST): float32 whatever the dtype,
 * branch-free so the loops vectorise (libm's erf/tanh do not).
 *   exact ("none"): 0.5 x erfc(-x/sqrt2) with Abramowitz & Stegun 7.1.26
 *       (|erf error| <= 1.5e-7) written on erfc, so the negative tail keeps
 *       its relative accuracy until exp underflows;
 *   tanh: tanh(u) = 1 - 2 / (exp(2u) + 1) with flk_expf.
 * float64 keeps the precise loops: float32 arithmetic would break float64's
 * bound (errors ~6e-7 against an allowance of 4e-7 + 4e-7 |y|), and a
 * float64 caller asked for float64.
 * Measured against PyTorch's float64 gelu over [-10, 10]: see docs/benchmarks/index.md
 * "Fast kernel variant". */
static inline float gelu_fast_none(float x) {
    const float z = (x < 0.0f ? -x : x) * (float)SQRT1_2;
    const float t = 1.0f / (1.0f + 0.3275911f * z);
    const float poly = t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f +
                       t * (-1.453152027f + t * 1.061405429f))));
    const float tail = poly * flk_expf(-z * z);          /* erfc(z) */
    return 0.5f * x * (x < 0.0f ? tail : 2.0f - tail);
}
static inline float gelu_fast_tanh(float x) {
    float u = 2.0f * (float)SQRT_2_OVER_PI * (x + (float)GELU_KAPPA * x * x * x);
    u = u > 80.0f ? 80.0f : (u < -80.0f ? -80.0f : u);   /* exp stays finite */
    return 0.5f * x * (2.0f - 2.0f / (flk_expf(u) + 1.0f));
}
FLK_EW_LOOP1(l_gelu_fast_f32, float, flk_f32, float, flk_f32, FLK_NOSETUP, gelu_fast_none(a))
FLK_EW_LOOP1(l_gelu_tanh_fast_f32, float, flk_f32, float, flk_f32, FLK_NOSETUP, gelu_fast_tanh(a))

/* forward: a = self */
FLK_DEF1_F(l_gelu, FLK_NOSETUP, (T)0.5 * a * ((T)1 + FLK_G1(erf, a * (T)SQRT1_2)))
FLK_DEF1_F(l_gelu_tanh, FLK_NOSETUP, (T)0.5 * a * ((T)1 + FLK_G1(tanh, (T)gelu_tanh_inner(a))))
FLK_DEF1_F(l_silu, FLK_NOSETUP, a / ((T)1 + EXPG(T, -a)))
FLK_DEF1_F(l_leaky_relu, const T slope = FLK_PARAM(T, 0);, a > (T)0 ? a : a * slope)
FLK_DEF1_F(l_elu, const T alpha = FLK_PARAM(T, 0); const T scale = FLK_PARAM(T, 1);
           const T iscale = FLK_PARAM(T, 2);,
           a > (T)0 ? a * scale : (FLK_G1(expm1, a * iscale)) * alpha * scale)
FLK_DEF1_F(l_softplus, const T beta = FLK_PARAM(T, 0); const T thr = FLK_PARAM(T, 1);,
           a * beta > thr ? a : FLK_G1(log1p, EXPG(T, a * beta)) / beta)
/* clamp's order: max with lo first, then min with hi, so hi wins when the bounds cross
 * (ATen's hardtanh is clamp; only torch.nn.functional checks min_val <= max_val) */
#define CLAMP_LO_HI(a, lo, hi) ((a) < (lo) ? ((lo) > (hi) ? (hi) : (lo)) : ((a) > (hi) ? (hi) : (a)))
FLK_DEF1_F(l_hardtanh, const T lo = FLK_PARAM(T, 0); const T hi = FLK_PARAM(T, 1);,
           CLAMP_LO_HI(a, lo, hi))
FLK_DEF1_I(l_hardtanh, const T lo = FLK_PARAM(T, 0); const T hi = FLK_PARAM(T, 1);,
           CLAMP_LO_HI(a, lo, hi))

/* backward: a = grad_output, b = self (or the result where noted) */
static inline double gelu_grad(double x) {
    const double cdf = 0.5 * (1.0 + erf(x * SQRT1_2));
    return cdf + x * INV_SQRT_2PI * exp(-0.5 * x * x);
}
static inline double gelu_tanh_grad(double x) {
    const double t = tanh(gelu_tanh_inner(x));
    const double dinner = SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_KAPPA * x * x);
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * dinner;
}
FLK_DEF2_F(l_gelu_bw, FLK_NOSETUP, a * (T)gelu_grad(b))
FLK_DEF2_F(l_gelu_tanh_bw, FLK_NOSETUP, a * (T)gelu_tanh_grad(b))
FLK_DEF2_F(l_silu_bw, FLK_NOSETUP, a * ((T)1 / ((T)1 + EXPG(T, -b))) *
                               ((T)1 + b * ((T)1 - (T)1 / ((T)1 + EXPG(T, -b)))))
FLK_DEF2_F(l_leaky_relu_bw, const T slope = FLK_PARAM(T, 0);, b > (T)0 ? a : a * slope)
FLK_DEF2_F(l_softplus_bw, const T beta = FLK_PARAM(T, 0); const T thr = FLK_PARAM(T, 1);,
           b * beta > thr ? a : a * EXPG(T, b * beta) / (EXPG(T, b * beta) + (T)1))
FLK_DEF2_F(l_hardtanh_bw, const T lo = FLK_PARAM(T, 0); const T hi = FLK_PARAM(T, 1);,
           (b <= lo || b >= hi) ? (T)0 : a)
FLK_DEF2_I(l_hardtanh_bw, const T lo = FLK_PARAM(T, 0); const T hi = FLK_PARAM(T, 1);,
           (b <= lo || b >= hi) ? (T)0 : a)
/* elu_backward: params alpha*scale, scale, input_scale */
FLK_DEF2_F(l_elu_bw_x, const T neg = FLK_PARAM(T, 0); const T pos = FLK_PARAM(T, 1);
           const T is = FLK_PARAM(T, 2);,
           b <= (T)0 ? a * is * neg * EXPG(T, b * is) : a * pos)
FLK_DEF2_F(l_elu_bw_y, const T neg = FLK_PARAM(T, 0); const T pos = FLK_PARAM(T, 1);
           const T is = FLK_PARAM(T, 2);,
           b <= (T)0 ? a * is * (b + neg) : a * pos)

/* (self | grad_output, self), scalars at params_at.., out last.  nin tensors
 * first, then nparams scalars named by names. */
static fl_status with_params(const char *op, const fl_arg *args, uint32_t nargs,
                             flk_ctx *ctx, int nin, int nparams,
                             const char *const *names, flk_ew_loops loops) {
    flk_args a;
    flk_ew_call c;
    memset(&c, 0, sizeof c);
    static const char *const in_names[2][2] = {{"self", ""}, {"grad_output", "self"}};
    FLK_TRY(flk_args_init(&a, op, args, nargs, (uint32_t)(nin + nparams + 1), ctx));
    for (int k = 0; k < nin; ++k)
        FLK_TRY(flk_get_operand(&a, (uint32_t)k, in_names[nin - 1][k], &c.in[k]));
    const fl_tensor *self = c.in[nin - 1].t;
    for (int k = 0; k < nparams; ++k) {
        FLK_TRY(flk_get_scalar(&a, (uint32_t)(nin + k), names[k], &c.params[k]));
        c.param_names[k] = names[k];
        /* PyTorch converts the bounds to an integral self's dtype (truncating) */
        flk_scalar *s = &c.params[k];
        if (self && flk_is_integral(self->dtype) && s->kind == FL_ARG_FLOAT)
            *s = (flk_scalar){FL_ARG_INT, trunc(s->f), flk_double_to_i64(s->f)};
    }
    FLK_TRY(flk_get_tensor(&a, (uint32_t)(nin + nparams), "out", &c.out));
    c.nin = nin;
    c.nparams = nparams;
    return flk_ew_run(&a, loops, FLK_EW_NO_BOOL, &c);
}

#define K_PARAMS(FN, OP, NIN, NPARAMS, NAMES, LOOPS) \
    FLK_KERNEL_FN(FN) { return with_params(OP, args, nargs, ctx, NIN, NPARAMS, NAMES, LOOPS); }

static const char *const SLOPE[] = {"negative_slope"};
static const char *const SOFTPLUS[] = {"beta", "threshold"};
static const char *const HARDTANH[] = {"min_val", "max_val"};
static const char *const ELU[] = {"alpha", "scale", "input_scale"};

K_PARAMS(k_leaky_relu, "leaky_relu", 1, 1, SLOPE, FLK_LOOPS_F(l_leaky_relu))
FLK_REGISTER("leaky_relu", FLK_FLOAT_TYPES, k_leaky_relu);
K_PARAMS(k_leaky_relu_, "leaky_relu_", 1, 1, SLOPE, FLK_LOOPS_F(l_leaky_relu))
FLK_REGISTER("leaky_relu_", FLK_FLOAT_TYPES, k_leaky_relu_);
K_PARAMS(k_softplus, "softplus", 1, 2, SOFTPLUS, FLK_LOOPS_F(l_softplus))
FLK_REGISTER("softplus", FLK_FLOAT_TYPES, k_softplus);
K_PARAMS(k_softplus_backward, "softplus_backward", 2, 2, SOFTPLUS, FLK_LOOPS_F(l_softplus_bw))
FLK_REGISTER("softplus_backward", FLK_FLOAT_TYPES, k_softplus_backward);
K_PARAMS(k_hardtanh, "hardtanh", 1, 2, HARDTANH, FLK_LOOPS_FI(l_hardtanh))
FLK_REGISTER("hardtanh", FLK_NUM_TYPES, k_hardtanh);
K_PARAMS(k_hardtanh_, "hardtanh_", 1, 2, HARDTANH, FLK_LOOPS_FI(l_hardtanh))
FLK_REGISTER("hardtanh_", FLK_NUM_TYPES, k_hardtanh_);
K_PARAMS(k_hardtanh_backward, "hardtanh_backward", 2, 2, HARDTANH, FLK_LOOPS_FI(l_hardtanh_bw))
FLK_REGISTER("hardtanh_backward", FLK_FLOAT_TYPES, k_hardtanh_backward);
K_PARAMS(k_elu, "elu", 1, 3, ELU, FLK_LOOPS_F(l_elu))
FLK_REGISTER("elu", FLK_FLOAT_TYPES, k_elu);
K_PARAMS(k_elu_, "elu_", 1, 3, ELU, FLK_LOOPS_F(l_elu))
FLK_REGISTER("elu_", FLK_FLOAT_TYPES, k_elu_);
FLK_EW_UNARY_KERNEL(k_silu, "silu", FLK_LOOPS_F(l_silu), FLK_EW_NO_BOOL | FLK_EW_INT_TO_FLOAT)
FLK_REGISTER("silu", FLK_FLOAT_TYPES, k_silu);
FLK_EW_UNARY_KERNEL(k_silu_, "silu_", FLK_LOOPS_F(l_silu), FLK_EW_NO_BOOL | FLK_EW_INT_TO_FLOAT)
FLK_REGISTER("silu_", FLK_FLOAT_TYPES, k_silu_);
FLK_EW_BINARY_KERNEL(k_silu_backward, "silu_backward", FLK_LOOPS_F(l_silu_bw), FLK_EW_NO_BOOL)
FLK_REGISTER("silu_backward", FLK_FLOAT_TYPES, k_silu_backward);

/* leaky_relu_backward(grad_output, self, negative_slope, self_is_result) */
FLK_KERNEL_FN(k_leaky_relu_backward) {
    flk_args a;
    flk_ew_call c;
    memset(&c, 0, sizeof c);
    FLK_TRY(flk_args_init(&a, "leaky_relu_backward", args, nargs, 5, ctx));
    FLK_TRY(flk_get_operand(&a, 0, "grad_output", &c.in[0]));
    FLK_TRY(flk_get_operand(&a, 1, "self", &c.in[1]));
    FLK_TRY(flk_get_scalar(&a, 2, "negative_slope", &c.params[0]));
    FLK_TRY(flk_get_tensor(&a, 4, "out", &c.out));
    c.nin = 2;
    c.nparams = 1;
    c.param_names[0] = "negative_slope";
    return flk_ew_run(&a, FLK_LOOPS_F(l_leaky_relu_bw), FLK_EW_NO_BOOL, &c);
}
FLK_REGISTER("leaky_relu_backward", FLK_FLOAT_TYPES, k_leaky_relu_backward);

/* elu_backward(grad_output, alpha, scale, input_scale, is_result, self_or_result) */
FLK_KERNEL_FN(k_elu_backward) {
    flk_args a;
    flk_ew_call c;
    memset(&c, 0, sizeof c);
    flk_scalar alpha, scale, iscale;
    int is_result;
    FLK_TRY(flk_args_init(&a, "elu_backward", args, nargs, 7, ctx));
    FLK_TRY(flk_get_operand(&a, 0, "grad_output", &c.in[0]));
    FLK_TRY(flk_get_scalar(&a, 1, "alpha", &alpha));
    FLK_TRY(flk_get_scalar(&a, 2, "scale", &scale));
    FLK_TRY(flk_get_scalar(&a, 3, "input_scale", &iscale));
    FLK_TRY(flk_get_bool(&a, 4, "is_result", &is_result));
    FLK_TRY(flk_get_operand(&a, 5, "self_or_result", &c.in[1]));
    FLK_TRY(flk_get_tensor(&a, 6, "out", &c.out));
    c.nin = 2;
    c.nparams = 3;
    c.params[0] = (flk_scalar){FL_ARG_FLOAT, alpha.f * scale.f, 0};
    c.params[1] = (flk_scalar){FL_ARG_FLOAT, scale.f, 0};
    c.params[2] = (flk_scalar){FL_ARG_FLOAT, iscale.f, 0};
    return flk_ew_run(&a, is_result ? FLK_LOOPS_F(l_elu_bw_y) : FLK_LOOPS_F(l_elu_bw_x), FLK_EW_NO_BOOL, &c);
}
FLK_REGISTER("elu_backward", FLK_FLOAT_TYPES, k_elu_backward);

/* approximate: "none" or "tanh" */
static fl_status gelu_loops(const flk_args *a, uint32_t i, flk_ew_loops exact, flk_ew_loops tanh_,
                            flk_ew_loops *out) {
    const char *approx;
    FLK_TRY(flk_get_string(a, i, "approximate", &approx));
    if (strcmp(approx, "none") == 0)
        *out = exact;
    else if (strcmp(approx, "tanh") == 0)
        *out = tanh_;
    else
        return flk_fail(a, "approximate must be 'none' or 'tanh', got '%s'", approx);
    return FL_SUCCESS;
}

/* gelu(self, approximate) with the given exact / tanh loops */
static fl_status gelu_fwd(const fl_arg *args, uint32_t nargs, flk_ctx *ctx,
                          flk_ew_loops exact, flk_ew_loops tanh_) {
    flk_args a;
    flk_ew_call c;
    flk_ew_loops loops;
    memset(&c, 0, sizeof c);
    FLK_TRY(flk_args_init(&a, "gelu", args, nargs, 3, ctx));
    FLK_TRY(flk_get_operand(&a, 0, "self", &c.in[0]));
    FLK_TRY(gelu_loops(&a, 1, exact, tanh_, &loops));
    FLK_TRY(flk_get_tensor(&a, 2, "out", &c.out));
    c.nin = 1;
    return flk_ew_run(&a, loops, FLK_EW_NO_BOOL, &c);
}

FLK_KERNEL_FN(k_gelu) {
    return gelu_fwd(args, nargs, ctx, FLK_LOOPS_F(l_gelu), FLK_LOOPS_F(l_gelu_tanh));
}
FLK_REGISTER("gelu", FLK_FLOAT_TYPES, k_gelu);

FLK_KERNEL_FN(k_gelu_fast) {
    return gelu_fwd(args, nargs, ctx, (flk_ew_loops){l_gelu_fast_f32, l_gelu_f64, NULL},
                    (flk_ew_loops){l_gelu_tanh_fast_f32, l_gelu_tanh_f64, NULL});
}
/* the fast variant: float32 erf / tanh approximations, float64 stays precise */
FLK_REGISTER_ENTRY("gelu", FLK_FLOAT_TYPES, FL_VARIANT_FAST, k_gelu_fast, NULL);

/* gelu_backward(grad_output, self, approximate) */
FLK_KERNEL_FN(k_gelu_backward) {
    flk_args a;
    flk_ew_call c;
    flk_ew_loops loops;
    memset(&c, 0, sizeof c);
    FLK_TRY(flk_args_init(&a, "gelu_backward", args, nargs, 4, ctx));
    FLK_TRY(flk_get_operand(&a, 0, "grad_output", &c.in[0]));
    FLK_TRY(flk_get_operand(&a, 1, "self", &c.in[1]));
    FLK_TRY(gelu_loops(&a, 2, FLK_LOOPS_F(l_gelu_bw), FLK_LOOPS_F(l_gelu_tanh_bw), &loops));
    FLK_TRY(flk_get_tensor(&a, 3, "out", &c.out));
    c.nin = 2;
    return flk_ew_run(&a, loops, FLK_EW_NO_BOOL, &c);
}
FLK_REGISTER("gelu_backward", FLK_FLOAT_TYPES, k_gelu_backward);

/* log_sigmoid_forward(self) -> (output, buffer = exp(-|x|)), as PyTorch's CPU kernel */
FLK_DEF1_F(l_log_sigmoid, FLK_NOSETUP, (a < (T)0 ? a : (T)0) - FLK_G1(log1p, EXPG(T, -FLK_G1(fabs, a))))
FLK_DEF1_F(l_exp_neg_abs, FLK_NOSETUP, EXPG(T, -FLK_G1(fabs, a)))
FLK_KERNEL_FN(k_log_sigmoid_forward) {
    if (nargs != 3)
        return flk_kernel_fail(ctx, "log_sigmoid_forward: expected 3 arguments (self, output, "
                                    "buffer), got %u", nargs);
    const fl_arg out_args[2] = {args[0], args[1]}, buf_args[2] = {args[0], args[2]};
    FLK_TRY(flk_ew_unary("log_sigmoid_forward", out_args, 2, ctx, FLK_LOOPS_F(l_log_sigmoid),
                         FLK_EW_NO_BOOL));
    return flk_ew_unary("log_sigmoid_forward", buf_args, 2, ctx, FLK_LOOPS_F(l_exp_neg_abs),
                        FLK_EW_NO_BOOL);
}
FLK_REGISTER("log_sigmoid_forward", FLK_FLOAT_TYPES, k_log_sigmoid_forward);

/* log_sigmoid_backward(grad_output, self, buffer): a = grad, b = self (the buffer
 * is recomputed: it is exp(-|self|)) */
FLK_DEF2_F(l_log_sigmoid_bw, FLK_NOSETUP,
           a * ((b < (T)0 ? (T)1 : (T)0) -
            (b < (T)0 ? (T)1 : (T)-1) * (EXPG(T, -FLK_G1(fabs, b)) / ((T)1 + EXPG(T, -FLK_G1(fabs, b))))))
FLK_KERNEL_FN(k_log_sigmoid_backward) {
    if (nargs != 4)
        return flk_kernel_fail(ctx, "log_sigmoid_backward: expected 4 arguments, got %u", nargs);
    const fl_arg bw_args[3] = {args[0], args[1], args[3]};
    return flk_ew_binary("log_sigmoid_backward", bw_args, 3, ctx, FLK_LOOPS_F(l_log_sigmoid_bw),
                         FLK_EW_NO_BOOL);
}
FLK_REGISTER("log_sigmoid_backward", FLK_FLOAT_TYPES, k_log_sigmoid_backward);

/* ---- relu, sigmoid, tanh and their backwards ---------------------------------- */

/* float32 sigmoid / tanh use the vectorisable flk_expf; float64 libm */
static inline float tanh_f32(float x) {
    float ax = x < 0 ? -x : x;
    float z = x * x;
    float small = ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z +
                    1.33314422036e-1f) * z - 3.33332819422e-1f) * z * x + x;
    float t = flk_expf(2.0f * ax);
    float big = 1.0f - 2.0f / (t + 1.0f);
    big = x < 0 ? -big : big;
    return ax < 0.625f ? small : (x != x ? x : big);
}
#define TANH_(T, a) _Generic((T)0, float: tanh_f32, default: tanh)(a)
FLK_DEF1_F(l_sigmoid, FLK_NOSETUP, (T)1 / ((T)1 + EXPG(T, -a)))
FLK_DEF1_F(l_tanh, FLK_NOSETUP, TANH_(T, a))
FLK_DEF1_F(l_relu, FLK_NOSETUP, a < 0 ? (T)0 : a)
FLK_DEF1_I(l_relu, FLK_NOSETUP, a < 0 ? (T)0 : a)
/* a = grad, b = self */
FLK_DEF2_F(l_threshold_bw, const T thr = FLK_PARAM(T, 0);, b <= thr ? (T)0 : a)
FLK_DEF2_I(l_threshold_bw, const T thr = FLK_PARAM(T, 0);, b <= thr ? (T)0 : a)
/* a = grad_output, b = output */
FLK_DEF2_F(l_sigmoid_bw, FLK_NOSETUP, a * ((T)1 - b) * b)
FLK_DEF2_F(l_tanh_bw, FLK_NOSETUP, a * FLK_FMA(T, -b, b, (T)1))

FLK_EW_BINARY_KERNEL(k_sigmoid_backward, "sigmoid_backward", FLK_LOOPS_F(l_sigmoid_bw), FLK_EW_NO_BOOL)
FLK_REGISTER("sigmoid_backward", FLK_FLOAT_TYPES, k_sigmoid_backward);
FLK_EW_BINARY_KERNEL(k_tanh_backward, "tanh_backward", FLK_LOOPS_F(l_tanh_bw), FLK_EW_NO_BOOL)
FLK_REGISTER("tanh_backward", FLK_FLOAT_TYPES, k_tanh_backward);

FLK_EW_UNARY_KERNEL(k_sigmoid, "sigmoid", FLK_LOOPS_F(l_sigmoid), FLK_EW_INT_TO_FLOAT)
FLK_REGISTER("sigmoid", FLK_REAL_TYPES, k_sigmoid);
FLK_EW_UNARY_KERNEL(k_sigmoid_, "sigmoid_", FLK_LOOPS_F(l_sigmoid), FLK_EW_INT_TO_FLOAT)
FLK_REGISTER("sigmoid_", FLK_FLOAT_TYPES, k_sigmoid_);
FLK_EW_UNARY_KERNEL(k_tanh, "tanh", FLK_LOOPS_F(l_tanh), FLK_EW_INT_TO_FLOAT)
FLK_REGISTER("tanh", FLK_REAL_TYPES, k_tanh);
FLK_EW_UNARY_KERNEL(k_tanh_, "tanh_", FLK_LOOPS_F(l_tanh), FLK_EW_INT_TO_FLOAT)
FLK_REGISTER("tanh_", FLK_FLOAT_TYPES, k_tanh_);
FLK_EW_UNARY_KERNEL(k_relu, "relu", FLK_LOOPS_FI(l_relu), FLK_EW_NO_BOOL)
FLK_REGISTER("relu", FLK_NUM_TYPES, k_relu);
FLK_EW_UNARY_KERNEL(k_relu_, "relu_", FLK_LOOPS_FI(l_relu), FLK_EW_NO_BOOL)
FLK_REGISTER("relu_", FLK_NUM_TYPES, k_relu_);

/* threshold_backward(grad_output, self, threshold) */
FLK_KERNEL_FN(k_threshold_backward) {
    flk_args a;
    flk_ew_call c;
    memset(&c, 0, sizeof c);
    FLK_TRY(flk_args_init(&a, "threshold_backward", args, nargs, 4, ctx));
    FLK_TRY(flk_get_operand(&a, 0, "grad_output", &c.in[0]));
    FLK_TRY(flk_get_operand(&a, 1, "self", &c.in[1]));
    FLK_TRY(flk_get_scalar(&a, 2, "threshold", &c.params[0]));
    FLK_TRY(flk_get_tensor(&a, 3, "out", &c.out));
    c.nin = 2;
    c.nparams = 1;
    c.param_names[0] = "threshold";
    c.param_trunc[0] = 1;
    /* PyTorch converts the threshold to the tensors' dtype first: -1 is 255
     * for uint8, 0.1 rounds for float16 */
    int32_t common = flk_result_type(c.in, 2);
    if (common >= 0 && common != FL_BOOL) {
        char v[8];
        flk_scalar *thr = &c.params[0];
        if (flk_is_floating(common)) {
            flk_store_f64(v, common, thr->kind == FL_ARG_FLOAT ? thr->f : (double)thr->i);
            *thr = (flk_scalar){FL_ARG_FLOAT, flk_load_f64(v, common), 0};
        } else {
            flk_store_i64(v, common,
                          thr->kind == FL_ARG_FLOAT ? flk_double_to_i64(thr->f) : thr->i);
            const int64_t i = flk_load_i64(v, common);
            *thr = (flk_scalar){FL_ARG_INT, (double)i, i};
        }
    }
    return flk_ew_run(&a, FLK_LOOPS_FI(l_threshold_bw), FLK_EW_NO_BOOL, &c);
}
FLK_REGISTER("threshold_backward", FLK_NUM_TYPES, k_threshold_backward);
