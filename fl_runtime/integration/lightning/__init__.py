"""Lightning's Trainer and Fabric on fl: `accelerator="fl"` (docs/users/lightning-and-hf.md).

`install()` runs when the runtime is installed into PyTorch.  It imports
nothing from Lightning: it arranges for `register()` to run right after
`lightning.pytorch.trainer` (or the standalone `pytorch_lightning.trainer`) has
been imported (hook.py), or at once if it already has been.  Registering builds the
accelerators and wraps Lightning's CUDA-only spots for that distribution.
"""
from __future__ import annotations

import functools
import threading

from fl_runtime.integration.lightning.hook import call_after_import

#: Watched module -> accelerator.DISTRIBUTIONS key.  A distribution's `trainer` subpackage is
#: complete once the Trainer, its connectors, strategies and accelerators (and Fabric, which
#: they import) are: registering then works even while the top package is still importing,
#: which is the case when `import pytorch_lightning` (or `import lightning`) is what first
#: imports torch and so starts the runtime.  The top packages are watched too, for a
#: distribution already imported when the runtime starts; registering twice is a no-op.
WATCHED = {"lightning.pytorch.trainer": "", "pytorch_lightning.trainer": "PL",
           "lightning.pytorch": "", "pytorch_lightning": "PL"}
_lock = threading.Lock()
_registered: set[str] = set()


def install() -> None:
    """Register with each Lightning distribution when (if ever) it is imported in this process."""
    for module, prefix in WATCHED.items():
        call_after_import(module, functools.partial(register, prefix))


def register(prefix: str = "") -> None:
    """Add the fl accelerator to one distribution's Trainer and Fabric registries and make
    its CUDA-only spots fl-aware (connectors.py)."""
    with _lock:
        if prefix in _registered:
            return
        import importlib

        from fl_runtime.integration.lightning import accelerator, connectors
        fabric, trainer = accelerator.DISTRIBUTIONS[prefix]
        trainer_accelerator, fabric_accelerator = accelerator.build(prefix)
        trainer_registry = importlib.import_module(f"{trainer}.accelerators").AcceleratorRegistry
        fabric_registry = importlib.import_module(f"{fabric}.accelerators").ACCELERATOR_REGISTRY
        trainer_accelerator.register_accelerators(trainer_registry)
        fabric_accelerator.register_accelerators(fabric_registry)
        connectors.install(fabric, trainer)
        _registered.add(prefix)
