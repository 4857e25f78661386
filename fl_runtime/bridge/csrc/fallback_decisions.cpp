#include "fallback_decisions.h"

#include <atomic>
#include <mutex>

#include <c10/util/Exception.h>

#include "fast_path_switches.h"

namespace fl_bridge {
namespace {

std::atomic<uint64_t> g_generation{0};

} // namespace

uint64_t FallbackDecisions::key(int8_t device, c10::ArrayRef<c10::ScalarType> dtypes) {
  TORCH_INTERNAL_ASSERT(dtypes.size() <= 7, "FallbackDecisions::key: more than seven dtypes");
  uint64_t packed = static_cast<uint8_t>(device);
  for (const c10::ScalarType dtype : dtypes) {
    packed = (packed << 8) | (static_cast<uint64_t>(dtype) + 1);      // +1: no dtype is 0
  }
  return packed;
}

Decision FallbackDecisions::find(uint64_t key) const {
  std::shared_lock<std::shared_mutex> read(lock_);
  const auto found = entries_.find(key);
  if (found == entries_.end() || found->second.generation != decisions_generation() ||
      found->second.epoch != kernel_epoch()) {
    return Decision::kUnknown;
  }
  return found->second.decomposition ? Decision::kDecomposition : Decision::kElsewhere;
}

void FallbackDecisions::put(uint64_t key, bool decomposition, uint64_t generation) {
  if (generation != decisions_generation()) {
    return;           // the chain forgot its decisions while Python ran this call
  }
  std::unique_lock<std::shared_mutex> write(lock_);
  entries_[key] = Entry{decomposition, generation, kernel_epoch()};
}

uint64_t decisions_generation() noexcept {
  return g_generation.load(std::memory_order_acquire);
}

void forget_fallback_decisions() noexcept {
  g_generation.fetch_add(1, std::memory_order_acq_rel);
}

} // namespace fl_bridge
