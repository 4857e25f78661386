// aten::scaled_dot_product_attention's PrivateUse1 and AutogradPrivateUse1 kernel in C++: the
// choice ops/owned/attention.py's kernel makes (_fused_fits: PyTorch's sdpa_kernel switch, the
// call's metadata, whether the device's plugin has both overrideable kernels in the query's
// dtype), then the same dispatcher calls - the bool mask as an additive bias and the
// overrideable forward for OVERRIDEABLE, ATen's own composite (CompositeImplicitAutograd:
// validation, mask conversion, the math path) otherwise - with no GIL.  PyTorch's stub
// (_fused_sdp_choice_stub) stays unfilled, so the composite answers MATH as on the Python
// route, and autograd sees the same ops.
//
// The Python kernel takes every call whose choice C++ cannot read from plain metadata: a
// tensor with a Python, functional or batching layer (FakeTensor under torch.compile, whose
// choice attention.py makes from the same metadata), symbolic sizes, a conjugate or negative
// view, a nested or non-fl tensor, a Python mode in the thread's dispatch keys, or the C++ path
// switched off (fast_path_switches.h kDisabled).
#pragma once

#include <Python.h>

#include <cstdint>
#include <string>

namespace fl_bridge {

// Registers the kernel, `kernel(*args, **kwargs)` its Python half and `has_fused(device, dtype)`
// whether that device's plugin has both overrideable kernels in `dtype` (asked once per device,
// dtype and kernel-table epoch, with the GIL).  Returns "" - or registers nothing and returns why
// when the installed torch's scaled_dot_product_attention has other arguments than it reads.
std::string register_sdpa(PyObject* kernel, PyObject* has_fused);

// Calls this kernel handed to Python (part of eager_stats()'s python_calls).
uint64_t sdpa_python_calls() noexcept;

// Python method: register_sdpa(kernel, has_fused) -> str (module.cpp adds it to the module).
PyMethodDef* sdpa_methods();

} // namespace fl_bridge
