/*
 * event.c -- events, event_record and stream_wait_event.
 *
 * Streams run their work when it is enqueued (stream.c), so recording an event
 * completes it at once: it takes the host clock and is then always done.
 *
 * TODO(vendor): record the chip's event on the stream's queue.  The
 * semantics to keep are the reference vendor's (reference_vendor/src/driver/
 * event.c in torch-fl; fl_abi.h states the ABI's part): an event may be
 * recorded only on a stream of its own device; recording again moves the event
 * to the new record, and query, synchronize and stream_wait_event refer to the
 * record that was latest when they were called (never recorded: nothing to
 * wait for); elapsed_ms is FL_ERROR_INVALID_VALUE when either event was never
 * recorded or the two are on different devices, FL_NOT_READY while either
 * record is pending, and then the device's time between the two records.
 */
#include "internal.h"

#include <stdlib.h>
#include <time.h>

static fld_handles g_events = FLD_HANDLES_INIT;
static pthread_mutex_t g_event_lock = PTHREAD_MUTEX_INITIALIZER;   /* guards recorded/time_ms */

fl_status plg_event_check(fl_event event, const char *call) {
    return fld_handle_check(&g_events, event, "event", call);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

fl_status plg_event_create(int32_t device, fl_event *out) {
    if (!out)
        return fld_fail(FL_ERROR_INVALID_POINTER, "event_create(device=%d): out is NULL", device);
    if (!plg_device_valid(device))
        return plg_bad_device(device, "event_create");
    fl_event event = calloc(1, sizeof *event);
    if (!event)
        return fld_fail(FL_ERROR_OUT_OF_MEMORY, "event_create(device=%d): out of host memory", device);
    event->device = device;
    fl_status status = fld_handle_add(&g_events, event, "event_create");
    if (status != FL_SUCCESS) {
        free(event);
        return status;
    }
    *out = event;
    return FL_SUCCESS;
}

fl_status plg_event_destroy(fl_event event) {
    fl_status status = fld_handle_remove(&g_events, event, "event", "event_destroy");
    if (status == FL_SUCCESS)
        free(event);
    return status;
}

fl_status plg_event_record(fl_event event, fl_stream stream) {
    fl_status status = plg_event_check(event, "event_record");
    if (status == FL_SUCCESS)
        status = plg_stream_check(stream, "event_record");
    if (status != FL_SUCCESS)
        return status;
    if (event->device != stream->device)
        return fld_fail(FL_ERROR_INVALID_VALUE, "event_record: event of device %d on a stream of device %d",
                        event->device, stream->device);
    pthread_mutex_lock(&g_event_lock);
    event->recorded = 1;
    event->time_ms = now_ms();
    pthread_mutex_unlock(&g_event_lock);
    return FL_SUCCESS;
}

fl_status plg_event_synchronize(fl_event event) { return plg_event_check(event, "event_synchronize"); }

fl_status plg_event_query(fl_event event) { return plg_event_check(event, "event_query"); }

fl_status plg_event_elapsed_ms(fl_event start, fl_event end, float *ms) {
    fl_status status = plg_event_check(start, "event_elapsed_ms (start)");
    if (status == FL_SUCCESS)
        status = plg_event_check(end, "event_elapsed_ms (end)");
    if (status != FL_SUCCESS)
        return status;
    if (!ms)
        return fld_fail(FL_ERROR_INVALID_POINTER, "event_elapsed_ms: ms is NULL");
    pthread_mutex_lock(&g_event_lock);
    int start_recorded = start->recorded, end_recorded = end->recorded;
    double elapsed = end->time_ms - start->time_ms;
    pthread_mutex_unlock(&g_event_lock);
    if (!start_recorded || !end_recorded)
        return fld_fail(FL_ERROR_INVALID_VALUE, "event_elapsed_ms: the %s event was never recorded",
                        start_recorded ? "end" : "start");
    if (start->device != end->device)
        return fld_fail(FL_ERROR_INVALID_VALUE, "event_elapsed_ms: events are on different devices (%d and %d)",
                        start->device, end->device);
    *ms = (float)elapsed;
    return FL_SUCCESS;
}

/* Work already enqueued has run, so a recorded event is always complete. */
fl_status plg_stream_wait_event(fl_stream stream, fl_event event) {
    fl_status status = plg_stream_check(stream, "stream_wait_event");
    return status == FL_SUCCESS ? plg_event_check(event, "stream_wait_event") : status;
}
