/*
 * fl_driver.h -- the Torch-FL SDK driver library (prefix fld_): the half of a
 * plugin's driver that does not depend on the chip.
 *
 * Every plugin's driver follows the same ABI rules (fl_abi.h): a per-thread
 * last error, version negotiation, struct_size prefixes, handles checked before
 * they are dereferenced, and launch arguments validated against the plugin's
 * live allocations, with tensor extents computed without overflow.  They are
 * written here once.  `fl-sdk build` compiles this library (the C files of
 * fl_sdk/driver_lib/) into a plugin whose plugin.yaml lists
 * `sdk_libraries: [kernel, driver]` (it uses the kernel library, fl_kernel.h);
 * the reference vendor and every plugin `fl-sdk new` scaffolds use it, so a
 * driver holds only what its chip needs: devices, memory, queues.
 * docs/vendors/driver-lib.md walks through it.
 *
 *  1. errors: the per-thread message last_error_message() returns.
 *  2. version negotiation: the body of fl_plugin_get_api.
 *  3. size-prefixed structs: filling a caller's (possibly older, smaller)
 *     output struct with whole fields only.
 *  4. live ranges: a thread-safe set of [start, start + size) ranges, for
 *     allocations and for handle tables (streams, events).
 *  5. memory checks: "is [base + offset, + size) inside one live allocation".
 *  6. tensors and launch arguments: validation of every argument of a launch
 *     (overflow-checked tensor extents inside live allocations), and the deep
 *     copy a queued launch keeps after launch_kernel returns.
 *  7. kernels: the kernel table, the entry behind a pointer, a kernel's
 *     launch-time decline (flk_kernel.accepts), running it now.
 *  8. arguments structs and the lifecycle (ABI 1.2): the args-struct checks,
 *     counted plugin_initialize / plugin_teardown, and the _ex forms of
 *     stream_create and launch_kernel over a driver's own functions.
 *  9. the entry point: the fl_api table filled from a driver's calls (the
 *     lifecycle, the _ex forms, kernel_table and last_error_message added),
 *     and fl_plugin_get_api's body, so a plugin's plugin.c names only what
 *     is its own (its info, its extensions, the oldest runtime it serves).
 *
 * Nothing here is part of the ABI: the library is compiled into each plugin
 * and its symbols stay private to it, like the kernel library's.
 */
#ifndef FL_DRIVER_H
#define FL_DRIVER_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "fl_kernel.h"

#ifdef __cplusplus
extern "C" {
#endif

#pragma GCC visibility push(hidden)

/* ======================================================================== */
/* 1. errors (error.c)                                                       */
/* ======================================================================== */

#define FLD_MESSAGE_MAX 1024

/* Set the calling thread's last error message and return `status`.  The
 * message stays until the thread's next failure (successes leave it alone, as
 * fl_abi.h "ERRORS" allows, which keeps hot paths free of TLS writes). */
fl_status fld_fail(fl_status status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* fl_api.last_error_message. */
const char *fld_last_error_message(void);

/* ======================================================================== */
/* 2. version negotiation (negotiate.c)                                      */
/* ======================================================================== */

/* The body of fl_plugin_get_api: NULL arguments are FL_ERROR_INVALID_POINTER, a
 * requested->struct_size too small for major and minor FL_ERROR_INVALID_VALUE,
 * another major or a minor below `min_runtime_minor` FL_ERROR_INCOMPATIBLE_ABI
 * (each with a message naming `plugin`; for a refused minor *out is left at
 * `table`, whose message the runtime shows, fl_abi.h); otherwise *out = table.  A newer
 * runtime (a larger minor) gets `table` too: it reads only what
 * table->struct_size covers.  min_runtime_minor > 0 is for a plugin that
 * needs a call older runtimes never make (e.g. its driver is set up in
 * plugin_initialize, ABI 1.2). */
fl_status fld_negotiate(const fl_abi_version *requested, const fl_api **out, const fl_api *table,
                        uint32_t min_runtime_minor, const char *plugin);

/* ======================================================================== */
/* 3. size-prefixed structs (structs.c)                                      */
/* ======================================================================== */

/* The end of the last of `count` field ends (ascending) that fits in `size`
 * bytes; 0 when none does. */
size_t fld_covered_prefix(size_t size, const size_t *field_ends, size_t count);

/* device_properties's output rule (fl_abi.h "OUTPUT STRUCTS"): `props` NULL is
 * FL_ERROR_INVALID_POINTER, a struct_size too small for struct_size itself
 * FL_ERROR_INVALID_VALUE; otherwise the whole fields of `full` that
 * props->struct_size covers are copied and props->struct_size is set to their
 * end, so an older caller's smaller struct is never written past. */
fl_status fld_device_properties_out(fl_device_properties *props, const fl_device_properties *full,
                                    int32_t device);

/* ======================================================================== */
/* 4. live ranges and handle tables (ranges.c)                               */
/* ======================================================================== */

typedef struct fld_range {
    uintptr_t start;
    uint64_t size;
} fld_range;

/* A thread-safe set of non-overlapping [start, start + size) ranges, sorted,
 * with the sum of their sizes.  Lookups by any address inside a range are
 * O(log n).  Lookups share a reader lock: every launch checks its stream in
 * one handle table, so threads driving different devices must not queue
 * behind each other there. */
typedef struct fld_ranges {
    pthread_rwlock_t lock;
    fld_range *items;
    size_t count, capacity;
    uint64_t bytes;
} fld_ranges;

#define FLD_RANGES_INIT { PTHREAD_RWLOCK_INITIALIZER, NULL, 0, 0, 0 }

typedef enum fld_ranges_result {
    FLD_RANGES_OK = 0,
    FLD_RANGES_NO_HOST_MEMORY,
    FLD_RANGES_OVER_LIMIT,      /* bytes + size would exceed the limit */
    FLD_RANGES_NOT_FOUND
} fld_ranges_result;

fld_ranges_result fld_ranges_add(fld_ranges *set, uintptr_t start, uint64_t size, uint64_t limit);
/* Remove the range starting exactly at `start`; *size (if not NULL) gets its size. */
fld_ranges_result fld_ranges_remove(fld_ranges *set, uintptr_t start, uint64_t *size);
/* 1 when a range contains `address`; *found (if not NULL) gets it. */
int fld_ranges_find(fld_ranges *set, uintptr_t address, fld_range *found);
uint64_t fld_ranges_bytes(fld_ranges *set);

/* A set of live handles (streams, events, ...): a handle is checked by lookup
 * before it is dereferenced, so a stale, foreign or NULL one is refused with
 * FL_ERROR_INVALID_HANDLE instead of crashing the process.  `what` names the
 * kind ("stream") and `call` the ABI call, for messages. */
typedef struct fld_handles {
    fld_ranges set;
} fld_handles;

#define FLD_HANDLES_INIT { FLD_RANGES_INIT }

/* FL_ERROR_OUT_OF_MEMORY when the table cannot grow. */
fl_status fld_handle_add(fld_handles *table, const void *handle, const char *call);
fl_status fld_handle_remove(fld_handles *table, const void *handle, const char *what, const char *call);
fl_status fld_handle_check(fld_handles *table, const void *handle, const char *what, const char *call);

/* ======================================================================== */
/* 5. memory checks (memory.c)                                               */
/* ======================================================================== */

typedef struct fld_block {
    fl_devptr start;
    uint64_t size;
} fld_block;

/* How the library asks a driver about its allocations: 1 when `address` lies
 * inside a live allocation of `device` (*block gets it), else 0.  Called from
 * any thread; the driver locks what it needs. */
typedef int (*fld_find_fn)(void *ctx, int32_t device, fl_devptr address, fld_block *block);

typedef struct fld_memory {
    fld_find_fn find;
    void *ctx;
} fld_memory;

/* FL_SUCCESS when [base + offset, base + offset + size) lies inside the one
 * live allocation of `device` that holds `base`; FL_ERROR_INVALID_POINTER when
 * base is in none, FL_ERROR_INVALID_VALUE when the range overruns it (messages
 * name `call` and the operand `what`, e.g. "dst").  size 0 still needs a live
 * base. */
fl_status fld_check_range(const fld_memory *memory, int32_t device, fl_devptr base, uint64_t offset,
                          uint64_t size, const char *call, const char *what);

/* The same check against a block the driver has already looked up (NULL: no
 * live allocation of `device` holds base): for a driver whose fl_devptr is a
 * handle to its own object (a buffer table slot, as the OpenCL plugin's), which
 * reads the object and its block under one lock and then resolves
 * [base + offset, + size) to (object, base - block->start + offset). */
fl_status fld_check_in_block(const fld_block *block, int32_t device, fl_devptr base, uint64_t offset,
                             uint64_t size, const char *call, const char *what);

/* ======================================================================== */
/* 6. tensors and launch arguments (tensors.c, launch_args.c)                */
/* ======================================================================== */

/* Bytes from element [0,...,0] to one past the last element,
 * ((sum (size_d - 1) * stride_d) + 1) * itemsize, or 0 when the tensor is empty.
 * Returns 0 when that does not fit in 64 bits: huge sizes and strides must not
 * wrap to a small extent that passes a range check. */
int fld_tensor_extent(const fl_tensor *t, uint64_t *bytes);

/* Why `t` is malformed (struct_size, dtype, ndim, NULL sizes/strides, negative
 * sizes or strides), or NULL when it is well formed. */
const char *fld_tensor_problem(const fl_tensor *t);

/* What fld_check_args counted: the sizes fld_copy_args needs, and the tensor
 * bytes the launch may touch (extents, summed). */
typedef struct fld_arg_plan {
    size_t tensors;     /* fl_tensor structs */
    size_t ptrs;        /* entries of tensor-list pointer arrays */
    size_t words;       /* 8-byte values: sizes, strides, int and float lists */
    size_t chars;       /* string bytes, NULs included */
    uint64_t bytes;
} fld_arg_plan;

/* Validate every argument of a launch of `op` on `device` (fl_abi.h "kernel
 * calling convention"): known kinds, non-NULL values and lists, well-formed
 * tensors whose extent does not overflow and lies inside one live allocation
 * of the device (an empty tensor touches no memory and may have any base).
 * FL_ERROR_INVALID_VALUE (or FL_ERROR_INVALID_POINTER for a tensor outside
 * every allocation) with a message naming the argument; *plan is filled. */
fl_status fld_check_args(const fld_memory *memory, int32_t device, const char *op, const fl_arg *args,
                         uint32_t nargs, fld_arg_plan *plan);

/* The address a kernel gets for a tensor's base (e.g. the driver's private
 * view of device memory; return t->base to keep it). */
typedef fl_devptr (*fld_rebase_fn)(void *ctx, const fl_tensor *t);

/* A deep copy of checked arguments in one malloc'ed block (free() it), for
 * work queued past launch_kernel's return (fl_abi.h, "LIFETIMES": the runtime
 * reuses its argument memory).  Every tensor's base goes through `rebase`
 * (NULL: kept).  NULL when the host is out of memory. */
fl_arg *fld_copy_args(const fld_arg_plan *plan, const fl_arg *args, uint32_t nargs, fld_rebase_fn rebase,
                      void *ctx);

/* ======================================================================== */
/* 7. kernels (kernels.c)                                                    */
/* ======================================================================== */

/* fl_api.kernel_table over the kernel library's registrations (flk_table). */
fl_status fld_kernel_table(const fl_kernel_entry **entries, uint32_t *count);

/* The kernel behind an entry of the table, or FL_ERROR_INVALID_HANDLE for any
 * other pointer (a copy of an entry, another plugin's, NULL). */
fl_status fld_kernel_of(const fl_kernel_entry *entry, const flk_kernel **def);

/* The kernel's launch-time check (flk_kernel.accepts) on the caller's
 * arguments: FL_ERROR_NOT_SUPPORTED with its message when it declines (the
 * runtime then runs the call elsewhere), FL_SUCCESS otherwise. */
fl_status fld_accepts(const flk_kernel *def, int32_t device, const fl_arg *args, uint32_t nargs);

/* Run the kernel now, on the calling thread; its failure becomes the last
 * error with the kernel's message. */
fl_status fld_run_kernel(const flk_kernel *def, int32_t device, const fl_arg *args, uint32_t nargs);

/* ======================================================================== */
/* 8. arguments structs and the lifecycle (lifecycle.c)                      */
/* ======================================================================== */

/* fl_abi.h "CALLS": FL_ERROR_INVALID_POINTER for a NULL args pointer,
 * FL_ERROR_INVALID_VALUE when its struct_size (the first field of every args
 * struct) is below `needed`: the size of the struct in the minor that
 * introduced the call. */
fl_status fld_check_args_struct(const void *args, size_t needed, const char *call);
/* The check for a call introduced with the struct's present layout. */
#define FLD_CHECK_ARGS(args, type, call) fld_check_args_struct((args), type##_STRUCT_SIZE, (call))

/* What a driver does on the first plugin_initialize (open the chip's driver,
 * map memory: fail here with fld_fail and a message) and on the last
 * plugin_teardown; either may be NULL. */
typedef fl_status (*fld_setup_fn)(const fl_plugin_initialize_args *args);
typedef void (*fld_release_fn)(void);

/* plugin_initialize / plugin_teardown as fl_abi.h "LIFECYCLE" asks: the args
 * checked, the calls counted, `setup` run on the first initialise (a failure
 * leaves the count as it was) and `release` on the teardown that brings the
 * count back to 0; a teardown without an initialisation left is
 * FL_ERROR_INVALID_VALUE. */
fl_status fld_initialize(fl_plugin_initialize_args *args, fld_setup_fn setup);
fl_status fld_teardown(fl_plugin_teardown_args *args, fld_release_fn release);
/* How many initialisations are live (0: torn down, or never initialised). */
uint32_t fld_initialized(void);

/* stream_create_ex and launch_kernel_ex over the driver's stream_create and
 * launch_kernel: the args checked (flags must be 0), the priority hint
 * ignored. */
fl_status fld_stream_create_ex(fl_stream_create_args *args, fl_status (*create)(int32_t device, fl_stream *out));
fl_status fld_launch_kernel_ex(fl_launch_kernel_args *args,
                               fl_status (*launch)(fl_stream stream, const fl_kernel_entry *kernel,
                                                   const fl_arg *args, uint32_t nargs));

/* ======================================================================== */
/* 9. the entry point (entry.c)                                              */
/* ======================================================================== */

/* A plugin as its driver describes it.  `calls` holds the driver's fl_api
 * functions (FLD_DRIVER_CALLS fills them by name) and, optionally,
 * kernel_table (NULL: fld_kernel_table) and extension_start; the library sets
 * the rest of the table: struct_size, abi_version, info, last_error_message,
 * and plugin_initialize / plugin_teardown / stream_create_ex /
 * launch_kernel_ex over `open`, `close` and calls.stream_create /
 * calls.launch_kernel (section 8).  `open` runs on the first
 * plugin_initialize, `close` on the last plugin_teardown; either may be NULL.
 * min_runtime_minor: the oldest ABI 1.x runtime the plugin serves (section 2;
 * a driver opened only in plugin_initialize needs 2). */
typedef struct fld_plugin {
    fl_plugin_info info;
    uint32_t min_runtime_minor;
    fld_setup_fn open;
    fld_release_fn close;
    fl_api calls;
} fld_plugin;

/* The body of a plugin's one exported symbol:
 *
 *     __attribute__((visibility("default")))
 *     fl_status fl_plugin_get_api(const fl_abi_version *requested, const fl_api **out) {
 *         return fld_plugin_get_api(&plg_plugin, requested, out);
 *     }
 *
 * The table is filled from `plugin` on the first call (one plugin per shared
 * library: later calls must pass the same one) and lives as long as the
 * process; negotiation is fld_negotiate's, naming info.plugin_name. */
fl_status fld_plugin_get_api(const fld_plugin *plugin, const fl_abi_version *requested, const fl_api **out);

/* The driver's fl_api calls, for fld_plugin.calls, from functions named
 * PREFIX_device_count, PREFIX_malloc, ... (FLD_DECLARE_DRIVER_CALLS declares
 * them): .calls = {FLD_DRIVER_CALLS(plg), .extension_start = ...}. */
#define FLD_DRIVER_CALLS(p)                                                                              \
    .device_count = p##_device_count, .device_properties = p##_device_properties,                       \
    .fl_malloc = p##_malloc, .fl_free = p##_free, .memory_info = p##_memory_info,                        \
    .memcpy_h2d_async = p##_memcpy_h2d_async, .memcpy_d2h_async = p##_memcpy_d2h_async,                   \
    .memcpy_d2d_async = p##_memcpy_d2d_async, .memset_async = p##_memset_async,                           \
    .stream_create = p##_stream_create, .stream_destroy = p##_stream_destroy,                             \
    .stream_synchronize = p##_stream_synchronize, .stream_query = p##_stream_query,                       \
    .stream_wait_event = p##_stream_wait_event, .event_create = p##_event_create,                         \
    .event_destroy = p##_event_destroy, .event_record = p##_event_record,                                 \
    .event_synchronize = p##_event_synchronize, .event_query = p##_event_query,                           \
    .event_elapsed_ms = p##_event_elapsed_ms, .launch_kernel = p##_launch_kernel

/* The prototypes of the functions FLD_DRIVER_CALLS names (fl_abi.h "fl_api"
 * documents each call). */
#define FLD_DECLARE_DRIVER_CALLS(p)                                                                      \
    fl_status p##_device_count(int32_t *count);                                                          \
    fl_status p##_device_properties(int32_t device, fl_device_properties *props);                        \
    fl_status p##_malloc(int32_t device, uint64_t size, uint64_t alignment, fl_devptr *out);             \
    fl_status p##_free(int32_t device, fl_devptr ptr);                                                   \
    fl_status p##_memory_info(int32_t device, uint64_t *free_bytes, uint64_t *total_bytes);              \
    fl_status p##_memcpy_h2d_async(fl_stream stream, fl_devptr dst, uint64_t dst_offset, const void *src, \
                                   uint64_t size);                                                       \
    fl_status p##_memcpy_d2h_async(fl_stream stream, void *dst, fl_devptr src, uint64_t src_offset,      \
                                   uint64_t size);                                                       \
    fl_status p##_memcpy_d2d_async(fl_stream stream, int32_t dst_device, fl_devptr dst,                  \
                                   uint64_t dst_offset, int32_t src_device, fl_devptr src,               \
                                   uint64_t src_offset, uint64_t size);                                  \
    fl_status p##_memset_async(fl_stream stream, fl_devptr dst, uint64_t dst_offset, uint8_t value,      \
                               uint64_t size);                                                           \
    fl_status p##_stream_create(int32_t device, fl_stream *out);                                         \
    fl_status p##_stream_destroy(fl_stream stream);                                                      \
    fl_status p##_stream_synchronize(fl_stream stream);                                                  \
    fl_status p##_stream_query(fl_stream stream);                                                        \
    fl_status p##_stream_wait_event(fl_stream stream, fl_event event);                                   \
    fl_status p##_event_create(int32_t device, fl_event *out);                                           \
    fl_status p##_event_destroy(fl_event event);                                                         \
    fl_status p##_event_record(fl_event event, fl_stream stream);                                        \
    fl_status p##_event_synchronize(fl_event event);                                                     \
    fl_status p##_event_query(fl_event event);                                                           \
    fl_status p##_event_elapsed_ms(fl_event start, fl_event end, float *ms);                             \
    fl_status p##_launch_kernel(fl_stream stream, const fl_kernel_entry *kernel, const fl_arg *args,     \
                                uint32_t nargs)

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif

#endif /* FL_DRIVER_H */
