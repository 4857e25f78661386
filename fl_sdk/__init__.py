"""Torch-FL SDK: the ABI header and the tools a chip vendor uses."""
from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

INCLUDE_DIR = Path(__file__).resolve().parent / "include"
ABI_HEADER = INCLUDE_DIR / "fl_abi.h"


@contextlib.contextmanager
def runtime_not_started() -> Iterator[None]:
    """Import fl_runtime modules without starting a runtime.

    Importing fl_runtime imports torch, and torch's first import autoloads Torch-FL,
    which starts a runtime on every installed plugin (and warns about a library that
    is being built right now).  The SDK's tools use the runtime's modules (ABI,
    loader, CLI helpers), never a running runtime, so the autoload is off while they
    import; the environment is restored after, so nothing else is affected."""
    if "torch" in sys.modules:
        yield
        return
    saved = os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD")
    os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)
        else:
            os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = saved
