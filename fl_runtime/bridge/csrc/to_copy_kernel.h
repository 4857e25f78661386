// The PrivateUse1 kernel of aten::_to_copy (Tensor.to(dtype), .double(), .cpu() ... of an fl
// tensor) in C++: what its Python kernel (ops/owned/copies.py _to_copy) does - empty_like, then
// copy_ - through the dispatcher, so each half takes its own C++ kernel where one serves it
// (factory_kernels.h, eager_kernel.h) and its Python kernel otherwise; the values, the errors and
// the counts are the same on both routes.  The calls the Python kernel treats apart (a layout
// other than strided, which it refuses; pinned memory; a device neither fl nor the CPU) and any
// switch that sends eager calls to Python (fast_path_switches.h) go to the Python kernel.
#pragma once

#include <Python.h>

#include <cstdint>
#include <optional>
#include <string>

namespace fl_bridge {

// Registers aten::_to_copy's PrivateUse1 kernel, with `kernel(*args, **kwargs)` its Python kernel,
// and returns "" - or registers nothing and returns why when _to_copy's schema (`schema`, a schema
// string, when given: a test's stand-in for the installed torch's) is not the one this kernel
// reads by position.  A torch that changed it then keeps the Python kernel (copies.py registers
// it on a non-empty answer) instead of failing the runtime's start.
std::string register_to_copy(PyObject* kernel, const std::optional<std::string>& schema = std::nullopt);

// Calls this kernel handed to Python (part of eager_stats()'s python_calls).
uint64_t to_copy_python_calls() noexcept;

// Python method: register_to_copy(kernel, schema=None) -> str (module.cpp adds it to the module).
PyMethodDef* to_copy_methods();

} // namespace fl_bridge
