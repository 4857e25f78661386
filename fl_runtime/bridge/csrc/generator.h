// A random-number generator per fl device: torch.Generator(device="fl:N"), the default
// generator of each device (torch.manual_seed, torch.fl.manual_seed, get/set_rng_state), and
// the Generator argument of every random op.
//
// Its state is what the ABI's kernels draw from (fl_abi.h, "kernel calling convention"): a
// seed and a counter offset; a random kernel receives {seed, offset} and draws element i at
// counter offset + i, and the offset then advances past what it used (a multiple of 4, as
// Philox draws four numbers a round).  So random results depend only on the seed and the
// sequence of random ops, on every plugin.  get_state() is 16 bytes: the seed, then the
// offset, each a little-endian uint64 (CUDA's layout for its Philox generator).
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

#include <cstdint>
#include <utility>

namespace fl_bridge {

class Generator final : public c10::GeneratorImpl {
 public:
  explicit Generator(c10::DeviceIndex device, uint64_t seed);
  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }     // at::check_generator

  void set_current_seed(uint64_t seed) override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;

  // {seed, offset} for a kernel drawing `numel` numbers, reserving them (callers hold mutex_).
  std::pair<int64_t, int64_t> reserve(uint64_t numel);

 private:
  Generator* clone_impl() const override;

  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The seed every default generator starts from (the Python route's, so both agree).
constexpr uint64_t kDefaultSeed = 0;

// The default generator of fl:`device` (-1: the current device), made on first use.
const at::Generator& default_generator(c10::DeviceIndex device);
at::Generator new_generator(c10::DeviceIndex device);

} // namespace fl_bridge
