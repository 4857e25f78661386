/*
 * alloc.c -- host scratch memory for kernels (fl_kernel.h section 10).
 */
#include "fl_kernel.h"

#include <stdlib.h>

void *flk_alloc(size_t bytes) {
    void *p = NULL;
    if (bytes == 0)
        bytes = 64;
    if (posix_memalign(&p, 64, bytes) != 0)
        return NULL;
    return p;
}

void flk_free(void *p) { free(p); }
