#include "host_allocator.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "python_calls.h"

namespace fl_bridge {
namespace {

constexpr size_t kPage = 4096;

struct Block {
  size_t size;
  bool from_vendor;        // host_alloc of the plugin's extension, else posix_memalign
  bool live;
};

std::mutex g_mutex;
std::map<uintptr_t, Block> g_blocks;                       // every block held, by address
std::unordered_map<size_t, std::vector<void*>> g_cached;   // free blocks, by size
at::HostStats g_stats;

void add(c10::CachingAllocator::Stat& stat, int64_t amount) {
  stat.increase(amount);
}

void sub(c10::CachingAllocator::Stat& stat, int64_t amount) {
  stat.decrease(amount);
}

void* fresh_block(size_t nbytes, bool& from_vendor) {
  const int64_t vendor = call_int("host_alloc", "(K)", static_cast<unsigned long long>(nbytes));
  if (vendor != 0) {
    from_vendor = true;
    return reinterpret_cast<void*>(static_cast<uintptr_t>(vendor));
  }
  from_vendor = false;
  void* pointer = nullptr;
  if (posix_memalign(&pointer, kPage, nbytes) != 0) {
    TORCH_CHECK_WITH(OutOfMemoryError, false, "fl pinned host memory: out of host memory allocating ",
                     nbytes, " bytes");
  }
  return pointer;
}

void release_block(void* pointer, bool from_vendor) {
  if (from_vendor) {
    call_quietly("host_free", "(K)", static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(pointer)));
  } else {
    std::free(pointer);
  }
}

void give_back(void* pointer) noexcept {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto found = g_blocks.find(reinterpret_cast<uintptr_t>(pointer));
  if (found == g_blocks.end()) {
    return;
  }
  found->second.live = false;
  g_cached[found->second.size].push_back(pointer);
  sub(g_stats.active_requests, 1);
  sub(g_stats.active_bytes, static_cast<int64_t>(found->second.size));
}

} // namespace

c10::DataPtr HostAllocator::allocate(size_t nbytes) {
  if (nbytes == 0) {
    return {nullptr, nullptr, &give_back, c10::Device(c10::DeviceType::CPU)};
  }
  const size_t size = (nbytes + kPage - 1) / kPage * kPage;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto cached = g_cached.find(size);
    if (cached != g_cached.end() && !cached->second.empty()) {
      void* pointer = cached->second.back();
      cached->second.pop_back();
      g_blocks[reinterpret_cast<uintptr_t>(pointer)].live = true;
      add(g_stats.active_requests, 1);
      add(g_stats.active_bytes, static_cast<int64_t>(size));
      return {pointer, pointer, &give_back, c10::Device(c10::DeviceType::CPU)};
    }
  }
  bool from_vendor = false;
  void* pointer = fresh_block(size, from_vendor);     // outside the lock: it may call Python
  std::lock_guard<std::mutex> lock(g_mutex);
  g_blocks[reinterpret_cast<uintptr_t>(pointer)] = Block{size, from_vendor, true};
  add(g_stats.allocations, 1);
  add(g_stats.allocated_bytes, static_cast<int64_t>(size));
  add(g_stats.active_requests, 1);
  add(g_stats.active_bytes, static_cast<int64_t>(size));
  g_stats.num_host_alloc += 1;
  return {pointer, pointer, &give_back, c10::Device(c10::DeviceType::CPU)};
}

c10::DeleterFnPtr HostAllocator::raw_deleter() const {
  return &give_back;
}

void HostAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  std::memcpy(dest, src, count);
}

bool HostAllocator::record_event(void* /*ptr*/, void* /*ctx*/, c10::Stream /*stream*/) {
  // The runtime holds the host source of every asynchronous copy until the stream has read it
  // (rt.uploads), so a block is never handed out again while a stream may still read it.
  return true;
}

void HostAllocator::empty_cache() {
  std::vector<std::pair<void*, bool>> released;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    for (auto& [size, pointers] : g_cached) {
      for (void* pointer : pointers) {
        auto found = g_blocks.find(reinterpret_cast<uintptr_t>(pointer));
        released.emplace_back(pointer, found->second.from_vendor);
        sub(g_stats.allocations, 1);
        sub(g_stats.allocated_bytes, static_cast<int64_t>(size));
        g_stats.num_host_free += 1;
        g_blocks.erase(found);
      }
    }
    g_cached.clear();
  }
  for (auto& [pointer, from_vendor] : released) {
    release_block(pointer, from_vendor);
  }
}

at::HostStats HostAllocator::get_stats() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_stats;
}

void HostAllocator::reset_accumulated_stats() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_stats.num_host_alloc = 0;
  g_stats.num_host_free = 0;
}

void HostAllocator::reset_peak_stats() {
  std::lock_guard<std::mutex> lock(g_mutex);
  for (auto* stat : {&g_stats.active_requests, &g_stats.active_bytes, &g_stats.allocations,
                     &g_stats.allocated_bytes}) {
    stat->reset_peak();
  }
}

bool HostAllocator::owns(const void* pointer) {
  const auto address = reinterpret_cast<uintptr_t>(pointer);
  std::lock_guard<std::mutex> lock(g_mutex);
  auto after = g_blocks.upper_bound(address);
  if (after == g_blocks.begin()) {
    return false;
  }
  --after;
  return address < after->first + after->second.size;
}

HostAllocator& host_allocator() {
  static HostAllocator allocator;
  return allocator;
}

} // namespace fl_bridge
