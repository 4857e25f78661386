#include "thread_state.h"

#include <array>
#include <atomic>

#include <c10/util/Exception.h>

#include "python_calls.h"

namespace fl_bridge {
namespace {

// c10::DeviceIndex is 8-bit: PyTorch addresses at most 128 devices of a type.
constexpr int kMaxDevices = 128;

std::atomic<c10::DeviceIndex> g_device_count{0};
thread_local c10::DeviceIndex t_device = 0;
thread_local std::array<c10::StreamId, kMaxDevices> t_streams{};   // zero: kDefaultStreamId

} // namespace

void set_device_count(c10::DeviceIndex count) {
  TORCH_CHECK(count >= 0 && count <= kMaxDevices, "fl: ", static_cast<int>(count),
              " devices, but PyTorch addresses at most ", kMaxDevices, " per device type");
  g_device_count.store(count);
}

c10::DeviceIndex device_count() noexcept {
  return g_device_count.load();
}

void check_device(c10::DeviceIndex index) {
  if (index >= 0 && index < device_count()) {
    return;
  }
  if (index >= 0 && has_runtime_calls()) {
    // The runtime's own DeviceNotFoundError (a RuntimeError, as CUDA raises, and an
    // IndexError), as torch.fl.set_device raises it on both routes.
    call_void("check_device", "(i)", static_cast<int>(index));
  }
  TORCH_CHECK_INDEX(false, "fl:", static_cast<int>(index), " does not exist: ", static_cast<int>(device_count()),
                    " fl device(s) are available (see torch_fl.list_devices())");
}

c10::DeviceIndex resolve(c10::DeviceIndex index) {
  if (index == -1) {
    return t_device;
  }
  check_device(index);
  return index;
}

c10::DeviceIndex current_device() noexcept {
  return t_device;
}

void set_current_device(c10::DeviceIndex index) {
  check_device(index);
  t_device = index;
}

void set_current_device_unchecked(c10::DeviceIndex index) noexcept {
  if (index >= 0 && index < kMaxDevices) {
    t_device = index;
  }
}

c10::StreamId current_stream_id(c10::DeviceIndex index) {
  return t_streams[static_cast<size_t>(resolve(index))];
}

c10::StreamId exchange_stream_id(c10::DeviceIndex index, c10::StreamId id) {
  auto& slot = t_streams[static_cast<size_t>(resolve(index))];
  c10::StreamId previous = slot;
  slot = id;
  return previous;
}

} // namespace fl_bridge
