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

#include <stdlib.h>

static fld_handles g_streams = FLD_HANDLES_INIT;

fl_status plg_stream_check(fl_stream stream, const char *call) {
    return fld_handle_check(&g_streams, stream, "stream", call);
}

fl_status plg_stream_create(int32_t device, fl_stream *out) {
    if (!out)
        return fld_fail(FL_ERROR_INVALID_POINTER, "stream_create(device=%d): out is NULL", device);
    if (!plg_device_valid(device))
        return plg_bad_device(device, "stream_create");
    fl_stream stream = calloc(1, sizeof *stream);
    if (!stream)
        return fld_fail(FL_ERROR_OUT_OF_MEMORY, "stream_create(device=%d): out of host memory", device);
    stream->device = device;
    fl_status status = fld_handle_add(&g_streams, stream, "stream_create");
    if (status != FL_SUCCESS) {
        free(stream);
        return status;
    }
    *out = stream;
    return FL_SUCCESS;
}

fl_status plg_stream_destroy(fl_stream stream) {
    fl_status status = fld_handle_remove(&g_streams, stream, "stream", "stream_destroy");
    if (status == FL_SUCCESS)
        free(stream);
    return status;
}

fl_status plg_stream_synchronize(fl_stream stream) { return plg_stream_check(stream, "stream_synchronize"); }

fl_status plg_stream_query(fl_stream stream) { return plg_stream_check(stream, "stream_query"); }
