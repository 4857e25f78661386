"""`torch.fl`: the torch.cuda-shaped module PyTorch finds for the fl device.

PyTorch itself calls into it: torch.manual_seed -> manual_seed_all,
torch.autocast("fl") -> get_amp_supported_dtype, storage moves and
torch.load -> device(i), is_available, device_count.  Each group lives in
its own builder below; `make_device_module` puts them on one module.
"""
from __future__ import annotations

import contextlib
import types

import torch

from fl_runtime.devices import allocator as _memory
from fl_runtime.devices import memory_history
from fl_runtime.devices.registry import DEVICE_TYPE
from fl_runtime.devices.streams import Event as _Event
from fl_runtime.devices.streams import Stream as _Stream
from fl_runtime.integration.fork import lifecycle_api

BACKEND = DEVICE_TYPE


def make_device_module(rt) -> types.ModuleType:
    mod = types.ModuleType("torch.fl", "Torch-FL devices (fl:N), the torch.cuda of Torch-FL.")
    index_of = _indexer(rt)
    for group in (_devices(rt, index_of), _random(rt, index_of), _streams(rt, index_of),
                  _memory_api(rt, index_of), _amp(), _graphs_and_sharing()):
        for name, value in group.items():
            setattr(mod, name, value)
    mod._utils = types.SimpleNamespace(_get_device_index=lambda device, optional=False: index_of(device))
    for name, value in lifecycle_api(lambda: rt).items():     # init, is_initialized, bad fork
        setattr(mod, name, value)
    return mod


def _indexer(rt):
    def index_of(device) -> int:
        """The fl index of None (current), 1, "fl:1", "fl", torch.device("fl", 1)."""
        if device is None:
            return rt.current_device()
        if isinstance(device, int):
            return device
        device = torch.device(device)
        if device.type != BACKEND:
            raise ValueError(f"expected an fl device, got '{device}'")
        return rt.current_device() if device.index is None else device.index
    return index_of


class _DeviceContext:
    """`with torch.fl.device(i):` makes fl:i current inside the block (-1/None: unchanged)."""

    def __init__(self, rt, index: int | None) -> None:
        self._rt = rt
        self._index = index
        self._previous: int | None = None

    def __enter__(self):
        self._previous = self._rt.current_device()
        if self._index is not None and self._index >= 0:
            self._rt.set_current_device(self._index)
        return self

    def __exit__(self, *exc) -> None:
        self._rt.set_current_device(self._previous)


def _devices(rt, index_of) -> dict:
    def is_available() -> bool:
        return bool(rt.devices)

    def device_count() -> int:
        return len(rt.devices)

    def current_device() -> int:
        return rt.current_device()

    def set_device(device) -> None:
        rt.set_current_device(index_of(device))

    def device(device) -> _DeviceContext:
        return _DeviceContext(rt, None if device is None else index_of(device))

    def synchronize(device=None) -> None:
        """Wait for all work queued on a device (default: the current one)."""
        rt.synchronize(index_of(device))

    def get_device_name(device=None) -> str:
        return rt.device(index_of(device)).name

    def get_device_properties(device=None):
        return rt.device(index_of(device))

    return {"is_available": is_available, "device_count": device_count, "current_device": current_device,
            "set_device": set_device, "device": device, "synchronize": synchronize,
            "get_device_name": get_device_name, "get_device_properties": get_device_properties}


def _random(rt, index_of) -> dict:
    def manual_seed(seed: int) -> None:
        rt.rng.manual_seed(rt.current_device(), seed)

    def manual_seed_all(seed: int) -> None:
        rt.rng.manual_seed_all(seed)

    def seed() -> None:
        manual_seed(torch.seed())

    def seed_all() -> None:
        manual_seed_all(torch.seed())

    def initial_seed() -> int:
        return rt.rng.initial_seed(rt.current_device())

    def get_rng_state(device=None) -> torch.Tensor:
        return rt.rng.get_state(index_of(device))

    def set_rng_state(new_state: torch.Tensor, device=None) -> None:
        rt.rng.set_state(index_of(device), new_state)

    def get_rng_state_all() -> list[torch.Tensor]:
        return [rt.rng.get_state(i) for i in range(len(rt.devices))]

    def set_rng_state_all(new_states) -> None:
        for i, state in enumerate(new_states):
            rt.rng.set_state(i, state)

    return {"manual_seed": manual_seed, "manual_seed_all": manual_seed_all, "seed": seed, "seed_all": seed_all,
            "initial_seed": initial_seed, "get_rng_state": get_rng_state, "set_rng_state": set_rng_state,
            "get_rng_state_all": get_rng_state_all, "set_rng_state_all": set_rng_state_all}


def _streams(rt, index_of) -> dict:
    def on_new_stream(s: _Stream) -> None:
        rt.note_cross_stream()     # from now on, writes are tracked per stream
        rt.streams.remember(s)
    _Stream.resolve_device = lambda device: rt.device(index_of(device))
    _Stream.on_new_stream = on_new_stream
    _Stream.registry = rt.streams

    def Event(enable_timing: bool = False, blocking: bool = False, interprocess: bool = False,
              device=None) -> _Event:
        """torch.cuda.Event's signature; `blocking`/`interprocess` have no ABI meaning and must be False."""
        if interprocess:
            raise ValueError("torch.fl.Event(interprocess=True): the Torch-FL ABI has no IPC events")
        return _Event(rt.device(index_of(device)), enable_timing=enable_timing, registry=rt.streams)

    def current_stream(device=None) -> _Stream:
        return rt.streams.current(index_of(device))

    def default_stream(device=None) -> _Stream:
        return rt.streams.default[index_of(device)]

    def set_stream(stream: _Stream) -> None:
        rt.streams.set_current(stream)

    @contextlib.contextmanager
    def stream(stream: _Stream | None):
        """Run the ops of the block on `stream` (for its device); None: no change."""
        if stream is None:
            yield None
            return
        previous = rt.streams.set_current(stream)
        try:
            yield stream
        finally:
            rt.streams.set_current(previous)

    return {"Stream": _Stream, "Event": Event, "current_stream": current_stream,
            "default_stream": default_stream, "set_stream": set_stream, "stream": stream}


def _memory_api(rt, index_of) -> dict:
    def allocator(device):
        return rt.allocators[rt.device(index_of(device)).index]

    def memory_allocated(device=None) -> int:
        return _memory.memory_stats(allocator(device))["allocated_bytes.all.current"]

    def max_memory_allocated(device=None) -> int:
        return _memory.memory_stats(allocator(device))["allocated_bytes.all.peak"]

    def memory_reserved(device=None) -> int:
        return _memory.memory_stats(allocator(device))["reserved_bytes.all.current"]

    def max_memory_reserved(device=None) -> int:
        return _memory.memory_stats(allocator(device))["reserved_bytes.all.peak"]

    def reset_peak_memory_stats(device=None) -> None:
        alloc = allocator(device)
        alloc.settle()
        alloc.stats.reset_peaks()       # the C++ counters with the bridge (native_allocator.py)

    def reset_accumulated_memory_stats(device=None) -> None:
        alloc = allocator(device)
        alloc.settle()
        alloc.stats.reset_accumulated()

    def empty_cache() -> None:
        """Return every cached block of every device to the vendor."""
        for alloc in rt.allocators:
            alloc.empty_cache()

    def memory_stats(device=None) -> dict[str, int]:
        return _memory.memory_stats(allocator(device))

    def memory_summary(device=None, abbreviated: bool = False) -> str:
        return _memory.memory_summary(allocator(device))

    def set_per_process_memory_fraction(fraction: float, device=None) -> None:
        """Cap this process at fraction * total memory of a device (overrides the config)."""
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
            raise ValueError(f"set_per_process_memory_fraction: fraction must be in (0, 1], got {fraction!r}")
        index = rt.device(index_of(device)).index
        rt.devices[index].memory_fraction = float(fraction)
        rt.allocators[index].limit_changed()

    def get_per_process_memory_fraction(device=None) -> float:
        return rt.device(index_of(device)).memory_fraction

    def mem_get_info(device=None) -> tuple[int, int]:
        """(free, total) bytes of the device, as its driver reports them."""
        return _memory.device_memory_info(allocator(device))

    return {"memory_allocated": memory_allocated, "max_memory_allocated": max_memory_allocated,
            "memory_reserved": memory_reserved, "max_memory_reserved": max_memory_reserved,
            "reset_peak_memory_stats": reset_peak_memory_stats,
            "reset_accumulated_memory_stats": reset_accumulated_memory_stats, "empty_cache": empty_cache,
            "memory_stats": memory_stats, "memory_summary": memory_summary,
            "set_per_process_memory_fraction": set_per_process_memory_fraction,
            "get_per_process_memory_fraction": get_per_process_memory_fraction, "mem_get_info": mem_get_info,
            "memory": _history_module(rt, memory_stats, memory_allocated, memory_reserved, empty_cache,
                                      mem_get_info)}


def _history_module(rt, *functions) -> types.ModuleType:
    """torch.fl.memory: the recorder and snapshots (devices/memory_history.py), with the memory
    figures torch.cuda.memory also holds."""
    module = memory_history.memory_module(rt)
    for function in functions:
        setattr(module, function.__name__, function)
    return module


def _graphs_and_sharing() -> dict:
    """torch.cuda's graph-pool and IPC calls (ops/graph/graph_capture.py, integration/ipc.py)."""
    from fl_runtime.integration import ipc
    from fl_runtime.ops.graph import graph_capture

    def is_current_stream_capturing() -> bool:
        return graph_capture.capture_status(torch.accelerator.current_device_index())
    return {"ipc_collect": ipc.collect, "graph_pool_handle": graph_capture.graph_pool_handle,
            "is_current_stream_capturing": is_current_stream_capturing}


def _amp() -> dict:
    """What torch.autocast / GradScaler look for on a PrivateUse1 device module."""
    return {
        "get_amp_supported_dtype": lambda: [torch.float16, torch.bfloat16],
        "is_bf16_supported": lambda including_emulation=True: True,
        "is_autocast_enabled": lambda: torch.is_autocast_enabled(BACKEND),
        "set_autocast_enabled": lambda enabled: torch.set_autocast_enabled(BACKEND, enabled),
        "get_autocast_dtype": lambda: torch.get_autocast_dtype(BACKEND),
        "set_autocast_dtype": lambda dtype: torch.set_autocast_dtype(BACKEND, dtype),
    }
