// Host buffers of the host-to-device copies the bridge enqueues itself (host_copies.h), kept
// until the device has read them: the C++ twin of fl_runtime/devices/uploads.py PendingUploads,
// with its rules, so a small upload never waits for its stream (which would also wait for every
// kernel queued before it) and the caller may change its tensor as soon as copy_ returns.
//  - each copy's buffer is kept with a vendor event recorded after the copy, and let go once
//    event_query reports it done; events are reused (a spare list per device);
//  - finished copies are retired whenever a new one is held;
//  - at most `copies` copies or `bytes` host bytes stay pending per device (uploads.py LIMIT,
//    LIMIT_BYTES, passed from Python: one source of truth): past that the oldest is waited for;
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

#include "vendor_api.h"
#include "vendor_failure.h"

namespace fl_bridge {

struct UploadLimits {
  uint64_t copies = 256;
  uint64_t bytes = 256ull << 20;
};

// One holder per device, made once (later calls only change the limits).
void configure_pending_uploads(c10::DeviceIndex devices, UploadLimits limits);
bool pending_uploads_configured() noexcept;

// Keeps `buffer` (`nbytes` bytes) until the work enqueued on `stream` so far, its copy, is done.
// The first vendor failure met is returned (the buffer is kept or waited for all the same).
VendorFailure hold_upload(c10::DeviceIndex device, const VendorDevice& vendor, fl_stream stream,
                          std::unique_ptr<unsigned char[]> buffer, uint64_t nbytes);

// (copies, host bytes) still held for `device` once the finished ones are retired (uploads.py
// pending, which retires its own first too, so the two holders' sum counts unfinished copies only).
std::pair<uint64_t, uint64_t> pending_uploads(c10::DeviceIndex device, const VendorDevice& vendor);

// Every holder's mutex, in device order, across fork() (fork_handlers.h).
void lock_uploads_for_fork() noexcept;
void unlock_uploads_after_fork() noexcept;
// In a forked child: the holders never call the vendor again (its driver state, a lock another
// thread of the parent held at the fork included, is not valid there), so pending_uploads
// counts what the child inherited instead of querying its events.
void forget_vendor_in_forked_child() noexcept;

}  // namespace fl_bridge
