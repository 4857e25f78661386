// The caching allocator of one fl device, in C++: the pool every fl storage comes from with
// the bridge on, whichever route asked (PyTorch's C++ allocations through device_allocator.h,
// the dispatch's outputs through allocate_on, the Python runtime through the module's
// alloc/free, fl_runtime/devices/allocator.py NativeAllocator).  Same rules as the Python
// allocator of the Python route (docs/users/devices.md "Memory"):
//  - sizes are rounded (512 B below 1 MiB, 128 KiB above); a freed block goes back to a pool
//    keyed by (allocation stream, size) and is reused only on that stream (FIFO order makes it
//    safe);
//  - a block other streams used (record_stream, or the runtime's cross-stream tracking) waits,
//    once freed, for an event recorded on each of them before it is pooled again;
//  - the process may hold at most memory_fraction of the device; past that, or when the vendor
//    reports no memory, the cache is emptied and the allocation retried once, then it fails
//    with the runtime's FLOutOfMemoryError (a torch.OutOfMemoryError);
//  - every block the vendor returns is checked (not 0, aligned, overlapping no held block).
// Allocation and free take this device's mutex only: no GIL.  The interpreter is entered on
// the slow paths alone (errors, the device-wide wait before an emptied cache is freed, memory
// history), never with the mutex held.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <c10/core/Device.h>
#include <c10/core/Stream.h>

#include "vendor_api.h"

namespace fl_bridge {

// The runtime's rounding (allocator.py round_size).
uint64_t round_size(uint64_t nbytes) noexcept;

// One vendor allocation.  Owned by its allocator; the address is the DataPtr context.
struct Block {
  uint64_t ptr = 0;
  uint64_t size = 0;
  int64_t requested = 0;                       // bytes asked for (the visualizer's requested_size)
  c10::StreamId stream = 0;                    // allocated for (the pool key)
  c10::StreamId writer = -1;                   // last writing stream, -1: none (runtime.py)
  std::vector<std::pair<c10::StreamId, fl_stream>> used_by;   // other streams that used it
  std::vector<c10::StreamId> caught_up;       // streams that waited for the last write (stream_order.h)
  uint64_t write_version = 0;                  // moves on each write mark and settle (stream_order.h)
  c10::DeviceIndex device = 0;
  bool live = false;
  bool fresh = false;                          // just taken from the vendor (memory history)
};

// Why an allocation found no block.
struct Refusal {
  enum Kind { kNone, kLimit, kVendorOom, kStatus, kBadBlock } kind = kNone;
  fl_status status = FL_SUCCESS;
  std::string detail;                          // kBadBlock: what was wrong with it
  bool retriable() const noexcept { return kind == kLimit || kind == kVendorOom; }
};

struct MemoryFigures {
  int64_t allocated = 0, reserved = 0, peak_allocated = 0, peak_reserved = 0;
  int64_t vendor_mallocs = 0, vendor_frees = 0, cache_hits = 0, alloc_retries = 0, ooms = 0;
  int64_t live_blocks = 0, cached_blocks = 0, cached_bytes = 0, limit = 0;
};

// A held block as the memory snapshot reports it.
struct BlockView {
  uint64_t ptr, size;
  int64_t requested;
  c10::StreamId stream;
  int state;                                   // 0 cached, 1 live, 2 freed (waiting for streams)
};

// Cache-line aligned, so two devices' allocators (each under its own mutex) share no line.
class alignas(64) CachingAllocator {
 public:
  CachingAllocator(c10::DeviceIndex device, VendorDevice vendor, int64_t limit);

  // A live block of size round_size(nbytes) (or exactly `rounded`) for `stream`; throws the
  // runtime's error (OOM, a faulty plugin) through the interpreter.
  Block* allocate(uint64_t rounded, int64_t requested, c10::StreamId stream);
  // Back to the pool (or to the streams' events); any thread, no GIL.  False: not a live block.
  bool free(Block* block) noexcept;
  bool free_address(uint64_t ptr) noexcept;

  // record_stream: `stream` (with its vendor handle) uses the live block at `ptr`.
  bool record_stream(uint64_t ptr, c10::StreamId stream, fl_stream handle);
  // The live block at `ptr` (its figures copied), or false.
  bool live_block(uint64_t ptr, Block& out) const;
  bool set_writer(uint64_t ptr, c10::StreamId writer);
  // One use of the live block at `ptr` by work about to be enqueued on `stream` (the runtime's
  // cross-stream order, stream_order.h): `stream` joins the block's users when the block is
  // another stream's, and becomes its writer when the work `writes` it.  Returns the stream
  // whose work on the block this work must wait for (its last writer, else its allocation
  // stream) when that is another one that `stream` has not caught up with since its last
  // write; -1 when there is none or no live block starts at `ptr`.  `version`: the block's
  // write version as seen (caught_up's argument).
  c10::StreamId use_block(uint64_t ptr, c10::StreamId stream, fl_stream handle, bool writes, uint64_t& version);
  // `stream` has waited for `writer`'s work: the block at `ptr` needs no new wait from it until
  // the next write (ignored if the block's write version moved since use_block saw `version`).
  void caught_up(uint64_t ptr, c10::StreamId stream, c10::StreamId writer, uint64_t version);
  // `writer`'s write to the block at `ptr`, marked before its work, is now enqueued: a stream
  // that noted itself caught up in between waited for an event recorded before that work, so
  // every stream waits for the block's next use again (stream_order.h "Once per write").
  void write_settled(uint64_t ptr, c10::StreamId writer);
  // Stream `stream` has drained and is being destroyed (stream_registry.h): no event is recorded
  // on it again, and its blocks (live, pooled, waiting) belong to the default stream from now on,
  // whose FIFO order is then all they need.
  void forget_stream(c10::StreamId stream);
  bool holds(uint64_t address) const;

  // Takes every cached block out of the pool; once the device has finished the work enqueued
  // before (the runtime's wait: native_allocator.py empty_cache), release() hands them to the
  // vendor.  Blocks freed during the wait stay pooled, reused in stream order.
  std::vector<Block*> take_cached();
  void release(const std::vector<Block*>& blocks);

  MemoryFigures figures();
  void reset_peaks();
  void reset_accumulated();
  void set_limit(int64_t limit);
  std::vector<BlockView> blocks();
  // Stream ids some live block was recorded on (the runtime keeps those streams alive).
  std::vector<c10::StreamId> streams_in_use() const;

  // Held across a fork() by the forking thread (fork_handlers.h), so the child never
  // inherits an update half done.
  void lock_for_fork() { mutex_.lock(); }
  void unlock_after_fork() { mutex_.unlock(); }

  c10::DeviceIndex device() const noexcept { return device_; }
  const VendorDevice& vendor() const noexcept { return vendor_; }

 private:
  struct Waiting {
    Block* block;
    std::vector<fl_event> events;
  };

  Block* from_pool(uint64_t size, c10::StreamId stream);
  // A fresh block, or nullptr with `refusal` saying why.
  Block* vendor_malloc(uint64_t size, c10::StreamId stream, Refusal& refusal);
  bool accept_block(uint64_t ptr, uint64_t size, Refusal& refusal);
  Block* take_block(uint64_t size, c10::StreamId stream, uint64_t requested, Refusal& refusal);
  [[noreturn]] void fail(uint64_t size, int64_t cached_before, const Refusal& refusal);
  void to_pool(Block* block);
  void collect_waiting();
  void count_live(Block* block, uint64_t requested);
  const Block* overlapping(uint64_t ptr, uint64_t size) const;

  const c10::DeviceIndex device_;
  const VendorDevice vendor_;
  mutable std::mutex mutex_;
  int64_t limit_;
  MemoryFigures stats_;
  std::map<std::pair<c10::StreamId, uint64_t>, std::vector<Block*>> pool_;
  std::unordered_map<uint64_t, Block*> live_;
  std::map<uint64_t, Block*> held_;           // every block taken from the vendor, by address
  std::vector<Waiting> waiting_;
};

// The allocators, one per device, made by install_allocators (leaked: deleters may run at exit).
void install_allocators(std::vector<CachingAllocator*> allocators);
bool allocators_installed() noexcept;
CachingAllocator& allocator_of(c10::DeviceIndex device);
// Every installed allocator's mutex, taken in device order before a fork and given back
// after it (fork_handlers.h); nothing before install.
void lock_allocators_for_fork() noexcept;
void unlock_allocators_after_fork() noexcept;
// The device whose allocator holds `address`, or -1.
c10::DeviceIndex device_of_address(uint64_t address);

}  // namespace fl_bridge
