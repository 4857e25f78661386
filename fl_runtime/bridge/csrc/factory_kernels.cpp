#include "factory_kernels.h"

#include <atomic>
#include <bitset>

#include <c10/core/TensorImpl.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Exceptions.h>
#include <torch/library.h>

#include "device_allocator.h"
#include "eager_kernel.h"
#include "fast_path_switches.h"
#include "python_calls.h"
#include "python_kernel.h"
#include "strided_layout.h"
#include "thread_state.h"

namespace fl_bridge {
namespace {

std::atomic<uint64_t> g_python_calls{0};

// The dtypes an fl storage holds, as Python hands them to register_factory: one bit per
// c10::ScalarType (ScalarType.h: fewer than 64 of them).
using DtypeSet = std::bitset<64>;
static_assert(static_cast<size_t>(c10::ScalarType::NumOptions) <= 64, "a ScalarType past DtypeSet's bits");

// `dtypes` (a sequence of torch.dtype) as a DtypeSet; a TypeError for anything else.
DtypeSet dtype_set(PyObject* dtypes) {
  PyObject* items = PySequence_Fast(dtypes, "register_factory: dtypes must be a sequence of torch.dtype");
  if (items == nullptr) {
    throw python_error();
  }
  DtypeSet set;
  const Py_ssize_t count = PySequence_Fast_GET_SIZE(items);
  for (Py_ssize_t i = 0; i < count; i++) {
    PyObject* item = PySequence_Fast_GET_ITEM(items, i);
    if (!THPDtype_Check(item)) {
      Py_DECREF(items);
      TORCH_CHECK_TYPE(false, "register_factory: dtypes must be a sequence of torch.dtype");
    }
    set.set(static_cast<size_t>(reinterpret_cast<THPDtype*>(item)->scalar_type));
  }
  Py_DECREF(items);
  return set;
}

class FactoryKernel final : public c10::OperatorKernel {
 public:
  FactoryKernel(PyObject* kernel, bool has_memory_format, DtypeSet stored)
      : kernel_(kernel), has_memory_format_(has_memory_format), stored_(stored) {
    Py_INCREF(kernel_);
  }

  // Arguments: size, [stride,] dtype, layout, device, pin_memory[, memory_format].
  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
    const size_t nargs = op.schema().arguments().size();
    const auto arguments = torch::jit::last(*stack, nargs);
    const size_t tail = has_memory_format_ ? 1 : 2;       // the first keyword argument
    at::Tensor tensor;
    if (python_switches() != 0 || !make(arguments, tail, tensor)) {
      g_python_calls.fetch_add(1, std::memory_order_relaxed);
      return call_python_kernel(kernel_, op, stack);
    }
    torch::jit::drop(*stack, nargs);
    stack->emplace_back(std::move(tensor));
  }

 private:
  // False (nothing allocated) for a call the Python kernel answers.
  bool make(c10::ArrayRef<c10::IValue> arguments, size_t tail, at::Tensor& out) const {
    if (!arguments[0].isIntList() || (!has_memory_format_ && !arguments[1].isIntList())) {
      return false;                  // symbolic sizes
    }
    const c10::IValue& dtype = arguments[tail];
    const c10::IValue& layout = arguments[tail + 1];
    const c10::IValue& device = arguments[tail + 2];
    const c10::IValue& pin_memory = arguments[tail + 3];
    if ((!layout.isNone() && layout.toLayout() != c10::kStrided) || (!pin_memory.isNone() && pin_memory.toBool())) {
      return false;
    }
    if (has_memory_format_ && !arguments[tail + 4].isNone()) {
      const auto format = arguments[tail + 4].toMemoryFormat();
      if (format != c10::MemoryFormat::Contiguous && format != c10::MemoryFormat::Preserve) {
        return false;
      }
    }
    const c10::ScalarType type = dtype.isNone() ? c10::get_default_dtype_as_scalartype() : dtype.toScalarType();
    c10::DeviceIndex index = current_device();
    if (!device.isNone()) {
      const c10::Device where = device.toDevice();
      if (where.type() != c10::DeviceType::PrivateUse1) {
        return false;
      }
      index = where.has_index() ? where.index() : index;
    }
    if (!stored_.test(static_cast<size_t>(type)) || index < 0 || index >= device_count()) {
      return false;
    }
    const std::vector<int64_t> sizes = arguments[0].toIntVector();
    std::vector<int64_t> strides;
    if (has_memory_format_) {
      strides = contiguous_strides(sizes);
    } else {
      strides = arguments[1].toIntVector();
    }
    if (sizes.size() != strides.size() || !non_negative(sizes) || !non_negative(strides)) {
      return false;
    }
    const size_t nbytes = span_bytes(sizes, strides, c10::elementSize(type));
    c10::Storage storage(c10::Storage::use_byte_size_t(), nbytes, allocate_on(index, nbytes), &device_allocator(),
                         /*resizable=*/true);
    out = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                                   c10::scalarTypeToTypeMeta(type));
    out.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides);
    return true;
  }

  PyObject* kernel_;
  bool has_memory_format_;
  DtypeSet stored_;      // another dtype gets the Python kernel's UnsupportedDtypeError
};

PyObject* register_factory_py(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  TORCH_CHECK_TYPE(nargs == 3 && PyUnicode_Check(args[0]), "register_factory(name, kernel, dtypes)");
  register_factory(PyUnicode_AsUTF8(args[0]), args[1], args[2]);
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

PyMethodDef g_methods[] = {
    {"register_factory", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(register_factory_py)),
     METH_FASTCALL, "register_factory(name, kernel, dtypes): the C++ PrivateUse1 kernel of empty_strided / empty, "
     "for the dtypes an fl storage holds"},
    {nullptr, nullptr, 0, nullptr},
};

} // namespace

void register_factory(const std::string& name, PyObject* kernel, PyObject* dtypes) {
  TORCH_CHECK_VALUE(name == "empty_strided" || name == "empty.memory_format", "register_factory: no C++ kernel for ",
                    name);
  private_use1_library().impl(name.c_str(), torch::CppFunction::makeFromBoxedFunctor(
                                                std::make_unique<FactoryKernel>(kernel, name != "empty_strided", dtype_set(dtypes))));
}

uint64_t factory_python_calls() noexcept {
  return g_python_calls.load(std::memory_order_relaxed);
}

PyMethodDef* factory_methods() {
  return g_methods;
}

} // namespace fl_bridge
