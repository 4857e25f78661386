"""Host buffers of host-to-device copies still in flight.

A copy from the host is enqueued on a stream and returns at once; the host
bytes it reads must stay as they are until the device has read them.  The
copy path (ops/owned/copies.py) hands such a copy only buffers the runtime itself
owns (a fresh staging copy, or a temporary nobody else can see), so nothing
but their lifetime has to be managed: each is kept here with a vendor event
recorded after its copy and let go once that event has completed.  This is
what spares a host-to-device copy the stream synchronisation that would
otherwise stall the host behind every queued kernel (an HF decode loop copies
positions in every forward).

Events are reused: one is taken from the device's spare list, recorded, and
returned to it when its copy is done.  Finished copies are retired whenever a
new one is held, and at most `LIMIT` copies or `LIMIT_BYTES` of host memory stay
pending per device (a large converted upload, `model.to("fl", torch.half)`, holds its
converted copy): past that the oldest are waited for, so a host that outruns its device
holds bounded memory.
With the native bridge, the bridge's holder (bridge/csrc/pending_uploads.h, same rules) is the
device's only one: it keeps the stages of the uploads it serves in C++, and hold() hands it
the runtime's own buffers, so one set of limits bounds both; the lists here serve the Python
route.
The holder lives on the Runtime, which is kept until exit (integration/shutdown.py),
so its events are never destroyed after their plugin.
"""
from __future__ import annotations

import threading
from collections import deque

import torch

from fl_runtime.devices.registry import DeviceInfo
from fl_runtime.devices.streams import Event, Stream
from fl_runtime.errors import FLError

LIMIT = 256                 # pending copies per device before the oldest is waited for
LIMIT_BYTES = 256 << 20     # pending host bytes per device before the oldest are waited for


class PendingUploads:
    """Keeps each in-flight copy's host buffer until the device has read it (see the module doc)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[int, deque[tuple[Event, torch.Tensor, int]]] = {}
        self._spare: dict[int, list[Event]] = {}
        self._bytes: dict[int, int] = {}
        self.limits = (LIMIT, LIMIT_BYTES)
        self.native = None      # the native bridge module, whose holder keeps every upload (attach_native)

    def attach_native(self, native) -> None:
        """Hand every later upload to the native bridge's holder, with these limits (copies.py
        calls this before the bridge serves any copy)."""
        native.set_upload_limits(*self.limits)
        self.native = native

    def set_limits(self, copies: int, nbytes: int) -> tuple[int, int]:
        """Pending copies and host bytes per device before the oldest is waited for; returns the
        previous limits."""
        previous, self.limits = self.limits, (copies, nbytes)
        if self.native is not None:
            self.native.set_upload_limits(copies, nbytes)
        return previous

    def hold(self, device: DeviceInfo, stream: Stream, host: torch.Tensor) -> None:
        """Keep `host` until the work enqueued on `stream` so far (its copy) is done."""
        index = device.index
        if self.native is not None:
            self.native.hold_upload(index, stream.key, host)
            return
        with self._lock:
            pending = self._pending.setdefault(index, deque())
            spare = self._spare.setdefault(index, [])
            self._retire(index, pending, spare)
            try:
                event = spare.pop() if spare else Event(device)
                event.record(stream)
            except FLError:
                # No event to wait on: wait for the copy itself (raises if the device failed).
                stream.synchronize()
                return
            nbytes = host.untyped_storage().nbytes()
            pending.append((event, host, nbytes))
            self._bytes[index] = self._bytes.get(index, 0) + nbytes
            copies, limit_bytes = self.limits
            while len(pending) > copies or (len(pending) > 1 and self._bytes[index] > limit_bytes):
                pending[0][0].synchronize()
                self._retire(index, pending, spare)

    def pending(self, device_index: int) -> tuple[int, int]:
        """(copies, host bytes) to fl:<device_index> still holding a host buffer (finished ones
        retired first): the native bridge's holder's figures where it is attached."""
        if self.native is not None:
            return tuple(self.native.pending_uploads(device_index))
        with self._lock:
            pending = self._pending.get(device_index)
            if pending:
                self._retire(device_index, pending, self._spare.setdefault(device_index, []))
            return len(self._pending.get(device_index, ())), self._bytes.get(device_index, 0)

    def _retire(self, index: int, pending: deque, spare: list) -> None:
        while pending and pending[0][0].query():
            event, _, nbytes = pending.popleft()
            self._bytes[index] -= nbytes
            spare.append(event)
