/*
 * stream.c -- streams of the reference chip: a device and a task queue
 * (queue.c) with its worker thread.  Calls queue.c, device.c and error.c
 * (driver.h lists the layers).
 *
 * Work enqueued on one stream runs in FIFO order on the stream's worker;
 * synchronize waits for it and hands out the stream's sticky error once, as
 * fl_abi.h's "ERRORS" asks.
 */
#include "driver.h"

#include <stdlib.h>

#define STREAM_MAGIC 0x53545245414d2121ull /* "STREAM!!" */

struct fl_stream_impl {
    uint64_t magic;
    int32_t device;
    drv_queue queue;
};

fl_status drv_stream_check(fl_stream stream, const char *call) {
    if (!stream)
        return drv_fail(FL_ERROR_INVALID_HANDLE, "%s: stream is NULL", call);
    if (stream->magic != STREAM_MAGIC)
        return drv_fail(FL_ERROR_INVALID_HANDLE, "%s: %p is not a live stream", call,
                        (void *)stream);
    return FL_SUCCESS;
}

int32_t drv_stream_device(fl_stream stream) { return stream->device; }

drv_queue *drv_stream_queue(fl_stream stream) { return &stream->queue; }

fl_status drv_stream_create(int32_t device, fl_stream *out) {
    if (!out)
        return drv_fail(FL_ERROR_INVALID_POINTER,
                        "stream_create(device=%d, out=NULL): NULL output pointer", device);
    *out = NULL;
    if (!drv_device_get(device))
        return drv_bad_device(device, "stream_create");
    fl_stream s = calloc(1, sizeof *s);
    if (!s)
        return drv_fail(FL_ERROR_INTERNAL, "stream_create(device=%d): out of host memory", device);
    s->device = device;
    fl_status st = drv_queue_start(&s->queue, device, "stream_create");
    if (st != FL_SUCCESS) {
        free(s);
        return st;
    }
    s->magic = STREAM_MAGIC;
    *out = s;
    return FL_SUCCESS;
}

/* The work already queued runs before the stream goes. */
fl_status drv_stream_destroy(fl_stream s) {
    fl_status st = drv_stream_check(s, "stream_destroy");
    if (st != FL_SUCCESS)
        return st;
    s->magic = 0;
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
