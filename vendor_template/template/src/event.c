/*
 * event.c -- events, event_record and stream_wait_event: the table of live
 * events and the ABI's rules, over the chip's events (host_driver.c).
 *
 * The semantics kept here are the reference vendor's (reference_vendor/src/
 * driver/event.c in torch-fl; fl_abi.h states the ABI's part): an event may be
 * recorded only on a stream of its own device; recording again moves the event
 * to the new record, and query, synchronize and stream_wait_event refer to the
 * record that was latest when they were called (never recorded: nothing to
 * wait for); elapsed_ms is FL_ERROR_INVALID_VALUE when either event was never
 * recorded or the two are on different devices, FL_NOT_READY while either
 * record is pending, and then the device's time between the two records.
 */
#include "internal.h"

#include <stdlib.h>

static fld_handles g_events = FLD_HANDLES_INIT;
static pthread_mutex_t g_event_lock = PTHREAD_MUTEX_INITIALIZER;   /* guards recorded and the chip's record */

fl_status plg_event_check(fl_event event, const char *call) {
    return fld_handle_check(&g_events, event, "event", call);
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
    fl_status status = plg_chip_event_open(event);
    if (status != FL_SUCCESS) {
        free(event);
        return status;
    }
    status = fld_handle_add(&g_events, event, "event_create");
    if (status != FL_SUCCESS) {
        plg_chip_event_close(event);
        free(event);
        return status;
    }
    *out = event;
    return FL_SUCCESS;
}

fl_status plg_event_destroy(fl_event event) {
    FLK_TRY(fld_handle_remove(&g_events, event, "event", "event_destroy"));
    plg_chip_event_close(event);
    free(event);
    return FL_SUCCESS;
}

fl_status plg_event_record(fl_event event, fl_stream stream) {
    FLK_TRY(plg_event_check(event, "event_record"));
    FLK_TRY(plg_stream_check(stream, "event_record"));
    if (event->device != stream->device)
        return fld_fail(FL_ERROR_INVALID_VALUE, "event_record: event of device %d on a stream of device %d",
                        event->device, stream->device);
    pthread_mutex_lock(&g_event_lock);
    fl_status status = plg_chip_record(event, stream);
    if (status == FL_SUCCESS)
        event->recorded = 1;
    pthread_mutex_unlock(&g_event_lock);
    return status;
}

static int was_recorded(fl_event event) {
    pthread_mutex_lock(&g_event_lock);
    int recorded = event->recorded;
    pthread_mutex_unlock(&g_event_lock);
    return recorded;
}

fl_status plg_event_synchronize(fl_event event) {
    FLK_TRY(plg_event_check(event, "event_synchronize"));
    return was_recorded(event) ? plg_chip_event_wait(event) : FL_SUCCESS;
}

fl_status plg_event_query(fl_event event) {
    FLK_TRY(plg_event_check(event, "event_query"));
    return was_recorded(event) ? plg_chip_event_poll(event) : FL_SUCCESS;
}

fl_status plg_event_elapsed_ms(fl_event start, fl_event end, float *ms) {
    FLK_TRY(plg_event_check(start, "event_elapsed_ms (start)"));
    FLK_TRY(plg_event_check(end, "event_elapsed_ms (end)"));
    if (!ms)
        return fld_fail(FL_ERROR_INVALID_POINTER, "event_elapsed_ms: ms is NULL");
    pthread_mutex_lock(&g_event_lock);
    fl_status status = FL_SUCCESS;
    if (!start->recorded || !end->recorded)
        status = fld_fail(FL_ERROR_INVALID_VALUE, "event_elapsed_ms: the %s event was never recorded",
                          start->recorded ? "end" : "start");
    else if (start->device != end->device)
        status = fld_fail(FL_ERROR_INVALID_VALUE, "event_elapsed_ms: events are on different devices (%d and %d)",
                          start->device, end->device);
    else
        status = plg_chip_elapsed_ms(start, end, ms);
    pthread_mutex_unlock(&g_event_lock);
    return status;
}

fl_status plg_stream_wait_event(fl_stream stream, fl_event event) {
    FLK_TRY(plg_stream_check(stream, "stream_wait_event"));
    FLK_TRY(plg_event_check(event, "stream_wait_event"));
    return was_recorded(event) ? plg_chip_stream_wait_event(stream, event) : FL_SUCCESS;
}
