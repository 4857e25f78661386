/*
 * promote.c -- PyTorch's type promotion: promote_types, can_cast and
 * result_type over tensors and scalars (fl_kernel.h section 6).
 */
#include "fl_kernel.h"

int32_t flk_promote_types(int32_t a, int32_t b) {
    if (a == b)
        return a;
    if (!flk_dtype_valid(a) || !flk_dtype_valid(b) || a == FL_COMPLEX64 || b == FL_COMPLEX64)
        return -1;
    if (flk_is_fp8(a) || flk_is_fp8(b))   /* PyTorch promotes float8 with nothing else */
        return -1;
    if (a == FL_BOOL)
        return b;
    if (b == FL_BOOL)
        return a;
    int fa = flk_is_floating(a), fb = flk_is_floating(b);
    if (fa && fb) {
        if (a == FL_FLOAT64 || b == FL_FLOAT64)
            return FL_FLOAT64;
        return FL_FLOAT32; /* f32 with f16/bf16, or f16 with bf16 */
    }
    if (fa)
        return a;
    if (fb)
        return b;
    /* both integral, different */
    if (a == FL_UINT8 || b == FL_UINT8) {
        int32_t s = (a == FL_UINT8) ? b : a;
        return s == FL_INT8 ? FL_INT16 : s;
    }
    return flk_dtype_size(a) >= flk_dtype_size(b) ? a : b;
}

int flk_can_cast(int32_t from, int32_t to) {
    if ((flk_is_floating(from) || flk_is_fp8(from)) && flk_is_integral(to))
        return 0;
    if (from != FL_BOOL && to == FL_BOOL)
        return 0;
    return 1;
}

static int32_t promote_skip(int32_t a, int32_t b) {
    if (a < 0)
        return b;
    if (b < 0)
        return a;
    return flk_promote_types(a, b);
}

static int32_t combine_categories(int32_t higher, int32_t lower) {
    if (higher >= 0 && flk_is_floating(higher))
        return higher;
    if (higher == FL_BOOL || (lower >= 0 && flk_is_floating(lower)))
        return promote_skip(higher, lower);
    if (higher >= 0)
        return higher;
    return lower;
}

int32_t flk_result_type(const flk_operand *ops, int n) {
    int32_t dim_r = -1, zero_r = -1, wrap_r = -1;
    for (int k = 0; k < n; ++k) {
        if (ops[k].t) {
            if (ops[k].t->ndim > 0)
                dim_r = promote_skip(dim_r, ops[k].t->dtype);
            else
                zero_r = promote_skip(zero_r, ops[k].t->dtype);
        } else {
            int32_t dt = ops[k].s.kind == FL_ARG_FLOAT ? FL_FLOAT32
                         : ops[k].s.kind == FL_ARG_BOOL ? FL_BOOL
                                                        : FL_INT64;
            wrap_r = promote_skip(wrap_r, dt);
        }
    }
    return combine_categories(dim_r, combine_categories(zero_r, wrap_r));
}
