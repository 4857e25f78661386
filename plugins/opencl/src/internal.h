/*
 * internal.h -- the opencl plugin's driver: Torch-FL's ABI (fl_abi.h) over
 * whatever OpenCL implementation the ICD loader finds (PoCL on the host CPU,
 * a GPU vendor's driver, an accelerator's).  Kernels live in src/kernels/
 * (host side: argument checks, then one or more enqueues through clk.h) and
 * src/cl/ (their OpenCL C, compiled per device and dtype by program.c).
 *
 * What every driver does the same way -- the per-thread last error, version
 * negotiation, struct_size prefixes, handle tables, launch-argument checks
 * against live allocations with overflow-checked tensor extents -- comes from
 * the SDK driver library (fl_driver.h, `sdk_libraries: [kernel, driver]` in
 * plugin.yaml).  These files hold only what the chip decides.
 *
 * LAYERS.  Each file calls only the files listed below it, so there is no
 * call circle:
 *
 *   plugin.c    plugin info and the driver's calls for the driver
 *               library's entry point (fl_driver.h section 9)        (top)
 *   launch.c    the kernel table handed to the runtime, launch_kernel
 *   enqueue.c   what kernels call (clk.h): build one NDRange launch and enqueue it
 *   program.c   OpenCL programs: built once per (device, family, dtype), cached on disk
 *   event.c     events (OpenCL markers), event_record and stream_wait_event
 *   memory.c    fl_malloc / fl_free over cl_mem buffers, copies and memset
 *   stream.c    streams: one in-order command queue each, and its sticky errors
 *   device.c    discovery: platforms, devices, contexts, properties
 *   clapi.c     the OpenCL ICD loader, opened with dlopen (a missing one is
 *               an error, not a crash)                              (bottom)
 *
 * cl_sources.c holds the OpenCL C as strings (data: it calls nothing).
 *
 * DEVICE ADDRESSES.  OpenCL device memory is a cl_mem handle, not an address,
 * so an fl_devptr here is a handle too: (buffer slot + 1) << PLG_SLOT_SHIFT,
 * plus a byte offset inside that buffer.  The runtime never dereferences an
 * fl_devptr and hands back (base, byte_offset) pairs (fl_abi.h "Device
 * addresses"), which memory.c maps onto (cl_mem, offset).  docs/vendors/
 * opencl-plugin.md "Memory" says why this layout.
 *
 * Nothing here is part of the ABI; only fl_plugin_get_api is exported.
 */
#ifndef PLG_INTERNAL_H
#define PLG_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "clk.h"
#include "fl_driver.h"

#pragma GCC visibility push(hidden)

#define PLG_MAX_DEVICES 16

/* The name the driver library's error helper had in template 1.2: code written
 * against it keeps compiling. */
#define plg_fail fld_fail

/* ---- the ICD loader (clapi.c) ---------------------------------------------- */

/* Every OpenCL entry point the plugin calls, resolved from the loader library
 * ($FL_OPENCL_LIBRARY, else libOpenCL.so.1).  Linking -lOpenCL instead would
 * make a machine without the loader fail to dlopen the plugin at all, with a
 * linker message; this way the plugin loads and device_count says what to
 * install.  The member types come from the Khronos headers' prototypes. */
#define PLG_CL_FUNCTIONS(X)                                                              \
    X(GetPlatformIDs) X(GetPlatformInfo) X(GetDeviceIDs) X(GetDeviceInfo)                \
    X(CreateContext) X(CreateCommandQueue) X(ReleaseCommandQueue)                        \
    X(CreateBuffer) X(ReleaseMemObject)                                                  \
    X(EnqueueReadBuffer) X(EnqueueWriteBuffer) X(EnqueueCopyBuffer) X(EnqueueFillBuffer) \
    X(EnqueueMarkerWithWaitList) X(EnqueueBarrierWithWaitList) X(Flush) X(Finish)       \
    X(WaitForEvents) X(GetEventInfo) X(GetEventProfilingInfo) X(ReleaseEvent)            \
    X(RetainEvent) X(CreateUserEvent) X(SetUserEventStatus) X(SetEventCallback)          \
    X(CreateProgramWithSource) X(CreateProgramWithBinary) X(BuildProgram)                \
    X(GetProgramBuildInfo) X(GetProgramInfo) X(ReleaseProgram)                           \
    X(CreateKernel) X(SetKernelArg) X(EnqueueNDRangeKernel)

typedef struct plg_cl_api {
#define PLG_CL_MEMBER(name) __typeof__(&cl##name) name;
    PLG_CL_FUNCTIONS(PLG_CL_MEMBER)
#undef PLG_CL_MEMBER
} plg_cl_api;

/* The loaded API, or NULL with *why filled (the library or a symbol missing). */
const plg_cl_api *plg_cl_load(char *why, size_t cap);
/* The OpenCL error name of a status ("CL_OUT_OF_RESOURCES"), or "CL error N". */
const char *plg_cl_error_name(cl_int status);
/* FL_ERROR_OUT_OF_MEMORY for the driver's out-of-memory codes, else FL_ERROR_DRIVER. */
fl_status plg_cl_status(cl_int status);

/* ---- devices (device.c) --------------------------------------------------- */

typedef struct plg_device {
    cl_platform_id platform;
    cl_device_id id;
    cl_context context;        /* one per platform, shared by its chosen devices */
    cl_command_queue service;  /* the driver's own queue (copies across contexts) */
    char name[FL_NAME_MAX];
    char vendor[FL_NAME_MAX];
    char driver_version[FL_NAME_MAX];
    char uuid[FL_UUID_MAX];
    char platform_name[128];
    char device_version[128];
    uint64_t total_memory;     /* CL_DEVICE_GLOBAL_MEM_SIZE, capped by FL_OPENCL_MEMORY_MB */
    uint64_t max_alloc;        /* CL_DEVICE_MAX_MEM_ALLOC_SIZE: the largest one buffer */
    uint64_t alignment;
    uint32_t compute_units;
    int fp64;                  /* cl_khr_fp64: float64 kernels */
    int fp16;                  /* float16 kernels (cl_khr_fp16, or FL_OPENCL_FP16=on) */
    int correct_divide;        /* CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT */
} plg_device;

/* Discover once (first call, any thread); FL_SUCCESS with the count, or the
 * reason there are none (no loader, no platform, no device of the chosen
 * types) as a failure naming what to install. */
fl_status plg_devices_init(int32_t *count);

/* The first plugin_initialize (ABI 1.2) discovers the devices; the last
 * plugin_teardown releases nothing (fl_abi.h, "LIFECYCLE"; device.c). */
fl_status plg_driver_open(const fl_plugin_initialize_args *args);
void plg_driver_close(void);
int plg_device_valid(int32_t device);
/* FL_ERROR_INVALID_DEVICE naming `call`. */
fl_status plg_bad_device(int32_t device, const char *call);
/* The device (valid index only), the OpenCL API (after a successful init). */
const plg_device *plg_device_get(int32_t device);
const plg_cl_api *plg_cl(void);
/* "opencl device 0 (pthread-haswell, driver 3.1+debian)": every message names it. */
const char *plg_device_label(int32_t device);

/* ---- streams (stream.c) ---------------------------------------------------- */

struct fl_stream_impl {
    int32_t device;
    cl_command_queue queue;    /* in order, profiling on (event timings) */
    cl_mem checks;             /* one int the kernels' device-side checks set (clk.h) */
    int checks_pending;        /* a checking kernel ran since the last look */
    uint64_t work_epoch;       /* bumped by every enqueued command (plg_stream_touch) */
    uint64_t done_epoch;       /* work up to this epoch is known complete */
    cl_event probe;            /* stream_query's marker for probe_epoch, or NULL */
    uint64_t probe_epoch;
    pthread_mutex_t lock;      /* the fields above and the sticky error */
    fl_status sticky;          /* an asynchronous failure, reported once */
    char sticky_message[FLD_MESSAGE_MAX];
};

/* FL_ERROR_INVALID_HANDLE (with message) unless `stream` is live. */
fl_status plg_stream_check(fl_stream stream, const char *call);
/* A failed enqueue on `stream`: the status, with a message naming the call and device. */
fl_status plg_stream_enqueue_failed(fl_stream stream, const char *call, cl_int status);
/* A command was enqueued on the stream (stream_query then asks the queue). */
void plg_stream_touch(fl_stream stream);
/* The stream's checks buffer for a kernel that checks its data (index bounds). */
cl_mem plg_stream_checks(fl_stream stream);

/* ---- memory (memory.c) ------------------------------------------------------ */

/* fl_devptr = ((slot + 1) << PLG_SLOT_SHIFT) + byte offset: 2^40 bytes per
 * buffer (far above any CL_DEVICE_MAX_MEM_ALLOC_SIZE), 2^23 live buffers,
 * and every fl_malloc result is a multiple of 2^40, so of any alignment. */
#define PLG_SLOT_SHIFT 40
#define PLG_MAX_SLOTS ((1u << 23) - 1)

/* The live buffers, as the driver library's argument checks ask for them
 * (fl_driver.h, section 5): the block of a handle is its whole buffer. */
extern const fld_memory plg_memory;

/* [base+offset, +size) of `device`, checked to lie inside one live buffer:
 * its cl_mem and the byte offset in it; an error status (with message) otherwise. */
fl_status plg_mem_resolve(int32_t device, fl_devptr base, uint64_t offset, uint64_t size, const char *call,
                          cl_mem *mem, uint64_t *byte_offset);

/* ---- events (event.c) ------------------------------------------------------ */

struct fl_event_impl {
    int32_t device;
    cl_event marker;           /* the latest record, or NULL (never recorded) */
};

fl_status plg_event_check(fl_event event, const char *call);

/* ---- programs (program.c) -------------------------------------------------- */

/* A cached kernel object of a built program: set-arguments-then-enqueue runs
 * under `lock` (cl_kernel arguments are shared state). */
typedef struct plg_kernel {
    const char *name;
    cl_kernel kernel;
    pthread_mutex_t lock;
} plg_kernel;

/* Build (or load from the disk cache) program `family` for `dtype` on `device`
 * if that has not been tried yet.  FL_ERROR_NOT_SUPPORTED (message: the
 * device, the program and the head of the build log) when the driver cannot
 * build it: the op then runs through the runtime's fallback. */
fl_status plg_program_ready(int32_t device, clk_family family, int32_t dtype);
/* The kernel `name` of a ready program, created once. */
fl_status plg_program_kernel(int32_t device, clk_family family, int32_t dtype, const char *name,
                             plg_kernel **out);

/* ---- enqueue.c: what clk.h's functions enqueue on ------------------------------ */

/* The stream a kernel launched on this thread enqueues on: launch.c binds it
 * for the kernel's duration (flk_ctx names the device, not the stream). */
void plg_enqueue_bind(fl_stream stream);

/* ---- the fl_api functions ---------------------------------------------------- */

/* plg_device_count ... plg_launch_kernel: the calls plugin.c hands the driver
 * library's entry point (fl_driver.h section 9), in the files above. */
FLD_DECLARE_DRIVER_CALLS(plg);

/* The pinned host-memory and collectives extensions are not offered: the
 * runtime stages pinned tensors' copies and runs distributed jobs host-staged
 * (KIT_NOTES.md).  Writing either means an fl_host_memory_extension /
 * fl_collectives_extension here and its address as the table's
 * extension_start (plugin.c). */

fl_status plg_kernel_table(const fl_kernel_entry **entries, uint32_t *count);

#pragma GCC visibility pop

#endif /* PLG_INTERNAL_H */
