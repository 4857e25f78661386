/*
 * negotiate.c -- the body of fl_plugin_get_api (fl_driver.h section 2;
 * fl_abi.h "COMPATIBILITY PROMISE").
 */
#include "fl_driver.h"

fl_status fld_negotiate(const fl_abi_version *requested, const fl_api **out, const fl_api *table,
                        uint32_t min_runtime_minor, const char *plugin) {
    if (!requested || !out)
        return fld_fail(FL_ERROR_INVALID_POINTER, "fl_plugin_get_api(requested=%p, out=%p): NULL pointer",
                        (const void *)requested, (void *)out);
    *out = NULL;
    if (requested->struct_size < FL_STRUCT_SIZE(fl_abi_version, minor))
        return fld_fail(FL_ERROR_INVALID_VALUE,
                        "fl_plugin_get_api: requested->struct_size=%zu is smaller than an fl_abi_version (%zu)",
                        requested->struct_size, FL_STRUCT_SIZE(fl_abi_version, minor));
    if (requested->major != table->abi_version.major)
        return fld_fail(FL_ERROR_INCOMPATIBLE_ABI,
                        "fl_plugin_get_api: the runtime requested Torch-FL ABI %u.%u but %s implements ABI %u.%u "
                        "(major versions differ)",
                        requested->major, requested->minor, plugin, table->abi_version.major,
                        table->abi_version.minor);
    if (requested->minor < min_runtime_minor) {
        *out = table;   /* the runtime reads abi_version and last_error_message to say why (fl_abi.h) */
        return fld_fail(FL_ERROR_INCOMPATIBLE_ABI,
                        "fl_plugin_get_api: %s was built against Torch-FL ABI %u.%u and needs a runtime that "
                        "speaks ABI %u.%u or later, but this runtime speaks %u.%u: upgrade Torch-FL",
                        plugin, table->abi_version.major, table->abi_version.minor, table->abi_version.major,
                        min_runtime_minor, requested->major, requested->minor);
    }
    *out = table;
    return FL_SUCCESS;
}
