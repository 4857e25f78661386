/*
 * compare.c -- comparisons with a bool output on the elementwise engine
 * (fl_kernel.h): eq, ne, gt, lt, ge, le, each as .Tensor and .Scalar.  The
 * operands are compared in their promoted dtype, as PyTorch does.
 */
#include "fl_kernel.h"

FLK_DEF_CMP(l_eq, a == b)
FLK_DEF_CMP(l_ne, a != b)
FLK_DEF_CMP(l_gt, a > b)
FLK_DEF_CMP(l_lt, a < b)
FLK_DEF_CMP(l_ge, a >= b)
FLK_DEF_CMP(l_le, a <= b)

FLK_EW_BINARY_KERNEL(k_eq_tensor, "eq.Tensor", FLK_LOOPS_FI(l_eq), FLK_EW_BOOL_OUT)
FLK_REGISTER("eq.Tensor", FLK_REAL_TYPES, k_eq_tensor);
FLK_EW_BINARY_KERNEL(k_ne_tensor, "ne.Tensor", FLK_LOOPS_FI(l_ne), FLK_EW_BOOL_OUT)
FLK_REGISTER("ne.Tensor", FLK_REAL_TYPES, k_ne_tensor);
FLK_EW_BINARY_KERNEL(k_gt_tensor, "gt.Tensor", FLK_LOOPS_FI(l_gt), FLK_EW_BOOL_OUT)
FLK_REGISTER("gt.Tensor", FLK_REAL_TYPES, k_gt_tensor);
FLK_EW_BINARY_KERNEL(k_lt_tensor, "lt.Tensor", FLK_LOOPS_FI(l_lt), FLK_EW_BOOL_OUT)
FLK_REGISTER("lt.Tensor", FLK_REAL_TYPES, k_lt_tensor);
FLK_EW_BINARY_KERNEL(k_ge_tensor, "ge.Tensor", FLK_LOOPS_FI(l_ge), FLK_EW_BOOL_OUT)
FLK_REGISTER("ge.Tensor", FLK_REAL_TYPES, k_ge_tensor);
FLK_EW_BINARY_KERNEL(k_le_tensor, "le.Tensor", FLK_LOOPS_FI(l_le), FLK_EW_BOOL_OUT)
FLK_REGISTER("le.Tensor", FLK_REAL_TYPES, k_le_tensor);
FLK_EW_BINARY_KERNEL(k_eq_scalar, "eq.Scalar", FLK_LOOPS_FI(l_eq), FLK_EW_BOOL_OUT)
FLK_REGISTER("eq.Scalar", FLK_REAL_TYPES, k_eq_scalar);
FLK_EW_BINARY_KERNEL(k_ne_scalar, "ne.Scalar", FLK_LOOPS_FI(l_ne), FLK_EW_BOOL_OUT)
FLK_REGISTER("ne.Scalar", FLK_REAL_TYPES, k_ne_scalar);
FLK_EW_BINARY_KERNEL(k_gt_scalar, "gt.Scalar", FLK_LOOPS_FI(l_gt), FLK_EW_BOOL_OUT)
FLK_REGISTER("gt.Scalar", FLK_REAL_TYPES, k_gt_scalar);
FLK_EW_BINARY_KERNEL(k_lt_scalar, "lt.Scalar", FLK_LOOPS_FI(l_lt), FLK_EW_BOOL_OUT)
FLK_REGISTER("lt.Scalar", FLK_REAL_TYPES, k_lt_scalar);
FLK_EW_BINARY_KERNEL(k_ge_scalar, "ge.Scalar", FLK_LOOPS_FI(l_ge), FLK_EW_BOOL_OUT)
FLK_REGISTER("ge.Scalar", FLK_REAL_TYPES, k_ge_scalar);
FLK_EW_BINARY_KERNEL(k_le_scalar, "le.Scalar", FLK_LOOPS_FI(l_le), FLK_EW_BOOL_OUT)
FLK_REGISTER("le.Scalar", FLK_REAL_TYPES, k_le_scalar);
