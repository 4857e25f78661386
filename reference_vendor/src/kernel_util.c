/*
 * kernel_util.c -- helpers shared by the reference chip's kernels
 * (see kernel_util.h for the contracts).
 */
#include "kernel_util.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include <cblas.h>

#if defined(__F16C__) && defined(__AVX__)
#include <immintrin.h>
#endif

/* ======================================================================== */
/* errors                                                                    */
/* ======================================================================== */

fl_status ref_kernel_fail(ref_kernel_ctx *ctx, const char *fmt, ...) {
    if (ctx) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ctx->message, sizeof ctx->message, fmt, ap);
        va_end(ap);
    }
    return FL_ERROR_KERNEL_FAILED;
}

static fl_status fail_with(const ref_args *a, fl_status status, const char *fmt, va_list ap) {
    char body[REF_ERROR_MESSAGE_MAX];
    vsnprintf(body, sizeof body, fmt, ap);
    ref_kernel_fail(a->ctx, "%s: %s", a->op ? a->op : "kernel", body);
    return status;
}

fl_status ref_fail(const ref_args *a, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fl_status st = fail_with(a, FL_ERROR_KERNEL_FAILED, fmt, ap);
    va_end(ap);
    return st;
}

fl_status ref_decline(const ref_args *a, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fl_status st = fail_with(a, FL_ERROR_NOT_SUPPORTED, fmt, ap);
    va_end(ap);
    return st;
}

/* ======================================================================== */
/* dtypes                                                                    */
/* ======================================================================== */

const char *ref_dtype_name(int32_t dt) {
    switch (dt) {
    case FL_FLOAT32: return "float32";
    case FL_FLOAT64: return "float64";
    case FL_FLOAT16: return "float16";
    case FL_BFLOAT16: return "bfloat16";
    case FL_INT8: return "int8";
    case FL_UINT8: return "uint8";
    case FL_INT16: return "int16";
    case FL_INT32: return "int32";
    case FL_INT64: return "int64";
    case FL_BOOL: return "bool";
    case FL_COMPLEX64: return "complex64";
    default: return "unknown dtype";
    }
}

int32_t ref_promote_types(int32_t a, int32_t b) {
    if (a == b)
        return a;
    if (!ref_dtype_valid(a) || !ref_dtype_valid(b) || a == FL_COMPLEX64 || b == FL_COMPLEX64)
        return -1;
    if (a == FL_BOOL)
        return b;
    if (b == FL_BOOL)
        return a;
    int fa = ref_is_floating(a), fb = ref_is_floating(b);
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
    return ref_dtype_size(a) >= ref_dtype_size(b) ? a : b;
}

int ref_can_cast(int32_t from, int32_t to) {
    if (ref_is_floating(from) && ref_is_integral(to))
        return 0;
    if (from != FL_BOOL && to == FL_BOOL)
        return 0;
    return 1;
}

/* ======================================================================== */
/* element load / store                                                       */
/* ======================================================================== */

double ref_load_f64(const void *p, int32_t dt) {
    switch (dt) {
    case FL_FLOAT32: return *(const ref_f32 *)p;
    case FL_FLOAT64: return *(const ref_f64 *)p;
    case FL_FLOAT16: return ref_half_to_float(*(const ref_u16 *)p);
    case FL_BFLOAT16: return ref_bf16_to_float(*(const ref_u16 *)p);
    case FL_INT8: return *(const ref_i8 *)p;
    case FL_UINT8: return *(const ref_u8 *)p;
    case FL_INT16: return *(const ref_i16 *)p;
    case FL_INT32: return *(const ref_i32 *)p;
    case FL_INT64: return (double)*(const ref_i64 *)p;
    case FL_BOOL: return *(const ref_u8 *)p != 0;
    default: return 0.0;
    }
}

int64_t ref_load_i64(const void *p, int32_t dt) {
    switch (dt) {
    case FL_FLOAT32: case FL_FLOAT64: case FL_FLOAT16: case FL_BFLOAT16:
        return ref_double_to_i64(ref_load_f64(p, dt));
    case FL_INT8: return *(const ref_i8 *)p;
    case FL_UINT8: return *(const ref_u8 *)p;
    case FL_INT16: return *(const ref_i16 *)p;
    case FL_INT32: return *(const ref_i32 *)p;
    case FL_INT64: return *(const ref_i64 *)p;
    case FL_BOOL: return *(const ref_u8 *)p != 0;
    default: return 0;
    }
}

void ref_store_f64(void *p, int32_t dt, double v) {
    switch (dt) {
    case FL_FLOAT32: *(ref_f32 *)p = (float)v; break;
    case FL_FLOAT64: *(ref_f64 *)p = v; break;
    case FL_FLOAT16: *(ref_u16 *)p = ref_float_to_half((float)v); break;
    case FL_BFLOAT16: *(ref_u16 *)p = ref_float_to_bf16((float)v); break;
    case FL_INT8: *(ref_i8 *)p = (int8_t)ref_double_to_i64(v); break;
    case FL_UINT8: *(ref_u8 *)p = (uint8_t)ref_double_to_i64(v); break;
    case FL_INT16: *(ref_i16 *)p = (int16_t)ref_double_to_i64(v); break;
    case FL_INT32: *(ref_i32 *)p = (int32_t)ref_double_to_i64(v); break;
    case FL_INT64: *(ref_i64 *)p = ref_double_to_i64(v); break;
    case FL_BOOL: *(ref_u8 *)p = (v != 0.0); break;
    default: break;
    }
}

void ref_store_i64(void *p, int32_t dt, int64_t v) {
    switch (dt) {
    case FL_FLOAT32: *(ref_f32 *)p = (float)v; break;
    case FL_FLOAT64: *(ref_f64 *)p = (double)v; break;
    case FL_FLOAT16: *(ref_u16 *)p = ref_float_to_half((float)v); break;
    case FL_BFLOAT16: *(ref_u16 *)p = ref_float_to_bf16((float)v); break;
    case FL_INT8: *(ref_i8 *)p = (int8_t)v; break;
    case FL_UINT8: *(ref_u8 *)p = (uint8_t)v; break;
    case FL_INT16: *(ref_i16 *)p = (int16_t)v; break;
    case FL_INT32: *(ref_i32 *)p = (int32_t)v; break;
    case FL_INT64: *(ref_i64 *)p = v; break;
    case FL_BOOL: *(ref_u8 *)p = (v != 0); break;
    default: break;
    }
}

/* ---- bulk conversion ------------------------------------------------------ */

#define CONV_CHUNK 256

/* typed loops: dst[i] = EXPR(x = src[i]); a contiguous fast path the
 * compiler vectorises */
#define CONV_LOOP(DT, ST, EXPR)                                     \
    do {                                                            \
        const char *s_ = (const char *)src;                         \
        char *d_ = (char *)dst;                                     \
        if (ss == (int64_t)sizeof(ST) && ds == (int64_t)sizeof(DT)) { \
            const ST *sp_ = (const ST *)s_;                         \
            DT *dp_ = (DT *)d_;                                     \
            for (int64_t i_ = 0; i_ < n; ++i_) {                    \
                ST x = sp_[i_];                                     \
                dp_[i_] = (EXPR);                                   \
            }                                                       \
        } else {                                                    \
            for (int64_t i_ = 0; i_ < n; ++i_) {                    \
                ST x = *(const ST *)(s_ + i_ * ss);                 \
                *(DT *)(d_ + i_ * ds) = (EXPR);                     \
            }                                                       \
        }                                                           \
    } while (0)

static void load_chunk_f64(double *buf, const char *src, int32_t dt, int64_t ss, int64_t n) {
    switch (dt) {
    case FL_FLOAT32: for (int64_t i = 0; i < n; ++i) buf[i] = *(const ref_f32 *)(src + i * ss); break;
    case FL_FLOAT64: for (int64_t i = 0; i < n; ++i) buf[i] = *(const ref_f64 *)(src + i * ss); break;
    case FL_FLOAT16: for (int64_t i = 0; i < n; ++i) buf[i] = ref_half_to_float(*(const ref_u16 *)(src + i * ss)); break;
    case FL_BFLOAT16: for (int64_t i = 0; i < n; ++i) buf[i] = ref_bf16_to_float(*(const ref_u16 *)(src + i * ss)); break;
    default: for (int64_t i = 0; i < n; ++i) buf[i] = ref_load_f64(src + i * ss, dt); break;
    }
}

static void load_chunk_i64(int64_t *buf, const char *src, int32_t dt, int64_t ss, int64_t n) {
    switch (dt) {
    case FL_INT8: for (int64_t i = 0; i < n; ++i) buf[i] = *(const ref_i8 *)(src + i * ss); break;
    case FL_UINT8: for (int64_t i = 0; i < n; ++i) buf[i] = *(const ref_u8 *)(src + i * ss); break;
    case FL_INT16: for (int64_t i = 0; i < n; ++i) buf[i] = *(const ref_i16 *)(src + i * ss); break;
    case FL_INT32: for (int64_t i = 0; i < n; ++i) buf[i] = *(const ref_i32 *)(src + i * ss); break;
    case FL_INT64: for (int64_t i = 0; i < n; ++i) buf[i] = *(const ref_i64 *)(src + i * ss); break;
    case FL_BOOL: for (int64_t i = 0; i < n; ++i) buf[i] = *(const ref_u8 *)(src + i * ss) != 0; break;
    default: for (int64_t i = 0; i < n; ++i) buf[i] = ref_load_i64(src + i * ss, dt); break;
    }
}

static void store_chunk_f64(char *dst, int32_t dt, int64_t ds, const double *buf, int64_t n) {
    switch (dt) {
    case FL_FLOAT32: for (int64_t i = 0; i < n; ++i) *(ref_f32 *)(dst + i * ds) = (float)buf[i]; break;
    case FL_FLOAT64: for (int64_t i = 0; i < n; ++i) *(ref_f64 *)(dst + i * ds) = buf[i]; break;
    default: for (int64_t i = 0; i < n; ++i) ref_store_f64(dst + i * ds, dt, buf[i]); break;
    }
}

static void store_chunk_i64(char *dst, int32_t dt, int64_t ds, const int64_t *buf, int64_t n) {
    switch (dt) {
    case FL_FLOAT32: for (int64_t i = 0; i < n; ++i) *(ref_f32 *)(dst + i * ds) = (float)buf[i]; break;
    case FL_FLOAT64: for (int64_t i = 0; i < n; ++i) *(ref_f64 *)(dst + i * ds) = (double)buf[i]; break;
    case FL_INT64: for (int64_t i = 0; i < n; ++i) *(ref_i64 *)(dst + i * ds) = buf[i]; break;
    case FL_INT32: for (int64_t i = 0; i < n; ++i) *(ref_i32 *)(dst + i * ds) = (int32_t)buf[i]; break;
    case FL_BOOL: for (int64_t i = 0; i < n; ++i) *(ref_u8 *)(dst + i * ds) = buf[i] != 0; break;
    default: for (int64_t i = 0; i < n; ++i) ref_store_i64(dst + i * ds, dt, buf[i]); break;
    }
}

static void copy_same(void *dst, int64_t ds, const void *src, int64_t ss, int64_t n, size_t es) {
    if (ds == (int64_t)es && ss == (int64_t)es) {
        memcpy(dst, src, (size_t)n * es);
        return;
    }
    switch (es) {
    case 1: CONV_LOOP(ref_u8, ref_u8, x); break;
    case 2: CONV_LOOP(ref_u16, ref_u16, x); break;
    case 4: CONV_LOOP(ref_i32, ref_i32, x); break;
    case 8: CONV_LOOP(ref_i64, ref_i64, x); break;
    default:
        for (int64_t i = 0; i < n; ++i)
            memcpy((char *)dst + i * ds, (const char *)src + i * ss, es);
    }
}

void ref_convert(void *dst, int32_t ddt, int64_t ds, const void *src, int32_t sdt, int64_t ss,
                 int64_t n) {
    if (n <= 0)
        return;
    if (ddt == sdt) {
        copy_same(dst, ds, src, ss, n, ref_dtype_size(ddt));
        return;
    }
    /* common direct pairs */
    if (ddt == FL_FLOAT32 && sdt == FL_FLOAT64) { CONV_LOOP(ref_f32, ref_f64, (float)x); return; }
    if (ddt == FL_FLOAT64 && sdt == FL_FLOAT32) { CONV_LOOP(ref_f64, ref_f32, (double)x); return; }
    if (ddt == FL_FLOAT32 && sdt == FL_INT64) { CONV_LOOP(ref_f32, ref_i64, (float)x); return; }
    if (ddt == FL_FLOAT32 && sdt == FL_INT32) { CONV_LOOP(ref_f32, ref_i32, (float)x); return; }
    if (ddt == FL_FLOAT32 && sdt == FL_BOOL) { CONV_LOOP(ref_f32, ref_u8, (float)(x != 0)); return; }
    if (ddt == FL_FLOAT32 && sdt == FL_UINT8) { CONV_LOOP(ref_f32, ref_u8, (float)x); return; }
#if defined(__F16C__) && defined(__AVX__)
    /* hardware conversion: the same round-to-nearest-even results */
    if (ddt == FL_FLOAT32 && sdt == FL_FLOAT16 && ss == 2 && ds == 4) {
        int64_t i = 0;
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps((float *)dst + i,
                             _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)src + i))));
        for (; i < n; ++i)
            ((ref_f32 *)dst)[i] = ref_half_to_float(((const ref_u16 *)src)[i]);
        return;
    }
    if (ddt == FL_FLOAT16 && sdt == FL_FLOAT32 && ss == 4 && ds == 2) {
        int64_t i = 0;
        for (; i + 8 <= n; i += 8)
            _mm_storeu_si128((__m128i *)((uint16_t *)dst + i),
                             _mm256_cvtps_ph(_mm256_loadu_ps((const float *)src + i),
                                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        for (; i < n; ++i)
            ((ref_u16 *)dst)[i] = ref_float_to_half(((const ref_f32 *)src)[i]);
        return;
    }
#endif
    if (ddt == FL_FLOAT32 && sdt == FL_FLOAT16) { CONV_LOOP(ref_f32, ref_u16, ref_half_to_float(x)); return; }
    if (ddt == FL_FLOAT32 && sdt == FL_BFLOAT16) { CONV_LOOP(ref_f32, ref_u16, ref_bf16_to_float(x)); return; }
    if (ddt == FL_FLOAT16 && sdt == FL_FLOAT32) { CONV_LOOP(ref_u16, ref_f32, ref_float_to_half(x)); return; }
    if (ddt == FL_BFLOAT16 && sdt == FL_FLOAT32) { CONV_LOOP(ref_u16, ref_f32, ref_float_to_bf16(x)); return; }
    if (ddt == FL_INT64 && sdt == FL_INT32) { CONV_LOOP(ref_i64, ref_i32, (int64_t)x); return; }
    if (ddt == FL_INT32 && sdt == FL_INT64) { CONV_LOOP(ref_i32, ref_i64, (int32_t)x); return; }
    if (ddt == FL_BOOL && sdt == FL_FLOAT32) { CONV_LOOP(ref_u8, ref_f32, (uint8_t)(x != 0.0f)); return; }
    if (ddt == FL_INT64 && sdt == FL_BOOL) { CONV_LOOP(ref_i64, ref_u8, (int64_t)(x != 0)); return; }

    const char *s = (const char *)src;
    char *d = (char *)dst;
    if (ref_is_floating(sdt)) {
        double buf[CONV_CHUNK];
        for (int64_t off = 0; off < n; off += CONV_CHUNK) {
            int64_t m = n - off < CONV_CHUNK ? n - off : CONV_CHUNK;
            load_chunk_f64(buf, s + off * ss, sdt, ss, m);
            store_chunk_f64(d + off * ds, ddt, ds, buf, m);
        }
    } else {
        int64_t buf[CONV_CHUNK];
        for (int64_t off = 0; off < n; off += CONV_CHUNK) {
            int64_t m = n - off < CONV_CHUNK ? n - off : CONV_CHUNK;
            load_chunk_i64(buf, s + off * ss, sdt, ss, m);
            store_chunk_i64(d + off * ds, ddt, ds, buf, m);
        }
    }
}

/* ======================================================================== */
/* tensors                                                                    */
/* ======================================================================== */

int64_t ref_numel(const fl_tensor *t) {
    int64_t n = 1;
    for (int32_t d = 0; d < t->ndim; ++d)
        n *= t->sizes[d];
    return n;
}

int ref_is_contiguous(const fl_tensor *t) {
    int64_t expected = 1;
    for (int32_t d = t->ndim - 1; d >= 0; --d) {
        if (t->sizes[d] == 1)
            continue;
        if (t->sizes[d] == 0)
            return 1;
        if (t->strides[d] != expected)
            return 0;
        expected *= t->sizes[d];
    }
    return 1;
}

int ref_same_sizes(const fl_tensor *a, const fl_tensor *b) {
    if (a->ndim != b->ndim)
        return 0;
    for (int32_t d = 0; d < a->ndim; ++d)
        if (a->sizes[d] != b->sizes[d])
            return 0;
    return 1;
}

int ref_byte_span(const fl_tensor *t, uintptr_t *lo, uintptr_t *hi) {
    int64_t es = (int64_t)ref_dtype_size(t->dtype);
    int64_t mn = 0, mx = 0;
    for (int32_t d = 0; d < t->ndim; ++d) {
        if (t->sizes[d] == 0)
            return 0;
        int64_t ext = (t->sizes[d] - 1) * t->strides[d];
        if (ext < 0)
            mn += ext;
        else
            mx += ext;
    }
    uintptr_t base = (uintptr_t)ref_tensor_data(t);
    *lo = base + (uintptr_t)(mn * es);
    *hi = base + (uintptr_t)((mx + 1) * es);
    return 1;
}

int ref_may_overlap(const fl_tensor *a, const fl_tensor *b) {
    uintptr_t alo, ahi, blo, bhi;
    if (!ref_byte_span(a, &alo, &ahi) || !ref_byte_span(b, &blo, &bhi))
        return 0;
    return alo < bhi && blo < ahi;
}

int ref_same_view(const fl_tensor *a, const fl_tensor *b) {
    if (ref_tensor_data(a) != ref_tensor_data(b) || a->dtype != b->dtype || !ref_same_sizes(a, b))
        return 0;
    for (int32_t d = 0; d < a->ndim; ++d)
        if (a->sizes[d] > 1 && a->strides[d] != b->strides[d])
            return 0;
    return 1;
}

/* ======================================================================== */
/* arguments                                                                  */
/* ======================================================================== */

static const char *kind_name(int32_t k) {
    switch (k) {
    case FL_ARG_NONE: return "None";
    case FL_ARG_TENSOR: return "Tensor";
    case FL_ARG_INT: return "int";
    case FL_ARG_FLOAT: return "float";
    case FL_ARG_BOOL: return "bool";
    case FL_ARG_INT_LIST: return "int[]";
    case FL_ARG_FLOAT_LIST: return "float[]";
    case FL_ARG_BOOL_LIST: return "bool[]";
    case FL_ARG_TENSOR_LIST: return "Tensor[]";
    case FL_ARG_STRING: return "str";
    default: return "unknown kind";
    }
}

fl_status ref_args_init(ref_args *a, const char *op, const fl_arg *args, uint32_t nargs,
                        uint32_t expected, ref_kernel_ctx *ctx) {
    a->args = args;
    a->nargs = nargs;
    a->ctx = ctx;
    a->op = op;
    if (nargs != expected)
        return ref_fail(a, "expected %u arguments (schema arguments then outputs), got %u",
                        expected, nargs);
    if (nargs > 0 && !args)
        return ref_fail(a, "argument array is NULL");
    return FL_SUCCESS;
}

int ref_arg_is_none(const ref_args *a, uint32_t i) {
    return i >= a->nargs || a->args[i].kind == FL_ARG_NONE;
}

static fl_status wrong_kind(const ref_args *a, uint32_t i, const char *name, const char *want) {
    int32_t k = i < a->nargs ? a->args[i].kind : FL_ARG_NONE;
    return ref_fail(a, "argument %u (%s) must be %s, got %s", i, name, want, kind_name(k));
}

static fl_status check_tensor(const ref_args *a, uint32_t i, const char *name,
                              const fl_tensor *t) {
    if (!t)
        return ref_fail(a, "argument %u (%s) is a NULL tensor", i, name);
    if (t->struct_size < FL_STRUCT_SIZE(fl_tensor, strides))
        return ref_fail(a, "argument %u (%s): fl_tensor.struct_size %zu is too small", i, name,
                        t->struct_size);
    if (!ref_dtype_valid(t->dtype))
        return ref_fail(a, "argument %u (%s): invalid dtype %d", i, name, (int)t->dtype);
    if (t->dtype == FL_COMPLEX64)
        return ref_fail(a, "argument %u (%s): complex64 is not supported by this kernel", i,
                        name);
    if (t->ndim < 0 || t->ndim > REF_MAX_DIMS)
        return ref_fail(a, "argument %u (%s): %d dims not supported (max %d)", i, name,
                        (int)t->ndim, REF_MAX_DIMS);
    if (t->ndim > 0 && (!t->sizes || !t->strides))
        return ref_fail(a, "argument %u (%s): NULL sizes/strides", i, name);
    int64_t n = 1;
    for (int32_t d = 0; d < t->ndim; ++d) {
        if (t->sizes[d] < 0)
            return ref_fail(a, "argument %u (%s): negative size %lld in dim %d", i, name,
                            (long long)t->sizes[d], (int)d);
        n *= t->sizes[d];
    }
    if (n > 0 && t->base == 0)
        return ref_fail(a, "argument %u (%s): NULL data pointer", i, name);
    return FL_SUCCESS;
}

fl_status ref_get_tensor(const ref_args *a, uint32_t i, const char *name, const fl_tensor **out) {
    if (i >= a->nargs || a->args[i].kind != FL_ARG_TENSOR)
        return wrong_kind(a, i, name, "a Tensor");
    REF_TRY(check_tensor(a, i, name, a->args[i].value.tensor));
    *out = a->args[i].value.tensor;
    return FL_SUCCESS;
}

fl_status ref_get_opt_tensor(const ref_args *a, uint32_t i, const char *name,
                             const fl_tensor **out) {
    if (ref_arg_is_none(a, i)) {
        *out = NULL;
        return FL_SUCCESS;
    }
    return ref_get_tensor(a, i, name, out);
}

static int scalar_from_arg(const fl_arg *arg, ref_scalar *s) {
    switch (arg->kind) {
    case FL_ARG_INT:
        s->kind = FL_ARG_INT;
        s->i = arg->value.i;
        s->f = (double)arg->value.i;
        return 1;
    case FL_ARG_BOOL:
        s->kind = FL_ARG_BOOL;
        s->i = arg->value.i != 0;
        s->f = (double)s->i;
        return 1;
    case FL_ARG_FLOAT:
        s->kind = FL_ARG_FLOAT;
        s->f = arg->value.f;
        s->i = ref_double_to_i64(arg->value.f);
        return 1;
    default:
        return 0;
    }
}

fl_status ref_get_operand(const ref_args *a, uint32_t i, const char *name, ref_operand *out) {
    memset(out, 0, sizeof *out);
    if (i < a->nargs && a->args[i].kind == FL_ARG_TENSOR)
        return ref_get_tensor(a, i, name, &out->t);
    if (i < a->nargs && scalar_from_arg(&a->args[i], &out->s))
        return FL_SUCCESS;
    return wrong_kind(a, i, name, "a Tensor or a scalar");
}

fl_status ref_get_scalar(const ref_args *a, uint32_t i, const char *name, ref_scalar *out) {
    if (i < a->nargs && scalar_from_arg(&a->args[i], out))
        return FL_SUCCESS;
    return wrong_kind(a, i, name, "a Scalar (int, float or bool)");
}

fl_status ref_get_opt_scalar(const ref_args *a, uint32_t i, const char *name, int *present,
                             ref_scalar *out) {
    *present = 0;
    if (ref_arg_is_none(a, i))
        return FL_SUCCESS;
    *present = 1;
    return ref_get_scalar(a, i, name, out);
}

fl_status ref_get_int(const ref_args *a, uint32_t i, const char *name, int64_t *out) {
    if (i < a->nargs && (a->args[i].kind == FL_ARG_INT || a->args[i].kind == FL_ARG_BOOL)) {
        *out = a->args[i].value.i;
        return FL_SUCCESS;
    }
    return wrong_kind(a, i, name, "an int");
}

fl_status ref_get_opt_int(const ref_args *a, uint32_t i, const char *name, int *present,
                          int64_t *out) {
    *present = 0;
    if (ref_arg_is_none(a, i))
        return FL_SUCCESS;
    *present = 1;
    return ref_get_int(a, i, name, out);
}

fl_status ref_get_double(const ref_args *a, uint32_t i, const char *name, double *out) {
    ref_scalar s;
    if (i < a->nargs && scalar_from_arg(&a->args[i], &s)) {
        *out = s.f;
        return FL_SUCCESS;
    }
    return wrong_kind(a, i, name, "a float");
}

fl_status ref_get_bool(const ref_args *a, uint32_t i, const char *name, int *out) {
    if (i < a->nargs && (a->args[i].kind == FL_ARG_BOOL || a->args[i].kind == FL_ARG_INT)) {
        *out = a->args[i].value.i != 0;
        return FL_SUCCESS;
    }
    return wrong_kind(a, i, name, "a bool");
}

fl_status ref_out_variant(const char *op, const fl_arg *args, uint32_t nargs,
                          ref_kernel_ctx *ctx, ref_kernel_fn fn) {
    const fl_tensor *arg = nargs >= 2 && args[nargs - 2].kind == FL_ARG_TENSOR
                               ? args[nargs - 2].value.tensor : NULL;
    const fl_tensor *res = nargs >= 2 && args[nargs - 1].kind == FL_ARG_TENSOR
                               ? args[nargs - 1].value.tensor : NULL;
    if (!arg || !res || arg->base != res->base || arg->byte_offset != res->byte_offset)
        return ref_kernel_fail(ctx, "%s: expected the out= argument followed by the same tensor "
                                    "as the result", op);
    return fn(args, nargs - 1, ctx);
}

fl_status ref_get_string(const ref_args *a, uint32_t i, const char *name, const char **out) {
    if (i < a->nargs && a->args[i].kind == FL_ARG_STRING && a->args[i].value.str) {
        *out = a->args[i].value.str;
        return FL_SUCCESS;
    }
    return wrong_kind(a, i, name, "a string");
}

fl_status ref_get_tensor_list(const ref_args *a, uint32_t i, const char *name, int allow_none,
                              const fl_tensor *const **out, uint32_t *count) {
    if (i >= a->nargs || a->args[i].kind != FL_ARG_TENSOR_LIST)
        return wrong_kind(a, i, name, "a Tensor[]");
    *out = a->args[i].value.tensors;
    *count = a->args[i].count;
    for (uint32_t k = 0; k < *count; ++k) {
        if (!(*out)[k]) {
            if (!allow_none)
                return ref_fail(a, "%s[%u] is None; a tensor is required", name, k);
            continue;
        }
        REF_TRY(check_tensor(a, i, name, (*out)[k]));
    }
    return FL_SUCCESS;
}

fl_status ref_get_int_list(const ref_args *a, uint32_t i, const char *name,
                           const int64_t **vals, uint32_t *count) {
    if (i < a->nargs && a->args[i].kind == FL_ARG_INT_LIST) {
        if (a->args[i].count > 0 && !a->args[i].value.ints)
            return ref_fail(a, "argument %u (%s): NULL list", i, name);
        *vals = a->args[i].value.ints;
        *count = a->args[i].count;
        return FL_SUCCESS;
    }
    if (i < a->nargs && a->args[i].kind == FL_ARG_INT) {
        *vals = &a->args[i].value.i;
        *count = 1;
        return FL_SUCCESS;
    }
    return wrong_kind(a, i, name, "an int list");
}

fl_status ref_get_opt_int_list(const ref_args *a, uint32_t i, const char *name, int *present,
                               const int64_t **vals, uint32_t *count) {
    *present = 0;
    *vals = NULL;
    *count = 0;
    if (ref_arg_is_none(a, i))
        return FL_SUCCESS;
    *present = 1;
    return ref_get_int_list(a, i, name, vals, count);
}

fl_status ref_get_bool_list(const ref_args *a, uint32_t i, const char *name,
                            const int64_t **vals, uint32_t *count) {
    if (i < a->nargs && (a->args[i].kind == FL_ARG_BOOL_LIST || a->args[i].kind == FL_ARG_INT_LIST)) {
        if (a->args[i].count > 0 && !a->args[i].value.ints)
            return ref_fail(a, "argument %u (%s): NULL list", i, name);
        *vals = a->args[i].value.ints;
        *count = a->args[i].count;
        return FL_SUCCESS;
    }
    return wrong_kind(a, i, name, "a bool list");
}

fl_status ref_get_generator(const ref_args *a, uint32_t i, const char *name, uint64_t *seed,
                            uint64_t *offset) {
    *seed = 0;
    *offset = 0;
    if (ref_arg_is_none(a, i))
        return FL_SUCCESS;
    if (a->args[i].kind != FL_ARG_INT_LIST)
        return wrong_kind(a, i, name, "a generator state {seed, offset} (int list) or None");
    if (a->args[i].count != 2 || !a->args[i].value.ints)
        return ref_fail(a, "argument %u (%s): generator state must be {seed, offset}, got %u ints",
                        i, name, a->args[i].count);
    *seed = (uint64_t)a->args[i].value.ints[0];
    *offset = (uint64_t)a->args[i].value.ints[1];
    return FL_SUCCESS;
}

fl_status ref_get_opt_dtype(const ref_args *a, uint32_t i, const char *name, int *present,
                            int32_t *out) {
    int64_t v = 0;
    REF_TRY(ref_get_opt_int(a, i, name, present, &v));
    if (*present) {
        if (!ref_dtype_valid((int32_t)v) || v != (int32_t)v)
            return ref_fail(a, "argument %u (%s): %lld is not an fl_dtype", i, name, (long long)v);
        *out = (int32_t)v;
    }
    return FL_SUCCESS;
}

fl_status ref_wrap_dim(const ref_args *a, int64_t dim, int32_t ndim, int32_t *out) {
    int64_t n = ndim > 0 ? ndim : 1;
    int64_t d = dim < 0 ? dim + n : dim;
    if (d < 0 || d >= n)
        return ref_fail(a, "dimension %lld out of range for a %d-dim tensor", (long long)dim,
                        (int)ndim);
    *out = (int32_t)d;
    return FL_SUCCESS;
}

fl_status ref_check_dtype(const ref_args *a, const fl_tensor *t, const char *name, uint64_t mask) {
    if (!(mask & REF_DT(t->dtype)))
        return ref_fail(a, "%s: dtype %s is not supported", name, ref_dtype_name(t->dtype));
    return FL_SUCCESS;
}

/* ======================================================================== */
/* type promotion                                                             */
/* ======================================================================== */

static int32_t promote_skip(int32_t a, int32_t b) {
    if (a < 0)
        return b;
    if (b < 0)
        return a;
    return ref_promote_types(a, b);
}

static int32_t combine_categories(int32_t higher, int32_t lower) {
    if (higher >= 0 && ref_is_floating(higher))
        return higher;
    if (higher == FL_BOOL || (lower >= 0 && ref_is_floating(lower)))
        return promote_skip(higher, lower);
    if (higher >= 0)
        return higher;
    return lower;
}

int32_t ref_result_type(const ref_operand *ops, int n) {
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

/* ======================================================================== */
/* strided iteration                                                          */
/* ======================================================================== */

#define ITER_MAX_OPS 8

int ref_simplify_dims(int ndim, const int64_t *sizes, int nops, int64_t strides[][REF_MAX_DIMS],
                      int order_op, int64_t *sz, int64_t st[][REF_MAX_DIMS]) {
    int nd = 0;
    for (int d = 0; d < ndim; ++d) {
        if (sizes[d] == 0)
            return -1;
        if (sizes[d] == 1)
            continue;
        sz[nd] = sizes[d];
        for (int k = 0; k < nops; ++k)
            st[k][nd] = strides[k][d];
        ++nd;
    }
    /* order: largest |stride| of order_op outermost (stable insertion sort) */
    if (order_op >= 0 && order_op < nops) {
        for (int i = 1; i < nd; ++i) {
            int j = i;
            while (j > 0) {
                int64_t a = st[order_op][j - 1], b = st[order_op][j];
                if (a < 0) a = -a;
                if (b < 0) b = -b;
                if (a >= b)
                    break;
                int64_t t = sz[j];
                sz[j] = sz[j - 1];
                sz[j - 1] = t;
                for (int k = 0; k < nops; ++k) {
                    t = st[k][j];
                    st[k][j] = st[k][j - 1];
                    st[k][j - 1] = t;
                }
                --j;
            }
        }
    }
    /* coalesce (outer p, inner d) when st[k][p] == st[k][d] * sz[d] for all k */
    if (nd > 1) {
        int out = 0;
        for (int d = 1; d < nd; ++d) {
            int ok = 1;
            for (int k = 0; k < nops; ++k)
                if (st[k][out] != st[k][d] * sz[d]) {
                    ok = 0;
                    break;
                }
            if (ok) {
                sz[out] *= sz[d];
                for (int k = 0; k < nops; ++k)
                    st[k][out] = st[k][d];
            } else {
                ++out;
                sz[out] = sz[d];
                for (int k = 0; k < nops; ++k)
                    st[k][out] = st[k][d];
            }
        }
        nd = out + 1;
    }
    return nd;
}

void ref_for_each_row(int ndim, const int64_t *sizes, int nops, char *const *ptrs,
                      int64_t strides[][REF_MAX_DIMS], int order_op, ref_row_fn fn,
                      void *ctx) {
    int64_t sz[REF_MAX_DIMS];
    int64_t st[ITER_MAX_OPS][REF_MAX_DIMS];
    if (nops > ITER_MAX_OPS || ndim > REF_MAX_DIMS)
        return; /* callers never do this */
    int nd = ref_simplify_dims(ndim, sizes, nops, strides, order_op, sz, st);
    if (nd < 0)
        return;
    char *cur[ITER_MAX_OPS];
    int64_t inner_st[ITER_MAX_OPS];
    for (int k = 0; k < nops; ++k)
        cur[k] = ptrs[k];
    if (nd == 0) {
        for (int k = 0; k < nops; ++k)
            inner_st[k] = 0;
        fn(cur, inner_st, 1, ctx);
        return;
    }
    int inner = nd - 1;
    int64_t n = sz[inner];
    for (int k = 0; k < nops; ++k)
        inner_st[k] = st[k][inner];
    int64_t idx[REF_MAX_DIMS] = {0};
    char *row[ITER_MAX_OPS];
    for (;;) {
        for (int k = 0; k < nops; ++k)
            row[k] = cur[k];
        fn(row, inner_st, n, ctx);
        int d = inner - 1;
        for (; d >= 0; --d) {
            ++idx[d];
            for (int k = 0; k < nops; ++k)
                cur[k] += st[k][d];
            if (idx[d] < sz[d])
                break;
            for (int k = 0; k < nops; ++k)
                cur[k] -= st[k][d] * sz[d];
            idx[d] = 0;
        }
        if (d < 0)
            break;
    }
}

fl_status ref_broadcast_strides(const ref_args *a, const fl_tensor *t, const char *name,
                                int ndim, const int64_t *sizes, int64_t *strides_bytes) {
    int64_t es = (int64_t)ref_dtype_size(t->dtype);
    if (t->ndim > ndim)
        return ref_fail(a, "%s has %d dims, more than the %d-dim result", name, (int)t->ndim,
                        ndim);
    int lead = ndim - t->ndim;
    for (int d = 0; d < ndim; ++d) {
        if (d < lead) {
            strides_bytes[d] = 0;
            continue;
        }
        int64_t s = t->sizes[d - lead];
        if (s == sizes[d])
            strides_bytes[d] = s == 1 ? 0 : t->strides[d - lead] * es;
        else if (s == 1)
            strides_bytes[d] = 0;
        else
            return ref_fail(a, "%s of size %lld in dim %d does not broadcast to size %lld", name,
                            (long long)s, d - lead, (long long)sizes[d]);
    }
    return FL_SUCCESS;
}

/* ======================================================================== */
/* elementwise engine                                                         */
/* ======================================================================== */

#define EW_CHUNK 256

typedef struct ew_state {
    const ref_ew_desc *d;
    int nops;
    int any_cast;
    int cast[REF_EW_MAX_OPS];
    int32_t tdt[REF_EW_MAX_OPS]; /* dtype in memory */
    int32_t ldt[REF_EW_MAX_OPS]; /* dtype the loop uses */
    int32_t via[REF_EW_MAX_OPS]; /* intermediate dtype, or -1 */
    char *scratch;
    int64_t lsz[REF_EW_MAX_OPS];
    char *buf[REF_EW_MAX_OPS];
} ew_state;

/* input chunk -> loop dtype, through the via dtype when there is one */
static void ew_cast_in(const ew_state *s, int k, const char *src, int64_t stride, int64_t m) {
    if (s->via[k] < 0) {
        ref_convert(s->buf[k], s->ldt[k], s->lsz[k], src, s->tdt[k], stride, m);
        return;
    }
    int64_t vsz = (int64_t)ref_dtype_size(s->via[k]);
    ref_convert(s->scratch, s->via[k], vsz, src, s->tdt[k], stride, m);
    ref_convert(s->buf[k], s->ldt[k], s->lsz[k], s->scratch, s->via[k], vsz, m);
}

static void ew_row(char **ptrs, const int64_t *strides, int64_t n, void *vs) {
    ew_state *s = (ew_state *)vs;
    const ref_ew_desc *d = s->d;
    if (!s->any_cast) {
        d->fn(ptrs, strides, n, d->params);
        return;
    }
    char *p[REF_EW_MAX_OPS];
    int64_t st[REF_EW_MAX_OPS];
    /* broadcast inputs that need a cast: convert their single element once */
    for (int k = 1; k < s->nops; ++k)
        if (s->cast[k] && strides[k] == 0)
            ew_cast_in(s, k, ptrs[k], 0, 1);
    for (int64_t off = 0; off < n; off += EW_CHUNK) {
        int64_t m = n - off < EW_CHUNK ? n - off : EW_CHUNK;
        for (int k = 0; k < s->nops; ++k) {
            char *src = ptrs[k] + off * strides[k];
            if (!s->cast[k]) {
                p[k] = src;
                st[k] = strides[k];
            } else if (k > 0 && strides[k] == 0) {
                p[k] = s->buf[k];
                st[k] = 0;
            } else {
                p[k] = s->buf[k];
                st[k] = s->lsz[k];
                if (k > 0)
                    ew_cast_in(s, k, src, strides[k], m);
            }
        }
        d->fn(p, st, m, d->params);
        if (s->cast[0])
            ref_convert(ptrs[0] + off * strides[0], s->tdt[0], strides[0], s->buf[0], s->ldt[0],
                        s->lsz[0], m);
    }
}

fl_status ref_elementwise(const ref_args *a, const ref_ew_desc *d) {
    const fl_tensor *out = d->out;
    int nd = out->ndim;
    int nops = 1 + d->nin;
    if (d->nin < 0 || d->nin > REF_EW_MAX_INPUTS)
        return ref_fail(a, "internal: too many elementwise inputs");
    if (!ref_dtype_valid(d->out_dtype) || d->out_dtype == FL_COMPLEX64)
        return ref_fail(a, "internal: bad loop dtype");

    int64_t strides[REF_EW_MAX_OPS][REF_MAX_DIMS];
    char *ptrs[REF_EW_MAX_OPS];
    _Alignas(64) char scalar_buf[REF_EW_MAX_OPS][16];
    _Alignas(64) char chunk_buf[REF_EW_MAX_OPS][EW_CHUNK * 8];
    _Alignas(64) char scratch[EW_CHUNK * 8];
    ew_state s;
    memset(&s, 0, sizeof s);
    s.d = d;
    s.nops = nops;
    s.scratch = scratch;
    for (int k = 0; k < REF_EW_MAX_OPS; ++k)
        s.via[k] = -1;

    int64_t numel = ref_numel(out);
    int64_t oes = (int64_t)ref_dtype_size(out->dtype);
    for (int i = 0; i < nd; ++i) {
        strides[0][i] = out->strides[i] * oes;
        /* an empty output may have any strides: nothing is written */
        if (numel > 0 && out->sizes[i] > 1 && out->strides[i] == 0)
            return ref_fail(a, "the output has more than one element at the same memory "
                               "location (stride 0 in dim %d)", i);
    }
    ptrs[0] = (char *)ref_tensor_data(out);
    s.tdt[0] = out->dtype;
    s.ldt[0] = d->out_dtype;

    for (int k = 1; k < nops; ++k) {
        const ref_operand *op = &d->in[k - 1];
        int32_t ldt = d->in_dtypes[k - 1];
        if (!ref_dtype_valid(ldt) || ldt == FL_COMPLEX64)
            return ref_fail(a, "internal: bad loop dtype");
        s.ldt[k] = ldt;
        if (op->t) {
            char name[32];
            snprintf(name, sizeof name, "input %d", k - 1);
            REF_TRY(ref_broadcast_strides(a, op->t, name, nd, out->sizes, strides[k]));
            ptrs[k] = (char *)ref_tensor_data(op->t);
            s.tdt[k] = op->t->dtype;
            if (d->in_via && d->in_via[k - 1] >= 0 && d->in_via[k - 1] != s.tdt[k] &&
                d->in_via[k - 1] != ldt) {
                if (!ref_dtype_valid(d->in_via[k - 1]) || d->in_via[k - 1] == FL_COMPLEX64)
                    return ref_fail(a, "internal: bad intermediate dtype");
                s.via[k] = d->in_via[k - 1];
            }
        } else {
            int32_t sdt = ldt;
            if (d->in_via && d->in_via[k - 1] >= 0 && d->in_via[k - 1] != ldt &&
                ref_dtype_valid(d->in_via[k - 1]) && d->in_via[k - 1] != FL_COMPLEX64)
                sdt = d->in_via[k - 1]; /* through the common dtype, like PyTorch */
            if (op->s.kind == FL_ARG_FLOAT)
                ref_store_f64(scalar_buf[k], sdt, op->s.f);
            else
                ref_store_i64(scalar_buf[k], sdt, op->s.i);
            if (sdt != ldt) {
                char tmp[16];
                memcpy(tmp, scalar_buf[k], sizeof tmp);
                ref_convert(scalar_buf[k], ldt, 0, tmp, sdt, 0, 1);
            }
            ptrs[k] = scalar_buf[k];
            for (int i = 0; i < nd; ++i)
                strides[k][i] = 0;
            s.tdt[k] = ldt;
        }
    }
    if (numel == 0)
        return FL_SUCCESS;
    for (int k = 0; k < nops; ++k) {
        s.lsz[k] = (int64_t)ref_dtype_size(s.ldt[k]);
        s.cast[k] = s.tdt[k] != s.ldt[k];
        s.buf[k] = chunk_buf[k];
        s.any_cast |= s.cast[k];
    }
    ref_for_each_row(nd, out->sizes, nops, ptrs, strides, 0, ew_row, &s);
    return FL_SUCCESS;
}

/* ======================================================================== */
/* memory                                                                     */
/* ======================================================================== */

void *ref_alloc(size_t bytes) {
    void *p = NULL;
    if (bytes == 0)
        bytes = 64;
    if (posix_memalign(&p, 64, bytes) != 0)
        return NULL;
    return p;
}

void ref_free(void *p) { free(p); }

/* ======================================================================== */
/* BLAS                                                                       */
/* ======================================================================== */

fl_status ref_gemm(const ref_args *a, int32_t dtype, int trans_a, int trans_b, int64_t m,
                   int64_t n, int64_t k, double alpha, const void *A, int64_t lda,
                   const void *B, int64_t ldb, double beta, void *C, int64_t ldc) {
    if (m <= 0 || n <= 0)
        return FL_SUCCESS;
    if (m > INT_MAX || n > INT_MAX || k > INT_MAX || lda > INT_MAX || ldb > INT_MAX ||
        ldc > INT_MAX)
        return ref_fail(a, "matrix dimension too large for BLAS (m=%lld n=%lld k=%lld)",
                        (long long)m, (long long)n, (long long)k);
    /* BLAS requires ld >= max(1, columns) of the stored matrix even when unused */
    int64_t ca = trans_a ? m : k, cb = trans_b ? k : n;
    if (lda < 1) lda = 1;
    if (ldb < 1) ldb = 1;
    if (lda < ca) lda = ca;
    if (ldb < cb) ldb = cb;
    if (ldc < n) ldc = n;
    enum CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE tb = trans_b ? CblasTrans : CblasNoTrans;
    if (dtype == FL_FLOAT32)
        scipy_cblas_sgemm(CblasRowMajor, ta, tb, (blasint)m, (blasint)n, (blasint)k, (float)alpha,
                          (const float *)A, (blasint)lda, (const float *)B, (blasint)ldb,
                          (float)beta, (float *)C, (blasint)ldc);
    else if (dtype == FL_FLOAT64)
        scipy_cblas_dgemm(CblasRowMajor, ta, tb, (blasint)m, (blasint)n, (blasint)k, alpha,
                          (const double *)A, (blasint)lda, (const double *)B, (blasint)ldb, beta,
                          (double *)C, (blasint)ldc);
    else
        return ref_fail(a, "gemm: dtype %s not supported", ref_dtype_name(dtype));
    return FL_SUCCESS;
}

fl_status ref_gemm_batch(const ref_args *a, int32_t dtype, int trans_a, int trans_b, int64_t m,
                         int64_t n, int64_t k, double alpha, const void *A, int64_t lda,
                         int64_t sa, const void *B, int64_t ldb, int64_t sb, double beta, void *C,
                         int64_t ldc, int64_t sc, int64_t count) {
    if (m <= 0 || n <= 0 || count <= 0)
        return FL_SUCCESS;
    const size_t es = ref_dtype_size(dtype);
    int64_t ca = trans_a ? m : k, cb = trans_b ? k : n;
    int fits = count <= INT_MAX && m <= INT_MAX && n <= INT_MAX && k <= INT_MAX &&
               lda <= INT_MAX && ldb <= INT_MAX && ldc <= INT_MAX && sa >= 0 && sb >= 0 &&
               sc >= 0 && sa <= INT_MAX && sb <= INT_MAX && sc <= INT_MAX && k > 0 &&
               lda >= (ca > 1 ? ca : 1) && ldb >= (cb > 1 ? cb : 1) && ldc >= n;
    if (count == 1 || !fits || (dtype != FL_FLOAT32 && dtype != FL_FLOAT64)) {
        for (int64_t i = 0; i < count; ++i)
            REF_TRY(ref_gemm(a, dtype, trans_a, trans_b, m, n, k, alpha,
                             (const char *)A + (size_t)(i * sa) * es, lda,
                             (const char *)B + (size_t)(i * sb) * es, ldb, beta,
                             (char *)C + (size_t)(i * sc) * es, ldc));
        return FL_SUCCESS;
    }
    enum CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE tb = trans_b ? CblasTrans : CblasNoTrans;
    if (dtype == FL_FLOAT32)
        scipy_cblas_sgemm_batch_strided(CblasRowMajor, ta, tb, (blasint)m, (blasint)n, (blasint)k,
                                        (float)alpha, (const float *)A, (blasint)lda, (blasint)sa,
                                        (const float *)B, (blasint)ldb, (blasint)sb, (float)beta,
                                        (float *)C, (blasint)ldc, (blasint)sc, (blasint)count);
    else
        scipy_cblas_dgemm_batch_strided(CblasRowMajor, ta, tb, (blasint)m, (blasint)n, (blasint)k,
                                        alpha, (const double *)A, (blasint)lda, (blasint)sa,
                                        (const double *)B, (blasint)ldb, (blasint)sb, beta,
                                        (double *)C, (blasint)ldc, (blasint)sc, (blasint)count);
    return FL_SUCCESS;
}
