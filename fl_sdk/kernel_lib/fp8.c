/*
 * fp8.c -- the four float8 formats PyTorch has (fl_abi.h, fl_dtype; ABI 1.2)
 * to and from float32, bit for bit as PyTorch's CPU casts (fl_kernel.h
 * section 2; docs/vendors/fp8.md).
 *
 * One routine serves the four formats, described by their field widths, bias
 * and how they spend the all-ones exponent:
 *   FN    e4m3fn: no infinity; S.1111.111 is NaN; past the largest finite value
 *         (448) a cast saturates to it, infinities included.
 *   IEEE  e5m2: infinities (S.11111.00) and NaNs like IEEE 754; past the largest
 *         finite value (57344) a cast gives infinity.
 *   FNUZ  e4m3fnuz, e5m2fnuz: the all-ones exponent is an ordinary binade, 0x80
 *         (negative zero's pattern) is the one NaN, zero is unsigned; past the
 *         largest finite value a cast gives NaN.
 */
#include "fl_kernel.h"

enum { KIND_FN, KIND_IEEE, KIND_FNUZ };

typedef struct fp8_format {
    int mantissa;       /* mantissa bits */
    int exponent;       /* exponent bits */
    int bias;
    int kind;
} fp8_format;

static fp8_format format_of(int32_t dt) {
    switch (dt) {
    case FL_FLOAT8_E4M3FN: return (fp8_format){3, 4, 7, KIND_FN};
    case FL_FLOAT8_E5M2: return (fp8_format){2, 5, 15, KIND_IEEE};
    case FL_FLOAT8_E4M3FNUZ: return (fp8_format){3, 4, 8, KIND_FNUZ};
    default: return (fp8_format){2, 5, 16, KIND_FNUZ};    /* FL_FLOAT8_E5M2FNUZ */
    }
}

/* The largest finite magnitude's pattern (sign clear). */
static uint32_t max_finite(const fp8_format *f) {
    uint32_t all_ones_exponent = ((1u << f->exponent) - 1) << f->mantissa;
    switch (f->kind) {
    case KIND_FN: return all_ones_exponent | ((1u << f->mantissa) - 2);
    case KIND_IEEE: return all_ones_exponent - 1;
    default: return 0x7f;
    }
}

/* What a magnitude past the largest finite one (infinity included) becomes. */
static uint8_t overflow(const fp8_format *f, uint8_t sign) {
    switch (f->kind) {
    case KIND_FN: return (uint8_t)(sign | max_finite(f));
    case KIND_IEEE: return (uint8_t)(sign | (((1u << f->exponent) - 1) << f->mantissa));
    default: return 0x80;
    }
}

/* |x|'s pattern rounded to nearest even, ignoring the format's top: may exceed
 * max_finite (then the caller overflows).  x is finite. */
static uint32_t round_magnitude(float x, uint32_t bits, const fp8_format *f) {
    int exponent = (int)((bits >> 23) & 0xff) - 127;
    int smallest_normal = 1 - f->bias;
    if (exponent < smallest_normal) {
        /* subnormal in float8 (or zero): a whole number of the smallest step; the
         * scaling by a power of two is exact, rintf rounds to nearest even */
        float steps = ldexpf(x < 0 ? -x : x, f->mantissa - smallest_normal);
        return (uint32_t)rintf(steps);
    }
    /* normal: keep `mantissa` bits of float32's 23, to nearest even, letting a
     * carry run into the exponent; then move float32's bias (127) to the format's */
    uint32_t magnitude = bits & 0x7fffffffu;
    int drop = 23 - f->mantissa;
    uint32_t rounded = (magnitude + ((1u << (drop - 1)) - 1) + ((magnitude >> drop) & 1)) >> drop;
    return rounded - ((uint32_t)(127 - f->bias) << f->mantissa);
}

uint8_t flk_fp8_from_float(float x, int32_t dt) {
    fp8_format f = format_of(dt);
    uint32_t bits = flk_f32_bits(x);
    uint8_t sign = (uint8_t)((bits >> 24) & 0x80);
    if ((bits & 0x7fffffffu) > 0x7f800000u)     /* NaN */
        return f.kind == KIND_FNUZ ? 0x80 : (uint8_t)(sign | 0x7f);
    if ((bits & 0x7fffffffu) == 0x7f800000u)    /* infinity */
        return overflow(&f, sign);
    uint32_t magnitude = round_magnitude(x, bits, &f);
    if (magnitude > max_finite(&f))
        return overflow(&f, sign);
    if (magnitude == 0 && f.kind == KIND_FNUZ)  /* no negative zero */
        return 0;
    return (uint8_t)(sign | magnitude);
}

int flk_fp8_is_nan(uint8_t bits, int32_t dt) {
    fp8_format f = format_of(dt);
    uint32_t magnitude = bits & 0x7fu, all_ones_exponent = ((1u << f.exponent) - 1) << f.mantissa;
    switch (f.kind) {
    case KIND_FN: return magnitude == 0x7f;
    case KIND_IEEE: return (magnitude & all_ones_exponent) == all_ones_exponent && magnitude != all_ones_exponent;
    default: return bits == 0x80;
    }
}

float flk_fp8_to_float(uint8_t bits, int32_t dt) {
    fp8_format f = format_of(dt);
    uint32_t sign = (uint32_t)(bits & 0x80) << 24;
    uint32_t exponent = (bits & 0x7fu) >> f.mantissa, mantissa = bits & ((1u << f.mantissa) - 1);
    if (flk_fp8_is_nan(bits, dt)) {
        /* the NaN patterns PyTorch widens them to: e4m3fn keeps its sign, e5m2 goes
         * through float16 (quiet, payload kept), the fnuz NaN is 0x7f800001 */
        if (f.kind == KIND_FN)
            return flk_f32_from_bits(sign | 0x7ff00000u);
        if (f.kind == KIND_IEEE)
            return flk_f32_from_bits(sign | 0x7fc00000u | (mantissa << 21));
        return flk_f32_from_bits(0x7f800001u);
    }
    if (f.kind == KIND_IEEE && exponent == (1u << f.exponent) - 1)     /* infinity */
        return flk_f32_from_bits(sign | 0x7f800000u);
    if (exponent == 0) {   /* zero or subnormal: mantissa steps of 2^(1 - bias - mantissa) */
        float magnitude = ldexpf((float)mantissa, 1 - f.bias - f.mantissa);
        return sign ? -magnitude : magnitude;
    }
    return flk_f32_from_bits(sign | ((exponent - (uint32_t)f.bias + 127u) << 23) | (mantissa << (23 - f.mantissa)));
}
