"""Entry point for PyTorch's `torch.backends` autoload: `import torch` runs it.

It must never raise (an exception here would break `import torch` for the
user, and under `python -W error` a warning is an exception too): a start-up
failure is logged, kept in fl_runtime.startup_error, and raised by
`import torch_fl`.  When fl_runtime is itself still being imported (someone
imported it, or torch_fl, before torch: it imports torch, which autoloads us),
the start is deferred to the end of fl_runtime's import (`finish_deferred`), so
the `fl` device exists after `import torch` whatever the import order; a failure
there is kept quietly, for `import torch_fl` to raise.
"""
from __future__ import annotations

import os
import sys
import warnings

# Do no harm (docs/users/do-no-harm.md): PyTorch makes a registered PrivateUse1 backend its current
# accelerator ahead of CUDA and ROCm, so autoloading beside such a GPU would move every piece
# of device-agnostic code (torch.accelerator, accelerate, DataLoader pinning) off the GPU.  So
# the autoload stands aside where the installed PyTorch drives a GPU of this machine (found
# from its device nodes: nothing is initialised, no fork is poisoned); `import torch_fl` is
# then the explicit ask, and TORCH_FL_AUTOLOAD=1 forces the autoload anyway.
FORCE_ENV = "TORCH_FL_AUTOLOAD"
_GPU_NODES = {"cuda": "/dev/nvidiactl", "hip": "/dev/kfd"}

_deferred = False     # autoload ran while fl_runtime was mid-import
stood_aside: str | None = None     # why the autoload did not start the runtime, for doctor


def gpu_accelerator_present() -> str | None:
    """The GPU PyTorch would otherwise make its accelerator ('cuda'/'hip'), or None."""
    torch_version = sys.modules.get("torch.version")
    if torch_version is None:      # torch imports it early; a tiny module of constants
        import importlib
        torch_version = importlib.import_module("torch.version")
    for backend, node in _GPU_NODES.items():
        if getattr(torch_version, backend, None) and os.path.exists(node):
            return backend
    return None


def autoload() -> None:
    global _deferred, stood_aside
    try:
        gpu = None if os.environ.get(FORCE_ENV) == "1" else gpu_accelerator_present()
        if gpu is not None:
            stood_aside = (f"PyTorch drives a {gpu.upper()} GPU here, which stays its accelerator: "
                           f"import torch_fl to use fl devices (or set {FORCE_ENV}=1)")
            return
        package = sys.modules.get("fl_runtime")
        if package is not None and not hasattr(package, "init"):
            _deferred = True      # fl_runtime is mid-import: it calls finish_deferred() at its end
            return
        from fl_runtime.integration import process
        process.start()
    except Exception as exc:  # noqa: BLE001 - autoload must never raise
        _warn(exc)
        _stand_in(exc)


def finish_deferred() -> None:
    """The start autoload deferred, at the end of fl_runtime's import; never raises (the
    error stays in fl_runtime.startup_error, and torch_fl raises it)."""
    global _deferred
    if not _deferred:
        return
    _deferred = False
    from fl_runtime.integration import process
    try:
        process.start()
    except Exception:  # noqa: BLE001 - kept in process.startup_error
        pass


def _stand_in(error: Exception) -> None:
    """The first use of "fl" raises `error`, not PyTorch's unknown-device error (unstarted.py)."""
    try:
        from fl_runtime.integration import unstarted
        unstarted.stand_in(error)
    except Exception:  # noqa: BLE001 - autoload must never raise
        pass


def _warn(error: Exception) -> None:
    try:
        warnings.warn(f"torch_fl could not start, the 'fl' device is unavailable: {error}", stacklevel=2)
    except Exception:  # noqa: BLE001 - a warnings filter of "error" turns this into an exception
        print(f"torch_fl could not start, the 'fl' device is unavailable: {error}", file=sys.stderr)
