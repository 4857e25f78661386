/*
 * structs.c -- filling a caller's size-prefixed output struct with whole
 * fields only (fl_driver.h section 3; fl_abi.h "OUTPUT STRUCTS").
 */
#include "fl_driver.h"

#include <string.h>

size_t fld_covered_prefix(size_t size, const size_t *field_ends, size_t count) {
    size_t covered = 0;
    for (size_t i = 0; i < count && field_ends[i] <= size; i++)
        covered = field_ends[i];
    return covered;
}

/* Every field of fl_device_properties, in order: one list for every plugin. */
static const size_t g_properties_ends[] = {
    FL_STRUCT_SIZE(fl_device_properties, struct_size),
    FL_STRUCT_SIZE(fl_device_properties, name),
    FL_STRUCT_SIZE(fl_device_properties, vendor),
    FL_STRUCT_SIZE(fl_device_properties, uuid),
    FL_STRUCT_SIZE(fl_device_properties, driver_version),
    FL_STRUCT_SIZE(fl_device_properties, total_memory),
    FL_STRUCT_SIZE(fl_device_properties, alignment),
    FL_STRUCT_SIZE(fl_device_properties, supported_dtypes),
    FL_STRUCT_SIZE(fl_device_properties, multiprocessor_count),
    FL_STRUCT_SIZE(fl_device_properties, flags),
};

fl_status fld_device_properties_out(fl_device_properties *props, const fl_device_properties *full,
                                    int32_t device) {
    if (!props)
        return fld_fail(FL_ERROR_INVALID_POINTER, "device_properties(device=%d, props=NULL): NULL output pointer",
                        device);
    if (props->struct_size < sizeof props->struct_size)
        return fld_fail(FL_ERROR_INVALID_VALUE, "device_properties(device=%d): props->struct_size=%zu is too small",
                        device, props->struct_size);
    size_t n = fld_covered_prefix(props->struct_size, g_properties_ends,
                                  sizeof g_properties_ends / sizeof g_properties_ends[0]);
    memcpy((char *)props + sizeof props->struct_size, (const char *)full + sizeof props->struct_size,
           n - sizeof props->struct_size);
    props->struct_size = n;
    return FL_SUCCESS;
}
