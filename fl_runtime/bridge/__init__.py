"""The native bridge: every device hook PyTorch offers only to C++, without tying anyone to
a torch version (docs/users/native-bridge.md).

PyTorch's Python backend route forwards three hook methods and a device guard that knows one
device; generators, pinned memory, storage resizes, torch.accelerator, the device count and
the current device per thread exist only as C++ interfaces.  The bridge is a small C++
companion of the runtime (csrc/), compiled against whichever PyTorch is installed (build.py)
and registered in place of the Python hooks.  Vendors are untouched: plugins implement the C
ABI only, and one plugin binary serves every admitted PyTorch minor.

`TORCH_FL_BRIDGE`: unset, the bridge is used where one is built for the running PyTorch (at
`pip install`, or by `torch-fl build-bridge`; a start never compiles), else the Python route
runs, `status()` says why and the first fl use says which command builds it (off.py); `0`
turns it off; `1` requires it (a start fails, naming the reason, when none is built).
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
import os
from dataclasses import dataclass

SWITCH_ENV = "TORCH_FL_BRIDGE"
MODULE_NAME = "fl_runtime.bridge._fl_bridge"


@dataclass(frozen=True)
class BridgeStatus:
    """Whether the bridge runs in this process, from where, or why not (torch-fl doctor)."""
    active: bool
    detail: str                 # the library's path, or the reason it is off
    required: bool = False


_status = BridgeStatus(False, "not loaded yet (the runtime has not started)")


def status() -> BridgeStatus:
    return _status


def load():
    """The bridge module built for the running PyTorch (prebuilt or cached), or None on the
    Python route; status() then says why.  Never compiles (build.py).  Raises BridgeBuildError
    only when TORCH_FL_BRIDGE=1 asks for the bridge and none can be loaded."""
    global _status
    from fl_runtime.bridge import build
    setting = os.environ.get(SWITCH_ENV, "")
    required = setting == "1"
    if setting == "0":
        _status = BridgeStatus(False, f"off: {SWITCH_ENV}=0")
        return None
    try:
        path = build.find_built()
        if path is None:
            raise build.BridgeBuildError(_not_built(build))
        module = _import(path)
    except (build.BridgeBuildError, ImportError, OSError) as exc:
        _status = BridgeStatus(False, f"off: {exc}", required)
        if required:
            raise build.BridgeBuildError(f"{SWITCH_ENV}=1 asks for the native bridge, which cannot be had: "
                                         f"{exc}") from exc
        return None
    _status = BridgeStatus(True, str(path), required)
    return module


def _not_built(build) -> str:
    import platform

    import torch
    text = f"none is built for torch {torch.__version__} on Python {platform.python_version()}"
    try:
        build.compiler()
    except build.BridgeBuildError as exc:
        text += f"; {exc}"
    failure = build.install_failure()
    if failure is not None:
        text += f"; building it at pip install (torch {failure.get('torch')}) failed: {failure.get('error')}"
    return text


def install(rt, module) -> None:
    """Register the bridge with PyTorch for `rt`, and move the runtime's per-thread state and
    RNG onto it (before any kernel is registered: they capture rt.current_device)."""
    from fl_runtime.bridge.calls import BridgeCalls
    from fl_runtime.bridge.rng import NativeRNG
    module.install(BridgeCalls(rt, host_memory(rt)), len(rt.devices))
    rt.use_native_thread_state(module)
    rt.rng = NativeRNG(module, len(rt.devices))
    use_native_allocators(rt, module)


def use_native_allocators(rt, module) -> None:
    """One C++ caching allocator per device (csrc/caching_allocator.h), which the runtime's
    Python code then uses too (devices/native_allocator.py): one pool per device."""
    from fl_runtime.abi import ffi
    from fl_runtime.devices import memory_history
    from fl_runtime.devices.native_allocator import NativeAllocator
    held = [a.device.index for a in rt.allocators if a.stats.reserved]
    if held:       # nothing allocates before the bridge is installed (integration/backend.py)
        raise RuntimeError(f"the native bridge was installed after fl:{held[0]} allocated memory")
    module.install_allocators([(int(ffi.cast("uintptr_t", d.plugin.api)), d.local_index, d.alignment,
                                d.total_memory, d.memory_limit) for d in rt.devices])
    rt.allocators = [NativeAllocator(d, rt._synchronizer(d.index), module, rt.streams) for d in rt.devices]
    memory_history.recorder.on_change = module.set_memory_history
    rt.launcher.use_native(module)     # the steady state of eager ops in C++ (csrc/eager_kernel.h)
    from fl_runtime.devices.streams import Stream
    Stream.native = module             # streams made from now on are the bridge's (csrc/stream_registry.h)
    from fl_runtime.ops.graph import graph_capture
    graph_capture.use_runtime(rt)      # torch.accelerator.Graph (csrc/graph.h)


def _import(path):
    loader = importlib.machinery.ExtensionFileLoader(MODULE_NAME, str(path))
    spec = importlib.util.spec_from_file_location(MODULE_NAME, str(path), loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def host_memory(rt):
    """(alloc(nbytes) -> address or 0, free(address)) over the first plugin that offers ABI 1.2's
    pinned host-memory extension, or None.  PyTorch's pinned memory is one pool per process,
    not per device: blocks from one vendor are ordinary host memory to another, whose copies
    stay correct (the runtime holds every host source until its stream has read it).  A plugin
    whose extension answers FL_ERROR_NOT_SUPPORTED (a skeleton) counts as not offering it."""
    from fl_runtime import abi
    from fl_runtime.errors import VendorError
    from fl_runtime.plugins.extensions import host_memory_of
    for device in rt.devices:
        extension = host_memory_of(device.plugin)
        if extension is None:
            continue

        def alloc(nbytes: int, extension=extension, local=device.local_index) -> int:
            try:
                return extension.alloc(local, nbytes)
            except VendorError as exc:
                if exc.status == abi.ERROR_NOT_SUPPORTED:
                    return 0          # the bridge's own page-aligned memory instead
                raise
        return alloc, extension.free
    return None
