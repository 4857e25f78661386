/*
 * second_vendor.c -- turns a build of the reference plugin into a second
 * vendor ("reference2") for the two-plugin tests of stable device IDs (F2).
 *
 * Built together with the reference sources (reference_vendor/src) and
 * -Dfl_plugin_get_api=ref_inner_get_api, so the reference entry point is
 * renamed (the header's declaration too); this file exports the real entry
 * point, asks the reference one for its table and answers with a copy that
 * names another plugin and device type.
 */
#include "fl_abi.h"

#include <string.h>

#undef fl_plugin_get_api

static const fl_plugin_info g_info = {
    .struct_size = sizeof(fl_plugin_info),
    .plugin_name = "reference2",
    .vendor = "Torch-FL Second Vendor",
    .device_type = "reference2",
    .plugin_version = "0.1.0",
};

static fl_api g_api;

fl_status fl_plugin_get_api(const fl_abi_version *requested, const fl_api **out) {
    const fl_api *inner = NULL;
    fl_status status = ref_inner_get_api(requested, &inner);
    if (status != FL_SUCCESS || out == NULL)
        return status;
    memcpy(&g_api, inner, sizeof g_api);
    g_api.info = &g_info;
    *out = &g_api;
    return FL_SUCCESS;
}
