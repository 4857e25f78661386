// Host buffers of host-to-device copies in flight, kept until the device has read them, so a
// small upload never waits for its stream (which would also wait for every kernel queued before
// it) and the caller may change its tensor as soon as copy_ returns.  With the bridge this is the
// one holder per device: the stages of the copies the bridge enqueues itself (host_copies.h) and
// the host tensors the runtime's Python copies own (fl_runtime/devices/uploads.py PendingUploads
// hands them over, hold_upload), under one set of limits.  uploads.py keeps its own, with the
// same rules, on the Python route only.
//  - each copy's buffer is kept with a vendor event recorded after the copy, and let go once
//    event_query reports it done; events are reused (a spare list per device);
//  - finished copies are retired whenever a new one is held;
//  - at most `copies` copies or `bytes` host bytes stay pending per device (uploads.py LIMIT,
//    LIMIT_BYTES, passed from Python: one source of truth): past that the oldest is waited for;
//  - a finished copy's buffer is let go once the holder's mutex is released: dropping a host
//    tensor's storage may take the GIL (its Python object), and a thread holding the GIL may
//    be waiting for that mutex;
//  - when no event can be had (event_create or event_record fails), the stream is synchronised
//    instead, as uploads.py does;
//  - one mutex per device, no GIL: vendor calls only (fl_abi.h THREADING: any thread).
// The holders are leaked, as the allocators are (caching_allocator.h): their events are never
// destroyed after their plugin, which the process keeps until exit.  Their mutexes are held
// across fork() (fork_handlers.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include <c10/core/Device.h>
#include <c10/core/Storage.h>

#include "vendor_api.h"
#include "vendor_failure.h"

namespace fl_bridge {

struct UploadLimits {
  uint64_t copies;
  uint64_t bytes;
};

// What keeps a held copy's host bytes alive: a stage the bridge made, or the storage of a
// host tensor the runtime owns.
struct HeldBuffer {
  std::unique_ptr<unsigned char[]> stage;
  c10::Storage storage;
};

// One holder per device, made once (later calls only change the limits: uploads.py set_limits).
void configure_pending_uploads(c10::DeviceIndex devices, UploadLimits limits);
bool pending_uploads_configured() noexcept;

// Keeps `buffer` (`nbytes` bytes) until the work enqueued on `stream` so far, its copy, is done.
// The first vendor failure met is returned (the buffer is kept or waited for all the same).
// Takes no GIL itself; the caller holds none (the buffers it lets go may take it).
VendorFailure hold_upload(c10::DeviceIndex device, const VendorDevice& vendor, fl_stream stream,
                          HeldBuffer buffer, uint64_t nbytes);

// (copies, host bytes) still held for `device` once the finished ones are retired (uploads.py
// pending, which retires first too, so it counts unfinished copies only).
std::pair<uint64_t, uint64_t> pending_uploads(c10::DeviceIndex device, const VendorDevice& vendor);

// Every holder's mutex, in device order, across fork() (fork_handlers.h).
void lock_uploads_for_fork() noexcept;
void unlock_uploads_after_fork() noexcept;
// In a forked child: the holders never call the vendor again (its driver state, a lock another
// thread of the parent held at the fork included, is not valid there), so pending_uploads
// counts what the child inherited instead of querying its events.
void forget_vendor_in_forked_child() noexcept;

}  // namespace fl_bridge
