"""`torch.fl.init()`, `is_initialized()` and the forked-child rule, as torch.cuda has them.

The runtime starts its vendor drivers when `torch_fl` is imported, so a
process forked after that inherits driver state that is not valid in the child
(PyTorch's rule for CUDA, docs/users/devices.md).  `os.register_at_fork` marks
such a child as "in a bad fork": `torch.fl._is_in_bad_fork()` is True (so
`torch.manual_seed` in a DataLoader worker skips fl, as it skips CUDA),
`is_initialized()` is False, and any use of an fl device -- a new tensor, an op,
a copy of an inherited fl tensor, `torch.fl.init()` -- raises FLBadForkError
naming the fix (the 'spawn' start method).  CPU work in the child is unaffected.

Every fl op, copy and allocation asks the runtime for a device's stream or its
DeviceInfo, so the child's runtime has both replaced by ones that raise.
"""
from __future__ import annotations

import os

from fl_runtime.errors import FLBadForkError


class _State:
    in_bad_fork = False
    registered = False


class _ForkedStreams:
    """Stands in for the runtime's stream registry in a forked child: any use raises."""

    def __getattr__(self, name: str):
        raise FLBadForkError("an fl operation")


def in_bad_fork() -> bool:
    return _State.in_bad_fork


def register(rt) -> None:
    """Mark children forked from now on (the runtime has started) as bad forks."""
    if _State.registered:
        return
    _State.registered = True
    os.register_at_fork(after_in_child=lambda: _poison(rt))


def _poison(rt) -> None:
    _State.in_bad_fork = True

    def device(index: int):
        raise FLBadForkError(f"using fl:{index}")
    rt.streams = _ForkedStreams()
    rt.device = device                # shadows Runtime.device in this process only


def lifecycle_api(start) -> dict:
    """The torch.cuda-shaped lifecycle functions; `start` starts (or returns) the runtime."""
    def init() -> None:
        """Start the fl runtime now (it starts on `import torch_fl` anyway)."""
        if _State.in_bad_fork:
            raise FLBadForkError("torch.fl.init()")
        start()

    def is_initialized() -> bool:
        return not _State.in_bad_fork

    def _lazy_init() -> None:
        init()

    return {"init": init, "is_initialized": is_initialized, "_lazy_init": _lazy_init,
            "_is_in_bad_fork": in_bad_fork}
