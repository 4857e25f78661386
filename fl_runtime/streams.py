"""Streams and events over the C ABI, and the per-device stream registry.

Each device has a default stream, created at start-up; the "current" stream of
a device is where the runtime enqueues kernels and copies for that device.
"""
from __future__ import annotations

import threading

from . import abi
from .abi import ffi
from .devices import DeviceInfo


class Stream:
    """A vendor stream: work on it runs in FIFO order."""

    def __init__(self, device: DeviceInfo, handle=None) -> None:
        self.device = device
        self._api = device.plugin.api
        if handle is None:
            out = ffi.new("fl_stream*")
            device.plugin.check(self._api.stream_create(device.local_index, out),
                                f"stream_create(device=fl:{device.index})")
            handle = out[0]
        self.handle = handle
        self.key = int(ffi.cast("uintptr_t", handle))   # hashable identity for pools

    def synchronize(self) -> None:
        """Block until all work enqueued so far has finished; raise its error if any failed."""
        self.device.plugin.check(self._api.stream_synchronize(self.handle),
                                 f"stream_synchronize(fl:{self.device.index})")

    def query(self) -> bool:
        """True when all work enqueued so far has finished."""
        status = self._api.stream_query(self.handle)
        if status == abi.NOT_READY:
            return False
        self.device.plugin.check(status, f"stream_query(fl:{self.device.index})")
        return True

    def wait_event(self, event: "Event") -> None:
        """Make later work on this stream wait for the event's last record."""
        self.device.plugin.check(self._api.stream_wait_event(self.handle, event.handle),
                                 f"stream_wait_event(fl:{self.device.index})")

    def wait_stream(self, other: "Stream") -> None:
        """Make later work on this stream wait for everything enqueued on `other` so far."""
        if other.key != self.key:
            event = Event(other.device)
            event.record(other)
            self.wait_event(event)

    def __repr__(self) -> str:
        return f"<fl Stream fl:{self.device.index} {self.key:#x}>"


class Event:
    """A vendor event: a point in a stream that other streams and the host can wait for."""

    def __init__(self, device: DeviceInfo) -> None:
        self.device = device
        self._api = device.plugin.api
        out = ffi.new("fl_event*")
        device.plugin.check(self._api.event_create(device.local_index, out),
                            f"event_create(device=fl:{device.index})")
        self.handle = ffi.gc(out[0], self._api.event_destroy)

    def record(self, stream: Stream) -> None:
        self.device.plugin.check(self._api.event_record(self.handle, stream.handle), "event_record")

    def synchronize(self) -> None:
        self.device.plugin.check(self._api.event_synchronize(self.handle), "event_synchronize")

    def query(self) -> bool:
        status = self._api.event_query(self.handle)
        if status == abi.NOT_READY:
            return False
        self.device.plugin.check(status, "event_query")
        return True

    def elapsed_ms(self, end: "Event") -> float:
        out = ffi.new("float*")
        self.device.plugin.check(self._api.event_elapsed_ms(self.handle, end.handle, out), "event_elapsed_ms")
        return float(out[0])


class StreamRegistry:
    """Default and current stream of every device (current is per host thread)."""

    def __init__(self, default_streams: list[Stream]) -> None:
        self.default = default_streams
        self._local = threading.local()

    def current(self, index: int) -> Stream:
        current = getattr(self._local, "current", None)
        return current.get(index, self.default[index]) if current else self.default[index]

    def set_current(self, stream: Stream) -> Stream:
        """Make `stream` current for its device on this thread; returns the previous one."""
        previous = self.current(stream.device.index)
        if not hasattr(self._local, "current"):
            self._local.current = {}
        self._local.current[stream.device.index] = stream
        return previous

    def synchronize_device(self, index: int) -> None:
        """Wait for the default stream and this thread's current stream of a device."""
        self.default[index].synchronize()
        current = self.current(index)
        if current is not self.default[index]:
            current.synchronize()
