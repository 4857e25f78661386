#include "stream_order.h"

#include <algorithm>
#include <string>

#include <c10/util/SmallVector.h>

#include "caching_allocator.h"
#include "fast_path_switches.h"
#include "vendor_failure.h"

namespace fl_bridge {
namespace {

constexpr c10::DeviceType kFl = c10::DeviceType::PrivateUse1;

using Writers = c10::SmallVector<c10::StreamId, 4>;

void use(CachingAllocator& allocator, const StreamRef& stream, const at::Tensor& t, bool writes, Writers& writers) {
  if (!t.defined() || t.device().type() != kFl || t.device().index() != allocator.device() || !t.has_storage()) {
    return;
  }
  const auto base = reinterpret_cast<uintptr_t>(t.storage().data());
  if (base == 0) {
    return;
  }
  const c10::StreamId writer = allocator.use_block(base, stream.id(), stream.handle(), writes);
  if (writer >= 0 && std::find(writers.begin(), writers.end(), writer) == writers.end()) {
    writers.push_back(writer);
  }
}

void use_value(CachingAllocator& allocator, const StreamRef& stream, const c10::IValue& value, Writers& writers) {
  if (value.isTensor()) {
    use(allocator, stream, value.toTensor(), false, writers);
  } else if (value.isTensorList()) {
    for (const at::Tensor& t : value.toTensorVector()) {
      use(allocator, stream, t, false, writers);
    }
  } else if (value.isList()) {          // Tensor?[] (index lists)
    for (const c10::IValue& item : value.toListRef()) {
      if (item.isTensor()) {
        use(allocator, stream, item.toTensor(), false, writers);
      }
    }
  }
}

// stream.wait_stream(writer): an event recorded on `writer` now, waited for by `stream`.
VendorFailure wait_for(const VendorDevice& vendor, const StreamRef& stream, const StreamRef& writer) {
  const fl_api* api = vendor.api;
  fl_event event = nullptr;
  fl_status status = api->event_create(vendor.local, &event);
  if (status != FL_SUCCESS) {
    return {status, "event_create(device=fl:" + std::to_string(vendor.local) + ")"};
  }
  VendorFailure failure;
  status = api->event_record(event, writer.handle());
  if (status != FL_SUCCESS) {
    failure = {status, "event_record"};
  } else if ((status = api->stream_wait_event(stream.handle(), event)) != FL_SUCCESS) {
    failure = {status, "stream_wait_event"};
  }
  api->event_destroy(event);        // a wait enqueued on it needs the record only (fl_abi.h)
  return failure;
}

}  // namespace

bool cross_stream_tracking() noexcept {
  return (switches() & kCrossStream) != 0;
}

void order_after_writers(c10::DeviceIndex device, const StreamRef& stream, c10::ArrayRef<c10::IValue> inputs,
                         c10::ArrayRef<at::Tensor> outputs) {
  CachingAllocator& allocator = allocator_of(device);
  Writers writers;
  for (const c10::IValue& value : inputs) {
    use_value(allocator, stream, value, writers);
  }
  for (const at::Tensor& t : outputs) {
    use(allocator, stream, t, true, writers);
  }
  for (const c10::StreamId id : writers) {
    const StreamRef writer = stream_of(device, id);
    if (!writer) {
      continue;          // destroyed, so drained (stream_registry.h): nothing left to wait for
    }
    const VendorFailure failure = wait_for(allocator.vendor(), stream, writer);
    if (failure.failed()) {
      raise_vendor_failure(device, failure);
    }
  }
}

}  // namespace fl_bridge
