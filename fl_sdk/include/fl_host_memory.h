/*
 * fl_host_memory.h -- the pinned host-memory extension of the Torch-FL ABI
 * (FL_EXTENSION_HOST_MEMORY, ABI 1.2): page-locked host memory whose copies to
 * and from the plugin's devices may run truly asynchronously.
 *
 * Page-locked memory is the driver's business (cudaHostAlloc, hipHostMalloc,
 * aclrtMallocHost), so it is an optional feature set, found on the extension
 * chain (fl_abi.h, "EXTENSIONS").  Its declarations between FL_CDEF_BEGIN and
 * FL_CDEF_END are read by the runtime's cffi like fl_abi.h's.
 *
 * SEMANTICS
 *  - host_alloc returns a block of `size` bytes the host may read and write at
 *    any time, aligned to at least 64 bytes (a page on most drivers).  It is
 *    usable with any stream of any device of this plugin; `device` names the
 *    device whose copies it speeds up (a driver may place the block near it).
 *  - memcpy_h2d_async / memcpy_d2h_async whose host range lies wholly inside one
 *    live block may run truly asynchronously: they return at once and the
 *    bytes move when the stream reaches the copy.  The runtime then does not
 *    stage through a buffer of its own; it keeps the block alive and does not
 *    modify it itself until the stream has passed the copy (an event recorded
 *    after it has completed).  The user's own writes to such a block are
 *    ordered by the user, as with CUDA's pinned memory.
 *  - Copies with ordinary host memory keep fl_abi.h's rules (the host buffer
 *    must stay valid and unchanged until the stream reaches the copy; the
 *    runtime stages them).
 *  - host_free takes exactly what host_alloc returned.  The runtime frees a
 *    block only after every copy it enqueued on it has completed.
 *  - A plugin without this extension: the runtime hands users ordinary host
 *    memory that still reports is_pinned(), and stages its copies.
 *
 * STATUSES, as fl_malloc's: FL_ERROR_INVALID_POINTER (args NULL; host_free of
 * a pointer that is not a live block: unknown, interior or freed twice),
 * FL_ERROR_INVALID_VALUE (struct_size too small, flags not 0),
 * FL_ERROR_INVALID_DEVICE (device out of range), FL_ERROR_INVALID_SIZE (size 0
 * or more than the host can ever give), FL_ERROR_OUT_OF_MEMORY (a valid
 * request the host cannot serve now).  last_error_message explains each.
 */
#ifndef TORCH_FL_HOST_MEMORY_H
#define TORCH_FL_HOST_MEMORY_H

#include "fl_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* FL_CDEF_BEGIN */
typedef struct fl_host_alloc_args {
    size_t struct_size;
    const struct fl_extension_base *extension_start;
    int32_t device;                  /* the device whose copies the block speeds up */
    uint32_t flags;                  /* reserved, 0 */
    uint64_t size;                   /* bytes, > 0 */
    void *ptr;                       /* out: the block, valid until host_free */
} fl_host_alloc_args;
FL_DEFINE_STRUCT_TRAITS(fl_host_alloc_args, ptr);

typedef struct fl_host_free_args {
    size_t struct_size;
    const struct fl_extension_base *extension_start;
    void *ptr;                       /* exactly what host_alloc returned */
} fl_host_free_args;
FL_DEFINE_STRUCT_TRAITS(fl_host_free_args, ptr);

typedef fl_status (*fl_host_alloc_fn)(fl_host_alloc_args *args);
typedef fl_status (*fl_host_free_fn)(fl_host_free_args *args);

typedef struct fl_host_memory_extension {
    fl_extension_base base;          /* type FL_EXTENSION_HOST_MEMORY */
    /* Both required when the extension is present: */
    fl_host_alloc_fn host_alloc;
    fl_host_free_fn host_free;
} fl_host_memory_extension;
FL_DEFINE_STRUCT_TRAITS(fl_host_memory_extension, host_free);
/* FL_CDEF_END */

#ifdef __cplusplus
}
#endif

#endif /* TORCH_FL_HOST_MEMORY_H */
