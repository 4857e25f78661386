/*
 * launch.c -- launch_kernel.
 *
 * Kernels live in src/kernels/ and register themselves next to their code
 * (FLK_REGISTER, fl_kernel.h): the SDK kernel library gathers every
 * registration of the plugin into one table (the driver library hands it to
 * the runtime as kernel_table, fl_driver.h section 9).  Nothing here changes
 * when a kernel is added.
 *
 * launch_kernel checks the stream and the entry; the driver library checks
 * every argument (fld_check_args: well-formed tensors whose overflow-checked
 * extent lies inside a live allocation of the stream's device), lets the
 * kernel's `accepts` decline the call, then the chip runs it
 * (plg_chip_launch, host_driver.c).  The kernel checks its arguments itself
 * (flk_args_init, flk_get_*) and may decline a call with
 * FL_ERROR_NOT_SUPPORTED (a skeleton declines them all) before it enqueues
 * anything: the runtime then falls back.
 */
#include "internal.h"

fl_status plg_launch_kernel(fl_stream stream, const fl_kernel_entry *kernel, const fl_arg *args, uint32_t nargs) {
    const flk_kernel *def = NULL;
    fld_arg_plan plan;
    FLK_TRY(plg_stream_check(stream, "launch_kernel"));
    FLK_TRY(fld_kernel_of(kernel, &def));
    FLK_TRY(fld_check_args(&plg_memory, stream->device, def->op, args, nargs, &plan));
    FLK_TRY(fld_accepts(def, stream->device, args, nargs));
    return plg_chip_launch(stream, def, args, nargs, &plan);
}
