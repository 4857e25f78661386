/*
 * kernel_table.c -- every kernel the reference chip offers.
 *
 * Keys are ATen overload names ("add.Tensor"; ".default" is written without
 * a suffix, e.g. "mm", "sum").  dtypes is the set of dtypes accepted for the
 * op's main tensor(s) (self / input; for copy_ both sides).  Index and
 * target tensors (max-pool indices, nll targets) are int64 and not part of
 * the mask.  Every kernel re-checks its dtypes and fails with a message for
 * a combination it does not handle.
 */
#include "kernel_util.h"

#define P FL_VARIANT_PRECISE

#define ALL REF_REAL_TYPES                                   /* every dtype but complex */
#define FLT REF_FLOAT_TYPES                                  /* f32 f64 f16 bf16 */
#define NUM (REF_FLOAT_TYPES | REF_INT_TYPES)                /* no bool */
#define F32_64 REF_F32_F64

const ref_kernel_def ref_kernel_defs[] = {
    /* matmul */
    {"mm", F32_64, P, ref_k_mm},
    {"addmm", F32_64, P, ref_k_addmm},
    {"bmm", F32_64, P, ref_k_bmm},

    /* convolution */
    {"convolution", F32_64, P, ref_k_convolution},
    {"convolution_backward", F32_64, P, ref_k_convolution_backward},

    /* pooling */
    {"max_pool2d_with_indices", F32_64, P, ref_k_max_pool2d_with_indices},
    {"max_pool2d_with_indices_backward", F32_64, P, ref_k_max_pool2d_with_indices_backward},

    /* softmax / loss */
    {"_softmax", F32_64, P, ref_k_softmax},
    {"_log_softmax", F32_64, P, ref_k_log_softmax},
    {"_softmax_backward_data", F32_64, P, ref_k_softmax_backward_data},
    {"_log_softmax_backward_data", F32_64, P, ref_k_log_softmax_backward_data},
    {"nll_loss_forward", F32_64, P, ref_k_nll_loss_forward},
    {"nll_loss_backward", F32_64, P, ref_k_nll_loss_backward},

    /* reductions */
    {"sum", ALL, P, ref_k_sum},
    {"sum.dim_IntList", ALL, P, ref_k_sum_dim},
    {"mean", FLT, P, ref_k_mean},
    {"mean.dim", FLT, P, ref_k_mean_dim},
    {"argmax", NUM, P, ref_k_argmax},
    {"max", ALL, P, ref_k_max},
    {"min", ALL, P, ref_k_min},

    /* activations */
    {"relu", NUM, P, ref_k_relu},
    {"relu_", NUM, P, ref_k_relu_},
    {"threshold_backward", NUM, P, ref_k_threshold_backward},
    {"sigmoid_backward", FLT, P, ref_k_sigmoid_backward},
    {"tanh_backward", FLT, P, ref_k_tanh_backward},

    /* binary arithmetic */
    {"add.Tensor", ALL, P, ref_k_add_tensor},
    {"add_.Tensor", ALL, P, ref_k_add__tensor},
    {"add.Scalar", ALL, P, ref_k_add_scalar},
    {"add_.Scalar", ALL, P, ref_k_add__scalar},
    {"sub.Tensor", NUM, P, ref_k_sub_tensor},
    {"sub_.Tensor", NUM, P, ref_k_sub__tensor},
    {"sub.Scalar", NUM, P, ref_k_sub_scalar},
    {"sub_.Scalar", NUM, P, ref_k_sub__scalar},
    {"rsub.Scalar", NUM, P, ref_k_rsub_scalar},
    {"mul.Tensor", ALL, P, ref_k_mul_tensor},
    {"mul_.Tensor", ALL, P, ref_k_mul__tensor},
    {"mul.Scalar", ALL, P, ref_k_mul_scalar},
    {"mul_.Scalar", ALL, P, ref_k_mul__scalar},
    {"div.Tensor", ALL, P, ref_k_div_tensor},
    {"div_.Tensor", FLT, P, ref_k_div__tensor},
    {"div.Scalar", ALL, P, ref_k_div_scalar},
    {"div_.Scalar", FLT, P, ref_k_div__scalar},
    {"maximum", ALL, P, ref_k_maximum},
    {"minimum", ALL, P, ref_k_minimum},

    /* unary */
    {"neg", NUM, P, ref_k_neg},
    {"neg_", NUM, P, ref_k_neg_},
    {"abs", NUM, P, ref_k_abs},
    {"abs_", NUM, P, ref_k_abs_},
    {"exp", ALL, P, ref_k_exp},
    {"exp_", FLT, P, ref_k_exp_},
    {"log", ALL, P, ref_k_log},
    {"log_", FLT, P, ref_k_log_},
    {"sqrt", ALL, P, ref_k_sqrt},
    {"sqrt_", FLT, P, ref_k_sqrt_},
    {"rsqrt", ALL, P, ref_k_rsqrt},
    {"rsqrt_", FLT, P, ref_k_rsqrt_},
    {"reciprocal", ALL, P, ref_k_reciprocal},
    {"sigmoid", ALL, P, ref_k_sigmoid},
    {"sigmoid_", FLT, P, ref_k_sigmoid_},
    {"tanh", ALL, P, ref_k_tanh},
    {"tanh_", FLT, P, ref_k_tanh_},
    {"pow.Tensor_Scalar", NUM, P, ref_k_pow_tensor_scalar},
    {"pow_.Scalar", NUM, P, ref_k_pow__scalar},
    {"clamp", NUM, P, ref_k_clamp},
    {"clamp_", NUM, P, ref_k_clamp_},

    /* ternary */
    {"lerp.Scalar", FLT, P, ref_k_lerp_scalar},
    {"lerp_.Scalar", FLT, P, ref_k_lerp__scalar},
    {"addcmul", NUM, P, ref_k_addcmul},
    {"addcmul_", NUM, P, ref_k_addcmul_},
    {"addcdiv", FLT, P, ref_k_addcdiv},
    {"addcdiv_", FLT, P, ref_k_addcdiv_},
    {"where.self", ALL, P, ref_k_where_self},

    /* comparisons (bool output) */
    {"eq.Tensor", ALL, P, ref_k_eq_tensor},
    {"ne.Tensor", ALL, P, ref_k_ne_tensor},
    {"gt.Tensor", ALL, P, ref_k_gt_tensor},
    {"lt.Tensor", ALL, P, ref_k_lt_tensor},
    {"ge.Tensor", ALL, P, ref_k_ge_tensor},
    {"le.Tensor", ALL, P, ref_k_le_tensor},
    {"eq.Scalar", ALL, P, ref_k_eq_scalar},
    {"ne.Scalar", ALL, P, ref_k_ne_scalar},
    {"gt.Scalar", ALL, P, ref_k_gt_scalar},
    {"lt.Scalar", ALL, P, ref_k_lt_scalar},
    {"ge.Scalar", ALL, P, ref_k_ge_scalar},
    {"le.Scalar", ALL, P, ref_k_le_scalar},

    /* fill / copy */
    {"fill_.Scalar", ALL, P, ref_k_fill__scalar},
    {"zero_", ALL, P, ref_k_zero_},
    {"copy_", ALL, P, ref_k_copy_},

    /* random */
    {"normal_", FLT, P, ref_k_normal_},
    {"uniform_", FLT, P, ref_k_uniform_},
    {"bernoulli_.float", ALL, P, ref_k_bernoulli__float},
};

const uint32_t ref_kernel_def_count =
    (uint32_t)(sizeof ref_kernel_defs / sizeof ref_kernel_defs[0]);
