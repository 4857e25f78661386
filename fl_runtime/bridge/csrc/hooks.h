// PyTorch's PrivateUse1 hooks for fl: what PyTorch asks of a device only through C++.
// Generators (generator.h), the pinned host allocator (host_allocator.h), storage resizes,
// the device count and current device (thread_state.h), availability.
#pragma once

#include <ATen/detail/PrivateUse1HooksInterface.h>

namespace fl_bridge {

class Hooks final : public at::PrivateUse1HooksInterface {
 public:
  bool isBuilt() const override;
  bool isAvailable() const override;
  bool hasPrimaryContext(c10::DeviceIndex device_index) const override;
  void init() const override;

  c10::DeviceIndex deviceCount() const override;
  void setCurrentDevice(c10::DeviceIndex device) const override;
  c10::DeviceIndex getCurrentDevice() const override;
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override;
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override;

  const at::Generator& getDefaultGenerator(c10::DeviceIndex device_index) const override;
  at::Generator getNewGenerator(c10::DeviceIndex device_index) const override;

  bool isPinnedPtr(const void* data) const override;
  at::Allocator* getPinnedMemoryAllocator() const override;
  at::Device getDeviceFromPtr(void* data) const override;

  // storage.resize_(n) of an fl storage (FSDP2 frees and regrows parameter storages): a
  // fresh block of the new size, the common prefix copied on the device, then swapped in.
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override;
};

Hooks& hooks();

} // namespace fl_bridge
