"""Storages on fl: `torch.UntypedStorage(n, device="fl")` and typed/untyped consistency.

PyTorch builds `torch.UntypedStorage(n, device=...)` with the C++ allocator
registered for the device type.  A Python backend cannot register one, so for
PrivateUse1 PyTorch 2.13 dereferences a null allocator and the interpreter dies
(segfault).  `UntypedStorage.__new__` is therefore routed: for an fl device the
storage is made by Torch-FL's caching allocator (the storage of a uint8 fl
tensor of n bytes, the same object type); every other device takes PyTorch's
constructor unchanged.  `TypedStorage(..., device="fl")` builds its untyped
storage through the same call, so both agree.  The `.fl()` / `.to("fl")`
moves live in serialization.py; `is_fl` and the TypedStorage methods come
from `torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)`,
told which dtypes the ABI lacks.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from fl_runtime.abi import DTYPE_TO_FL
from fl_runtime.devices.registry import DEVICE_TYPE

_installed: list = []


def unsupported_dtypes() -> list[torch.dtype]:
    """Every torch dtype the ABI has no code for (TypedStorage refuses them on fl)."""
    every = {v for v in vars(torch).values() if isinstance(v, torch.dtype)}
    return sorted(every - set(DTYPE_TO_FL), key=str)


def new_fl_storage(rt, device: torch.device, data: int | Sequence[int] = 0) -> torch.UntypedStorage:
    """An fl UntypedStorage of `data` bytes (uninitialised), or holding the bytes of a sequence."""
    index = rt.current_device() if device.index is None else device.index
    rt.device(index)      # a DeviceNotFoundError naming what exists, never a crash
    if isinstance(data, int):
        if data < 0:
            raise RuntimeError(f"torch.UntypedStorage: size must be non-negative, got {data}")
        return torch.empty(data, dtype=torch.uint8, device=torch.device(DEVICE_TYPE, index)).untyped_storage()
    host = torch.tensor(list(data), dtype=torch.uint8)
    return host.to(torch.device(DEVICE_TYPE, index)).untyped_storage()


def install(rt, resizable: bool = False) -> None:
    """Route `torch.UntypedStorage(..., device="fl")` to new_fl_storage (once per process).
    `resizable`: the native bridge resizes fl storages (its PrivateUse1 hooks); without it,
    UntypedStorage.resize_ on fl raises NativeBridgeOffError saying why and what to do instead."""
    if _installed:
        return
    base_new = torch._C.StorageBase.__new__

    def __new__(cls, *args, device=None, **kwargs):
        target = torch.device(device) if device is not None else None
        if target is None or target.type != DEVICE_TYPE:
            return base_new(cls, *args, **kwargs) if device is None else base_new(cls, *args, device=device, **kwargs)
        if kwargs or len(args) > 1 or cls is not torch.UntypedStorage:
            raise TypeError(f"{cls.__name__}(*{args!r}, device='{target}', **{kwargs!r}): on fl only "
                            "UntypedStorage(), UntypedStorage(nbytes) and UntypedStorage(sequence of bytes) "
                            "are supported; make a CPU storage and move it with .to('fl')")
        return new_fl_storage(rt, target, args[0] if args else 0)

    torch.UntypedStorage.__new__ = staticmethod(__new__)
    if not resizable:
        torch.UntypedStorage.resize_ = _refuse_fl_resize(torch.UntypedStorage.resize_)
    _installed.append(base_new)


def _refuse_fl_resize(original):
    """PyTorch resizes an fl storage through the PrivateUse1 hooks, which only C++ can register
    (the native bridge does; without it PyTorch raises about PrivateUse1HooksInterface): say why
    and what to do (fl_runtime/bridge/off.py)."""
    def resize_(self, size):
        if self.device.type == DEVICE_TYPE:
            from fl_runtime.bridge import off
            raise off.error(f"UntypedStorage.resize_ on {self.device} (FSDP2 frees parameters this way; a "
                            "tensor's own t.resize_(...) works without it)")
        return original(self, size)
    return resize_
