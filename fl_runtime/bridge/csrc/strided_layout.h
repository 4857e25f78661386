// Byte spans and row-major strides of a strided layout, as fl_runtime/devices/storage.py computes
// them (storage_nbytes, contiguous_strides): the C++ factories and resize_ must size a block
// exactly as the Python route does, or a tensor would differ between the routes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <c10/util/ArrayRef.h>

namespace fl_bridge {

// Bytes a strided layout spans from its first element, 0 without elements.
size_t span_bytes(c10::IntArrayRef sizes, c10::IntArrayRef strides, size_t itemsize);

// Row-major strides, a size-0 or size-1 dimension counting as 1.
std::vector<int64_t> contiguous_strides(c10::IntArrayRef sizes);

// Every value >= 0.
bool non_negative(c10::IntArrayRef values);

} // namespace fl_bridge
