#include "caching_allocator.h"

#include <algorithm>
#include <atomic>
#include <cstdio>

#include <c10/util/Exception.h>

#include "memory_history.h"
#include "thread_state.h"
#include "python_calls.h"

namespace fl_bridge {
namespace {

constexpr uint64_t kSmallLimit = 1 << 20;      // allocator.py: below 1 MiB round to 512 B,
constexpr uint64_t kSmallRound = 512;          // above to 128 KiB
constexpr uint64_t kLargeRound = 128 << 10;

// Set once by install and never freed, the vector included: a DataPtr deleter may run during
// static destruction at exit.
std::vector<CachingAllocator*>* g_allocators = nullptr;
std::atomic<bool> g_installed{false};

void reach_peak(int64_t& peak, int64_t value) {
  peak = std::max(peak, value);
}

std::string hex(uint64_t value) {
  char text[24];
  std::snprintf(text, sizeof text, "%#llx", static_cast<unsigned long long>(value));
  return text;
}

}  // namespace

uint64_t round_size(uint64_t nbytes) noexcept {
  const uint64_t step = nbytes < kSmallLimit ? kSmallRound : kLargeRound;
  return std::max(step, (nbytes + step - 1) / step * step);
}

CachingAllocator::CachingAllocator(c10::DeviceIndex device, VendorDevice vendor, int64_t limit)
    : device_(device), vendor_(vendor), limit_(limit) {}

Block* CachingAllocator::allocate(uint64_t rounded, int64_t requested, c10::StreamId stream) {
  Refusal refusal;
  int64_t cached_before = 0;
  Block* block = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    block = take_block(rounded, stream, static_cast<uint64_t>(requested), refusal);
    if (block == nullptr && refusal.retriable()) {
      cached_before = stats_.reserved - stats_.allocated;
      ++stats_.alloc_retries;
    }
  }
  if (block == nullptr && refusal.retriable()) {
    // Retry once with the cache given back (allocator.py's behaviour): the runtime's
    // empty_cache, which also returns storages Python freed and waits for the device.
    call_void("empty_cache_for_retry", "(i)", static_cast<int>(device_));
    std::lock_guard<std::mutex> lock(mutex_);
    refusal = Refusal{};
    block = take_block(rounded, stream, static_cast<uint64_t>(requested), refusal);
    if (block == nullptr && refusal.retriable()) {
      ++stats_.ooms;
    }
  }
  if (block == nullptr) {
    fail(rounded, cached_before, refusal);
  }
  if (history_enabled()) {
    if (block->fresh) {
      record_memory_event("segment_alloc", device_, block->ptr, block->size, stream);
    }
    record_memory_event("alloc", device_, block->ptr, block->size, stream);
  }
  block->fresh = false;
  return block;
}

Block* CachingAllocator::take_block(uint64_t size, c10::StreamId stream, uint64_t requested, Refusal& refusal) {
  Block* block = from_pool(size, stream);
  if (block == nullptr) {
    block = vendor_malloc(size, stream, refusal);
  }
  if (block != nullptr) {
    count_live(block, requested);
  }
  return block;
}

void CachingAllocator::count_live(Block* block, uint64_t requested) {
  block->live = true;
  block->requested = static_cast<int64_t>(requested);
  block->writer = -1;
  live_.emplace(block->ptr, block);
  stats_.allocated += static_cast<int64_t>(block->size);
  reach_peak(stats_.peak_allocated, stats_.allocated);
}

Block* CachingAllocator::from_pool(uint64_t size, c10::StreamId stream) {
  if (!waiting_.empty()) {
    collect_waiting();
  }
  auto found = pool_.find({stream, size});
  if (found == pool_.end() || found->second.empty()) {
    return nullptr;
  }
  Block* block = found->second.back();
  found->second.pop_back();
  ++stats_.cache_hits;
  return block;
}

Block* CachingAllocator::vendor_malloc(uint64_t size, c10::StreamId stream, Refusal& refusal) {
  if (stats_.reserved + static_cast<int64_t>(size) > limit_) {
    refusal.kind = Refusal::kLimit;
    return nullptr;
  }
  fl_devptr ptr = 0;
  refusal.status = vendor_.api->fl_malloc(vendor_.local, size, 0, &ptr);
  if (refusal.status != FL_SUCCESS) {
    refusal.kind = refusal.status == FL_ERROR_OUT_OF_MEMORY ? Refusal::kVendorOom : Refusal::kStatus;
    return nullptr;
  }
  if (!accept_block(ptr, size, refusal)) {
    return nullptr;
  }
  auto* block = new Block;
  block->ptr = ptr;
  block->size = size;
  block->stream = stream;
  block->device = device_;
  block->fresh = true;
  held_.emplace(ptr, block);
  stats_.reserved += static_cast<int64_t>(size);
  reach_peak(stats_.peak_reserved, stats_.reserved);
  ++stats_.vendor_mallocs;
  return block;
}

bool CachingAllocator::accept_block(uint64_t ptr, uint64_t size, Refusal& refusal) {
  // The driver is not trusted (fl_abi.h, fl_malloc): allocator.py _validate_block's checks.
  refusal.kind = Refusal::kBadBlock;
  if (ptr == 0) {
    refusal.detail = "it returned address 0, which the ABI says is never valid";
    return false;
  }
  if (const Block* clash = overlapping(ptr, size)) {
    refusal.detail = "it returned " + hex(ptr) + " (+" + std::to_string(size) + " bytes), which overlaps the block " +
                     hex(clash->ptr) + " (+" + std::to_string(clash->size) +
                     " bytes) it already gave and that is still in use or cached";
    return false;              // never free an address that aliases a held block
  }
  if (vendor_.alignment > 1 && ptr % vendor_.alignment != 0) {
    refusal.detail = "it returned " + hex(ptr) + ", which is not a multiple of the device's alignment " +
                     std::to_string(vendor_.alignment);
    vendor_.api->fl_free(vendor_.local, ptr);
    return false;
  }
  refusal.kind = Refusal::kNone;
  return true;
}

void CachingAllocator::fail(uint64_t size, int64_t cached_before, const Refusal& refusal) {
  // The runtime raises its own exception (FLOutOfMemoryError, VendorError) with its message
  // (allocator.py allocation_failed, one text for both routes).
  static const char* const kinds[] = {"none", "limit", "vendor_oom", "status", "bad_block"};
  call_void("allocation_failed", "(iKLiss)", static_cast<int>(device_), static_cast<unsigned long long>(size),
            static_cast<long long>(cached_before), static_cast<int>(refusal.status), kinds[refusal.kind],
            refusal.detail.c_str());
  TORCH_CHECK(false, "fl:", static_cast<int>(device_), ": allocating ", size, " bytes failed");
}

bool CachingAllocator::free(Block* block) noexcept {
  const uint64_t ptr = block->ptr, size = block->size;      // the block may be reused once unlocked
  const c10::StreamId stream = block->stream;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!block->live) {
      return false;
    }
    block->live = false;
    live_.erase(block->ptr);
    stats_.allocated -= static_cast<int64_t>(block->size);
    if (block->used_by.empty()) {
      to_pool(block);
    } else {
      // Other streams may still read it: pooled once an event on each has completed.
      Waiting waiting{block, {}};
      for (const auto& [id, handle] : block->used_by) {
        fl_event event = nullptr;
        if (vendor_.api->event_create(vendor_.local, &event) != FL_SUCCESS) {
          continue;     // no event: wait below for the stream instead
        }
        if (vendor_.api->event_record(event, handle) != FL_SUCCESS) {
          vendor_.api->event_destroy(event);
          vendor_.api->stream_synchronize(handle);
          continue;
        }
        waiting.events.push_back(event);
        (void)id;
      }
      block->used_by.clear();
      waiting_.push_back(std::move(waiting));
    }
  }
  if (history_enabled()) {
    record_memory_event("free_requested", device_, ptr, size, stream);
    record_memory_event("free_completed", device_, ptr, size, stream);
  }
  return true;
}

bool CachingAllocator::free_address(uint64_t ptr) noexcept {
  Block* block = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = live_.find(ptr);
    if (found == live_.end()) {
      return false;
    }
    block = found->second;
  }
  return free(block);
}

void CachingAllocator::to_pool(Block* block) {
  block->writer = -1;
  block->used_by.clear();
  block->caught_up.clear();
  block->write_version++;             // a reader's caught_up from before never lands on the next use
  pool_[{block->stream, block->size}].push_back(block);
}

void CachingAllocator::collect_waiting() {
  auto done = [this](Waiting& waiting) {
    for (fl_event event : waiting.events) {
      if (vendor_.api->event_query(event) != FL_SUCCESS) {
        return false;
      }
    }
    for (fl_event event : waiting.events) {
      vendor_.api->event_destroy(event);
    }
    to_pool(waiting.block);
    return true;
  };
  waiting_.erase(std::remove_if(waiting_.begin(), waiting_.end(), done), waiting_.end());
}

bool CachingAllocator::record_stream(uint64_t ptr, c10::StreamId stream, fl_stream handle) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = live_.find(ptr);
  if (found == live_.end()) {
    return false;
  }
  Block* block = found->second;
  if (stream == block->stream) {
    return true;
  }
  for (const auto& used : block->used_by) {
    if (used.first == stream) {
      return true;
    }
  }
  block->used_by.emplace_back(stream, handle);
  return true;
}

bool CachingAllocator::live_block(uint64_t ptr, Block& out) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = live_.find(ptr);
  if (found == live_.end()) {
    return false;
  }
  out = *found->second;
  return true;
}

bool CachingAllocator::set_writer(uint64_t ptr, c10::StreamId writer) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = live_.find(ptr);
  if (found == live_.end()) {
    return false;
  }
  found->second->writer = writer;
  found->second->caught_up.clear();
  found->second->write_version++;
  return true;
}

c10::StreamId CachingAllocator::use_block(uint64_t ptr, c10::StreamId stream, fl_stream handle, bool writes,
                                          uint64_t& version) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = live_.find(ptr);
  if (found == live_.end()) {
    return -1;
  }
  Block* block = found->second;
  const c10::StreamId writer = block->writer >= 0 ? block->writer : block->stream;
  const auto& caught = block->caught_up;
  const bool wait = writer != stream && std::find(caught.begin(), caught.end(), stream) == caught.end();
  if (block->stream != stream &&
      std::none_of(block->used_by.begin(), block->used_by.end(), [&](const auto& used) { return used.first == stream; })) {
    block->used_by.emplace_back(stream, handle);
  }
  if (writes) {
    block->writer = stream;
    block->caught_up.clear();
    block->write_version++;
  }
  version = block->write_version;
  return wait ? writer : -1;
}

void CachingAllocator::caught_up(uint64_t ptr, c10::StreamId stream, c10::StreamId writer, uint64_t version) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = live_.find(ptr);
  if (found == live_.end()) {
    return;
  }
  Block* block = found->second;
  if (block->write_version == version && (block->writer >= 0 ? block->writer : block->stream) == writer &&
      block->writer != stream &&
      std::find(block->caught_up.begin(), block->caught_up.end(), stream) == block->caught_up.end()) {
    block->caught_up.push_back(stream);
  }
}

void CachingAllocator::write_settled(uint64_t ptr, c10::StreamId writer) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = live_.find(ptr);
  if (found != live_.end() && found->second->writer == writer) {
    found->second->caught_up.clear();
    found->second->write_version++;
  }
}

void CachingAllocator::forget_stream(c10::StreamId stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto rehome = [stream](Block* block) {
    if (block->stream == stream) {
      block->stream = kDefaultStreamId;
    }
    if (block->writer == stream) {
      block->writer = -1;
      block->caught_up.clear();
      block->write_version++;
    }
    auto& used = block->used_by;
    used.erase(std::remove_if(used.begin(), used.end(), [&](const auto& u) { return u.first == stream; }), used.end());
    auto& caught = block->caught_up;
    caught.erase(std::remove(caught.begin(), caught.end(), stream), caught.end());
  };
  for (auto& [ptr, block] : live_) {
    rehome(block);
  }
  for (Waiting& waiting : waiting_) {
    rehome(waiting.block);
  }
  for (auto it = pool_.lower_bound({stream, 0}); it != pool_.end() && it->first.first == stream;) {
    auto& into = pool_[{kDefaultStreamId, it->first.second}];
    for (Block* block : it->second) {
      block->stream = kDefaultStreamId;
      into.push_back(block);
    }
    it = pool_.erase(it);
  }
}

const Block* CachingAllocator::overlapping(uint64_t ptr, uint64_t size) const {
  auto after = held_.upper_bound(ptr);
  if (after != held_.begin()) {
    const Block* before = std::prev(after)->second;
    if (before->ptr + before->size > ptr) {
      return before;
    }
  }
  if (after != held_.end() && after->first < ptr + size) {
    return after->second;
  }
  return nullptr;
}

bool CachingAllocator::holds(uint64_t address) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return overlapping(address, 1) != nullptr;
}

std::vector<Block*> CachingAllocator::take_cached() {
  std::lock_guard<std::mutex> lock(mutex_);
  collect_waiting();
  std::vector<Block*> taken;
  for (auto& [key, bucket] : pool_) {
    taken.insert(taken.end(), bucket.begin(), bucket.end());
  }
  pool_.clear();
  return taken;
}

void CachingAllocator::release(const std::vector<Block*>& blocks) {
  std::vector<std::pair<uint64_t, uint64_t>> freed;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (Block* block : blocks) {
      held_.erase(block->ptr);
      // A failing fl_free leaks the block (better than a crash on the free path); the
      // plugin's own error log names it.
      vendor_.api->fl_free(vendor_.local, block->ptr);
      stats_.reserved -= static_cast<int64_t>(block->size);
      ++stats_.vendor_frees;
      freed.emplace_back(block->ptr, block->size);
      delete block;
    }
  }
  if (history_enabled()) {
    for (const auto& [ptr, size] : freed) {
      record_memory_event("segment_free", device_, ptr, size, 0);
    }
  }
}

MemoryFigures CachingAllocator::figures() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!waiting_.empty()) {
    collect_waiting();
  }
  MemoryFigures out = stats_;
  out.live_blocks = static_cast<int64_t>(live_.size());
  for (const auto& [key, bucket] : pool_) {
    out.cached_blocks += static_cast<int64_t>(bucket.size());
    out.cached_bytes += static_cast<int64_t>(key.second * bucket.size());
  }
  out.limit = limit_;
  return out;
}

void CachingAllocator::reset_peaks() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_allocated = stats_.allocated;
  stats_.peak_reserved = stats_.reserved;
}

void CachingAllocator::reset_accumulated() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.vendor_mallocs = stats_.vendor_frees = stats_.cache_hits = stats_.alloc_retries = stats_.ooms = 0;
}

void CachingAllocator::set_limit(int64_t limit) {
  std::lock_guard<std::mutex> lock(mutex_);
  limit_ = limit;
}

std::vector<BlockView> CachingAllocator::blocks() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<BlockView> out;
  out.reserve(held_.size());
  for (const auto& [ptr, block] : held_) {
    out.push_back({ptr, block->size, block->requested, block->stream, block->live ? 1 : 0});
  }
  for (const Waiting& waiting : waiting_) {
    for (BlockView& view : out) {
      if (view.ptr == waiting.block->ptr) {
        view.state = 2;
      }
    }
  }
  return out;
}

std::vector<c10::StreamId> CachingAllocator::streams_in_use() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<c10::StreamId> out;
  for (const auto& [ptr, block] : live_) {
    for (const auto& used : block->used_by) {
      out.push_back(used.first);
    }
  }
  return out;
}

void install_allocators(std::vector<CachingAllocator*> allocators) {
  g_allocators = new std::vector<CachingAllocator*>(std::move(allocators));
  g_installed.store(true, std::memory_order_release);
}

bool allocators_installed() noexcept {
  return g_installed.load(std::memory_order_acquire);
}

CachingAllocator& allocator_of(c10::DeviceIndex device) {
  TORCH_CHECK(allocators_installed(), "fl bridge: the device allocators are not installed");
  TORCH_CHECK_INDEX(device >= 0 && static_cast<size_t>(device) < g_allocators->size(), "fl:",
                    static_cast<int>(device), " does not exist: ", g_allocators->size(),
                    " fl device(s) are available (see torch_fl.list_devices())");
  return *(*g_allocators)[static_cast<size_t>(device)];
}

void lock_allocators_for_fork() noexcept {
  if (allocators_installed()) {
    for (CachingAllocator* allocator : *g_allocators) {
      allocator->lock_for_fork();
    }
  }
}

void unlock_allocators_after_fork() noexcept {
  if (allocators_installed()) {
    for (CachingAllocator* allocator : *g_allocators) {
      allocator->unlock_after_fork();
    }
  }
}

c10::DeviceIndex device_of_address(uint64_t address) {
  if (!allocators_installed()) {
    return -1;
  }
  for (CachingAllocator* allocator : *g_allocators) {
    if (allocator->holds(address)) {
      return allocator->device();
    }
  }
  return -1;
}

}  // namespace fl_bridge
