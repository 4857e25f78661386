"""The process's one runtime: started once, under a lock, and what went wrong if it did not.

PyTorch has one PrivateUse1 slot per process, so the runtime is a process
singleton.  `start()` checks the PyTorch version, builds the Runtime (config,
plugins, devices, op table), and registers it with PyTorch (integration.backend).  A failure is kept in
`startup_error` and raised again by every later `start()`, so PyTorch's
autoload can keep `import torch` working while `import torch_fl` raises it.
The started runtime lives until the process ends, and lets go of the devices
at exit in the order integration.shutdown describes.
Tools reach the runtime through `start()`, never through the package root.
"""
from __future__ import annotations

import threading

from fl_runtime.runtime import Runtime

_lock = threading.RLock()      # re-entrant: start-up may import torch, whose autoload calls start()
_runtime: Runtime | None = None
startup_error: Exception | None = None


def start() -> Runtime:
    """The started runtime (starting it on the first call, from any thread)."""
    global _runtime, startup_error
    if _runtime is not None:
        return _runtime
    with _lock:
        if _runtime is None:
            try:
                runtime = _build()
            except Exception as exc:
                startup_error = exc
                raise
            startup_error = None
            _runtime = runtime
    return _runtime


def started() -> Runtime | None:
    """The runtime if it has started, else None (never starts it)."""
    return _runtime


def _build() -> Runtime:
    from fl_runtime.integration import shutdown
    from fl_runtime.integration.backend import install
    from fl_runtime.torch_compat import check_torch_version
    from fl_runtime.integration import unstarted
    check_torch_version()
    runtime = Runtime()
    unstarted.withdraw()          # a failed autoload's stand-in for "fl" (unstarted.py)
    install(runtime)
    shutdown.install(runtime)
    return runtime
