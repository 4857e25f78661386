/*
 * entry.c -- a plugin's entry point over its driver's calls: the fl_api table,
 * the counted lifecycle, the _ex forms and version negotiation (fl_driver.h
 * section 9).
 *
 * A plugin is one shared library with one driver, so the table is one static
 * object, filled from the plugin's fld_plugin on the first fl_plugin_get_api
 * and handed out for the life of the process (fl_abi.h "LIFETIMES").
 */
#include "fl_driver.h"

#include <stdio.h>

static pthread_mutex_t g_entry_lock = PTHREAD_MUTEX_INITIALIZER;
static const fld_plugin *g_plugin;     /* set once, with g_table and g_name, under g_entry_lock */
static fl_api g_table;
static char g_name[128];               /* "the <plugin_name> plugin", for negotiation's messages */

static fl_status plugin_initialize(fl_plugin_initialize_args *args) { return fld_initialize(args, g_plugin->open); }
static fl_status plugin_teardown(fl_plugin_teardown_args *args) { return fld_teardown(args, g_plugin->close); }
static fl_status stream_create_ex(fl_stream_create_args *args) {
    return fld_stream_create_ex(args, g_plugin->calls.stream_create);
}
static fl_status launch_kernel_ex(fl_launch_kernel_args *args) {
    return fld_launch_kernel_ex(args, g_plugin->calls.launch_kernel);
}

/* The driver's calls, and what every plugin's table holds the same way. */
static void fill_table(const fld_plugin *plugin) {
    g_table = plugin->calls;
    g_table.struct_size = sizeof(fl_api);
    g_table.abi_version = (fl_abi_version){
        .struct_size = sizeof(fl_abi_version), .major = FL_ABI_VERSION_MAJOR, .minor = FL_ABI_VERSION_MINOR};
    g_table.info = &plugin->info;
    g_table.last_error_message = fld_last_error_message;
    if (!g_table.kernel_table)
        g_table.kernel_table = fld_kernel_table;
    g_table.plugin_initialize = plugin_initialize;
    g_table.plugin_teardown = plugin_teardown;
    g_table.stream_create_ex = stream_create_ex;
    g_table.launch_kernel_ex = launch_kernel_ex;
    snprintf(g_name, sizeof g_name, "the %s plugin", plugin->info.plugin_name ? plugin->info.plugin_name : "unnamed");
}

fl_status fld_plugin_get_api(const fld_plugin *plugin, const fl_abi_version *requested, const fl_api **out) {
    pthread_mutex_lock(&g_entry_lock);
    if (!g_plugin) {
        fill_table(plugin);
        g_plugin = plugin;
    }
    pthread_mutex_unlock(&g_entry_lock);
    return fld_negotiate(requested, out, &g_table, plugin->min_runtime_minor, g_name);
}
