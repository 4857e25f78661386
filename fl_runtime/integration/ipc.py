"""fl tensors and storages sent to another process: a clear error, never a hang.

`torch.multiprocessing` shares a tensor by sharing its memory (a file
descriptor for CPU memory, a CUDA IPC handle for CUDA).  The Torch-FL ABI has
no inter-process device memory, and PyTorch's reducer fails on an fl tensor
with `_share_fd_: only available on CPU`.  On a multiprocessing Queue that
failure happens in the queue's feeder thread: `put` returns, the item is
dropped, and the consumer waits forever.

This module puts a reducer in front of PyTorch's for tensors, Parameters and
storages (multiprocessing.reduction.register, the table ForkingPickler reads).
Non-fl objects go to PyTorch's reducer unchanged.  For an fl one:
- pickled on the caller's thread (Pipe.send, SimpleQueue.put, Pool arguments):
  FLSharingError is raised right there, at the call;
- pickled in a Queue's feeder thread: the error is logged in the sender, and
  the item sent is a marker whose unpickling raises FLSharingError, so the
  consumer's `get()` fails with the same message instead of hanging.
"""
from __future__ import annotations

import threading
from multiprocessing import reduction

import torch
import torch.multiprocessing  # noqa: F401  (registers PyTorch's reducers, which ours wrap)

from fl_runtime.devices.registry import DEVICE_TYPE
from fl_runtime.errors import FLSharingError
from fl_runtime.logs import logger

_FEEDER_THREAD = "QueueFeederThread"      # multiprocessing.queues.Queue's background pickler
_installed: list = []


def _refuse(what: str) -> None:
    """Unpickled in the receiver: the sender tried to share fl memory."""
    raise FLSharingError(what)


def _describe(obj) -> str:
    if isinstance(obj, torch.Tensor):
        return f"an fl tensor ({tuple(obj.shape)}, {obj.dtype}, {obj.device})"
    return f"an fl storage ({obj.device})"


def _device_type(obj) -> str:
    # TypedStorage.device warns that TypedStorage is deprecated: a DataLoader worker sending
    # CPU batches would print that warning once fl is installed (PyTorch's reducer reads the
    # untyped storage too, silently)
    if isinstance(obj, torch.TypedStorage):
        obj = obj._untyped_storage
    return obj.device.type


def _guarded(original):
    def reduce(obj):
        if _device_type(obj) != DEVICE_TYPE:
            return original(obj)
        what = _describe(obj)
        if threading.current_thread().name != _FEEDER_THREAD:
            raise FLSharingError(what)
        logger.error("%s", FLSharingError(what))    # put() already returned: say it in the sender too
        return _refuse, (what,)
    return reduce


def install() -> None:
    """Wrap PyTorch's reducers of tensor and storage types (once per process)."""
    if _installed:
        return
    table = reduction.ForkingPickler._extra_reducers
    types = [torch.Tensor, torch.nn.Parameter, torch.UntypedStorage, torch.TypedStorage,
             *torch._tensor_classes, *torch._storage_classes]
    for cls in dict.fromkeys(types):
        original = table.get(cls)
        if original is not None:
            reduction.register(cls, _guarded(original))
    _installed.append(True)
