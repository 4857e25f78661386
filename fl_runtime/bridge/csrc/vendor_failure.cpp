#include "vendor_failure.h"

#include <c10/util/Exception.h>

#include "python_calls.h"

namespace fl_bridge {
namespace {

PyObject* g_handler = nullptr;

}  // namespace

void set_vendor_failure_handler(PyObject* raise_failure) {
  Py_INCREF(raise_failure);
  Py_XSETREF(g_handler, raise_failure);
}

void raise_vendor_failure(c10::DeviceIndex device, const VendorFailure& failure) {
  {
    Gil gil;
    if (g_handler != nullptr) {
      PyObject* result = PyObject_CallFunction(g_handler, "iis", static_cast<int>(device),
                                               static_cast<int>(failure.status), failure.call.c_str());
      Py_XDECREF(result);
      if (result == nullptr) {
        throw_python_error();
      }
    }
  }
  TORCH_CHECK(false, failure.call, " on fl:", static_cast<int>(device), " failed with status ",
              static_cast<int>(failure.status));
}

}  // namespace fl_bridge
