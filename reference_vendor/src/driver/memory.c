/*
 * memory.c -- the allocator of the reference chip's device memory (the
 * region device.c maps), and range checks against live allocations.  Calls
 * device.c (driver.h lists the layers).
 *
 * The allocator is a best-fit free list with coalescing.  Blocks tile the
 * whole region in address order; live blocks also sit in a tsearch tree so
 * that "which allocation holds this address" (asked for every tensor of
 * every launch) is O(log n).  A device's allocator state is set up by its
 * first allocation.
 */
#include "driver.h"

#include <errno.h>
#include <fcntl.h>
#include <search.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define PUNCH_MIN_BYTES (64u << 10)  /* give freed runs this large back to the host */

struct drv_block {
    uint64_t start;                  /* offset into the device region */
    uint64_t size;
    drv_block *prev, *next;          /* neighbours in address order (all blocks) */
    drv_block *free_prev, *free_next;/* links in dev->free_list, when free */
    int live;
};

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

/* The whole region as one free block, on the device's first allocation. */
static int heap_ready_locked(drv_device *dev) {
    if (dev->heap_ready)
        return 1;
    drv_block *all = calloc(1, sizeof *all);
    if (!all)
        return 0;
    all->size = dev->total_memory;
    dev->free_list = all;
    dev->live_tree = NULL;
    dev->free_bytes = dev->total_memory;
    dev->heap_ready = 1;
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

static int find_allocation(void *ctx, int32_t device, fl_devptr address, fld_block *block) {
    (void)ctx;
    drv_device *dev = drv_device_get(device);
    if (!dev || !drv_mem_in_region(dev, address))
        return 0;
    pthread_mutex_lock(&dev->lock);
    drv_block *b = dev->heap_ready ? find_live(dev, address - dev->dev_base) : NULL;
    if (b)
        *block = (fld_block){dev->dev_base + b->start, b->size};
    pthread_mutex_unlock(&dev->lock);
    return b != NULL;
}

const fld_memory drv_memory = {find_allocation, NULL};

/* ---- fl_malloc / fl_free / memory_info ------------------------------------ */

static fl_status check_alloc_args(int32_t device, uint64_t size, uint64_t alignment,
                                  fl_devptr *out, drv_device **dev) {
    if (!out)
        return fld_fail(FL_ERROR_INVALID_POINTER,
                        "fl_malloc(device=%d, size=%llu): NULL output pointer", device,
                        (unsigned long long)size);
    *out = 0;
    if (!(*dev = drv_device_get(device)))
        return drv_bad_device(device, "fl_malloc");
    if (alignment & (alignment - 1))
        return fld_fail(FL_ERROR_INVALID_VALUE,
                        "fl_malloc(device=%d, size=%llu, alignment=%llu): alignment must be "
                        "0 or a power of two",
                        device, (unsigned long long)size, (unsigned long long)alignment);
    if (size == 0)
        return fld_fail(FL_ERROR_INVALID_SIZE, "fl_malloc(device=%d, size=0): size must be > 0",
                        device);
    if (size > (*dev)->total_memory)
        return fld_fail(FL_ERROR_INVALID_SIZE,
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
    if (!heap_ready_locked(dev)) {
        pthread_mutex_unlock(&dev->lock);
        return fld_fail(FL_ERROR_INTERNAL, "fl_malloc(device=%d): out of host memory", device);
    }
    uint64_t pad = 0;
    drv_block *b = best_fit(dev, rounded, align, &pad);
    drv_block *got = b ? carve(dev, b, pad, rounded) : NULL;
    uint64_t free_now = dev->free_bytes;
    pthread_mutex_unlock(&dev->lock);
    if (!got)
        return fld_fail(FL_ERROR_OUT_OF_MEMORY,
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
        return fld_fail(FL_ERROR_INVALID_POINTER,
                        "fl_free(device=%d, ptr=0x%llx): not the start of a live allocation on "
                        "this device (foreign pointer, interior pointer or double free)",
                        device, (unsigned long long)ptr);
    return FL_SUCCESS;
}

fl_status drv_memory_info(int32_t device, uint64_t *free_bytes, uint64_t *total_bytes) {
    if (!free_bytes || !total_bytes)
        return fld_fail(FL_ERROR_INVALID_POINTER,
                        "memory_info(device=%d, free=%p, total=%p): NULL output pointer", device,
                        (void *)free_bytes, (void *)total_bytes);
    drv_device *dev = drv_device_get(device);
    if (!dev)
        return drv_bad_device(device, "memory_info");
    pthread_mutex_lock(&dev->lock);
    *free_bytes = dev->heap_ready ? dev->free_bytes : dev->total_memory;
    pthread_mutex_unlock(&dev->lock);
    *total_bytes = dev->total_memory;
    return FL_SUCCESS;
}
