"""Turn device memory blocks into torch tensors on fl:N, and back.

A tensor's storage is handed to PyTorch through DLPack with device type
kDLExtDev (which PyTorch maps to PrivateUse1, our `fl`): the storage's data
pointer is the vendor's device address, the strides are ours, and PyTorch
calls our deleter when the last view of the storage dies, which returns the
block to the caching allocator.  PyTorch never dereferences the address.
"""
from __future__ import annotations

import ctypes
import math

import cffi
import torch

# DLPack's C structs (the DLPack standard, v0.8 layout), not part of our ABI.
_dl = cffi.FFI()
_dl.cdef("""
typedef struct { int32_t device_type; int32_t device_id; } DLDevice;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;
typedef struct { void *data; DLDevice device; int32_t ndim; DLDataType dtype;
                 int64_t *shape; int64_t *strides; uint64_t byte_offset; } DLTensor;
typedef struct DLManagedTensor { DLTensor dl_tensor; void *manager_ctx;
                                 void (*deleter)(struct DLManagedTensor *); } DLManagedTensor;
""")
_KDL_EXT_DEV = 12
_DL_DTYPES = {  # torch dtype -> (DLPack type code, bits)
    torch.float32: (2, 32), torch.float64: (2, 64), torch.float16: (2, 16), torch.bfloat16: (4, 16),
    torch.int8: (0, 8), torch.int16: (0, 16), torch.int32: (0, 32), torch.int64: (0, 64),
    torch.uint8: (1, 8), torch.bool: (6, 8), torch.complex64: (5, 64),
}

_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]

# DLManagedTensor address -> (struct, shape array, release callable, block)
_live: dict[int, tuple] = {}


@_dl.callback("void(DLManagedTensor *)")
def _deleter(managed) -> None:
    entry = _live.pop(int(_dl.cast("uintptr_t", managed)), None)
    if entry is not None and entry[3] is not None:
        entry[2](entry[3])


def storage_nbytes(shape, stride, itemsize: int) -> int:
    """Bytes a strided layout spans (0 if it has no elements)."""
    if 0 in shape:
        return 0
    return (sum((n - 1) * s for n, s in zip(shape, stride)) + 1) * itemsize


def contiguous_strides(shape) -> list[int]:
    strides, running = [], 1
    for n in reversed(shape):
        strides.append(running)
        running *= max(n, 1)
    return strides[::-1]


def wrap_block(block, release, device_index: int, shape, stride, dtype: torch.dtype) -> torch.Tensor:
    """A tensor on fl:<device_index> viewing `block` (None for an empty tensor)."""
    ndim = len(shape)
    managed = _dl.new("DLManagedTensor*")
    dims = _dl.new("int64_t[]", 2 * ndim)
    dims[0:ndim] = list(shape)
    dims[ndim:2 * ndim] = list(stride)
    t = managed.dl_tensor
    t.data = _dl.cast("void*", block.ptr if block is not None else 0)
    t.device.device_type = _KDL_EXT_DEV
    t.device.device_id = device_index
    t.ndim = ndim
    t.dtype.code, t.dtype.bits = _DL_DTYPES[dtype]
    t.dtype.lanes = 1
    t.shape = dims
    t.strides = dims + ndim
    managed.deleter = _deleter
    address = int(_dl.cast("uintptr_t", managed))
    _live[address] = (managed, dims, release, block)
    return torch._C._from_dlpack(_capsule_new(address, b"dltensor", None))


def storage_base(tensor: torch.Tensor) -> int:
    """The device address of the allocation under a tensor (its storage's data pointer)."""
    return tensor.data_ptr() - tensor.storage_offset() * tensor.element_size()


def numel(shape) -> int:
    return math.prod(shape)
