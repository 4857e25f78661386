"""Lightning's Trainer and Fabric on fl: `accelerator="fl"` (README, "Distributed training").

`install()` runs when the runtime is installed into PyTorch.  It imports
nothing from Lightning: it arranges for `register()` to run right after
`lightning.pytorch` has been imported (hook.py), or at once if it already
has been.  Registering imports accelerator.py and connectors.py, which
import Lightning.
"""
from __future__ import annotations

import threading

from fl_runtime.integration.lightning.hook import call_after_import

#: The module whose import completes Lightning (lightning/__init__ imports fabric, then this).
WATCHED = "lightning.pytorch"
_lock = threading.Lock()
_registered = False


def install() -> None:
    """Register with Lightning when (if ever) it is imported in this process."""
    call_after_import(WATCHED, register)


def register() -> None:
    """Add the fl accelerator to Lightning's and Fabric's registries; make their CUDA-only spots fl-aware."""
    global _registered
    with _lock:
        if _registered:
            return
        from lightning.fabric.accelerators import ACCELERATOR_REGISTRY
        from lightning.pytorch.accelerators import AcceleratorRegistry

        from fl_runtime.integration.lightning import connectors
        from fl_runtime.integration.lightning.accelerator import FabricFLAccelerator, FLAccelerator
        FLAccelerator.register_accelerators(AcceleratorRegistry)
        FabricFLAccelerator.register_accelerators(ACCELERATOR_REGISTRY)
        connectors.install()
        _registered = True
