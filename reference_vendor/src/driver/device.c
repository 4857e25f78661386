/*
 * device.c -- the reference chip's devices: how many there are (from the
 * environment), their properties, and their one-time initialisation, which
 * maps each device's memory.  The bottom of the driver (driver.h lists the
 * layers).
 *
 * Each device's memory is one sparse memfd mapped twice: a PROT_NONE view
 * whose addresses are handed out as fl_devptr (so a host dereference of a
 * device address faults, as it would on a real chip) and a read/write view
 * that only the stream workers use.  The two views are aligned alike, so a
 * device address and its private twin have the same alignment.  memory.c
 * allocates within the region.
 */
#include "driver.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* A build of this plugin posing as another vendor (the two-plugin tests of
 * stable device IDs, docs/operators/plugins.md) gives its
 * devices their own uuids with -DFL_REFERENCE_UUID_PREFIX. */
#ifndef FL_REFERENCE_UUID_PREFIX
#define FL_REFERENCE_UUID_PREFIX "ref"
#endif

#define DEFAULT_DEVICES 2
#define DEFAULT_MEMORY_MB 4096
#define MAX_MEMORY_MB (1024 * 1024) /* 1 TiB: the memory is sparse, only address space */
#define DEFAULT_ALIGNMENT 256
#define MAX_ALIGNMENT (1u << 30)
/* The driver version the devices report; FL_REFERENCE_DRIVER_VERSION overrides it so
 * tests can pose as an old or broken driver (docs/operators/plugins.md "Driver
 * requirements"). */
#define DEFAULT_DRIVER_VERSION "1.0.0"
#define REGION_MIN_ALIGN (2u << 20) /* align the views to 2 MiB (huge-page friendly) */

static drv_device g_devices[DRV_MAX_DEVICES];
static int32_t g_device_count;
static uint32_t g_nprocs;
static fl_status g_init_status = FL_SUCCESS;
static char g_init_message[256];
static char g_driver_version[FL_NAME_MAX] = DEFAULT_DRIVER_VERSION;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* ---- mapping ---------------------------------------------------------------- */

/* Map `len` bytes of `fd` at an address aligned to `align`: reserve extra
 * address space, place the mapping inside it and trim the rest. */
static char *map_aligned(int fd, size_t len, int prot, size_t align) {
    size_t span = len + align;
    char *res = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (res == MAP_FAILED)
        return NULL;
    uintptr_t at = ((uintptr_t)res + align - 1) & ~(uintptr_t)(align - 1);
    char *m = mmap((void *)at, len, prot, MAP_SHARED | MAP_FIXED | MAP_NORESERVE, fd, 0);
    if (m == MAP_FAILED) {
        munmap(res, span);
        return NULL;
    }
    if (at > (uintptr_t)res)
        munmap(res, at - (uintptr_t)res);
    size_t tail = (size_t)((uintptr_t)res + span - (at + len));
    if (tail)
        munmap((char *)(at + len), tail);
    return m;
}

/* Map the device's memory; on failure fill `msg` and return non-success. */
static fl_status map_device_memory(drv_device *dev, char *msg, size_t msg_len) {
    char name[32];
    snprintf(name, sizeof name, "fl-reference-dev%d", dev->index);
    size_t align = dev->alignment > REGION_MIN_ALIGN ? dev->alignment : REGION_MIN_ALIGN;
    dev->memfd = memfd_create(name, MFD_CLOEXEC);
    if (dev->memfd < 0 || ftruncate(dev->memfd, (off_t)dev->total_memory) != 0) {
        snprintf(msg, msg_len, "device %d: memfd of %llu bytes: %s", dev->index,
                 (unsigned long long)dev->total_memory, strerror(errno));
        return FL_ERROR_DRIVER;
    }
    char *dev_view = map_aligned(dev->memfd, dev->total_memory, PROT_NONE, align);
    char *priv_view = map_aligned(dev->memfd, dev->total_memory, PROT_READ | PROT_WRITE, align);
    if (!dev_view || !priv_view) {
        snprintf(msg, msg_len, "device %d: mapping %llu bytes of device memory failed: %s",
                 dev->index, (unsigned long long)dev->total_memory, strerror(errno));
        return FL_ERROR_DRIVER;
    }
    dev->dev_base = (uintptr_t)dev_view;
    dev->priv_base = priv_view;
    pthread_mutex_init(&dev->lock, NULL);
    return FL_SUCCESS;
}

/* ---- settings and initialisation -------------------------------------------- */

/* Parse a whole decimal integer in [lo, hi]; 0 on any other text. */
static int parse_env_int(const char *text, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text || *end != '\0' || v < lo || v > hi)
        return 0;
    *out = v;
    return 1;
}

/* Read an integer setting; a bad value falls back to the default with one
 * line on stderr (init runs once, so each warning appears at most once). */
static long long env_setting(const char *name, long long dflt, long long lo, long long hi,
                             int want_pow2) {
    const char *text = getenv(name);
    long long v;
    if (!text || !*text)
        return dflt;
    if (parse_env_int(text, lo, hi, &v) && (!want_pow2 || (v & (v - 1)) == 0))
        return v;
    fprintf(stderr,
            "torch-fl reference plugin: ignoring %s=\"%s\" (expected %s%lld..%lld); "
            "using %lld\n",
            name, text, want_pow2 ? "a power of two in " : "an integer in ", lo, hi, dflt);
    return dflt;
}

static void init_devices(void) {
    int32_t count = (int32_t)env_setting("FL_REFERENCE_DEVICES", DEFAULT_DEVICES, 1,
                                         DRV_MAX_DEVICES, 0);
    uint64_t mb = (uint64_t)env_setting("FL_REFERENCE_MEMORY_MB", DEFAULT_MEMORY_MB, 1,
                                        MAX_MEMORY_MB, 0);
    uint64_t align = (uint64_t)env_setting("FL_REFERENCE_ALIGNMENT", DEFAULT_ALIGNMENT, 1,
                                           MAX_ALIGNMENT, 1);
    const char *driver = getenv("FL_REFERENCE_DRIVER_VERSION");
    if (driver && *driver)
        snprintf(g_driver_version, sizeof g_driver_version, "%s", driver);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    g_nprocs = n > 0 ? (uint32_t)n : 1;
    for (int32_t i = 0; i < count; i++) {
        drv_device *dev = &g_devices[i];
        dev->index = i;
        dev->total_memory = mb << 20;
        dev->alignment = align;
        g_init_status = map_device_memory(dev, g_init_message, sizeof g_init_message);
        if (g_init_status != FL_SUCCESS)
            return;
    }
    g_device_count = count;
}

fl_status drv_devices_setup(const fl_plugin_initialize_args *args) {
    (void)args;
    pthread_once(&g_once, init_devices);
    if (g_init_status != FL_SUCCESS)
        return fld_fail(g_init_status, "plugin_initialize: device initialisation failed: %s", g_init_message);
    return FL_SUCCESS;
}

drv_device *drv_device_get(int32_t device) {
    pthread_once(&g_once, init_devices);
    if (g_init_status != FL_SUCCESS || device < 0 || device >= g_device_count)
        return NULL;
    return &g_devices[device];
}

fl_status drv_bad_device(int32_t device, const char *call) {
    pthread_once(&g_once, init_devices);
    if (g_init_status != FL_SUCCESS)
        return fld_fail(g_init_status, "%s: device initialisation failed: %s", call,
                        g_init_message);
    return fld_fail(FL_ERROR_INVALID_DEVICE,
                    "%s: invalid device %d (the reference plugin has devices 0..%d)", call,
                    device, g_device_count - 1);
}

fl_status drv_device_count(int32_t *count) {
    if (!count)
        return fld_fail(FL_ERROR_INVALID_POINTER, "device_count(count=NULL): NULL output pointer");
    pthread_once(&g_once, init_devices);
    if (g_init_status != FL_SUCCESS)
        return fld_fail(g_init_status, "device_count: device initialisation failed: %s",
                        g_init_message);
    *count = g_device_count;
    return FL_SUCCESS;
}

static void fill_properties(const drv_device *dev, fl_device_properties *p) {
    memset(p, 0, sizeof *p);
    p->struct_size = sizeof *p;
    snprintf(p->name, sizeof p->name, "Torch-FL Reference CPU Chip");
    snprintf(p->vendor, sizeof p->vendor, "Torch-FL");
    /* Derived from the index only, so it is stable across runs. */
    snprintf(p->uuid, sizeof p->uuid, FL_REFERENCE_UUID_PREFIX "-0000-0000-0000-%04d", dev->index);
    snprintf(p->driver_version, sizeof p->driver_version, "%s", g_driver_version);
    p->total_memory = dev->total_memory;
    p->alignment = dev->alignment;
    p->supported_dtypes = (1ull << FL_DTYPE_COUNT) - 1;
    p->multiprocessor_count = g_nprocs;
    p->flags = 0;
}

/* The driver library writes only the fields the caller's struct_size covers,
 * then sets struct_size to what was written, so a newer caller can tell which
 * fields this (older) plugin filled (fl_driver.h, section 3). */
fl_status drv_device_properties(int32_t device, fl_device_properties *props) {
    drv_device *dev = drv_device_get(device);
    if (props && !dev)
        return drv_bad_device(device, "device_properties");
    fl_device_properties full = {0};
    if (dev)
        fill_properties(dev, &full);
    return fld_device_properties_out(props, &full, device);
}
