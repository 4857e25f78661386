#include "eager_kernel.h"

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include <ATen/autocast_mode.h>
#include <ATen/core/op_registration/op_registration.h>
#include <c10/core/TensorImpl.h>
#include <torch/csrc/Exceptions.h>
#include <torch/library.h>

#include "call_key.h"
#include "device_allocator.h"
#include "factory_kernels.h"
#include "resize_kernel.h"
#include "fallback_decompositions.h"
#include "fast_path_switches.h"
#include "host_copies.h"
#include "program_table.h"
#include "sdpa_kernel.h"
#include "stream_order.h"
#include "stream_registry.h"
#include "python_calls.h"
#include "python_ints.h"
#include "python_kernel.h"
#include "thread_state.h"
#include "to_copy_kernel.h"
#include "view_kernels.h"

namespace fl_bridge {
namespace {

constexpr c10::DeviceType kFl = c10::DeviceType::PrivateUse1;

PyObject* g_launch_failure = nullptr;

// Scratch for one launch's fl_arg array: the plugin copies what it keeps before
// launch_kernel returns (fl_abi.h), so each thread reuses its own.
char* thread_arena(size_t nbytes) {
  thread_local std::vector<uint64_t> arena;
  if (arena.size() * sizeof(uint64_t) < nbytes) {
    arena.resize((nbytes + 7) / 8 + 512);
  }
  return reinterpret_cast<char*>(arena.data());
}

at::Tensor new_output(c10::DeviceIndex device, const OutputLayout& layout) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), layout.nbytes, allocate_on(device, layout.nbytes),
                       &device_allocator(), /*resizable=*/true);
  auto tensor = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                                         c10::scalarTypeToTypeMeta(layout.dtype));
  tensor.unsafeGetTensorImpl()->set_sizes_and_strides(layout.sizes, layout.strides);
  return tensor;
}

[[noreturn]] void raise_launch_failure(const std::string& name, c10::DeviceIndex device, fl_status status) {
  pybind11::gil_scoped_acquire gil;
  PyObject* result = PyObject_CallFunction(g_launch_failure, "sii", name.c_str(), static_cast<int>(device),
                                           static_cast<int>(status));
  Py_XDECREF(result);
  if (result == nullptr) {
    throw_python_error();
  }
  TORCH_CHECK(false, "launch_kernel(", name, ") on fl:", static_cast<int>(device), " failed with status ",
              static_cast<int>(status));
}

class EagerKernel;
std::mutex g_kernels_lock;
std::vector<EagerKernel*> g_kernels;       // for counts and statistics; never freed

class EagerKernel final : public c10::OperatorKernel {
 public:
  EagerKernel(std::string name, PyObject* kernel, PyObject* program_of, std::vector<SizeReturn> sizes)
      : name_(std::move(name)), kernel_(kernel), program_of_(program_of), sizes_(std::move(sizes)) {
    Py_INCREF(kernel_);
    Py_INCREF(program_of_);
  }

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
    const uint32_t off = python_switches();
    if (off != 0) {
      if (off & kHeldInputs) {
        take_held_inputs();      // the Python kernel releases them first thing
      }
      return python(op, stack);
    }
    const size_t nargs = op.schema().arguments().size();
    const auto arguments = torch::jit::last(*stack, nargs);
    const EagerShortcut shortcut = shortcut_.load(std::memory_order_acquire);
    if (shortcut != nullptr && shortcut(arguments, stack)) {
      return;
    }
    std::string key;
    key.reserve(128);
    if (!append_call_key(arguments, key)) {
      return python(op, stack);
    }
    const size_t hash = std::hash<std::string>{}(key);
    const ProgramEntry* entry = table_.find(key, hash);
    if (entry == nullptr) {
      return record(op, stack, std::move(key), hash);
    }
    const LaunchProgram* program = entry->program.get();
    if (program == nullptr) {       // served by Python so far: ask again after 1, 2, 4 ... calls
      const uint64_t calls = entry->calls.fetch_add(1, std::memory_order_relaxed) + 1;
      return (calls & (calls - 1)) == 0 ? record(op, stack, std::move(key), hash) : python(op, stack);
    }
    if (program->epoch() != kernel_epoch()) {
      return record(op, stack, std::move(key), hash);
    }
    if (program->has_autocast_variant() && at::autocast::is_autocast_enabled(kFl)) {
      return python(op, stack);
    }
    if (run(*program, arguments, nargs, stack)) {
      entry->calls.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    python(op, stack);
  }

  template <typename Visit>
  void take_counts(Visit&& visit) {
    table_.take_counts(visit);
  }

  uint64_t python_calls() const { return python_calls_.load(std::memory_order_relaxed); }

  const std::string& name() const noexcept { return name_; }
  void set_shortcut(EagerShortcut shortcut) noexcept { shortcut_.store(shortcut, std::memory_order_release); }

 private:
  void python(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
    python_calls_.fetch_add(1, std::memory_order_relaxed);
    call_python_kernel(kernel_, op, stack);
  }

  // The Python kernel, then the program it recorded for this signature (or none), kept here.
  // Only while the arguments still have the key they came with: a call that resized its
  // out= tensor is asked about under the new shape, whose program is another signature's.
  void record(const c10::OperatorHandle& op, torch::jit::Stack* stack, std::string key, size_t hash) {
    python_calls_.fetch_add(1, std::memory_order_relaxed);
    const auto arguments = torch::jit::last(*stack, op.schema().arguments().size());
    const std::vector<c10::IValue> before(arguments.begin(), arguments.end());
    call_python_kernel(kernel_, op, stack, [&](PyObject* args, PyObject* kwargs) {
      std::string after;
      if (!append_call_key(before, after) || after != key) {
        return;
      }
      PyObject* spec = PyObject_CallFunctionObjArgs(program_of_, args, kwargs, nullptr);
      if (spec == nullptr) {
        throw_python_error();
      }
      std::unique_ptr<const LaunchProgram> program;
      try {
        if (spec != Py_None) {
          program = std::make_unique<const LaunchProgram>(LaunchProgram::from_spec(spec));
        }
      } catch (...) {
        Py_DECREF(spec);
        throw;
      }
      Py_DECREF(spec);
      const ProgramEntry* known = table_.find(key, hash);
      if (program != nullptr || known == nullptr) {
        table_.put(std::move(key), hash, std::move(program));
      }
    });
  }

  // The program's launch; false sends the call to Python (nothing was enqueued).
  bool run(const LaunchProgram& program, c10::ArrayRef<c10::IValue> arguments, size_t nargs,
           torch::jit::Stack* stack) {
    const c10::DeviceIndex device = program.device();
    const StreamRef stream = current_stream_of(device);
    if (!stream) {
      return false;       // a stream the bridge does not know: the Python path names it
    }
    std::vector<at::Tensor> outs;
    outs.reserve(program.outputs().size());
    for (const auto& layout : program.outputs()) {
      if (layout.alias >= 0) {
        outs.push_back(arguments[layout.alias].toTensor());
      } else if (layout.fresh) {
        outs.push_back(new_output(device, layout));
      } else {
        outs.emplace_back();
      }
    }
    char* arena = thread_arena(program.template_size());
    if (!program.fill(arena, arguments, outs)) {
      return false;
    }
    const bool tracking = cross_stream_tracking();
    if (tracking) {
      order_after_writers(device, stream, arguments, outs);
    }
    const fl_status status = program.launch(stream.handle(), arena);
    if (tracking) {
      settle_writes();            // enqueued (or refused): stream_order.h "Once per write"
    }
    if (status != FL_SUCCESS) {
      outs.clear();               // nothing of this call stays allocated
      if (status == FL_ERROR_NOT_SUPPORTED) {
        return false;             // declined: the Python path falls back, naming the reason
      }
      raise_launch_failure(name_, device, status);
    }
    std::vector<int64_t> sizes;
    for (const SizeReturn& size : sizes_) {
      sizes.push_back(arguments[size.argument].toTensor().size(size.dim));
    }
    torch::jit::drop(*stack, nargs);
    for (size_t i = 0, next_size = 0; i < outs.size(); i++) {
      if (next_size < sizes_.size() && sizes_[next_size].output == i) {
        stack->emplace_back(sizes[next_size++]);
      } else {
        stack->emplace_back(std::move(outs[i]));
      }
    }
    return true;
  }

  std::string name_;
  PyObject* kernel_;
  PyObject* program_of_;
  std::vector<SizeReturn> sizes_;      // by output index
  ProgramTable table_;
  std::atomic<uint64_t> python_calls_{0};
  std::atomic<EagerShortcut> shortcut_{nullptr};
};

void redispatch_to_cpu(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
}

// -- Python methods --------------------------------------------------------------------------

std::string text_of(PyObject* value) {
  const char* text = PyUnicode_AsUTF8(value);
  if (text == nullptr) {
    throw_python_error();
  }
  return text;
}

// ((output, argument, dim), ...) in output order, as register_owned hands them.
std::vector<SizeReturn> size_returns(PyObject* triples) {
  std::vector<SizeReturn> sizes;
  TORCH_CHECK_TYPE(PyTuple_Check(triples), "register_eager_op: sizes is a tuple of (output, argument, dim)");
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(triples); i++) {
    long long output = 0, argument = 0, dim = 0;
    if (!PyArg_ParseTuple(PyTuple_GET_ITEM(triples, i), "LLL", &output, &argument, &dim)) {
      throw_python_error();
    }
    TORCH_CHECK_VALUE(output >= 0 && argument >= 0 && (sizes.empty() || static_cast<size_t>(output) > sizes.back().output),
                      "register_eager_op: sizes must name increasing outputs and arguments >= 0");
    sizes.push_back({static_cast<size_t>(output), static_cast<size_t>(argument), static_cast<int64_t>(dim)});
  }
  return sizes;
}

PyObject* register_eager_op_py(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  TORCH_CHECK_TYPE(nargs == 3 || nargs == 4, "register_eager_op(name, kernel, program_of, sizes=())");
  register_eager_op(text_of(args[0]), args[1], args[2], nargs == 4 ? size_returns(args[3]) : std::vector<SizeReturn>{});
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

PyObject* register_view_py(PyObject*, PyObject* name) {
  HANDLE_TH_ERRORS
  register_view(text_of(name));
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

PyObject* configure_eager_py(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  TORCH_CHECK_TYPE(nargs == 2, "configure_eager(launch_failure, default_streams)");
  configure_eager(args[0], args[1]);
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

PyObject* set_switch_py(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  TORCH_CHECK_TYPE(nargs == 2, "set_switch(bit, on)");
  set_switch(static_cast<uint32_t>(int_arg(args[0])), PyObject_IsTrue(args[1]) == 1);
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

PyObject* set_kernel_epoch_py(PyObject*, PyObject* epoch) {
  HANDLE_TH_ERRORS
  set_kernel_epoch(u64_arg(epoch));
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

PyObject* take_counts_py(PyObject*, PyObject*) {
  HANDLE_TH_ERRORS
  return counts_dict([](PyObject* counts) {
    std::lock_guard<std::mutex> lock(g_kernels_lock);
    bool failed = false;
    for (EagerKernel* kernel : g_kernels) {
      kernel->take_counts([&](const std::string& name, uint64_t calls) {
        failed = failed || !add_count(counts, name, calls);
      });
    }
    return !failed;
  });
  END_HANDLE_TH_ERRORS
}

PyObject* eager_stats_py(PyObject*, PyObject*) {
  HANDLE_TH_ERRORS
  uint64_t python_calls = factory_python_calls() + resize_python_calls() + to_copy_python_calls() +
                          local_scalar_python_calls() + sdpa_python_calls() + decomposition_python_calls();
  {
    std::lock_guard<std::mutex> lock(g_kernels_lock);
    for (const EagerKernel* kernel : g_kernels) {
      python_calls += kernel->python_calls();
    }
  }
  return Py_BuildValue("{sKsK}", "python_calls", static_cast<unsigned long long>(python_calls), "stream_waits",
                       static_cast<unsigned long long>(stream_waits()));
  END_HANDLE_TH_ERRORS
}

PyMethodDef g_methods[] = {
    {"register_eager_op", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(register_eager_op_py)),
     METH_FASTCALL, "register_eager_op(name, kernel, program_of, sizes=()): the C++ PrivateUse1 kernel of an aten op"},
    {"register_view", register_view_py, METH_O, "register_view(name): a view's PrivateUse1 kernel (CPU's)"},
    {"configure_eager", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(configure_eager_py)),
     METH_FASTCALL, "configure_eager(launch_failure, default_streams)"},
    {"set_switch", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(set_switch_py)), METH_FASTCALL,
     "set_switch(bit, on): send every eager call to Python while a bit is set (fast_path_switches.h)"},
    {"set_kernel_epoch", set_kernel_epoch_py, METH_O, "set_kernel_epoch(n): the kernel tables changed"},
    {"take_counts", take_counts_py, METH_NOARGS, "take_counts() -> {op: calls served in C++ since the last take}"},
    {"eager_stats", eager_stats_py, METH_NOARGS, "eager_stats() -> {'python_calls': calls the C++ kernels (eager, factories, resize_, _to_copy, .item(), sdpa, fallback decompositions) handed to Python, 'stream_waits': waits for another stream's writes they enqueued}"},
    {nullptr, nullptr, 0, nullptr},
};

} // namespace

PyObject* counts_dict(const std::function<bool(PyObject*)>& fill) {
  PyObject* counts = PyDict_New();
  if (counts != nullptr && !fill(counts)) {
    Py_CLEAR(counts);
  }
  return counts;
}

bool add_count(PyObject* counts, const std::string& name, uint64_t calls) {
  PyObject* before = PyDict_GetItemString(counts, name.c_str());      // borrowed
  PyObject* total = PyLong_FromUnsignedLongLong(calls + (before ? u64_arg(before) : 0));
  const bool added = total != nullptr && PyDict_SetItemString(counts, name.c_str(), total) == 0;
  Py_XDECREF(total);
  return added;
}

torch::Library& private_use1_library() {
  // Registrations live as long as this object: the process.
  static auto* lib = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  return *lib;
}

void configure_eager(PyObject* launch_failure, PyObject* default_streams) {
  TORCH_CHECK_TYPE(PyTuple_Check(default_streams), "configure_eager: default_streams is a tuple of ints");
  std::vector<fl_stream> streams;
  for (const uint64_t handle : u64_list(default_streams)) {
    streams.push_back(reinterpret_cast<fl_stream>(static_cast<uintptr_t>(handle)));
  }
  Py_INCREF(launch_failure);
  Py_XSETREF(g_launch_failure, launch_failure);
  set_default_streams(std::move(streams));
}

void set_eager_shortcut(const std::string& name, EagerShortcut shortcut) {
  std::lock_guard<std::mutex> lock(g_kernels_lock);
  for (EagerKernel* kernel : g_kernels) {
    if (kernel->name() == name) {
      kernel->set_shortcut(shortcut);
      return;
    }
  }
  TORCH_CHECK(false, "set_eager_shortcut: no C++ kernel is registered for ", name);
}

void register_eager_op(const std::string& name, PyObject* kernel, PyObject* program_of, std::vector<SizeReturn> sizes) {
  auto functor = std::make_unique<EagerKernel>(name, kernel, program_of, std::move(sizes));
  {
    std::lock_guard<std::mutex> lock(g_kernels_lock);
    g_kernels.push_back(functor.get());    // owned by the dispatcher from here, which keeps it
  }
  private_use1_library().impl(name.c_str(), torch::CppFunction::makeFromBoxedFunctor(std::move(functor)));
}

void register_view(const std::string& name) {
  if (register_unboxed_view(private_use1_library(), name)) {
    return;
  }
  private_use1_library().impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&redispatch_to_cpu>());
}

PyMethodDef* eager_methods() {
  return g_methods;
}

} // namespace fl_bridge
