"""Entry point for PyTorch's `torch.backends` autoload: `import torch` runs it.

It must never raise (an exception here would break `import torch` for the
user, and under `python -W error` a warning is an exception too): a start-up
failure is logged, kept in fl_runtime.startup_error, and raised by
`import torch_fl`.  When fl_runtime is itself still being imported (it imports
torch, which autoloads us), there is nothing to do: whoever imported it
starts the runtime when it needs it.
"""
from __future__ import annotations

import sys
import warnings


def autoload() -> None:
    try:
        package = sys.modules.get("fl_runtime")
        if package is not None and not hasattr(package, "init"):
            return   # fl_runtime is mid-import; its importer starts the runtime
        from fl_runtime.integration import process
        process.start()
    except Exception as exc:  # noqa: BLE001 - autoload must never raise
        _warn(exc)


def _warn(error: Exception) -> None:
    try:
        warnings.warn(f"torch_fl could not start, the 'fl' device is unavailable: {error}", stacklevel=2)
    except Exception:  # noqa: BLE001 - a warnings filter of "error" turns this into an exception
        print(f"torch_fl could not start, the 'fl' device is unavailable: {error}", file=sys.stderr)
