#include "to_copy_kernel.h"

#include <atomic>
#include <optional>
#include <string>

#include <ATen/ATen.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/jit/frontend/function_schema_parser.h>
#include <torch/library.h>

#include "eager_kernel.h"
#include "fast_path_switches.h"
#include "python_kernel.h"

namespace fl_bridge {
namespace {

std::atomic<uint64_t> g_python_calls{0};

// aten::_to_copy(Tensor self, *, ScalarType? dtype, Layout? layout, Device? device, bool? pin_memory,
//                bool non_blocking=False, MemoryFormat? memory_format) -> Tensor
enum Arg : size_t { kSelf, kDtype, kLayout, kDevice, kPinMemory, kNonBlocking, kMemoryFormat, kArgs };

class ToCopyKernel final : public c10::OperatorKernel {
 public:
  explicit ToCopyKernel(PyObject* kernel) : kernel_(kernel) { Py_INCREF(kernel_); }

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
    const auto arguments = torch::jit::last(*stack, kArgs);
    if (python_switches() != 0 || !served(arguments)) {
      g_python_calls.fetch_add(1, std::memory_order_relaxed);
      return call_python_kernel(kernel_, op, stack);
    }
    at::Tensor out = convert(arguments);
    torch::jit::drop(*stack, kArgs);
    stack->emplace_back(std::move(out));
  }

 private:
  // The calls whose Python kernel is exactly empty_like + copy_ (copies.py _to_copy).
  static bool served(c10::ArrayRef<c10::IValue> arguments) {
    const c10::IValue& layout = arguments[kLayout];
    const c10::IValue& pin_memory = arguments[kPinMemory];
    if ((!layout.isNone() && layout.toLayout() != c10::kStrided) || (!pin_memory.isNone() && pin_memory.toBool())) {
      return false;
    }
    if (!arguments[kDevice].isNone()) {
      const c10::DeviceType type = arguments[kDevice].toDevice().type();
      return type == c10::DeviceType::PrivateUse1 || type == c10::DeviceType::CPU;
    }
    return true;
  }

  // copies.py _to_copy: torch.empty_like(self, dtype=dtype, device=device, pin_memory=False,
  // memory_format=memory_format or preserve_format), then out.copy_(self, non_blocking=...).
  static at::Tensor convert(c10::ArrayRef<c10::IValue> arguments) {
    const at::Tensor& self = arguments[kSelf].toTensor();
    const auto format = arguments[kMemoryFormat].toOptional<c10::MemoryFormat>();
    at::Tensor out = at::empty_like(self, arguments[kDtype].toOptional<c10::ScalarType>(), std::nullopt,
                                    arguments[kDevice].toOptional<c10::Device>(), false,
                                    format.value_or(c10::MemoryFormat::Preserve));
    // A copy to the host is synchronous anyway (copies.py): non_blocking only for an fl target.
    const bool non_blocking = arguments[kNonBlocking].toBool() && out.device().type() != c10::DeviceType::CPU;
    out.copy_(self, non_blocking);
    return out;
  }

  PyObject* kernel_;
};

// Why `schema` is not the _to_copy this kernel reads (its arguments by position, enum Arg), or
// "" when it is.
std::string schema_mismatch(const c10::FunctionSchema& schema) {
  const auto& args = schema.arguments();
  const char* names[kArgs] = {"self", "dtype", "layout", "device", "pin_memory", "non_blocking", "memory_format"};
  if (args.size() != kArgs) {
    return c10::str("aten::_to_copy has ", args.size(), " arguments, not ", static_cast<size_t>(kArgs));
  }
  for (size_t i = 0; i < kArgs; i++) {
    if (args[i].name() != names[i]) {
      return c10::str("aten::_to_copy's argument ", i, " is ", args[i].name(), ", not ", names[i]);
    }
  }
  return "";
}

// register_to_copy(kernel, schema=None): `schema` (a schema string) stands for the installed
// torch's _to_copy, which lets a test hand the check the schema a future torch might have.
PyObject* register_to_copy_py(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  TORCH_CHECK_TYPE(nargs == 1 || (nargs == 2 && (args[1] == Py_None || PyUnicode_Check(args[1]))),
                   "register_to_copy(kernel, schema=None)");
  std::optional<std::string> schema;
  if (nargs == 2 && args[1] != Py_None) {
    schema = PyUnicode_AsUTF8(args[1]);
  }
  const std::string why = register_to_copy(args[0], schema);
  return PyUnicode_FromStringAndSize(why.data(), static_cast<Py_ssize_t>(why.size()));
  END_HANDLE_TH_ERRORS
}

PyMethodDef g_methods[] = {
    {"register_to_copy", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(register_to_copy_py)),
     METH_FASTCALL,
     "register_to_copy(kernel, schema=None) -> str: the C++ PrivateUse1 kernel of _to_copy, `kernel` its Python "
     "half; '' once registered, else why not (nothing registered)"},
    {nullptr, nullptr, 0, nullptr},
};

} // namespace

std::string register_to_copy(PyObject* kernel, const std::optional<std::string>& schema) {
  const std::string why = schema.has_value()
      ? schema_mismatch(torch::jit::parseSchema(*schema))
      : schema_mismatch(c10::Dispatcher::singleton().findSchemaOrThrow("aten::_to_copy", "").schema());
  if (why.empty()) {
    private_use1_library().impl("_to_copy", torch::CppFunction::makeFromBoxedFunctor(
                                                std::make_unique<ToCopyKernel>(kernel)));
  }
  return why;
}

uint64_t to_copy_python_calls() noexcept {
  return g_python_calls.load(std::memory_order_relaxed);
}

PyMethodDef* to_copy_methods() {
  return g_methods;
}

} // namespace fl_bridge
