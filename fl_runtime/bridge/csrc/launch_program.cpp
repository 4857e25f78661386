#include "launch_program.h"

#include <cstring>

#include <c10/util/Exception.h>
#include <torch/csrc/Dtype.h>

#include "python_calls.h"
#include "python_ints.h"

namespace fl_bridge {
namespace {

constexpr Py_ssize_t kSpecFields = 14;

// The items of a tuple field, each a tuple of `width` (0: any) entries.
std::vector<PyObject*> rows(PyObject* field, Py_ssize_t width, const char* what) {
  TORCH_CHECK_TYPE(PyTuple_Check(field), "launch program spec: ", what, " must be a tuple");
  std::vector<PyObject*> out;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(field); i++) {
    PyObject* row = PyTuple_GET_ITEM(field, i);
    TORCH_CHECK_TYPE(width == 0 || (PyTuple_Check(row) && PyTuple_GET_SIZE(row) == width), "launch program spec: ",
                     what, " rows are tuples of ", width);
    out.push_back(row);
  }
  return out;
}

std::vector<int64_t> ints(PyObject* sequence) {
  std::vector<int64_t> out;
  for (PyObject* item : rows(sequence, 0, "a layout")) {
    out.push_back(int_arg(item));
  }
  return out;
}

OutputLayout output_of(PyObject* row) {
  OutputLayout out;
  out.alias = static_cast<int>(int_arg(PyTuple_GET_ITEM(row, 0)));
  PyObject* shape = PyTuple_GET_ITEM(row, 1);
  if (out.alias >= 0 || shape == Py_None) {
    return out;
  }
  PyObject* dtype = PyTuple_GET_ITEM(row, 3);
  TORCH_CHECK_TYPE(THPDtype_Check(dtype), "launch program spec: an output's dtype must be a torch.dtype");
  out.fresh = true;
  out.sizes = ints(shape);
  out.strides = ints(PyTuple_GET_ITEM(row, 2));
  out.dtype = reinterpret_cast<THPDtype*>(dtype)->scalar_type;
  out.nbytes = static_cast<size_t>(int_arg(PyTuple_GET_ITEM(row, 4)));
  return out;
}

// The (base, byte offset) pair of t's fl_tensor, as ops/eager/marshal.base_and_offset writes it.
void put_address(char* arena, size_t at, const at::Tensor& t) {
  const auto* data = static_cast<const char*>(t.storage().data());
  uint64_t pair[2] = {0, 0};
  if (data != nullptr) {        // an empty tensor has no storage: nothing is read
    pair[0] = reinterpret_cast<uintptr_t>(data);
    pair[1] = static_cast<uint64_t>(t.storage_offset()) * t.itemsize();
  }
  std::memcpy(arena + at, pair, sizeof pair);
}

void put_arg(char* arena, size_t at, int32_t kind, fl_arg_value value) {
  fl_arg arg{};
  arg.kind = kind;
  arg.count = 0;
  arg.value = value;
  std::memcpy(arena + at, &arg, sizeof arg);
}

// A 0-dim CPU tensor as the scalar marshal.py passes (value.item()); false for complex.
bool put_wrapped(char* arena, size_t at, const at::Tensor& t) {
  fl_arg_value value{};
  const void* data = t.const_data_ptr();
  switch (t.scalar_type()) {
    case c10::kBool: value.i = *static_cast<const bool*>(data); put_arg(arena, at, FL_ARG_BOOL, value); return true;
    case c10::kLong: value.i = *static_cast<const int64_t*>(data); break;
    case c10::kInt: value.i = *static_cast<const int32_t*>(data); break;
    case c10::kShort: value.i = *static_cast<const int16_t*>(data); break;
    case c10::kChar: value.i = *static_cast<const int8_t*>(data); break;
    case c10::kByte: value.i = *static_cast<const uint8_t*>(data); break;
    case c10::kDouble: value.f = *static_cast<const double*>(data); put_arg(arena, at, FL_ARG_FLOAT, value); return true;
    case c10::kFloat: value.f = *static_cast<const float*>(data); put_arg(arena, at, FL_ARG_FLOAT, value); return true;
    case c10::kHalf: value.f = static_cast<float>(*static_cast<const c10::Half*>(data)); put_arg(arena, at, FL_ARG_FLOAT, value); return true;
    case c10::kBFloat16: value.f = static_cast<float>(*static_cast<const c10::BFloat16*>(data)); put_arg(arena, at, FL_ARG_FLOAT, value); return true;
    default: return false;
  }
  put_arg(arena, at, FL_ARG_INT, value);
  return true;
}

// A float site's value: a float argument, or a wrapped float (keyed as a float: call_key.h).
double float_of(const c10::IValue& value) {
  if (value.isTensor()) {
    const at::Tensor& t = value.toTensor();
    TORCH_CHECK(t.scalar_type() == c10::kDouble, "a wrapped number of dtype ", t.scalar_type(), " at a float site");
    return *t.const_data_ptr<double>();
  }
  return value.toDouble();
}

} // namespace

LaunchProgram LaunchProgram::from_spec(PyObject* spec) {
  TORCH_CHECK_TYPE(PyTuple_Check(spec) && PyTuple_GET_SIZE(spec) == kSpecFields,
                   "launch program spec: a tuple of ", kSpecFields, " (ops/eager/fast_path.Program.native_spec)");
  auto field = [&](Py_ssize_t i) { return PyTuple_GET_ITEM(spec, i); };
  LaunchProgram p;
  p.device_ = device_arg(field(0));
  p.has_autocast_ = PyObject_IsTrue(field(1)) == 1;
  p.epoch_ = u64_arg(field(2));
  p.launch_fn_ = u64_arg(field(3));
  p.entry_ = u64_arg(field(4));
  p.nargs_ = static_cast<uint32_t>(int_arg(field(5)));
  char* bytes = nullptr;
  Py_ssize_t size = 0;
  if (PyBytes_AsStringAndSize(field(6), &bytes, &size) < 0) {
    throw_python_error();
  }
  p.blob_.assign(bytes, static_cast<size_t>(size));
  TORCH_CHECK_VALUE(p.nargs_ * sizeof(fl_arg) <= p.blob_.size(), "launch program spec: the template is too short");
  p.recorded_at_ = u64_arg(field(7));
  auto inside = [&](int64_t at, size_t width) {
    TORCH_CHECK_VALUE(at >= 0 && static_cast<size_t>(at) + width <= p.blob_.size(),
                      "launch program spec: a site outside the template");
    return static_cast<size_t>(at);
  };
  for (PyObject* at : rows(field(8), 0, "relocations")) {
    p.relocations_.push_back(inside(int_arg(at), sizeof(uint64_t)));
  }
  for (PyObject* row : rows(field(9), 4, "tensor sites")) {
    const auto source = int_arg(PyTuple_GET_ITEM(row, 1));
    TORCH_CHECK_VALUE(source >= 0 && source <= TensorSite::kOutput, "launch program spec: a tensor site's source");
    p.tensors_.push_back({inside(int_arg(PyTuple_GET_ITEM(row, 0)), 16), static_cast<TensorSite::Source>(source),
                          static_cast<int32_t>(int_arg(PyTuple_GET_ITEM(row, 2))),
                          static_cast<int32_t>(int_arg(PyTuple_GET_ITEM(row, 3)))});
  }
  for (PyObject* row : rows(field(10), 2, "float sites")) {
    p.floats_.push_back({inside(int_arg(PyTuple_GET_ITEM(row, 0)), sizeof(fl_arg)),
                         static_cast<int32_t>(int_arg(PyTuple_GET_ITEM(row, 1)))});
  }
  for (PyObject* row : rows(field(11), 2, "wrapped-number sites")) {
    p.wrapped_.push_back({inside(int_arg(PyTuple_GET_ITEM(row, 0)), sizeof(fl_arg)),
                          static_cast<int32_t>(int_arg(PyTuple_GET_ITEM(row, 1)))});
  }
  for (PyObject* row : rows(field(12), 5, "outputs")) {
    p.outputs_.push_back(output_of(row));
  }
  TORCH_CHECK_TYPE(PyUnicode_Check(field(13)), "launch program spec: the counted name is a str");
  p.count_name_ = PyUnicode_AsUTF8(field(13));
  return p;
}

bool LaunchProgram::fill(char* arena, c10::ArrayRef<c10::IValue> arguments, const std::vector<at::Tensor>& outs) const {
  std::memcpy(arena, blob_.data(), blob_.size());
  const uint64_t delta = reinterpret_cast<uintptr_t>(arena) - recorded_at_;    // modulo 2^64
  for (size_t at : relocations_) {
    uint64_t pointer = 0;
    std::memcpy(&pointer, arena + at, sizeof pointer);
    pointer += delta;
    std::memcpy(arena + at, &pointer, sizeof pointer);
  }
  for (const auto& site : tensors_) {
    switch (site.source) {
      case TensorSite::kArgument:
        put_address(arena, site.at, arguments[site.index].toTensor());
        break;
      case TensorSite::kListEntry:
        put_address(arena, site.at, arguments[site.index].toListRef()[site.entry].toTensor());
        break;
      case TensorSite::kOutput:
        put_address(arena, site.at, outs[site.index]);
        break;
    }
  }
  for (const auto& site : floats_) {
    fl_arg_value value{};
    value.f = float_of(arguments[site.index]);
    put_arg(arena, site.at, FL_ARG_FLOAT, value);
  }
  for (const auto& site : wrapped_) {
    if (!put_wrapped(arena, site.at, arguments[site.index].toTensor())) {
      return false;
    }
  }
  return true;
}

fl_status LaunchProgram::launch(fl_stream stream, const char* arena) const {
  using LaunchFn = fl_status (*)(fl_stream, const fl_kernel_entry*, const fl_arg*, uint32_t);
  return reinterpret_cast<LaunchFn>(launch_fn_)(stream, reinterpret_cast<const fl_kernel_entry*>(entry_),
                                                reinterpret_cast<const fl_arg*>(arena), nargs_);
}

} // namespace fl_bridge
