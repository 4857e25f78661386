/* fl_runtime.ops.eager._program: the two per-call steps of a replayed launch program, compiled.
 *
 *   call_key(args: tuple) -> tuple
 *       ops/eager/fast_path.call_key for a call without keyword arguments: the same key, value for
 *       value (fast_path.value_key's docstring is the specification; tests/runtime/test_compiled_helpers.py
 *       checks the two agree on generated calls);
 *   patch_tensors(address, blob, inputs, outputs, values, outs) -> None
 *       ops/eager/marshal.replay's common sites: copy the template's bytes `blob` to the arena at
 *       `address`, then write each tensor's (storage base, byte offset) pair at its site:
 *       `inputs` holds (at, index into values, itemsize), `outputs` (at, index into outs, itemsize).
 *
 * Why C.  Both are a handful of Python operations per tensor, but each costs a frame, a map,
 * a tuple or a struct call around the few torch getters that do the work; a tiny op paid ~1.2 us
 * for its key and ~1.6 us for its replay (docs/contributors/compiled-helpers.md; docs/benchmarks/index.md
 * "Where a tiny op's time goes").
 *
 * No torch headers: tensors are read through their Python methods (shape, stride(), dtype,
 * get_device(), data_ptr(), storage_offset()), exactly what the Python code calls.  A tensor is
 * an instance of torch.Tensor (configure() gives the type) by PyObject_TypeCheck: torch.Tensor's
 * metaclass does not override isinstance, so this is isinstance's answer.
 *
 * Not built: fast_path.py and marshal.py run their Python versions (fl_runtime/compiled.py;
 * TORCH_FL_PURE_PYTHON=1 forces them).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static PyTypeObject *tensor_type = NULL;
static PyObject *s_shape, *s_stride, *s_dtype, *s_get_device, *s_data_ptr, *s_storage_offset;

static PyObject *value_key(PyObject *value);

/* (shape, stride(), dtype, get_device()) */
static PyObject *tensor_key(PyObject *tensor)
{
    PyObject *key = PyTuple_New(4);
    if (key == NULL)
        return NULL;
    PyObject *part = PyObject_GetAttr(tensor, s_shape);
    if (part == NULL)
        goto fail;
    PyTuple_SET_ITEM(key, 0, part);
    if ((part = PyObject_CallMethodNoArgs(tensor, s_stride)) == NULL)
        goto fail;
    PyTuple_SET_ITEM(key, 1, part);
    if ((part = PyObject_GetAttr(tensor, s_dtype)) == NULL)
        goto fail;
    PyTuple_SET_ITEM(key, 2, part);
    if ((part = PyObject_CallMethodNoArgs(tensor, s_get_device)) == NULL)
        goto fail;
    PyTuple_SET_ITEM(key, 3, part);
    return key;
fail:
    Py_DECREF(key);         /* unset items are NULL, which tuple dealloc skips */
    return NULL;
}

/* (cls, *entries): a float entry (subclasses too) stays itself, anything else its value_key */
static PyObject *sequence_key(PyObject *sequence)
{
    PyObject *fast = PySequence_Fast(sequence, "call_key: a list or tuple");
    if (fast == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    PyObject **items = PySequence_Fast_ITEMS(fast);
    PyObject *key = PyTuple_New(n + 1);
    if (key == NULL) {
        Py_DECREF(fast);
        return NULL;
    }
    Py_INCREF(Py_TYPE(sequence));
    PyTuple_SET_ITEM(key, 0, (PyObject *)Py_TYPE(sequence));
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *part;
        if (PyFloat_Check(items[i])) {
            Py_INCREF(items[i]);
            part = items[i];
        } else if ((part = value_key(items[i])) == NULL) {
            Py_DECREF(key);
            Py_DECREF(fast);
            return NULL;
        }
        PyTuple_SET_ITEM(key, i + 1, part);
    }
    Py_DECREF(fast);
    return key;
}

static PyObject *value_key(PyObject *value)
{
    PyTypeObject *cls = Py_TYPE(value);
    if (PyObject_TypeCheck(value, tensor_type))
        return tensor_key(value);
    if (cls == &PyFloat_Type || (cls != &PyBool_Type && PyFloat_Check(value))) {
        Py_INCREF(&PyFloat_Type);       /* floats are patched per call: their type only */
        return (PyObject *)&PyFloat_Type;
    }
    if (cls == &PyList_Type || cls == &PyTuple_Type) {
        if (Py_EnterRecursiveCall(" in call_key"))
            return NULL;
        PyObject *key = sequence_key(value);
        Py_LeaveRecursiveCall();
        return key;
    }
    return PyTuple_Pack(2, (PyObject *)cls, value);
}

static PyObject *call_key(PyObject *module, PyObject *args)
{
    (void)module;
    if (tensor_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_program.call_key before _program.configure");
        return NULL;
    }
    if (!PyTuple_CheckExact(args)) {
        PyErr_SetString(PyExc_TypeError, "_program.call_key takes the call's positional arguments as a tuple");
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    PyObject *key = PyTuple_New(n);
    if (key == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *part = value_key(PyTuple_GET_ITEM(args, i));
        if (part == NULL) {
            Py_DECREF(key);
            return NULL;
        }
        PyTuple_SET_ITEM(key, i, part);
    }
    return key;
}

static int long_method(PyObject *tensor, PyObject *name, long long *into)
{
    PyObject *result = PyObject_CallMethodNoArgs(tensor, name);
    if (result == NULL)
        return -1;
    *into = PyLong_AsLongLong(result);
    Py_DECREF(result);
    return (*into == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* One tensor site: (at, index, itemsize) over `from`; as marshal.replay. */
static int patch_site(char *arena, Py_ssize_t size, PyObject *site, PyObject *from)
{
    if (!PyTuple_Check(site) || PyTuple_GET_SIZE(site) != 3) {
        PyErr_SetString(PyExc_TypeError, "_program.patch_tensors: a site is (at, index, itemsize)");
        return -1;
    }
    Py_ssize_t at, index;
    long long itemsize;
    /* each checked before the next call: the C API must not be called with an exception set */
    if ((at = PyLong_AsSsize_t(PyTuple_GET_ITEM(site, 0))) == -1 && PyErr_Occurred())
        return -1;
    if ((index = PyLong_AsSsize_t(PyTuple_GET_ITEM(site, 1))) == -1 && PyErr_Occurred())
        return -1;
    if ((itemsize = PyLong_AsLongLong(PyTuple_GET_ITEM(site, 2))) == -1 && PyErr_Occurred())
        return -1;
    if (at < 0 || at + 16 > size) {
        PyErr_SetString(PyExc_ValueError, "_program.patch_tensors: a site outside the template");
        return -1;
    }
    PyObject *tensor = PySequence_GetItem(from, index);
    if (tensor == NULL)
        return -1;
    long long storage_offset, data_ptr;
    int failed = long_method(tensor, s_storage_offset, &storage_offset) < 0 ||
                 long_method(tensor, s_data_ptr, &data_ptr) < 0;
    Py_DECREF(tensor);
    if (failed)
        return -1;
    int64_t offset = storage_offset * itemsize;
    int64_t base = data_ptr - offset;
    if (base < 0)                   /* an empty tensor, as marshal._tensor writes it */
        base = offset = 0;
    uint64_t pair[2] = {(uint64_t)base, (uint64_t)offset};
    memcpy(arena + at, pair, sizeof pair);
    return 0;
}

static PyObject *patch_tensors(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "_program.patch_tensors takes 6 arguments "
                        "(address, blob, inputs, outputs, values, outs)");
        return NULL;
    }
    unsigned long long address = PyLong_AsUnsignedLongLong(args[0]);
    if (address == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    char *arena = (char *)(uintptr_t)address;
    char *blob;
    Py_ssize_t size;
    if (PyBytes_AsStringAndSize(args[1], &blob, &size) < 0)
        return NULL;
    if (!PyTuple_Check(args[2]) || !PyTuple_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "_program.patch_tensors: the sites are tuples");
        return NULL;
    }
    memcpy(arena, blob, (size_t)size);
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(args[2]); i++)
        if (patch_site(arena, size, PyTuple_GET_ITEM(args[2], i), args[4]) < 0)
            return NULL;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(args[3]); i++)
        if (patch_site(arena, size, PyTuple_GET_ITEM(args[3], i), args[5]) < 0)
            return NULL;
    Py_RETURN_NONE;
}

static PyObject *configure(PyObject *module, PyObject *type)
{
    (void)module;
    if (!PyType_Check(type)) {
        PyErr_SetString(PyExc_TypeError, "_program.configure takes torch.Tensor");
        return NULL;
    }
    Py_INCREF(type);
    Py_XSETREF(tensor_type, (PyTypeObject *)type);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"call_key", call_key, METH_O, "call_key(args: tuple) -> tuple (ops/eager/fast_path.call_key without kwargs)"},
    {"patch_tensors", (PyCFunction)(void (*)(void))patch_tensors, METH_FASTCALL,
     "patch_tensors(address, blob, inputs, outputs, values, outs) (ops/eager/marshal.replay's tensor sites)"},
    {"configure", configure, METH_O, "configure(torch.Tensor)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_program", "The per-call steps of a replayed launch program, compiled.",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__program(void)
{
    if ((s_shape = PyUnicode_InternFromString("shape")) == NULL ||
        (s_stride = PyUnicode_InternFromString("stride")) == NULL ||
        (s_dtype = PyUnicode_InternFromString("dtype")) == NULL ||
        (s_get_device = PyUnicode_InternFromString("get_device")) == NULL ||
        (s_data_ptr = PyUnicode_InternFromString("data_ptr")) == NULL ||
        (s_storage_offset = PyUnicode_InternFromString("storage_offset")) == NULL)
        return NULL;
    return PyModule_Create(&module_def);
}
