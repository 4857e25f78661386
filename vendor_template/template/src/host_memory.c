/*
 * host_memory.c -- the pinned host-memory extension (fl_host_memory.h, ABI
 * 1.2): skeletons.  Calls nothing but the driver library (internal.h lists the
 * layers).
 *
 * Page-locked host memory lets memcpy_h2d_async / memcpy_d2h_async run truly
 * asynchronously (the chip's DMA engine reads the block when the stream gets
 * there).  Until PLG_HOST_MEMORY_READY (internal.h) is 1 the extension is not
 * offered: users still get pin_memory() tensors, from ordinary host memory, and
 * the runtime stages their copies.  TODO(vendor): allocate with the driver's
 * pinned allocator (cudaHostAlloc-style), keep the blocks in a table so
 * host_free refuses anything else, set PLG_HOST_MEMORY_READY to 1 and run
 * `fl-sdk test . -k host_memory`.  The reference vendor's driver/host_memory.c
 * is a complete host example.
 */
#include "internal.h"

static fl_status host_alloc(fl_host_alloc_args *args) {
    fl_status status = FLD_CHECK_ARGS(args, fl_host_alloc_args, "host_alloc");
    if (status != FL_SUCCESS)
        return status;
    args->ptr = NULL;   /* TODO(vendor): args->size bytes of pinned memory near device args->device */
    return fld_fail(FL_ERROR_NOT_SUPPORTED, "host_alloc: pinned host memory is not written yet (src/host_memory.c)");
}

static fl_status host_free(fl_host_free_args *args) {
    fl_status status = FLD_CHECK_ARGS(args, fl_host_free_args, "host_free");
    if (status != FL_SUCCESS)
        return status;
    return fld_fail(FL_ERROR_INVALID_POINTER, "host_free(%p): not a block of host_alloc (none is written yet)",
                    args->ptr);
}

const fl_host_memory_extension plg_host_memory = {
    .base = {.struct_size = sizeof(fl_host_memory_extension), .type = FL_EXTENSION_HOST_MEMORY,
#if PLG_COLLECTIVES_READY
             .next = &plg_collectives.base,     /* the chain goes on to the collectives */
#endif
    },
    .host_alloc = host_alloc,
    .host_free = host_free,
};
