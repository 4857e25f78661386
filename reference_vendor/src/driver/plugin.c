/*
 * plugin.c -- the reference chip's entry point: its info, its calls and its
 * extensions, handed to the driver library (fl_driver.h section 9), which
 * fills the fl_api table, counts plugin_initialize / plugin_teardown, adds the
 * _ex forms and negotiates the version.  The top layer of the driver
 * (driver.h): it only names the other files' functions.
 */
#include "driver.h"

/* ABI 1.4 (1.2's lifecycle, 1.3's IPC extension; 1.4's collectives
 * extension chain carries nothing it reads).  The first initialisation
 * maps the devices (drv_devices_setup; a runtime older than 1.2 gets that
 * lazily, at its first device call, so every 1.x runtime is served:
 * min_runtime_minor 0).  The last teardown releases nothing (no `close`):
 * tensors a client still holds keep their device memory until the process
 * ends, and a later plugin_initialize finds the devices as they were. */
static const fld_plugin drv_plugin = {
    .info = {.struct_size = sizeof(fl_plugin_info), .plugin_name = "reference", .vendor = "Torch-FL",
             .device_type = "reference", .plugin_version = "0.1.0"},
    .min_runtime_minor = 0,
    .open = drv_devices_setup,
    .close = NULL,
    .calls = {FLD_DRIVER_CALLS(drv),
              .extension_start = &drv_ipc_extension.base},   /* then host memory, the collectives */
};

/* The one exported symbol. */
__attribute__((visibility("default")))
fl_status fl_plugin_get_api(const fl_abi_version *requested, const fl_api **out) {
    return fld_plugin_get_api(&drv_plugin, requested, out);
}
