#include "device_guard.h"

#include <atomic>

#include <torch/csrc/Dtype.h>

#include "device_allocator.h"
#include "python_calls.h"
#include "stream_registry.h"
#include "thread_state.h"

namespace fl_bridge {
namespace {

constexpr c10::DeviceType kFl = c10::DeviceType::PrivateUse1;

c10::DeviceIndex index_of(c10::Device device) {
  TORCH_CHECK(device.type() == kFl, "the fl device guard got a ", device.type(), " device");
  return resolve(device.index());
}

c10::Stream stream_on(c10::DeviceIndex index, c10::StreamId id) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kFl, index), id);
}

long long handle_of(void* event) {
  return static_cast<long long>(reinterpret_cast<intptr_t>(event));
}

c10::Stream pooled_stream(c10::Device device, int priority) {
  const auto index = index_of(device);
  return stream_on(index, call_int("pooled_stream", "(ii)", static_cast<int>(index), priority));
}

} // namespace

c10::DeviceType DeviceGuard::type() const {
  return kFl;
}

c10::Device DeviceGuard::exchangeDevice(c10::Device device) const {
  const auto previous = current_device();
  const auto index = index_of(device);
  if (index != previous) {
    set_current_device(index);
  }
  return {kFl, previous};
}

c10::Device DeviceGuard::getDevice() const {
  return {kFl, current_device()};
}

void DeviceGuard::setDevice(c10::Device device) const {
  set_current_device(index_of(device));
}

void DeviceGuard::uncheckedSetDevice(c10::Device device) const noexcept {
  set_current_device_unchecked(device.index());
}

c10::Stream DeviceGuard::getStream(c10::Device device) const {
  const auto index = index_of(device);
  return stream_on(index, current_stream_id(index));
}

c10::Stream DeviceGuard::getDefaultStream(c10::Device device) const {
  return stream_on(index_of(device), kDefaultStreamId);
}

c10::Stream DeviceGuard::getStreamFromGlobalPool(c10::Device device, bool is_high_priority) const {
  return pooled_stream(device, is_high_priority ? -1 : 0);
}

c10::Stream DeviceGuard::getNewStream(c10::Device device, int priority) const {
  return pooled_stream(device, priority);
}

c10::Stream DeviceGuard::exchangeStream(c10::Stream stream) const {
  const auto index = index_of(stream.device());
  bool known = false;
  const c10::StreamId previous = make_current(index, stream.id(), &known);
  // The runtime hears of it when the bridge does not know the stream (Python looks it up and
  // raises for an unknown one), and once at all, so its own launches stop assuming the default
  // stream (StreamRegistry.any_current); a known stream is held here while current
  // (stream_registry.h make_current), so the autograd engine's stream switches stay in C++.
  static std::atomic<bool> told{false};
  if (stream.id() != kDefaultStreamId && stream.id() != previous &&
      (!known || !told.load(std::memory_order_acquire))) {
    call_void("stream_made_current", "(iL)", static_cast<int>(index), static_cast<long long>(stream.id()));
    told.store(true, std::memory_order_release);
  }
  return stream_on(index, previous);
}

bool DeviceGuard::queryStream(const c10::Stream& stream) const {
  return call_bool("query_stream", "(iL)", static_cast<int>(stream.device_index()),
                   static_cast<long long>(stream.id()));
}

void DeviceGuard::synchronizeStream(const c10::Stream& stream) const {
  call_void("synchronize_stream", "(iL)", static_cast<int>(stream.device_index()),
            static_cast<long long>(stream.id()));
}

void DeviceGuard::synchronizeDevice(c10::DeviceIndex device_index) const {
  call_void("synchronize_device", "(i)", static_cast<int>(resolve(device_index)));
}

void DeviceGuard::recordDataPtrOnStream(const c10::DataPtr& data_ptr, const c10::Stream& stream) const {
  device_allocator().recordStream(data_ptr, stream);
}

void DeviceGuard::record(void** event, const c10::Stream& stream, c10::DeviceIndex device_index,
                         c10::EventFlag flag) const {
  TORCH_CHECK(device_index == -1 || device_index == stream.device_index(), "fl: an event of fl:",
              static_cast<int>(device_index), " cannot be recorded on a stream of fl:",
              static_cast<int>(stream.device_index()), " (record events on streams of their own device)");
  const long long handle = call_int("event_record", "(LiLi)", handle_of(*event),
                                    static_cast<int>(stream.device_index()), static_cast<long long>(stream.id()),
                                    static_cast<int>(flag));
  *event = reinterpret_cast<void*>(static_cast<intptr_t>(handle));
}

void DeviceGuard::block(void* event, const c10::Stream& stream) const {
  if (event != nullptr) {        // a never-recorded event does not wait (fl_abi.h)
    call_void("event_block", "(LiL)", handle_of(event), static_cast<int>(stream.device_index()),
              static_cast<long long>(stream.id()));
  }
}

bool DeviceGuard::queryEvent(void* event) const {
  return event == nullptr || call_bool("event_query", "(L)", handle_of(event));
}

void DeviceGuard::synchronizeEvent(void* event) const {
  if (event != nullptr) {
    call_void("event_synchronize", "(L)", handle_of(event));
  }
}

double DeviceGuard::elapsedTime(void* start, void* end, c10::DeviceIndex /*device_index*/) const {
  TORCH_CHECK(start != nullptr && end != nullptr,
              "elapsed_time: both events must be recorded first (call record() on each)");
  return call_double("event_elapsed_ms", "(LL)", handle_of(start), handle_of(end));
}

void DeviceGuard::destroyEvent(void* event, c10::DeviceIndex /*device_index*/) const noexcept {
  if (event != nullptr) {
    call_quietly("event_destroy", "(L)", handle_of(event));
  }
}

c10::DeviceIndex DeviceGuard::deviceCount() const noexcept {
  return device_count();
}

c10::DeviceCapability DeviceGuard::getDeviceCapability(c10::Device device) const {
  Gil gil;
  PyObject* dtypes = call("supported_dtypes", "(i)", static_cast<int>(index_of(device)));   // a list
  c10::DeviceCapability capability;
  capability.capability_data.capability_bits = 0;
  const Py_ssize_t count = PySequence_Fast_GET_SIZE(dtypes);
  for (Py_ssize_t i = 0; i < count; ++i) {
    PyObject* dtype = PySequence_Fast_GET_ITEM(dtypes, i);
    if (!THPDtype_Check(dtype)) {
      continue;
    }
    const auto type = reinterpret_cast<THPDtype*>(dtype)->scalar_type;
#define FL_SUPPORTS(_1, name)                                                \
    if (type == c10::ScalarType::name) {                                     \
      capability.capability_data.supported_scalar_types.has_##name = 1;     \
    }
    AT_FORALL_SCALAR_TYPES_WITH_COMPLEX_AND_QINTS(FL_SUPPORTS)
#undef FL_SUPPORTS
  }
  Py_DECREF(dtypes);
  return capability;
}

DeviceGuard& device_guard() {
  static DeviceGuard guard;
  return guard;
}

} // namespace fl_bridge
