// What a recorded launch program cannot know, as the Python runtime tells it: the
// switches that send every call of an op to its Python kernel (ops/eager/launcher.py
// _run_program's checks), and the kernel tables' epoch.
//
// Read on every eager call with relaxed loads of one word each: no lock, and no write
// on the hot path, so threads driving different devices share the cache line read-only.
// Written rarely, from Python, with the GIL held (docs/users/native-bridge.md "Eager ops").
#pragma once

#include <cstdint>

namespace fl_bridge {

enum Switch : uint32_t {
  kHooked = 1u << 0,        // a profile or phase timing is installed (ops/accounting.py HOOKED)
  kCrossStream = 1u << 1,   // writes are tracked per stream: C++ kernels order their calls (stream_order.h)
  kHeldInputs = 1u << 2,    // a failed call's inputs wait for the next op to release them
  kDisabled = 1u << 3,      // the C++ steady state is off (tests, TORCH_FL_BRIDGE_PROGRAMS=0)
  kCapturing = 1u << 4,     // a graph capture records launches (ops/graph/graph_capture.py)
};

uint32_t switches() noexcept;
// Non-zero: every call takes its Python kernel.  kCrossStream is not among them: the C++ kernels
// order their own work between streams (stream_order.h).
inline uint32_t python_switches() noexcept {
  return switches() & ~static_cast<uint32_t>(kCrossStream);
}
void set_switch(uint32_t bit, bool on) noexcept;
// Clears kHeldInputs and returns whether it was set (the Python kernel then releases them).
bool take_held_inputs() noexcept;

// Bumped whenever a device's kernel table changes (ops/op_table.py KernelMap): a program
// recorded under another epoch may name a kernel entry the table no longer offers.
uint64_t kernel_epoch() noexcept;
void set_kernel_epoch(uint64_t epoch) noexcept;

} // namespace fl_bridge
