#include "graph.h"

#include <c10/core/DeviceType.h>

#include "python_calls.h"

namespace fl_bridge {

#ifdef FL_BRIDGE_HAS_GRAPH_IMPL
namespace {

constexpr const char* kModule = "fl_runtime.ops.graph.graph_capture";

// graph.<method>(*Py_BuildValue(format, ...)) with the GIL; a Python exception is rethrown as
// torch's python_error, so the user sees FLGraphCaptureError with its message.
template <typename... Args>
PyObject* call_graph(PyObject* graph, const char* method, const char* format, Args... args) {
  PyObject* result = PyObject_CallMethod(graph, method, format, args...);
  if (result == nullptr) {
    throw_python_error();
  }
  return result;
}

void call_graph_void(PyObject* graph, const char* method) {
  Gil gil;
  Py_DECREF(call_graph(graph, method, nullptr));
}

} // namespace

Graph::Graph(at::GraphImplArgs args) {
  Gil gil;
  PyObject* module = PyImport_ImportModule(kModule);
  if (module == nullptr) {
    throw_python_error();
  }
  graph_ = PyObject_CallMethod(module, "CapturedGraph", "(O)", args.keep_graph ? Py_True : Py_False);
  Py_DECREF(module);
  if (graph_ == nullptr) {
    throw_python_error();
  }
}

Graph::~Graph() {
  if (graph_ == nullptr || interpreter_gone()) {
    return;          // the interpreter is gone: the process takes the graph's memory with it
  }
  Gil gil;
  Py_DECREF(graph_);
}

void Graph::capture_begin(at::MempoolId_t pool, at::GraphCaptureMode capture_mode) {
  Gil gil;
  Py_DECREF(call_graph(graph_, "capture_begin", "((KK)i)", static_cast<unsigned long long>(pool.first),
                       static_cast<unsigned long long>(pool.second), static_cast<int>(capture_mode)));
}

void Graph::capture_end() {
  call_graph_void(graph_, "capture_end");
}

void Graph::instantiate() {
  call_graph_void(graph_, "instantiate");
}

void Graph::replay() {
  call_graph_void(graph_, "replay");
}

void Graph::reset() {
  call_graph_void(graph_, "reset");
}

at::MempoolId_t Graph::pool() const {
  Gil gil;
  PyObject* result = call_graph(graph_, "pool_id", nullptr);
  unsigned long long first = 0;
  unsigned long long second = 0;
  const bool parsed = PyArg_ParseTuple(result, "KK", &first, &second);
  Py_DECREF(result);
  if (!parsed) {
    throw_python_error();
  }
  return {static_cast<at::CaptureId_t>(first), static_cast<at::CaptureId_t>(second)};
}

void Graph::enable_debug_mode() {
  call_graph_void(graph_, "enable_debug_mode");
}

void Graph::debug_dump(const std::string& path) {
  Gil gil;
  Py_DECREF(call_graph(graph_, "debug_dump", "(s)", path.c_str()));
}

bool register_graph_impl() {
  // Keyed by the device type's name as PyTorch looks it up (create_graph_impl): the bridge
  // installs after the runtime renamed PrivateUse1 to "fl".
  const std::string key = c10::DeviceTypeName(c10::DeviceType::PrivateUse1, /*lower_case=*/false);
  at::GraphImplRegistry()->Register(key, [](at::GraphImplArgs args) -> std::unique_ptr<at::GraphImplInterface> {
    return std::make_unique<Graph>(args);
  });
  return true;
}

#else

bool register_graph_impl() {
  return false;      // this torch has no device-generic graph interface (before 2.13)
}

#endif

} // namespace fl_bridge
