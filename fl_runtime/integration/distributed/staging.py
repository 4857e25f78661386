"""Host copies of the fl tensors in a collective's arguments, and the copy back.

Device -> host happens on the caller's thread before the collective is queued:
the runtime's copy to the host is ordered after the pending writes on the
tensor's stream (README "Device API", streams), and waits for nothing else.
Host -> device happens when the transport's future completes; copies from the
host are synchronous, so the device tensor holds the result when the future
is marked done.
"""
from __future__ import annotations

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

    @property
    def staged(self) -> bool:
        return bool(self._hosts)

    def finish(self) -> None:
        """Copy the host results into their fl tensors (on the thread that completes the future)."""
        for device_tensor, host in self._write_back:
            device_tensor.copy_(host)
        self._hosts.clear()
        self._write_back.clear()
