"""Streams and events over the C ABI, and the per-device stream registry.

Each device has a default stream, created at start-up; the "current" stream of
a device is where the runtime enqueues kernels and copies for that device.

`Stream` subclasses `torch.Stream`, so PyTorch APIs that take a stream
(`Tensor.record_stream`, `torch.Stream` comparisons) accept it: PyTorch passes
only (device index, stream id) through the dispatcher, and the registry maps
that pair back to the vendor stream.
"""
from __future__ import annotations

import itertools
import threading
import weakref

import torch

from fl_runtime import abi
from fl_runtime.abi import ffi
from fl_runtime.devices.registry import DEVICE_TYPE, DeviceInfo

DEFAULT_STREAM_ID = 0        # what PyTorch's Python device guard reports as the current stream
_PRIVATEUSE1 = int(torch._C._autograd.DeviceType.PrivateUse1)
_stream_ids = itertools.count(1)


class Stream(torch.Stream):
    """A vendor stream: work on it runs in FIFO order."""

    # Set by the runtime: turns what users pass (None, 1, "fl:1", torch.device) into a
    # DeviceInfo, hears of every new stream (registry, cross-stream tracking), and
    # is the registry `with stream:` makes the stream current in.
    resolve_device = None
    on_new_stream = None
    registry = None
    # The native bridge's module, once installed (bridge/csrc/stream_registry.h): it then owns
    # the streams made here, serves calls on them without Python and destroys each once this
    # object and the last C++ call on it are gone.
    native = None

    def __new__(cls, device=None, handle=None, stream_id: int | None = None, priority: int = 0):
        info = cls._info(device)
        sid = next(_stream_ids) if stream_id is None else stream_id
        return super().__new__(cls, stream_id=sid, device_index=info.index, device_type=_PRIVATEUSE1)

    def __init__(self, device=None, handle=None, stream_id: int | None = None, priority: int = 0) -> None:
        # priority is accepted for torch.cuda.Stream compatibility; the ABI has one priority.
        device = self._info(device)
        self.info = device            # `device` is torch.Stream's name; see the property below
        self._api = device.plugin.api
        if handle is None:
            out = ffi.new("fl_stream*")
            device.plugin.check(self._api.stream_create(device.local_index, out),
                                f"stream_create(device=fl:{device.index})")
            # Destroyed (after draining, per the ABI) when the last reference goes.
            # Blocks keep their stream alive, so a pool key never outlives its stream.
            handle = ffi.gc(out[0], _destroyer(self._api, device.index, self.stream_id))
            if Stream.native is not None and self.stream_id != DEFAULT_STREAM_ID:
                Stream.native.remember_stream(device.index, self.stream_id, int(ffi.cast("uintptr_t", out[0])))
        self.handle = handle
        self._previous = threading.local()   # per thread: the streams `with self:` replaced
        self.key = int(ffi.cast("uintptr_t", handle))   # hashable identity for pools
        if Stream.on_new_stream is not None:
            Stream.on_new_stream(self)

    @classmethod
    def _info(cls, device) -> DeviceInfo:
        if isinstance(device, DeviceInfo):
            return device
        if Stream.resolve_device is None:
            raise RuntimeError("fl streams need a started runtime: import torch_fl first")
        return Stream.resolve_device(device)

    def __enter__(self) -> Stream:
        """`with stream:` as `with torch.fl.stream(stream):` (torch.Stream's own would only
        tell PyTorch's Python device guard, which ignores it)."""
        if Stream.registry is None:
            raise RuntimeError("fl streams need a started runtime: import torch_fl first")
        stack = getattr(self._previous, "stack", None)
        if stack is None:
            stack = self._previous.stack = []
        stack.append(Stream.registry.set_current(self))
        return self

    def __exit__(self, *exc) -> None:
        Stream.registry.set_current(self._previous.stack.pop())

    @property
    def device(self) -> torch.device:     # type: ignore[override]
        """The stream's device as PyTorch code expects it (`self.info` is the runtime's view)."""
        return torch.device(DEVICE_TYPE, self.info.index)

    def synchronize(self) -> None:
        """Block until all work enqueued so far has finished; raise its error if any failed."""
        self.info.plugin.check(self._api.stream_synchronize(self.handle),
                                 f"stream_synchronize(fl:{self.info.index})")

    def query(self) -> bool:
        """True when all work enqueued so far has finished."""
        status = self._api.stream_query(self.handle)
        if status == abi.NOT_READY:
            return False
        self.info.plugin.check(status, f"stream_query(fl:{self.info.index})")
        return True

    def wait_event(self, event: Event) -> None:
        """Make later work on this stream wait for the event's last record."""
        self.info.plugin.check(self._api.stream_wait_event(self.handle, event.handle),
                                 f"stream_wait_event(fl:{self.info.index})")

    def wait_stream(self, other: Stream) -> None:
        """Make later work on this stream wait for everything enqueued on `other` so far."""
        if other.key != self.key:
            self.wait_event(other.record_event())

    def record_event(self, event: Event | None = None) -> Event:
        """Record `event` (a new one if None) at the current end of this stream; returns it."""
        event = event or Event(self.info)
        event.record(self)
        return event

    def __repr__(self) -> str:
        return f"<fl Stream fl:{self.info.index} id={self.stream_id} {self.key:#x}>"


def _destroyer(api, index: int, stream_id: int):
    """A stream handle's finalizer: the bridge's release when it knows the stream (it destroys
    it once no C++ call holds it), else stream_destroy."""
    def destroy(handle) -> None:
        native = Stream.native
        if native is None or not native.release_stream(index, stream_id):
            api.stream_destroy(handle)
    return destroy


class Event:
    """A vendor event: a point in a stream that other streams and the host can wait for.

    `registry` lets record()/wait() default to the device's current stream.
    The ABI times every event; `enable_timing` only decides whether
    elapsed_time() may be asked, as with torch.cuda.Event.
    """

    def __init__(self, device: DeviceInfo, enable_timing: bool = False, registry=None) -> None:
        self.info = device
        self.enable_timing = enable_timing
        self._registry = registry
        self._recorded = False
        self._api = device.plugin.api
        out = ffi.new("fl_event*")
        device.plugin.check(self._api.event_create(device.local_index, out),
                            f"event_create(device=fl:{device.index})")
        self.handle = ffi.gc(out[0], self._api.event_destroy)

    @property
    def device(self) -> torch.device:
        """The event's device as PyTorch code expects it (`self.info` is the runtime's view)."""
        return torch.device(DEVICE_TYPE, self.info.index)

    def _stream_or_current(self, stream: Stream | None) -> Stream:
        if stream is not None:
            return stream
        if self._registry is None:
            raise ValueError("this Event was made without a stream registry: pass the stream explicitly")
        return self._registry.current(self.info.index)

    def record(self, stream: Stream | None = None) -> None:
        """Mark the current end of `stream` (default: the device's current stream)."""
        self.info.plugin.check(self._api.event_record(self.handle, self._stream_or_current(stream).handle),
                                 "event_record")
        self._recorded = True

    def wait(self, stream: Stream | None = None) -> None:
        """Make later work on `stream` (default: the current stream) wait for this event."""
        self._stream_or_current(stream).wait_event(self)

    def synchronize(self) -> None:
        self.info.plugin.check(self._api.event_synchronize(self.handle), "event_synchronize")

    def query(self) -> bool:
        status = self._api.event_query(self.handle)
        if status == abi.NOT_READY:
            return False
        self.info.plugin.check(status, "event_query")
        return True

    def elapsed_ms(self, end: Event) -> float:
        out = ffi.new("float*")
        self.info.plugin.check(self._api.event_elapsed_ms(self.handle, end.handle, out), "event_elapsed_ms")
        return float(out[0])

    def elapsed_time(self, end: Event) -> float:
        """Milliseconds between this event and `end` (torch.cuda.Event's name; waits for `end`)."""
        for event, role in ((self, "start"), (end, "end")):
            if not event.enable_timing:
                raise ValueError(f"elapsed_time: the {role} event was created without enable_timing=True; "
                                 "create both events with torch.fl.Event(enable_timing=True)")
            if not event._recorded:
                raise ValueError(f"elapsed_time: the {role} event was never recorded; call record() first")
        end.synchronize()
        return self.elapsed_ms(end)

    def __repr__(self) -> str:
        return f"<fl Event fl:{self.info.index} timing={self.enable_timing}>"


class StreamRegistry:
    """Default and current stream of every device (current is per host thread, as in CUDA;
    the (index, id) -> stream map is shared and locked)."""

    def __init__(self, default_streams: list[Stream]) -> None:
        self.default = default_streams
        self._local = threading.local()
        # False until some thread makes a stream current: until then every thread's current
        # stream is the default one, and the hot path (ops/eager/launcher.py) reads `default` directly.
        self.any_current = False
        self._by_id: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
        self._by_id_lock = threading.Lock()
        for stream in default_streams:
            self.remember(stream)

    def remember(self, stream: Stream) -> Stream:
        """Let lookup() find `stream` from what PyTorch passes around (index, id)."""
        with self._by_id_lock:
            self._by_id[(stream.device_index, stream.stream_id)] = stream
        return stream

    def lookup(self, device_index: int, stream_id: int) -> Stream:
        """The fl Stream behind a torch.Stream PyTorch hands to a kernel (e.g. record_stream)."""
        with self._by_id_lock:
            found = self._by_id.get((device_index, stream_id))
        if found is None:
            raise ValueError(f"fl:{device_index} has no live stream with id {stream_id}: pass a "
                             "torch.fl.Stream (or torch.fl.current_stream()) made by this process")
        return found

    def current(self, index: int) -> Stream:
        current = getattr(self._local, "current", None)
        return current.get(index, self.default[index]) if current else self.default[index]

    def set_current(self, stream: Stream) -> Stream:
        """Make `stream` current for its device on this thread; returns the previous one."""
        previous = self.current(stream.device_index)
        self.keep_current(stream)
        return previous

    def keep_current(self, stream: Stream) -> None:
        """Hold `stream` as this thread's current one of its device (while it is current, the
        stream object must live), and start the tracking later launches read."""
        current = getattr(self._local, "current", None)
        if current is None:
            current = self._local.current = {}
        current[stream.device_index] = stream
        self.remember(stream)
        self.any_current = True      # before any launch on this thread can read it (same thread)

    def use_native_thread_state(self, current_id, set_current_id) -> None:
        """With the native bridge each thread's current stream ids live in C++ (its device
        guard reads them without the GIL, docs/users/native-bridge.md): current() and
        set_current() then read and write those, and hold the Stream objects as before."""
        self._native_current_id, self._native_set_id = current_id, set_current_id
        self.current, self.set_current = self._native_current, self._native_set_current

    def _native_current(self, index: int) -> Stream:
        stream_id = self._native_current_id(index)
        if stream_id == DEFAULT_STREAM_ID:
            return self.default[index]
        held = getattr(self._local, "current", None)
        stream = held.get(index) if held else None
        return stream if stream is not None and stream.stream_id == stream_id else self.lookup(index, stream_id)

    def _native_set_current(self, stream: Stream) -> Stream:
        previous = self._native_current(stream.device_index)
        self.keep_current(stream)
        self._native_set_id(stream.device_index, stream.stream_id)
        return previous

    def synchronize_device(self, index: int) -> None:
        """Wait for every live stream of a device, whichever thread made it current
        (cudaDeviceSynchronize's rule; torch.accelerator.synchronize promises all streams)."""
        with self._by_id_lock:
            streams = [s for (device, _), s in self._by_id.items() if device == index]
        for stream in streams:
            stream.synchronize()


def register_record_stream(library, rt) -> None:
    """aten::record_stream for fl tensors (PyTorch routes Tensor.record_stream there):
    tell the tensor's allocator that `stream` uses its block (docs/users/devices.md)."""
    from fl_runtime.devices.storage import storage_base

    def record_stream(self: torch.Tensor, s: torch.Stream) -> None:
        if s.device_type != _PRIVATEUSE1 or s.device_index != self.device.index:
            raise ValueError(f"record_stream: the stream is on {s.device}, the tensor on {self.device}; "
                             "record a stream of the tensor's own device")
        if self.untyped_storage().nbytes() == 0:
            return
        rt.allocators[self.device.index].record_stream(storage_base(self),
                                                       rt.streams.lookup(s.device_index, s.stream_id))

    library.impl("record_stream", record_stream, "PrivateUse1")
