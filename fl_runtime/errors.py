"""Every error Torch-FL raises, one class per thing that can go wrong.

Each message names the thing (key, plugin, op, device) and what to do next.
"""
from __future__ import annotations

import torch

from fl_runtime import tracebacks


class FLError(RuntimeError):
    """Base class of every Torch-FL error.

    Each one is remembered (weakly), so that the runtime's frames in its traceback stop
    holding tensors by the time device memory is next needed (fl_runtime.tracebacks)."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        tracebacks.remember(self)


class TorchVersionError(FLError, ImportError):
    """The installed PyTorch is outside the range this Torch-FL supports."""


class ConfigError(FLError, ValueError):
    """The configuration file is unreadable or a key has a bad value."""

    def __init__(self, key: str, problem: str, path: str | None = None) -> None:
        where = f" (in {path})" if path else ""
        super().__init__(f"config key '{key}': {problem}{where}")
        self.key = key
        self.path = path


class PluginLoadError(FLError):
    """A vendor plugin could not be loaded (missing file, symbol, bad table)."""

    def __init__(self, plugin: str, problem: str) -> None:
        super().__init__(f"plugin '{plugin}': {problem}")
        self.plugin = plugin


class IncompatibleABIError(PluginLoadError):
    """A vendor plugin speaks an ABI version this runtime does not accept."""


class PluginProbeError(PluginLoadError):
    """A plugin crashed or hung in its isolated probe (fl_runtime.plugins.probe), so it
    was never loaded into this process.  `outcome` is 'crashed' or 'hung'; `signal`
    the signal's name (SIGABRT, SIGSEGV ...) for a crash, else ''."""

    def __init__(self, plugin: str, problem: str, outcome: str, signal: str = "") -> None:
        super().__init__(plugin, problem)
        self.outcome = outcome
        self.signal = signal


class UncertifiedPluginError(PluginLoadError):
    """certification.require_certified is on and a plugin has no valid certificate.

    `status` is the fl_runtime.certification.CertificationStatus saying why
    (`status.code`: no_certificate, hash_mismatch, bad_signature, untrusted_key,
    abi/torch/suite_mismatch, malformed)."""

    def __init__(self, plugin: str, status) -> None:
        super().__init__(plugin, f"refused before loading because certification.require_certified is on: "
                         f"{status.reason} (or set certification.require_certified: false to load "
                         "uncertified plugins)")
        self.status = status
        self.code = status.code


class VendorError(FLError):
    """A vendor call returned an error status."""

    def __init__(self, call: str, status: int, status_name: str, message: str, plugin: str) -> None:
        detail = message or "(the plugin gave no message)"
        super().__init__(f"{call} failed in plugin '{plugin}' with {status_name}: {detail}")
        self.call = call
        self.status = status
        self.status_name = status_name
        self.vendor_message = message
        self.plugin = plugin


class UnsupportedOpError(FLError, NotImplementedError):
    """No kernel and no permitted fallback for an op on a device."""

    def __init__(self, op: str, device: str, hint: str) -> None:
        super().__init__(f"operator '{op}' has no kernel on {device}: {hint}")
        self.op = op
        self.device = device


class NativeBridgeOffError(FLError, NotImplementedError):
    """A PyTorch hook that only the native bridge serves (docs/users/native-bridge.md), asked
    for while the bridge is off in this process; `reason` says why, the message what to do."""

    def __init__(self, what: str, reason: str, fix: str) -> None:
        super().__init__(f"{what} needs Torch-FL's native bridge, which is off in this process "
                         f"({reason}); {fix}")
        self.what = what
        self.reason = reason


class UnsupportedDtypeError(FLError, TypeError):
    """A dtype fl tensors cannot hold (the ABI has no code for it)."""

    def __init__(self, dtype, device: str, supported: list[str]) -> None:
        super().__init__(f"{dtype} tensors cannot live on {device}: the Torch-FL ABI has no code for "
                         f"this dtype (supported: {', '.join(supported)}); keep this tensor on the CPU "
                         "or convert it first, e.g. .to(torch.int64)")
        self.dtype = dtype


class DeviceNotFoundError(FLError, IndexError):
    """A device index that does not exist."""


class FLOutOfMemoryError(torch.OutOfMemoryError, FLError):
    """Device memory is exhausted even after the cache was released."""


class StackLockError(FLError):
    """A `torch-fl lock` file cannot be used (docs/operators/locks-and-upgrades.md)."""


class LockFileError(StackLockError):
    """The lock file is missing or is not a lock file."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"lock file {path} {problem}")
        self.path = path


class LockMismatchError(StackLockError):
    """The config's `require_lock` names a lock the running stack does not match.

    `differences` holds one 'field: locked X, running Y' line per difference."""

    def __init__(self, path: str, differences: list[str]) -> None:
        listed = "\n  ".join(differences)
        super().__init__(f"refusing to start: the running stack differs from lock file {path} "
                         f"(config key require_lock) in {len(differences)} field(s):\n  {listed}\n"
                         "reinstall the locked versions, or, if this stack was verified, write a new lock "
                         "with `torch-fl lock` (see `torch-fl check`)")
        self.path = path
        self.differences = differences


class FLBadForkError(FLError):
    """fl used in a process forked after its parent started the runtime."""

    EXPLANATION = ("fl devices cannot be used in a forked subprocess: the parent process started the "
                   "Torch-FL runtime before fork(), and a device driver's state does not survive fork(). Start "
                   "workers with the 'spawn' method (torch.multiprocessing.set_start_method('spawn') or "
                   "multiprocessing.get_context('spawn')), or keep the child's work on the CPU")

    def __init__(self, what: str) -> None:
        # Re-raised in the parent (DataLoader's ExceptionWrapper calls the class with the whole
        # message, traceback included), the explanation is already there: not twice.
        super().__init__(what if self.EXPLANATION in what else f"{what}: {self.EXPLANATION}")


class FLSharingError(FLError):
    """An fl tensor or storage that cannot be sent to another process: its plugin has no
    inter-process memory (fl_ipc.h), or it was itself received from one (docs/users/ipc.md)."""

    def __init__(self, what: str, reason: str | None = None) -> None:
        reason = reason or "its plugin has no inter-process device memory"
        super().__init__(
            f"cannot send {what} to another process: {reason}. "
            "Send a CPU copy instead (t.cpu(), which multiprocessing shares without copying) and move it to "
            "fl in the receiving process")


class FLGraphCaptureError(FLError):
    """A graph capture (torch.accelerator.Graph on fl) met something a replay could not
    repeat, or a capture call out of order (docs/users/graph-capture.md)."""

    def __init__(self, op: str, why: str) -> None:
        super().__init__(f"graph capture on fl: {op}: {why}")
        self.op = op


class FLCompileError(FLError):
    """torch.compile's Inductor produced something fl cannot run (docs/users/compile.md)."""


class GraphReplayError(FLError):
    """A graph compiled with backend="fl" met, while replaying its launches, a layout that
    differs from its record or a launch the vendor declined; the graph runs eagerly from its
    next call (docs/users/graph-path.md)."""


class FLIntegrationError(FLError):
    """A third-party framework asked for a combination on fl it would run wrongly
    (docs/users/do-no-harm.md); the message names the supported recipe."""
