/*
 * kernel_table.c -- every kernel the reference chip offers.
 *
 * Keys are ATen overload names ("add.Tensor"; ".default" is written without
 * a suffix, e.g. "mm", "sum").  dtypes is the set of dtypes accepted for the
 * op's main tensor(s) (self / input; for copy_ both sides).  Index and
 * target tensors (max-pool indices, nll targets) are int64 and not part of
 * the mask.  Every kernel re-checks its dtypes and fails with a message for
 * a combination it does not handle.  The optional fifth field (accepts) is a
 * launch-time check that declines, with FL_ERROR_NOT_SUPPORTED, well-formed
 * calls the kernel cannot compute (3-d / transposed convolution), so they run
 * through the runtime's fallback instead of failing on the stream.
 */
#include "kernel_util.h"

/* Most entries leave ref_kernel_def.accepts out (NULL: no launch-time check). */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

#define P FL_VARIANT_PRECISE

#define ALL REF_REAL_TYPES                                   /* every dtype but complex */
#define FLT REF_FLOAT_TYPES                                  /* f32 f64 f16 bf16 */
#define NUM (REF_FLOAT_TYPES | REF_INT_TYPES)                /* no bool */
#define ALLNI (ALL & ~REF_DT(FL_INT64))                     /* exact in float64 */
#define INTB (REF_INT_TYPES | REF_DT(FL_BOOL))                /* bitwise ops */

const ref_kernel_def ref_kernel_defs[] = {
    /* matmul (float16/bfloat16 through float32 copies: kernels_half.c) */
    {"mm", FLT, P, ref_k_mm_any},
    {"addmm", FLT, P, ref_k_addmm_any},
    {"bmm", FLT, P, ref_k_bmm_any},
    {"baddbmm", FLT, P, ref_k_baddbmm_any},

    /* convolution */
    {"convolution", FLT, P, ref_k_convolution_any, ref_accept_convolution},
    {"convolution_backward", FLT, P, ref_k_convolution_backward_any,
     ref_accept_convolution_backward},

    /* pooling */
    {"max_pool2d_with_indices", FLT, P, ref_k_max_pool2d_with_indices_any},
    {"max_pool2d_with_indices_backward", FLT, P, ref_k_max_pool2d_with_indices_backward_any},
    {"avg_pool2d", FLT, P, ref_k_avg_pool2d},
    {"avg_pool2d_backward", FLT, P, ref_k_avg_pool2d_backward},

    /* normalisation (packed float64 compute: every float dtype) */
    {"native_layer_norm", FLT, P, ref_k_native_layer_norm},
    {"native_layer_norm_backward", FLT, P, ref_k_native_layer_norm_backward},
    {"native_group_norm", FLT, P, ref_k_native_group_norm},
    {"native_group_norm_backward", FLT, P, ref_k_native_group_norm_backward},
    {"native_batch_norm", FLT, P, ref_k_native_batch_norm},
    {"native_batch_norm_backward", FLT, P, ref_k_native_batch_norm_backward},

    /* softmax / loss */
    {"_softmax", FLT, P, ref_k_softmax_any},
    {"_log_softmax", FLT, P, ref_k_log_softmax_any},
    {"_softmax_backward_data", FLT, P, ref_k_softmax_backward_data_any},
    {"_log_softmax_backward_data", FLT, P, ref_k_log_softmax_backward_data_any},
    {"nll_loss_forward", FLT, P, ref_k_nll_loss_forward_any},
    {"nll_loss_backward", FLT, P, ref_k_nll_loss_backward_any},

    /* reductions */
    {"sum", ALL, P, ref_k_sum},
    {"sum.dim_IntList", ALL, P, ref_k_sum_dim},
    {"sum.IntList_out", ALL, P, ref_k_sum_intlist_out},
    {"mean", FLT, P, ref_k_mean},
    {"mean.dim", FLT, P, ref_k_mean_dim},
    {"argmax", NUM, P, ref_k_argmax},
    {"max", ALL, P, ref_k_max},
    {"min", ALL, P, ref_k_min},

    /* pointwise losses */
    {"mse_loss", FLT, P, ref_k_mse_loss},
    {"mse_loss_backward", FLT, P, ref_k_mse_loss_backward},
    {"binary_cross_entropy", FLT, P, ref_k_binary_cross_entropy},
    {"binary_cross_entropy_backward", FLT, P, ref_k_binary_cross_entropy_backward},
    {"smooth_l1_loss", FLT, P, ref_k_smooth_l1_loss},
    {"smooth_l1_loss_backward", FLT, P, ref_k_smooth_l1_loss_backward},
    {"huber_loss", FLT, P, ref_k_huber_loss},
    {"huber_loss_backward", FLT, P, ref_k_huber_loss_backward},
    {"log_sigmoid_forward", FLT, P, ref_k_log_sigmoid_forward},
    {"log_sigmoid_backward", FLT, P, ref_k_log_sigmoid_backward},

    /* reductions on packed float64 rows (no int64: beyond 2^53 it would round) */
    {"all", ALLNI, P, ref_k_all},
    {"any", ALLNI, P, ref_k_any},
    {"all.dim", ALLNI, P, ref_k_all_dim},
    {"any.dim", ALLNI, P, ref_k_any_dim},
    {"all.dims", ALLNI, P, ref_k_all_dims},
    {"any.dims", ALLNI, P, ref_k_any_dims},
    {"amax", ALLNI, P, ref_k_amax},
    {"amin", ALLNI, P, ref_k_amin},
    {"max.dim", ALLNI, P, ref_k_max_dim},
    {"min.dim", ALLNI, P, ref_k_min_dim},
    {"argmin", NUM & ~REF_DT(FL_INT64), P, ref_k_argmin}, /* exact in float64 */
    {"var.correction", FLT, P, ref_k_var_correction},
    {"std.correction", FLT, P, ref_k_std_correction},
    {"var_mean.correction", FLT, P, ref_k_var_mean_correction},
    {"std_mean.correction", FLT, P, ref_k_std_mean_correction},
    {"linalg_vector_norm", FLT, P, ref_k_linalg_vector_norm},
    {"prod", FLT, P, ref_k_prod},
    {"prod.dim_int", FLT, P, ref_k_prod_dim_int},
    {"cumsum", FLT, P, ref_k_cumsum},

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
    {"where.self_out", ALL, P, ref_k_where_self_out},

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

    /* indexing */
    {"gather", ALL, P, ref_k_gather},
    {"scatter.src", ALL, P, ref_k_scatter_src},
    {"scatter_.src", ALL, P, ref_k_scatter__src},
    {"scatter.value", ALL, P, ref_k_scatter_value},
    {"scatter_.value", ALL, P, ref_k_scatter__value},
    {"scatter_add", ALL, P, ref_k_scatter_add},
    {"scatter_add_", ALL, P, ref_k_scatter_add_},
    {"index_select", ALL, P, ref_k_index_select},
    {"index_add", FLT, P, ref_k_index_add},
    {"index_add_", FLT, P, ref_k_index_add_},
    {"cat", ALL, P, ref_k_cat},
    {"index.Tensor", ALL, P, ref_k_index_tensor},
    {"_index_put_impl_", ALL, P, ref_k_index_put_impl_},
    {"embedding_dense_backward", FLT, P, ref_k_embedding_dense_backward},
    {"flip", ALL, P, ref_k_flip},
    {"roll", ALL, P, ref_k_roll},

    /* fill / copy */
    {"fill_.Scalar", ALL, P, ref_k_fill__scalar},
    {"zero_", ALL, P, ref_k_zero_},
    {"copy_", ALL, P, ref_k_copy_},

    /* random */
    {"normal_", FLT, P, ref_k_normal_},
    {"uniform_", FLT, P, ref_k_uniform_},
    {"bernoulli_.float", ALL, P, ref_k_bernoulli__float},
    {"native_dropout", FLT, P, ref_k_native_dropout},
    {"native_dropout_backward", FLT, P, ref_k_native_dropout_backward},

    /* activation */
    {"gelu", FLT, P, ref_k_gelu},
    /* fast: vectorised float32 erf / tanh approximations, float64 precise (kernels_activation.c) */
    {"gelu", FLT, FL_VARIANT_FAST, ref_k_gelu_fast},
    {"gelu_backward", FLT, P, ref_k_gelu_backward},
    {"silu", FLT, P, ref_k_silu},
    {"silu_", FLT, P, ref_k_silu_},
    {"silu_backward", FLT, P, ref_k_silu_backward},
    {"leaky_relu", FLT, P, ref_k_leaky_relu},
    {"leaky_relu_", FLT, P, ref_k_leaky_relu_},
    {"leaky_relu_backward", FLT, P, ref_k_leaky_relu_backward},
    {"elu", FLT, P, ref_k_elu},
    {"elu_", FLT, P, ref_k_elu_},
    {"elu_backward", FLT, P, ref_k_elu_backward},
    {"softplus", FLT, P, ref_k_softplus},
    {"softplus_backward", FLT, P, ref_k_softplus_backward},
    {"hardtanh", NUM, P, ref_k_hardtanh},
    {"hardtanh_", NUM, P, ref_k_hardtanh_},
    {"hardtanh_backward", FLT, P, ref_k_hardtanh_backward},

    /* unary */
    {"sin", ALL, P, ref_k_sin},
    {"cos", ALL, P, ref_k_cos},
    {"tan", ALL, P, ref_k_tan},
    {"asin", ALL, P, ref_k_asin},
    {"acos", ALL, P, ref_k_acos},
    {"atan", ALL, P, ref_k_atan},
    {"sinh", ALL, P, ref_k_sinh},
    {"cosh", ALL, P, ref_k_cosh},
    {"log1p", ALL, P, ref_k_log1p},
    {"expm1", ALL, P, ref_k_expm1},
    {"log2", ALL, P, ref_k_log2},
    {"log10", ALL, P, ref_k_log10},
    {"exp2", ALL, P, ref_k_exp2},
    {"erf", ALL, P, ref_k_erf},
    {"erfc", ALL, P, ref_k_erfc},
    {"floor", NUM, P, ref_k_floor},
    {"ceil", NUM, P, ref_k_ceil},
    {"trunc", NUM, P, ref_k_trunc},
    {"round", NUM, P, ref_k_round},
    {"frac", FLT, P, ref_k_frac},
    {"sign", ALL, P, ref_k_sign},
    {"sgn", ALL, P, ref_k_sgn},
    {"isnan", ALL, P, ref_k_isnan},
    {"isinf", ALL, P, ref_k_isinf},
    {"isposinf", ALL, P, ref_k_isposinf},
    {"isneginf", ALL, P, ref_k_isneginf},
    {"isfinite", ALL, P, ref_k_isfinite},
    {"logical_not", ALL, P, ref_k_logical_not},
    {"logical_and", ALL, P, ref_k_logical_and},
    {"logical_or", ALL, P, ref_k_logical_or},
    {"logical_xor", ALL, P, ref_k_logical_xor},
    {"bitwise_not", INTB, P, ref_k_bitwise_not},
    {"bitwise_and.Tensor", INTB, P, ref_k_bitwise_and_tensor},
    {"bitwise_or.Tensor", INTB, P, ref_k_bitwise_or_tensor},
    {"bitwise_xor.Tensor", INTB, P, ref_k_bitwise_xor_tensor},
    {"bitwise_and.Scalar", INTB, P, ref_k_bitwise_and_scalar},
    {"bitwise_or.Scalar", INTB, P, ref_k_bitwise_or_scalar},
    {"bitwise_xor.Scalar", INTB, P, ref_k_bitwise_xor_scalar},
    {"atan2", ALL, P, ref_k_atan2},
    {"pow.Tensor_Tensor", NUM, P, ref_k_pow_tensor_tensor},
    {"pow.Scalar", NUM, P, ref_k_pow_scalar},
    {"remainder.Tensor", FLT, P, ref_k_remainder_tensor},
    {"remainder.Scalar", FLT, P, ref_k_remainder_scalar},
    {"fmod.Tensor", FLT, P, ref_k_fmod_tensor},
    {"fmod.Scalar", FLT, P, ref_k_fmod_scalar},
    {"floor_divide", FLT, P, ref_k_floor_divide},
    {"xlogy.Tensor", ALL, P, ref_k_xlogy_tensor},
    {"logit", ALL, P, ref_k_logit},

    /* elementwise */
    {"clamp_min", NUM, P, ref_k_clamp_min},
    {"clamp_min_", NUM, P, ref_k_clamp_min_},
    {"clamp_max", NUM, P, ref_k_clamp_max},
    {"clamp_max_", NUM, P, ref_k_clamp_max_},
    {"masked_fill.Scalar", ALL, P, ref_k_masked_fill_scalar},
    {"masked_fill_.Scalar", ALL, P, ref_k_masked_fill__scalar},
};

const uint32_t ref_kernel_def_count =
    (uint32_t)(sizeof ref_kernel_defs / sizeof ref_kernel_defs[0]);
