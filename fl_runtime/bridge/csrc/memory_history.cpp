#include "memory_history.h"

#include <atomic>

#include "python_calls.h"

namespace fl_bridge {
namespace {

std::atomic<bool> g_enabled{false};

}  // namespace

bool history_enabled() noexcept {
  return g_enabled.load(std::memory_order_relaxed);
}

void set_history_enabled(bool enabled) noexcept {
  g_enabled.store(enabled, std::memory_order_relaxed);
}

void record_memory_event(const char* action, c10::DeviceIndex device, uint64_t ptr, uint64_t size,
                         c10::StreamId stream) noexcept {
  if (!Py_IsInitialized()) {
    return;
  }
  // A storage may die while Python unwinds an exception: keep it pending across the call.
  Gil gil;
  PyObject *type = nullptr, *value = nullptr, *traceback = nullptr;
  PyErr_Fetch(&type, &value, &traceback);
  call_quietly("memory_event", "(siKKL)", action, static_cast<int>(device), static_cast<unsigned long long>(ptr),
               static_cast<unsigned long long>(size), static_cast<long long>(stream));
  PyErr_Restore(type, value, traceback);
}

}  // namespace fl_bridge
