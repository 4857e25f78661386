/*
 * memory.c -- device memory over OpenCL buffers, copies and memset.
 * Calls stream.c, device.c and clapi.c.
 *
 * Each fl_malloc is one cl_mem (CL_MEM_READ_WRITE) in a slot of the buffer
 * table; the fl_devptr is the slot's handle (internal.h, "device addresses")
 * and every (base, offset) the runtime passes back is resolved here to the
 * buffer and a byte offset inside it, checked against its size.  The runtime's
 * caching allocator sits above, so a training step makes no driver allocation
 * in steady state and one buffer per block costs nothing.
 *
 * Copies and memset are enqueued on the stream's in-order queue without
 * blocking (the ABI keeps host buffers valid until the stream reaches the
 * copy).  A copy between two buffers of one context is clEnqueueCopyBuffer; an
 * overlapping one inside one buffer goes through a scratch buffer (OpenCL
 * refuses overlap, the ABI allows it); between contexts (two platforms) it is
 * staged through the host, synchronously.
 *
 * Accounting: the bytes of live buffers per device against total_memory, so
 * running out is FL_ERROR_OUT_OF_MEMORY before the driver is asked; a driver
 * that still refuses (its own out-of-memory codes) gives the same status.
 * One buffer larger than CL_DEVICE_MAX_MEM_ALLOC_SIZE is FL_ERROR_INVALID_SIZE.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#define SLOT_MASK ((1ull << PLG_SLOT_SHIFT) - 1)

typedef struct plg_buffer {
    cl_mem mem;                /* NULL: a free slot */
    uint64_t size;
    int32_t device;
} plg_buffer;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static plg_buffer *g_slots;
static uint32_t g_nslots, g_capacity, g_cursor;
static uint64_t g_used[PLG_MAX_DEVICES];

/* A free slot index (growing the table), or -1.  Caller holds g_lock.  The
 * search starts after the last slot handed out, so a freed handle is not
 * reused at once (a stale fl_devptr is then refused, not aliased). */
static int64_t take_slot(void) {
    for (uint32_t i = 0; i < g_nslots; i++) {
        uint32_t slot = (g_cursor + i) % g_nslots;
        if (!g_slots[slot].mem) {
            g_cursor = slot + 1;
            return slot;
        }
    }
    if (g_nslots == g_capacity) {
        uint32_t capacity = g_capacity ? 2 * g_capacity : 256;
        if (capacity > PLG_MAX_SLOTS)
            capacity = PLG_MAX_SLOTS;
        if (capacity == g_capacity)
            return -1;
        plg_buffer *slots = realloc(g_slots, capacity * sizeof *slots);
        if (!slots)
            return -1;
        g_slots = slots;
        g_capacity = capacity;
    }
    g_slots[g_nslots].mem = NULL;
    g_cursor = g_nslots + 1;
    return g_nslots++;
}

static fl_devptr handle_of(int64_t slot) { return (fl_devptr)(slot + 1) << PLG_SLOT_SHIFT; }

/* The live buffer of `device` holding `address` (fl_driver.h, section 5): the
 * driver library checks launch arguments against it. */
static int find_buffer(void *ctx, int32_t device, fl_devptr address, fld_block *block) {
    (void)ctx;
    uint64_t slot = (address >> PLG_SLOT_SHIFT) - 1;
    int found = 0;
    pthread_mutex_lock(&g_lock);
    if (address >> PLG_SLOT_SHIFT && slot < g_nslots && g_slots[slot].mem && g_slots[slot].device == device &&
        (address & SLOT_MASK) < g_slots[slot].size) {
        *block = (fld_block){handle_of((int64_t)slot), g_slots[slot].size};
        found = 1;
    }
    pthread_mutex_unlock(&g_lock);
    return found;
}

const fld_memory plg_memory = {find_buffer, NULL};

fl_status plg_malloc(int32_t device, uint64_t size, uint64_t alignment, fl_devptr *out) {
    if (!out)
        return fld_fail(FL_ERROR_INVALID_POINTER, "fl_malloc: out is NULL");
    FLK_TRY(plg_devices_init(NULL));
    if (!plg_device_valid(device))
        return plg_bad_device(device, "fl_malloc");
    if (alignment & (alignment - 1) || alignment > (1ull << PLG_SLOT_SHIFT))
        return fld_fail(FL_ERROR_INVALID_VALUE, "fl_malloc: alignment %llu is not a power of two up to 2^%d",
                        (unsigned long long)alignment, PLG_SLOT_SHIFT);
    const plg_device *dev = plg_device_get(device);
    if (size == 0 || size > dev->total_memory)
        return fld_fail(FL_ERROR_INVALID_SIZE, "fl_malloc: size %llu is 0 or more than %s's %llu bytes",
                        (unsigned long long)size, plg_device_label(device), (unsigned long long)dev->total_memory);
    if (size > dev->max_alloc)
        return fld_fail(FL_ERROR_INVALID_SIZE, "fl_malloc: %llu bytes is more than %s allows in one buffer "
                        "(CL_DEVICE_MAX_MEM_ALLOC_SIZE %llu)", (unsigned long long)size, plg_device_label(device),
                        (unsigned long long)dev->max_alloc);
    pthread_mutex_lock(&g_lock);
    fl_status status = FL_SUCCESS;
    int64_t slot = -1;
    if (g_used[device] + size > dev->total_memory)
        status = fld_fail(FL_ERROR_OUT_OF_MEMORY, "fl_malloc: %llu bytes do not fit in the %llu free bytes of %s",
                          (unsigned long long)size, (unsigned long long)(dev->total_memory - g_used[device]),
                          plg_device_label(device));
    else if ((slot = take_slot()) < 0)
        status = fld_fail(FL_ERROR_OUT_OF_MEMORY, "fl_malloc: the buffer table is full (%u buffers)", g_nslots);
    if (status == FL_SUCCESS) {
        cl_int err = CL_SUCCESS;
        cl_mem mem = plg_cl()->CreateBuffer(dev->context, CL_MEM_READ_WRITE, size, NULL, &err);
        if (!mem) {
            status = fld_fail(plg_cl_status(err), "fl_malloc: %s refused a %llu-byte buffer: clCreateBuffer failed "
                              "with %s", plg_device_label(device), (unsigned long long)size,
                              plg_cl_error_name(err));
        } else {
            g_slots[slot] = (plg_buffer){mem, size, device};
            g_used[device] += size;
            *out = handle_of(slot);
        }
    }
    pthread_mutex_unlock(&g_lock);
    return status;
}

fl_status plg_free(int32_t device, fl_devptr ptr) {
    if (!plg_device_valid(device))
        return plg_bad_device(device, "fl_free");
    uint64_t slot = (ptr >> PLG_SLOT_SHIFT) - 1;
    cl_mem mem = NULL;
    pthread_mutex_lock(&g_lock);
    if (ptr != 0 && (ptr & SLOT_MASK) == 0 && slot < g_nslots && g_slots[slot].mem &&
        g_slots[slot].device == device) {
        mem = g_slots[slot].mem;
        g_used[device] -= g_slots[slot].size;
        g_slots[slot].mem = NULL;
    }
    pthread_mutex_unlock(&g_lock);
    if (!mem)
        return fld_fail(FL_ERROR_INVALID_POINTER,
                        "fl_free(device=%d, 0x%llx): not the start of a live allocation of this device", device,
                        (unsigned long long)ptr);
    /* OpenCL keeps the buffer until the commands already enqueued on it finish */
    plg_cl()->ReleaseMemObject(mem);
    return FL_SUCCESS;
}

fl_status plg_memory_info(int32_t device, uint64_t *free_bytes, uint64_t *total_bytes) {
    if (!free_bytes || !total_bytes)
        return fld_fail(FL_ERROR_INVALID_POINTER, "memory_info: NULL output pointer");
    FLK_TRY(plg_devices_init(NULL));
    if (!plg_device_valid(device))
        return plg_bad_device(device, "memory_info");
    pthread_mutex_lock(&g_lock);
    *total_bytes = plg_device_get(device)->total_memory;
    *free_bytes = *total_bytes - g_used[device];
    pthread_mutex_unlock(&g_lock);
    return FL_SUCCESS;
}

fl_status plg_mem_resolve(int32_t device, fl_devptr base, uint64_t offset, uint64_t size, const char *call,
                          cl_mem *mem, uint64_t *byte_offset) {
    if (!plg_device_valid(device))
        return plg_bad_device(device, call);
    uint64_t slot = (base >> PLG_SLOT_SHIFT) - 1, inner = base & SLOT_MASK;
    pthread_mutex_lock(&g_lock);
    plg_buffer buffer = {NULL, 0, -1};
    if (base != 0 && slot < g_nslots)
        buffer = g_slots[slot];
    pthread_mutex_unlock(&g_lock);
    int live = buffer.mem && buffer.device == device && inner < buffer.size;
    fld_block block = {base - inner, buffer.size};
    FLK_TRY(fld_check_in_block(live ? &block : NULL, device, base, offset, size, call, "address"));
    *mem = buffer.mem;
    *byte_offset = inner + offset;
    return FL_SUCCESS;
}

/* ---- copies ------------------------------------------------------------------------ */

/* The status of an enqueue; a successful one is new work on the stream. */
static fl_status enqueued(fl_stream stream, const char *call, cl_int err) {
    if (err != CL_SUCCESS)
        return plg_stream_enqueue_failed(stream, call, err);
    plg_stream_touch(stream);
    return FL_SUCCESS;
}

/* Checks shared by the host<->device copies; (*mem, *at) is the device side. */
static fl_status check_host_copy(fl_stream stream, const void *host, fl_devptr ptr, uint64_t offset, uint64_t size,
                                 const char *call, cl_mem *mem, uint64_t *at) {
    fl_status status = plg_stream_check(stream, call);
    if (status == FL_SUCCESS && !host && size)
        status = fld_fail(FL_ERROR_INVALID_POINTER, "%s: the host buffer is NULL", call);
    if (status == FL_SUCCESS)
        status = plg_mem_resolve(stream->device, ptr, offset, size, call, mem, at);
    return status;
}

fl_status plg_memcpy_h2d_async(fl_stream stream, fl_devptr dst, uint64_t dst_offset, const void *src,
                               uint64_t size) {
    cl_mem mem;
    uint64_t at;
    FLK_TRY(check_host_copy(stream, src, dst, dst_offset, size, "memcpy_h2d_async", &mem, &at));
    if (size == 0)
        return FL_SUCCESS;
    cl_int err = plg_cl()->EnqueueWriteBuffer(stream->queue, mem, CL_FALSE, at, size, src, 0, NULL, NULL);
    return enqueued(stream, "memcpy_h2d_async", err);
}

fl_status plg_memcpy_d2h_async(fl_stream stream, void *dst, fl_devptr src, uint64_t src_offset, uint64_t size) {
    cl_mem mem;
    uint64_t at;
    FLK_TRY(check_host_copy(stream, dst, src, src_offset, size, "memcpy_d2h_async", &mem, &at));
    if (size == 0)
        return FL_SUCCESS;
    cl_int err = plg_cl()->EnqueueReadBuffer(stream->queue, mem, CL_FALSE, at, size, dst, 0, NULL, NULL);
    return enqueued(stream, "memcpy_d2h_async", err);
}

/* An overlapping copy inside one buffer, through a scratch buffer. */
static cl_int copy_overlapping(fl_stream stream, cl_context context, cl_mem mem, uint64_t to, uint64_t from,
                               uint64_t size) {
    cl_int err = CL_SUCCESS;
    cl_mem scratch = plg_cl()->CreateBuffer(context, CL_MEM_READ_WRITE, size, NULL, &err);
    if (!scratch)
        return err;
    err = plg_cl()->EnqueueCopyBuffer(stream->queue, mem, scratch, from, 0, size, 0, NULL, NULL);
    if (err == CL_SUCCESS)
        err = plg_cl()->EnqueueCopyBuffer(stream->queue, scratch, mem, 0, to, size, 0, NULL, NULL);
    plg_cl()->ReleaseMemObject(scratch);   /* freed once both copies ran */
    return err;
}

/* Between two contexts: finish what the stream has queued, read the source
 * into host memory and write it to the destination, each on the queue of its
 * own context (the stream's where it is that context's). */
static cl_int copy_through_host(fl_stream stream, int32_t dst_device, cl_mem dst, uint64_t to, int32_t src_device,
                                cl_mem src, uint64_t from, uint64_t size) {
    const plg_cl_api *cl = plg_cl();
    void *host = malloc(size);
    if (!host)
        return CL_OUT_OF_HOST_MEMORY;
    cl_context stream_context = plg_device_get(stream->device)->context;
    cl_command_queue read_queue = plg_device_get(src_device)->context == stream_context
                                      ? stream->queue : plg_device_get(src_device)->service;
    cl_command_queue write_queue = plg_device_get(dst_device)->context == stream_context
                                       ? stream->queue : plg_device_get(dst_device)->service;
    cl_int err = cl->Finish(stream->queue);
    if (err == CL_SUCCESS)
        err = cl->EnqueueReadBuffer(read_queue, src, CL_TRUE, from, size, host, 0, NULL, NULL);
    if (err == CL_SUCCESS)
        err = cl->EnqueueWriteBuffer(write_queue, dst, CL_TRUE, to, size, host, 0, NULL, NULL);
    free(host);
    return err;
}

fl_status plg_memcpy_d2d_async(fl_stream stream, int32_t dst_device, fl_devptr dst, uint64_t dst_offset,
                               int32_t src_device, fl_devptr src, uint64_t src_offset, uint64_t size) {
    cl_mem to, from;
    uint64_t to_at, from_at;
    FLK_TRY(plg_stream_check(stream, "memcpy_d2d_async"));
    FLK_TRY(plg_mem_resolve(dst_device, dst, dst_offset, size, "memcpy_d2d_async (dst)", &to, &to_at));
    FLK_TRY(plg_mem_resolve(src_device, src, src_offset, size, "memcpy_d2d_async (src)", &from, &from_at));
    if (size == 0 || (to == from && to_at == from_at))
        return FL_SUCCESS;
    const plg_device *a = plg_device_get(dst_device), *b = plg_device_get(src_device);
    cl_int err;
    if (a->context != b->context)
        err = copy_through_host(stream, dst_device, to, to_at, src_device, from, from_at, size);
    else if (to == from && to_at < from_at + size && from_at < to_at + size)
        err = copy_overlapping(stream, a->context, to, to_at, from_at, size);
    else
        err = plg_cl()->EnqueueCopyBuffer(stream->queue, from, to, from_at, to_at, size, 0, NULL, NULL);
    return enqueued(stream, "memcpy_d2d_async", err);
}

fl_status plg_memset_async(fl_stream stream, fl_devptr dst, uint64_t dst_offset, uint8_t value, uint64_t size) {
    cl_mem mem;
    uint64_t at;
    FLK_TRY(plg_stream_check(stream, "memset_async"));
    FLK_TRY(plg_mem_resolve(stream->device, dst, dst_offset, size, "memset_async", &mem, &at));
    if (size == 0)
        return FL_SUCCESS;
    cl_int err = plg_cl()->EnqueueFillBuffer(stream->queue, mem, &value, 1, at, size, 0, NULL, NULL);
    return enqueued(stream, "memset_async", err);
}
