#include "generator.h"

#include <cstring>
#include <deque>
#include <mutex>

#include <ATen/EmptyTensor.h>
#include <ATen/core/TensorBase.h>

#include "thread_state.h"

namespace fl_bridge {
namespace {

constexpr size_t kStateBytes = 2 * sizeof(uint64_t);
constexpr uint64_t kSeedMask = 0x7FFFFFFFFFFFFFFFull;   // kernels take the seed as an int64

} // namespace

Generator::Generator(c10::DeviceIndex device, uint64_t seed)
    : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, device),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      seed_(seed) {}

void Generator::set_current_seed(uint64_t seed) {
  seed_ = seed;
  offset_ = 0;
}

uint64_t Generator::current_seed() const {
  return seed_;
}

uint64_t Generator::seed() {
  const uint64_t random = c10::detail::getNonDeterministicRandom();
  set_current_seed(random);
  return random;
}

void Generator::set_offset(uint64_t offset) {
  TORCH_CHECK(offset % 4 == 0, "fl generators advance in steps of 4 (one Philox round); offset ", offset,
              " is not a multiple of 4");
  offset_ = offset;
}

uint64_t Generator::get_offset() const {
  return offset_;
}

c10::intrusive_ptr<c10::TensorImpl> Generator::get_state() const {
  at::TensorBase state = at::detail::empty_cpu({static_cast<int64_t>(kStateBytes)}, at::kByte, /*pin_memory=*/false,
                                                std::nullopt);
  auto* bytes = state.data_ptr<uint8_t>();
  std::memcpy(bytes, &seed_, sizeof(uint64_t));
  std::memcpy(bytes + sizeof(uint64_t), &offset_, sizeof(uint64_t));
  return state.getIntrusivePtr();
}

void Generator::set_state(const c10::TensorImpl& new_state) {
  TORCH_CHECK_TYPE(new_state.dtype() == caffe2::TypeMeta::Make<uint8_t>() && new_state.is_cpu() &&
                       new_state.is_contiguous(),
                   "an fl generator's state is a contiguous CPU torch.uint8 tensor (get_state() gives one)");
  TORCH_CHECK(new_state.numel() == static_cast<int64_t>(kStateBytes), "an fl generator's state has ",
              kStateBytes, " bytes (seed, offset), got ", new_state.numel());
  uint64_t seed = 0, offset = 0;
  const auto* bytes = static_cast<const uint8_t*>(new_state.data());
  std::memcpy(&seed, bytes, sizeof(uint64_t));
  std::memcpy(&offset, bytes + sizeof(uint64_t), sizeof(uint64_t));
  seed_ = seed;
  offset_ = offset;
}

std::pair<int64_t, int64_t> Generator::reserve(uint64_t numel) {
  const uint64_t offset = offset_;
  offset_ = offset + (numel + 3) / 4 * 4;
  return {static_cast<int64_t>(seed_ & kSeedMask), static_cast<int64_t>(offset)};
}

Generator* Generator::clone_impl() const {
  auto* copy = new Generator(device_.index(), seed_);
  copy->offset_ = offset_;
  return copy;
}

const at::Generator& default_generator(c10::DeviceIndex device) {
  static std::mutex lock;
  static std::deque<at::Generator> generators;    // a deque: references stay valid as it grows
  const auto index = static_cast<size_t>(resolve(device));
  std::lock_guard<std::mutex> guard(lock);
  while (generators.size() <= index) {
    generators.push_back(at::make_generator<Generator>(static_cast<c10::DeviceIndex>(generators.size()),
                                                       kDefaultSeed));
  }
  return generators[index];
}

at::Generator new_generator(c10::DeviceIndex device) {
  return at::make_generator<Generator>(resolve(device), kDefaultSeed);
}

} // namespace fl_bridge
