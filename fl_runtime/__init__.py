"""Torch-FL runtime: every vendor's devices as PyTorch devices fl:0 ... fl:N.

    import torch, torch_fl
    torch_fl.list_devices()
    x = torch.randn(1000, 1000, device="fl:0")

Importing this package checks the PyTorch version, reads the config, loads the
vendor plugins and registers the `fl` device with PyTorch.  A failure there is
kept, not raised, so that PyTorch's autoload (which imports this package
inside `import torch`) never breaks `import torch`; `import torch_fl` and every
call below raise it.
"""
from __future__ import annotations

from . import op_stats
from .diagnostics import remember_recent_log   # before init: doctor shows start-up warnings
from .coverage import CoverageReport, coverage
from .profiler import Profile, profile
from .errors import (ConfigError, DeviceNotFoundError, UnsupportedDtypeError, FLError, FLOutOfMemoryError,
                     IncompatibleABIError, PluginLoadError, TorchVersionError, UncertifiedPluginError,
                     UnsupportedOpError, VendorError)
from .runtime import Runtime
from .storage import last_hidden_error
from .torch_compat import check_torch_version
from .version import __version__

_runtime: Runtime | None = None
startup_error: Exception | None = None
remember_recent_log()


def init() -> Runtime:
    """Start the runtime once per process (import does this); returns it."""
    global _runtime, startup_error
    if _runtime is None:
        from .backend import install
        try:
            check_torch_version()
            runtime = Runtime()
            install(runtime)
        except Exception as exc:
            startup_error = exc
            raise
        startup_error = None
        _runtime = runtime
        from .profiler import start_from_env
        start_from_env()          # TORCH_FL_PROFILE=path profiles the whole process
    return _runtime


def runtime() -> Runtime:
    return init()


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


try:
    init()
except Exception:  # kept in startup_error; raised again by torch_fl and by every call above
    pass

__all__ = ["__version__", "init", "runtime", "list_devices", "device_count", "why_no_devices",
           "synchronize", "plugin_certifications", "last_hidden_error", "op_stats", "profile", "Profile", "coverage",
           "CoverageReport", "FLError", "ConfigError", "PluginLoadError", "IncompatibleABIError",
           "VendorError", "UnsupportedOpError", "DeviceNotFoundError", "UnsupportedDtypeError", "FLOutOfMemoryError",
           "TorchVersionError", "UncertifiedPluginError"]
