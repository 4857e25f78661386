/*
 * internal.h -- shared declarations of the reference chip's "driver":
 * plugin.c (entry point, API table, errors, kernel table), device.c (devices),
 * memory.c (device memory, allocator, copies), stream.c (queues, workers,
 * launch_kernel) and event.c (events, stream_wait_event).
 *
 * Nothing here is part of the ABI; only fl_plugin_get_api is exported.
 * Driver-internal names use the drv_ prefix because the kernels' side
 * (kernel_api.h, kernel_util.h) owns ref_.
 */
#ifndef DRV_INTERNAL_H
#define DRV_INTERNAL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* memfd_create, MAP_NORESERVE */
#endif

#include <pthread.h>
#include <stdint.h>

#include "kernel_api.h"

/* Everything declared below is private to the shared object. */
#pragma GCC visibility push(hidden)

#define DRV_MAX_DEVICES 16
#define DRV_MESSAGE_MAX 1024

/* ---- errors (plugin.c) -------------------------------------------------- */

/* Set the calling thread's last error message and return `status`. */
fl_status drv_fail(fl_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
const char *drv_last_error_message(void);

/* ---- devices (device.c) ------------------------------------------------- */

typedef struct drv_block drv_block; /* allocator block, memory.c */

typedef struct drv_device {
    int32_t index;
    uint64_t total_memory;
    uint64_t alignment;          /* minimum alignment and size granularity */
    int memfd;
    uintptr_t dev_base;          /* PROT_NONE view: the fl_devptr addresses */
    char *priv_base;             /* read/write view used by the workers */
    pthread_mutex_t lock;        /* guards the allocator state below */
    drv_block *free_list;        /* free blocks, unordered */
    void *live_tree;             /* tsearch tree of live blocks, by address */
    uint64_t free_bytes;
} drv_device;

/* The device, or NULL when the index is out of range or init failed. */
drv_device *drv_device_get(int32_t device);
/* The error for a device index drv_device_get refused; `call` names the call. */
fl_status drv_bad_device(int32_t device, const char *call);

/* ---- memory (memory.c) -------------------------------------------------- */

/* Map the device's memory; on failure fill `msg` and return non-success. */
fl_status drv_mem_init_device(drv_device *dev, char *msg, size_t msg_len);

typedef enum drv_range_check {
    DRV_RANGE_OK = 0,
    DRV_RANGE_NO_ALLOCATION,     /* `base` is not inside a live allocation */
    DRV_RANGE_OUT_OF_BOUNDS      /* [offset, offset+size) overruns it */
} drv_range_check;

/* Check [base+offset, base+offset+size) against the live allocation holding
 * base.  The caller holds dev->lock.  *alloc_size gets the allocation's size
 * (0 when there is none) for error messages. */
drv_range_check drv_mem_check_locked(drv_device *dev, fl_devptr base, uint64_t offset,
                                     uint64_t size, uint64_t *alloc_size);

static inline int drv_mem_in_region(const drv_device *dev, fl_devptr p) {
    return p >= dev->dev_base && p - dev->dev_base < dev->total_memory;
}

/* Device address -> the driver's private host address of the same byte. */
static inline char *drv_mem_host(const drv_device *dev, fl_devptr p) {
    return dev->priv_base + (p - dev->dev_base);
}

/* ---- streams (stream.c) ------------------------------------------------- */

typedef enum drv_task_kind {
    DRV_TASK_KERNEL,
    DRV_TASK_COPY,
    DRV_TASK_MEMSET,
    DRV_TASK_RECORD,
    DRV_TASK_WAIT
} drv_task_kind;

/* One queued unit of stream work; small and copied by value into a ring. */
typedef struct drv_task {
    drv_task_kind kind;
    union {
        struct { const ref_kernel_def *def; fl_arg *args; uint32_t nargs; } kernel;
        struct { void *dst; const void *src; uint64_t size; } copy;
        struct { void *dst; uint64_t size; uint8_t value; } set;
        struct { fl_event event; uint64_t generation; } event;
    } u;
} drv_task;

/* INVALID_HANDLE (with message) unless `stream` is a live stream. */
fl_status drv_stream_check(fl_stream stream, const char *call);
int32_t drv_stream_device(fl_stream stream);
/* Append a task; blocks (without spinning) while the queue is full. */
fl_status drv_stream_enqueue(fl_stream stream, const drv_task *task);
/* Append a task built by `fill` while the queue lock is held, so that work
 * numbered by `fill` (event generations) enters the queue atomically. */
fl_status drv_stream_enqueue_with(fl_stream stream, void (*fill)(drv_task *slot, void *ctx),
                                  void *ctx);

/* ---- events (event.c), called by stream workers -------------------------- */

void drv_event_complete(fl_event event, uint64_t generation);
void drv_event_block_until(fl_event event, uint64_t generation);
void drv_event_release(fl_event event);

/* ---- kernel table (plugin.c) -------------------------------------------- */

/* The kernel definition behind one of our table's entries, or NULL. */
const ref_kernel_def *drv_kernel_resolve(const fl_kernel_entry *entry);

/* ---- the fl_api functions ----------------------------------------------- */

fl_status drv_device_count(int32_t *count);
fl_status drv_device_properties(int32_t device, fl_device_properties *props);

fl_status drv_malloc(int32_t device, uint64_t size, uint64_t alignment, fl_devptr *out);
fl_status drv_free(int32_t device, fl_devptr ptr);
fl_status drv_memory_info(int32_t device, uint64_t *free_bytes, uint64_t *total_bytes);
fl_status drv_memcpy_h2d_async(fl_stream stream, fl_devptr dst, uint64_t dst_offset,
                               const void *src, uint64_t size);
fl_status drv_memcpy_d2h_async(fl_stream stream, void *dst, fl_devptr src,
                               uint64_t src_offset, uint64_t size);
fl_status drv_memcpy_d2d_async(fl_stream stream, int32_t dst_device, fl_devptr dst,
                               uint64_t dst_offset, int32_t src_device, fl_devptr src,
                               uint64_t src_offset, uint64_t size);
fl_status drv_memset_async(fl_stream stream, fl_devptr dst, uint64_t dst_offset,
                           uint8_t value, uint64_t size);

fl_status drv_stream_create(int32_t device, fl_stream *out);
fl_status drv_stream_destroy(fl_stream stream);
fl_status drv_stream_synchronize(fl_stream stream);
fl_status drv_stream_query(fl_stream stream);
fl_status drv_stream_wait_event(fl_stream stream, fl_event event);

fl_status drv_event_create(int32_t device, fl_event *out);
fl_status drv_event_destroy(fl_event event);
fl_status drv_event_record(fl_event event, fl_stream stream);
fl_status drv_event_synchronize(fl_event event);
fl_status drv_event_query(fl_event event);
fl_status drv_event_elapsed_ms(fl_event start, fl_event end, float *ms);

fl_status drv_kernel_table(const fl_kernel_entry **entries, uint32_t *count);
fl_status drv_launch_kernel(fl_stream stream, const fl_kernel_entry *kernel,
                            const fl_arg *args, uint32_t nargs);

#pragma GCC visibility pop

#endif /* DRV_INTERNAL_H */
