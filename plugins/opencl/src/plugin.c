/*
 * plugin.c -- the opencl plugin's entry point: version negotiation,
 * the fl_api table and plugin info.  The top layer (internal.h): it only
 * names the other files' functions.
 */
#include "internal.h"

static const fl_plugin_info g_info = {
    .struct_size = sizeof(fl_plugin_info),
    .plugin_name = "opencl",
    .vendor = "OpenCL",
    .device_type = "opencl",
    .plugin_version = "0.1.0",
};

/* ABI 1.2: the lifecycle (counted by the driver library: the first
 * plugin_initialize runs plg_driver_open, the last plugin_teardown
 * plg_driver_close, device.c) and the arguments-struct forms of
 * stream_create and launch_kernel. */
static fl_status plugin_initialize(fl_plugin_initialize_args *args) { return fld_initialize(args, plg_driver_open); }
static fl_status plugin_teardown(fl_plugin_teardown_args *args) { return fld_teardown(args, plg_driver_close); }
static fl_status stream_create_ex(fl_stream_create_args *args) { return fld_stream_create_ex(args, plg_stream_create); }
static fl_status launch_kernel_ex(fl_launch_kernel_args *args) { return fld_launch_kernel_ex(args, plg_launch_kernel); }

static const fl_api g_api = {
    .struct_size = sizeof(fl_api),
    .abi_version = {
        .struct_size = sizeof(fl_abi_version),
        .major = FL_ABI_VERSION_MAJOR,
        .minor = FL_ABI_VERSION_MINOR,
    },
    .info = &g_info,
    .last_error_message = fld_last_error_message,
    .device_count = plg_device_count,
    .device_properties = plg_device_properties,
    .fl_malloc = plg_malloc,
    .fl_free = plg_free,
    .memory_info = plg_memory_info,
    .memcpy_h2d_async = plg_memcpy_h2d_async,
    .memcpy_d2h_async = plg_memcpy_d2h_async,
    .memcpy_d2d_async = plg_memcpy_d2d_async,
    .memset_async = plg_memset_async,
    .stream_create = plg_stream_create,
    .stream_destroy = plg_stream_destroy,
    .stream_synchronize = plg_stream_synchronize,
    .stream_query = plg_stream_query,
    .stream_wait_event = plg_stream_wait_event,
    .event_create = plg_event_create,
    .event_destroy = plg_event_destroy,
    .event_record = plg_event_record,
    .event_synchronize = plg_event_synchronize,
    .event_query = plg_event_query,
    .event_elapsed_ms = plg_event_elapsed_ms,
    .kernel_table = plg_kernel_table,           /* launch.c: the SDK's table, dtypes narrowed per device */
    .launch_kernel = plg_launch_kernel,
    /* the optional feature sets, each off until written (internal.h) */
#if PLG_HOST_MEMORY_READY
    .extension_start = &plg_host_memory.base,    /* host_memory.c; the collectives follow it */
#elif PLG_COLLECTIVES_READY
    .extension_start = &plg_collectives.base,    /* collective.c */
#endif
    .plugin_initialize = plugin_initialize,
    .plugin_teardown = plugin_teardown,
    .stream_create_ex = stream_create_ex,
    .launch_kernel_ex = launch_kernel_ex,
};

/* The lowest ABI minor a runtime must speak to drive this plugin.  The
 * devices are discovered in plugin_initialize (ABI 1.2) and, for a runtime
 * that never calls it, at the first device call (device.c), so every 1.x
 * runtime is served. */
#define PLG_MIN_RUNTIME_MINOR 0

/* The one exported symbol: the driver library answers a request for this
 * major with this table (a newer runtime reads only what struct_size covers)
 * and refuses another major, or a runtime older than PLG_MIN_RUNTIME_MINOR,
 * by name. */
__attribute__((visibility("default")))
fl_status fl_plugin_get_api(const fl_abi_version *requested, const fl_api **out) {
    return fld_negotiate(requested, out, &g_api, PLG_MIN_RUNTIME_MINOR, "opencl");
}
