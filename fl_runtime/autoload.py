"""Entry point for PyTorch's `torch.backends` autoload: `import torch` runs it.

It must never raise: an exception here would break `import torch` for the
user.  Importing fl_runtime keeps any start-up error; this turns it into a
warning, and `import torch_fl` raises it.  When fl_runtime itself is being
imported (it imports torch, which autoloads us), its import finishes the
start-up, so there is nothing to do here.
"""
from __future__ import annotations

import sys
import warnings


def autoload() -> None:
    try:
        if "fl_runtime" in sys.modules and not hasattr(sys.modules["fl_runtime"], "startup_error"):
            return   # fl_runtime is mid-import and will start the runtime itself
        import fl_runtime
        error = fl_runtime.startup_error
    except Exception as exc:  # noqa: BLE001 - autoload must never raise
        error = exc
    if error is not None:
        warnings.warn(f"torch_fl could not start, the 'fl' device is unavailable: {error}", stacklevel=2)
