#include "memory_methods.h"

#include <torch/csrc/Exceptions.h>

#include "caching_allocator.h"
#include "device_allocator.h"
#include "fork_handlers.h"
#include "memory_history.h"
#include "python_ints.h"
#include "stream_order.h"

namespace fl_bridge {
namespace {

CachingAllocator& on(long long device) {
  return allocator_of(device_index(device));
}

uint64_t address(long long value) {
  return static_cast<uint64_t>(value);
}

PyObject* install(PyObject*, PyObject* devices) {
  HANDLE_TH_ERRORS
  TORCH_CHECK(!allocators_installed(), "install_allocators: already installed");
  PyObject* sequence = PySequence_Fast(devices, "install_allocators: expected a list of device tuples");
  if (sequence == nullptr) {
    return nullptr;
  }
  std::vector<CachingAllocator*> allocators;
  const Py_ssize_t count = PySequence_Fast_GET_SIZE(sequence);
  for (Py_ssize_t i = 0; i < count; ++i) {
    unsigned long long api = 0, alignment = 0, total = 0;
    int local = 0;
    long long limit = 0;
    if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(sequence, i), "KiKKL", &api, &local, &alignment, &total, &limit)) {
      Py_DECREF(sequence);
      return nullptr;
    }
    VendorDevice vendor{reinterpret_cast<const fl_api*>(static_cast<uintptr_t>(api)), local, alignment, total};
    allocators.push_back(new CachingAllocator(static_cast<c10::DeviceIndex>(i), vendor, limit));
  }
  Py_DECREF(sequence);
  install_allocators(std::move(allocators));
  register_fork_handlers();
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

// A METH_FASTCALL body over N integer arguments (python_ints.h word_arg: signed, or an
// address above 2^63), with PyTorch's error translation.
template <Py_ssize_t N, typename Body>
PyObject* integer_call(PyObject* const* args, Py_ssize_t nargs, const char* signature, Body body) {
  HANDLE_TH_ERRORS
  TORCH_CHECK_TYPE(nargs == N, signature);
  long long a[N];
  for (Py_ssize_t i = 0; i < N; ++i) {
    a[i] = word_arg(args[i]);
  }
  return body(a);
  END_HANDLE_TH_ERRORS
}

// A METH_O body over one device index.
template <typename Body>
PyObject* device_call(PyObject* device, Body body) {
  HANDLE_TH_ERRORS
  return body(allocator_of(device_arg(device)));
  END_HANDLE_TH_ERRORS
}

PyObject* alloc(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  return integer_call<4>(args, nargs, "alloc(device, rounded, requested, stream_id)", [](const long long* a) {
    return PyLong_FromUnsignedLongLong(on(a[0]).allocate(static_cast<uint64_t>(a[1]), a[2], a[3])->ptr);
  });
}

PyObject* free_py(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  return integer_call<2>(args, nargs, "free(device, address)", [](const long long* a) {
    return PyBool_FromLong(on(a[0]).free_address(address(a[1])));
  });
}

PyObject* record_stream(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  return integer_call<4>(args, nargs, "record_stream(device, address, stream_id, handle)", [](const long long* a) {
    auto* handle = reinterpret_cast<fl_stream>(static_cast<uintptr_t>(a[3]));
    return PyBool_FromLong(on(a[0]).record_stream(address(a[1]), a[2], handle));
  });
}

PyObject* block_info(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  return integer_call<2>(args, nargs, "block_info(device, address)", [](const long long* a) -> PyObject* {
    Block block;
    if (!on(a[0]).live_block(address(a[1]), block)) {
      Py_RETURN_NONE;
    }
    PyObject* used = PyTuple_New(static_cast<Py_ssize_t>(block.used_by.size()));
    for (size_t i = 0; used != nullptr && i < block.used_by.size(); ++i) {
      PyTuple_SET_ITEM(used, static_cast<Py_ssize_t>(i), PyLong_FromLongLong(block.used_by[i].first));
    }
    return Py_BuildValue("(KLLN)", static_cast<unsigned long long>(block.size), static_cast<long long>(block.stream),
                         static_cast<long long>(block.writer), used);
  });
}

PyObject* set_writer(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  return integer_call<3>(args, nargs, "set_writer(device, address, stream_id)", [](const long long* a) {
    CachingAllocator& allocator = on(a[0]);
    const bool live = allocator.set_writer(address(a[1]), a[2]);
    if (live && a[2] >= 0) {
      note_unsettled_write(allocator, address(a[1]), a[2]);   // settled at this thread's next order
    }
    return PyBool_FromLong(live);
  });
}

PyObject* holds(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  return integer_call<2>(args, nargs, "holds(device, address)", [](const long long* a) {
    return PyBool_FromLong(on(a[0]).holds(address(a[1])));
  });
}

PyObject* take_cached(PyObject*, PyObject* device) {
  return device_call(device, [](CachingAllocator& allocator) -> PyObject* {
    const std::vector<Block*> taken = allocator.take_cached();
    PyObject* out = PyList_New(static_cast<Py_ssize_t>(taken.size()));
    for (size_t i = 0; out != nullptr && i < taken.size(); ++i) {
      PyList_SET_ITEM(out, static_cast<Py_ssize_t>(i), PyLong_FromVoidPtr(taken[i]));
    }
    return out;
  });
}

PyObject* release_taken(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  TORCH_CHECK_TYPE(nargs == 2, "release_taken(device, tokens)");
  CachingAllocator& allocator = allocator_of(device_arg(args[0]));
  std::vector<Block*> blocks;
  for (const uint64_t token : u64_list(args[1])) {      // take_cached's tokens: the blocks' addresses
    blocks.push_back(reinterpret_cast<Block*>(static_cast<uintptr_t>(token)));
  }
  allocator.release(blocks);
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

PyObject* figures(PyObject*, PyObject* device) {
  return device_call(device, [](CachingAllocator& allocator) -> PyObject* {
    const MemoryFigures f = allocator.figures();
    return Py_BuildValue("{sLsLsLsLsLsLsLsLsLsLsLsLsL}", "allocated", f.allocated, "reserved", f.reserved,
                         "peak_allocated", f.peak_allocated, "peak_reserved", f.peak_reserved, "vendor_mallocs",
                         f.vendor_mallocs, "vendor_frees", f.vendor_frees, "cache_hits", f.cache_hits,
                         "alloc_retries", f.alloc_retries, "ooms", f.ooms, "live_blocks", f.live_blocks,
                         "cached_blocks", f.cached_blocks, "cached_bytes", f.cached_bytes, "limit", f.limit);
  });
}

PyObject* reset_peaks(PyObject*, PyObject* device) {
  return device_call(device, [](CachingAllocator& allocator) -> PyObject* {
    allocator.reset_peaks();
    Py_RETURN_NONE;
  });
}

PyObject* reset_accumulated(PyObject*, PyObject* device) {
  return device_call(device, [](CachingAllocator& allocator) -> PyObject* {
    allocator.reset_accumulated();
    Py_RETURN_NONE;
  });
}

PyObject* set_limit(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  return integer_call<2>(args, nargs, "set_limit(device, bytes)", [](const long long* a) -> PyObject* {
    on(a[0]).set_limit(a[1]);
    Py_RETURN_NONE;
  });
}

PyObject* blocks(PyObject*, PyObject* device) {
  return device_call(device, [](CachingAllocator& allocator) -> PyObject* {
    const std::vector<BlockView> views = allocator.blocks();
    PyObject* out = PyList_New(static_cast<Py_ssize_t>(views.size()));
    for (size_t i = 0; out != nullptr && i < views.size(); ++i) {
      const BlockView& v = views[i];
      PyList_SET_ITEM(out, static_cast<Py_ssize_t>(i),
                      Py_BuildValue("(KKLLi)", static_cast<unsigned long long>(v.ptr),
                                    static_cast<unsigned long long>(v.size), static_cast<long long>(v.requested),
                                    static_cast<long long>(v.stream), v.state));
    }
    return out;
  });
}

PyObject* streams_in_use(PyObject*, PyObject* device) {
  return device_call(device, [](CachingAllocator& allocator) -> PyObject* {
    const std::vector<c10::StreamId> ids = allocator.streams_in_use();
    PyObject* out = PyList_New(static_cast<Py_ssize_t>(ids.size()));
    for (size_t i = 0; out != nullptr && i < ids.size(); ++i) {
      PyList_SET_ITEM(out, static_cast<Py_ssize_t>(i), PyLong_FromLongLong(ids[i]));
    }
    return out;
  });
}

PyObject* set_memory_history(PyObject*, PyObject* enabled) {
  const int on_off = PyObject_IsTrue(enabled);
  if (on_off < 0) {
    return nullptr;
  }
  set_history_enabled(on_off == 1);
  Py_RETURN_NONE;
}

PyObject* copy_data(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  return integer_call<3>(args, nargs, "copy_data(dest, src, nbytes)", [](const long long* a) -> PyObject* {
    device_allocator().copy_data(reinterpret_cast<void*>(static_cast<uintptr_t>(a[0])),
                                 reinterpret_cast<const void*>(static_cast<uintptr_t>(a[1])),
                                 static_cast<size_t>(a[2]));
    Py_RETURN_NONE;
  });
}

#define FL_FASTCALL(fn) reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(fn)), METH_FASTCALL

PyMethodDef methods[] = {
    {"install_allocators", install, METH_O, "Make the device allocators (once)."},
    {"alloc", FL_FASTCALL(alloc), "alloc(device, rounded, requested, stream_id) -> address"},
    {"free", FL_FASTCALL(free_py), "free(device, address) -> bool"},
    {"record_stream", FL_FASTCALL(record_stream), "record_stream(device, address, stream_id, handle) -> bool"},
    {"block_info", FL_FASTCALL(block_info), "block_info(device, address) -> (size, stream, writer, used_by) or None"},
    {"set_writer", FL_FASTCALL(set_writer), "set_writer(device, address, stream_id) -> bool"},
    {"holds", FL_FASTCALL(holds), "holds(device, address) -> bool"},
    {"take_cached", take_cached, METH_O, "Take the cached blocks of fl:device out of its pool."},
    {"release_taken", FL_FASTCALL(release_taken), "Give blocks take_cached took back to the vendor."},
    {"figures", figures, METH_O, "The allocator's counters for fl:device."},
    {"reset_peaks", reset_peaks, METH_O, "Peaks back to the current figures."},
    {"reset_accumulated", reset_accumulated, METH_O, "Counters that only grow back to 0."},
    {"set_limit", FL_FASTCALL(set_limit), "set_limit(device, bytes): memory_fraction * total"},
    {"blocks", blocks, METH_O, "Every held block: (address, size, requested, stream, state)."},
    {"streams_in_use", streams_in_use, METH_O, "Streams recorded on live blocks."},
    {"set_memory_history", set_memory_history, METH_O, "Report allocator events to the recorder."},
    {"copy_data", FL_FASTCALL(copy_data), "c10::Allocator::copy_data(dest, src, nbytes), as PyTorch calls it"},
    {nullptr, nullptr, 0, nullptr},
};

#undef FL_FASTCALL

}  // namespace

int add_memory_methods(PyObject* module) {
  return PyModule_AddFunctions(module, methods);
}

}  // namespace fl_bridge
