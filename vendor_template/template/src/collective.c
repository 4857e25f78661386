/*
 * collective.c -- collectives (fl_abi.h, "collectives", ABI 1.1): skeletons.
 * Calls nothing but the driver library (internal.h lists the layers).
 *
 * Every function declines with FL_ERROR_NOT_SUPPORTED until you write it, and
 * the extension is not chained into the fl_api table while PLG_COLLECTIVES_READY
 * (internal.h) is 0: the runtime then runs this plugin's collectives host-staged (through
 * Gloo) and the conformance suite reports the `collectives` category as
 * not_supported.  TODO(vendor): map each function onto the chip's collective
 * library (NCCL-style libraries bootstrap from a unique id exactly like
 * comm_get_unique_id / comm_create), declare the dtypes and reduce ops it
 * takes, set PLG_COLLECTIVES_READY to 1 and run `fl-sdk test . -k collective`.
 * The reference vendor's driver/collective.c is a complete example (processes
 * of one host over shared memory, each collective a task on its stream).
 */
#include "internal.h"

static fl_status decline(const char *call) {
    return fld_fail(FL_ERROR_NOT_SUPPORTED, "%s: collectives are not written yet (src/collective.c)", call);
}

static fl_status comm_get_unique_id(fl_comm_get_unique_id_args *args) {
    (void)args;   /* TODO(vendor): the library's unique id, into args->unique_id (128 bytes, opaque) */
    return decline("comm_get_unique_id");
}

static fl_status comm_create(fl_comm_create_args *args) {
    (void)args;   /* TODO(vendor): join rank args->rank of args->size on args->device; args->comm out */
    return decline("comm_create");
}

static fl_status comm_destroy(fl_comm_destroy_args *args) {
    (void)args;
    return decline("comm_destroy");
}

static fl_status all_reduce(fl_all_reduce_args *args) {
    (void)args;   /* TODO(vendor): enqueue on args->stream, ordered after its earlier work */
    return decline("all_reduce");
}

static fl_status broadcast(fl_broadcast_args *args) {
    (void)args;
    return decline("broadcast");
}

static fl_status all_gather(fl_all_gather_args *args) {
    (void)args;
    return decline("all_gather");
}

static fl_status reduce_scatter(fl_reduce_scatter_args *args) {
    (void)args;
    return decline("reduce_scatter");
}

static fl_status all_to_all(fl_all_to_all_args *args) {
    (void)args;
    return decline("all_to_all");
}

static fl_status send_fn(fl_send_args *args) {
    (void)args;
    return decline("send");
}

static fl_status recv_fn(fl_recv_args *args) {
    (void)args;
    return decline("recv");
}

const fl_collectives_extension plg_collectives = {
    .base = {.struct_size = sizeof(fl_collectives_extension), .type = FL_EXTENSION_COLLECTIVES, .next = NULL},
    .dtypes = FLK_DT(FL_FLOAT32),                      /* TODO(vendor): every dtype the library reduces */
    .reduce_ops = (1u << FL_REDUCE_SUM) | (1u << FL_REDUCE_PROD) | (1u << FL_REDUCE_MIN) |
                  (1u << FL_REDUCE_MAX) | (1u << FL_REDUCE_AVG),
    .max_ranks = 8,
    .comm_get_unique_id = comm_get_unique_id,
    .comm_create = comm_create,
    .comm_destroy = comm_destroy,
    .all_reduce = all_reduce,
    .broadcast = broadcast,
    .all_gather = all_gather,
    .reduce_scatter = reduce_scatter,
    .all_to_all = all_to_all,
    .send = send_fn,
    .recv = recv_fn,
    .reach = FL_COMM_REACH_HOST,                       /* TODO(vendor): FL_COMM_REACH_ANY if it crosses hosts */
};
