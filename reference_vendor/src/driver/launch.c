/*
 * launch.c -- the reference chip's kernel table and launch_kernel.  Calls
 * stream.c, memory.c, device.c, queue.c and error.c (driver.h lists the
 * layers).
 *
 * launch_kernel validates its arguments against the device's live
 * allocations, gives the kernel a chance to decline the call (complex
 * tensors, its `accepts` check), deep-copies the arguments into one heap
 * block (tensor bases rewritten to the device's private host view) and
 * queues the kernel on the stream.
 */
#include "driver.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the kernel table -------------------------------------------------------- */

/* The kernels register themselves (FLK_REGISTER in each file of kernels/);
 * the SDK kernel library gathers and sorts them once into the table the ABI
 * wants, which lives as long as the plugin. */
fl_status drv_kernel_table(const fl_kernel_entry **entries, uint32_t *count) {
    if (!entries || !count)
        return drv_fail(FL_ERROR_INVALID_POINTER,
                        "kernel_table(entries=%p, count=%p): NULL output pointer",
                        (void *)entries, (void *)count);
    const char *problem = "";
    fl_status st = flk_table(entries, count, &problem);
    return st == FL_SUCCESS ? st : drv_fail(st, "kernel_table: %s", problem);
}

/* ---- launch_kernel: validation ------------------------------------------- */

/* How much the deep copy needs; counted while validating. */
typedef struct launch_plan {
    const char *op;
    drv_device *dev;
    size_t tensors;      /* fl_tensor structs */
    size_t ptrs;         /* entries of tensor-list pointer arrays */
    size_t words;        /* 8-byte values: sizes, strides, int and float lists */
    size_t chars;        /* string bytes, NULs included */
    uint64_t bytes;      /* tensor data the kernel may touch (extents, summed) */
} launch_plan;

static const uint8_t g_itemsize[FL_DTYPE_COUNT] = {
    [FL_FLOAT32] = 4, [FL_FLOAT64] = 8, [FL_FLOAT16] = 2, [FL_BFLOAT16] = 2,
    [FL_INT8] = 1,    [FL_UINT8] = 1,   [FL_INT16] = 2,   [FL_INT32] = 4,
    [FL_INT64] = 8,   [FL_BOOL] = 1,    [FL_COMPLEX64] = 8,
};

/* Failure message prefix "launch_kernel(op): argument i[ entry j]". */
static fl_status arg_fail(const launch_plan *p, uint32_t argi, int64_t entry, const char *what) {
    char where[48] = "";
    if (entry >= 0)
        snprintf(where, sizeof where, " entry %lld", (long long)entry);
    return drv_fail(FL_ERROR_INVALID_VALUE, "launch_kernel(%s): argument %u%s: %s", p->op, argi,
                    where, what);
}

/* Bytes spanned by the tensor's elements: ((sum (size-1)*stride) + 1) * item,
 * or 0 when it has no elements.  Returns 0 on overflow via *ok. */
static uint64_t tensor_extent(const fl_tensor *t, int *ok) {
    uint64_t last = 0, span;
    *ok = 1;
    for (int32_t d = 0; d < t->ndim; d++) {
        if (t->sizes[d] == 0)
            return 0;
        uint64_t step;
        if (__builtin_mul_overflow((uint64_t)(t->sizes[d] - 1), (uint64_t)t->strides[d], &step) ||
            __builtin_add_overflow(last, step, &last))
            return *ok = 0, 0;
    }
    if (__builtin_add_overflow(last, 1, &span) ||
        __builtin_mul_overflow(span, g_itemsize[t->dtype], &span))
        return *ok = 0, 0;
    return span;
}

static const char *tensor_shape_problem(const fl_tensor *t) {
    if (t->struct_size < FL_STRUCT_SIZE(fl_tensor, strides))
        return "fl_tensor.struct_size is too small";
    if (t->dtype < 0 || t->dtype >= FL_DTYPE_COUNT)
        return "unknown dtype";
    if (t->ndim < 0)
        return "negative ndim";
    if (t->ndim > 0 && (!t->sizes || !t->strides))
        return "NULL sizes or strides";
    for (int32_t d = 0; d < t->ndim; d++)
        if (t->sizes[d] < 0 || t->strides[d] < 0)
            return "negative size or stride";
    return NULL;
}

/* Validate one tensor (caller holds the device lock) and count its copy. */
static fl_status plan_tensor(launch_plan *p, const fl_tensor *t, uint32_t argi, int64_t entry) {
    char msg[256];
    const char *problem = tensor_shape_problem(t);
    if (problem)
        return arg_fail(p, argi, entry, problem);
    int ok;
    uint64_t extent = tensor_extent(t, &ok), alloc_size = 0;
    if (!ok)
        return arg_fail(p, argi, entry, "tensor extent overflows");
    /* An empty tensor touches no memory; PyTorch gives those a null base. */
    drv_range_check rc = extent ? drv_mem_check_locked(p->dev, t->base, t->byte_offset, extent,
                                                       &alloc_size)
                                : DRV_RANGE_OK;
    if (rc == DRV_RANGE_NO_ALLOCATION) {
        snprintf(msg, sizeof msg,
                 "tensor base 0x%llx (byte_offset %llu, extent %llu) is not inside a live "
                 "allocation on device %d",
                 (unsigned long long)t->base, (unsigned long long)t->byte_offset,
                 (unsigned long long)extent, p->dev->index);
        return arg_fail(p, argi, entry, msg);
    }
    if (rc == DRV_RANGE_OUT_OF_BOUNDS) {
        snprintf(msg, sizeof msg,
                 "tensor base 0x%llx + byte_offset %llu + extent %llu overruns its allocation "
                 "of %llu bytes on device %d",
                 (unsigned long long)t->base, (unsigned long long)t->byte_offset,
                 (unsigned long long)extent, (unsigned long long)alloc_size, p->dev->index);
        return arg_fail(p, argi, entry, msg);
    }
    p->tensors++;
    p->bytes += extent;
    p->words += 2 * (size_t)t->ndim;
    return FL_SUCCESS;
}

static fl_status plan_list(launch_plan *p, const fl_arg *a, uint32_t argi) {
    if (a->count && !a->value.ints)
        return arg_fail(p, argi, -1, "list with count > 0 has a NULL pointer");
    if (a->kind != FL_ARG_TENSOR_LIST) {
        p->words += a->count;
        return FL_SUCCESS;
    }
    p->ptrs += a->count;
    for (uint32_t j = 0; j < a->count; j++) {
        const fl_tensor *t = a->value.tensors[j];
        fl_status st = t ? plan_tensor(p, t, argi, j) : FL_SUCCESS;
        if (st != FL_SUCCESS)
            return st;
    }
    return FL_SUCCESS;
}

static fl_status plan_arg(launch_plan *p, const fl_arg *a, uint32_t argi) {
    switch (a->kind) {
    case FL_ARG_NONE:
    case FL_ARG_INT:
    case FL_ARG_FLOAT:
    case FL_ARG_BOOL:
        return FL_SUCCESS;
    case FL_ARG_TENSOR:
        if (!a->value.tensor)
            return arg_fail(p, argi, -1, "tensor argument is NULL (use FL_ARG_NONE)");
        return plan_tensor(p, a->value.tensor, argi, -1);
    case FL_ARG_INT_LIST:
    case FL_ARG_FLOAT_LIST:
    case FL_ARG_BOOL_LIST:
    case FL_ARG_TENSOR_LIST:
        return plan_list(p, a, argi);
    case FL_ARG_STRING:
        if (!a->value.str)
            return arg_fail(p, argi, -1, "string argument is NULL");
        p->chars += strlen(a->value.str) + 1;
        return FL_SUCCESS;
    default:
        return arg_fail(p, argi, -1, "unknown fl_arg kind");
    }
}

static fl_status plan_args(launch_plan *p, const fl_arg *args, uint32_t nargs) {
    fl_status st = FL_SUCCESS;
    pthread_mutex_lock(&p->dev->lock);
    for (uint32_t i = 0; i < nargs && st == FL_SUCCESS; i++)
        st = plan_arg(p, &args[i], i);
    pthread_mutex_unlock(&p->dev->lock);
    return st;
}

/* ---- launch_kernel: deep copy ---------------------------------------------- */

/* Cursors into the single block: all 8-byte-aligned parts first, strings last. */
typedef struct copy_cursor {
    const drv_device *dev;
    fl_tensor *tensor;
    const fl_tensor **ptr;
    int64_t *word;
    char *chars;
} copy_cursor;

static void *take_words(copy_cursor *c, const void *src, size_t n) {
    int64_t *dst = c->word;
    memcpy(dst, src, n * sizeof *dst);
    c->word += n;
    return dst;
}

/* Copy a tensor, pointing its base at the private view (or at nothing when
 * an empty tensor's base is not device memory). */
static const fl_tensor *copy_tensor(copy_cursor *c, const fl_tensor *src) {
    fl_tensor *t = c->tensor++;
    t->struct_size = sizeof *t;
    t->base = drv_mem_in_region(c->dev, src->base)
                  ? (fl_devptr)(uintptr_t)drv_mem_host(c->dev, src->base) : 0;
    t->byte_offset = src->byte_offset;
    t->dtype = src->dtype;
    t->ndim = src->ndim;
    t->sizes = take_words(c, src->sizes, (size_t)src->ndim);
    t->strides = take_words(c, src->strides, (size_t)src->ndim);
    return t;
}

static void copy_arg(copy_cursor *c, fl_arg *dst, const fl_arg *src) {
    *dst = *src;
    switch (src->kind) {
    case FL_ARG_TENSOR:
        dst->value.tensor = copy_tensor(c, src->value.tensor);
        break;
    case FL_ARG_INT_LIST:
    case FL_ARG_BOOL_LIST:
    case FL_ARG_FLOAT_LIST: /* int64 and double are both 8 bytes */
        dst->value.ints = take_words(c, src->value.ints, src->count);
        break;
    case FL_ARG_TENSOR_LIST: {
        const fl_tensor **list = c->ptr;
        c->ptr += src->count;
        for (uint32_t j = 0; j < src->count; j++)
            list[j] = src->value.tensors[j] ? copy_tensor(c, src->value.tensors[j]) : NULL;
        dst->value.tensors = list;
        break;
    }
    case FL_ARG_STRING: {
        size_t n = strlen(src->value.str) + 1;
        memcpy(c->chars, src->value.str, n);
        dst->value.str = c->chars;
        c->chars += n;
        break;
    }
    default:
        break;
    }
}

static fl_arg *copy_args(const launch_plan *p, const fl_arg *args, uint32_t nargs) {
    size_t head = nargs * sizeof(fl_arg), tens = p->tensors * sizeof(fl_tensor);
    size_t ptrs = p->ptrs * sizeof(fl_tensor *), words = p->words * sizeof(int64_t);
    char *block = malloc(head + tens + ptrs + words + p->chars + 1);
    if (!block)
        return NULL;
    copy_cursor c = {
        .dev = p->dev,
        .tensor = (fl_tensor *)(block + head),
        .ptr = (const fl_tensor **)(block + head + tens),
        .word = (int64_t *)(block + head + tens + ptrs),
        .chars = block + head + tens + ptrs + words,
    };
    fl_arg *out = (fl_arg *)block;
    for (uint32_t i = 0; i < nargs; i++)
        copy_arg(&c, &out[i], &args[i]);
    return out;
}

/* Every tensor the chip stores is real: no kernel takes complex64, so a call
 * with one is declined before the kernel's own check fails on the stream. */
static const char *complex_argument(const fl_arg *args, uint32_t nargs) {
    for (uint32_t i = 0; i < nargs; i++) {
        const fl_arg *a = &args[i];
        if (a->kind == FL_ARG_TENSOR && a->value.tensor->dtype == FL_COMPLEX64)
            return "complex64 tensors are not supported by the reference chip";
        for (uint32_t j = 0; a->kind == FL_ARG_TENSOR_LIST && j < a->count; j++)
            if (a->value.tensors[j] && a->value.tensors[j]->dtype == FL_COMPLEX64)
                return "complex64 tensors are not supported by the reference chip";
    }
    return NULL;
}

/* FL_ERROR_NOT_SUPPORTED (nothing enqueued) for a call the kernel cannot
 * compute: see flk_kernel.accepts in fl_kernel.h. */
static fl_status decline_unsupported(const flk_kernel *def, int32_t device,
                                     const fl_arg *args, uint32_t nargs) {
    const char *complex = complex_argument(args, nargs);
    if (complex)
        return drv_fail(FL_ERROR_NOT_SUPPORTED, "launch_kernel(%s) declines: %s", def->op, complex);
    if (!def->accepts)
        return FL_SUCCESS;
    flk_ctx ctx = {.device = device, .op = def->op, .message = ""};
    if (def->accepts(args, nargs, &ctx) != FL_ERROR_NOT_SUPPORTED)
        return FL_SUCCESS;   /* malformed arguments fail in the kernel, on the stream */
    return drv_fail(FL_ERROR_NOT_SUPPORTED, "launch_kernel(%s) declines: %s", def->op,
                    ctx.message[0] ? ctx.message : "arguments not supported");
}

fl_status drv_launch_kernel(fl_stream stream, const fl_kernel_entry *kernel, const fl_arg *args,
                            uint32_t nargs) {
    fl_status st = drv_stream_check(stream, "launch_kernel");
    if (st != FL_SUCCESS)
        return st;
    const flk_kernel *def = flk_table_kernel(kernel);
    if (!def)
        return drv_fail(FL_ERROR_INVALID_HANDLE,
                        "launch_kernel: kernel entry %p is not from this plugin's kernel table",
                        (const void *)kernel);
    launch_plan plan = {.op = def->op, .dev = drv_device_get(drv_stream_device(stream))};
    if (nargs && !args)
        return drv_fail(FL_ERROR_INVALID_VALUE, "launch_kernel(%s): args is NULL with nargs=%u",
                        def->op, nargs);
#ifdef FL_REFERENCE_NULL_KERNELS
    /* The benchmarks' null plugin (benchmarks/null_plugin.py): the same kernel table,
     * memory, copies and declines (so the runtime takes the same paths), but an accepted
     * launch returns here, unvalidated and not queued: what a caller measures is the
     * runtime's own host cost.  Outputs keep whatever bytes their memory held. */
    return decline_unsupported(def, plan.dev->index, args, nargs);
#endif
    if ((st = plan_args(&plan, args, nargs)) != FL_SUCCESS)
        return st;
    if ((st = decline_unsupported(def, plan.dev->index, args, nargs)) != FL_SUCCESS)
        return st;
    fl_arg *copy = copy_args(&plan, args, nargs);
    if (!copy)
        return drv_fail(FL_ERROR_INTERNAL, "launch_kernel(%s): out of host memory", def->op);
    drv_task t = {.kind = DRV_TASK_KERNEL, .u.kernel = {.def = def, .args = copy, .nargs = nargs}};
    st = drv_queue_enqueue_kernel(drv_stream_queue(stream), &t, plan.bytes);
    if (st != FL_SUCCESS)
        free(copy);
    return st;
}
