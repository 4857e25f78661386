#include "sdpa_kernel.h"

#include <atomic>
#include <limits>
#include <map>
#include <mutex>
#include <utility>

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/Exceptions.h>
#include <torch/library.h>

#include "eager_kernel.h"
#include "fast_path_switches.h"
#include "python_calls.h"
#include "python_kernel.h"

namespace fl_bridge {
namespace {

std::atomic<uint64_t> g_python_calls{0};

// aten::scaled_dot_product_attention(Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None,
//     float dropout_p=0., bool is_causal=False, *, float? scale=None, bool enable_gqa=False) -> Tensor
enum Arg : size_t { kQuery, kKey, kValue, kMask, kDropout, kCausal, kScale, kGqa, kArgs };

// The keys a plain fl tensor carries (TensorImpl's constructor adds the autograd and autocast
// keys of its backend; an inference tensor has fewer): anything else is a layer - Python
// (FakeTensor, subclasses), functionalization, functorch, a conjugate or negative view - whose
// call attention.py's Python kernel takes.
c10::DispatchKeySet plain_keys() {
  constexpr auto kBackend = c10::BackendComponent::PrivateUse1Bit;
  return c10::DispatchKeySet(c10::DispatchKey::PrivateUse1) | c10::getAutogradRelatedKeySetFromBackend(kBackend) |
         c10::getAutocastRelatedKeySetFromBackend(kBackend);
}

bool plain(const at::Tensor& tensor) {
  static const c10::DispatchKeySet keys = plain_keys();
  const c10::TensorImpl* impl = tensor.unsafeGetTensorImpl();
  return tensor.defined() && (tensor.key_set() | keys) == keys && tensor.layout() == c10::kStrided &&
         !impl->has_symbolic_sizes_strides();
}

// A Python mode, functionalization or functorch active on this thread (its dispatch keys): the
// call belongs to the Python kernel, as a FakeTensor's does.
bool python_layer_active() {
  static const c10::DispatchKeySet layers({c10::DispatchKey::Python, c10::DispatchKey::PythonTLSSnapshot,
                                           c10::DispatchKey::Functionalize, c10::DispatchKey::PreDispatch,
                                           c10::DispatchKey::PythonDispatcher,
                                           c10::DispatchKey::FuncTorchDynamicLayerFrontMode,
                                           c10::DispatchKey::FuncTorchDynamicLayerBackMode});
  return c10::impl::tls_local_dispatch_key_set().included_.has_any(layers);
}

// Whether C++ reads this call's choice: query, key, value (and a mask) plain tensors.
bool readable(c10::ArrayRef<c10::IValue> arguments) {
  for (const size_t i : {kQuery, kKey, kValue}) {
    if (!arguments[i].isTensor() || !plain(arguments[i].toTensor())) {
      return false;
    }
  }
  return arguments[kMask].isNone() || (arguments[kMask].isTensor() && plain(arguments[kMask].toTensor()));
}

// -- has_fused, per device, dtype and kernel-table epoch ---------------------------------------

PyObject* g_has_fused = nullptr;
std::mutex g_fused_lock;
uint64_t g_fused_epoch = std::numeric_limits<uint64_t>::max();
std::map<std::pair<int, int>, bool> g_fused;      // (device, dtype) -> both kernels

// attention.py _has_fused(device, dtype), asked with the GIL once per key and epoch (a kernel
// table that changed - a hidden kernel - is asked again).
bool has_fused(c10::DeviceIndex device, c10::ScalarType dtype) {
  const uint64_t epoch = kernel_epoch();
  const std::pair<int, int> key{device, static_cast<int>(dtype)};
  {
    std::lock_guard<std::mutex> lock(g_fused_lock);
    if (g_fused_epoch != epoch) {
      g_fused.clear();
      g_fused_epoch = epoch;
    }
    const auto found = g_fused.find(key);
    if (found != g_fused.end()) {
      return found->second;
    }
  }
  bool answer = false;
  {
    Gil gil;
    PyObject* result = PyObject_CallFunction(g_has_fused, "iO", static_cast<int>(device),
                                             reinterpret_cast<PyObject*>(torch::getTHPDtype(dtype)));
    const int truth = result == nullptr ? -1 : PyObject_IsTrue(result);
    Py_XDECREF(result);
    if (truth < 0) {
      throw_python_error();
    }
    answer = truth == 1;
  }
  std::lock_guard<std::mutex> lock(g_fused_lock);
  if (g_fused_epoch == epoch) {
    g_fused[key] = answer;
  }
  return answer;
}

// -- the choice: attention.py _fused_fits ------------------------------------------------------

// attention.py _broadcasts: the mask broadcasts to [B, Hq, L, S].
bool broadcasts(const at::Tensor& mask, c10::IntArrayRef shape) {
  const int64_t dims = mask.dim();
  if (dims > static_cast<int64_t>(shape.size())) {
    return false;
  }
  for (int64_t i = 1; i <= dims; i++) {
    const int64_t m = mask.size(dims - i);
    if (m != 1 && m != shape[shape.size() - i]) {
      return false;
    }
  }
  return true;
}

// The metadata half of _fused_fits, for plain tensors (readable()).
bool shapes_fit(c10::ArrayRef<c10::IValue> arguments) {
  const at::Tensor& query = arguments[kQuery].toTensor();
  const at::Tensor& key = arguments[kKey].toTensor();
  const at::Tensor& value = arguments[kValue].toTensor();
  for (const at::Tensor* t : {&query, &key, &value}) {
    if (t->is_nested() || t->dim() != 4 || t->scalar_type() != query.scalar_type() || t->device() != query.device()) {
      return false;
    }
  }
  const bool has_mask = arguments[kMask].isTensor();
  if (arguments[kDropout].toDouble() != 0.0 || (arguments[kCausal].toBool() && has_mask) || query.numel() == 0 ||
      key.numel() == 0) {
    return false;
  }
  const int64_t b = query.size(0), hq = query.size(1), l = query.size(2), e = query.size(3);
  const int64_t hk = key.size(1), s = key.size(2);
  if (!(b == key.size(0) && b == value.size(0) && e == key.size(3) && hk == value.size(1) && s == value.size(2) &&
        hk > 0)) {
    return false;
  }
  if (hq != hk && !(arguments[kGqa].toBool() && hq % hk == 0)) {
    return false;
  }
  if (has_mask) {
    const at::Tensor& mask = arguments[kMask].toTensor();
    const std::vector<int64_t> shape{b, hq, l, s};
    if (mask.device() != query.device() ||
        (mask.scalar_type() != c10::kBool && mask.scalar_type() != query.scalar_type()) || !broadcasts(mask, shape)) {
      return false;
    }
  }
  return true;
}

bool overrideable(c10::ArrayRef<c10::IValue> arguments) {
  if (!at::globalContext().userEnabledOverrideableSDP() || !shapes_fit(arguments)) {
    return false;
  }
  const at::Tensor& query = arguments[kQuery].toTensor();
  return has_fused(query.device().index(), query.scalar_type());
}

// attention.py _as_bias and the overrideable call: a bool mask as 0 / -inf (zeros_like,
// ~mask, masked_fill_), broadcast to [B, Hq, L, S] by a view; the same ops Python calls.
at::Tensor fused(c10::ArrayRef<c10::IValue> arguments) {
  const at::Tensor& query = arguments[kQuery].toTensor();
  const at::Tensor& key = arguments[kKey].toTensor();
  std::optional<at::Tensor> bias;
  if (arguments[kMask].isTensor()) {
    at::Tensor mask = arguments[kMask].toTensor();
    if (mask.scalar_type() == c10::kBool) {
      mask = at::zeros_like(mask, query.scalar_type(), std::nullopt, std::nullopt, std::nullopt, std::nullopt)
                 .masked_fill_(at::bitwise_not(mask), -std::numeric_limits<double>::infinity());
    }
    bias = mask.expand({query.size(0), query.size(1), query.size(2), key.size(-2)});
  }
  return std::get<0>(at::_scaled_dot_product_fused_attention_overrideable(
      query, key, arguments[kValue].toTensor(), bias, arguments[kDropout].toDouble(), arguments[kCausal].toBool(),
      false, arguments[kScale].toOptional<double>()));
}

class SdpaKernel final : public c10::OperatorKernel {
 public:
  explicit SdpaKernel(PyObject* kernel) : kernel_(kernel) { Py_INCREF(kernel_); }

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
    const auto arguments = torch::jit::last(*stack, kArgs);
    if ((switches() & kDisabled) != 0 || python_layer_active() || !readable(arguments)) {
      g_python_calls.fetch_add(1, std::memory_order_relaxed);
      return call_python_kernel(kernel_, op, stack);
    }
    if (!overrideable(arguments)) {
      // ATen's own composite, as attention.py's _SDPA.decompose calls it.
      return op.callBoxedForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd, *stack);
    }
    at::Tensor out = fused(arguments);
    torch::jit::drop(*stack, kArgs);
    stack->emplace_back(std::move(out));
  }

 private:
  PyObject* kernel_;
};

// Why `schema` is not the scaled_dot_product_attention this kernel reads by position, or "".
std::string schema_mismatch(const c10::FunctionSchema& schema) {
  const auto& args = schema.arguments();
  const char* names[kArgs] = {"query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa"};
  if (args.size() != kArgs) {
    return c10::str("aten::scaled_dot_product_attention has ", args.size(), " arguments, not ",
                    static_cast<size_t>(kArgs));
  }
  for (size_t i = 0; i < kArgs; i++) {
    if (args[i].name() != names[i]) {
      return c10::str("aten::scaled_dot_product_attention's argument ", i, " is ", args[i].name(), ", not ", names[i]);
    }
  }
  return "";
}

torch::Library& autograd_library() {
  // Registrations live as long as this object: the process.
  static auto* lib =
      new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::AutogradPrivateUse1, __FILE__, __LINE__);
  return *lib;
}

PyObject* register_sdpa_py(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  TORCH_CHECK_TYPE(nargs == 2, "register_sdpa(kernel, has_fused)");
  const std::string why = register_sdpa(args[0], args[1]);
  return PyUnicode_FromStringAndSize(why.data(), static_cast<Py_ssize_t>(why.size()));
  END_HANDLE_TH_ERRORS
}

PyMethodDef g_methods[] = {
    {"register_sdpa", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(register_sdpa_py)), METH_FASTCALL,
     "register_sdpa(kernel, has_fused) -> str: the C++ kernel of scaled_dot_product_attention (PrivateUse1 and "
     "AutogradPrivateUse1); '' once registered, else why not"},
    {nullptr, nullptr, 0, nullptr},
};

} // namespace

std::string register_sdpa(PyObject* kernel, PyObject* has_fused) {
  const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::scaled_dot_product_attention", "");
  const std::string why = schema_mismatch(op.schema());
  if (!why.empty()) {
    return why;
  }
  Py_INCREF(has_fused);
  Py_XSETREF(g_has_fused, has_fused);
  private_use1_library().impl("scaled_dot_product_attention",
                              torch::CppFunction::makeFromBoxedFunctor(std::make_unique<SdpaKernel>(kernel)));
  autograd_library().impl("scaled_dot_product_attention",
                          torch::CppFunction::makeFromBoxedFunctor(std::make_unique<SdpaKernel>(kernel)));
  return "";
}

uint64_t sdpa_python_calls() noexcept {
  return g_python_calls.load(std::memory_order_relaxed);
}

PyMethodDef* sdpa_methods() {
  return g_methods;
}

} // namespace fl_bridge
