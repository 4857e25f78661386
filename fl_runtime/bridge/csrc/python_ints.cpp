#include "python_ints.h"

#include <limits>

#include <c10/util/Exception.h>

#include "python_calls.h"

namespace fl_bridge {

int64_t int_arg(PyObject* value) {
  const long long out = PyLong_AsLongLong(value);
  if (out == -1 && PyErr_Occurred()) {
    throw_python_error();
  }
  return out;
}

uint64_t u64_arg(PyObject* value) {
  const unsigned long long out = PyLong_AsUnsignedLongLong(value);
  if (out == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
    throw_python_error();
  }
  return out;
}

int64_t word_arg(PyObject* value) {
  const long long out = PyLong_AsLongLong(value);
  if (out != -1 || !PyErr_Occurred()) {
    return out;
  }
  PyErr_Clear();
  return static_cast<int64_t>(u64_arg(value));
}

c10::DeviceIndex device_index(int64_t value) {
  TORCH_CHECK_INDEX(value >= 0 && value <= std::numeric_limits<c10::DeviceIndex>::max(), "fl:", value,
                    " is not a device index");
  return static_cast<c10::DeviceIndex>(value);
}

c10::DeviceIndex device_arg(PyObject* value) {
  return device_index(int_arg(value));
}

std::vector<uint64_t> u64_list(PyObject* sequence) {
  PyObject* fast = PySequence_Fast(sequence, "expected a sequence of integers");
  if (fast == nullptr) {
    throw_python_error();
  }
  const Py_ssize_t count = PySequence_Fast_GET_SIZE(fast);
  std::vector<uint64_t> out;
  out.reserve(static_cast<size_t>(count));
  for (Py_ssize_t i = 0; i < count; ++i) {
    const unsigned long long value = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(fast, i));
    if (value == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
      Py_DECREF(fast);
      throw_python_error();
    }
    out.push_back(value);
  }
  Py_DECREF(fast);
  return out;
}

}  // namespace fl_bridge
