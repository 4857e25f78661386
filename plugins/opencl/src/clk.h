/*
 * clk.h -- how the opencl plugin's kernels (src/kernels/) reach the device.
 *
 * A kernel file checks its arguments with the SDK kernel library (fl_kernel.h:
 * flk_args, flk_get_*, type promotion, dimension coalescing) exactly as a
 * host kernel does, but never touches tensor data: tensor bases are the
 * driver's buffer handles (internal.h, "device addresses").  It then
 * enqueues one or more OpenCL kernels on the launching stream:
 *
 *     FLK_TRY(clk_need(ctx, CLK_EW, out->dtype));      // the program builds, or decline
 *     clk_launch l;
 *     clk_begin(&l, ctx, CLK_EW, out->dtype, "ew_unary");
 *     clk_tensor(&l, out); clk_tensor(&l, self); clk_bytes(&l, &shape, sizeof shape); ...
 *     return clk_run(&l, n);
 *
 * The OpenCL C of each family (src/cl/<family>.cl.h) is compiled per device
 * and dtype; T is the stored type, ACC the compute type (float for float32 and
 * float16, double for float64), LD/ST load and store through them.  Every
 * kernel of a family takes each tensor as two arguments (its buffer and the
 * element offset of element [0,...,0]), so clk_tensor pushes both.
 *
 * Declines (FL_ERROR_NOT_SUPPORTED) must come before the first enqueue of a
 * launch: clk_need before anything, and launch.c has already declined tensors
 * whose data is not aligned to their element size.
 */
#ifndef PLG_CLK_H
#define PLG_CLK_H

#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

#include "fl_kernel.h"

#pragma GCC visibility push(hidden)

/* The program families: one OpenCL C source each (src/cl/), built per dtype. */
typedef enum clk_family {
    CLK_EW = 0,       /* elementwise, where, fill/copy, foreach, optimizer steps */
    CLK_REDUCE = 1,   /* sums, means, max/min over dimensions */
    CLK_GEMM = 2,     /* mm, addmm, bmm and the convolutions' products */
    CLK_NN = 3,       /* softmax, layer norm, nll, index_select/gather, embedding, im2col */
    CLK_FAMILY_COUNT
} clk_family;

/* The float dtypes a program can be built for (FL_FLOAT64 needs cl_khr_fp64;
 * FL_FLOAT16 is stored as half and computed in float, see device.c). */
#define CLK_FLOATS (FLK_DT(FL_FLOAT32) | FLK_DT(FL_FLOAT64) | FLK_DT(FL_FLOAT16))

/* ---- op codes shared with the OpenCL C (program.c writes them as #defines) -- */

/* out = f(a; p0, p1): unary ops and the ops of a tensor and scalars */
#define CLK_UNARY_OPS(X)                                                                  \
    X(U_COPY) X(U_NEG) X(U_ABS) X(U_RELU) X(U_EXP) X(U_LOG) X(U_SQRT) X(U_RSQRT)          \
    X(U_TANH) X(U_SIGMOID) X(U_SIN) X(U_COS) X(U_RECIPROCAL) X(U_ERF) X(U_LOG1P)          \
    X(U_EXPM1) X(U_GELU) X(U_GELU_TANH) X(U_SILU) X(U_POW) X(U_ADD) X(U_MUL) X(U_DIV)     \
    X(U_RSUB) X(U_FILL) X(U_CLAMP) X(U_THRESHOLD) X(U_LEAKY_RELU) X(U_HARDTANH) X(U_FLOOR) \
    X(U_CEIL) X(U_TRUNC) X(U_ROUND) X(U_SQUARE) X(U_CUBE) X(U_INV_SQUARE) X(U_ONE)
/* out = f(a, b; p0): a and b may each be a tensor or a scalar */
#define CLK_BINARY_OPS(X)                                                                 \
    X(B_ADD) X(B_SUB) X(B_MUL) X(B_DIV) X(B_MAXIMUM) X(B_MINIMUM) X(B_POW) X(B_ATAN2)     \
    X(B_LERP) X(B_THRESHOLD_BACKWARD) X(B_TANH_BACKWARD) X(B_SIGMOID_BACKWARD)            \
    X(B_GELU_BACKWARD) X(B_GELU_TANH_BACKWARD) X(B_SILU_BACKWARD) X(B_RSUB)               \
    X(B_HARDTANH_BACKWARD) X(B_LEAKY_RELU_BACKWARD)
/* bool out = f(a, b) */
#define CLK_COMPARE_OPS(X) X(C_EQ) X(C_NE) X(C_LT) X(C_LE) X(C_GT) X(C_GE)
/* out = f(a, b, c; p0) */
#define CLK_TERNARY_OPS(X) X(T_ADDCMUL) X(T_ADDCDIV) X(T_LERP)

#define CLK_ENUM_ENTRY(name) CLK_##name,
enum clk_unary_op { CLK_UNARY_OPS(CLK_ENUM_ENTRY) CLK_UNARY_COUNT };
enum clk_binary_op { CLK_BINARY_OPS(CLK_ENUM_ENTRY) CLK_BINARY_COUNT };
enum clk_compare_op { CLK_COMPARE_OPS(CLK_ENUM_ENTRY) CLK_COMPARE_COUNT };
enum clk_ternary_op { CLK_TERNARY_OPS(CLK_ENUM_ENTRY) CLK_TERNARY_COUNT };
#undef CLK_ENUM_ENTRY

/* Reductions (src/cl/reduce.cl.h) */
#define CLK_REDUCE_OPS(X) X(R_SUM) X(R_MAX) X(R_MIN) X(R_PROD)
#define CLK_ENUM_ENTRY(name) CLK_##name,
enum clk_reduce_op { CLK_REDUCE_OPS(CLK_ENUM_ENTRY) CLK_REDUCE_COUNT };
#undef CLK_ENUM_ENTRY

/* Device-side checks: a kernel that finds bad data (an index out of range)
 * ORs one of these into the stream's checks buffer; the next synchronize or
 * query of the stream reports it as the stream's error (stream.c). */
#define CLK_CHECKS(X) X(CHECK_INDEX, 1) X(CHECK_TARGET, 2)
#define CLK_CHECK_ENTRY(name, value) CLK_##name = value,
enum clk_check { CLK_CHECKS(CLK_CHECK_ENTRY) };
#undef CLK_CHECK_ENTRY

/* ---- shapes passed by value (the OpenCL C declares the same structs) ------- */

#define CLK_MAX_DIMS 8       /* after coalescing; more is declined */
#define CLK_MAX_OPERANDS 4

/* An elementwise iteration space: operand 0 is the output.  Element offsets
 * and strides are in elements.  Only int64 fields, so the host and device
 * layouts agree on every compiler. */
typedef struct clk_shape {
    cl_long nd;
    cl_long n;                                    /* elements */
    cl_long size[CLK_MAX_DIMS];
    cl_long stride[CLK_MAX_OPERANDS][CLK_MAX_DIMS];
} clk_shape;

/* Build `shape` for `nops` tensors (index 0 the output, sizes `out`) broadcast
 * to out's sizes, dimensions coalesced; NULL entries (scalars) get stride 0.
 * *empty when there is nothing to do.  Declines a shape of more than
 * CLK_MAX_DIMS dimensions after coalescing. */
fl_status clk_shape_of(const flk_args *a, const fl_tensor *out, const fl_tensor *const *ops, int nops,
                       clk_shape *shape, int *empty);

/* ---- one launch ------------------------------------------------------------- */

#define CLK_MAX_ARGS 40

typedef struct clk_launch {
    flk_ctx *ctx;
    clk_family family;
    int32_t dtype;             /* the program's dtype */
    const char *kernel;
    uint32_t nargs;
    struct {
        size_t size;
        const void *value;     /* points into `v`, or at the caller's bytes */
        union { cl_mem m; cl_long l; cl_int i; cl_float f; cl_double d; } v;
    } args[CLK_MAX_ARGS];
    fl_status status;          /* the first failure while adding arguments */
    int checks;                /* the kernel reports through the checks buffer */
} clk_launch;

/* Program `family` for `dtype` on the launch's device is built (or declines). */
fl_status clk_need(flk_ctx *ctx, clk_family family, int32_t dtype);
void clk_begin(clk_launch *l, flk_ctx *ctx, clk_family family, int32_t dtype, const char *kernel);
/* A tensor: its buffer and the element offset of element [0,...,0]. */
void clk_tensor(clk_launch *l, const fl_tensor *t);
/* A tensor or nothing (a NULL buffer and offset 0: the kernel tests a flag). */
void clk_opt_tensor(clk_launch *l, const fl_tensor *t);
void clk_long(clk_launch *l, int64_t v);
void clk_int(clk_launch *l, int32_t v);
/* A number in the program's compute type: float, or double for float64. */
void clk_scalar(clk_launch *l, double v);
/* A struct by value; the bytes must live until clk_run returns. */
void clk_bytes(clk_launch *l, const void *p, size_t n);
/* The stream's checks buffer (__global int *): the kernel may report bad data. */
void clk_checks(clk_launch *l);

#define CLK_GROUP 64          /* work-group size of every 1-D kernel */

/* Enqueue over n items (grid-stride: the kernel loops over i < n with
 * get_global_size(0) steps); nothing when n is 0. */
fl_status clk_run(clk_launch *l, int64_t n);
/* Enqueue one CLK_GROUP-item work-group per unit (rows of a reduction). */
fl_status clk_run_groups(clk_launch *l, int64_t units);
/* Enqueue a 3-d range with the given work-group sizes (global rounded up to them). */
fl_status clk_run_3d(clk_launch *l, const size_t global[3], const size_t local[3]);

/* A device scratch tensor for one launch (im2col columns, a packed
 * operand): contiguous, allocated as device memory like any tensor (it counts
 * against the device's total), freed with clk_scratch_free once its last use
 * is enqueued (the driver keeps it until those commands finish).  Out of
 * memory is FL_ERROR_OUT_OF_MEMORY.  `t` points into the struct: use it in place. */
typedef struct clk_scratch {
    fl_tensor t;
    int64_t sizes[4], strides[4];
    int32_t device;
} clk_scratch;

fl_status clk_scratch_new(flk_ctx *ctx, int32_t dtype, int ndim, const int64_t *sizes, clk_scratch *out);
void clk_scratch_free(clk_scratch *s);

/* Every element of a contiguous tensor set to the `size` bytes at `pattern`
 * (the driver's fill: any dtype, no program needed). */
fl_status clk_fill(flk_ctx *ctx, const fl_tensor *t, const void *pattern, size_t size);

#pragma GCC visibility pop

#endif /* PLG_CLK_H */
