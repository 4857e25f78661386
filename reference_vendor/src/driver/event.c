/*
 * event.c -- events of the reference chip, event_record and
 * stream_wait_event.  Calls stream.c, queue.c and device.c
 * (driver.h lists the layers).
 *
 * Each event_record bumps the event's generation and queues a host task
 * carrying it (record_done); the stream's worker marks the generation
 * complete (with a CLOCK_MONOTONIC timestamp) when it reaches the task.
 * Query, synchronize and stream_wait_event all refer to the generation that
 * was latest when they were called, which is what makes events
 * re-recordable.
 *
 * Queued tasks hold a reference, so event_destroy on a pending event only
 * drops the caller's reference; the memory goes when the last task ran.
 * Handles are checked in the driver library's handle table (fl_driver.h)
 * before they are dereferenced.
 */
#include "driver.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

struct fl_event_impl {
    int32_t device;
    atomic_int refs;             /* the handle + one per queued task */
    pthread_mutex_t lock;
    pthread_cond_t cv;           /* broadcast whenever a generation completes */
    uint64_t recorded;           /* latest generation handed out; 0 = never */
    uint64_t completed;          /* highest generation that ran */
    uint64_t stamp_ns;           /* when `completed` ran */
};

/* The live events: a handle is looked up before it is dereferenced. */
static fld_handles g_events = FLD_HANDLES_INIT;

static fl_status check_event(fl_event e, const char *call) {
    return fld_handle_check(&g_events, e, "event", call);
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- run by stream workers, as host tasks --------------------------------- */

static void event_release(fl_event e) {
    if (atomic_fetch_sub_explicit(&e->refs, 1, memory_order_acq_rel) != 1)
        return;
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->lock);
    free(e);
}

/* The worker reached a record: mark its generation complete. */
static void record_done(void *obj, uint64_t generation) {
    fl_event e = obj;
    pthread_mutex_lock(&e->lock);
    /* Records on different streams may finish out of order; keep the newest. */
    if (generation > e->completed) {
        e->completed = generation;
        e->stamp_ns = now_ns();
    }
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->lock);
    event_release(e);
}

/* The worker reached a wait: block the stream until the generation ran. */
static void wait_done(void *obj, uint64_t generation) {
    fl_event e = obj;
    pthread_mutex_lock(&e->lock);
    while (e->completed < generation)
        pthread_cond_wait(&e->cv, &e->lock);
    pthread_mutex_unlock(&e->lock);
    event_release(e);
}

/* ---- API ---------------------------------------------------------------- */

fl_status drv_event_create(int32_t device, fl_event *out) {
    if (!out)
        return fld_fail(FL_ERROR_INVALID_POINTER,
                        "event_create(device=%d, out=NULL): NULL output pointer", device);
    *out = NULL;
    if (!drv_device_get(device))
        return drv_bad_device(device, "event_create");
    fl_event e = calloc(1, sizeof *e);
    if (!e)
        return fld_fail(FL_ERROR_INTERNAL, "event_create(device=%d): out of host memory", device);
    e->device = device;
    atomic_init(&e->refs, 1);
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->cv, NULL);
    fl_status st = fld_handle_add(&g_events, e, "event_create");
    if (st != FL_SUCCESS) {
        event_release(e);
        return st;
    }
    *out = e;
    return FL_SUCCESS;
}

/* Leaving the table first makes a concurrent second destroy fail instead of
 * dropping the reference twice. */
fl_status drv_event_destroy(fl_event e) {
    fl_status st = fld_handle_remove(&g_events, e, "event", "event_destroy");
    if (st != FL_SUCCESS)
        return st;
    event_release(e);
    return FL_SUCCESS;
}

/* Runs under the stream's queue lock, so generation order matches queue
 * order on that stream and a concurrent wait never sees a generation whose
 * RECORD task is not queued yet. */
static void fill_record(drv_task *slot, void *ctx) {
    fl_event e = ctx;
    pthread_mutex_lock(&e->lock);
    uint64_t generation = ++e->recorded;
    pthread_mutex_unlock(&e->lock);
    slot->kind = DRV_TASK_MARK;     /* record_done takes only the event's lock (queue -> event) */
    slot->u.host.fn = record_done;
    slot->u.host.obj = e;
    slot->u.host.value = generation;
}

fl_status drv_event_record(fl_event e, fl_stream s) {
    fl_status st = check_event(e, "event_record");
    if (st == FL_SUCCESS)
        st = drv_stream_check(s, "event_record");
    if (st != FL_SUCCESS)
        return st;
    if (drv_stream_device(s) != e->device)
        return fld_fail(FL_ERROR_INVALID_VALUE,
                        "event_record: event of device %d recorded on a stream of device %d",
                        e->device, drv_stream_device(s));
    atomic_fetch_add_explicit(&e->refs, 1, memory_order_relaxed);
    st = drv_queue_enqueue_with(drv_stream_queue(s), fill_record, e);
    if (st != FL_SUCCESS)
        event_release(e);
    return st;
}

/* Streams of any device of this plugin may wait on the event. */
fl_status drv_stream_wait_event(fl_stream s, fl_event e) {
    fl_status st = drv_stream_check(s, "stream_wait_event");
    if (st == FL_SUCCESS)
        st = check_event(e, "stream_wait_event");
    if (st != FL_SUCCESS)
        return st;
    pthread_mutex_lock(&e->lock);
    uint64_t target = e->recorded;
    int done = e->completed >= target;
    pthread_mutex_unlock(&e->lock);
    if (done) /* never recorded, or already complete: nothing to wait for */
        return FL_SUCCESS;
    atomic_fetch_add_explicit(&e->refs, 1, memory_order_relaxed);
    drv_task t = {.kind = DRV_TASK_HOST, .u.host = {.fn = wait_done, .obj = e, .value = target}};
    st = drv_queue_enqueue(drv_stream_queue(s), &t);
    if (st != FL_SUCCESS)
        event_release(e);
    return st;
}

fl_status drv_event_synchronize(fl_event e) {
    fl_status st = check_event(e, "event_synchronize");
    if (st != FL_SUCCESS)
        return st;
    pthread_mutex_lock(&e->lock);
    uint64_t target = e->recorded;
    while (e->completed < target)
        pthread_cond_wait(&e->cv, &e->lock);
    pthread_mutex_unlock(&e->lock);
    return FL_SUCCESS;
}

fl_status drv_event_query(fl_event e) {
    fl_status st = check_event(e, "event_query");
    if (st != FL_SUCCESS)
        return st;
    pthread_mutex_lock(&e->lock);
    st = e->completed >= e->recorded ? FL_SUCCESS : FL_NOT_READY;
    pthread_mutex_unlock(&e->lock);
    return st;
}

/* Snapshot one event's state for elapsed_ms. */
static void snapshot(fl_event e, uint64_t *recorded, int *done, uint64_t *stamp) {
    pthread_mutex_lock(&e->lock);
    *recorded = e->recorded;
    *done = e->completed >= e->recorded;
    *stamp = e->stamp_ns;
    pthread_mutex_unlock(&e->lock);
}

fl_status drv_event_elapsed_ms(fl_event start, fl_event end, float *ms) {
    fl_status st = check_event(start, "event_elapsed_ms (start)");
    if (st == FL_SUCCESS)
        st = check_event(end, "event_elapsed_ms (end)");
    if (st != FL_SUCCESS)
        return st;
    if (!ms)
        return fld_fail(FL_ERROR_INVALID_POINTER, "event_elapsed_ms: ms is NULL");
    uint64_t r0, r1, t0, t1;
    int d0, d1;
    snapshot(start, &r0, &d0, &t0);
    snapshot(end, &r1, &d1, &t1);
    if (!r0 || !r1)
        return fld_fail(FL_ERROR_INVALID_VALUE, "event_elapsed_ms: the %s event was never recorded",
                        !r0 ? "start" : "end");
    if (start->device != end->device)
        return fld_fail(FL_ERROR_INVALID_VALUE,
                        "event_elapsed_ms: events are on different devices (%d and %d)",
                        start->device, end->device);
    if (!d0 || !d1)
        return FL_NOT_READY;
    *ms = (float)(((double)t1 - (double)t0) / 1e6);
    return FL_SUCCESS;
}
