/*
 * kernels.c -- the kernel table, the kernel behind an entry, launch-time
 * declines and running a kernel now (fl_driver.h section 7; fl_abi.h
 * launch_kernel).
 */
#include "fl_driver.h"

fl_status fld_kernel_table(const fl_kernel_entry **entries, uint32_t *count) {
    if (!entries || !count)
        return fld_fail(FL_ERROR_INVALID_POINTER, "kernel_table(entries=%p, count=%p): NULL output pointer",
                        (void *)entries, (void *)count);
    const char *problem = "";
    fl_status st = flk_table(entries, count, &problem);
    return st == FL_SUCCESS ? st : fld_fail(st, "kernel_table: %s", problem);
}

fl_status fld_kernel_of(const fl_kernel_entry *entry, const flk_kernel **def) {
    *def = flk_table_kernel(entry);
    if (!*def)
        return fld_fail(FL_ERROR_INVALID_HANDLE,
                        "launch_kernel: kernel entry %p is not from this plugin's kernel table", (const void *)entry);
    return FL_SUCCESS;
}

fl_status fld_accepts(const flk_kernel *def, int32_t device, const fl_arg *args, uint32_t nargs) {
    if (!def->accepts)
        return FL_SUCCESS;
    flk_ctx ctx = {.device = device, .op = def->op, .message = ""};
    if (def->accepts(args, nargs, &ctx) != FL_ERROR_NOT_SUPPORTED)
        return FL_SUCCESS;   /* malformed arguments fail in the kernel itself */
    return fld_fail(FL_ERROR_NOT_SUPPORTED, "launch_kernel(%s) declines: %s", def->op,
                    ctx.message[0] ? ctx.message : "arguments not supported");
}

fl_status fld_run_kernel(const flk_kernel *def, int32_t device, const fl_arg *args, uint32_t nargs) {
    flk_ctx ctx = {.device = device, .op = def->op, .message = ""};
    fl_status st = def->fn ? def->fn(args, nargs, &ctx)
                           : flk_kernel_fail(&ctx, "the kernel table has no function for it");
    if (st != FL_SUCCESS)
        return fld_fail(st, "%s", ctx.message[0] ? ctx.message : "the kernel failed without a message");
    return FL_SUCCESS;
}
