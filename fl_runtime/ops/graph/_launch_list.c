/* fl_runtime.ops.graph._launch_list: a graph plan's consecutive launches, compiled (ops/graph/launch_list.py).
 *
 *   run_launches(program, addresses, workspace, stream) -> None | (position, status)
 *       `program` (bytes) is native uint64 words, per launch:
 *           launch_kernel, kernel entry, fl_arg array, nargs, npatches,
 *           then npatches x (address of an fl_tensor's `base` field, index, byte offset);
 *       each patch writes the fl_tensor's (base, byte_offset) pair: index UINT64_MAX means the
 *       plan's workspace (workspace, offset); any other index is the pair at that position of
 *       `addresses` (a buffer of native uint64 pairs, base and byte offset), with `offset`
 *       added to its byte offset (modulo 2^64: a view may start before its root's offset).
 *       Then the launch: launch_kernel(stream, entry, args, nargs).  Stops at the first launch
 *       that does not return FL_SUCCESS and returns its position and status.
 *
 * Why C.  Per launch the Python loop spends ~1.5 us writing a few pairs and crossing cffi
 * (docs/users/graph-path.md); here a launch costs the vendor's launch_kernel and a few stores.
 * The interpreter lock is released for the whole segment: a vendor's launch may block on a
 * full queue, and every byte written belongs to this thread's plan (launch_list.py: a plan's
 * arenas are per thread).
 *
 * The launch goes through the header's own fl_api.launch_kernel type (fl_abi.h is the ABI's one
 * source of truth), so a change of its signature fails this build instead of calling wrongly.
 * Not built: launch_list.py runs its Python loop (fl_runtime/compiled.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "fl_abi.h"

#define HEADER_WORDS 5      /* launch_kernel, entry, args, nargs, npatches */
#define PATCH_WORDS 3       /* at, index, offset */
#define WORKSPACE UINT64_MAX

typedef struct {
    Py_ssize_t failed;      /* position of the launch that failed, -1 if none */
    fl_status status;
    int malformed;          /* the program or an index is out of bounds */
} outcome;

static int patch(const uint64_t *site, const uint64_t *pairs, size_t npairs, uint64_t workspace)
{
    uint64_t pair[2];
    if (site[1] == WORKSPACE) {
        pair[0] = workspace;
        pair[1] = site[2];
    } else if (site[1] < npairs) {
        pair[0] = pairs[2 * site[1]];
        pair[1] = pairs[2 * site[1] + 1] + site[2];
    } else {
        return -1;
    }
    memcpy((void *)(uintptr_t)site[0], pair, sizeof pair);
    return 0;
}

static outcome run(const uint64_t *word, const uint64_t *end, const uint64_t *pairs, size_t npairs,
                   uint64_t workspace, fl_stream stream)
{
    outcome result = {-1, FL_SUCCESS, 0};
    for (Py_ssize_t position = 0; word < end; position++) {
        if (end - word < HEADER_WORDS || (uint64_t)(end - word - HEADER_WORDS) / PATCH_WORDS < word[4]) {
            result.malformed = 1;
            return result;
        }
        fl_api table;       /* only its launch_kernel field is set and read: the header's type */
        memcpy(&table.launch_kernel, &word[0], sizeof table.launch_kernel);
        const uint64_t *site = word + HEADER_WORDS;
        for (uint64_t i = 0; i < word[4]; i++, site += PATCH_WORDS) {
            if (patch(site, pairs, npairs, workspace) < 0) {
                result.malformed = 1;
                return result;
            }
        }
        fl_status status = table.launch_kernel(stream, (const fl_kernel_entry *)(uintptr_t)word[1],
                                               (const fl_arg *)(uintptr_t)word[2], (uint32_t)word[3]);
        if (status != FL_SUCCESS) {
            result.failed = position;
            result.status = status;
            return result;
        }
        word = site;
    }
    return result;
}

static PyObject *run_launches(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "_launch_list.run_launches takes 4 arguments "
                        "(program, addresses, workspace, stream)");
        return NULL;
    }
    unsigned long long workspace = PyLong_AsUnsignedLongLong(args[2]);
    unsigned long long stream = PyLong_AsUnsignedLongLong(args[3]);
    if (PyErr_Occurred())
        return NULL;
    Py_buffer program, addresses;
    if (PyObject_GetBuffer(args[0], &program, PyBUF_SIMPLE) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[1], &addresses, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&program);
        return NULL;
    }
    const uint64_t *words = program.buf;
    outcome result;
    Py_BEGIN_ALLOW_THREADS
    result = run(words, words + program.len / 8, addresses.buf, (size_t)addresses.len / 16,
                 (uint64_t)workspace, (fl_stream)(uintptr_t)stream);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&addresses);
    PyBuffer_Release(&program);
    if (result.malformed) {
        PyErr_SetString(PyExc_ValueError, "_launch_list.run_launches: a malformed program (a patch index "
                        "past the address list, or a truncated launch)");
        return NULL;
    }
    if (result.failed < 0)
        Py_RETURN_NONE;
    return Py_BuildValue("(ni)", result.failed, (int)result.status);
}

static PyMethodDef methods[] = {
    {"run_launches", (PyCFunction)(void (*)(void))run_launches, METH_FASTCALL,
     "run_launches(program, addresses, workspace, stream) -> None | (position, status)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_launch_list", "A graph plan's consecutive launches, compiled.",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__launch_list(void)
{
    return PyModule_Create(&module_def);
}
