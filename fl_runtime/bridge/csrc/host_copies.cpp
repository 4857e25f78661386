#include "host_copies.h"

#include <atomic>
#include <cstring>
#include <memory>
#include <string>

#include <ATen/ATen.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/library.h>

#include "caching_allocator.h"
#include "eager_kernel.h"
#include "stream_order.h"
#include "stream_registry.h"
#include "fast_path_switches.h"
#include "pending_uploads.h"
#include "python_calls.h"
#include "python_ints.h"
#include "python_kernel.h"
#include "thread_state.h"

namespace fl_bridge {
namespace {

constexpr c10::DeviceType kFl = c10::DeviceType::PrivateUse1;

std::atomic<uint64_t> g_stage_bytes{0};        // copies.py STAGE_BYTES; 0 until configured
std::atomic<bool> g_configured{false};
std::atomic<uint64_t> g_scalar_python_calls{0};

std::string memcpy_call(const char* name, c10::DeviceIndex device, uint64_t nbytes) {
  return std::string(name) + "(fl:" + std::to_string(device) + ", " + std::to_string(nbytes) + " bytes)";
}

// The stream the Python route would use for `device` (rt.streams.current): the thread's
// current one, when the bridge knows it; an empty ref sends the copy to Python.
StreamRef served_stream(c10::DeviceIndex device) {
  if (!g_configured.load(std::memory_order_acquire) || device < 0 || device >= device_count()) {
    return StreamRef();
  }
  return current_stream_of(device);
}

bool plain(const at::Tensor& t) {
  return t.defined() && t.has_storage() && t.layout() == c10::kStrided && !t.is_conj() && !t.is_neg() &&
         t.is_contiguous();
}

// A pair copies.py moves as raw bytes in one memcpy (the header's list).
bool raw_pair(const at::Tensor& dst, const at::Tensor& src) {
  return plain(dst) && plain(src) && dst.scalar_type() == src.scalar_type() && dst.sizes() == src.sizes() &&
         dst.numel() > 0;
}

uint64_t device_address(const at::Tensor& t) {
  return reinterpret_cast<uintptr_t>(t.storage().data());
}

uint64_t byte_offset(const at::Tensor& t) {
  return static_cast<uint64_t>(t.storage_offset()) * t.itemsize();
}

// copies.py _raw_d2h: src's bytes into `host`, then the stream waited for.  False: not served.
bool download(const at::Tensor& src, void* host, uint64_t nbytes) {
  const c10::DeviceIndex device = src.device().index();
  const StreamRef served = served_stream(device);
  if (!served) {
    return false;
  }
  if (cross_stream_tracking()) {        // copies.py _raw_d2h: after src's writers
    const c10::IValue input(src);
    order_after_writers(device, served, c10::ArrayRef<c10::IValue>(&input, 1), {});
  }
  const fl_stream stream = served.handle();
  const fl_api* api = allocator_of(device).vendor().api;
  fl_status status = api->memcpy_d2h_async(stream, host, device_address(src), byte_offset(src), nbytes);
  if (status != FL_SUCCESS) {
    raise_vendor_failure(device, {status, memcpy_call("memcpy_d2h_async", device, nbytes)});
  }
  status = api->stream_synchronize(stream);
  if (status != FL_SUCCESS) {
    raise_vendor_failure(device, {status, "stream_synchronize(fl:" + std::to_string(device) + ")"});
  }
  return true;
}

// copies.py _host_to_device for a small source: staged (a host copy the runtime owns), then
// _raw_h2d(owned=True): memcpy_h2d_async and the stage held until the device has read it.
bool upload(const at::Tensor& dst, const at::Tensor& src) {
  const uint64_t nbytes = src.nbytes();
  if (nbytes > g_stage_bytes.load(std::memory_order_relaxed)) {
    return false;         // the Python route reads the caller's buffer and waits for the stream
  }
  const c10::DeviceIndex device = dst.device().index();
  const StreamRef served = served_stream(device);
  if (!served || !pending_uploads_configured()) {
    return false;
  }
  if (cross_stream_tracking()) {        // copies.py _raw_h2d: after dst's other writers
    order_after_writers(device, served, {}, c10::ArrayRef<at::Tensor>(&dst, 1));
  }
  const fl_stream stream = served.handle();
  const VendorDevice& vendor = allocator_of(device).vendor();
  std::unique_ptr<unsigned char[]> stage(new unsigned char[nbytes]);
  std::memcpy(stage.get(), src.const_data_ptr(), nbytes);
  const fl_status status =
      vendor.api->memcpy_h2d_async(stream, device_address(dst), byte_offset(dst), stage.get(), nbytes);
  settle_writes();                      // dst's write is enqueued (stream_order.h "Once per write")
  if (status != FL_SUCCESS) {
    raise_vendor_failure(device, {status, memcpy_call("memcpy_h2d_async", device, nbytes)});
  }
  const VendorFailure failure = hold_upload(device, vendor, stream, HeldBuffer{std::move(stage), {}}, nbytes);
  if (failure.failed()) {
    raise_vendor_failure(device, failure);
  }
  return true;
}

// copy_(Tensor(a!) self, Tensor src, bool non_blocking) -> Tensor(a!): the eager kernel's
// shortcut (eager_kernel.h).  non_blocking changes nothing here, as in copies.py's copy_.
bool copy_shortcut(c10::ArrayRef<c10::IValue> arguments, torch::jit::Stack* stack) {
  if (arguments.size() != 3 || !arguments[0].isTensor() || !arguments[1].isTensor()) {
    return false;
  }
  const at::Tensor& dst = arguments[0].toTensor();
  const at::Tensor& src = arguments[1].toTensor();
  if (!raw_pair(dst, src)) {
    return false;
  }
  bool served = false;
  if (src.is_cpu() && dst.device().type() == kFl) {
    served = upload(dst, src);
  } else if (dst.is_cpu() && src.device().type() == kFl) {
    served = download(src, dst.mutable_data_ptr(), dst.nbytes());
  }
  if (served) {
    at::Tensor result = dst;
    torch::jit::drop(*stack, arguments.size());
    stack->emplace_back(std::move(result));
  }
  return served;
}

// aten::_local_scalar_dense (`.item()`): factories.py local_scalar_dense's copy_to_host of the one
// element, then the CPU's own item() of it, so every dtype gives the Scalar the Python route gives.
class LocalScalarKernel final : public c10::OperatorKernel {
 public:
  explicit LocalScalarKernel(PyObject* kernel) : kernel_(kernel) { Py_INCREF(kernel_); }

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
    const at::Tensor self = stack->back().toTensor();
    if (python_switches() == 0 && self.device().type() == kFl && self.numel() == 1 && plain(self)) {
      at::Tensor host = at::empty({}, self.options().device(c10::kCPU));
      if (download(self, host.mutable_data_ptr(), self.itemsize())) {
        c10::Scalar value = host.item();
        torch::jit::drop(*stack, 1);
        stack->emplace_back(std::move(value));
        return;
      }
    }
    g_scalar_python_calls.fetch_add(1, std::memory_order_relaxed);
    call_python_kernel(kernel_, op, stack);
  }

 private:
  PyObject* kernel_;
};

PyObject* configure_host_copies_py(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  TORCH_CHECK_TYPE(nargs == 2, "configure_host_copies(stage_bytes, failure)");
  const uint64_t stage_bytes = u64_arg(args[0]);
  set_vendor_failure_handler(args[1]);
  g_stage_bytes.store(stage_bytes, std::memory_order_relaxed);
  g_configured.store(true, std::memory_order_release);
  set_eager_shortcut("copy_", &copy_shortcut);
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

PyObject* register_local_scalar_dense_py(PyObject*, PyObject* kernel) {
  HANDLE_TH_ERRORS
  private_use1_library().impl("_local_scalar_dense", torch::CppFunction::makeFromBoxedFunctor(
                                                         std::make_unique<LocalScalarKernel>(kernel)));
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

PyObject* set_upload_limits_py(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  TORCH_CHECK_TYPE(nargs == 2, "set_upload_limits(copies, host_bytes)");
  configure_pending_uploads(device_count(), UploadLimits{u64_arg(args[0]), u64_arg(args[1])});
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

// uploads.py PendingUploads.hold with the bridge: a host tensor the runtime owns, whose copy
// is enqueued on the stream with this handle, kept by the device's one holder.
PyObject* hold_upload_py(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  TORCH_CHECK_TYPE(nargs == 3 && THPVariable_Check(args[2]), "hold_upload(device, stream handle, host tensor)");
  const c10::DeviceIndex index = device_arg(args[0]);
  check_device(index);
  const auto stream = reinterpret_cast<fl_stream>(static_cast<uintptr_t>(u64_arg(args[1])));
  const at::Tensor& host = THPVariable_Unpack(args[2]);
  TORCH_CHECK_VALUE(host.device().is_cpu() && host.has_storage(), "hold_upload: a host tensor with storage, not ",
                    host.device());
  TORCH_CHECK(pending_uploads_configured(), "hold_upload: set_upload_limits first");
  const uint64_t nbytes = host.storage().nbytes();
  VendorFailure failure;
  {
    pybind11::gil_scoped_release no_gil;    // the holder's mutex is never waited for under the GIL
    failure = hold_upload(index, allocator_of(index).vendor(), stream, HeldBuffer{nullptr, host.storage()}, nbytes);
  }
  if (failure.failed()) {
    raise_vendor_failure(index, failure);
  }
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

PyObject* pending_uploads_py(PyObject*, PyObject* device) {
  HANDLE_TH_ERRORS
  const c10::DeviceIndex index = device_arg(device);
  check_device(index);
  const auto figures = pending_uploads(index, allocator_of(index).vendor());
  return Py_BuildValue("(KK)", static_cast<unsigned long long>(figures.first),
                       static_cast<unsigned long long>(figures.second));
  END_HANDLE_TH_ERRORS
}

PyMethodDef g_methods[] = {
    {"configure_host_copies", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(configure_host_copies_py)),
     METH_FASTCALL,
     "configure_host_copies(stage_bytes, failure): serve host<->device copy_ in C++"},
    {"set_upload_limits", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(set_upload_limits_py)),
     METH_FASTCALL, "set_upload_limits(copies, host_bytes): the upload holders' limits per device (made on first call)"},
    {"hold_upload", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(hold_upload_py)), METH_FASTCALL,
     "hold_upload(device, stream handle, host tensor): keep it until the copy enqueued on the stream is done"},
    {"register_local_scalar_dense", register_local_scalar_dense_py, METH_O,
     "register_local_scalar_dense(kernel): the C++ kernel of .item(), `kernel` its Python half"},
    {"pending_uploads", pending_uploads_py, METH_O,
     "pending_uploads(device) -> (copies, host bytes) the C++ uploads still hold"},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

PyMethodDef* host_copy_methods() {
  return g_methods;
}

uint64_t local_scalar_python_calls() noexcept {
  return g_scalar_python_calls.load(std::memory_order_relaxed);
}

}  // namespace fl_bridge
