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

import sys
import warnings


_deferred = False     # autoload ran while fl_runtime was mid-import


def autoload() -> None:
    global _deferred
    try:
        package = sys.modules.get("fl_runtime")
        if package is not None and not hasattr(package, "init"):
            _deferred = True      # fl_runtime is mid-import: it calls finish_deferred() at its end
            return
        from fl_runtime.integration import process
        process.start()
    except Exception as exc:  # noqa: BLE001 - autoload must never raise
        _warn(exc)


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


def _warn(error: Exception) -> None:
    try:
        warnings.warn(f"torch_fl could not start, the 'fl' device is unavailable: {error}", stacklevel=2)
    except Exception:  # noqa: BLE001 - a warnings filter of "error" turns this into an exception
        print(f"torch_fl could not start, the 'fl' device is unavailable: {error}", file=sys.stderr)
