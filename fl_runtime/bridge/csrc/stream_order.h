// The order between streams of the calls the bridge serves itself: the C++ twin of
// runtime.order_after_writers (fl_runtime/runtime.py; docs/users/devices.md "Streams and events").  Once
// a second stream exists the runtime tracks, per block, the stream that last wrote it and
// the streams that used it (caching_allocator.h Block); work enqueued on a stream that
// touches a block another stream wrote first waits for that stream's work so far (an event
// recorded there), so a kernel or copy never reads a value still being written elsewhere.
// Once per write: a stream that has waited for a block's last write does not wait for it again
// until the next one (the Python route waits on every call; the results are the same).  A write
// is marked before its work is enqueued, so a reader on another thread could wait, in between,
// for an event that does not cover it; such a "caught up" must not outlive the enqueue.  So the
// writer settles its marks once the work is enqueued (settle_writes): each settle, like each
// mark, moves the block's write version and forgets who caught up, and a reader notes itself
// caught up only if the version did not move since it looked.  A racy read (no sync between
// the threads, as on CUDA) can then be stale for that one call, never for later ones.
// Until a second stream exists (fast_path_switches.h kCrossStream off) there is nothing to do.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <c10/util/ArrayRef.h>

#include "stream_registry.h"

namespace fl_bridge {

class CachingAllocator;

// Whether writes are tracked per stream (the runtime's note_cross_stream has been heard).
bool cross_stream_tracking() noexcept;

// Before work on `stream` of `device` that reads the fl tensors in `inputs` (tensors and
// tensor lists; other devices' and the host's are skipped) and writes `outputs`: waits for
// the other streams that wrote them, records `stream` as their user and as the outputs'
// writer.  A failed vendor call raises the runtime's VendorError (vendor_failure.h).
void order_after_writers(c10::DeviceIndex device, const StreamRef& stream, c10::ArrayRef<c10::IValue> inputs,
                         c10::ArrayRef<at::Tensor> outputs);

// The same for a graph replay (ops/graph/graph_capture.py), which knows the storage addresses
// its recorded launches read and write, not tensors.
void order_after_writers_at(c10::DeviceIndex device, const StreamRef& stream, c10::ArrayRef<uint64_t> reads,
                            c10::ArrayRef<uint64_t> writes);

// The writes this thread marked (order_after_writers* outputs, the runtime's set_writer) are
// enqueued: called after a launch or copy, and before the thread's next ordering (a mark whose
// work was never enqueued settles harmlessly: a stream waits once more than needed).
void settle_writes() noexcept;

// A write the runtime marked from Python (memory_methods.h set_writer), settled like the others.
void note_unsettled_write(CachingAllocator& allocator, uint64_t base, c10::StreamId writer);

// Waits enqueued so far (eager_stats' stream_waits).
uint64_t stream_waits() noexcept;

// order_blocks(device, stream_id, reads, writes) -> bool (False: a stream the bridge does not know);
// settle_writes().
PyMethodDef* stream_order_methods();

}  // namespace fl_bridge
