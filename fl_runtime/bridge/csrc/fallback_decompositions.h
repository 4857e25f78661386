// The PrivateUse1 kernels of the two ops a static-cache decode sends to the fallback chain on
// every step, aten::index_copy.out (StaticCache's key/value write: index_copy_ and index_copy
// reach fl as it, through ATen's structured kernels) and aten::arange.start_out (positions),
// in C++: the same decomposition ops/fallback/extra_decompositions.py runs (index_copy_out,
// arange_start_out), made of dispatcher calls that take their own C++ kernels, and counted as
// the chain counts it (a "generic" call of the op in torch_fl.op_stats()).
//
// Only a call the Python chain would run exactly so is served here: the chain's cached decision
// for its (device, dtypes) is the decomposition (fallback_decisions.h), TORCH_FL_STRICT is unset
// (the chain reads it on every call), no switch sends eager calls to Python (a profile, graph
// capture ...: fast_path_switches.h), the device's default stream is current, every tensor is
// on that fl device, and the decomposition would not decline the call (its shape checks) nor
// raise (arange's bounds).  Everything else, and a call whose C++ run raised, is handed to the
// boxed fallback in Python unchanged, which decides, raises and counts as it always did.
// The kernels are registered only for ops no plugin has a kernel for (a vendor's kernel is the
// launcher's, eager_kernel.h).
#pragma once

#include <Python.h>

#include <cstdint>
#include <string>

namespace fl_bridge {

// Registers the C++ kernel of `name` ("index_copy.out" or "arange.start_out"): `fallback(*args,
// **kwargs)` is the boxed fallback for that op, `decided(*args, **kwargs)` whether the chain's
// decision for such a call is the decomposition (asked after a call `fallback` ran).
void register_fallback_decomposition(const std::string& name, PyObject* fallback, PyObject* decided);

// Calls these kernels handed to Python (part of eager_stats()'s python_calls).
uint64_t decomposition_python_calls() noexcept;

// Python methods: register_fallback_decomposition, forget_fallback_decisions, take_fallback_counts
// (module.cpp adds them to the module).
PyMethodDef* decomposition_methods();

} // namespace fl_bridge
