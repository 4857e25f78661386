// The PrivateUse1 kernels of the allocation factories (empty_strided, empty.memory_format), in
// C++: a block from the device's caching allocator for this thread's current stream, wrapped as
// a tensor, with no GIL - as the eager kernels' fresh outputs are made.  Every autograd step
// makes its seed gradient with one (ones_like -> empty_strided).  A call C++ does not serve as
// the Python kernel would (a dtype fl does not store, a device that does not exist, a
// non-contiguous memory format, symbolic sizes, pinned memory, a graph capture, a profile) goes
// to the op's Python kernel (ops/owned/factories.py), which gives the same tensor or error on
// both routes (docs/users/native-bridge.md "Eager ops").
#pragma once

#include <Python.h>

#include <cstdint>
#include <string>

namespace fl_bridge {

// Registers aten op `name`'s kernel ("empty_strided" or "empty.memory_format"), with
// `kernel(*args, **kwargs)` its Python kernel and `dtypes` (a sequence of torch.dtype) the dtypes
// an fl storage holds: Python hands over devices/storage.py's DL_DTYPES, the one list of them,
// and C++ serves only those (another one gets the Python kernel's UnsupportedDtypeError).
void register_factory(const std::string& name, PyObject* kernel, PyObject* dtypes);

// Calls these kernels handed to Python (part of eager_stats()'s python_calls).
uint64_t factory_python_calls() noexcept;

// Python method: register_factory(name, kernel, dtypes) (module.cpp adds it to the module).
PyMethodDef* factory_methods();

} // namespace fl_bridge
