"""torch.save / torch.load of fl tensors (docs/users/devices.md).

Saving needs nothing special: PyTorch copies each storage to the host and tags
it with its location ("fl:1").  Loading and `storage.to("fl:N")` are another
matter: PyTorch's generic path makes the target with
`torch.UntypedStorage(n, device="fl:N")`, which goes to the C++ allocator
registered for PrivateUse1 -- and a Python backend cannot register one, so
that call crashes the process.  This module routes every such move through
Torch-FL's own allocator instead:

- a restore-location handler for "fl"/"fl:N" tags, ahead of PyTorch's generic
  PrivateUse1 one (torch.serialization.register_package);
- `UntypedStorage.to(device)` and the generated `UntypedStorage.fl()` for fl
  targets.
"""
from __future__ import annotations

import functools
import re

import torch

BACKEND = "fl"
# Lower runs first; PyTorch's own handler for PrivateUse1 has priority 23.
_PRIORITY = 19
_LOCATION = re.compile(rf"^{BACKEND}(:\d+)?$")
_installed: list = []


def storage_to_fl(storage, device: torch.device, rt) -> torch.UntypedStorage:
    """A copy of `storage` (on any device) made by Torch-FL's allocator on `device`."""
    index = rt.current_device() if device.index is None else device.index
    rt.device(index)              # a clear DeviceNotFoundError, never a crash, for fl:99
    untyped = storage.untyped() if isinstance(storage, torch.TypedStorage) else storage
    if untyped.device == torch.device(BACKEND, index):
        return untyped
    host = untyped if untyped.device.type == "cpu" else untyped.cpu()
    flat = torch.empty(0, dtype=torch.uint8).set_(host)
    target = torch.empty(host.nbytes(), dtype=torch.uint8, device=torch.device(BACKEND, index))
    target.copy_(flat)
    return target.untyped_storage()


def _tag(obj) -> str | None:
    if obj.device.type == BACKEND:
        return BACKEND if obj.device.index is None else f"{BACKEND}:{obj.device.index}"
    return None


def _restore(rt, obj, location: str):
    """torch.load's handler for storages saved on (or mapped to) fl."""
    if _LOCATION.match(location):
        return storage_to_fl(obj, torch.device(location), rt)
    return None


def install(rt) -> None:
    """Register the load handler and the storage moves (once per process)."""
    if _installed:
        return
    torch.serialization.register_package(_PRIORITY, _tag, functools.partial(_restore, rt))
    original_to = torch.storage._to

    def to(self, device, non_blocking=False):
        device = torch.device(device)
        if device.type == BACKEND:
            return storage_to_fl(self, device, rt)
        return original_to(self, device, non_blocking)

    def fl(self, device=None, non_blocking=False):
        return storage_to_fl(self, torch.device(BACKEND, rt.current_device() if device is None else
                                                torch.device(device, 0).index if isinstance(device, str)
                                                else int(device)), rt)

    torch.storage._to = to                        # what UntypedStorage.to(...) calls
    torch.storage._StorageBase.fl = fl            # replaces the generated, crashing method
    _installed.append(original_to)
