/*
 * stream.c -- streams.
 *
 * The table of live streams, over the chip's queues (host_driver.c).  A
 * stream is checked by lookup before it is dereferenced (fl_driver.h
 * section 4); synchronize and query return, once, an error of asynchronous
 * work the chip kept (fl_abi.h, "ERRORS").
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
    fl_status status = plg_chip_stream_open(stream);
    if (status != FL_SUCCESS) {
        free(stream);
        return status;
    }
    status = fld_handle_add(&g_streams, stream, "stream_create");
    if (status != FL_SUCCESS) {
        plg_chip_stream_close(stream);
        free(stream);
        return status;
    }
    *out = stream;
    return FL_SUCCESS;
}

fl_status plg_stream_destroy(fl_stream stream) {
    FLK_TRY(fld_handle_remove(&g_streams, stream, "stream", "stream_destroy"));
    plg_chip_stream_close(stream);
    free(stream);
    return FL_SUCCESS;
}

fl_status plg_stream_synchronize(fl_stream stream) {
    FLK_TRY(plg_stream_check(stream, "stream_synchronize"));
    return plg_chip_stream_wait(stream);
}

fl_status plg_stream_query(fl_stream stream) {
    FLK_TRY(plg_stream_check(stream, "stream_query"));
    return plg_chip_stream_poll(stream);
}
