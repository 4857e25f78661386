/*
 * lifecycle.c -- the arguments-struct rule, the counted plugin_initialize /
 * plugin_teardown pair and the _ex forms of stream_create and launch_kernel
 * (fl_driver.h section 8; fl_abi.h "CALLS" and "LIFECYCLE", ABI 1.2).
 */
#include "fl_driver.h"

fl_status fld_check_args_struct(const void *args, size_t needed, const char *call) {
    if (!args)
        return fld_fail(FL_ERROR_INVALID_POINTER, "%s: args is NULL", call);
    size_t given = *(const size_t *)args;     /* every args struct starts with its struct_size */
    if (given < needed)
        return fld_fail(FL_ERROR_INVALID_VALUE, "%s: args->struct_size=%zu is smaller than the %zu bytes the call "
                        "needs (set it to the struct's _STRUCT_SIZE)", call, given, needed);
    return FL_SUCCESS;
}

/* One process may hold the plugin for several clients (the runtime, a tool):
 * the first initialisation sets up, the last teardown releases. */
static pthread_mutex_t g_lifecycle_lock = PTHREAD_MUTEX_INITIALIZER;
static uint32_t g_initialized;

fl_status fld_initialize(fl_plugin_initialize_args *args, fld_setup_fn setup) {
    fl_status st = FLD_CHECK_ARGS(args, fl_plugin_initialize_args, "plugin_initialize");
    if (st != FL_SUCCESS)
        return st;
    pthread_mutex_lock(&g_lifecycle_lock);
    if (g_initialized == 0 && setup)
        st = setup(args);
    if (st == FL_SUCCESS)
        g_initialized++;
    pthread_mutex_unlock(&g_lifecycle_lock);
    return st;
}

fl_status fld_teardown(fl_plugin_teardown_args *args, fld_release_fn release) {
    fl_status st = FLD_CHECK_ARGS(args, fl_plugin_teardown_args, "plugin_teardown");
    if (st != FL_SUCCESS)
        return st;
    pthread_mutex_lock(&g_lifecycle_lock);
    if (g_initialized == 0)
        st = fld_fail(FL_ERROR_INVALID_VALUE, "plugin_teardown: the plugin has no initialisation left to tear down "
                      "(each plugin_teardown pairs with one successful plugin_initialize)");
    else if (--g_initialized == 0 && release)
        release();
    pthread_mutex_unlock(&g_lifecycle_lock);
    return st;
}

uint32_t fld_initialized(void) {
    pthread_mutex_lock(&g_lifecycle_lock);
    uint32_t count = g_initialized;
    pthread_mutex_unlock(&g_lifecycle_lock);
    return count;
}

fl_status fld_stream_create_ex(fl_stream_create_args *args, fl_status (*create)(int32_t device, fl_stream *out)) {
    fl_status st = FLD_CHECK_ARGS(args, fl_stream_create_args, "stream_create_ex");
    return st == FL_SUCCESS ? create(args->device, &args->stream) : st;
}

fl_status fld_launch_kernel_ex(fl_launch_kernel_args *args,
                               fl_status (*launch)(fl_stream stream, const fl_kernel_entry *kernel,
                                                   const fl_arg *args, uint32_t nargs)) {
    fl_status st = FLD_CHECK_ARGS(args, fl_launch_kernel_args, "launch_kernel_ex");
    if (st != FL_SUCCESS)
        return st;
    if (args->flags != 0)
        return fld_fail(FL_ERROR_INVALID_VALUE, "launch_kernel_ex: flags=0x%x, but no flag is defined (pass 0)",
                        args->flags);
    return launch(args->stream, args->kernel, args->args, args->nargs);
}
