/*
 * plugin.c -- the reference chip's entry point: version negotiation, the
 * fl_api table and plugin info.  The top layer of the driver (driver.h): it
 * only names the other files' functions.
 */
#include "driver.h"

/* ---- plugin info and the API table --------------------------------------- */

static const fl_plugin_info g_info = {
    .struct_size = sizeof(fl_plugin_info),
    .plugin_name = "reference",
    .vendor = "Torch-FL",
    .device_type = "reference",
    .plugin_version = "0.1.0",
};

/* ABI 1.3 (1.2's lifecycle, 1.3's IPC extension).  The lifecycle is counted by the driver library; the first
 * initialisation maps the devices (what a runtime older than 1.2 gets lazily,
 * at its first device call).  The last teardown releases nothing: tensors a
 * client still holds keep their device memory until the process ends, and a
 * later plugin_initialize finds the devices as they were. */
static fl_status plugin_initialize(fl_plugin_initialize_args *args) { return fld_initialize(args, drv_devices_setup); }
static fl_status plugin_teardown(fl_plugin_teardown_args *args) { return fld_teardown(args, NULL); }
static fl_status stream_create_ex(fl_stream_create_args *args) { return fld_stream_create_ex(args, drv_stream_create); }
static fl_status launch_kernel_ex(fl_launch_kernel_args *args) { return fld_launch_kernel_ex(args, drv_launch_kernel); }

static const fl_api g_api = {
    .struct_size = sizeof(fl_api),
    .abi_version = {
        .struct_size = sizeof(fl_abi_version),
        .major = FL_ABI_VERSION_MAJOR,
        .minor = FL_ABI_VERSION_MINOR,
    },
    .info = &g_info,
    .last_error_message = fld_last_error_message,
    .device_count = drv_device_count,
    .device_properties = drv_device_properties,
    .fl_malloc = drv_malloc,
    .fl_free = drv_free,
    .memory_info = drv_memory_info,
    .memcpy_h2d_async = drv_memcpy_h2d_async,
    .memcpy_d2h_async = drv_memcpy_d2h_async,
    .memcpy_d2d_async = drv_memcpy_d2d_async,
    .memset_async = drv_memset_async,
    .stream_create = drv_stream_create,
    .stream_destroy = drv_stream_destroy,
    .stream_synchronize = drv_stream_synchronize,
    .stream_query = drv_stream_query,
    .stream_wait_event = drv_stream_wait_event,
    .event_create = drv_event_create,
    .event_destroy = drv_event_destroy,
    .event_record = drv_event_record,
    .event_synchronize = drv_event_synchronize,
    .event_query = drv_event_query,
    .event_elapsed_ms = drv_event_elapsed_ms,
    .kernel_table = fld_kernel_table,
    .launch_kernel = drv_launch_kernel,
    .extension_start = &drv_ipc_extension.base,     /* then host memory, the collectives */
    .plugin_initialize = plugin_initialize,
    .plugin_teardown = plugin_teardown,
    .stream_create_ex = stream_create_ex,
    .launch_kernel_ex = launch_kernel_ex,
};

/* The one exported symbol.  Any 1.x request gets our table: a newer runtime
 * reads only what our struct_size covers, an older one ignores the tail (the
 * reference initialises its devices lazily, so it serves runtimes of every
 * minor).  A different major cannot be bridged and is refused by name
 * (fl_driver.h, fld_negotiate). */
__attribute__((visibility("default")))
fl_status fl_plugin_get_api(const fl_abi_version *requested, const fl_api **out) {
    return fld_negotiate(requested, out, &g_api, 0, "the reference plugin");
}
