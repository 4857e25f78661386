/*
 * host_memory.c -- the pinned host-memory extension (fl_host_memory.h,
 * ABI 1.2): page-aligned host blocks, locked in RAM where the host allows,
 * tracked so that host_free refuses anything host_alloc did not return.  Calls
 * device.c (driver.h lists the layers); the collectives extension follows it on
 * the chain.
 *
 * The reference's copies always run on the stream's worker, which reads or
 * writes the host buffer when it reaches the copy (copy.c), so a block from
 * here changes nothing in the copy path: it is the memory a real driver's DMA
 * engine would need.  Locking is best effort: where RLIMIT_MEMLOCK is too small
 * for a block (a container's default is often 64 KiB), mlock fails and the
 * block stays pageable.  It is the same memory either way and every copy stays
 * correct; a chip driver that must have locked pages fails with
 * FL_ERROR_OUT_OF_MEMORY there instead.
 */
#include "driver.h"

#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

static fld_ranges g_blocks = FLD_RANGES_INIT;

static uint64_t page_size(void) {
    long page = sysconf(_SC_PAGESIZE);
    return page > 0 ? (uint64_t)page : 4096;
}

/* More than the host can ever give: its physical memory. */
static uint64_t host_memory_bytes(void) {
    long pages = sysconf(_SC_PHYS_PAGES);
    return pages > 0 ? (uint64_t)pages * page_size() : UINT64_MAX;
}

static fl_status host_alloc(fl_host_alloc_args *args) {
    static const char call[] = "host_alloc";
    fl_status st = FLD_CHECK_ARGS(args, fl_host_alloc_args, call);
    if (st != FL_SUCCESS)
        return st;
    args->ptr = NULL;
    if (args->flags != 0)
        return fld_fail(FL_ERROR_INVALID_VALUE, "%s: flags=0x%x, but no flag is defined (pass 0)", call, args->flags);
    if (!drv_device_get(args->device))
        return drv_bad_device(args->device, call);
    uint64_t limit = host_memory_bytes();
    if (args->size == 0 || args->size > limit)
        return fld_fail(FL_ERROR_INVALID_SIZE, "%s(device=%d, size=%llu): size must be > 0 and at most the host's "
                        "%llu bytes", call, args->device, (unsigned long long)args->size, (unsigned long long)limit);
    void *block = NULL;
    if (posix_memalign(&block, (size_t)page_size(), (size_t)args->size) != 0)
        return fld_fail(FL_ERROR_OUT_OF_MEMORY, "%s(device=%d, size=%llu): the host cannot give that much now", call,
                        args->device, (unsigned long long)args->size);
    (void)mlock(block, (size_t)args->size);     /* best effort: see the top of the file */
    if (fld_ranges_add(&g_blocks, (uintptr_t)block, args->size, UINT64_MAX) != FLD_RANGES_OK) {
        munlock(block, (size_t)args->size);
        free(block);
        return fld_fail(FL_ERROR_OUT_OF_MEMORY, "%s: out of host memory for the block table", call);
    }
    args->ptr = block;
    return FL_SUCCESS;
}

static fl_status host_free(fl_host_free_args *args) {
    static const char call[] = "host_free";
    fl_status st = FLD_CHECK_ARGS(args, fl_host_free_args, call);
    if (st != FL_SUCCESS)
        return st;
    uint64_t size;
    if (!args->ptr || fld_ranges_remove(&g_blocks, (uintptr_t)args->ptr, &size) != FLD_RANGES_OK)
        return fld_fail(FL_ERROR_INVALID_POINTER, "%s(%p): not a live block of host_alloc (unknown, interior or "
                        "freed already)", call, args->ptr);
    munlock(args->ptr, (size_t)size);
    free(args->ptr);
    return FL_SUCCESS;
}

const fl_host_memory_extension drv_host_memory_extension = {
    .base = {.struct_size = sizeof(fl_host_memory_extension), .type = FL_EXTENSION_HOST_MEMORY,
             .next = &drv_collectives_extension.base},
    .host_alloc = host_alloc,
    .host_free = host_free,
};
