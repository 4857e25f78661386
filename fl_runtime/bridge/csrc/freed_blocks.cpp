#include "freed_blocks.h"

#include <atomic>
#include <new>

namespace fl_bridge {
namespace {

std::atomic<FreedBlock*> g_freed{nullptr};
std::atomic<int64_t> g_live{0};

} // namespace

FreedBlock* hold_block(PyObject* token) {
  auto* block = new FreedBlock{token, nullptr};
  Py_INCREF(token);
  g_live.fetch_add(1, std::memory_order_relaxed);
  return block;
}

void push_freed(void* context) noexcept {
  auto* block = static_cast<FreedBlock*>(context);
  FreedBlock* head = g_freed.load(std::memory_order_relaxed);
  do {
    block->next = head;
  } while (!g_freed.compare_exchange_weak(head, block, std::memory_order_release, std::memory_order_relaxed));
}

int64_t collect_freed() {
  if (g_freed.load(std::memory_order_relaxed) == nullptr) {
    return 0;
  }
  FreedBlock* block = g_freed.exchange(nullptr, std::memory_order_acquire);
  int64_t count = 0;
  while (block != nullptr) {
    FreedBlock* next = block->next;
    PyObject* token = block->token;
    delete block;
    if (PyTuple_Check(token) && PyTuple_GET_SIZE(token) == 2) {
      PyObject* done = PyObject_CallOneArg(PyTuple_GET_ITEM(token, 0), PyTuple_GET_ITEM(token, 1));
      if (done == nullptr) {        // a release failing must not keep the other blocks
        PyErr_WriteUnraisable(token);
      }
      Py_XDECREF(done);
    }
    Py_DECREF(token);
    g_live.fetch_sub(1, std::memory_order_relaxed);
    ++count;
    block = next;
  }
  return count;
}

int64_t live_blocks() noexcept {
  return g_live.load(std::memory_order_relaxed);
}

} // namespace fl_bridge
