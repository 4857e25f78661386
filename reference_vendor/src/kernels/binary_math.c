/*
 * binary_math.c -- binary pointwise math on the elementwise engine
 * (fl_kernel.h): atan2, pow with a tensor exponent (pow.Tensor_Tensor and
 * pow.Scalar), remainder, fmod, floor_divide, xlogy.
 *
 * remainder takes the divisor's sign and floor_divide rounds the true
 * quotient down, as PyTorch's CPU kernels do.  Integer remainder / fmod /
 * floor_divide are left to the fallback: a zero divisor must raise, not trap.
 */
#include "fl_kernel.h"

/* binary float math */
FLK_DEF2_F(l_atan2, FLK_NOSETUP, FLK_G2(atan2, a, b))
FLK_DEF2_F(l_powt, FLK_NOSETUP, FLK_G2(pow, a, b))
static inline int64_t ipow_any(int64_t base, int64_t e) {
    if (e < 0) /* PyTorch: 1 ** -n = 1, (-1) ** -n = +-1, otherwise 0 */
        return base == 1 ? 1 : base == -1 ? ((e & 1) ? -1 : 1) : 0;
    uint64_t r = 1, x = (uint64_t)base;
    for (; e > 0; e >>= 1, x *= x)
        if (e & 1)
            r *= x;
    return (int64_t)r;
}
FLK_DEF2_I(l_powt, FLK_NOSETUP, ipow_any(a, b))
static inline double remainder_d(double a, double b) {
    double m = fmod(a, b);
    return (m != 0 && ((b < 0) != (m < 0))) ? m + b : m;
}
FLK_DEF2_F(l_remainder, FLK_NOSETUP, (T)remainder_d(a, b))
FLK_DEF2_F(l_fmod, FLK_NOSETUP, FLK_G2(fmod, a, b))
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
FLK_EW_LOOP2(l_floor_divide_f32, float, flk_f32, float, flk_f32, FLK_NOSETUP,
             (float)floor_div_d((double)a, (double)b))
FLK_EW_LOOP2(l_floor_divide_f64, double, flk_f64, double, flk_f64, FLK_NOSETUP, floor_div_d(a, b))
FLK_DEF2_F(l_xlogy, FLK_NOSETUP, b != b ? b : (a == (T)0 ? (T)0 : a * FLK_G1(log, b)))

FLK_EW_BINARY_KERNEL(k_atan2, "atan2", FLK_LOOPS_F(l_atan2), FLK_EW_INT_TO_FLOAT)
FLK_REGISTER("atan2", FLK_REAL_TYPES, k_atan2);
FLK_EW_BINARY_KERNEL(k_pow_tensor_tensor, "pow.Tensor_Tensor", FLK_LOOPS_FI(l_powt), FLK_EW_NO_BOOL)
FLK_REGISTER("pow.Tensor_Tensor", FLK_NUM_TYPES, k_pow_tensor_tensor);
FLK_EW_BINARY_KERNEL(k_pow_scalar, "pow.Scalar", FLK_LOOPS_FI(l_powt), FLK_EW_NO_BOOL)
FLK_REGISTER("pow.Scalar", FLK_NUM_TYPES, k_pow_scalar);
FLK_EW_BINARY_KERNEL(k_remainder_tensor, "remainder.Tensor", FLK_LOOPS_F(l_remainder), FLK_EW_NO_BOOL)
FLK_REGISTER("remainder.Tensor", FLK_FLOAT_TYPES, k_remainder_tensor);
FLK_EW_BINARY_KERNEL(k_remainder_scalar, "remainder.Scalar", FLK_LOOPS_F(l_remainder), FLK_EW_NO_BOOL)
FLK_REGISTER("remainder.Scalar", FLK_FLOAT_TYPES, k_remainder_scalar);
FLK_EW_BINARY_KERNEL(k_fmod_tensor, "fmod.Tensor", FLK_LOOPS_F(l_fmod), FLK_EW_NO_BOOL)
FLK_REGISTER("fmod.Tensor", FLK_FLOAT_TYPES, k_fmod_tensor);
FLK_EW_BINARY_KERNEL(k_fmod_scalar, "fmod.Scalar", FLK_LOOPS_F(l_fmod), FLK_EW_NO_BOOL)
FLK_REGISTER("fmod.Scalar", FLK_FLOAT_TYPES, k_fmod_scalar);
FLK_EW_BINARY_KERNEL(k_floor_divide, "floor_divide", FLK_LOOPS_F(l_floor_divide), FLK_EW_NO_BOOL)
FLK_REGISTER("floor_divide", FLK_FLOAT_TYPES, k_floor_divide);
FLK_EW_BINARY_KERNEL(k_xlogy_tensor, "xlogy.Tensor", FLK_LOOPS_F(l_xlogy), FLK_EW_INT_TO_FLOAT)
FLK_REGISTER("xlogy.Tensor", FLK_REAL_TYPES, k_xlogy_tensor);
