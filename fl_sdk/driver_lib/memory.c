/*
 * memory.c -- "is this range inside one live allocation" (fl_driver.h
 * section 5), asked of the driver through its fld_memory.find, or checked
 * against the block a handle-based driver has already looked up.
 */
#include "fl_driver.h"

fl_status fld_check_range(const fld_memory *memory, int32_t device, fl_devptr base, uint64_t offset,
                          uint64_t size, const char *call, const char *what) {
    fld_block block;
    int found = base != 0 && memory->find(memory->ctx, device, base, &block);
    return fld_check_in_block(found ? &block : NULL, device, base, offset, size, call, what);
}

fl_status fld_check_in_block(const fld_block *block, int32_t device, fl_devptr base, uint64_t offset,
                             uint64_t size, const char *call, const char *what) {
    if (!block)
        return fld_fail(FL_ERROR_INVALID_POINTER, "%s: %s=0x%llx is not inside a live allocation of device %d",
                        call, what, (unsigned long long)base, device);
    uint64_t room = block->size - (base - block->start);
    if (offset > room || size > room - offset)
        return fld_fail(FL_ERROR_INVALID_VALUE,
                        "%s: %s=0x%llx + offset %llu + size %llu overruns its allocation of %llu bytes on device %d",
                        call, what, (unsigned long long)base, (unsigned long long)offset,
                        (unsigned long long)size, (unsigned long long)block->size, device);
    return FL_SUCCESS;
}
