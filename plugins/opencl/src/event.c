/*
 * event.c -- events as OpenCL markers, event_record and stream_wait_event.
 * Calls stream.c, device.c and clapi.c; handles: fl_driver.h's fld_handles.
 *
 * event_record enqueues a marker on the stream's queue (it completes when
 * everything enqueued before it has) and flushes the queue, so another queue
 * waiting on the marker can see it progress.  Recording again moves the
 * event to the new marker; query, synchronize and stream_wait_event refer to
 * the marker that was latest when they were called; an event never recorded
 * has nothing to wait for.  stream_wait_event is a barrier on the waiting
 * queue whose wait list is the marker: within one context (all devices of a
 * platform share one) directly; across contexts through a user event of the
 * waiting context that a completion callback of the marker sets, since
 * OpenCL wait lists take events of their own context only.
 * event_elapsed_ms reads the markers' profiling end times (ns, device clock).
 */
#include "internal.h"

#include <stdlib.h>

static fld_handles g_events = FLD_HANDLES_INIT;
static pthread_mutex_t g_event_lock = PTHREAD_MUTEX_INITIALIZER;   /* guards every event's marker */

fl_status plg_event_check(fl_event event, const char *call) {
    return fld_handle_check(&g_events, event, "event", call);
}

/* The event's latest marker, retained (release it), or NULL. */
static cl_event latest(fl_event event) {
    pthread_mutex_lock(&g_event_lock);
    cl_event marker = event->marker;
    if (marker)
        plg_cl()->RetainEvent(marker);
    pthread_mutex_unlock(&g_event_lock);
    return marker;
}

fl_status plg_event_create(int32_t device, fl_event *out) {
    if (!out)
        return fld_fail(FL_ERROR_INVALID_POINTER, "event_create(device=%d): out is NULL", device);
    FLK_TRY(plg_devices_init(NULL));
    if (!plg_device_valid(device))
        return plg_bad_device(device, "event_create");
    fl_event event = calloc(1, sizeof *event);
    if (!event)
        return fld_fail(FL_ERROR_OUT_OF_MEMORY, "event_create on %s: out of host memory", plg_device_label(device));
    event->device = device;
    fl_status status = fld_handle_add(&g_events, event, "event_create");
    if (status == FL_SUCCESS)
        *out = event;
    else
        free(event);
    return status;
}

fl_status plg_event_destroy(fl_event event) {
    /* out of the table first: a second destroy, or a use after it, is refused */
    FLK_TRY(fld_handle_remove(&g_events, event, "event", "event_destroy"));
    pthread_mutex_lock(&g_event_lock);
    cl_event marker = event->marker;
    pthread_mutex_unlock(&g_event_lock);
    if (marker)
        plg_cl()->ReleaseEvent(marker);   /* a wait already enqueued on it holds its own reference */
    free(event);
    return FL_SUCCESS;
}

fl_status plg_event_record(fl_event event, fl_stream stream) {
    FLK_TRY(plg_event_check(event, "event_record"));
    FLK_TRY(plg_stream_check(stream, "event_record"));
    if (event->device != stream->device)
        return fld_fail(FL_ERROR_INVALID_VALUE, "event_record: event of device %d on a stream of device %d",
                        event->device, stream->device);
    const plg_cl_api *cl = plg_cl();
    cl_event marker = NULL;
    /* The marker is work of the stream, and the last of it until more comes: it becomes the
     * stream's probe for the epoch it ends, so stream_query answers from this marker (done
     * exactly when the event is, fl_abi.h ADDRESSES) instead of enqueueing a fresh marker
     * that cannot be complete yet.  Under the stream's lock, so no enqueue of another
     * thread falls between the marker and its epoch. */
    pthread_mutex_lock(&stream->lock);
    cl_int err = cl->EnqueueMarkerWithWaitList(stream->queue, 0, NULL, &marker);
    if (err == CL_SUCCESS)
        err = cl->Flush(stream->queue);
    if (err == CL_SUCCESS) {
        stream->work_epoch++;
        if (stream->probe)
            cl->ReleaseEvent(stream->probe);
        cl->RetainEvent(marker);
        stream->probe = marker;
        stream->probe_epoch = stream->work_epoch;
    }
    pthread_mutex_unlock(&stream->lock);
    if (err != CL_SUCCESS) {
        if (marker)
            cl->ReleaseEvent(marker);
        return plg_stream_enqueue_failed(stream, "event_record", err);
    }
    pthread_mutex_lock(&g_event_lock);
    cl_event previous = event->marker;
    event->marker = marker;
    pthread_mutex_unlock(&g_event_lock);
    if (previous)
        cl->ReleaseEvent(previous);
    return FL_SUCCESS;
}

static fl_status marker_state(fl_event event, cl_event marker, const char *call) {
    cl_int state = CL_COMPLETE;
    cl_int err = plg_cl()->GetEventInfo(marker, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof state, &state, NULL);
    if (err != CL_SUCCESS || state < 0)
        return fld_fail(FL_ERROR_DRIVER, "%s on %s: the work before the event failed (%s)", call,
                        plg_device_label(event->device), plg_cl_error_name(err != CL_SUCCESS ? err : state));
    return state == CL_COMPLETE ? FL_SUCCESS : FL_NOT_READY;
}

fl_status plg_event_synchronize(fl_event event) {
    FLK_TRY(plg_event_check(event, "event_synchronize"));
    cl_event marker = latest(event);
    if (!marker)
        return FL_SUCCESS;
    cl_int err = plg_cl()->WaitForEvents(1, &marker);
    fl_status status = err == CL_SUCCESS ? FL_SUCCESS : marker_state(event, marker, "event_synchronize");
    plg_cl()->ReleaseEvent(marker);
    return status;
}

fl_status plg_event_query(fl_event event) {
    FLK_TRY(plg_event_check(event, "event_query"));
    cl_event marker = latest(event);
    if (!marker)
        return FL_SUCCESS;
    fl_status status = marker_state(event, marker, "event_query");
    plg_cl()->ReleaseEvent(marker);
    return status;
}

static fl_status end_time(fl_event event, cl_event marker, cl_ulong *ns) {
    cl_int err = plg_cl()->GetEventProfilingInfo(marker, CL_PROFILING_COMMAND_END, sizeof *ns, ns, NULL);
    if (err == CL_PROFILING_INFO_NOT_AVAILABLE)
        return FL_NOT_READY;   /* not complete yet */
    if (err != CL_SUCCESS)
        return fld_fail(FL_ERROR_DRIVER, "event_elapsed_ms on %s: clGetEventProfilingInfo failed with %s",
                        plg_device_label(event->device), plg_cl_error_name(err));
    return FL_SUCCESS;
}

fl_status plg_event_elapsed_ms(fl_event start, fl_event end, float *ms) {
    FLK_TRY(plg_event_check(start, "event_elapsed_ms (start)"));
    FLK_TRY(plg_event_check(end, "event_elapsed_ms (end)"));
    if (!ms)
        return fld_fail(FL_ERROR_INVALID_POINTER, "event_elapsed_ms: ms is NULL");
    cl_event a = latest(start), b = latest(end);
    fl_status status = FL_SUCCESS;
    if (!a || !b)
        status = fld_fail(FL_ERROR_INVALID_VALUE, "event_elapsed_ms: the %s event was never recorded",
                          a ? "end" : "start");
    else if (start->device != end->device)
        status = fld_fail(FL_ERROR_INVALID_VALUE, "event_elapsed_ms: events are on different devices (%d and %d)",
                          start->device, end->device);
    cl_ulong t0 = 0, t1 = 0;
    if (status == FL_SUCCESS)
        status = marker_state(start, a, "event_elapsed_ms");
    if (status == FL_SUCCESS)
        status = marker_state(end, b, "event_elapsed_ms");
    if (status == FL_SUCCESS)
        status = end_time(start, a, &t0);
    if (status == FL_SUCCESS)
        status = end_time(end, b, &t1);
    if (status == FL_SUCCESS)
        *ms = (float)(((double)t1 - (double)t0) / 1e6);
    if (a)
        plg_cl()->ReleaseEvent(a);
    if (b)
        plg_cl()->ReleaseEvent(b);
    return status;
}

/* Completes the waiting context's user event when the marker completes. */
static void CL_CALLBACK bridge_done(cl_event marker, cl_int state, void *user_event) {
    (void)marker;
    plg_cl()->SetUserEventStatus((cl_event)user_event, state < 0 ? state : CL_COMPLETE);
    plg_cl()->ReleaseEvent((cl_event)user_event);
}

/* A barrier on `stream` behind `marker` of another context. */
static cl_int wait_across_contexts(fl_stream stream, cl_event marker) {
    const plg_cl_api *cl = plg_cl();
    cl_int err = CL_SUCCESS;
    cl_event user = cl->CreateUserEvent(plg_device_get(stream->device)->context, &err);
    if (!user)
        return err;
    cl->RetainEvent(user);   /* the callback's reference */
    err = cl->SetEventCallback(marker, CL_COMPLETE, bridge_done, user);
    if (err != CL_SUCCESS) {
        cl->ReleaseEvent(user);
        cl->SetUserEventStatus(user, CL_COMPLETE);
    } else {
        err = cl->EnqueueBarrierWithWaitList(stream->queue, 1, &user, NULL);
    }
    cl->ReleaseEvent(user);
    return err;
}

fl_status plg_stream_wait_event(fl_stream stream, fl_event event) {
    FLK_TRY(plg_stream_check(stream, "stream_wait_event"));
    FLK_TRY(plg_event_check(event, "stream_wait_event"));
    cl_event marker = latest(event);
    if (!marker)
        return FL_SUCCESS;
    cl_int err;
    if (plg_device_get(event->device)->context == plg_device_get(stream->device)->context)
        err = plg_cl()->EnqueueBarrierWithWaitList(stream->queue, 1, &marker, NULL);
    else
        err = wait_across_contexts(stream, marker);
    plg_cl()->ReleaseEvent(marker);
    if (err != CL_SUCCESS)
        return plg_stream_enqueue_failed(stream, "stream_wait_event", err);
    plg_stream_touch(stream);   /* the barrier may keep the stream busy */
    return FL_SUCCESS;
}
