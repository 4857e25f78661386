"""A caching allocator per device over the vendor's fl_malloc / fl_free.

Blocks freed by PyTorch go back to a pool keyed by (stream, rounded size) and
are handed out again without a vendor call, so a steady training loop makes no
vendor allocation per op.  A block is only reused on the stream it was
allocated on (FIFO order makes that safe); if other streams used it, it waits
for events recorded on those streams first (F6).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from . import abi
from .abi import ffi
from .devices import DeviceInfo
from .errors import FLOutOfMemoryError, VendorError
from .logs import logger

_SMALL_LIMIT = 1 << 20      # below 1 MiB round to 512 B, above to 128 KiB
_SMALL_ROUND = 512
_LARGE_ROUND = 128 << 10


def round_size(nbytes: int) -> int:
    step = _SMALL_ROUND if nbytes < _SMALL_LIMIT else _LARGE_ROUND
    return max(step, (nbytes + step - 1) // step * step)


@dataclass(eq=False)
class Block:
    """One vendor allocation."""
    ptr: int
    size: int
    stream: object                      # the Stream it was allocated for
    writer: object = None               # the Stream of the last write, for ordering
    used_by: set = field(default_factory=set)   # other Streams that used it


@dataclass
class MemoryStats:
    allocated: int = 0          # bytes in live tensors
    reserved: int = 0           # bytes held from the vendor (live + cached)
    peak_allocated: int = 0
    vendor_mallocs: int = 0
    vendor_frees: int = 0
    cache_hits: int = 0


class CachingAllocator:
    def __init__(self, device: DeviceInfo, synchronize_device) -> None:
        self.device = device
        self._api = device.plugin.api
        self._synchronize_device = synchronize_device
        self.stats = MemoryStats()
        self.live: dict[int, Block] = {}            # ptr -> Block, for blocks in tensors
        self._pool: dict[tuple[int, int], list[Block]] = {}
        self._freed: list[Block] = []                # filled by deleters, drained here
        self._waiting: list[tuple[Block, list]] = []  # (block, events) used by other streams

    # -- the hot path ---------------------------------------------------------
    def allocate(self, nbytes: int, stream) -> Block:
        if self._freed:
            self._drain_freed()
        size = round_size(nbytes)
        bucket = self._pool.get((stream.key, size))
        if bucket:
            block = bucket.pop()
            self.stats.cache_hits += 1
        else:
            block = self._vendor_malloc(size, stream)
        self.live[block.ptr] = block
        stats = self.stats
        stats.allocated += size
        if stats.allocated > stats.peak_allocated:
            stats.peak_allocated = stats.allocated
        return block

    def release(self, block: Block) -> None:
        """Called when PyTorch frees a tensor's storage; may run inside any op (GC)."""
        self._freed.append(block)

    # -- the slow paths -------------------------------------------------------
    def _drain_freed(self) -> None:
        freed, self._freed = self._freed, []
        for block in freed:
            self.live.pop(block.ptr, None)
            self.stats.allocated -= block.size
            if block.used_by:
                self._waiting.append((block, [self._record_on(s) for s in block.used_by]))
            else:
                self._to_pool(block)
        if self._waiting:
            self._collect_waiting()

    def _record_on(self, stream):
        from .streams import Event
        event = Event(self.device)
        event.record(stream)
        return event

    def _collect_waiting(self) -> None:
        still = []
        for block, events in self._waiting:
            if all(e.query() for e in events):
                self._to_pool(block)
            else:
                still.append((block, events))
        self._waiting = still

    def _to_pool(self, block: Block) -> None:
        block.used_by = set()
        block.writer = None
        self._pool.setdefault((block.stream.key, block.size), []).append(block)

    def _vendor_malloc(self, size: int, stream) -> Block:
        if self.stats.reserved + size > self.device.memory_limit:
            self.empty_cache()
            if self.stats.reserved + size > self.device.memory_limit:
                raise self._oom(size, "the configured memory_fraction "
                                f"({self.device.memory_fraction:g}) caps this device at "
                                f"{self.device.memory_limit} bytes")
        out = ffi.new("fl_devptr*")
        status = self._api.fl_malloc(self.device.local_index, size, 0, out)
        if status == abi.ERROR_OUT_OF_MEMORY:
            self.empty_cache()
            status = self._api.fl_malloc(self.device.local_index, size, 0, out)
            if status == abi.ERROR_OUT_OF_MEMORY:
                raise self._oom(size, "the device reports no free block large enough")
        self.device.plugin.check(status, f"fl_malloc(device=fl:{self.device.index}, size={size})")
        self.stats.reserved += size
        self.stats.vendor_mallocs += 1
        return Block(int(out[0]), size, stream)

    def _oom(self, size: int, why: str) -> FLOutOfMemoryError:
        return FLOutOfMemoryError(
            f"fl:{self.device.index} out of memory: tried to allocate {size} bytes; "
            f"{self.stats.allocated} bytes in use by tensors, {self.stats.reserved - self.stats.allocated} "
            f"cached (already released and retried); {why}. Free tensors, use smaller batches, "
            "or raise memory_fraction in the config.")

    def empty_cache(self) -> None:
        """Give every cached block back to the vendor (waits for the device first)."""
        self._synchronize_device()
        if self._freed:
            self._drain_freed()
        self._collect_waiting()
        for bucket in self._pool.values():
            for block in bucket:
                self._vendor_free(block)
        self._pool.clear()

    def _vendor_free(self, block: Block) -> None:
        status = self._api.fl_free(self.device.local_index, block.ptr)
        self.stats.reserved -= block.size
        self.stats.vendor_frees += 1
        if status != abi.SUCCESS:
            try:
                self.device.plugin.check(status, f"fl_free(device=fl:{self.device.index})")
            except VendorError as exc:   # a leak is better than a crash on the free path
                logger.error("%s", exc)
