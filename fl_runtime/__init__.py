"""Torch-FL runtime: every vendor's devices as PyTorch devices fl:0 ... fl:N.

    import torch, torch_fl
    torch_fl.list_devices()
    x = torch.randn(1000, 1000, device="fl:0")

The runtime starts once per process (fl_runtime.integration.process): PyTorch's
autoload does it inside `import torch`, `import torch_fl` does it and raises
what went wrong, and every call below starts it when needed.  With PyTorch's
autoload off (TORCH_DEVICE_BACKEND_AUTOLOAD=0, as the conformance suite's
workers run), importing this package or one of its modules starts nothing.
The layers and what each may import: docs/contributors/layers.md.
"""
from __future__ import annotations

import importlib
import os

from fl_runtime.errors import (
    ConfigError,
    DeviceNotFoundError,
    FLBadForkError,
    FLError,
    FLOutOfMemoryError,
    FLSharingError,
    GraphReplayError,
    IncompatibleABIError,
    LockFileError,
    LockMismatchError,
    PluginLoadError,
    PluginProbeError,
    StackLockError,
    TorchVersionError,
    UncertifiedPluginError,
    UnsupportedDtypeError,
    UnsupportedOpError,
    VendorError,
)
from fl_runtime.integration import ipc, process
from fl_runtime.runtime import Runtime
from fl_runtime.tools import op_stats
from fl_runtime.tools.diagnostics import remember_recent_log
from fl_runtime.tools import torch_profiler
from fl_runtime.version import __version__

ipc.use_runtime_calls(process.start, process.started)   # fl tensors sent between processes

# Imported at first use: most programs never profile or measure coverage, and these
# modules (fx tracing, the trace writer) were ~3 ms of every start-up.
LAZY_NAMES = {"profile": "fl_runtime.tools.profiler", "Profile": "fl_runtime.tools.profiler",
              "coverage": "fl_runtime.tools.coverage", "CoverageReport": "fl_runtime.tools.coverage",
              "graph_summary": "fl_runtime.integration.graph_backend"}

remember_recent_log()      # before start-up: doctor shows start-up warnings
if os.environ.get("TORCH_FL_PROFILE"):   # profile the whole process (docs/users/profiling.md "Profiler")
    importlib.import_module(LAZY_NAMES["profile"]).start_from_env()
torch_profiler.install()   # torch.autograd.profiler.profile(use_device="fl"): host and fl times


def init() -> Runtime:
    """Start the runtime once per process (import torch_fl does this); returns it."""
    return process.start()


def runtime() -> Runtime:
    return process.start()


def __getattr__(name: str):
    if name == "startup_error":      # what the last start-up attempt raised, or None
        return process.startup_error
    if name in LAZY_NAMES:
        value = getattr(importlib.import_module(LAZY_NAMES[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'fl_runtime' has no attribute {name!r}")


def list_devices() -> list[dict]:
    """One dict per fl device (name, vendor, memory, plugin ...); [] with the reason logged."""
    return [d.as_dict() for d in init().devices]


def device_count() -> int:
    return len(init().devices)


def why_no_devices() -> str:
    """Why list_devices() is empty (or '' when it is not)."""
    rt = init()
    return "" if rt.devices else rt.empty_reason()


def synchronize(device: int | None = None) -> None:
    init().synchronize(device)


def last_hidden_error() -> BaseException | None:
    """The exception a tensor freed during its unwinding hid (docs/users/limits.md)."""
    from fl_runtime.devices.storage import last_hidden_error as hidden
    return hidden()


def plugin_certifications() -> list[dict]:
    """One dict per plugin library (plugin, path, loaded, certified, code, reason, key_id),
    loaded ones and those refused for want of a certificate; `Plugin.certification` has the rest."""
    rt = init()
    entries = [(plugin.name, plugin.source.path, True, plugin.certification) for plugin in rt.plugins]
    entries += [(failure.source.name, failure.source.path, False, failure.error.status)
                for failure in rt.load_failures if isinstance(failure.error, UncertifiedPluginError)]
    return [{"plugin": name, "path": path, "loaded": loaded, "certified": status.certified,
             "code": status.code, "reason": status.reason, "key_id": status.key_id}
            for name, path, loaded, status in entries]


from fl_runtime.integration.autoload import finish_deferred  # noqa: E402 (after the API it may start)

finish_deferred()          # PyTorch's autoload ran while this package was being imported

__all__ = ["__version__", "init", "runtime", "list_devices", "device_count", "why_no_devices",
           "synchronize", "plugin_certifications", "last_hidden_error", "op_stats", "profile", "Profile", "coverage",
           "CoverageReport", "FLError", "ConfigError", "PluginLoadError", "PluginProbeError", "IncompatibleABIError",
           "VendorError", "UnsupportedOpError", "DeviceNotFoundError", "UnsupportedDtypeError", "FLOutOfMemoryError",
           "TorchVersionError", "UncertifiedPluginError", "StackLockError", "LockFileError", "LockMismatchError",
           "FLBadForkError", "FLSharingError", "GraphReplayError", "graph_summary"]
