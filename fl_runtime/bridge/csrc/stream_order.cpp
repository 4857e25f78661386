#include "stream_order.h"

#include <algorithm>
#include <atomic>
#include <string>

#include <c10/util/SmallVector.h>
#include <torch/csrc/Exceptions.h>

#include "caching_allocator.h"
#include "fast_path_switches.h"
#include "python_ints.h"
#include "vendor_failure.h"

namespace fl_bridge {
namespace {

constexpr c10::DeviceType kFl = c10::DeviceType::PrivateUse1;

// A block this call must wait for: the stream that wrote it and the write version seen.
struct Wait {
  uint64_t base;
  c10::StreamId writer;
  uint64_t version;
};
using Waits = c10::SmallVector<Wait, 4>;

// A write this thread marked whose work is not known to be enqueued yet (settle_writes).
struct Unsettled {
  CachingAllocator* allocator;
  uint64_t base;
  c10::StreamId writer;
};
thread_local c10::SmallVector<Unsettled, 4> t_unsettled;

std::atomic<uint64_t> g_waits{0};

void use_base(CachingAllocator& allocator, const StreamRef& stream, uint64_t base, bool writes, Waits& waits) {
  uint64_t version = 0;
  const c10::StreamId writer = allocator.use_block(base, stream.id(), stream.handle(), writes, version);
  if (writer >= 0) {
    waits.push_back({base, writer, version});
  }
  if (writes) {
    note_unsettled_write(allocator, base, stream.id());
  }
}

void use(CachingAllocator& allocator, const StreamRef& stream, const at::Tensor& t, bool writes, Waits& waits) {
  if (!t.defined() || t.device().type() != kFl || t.device().index() != allocator.device() || !t.has_storage()) {
    return;
  }
  const auto base = reinterpret_cast<uintptr_t>(t.storage().data());
  if (base != 0) {
    use_base(allocator, stream, base, writes, waits);
  }
}

void use_value(CachingAllocator& allocator, const StreamRef& stream, const c10::IValue& value, Waits& waits) {
  if (value.isTensor()) {
    use(allocator, stream, value.toTensor(), false, waits);
  } else if (value.isTensorList()) {
    for (const at::Tensor& t : value.toTensorVector()) {
      use(allocator, stream, t, false, waits);
    }
  } else if (value.isList()) {          // Tensor?[] (index lists)
    for (const c10::IValue& item : value.toListRef()) {
      if (item.isTensor()) {
        use(allocator, stream, item.toTensor(), false, waits);
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
  if (!failure.failed()) {
    g_waits.fetch_add(1, std::memory_order_relaxed);
  }
  return failure;
}

// Enqueues on `stream` one wait per writer stream in `waits`, then notes `stream` caught up.
void wait_for_writers(c10::DeviceIndex device, CachingAllocator& allocator, const StreamRef& stream,
                      const Waits& waits) {
  c10::SmallVector<c10::StreamId, 4> waited;
  for (const auto& [base, id, version] : waits) {
    if (std::find(waited.begin(), waited.end(), id) == waited.end()) {
      const StreamRef writer = stream_of(device, id);
      // A destroyed writer has drained (stream_registry.h): nothing left to wait for.
      const VendorFailure failure = writer ? wait_for(allocator.vendor(), stream, writer) : VendorFailure{};
      if (failure.failed()) {
        raise_vendor_failure(device, failure);
      }
      waited.push_back(id);
    }
    allocator.caught_up(base, stream.id(), id, version);   // no new wait for it until its next write
  }
}

PyObject* order_blocks_py(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  TORCH_CHECK_TYPE(nargs == 4, "order_blocks(device, stream_id, reads, writes)");
  const auto device = device_arg(args[0]);
  const StreamRef stream = stream_of(device, int_arg(args[1]));
  if (!stream) {
    Py_RETURN_FALSE;
  }
  const std::vector<uint64_t> reads = u64_list(args[2]);
  const std::vector<uint64_t> writes = u64_list(args[3]);
  order_after_writers_at(device, stream, reads, writes);
  Py_RETURN_TRUE;
  END_HANDLE_TH_ERRORS
}

PyObject* settle_writes_py(PyObject*, PyObject*) {
  settle_writes();
  Py_RETURN_NONE;
}

PyMethodDef g_methods[] = {
    {"order_blocks", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(order_blocks_py)), METH_FASTCALL,
     "order_blocks(device, stream_id, reads, writes) -> bool: order_after_writers by storage address"},
    {"settle_writes", settle_writes_py, METH_NOARGS,
     "settle_writes(): this thread's marked writes are enqueued (stream_order.h)"},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

PyMethodDef* stream_order_methods() {
  return g_methods;
}

uint64_t stream_waits() noexcept {
  return g_waits.load(std::memory_order_relaxed);
}

void note_unsettled_write(CachingAllocator& allocator, uint64_t base, c10::StreamId writer) {
  t_unsettled.push_back({&allocator, base, writer});
}

void settle_writes() noexcept {
  for (const Unsettled& write : t_unsettled) {
    write.allocator->write_settled(write.base, write.writer);
  }
  t_unsettled.clear();
}

bool cross_stream_tracking() noexcept {
  return (switches() & kCrossStream) != 0;
}

void order_after_writers(c10::DeviceIndex device, const StreamRef& stream, c10::ArrayRef<c10::IValue> inputs,
                         c10::ArrayRef<at::Tensor> outputs) {
  settle_writes();            // the writes of this thread's earlier calls (Python's marks) are enqueued
  CachingAllocator& allocator = allocator_of(device);
  Waits waits;
  for (const c10::IValue& value : inputs) {
    use_value(allocator, stream, value, waits);
  }
  for (const at::Tensor& t : outputs) {
    use(allocator, stream, t, true, waits);
  }
  wait_for_writers(device, allocator, stream, waits);
}

void order_after_writers_at(c10::DeviceIndex device, const StreamRef& stream, c10::ArrayRef<uint64_t> reads,
                            c10::ArrayRef<uint64_t> writes) {
  settle_writes();
  CachingAllocator& allocator = allocator_of(device);
  Waits waits;
  for (const uint64_t base : reads) {
    use_base(allocator, stream, base, false, waits);
  }
  for (const uint64_t base : writes) {
    use_base(allocator, stream, base, true, waits);
  }
  wait_for_writers(device, allocator, stream, waits);
}

}  // namespace fl_bridge
