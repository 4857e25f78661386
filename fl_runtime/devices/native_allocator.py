"""The device's caching allocator when the native bridge runs: the bridge's C++ pool
(bridge/csrc/caching_allocator.h), seen through allocator.py's interface.

With the bridge, PyTorch's C++ allocations and the dispatch's outputs take blocks from the C++
pool without the GIL; the Python runtime (launcher, graph path, storages) uses the same pool
through this class, so there is one pool, one memory_fraction cap and one set of statistics per
device.  The rules are allocator.py's (stream-aware reuse, record_stream, retry after emptying
the cache, the out-of-memory error), enforced in C++.

Blocks are views: the C++ allocator owns a block's state (size, allocation stream, last
writer, the other streams that used it) and these objects read and update it by address.
A stream recorded on a live block may be dropped before the block is freed: the bridge owns
every stream made while it runs and, destroying one, drains it first and has the allocator
forget it (csrc/stream_registry.h), so no event is ever recorded on a destroyed handle.
"""
from __future__ import annotations


from fl_runtime.devices import storage as _storage
from fl_runtime.devices.allocator import MemoryStats, round_size
from fl_runtime.devices.storage import release_held
from fl_runtime.tracebacks import release_remembered


class NativeBlock:
    """A live block of the C++ pool (allocator.py Block's fields)."""
    __slots__ = ("ptr", "size", "stream", "_allocator")

    def __init__(self, allocator: NativeAllocator, ptr: int, size: int, stream) -> None:
        self.ptr, self.size, self.stream, self._allocator = ptr, size, stream, allocator

    @property
    def writer(self):
        info = self._allocator.info(self.ptr)
        return None if info is None or info[2] < 0 else self._allocator.stream_or_none(info[2])

    @writer.setter
    def writer(self, stream) -> None:
        self._allocator.bridge.set_writer(self._allocator.index, self.ptr, -1 if stream is None else stream.stream_id)

    @property
    def used_by(self) -> set:
        info = self._allocator.info(self.ptr)
        return _UsedBy(self, () if info is None else info[3])


class _UsedBy(set):
    """A block's other streams; add() records the stream on the block (record_stream)."""

    def __init__(self, block: NativeBlock, ids) -> None:
        allocator = block._allocator
        super().__init__(s for s in map(allocator.stream_or_none, ids) if s is not None)
        self._block = block

    def add(self, stream) -> None:
        super().add(stream)
        self._block._allocator.record_stream(self._block.ptr, stream)


class _NativeStats:
    """allocator.py MemoryStats's fields, read from the C++ counters at each access."""

    def __init__(self, bridge, index: int) -> None:
        self._bridge, self._index = bridge, index

    def __getattr__(self, name: str) -> int:
        if name not in MemoryStats.__dataclass_fields__:
            raise AttributeError(name)
        return self._bridge.figures(self._index)[name]

    def reset_peaks(self) -> None:
        self._bridge.reset_peaks(self._index)

    def reset_accumulated(self) -> None:
        self._bridge.reset_accumulated(self._index)


class _NativeLive:
    """The live blocks by address (allocator.py CachingAllocator.live's read side)."""

    def __init__(self, allocator: NativeAllocator) -> None:
        self._allocator = allocator

    def get(self, ptr: int, default=None):
        info = self._allocator.info(ptr)
        if info is None:
            return default
        allocator = self._allocator
        stream = allocator.stream_or_none(info[1]) or allocator.default_stream()
        return NativeBlock(allocator, ptr, info[0], stream)

    def __getitem__(self, ptr: int) -> NativeBlock:
        block = self.get(ptr)
        if block is None:
            raise KeyError(ptr)
        return block

    def __contains__(self, ptr: int) -> bool:
        return self._allocator.info(ptr) is not None

    def __len__(self) -> int:
        return self._allocator.bridge.figures(self._allocator.index)["live_blocks"]

    def values(self) -> list[NativeBlock]:
        allocator = self._allocator
        return [block for block in (self.get(ptr) for ptr, *_, state in allocator.bridge.blocks(allocator.index)
                                    if state == 1) if block is not None]


class NativeAllocator:
    def __init__(self, device, synchronize_device, bridge, streams) -> None:
        self.device = device
        self.index = device.index
        self.bridge = bridge
        self._streams = streams
        self._synchronize_device = synchronize_device
        self.stats = _NativeStats(bridge, self.index)
        self.live = _NativeLive(self)
        self._alloc = bridge.alloc
        self._free = bridge.free

    # -- the hot path ---------------------------------------------------------
    def allocate(self, nbytes: int, stream) -> NativeBlock:
        return self.allocate_rounded(round_size(nbytes), stream, nbytes)

    def allocate_rounded(self, size: int, stream, requested: int | None = None) -> NativeBlock:
        _storage.collect_freed()     # storages PyTorch freed through the compiled deleter (storage.py)
        ptr = self._alloc(self.index, size, requested or size, stream.stream_id)
        return NativeBlock(self, ptr, size, stream)

    def release(self, block: NativeBlock) -> None:
        """PyTorch freed the storage: the C++ pool takes the block back (its mutex only)."""
        self._free(self.index, block.ptr)

    # -- what the runtime asks ------------------------------------------------
    def record_stream(self, ptr: int, stream) -> None:
        if not self.bridge.record_stream(self.index, ptr, stream.stream_id, stream.key):
            raise ValueError(f"record_stream: fl:{self.index} has no live allocation at {ptr:#x}; "
                             "the tensor's storage was not made by the Torch-FL allocator")

    def info(self, ptr: int):
        """(size, stream id, writer id, used-by ids) of the live block at `ptr`, or None."""
        return self.bridge.block_info(self.index, ptr)

    def stream_or_none(self, stream_id: int):
        """The live Stream with this id on this device (a dropped one: None, its work has drained)."""
        try:
            return self._streams.lookup(self.index, stream_id)
        except ValueError:
            return None

    def default_stream(self):
        return self._streams.default[self.index]

    def holds(self, address: int) -> bool:
        return self.bridge.holds(self.index, address)

    def settle(self) -> None:
        release_held()
        release_remembered()
        _storage.collect_freed()

    def cached_figures(self) -> tuple[int, int]:
        figures = self.bridge.figures(self.index)
        return figures["cached_bytes"], figures["cached_blocks"]

    def segments(self) -> list[tuple[int, int, int, int, str]]:
        self.settle()
        states = ("inactive", "active_allocated", "active_pending_free")
        return [(ptr, size, requested, stream, states[state])
                for ptr, size, requested, stream, state in self.bridge.blocks(self.index)]

    def empty_cache(self) -> None:
        """Give every cached block back to the vendor, once the device has finished the work
        enqueued before (allocator.py CachingAllocator.empty_cache's order)."""
        release_held()
        release_remembered()
        _storage.collect_freed()
        taken = self.bridge.take_cached(self.index)
        self._synchronize_device()
        self.bridge.release_taken(self.index, taken)

    def limit_changed(self) -> None:
        """memory_fraction changed (torch.fl.set_per_process_memory_fraction)."""
        self.bridge.set_limit(self.index, self.device.memory_limit)
