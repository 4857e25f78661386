// Integer arguments of the bridge's Python methods (METH_O / METH_FASTCALL): read as C
// integers, a bad one rethrown as the Python error it raised (python_calls.h).
#pragma once

#include <Python.h>

#include <cstdint>
#include <vector>

namespace fl_bridge {

// A Python int as int64 (device indices, stream ids).
int64_t int_arg(PyObject* value);
// A Python int as uint64 (addresses, handles, byte counts).
uint64_t u64_arg(PyObject* value);
// A sequence of Python ints as uint64 (addresses).
std::vector<uint64_t> u64_list(PyObject* sequence);

}  // namespace fl_bridge
