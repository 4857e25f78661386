#include "device_allocator.h"

#include "freed_blocks.h"
#include "python_calls.h"
#include "thread_state.h"

namespace fl_bridge {
namespace {

constexpr c10::DeviceType kFl = c10::DeviceType::PrivateUse1;

void no_delete(void*) {}

// One figure of the runtime's flat statistics (torch.fl.memory_stats keys); 0 if absent.
int64_t figure(PyObject* stats, const char* key) {
  PyObject* value = PyDict_GetItemString(stats, key);      // borrowed
  return value == nullptr ? 0 : PyLong_AsLongLong(value);
}

void fill(c10::CachingAllocator::Stat& stat, PyObject* stats, const char* current, const char* peak) {
  stat.current = figure(stats, current);
  stat.peak = peak == nullptr ? stat.current : figure(stats, peak);
}

} // namespace

c10::DataPtr allocate_on(c10::DeviceIndex device, size_t nbytes) {
  const c10::Device where(kFl, device);
  if (nbytes == 0) {
    return {nullptr, nullptr, &no_delete, where};
  }
  Gil gil;
  PyObject* result = call("allocate", "(iK)", static_cast<int>(device), static_cast<unsigned long long>(nbytes));
  unsigned long long address = 0;
  PyObject* token = nullptr;
  if (!PyArg_ParseTuple(result, "KO", &address, &token)) {
    Py_DECREF(result);
    throw_python_error();
  }
  FreedBlock* context = hold_block(token);
  Py_DECREF(result);
  return {reinterpret_cast<void*>(static_cast<uintptr_t>(address)), context, &push_freed, where};
}

c10::DataPtr DeviceAllocator::allocate(size_t nbytes) {
  return allocate_on(current_device(), nbytes);
}

c10::DeleterFnPtr DeviceAllocator::raw_deleter() const {
  return nullptr;        // the context is the runtime's token, not the address
}

void DeviceAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  call_void("copy_device_bytes", "(iKKK)", static_cast<int>(current_device()),
            static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(dest)),
            static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(src)),
            static_cast<unsigned long long>(count));
}

bool DeviceAllocator::initialized() {
  return has_runtime_calls();
}

void DeviceAllocator::emptyCache(c10::MempoolId_t /*mempool_id: the runtime has one pool per device*/) {
  call_void("empty_cache", "()");
}

void DeviceAllocator::recordStream(const c10::DataPtr& ptr, c10::Stream stream) {
  if (ptr.get() == nullptr) {
    return;
  }
  call_void("record_stream", "(iKL)", static_cast<int>(stream.device_index()),
            static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(ptr.get())),
            static_cast<long long>(stream.id()));
}

c10::CachingDeviceAllocator::DeviceStats DeviceAllocator::getDeviceStats(c10::DeviceIndex device) {
  Gil gil;
  PyObject* stats = call("device_stats", "(i)", static_cast<int>(resolve(device)));
  c10::CachingDeviceAllocator::DeviceStats out;
  constexpr auto all = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  fill(out.allocated_bytes[all], stats, "allocated_bytes.all.current", "allocated_bytes.all.peak");
  fill(out.reserved_bytes[all], stats, "reserved_bytes.all.current", "reserved_bytes.all.peak");
  fill(out.active[all], stats, "active.all.current", nullptr);
  fill(out.inactive_split[all], stats, "inactive_split.all.current", nullptr);
  fill(out.inactive_split_bytes[all], stats, "inactive_split_bytes.all.current", nullptr);
  out.num_alloc_retries = figure(stats, "num_alloc_retries");
  out.num_ooms = figure(stats, "num_ooms");
  out.num_device_alloc = figure(stats, "num_device_alloc");
  out.num_device_free = figure(stats, "num_device_free");
  Py_DECREF(stats);
  if (PyErr_Occurred()) {
    throw_python_error();
  }
  return out;
}

void DeviceAllocator::resetAccumulatedStats(c10::DeviceIndex device) {
  call_void("reset_accumulated_stats", "(i)", static_cast<int>(resolve(device)));
}

void DeviceAllocator::resetPeakStats(c10::DeviceIndex device) {
  call_void("reset_peak_stats", "(i)", static_cast<int>(resolve(device)));
}

std::pair<size_t, size_t> DeviceAllocator::getMemoryInfo(c10::DeviceIndex device) {
  Gil gil;
  PyObject* info = call("memory_info", "(i)", static_cast<int>(resolve(device)));
  unsigned long long free_bytes = 0, total_bytes = 0;
  const bool parsed = PyArg_ParseTuple(info, "KK", &free_bytes, &total_bytes);
  Py_DECREF(info);
  if (!parsed) {
    throw_python_error();
  }
  return {free_bytes, total_bytes};
}

DeviceAllocator& device_allocator() {
  static DeviceAllocator allocator;
  return allocator;
}

} // namespace fl_bridge
