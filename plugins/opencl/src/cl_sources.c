/*
 * cl_sources.c -- the OpenCL C of every kernel family, as strings in the
 * library (program.c compiles them per device and dtype).
 *
 * Each src/cl/<family>.cl.h is the OpenCL C wrapped in FLCL_PROGRAM(name, ...),
 * which stringifies it here: the kernels travel inside the plugin's one
 * binary, so the bytes a certificate hashes (docs/vendors/certify.md "Keys and certificates")
 * include them, and no file lookup beside the library can fail or be swapped.
 * The price: those files hold no preprocessor directives of their own (the
 * C preprocessor would run them); program.c's prelude supplies every #define
 * and #pragma.  This file includes nothing else, so no C macro (math.h's
 * INFINITY, isnan) rewrites the OpenCL C on its way into the string.
 */
#define FLCL_PROGRAM(name, ...) \
    __attribute__((visibility("hidden"))) extern const char plg_cl_src_##name[]; \
    const char plg_cl_src_##name[] = #__VA_ARGS__;

#include "cl/ew.cl.h"
#include "cl/reduce.cl.h"
#include "cl/gemm.cl.h"
#include "cl/nn.cl.h"
