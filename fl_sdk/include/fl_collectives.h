/*
 * fl_collectives.h -- the collectives extension of the Torch-FL ABI
 * (FL_EXTENSION_COLLECTIVES, ABI 1.1): communicators and collectives a plugin
 * may offer through fl_api.extension_start (fl_abi.h, "EXTENSIONS").
 *
 * Its declarations between FL_CDEF_BEGIN and FL_CDEF_END are read by the
 * runtime's cffi like fl_abi.h's.  fl_abi.h includes this header.
 */
#ifndef TORCH_FL_COLLECTIVES_H
#define TORCH_FL_COLLECTIVES_H

#include "fl_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* FL_CDEF_BEGIN */
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
 * (fl_abi.h, "ERRORS").
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
 *
 * ARGUMENTS STRUCTS (fl_abi.h, "CALLS"): these ten predate the rule that puts
 * extension_start second, and keep their 1.1 layout.  ABI 1.4 appends
 * `extension_start` as the last field of each, a chain of optional parameters
 * for that call (none is defined yet: a callee skips every type it does not
 * know).  A callee accepts the 1.1 size, FL_STRUCT_SIZE(type, <the field
 * before extension_start>), and reads extension_start only when
 * FL_STRUCT_HAS_FIELD(args, type, extension_start); a caller of 1.4 or later
 * sets struct_size to type_STRUCT_SIZE (or sizeof) and extension_start to NULL
 * or its chain.  A 1.1 to 1.3 plugin, handed the larger struct, reads the
 * fields it knows, as for every struct.
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
    const struct fl_extension_base *extension_start;   /* ABI 1.4; see "ARGUMENTS STRUCTS" */
} fl_comm_get_unique_id_args;
FL_DEFINE_STRUCT_TRAITS(fl_comm_get_unique_id_args, extension_start);

typedef struct fl_comm_create_args {
    size_t struct_size;
    int32_t device;                  /* the device this rank's collectives run on */
    int32_t rank;                    /* 0 <= rank < size */
    int32_t size;                    /* 1 <= size <= the extension's max_ranks */
    uint32_t timeout_ms;             /* how long any collective waits for peers (0: the plugin's default) */
    const fl_comm_unique_id *unique_id; /* read during the call only */
    fl_comm comm;                    /* out; valid until comm_destroy */
    const struct fl_extension_base *extension_start;   /* ABI 1.4; see "ARGUMENTS STRUCTS" */
} fl_comm_create_args;
FL_DEFINE_STRUCT_TRAITS(fl_comm_create_args, extension_start);
/* comm_create may block until every rank has called it (or timeout_ms passes:
 * FL_ERROR_TIMEOUT); FL_ERROR_INVALID_DEVICE for a bad device,
 * FL_ERROR_INVALID_VALUE for a bad rank/size or a unique id this plugin did not
 * make, FL_ERROR_DRIVER when the transport cannot be set up. */

typedef struct fl_comm_destroy_args {
    size_t struct_size;
    fl_comm comm;                    /* invalid after the call; work already enqueued on it completes first */
    const struct fl_extension_base *extension_start;   /* ABI 1.4; see "ARGUMENTS STRUCTS" */
} fl_comm_destroy_args;
FL_DEFINE_STRUCT_TRAITS(fl_comm_destroy_args, extension_start);

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
    const struct fl_extension_base *extension_start;   /* ABI 1.4; see "ARGUMENTS STRUCTS" */
} fl_all_reduce_args;
FL_DEFINE_STRUCT_TRAITS(fl_all_reduce_args, extension_start);

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
    const struct fl_extension_base *extension_start;   /* ABI 1.4; see "ARGUMENTS STRUCTS" */
} fl_broadcast_args;
FL_DEFINE_STRUCT_TRAITS(fl_broadcast_args, extension_start);

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
    const struct fl_extension_base *extension_start;   /* ABI 1.4; see "ARGUMENTS STRUCTS" */
} fl_all_gather_args;
FL_DEFINE_STRUCT_TRAITS(fl_all_gather_args, extension_start);

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
    const struct fl_extension_base *extension_start;   /* ABI 1.4; see "ARGUMENTS STRUCTS" */
} fl_reduce_scatter_args;
FL_DEFINE_STRUCT_TRAITS(fl_reduce_scatter_args, extension_start);

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
    const struct fl_extension_base *extension_start;   /* ABI 1.4; see "ARGUMENTS STRUCTS" */
} fl_all_to_all_args;
FL_DEFINE_STRUCT_TRAITS(fl_all_to_all_args, extension_start);

typedef struct fl_send_args {
    size_t struct_size;
    fl_comm comm;
    fl_stream stream;
    fl_devptr send_base;             /* count elements */
    uint64_t send_offset;
    uint64_t count;
    int32_t dtype;
    int32_t peer;                    /* the receiving rank */
    const struct fl_extension_base *extension_start;   /* ABI 1.4; see "ARGUMENTS STRUCTS" */
} fl_send_args;
FL_DEFINE_STRUCT_TRAITS(fl_send_args, extension_start);

typedef struct fl_recv_args {
    size_t struct_size;
    fl_comm comm;
    fl_stream stream;
    fl_devptr recv_base;             /* count elements */
    uint64_t recv_offset;
    uint64_t count;
    int32_t dtype;
    int32_t peer;                    /* the sending rank */
    const struct fl_extension_base *extension_start;   /* ABI 1.4; see "ARGUMENTS STRUCTS" */
} fl_recv_args;
FL_DEFINE_STRUCT_TRAITS(fl_recv_args, extension_start);

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

/* ABI 1.2: which ranks a communicator can join (fl_collectives_extension.reach).
 * The runtime never asks a plugin for a communicator over ranks beyond its reach:
 * with FL_COMM_REACH_HOST it makes one communicator per host for the ranks that
 * share it and carries the rest between hosts itself.  "Same host" is decided by
 * the runtime (one kernel, hostname, network namespace and /dev/shm;
 * docs/users/multi-host.md).  An extension whose base.struct_size does not cover
 * `reach` (a 1.1 plugin), or that sets a value other than these, is treated as
 * FL_COMM_REACH_HOST: never spanning hosts is the safe default. */
typedef enum fl_comm_reach {
    FL_COMM_REACH_HOST = 1,            /* ranks on the same host only */
    FL_COMM_REACH_ANY = 2,             /* any rank the network reaches */
    FL_COMM_REACH_FORCE_32BIT = 0x7fffffff
} fl_comm_reach;

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
    /* ABI 1.2: */
    int32_t reach;                   /* fl_comm_reach; not covered by struct_size: FL_COMM_REACH_HOST */
} fl_collectives_extension;
FL_DEFINE_STRUCT_TRAITS(fl_collectives_extension, reach);
/* FL_CDEF_END */

#ifdef __cplusplus
}
#endif

#endif /* TORCH_FL_COLLECTIVES_H */
