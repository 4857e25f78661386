// What fork() does to the bridge's native state.  fork() copies one thread, and every mutex
// in the state it had: a device allocator's mutex another thread held mid-update stays held
// in the child for ever, and the child's first free (collecting an inherited fl tensor) or
// allocation would hang.  The handlers here make the child's state consistent:
//  - before the fork, the forking thread takes every device allocator's mutex (in device
//    order: no thread holds two, caching_allocator.h), and before them every upload holder's
//    (pending_uploads.h), so no update is half done; after it, parent and child each give
//    them back;
//  - in the child, the C++ steady state is switched off (fast_path_switches.h kDisabled): every
//    fl op then takes its Python kernel, which raises FLBadForkError as the fork policy says
//    (fl_runtime/integration/fork.py, docs/users/devices.md): the driver state a C++ launch
//    would use is not valid there;
//  - in the child, the upload holders stop querying their events (pending_uploads.h): a lock
//    inside the vendor that another thread of the parent held at the fork stays held there.
// PyTorch's CUDA side only marks such a child bad (torch/csrc/cuda/Module.cpp, a child
// handler of pthread_atfork); its allocator is not reached there.  Ours is: the child still
// frees the fl tensors it inherited.
#pragma once

namespace fl_bridge {

// Registers the handlers (pthread_atfork), once; after the device allocators are installed.
void register_fork_handlers();

}  // namespace fl_bridge
