// Memory history for torch.fl.memory._record_memory_history (docs/users/errors-and-memory.md
// "Memory snapshots"): while it is on, the device allocators report each allocation, free and
// vendor segment to the runtime's recorder (fl_runtime/devices/memory_history.py), which keeps
// the events with the Python stack that caused them, in the format PyTorch's memory
// visualizer reads.  Off (the default) it costs one relaxed atomic load per call.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/Stream.h>

#include <cstdint>

namespace fl_bridge {

bool history_enabled() noexcept;
void set_history_enabled(bool enabled) noexcept;

// Hands one event to the recorder (takes the GIL; never throws: a recorder failure is
// reported as unraisable, and an exception Python was raising is kept).
void record_memory_event(const char* action, c10::DeviceIndex device, uint64_t ptr, uint64_t size,
                         c10::StreamId stream) noexcept;

}  // namespace fl_bridge
