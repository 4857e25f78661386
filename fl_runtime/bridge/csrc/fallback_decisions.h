// The fallback chain's decision for one op's calls, as the C++ kernels of its generic kernel
// (fallback_decompositions.h) keep it: per (device, dtypes of the tensor arguments), whether
// the chain (ops/fallback/chain.py FallbackChain.decide) runs the call as Torch-FL's own
// decomposition.  The chain decides once per (device, op, dtypes) and caches that until its
// switches change (FallbackChain.configure); this table holds the same answers, learnt from
// Python after a call the chain ran, and forgets them when the chain does or when a kernel
// table changes (fast_path_switches.h kernel_epoch), so it never answers what Python would not.
#pragma once

#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>

#include <cstdint>
#include <shared_mutex>
#include <unordered_map>

namespace fl_bridge {

enum class Decision : uint8_t {
  kUnknown,          // not asked yet (or forgotten): Python runs the call, then answers
  kDecomposition,    // the chain runs it as the decomposition: C++ may too
  kElsewhere,        // a vendor kernel, the CPU fallback, an error: Python runs it
};

class FallbackDecisions {
 public:
  // (device, dtypes) as one word: a byte each (ScalarType fits one), at most seven dtypes.
  static uint64_t key(int8_t device, c10::ArrayRef<c10::ScalarType> dtypes);

  Decision find(uint64_t key) const;
  // Records Python's answer, unless the chain forgot its decisions after `generation` was read.
  void put(uint64_t key, bool decomposition, uint64_t generation);

 private:
  struct Entry {
    bool decomposition;
    uint64_t generation;
    uint64_t epoch;
  };
  mutable std::shared_mutex lock_;    // readers share it: threads on other devices never wait
  std::unordered_map<uint64_t, Entry> entries_;
};

// The chain's decisions as of now: forget_fallback_decisions() makes every older answer stale.
uint64_t decisions_generation() noexcept;
void forget_fallback_decisions() noexcept;

} // namespace fl_bridge
