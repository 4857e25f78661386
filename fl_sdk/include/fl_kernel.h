/*
 * fl_kernel.h -- the Torch-FL SDK kernel library (prefix flk_): how a
 * plugin's kernels are written, registered and launched, and the host-side
 * helpers they share.
 *
 * `fl-sdk build` compiles the library (the C files of fl_sdk/kernel_lib/) into a plugin
 * whose plugin.yaml lists `sdk_libraries: [kernel]`, with the plugin's own
 * flags and -Wall -Wextra -Werror.  The reference vendor and every plugin
 * `fl-sdk new` scaffolds use it, so a kernel file written against this header
 * alone (e.g. reference_vendor/src/kernels/activation.c) compiles unchanged in
 * any of them.  Nothing here is part of the ABI (fl_abi.h): the library is
 * compiled into each plugin and its symbols stay private to it.
 *
 * 1. The kernel interface.  A kernel is a function
 *        static fl_status k(const fl_arg *args, uint32_t nargs, flk_ctx *ctx)
 *    receiving the ABI's calling convention (fl_abi.h, "kernel calling
 *    convention": schema arguments in order, then the outputs) and a context
 *    naming its device and op, with room for a failure message.  Its file
 *    registers it next to its definition:
 *        FLK_REGISTER("neg", FLK_NUM_TYPES, k_neg);
 *    Nothing else is edited to add a kernel: the registrations of every file
 *    are collected at link time (a linker section, see FLK_REGISTER_ENTRY)
 *    and flk_table() hands them to the runtime sorted by op, then variant.
 *    The driver runs a kernel with every tensor's `base` rewritten to an
 *    address the kernel can use, so element [0,...,0] is at flk_data(t).
 * 2. dtypes: masks, facts, unaligned element types, float16/bfloat16,
 *    float8 (the four PyTorch formats, ABI 1.2), vectorisable float32 exp/log.
 * 3. element load/store and bulk conversion (PyTorch's cast semantics).
 * 4. tensors: sizes, contiguity, element addresses, overlap.
 * 5. arguments: checked access (flk_args + flk_get_*), every failure a
 *    message naming the op and the argument; errors and launch-time declines.
 * 6. type promotion (PyTorch's result_type).
 * 7. strided iteration (flk_for_each_row) and broadcasting.
 * 8. the elementwise engine (flk_elementwise): broadcasting, scalars in tensor
 *    slots, dtype casts in chunks, dimension reordering/coalescing.
 * 9. elementwise ops: loop templates (FLK_DEF1_F, ...) and flk_ew_run, which
 *    applies PyTorch's type promotion and picks the loop.
 * 10. host scratch memory.
 *
 * Element pointers: tensor data may be misaligned for its dtype, so kernels
 * access elements through the flk_f32/flk_f64/... typedefs below, which have
 * alignment 1 (GCC/Clang emit unaligned loads/stores; no cost on x86/arm64).
 *
 * The header compiles as C11 and as C++ (for C++ callers of the functions);
 * the registration and loop-template macros are C (compound literals,
 * _Generic), and GCC or Clang is assumed (attributes, __COUNTER__).
 */
#ifndef FL_KERNEL_H
#define FL_KERNEL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "fl_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Every function declared below is private to the plugin it is built into. */
#pragma GCC visibility push(hidden)

/* ======================================================================== */
/* 1. the kernel interface                                                   */
/* ======================================================================== */

#define FLK_MESSAGE_MAX 512

typedef struct flk_ctx {
    int32_t device;                /* device index the kernel runs on */
    const char *op;                /* the registered op being run, for messages */
    char message[FLK_MESSAGE_MAX]; /* why it failed (flk_kernel_fail, flk_fail, ...) */
} flk_ctx;

typedef fl_status (*flk_fn)(const fl_arg *args, uint32_t nargs, flk_ctx *ctx);

/* A kernel definition: one row of the plugin's kernel table. */
typedef struct flk_kernel {
    const char *op;       /* ATen overload name, e.g. "add.Tensor" ("mm" for .default) */
    /* mask of FLK_DT(fl_dtype) accepted for the op's main tensor(s) (self /
     * input; for copy_ both sides); index and target tensors (max-pool
     * indices, nll targets) are not part of it.  The runtime keys on the
     * op's FIRST tensor argument in schema order (where.self: the bool
     * condition, so declare bool there too) and dispatches only calls whose
     * first tensor has a declared dtype; a kernel re-checks everything it
     * reads (flk_check_dtype) and declines the rest.
     * 0 registers the kernel hidden: the table leaves it out. */
    uint64_t dtypes;
    int32_t variant;      /* fl_kernel_variant */
    flk_fn fn;
    /* Optional, run by launch_kernel before anything is enqueued, on the
     * arguments' metadata only (tensor bases are still device addresses, so
     * it must never read data).  FL_ERROR_NOT_SUPPORTED (flk_decline)
     * declines the call with its message and the runtime runs it elsewhere:
     * for well-formed configurations the kernel cannot compute.  Any other
     * status is ignored there: malformed arguments still fail in the kernel,
     * as the conformance suite's robustness probes expect. */
    flk_fn accepts;
} flk_kernel;

/* The signature of a kernel (and of an `accepts` check).  Kernels are static:
 * their registration is the only way to them. */
#define FLK_KERNEL_FN(name) static fl_status name(const fl_arg *args, uint32_t nargs, flk_ctx *ctx)

/* Register kernel FN for OP: precise variant, no launch-time check. */
#define FLK_REGISTER(OP, DTYPES, FN) FLK_REGISTER_ENTRY(OP, DTYPES, FL_VARIANT_PRECISE, FN, NULL)

/* The full form: any fl_kernel_variant and an optional `accepts` (or NULL).
 * Each registration is a static flk_kernel plus a pointer to it in the
 * linker section FLK_SECTION; the linker gathers the pointers of every object
 * file of the plugin between __start_ and __stop_ symbols that registry.c
 * reads (pointers, not the structs, so that no compiler alignment padding can
 * come between entries).  The section is a GNU ld / lld / gold feature of ELF
 * targets; do not link with --gc-sections. */
#define FLK_SECTION "flk_kernels"
#define FLK_REGISTER_ENTRY(OP, DTYPES, VARIANT, FN, ACCEPTS) \
    FLK_REGISTER_AT_(__COUNTER__, OP, DTYPES, VARIANT, FN, ACCEPTS)
#define FLK_CAT_(a, b) a##b
#define FLK_CAT(a, b) FLK_CAT_(a, b)
#define FLK_REGISTER_AT_(ID, OP, DTYPES, VARIANT, FN, ACCEPTS)                              \
    static const flk_kernel FLK_CAT(flk_kernel_, ID) = {(OP), (DTYPES), (VARIANT), (FN),    \
                                                        (ACCEPTS)};                          \
    static const flk_kernel *const FLK_CAT(flk_kernel_ref_, ID)                             \
        __attribute__((used, section(FLK_SECTION))) = &FLK_CAT(flk_kernel_, ID)

/* The registered kernels as the ABI's table (registry.c): built once, sorted
 * by op, then variant, then dtypes; kernels registered with dtypes 0 are left
 * out.  The table lives as long as the plugin.  On failure returns
 * FL_ERROR_INTERNAL and *problem says why (host out of memory, or one
 * (op, variant) registered twice). */
fl_status flk_table(const fl_kernel_entry **entries, uint32_t *count, const char **problem);
/* The kernel behind an entry of flk_table(), or NULL for any other pointer
 * (an entry from another plugin, or a copy of one of ours). */
const flk_kernel *flk_table_kernel(const fl_kernel_entry *entry);

/* Record why a kernel failed and return FL_ERROR_KERNEL_FAILED. */
fl_status flk_kernel_fail(flk_ctx *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* FL_ERROR_NOT_SUPPORTED for a kernel whose body is not written yet (the
 * skeletons `fl-sdk new` renders): the runtime falls back for the call and
 * the conformance suite reports the kernel not_supported. */
fl_status flk_unwritten(flk_ctx *ctx);

/* Element [0,...,0] of a tensor the kernel was launched with. */
static inline void *flk_data(const fl_tensor *t) {
    return (char *)(uintptr_t)t->base + t->byte_offset;
}

#define FLK_TRY(expr)                                  \
    do {                                               \
        fl_status flk_try_status_ = (expr);            \
        if (flk_try_status_ != FL_SUCCESS)             \
            return flk_try_status_;                    \
    } while (0)

/* ======================================================================== */
/* 2. dtypes                                                                 */
/* ======================================================================== */

#define FLK_MAX_DIMS 32          /* tensors with more dims are rejected */

#define FLK_DT(d) (1ull << (d))
#define FLK_FLOAT_TYPES \
    (FLK_DT(FL_FLOAT32) | FLK_DT(FL_FLOAT64) | FLK_DT(FL_FLOAT16) | FLK_DT(FL_BFLOAT16))
#define FLK_INT_TYPES                                                              \
    (FLK_DT(FL_INT8) | FLK_DT(FL_UINT8) | FLK_DT(FL_INT16) | FLK_DT(FL_INT32) | \
     FLK_DT(FL_INT64))
/* float8 (ABI 1.2): kept out of FLK_FLOAT_TYPES and flk_is_floating, as PyTorch keeps
 * them out of type promotion; a kernel opts in with FLK_FP8_TYPES */
#define FLK_FP8_TYPES                                                                    \
    (FLK_DT(FL_FLOAT8_E4M3FN) | FLK_DT(FL_FLOAT8_E5M2) | FLK_DT(FL_FLOAT8_E4M3FNUZ) | \
     FLK_DT(FL_FLOAT8_E5M2FNUZ))
#define FLK_NUM_TYPES (FLK_FLOAT_TYPES | FLK_INT_TYPES)          /* no bool, no complex */
#define FLK_REAL_TYPES (FLK_FLOAT_TYPES | FLK_INT_TYPES | FLK_DT(FL_BOOL)) /* all but complex */
#define FLK_F32_F64 (FLK_DT(FL_FLOAT32) | FLK_DT(FL_FLOAT64))

/* unaligned element access */
typedef float flk_f32 __attribute__((aligned(1), may_alias));
typedef double flk_f64 __attribute__((aligned(1), may_alias));
typedef int64_t flk_i64 __attribute__((aligned(1), may_alias));
typedef int32_t flk_i32 __attribute__((aligned(1), may_alias));
typedef int16_t flk_i16 __attribute__((aligned(1), may_alias));
typedef uint16_t flk_u16 __attribute__((aligned(1), may_alias));
typedef int8_t flk_i8 __attribute__((may_alias));
typedef uint8_t flk_u8 __attribute__((may_alias));

static inline int flk_dtype_valid(int32_t dt) { return dt >= 0 && dt < FL_DTYPE_COUNT; }

static inline size_t flk_dtype_size(int32_t dt) {
    switch (dt) {
    case FL_FLOAT64: case FL_INT64: case FL_COMPLEX64: return 8;
    case FL_FLOAT32: case FL_INT32: return 4;
    case FL_FLOAT16: case FL_BFLOAT16: case FL_INT16: return 2;
    case FL_INT8: case FL_UINT8: case FL_BOOL: return 1;
    case FL_FLOAT8_E4M3FN: case FL_FLOAT8_E5M2: case FL_FLOAT8_E4M3FNUZ: case FL_FLOAT8_E5M2FNUZ: return 1;
    default: return 0;
    }
}

static inline int flk_is_floating(int32_t dt) {
    return dt == FL_FLOAT32 || dt == FL_FLOAT64 || dt == FL_FLOAT16 || dt == FL_BFLOAT16;
}

static inline int flk_is_fp8(int32_t dt) {
    return dt == FL_FLOAT8_E4M3FN || dt == FL_FLOAT8_E5M2 || dt == FL_FLOAT8_E4M3FNUZ || dt == FL_FLOAT8_E5M2FNUZ;
}

/* integral, bool excluded */
static inline int flk_is_integral(int32_t dt) {
    return dt == FL_INT8 || dt == FL_UINT8 || dt == FL_INT16 || dt == FL_INT32 || dt == FL_INT64;
}

const char *flk_dtype_name(int32_t dt);

/* float16 / bfloat16 <-> float, the same algorithms (and rounding: nearest
 * even) as c10::Half / c10::BFloat16; inline so conversion loops vectorise */
static inline uint32_t flk_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float flk_f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline float flk_half_to_float(uint16_t h) {
    const uint32_t w = (uint32_t)h << 16;
    const uint32_t sign = w & UINT32_C(0x80000000);
    const uint32_t two_w = w + w;
    const uint32_t exp_offset = UINT32_C(0xE0) << 23;
    const float normalized = flk_f32_from_bits((two_w >> 4) + exp_offset) * 0x1.0p-112f;
    const uint32_t magic_mask = UINT32_C(126) << 23;
    const float denormalized = flk_f32_from_bits((two_w >> 17) | magic_mask) - 0.5f;
    const uint32_t cutoff = UINT32_C(1) << 27;
    return flk_f32_from_bits(sign | (two_w < cutoff ? flk_f32_bits(denormalized)
                                                    : flk_f32_bits(normalized)));
}
static inline uint16_t flk_float_to_half(float f) {
    float base = ((f < 0 ? -f : f) * 0x1.0p+112f) * 0x1.0p-110f;
    const uint32_t w = flk_f32_bits(f);
    const uint32_t shl1_w = w + w;
    const uint32_t sign = w & UINT32_C(0x80000000);
    uint32_t bias = shl1_w & UINT32_C(0xFF000000);
    if (bias < UINT32_C(0x71000000))
        bias = UINT32_C(0x71000000);
    base = flk_f32_from_bits((bias >> 1) + UINT32_C(0x07800000)) + base;
    const uint32_t bits = flk_f32_bits(base);
    const uint32_t nonsign = ((bits >> 13) & UINT32_C(0x00007C00)) + (bits & UINT32_C(0x00000FFF));
    return (uint16_t)((sign >> 16) | (shl1_w > UINT32_C(0xFF000000) ? UINT32_C(0x7E00) : nonsign));
}
static inline float flk_bf16_to_float(uint16_t b) { return flk_f32_from_bits((uint32_t)b << 16); }
static inline uint16_t flk_float_to_bf16(float f) {
    uint32_t u = flk_f32_bits(f);
    uint32_t rounded = (u + (((u >> 16) & 1) + UINT32_C(0x7FFF))) >> 16;
    return (uint16_t)(f != f ? UINT32_C(0x7FC0) : rounded);
}

/* float8 <-> float32 (dtype.c), PyTorch's CPU casts bit for bit (fl_abi.h,
 * fl_dtype): to float8 rounds to nearest even; NaN stays NaN (0x7f | sign for
 * e4m3fn and e5m2, 0x80 for the fnuz types); past the largest finite value
 * e4m3fn saturates, e5m2 gives infinity, the fnuz types NaN; fnuz has no -0.
 * From float8 is exact (NaNs as PyTorch widens them).  `dt` must be a float8
 * dtype.  A float64 value converts to float8 through float32, as PyTorch does. */
uint8_t flk_fp8_from_float(float f, int32_t dt);
float flk_fp8_to_float(uint8_t bits, int32_t dt);
/* 1 when `bits` is a NaN of float8 dtype `dt`. */
int flk_fp8_is_nan(uint8_t bits, int32_t dt);

/* exp for float32, branch-free so loops calling it vectorise (libm's expf
 * does not): Cephes' range reduction and polynomial, <= 1 ulp from the
 * correctly rounded result over the whole range, with exact inf/0/NaN
 * handling and gradual underflow. */
static inline float flk_expf(float x) {
    float xc = x < -104.0f ? -104.0f : (x > 89.0f ? 89.0f : x);
    xc = x != x ? 0.0f : xc;
    const float magic = 0x1.8p23f;
    float n = (xc * 1.44269504088896341f + magic) - magic; /* round to nearest */
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float y = p * (r * r) + r + 1.0f;
    int32_t ni = (int32_t)n;
    int32_t n1 = ni / 2, n2 = ni - n1; /* each in [-75, 65]: normal powers of two */
    y = y * flk_f32_from_bits((uint32_t)(n1 + 127) << 23);
    y = y * flk_f32_from_bits((uint32_t)(n2 + 127) << 23);
    return x != x ? x : y;
}

/* natural log for float32, branch-free (vectorisable): Cephes' logf
 * (mantissa in [sqrt(1/2), sqrt(2)), degree-9 polynomial), <= 1 ulp;
 * subnormals are scaled first; log(0) = -inf, log(x < 0) = NaN,
 * log(inf) = inf, NaN stays NaN. */
static inline float flk_logf(float x) {
    /* both arms of every select are computed unconditionally: under the
     * default -ftrapping-math the compiler may not speculate a float op out
     * of a ?: arm, and a branch would stop vectorisation */
    int sub = x < 0x1.0p-126f;
    float scaled = x * 0x1.0p+25f;
    float xs = sub ? scaled : x;
    uint32_t b = flk_f32_bits(xs);
    int32_t e = (int32_t)((b >> 23) & 0xff) - 126 - (sub ? 25 : 0);
    float m = flk_f32_from_bits((b & 0x807fffffu) | 0x3f000000u); /* [0.5, 1) */
    int lo = m < 0.707106781186547524f;
    e = lo ? e - 1 : e;
    float m_lo = m + m - 1.0f, m_hi = m - 1.0f;
    m = lo ? m_lo : m_hi;
    float z = m * m;
    float y = 7.0376836292e-2f;
    y = y * m - 1.1514610310e-1f;
    y = y * m + 1.1676998740e-1f;
    y = y * m - 1.2420140846e-1f;
    y = y * m + 1.4249322787e-1f;
    y = y * m - 1.6668057665e-1f;
    y = y * m + 2.0000714765e-1f;
    y = y * m - 2.4999993993e-1f;
    y = y * m + 3.3333331174e-1f;
    y = y * m * z;
    float fe = (float)e;
    y += -2.12194440e-4f * fe;
    y += -0.5f * z;
    float r = m + y + 0.693359375f * fe;
    /* special cases blended in with bit masks: with ?: the compiler sinks the
     * polynomial under a branch, and branches stop vectorisation */
    uint32_t bx = flk_f32_bits(x), rb = flk_f32_bits(r);
    uint32_t is_zero = (uint32_t)((bx & 0x7fffffffu) == 0);
    uint32_t is_neg = (bx >> 31) & (is_zero ^ 1u);
    uint32_t is_inf_or_nan = (uint32_t)((bx & 0x7f800000u) == 0x7f800000u);
    uint32_t mzero = 0u - is_zero, mneg = 0u - is_neg;
    uint32_t mpass = 0u - (is_inf_or_nan & (is_neg ^ 1u)); /* +inf -> inf, NaN -> NaN */
    rb = (rb & ~mzero) | (0xff800000u & mzero);            /* log(+-0) = -inf */
    rb = (rb & ~mneg) | (0x7fc00000u & mneg);              /* log(x < 0) = NaN */
    rb = (rb & ~mpass) | (bx & mpass);
    return flk_f32_from_bits(rb);
}

/* float -> int64 without UB: NaN / out of range give INT64_MIN (x86 behaviour) */
static inline int64_t flk_double_to_i64(double d) {
    if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0))
        return INT64_MIN;
    return (int64_t)d;
}

/* ======================================================================== */
/* 3. element load / store and bulk conversion (dtype.c)                     */
/* ======================================================================== */

/* One element; the dtype must be valid and not complex. */
double flk_load_f64(const void *p, int32_t dt);
int64_t flk_load_i64(const void *p, int32_t dt);   /* floats truncate toward 0 */
void flk_store_f64(void *p, int32_t dt, double v); /* floats->ints as PyTorch casts */
void flk_store_i64(void *p, int32_t dt, int64_t v);

/* n elements, strides in bytes, every pair of real dtypes (float8 included),
 * PyTorch's cast semantics (int->float32 rounds once, float->uint8 goes through
 * int64, anything->bool is != 0, float8 converts through float32).  src and dst
 * must not overlap unless identical. */
void flk_convert(void *dst, int32_t dst_dt, int64_t dst_stride, const void *src,
                 int32_t src_dt, int64_t src_stride, int64_t n);

/* ======================================================================== */
/* 4. tensors (tensor.c)                                                     */
/* ======================================================================== */

int64_t flk_numel(const fl_tensor *t);
/* row-major contiguous (size-1 dims ignored) */
int flk_is_contiguous(const fl_tensor *t);
int flk_same_sizes(const fl_tensor *a, const fl_tensor *b);
/* element address of a multi-index */
static inline char *flk_elem_ptr(const fl_tensor *t, const int64_t *idx) {
    char *p = (char *)flk_data(t);
    size_t es = flk_dtype_size(t->dtype);
    for (int32_t d = 0; d < t->ndim; ++d)
        p += idx[d] * t->strides[d] * (int64_t)es;
    return p;
}
/* The element of `t` at row-major position `linear` of the iteration shape
 * `shape` (usually the output's): t's dimensions align to the right and a
 * missing or size-1 dimension broadcasts.  Any strides; slow but simple, for
 * a first host version of a kernel. */
static inline char *flk_element(const fl_tensor *t, const fl_tensor *shape, int64_t linear) {
    int64_t offset = 0;
    for (int32_t d = shape->ndim - 1, td = t->ndim - 1; d >= 0; d--, td--) {
        int64_t size = shape->sizes[d], index = linear % size;
        linear /= size;
        if (td >= 0 && t->sizes[td] != 1)
            offset += index * t->strides[td];
    }
    return (char *)flk_data(t) + offset * (int64_t)flk_dtype_size(t->dtype);
}
/* [lo, hi) bytes touched by t; returns 0 if t is empty */
int flk_byte_span(const fl_tensor *t, uintptr_t *lo, uintptr_t *hi);
/* 1 if the element sets of a and b may overlap in memory */
int flk_may_overlap(const fl_tensor *a, const fl_tensor *b);
/* the same elements in the same places (identical view) */
int flk_same_view(const fl_tensor *a, const fl_tensor *b);


/* ======================================================================== */
/* 5. arguments and errors (args.c, error.c)                                 */
/* ======================================================================== */

typedef struct flk_args {
    const fl_arg *args;
    uint32_t nargs;
    flk_ctx *ctx;
    const char *op;
} flk_args;

typedef struct flk_scalar {
    int32_t kind;   /* FL_ARG_INT, FL_ARG_FLOAT or FL_ARG_BOOL */
    double f;       /* value as double (always set) */
    int64_t i;      /* value as int64 (set for INT and BOOL) */
} flk_scalar;

/* a tensor operand or a scalar standing in a tensor slot (the runtime passes
 * a Python number PyTorch wrapped as a 0-dim CPU tensor, `x + 1`, as one) */
typedef struct flk_operand {
    const fl_tensor *t; /* NULL for a scalar */
    flk_scalar s;
} flk_operand;

/* Checks nargs == expected and fills a. */
fl_status flk_args_init(flk_args *a, const char *op, const fl_arg *args, uint32_t nargs,
                        uint32_t expected, flk_ctx *ctx);
/* flk_kernel_fail prefixed with "<op>: " */
fl_status flk_fail(const flk_args *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* the same message, returning FL_ERROR_NOT_SUPPORTED: for launch-time checks
 * (flk_kernel.accepts) declining well-formed arguments the kernel cannot
 * compute, and for kernels that run at launch (before anything is enqueued) */
fl_status flk_decline(const flk_args *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

int flk_arg_is_none(const flk_args *a, uint32_t i);
/* tensor (validated: struct_size, dtype, ndim, sizes, data pointer) */
fl_status flk_get_tensor(const flk_args *a, uint32_t i, const char *name, const fl_tensor **out);
/* NONE -> *out = NULL */
fl_status flk_get_opt_tensor(const flk_args *a, uint32_t i, const char *name,
                             const fl_tensor **out);
/* tensor, or INT/FLOAT/BOOL scalar (a 0-dim CPU tensor the runtime unwrapped) */
fl_status flk_get_operand(const flk_args *a, uint32_t i, const char *name, flk_operand *out);
/* Scalar: INT/FLOAT/BOOL */
fl_status flk_get_scalar(const flk_args *a, uint32_t i, const char *name, flk_scalar *out);
/* Scalar?: *present = 0 for NONE */
fl_status flk_get_opt_scalar(const flk_args *a, uint32_t i, const char *name, int *present,
                             flk_scalar *out);
fl_status flk_get_int(const flk_args *a, uint32_t i, const char *name, int64_t *out);
fl_status flk_get_opt_int(const flk_args *a, uint32_t i, const char *name, int *present,
                          int64_t *out);
/* float (INT and BOOL accepted) */
fl_status flk_get_double(const flk_args *a, uint32_t i, const char *name, double *out);
fl_status flk_get_bool(const flk_args *a, uint32_t i, const char *name, int *out);
/* An out= overload (schema args ending in `out`, then the result, the same
 * tensor) run by the functional kernel fn, which takes the schema args
 * without `out` followed by its output. */
fl_status flk_out_variant(const char *op, const fl_arg *args, uint32_t nargs, flk_ctx *ctx,
                          flk_fn fn);
/* str: FL_ARG_STRING */
fl_status flk_get_string(const flk_args *a, uint32_t i, const char *name, const char **out);
/* Tensor[] / Tensor?[] (allow_none: entries may be NULL), each entry validated */
fl_status flk_get_tensor_list(const flk_args *a, uint32_t i, const char *name, int allow_none,
                              const fl_tensor *const **out, uint32_t *count);
/* int[]: INT_LIST (a single INT is taken as a list of one) */
fl_status flk_get_int_list(const flk_args *a, uint32_t i, const char *name,
                           const int64_t **vals, uint32_t *count);
fl_status flk_get_opt_int_list(const flk_args *a, uint32_t i, const char *name, int *present,
                               const int64_t **vals, uint32_t *count);
fl_status flk_get_bool_list(const flk_args *a, uint32_t i, const char *name,
                            const int64_t **vals, uint32_t *count);
/* float[] and Scalar[]: FLOAT_LIST (fl_abi.h: a Scalar[]'s entries arrive as doubles) */
fl_status flk_get_double_list(const flk_args *a, uint32_t i, const char *name,
                              const double **vals, uint32_t *count);
/* Generator?: INT_LIST {seed, offset}; NONE -> {0, 0} (fl_abi.h, "kernel
 * calling convention", says how kernels draw from it) */
fl_status flk_get_generator(const flk_args *a, uint32_t i, const char *name, uint64_t *seed,
                            uint64_t *offset);
/* ScalarType?: INT holding an fl_dtype; NONE -> *present = 0 */
fl_status flk_get_opt_dtype(const flk_args *a, uint32_t i, const char *name, int *present,
                            int32_t *out);

/* dims: wraps negative dims against ndim (0-dim tensors accept 0 and -1). */
fl_status flk_wrap_dim(const flk_args *a, int64_t dim, int32_t ndim, int32_t *out);

/* tensor dtype check against a mask, failing with a message */
fl_status flk_check_dtype(const flk_args *a, const fl_tensor *t, const char *name, uint64_t mask);

/* Section 4's tensors, continued (tensor.c).  An input a kernel reads while it writes an output that shares memory with it
 * other than as the very same view (fl_abi.h, "ARGUMENTS THAT SHARE MEMORY":
 * a kernel answers as if it read every input before writing): flk_unshare
 * gives the kernel a private contiguous copy to read instead, or the input
 * itself when the two cannot overlap.  Free with flk_unshared_free.  An input
 * that is the output's very view is kept: elementwise kernels read each element
 * before they write it; a kernel that does not (a matrix product into one of
 * its operands) asks with `same_view_too`. */
typedef struct flk_unshared {
    fl_tensor copy;
    int64_t strides[FLK_MAX_DIMS];
    void *memory;                  /* NULL when nothing was copied */
} flk_unshared;
fl_status flk_unshare(const flk_args *a, const fl_tensor *out, const fl_tensor *in, int same_view_too,
                      flk_unshared *u, const fl_tensor **use);
void flk_unshared_free(flk_unshared *u);

/* ======================================================================== */
/* 6. type promotion (promote.c)                                             */
/* ======================================================================== */

/* PyTorch's promote_types over the real dtypes (complex -> -1). */
int32_t flk_promote_types(int32_t a, int32_t b);

/* PyTorch's can_cast(from, to): no float->integral, no non-bool->bool. */
int flk_can_cast(int32_t from, int32_t to);

/* PyTorch's result_type over operands: dimensioned tensors, then 0-dim
 * tensors, then scalars (a float scalar counts as float32, int as int64). */
int32_t flk_result_type(const flk_operand *ops, int n);

/* ======================================================================== */
/* 7. strided iteration (iter.c)                                             */
/* ======================================================================== */

/* Called once per innermost row: ptrs[k] is operand k's first element of the
 * row, strides[k] its stride in bytes along the row, n the row length. */
typedef void (*flk_row_fn)(char **ptrs, const int64_t *strides, int64_t n, void *ctx);

/* Visit every element of an N-d index space once, by rows.  strides[k][d] is
 * operand k's stride in bytes along dim d.  Dims of size 1 are dropped, dims
 * are ordered by operand order_op's strides (largest outermost; order_op < 0
 * keeps the logical order) and mergeable dims are coalesced.  Nothing is
 * called when a size is 0.  nops <= 8. */
void flk_for_each_row(int ndim, const int64_t *sizes, int nops, char *const *ptrs,
                      int64_t strides[][FLK_MAX_DIMS], int order_op, flk_row_fn fn,
                      void *ctx);

/* The layout work of flk_for_each_row: drops size-1 dims, orders by
 * order_op, coalesces; writes sz/st (nd entries) and returns nd, or -1 when
 * a size is 0.  nops <= 8. */
int flk_simplify_dims(int ndim, const int64_t *sizes, int nops, int64_t strides[][FLK_MAX_DIMS],
                      int order_op, int64_t *sz, int64_t st[][FLK_MAX_DIMS]);

/* Broadcast tensor t (numpy rules) to `sizes`; writes byte strides. */
fl_status flk_broadcast_strides(const flk_args *a, const fl_tensor *t, const char *name,
                                int ndim, const int64_t *sizes, int64_t *strides_bytes);

/* ======================================================================== */
/* 8. the elementwise engine (elementwise.c)                                 */
/* ======================================================================== */

#define FLK_EW_MAX_INPUTS 4      /* inputs per op */
#define FLK_EW_MAX_OPS (FLK_EW_MAX_INPUTS + 1)

/* A loop computes data[0][i] = f(data[1][i], ...) for i < n with byte strides;
 * every operand is already in the dtype the loop asked for. */
typedef void (*flk_loop_fn)(char **data, const int64_t *strides, int64_t n, const void *params);

typedef struct flk_ew_desc {
    const fl_tensor *out;   /* output, any layout (stride 0 over size > 1 is rejected) */
    int32_t out_dtype;      /* dtype the loop writes; cast into out->dtype if different */
    int nin;                /* inputs, <= FLK_EW_MAX_INPUTS */
    const flk_operand *in;  /* tensors broadcast to out's shape, or scalars */
    const int32_t *in_dtypes; /* dtype the loop reads for each input */
    /* optional, per input: a dtype each tensor input is first converted to
     * before the loop dtype (PyTorch casts inputs to the common dtype, e.g.
     * int8 or float16, even when the loop computes in int64 / float); -1 or
     * a NULL array: convert directly */
    const int32_t *in_via;
    flk_loop_fn fn;
    const void *params;
} flk_ew_desc;

fl_status flk_elementwise(const flk_args *a, const flk_ew_desc *d);

/* ======================================================================== */
/* 9. elementwise ops: loop templates and the op driver (ew_ops.c)           */
/* ======================================================================== */

/* Scalar parameters of a loop, converted to each compute type. */
typedef struct flk_ew_params {
    float f[4];
    double d[4];
    int64_t i[4];
} flk_ew_params;

/* Inside a loop's SETUP or EXPR: parameter k in the compute type T. */
#define FLK_PARAM(T, k) _Generic((T)0, float: P->f[k], double: P->d[k], default: P->i[k])

#ifdef __FMA__
#define FLK_FMA(T, a, b, c) _Generic((T)0, float: fmaf, default: fma)((a), (b), (c))
#else
#define FLK_FMA(T, a, b, c) ((a) * (b) + (c))
#endif

/* integer arithmetic with wrap-around (no UB) */
#define FLK_IADD(a, b) ((int64_t)((uint64_t)(a) + (uint64_t)(b)))
#define FLK_ISUB(a, b) ((int64_t)((uint64_t)(a) - (uint64_t)(b)))
#define FLK_IMUL(a, b) ((int64_t)((uint64_t)(a) * (uint64_t)(b)))

/* libm by operand type: FLK_G1(sin, x) is sinf for float, sin otherwise */
#define FLK_G1(F, x) _Generic((x), float: F##f, default: F)(x)
#define FLK_G2(F, x, y) _Generic((x), float: F##f, default: F)(x, y)

/* Loop templates.  Each defines a static flk_loop_fn NAME over inputs a (b, c)
 * of type T (element access type TU, unaligned) writing OT (OTU): a
 * contiguous fast path the compiler vectorises (scalar-broadcast paths for
 * two inputs) and a strided one.  SETUP runs once per call (FLK_NOSETUP for
 * none; it may read parameters through FLK_PARAM), EXPR per element. */
#define FLK_NOSETUP

#define FLK_EW_LOOP1(NAME, TT, TU, OTT, OTU, SETUP, EXPR)                           \
    static void NAME(char **data, const int64_t *st_, int64_t n, const void *pp) { \
        const int64_t st[2] = {st_[0], st_[1]}; /* locals: element stores may alias */ \
        typedef TT T;                                                              \
        typedef OTT OT;                                                            \
        const flk_ew_params *P = (const flk_ew_params *)pp;                        \
        (void)P;                                                                   \
        SETUP                                                                      \
        char *o_ = data[0];                                                        \
        const char *a_ = data[1];                                                  \
        if (st[0] == (int64_t)sizeof(OT) && st[1] == (int64_t)sizeof(T)) {         \
            OTU *o = (OTU *)o_;                                                    \
            const TU *ap = (const TU *)a_;                                         \
            for (int64_t i = 0; i < n; ++i) {                                      \
                T a = ap[i];                                                       \
                o[i] = (OT)(EXPR);                                                 \
            }                                                                      \
        } else {                                                                   \
            for (int64_t i = 0; i < n; ++i) {                                      \
                T a = *(const TU *)(a_ + i * st[1]);                               \
                *(OTU *)(o_ + i * st[0]) = (OT)(EXPR);                             \
            }                                                                      \
        }                                                                          \
    }

#define FLK_EW_LOOP2(NAME, TT, TU, OTT, OTU, SETUP, EXPR)                           \
    static void NAME(char **data, const int64_t *st_, int64_t n, const void *pp) { \
        const int64_t st[3] = {st_[0], st_[1], st_[2]}; /* locals: element stores may alias */ \
        typedef TT T;                                                              \
        typedef OTT OT;                                                            \
        const flk_ew_params *P = (const flk_ew_params *)pp;                        \
        (void)P;                                                                   \
        SETUP                                                                      \
        char *o_ = data[0];                                                        \
        const char *a_ = data[1], *b_ = data[2];                                   \
        const int64_t so = (int64_t)sizeof(OT), si = (int64_t)sizeof(T);           \
        if (st[0] == so && st[1] == si && st[2] == si) {                           \
            OTU *o = (OTU *)o_;                                                    \
            const TU *ap = (const TU *)a_, *bp = (const TU *)b_;                   \
            for (int64_t i = 0; i < n; ++i) {                                      \
                T a = ap[i], b = bp[i];                                            \
                o[i] = (OT)(EXPR);                                                 \
            }                                                                      \
        } else if (st[0] == so && st[1] == si && st[2] == 0) {                     \
            OTU *o = (OTU *)o_;                                                    \
            const TU *ap = (const TU *)a_;                                         \
            const T b = *(const TU *)b_;                                           \
            for (int64_t i = 0; i < n; ++i) {                                      \
                T a = ap[i];                                                       \
                o[i] = (OT)(EXPR);                                                 \
            }                                                                      \
        } else if (st[0] == so && st[1] == 0 && st[2] == si) {                     \
            OTU *o = (OTU *)o_;                                                    \
            const TU *bp = (const TU *)b_;                                         \
            const T a = *(const TU *)a_;                                           \
            for (int64_t i = 0; i < n; ++i) {                                      \
                T b = bp[i];                                                       \
                o[i] = (OT)(EXPR);                                                 \
            }                                                                      \
        } else {                                                                   \
            for (int64_t i = 0; i < n; ++i) {                                      \
                T a = *(const TU *)(a_ + i * st[1]);                               \
                T b = *(const TU *)(b_ + i * st[2]);                               \
                *(OTU *)(o_ + i * st[0]) = (OT)(EXPR);                             \
            }                                                                      \
        }                                                                          \
    }

/* three inputs of type T (c is the third) */
#define FLK_EW_LOOP3(NAME, TT, TU, SETUP, EXPR)                                      \
    static void NAME(char **data, const int64_t *st_, int64_t n, const void *pp) { \
        const int64_t st[4] = {st_[0], st_[1], st_[2], st_[3]}; /* locals: element stores may alias */ \
        typedef TT T;                                                              \
        const flk_ew_params *P = (const flk_ew_params *)pp;                        \
        (void)P;                                                                   \
        SETUP                                                                      \
        char *o_ = data[0];                                                        \
        const char *a_ = data[1], *b_ = data[2], *c_ = data[3];                    \
        const int64_t s = (int64_t)sizeof(T);                                      \
        if (st[0] == s && st[1] == s && st[2] == s && st[3] == s) {                \
            TU *o = (TU *)o_;                                                      \
            const TU *ap = (const TU *)a_, *bp = (const TU *)b_, *cp = (const TU *)c_; \
            for (int64_t i = 0; i < n; ++i) {                                      \
                T a = ap[i], b = bp[i], c = cp[i];                                 \
                o[i] = (EXPR);                                                     \
            }                                                                      \
        } else {                                                                   \
            for (int64_t i = 0; i < n; ++i) {                                      \
                T a = *(const TU *)(a_ + i * st[1]);                               \
                T b = *(const TU *)(b_ + i * st[2]);                               \
                T c = *(const TU *)(c_ + i * st[3]);                               \
                *(TU *)(o_ + i * st[0]) = (EXPR);                                  \
            }                                                                      \
        }                                                                          \
    }

/* where: cond (bool byte), b and c of type T */
#define FLK_EW_WHERE(NAME, T, TU)                                                  \
    static void NAME(char **data, const int64_t *st_, int64_t n, const void *pp) { \
        const int64_t st[4] = {st_[0], st_[1], st_[2], st_[3]}; /* locals: element stores may alias */ \
        (void)pp;                                                                  \
        char *o_ = data[0];                                                        \
        const char *a_ = data[1], *b_ = data[2], *c_ = data[3];                    \
        const int64_t s = (int64_t)sizeof(T);                                      \
        if (st[0] == s && st[1] == 1 && st[2] == s && st[3] == s) {                \
            TU *o = (TU *)o_;                                                      \
            const flk_u8 *ap = (const flk_u8 *)a_;                                 \
            const TU *bp = (const TU *)b_, *cp = (const TU *)c_;                   \
            for (int64_t i = 0; i < n; ++i)                                        \
                o[i] = ap[i] ? bp[i] : cp[i];                                      \
        } else if (st[0] == s && st[1] == 1 && st[2] == s && st[3] == 0) {         \
            TU *o = (TU *)o_;                                                      \
            const flk_u8 *ap = (const flk_u8 *)a_;                                 \
            const TU *bp = (const TU *)b_;                                         \
            const T c = *(const TU *)c_;                                           \
            for (int64_t i = 0; i < n; ++i)                                        \
                o[i] = ap[i] ? bp[i] : c;                                          \
        } else if (st[0] == s && st[1] == 1 && st[2] == 0 && st[3] == s) {         \
            TU *o = (TU *)o_;                                                      \
            const flk_u8 *ap = (const flk_u8 *)a_;                                 \
            const TU *cp = (const TU *)c_;                                         \
            const T b = *(const TU *)b_;                                           \
            for (int64_t i = 0; i < n; ++i)                                        \
                o[i] = ap[i] ? b : cp[i];                                          \
        } else {                                                                   \
            for (int64_t i = 0; i < n; ++i) {                                      \
                uint8_t a = *(const flk_u8 *)(a_ + i * st[1]);                     \
                T b = *(const TU *)(b_ + i * st[2]);                               \
                T c = *(const TU *)(c_ + i * st[3]);                               \
                *(TU *)(o_ + i * st[0]) = a ? b : c;                               \
            }                                                                      \
        }                                                                          \
    }

/* The loops of one op for the three compute types: NAME_f32, NAME_f64 (float
 * compute: _F), NAME_i64 (integral and bool compute: _I). */
#define FLK_DEF1_F(NAME, SETUP, EXPR)                                              \
    FLK_EW_LOOP1(NAME##_f32, float, flk_f32, float, flk_f32, SETUP, EXPR)          \
    FLK_EW_LOOP1(NAME##_f64, double, flk_f64, double, flk_f64, SETUP, EXPR)
#define FLK_DEF1_I(NAME, SETUP, EXPR) \
    FLK_EW_LOOP1(NAME##_i64, int64_t, flk_i64, int64_t, flk_i64, SETUP, EXPR)
#define FLK_DEF2_F(NAME, SETUP, EXPR)                                              \
    FLK_EW_LOOP2(NAME##_f32, float, flk_f32, float, flk_f32, SETUP, EXPR)          \
    FLK_EW_LOOP2(NAME##_f64, double, flk_f64, double, flk_f64, SETUP, EXPR)
#define FLK_DEF2_I(NAME, SETUP, EXPR) \
    FLK_EW_LOOP2(NAME##_i64, int64_t, flk_i64, int64_t, flk_i64, SETUP, EXPR)
#define FLK_DEF3_F(NAME, SETUP, EXPR)                                              \
    FLK_EW_LOOP3(NAME##_f32, float, flk_f32, SETUP, EXPR)                          \
    FLK_EW_LOOP3(NAME##_f64, double, flk_f64, SETUP, EXPR)
#define FLK_DEF3_I(NAME, SETUP, EXPR) FLK_EW_LOOP3(NAME##_i64, int64_t, flk_i64, SETUP, EXPR)
/* comparisons and predicates: every compute type, a bool output */
#define FLK_DEF_CMP(NAME, EXPR)                                                    \
    FLK_EW_LOOP2(NAME##_f32, float, flk_f32, uint8_t, flk_u8, FLK_NOSETUP, EXPR)   \
    FLK_EW_LOOP2(NAME##_f64, double, flk_f64, uint8_t, flk_u8, FLK_NOSETUP, EXPR)  \
    FLK_EW_LOOP2(NAME##_i64, int64_t, flk_i64, uint8_t, flk_u8, FLK_NOSETUP, EXPR)
#define FLK_DEF1_PRED(NAME, FEXPR, IEXPR)                                           \
    FLK_EW_LOOP1(NAME##_f32, float, flk_f32, uint8_t, flk_u8, FLK_NOSETUP, FEXPR)   \
    FLK_EW_LOOP1(NAME##_f64, double, flk_f64, uint8_t, flk_u8, FLK_NOSETUP, FEXPR)  \
    FLK_EW_LOOP1(NAME##_i64, int64_t, flk_i64, uint8_t, flk_u8, FLK_NOSETUP, IEXPR)
#define FLK_DEF2_PRED(NAME, EXPR) FLK_DEF_CMP(NAME, EXPR)

/* The loops of one op, by compute type; NULL where the op has none. */
typedef struct flk_ew_loops {
    flk_loop_fn f32, f64, i64;
} flk_ew_loops;

#define FLK_LOOPS_F(NAME) ((flk_ew_loops){NAME##_f32, NAME##_f64, NULL})
#define FLK_LOOPS_FI(NAME) ((flk_ew_loops){NAME##_f32, NAME##_f64, NAME##_i64})
#define FLK_LOOPS_I(NAME) ((flk_ew_loops){NULL, NULL, NAME##_i64})

/* flk_ew_run's flags */
enum {
    FLK_EW_INT_TO_FLOAT = 1u, /* integral/bool common dtype computes in float32 */
    FLK_EW_NO_BOOL = 2u,      /* bool common dtype is not supported */
    FLK_EW_BOOL_OUT = 4u,     /* comparison: the loop writes bool */
    FLK_EW_SCALAR_OPMATH = 8u /* a scalar second input keeps float precision for
                                 float16/bfloat16 (PyTorch's mul/div) */
};

/* an input's role in flk_ew_call.in_role */
enum { FLK_IN_PROMOTE = 0, FLK_IN_COND = 1 };

/* One elementwise call: its operands and scalar parameters. */
typedef struct flk_ew_call {
    const fl_tensor *out;
    int nin;
    flk_operand in[FLK_EW_MAX_INPUTS];
    int in_role[FLK_EW_MAX_INPUTS];      /* FLK_IN_PROMOTE or FLK_IN_COND */
    int nextra;                          /* scalars that join the type promotion */
    flk_operand extra[2];
    int nparams;                         /* scalars converted to the compute type */
    flk_scalar params[4];
    const char *param_names[4];
    int param_trunc[4];                  /* fractional value allowed for integral compute */
} flk_ew_call;

/* Promote (PyTorch's result_type), pick the loop for the compute dtype
 * (float32 for float32/float16/bfloat16, float64, int64 for integral and
 * bool), convert params, run on the elementwise engine. */
fl_status flk_ew_run(const flk_args *a, flk_ew_loops loops, unsigned flags, flk_ew_call *c);
/* (self, out) */
fl_status flk_ew_unary(const char *op, const fl_arg *args, uint32_t nargs, flk_ctx *ctx,
                       flk_ew_loops loops, unsigned flags);
/* (self, other, out) */
fl_status flk_ew_binary(const char *op, const fl_arg *args, uint32_t nargs, flk_ctx *ctx,
                        flk_ew_loops loops, unsigned flags);

/* Kernels that are one flk_ew_unary / flk_ew_binary call. */
#define FLK_EW_UNARY_KERNEL(FN, OPNAME, LOOPS, FLAGS) \
    FLK_KERNEL_FN(FN) { return flk_ew_unary(OPNAME, args, nargs, ctx, LOOPS, FLAGS); }
#define FLK_EW_BINARY_KERNEL(FN, OPNAME, LOOPS, FLAGS) \
    FLK_KERNEL_FN(FN) { return flk_ew_binary(OPNAME, args, nargs, ctx, LOOPS, FLAGS); }

/* ======================================================================== */
/* 10. host scratch memory (alloc.c)                                         */
/* ======================================================================== */

void *flk_alloc(size_t bytes);   /* 64-byte aligned, NULL on failure; free with flk_free */
void flk_free(void *p);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif

#endif /* FL_KERNEL_H */
