/*
 * kernels_activation.c -- activations and their backwards: gelu (exact and
 * tanh), silu, leaky_relu, elu, softplus, hardtanh.
 *
 * Each runs on the elementwise engine (broadcasting, any strides, float16 /
 * bfloat16 computed in float); the formulas are PyTorch's CPU ones so the
 * float32 results agree to an ulp or two.
 */
#include "kernels_ew.h"

#define SQRT1_2 0.70710678118654752440
#define SQRT_2_OVER_PI 0.79788456080286535588
#define INV_SQRT_2PI 0.39894228040143267794
#define GELU_KAPPA 0.044715

#define EXPG(T, x) _Generic((T)0, float: ref_expf, default: exp)(x)

static inline double gelu_tanh_inner(double x) {
    return SQRT_2_OVER_PI * (x + GELU_KAPPA * x * x * x);
}

/* FAST variant (kernel table: FL_VARIANT_FAST): float32 whatever the dtype,
 * branch-free so the loops vectorise (libm's erf/tanh do not).
 *   exact ("none"): 0.5 x erfc(-x/sqrt2) with Abramowitz & Stegun 7.1.26
 *       (|erf error| <= 1.5e-7) written on erfc, so the negative tail keeps
 *       its relative accuracy until exp underflows;
 *   tanh: tanh(u) = 1 - 2 / (exp(2u) + 1) with ref_expf.
 * float64 keeps the precise loops: float32 arithmetic would break float64's
 * bound (errors ~6e-7 against an allowance of 4e-7 + 4e-7 |y|), and a
 * float64 caller asked for float64.
 * Measured against PyTorch's float64 gelu over [-10, 10]: see BENCHMARKS.md. */
static inline float gelu_fast_none(float x) {
    const float z = (x < 0.0f ? -x : x) * (float)SQRT1_2;
    const float t = 1.0f / (1.0f + 0.3275911f * z);
    const float poly = t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f +
                       t * (-1.453152027f + t * 1.061405429f))));
    const float tail = poly * ref_expf(-z * z);          /* erfc(z) */
    return 0.5f * x * (x < 0.0f ? tail : 2.0f - tail);
}
static inline float gelu_fast_tanh(float x) {
    float u = 2.0f * (float)SQRT_2_OVER_PI * (x + (float)GELU_KAPPA * x * x * x);
    u = u > 80.0f ? 80.0f : (u < -80.0f ? -80.0f : u);   /* exp stays finite */
    return 0.5f * x * (2.0f - 2.0f / (ref_expf(u) + 1.0f));
}
EW_LOOP1(l_gelu_fast_f32, float, ref_f32, float, ref_f32, NOSETUP, gelu_fast_none(a))
EW_LOOP1(l_gelu_tanh_fast_f32, float, ref_f32, float, ref_f32, NOSETUP, gelu_fast_tanh(a))

/* forward: a = self */
DEF1_F(l_gelu, NOSETUP, (T)0.5 * a * ((T)1 + G1(erf, a * (T)SQRT1_2)))
DEF1_F(l_gelu_tanh, NOSETUP, (T)0.5 * a * ((T)1 + G1(tanh, (T)gelu_tanh_inner(a))))
DEF1_F(l_silu, NOSETUP, a / ((T)1 + EXPG(T, -a)))
DEF1_F(l_leaky_relu, const T slope = PARAM(T, 0);, a > (T)0 ? a : a * slope)
DEF1_F(l_elu, const T alpha = PARAM(T, 0); const T scale = PARAM(T, 1);
       const T iscale = PARAM(T, 2);,
       a > (T)0 ? a * scale : (G1(expm1, a * iscale)) * alpha * scale)
DEF1_F(l_softplus, const T beta = PARAM(T, 0); const T thr = PARAM(T, 1);,
       a * beta > thr ? a : G1(log1p, EXPG(T, a * beta)) / beta)
/* clamp's order: max with lo first, then min with hi, so hi wins when the bounds cross
 * (ATen's hardtanh is clamp; only torch.nn.functional checks min_val <= max_val) */
#define CLAMP_LO_HI(a, lo, hi) ((a) < (lo) ? ((lo) > (hi) ? (hi) : (lo)) : ((a) > (hi) ? (hi) : (a)))
DEF1_F(l_hardtanh, const T lo = PARAM(T, 0); const T hi = PARAM(T, 1);,
       CLAMP_LO_HI(a, lo, hi))
DEF1_I(l_hardtanh, const T lo = PARAM(T, 0); const T hi = PARAM(T, 1);,
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
DEF2_F(l_gelu_bw, NOSETUP, a * (T)gelu_grad(b))
DEF2_F(l_gelu_tanh_bw, NOSETUP, a * (T)gelu_tanh_grad(b))
DEF2_F(l_silu_bw, NOSETUP, a * ((T)1 / ((T)1 + EXPG(T, -b))) *
                               ((T)1 + b * ((T)1 - (T)1 / ((T)1 + EXPG(T, -b)))))
DEF2_F(l_leaky_relu_bw, const T slope = PARAM(T, 0);, b > (T)0 ? a : a * slope)
DEF2_F(l_softplus_bw, const T beta = PARAM(T, 0); const T thr = PARAM(T, 1);,
       b * beta > thr ? a : a * EXPG(T, b * beta) / (EXPG(T, b * beta) + (T)1))
DEF2_F(l_hardtanh_bw, const T lo = PARAM(T, 0); const T hi = PARAM(T, 1);,
       (b <= lo || b >= hi) ? (T)0 : a)
DEF2_I(l_hardtanh_bw, const T lo = PARAM(T, 0); const T hi = PARAM(T, 1);,
       (b <= lo || b >= hi) ? (T)0 : a)
/* elu_backward: params alpha*scale, scale, input_scale */
DEF2_F(l_elu_bw_x, const T neg = PARAM(T, 0); const T pos = PARAM(T, 1);
       const T is = PARAM(T, 2);,
       b <= (T)0 ? a * is * neg * EXPG(T, b * is) : a * pos)
DEF2_F(l_elu_bw_y, const T neg = PARAM(T, 0); const T pos = PARAM(T, 1);
       const T is = PARAM(T, 2);,
       b <= (T)0 ? a * is * (b + neg) : a * pos)

/* (self | grad_output, self), scalars at params_at.., out last.  nin tensors
 * first, then nparams scalars named by names. */
static fl_status with_params(const char *op, const fl_arg *args, uint32_t nargs,
                             ref_kernel_ctx *ctx, int nin, int nparams,
                             const char *const *names, ew_loops loops) {
    ref_args a;
    ew_call c;
    memset(&c, 0, sizeof c);
    static const char *const in_names[2][2] = {{"self", ""}, {"grad_output", "self"}};
    REF_TRY(ref_args_init(&a, op, args, nargs, (uint32_t)(nin + nparams + 1), ctx));
    for (int k = 0; k < nin; ++k)
        REF_TRY(ref_get_operand(&a, (uint32_t)k, in_names[nin - 1][k], &c.in[k]));
    const fl_tensor *self = c.in[nin - 1].t;
    for (int k = 0; k < nparams; ++k) {
        REF_TRY(ref_get_scalar(&a, (uint32_t)(nin + k), names[k], &c.params[k]));
        c.param_names[k] = names[k];
        /* PyTorch converts the bounds to an integral self's dtype (truncating) */
        ref_scalar *s = &c.params[k];
        if (self && ref_is_integral(self->dtype) && s->kind == FL_ARG_FLOAT)
            *s = (ref_scalar){FL_ARG_INT, trunc(s->f), ref_double_to_i64(s->f)};
    }
    REF_TRY(ref_get_tensor(&a, (uint32_t)(nin + nparams), "out", &c.out));
    c.nin = nin;
    c.nparams = nparams;
    return ref_ew_run(&a, loops, EW_NO_BOOL, &c);
}

#define K_PARAMS(FN, OP, NIN, NPARAMS, NAMES, LOOPS) \
    REF_KERNEL(FN) { return with_params(OP, args, nargs, ctx, NIN, NPARAMS, NAMES, LOOPS); }

static const char *const SLOPE[] = {"negative_slope"};
static const char *const SOFTPLUS[] = {"beta", "threshold"};
static const char *const HARDTANH[] = {"min_val", "max_val"};
static const char *const ELU[] = {"alpha", "scale", "input_scale"};

K_PARAMS(ref_k_leaky_relu, "leaky_relu", 1, 1, SLOPE, LOOPS_F(l_leaky_relu))
K_PARAMS(ref_k_leaky_relu_, "leaky_relu_", 1, 1, SLOPE, LOOPS_F(l_leaky_relu))
K_PARAMS(ref_k_softplus, "softplus", 1, 2, SOFTPLUS, LOOPS_F(l_softplus))
K_PARAMS(ref_k_softplus_backward, "softplus_backward", 2, 2, SOFTPLUS, LOOPS_F(l_softplus_bw))
K_PARAMS(ref_k_hardtanh, "hardtanh", 1, 2, HARDTANH, LOOPS_FI(l_hardtanh))
K_PARAMS(ref_k_hardtanh_, "hardtanh_", 1, 2, HARDTANH, LOOPS_FI(l_hardtanh))
K_PARAMS(ref_k_hardtanh_backward, "hardtanh_backward", 2, 2, HARDTANH, LOOPS_FI(l_hardtanh_bw))
K_PARAMS(ref_k_elu, "elu", 1, 3, ELU, LOOPS_F(l_elu))
K_PARAMS(ref_k_elu_, "elu_", 1, 3, ELU, LOOPS_F(l_elu))
K_UNARY(ref_k_silu, "silu", LOOPS_F(l_silu), EW_NO_BOOL | EW_INT_TO_FLOAT)
K_UNARY(ref_k_silu_, "silu_", LOOPS_F(l_silu), EW_NO_BOOL | EW_INT_TO_FLOAT)
K_BINARY(ref_k_silu_backward, "silu_backward", LOOPS_F(l_silu_bw), EW_NO_BOOL)

/* leaky_relu_backward(grad_output, self, negative_slope, self_is_result) */
REF_KERNEL(ref_k_leaky_relu_backward) {
    ref_args a;
    ew_call c;
    memset(&c, 0, sizeof c);
    REF_TRY(ref_args_init(&a, "leaky_relu_backward", args, nargs, 5, ctx));
    REF_TRY(ref_get_operand(&a, 0, "grad_output", &c.in[0]));
    REF_TRY(ref_get_operand(&a, 1, "self", &c.in[1]));
    REF_TRY(ref_get_scalar(&a, 2, "negative_slope", &c.params[0]));
    REF_TRY(ref_get_tensor(&a, 4, "out", &c.out));
    c.nin = 2;
    c.nparams = 1;
    c.param_names[0] = "negative_slope";
    return ref_ew_run(&a, LOOPS_F(l_leaky_relu_bw), EW_NO_BOOL, &c);
}

/* elu_backward(grad_output, alpha, scale, input_scale, is_result, self_or_result) */
REF_KERNEL(ref_k_elu_backward) {
    ref_args a;
    ew_call c;
    memset(&c, 0, sizeof c);
    ref_scalar alpha, scale, iscale;
    int is_result;
    REF_TRY(ref_args_init(&a, "elu_backward", args, nargs, 7, ctx));
    REF_TRY(ref_get_operand(&a, 0, "grad_output", &c.in[0]));
    REF_TRY(ref_get_scalar(&a, 1, "alpha", &alpha));
    REF_TRY(ref_get_scalar(&a, 2, "scale", &scale));
    REF_TRY(ref_get_scalar(&a, 3, "input_scale", &iscale));
    REF_TRY(ref_get_bool(&a, 4, "is_result", &is_result));
    REF_TRY(ref_get_operand(&a, 5, "self_or_result", &c.in[1]));
    REF_TRY(ref_get_tensor(&a, 6, "out", &c.out));
    c.nin = 2;
    c.nparams = 3;
    c.params[0] = (ref_scalar){FL_ARG_FLOAT, alpha.f * scale.f, 0};
    c.params[1] = (ref_scalar){FL_ARG_FLOAT, scale.f, 0};
    c.params[2] = (ref_scalar){FL_ARG_FLOAT, iscale.f, 0};
    return ref_ew_run(&a, is_result ? LOOPS_F(l_elu_bw_y) : LOOPS_F(l_elu_bw_x), EW_NO_BOOL, &c);
}

/* approximate: "none" or "tanh" */
static fl_status gelu_loops(const ref_args *a, uint32_t i, ew_loops exact, ew_loops tanh_,
                            ew_loops *out) {
    const char *approx;
    REF_TRY(ref_get_string(a, i, "approximate", &approx));
    if (strcmp(approx, "none") == 0)
        *out = exact;
    else if (strcmp(approx, "tanh") == 0)
        *out = tanh_;
    else
        return ref_fail(a, "approximate must be 'none' or 'tanh', got '%s'", approx);
    return FL_SUCCESS;
}

/* gelu(self, approximate) with the given exact / tanh loops */
static fl_status gelu_fwd(const fl_arg *args, uint32_t nargs, ref_kernel_ctx *ctx,
                          ew_loops exact, ew_loops tanh_) {
    ref_args a;
    ew_call c;
    ew_loops loops;
    memset(&c, 0, sizeof c);
    REF_TRY(ref_args_init(&a, "gelu", args, nargs, 3, ctx));
    REF_TRY(ref_get_operand(&a, 0, "self", &c.in[0]));
    REF_TRY(gelu_loops(&a, 1, exact, tanh_, &loops));
    REF_TRY(ref_get_tensor(&a, 2, "out", &c.out));
    c.nin = 1;
    return ref_ew_run(&a, loops, EW_NO_BOOL, &c);
}

REF_KERNEL(ref_k_gelu) {
    return gelu_fwd(args, nargs, ctx, LOOPS_F(l_gelu), LOOPS_F(l_gelu_tanh));
}

REF_KERNEL(ref_k_gelu_fast) {
    return gelu_fwd(args, nargs, ctx, (ew_loops){l_gelu_fast_f32, l_gelu_f64, NULL},
                    (ew_loops){l_gelu_tanh_fast_f32, l_gelu_tanh_f64, NULL});
}

/* gelu_backward(grad_output, self, approximate) */
REF_KERNEL(ref_k_gelu_backward) {
    ref_args a;
    ew_call c;
    ew_loops loops;
    memset(&c, 0, sizeof c);
    REF_TRY(ref_args_init(&a, "gelu_backward", args, nargs, 4, ctx));
    REF_TRY(ref_get_operand(&a, 0, "grad_output", &c.in[0]));
    REF_TRY(ref_get_operand(&a, 1, "self", &c.in[1]));
    REF_TRY(gelu_loops(&a, 2, LOOPS_F(l_gelu_bw), LOOPS_F(l_gelu_tanh_bw), &loops));
    REF_TRY(ref_get_tensor(&a, 3, "out", &c.out));
    c.nin = 2;
    return ref_ew_run(&a, loops, EW_NO_BOOL, &c);
}

/* native_dropout_backward(grad_output, mask, scale): grad * mask * scale */
DEF2_F(l_masked_scale, const T s = PARAM(T, 0);, a * b * s)
REF_KERNEL(ref_k_native_dropout_backward) {
    static const char *const SCALE[] = {"scale"};
    return with_params("native_dropout_backward", args, nargs, ctx, 2, 1, SCALE,
                       LOOPS_F(l_masked_scale));
}

/* log_sigmoid_forward(self) -> (output, buffer = exp(-|x|)), as PyTorch's CPU kernel */
DEF1_F(l_log_sigmoid, NOSETUP, (a < (T)0 ? a : (T)0) - G1(log1p, EXPG(T, -G1(fabs, a))))
DEF1_F(l_exp_neg_abs, NOSETUP, EXPG(T, -G1(fabs, a)))
REF_KERNEL(ref_k_log_sigmoid_forward) {
    if (nargs != 3)
        return ref_kernel_fail(ctx, "log_sigmoid_forward: expected 3 arguments (self, output, "
                                    "buffer), got %u", nargs);
    const fl_arg out_args[2] = {args[0], args[1]}, buf_args[2] = {args[0], args[2]};
    REF_TRY(ref_ew_unary("log_sigmoid_forward", out_args, 2, ctx, LOOPS_F(l_log_sigmoid),
                         EW_NO_BOOL));
    return ref_ew_unary("log_sigmoid_forward", buf_args, 2, ctx, LOOPS_F(l_exp_neg_abs),
                        EW_NO_BOOL);
}

/* log_sigmoid_backward(grad_output, self, buffer): a = grad, b = self (the buffer
 * is recomputed: it is exp(-|self|)) */
DEF2_F(l_log_sigmoid_bw, NOSETUP,
       a * ((b < (T)0 ? (T)1 : (T)0) -
            (b < (T)0 ? (T)1 : (T)-1) * (EXPG(T, -G1(fabs, b)) / ((T)1 + EXPG(T, -G1(fabs, b))))))
REF_KERNEL(ref_k_log_sigmoid_backward) {
    if (nargs != 4)
        return ref_kernel_fail(ctx, "log_sigmoid_backward: expected 4 arguments, got %u", nargs);
    const fl_arg bw_args[3] = {args[0], args[1], args[3]};
    return ref_ew_binary("log_sigmoid_backward", bw_args, 3, ctx, LOOPS_F(l_log_sigmoid_bw),
                         EW_NO_BOOL);
}
