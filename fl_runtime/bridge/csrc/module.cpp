// fl_runtime.bridge._fl_bridge: the native bridge's Python module.
//
//   install(calls, device_count)       registers hooks, device guard, allocators (once)
//   current_device() / set_current_device(index)
//   current_stream(index) / set_current_stream(index, stream_id)
//                                      this thread's state (thread_state.h)
//   install_allocators, alloc, free, ... the device allocators (memory_methods.h)
//   python_entries() -> n              times C++ entered Python (python_calls.h)
//   default_generator(index) -> torch.Generator
//   reserve(generator, numel) -> (seed, offset)
//                                      counters for one random kernel (generator.h)
//
// Built against the installed PyTorch by fl_runtime/bridge/build.py; docs/users/native-bridge.md.
#include <Python.h>

#include <mutex>

#include <ATen/core/CachingHostAllocator.h>
#include <c10/core/Allocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/Generator.h>

#include "device_allocator.h"
#include "device_guard.h"
#include "eager_kernel.h"
#include "fallback_decompositions.h"
#include "factory_kernels.h"
#include "resize_kernel.h"
#include "generator.h"
#include "graph.h"
#include "hooks.h"
#include "host_copies.h"
#include "memory_methods.h"
#include "host_allocator.h"
#include "python_calls.h"
#include "thread_state.h"
#include "sdpa_kernel.h"
#include "stream_order.h"
#include "python_ints.h"
#include "stream_registry.h"
#include "to_copy_kernel.h"

namespace {

using namespace fl_bridge;

constexpr c10::DeviceType kFl = c10::DeviceType::PrivateUse1;
// Ahead of anything registered before (c10's allocator registry keeps the highest priority).
constexpr uint8_t kPriority = 255;

std::once_flag g_installed;

PyObject* install(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  TORCH_CHECK_TYPE(nargs == 2, "install(calls, device_count)");
  const c10::DeviceIndex count = device_arg(args[1]);
  bool first = false;
  std::call_once(g_installed, [&] {
    set_runtime_calls(args[0]);
    set_device_count(count);
    at::RegisterPrivateUse1HooksInterface(&hooks());
    c10::impl::DeviceGuardImplRegistrar guard_registrar(kFl, &device_guard());
    c10::SetAllocator(kFl, &device_allocator(), kPriority);
    at::setHostAllocator(kFl, &host_allocator(), kPriority);
    register_graph_impl();
    first = true;
  });
  return PyBool_FromLong(first);
  END_HANDLE_TH_ERRORS
}

PyObject* current_device_py(PyObject*, PyObject*) {
  return PyLong_FromLong(current_device());
}

PyObject* set_current_device_py(PyObject*, PyObject* index) {
  HANDLE_TH_ERRORS
  const c10::DeviceIndex device = device_arg(index);
  set_current_device(device);
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

PyObject* current_stream_py(PyObject*, PyObject* index) {
  HANDLE_TH_ERRORS
  const c10::DeviceIndex device = device_arg(index);
  return PyLong_FromLongLong(current_stream_id(device));
  END_HANDLE_TH_ERRORS
}

PyObject* set_current_stream_py(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  TORCH_CHECK_TYPE(nargs == 2, "set_current_stream(index, stream_id)");
  const c10::DeviceIndex device = device_arg(args[0]);
  return PyLong_FromLongLong(make_current(device, int_arg(args[1])));
  END_HANDLE_TH_ERRORS
}

PyObject* default_generator_py(PyObject*, PyObject* index) {
  HANDLE_TH_ERRORS
  const c10::DeviceIndex device = device_arg(index);
  return THPGenerator_initDefaultGenerator(default_generator(device));     // a new reference
  END_HANDLE_TH_ERRORS
}

PyObject* reserve(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  TORCH_CHECK_TYPE(nargs == 2, "reserve(generator, numel)");
  const int is_generator = PyObject_IsInstance(args[0], THPGeneratorClass);
  if (is_generator < 0) {
    return nullptr;
  }
  TORCH_CHECK_TYPE(is_generator == 1, "reserve: expected a torch.Generator");
  at::Generator generator = reinterpret_cast<THPGenerator*>(args[0])->cdata;
  TORCH_CHECK_VALUE(generator.device().type() == kFl, "a ", generator.device(),
                    " generator cannot draw for an fl kernel: use torch.Generator(device=\"fl:N\")");
  const uint64_t numel = u64_arg(args[1]);
  std::pair<int64_t, int64_t> drawn;
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    drawn = at::check_generator<Generator>(generator)->reserve(numel);
  }
  return Py_BuildValue("(LL)", static_cast<long long>(drawn.first), static_cast<long long>(drawn.second));
  END_HANDLE_TH_ERRORS
}

PyObject* python_entries_py(PyObject*, PyObject*) {
  return PyLong_FromUnsignedLongLong(python_entries());
}

PyMethodDef methods[] = {
    {"install", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(install)), METH_FASTCALL,
     "install(calls, device_count) -> bool: register the bridge with PyTorch (True the first time)"},
    {"current_device", current_device_py, METH_NOARGS, "This thread's current fl device."},
    {"set_current_device", set_current_device_py, METH_O, "Make fl:index current on this thread."},
    {"current_stream", current_stream_py, METH_O, "This thread's current stream id on fl:index."},
    {"set_current_stream", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(set_current_stream_py)),
     METH_FASTCALL, "set_current_stream(index, stream_id) -> the id it replaced"},
    {"python_entries", python_entries_py, METH_NOARGS,
     "Times the bridge has taken the GIL to run Python (python_calls.h); the C++ steady state adds none."},
    {"default_generator", default_generator_py, METH_O, "The default torch.Generator of fl:index."},
    {"reserve", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(reserve)), METH_FASTCALL,
     "reserve(generator, numel) -> (seed, offset) for one random kernel"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_fl_bridge", "Torch-FL's native bridge (docs/users/native-bridge.md).", -1, methods,
    nullptr, nullptr, nullptr, nullptr,
};

} // namespace

PyMODINIT_FUNC PyInit__fl_bridge(void) {
  PyObject* module = PyModule_Create(&module_def);
  if (module != nullptr && (add_memory_methods(module) < 0 ||
                            PyModule_AddFunctions(module, fl_bridge::eager_methods()) < 0 ||
                            PyModule_AddFunctions(module, fl_bridge::stream_registry_methods()) < 0 ||
                            PyModule_AddFunctions(module, fl_bridge::stream_order_methods()) < 0 ||
                            PyModule_AddFunctions(module, fl_bridge::factory_methods()) < 0 ||
                            PyModule_AddFunctions(module, fl_bridge::resize_methods()) < 0 ||
                            PyModule_AddFunctions(module, fl_bridge::to_copy_methods()) < 0 ||
                            PyModule_AddFunctions(module, fl_bridge::host_copy_methods()) < 0 ||
                            PyModule_AddFunctions(module, fl_bridge::sdpa_methods()) < 0 ||
                            PyModule_AddFunctions(module, fl_bridge::decomposition_methods()) < 0)) {
    Py_CLEAR(module);
  }
  return module;
}
