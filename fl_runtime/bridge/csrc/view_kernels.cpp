#include "view_kernels.h"

#include <ATen/ops/_reshape_alias_ops.h>
#include <ATen/ops/alias_ops.h>
#include <ATen/ops/as_strided_ops.h>
#include <ATen/ops/unfold_ops.h>
#include <ATen/ops/view_ops.h>

namespace fl_bridge {
namespace {

const c10::DispatchKeySet kCpu(c10::DispatchKey::CPU);

at::Tensor view(const at::Tensor& self, c10::SymIntArrayRef size) {
  return at::_ops::view::redispatch(kCpu, self, size);
}

at::Tensor as_strided(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride,
                      std::optional<c10::SymInt> storage_offset) {
  return at::_ops::as_strided::redispatch(kCpu, self, size, stride, std::move(storage_offset));
}

at::Tensor reshape_alias(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  return at::_ops::_reshape_alias::redispatch(kCpu, self, size, stride);
}

at::Tensor unfold(const at::Tensor& self, int64_t dimension, int64_t size, int64_t step) {
  return at::_ops::unfold::redispatch(kCpu, self, dimension, size, step);
}

at::Tensor alias(const at::Tensor& self) {
  return at::_ops::alias::redispatch(kCpu, self);
}

} // namespace

bool register_unboxed_view(torch::Library& library, const std::string& name) {
  if (name == "view") {
    library.impl("view", TORCH_FN(view));
  } else if (name == "as_strided") {
    library.impl("as_strided", TORCH_FN(as_strided));
  } else if (name == "_reshape_alias") {
    library.impl("_reshape_alias", TORCH_FN(reshape_alias));
  } else if (name == "unfold") {
    library.impl("unfold", TORCH_FN(unfold));
  } else if (name == "alias") {
    library.impl("alias", TORCH_FN(alias));
  } else {
    return false;
  }
  return true;
}

} // namespace fl_bridge
