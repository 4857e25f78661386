/*
 * driver.h -- the reference chip's "driver": everything the plugin does
 * besides computing (memory, streams, events, the kernel table, launches).
 *
 * LAYERS.  Each file calls only the files listed below it; nothing calls
 * upward, so there is no call circle:
 *
 *   plugin.c   entry point: info, calls, extensions  (top)
 *   ipc.c      the inter-process memory extension (ABI 1.3): another
 *              process's device memory mapped into this one's region
 *   host_memory.c  the pinned host-memory extension (ABI 1.2): page-aligned,
 *              locked where the host allows, tracked host blocks
 *   launch.c   launch_kernel: checks, the deep copy, the queued kernel
 *   collective.c  the collectives extension (ABI 1.1): communicators over
 *              POSIX shared memory, collectives as stream tasks
 *   copy.c     memcpy_*_async and memset_async
 *   event.c    events, event_record and stream_wait_event
 *   stream.c   streams: a device and a queue
 *   memory.c   the device-memory allocator and range checks
 *   device.c   devices: settings, properties, their memory mappings
 *   queue.c    task queues and the worker thread draining each one (bottom)
 *
 * What every driver does alike -- the fl_api table, the counted lifecycle
 * and the _ex forms, the per-thread last error, negotiation, struct_size
 * prefixes, handle tables, launch-argument checks with overflow-checked
 * extents, the deep copy of queued arguments -- is the SDK
 * driver library's (fl_driver.h, `sdk_libraries: [kernel, driver]`), shared
 * with every plugin `fl-sdk new` scaffolds; these files hold what this chip
 * decides.
 *
 * The queue knows nothing of events: an event's record and wait reach the
 * worker as host-function tasks (DRV_TASK_HOST) whose function event.c
 * supplies.  Kernels (../kernels/) are not part of the driver: they register
 * themselves (FLK_REGISTER), the driver library hands the runtime the table
 * the SDK libraries gather (fld_kernel_table), and the queue runs them through the
 * SDK's kernel interface (fl_kernel.h, section 1).
 *
 * Nothing here is part of the ABI; only fl_plugin_get_api (and the
 * benchmarks' fl_reference_kernel_time_ns) is exported.  Driver-internal
 * names use the drv_ prefix.
 */
#ifndef DRV_DRIVER_H
#define DRV_DRIVER_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* memfd_create, MAP_NORESERVE, fallocate */
#endif

#include <pthread.h>
#include <stdint.h>

#include "fl_driver.h"
#include "fl_host_memory.h"
#include "fl_ipc.h"

/* Everything declared below is private to the shared object. */
#pragma GCC visibility push(hidden)

#define DRV_MAX_DEVICES 16
#define DRV_MESSAGE_MAX FLD_MESSAGE_MAX

/* ---- queue.c: task queues and their worker threads ---------------------- */

typedef enum drv_task_kind {
    DRV_TASK_KERNEL,
    DRV_TASK_COPY,
    DRV_TASK_MEMSET,
    DRV_TASK_HOST,        /* a host function, e.g. an event's wait (it may block) */
    DRV_TASK_MARK,        /* a host function that marks progress (an event's record): the
                           * worker runs it under the queue lock and advances the queue in the
                           * same step, so whoever sees its effect sees the stream past it and
                           * the other way round; it must not block or take the queue lock */
    DRV_TASK_CALL         /* a host function that can fail (collectives): its status is sticky */
} drv_task_kind;

/* One queued unit of work; small and copied by value into a ring. */
typedef struct drv_task {
    drv_task_kind kind;
    union {
        struct { const flk_kernel *def; fl_arg *args; uint32_t nargs; } kernel;
        struct { void *dst; const void *src; uint64_t size; } copy;
        struct { void *dst; uint64_t size; uint8_t value; } set;
        struct { void (*fn)(void *obj, uint64_t value); void *obj; uint64_t value; } host;
        /* fn writes why it failed into message (cap bytes) and returns the status */
        struct { fl_status (*fn)(void *obj, char *message, size_t cap); void *obj; } call;
    } u;
} drv_task;

/* A FIFO ring of tasks drained by one worker thread (queue.c says how). */
typedef struct drv_queue {
    int32_t device;                  /* handed to kernels in their context */
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t work_cv;          /* the worker waits here for tasks */
    pthread_cond_t done_cv;          /* synchronize / full-queue waiters */
    drv_task *ring;
    uint64_t cap;                    /* power of two */
    uint64_t head, tail;             /* tasks [head, tail) are pending */
    int worker_sleeping;
    int done_waiters;
    int shutdown;
    fl_status error;                 /* sticky error, reported once */
    char error_message[DRV_MESSAGE_MAX];
} drv_queue;

/* Start the queue's worker; on failure the status comes with a message
 * naming `call`. */
fl_status drv_queue_start(drv_queue *q, int32_t device, const char *call);
/* Run what is queued, stop the worker and free the ring. */
void drv_queue_stop(drv_queue *q);
/* Append a task; blocks (without spinning) while the queue is full. */
fl_status drv_queue_enqueue(drv_queue *q, const drv_task *task);
/* A kernel task touching `bytes` of tensor data: run at once on the calling
 * thread when it is small and the queue is idle, else enqueued (queue.c). */
fl_status drv_queue_enqueue_kernel(drv_queue *q, const drv_task *task, uint64_t bytes);
/* Append a task built by `fill` while the queue lock is held, so that work
 * numbered by `fill` (event generations) enters the queue atomically. */
fl_status drv_queue_enqueue_with(drv_queue *q, void (*fill)(drv_task *slot, void *ctx),
                                 void *ctx);
/* Wait for everything queued so far; then hand out the sticky error once. */
fl_status drv_queue_synchronize(drv_queue *q);
/* The sticky error if there is one, else FL_NOT_READY while work is pending. */
fl_status drv_queue_query(drv_queue *q);

/* ---- device.c: devices -------------------------------------------------- */

typedef struct drv_block drv_block; /* allocator block, memory.c */

typedef struct drv_device {
    int32_t index;
    uint64_t total_memory;
    uint64_t alignment;          /* minimum alignment and size granularity */
    int memfd;
    uintptr_t dev_base;          /* PROT_NONE view: the fl_devptr addresses */
    char *priv_base;             /* read/write view used by the workers */
    pthread_mutex_t lock;        /* guards the allocator state below */
    int heap_ready;              /* memory.c set up the state below */
    drv_block *free_list;        /* free blocks, unordered */
    void *live_tree;             /* tsearch tree of live blocks, by address */
    uint64_t free_bytes;
} drv_device;

/* The device, or NULL when the index is out of range or init failed. */
drv_device *drv_device_get(int32_t device);
/* The error for a device index drv_device_get refused; `call` names the call. */
fl_status drv_bad_device(int32_t device, const char *call);
/* plugin_initialize's set-up (ABI 1.2): the devices' one-time initialisation,
 * its failure reported with a message.  Runtimes before 1.2 never call it: the
 * first device call initialises then, so the reference serves them too. */
fl_status drv_devices_setup(const fl_plugin_initialize_args *args);

static inline int drv_mem_in_region(const drv_device *dev, fl_devptr p) {
    return p >= dev->dev_base && p - dev->dev_base < dev->total_memory;
}

/* Device address -> the driver's private host address of the same byte. */
static inline char *drv_mem_host(const drv_device *dev, fl_devptr p) {
    return dev->priv_base + (p - dev->dev_base);
}

/* ---- memory.c: the allocator -------------------------------------------- */

/* The live allocations of every device, as the driver library's range and
 * argument checks ask for them (fl_driver.h, section 5). */
extern const fld_memory drv_memory;

/* ---- stream.c: streams -------------------------------------------------- */

/* INVALID_HANDLE (with message) unless `stream` is a live stream. */
fl_status drv_stream_check(fl_stream stream, const char *call);
int32_t drv_stream_device(fl_stream stream);
drv_queue *drv_stream_queue(fl_stream stream);

/* ---- the fl_api functions ----------------------------------------------- */

/* drv_device_count, drv_malloc, ... drv_launch_kernel: the calls plugin.c
 * hands the driver library (FLD_DRIVER_CALLS; fl_abi.h "fl_api" documents
 * each).  device.c: device_count, device_properties; memory.c: malloc, free,
 * memory_info; stream.c: stream_*; event.c: event_*, stream_wait_event;
 * copy.c: memcpy_*_async, memset_async; launch.c: launch_kernel. */
FLD_DECLARE_DRIVER_CALLS(drv);

extern const fl_collectives_extension drv_collectives_extension;              /* collective.c */
extern const fl_host_memory_extension drv_host_memory_extension;               /* host_memory.c */
/* The head of the extension chain: IPC, host memory, then the collectives. */
extern const fl_ipc_extension drv_ipc_extension;                               /* ipc.c */

#pragma GCC visibility pop

#endif /* DRV_DRIVER_H */
