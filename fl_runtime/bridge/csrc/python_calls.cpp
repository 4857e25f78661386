#include "python_calls.h"

#include <atomic>
#include <cstdarg>

#include <c10/util/Exception.h>
#include <torch/csrc/Exceptions.h>

namespace fl_bridge {
namespace {

PyObject* g_calls = nullptr;
std::atomic<uint64_t> g_python_entries{0};

// runtime.<method>(args); a new reference, or nullptr with the Python error set.
PyObject* vcall(const char* method, const char* format, va_list args) {
  TORCH_CHECK(g_calls != nullptr, "fl bridge: used before install()");
  PyObject* bound = PyObject_GetAttrString(g_calls, method);
  if (bound == nullptr) {
    return nullptr;
  }
  PyObject* arguments = Py_VaBuildValue(format, args);
  PyObject* result = nullptr;
  if (arguments != nullptr) {
    // Py_BuildValue gives a bare value for a one-item format: calls take a tuple
    PyObject* tuple = PyTuple_Check(arguments) ? arguments : PyTuple_Pack(1, arguments);
    if (tuple != nullptr) {
      result = PyObject_CallObject(bound, tuple);
      if (tuple != arguments) {
        Py_DECREF(tuple);
      }
    }
    Py_DECREF(arguments);
  }
  Py_DECREF(bound);
  return result;
}

PyObject* checked(PyObject* result) {
  if (result == nullptr) {
    throw_python_error();
  }
  return result;
}

} // namespace

void count_python_entry() noexcept {
  g_python_entries.fetch_add(1, std::memory_order_relaxed);
}

uint64_t python_entries() noexcept {
  return g_python_entries.load(std::memory_order_relaxed);
}

bool interpreter_gone() noexcept {
  if (!Py_IsInitialized()) {
    return true;
  }
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

void set_runtime_calls(PyObject* calls) {
  Py_XINCREF(calls);
  Py_XSETREF(g_calls, calls);
}

bool has_runtime_calls() noexcept {
  return g_calls != nullptr;
}

void throw_python_error() {
  python_error error;
  error.persist();
  throw std::move(error);
}

PyObject* call(const char* method, const char* format, ...) {
  Gil gil;
  va_list args;
  va_start(args, format);
  PyObject* result = vcall(method, format, args);
  va_end(args);
  return checked(result);
}

// One body for the typed calls: call, convert with `convert`, check the conversion.
#define FL_TYPED_CALL(type, convert, failed)                  \
  Gil gil;                                                    \
  va_list args;                                               \
  va_start(args, format);                                     \
  PyObject* result = checked(vcall(method, format, args));    \
  va_end(args);                                               \
  type value = convert(result);                               \
  Py_DECREF(result);                                          \
  if ((failed) && PyErr_Occurred()) {                         \
    throw_python_error();                                     \
  }                                                           \
  return value;

int64_t call_int(const char* method, const char* format, ...) {
  FL_TYPED_CALL(int64_t, PyLong_AsLongLong, value == -1)
}

bool call_bool(const char* method, const char* format, ...) {
  FL_TYPED_CALL(int, PyObject_IsTrue, value == -1)
}

double call_double(const char* method, const char* format, ...) {
  FL_TYPED_CALL(double, PyFloat_AsDouble, value == -1.0)
}

#undef FL_TYPED_CALL

void call_void(const char* method, const char* format, ...) {
  Gil gil;
  va_list args;
  va_start(args, format);
  PyObject* result = vcall(method, format, args);
  va_end(args);
  Py_DECREF(checked(result));
}

void call_quietly(const char* method, const char* format, ...) noexcept {
  if (g_calls == nullptr || interpreter_gone()) {
    return;
  }
  Gil gil;
  va_list args;
  va_start(args, format);
  PyObject* result = vcall(method, format, args);
  va_end(args);
  if (result == nullptr) {
    PyErr_WriteUnraisable(g_calls);
  }
  Py_XDECREF(result);
}

} // namespace fl_bridge
