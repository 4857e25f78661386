// The module functions through which the Python runtime uses the device allocators
// (caching_allocator.h): fl_runtime/devices/allocator.py NativeAllocator is their one caller.
//
//   install_allocators([(api_address, local_index, alignment, total_memory, limit), ...])
//   alloc(device, rounded, requested, stream_id) -> address
//   free(device, address) -> bool                 False: not a live block
//   record_stream(device, address, stream_id, stream_handle) -> bool
//   block_info(device, address) -> (size, stream_id, writer_id, (used_by ids)) or None
//   set_writer(device, address, stream_id) -> bool
//   holds(device, address) -> bool
//   take_cached(device) -> [token]               release_taken(device, [token])
//   figures(device) -> dict                      reset_peaks(device) / reset_accumulated(device)
//   set_limit(device, bytes)                     blocks(device) -> [(address, size, requested, stream, state)]
//   streams_in_use(device) -> [stream_id]        set_memory_history(bool)
//   copy_data(dest, src, nbytes)                 the registered c10 allocator's copy_data
#pragma once

#include <Python.h>

namespace fl_bridge {

// Adds the functions above to `module`; -1 with a Python error on failure.
int add_memory_methods(PyObject* module);

}  // namespace fl_bridge
