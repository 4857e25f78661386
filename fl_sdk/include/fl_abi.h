/*
 * fl_abi.h -- the Torch-FL vendor plugin ABI.
 *
 * This header is the single source of truth for the contract between the
 * Torch-FL runtime and a vendor plugin.  The runtime's cffi declarations are
 * read from the region between FL_CDEF_BEGIN and FL_CDEF_END below, so that
 * region holds only plain C declarations (no macros beyond integer #defines).
 *
 * COMPATIBILITY PROMISE (ABI major 1)
 *  - A plugin exports one symbol, fl_plugin_get_api (FL_PLUGIN_ENTRY_SYMBOL).
 *    The runtime calls it with the highest ABI version it speaks; the plugin
 *    answers with its function table, or FL_ERROR_INCOMPATIBLE_ABI.
 *  - Within a major version, structs and the function table only ever grow at
 *    the end.  Every struct starts with `size_t struct_size`, set by whoever
 *    fills the struct to the size it knows.  A reader uses a field only when
 *    struct_size covers it (FL_STRUCT_HAS_FIELD); a newer caller may pass a
 *    larger struct and an older callee reads only the fields it knows.
 *  - The runtime accepts any plugin whose major equals FL_ABI_VERSION_MAJOR and
 *    whose minor is at least FL_ABI_MIN_SUPPORTED_MINOR.  A plugin built against
 *    an older minor keeps loading; functions it does not have (table too short)
 *    are reported as not supported.  A different major is refused by name.
 *  - Enums are 32-bit (pinned by FL_..._FORCE_32BIT), integers fixed-width.
 *  - Device addresses (fl_devptr) are opaque to the runtime: it never
 *    dereferences them and only passes (address, byte offset) pairs back.
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
 * OUTPUT STRUCTS: for a struct the caller allocates and the plugin fills
 * (device_properties), the caller sets struct_size to what it allocated; the
 * plugin fills only whole fields that size covers and writes back the size it
 * filled.
 *
 * ADDRESSES: a copy or tensor may point anywhere inside a live allocation
 * (base + offset); fl_free takes exactly what fl_malloc returned.  Host<->device
 * copies and memset act on the device of the stream they are enqueued on.
 * Events may be recorded only on streams of their own device; any stream may
 * wait on any event; waiting on a never-recorded event does not wait.
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

/* FL_CDEF_BEGIN */
#define FL_ABI_VERSION_MAJOR 1
#define FL_ABI_VERSION_MINOR 1
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

/* Element types.  The kernel table's dtype masks use (1ull << fl_dtype). */
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
    FL_DTYPE_COUNT = 11,
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
    uint64_t dtypes;          /* mask of (1ull << fl_dtype) accepted for its floating/main tensors */
    int32_t variant;          /* fl_kernel_variant */
    uint32_t flags;           /* reserved, 0 */
    const void *impl;         /* vendor-private; passed back to launch_kernel */
} fl_kernel_entry;

typedef struct fl_plugin_info {
    size_t struct_size;
    const char *plugin_name;   /* e.g. "reference" */
    const char *vendor;        /* e.g. "Torch-FL" */
    const char *device_type;   /* the config's devices[].type, e.g. "reference" */
    const char *plugin_version;
} fl_plugin_info;

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
     * tracks the stream; README "Device API").
     * launch_kernel may refuse a call it cannot take (e.g. a 3-d convolution
     * behind a 2-d "convolution" kernel) by returning FL_ERROR_NOT_SUPPORTED
     * before it enqueues anything; the runtime then runs that call through its
     * fallback path instead of failing.  Any other error is the op's failure. */
    fl_status (*launch_kernel)(fl_stream stream, const fl_kernel_entry *kernel,
                               const fl_arg *args, uint32_t nargs);
    /* ABI 1.0 ends here; later minors append below. */

    /* ABI 1.1: the head of the extension chain (see "EXTENSIONS" below), or NULL
     * when the plugin offers no optional feature set.  Static for the plugin's
     * lifetime.  A 1.0 table ends before this field (its struct_size says so). */
    const struct fl_extension_base *extension_start;
} fl_api;

/* ==== ABI 1.1 ================================================================
 *
 * EXTENSIONS.  Optional feature sets hang off fl_api.extension_start as a
 * singly linked chain, each starting with an fl_extension_base (the pattern of
 * OpenXLA's PJRT C API): a reader walks `next` until NULL, uses the entry whose
 * `type` it knows, and skips the rest.  A plugin that offers none leaves
 * extension_start NULL.  Each extension struct only grows at its end (its
 * base.struct_size says how far the plugin filled it) and a NULL function
 * pointer in it means "not offered".  Every entry lives as long as the plugin.
 *
 * CALLS.  Every new function takes one arguments struct, whose first field is
 * struct_size: the caller sets it to sizeof the struct it knows, so a later
 * minor can append parameters and an older plugin reads only what it knows
 * (FL_STRUCT_HAS_FIELD).  Output fields live in the same struct.  An args
 * pointer is only valid during the call; the plugin copies what it keeps.
 */
typedef enum fl_extension_type {
    FL_EXTENSION_COLLECTIVES = 1,      /* fl_collectives_extension */
    FL_EXTENSION_TYPE_FORCE_32BIT = 0x7fffffff
} fl_extension_type;

typedef struct fl_extension_base {
    size_t struct_size;                    /* of the whole extension struct, as the plugin filled it */
    int32_t type;                          /* fl_extension_type */
    uint32_t flags;                        /* reserved, 0 */
    const struct fl_extension_base *next;  /* the next extension, or NULL */
} fl_extension_base;

/* ---- collectives (FL_EXTENSION_COLLECTIVES) ----------------------------------
 *
 * RENDEZVOUS: a unique id, as NCCL/HCCL/CNCL bootstrap.  Rank 0 asks its plugin
 * for an fl_comm_unique_id, the runtime carries those bytes to every rank
 * through torch.distributed's c10d store, and every rank calls comm_create
 * with them.  Chosen over key-value callbacks (PJRT's choice) because
 * (1) the runtime is Python over cffi: a callback the plugin invokes from its
 * own threads would take the GIL and re-enter the c10d store from inside a
 * plugin call, which deadlocks as soon as the plugin holds a lock of its own;
 * (2) every vendor collective library already bootstraps this way, so a plugin
 * maps these calls 1:1 onto its library; (3) what crosses the store is a fixed
 * FL_COMM_UNIQUE_ID_BYTES blob, opaque to the runtime.
 *
 * A communicator binds one device of this process to one rank of a group of
 * `size` ranks (one device per rank, one process per rank or several).  All
 * ranks must enqueue the same collectives on a communicator in the same order
 * (as NCCL requires); send/recv pairs match in order per (sender, receiver).
 *
 * ORDERING: a collective is enqueued on `stream` (a stream of the
 * communicator's device) and runs when the stream reaches it, after the work
 * queued before it, like a kernel; the calling thread does not wait for
 * peers.  It completes (stream_synchronize / an event recorded after it) once
 * this rank's receive buffer holds the result.  Errors found at enqueue time
 * are returned by the call; errors found while running (FL_ERROR_TIMEOUT,
 * FL_ERROR_COLLECTIVE_MISMATCH, FL_ERROR_DRIVER) are sticky on the stream
 * (see ERRORS above).
 *
 * BUFFERS: a (base, offset) pair names count elements of dtype from
 * base + offset in a live allocation of the communicator's device; they must
 * stay allocated and untouched by other work until the collective completes
 * (the runtime orders them as it orders kernel arguments).  Send and receive
 * buffers may be the same (in place) for all_reduce and broadcast; for the
 * others they must not overlap.  count 0 is valid and does nothing.
 *
 * STATUSES, every collective call: FL_ERROR_INVALID_POINTER (args NULL, a
 * buffer outside a live allocation), FL_ERROR_INVALID_HANDLE (comm or stream
 * unknown or destroyed), FL_ERROR_INVALID_VALUE (struct_size too small, the
 * stream's device is not the communicator's, dtype not in the extension's
 * dtypes, op not in reduce_ops, root or peer out of range or (send/recv) the
 * caller itself, a buffer overrun), FL_ERROR_NOT_SUPPORTED (a legal request
 * this plugin cannot serve).  last_error_message explains each.
 */
#define FL_COMM_UNIQUE_ID_BYTES 128

typedef struct fl_comm_impl *fl_comm;      /* opaque */

typedef enum fl_reduce_op {
    FL_REDUCE_SUM = 0,
    FL_REDUCE_PROD = 1,
    FL_REDUCE_MIN = 2,
    FL_REDUCE_MAX = 3,
    FL_REDUCE_AVG = 4,     /* sum / size; floating dtypes only */
    FL_REDUCE_OP_FORCE_32BIT = 0x7fffffff
} fl_reduce_op;

typedef struct fl_comm_unique_id {
    char internal[FL_COMM_UNIQUE_ID_BYTES];   /* opaque bytes, copied verbatim between ranks */
} fl_comm_unique_id;

typedef struct fl_comm_get_unique_id_args {
    size_t struct_size;
    int32_t device;                  /* a device of this plugin (rank 0's) */
    fl_comm_unique_id *unique_id;    /* out; caller-owned, written before the call returns */
} fl_comm_get_unique_id_args;

typedef struct fl_comm_create_args {
    size_t struct_size;
    int32_t device;                  /* the device this rank's collectives run on */
    int32_t rank;                    /* 0 <= rank < size */
    int32_t size;                    /* 1 <= size <= the extension's max_ranks */
    uint32_t timeout_ms;             /* how long any collective waits for peers (0: the plugin's default) */
    const fl_comm_unique_id *unique_id; /* read during the call only */
    fl_comm comm;                    /* out; valid until comm_destroy */
} fl_comm_create_args;
/* comm_create may block until every rank has called it (or timeout_ms passes:
 * FL_ERROR_TIMEOUT); FL_ERROR_INVALID_DEVICE for a bad device,
 * FL_ERROR_INVALID_VALUE for a bad rank/size or a unique id this plugin did not
 * make, FL_ERROR_DRIVER when the transport cannot be set up. */

typedef struct fl_comm_destroy_args {
    size_t struct_size;
    fl_comm comm;                    /* invalid after the call; work already enqueued on it completes first */
} fl_comm_destroy_args;

typedef struct fl_all_reduce_args {
    size_t struct_size;
    fl_comm comm;
    fl_stream stream;
    fl_devptr send_base;             /* count elements; may equal recv (in place) */
    uint64_t send_offset;
    fl_devptr recv_base;             /* count elements: the reduction over ranks */
    uint64_t recv_offset;
    uint64_t count;
    int32_t dtype;                   /* fl_dtype */
    int32_t op;                      /* fl_reduce_op */
} fl_all_reduce_args;

typedef struct fl_broadcast_args {
    size_t struct_size;
    fl_comm comm;
    fl_stream stream;
    fl_devptr send_base;             /* count elements, read on root only */
    uint64_t send_offset;
    fl_devptr recv_base;             /* count elements, written on every rank (root included) */
    uint64_t recv_offset;
    uint64_t count;
    int32_t dtype;
    int32_t root;
} fl_broadcast_args;

typedef struct fl_all_gather_args {
    size_t struct_size;
    fl_comm comm;
    fl_stream stream;
    fl_devptr send_base;             /* send_count elements */
    uint64_t send_offset;
    fl_devptr recv_base;             /* size * send_count elements, rank r's at r * send_count */
    uint64_t recv_offset;
    uint64_t send_count;
    int32_t dtype;
    int32_t reserved;                /* 0 */
} fl_all_gather_args;

typedef struct fl_reduce_scatter_args {
    size_t struct_size;
    fl_comm comm;
    fl_stream stream;
    fl_devptr send_base;             /* size * recv_count elements */
    uint64_t send_offset;
    fl_devptr recv_base;             /* recv_count elements: block `rank` of the reduction */
    uint64_t recv_offset;
    uint64_t recv_count;
    int32_t dtype;
    int32_t op;                      /* fl_reduce_op */
} fl_reduce_scatter_args;

typedef struct fl_all_to_all_args {
    size_t struct_size;
    fl_comm comm;
    fl_stream stream;
    fl_devptr send_base;             /* size blocks of count elements, block j goes to rank j */
    uint64_t send_offset;
    fl_devptr recv_base;             /* size blocks of count elements, block j came from rank j */
    uint64_t recv_offset;
    uint64_t count;                  /* elements per block */
    int32_t dtype;
    int32_t reserved;                /* 0 */
} fl_all_to_all_args;

typedef struct fl_send_args {
    size_t struct_size;
    fl_comm comm;
    fl_stream stream;
    fl_devptr send_base;             /* count elements */
    uint64_t send_offset;
    uint64_t count;
    int32_t dtype;
    int32_t peer;                    /* the receiving rank */
} fl_send_args;

typedef struct fl_recv_args {
    size_t struct_size;
    fl_comm comm;
    fl_stream stream;
    fl_devptr recv_base;             /* count elements */
    uint64_t recv_offset;
    uint64_t count;
    int32_t dtype;
    int32_t peer;                    /* the sending rank */
} fl_recv_args;

typedef fl_status (*fl_comm_get_unique_id_fn)(fl_comm_get_unique_id_args *args);
typedef fl_status (*fl_comm_create_fn)(fl_comm_create_args *args);
typedef fl_status (*fl_comm_destroy_fn)(fl_comm_destroy_args *args);
typedef fl_status (*fl_all_reduce_fn)(fl_all_reduce_args *args);
typedef fl_status (*fl_broadcast_fn)(fl_broadcast_args *args);
typedef fl_status (*fl_all_gather_fn)(fl_all_gather_args *args);
typedef fl_status (*fl_reduce_scatter_fn)(fl_reduce_scatter_args *args);
typedef fl_status (*fl_all_to_all_fn)(fl_all_to_all_args *args);
typedef fl_status (*fl_send_fn)(fl_send_args *args);
typedef fl_status (*fl_recv_fn)(fl_recv_args *args);

typedef struct fl_collectives_extension {
    fl_extension_base base;          /* type FL_EXTENSION_COLLECTIVES */
    uint64_t dtypes;                 /* mask of (1ull << fl_dtype) every collective accepts */
    uint32_t reduce_ops;             /* mask of (1u << fl_reduce_op) all_reduce/reduce_scatter accept */
    int32_t max_ranks;               /* the largest communicator size */
    /* Required when the extension is present: */
    fl_comm_get_unique_id_fn comm_get_unique_id;
    fl_comm_create_fn comm_create;
    fl_comm_destroy_fn comm_destroy;
    /* Each optional (NULL: the runtime uses its host-staged path for that call): */
    fl_all_reduce_fn all_reduce;
    fl_broadcast_fn broadcast;
    fl_all_gather_fn all_gather;
    fl_reduce_scatter_fn reduce_scatter;
    fl_all_to_all_fn all_to_all;
    fl_send_fn send;
    fl_recv_fn recv;
} fl_collectives_extension;

typedef fl_status (*fl_plugin_get_api_fn)(const fl_abi_version *requested, const fl_api **out);
fl_status fl_plugin_get_api(const fl_abi_version *requested, const fl_api **out);
/* FL_CDEF_END */

#define FL_PLUGIN_ENTRY_SYMBOL "fl_plugin_get_api"

#ifdef __cplusplus
}
#endif

#endif /* TORCH_FL_ABI_H */
