/*
 * memory.c -- device memory, copies and memset.
 *
 * Out of the box device memory is host memory: an fl_devptr is the host
 * address of a posix_memalign'ed block, and every block is registered per
 * device so frees, copies and kernels are checked against live allocations.
 * Copies and memsets run when enqueued (see stream.c), so they complete in
 * stream order.
 *
 * TODO(vendor): allocate with the chip's driver and enqueue the copies and
 * memsets on its queues; keep the checks, the conformance suite tests them.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

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
    uint64_t total = plg_device_total_memory(device);
    if (size == 0 || size > total)
        return fld_fail(FL_ERROR_INVALID_SIZE, "fl_malloc: size %llu is 0 or more than device %d's %llu bytes",
                        (unsigned long long)size, device, (unsigned long long)total);
    uint64_t align = plg_device_alignment(device);
    align = alignment > align ? alignment : align;
    align = align < sizeof(void *) ? sizeof(void *) : align;   /* posix_memalign's minimum */
    void *block = NULL;
    if (posix_memalign(&block, align, size) != 0)
        return fld_fail(FL_ERROR_OUT_OF_MEMORY, "fl_malloc: the host cannot give %llu bytes",
                        (unsigned long long)size);
    if (fld_ranges_add(&g_blocks[device], (uintptr_t)block, size, total) != FLD_RANGES_OK) {
        free(block);
        return fld_fail(FL_ERROR_OUT_OF_MEMORY, "fl_malloc: %llu bytes do not fit in device %d's free %llu bytes",
                        (unsigned long long)size, device,
                        (unsigned long long)(total - fld_ranges_bytes(&g_blocks[device])));
    }
    *out = (fl_devptr)(uintptr_t)block;
    return FL_SUCCESS;
}

fl_status plg_free(int32_t device, fl_devptr ptr) {
    if (!plg_device_valid(device))
        return plg_bad_device(device, "fl_free");
    if (ptr == 0 || fld_ranges_remove(&g_blocks[device], (uintptr_t)ptr, NULL) != FLD_RANGES_OK)
        return fld_fail(FL_ERROR_INVALID_POINTER,
                        "fl_free(device=%d, 0x%llx): not the start of a live allocation of this device", device,
                        (unsigned long long)ptr);
    free((void *)(uintptr_t)ptr);
    return FL_SUCCESS;
}

fl_status plg_memory_info(int32_t device, uint64_t *free_bytes, uint64_t *total_bytes) {
    if (!free_bytes || !total_bytes)
        return fld_fail(FL_ERROR_INVALID_POINTER, "memory_info: NULL output pointer");
    if (!plg_device_valid(device))
        return plg_bad_device(device, "memory_info");
    *total_bytes = plg_device_total_memory(device);
    *free_bytes = *total_bytes - fld_ranges_bytes(&g_blocks[device]);
    return FL_SUCCESS;
}

fl_status plg_mem_host(int32_t device, fl_devptr base, uint64_t offset, uint64_t size, const char *call,
                       char **host) {
    if (!plg_device_valid(device))
        return plg_bad_device(device, call);
    fl_status status = fld_check_range(&plg_memory, device, base, offset, size, call, "address");
    if (status == FL_SUCCESS)
        *host = (char *)(uintptr_t)base + offset;
    return status;
}

/* Checks shared by the host<->device copies; *device_host gets the device side. */
static fl_status check_host_copy(fl_stream stream, const void *host, fl_devptr ptr, uint64_t offset, uint64_t size,
                                 const char *call, char **device_host) {
    fl_status status = plg_stream_check(stream, call);
    if (status == FL_SUCCESS && !host && size)
        status = fld_fail(FL_ERROR_INVALID_POINTER, "%s: the host buffer is NULL", call);
    if (status == FL_SUCCESS)
        status = plg_mem_host(stream->device, ptr, offset, size, call, device_host);
    return status;
}

fl_status plg_memcpy_h2d_async(fl_stream stream, fl_devptr dst, uint64_t dst_offset, const void *src,
                               uint64_t size) {
    char *to = NULL;
    fl_status status = check_host_copy(stream, src, dst, dst_offset, size, "memcpy_h2d_async", &to);
    if (status == FL_SUCCESS && size)
        memcpy(to, src, size);
    return status;
}

fl_status plg_memcpy_d2h_async(fl_stream stream, void *dst, fl_devptr src, uint64_t src_offset, uint64_t size) {
    char *from = NULL;
    fl_status status = check_host_copy(stream, dst, src, src_offset, size, "memcpy_d2h_async", &from);
    if (status == FL_SUCCESS && size)
        memcpy(dst, from, size);
    return status;
}

fl_status plg_memcpy_d2d_async(fl_stream stream, int32_t dst_device, fl_devptr dst, uint64_t dst_offset,
                               int32_t src_device, fl_devptr src, uint64_t src_offset, uint64_t size) {
    char *to = NULL, *from = NULL;
    fl_status status = plg_stream_check(stream, "memcpy_d2d_async");
    if (status == FL_SUCCESS)
        status = plg_mem_host(dst_device, dst, dst_offset, size, "memcpy_d2d_async (dst)", &to);
    if (status == FL_SUCCESS)
        status = plg_mem_host(src_device, src, src_offset, size, "memcpy_d2d_async (src)", &from);
    if (status == FL_SUCCESS && size)
        memmove(to, from, size);   /* source and destination may overlap in one allocation */
    return status;
}

fl_status plg_memset_async(fl_stream stream, fl_devptr dst, uint64_t dst_offset, uint8_t value, uint64_t size) {
    char *to = NULL;
    fl_status status = plg_stream_check(stream, "memset_async");
    if (status == FL_SUCCESS)
        status = plg_mem_host(stream->device, dst, dst_offset, size, "memset_async", &to);
    if (status == FL_SUCCESS && size)
        memset(to, value, size);
    return status;
}
