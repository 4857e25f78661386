/*
 * clapi.c -- the OpenCL ICD loader, opened with dlopen.
 *
 * The plugin does not link -lOpenCL: on a machine without the loader
 * (Debian: ocl-icd-libopencl1) the runtime's dlopen of the plugin would fail
 * with a bare linker message and no device list.  Opened here, a missing
 * loader is device_count's error, naming what to install, and the runtime's
 * other plugins keep their devices.  $FL_OPENCL_LIBRARY names another loader
 * (a vendor's libOpenCL.so outside the library path).  Calls nothing of the plugin's (errors: fl_driver.h).
 */
#include "internal.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

static plg_cl_api g_api;
static const plg_cl_api *g_loaded;
static char g_why[FLD_MESSAGE_MAX];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void *open_loader(void) {
    const char *chosen = getenv("FL_OPENCL_LIBRARY");
    if (chosen && *chosen) {
        void *lib = dlopen(chosen, RTLD_NOW | RTLD_LOCAL);
        if (!lib)
            snprintf(g_why, sizeof g_why, "the OpenCL ICD loader FL_OPENCL_LIBRARY=%s could not be opened: %s",
                     chosen, dlerror());
        return lib;
    }
    static const char *const names[] = {"libOpenCL.so.1", "libOpenCL.so"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        void *lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (lib)
            return lib;
    }
    snprintf(g_why, sizeof g_why,
             "no OpenCL ICD loader: libOpenCL.so.1 could not be opened (%s); install one (Debian/Ubuntu: "
             "apt-get install ocl-icd-libopencl1, with a driver such as pocl-opencl-icd or your GPU vendor's), "
             "or point FL_OPENCL_LIBRARY at it", dlerror());
    return NULL;
}

static void load_once(void) {
    void *lib = open_loader();
    if (!lib)
        return;
#define PLG_CL_RESOLVE(name)                                                                       \
    g_api.name = (__typeof__(g_api.name))dlsym(lib, "cl" #name);                                  \
    if (!g_api.name) {                                                                             \
        snprintf(g_why, sizeof g_why, "the OpenCL ICD loader has no cl" #name " (an OpenCL 1.2 "     \
                 "entry point): install an OpenCL 1.2 or newer loader");                           \
        return;                                                                                    \
    }
    PLG_CL_FUNCTIONS(PLG_CL_RESOLVE)
#undef PLG_CL_RESOLVE
    g_loaded = &g_api;   /* the library stays open for the process's life */
}

const plg_cl_api *plg_cl_load(char *why, size_t cap) {
    pthread_once(&g_once, load_once);
    if (!g_loaded && why)
        snprintf(why, cap, "%s", g_why);
    return g_loaded;
}

const char *plg_cl_error_name(cl_int status) {
    switch (status) {
#define PLG_CL_NAME(code) case code: return #code;
    PLG_CL_NAME(CL_DEVICE_NOT_FOUND) PLG_CL_NAME(CL_DEVICE_NOT_AVAILABLE) PLG_CL_NAME(CL_COMPILER_NOT_AVAILABLE)
    PLG_CL_NAME(CL_MEM_OBJECT_ALLOCATION_FAILURE) PLG_CL_NAME(CL_OUT_OF_RESOURCES) PLG_CL_NAME(CL_OUT_OF_HOST_MEMORY)
    PLG_CL_NAME(CL_PROFILING_INFO_NOT_AVAILABLE) PLG_CL_NAME(CL_MEM_COPY_OVERLAP) PLG_CL_NAME(CL_BUILD_PROGRAM_FAILURE)
    PLG_CL_NAME(CL_MAP_FAILURE) PLG_CL_NAME(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)
    PLG_CL_NAME(CL_INVALID_VALUE) PLG_CL_NAME(CL_INVALID_DEVICE) PLG_CL_NAME(CL_INVALID_CONTEXT)
    PLG_CL_NAME(CL_INVALID_COMMAND_QUEUE) PLG_CL_NAME(CL_INVALID_MEM_OBJECT) PLG_CL_NAME(CL_INVALID_BINARY)
    PLG_CL_NAME(CL_INVALID_BUILD_OPTIONS) PLG_CL_NAME(CL_INVALID_PROGRAM) PLG_CL_NAME(CL_INVALID_KERNEL_NAME)
    PLG_CL_NAME(CL_INVALID_KERNEL) PLG_CL_NAME(CL_INVALID_ARG_INDEX) PLG_CL_NAME(CL_INVALID_ARG_VALUE)
    PLG_CL_NAME(CL_INVALID_ARG_SIZE) PLG_CL_NAME(CL_INVALID_KERNEL_ARGS) PLG_CL_NAME(CL_INVALID_WORK_DIMENSION)
    PLG_CL_NAME(CL_INVALID_WORK_GROUP_SIZE) PLG_CL_NAME(CL_INVALID_WORK_ITEM_SIZE)
    PLG_CL_NAME(CL_INVALID_GLOBAL_OFFSET) PLG_CL_NAME(CL_INVALID_EVENT_WAIT_LIST) PLG_CL_NAME(CL_INVALID_EVENT)
    PLG_CL_NAME(CL_INVALID_OPERATION) PLG_CL_NAME(CL_INVALID_BUFFER_SIZE) PLG_CL_NAME(CL_INVALID_GLOBAL_WORK_SIZE)
    PLG_CL_NAME(CL_INVALID_PLATFORM) PLG_CL_NAME(CL_INVALID_DEVICE_TYPE)
#undef PLG_CL_NAME
    case -1001: return "CL_PLATFORM_NOT_FOUND_KHR";
    default: break;
    }
    static __thread char text[32];
    snprintf(text, sizeof text, "CL error %d", (int)status);
    return text;
}

fl_status plg_cl_status(cl_int status) {
    return status == CL_MEM_OBJECT_ALLOCATION_FAILURE || status == CL_OUT_OF_RESOURCES ||
                   status == CL_OUT_OF_HOST_MEMORY
               ? FL_ERROR_OUT_OF_MEMORY
               : FL_ERROR_DRIVER;
}
