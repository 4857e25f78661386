/*
 * registry.c -- a thread-safe, sorted set of live address ranges.
 *
 * memory.c keeps one per device (allocations: lookups by any address inside a
 * block, so copies at base+offset are checked) and stream.c / event.c one each
 * for their handles (ranges of size 1), so a stale or foreign handle is
 * refused with FL_ERROR_INVALID_HANDLE instead of being dereferenced.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

/* Index of the first range whose start is > p.  Caller holds the lock. */
static size_t upper_bound(const plg_registry *reg, uintptr_t p) {
    size_t lo = 0, hi = reg->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (reg->items[mid].start <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int grow(plg_registry *reg) {
    size_t capacity = reg->capacity ? 2 * reg->capacity : 64;
    plg_range *items = realloc(reg->items, capacity * sizeof *items);
    if (!items)
        return 0;
    reg->items = items;
    reg->capacity = capacity;
    return 1;
}

plg_reg_result plg_registry_add(plg_registry *reg, uintptr_t start, uint64_t size, uint64_t limit) {
    plg_reg_result result = PLG_REG_OK;
    pthread_mutex_lock(&reg->lock);
    if (size > limit || reg->bytes > limit - size) {
        result = PLG_REG_OVER_LIMIT;
    } else if (reg->count == reg->capacity && !grow(reg)) {
        result = PLG_REG_NO_HOST_MEMORY;
    } else {
        size_t at = upper_bound(reg, start);
        memmove(&reg->items[at + 1], &reg->items[at], (reg->count - at) * sizeof reg->items[0]);
        reg->items[at] = (plg_range){start, size};
        reg->count++;
        reg->bytes += size;
    }
    pthread_mutex_unlock(&reg->lock);
    return result;
}

plg_reg_result plg_registry_remove(plg_registry *reg, uintptr_t start, uint64_t *size) {
    plg_reg_result result = PLG_REG_NOT_FOUND;
    pthread_mutex_lock(&reg->lock);
    size_t at = upper_bound(reg, start);
    if (at > 0 && reg->items[at - 1].start == start) {
        at--;
        *size = reg->items[at].size;
        reg->bytes -= reg->items[at].size;
        memmove(&reg->items[at], &reg->items[at + 1], (reg->count - at - 1) * sizeof reg->items[0]);
        reg->count--;
        result = PLG_REG_OK;
    }
    pthread_mutex_unlock(&reg->lock);
    return result;
}

int plg_registry_find(plg_registry *reg, uintptr_t p, plg_range *out) {
    int found = 0;
    pthread_mutex_lock(&reg->lock);
    size_t at = upper_bound(reg, p);
    if (at > 0 && p - reg->items[at - 1].start < reg->items[at - 1].size) {
        *out = reg->items[at - 1];
        found = 1;
    }
    pthread_mutex_unlock(&reg->lock);
    return found;
}

uint64_t plg_registry_bytes(plg_registry *reg) {
    pthread_mutex_lock(&reg->lock);
    uint64_t bytes = reg->bytes;
    pthread_mutex_unlock(&reg->lock);
    return bytes;
}

/* ---- handles: streams and events ------------------------------------------ */

fl_status plg_handle_check(plg_registry *reg, const void *handle, const char *what, const char *call) {
    plg_range found;
    if (!handle || !plg_registry_find(reg, (uintptr_t)handle, &found))
        return plg_fail(FL_ERROR_INVALID_HANDLE, "%s: %s %p is not a live %s of this plugin", call, what, handle,
                        what);
    return FL_SUCCESS;
}

fl_status plg_handle_create(plg_registry *reg, size_t size, int32_t device, const char *call, void **out) {
    if (!out)
        return plg_fail(FL_ERROR_INVALID_POINTER, "%s: out is NULL", call);
    if (!plg_device_valid(device))
        return plg_bad_device(device, call);
    void *handle = calloc(1, size);
    if (!handle || plg_registry_add(reg, (uintptr_t)handle, 1, UINT64_MAX) != PLG_REG_OK) {
        free(handle);
        return plg_fail(FL_ERROR_OUT_OF_MEMORY, "%s: out of host memory", call);
    }
    *(int32_t *)handle = device;   /* every handle struct starts with its device */
    *out = handle;
    return FL_SUCCESS;
}

fl_status plg_handle_destroy(plg_registry *reg, void *handle, const char *what, const char *call) {
    uint64_t size;
    if (!handle || plg_registry_remove(reg, (uintptr_t)handle, &size) != PLG_REG_OK)
        return plg_fail(FL_ERROR_INVALID_HANDLE, "%s: %s %p is not a live %s of this plugin", call, what, handle,
                        what);
    free(handle);
    return FL_SUCCESS;
}
