/*
 * fl_ipc.h -- the inter-process memory extension of the Torch-FL ABI
 * (FL_EXTENSION_IPC, ABI 1.3): export a device allocation as a handle another
 * process of the same host opens, so both address one memory (CUDA IPC's
 * cudaIpcGetMemHandle / cudaIpcOpenMemHandle / cudaIpcCloseMemHandle).
 *
 * Sharing device memory between processes is the driver's business, so it is
 * an optional feature set, found on the extension chain (fl_abi.h,
 * "EXTENSIONS").  Its declarations between FL_CDEF_BEGIN and FL_CDEF_END are
 * read by the runtime's cffi like fl_abi.h's.  torch.multiprocessing uses it
 * to send fl tensors (docs/users/ipc.md); a plugin without it keeps working,
 * and sending an fl tensor then fails with FLSharingError saying so.
 *
 * SEMANTICS
 *  - ipc_get_handle(device, ptr): `ptr` lies in a live allocation of
 *    fl_malloc on `device`; the handle covers that whole allocation, and
 *    `offset` says where `ptr` lies in it.  The handle is plain bytes: it may
 *    be copied, sent through a pipe or a file, and opened by any process of
 *    the same host that loaded the same plugin, as often as it likes.
 *  - ipc_open_handle(device, handle): maps the allocation into this process's
 *    address space of `device` (the same device index the exporter used) and
 *    returns its start, `ptr`, and `size`.  The result is a device address
 *    like any fl_malloc one: kernels, copies and memsets of this process take
 *    it.  It is not an allocation of this process: it goes back through
 *    ipc_close_handle, never fl_free, and it cannot itself be exported again
 *    (ipc_get_handle answers FL_ERROR_INVALID_POINTER), as with CUDA.  An exporter may open its own
 *    handle; the plugin may then return a second address of the same memory.
 *  - ipc_close_handle(device, ptr): unmaps what ipc_open_handle returned.
 *  - Lifetime: the allocation stays valid while the exporter keeps it
 *    allocated; the exporter must not fl_free it while an importer has it
 *    open (the runtime counts opens and frees after the last close).  What an
 *    importer reads of memory freed under it is undefined, but never crashes
 *    the exporter.
 *  - Ordering: none across processes.  Work one process enqueued is seen by
 *    the other once the first process synchronised the stream that did it
 *    (the runtime synchronises before it exports, and users order the rest,
 *    as with CUDA's IPC events).
 *
 * STATUSES: FL_ERROR_INVALID_POINTER (args NULL; a ptr outside any live
 * allocation; a ptr an import returned), FL_ERROR_INVALID_VALUE (struct_size
 * too small, flags not 0, a handle this plugin did not make, or whose
 * exporter is gone), FL_ERROR_INVALID_DEVICE (device out of range, or not the
 * handle's), FL_ERROR_OUT_OF_MEMORY (no room in this process's address space
 * of the device), FL_ERROR_DRIVER (the host refused the mapping).
 * last_error_message explains each.
 */
#ifndef TORCH_FL_IPC_H
#define TORCH_FL_IPC_H

#include "fl_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* FL_CDEF_BEGIN */
/* An exported allocation: opaque bytes, as CUDA's cudaIpcMemHandle_t. */
typedef struct fl_ipc_mem_handle {
    uint8_t bytes[64];
} fl_ipc_mem_handle;

typedef struct fl_ipc_get_handle_args {
    size_t struct_size;
    const struct fl_extension_base *extension_start;
    int32_t device;
    uint32_t flags;                  /* reserved, 0 */
    fl_devptr ptr;                   /* inside a live fl_malloc allocation of `device` */
    fl_ipc_mem_handle handle;        /* out */
    uint64_t offset;                 /* out: ptr - the allocation's start */
    uint64_t size;                   /* out: the allocation's bytes */
} fl_ipc_get_handle_args;
FL_DEFINE_STRUCT_TRAITS(fl_ipc_get_handle_args, size);

typedef struct fl_ipc_open_handle_args {
    size_t struct_size;
    const struct fl_extension_base *extension_start;
    int32_t device;
    uint32_t flags;                  /* reserved, 0 */
    fl_ipc_mem_handle handle;        /* what ipc_get_handle gave, in any process */
    fl_devptr ptr;                   /* out: the allocation's start in this process */
    uint64_t size;                   /* out: its bytes */
} fl_ipc_open_handle_args;
FL_DEFINE_STRUCT_TRAITS(fl_ipc_open_handle_args, size);

typedef struct fl_ipc_close_handle_args {
    size_t struct_size;
    const struct fl_extension_base *extension_start;
    int32_t device;
    uint32_t flags;                  /* reserved, 0 */
    fl_devptr ptr;                   /* exactly what ipc_open_handle returned */
} fl_ipc_close_handle_args;
FL_DEFINE_STRUCT_TRAITS(fl_ipc_close_handle_args, ptr);

typedef fl_status (*fl_ipc_get_handle_fn)(fl_ipc_get_handle_args *args);
typedef fl_status (*fl_ipc_open_handle_fn)(fl_ipc_open_handle_args *args);
typedef fl_status (*fl_ipc_close_handle_fn)(fl_ipc_close_handle_args *args);

typedef struct fl_ipc_extension {
    fl_extension_base base;          /* type FL_EXTENSION_IPC */
    /* All three required when the extension is present: */
    fl_ipc_get_handle_fn ipc_get_handle;
    fl_ipc_open_handle_fn ipc_open_handle;
    fl_ipc_close_handle_fn ipc_close_handle;
} fl_ipc_extension;
FL_DEFINE_STRUCT_TRAITS(fl_ipc_extension, ipc_close_handle);
/* FL_CDEF_END */

#ifdef __cplusplus
}
#endif

#endif /* TORCH_FL_IPC_H */
