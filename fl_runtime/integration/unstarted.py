"""The `fl` device when the runtime failed to start under PyTorch's autoload (a broken config).

`import torch` must not raise (autoload.py), so there the failure is only a warning.  Left
at that, the user's first `torch.device("fl")` met PyTorch's "Expected one of cpu, cuda,
... device type" instead of the reason.  So the autoload still names PyTorch's PrivateUse1
slot `fl` and puts a stand-in behind it: every op on an fl device (a boxed fallback for
PrivateUse1) and every `torch.fl` function but `is_available` / `device_count` raise the
start-up error itself (the ConfigError naming the key, as `import torch_fl` raises it).
A later start that succeeds withdraws the stand-in first (process.py).
"""
from __future__ import annotations

import sys
import types

import torch

from fl_runtime.devices.registry import DEVICE_TYPE

_library: torch.library.Library | None = None


class _UnstartedModule(types.ModuleType):
    """`torch.fl` of a runtime that did not start."""

    def __init__(self, error: Exception) -> None:
        super().__init__(f"torch.{DEVICE_TYPE}")
        self._error = error

    @staticmethod
    def is_available() -> bool:
        return False

    @staticmethod
    def device_count() -> int:
        return 0

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        raise self._error.with_traceback(None)


class _Guard(torch._C._acc.DeviceGuard):
    """A device guard, so that a copy to fl reaches the fallback below instead of PyTorch's
    "not linked with support for fl devices" (the Python route registers the same one)."""

    def type_(self):
        return torch._C._autograd.DeviceType.PrivateUse1


def stand_in(error: Exception) -> None:
    """Name the slot `fl` and make every use of it raise `error` (only while the slot is free)."""
    global _library
    if _library is not None or torch._C._get_privateuse1_backend_name() != "privateuseone":
        return
    torch.utils.rename_privateuse1_backend(DEVICE_TYPE)

    def raise_startup_error(op, *args, **kwargs):
        raise error.with_traceback(None)

    library = torch.library.Library("_", "IMPL")
    library.fallback(raise_startup_error, "PrivateUse1")
    torch._register_device_module(DEVICE_TYPE, _UnstartedModule(error))
    torch._C._acc.register_python_privateuseone_device_guard(_Guard())
    _library = library


def withdraw() -> None:
    """Remove the stand-in before the runtime registers itself (no-op when there is none)."""
    global _library
    if _library is None:
        return
    _library._destroy()
    _library = None
    if isinstance(getattr(torch, DEVICE_TYPE, None), _UnstartedModule):
        delattr(torch, DEVICE_TYPE)
        sys.modules.pop(f"torch.{DEVICE_TYPE}", None)
