"""Factories and storage-level ops the runtime implements itself for fl tensors:
empty / empty_strided (allocation), resize_, set_, _local_scalar_dense.
"""
from __future__ import annotations

import torch

from fl_runtime.devices.storage import DL_DTYPES, contiguous_strides, storage_nbytes
from fl_runtime.ops.boundary import leaves_runtime

_CPU_KEYSET = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)


def register(library: torch.library.Library, rt, resizable_storage: bool = False) -> None:
    """`resizable_storage`: fl storages resize in place (the native bridge's PrivateUse1 hooks),
    so a tensor grows its own storage as on the CPU and views made before still share it;
    without it a growing tensor moves to a new storage (docs/users/native-bridge.md)."""
    def device_index(device) -> int:
        index = rt.current_device() if device is None or device.index is None else device.index
        rt.device(index)   # raises DeviceNotFoundError naming what exists
        return index

    def empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
        index = device_index(device)
        return rt.new_tensor(index, tuple(size), tuple(stride), dtype or torch.get_default_dtype(),
                             rt.streams.current(index))

    def empty(size, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
        size = tuple(size)
        if memory_format in (None, torch.contiguous_format, torch.preserve_format):
            stride = tuple(contiguous_strides(size))
        else:
            stride = torch.empty(size, memory_format=memory_format, device="meta").stride()
        return empty_strided(size, stride, dtype, layout, device, pin_memory)

    def local_scalar_dense(self):
        host = torch.empty(self.shape, dtype=self.dtype)   # .item() also takes [1], [1, 1] ...
        rt.copy_to_host(self, host)
        return host.item()

    def resize_(self, size, memory_format=None):
        size = tuple(size)
        stride = tuple(contiguous_strides(size)) if memory_format in (None, torch.contiguous_format) \
            else _strides_in_format(size, memory_format)
        needed = storage_nbytes(size, stride, self.element_size()) + self.storage_offset() * self.element_size()
        if needed > self.untyped_storage().nbytes() and resizable_storage:
            self.untyped_storage().resize_(needed)
        elif needed > self.untyped_storage().nbytes():
            bigger = rt.new_tensor(self.device.index, (needed // self.element_size(),), (1,), self.dtype,
                                   rt.streams.current(self.device.index))
            old = self.numel()
            if old:
                bigger[:old].copy_(self.reshape(-1))
            return _set_metadata(self, bigger.untyped_storage(), 0, size, stride)
        return _set_metadata(self, self.untyped_storage(), self.storage_offset(), size, stride)

    def set_storage(self, source, storage_offset=0, size=(), stride=()):
        return _set_metadata(self, source, storage_offset, tuple(size), tuple(stride))

    native = rt.launcher.native
    for name, kernel in (("empty_strided", empty_strided), ("empty.memory_format", empty)):
        if native is not None:     # C++ serves the common call, these the rest (bridge/csrc/factory_kernels.h)
            native.register_factory(name, leaves_runtime(kernel), tuple(DL_DTYPES))
        else:
            library.impl(name, kernel, "PrivateUse1")
    if native is not None:     # C++ reads a dense element itself (bridge/csrc/host_copies.h)
        native.register_local_scalar_dense(leaves_runtime(local_scalar_dense))
    else:
        library.impl("_local_scalar_dense", local_scalar_dense, "PrivateUse1")
    if native is not None:     # C++ serves the common call, resize_ the rest (bridge/csrc/resize_kernel.h)
        native.register_resize(leaves_runtime(resize_))
    else:
        library.impl("resize_", resize_, "PrivateUse1")
    library.impl("set_.source_Storage_storage_offset", set_storage, "PrivateUse1")
    library.impl("_has_compatible_shallow_copy_type", _both_dense, "PrivateUse1")
    for name in ("set_.source_Storage", "set_.source_Tensor", "set_"):
        library.impl(name, _redispatch_to_cpu(name), "PrivateUse1")


def _redispatch_to_cpu(name: str):
    """Storage-metadata ops: PyTorch's CPU kernel for them never reads data."""
    packet, _, overload = name.partition(".")
    op = getattr(getattr(torch.ops.aten, packet), overload or "default")

    def kernel(*args, **kwargs):
        return op.redispatch(_CPU_KEYSET, *args, **kwargs)
    return kernel


def _strides_in_format(size: tuple, memory_format: torch.memory_format) -> tuple:
    """The strides ATen's resize_ gives `size` in `memory_format` (channels_last ...), from
    PyTorch's own rules on a meta tensor; its error for a format resize_ refuses."""
    return torch.empty(0, device="meta").resize_(size, memory_format=memory_format).stride()


def _set_metadata(tensor, storage, offset, size, stride):
    return torch.ops.aten.set_.source_Storage_storage_offset.redispatch(
        _CPU_KEYSET, tensor, storage, offset, size, stride)


def _both_dense(self: torch.Tensor, source: torch.Tensor) -> bool:
    """`x.data = y` between an fl and a CPU tensor: PyTorch's check (TensorImpl::
    has_compatible_shallow_copy_type) counts only its in-tree backends as dense; an fl tensor
    is as dense as theirs (OpenReg registers this kernel for the same reason)."""
    return self.layout == torch.strided and source.layout == torch.strided
