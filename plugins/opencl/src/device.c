/*
 * device.c -- discovery: which OpenCL devices become fl devices, and what
 * they report.  Calls clapi.c (errors: fl_driver.h's fld_fail).
 *
 * On the first device_count (any thread) the driver asks the ICD loader for
 * every platform and, on each, for its devices of the chosen types
 * ($FL_OPENCL_DEVICE_TYPES: a comma list of gpu, accelerator, cpu; default
 * all three), makes one context per platform for its chosen devices (so
 * their queues can wait on each other's events) and reads each device's
 * name, vendor, driver version, memory and extensions.
 *
 * STABLE IDS.  The runtime orders fl devices by (device type, uuid), so the
 * uuid must name the same physical device on every start.  In order of
 * preference: the driver's own uuid (cl_khr_device_uuid), the PCI address
 * (cl_khr_pci_bus_info) with the device name, else a hash of platform name,
 * device name, driver version and OpenCL version plus the device's ordinal
 * among devices with that same hash: identical cards on a driver offering
 * neither extension are told apart by enumeration order only
 * (docs/vendors/opencl-plugin.md "Devices and stable ids").
 */
#include "internal.h"

#include <CL/cl_ext.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEFAULT_ALIGNMENT 256u    /* the scaffold's answer; raised to the driver's base alignment */

static plg_device g_devices[PLG_MAX_DEVICES];
static int32_t g_count;
static fl_status g_status = FL_SUCCESS;
static char g_message[FLD_MESSAGE_MAX];
static const plg_cl_api *g_cl;
static pid_t g_pid;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static __thread char tls_label[192];

/* ---- settings ------------------------------------------------------------------ */

static int parse_types(cl_device_type *types) {
    const char *text = getenv("FL_OPENCL_DEVICE_TYPES");
    *types = 0;
    if (!text || !*text || !strcmp(text, "all")) {
        *types = CL_DEVICE_TYPE_GPU | CL_DEVICE_TYPE_ACCELERATOR | CL_DEVICE_TYPE_CPU;
        return 1;
    }
    char copy[256];
    snprintf(copy, sizeof copy, "%s", text);
    for (char *save = NULL, *word = strtok_r(copy, ", ", &save); word; word = strtok_r(NULL, ", ", &save)) {
        if (!strcmp(word, "gpu"))
            *types |= CL_DEVICE_TYPE_GPU;
        else if (!strcmp(word, "accelerator"))
            *types |= CL_DEVICE_TYPE_ACCELERATOR;
        else if (!strcmp(word, "cpu"))
            *types |= CL_DEVICE_TYPE_CPU;
        else {
            snprintf(g_message, sizeof g_message, "FL_OPENCL_DEVICE_TYPES=%s: '%s' is not a device type (use a "
                     "comma list of gpu, accelerator, cpu, or all)", text, word);
            return 0;
        }
    }
    return 1;
}

static uint64_t memory_cap(void) {
    const char *text = getenv("FL_OPENCL_MEMORY_MB");
    long long mb = text && *text ? atoll(text) : 0;
    return mb > 0 ? (uint64_t)mb << 20 : UINT64_MAX;
}

/* ---- device info ----------------------------------------------------------------- */

static void info_string(cl_device_id id, cl_device_info what, char *out, size_t cap) {
    char text[1024] = "";
    if (g_cl->GetDeviceInfo(id, what, sizeof text - 1, text, NULL) != CL_SUCCESS)
        text[0] = '\0';
    snprintf(out, cap, "%s", text);
}

static uint64_t info_u64(cl_device_id id, cl_device_info what) {
    cl_ulong value = 0;
    return g_cl->GetDeviceInfo(id, what, sizeof value, &value, NULL) == CL_SUCCESS ? value : 0;
}

static uint32_t info_u32(cl_device_id id, cl_device_info what) {
    cl_uint value = 0;
    return g_cl->GetDeviceInfo(id, what, sizeof value, &value, NULL) == CL_SUCCESS ? value : 0;
}

static int has_extension(cl_device_id id, const char *name) {
    size_t size = 0;
    if (g_cl->GetDeviceInfo(id, CL_DEVICE_EXTENSIONS, 0, NULL, &size) != CL_SUCCESS || size == 0)
        return 0;
    char *text = malloc(size + 2);
    int found = 0;
    if (text && g_cl->GetDeviceInfo(id, CL_DEVICE_EXTENSIONS, size, text + 1, NULL) == CL_SUCCESS) {
        text[0] = ' ';          /* " ext1 ext2 ", so " name " matches whole names only */
        text[size] = ' ';
        text[size + 1] = '\0';
        char pattern[128];
        snprintf(pattern, sizeof pattern, " %s ", name);
        found = strstr(text, pattern) != NULL;
    }
    free(text);
    return found;
}

static int fp16_enabled(cl_device_id id) {
    const char *mode = getenv("FL_OPENCL_FP16");
    if (mode && !strcmp(mode, "off"))
        return 0;
    /* vload_half/vstore_half are core OpenCL 1.2: "on" computes float16 in
     * float on any device; "auto" (the default) only where cl_khr_fp16 says
     * the device has half precision hardware. */
    return (mode && !strcmp(mode, "on")) || has_extension(id, "cl_khr_fp16");
}

static uint64_t fnv1a(uint64_t hash, const char *text) {
    for (const unsigned char *p = (const unsigned char *)text;; p++) {
        hash = (hash ^ *p) * 1099511628211ull;
        if (!*p)
            return hash;   /* the NUL is hashed too: ("ab","c") != ("a","bc") */
    }
}

static void make_uuid(plg_device *dev, int32_t index) {
    unsigned char raw[16];
    if (has_extension(dev->id, "cl_khr_device_uuid") &&
        g_cl->GetDeviceInfo(dev->id, CL_DEVICE_UUID_KHR, sizeof raw, raw, NULL) == CL_SUCCESS) {
        int n = snprintf(dev->uuid, sizeof dev->uuid, "ocl-");
        for (int i = 0; i < 16; i++)
            n += snprintf(dev->uuid + n, sizeof dev->uuid - (size_t)n, "%02x", raw[i]);
        return;
    }
    uint64_t hash = fnv1a(fnv1a(1469598103934665603ull, dev->name), dev->platform_name);
    cl_device_pci_bus_info_khr pci;
    if (has_extension(dev->id, "cl_khr_pci_bus_info") &&
        g_cl->GetDeviceInfo(dev->id, CL_DEVICE_PCI_BUS_INFO_KHR, sizeof pci, &pci, NULL) == CL_SUCCESS) {
        snprintf(dev->uuid, sizeof dev->uuid, "ocl-%08llx-pci-%04x:%02x:%02x.%x",
                 (unsigned long long)(hash >> 32), pci.pci_domain, pci.pci_bus, pci.pci_device, pci.pci_function);
        return;
    }
    hash = fnv1a(fnv1a(hash, dev->driver_version), dev->device_version);
    int ordinal = 0;   /* earlier devices with the same hash */
    char prefix[40];
    snprintf(prefix, sizeof prefix, "ocl-%016llx-", (unsigned long long)hash);
    for (int32_t i = 0; i < index; i++)
        ordinal += !strncmp(g_devices[i].uuid, prefix, strlen(prefix));
    snprintf(dev->uuid, sizeof dev->uuid, "%s%d", prefix, ordinal);
}

static void describe(plg_device *dev, int32_t index, uint64_t cap) {
    info_string(dev->id, CL_DEVICE_NAME, dev->name, sizeof dev->name);
    info_string(dev->id, CL_DEVICE_VENDOR, dev->vendor, sizeof dev->vendor);
    info_string(dev->id, CL_DRIVER_VERSION, dev->driver_version, sizeof dev->driver_version);
    info_string(dev->id, CL_DEVICE_VERSION, dev->device_version, sizeof dev->device_version);
    char text[128] = "";
    g_cl->GetPlatformInfo(dev->platform, CL_PLATFORM_NAME, sizeof text - 1, text, NULL);
    snprintf(dev->platform_name, sizeof dev->platform_name, "%s", text);
    uint64_t global = info_u64(dev->id, CL_DEVICE_GLOBAL_MEM_SIZE);
    dev->total_memory = global < cap ? global : cap;
    dev->max_alloc = info_u64(dev->id, CL_DEVICE_MAX_MEM_ALLOC_SIZE);
    uint64_t base_align = info_u32(dev->id, CL_DEVICE_MEM_BASE_ADDR_ALIGN) / 8;   /* bits */
    dev->alignment = base_align > DEFAULT_ALIGNMENT ? base_align : DEFAULT_ALIGNMENT;
    dev->compute_units = info_u32(dev->id, CL_DEVICE_MAX_COMPUTE_UNITS);
    dev->fp64 = has_extension(dev->id, "cl_khr_fp64");
    dev->fp16 = fp16_enabled(dev->id);
    cl_device_fp_config fp = 0;
    g_cl->GetDeviceInfo(dev->id, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp, &fp, NULL);
    dev->correct_divide = (fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) != 0;
    make_uuid(dev, index);
}

/* ---- discovery ------------------------------------------------------------------- */

/* The chosen devices of one platform, one context for them all. */
static void add_platform(cl_platform_id platform, cl_device_type types, uint64_t cap, char *skipped,
                         size_t skipped_cap) {
    cl_device_id ids[PLG_MAX_DEVICES];
    cl_uint found = 0;
    cl_int status = g_cl->GetDeviceIDs(platform, types, PLG_MAX_DEVICES, ids, &found);
    if (status != CL_SUCCESS || found == 0)
        return;   /* CL_DEVICE_NOT_FOUND: none of the chosen types here */
    if (found > (cl_uint)(PLG_MAX_DEVICES - g_count))
        found = (cl_uint)(PLG_MAX_DEVICES - g_count);
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)platform, 0};
    cl_context context = g_cl->CreateContext(props, found, ids, NULL, NULL, &status);
    if (!context) {
        size_t used = strlen(skipped);
        snprintf(skipped + used, skipped_cap - used, "%s%u device(s) of a platform left out: clCreateContext "
                 "failed with %s", used ? "; " : "", found, plg_cl_error_name(status));
        return;
    }
    for (cl_uint i = 0; i < found; i++) {
        plg_device *dev = &g_devices[g_count];
        dev->platform = platform;
        dev->id = ids[i];
        dev->context = context;
        describe(dev, g_count, cap);
        dev->service = g_cl->CreateCommandQueue(context, ids[i], 0, &status);
        g_count++;
    }
}

static void discover(void) {
    char why[FLD_MESSAGE_MAX];
    g_pid = getpid();
    g_cl = plg_cl_load(why, sizeof why);
    if (!g_cl) {
        g_status = FL_ERROR_DRIVER;
        snprintf(g_message, sizeof g_message, "%s", why);
        return;
    }
    cl_device_type types;
    if (!parse_types(&types)) {
        g_status = FL_ERROR_INVALID_VALUE;
        return;
    }
    cl_platform_id platforms[16];
    cl_uint nplatforms = 0;
    cl_int status = g_cl->GetPlatformIDs(16, platforms, &nplatforms);
    if (status != CL_SUCCESS || nplatforms == 0) {
        g_status = FL_ERROR_DRIVER;
        snprintf(g_message, sizeof g_message, "the OpenCL ICD loader found no platform (%s): no OpenCL driver is "
                 "installed or registered in /etc/OpenCL/vendors (or $OCL_ICD_VENDORS); install one, e.g. "
                 "apt-get install pocl-opencl-icd for the host CPU, or your GPU vendor's OpenCL runtime",
                 status == CL_SUCCESS ? "0 platforms" : plg_cl_error_name(status));
        return;
    }
    char skipped[FLD_MESSAGE_MAX / 2] = "";
    uint64_t cap = memory_cap();
    for (cl_uint p = 0; p < nplatforms && p < 16 && g_count < PLG_MAX_DEVICES; p++)
        add_platform(platforms[p], types, cap, skipped, sizeof skipped);
    if (g_count == 0) {
        const char *chosen = getenv("FL_OPENCL_DEVICE_TYPES");
        g_status = FL_ERROR_DRIVER;
        snprintf(g_message, sizeof g_message, "%u OpenCL platform(s), but no device of the chosen types (%s)%s%s",
                 nplatforms, chosen && *chosen ? chosen : "gpu,accelerator,cpu", skipped[0] ? ": " : "", skipped);
    }
}

fl_status plg_devices_init(int32_t *count) {
    pthread_once(&g_once, discover);
    if (g_status != FL_SUCCESS)
        return fld_fail(g_status, "opencl: %s", g_message);
    if (getpid() != g_pid)
        return fld_fail(FL_ERROR_DRIVER, "opencl: this process was forked after the plugin opened its OpenCL "
                        "devices; OpenCL state does not survive fork: use the 'spawn' start method");
    if (count)
        *count = g_count;
    return FL_SUCCESS;
}

/* ABI 1.2's first plugin_initialize: discovery, so a machine without a usable
 * OpenCL stack refuses the plugin with the reason (no loader, no platform, no
 * device of the chosen types).  A runtime older than 1.2 never calls it and
 * gets the same discovery at its first device call. */
fl_status plg_driver_open(const fl_plugin_initialize_args *args) {
    (void)args;
    return plg_devices_init(NULL);
}

/* The last plugin_teardown releases nothing: buffers a client still holds
 * keep their contexts until the process ends, and a later initialise finds
 * the devices as they were (discovery runs once per process). */
void plg_driver_close(void) {}

int plg_device_valid(int32_t device) { return device >= 0 && device < g_count; }

fl_status plg_bad_device(int32_t device, const char *call) {
    return fld_fail(FL_ERROR_INVALID_DEVICE, "%s: device %d does not exist (opencl has %d)", call, device, g_count);
}

const plg_device *plg_device_get(int32_t device) { return &g_devices[device]; }

const plg_cl_api *plg_cl(void) { return g_cl; }

const char *plg_device_label(int32_t device) {
    if (!plg_device_valid(device))
        snprintf(tls_label, sizeof tls_label, "opencl device %d", device);
    else
        snprintf(tls_label, sizeof tls_label, "opencl device %d (%s, %s %s)", device, g_devices[device].name,
                 g_devices[device].platform_name, g_devices[device].driver_version);
    return tls_label;
}

fl_status plg_device_count(int32_t *count) {
    if (!count)
        return fld_fail(FL_ERROR_INVALID_POINTER, "device_count: count is NULL");
    return plg_devices_init(count);
}

static uint64_t kernel_dtypes(const plg_device *dev) {
    (void)dev;
    /* device memory holds bytes: every dtype can be stored and copied; which
     * dtypes each kernel computes is in the kernel table */
    return (1ull << FL_DTYPE_COUNT) - 1;
}

static void fill_properties(int32_t device, fl_device_properties *p) {
    const plg_device *dev = &g_devices[device];
    memset(p, 0, sizeof *p);
    p->struct_size = sizeof *p;
    snprintf(p->name, sizeof p->name, "%s", dev->name);
    snprintf(p->vendor, sizeof p->vendor, "%s", dev->vendor);
    snprintf(p->uuid, sizeof p->uuid, "%s", dev->uuid);
    snprintf(p->driver_version, sizeof p->driver_version, "%s", dev->driver_version);
    p->total_memory = dev->total_memory;
    p->alignment = dev->alignment;
    p->supported_dtypes = kernel_dtypes(dev);
    p->multiprocessor_count = dev->compute_units;
}

/* The driver library writes only the whole fields the caller's struct_size
 * covers (an older caller's struct is smaller) and sets struct_size to what it
 * wrote (fl_driver.h, section 3). */
fl_status plg_device_properties(int32_t device, fl_device_properties *props) {
    FLK_TRY(plg_devices_init(NULL));
    if (props && !plg_device_valid(device))
        return plg_bad_device(device, "device_properties");
    fl_device_properties full;
    fill_properties(device, &full);
    return fld_device_properties_out(props, &full, device);
}
