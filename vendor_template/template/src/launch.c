/*
 * launch.c -- launch_kernel.
 *
 * Kernels live in src/kernels/ and register themselves next to their code
 * (FLK_REGISTER, fl_kernel.h): the SDK kernel library gathers every
 * registration of the plugin into one table (plugin.c hands it to the runtime
 * through fld_kernel_table).  Nothing here changes when a kernel is added.
 *
 * launch_kernel checks the stream and the entry; the driver library checks
 * every argument (fld_check_args: well-formed tensors whose overflow-checked
 * extent lies inside a live allocation of the stream's device), lets the
 * kernel's `accepts` decline the call, then the kernel runs.  The kernel checks
 * its arguments itself (flk_args_init, flk_get_*) and may decline a call with
 * FL_ERROR_NOT_SUPPORTED (a skeleton declines them all): since it runs before
 * launch_kernel returns, nothing was enqueued and the runtime falls back.
 */
#include "internal.h"

/* TODO(vendor): a chip launch enqueues on the stream's queue instead of
 * running the kernel here: keep a deep copy of the arguments for the queued
 * work (fld_copy_args; the runtime reuses its argument memory once
 * launch_kernel returns, fl_abi.h "LIFETIMES"), and the kernel's failures then
 * become the stream's sticky error (fl_abi.h, "ERRORS"); only `accepts` can
 * still decline. */
fl_status plg_launch_kernel(fl_stream stream, const fl_kernel_entry *kernel, const fl_arg *args, uint32_t nargs) {
    fl_status status = plg_stream_check(stream, "launch_kernel");
    const flk_kernel *def = NULL;
    if (status == FL_SUCCESS)
        status = fld_kernel_of(kernel, &def);
    fld_arg_plan plan;
    if (status == FL_SUCCESS)
        status = fld_check_args(&plg_memory, stream->device, def->op, args, nargs, &plan);
    if (status == FL_SUCCESS)
        status = fld_accepts(def, stream->device, args, nargs);
    if (status == FL_SUCCESS)
        status = fld_run_kernel(def, stream->device, args, nargs);
    return status;
}
