/*
 * launch.c -- the kernel table handed to the runtime, and launch_kernel.
 *
 * Kernels live in src/kernels/ and register themselves next to their code
 * (FLK_REGISTER, fl_kernel.h): the SDK kernel library gathers every
 * registration of the plugin into one table, sorted by op and variant, and
 * leaves out kernels that declare no dtype.  Nothing here changes when a
 * kernel is added.
 *
 * launch_kernel checks the stream and the entry, that every tensor argument
 * lies inside a live allocation of the stream's device, lets the kernel's
 * `accepts` decline the call, then runs the kernel.  The kernel checks its
 * arguments itself (flk_args_init, flk_get_*) and may decline a call with
 * FL_ERROR_NOT_SUPPORTED (a skeleton declines them all): since it runs before
 * launch_kernel returns, nothing was enqueued and the runtime falls back.
 */
#include "internal.h"

fl_status plg_kernel_table(const fl_kernel_entry **entries, uint32_t *count) {
    if (!entries || !count)
        return plg_fail(FL_ERROR_INVALID_POINTER, "kernel_table: NULL output pointer");
    const char *problem = "";
    fl_status status = flk_table(entries, count, &problem);
    return status == FL_SUCCESS ? status : plg_fail(status, "kernel_table: %s", problem);
}

/* Bytes from a tensor's base to one past its last element (0 when empty). */
static uint64_t tensor_extent(const fl_tensor *t) {
    uint64_t last = 0;
    for (int32_t d = 0; d < t->ndim; d++) {
        if (t->sizes[d] == 0)
            return 0;
        last += (uint64_t)(t->sizes[d] - 1) * (uint64_t)t->strides[d];
    }
    return (last + 1) * flk_dtype_size(t->dtype);
}

static fl_status check_tensor(int32_t device, const flk_kernel *def, uint32_t i, const fl_tensor *t) {
    char *host;
    if (t->struct_size < FL_STRUCT_SIZE(fl_tensor, strides) || !flk_dtype_valid(t->dtype) || t->ndim < 0 ||
        (t->ndim > 0 && (!t->sizes || !t->strides)))
        return plg_fail(FL_ERROR_INVALID_VALUE, "launch_kernel(%s): argument %u is a malformed tensor", def->op, i);
    for (int32_t d = 0; d < t->ndim; d++)
        if (t->sizes[d] < 0 || t->strides[d] < 0)
            return plg_fail(FL_ERROR_INVALID_VALUE, "launch_kernel(%s): argument %u has a negative size or stride",
                            def->op, i);
    uint64_t extent = tensor_extent(t);
    if (extent == 0)
        return FL_SUCCESS;   /* an empty tensor touches no memory */
    return plg_mem_host(device, t->base, t->byte_offset, extent, def->op, &host);
}

/* Every tensor (and tensor-list entry) must lie inside a live allocation. */
static fl_status check_args(int32_t device, const flk_kernel *def, const fl_arg *args, uint32_t nargs) {
    if (nargs && !args)
        return plg_fail(FL_ERROR_INVALID_VALUE, "launch_kernel(%s): args is NULL with nargs=%u", def->op, nargs);
    for (uint32_t i = 0; i < nargs; i++) {
        fl_status status = FL_SUCCESS;
        if (args[i].kind == FL_ARG_TENSOR) {
            if (!args[i].value.tensor)
                return plg_fail(FL_ERROR_INVALID_VALUE, "launch_kernel(%s): argument %u is a NULL tensor", def->op, i);
            status = check_tensor(device, def, i, args[i].value.tensor);
        } else if (args[i].kind == FL_ARG_TENSOR_LIST) {
            if (args[i].count && !args[i].value.tensors)
                return plg_fail(FL_ERROR_INVALID_VALUE, "launch_kernel(%s): argument %u is a NULL list", def->op, i);
            for (uint32_t j = 0; j < args[i].count && status == FL_SUCCESS; j++)
                if (args[i].value.tensors[j])
                    status = check_tensor(device, def, i, args[i].value.tensors[j]);
        }
        if (status != FL_SUCCESS)
            return status;
    }
    return FL_SUCCESS;
}

/* TODO(vendor): a chip launch enqueues on the stream's queue instead of
 * running the kernel here; the kernel's failures then become the stream's
 * sticky error (fl_abi.h, "ERRORS") and only `accepts` can still decline. */
fl_status plg_launch_kernel(fl_stream stream, const fl_kernel_entry *kernel, const fl_arg *args, uint32_t nargs) {
    fl_status status = plg_stream_check(stream, "launch_kernel");
    if (status != FL_SUCCESS)
        return status;
    const flk_kernel *def = flk_table_kernel(kernel);
    if (!def)
        return plg_fail(FL_ERROR_INVALID_HANDLE, "launch_kernel: %p is not an entry of this plugin's kernel table",
                        (const void *)kernel);
    status = check_args(stream->device, def, args, nargs);
    if (status != FL_SUCCESS)
        return status;
    flk_ctx ctx = {.device = stream->device, .op = def->op, .message = ""};
    if (def->accepts && def->accepts(args, nargs, &ctx) == FL_ERROR_NOT_SUPPORTED)
        return plg_fail(FL_ERROR_NOT_SUPPORTED, "launch_kernel(%s) declines: %s", def->op,
                        ctx.message[0] ? ctx.message : "arguments not supported");
    ctx.message[0] = '\0';
    status = def->fn(args, nargs, &ctx);
    if (status != FL_SUCCESS)
        return plg_fail(status, "%s", ctx.message[0] ? ctx.message : "the kernel failed without a message");
    return FL_SUCCESS;
}
