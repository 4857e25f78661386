#include "fast_path_switches.h"

#include <atomic>

namespace fl_bridge {
namespace {

std::atomic<uint32_t> g_switches{0};
std::atomic<uint64_t> g_epoch{0};

} // namespace

uint32_t switches() noexcept {
  return g_switches.load(std::memory_order_relaxed);
}

void set_switch(uint32_t bit, bool on) noexcept {
  if (on) {
    g_switches.fetch_or(bit);
  } else {
    g_switches.fetch_and(~bit);
  }
}

bool take_held_inputs() noexcept {
  return (g_switches.fetch_and(~static_cast<uint32_t>(kHeldInputs)) & kHeldInputs) != 0;
}

uint64_t kernel_epoch() noexcept {
  return g_epoch.load(std::memory_order_acquire);
}

void set_kernel_epoch(uint64_t epoch) noexcept {
  g_epoch.store(epoch, std::memory_order_release);
}

} // namespace fl_bridge
