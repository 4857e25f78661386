#include "stream_registry.h"

#include <atomic>
#include <mutex>
#include <unordered_map>
#include <utility>

#include <c10/util/Exception.h>
#include <torch/csrc/Exceptions.h>

#include "caching_allocator.h"
#include "python_calls.h"
#include "python_ints.h"
#include "thread_state.h"

namespace fl_bridge {

// A stream the bridge destroys: drained, forgotten by the allocator, then destroyed, when
// the last StreamRef (or the registry's entry) lets go.
struct OwnedStream {
  OwnedStream(c10::DeviceIndex device, c10::StreamId id, fl_stream handle, const fl_api* api)
      : device(device), id(id), handle(handle), api(api) {}
  ~OwnedStream() {
    api->stream_synchronize(handle);         // its error, if any, had no one left to report it to
    allocator_of(device).forget_stream(id);
    api->stream_destroy(handle);
  }
  OwnedStream(const OwnedStream&) = delete;
  OwnedStream& operator=(const OwnedStream&) = delete;

  const c10::DeviceIndex device;
  const c10::StreamId id;
  const fl_stream handle;
  const fl_api* const api;
};

namespace {

struct DeviceStreams {
  std::mutex mutex;
  std::unordered_map<c10::StreamId, std::shared_ptr<const OwnedStream>> streams;
};

std::vector<fl_stream> g_defaults;                       // set once, before any kernel
std::vector<DeviceStreams*>* g_devices = nullptr;        // leaked, as the allocators
std::atomic<size_t> g_known{0};

DeviceStreams* streams_of(c10::DeviceIndex device) noexcept {
  if (g_devices == nullptr || device < 0 || static_cast<size_t>(device) >= g_devices->size()) {
    return nullptr;
  }
  return (*g_devices)[device];
}

// The calling thread's current non-default stream of each device, held while current.  A
// thread that ends at process exit lets go without destroying (the plugin may be gone by then).
class HeldStreams {
 public:
  ~HeldStreams() {
    if (interpreter_gone()) {
      for (StreamRef& ref : refs_) {
        new StreamRef(std::move(ref));        // leaked on purpose, as the allocators are
      }
    }
  }
  const StreamRef* find(c10::DeviceIndex device) const noexcept {
    return static_cast<size_t>(device) < refs_.size() ? &refs_[device] : nullptr;
  }
  void hold(c10::DeviceIndex device, StreamRef ref) {
    if (static_cast<size_t>(device) >= refs_.size()) {
      refs_.resize(static_cast<size_t>(device) + 1);
    }
    refs_[device] = std::move(ref);          // the one it replaces may be destroyed here
  }

 private:
  std::vector<StreamRef> refs_;
};

thread_local HeldStreams t_held;

PyObject* remember_stream_py(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  TORCH_CHECK_TYPE(nargs == 3, "remember_stream(device, stream_id, handle)");
  const auto handle = reinterpret_cast<fl_stream>(static_cast<uintptr_t>(u64_arg(args[2])));
  return PyBool_FromLong(remember_stream(device_arg(args[0]), int_arg(args[1]), handle));
  END_HANDLE_TH_ERRORS
}

PyObject* release_stream_py(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  TORCH_CHECK_TYPE(nargs == 2, "release_stream(device, stream_id)");
  const auto device = device_arg(args[0]);
  const c10::StreamId id = int_arg(args[1]);
  bool known = false;
  Py_BEGIN_ALLOW_THREADS      // the last holder drains the stream: no GIL held meanwhile
  known = release_stream(device, id);
  Py_END_ALLOW_THREADS
  return PyBool_FromLong(known);
  END_HANDLE_TH_ERRORS
}

PyObject* known_streams_py(PyObject*, PyObject*) {
  return PyLong_FromSize_t(known_streams());
}

PyMethodDef g_methods[] = {
    {"remember_stream", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(remember_stream_py)),
     METH_FASTCALL, "remember_stream(device, stream_id, handle) -> bool: the bridge destroys this stream once released"},
    {"release_stream", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(release_stream_py)),
     METH_FASTCALL, "release_stream(device, stream_id) -> bool: Python dropped it (False: unknown here)"},
    {"known_streams", known_streams_py, METH_NOARGS, "known_streams() -> live non-default streams the bridge holds"},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

void set_default_streams(std::vector<fl_stream> streams) {
  if (g_devices == nullptr) {
    auto* devices = new std::vector<DeviceStreams*>();
    for (size_t i = 0; i < streams.size(); i++) {
      devices->push_back(new DeviceStreams());
    }
    g_devices = devices;
  }
  g_defaults = std::move(streams);
}

fl_stream default_stream(c10::DeviceIndex device) noexcept {
  if (device < 0 || static_cast<size_t>(device) >= g_defaults.size()) {
    return nullptr;
  }
  return g_defaults[device];
}

StreamRef stream_of(c10::DeviceIndex device, c10::StreamId id) {
  if (id == kDefaultStreamId) {
    return StreamRef(id, default_stream(device));
  }
  DeviceStreams* streams = streams_of(device);
  if (streams == nullptr) {
    return StreamRef();
  }
  std::lock_guard<std::mutex> lock(streams->mutex);
  auto found = streams->streams.find(id);
  if (found == streams->streams.end()) {
    return StreamRef();
  }
  return StreamRef(id, found->second->handle, found->second);
}

StreamRef current_stream_of(c10::DeviceIndex device) {
  const c10::StreamId id = current_stream_id(device);
  if (id == kDefaultStreamId) {
    return StreamRef(id, default_stream(device));
  }
  const StreamRef* held = t_held.find(device);
  return held != nullptr && held->id() == id ? *held : stream_of(device, id);
}

c10::StreamId make_current(c10::DeviceIndex device, c10::StreamId id, bool* known) {
  device = resolve(device);
  StreamRef ref = id == kDefaultStreamId ? StreamRef() : stream_of(device, id);
  if (known != nullptr) {
    *known = id == kDefaultStreamId || static_cast<bool>(ref);
  }
  const c10::StreamId previous = exchange_stream_id(device, id);
  t_held.hold(device, std::move(ref));
  return previous;
}

bool remember_stream(c10::DeviceIndex device, c10::StreamId id, fl_stream handle) {
  if (!allocators_installed()) {
    return false;
  }
  DeviceStreams* streams = streams_of(device);
  TORCH_CHECK_INDEX(streams != nullptr, "remember_stream: fl:", static_cast<int>(device), " is not a device of the bridge");
  TORCH_CHECK_VALUE(id != kDefaultStreamId && handle != nullptr, "remember_stream: a non-default stream and its handle");
  auto owned = std::make_shared<const OwnedStream>(device, id, handle, allocator_of(device).vendor().api);
  std::lock_guard<std::mutex> lock(streams->mutex);
  const bool added = streams->streams.emplace(id, std::move(owned)).second;
  TORCH_CHECK_VALUE(added, "remember_stream: fl:", static_cast<int>(device), " already has a stream with id ", id);
  g_known.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool release_stream(c10::DeviceIndex device, c10::StreamId id) {
  DeviceStreams* streams = streams_of(device);
  if (streams == nullptr) {
    return false;
  }
  std::shared_ptr<const OwnedStream> released;
  {
    std::lock_guard<std::mutex> lock(streams->mutex);
    auto found = streams->streams.find(id);
    if (found == streams->streams.end()) {
      return false;
    }
    released = std::move(found->second);
    streams->streams.erase(found);
  }
  g_known.fetch_sub(1, std::memory_order_relaxed);
  return true;        // `released` goes here, or with the last call still holding it
}

size_t known_streams() noexcept {
  return g_known.load(std::memory_order_relaxed);
}

void lock_streams_for_fork() noexcept {
  if (g_devices != nullptr) {
    for (DeviceStreams* streams : *g_devices) {
      streams->mutex.lock();
    }
  }
}

void unlock_streams_after_fork() noexcept {
  if (g_devices != nullptr) {
    for (DeviceStreams* streams : *g_devices) {
      streams->mutex.unlock();
    }
  }
}

PyMethodDef* stream_registry_methods() {
  return g_methods;
}

}  // namespace fl_bridge
