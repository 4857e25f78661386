"""`torch.fl`: the torch.cuda-shaped module PyTorch finds for the fl device."""
from __future__ import annotations

import contextlib
import types

import torch

from .streams import Event as _Event, Stream as _Stream


def make_device_module(rt) -> types.ModuleType:
    mod = types.ModuleType("torch.fl", "Torch-FL devices (fl:N), the torch.cuda of Torch-FL.")

    def is_available() -> bool:
        return bool(rt.devices)

    def device_count() -> int:
        return len(rt.devices)

    def current_device() -> int:
        return rt.current_device()

    def set_device(device) -> None:
        rt.set_current_device(torch.device(device, 0).index if isinstance(device, str) else
                              (device.index if isinstance(device, torch.device) else int(device)))

    def synchronize(device=None) -> None:
        index = None if device is None else torch.device("fl", device).index if isinstance(device, int) \
            else torch.device(device).index
        rt.synchronize(index)

    def get_device_name(device=None) -> str:
        return rt.device(_index(device)).name

    def get_device_properties(device=None):
        return rt.device(_index(device))

    def _index(device) -> int:
        if device is None:
            return rt.current_device()
        if isinstance(device, int):
            return device
        index = torch.device(device).index
        return rt.current_device() if index is None else index

    def manual_seed(seed: int) -> None:
        rt.rng.manual_seed(rt.current_device(), seed)

    def manual_seed_all(seed: int) -> None:
        rt.rng.manual_seed_all(seed)

    def initial_seed() -> int:
        return rt.rng.initial_seed(rt.current_device())

    def get_rng_state(device=None) -> torch.Tensor:
        return rt.rng.get_state(_index(device))

    def set_rng_state(state: torch.Tensor, device=None) -> None:
        rt.rng.set_state(_index(device), state)

    def Stream(device=None) -> _Stream:  # noqa: N802 - torch.cuda.Stream's name
        """A new stream on a device (default: the current device)."""
        rt.note_cross_stream()     # from now on, writes are tracked per stream
        return _Stream(rt.device(_index(device)))

    def Event(device=None) -> _Event:  # noqa: N802
        return _Event(rt.device(_index(device)))

    def current_stream(device=None) -> _Stream:
        return rt.streams.current(_index(device))

    def default_stream(device=None) -> _Stream:
        return rt.streams.default[_index(device)]

    @contextlib.contextmanager
    def stream(s: _Stream):
        """Run the ops of the block on stream `s` (for s's device)."""
        previous = rt.streams.set_current(s)
        try:
            yield s
        finally:
            rt.streams.set_current(previous)

    for fn in (Stream, Event, current_stream, default_stream, stream, is_available, device_count, current_device, set_device, synchronize, get_device_name,
               get_device_properties, manual_seed, manual_seed_all, initial_seed, get_rng_state,
               set_rng_state):
        setattr(mod, fn.__name__, fn)
    mod.is_initialized = lambda: True
    mod._is_in_bad_fork = lambda: False
    mod._lazy_init = lambda: None
    mod.get_amp_supported_dtype = lambda: [torch.float16, torch.bfloat16]
    return mod
