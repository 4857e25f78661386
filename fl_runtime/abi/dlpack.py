"""DLPack's C structs and the C library's allocator, as cffi declarations.

Not part of Torch-FL's ABI: `devices/storage.py` hands device memory to PyTorch as
DLPack capsules (the DLPack standard, v0.8 layout) and allocates them with the C
library's malloc, for memory PyTorch reads after Python may have gone.  Loaded like
the header's declarations (`outofline.load_ffi`), from the module the package build
writes beside this file (`PACKAGED`) or the user's cache: parsing this text at every
start-up cost ~0.1 s.  Torch-free and import-free, so setup.py loads it by path.
"""
from __future__ import annotations

from pathlib import Path

CDEF = """
typedef struct { int32_t device_type; int32_t device_id; } DLDevice;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;
typedef struct { void *data; DLDevice device; int32_t ndim; DLDataType dtype;
                 int64_t *shape; int64_t *strides; uint64_t byte_offset; } DLTensor;
typedef struct DLManagedTensor { DLTensor dl_tensor; void *manager_ctx;
                                 void (*deleter)(struct DLManagedTensor *); } DLManagedTensor;
void *malloc(size_t size);
void free(void *ptr);
"""
PACKAGED = Path(__file__).with_name("_dlpack_ffi.py")
