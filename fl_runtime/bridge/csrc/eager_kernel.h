// The PrivateUse1 kernel of every op of the kernel table, in C++: a call whose signature has
// a recorded launch program runs here without Python - key from the stack (call_key.h),
// program from the op's table (program_table.h), outputs from the device allocator, the
// template patched (launch_program.h), the vendor's launch_kernel on the thread's current
// stream; the GIL is never taken on that path.  Everything else goes to the op's Python
// kernel (ops/eager/launcher.py), which also records the programs this side then serves
// (docs/users/native-bridge.md "Eager ops").
#pragma once

#include <Python.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <ATen/core/stack.h>
#include <c10/core/Device.h>
#include <torch/library.h>

#include "vendor_api.h"

namespace fl_bridge {

// The Python half: `launch_failure(name, device, status)` raises what ops/eager/launcher.py raises
// for a failed launch; `default_streams` holds each device's default fl_stream (as an int).
void configure_eager(PyObject* launch_failure, PyObject* default_streams);

// An int return that is an argument's size (the overrideable attention forward's max_q and
// max_k, which no kernel argument can carry): return `output` is argument `argument`'s size at
// `dim` (negative from the end).
struct SizeReturn {
  size_t output;
  size_t argument;
  int64_t dim;
};

// Registers the kernel of aten op `name` ("add.Tensor"): `kernel(*args, **kwargs)` is its
// Python kernel, `program_of(args, kwargs)` the launch program spec the last call recorded
// for that signature, or None; `sizes` its int returns, which a program leaves empty.
void register_eager_op(const std::string& name, PyObject* kernel, PyObject* program_of,
                       std::vector<SizeReturn> sizes = {});

// A C++ step the kernel of op `name` tries before its key and programs (after the switches, so
// never while a profile, cross-stream tracking, held inputs, a capture or a fork's child sends
// calls to Python): true means it served the call and left the op's result on the stack;
// false, that it did nothing.  copy_ uses it for the copies to and from the host
// (host_copies.h), which have no launch program.  `name` must be registered already.
using EagerShortcut = bool (*)(c10::ArrayRef<c10::IValue> arguments, torch::jit::Stack* stack);
void set_eager_shortcut(const std::string& name, EagerShortcut shortcut);

// A new {name: calls} dict (take_counts' answers) that `fill` fills with add_count; nullptr with
// a Python error set when `fill` returns false.
PyObject* counts_dict(const std::function<bool(PyObject*)>& fill);
// counts[name] += calls in a {name: int} dict (take_counts' answers); false with a Python error set.
bool add_count(PyObject* counts, const std::string& name, uint64_t calls);

// The process's `aten` IMPL library for PrivateUse1, which every C++ kernel registers in.
torch::Library& private_use1_library();

// A metadata-only view (view, as_strided ...): PyTorch's CPU kernel, which reads no data.
void register_view(const std::string& name);

// Python methods: register_eager_op, register_view, configure_eager, set_switch,
// set_kernel_epoch, take_counts, eager_stats (module.cpp adds them to the module).
PyMethodDef* eager_methods();

} // namespace fl_bridge
