/*
 * ranges.c -- a thread-safe sorted set of live address ranges, and the handle
 * tables built on it (fl_driver.h section 4).
 *
 * A driver keeps allocations in one per device (a lookup by any address
 * inside a block checks copies and tensors at base + offset) and its streams
 * and events in handle tables (ranges of size 1), so a handle is found before
 * it is dereferenced.
 */
#include "fl_driver.h"

#include <stdlib.h>
#include <string.h>

/* Index of the first range whose start is > p.  Caller holds the lock. */
static size_t upper_bound(const fld_ranges *set, uintptr_t p) {
    size_t lo = 0, hi = set->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (set->items[mid].start <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int grow(fld_ranges *set) {
    size_t capacity = set->capacity ? 2 * set->capacity : 64;
    fld_range *items = realloc(set->items, capacity * sizeof *items);
    if (!items)
        return 0;
    set->items = items;
    set->capacity = capacity;
    return 1;
}

fld_ranges_result fld_ranges_add(fld_ranges *set, uintptr_t start, uint64_t size, uint64_t limit) {
    fld_ranges_result result = FLD_RANGES_OK;
    pthread_rwlock_wrlock(&set->lock);
    if (size > limit || set->bytes > limit - size) {
        result = FLD_RANGES_OVER_LIMIT;
    } else if (set->count == set->capacity && !grow(set)) {
        result = FLD_RANGES_NO_HOST_MEMORY;
    } else {
        size_t at = upper_bound(set, start);
        memmove(&set->items[at + 1], &set->items[at], (set->count - at) * sizeof set->items[0]);
        set->items[at] = (fld_range){start, size};
        set->count++;
        set->bytes += size;
    }
    pthread_rwlock_unlock(&set->lock);
    return result;
}

fld_ranges_result fld_ranges_remove(fld_ranges *set, uintptr_t start, uint64_t *size) {
    fld_ranges_result result = FLD_RANGES_NOT_FOUND;
    pthread_rwlock_wrlock(&set->lock);
    size_t at = upper_bound(set, start);
    if (at > 0 && set->items[at - 1].start == start) {
        at--;
        if (size)
            *size = set->items[at].size;
        set->bytes -= set->items[at].size;
        memmove(&set->items[at], &set->items[at + 1], (set->count - at - 1) * sizeof set->items[0]);
        set->count--;
        result = FLD_RANGES_OK;
    }
    pthread_rwlock_unlock(&set->lock);
    return result;
}

int fld_ranges_find(fld_ranges *set, uintptr_t address, fld_range *found) {
    int hit = 0;
    pthread_rwlock_rdlock(&set->lock);
    size_t at = upper_bound(set, address);
    if (at > 0 && address - set->items[at - 1].start < set->items[at - 1].size) {
        if (found)
            *found = set->items[at - 1];
        hit = 1;
    }
    pthread_rwlock_unlock(&set->lock);
    return hit;
}

uint64_t fld_ranges_bytes(fld_ranges *set) {
    pthread_rwlock_rdlock(&set->lock);
    uint64_t bytes = set->bytes;
    pthread_rwlock_unlock(&set->lock);
    return bytes;
}

/* ---- handle tables ----------------------------------------------------------- */

fl_status fld_handle_add(fld_handles *table, const void *handle, const char *call) {
    if (fld_ranges_add(&table->set, (uintptr_t)handle, 1, UINT64_MAX) != FLD_RANGES_OK)
        return fld_fail(FL_ERROR_OUT_OF_MEMORY, "%s: out of host memory for the handle table", call);
    return FL_SUCCESS;
}

static fl_status not_live(const void *handle, const char *what, const char *call) {
    if (!handle)
        return fld_fail(FL_ERROR_INVALID_HANDLE, "%s: %s is NULL", call, what);
    return fld_fail(FL_ERROR_INVALID_HANDLE, "%s: %p is not a live %s of this plugin (destroyed, or another "
                    "plugin's)", call, handle, what);
}

fl_status fld_handle_remove(fld_handles *table, const void *handle, const char *what, const char *call) {
    if (!handle || fld_ranges_remove(&table->set, (uintptr_t)handle, NULL) != FLD_RANGES_OK)
        return not_live(handle, what, call);
    return FL_SUCCESS;
}

fl_status fld_handle_check(fld_handles *table, const void *handle, const char *what, const char *call) {
    fld_range found;
    if (!handle || !fld_ranges_find(&table->set, (uintptr_t)handle, &found) || found.start != (uintptr_t)handle)
        return not_live(handle, what, call);
    return FL_SUCCESS;
}
