#include "strided_layout.h"

#include <algorithm>

namespace fl_bridge {

size_t span_bytes(c10::IntArrayRef sizes, c10::IntArrayRef strides, size_t itemsize) {
  int64_t last = 0;
  for (size_t i = 0; i < sizes.size(); i++) {
    if (sizes[i] == 0) {
      return 0;
    }
    last += (sizes[i] - 1) * strides[i];
  }
  return static_cast<size_t>(last + 1) * itemsize;
}

std::vector<int64_t> contiguous_strides(c10::IntArrayRef sizes) {
  std::vector<int64_t> strides(sizes.size());
  int64_t running = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = running;
    running *= std::max<int64_t>(sizes[i], 1);
  }
  return strides;
}

bool non_negative(c10::IntArrayRef values) {
  return std::all_of(values.begin(), values.end(), [](int64_t value) { return value >= 0; });
}

} // namespace fl_bridge
