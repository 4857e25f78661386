/*
 * enqueue.c -- clk.h's functions: what a kernel file calls to put OpenCL
 * kernels on the launching stream.  Calls program.c, stream.c, memory.c,
 * device.c and clapi.c.
 *
 * A clk_launch collects the arguments (buffers with their element offsets,
 * numbers, structs by value) without touching the kernel object; clk_run
 * sets them and enqueues under the kernel object's lock, since a cl_kernel's
 * arguments are shared by every thread that uses it.  Every failure lands in
 * the kernel's flk_ctx message (launch.c turns it into last_error_message).
 */
#include "internal.h"

#include <stdio.h>
#include <string.h>

#define GRID_CAP ((size_t)CLK_GROUP * 4096)   /* grid-stride kernels loop beyond this */

static __thread fl_stream tls_stream;

void plg_enqueue_bind(fl_stream stream) { tls_stream = stream; }

/* The status with fld_fail's message copied into the kernel's context. */
static fl_status into_ctx(flk_ctx *ctx, fl_status status) {
    if (status != FL_SUCCESS)
        snprintf(ctx->message, sizeof ctx->message, "%s", fld_last_error_message());
    return status;
}

fl_status clk_need(flk_ctx *ctx, clk_family family, int32_t dtype) {
    return into_ctx(ctx, plg_program_ready(ctx->device, family, dtype));
}

void clk_begin(clk_launch *l, flk_ctx *ctx, clk_family family, int32_t dtype, const char *kernel) {
    memset(l, 0, sizeof *l);
    l->ctx = ctx;
    l->family = family;
    l->dtype = dtype;
    l->kernel = kernel;
}

/* The next argument slot, or NULL (status set) when there are too many. */
static __typeof__(((clk_launch *)0)->args[0]) *next_arg(clk_launch *l) {
    if (l->nargs == CLK_MAX_ARGS) {
        if (l->status == FL_SUCCESS)
            l->status = flk_kernel_fail(l->ctx, "%s: more than %d kernel arguments", l->kernel, CLK_MAX_ARGS);
        return NULL;
    }
    return &l->args[l->nargs++];
}

#define PUSH(L, MEMBER, VALUE)                                  \
    do {                                                        \
        __typeof__(((clk_launch *)0)->args[0]) *a_ = next_arg(L); \
        if (a_) {                                               \
            a_->v.MEMBER = (VALUE);                             \
            a_->size = sizeof a_->v.MEMBER;                     \
            a_->value = &a_->v.MEMBER;                          \
        }                                                       \
    } while (0)

static void clk_buffer(clk_launch *l, cl_mem m, int64_t offset) {
    PUSH(l, m, m);
    PUSH(l, l, offset);
}

void clk_tensor(clk_launch *l, const fl_tensor *t) {
    cl_mem mem = NULL;
    uint64_t at = 0;
    fl_status status = plg_mem_resolve(l->ctx->device, t->base, t->byte_offset, 0, l->kernel, &mem, &at);
    if (status != FL_SUCCESS && l->status == FL_SUCCESS)
        l->status = into_ctx(l->ctx, status);
    clk_buffer(l, mem, (int64_t)(at / flk_dtype_size(t->dtype)));
}

void clk_opt_tensor(clk_launch *l, const fl_tensor *t) {
    if (t)
        clk_tensor(l, t);
    else
        clk_buffer(l, NULL, 0);
}

void clk_long(clk_launch *l, int64_t v) { PUSH(l, l, v); }

void clk_int(clk_launch *l, int32_t v) { PUSH(l, i, v); }

void clk_scalar(clk_launch *l, double v) {
    if (l->dtype == FL_FLOAT64)
        PUSH(l, d, v);
    else
        PUSH(l, f, (float)v);
}

void clk_bytes(clk_launch *l, const void *p, size_t n) {
    __typeof__(((clk_launch *)0)->args[0]) *a = next_arg(l);
    if (a) {
        a->size = n;
        a->value = p;
    }
}

void clk_checks(clk_launch *l) {
    l->checks = 1;
    PUSH(l, m, plg_stream_checks(tls_stream));
}

static fl_status enqueue(clk_launch *l, cl_uint dims, const size_t *global, const size_t *local) {
    if (l->status != FL_SUCCESS)
        return l->status;
    plg_kernel *k;
    FLK_TRY(into_ctx(l->ctx, plg_program_kernel(l->ctx->device, l->family, l->dtype, l->kernel, &k)));
    const plg_cl_api *cl = plg_cl();
    cl_int err = CL_SUCCESS;
    uint32_t bad_arg = UINT32_MAX;
    pthread_mutex_lock(&k->lock);
    for (uint32_t i = 0; i < l->nargs && bad_arg == UINT32_MAX; i++)
        if ((err = cl->SetKernelArg(k->kernel, i, l->args[i].size, l->args[i].value)) != CL_SUCCESS)
            bad_arg = i;
    if (bad_arg == UINT32_MAX)
        err = cl->EnqueueNDRangeKernel(tls_stream->queue, k->kernel, dims, NULL, global, local, 0, NULL, NULL);
    pthread_mutex_unlock(&k->lock);
    if (err == CL_SUCCESS) {
        plg_stream_touch(tls_stream);
        return FL_SUCCESS;
    }
    if (bad_arg != UINT32_MAX)   /* the host side and the OpenCL C disagree: a plugin bug */
        return flk_kernel_fail(l->ctx, "%s: argument %u of OpenCL kernel %s was refused (%s)",
                               plg_device_label(l->ctx->device), bad_arg, l->kernel, plg_cl_error_name(err));
    return into_ctx(l->ctx, plg_stream_enqueue_failed(tls_stream, l->kernel, err));
}

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

fl_status clk_run(clk_launch *l, int64_t n) {
    if (n <= 0)
        return l->status;
    size_t global = round_up((size_t)n, CLK_GROUP), local = CLK_GROUP;
    if (global > GRID_CAP)
        global = GRID_CAP;
    return enqueue(l, 1, &global, &local);
}

fl_status clk_run_groups(clk_launch *l, int64_t units) {
    if (units <= 0)
        return l->status;
    size_t global = (size_t)units * CLK_GROUP, local = CLK_GROUP;
    return enqueue(l, 1, &global, &local);
}

fl_status clk_run_3d(clk_launch *l, const size_t global[3], const size_t local[3]) {
    size_t rounded[3];
    for (int d = 0; d < 3; d++) {
        if (global[d] == 0)
            return l->status;
        rounded[d] = round_up(global[d], local[d]);
    }
    return enqueue(l, 3, rounded, local);
}

fl_status clk_scratch_new(flk_ctx *ctx, int32_t dtype, int ndim, const int64_t *sizes, clk_scratch *out) {
    memset(out, 0, sizeof *out);
    uint64_t bytes = flk_dtype_size(dtype);
    for (int d = ndim - 1; d >= 0; d--) {
        out->sizes[d] = sizes[d];
        out->strides[d] = (int64_t)(bytes / flk_dtype_size(dtype));
        bytes *= (uint64_t)(sizes[d] > 0 ? sizes[d] : 1);
    }
    out->t = (fl_tensor){sizeof(fl_tensor), 0, 0, dtype, ndim, out->sizes, out->strides};
    out->device = ctx->device;
    return into_ctx(ctx, plg_malloc(ctx->device, bytes, 0, &out->t.base));
}

void clk_scratch_free(clk_scratch *s) {
    if (s->t.base)
        plg_free(s->device, s->t.base);
    s->t.base = 0;
}

fl_status clk_fill(flk_ctx *ctx, const fl_tensor *t, const void *pattern, size_t size) {
    int64_t n = flk_numel(t);
    if (n == 0)
        return FL_SUCCESS;
    cl_mem mem;
    uint64_t at;
    FLK_TRY(into_ctx(ctx, plg_mem_resolve(ctx->device, t->base, t->byte_offset, (uint64_t)n * size, "fill", &mem,
                                          &at)));
    cl_int err = plg_cl()->EnqueueFillBuffer(tls_stream->queue, mem, pattern, size, at, (uint64_t)n * size, 0, NULL,
                                             NULL);
    if (err != CL_SUCCESS)
        return into_ctx(ctx, plg_stream_enqueue_failed(tls_stream, "fill", err));
    plg_stream_touch(tls_stream);
    return FL_SUCCESS;
}

/* ---- shapes ---------------------------------------------------------------------------- */

fl_status clk_shape_of(const flk_args *a, const fl_tensor *out, const fl_tensor *const *ops, int nops,
                       clk_shape *shape, int *empty) {
    int64_t strides[CLK_MAX_OPERANDS][FLK_MAX_DIMS], sz[FLK_MAX_DIMS], st[CLK_MAX_OPERANDS][FLK_MAX_DIMS];
    int ndim = out->ndim;
    memset(strides, 0, sizeof strides);
    for (int k = 0; k < nops; k++) {
        if (!ops[k])
            continue;   /* a scalar: stride 0 everywhere */
        FLK_TRY(flk_broadcast_strides(a, ops[k], k == 0 ? "out" : "input", ndim, out->sizes, strides[k]));
        int64_t size = (int64_t)flk_dtype_size(ops[k]->dtype);
        for (int d = 0; d < ndim; d++)
            strides[k][d] /= size;   /* bytes -> elements */
    }
    int nd = flk_simplify_dims(ndim, out->sizes, nops, strides, 0, sz, st);
    memset(shape, 0, sizeof *shape);
    *empty = nd < 0;
    if (nd < 0)
        return FL_SUCCESS;
    if (nd > CLK_MAX_DIMS)
        return flk_decline(a, "%d dimensions after coalescing (the OpenCL kernels take %d)", nd, CLK_MAX_DIMS);
    shape->nd = nd;
    shape->n = 1;
    for (int d = 0; d < nd; d++) {
        shape->size[d] = sz[d];
        shape->n *= sz[d];
        for (int k = 0; k < nops; k++)
            shape->stride[k][d] = st[k][d];
    }
    return FL_SUCCESS;
}
