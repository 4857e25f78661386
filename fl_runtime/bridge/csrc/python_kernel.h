// A boxed call handed to a Python function: the Python half of an eager op's kernel (its
// first call per signature, the fallbacks, every call a program cannot serve).
//
// The arguments reach Python as PyTorch's own Python kernels receive them (torch.library's
// PythonKernelHolder): positional arguments up to the last one that differs from its default,
// keyword-only ones as keywords when not default, dtypes, layouts and memory formats as their
// Python objects.  So the Python kernel sees the same call on both routes.
#pragma once

#include <Python.h>

#include <functional>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace fl_bridge {

// (args tuple, kwargs dict) for `arguments` (new references); the GIL is held.
std::pair<PyObject*, PyObject*> to_python_call(const c10::FunctionSchema& schema,
                                               const std::vector<c10::IValue>& arguments);

// Pops the op's arguments, calls `function(*args, **kwargs)` with the GIL taken here, and
// pushes its result (a Python exception travels on as torch's python_error).  `after`, when
// given, then runs with the GIL still held and the same (args, kwargs).
using AfterCall = std::function<void(PyObject* args, PyObject* kwargs)>;
void call_python_kernel(PyObject* function, const c10::OperatorHandle& op, torch::jit::Stack* stack,
                        const AfterCall& after = nullptr);

} // namespace fl_bridge
