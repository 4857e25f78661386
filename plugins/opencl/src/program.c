/*
 * program.c -- the OpenCL programs: one per (device, family, dtype), built
 * the first time a kernel of that family runs on that dtype, and cached on
 * disk.  Calls device.c and clapi.c.
 *
 * SOURCE.  A program is two strings: a prelude written here (the dtype's T,
 * ACC, LD and ST, and the op codes of clk.h as #defines, so the host and the
 * device read one list) and the family's OpenCL C (src/cl/, cl_sources.c).
 * Floating-point contraction is off, so a * b + c rounds twice as PyTorch's
 * CPU loops do; where PyTorch fuses, the OpenCL C calls fma explicitly.
 *
 * CACHE.  Compiling OpenCL C is slow on some drivers (PoCL runs LLVM: about a
 * second per program), so a built program's binary is kept in
 * $FL_OPENCL_CACHE_DIR (default $XDG_CACHE_HOME/torch_fl/opencl, else
 * ~/.cache/torch_fl/opencl; "off" disables it), one file per program, named
 * by a hash of the platform, device, device and driver versions, build
 * options and both source strings: a new driver or a changed kernel source
 * misses the cache and rebuilds.  Files are written to a temporary name and
 * renamed, so concurrent processes never read a torn binary; one that fails
 * to load is removed and rebuilt from source.
 *
 * FAILURE.  A driver whose compiler rejects a program (or its options,
 * $FL_OPENCL_BUILD_OPTIONS) gets FL_ERROR_NOT_SUPPORTED for every launch of
 * that family and dtype, with the head of the build log: the runtime runs
 * those ops through its fallbacks and the other families keep working.  The
 * verdict is kept for the process, so a failing build is tried once.
 */
#include "internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

extern const char plg_cl_src_ew[], plg_cl_src_reduce[], plg_cl_src_gemm[], plg_cl_src_nn[];

static const char *const FAMILY_NAMES[CLK_FAMILY_COUNT] = {"ew", "reduce", "gemm", "nn"};
#define MAX_KERNELS 24
#define DTYPE_SLOTS 3       /* float32, float64, float16 */

typedef struct program {
    int state;              /* 0 not tried, 1 ready, -1 failed */
    cl_program program;
    char failure[FLD_MESSAGE_MAX];
    plg_kernel kernels[MAX_KERNELS];
    int nkernels;
} program;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;   /* every program's state */
static program g_programs[PLG_MAX_DEVICES][CLK_FAMILY_COUNT][DTYPE_SLOTS];

static const char *family_source(clk_family family) {
    switch (family) {
    case CLK_EW: return plg_cl_src_ew;
    case CLK_REDUCE: return plg_cl_src_reduce;
    case CLK_GEMM: return plg_cl_src_gemm;
    default: return plg_cl_src_nn;
    }
}

static int dtype_slot(int32_t dtype) {
    return dtype == FL_FLOAT32 ? 0 : dtype == FL_FLOAT64 ? 1 : dtype == FL_FLOAT16 ? 2 : -1;
}

/* ---- the prelude ------------------------------------------------------------------- */

typedef struct text {
    char *data;
    size_t used, cap;
} text;

static void add(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(text *t, const char *fmt, ...) {
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int n = vsnprintf(t->data ? t->data + t->used : NULL, t->data ? t->cap - t->used : 0, fmt, ap);
        va_end(ap);
        if (n < 0)
            return;
        if (t->data && t->used + (size_t)n < t->cap) {
            t->used += (size_t)n;
            return;
        }
        size_t cap = (t->cap ? 2 * t->cap : 4096) + (size_t)n;
        char *data = realloc(t->data, cap);
        if (!data)
            return;
        t->data = data;
        t->cap = cap;
    }
}

static const char *const DTYPE_PRELUDE[DTYPE_SLOTS] = {
    "typedef float T;\ntypedef float ACC;\ntypedef float8 ACC8;\n#define KF(x) x##f\n"
    "#define LD(p, i) ((p)[i])\n#define ST(p, i, v) ((p)[i] = (v))\n"
    "#define LD8(p, i) vload8(0, (p) + (i))\n#define ST8(p, i, v) vstore8((v), 0, (p) + (i))\n",
    "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n"
    "typedef double T;\ntypedef double ACC;\ntypedef double8 ACC8;\n#define KF(x) x\n"
    "#define LD(p, i) ((p)[i])\n#define ST(p, i, v) ((p)[i] = (v))\n"
    "#define LD8(p, i) vload8(0, (p) + (i))\n#define ST8(p, i, v) vstore8((v), 0, (p) + (i))\n",
    /* float16 is stored as half and computed in float (core OpenCL 1.2 half
     * loads/stores round to nearest even, as PyTorch's conversions) */
    "typedef half T;\ntypedef float ACC;\ntypedef float8 ACC8;\n#define KF(x) x##f\n"
    "#define LD(p, i) vload_half((i), (p))\n#define ST(p, i, v) vstore_half((v), (i), (p))\n"
    "#define LD8(p, i) vload_half8(0, (p) + (i))\n#define ST8(p, i, v) vstore_half8((v), 0, (p) + (i))\n",
};

static char *prelude(int slot) {
    text t = {0};
    add(&t, "#pragma OPENCL FP_CONTRACT OFF\n%s", DTYPE_PRELUDE[slot]);
    add(&t, "#define CLK_MAX_DIMS %d\n#define CLK_MAX_OPERANDS %d\n#define CLK_GROUP %d\n", CLK_MAX_DIMS,
        CLK_MAX_OPERANDS, CLK_GROUP);
    add(&t, "#define FL_IS_HALF %d\n#define FL_IS_DOUBLE %d\n", slot == 2, slot == 1);
#define PLG_DEFINE_OP(name) add(&t, "#define " #name " %d\n", CLK_##name);
    CLK_UNARY_OPS(PLG_DEFINE_OP)
    CLK_BINARY_OPS(PLG_DEFINE_OP)
    CLK_COMPARE_OPS(PLG_DEFINE_OP)
    CLK_TERNARY_OPS(PLG_DEFINE_OP)
    CLK_REDUCE_OPS(PLG_DEFINE_OP)
#undef PLG_DEFINE_OP
#define PLG_DEFINE_CHECK(name, value) add(&t, "#define " #name " %d\n", value);
    CLK_CHECKS(PLG_DEFINE_CHECK)
#undef PLG_DEFINE_CHECK
    return t.data;
}

/* -w: some compilers print warnings on the process's stderr (PoCL about its own
 * double8 ABI); errors still fail the build and reach the decline message */
static void build_options(const plg_device *dev, char *out, size_t cap) {
    const char *extra = getenv("FL_OPENCL_BUILD_OPTIONS");
    snprintf(out, cap, "-cl-std=CL1.2 -w%s%s%s", dev->correct_divide ? " -cl-fp32-correctly-rounded-divide-sqrt" : "",
             extra && *extra ? " " : "", extra && *extra ? extra : "");
}

/* ---- the disk cache ------------------------------------------------------------------ */

static uint64_t fnv1a(uint64_t hash, const char *data) {
    for (const unsigned char *p = (const unsigned char *)data;; p++) {
        hash = (hash ^ *p) * 1099511628211ull;
        if (!*p)
            return hash;
    }
}

/* The cache directory (created), or 0 when the cache is off or unusable. */
static int cache_dir(char *out, size_t cap) {
    const char *chosen = getenv("FL_OPENCL_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (chosen && !strcmp(chosen, "off"))
        return 0;
    if (chosen && *chosen)
        snprintf(out, cap, "%s", chosen);
    else if (xdg && *xdg)
        snprintf(out, cap, "%s/torch_fl/opencl", xdg);
    else if (home && *home)
        snprintf(out, cap, "%s/.cache/torch_fl/opencl", home);
    else
        return 0;
    char partial[1024];
    for (size_t i = 1, n = strlen(out); i <= n; i++) {   /* mkdir -p */
        if (out[i] == '/' || out[i] == '\0') {
            snprintf(partial, sizeof partial, "%.*s", (int)i, out);
            if (mkdir(partial, 0700) != 0 && errno != EEXIST)
                return 0;
        }
    }
    return 1;
}

static int cache_path(const plg_device *dev, clk_family family, int slot, const char *const *sources,
                      const char *options, char *out, size_t cap) {
    char dir[900];
    if (!cache_dir(dir, sizeof dir))
        return 0;
    const char *parts[] = {dev->platform_name, dev->name, dev->device_version, dev->driver_version, options,
                           sources[0], sources[1]};
    uint64_t a = 1469598103934665603ull, b = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        a = fnv1a(a, parts[i]);
        b = fnv1a(b ^ a, parts[i]);
    }
    snprintf(out, cap, "%s/%s-%d-%016llx%016llx.bin", dir, FAMILY_NAMES[family], slot, (unsigned long long)a,
             (unsigned long long)b);
    return 1;
}

static unsigned char *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    unsigned char *data = NULL;
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (n > 0 && fseek(f, 0, SEEK_SET) == 0 && (data = malloc((size_t)n)) &&
        fread(data, 1, (size_t)n, f) != (size_t)n) {
        free(data);
        data = NULL;
    }
    fclose(f);
    *size = (size_t)n;
    return data;
}

static void write_file(const char *path, const unsigned char *data, size_t size) {
    char partial[1200];
    snprintf(partial, sizeof partial, "%s.%d.partial", path, (int)getpid());
    FILE *f = fopen(partial, "wb");
    if (!f)
        return;   /* an unwritable cache only costs the next start its builds */
    int ok = fwrite(data, 1, size, f) == size;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(partial, path) != 0)
        unlink(partial);
}

/* This device's binary of a built program (a program of a shared context
 * holds one per device of the context). */
static void store_binary(const plg_device *dev, cl_program prog, const char *path) {
    const plg_cl_api *cl = plg_cl();
    cl_uint ndevices = 0;
    if (cl->GetProgramInfo(prog, CL_PROGRAM_NUM_DEVICES, sizeof ndevices, &ndevices, NULL) != CL_SUCCESS ||
        ndevices == 0 || ndevices > PLG_MAX_DEVICES)
        return;
    cl_device_id devices[PLG_MAX_DEVICES];
    size_t sizes[PLG_MAX_DEVICES] = {0};
    unsigned char *binaries[PLG_MAX_DEVICES] = {0};
    cl->GetProgramInfo(prog, CL_PROGRAM_DEVICES, ndevices * sizeof devices[0], devices, NULL);
    cl->GetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, ndevices * sizeof sizes[0], sizes, NULL);
    for (cl_uint i = 0; i < ndevices; i++)
        if (devices[i] == dev->id && sizes[i] > 0)
            binaries[i] = malloc(sizes[i]);
    if (cl->GetProgramInfo(prog, CL_PROGRAM_BINARIES, ndevices * sizeof binaries[0], binaries, NULL) == CL_SUCCESS)
        for (cl_uint i = 0; i < ndevices; i++)
            if (binaries[i])
                write_file(path, binaries[i], sizes[i]);
    for (cl_uint i = 0; i < ndevices; i++)
        free(binaries[i]);
}

static cl_program load_binary(const plg_device *dev, const char *path, const char *options) {
    size_t size = 0;
    unsigned char *data = read_file(path, &size);
    if (!data)
        return NULL;
    const plg_cl_api *cl = plg_cl();
    const unsigned char *binary = data;
    cl_int err = CL_SUCCESS, binary_status = CL_SUCCESS;
    cl_program prog = cl->CreateProgramWithBinary(dev->context, 1, &dev->id, &size, &binary, &binary_status, &err);
    free(data);
    if (prog && cl->BuildProgram(prog, 1, &dev->id, options, NULL, NULL) != CL_SUCCESS) {
        cl->ReleaseProgram(prog);
        prog = NULL;
    }
    if (!prog)
        unlink(path);   /* stale or torn: rebuilt from source below */
    return prog;
}

/* ---- building ---------------------------------------------------------------------- */

static void build_log(const plg_device *dev, cl_program prog, char *out, size_t cap) {
    size_t size = 0;
    out[0] = '\0';
    if (plg_cl()->GetProgramBuildInfo(prog, dev->id, CL_PROGRAM_BUILD_LOG, 0, NULL, &size) != CL_SUCCESS || !size)
        return;
    char *log = malloc(size + 1);
    if (log && plg_cl()->GetProgramBuildInfo(prog, dev->id, CL_PROGRAM_BUILD_LOG, size, log, NULL) == CL_SUCCESS) {
        log[size] = '\0';
        for (char *c = log; *c; c++)
            if (*c == '\n' || *c == '\r')
                *c = ' ';
        snprintf(out, cap, "%s", log);
    }
    free(log);
}

static cl_program build_from_source(int32_t device, clk_family family, int slot, const char *const *sources,
                                    const char *options, program *p) {
    const plg_device *dev = plg_device_get(device);
    const plg_cl_api *cl = plg_cl();
    cl_int err = CL_SUCCESS;
    cl_program prog = cl->CreateProgramWithSource(dev->context, 2, (const char **)sources, NULL, &err);
    if (prog && (err = cl->BuildProgram(prog, 1, &dev->id, options, NULL, NULL)) == CL_SUCCESS)
        return prog;
    static const char *const dtype_names[DTYPE_SLOTS] = {"float32", "float64", "float16"};
    char log[400] = "";
    if (prog) {
        build_log(dev, prog, log, sizeof log);
        cl->ReleaseProgram(prog);
    }
    snprintf(p->failure, sizeof p->failure, "%s cannot build the OpenCL program '%s' for %s (clBuildProgram with "
             "options '%s': %s)%s%s; its ops run through Torch-FL's fallbacks", plg_device_label(device),
             FAMILY_NAMES[family], dtype_names[slot], options, plg_cl_error_name(err), log[0] ? ": " : "", log);
    return NULL;
}

static void build(int32_t device, clk_family family, int slot, program *p) {
    const plg_device *dev = plg_device_get(device);
    char *head = prelude(slot);
    const char *sources[2] = {head ? head : "", family_source(family)};
    char options[512], path[1100];
    build_options(dev, options, sizeof options);
    int cached = cache_path(dev, family, slot, sources, options, path, sizeof path);
    cl_program prog = cached ? load_binary(dev, path, options) : NULL;
    if (!prog) {
        prog = build_from_source(device, family, slot, sources, options, p);
        if (prog && cached)
            store_binary(dev, prog, path);
    }
    free(head);
    p->program = prog;
    p->state = prog ? 1 : -1;
}

static fl_status dtype_refused(int32_t device, int32_t dtype) {
    return fld_fail(FL_ERROR_NOT_SUPPORTED, "%s has no %s kernels (%s)", plg_device_label(device),
                    flk_dtype_name(dtype), dtype == FL_FLOAT64 ? "no cl_khr_fp64" :
                    dtype == FL_FLOAT16 ? "no cl_khr_fp16; FL_OPENCL_FP16=on computes float16 in float" :
                    "not a float dtype");
}

/* The program (state decided) for a device, family and dtype; status says why not. */
static fl_status get_program(int32_t device, clk_family family, int32_t dtype, program **out) {
    int slot = dtype_slot(dtype);
    const plg_device *dev = plg_device_get(device);
    if (slot < 0 || (slot == 1 && !dev->fp64) || (slot == 2 && !dev->fp16))
        return dtype_refused(device, dtype);
    program *p = &g_programs[device][family][slot];
    pthread_mutex_lock(&g_lock);
    if (p->state == 0)
        build(device, family, slot, p);   /* under the lock: one build per program */
    int state = p->state;
    pthread_mutex_unlock(&g_lock);
    *out = p;
    return state > 0 ? FL_SUCCESS : fld_fail(FL_ERROR_NOT_SUPPORTED, "%s", p->failure);
}

fl_status plg_program_ready(int32_t device, clk_family family, int32_t dtype) {
    program *p;
    return get_program(device, family, dtype, &p);
}

fl_status plg_program_kernel(int32_t device, clk_family family, int32_t dtype, const char *name,
                             plg_kernel **out) {
    program *p;
    FLK_TRY(get_program(device, family, dtype, &p));
    fl_status status = FL_SUCCESS;
    pthread_mutex_lock(&g_lock);
    plg_kernel *found = NULL;
    for (int i = 0; i < p->nkernels && !found; i++)
        if (!strcmp(p->kernels[i].name, name))
            found = &p->kernels[i];
    if (!found && p->nkernels < MAX_KERNELS) {
        cl_int err = CL_SUCCESS;
        cl_kernel kernel = plg_cl()->CreateKernel(p->program, name, &err);
        if (kernel) {
            found = &p->kernels[p->nkernels++];
            found->name = name;   /* a string literal of the kernel file */
            found->kernel = kernel;
            pthread_mutex_init(&found->lock, NULL);
        } else {
            status = fld_fail(FL_ERROR_INTERNAL, "%s: the OpenCL program '%s' has no kernel '%s' (%s)",
                              plg_device_label(device), FAMILY_NAMES[family], name, plg_cl_error_name(err));
        }
    } else if (!found) {
        status = fld_fail(FL_ERROR_INTERNAL, "program '%s' has more than %d kernels", FAMILY_NAMES[family],
                          MAX_KERNELS);
    }
    pthread_mutex_unlock(&g_lock);
    *out = found;
    return status;
}
