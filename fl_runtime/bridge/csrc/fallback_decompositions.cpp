#include "fallback_decompositions.h"

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/library.h>

#include "eager_kernel.h"
#include "fallback_decisions.h"
#include "fast_path_switches.h"
#include "python_calls.h"
#include "python_kernel.h"
#include "thread_state.h"

namespace fl_bridge {
namespace {

constexpr c10::DeviceType kFl = c10::DeviceType::PrivateUse1;
constexpr size_t kMaxTensors = 4;

std::atomic<uint64_t> g_python_calls{0};

// chain.py strict(): TORCH_FL_STRICT is read on every fallback call (os.environ writes reach
// the C environment through putenv), and any value but "" or "0" makes a fallback an error.
bool strict() {
  const char* value = std::getenv("TORCH_FL_STRICT");
  return value != nullptr && value[0] != '\0' && std::strcmp(value, "0") != 0;
}

// What a call's decision is keyed by (chain.py decide: device, dtypes in argument order), and
// arange's element count.
struct Call {
  c10::DeviceIndex device = -1;
  c10::ScalarType dtypes[kMaxTensors] = {};
  size_t ndtypes = 0;
  int64_t length = 0;
};

// Adds a tensor argument: false unless it is a plain tensor on the call's one fl device.  A CPU
// operand, two devices or a conjugate/negative view stay with Python, which refuses or
// resolves them (chain.py check_no_cpu_operands, the launcher).
bool add_tensor(const at::Tensor& t, Call& call) {
  if (!t.defined() || t.device().type() != kFl || t.is_conj() || t.is_neg() || call.ndtypes == kMaxTensors) {
    return false;
  }
  if (call.device < 0) {
    call.device = t.device().index();
  } else if (t.device().index() != call.device) {
    return false;
  }
  call.dtypes[call.ndtypes++] = t.scalar_type();
  return true;
}

// -- index_copy.out(Tensor self, int dim, Tensor index, Tensor source, *, Tensor(a!) out) ---------

// extra_decompositions.py index_copy_out + _index_copy_shape: the calls it does not decline.
bool index_copy_call(c10::ArrayRef<c10::IValue> args, Call& call) {
  const at::Tensor& self = args[0].toTensor();
  const int64_t dim = args[1].toInt();
  const at::Tensor& index = args[2].toTensor();
  const at::Tensor& source = args[3].toTensor();
  const at::Tensor& out = args[4].toTensor();
  if (!add_tensor(self, call) || !add_tensor(index, call) || !add_tensor(source, call) || !add_tensor(out, call)) {
    return false;
  }
  const int64_t n = self.dim();
  if (out.sizes() != self.sizes() || out.scalar_type() != self.scalar_type() || n == 0 || index.dim() > 1 ||
      index.scalar_type() != at::kLong || source.dim() != n || source.scalar_type() != self.scalar_type() ||
      dim < -n || dim >= n) {
    return false;
  }
  const int64_t d = dim < 0 ? dim + n : dim;
  for (int64_t k = 0; k < n; k++) {
    if (source.size(k) != (k == d ? index.numel() : self.size(k))) {
      return false;
    }
  }
  return true;
}

// extra_decompositions.py _index_copy_into: out = self (or a copy of it), then one scatter_ with
// the index broadcast along source (a stride-0 view), each a dispatcher call.
at::Tensor index_copy(c10::ArrayRef<c10::IValue> args, const Call&) {
  const at::Tensor& self = args[0].toTensor();
  const int64_t n = self.dim();
  const int64_t dim = args[1].toInt() < 0 ? args[1].toInt() + n : args[1].toInt();
  const at::Tensor& source = args[3].toTensor();
  at::Tensor out = args[4].toTensor();
  if (!out.is_same(self)) {
    out.copy_(self);
  }
  std::vector<int64_t> shape(static_cast<size_t>(n), 1);
  shape[static_cast<size_t>(dim)] = -1;
  return out.scatter_(dim, args[2].toTensor().reshape(shape).expand(source.sizes()), source);
}

// -- arange.start_out(Scalar start, Scalar end, Scalar step=1, *, Tensor(a!) out) -----------------

constexpr double kExactInts = 9007199254740992.0;     // 2**53: every int up to it is a double

bool plain_number(const c10::Scalar& value) {
  return !value.isSymbolic() && (value.isIntegral(/*includeBool=*/false) || value.isFloatingPoint());
}

// The number as a double that compares with the others as Python compares int and float
// (exactly): a finite float, or an int a double holds exactly.
bool exact_double(const c10::Scalar& value, double& out) {
  out = value.toDouble();
  return value.isFloatingPoint() ? std::isfinite(out) : std::abs(out) < kExactInts;
}

// extra_decompositions.py _arange_length, for the calls where it returns: false where it raises
// (a zero step, bounds against the step's sign, a count math.ceil refuses), which Python runs.
bool arange_length(const c10::Scalar& start, const c10::Scalar& end, const c10::Scalar& step, int64_t& length) {
  if (!plain_number(start) || !plain_number(end) || !plain_number(step)) {
    return false;
  }
  if (start.isIntegral(false) && end.isIntegral(false) && step.isIntegral(false)) {
    const int64_t a = start.toLong(), b = end.toLong(), c = step.toLong();
    if (c == 0 || (c > 0 && b < a) || (c < 0 && b > a)) {
      return false;
    }
  } else {
    double a = 0, b = 0, c = 0;
    if (!exact_double(start, a) || !exact_double(end, b) || !exact_double(step, c) || c == 0 ||
        (c > 0 && b < a) || (c < 0 && b > a)) {
      return false;
    }
  }
  // max(0, math.ceil((float(end) - float(start)) / float(step))), in doubles as Python's floats.
  const double count = std::ceil((end.toDouble() - start.toDouble()) / step.toDouble());
  if (!std::isfinite(count) || count >= 0x1p62) {
    return false;
  }
  length = count > 0 ? static_cast<int64_t>(count) : 0;
  return true;
}

bool arange_call(c10::ArrayRef<c10::IValue> args, Call& call) {
  const at::Tensor& out = args[3].toTensor();
  return add_tensor(out, call) && !out.requires_grad() &&
         arange_length(args[0].toScalar(), args[1].toScalar(), args[2].toScalar(), call.length) &&
         call.length <= std::numeric_limits<int64_t>::max() / static_cast<int64_t>(out.element_size()) -
                            out.storage_offset();
}

// extra_decompositions.py arange_start_out: the values by ATen's CPU kernel in out's dtype (the
// CPU's bit for bit), out resized to the count, one copy_ to the device through the dispatcher.
at::Tensor arange(c10::ArrayRef<c10::IValue> args, const Call& call) {
  at::Tensor out = args[3].toTensor();
  const at::Tensor values = at::arange(args[0].toScalar(), args[1].toScalar(), args[2].toScalar(),
                                       at::TensorOptions().dtype(out.scalar_type()).device(at::kCPU));
  out.resize_({call.length});       // resize_'s own kernel (resize_kernel.h), as the Python decomposition
  out.copy_(values);
  return out;
}

// -- the kernel ----------------------------------------------------------------------------------

// What chain.py _run_generic's `except Exception` catches of a Python exception: not
// KeyboardInterrupt, SystemExit or GeneratorExit, which go on as they do there.
bool chain_catches(const python_error& error) {
  pybind11::gil_scoped_acquire gil;
  return error.type == nullptr || PyObject_IsSubclass(error.type, PyExc_Exception) == 1;
}

struct Decomposition {
  const char* name;
  size_t nargs;
  bool (*call_of)(c10::ArrayRef<c10::IValue>, Call&);
  at::Tensor (*run)(c10::ArrayRef<c10::IValue>, const Call&);
};

const Decomposition kDecompositions[] = {
    {"index_copy.out", 5, &index_copy_call, &index_copy},
    {"arange.start_out", 4, &arange_call, &arange},
};

class DecompositionKernel;
std::mutex g_kernels_lock;
std::vector<DecompositionKernel*> g_kernels;      // for counts; owned by the dispatcher, never freed

class DecompositionKernel final : public c10::OperatorKernel {
 public:
  DecompositionKernel(const Decomposition& decomposition, std::string qualified, PyObject* fallback,
                      PyObject* decided)
      : decomposition_(decomposition), qualified_(std::move(qualified)), fallback_(fallback), decided_(decided) {
    Py_INCREF(fallback_);
    Py_INCREF(decided_);
  }

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
    const auto arguments = torch::jit::last(*stack, decomposition_.nargs);
    Call call;
    // Any stream: the decomposition's calls are kernels that each order their own (stream_order.h).
    if (python_switches() != 0 || strict() || !decomposition_.call_of(arguments, call) ||
        call.device >= device_count()) {
      return python(op, stack);
    }
    const uint64_t key = FallbackDecisions::key(call.device, c10::ArrayRef<c10::ScalarType>(call.dtypes, call.ndtypes));
    switch (decisions_.find(key)) {
      case Decision::kUnknown:
        return learn(op, stack, key);
      case Decision::kElsewhere:
        return python(op, stack);
      case Decision::kDecomposition:
        break;
    }
    at::Tensor out;
    try {
      out = decomposition_.run(arguments, call);
    } catch (python_error& error) {
      if (!chain_catches(error)) {
        throw;
      }
    } catch (...) {       // every C++ error is a Python Exception once raised
    }
    if (!out.defined()) {
      // The generic kernel raised: Python runs the call again, from the top, and does what the
      // chain does then (the CPU fallback, or the error when that is off).
      return python(op, stack);
    }
    calls_.fetch_add(1, std::memory_order_relaxed);
    torch::jit::drop(*stack, decomposition_.nargs);
    stack->emplace_back(std::move(out));
  }

  const std::string& qualified() const { return qualified_; }
  uint64_t take_calls() { return calls_.exchange(0, std::memory_order_relaxed); }

 private:
  void python(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
    g_python_calls.fetch_add(1, std::memory_order_relaxed);
    call_python_kernel(fallback_, op, stack);
  }

  // The boxed fallback runs the call (and decides, if the chain had not), then says whether the
  // decision for its (device, dtypes) is the decomposition.
  void learn(const c10::OperatorHandle& op, torch::jit::Stack* stack, uint64_t key) {
    const uint64_t generation = decisions_generation();
    g_python_calls.fetch_add(1, std::memory_order_relaxed);
    call_python_kernel(fallback_, op, stack, [&](PyObject* args, PyObject* kwargs) {
      PyObject* answer = PyObject_Call(decided_, args, kwargs);
      const int truth = answer == nullptr ? -1 : PyObject_IsTrue(answer);
      Py_XDECREF(answer);
      if (truth < 0) {
        throw_python_error();
      }
      decisions_.put(key, truth == 1, generation);
    });
  }

  const Decomposition& decomposition_;
  std::string qualified_;
  PyObject* fallback_;
  PyObject* decided_;
  FallbackDecisions decisions_;
  std::atomic<uint64_t> calls_{0};
};

// -- Python methods ------------------------------------------------------------------------------

PyObject* register_py(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  TORCH_CHECK_TYPE(nargs == 3, "register_fallback_decomposition(name, fallback, decided)");
  const char* name = PyUnicode_AsUTF8(args[0]);
  if (name == nullptr) {
    return nullptr;
  }
  register_fallback_decomposition(name, args[1], args[2]);
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

PyObject* forget_py(PyObject*, PyObject*) {
  forget_fallback_decisions();
  Py_RETURN_NONE;
}

PyObject* take_counts_py(PyObject*, PyObject*) {
  HANDLE_TH_ERRORS
  return counts_dict([](PyObject* counts) {
    std::lock_guard<std::mutex> lock(g_kernels_lock);
    for (DecompositionKernel* kernel : g_kernels) {
      const uint64_t calls = kernel->take_calls();
      if (calls != 0 && !add_count(counts, kernel->qualified(), calls)) {
        return false;
      }
    }
    return true;
  });
  END_HANDLE_TH_ERRORS
}

PyMethodDef g_methods[] = {
    {"register_fallback_decomposition", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(register_py)),
     METH_FASTCALL, "register_fallback_decomposition(name, fallback, decided): the C++ generic kernel of an op"},
    {"forget_fallback_decisions", forget_py, METH_NOARGS,
     "forget_fallback_decisions(): the fallback chain's decisions changed (FallbackChain.configure)"},
    {"take_fallback_counts", take_counts_py, METH_NOARGS,
     "take_fallback_counts() -> {op: generic calls served in C++ since the last take}"},
    {nullptr, nullptr, 0, nullptr},
};

} // namespace

void register_fallback_decomposition(const std::string& name, PyObject* fallback, PyObject* decided) {
  for (const Decomposition& decomposition : kDecompositions) {
    if (name != decomposition.name) {
      continue;
    }
    const auto dot = name.find('.');
    const auto op = c10::Dispatcher::singleton().findSchemaOrThrow(("aten::" + name.substr(0, dot)).c_str(),
                                                                   name.substr(dot + 1).c_str());
    TORCH_CHECK(op.schema().arguments().size() == decomposition.nargs, "register_fallback_decomposition: aten::",
                name, " has ", op.schema().arguments().size(), " arguments, not ", decomposition.nargs);
    auto kernel = std::make_unique<DecompositionKernel>(decomposition, "aten::" + name, fallback, decided);
    {
      std::lock_guard<std::mutex> lock(g_kernels_lock);
      g_kernels.push_back(kernel.get());
    }
    private_use1_library().impl(name.c_str(), torch::CppFunction::makeFromBoxedFunctor(std::move(kernel)));
    return;
  }
  TORCH_CHECK_VALUE(false, "register_fallback_decomposition: no C++ decomposition of ", name);
}

uint64_t decomposition_python_calls() noexcept {
  return g_python_calls.load(std::memory_order_relaxed);
}

PyMethodDef* decomposition_methods() {
  return g_methods;
}

} // namespace fl_bridge
