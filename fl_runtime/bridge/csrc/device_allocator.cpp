#include "device_allocator.h"

#include "caching_allocator.h"
#include "python_calls.h"
#include "thread_state.h"

namespace fl_bridge {
namespace {

constexpr c10::DeviceType kFl = c10::DeviceType::PrivateUse1;

void no_delete(void*) {}

// The DataPtr deleter: any thread, no GIL (the block knows its device).
void free_block(void* context) {
  auto* block = static_cast<Block*>(context);
  allocator_of(block->device).free(block);
}

void fill(c10::CachingAllocator::Stat& stat, int64_t current, int64_t peak) {
  stat.current = current;
  stat.peak = peak;
}

c10::DeviceIndex owner_of(const void* address) {
  const c10::DeviceIndex device = device_of_address(reinterpret_cast<uintptr_t>(address));
  TORCH_CHECK(device >= 0, "fl: address ", address, " lies in no block of any fl device's allocator");
  return device;
}

} // namespace

c10::DataPtr allocate_on(c10::DeviceIndex device, size_t nbytes) {
  const c10::Device where(kFl, device);
  if (nbytes == 0) {
    return {nullptr, nullptr, &no_delete, where};
  }
  Block* block = allocator_of(device).allocate(round_size(nbytes), static_cast<int64_t>(nbytes),
                                               current_stream_id(device));
  return {reinterpret_cast<void*>(static_cast<uintptr_t>(block->ptr)), block, &free_block, where};
}

c10::DataPtr DeviceAllocator::allocate(size_t nbytes) {
  return allocate_on(current_device(), nbytes);
}

c10::DeleterFnPtr DeviceAllocator::raw_deleter() const {
  return nullptr;        // the context is the block, not the address
}

void DeviceAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  // On the devices the blocks belong to, whatever device is current on this thread.
  call_void("copy_device_bytes", "(iKiKK)", static_cast<int>(owner_of(dest)),
            static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(dest)), static_cast<int>(owner_of(src)),
            static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(src)),
            static_cast<unsigned long long>(count));
}

bool DeviceAllocator::initialized() {
  return allocators_installed();
}

void DeviceAllocator::emptyCache(c10::MempoolId_t /*mempool_id: one pool per device*/) {
  call_void("empty_cache", "()");      // the runtime's: storages Python freed are returned too
}

void DeviceAllocator::recordStream(const c10::DataPtr& ptr, c10::Stream stream) {
  if (ptr.get() == nullptr) {
    return;
  }
  // The runtime resolves the stream's vendor handle and keeps the stream alive while the block is live.
  call_void("record_stream", "(iKL)", static_cast<int>(ptr.device().index()),
            static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(ptr.get())),
            static_cast<long long>(stream.id()));
}

// Storages the Python runtime wrapped (DLPack) return their blocks when it collects them:
// figures count them first, as torch.fl's do (native_allocator.py settle).  Not the op path.
static CachingAllocator& settled(c10::DeviceIndex device) {
  const c10::DeviceIndex index = resolve(device);
  call_void("settle", "(i)", static_cast<int>(index));
  return allocator_of(index);
}

c10::CachingDeviceAllocator::DeviceStats DeviceAllocator::getDeviceStats(c10::DeviceIndex device) {
  const MemoryFigures figures = settled(device).figures();
  c10::CachingDeviceAllocator::DeviceStats out;
  constexpr auto all = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  fill(out.allocated_bytes[all], figures.allocated, figures.peak_allocated);
  fill(out.reserved_bytes[all], figures.reserved, figures.peak_reserved);
  fill(out.active[all], figures.live_blocks, figures.live_blocks);
  fill(out.inactive_split[all], figures.cached_blocks, figures.cached_blocks);
  fill(out.inactive_split_bytes[all], figures.cached_bytes, figures.cached_bytes);
  out.num_alloc_retries = figures.alloc_retries;
  out.num_ooms = figures.ooms;
  out.num_device_alloc = figures.vendor_mallocs;
  out.num_device_free = figures.vendor_frees;
  return out;
}

void DeviceAllocator::resetAccumulatedStats(c10::DeviceIndex device) {
  settled(device).reset_accumulated();
}

void DeviceAllocator::resetPeakStats(c10::DeviceIndex device) {
  settled(device).reset_peaks();
}

std::pair<size_t, size_t> DeviceAllocator::getMemoryInfo(c10::DeviceIndex device) {
  Gil gil;      // the runtime's check names the plugin in its error
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
