// Copies between the host and an fl device, in C++: the common cases of copy_ and `.item()`
// (aten::_local_scalar_dense) that the Python route (fl_runtime/ops/owned/copies.py) serves
// with one vendor memcpy, made here with the same vendor calls, in the same order, on the same
// stream, and without the GIL (docs/users/native-bridge.md "Eager ops"):
//  - device to host (`.cpu()`, `.item()`, copy_ into a CPU tensor): copies.py _raw_d2h, i.e.
//    memcpy_d2h_async on the current stream, then stream_synchronize (Stream.synchronize);
//  - host to device, small (up to copies.py STAGE_BYTES, passed from Python): the source is
//    staged in a host buffer the runtime owns, memcpy_h2d_async, and the buffer kept until the
//    device has read it (pending_uploads.h), without waiting for the stream; the caller may
//    change its tensor as soon as copy_ returns.
// Only a pair the Python route copies as raw bytes is served: same dtype and shape, both
// contiguous and strided, no conjugate/negative bit, at least one element, on the thread's
// current stream for the device (stream_registry.h).  With cross-stream tracking on, each copy
// is first ordered after the writers of what it reads or writes on other streams, as
// runtime.order_after_writers does (stream_order.h).  Everything else (larger, converting,
// strided, broadcasting copies, across devices) stays in Python.
// The Python route records no op_stats path for these copies, and neither does this file; a
// profile sends them to Python (kHooked), which times them.
// A vendor error status raises what the Python route raises (plugin.check's VendorError): the
// one call into Python, on the error path only.
#pragma once

#include <Python.h>

#include <cstdint>

namespace fl_bridge {

// Python methods: configure_host_copies(stage_bytes, failure), set_upload_limits(copies,
// host_bytes), hold_upload(device, stream handle, host tensor), register_local_scalar_dense(kernel),
// pending_uploads(device) (module.cpp adds them).
PyMethodDef* host_copy_methods();

// Calls the _local_scalar_dense kernel handed to Python (part of eager_stats()'s python_calls).
uint64_t local_scalar_python_calls() noexcept;

}  // namespace fl_bridge
