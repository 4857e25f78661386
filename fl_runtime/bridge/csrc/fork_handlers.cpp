#include "fork_handlers.h"

#include <pthread.h>

#include <mutex>

#include <c10/util/Exception.h>

#include "caching_allocator.h"
#include "fast_path_switches.h"
#include "pending_uploads.h"
#include "stream_registry.h"

namespace fl_bridge {
namespace {

// Upload holders first: no thread takes an allocator's mutex while it holds one of theirs.  The
// stream maps' mutexes are held alone (a lookup only), so their place in the order is free.
void before_fork() {
  lock_streams_for_fork();
  lock_uploads_for_fork();
  lock_allocators_for_fork();
}

void after_fork_in_parent() {
  unlock_allocators_after_fork();
  unlock_uploads_after_fork();
  unlock_streams_after_fork();
}

void after_fork_in_child() {
  unlock_allocators_after_fork();
  unlock_uploads_after_fork();
  unlock_streams_after_fork();
  forget_vendor_in_forked_child();
  set_switch(kDisabled, true);
}

}  // namespace

void register_fork_handlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    const int failed = pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);
    TORCH_CHECK(failed == 0, "fl bridge: pthread_atfork failed (error ", failed, ")");
  });
}

}  // namespace fl_bridge
