#include "hooks.h"

#include <algorithm>

#include <ATen/core/Tensor.h>
#include <ATen/ops/copy.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include "device_allocator.h"
#include "generator.h"
#include "host_allocator.h"
#include "python_calls.h"
#include "thread_state.h"

namespace fl_bridge {
namespace {

constexpr c10::DeviceType kFl = c10::DeviceType::PrivateUse1;

// The first `nbytes` of `storage` as a 1-d uint8 fl tensor (no autograd: a runtime copy).
at::Tensor bytes_of(const c10::Storage& storage, size_t nbytes) {
  auto tensor = at::detail::make_tensor<c10::TensorImpl>(c10::Storage(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                                         caffe2::TypeMeta::Make<uint8_t>());
  tensor.unsafeGetTensorImpl()->set_sizes_contiguous({static_cast<int64_t>(nbytes)});
  return tensor;
}

} // namespace

bool Hooks::isBuilt() const {
  return true;
}

bool Hooks::isAvailable() const {
  return device_count() > 0;
}

bool Hooks::hasPrimaryContext(c10::DeviceIndex device_index) const {
  return device_index >= 0 && device_index < device_count();
}

void Hooks::init() const {}      // the runtime started before the bridge was installed

c10::DeviceIndex Hooks::deviceCount() const {
  return device_count();
}

void Hooks::setCurrentDevice(c10::DeviceIndex device) const {
  set_current_device(device);
}

c10::DeviceIndex Hooks::getCurrentDevice() const {
  return current_device();
}

c10::DeviceIndex Hooks::exchangeDevice(c10::DeviceIndex device) const {
  const auto previous = current_device();
  if (device >= 0) {
    set_current_device(device);
  }
  return previous;
}

c10::DeviceIndex Hooks::maybeExchangeDevice(c10::DeviceIndex device) const {
  const auto previous = current_device();
  if (device >= 0 && device < device_count()) {
    set_current_device(device);
  }
  return previous;
}

const at::Generator& Hooks::getDefaultGenerator(c10::DeviceIndex device_index) const {
  return default_generator(device_index);
}

at::Generator Hooks::getNewGenerator(c10::DeviceIndex device_index) const {
  return new_generator(device_index);
}

bool Hooks::isPinnedPtr(const void* data) const {
  return data != nullptr && host_allocator().owns(data);
}

at::Allocator* Hooks::getPinnedMemoryAllocator() const {
  return &host_allocator();
}

at::Device Hooks::getDeviceFromPtr(void* data) const {
  const auto device = call_int("device_of_pointer", "(K)",
                               static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(data)));
  TORCH_CHECK(device >= 0, "fl: address ", data, " lies in no live block of any fl device");
  return {kFl, static_cast<c10::DeviceIndex>(device)};
}

// PyTorch's CPU refuses to resize a storage that is not resizable.  Every fl storage the
// runtime makes arrives through DLPack, which PyTorch marks not resizable although the
// storage owns its block (its deleter returns it): those resize.  A storage that borrows
// memory it does not own (a DataPtr without a deleter, as
// torch._C._construct_storage_from_data_pointer makes) is refused, as on the CPU.
static bool may_resize(const c10::StorageImpl& impl) {
  return impl.resizable() || impl.data() == nullptr ||
         impl.data_ptr().get_deleter() != &c10::detail::deleteNothing;
}

void Hooks::resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const {
  auto* impl = storage.unsafeGetStorageImpl();
  TORCH_CHECK(may_resize(*impl), "Trying to resize storage that is not resizable");
  const size_t oldsize = impl->nbytes();
  const c10::DeviceIndex device = resolve(impl->device().index());
  c10::Storage fresh(c10::Storage::use_byte_size_t(), newsize, allocate_on(device, newsize), &device_allocator(),
                     /*resizable=*/true);
  const size_t kept = std::min(oldsize, newsize);
  if (kept > 0) {
    c10::impl::ExcludeDispatchKeyGuard no_autograd(c10::autograd_dispatch_keyset);
    bytes_of(fresh, kept).copy_(bytes_of(storage, kept));
  }
  impl->set_data_ptr_noswap(fresh.unsafeGetStorageImpl()->set_data_ptr(c10::DataPtr(nullptr, c10::Device(kFl, device))));
  impl->set_nbytes(newsize);
  impl->set_allocator(&device_allocator());      // its bytes are the bridge allocator's now
  impl->set_resizable(true);
}

Hooks& hooks() {
  static Hooks instance;
  return instance;
}

} // namespace fl_bridge
