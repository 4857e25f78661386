/*
 * plugin.c -- the reference chip's entry point: version negotiation, the
 * fl_api table, plugin info, the per-thread last error message and the
 * kernel table built from the kernels' ref_kernel_defs.
 */
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- per-thread last error message ---------------------------------------- */

/* Thread-local so that concurrent callers never see each other's errors.
 * It keeps the last failure until the next one (successes do not clear it,
 * which keeps the hot paths free of TLS writes). */
static __thread char tls_message[DRV_MESSAGE_MAX];

fl_status drv_fail(fl_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tls_message, sizeof tls_message, fmt, ap);
    va_end(ap);
    return status;
}

const char *drv_last_error_message(void) { return tls_message; }

/* ---- kernel table ----------------------------------------------------------- */

/* The table is built once from ref_kernel_defs (whose length is only known at
 * link time) and lives as long as the plugin, as the ABI promises. */
static fl_kernel_entry *g_entries;
static uint32_t g_entry_count;
static pthread_once_t g_table_once = PTHREAD_ONCE_INIT;

static void build_kernel_table(void) {
    uint32_t n = ref_kernel_def_count;
    fl_kernel_entry *e = calloc(n ? n : 1, sizeof *e);
    if (!e)
        return;
    for (uint32_t i = 0; i < n; i++) {
        e[i].struct_size = sizeof(fl_kernel_entry);
        e[i].op = ref_kernel_defs[i].op;
        e[i].dtypes = ref_kernel_defs[i].dtypes;
        e[i].variant = ref_kernel_defs[i].variant;
        e[i].flags = 0;
        e[i].impl = &ref_kernel_defs[i];
    }
    g_entry_count = n;
    g_entries = e;
}

fl_status drv_kernel_table(const fl_kernel_entry **entries, uint32_t *count) {
    if (!entries || !count)
        return drv_fail(FL_ERROR_INVALID_POINTER,
                        "kernel_table(entries=%p, count=%p): NULL output pointer",
                        (void *)entries, (void *)count);
    pthread_once(&g_table_once, build_kernel_table);
    if (!g_entries)
        return drv_fail(FL_ERROR_INTERNAL, "kernel_table: out of host memory building the table");
    *entries = g_entries;
    *count = g_entry_count;
    return FL_SUCCESS;
}

/* Only pointers into our own table are accepted: an entry from another
 * plugin (or a copy of ours) is an unknown kernel. */
const ref_kernel_def *drv_kernel_resolve(const fl_kernel_entry *entry) {
    pthread_once(&g_table_once, build_kernel_table);
    if (!entry || !g_entries)
        return NULL;
    uintptr_t p = (uintptr_t)entry, lo = (uintptr_t)g_entries;
    if (p < lo || (p - lo) % sizeof(fl_kernel_entry) != 0)
        return NULL;
    uintptr_t index = (p - lo) / sizeof(fl_kernel_entry);
    if (index >= g_entry_count)
        return NULL;
    return &ref_kernel_defs[index];
}

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
};

/* The one exported symbol.  Any 1.x request gets our 1.0 table: a newer
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
