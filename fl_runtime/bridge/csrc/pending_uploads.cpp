#include "pending_uploads.h"

#include <atomic>
#include <deque>
#include <mutex>
#include <vector>

#include <c10/util/Exception.h>

namespace fl_bridge {
namespace {

struct Pending {
  fl_event event;
  HeldBuffer buffer;
  uint64_t nbytes;
};

// Finished copies taken off the list under the mutex; declared before the lock in each method,
// so their buffers are let go after it is released (the header says why).
using Finished = std::vector<Pending>;

class DeviceUploads {
 public:
  VendorFailure hold(c10::DeviceIndex device, const VendorDevice& vendor, fl_stream stream, HeldBuffer buffer,
                     uint64_t nbytes, const UploadLimits& limits) {
    Finished finished;
    std::unique_lock<std::mutex> lock(mutex_);
    VendorFailure failure = retire(vendor, finished);
    const fl_event event = recorded_event(vendor, stream);
    if (event == nullptr) {
      // uploads.py: no event to wait on, so wait for the copy itself (raises if the device failed).
      lock.unlock();
      const fl_status status = vendor.api->stream_synchronize(stream);
      return failure.failed() || status == FL_SUCCESS ? failure : VendorFailure{status, "stream_synchronize(fl:" + std::to_string(device) + ")"};
    }
    pending_.push_back(Pending{event, std::move(buffer), nbytes});
    bytes_ += nbytes;
    while (!failure.failed() && (pending_.size() > limits.copies || (pending_.size() > 1 && bytes_ > limits.bytes))) {
      const fl_status status = vendor.api->event_synchronize(pending_.front().event);
      failure = status == FL_SUCCESS ? retire(vendor, finished) : VendorFailure{status, "event_synchronize"};
    }
    return failure;
  }

  // Finished copies are retired first (an error status is left for the next hold to raise).
  std::pair<uint64_t, uint64_t> figures(const VendorDevice& vendor, bool may_call_vendor) {
    Finished finished;
    std::lock_guard<std::mutex> lock(mutex_);
    if (may_call_vendor) {
      retire(vendor, finished);
    }
    return {pending_.size(), bytes_};
  }

  std::mutex& mutex() noexcept { return mutex_; }

 private:
  // Lets go of the finished copies, oldest first (a stream runs in FIFO order, so the first one
  // not done ends the scan) into `finished`; an error status stops it and is returned, as
  // Event.query raises.
  VendorFailure retire(const VendorDevice& vendor, Finished& finished) {
    while (!pending_.empty()) {
      const fl_status status = vendor.api->event_query(pending_.front().event);
      if (status == FL_NOT_READY) {
        return {};
      }
      if (status != FL_SUCCESS) {
        return {status, "event_query"};
      }
      bytes_ -= pending_.front().nbytes;
      spare_.push_back(pending_.front().event);
      finished.push_back(std::move(pending_.front()));
      pending_.pop_front();
    }
    return {};
  }

  // A spare or new event recorded at the end of `stream`, or nullptr when none can be had.
  fl_event recorded_event(const VendorDevice& vendor, fl_stream stream) {
    fl_event event = nullptr;
    if (!spare_.empty()) {
      event = spare_.back();
      spare_.pop_back();
    } else if (vendor.api->event_create(vendor.local, &event) != FL_SUCCESS) {
      return nullptr;
    }
    if (vendor.api->event_record(event, stream) != FL_SUCCESS) {
      vendor.api->event_destroy(event);     // uploads.py drops it too (its Event is collected)
      return nullptr;
    }
    return event;
  }

  std::mutex mutex_;
  std::deque<Pending> pending_;
  std::vector<fl_event> spare_;
  uint64_t bytes_ = 0;
};

// Made once and leaked (the header says why); read without a lock after configuration.
std::vector<DeviceUploads*>* g_devices = nullptr;
std::atomic<bool> g_configured{false};
std::atomic<uint64_t> g_limit_copies{0};        // set with the holders (configure_pending_uploads)
std::atomic<uint64_t> g_limit_bytes{0};
std::atomic<bool> g_forked_child{false};          // forget_vendor_in_forked_child

UploadLimits limits() noexcept {
  return {g_limit_copies.load(std::memory_order_relaxed), g_limit_bytes.load(std::memory_order_relaxed)};
}

}  // namespace

void configure_pending_uploads(c10::DeviceIndex devices, UploadLimits limits) {
  g_limit_copies.store(limits.copies, std::memory_order_relaxed);
  g_limit_bytes.store(limits.bytes, std::memory_order_relaxed);
  if (g_configured.load(std::memory_order_acquire)) {
    return;
  }
  auto* made = new std::vector<DeviceUploads*>();
  for (c10::DeviceIndex i = 0; i < devices; i++) {
    made->push_back(new DeviceUploads());
  }
  g_devices = made;
  g_configured.store(true, std::memory_order_release);
}

bool pending_uploads_configured() noexcept {
  return g_configured.load(std::memory_order_acquire);
}

VendorFailure hold_upload(c10::DeviceIndex device, const VendorDevice& vendor, fl_stream stream,
                          HeldBuffer buffer, uint64_t nbytes) {
  TORCH_CHECK(pending_uploads_configured() && device >= 0 && static_cast<size_t>(device) < g_devices->size(),
              "fl bridge: no upload holder for fl:", static_cast<int>(device));
  return (*g_devices)[device]->hold(device, vendor, stream, std::move(buffer), nbytes, limits());
}

std::pair<uint64_t, uint64_t> pending_uploads(c10::DeviceIndex device, const VendorDevice& vendor) {
  if (!pending_uploads_configured() || device < 0 || static_cast<size_t>(device) >= g_devices->size()) {
    return {0, 0};
  }
  return (*g_devices)[device]->figures(vendor, !g_forked_child.load(std::memory_order_relaxed));
}

void forget_vendor_in_forked_child() noexcept {
  g_forked_child.store(true, std::memory_order_relaxed);
}

void lock_uploads_for_fork() noexcept {
  if (pending_uploads_configured()) {
    for (DeviceUploads* uploads : *g_devices) {
      uploads->mutex().lock();
    }
  }
}

void unlock_uploads_after_fork() noexcept {
  if (pending_uploads_configured()) {
    for (DeviceUploads* uploads : *g_devices) {
      uploads->mutex().unlock();
    }
  }
}

}  // namespace fl_bridge
