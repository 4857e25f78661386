// Device blocks PyTorch has let go of, on their way back to the runtime's caching allocator.
//
// A DataPtr's deleter runs wherever PyTorch drops the last reference: any thread, with or
// without the GIL, while an exception unwinds, during interpreter teardown.  It must not
// enter Python there, so it only pushes the block's token onto a lock-free stack (no lock: a
// fork() at any moment leaves none held); collect(), called by the allocator with the GIL
// held before it allocates or reports (fl_runtime/devices/storage.py collect_freed), runs
// each token's release.  The same rule as the DLPack deleter of devices/_dltensor.c.
#pragma once

#include <Python.h>

#include <cstdint>

namespace fl_bridge {

// The DataPtr context of one device block: the runtime's (release, block) token.
struct FreedBlock {
  PyObject* token;      // a strong reference, dropped by collect()
  FreedBlock* next;
};

// Takes a reference to `token` (the GIL is held); the result is a DataPtr context.
FreedBlock* hold_block(PyObject* token);

// The DataPtr deleter: any thread, no GIL.
void push_freed(void* context) noexcept;

// Runs release(block) for every block pushed since the last call; the GIL is held.
// Returns how many it released; a release that raises is reported and the rest still run.
int64_t collect_freed();

// Blocks handed out by hold_block and not yet collected (the exit report).
int64_t live_blocks() noexcept;

} // namespace fl_bridge
