#include "fork_handlers.h"

#include <pthread.h>

#include <mutex>

#include <c10/util/Exception.h>

#include "caching_allocator.h"
#include "fast_path_switches.h"

namespace fl_bridge {
namespace {

void before_fork() {
  lock_allocators_for_fork();
}

void after_fork_in_parent() {
  unlock_allocators_after_fork();
}

void after_fork_in_child() {
  unlock_allocators_after_fork();
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
