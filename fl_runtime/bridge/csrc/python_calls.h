// The bridge's one way into the Python runtime: methods of the object install() was given
// (fl_runtime/bridge/calls.py, BridgeCalls), called with the GIL taken here.
//
// Data flows torch -> bridge -> runtime -> vendor: these calls are how PyTorch's C++
// interfaces (allocator, device guard, hooks) reach the runtime's allocator, streams and
// events.  A Python exception raised by the runtime travels back as torch's python_error, so
// the user's code sees the runtime's own exception class and message (an out-of-memory stays
// torch.OutOfMemoryError); contexts that must not throw (noexcept interfaces, teardown) use
// call_quietly.
#pragma once

#include <Python.h>

#include <cstdint>
#include <utility>

namespace fl_bridge {

// Keeps `calls` for the process (a strong reference); set once, by install().
void set_runtime_calls(PyObject* calls);
bool has_runtime_calls() noexcept;

// runtime.<method>(*Py_BuildValue(format, ...)), returning a new reference; raises the
// Python exception as a C++ python_error.  Takes the GIL itself.
PyObject* call(const char* method, const char* format, ...);

// The same for methods whose result is an integer / a boolean / a float / nothing.
int64_t call_int(const char* method, const char* format, ...);
bool call_bool(const char* method, const char* format, ...);
double call_double(const char* method, const char* format, ...);
void call_void(const char* method, const char* format, ...);

// For noexcept contexts: a Python exception is reported as unraisable (printed with its
// traceback) instead of thrown, and nothing is called once the interpreter is finalizing.
void call_quietly(const char* method, const char* format, ...) noexcept;

// Whether the interpreter is gone or shutting down: then nothing may enter Python (a
// destructor that runs at exit returns early).  Public C API with a version guard (CPython 3.13
// made the finalizing check public as Py_IsFinalizing and removed the private name).
bool interpreter_gone() noexcept;

// Every time the bridge takes the GIL to run Python (each Gil below, and the Python kernel's
// entry in python_kernel.cpp): one relaxed atomic add, on the paths that enter Python only.
// The steady state's C++ path leaves the count unchanged; tests/runtime/test_gil_free_path.py reads it
// through the module's python_entries() to prove it (docs/users/native-bridge.md "Eager ops").
void count_python_entry() noexcept;
uint64_t python_entries() noexcept;

// RAII: the GIL, taken for the scope (PyGILState: any thread, nested or not), counted.
class Gil {
 public:
  Gil() : state_(PyGILState_Ensure()) { count_python_entry(); }
  ~Gil() { PyGILState_Release(state_); }
  Gil(const Gil&) = delete;
  Gil& operator=(const Gil&) = delete;

 private:
  PyGILState_STATE state_;
};

// Raises the pending Python exception as torch's python_error (the GIL is held).
[[noreturn]] void throw_python_error();

} // namespace fl_bridge
