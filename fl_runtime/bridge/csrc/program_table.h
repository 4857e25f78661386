// One op's recorded launch programs, by call key (call_key.h): read by any thread without a
// lock, written under the table's own mutex (docs/users/native-bridge.md "Eager ops").
//
// An open-addressing table of atomic pointers to immutable entries: a reader hashes, probes
// and compares, with acquire loads only; a writer fills an empty slot or swaps in a newer
// entry (a program re-recorded under a new kernel epoch) with a release store.  Entries are
// never freed while the process lives (a reader may hold one): a table admits kCapacity / 2
// signatures, after which further ones stay with the Python kernel (fast_path.MAX_PROGRAMS
// bounds the Python side the same way).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "launch_program.h"

namespace fl_bridge {

// One signature: its program, or none (the Python kernel serves it; asked again after
// 1, 2, 4, 8 ... more calls, so a signature that gets a program later is picked up).
// Cache-line aligned: threads driving different devices hit different entries of one op, and
// each call bumps its entry's count.
struct alignas(64) ProgramEntry {
  std::string key;
  size_t hash;
  std::unique_ptr<const LaunchProgram> program;
  mutable std::atomic<uint64_t> calls{0};     // hits, or Python calls while program is null
  mutable std::atomic<uint64_t> counted{0};   // calls already folded into the op counts
};

class ProgramTable {
 public:
  static constexpr size_t kCapacity = 1024;

  const ProgramEntry* find(const std::string& key, size_t hash) const noexcept;
  // Adds or replaces the entry of `key`; nullptr when the table is full.
  const ProgramEntry* put(std::string key, size_t hash, std::unique_ptr<const LaunchProgram> program);

  // Calls by program since the last call of this, per counted name (op_stats, accounting).
  template <typename Visit>
  void take_counts(Visit&& visit) {
    std::lock_guard<std::mutex> lock(write_);
    auto take = [&](const ProgramEntry* entry) {
      if (entry != nullptr && entry->program != nullptr) {
        const uint64_t calls = entry->calls.load(std::memory_order_relaxed);
        const uint64_t before = entry->counted.exchange(calls, std::memory_order_relaxed);
        if (calls > before) {
          visit(entry->program->count_name(), calls - before);
        }
      }
    };
    for (const auto& slot : slots_) {
      take(slot.load(std::memory_order_acquire));
    }
    for (const ProgramEntry* entry : retired_) {   // a thread may still count on a replaced one
      take(entry);
    }
  }

 private:
  std::atomic<const ProgramEntry*> slots_[kCapacity] = {};
  std::vector<const ProgramEntry*> retired_;
  std::mutex write_;
  size_t used_ = 0;
};

} // namespace fl_bridge
