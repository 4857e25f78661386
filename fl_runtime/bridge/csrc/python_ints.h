// Integer arguments of the bridge's Python methods (METH_O / METH_FASTCALL): read as C
// integers, a bad one rethrown as the Python error it raised (python_calls.h), so every
// method reads them here, inside HANDLE_TH_ERRORS.
#pragma once

#include <Python.h>

#include <cstdint>
#include <vector>

#include <c10/core/Device.h>

namespace fl_bridge {

// A Python int as int64 (device indices, stream ids).
int64_t int_arg(PyObject* value);
// A Python int as uint64 (addresses, handles, byte counts).
uint64_t u64_arg(PyObject* value);
// A Python int that is signed (stream ids, sizes) or an address above 2^63: its 64 bits.
int64_t word_arg(PyObject* value);
// A device index: IndexError past what c10::DeviceIndex holds (never wrapped onto another device).
c10::DeviceIndex device_arg(PyObject* value);
c10::DeviceIndex device_index(int64_t value);
// A sequence of Python ints as uint64 (addresses).
std::vector<uint64_t> u64_list(PyObject* sequence);

}  // namespace fl_bridge
