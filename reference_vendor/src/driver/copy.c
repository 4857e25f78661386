/*
 * copy.c -- copies and memset of the reference chip, enqueued on a stream:
 * each device range is checked against the live allocations (memory.c) and
 * turned into the worker's private address before the task is queued.
 * Calls stream.c, memory.c, device.c and queue.c (driver.h lists
 * the layers).
 */
#include "driver.h"

/* Resolve a device range for an async call, or fail with a message naming
 * `call` and which operand (`what`) is bad (fl_driver.h, fld_check_range). */
static fl_status resolve_range(drv_device *dev, fl_devptr base, uint64_t offset, uint64_t size,
                               const char *call, const char *what, char **host) {
    fl_status st = fld_check_range(&drv_memory, dev->index, base, offset, size, call, what);
    if (st == FL_SUCCESS)
        *host = drv_mem_host(dev, base) + offset;
    return st;
}

/* Common checks: a live stream, and that its device is usable. */
static fl_status stream_device(fl_stream stream, const char *call, drv_device **dev) {
    fl_status st = drv_stream_check(stream, call);
    if (st != FL_SUCCESS)
        return st;
    int32_t d = drv_stream_device(stream);
    *dev = drv_device_get(d);
    return *dev ? FL_SUCCESS : drv_bad_device(d, call);
}

static fl_status enqueue_copy(fl_stream stream, void *dst, const void *src, uint64_t size) {
    drv_task t = {.kind = DRV_TASK_COPY, .u.copy = {.dst = dst, .src = src, .size = size}};
    return drv_queue_enqueue(drv_stream_queue(stream), &t);
}

/* Zero-byte transfers succeed without touching anything: PyTorch passes
 * null data pointers for empty tensors. */
fl_status drv_memcpy_h2d_async(fl_stream stream, fl_devptr dst, uint64_t dst_offset,
                               const void *src, uint64_t size) {
    static const char call[] = "memcpy_h2d_async";
    drv_device *dev;
    char *host;
    fl_status st = stream_device(stream, call, &dev);
    if (st != FL_SUCCESS || size == 0)
        return st;
    if (!src)
        return fld_fail(FL_ERROR_INVALID_POINTER, "%s(size=%llu): src is NULL", call,
                        (unsigned long long)size);
    st = resolve_range(dev, dst, dst_offset, size, call, "dst", &host);
    return st != FL_SUCCESS ? st : enqueue_copy(stream, host, src, size);
}

fl_status drv_memcpy_d2h_async(fl_stream stream, void *dst, fl_devptr src, uint64_t src_offset,
                               uint64_t size) {
    static const char call[] = "memcpy_d2h_async";
    drv_device *dev;
    char *host;
    fl_status st = stream_device(stream, call, &dev);
    if (st != FL_SUCCESS || size == 0)
        return st;
    if (!dst)
        return fld_fail(FL_ERROR_INVALID_POINTER, "%s(size=%llu): dst is NULL", call,
                        (unsigned long long)size);
    st = resolve_range(dev, src, src_offset, size, call, "src", &host);
    return st != FL_SUCCESS ? st : enqueue_copy(stream, dst, host, size);
}

/* Either device may differ from the stream's: every device of this plugin
 * lives in this process, so the worker can reach both private views. */
fl_status drv_memcpy_d2d_async(fl_stream stream, int32_t dst_device, fl_devptr dst,
                               uint64_t dst_offset, int32_t src_device, fl_devptr src,
                               uint64_t src_offset, uint64_t size) {
    static const char call[] = "memcpy_d2d_async";
    drv_device *sdev, *ddev, *srcdev;
    char *dhost, *shost;
    fl_status st = stream_device(stream, call, &sdev);
    if (st != FL_SUCCESS)
        return st;
    if (!(ddev = drv_device_get(dst_device)))
        return drv_bad_device(dst_device, "memcpy_d2d_async (dst_device)");
    if (!(srcdev = drv_device_get(src_device)))
        return drv_bad_device(src_device, "memcpy_d2d_async (src_device)");
    if (size == 0)
        return FL_SUCCESS;
    st = resolve_range(ddev, dst, dst_offset, size, call, "dst", &dhost);
    if (st == FL_SUCCESS)
        st = resolve_range(srcdev, src, src_offset, size, call, "src", &shost);
    return st != FL_SUCCESS ? st : enqueue_copy(stream, dhost, shost, size);
}

fl_status drv_memset_async(fl_stream stream, fl_devptr dst, uint64_t dst_offset, uint8_t value,
                           uint64_t size) {
    static const char call[] = "memset_async";
    drv_device *dev;
    char *host;
    fl_status st = stream_device(stream, call, &dev);
    if (st != FL_SUCCESS || size == 0)
        return st;
    st = resolve_range(dev, dst, dst_offset, size, call, "dst", &host);
    if (st != FL_SUCCESS)
        return st;
    drv_task t = {.kind = DRV_TASK_MEMSET, .u.set = {.dst = host, .size = size, .value = value}};
    return drv_queue_enqueue(drv_stream_queue(stream), &t);
}
