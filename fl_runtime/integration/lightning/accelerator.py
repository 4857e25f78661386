"""The `fl` accelerator for Lightning's Trainer and for Fabric.

Imported only once `lightning` itself is being imported (see hook.py), so it
imports lightning freely.  One behaviour, two base classes: Lightning's
Trainer wants a `lightning.pytorch.accelerators.Accelerator` (it adds
`get_device_stats`), Fabric a `lightning.fabric.accelerators.Accelerator`.
"""
from __future__ import annotations

from typing import Any

import torch
from lightning.fabric.accelerators.accelerator import Accelerator as FabricAccelerator
from lightning.fabric.accelerators.registry import _AcceleratorRegistry
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.accelerators.accelerator import Accelerator as TrainerAccelerator

NAME = "fl"


class _FLDevices:
    """What both accelerators do: fl devices, chosen like Lightning chooses GPUs."""

    def setup_device(self, device: torch.device) -> None:
        if device.type != NAME:
            raise MisconfigurationException(f"the fl accelerator was given device {device}, not an fl device; "
                                            "pass devices=N or devices=[i, j] for fl:i")
        torch.fl.set_device(device.index or 0)

    def teardown(self) -> None:
        pass

    @staticmethod
    def parse_devices(devices: Any) -> list[int]:
        """devices=N (the first N), -1 / "-1" / "auto" (all), "0,1" or [0, 1] (those indices)."""
        count = torch.fl.device_count()
        if devices in ("auto", -1, "-1"):
            return list(range(count))
        if isinstance(devices, str):
            devices = [int(i) for i in devices.split(",") if i.strip()] if "," in devices else int(devices)
        if isinstance(devices, int):
            if devices <= 0:
                raise MisconfigurationException(f"devices={devices}: ask the fl accelerator for 1 to {count} devices")
            devices = list(range(devices))
        devices = list(devices)
        missing = [i for i in devices if not 0 <= i < count]
        if missing or len(set(devices)) != len(devices):
            raise MisconfigurationException(f"devices={devices}: this machine has fl devices 0 to {count - 1} "
                                            "(torch-fl devices lists them); each may be named once")
        return devices

    @staticmethod
    def get_parallel_devices(devices: Any) -> list[torch.device]:
        return [torch.device(NAME, i) for i in devices]

    @staticmethod
    def auto_device_count() -> int:
        return torch.fl.device_count()

    @staticmethod
    def is_available() -> bool:
        return torch.fl.is_available()

    @staticmethod
    def name() -> str:
        return NAME

    @classmethod
    def register_accelerators(cls, accelerator_registry: _AcceleratorRegistry) -> None:
        accelerator_registry.register(NAME, cls, description="Torch-FL devices (fl:N) through the vendor C ABI",
                                      override=True)

    def get_device_stats(self, device) -> dict[str, Any]:
        """The runtime's allocator statistics for the device (torch.fl.memory_stats: CUDA-named keys)."""
        return torch.fl.memory_stats(device)


class FLAccelerator(_FLDevices, TrainerAccelerator):
    """`Trainer(accelerator="fl")`."""


class FabricFLAccelerator(_FLDevices, FabricAccelerator):
    """`Fabric(accelerator="fl")`."""


def is_fl(accelerator) -> bool:
    return isinstance(accelerator, _FLDevices) or accelerator == NAME
