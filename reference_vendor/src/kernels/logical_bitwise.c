/*
 * logical_bitwise.c -- logical_not / and / or / xor (bool output, any input
 * dtype) and bitwise_not / and / or / xor (.Tensor and .Scalar) over the
 * integral dtypes and bool, on the elementwise engine (fl_kernel.h).
 */
#include "fl_kernel.h"

#define INT_AND_BOOL (FLK_INT_TYPES | FLK_DT(FL_BOOL))   /* the bitwise ops' dtypes */

FLK_DEF1_PRED(l_logical_not, a == (T)0, a == 0)
FLK_DEF2_PRED(l_logical_and, a != (T)0 && b != (T)0)
FLK_DEF2_PRED(l_logical_or, a != (T)0 || b != (T)0)
FLK_DEF2_PRED(l_logical_xor, (a != (T)0) != (b != (T)0))

/* bitwise (integral and bool; bool values are 0/1 so &, |, ^ stay in {0, 1}) */
FLK_DEF1_I(l_bitwise_not, FLK_NOSETUP, ~a)
FLK_DEF2_I(l_bitwise_and, FLK_NOSETUP, a & b)
FLK_DEF2_I(l_bitwise_or, FLK_NOSETUP, a | b)
FLK_DEF2_I(l_bitwise_xor, FLK_NOSETUP, a ^ b)

FLK_EW_UNARY_KERNEL(k_logical_not, "logical_not", FLK_LOOPS_FI(l_logical_not), FLK_EW_BOOL_OUT)
FLK_REGISTER("logical_not", FLK_REAL_TYPES, k_logical_not);
FLK_EW_BINARY_KERNEL(k_logical_and, "logical_and", FLK_LOOPS_FI(l_logical_and), FLK_EW_BOOL_OUT)
FLK_REGISTER("logical_and", FLK_REAL_TYPES, k_logical_and);
FLK_EW_BINARY_KERNEL(k_logical_or, "logical_or", FLK_LOOPS_FI(l_logical_or), FLK_EW_BOOL_OUT)
FLK_REGISTER("logical_or", FLK_REAL_TYPES, k_logical_or);
FLK_EW_BINARY_KERNEL(k_logical_xor, "logical_xor", FLK_LOOPS_FI(l_logical_xor), FLK_EW_BOOL_OUT)
FLK_REGISTER("logical_xor", FLK_REAL_TYPES, k_logical_xor);
FLK_EW_BINARY_KERNEL(k_bitwise_and_tensor, "bitwise_and.Tensor", FLK_LOOPS_I(l_bitwise_and), 0)
FLK_REGISTER("bitwise_and.Tensor", INT_AND_BOOL, k_bitwise_and_tensor);
FLK_EW_BINARY_KERNEL(k_bitwise_or_tensor, "bitwise_or.Tensor", FLK_LOOPS_I(l_bitwise_or), 0)
FLK_REGISTER("bitwise_or.Tensor", INT_AND_BOOL, k_bitwise_or_tensor);
FLK_EW_BINARY_KERNEL(k_bitwise_xor_tensor, "bitwise_xor.Tensor", FLK_LOOPS_I(l_bitwise_xor), 0)
FLK_REGISTER("bitwise_xor.Tensor", INT_AND_BOOL, k_bitwise_xor_tensor);
FLK_EW_BINARY_KERNEL(k_bitwise_and_scalar, "bitwise_and.Scalar", FLK_LOOPS_I(l_bitwise_and), 0)
FLK_REGISTER("bitwise_and.Scalar", INT_AND_BOOL, k_bitwise_and_scalar);
FLK_EW_BINARY_KERNEL(k_bitwise_or_scalar, "bitwise_or.Scalar", FLK_LOOPS_I(l_bitwise_or), 0)
FLK_REGISTER("bitwise_or.Scalar", INT_AND_BOOL, k_bitwise_or_scalar);
FLK_EW_BINARY_KERNEL(k_bitwise_xor_scalar, "bitwise_xor.Scalar", FLK_LOOPS_I(l_bitwise_xor), 0)
FLK_REGISTER("bitwise_xor.Scalar", INT_AND_BOOL, k_bitwise_xor_scalar);

/* bitwise_not: bool is logical not (~1 would be -2, still "true") */
FLK_KERNEL_FN(k_bitwise_not) {
    const fl_tensor *self = nargs > 0 && args[0].kind == FL_ARG_TENSOR ? args[0].value.tensor : NULL;
    if (self && self->dtype == FL_BOOL)
        return flk_ew_unary("bitwise_not", args, nargs, ctx, FLK_LOOPS_FI(l_logical_not), FLK_EW_BOOL_OUT);
    return flk_ew_unary("bitwise_not", args, nargs, ctx, FLK_LOOPS_I(l_bitwise_not), 0);
}
FLK_REGISTER("bitwise_not", INT_AND_BOOL, k_bitwise_not);
