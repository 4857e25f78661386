/*
 * registry.c -- the plugin's kernel table, gathered from the kernels' own
 * registrations (FLK_REGISTER in fl_kernel.h section 1).
 *
 * Every registration puts a pointer to its flk_kernel into the linker section
 * FLK_SECTION; the linker lays the pointers of all of the plugin's object
 * files out one after another between __start_flk_kernels and
 * __stop_flk_kernels.  Those two symbols are declared hidden here, so each
 * plugin reads its own section even when several plugins built from the same
 * library are loaded in one process.  Their order is the link order, so the
 * table is sorted (op, variant, dtypes) once, when the runtime first asks.
 */
#include "fl_kernel.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

extern const flk_kernel *const __start_flk_kernels[] __attribute__((visibility("hidden")));
extern const flk_kernel *const __stop_flk_kernels[] __attribute__((visibility("hidden")));

/* Keeps the section (and the two symbols) in existence in a plugin that has
 * no kernel yet.  It declares no dtype, so the table leaves it out; and it is
 * a pointer to an object like every other entry, so the section's flags are
 * the same in every object file. */
static const flk_kernel g_no_kernel = {"", 0, FL_VARIANT_PRECISE, NULL, NULL};
static const flk_kernel *const g_no_kernel_ref __attribute__((used, section(FLK_SECTION))) =
    &g_no_kernel;

static fl_kernel_entry *g_entries;       /* the table handed to the runtime */
static const flk_kernel **g_kernels;     /* g_kernels[i] is behind g_entries[i] */
static uint32_t g_count;
static const char *g_problem;            /* why the table could not be built */
static char g_problem_text[256];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static int kernel_order(const void *x, const void *y) {
    const flk_kernel *a = *(const flk_kernel *const *)x, *b = *(const flk_kernel *const *)y;
    int c = strcmp(a->op, b->op);
    if (c)
        return c;
    if (a->variant != b->variant)
        return a->variant < b->variant ? -1 : 1;
    return a->dtypes < b->dtypes ? -1 : a->dtypes > b->dtypes;
}

static void build_table(void) {
    size_t listed = (size_t)(__stop_flk_kernels - __start_flk_kernels);
    g_kernels = calloc(listed ? listed : 1, sizeof *g_kernels);
    g_entries = calloc(listed ? listed : 1, sizeof *g_entries);
    if (!g_kernels || !g_entries) {
        g_problem = "out of host memory building the kernel table";
        return;
    }
    uint32_t n = 0;
    for (size_t i = 0; i < listed; i++) {
        const flk_kernel *k = __start_flk_kernels[i];
        if (k && k->dtypes != 0)   /* 0: registered but hidden */
            g_kernels[n++] = k;
    }
    qsort(g_kernels, n, sizeof *g_kernels, kernel_order);
    for (uint32_t i = 1; i < n; i++)
        if (strcmp(g_kernels[i]->op, g_kernels[i - 1]->op) == 0 &&
            g_kernels[i]->variant == g_kernels[i - 1]->variant) {
            snprintf(g_problem_text, sizeof g_problem_text,
                     "\"%s\" (variant %d) is registered twice; register each (op, variant) once",
                     g_kernels[i]->op, (int)g_kernels[i]->variant);
            g_problem = g_problem_text;
            return;
        }
    for (uint32_t i = 0; i < n; i++)
        g_entries[i] = (fl_kernel_entry){.struct_size = sizeof(fl_kernel_entry),
                                         .op = g_kernels[i]->op,
                                         .dtypes = g_kernels[i]->dtypes,
                                         .variant = g_kernels[i]->variant,
                                         .flags = 0,
                                         .impl = g_kernels[i]};
    g_count = n;
}

fl_status flk_table(const fl_kernel_entry **entries, uint32_t *count, const char **problem) {
    pthread_once(&g_once, build_table);
    if (g_problem) {
        if (problem)
            *problem = g_problem;
        return FL_ERROR_INTERNAL;
    }
    *entries = g_entries;
    *count = g_count;
    return FL_SUCCESS;
}

const flk_kernel *flk_table_kernel(const fl_kernel_entry *entry) {
    pthread_once(&g_once, build_table);
    if (!entry || g_problem)
        return NULL;
    uintptr_t p = (uintptr_t)entry, lo = (uintptr_t)g_entries;
    if (p < lo || (p - lo) % sizeof(fl_kernel_entry) != 0)
        return NULL;
    uintptr_t index = (p - lo) / sizeof(fl_kernel_entry);
    if (index >= g_count)
        return NULL;
    return g_kernels[index];
}
