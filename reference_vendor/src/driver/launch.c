/*
 * launch.c -- the reference chip's launch_kernel.  Calls stream.c,
 * memory.c, device.c and queue.c (driver.h lists the layers).
 *
 * The driver library validates the arguments against the device's live
 * allocations (fld_check_args); the kernel may decline the call (complex
 * tensors, its `accepts` check); the arguments are deep-copied into one heap
 * block with tensor bases rewritten to the device's private host view
 * (fld_copy_args), and the kernel is queued on the stream.
 */
#include "driver.h"

#include <stdlib.h>

/* A tensor's base as the stream workers address it: the private view, or
 * nothing when an empty tensor's base is not device memory. */
static fl_devptr private_view(void *ctx, const fl_tensor *t) {
    const drv_device *dev = ctx;
    return drv_mem_in_region(dev, t->base) ? (fl_devptr)(uintptr_t)drv_mem_host(dev, t->base) : 0;
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
        return fld_fail(FL_ERROR_NOT_SUPPORTED, "launch_kernel(%s) declines: %s", def->op, complex);
    return fld_accepts(def, device, args, nargs);   /* malformed arguments fail in the kernel */
}

fl_status drv_launch_kernel(fl_stream stream, const fl_kernel_entry *kernel, const fl_arg *args,
                            uint32_t nargs) {
    fl_status st = drv_stream_check(stream, "launch_kernel");
    const flk_kernel *def = NULL;
    if (st == FL_SUCCESS)
        st = fld_kernel_of(kernel, &def);
    if (st != FL_SUCCESS)
        return st;
    drv_device *dev = drv_device_get(drv_stream_device(stream));
    if (nargs && !args)
        return fld_fail(FL_ERROR_INVALID_VALUE, "launch_kernel(%s): args is NULL with nargs=%u",
                        def->op, nargs);
#ifdef FL_REFERENCE_NULL_KERNELS
    /* The benchmarks' null plugin (benchmarks/null_plugin.py): the same kernel table,
     * memory, copies and declines (so the runtime takes the same paths), but an accepted
     * launch returns here, unvalidated and not queued: what a caller measures is the
     * runtime's own host cost.  Outputs keep whatever bytes their memory held. */
    return decline_unsupported(def, dev->index, args, nargs);
#endif
    fld_arg_plan plan;
    if ((st = fld_check_args(&drv_memory, dev->index, def->op, args, nargs, &plan)) != FL_SUCCESS)
        return st;
    if ((st = decline_unsupported(def, dev->index, args, nargs)) != FL_SUCCESS)
        return st;
    fl_arg *copy = fld_copy_args(&plan, args, nargs, private_view, dev);
    if (!copy)
        return fld_fail(FL_ERROR_INTERNAL, "launch_kernel(%s): out of host memory", def->op);
    drv_task t = {.kind = DRV_TASK_KERNEL, .u.kernel = {.def = def, .args = copy, .nargs = nargs}};
    st = drv_queue_enqueue_kernel(drv_stream_queue(stream), &t, plan.bytes);
    if (st != FL_SUCCESS)
        free(copy);
    return st;
}
