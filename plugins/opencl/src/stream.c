/*
 * stream.c -- streams: one in-order OpenCL command queue each.
 * Calls device.c and clapi.c; handles: fl_driver.h's fld_handles.
 *
 * An in-order queue runs its commands in FIFO order, which is the ABI's
 * stream.  stream_query must say "done" right after a synchronize and once
 * the work finished, but a marker enqueued by the query itself is not done
 * the instant it is enqueued: so every enqueue bumps the stream's work epoch,
 * a synchronize marks its epoch done, and a query answers from the epochs,
 * asking the queue through the marker of an event record that ended the
 * epoch (event.c) or else enqueueing one marker per epoch it has to ask about.  Queues are made with profiling on (event_elapsed_ms reads marker
 * timestamps).  A stream's asynchronous errors are sticky (fl_abi.h
 * "ERRORS"): a failed clFinish, a failed marker, or a device-side check that
 * a kernel reported through the stream's checks buffer (one int, clk.h
 * "device-side checks") is returned once by the next synchronize or query.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>

static fld_handles g_streams = FLD_HANDLES_INIT;

fl_status plg_stream_check(fl_stream stream, const char *call) {
    return fld_handle_check(&g_streams, stream, "stream", call);
}

fl_status plg_stream_enqueue_failed(fl_stream stream, const char *call, cl_int status) {
    return fld_fail(plg_cl_status(status), "%s on %s: the driver refused the command: %s", call,
                    plg_device_label(stream->device), plg_cl_error_name(status));
}

void plg_stream_touch(fl_stream stream) {
    pthread_mutex_lock(&stream->lock);
    stream->work_epoch++;
    pthread_mutex_unlock(&stream->lock);
}

cl_mem plg_stream_checks(fl_stream stream) {
    pthread_mutex_lock(&stream->lock);
    stream->checks_pending = 1;
    pthread_mutex_unlock(&stream->lock);
    return stream->checks;
}

/* Finish the stream's work and free what it holds. */
static void release(fl_stream stream) {
    const plg_cl_api *cl = plg_cl();
    cl->Finish(stream->queue);     /* work already enqueued completes first */
    if (stream->probe)
        cl->ReleaseEvent(stream->probe);
    cl->ReleaseMemObject(stream->checks);
    cl->ReleaseCommandQueue(stream->queue);
    pthread_mutex_destroy(&stream->lock);
    free(stream);
}

fl_status plg_stream_create(int32_t device, fl_stream *out) {
    if (!out)
        return fld_fail(FL_ERROR_INVALID_POINTER, "stream_create(device=%d): out is NULL", device);
    FLK_TRY(plg_devices_init(NULL));
    if (!plg_device_valid(device))
        return plg_bad_device(device, "stream_create");
    fl_stream stream = calloc(1, sizeof *stream);
    if (!stream)
        return fld_fail(FL_ERROR_OUT_OF_MEMORY, "stream_create on %s: out of host memory", plg_device_label(device));
    stream->device = device;
    const plg_device *dev = plg_device_get(device);
    const plg_cl_api *cl = plg_cl();
    cl_int err = CL_SUCCESS;
    stream->queue = cl->CreateCommandQueue(dev->context, dev->id, CL_QUEUE_PROFILING_ENABLE, &err);
    cl_int zero = 0;
    if (stream->queue)
        stream->checks = cl->CreateBuffer(dev->context, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof zero, &zero,
                                          &err);
    if (!stream->queue || !stream->checks) {
        const char *failed = stream->queue ? "clCreateBuffer" : "clCreateCommandQueue";
        if (stream->queue)
            cl->ReleaseCommandQueue(stream->queue);
        free(stream);
        return fld_fail(plg_cl_status(err), "stream_create on %s: %s failed with %s", plg_device_label(device),
                        failed, plg_cl_error_name(err));
    }
    pthread_mutex_init(&stream->lock, NULL);
    fl_status status = fld_handle_add(&g_streams, stream, "stream_create");
    if (status != FL_SUCCESS) {
        release(stream);
        return status;
    }
    *out = stream;
    return FL_SUCCESS;
}

fl_status plg_stream_destroy(fl_stream stream) {
    /* out of the table first: a second destroy, or a use after it, is refused */
    FLK_TRY(fld_handle_remove(&g_streams, stream, "stream", "stream_destroy"));
    release(stream);
    return FL_SUCCESS;
}

/* Record an asynchronous failure (the first one wins until it is reported). */
static void stick(fl_stream stream, fl_status status, const char *what, cl_int err) {
    pthread_mutex_lock(&stream->lock);
    if (stream->sticky == FL_SUCCESS) {
        stream->sticky = status;
        snprintf(stream->sticky_message, sizeof stream->sticky_message, "%s on %s: %s", what,
                 plg_device_label(stream->device), plg_cl_error_name(err));
    }
    pthread_mutex_unlock(&stream->lock);
}

/* The names of the device-side checks set in `flags`. */
static void describe_checks(cl_int flags, char *out, size_t cap) {
    size_t used = 0;
    out[0] = '\0';
#define PLG_CHECK_TEXT(name, value)                                                                       \
    if (flags & (value))                                                                                   \
        used += (size_t)snprintf(out + used, cap - used, "%s%s", used ? ", " : "",                         \
                                 (value) == CLK_CHECK_INDEX ? "an index out of range (index_select, gather, " \
                                 "embedding)" : "a target out of range (nll_loss)");
    CLK_CHECKS(PLG_CHECK_TEXT)
#undef PLG_CHECK_TEXT
}

/* After the queue drained: did a kernel report bad data?  Reads and clears the
 * checks buffer (only when a checking kernel ran since the last look). */
static void collect_checks(fl_stream stream) {
    pthread_mutex_lock(&stream->lock);
    int pending = stream->checks_pending;
    stream->checks_pending = 0;
    pthread_mutex_unlock(&stream->lock);
    if (!pending)
        return;
    const plg_cl_api *cl = plg_cl();
    cl_int flags = 0, zero = 0;
    cl_int err = cl->EnqueueReadBuffer(stream->queue, stream->checks, CL_TRUE, 0, sizeof flags, &flags, 0, NULL, NULL);
    if (err != CL_SUCCESS) {
        stick(stream, plg_cl_status(err), "reading the device-side checks", err);
        return;
    }
    if (!flags)
        return;
    cl->EnqueueWriteBuffer(stream->queue, stream->checks, CL_TRUE, 0, sizeof zero, &zero, 0, NULL, NULL);
    char what[256];
    describe_checks(flags, what, sizeof what);
    pthread_mutex_lock(&stream->lock);
    if (stream->sticky == FL_SUCCESS) {
        stream->sticky = FL_ERROR_KERNEL_FAILED;
        snprintf(stream->sticky_message, sizeof stream->sticky_message,
                 "a kernel on %s found %s; its output is undefined (PyTorch raises the same error on the CPU)",
                 plg_device_label(stream->device), what);
    }
    pthread_mutex_unlock(&stream->lock);
}

/* The sticky error, once, or FL_SUCCESS. */
static fl_status take_sticky(fl_stream stream) {
    pthread_mutex_lock(&stream->lock);
    fl_status status = stream->sticky;
    char message[FLD_MESSAGE_MAX];
    snprintf(message, sizeof message, "%s", stream->sticky_message);
    stream->sticky = FL_SUCCESS;
    pthread_mutex_unlock(&stream->lock);
    return status == FL_SUCCESS ? status : fld_fail(status, "%s", message);
}

fl_status plg_stream_synchronize(fl_stream stream) {
    FLK_TRY(plg_stream_check(stream, "stream_synchronize"));
    pthread_mutex_lock(&stream->lock);
    uint64_t epoch = stream->work_epoch;   /* what clFinish below waits for, at least */
    pthread_mutex_unlock(&stream->lock);
    cl_int err = plg_cl()->Finish(stream->queue);
    if (err != CL_SUCCESS) {
        stick(stream, plg_cl_status(err), "clFinish (work on the stream failed)", err);
    } else {
        pthread_mutex_lock(&stream->lock);
        if (stream->done_epoch < epoch)
            stream->done_epoch = epoch;
        pthread_mutex_unlock(&stream->lock);
        collect_checks(stream);
    }
    return take_sticky(stream);
}

/* Is the work up to the current epoch done?  A marker per epoch asked about,
 * kept for the next query while it is pending.  Caller holds stream->lock. */
static cl_int probe_queue(fl_stream stream, int *done) {
    const plg_cl_api *cl = plg_cl();
    *done = stream->done_epoch >= stream->work_epoch;
    if (*done)
        return CL_SUCCESS;
    if (stream->probe && stream->probe_epoch != stream->work_epoch) {
        cl->ReleaseEvent(stream->probe);   /* work came after it: ask again */
        stream->probe = NULL;
    }
    cl_int err = CL_SUCCESS;
    if (!stream->probe) {
        err = cl->EnqueueMarkerWithWaitList(stream->queue, 0, NULL, &stream->probe);
        if (err == CL_SUCCESS)
            err = cl->Flush(stream->queue);
        if (err != CL_SUCCESS)
            return err;
        stream->probe_epoch = stream->work_epoch;
    }
    cl_int state = CL_COMPLETE;
    err = cl->GetEventInfo(stream->probe, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof state, &state, NULL);
    if (err != CL_SUCCESS || state < 0)
        return err != CL_SUCCESS ? err : state;
    if (state == CL_COMPLETE) {
        stream->done_epoch = stream->probe_epoch;
        cl->ReleaseEvent(stream->probe);
        stream->probe = NULL;
        *done = 1;
    }
    return CL_SUCCESS;
}

fl_status plg_stream_query(fl_stream stream) {
    FLK_TRY(plg_stream_check(stream, "stream_query"));
    int done = 0;
    pthread_mutex_lock(&stream->lock);
    cl_int err = probe_queue(stream, &done);
    fl_status sticky = stream->sticky;
    pthread_mutex_unlock(&stream->lock);
    if (err != CL_SUCCESS) {
        stick(stream, plg_cl_status(err), "stream_query (work on the stream failed)", err);
        return take_sticky(stream);
    }
    if (!done)
        return sticky != FL_SUCCESS ? take_sticky(stream) : FL_NOT_READY;
    collect_checks(stream);
    return take_sticky(stream);
}
