/*
 * kernel_util.h -- helpers shared by the reference chip's kernels.
 *
 *  - argument access with checks (ref_args + ref_get_*), every failure goes
 *    through ref_kernel_fail with a message naming the op and the argument;
 *  - dtype facts, element load/store and bulk conversion between every dtype
 *    the chip stores (float16/bfloat16 with PyTorch's rounding);
 *  - branch-free float32 exp / log (vectorisable, <= 1 ulp);
 *  - PyTorch's type promotion (result_type) for elementwise ops;
 *  - strided N-d iteration (ref_for_each_row) and the elementwise engine
 *    (ref_elementwise): broadcasting, scalars in tensor slots, dtype casting
 *    in chunks, dimension reordering/coalescing for speed;
 *  - BLAS gemm wrappers (single and strided batch) and aligned temporaries.
 *
 * Element pointers: tensor data may be misaligned for its dtype, so kernels
 * access elements through the ref_f32/ref_f64/... typedefs below, which have
 * alignment 1 (GCC/Clang emit unaligned loads/stores; no cost on x86/arm64).
 */
#ifndef REF_KERNEL_UTIL_H
#define REF_KERNEL_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernel_api.h"

#define REF_MAX_DIMS 32          /* tensors with more dims are rejected */
#define REF_EW_MAX_INPUTS 4      /* elementwise engine: inputs per op */
#define REF_EW_MAX_OPS (REF_EW_MAX_INPUTS + 1)

#define REF_TRY(expr)                                  \
    do {                                               \
        fl_status ref_try_status_ = (expr);            \
        if (ref_try_status_ != FL_SUCCESS)             \
            return ref_try_status_;                    \
    } while (0)

#define REF_DT(d) (1ull << (d))
#define REF_FLOAT_TYPES \
    (REF_DT(FL_FLOAT32) | REF_DT(FL_FLOAT64) | REF_DT(FL_FLOAT16) | REF_DT(FL_BFLOAT16))
#define REF_INT_TYPES                                                              \
    (REF_DT(FL_INT8) | REF_DT(FL_UINT8) | REF_DT(FL_INT16) | REF_DT(FL_INT32) | \
     REF_DT(FL_INT64))
#define REF_REAL_TYPES (REF_FLOAT_TYPES | REF_INT_TYPES | REF_DT(FL_BOOL))
#define REF_F32_F64 (REF_DT(FL_FLOAT32) | REF_DT(FL_FLOAT64))

/* ---- unaligned element access ------------------------------------------ */
typedef float ref_f32 __attribute__((aligned(1), may_alias));
typedef double ref_f64 __attribute__((aligned(1), may_alias));
typedef int64_t ref_i64 __attribute__((aligned(1), may_alias));
typedef int32_t ref_i32 __attribute__((aligned(1), may_alias));
typedef int16_t ref_i16 __attribute__((aligned(1), may_alias));
typedef uint16_t ref_u16 __attribute__((aligned(1), may_alias));
typedef int8_t ref_i8 __attribute__((may_alias));
typedef uint8_t ref_u8 __attribute__((may_alias));

/* ---- dtypes -------------------------------------------------------------- */
static inline int ref_dtype_valid(int32_t dt) { return dt >= 0 && dt < FL_DTYPE_COUNT; }

static inline size_t ref_dtype_size(int32_t dt) {
    switch (dt) {
    case FL_FLOAT64: case FL_INT64: case FL_COMPLEX64: return 8;
    case FL_FLOAT32: case FL_INT32: return 4;
    case FL_FLOAT16: case FL_BFLOAT16: case FL_INT16: return 2;
    case FL_INT8: case FL_UINT8: case FL_BOOL: return 1;
    default: return 0;
    }
}

static inline int ref_is_floating(int32_t dt) {
    return dt == FL_FLOAT32 || dt == FL_FLOAT64 || dt == FL_FLOAT16 || dt == FL_BFLOAT16;
}

/* integral, bool excluded */
static inline int ref_is_integral(int32_t dt) {
    return dt == FL_INT8 || dt == FL_UINT8 || dt == FL_INT16 || dt == FL_INT32 || dt == FL_INT64;
}

const char *ref_dtype_name(int32_t dt);

/* PyTorch's promote_types over the real dtypes (complex -> -1). */
int32_t ref_promote_types(int32_t a, int32_t b);

/* PyTorch's can_cast(from, to): no float->integral, no non-bool->bool. */
int ref_can_cast(int32_t from, int32_t to);

/* ---- element conversion --------------------------------------------------- */
/* float16 / bfloat16 <-> float, the same algorithms (and rounding: nearest
 * even) as c10::Half / c10::BFloat16; inline so conversion loops vectorise */
static inline uint32_t ref_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float ref_f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline float ref_half_to_float(uint16_t h) {
    const uint32_t w = (uint32_t)h << 16;
    const uint32_t sign = w & UINT32_C(0x80000000);
    const uint32_t two_w = w + w;
    const uint32_t exp_offset = UINT32_C(0xE0) << 23;
    const float normalized = ref_f32_from_bits((two_w >> 4) + exp_offset) * 0x1.0p-112f;
    const uint32_t magic_mask = UINT32_C(126) << 23;
    const float denormalized = ref_f32_from_bits((two_w >> 17) | magic_mask) - 0.5f;
    const uint32_t cutoff = UINT32_C(1) << 27;
    return ref_f32_from_bits(sign | (two_w < cutoff ? ref_f32_bits(denormalized)
                                                    : ref_f32_bits(normalized)));
}
static inline uint16_t ref_float_to_half(float f) {
    float base = ((f < 0 ? -f : f) * 0x1.0p+112f) * 0x1.0p-110f;
    const uint32_t w = ref_f32_bits(f);
    const uint32_t shl1_w = w + w;
    const uint32_t sign = w & UINT32_C(0x80000000);
    uint32_t bias = shl1_w & UINT32_C(0xFF000000);
    if (bias < UINT32_C(0x71000000))
        bias = UINT32_C(0x71000000);
    base = ref_f32_from_bits((bias >> 1) + UINT32_C(0x07800000)) + base;
    const uint32_t bits = ref_f32_bits(base);
    const uint32_t nonsign = ((bits >> 13) & UINT32_C(0x00007C00)) + (bits & UINT32_C(0x00000FFF));
    return (uint16_t)((sign >> 16) | (shl1_w > UINT32_C(0xFF000000) ? UINT32_C(0x7E00) : nonsign));
}
/* exp for float32, branch-free so loops calling it vectorise (libm's expf
 * does not): Cephes' range reduction and polynomial, <= 1 ulp from the
 * correctly rounded result over the whole range, with exact inf/0/NaN
 * handling and gradual underflow. */
static inline float ref_expf(float x) {
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
    y = y * ref_f32_from_bits((uint32_t)(n1 + 127) << 23);
    y = y * ref_f32_from_bits((uint32_t)(n2 + 127) << 23);
    return x != x ? x : y;
}

/* natural log for float32, branch-free (vectorisable): Cephes' logf
 * (mantissa in [sqrt(1/2), sqrt(2)), degree-9 polynomial), <= 1 ulp;
 * subnormals are scaled first; log(0) = -inf, log(x < 0) = NaN,
 * log(inf) = inf, NaN stays NaN. */
static inline float ref_logf(float x) {
    /* both arms of every select are computed unconditionally: under the
     * default -ftrapping-math the compiler may not speculate a float op out
     * of a ?: arm, and a branch would stop vectorisation */
    int sub = x < 0x1.0p-126f;
    float scaled = x * 0x1.0p+25f;
    float xs = sub ? scaled : x;
    uint32_t b = ref_f32_bits(xs);
    int32_t e = (int32_t)((b >> 23) & 0xff) - 126 - (sub ? 25 : 0);
    float m = ref_f32_from_bits((b & 0x807fffffu) | 0x3f000000u); /* [0.5, 1) */
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
    uint32_t bx = ref_f32_bits(x), rb = ref_f32_bits(r);
    uint32_t is_zero = (uint32_t)((bx & 0x7fffffffu) == 0);
    uint32_t is_neg = (bx >> 31) & (is_zero ^ 1u);
    uint32_t is_inf_or_nan = (uint32_t)((bx & 0x7f800000u) == 0x7f800000u);
    uint32_t mzero = 0u - is_zero, mneg = 0u - is_neg;
    uint32_t mpass = 0u - (is_inf_or_nan & (is_neg ^ 1u)); /* +inf -> inf, NaN -> NaN */
    rb = (rb & ~mzero) | (0xff800000u & mzero);            /* log(+-0) = -inf */
    rb = (rb & ~mneg) | (0x7fc00000u & mneg);              /* log(x < 0) = NaN */
    rb = (rb & ~mpass) | (bx & mpass);
    return ref_f32_from_bits(rb);
}

static inline float ref_bf16_to_float(uint16_t b) { return ref_f32_from_bits((uint32_t)b << 16); }
static inline uint16_t ref_float_to_bf16(float f) {
    uint32_t u = ref_f32_bits(f);
    uint32_t rounded = (u + (((u >> 16) & 1) + UINT32_C(0x7FFF))) >> 16;
    return (uint16_t)(f != f ? UINT32_C(0x7FC0) : rounded);
}

/* float -> int64 without UB: NaN / out of range give INT64_MIN (x86 behaviour) */
static inline int64_t ref_double_to_i64(double d) {
    if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0))
        return INT64_MIN;
    return (int64_t)d;
}

/* One element; the dtype must be valid and not complex. */
double ref_load_f64(const void *p, int32_t dt);
int64_t ref_load_i64(const void *p, int32_t dt);   /* floats truncate toward 0 */
void ref_store_f64(void *p, int32_t dt, double v); /* floats->ints as PyTorch casts */
void ref_store_i64(void *p, int32_t dt, int64_t v);

/* n elements, strides in bytes, every pair of real dtypes, PyTorch's cast
 * semantics (int->float32 rounds once, float->uint8 goes through int64,
 * anything->bool is != 0).  src and dst must not overlap unless identical. */
void ref_convert(void *dst, int32_t dst_dt, int64_t dst_stride, const void *src,
                 int32_t src_dt, int64_t src_stride, int64_t n);

/* ---- tensors --------------------------------------------------------------- */
int64_t ref_numel(const fl_tensor *t);
/* row-major contiguous (size-1 dims ignored) */
int ref_is_contiguous(const fl_tensor *t);
int ref_same_sizes(const fl_tensor *a, const fl_tensor *b);
/* element address of a multi-index */
static inline char *ref_elem_ptr(const fl_tensor *t, const int64_t *idx) {
    char *p = (char *)ref_tensor_data(t);
    size_t es = ref_dtype_size(t->dtype);
    for (int32_t d = 0; d < t->ndim; ++d)
        p += idx[d] * t->strides[d] * (int64_t)es;
    return p;
}
/* [lo, hi) bytes touched by t; returns 0 if t is empty */
int ref_byte_span(const fl_tensor *t, uintptr_t *lo, uintptr_t *hi);
/* 1 if the element sets of a and b may overlap in memory */
int ref_may_overlap(const fl_tensor *a, const fl_tensor *b);
/* the same elements in the same places (identical view) */
int ref_same_view(const fl_tensor *a, const fl_tensor *b);

/* ---- arguments ------------------------------------------------------------- */
typedef struct ref_args {
    const fl_arg *args;
    uint32_t nargs;
    ref_kernel_ctx *ctx;
    const char *op;
} ref_args;

typedef struct ref_scalar {
    int32_t kind;   /* FL_ARG_INT, FL_ARG_FLOAT or FL_ARG_BOOL */
    double f;       /* value as double (always set) */
    int64_t i;      /* value as int64 (set for INT and BOOL) */
} ref_scalar;

/* a tensor operand or a scalar standing in a tensor slot */
typedef struct ref_operand {
    const fl_tensor *t; /* NULL for a scalar */
    ref_scalar s;
} ref_operand;

/* Checks nargs == expected and fills a. */
fl_status ref_args_init(ref_args *a, const char *op, const fl_arg *args, uint32_t nargs,
                        uint32_t expected, ref_kernel_ctx *ctx);
/* ref_kernel_fail prefixed with "<op>: " */
fl_status ref_fail(const ref_args *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* the same message, returning FL_ERROR_NOT_SUPPORTED: for launch-time checks
 * (ref_kernel_def.accepts) declining well-formed arguments the kernel cannot compute */
fl_status ref_decline(const ref_args *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

int ref_arg_is_none(const ref_args *a, uint32_t i);
/* tensor (validated: struct_size, dtype, ndim, sizes, data pointer) */
fl_status ref_get_tensor(const ref_args *a, uint32_t i, const char *name, const fl_tensor **out);
/* NONE -> *out = NULL */
fl_status ref_get_opt_tensor(const ref_args *a, uint32_t i, const char *name,
                             const fl_tensor **out);
/* tensor, or INT/FLOAT/BOOL scalar (a 0-dim CPU tensor the runtime unwrapped) */
fl_status ref_get_operand(const ref_args *a, uint32_t i, const char *name, ref_operand *out);
/* Scalar: INT/FLOAT/BOOL */
fl_status ref_get_scalar(const ref_args *a, uint32_t i, const char *name, ref_scalar *out);
/* Scalar?: *present = 0 for NONE */
fl_status ref_get_opt_scalar(const ref_args *a, uint32_t i, const char *name, int *present,
                             ref_scalar *out);
fl_status ref_get_int(const ref_args *a, uint32_t i, const char *name, int64_t *out);
fl_status ref_get_opt_int(const ref_args *a, uint32_t i, const char *name, int *present,
                          int64_t *out);
/* float (INT and BOOL accepted) */
fl_status ref_get_double(const ref_args *a, uint32_t i, const char *name, double *out);
fl_status ref_get_bool(const ref_args *a, uint32_t i, const char *name, int *out);
/* An out= overload (schema args ending in `out`, then the result, the same
 * tensor) run by the functional kernel fn, which takes the schema args
 * without `out` followed by its output. */
fl_status ref_out_variant(const char *op, const fl_arg *args, uint32_t nargs,
                          ref_kernel_ctx *ctx, ref_kernel_fn fn);
/* str: FL_ARG_STRING */
fl_status ref_get_string(const ref_args *a, uint32_t i, const char *name, const char **out);
/* Tensor[] / Tensor?[] (allow_none: entries may be NULL), each entry validated */
fl_status ref_get_tensor_list(const ref_args *a, uint32_t i, const char *name, int allow_none,
                              const fl_tensor *const **out, uint32_t *count);
/* int[]: INT_LIST (a single INT is taken as a list of one) */
fl_status ref_get_int_list(const ref_args *a, uint32_t i, const char *name,
                           const int64_t **vals, uint32_t *count);
fl_status ref_get_opt_int_list(const ref_args *a, uint32_t i, const char *name, int *present,
                               const int64_t **vals, uint32_t *count);
fl_status ref_get_bool_list(const ref_args *a, uint32_t i, const char *name,
                            const int64_t **vals, uint32_t *count);
/* Generator?: INT_LIST {seed, offset}; NONE -> {0, 0} */
fl_status ref_get_generator(const ref_args *a, uint32_t i, const char *name, uint64_t *seed,
                            uint64_t *offset);
/* ScalarType?: INT holding an fl_dtype; NONE -> *present = 0 */
fl_status ref_get_opt_dtype(const ref_args *a, uint32_t i, const char *name, int *present,
                            int32_t *out);

/* dims: wraps negative dims against ndim (0-dim tensors accept 0 and -1). */
fl_status ref_wrap_dim(const ref_args *a, int64_t dim, int32_t ndim, int32_t *out);

/* tensor dtype check against a mask, failing with a message */
fl_status ref_check_dtype(const ref_args *a, const fl_tensor *t, const char *name, uint64_t mask);

/* ---- type promotion -------------------------------------------------------- */
/* PyTorch's result_type over operands: dimensioned tensors, then 0-dim
 * tensors, then scalars (a float scalar counts as float32, int as int64). */
int32_t ref_result_type(const ref_operand *ops, int n);

/* ---- strided iteration ------------------------------------------------------ */
/* Called once per innermost row: ptrs[k] is operand k's first element of the
 * row, strides[k] its stride in bytes along the row, n the row length. */
typedef void (*ref_row_fn)(char **ptrs, const int64_t *strides, int64_t n, void *ctx);

/* Visit every element of an N-d index space once, by rows.  strides[k][d] is
 * operand k's stride in bytes along dim d.  Dims of size 1 are dropped, dims
 * are ordered by operand order_op's strides (largest outermost; order_op < 0
 * keeps the logical order) and mergeable dims are coalesced.  Nothing is
 * called when a size is 0. */
void ref_for_each_row(int ndim, const int64_t *sizes, int nops, char *const *ptrs,
                      int64_t strides[][REF_MAX_DIMS], int order_op, ref_row_fn fn,
                      void *ctx);

/* The layout work of ref_for_each_row: drops size-1 dims, orders by
 * order_op, coalesces; writes sz/st (nd entries) and returns nd, or -1 when
 * a size is 0.  nops <= 8. */
int ref_simplify_dims(int ndim, const int64_t *sizes, int nops, int64_t strides[][REF_MAX_DIMS],
                      int order_op, int64_t *sz, int64_t st[][REF_MAX_DIMS]);

/* Broadcast tensor t (numpy rules) to `sizes`; writes byte strides. */
fl_status ref_broadcast_strides(const ref_args *a, const fl_tensor *t, const char *name,
                                int ndim, const int64_t *sizes, int64_t *strides_bytes);

/* ---- elementwise engine ----------------------------------------------------- */
/* A loop computes data[0][i] = f(data[1][i], ...) for i < n with byte strides;
 * every operand is already in the dtype the loop asked for. */
typedef void (*ref_loop_fn)(char **data, const int64_t *strides, int64_t n, const void *params);

typedef struct ref_ew_desc {
    const fl_tensor *out;   /* output, any layout (stride 0 over size > 1 is rejected) */
    int32_t out_dtype;      /* dtype the loop writes; cast into out->dtype if different */
    int nin;                /* inputs, <= REF_EW_MAX_INPUTS */
    const ref_operand *in;  /* tensors broadcast to out's shape, or scalars */
    const int32_t *in_dtypes; /* dtype the loop reads for each input */
    /* optional, per input: a dtype each tensor input is first converted to
     * before the loop dtype (PyTorch casts inputs to the common dtype, e.g.
     * int8 or float16, even when the loop computes in int64 / float); -1 or
     * a NULL array: convert directly */
    const int32_t *in_via;
    ref_loop_fn fn;
    const void *params;
} ref_ew_desc;

fl_status ref_elementwise(const ref_args *a, const ref_ew_desc *d);

/* ---- packed copies (kernel_layout.c) ----------------------------------------- */
/* A contiguous row-major copy of t's elements converted to dt, ref_alloc'd
 * (free with ref_free); t NULL -> *out NULL and success. */
fl_status ref_pack(const ref_args *a, const fl_tensor *t, int32_t dt, void **out);
/* Write a row-major buffer of dt into t's elements (any strides); no-op for NULL t. */
void ref_unpack(const fl_tensor *t, int32_t dt, const void *buf);
/* n doubles, ref_alloc'd, failing with a message */
fl_status ref_alloc_f64(const ref_args *a, int64_t n, double **out);
/* ref_free each pointer and set it to NULL */
void ref_free_all(void **ptrs, int n);

/* ---- reductions (kernels_reduce.c) -------------------------------------------- */
/* rmask[d] = 1 for each dim of the optional int[] argument argi ("dim"; a single
 * INT is a list of one); None or [] reduces every dim.  Repeated dims fail. */
fl_status ref_reduce_dim_mask(const ref_args *a, const fl_tensor *in, uint32_t argi,
                              uint8_t *rmask);

/* ---- pooling (kernels_pool.c) ----------------------------------------------------- */
/* int[1] or int[2] argument as a pair; allow_empty: [] sets *empty */
fl_status ref_pool_pair_arg(const ref_args *a, uint32_t i, const char *name, int allow_empty,
                            int64_t *v0, int64_t *v1, int *empty);
typedef struct ref_pool_window {
    int64_t *kh, *kw, *sh, *sw, *ph, *pw;
} ref_pool_window;
/* kernel_size, stride ([] means kernel_size) and padding at args ki .. ki+2 */
fl_status ref_pool_window_args(const ref_args *a, uint32_t ki, const ref_pool_window *w);
/* PyTorch's pooling output size (ceil_mode windows must start inside input + pad) */
int64_t ref_pool_out_size(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dil,
                          int ceil_mode);

/* ---- memory ------------------------------------------------------------------ */
void *ref_alloc(size_t bytes);   /* 64-byte aligned, NULL on failure; free with ref_free */
void ref_free(void *p);

/* ---- BLAS -------------------------------------------------------------------- */
/* Row-major C[m,n] = alpha * op(A)[m,k] @ op(B)[k,n] + beta * C.  dtype
 * FL_FLOAT32 or FL_FLOAT64; A, B, C aligned to the element size; leading
 * dimensions in elements.  Fails if a size does not fit BLAS's int. */
fl_status ref_gemm(const ref_args *a, int32_t dtype, int trans_a, int trans_b, int64_t m,
                   int64_t n, int64_t k, double alpha, const void *A, int64_t lda,
                   const void *B, int64_t ldb, double beta, void *C, int64_t ldc);

/* count gemms with the same shapes: A_i = A + i*sa (elements), likewise B,
 * C; runs the batch on BLAS's threads (cblas_?gemm_batch_strided).  The C_i
 * must not overlap. */
fl_status ref_gemm_batch(const ref_args *a, int32_t dtype, int trans_a, int trans_b, int64_t m,
                         int64_t n, int64_t k, double alpha, const void *A, int64_t lda,
                         int64_t sa, const void *B, int64_t ldb, int64_t sb, double beta, void *C,
                         int64_t ldc, int64_t sc, int64_t count);

/* ---- kernels (defined in kernels_*.c, listed in kernel_table.c) ------------- */
#define REF_KERNEL(name) fl_status name(const fl_arg *args, uint32_t nargs, ref_kernel_ctx *ctx)

/* kernels_elementwise.c */
REF_KERNEL(ref_k_add_tensor); REF_KERNEL(ref_k_add__tensor);
REF_KERNEL(ref_k_add_scalar); REF_KERNEL(ref_k_add__scalar);
REF_KERNEL(ref_k_sub_tensor); REF_KERNEL(ref_k_sub__tensor);
REF_KERNEL(ref_k_sub_scalar); REF_KERNEL(ref_k_sub__scalar);
REF_KERNEL(ref_k_rsub_scalar);
REF_KERNEL(ref_k_mul_tensor); REF_KERNEL(ref_k_mul__tensor);
REF_KERNEL(ref_k_mul_scalar); REF_KERNEL(ref_k_mul__scalar);
REF_KERNEL(ref_k_div_tensor); REF_KERNEL(ref_k_div__tensor);
REF_KERNEL(ref_k_div_scalar); REF_KERNEL(ref_k_div__scalar);
REF_KERNEL(ref_k_maximum); REF_KERNEL(ref_k_minimum);
REF_KERNEL(ref_k_neg); REF_KERNEL(ref_k_neg_);
REF_KERNEL(ref_k_exp); REF_KERNEL(ref_k_exp_);
REF_KERNEL(ref_k_log); REF_KERNEL(ref_k_log_);
REF_KERNEL(ref_k_sqrt); REF_KERNEL(ref_k_sqrt_);
REF_KERNEL(ref_k_rsqrt); REF_KERNEL(ref_k_rsqrt_);
REF_KERNEL(ref_k_abs); REF_KERNEL(ref_k_abs_);
REF_KERNEL(ref_k_sigmoid); REF_KERNEL(ref_k_sigmoid_);
REF_KERNEL(ref_k_tanh); REF_KERNEL(ref_k_tanh_);
REF_KERNEL(ref_k_reciprocal);
REF_KERNEL(ref_k_relu); REF_KERNEL(ref_k_relu_);
REF_KERNEL(ref_k_threshold_backward);
REF_KERNEL(ref_k_sigmoid_backward); REF_KERNEL(ref_k_tanh_backward);
REF_KERNEL(ref_k_pow_tensor_scalar); REF_KERNEL(ref_k_pow__scalar);
REF_KERNEL(ref_k_lerp_scalar); REF_KERNEL(ref_k_lerp__scalar);
REF_KERNEL(ref_k_addcmul); REF_KERNEL(ref_k_addcmul_);
REF_KERNEL(ref_k_addcdiv); REF_KERNEL(ref_k_addcdiv_);
REF_KERNEL(ref_k_clamp); REF_KERNEL(ref_k_clamp_);
REF_KERNEL(ref_k_where_self);
REF_KERNEL(ref_k_eq_tensor); REF_KERNEL(ref_k_ne_tensor); REF_KERNEL(ref_k_gt_tensor);
REF_KERNEL(ref_k_lt_tensor); REF_KERNEL(ref_k_ge_tensor); REF_KERNEL(ref_k_le_tensor);
REF_KERNEL(ref_k_eq_scalar); REF_KERNEL(ref_k_ne_scalar); REF_KERNEL(ref_k_gt_scalar);
REF_KERNEL(ref_k_lt_scalar); REF_KERNEL(ref_k_ge_scalar); REF_KERNEL(ref_k_le_scalar);
/* kernels_copy.c */
REF_KERNEL(ref_k_copy_); REF_KERNEL(ref_k_fill__scalar); REF_KERNEL(ref_k_zero_);
/* kernels_reduce.c */
REF_KERNEL(ref_k_sum); REF_KERNEL(ref_k_sum_dim); REF_KERNEL(ref_k_sum_intlist_out); REF_KERNEL(ref_k_mean);
REF_KERNEL(ref_k_mean_dim); REF_KERNEL(ref_k_argmax); REF_KERNEL(ref_k_max);
REF_KERNEL(ref_k_min);
/* kernels_matmul.c */
REF_KERNEL(ref_k_mm); REF_KERNEL(ref_k_addmm); REF_KERNEL(ref_k_bmm); REF_KERNEL(ref_k_baddbmm);
/* kernels_conv.c */
REF_KERNEL(ref_k_convolution); REF_KERNEL(ref_k_convolution_backward);
REF_KERNEL(ref_accept_convolution); REF_KERNEL(ref_accept_convolution_backward);
/* kernels_pool.c */
REF_KERNEL(ref_k_max_pool2d_with_indices); REF_KERNEL(ref_k_max_pool2d_with_indices_backward);
/* kernels_avgpool.c */
REF_KERNEL(ref_k_avg_pool2d); REF_KERNEL(ref_k_avg_pool2d_backward);
/* kernels_loss.c */
REF_KERNEL(ref_k_log_softmax); REF_KERNEL(ref_k_log_softmax_backward_data);
REF_KERNEL(ref_k_softmax); REF_KERNEL(ref_k_softmax_backward_data);
REF_KERNEL(ref_k_nll_loss_forward); REF_KERNEL(ref_k_nll_loss_backward);
/* kernels_losses.c */
REF_KERNEL(ref_k_mse_loss); REF_KERNEL(ref_k_mse_loss_backward);
REF_KERNEL(ref_k_binary_cross_entropy); REF_KERNEL(ref_k_binary_cross_entropy_backward);
REF_KERNEL(ref_k_smooth_l1_loss); REF_KERNEL(ref_k_smooth_l1_loss_backward);
REF_KERNEL(ref_k_huber_loss); REF_KERNEL(ref_k_huber_loss_backward);
REF_KERNEL(ref_k_log_sigmoid_forward); REF_KERNEL(ref_k_log_sigmoid_backward);
/* kernels_random.c */
REF_KERNEL(ref_k_normal_); REF_KERNEL(ref_k_uniform_); REF_KERNEL(ref_k_bernoulli__float);
REF_KERNEL(ref_k_native_dropout);
/* kernels_norm.c */
REF_KERNEL(ref_k_native_layer_norm); REF_KERNEL(ref_k_native_layer_norm_backward);
REF_KERNEL(ref_k_native_group_norm); REF_KERNEL(ref_k_native_group_norm_backward);
REF_KERNEL(ref_k_native_batch_norm); REF_KERNEL(ref_k_native_batch_norm_backward);
/* kernels_activation.c */
REF_KERNEL(ref_k_gelu); REF_KERNEL(ref_k_gelu_fast); REF_KERNEL(ref_k_gelu_backward); REF_KERNEL(ref_k_silu);
REF_KERNEL(ref_k_silu_); REF_KERNEL(ref_k_silu_backward); REF_KERNEL(ref_k_leaky_relu);
REF_KERNEL(ref_k_leaky_relu_); REF_KERNEL(ref_k_leaky_relu_backward); REF_KERNEL(ref_k_elu);
REF_KERNEL(ref_k_elu_); REF_KERNEL(ref_k_elu_backward); REF_KERNEL(ref_k_softplus);
REF_KERNEL(ref_k_softplus_backward); REF_KERNEL(ref_k_hardtanh); REF_KERNEL(ref_k_hardtanh_);
REF_KERNEL(ref_k_hardtanh_backward); REF_KERNEL(ref_k_native_dropout_backward);
/* kernels_unary.c */
REF_KERNEL(ref_k_sin); REF_KERNEL(ref_k_cos); REF_KERNEL(ref_k_tan); REF_KERNEL(ref_k_asin);
REF_KERNEL(ref_k_acos); REF_KERNEL(ref_k_atan); REF_KERNEL(ref_k_sinh); REF_KERNEL(ref_k_cosh);
REF_KERNEL(ref_k_log1p); REF_KERNEL(ref_k_expm1); REF_KERNEL(ref_k_log2);
REF_KERNEL(ref_k_log10); REF_KERNEL(ref_k_exp2); REF_KERNEL(ref_k_erf); REF_KERNEL(ref_k_erfc);
REF_KERNEL(ref_k_floor); REF_KERNEL(ref_k_ceil); REF_KERNEL(ref_k_trunc);
REF_KERNEL(ref_k_round); REF_KERNEL(ref_k_frac); REF_KERNEL(ref_k_sign); REF_KERNEL(ref_k_sgn);
REF_KERNEL(ref_k_isnan); REF_KERNEL(ref_k_isinf); REF_KERNEL(ref_k_isposinf);
REF_KERNEL(ref_k_isneginf); REF_KERNEL(ref_k_isfinite); REF_KERNEL(ref_k_logical_not);
REF_KERNEL(ref_k_logical_and); REF_KERNEL(ref_k_logical_or); REF_KERNEL(ref_k_logical_xor);
REF_KERNEL(ref_k_bitwise_not); REF_KERNEL(ref_k_bitwise_and_tensor);
REF_KERNEL(ref_k_bitwise_or_tensor); REF_KERNEL(ref_k_bitwise_xor_tensor);
REF_KERNEL(ref_k_bitwise_and_scalar); REF_KERNEL(ref_k_bitwise_or_scalar);
REF_KERNEL(ref_k_bitwise_xor_scalar);
REF_KERNEL(ref_k_atan2); REF_KERNEL(ref_k_pow_tensor_tensor); REF_KERNEL(ref_k_pow_scalar);
REF_KERNEL(ref_k_remainder_tensor); REF_KERNEL(ref_k_remainder_scalar);
REF_KERNEL(ref_k_fmod_tensor); REF_KERNEL(ref_k_fmod_scalar); REF_KERNEL(ref_k_floor_divide);
REF_KERNEL(ref_k_xlogy_tensor); REF_KERNEL(ref_k_logit);
/* kernels_elementwise.c (more) */
REF_KERNEL(ref_k_clamp_min); REF_KERNEL(ref_k_clamp_min_); REF_KERNEL(ref_k_clamp_max);
REF_KERNEL(ref_k_clamp_max_); REF_KERNEL(ref_k_masked_fill_scalar);
REF_KERNEL(ref_k_masked_fill__scalar); REF_KERNEL(ref_k_where_self_out);
/* kernels_stats.c */
REF_KERNEL(ref_k_all); REF_KERNEL(ref_k_any); REF_KERNEL(ref_k_all_dim);
REF_KERNEL(ref_k_any_dim); REF_KERNEL(ref_k_all_dims); REF_KERNEL(ref_k_any_dims);
REF_KERNEL(ref_k_amax); REF_KERNEL(ref_k_amin); REF_KERNEL(ref_k_max_dim);
REF_KERNEL(ref_k_min_dim); REF_KERNEL(ref_k_argmin); REF_KERNEL(ref_k_var_correction);
REF_KERNEL(ref_k_std_correction); REF_KERNEL(ref_k_var_mean_correction);
REF_KERNEL(ref_k_std_mean_correction); REF_KERNEL(ref_k_linalg_vector_norm);
REF_KERNEL(ref_k_prod); REF_KERNEL(ref_k_prod_dim_int); REF_KERNEL(ref_k_cumsum);
/* kernels_index.c */
REF_KERNEL(ref_k_gather); REF_KERNEL(ref_k_scatter_src); REF_KERNEL(ref_k_scatter__src);
REF_KERNEL(ref_k_scatter_value); REF_KERNEL(ref_k_scatter__value);
REF_KERNEL(ref_k_scatter_add); REF_KERNEL(ref_k_scatter_add_); REF_KERNEL(ref_k_index_select);
REF_KERNEL(ref_k_index_tensor); REF_KERNEL(ref_k_index_put_impl_);
REF_KERNEL(ref_k_embedding_dense_backward); REF_KERNEL(ref_k_flip); REF_KERNEL(ref_k_roll);
REF_KERNEL(ref_k_index_add); REF_KERNEL(ref_k_index_add_);
/* kernels_shape.c */
REF_KERNEL(ref_k_cat);

/* kernels_half.c: float16/bfloat16 entries for the float32 kernels */
REF_KERNEL(ref_k_mm_any); REF_KERNEL(ref_k_addmm_any); REF_KERNEL(ref_k_bmm_any);
REF_KERNEL(ref_k_baddbmm_any); REF_KERNEL(ref_k_convolution_any);
REF_KERNEL(ref_k_convolution_backward_any); REF_KERNEL(ref_k_softmax_any);
REF_KERNEL(ref_k_log_softmax_any); REF_KERNEL(ref_k_softmax_backward_data_any);
REF_KERNEL(ref_k_log_softmax_backward_data_any); REF_KERNEL(ref_k_max_pool2d_with_indices_any);
REF_KERNEL(ref_k_max_pool2d_with_indices_backward_any); REF_KERNEL(ref_k_nll_loss_forward_any);
REF_KERNEL(ref_k_nll_loss_backward_any);

#endif /* REF_KERNEL_UTIL_H */
