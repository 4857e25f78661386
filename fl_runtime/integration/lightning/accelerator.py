"""The `fl` accelerator for Lightning's Trainer and for Fabric.

One behaviour (`FLDevices`), two base classes per Lightning distribution:
the Trainer wants a `<trainer>.accelerators.Accelerator` (it adds
`get_device_stats`), Fabric a `<fabric>.accelerators.Accelerator`.  Lightning
ships the same code twice, as `lightning.pytorch` + `lightning.fabric` and as
the standalone `pytorch_lightning` + `lightning_fabric`, with distinct
classes, so the accelerators are built per distribution (`build`), only once
that distribution is being imported: this module never imports Lightning at
import time.  The built classes are module attributes (found by name when
ddp_spawn's children unpickle a Trainer; `__getattr__` builds them there).
"""
from __future__ import annotations

import importlib
import threading
from typing import Any

import torch

NAME = "fl"
#: (fabric package, trainer package) of each Lightning distribution, and the prefix of its class names.
DISTRIBUTIONS = {"": ("lightning.fabric", "lightning.pytorch"), "PL": ("lightning_fabric", "pytorch_lightning")}
_lock = threading.RLock()


class FLDevices:
    """What every fl accelerator does: fl devices, chosen like Lightning chooses GPUs."""

    #: Lightning's MisconfigurationException of the distribution the class was built for.
    _misconfiguration: type[Exception] = ValueError

    def setup_device(self, device: torch.device) -> None:
        if device.type != NAME:
            raise self._misconfiguration(f"the fl accelerator was given device {device}, not an fl device; "
                                         "pass devices=N or devices=[i, j] for fl:i")
        torch.fl.set_device(device.index or 0)

    def teardown(self) -> None:
        pass

    @classmethod
    def parse_devices(cls, devices: Any) -> list[int]:
        """devices=N (the first N), -1 / "-1" / "auto" (all), "0,1" or [0, 1] (those indices)."""
        count = torch.fl.device_count()
        if devices in ("auto", -1, "-1"):
            return list(range(count))
        if isinstance(devices, str):
            devices = [int(i) for i in devices.split(",") if i.strip()] if "," in devices else int(devices)
        if isinstance(devices, int):
            if devices <= 0:
                raise cls._misconfiguration(f"devices={devices}: ask the fl accelerator for 1 to {count} devices")
            devices = list(range(devices))
        devices = list(devices)
        missing = [i for i in devices if not 0 <= i < count]
        if missing or len(set(devices)) != len(devices):
            raise cls._misconfiguration(f"devices={devices}: this machine has fl devices 0 to {count - 1} "
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
    def register_accelerators(cls, accelerator_registry) -> None:
        accelerator_registry.register(NAME, cls, description="Torch-FL devices (fl:N) through the vendor C ABI",
                                      override=True)

    def get_device_stats(self, device) -> dict[str, Any]:
        """The runtime's allocator statistics for the device (torch.fl.memory_stats: CUDA-named keys)."""
        return torch.fl.memory_stats(device)


def build(prefix: str) -> tuple[type, type]:
    """(Trainer accelerator, Fabric accelerator) for the distribution `prefix` names (DISTRIBUTIONS)."""
    with _lock:
        trainer_name, fabric_name = f"{prefix}FLAccelerator", f"{prefix}FabricFLAccelerator"
        if trainer_name not in globals():
            fabric, trainer = DISTRIBUTIONS[prefix]
            error = importlib.import_module(f"{fabric}.utilities.exceptions").MisconfigurationException
            for name, package, doc in ((trainer_name, trainer, f'{trainer}.Trainer(accelerator="fl")'),
                                       (fabric_name, fabric, f'{fabric}.Fabric(accelerator="fl")')):
                base = importlib.import_module(f"{package}.accelerators.accelerator").Accelerator
                globals()[name] = type(name, (FLDevices, base), {"__module__": __name__, "__qualname__": name,
                                                                 "__doc__": doc, "_misconfiguration": error})
        return globals()[trainer_name], globals()[fabric_name]


def __getattr__(name: str):
    for prefix in DISTRIBUTIONS:
        if name in (f"{prefix}FLAccelerator", f"{prefix}FabricFLAccelerator"):
            build(prefix)
            return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def is_fl(accelerator) -> bool:
    return isinstance(accelerator, FLDevices) or accelerator == NAME
