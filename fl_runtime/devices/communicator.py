"""A vendor communicator: one device of this process as one rank of a collective group.

The thin, typed face of the collectives extension (fl_abi.h, "collectives",
ABI 1.1): it fills one arguments struct per call, checks the status with the
plugin's own message, and knows nothing of torch.distributed.  Rendezvous
(carrying the unique id between ranks) and stream ordering are the caller's
(fl_runtime.integration.distributed.vendor).

Tensors passed here are contiguous fl tensors on the communicator's device;
`(storage base, byte offset)` is what the ABI calls a buffer.
"""
from __future__ import annotations

import threading

import torch

from fl_runtime import abi
from fl_runtime.abi import ffi
from fl_runtime.devices.registry import DeviceInfo
from fl_runtime.devices.storage import storage_base
from fl_runtime.plugins.extensions import Collectives, collectives_of


class CommunicatorClosedError(RuntimeError):
    """A collective was called on a communicator already destroyed."""


def unique_id(device: DeviceInfo) -> bytes:
    """A fresh unique id from `device`'s plugin (rank 0 makes it; the others receive it)."""
    ext = _extension(device)
    out = ffi.new("fl_comm_unique_id*")
    args = ffi.new("fl_comm_get_unique_id_args*", {"struct_size": ffi.sizeof("fl_comm_get_unique_id_args"),
                                                   "device": device.local_index, "unique_id": out})
    device.plugin.check(ext.table.comm_get_unique_id(args), "comm_get_unique_id")
    return bytes(ffi.buffer(out))


def _extension(device: DeviceInfo) -> Collectives:
    ext = collectives_of(device.plugin)
    if ext is None:
        raise ValueError(f"fl:{device.index} ({device.plugin.name}) offers no collectives extension")
    return ext


def _buffer(t: torch.Tensor) -> tuple[int, int]:
    """The ABI's (base, offset) pair for a contiguous fl tensor."""
    if t.numel() == 0:
        return 0, 0
    return storage_base(t), t.storage_offset() * t.element_size()


class Communicator:
    """One rank's communicator on one fl device (comm_create .. comm_destroy)."""

    def __init__(self, device: DeviceInfo, uid: bytes, rank: int, size: int, timeout_ms: int) -> None:
        if len(uid) != abi.COMM_UNIQUE_ID_BYTES:
            raise ValueError(f"a unique id is {abi.COMM_UNIQUE_ID_BYTES} bytes, got {len(uid)}")
        self.device = device
        self.rank, self.size = rank, size
        self.ext = _extension(device)
        self._lock = threading.Lock()
        uid_struct = ffi.new("fl_comm_unique_id*")
        ffi.memmove(uid_struct, uid, len(uid))
        args = ffi.new("fl_comm_create_args*", {
            "struct_size": ffi.sizeof("fl_comm_create_args"), "device": device.local_index, "rank": rank,
            "size": size, "timeout_ms": max(0, min(timeout_ms, 0xFFFFFFFF)), "unique_id": uid_struct})
        device.plugin.check(self.ext.table.comm_create(args), f"comm_create(rank {rank} of {size})")
        self._comm = args.comm

    def _handle(self, call: str):
        if self._comm is None:
            raise CommunicatorClosedError(f"{call} on fl:{self.device.index}: the communicator was destroyed")
        return self._comm

    def _call(self, call: str, type_name: str, fields: dict) -> None:
        args = ffi.new(f"{type_name}*", {"struct_size": ffi.sizeof(type_name), "comm": self._handle(call), **fields})
        self.device.plugin.check(getattr(self.ext.table, call)(args), call)

    def all_reduce(self, stream, send: torch.Tensor, recv: torch.Tensor, op: int) -> None:
        (sb, so), (rb, ro) = _buffer(send), _buffer(recv)
        self._call("all_reduce", "fl_all_reduce_args", {
            "stream": stream.handle, "send_base": sb, "send_offset": so, "recv_base": rb, "recv_offset": ro,
            "count": send.numel(), "dtype": abi.DTYPE_TO_FL[send.dtype], "op": op})

    def broadcast(self, stream, send: torch.Tensor, recv: torch.Tensor, root: int) -> None:
        (sb, so), (rb, ro) = _buffer(send), _buffer(recv)
        self._call("broadcast", "fl_broadcast_args", {
            "stream": stream.handle, "send_base": sb, "send_offset": so, "recv_base": rb, "recv_offset": ro,
            "count": recv.numel(), "dtype": abi.DTYPE_TO_FL[recv.dtype], "root": root})

    def all_gather(self, stream, send: torch.Tensor, recv: torch.Tensor) -> None:
        (sb, so), (rb, ro) = _buffer(send), _buffer(recv)
        self._call("all_gather", "fl_all_gather_args", {
            "stream": stream.handle, "send_base": sb, "send_offset": so, "recv_base": rb, "recv_offset": ro,
            "send_count": send.numel(), "dtype": abi.DTYPE_TO_FL[send.dtype]})

    def reduce_scatter(self, stream, send: torch.Tensor, recv: torch.Tensor, op: int) -> None:
        (sb, so), (rb, ro) = _buffer(send), _buffer(recv)
        self._call("reduce_scatter", "fl_reduce_scatter_args", {
            "stream": stream.handle, "send_base": sb, "send_offset": so, "recv_base": rb, "recv_offset": ro,
            "recv_count": recv.numel(), "dtype": abi.DTYPE_TO_FL[recv.dtype], "op": op})

    def all_to_all(self, stream, send: torch.Tensor, recv: torch.Tensor) -> None:
        (sb, so), (rb, ro) = _buffer(send), _buffer(recv)
        self._call("all_to_all", "fl_all_to_all_args", {
            "stream": stream.handle, "send_base": sb, "send_offset": so, "recv_base": rb, "recv_offset": ro,
            "count": send.numel() // self.size, "dtype": abi.DTYPE_TO_FL[send.dtype]})

    def send(self, stream, t: torch.Tensor, peer: int) -> None:
        base, offset = _buffer(t)
        self._call("send", "fl_send_args", {"stream": stream.handle, "send_base": base, "send_offset": offset,
                                            "count": t.numel(), "dtype": abi.DTYPE_TO_FL[t.dtype], "peer": peer})

    def recv(self, stream, t: torch.Tensor, peer: int) -> None:
        base, offset = _buffer(t)
        self._call("recv", "fl_recv_args", {"stream": stream.handle, "recv_base": base, "recv_offset": offset,
                                            "count": t.numel(), "dtype": abi.DTYPE_TO_FL[t.dtype], "peer": peer})

    def destroy(self) -> None:
        """Release the communicator (work already queued on it completes first); idempotent."""
        with self._lock:
            comm, self._comm = self._comm, None
        if comm is not None:
            args = ffi.new("fl_comm_destroy_args*", {"struct_size": ffi.sizeof("fl_comm_destroy_args"), "comm": comm})
            self.device.plugin.check(self.ext.table.comm_destroy(args), "comm_destroy")
