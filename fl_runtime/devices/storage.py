"""Turn device memory blocks into torch tensors on fl:N, and back.

A tensor's storage is handed to PyTorch through DLPack with device type
kDLExtDev (which PyTorch maps to PrivateUse1, our `fl`): the storage's data
pointer is the vendor's device address, the strides are ours, and PyTorch
calls our deleter when the last view of the storage dies, which returns the
block to the caching allocator.  PyTorch never dereferences the address.

Lifetimes (docs/users/limits.md "Processes": process exit).  PyTorch keeps a
raw pointer to each DLManagedTensor and, when the storage dies, reads its
`deleter` field and calls it.  Both things it touches must outlive every fl
tensor, including tensors that die while the interpreter tears itself down:
- the DLManagedTensor memory is C memory (malloc) that no Python object owns,
  so no module or garbage-collector teardown can free it under PyTorch;
- the deleter is a cffi callback; its closure is freed with the callback
  object, after which the function pointer leads into freed memory (the
  SIGSEGV/SIGILL at interpreter exit), so the callback is kept until exit.
At exit (integration.shutdown) `detach_deleters()` sets every live deleter to
NULL, which PyTorch skips (DLPack lets the deleter be NULL): no tensor dying
after that point enters Python, whatever state the interpreter is in.

Two implementations of the same contract.  The compiled one (`_dltensor.c`, built
by setup.py as an optional extension) makes the DLManagedTensor and its capsule
in one C call, and its deleter never enters Python: it pushes the freed tensor
onto a lock-free list, and `collect_freed()` (which the allocator calls before it
allocates or reports) runs the releases.  So at exit nothing needs detaching, and
a tensor freed while Python unwinds an exception cannot hide it.  The pure-Python
one below (struct, ctypes, a cffi callback) runs where the extension was not
built, or with TORCH_FL_PURE_PYTHON=1 (fl_runtime/compiled.py).  `IMPLEMENTATION`
names the one in use.
"""
from __future__ import annotations

import ctypes
import math
import struct
import threading

import torch

from fl_runtime import compiled
from fl_runtime.abi import dlpack
from fl_runtime.abi.outofline import load_ffi
from fl_runtime.logs import logger

# DLPack's structs and the C library's allocator (abi/dlpack.py says why they are here).
_dl = load_ffi(dlpack.CDEF, dlpack.PACKAGED)
_libc = _dl.dlopen(None)
_DELETER_OFFSET = _dl.offsetof("DLManagedTensor", "deleter")
_KDL_EXT_DEV = 12
DL_DTYPES = {  # torch dtype -> (DLPack type code, bits)
    torch.float32: (2, 32), torch.float64: (2, 64), torch.float16: (2, 16), torch.bfloat16: (4, 16),
    torch.int8: (0, 8), torch.int16: (0, 16), torch.int32: (0, 32), torch.int64: (0, 64),
    torch.uint8: (1, 8), torch.bool: (6, 8), torch.complex64: (5, 64),
    # float8: DLPack 1.1's codes (kDLFloat8_e4m3fn 10, _e4m3fnuz 11, _e5m2 12, _e5m2fnuz 13), which
    # torch.from_dlpack accepts in the unversioned capsule this module hands it from torch 2.13
    # on (tests/runtime/test_fp8.py checks the round trip); docs/vendors/fp8.md says why not uint8 bytes.
    torch.float8_e4m3fn: (10, 8), torch.float8_e4m3fnuz: (11, 8), torch.float8_e5m2: (12, 8),
    torch.float8_e5m2fnuz: (13, 8),
}

_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]

# A DLManagedTensor followed by its shape and strides, packed with struct into
# preallocated slots: filling cffi structs field by field cost ~3 us per tensor.
_MANAGED = struct.Struct("=QiiiBBHQQQQQ")
_MAX_SLOT_DIMS = 8
_MANAGED_SIZE = _MANAGED.size
_SLOT_SIZE = _MANAGED.size + 16 * _MAX_SLOT_DIMS
_SLOTS_PER_SLAB = 1024
_DIMS = [struct.Struct(f"={2 * n}q") for n in range(_MAX_SLOT_DIMS + 1)]
# The DLManagedTensor and its dims in one pack (one call per tensor on the hot path).
_SLOT_LAYOUTS = [struct.Struct(_MANAGED.format + f"{2 * n}q") for n in range(_MAX_SLOT_DIMS + 1)]
assert _MANAGED.size == _dl.sizeof("DLManagedTensor")


def _load_native():
    """The compiled implementation (module doc), or None for the pure-Python one."""
    _dltensor = compiled.load("fl_runtime.devices._dltensor")
    if _dltensor is None:
        return None
    if _dltensor.layout() != (_MANAGED_SIZE, _DELETER_OFFSET):
        logger.warning("torch_fl: fl_runtime.devices._dltensor's DLManagedTensor layout %s differs from "
                       "fl_runtime/abi/dlpack.py's %s; using the pure-Python path. Reinstall torch-fl.",
                       _dltensor.layout(), (_MANAGED_SIZE, _DELETER_OFFSET))
        return None
    _dltensor.configure(torch._C._from_dlpack)
    return _dltensor


_native = _load_native()
IMPLEMENTATION = "compiled" if _native is not None else "python"


def keep_until_exit(obj: object) -> None:
    """Give `obj` a reference nothing ever drops, so neither module teardown nor the
    garbage collector at interpreter exit frees it (or anything it refers to)."""
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))


def _c_memory(nbytes: int):
    """`nbytes` of C memory (address, writable buffer) that no Python object owns."""
    pointer = _libc.malloc(nbytes)
    if pointer == _dl.NULL:
        raise MemoryError(f"cannot allocate {nbytes} bytes of host memory for fl tensor descriptors")
    return int(_dl.cast("uintptr_t", pointer)), _dl.buffer(_dl.cast("char *", pointer), nbytes)


class _SlotPool:
    """Fixed-size C slots for DLManagedTensors, recycled when PyTorch frees a tensor.
    The slabs are never freed: PyTorch may read a slot as late as process exit.

    Threads: take() and give_back() are single list operations (pop, append), atomic
    in CPython, so the hot path takes no lock; only a refill (a new slab) is locked,
    and the refilling thread keeps one slot of the new slab for itself so no other
    thread's pop can leave it empty-handed."""

    def __init__(self) -> None:
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
            base, mem = _c_memory(_SLOT_SIZE * _SLOTS_PER_SLAB)
            slots = [(mem, i * _SLOT_SIZE, base + i * _SLOT_SIZE) for i in range(_SLOTS_PER_SLAB)]
            mine = slots.pop()
            self._free.extend(slots)
            return mine

    def give_back(self, slot: tuple) -> None:
        self._free.append(slot)


_slots = _SlotPool()
_free_slots = _slots._free
# DLManagedTensor address -> (slot or None for a malloc'd slot-less one, release callable, block)
_live: dict[int, tuple] = {}
_hidden_error: BaseException | None = None
held_past_unwinding: list = []   # see hold_past_unwinding
_detached = False          # set once at exit: deleters are NULL from then on (detach_deleters)
# A PyDLL function: ctypes raises the interpreter's pending exception, if any, after any
# such call, and this generic call path is never specialised away (see _take_pending_error).
_error_probe = ctypes.pythonapi.Py_IsInitialized
_error_probe.restype = ctypes.c_int
_error_probe.argtypes = []


# Declared as taking a uintptr_t where DLPack's deleter takes a DLManagedTensor *: every ABI
# PyTorch runs on (x86-64 SysV and Windows, AArch64, POWER) passes a pointer and a pointer-sized
# integer the same way, and cffi then hands the callback a Python int without a cast per call.
assert _dl.sizeof("uintptr_t") == _dl.sizeof("void *")


@_dl.callback("void(uintptr_t)")
def _deleter(address: int) -> None:
    # _take_pending_error and _release, inlined: this runs once per fl tensor freed.
    hidden = None
    try:
        _error_probe()
    except BaseException as exc:   # noqa: BLE001 - whatever the interpreter was raising
        hidden = exc
    if hidden is not None:
        _report_hidden_error(hidden)
    entry = _live.pop(address, None)
    if entry is not None:
        slot, release, block = entry
        if slot is not None:
            _free_slots.append(slot)
        else:
            _libc.free(_dl.cast("void *", address))
        if block is not None:
            release(block)


def _take_pending_error() -> BaseException | None:
    """The exception Python was raising when PyTorch called the deleter, taken out of
    the interpreter's pending state (None if there was none).

    A temporary fl tensor can die while the interpreter unwinds a failed call.  With
    the exception still pending, the first builtin call that checks for it fails with
    SystemError *after* doing its work, so e.g. popping the block's entry would lose
    it (the block leaks).  The probe call surfaces the pending exception, as itself,
    before anything else runs."""
    try:
        _error_probe()
    except BaseException as exc:   # noqa: BLE001 - whatever the interpreter was raising
        return exc
    return None


def hold_past_unwinding(objects: object) -> None:
    """Keep `objects` (a failed op's inputs) until the next op or memory query instead
    of letting the interpreter free them while it unwinds the op's exception: a
    tensor freed then runs its deleter with the exception pending, which replaces it
    with "SystemError: error return without exception set" (see _take_pending_error)."""
    held_past_unwinding.append(objects)


def release_held() -> None:
    """Drop what hold_past_unwinding kept (called where no exception can be pending)."""
    if held_past_unwinding:
        held_past_unwinding.clear()


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
            _free_slots.append(slot)      # _SlotPool.give_back, without its frame
        else:
            _libc.free(_dl.cast("void *", address))
        if block is not None:
            release(block)


keep_until_exit(_deleter)      # its C entry point must stay valid while any tensor may call it
_DELETER_ADDRESS = int(_dl.cast("uintptr_t", _deleter))


def _nothing_to_collect() -> int:
    """collect_freed() on the pure-Python path: its deleter released each block already."""
    return 0


# The compiled implementation's entry points (None / a no-op on the pure-Python path, whose
# deleter calls `release` itself).
_native_wrap = _native.wrap if _native is not None else None
collect_freed = _native.collect if _native is not None else _nothing_to_collect


def detach_deleters() -> int:
    """Set the deleter of every live fl tensor (and of any made later) to NULL, so that
    no tensor dying from now on enters Python; returns how many were live.  Called at
    interpreter exit, after the devices were synchronised: the blocks of tensors that
    are still alive stay with the vendor until the process ends (freeing them here
    would let a finalizer that still reads such a tensor read freed device memory).
    The compiled deleter never enters Python, so there it only counts them."""
    global _detached
    if _native is not None:
        return _native.live()
    _detached = True            # before the snapshot: a wrap_block racing us re-checks it
    addresses = list(_live)
    for address in addresses:
        _null_deleter(address)
    return len(addresses)


def _null_deleter(address: int) -> None:
    ctypes.c_void_p.from_address(address + _DELETER_OFFSET).value = None


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
    code, bits = DL_DTYPES[dtype]
    if _native_wrap is not None:
        if block is None:
            return _native_wrap(0, _KDL_EXT_DEV, device_index, shape, stride, code, bits, None)
        return _native_wrap(block.ptr, _KDL_EXT_DEV, device_index, shape, stride, code, bits, (release, block))
    ndim = len(shape)
    data = block.ptr if block is not None else 0
    if ndim <= _MAX_SLOT_DIMS:
        try:
            slot = _free_slots.pop()     # _SlotPool.take, without its frame
        except IndexError:
            slot = _slots.take()
        mem, offset, address = slot
        dims = address + _MANAGED_SIZE
        _SLOT_LAYOUTS[ndim].pack_into(mem, offset, data, _KDL_EXT_DEV, device_index, ndim, code, bits, 1,
                                      dims, dims + 8 * ndim, 0, 0, _DELETER_ADDRESS, *shape, *stride)
        _live[address] = (slot, release, block)
    else:     # rare: a slot-less DLManagedTensor in its own C allocation, freed by _release
        address, mem = _c_memory(_MANAGED.size + 16 * ndim)
        dims = address + _MANAGED.size
        struct.pack_into(f"={2 * ndim}q", mem, _MANAGED.size, *shape, *stride)
        _MANAGED.pack_into(mem, 0, data, _KDL_EXT_DEV, device_index, ndim, code, bits, 1,
                           dims, dims + 8 * ndim, 0, 0, _DELETER_ADDRESS)
        _live[address] = (None, release, block)
    if _detached:       # made after (or while) detach_deleters ran at exit
        _null_deleter(address)
    return torch._C._from_dlpack(_capsule_new(address, b"dltensor", None))


def storage_base(tensor: torch.Tensor) -> int:
    """The device address of the allocation under a tensor (its storage's data pointer)."""
    return tensor.data_ptr() - tensor.storage_offset() * tensor.element_size()


def numel(shape) -> int:
    return math.prod(shape)
