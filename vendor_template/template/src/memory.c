/*
 * memory.c -- fl_malloc / fl_free, copies and memset: the ABI's checks and
 * the table of live allocations, over the chip (host_driver.c).
 *
 * Every block the chip allocates is registered per device, so frees, copies
 * and kernels are checked against live allocations (fl_driver.h section 5)
 * before the chip sees them; the chip's functions get addresses with their
 * offsets applied, known to lie inside one live allocation.
 */
#include "internal.h"

static fld_ranges g_blocks[PLG_MAX_DEVICES] = {[0 ... PLG_MAX_DEVICES - 1] = FLD_RANGES_INIT};

/* The driver library's view of the live allocations (fl_driver.h, section 5). */
static int find_block(void *ctx, int32_t device, fl_devptr address, fld_block *block) {
    (void)ctx;
    fld_range found;
    if (!plg_device_valid(device) || !fld_ranges_find(&g_blocks[device], (uintptr_t)address, &found))
        return 0;
    *block = (fld_block){(fl_devptr)found.start, found.size};
    return 1;
}

const fld_memory plg_memory = {find_block, NULL};

fl_status plg_malloc(int32_t device, uint64_t size, uint64_t alignment, fl_devptr *out) {
    if (!out)
        return fld_fail(FL_ERROR_INVALID_POINTER, "fl_malloc: out is NULL");
    if (!plg_device_valid(device))
        return plg_bad_device(device, "fl_malloc");
    if (alignment & (alignment - 1))
        return fld_fail(FL_ERROR_INVALID_VALUE, "fl_malloc: alignment %llu is not a power of two",
                        (unsigned long long)alignment);
    uint64_t total = plg_chip_total_memory(device);
    if (size == 0 || size > total)
        return fld_fail(FL_ERROR_INVALID_SIZE, "fl_malloc: size %llu is 0 or more than device %d's %llu bytes",
                        (unsigned long long)size, device, (unsigned long long)total);
    uint64_t align = plg_chip_alignment(device);
    fl_devptr block = 0;
    FLK_TRY(plg_chip_alloc(device, size, alignment > align ? alignment : align, &block));
    if (fld_ranges_add(&g_blocks[device], (uintptr_t)block, size, total) != FLD_RANGES_OK) {
        plg_chip_free(device, block);
        return fld_fail(FL_ERROR_OUT_OF_MEMORY, "fl_malloc: %llu bytes do not fit in device %d's free %llu bytes",
                        (unsigned long long)size, device,
                        (unsigned long long)(total - fld_ranges_bytes(&g_blocks[device])));
    }
    *out = block;
    return FL_SUCCESS;
}

fl_status plg_free(int32_t device, fl_devptr ptr) {
    if (!plg_device_valid(device))
        return plg_bad_device(device, "fl_free");
    if (ptr == 0 || fld_ranges_remove(&g_blocks[device], (uintptr_t)ptr, NULL) != FLD_RANGES_OK)
        return fld_fail(FL_ERROR_INVALID_POINTER,
                        "fl_free(device=%d, 0x%llx): not the start of a live allocation of this device", device,
                        (unsigned long long)ptr);
    plg_chip_free(device, ptr);
    return FL_SUCCESS;
}

fl_status plg_memory_info(int32_t device, uint64_t *free_bytes, uint64_t *total_bytes) {
    if (!free_bytes || !total_bytes)
        return fld_fail(FL_ERROR_INVALID_POINTER, "memory_info: NULL output pointer");
    if (!plg_device_valid(device))
        return plg_bad_device(device, "memory_info");
    *total_bytes = plg_chip_total_memory(device);
    *free_bytes = *total_bytes - fld_ranges_bytes(&g_blocks[device]);
    return FL_SUCCESS;
}

/* [base + offset, + size) of `device`, checked to lie inside one live
 * allocation: *at = base + offset. */
static fl_status resolve(int32_t device, fl_devptr base, uint64_t offset, uint64_t size, const char *call,
                         fl_devptr *at) {
    if (!plg_device_valid(device))
        return plg_bad_device(device, call);
    FLK_TRY(fld_check_range(&plg_memory, device, base, offset, size, call, "address"));
    *at = base + offset;
    return FL_SUCCESS;
}

/* Checks shared by the host<->device copies; *at gets the device side. */
static fl_status check_host_copy(fl_stream stream, const void *host, fl_devptr ptr, uint64_t offset, uint64_t size,
                                 const char *call, fl_devptr *at) {
    FLK_TRY(plg_stream_check(stream, call));
    if (!host && size)
        return fld_fail(FL_ERROR_INVALID_POINTER, "%s: the host buffer is NULL", call);
    return resolve(stream->device, ptr, offset, size, call, at);
}

fl_status plg_memcpy_h2d_async(fl_stream stream, fl_devptr dst, uint64_t dst_offset, const void *src,
                               uint64_t size) {
    fl_devptr to = 0;
    FLK_TRY(check_host_copy(stream, src, dst, dst_offset, size, "memcpy_h2d_async", &to));
    return size ? plg_chip_h2d(stream, to, src, size) : FL_SUCCESS;
}

fl_status plg_memcpy_d2h_async(fl_stream stream, void *dst, fl_devptr src, uint64_t src_offset, uint64_t size) {
    fl_devptr from = 0;
    FLK_TRY(check_host_copy(stream, dst, src, src_offset, size, "memcpy_d2h_async", &from));
    return size ? plg_chip_d2h(stream, dst, from, size) : FL_SUCCESS;
}

fl_status plg_memcpy_d2d_async(fl_stream stream, int32_t dst_device, fl_devptr dst, uint64_t dst_offset,
                               int32_t src_device, fl_devptr src, uint64_t src_offset, uint64_t size) {
    fl_devptr to = 0, from = 0;
    FLK_TRY(plg_stream_check(stream, "memcpy_d2d_async"));
    FLK_TRY(resolve(dst_device, dst, dst_offset, size, "memcpy_d2d_async (dst)", &to));
    FLK_TRY(resolve(src_device, src, src_offset, size, "memcpy_d2d_async (src)", &from));
    return size ? plg_chip_d2d(stream, to, from, size) : FL_SUCCESS;
}

fl_status plg_memset_async(fl_stream stream, fl_devptr dst, uint64_t dst_offset, uint8_t value, uint64_t size) {
    fl_devptr to = 0;
    FLK_TRY(plg_stream_check(stream, "memset_async"));
    FLK_TRY(resolve(stream->device, dst, dst_offset, size, "memset_async", &to));
    return size ? plg_chip_fill(stream, to, value, size) : FL_SUCCESS;
}
