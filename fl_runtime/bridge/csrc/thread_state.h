// The current device and the current stream of each device, per host thread (CUDA's rule;
// docs/users/native-bridge.md "Threads").  With the bridge this is the runtime's one copy of
// that state: PyTorch's device guard reads it without the GIL (the autograd engine asks for
// the current stream of every tensor an op records), and the Python runtime reads it through
// the module's current_device()/current_stream() (Runtime.use_native_thread_state,
// fl_runtime/runtime.py).
#pragma once

#include <c10/core/Device.h>
#include <c10/core/Stream.h>

namespace fl_bridge {

// The stream every device starts on, as the runtime numbers it (devices/streams.py).
constexpr c10::StreamId kDefaultStreamId = 0;

// Set once when the bridge is installed: the number of fl devices of this process.
void set_device_count(c10::DeviceIndex count);
c10::DeviceIndex device_count() noexcept;

// Raises the runtime's DeviceNotFoundError naming the devices there are, for an index outside them.
void check_device(c10::DeviceIndex index);
// `index`, or the calling thread's current device for -1 (PyTorch's "no index").
c10::DeviceIndex resolve(c10::DeviceIndex index);

c10::DeviceIndex current_device() noexcept;
void set_current_device(c10::DeviceIndex index);             // checked
void set_current_device_unchecked(c10::DeviceIndex index) noexcept;

c10::StreamId current_stream_id(c10::DeviceIndex index);
// Makes `id` current for `index` on this thread; returns the one it replaced.
c10::StreamId exchange_stream_id(c10::DeviceIndex index, c10::StreamId id);

} // namespace fl_bridge
