/*
 * scaled_mm.c -- _scaled_mm, the matrix multiply PyTorch uses for float8
 * (torch._scaled_mm; docs/vendors/fp8.md):
 *
 *   out = (self @ mat2) * scale_a * scale_b + bias, rounded to out_dtype (self's
 *   dtype when not given)
 *
 * self (m x k) and mat2 (k x n) are float8 of any of the four formats and any
 * strides; scale_a is one float32 or one per row of self (m x 1), scale_b one
 * or one per column of mat2 (1 x n); bias (n) is float32, float16 or bfloat16.
 * The operands are widened to float32 (exactly) and multiplied on BLAS with
 * float32 accumulation, as PyTorch's CPU does.  A call with scale_result is
 * declined (the runtime runs it on the CPU): PyTorch's CPU (2.13) divides by it
 * only when a bias is given and ignores it otherwise, which no kernel should
 * have to copy.
 */
#include "fl_kernel.h"
#include "util/blas.h"

/* rows x cols float8 elements at (row stride, col stride) -> contiguous float32 */
static void widen(float *dst, const fl_tensor *t) {
    const uint8_t *p = (const uint8_t *)flk_data(t);
    int64_t rows = t->sizes[0], cols = t->sizes[1];
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j)
            dst[i * cols + j] = flk_fp8_to_float(p[i * t->strides[0] + j * t->strides[1]], t->dtype);
}

/* A scale: one value, or `count` of them along its longer dimension. */
static fl_status read_scale(const flk_args *a, const fl_tensor *t, const char *name, int64_t count, float *out) {
    FLK_TRY(flk_check_dtype(a, t, name, FLK_DT(FL_FLOAT32)));
    int64_t n = flk_numel(t);
    if (n != 1 && n != count)
        return flk_fail(a, "%s has %lld elements; expected 1 or %lld", name, (long long)n, (long long)count);
    int64_t stride = 0;
    for (int32_t d = 0; d < t->ndim; ++d)
        if (t->sizes[d] > 1)
            stride = t->strides[d];
    for (int64_t i = 0; i < count; ++i)
        out[i] = *(const flk_f32 *)((const char *)flk_data(t) + (n == 1 ? 0 : i * stride) * 4);
    return FL_SUCCESS;
}

typedef struct scaled_mm_args {
    const fl_tensor *self, *mat2, *scale_a, *scale_b, *bias, *scale_result, *out;
} scaled_mm_args;

static fl_status read_args(flk_args *a, const fl_arg *args, uint32_t nargs, flk_ctx *ctx, scaled_mm_args *s) {
    FLK_TRY(flk_args_init(a, "_scaled_mm", args, nargs, 9, ctx));
    FLK_TRY(flk_get_tensor(a, 0, "self", &s->self));
    FLK_TRY(flk_get_tensor(a, 1, "mat2", &s->mat2));
    FLK_TRY(flk_get_tensor(a, 2, "scale_a", &s->scale_a));
    FLK_TRY(flk_get_tensor(a, 3, "scale_b", &s->scale_b));
    FLK_TRY(flk_get_opt_tensor(a, 4, "bias", &s->bias));
    FLK_TRY(flk_get_opt_tensor(a, 5, "scale_result", &s->scale_result));
    FLK_TRY(flk_get_tensor(a, 8, "out", &s->out));   /* 6 out_dtype: the output's dtype; 7 use_fast_accum: a hint */
    FLK_TRY(flk_check_dtype(a, s->self, "self", FLK_FP8_TYPES));
    FLK_TRY(flk_check_dtype(a, s->mat2, "mat2", FLK_FP8_TYPES));
    if (s->self->ndim != 2 || s->mat2->ndim != 2 || s->out->ndim != 2 || s->self->sizes[1] != s->mat2->sizes[0] ||
        s->out->sizes[0] != s->self->sizes[0] || s->out->sizes[1] != s->mat2->sizes[1])
        return flk_fail(a, "expected self (m x k), mat2 (k x n) and out (m x n)");
    if (s->bias && (s->bias->ndim != 1 || s->bias->sizes[0] != s->mat2->sizes[1]))
        return flk_fail(a, "bias must have n = %lld elements", (long long)s->mat2->sizes[1]);
    return FL_SUCCESS;
}

/* out[i, j] from the float32 product, as PyTorch's CPU orders it */
static void finish(const scaled_mm_args *s, const float *product, const float *sa, const float *sb) {
    int64_t m = s->out->sizes[0], n = s->out->sizes[1];
    char *o = (char *)flk_data(s->out);
    size_t es = flk_dtype_size(s->out->dtype);
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
            float v = product[i * n + j] * sa[i] * sb[j];
            if (s->bias)
                v += (float)flk_load_f64((const char *)flk_data(s->bias) +
                                         j * s->bias->strides[0] * (int64_t)flk_dtype_size(s->bias->dtype),
                                         s->bias->dtype);
            flk_store_f64(o + (i * s->out->strides[0] + j * s->out->strides[1]) * (int64_t)es, s->out->dtype, v);
        }
}

FLK_KERNEL_FN(k_scaled_mm) {
    flk_args a;
    scaled_mm_args s;
    FLK_TRY(read_args(&a, args, nargs, ctx, &s));
    int64_t m = s.self->sizes[0], k = s.self->sizes[1], n = s.mat2->sizes[1];
    if (s.scale_result)
        return flk_decline(&a, "scale_result is not supported (see scaled_mm.c)");
    float *buffer = flk_alloc(sizeof(float) * (size_t)(m * k + k * n + m * n + m + n));
    if (!buffer)
        return flk_fail(&a, "out of host memory for %lld x %lld x %lld", (long long)m, (long long)k, (long long)n);
    float *A = buffer, *B = A + m * k, *C = B + k * n, *sa = C + m * n, *sb = sa + m;
    fl_status st = read_scale(&a, s.scale_a, "scale_a", m, sa);
    if (st == FL_SUCCESS)
        st = read_scale(&a, s.scale_b, "scale_b", n, sb);
    if (st == FL_SUCCESS) {
        widen(A, s.self);
        widen(B, s.mat2);
        if (k == 0)
            memset(C, 0, sizeof(float) * (size_t)(m * n));
        else if (m && n)
            st = ref_gemm(&a, FL_FLOAT32, 0, 0, m, n, k, 1.0, A, k, B, n, 0.0, C, n);
    }
    if (st == FL_SUCCESS)
        finish(&s, C, sa, sb);
    flk_free(buffer);
    return st;
}
/* Declines, at launch, what the kernel does not take: scale_result. */
FLK_KERNEL_FN(scaled_mm_accepts) {
    flk_args a;
    FLK_TRY(flk_args_init(&a, "_scaled_mm", args, nargs, 9, ctx));
    return flk_arg_is_none(&a, 5) ? FL_SUCCESS : flk_decline(&a, "scale_result is not supported (see scaled_mm.c)");
}
FLK_REGISTER_ENTRY("_scaled_mm", FLK_FP8_TYPES, FL_VARIANT_PRECISE, k_scaled_mm, scaled_mm_accepts);
