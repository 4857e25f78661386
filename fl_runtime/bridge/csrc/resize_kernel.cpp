#include "resize_kernel.h"

#include <atomic>

#include <c10/core/TensorImpl.h>
#include <torch/csrc/Exceptions.h>
#include <torch/library.h>

#include "eager_kernel.h"
#include "fast_path_switches.h"
#include "hooks.h"
#include "python_kernel.h"
#include "strided_layout.h"

namespace fl_bridge {
namespace {

std::atomic<uint64_t> g_python_calls{0};

// Arguments: self, size, memory_format (resize_(Tensor(a!) self, SymInt[] size, *,
// MemoryFormat? memory_format=None)).  False: the Python kernel answers this call.
bool served(c10::ArrayRef<c10::IValue> arguments) {
  if (arguments.size() != 3 || !arguments[0].isTensor() || !arguments[1].isIntList()) {
    return false;            // symbolic sizes
  }
  const at::Tensor& self = arguments[0].toTensor();
  if (!self.has_storage() || self.layout() != c10::kStrided || self.device().type() != c10::DeviceType::PrivateUse1) {
    return false;
  }
  const c10::IValue& format = arguments[2];
  if (!format.isNone() && format.toMemoryFormat() != c10::MemoryFormat::Contiguous) {
    return false;
  }
  const std::vector<int64_t> sizes = arguments[1].toIntVector();
  if (!non_negative(sizes)) {
    return false;
  }
  const std::vector<int64_t> strides = contiguous_strides(sizes);
  const size_t itemsize = self.itemsize();
  const size_t needed = span_bytes(sizes, strides, itemsize) + static_cast<size_t>(self.storage_offset()) * itemsize;
  const c10::Storage& storage = self.storage();
  if (needed > storage.nbytes()) {
    hooks().resizePrivateUse1Bytes(storage, needed);     // as untyped_storage().resize_(needed)
  }
  self.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides);
  return true;
}

class ResizeKernel final : public c10::OperatorKernel {
 public:
  explicit ResizeKernel(PyObject* kernel) : kernel_(kernel) { Py_INCREF(kernel_); }

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
    const size_t nargs = op.schema().arguments().size();
    const auto arguments = torch::jit::last(*stack, nargs);
    if (python_switches() != 0 || !served(arguments)) {
      g_python_calls.fetch_add(1, std::memory_order_relaxed);
      return call_python_kernel(kernel_, op, stack);
    }
    at::Tensor self = arguments[0].toTensor();
    torch::jit::drop(*stack, nargs);
    stack->emplace_back(std::move(self));
  }

 private:
  PyObject* kernel_;
};

PyObject* register_resize_py(PyObject*, PyObject* kernel) {
  HANDLE_TH_ERRORS
  register_resize(kernel);
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

PyMethodDef g_methods[] = {
    {"register_resize", register_resize_py, METH_O, "register_resize(kernel): the C++ PrivateUse1 kernel of resize_"},
    {nullptr, nullptr, 0, nullptr},
};

} // namespace

void register_resize(PyObject* kernel) {
  private_use1_library().impl("resize_", torch::CppFunction::makeFromBoxedFunctor(std::make_unique<ResizeKernel>(kernel)));
}

uint64_t resize_python_calls() noexcept {
  return g_python_calls.load(std::memory_order_relaxed);
}

PyMethodDef* resize_methods() {
  return g_methods;
}

} // namespace fl_bridge
