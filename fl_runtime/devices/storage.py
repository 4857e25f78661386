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
import struct
import threading

import cffi
import torch

from fl_runtime.logs import logger

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
DL_DTYPES = {  # torch dtype -> (DLPack type code, bits)
    torch.float32: (2, 32), torch.float64: (2, 64), torch.float16: (2, 16), torch.bfloat16: (4, 16),
    torch.int8: (0, 8), torch.int16: (0, 16), torch.int32: (0, 32), torch.int64: (0, 64),
    torch.uint8: (1, 8), torch.bool: (6, 8), torch.complex64: (5, 64),
}

_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]

# A DLManagedTensor followed by its shape and strides, packed with struct into
# preallocated slots: filling cffi structs field by field cost ~3 us per tensor.
_MANAGED = struct.Struct("=QiiiBBHQQQQQ")
_MAX_SLOT_DIMS = 8
_SLOT_SIZE = _MANAGED.size + 16 * _MAX_SLOT_DIMS
_SLOTS_PER_SLAB = 1024
_DIMS = [struct.Struct(f"={2 * n}q") for n in range(_MAX_SLOT_DIMS + 1)]
assert _MANAGED.size == _dl.sizeof("DLManagedTensor")


class _SlotPool:
    """Fixed-size C slots for DLManagedTensors, recycled when PyTorch frees a tensor.

    Threads: take() and give_back() are single list operations (pop, append), atomic
    in CPython, so the hot path takes no lock; only a refill (a new slab) is locked,
    and the refilling thread keeps one slot of the new slab for itself so no other
    thread's pop can leave it empty-handed."""

    def __init__(self) -> None:
        self._slabs: list = []
        self._free: list[tuple] = []      # (writable buffer, offset, address)
        self._refill_lock = threading.Lock()

    def take(self) -> tuple:
        try:
            return self._free.pop()
        except IndexError:
            return self._refill()

    def _refill(self) -> tuple:
        with self._refill_lock:
            try:
                return self._free.pop()   # another thread refilled while we waited
            except IndexError:
                pass
            slab = _dl.new("char[]", _SLOT_SIZE * _SLOTS_PER_SLAB)
            self._slabs.append(slab)
            mem, base = _dl.buffer(slab), int(_dl.cast("uintptr_t", slab))
            slots = [(mem, i * _SLOT_SIZE, base + i * _SLOT_SIZE) for i in range(_SLOTS_PER_SLAB)]
            mine = slots.pop()
            self._free.extend(slots)
            return mine

    def give_back(self, slot: tuple) -> None:
        self._free.append(slot)


_slots = _SlotPool()
# DLManagedTensor address -> (slot, release callable, block)
_live: dict[int, tuple] = {}
# DLManagedTensor address -> cffi objects of the rare slot-less tensors (> 8 dims)
_cffi_keepalive: dict[int, tuple] = {}
_hidden_error: BaseException | None = None


@_dl.callback("void(DLManagedTensor *)")
def _deleter(managed) -> None:
    try:
        address = int(_dl.cast("uintptr_t", managed))
    except SystemError as exc:
        # PyTorch freed the tensor while Python had an exception pending (a temporary
        # dying as the interpreter unwinds a failed call): any builtin called then fails.
        # Catching it cleared the pending state, so the release below works.
        _report_hidden_error(exc.__cause__ or exc.__context__)
        address = int(_dl.cast("uintptr_t", managed))
    _release(address)


def _report_hidden_error(error: BaseException | None) -> None:
    """A C callback cannot hand a pending exception back to the interpreter (cffi
    clears it), so the caller will see "SystemError: error return without exception
    set": say what the real error was, and keep it for torch_fl.last_hidden_error()."""
    global _hidden_error
    _hidden_error = error
    logger.error("an fl tensor was freed while Python was raising %s: %s; Python will report "
                 "'SystemError: error return without exception set' in its place (a limit of C "
                 "callbacks into Python). torch_fl.last_hidden_error() returns it.",
                 type(error).__name__, error)


def last_hidden_error() -> BaseException | None:
    """The exception that a tensor freed during its unwinding hid (see _deleter), if any."""
    return _hidden_error


def _release(address: int) -> None:
    entry = _live.pop(address, None)
    if entry is not None:
        slot, release, block = entry
        if slot is not None:
            _slots.give_back(slot)
        else:
            _cffi_keepalive.pop(address, None)
        if block is not None:
            release(block)


_DELETER_ADDRESS = int(_dl.cast("uintptr_t", _deleter))


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
    code, bits = DL_DTYPES[dtype]
    data = block.ptr if block is not None else 0
    if ndim <= _MAX_SLOT_DIMS:
        slot = _slots.take()
        mem, offset, address = slot
        dims = address + _MANAGED.size
        _DIMS[ndim].pack_into(mem, offset + _MANAGED.size, *shape, *stride)
        keep = slot
    else:     # rare: a slot-less, cffi-allocated DLManagedTensor
        dims_array = _dl.new("int64_t[]", list(shape) + list(stride))
        managed = _dl.new("DLManagedTensor*")
        mem, offset, address = _dl.buffer(managed), 0, int(_dl.cast("uintptr_t", managed))
        dims = int(_dl.cast("uintptr_t", dims_array))
        keep = None
        _cffi_keepalive[address] = (managed, dims_array)
    _MANAGED.pack_into(mem, offset, data, _KDL_EXT_DEV, device_index, ndim, code, bits, 1,
                       dims, dims + 8 * ndim, 0, 0, _DELETER_ADDRESS)
    _live[address] = (keep, release, block)
    return torch._C._from_dlpack(_capsule_new(address, b"dltensor", None))


def storage_base(tensor: torch.Tensor) -> int:
    """The device address of the allocation under a tensor (its storage's data pointer)."""
    return tensor.data_ptr() - tensor.storage_offset() * tensor.element_size()


def numel(shape) -> int:
    return math.prod(shape)
