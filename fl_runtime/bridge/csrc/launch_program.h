// One call signature's recorded launch, held in C++: what ops/eager/fast_path.Program and its
// marshal template (ops/eager/marshal.py) decided at the signature's first call, replayed without
// Python (docs/users/native-bridge.md "Eager ops").
//
// The template is the fl_arg array of fl_abi.h ("kernel calling convention") the first call
// built, with the sites that vary per call: tensor addresses and byte offsets (arguments,
// entries of tensor lists, outputs), float scalars and wrapped numbers (0-dim CPU tensors,
// passed as scalars).  Its pointers into itself are relocated to the arena it is copied into.
// A Program is immutable once built; any thread may run it.
#pragma once

#include <Python.h>

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/core/stack.h>

#include "../../../fl_sdk/include/fl_abi.h"

namespace fl_bridge {

// How a program makes one output: an argument it returns (in-place, out=), nothing, or a
// fresh tensor of a fixed layout.
struct OutputLayout {
  int alias = -1;                    // index into the arguments, or -1
  bool fresh = false;
  std::vector<int64_t> sizes, strides;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  size_t nbytes = 0;
};

// A site patched per call: `at` is a byte offset into the template.
struct TensorSite {
  enum Source : int32_t { kArgument = 0, kListEntry = 1, kOutput = 2 };
  size_t at;
  Source source;
  int32_t index;        // argument (or output) index
  int32_t entry;        // list entry, for kListEntry
};
struct ScalarSite {
  size_t at;            // the fl_arg slot
  int32_t index;        // argument index
};

class LaunchProgram {
 public:
  // From the tuple ops/eager/fast_path.Program.native_spec() gives; raises on a malformed one.
  static LaunchProgram from_spec(PyObject* spec);

  c10::DeviceIndex device() const { return device_; }
  bool has_autocast_variant() const { return has_autocast_; }
  uint64_t epoch() const { return epoch_; }
  const std::vector<OutputLayout>& outputs() const { return outputs_; }
  const std::string& count_name() const { return count_name_; }
  size_t template_size() const { return blob_.size(); }

  // Copies the template to `arena` (template_size() bytes, 8-aligned) and patches it for
  // this call; false when a value cannot travel (a complex wrapped number: the Python path
  // then gives the error or fallback it always gives).
  bool fill(char* arena, c10::ArrayRef<c10::IValue> arguments, const std::vector<at::Tensor>& outs) const;
  fl_status launch(fl_stream stream, const char* arena) const;

 private:
  c10::DeviceIndex device_ = 0;
  bool has_autocast_ = false;
  uint64_t epoch_ = 0;
  uintptr_t launch_fn_ = 0;          // the plugin's launch_kernel
  uintptr_t entry_ = 0;              // its fl_kernel_entry
  uint32_t nargs_ = 0;               // fl_arg slots: arguments, then outputs
  std::string blob_;
  uintptr_t recorded_at_ = 0;        // the address the template's pointers were made for
  std::vector<size_t> relocations_;  // offsets of those pointers
  std::vector<TensorSite> tensors_;
  std::vector<ScalarSite> floats_, wrapped_;
  std::vector<OutputLayout> outputs_;
  std::string count_name_;
};

} // namespace fl_bridge
