"""dynamo's device interface for fl: what torch._dynamo and Inductor ask a device
(current device, streams, synchronisation, properties), answered by `torch.fl`.

Imported only once `torch._dynamo.device_interface` has been (torch_compile.py).
The raw stream is 0: Inductor's generated code for fl launches no kernels of
its own (every op is an ATen call that runs on the current fl stream,
inductor_backend.py), so it never needs the handle.
"""
from __future__ import annotations

from typing import Any

import torch
from torch._dynamo.device_interface import DeviceInterface, register_interface_for_device

from fl_runtime.devices.registry import DEVICE_TYPE


def _fl():
    return torch.fl


class FLInterface(DeviceInterface):
    class device:
        def __new__(cls, device: torch.types.Device) -> Any:
            return _fl().device(device)

    class Event:
        def __new__(cls, *args: Any, **kwargs: Any) -> Any:
            return _fl().Event(*args, **kwargs)

    class Stream:
        def __new__(cls, *args: Any, **kwargs: Any) -> Any:
            return _fl().Stream(*args, **kwargs)

    class Worker:
        """What Inductor's compile workers ask; answered in this process (fl has no
        state a worker could not read)."""
        @staticmethod
        def set_device(device: int) -> None:
            _fl().set_device(device)

        @staticmethod
        def current_device() -> int:
            return _fl().current_device()

        @staticmethod
        def get_device_properties(device: torch.types.Device = None) -> Any:
            return _fl().get_device_properties(device)

    @staticmethod
    def current_device() -> int:
        return _fl().current_device()

    @staticmethod
    def set_device(device: torch.types.Device) -> None:
        _fl().set_device(device)

    @staticmethod
    def maybe_exchange_device(device: int) -> int:
        previous = _fl().current_device()
        if device >= 0 and device != previous:
            _fl().set_device(device)
        return previous

    exchange_device = maybe_exchange_device

    @staticmethod
    def device_count() -> int:
        return _fl().device_count()

    @staticmethod
    def is_available() -> bool:
        return _fl().is_available()

    @staticmethod
    def stream(stream: torch.Stream) -> Any:
        return _fl().stream(stream)

    @staticmethod
    def current_stream() -> torch.Stream:
        return _fl().current_stream()

    @staticmethod
    def set_stream(stream: torch.Stream) -> None:
        _fl().set_stream(stream)

    @staticmethod
    def get_raw_stream(device_idx: int) -> int:
        return 0

    @staticmethod
    def synchronize(device: torch.types.Device = None) -> None:
        _fl().synchronize(device)

    @classmethod
    def get_device_properties(cls, device: torch.types.Device = None) -> Any:
        return _fl().get_device_properties(device)

    @staticmethod
    def get_compute_capability(device: torch.types.Device = None) -> Any:
        return ""

    @staticmethod
    def is_bf16_supported(including_emulation: bool = False) -> bool:
        return _fl().is_bf16_supported()

    @staticmethod
    def memory_allocated(device: torch.types.Device = None) -> int:
        return _fl().memory_allocated(device)

    @staticmethod
    def is_triton_capable(device: torch.types.Device = None) -> bool:
        return False


def register() -> None:
    register_interface_for_device(DEVICE_TYPE, FLInterface)
