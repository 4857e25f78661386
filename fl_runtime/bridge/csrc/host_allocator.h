// Pinned host memory for fl: `tensor.pin_memory()`, `torch.empty(n, pin_memory=True)`,
// DataLoader(pin_memory=True), and the pinned buffers DDP's reducer keeps.
//
// Page-locked memory is a driver's business (ABI 1.2's optional host-memory extension).  A
// plugin that offers it backs these blocks (the runtime's host_alloc answers with its
// address); otherwise they are ordinary page-aligned host memory, which `is_pinned()` still
// reports as pinned: copies from it stay correct because the runtime keeps every host source
// of an asynchronous copy alive until the stream has read it (fl_runtime/ops/copies.py).
// Freed blocks are cached by size for the next request of that size (a DataLoader pins
// batches of one size); empty_cache() returns them.
#pragma once

#include <ATen/core/CachingHostAllocator.h>

namespace fl_bridge {

class HostAllocator final : public at::HostAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override;
  c10::DeleterFnPtr raw_deleter() const override;
  void copy_data(void* dest, const void* src, std::size_t count) const override;

  bool record_event(void* ptr, void* ctx, c10::Stream stream) override;
  void empty_cache() override;
  at::HostStats get_stats() override;
  void reset_accumulated_stats() override;
  void reset_peak_stats() override;

  // Whether `pointer` lies inside a block this allocator holds (live or cached).
  bool owns(const void* pointer);
};

HostAllocator& host_allocator();

} // namespace fl_bridge
