/*
 * ipc.c -- the inter-process memory extension (fl_ipc.h, ABI 1.3): a device
 * allocation exported by one process and mapped by another.  Calls memory.c
 * and device.c (driver.h lists the layers); the host-memory extension follows
 * it on the chain.
 *
 * A device's memory is a memfd (device.c), so an allocation is a range of a
 * file.  The handle names it: the exporter's pid and memfd number and the
 * range.  The importer checks the file is a reference device's memfd of that
 * device (a recycled pid then fails to open instead of mapping a stranger's
 * file), opens it through
 * /proc/<pid>/fd/<fd> (same user: no ptrace attach rights needed), reserves
 * page-aligned room in its own region of the device with fl_malloc, and maps
 * the exporter's pages over that room in both of its views (the PROT_NONE one
 * whose addresses are the fl_devptr, and the workers' read/write one), so every
 * kernel, copy and range check of the importer works unchanged.  Closing maps
 * the importer's own pages back and frees the room.
 */
#include "driver.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define HANDLE_MAGIC 0x4350494665524c46ull      /* "FLReFIPC" */

typedef struct ipc_handle {     /* the bytes of an fl_ipc_mem_handle */
    uint64_t magic;
    int32_t pid;
    int32_t memfd;
    int32_t device;
    int32_t reserved;
    uint64_t start;             /* offset of the allocation in the device's memfd */
    uint64_t size;
} ipc_handle;

_Static_assert(sizeof(ipc_handle) <= sizeof(fl_ipc_mem_handle), "the handle must fit its 64 bytes");

static fld_ranges g_imports = FLD_RANGES_INIT;    /* [room, room + len) per open import */
static uint64_t page_size(void) {
    long page = sysconf(_SC_PAGESIZE);
    return page > 0 ? (uint64_t)page : 4096;
}

static fl_status ipc_get_handle(fl_ipc_get_handle_args *args) {
    static const char call[] = "ipc_get_handle";
    fl_status st = FLD_CHECK_ARGS(args, fl_ipc_get_handle_args, call);
    if (st != FL_SUCCESS)
        return st;
    if (args->flags != 0)
        return fld_fail(FL_ERROR_INVALID_VALUE, "%s: flags=0x%x, but no flag is defined (pass 0)", call, args->flags);
    drv_device *dev = drv_device_get(args->device);
    if (!dev)
        return drv_bad_device(args->device, call);
    if (fld_ranges_find(&g_imports, (uintptr_t)args->ptr, NULL))
        return fld_fail(FL_ERROR_INVALID_POINTER, "%s(device=%d, ptr=0x%llx): memory opened from another process "
                        "cannot be exported again", call, args->device, (unsigned long long)args->ptr);
    fld_block block;
    if (!drv_memory.find(drv_memory.ctx, args->device, args->ptr, &block))
        return fld_fail(FL_ERROR_INVALID_POINTER, "%s(device=%d, ptr=0x%llx): not inside a live allocation of this "
                        "device", call, args->device, (unsigned long long)args->ptr);
    ipc_handle h = {HANDLE_MAGIC, (int32_t)getpid(), dev->memfd, args->device, 0, block.start - dev->dev_base,
                    block.size};
    memset(&args->handle, 0, sizeof args->handle);
    memcpy(args->handle.bytes, &h, sizeof h);
    args->offset = args->ptr - block.start;
    args->size = block.size;
    return FL_SUCCESS;
}

/* Map `len` bytes of `fd` from `offset` over [at, at + len) of both views of `dev`. */
static int map_over(drv_device *dev, fl_devptr at, uint64_t len, int fd, uint64_t offset) {
    void *dev_view = mmap((void *)(uintptr_t)at, (size_t)len, PROT_NONE, MAP_SHARED | MAP_FIXED, fd, (off_t)offset);
    void *priv_view = mmap(drv_mem_host(dev, at), (size_t)len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd,
                           (off_t)offset);
    return dev_view == MAP_FAILED || priv_view == MAP_FAILED ? -1 : 0;
}

/* The exporter's memfd, checked by its name (device.c names it after the device). */
static fl_status open_file(const ipc_handle *h, const char *call, int *fd) {
    char path[64], target[128], expected[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", h->pid, h->memfd);
    snprintf(expected, sizeof expected, "/memfd:fl-reference-dev%d ", h->device);
    ssize_t n = readlink(path, target, sizeof target - 1);
    target[n > 0 ? n : 0] = '\0';
    if (n <= 0 || strncmp(target, expected, strlen(expected)) != 0)
        return fld_fail(FL_ERROR_INVALID_VALUE, "%s: the exporter's device memory is gone (%s: %s); the exporting "
                        "process must stay alive while others open its memory", call, path,
                        n <= 0 ? strerror(errno) : target);
    *fd = open(path, O_RDWR | O_CLOEXEC);
    if (*fd < 0)
        return fld_fail(FL_ERROR_INVALID_VALUE, "%s: cannot open the exporter's device memory (%s: %s); the exporting "
                        "process must be alive and run as this user", call, path, strerror(errno));
    struct stat st;
    if (fstat(*fd, &st) != 0 || (uint64_t)st.st_size < h->start + h->size) {
        close(*fd);
        return fld_fail(FL_ERROR_INVALID_VALUE, "%s: %s is not the exporter's device memory (the process is gone and "
                        "its pid reused?)", call, path);
    }
    return FL_SUCCESS;
}

static fl_status ipc_open_handle(fl_ipc_open_handle_args *args) {
    static const char call[] = "ipc_open_handle";
    fl_status st = FLD_CHECK_ARGS(args, fl_ipc_open_handle_args, call);
    if (st != FL_SUCCESS)
        return st;
    args->ptr = 0;
    args->size = 0;
    if (args->flags != 0)
        return fld_fail(FL_ERROR_INVALID_VALUE, "%s: flags=0x%x, but no flag is defined (pass 0)", call, args->flags);
    drv_device *dev = drv_device_get(args->device);
    if (!dev)
        return drv_bad_device(args->device, call);
    ipc_handle h;
    memcpy(&h, args->handle.bytes, sizeof h);
    if (h.magic != HANDLE_MAGIC || h.size == 0)
        return fld_fail(FL_ERROR_INVALID_VALUE, "%s: not a handle of the reference plugin", call);
    if (h.device != args->device)
        return fld_fail(FL_ERROR_INVALID_DEVICE, "%s(device=%d): the handle is of device %d", call, args->device,
                        h.device);
    int fd = -1;
    if ((st = open_file(&h, call, &fd)) != FL_SUCCESS)
        return st;
    uint64_t page = page_size();
    uint64_t first = h.start & ~(page - 1);
    uint64_t len = ((h.start + h.size + page - 1) & ~(page - 1)) - first;
    fl_devptr room = 0;
    st = drv_malloc(args->device, len, page, &room);
    if (st != FL_SUCCESS) {
        close(fd);
        return st;      /* fl_malloc's message: out of this process's device memory */
    }
    int mapped = map_over(dev, room, len, fd, first);
    close(fd);          /* the mappings keep the file */
    if (mapped != 0 || fld_ranges_add(&g_imports, room, len, UINT64_MAX) != FLD_RANGES_OK) {
        int err = errno;
        map_over(dev, room, len, dev->memfd, room - dev->dev_base);
        drv_free(args->device, room);
        return fld_fail(FL_ERROR_DRIVER, "%s: mapping %llu bytes of the exporter's memory failed: %s", call,
                        (unsigned long long)len, strerror(err));
    }
    args->ptr = room + (h.start - first);
    args->size = h.size;
    return FL_SUCCESS;
}

static fl_status ipc_close_handle(fl_ipc_close_handle_args *args) {
    static const char call[] = "ipc_close_handle";
    fl_status st = FLD_CHECK_ARGS(args, fl_ipc_close_handle_args, call);
    if (st != FL_SUCCESS)
        return st;
    drv_device *dev = drv_device_get(args->device);
    if (!dev)
        return drv_bad_device(args->device, call);
    fld_range range;
    if (!fld_ranges_find(&g_imports, (uintptr_t)args->ptr, &range) || !drv_mem_in_region(dev, range.start) ||
        args->ptr - range.start >= page_size())
        return fld_fail(FL_ERROR_INVALID_POINTER, "%s(device=%d, ptr=0x%llx): not what ipc_open_handle returned on "
                        "this device (or closed already)", call, args->device, (unsigned long long)args->ptr);
    fld_ranges_remove(&g_imports, range.start, NULL);
    if (map_over(dev, range.start, range.size, dev->memfd, range.start - dev->dev_base) != 0)
        return fld_fail(FL_ERROR_DRIVER, "%s: restoring this process's own device memory failed: %s", call,
                        strerror(errno));
    return drv_free(args->device, range.start);
}

const fl_ipc_extension drv_ipc_extension = {
    .base = {.struct_size = sizeof(fl_ipc_extension), .type = FL_EXTENSION_IPC,
             .next = &drv_host_memory_extension.base},
    .ipc_get_handle = ipc_get_handle,
    .ipc_open_handle = ipc_open_handle,
    .ipc_close_handle = ipc_close_handle,
};
