// The PrivateUse1 kernels of metadata-only views (view, as_strided, _reshape_alias, unfold,
// alias): PyTorch's CPU kernel, which reads no data, reached unboxed.  A boxed redispatch
// (IValues in, IValues out) cost each view about a microsecond more than native, and an
// autograd step makes many (every t() is an as_strided): docs/users/native-bridge.md "Eager ops".
#pragma once

#include <string>

#include <torch/library.h>

namespace fl_bridge {

// Registers op `name`'s unboxed kernel in `library`; false for a name it has none for (the
// caller then registers the boxed redispatch).
bool register_unboxed_view(torch::Library& library, const std::string& name);

} // namespace fl_bridge
