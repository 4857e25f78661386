"""`torch.accelerator` for fl on the Python route (the native bridge off).

Once fl devices exist, fl is PyTorch's current accelerator, and device-agnostic code
(accelerate's `clear_device_cache`, Lightning, torchtitan) calls `torch.accelerator.*`.
PyTorch answers those in C++ from the device guard and the device's C++ `DeviceAllocator`;
the Python backend route registers neither, so PyTorch asserts ("Allocator for fl is not a
DeviceAllocator") or answers for one device.  With the native bridge these come from its
C++ guard and allocator (docs/users/native-bridge.md); without it, this module routes the
entry points of `torch._C` that `torch.accelerator` calls to `torch.fl`'s own
functions, so both routes give the same figures.

Do no harm: the routing is installed only when fl is the current accelerator, and each
routed entry point still calls PyTorch's own function for any other device type.
"""
from __future__ import annotations

from collections import OrderedDict

import torch

from fl_runtime.devices.registry import DEVICE_TYPE
from fl_runtime.logs import logger

_installed: dict[str, object] = {}     # entry point -> PyTorch's original, while routed


def install(rt, fl_module) -> None:
    """Route torch.accelerator's C entry points to `fl_module` (torch.fl) for fl."""
    if _installed or not _fl_is_current_accelerator():
        return
    for name, route in _routes(rt, fl_module).items():
        original = getattr(torch._C, name, None)
        if original is None:        # an entry point this PyTorch minor does not have
            continue
        _installed[name] = original
        setattr(torch._C, name, route)
    logger.debug("torch.accelerator routed to torch.fl on the Python route: %s", sorted(_installed))


def uninstall() -> None:
    """Give PyTorch its own entry points back (the native bridge took over)."""
    for name, original in _installed.items():
        setattr(torch._C, name, original)
    _installed.clear()


def routed() -> list[str]:
    return sorted(_installed)


def _fl_is_current_accelerator() -> bool:
    current = torch._C._accelerator_getAccelerator()
    return current is not None and current.type == DEVICE_TYPE


def _routes(rt, fl) -> dict:
    def index(device_index: int) -> int:
        # torch.accelerator passes the current index for "no device"; -1 means "current" too
        return rt.current_device() if device_index is None or device_index < 0 else device_index

    def exchange(device_index: int) -> int:
        previous = rt.current_device()
        if device_index >= 0:
            rt.set_current_device(device_index)
        return previous

    def set_device_index(device_index: int) -> None:
        if device_index >= 0:       # "a no-op if this device index is negative"
            rt.set_current_device(device_index)

    def set_stream(stream: torch.Stream) -> None:
        if stream.device_type != int(torch._C._autograd.DeviceType.PrivateUse1):
            raise ValueError(f"torch.accelerator.set_stream: {stream} is not a stream of the current "
                             f"accelerator '{DEVICE_TYPE}'")
        found = rt.streams.lookup(stream.device_index, stream.stream_id)
        rt.set_current_device(found.device_index)    # "sets the current device index" too
        rt.streams.set_current(found)

    return {
        "_accelerator_getDeviceIndex": rt.current_device,
        "_accelerator_setDeviceIndex": set_device_index,
        "_accelerator_exchangeDevice": exchange,
        "_accelerator_maybeExchangeDevice": exchange,
        "_accelerator_getStream": lambda device_index: rt.streams.current(index(device_index)),
        "_accelerator_setStream": set_stream,
        "_accelerator_synchronizeDevice": lambda device_index: fl.synchronize(index(device_index)),
        "_accelerator_isAllocatorInitialized": lambda: True,
        "_accelerator_emptyCache": fl.empty_cache,
        "_accelerator_emptyHostCache": lambda: None,    # no pinned host pool without the bridge
        "_accelerator_getDeviceStats": lambda device_index: nested_stats(fl.memory_stats(index(device_index))),
        "_accelerator_resetAccumulatedStats":
            lambda device_index: fl.reset_accumulated_memory_stats(index(device_index)),
        "_accelerator_resetPeakStats": lambda device_index: fl.reset_peak_memory_stats(index(device_index)),
        "_accelerator_getMemoryInfo": lambda device_index: fl.mem_get_info(index(device_index)),
        "_accelerator_getDeviceCapability":
            lambda device_index: device_capability(rt.device(index(device_index))),
    }


def nested_stats(flat: dict[str, int]) -> dict:
    """torch.fl.memory_stats' flat keys ('allocated_bytes.all.current') as the nested dict
    PyTorch's getDeviceStats returns; torch.accelerator.memory_stats flattens it back."""
    nested: dict = OrderedDict()
    for key, value in flat.items():
        *path, leaf = key.split(".")
        level = nested
        for part in path:
            level = level.setdefault(part, OrderedDict())
        level[leaf] = value
    return nested


def device_capability(device) -> dict:
    """What torch.accelerator.get_device_capability reports: the dtypes the device stores."""
    return {"supported_dtypes": {getattr(torch, name) for name in device.supported_dtypes}}
