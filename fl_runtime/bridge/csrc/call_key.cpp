#include "call_key.h"

#include <cstring>

namespace fl_bridge {
namespace {

template <typename T>
void put(std::string& key, T value) {
  key.append(reinterpret_cast<const char*>(&value), sizeof value);
}

void put_ints(std::string& key, c10::IntArrayRef ints) {
  put<uint32_t>(key, static_cast<uint32_t>(ints.size()));
  key.append(reinterpret_cast<const char*>(ints.data()), ints.size() * sizeof(int64_t));
}

// A wrapped number (the `1` of `x + 1`) reaches a Python kernel as the Python scalar it was
// (torch::jit::toPyObject), so it is keyed as one: ints and bools by value, floats by kind.
bool put_wrapped_number(std::string& key, const at::Tensor& t) {
  switch (t.scalar_type()) {
    case c10::kLong:
      key.push_back('I');
      put<int64_t>(key, *t.const_data_ptr<int64_t>());
      return true;
    case c10::kBool:
      key.push_back('B');
      put<int8_t>(key, *t.const_data_ptr<bool>());
      return true;
    case c10::kDouble:
      key.push_back('D');
      return true;
    default:
      return false;
  }
}

bool put_tensor(std::string& key, const at::Tensor& t) {
  if (!t.defined()) {
    key.push_back('U');
    return true;
  }
  if (t.unsafeGetTensorImpl()->is_wrapped_number()) {
    return put_wrapped_number(key, t);
  }
  if (t.layout() != c10::kStrided || t.is_conj() || t.is_neg() || t.unsafeGetTensorImpl()->has_symbolic_sizes_strides()) {
    return false;
  }
  key.push_back('T');
  put<int8_t>(key, static_cast<int8_t>(t.scalar_type()));
  put<int8_t>(key, static_cast<int8_t>(t.device().type()));
  put<int8_t>(key, t.device().index());
  put_ints(key, t.sizes());
  put_ints(key, t.strides());
  return true;
}

bool put_value(std::string& key, const c10::IValue& value) {
  if (value.isNone()) {
    key.push_back('N');
  } else if (value.isTensor()) {
    return put_tensor(key, value.toTensor());
  } else if (value.isDouble()) {
    key.push_back('D');        // patched per call
  } else if (value.isInt()) {
    key.push_back('I');
    put<int64_t>(key, value.toInt());
  } else if (value.isBool()) {
    key.push_back('B');
    put<int8_t>(key, value.toBool());
  } else if (value.isComplexDouble()) {
    const auto z = value.toComplexDouble();
    key.push_back('C');
    put<double>(key, z.real());
    put<double>(key, z.imag());
  } else if (value.isString()) {
    const auto& text = value.toStringRef();
    key.push_back('S');
    put<uint32_t>(key, static_cast<uint32_t>(text.size()));
    key.append(text);
  } else if (value.isDevice()) {
    key.push_back('V');
    put<int8_t>(key, static_cast<int8_t>(value.toDevice().type()));
    put<int8_t>(key, value.toDevice().index());
  } else if (value.isIntList()) {
    key.push_back('L');
    put_ints(key, value.toIntVector());
  } else if (value.isDoubleList()) {
    const auto floats = value.toDoubleVector();     // a list's floats are baked into the template
    key.push_back('F');
    put<uint32_t>(key, static_cast<uint32_t>(floats.size()));
    key.append(reinterpret_cast<const char*>(floats.data()), floats.size() * sizeof(double));
  } else if (value.isList()) {
    const auto items = value.toListRef();
    key.push_back('[');
    put<uint32_t>(key, static_cast<uint32_t>(items.size()));
    for (const auto& item : items) {
      if (!put_value(key, item)) {
        return false;
      }
    }
  } else {
    return false;             // Generator, SymInt, tuples, objects ...: no program replays them
  }
  return true;
}

} // namespace

bool append_call_key(c10::ArrayRef<c10::IValue> values, std::string& key) {
  for (const auto& value : values) {
    if (!put_value(key, value)) {
      return false;
    }
  }
  return true;
}

} // namespace fl_bridge
