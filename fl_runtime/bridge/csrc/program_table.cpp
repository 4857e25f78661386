#include "program_table.h"

namespace fl_bridge {

const ProgramEntry* ProgramTable::find(const std::string& key, size_t hash) const noexcept {
  for (size_t i = 0; i < kCapacity; i++) {
    const ProgramEntry* entry = slots_[(hash + i) % kCapacity].load(std::memory_order_acquire);
    if (entry == nullptr) {
      return nullptr;
    }
    if (entry->hash == hash && entry->key == key) {
      return entry;
    }
  }
  return nullptr;
}

const ProgramEntry* ProgramTable::put(std::string key, size_t hash, std::unique_ptr<const LaunchProgram> program) {
  std::lock_guard<std::mutex> lock(write_);
  for (size_t i = 0; i < kCapacity; i++) {
    auto& slot = slots_[(hash + i) % kCapacity];
    const ProgramEntry* old = slot.load(std::memory_order_relaxed);
    if (old != nullptr && (old->hash != hash || old->key != key)) {
      continue;
    }
    if (old == nullptr && used_ >= kCapacity / 2) {
      return nullptr;
    }
    auto* entry = new ProgramEntry{std::move(key), hash, std::move(program)};
    slot.store(entry, std::memory_order_release);
    if (old == nullptr) {
      used_++;
    } else {
      retired_.push_back(old);
    }
    return entry;
  }
  return nullptr;
}

} // namespace fl_bridge
