/*
 * arithmetic.c -- pointwise arithmetic on the elementwise engine (fl_kernel.h):
 * add / sub (with alpha) / rsub / mul / div in their Tensor, Scalar and
 * in-place overloads, maximum / minimum, lerp, addcmul / addcdiv.
 *
 * Inputs broadcast to the output's shape, scalars are accepted in any tensor
 * slot, the computation dtype is PyTorch's result_type of the inputs
 * (integral results of div compute in float32), and inputs and outputs of
 * another dtype are cast in chunks.  In-place overloads share the
 * out-of-place code: the trailing output argument is self.
 */
#include "fl_kernel.h"

/* binary arithmetic.  Where PyTorch's vectorised CPU kernels fuse a multiply
 * and an add (add/sub with alpha, addcmul, lerp) an explicit fma gives
 * bit-identical results on FMA hardware. */
FLK_DEF2_F(l_add, const T alpha = FLK_PARAM(T, 0);, FLK_FMA(T, alpha, b, a))
FLK_DEF2_I(l_add, const T alpha = FLK_PARAM(T, 0);, FLK_IADD(a, FLK_IMUL(alpha, b)))
FLK_DEF2_F(l_sub, const T nalpha = -FLK_PARAM(T, 0);, FLK_FMA(T, nalpha, b, a))
FLK_DEF2_I(l_sub, const T alpha = FLK_PARAM(T, 0);, FLK_ISUB(a, FLK_IMUL(alpha, b)))
FLK_DEF2_F(l_mul, FLK_NOSETUP, a * b)
FLK_DEF2_I(l_mul, FLK_NOSETUP, FLK_IMUL(a, b))
FLK_DEF2_F(l_div, FLK_NOSETUP, a / b)
FLK_DEF2_F(l_maximum, FLK_NOSETUP, (a != a) ? a : ((b != b) ? b : (a < b ? b : a)))
FLK_DEF2_I(l_maximum, FLK_NOSETUP, a < b ? b : a)
FLK_DEF2_F(l_minimum, FLK_NOSETUP, (a != a) ? a : ((b != b) ? b : (b < a ? b : a)))
FLK_DEF2_I(l_minimum, FLK_NOSETUP, b < a ? b : a)

/* ternary: a = self, b = tensor1/end, c = tensor2 */
FLK_DEF3_F(l_addcmul, const T v = FLK_PARAM(T, 0);, FLK_FMA(T, v * b, c, a))
FLK_DEF3_I(l_addcmul, const T v = FLK_PARAM(T, 0);, FLK_IADD(a, FLK_IMUL(FLK_IMUL(v, b), c)))
FLK_DEF3_F(l_addcdiv, const T v = FLK_PARAM(T, 0);, a + v * b / c)

/* lerp: two-branch formula, as PyTorch's vectorised kernel (one fma) */
FLK_DEF2_F(l_lerp, const T w = FLK_PARAM(T, 0); const int small = FLK_G1(fabs, w) < (T)0.5;
           const T coeff = small ? w : w - (T)1;,
           FLK_FMA(T, coeff, b - a, small ? a : b))

/* (self, other, alpha, out) */
static fl_status binary_alpha(const char *op, const fl_arg *args, uint32_t nargs,
                              flk_ctx *ctx, flk_ew_loops loops, int reversed,
                              unsigned flags) {
    flk_args a;
    flk_ew_call c;
    memset(&c, 0, sizeof c);
    FLK_TRY(flk_args_init(&a, op, args, nargs, 4, ctx));
    FLK_TRY(flk_get_operand(&a, reversed ? 1 : 0, reversed ? "other" : "self", &c.in[0]));
    FLK_TRY(flk_get_operand(&a, reversed ? 0 : 1, reversed ? "self" : "other", &c.in[1]));
    FLK_TRY(flk_get_scalar(&a, 2, "alpha", &c.params[0]));
    FLK_TRY(flk_get_tensor(&a, 3, "out", &c.out));
    c.nin = 2;
    c.nparams = 1;
    c.param_names[0] = "alpha";
    return flk_ew_run(&a, loops, flags, &c);
}

#define K_BINARY_ALPHA(FN, OPNAME, LOOPS, REV, FLAGS) \
    FLK_KERNEL_FN(FN) { return binary_alpha(OPNAME, args, nargs, ctx, LOOPS, REV, FLAGS); }

#define OPM FLK_EW_SCALAR_OPMATH
K_BINARY_ALPHA(k_add_tensor, "add.Tensor", FLK_LOOPS_FI(l_add), 0, 0)
FLK_REGISTER("add.Tensor", FLK_REAL_TYPES, k_add_tensor);
K_BINARY_ALPHA(k_add__tensor, "add_.Tensor", FLK_LOOPS_FI(l_add), 0, 0)
FLK_REGISTER("add_.Tensor", FLK_REAL_TYPES, k_add__tensor);
K_BINARY_ALPHA(k_add_scalar, "add.Scalar", FLK_LOOPS_FI(l_add), 0, 0)
FLK_REGISTER("add.Scalar", FLK_REAL_TYPES, k_add_scalar);
K_BINARY_ALPHA(k_add__scalar, "add_.Scalar", FLK_LOOPS_FI(l_add), 0, 0)
FLK_REGISTER("add_.Scalar", FLK_REAL_TYPES, k_add__scalar);
K_BINARY_ALPHA(k_sub_tensor, "sub.Tensor", FLK_LOOPS_FI(l_sub), 0, FLK_EW_NO_BOOL)
FLK_REGISTER("sub.Tensor", FLK_NUM_TYPES, k_sub_tensor);
K_BINARY_ALPHA(k_sub__tensor, "sub_.Tensor", FLK_LOOPS_FI(l_sub), 0, FLK_EW_NO_BOOL)
FLK_REGISTER("sub_.Tensor", FLK_NUM_TYPES, k_sub__tensor);
K_BINARY_ALPHA(k_sub_scalar, "sub.Scalar", FLK_LOOPS_FI(l_sub), 0, FLK_EW_NO_BOOL)
FLK_REGISTER("sub.Scalar", FLK_NUM_TYPES, k_sub_scalar);
K_BINARY_ALPHA(k_sub__scalar, "sub_.Scalar", FLK_LOOPS_FI(l_sub), 0, FLK_EW_NO_BOOL)
FLK_REGISTER("sub_.Scalar", FLK_NUM_TYPES, k_sub__scalar);
K_BINARY_ALPHA(k_rsub_scalar, "rsub.Scalar", FLK_LOOPS_FI(l_sub), 1, FLK_EW_NO_BOOL)
FLK_REGISTER("rsub.Scalar", FLK_NUM_TYPES, k_rsub_scalar);

FLK_EW_BINARY_KERNEL(k_mul_tensor, "mul.Tensor", FLK_LOOPS_FI(l_mul), OPM)
FLK_REGISTER("mul.Tensor", FLK_REAL_TYPES, k_mul_tensor);
FLK_EW_BINARY_KERNEL(k_mul__tensor, "mul_.Tensor", FLK_LOOPS_FI(l_mul), OPM)
FLK_REGISTER("mul_.Tensor", FLK_REAL_TYPES, k_mul__tensor);
FLK_EW_BINARY_KERNEL(k_mul_scalar, "mul.Scalar", FLK_LOOPS_FI(l_mul), OPM)
FLK_REGISTER("mul.Scalar", FLK_REAL_TYPES, k_mul_scalar);
FLK_EW_BINARY_KERNEL(k_mul__scalar, "mul_.Scalar", FLK_LOOPS_FI(l_mul), OPM)
FLK_REGISTER("mul_.Scalar", FLK_REAL_TYPES, k_mul__scalar);
FLK_EW_BINARY_KERNEL(k_div_tensor, "div.Tensor", FLK_LOOPS_F(l_div), FLK_EW_INT_TO_FLOAT | OPM)
FLK_REGISTER("div.Tensor", FLK_REAL_TYPES, k_div_tensor);
FLK_EW_BINARY_KERNEL(k_div__tensor, "div_.Tensor", FLK_LOOPS_F(l_div), FLK_EW_INT_TO_FLOAT | OPM)
FLK_REGISTER("div_.Tensor", FLK_FLOAT_TYPES, k_div__tensor);
FLK_EW_BINARY_KERNEL(k_div_scalar, "div.Scalar", FLK_LOOPS_F(l_div), FLK_EW_INT_TO_FLOAT | OPM)
FLK_REGISTER("div.Scalar", FLK_REAL_TYPES, k_div_scalar);
FLK_EW_BINARY_KERNEL(k_div__scalar, "div_.Scalar", FLK_LOOPS_F(l_div), FLK_EW_INT_TO_FLOAT | OPM)
FLK_REGISTER("div_.Scalar", FLK_FLOAT_TYPES, k_div__scalar);
FLK_EW_BINARY_KERNEL(k_maximum, "maximum", FLK_LOOPS_FI(l_maximum), 0)
FLK_REGISTER("maximum", FLK_REAL_TYPES, k_maximum);
FLK_EW_BINARY_KERNEL(k_minimum, "minimum", FLK_LOOPS_FI(l_minimum), 0)
FLK_REGISTER("minimum", FLK_REAL_TYPES, k_minimum);

/* lerp.Scalar(self, end, weight) */
static fl_status lerp_impl(const char *op, const fl_arg *args, uint32_t nargs,
                           flk_ctx *ctx) {
    flk_args a;
    flk_ew_call c;
    memset(&c, 0, sizeof c);
    FLK_TRY(flk_args_init(&a, op, args, nargs, 4, ctx));
    FLK_TRY(flk_get_operand(&a, 0, "self", &c.in[0]));
    FLK_TRY(flk_get_operand(&a, 1, "end", &c.in[1]));
    FLK_TRY(flk_get_scalar(&a, 2, "weight", &c.params[0]));
    FLK_TRY(flk_get_tensor(&a, 3, "out", &c.out));
    c.nin = 2;
    c.nparams = 1;
    c.param_names[0] = "weight";
    return flk_ew_run(&a, FLK_LOOPS_F(l_lerp), FLK_EW_NO_BOOL, &c);
}
FLK_KERNEL_FN(k_lerp_scalar) { return lerp_impl("lerp.Scalar", args, nargs, ctx); }
FLK_REGISTER("lerp.Scalar", FLK_FLOAT_TYPES, k_lerp_scalar);
FLK_KERNEL_FN(k_lerp__scalar) { return lerp_impl("lerp_.Scalar", args, nargs, ctx); }
FLK_REGISTER("lerp_.Scalar", FLK_FLOAT_TYPES, k_lerp__scalar);

/* addcmul / addcdiv (self, tensor1, tensor2, *, value) */
static fl_status addc_impl(const char *op, const fl_arg *args, uint32_t nargs,
                           flk_ctx *ctx, flk_ew_loops loops, int is_div) {
    flk_args a;
    flk_ew_call c;
    memset(&c, 0, sizeof c);
    FLK_TRY(flk_args_init(&a, op, args, nargs, 5, ctx));
    FLK_TRY(flk_get_operand(&a, 0, "self", &c.in[0]));
    FLK_TRY(flk_get_operand(&a, 1, "tensor1", &c.in[1]));
    FLK_TRY(flk_get_operand(&a, 2, "tensor2", &c.in[2]));
    FLK_TRY(flk_get_scalar(&a, 3, "value", &c.params[0]));
    FLK_TRY(flk_get_tensor(&a, 4, "out", &c.out));
    c.nin = 3;
    c.nparams = 1;
    c.param_names[0] = "value";
    if (is_div) {
        int32_t common = flk_result_type(c.in, 3);
        if (common >= 0 && !flk_is_floating(common))
            return flk_fail(&a, "integer division with addcdiv is not supported (dtype %s)",
                            flk_dtype_name(common));
    }
    return flk_ew_run(&a, loops, FLK_EW_NO_BOOL, &c);
}
FLK_KERNEL_FN(k_addcmul) { return addc_impl("addcmul", args, nargs, ctx, FLK_LOOPS_FI(l_addcmul), 0); }
FLK_REGISTER("addcmul", FLK_NUM_TYPES, k_addcmul);
FLK_KERNEL_FN(k_addcmul_) { return addc_impl("addcmul_", args, nargs, ctx, FLK_LOOPS_FI(l_addcmul), 0); }
FLK_REGISTER("addcmul_", FLK_NUM_TYPES, k_addcmul_);
FLK_KERNEL_FN(k_addcdiv) { return addc_impl("addcdiv", args, nargs, ctx, FLK_LOOPS_F(l_addcdiv), 1); }
FLK_REGISTER("addcdiv", FLK_FLOAT_TYPES, k_addcdiv);
FLK_KERNEL_FN(k_addcdiv_) { return addc_impl("addcdiv_", args, nargs, ctx, FLK_LOOPS_F(l_addcdiv), 1); }
FLK_REGISTER("addcdiv_", FLK_FLOAT_TYPES, k_addcdiv_);
