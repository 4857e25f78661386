"""Host copies of the fl tensors in a collective's arguments, and the copy back.

Device -> host happens on the caller's thread before the collective is queued:
the runtime's copy to the host is ordered after the pending writes on the
tensor's stream (docs/users/devices.md "Streams and events"), and waits for nothing else.
Host -> device happens when the transport's future completes, on the thread
that completes it, on a copy stream of the device's own: the copy is ordered
after the tensor's pending writers and waits for nothing else (the default
stream may hold unrelated work of the training thread).  Copies from the host
are synchronous, so the device tensor holds the result when the future is
marked done, and later readers on any stream are ordered after the copy
stream by the runtime's per-block writer tracking.
"""
from __future__ import annotations

import threading

import torch

IN, OUT, INOUT = "in", "out", "inout"


class Staging:
    """Collects (device tensor, host copy) pairs while arguments are staged."""

    def __init__(self, device_type: str) -> None:
        self._device_type = device_type       # the transport's device type: "cpu" stages fl tensors
        self._write_back: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._hosts: list[torch.Tensor] = []     # alive until the transport is done with them

    def stage(self, value, role: str):
        """`value` (a tensor or nested lists of tensors) with fl tensors replaced by host copies."""
        if isinstance(value, torch.Tensor):
            return self._stage_tensor(value, role)
        if isinstance(value, (list, tuple)):
            return [self.stage(v, role) for v in value]
        return value

    def _stage_tensor(self, t: torch.Tensor, role: str) -> torch.Tensor:
        if t.device.type == self._device_type or t.device.type != "fl":
            return t
        host = torch.empty(t.shape, dtype=t.dtype)       # contiguous, as Gloo requires
        if role in (IN, INOUT):
            host.copy_(t)
        if role in (OUT, INOUT):
            self._write_back.append((t, host))
        self._hosts.append(host)
        return host

    def finish(self) -> None:
        """Copy the host results into their fl tensors (on the thread that completes the future)."""
        for device_tensor, host in self._write_back:
            with torch.fl.stream(_copy_stream(device_tensor.device.index)):
                device_tensor.copy_(host)
        self._hosts.clear()
        self._write_back.clear()


_copy_streams: dict[int, torch.Stream] = {}
_copy_streams_lock = threading.Lock()


def _copy_stream(index: int) -> torch.Stream:
    """The stream results of collectives are copied back to fl:index on (one per device)."""
    with _copy_streams_lock:
        stream = _copy_streams.get(index)
        if stream is None:
            stream = _copy_streams[index] = torch.fl.Stream(device=torch.device("fl", index))
        return stream
