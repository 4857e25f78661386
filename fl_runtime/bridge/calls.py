"""What the native bridge's C++ asks of the runtime (csrc/python_calls.h).

PyTorch calls the bridge's allocator, device guard and hooks; each of those that needs the
runtime calls one method of this object, with the GIL held.  Exceptions raised here travel
back to the user as they are (an out-of-memory stays torch.OutOfMemoryError).
"""
from __future__ import annotations

import itertools
import threading

import torch

from fl_runtime.devices import allocator as memory
from fl_runtime.devices import memory_history
from fl_runtime.devices.streams import Event, Stream
from fl_runtime.ops.owned.copies import device_bytes_copy

# Streams per device handed out for torch.Stream(device="fl") and getStreamFromGlobalPool,
# round-robin, living as long as the process (CUDA keeps 32; a vendor stream costs more here).
POOL_SIZE = 4


class BridgeCalls:
    def __init__(self, rt, host_memory=None) -> None:
        self._rt = rt
        self._host_memory = host_memory       # (alloc(size) -> address or 0, free(address)) or None
        self._pools: dict[int, list[Stream]] = {}
        self._turn: dict[int, itertools.count] = {}
        self._events: dict[int, Event] = {}
        self._event_ids = itertools.count(1)
        self._lock = threading.Lock()

    # -- memory (the allocators themselves are C++: csrc/caching_allocator.h) ---------------
    def copy_device_bytes(self, dst_device: int, dst: int, src_device: int, src: int, nbytes: int) -> None:
        """c10::Allocator::copy_data: each address with the device whose allocator holds it,
        whatever device is current, ordered as copy_ orders a copy between devices
        (ops/owned/copies.py device_bytes_copy), after other streams' writes to src and dst,
        and dst then counted as written by its device's current stream (csrc/stream_order.h)."""
        rt = self._rt
        src_stream, dst_stream = rt.streams.current(src_device), rt.streams.current(dst_device)
        bridge = rt.allocators[src_device].bridge
        if not (bridge.order_blocks(src_device, src_stream.stream_id, (src,), ())
                and bridge.order_blocks(dst_device, dst_stream.stream_id, (), (dst,))):
            for device in {src_device, dst_device}:     # a stream the bridge does not know: wait instead
                rt.synchronize(device)
        device_bytes_copy(rt, (dst_device, dst, 0), (src_device, src, 0), nbytes)
        bridge.settle_writes()              # dst's write is enqueued (stream_order.h "Once per write")

    def empty_cache(self) -> None:
        for allocator in self._rt.allocators:
            allocator.empty_cache()

    def settle(self, device: int) -> None:
        """Count storages Python freed before PyTorch reads the C++ figures."""
        self._rt.allocators[device].settle()

    def empty_cache_for_retry(self, device: int) -> None:
        """An allocation found no memory: give the cache back before its one retry."""
        self._rt.allocators[device].empty_cache()

    def allocation_failed(self, device: int, size: int, cached_before: int, status: int, kind: str,
                          detail: str) -> None:
        """Raise the runtime's error for an allocation the C++ allocator could not serve."""
        allocator = self._rt.allocators[device]
        info = allocator.device
        call = f"fl_malloc(device=fl:{device}, size={size})"
        if kind in ("limit", "vendor_oom"):
            raise memory.out_of_memory(allocator, size, cached_before, kind)
        if kind == "bad_block":
            raise memory.unusable_block(info, call, detail)
        info.plugin.check(status, call)
        raise RuntimeError(f"{call} failed with status {status}")

    def memory_event(self, action: str, device: int, address: int, size: int, stream: int) -> None:
        """One allocator event for the memory history (devices/memory_history.py)."""
        if memory_history.recorder.enabled:
            memory_history.recorder.record(action, device, address, size, stream)

    def memory_info(self, device: int) -> tuple[int, int]:
        return memory.device_memory_info(self._rt.allocators[device])

    def record_stream(self, device: int, address: int, stream_id: int) -> None:
        allocator = self._rt.allocators[device]
        allocator.record_stream(address, self.stream(device, stream_id))

    def check_device(self, device: int) -> None:
        """Raise the runtime's DeviceNotFoundError for an index past the last fl device."""
        self._rt.device(device)

    def device_of_pointer(self, address: int) -> int:
        for index, allocator in enumerate(self._rt.allocators):
            if allocator.holds(address):
                return index
        return -1

    def host_alloc(self, nbytes: int) -> int:
        """Page-locked memory from the plugin's host-memory extension, or 0 (none offered)."""
        return self._host_memory[0](nbytes) if self._host_memory else 0

    def host_free(self, address: int) -> None:
        self._host_memory[1](address)

    # -- streams -----------------------------------------------------------------------
    def stream(self, device: int, stream_id: int) -> Stream:
        return self._rt.streams.lookup(device, stream_id)     # default streams are registered too

    def pooled_stream(self, device: int, priority: int) -> int:
        """A stream of the device's pool (the ABI has one priority: `priority` is accepted)."""
        with self._lock:
            pool = self._pools.setdefault(device, [])
            turn = next(self._turn.setdefault(device, itertools.count()))
            if len(pool) < POOL_SIZE:
                pool.append(Stream(self._rt.device(device)))
            return pool[turn % len(pool)].stream_id

    def stream_made_current(self, device: int, stream_id: int) -> None:
        """PyTorch made a stream current on this thread (the guard's exchangeStream)."""
        self._rt.streams.keep_current(self.stream(device, stream_id))

    def query_stream(self, device: int, stream_id: int) -> bool:
        return self.stream(device, stream_id).query()

    def synchronize_stream(self, device: int, stream_id: int) -> None:
        self.stream(device, stream_id).synchronize()

    def synchronize_device(self, device: int) -> None:
        self._rt.synchronize(device)

    def supported_dtypes(self, device: int) -> list[torch.dtype]:
        return [getattr(torch, name) for name in self._rt.device(device).supported_dtypes]

    # -- events ------------------------------------------------------------------------
    def event_record(self, handle: int, device: int, stream_id: int, flag: int) -> int:
        """Record the event `handle` (0: a new one, returned) at the end of a stream."""
        if handle == 0:
            event = Event(self._rt.device(device), enable_timing=True, registry=self._rt.streams)
            with self._lock:
                handle = next(self._event_ids)
                self._events[handle] = event
        self._event(handle).record(self.stream(device, stream_id))
        return handle

    def event_block(self, handle: int, device: int, stream_id: int) -> None:
        self.stream(device, stream_id).wait_event(self._event(handle))

    def event_query(self, handle: int) -> bool:
        return self._event(handle).query()

    def event_synchronize(self, handle: int) -> None:
        self._event(handle).synchronize()

    def event_elapsed_ms(self, start: int, end: int) -> float:
        self._event(end).synchronize()
        return self._event(start).elapsed_ms(self._event(end))

    def event_destroy(self, handle: int) -> None:
        with self._lock:
            self._events.pop(handle, None)

    def _event(self, handle: int) -> Event:
        with self._lock:
            return self._events[handle]
