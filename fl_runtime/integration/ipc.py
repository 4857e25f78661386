"""fl tensors and storages sent to another process: one device memory, as CUDA IPC (docs/users/ipc.md).

`torch.multiprocessing` shares a tensor by sharing its memory (a file descriptor for CPU
memory, a CUDA IPC handle for CUDA).  This module puts a reducer in front of PyTorch's for
tensors, Parameters and storages (multiprocessing.reduction.register, the table
ForkingPickler reads); non-fl objects go to PyTorch's reducer unchanged.

An fl storage whose plugin offers the IPC extension (fl_ipc.h, ABI 1.3) travels as a
handle: the receiver opens it and gets a storage of the same device memory, so writes on
either side are seen by the other once the writer synchronised (the sender synchronises
the device before exporting).  Lifetimes follow CUDA IPC:
- the sender keeps the storage (and so its block) alive until every receiver let go: each
  send leaves a marker file the receiver removes when its storage is freed, and the sender
  drops its reference once the file is gone (`collect`, run at each send and by
  torch.fl.ipc_collect(), as torch.cuda.ipc_collect());
- a storage received this way cannot be sent on (FLSharingError), as with CUDA;
- the receiver waits for its own work on the memory before closing the handle.

Without the extension (a plugin before ABI 1.3, or one that does not offer it) an fl
tensor cannot be shared, and the refusal is clear, never a hang:
- pickled on the caller's thread (Pipe.send, SimpleQueue.put, Pool arguments):
  FLSharingError is raised right there, at the call;
- pickled in a Queue's feeder thread: the error is logged in the sender, and the item sent
  is a marker whose unpickling raises FLSharingError, so the consumer's `get()` fails with
  the same message instead of hanging.
"""
from __future__ import annotations

import atexit
import itertools
import os
import tempfile
import threading
from multiprocessing import reduction

import torch
import torch.multiprocessing  # noqa: F401  (registers PyTorch's reducers, which ours wrap)

from fl_runtime.devices.registry import DEVICE_TYPE
from fl_runtime.errors import FLSharingError
from fl_runtime.logs import logger

_FEEDER_THREAD = "QueueFeederThread"      # multiprocessing.queues.Queue's background pickler
_MARKER_DIR = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
_installed: list = []
_sent: list = []                          # (marker path, storage) per send not yet released
_received: dict = {}                      # data_ptr -> open import, for the re-share refusal
_markers = itertools.count()
_lock = threading.Lock()


class _Import:
    """One opened handle: what wrap_block holds for the storage, and closes it on release."""

    def __init__(self, ipc, device_index: int, local: int, base: int, offset: int, size: int, marker: str) -> None:
        self.ipc, self.device_index, self.local = ipc, device_index, local
        self.base, self.ptr, self.size, self.marker = base, base + offset, size, marker


def _refuse(what: str, reason: str | None = None) -> None:
    """Unpickled in the receiver: the sender could not share fl memory."""
    raise FLSharingError(what, reason)


def _describe(obj) -> str:
    if isinstance(obj, torch.Tensor):
        return f"an fl tensor ({tuple(obj.shape)}, {obj.dtype}, {obj.device})"
    return f"an fl storage ({obj.device})"


def _untyped(obj):
    # TypedStorage.device warns that TypedStorage is deprecated: a DataLoader worker sending
    # CPU batches would print that warning once fl is installed (PyTorch's reducer reads the
    # untyped storage too, silently)
    return obj._untyped_storage if isinstance(obj, torch.TypedStorage) else obj


def _device_type(obj) -> str:
    return _untyped(obj).device.type


class _RuntimeCalls:
    """How this module reaches the runtime: given by the package (fl_runtime/__init__.py,
    use_runtime_calls), so that it imports nothing above it and closes no import circle."""
    start = started = staticmethod(lambda: None)


_runtime_calls = _RuntimeCalls()


def use_runtime_calls(start, started) -> None:
    """`start()` returns the runtime, starting it if need be (a receiving process may not have
    used fl yet); `started()` returns it or None."""
    _runtime_calls.start = staticmethod(start)
    _runtime_calls.started = staticmethod(started)


# ---- the sender ------------------------------------------------------------------------------
def _why_not(storage) -> str | None:
    """Why this fl storage cannot be shared, or None when it can."""
    from fl_runtime.plugins.extensions import ipc_of
    if storage.data_ptr() in _received:
        return "it was received from another process, and received device memory cannot be sent on (as CUDA IPC)"
    device = _runtime_calls.start().device(storage.device.index)
    if ipc_of(device.plugin) is None:
        return (f"the plugin {device.plugin.name!r} has no inter-process memory (the IPC extension of fl_ipc.h, "
                "ABI 1.3)")
    return None


def _export(storage) -> tuple:
    """The rebuild call for `storage`: a handle of its memory, kept alive for the receiver."""
    from fl_runtime.plugins.extensions import ipc_of
    rt = _runtime_calls.start()
    index = storage.device.index
    device = rt.device(index)
    rt.synchronize(index)                 # the receiver sees every write made so far
    nbytes = storage.nbytes()
    if nbytes == 0:
        return _rebuild_empty, (index,)
    handle, offset, _ = ipc_of(device.plugin).get_handle(device.local_index, storage.data_ptr())
    marker = os.path.join(_MARKER_DIR, f"torch_fl_ipc_{os.getpid()}_{next(_markers)}")
    with open(marker, "x"):
        pass
    collect()
    with _lock:
        _sent.append((marker, storage))
    return _rebuild_storage, (index, device.uuid, handle, offset, nbytes, marker)


def collect() -> int:
    """torch.fl.ipc_collect: close what this process received and PyTorch has freed since (the
    runtime releases freed blocks at its next allocation, or here), then drop the sender's hold
    on storages every receiver released; returns how many were dropped."""
    rt = _runtime_calls.started()
    for allocator in rt.allocators if rt is not None else ():
        allocator.settle()
    with _lock:
        kept = [(m, s) for m, s in _sent if os.path.exists(m)]
        dropped = len(_sent) - len(kept)
        _sent[:] = kept
    return dropped


@atexit.register
def _remove_markers() -> None:
    """The sender's exit: its markers go (receivers still mapping the memory keep it)."""
    with _lock:
        for marker, _ in _sent:
            try:
                os.unlink(marker)
            except OSError:
                pass
        _sent.clear()


# ---- the receiver ----------------------------------------------------------------------------
def _rebuild_empty(index: int):
    return torch.UntypedStorage(0, device=f"{DEVICE_TYPE}:{index}")


def _rebuild_storage(index: int, uuid: str, handle: bytes, offset: int, nbytes: int, marker: str):
    """Unpickled in the receiver: a storage of the sender's memory."""
    from fl_runtime.devices.storage import wrap_block
    from fl_runtime.plugins.extensions import ipc_of
    rt = _runtime_calls.start()
    device = rt.device(index)
    if device.uuid != uuid:
        raise FLSharingError(f"an fl storage of device {uuid}", f"this process's fl:{index} is device "
                             f"{device.uuid}; both processes must see the same devices in the same order")
    ipc = ipc_of(device.plugin)
    if ipc is None:
        raise FLSharingError(f"an fl storage ({DEVICE_TYPE}:{index})", "this process's plugin has no IPC extension")
    base, _ = ipc.open(device.local_index, handle)
    opened = _Import(ipc, index, device.local_index, base, offset, nbytes, marker)
    with _lock:
        _received[opened.ptr] = opened
    tensor = wrap_block(opened, _close, index, (nbytes,), (1,), torch.uint8)
    return tensor.untyped_storage()


def _close(opened: _Import) -> None:
    """The received storage freed: wait for this process's work on it, unmap, tell the sender.
    A deleter: a failure is logged, never raised (the memory stays mapped until exit)."""
    with _lock:
        _received.pop(opened.ptr, None)
    try:
        _runtime_calls.start().synchronize(opened.device_index)
        opened.ipc.close(opened.local, opened.base)
    except Exception as exc:  # noqa: BLE001
        logger.error("torch_fl: closing fl memory received from another process failed: %s", exc)
    finally:
        try:
            os.unlink(opened.marker)
        except OSError:
            pass


def _rebuild_tensor(storage, shape, stride, offset, dtype, requires_grad, parameter):
    tensor = torch.empty(0, dtype=dtype, device=storage.device)
    tensor.set_(storage, offset, shape, stride)
    if parameter:
        return torch.nn.Parameter(tensor, requires_grad=requires_grad)
    tensor.requires_grad_(requires_grad)
    return tensor


def _rebuild_typed(storage, dtype):
    return torch.TypedStorage(wrap_storage=storage, dtype=dtype, _internal=True)


# ---- the reducers --------------------------------------------------------------------------------
def _reduce_fl(obj):
    storage = _untyped(obj) if not isinstance(obj, torch.Tensor) else obj.untyped_storage()
    if isinstance(obj, torch.Tensor):
        if obj.requires_grad and not obj.is_leaf:
            raise RuntimeError("cannot send a non-leaf tensor that requires grad to another process (as "
                               "torch.multiprocessing refuses it for CUDA); detach it first")
        return _rebuild_tensor, (storage, tuple(obj.shape), obj.stride(), obj.storage_offset(), obj.dtype,
                                 obj.requires_grad, isinstance(obj, torch.nn.Parameter))
    if isinstance(obj, torch.TypedStorage):
        return _rebuild_typed, (storage, obj.dtype)
    return _export(storage)


def _guarded(original):
    def reduce(obj):
        if _device_type(obj) != DEVICE_TYPE:
            return original(obj)
        what = _describe(obj)
        storage = obj.untyped_storage() if isinstance(obj, torch.Tensor) else _untyped(obj)
        reason = _why_not(storage)
        if reason is None:
            return _reduce_fl(obj)
        if threading.current_thread().name != _FEEDER_THREAD:
            raise FLSharingError(what, reason)
        logger.error("%s", FLSharingError(what, reason))    # put() already returned: say it in the sender too
        return _refuse, (what, reason)
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
