#include "python_kernel.h"

#include <ATen/core/jit_type.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/pybind.h>

#include "python_calls.h"

namespace fl_bridge {
namespace {

bool is_kind(const c10::Argument& arg, c10::TypeKind kind) {
  const auto& type = arg.real_type();
  if (type->kind() == kind) {
    return true;
  }
  const auto optional = type->cast<c10::OptionalType>();
  return optional != nullptr && optional->getElementType()->kind() == kind;
}

PyObject* to_python(const c10::Argument& arg, const c10::IValue& value) {
  if (value.isNone()) {
    Py_RETURN_NONE;
  }
  PyObject* object = nullptr;
  if (is_kind(arg, c10::ScalarTypeType::Kind)) {
    object = reinterpret_cast<PyObject*>(torch::getTHPDtype(static_cast<c10::ScalarType>(value.toInt())));
  } else if (is_kind(arg, c10::LayoutType::Kind)) {
    object = reinterpret_cast<PyObject*>(torch::getTHPLayout(static_cast<c10::Layout>(value.toInt())));
  } else if (is_kind(arg, c10::MemoryFormatType::Kind)) {
    // pybind's caster, not getTHPMemoryFormat: that one gives a borrowed reference
    // (tensor_memoryformats.h), which returned as ours cost the format object a reference
    // per call until it was freed; the caster owns the right count in each PyTorch version.
    return pybind11::cast(static_cast<c10::MemoryFormat>(value.toInt())).release().ptr();
  } else {
    return torch::jit::toPyObject(value).release().ptr();
  }
  Py_INCREF(object);          // getTHPDtype / getTHPLayout give borrowed references
  return object;
}

bool is_default(const c10::Argument& arg, const c10::IValue& value) {
  return arg.default_value().has_value() && *arg.default_value() == value;
}

void push_result(const c10::FunctionSchema& schema, torch::jit::Stack* stack, PyObject* out) {
  const auto& returns = schema.returns();
  if (returns.empty()) {
    return;                  // `-> ()`: the kernel returned None
  }
  pybind11::handle result(out);
  if (returns.size() == 1) {
    stack->push_back(torch::jit::toIValue(result, returns[0].real_type()));
    return;
  }
  auto items = result.cast<pybind11::sequence>();
  TORCH_CHECK(items.size() == returns.size(), schema.name(), ": the fl kernel returned ", items.size(),
              " values for ", returns.size(), " results");
  for (size_t i = 0; i < returns.size(); i++) {
    stack->push_back(torch::jit::toIValue(items[i], returns[i].real_type()));
  }
}

} // namespace

std::pair<PyObject*, PyObject*> to_python_call(const c10::FunctionSchema& schema,
                                               const std::vector<c10::IValue>& arguments) {
  const auto& specs = schema.arguments();
  int64_t last = -1;                         // the last positional argument that is not its default
  for (size_t i = 0; i < arguments.size(); i++) {
    if (!specs[i].kwarg_only() && !is_default(specs[i], arguments[i])) {
      last = static_cast<int64_t>(i);
    }
  }
  PyObject* args = PyTuple_New(last + 1);
  PyObject* kwargs = PyDict_New();
  if (args == nullptr || kwargs == nullptr) {
    Py_XDECREF(args);
    Py_XDECREF(kwargs);
    throw_python_error();
  }
  try {
    for (size_t i = 0; i < arguments.size(); i++) {
      if (specs[i].kwarg_only()) {
        if (!is_default(specs[i], arguments[i])) {
          PyObject* value = to_python(specs[i], arguments[i]);
          const int failed = PyDict_SetItemString(kwargs, specs[i].name().c_str(), value);
          Py_DECREF(value);
          if (failed < 0) {
            throw_python_error();
          }
        }
      } else if (static_cast<int64_t>(i) <= last) {
        PyTuple_SET_ITEM(args, static_cast<Py_ssize_t>(i), to_python(specs[i], arguments[i]));
      }
    }
  } catch (...) {
    Py_DECREF(args);
    Py_DECREF(kwargs);
    throw;
  }
  return {args, kwargs};
}

void call_python_kernel(PyObject* function, const c10::OperatorHandle& op, torch::jit::Stack* stack,
                        const AfterCall& after) {
  const auto& schema = op.schema();
  auto arguments = torch::jit::pop(*stack, schema.arguments().size());
  pybind11::gil_scoped_acquire gil;
  count_python_entry();
  auto [args, kwargs] = to_python_call(schema, arguments);
  arguments.clear();         // Python holds the values now: a failed call frees nothing here
  PyObject* out = PyObject_Call(function, args, kwargs);
  try {
    if (out == nullptr) {
      throw_python_error();
    }
    push_result(schema, stack, out);
    if (after) {
      after(args, kwargs);
    }
  } catch (...) {
    Py_XDECREF(out);
    Py_DECREF(args);
    Py_DECREF(kwargs);
    throw;
  }
  Py_DECREF(out);
  Py_DECREF(args);
  Py_DECREF(kwargs);
}

} // namespace fl_bridge
