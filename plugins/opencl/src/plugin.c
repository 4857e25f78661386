/*
 * plugin.c -- the opencl plugin's entry point: its info and its calls, handed
 * to the driver library (fl_driver.h section 9), which fills the fl_api table,
 * counts plugin_initialize / plugin_teardown, adds the _ex forms and
 * negotiates the version.  The top layer (internal.h).
 */
#include "internal.h"

/* The devices are discovered in plugin_initialize (ABI 1.2: plg_driver_open,
 * device.c) and, for a runtime that never calls it, at the first device call,
 * so every 1.x runtime is served (min_runtime_minor 0). */
static const fld_plugin plg_plugin = {
    .info = {.struct_size = sizeof(fl_plugin_info), .plugin_name = "opencl", .vendor = "OpenCL",
             .device_type = "opencl", .plugin_version = "0.1.0"},
    .min_runtime_minor = 0,
    .open = plg_driver_open,
    .close = plg_driver_close,
    .calls = {FLD_DRIVER_CALLS(plg),
              .kernel_table = plg_kernel_table},   /* launch.c: the SDK's table, dtypes narrowed per device */
};

/* The one exported symbol. */
__attribute__((visibility("default")))
fl_status fl_plugin_get_api(const fl_abi_version *requested, const fl_api **out) {
    return fld_plugin_get_api(&plg_plugin, requested, out);
}
