/*
 * fl_abi.h -- the Torch-FL vendor plugin ABI.
 *
 * This header is the one normative text of the contract between the Torch-FL
 * runtime and a vendor plugin; docs/vendors/abi.md explains it and links here.
 * The rules come first (this comment: COMPATIBILITY PROMISE, STRUCT SIZES,
 * OUTPUT STRUCTS, CALLS, EXTENSIONS, POINTER LIFETIMES, LIFECYCLE, THREADING,
 * ERRORS, ADDRESSES), then the declarations, each size-prefixed struct
 * followed by its FL_DEFINE_STRUCT_TRAITS line, then fl_api and the entry
 * point.  Optional feature sets have headers of their own beside this one
 * (fl_collectives.h, fl_host_memory.h, fl_ipc.h), written the same way.
 *
 * The runtime's cffi declarations are read from the region between
 * FL_CDEF_BEGIN and FL_CDEF_END of each header, so that region holds only
 * plain C declarations, integer #defines and FL_DEFINE_STRUCT_TRAITS lines
 * (the reader drops those; fl_runtime/abi/header.py).
 *
 * COMPATIBILITY PROMISE (ABI major 1)
 *  - A plugin exports one symbol, fl_plugin_get_api (FL_PLUGIN_ENTRY_SYMBOL).
 *    The runtime calls it with the highest ABI version it speaks; the plugin
 *    answers with its function table, or FL_ERROR_INCOMPATIBLE_ABI.
 *  - Within a major version, structs and the function table only ever grow at
 *    the end.  Every struct starts with `size_t struct_size` (an extension
 *    struct with its fl_extension_base, whose struct_size is the whole
 *    struct's), set by whoever fills the struct to the size it knows.  A reader
 *    uses a field only when struct_size covers it (FL_STRUCT_HAS_FIELD); a
 *    newer caller may pass a larger struct and an older callee reads only the
 *    fields it knows.
 *  - The runtime accepts any plugin whose major equals FL_ABI_VERSION_MAJOR and
 *    whose minor is at least FL_ABI_MIN_SUPPORTED_MINOR.  A plugin built against
 *    an older minor keeps loading; functions it does not have (table too short)
 *    are reported as not supported.  A different major is refused by name.
 *  - A plugin may refuse a runtime minor it cannot serve (one that predates a
 *    call the plugin needs, e.g. plugin_initialize, 1.2) with
 *    FL_ERROR_INCOMPATIBLE_ABI; it serves every minor from the lowest it
 *    accepts up, newer ones included.  Refusing a minor of its own major, it
 *    may leave *out pointing at its table: the runtime then reads only
 *    abi_version and last_error_message from it, to say why.
 *  - CHANGELOG.md beside this header says, per minor, what was added and what
 *    a plugin of an older minor keeps doing.  Optional feature sets live in
 *    headers of their own (fl_collectives.h, fl_host_memory.h, fl_ipc.h), each
 *    with its FL_CDEF region; this header includes fl_collectives.h (1.1 code
 *    that found the collectives here keeps compiling); include the others
 *    where you use them.
 *  - Enums are 32-bit (pinned by FL_..._FORCE_32BIT), integers fixed-width.
 *  - Device addresses (fl_devptr) are opaque to the runtime: it never
 *    dereferences them and only passes (address, byte offset) pairs back.
 *
 * STRUCT SIZES: FL_DEFINE_STRUCT_TRAITS(type, last_field), right after each
 * size-prefixed struct, defines type_STRUCT_SIZE, the size of `type` up to and
 * including its last field: what a caller puts in struct_size.  When a later
 * minor appends a field, the traits line names the new last field, and a
 * callee still accepts the shorter size of the minor that introduced the call,
 * reading the new field only when FL_STRUCT_HAS_FIELD says it is there.
 *
 * OUTPUT STRUCTS: for a struct the caller allocates and the plugin fills
 * (device_properties), the caller sets struct_size to what it allocated; the
 * plugin fills only whole fields that size covers and writes back the size it
 * filled.
 *
 * CALLS.  Every function added from ABI 1.1 on takes one arguments struct,
 * whose first field is struct_size: the caller sets it to the size of the
 * struct it knows, so a later minor can append parameters and an older plugin
 * reads only what it knows (FL_STRUCT_HAS_FIELD).  Output fields live in the
 * same struct.  An args pointer is only valid during the call; the plugin
 * copies what it keeps.  Every arguments struct carries `extension_start`: a
 * chain of fl_extension_base-headed structs the caller may attach for optional
 * parameters of that call (NULL when none; a callee skips types it does not
 * know), as PJRT's calls do: the second field of every arguments struct from
 * ABI 1.2 on.  The 1.1 collectives structs (fl_collectives.h) predate this
 * and keep their layout: ABI 1.4 appends their extension_start as their last
 * field, read only when struct_size covers it.  Every such call answers
 * FL_ERROR_INVALID_POINTER for a NULL args pointer and FL_ERROR_INVALID_VALUE
 * for a struct_size smaller than the struct had in the minor that introduced
 * the call.
 *
 * EXTENSIONS (ABI 1.1).  Optional feature sets hang off fl_api.extension_start
 * as a singly linked chain, each starting with an fl_extension_base (the
 * pattern of OpenXLA's PJRT C API): a reader walks `next` until NULL, uses the
 * entry whose `type` it knows, and skips the rest.  A plugin that offers none
 * leaves extension_start NULL.  Each extension struct only grows at its end
 * (its base.struct_size says how far the plugin filled it) and a NULL function
 * pointer in it means "not offered".  Every entry lives as long as the plugin.
 *
 * POINTER LIFETIMES (what the plugin hands the runtime):
 *  - the fl_api table, its fl_plugin_info and every string that record points
 *    at, the kernel table (every fl_kernel_entry, its op string and impl) and
 *    every extension struct of the chain: from the fl_plugin_get_api call that
 *    returned them until the process ends.  The runtime never unloads a plugin
 *    and reads them without copying; plugin_teardown does not end them.
 *  - last_error_message()'s string: until the calling thread's next failing
 *    call into the plugin.
 *  - streams, events and communicators: until their destroy call; device
 *    addresses: until fl_free; both are never valid across a plugin_teardown.
 * What the runtime hands the plugin (arguments structs, launch arguments, host
 * buffers of copies) is valid only during the call unless a call says
 * otherwise (launch_kernel's LIFETIMES, the copies' host buffers).
 *
 * LIFECYCLE (ABI 1.2): a runtime that speaks 1.2 calls plugin_initialize once,
 * right after fl_plugin_get_api succeeded and before any other function of the
 * table but last_error_message; a failure there refuses the plugin with its
 * message, and nothing else is called.  The driver is set up there, where a
 * failure can be reported, not in a library constructor.  Calls pair up: each
 * successful plugin_initialize is matched by at most one plugin_teardown; a
 * plugin counts them, sets up on the first and releases on the last, because
 * one process may hold the plugin for several clients (the runtime, a tool).
 * After the last teardown the runtime makes no call until a new
 * plugin_initialize.  The runtime does not tear a plugin down at process exit
 * while tensors may still be alive (the process takes the plugin's memory
 * and threads with it); it tears down a plugin it stops using (one refused
 * after initialisation) and tools that load a plugin briefly do.  A runtime
 * older than 1.2 calls neither: a plugin that needs them refuses such a
 * runtime in fl_plugin_get_api (see COMPATIBILITY PROMISE); one that sets up
 * lazily serves it.
 *
 * THREADING: every function may be called from any host thread.  Work
 * enqueued on one stream runs in FIFO order; work on different streams is
 * unordered unless ordered by events.
 *
 * ERRORS: every function returns an fl_status.  After a non-success status,
 * fl_api.last_error_message() returns a human-readable message for the last
 * failed call made on the calling thread (valid until that thread's next
 * failing call; successful calls leave it alone).  Errors raised by
 * asynchronous work are sticky on their stream and are returned, once, by the
 * next stream_synchronize/stream_query on it.
 *
 * ADDRESSES: a copy or tensor may point anywhere inside a live allocation
 * (base + offset); fl_free takes exactly what fl_malloc returned.  Host<->device
 * copies and memset act on the device of the stream they are enqueued on.
 * Events may be recorded only on streams of their own device; any stream may
 * wait on any event; waiting on a never-recorded event does not wait.  An
 * event record is work of its stream: stream_query is FL_SUCCESS only once
 * every record enqueued on it is complete, and once the last thing enqueued
 * on a stream is a record that event_query reports complete, stream_query on
 * that stream is FL_SUCCESS too (PyTorch's Stream.query relies on both).
 */
#ifndef TORCH_FL_ABI_H
#define TORCH_FL_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FL_STRUCT_SIZE(type, last_field) \
    (offsetof(type, last_field) + sizeof(((type *)0)->last_field))
#define FL_STRUCT_HAS_FIELD(ptr, type, field) \
    ((ptr)->struct_size >= FL_STRUCT_SIZE(type, field))
/* type_STRUCT_SIZE for a size-prefixed struct (see "STRUCT SIZES"). */
#define FL_DEFINE_STRUCT_TRAITS(type, last_field) \
    enum { type##_STRUCT_SIZE = FL_STRUCT_SIZE(type, last_field) }

/* FL_CDEF_BEGIN */
#define FL_ABI_VERSION_MAJOR 1
#define FL_ABI_VERSION_MINOR 4
#define FL_ABI_MIN_SUPPORTED_MINOR 0
#define FL_NAME_MAX 64
#define FL_UUID_MAX 40

typedef enum fl_status {
    FL_SUCCESS = 0,
    FL_NOT_READY = 1,              /* query: work still pending (not an error) */
    FL_ERROR_INVALID_VALUE = 2,    /* bad argument value (e.g. alignment not a power of two) */
    FL_ERROR_INVALID_DEVICE = 3,   /* device index out of range */
    FL_ERROR_INVALID_POINTER = 4,  /* NULL out pointer, unknown or foreign device address, double free */
    FL_ERROR_INVALID_SIZE = 5,     /* size 0 or larger than the device can ever hold */
    FL_ERROR_OUT_OF_MEMORY = 6,    /* valid request, not enough free device memory now */
    FL_ERROR_INVALID_HANDLE = 7,   /* unknown or destroyed stream / event / kernel */
    FL_ERROR_NOT_SUPPORTED = 8,    /* the plugin does not implement this */
    FL_ERROR_INCOMPATIBLE_ABI = 9, /* version negotiation failed */
    FL_ERROR_KERNEL_FAILED = 10,   /* a kernel rejected its arguments or failed while running */
    FL_ERROR_DRIVER = 11,          /* the underlying driver / hardware failed */
    FL_ERROR_INTERNAL = 12,
    /* ABI 1.1 (collectives); a 1.0 runtime shows them as "status 13" / "status 14" */
    FL_ERROR_TIMEOUT = 13,             /* a collective's peers did not arrive within the communicator's timeout */
    FL_ERROR_COLLECTIVE_MISMATCH = 14, /* ranks called different collectives, counts, dtypes, ops or roots */
    FL_STATUS_FORCE_32BIT = 0x7fffffff
} fl_status;

/* Element types.  The kernel table's dtype masks use (1ull << fl_dtype).
 * The float8 types (ABI 1.2) are PyTorch's: 1 sign bit, then exponent and
 * mantissa bits (e4m3 / e5m2), bias 7 / 15 (fn, plain) or 8 / 16 (fnuz).
 * FN has no infinity and one NaN pattern per sign (S.1111.111); plain e5m2 is
 * IEEE-like (infinities, NaNs); FNUZ has no infinity, no negative zero and one
 * NaN, 0x80.  Conversions to them round to nearest even and follow PyTorch's
 * CPU casts bit for bit (docs/vendors/fp8.md): float64 goes through float32
 * first; NaN stays NaN; a value past the largest finite one saturates to it for
 * e4m3fn, becomes infinity for e5m2 and NaN for the fnuz types.  A 1.1 plugin
 * never sees them: its masks have no such bits. */
typedef enum fl_dtype {
    FL_FLOAT32 = 0,
    FL_FLOAT64 = 1,
    FL_FLOAT16 = 2,
    FL_BFLOAT16 = 3,
    FL_INT8 = 4,
    FL_UINT8 = 5,
    FL_INT16 = 6,
    FL_INT32 = 7,
    FL_INT64 = 8,
    FL_BOOL = 9,
    FL_COMPLEX64 = 10,
    /* ABI 1.2 */
    FL_FLOAT8_E4M3FN = 11,
    FL_FLOAT8_E5M2 = 12,
    FL_FLOAT8_E4M3FNUZ = 13,
    FL_FLOAT8_E5M2FNUZ = 14,
    FL_DTYPE_COUNT = 15,        /* 11 in ABI 1.0 and 1.1 */
    FL_DTYPE_FORCE_32BIT = 0x7fffffff
} fl_dtype;

typedef uint64_t fl_devptr;                 /* opaque device address; 0 is never valid */
typedef struct fl_stream_impl *fl_stream;   /* opaque */
typedef struct fl_event_impl *fl_event;     /* opaque */

typedef struct fl_abi_version {
    size_t struct_size;
    uint32_t major;
    uint32_t minor;
} fl_abi_version;
FL_DEFINE_STRUCT_TRAITS(fl_abi_version, minor);

/* ---- the extension chain ("EXTENSIONS" above; ABI 1.1) ---------------------- */
typedef enum fl_extension_type {
    FL_EXTENSION_COLLECTIVES = 1,      /* fl_collectives_extension (fl_collectives.h, ABI 1.1) */
    FL_EXTENSION_HOST_MEMORY = 2,      /* fl_host_memory_extension (fl_host_memory.h, ABI 1.2) */
    FL_EXTENSION_IPC = 3,              /* fl_ipc_extension (fl_ipc.h, ABI 1.3) */
    FL_EXTENSION_TYPE_FORCE_32BIT = 0x7fffffff
} fl_extension_type;

typedef struct fl_extension_base {
    size_t struct_size;                    /* of the whole extension struct, as the plugin filled it */
    int32_t type;                          /* fl_extension_type */
    uint32_t flags;                        /* reserved, 0 */
    const struct fl_extension_base *next;  /* the next extension, or NULL */
} fl_extension_base;
FL_DEFINE_STRUCT_TRAITS(fl_extension_base, next);

typedef struct fl_device_properties {
    size_t struct_size;
    char name[FL_NAME_MAX];           /* e.g. "Reference CPU chip" */
    char vendor[FL_NAME_MAX];         /* e.g. "Torch-FL" */
    char uuid[FL_UUID_MAX];           /* stable unique id of the physical device */
    char driver_version[FL_NAME_MAX];
    uint64_t total_memory;            /* bytes */
    uint64_t alignment;               /* every fl_malloc result is a multiple of this (power of two) */
    uint64_t supported_dtypes;        /* mask of (1ull << fl_dtype) the device can store */
    uint32_t multiprocessor_count;    /* compute units, informational */
    uint32_t flags;                   /* reserved, 0 */
} fl_device_properties;
FL_DEFINE_STRUCT_TRAITS(fl_device_properties, flags);

/* ---- kernel calling convention -------------------------------------------
 * A kernel receives the ATen op's schema arguments in schema order (keyword-
 * only arguments included, absent optionals as FL_ARG_NONE), followed by one
 * FL_ARG_TENSOR per tensor the op returns.  Output tensors are allocated by
 * the runtime with the shapes/strides PyTorch's meta functions give; for
 * in-place and out= overloads the output is the mutated argument itself.
 * All tensors of one call live on the device of the stream it is launched on.
 * Strides and storage_offset are in elements; data starts at
 * base + byte_offset and may be arbitrarily (mis)aligned for the dtype.
 * Scalars arrive as FL_ARG_INT / FL_ARG_FLOAT / FL_ARG_BOOL; a ScalarType
 * argument as FL_ARG_INT holding an fl_dtype.  A `Scalar[]` argument (the
 * foreach ScalarList overloads) arrives as FL_ARG_FLOAT_LIST, every entry as a
 * double (ints and bools converted; an int a double cannot hold exactly, or a
 * complex entry, never reaches a kernel: the runtime runs that call elsewhere).  A `Generator?` argument arrives
 * as FL_ARG_INT_LIST {seed, offset}: kernels draw from a counter-based
 * generator keyed by seed at counter offset + element index, so results are
 * reproducible and the runtime, not the plugin, owns the RNG state.
 *
 * ARGUMENTS THAT SHARE MEMORY (stated in ABI 1.2; the runtime always passed
 * such calls).  Tensors of one call may lie in one allocation.  The runtime
 * passes calls as the user wrote them, without copying: x.copy_(x.t()),
 * a[1:].copy_(a[:-1]), an in-place op whose other input is a view of its
 * output (a[1:].add_(a[:-1])), out= overlapping an input, index_put_ or
 * index_add_ with values taken from the tensor they write.  What every kernel
 * promises, per kind of op:
 *  - copy_, elementwise ops (unary, binary, ternary; functional, in-place and
 *    out=), reductions and indexing that write a tensor they also read from,
 *    and every other kernel: it computes as if it had read all of its inputs
 *    before writing any output.  An output may be the very same view as an
 *    input (in-place forms) or overlap it partially.  PyTorch's CPU refuses
 *    most partial overlaps; the answer a kernel gives is the one PyTorch gives
 *    for the same call with that input cloned first.  The SDK's elementwise
 *    engine and copy helpers do it (flk_unshare, fl_kernel.h); a kernel of its
 *    own reads an overlapping input from a private copy, or orders its reads.
 *  - Inputs may overlap each other freely (they are only read).
 *  - Outputs never overlap each other, and an output never has two elements at
 *    one address (a stride 0 over a size > 1): PyTorch refuses those calls.
 * Chosen over the runtime copying overlapping inputs first: only the kernel
 * knows whether its order of reads and writes is safe (an elementwise kernel
 * on the very same view needs no copy), and checking every launch's tensors
 * would cost the runtime's hot path on every in-place call.
 */
typedef struct fl_tensor {   /* an FL_ARG_TENSOR's value is never NULL */
    size_t struct_size;
    fl_devptr base;           /* start of the allocation (from fl_malloc) */
    uint64_t byte_offset;     /* where element [0,...,0] lives, from base */
    int32_t dtype;            /* fl_dtype */
    int32_t ndim;
    const int64_t *sizes;     /* ndim entries */
    const int64_t *strides;   /* ndim entries, in elements, >= 0 (0 = broadcast) */
} fl_tensor;
FL_DEFINE_STRUCT_TRAITS(fl_tensor, strides);

typedef enum fl_arg_kind {
    FL_ARG_NONE = 0,
    FL_ARG_TENSOR = 1,        /* value.tensor */
    FL_ARG_INT = 2,           /* value.i (also SymInt, dtype enums, layout ...) */
    FL_ARG_FLOAT = 3,         /* value.f */
    FL_ARG_BOOL = 4,          /* value.i: 0 or 1 */
    FL_ARG_INT_LIST = 5,      /* value.ints, count entries */
    FL_ARG_FLOAT_LIST = 6,    /* value.floats, count entries */
    FL_ARG_BOOL_LIST = 7,     /* value.ints, count entries of 0/1 */
    FL_ARG_TENSOR_LIST = 8,   /* value.tensors, count entries (an entry may be NULL for Tensor?[]) */
    FL_ARG_STRING = 9,        /* value.str, NUL-terminated */
    FL_ARG_KIND_FORCE_32BIT = 0x7fffffff
} fl_arg_kind;

typedef union fl_arg_value {
    const fl_tensor *tensor;
    int64_t i;
    double f;
    const int64_t *ints;
    const double *floats;
    const fl_tensor *const *tensors;
    const char *str;
} fl_arg_value;

typedef struct fl_arg {
    int32_t kind;             /* fl_arg_kind */
    uint32_t count;           /* list length for list kinds */
    fl_arg_value value;
} fl_arg;

typedef enum fl_kernel_variant {
    FL_VARIANT_PRECISE = 0,
    FL_VARIANT_FAST = 1,
    FL_VARIANT_FORCE_32BIT = 0x7fffffff
} fl_kernel_variant;

typedef struct fl_kernel_entry {
    size_t struct_size;
    const char *op;           /* ATen overload it implements: "mm", "add.Tensor", "add_.Tensor" */
    uint64_t dtypes;          /* mask of (1ull << fl_dtype): the runtime launches only calls whose
                                 first tensor argument (schema order) has one of these dtypes */
    int32_t variant;          /* fl_kernel_variant */
    uint32_t flags;           /* reserved, 0 */
    const void *impl;         /* vendor-private; passed back to launch_kernel */
} fl_kernel_entry;
FL_DEFINE_STRUCT_TRAITS(fl_kernel_entry, impl);

typedef struct fl_plugin_info {
    size_t struct_size;
    const char *plugin_name;   /* e.g. "reference" */
    const char *vendor;        /* e.g. "Torch-FL" */
    const char *device_type;   /* the config's devices[].type, e.g. "reference" */
    const char *plugin_version;
} fl_plugin_info;
FL_DEFINE_STRUCT_TRAITS(fl_plugin_info, plugin_version);

/* ---- ABI 1.2: the arguments structs of the table's 1.2 calls ----------------
 * ("CALLS" above says the rule, "LIFECYCLE" when the runtime calls them) */
typedef struct fl_plugin_initialize_args {
    size_t struct_size;
    const struct fl_extension_base *extension_start;
    uint32_t runtime_major;          /* the ABI the runtime speaks (it negotiated this major) */
    uint32_t runtime_minor;
} fl_plugin_initialize_args;
FL_DEFINE_STRUCT_TRAITS(fl_plugin_initialize_args, runtime_minor);
/* plugin_initialize: FL_SUCCESS once the driver is usable (again: a repeated
 * call only counts); any error refuses the plugin with last_error_message
 * (e.g. FL_ERROR_DRIVER: the chip's driver is missing or too old). */

typedef struct fl_plugin_teardown_args {
    size_t struct_size;
    const struct fl_extension_base *extension_start;
} fl_plugin_teardown_args;
FL_DEFINE_STRUCT_TRAITS(fl_plugin_teardown_args, extension_start);
/* plugin_teardown: releases what the matching plugin_initialize set up, on the
 * last of the pairs (see "LIFECYCLE"); FL_ERROR_INVALID_VALUE when no
 * initialisation is left to tear down. */

typedef struct fl_stream_create_args {
    size_t struct_size;
    const struct fl_extension_base *extension_start;
    int32_t device;
    int32_t priority;                /* 0: the default; lower runs first when work competes
                                      * (CUDA's convention).  A hint: a plugin without
                                      * priorities treats every value as 0 */
    fl_stream stream;                /* out; destroyed with stream_destroy */
} fl_stream_create_args;
FL_DEFINE_STRUCT_TRAITS(fl_stream_create_args, stream);
/* stream_create_ex: as stream_create, same statuses. */

typedef struct fl_launch_kernel_args {
    size_t struct_size;
    const struct fl_extension_base *extension_start;
    fl_stream stream;
    const fl_kernel_entry *kernel;
    const fl_arg *args;              /* as launch_kernel's, with its LIFETIMES */
    uint32_t nargs;
    uint32_t flags;                  /* reserved, 0 */
} fl_launch_kernel_args;
FL_DEFINE_STRUCT_TRAITS(fl_launch_kernel_args, flags);
/* launch_kernel_ex: as launch_kernel, same statuses and declines. */

/* ---- the function table and the entry point ------------------------------ */
typedef struct fl_api {
    size_t struct_size;
    fl_abi_version abi_version;       /* the version this table speaks */
    const fl_plugin_info *info;

    const char *(*last_error_message)(void);

    /* driver and devices */
    fl_status (*device_count)(int32_t *count);
    fl_status (*device_properties)(int32_t device, fl_device_properties *props);

    /* memory: size > 0, alignment a power of two (0 means the device's) */
    fl_status (*fl_malloc)(int32_t device, uint64_t size, uint64_t alignment, fl_devptr *out);
    fl_status (*fl_free)(int32_t device, fl_devptr ptr);
    fl_status (*memory_info)(int32_t device, uint64_t *free_bytes, uint64_t *total_bytes);

    /* copies and memset, enqueued on a stream; host buffers must stay valid
     * and unchanged until the stream reaches the copy */
    fl_status (*memcpy_h2d_async)(fl_stream stream, fl_devptr dst, uint64_t dst_offset,
                                  const void *src, uint64_t size);
    fl_status (*memcpy_d2h_async)(fl_stream stream, void *dst, fl_devptr src,
                                  uint64_t src_offset, uint64_t size);
    fl_status (*memcpy_d2d_async)(fl_stream stream, int32_t dst_device, fl_devptr dst,
                                  uint64_t dst_offset, int32_t src_device, fl_devptr src,
                                  uint64_t src_offset, uint64_t size);
    fl_status (*memset_async)(fl_stream stream, fl_devptr dst, uint64_t dst_offset,
                              uint8_t value, uint64_t size);

    /* streams */
    fl_status (*stream_create)(int32_t device, fl_stream *out);
    fl_status (*stream_destroy)(fl_stream stream);
    fl_status (*stream_synchronize)(fl_stream stream);
    fl_status (*stream_query)(fl_stream stream);              /* FL_SUCCESS or FL_NOT_READY */
    fl_status (*stream_wait_event)(fl_stream stream, fl_event event);

    /* events */
    fl_status (*event_create)(int32_t device, fl_event *out);
    fl_status (*event_destroy)(fl_event event);
    fl_status (*event_record)(fl_event event, fl_stream stream);
    fl_status (*event_synchronize)(fl_event event);
    fl_status (*event_query)(fl_event event);                 /* FL_SUCCESS or FL_NOT_READY */
    fl_status (*event_elapsed_ms)(fl_event start, fl_event end, float *ms);

    /* kernels: the table is static for the plugin's lifetime */
    fl_status (*kernel_table)(const fl_kernel_entry **entries, uint32_t *count);
    /* LIFETIMES (what the runtime relies on): `kernel` is an entry of kernel_table
     * and lives as long as the plugin.  `args`, every fl_tensor and every
     * sizes/strides/list/string array they point at are valid only until
     * launch_kernel returns: the runtime reuses that memory for its next launch,
     * so a plugin copies whatever its queued work still needs before returning.
     * The device memory the tensors name stays allocated, and is not written by
     * the runtime, until the stream has run the kernel (the runtime's allocator
     * tracks the stream; docs/users/devices.md).
     * launch_kernel may refuse a call it cannot take (e.g. a 3-d convolution
     * behind a 2-d "convolution" kernel) by returning FL_ERROR_NOT_SUPPORTED
     * before it enqueues anything; the runtime then runs that call through its
     * fallback path instead of failing.  Any other error is the op's failure. */
    fl_status (*launch_kernel)(fl_stream stream, const fl_kernel_entry *kernel,
                               const fl_arg *args, uint32_t nargs);
    /* ABI 1.0 ends here; later minors append below. */

    /* ABI 1.1: the head of the extension chain (see "EXTENSIONS" above), or NULL
     * when the plugin offers no optional feature set.  Static for the plugin's
     * lifetime.  A 1.0 table ends before this field (its struct_size says so). */
    const struct fl_extension_base *extension_start;

    /* ABI 1.2: the lifecycle (see "LIFECYCLE" above) and the arguments-struct
     * forms of stream_create and launch_kernel, which later minors grow by
     * appending parameters (see "CALLS" above).  A 1.1 table ends before
     * plugin_initialize. */
    fl_status (*plugin_initialize)(fl_plugin_initialize_args *args);
    fl_status (*plugin_teardown)(fl_plugin_teardown_args *args);
    fl_status (*stream_create_ex)(fl_stream_create_args *args);
    fl_status (*launch_kernel_ex)(fl_launch_kernel_args *args);
} fl_api;
FL_DEFINE_STRUCT_TRAITS(fl_api, launch_kernel_ex);

typedef fl_status (*fl_plugin_get_api_fn)(const fl_abi_version *requested, const fl_api **out);
fl_status fl_plugin_get_api(const fl_abi_version *requested, const fl_api **out);
/* FL_CDEF_END */

#define FL_PLUGIN_ENTRY_SYMBOL "fl_plugin_get_api"

#ifdef __cplusplus
}
#endif

/* The collectives extension was declared here in ABI 1.1; code written then
 * finds it through this header still. */
#include "fl_collectives.h"

#endif /* TORCH_FL_ABI_H */
