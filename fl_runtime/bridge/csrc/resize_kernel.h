// resize_ of an fl tensor in C++ (`out=` ops resize their output; aten::arange.start_out resizes
// an empty one in every decode step of an HF model).  The Python kernel (ops/owned/factories.py
// resize_) does the same: contiguous strides for the new sizes, the storage grown through the
// PrivateUse1 hooks' resizePrivateUse1Bytes (hooks.h) when it is too small, the sizes and strides
// set on the tensor.  A call C++ does not serve as that kernel would (symbolic or negative sizes,
// a memory format other than contiguous, which the Python kernel ignores, a tensor without
// storage, a graph capture, a profile, a fork child) goes to the Python kernel, which gives the
// same tensor or error on both routes (docs/users/native-bridge.md "Eager ops").
#pragma once

#include <Python.h>

#include <cstdint>

namespace fl_bridge {

// Registers the C++ PrivateUse1 kernel of aten::resize_, with `kernel(*args, **kwargs)` the
// Python kernel of the calls it does not serve.
void register_resize(PyObject* kernel);

// Calls this kernel handed to Python (part of eager_stats()'s python_calls).
uint64_t resize_python_calls() noexcept;

// Python method: register_resize(kernel) (module.cpp adds it to the module).
PyMethodDef* resize_methods();

} // namespace fl_bridge
