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

static const fl_api g_api = {
    .struct_size = sizeof(fl_api),
    .abi_version = {
        .struct_size = sizeof(fl_abi_version),
        .major = FL_ABI_VERSION_MAJOR,
        .minor = FL_ABI_VERSION_MINOR,
    },
    .info = &g_info,
    .last_error_message = drv_last_error_message,
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
    .kernel_table = drv_kernel_table,
    .launch_kernel = drv_launch_kernel,
    .extension_start = &drv_collectives_extension.base,
};

/* The one exported symbol.  Any 1.x request gets our 1.1 table: a newer
 * runtime reads only what our struct_size covers, an older one ignores the
 * tail.  A different major cannot be bridged and is refused by name. */
__attribute__((visibility("default")))
fl_status fl_plugin_get_api(const fl_abi_version *requested, const fl_api **out) {
    if (!requested || !out)
        return drv_fail(FL_ERROR_INVALID_POINTER,
                        "fl_plugin_get_api(requested=%p, out=%p): NULL pointer",
                        (const void *)requested, (void *)out);
    *out = NULL;
    if (requested->struct_size < FL_STRUCT_SIZE(fl_abi_version, minor))
        return drv_fail(FL_ERROR_INVALID_VALUE,
                        "fl_plugin_get_api: requested->struct_size=%zu is smaller than "
                        "an fl_abi_version (%zu)",
                        requested->struct_size, FL_STRUCT_SIZE(fl_abi_version, minor));
    if (requested->major != FL_ABI_VERSION_MAJOR)
        return drv_fail(FL_ERROR_INCOMPATIBLE_ABI,
                        "fl_plugin_get_api: the runtime requested Torch-FL ABI %u.%u but the "
                        "reference plugin implements ABI %d.%d (major versions differ)",
                        requested->major, requested->minor, FL_ABI_VERSION_MAJOR,
                        FL_ABI_VERSION_MINOR);
    *out = &g_api;
    return FL_SUCCESS;
}
