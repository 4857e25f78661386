// A vendor call the bridge made itself (host copies, uploads, cross-stream waits) that failed,
// and how it is raised: as the runtime's plugin.check raises it for the same call on the Python
// route (a VendorError with the plugin's message, read on the failing thread: fl_abi.h ERRORS
// keeps it per thread until that thread's next failing call).
#pragma once

#include <Python.h>

#include <string>

#include <c10/core/Device.h>

#include "vendor_api.h"

namespace fl_bridge {

// status FL_SUCCESS: nothing failed.  Raised by the caller once it holds no lock.
struct VendorFailure {
  fl_status status = FL_SUCCESS;
  std::string call;
  bool failed() const noexcept { return status != FL_SUCCESS; }
};

// `raise_failure(device, status, call)` (ops/owned/copies.py _native_copy_failure): set once,
// when the host copies are configured, before any call can fail.
void set_vendor_failure_handler(PyObject* raise_failure);

// Raises `failure` of fl:device through the handler (the GIL taken for it).
[[noreturn]] void raise_vendor_failure(c10::DeviceIndex device, const VendorFailure& failure);

}  // namespace fl_bridge
