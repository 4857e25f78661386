/*
 * memory.c -- device memory of the reference chip.
 *
 * Each device's memory is one sparse memfd mapped twice: a PROT_NONE view
 * whose addresses are handed out as fl_devptr (so a host dereference of a
 * device address faults, as it would on a real chip) and a read/write view
 * that only the stream workers use.  The two views are aligned alike, so a
 * device address and its private twin have the same alignment.
 *
 * The allocator is a best-fit free list with coalescing.  Blocks tile the
 * whole region in address order; live blocks also sit in a tsearch tree so
 * that "which allocation holds this address" (asked for every tensor of
 * every launch) is O(log n).
 */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <search.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define REGION_MIN_ALIGN (2u << 20)  /* align the views to 2 MiB (huge-page friendly) */
#define PUNCH_MIN_BYTES (64u << 10)  /* give freed runs this large back to the host */

struct drv_block {
    uint64_t start;                  /* offset into the device region */
    uint64_t size;
    drv_block *prev, *next;          /* neighbours in address order (all blocks) */
    drv_block *free_prev, *free_next;/* links in dev->free_list, when free */
    int live;
};

/* ---- mapping ---------------------------------------------------------------- */

/* Map `len` bytes of `fd` at an address aligned to `align`: reserve extra
 * address space, place the mapping inside it and trim the rest. */
static char *map_aligned(int fd, size_t len, int prot, size_t align) {
    size_t span = len + align;
    char *res = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (res == MAP_FAILED)
        return NULL;
    uintptr_t at = ((uintptr_t)res + align - 1) & ~(uintptr_t)(align - 1);
    char *m = mmap((void *)at, len, prot, MAP_SHARED | MAP_FIXED | MAP_NORESERVE, fd, 0);
    if (m == MAP_FAILED) {
        munmap(res, span);
        return NULL;
    }
    if (at > (uintptr_t)res)
        munmap(res, at - (uintptr_t)res);
    size_t tail = (size_t)((uintptr_t)res + span - (at + len));
    if (tail)
        munmap((char *)(at + len), tail);
    return m;
}

fl_status drv_mem_init_device(drv_device *dev, char *msg, size_t msg_len) {
    char name[32];
    snprintf(name, sizeof name, "fl-reference-dev%d", dev->index);
    size_t align = dev->alignment > REGION_MIN_ALIGN ? dev->alignment : REGION_MIN_ALIGN;
    dev->memfd = memfd_create(name, MFD_CLOEXEC);
    if (dev->memfd < 0 || ftruncate(dev->memfd, (off_t)dev->total_memory) != 0) {
        snprintf(msg, msg_len, "device %d: memfd of %llu bytes: %s", dev->index,
                 (unsigned long long)dev->total_memory, strerror(errno));
        return FL_ERROR_DRIVER;
    }
    char *dev_view = map_aligned(dev->memfd, dev->total_memory, PROT_NONE, align);
    char *priv_view = map_aligned(dev->memfd, dev->total_memory, PROT_READ | PROT_WRITE, align);
    drv_block *all = calloc(1, sizeof *all);
    if (!dev_view || !priv_view || !all) {
        snprintf(msg, msg_len, "device %d: mapping %llu bytes of device memory failed: %s",
                 dev->index, (unsigned long long)dev->total_memory, strerror(errno));
        return FL_ERROR_DRIVER;
    }
    dev->dev_base = (uintptr_t)dev_view;
    dev->priv_base = priv_view;
    all->size = dev->total_memory;
    dev->free_list = all;
    dev->live_tree = NULL;
    dev->free_bytes = dev->total_memory;
    pthread_mutex_init(&dev->lock, NULL);
    return FL_SUCCESS;
}

/* ---- block bookkeeping (caller holds dev->lock) ------------------------------ */

/* Orders blocks by address.  A probe (size 0) compares equal to the block
 * containing its start, which makes tfind a containment lookup. */
static int block_cmp(const void *a, const void *b) {
    const drv_block *x = a, *y = b;
    if (x->start < y->start)
        return -1;
    return x->start >= y->start + y->size ? 1 : 0;
}

static void free_list_push(drv_device *dev, drv_block *b) {
    b->live = 0;
    b->free_prev = NULL;
    b->free_next = dev->free_list;
    if (dev->free_list)
        dev->free_list->free_prev = b;
    dev->free_list = b;
}

static void free_list_remove(drv_device *dev, drv_block *b) {
    if (b->free_prev)
        b->free_prev->free_next = b->free_next;
    else
        dev->free_list = b->free_next;
    if (b->free_next)
        b->free_next->free_prev = b->free_prev;
    b->free_prev = b->free_next = NULL;
}

/* Cut the first `len` bytes of free block `b` off into a new free block;
 * `b` keeps the rest.  Returns NULL when the host is out of memory. */
static drv_block *split_front(drv_device *dev, drv_block *b, uint64_t len) {
    drv_block *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->start = b->start;
    f->size = len;
    f->prev = b->prev;
    f->next = b;
    if (b->prev)
        b->prev->next = f;
    b->prev = f;
    b->start += len;
    b->size -= len;
    free_list_push(dev, f);
    return f;
}

/* Merge free `b` into its free predecessor `a` (a->next == b). */
static void merge_into_prev(drv_device *dev, drv_block *a, drv_block *b) {
    free_list_remove(dev, b);
    a->size += b->size;
    a->next = b->next;
    if (b->next)
        b->next->prev = a;
    free(b);
}

static drv_block *find_live(drv_device *dev, uint64_t offset) {
    drv_block probe = {.start = offset, .size = 0};
    void *node = tfind(&probe, &dev->live_tree, block_cmp);
    return node ? *(drv_block **)node : NULL;
}

/* Bytes of padding needed so that the block's device address is aligned. */
static int padding_for(const drv_device *dev, const drv_block *b, uint64_t align,
                       uint64_t *pad) {
    uint64_t addr = dev->dev_base + b->start, aligned;
    if (__builtin_add_overflow(addr, align - 1, &aligned))
        return 0;
    *pad = (aligned & ~(align - 1)) - addr;
    return 1;
}

/* Best fit: the smallest free block that holds `size` after alignment. */
static drv_block *best_fit(drv_device *dev, uint64_t size, uint64_t align, uint64_t *pad_out) {
    drv_block *best = NULL;
    for (drv_block *b = dev->free_list; b; b = b->free_next) {
        uint64_t pad;
        if (b->size < size || !padding_for(dev, b, align, &pad) || pad > b->size - size)
            continue;
        if (!best || b->size < best->size || (b->size == best->size && b->start < best->start)) {
            best = b;
            *pad_out = pad;
            if (b->size == size && pad == 0)
                break;
        }
    }
    return best;
}

/* Turn free block `b` into a live block of exactly `size` bytes at `pad`. */
static drv_block *carve(drv_device *dev, drv_block *b, uint64_t pad, uint64_t size) {
    if (pad && !split_front(dev, b, pad))
        return NULL;
    if (b->size > size) {
        drv_block *front = split_front(dev, b, size);
        if (!front)
            return NULL;
        /* split_front leaves the tail in b; take the front block instead. */
        b = front;
    }
    free_list_remove(dev, b);
    if (!tsearch(b, &dev->live_tree, block_cmp)) {
        free_list_push(dev, b);
        return NULL;
    }
    b->live = 1;
    dev->free_bytes -= b->size;
    return b;
}

/* Return the host pages of a large freed run to the system: fresh
 * allocations have undefined contents anyway, and this keeps a big "device"
 * from pinning host RAM it no longer uses. */
static void punch_hole(drv_device *dev, const drv_block *b) {
    long page = sysconf(_SC_PAGESIZE);
    uint64_t pg = page > 0 ? (uint64_t)page : 4096;
    uint64_t lo = (b->start + pg - 1) & ~(pg - 1);
    uint64_t hi = (b->start + b->size) & ~(pg - 1);
    if (hi > lo && hi - lo >= PUNCH_MIN_BYTES)
        fallocate(dev->memfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)lo,
                  (off_t)(hi - lo));
}

static void release_block(drv_device *dev, drv_block *b) {
    tdelete(b, &dev->live_tree, block_cmp);
    dev->free_bytes += b->size;
    punch_hole(dev, b);
    free_list_push(dev, b);
    if (b->next && !b->next->live)
        merge_into_prev(dev, b, b->next);
    if (b->prev && !b->prev->live)
        merge_into_prev(dev, b->prev, b);
}

drv_range_check drv_mem_check_locked(drv_device *dev, fl_devptr base, uint64_t offset,
                                     uint64_t size, uint64_t *alloc_size) {
    *alloc_size = 0;
    if (!drv_mem_in_region(dev, base))
        return DRV_RANGE_NO_ALLOCATION;
    drv_block *b = find_live(dev, base - dev->dev_base);
    if (!b)
        return DRV_RANGE_NO_ALLOCATION;
    *alloc_size = b->size;
    uint64_t room = b->size - (base - dev->dev_base - b->start);
    if (offset > room || size > room - offset)
        return DRV_RANGE_OUT_OF_BOUNDS;
    return DRV_RANGE_OK;
}

/* ---- fl_malloc / fl_free / memory_info ------------------------------------ */

static fl_status check_alloc_args(int32_t device, uint64_t size, uint64_t alignment,
                                  fl_devptr *out, drv_device **dev) {
    if (!out)
        return drv_fail(FL_ERROR_INVALID_POINTER,
                        "fl_malloc(device=%d, size=%llu): NULL output pointer", device,
                        (unsigned long long)size);
    *out = 0;
    if (!(*dev = drv_device_get(device)))
        return drv_bad_device(device, "fl_malloc");
    if (alignment & (alignment - 1))
        return drv_fail(FL_ERROR_INVALID_VALUE,
                        "fl_malloc(device=%d, size=%llu, alignment=%llu): alignment must be "
                        "0 or a power of two",
                        device, (unsigned long long)size, (unsigned long long)alignment);
    if (size == 0)
        return drv_fail(FL_ERROR_INVALID_SIZE, "fl_malloc(device=%d, size=0): size must be > 0",
                        device);
    if (size > (*dev)->total_memory)
        return drv_fail(FL_ERROR_INVALID_SIZE,
                        "fl_malloc(device=%d, size=%llu): larger than the device's %llu bytes",
                        device, (unsigned long long)size,
                        (unsigned long long)(*dev)->total_memory);
    return FL_SUCCESS;
}

fl_status drv_malloc(int32_t device, uint64_t size, uint64_t alignment, fl_devptr *out) {
    drv_device *dev = NULL;
    fl_status st = check_alloc_args(device, size, alignment, out, &dev);
    if (st != FL_SUCCESS)
        return st;
    uint64_t align = alignment > dev->alignment ? alignment : dev->alignment;
    /* Round to the device granularity so that every block boundary stays
     * device-aligned; size <= total_memory, so this cannot overflow. */
    uint64_t rounded = (size + dev->alignment - 1) & ~(dev->alignment - 1);
    pthread_mutex_lock(&dev->lock);
    uint64_t pad = 0;
    drv_block *b = best_fit(dev, rounded, align, &pad);
    drv_block *got = b ? carve(dev, b, pad, rounded) : NULL;
    uint64_t free_now = dev->free_bytes;
    pthread_mutex_unlock(&dev->lock);
    if (!got)
        return drv_fail(FL_ERROR_OUT_OF_MEMORY,
                        "fl_malloc(device=%d, size=%llu, alignment=%llu): out of device memory "
                        "(%llu of %llu bytes free, no aligned run large enough)",
                        device, (unsigned long long)size, (unsigned long long)align,
                        (unsigned long long)free_now, (unsigned long long)dev->total_memory);
    *out = dev->dev_base + got->start;
    return FL_SUCCESS;
}

fl_status drv_free(int32_t device, fl_devptr ptr) {
    drv_device *dev = drv_device_get(device);
    if (!dev)
        return drv_bad_device(device, "fl_free");
    pthread_mutex_lock(&dev->lock);
    drv_block *b = drv_mem_in_region(dev, ptr) ? find_live(dev, ptr - dev->dev_base) : NULL;
    int ok = b && dev->dev_base + b->start == ptr;
    if (ok)
        release_block(dev, b);
    pthread_mutex_unlock(&dev->lock);
    if (!ok)
        return drv_fail(FL_ERROR_INVALID_POINTER,
                        "fl_free(device=%d, ptr=0x%llx): not the start of a live allocation on "
                        "this device (foreign pointer, interior pointer or double free)",
                        device, (unsigned long long)ptr);
    return FL_SUCCESS;
}

fl_status drv_memory_info(int32_t device, uint64_t *free_bytes, uint64_t *total_bytes) {
    if (!free_bytes || !total_bytes)
        return drv_fail(FL_ERROR_INVALID_POINTER,
                        "memory_info(device=%d, free=%p, total=%p): NULL output pointer", device,
                        (void *)free_bytes, (void *)total_bytes);
    drv_device *dev = drv_device_get(device);
    if (!dev)
        return drv_bad_device(device, "memory_info");
    pthread_mutex_lock(&dev->lock);
    *free_bytes = dev->free_bytes;
    pthread_mutex_unlock(&dev->lock);
    *total_bytes = dev->total_memory;
    return FL_SUCCESS;
}

/* ---- copies and memset ------------------------------------------------------ */

/* Resolve a device range for an async call, or fail with a message naming
 * `call` and which operand (`what`) is bad. */
static fl_status resolve_range(drv_device *dev, fl_devptr base, uint64_t offset, uint64_t size,
                               const char *call, const char *what, char **host) {
    uint64_t alloc_size;
    pthread_mutex_lock(&dev->lock);
    drv_range_check rc = drv_mem_check_locked(dev, base, offset, size, &alloc_size);
    pthread_mutex_unlock(&dev->lock);
    if (rc == DRV_RANGE_NO_ALLOCATION)
        return drv_fail(FL_ERROR_INVALID_POINTER,
                        "%s: %s=0x%llx is not inside a live allocation on device %d", call, what,
                        (unsigned long long)base, dev->index);
    if (rc == DRV_RANGE_OUT_OF_BOUNDS)
        return drv_fail(FL_ERROR_INVALID_VALUE,
                        "%s: %s=0x%llx + offset %llu + size %llu overruns its allocation of "
                        "%llu bytes on device %d",
                        call, what, (unsigned long long)base, (unsigned long long)offset,
                        (unsigned long long)size, (unsigned long long)alloc_size, dev->index);
    *host = drv_mem_host(dev, base) + offset;
    return FL_SUCCESS;
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
    return drv_stream_enqueue(stream, &t);
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
        return drv_fail(FL_ERROR_INVALID_POINTER, "%s(size=%llu): src is NULL", call,
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
        return drv_fail(FL_ERROR_INVALID_POINTER, "%s(size=%llu): dst is NULL", call,
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
    return drv_stream_enqueue(stream, &t);
}
