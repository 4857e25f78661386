/*
 * launch.c -- the kernel table handed to the runtime, and launch_kernel.
 * Calls enqueue.c, stream.c, memory.c and device.c.
 *
 * Kernels live in src/kernels/ and register themselves next to their code
 * (FLK_REGISTER, fl_kernel.h): the SDK kernel library gathers every
 * registration of the plugin into one table; plg_kernel_table below hands it
 * to the runtime (plugin.c) with its dtypes narrowed to what the devices have.
 * Nothing here changes when a kernel is added.
 *
 * launch_kernel checks the stream and the entry; the driver library checks
 * every argument (fld_check_args: well-formed tensors whose overflow-checked
 * extent lies inside a live buffer of the stream's device); then a tensor
 * whose data is not aligned to its element size is declined (OpenCL loads
 * elements through typed pointers, and an element offset is what its kernels
 * take), the kernel's `accepts` may decline the call, and the kernel runs: it
 * enqueues its OpenCL kernels on the stream (clk.h).  The kernel checks its
 * arguments itself (flk_args_init, flk_get_*) and may decline a call with
 * FL_ERROR_NOT_SUPPORTED (a skeleton declines them all): since it runs before
 * launch_kernel returns, nothing was enqueued and the runtime falls back.
 */
#include "internal.h"

#include <stdlib.h>

/* The SDK's table (flk_table) with each entry's float16 / float64 bits kept
 * only when some device has kernels for them: the table is one per plugin,
 * not per device (fl_abi.h), so a plugin cannot say "float64 on the GPU only";
 * a device without them declines at launch (program.c), and where no device
 * has them the runtime and the conformance suite see them as not supported
 * at once instead of declining call by call. */
static const fl_kernel_entry *g_sdk_table;
static fl_kernel_entry *g_table;
static uint32_t g_count;
static fl_status g_table_status;
static const char *g_table_problem = "";
static pthread_once_t g_table_once = PTHREAD_ONCE_INIT;

static uint64_t unsupported_dtypes(void) {
    int32_t n = 0;
    int fp64 = 0, fp16 = 0;
    if (plg_devices_init(&n) == FL_SUCCESS)
        for (int32_t d = 0; d < n; d++) {
            fp64 |= plg_device_get(d)->fp64;
            fp16 |= plg_device_get(d)->fp16;
        }
    return (fp64 ? 0 : FLK_DT(FL_FLOAT64)) | (fp16 ? 0 : FLK_DT(FL_FLOAT16));
}

static void build_table(void) {
    g_table_status = flk_table(&g_sdk_table, &g_count, &g_table_problem);
    if (g_table_status != FL_SUCCESS)
        return;
    g_table = calloc(g_count ? g_count : 1, sizeof *g_table);
    if (!g_table) {
        g_table_status = FL_ERROR_INTERNAL;
        g_table_problem = "out of host memory";
        return;
    }
    uint64_t drop = unsupported_dtypes();
    for (uint32_t i = 0; i < g_count; i++) {
        g_table[i] = g_sdk_table[i];
        g_table[i].dtypes &= ~drop;
    }
}

fl_status plg_kernel_table(const fl_kernel_entry **entries, uint32_t *count) {
    if (!entries || !count)
        return fld_fail(FL_ERROR_INVALID_POINTER, "kernel_table: NULL output pointer");
    pthread_once(&g_table_once, build_table);
    if (g_table_status != FL_SUCCESS)
        return fld_fail(g_table_status, "kernel_table: %s", g_table_problem);
    *entries = g_table;
    *count = g_count;
    return FL_SUCCESS;
}

/* The kernel behind an entry of the table above, or NULL for any other pointer. */
static const flk_kernel *table_kernel(const fl_kernel_entry *entry) {
    pthread_once(&g_table_once, build_table);
    if (!g_table || (uintptr_t)entry < (uintptr_t)g_table ||
        (uintptr_t)entry >= (uintptr_t)(g_table + g_count) ||
        ((uintptr_t)entry - (uintptr_t)g_table) % sizeof *g_table)
        return NULL;
    return flk_table_kernel(&g_sdk_table[entry - g_table]);
}

/* A tensor's data must start on a multiple of its element size inside its
 * buffer; fld_check_args has already put it inside one. */
static fl_status check_aligned(const flk_kernel *def, uint32_t i, const fl_tensor *t) {
    uint64_t extent = 0;
    if (!fld_tensor_extent(t, &extent) || extent == 0)
        return FL_SUCCESS;   /* an empty tensor touches no memory */
    uint64_t at = ((t->base + t->byte_offset) & ((1ull << PLG_SLOT_SHIFT) - 1));
    if (at % flk_dtype_size(t->dtype))
        return fld_fail(FL_ERROR_NOT_SUPPORTED, "launch_kernel(%s) declines: argument %u's data starts at byte %llu "
                        "of its buffer, not a multiple of its %zu-byte elements", def->op, i,
                        (unsigned long long)at, flk_dtype_size(t->dtype));
    return FL_SUCCESS;
}

/* Declines come after every argument passed fld_check_args, so a malformed
 * argument is always an error, whatever its place in the list. */
static fl_status check_alignment(const flk_kernel *def, const fl_arg *args, uint32_t nargs) {
    fl_status status = FL_SUCCESS;
    for (uint32_t i = 0; i < nargs && status == FL_SUCCESS; i++) {
        if (args[i].kind == FL_ARG_TENSOR)
            status = check_aligned(def, i, args[i].value.tensor);
        else if (args[i].kind == FL_ARG_TENSOR_LIST)
            for (uint32_t j = 0; j < args[i].count && status == FL_SUCCESS; j++)
                if (args[i].value.tensors[j])
                    status = check_aligned(def, i, args[i].value.tensors[j]);
    }
    return status;
}

/* The kernel runs on the calling thread and enqueues its OpenCL kernels on
 * the stream's queue (bound for its duration: flk_ctx names no stream).  A
 * decline (FL_ERROR_NOT_SUPPORTED) comes before its first enqueue (clk.h). */
fl_status plg_launch_kernel(fl_stream stream, const fl_kernel_entry *kernel, const fl_arg *args, uint32_t nargs) {
    FLK_TRY(plg_stream_check(stream, "launch_kernel"));
    const flk_kernel *def = table_kernel(kernel);
    if (!def)
        return fld_fail(FL_ERROR_INVALID_HANDLE, "launch_kernel: %p is not an entry of this plugin's kernel table",
                        (const void *)kernel);
    fld_arg_plan plan;
    fl_status status = fld_check_args(&plg_memory, stream->device, def->op, args, nargs, &plan);
    if (status == FL_SUCCESS)
        status = check_alignment(def, args, nargs);
    if (status == FL_SUCCESS)
        status = fld_accepts(def, stream->device, args, nargs);
    if (status != FL_SUCCESS)
        return status;
    plg_enqueue_bind(stream);
    status = fld_run_kernel(def, stream->device, args, nargs);
    plg_enqueue_bind(NULL);
    return status;
}
