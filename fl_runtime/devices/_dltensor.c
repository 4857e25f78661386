/* fl_runtime.devices._dltensor: fl tensors over device blocks, made and freed without Python.
 *
 * The compiled half of devices/storage.py (whose module docstring gives the lifetimes):
 *
 *   wrap(data, device_type, device_index, shape, strides, code, bits, token) -> torch.Tensor
 *       a DLManagedTensor in C memory, handed to torch._C._from_dlpack in a "dltensor" capsule;
 *   collect() -> int
 *       for every tensor PyTorch freed since the last call: release(block), where
 *       token == (release, block) was given to wrap; returns how many it collected;
 *   live() -> int
 *       DLManagedTensors made and not yet freed by PyTorch (the exit report).
 *
 * Why C.  The pure-Python path (storage.py) packs the struct with `struct`, makes the capsule
 * through ctypes and frees through a cffi callback into Python: ~2.8 us of a tiny op's host
 * time (docs/contributors/compiled-helpers.md; docs/benchmarks/index.md "Where a tiny op's time goes").  Here the whole wrap is
 * one call.
 *
 * The deleter never enters Python.  PyTorch calls it when a storage dies: on any thread (an
 * autograd worker, with or without the GIL), while the interpreter unwinds an exception, or
 * during interpreter teardown.  It only pushes the tensor's node onto a lock-free stack (C11
 * atomics; no lock, so a fork() at any moment leaves nothing held); collect(), called by the
 * allocator with the GIL held before it allocates or reports (allocator.py), pops them all and
 * runs each release.  A block thus returns to its pool at the device's next allocation or
 * memory query instead of at the free itself; the allocator already deferred that step (its
 * `_freed` deque), so its order and stream rules are unchanged.
 *
 * The DLPack structs are DLPack v0.8's, as fl_runtime/abi/dlpack.py declares them for the pure
 * path; storage.py checks at import that both agree on the sizes (layout()).
 *
 * Not built (no C compiler at install, or an interpreter without the module): storage.py uses
 * its pure-Python path, with the same behaviour.  TORCH_FL_PURE_PYTHON=1 forces it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct { int32_t device_type; int32_t device_id; } DLDevice;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;
typedef struct {
    void *data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;
    int64_t *strides;
    uint64_t byte_offset;
} DLTensor;
typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensor *);
} DLManagedTensor;

/* One wrapped tensor: the DLManagedTensor PyTorch holds, the token, the freed-stack link and
 * the shape and strides (2 * ndim int64s) the DLTensor points into. */
typedef struct Node {
    DLManagedTensor managed;        /* first: PyTorch's pointer is the node's */
    PyObject *token;                /* (release, block) or None; a strong reference */
    struct Node *next;              /* on the freed stack */
    int64_t dims[];
} Node;

static _Atomic(Node *) freed_head = NULL;
static atomic_llong live_count = 0;
static PyObject *from_dlpack = NULL;    /* torch._C._from_dlpack, given by configure() */

/* DLPack's deleter: any thread, no GIL; see the header comment. */
static void push_freed(DLManagedTensor *managed)
{
    Node *node = (Node *)managed;
    Node *head = atomic_load_explicit(&freed_head, memory_order_relaxed);
    do {
        node->next = head;
    } while (!atomic_compare_exchange_weak_explicit(&freed_head, &head, node, memory_order_release,
                                                    memory_order_relaxed));
    atomic_fetch_sub_explicit(&live_count, 1, memory_order_relaxed);
}

/* A capsule PyTorch never consumed (from_dlpack failed): its tensor is freed as if PyTorch had. */
static void capsule_destructor(PyObject *capsule)
{
    if (PyCapsule_IsValid(capsule, "dltensor")) {
        DLManagedTensor *managed = PyCapsule_GetPointer(capsule, "dltensor");
        if (managed != NULL && managed->deleter != NULL)
            managed->deleter(managed);
    }
}

static int read_dims(PyObject *sequence, int64_t *into, Py_ssize_t ndim, const char *what)
{
    PyObject *fast = PySequence_Fast(sequence, what);
    if (fast == NULL)
        return -1;
    if (PySequence_Fast_GET_SIZE(fast) != ndim) {
        Py_DECREF(fast);
        PyErr_Format(PyExc_ValueError, "_dltensor.wrap: %s has %zd entries, shape has %zd", what,
                     PySequence_Fast_GET_SIZE(fast), ndim);
        return -1;
    }
    PyObject **items = PySequence_Fast_ITEMS(fast);
    for (Py_ssize_t i = 0; i < ndim; i++) {
        long long value = PyLong_AsLongLong(items[i]);
        if (value == -1 && PyErr_Occurred()) {
            Py_DECREF(fast);
            return -1;
        }
        into[i] = value;
    }
    Py_DECREF(fast);
    return 0;
}

static PyObject *wrap(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "_dltensor.wrap takes 8 arguments "
                        "(data, device_type, device_index, shape, strides, code, bits, token)");
        return NULL;
    }
    if (from_dlpack == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_dltensor.wrap before _dltensor.configure");
        return NULL;
    }
    /* Each conversion is checked before the next call: the C API must not be called with
     * an exception set. */
    unsigned long long data = PyLong_AsUnsignedLongLong(args[0]);
    if (data == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    long fields[4];                 /* device_type, device_index, code, bits */
    const int at[4] = {1, 2, 5, 6};
    for (int i = 0; i < 4; i++) {
        fields[i] = PyLong_AsLong(args[at[i]]);
        if (fields[i] == -1 && PyErr_Occurred())
            return NULL;
    }
    long device_type = fields[0], device_index = fields[1], code = fields[2], bits = fields[3];
    Py_ssize_t ndim = PyObject_Length(args[3]);
    if (ndim < 0)
        return NULL;
    Node *node = malloc(sizeof(Node) + 2 * (size_t)ndim * sizeof(int64_t));
    if (node == NULL)
        return PyErr_NoMemory();
    if (read_dims(args[3], node->dims, ndim, "shape") < 0 ||
        read_dims(args[4], node->dims + ndim, ndim, "strides") < 0) {
        free(node);
        return NULL;
    }
    DLTensor *t = &node->managed.dl_tensor;
    t->data = (void *)(uintptr_t)data;
    t->device.device_type = (int32_t)device_type;
    t->device.device_id = (int32_t)device_index;
    t->ndim = (int32_t)ndim;
    t->dtype.code = (uint8_t)code;
    t->dtype.bits = (uint8_t)bits;
    t->dtype.lanes = 1;
    t->shape = node->dims;
    t->strides = node->dims + ndim;
    t->byte_offset = 0;
    node->managed.manager_ctx = NULL;
    node->managed.deleter = push_freed;
    Py_INCREF(args[7]);
    node->token = args[7];
    node->next = NULL;
    atomic_fetch_add_explicit(&live_count, 1, memory_order_relaxed);
    /* From here the node is owned by the capsule (its destructor) or by PyTorch (the deleter):
     * either way it reaches the freed stack, and collect() frees it. */
    PyObject *capsule = PyCapsule_New(&node->managed, "dltensor", capsule_destructor);
    if (capsule == NULL) {
        push_freed(&node->managed);
        return NULL;
    }
    PyObject *tensor = PyObject_CallOneArg(from_dlpack, capsule);
    Py_DECREF(capsule);
    return tensor;
}

/* Run every freed tensor's release; the GIL is held (a module function). */
static PyObject *collect(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    if (atomic_load_explicit(&freed_head, memory_order_relaxed) == NULL)
        return PyLong_FromLong(0);
    Node *node = atomic_exchange_explicit(&freed_head, NULL, memory_order_acquire);
    long count = 0;
    while (node != NULL) {
        Node *next = node->next;
        PyObject *token = node->token;
        free(node);
        if (PyTuple_Check(token) && PyTuple_GET_SIZE(token) == 2) {
            PyObject *done = PyObject_CallOneArg(PyTuple_GET_ITEM(token, 0), PyTuple_GET_ITEM(token, 1));
            if (done == NULL)       /* a release failing must not keep the other blocks */
                PyErr_WriteUnraisable(token);
            Py_XDECREF(done);
        }
        Py_DECREF(token);
        count++;
        node = next;
    }
    return PyLong_FromLong(count);
}

static PyObject *live(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    return PyLong_FromLongLong(atomic_load_explicit(&live_count, memory_order_relaxed));
}

static PyObject *configure(PyObject *module, PyObject *callable)
{
    (void)module;
    if (!PyCallable_Check(callable)) {
        PyErr_SetString(PyExc_TypeError, "_dltensor.configure takes torch._C._from_dlpack");
        return NULL;
    }
    Py_INCREF(callable);
    Py_XSETREF(from_dlpack, callable);
    Py_RETURN_NONE;
}

/* (sizeof(DLManagedTensor), offset of deleter): storage.py compares them with dlpack.py's. */
static PyObject *layout(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    return Py_BuildValue("(nn)", (Py_ssize_t)sizeof(DLManagedTensor),
                         (Py_ssize_t)offsetof(DLManagedTensor, deleter));
}

static PyMethodDef methods[] = {
    {"wrap", (PyCFunction)(void (*)(void))wrap, METH_FASTCALL,
     "wrap(data, device_type, device_index, shape, strides, code, bits, token) -> torch.Tensor"},
    {"collect", collect, METH_NOARGS, "Run the release of every tensor freed since the last call."},
    {"live", live, METH_NOARGS, "DLManagedTensors made and not yet freed."},
    {"configure", configure, METH_O, "configure(torch._C._from_dlpack)"},
    {"layout", layout, METH_NOARGS, "(sizeof(DLManagedTensor), offsetof(DLManagedTensor, deleter))"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_dltensor", "fl tensors over device blocks, made and freed without Python.",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__dltensor(void)
{
    return PyModule_Create(&module_def);
}
