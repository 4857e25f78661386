/*
 * stream.c -- streams of the reference chip: a device and a task queue
 * (queue.c) with its worker thread.  Calls queue.c and device.c
 * (driver.h lists the layers).
 *
 * Work enqueued on one stream runs in FIFO order on the stream's worker;
 * synchronize waits for it and hands out the stream's sticky error once, as
 * fl_abi.h's "ERRORS" asks.
 */
#include "driver.h"

#include <stdlib.h>

struct fl_stream_impl {
    int32_t device;
    drv_queue queue;
};

/* The live streams: a handle is looked up before it is dereferenced
 * (fl_driver.h, handle tables). */
static fld_handles g_streams = FLD_HANDLES_INIT;

fl_status drv_stream_check(fl_stream stream, const char *call) {
    return fld_handle_check(&g_streams, stream, "stream", call);
}

int32_t drv_stream_device(fl_stream stream) { return stream->device; }

drv_queue *drv_stream_queue(fl_stream stream) { return &stream->queue; }

fl_status drv_stream_create(int32_t device, fl_stream *out) {
    if (!out)
        return fld_fail(FL_ERROR_INVALID_POINTER,
                        "stream_create(device=%d, out=NULL): NULL output pointer", device);
    *out = NULL;
    if (!drv_device_get(device))
        return drv_bad_device(device, "stream_create");
    fl_stream s = calloc(1, sizeof *s);
    if (!s)
        return fld_fail(FL_ERROR_INTERNAL, "stream_create(device=%d): out of host memory", device);
    s->device = device;
    fl_status st = drv_queue_start(&s->queue, device, "stream_create");
    if (st != FL_SUCCESS) {
        free(s);
        return st;
    }
    st = fld_handle_add(&g_streams, s, "stream_create");
    if (st != FL_SUCCESS) {
        drv_queue_stop(&s->queue);
        free(s);
        return st;
    }
    *out = s;
    return FL_SUCCESS;
}

/* The work already queued runs before the stream goes. */
fl_status drv_stream_destroy(fl_stream s) {
    fl_status st = fld_handle_remove(&g_streams, s, "stream", "stream_destroy");
    if (st != FL_SUCCESS)
        return st;
    drv_queue_stop(&s->queue);
    free(s);
    return FL_SUCCESS;
}

fl_status drv_stream_synchronize(fl_stream s) {
    fl_status st = drv_stream_check(s, "stream_synchronize");
    return st != FL_SUCCESS ? st : drv_queue_synchronize(&s->queue);
}

fl_status drv_stream_query(fl_stream s) {
    fl_status st = drv_stream_check(s, "stream_query");
    return st != FL_SUCCESS ? st : drv_queue_query(&s->queue);
}
