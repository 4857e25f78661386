// PyTorch's device guard for fl: the real device count, the current device and the current
// stream of each device per thread (thread_state.h), and streams and events backed by the
// runtime's own (fl_runtime/devices/streams.py), so torch.Stream, torch.Event,
// torch.accelerator.* and the autograd engine's per-device queues work on every fl device.
//
// Stream ids are the runtime's (0 = a device's default stream).  New streams come from a
// pool of streams per device that live as long as the process, as CUDA's stream pool does,
// so a c10::Stream (only an id) never outlives the stream it names.  Events are the
// runtime's Event objects, named by an integer handle the runtime keeps until destroyEvent.
#pragma once

#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace fl_bridge {

class DeviceGuard final : public c10::impl::DeviceGuardImplInterface {
 public:
  c10::DeviceType type() const override;
  c10::Device exchangeDevice(c10::Device device) const override;
  c10::Device getDevice() const override;
  void setDevice(c10::Device device) const override;
  void uncheckedSetDevice(c10::Device device) const noexcept override;

  c10::Stream getStream(c10::Device device) const override;
  c10::Stream getDefaultStream(c10::Device device) const override;
  c10::Stream getStreamFromGlobalPool(c10::Device device, bool is_high_priority) const override;
  c10::Stream getNewStream(c10::Device device, int priority) const override;
  c10::Stream exchangeStream(c10::Stream stream) const override;
  bool queryStream(const c10::Stream& stream) const override;
  void synchronizeStream(const c10::Stream& stream) const override;
  void synchronizeDevice(c10::DeviceIndex device_index) const override;
  void recordDataPtrOnStream(const c10::DataPtr& data_ptr, const c10::Stream& stream) const override;

  void record(void** event, const c10::Stream& stream, c10::DeviceIndex device_index,
              c10::EventFlag flag) const override;
  void block(void* event, const c10::Stream& stream) const override;
  bool queryEvent(void* event) const override;
  void synchronizeEvent(void* event) const override;
  double elapsedTime(void* start, void* end, c10::DeviceIndex device_index) const override;
  void destroyEvent(void* event, c10::DeviceIndex device_index) const noexcept override;

  c10::DeviceIndex deviceCount() const noexcept override;
  c10::DeviceCapability getDeviceCapability(c10::Device device) const override;
};

DeviceGuard& device_guard();

} // namespace fl_bridge
