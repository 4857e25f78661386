// c10::DeviceAllocator for fl storages: PyTorch's C++ allocations on fl (UntypedStorage(n,
// device="fl"), storage resizes, at::empty inside C++ kernels) and torch.accelerator's memory
// figures.  Every block comes from the device's C++ caching allocator (caching_allocator.h),
// which the Python runtime uses too (fl_runtime/devices/allocator.py NativeAllocator), so
// there is one pool, one set of statistics and one out-of-memory policy whichever route
// allocated.  Allocation, free and statistics take no GIL.
#pragma once

#include <c10/core/CachingDeviceAllocator.h>

namespace fl_bridge {

class DeviceAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override;
  c10::DeleterFnPtr raw_deleter() const override;
  void copy_data(void* dest, const void* src, std::size_t count) const override;

  bool initialized() override;
  void emptyCache(c10::MempoolId_t mempool_id) override;
  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override;
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override;
  void resetAccumulatedStats(c10::DeviceIndex device) override;
  void resetPeakStats(c10::DeviceIndex device) override;
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override;
};

DeviceAllocator& device_allocator();

// A block of `nbytes` on fl:`device` for this thread's current stream of that device, as a
// DataPtr; no GIL (but an error is raised through the runtime, with it).
c10::DataPtr allocate_on(c10::DeviceIndex device, size_t nbytes);

} // namespace fl_bridge
