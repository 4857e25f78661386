/*
 * stream.c -- streams.
 *
 * Out of the box a stream runs each piece of work when it is enqueued, on the
 * calling thread: FIFO order holds trivially, so is every event's "everything
 * before the record is done", and synchronize/query have nothing to wait for.
 *
 * TODO(vendor): create the chip's queue in stream_create and make the *_async
 * calls, event records/waits (event.c) and kernel launches (launch.c) enqueue
 * on it.  Errors of asynchronous work must then become sticky on the stream
 * and be returned, once, by the next stream_synchronize / stream_query (see
 * fl_abi.h, "ERRORS").
 */
#include "internal.h"

static plg_registry g_streams = PLG_REGISTRY_INIT;

fl_status plg_stream_check(fl_stream stream, const char *call) {
    return plg_handle_check(&g_streams, stream, "stream", call);
}

fl_status plg_stream_create(int32_t device, fl_stream *out) {
    void *handle = NULL;
    fl_status status = plg_handle_create(&g_streams, sizeof **out, device, "stream_create", out ? &handle : NULL);
    if (status == FL_SUCCESS)
        *out = handle;
    return status;
}

fl_status plg_stream_destroy(fl_stream stream) {
    return plg_handle_destroy(&g_streams, stream, "stream", "stream_destroy");
}

fl_status plg_stream_synchronize(fl_stream stream) { return plg_stream_check(stream, "stream_synchronize"); }

fl_status plg_stream_query(fl_stream stream) { return plg_stream_check(stream, "stream_query"); }
