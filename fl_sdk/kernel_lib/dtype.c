/*
 * dtype.c -- dtype names, element load/store and bulk conversion between
 * every dtype a chip stores (fl_kernel.h sections 2 and 3).
 */
#include "fl_kernel.h"

#if defined(__F16C__) && defined(__AVX__)
#include <immintrin.h>
#endif

const char *flk_dtype_name(int32_t dt) {
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
    case FL_FLOAT8_E4M3FN: return "float8_e4m3fn";
    case FL_FLOAT8_E5M2: return "float8_e5m2";
    case FL_FLOAT8_E4M3FNUZ: return "float8_e4m3fnuz";
    case FL_FLOAT8_E5M2FNUZ: return "float8_e5m2fnuz";
    default: return "unknown dtype";
    }
}


double flk_load_f64(const void *p, int32_t dt) {
    switch (dt) {
    case FL_FLOAT32: return *(const flk_f32 *)p;
    case FL_FLOAT64: return *(const flk_f64 *)p;
    case FL_FLOAT16: return flk_half_to_float(*(const flk_u16 *)p);
    case FL_BFLOAT16: return flk_bf16_to_float(*(const flk_u16 *)p);
    case FL_INT8: return *(const flk_i8 *)p;
    case FL_UINT8: return *(const flk_u8 *)p;
    case FL_INT16: return *(const flk_i16 *)p;
    case FL_INT32: return *(const flk_i32 *)p;
    case FL_INT64: return (double)*(const flk_i64 *)p;
    case FL_BOOL: return *(const flk_u8 *)p != 0;
    default: return flk_is_fp8(dt) ? flk_fp8_to_float(*(const flk_u8 *)p, dt) : 0.0;
    }
}

int64_t flk_load_i64(const void *p, int32_t dt) {
    switch (dt) {
    case FL_FLOAT32: case FL_FLOAT64: case FL_FLOAT16: case FL_BFLOAT16:
    case FL_FLOAT8_E4M3FN: case FL_FLOAT8_E5M2: case FL_FLOAT8_E4M3FNUZ: case FL_FLOAT8_E5M2FNUZ:
        return flk_double_to_i64(flk_load_f64(p, dt));
    case FL_INT8: return *(const flk_i8 *)p;
    case FL_UINT8: return *(const flk_u8 *)p;
    case FL_INT16: return *(const flk_i16 *)p;
    case FL_INT32: return *(const flk_i32 *)p;
    case FL_INT64: return *(const flk_i64 *)p;
    case FL_BOOL: return *(const flk_u8 *)p != 0;
    default: return 0;
    }
}

void flk_store_f64(void *p, int32_t dt, double v) {
    switch (dt) {
    case FL_FLOAT32: *(flk_f32 *)p = (float)v; break;
    case FL_FLOAT64: *(flk_f64 *)p = v; break;
    case FL_FLOAT16: *(flk_u16 *)p = flk_float_to_half((float)v); break;
    case FL_BFLOAT16: *(flk_u16 *)p = flk_float_to_bf16((float)v); break;
    case FL_INT8: *(flk_i8 *)p = (int8_t)flk_double_to_i64(v); break;
    case FL_UINT8: *(flk_u8 *)p = (uint8_t)flk_double_to_i64(v); break;
    case FL_INT16: *(flk_i16 *)p = (int16_t)flk_double_to_i64(v); break;
    case FL_INT32: *(flk_i32 *)p = (int32_t)flk_double_to_i64(v); break;
    case FL_INT64: *(flk_i64 *)p = flk_double_to_i64(v); break;
    case FL_BOOL: *(flk_u8 *)p = (v != 0.0); break;
    default:
        if (flk_is_fp8(dt))
            *(flk_u8 *)p = flk_fp8_from_float((float)v, dt);   /* through float32, as PyTorch */
        break;
    }
}

void flk_store_i64(void *p, int32_t dt, int64_t v) {
    switch (dt) {
    case FL_FLOAT32: *(flk_f32 *)p = (float)v; break;
    case FL_FLOAT64: *(flk_f64 *)p = (double)v; break;
    case FL_FLOAT16: *(flk_u16 *)p = flk_float_to_half((float)v); break;
    case FL_BFLOAT16: *(flk_u16 *)p = flk_float_to_bf16((float)v); break;
    case FL_INT8: *(flk_i8 *)p = (int8_t)v; break;
    case FL_UINT8: *(flk_u8 *)p = (uint8_t)v; break;
    case FL_INT16: *(flk_i16 *)p = (int16_t)v; break;
    case FL_INT32: *(flk_i32 *)p = (int32_t)v; break;
    case FL_INT64: *(flk_i64 *)p = v; break;
    case FL_BOOL: *(flk_u8 *)p = (v != 0); break;
    default:
        if (flk_is_fp8(dt))
            *(flk_u8 *)p = flk_fp8_from_float((float)v, dt);
        break;
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
    case FL_FLOAT32: for (int64_t i = 0; i < n; ++i) buf[i] = *(const flk_f32 *)(src + i * ss); break;
    case FL_FLOAT64: for (int64_t i = 0; i < n; ++i) buf[i] = *(const flk_f64 *)(src + i * ss); break;
    case FL_FLOAT16: for (int64_t i = 0; i < n; ++i) buf[i] = flk_half_to_float(*(const flk_u16 *)(src + i * ss)); break;
    case FL_BFLOAT16: for (int64_t i = 0; i < n; ++i) buf[i] = flk_bf16_to_float(*(const flk_u16 *)(src + i * ss)); break;
    default: for (int64_t i = 0; i < n; ++i) buf[i] = flk_load_f64(src + i * ss, dt); break;
    }
}

static void load_chunk_i64(int64_t *buf, const char *src, int32_t dt, int64_t ss, int64_t n) {
    switch (dt) {
    case FL_INT8: for (int64_t i = 0; i < n; ++i) buf[i] = *(const flk_i8 *)(src + i * ss); break;
    case FL_UINT8: for (int64_t i = 0; i < n; ++i) buf[i] = *(const flk_u8 *)(src + i * ss); break;
    case FL_INT16: for (int64_t i = 0; i < n; ++i) buf[i] = *(const flk_i16 *)(src + i * ss); break;
    case FL_INT32: for (int64_t i = 0; i < n; ++i) buf[i] = *(const flk_i32 *)(src + i * ss); break;
    case FL_INT64: for (int64_t i = 0; i < n; ++i) buf[i] = *(const flk_i64 *)(src + i * ss); break;
    case FL_BOOL: for (int64_t i = 0; i < n; ++i) buf[i] = *(const flk_u8 *)(src + i * ss) != 0; break;
    default: for (int64_t i = 0; i < n; ++i) buf[i] = flk_load_i64(src + i * ss, dt); break;
    }
}

static void store_chunk_f64(char *dst, int32_t dt, int64_t ds, const double *buf, int64_t n) {
    switch (dt) {
    case FL_FLOAT32: for (int64_t i = 0; i < n; ++i) *(flk_f32 *)(dst + i * ds) = (float)buf[i]; break;
    case FL_FLOAT64: for (int64_t i = 0; i < n; ++i) *(flk_f64 *)(dst + i * ds) = buf[i]; break;
    default: for (int64_t i = 0; i < n; ++i) flk_store_f64(dst + i * ds, dt, buf[i]); break;
    }
}

static void store_chunk_i64(char *dst, int32_t dt, int64_t ds, const int64_t *buf, int64_t n) {
    switch (dt) {
    case FL_FLOAT32: for (int64_t i = 0; i < n; ++i) *(flk_f32 *)(dst + i * ds) = (float)buf[i]; break;
    case FL_FLOAT64: for (int64_t i = 0; i < n; ++i) *(flk_f64 *)(dst + i * ds) = (double)buf[i]; break;
    case FL_INT64: for (int64_t i = 0; i < n; ++i) *(flk_i64 *)(dst + i * ds) = buf[i]; break;
    case FL_INT32: for (int64_t i = 0; i < n; ++i) *(flk_i32 *)(dst + i * ds) = (int32_t)buf[i]; break;
    case FL_BOOL: for (int64_t i = 0; i < n; ++i) *(flk_u8 *)(dst + i * ds) = buf[i] != 0; break;
    default: for (int64_t i = 0; i < n; ++i) flk_store_i64(dst + i * ds, dt, buf[i]); break;
    }
}

static void copy_same(void *dst, int64_t ds, const void *src, int64_t ss, int64_t n, size_t es) {
    if (ds == (int64_t)es && ss == (int64_t)es) {
        memcpy(dst, src, (size_t)n * es);
        return;
    }
    switch (es) {
    case 1: CONV_LOOP(flk_u8, flk_u8, x); break;
    case 2: CONV_LOOP(flk_u16, flk_u16, x); break;
    case 4: CONV_LOOP(flk_i32, flk_i32, x); break;
    case 8: CONV_LOOP(flk_i64, flk_i64, x); break;
    default:
        for (int64_t i = 0; i < n; ++i)
            memcpy((char *)dst + i * ds, (const char *)src + i * ss, es);
    }
}

void flk_convert(void *dst, int32_t ddt, int64_t ds, const void *src, int32_t sdt, int64_t ss,
                 int64_t n) {
    if (n <= 0)
        return;
    if (ddt == sdt) {
        copy_same(dst, ds, src, ss, n, flk_dtype_size(ddt));
        return;
    }
    /* common direct pairs */
    if (ddt == FL_FLOAT32 && sdt == FL_FLOAT64) { CONV_LOOP(flk_f32, flk_f64, (float)x); return; }
    if (ddt == FL_FLOAT64 && sdt == FL_FLOAT32) { CONV_LOOP(flk_f64, flk_f32, (double)x); return; }
    if (ddt == FL_FLOAT32 && sdt == FL_INT64) { CONV_LOOP(flk_f32, flk_i64, (float)x); return; }
    if (ddt == FL_FLOAT32 && sdt == FL_INT32) { CONV_LOOP(flk_f32, flk_i32, (float)x); return; }
    if (ddt == FL_FLOAT32 && sdt == FL_BOOL) { CONV_LOOP(flk_f32, flk_u8, (float)(x != 0)); return; }
    if (ddt == FL_FLOAT32 && sdt == FL_UINT8) { CONV_LOOP(flk_f32, flk_u8, (float)x); return; }
#if defined(__F16C__) && defined(__AVX__)
    /* hardware conversion: the same round-to-nearest-even results */
    if (ddt == FL_FLOAT32 && sdt == FL_FLOAT16 && ss == 2 && ds == 4) {
        int64_t i = 0;
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps((float *)dst + i,
                             _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)src + i))));
        for (; i < n; ++i)
            ((flk_f32 *)dst)[i] = flk_half_to_float(((const flk_u16 *)src)[i]);
        return;
    }
    if (ddt == FL_FLOAT16 && sdt == FL_FLOAT32 && ss == 4 && ds == 2) {
        int64_t i = 0;
        for (; i + 8 <= n; i += 8)
            _mm_storeu_si128((__m128i *)((uint16_t *)dst + i),
                             _mm256_cvtps_ph(_mm256_loadu_ps((const float *)src + i),
                                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        for (; i < n; ++i)
            ((flk_u16 *)dst)[i] = flk_float_to_half(((const flk_f32 *)src)[i]);
        return;
    }
#endif
    if (ddt == FL_FLOAT32 && sdt == FL_FLOAT16) { CONV_LOOP(flk_f32, flk_u16, flk_half_to_float(x)); return; }
    if (ddt == FL_FLOAT32 && sdt == FL_BFLOAT16) { CONV_LOOP(flk_f32, flk_u16, flk_bf16_to_float(x)); return; }
    if (ddt == FL_FLOAT16 && sdt == FL_FLOAT32) { CONV_LOOP(flk_u16, flk_f32, flk_float_to_half(x)); return; }
    if (ddt == FL_BFLOAT16 && sdt == FL_FLOAT32) { CONV_LOOP(flk_u16, flk_f32, flk_float_to_bf16(x)); return; }
    if (ddt == FL_INT64 && sdt == FL_INT32) { CONV_LOOP(flk_i64, flk_i32, (int64_t)x); return; }
    if (ddt == FL_INT32 && sdt == FL_INT64) { CONV_LOOP(flk_i32, flk_i64, (int32_t)x); return; }
    if (ddt == FL_BOOL && sdt == FL_FLOAT32) { CONV_LOOP(flk_u8, flk_f32, (uint8_t)(x != 0.0f)); return; }
    if (ddt == FL_INT64 && sdt == FL_BOOL) { CONV_LOOP(flk_i64, flk_u8, (int64_t)(x != 0)); return; }
    if (ddt == FL_FLOAT32 && flk_is_fp8(sdt)) { CONV_LOOP(flk_f32, flk_u8, flk_fp8_to_float(x, sdt)); return; }
    if (flk_is_fp8(ddt) && sdt == FL_FLOAT32) { CONV_LOOP(flk_u8, flk_f32, flk_fp8_from_float(x, ddt)); return; }

    const char *s = (const char *)src;
    char *d = (char *)dst;
    if (flk_is_floating(sdt) || flk_is_fp8(sdt)) {
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
