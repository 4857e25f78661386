// The key of one eager call, from the dispatcher's stack: what ops/eager/fast_path.value_key
// distinguishes, for the schema-ordered values (defaults filled in).
//
// Per tensor: sizes, strides, dtype, device; per Python value: its kind and value, except
// floats, which a program patches per call (a list's floats stay in: templates bake them).
// The stack holds the normalized values every program is recorded from (marshal.py fills
// its template from them), so this key is at least as fine as the Python one.  A value no
// program can replay (a Generator, a symbolic size, a conjugate or negative view) gives no key.
// A wrapped number is keyed as the Python scalar the Python kernel receives for it.
#pragma once

#include <string>

#include <ATen/core/stack.h>

namespace fl_bridge {

// Appends the key of `values` to `key`; false if some value has none (the call is not keyed).
bool append_call_key(c10::ArrayRef<c10::IValue> values, std::string& key);

} // namespace fl_bridge
