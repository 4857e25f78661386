// The vendor stream behind each fl stream id, for the calls the bridge serves itself on a
// thread's current stream (eager_kernel.h, host_copies.h) and the waits of the cross-stream
// order (stream_order.h).  PyTorch hands kernels a (device, stream id) pair only
// (thread_state.h); the runtime makes and drops the streams (devices/streams.py) and tells
// this registry of each.
//
// Lifetime (fl_abi.h POINTER LIFETIMES: a stream is valid until its destroy call): once the
// bridge knows a stream, the bridge destroys it.  Python's last reference only releases it
// here; a call that looked the stream up holds it (StreamRef) until it has enqueued its work,
// and the last holder drains it, tells the allocator it is gone (no event is ever recorded on
// it again, caching_allocator.h forget_stream) and then calls stream_destroy.  So a call on
// another thread never launches on a destroyed handle, and no lock is held while it launches.
// Each device's map has its own mutex, held for a lookup only (never across a vendor call or
// Python), so threads driving different devices share nothing here.
#pragma once

#include <Python.h>

#include <memory>
#include <vector>

#include <c10/core/Device.h>
#include <c10/core/Stream.h>

#include "vendor_api.h"

namespace fl_bridge {

struct OwnedStream;    // a stream the bridge destroys (stream_registry.cpp)

// A live vendor stream of one device, kept from destruction while this object lives.
class StreamRef {
 public:
  StreamRef() = default;
  StreamRef(c10::StreamId id, fl_stream handle, std::shared_ptr<const OwnedStream> keep = nullptr)
      : id_(id), handle_(handle), keep_(std::move(keep)) {}

  c10::StreamId id() const noexcept { return id_; }
  fl_stream handle() const noexcept { return handle_; }
  explicit operator bool() const noexcept { return handle_ != nullptr; }

 private:
  c10::StreamId id_ = 0;
  fl_stream handle_ = nullptr;
  std::shared_ptr<const OwnedStream> keep_;     // none for default streams (they live for good)
};

// Each device's default stream (kDefaultStreamId), set once before any kernel is registered.
void set_default_streams(std::vector<fl_stream> streams);
// The default stream of `device`, or nullptr for an index it was not given.
fl_stream default_stream(c10::DeviceIndex device) noexcept;

// The live stream `id` of `device`; an empty ref when the bridge knows no such stream (the
// Python route then handles the call and raises its error for an unknown stream).
StreamRef stream_of(c10::DeviceIndex device, c10::StreamId id);
// The calling thread's current stream of `device` (thread_state.h).
StreamRef current_stream_of(c10::DeviceIndex device);
// Makes stream `id` current for `device` (-1: the current device) on the calling thread, as
// thread_state.h exchange_stream_id, and holds it while it is current, as the runtime's
// registry holds a stream made current (StreamRegistry.keep_current): one Python dropped
// meanwhile is destroyed once no thread has it current.  Returns the id it replaced; `known`
// (if given) says whether the bridge knows stream `id`.
c10::StreamId make_current(c10::DeviceIndex device, c10::StreamId id, bool* known = nullptr);

// Python made stream `id` of `device`: the bridge destroys it once released.  False (nothing
// remembered) before the device allocators are installed, which a destroyed stream is told of.
bool remember_stream(c10::DeviceIndex device, c10::StreamId id, fl_stream handle);
// Python dropped it; false: the bridge never knew it (Python destroys it itself).  Runs
// without the GIL when the stream is destroyed here (the drain may take long).
bool release_stream(c10::DeviceIndex device, c10::StreamId id);
// Live streams the bridge knows, default ones aside (tests).
size_t known_streams() noexcept;

// Every device map's mutex across fork() (fork_handlers.h).
void lock_streams_for_fork() noexcept;
void unlock_streams_after_fork() noexcept;

// Python methods remember_stream (-> bool), release_stream, known_streams (module.cpp adds them).
PyMethodDef* stream_registry_methods();

}  // namespace fl_bridge
